// SPDX-License-Identifier: MIT
// int_formats.h: the arithmetic of the integer formats (i8, i4, i4x8), written
// once for both backends (__host__ __device__), as quant_block.h is for the
// ggml blocks. Reading one code, the dynamic-quantization rules, and the
// packing; docs/numerics.md states the rules in words.
#pragma once

#include <cstdint>

#include "qg/ops.h"
#include "quant_block.h"

namespace qg::detail {

// ------------------------------------------------------------------ codes
// The code range of an integer format: i8 -128..127; i4 and i4x8 -8..7.
struct CodeRange {
  int qmin, qmax;
};
QG_HD CodeRange code_range(Format f) { return f == Format::i8 ? CodeRange{-128, 127} : CodeRange{-8, 7}; }

// Code k of a row whose blocks are block_stride bytes apart (i8: one code a
// block; i4: two, low nibble first, two's complement; i4x8: eight in a
// little-endian int32, stored as v + 8). Byte loads only: any address works.
QG_HD int32_t load_code(Format f, const uint8_t* row, int64_t block_stride, int64_t k) {
  if (f == Format::i8) return static_cast<int8_t>(row[k * block_stride]);
  if (f == Format::i4) {
    const uint8_t b = row[(k >> 1) * block_stride];
    const int v = (k & 1) ? b >> 4 : b & 15;
    return (v ^ 8) - 8;
  }
  const uint8_t b = row[(k >> 3) * block_stride + ((k & 7) >> 1)];  // i4x8
  return ((k & 1) ? b >> 4 : b & 15) - 8;
}

// Element k of a float operand row (f16, bf16, f32).
QG_HD float load_float_elem(Format f, const uint8_t* row, int64_t block_stride, int64_t k) {
  const uint8_t* p = row + k * block_stride;
  if (f == Format::f32)
    return bits_float(static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) |
                      (static_cast<uint32_t>(p[2]) << 16) | (static_cast<uint32_t>(p[3]) << 24));
  const uint16_t h = static_cast<uint16_t>(p[0] | (p[1] << 8));
  return f == Format::f16 ? fp16_to_fp32(h) : bf16_to_fp32(h);
}

// A group-wise scale or zero point of row r, group g (OutsideScales with
// granularity group; row_stride in elements).
QG_HD float load_group_scale(const OutsideScales& s, int64_t r, int64_t g) {
  const uint8_t* p = static_cast<const uint8_t*>(s.data);
  const int64_t i = r * s.row_stride + g;
  if (s.dtype == DType::f32) {
    p += 4 * i;
    return bits_float(static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) |
                      (static_cast<uint32_t>(p[2]) << 16) | (static_cast<uint32_t>(p[3]) << 24));
  }
  p += 2 * i;
  const uint16_t h = static_cast<uint16_t>(p[0] | (p[1] << 8));
  return s.dtype == DType::f16 ? fp16_to_fp32(h) : bf16_to_fp32(h);
}
QG_HD int32_t load_group_zero_point(const OutsideScales& z, int64_t r, int64_t g) {
  if (z.data == nullptr) return 0;
  const uint8_t* p = static_cast<const uint8_t*>(z.data);
  const int64_t i = r * z.row_stride + g;
  if (z.dtype == DType::i8) return static_cast<int8_t>(p[i]);
  p += 4 * i;
  return static_cast<int32_t>(static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) |
                              (static_cast<uint32_t>(p[2]) << 16) | (static_cast<uint32_t>(p[3]) << 24));
}

// ------------------------------------------------------- quantization rules
// One scope's parameters: value = scale * (code - zp). poisoned: the scope
// held NaN or +-Inf; its scale is NaN and every code is zp.
struct ScopeParams {
  float scale = 0.0f;
  float inv = 0.0f;  // 1 / scale, 0 where scale is 0 or its inverse overflows
  int32_t zp = 0;
  bool poisoned = false;
};

// Round half to even, as torch.round and numpy.rint: the same on both backends.
QG_HD float round_even(float v) {
#if defined(__CUDA_ARCH__)
  return rintf(v);
#else
  return __builtin_rintf(v);
#endif
}

