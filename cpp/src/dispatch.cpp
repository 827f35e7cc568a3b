// SPDX-License-Identifier: MIT
// dispatch.cpp: device capabilities, arch windows and the dispatcher's messages.
#include "dispatch.h"

namespace qg::detail {

Status device_caps(const char* fn, Device device, DeviceCaps* caps) {
  if (device.type == DeviceType::cpu) {
    caps->cpu_features = cpu::feature_bits();
    return {};
  }
  if (!cuda::built())
    return Status(StatusCode::backend_unavailable,
                  std::string(fn) + ": the input is on " + device_name(device) +
                      " but this qg build has no CUDA backend (reinstall with nvcc on PATH, e.g. "
                      "QG_CUDA=ON pip install .)");
  std::string why;
  if (!cuda::usable_device(device.id, &caps->cc, &why))
    return Status(StatusCode::backend_unavailable,
                  std::string(fn) + ": the input is on " + device_name(device) +
                      " but qg cannot run there (" + why + ")");
  return {};
}

DeviceScope::DeviceScope(Device device) {
  if (device.type != DeviceType::cuda) return;
  device_ = device.id;
  if (!cuda::select_device(device.id, &previous_, &why_) && why_.empty()) why_ = "unknown error";
}

DeviceScope::~DeviceScope() { cuda::restore_device(previous_); }

Status DeviceScope::status(const char* fn) const {
  if (why_.empty()) return {};
  return Status(StatusCode::cuda_error,
                std::string(fn) + " (cuda): cannot select cuda:" + std::to_string(device_) + ": " + why_);
}

Status DeviceScope::ready(const char* fn) const {
  if (why_.empty()) return {};
  DeviceCaps caps;
  if (Status s = device_caps(fn, Device::cuda(device_), &caps); !s.ok()) return s;
  return status(fn);
}

const Registry& registry_for(Device device) {
  return device.type == DeviceType::cuda ? cuda::registry() : cpu::registry();
}

namespace {
std::string sm(int cc, bool arch_specific) {
  return "sm_" + std::to_string(cc) + (arch_specific ? "a" : "");
}
std::string cpu_feature_names(uint32_t bits) {
  static const char* names[] = {"avx2", "fma", "f16c", "avx512_vnni", "avx_vnni", "amx_int8"};
  std::string s;
  for (int i = 0; i < 6; ++i)
    if (bits & (1u << i)) s += (s.empty() ? "" : "+") + std::string(names[i]);
  return s;
}
}  // namespace

bool arch_admits(const ArchWindow& w, Device device, const DeviceCaps& caps, std::string* why_not) {
  if (device.type == DeviceType::cpu) {
    const uint32_t missing = w.cpu_features & ~caps.cpu_features;
    if (missing == 0) return true;
    if (why_not) *why_not = "needs " + cpu_feature_names(missing) + ", which this CPU (or QG_CPU_ISA) does not offer";
    return false;
  }
  if (w.arch_specific && caps.cc != w.min_cc) {
    if (why_not) *why_not = "needs " + sm(w.min_cc, true) + " exactly; " + device_name(device) + " is " + sm(caps.cc, false);
    return false;
  }
  if (caps.cc < w.min_cc || (w.max_cc > 0 && caps.cc > w.max_cc)) {
    if (why_not) *why_not = "needs " + sm(w.min_cc, false) + (w.max_cc ? " to " + sm(w.max_cc, false) : " or newer") +
               "; " + device_name(device) + " is " + sm(caps.cc, false);
    return false;
  }
  return true;
}

uint32_t epilogue_needs(const GemmArgs& a) {
  const Epilogue& e = a.epilogue;
  uint32_t need = 0;
  if (e.alpha != 1.0f) need |= kEpiAlpha;
  if (e.row_scale || e.col_scale) need |= kEpiScales;
  if (e.beta != 0.0f) need |= kEpiBeta;
  if (e.bias) need |= kEpiBias;
  if (e.activation == Activation::relu) need |= kEpiRelu;
  if (a.c_dtype == DType::f16) need |= kEpiOutF16;
  if (a.c_dtype == DType::bf16) need |= kEpiOutBf16;
  if (a.ldc_n != 1) need |= kEpiStridedC;
  if (e.row_zero_point || e.col_zero_point) need |= kEpiZeroPoints;
  if (a.c_dtype == DType::i32) need |= kEpiOutI32;
  return need;
}

std::string epilogue_cap_names(uint32_t caps) {
  static const char* names[] = {"alpha", "row/column scales", "beta", "bias", "relu",
                                "float16 output", "bfloat16 output", "strided C", "zero points", "int32 output"};
  std::string s;
  for (int i = 0; i < 10; ++i)
    if (caps & (1u << i)) s += (s.empty() ? "" : ", ") + std::string(names[i]);
  return s;
}

std::string call_key(const GemmArgs& a) {
  return std::string(format_traits(a.a.format).name) + " x " + format_traits(a.b.format).name + " on " +
         device_name(a.device);
}
std::string call_key(const QuantizeArgs& a) {
  return std::string(dtype_name(a.x_dtype)) + " -> " + format_traits(a.format).name + " on " +
         device_name(a.device);
}
std::string call_key(const DequantizeArgs& a) {
  return std::string(format_traits(a.format).name) + " -> float32 on " + device_name(a.device);
}

Status no_kernel(const char* fn, const std::string& key, const std::string& reasons, bool any_served) {
  if (!any_served)
    return Status(StatusCode::unsupported,
                  std::string(fn) + ": qg has no kernel for " + key +
                      "; see qg.explain or docs/architecture.md for the supported format pairs");
  return Status(StatusCode::unsupported,
                std::string(fn) + ": no kernel can run " + key + " (" + reasons + ")");
}

}  // namespace qg::detail
