// SPDX-License-Identifier: MIT
// cuda/gemm_q4_0_q8_1_generic.cu: the last resort, for operands the fast
// paths cannot load (a W or A view at an odd byte offset, an odd ldw, lda not
// a multiple of 4, an unaligned C). Every block is copied byte by byte into
// an aligned local copy, so no address is ever assumed aligned and
// cudaErrorMisalignedAddress cannot happen; the dot product itself is
// quant_block.h's and the store the shared epilogue's. One thread per output
// element: slow, and obviously right.
#include <algorithm>

#include "gemm_q4_0_q8_1.cuh"
#include "quant_block.h"

namespace qg::detail::cuda {
namespace {

constexpr int kThreads = 128;
constexpr int64_t kMaxGrid = 1 << 20;

template <typename Block>
__device__ __forceinline__ Block load_block_bytes(const uint8_t* p) {
  Block b;
  uint8_t* dst = reinterpret_cast<uint8_t*>(&b);
#pragma unroll
  for (int i = 0; i < static_cast<int>(sizeof(Block)); ++i) dst[i] = p[i];
  return b;
}

__global__ void __launch_bounds__(kThreads)
gemm_generic_kernel(const uint8_t* __restrict__ w, const uint8_t* __restrict__ a,
                    EpilogueParams ep, int64_t m, int64_t n, int64_t nb, int64_t ldw,
                    int64_t lda) {
  const int64_t total = m * n;
  for (int64_t idx = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; idx < total;
       idx += static_cast<int64_t>(gridDim.x) * kThreads) {
    const int64_t row = idx / n, col = idx % n;
    const uint8_t* wrow = w + row * ldw;
    const uint8_t* arow = a + col * lda;
    float acc = 0.0f;
    for (int64_t b = 0; b < nb; ++b) {
      const block_q4_0 wb = load_block_bytes<block_q4_0>(wrow + b * kQ4_0Bytes);
      const block_q8_1 ab = load_block_bytes<block_q8_1>(arow + b * kQ8_1Bytes);
      const int sumi = dot_block_q4_0_q8_1(&wb, &ab);
      acc += fp16_to_fp32(wb.d) * fp16_to_fp32(ab.d) * static_cast<float>(sumi);
    }
    epilogue_store(ep, row, col, acc);
  }
}

}  // namespace

bool gemm_generic_can_run(const GemmArgs&, std::string*) { return true; }

Status gemm_generic_run(const GemmArgs& args, Stream stream) {
  const int64_t m = args.a.rows, n = args.b.rows;
  if (m <= 0 || n <= 0) return Status::success();
  const int64_t ctas = (m * n + kThreads - 1) / kThreads;
  const unsigned grid = static_cast<unsigned>(std::min<int64_t>(ctas, kMaxGrid));
  gemm_generic_kernel<<<grid, kThreads, 0, to_cuda(stream)>>>(
      static_cast<const uint8_t*>(args.a.data), static_cast<const uint8_t*>(args.b.data), epilogue_params(args), m, n,
      args.a.k / 32, args.a.row_stride, args.b.row_stride);
  return gemm_launch_status(args);
}

}  // namespace qg::detail::cuda
