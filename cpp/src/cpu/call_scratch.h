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

// Kept buffers a thread has: slot 0 for a kernel's own scratch, slots 1 and
// 2 for operands repacked before a kernel runs (cpu_i8_repacked), which must
// outlive that kernel's slot-0 scratch.
constexpr int kScratchSlots = 3;

// At least `bytes` of scratch, 64-byte aligned, valid until the calling
// thread's next call_scratch of the same slot: the thread's kept buffer, or
// for larger needs `own` (the caller's, freed with it).
uint8_t* call_scratch(size_t bytes, std::vector<uint8_t>& own, int slot = 0);

}  // namespace qg::detail::cpu
