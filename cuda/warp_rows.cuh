// SPDX-License-Identifier: MIT
// cuda/warp_rows.cuh: the end of a GEMV in which each warp computes kRows
// rows x kCols columns of C with every lane holding a partial sum of each
// (cuda_wo_gemv_fixed, cuda_gemv_ring): the lanes' sums added by a fixed
// butterfly, so the result does not depend on timing, and one lane an
// output storing it through the epilogue.
#pragma once

#include <cstdint>

#include "epilogue.h"

namespace qg::detail::cuda {

template <int kRows, int kCols>
__device__ __forceinline__ void zero_rows(float (&acc)[kRows][kCols]) {
#pragma unroll
  for (int r = 0; r < kRows; ++r)
#pragma unroll
    for (int j = 0; j < kCols; ++j) acc[r][j] = 0.0f;
}

// Rows r0 .. r0 + kRows - 1 (those below m): every lane ends with every
// total; lane r * kCols + j stores output (r, j). acc is zeroed for the
// warp's next rows.
template <int kRows, int kCols>
__device__ __forceinline__ void warp_sum_store(float (&acc)[kRows][kCols], int lane, int64_t r0, int64_t m,
                                               const EpilogueParams& ep) {
  static_assert(kRows * kCols <= 32, "one lane an output");
#pragma unroll
  for (int r = 0; r < kRows; ++r)
#pragma unroll
    for (int j = 0; j < kCols; ++j)
#pragma unroll
      for (int o = 16; o >= 1; o /= 2) acc[r][j] += __shfl_xor_sync(0xFFFFFFFFu, acc[r][j], o);
#pragma unroll
  for (int r = 0; r < kRows; ++r)
#pragma unroll
    for (int j = 0; j < kCols; ++j) {
      if (lane == r * kCols + j && r0 + r < m) epilogue_store(ep, r0 + r, j, acc[r][j]);
      acc[r][j] = 0.0f;
    }
}

}  // namespace qg::detail::cuda
