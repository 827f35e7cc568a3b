// SPDX-License-Identifier: MIT
// cuda/gemm_int_fast.cuh: the fast CUDA kernels of the integer family,
// registered in registry.cu in front of the generic ones:
//   cuda_i8_wgmma i8 x i8, M and N >= 128 (sm_90a): warpgroup MMAs fed by
//                 tensor copies, a producer warpgroup and two consumers;
//                 every epilogue but zero points
//   cuda_i8_mma   i8 x i8, K-contiguous rows (sm_80+): int8 mma.sync m16n8k32,
//                 cp.async pipeline, split K over sm_90 clusters; int32 sums
//                 (and code sums for zero points), then epilogue_store_int
//   cuda_i8_dp4a  i8 x i8, K-contiguous 4-byte-aligned rows, K % 4 == 0
//                 (sm_61+, for GPUs without int8 tensor cores): shared-memory
//                 tiles, DP4A on register tiles of up to 8 x 8; the same sums
//                 and store
//   cuda_i8_repacked  i8 x i8 with an operand strided along K (seed 001's
//                 B [K, N]): that operand transposed into K-contiguous rows of
//                 a workspace, then qg::gemm again (the kernels above)
//   cuda_wo_gemv  i4 weights with group scales (and zero points) x f16 / bf16
//                 activations, N <= 16 a launch (larger N in slices): fp16/bf16 mma.sync over
//                 exact codes, fp32 group rescale, then epilogue_store
//   cuda_wo_gemv_bulk  the same operands with groups >= 128, N = 2..16 (sm_90):
//                 W streamed into shared memory by bulk copies, read in
//                 fragment order with 32-bit loads (two m16 tiles a row group
//                 up to N = 8), the same mma and rescale
//   cuda_wo_gemv_mma  the same operands with groups >= 128, N = 2..16,
//                 K % 256 == 0 (sm_90): W and the activations through a
//                 cp.async ring a warp, K sliced over a CTA's warps, the same
//                 fragment order, mma and rescale; ahead of cuda_wo_gemv_bulk
//   cuda_wo_gemv_small  the same operands, N <= 2: FFMAs on codes made exact
//                 floats by a magic-number LOP3 + FFMA, W streamed to registers
//   cuda_wo_gemv_fixed  the same operands, N = 1 (sm_90): x made block fixed
//                 point by a pass, DP4A on the codes, W through a cp.async
//                 ring a warp
//   cuda_wo_mma   the same operands, N >= 17, K % 128 == 0 (sm_80+):
//                 128-row x 32..128-token tiles through a cp.async pipeline,
//                 the same mma and rescale, K split over sm_90 clusters
//   cuda_wo_wgmma the same operands with groups >= 128 and int8 zero points
//                 (or none), N >= 33, K % 128 == 0 (sm_90a): W decoded once a
//                 CTA into shared memory, wgmma with both operands there
//   cuda_wo_f32_split  the same weights x f32 activations: each x as two bf16
//                 (hi, lo), one GEMM of 2N tokens on the kernels above into
//                 fp32 scratch, then each token's pair added through the epilogue
// And the host-side helpers both share: device limits and what a kernel can
// do on a device (resident CTAs, clusters: cluster_split.cuh), asked once per
// device.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <mutex>
#include <string>

#include "cluster_split.cuh"
#include "common.cuh"
#include "cp_async.cuh"
#include "device_limits.cuh"
#include "epilogue.h"
#include "work_split.h"

