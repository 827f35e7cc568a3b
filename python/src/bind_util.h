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
// or null), the result dtype (0 float32, 1 float16, 2 bfloat16), and whether
// the result is [N, M] (x @ W^T) instead of [M, N].
void set_epilogue(GemmViews* v, const TensorView* bias, int out_dtype, bool transpose);

}  // namespace qg::python
