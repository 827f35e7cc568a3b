// SPDX-License-Identifier: MIT
// cuda/work_split.h: which K steps of which output tiles each CTA of the
// warpgroup Q4_0 kernels runs (docs/architecture.md, "Tiles shared by K").
// Host and device code: the kernel walks it, the host plans it, and the
// tests check the plan on any machine.
//
// The output is `rows` x `cols` tiles of `steps` K steps each (a step is
// one ring stage). A CTA of these kernels is persistent and holds a whole
// SM, so the grid is at most one CTA a slot. Two plans:
//
// - Whole tiles: tile b, b + ctas, ... for CTA b, in groups of 8 tile rows
//   (tile_coords), so that the CTAs running at once share rows of W and of
//   the activations in L2.
// - Shared by K, where whole tiles would leave SMs idle (fewer tiles than
//   SMs, or a last wave far from full): the CTAs form `groups` groups of
//   `cols`, one CTA a tile column, and a group takes whole tile rows
//   g, g + groups, ... and then a run of (tile row, step) units of the
//   remaining rows: all groups' runs of (almost) equal length, so every SM
//   finishes at about the same time. The CTAs of a group walk the same rows
//   at the same steps, so a step of W is read from memory once for all
//   columns, as with whole tiles. (A first plan cut each tile at its own
//   steps, so the columns of a row read W at different times; it was slower
//   than whole tiles in most measured shapes.)
//   A tile whose steps fall in several runs is summed through the
//   workspace: each CTA but the last to finish stores its part, and the
//   last adds the parts in the order of their groups (the same bits
//   whoever is last).
#pragma once

#include <algorithm>
#include <cstdint>

#if defined(__CUDACC__)
#define QG_SPLIT_HD __host__ __device__ __forceinline__
#else
#define QG_SPLIT_HD inline
#endif

namespace qg::detail::cuda {

// Steps a run keeps at least (a shorter run spends more on storing and
// adding its parts than it saves), and groups sharing one tile row at most
// (the last adds every part).
constexpr int64_t kMinRunSteps = 4;
constexpr int64_t kMaxSharers = 16;
// What sharing a tile costs the busiest CTA, in steps of a 128-row tile:
// storing or adding its parts (a fence, two counters, the parts' L2 round
// trips) and what whole tiles recover anyway (the SMs of a part-full last
// wave run faster). Not a measured cost but fitted: on an H100, sharing
// paid only where it saved the busiest CTA more than about 7 steps
// (docs/architecture.md, "Tiles shared by K").
constexpr int64_t kShareCostSteps = 7;

// Tile index -> (tile row, tile column), in groups of 8 tile rows: the CTAs
// running at once share rows of W and of the activations (L2 reuse on big
// shapes).
QG_SPLIT_HD void tile_coords(int64_t tile, int64_t tiles_m, int64_t tiles_n, int64_t* tm, int64_t* tn) {
  constexpr int64_t kGroup = 8;
  const int64_t per_group = kGroup * tiles_n;
  const int64_t group = tile / per_group, first = group * kGroup;
  const int64_t rows = tiles_m - first < kGroup ? tiles_m - first : kGroup;
  const int64_t in = tile - group * per_group;
  *tm = first + in % rows;
  *tn = in / rows;
}

// One CTA's piece of one tile: steps [first_step, first_step + steps) of
// tile (tm, tn); `shared` is the index among the shared tiles (row-major
// over the shared rows), -1 for a tile this CTA runs whole.
struct Segment {
  int64_t tm, tn, first_step, steps, shared;
};

struct WorkSplit {
  int64_t rows = 0, cols = 0, steps = 0;  // tile rows, tile columns, K steps a tile
  int64_t ctas = 0;                       // the grid
  int64_t groups = 0;                     // 0: whole tiles; else groups of cols CTAs
  int64_t whole_rows = 0;                 // tile rows the groups take whole

  QG_SPLIT_HD int64_t tiles() const { return rows * cols; }
  // The (row, step) units of rows [whole_rows, rows), row-major: group g's
  // run is [run_begin(g), run_begin(g + 1)).
  QG_SPLIT_HD int64_t shared_units() const { return groups > 0 ? (rows - whole_rows) * steps : 0; }
  QG_SPLIT_HD int64_t run_begin(int64_t g) const { return g * shared_units() / groups; }
  // The group whose run holds unit u: the largest g with run_begin(g) <= u,
  // i.e. g * U / groups < u + 1.
  QG_SPLIT_HD int64_t owner(int64_t u) const {
    const int64_t units = shared_units();
    return ((u + 1) * groups + units - 1) / units - 1;
  }
  // Shared row r (tile row whole_rows + r): the groups whose runs hold its steps.
  QG_SPLIT_HD int64_t first_sharer(int64_t r) const { return owner(r * steps); }
  QG_SPLIT_HD int64_t last_sharer(int64_t r) const { return owner(r * steps + steps - 1); }
  // Where group g's CTA of column c stores its part of shared row r: two
  // slots a CTA, one for the row its run starts in and one for the row it
  // ends in (a run's other rows are wholly its own and store no part).
  QG_SPLIT_HD int64_t part_slot(int64_t g, int64_t r, int64_t c) const {
    return (2 * g + (run_begin(g) >= r * steps ? 0 : 1)) * cols + c;
  }
  int64_t part_slots() const { return shared_units() > 0 ? 2 * groups * cols : 0; }
  int64_t shared_tiles() const { return shared_units() > 0 ? (rows - whole_rows) * cols : 0; }

