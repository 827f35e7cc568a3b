// SPDX-License-Identifier: MIT
// bind_util.h: small pieces every binding file shares.
#pragma once

#include "convert.h"

namespace qg::python {

inline Format format_from(int f) {
  if (f < 0 || f >= kFormatCount) throw nb::value_error("qg: unknown format id");
  return static_cast<Format>(f);
}

inline Q8_1Convention convention_from(int c) {
  return c == 1 ? Q8_1Convention::ggml_cuda : Q8_1Convention::reference;
}

// Granularity ids as ops.h's enum: 0 none, 1 tensor, 2 row, 3 group.
inline Granularity granularity_from(int g) {
  if (g < 0 || g > 3) throw nb::value_error("qg: unknown granularity id");
  return static_cast<Granularity>(g);
}

inline Stream stream_from(uintptr_t s) { return reinterpret_cast<Stream>(s); }

// CPU work can take a while: other Python threads run meanwhile. A CUDA
// launch returns at once, and keeping the GIL saves the release round trip.
template <class Fn>
Status run_released(Device device, Fn&& fn) {
  if (device.type != DeviceType::cpu) return fn();
  nb::gil_scoped_release release;
  return fn();
}

GemmViews gemm_views(int a_fmt, int b_fmt, const TensorView& a, const TensorView& b, int64_t m, int64_t n,
                     int64_t k, const char* fn, const char* a_name, const char* b_name);
// The epilogue the Python API exposes: bias (a view that outlives the call,
// or null), the result dtype (0 float32, 1 float16, 2 bfloat16, 3 int32), and
// whether the result is [N, M] (x @ W^T) instead of [M, N].
void set_epilogue(GemmViews* v, const TensorView* bias, int out_dtype, bool transpose);

// What the integer family adds to a GEMM call beyond bias / dtype / transpose
// (ops.h's GemmViews): the views live here, for as long as the call.
struct GemmExtras {
  TensorView row_scale, col_scale, row_zero_point, col_zero_point, a_scales, a_zero_points;
  bool has_row_scale = false, has_col_scale = false, has_row_zero_point = false, has_col_zero_point = false,
       has_a_scales = false, has_a_zero_points = false;
  int64_t group_size = 0;
  float alpha = 1.0f;
  int activation = 0;  // 0 none, 1 relu
  bool a_k_major = false, b_k_major = false;
};
// Points v at the extras' views and copies their values.
void set_extras(GemmViews* v, const GemmExtras& e);

}  // namespace qg::python
