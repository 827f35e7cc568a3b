// SPDX-License-Identifier: MIT
// cuda/common.cuh: what every CUDA implementation shares: error formatting,
// the "does this build have code for that GPU" check and the alignment-free
// loads used on packed blocks. (The call's device is made current by the
// dispatcher: DeviceScope, dispatch.h.)
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "backend.h"
#include "qg/ops.h"

namespace qg::detail::cuda {

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
