// SPDX-License-Identifier: MIT
// cuda/gemm_q4_0_q8_1.cuh: the CUDA implementations of
//   C[m, n] = sum_b fp32(d_w[m, b]) * fp32(d_a[n, b]) * sum_i (w_i - 8) * a_i
// (quant_block.h's dot_block_q4_0_q8_1; the Q8_1 sum s is not read).
// One .cu per implementation, so they compile in parallel; the dispatch list
// is in registry.cu.
#pragma once

#include <cstdint>
#include <string>

#include "common.cuh"
#include "epilogue.h"

namespace qg::detail::cuda {

constexpr int kQ4_0Bytes = 18;  // sizeof(block_q4_0)
constexpr int kQ8_1Bytes = 36;  // sizeof(block_q8_1)

inline std::string gemm_shape(const GemmArgs& g) {
  return "M=" + std::to_string(g.a.rows) + ", N=" + std::to_string(g.b.rows) + ", K=" + std::to_string(g.a.k);
}

inline Status gemm_launch_status(const GemmArgs& g) {
  return launch_status(g.fn, [&] { return gemm_shape(g); });
}

// The 16-bit W loads and 32-bit A loads of the fast paths need these; the
// generic kernel reads bytes and needs nothing. A row stride only matters
// when there is a second row (validation lets a single row have any). C, bias
// and scales go through the epilogue's unaligned-safe stores.
inline bool gemm_operands_aligned(const GemmArgs& g, std::string* why_not) {
  if (!is_aligned(g.a.data, 2) || (g.a.rows > 1 && g.a.row_stride % 2 != 0)) {
    if (why_not)
      *why_not = "W (ptr % 2 = " + std::to_string(reinterpret_cast<uintptr_t>(g.a.data) % 2) +
                 ", row stride = " + std::to_string(g.a.row_stride) + ") is not 2-byte aligned";
    return false;
  }
  if (!is_aligned(g.b.data, 4) || (g.b.rows > 1 && g.b.row_stride % 4 != 0)) {
    if (why_not)
      *why_not = "A (ptr % 4 = " + std::to_string(reinterpret_cast<uintptr_t>(g.b.data) % 4) +
                 ", row stride = " + std::to_string(g.b.row_stride) + ") is not 4-byte aligned";
    return false;
  }
  return true;
}

// The decode kernels that copy W in 16-byte pieces (cp.async.cg, bulk
// copies) need its base and row stride 16-byte aligned.
inline bool w_rows_16_byte_aligned(const GemmArgs& g, std::string* why_not) {
  if (is_aligned(g.a.data, 16) && (g.a.rows <= 1 || g.a.row_stride % 16 == 0)) return true;
  if (why_not)
    *why_not = "W's rows are not 16-byte aligned (ptr % 16 = " +
               std::to_string(reinterpret_cast<uintptr_t>(g.a.data) % 16) +
               ", row stride = " + std::to_string(g.a.row_stride) + ")";
  return false;
}

// Kernels that address A by 32-bit byte offsets.
inline bool a_within_32_bit_offsets(const GemmArgs& g, std::string* why_not) {
  if ((g.b.rows - 1) * g.b.row_stride + g.a.k / 32 * kQ8_1Bytes < (int64_t{1} << 31)) return true;
  if (why_not) *why_not = "A spans 2 GiB or more (the kernel's offsets into it are 32-bit)";
  return false;
}

// Kernels whose CTAs take one row group of `group_rows` each, all resident
// at once: per_sm CTAs an SM on `sms` SMs.
inline bool row_groups_fit_one_wave(const GemmArgs& g, int group_rows, int per_sm, int sms, std::string* why_not) {
  const int64_t groups = (g.a.rows + group_rows - 1) / group_rows;
  const int64_t slots = static_cast<int64_t>(per_sm) * sms;
  if (groups <= slots) return true;
  if (why_not)
    *why_not = "M=" + std::to_string(g.a.rows) + ": " + std::to_string(groups) + " row groups of " +
               std::to_string(group_rows) + " > " + std::to_string(slots) + " resident CTAs (one group a CTA)";
  return false;
}

// The codes as the signed bytes 16 * (q - 8), for DP4A and the int8 MMAs:
// the high nibbles of a code word are (v & 0xF0F0F0F0) ^ 0x80808080 (one
// LOP3: x ^ 0x80 on x = 16q is 16q - 128 as a signed byte), the low ones the
// same after v << 4. A block's sum is then 16 * isum, exact (|16 isum| <=
// 16 * 32 * 8 * 128 = 2^19). `bias` is kCodeBias, which kernels pass from a
// register where they can: LOP3 takes one immediate, and with both masks
// immediate ptxas splits the form into two LOP3s.
constexpr uint32_t kCodeBias = 0x80808080u;
__device__ __forceinline__ int codes_x16_high(uint32_t v, uint32_t bias) {
  return static_cast<int>((v & 0xF0F0F0F0u) ^ bias);
}
__device__ __forceinline__ int codes_x16_low(uint32_t v, uint32_t bias) { return codes_x16_high(v << 4, bias); }

// Integer sums started at these bits (1.5 * 2^23) read as the float
// 1.5 * 2^23 + sum exactly while |sum| < 2^22: one FADD or FMA, not a
// quarter-rate I2F, turns them into floats.
constexpr uint32_t kMagicBits = 0x4B400000u;
constexpr float kMagic = 12582912.0f;

// Four Q4_0 codes held as bytes 0..15 -> the signed bytes code - 8, so that a
// single DP4A gives sum (w - 8) * a exactly. Done with three logic ops instead
// of __vsub4, which has no single instruction on sm_70 and later: code < 8
// (bit 3 clear) needs 0xF0 in the high nibble, code >= 8 just loses bit 3.
__device__ __forceinline__ int q4_0_codes_minus_8(uint32_t nibbles) {
  const uint32_t below8 = ~nibbles & 0x08080808u;
  return static_cast<int>((nibbles ^ 0x08080808u) | (below8 * 0x1Eu));
}

// cuda_gemv_bulk: N = 7..8 on sm_90+, W by bulk copies, int8 mma.sync.
bool gemm_bulk_can_run(const GemmArgs& args, std::string* why_not);
Status gemm_bulk_run(const GemmArgs& args, Stream stream);
// cuda_gemv_mma: N = 3..16 on sm_90 (N = 3 where M is at most 16 rows an
// SM or past one wave of 32-row groups), W
// and A through a cp.async ring a warp, K sliced over a CTA's warps, int8
// mma.sync.
bool gemm_mma_ring_can_run(const GemmArgs& args, std::string* why_not);
Status gemm_mma_ring_run(const GemmArgs& args, Stream stream);
Status gemm_mma_ring_run_quantizing(const GemmArgs& args, const QuantizeArgs& from_float, Stream stream);
// cuda_gemv_ring: N = 1..6 on sm_90, W through a cp.async ring a warp, A in shared memory, DP4A.
bool gemm_ring_can_run(const GemmArgs& args, std::string* why_not);
Status gemm_ring_run(const GemmArgs& args, Stream stream);
Status gemm_ring_run_quantizing(const GemmArgs& args, const QuantizeArgs& from_float, Stream stream);
bool gemm_mmvq_can_run(const GemmArgs& args, std::string* why_not);
Status gemm_mmvq_run(const GemmArgs& args, Stream stream);
bool gemm_wgmma_can_run(const GemmArgs& args, std::string* why_not);
Status gemm_wgmma_run(const GemmArgs& args, Stream stream);
// The same GEMM with B quantized inside from float activations (linear_q4_0):
// `from_float` would quantize them to Q8_1 at args.b, which is left unwritten.
Status gemm_wgmma_run_quantizing(const GemmArgs& args, const QuantizeArgs& from_float, Stream stream);
// The same kernel on fp16 codes and fp16 tensor cores (N >= 65, sm_90a).
bool gemm_wgmma_f16_can_run(const GemmArgs& args, std::string* why_not);
Status gemm_wgmma_f16_run(const GemmArgs& args, Stream stream);
Status gemm_wgmma_f16_run_quantizing(const GemmArgs& args, const QuantizeArgs& from_float, Stream stream);
// cuda_wgmma_folded: the scales folded into fp16 operands, one fp32 sum over
// all of K (NMSE near 1e-7, not the other kernels' bits); N >= 17, else as
// cuda_wgmma.
bool gemm_wgmma_folded_can_run(const GemmArgs& args, std::string* why_not);
Status gemm_wgmma_folded_run(const GemmArgs& args, Stream stream);
Status gemm_wgmma_folded_run_quantizing(const GemmArgs& args, const QuantizeArgs& from_float, Stream stream);
bool gemm_mma_can_run(const GemmArgs& args, std::string* why_not);
Status gemm_mma_run(const GemmArgs& args, Stream stream);
bool gemm_dp4a_tiled_can_run(const GemmArgs& args, std::string* why_not);
Status gemm_dp4a_tiled_run(const GemmArgs& args, Stream stream);
bool gemm_generic_can_run(const GemmArgs& args, std::string* why_not);
Status gemm_generic_run(const GemmArgs& args, Stream stream);

}  // namespace qg::detail::cuda
