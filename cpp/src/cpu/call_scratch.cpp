// SPDX-License-Identifier: MIT
// call_scratch.cpp: see call_scratch.h.
#include "cpu/call_scratch.h"

template class std::vector<uint8_t, qg::detail::cpu::UninitializedAllocator<uint8_t>>;

namespace qg::detail::cpu {

uint8_t* call_scratch(size_t bytes, ScratchBytes& own, int slot) {
  thread_local ScratchBytes kept[kScratchSlots];
  ScratchBytes& buf = bytes <= kKeptScratchBytes ? kept[slot] : own;
  // 63 spare bytes: the returned pointer is rounded up to a cache line, so
  // the kernels' 64-byte vector loads of it never split lines.
  if (buf.size() < bytes + 63) buf.resize(bytes + 63);
  const auto p = reinterpret_cast<uintptr_t>(buf.data());
  return buf.data() + ((64 - (p & 63)) & 63);
}

float* FloatTable::reserve(size_t n) {
  if (size < n) {
    data.reset(new float[n]);
    size = n;
  }
  return data.get();
}

}  // namespace qg::detail::cpu
