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
  // The device current through the walk (can_run) and the launch (run).
  const detail::DeviceScope scope(args.device);
  if (Status s = scope.ready(fn); !s.ok()) return s;
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
  // An empty input still has scopes when its scales are computed (a tensor
  // scope, or rows of K = 0): the kernel writes them as all-zero scopes.
  const bool empty = args.rows == 0 || args.k == 0;
  const bool scopes = args.scales && (args.granularity == Granularity::tensor ||
                                      (args.granularity == Granularity::row && args.rows > 0));
  return run_op(args, detail::registry_for(args.device).quantize, fn, empty && !scopes, stream, explain);
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

// The rows a packed [..., blocks, bytes] view holds: its leading dims' product,
// times the rows interleaved in each stored row (q4_0x16: 16).
int64_t blocked_rows(const TensorView& v, Format f) { return product(v, 2) * format_traits(f).rows_per_block; }

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
  const bool scalar_ok = std::string(arg) != "bias";  // a scale of one element applies to all
  if (v->ndim != 1 || (v->shape[0] != len && !(scalar_ok && v->shape[0] == 1)))
    return invalid(fn, std::string(arg) + " must have shape [" + std::to_string(len) + "]" +
                           (scalar_ok ? " or [1]" : "") + ", got " + detail::shape_string(*v));
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
  if (k % t.block_size != 0 && !t.pads_k)
    return invalid(fn, "K=" + std::to_string(k) + " (x.shape[-1]) is not a multiple of " +
                           std::to_string(t.block_size) + ", the " + t.name + " block size");
  if (Status s = detail::check_not_repacked(fn, t, "quantize to"); !s.ok()) return s;
  if (!t.quantizable || t.scale_place == ScalePlace::none)
    return invalid(fn, std::string("qg cannot quantize to ") + t.name);
  if (t.blocked_view) set_spec(out, DType::u8, v.x.shape, v.x.ndim - 1, {k / t.block_size, t.bytes_per_block});
  else set_spec(out, t.storage, v.x.shape, v.x.ndim - 1, {row_elements(t, k)});
  return {};
}

Status scales_spec(const QuantizeViews& v, ResultSpec* out) {
  ResultSpec codes;
  if (Status s = result_spec(v, &codes); !s.ok()) return s;
  const FormatTraits& t = format_traits(v.format);
  const char* fn = name_or(v.fn, t.quantize_fn);
  if (t.scale_place != ScalePlace::outside) return invalid(fn, std::string(t.name) + " keeps its scales in its blocks");
  const int64_t k = v.x.shape[v.x.ndim - 1];
  const int64_t one[1] = {1};
  if (v.granularity == Granularity::tensor) set_spec(out, DType::f32, one, 1, {});
  else if (v.granularity == Granularity::row) set_spec(out, DType::f32, v.x.shape, v.x.ndim - 1, {});
  else if (v.granularity == Granularity::group && v.group_size > 0 && k % v.group_size == 0)
    set_spec(out, DType::f32, v.x.shape, v.x.ndim - 1, {k / v.group_size});
  else if (v.granularity == Granularity::group)
    return invalid(fn, "group_size=" + std::to_string(v.group_size) + " must be positive and divide K=" + std::to_string(k));
  else
    return invalid(fn, std::string(t.name) + " keeps its scales outside the codes: pass a granularity");
  return {};
}

// K of a flat view's rows of `elements` storage elements; `given` (>= 0)
// chooses between the two K a padded format allows (i4: 2E or 2E - 1).
Status flat_k(const char* fn, const char* arg, const FormatTraits& t, int64_t elements, int64_t given, int64_t* k) {
  const int64_t full = elements * dtype_size(t.storage) / t.bytes_per_block * t.block_size;
  if (given < 0) {
    *k = full;
    return {};
  }
  if (row_elements(t, given) != elements)
    return invalid(fn, "K=" + std::to_string(given) + " does not match " + arg + ", whose rows hold " +
                           std::to_string(elements) + " " + dtype_name(t.storage) + " elements (K=" +
                           std::to_string(full) + (t.pads_k ? " or " + std::to_string(full - 1) : std::string()) +
                           " for " + t.name + ")");
  *k = given;
  return {};
}

Status check_flat_view(const char* fn, const char* arg, const TensorView& v, const FormatTraits& t, int min_ndim) {
  if (v.dtype != t.storage)
    return type_error(fn, std::string(arg) + " must be " + dtype_name(t.storage) + " (" + t.name + " codes), got " +
                              dtype_name(v.dtype));
  if (Status s = detail::check_view(fn, arg, v); !s.ok()) return s;
  if (v.ndim < min_ndim)
    return invalid(fn, std::string(arg) + " must have at least " + std::to_string(min_ndim) +
                           " dimension(s), got shape " + detail::shape_string(v));
  return check_extent(fn, arg, v);
}

