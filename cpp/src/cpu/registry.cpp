// SPDX-License-Identifier: MIT
// registry.cpp: the CPU backend's kernel tables, most specialised first.
// The ISA a kernel needs is data (its arch window); can_run judges only
// shape and alignment, and every CPU kernel takes any shape and alignment.
#include "backend.h"
#include "cpu/kernels.h"

namespace qg::detail::cpu {

namespace {

template <class Args>
bool any_shape(const Args&, std::string*) {
  return true;
}

constexpr ArchWindow kAnyCpu{};
constexpr ArchWindow kAvx2{0, 0, false, kCpuAvx2 | kCpuFma | kCpuF16c};
// kCpuAvx512Vnni stands for AVX-512 F + BW + VL + VNNI with ZMM state saved by
// the OS (features.cpp); its driver is compiled for AVX2, hence those too.
constexpr ArchWindow kAvx512Vnni{0, 0, false, kCpuAvx512Vnni | kCpuAvx2 | kCpuFma | kCpuF16c};

Registry make_registry() {
  Registry r;
  r.gemm = {
      {"cpu_avx512_vnni", Format::q4_0, Format::q8_1, kAvx512Vnni, kEpiAll, any_shape<GemmArgs>,
       [](const GemmArgs& a, Stream) { return gemm_q4_0_q8_1_avx512vnni(a); }},
      {"cpu_avx2", Format::q4_0, Format::q8_1, kAvx2, kEpiAll, any_shape<GemmArgs>,
       [](const GemmArgs& a, Stream) { return gemm_q4_0_q8_1_avx2(a); }},
      {"cpu_scalar", Format::q4_0, Format::q8_1, kAnyCpu, kEpiAll, any_shape<GemmArgs>,
       [](const GemmArgs& a, Stream) { return gemm_q4_0_q8_1_scalar(a); }},
  };
  r.quantize = {
      {"cpu_reference", kAllFormats, kAnyCpu, any_shape<QuantizeArgs>,
       [](const QuantizeArgs& a, Stream) { return quantize_rows(a); }},
  };
  r.dequantize = {
      {"cpu_reference", kAllFormats, kAnyCpu, any_shape<DequantizeArgs>,
       [](const DequantizeArgs& a, Stream) { return dequantize_rows(a); }},
  };
  return r;
}

}  // namespace

const Registry& registry() {
  static const Registry r = make_registry();
  return r;
}

}  // namespace qg::detail::cpu
