// SPDX-License-Identifier: MIT
// call_scratch.h: scratch memory for one CPU GEMM call, for the operands a
// kernel rearranges before its loops (widened int8 rows, permuted floats).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace qg::detail::cpu {

// Calls needing up to this much reuse one buffer per calling thread, only
// ever grown, so a stream of decode calls allocates nothing.
constexpr size_t kKeptScratchBytes = size_t{4} << 20;

// At least `bytes` of scratch, 64-byte aligned, valid until the calling
// thread's next call_scratch: the thread's kept buffer, or for larger needs
// `own` (the caller's, freed with it).
uint8_t* call_scratch(size_t bytes, std::vector<uint8_t>& own);

}  // namespace qg::detail::cpu
