// SPDX-License-Identifier: MIT
// cuda/common.cuh: what every CUDA implementation shares: the device guard,
// error formatting, the "does this build have code for that GPU" check and the
// alignment-free loads used on packed blocks.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "backend.h"
#include "qg/ops.h"

namespace qg::detail::cuda {

// Sets the current device for the scope of a call and puts the caller's back:
// kernels must run on the inputs' device, never the current one by accident.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    err_ = cudaGetDevice(&previous_);
    if (err_ != cudaSuccess) {
      previous_ = -1;
      return;
    }
    if (previous_ != device) {
      err_ = cudaSetDevice(device);
      if (err_ != cudaSuccess) previous_ = -1;
    }
  }
  ~DeviceGuard() {
    if (previous_ >= 0) {
      int now = -1;
      if (cudaGetDevice(&now) == cudaSuccess && now != previous_) cudaSetDevice(previous_);
    }
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;
  cudaError_t error() const { return err_; }

 private:
  int previous_ = -1;
  cudaError_t err_ = cudaSuccess;
};

inline cudaStream_t to_cuda(Stream stream) { return static_cast<cudaStream_t>(stream); }

// "cudaErrorNoDevice: no CUDA-capable device is detected"
inline std::string cuda_error_text(cudaError_t err) {
  return std::string(cudaGetErrorName(err)) + ": " + cudaGetErrorString(err);
}

// Reads and clears the error a launch left behind. Launch-configuration
// errors are not sticky, so clearing keeps the context usable. shape() names
// the problem in the message; it runs only on failure, so a successful
// launch builds no string.
template <class ShapeText>
Status launch_status(const char* op, ShapeText&& shape) {
  const cudaError_t err = cudaGetLastError();
  if (err == cudaSuccess) return Status::success();
  return Status(StatusCode::cuda_error, std::string(op) + " (cuda): " + cuda_error_text(err) + " (" + shape() + ")");
}

inline Status guard_status(const DeviceGuard& guard, const char* op, int device) {
  if (guard.error() == cudaSuccess) return Status::success();
  cudaGetLastError();
  return Status(StatusCode::cuda_error, std::string(op) + " (cuda): cannot select cuda:" +
                                            std::to_string(device) + ": " +
                                            cuda_error_text(guard.error()));
}

// True when this build holds SASS or PTX that device `device` can run; *why
// otherwise names the compiled architectures and the rebuild command. Never
// leaves a CUDA error behind. Defined in runtime.cu.
bool device_has_code(int device, std::string* why);

inline bool is_aligned(const void* p, uintptr_t alignment) {
  return reinterpret_cast<uintptr_t>(p) % alignment == 0;
}

// ------------------------------------------------------------ device helpers
__device__ __forceinline__ int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

// Q4_0 blocks are 18 bytes and Q8_0 blocks 34, so inside a row their fields
// are only 2-byte aligned: a 4-byte load would fault with
// cudaErrorMisalignedAddress. Two 16-bit loads assemble the word instead.
__device__ __forceinline__ int load_int_b2(const uint8_t* p) {
  const uint16_t* p16 = reinterpret_cast<const uint16_t*>(p);
  return static_cast<int>(static_cast<uint32_t>(p16[0]) | (static_cast<uint32_t>(p16[1]) << 16));
}

// Q8_1 blocks are 36 bytes: their codes stay 4-byte aligned when the row base is.
__device__ __forceinline__ int load_int_b4(const uint8_t* p) {
  return *reinterpret_cast<const int*>(p);
}

__device__ __forceinline__ uint16_t load_u16_b2(const uint8_t* p) {
  return *reinterpret_cast<const uint16_t*>(p);
}

// For the fallback paths, where nothing about the address is known.
__device__ __forceinline__ uint16_t load_u16_b1(const uint8_t* p) {
  return static_cast<uint16_t>(p[0] | (p[1] << 8));
}

// Signed 8-bit dot product of four byte pairs plus c: one DP4A on sm_61+
// (the kernels that use it are registered for sm_61+; the fallback only keeps
// builds for older targets compiling).
__device__ __forceinline__ int dp4a(int a, int b, int c) {
#if __CUDA_ARCH__ >= 610
  return __dp4a(a, b, c);
#else
  const char4 x = *reinterpret_cast<const char4*>(&a);
  const char4 y = *reinterpret_cast<const char4*>(&b);
  return c + x.x * y.x + x.y * y.y + x.z * y.z + x.w * y.w;
#endif
}

}  // namespace qg::detail::cuda
