// SPDX-License-Identifier: MIT
// features.h: run-time CPU feature detection (see features.cpp).
#pragma once

#include <string>
#include <vector>

namespace qg::detail::cpu {

struct CpuFeatures {
  bool avx2 = false;
  bool fma = false;
  bool f16c = false;
  bool avx512_vnni = false;
};

const CpuFeatures& cpu_features();

}  // namespace qg::detail::cpu
