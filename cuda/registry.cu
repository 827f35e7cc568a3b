// SPDX-License-Identifier: MIT
// cuda/registry.cu: the CUDA backend's kernel tables, most specialised first.
// Arch windows and epilogue capabilities are data here; each can_run judges
// only shape and alignment.
//   cuda_mmvq        q4_0 x q8_1, N <= 8 (decode): memory-bound GEMV, K split across a CTA
//   cuda_mma         q4_0 x q8_1, any N (sm_80+): int8 tensor cores, mma.sync m16n8k32
//   cuda_dp4a_tiled  q4_0 x q8_1, any N, pre-Ampere: 64x64 shared-memory tiles, DP4A
//   cuda_generic     q4_0 x q8_1, anything, including unaligned operands: byte loads
//   cuda_warp_staged quantize / dequantize, every format
#include "gemm_q4_0_q8_1.cuh"
#include "quantize.cuh"

namespace qg::detail::cuda {

namespace {
// DP4A (sm_61) is the newest instruction these kernels need.
constexpr ArchWindow kDp4a{61, 0, false, 0};
constexpr ArchWindow kAnyGpu{0, 0, false, 0};
// int8 mma.sync.m16n8k32 and cp.async (sm_80).
constexpr ArchWindow kMmaS8{80, 0, false, 0};

Registry make_registry() {
  Registry r;
  r.gemm = {
      {"cuda_mmvq", Format::q4_0, Format::q8_1, kDp4a, kEpiFloatAll, gemm_mmvq_can_run, gemm_mmvq_run},
      {"cuda_mma", Format::q4_0, Format::q8_1, kMmaS8, kEpiFloatAll, gemm_mma_can_run, gemm_mma_run},
      {"cuda_dp4a_tiled", Format::q4_0, Format::q8_1, kDp4a, kEpiFloatAll, gemm_dp4a_tiled_can_run, gemm_dp4a_tiled_run},
      {"cuda_generic", Format::q4_0, Format::q8_1, kAnyGpu, kEpiFloatAll, gemm_generic_can_run, gemm_generic_run},
  };
  r.quantize = {{"cuda_warp_staged", kGgmlFormats, kAnyGpu, quantize_can_run, quantize_run}};
  r.dequantize = {{"cuda_warp_staged", kGgmlFormats, kAnyGpu, dequantize_can_run, dequantize_run}};
  return r;
}
}  // namespace

const Registry& registry() {
  static const Registry r = make_registry();
  return r;
}

}  // namespace qg::detail::cuda
