// SPDX-License-Identifier: MIT
// gemm_int_reference.cpp: the readable CPU kernels of the integer family,
// for every operand layout (strided blocks, [K, N] B) and format pair.
//   int x int:      acc = sum_k qa * qb in int32 (and the code sums, for zero
//                   points), then epilogue_store_int.
//   weight-only:    acc = sum_g s[m, g] * sum_{k in g} (q - z[m, g]) * x[n, k]
//                   in fp32, then epilogue_store.
// Rows are unpacked once per tile into int16 / float buffers, so the inner
// loops are plain dot products the compiler vectorises.
#include <vector>

#include "cpu/kernels.h"
#include "cpu/thread_pool.h"
#include "epilogue.h"
#include "int_formats.h"

namespace qg::detail::cpu {

namespace {

constexpr int64_t kRefTileM = 8;
constexpr int64_t kRefTileN = 8;

int64_t stride_of(const Operand& op) {
  return op.block_stride ? op.block_stride : format_traits(op.format).bytes_per_block;
}
const uint8_t* row_of(const Operand& op, int64_t r) { return static_cast<const uint8_t*>(op.data) + r * op.row_stride; }

// Row r's codes as int16 (the products of two fit int32; sums wrap as the
// epilogue expects), and their sum.
int32_t unpack_codes(const Operand& op, int64_t r, int16_t* out) {
  const uint8_t* row = row_of(op, r);
  const int64_t bs = stride_of(op);
  uint32_t sum = 0;
  for (int64_t k = 0; k < op.k; ++k) {
    out[k] = static_cast<int16_t>(load_code(op.format, row, bs, k));
    sum += static_cast<uint32_t>(out[k]);
  }
  return static_cast<int32_t>(sum);
}

}  // namespace

Status gemm_int_reference(const GemmArgs& g) {
  const int64_t m_rows = g.a.rows, n_rows = g.b.rows, k = g.a.k;
  const EpilogueParams ep = epilogue_params(g);
  const int64_t tiles_m = (m_rows + kRefTileM - 1) / kRefTileM, tiles_n = (n_rows + kRefTileN - 1) / kRefTileN;
  run_tiles(tiles_m * tiles_n, m_rows * n_rows * k, [&](int64_t t) {
    const int64_t m0 = (t / tiles_n) * kRefTileM, n0 = (t % tiles_n) * kRefTileN;
    const int64_t mt = std::min(kRefTileM, m_rows - m0), nt = std::min(kRefTileN, n_rows - n0);
    std::vector<int16_t> a(static_cast<size_t>(mt * k)), b(static_cast<size_t>(nt * k));
    int32_t sa[kRefTileM], sb[kRefTileN];
    for (int64_t i = 0; i < mt; ++i) sa[i] = unpack_codes(g.a, m0 + i, a.data() + i * k);
    for (int64_t j = 0; j < nt; ++j) sb[j] = unpack_codes(g.b, n0 + j, b.data() + j * k);
    for (int64_t i = 0; i < mt; ++i)
      for (int64_t j = 0; j < nt; ++j) {
        const int16_t* ar = a.data() + i * k;
        const int16_t* br = b.data() + j * k;
        int32_t acc = 0;  // |acc| < 2^31: validation bounds K
        for (int64_t x = 0; x < k; ++x) acc += static_cast<int32_t>(ar[x]) * br[x];
        epilogue_store_int(ep, m0 + i, n0 + j, acc, sa[i], sb[j]);
      }
  });
  return {};
}

Status gemm_weight_only_reference(const GemmArgs& g) {
  const int64_t m_rows = g.a.rows, n_rows = g.b.rows, k = g.a.k;
  const int64_t gs = g.a.scales.group_size;
  const EpilogueParams ep = epilogue_params(g);
  const int64_t tiles_m = (m_rows + kRefTileM - 1) / kRefTileM, tiles_n = (n_rows + kRefTileN - 1) / kRefTileN;
  run_tiles(tiles_m * tiles_n, m_rows * n_rows * k, [&](int64_t t) {
    const int64_t m0 = (t / tiles_n) * kRefTileM, n0 = (t % tiles_n) * kRefTileN;
    const int64_t mt = std::min(kRefTileM, m_rows - m0), nt = std::min(kRefTileN, n_rows - n0);
    // W rows dequantized (s * (q - z), exact in fp32 for 4- and 8-bit codes
    // times an fp16/bf16/fp32 scale up to rounding of the product), x rows widened.
    std::vector<float> w(static_cast<size_t>(mt * k)), x(static_cast<size_t>(nt * k));
    const int64_t bsa = stride_of(g.a), bsb = stride_of(g.b);
    for (int64_t i = 0; i < mt; ++i) {
      const uint8_t* row = row_of(g.a, m0 + i);
      for (int64_t c = 0; c < k; ++c) {
        const float s = load_group_scale(g.a.scales, m0 + i, c / gs);
        const int32_t z = load_group_zero_point(g.a.zero_points, m0 + i, c / gs);
        w[i * k + c] = dequantize_value(load_code(g.a.format, row, bsa, c), s, z);
      }
    }
    for (int64_t j = 0; j < nt; ++j) {
      const uint8_t* row = row_of(g.b, n0 + j);
      for (int64_t c = 0; c < k; ++c) x[j * k + c] = load_float_elem(g.b.format, row, bsb, c);
    }
    for (int64_t i = 0; i < mt; ++i)
      for (int64_t j = 0; j < nt; ++j) {
        float acc = 0.0f;
        for (int64_t c = 0; c < k; ++c) acc += w[i * k + c] * x[j * k + c];
        epilogue_store(ep, m0 + i, n0 + j, acc);
      }
  });
  return {};
}

}  // namespace qg::detail::cpu
