// SPDX-License-Identifier: MIT
// cuda/cp_async.cuh: the asynchronous global -> shared copies (sm_80
// cp.async) that every pipelined kernel here stages its tiles with, and the
// fp16 scale conversion the Q4_0 kernels share. On older GPUs the copies
// compile to nothing: the kernels that use them are registered for sm_80+.
#pragma once

#include <cuda_fp16.h>

#include <cstdint>

namespace qg::detail::cuda {

// A generic pointer into shared memory as the 32-bit address cp.async and
// ldmatrix take.
__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// Copies `bytes` (0..kBytes) from src and zero-fills the rest of kBytes; with
// bytes = 0 it reads nothing (src must still be a valid address). 16-byte
// copies take .cg (bypass L1: the data is used once, from shared memory);
// smaller ones must take .ca, the only variant PTX allows for them.
template <int kBytes>
__device__ __forceinline__ void cp_async(uint32_t dst, const void* src, int bytes) {
#if __CUDA_ARCH__ >= 800
  if constexpr (kBytes == 16)
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(bytes));
  else
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;\n" ::"r"(dst), "l"(src), "n"(kBytes),
                 "r"(bytes));
#endif
}

__device__ __forceinline__ void cp_async_commit() {
#if __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;\n" ::);
#endif
}

// Waits until at most kPending committed groups are still in flight.
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
#if __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending));
#endif
}

// fp16 bits (the low 16 bits of h) -> fp32: one cvt.f32.f16, exact for
// subnormals, Inf and NaN (as quant_block.h's fp16_to_fp32).
__device__ __forceinline__ float half_bits_to_float(uint32_t h) {
  return __half2float(__ushort_as_half(static_cast<unsigned short>(h)));
}

}  // namespace qg::detail::cuda
