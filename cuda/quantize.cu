// SPDX-License-Identifier: MIT
// cuda/quantize.cu: fp32/fp16/bf16 rows -> Q4_0 / Q8_0 / Q8_1 blocks and back.
//
// The block arithmetic is quant_block.h's, called on the device, so the bytes
// equal the CPU backend's. What this file adds is the memory layout: one warp
// owns 32 consecutive blocks of a row (1024 values). Reading them lane-by-lane
// gives 128-byte coalesced loads; each lane then quantizes one block out of
// shared memory, and the warp writes the packed bytes back contiguously. The
// shared row pitch is 33 floats so that lane l reading its block's value j hits
// bank (l + j) % 32: conflict-free, where a pitch of 32 would serialise 32-way.
//
// That layout is for streams. A small tensor (one activation row of 14336
// values: 14 such warps) is a latency chain instead: a warp's row loads, then
// one lane's serial pass over 32 values (two loops, a division), then the
// stores, with the GPU otherwise idle: 8.4 us on an H200. Below kFewChunks warp
// chunks, quantize_lanes_kernel gives each warp one block at a time, one value
// per lane: the block's max and code sum are warp reductions (both exact, so
// the bytes are the same), and the chain is a few dozen instructions: 4.5 us
// at 1 x 14336 (the rest is launch and one DRAM round trip). From about 512
// chunks up the streaming layout is faster again.
#include <cstdint>
#include <string>
#include <vector>

#include "format_dispatch.h"
#include "quantize.cuh"
#include "quantize_warp.cuh"

