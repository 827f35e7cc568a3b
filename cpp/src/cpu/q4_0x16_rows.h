// SPDX-License-Identifier: MIT
// cpu/q4_0x16_rows.h: one row's block in a q4_0x16 block (formats.h,
// block_q4_0x16), read out as a block_q4_0 or written in from one: what the
// repack, the reference kernel and the exact recompute of non-finite
// outputs share. Byte j of row r's codes sits at qs[j / 4][r][j % 4].
//
// Internal linkage (an unnamed namespace): included by files compiled for
// different ISAs, each keeps its own copy (see epilogue_rows.h).
#pragma once

#include <cstdint>
#include <cstring>

#include "qg/formats.h"

namespace qg::detail::cpu {
namespace {

constexpr int64_t kX16Bytes = sizeof(block_q4_0x16);
constexpr int64_t kX16ScaleOffset = 256;  // offsetof(block_q4_0x16, d)

// Row r's block out of the q4_0x16 block at p (288 bytes, no alignment).
inline void x16_get_row(const uint8_t* p, int r, block_q4_0* out) {
  std::memcpy(&out->d, p + kX16ScaleOffset + 2 * r, 2);
  for (int c = 0; c < 4; ++c) std::memcpy(out->qs + 4 * c, p + 64 * c + 4 * r, 4);
}

// Row r's block into the q4_0x16 block at p.
inline void x16_put_row(const block_q4_0& in, int r, uint8_t* p) {
  std::memcpy(p + kX16ScaleOffset + 2 * r, &in.d, 2);
  for (int c = 0; c < 4; ++c) std::memcpy(p + 64 * c + 4 * r, in.qs + 4 * c, 4);
}

static_assert(sizeof(block_q4_0x16) == kX16ScaleOffset + 2 * kQ4_0x16Rows, "scales follow the 256 code bytes");

}  // namespace
}  // namespace qg::detail::cpu