namespace qg::detail::cuda {

bool gemm_i8_wgmma_can_run(const GemmArgs& args, std::string* why_not);
Status gemm_i8_wgmma_run(const GemmArgs& args, Stream stream);
bool gemm_i8_mma_can_run(const GemmArgs& args, std::string* why_not);
Status gemm_i8_mma_run(const GemmArgs& args, Stream stream);
bool gemm_i8_dp4a_can_run(const GemmArgs& args, std::string* why_not);
Status gemm_i8_dp4a_run(const GemmArgs& args, Stream stream);
bool gemm_i8_repacked_can_run(const GemmArgs& args, std::string* why_not);
Status gemm_i8_repacked_run(const GemmArgs& args, Stream stream);
bool gemm_wo_gemv_can_run(const GemmArgs& args, std::string* why_not);
Status gemm_wo_gemv_run(const GemmArgs& args, Stream stream);
bool gemm_wo_gemv_bulk_can_run(const GemmArgs& args, std::string* why_not);
Status gemm_wo_gemv_bulk_run(const GemmArgs& args, Stream stream);
bool gemm_wo_gemv_mma_can_run(const GemmArgs& args, std::string* why_not);
Status gemm_wo_gemv_mma_run(const GemmArgs& args, Stream stream);
bool gemm_wo_gemv_small_can_run(const GemmArgs& args, std::string* why_not);
Status gemm_wo_gemv_small_run(const GemmArgs& args, Stream stream);
bool gemm_wo_gemv_fixed_can_run(const GemmArgs& args, std::string* why_not);
Status gemm_wo_gemv_fixed_run(const GemmArgs& args, Stream stream);
bool gemm_wo_mma_can_run(const GemmArgs& args, std::string* why_not);
Status gemm_wo_mma_run(const GemmArgs& args, Stream stream);
bool gemm_wo_wgmma_can_run(const GemmArgs& args, std::string* why_not);
Status gemm_wo_wgmma_run(const GemmArgs& args, Stream stream);
bool gemm_wo_f32_can_run(const GemmArgs& args, std::string* why_not);
Status gemm_wo_f32_run(const GemmArgs& args, Stream stream);

// Tokens n0 .. n0 + count - 1 of a weight-only call as a call of its own:
// B's rows (float activations carry no scales of their own), C's columns
// and the column scales from n0 on; the epilogue's other terms belong to
// W's rows. For the kernels that take tokens in slices.
inline GemmArgs gemm_columns(const GemmArgs& args, int64_t n0, int64_t count) {
  GemmArgs part = args;
  part.b.data = static_cast<const uint8_t*>(args.b.data) + n0 * args.b.row_stride;
  part.b.rows = count;
  part.c = static_cast<uint8_t*>(args.c) + n0 * args.ldc_n * dtype_size(args.c_dtype);
  if (args.epilogue.col_scale && !args.epilogue.col_scale_scalar) part.epilogue.col_scale += n0;
  return part;
}

namespace intfast {

using clusters::kMaxSplits;

inline std::string shape_text(const GemmArgs& g) {
  return "M=" + std::to_string(g.a.rows) + ", N=" + std::to_string(g.b.rows) + ", K=" + std::to_string(g.a.k);
}

inline Status launch_result(const GemmArgs& g) {
  return launch_status(g.fn, [&] { return shape_text(g); });
}

using clusters::KernelFit;
using clusters::launch_clustered;
using clusters::launch_clustered_2d;
using clusters::query_fit;

// The fit of `kernel`, cached per device in the caller's statics (one set per
// kernel instance: the caller is a template instantiated per kernel).
template <class Kernel>
KernelFit cached_fit(Kernel* kernel, int threads, int smem, int device, std::once_flag (&once)[kMaxDevices],
                     KernelFit (&cache)[kMaxDevices]) {
  const int cc_major = device_limits(device).cc_major;
  if (device < 0 || device >= kMaxDevices) return query_fit(kernel, threads, smem, cc_major);
  std::call_once(once[device], [&] { cache[device] = query_fit(kernel, threads, smem, cc_major); });
  return cache[device];
}

// The largest K split (cluster size) that gives `units` independent CTAs'
// worth of work every SM, each CTA keeping at least min_steps of its
// `steps` K steps, with all of a launch's clusters resident at once (one more
// than fits would run as a second wave and double the time). 1: no split.
inline int pick_splits(const KernelFit& fit, const DeviceLimits& lim, int64_t units, int64_t steps,
                       int64_t min_steps) {
  const int64_t slots = static_cast<int64_t>(lim.sms) * fit.blocks_per_sm;
  if (!fit.clusters || units >= slots || units <= 0) return 1;
  int64_t c = slots / units;
  if (c > kMaxSplits) c = kMaxSplits;
  if (min_steps > 0 && c > steps / min_steps) c = steps / min_steps;
  for (; c >= 2; --c)
    if (units <= fit.max_clusters[c]) return static_cast<int>(c);
  return 1;
}

// Tile index -> (tile row, tile column), in groups of 8 tile rows: work_split.h.
using ::qg::detail::cuda::tile_coords;

// An int8 operand a fast kernel can read: K-contiguous rows, each starting
// (and its stride) a multiple of `align` bytes, no group scales. `how` ends
// the alignment message: what the kernel's loads need.
inline bool int8_rows_ok(const Operand& o, const char* name, int align, const char* how, std::string* why_not) {
  if (!contiguous_along_k(o)) {
    if (why_not)
      *why_not = std::string(name) + " is not K-contiguous (block stride " + std::to_string(o.block_stride) +
                 " bytes; the kernel reads rows along K: pass a K-contiguous copy)";
    return false;
  }
  if (!is_aligned(o.data, static_cast<uintptr_t>(align)) || (o.rows > 1 && o.row_stride % align != 0)) {
    if (why_not)
      *why_not = std::string(name) + " rows are not " + std::to_string(align) + "-byte aligned (ptr % " +
                 std::to_string(align) + " = " + std::to_string(reinterpret_cast<uintptr_t>(o.data) % align) +
                 ", row stride = " + std::to_string(o.row_stride) + "; " + how + ")";
    return false;
  }
  if (o.scales.data || o.zero_points.data) {
    if (why_not) *why_not = std::string(name) + " has group-wise scales or zero points (not an int8 x int8 product)";
    return false;
  }
  return true;
}

// What both tiled prefill GEMMs (cuda_wo_mma, cuda_wo_wgmma) ask of a call
// before their own checks: N >= min_n (below_why: who takes fewer), the
// operands cuda_wo_gemv reads, K a multiple of k_multiple (k_what: why), and
// a grid of ceil(M / 128) x ceil(N / min_tile_n) tiles, each split up to 8
// ways, within the launch limit.
inline bool tiled_wo_admits(const GemmArgs& args, int64_t min_n, const char* below_why, int64_t k_multiple,
                            const char* k_what, int64_t min_tile_n, std::string* why_not) {
  auto no = [&](std::string why) {
    if (why_not) *why_not = std::move(why);
    return false;
  };
  if (args.b.rows < min_n)
    return no("N=" + std::to_string(args.b.rows) + " is below " + std::to_string(min_n) + " (" + below_why + ")");
  // Formats, K % 32 = 0, K-contiguous 16-byte-aligned rows, scale and
  // zero-point dtypes: as cuda_wo_gemv, whose unpacking both share.
  if (!gemm_wo_gemv_can_run(args, why_not)) return false;
  if (args.a.k % k_multiple != 0)
    return no("K=" + std::to_string(args.a.k) + " is not a multiple of " + std::to_string(k_multiple) + " (" +
              k_what + ")");
  if ((args.a.rows + 127) / 128 * ((args.b.rows + min_tile_n - 1) / min_tile_n) > 0x7FFFFFFF / kMaxSplits)
    return no("M x N is past the largest grid (" + shape_text(args) + ")");
  return true;
}

// How both tiled prefill GEMMs launch once they have their instance's fit:
// `tiles` tiles of 128 rows, each K split over a cluster of CTAs where the
// tiles leave SMs idle (pick_splits: `steps` units of K, each CTA keeping
// at least `min_steps`); p.splits tells the kernel how many. `name` is the
// kernel's, for the message when it cannot launch at all.
template <class Kernel, class Params>
Status launch_tiled_wo(const GemmArgs& args, const char* name, Kernel* kernel, const KernelFit& fit, int threads,
                       int smem, int64_t tiles, int64_t steps, int64_t min_steps, Params p, cudaStream_t stream,
                       const EpilogueParams& ep) {
  if (fit.blocks_per_sm == 0)
    return Status(StatusCode::cuda_error, std::string(args.fn) + " (" + name + "): cannot launch on cuda:" +
                                              std::to_string(args.device.id) + " (" + shape_text(args) + ")");
  p.splits = pick_splits(fit, device_limits(args.device.id), tiles, steps, min_steps);
  launch_clustered(kernel, tiles * p.splits, threads, smem, p.splits, stream, p, ep);
  return launch_result(args);
}

}  // namespace intfast
}  // namespace qg::detail::cuda
