// SPDX-License-Identifier: MIT
// prefetch.h: where the CPU kernels' software prefetches point. In an unnamed
// namespace (one copy per file, as float_elem.h): the kernel files compiled
// for AVX-512 include it, and an inline function with external linkage there
// could be emitted as a shared copy that the linker picks for code running
// on CPUs without AVX-512.
#pragma once

#include <cstdint>

#include "qg/ops.h"

namespace qg::detail::cpu {
namespace {

// `ahead` bytes into a row of row_bytes, and past its end into the row `next`
// bytes further on (a step's or a panel's next rows; 0: none, stay in the row).
inline int64_t prefetch_offset(int64_t ahead, int64_t row_bytes, int64_t next) {
  return ahead < row_bytes || next == 0 ? ahead : next + ahead - row_bytes;
}

// Where a prefetched line goes: L2 (prefetcht1 on x86, what most kernels
// measured best) or L1 as well (prefetcht0).
enum class PrefetchTo { l2 = 2, l1 = 3 };

// One software prefetch for each of `count` rows, `ahead` bytes into them
// by prefetch_offset's rule; row[r] is row r's first byte. Every CPU
// kernel's row prefetches go through it.
template <PrefetchTo kTo = PrefetchTo::l2>
inline void prefetch_rows(const uint8_t* const* row, int count, int64_t ahead, int64_t row_bytes, int64_t next) {
  const int64_t off = prefetch_offset(ahead, row_bytes, next);
  for (int r = 0; r < count; ++r) __builtin_prefetch(row[r] + off, 0, static_cast<int>(kTo));
}

// The group scales (or zero points) of table rows row0..row0+rows-1, every
// 64-byte line of their first `groups` entries, into L2. The weight-only
// kernels convert a step's scales before its pass, and W's prefetches do not
// cover them: asked for a step ahead, they arrive while that step runs
// instead of missing to memory at its start (at K = 4096 and group 128 each
// row's scales are one line of their own).
inline void prefetch_group_scales(const OutsideScales& t, int64_t row0, int64_t rows, int64_t groups) {
  if (!t.data || rows <= 0 || groups <= 0) return;
  const int64_t es = dtype_size(t.dtype);
  for (int64_t r = row0; r < row0 + rows; ++r) {
    const auto* p = static_cast<const uint8_t*>(t.data) + r * t.row_stride * es;
    const int64_t bytes = groups * es;
    for (int64_t o = 0; o < bytes; o += 64) __builtin_prefetch(p + o, 0, 2);
    __builtin_prefetch(p + bytes - 1, 0, 2);  // p need not start a line
  }
}

}  // namespace
}  // namespace qg::detail::cpu
