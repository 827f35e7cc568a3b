// SPDX-License-Identifier: MIT
// cpu/epilogue_rows.h: the float epilogue (epilogue.h) over a run of up to
// 16 W rows of one output column, for the CPU kernels that finish 16 rows
// at a time (the panel kernels: one int32 lane a W row), and over the small
// register tiles (up to 4 rows x 4 columns) of the int8 and weight-only
// kernels, with each row's and column's terms loaded once.
//
// epilogue_store branches on every step of every element and loads the
// row's bias (and scale) again for every column: with a bias, a 64-token
// linear_q4_0 at K = 64 took twice as long as without one. Here the rows'
// terms are loaded once a panel (RowTerms), and each step is one loop over
// the run, which the compiler vectorises. The operations on each element
// are epilogue_value's, in its order, each rounded on its own (the file
// is compiled with -ffp-contract=off): the same bytes.
#pragma once

#include <cstdint>

#include "epilogue.h"

// In an unnamed namespace, as float_elem.h: the kernel files compiled for
// AVX-512 include this, and a function with external linkage that the
// compiler emits out of line there (an instance of a template below, say)
// would be a weak symbol that the linker may pick for callers built for
// AVX2 alone.
namespace qg::detail::cpu {
namespace {

constexpr int kMaxEpilogueRun = 16;

// W rows m0..m0+rows-1's scales and biases (rows <= kMaxEpilogueRun).
struct RowTerms {
  float scale[kMaxEpilogueRun], bias[kMaxEpilogueRun];
};

inline void load_row_terms(const EpilogueParams& p, int64_t m0, int rows, RowTerms* t) {
  if (p.plain) return;
  for (int r = 0; r < rows; ++r) {
    const EpilogueRowTerms e = epilogue_row_terms(p, m0 + r);
    t->scale[r] = e.scale;
    t->bias[r] = e.bias;
  }
}

// C[m0 + r, n] = the epilogue on acc[r], r < rows; t from load_row_terms.
// For the epilogues that are not plain: a plain one is a store an element,
// which the kernels keep in their own loops.
inline void epilogue_store_rows(const EpilogueParams& p, const RowTerms& t, int64_t m0, int rows, int64_t n,
                                const float* acc) {
  const int esize = dtype_bytes(p.c_dtype);
  uint8_t* c = p.c + (m0 * p.ldc + n * p.ldc_n) * esize;
  const int64_t step = p.ldc * esize;
  float v[kMaxEpilogueRun];
  for (int r = 0; r < rows; ++r) v[r] = acc[r];
  if (p.alpha != 1.0f)
    for (int r = 0; r < rows; ++r) v[r] = mul_rn(v[r], p.alpha);
  if (p.row_scale)
    for (int r = 0; r < rows; ++r) v[r] = mul_rn(v[r], t.scale[r]);
  if (p.col_scale) {
    const float cs = epilogue_col_scale(p, n);
    for (int r = 0; r < rows; ++r) v[r] = mul_rn(v[r], cs);
  }
  if (p.beta != 0.0f)
    for (int r = 0; r < rows; ++r) v[r] = add_rn(v[r], mul_rn(p.beta, load_float_any(c + r * step, p.c_dtype)));
  if (p.bias)
    for (int r = 0; r < rows; ++r) v[r] = add_rn(v[r], t.bias[r]);
  if (p.relu)
    for (int r = 0; r < rows; ++r) v[r] = v[r] < 0.0f ? 0.0f : v[r];  // NaN is not < 0: it passes through
  for (int r = 0; r < rows; ++r) store_float_any(c + r * step, p.c_dtype, v[r]);
}

// C[m0 + r, n0 + j] = the epilogue on acc[r][j], r < rows, j < cols: a
// kernel's register tile (up to 4 x 4). Each element goes through
// epilogue_value, with its row's terms loaded once a tile and its column's
// scale once a column instead of once an element. Runs of 2 to 4 rows
// through epilogue_store_rows were tried first and cost more than they
// saved: QuantizedLinear(int8)'s call at 64 tokens x 128 x 1024 (scales and
// a bias) took 471-624 µs against 301-372 element by element, and 254-280
// this way (the rounds' medians, 2-core VM).
template <int kR, int kC>
inline void epilogue_store_tile(const EpilogueParams& p, int64_t m0, int rows, int64_t n0, int cols,
                                const float (&acc)[kR][kC]) {
  static_assert(kR <= kMaxEpilogueRun, "a tile's rows make one run");
  if (p.plain) {
    for (int r = 0; r < rows; ++r)
      for (int j = 0; j < cols; ++j) epilogue_store(p, m0 + r, n0 + j, acc[r][j]);
    return;
  }
  const int esize = dtype_bytes(p.c_dtype);
  EpilogueRowTerms row[kR];
  for (int r = 0; r < rows; ++r) row[r] = epilogue_row_terms(p, m0 + r);
  for (int j = 0; j < cols; ++j) {
    const float col_scale = epilogue_col_scale(p, n0 + j);
    for (int r = 0; r < rows; ++r) {
      uint8_t* dst = p.c + ((m0 + r) * p.ldc + (n0 + j) * p.ldc_n) * esize;
      store_float_any(dst, p.c_dtype, epilogue_value(p, acc[r][j], row[r], col_scale, dst));
    }
  }
}

// The integer kernels' tile: epilogue_store_int on each element (the
// zero-point terms from the rows' and columns' code sums sum_a[r] and
// sum_b[j]), its float outputs through epilogue_store_tile.
template <int kR, int kC>
inline void epilogue_store_int_tile(const EpilogueParams& p, int64_t m0, int rows, int64_t n0, int cols,
                                    const int32_t (&acc)[kR][kC], const int32_t* sum_a, const int32_t* sum_b) {
  if (p.c_dtype == DType::i32) {
    for (int r = 0; r < rows; ++r)
      for (int j = 0; j < cols; ++j) epilogue_store_int(p, m0 + r, n0 + j, acc[r][j], sum_a[r], sum_b[j]);
    return;
  }
  float v[kR][kC];
  for (int r = 0; r < rows; ++r)
    for (int j = 0; j < cols; ++j)
      v[r][j] = static_cast<float>(zero_point_corrected(p, m0 + r, n0 + j, acc[r][j], sum_a[r], sum_b[j]));
  epilogue_store_tile(p, m0, rows, n0, cols, v);
}

}  // namespace
}  // namespace qg::detail::cpu
