// SPDX-License-Identifier: MIT
// linear.cpp: a model's linear layer in one call: x quantized into the
// caller's workspace, then the GEMM, enqueued back to back, both kernels
// chosen (and every argument checked) before either runs.
//   linear_q4_0: Q8_1 activations x Q4_0 weights. A GEMM kernel with
//                run_quantizing takes both steps itself: the warpgroup
//                kernels quantize x into their own layout (the workspace
//                unused), the ring GEMV runs the quantizer into the
//                workspace and starts early behind it.
//   linear_int8: int8 activations per token x int8 weights per feature.
#include <cstdint>
#include <string>

#include "dispatch.h"
#include "validate.h"

namespace qg {

namespace {

using detail::invalid;

using detail::overlaps;
using detail::span_of;

// Runs the quantize step q, then the GEMM g that reads its output; both
// already checked. Both kernels are chosen before either runs: a call no GEMM
// kernel takes fails without having written the workspace.
Status quantize_then_gemm(const char* fn, const QuantizeArgs& q, const GemmArgs& g, Stream stream) {
  const detail::Registry& reg = detail::registry_for(q.device);
  const detail::ConvertKernel<QuantizeArgs>* qk = nullptr;
  const detail::GemmKernel* gk = nullptr;
  const detail::DeviceScope scope(q.device);  // q and g share the device
  if (Status s = scope.ready(fn); !s.ok()) return s;
  if (Status s = detail::choose_kernel(fn, reg.quantize, q, &qk, nullptr); !s.ok()) return s;
  if (Status s = detail::choose_kernel(fn, reg.gemm, g, &gk, nullptr); !s.ok()) return s;
  // K = 0 launches no quantizer; the GEMM still writes the bias (an empty sum).
  const bool quantized = q.rows > 0 && q.k > 0;
  // A kernel that quantizes x itself (into its own layout) takes both steps.
  if (quantized && g.a.rows > 0 && gk->run_quantizing) return gk->run_quantizing(g, q, stream);
  if (quantized)
    if (Status s = qk->run(q, stream); !s.ok()) return s;
  if (g.a.rows == 0 || g.b.rows == 0) return {};
  return gk->run(g, stream);
}

// The two steps' arguments that every linear layer fills alike from its
// own (x, y [N, M], bias, activation, device): the quantize step's input,
// and the GEMM's output (ldc = 1, ldc_n = ldy: x @ W^T) and epilogue.
template <class Args>
void common_steps(const Args& a, const char* fn, QuantizeArgs* q, GemmArgs* g) {
  q->x = a.x;
  q->x_dtype = a.x_dtype;
  q->rows = a.n;
  q->k = a.k;
  q->x_row_stride = a.x_row_stride;
  q->device = a.device;
  q->fn = fn;
  g->c = a.y;
  g->c_dtype = a.y_dtype;
  g->ldc = 1;
  g->ldc_n = a.ldy;
  g->epilogue.bias = a.bias;
  g->epilogue.bias_dtype = a.bias_dtype;
  g->epilogue.activation = a.activation;
  g->device = a.device;
  g->fn = fn;
}

template <class Args>
Status check_sizes(const Args& a, const char* fn) {
  if (a.n < 0 || a.m < 0 || a.k < 0)
    return invalid(fn, "n, m and k must be >= 0 (got n=" + std::to_string(a.n) + ", m=" + std::to_string(a.m) +
                           ", k=" + std::to_string(a.k) + ")");
  return {};
}

// The spans of x, y and the bias, for the overlap checks only the pair of
// steps can make.
struct LinearSpans {
  detail::Span x, y, bias;
};
template <class Args>
LinearSpans spans_of(const Args& a) {
  const int64_t xsize = dtype_size(a.x_dtype), ysize = dtype_size(a.y_dtype);
  return {span_of(a.x, a.n, a.x_row_stride * xsize, a.k * xsize), span_of(a.y, a.n, a.ldy * ysize, a.m * ysize),
          span_of(a.bias, 1, 0, a.m * dtype_size(a.bias_dtype))};
}

}  // namespace

Status linear_q4_0(const LinearQ4_0Args& a, Stream stream) {
  const char* fn = a.fn ? a.fn : "qg.linear_q4_0";
  if (Status s = check_sizes(a, fn); !s.ok()) return s;
  const int64_t xq_row = row_bytes(format_traits(Format::q8_1), a.k);
  if (a.n > 0 && a.k > 0 && a.xq_workspace == nullptr)
    return invalid(fn, "xq_workspace must not be null: pass n * (k / 32) * 36 = " + std::to_string(a.n * xq_row) +
                           " bytes on the device");

  QuantizeArgs q;
  GemmArgs g;
  common_steps(a, fn, &q, &g);
  q.format = Format::q8_1;
  q.y = a.xq_workspace;
  q.y_row_stride = xq_row;
  q.q8_1_convention = Q8_1Convention::reference;
  if (a.weight_format != Format::q4_0 && a.weight_format != Format::q4_0x16)
    return invalid(fn, std::string("weight_format must be q4_0 or q4_0x16, got ") +
                           format_traits(a.weight_format).name);
  g.a = packed_operand(a.weight_q, a.weight_format, a.m, a.k);
  g.a.row_stride = a.weight_row_stride;
  g.b = packed_operand(a.xq_workspace, Format::q8_1, a.n, a.k);

  if (Status s = detail::check_quantize_args(q); !s.ok()) return s;
  if (Status s = detail::check_gemm_args(g); !s.ok()) return s;
  // What the two checks above cannot see, since each knows one step: the
  // workspace must not alias what the GEMM reads, nor y the input x.
  const LinearSpans io = spans_of(a);
  const detail::Span ws = span_of(a.xq_workspace, a.n, xq_row, xq_row);
  const detail::Span w = detail::operand_span(g.a);
  if (overlaps(ws, w) || overlaps(ws, io.bias))
    return invalid(fn, "xq_workspace overlaps the weight or the bias; pass a separate workspace");
  if (overlaps(io.y, io.x)) return invalid(fn, "y overlaps x; pass a separate output");
  return quantize_then_gemm(fn, q, g, stream);
}

Status linear_int8(const LinearInt8Args& a, Stream stream) {
  const char* fn = a.fn ? a.fn : "qg.linear_int8";
  if (Status s = check_sizes(a, fn); !s.ok()) return s;
  if (a.n > 0 && a.k > 0 && (a.x_codes_workspace == nullptr || a.x_scales_workspace == nullptr))
    return invalid(fn, "x_codes_workspace and x_scales_workspace must not be null: pass n * k = " +
                           std::to_string(a.n * a.k) + " bytes and n = " + std::to_string(a.n) +
                           " floats on the device");
  if (a.m > 0 && a.weight_scale == nullptr)
    return invalid(fn, "weight_scale must not be null: pass the m = " + std::to_string(a.m) +
                           " float32 scales of the weight's rows");

  QuantizeArgs q;  // symmetric, one dynamic scale per token
  GemmArgs g;
  common_steps(a, fn, &q, &g);
  q.format = Format::i8;
  q.y = a.x_codes_workspace;
  q.y_row_stride = a.k;
  q.granularity = Granularity::row;
  q.scales = a.x_scales_workspace;
  g.a = packed_operand(a.weight_q, Format::i8, a.m, a.k);
  g.a.row_stride = a.weight_row_stride;
  g.b = packed_operand(a.x_codes_workspace, Format::i8, a.n, a.k);
  g.epilogue.row_scale = a.weight_scale;
  g.epilogue.col_scale = a.x_scales_workspace;

  if (Status s = detail::check_quantize_args(q); !s.ok()) return s;
  if (Status s = detail::check_gemm_args(g); !s.ok()) return s;
  // What the two checks above cannot see, since each knows one step: the
  // workspaces must not alias what the GEMM reads or each other, nor y x.
  const LinearSpans io = spans_of(a);
  const detail::Span codes = span_of(a.x_codes_workspace, a.n, a.k, a.k);
  const detail::Span scales = span_of(a.x_scales_workspace, 1, 0, a.n * 4);
  const detail::Span w = span_of(a.weight_q, a.m, a.weight_row_stride, a.k);
  const detail::Span wscale = span_of(a.weight_scale, 1, 0, a.m * 4);
  for (const detail::Span& ws : {codes, scales})
    if (overlaps(ws, w) || overlaps(ws, wscale) || overlaps(ws, io.bias) || overlaps(ws, io.x) || overlaps(ws, io.y))
      return invalid(fn, "a workspace overlaps the weight, its scales, the bias, x or y; pass separate workspaces");
  if (overlaps(codes, scales)) return invalid(fn, "x_codes_workspace overlaps x_scales_workspace; pass two buffers");
  if (overlaps(io.y, io.x)) return invalid(fn, "y overlaps x; pass a separate output");
  return quantize_then_gemm(fn, q, g, stream);
}

}  // namespace qg
