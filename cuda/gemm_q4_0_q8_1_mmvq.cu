// SPDX-License-Identifier: MIT
// cuda/gemm_q4_0_q8_1_mmvq.cu: N <= 8, the decode case (ggml's mul_mat_vec_q).
//
// With N this small every W byte is used N times at most, so the kernel is a
// stream over W and its only job is to keep enough loads in flight: one CTA
// of 128 threads per 1-2 rows of W, the threads splitting K so that a row's
// 18-byte blocks are read by consecutive lanes. Each thread takes half a
// block (8 code bytes = elements j..j+7 and j+16..j+23), which is two 32-bit
// words of W against four of A: enough DP4A work per load without leaving
// short rows (K = 4096 -> 256 halves) with idle threads. The A columns (N x K
// Q8_1, a few KB) stay in L1/L2 and are re-read per row.
// Partial sums are reduced with warp shuffles, then across the 4 warps in
// shared memory, in a fixed order: results are deterministic.
#include <algorithm>

#include "gemm_q4_0_q8_1.cuh"
#include "quant_block.h"

namespace qg::detail::cuda {
namespace {

constexpr int kThreads = 128;
constexpr int kWarps = kThreads / 32;
constexpr int64_t kMaxGrid = 0x7FFFFFFF;

template <int kCols, int kRows>
__global__ void __launch_bounds__(kThreads)
gemm_mmvq_kernel(const uint8_t* __restrict__ w, const uint8_t* __restrict__ a, EpilogueParams ep,
                 int64_t m, int64_t nb, int64_t ldw, int64_t lda) {
  __shared__ float partial[kWarps][kRows * kCols];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t halves = 2 * nb;

  for (int64_t row0 = static_cast<int64_t>(blockIdx.x) * kRows; row0 < m;
       row0 += static_cast<int64_t>(gridDim.x) * kRows) {
    // Rows past the end are computed on the last row and never stored: that
    // keeps the inner loop free of per-row branches.
    const uint8_t* wrow[kRows];
#pragma unroll
    for (int r = 0; r < kRows; ++r) wrow[r] = w + min(row0 + r, m - 1) * ldw;

    float acc[kRows][kCols];
#pragma unroll
    for (int r = 0; r < kRows; ++r)
#pragma unroll
      for (int j = 0; j < kCols; ++j) acc[r][j] = 0.0f;

    for (int64_t h = threadIdx.x; h < halves; h += kThreads) {
      const int64_t b = h >> 1;
      const int part = static_cast<int>(h & 1) * 8;  // byte offset of this half's codes

      int alo[kCols][2], ahi[kCols][2];
      float da[kCols];
#pragma unroll
      for (int j = 0; j < kCols; ++j) {
        const uint8_t* ab = a + j * lda + b * kQ8_1Bytes;
        da[j] = fp16_to_fp32(load_u16_b2(ab));
        alo[j][0] = load_int_b4(ab + 4 + part);
        alo[j][1] = load_int_b4(ab + 4 + part + 4);
        ahi[j][0] = load_int_b4(ab + 4 + 16 + part);
        ahi[j][1] = load_int_b4(ab + 4 + 16 + part + 4);
      }
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        const uint8_t* wb = wrow[r] + b * kQ4_0Bytes;
        const float dw = fp16_to_fp32(load_u16_b2(wb));
        const uint32_t v0 = static_cast<uint32_t>(load_int_b2(wb + 2 + part));
        const uint32_t v1 = static_cast<uint32_t>(load_int_b2(wb + 2 + part + 4));
        const int lo0 = q4_0_codes_minus_8(v0 & 0x0F0F0F0Fu);
        const int lo1 = q4_0_codes_minus_8(v1 & 0x0F0F0F0Fu);
        const int hi0 = q4_0_codes_minus_8((v0 >> 4) & 0x0F0F0F0Fu);
        const int hi1 = q4_0_codes_minus_8((v1 >> 4) & 0x0F0F0F0Fu);
#pragma unroll
        for (int j = 0; j < kCols; ++j) {
          int sumi = dp4a(lo0, alo[j][0], 0);
          sumi = dp4a(lo1, alo[j][1], sumi);
          sumi = dp4a(hi0, ahi[j][0], sumi);
          sumi = dp4a(hi1, ahi[j][1], sumi);
          const float d = dw * da[j];
          if (is_finite(d)) {
            acc[r][j] += d * static_cast<float>(sumi);
          } else {
            // A non-finite scale must meet the whole block's integer sum (the
            // documented d * sum), not this half's: Inf * 0 would be NaN where
            // the block sum is not 0. The two halves of a block are on lanes
            // 2t and 2t + 1, which share d and so take this branch together.
            const unsigned pair = 3u << (lane & ~1);
            const int block_sum = sumi + __shfl_xor_sync(pair, sumi, 1);
            if ((h & 1) == 0) acc[r][j] += d * static_cast<float>(block_sum);
          }
        }
      }
    }

#pragma unroll
    for (int r = 0; r < kRows; ++r)
#pragma unroll
      for (int j = 0; j < kCols; ++j) {
        float v = acc[r][j];
#pragma unroll
        for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xFFFFFFFFu, v, off);
        if (lane == 0) partial[warp][r * kCols + j] = v;
      }
    __syncthreads();
    if (threadIdx.x < kRows * kCols) {
      const int r = threadIdx.x / kCols, j = threadIdx.x % kCols;
      float v = partial[0][threadIdx.x];
#pragma unroll
      for (int i = 1; i < kWarps; ++i) v += partial[i][threadIdx.x];
      if (row0 + r < m) epilogue_store(ep, row0 + r, j, v);
    }
    __syncthreads();  // partial[] is reused by the next row group
  }
}

