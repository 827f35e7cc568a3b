// SPDX-License-Identifier: MIT
// gemm_raw: quantize W and A, then C = W . A^T through qg's raw-pointer API,
// on the CPU and, when qg has CUDA and a GPU is present, on a CUDA stream.
#include <qg/qg.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#if GEMM_RAW_CUDA
#include <cuda_runtime.h>
#endif

namespace {

bool check(const qg::Status& s, const char* what) {
  if (s.ok()) return true;
  std::fprintf(stderr, "%s failed: %s\n", what, s.message().c_str());
  return false;
}

}  // namespace

int main() {
  const int64_t M = 256, N = 4, K = 1024, nb = K / 32;
  std::mt19937 rng(7);
  std::normal_distribution<float> dist;
  std::vector<float> w(M * K), a(N * K), c(M * N), c_gpu(M * N);
  for (float& v : w) v = dist(rng);
  for (float& v : a) v = dist(rng);

  std::vector<uint8_t> wq(M * nb * sizeof(qg::block_q4_0)), aq(N * nb * sizeof(qg::block_q8_1));
  qg::QuantizeArgs qw{qg::Format::q4_0, w.data(), qg::DType::f32, M, K, K, wq.data(), nb * 18, qg::Device::cpu()};
  qg::QuantizeArgs qa{qg::Format::q8_1, a.data(), qg::DType::f32, N, K, K, aq.data(), nb * 36, qg::Device::cpu()};
  if (!check(qg::quantize(qw), "quantize W") || !check(qg::quantize(qa), "quantize A") ||
      !check(qg::gemm_q4_0_q8_1(wq.data(), aq.data(), c.data(), M, N, K, qg::Device::cpu()), "gemm (cpu)"))
    return 1;

  double err = 0, ref = 0;
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double r = 0;
      for (int64_t k = 0; k < K; ++k) r += double(w[m * K + k]) * a[n * K + k];
      err += (c[m * N + n] - r) * (c[m * N + n] - r);
      ref += r * r;
    }
  std::printf("cpu:  C[0,0]=%.4f  NMSE vs fp32 W.A^T = %.3e\n", c[0], err / ref);

  // The generic call: a linear layer's y = relu(x @ W^T + bias) in bfloat16,
  // written [N, M] (transposed C: ldc = 1, ldc_n = M).
  std::vector<float> bias(M, 0.25f);
  std::vector<uint16_t> y(N * M);
  qg::GemmArgs g;
  g.a = qg::packed_operand(wq.data(), qg::Format::q4_0, M, K);
  g.b = qg::packed_operand(aq.data(), qg::Format::q8_1, N, K);
  g.c = y.data();
  g.c_dtype = qg::DType::bf16;
  g.ldc = 1;
  g.ldc_n = M;
  g.epilogue.bias = bias.data();
  g.epilogue.activation = qg::Activation::relu;
  g.device = qg::Device::cpu();
  if (!check(qg::gemm(g), "gemm with epilogue (cpu)")) return 1;
  qg::Explanation why;
  if (!check(qg::explain(g, &why), "explain")) return 1;
  int bad = 0;
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      uint32_t bits = static_cast<uint32_t>(y[n * M + m]) << 16;
      float v;
      std::memcpy(&v, &bits, 4);
      const float want = std::fmax(c[m * N + n] + 0.25f, 0.0f);
      bad += std::fabs(v - want) > 1e-2f * std::fabs(want) + 1e-6f;
    }
  std::printf("cpu:  %s (%s) ran %s; relu(x.W^T + bias) as bf16 [N, M]: %d of %lld off\n", why.op.c_str(),
              why.problem.c_str(), why.chosen.c_str(), bad, static_cast<long long>(M * N));
  if (bad) return 1;

#if GEMM_RAW_CUDA
  if (qg::cuda_available()) {
    void *dw, *da, *dc;
    cudaStream_t stream;
    cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
    cudaMalloc(&dw, wq.size());
    cudaMalloc(&da, aq.size());
    cudaMalloc(&dc, c.size() * sizeof(float));
    cudaMemcpyAsync(dw, wq.data(), wq.size(), cudaMemcpyHostToDevice, stream);
    cudaMemcpyAsync(da, aq.data(), aq.size(), cudaMemcpyHostToDevice, stream);
    if (!check(qg::gemm_q4_0_q8_1(dw, da, static_cast<float*>(dc), M, N, K, qg::Device::cuda(0), stream),
               "gemm (cuda)"))
      return 1;
    cudaMemcpyAsync(c_gpu.data(), dc, c.size() * sizeof(float), cudaMemcpyDeviceToHost, stream);
    cudaStreamSynchronize(stream);
    double diff = 0;
    for (size_t i = 0; i < c.size(); ++i) diff = std::fmax(diff, std::fabs(c[i] - c_gpu[i]));
    std::printf("cuda: C[0,0]=%.4f  max |cuda - cpu| = %.3e\n", c_gpu[0], diff);
    cudaFree(dw);
    cudaFree(da);
    cudaFree(dc);
    cudaStreamDestroy(stream);
  } else {
    std::printf("cuda: skipped (no GPU visible)\n");
  }
#endif
  return err / ref < 1.5e-2 ? 0 : 1;
}
