// SPDX-License-Identifier: MIT
// features.cpp: which ISA extensions this CPU has, asked once at run time, so
// one binary runs the AVX2 kernels where they exist and scalar code elsewhere.
#include "cpu/features.h"

#include "backend.h"

#include <cstdlib>
#include <cstring>

namespace qg::detail::cpu {

namespace {
CpuFeatures detect() {
  CpuFeatures f;
#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
  __builtin_cpu_init();
  f.avx2 = __builtin_cpu_supports("avx2");
  f.fma = __builtin_cpu_supports("fma");
  f.f16c = __builtin_cpu_supports("f16c");
  f.avx512_vnni = __builtin_cpu_supports("avx512vnni");
#endif
  // QG_CPU_ISA=scalar forces the portable kernels (for tests and comparisons).
  if (const char* isa = std::getenv("QG_CPU_ISA"); isa && std::strcmp(isa, "scalar") == 0) f = CpuFeatures{};
  return f;
}
}  // namespace

const CpuFeatures& cpu_features() {
  static const CpuFeatures f = detect();
  return f;
}

uint32_t feature_bits() {
  const CpuFeatures& f = cpu_features();
  return (f.avx2 ? kCpuAvx2 : 0u) | (f.fma ? kCpuFma : 0u) | (f.f16c ? kCpuF16c : 0u) |
         (f.avx512_vnni ? kCpuAvx512Vnni : 0u);
}

std::vector<std::string> features() {
  std::vector<std::string> out;
  const CpuFeatures& f = cpu_features();
  if (f.avx2) out.push_back("avx2");
  if (f.fma) out.push_back("fma");
  if (f.f16c) out.push_back("f16c");
  if (f.avx512_vnni) out.push_back("avx512_vnni");
  return out;
}

}  // namespace qg::detail::cpu
