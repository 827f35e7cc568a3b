// SPDX-License-Identifier: MIT
// bench/read_floor.cu: the achievable floor of a memory-bound GEMM: a kernel
// that only reads the same bytes, timed the same way (one call between its
// own event pair, cold or hot); and of a quantizer, a kernel that reads and
// writes as many bytes as it does. A 33 MB cold read on an H200 takes about
// 12 us this way, not the 7.8 us that bytes / copy bandwidth says: the launch
// and the ramp up and down of a few-microsecond kernel are a fixed cost no
// GEMM can avoid, so the decode cases are judged against this.
//
// The kernel: a grid-stride loop of 16-byte ld.global.nc, four in flight per
// thread, 2048 threads per SM (the fastest of the variants tried: 8 rather
// than 4 loads in flight, one contiguous slice per CTA, and bulk copies into
// a shared-memory ring all read 33 MB within 4 % of it).
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

namespace qgbench {

namespace {

constexpr int kThreads = 256;
constexpr int kInFlight = 4;

// The n 16-byte words at p, each handed to use(index, word): a grid-stride
// loop with kInFlight loads issued before any is used.
template <class Use>
__device__ __forceinline__ void stream_words(const int4* __restrict__ p, int64_t n, Use use) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  for (; i + (kInFlight - 1) * stride < n; i += kInFlight * stride) {
    int4 v[kInFlight];
#pragma unroll
    for (int u = 0; u < kInFlight; ++u) v[u] = __ldg(p + i + u * stride);
#pragma unroll
    for (int u = 0; u < kInFlight; ++u) use(i + u * stride, v[u]);
  }
  for (; i < n; i += stride) use(i, __ldg(p + i));
}

__global__ void __launch_bounds__(kThreads) read_bytes_kernel(const int4* __restrict__ p, int64_t n16,
                                                              const uint8_t* __restrict__ tail, int tail_bytes,
                                                              int* sink) {
  int x = 0;
  stream_words(p, n16, [&](int64_t, const int4& v) { x ^= v.x ^ v.y ^ v.z ^ v.w; });
  if (blockIdx.x == 0 && threadIdx.x < tail_bytes) x ^= tail[threadIdx.x];
  // Never true for the bench's data in practice; it keeps the loads alive.
  if (x == 0x7A5C3E1F) *sink = x;
}

// The move floor of a quantizer: reads n_in 16-byte words and writes n_out
// (< n_in) of them, the writes spread evenly through the reads as a
// quantizer's are: word i of the input is stored at output word
// floor(i * n_out / n_in) when that index is new (ratio as 32-bit fixed
// point, no division per word).
__global__ void __launch_bounds__(kThreads) move_bytes_kernel(const int4* __restrict__ in, int64_t n_in,
                                                              int4* __restrict__ out, int64_t n_out, uint64_t ratio) {
  auto slot = [ratio](int64_t w) { return static_cast<int64_t>((static_cast<uint64_t>(w) * ratio) >> 32); };
  stream_words(in, n_in, [&](int64_t w, const int4& v) {
    const int64_t j = slot(w);
    if ((w == 0 || j != slot(w - 1)) && j < n_out) out[j] = v;
  });
}

}  // namespace

// Reads in_bytes at in and writes out_bytes (at most in_bytes) at out, both
// 16-byte aligned, on `stream`; "" or the error.
std::string gpu_move_bytes(const void* in, int64_t in_bytes, void* out, int64_t out_bytes, int sms,
                           cudaStream_t stream) {
  const int64_t n_in = in_bytes / 16, n_out = out_bytes / 16;
  if (n_in == 0 || n_out > n_in) return "move_floor: needs 0 < out_bytes <= in_bytes";
  const uint64_t ratio = static_cast<uint64_t>((static_cast<unsigned __int128>(n_out) << 32) / n_in);
  move_bytes_kernel<<<sms * (2048 / kThreads), kThreads, 0, stream>>>(static_cast<const int4*>(in), n_in,
                                                                      static_cast<int4*>(out), n_out, ratio);
  const cudaError_t e = cudaGetLastError();
  return e == cudaSuccess ? std::string() : std::string("move_floor: ") + cudaGetErrorString(e);
}

// Reads `bytes` at p (16-byte aligned) on `stream`; "" or the error.
std::string gpu_read_bytes(const void* p, int64_t bytes, int sms, int* sink, cudaStream_t stream) {
  const int64_t n16 = bytes / 16;
  const int tail = static_cast<int>(bytes % 16);
  read_bytes_kernel<<<sms * (2048 / kThreads), kThreads, 0, stream>>>(
      static_cast<const int4*>(p), n16, static_cast<const uint8_t*>(p) + n16 * 16, tail, sink);
  const cudaError_t e = cudaGetLastError();
  return e == cudaSuccess ? std::string() : std::string("read_floor: ") + cudaGetErrorString(e);
}

}  // namespace qgbench
