// SPDX-License-Identifier: MIT
// cuda/device_limits.cuh: the per-device facts the launch code sizes grids
// with (multiprocessors, compute capability), asked once per device: a
// cudaDeviceGetAttribute per call would cost host time on every GEMM.
#pragma once

#include <cuda_runtime.h>

#include <mutex>
#include <string>

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

// Resident CTAs per SM of kKernel launched with `threads` threads and `smem`
// bytes of dynamic shared memory (the same for every launch of it), asked
// once per device: -1 where the image the device would run has a PTX version
// below min_ptx (the kernel's instructions would be missing or traps), 0
// where the device cannot hold one of its CTAs. The dynamic shared-memory
// limit (over the default 48 KB) is raised first.
template <auto kKernel>
int resident_ctas_of(int device, int threads, int smem, int min_ptx) {
  static std::once_flag once[kMaxDevices];
  static int cached[kMaxDevices];
  auto query = [&] {
    cudaFuncAttributes attr{};
    int blocks = 0;
    if (cudaFuncGetAttributes(&attr, kKernel) != cudaSuccess || attr.ptxVersion < min_ptx) {
      cudaGetLastError();
      return -1;
    }
    if (cudaFuncSetAttribute(kKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem) != cudaSuccess ||
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kKernel, threads, smem) != cudaSuccess) {
      cudaGetLastError();
      return 0;
    }
    return blocks;
  };
  if (device < 0 || device >= kMaxDevices) return query();
  std::call_once(once[device], [&] { cached[device] = query(); });
  return cached[device];
}

// The same for kernels of sm_90's bulk copies and mbarrier transaction
// counts: a build whose newest target is older than sm_90 runs on an H100
// through JIT-compiled PTX in which those are traps, so the image's PTX
// version must be 90 or more.
template <auto kKernel>
int resident_ctas_sm90(int device, int threads, int smem) {
  return resident_ctas_of<kKernel>(device, threads, smem, 90);
}

// can_run's reading of resident_ctas_of's answer: false, with the reason,
// for -1 and 0; `arch` names the code it needs ("sm_90").
inline bool ctas_fit(int per_sm, int device, const char* arch, std::string* why_not) {
  if (per_sm > 0) return true;
  cudaGetLastError();
  if (why_not)
    *why_not = per_sm < 0 ? std::string("this build has no ") + arch + " code for it on cuda:" + std::to_string(device)
                          : "cuda:" + std::to_string(device) +
                                " cannot hold one of its CTAs (registers or shared memory): the occupancy query gave 0";
  return false;
}

}  // namespace qg::detail::cuda
