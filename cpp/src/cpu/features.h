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
  bool avx_vnni = false;  // VEX-encoded vpdpbusd (CPUID.(EAX=7,ECX=1):EAX bit 4), where this build has its kernels
  // AMX tiles with int8 multiplies (CPUID.(EAX=7,ECX=0):EDX bits 24, 25), the
  // tile state enabled in XCR0 and granted to this process by the OS, on a
  // CPU with avx512_vnni, where this build has the AMX kernel.
  bool amx_int8 = false;
};

const CpuFeatures& cpu_features();

}  // namespace qg::detail::cpu
