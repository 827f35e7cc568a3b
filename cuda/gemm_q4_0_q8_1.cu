// SPDX-License-Identifier: MIT
// cuda/gemm_q4_0_q8_1.cu: the dispatch list, most specialised first.
//   cuda_mmvq        N <= 8 (decode): memory-bound GEMV, K split across a CTA
//   cuda_dp4a_tiled  any N: 64x64 shared-memory tiles, DP4A
//   cuda_generic     anything, including unaligned operands: byte loads
#include <vector>

#include "gemm_q4_0_q8_1.cuh"

namespace qg::detail::cuda {

const std::vector<GemmImpl>& gemm_q4_0_q8_1_impls() {
  static const std::vector<GemmImpl> impls = {
      {"cuda_mmvq", gemm_mmvq_can_run, gemm_mmvq_run},
      {"cuda_dp4a_tiled", gemm_dp4a_tiled_can_run, gemm_dp4a_tiled_run},
      {"cuda_generic", gemm_generic_can_run, gemm_generic_run},
  };
  return impls;
}

}  // namespace qg::detail::cuda
