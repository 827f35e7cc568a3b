// SPDX-License-Identifier: MIT
// cuda/folded_tiles.h: which tile the folded warpgroup kernel takes for an
// M x N x K GEMM (host code; its tests use the same rule to reach each tile).
#pragma once

#include <cstdint>

#include "work_split.h"

namespace qg::detail::cuda {

constexpr int64_t kFoldedTallRows = 256, kFoldedRows = 128, kFoldedTokens = 128;
constexpr int64_t kFoldedStepK = 256;  // K a ring stage holds
// Sharing a 256-row tile is charged twice kShareCostSteps of its own steps
// (each about 1.86 of a 128-row step, so about 3.7 times the 128-row
// charge in time): its parts are twice the bytes, and the pair of charges
// was fitted together on the run that fitted kShareCostSteps
// (docs/architecture.md, "Tiles shared by K").
constexpr int64_t kFoldedTallShareCost = 2 * kShareCostSteps;

// The plans of the two tiles (work_split.h) for this shape.
inline WorkSplit folded_plan(int64_t m, int64_t n, int64_t k, int sms, bool tall) {
  const int64_t rows = tall ? kFoldedTallRows : kFoldedRows;
  return plan_work((m + rows - 1) / rows, (n + kFoldedTokens - 1) / kFoldedTokens, k / kFoldedStepK, sms,
                   tall ? kFoldedTallShareCost : kShareCostSteps);
}

// The 256-row tile does the work of two 128-row tiles in about 0.93 of
// their time (measured on an H200, docs/architecture.md, "The folded
// variant"), so it wins unless its busiest SM runs more than 1.86x the
// 128-row tile's busiest steps, each tile with its own plan.
inline bool folded_tall_tile(int64_t m, int64_t n, int64_t k, int sms) {
  const WorkSplit tall = folded_plan(m, n, k, sms, true), normal = folded_plan(m, n, k, sms, false);
  return 186 * tall.busiest_steps(kFoldedTallShareCost) < 100 * normal.busiest_steps();
}

}  // namespace qg::detail::cuda
