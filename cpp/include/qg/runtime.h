// SPDX-License-Identifier: MIT
// qg/runtime.h: what this build holds, which devices it sees, and the few
// device-memory and stream helpers the bindings need (JAX outputs, own stream).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "qg/status.h"
#include "qg/tensor.h"

namespace qg {

struct BuildInfo {
  std::string version;
  bool cuda_built = false;
  std::string cuda_runtime_version;      // "13.0" when built with CUDA
  std::vector<std::string> cuda_archs;   // as compiled: "80", "90a"
  std::vector<std::string> cpu_features; // detected at run time: "avx2", "fma"
  int cpu_threads = 1;
};
BuildInfo build_info();

struct CudaDeviceInfo {
  int id = 0;
  std::string name;
  int compute_capability = 0;  // 90 for sm_90
  int multiprocessors = 0;
  int64_t memory_bytes = 0;
  int64_t l2_bytes = 0;
  bool has_compiled_code = false;  // this build has code the device can run
};
// Empty when CUDA is not built or no device is visible; *why then says which.
// Never throws and never leaves a CUDA error behind: safe at import time.
std::vector<CudaDeviceInfo> cuda_devices(std::string* why = nullptr);
bool cuda_available(std::string* why = nullptr);

// CPU worker threads used by the CPU backend (0 restores the hardware default).
void set_cpu_threads(int threads);
int cpu_threads();

// Device memory for callers that have no allocator of their own (JAX outputs).
Status device_alloc(Device device, size_t bytes, void** ptr);
void device_free(Device device, void* ptr) noexcept;
// A non-blocking stream owned by qg, one per device, created on first use.
Status internal_stream(Device device, Stream* stream);
Status stream_synchronize(Device device, Stream stream);

}  // namespace qg
