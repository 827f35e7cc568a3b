// SPDX-License-Identifier: MIT
// cpu/epilogue_rows.h: the float epilogue (epilogue.h) over a run of up to
// 16 W rows of one output column, for the CPU kernels that finish 16 rows
// at a time (the panel kernels: one int32 lane a W row).
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

namespace qg::detail::cpu {

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

}  // namespace qg::detail::cpu
