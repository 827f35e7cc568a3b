// SPDX-License-Identifier: MIT
// registry.cpp: the CPU backend's implementations, most specialised first.
#include "backend.h"
#include "cpu/features.h"
#include "cpu/kernels.h"

namespace qg::detail::cpu {

namespace {

bool on_cpu(Device device, std::string* why) {
  if (device.type == DeviceType::cpu) return true;
  *why = "the arrays are on " + device_name(device) + ", not the CPU";
  return false;
}

bool compiled_avx2() {
#if defined(__x86_64__) || defined(_M_X64)
  return true;
#else
  return false;
#endif
}

}  // namespace

const std::vector<GemmImpl>& gemm_q4_0_q8_1_impls() {
  static const std::vector<GemmImpl> impls = {
      {"cpu_avx2",
       [](const GemmArgs& a, std::string* why) {
         if (!on_cpu(a.device, why)) return false;
         if (!compiled_avx2() || !cpu_features().avx2 || !cpu_features().fma) {
           *why = "this CPU (or QG_CPU_ISA) does not offer AVX2+FMA";
           return false;
         }
         return true;
       },
       [](const GemmArgs& a, Stream) { return gemm_q4_0_q8_1_avx2(a); }},
      {"cpu_scalar", [](const GemmArgs& a, std::string* why) { return on_cpu(a.device, why); },
       [](const GemmArgs& a, Stream) { return gemm_q4_0_q8_1_scalar(a); }},
  };
  return impls;
}

const std::vector<QuantizeImpl>& quantize_impls() {
  static const std::vector<QuantizeImpl> impls = {
      {"cpu_reference",
       [](Format, const QuantizeArgs& a, std::string* why) { return on_cpu(a.device, why); },
       [](Format f, const QuantizeArgs& a, Stream) { return quantize_rows(f, a); }},
  };
  return impls;
}

const std::vector<DequantizeImpl>& dequantize_impls() {
  static const std::vector<DequantizeImpl> impls = {
      {"cpu_reference",
       [](Format, const DequantizeArgs& a, std::string* why) { return on_cpu(a.device, why); },
       [](Format f, const DequantizeArgs& a, Stream) { return dequantize_rows(f, a); }},
  };
  return impls;
}

}  // namespace qg::detail::cpu
