// SPDX-License-Identifier: MIT
// cuda/wo_mma.cuh: what the tensor-core weight-only GEMVs (cuda_wo_gemv,
// cuda_wo_gemv_bulk, cuda_wo_gemv_mma) share: their parameters, the exact unpacking of i4
// nibble pairs into fp16 / bf16 codes and the m16n8k16 mma.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "common.cuh"
#include "wo_params.cuh"

namespace qg::detail::cuda::wo {

struct Params {
  const uint8_t* w;
  const uint8_t* x;
  const uint8_t* scales;
  const uint8_t* zeros;
  int64_t m, n, k, ldw, ldx;   // ldw, ldx in bytes
  int64_t s_stride, z_stride;  // bytes between rows of scales / zero points
  int s_shift, z_shift;        // log2 of the group sizes (powers of two: a shift, not a division)
  uint32_t code_bits;          // code_bits(activations are bf16)
  int scale_type;              // 0 f32, 1 f16, 2 bf16
  int zero_i32;                // zero points are int32 (else int8)
  int splits;
};

// ------------------------------------------------------------ device helpers
// The halves' exponent bits and the two's complement flip of a nibble, one
// constant: (nibble pair) ^ code_bits = 2^10 + 8 + code (fp16) or 2^7 + 8 +
// code (bf16), and the same bits read as a number are 2^10 + 8 (2^7 + 8).
// The kernels take it from Params::code_bits, not as a literal: LOP3 has one
// immediate, and with the mask 0x000F000F and these bits both immediate
// ptxas splits (w & mask) ^ bits into two LOP3s, 4 instructions a pair of
// codes where 3 do.
inline uint32_t code_bits(bool bf16) { return bf16 ? 0x43084308u : 0x64086408u; }

// The tensor-core GEMVs' parameters for a call of all N columns at once
// (no split of K).
inline Params gemv_params(const GemmArgs& args) {
  Params p{};
  set_operand_params(p, args);
  p.n = args.b.rows;
  p.splits = 1;
  p.code_bits = code_bits(args.b.format == Format::bf16);
  return p;
}

template <bool kBf16>
__device__ __forceinline__ uint32_t sub2(uint32_t a, uint32_t b) {
  uint32_t d;
  if constexpr (kBf16) {
    const __nv_bfloat162 r =
        __hsub2(*reinterpret_cast<const __nv_bfloat162*>(&a), *reinterpret_cast<const __nv_bfloat162*>(&b));
    d = *reinterpret_cast<const uint32_t*>(&r);
  } else {
    const __half2 r = __hsub2(*reinterpret_cast<const __half2*>(&a), *reinterpret_cast<const __half2*>(&b));
    d = *reinterpret_cast<const uint32_t*>(&r);
  }
  return d;
}

// Nibbles i and i + 4 of w as the codes they stand for, in the two halves.
template <bool kBf16, int kI>
__device__ __forceinline__ uint32_t code_pair(uint32_t w, uint32_t bits) {
  return sub2<kBf16>(((w >> (4 * kI)) & 0x000F000Fu) ^ bits, bits);
}

// d += A * B, m16n8k16, f16 or bf16 in, fp32 accumulate.
template <bool kBf16>
__device__ __forceinline__ void mma_16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
#if __CUDA_ARCH__ >= 800
  if constexpr (kBf16)
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  else
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#else
  __trap();
#endif
}

// One 128-value macro step of kRT m16 tiles of W against kNT n8 tiles of
// activations, in the fragment order the kernels lay K in: lane (g, t)
// holds words t, t + 4, t + 8, t + 12 of the macro step of rows g (wg) and
// g + 8 (w8) of each tile, and xv[nt][i] the 16 bytes of token 8 nt + g at
// K = 8 (4 i + t). Step (i, h) takes nibble pairs (2h, 2h + 4) and
// (2h + 1, 2h + 5) of word 4i + t, and the activations' halves that match
// them by two PRMTs. d += the exact products; with kZP, sx += sum x (an mma
// against ones) for the zero points' D - z sum x.
template <int kRT, int kNT, bool kBf16, bool kZP>
__device__ __forceinline__ void macro_step_mma(float (&d)[kRT][kNT][4], float (&sx)[kNT][4],
                                               const uint32_t (&wg)[kRT][4], const uint32_t (&w8)[kRT][4],
                                               const uint4 (&xv)[kNT][4], uint32_t bits) {
  const uint32_t ones = kBf16 ? 0x3F803F80u : 0x3C003C00u;  // 1.0 in both halves
#pragma unroll
  for (int i = 0; i < 4; ++i) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      uint32_t b0[kNT], b1[kNT];
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt) {
        // (x0, x4), (x1, x5) for h = 0; (x2, x6), (x3, x7) for h = 1.
        const uint32_t lo = h == 0 ? xv[nt][i].x : xv[nt][i].y;
        const uint32_t hi = h == 0 ? xv[nt][i].z : xv[nt][i].w;
        b0[nt] = __byte_perm(lo, hi, 0x5410), b1[nt] = __byte_perm(lo, hi, 0x7632);
        if constexpr (kZP) {
          const uint32_t one4[4] = {ones, ones, ones, ones};
          mma_16816<kBf16>(sx[nt], one4, b0[nt], b1[nt]);
        }
      }
#pragma unroll
      for (int r = 0; r < kRT; ++r) {
        uint32_t a[4];
        if (h == 0) {
          a[0] = code_pair<kBf16, 0>(wg[r][i], bits), a[1] = code_pair<kBf16, 0>(w8[r][i], bits);
          a[2] = code_pair<kBf16, 1>(wg[r][i], bits), a[3] = code_pair<kBf16, 1>(w8[r][i], bits);
        } else {
          a[0] = code_pair<kBf16, 2>(wg[r][i], bits), a[1] = code_pair<kBf16, 2>(w8[r][i], bits);
          a[2] = code_pair<kBf16, 3>(wg[r][i], bits), a[3] = code_pair<kBf16, 3>(w8[r][i], bits);
        }
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt) mma_16816<kBf16>(d[r][nt], a, b0[nt], b1[nt]);
      }
    }
  }
}

}  // namespace qg::detail::cuda::wo