namespace qg::detail::cuda {
namespace {

constexpr int kWarpsPerCta = 4;
constexpr int kBlocksPerWarp = 32;
constexpr int64_t kFewChunks = 512;  // of 32 blocks: below this, one block per warp (measured crossover)
constexpr int kPitch = 33;              // floats per staged block (32 + 1 pad)
constexpr int kMaxBytesPerBlock = 36;   // block_q8_1
constexpr int64_t kMaxGrid = 1 << 20;   // grid-stride beyond this

// Copies a warp's packed bytes between global and shared memory, 16 bits at a
// time when the global side allows it (every block size here is even, so
// only the row base and stride decide).
__device__ __forceinline__ void copy_bytes_warp(uint8_t* dst, const uint8_t* src, int bytes, int lane) {
  if (((reinterpret_cast<uintptr_t>(dst) | reinterpret_cast<uintptr_t>(src)) & 1) == 0) {
    uint16_t* d16 = reinterpret_cast<uint16_t*>(dst);
    const uint16_t* s16 = reinterpret_cast<const uint16_t*>(src);
    for (int i = lane; i < bytes / 2; i += 32) d16[i] = s16[i];
  } else {
    for (int i = lane; i < bytes; i += 32) dst[i] = src[i];
  }
}

template <Format F, DType T>
__global__ void __launch_bounds__(kWarpsPerCta * 32)
quantize_kernel(const uint8_t* __restrict__ x, int64_t rows, int64_t nb, int64_t x_row_stride,
                uint8_t* __restrict__ y, int64_t y_row_stride, Q8_1Convention convention,
                bool x_aligned) {
  using Block = typename BlockOf<F>::type;
  constexpr int kBpb = static_cast<int>(sizeof(Block));
  constexpr int kEsize = T == DType::f32 ? 4 : 2;
  constexpr int kBlocks = kBlocksPerWarp;
  __shared__ float sx[kWarpsPerCta][kBlocks * kPitch];
  __shared__ __align__(16) uint8_t sy[kWarpsPerCta][kBlocks * kMaxBytesPerBlock];

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t chunks_per_row = (nb + kBlocks - 1) / kBlocks;
  const int64_t chunks = rows * chunks_per_row;
  float* xs = sx[warp];
  uint8_t* ys = sy[warp];
  for (int64_t c = static_cast<int64_t>(blockIdx.x) * kWarpsPerCta + warp; c < chunks;
       c += static_cast<int64_t>(gridDim.x) * kWarpsPerCta) {
    const int64_t row = c / chunks_per_row;
    const int64_t b0 = (c % chunks_per_row) * kBlocks;
    const int nblk = static_cast<int>(min(static_cast<int64_t>(kBlocks), nb - b0));
    const uint8_t* xrow = x + (row * x_row_stride + b0 * 32) * kEsize;
    for (int i = 0; i < nblk; ++i) xs[i * kPitch + lane] = load_value<T>(xrow, i * 32 + lane, x_aligned);
    __syncwarp();
    if (lane < nblk) quantize_block<F>(xs + lane * kPitch, reinterpret_cast<Block*>(ys + lane * kBpb), convention);
    __syncwarp();
    copy_bytes_warp(y + row * y_row_stride + b0 * kBpb, ys, nblk * kBpb, lane);
    __syncwarp();  // shared buffers are reused by the next chunk
  }
}

// Writes `bytes` little-endian bytes of v at p (any alignment).
__device__ __forceinline__ void store_le(uint8_t* p, uint32_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}

// One block per warp, value `lane` of it per lane: quant_block.h's block
// quantizers with their loops turned into warp reductions that give the same
// numbers (a max and an integer sum do not depend on the order; Q4_0's "first
// value of largest magnitude" is a (magnitude, index) reduction; the ggml_cuda
// convention's fp32 sum, which does, is added in index order).
template <Format F, DType T>
__global__ void __launch_bounds__(kWarpsPerCta * 32)
quantize_lanes_kernel(const uint8_t* __restrict__ x, int64_t rows, int64_t nb, int64_t x_row_stride,
                      uint8_t* __restrict__ y, int64_t y_row_stride, Q8_1Convention convention, bool x_aligned) {
  constexpr unsigned kAll = 0xFFFFFFFFu;
  constexpr int kEsize = T == DType::f32 ? 4 : 2;
  constexpr int kBpb = static_cast<int>(sizeof(typename BlockOf<F>::type));
  const int lane = threadIdx.x % 32;
  const int64_t blocks = rows * nb;
  for (int64_t blk = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32; blk < blocks;
       blk += static_cast<int64_t>(gridDim.x) * blockDim.x / 32) {
    const int64_t row = blk / nb, b = blk % nb;
    const float v = load_value<T>(x + (row * x_row_stride + b * 32) * kEsize, lane, x_aligned);
    uint8_t* yb = y + row * y_row_stride + b * kBpb;
    const bool finite = __all_sync(kAll, is_finite(v));
    const float a = fabsf(v);
    if constexpr (F == Format::q4_0) {
      if (!finite) {
        if (lane == 0) store_le(yb, kFp16NaN, 2);
        if (lane < 16) yb[2 + lane] = 0x88;
        continue;
      }
      // The reference keeps the first value whose magnitude beats all before.
      float amax = a;
      int at = lane;
#pragma unroll
      for (int off = 16; off > 0; off >>= 1) {
        const float oa = __shfl_xor_sync(kAll, amax, off);
        const int oat = __shfl_xor_sync(kAll, at, off);
        if (oa > amax || (oa == amax && oat < at)) amax = oa, at = oat;
      }
      // All zeros: the reference's max stays +0 (never x[0], which may be -0).
      const float max = amax == 0.0f ? 0.0f : __shfl_sync(kAll, v, at);
      const float d = div_rn(max, -8.0f);
      const uint32_t code = q4_0_code(mul_rn(v, inverse_scale(d)));
      const uint32_t hi = __shfl_down_sync(kAll, code, 16);
      if (lane == 0) store_le(yb, fp32_to_fp16(d), 2);
      if (lane < 16) yb[2 + lane] = static_cast<uint8_t>(code | (hi << 4));
    } else {
      constexpr int kCodes = F == Format::q8_1 ? 4 : 2;  // byte offset of the codes
      if (!finite) {
        if (lane == 0) store_le(yb, kFp16NaN, 2);
        if (F == Format::q8_1 && lane == 1) store_le(yb + 2, kFp16NaN, 2);
        yb[kCodes + lane] = 0;
        continue;
      }
      if (F == Format::q8_1 && convention == Q8_1Convention::ggml_cuda) {
        const float amax = warp_abs_max(v), d = div_rn(amax, 127.0f);
        float xsum = 0.0f;
        for (int j = 0; j < 32; ++j) xsum = add_rn(xsum, __shfl_sync(kAll, v, j));
        yb[kCodes + lane] = static_cast<uint8_t>(amax == 0.0f ? 0 : q8_code(div_rn(v, d)));
        if (lane == 0) store_le(yb, fp32_to_fp16(d), 2);
        if (lane == 1) store_le(yb + 2, fp32_to_fp16(xsum), 2);
        continue;
      }
      const auto [q, d] = warp_quantize_q8(v);
      yb[kCodes + lane] = static_cast<uint8_t>(q);
      if (lane == 0) store_le(yb, fp32_to_fp16(d), 2);
      if constexpr (F == Format::q8_1) {
        int sum = q;
#pragma unroll
        for (int off = 16; off > 0; off >>= 1) sum += __shfl_xor_sync(kAll, sum, off);
        if (lane == 1) store_le(yb + 2, fp32_to_fp16(mul_rn(static_cast<float>(sum), d)), 2);
      }
    }
  }
}

template <Format F>
__global__ void __launch_bounds__(kWarpsPerCta * 32)
dequantize_kernel(const uint8_t* __restrict__ xq, int64_t rows, int64_t nb, int64_t xq_row_stride,
                  float* __restrict__ y, int64_t y_row_stride) {
  using Block = typename BlockOf<F>::type;
  constexpr int kBpb = static_cast<int>(sizeof(Block));
  __shared__ __align__(16) uint8_t sq[kWarpsPerCta][kBlocksPerWarp * kMaxBytesPerBlock];
  __shared__ float sy[kWarpsPerCta][kBlocksPerWarp * kPitch];

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t chunks_per_row = (nb + kBlocksPerWarp - 1) / kBlocksPerWarp;
  const int64_t chunks = rows * chunks_per_row;
  uint8_t* qs = sq[warp];
  float* ys = sy[warp];
  for (int64_t c = static_cast<int64_t>(blockIdx.x) * kWarpsPerCta + warp; c < chunks;
       c += static_cast<int64_t>(gridDim.x) * kWarpsPerCta) {
    const int64_t row = c / chunks_per_row;
    const int64_t b0 = (c % chunks_per_row) * kBlocksPerWarp;
    const int nblk = static_cast<int>(min(static_cast<int64_t>(kBlocksPerWarp), nb - b0));
    copy_bytes_warp(qs, xq + row * xq_row_stride + b0 * kBpb, nblk * kBpb, lane);
    __syncwarp();
    if (lane < nblk) dequantize_block<F>(reinterpret_cast<const Block*>(qs + lane * kBpb), ys + lane * kPitch);
    __syncwarp();
    float* yrow = y + row * y_row_stride + b0 * 32;
    for (int i = 0; i < nblk; ++i) yrow[i * 32 + lane] = ys[i * kPitch + lane];
    __syncwarp();
  }
}

unsigned grid_for(int64_t rows, int64_t nb, int blocks_per_warp = kBlocksPerWarp) {
  const int64_t chunks = rows * ((nb + blocks_per_warp - 1) / blocks_per_warp);  // warps
  const int64_t ctas = (chunks + kWarpsPerCta - 1) / kWarpsPerCta;
  return static_cast<unsigned>(ctas < 1 ? 1 : (ctas > kMaxGrid ? kMaxGrid : ctas));
}

template <Format F, DType T>
void launch_quantize_from(const QuantizeArgs& a, cudaStream_t stream) {
  const int64_t nb = a.k / 32;
  const bool few = a.rows * ((nb + kBlocksPerWarp - 1) / kBlocksPerWarp) < kFewChunks;
  auto* kernel = few ? quantize_lanes_kernel<F, T> : quantize_kernel<F, T>;
  const unsigned grid = grid_for(a.rows, nb, few ? 1 : kBlocksPerWarp);
  const int esize = T == DType::f32 ? 4 : 2;
  kernel<<<grid, kWarpsPerCta * 32, 0, stream>>>(static_cast<const uint8_t*>(a.x), a.rows, nb, a.x_row_stride,
                                                 static_cast<uint8_t*>(a.y), a.y_row_stride, a.q8_1_convention,
                                                 is_aligned(a.x, esize));
}

template <Format F>
void launch_quantize(const QuantizeArgs& a, cudaStream_t stream) {
  switch (a.x_dtype) {
    case DType::f16:
      launch_quantize_from<F, DType::f16>(a, stream);
      break;
    case DType::bf16:
      launch_quantize_from<F, DType::bf16>(a, stream);
      break;
    default:
      launch_quantize_from<F, DType::f32>(a, stream);
      break;
  }
}

std::string rows_k(int64_t rows, int64_t k) { return "rows=" + std::to_string(rows) + ", k=" + std::to_string(k); }

}  // namespace

bool quantize_can_run(const QuantizeArgs&, std::string*) { return true; }

Status quantize_run(const QuantizeArgs& args, Stream stream) {
  const char* fn = args.fn ? args.fn : format_traits(args.format).quantize_fn;
  if (args.rows <= 0 || args.k <= 0) return Status::success();
  DeviceGuard guard(args.device.id);
  if (Status s = guard_status(guard, fn, args.device.id); !s.ok()) return s;
  with_format(args.format, [&](auto tag) { launch_quantize<decltype(tag)::value>(args, to_cuda(stream)); });
  return launch_status(fn, [&] { return rows_k(args.rows, args.k); });
}

bool dequantize_can_run(const DequantizeArgs& args, std::string* why_not) {
  if (!is_aligned(args.y, alignof(float))) {
    if (why_not) *why_not = "output pointer is not 4-byte aligned";
    return false;
  }
  return true;
}

Status dequantize_run(const DequantizeArgs& args, Stream stream) {
  const char* fn = args.fn ? args.fn : format_traits(args.format).dequantize_fn;
  if (args.rows <= 0 || args.k <= 0) return Status::success();
  DeviceGuard guard(args.device.id);
  if (Status s = guard_status(guard, fn, args.device.id); !s.ok()) return s;
  const int64_t nb = args.k / 32;
  const unsigned grid = grid_for(args.rows, nb);
  const uint8_t* xq = static_cast<const uint8_t*>(args.xq);
  const cudaStream_t st = to_cuda(stream);
  with_format(args.format, [&](auto tag) {
    dequantize_kernel<decltype(tag)::value><<<grid, kWarpsPerCta * 32, 0, st>>>(
        xq, args.rows, nb, args.xq_row_stride, args.y, args.y_row_stride);
  });
  return launch_status(fn, [&] { return rows_k(args.rows, args.k); });
}

}  // namespace qg::detail::cuda
