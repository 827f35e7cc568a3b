// SPDX-License-Identifier: MIT
// quant_block.h: one block of Q4_0 / Q8_0 / Q8_1, quantized and dequantized.
// This is the only place the formats' arithmetic is written. The CPU backend
// calls it directly; the CUDA kernels call the same functions on the device,
// which is what makes the two backends produce identical bytes.
//
// Finite inputs give ggml's reference bytes (quantize_row_*_ref). Where ggml's
// C code has undefined behaviour, qg defines it:
//   * a block holding NaN or +-Inf gets scale NaN (0x7E00) and neutral codes,
//     so it dequantizes to NaN and poisons every dot product that reads it;
//   * a denormal-only block, whose 1/d overflows to Inf, is treated as a zero
//     block: neutral codes (never a float->int cast of Inf or NaN), and its
//     fp16 scale underflows to 0, so it dequantizes to exact zeros.
// The code conversions below also saturate, so no input reaches a cast of a
// value out of range.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "qg/formats.h"

#if defined(__CUDACC__)
#define QG_HD __host__ __device__ __forceinline__
#else
#define QG_HD inline
#endif

namespace qg::detail {

constexpr uint16_t kFp16NaN = 0x7E00;

QG_HD uint32_t float_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
#endif
}

QG_HD float bits_float(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, 4);
  return f;
#endif
}

// IEEE round-to-nearest-even, written out so host and device round alike
// (F16C's vcvtps2ph and CUDA's __float2half_rn give the same bits).
QG_HD uint16_t fp32_to_fp16(float f) {
  const uint32_t x = float_bits(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t ax = x & 0x7FFFFFFFu;
  if (ax > 0x7F800000u) return static_cast<uint16_t>(sign | kFp16NaN);
#if defined(__CUDA_ARCH__)
  // One cvt.rn.f16.f32: the same rounding, subnormals and overflow to inf as
  // the code below, in one instruction instead of two dozen (the quantizers
  // call this per block). NaN, whose bits differ (the hardware's 0x7FFF), is
  // handled above.
  uint16_t h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
  return h;
#else
  if (ax >= 0x477FF000u) return static_cast<uint16_t>(sign | 0x7C00u);  // >= 65520 -> inf
  if (ax >= 0x38800000u) {                                             // fp16 normal
    const uint32_t mant = ax & 0x7FFFFFu;
    uint32_t h = ((((ax >> 23) - 127u + 15u)) << 10) | (mant >> 13);
    const uint32_t rem = mant & 0x1FFFu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;  // a carry moves into the exponent
    return static_cast<uint16_t>(sign | h);
  }
  if (ax < 0x33000000u) return static_cast<uint16_t>(sign);  // below 2^-25 -> 0
  const uint32_t mant = (ax & 0x7FFFFFu) | 0x800000u;         // fp16 subnormal
  const int shift = 126 - static_cast<int>(ax >> 23);         // 14..24
  uint32_t h = mant >> shift;
  const uint32_t rem = mant & ((1u << shift) - 1u);
  const uint32_t half = 1u << (shift - 1);
  if (rem > half || (rem == half && (h & 1u))) ++h;
  return static_cast<uint16_t>(sign | h);
#endif
}

QG_HD float fp16_to_fp32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1Fu;
  const uint32_t mant = h & 0x3FFu;
  if (exp == 0x1Fu) return bits_float(sign | 0x7F800000u | (mant << 13));
  if (exp != 0) return bits_float(sign | ((exp + 112u) << 23) | (mant << 13));
  if (mant == 0) return bits_float(sign);
  // subnormal: mant * 2^-24, exact in fp32
  const float v = static_cast<float>(mant) * 5.9604644775390625e-8f;
  return sign ? -v : v;
}

QG_HD float bf16_to_fp32(uint16_t b) { return bits_float(static_cast<uint32_t>(b) << 16); }

// Arithmetic the reference performs as separate rounded operations. On the
// device, nvcc would otherwise contract x*id + 8.5f into one FMA and change
// the last bit (and the code) on ties; the host build uses -ffp-contract=off.
QG_HD float mul_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
QG_HD float add_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}
QG_HD float div_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}

QG_HD bool is_finite(float v) { return (float_bits(v) & 0x7F800000u) != 0x7F800000u; }

// ggml's id = d ? 1/d : 0, with id = 0 also where 1/d overflows (denormal d).
QG_HD float inverse_scale(float d) {
  if (d == 0.0f) return 0.0f;
  const float id = div_rn(1.0f, d);
  return is_finite(id) ? id : 0.0f;
}

// ggml: MIN(15, (int8_t)(x*id + 8.5f)). Saturating, NaN -> 8 (the zero code).
QG_HD uint8_t q4_0_code(float scaled) {
  const float v = add_rn(scaled, 8.5f);
#if defined(__CUDA_ARCH__)
  // Three instructions and a select instead of a branch chain: cvt.rzi
  // truncates as the C cast does and saturates +-Inf to INT_MAX / INT_MIN,
  // which the clamp then takes to 15 / 0; only NaN needs its own test.
  return v == v ? static_cast<uint8_t>(min(max(__float2int_rz(v), 0), 15)) : 8;
#else
  if (!(v == v)) return 8;
  if (v <= 0.0f) return 0;
  if (v >= 15.0f) return 15;
  return static_cast<uint8_t>(static_cast<int>(v));  // truncation, as the C cast
#endif
}

