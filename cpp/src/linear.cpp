// SPDX-License-Identifier: MIT
// linear.cpp: linear_q4_0, quantize_q8_1(x) into the caller's workspace and
// then the Q4_0 x Q8_1 GEMM, enqueued here back to back: one call, both
// kernels chosen (and every argument checked) before either runs. A GEMM
// kernel with run_quantizing takes x itself and leaves the workspace unused.
#include <cstdint>
#include <string>

#include "dispatch.h"
#include "validate.h"

namespace qg {

namespace {

using detail::invalid;

using detail::overlaps;
using detail::span_of;

}  // namespace

Status linear_q4_0(const LinearQ4_0Args& a, Stream stream) {
  const char* fn = a.fn ? a.fn : "qg.linear_q4_0";
  if (a.n < 0 || a.m < 0 || a.k < 0)
    return invalid(fn, "n, m and k must be >= 0 (got n=" + std::to_string(a.n) + ", m=" + std::to_string(a.m) +
                           ", k=" + std::to_string(a.k) + ")");
  const int64_t xq_row = row_bytes(format_traits(Format::q8_1), a.k);
  if (a.n > 0 && a.k > 0 && a.xq_workspace == nullptr)
    return invalid(fn, "xq_workspace must not be null: pass n * (k / 32) * 36 = " + std::to_string(a.n * xq_row) +
                           " bytes on the device");

  QuantizeArgs q;
  q.format = Format::q8_1;
  q.x = a.x;
  q.x_dtype = a.x_dtype;
  q.rows = a.n;
  q.k = a.k;
  q.x_row_stride = a.x_row_stride;
  q.y = a.xq_workspace;
  q.y_row_stride = xq_row;
  q.device = a.device;
  q.q8_1_convention = Q8_1Convention::reference;
  q.fn = fn;

  // y [N, M]: C's element (m, n) at y + m + n * ldy.
  GemmArgs g;
  g.a = packed_operand(a.weight_q, Format::q4_0, a.m, a.k);
  g.a.row_stride = a.weight_row_stride;
  g.b = packed_operand(a.xq_workspace, Format::q8_1, a.n, a.k);
  g.c = a.y;
  g.c_dtype = a.y_dtype;
  g.ldc = 1;
  g.ldc_n = a.ldy;
  g.epilogue.bias = a.bias;
  g.epilogue.bias_dtype = a.bias_dtype;
  g.epilogue.activation = a.activation;
  g.device = a.device;
  g.fn = fn;

  if (Status s = detail::check_quantize_args(q); !s.ok()) return s;
  if (Status s = detail::check_gemm_args(g); !s.ok()) return s;
  // What the two checks above cannot see, since each knows one step: the
  // workspace must not alias what the GEMM reads, nor y the input x.
  const detail::Span ws = span_of(a.xq_workspace, a.n, xq_row, xq_row);
  const detail::Span w = span_of(a.weight_q, a.m, a.weight_row_stride, row_bytes(format_traits(Format::q4_0), a.k));
  const detail::Span bias = span_of(a.bias, 1, 0, a.m * dtype_size(a.bias_dtype));
  const int64_t xsize = dtype_size(a.x_dtype), ysize = dtype_size(a.y_dtype);
  const detail::Span x = span_of(a.x, a.n, a.x_row_stride * xsize, a.k * xsize);
  const detail::Span y = span_of(a.y, a.n, a.ldy * ysize, a.m * ysize);
  if (overlaps(ws, w) || overlaps(ws, bias))
    return invalid(fn, "xq_workspace overlaps the weight or the bias; pass a separate workspace");
  if (overlaps(y, x)) return invalid(fn, "y overlaps x; pass a separate output");

  // Both kernels are chosen before either runs: a call no GEMM kernel takes
  // fails without having written the workspace.
  const detail::Registry& reg = detail::registry_for(a.device);
  const detail::ConvertKernel<QuantizeArgs>* qk = nullptr;
  const detail::GemmKernel* gk = nullptr;
  if (Status s = detail::choose_kernel(fn, reg.quantize, q, &qk, nullptr); !s.ok()) return s;
  if (Status s = detail::choose_kernel(fn, reg.gemm, g, &gk, nullptr); !s.ok()) return s;

  // K = 0 launches no quantizer; the GEMM still writes the bias (an empty sum).
  const bool quantized = a.n > 0 && a.k > 0;
  // A kernel that quantizes x itself (into its own layout) takes both steps.
  if (quantized && a.m > 0 && gk->run_quantizing) return gk->run_quantizing(g, q, stream);
  if (quantized)
    if (Status s = qk->run(q, stream); !s.ok()) return s;
  if (a.m == 0 || a.n == 0) return {};
  return gk->run(g, stream);
}

}  // namespace qg
