// SPDX-License-Identifier: MIT
// gemm_q4_0x16_scalar.cpp: the portable reference GEMM for q4_0x16 weights
// (formats.h). Per output element, block by block in K order:
//   acc = fma(float(sumi), fp32(d_w) * fp32(d_a), acc),
// sumi = sum_i (w_i - 8) * a_i exact: the arithmetic of the panel kernels
// (one convert and one FMA per whole block), so the same bits as them, and
// as the SIMD q4_0x16 kernels, on every CPU. An output that comes out
// non-finite is summed again as gemm_q4_0_q8_1_simd.cpp's exact_element
// does (d * sumi, multiply then add), so those match the panel path too.
#include <cmath>
#include <cstring>

#include "cpu/kernels.h"
#include "cpu/q4_0x16_rows.h"
#include "cpu/thread_pool.h"
#include "epilogue.h"
#include "quant_block.h"

namespace qg::detail::cpu {

Status gemm_q4_0x16_scalar(const GemmArgs& g) {
  const int64_t groups = g.a.rows / kQ4_0x16Rows, n_rows = g.b.rows, nb = g.a.k / kQK4_0;
  const EpilogueParams ep = epilogue_params(g);
  const auto* W = static_cast<const uint8_t*>(g.a.data);
  const auto* A = static_cast<const uint8_t*>(g.b.data);
  const int64_t tiles_n = (n_rows + kTileN - 1) / kTileN;
  run_tiles(groups * tiles_n, g.a.rows * n_rows * g.a.k, [&](int64_t t) {
    const uint8_t* grp = W + (t / tiles_n) * g.a.row_stride;
    const int64_t m0 = (t / tiles_n) * kQ4_0x16Rows, n0 = (t % tiles_n) * kTileN;
    for (int r = 0; r < kQ4_0x16Rows; ++r)
      for (int64_t n = n0; n < n0 + kTileN && n < n_rows; ++n) {
        const uint8_t* a = A + n * g.b.row_stride;
        float fused = 0.0f, plain = 0.0f;
        for (int64_t b = 0; b < nb; ++b) {
          block_q4_0 wb;
          block_q8_1 ab;
          x16_get_row(grp + b * kX16Bytes, r, &wb);
          std::memcpy(&ab, a + b * sizeof ab, sizeof ab);
          const float d = fp16_to_fp32(wb.d) * fp16_to_fp32(ab.d);
          const float s = static_cast<float>(dot_block_q4_0_q8_1(&wb, &ab));
          fused = std::fma(s, d, fused);
          plain += d * s;
        }
        epilogue_store(ep, m0 + r, n, std::isfinite(fused) ? fused : plain);
      }
  });
  return {};
}

}  // namespace qg::detail::cpu
