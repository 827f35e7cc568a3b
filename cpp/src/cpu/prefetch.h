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

}  // namespace
}  // namespace qg::detail::cpu
