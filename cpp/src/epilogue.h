// SPDX-License-Identifier: MIT
// epilogue.h: the GEMM epilogue, written once. Every kernel of every backend
// ends with epilogue_store(params, m, n, acc) for each of its outputs, so the
// order (scales -> beta*C -> bias -> activation -> cast) and the rounding of
// the cast are the same everywhere; kernels differ only in how they reach it.
// __host__ __device__: the CPU and CUDA backends compile this same code.
// Loads and stores go through unaligned-safe paths: a caller's C, bias or
// scales may sit at any byte address (a NumPy view at an odd offset).
#pragma once

#include <cstdint>
#include <cstring>

#include "qg/ops.h"
#include "quant_block.h"

namespace qg::detail {

// GemmArgs' epilogue flattened into what the store needs, passed to CUDA
// kernels by value.
struct EpilogueParams {
  uint8_t* c = nullptr;
  int64_t ldc = 0, ldc_n = 1;     // elements
  DType c_dtype = DType::f32;
  float alpha = 1.0f, beta = 0.0f;
  const float* row_scale = nullptr;
  const float* col_scale = nullptr;
  int64_t row_scale_step = 1, col_scale_step = 1;  // 0: one value for all
  const int32_t* row_zp = nullptr;
  const int32_t* col_zp = nullptr;
  int64_t row_zp_step = 1, col_zp_step = 1;
  int64_t k = 0;  // the GEMM's K, for the zero-point term K * za * zb
  const uint8_t* bias = nullptr;
  DType bias_dtype = DType::f32;
  bool relu = false;
  bool plain = false;  // none of the above: C[m, n] = acc in fp32, the common case
};

inline EpilogueParams epilogue_params(const GemmArgs& g) {
  EpilogueParams p;
  p.c = static_cast<uint8_t*>(g.c);
  p.ldc = g.ldc;
  p.ldc_n = g.ldc_n;
  p.c_dtype = g.c_dtype;
  p.alpha = g.epilogue.alpha;
  p.beta = g.epilogue.beta;
  p.row_scale = g.epilogue.row_scale;
  p.col_scale = g.epilogue.col_scale;
  p.row_scale_step = g.epilogue.row_scale_scalar ? 0 : 1;
  p.col_scale_step = g.epilogue.col_scale_scalar ? 0 : 1;
  p.row_zp = g.epilogue.row_zero_point;
  p.col_zp = g.epilogue.col_zero_point;
  p.row_zp_step = g.epilogue.row_zero_point_scalar ? 0 : 1;
  p.col_zp_step = g.epilogue.col_zero_point_scalar ? 0 : 1;
  p.k = g.a.k;
  p.bias = static_cast<const uint8_t*>(g.epilogue.bias);
  p.bias_dtype = g.epilogue.bias_dtype;
  p.relu = g.epilogue.activation == Activation::relu;
  p.plain = p.alpha == 1.0f && p.beta == 0.0f && !p.row_scale && !p.col_scale && !p.bias && !p.relu &&
            p.c_dtype == DType::f32;  // (zero points are applied before, in epilogue_store_int)
  return p;
}

// fp32 -> bf16, round to nearest even; NaN stays a (quiet) NaN.
QG_HD uint16_t fp32_to_bf16(float f) {
  const uint32_t x = float_bits(f);
  if ((x & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((x >> 16) | 0x0040u);
  return static_cast<uint16_t>((x + 0x7FFFu + ((x >> 16) & 1u)) >> 16);
}

// Unaligned-safe loads and stores of 2 and 4 bytes. The host uses memcpy
// (plain loads once compiled, and no alignment or aliasing assumption); the
// device uses one access when the address allows it, bytes otherwise.
QG_HD uint32_t load_u32_any(const uint8_t* p) {
#if defined(__CUDA_ARCH__)
  if ((reinterpret_cast<uintptr_t>(p) & 3u) == 0) return *reinterpret_cast<const uint32_t*>(p);
  return static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) |
         (static_cast<uint32_t>(p[2]) << 16) | (static_cast<uint32_t>(p[3]) << 24);
#else
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
#endif
}
QG_HD uint16_t load_u16_any(const uint8_t* p) {
#if defined(__CUDA_ARCH__)
  if ((reinterpret_cast<uintptr_t>(p) & 1u) == 0) return *reinterpret_cast<const uint16_t*>(p);
  return static_cast<uint16_t>(p[0] | (p[1] << 8));
#else
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
#endif
}
QG_HD void store_u32_any(uint8_t* p, uint32_t v) {
#if defined(__CUDA_ARCH__)
  if ((reinterpret_cast<uintptr_t>(p) & 3u) == 0) {
    *reinterpret_cast<uint32_t*>(p) = v;
    return;
  }
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
#else
  std::memcpy(p, &v, 4);
#endif
}
QG_HD void store_u16_any(uint8_t* p, uint16_t v) {
#if defined(__CUDA_ARCH__)
  if ((reinterpret_cast<uintptr_t>(p) & 1u) == 0) {
    *reinterpret_cast<uint16_t*>(p) = v;
    return;
  }
  p[0] = static_cast<uint8_t>(v);
  p[1] = static_cast<uint8_t>(v >> 8);
#else
  std::memcpy(p, &v, 2);
#endif
}

// A float32/float16/bfloat16 element at p.
QG_HD float load_float_any(const uint8_t* p, DType dtype) {
  if (dtype == DType::f32) return bits_float(load_u32_any(p));
  const uint16_t h = load_u16_any(p);
  return dtype == DType::f16 ? fp16_to_fp32(h) : bf16_to_fp32(h);
}
QG_HD void store_float_any(uint8_t* p, DType dtype, float v) {
  if (dtype == DType::f32) store_u32_any(p, float_bits(v));
  else if (dtype == DType::f16) store_u16_any(p, fp32_to_fp16(v));
  else store_u16_any(p, fp32_to_bf16(v));
}

QG_HD int dtype_bytes(DType d) { return d == DType::f32 || d == DType::i32 ? 4 : 2; }

// The terms of the epilogue that belong to W row m (C's row, an output
// feature): its scale and its bias. A kernel whose thread stores many
// tokens of one row loads them once (the warpgroup kernels' unit stores).
struct EpilogueRowTerms {
  float scale = 1.0f, bias = 0.0f;
};
QG_HD EpilogueRowTerms epilogue_row_terms(const EpilogueParams& p, int64_t m) {
  EpilogueRowTerms t;
  if (p.row_scale)
    t.scale = bits_float(load_u32_any(reinterpret_cast<const uint8_t*>(p.row_scale + m * p.row_scale_step)));
  if (p.bias) t.bias = load_float_any(p.bias + m * dtype_bytes(p.bias_dtype), p.bias_dtype);
  return t;
}
QG_HD float epilogue_col_scale(const EpilogueParams& p, int64_t n) {
  return p.col_scale ? bits_float(load_u32_any(reinterpret_cast<const uint8_t*>(p.col_scale + n * p.col_scale_step)))
                     : 1.0f;
}

// The fixed order of ops.h's Epilogue on one sum, dst being where it goes
// (beta reads it). The scales are applied as two separate multiplies so
// that alpha = 1 and no scales leave acc bit-exact; each step is skipped,
// not applied as a neutral value, so that -0 and NaN bits pass unchanged.
QG_HD float epilogue_value(const EpilogueParams& p, float acc, const EpilogueRowTerms& row, float col_scale,
                           const uint8_t* dst) {
  float v = acc;
  if (p.alpha != 1.0f) v = mul_rn(v, p.alpha);
  if (p.row_scale) v = mul_rn(v, row.scale);
  if (p.col_scale) v = mul_rn(v, col_scale);
  if (p.beta != 0.0f) v = add_rn(v, mul_rn(p.beta, load_float_any(dst, p.c_dtype)));
  if (p.bias) v = add_rn(v, row.bias);
  if (p.relu) v = v < 0.0f ? 0.0f : v;  // NaN is not < 0: it passes through
  return v;
}

QG_HD void epilogue_store(const EpilogueParams& p, int64_t m, int64_t n, float acc) {
  if (p.plain) {  // one uniform branch: small-K GEMMs spend their time here
    store_u32_any(p.c + (m * p.ldc + n * p.ldc_n) * 4, float_bits(acc));
    return;
  }
  uint8_t* dst = p.c + (m * p.ldc + n * p.ldc_n) * dtype_bytes(p.c_dtype);
  store_float_any(dst, p.c_dtype, epilogue_value(p, acc, epilogue_row_terms(p, m), epilogue_col_scale(p, n), dst));
}

// Integer operands: acc = sum qa * qb over K (int32, wrapping), sum_a = sum
// qa over row m's K, sum_b = sum qb over row n's (both needed only with zero
// points). The zero-point terms are added in wrapping uint32 arithmetic: the
// true sum fits in int32 (validation bounds K), so the wrapped result is it.
QG_HD int32_t zero_point_corrected(const EpilogueParams& p, int64_t m, int64_t n, int32_t acc, int32_t sum_a,
                                   int32_t sum_b) {
  if (!p.row_zp && !p.col_zp) return acc;
  const uint32_t za = p.row_zp ? static_cast<uint32_t>(load_u32_any(reinterpret_cast<const uint8_t*>(p.row_zp + m * p.row_zp_step))) : 0u;
  const uint32_t zb = p.col_zp ? static_cast<uint32_t>(load_u32_any(reinterpret_cast<const uint8_t*>(p.col_zp + n * p.col_zp_step))) : 0u;
  const uint32_t r = static_cast<uint32_t>(acc) - zb * static_cast<uint32_t>(sum_a) - za * static_cast<uint32_t>(sum_b) +
                     static_cast<uint32_t>(p.k) * za * zb;
  return static_cast<int32_t>(r);
}

// The integer kernels' store: int32 output keeps the exact sum (ReLU is the
// only epilogue step an int32 result takes); float outputs go through the
// float epilogue above.
QG_HD void epilogue_store_int(const EpilogueParams& p, int64_t m, int64_t n, int32_t acc, int32_t sum_a,
                              int32_t sum_b) {
  const int32_t v = zero_point_corrected(p, m, n, acc, sum_a, sum_b);
  if (p.c_dtype == DType::i32) {
    store_u32_any(p.c + (m * p.ldc + n * p.ldc_n) * 4, static_cast<uint32_t>(p.relu && v < 0 ? 0 : v));
    return;
  }
  epilogue_store(p, m, n, static_cast<float>(v));
}

}  // namespace qg::detail
