// SPDX-License-Identifier: MIT
// cuda/cluster_tile_sum.cuh: the device side of split K over a thread block
// cluster for the tiled weight-only GEMMs (gemm_wo_mma.cu, gemm_wo_wgmma.cu):
// each CTA of the cluster holds its partial kBM x kBN tile of fp32 sums in its
// own shared memory; the cluster adds them through distributed shared memory
// and stores the sums through the epilogue.
#pragma once

#include <cstdint>

#include <cooperative_groups.h>

#include "epilogue.h"

namespace qg::detail::cuda {

// `own` is this CTA's tile, row-major ([row][column], kBN a row), written by
// every thread before the call. Element o is added over the ranks in rank
// order (so the bits depend on the split, never on which CTA finishes
// first) by CTA o / kThreads % splits, which stores it if it lies inside C.
// Every CTA of the cluster must call this, with all its threads.
template <int kBM, int kBN, int kThreads>
__device__ __forceinline__ void store_cluster_sum(float* own, int splits, int rank, int64_t row0, int64_t col0,
                                                  int64_t m, int64_t n, const EpilogueParams& ep) {
#if __CUDA_ARCH__ >= 900
  namespace cg = cooperative_groups;
  cg::cluster_group cluster = cg::this_cluster();
  cluster.sync();  // every CTA's sums are in its shared memory
  for (int o = rank * kThreads + static_cast<int>(threadIdx.x); o < kBM * kBN; o += splits * kThreads) {
    const int64_t row = row0 + o / kBN, col = col0 + o % kBN;
    if (row >= m || col >= n) continue;
    float v = 0.0f;
    for (int q = 0; q < splits; ++q) v += cluster.map_shared_rank(own, q)[o];
    epilogue_store(ep, row, col, v);
  }
  cluster.sync();  // no CTA leaves while others read its shared memory
#else
  __trap();  // the host launches clusters only where the sm_90 image runs
#endif
}

}  // namespace qg::detail::cuda
