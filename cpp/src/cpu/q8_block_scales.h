// SPDX-License-Identifier: MIT
// cpu/q8_block_scales.h: a Q8_0 / Q8_1 block written from its codes, scale
// and code sum: the fp16 fields (d, and for Q8_1 by the reference convention
// s = fp16(sum * d)) in front of the codes, for the vector block quantizers
// (quantize_q8_avx2.cpp, quantize_q8_avx512.cpp). Include only from files
// compiled with -mf16c: everything here is in an unnamed namespace, one
// copy per file (see epilogue_rows.h on why).
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "quant_block.h"

namespace qg::detail::cpu {
namespace {

// y: the block's first byte (any alignment). vcvtps2ph rounds to nearest
// even as fp32_to_fp16 does (d and sum * d are finite here: NaN, whose bits
// would differ, never reaches it), in one instruction where the portable
// conversion takes two dozen.
inline void store_q8_block_scales(uint8_t* y, float d, int code_sum, bool with_s) {
  const uint16_t d16 = _cvtss_sh(d, _MM_FROUND_TO_NEAREST_INT);
  std::memcpy(y, &d16, 2);
  if (with_s) {
    const uint16_t s16 = _cvtss_sh(mul_rn(static_cast<float>(code_sum), d), _MM_FROUND_TO_NEAREST_INT);
    std::memcpy(y + 2, &s16, 2);
  }
}

// A Q8_0 block (with_s false: d, codes) or Q8_1 block (d, s, codes) at y
// from the codes that `codes` makes of the 32 fp32 values at x; false,
// writing nothing, where it declines the block (non-finite values).
using Q8Codes = bool (*)(const uint8_t* x, uint8_t* qs, float* d, int* code_sum);
inline bool quantize_q8_block_with(Q8Codes codes, const uint8_t* x, uint8_t* y, bool with_s) {
  float d;
  int sum;
  if (!codes(x, y + (with_s ? 4 : 2), &d, &sum)) return false;
  store_q8_block_scales(y, d, sum, with_s);
  return true;
}

}  // namespace
}  // namespace qg::detail::cpu
