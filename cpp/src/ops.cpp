// SPDX-License-Identifier: MIT
// ops.cpp: the public entry points. Raw-pointer calls validate, then dispatch;
// view calls infer the result, turn views into raw arguments, then do the
// same. One path per op for every format.
#include "dispatch.h"
#include "validate.h"

namespace qg {

using detail::choose_kernel;
using detail::invalid;
using detail::type_error;

namespace {

const char* name_or(const char* fn, const char* fallback) { return fn ? fn : fallback; }

template <class Args, class Kernels>
Status run_op(const Args& args, const Kernels& kernels, const char* fn, bool empty, Stream stream,
              Explanation* explain) {
  using Kernel = typename Kernels::value_type;
  const Kernel* k = nullptr;
  if (Status s = choose_kernel(fn, kernels, args, &k, explain); !s.ok()) return s;
  if (explain || empty) return {};
  return k->run(args, stream);
}

Status gemm_dispatch(const GemmArgs& args, Stream stream, Explanation* explain) {
  if (Status s = detail::check_gemm_args(args, explain == nullptr); !s.ok()) return s;
  // K == 0 still runs: the epilogue writes the empty sum (0) through bias and activation.
  const bool empty = args.a.rows == 0 || args.b.rows == 0;
  return run_op(args, detail::registry_for(args.device).gemm, name_or(args.fn, "qg.gemm"), empty, stream, explain);
}

Status quantize_dispatch(const QuantizeArgs& args, Stream stream, Explanation* explain) {
  if (Status s = detail::check_quantize_args(args, explain == nullptr); !s.ok()) return s;
  const char* fn = name_or(args.fn, format_traits(args.format).quantize_fn);
  return run_op(args, detail::registry_for(args.device).quantize, fn, args.rows == 0 || args.k == 0, stream,
                explain);
}

Status dequantize_dispatch(const DequantizeArgs& args, Stream stream, Explanation* explain) {
  if (Status s = detail::check_dequantize_args(args, explain == nullptr); !s.ok()) return s;
  const char* fn = name_or(args.fn, format_traits(args.format).dequantize_fn);
  return run_op(args, detail::registry_for(args.device).dequantize, fn, args.rows == 0 || args.k == 0, stream,
                explain);
}

}  // namespace

// ------------------------------------------------------------------ raw pointers
Operand packed_operand(const void* data, Format format, int64_t rows, int64_t k) {
  Operand op;
  op.data = data;
  op.format = format;
  op.rows = rows;
  op.k = k;
  op.row_stride = row_bytes(format_traits(format), k < 0 ? 0 : k);
  return op;
}

Status gemm(const GemmArgs& args, Stream stream) { return gemm_dispatch(args, stream, nullptr); }
Status quantize(const QuantizeArgs& args, Stream stream) { return quantize_dispatch(args, stream, nullptr); }
Status dequantize(const DequantizeArgs& args, Stream stream) { return dequantize_dispatch(args, stream, nullptr); }

Status gemm_q4_0_q8_1(const void* w, const void* a, float* c, int64_t m, int64_t n, int64_t k, Device device,
                      Stream stream) {
  GemmArgs g;
  g.a = packed_operand(w, Format::q4_0, m, k);
  g.b = packed_operand(a, Format::q8_1, n, k);
  g.c = c;
  g.ldc = n;
  g.device = device;
  g.fn = "qg.gemm_q4_0_q8_1";
  return gemm(g, stream);
}

Status explain(const GemmArgs& args, Explanation* out) {
  *out = Explanation{};
  return gemm_dispatch(args, nullptr, out);
}
Status explain(const QuantizeArgs& args, Explanation* out) {
  *out = Explanation{};
  return quantize_dispatch(args, nullptr, out);
}
Status explain(const DequantizeArgs& args, Explanation* out) {
  *out = Explanation{};
  return dequantize_dispatch(args, nullptr, out);
}

// ------------------------------------------------------------------------ views
namespace {

int64_t product(const TensorView& v, int drop) {
  int64_t p = 1;
  for (int d = 0; d < v.ndim - drop; ++d) p *= v.shape[d];
  return p;
}

// The leading dims of a view multiply to its row count: that product (and the
// whole element count) must fit in int64, or rows would wrap around.
Status check_extent(const char* fn, const char* arg, const TensorView& v) {
  int64_t p = 1;
  for (int d = 0; d < v.ndim; ++d)
    if (__builtin_mul_overflow(p, v.shape[d], &p))
      return Status(StatusCode::overflow, std::string(fn) + ": " + arg + " of shape " + detail::shape_string(v) +
                                              " has more elements than a 64-bit index can address");
  return {};
}

void set_spec(ResultSpec* out, DType dtype, const int64_t* lead, int nlead, std::initializer_list<int64_t> tail) {
  out->dtype = dtype;
  out->ndim = 0;
  for (int d = 0; d < nlead; ++d) out->shape[out->ndim++] = lead[d];
  for (int64_t t : tail) out->shape[out->ndim++] = t;
}

Status check_1d(const char* fn, const char* arg, const TensorView* v, int64_t len, Device device, bool float_only) {
  if (v == nullptr) return {};
  if (Status s = detail::check_view(fn, arg, *v); !s.ok()) return s;
  if (v->data == nullptr && len > 0) return invalid(fn, std::string(arg) + " has no data (a null pointer)");
  if (float_only ? v->dtype != DType::f32 : !detail::is_float_dtype(v->dtype))
    return type_error(fn, std::string(arg) + " must be " + (float_only ? "float32" : "float32, float16 or bfloat16") +
                              ", got " + dtype_name(v->dtype));
  if (v->ndim != 1 || v->shape[0] != len)
    return invalid(fn, std::string(arg) + " must have shape [" + std::to_string(len) + "], got " +
                           detail::shape_string(*v));
  if (len > 1 && v->strides[0] != 1) return invalid(fn, std::string(arg) + " must be contiguous; pass a contiguous copy");
  if (v->device != device)
    return invalid(fn, std::string(arg) + " is on " + device_name(v->device) + " but the operands are on " +
                           device_name(device) + "; move it there");
  return {};
}

}  // namespace

Status result_spec(const QuantizeViews& v, ResultSpec* out) {
  const FormatTraits& t = format_traits(v.format);
  const char* fn = name_or(v.fn, t.quantize_fn);
  if (!detail::is_float_dtype(v.x.dtype))
    return type_error(fn, std::string("x must be float32, float16 or bfloat16, got ") + dtype_name(v.x.dtype));
  if (Status s = detail::check_view(fn, "x", v.x); !s.ok()) return s;
  if (Status s = check_extent(fn, "x", v.x); !s.ok()) return s;
  if (v.x.ndim < 1)
    return invalid(fn, "x must have shape [..., K], got a 0-d array; reshape it to [1, K]");
  if (v.x.ndim + 1 > kMaxDims)
    return invalid(fn, "x has " + std::to_string(v.x.ndim) + " dimensions, so the result would have " +
                           std::to_string(v.x.ndim + 1) + ", more than qg's limit of " + std::to_string(kMaxDims) +
                           "; merge leading dimensions of x (reshape) first");
  const int64_t k = v.x.shape[v.x.ndim - 1];
  if (k % t.block_size != 0)
    return invalid(fn, "K=" + std::to_string(k) + " (x.shape[-1]) is not a multiple of " +
                           std::to_string(t.block_size) + ", the " + t.name + " block size");
  set_spec(out, DType::u8, v.x.shape, v.x.ndim - 1, {k / t.block_size, t.bytes_per_block});
  return {};
}

Status result_spec(const DequantizeViews& v, ResultSpec* out) {
  const FormatTraits& t = format_traits(v.format);
  const char* fn = name_or(v.fn, t.dequantize_fn);
  if (Status s = detail::check_packed_view(fn, "xq", v.xq, v.format); !s.ok()) return s;
  if (Status s = check_extent(fn, "xq", v.xq); !s.ok()) return s;
  const int64_t blocks = v.xq.shape[v.xq.ndim - 2];
  const int64_t inferred = blocks * t.block_size;
  if (v.k >= 0 && v.k != inferred)
    return invalid(fn, "K=" + std::to_string(v.k) + " does not match xq, which holds " + std::to_string(blocks) +
                           " blocks per row (K=" + std::to_string(inferred) + ")");
  set_spec(out, DType::f32, v.xq.shape, v.xq.ndim - 2, {inferred});
  return {};
}

Status result_spec(const GemmViews& v, ResultSpec* out) {
  const char* fn = v.fn;
  const FormatTraits &ta = format_traits(v.a_format), &tb = format_traits(v.b_format);
  if (Status s = detail::check_packed_view(fn, v.a_name, v.a, v.a_format); !s.ok()) return s;
  if (Status s = detail::check_packed_view(fn, v.b_name, v.b, v.b_format); !s.ok()) return s;
  if (Status s = check_extent(fn, v.a_name, v.a); !s.ok()) return s;
  if (Status s = check_extent(fn, v.b_name, v.b); !s.ok()) return s;
  if (v.a.device != v.b.device)
    return invalid(fn, std::string(v.a_name) + " is on " + device_name(v.a.device) + " but " + v.b_name + " is on " +
                           device_name(v.b.device) + "; move both to one device");
  const int64_t ka = v.a.shape[v.a.ndim - 2] * ta.block_size, kb = v.b.shape[v.b.ndim - 2] * tb.block_size;
  if (ka != kb)
    return invalid(fn, std::string(v.a_name) + " has " + std::to_string(v.a.shape[v.a.ndim - 2]) +
                           " blocks per row (K=" + std::to_string(ka) + ") but " + v.b_name + " has " +
                           std::to_string(v.b.shape[v.b.ndim - 2]) + " (K=" + std::to_string(kb) + ")");
  const int64_t m = product(v.a, 2), n = product(v.b, 2);
  if (v.k >= 0 && v.k % ta.block_size != 0)
    return invalid(fn, "K=" + std::to_string(v.k) + " is not a multiple of " + std::to_string(ta.block_size) +
                           ", the " + ta.name + " block size");
  if (v.k >= 0 && v.k != ka)
    return invalid(fn, "K=" + std::to_string(v.k) + " does not match " + v.a_name + ", which holds " +
                           std::to_string(v.a.shape[v.a.ndim - 2]) + " blocks per row (K=" + std::to_string(ka) + ")");
  if (v.m >= 0 && v.m != m)
    return invalid(fn, "M=" + std::to_string(v.m) + " does not match " + v.a_name + " of shape " +
                           detail::shape_string(v.a) + " (M=" + std::to_string(m) + ")");
  if (v.n >= 0 && v.n != n)
    return invalid(fn, "N=" + std::to_string(v.n) + " does not match " + v.b_name + " of shape " +
                           detail::shape_string(v.b) + " (N=" + std::to_string(n) + ")");
  if (!detail::is_float_dtype(v.out_dtype))
    return type_error(fn, std::string("out_dtype must be float32, float16 or bfloat16, got ") +
                              dtype_name(v.out_dtype));
  if (Status s = check_1d(fn, "bias", v.bias, m, v.a.device, false); !s.ok()) return s;
  if (Status s = check_1d(fn, "row_scale", v.row_scale, m, v.a.device, true); !s.ok()) return s;
  if (Status s = check_1d(fn, "col_scale", v.col_scale, n, v.a.device, true); !s.ok()) return s;
  const int64_t none[1] = {0};
  if (v.transpose_out) set_spec(out, v.out_dtype, none, 0, {n, m});
  else set_spec(out, v.out_dtype, none, 0, {m, n});
  return {};
}

namespace {

// Views -> raw args. out may be null (explain): then the output stays unset.
Status to_args(const QuantizeViews& v, const TensorView* out, QuantizeArgs* a) {
  const char* fn = name_or(v.fn, format_traits(v.format).quantize_fn);
  ResultSpec spec;
  if (Status s = result_spec(v, &spec); !s.ok()) return s;
  detail::RowLayout xl, yl;
  if (Status s = detail::row_layout(fn, "x", v.x, 1, &xl); !s.ok()) return s;
  if (out) {
    if (Status s = detail::check_output(fn, *out, spec, v.x.device); !s.ok()) return s;
    if (Status s = detail::row_layout(fn, "out", *out, 2, &yl); !s.ok()) return s;
    a->y = out->data;
    a->y_row_stride = yl.row_stride;
  }
  a->format = v.format;
  a->x = v.x.data;
  a->x_dtype = v.x.dtype;
  a->rows = xl.rows;
  a->k = v.x.shape[v.x.ndim - 1];
  a->x_row_stride = xl.row_stride;
  a->device = v.x.device;
  a->q8_1_convention = v.convention;
  a->fn = fn;
  return {};
}

Status to_args(const DequantizeViews& v, const TensorView* out, DequantizeArgs* a) {
  const char* fn = name_or(v.fn, format_traits(v.format).dequantize_fn);
  ResultSpec spec;
  if (Status s = result_spec(v, &spec); !s.ok()) return s;
  detail::RowLayout xl, yl;
  if (Status s = detail::row_layout(fn, "xq", v.xq, 2, &xl); !s.ok()) return s;
  if (out) {
    if (Status s = detail::check_output(fn, *out, spec, v.xq.device); !s.ok()) return s;
    if (Status s = detail::row_layout(fn, "out", *out, 1, &yl); !s.ok()) return s;
    a->y = static_cast<float*>(out->data);
    a->y_row_stride = yl.row_stride;
  }
  a->format = v.format;
  a->xq = v.xq.data;
  a->rows = xl.rows;
  a->k = spec.shape[spec.ndim - 1];
  a->xq_row_stride = xl.row_stride;
  a->device = v.xq.device;
  a->fn = fn;
  return {};
}

Status to_args(const GemmViews& v, const TensorView* out, GemmArgs* g) {
  const char* fn = v.fn;
  ResultSpec spec;
  if (Status s = result_spec(v, &spec); !s.ok()) return s;
  detail::RowLayout al, bl;
  if (Status s = detail::row_layout(fn, v.a_name, v.a, 2, &al); !s.ok()) return s;
  if (Status s = detail::row_layout(fn, v.b_name, v.b, 2, &bl); !s.ok()) return s;
  const int64_t m = product(v.a, 2), n = product(v.b, 2);
  const int64_t k = v.a.shape[v.a.ndim - 2] * format_traits(v.a_format).block_size;
  if (out) {
    if (Status s = detail::check_output(fn, *out, spec, v.a.device); !s.ok()) return s;
    g->c = out->data;
  }
  g->a = {v.a.data, v.a_format, m, k, al.row_stride, {}, {}};
  g->b = {v.b.data, v.b_format, n, k, bl.row_stride, {}, {}};
  g->c_dtype = v.out_dtype;
  g->ldc = v.transpose_out ? 1 : n;
  g->ldc_n = v.transpose_out ? m : 1;
  g->epilogue.alpha = v.alpha;
  g->epilogue.beta = v.beta;
  g->epilogue.activation = v.activation;
  if (v.bias) {
    g->epilogue.bias = v.bias->data;
    g->epilogue.bias_dtype = v.bias->dtype;
  }
  if (v.row_scale) g->epilogue.row_scale = static_cast<const float*>(v.row_scale->data);
  if (v.col_scale) g->epilogue.col_scale = static_cast<const float*>(v.col_scale->data);
  g->device = v.a.device;
  g->fn = fn;
  return {};
}

}  // namespace

Status quantize(const QuantizeViews& v, const TensorView& out, Stream stream) {
  QuantizeArgs a;
  if (Status s = to_args(v, &out, &a); !s.ok()) return s;
  return quantize_dispatch(a, stream, nullptr);
}

Status dequantize(const DequantizeViews& v, const TensorView& out, Stream stream) {
  DequantizeArgs a;
  if (Status s = to_args(v, &out, &a); !s.ok()) return s;
  return dequantize_dispatch(a, stream, nullptr);
}

Status gemm(const GemmViews& v, const TensorView& out, Stream stream) {
  GemmArgs g;
  if (Status s = to_args(v, &out, &g); !s.ok()) return s;
  return gemm_dispatch(g, stream, nullptr);
}

Status explain(const QuantizeViews& v, Explanation* out) {
  QuantizeArgs a;
  if (Status s = to_args(v, nullptr, &a); !s.ok()) return s;
  return explain(a, out);
}
Status explain(const DequantizeViews& v, Explanation* out) {
  DequantizeArgs a;
  if (Status s = to_args(v, nullptr, &a); !s.ok()) return s;
  return explain(a, out);
}
Status explain(const GemmViews& v, Explanation* out) {
  GemmArgs g;
  if (Status s = to_args(v, nullptr, &g); !s.ok()) return s;
  return explain(g, out);
}

}  // namespace qg
