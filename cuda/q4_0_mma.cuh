// SPDX-License-Identifier: MIT
// cuda/q4_0_mma.cuh: one Q4_0 x Q8_1 block on the int8 tensor cores, shared
// by the kernels that feed mma.sync.m16n8k32 from shared memory (cuda_mma,
// cuda_gemv_bulk, cuda_gemv_mma). They differ in how W's words reach the registers; from
// the code words and the scales on, the arithmetic is this file's.
//
// One int8 mma.sync.m16n8k32 is exactly one block: 32 values of K. Q4_0's
// byte j holds elements j (low nibble) and j + 16 (high nibble), which is the
// m16n8k32 A-fragment layout: the word of bytes 4t..4t+3 of a block gives a
// thread both its k = 4t.. register (low nibbles) and its k = 16 + 4t..
// register (high nibbles). Q8_1's codes are the B fragment as they lie.
//
// The codes enter the mma as the signed bytes 16 * (q - 8)
// (gemm_q4_0_q8_1.cuh's codes_x16_*), so the mma gives 16 * isum, exact.
//
// The block-32 rescale is what bounds these kernels, not the tensor cores:
// every output needs acc += d_w * d_a * isum once per 32 MACs, and an int32 ->
// fp32 convert (I2F) runs at a quarter of the FMA rate. Instead:
//   - the mma accumulates onto C = 0x4B400000, the bits of 1.5 * 2^23, so D's
//     bits are the float 1.5 * 2^23 + 16 isum exactly (far below the 2^22
//     where the ulp would exceed 1);
//   - f = fma(D as float, d_a, -1.5 * 2^23 * d_a) is 16 isum * d_a rounded
//     once: the product is exact inside the FMA, and 1.5 * 2^23 * d_a (2 + 11
//     significant bits) is exact in fp32;
//   - acc = fma(d_w / 16, f, acc): d_w / 16 is exact, and so is the factor 16
//     in f, so this is fma(d_w, round(d_a * isum), acc), the bits of the
//     plain codes.
// Two FMAs per output and block, no convert. A non-finite d_a would make the
// first FMA Inf - Inf; such blocks take acc += d_w * (d_a * float(isum)),
// which agrees with the reference's d * isum on every Inf and NaN.
#pragma once

#include <cstdint>

#include "cp_async.cuh"
#include "gemm_q4_0_q8_1.cuh"

namespace qg::detail::cuda::q4mma {

// D = A * B + magic, s8 x s8 -> s32, one 16 x 8 x 32 tile.
__device__ __forceinline__ void mma_s8(int (&d)[4], const int (&a)[4], int b0, int b1) {
#if __CUDA_ARCH__ >= 800
  const int c = static_cast<int>(kMagicBits);
  asm(
      "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%10,%10,%10,%10};\n"
      : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "r"(c));
#else
  d[0] = d[1] = d[2] = d[3] = 0;
  __trap();
#endif
}

// One column pair's activation scales for a block: d_a from the low half of
// the Q8_1 block's first word, and -1.5 * 2^23 * d_a for the rescale.
struct AScale {
  float d, neg_magic_d;
};

__device__ __forceinline__ AScale a_scale(uint32_t ds_word) {
  const float d = half_bits_to_float(ds_word & 0xFFFFu);
  return {d, -kMagic * d};
}

// One m16 tile's block against kNT n8 tiles. q[h]: this thread's code word
// (bytes 4t..4t+3 of the block) of rows g (h = 0) and g + 8 (h = 1); dw16[h]:
// those rows' d_w / 16. b[ni]: the B fragment (codes 4t.. and 16 + 4t.. of
// column g); s[ni][c]: the scales of output columns 2t + c. kAllFinite: every
// d_a of the warp is finite (the caller's vote), so the magic-number rescale
// applies. k80: kCodeBias, from a register.
template <int kNT, bool kAllFinite>
__device__ __forceinline__ void tile_block(float (&acc)[kNT][4], const uint32_t (&q)[2], const float (&dw16)[2],
                                           const int (&b)[kNT][2], const AScale (&s)[kNT][2], uint32_t k80) {
  const int a[4] = {codes_x16_low(q[0], k80), codes_x16_low(q[1], k80), codes_x16_high(q[0], k80),
                    codes_x16_high(q[1], k80)};
#pragma unroll
  for (int ni = 0; ni < kNT; ++ni) {
    int d[4];
    mma_s8(d, a, b[ni][0], b[ni][1]);
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const AScale& sc = s[ni][e & 1];
      if constexpr (kAllFinite) {
        acc[ni][e] = fmaf(dw16[e >> 1], fmaf(__int_as_float(d[e]), sc.d, sc.neg_magic_d), acc[ni][e]);
      } else {
        const float isum16 = static_cast<float>(d[e] - static_cast<int>(kMagicBits));
        acc[ni][e] = fmaf(dw16[e >> 1], sc.d * isum16, acc[ni][e]);
      }
    }
  }
}

}  // namespace qg::detail::cuda::q4mma
