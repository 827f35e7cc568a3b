// SPDX-License-Identifier: MIT
// cuda/registry.cu: the CUDA backend's kernel tables, most specialised first.
// Arch windows and epilogue capabilities are data here; each can_run judges
// only shape and alignment.
//   cuda_gemv_mma    q4_0 x q8_1, N = 3..32 (3: M <= 16 x SMs or more 32-row groups than SMs; 9..16: at most three an SM; 17..32: at most two an SM, and to N = 24 where 32-row groups meet K > 12288), K % 256 == 0, 16-byte W rows (sm_90): W and A through a cp.async ring a warp, 16-row groups up to 16 x SMs rows, 32-row past that, K sliced over a CTA's warps (8; 4 or 2 past one wave of groups), int8 mma.sync
//   cuda_wgmma_folded q4_0 x q8_1, as cuda_wgmma with N >= 17: the scales folded into fp16 operands, one fp32 sum over K (NMSE ~1e-7)
//   cuda_wgmma_f16   q4_0 x q8_1, as cuda_wgmma with N >= 65: the codes as fp16, fp16 MMAs summing exactly in fp32 (cuda_wgmma's bits)
//   cuda_gemv_bulk   q4_0 x q8_1, N = 7..8, K % 256 == 0, 16-byte W rows (sm_90+): W by bulk copies (a producer warp), int8 mma.sync
//   cuda_gemv_ring   q4_0 x q8_1, N = 1..6 (3..6: M in one wave of CTAs; 3..6 on sm_90 where cuda_gemv_mma refuses), K % 256 == 0, 16-byte W rows (sm_90): W through a cp.async ring a warp, A in shared memory, DP4A
//   cuda_wgmma       q4_0 x q8_1, M >= 128, N >= 7, K % 256 == 0 and K <= 65535 x 256 (sm_90a): wgmma, W fragments from registers, activations re-laid by a first pass
//   cuda_mmvq        q4_0 x q8_1, N <= 8 (decode): memory-bound GEMV, K split across a CTA (where the kernels above refuse)
//   cuda_mma         q4_0 x q8_1, any N (sm_80+): int8 tensor cores, mma.sync m16n8k32
//   cuda_dp4a_tiled  q4_0 x q8_1, any N, pre-Ampere: 64x64 shared-memory tiles, DP4A
//   cuda_generic     q4_0 x q8_1, anything, including unaligned operands: byte loads
//   cuda_lane_groups quantize, every block format: 16-byte loads, a block over 2-4 lanes
//   cuda_warp_staged dequantize, every block format: a warp's 32 blocks staged through shared memory
//   cuda_i8_wgmma    i8 x i8, M and N >= 128 (sm_90a): wgmma fed by TMA, no zero points
//   cuda_i8_mma      i8 x i8, K-contiguous 16-byte-aligned rows (sm_80+): int8 mma.sync m16n8k32, all epilogues
//   cuda_i8_dp4a     i8 x i8, K-contiguous 4-byte-aligned rows, pre-Ampere (sm_61+): shared-memory tiles, DP4A, all epilogues
//   cuda_i8_repacked i8 x i8 with an operand strided along K (sm_61+): repacked into K-contiguous rows, then dispatched again
//   cuda_wo_gemv_fixed i4 (group scales) x f16 / bf16, N = 1 (sm_90): x in block fixed point (by each CTA to K = 4096, by a pass past it), W through a cp.async ring a warp, DP4A; launched early behind the previous kernel
//   cuda_wo_gemv_mma   i4 (group scales >= 128) x f16 / bf16, N = 2..16, K % 256 == 0 (sm_90): W and x through a cp.async ring a warp, K sliced over a CTA's warps, mma.sync in fragment order; launched early behind the previous kernel
//   cuda_wo_gemv_bulk  i4 (group scales >= 128) x f16 / bf16, N = 2..16 (sm_90+; where cuda_wo_gemv_mma refuses): W by bulk copies, mma.sync in fragment order
//   cuda_wo_gemv_small i4 (group scales) x f16 / bf16, N <= 2 (sm_80+): W streamed to registers, FFMAs
//   cuda_wo_wgmma    i4 (group scales >= 128, int8 zero points or none) x f16 / bf16, N >= 33, K % 128 == 0 (sm_90a): W decoded once a CTA into shared memory, wgmma.m64nNk16 with both operands there, 128-row x 64/128-token tiles, K split over clusters
//   cuda_wo_mma      i4 (group scales >= 32) x f16 / bf16, N >= 17, K % 128 == 0 (sm_80+): tiled prefill GEMM on f16/bf16 mma.sync, 128-row x 32..128-token tiles, K split over sm_90 clusters
//   cuda_wo_gemv     i4 (group scales) x f16 / bf16 (sm_80+): decode GEMV on f16/bf16 mma.sync, N > 16 in slices of 16, the grid's rows of one launch (where cuda_wo_mma refuses: K % 128 != 0)
//   cuda_wo_f32_split i4 (group scales) x f32: each x as bf16 hi + lo (16 significant bits), one GEMM of 2N tokens on the kernels above into fp32 scratch, each token's pair added through the epilogue (where one of them, not cuda_wo_generic, takes the 2N tokens)
//   cuda_int_generic any pair of i8 / i4 / i4x8, any strides, zero points, int32 out: byte loads
//   cuda_wo_generic  i8 / i4 weights with group scales x f16 / bf16 / f32 activations: byte loads
//   cuda_int_rows    quantize / dequantize of i8 / i4 / i4x8 (tensor, row and group scales)
#include "gemm_int.cuh"
#include "gemm_int_fast.cuh"
#include "gemm_q4_0_q8_1.cuh"
#include "quantize.cuh"

