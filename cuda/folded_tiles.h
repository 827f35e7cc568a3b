// SPDX-License-Identifier: MIT
// cuda/folded_tiles.h: which tile the folded warpgroup kernel takes for an
// M x N GEMM (host code; its tests use the same rule to reach each tile).
#pragma once

#include <cstdint>

namespace qg::detail::cuda {

constexpr int64_t kFoldedTallRows = 256, kFoldedRows = 128, kFoldedTokens = 128;

// The 256-row tile does the work of two 128-row tiles in about 0.93 of
// their time, so it wins unless it leaves more of its last wave of tiles
// idle: compare waves x time per wave, 1.86 against 1 (measured on an H200,
// docs/architecture.md, "The folded variant": the rule picks the faster tile
// in all 12 measured cases from N = 128 to 4096). Where the 128-row tiles
// take one wave or less they win outright: they also split K to fill it.
inline bool folded_tall_tile(int64_t m, int64_t n, int sms) {
  const int64_t cols = (n + kFoldedTokens - 1) / kFoldedTokens;
  const int64_t tall = (m + kFoldedTallRows - 1) / kFoldedTallRows * cols;
  const int64_t normal = (m + kFoldedRows - 1) / kFoldedRows * cols;
  const int64_t waves_tall = (tall + sms - 1) / sms, waves_normal = (normal + sms - 1) / sms;
  return 186 * waves_tall < 100 * waves_normal;
}

}  // namespace qg::detail::cuda
