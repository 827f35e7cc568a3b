// SPDX-License-Identifier: MIT
// validate.cpp: argument checks shared by every op and format (see validate.h).
#include "validate.h"

#include <cstdint>
#include <limits>

#include "int_formats.h"

namespace qg::detail {

namespace {

std::string num(int64_t v) { return std::to_string(v); }

Status check_device(const char* fn, Device device) {
  if (device.id < 0) return invalid(fn, "device id " + num(device.id) + " is negative");
  return {};
}

// rows x k in blocks of the format's block size: what every op shares.
Status check_rows_k(const char* fn, const char* what, const FormatTraits& t, int64_t rows, int64_t k) {
  if (rows < 0 || k < 0)
    return invalid(fn, std::string(what) + ": rows and K must be >= 0 (got rows=" + num(rows) + ", K=" + num(k) + ")");
  if (k % t.block_size != 0 && !t.pads_k)
    return invalid(fn, "K=" + num(k) + " is not a multiple of " + num(t.block_size) + ", the " + t.name +
                           " block size");
  if (rows % t.rows_per_block != 0)
    return invalid(fn, std::string(what) + ": " + num(rows) + " rows are not a multiple of " +
                           num(t.rows_per_block) + ", the rows of one " + t.name + " block");
  // The last byte addressed must be representable: rows * row bytes < 2^63.
  const int64_t rb = row_bytes(t, k);
  if (rows > 0 && rb > 0 && rows > std::numeric_limits<int64_t>::max() / 4 / rb)
    return Status(StatusCode::overflow, std::string(fn) + ": " + what + " of " + num(rows) + " rows x K=" +
                                            num(k) + " is too large to address");
  return {};
}

Status check_outside(const char* fn, const char* arg, const char* what, const OutsideScales& s,
                     const FormatTraits& t, bool allowed, const Operand& op) {
  if (s.data == nullptr && s.granularity == Granularity::none) return {};
  if (!allowed)
    return invalid(fn, std::string(arg) + " is " + t.name + ", which keeps no outside " + what +
                           "; pass none");
  if (s.data == nullptr) return invalid(fn, std::string(arg) + " " + what + " must not be null");
  const bool zp = std::string(what) == "zero points";
  if (zp ? (s.dtype != DType::i8 && s.dtype != DType::i32) : !is_float_dtype(s.dtype))
    return type_error(fn, std::string(arg) + " " + what + " must be " +
                              (zp ? "int8 or int32" : "float32, float16 or bfloat16") + ", got " + dtype_name(s.dtype));
  if (s.granularity != Granularity::group)
    return invalid(fn, std::string(arg) + " " + what + " on an operand must be group-wise (scales constant along K "
                           "are the epilogue's row_scale / col_scale)");
  if (s.granularity == Granularity::group) {
    if (s.group_size <= 0 || op.k % s.group_size != 0)
      return invalid(fn, std::string(arg) + " " + what + ": group_size=" + num(s.group_size) +
                             " must be positive and divide K=" + num(op.k));
    if (op.rows > 1 && s.row_stride < op.k / s.group_size)
      return invalid(fn, std::string(arg) + " " + what + ": row stride " + num(s.row_stride) +
                             " is less than the " + num(op.k / s.group_size) + " groups of a row");
  }
  return {};
}

Status check_operand(const char* fn, const char* arg, const Operand& op) {
  const FormatTraits& t = format_traits(op.format);
  if (Status s = check_rows_k(fn, arg, t, op.rows, op.k); !s.ok()) return s;
  if (Status s = check_outside(fn, arg, "scales", op.scales, t, t.scale_place == ScalePlace::outside, op); !s.ok())
    return s;
  if (Status s = check_outside(fn, arg, "zero points", op.zero_points, t, t.has_zero_point, op); !s.ok())
    return s;
  // A zero point belongs to its scale: every kernel reads both by one group index.
  if (op.zero_points.data && op.scales.data && op.zero_points.group_size != op.scales.group_size)
    return invalid(fn, std::string(arg) + " zero points: group_size=" + num(op.zero_points.group_size) +
                           " must equal the scales' group_size=" + num(op.scales.group_size));
  if (op.rows == 0 || op.k == 0) return {};
  if (op.data == nullptr) return invalid(fn, std::string(arg) + " must not be null");
  const int64_t rb = row_bytes(t, op.k);
  if (op.block_stride != 0 && op.block_stride != t.bytes_per_block && t.rows_per_block == 1) {
    // Blocks strided along K (a [K, N] matrix read as N rows): (row, block)
    // must map to distinct bytes, i.e. one stride steps over the other's extent.
    const int64_t nb = row_blocks(t, op.k);
    const bool by_row = op.rows <= 1 || op.row_stride >= (nb - 1) * op.block_stride + t.bytes_per_block;
    const bool by_block = nb <= 1 || op.block_stride >= (op.rows - 1) * op.row_stride + t.bytes_per_block;
    if (op.block_stride < 0 || op.row_stride < 0 || (!by_row && !by_block))
      return invalid(fn, std::string(arg) + ": row stride " + num(op.row_stride) + " and block stride " +
                             num(op.block_stride) + " bytes make its elements overlap; pass a contiguous array");
    return {};
  }
  if (t.rows_per_block > 1 && op.block_stride != 0 && op.block_stride != t.bytes_per_block)
    return invalid(fn, std::string(arg) + ": " + t.name + " blocks must be contiguous along K (block stride " +
                           num(t.bytes_per_block) + " bytes, got " + num(op.block_stride) + ")");
  if (stored_rows(t, op.rows) > 1 && op.row_stride < rb)
    return invalid(fn, std::string(arg) + " row stride " + num(op.row_stride) + " bytes is less than a row of " +
                           t.name + " blocks (" + num(rb) + " bytes for K=" + num(op.k) +
                           "); rows would overlap: pass row_stride >= " + num(rb));
  return {};
}


// Integer x integer GEMMs accumulate in int32: the largest K whose sum
// cannot overflow, from the formats' code ranges and the zero points.
int64_t int_k_limit(const GemmArgs& g) {
  const int64_t ra = max_abs_code(format_traits(g.a.format), g.epilogue.row_zero_point != nullptr);
  const int64_t rb = max_abs_code(format_traits(g.b.format), g.epilogue.col_zero_point != nullptr);
  return ((int64_t{1} << 31) - 1) / (ra * rb);
}

// Zero points a kernel subtracts from codes lie in the codes' range: the
// int32 K limit above counts on it, and a code written as a zero point must
// fit its storage. Read where the caller's memory is the host's (a device
// array would need a copy and a synchronisation per call: for those it is
// the caller's to hold, as qg's Python layer checks on the host).
Status check_zero_point_range(const char* fn, const char* what, const int32_t* zp, int64_t count, Format f,
                              Device device) {
  if (zp == nullptr || device.type != DeviceType::cpu) return {};
  const CodeRange c = code_range(f);
  for (int64_t i = 0; i < count; ++i)
    if (zp[i] < c.qmin || zp[i] > c.qmax)
      return invalid(fn, std::string(what) + "[" + num(i) + "]=" + num(zp[i]) + " is outside the code range [" +
                             num(c.qmin) + ", " + num(c.qmax) + "] of " + format_traits(f).name +
                             "; pass zero points in it");
  return {};
}

// A layout made for the CPU kernels from another format's rows (q4_0x16,
// rows_per_block > 1): a weight (operand a), on the host. Elsewhere no kernel
// takes it; the message says how to get the rows back.
Status check_repacked_weight(const char* fn, const GemmArgs& g) {
  if (format_traits(g.b.format).rows_per_block > 1)
    return invalid(fn, std::string("b is ") + format_traits(g.b.format).name +
                           ", a weight layout (operand a, the weight rows); pass the activations as q8_1");
  const FormatTraits& t = format_traits(g.a.format);
  if (t.rows_per_block > 1 && g.device.type != DeviceType::cpu)
    return invalid(fn, std::string(t.name) + " is the layout of qg's CPU kernels; for " + device_name(g.device) +
                           " pass the weight as q4_0 (qg.repack(w, \"q4_0\") on the host)");
  return {};
}

Status check_gemm_formats(const char* fn, const GemmArgs& g) {
  const bool ia = is_integer_format(g.a.format), ib = is_integer_format(g.b.format);
  const Epilogue& e = g.epilogue;
  if ((e.row_zero_point || e.col_zero_point) && !(ia && ib))
    return invalid(fn, "row / column zero points are for integer x integer GEMMs; a weight-only GEMM takes "
                       "group-wise zero points on its weight operand");
  if (g.c_dtype == DType::i32) {
    if (!(ia && ib))
      return type_error(fn, std::string("int32 output is for integer x integer GEMMs (") +
                                format_traits(g.a.format).name + " x " + format_traits(g.b.format).name +
                                "); pass out_dtype float32, float16 or bfloat16");
    if (e.alpha != 1.0f || e.row_scale || e.col_scale || e.beta != 0.0f || e.bias)
      return invalid(fn, "int32 output is the exact integer sum: scales, alpha, beta and bias are float "
                         "operations; pass out_dtype float32 (or float16, bfloat16) to apply them");
  }
  if (ia && ib) {
    if (Status s = check_zero_point_range(fn, "row zero point", e.row_zero_point,
                                          e.row_zero_point_scalar ? 1 : g.a.rows, g.a.format, g.device);
        !s.ok())
      return s;
    if (Status s = check_zero_point_range(fn, "column zero point", e.col_zero_point,
                                          e.col_zero_point_scalar ? 1 : g.b.rows, g.b.format, g.device);
        !s.ok())
      return s;
  }
  if (ia && ib && g.a.k > int_k_limit(g))
    return invalid(fn, "K=" + num(g.a.k) + " is past " + num(int_k_limit(g)) + ", the largest K whose " +
                           format_traits(g.a.format).name + " x " + format_traits(g.b.format).name +
                           (e.row_zero_point || e.col_zero_point ? " (with zero points)" : "") +
                           " sum is exact in int32; split K and add the partial results");
  if (g.a.scales.data && !is_float_format(g.b.format))
    return invalid(fn, "group-wise scales on a are for weight-only GEMMs (float activations b); for integer b "
                       "use per-row scales (row_scale)");
  if (is_integer_format(g.a.format) && is_float_format(g.b.format) && !g.a.scales.data)
    return invalid(fn, "a weight-only GEMM needs the weight's group-wise scales");
  return {};
}

}  // namespace

Span span_of(const void* p, int64_t rows, int64_t row_stride_bytes, int64_t row_bytes) {
  if (p == nullptr || rows <= 0 || row_bytes <= 0) return {};
  const uintptr_t lo = reinterpret_cast<uintptr_t>(p);
  return {lo, lo + static_cast<uintptr_t>((rows - 1) * row_stride_bytes + row_bytes)};
}
bool overlaps(Span a, Span b) { return a.lo < b.hi && b.lo < a.hi && a.hi > a.lo && b.hi > b.lo; }

Span operand_span(const Operand& op) {
  const FormatTraits& t = format_traits(op.format);
  if (op.block_stride != 0 && op.block_stride != t.bytes_per_block && op.rows > 0 && op.k > 0)
    return span_of(op.data, 1, 0,
                   (op.rows - 1) * op.row_stride + (row_blocks(t, op.k) - 1) * op.block_stride + t.bytes_per_block);
  return span_of(op.data, stored_rows(t, op.rows), op.row_stride, row_bytes(t, op.k));
}

std::string shape_string(const int64_t* shape, int ndim) {
  std::string s = "[";
  for (int i = 0; i < ndim; ++i) s += (i ? ", " : "") + num(shape[i]);
  return s + "]";
}

std::string shape_string(const TensorView& view) {
  return shape_string(view.shape, view.ndim < 0 ? 0 : (view.ndim > kMaxDims ? kMaxDims : view.ndim));
}

Status check_gemm_args(const GemmArgs& g, bool need_output) {
  const char* fn = g.fn ? g.fn : "qg.gemm";
  if (Status s = check_device(fn, g.device); !s.ok()) return s;
  if (g.a.k != g.b.k)
    return invalid(fn, "a has K=" + num(g.a.k) + " but b has K=" + num(g.b.k) + "; both operands run along one K");
  if (Status s = check_operand(fn, "a", g.a); !s.ok()) return s;
  if (Status s = check_operand(fn, "b", g.b); !s.ok()) return s;
  if (Status s = check_repacked_weight(fn, g); !s.ok()) return s;
  if (!is_float_dtype(g.c_dtype) && g.c_dtype != DType::i32)
    return type_error(fn, std::string("the output dtype must be float32, float16, bfloat16 or int32, got ") +
                              dtype_name(g.c_dtype));
  if (Status s = check_gemm_formats(fn, g); !s.ok()) return s;
  const Epilogue& e = g.epilogue;
  if (e.bias && !is_float_dtype(e.bias_dtype))
    return type_error(fn, std::string("bias must be float32, float16 or bfloat16, got ") + dtype_name(e.bias_dtype));
  const int64_t m = g.a.rows, n = g.b.rows;
  if (m == 0 || n == 0 || !need_output) return {};
  if (g.c == nullptr) return invalid(fn, "the output pointer c must not be null");
  // Distinct (m, n) must land on distinct elements: one of the two strides
  // steps over the whole extent of the other.
  const bool rows_ok = g.ldc_n >= 1 && (m == 1 || g.ldc >= (n - 1) * g.ldc_n + 1);
  const bool cols_ok = g.ldc >= 1 && (n == 1 || g.ldc_n >= (m - 1) * g.ldc + 1);
  if (!rows_ok && !cols_ok)
    return invalid(fn, "ldc=" + num(g.ldc) + ", ldc_n=" + num(g.ldc_n) + " make output elements overlap for M=" +
                           num(m) + ", N=" + num(n) + "; use ldc >= N with ldc_n = 1 (row-major C)");
  const int64_t esize = dtype_size(g.c_dtype);
  const int64_t extent = ((m - 1) * g.ldc + (n - 1) * g.ldc_n + 1) * esize;
  const Span c = span_of(g.c, 1, 0, extent);
  if (overlaps(c, operand_span(g.a)) || overlaps(c, operand_span(g.b)) ||
      overlaps(c, span_of(e.bias, 1, 0, m * dtype_size(e.bias_dtype))) ||
      overlaps(c, span_of(e.row_scale, 1, 0, (e.row_scale_scalar ? 1 : m) * 4)) ||
      overlaps(c, span_of(e.col_scale, 1, 0, (e.col_scale_scalar ? 1 : n) * 4)))
    return invalid(fn, "the output overlaps an input; pass a separate out array");
  return {};
}

namespace {
// Scales of formats kept outside the codes: a scope per tensor, row or group.
int64_t scale_count(Granularity g, int64_t rows, int64_t k, int64_t group_size) {
  if (g == Granularity::tensor) return 1;
  if (g == Granularity::row) return rows;
  return group_size > 0 ? rows * (k / group_size) : 0;
}

Status check_scopes(const char* fn, const FormatTraits& t, Granularity g, int64_t group_size, int64_t k) {
  if (t.scale_place != ScalePlace::outside) {
    if (g != Granularity::none)
      return invalid(fn, std::string(t.name) + " keeps its scales in its blocks; pass no granularity");
    return {};
  }
  if (g == Granularity::none)
    return invalid(fn, std::string(t.name) + " keeps its scales outside the codes: pass a granularity "
                           "(tensor, channel or group)");
  if (g == Granularity::group && (group_size <= 0 || k % group_size != 0 || group_size % t.block_size != 0))
    return invalid(fn, "group_size=" + num(group_size) + " must be positive, divide K=" + num(k) +
                           " and be a multiple of " + num(t.block_size) + " (" + t.name + " codes per storage unit)");
  return {};
}
}  // namespace

Status check_quantize_args(const QuantizeArgs& a, bool need_output) {
  const FormatTraits& t = format_traits(a.format);
  const char* fn = a.fn ? a.fn : t.quantize_fn;
  if (Status s = check_not_repacked(fn, t, "quantize to"); !s.ok()) return s;
  if (!t.quantizable) return invalid(fn, std::string("qg cannot quantize to ") + t.name);
  if (!is_float_dtype(a.x_dtype))
    return type_error(fn, std::string("x must be float32, float16 or bfloat16, got ") + dtype_name(a.x_dtype));
  if (Status s = check_rows_k(fn, "x", t, a.rows, a.k); !s.ok()) return s;
  if (Status s = check_device(fn, a.device); !s.ok()) return s;
  if (Status s = check_scopes(fn, t, a.granularity, a.group_size, a.k); !s.ok()) return s;
  const bool outside = t.scale_place == ScalePlace::outside;
  if (outside && (a.static_zero_points || a.zero_points) && !t.has_zero_point)
    return invalid(fn, std::string(t.name) + " is symmetric: it takes no zero points");
  if (outside && a.static_zero_points && !a.static_scales)
    return invalid(fn, "static zero points need static scales");
  if (outside && a.static_scales && (a.scales || a.zero_points))
    return invalid(fn, "pass either static scales (read) or scale outputs (written), not both");
  if (a.rows == 0 || a.k == 0) return {};
  if (outside)
    if (Status s = check_zero_point_range(fn, "static zero point", a.static_zero_points,
                                          scale_count(a.granularity, a.rows, a.k, a.group_size), a.format, a.device);
        !s.ok())
      return s;
  const int64_t rb = row_bytes(t, a.k);
  if (a.x == nullptr) return invalid(fn, "x must not be null");
  if (outside && !a.static_scales && need_output && !a.scales)
    return invalid(fn, "dynamic quantization needs somewhere to write its scales (scales must not be null)");
  // A stride of 0 (every row reads the same values) is allowed for inputs.
  if (a.rows > 1 && a.x_row_stride < a.k && a.x_row_stride != 0)
    return invalid(fn, "x row stride " + num(a.x_row_stride) + " is less than K=" + num(a.k) +
                           "; pass x_row_stride >= K (or 0 to repeat one row)");
  if (!need_output) return {};
  if (a.y == nullptr) return invalid(fn, "y must not be null");
  if (a.rows > 1 && a.y_row_stride < rb)
    return invalid(fn, "y row stride " + num(a.y_row_stride) + " bytes is less than a row of blocks (" + num(rb) +
                           " bytes): output rows would overlap");
  const int64_t xsize = dtype_size(a.x_dtype);
  const Span xs = span_of(a.x, a.rows, a.x_row_stride * xsize, a.k * xsize);
  const Span ys = span_of(a.y, a.rows, a.y_row_stride, rb);
  if (overlaps(xs, ys)) return invalid(fn, "the output overlaps the input x; pass a separate out array");
  const int64_t ns = scale_count(a.granularity, a.rows, a.k, a.group_size);
  const Span ss = span_of(a.scales, 1, 0, ns * 4), zs = span_of(a.zero_points, 1, 0, ns * 4);
  if (overlaps(ss, xs) || overlaps(ss, ys) || overlaps(zs, xs) || overlaps(zs, ys) || overlaps(ss, zs))
    return invalid(fn, "the scales or zero points overlap x or the codes; pass separate arrays");
  return {};
}

Status check_dequantize_args(const DequantizeArgs& a, bool need_output) {
  const FormatTraits& t = format_traits(a.format);
  const char* fn = a.fn ? a.fn : t.dequantize_fn;
  if (Status s = check_not_repacked(fn, t, "dequantize"); !s.ok()) return s;
  if (Status s = check_rows_k(fn, "xq", t, a.rows, a.k); !s.ok()) return s;
  if (Status s = check_device(fn, a.device); !s.ok()) return s;
  if (Status s = check_scopes(fn, t, a.granularity, a.group_size, a.k); !s.ok()) return s;
  if (a.zero_points && !t.has_zero_point)
    return invalid(fn, std::string(t.name) + " is symmetric: it takes no zero points");
  if (a.rows == 0 || a.k == 0) return {};
  if (t.scale_place == ScalePlace::outside && !a.scales) return invalid(fn, "scales must not be null");
  if (t.scale_place == ScalePlace::outside)
    if (Status s = check_zero_point_range(fn, "zero point", a.zero_points,
                                          scale_count(a.granularity, a.rows, a.k, a.group_size), a.format, a.device);
        !s.ok())
      return s;
  const int64_t rb = row_bytes(t, a.k);
  if (a.xq == nullptr) return invalid(fn, "xq must not be null");
  if (a.rows > 1 && a.xq_row_stride < rb && a.xq_row_stride != 0)
    return invalid(fn, "xq row stride " + num(a.xq_row_stride) + " bytes is less than a row of blocks (" +
                           num(rb) + " bytes); pass xq_row_stride >= " + num(rb) + " (or 0 to repeat one row)");
  if (!need_output) return {};
  if (a.y == nullptr) return invalid(fn, "y must not be null");
  if (a.rows > 1 && a.y_row_stride < a.k)
    return invalid(fn, "y row stride " + num(a.y_row_stride) + " is less than K=" + num(a.k) +
                           ": output rows would overlap");
  if (overlaps(span_of(a.xq, a.rows, a.xq_row_stride, rb), span_of(a.y, a.rows, a.y_row_stride * 4, a.k * 4)))
    return invalid(fn, "the output overlaps the input xq; pass a separate out array");
  return {};
}

Status check_view(const char* fn, const char* arg, const TensorView& v) {
  if (v.ndim < 0 || v.ndim > kMaxDims)
    return invalid(fn, std::string(arg) + " has " + num(v.ndim) + " dimensions; qg takes 0 to " + num(kMaxDims));
  for (int d = 0; d < v.ndim; ++d)
    if (v.shape[d] < 0)
      return invalid(fn, std::string(arg) + " has a negative size in its shape " + shape_string(v));
  return {};
}

Status check_not_repacked(const char* fn, const FormatTraits& t, const char* what) {
  if (t.rows_per_block > 1)
    return invalid(fn, std::string("qg cannot ") + what + " " + t.name + " directly; it is q4_0 repacked for the CPU "
                           "kernels: go through q4_0 (qg.repack converts both ways)");
  return {};
}

Status check_packed_view(const char* fn, const char* arg, const TensorView& v, Format format) {
  const FormatTraits& t = format_traits(format);
  if (v.dtype != DType::u8)
    return type_error(fn, std::string(arg) + " must be uint8 (packed " + t.name + " blocks), got " +
                              dtype_name(v.dtype));
  if (Status s = check_view(fn, arg, v); !s.ok()) return s;
  if (v.ndim < 2)
    return invalid(fn, std::string(arg) + " must have shape [..., K//" + num(t.block_size) + ", " +
                           num(t.bytes_per_block) + "], got a " + num(v.ndim) + "-d array of shape " +
                           shape_string(v));
  if (v.shape[v.ndim - 1] != t.bytes_per_block)
    return invalid(fn, std::string(arg) + ".shape[-1] must be " + num(t.bytes_per_block) + " (bytes per " + t.name +
                           " block), got " + num(v.shape[v.ndim - 1]) + " (shape " + shape_string(v) + ")");
  // The rows it holds (the leading dims times rows_per_block) must be an int64.
  int64_t rows = t.rows_per_block;
  for (int d = 0; d < v.ndim - 2; ++d)
    if (v.shape[d] >= 0 && __builtin_mul_overflow(rows, v.shape[d], &rows))
      return Status(StatusCode::overflow, std::string(fn) + ": " + arg + " of shape " + shape_string(v) +
                                              " holds more rows than a 64-bit index can address");
  return {};
}

Status row_layout(const char* fn, const char* arg, const TensorView& v, int inner, RowLayout* out) {
  if (Status s = check_view(fn, arg, v); !s.ok()) return s;
  const bool empty = v.numel() == 0;
  // inner dims: C-contiguous among themselves
  int64_t expected = 1;
  for (int d = v.ndim - 1; d >= v.ndim - inner; --d) {
    if (v.shape[d] != 1 && v.strides[d] != expected && !empty)
      return invalid(fn, std::string(arg) + " must be contiguous in its last " + num(inner) +
                             " dimension(s) (shape " + shape_string(v) + "); pass a contiguous copy");
    expected *= v.shape[d];
  }
  // leading dims: flattened to rows, which must then share one stride
  int64_t rows = 1, row_stride = expected;
  int64_t prev_stride = 0, prev_size = 0;  // innermost non-1 leading dim seen so far
  for (int d = v.ndim - inner - 1; d >= 0; --d) {
    rows *= v.shape[d];
    if (v.shape[d] == 1) continue;
    if (prev_size == 0) {
      row_stride = v.strides[d];
    } else if (v.strides[d] != prev_stride * prev_size && !empty) {
      return invalid(fn, std::string(arg) + " has batch dimensions that cannot be flattened to rows of one stride "
                             "(shape " + shape_string(v) + "); pass a contiguous copy");
    }
    prev_stride = v.strides[d];
    prev_size = v.shape[d];
  }
  if (!empty && rows > 1 && row_stride < 0)
    return invalid(fn, std::string(arg) + " has a negative stride (a flipped view); pass a contiguous copy");
  if (!empty && rows > 1 && row_stride < expected)
    return invalid(fn, std::string(arg) + " has rows that share memory (stride " + num(row_stride) +
                           " between rows of " + num(expected) +
                           " elements: a broadcast or expanded view); pass a contiguous copy");
  out->rows = rows;
  out->row_stride = row_stride;
  return {};
}

Status check_output(const char* fn, const TensorView& out, const ResultSpec& spec, Device device) {
  if (Status s = check_view(fn, "out", out); !s.ok()) return s;
  if (out.dtype != spec.dtype)
    return type_error(fn, std::string("out must be ") + dtype_name(spec.dtype) + ", got " + dtype_name(out.dtype));
  bool same = out.ndim == spec.ndim;
  for (int d = 0; same && d < spec.ndim; ++d) same = out.shape[d] == spec.shape[d];
  if (!same)
    return invalid(fn, "out has shape " + shape_string(out) + " but the result has shape " +
                           shape_string(spec.shape, spec.ndim));
  if (out.device != device)
    return invalid(fn, "out is on " + device_name(out.device) + " but the inputs are on " + device_name(device));
  if (!out.writable) return invalid(fn, "out must be writable (it is a read-only array)");
  if (!out.is_contiguous()) return invalid(fn, "out must be C-contiguous");
  return {};
}

}  // namespace qg::detail
