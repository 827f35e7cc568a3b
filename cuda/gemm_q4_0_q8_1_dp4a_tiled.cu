// SPDX-License-Identifier: MIT
// cuda/gemm_q4_0_q8_1_dp4a_tiled.cu: the general case, any M, N, K.
//
// Each CTA (256 threads) owns a 64x64 tile of C and walks K four Q4_0 blocks
// (128 values) at a time. Per step it stages both operands in shared memory
// as signed bytes: W's nibbles are unpacked once there, code - 8, so the inner
// loop is one DP4A per 4x4 byte pair with no per-element offset fix-up, and
// each W word is reused by 64 columns, each A word by 64 rows (the DP4A:load
// ratio a 4x4 register tile per thread buys). The scales go to shared memory
// as fp32, transposed ([block][row]) so that 16 lanes reading 16 consecutive
// rows' scales hit 16 different banks.
// Rows of staged words have a pitch of 33 ints: the 16 column-threads of a
// warp reading word k of rows tx + 16j then fall in banks (tx + 16j + k) % 32,
// all different; a pitch of 32 would put them all in one bank.
// Integer sums are exact per block; the fp32 accumulation order is fixed, so
// results are deterministic.
#include <algorithm>

#include "gemm_q4_0_q8_1.cuh"
#include "quant_block.h"

