// SPDX-License-Identifier: MIT
// fast_int_ops.cpp: single-crossing entries of the integer family's public
// functions (qg.int8_matmul, qg.linear_int4, qg.quantize_tensor) and of
// QuantizedLinear(int8)'s forward (qg::linear_int8), for tensors that publish
// the DLPack C exchange API.
//
// Each public function has a plan (qg/_int.py) that checks its arguments,
// converts what needs converting (half-precision scales, Python zero points,
// a strided view copied, ...) and maps the call onto one
// core op, costing tens of microseconds of Python per call. The entries here
// take the plain case as given, the one in which that plan would check and
// pass on the arguments unchanged: Python numbers or float32 vectors for
// scales, no zero points, C-contiguous tensors of one framework on one device.
// For anything else they return None before doing anything, and the plan takes
// the call, with its checks and messages. Past that point the core checks, as
// on the plan's path, with the same messages.
#include "fast_path.h"

namespace qg::python {

namespace {

using fast::float_format;
using fast::plain_optional;
using fast::plain_tensor;

bool is_str(nb::handle h, const char* s) {
  return PyUnicode_CheckExact(h.ptr()) && PyUnicode_CompareWithASCIIString(h.ptr(), s) == 0;
}

// A Python int (not bool) that fits int64.
bool plain_int(nb::handle h, int64_t* out) {
  if (!PyLong_CheckExact(h.ptr())) return false;
  int overflow = 0;
  *out = PyLong_AsLongLongAndOverflow(h.ptr(), &overflow);
  if (overflow == 0 && !(*out == -1 && PyErr_Occurred())) return true;
  PyErr_Clear();
  return false;
}

// A Python float or int (not bool) as the plan's float(value) reads it.
bool plain_number(nb::handle h, double* out) {
  if (PyFloat_CheckExact(h.ptr())) {
    *out = PyFloat_AS_DOUBLE(h.ptr());
    return true;
  }
  if (!PyLong_CheckExact(h.ptr())) return false;
  *out = PyLong_AsDouble(h.ptr());
  if (!(*out == -1.0 && PyErr_Occurred())) return true;
  PyErr_Clear();  // too large for a float: the plan raises
  return false;
}

// activation None, "none" or "relu" -> 0 or 1; -1: not plain.
int plain_activation(nb::handle h) {
  if (h.is_none() || is_str(h, "none")) return 0;
  return is_str(h, "relu") ? 1 : -1;
}

// A scale constant along K as the plan's vector_scale passes it on: a Python
// number (-> *factor) or a float32 vector [1] or [length] on the operands'
// device (-> *v, *present; the plan converts other dtypes, reshapes other
// shapes and refuses other devices).
bool plain_scale(nb::handle obj, const char* fn, const char* arg, const dlx::Api* api, Device device,
                 int64_t length, double* factor, TensorView* v, bool* present) {
  *present = false;
  if (plain_number(obj, factor)) return true;
  *factor = 1.0;
  if (!plain_tensor(obj, fn, arg, &api, v) || v->device != device || v->dtype != DType::f32 || v->ndim != 1 ||
      (v->shape[0] != 1 && v->shape[0] != length))
    return false;
  *present = true;
  return true;
}

// out_dtype as a name -> the bindings' id (0 float32, 1 float16, 2 bfloat16,
// 3 int32); -1: not plain (torch / NumPy dtype objects are the plan's to read).
int plain_out_dtype(nb::handle h) {
  static const char* const names[] = {"float32", "float16", "bfloat16", "int32"};
  for (int i = 0; i < 4; ++i)
    if (is_str(h, names[i])) return i;
  return -1;
}

// Runs a GEMM whose [rows, cols] result is returned as [*lead, cols], lead
// the leading dims of `rows_of` (the input whose rows are the result's rows;
// the plan's reshape, here without a copy or a view of one).
nb::object gemm_rows(const dlx::Api* api, const char* fn, const GemmViews& v, const TensorView& rows_of) {
  ResultSpec spec;
  throw_if_error(result_spec(v, &spec));
  const Device device = v.a.device;
  TensorView out;
  nb::object result = fast::allocate(api, fn, fast::rows_shape(spec, rows_of), device, &out);
  out.ndim = 2;  // the same bytes, as the core's [rows, cols]
  out.shape[0] = spec.shape[0];
  out.shape[1] = spec.shape[1];
  out.strides[0] = spec.shape[1];
  out.strides[1] = 1;
  const Stream stream = fast::current_stream(api, device);
  throw_if_error(run_released(device, [&] { return gemm(v, out, stream); }));
  return result;
}

nb::object int8_matmul(nb::handle A, nb::handle B, nb::handle scale_a, nb::handle scale_b, nb::handle scale_c,
                       nb::handle zero_point_a, nb::handle zero_point_b, nb::handle bias, nb::handle activation,
                       nb::handle out_dtype, nb::handle b_layout, const char* fn, const char* a_name,
                       const char* b_name) {
  const int relu = plain_activation(activation), dtype = plain_out_dtype(out_dtype);
  const bool kn = is_str(b_layout, "kn");
  if (relu < 0 || dtype < 0 || !(kn || is_str(b_layout, "nk"))) return nb::none();
  // The core's a is B (N rows along K), its b is A: C^T = B . A^T, written transposed.
  const dlx::Api *api = nullptr, *api_b = nullptr;
  TensorView a, b;
  Status ignored;
  if (!plain_tensor(A, fn, "A", &api, &b) || b.ndim < 1 || !fast::read_input(B, fn, "B", &api_b, &a, &ignored) ||
      api_b != api || a.ndim != 2 || a.device != b.device)
    return nb::none();
  if (kn) {  // B [K, N] is read through its transpose, [N, K]
    std::swap(a.shape[0], a.shape[1]);
    std::swap(a.strides[0], a.strides[1]);
  }
  // Plain when those rows are K-contiguous, as for the transposed view of an
  // [N, K] array (W.T). A B stored [K, N] itself goes to the core as the
  // K-major operand it is: the core repacks it (cpu_i8_repacked,
  // cuda_i8_repacked).
  bool a_k_major = false;
  if (!a.is_contiguous()) {
    std::swap(a.shape[0], a.shape[1]);
    std::swap(a.strides[0], a.strides[1]);
    if (!kn || !a.is_contiguous()) return nb::none();
    a_k_major = true;
  }
  const int64_t n = a.shape[a_k_major ? 1 : 0];  // B's columns, the result's
  int64_t m = 1;  // rows of A, the length of a per-row scale_a
  for (int d = 0; d + 1 < b.ndim; ++d)
    if (__builtin_mul_overflow(m, b.shape[d], &m)) return nb::none();
  GemmExtras e;
  double fa, fb, fc;
  if (!plain_scale(scale_a, fn, "scale_a", api, b.device, m, &fa, &e.col_scale, &e.has_col_scale) ||
      !plain_scale(scale_b, fn, "scale_b", api, b.device, n, &fb, &e.row_scale, &e.has_row_scale) ||
      !plain_number(scale_c, &fc))
    return nb::none();
  int64_t zp;
  for (nb::handle z : {zero_point_a, zero_point_b})
    if (!z.is_none() && !(plain_int(z, &zp) && zp == 0)) return nb::none();  // 0 is no zero point
  TensorView biasv;
  bool has_bias;
  if (!plain_optional(bias, fn, "bias", api, &biasv, &has_bias)) return nb::none();
  if (dtype == 3) {  // the exact integer sum: scales checked, not applied; a bias the plan refuses
    if (has_bias) return nb::none();
    e.has_row_scale = e.has_col_scale = false;
    fa = fb = fc = 1.0;
  }
  e.alpha = static_cast<float>(fa * fb * fc);
  e.activation = relu;
  e.a_k_major = a_k_major;
  GemmViews v =
      gemm_views(static_cast<int>(Format::i8), static_cast<int>(Format::i8), a, b, -1, -1, -1, fn, a_name, b_name);
  set_epilogue(&v, has_bias ? &biasv : nullptr, dtype, true);
  set_extras(&v, e);
  return gemm_rows(api, fn, v, b);
}

nb::object linear_int4(nb::handle x, nb::handle weight_q, nb::handle scales, nb::handle zero_points,
                       nb::handle group_size, nb::handle bias, nb::handle activation, const char* fn) {
  const int relu = plain_activation(activation);
  int64_t gs;
  if (relu < 0 || !plain_int(group_size, &gs) || gs <= 0 || !zero_points.is_none()) return nb::none();
  const dlx::Api* api = nullptr;
  TensorView xv, wv, sv, biasv;
  Format x_fmt;
  int dtype;  // the result's: x's
  if (!plain_tensor(x, fn, "x", &api, &xv) || xv.ndim < 1 || !float_format(xv.dtype, &x_fmt, &dtype))
    return nb::none();
  bool has_s, has_bias;
  if (!plain_tensor(weight_q, fn, "weight_q", &api, &wv) || !plain_optional(scales, fn, "scales", api, &sv, &has_s) ||
      !plain_optional(bias, fn, "bias", api, &biasv, &has_bias))
    return nb::none();
  GemmExtras e;
  e.a_scales = sv;
  e.has_a_scales = has_s;
  e.group_size = gs;
  e.activation = relu;
  GemmViews v = gemm_views(static_cast<int>(Format::i4), static_cast<int>(x_fmt), wv, xv, -1, -1,
                           xv.shape[xv.ndim - 1], fn, "weight_q", "x");
  set_epilogue(&v, has_bias ? &biasv : nullptr, dtype, true);
  set_extras(&v, e);
  return gemm_rows(api, fn, v, xv);
}

nb::object quantize_tensor(nb::handle x, nb::handle bits, nb::handle scheme, nb::handle granularity,
                           nb::handle axis, nb::handle group_size, nb::handle scale, nb::handle zero_point,
                           nb::handle packing) {
  const char* fn = "qg.quantize_tensor";
  int64_t nbits;
  if (!plain_int(bits, &nbits) || !scale.is_none() || !zero_point.is_none()) return nb::none();
  const bool words = is_str(packing, "int32");
  if (!(words || is_str(packing, "uint8")) || (nbits != 4 && (nbits != 8 || words))) return nb::none();
  const Format fmt = nbits == 8 ? Format::i8 : words ? Format::i4x8 : Format::i4;
  const bool asym = is_str(scheme, "asymmetric");
  if (!(asym || is_str(scheme, "symmetric")) || (asym && words)) return nb::none();
  const dlx::Api* api = nullptr;
  QuantizeViews v{fmt, {}, Q8_1Convention::reference, fn};
  if (!plain_tensor(x, fn, "x", &api, &v.x) || v.x.ndim < 1 || v.x.numel() == 0) return nb::none();
  int64_t n;
  if (is_str(granularity, "tensor") && group_size.is_none()) {
    v.granularity = Granularity::tensor;
  } else if (is_str(granularity, "channel") && group_size.is_none()) {
    // One scale per row of a 2-D x (axis 0); other axes and shapes move the
    // axis first, which the plan does.
    if (v.x.ndim != 2 || !plain_int(axis, &n) || (n != 0 && n != -2)) return nb::none();
    v.granularity = Granularity::row;
  } else if (is_str(granularity, "group") && plain_int(group_size, &n) && n > 0 &&
             v.x.shape[v.x.ndim - 1] % n == 0) {
    v.granularity = Granularity::group;
    v.group_size = n;
  } else {
    return nb::none();
  }
  v.asymmetric = asym;
  nb::tuple r = fast::quantize_int(api, fn, v);
  return asym ? r : nb::make_tuple(r[0], r[1]);
}

// QuantizedLinear(int8)'s forward in one core call (qg::linear_int8): x
// quantized per token into two workspaces the caller's framework allocates
// (the codes, the scales), then the int8 GEMM, whose epilogue applies both
// scales, the bias and the relu and writes y [..., M] in x's dtype. The plain
// case only: x a float tensor of at least one dimension; weight_q int8 [M, K],
// weight_scale float32 [M] and bias (or None) C-contiguous tensors of x's
// framework. Otherwise None, and the module's two steps take the call.
nb::object linear_int8(nb::handle x, nb::handle weight_q, nb::handle weight_scale, nb::handle bias, const char* fn,
                       bool relu) {
  const dlx::Api* api = nullptr;
  TensorView xv, wv, sv, biasv;
  Format x_fmt;
  int dtype;  // the result's: x's
  bool has_bias;
  if (!plain_tensor(x, fn, "x", &api, &xv) || xv.ndim < 1 || !float_format(xv.dtype, &x_fmt, &dtype) ||
      !plain_tensor(weight_q, fn, "weight_q", &api, &wv) || wv.dtype != DType::i8 || wv.ndim != 2 ||
      !plain_tensor(weight_scale, fn, "weight_scale", &api, &sv) || sv.dtype != DType::f32 || sv.ndim != 1 ||
      sv.shape[0] != wv.shape[0] || !plain_optional(bias, fn, "bias", api, &biasv, &has_bias) ||
      wv.device != xv.device || sv.device != xv.device || (has_bias && biasv.device != xv.device))
    return nb::none();
  const Device device = xv.device;
  QuantizeViews q{Format::i8, xv, Q8_1Convention::reference, fn};
  q.granularity = Granularity::row;
  ResultSpec codes_spec, scales_spec_, spec;
  throw_if_error(result_spec(q, &codes_spec));
  throw_if_error(scales_spec(q, &scales_spec_));
  // Dropped on return, after both kernels are enqueued on the framework's
  // current stream: its allocator reuses the memory in stream order.
  TensorView codes, scales;
  const nb::object codes_obj = fast::allocate(api, fn, codes_spec, device, &codes);
  const nb::object scales_obj = fast::allocate(api, fn, scales_spec_, device, &scales);
  GemmViews v = gemm_views(static_cast<int>(Format::i8), static_cast<int>(Format::i8), wv, codes, -1, -1, -1, fn,
                           "weight_q", "x");
  set_epilogue(&v, has_bias ? &biasv : nullptr, dtype, true);
  throw_if_error(result_spec(v, &spec));  // [N, M]
  TensorView y;
  nb::object result = fast::allocate(api, fn, fast::rows_shape(spec, xv), device, &y);
  LinearInt8Args a;  // every tensor C-contiguous
  fast::fill_linear(&a, xv, spec, y, v.out_dtype, has_bias ? &biasv : nullptr, relu, fn);
  a.x_codes_workspace = codes.data;
  a.x_scales_workspace = static_cast<float*>(scales.data);
  a.weight_q = wv.data;
  a.weight_row_stride = a.k;
  a.weight_scale = static_cast<const float*>(sv.data);
  const Stream stream = fast::current_stream(api, device);
  throw_if_error(run_released(device, [&] { return qg::linear_int8(a, stream); }));
  return result;
}

}  // namespace

// fn and the operand names (what the core's messages call them) are the
// public function's unless a caller that makes the same core call under its
// own name (qg.torch.QuantizedLinear) passes its own.
void bind_fast_int_ops(nb::module_& m) {
  m.def("fast_int8_matmul", &int8_matmul, "A"_a.none(), "B"_a.none(), "scale_a"_a.none(), "scale_b"_a.none(),
        "scale_c"_a.none(), "zero_point_a"_a.none(), "zero_point_b"_a.none(), "bias"_a.none(),
        "activation"_a.none(), "out_dtype"_a.none(), "b_layout"_a.none(), "fn"_a = "qg.int8_matmul",
        "a_name"_a = "B", "b_name"_a = "A");
  m.def("fast_linear_int4", &linear_int4, "x"_a.none(), "weight_q"_a.none(), "scales"_a.none(),
        "zero_points"_a.none(), "group_size"_a.none(), "bias"_a.none(), "activation"_a.none(),
        "fn"_a = "qg.linear_int4");
  m.def("fast_linear_int8", &linear_int8, "x"_a.none(), "weight_q"_a.none(), "weight_scale"_a.none(),
        "bias"_a.none(), "fn"_a = "qg.torch.QuantizedLinear", "relu"_a = false);
  m.def("fast_quantize_tensor", &quantize_tensor, "x"_a.none(), "bits"_a.none(), "scheme"_a.none(),
        "granularity"_a.none(), "axis"_a.none(), "group_size"_a.none(), "scale"_a.none(), "zero_point"_a.none(),
        "packing"_a.none());
}

}  // namespace qg::python
