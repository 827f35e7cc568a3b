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

}  // namespace qg::detail::cuda::wo
