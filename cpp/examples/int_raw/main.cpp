// SPDX-License-Identifier: MIT
// int_raw: the integer entry points with the seed libraries' argument orders:
// int8_matmul (exact int32, and scaled fp32), seed 003's int4_matmul on
// int32-packed words, and int8_matmul_cuda on device pointers when qg has
// CUDA and a GPU is present. Each result is checked against a plain loop.
#include <qg/qg.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <vector>

#if INT_RAW_CUDA
#include <cuda_runtime.h>
#endif

namespace {

bool check(const qg::Status& s, const char* what) {
  if (s.ok()) return true;
  std::fprintf(stderr, "%s failed: %s\n", what, s.message().c_str());
  return false;
}

float half_to_float(uint16_t h) {
  const int e = (h >> 10) & 31, m = h & 1023;
  const float v = e == 0 ? std::ldexp(static_cast<float>(m), -24) : std::ldexp(static_cast<float>(m | 1024), e - 25);
  return (h & 0x8000) ? -v : v;
}

}  // namespace

int main() {
  const int64_t M = 64, N = 48, K = 200;
  std::mt19937 rng(11);
  std::uniform_int_distribution<int> i8(-128, 127), i4(-8, 7);
  std::vector<int8_t> A(M * K), B(K * N);  // B is [K, N], as seed 001 passes it
  for (int8_t& v : A) v = static_cast<int8_t>(i8(rng));
  for (int8_t& v : B) v = static_cast<int8_t>(i8(rng));
  std::vector<int64_t> ref(M * N, 0);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n)
      for (int64_t k = 0; k < K; ++k) ref[m * N + n] += int64_t{A[m * K + k]} * B[k * N + n];

  std::vector<int32_t> C(M * N);
  if (!check(qg::int8_matmul(A.data(), B.data(), C.data(), M, N, K, qg::Device::cpu()), "int8_matmul (cpu)")) return 1;
  int bad = 0;
  for (int64_t i = 0; i < M * N; ++i) bad += C[i] != ref[i];
  std::vector<float> Cf(M * N);
  const float sa = 1.0f / 127, sb = 1.0f / 64;
  if (!check(qg::int8_matmul(A.data(), B.data(), Cf.data(), M, N, K, sa, sb, 1.0f, qg::Device::cpu()),
             "int8_matmul fp32 (cpu)"))
    return 1;
  for (int64_t i = 0; i < M * N; ++i) bad += std::fabs(Cf[i] - ref[i] * double(sa) * sb) > 1e-5 * std::fabs(ref[i] * sa * sb) + 1e-6;
  std::printf("cpu:  int8_matmul %lldx%lldx%lld: %d of %lld outputs off (int32 exact, fp32 scaled)\n",
              static_cast<long long>(M), static_cast<long long>(N), static_cast<long long>(K), bad,
              static_cast<long long>(2 * M * N));

  // Seed 003: eight values per int32 word, v + 8 in bits 4i..4i+3, B packed along K.
  const int64_t K4 = 64;
  std::vector<int> a4(M * K4), b4(K4 * N);
  for (int& v : a4) v = i4(rng);
  for (int& v : b4) v = i4(rng);
  std::vector<int32_t> ap(M * K4 / 8, 0), bp(K4 / 8 * N, 0);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t k = 0; k < K4; ++k)
      ap[m * (K4 / 8) + k / 8] |= static_cast<int32_t>(static_cast<uint32_t>(a4[m * K4 + k] + 8) << (4 * (k % 8)));
  for (int64_t k = 0; k < K4; ++k)
    for (int64_t n = 0; n < N; ++n)
      bp[(k / 8) * N + n] |= static_cast<int32_t>(static_cast<uint32_t>(b4[k * N + n] + 8) << (4 * (k % 8)));
  std::vector<float> scale_a(M, 0.05f), scale_b(N, 0.1f);
  std::vector<uint16_t> c16(M * N);
  if (!check(qg::int4_matmul(ap.data(), bp.data(), scale_a.data(), scale_b.data(), c16.data(), M, N, K4,
                             qg::Device::cpu()),
             "int4_matmul (cpu)"))
    return 1;
  int bad4 = 0;
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double r = 0;
      for (int64_t k = 0; k < K4; ++k) r += a4[m * K4 + k] * b4[k * N + n];
      r *= 0.05 * 0.1;
      bad4 += std::fabs(half_to_float(c16[m * N + n]) - r) > 1e-3 * std::fabs(r) + 1e-3;
    }
  std::printf("cpu:  int4_matmul (int32-packed) %lldx%lldx%lld: %d outputs off\n", static_cast<long long>(M),
              static_cast<long long>(N), static_cast<long long>(K4), bad4);
  bad += bad4;

#if INT_RAW_CUDA
  if (qg::cuda_available()) {
    int8_t *dA, *dB;
    int32_t* dC;
    cudaMalloc(&dA, A.size());
    cudaMalloc(&dB, B.size());
    cudaMalloc(&dC, C.size() * sizeof(int32_t));
    cudaMemcpy(dA, A.data(), A.size(), cudaMemcpyHostToDevice);
    cudaMemcpy(dB, B.data(), B.size(), cudaMemcpyHostToDevice);
    // Seed 001's call, word for word.
    if (!check(qg::int8_matmul_cuda(dA, dB, dC, M, N, K, 1.0f / 127, 1.0f / 127, 1.0f, nullptr), "int8_matmul_cuda"))
      return 1;
    std::vector<int32_t> Cg(M * N);
    cudaMemcpy(Cg.data(), dC, Cg.size() * sizeof(int32_t), cudaMemcpyDeviceToHost);
    int bad_gpu = 0;
    for (int64_t i = 0; i < M * N; ++i) bad_gpu += Cg[i] != ref[i];
    std::printf("cuda: int8_matmul_cuda: %d of %lld outputs off\n", bad_gpu, static_cast<long long>(M * N));
    bad += bad_gpu;
    cudaFree(dA);
    cudaFree(dB);
    cudaFree(dC);
  } else {
    std::printf("cuda: skipped (no GPU visible)\n");
  }
#endif
  return bad == 0 ? 0 : 1;
}
