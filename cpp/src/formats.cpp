// SPDX-License-Identifier: MIT
// formats.cpp: the format traits table, one row per format.
#include "qg/formats.h"

#include <cstring>

namespace qg {

namespace {
// clang-format off
constexpr FormatTraits kTraits[kFormatCount] = {
    // format       name    bits signed off block bytes                packing                 scales               scale type      zp     sum    quant  fns
    {Format::q4_0, "q4_0",  4,   false,  8,  kQK4_0, sizeof(block_q4_0), Packing::nibbles_split, ScalePlace::in_block, ScaleType::f16, false, false, true, "qg.quantize_q4_0", "qg.dequantize_q4_0"},
    {Format::q8_0, "q8_0",  8,   true,   0,  kQK8_0, sizeof(block_q8_0), Packing::bytes,         ScalePlace::in_block, ScaleType::f16, false, false, true, "qg.quantize_q8_0", "qg.dequantize_q8_0"},
    {Format::q8_1, "q8_1",  8,   true,   0,  kQK8_1, sizeof(block_q8_1), Packing::bytes,         ScalePlace::in_block, ScaleType::f16, false, true,  true, "qg.quantize_q8_1", "qg.dequantize_q8_1"},
};
// clang-format on

constexpr bool rows_in_enum_order() {
  for (int i = 0; i < kFormatCount; ++i)
    if (static_cast<int>(kTraits[i].format) != i) return false;
  return true;
}
static_assert(rows_in_enum_order(), "kTraits rows must follow the Format enum's order");
}  // namespace

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
