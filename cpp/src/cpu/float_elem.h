// SPDX-License-Identifier: MIT
// float_elem.h: scalar loads of the float and integer elements the CPU kernels
// read (activations, group scales, group zero points, broadcast operands),
// unaligned-safe.
// Each kernel file includes it under its own ISA flags (_cvtsh_ss needs F16C),
// so the functions live in an unnamed namespace: one copy per file.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "qg/ops.h"

namespace qg::detail::cpu {
namespace {

inline float load_f32(const uint8_t* p) {
  float v;
  std::memcpy(&v, p, 4);
  return v;
}
inline int32_t load_i32(const uint8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
inline uint16_t load_u16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}
// Four 16-bit values from four places, gathered with scalar loads (integer
// ports, idle in the vector loops) into one qword, p0's in the low bits: one
// vcvtph2ps then converts four fp16 scales.
inline uint64_t gather_u16x4(const uint8_t* p0, const uint8_t* p1, const uint8_t* p2, const uint8_t* p3) {
  return static_cast<uint64_t>(load_u16(p0)) | static_cast<uint64_t>(load_u16(p1)) << 16 |
         static_cast<uint64_t>(load_u16(p2)) << 32 | static_cast<uint64_t>(load_u16(p3)) << 48;
}
inline float bf16_value(uint16_t h) {
  const uint32_t u = static_cast<uint32_t>(h) << 16;
  float v;
  std::memcpy(&v, &u, 4);
  return v;
}

// A float element of dtype d at p (activations, scales).
inline float load_elem(const uint8_t* p, DType d) {
  if (d == DType::f32) return load_f32(p);
  if (d == DType::f16) return _cvtsh_ss(load_u16(p));
  return bf16_value(load_u16(p));
}

// The dtype of a float activation format.
inline DType float_dtype(Format f) {
  return f == Format::f32 ? DType::f32 : f == Format::f16 ? DType::f16 : DType::bf16;
}

// Group g's scale and zero point of W row m.
inline float group_scale(const OutsideScales& s, int64_t m, int64_t g) {
  const int64_t i = m * s.row_stride + g;
  const auto* p = static_cast<const uint8_t*>(s.data);
  return load_elem(p + i * (s.dtype == DType::f32 ? 4 : 2), s.dtype);
}
inline float group_zero_point(const OutsideScales& z, int64_t m, int64_t g) {
  const int64_t i = m * z.row_stride + g;
  const auto* p = static_cast<const uint8_t*>(z.data);
  if (z.dtype == DType::i8) return static_cast<float>(static_cast<int8_t>(p[i]));
  int32_t v;
  std::memcpy(&v, p + 4 * i, 4);
  return static_cast<float>(v);
}

}  // namespace
}  // namespace qg::detail::cpu
