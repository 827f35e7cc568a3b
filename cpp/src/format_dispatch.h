// SPDX-License-Identifier: MIT
// format_dispatch.h: a run-time Format turned into compile-time code, in one
// place. with_format(f, fn) calls fn(FormatTag<F>{}) for the F equal to f, so
// a backend writes its per-format code once as a template instead of a
// hand-written switch per kernel. BlockOf<F> and the block functions name the
// arithmetic of quant_block.h by format, for host and device code alike.
#pragma once

#include "qg/formats.h"
#include "quant_block.h"

namespace qg::detail {

template <Format F>
struct BlockOf;
template <>
struct BlockOf<Format::q4_0> {
  using type = block_q4_0;
};
template <>
struct BlockOf<Format::q8_0> {
  using type = block_q8_0;
};
template <>
struct BlockOf<Format::q8_1> {
  using type = block_q8_1;
};

template <Format F>
struct FormatTag {
  static constexpr Format value = F;
  using Block = typename BlockOf<F>::type;
};

template <class Fn>
decltype(auto) with_format(Format f, Fn&& fn) {
  switch (f) {
    case Format::q8_0: return fn(FormatTag<Format::q8_0>{});
    case Format::q8_1: return fn(FormatTag<Format::q8_1>{});
    case Format::q4_0: break;
  }
  return fn(FormatTag<Format::q4_0>{});
}

// One block of 32 floats -> one block of F (the reference bytes).
template <Format F>
QG_HD void quantize_block(const float* x, typename BlockOf<F>::type* y, Q8_1Convention convention) {
  if constexpr (F == Format::q4_0) quantize_block_q4_0(x, y);
  else if constexpr (F == Format::q8_0) quantize_block_q8_0(x, y);
  else quantize_block_q8_1(x, y, convention);
}

// One block of F -> 32 floats (exact: code * d).
template <Format F>
QG_HD void dequantize_block(const typename BlockOf<F>::type* b, float* y) {
  if constexpr (F == Format::q4_0) dequantize_block_q4_0(b, y);
  else dequantize_block_q8(b->d, b->qs, y);
}

}  // namespace qg::detail
