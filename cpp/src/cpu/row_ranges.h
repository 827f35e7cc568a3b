// SPDX-License-Identifier: MIT
// row_ranges.h: how the N = 1 (decode) paths that stream W cut its rows into
// pool tasks.
#pragma once

#include <cstdint>

namespace qg::detail::cpu {

// Row ranges, one a task: about four a thread, so that the pool balances
// them, of 64 to 256 rows (a multiple of 4, the rows a step takes). A range
// streams its rows with software prefetches that stop at its end, so with
// few threads longer ranges restart that stream less often: on a 2-core VM
// 256 rows took the Q4_0 AVX2 kernel at 14336 x 4096 from 1543 to 1408 us
// (medians of five rounds; bench/RESULTS.md). With many threads the ranges
// stay at 64 rows, enough tasks for every thread.
struct RowRanges {
  int64_t rows_per_task, tasks;
  int64_t begin(int64_t t) const { return t * rows_per_task; }
  int64_t end(int64_t t, int64_t m) const { return begin(t) + rows_per_task < m ? begin(t) + rows_per_task : m; }
};

inline RowRanges decode_row_ranges(int64_t m, int threads) {
  int64_t per = (m + 4 * threads - 1) / (4 * static_cast<int64_t>(threads));
  per = per < 64 ? 64 : (per > 256 ? 256 : (per + 3) / 4 * 4);
  return {per, (m + per - 1) / per};
}

}  // namespace qg::detail::cpu
