// SPDX-License-Identifier: MIT
// gemm_q4_0_q8_1_scalar.cpp: the portable reference GEMM. Per output element:
// acc = sum_b fp32(d_w) * fp32(d_a) * sum_i (w_i - 8) * a_i (integer part exact),
// then the shared epilogue (epilogue.h).
#include <cstring>

#include "cpu/kernels.h"
#include "cpu/thread_pool.h"
#include "epilogue.h"
#include "quant_block.h"

namespace qg::detail::cpu {

Status gemm_q4_0_q8_1_scalar(const GemmArgs& g) {
  const int64_t m_rows = g.a.rows, n_rows = g.b.rows, nb = g.a.k / 32;
  const EpilogueParams ep = epilogue_params(g);
  const int64_t tiles_m = (m_rows + kTileM - 1) / kTileM;
  const int64_t tiles_n = (n_rows + kTileN - 1) / kTileN;
  run_tiles(tiles_m * tiles_n, m_rows * n_rows * g.a.k, [&](int64_t t) {
    const int64_t m0 = (t / tiles_n) * kTileM, n0 = (t % tiles_n) * kTileN;
    for (int64_t m = m0; m < m0 + kTileM && m < m_rows; ++m) {
      const uint8_t* w = static_cast<const uint8_t*>(g.a.data) + m * g.a.row_stride;
      for (int64_t n = n0; n < n0 + kTileN && n < n_rows; ++n) {
        const uint8_t* a = static_cast<const uint8_t*>(g.b.data) + n * g.b.row_stride;
        float acc = 0.0f;
        for (int64_t b = 0; b < nb; ++b) {
          block_q4_0 wb;  // copied: packed rows carry no alignment promise
          block_q8_1 ab;
          std::memcpy(&wb, w + b * sizeof wb, sizeof wb);
          std::memcpy(&ab, a + b * sizeof ab, sizeof ab);
          const float d = fp16_to_fp32(wb.d) * fp16_to_fp32(ab.d);
          acc += d * static_cast<float>(dot_block_q4_0_q8_1(&wb, &ab));
        }
        epilogue_store(ep, m, n, acc);
      }
    }
  });
  return {};
}

}  // namespace qg::detail::cpu
