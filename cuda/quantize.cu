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
// A small tensor (one activation row of 14336 values: 14 such warps) is a
// latency chain, not a stream: a warp's row loads, then one lane's serial
// pass over its block, then the stores, with the GPU otherwise idle. Below
// kFewChunks warp chunks each warp takes 8 blocks instead of 32 (a quarter of
// the loads per warp, four times the warps). Measured on an H200 at 1 x 14336:
// 8.4 -> 7.9 us; what is left is the serial per-lane block pass, which a
// lane-parallel block quantizer would cut.
#include <cstdint>
#include <string>
#include <vector>

#include "format_dispatch.h"
#include "quantize.cuh"

namespace qg::detail::cuda {
namespace {

constexpr int kWarpsPerCta = 4;
constexpr int kBlocksPerWarp = 32;
constexpr int kFewBlocksPerWarp = 8;
constexpr int64_t kFewChunks = 1024;  // of 32 blocks: below this, 8-block warps
constexpr int kPitch = 33;              // floats per staged block (32 + 1 pad)
constexpr int kMaxBytesPerBlock = 36;   // block_q8_1
constexpr int64_t kMaxGrid = 1 << 20;   // grid-stride beyond this

template <DType T>
__device__ __forceinline__ float load_value(const uint8_t* row, int64_t i, bool aligned) {
  if constexpr (T == DType::f32) {
    if (aligned) return reinterpret_cast<const float*>(row)[i];
    const uint8_t* p = row + 4 * i;
    return bits_float(static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) |
                      (static_cast<uint32_t>(p[2]) << 16) | (static_cast<uint32_t>(p[3]) << 24));
  } else {
    const uint16_t h = aligned ? reinterpret_cast<const uint16_t*>(row)[i] : load_u16_b1(row + 2 * i);
    if constexpr (T == DType::f16) return fp16_to_fp32(h);
    else return bf16_to_fp32(h);
  }
}

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

template <Format F, DType T, int kBlocks>
__global__ void __launch_bounds__(kWarpsPerCta * 32)
quantize_kernel(const uint8_t* __restrict__ x, int64_t rows, int64_t nb, int64_t x_row_stride,
                uint8_t* __restrict__ y, int64_t y_row_stride, Q8_1Convention convention,
                bool x_aligned) {
  using Block = typename BlockOf<F>::type;
  constexpr int kBpb = static_cast<int>(sizeof(Block));
  constexpr int kEsize = T == DType::f32 ? 4 : 2;
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
#pragma unroll 8
    for (int i = 0; i < nblk; ++i) xs[i * kPitch + lane] = load_value<T>(xrow, i * 32 + lane, x_aligned);
    __syncwarp();
    if (lane < nblk) quantize_block<F>(xs + lane * kPitch, reinterpret_cast<Block*>(ys + lane * kBpb), convention);
    __syncwarp();
    copy_bytes_warp(y + row * y_row_stride + b0 * kBpb, ys, nblk * kBpb, lane);
    __syncwarp();  // shared buffers are reused by the next chunk
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
  const int64_t chunks = rows * ((nb + blocks_per_warp - 1) / blocks_per_warp);
  const int64_t ctas = (chunks + kWarpsPerCta - 1) / kWarpsPerCta;
  return static_cast<unsigned>(ctas < 1 ? 1 : (ctas > kMaxGrid ? kMaxGrid : ctas));
}

template <Format F, int kBlocks>
void launch_quantize(const QuantizeArgs& a, cudaStream_t stream) {
  const unsigned grid = grid_for(a.rows, a.k / 32, kBlocks);
  const int esize = a.x_dtype == DType::f32 ? 4 : 2;
  const bool aligned = is_aligned(a.x, esize);
  const uint8_t* x = static_cast<const uint8_t*>(a.x);
  uint8_t* y = static_cast<uint8_t*>(a.y);
  const int64_t nb = a.k / 32;
  switch (a.x_dtype) {
    case DType::f16:
      quantize_kernel<F, DType::f16, kBlocks><<<grid, kWarpsPerCta * 32, 0, stream>>>(
          x, a.rows, nb, a.x_row_stride, y, a.y_row_stride, a.q8_1_convention, aligned);
      break;
    case DType::bf16:
      quantize_kernel<F, DType::bf16, kBlocks><<<grid, kWarpsPerCta * 32, 0, stream>>>(
          x, a.rows, nb, a.x_row_stride, y, a.y_row_stride, a.q8_1_convention, aligned);
      break;
    default:
      quantize_kernel<F, DType::f32, kBlocks><<<grid, kWarpsPerCta * 32, 0, stream>>>(
          x, a.rows, nb, a.x_row_stride, y, a.y_row_stride, a.q8_1_convention, aligned);
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
  const int64_t nb = args.k / 32;
  const bool few = args.rows * ((nb + kBlocksPerWarp - 1) / kBlocksPerWarp) < kFewChunks;
  with_format(args.format, [&](auto tag) {
    constexpr Format kF = decltype(tag)::value;
    if (few)
      launch_quantize<kF, kFewBlocksPerWarp>(args, to_cuda(stream));
    else
      launch_quantize<kF, kBlocksPerWarp>(args, to_cuda(stream));
  });
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