  // Steps of K the busiest CTA runs, plus share_cost where it shares a tile.
  int64_t busiest_steps(int64_t share_cost = kShareCostSteps) const {
    if (groups == 0) return (tiles() + ctas - 1) / ctas * steps;
    const int64_t units = shared_units();
    return (whole_rows + groups - 1) / groups * steps + (units > 0 ? (units + groups - 1) / groups + share_cost : 0);
  }
};

// The walk of one CTA: its whole tiles, then its run.
class WorkWalk {
 public:
  QG_SPLIT_HD WorkWalk(const WorkSplit& w, int64_t cta) : w_(w) {
    if (w.groups == 0) {
      next_ = cta;
      return;
    }
    col_ = cta % w.cols;
    const int64_t g = cta / w.cols;
    if (g >= w.groups) return;  // a CTA past the groups: nothing to run
    next_ = g;
    unit_ = w.run_begin(g);
    run_end_ = w.run_begin(g + 1);
  }
  QG_SPLIT_HD bool next(Segment& sg) {
    if (w_.groups == 0) {
      if (next_ >= w_.tiles()) return false;
      tile_coords(next_, w_.rows, w_.cols, &sg.tm, &sg.tn);
      sg.first_step = 0;
      sg.steps = w_.steps;
      sg.shared = -1;
      next_ += w_.ctas;
      return true;
    }
    if (next_ < w_.whole_rows) {
      sg = Segment{next_, col_, 0, w_.steps, -1};
      next_ += w_.groups;
      return true;
    }
    if (unit_ >= run_end_) return false;
    const int64_t r = unit_ / w_.steps, first = unit_ % w_.steps;
    const int64_t left = run_end_ - unit_, steps = w_.steps - first < left ? w_.steps - first : left;
    sg = Segment{w_.whole_rows + r, col_, first, steps, r * w_.cols + col_};
    unit_ += steps;
    return true;
  }

 private:
  WorkSplit w_;
  int64_t col_ = 0, next_ = INT64_MAX, unit_ = 0, run_end_ = 0;
};

// The plan for rows x cols tiles of `steps` steps on `slots` CTAs at once:
// the plan whose busiest CTA runs fewer steps (busiest_steps with
// share_cost), whole tiles on a tie.
inline WorkSplit plan_work(int64_t rows, int64_t cols, int64_t steps, int64_t slots,
                           int64_t share_cost = kShareCostSteps) {
  WorkSplit whole;
  whole.rows = rows;
  whole.cols = cols;
  whole.steps = steps;
  whole.ctas = std::max<int64_t>(1, std::min(rows * cols, slots));
  const int64_t most_groups = cols > 0 ? slots / cols : 0;
  if (rows <= 0 || cols <= 0 || steps < kMinRunSteps || most_groups < 2) return whole;
  WorkSplit shared = whole;
  if (rows >= most_groups) {
    // Whole rows for every group as long as they last, then the rest shared.
    shared.groups = most_groups;
    shared.whole_rows = rows - rows % most_groups;
    if (shared.whole_rows == rows) return whole;
    // Runs too short, or so few rows left that more than kMaxSharers groups
    // would share one: the last whole round of rows is shared too.
    const int64_t left = rows - shared.whole_rows;
    if (left * steps < kMinRunSteps * most_groups || left * kMaxSharers < most_groups)
      shared.whole_rows -= most_groups;
  } else {
    // Fewer rows than groups: each row's K cut evenly among the same number
    // of groups, so that every run is one segment and starts and ends at
    // the same steps in every row (a run across two rows costs a second
    // storing of parts).
    const int64_t per_row = std::min({most_groups / rows, kMaxSharers, steps / kMinRunSteps});
    if (per_row < 2) return whole;
    shared.groups = rows * per_row;
    shared.whole_rows = 0;
  }
  shared.ctas = shared.groups * cols;
  return shared.busiest_steps(share_cost) < whole.busiest_steps() ? shared : whole;
}

}  // namespace qg::detail::cuda