namespace qg::detail::cuda {
namespace {

constexpr int kTileM = 64;
constexpr int kTileN = 64;
constexpr int kBlocksPerStep = 4;             // Q4_0/Q8_1 blocks of K per step
constexpr int kWords = kBlocksPerStep * 8;    // 32-bit words (4 codes) per row and step
constexpr int kPitch = kWords + 1;
constexpr int kThreads = 256;
constexpr int kThreadsN = 16;                 // threads along N; 256 / 16 = 16 along M
constexpr int kPerThread = 4;                 // 4x4 outputs per thread
constexpr int64_t kMaxGrid = 0x7FFFFFFF;
static_assert(kTileM * kBlocksPerStep == kThreads, "one W block per thread and step");
static_assert(kTileN * kBlocksPerStep == kThreads, "one A block per thread and step");
static_assert(kThreadsN * kPerThread == kTileN && (kThreads / kThreadsN) * kPerThread == kTileM,
              "thread grid covers the tile");

__global__ void __launch_bounds__(kThreads)
gemm_dp4a_tiled_kernel(const uint8_t* __restrict__ w, const uint8_t* __restrict__ a,
                       EpilogueParams ep, int64_t m, int64_t n, int64_t nb, int64_t ldw,
                       int64_t lda) {
  __shared__ int sw[kTileM][kPitch];
  __shared__ int sa[kTileN][kPitch];
  __shared__ float sdw[kBlocksPerStep][kTileM];
  __shared__ float sda[kBlocksPerStep][kTileN];

  const int tid = threadIdx.x;
  const int tx = tid % kThreadsN, ty = tid / kThreadsN;
  // Loader mapping: consecutive threads take consecutive blocks of one row,
  // so a warp reads 8 rows x 4 contiguous blocks.
  const int load_row = tid / kBlocksPerStep, load_blk = tid % kBlocksPerStep;

  const int64_t tiles_n = (n + kTileN - 1) / kTileN;
  const int64_t tiles = ((m + kTileM - 1) / kTileM) * tiles_n;
  for (int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    const int64_t m0 = (tile / tiles_n) * kTileM;
    const int64_t n0 = (tile % tiles_n) * kTileN;

    float acc[kPerThread][kPerThread];
#pragma unroll
    for (int i = 0; i < kPerThread; ++i)
#pragma unroll
      for (int j = 0; j < kPerThread; ++j) acc[i][j] = 0.0f;

    for (int64_t kb0 = 0; kb0 < nb; kb0 += kBlocksPerStep) {
      const int64_t kb = kb0 + load_blk;
      {  // W: 18-byte blocks are 2-byte aligned, so 16-bit loads (load_int_b2).
        const int64_t row = m0 + load_row;
        int* dst = &sw[load_row][load_blk * 8];
        float d = 0.0f;
        if (row < m && kb < nb) {
          const uint8_t* blk = w + row * ldw + kb * kQ4_0Bytes;
          d = fp16_to_fp32(load_u16_b2(blk));
#pragma unroll
          for (int q = 0; q < 4; ++q) {
            const uint32_t v = static_cast<uint32_t>(load_int_b2(blk + 2 + 4 * q));
            dst[q] = q4_0_codes_minus_8(v & 0x0F0F0F0Fu);            // elements 4q..4q+3
            dst[4 + q] = q4_0_codes_minus_8((v >> 4) & 0x0F0F0F0Fu); // elements 16+4q..
          }
        } else {
#pragma unroll
          for (int q = 0; q < 8; ++q) dst[q] = 0;
        }
        sdw[load_blk][load_row] = d;
      }
      {  // A: 36-byte blocks keep the codes 4-byte aligned.
        const int64_t col = n0 + load_row;
        int* dst = &sa[load_row][load_blk * 8];
        float d = 0.0f;
        if (col < n && kb < nb) {
          const uint8_t* blk = a + col * lda + kb * kQ8_1Bytes;
          d = fp16_to_fp32(load_u16_b2(blk));
#pragma unroll
          for (int q = 0; q < 8; ++q) dst[q] = load_int_b4(blk + 4 + 4 * q);
        } else {
#pragma unroll
          for (int q = 0; q < 8; ++q) dst[q] = 0;
        }
        sda[load_blk][load_row] = d;
      }
      __syncthreads();

#pragma unroll
      for (int b = 0; b < kBlocksPerStep; ++b) {
        int sumi[kPerThread][kPerThread];
#pragma unroll
        for (int i = 0; i < kPerThread; ++i)
#pragma unroll
          for (int j = 0; j < kPerThread; ++j) sumi[i][j] = 0;
#pragma unroll
        for (int q = 0; q < 8; ++q) {
          int wv[kPerThread], av[kPerThread];
#pragma unroll
          for (int i = 0; i < kPerThread; ++i) wv[i] = sw[ty + i * (kTileM / kPerThread)][b * 8 + q];
#pragma unroll
          for (int j = 0; j < kPerThread; ++j) av[j] = sa[tx + j * kThreadsN][b * 8 + q];
#pragma unroll
          for (int i = 0; i < kPerThread; ++i)
#pragma unroll
            for (int j = 0; j < kPerThread; ++j) sumi[i][j] = dp4a(wv[i], av[j], sumi[i][j]);
        }
#pragma unroll
        for (int i = 0; i < kPerThread; ++i) {
          const float dw = sdw[b][ty + i * (kTileM / kPerThread)];
#pragma unroll
          for (int j = 0; j < kPerThread; ++j)
            acc[i][j] += dw * sda[b][tx + j * kThreadsN] * static_cast<float>(sumi[i][j]);
        }
      }
      __syncthreads();  // the next step overwrites the staged operands
    }

#pragma unroll
    for (int i = 0; i < kPerThread; ++i) {
      const int64_t row = m0 + ty + i * (kTileM / kPerThread);
      if (row >= m) continue;
#pragma unroll
      for (int j = 0; j < kPerThread; ++j) {
        const int64_t col = n0 + tx + j * kThreadsN;
        if (col < n) epilogue_store(ep, row, col, acc[i][j]);
      }
    }
  }
}

}  // namespace

bool gemm_dp4a_tiled_can_run(const GemmArgs& args, std::string* why_not) {
  return gemm_operands_aligned(args, why_not);
}

Status gemm_dp4a_tiled_run(const GemmArgs& args, Stream stream) {
  const int64_t m = args.a.rows, n = args.b.rows;
  if (m <= 0 || n <= 0) return Status::success();
  // One CTA per tile, flattened into x (grid.y would cap M at 65535 tiles);
  // the kernel loops if there are more tiles than a grid can hold.
  const int64_t tiles = ((m + kTileM - 1) / kTileM) * ((n + kTileN - 1) / kTileN);
  const unsigned grid = static_cast<unsigned>(std::min<int64_t>(tiles, kMaxGrid));
  gemm_dp4a_tiled_kernel<<<grid, kThreads, 0, to_cuda(stream)>>>(
      static_cast<const uint8_t*>(args.a.data), static_cast<const uint8_t*>(args.b.data), epilogue_params(args), m,
      n, args.a.k / 32, args.a.row_stride, args.b.row_stride);
  return gemm_launch_status(args);
}

}  // namespace qg::detail::cuda
