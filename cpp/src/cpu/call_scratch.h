// SPDX-License-Identifier: MIT
// call_scratch.h: scratch memory for one CPU GEMM call, for the operands a
// kernel rearranges before its loops (widened int8 rows, permuted floats).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <utility>
#include <vector>

namespace qg::detail::cpu {

// Calls needing up to this much reuse one buffer per calling thread, only
// ever grown, so a stream of decode calls allocates nothing.
constexpr size_t kKeptScratchBytes = size_t{4} << 20;

// Kept buffers a thread has: slot 0 for a kernel's own scratch, slots 1 and
// 2 for operands repacked before a kernel runs (cpu_i8_repacked), which must
// outlive that kernel's slot-0 scratch.
constexpr int kScratchSlots = 3;

// Bytes that a resize leaves as they come (std::vector would zero them
// first: for a 16 MB scratch that is a pass over memory every call, before
// the kernel writes it anyway).
template <class T>
struct UninitializedAllocator : std::allocator<T> {
  template <class U>
  struct rebind {
    using other = UninitializedAllocator<U>;
  };
  UninitializedAllocator() = default;
  template <class U>
  UninitializedAllocator(const UninitializedAllocator<U>&) noexcept {}
  template <class U>
  void construct(U* p) noexcept {
    ::new (static_cast<void*>(p)) U;  // default-initialised: no write
  }
  template <class U, class... Args>
  void construct(U* p, Args&&... args) {
    ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }
};
using ScratchBytes = std::vector<uint8_t, UninitializedAllocator<uint8_t>>;
}  // namespace qg::detail::cpu

// Instantiated once, in call_scratch.cpp (compiled for no ISA extension):
// the kernel files compiled for AVX2, AVX-512 or AMX use ScratchBytes, and
// a member they emitted out of line would be a weak symbol the linker could
// keep for every other caller (cpp/cmake/check_isa_objects.cmake).
extern template class std::vector<uint8_t, qg::detail::cpu::UninitializedAllocator<uint8_t>>;

namespace qg::detail::cpu {

// A table of floats that only grows, for kernels compiled for an ISA
// extension (std::vector<float>'s members would be emitted there; see
// above). Its contents after reserve are whatever was there.
struct FloatTable {
  std::unique_ptr<float[]> data;
  size_t size = 0;
  float* reserve(size_t n);  // at least n floats; call_scratch.cpp
  float& operator[](size_t i) { return data[i]; }
  const float& operator[](size_t i) const { return data[i]; }
};

// At least `bytes` of scratch, 64-byte aligned, valid until the calling
// thread's next call_scratch of the same slot: the thread's kept buffer, or
// for larger needs `own` (the caller's, freed with it). Its bytes are
// whatever was there: a kernel writes what it reads.
uint8_t* call_scratch(size_t bytes, ScratchBytes& own, int slot = 0);

}  // namespace qg::detail::cpu
