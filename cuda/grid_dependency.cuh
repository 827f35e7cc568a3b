// SPDX-License-Identifier: MIT
// cuda/grid_dependency.cuh: programmatic dependent launch (sm_90), which lets
// a kernel start while the kernel before it in the stream is finishing.
//
// A two-kernel call (a pass that re-lays or quantizes the activations, then
// the GEMM that reads them) otherwise pays, between the two, the pass's
// last wave, the launch of the GEMM's grid, and the GEMM's prologue (its
// barriers, its tensor maps, the first stages' weight loads from HBM)
// before its first MMA. With the GEMM launched early (launch_maybe_early),
// its CTAs start once every CTA of the pass has called launch_dependents,
// do all that does not read the pass's output, then wait_prerequisite: it
// returns once the pass has completed and its writes are visible.
//
// Where the kernel was launched without the attribute (older GPUs, or
// another path), wait_prerequisite returns at once: the stream has already
// ordered the kernels.
#pragma once

#include <cuda_runtime.h>

#include <utility>

namespace qg::detail::cuda {

__device__ __forceinline__ void launch_dependents() {
#if __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

__device__ __forceinline__ void wait_prerequisite() {
#if __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// kernel<<<grid, threads, smem, stream>>>(args...), and with `early` allowed
// to start before the stream's previous kernel has completed (it must then
// call wait_prerequisite before it reads what that kernel writes, and before
// it writes what that kernel reads). One launch statement for both, so a
// caller that launches early for some shapes only states which. Errors are
// left to cudaGetLastError, as a <<<>>> launch leaves them.
template <class... Params, class... Args>
void launch_maybe_early(void (*kernel)(Params...), dim3 grid, dim3 threads, size_t smem, cudaStream_t stream,
                        bool early, Args&&... args) {
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = threads;
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  config.attrs = attr;
  config.numAttrs = early ? 1 : 0;
  (void)cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
}

}  // namespace qg::detail::cuda