namespace qg::detail::cuda {

namespace {
// DP4A (sm_61) is the newest instruction these kernels need.
constexpr ArchWindow kDp4a{61, 0, false, 0};
constexpr ArchWindow kAnyGpu{0, 0, false, 0};
// int8 mma.sync.m16n8k32 and cp.async (sm_80).
constexpr ArchWindow kMmaS8{80, 0, false, 0};
// cp.async.bulk and mbarrier transaction counts (sm_90).
constexpr ArchWindow kBulkCopy{90, 0, false, 0};
// The cp.async ring GEMV: measured (and so dispatched) on Hopper only; its
// early launch behind the quantizer needs sm_90's griddepcontrol.
constexpr ArchWindow kRing{90, 90, false, 0};
// wgmma and setmaxnreg-era code: the sm_90a image, on sm_90 exactly.
constexpr ArchWindow kWgmma{90, 0, true, 0};

Registry make_registry() {
  Registry r;
  r.gemm = {
      {"cuda_gemv_mma", Format::q4_0, Format::q8_1, kRing, kEpiFloatAll, gemm_mma_ring_can_run, gemm_mma_ring_run,
       gemm_mma_ring_run_quantizing},
      {"cuda_wgmma_folded", Format::q4_0, Format::q8_1, kWgmma, kEpiFloatAll, gemm_wgmma_folded_can_run,
       gemm_wgmma_folded_run, gemm_wgmma_folded_run_quantizing},
      {"cuda_wgmma_f16", Format::q4_0, Format::q8_1, kWgmma, kEpiFloatAll, gemm_wgmma_f16_can_run,
       gemm_wgmma_f16_run, gemm_wgmma_f16_run_quantizing},
      // N = 7..8 past sm_90, where cuda_gemv_mma (sm_90 only) does not run;
      // on sm_90 that one takes every shape this one does.
      {"cuda_gemv_bulk", Format::q4_0, Format::q8_1, kBulkCopy, kEpiFloatAll, gemm_bulk_can_run, gemm_bulk_run},
      {"cuda_wgmma", Format::q4_0, Format::q8_1, kWgmma, kEpiFloatAll, gemm_wgmma_can_run, gemm_wgmma_run,
       gemm_wgmma_run_quantizing},
      {"cuda_gemv_ring", Format::q4_0, Format::q8_1, kRing, kEpiFloatAll, gemm_ring_can_run, gemm_ring_run,
       gemm_ring_run_quantizing},
      {"cuda_mmvq", Format::q4_0, Format::q8_1, kDp4a, kEpiFloatAll, gemm_mmvq_can_run, gemm_mmvq_run},
      {"cuda_mma", Format::q4_0, Format::q8_1, kMmaS8, kEpiFloatAll, gemm_mma_can_run, gemm_mma_run},
      {"cuda_dp4a_tiled", Format::q4_0, Format::q8_1, kDp4a, kEpiFloatAll, gemm_dp4a_tiled_can_run, gemm_dp4a_tiled_run},
      {"cuda_generic", Format::q4_0, Format::q8_1, kAnyGpu, kEpiFloatAll, gemm_generic_can_run, gemm_generic_run},
  };
  // The integer family's fast kernels: aligned, K-contiguous operands (their
  // can_run says which), in front of the generic block below.
  r.gemm.push_back({"cuda_i8_wgmma", Format::i8, Format::i8, kWgmma, kEpiAll & ~kEpiZeroPoints,
                    gemm_i8_wgmma_can_run, gemm_i8_wgmma_run});
  r.gemm.push_back({"cuda_i8_mma", Format::i8, Format::i8, kMmaS8, kEpiAll, gemm_i8_mma_can_run, gemm_i8_mma_run});
  // After the tensor-core kernels: sm_80+ devices take those, and this one
  // serves the GPUs before them (and, on newer ones, the rows only 4-byte
  // aligned or K % 16 != 0 that the tensor-core kernels refuse).
  r.gemm.push_back({"cuda_i8_dp4a", Format::i8, Format::i8, kDp4a, kEpiAll, gemm_i8_dp4a_can_run, gemm_i8_dp4a_run});
  // An operand strided along K, which all three refuse: copied to rows they
  // take, then dispatched again (on devices from sm_61, where a kernel that
  // reads those rows exists).
  r.gemm.push_back(
      {"cuda_i8_repacked", Format::i8, Format::i8, kDp4a, kEpiAll, gemm_i8_repacked_can_run, gemm_i8_repacked_run});
  // On sm_90: the fixed-point kernel at N = 1 (against the FFMA kernel on an
  // H200, cold, bf16: 18.6-18.8 against 19.0 us at 4096 x 14336, 19.4-19.7
  // against 20.9-21.1 at 14336 x 4096; with W in L2 6-22 % faster), the
  // tensor-core kernels from N = 2 (groups >= 128): the ring one where it
  // runs (against the bulk one on an H200, cold, 4096 x 14336: 16.0-16.2
  // against 19.4-19.6 us at N = 2, 17.2-17.4 against 22.0-22.2 at N = 8,
  // 20.9 against 31.0-31.1 at N = 16), the bulk one where it does not
  // (K % 256 = 128); the FFMA kernel takes N <= 2 wherever those do not run.
  for (Format fb : {Format::f16, Format::bf16})
    r.gemm.push_back({"cuda_wo_gemv_fixed", Format::i4, fb, kRing, kEpiFloatAll, gemm_wo_gemv_fixed_can_run,
                      gemm_wo_gemv_fixed_run});
  for (Format fb : {Format::f16, Format::bf16})
    r.gemm.push_back({"cuda_wo_gemv_mma", Format::i4, fb, kRing, kEpiFloatAll, gemm_wo_gemv_mma_can_run,
                      gemm_wo_gemv_mma_run});
  for (Format fb : {Format::f16, Format::bf16})
    r.gemm.push_back({"cuda_wo_gemv_bulk", Format::i4, fb, kBulkCopy, kEpiFloatAll, gemm_wo_gemv_bulk_can_run,
                      gemm_wo_gemv_bulk_run});
  for (Format fb : {Format::f16, Format::bf16})
    r.gemm.push_back({"cuda_wo_gemv_small", Format::i4, fb, kMmaS8, kEpiFloatAll, gemm_wo_gemv_small_can_run,
                      gemm_wo_gemv_small_run});
  // From N = 17 (K % 128 = 0): the tiled prefill GEMMs, in front of the
  // GEMV that would run N / 16 passes over W; on sm_90a from N = 33 the
  // warpgroup one first (groups >= 128, int8 zero points or none: against
  // cuda_wo_mma on an H200, cold, bf16, 4096 x 14336: 49.3 against 58.1 us
  // at N = 40, 158 against 251 at N = 512; at N = 32 it would take 48.8
  // where cuda_wo_mma takes 35.6).
  for (Format fb : {Format::f16, Format::bf16})
    r.gemm.push_back(
        {"cuda_wo_wgmma", Format::i4, fb, kWgmma, kEpiFloatAll, gemm_wo_wgmma_can_run, gemm_wo_wgmma_run});
  for (Format fb : {Format::f16, Format::bf16})
    r.gemm.push_back({"cuda_wo_mma", Format::i4, fb, kMmaS8, kEpiFloatAll, gemm_wo_mma_can_run, gemm_wo_mma_run});
  for (Format fb : {Format::f16, Format::bf16})
    r.gemm.push_back({"cuda_wo_gemv", Format::i4, fb, kMmaS8, kEpiFloatAll, gemm_wo_gemv_can_run, gemm_wo_gemv_run});
  // fp32 activations on the kernels above, as two bf16 rows a token: its
  // can_run asks the dispatcher which kernel would take the 2N-token call.
  r.gemm.push_back(
      {"cuda_wo_f32_split", Format::i4, Format::f32, kAnyGpu, kEpiFloatAll, gemm_wo_f32_can_run, gemm_wo_f32_run});
  // The integer family's last resorts: every layout, every epilogue. Faster
  // kernels for these pairs go in front of this block.
  constexpr Format kInts[] = {Format::i8, Format::i4, Format::i4x8};
  for (Format fa : kInts)
    for (Format fb : kInts)
      r.gemm.push_back({"cuda_int_generic", fa, fb, kAnyGpu, kEpiAll, gemm_int_generic_can_run, gemm_int_generic_run});
  for (Format fa : {Format::i8, Format::i4})
    for (Format fb : {Format::f16, Format::bf16, Format::f32})
      r.gemm.push_back(
          {"cuda_wo_generic", fa, fb, kAnyGpu, kEpiFloatAll, gemm_wo_generic_can_run, gemm_wo_generic_run});
  r.quantize = {{"cuda_lane_groups", kGgmlFormats, kAnyGpu, quantize_can_run, quantize_run},
                {"cuda_int_rows", kIntegerFormats, kAnyGpu, int_quantize_can_run, int_quantize_run}};
  r.dequantize = {{"cuda_warp_staged", kGgmlFormats, kAnyGpu, dequantize_can_run, dequantize_run},
                  {"cuda_int_rows", kIntegerFormats, kAnyGpu, int_dequantize_can_run, int_dequantize_run}};
  return r;
}
}  // namespace

const Registry& registry() {
  static const Registry r = make_registry();
  return r;
}

}  // namespace qg::detail::cuda