template <int kCols>
void launch(const GemmArgs& g, cudaStream_t stream) {
  // Two rows per CTA once there are several columns: each W load then feeds
  // more DP4As and the A words loaded are reused across both rows.
  constexpr int kRows = kCols == 1 ? 1 : 2;
  const int64_t m = g.a.rows;
  const int64_t ctas = std::min<int64_t>((m + kRows - 1) / kRows, kMaxGrid);
  gemm_mmvq_kernel<kCols, kRows><<<static_cast<unsigned>(ctas), kThreads, 0, stream>>>(
      static_cast<const uint8_t*>(g.a.data), static_cast<const uint8_t*>(g.b.data), epilogue_params(g), m,
      g.a.k / 32, g.a.row_stride, g.b.row_stride);
}

}  // namespace

bool gemm_mmvq_can_run(const GemmArgs& args, std::string* why_not) {
  if (args.b.rows > 8) {
    if (why_not) *why_not = "N=" + std::to_string(args.b.rows) + " > 8 (GEMV kernel)";
    return false;
  }
  return gemm_operands_aligned(args, why_not);
}

Status gemm_mmvq_run(const GemmArgs& args, Stream stream) {
  // K = 0 needs no special case: no halves, and C is written with zeros.
  if (args.a.rows <= 0 || args.b.rows <= 0) return Status::success();
  DeviceGuard guard(args.device.id);
  if (Status s = guard_status(guard, args.fn, args.device.id); !s.ok()) return s;
  const cudaStream_t st = to_cuda(stream);
  switch (args.b.rows) {
    case 1: launch<1>(args, st); break;
    case 2: launch<2>(args, st); break;
    case 3: launch<3>(args, st); break;
    case 4: launch<4>(args, st); break;
    case 5: launch<5>(args, st); break;
    case 6: launch<6>(args, st); break;
    case 7: launch<7>(args, st); break;
    case 8: launch<8>(args, st); break;
    default:
      return Status(StatusCode::unsupported,
                    std::string(args.fn) + " (cuda_mmvq): N > 8 (" + gemm_shape(args) + ")");
  }
  return gemm_launch_status(args);
}

}  // namespace qg::detail::cuda