Status result_spec(const DequantizeViews& v, ResultSpec* out) {
  const FormatTraits& t = format_traits(v.format);
  const char* fn = name_or(v.fn, t.dequantize_fn);
  if (Status s = detail::check_not_repacked(fn, t, "dequantize"); !s.ok()) return s;
  if (!t.blocked_view) {
    if (Status s = check_flat_view(fn, "xq", v.xq, t, 1); !s.ok()) return s;
    int64_t k;
    if (Status s = flat_k(fn, "xq", t, v.xq.shape[v.xq.ndim - 1], v.k, &k); !s.ok()) return s;
    set_spec(out, DType::f32, v.xq.shape, v.xq.ndim - 1, {k});
    return {};
  }
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

namespace {

Status check_zero_point(const char* fn, const char* arg, const TensorView* v, int64_t len, Device device) {
  if (v == nullptr) return {};
  if (Status s = detail::check_view(fn, arg, *v); !s.ok()) return s;
  if (v->dtype != DType::i32) return type_error(fn, std::string(arg) + " must be int32, got " + dtype_name(v->dtype));
  if (v->ndim != 1 || (v->shape[0] != len && v->shape[0] != 1))
    return invalid(fn, std::string(arg) + " must have shape [1] or [" + std::to_string(len) + "], got " +
                           detail::shape_string(*v));
  if (v->shape[0] > 1 && v->strides[0] != 1) return invalid(fn, std::string(arg) + " must be contiguous");
  if (v->data == nullptr) return invalid(fn, std::string(arg) + " has no data (a null pointer)");
  if (v->device != device)
    return invalid(fn, std::string(arg) + " is on " + device_name(v->device) + " but the operands are on " +
                           device_name(device) + "; move it there");
  return {};
}

Status check_group_tensor(const char* fn, const char* arg, const TensorView* v, int64_t m, int64_t groups,
                          Device device, bool zero_points) {
  if (v == nullptr) return {};
  if (Status s = detail::check_view(fn, arg, *v); !s.ok()) return s;
  const bool dtype_ok = zero_points ? (v->dtype == DType::i8 || v->dtype == DType::i32) : detail::is_float_dtype(v->dtype);
  if (!dtype_ok)
    return type_error(fn, std::string(arg) + " must be " + (zero_points ? "int8 or int32" : "float32, float16 or bfloat16") +
                              ", got " + dtype_name(v->dtype));
  if (v->ndim != 2 || v->shape[0] != m || v->shape[1] != groups)
    return invalid(fn, std::string(arg) + " must have shape [" + std::to_string(m) + ", " + std::to_string(groups) +
                           "] (rows x K / group_size), got " + detail::shape_string(*v));
  if (groups > 1 && v->strides[1] != 1)
    return invalid(fn, std::string(arg) + " must be contiguous along its groups; pass a contiguous copy");
  if (m > 1 && v->strides[0] < groups) return invalid(fn, std::string(arg) + " has overlapping rows; pass a contiguous copy");
  if (v->data == nullptr && m * groups > 0) return invalid(fn, std::string(arg) + " has no data (a null pointer)");
  if (v->device != device)
    return invalid(fn, std::string(arg) + " is on " + device_name(v->device) + " but the operands are on " +
                           device_name(device) + "; move it there");
  return {};
}

// An operand's rows from a view: packed ggml [..., blocks, bytes], flat
// [..., elements], or (k_major) a 2-D [elements, N] read as N rows along K.
struct OperandShape {
  int64_t rows = 0, k = 0, row_stride = 0, block_stride = 0;  // strides in bytes
};

Status operand_shape(const char* fn, const char* arg, const TensorView& v, Format f, int64_t k_given, bool k_major,
                     bool need_layout, OperandShape* o) {
  const FormatTraits& t = format_traits(f);
  if (t.blocked_view) {
    if (Status s = detail::check_packed_view(fn, arg, v, f); !s.ok()) return s;
    if (Status s = check_extent(fn, arg, v); !s.ok()) return s;
    o->rows = blocked_rows(v, f);
    o->k = v.shape[v.ndim - 2] * t.block_size;
    if (need_layout) {
      detail::RowLayout l;
      if (Status s = detail::row_layout(fn, arg, v, 2, &l); !s.ok()) return s;
      o->row_stride = l.row_stride;
    }
    return {};
  }
  const int64_t esize = dtype_size(t.storage);
  if (Status s = check_flat_view(fn, arg, v, t, k_major ? 2 : 1); !s.ok()) return s;
  if (k_major) {
    if (v.ndim != 2)
      return invalid(fn, std::string(arg) + " must be 2-D [K, N] here, got shape " + detail::shape_string(v));
    if (Status s = flat_k(fn, arg, t, v.shape[0], k_given, &o->k); !s.ok()) return s;
    o->rows = v.shape[1];
    o->row_stride = v.strides[1] * esize;
    o->block_stride = v.strides[0] * esize;
    if (need_layout && v.numel() > 0 && (o->row_stride < 0 || o->block_stride < 0))
      return invalid(fn, std::string(arg) + " has a negative stride (a flipped view); pass a contiguous copy");
    return {};
  }
  if (Status s = flat_k(fn, arg, t, v.shape[v.ndim - 1], k_given, &o->k); !s.ok()) return s;
  o->rows = product(v, 1);
  if (need_layout) {
    detail::RowLayout l;
    if (Status s = detail::row_layout(fn, arg, v, 1, &l); !s.ok()) return s;
    o->row_stride = l.row_stride * esize;
  }
  return {};
}

}  // namespace

Status result_spec(const GemmViews& v, ResultSpec* out) {
  const char* fn = v.fn;
  const FormatTraits &ta = format_traits(v.a_format), &tb = format_traits(v.b_format);
  if (!ta.blocked_view || !tb.blocked_view) {
    OperandShape a, b;
    if (Status s = operand_shape(fn, v.a_name, v.a, v.a_format, v.k, v.a_k_major, false, &a); !s.ok()) return s;
    if (Status s = operand_shape(fn, v.b_name, v.b, v.b_format, v.k, v.b_k_major, false, &b); !s.ok()) return s;
    if (v.a.device != v.b.device)
      return invalid(fn, std::string(v.a_name) + " is on " + device_name(v.a.device) + " but " + v.b_name +
                             " is on " + device_name(v.b.device) + "; move both to one device");
    if (a.k != b.k)
      return invalid(fn, std::string(v.a_name) + " has K=" + std::to_string(a.k) + " but " + v.b_name + " has K=" +
                             std::to_string(b.k) + " (shapes " + detail::shape_string(v.a) + " and " +
                             detail::shape_string(v.b) + ")");
    if (v.m >= 0 && v.m != a.rows)
      return invalid(fn, "M=" + std::to_string(v.m) + " does not match " + v.a_name + " of shape " +
                             detail::shape_string(v.a) + " (M=" + std::to_string(a.rows) + ")");
    if (v.n >= 0 && v.n != b.rows)
      return invalid(fn, "N=" + std::to_string(v.n) + " does not match " + v.b_name + " of shape " +
                             detail::shape_string(v.b) + " (N=" + std::to_string(b.rows) + ")");
    if (!detail::is_float_dtype(v.out_dtype) && v.out_dtype != DType::i32)
      return type_error(fn, std::string("out_dtype must be float32, float16, bfloat16 or int32, got ") +
                                dtype_name(v.out_dtype));
    const Device d = v.a.device;
    if (Status s = check_1d(fn, "bias", v.bias, a.rows, d, false); !s.ok()) return s;
    if (Status s = check_1d(fn, "row_scale", v.row_scale, a.rows, d, true); !s.ok()) return s;
    if (Status s = check_1d(fn, "col_scale", v.col_scale, b.rows, d, true); !s.ok()) return s;
    if (Status s = check_zero_point(fn, "row_zero_point", v.row_zero_point, a.rows, d); !s.ok()) return s;
    if (Status s = check_zero_point(fn, "col_zero_point", v.col_zero_point, b.rows, d); !s.ok()) return s;
    if (v.a_scales || v.a_zero_points) {
      if (v.group_size <= 0 || a.k % v.group_size != 0)
        return invalid(fn, "group_size=" + std::to_string(v.group_size) + " must be positive and divide K=" +
                               std::to_string(a.k));
      const int64_t groups = a.k / v.group_size;
      if (Status s = check_group_tensor(fn, "scales", v.a_scales, a.rows, groups, d, false); !s.ok()) return s;
      if (Status s = check_group_tensor(fn, "zero_points", v.a_zero_points, a.rows, groups, d, true); !s.ok()) return s;
    }
    const int64_t none[1] = {0};
    if (v.transpose_out) set_spec(out, v.out_dtype, none, 0, {b.rows, a.rows});
    else set_spec(out, v.out_dtype, none, 0, {a.rows, b.rows});
    return {};
  }
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
  const int64_t m = blocked_rows(v.a, v.a_format), n = blocked_rows(v.b, v.b_format);
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

// A scales / zero-points view of scales_spec's shape, C-contiguous, on the device.
Status check_scales_view(const char* fn, const char* arg, const TensorView& v, const ResultSpec& spec, DType dtype,
                         Device device) {
  if (Status s = detail::check_view(fn, arg, v); !s.ok()) return s;
  if (v.dtype != dtype) return type_error(fn, std::string(arg) + " must be " + dtype_name(dtype) + ", got " + dtype_name(v.dtype));
  bool same = v.ndim == spec.ndim;
  for (int d = 0; same && d < spec.ndim; ++d) same = v.shape[d] == spec.shape[d];
  if (!same)
    return invalid(fn, std::string(arg) + " must have shape " + detail::shape_string(spec.shape, spec.ndim) +
                           " for this granularity, got " + detail::shape_string(v));
  if (v.device != device)
    return invalid(fn, std::string(arg) + " is on " + device_name(v.device) + " but x is on " + device_name(device));
  if (!v.is_contiguous()) return invalid(fn, std::string(arg) + " must be C-contiguous; pass a contiguous copy");
  if (v.data == nullptr && v.numel() > 0) return invalid(fn, std::string(arg) + " has no data (a null pointer)");
  return {};
}

// Views -> raw args. out may be null (explain): then the output stays unset.
Status to_args(const QuantizeViews& v, const TensorView* out, QuantizeArgs* a) {
  const FormatTraits& t = format_traits(v.format);
  const char* fn = name_or(v.fn, t.quantize_fn);
  ResultSpec spec;
  if (Status s = result_spec(v, &spec); !s.ok()) return s;
  detail::RowLayout xl, yl;
  if (Status s = detail::row_layout(fn, "x", v.x, 1, &xl); !s.ok()) return s;
  if (out) {
    if (Status s = detail::check_output(fn, *out, spec, v.x.device); !s.ok()) return s;
    if (Status s = detail::row_layout(fn, "out", *out, t.blocked_view ? 2 : 1, &yl); !s.ok()) return s;
    a->y = out->data;
    a->y_row_stride = t.blocked_view ? yl.row_stride : yl.row_stride * dtype_size(t.storage);
  }
  if (t.scale_place == ScalePlace::outside) {
    ResultSpec ss;
    if (Status s = scales_spec(v, &ss); !s.ok()) return s;
    a->granularity = v.granularity;
    a->group_size = v.group_size;
    if (v.static_scales) {
      if (Status s = check_scales_view(fn, "scales", *v.static_scales, ss, DType::f32, v.x.device); !s.ok()) return s;
      a->static_scales = static_cast<const float*>(v.static_scales->data);
      if (v.static_zero_points) {
        if (Status s = check_scales_view(fn, "zero_point", *v.static_zero_points, ss, DType::i32, v.x.device); !s.ok())
          return s;
        a->static_zero_points = static_cast<const int32_t*>(v.static_zero_points->data);
      }
    }
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
  const FormatTraits& t = format_traits(v.format);
  const char* fn = name_or(v.fn, t.dequantize_fn);
  ResultSpec spec;
  if (Status s = result_spec(v, &spec); !s.ok()) return s;
  detail::RowLayout xl, yl;
  if (Status s = detail::row_layout(fn, "xq", v.xq, t.blocked_view ? 2 : 1, &xl); !s.ok()) return s;
  if (!t.blocked_view) xl.row_stride *= dtype_size(t.storage);
  if (t.scale_place == ScalePlace::outside) {
    // The scales' shape is the quantization's: the same spec from a stand-in x.
    QuantizeViews q;
    q.format = v.format;
    q.x = v.xq;
    q.x.dtype = DType::f32;
    q.x.shape[q.x.ndim - 1] = spec.shape[spec.ndim - 1];
    q.fn = fn;
    q.granularity = v.granularity;
    q.group_size = v.group_size;
    ResultSpec ss;
    if (Status s = scales_spec(q, &ss); !s.ok()) return s;
    if (!v.scales) return invalid(fn, "scales must be given");
    if (Status s = check_scales_view(fn, "scales", *v.scales, ss, DType::f32, v.xq.device); !s.ok()) return s;
    a->scales = static_cast<const float*>(v.scales->data);
    if (v.zero_points) {
      if (Status s = check_scales_view(fn, "zero_point", *v.zero_points, ss, DType::i32, v.xq.device); !s.ok()) return s;
      a->zero_points = static_cast<const int32_t*>(v.zero_points->data);
    }
    a->granularity = v.granularity;
    a->group_size = v.group_size;
  }
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
  if (!format_traits(v.a_format).blocked_view || !format_traits(v.b_format).blocked_view) {
    OperandShape a, b;
    if (Status s = operand_shape(fn, v.a_name, v.a, v.a_format, v.k, v.a_k_major, true, &a); !s.ok()) return s;
    if (Status s = operand_shape(fn, v.b_name, v.b, v.b_format, v.k, v.b_k_major, true, &b); !s.ok()) return s;
    if (out) {
      if (Status s = detail::check_output(fn, *out, spec, v.a.device); !s.ok()) return s;
      g->c = out->data;
    }
    g->a = {v.a.data, v.a_format, a.rows, a.k, a.row_stride, {}, {}, a.block_stride};
    g->b = {v.b.data, v.b_format, b.rows, b.k, b.row_stride, {}, {}, b.block_stride};
    if (v.a_scales)
      g->a.scales = {v.a_scales->data, v.a_scales->dtype, Granularity::group, v.group_size, v.a_scales->strides[0]};
    if (v.a_zero_points)
      g->a.zero_points = {v.a_zero_points->data, v.a_zero_points->dtype, Granularity::group, v.group_size,
                          v.a_zero_points->strides[0]};
    if (v.row_zero_point) {
      g->epilogue.row_zero_point = static_cast<const int32_t*>(v.row_zero_point->data);
      g->epilogue.row_zero_point_scalar = v.row_zero_point->shape[0] == 1;
    }
    if (v.col_zero_point) {
      g->epilogue.col_zero_point = static_cast<const int32_t*>(v.col_zero_point->data);
      g->epilogue.col_zero_point_scalar = v.col_zero_point->shape[0] == 1;
    }
  } else {
    detail::RowLayout al, bl;
    if (Status s = detail::row_layout(fn, v.a_name, v.a, 2, &al); !s.ok()) return s;
    if (Status s = detail::row_layout(fn, v.b_name, v.b, 2, &bl); !s.ok()) return s;
    const int64_t k = v.a.shape[v.a.ndim - 2] * format_traits(v.a_format).block_size;
    if (out) {
      if (Status s = detail::check_output(fn, *out, spec, v.a.device); !s.ok()) return s;
      g->c = out->data;
    }
    g->a = {v.a.data, v.a_format, blocked_rows(v.a, v.a_format), k, al.row_stride, {}, {}};
    g->b = {v.b.data, v.b_format, blocked_rows(v.b, v.b_format), k, bl.row_stride, {}, {}};
  }
  const int64_t m = g->a.rows, n = g->b.rows;
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
  if (v.row_scale) {
    g->epilogue.row_scale = static_cast<const float*>(v.row_scale->data);
    g->epilogue.row_scale_scalar = v.row_scale->shape[0] == 1;
  }
  if (v.col_scale) {
    g->epilogue.col_scale = static_cast<const float*>(v.col_scale->data);
    g->epilogue.col_scale_scalar = v.col_scale->shape[0] == 1;
  }
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

Status quantize(const QuantizeViews& v, const QuantizeOutputs& out, Stream stream) {
  QuantizeArgs a;
  if (Status s = to_args(v, &out.codes, &a); !s.ok()) return s;
  const char* fn = a.fn;
  if (format_traits(v.format).scale_place == ScalePlace::outside && !v.static_scales) {
    ResultSpec ss;
    if (Status s = scales_spec(v, &ss); !s.ok()) return s;
    if (!out.scales) return invalid(fn, "dynamic quantization needs a scales output");
    if (Status s = check_scales_view(fn, "scales", *out.scales, ss, DType::f32, v.x.device); !s.ok()) return s;
    if (!out.scales->writable) return invalid(fn, "the scales output must be writable");
    a.scales = static_cast<float*>(out.scales->data);
    if (v.asymmetric) {
      if (!out.zero_points) return invalid(fn, "asymmetric quantization needs a zero-points output");
      if (Status s = check_scales_view(fn, "zero_point", *out.zero_points, ss, DType::i32, v.x.device); !s.ok())
        return s;
      if (!out.zero_points->writable) return invalid(fn, "the zero-points output must be writable");
      a.zero_points = static_cast<int32_t*>(out.zero_points->data);
    }
  }
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
