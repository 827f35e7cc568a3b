// SPDX-License-Identifier: MIT
// cuda/device_limits.cuh: the per-device facts the launch code sizes grids
// with (multiprocessors, compute capability), asked once per device: a
// cudaDeviceGetAttribute per call would cost host time on every GEMM.
#pragma once

#include <cuda_runtime.h>

#include <mutex>

namespace qg::detail::cuda {

constexpr int kMaxDevices = 64;

struct DeviceLimits {
  int sms = 1;
  int cc_major = 0;
};

inline DeviceLimits device_limits(int device) {
  static std::once_flag once[kMaxDevices];
  static DeviceLimits cached[kMaxDevices];
  auto query = [device] {
    DeviceLimits d;
    if (cudaDeviceGetAttribute(&d.sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess ||
        cudaDeviceGetAttribute(&d.cc_major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess) {
      cudaGetLastError();
      return DeviceLimits{};
    }
    return d;
  };
  if (device < 0 || device >= kMaxDevices) return query();
  std::call_once(once[device], [&] { cached[device] = query(); });
  return cached[device];
}

}  // namespace qg::detail::cuda
