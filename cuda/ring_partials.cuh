// SPDX-License-Identifier: MIT
// cuda/ring_partials.cuh: the end of a tensor-core ring GEMV (cuda_gemv_mma
// for Q4_0, cuda_wo_gemv_mma for INT4 weight-only), where each of a CTA's
// kW warps has summed its own slice of K of the CTA's row group into mma
// accumulator tiles. The warps' partial tiles meet in shared memory and are
// added in warp order, whatever order the warps finished in, so that the
// result does not depend on timing; each sum is stored through the
// epilogue.
#pragma once

#include <cstdint>

namespace qg::detail::cuda {

// acc[mi][ni][e]: the m16n8 accumulator of one lane (g = lane / 4,
// t = lane % 4): row 16 mi + g (+ 8 for e >= 2), column 8 ni + 2 t + e % 2.
// Warp w's tile goes into the slot its last stage was read from (its slot 0
// if it had no stage; stages_of(w) says how many it had): no copy is in
// flight into that one. Rows past m and columns past n are not stored.
// Ends with the CTA's threads having met at one barrier.
template <int kRT, int kNT, int kW, int kSlots, int kSlotBytes, class StagesOf, class N, class Store>
__device__ __forceinline__ void add_partials_in_warp_order(const float (&acc)[kRT][kNT][4], uint8_t* smem, int warp,
                                                           int lane, StagesOf&& stages_of, int64_t row0, int64_t m,
                                                           N n, bool m_fast, Store&& store) {
  constexpr int kRows = 16 * kRT, kCols = 8 * kNT, kThreads = 32 * kW;
  // m_fast: C's rows lie next to each other (x @ W^T, as a linear layer
  // writes it). The partial tiles are then kept column by column, a column
  // padded by one word, and consecutive threads take consecutive rows of one
  // column: a warp's fp32 stores fill one line at 32-row groups (two half
  // lines at 16), its shared loads fall in 32 banks (two ways at 16-row
  // groups) and the fragment writes in at most four ways. Otherwise row by
  // row, consecutive threads taking consecutive columns (C [M, N]). Taken
  // the other way, a warp's 32 stores land on up to 32 lines of a token each.
  constexpr int kColPitch = kRows + 1;
  static_assert(kColPitch * kCols * 4 <= kSlotBytes, "a warp's partial tile fits in one of its slots");
  const int row_step = m_fast ? 1 : kCols, col_step = m_fast ? kColPitch : 1;
  const int g = lane / 4, t = lane % 4;
  auto part_of = [&](int w) {
    const int mw = stages_of(w);
    const int slot = mw == 0 ? 0 : (mw - 1) % kSlots;
    return reinterpret_cast<float*>(smem + (w * kSlots + slot) * kSlotBytes);
  };
  float* part = part_of(warp);
#pragma unroll
  for (int mi = 0; mi < kRT; ++mi)
#pragma unroll
    for (int ni = 0; ni < kNT; ++ni)
#pragma unroll
      for (int e = 0; e < 4; ++e)
        part[(16 * mi + g + 8 * (e / 2)) * row_step + (8 * ni + 2 * t + e % 2) * col_step] = acc[mi][ni][e];
  __syncthreads();
  for (int o = threadIdx.x; o < kRows * kCols; o += kThreads) {
    const int r = m_fast ? o % kRows : o / kCols, col = m_fast ? o / kRows : o % kCols;
    const int64_t row = row0 + r;
    if (row >= m || col >= n) continue;
    const int at = r * row_step + col * col_step;
    float v = part_of(0)[at];
#pragma unroll
    for (int w = 1; w < kW; ++w) v += part_of(w)[at];
    store(row, col, v);
  }
}

}  // namespace qg::detail::cuda
