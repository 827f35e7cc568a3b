// SPDX-License-Identifier: MIT
// cuda/bulk_copy.cuh: sm_90's bulk copy engine (cp.async.bulk, the TMA unit
// without a tensor map) and the mbarriers it completes on. One thread moves a
// whole contiguous run (a multiple of 16 bytes, both ends 16-byte aligned)
// from global to shared memory with one instruction, and the consumers sleep
// on the stage's mbarrier until the bytes have landed: a memory-bound kernel
// keeps tens of KB in flight per SM without a register per byte. Kernels that
// use these are registered for sm_90+; for older targets the bodies compile
// to a trap, never reached.
#pragma once

#include <cstdint>

#include "cp_async.cuh"

namespace qg::detail::cuda::bulk {

// One mbarrier per stage, expecting `arrivals` arrivals a phase.
__device__ __forceinline__ void mbar_init(uint64_t* bar, int arrivals) {
#if __CUDA_ARCH__ >= 900
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_u32(bar)), "r"(arrivals) : "memory");
#else
  __trap();
#endif
}

// Makes initialised mbarriers visible to the copy engine (the async proxy).
__device__ __forceinline__ void mbar_init_fence() {
#if __CUDA_ARCH__ >= 900
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
#endif
}

// This thread's arrival, announcing `bytes` of copies that complete the phase.
__device__ __forceinline__ void mbar_arrive_expect(uint64_t* bar, uint32_t bytes) {
#if __CUDA_ARCH__ >= 900
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_u32(bar)), "r"(bytes) : "memory");
#else
  __trap();
#endif
}

// One plain arrival (a consumer handing a stage back to its producer).
__device__ __forceinline__ void mbar_arrive(uint64_t* bar) {
#if __CUDA_ARCH__ >= 900
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_u32(bar)) : "memory");
#else
  __trap();
#endif
}

// Blocks until the phase with this parity has completed (its bytes landed).
__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t parity) {
#if __CUDA_ARCH__ >= 900
  asm volatile(
      "{\n"
      ".reg .pred done;\n"
      "WAIT_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT_%=;\n"
      "}\n" ::"r"(smem_u32(bar)),
      "r"(parity)
      : "memory");
#else
  __trap();
#endif
}

// bytes (a multiple of 16) from src to dst, both 16-byte aligned, completing
// on bar. The .shared::cluster form with the CTA's own address: a launch
// without clusters is a cluster of one.
__device__ __forceinline__ void copy_g2s(void* dst, const void* src, uint32_t bytes, uint64_t* bar) {
#if __CUDA_ARCH__ >= 900
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                   smem_u32(dst)),
               "l"(src), "r"(bytes), "r"(smem_u32(bar))
               : "memory");
#else
  __trap();
#endif
}

// One warp fills a ring slot with `rows` (<= 32) row runs of `bytes` each:
// lane r copies row first_row + r (rows past last_row repeat it: tails need
// no branch in the consumers) from src + row * ld to dst + r * pitch, and
// lane 0 announces the slot's bytes on bar. For a producer warp, or a warp
// that issues for its CTA.
__device__ __forceinline__ void copy_rows(uint8_t* dst, int pitch, const uint8_t* src, int64_t ld,
                                          int64_t first_row, int64_t last_row, int rows, uint32_t bytes,
                                          uint64_t* bar) {
  const int lane = static_cast<int>(threadIdx.x % 32);
  if (lane == 0) mbar_arrive_expect(bar, bytes * static_cast<uint32_t>(rows));
  __syncwarp();
  if (lane < rows) {
    const int64_t row = first_row + lane < last_row ? first_row + lane : last_row;
    copy_g2s(dst + lane * pitch, src + row * ld, bytes, bar);
  }
}

// Named barrier 1 among the first kThreads threads of the CTA: the consumer
// warps' own barrier, once a producer warp (numbered after them) has left.
template <int kThreads>
__device__ __forceinline__ void consumers_sync() {
  asm volatile("bar.sync 1, %0;" ::"n"(kThreads) : "memory");
}

// Asks L2 to fetch [p, p + bytes) from memory, without waiting: a hint, so
// that data needed later (a GEMV's activations) is requested ahead of a flood
// of bulk copies instead of queueing behind them. The run is trimmed to the
// 16-byte-aligned whole 16-byte units the instruction takes.
__device__ __forceinline__ void prefetch_l2(const void* p, int64_t bytes) {
#if __CUDA_ARCH__ >= 900
  const uintptr_t begin = (reinterpret_cast<uintptr_t>(p) + 15) & ~uintptr_t{15};
  const uintptr_t end = (reinterpret_cast<uintptr_t>(p) + static_cast<uintptr_t>(bytes)) & ~uintptr_t{15};
  // One instruction moves at most 2^32 - 16 bytes; activations are far smaller.
  if (end > begin && end - begin < (uintptr_t{1} << 32))
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(begin), "r"(static_cast<uint32_t>(end - begin))
                 : "memory");
#endif
}

}  // namespace qg::detail::cuda::bulk
