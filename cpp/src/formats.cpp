// SPDX-License-Identifier: MIT
// formats.cpp: the format traits table, one row per format.
#include "qg/formats.h"

#include <cstring>

namespace qg {

namespace {
// clang-format off
constexpr FormatTraits kTraits[kFormatCount] = {
    // format       name    bits signed off block bytes                packing                 scales                scale type       zp     sum    quant  fns                                          storage    blocked pads_k  rows
    {Format::q4_0, "q4_0",  4,   false,  8,  kQK4_0, sizeof(block_q4_0), Packing::nibbles_split, ScalePlace::in_block, ScaleType::f16,  false, false, true,  "qg.quantize_q4_0", "qg.dequantize_q4_0",     DType::u8,   true,  false, 1},
    {Format::q8_0, "q8_0",  8,   true,   0,  kQK8_0, sizeof(block_q8_0), Packing::bytes,         ScalePlace::in_block, ScaleType::f16,  false, false, true,  "qg.quantize_q8_0", "qg.dequantize_q8_0",     DType::u8,   true,  false, 1},
    {Format::q8_1, "q8_1",  8,   true,   0,  kQK8_1, sizeof(block_q8_1), Packing::bytes,         ScalePlace::in_block, ScaleType::f16,  false, true,  true,  "qg.quantize_q8_1", "qg.dequantize_q8_1",     DType::u8,   true,  false, 1},
    {Format::i8,   "i8",    8,   true,   0,  1,      1,                  Packing::bytes,         ScalePlace::outside,  ScaleType::f32,  true,  false, true,  "qg.quantize_tensor", "qg.dequantize_tensor", DType::i8,   false, false, 1},
    {Format::i4,   "i4",    4,   true,   0,  2,      1,                  Packing::nibbles_pairs, ScalePlace::outside,  ScaleType::f32,  true,  false, true,  "qg.quantize_tensor", "qg.dequantize_tensor", DType::u8,   false, true, 1},
    {Format::i4x8, "i4x8",  4,   false,  8,  8,      4,                  Packing::nibbles_i32,   ScalePlace::outside,  ScaleType::f32,  false, false, true,  "qg.pack_int4_to_int32", "qg.unpack_int4_from_int32", DType::i32, false, false, 1},
    {Format::f16,  "f16",   16,  true,   0,  1,      2,                  Packing::native,        ScalePlace::none,     ScaleType::none, false, false, false, "qg.quantize_tensor", "qg.dequantize_tensor", DType::f16,  false, false, 1},
    {Format::bf16, "bf16",  16,  true,   0,  1,      2,                  Packing::native,        ScalePlace::none,     ScaleType::none, false, false, false, "qg.quantize_tensor", "qg.dequantize_tensor", DType::bf16, false, false, 1},
    {Format::f32,  "f32",   32,  true,   0,  1,      4,                  Packing::native,        ScalePlace::none,     ScaleType::none, false, false, false, "qg.quantize_tensor", "qg.dequantize_tensor", DType::f32,  false, false, 1},
    // Made from q4_0 by qg.repack, back to q4_0 the same way (quantize and dequantize refuse it).
    {Format::q4_0x16, "q4_0x16", 4, false, 8, kQK4_0, sizeof(block_q4_0x16), Packing::nibbles_rows16, ScalePlace::in_block, ScaleType::f16, false, false, false, "qg::quantize", "qg::dequantize", DType::u8, true, false, kQ4_0x16Rows},
};
// clang-format on

constexpr bool rows_in_enum_order() {
  for (int i = 0; i < kFormatCount; ++i)
    if (static_cast<int>(kTraits[i].format) != i) return false;
  return true;
}
static_assert(rows_in_enum_order(), "kTraits rows must follow the Format enum's order");
}  // namespace

int64_t row_elements(const FormatTraits& t, int64_t k) {
  return t.blocked_view ? row_bytes(t, k) : row_bytes(t, k) / dtype_size(t.storage);
}

int max_abs_code(const FormatTraits& t, bool zero_point) {
  if (!is_integer_format(t.format)) return 0;
  return zero_point ? (1 << t.element_bits) - 1 : 1 << (t.element_bits - 1);
}

const FormatTraits& format_traits(Format format) { return kTraits[static_cast<int>(format)]; }

bool format_from_name(const char* name, Format* out) {
  for (const FormatTraits& t : kTraits)
    if (name && std::strcmp(name, t.name) == 0) {
      *out = t.format;
      return true;
    }
  return false;
}

}  // namespace qg
