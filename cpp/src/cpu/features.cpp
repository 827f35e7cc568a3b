// SPDX-License-Identifier: MIT
// features.cpp: which ISA extensions this CPU has, asked once at run time, so
// one binary runs the AVX-512 or AVX2 kernels where they exist and scalar code
// elsewhere.
#include "cpu/features.h"

#include "backend.h"
#include "cpu/kernels.h"

#include <cstdlib>
#include <cstring>

#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#endif
#if defined(__linux__) && defined(__x86_64__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace qg::detail::cpu {

namespace {

#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
// Whether the OS saves the whole AVX-512 state on context switches (XCR0: SSE,
// AVX, opmask, ZMM_Hi256, Hi16_ZMM): a CPU with AVX-512 under an OS or
// hypervisor that does not enable it faults on the first zmm instruction.
// libgcc's __builtin_cpu_supports checks this too; asked here as well so the
// kernel's safety does not rest on one runtime library's version. xgetbv by
// opcode bytes: this file is compiled without -mxsave.
bool os_saves_zmm_state() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx) || !(ecx & (1u << 27))) return false;  // OSXSAVE
  unsigned lo = 0, hi = 0;
  __asm__ volatile(".byte 0x0f, 0x01, 0xd0" : "=a"(lo), "=d"(hi) : "c"(0));  // xgetbv
  return (lo & 0xE6u) == 0xE6u;
}

// The AMX tile state (XTILECFG and XTILEDATA, XCR0 bits 17 and 18) enabled by
// the OS, and usable by this process. Linux (5.16 on) hands out the 8 KB of
// tile data per thread only to processes that ask, once, with
// arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA); without that the first
// tile instruction faults. The grant is for the whole process and stays.
// Elsewhere AMX is not offered.
bool os_grants_amx_tiles() {
#if defined(__linux__) && defined(__x86_64__)
  unsigned lo = 0, hi = 0;
  __asm__ volatile(".byte 0x0f, 0x01, 0xd0" : "=a"(lo), "=d"(hi) : "c"(0));  // xgetbv
  if ((lo & 0x60000u) != 0x60000u) return false;
  constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
#else
  return false;
#endif
}
#endif

CpuFeatures detect() {
  CpuFeatures f;
#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
  __builtin_cpu_init();
  f.avx2 = __builtin_cpu_supports("avx2");
  f.fma = __builtin_cpu_supports("fma");
  f.f16c = __builtin_cpu_supports("f16c");
  // avx512_vnni stands for what the AVX-512 VNNI kernel is compiled with:
  // AVX-512 F, BW (vpsrlw on zmm), VL and VNNI (vpdpbusd), usable by the OS.
  f.avx512_vnni = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                  __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni") && os_saves_zmm_state();
  // AVX-VNNI from CPUID directly (older compilers' __builtin_cpu_supports
  // does not know it); it uses ymm state only, which f.avx2 already needs
  // the OS to save. Leaf 7's EAX says how many subleaves there are. Offered
  // only where this build has the AVX-VNNI kernels (its compiler took
  // -mavxvnni): the feature stands for what qg can run with it.
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  const bool has_leaf_7_1 = __get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) && eax >= 1;
  f.avx_vnni = f.avx2 && has_leaf_7_1 && __get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx) && (eax & (1u << 4)) != 0 &&
               q4_avx_vnni_compiled();
  // AMX: leaf 7 subleaf 0, EDX bit 24 (AMX-TILE) and 25 (AMX-INT8); the OS
  // is asked below, once the overrides have had their say.
  f.amx_int8 = f.avx512_vnni && amx_kernels_compiled() && __get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) &&
               (edx & (3u << 24)) == (3u << 24);
#endif
  // QG_CPU_ISA=scalar forces the portable kernels, QG_CPU_ISA=avx2 the AVX2
  // ones where AVX-512 or AVX-VNNI is present, QG_CPU_ISA=avx_vnni the
  // AVX-VNNI ones where AVX-512 is, QG_CPU_ISA=avx512_vnni the AVX-512 ones
  // where AMX is (for tests and comparisons).
  if (const char* isa = std::getenv("QG_CPU_ISA")) {
    if (std::strcmp(isa, "scalar") == 0) f = CpuFeatures{};
    if (std::strcmp(isa, "avx2") == 0) f.avx512_vnni = f.avx_vnni = f.amx_int8 = false;
    if (std::strcmp(isa, "avx_vnni") == 0) f.avx512_vnni = f.amx_int8 = false;
    if (std::strcmp(isa, "avx512_vnni") == 0) f.amx_int8 = false;
  }
#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
  // The tile state is asked of the OS only where AMX would be used: the grant
  // is for the whole process and makes its signal frames larger (a program's
  // small sigaltstack could then no longer take a signal).
  f.amx_int8 = f.amx_int8 && os_grants_amx_tiles();
#endif
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
         (f.avx512_vnni ? kCpuAvx512Vnni : 0u) | (f.avx_vnni ? kCpuAvxVnni : 0u) | (f.amx_int8 ? kCpuAmxInt8 : 0u);
}

std::vector<std::string> features() {
  std::vector<std::string> out;
  const CpuFeatures& f = cpu_features();
  if (f.avx2) out.push_back("avx2");
  if (f.fma) out.push_back("fma");
  if (f.f16c) out.push_back("f16c");
  if (f.avx512_vnni) out.push_back("avx512_vnni");
  if (f.avx_vnni) out.push_back("avx_vnni");
  if (f.amx_int8) out.push_back("amx_int8");
  return out;
}

}  // namespace qg::detail::cpu
