// SPDX-License-Identifier: MIT
// cuda/q4_0_dp4a.cuh: the Q4_0 x Q8_1 block arithmetic of the DP4A GEMVs
// (cuda_mmvq, cuda_gemv_ring): where a block's fields lie in a run of whole
// blocks read as 32-bit words, and one block of a few W rows against one
// block of each activation column.
//
// Integer dot: codes as signed bytes 16 * (q - 8) (gemm_q4_0_q8_1.cuh's
// codes_x16_*, one LOP3 a word). Eight DP4As give 16 * isum per block and
// column, exact (|16 isum| <= 2^19). The chain starts at kMagicBits, the bits
// of 1.5 * 2^23, so its result read as a float is 1.5 * 2^23 + 16 * isum
// exactly, and one FADD gives 16 * isum as a float: no I2F (quarter rate).
// Then acc = fma((d_w / 16) * d_a, 16 * isum, acc): d_w / 16 * d_a is exact
// in fp32 (two fp16 significands, exponents far from the limits), so this is
// fma(d_w * d_a, isum, acc), once per whole block: a non-finite scale meets
// the block's integer sum (Inf * 0 = NaN as the reference's d * isum), with
// no special case.
#pragma once

#include <cstdint>

#include "common.cuh"
#include "cp_async.cuh"
#include "gemm_q4_0_q8_1.cuh"

namespace qg::detail::cuda {
namespace q4dp4a {

// One Q8_1 block of one column: d_a and the 32 codes as 8 words.
struct ABlock {
  float d;
  int q[8];
};

// A block at p, 4-byte aligned: 9 word loads.
__device__ __forceinline__ ABlock load_a_words(const uint8_t* p) {
  ABlock b;
  b.d = half_bits_to_float(static_cast<uint32_t>(__ldg(reinterpret_cast<const int*>(p))) & 0xFFFFu);
#pragma unroll
  for (int k = 0; k < 8; ++k) b.q[k] = __ldg(reinterpret_cast<const int*>(p + 4 + 4 * k));
  return b;
}

// Block t of a run of whole Q4_0 blocks that starts on a word, the run held
// as 32-bit words w[0..] (registers or shared memory): d_w / 16 and the 16
// code bytes as 4 words. Block t starts at byte 18t: for even t at a word (d
// the low half of word 9t/2, each code word one PRMT of two neighbours), for
// odd t in the middle of one (d the high half, the code words aligned).
template <int t, class Words>
__device__ __forceinline__ void unpack_block(const Words& w, float& dw16, uint32_t (&v)[4]) {
  if constexpr (t % 2 == 0) {
    constexpr int q = 9 * t / 2;
    dw16 = half_bits_to_float(w[q] & 0xFFFFu) * 0.0625f;
#pragma unroll
    for (int k = 0; k < 4; ++k) v[k] = __byte_perm(w[q + k], w[q + k + 1], 0x5432);
  } else {
    constexpr int q = (9 * t - 1) / 2;
    dw16 = half_bits_to_float(w[q] >> 16) * 0.0625f;
#pragma unroll
    for (int k = 0; k < 4; ++k) v[k] = w[q + 1 + k];
  }
}

// One W block of kRows rows (d_w / 16 and the 16 code bytes as 4 words) against
// one A block per column: acc[r][j] += d_w * d_a * isum.
template <int kRows, int kCols, class LoadA>
__device__ __forceinline__ void dot_block(float (&acc)[kRows][kCols], const float (&dw)[kRows],
                                          const uint32_t (&v)[kRows][4], uint32_t k80, LoadA&& load_a) {
  // Codes as signed bytes 16 * (q - 8): element 4k.. (low nibbles of word k)
  // and element 16 + 4k.. (high nibbles), matching A words k and k + 4.
  int lo[kRows][4], hi[kRows][4];
#pragma unroll
  for (int r = 0; r < kRows; ++r)
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      lo[r][k] = codes_x16_low(v[r][k], k80);
      hi[r][k] = codes_x16_high(v[r][k], k80);
    }
#pragma unroll
  for (int j = 0; j < kCols; ++j) {
    const ABlock a = load_a(j);
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      int s = static_cast<int>(kMagicBits);
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        s = dp4a(lo[r][k], a.q[k], s);
        s = dp4a(hi[r][k], a.q[k + 4], s);
      }
      // 16 * isum, exact; times d_w / 16 * d_a, exact: one rounding.
      acc[r][j] = fmaf(dw[r] * a.d, __int_as_float(s) - kMagic, acc[r][j]);
    }
  }
}

}  // namespace q4dp4a
}  // namespace qg::detail::cuda
