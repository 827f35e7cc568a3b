// SPDX-License-Identifier: MIT
// gemm_q4_0_q8_1_scalar.cpp: the portable reference GEMM. Per output element:
// C[m,n] = sum_b fp32(d_w) * fp32(d_a) * sum_i (w_i - 8) * a_i (exact int).
#include <cstring>

#include "cpu/kernels.h"
#include "cpu/thread_pool.h"
#include "quant_block.h"

namespace qg::detail::cpu {

Status gemm_q4_0_q8_1_scalar(const GemmArgs& g) {
  const int64_t nb = g.k / 32;
  const int64_t tiles_m = (g.m + kTileM - 1) / kTileM;
  const int64_t tiles_n = (g.n + kTileN - 1) / kTileN;
  ThreadPool::instance().parallel_for(tiles_m * tiles_n, [&](int64_t t) {
    const int64_t m0 = (t / tiles_n) * kTileM, n0 = (t % tiles_n) * kTileN;
    for (int64_t m = m0; m < m0 + kTileM && m < g.m; ++m) {
      const uint8_t* w = static_cast<const uint8_t*>(g.w) + m * g.ldw;
      for (int64_t n = n0; n < n0 + kTileN && n < g.n; ++n) {
        const uint8_t* a = static_cast<const uint8_t*>(g.a) + n * g.lda;
        float acc = 0.0f;
        for (int64_t b = 0; b < nb; ++b) {
          block_q4_0 wb;  // copied: packed rows carry no alignment promise
          block_q8_1 ab;
          std::memcpy(&wb, w + b * sizeof wb, sizeof wb);
          std::memcpy(&ab, a + b * sizeof ab, sizeof ab);
          const float d = fp16_to_fp32(wb.d) * fp16_to_fp32(ab.d);
          acc += d * static_cast<float>(dot_block_q4_0_q8_1(&wb, &ab));
        }
        g.c[m * g.ldc + n] = acc;
      }
    }
  });
  return {};
}

}  // namespace qg::detail::cpu
