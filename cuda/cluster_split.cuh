// SPDX-License-Identifier: MIT
// cuda/cluster_split.cuh: the host side of split K over thread block
// clusters, shared by the tensor-core GEMMs (gemm_q4_0_q8_1_mma.cu and the
// integer family's fast kernels): what a kernel can do on a device, and a
// launch as clusters of `splits` CTAs.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace qg::detail::cuda::clusters {

// Portable cluster sizes go to 8.
constexpr int kMaxSplits = 8;

// What one kernel instance can do on one device: its resident CTAs per SM
// (shared memory and registers decide), whether it may run as clusters (the
// image that runs is sm_90+ code, where the cluster path is compiled), and
// how many clusters of each size can be resident at once: a cluster must fit
// in one GPC, whose SM counts differ, so this is not SMs x CTAs / size.
struct KernelFit {
  int blocks_per_sm = 0;  // 0: the kernel cannot be launched here
  bool clusters = false;
  int max_clusters[kMaxSplits + 1] = {};  // by cluster size, 2..kMaxSplits
};

// A 1-D cluster of `size` CTAs, as a launch attribute.
inline cudaLaunchAttribute cluster_dim(int size) {
  cudaLaunchAttribute a;
  a.id = cudaLaunchAttributeClusterDimension;
  a.val.clusterDim.x = static_cast<unsigned>(size);
  a.val.clusterDim.y = 1;
  a.val.clusterDim.z = 1;
  return a;
}

template <class Kernel>
KernelFit query_fit(Kernel* kernel, int threads, int smem, int cc_major) {
  KernelFit fit;
  cudaFuncAttributes attr{};
  // Above 48 KB of shared memory a kernel must opt in, per device.
  if ((smem > 48 * 1024 &&
       cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem) != cudaSuccess) ||
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&fit.blocks_per_sm, kernel, threads, smem) != cudaSuccess ||
      cudaFuncGetAttributes(&attr, kernel) != cudaSuccess) {
    cudaGetLastError();
    return KernelFit{};
  }
  // The image that runs must be sm_90 code compiled as such: on a GPU past
  // sm_90a, code JIT-compiled from the compute_80 PTX of a multi-arch build
  // reports binaryVersion >= 90 but has its cluster paths compiled out
  // (ptxVersion 80). An H200 running the sm_90a image reports 90 for both.
  fit.clusters = cc_major >= 9 && attr.binaryVersion >= 90 && attr.ptxVersion >= 90;
  for (int c = 2; fit.clusters && c <= kMaxSplits; ++c) {
    cudaLaunchConfig_t cfg{};
    cfg.gridDim = dim3(c);
    cfg.blockDim = dim3(threads);
    cfg.dynamicSmemBytes = smem;
    cudaLaunchAttribute cluster[1] = {cluster_dim(c)};
    cfg.attrs = cluster;
    cfg.numAttrs = 1;
    if (cudaOccupancyMaxActiveClusters(&fit.max_clusters[c], kernel, &cfg) != cudaSuccess) {
      cudaGetLastError();
      fit.max_clusters[c] = 0;
    }
  }
  return fit;
}

// Launches `kernel` on grid x grid_y CTAs (grid a multiple of splits), as
// clusters of `splits` CTAs along x when splits > 1.
template <class Kernel, class... Args>
void launch_clustered_2d(Kernel* kernel, int64_t grid, unsigned grid_y, int threads, int smem, int splits,
                         cudaStream_t stream, Args... args) {
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(static_cast<unsigned>(grid), grid_y);
  cfg.blockDim = dim3(threads);
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  if (splits > 1) {
    attr[0] = cluster_dim(splits);
    cfg.attrs = attr;
    cfg.numAttrs = 1;
  }
  cudaLaunchKernelEx(&cfg, kernel, args...);
}

// The same on a one-row grid.
template <class Kernel, class... Args>
void launch_clustered(Kernel* kernel, int64_t grid, int threads, int smem, int splits, cudaStream_t stream,
                      Args... args) {
  launch_clustered_2d(kernel, grid, 1u, threads, smem, splits, stream, args...);
}

}  // namespace qg::detail::cuda::clusters
