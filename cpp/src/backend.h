// SPDX-License-Identifier: MIT
// backend.h: how the core sees an implementation. Each one is a can_run/run
// pair; the dispatcher walks a backend's list, most specialised first, and
// runs the first whose can_run says yes (can_run writes why it says no).
// Args reaching an implementation have passed validate.h: shapes, strides,
// block sizes, alignment and devices are already known to be consistent.
#pragma once

#include <string>
#include <vector>

#include "qg/ops.h"
#include "qg/runtime.h"

namespace qg::detail {

struct GemmImpl {
  const char* name;
  bool (*can_run)(const GemmArgs& args, std::string* why_not);
  Status (*run)(const GemmArgs& args, Stream stream);
};

struct QuantizeImpl {
  const char* name;
  bool (*can_run)(Format format, const QuantizeArgs& args, std::string* why_not);
  Status (*run)(Format format, const QuantizeArgs& args, Stream stream);
};

struct DequantizeImpl {
  const char* name;
  bool (*can_run)(Format format, const DequantizeArgs& args, std::string* why_not);
  Status (*run)(Format format, const DequantizeArgs& args, Stream stream);
};

namespace cpu {
const std::vector<GemmImpl>& gemm_q4_0_q8_1_impls();
const std::vector<QuantizeImpl>& quantize_impls();
const std::vector<DequantizeImpl>& dequantize_impls();
std::vector<std::string> features();  // run-time detected ISA extensions
}  // namespace cpu

// Implemented by cuda/ when the CUDA backend is built, by no_cuda.cpp otherwise.
namespace cuda {
bool built();
std::string runtime_version();
std::vector<std::string> compiled_archs();
std::vector<CudaDeviceInfo> devices(std::string* why);
const std::vector<GemmImpl>& gemm_q4_0_q8_1_impls();
const std::vector<QuantizeImpl>& quantize_impls();
const std::vector<DequantizeImpl>& dequantize_impls();
Status device_alloc(int device, size_t bytes, void** ptr);
void device_free(int device, void* ptr) noexcept;
Status internal_stream(int device, Stream* stream);
Status stream_synchronize(int device, Stream stream);
}  // namespace cuda

}  // namespace qg::detail
