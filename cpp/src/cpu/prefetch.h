// SPDX-License-Identifier: MIT
// prefetch.h: where the CPU kernels' software prefetches point. In an unnamed
// namespace (one copy per file, as float_elem.h): the kernel files compiled
// for AVX-512 include it, and an inline function with external linkage there
// could be emitted as a shared copy that the linker picks for code running
// on CPUs without AVX-512.
#pragma once

#include <cstdint>

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

}  // namespace
}  // namespace qg::detail::cpu