// ggml: (int8_t)roundf(x*id). Saturating, NaN -> 0.
QG_HD int8_t q8_code(float scaled) {
#if defined(__CUDA_ARCH__)
  // roundf is half a dozen instructions on the device; this is three. With
  // the addition rounded toward zero, |x| + 0.5 reaches an integer n only
  // when the exact sum does (n is a float, and the result never exceeds the
  // exact sum), so its truncation is floor(|x| + 0.5): roundf's rounding,
  // half away from zero, for every float. The conversion saturates and turns
  // NaN into 0, as the code below does.
  const int r = __float2int_rz(__fadd_rz(fabsf(scaled), 0.5f));
  return static_cast<int8_t>(scaled < 0.0f ? -min(r, 128) : min(r, 127));
#else
  const float r = roundf(scaled);
  if (!(r == r)) return 0;
  if (r >= 127.0f) return 127;
  if (r <= -128.0f) return -128;
  return static_cast<int8_t>(static_cast<int>(r));
#endif
}

QG_HD bool block_is_finite(const float* x) {
  bool finite = true;
  for (int j = 0; j < 32; ++j) finite = finite && is_finite(x[j]);
  return finite;
}

// quantize_row_q4_0_ref on one block of 32 values.
QG_HD void quantize_block_q4_0(const float* x, block_q4_0* y) {
  if (!block_is_finite(x)) {
    y->d = kFp16NaN;
    for (int j = 0; j < 16; ++j) y->qs[j] = 0x88;
    return;
  }
  float amax = 0.0f, max = 0.0f;  // max keeps its sign: d = max / -8 maps it to code 0
  for (int j = 0; j < 32; ++j) {
    const float a = fabsf(x[j]);
    if (amax < a) {
      amax = a;
      max = x[j];
    }
  }
  const float d = mul_rn(max, -0.125f);  // max / -8: the same rounding of the same quotient, no division
  const float id = inverse_scale(d);
  y->d = fp32_to_fp16(d);
  for (int j = 0; j < 16; ++j) {
    const uint8_t lo = q4_0_code(mul_rn(x[j], id));
    const uint8_t hi = q4_0_code(mul_rn(x[j + 16], id));
    y->qs[j] = static_cast<uint8_t>(lo | (hi << 4));
  }
}

// Shared by Q8_0 and Q8_1: d = amax/127, codes = roundf(x * (1/d)); returns
// d in fp32 and the sum of the codes.
QG_HD float quantize_codes_q8(const float* x, int8_t* qs, int* code_sum) {
  float amax = 0.0f;
  for (int j = 0; j < 32; ++j) amax = fmaxf(amax, fabsf(x[j]));
  const float d = div_rn(amax, 127.0f);
  const float id = inverse_scale(d);
  int sum = 0;
  for (int j = 0; j < 32; ++j) {
    qs[j] = q8_code(mul_rn(x[j], id));
    sum += qs[j];
  }
  *code_sum = sum;
  return d;
}

// quantize_row_q8_0_ref on one block.
QG_HD void quantize_block_q8_0(const float* x, block_q8_0* y) {
  if (!block_is_finite(x)) {
    y->d = kFp16NaN;
    for (int j = 0; j < 32; ++j) y->qs[j] = 0;
    return;
  }
  int sum;
  y->d = fp32_to_fp16(quantize_codes_q8(x, y->qs, &sum));
}

// quantize_row_q8_1_ref (reference) or ggml's CUDA quantize_q8_1 (ggml_cuda).
QG_HD void quantize_block_q8_1(const float* x, block_q8_1* y, Q8_1Convention convention) {
  if (!block_is_finite(x)) {
    y->d = kFp16NaN;
    y->s = kFp16NaN;
    for (int j = 0; j < 32; ++j) y->qs[j] = 0;
    return;
  }
  if (convention == Q8_1Convention::reference) {
    int sum;
    const float d = quantize_codes_q8(x, y->qs, &sum);
    y->d = fp32_to_fp16(d);
    y->s = fp32_to_fp16(mul_rn(static_cast<float>(sum), d));
    return;
  }
  // ggml_cuda: divide instead of multiplying by the reciprocal, and s holds the
  // sum of the unquantized values (summed in index order, in fp32).
  float amax = 0.0f, xsum = 0.0f;
  for (int j = 0; j < 32; ++j) {
    amax = fmaxf(amax, fabsf(x[j]));
    xsum = add_rn(xsum, x[j]);
  }
  const float d = div_rn(amax, 127.0f);
  for (int j = 0; j < 32; ++j) y->qs[j] = amax == 0.0f ? 0 : q8_code(div_rn(x[j], d));
  y->d = fp32_to_fp16(d);
  y->s = fp32_to_fp16(xsum);
}

QG_HD void dequantize_block_q4_0(const block_q4_0* b, float* y) {
  const float d = fp16_to_fp32(b->d);
  for (int j = 0; j < 16; ++j) {
    y[j] = static_cast<float>((b->qs[j] & 0x0F) - 8) * d;
    y[j + 16] = static_cast<float>((b->qs[j] >> 4) - 8) * d;
  }
}

QG_HD void dequantize_block_q8(uint16_t d_bits, const int8_t* qs, float* y) {
  const float d = fp16_to_fp32(d_bits);
  for (int j = 0; j < 32; ++j) y[j] = static_cast<float>(qs[j]) * d;
}

// The integer part of one block's dot product: sum_i (w_i - 8) * a_i, exact.
// The GEMM is C = sum_b fp32(d_w) * fp32(d_a) * this; the Q8_1 sum s is not
// used, so the result does not depend on how s was rounded.
QG_HD int dot_block_q4_0_q8_1(const block_q4_0* w, const block_q8_1* a) {
  int sum = 0;
  for (int j = 0; j < 16; ++j) {
    sum += ((w->qs[j] & 0x0F) - 8) * a->qs[j];
    sum += ((w->qs[j] >> 4) - 8) * a->qs[j + 16];
  }
  return sum;
}

}  // namespace qg::detail
