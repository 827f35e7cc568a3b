// SPDX-License-Identifier: MIT
// row_ranges.h: how the decode paths that stream W cut its rows into pool
// tasks, and each task's rows into steps. In an unnamed namespace (one copy
// per file, as prefetch.h): kernel files compiled for AVX-512 include it,
// and a shared inline copy could be emitted with their instructions.
#pragma once

#include <cstdint>

namespace qg::detail::cpu {
namespace {

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

// One step of a decode kernel: kR rows of W from row m (the last one
// repeated where fewer than kR remain before the range's end m1), their
// indices (for their scales) and pointers, and how far past a row's end its
// prefetches run on: into the row kR further, which the range reads next
// (0 at the range's last step: stay in the row).
template <int kR>
struct StepRows {
  int rows;
  int64_t idx[kR];
  const uint8_t* w[kR];
  int64_t next;
  StepRows(const uint8_t* base, int64_t row_stride, int64_t m, int64_t m1)
      : rows(static_cast<int>(m1 - m < kR ? m1 - m : kR)), next(m + kR < m1 ? kR * row_stride : 0) {
    for (int r = 0; r < kR; ++r) {
      idx[r] = m + (r < rows ? r : rows - 1);
      w[r] = base + idx[r] * row_stride;
    }
  }
};

}  // namespace
}  // namespace qg::detail::cpu
