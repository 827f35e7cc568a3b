// SPDX-License-Identifier: MIT
// cuda/gemm_q4_0_q8_1.cuh: the CUDA implementations of
//   C[m, n] = sum_b fp32(d_w[m, b]) * fp32(d_a[n, b]) * sum_i (w_i - 8) * a_i
// (quant_block.h's dot_block_q4_0_q8_1; the Q8_1 sum s is not read).
// One .cu per implementation, so they compile in parallel; the dispatch list
// is in gemm_q4_0_q8_1.cu.
#pragma once

#include <cstdint>
#include <string>

#include "common.cuh"

namespace qg::detail::cuda {

constexpr int kQ4_0Bytes = 18;  // sizeof(block_q4_0)
constexpr int kQ8_1Bytes = 36;  // sizeof(block_q8_1)

inline std::string gemm_shape(const GemmArgs& a) {
  return "M=" + std::to_string(a.m) + ", N=" + std::to_string(a.n) + ", K=" + std::to_string(a.k);
}

inline Status gemm_launch_status(const GemmArgs& a) {
  return launch_status("qg.gemm_q4_0_q8_1", gemm_shape(a));
}

// The 16-bit W loads and 32-bit A loads of the fast paths need these; the
// generic kernel reads bytes and needs nothing. A leading dimension only
// matters when there is a second row (validation lets a single row have any).
inline bool gemm_operands_aligned(const GemmArgs& a, std::string* why_not) {
  if (!is_aligned(a.w, 2) || (a.m > 1 && a.ldw % 2 != 0)) {
    if (why_not)
      *why_not = "W (ptr % 2 = " + std::to_string(reinterpret_cast<uintptr_t>(a.w) % 2) +
                 ", ldw = " + std::to_string(a.ldw) + ") is not 2-byte aligned";
    return false;
  }
  if (!is_aligned(a.a, 4) || (a.n > 1 && a.lda % 4 != 0)) {
    if (why_not)
      *why_not = "A (ptr % 4 = " + std::to_string(reinterpret_cast<uintptr_t>(a.a) % 4) +
                 ", lda = " + std::to_string(a.lda) + ") is not 4-byte aligned";
    return false;
  }
  if (!is_aligned(a.c, 4)) {
    if (why_not) *why_not = "C is not 4-byte aligned";
    return false;
  }
  return true;
}

// Signed 8-bit dot product of four byte pairs plus c: one DP4A on sm_61+.
__device__ __forceinline__ int dp4a(int a, int b, int c) {
#if __CUDA_ARCH__ >= 610
  return __dp4a(a, b, c);
#else
  const char4 x = *reinterpret_cast<const char4*>(&a);
  const char4 y = *reinterpret_cast<const char4*>(&b);
  return c + x.x * y.x + x.y * y.y + x.z * y.z + x.w * y.w;
#endif
}

// Four Q4_0 codes held as bytes 0..15 -> the signed bytes code - 8, so that a
// single DP4A gives sum (w - 8) * a exactly. Done with three logic ops instead
// of __vsub4, which has no single instruction on sm_70 and later: code < 8
// (bit 3 clear) needs 0xF0 in the high nibble, code >= 8 just loses bit 3.
__device__ __forceinline__ int q4_0_codes_minus_8(uint32_t nibbles) {
  const uint32_t below8 = ~nibbles & 0x08080808u;
  return static_cast<int>((nibbles ^ 0x08080808u) | (below8 * 0x1Eu));
}

bool gemm_mmvq_can_run(const GemmArgs& args, std::string* why_not);
Status gemm_mmvq_run(const GemmArgs& args, Stream stream);
bool gemm_dp4a_tiled_can_run(const GemmArgs& args, std::string* why_not);
Status gemm_dp4a_tiled_run(const GemmArgs& args, Stream stream);
bool gemm_generic_can_run(const GemmArgs& args, std::string* why_not);
Status gemm_generic_run(const GemmArgs& args, Stream stream);

}  // namespace qg::detail::cuda
