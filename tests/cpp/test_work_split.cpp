// SPDX-License-Identifier: MIT
// test_work_split.cpp: the plan that deals the warpgroup kernels' tiles and
// K steps to CTAs (cuda/work_split.h), walked on the host exactly as the
// kernel walks it. Runs everywhere: the plan is plain C++.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "work_split.h"

namespace {

using qg::detail::cuda::plan_work;
using qg::detail::cuda::Segment;
using qg::detail::cuda::WorkSplit;
using qg::detail::cuda::WorkWalk;

std::string describe(const WorkSplit& w) {
  return std::to_string(w.rows) + " x " + std::to_string(w.cols) + " tiles, steps " + std::to_string(w.steps) +
         ", ctas " + std::to_string(w.ctas) + ", groups " + std::to_string(w.groups) + ", whole rows " +
         std::to_string(w.whole_rows);
}

// Walks every CTA and checks: each (tile, step) is run exactly once; whole
// tiles are whole; a group's CTAs keep their column and walk the same rows
// at the same steps; the groups found on a shared row are exactly
// first_sharer .. last_sharer; each part slot is unique and in range; the
// runs' lengths differ by at most one step.
void check_plan(const WorkSplit& w, int64_t slots) {
  SCOPED_TRACE(describe(w));
  ASSERT_GE(w.ctas, 1);
  ASSERT_LE(w.ctas, std::max<int64_t>(1, slots));
  std::vector<int> runs(static_cast<size_t>(w.tiles() * w.steps), 0);
  std::map<int64_t, std::set<int64_t>> sharers;  // shared row -> groups seen on it
  std::set<int64_t> slots_used;
  std::map<int64_t, std::vector<std::vector<int64_t>>> walks;  // group -> each column's (row, step) list
  int64_t shortest = INT64_MAX, longest = 0;
  for (int64_t cta = 0; cta < w.ctas; ++cta) {
    WorkWalk walk(w, cta);
    Segment sg;
    int64_t run = 0;
    std::vector<int64_t> seen;
    while (walk.next(sg)) {
      ASSERT_GE(sg.tm, 0);
      ASSERT_LT(sg.tm, w.rows);
      ASSERT_GE(sg.tn, 0);
      ASSERT_LT(sg.tn, w.cols);
      ASSERT_GE(sg.steps, 1);
      ASSERT_LE(sg.first_step + sg.steps, w.steps);
      for (int64_t s = sg.first_step; s < sg.first_step + sg.steps; ++s) {
        ++runs[(sg.tm * w.cols + sg.tn) * w.steps + s];
        seen.push_back(sg.tm * w.steps + s);
      }
      if (sg.shared < 0) {
        EXPECT_EQ(sg.first_step, 0);
        EXPECT_EQ(sg.steps, w.steps);
        continue;
      }
      ASSERT_GT(w.groups, 0);
      EXPECT_EQ(sg.tn, cta % w.cols) << "a group's CTA keeps its column";
      const int64_t r = sg.tm - w.whole_rows;
      ASSERT_GE(r, 0);
      EXPECT_EQ(sg.shared, r * w.cols + sg.tn);
      EXPECT_LT(sg.shared, w.shared_tiles());
      run += sg.steps;
      const int64_t g = cta / w.cols;
      sharers[r].insert(g);
      if (w.first_sharer(r) != w.last_sharer(r)) {
        const int64_t slot = w.part_slot(g, r, sg.tn);
        EXPECT_TRUE(slots_used.insert(slot).second) << "slot " << slot << " taken twice";
        EXPECT_GE(slot, 0);
        EXPECT_LT(slot, w.part_slots());
      }
    }
    if (w.groups > 0 && cta / w.cols < w.groups) {
      walks[cta / w.cols].push_back(seen);
      if (w.shared_units() > 0) {
        shortest = std::min(shortest, run);
        longest = std::max(longest, run);
      }
    }
  }
  for (size_t i = 0; i < runs.size(); ++i) ASSERT_EQ(runs[i], 1) << "tile " << i / w.steps << " step " << i % w.steps;
  for (const auto& [g, cols] : walks)
    for (const auto& c : cols) EXPECT_EQ(c, cols.front()) << "group " << g << ": its CTAs walk the same rows and steps";
  for (const auto& [r, seen] : sharers) {
    EXPECT_EQ(*seen.begin(), w.first_sharer(r)) << "shared row " << r;
    EXPECT_EQ(*seen.rbegin(), w.last_sharer(r)) << "shared row " << r;
    EXPECT_EQ(static_cast<int64_t>(seen.size()), w.last_sharer(r) - w.first_sharer(r) + 1);
    EXPECT_LE(static_cast<int64_t>(seen.size()), qg::detail::cuda::kMaxSharers + 1);
  }
  if (w.shared_units() > 0) {
    EXPECT_LE(longest - shortest, 1) << "runs of equal length";
  }
}

TEST(WorkSplit, EveryStepOnceForManyShapes) {
  for (int64_t slots : {1, 2, 7, 78, 114, 132})
    for (int64_t rows : {1, 2, 3, 16, 32, 56, 100, 112, 131, 133, 200})
      for (int64_t cols : {1, 2, 3, 4, 8, 33})
        for (int64_t steps : {1, 3, 4, 5, 16, 56}) {
          check_plan(plan_work(rows, cols, steps, slots), slots);
          check_plan(plan_work(rows, cols, steps, slots, -1000), slots);  // sharing wherever it can
          if (HasFatalFailure()) return;
        }
}

// 56 x 4 tiles of 16 steps on 132 SMs (14336 x 4096, N = 512, 256-row
// tiles) shared wherever it can: 33 groups of 4 take 33 rows whole, and the
// other 23 rows' 368 steps are cut into runs of 11 or 12, so the busiest SM
// runs 28 steps instead of the 32 of two waves of whole tiles.
TEST(WorkSplit, LastRowsShared) {
  const WorkSplit w = plan_work(56, 4, 16, 132, 0);
  EXPECT_EQ(w.groups, 33);
  EXPECT_EQ(w.ctas, 132);
  EXPECT_EQ(w.whole_rows, 33);
  EXPECT_EQ(w.shared_units(), 23 * 16);
  EXPECT_EQ(w.busiest_steps(0), 16 + 12);
  check_plan(w, 132);
  // With the estimated cost of sharing, whole tiles (two waves, 32 steps) tie and stay.
  EXPECT_EQ(plan_work(56, 4, 16, 132, 4).groups, 0);
}

// Fewer rows than groups: each row's K cut evenly, one segment a run.
TEST(WorkSplit, FewRowsCutEvenly) {
  const WorkSplit w = plan_work(32, 1, 56, 132);
  EXPECT_EQ(w.groups, 128);  // 4 a row
  for (int64_t r = 0; r < 32; ++r) {
    EXPECT_EQ(w.first_sharer(r), 4 * r);
    EXPECT_EQ(w.last_sharer(r), 4 * r + 3);
  }
  check_plan(w, 132);
  // At most kMaxSharers groups a row, and runs of at least kMinRunSteps.
  EXPECT_EQ(plan_work(2, 1, 1000, 132).groups, 2 * qg::detail::cuda::kMaxSharers);
  EXPECT_EQ(plan_work(4, 1, 8, 132, 0).groups, 4 * 8 / qg::detail::cuda::kMinRunSteps);
}

// A few rows left over after the whole rounds, with long K: more than
// kMaxSharers groups would share each, so the last whole round is shared too
// (the last CTA of a tile adds every part).
TEST(WorkSplit, AtMostKMaxSharersARow) {
  for (int64_t steps : {112, 224})
    for (int64_t rows : {133, 135, 137})
      for (int64_t cols : {1, 2}) {
        const WorkSplit w = plan_work(rows, cols, steps, 132, 0);
        SCOPED_TRACE(describe(w));
        ASSERT_GT(w.groups, 0);
        for (int64_t r = 0; r < w.rows - w.whole_rows; ++r)
          EXPECT_LE(w.last_sharer(r) - w.first_sharer(r) + 1, qg::detail::cuda::kMaxSharers + 1) << "row " << r;
        check_plan(w, 132);
      }
}

// Where whole tiles already keep the SMs busy, or runs would be too short
// to pay for their parts, nothing is shared.
TEST(WorkSplit, WholeTilesWhereTheyFit) {
  EXPECT_EQ(plan_work(66, 4, 16, 132).groups, 0);   // two full waves
  EXPECT_EQ(plan_work(16, 8, 56, 132).groups, 0);   // one wave, 97 % full
  EXPECT_EQ(plan_work(200, 1, 3, 132).groups, 0);   // three steps a tile
  EXPECT_EQ(plan_work(3, 1, 7, 132).groups, 0);     // runs under kMinRunSteps
  EXPECT_EQ(plan_work(16, 70, 56, 132).groups, 0);  // columns past half the SMs
  // Rows left over whose runs would be short: the last whole round is shared too.
  const WorkSplit w = plan_work(140, 1, 8, 132, 0);
  EXPECT_EQ(w.whole_rows, 0);
  check_plan(w, 132);
}

// tile_coords visits every tile once, in groups of 8 tile rows.
TEST(WorkSplit, TileCoordsCoverEveryTile) {
  for (int64_t rows : {1, 7, 8, 9, 17, 64})
    for (int64_t cols : {1, 3, 16}) {
      std::set<std::pair<int64_t, int64_t>> seen;
      for (int64_t t = 0; t < rows * cols; ++t) {
        int64_t tm = -1, tn = -1;
        qg::detail::cuda::tile_coords(t, rows, cols, &tm, &tn);
        ASSERT_TRUE(tm >= 0 && tm < rows && tn >= 0 && tn < cols) << t;
        EXPECT_TRUE(seen.insert({tm, tn}).second) << "tile " << t;
        EXPECT_EQ(tm / 8, t / (8 * cols)) << "tile " << t << " leaves its group of 8 rows";
      }
    }
}

}  // namespace