QG_HD int32_t clamp_code(float r, CodeRange c) {
  if (!(r == r)) return 0;  // NaN (only from a static scale of NaN): 0, before adding zp
  if (r <= static_cast<float>(c.qmin)) return c.qmin;
  if (r >= static_cast<float>(c.qmax)) return c.qmax;
  return static_cast<int32_t>(r);
}

// Symmetric: scale = absmax / qmax (127 or 7), zero point 0. absmax is NaN
// when the scope held a non-finite value.
QG_HD ScopeParams symmetric_params(float absmax, CodeRange c) {
  ScopeParams p;
  if (!is_finite(absmax) || !(absmax == absmax)) {
    p.scale = bits_float(0x7FC00000u);
    p.poisoned = true;
    return p;
  }
  p.scale = div_rn(absmax, static_cast<float>(c.qmax));
  p.inv = inverse_scale(p.scale);
  return p;
}

// Asymmetric: the range [min(lo, 0), max(hi, 0)] (zero stays exact) over
// qmax - qmin steps; zp = qmin - round(lo / scale), clamped to the codes.
QG_HD ScopeParams asymmetric_params(float lo, float hi, CodeRange c) {
  ScopeParams p;
  if (!is_finite(lo) || !is_finite(hi) || !(lo == lo) || !(hi == hi)) {
    p.scale = bits_float(0x7FC00000u);
    p.poisoned = true;
    return p;
  }
  lo = lo < 0.0f ? lo : 0.0f;
  hi = hi > 0.0f ? hi : 0.0f;
  p.scale = div_rn(add_rn(hi, -lo), static_cast<float>(c.qmax - c.qmin));
  p.inv = inverse_scale(p.scale);
  p.zp = c.qmin - clamp_code(round_even(mul_rn(lo, p.inv)), CodeRange{c.qmin - c.qmax, 0});
  if (p.zp > c.qmax) p.zp = c.qmax;
  return p;
}

// Given (static) scale and zero point.
QG_HD ScopeParams static_params(float scale, int32_t zp) {
  ScopeParams p;
  p.scale = scale;
  p.inv = inverse_scale(scale);
  p.zp = zp;
  return p;
}

// code = clamp(round(x / scale) + zp): x times the inverse (IEEE, no FMA),
// round half to even, saturate. Non-finite x in a static scope saturates
// (+-Inf) or takes zp (NaN).
QG_HD int32_t quantize_value(float x, const ScopeParams& p, CodeRange c) {
  if (p.poisoned) return p.zp;
  const float r = round_even(mul_rn(x, p.inv));
  if (!(r == r)) return p.zp;
  return clamp_code(add_rn(r, static_cast<float>(p.zp)), c);
}

// The difference in 64 bits: zero points the caller holds on a device are
// not range-checked (validate.cpp), and code - zp must not overflow.
QG_HD float dequantize_value(int32_t code, float scale, int32_t zp) {
  return mul_rn(scale, static_cast<float>(static_cast<int64_t>(code) - zp));
}

// --------------------------------------------------------------- packing
// Stores code k (already in range) into a row of format f, contiguous.
// i4 / i4x8 bytes hold two codes: callers write whole bytes (pack_pair).
QG_HD uint8_t pack_pair(Format f, int32_t lo, int32_t hi) {
  if (f == Format::i4x8) return static_cast<uint8_t>((lo + 8) | ((hi + 8) << 4));
  return static_cast<uint8_t>((lo & 15) | ((hi & 15) << 4));
}

// Scope index of element (r, k): tensor 0, row r, group r * groups + k / G.
QG_HD int64_t scope_index(Granularity g, int64_t r, int64_t k, int64_t k_total, int64_t group_size) {
  if (g == Granularity::tensor) return 0;
  if (g == Granularity::row) return r;
  return r * (k_total / group_size) + k / group_size;
}

// Floats ordered as int32 (for atomic min / max on the device): monotonic.
QG_HD int32_t ordered_key(float f) {
  const int32_t b = static_cast<int32_t>(float_bits(f));
  return b >= 0 ? b : b ^ 0x7FFFFFFF;
}
QG_HD float ordered_value(int32_t key) {
  return bits_float(static_cast<uint32_t>(key >= 0 ? key : key ^ 0x7FFFFFFF));
}

}  // namespace qg::detail
