// SPDX-License-Identifier: MIT
// fast_ops.cpp: the single-crossing path for frameworks that publish the
// DLPack C exchange API (torch >= 2.10). One call reads the inputs' metadata,
// validates, sizes and allocates the result with the caller's framework,
// finds the caller's current stream and launches: no DLPack capsules, no
// Python-side allocation or stream lookup. Each function returns None when
// the inputs are not such tensors, and the caller takes the generic path.
// Checks and messages are the core's, identical on both paths.
#include <string>

#include "fast_path.h"

namespace qg::python {

namespace fast {

bool read_input(nb::handle obj, const char* fn, const char* arg, const dlx::Api** api, TensorView* v, Status* error) {
  const dlx::Api* a = dlx::api_for(Py_TYPE(obj.ptr()));
  if (a == nullptr || a->dltensor_from_py_object_no_sync == nullptr) return false;
  dlx::Tensor t;
  if (a->dltensor_from_py_object_no_sync(obj.ptr(), &t) != 0) {
    PyErr_Clear();
    return false;
  }
  if (!to_view(t, fn, arg, v, error)) return false;
  v->writable = false;
  if (api) *api = a;
  return true;
}

bool import_input(nb::handle obj, const char* fn, const char* arg, const dlx::Api** api, TensorView* v) {
  Status err;
  if (read_input(obj, fn, arg, api, v, &err)) return true;
  throw_if_error(err);
  return false;
}

bool of_framework(nb::handle obj, const dlx::Api* api) { return dlx::api_for(Py_TYPE(obj.ptr())) == api; }

bool import_optional(nb::handle obj, const char* fn, const char* arg, const dlx::Api* api, TensorView* v,
                     bool* present) {
  *present = false;
  if (obj.is_none()) return true;
  if (!of_framework(obj, api)) return false;  // read by nothing: the generic path names the mix
  if (!import_input(obj, fn, arg, nullptr, v) || !v->is_contiguous()) return false;
  *present = true;
  return true;
}

bool plain_tensor(nb::handle obj, const char* fn, const char* arg, const dlx::Api** api, TensorView* v) {
  const dlx::Api* a;
  Status ignored;
  if (!read_input(obj, fn, arg, &a, v, &ignored) || !v->is_contiguous()) return false;
  if (*api == nullptr) *api = a;
  return a == *api;
}

bool plain_optional(nb::handle obj, const char* fn, const char* arg, const dlx::Api* api, TensorView* v,
                    bool* present) {
  *present = !obj.is_none();
  return !*present || plain_tensor(obj, fn, arg, &api, v);
}

bool float_format(DType d, Format* fmt, int* dtype) {
  switch (d) {
    case DType::f32: *fmt = Format::f32; *dtype = 0; return true;
    case DType::f16: *fmt = Format::f16; *dtype = 1; return true;
    case DType::bf16: *fmt = Format::bf16; *dtype = 2; return true;
    default: return false;
  }
}

namespace {

void record_error(void* ctx, const char* kind, const char* message) {
  *static_cast<std::string*>(ctx) = std::string(kind ? kind : "Error") + ": " + (message ? message : "");
}

dlx::DataType dl_dtype(DType d) {
  switch (d) {
    case DType::u8: return {1, 8, 1};
    case DType::i8: return {0, 8, 1};
    case DType::i32: return {0, 32, 1};
    case DType::f16: return {2, 16, 1};
    case DType::bf16: return {4, 16, 1};
    default: return {2, 32, 1};
  }
}

}  // namespace

nb::object allocate(const dlx::Api* api, const char* fn, const ResultSpec& spec, Device device, TensorView* out) {
  ResultSpec shape = spec;  // the prototype wants a mutable pointer
  dlx::Tensor proto{};
  proto.device = {device.type == DeviceType::cuda ? dlx::kCUDA : dlx::kCPU, device.id};
  proto.ndim = spec.ndim;
  proto.dtype = dl_dtype(spec.dtype);
  proto.shape = shape.shape;
  dlx::ManagedTensor* mt = nullptr;
  std::string error;
  if (api->managed_tensor_allocator(&proto, &mt, &error, record_error) != 0 || mt == nullptr) {
    if (PyErr_Occurred()) throw nb::python_error();  // the framework's own exception (NumPy's, as it words it)
    throw_if_error(Status(StatusCode::out_of_memory,
                          std::string(fn) + ": could not allocate the result on " + device_name(device) + " (" + error + ")"));
  }
  Status ignored;
  to_view(mt->dl_tensor, fn, "out", out, &ignored);  // read before ownership moves to the framework
  void* obj = nullptr;
  if (api->managed_tensor_to_py_object_no_sync(mt, &obj) != 0 || obj == nullptr) throw nb::python_error();
  return nb::steal(static_cast<PyObject*>(obj));
}

ResultSpec rows_shape(const ResultSpec& spec, const TensorView& rows_of) {
  if (rows_of.ndim == 2) return spec;
  ResultSpec shape = spec;
  shape.ndim = 0;
  for (int d = 0; d + 1 < rows_of.ndim; ++d) shape.shape[shape.ndim++] = rows_of.shape[d];
  shape.shape[shape.ndim++] = spec.shape[1];
  return shape;
}

Stream current_stream(const dlx::Api* api, Device device) {
  if (device.type != DeviceType::cuda || api->current_work_stream == nullptr) return nullptr;
  void* s = nullptr;
  if (api->current_work_stream(dlx::kCUDA, device.id, &s) != 0) throw nb::python_error();
  return s;
}

nb::tuple quantize_int(const dlx::Api* api, const char* fn, const QuantizeViews& v) {
  ResultSpec codes_spec, scales_spec_;
  throw_if_error(result_spec(v, &codes_spec));
  throw_if_error(scales_spec(v, &scales_spec_));
  const Device device = v.x.device;
  QuantizeOutputs o;
  nb::object codes = allocate(api, fn, codes_spec, device, &o.codes);
  nb::object scales = nb::none(), zero_points = nb::none();
  TensorView sv, zv;
  if (v.static_scales == nullptr) {
    scales = allocate(api, fn, scales_spec_, device, &sv);
    o.scales = &sv;
    if (v.asymmetric) {
      ResultSpec zspec = scales_spec_;
      zspec.dtype = DType::i32;
      zero_points = allocate(api, fn, zspec, device, &zv);
      o.zero_points = &zv;
    }
  }
  const Stream stream = current_stream(api, device);
  throw_if_error(run_released(device, [&] { return quantize(v, o, stream); }));
  return nb::make_tuple(codes, scales, zero_points);
}

}  // namespace fast

namespace {

using fast::allocate;
using fast::current_stream;
using fast::float_format;
using fast::import_input;
using fast::import_optional;
using fast::plain_optional;
using fast::plain_tensor;
using fast::rows_shape;

// out_obj: None (allocate the result) or the caller's out= tensor of the
// same framework, which the core checks like any out= (shape, dtype, device,
// layout, overlap) and writes in place. An out= the framework's table does
// not export (NumPy's declines non-native byte order, dtypes the core has no
// name for, non-contiguous arrays) declines the call: the generic path says
// what is wrong with it, in its own words.
template <class Views, class Run>
nb::object finish(const dlx::Api* api, const char* fn, const Views& v, Device device, nb::handle out_obj,
                  Run&& run) {
  ResultSpec spec;
  throw_if_error(result_spec(v, &spec));
  TensorView out;
  nb::object result;
  if (out_obj.is_none()) {
    result = allocate(api, fn, spec, device, &out);
  } else {
    const dlx::Api* out_api;
    if (!fast::of_framework(out_obj, api) || !import_input(out_obj, fn, "out", &out_api, &out)) return nb::none();
    out.writable = true;
    result = nb::borrow(out_obj);
  }
  const Stream stream = current_stream(api, device);
  throw_if_error(run_released(device, [&] { return run(out, stream); }));
  return result;
}

// qg.linear_q4_0 in one core call (qg::linear_q4_0): x quantized to Q8_1
// into a workspace the caller's framework allocates, then the GEMM, whose
// epilogue adds the bias and writes y [..., M] in x's dtype. The Python
// function checks x's dtype and rank before its two steps (quantize, GEMM),
// so this entry takes only the plain case, as the integer family's do: x a
// float tensor of at least one dimension, weight_q and bias (or None)
// C-contiguous tensors of x's framework. For anything else it returns None
// before doing anything, and the steps take the call. Past that point x is
// checked as the quantize step checks it, then weight_q and bias as the GEMM
// step does: the same checks in the same order, with the same messages.
nb::object linear_q4_0(nb::handle x, nb::handle weight_q, nb::handle bias, const char* fn, bool relu) {
  const dlx::Api* api = nullptr;
  TensorView xv, wv, biasv;
  Format x_fmt;  // unused: x is quantized to Q8_1
  int dtype;     // the result's: x's
  bool has_bias;
  if (!plain_tensor(x, fn, "x", &api, &xv) || xv.ndim < 1 || !float_format(xv.dtype, &x_fmt, &dtype) ||
      !plain_tensor(weight_q, fn, "weight_q", &api, &wv) || !plain_optional(bias, fn, "bias", api, &biasv, &has_bias))
    return nb::none();
  const Device device = xv.device;
  const QuantizeViews q{Format::q8_1, xv, Q8_1Convention::reference, fn};
  ResultSpec xq_spec, spec;
  throw_if_error(result_spec(q, &xq_spec));
  // Dropped on return, after both kernels are enqueued on the framework's
  // current stream: its allocator reuses the memory in stream order, as it
  // does the Python steps' intermediate Q8_1 array.
  TensorView xq;
  const nb::object workspace = allocate(api, fn, xq_spec, device, &xq);
  // [M / 16, K / 32, 288]: a weight qg.repack made q4_0x16 (CPU kernels).
  const Format w_fmt =
      wv.ndim >= 2 && wv.shape[wv.ndim - 1] == format_traits(Format::q4_0x16).bytes_per_block ? Format::q4_0x16
                                                                                              : Format::q4_0;
  GemmViews v = gemm_views(static_cast<int>(w_fmt), static_cast<int>(Format::q8_1), wv, xq, -1, -1, -1, fn,
                           "weight_q", "x");
  set_epilogue(&v, has_bias ? &biasv : nullptr, dtype, true);
  throw_if_error(result_spec(v, &spec));  // [N, M]
  TensorView y;
  nb::object result = allocate(api, fn, rows_shape(spec, xv), device, &y);
  // Every tensor is C-contiguous: rows are K, one row of blocks, M apart.
  LinearQ4_0Args a;
  fast::fill_linear(&a, xv, spec, y, v.out_dtype, has_bias ? &biasv : nullptr, relu, fn);
  a.xq_workspace = xq.data;
  a.weight_q = wv.data;
  a.weight_format = w_fmt;
  a.weight_row_stride = row_bytes(format_traits(w_fmt), a.k);
  const Stream stream = current_stream(api, device);
  throw_if_error(run_released(device, [&] { return qg::linear_q4_0(a, stream); }));
  return result;
}

}  // namespace

void bind_fast_ops(nb::module_& m) {
  m.def(
      "fast_quantize",
      [](nb::handle x, int fmt, int convention, const char* fn, nb::handle out) -> nb::object {
        const dlx::Api* api;
        QuantizeViews v{format_from(fmt), {}, convention_from(convention), fn};
        if (!import_input(x, fn, "x", &api, &v.x)) return nb::none();
        return finish(api, fn, v, v.x.device, out,
                      [&](const TensorView& o, Stream s) { return quantize(v, o, s); });
      },
      "x"_a, "fmt"_a, "convention"_a, "fn"_a, "out"_a.none());
  m.def(
      "fast_dequantize",
      [](nb::handle xq, int fmt, int64_t k, const char* fn, nb::handle out, int granularity, int64_t group_size,
         nb::handle scales, nb::handle zero_points) -> nb::object {
        const dlx::Api* api;
        DequantizeViews v{format_from(fmt), {}, k, fn};
        v.granularity = granularity_from(granularity);
        v.group_size = group_size;
        if (!import_input(xq, fn, "xq", &api, &v.xq)) return nb::none();
        TensorView sv, zv;
        bool has_s, has_z;
        if (!import_optional(scales, fn, "scale", api, &sv, &has_s) ||
            !import_optional(zero_points, fn, "zero_point", api, &zv, &has_z))
          return nb::none();
        v.scales = has_s ? &sv : nullptr;
        v.zero_points = has_z ? &zv : nullptr;
        return finish(api, fn, v, v.xq.device, out,
                      [&](const TensorView& o, Stream s) { return dequantize(v, o, s); });
      },
      "xq"_a, "fmt"_a, "k"_a, "fn"_a, "out"_a.none(), "granularity"_a = 0, "group_size"_a = 0,
      "scales"_a.none() = nb::none(), "zero_points"_a.none() = nb::none());
  // Integer formats: codes, and (dynamic) the scales and zero points, all
  // allocated by the caller's framework -> (codes, scales or None, zero points or None).
  m.def(
      "fast_quantize_int",
      [](nb::handle x, int fmt, int granularity, int64_t group_size, bool asymmetric, nb::handle static_scales,
         nb::handle static_zero_points, const char* fn) -> nb::object {
        const dlx::Api* api;
        QuantizeViews v{format_from(fmt), {}, Q8_1Convention::reference, fn};
        v.granularity = granularity_from(granularity);
        v.group_size = group_size;
        v.asymmetric = asymmetric;
        if (!import_input(x, fn, "x", &api, &v.x)) return nb::none();
        TensorView ss, sz;
        bool has_s, has_z;
        if (!import_optional(static_scales, fn, "scale", api, &ss, &has_s) ||
            !import_optional(static_zero_points, fn, "zero_point", api, &sz, &has_z))
          return nb::none();
        v.static_scales = has_s ? &ss : nullptr;
        v.static_zero_points = has_z ? &sz : nullptr;
        return fast::quantize_int(api, fn, v);
      },
      "x"_a, "fmt"_a, "granularity"_a, "group_size"_a, "asymmetric"_a, "static_scales"_a.none(),
      "static_zero_points"_a.none(), "fn"_a);
  m.def(
      "fast_gemm",
      [](nb::handle a, nb::handle b, int a_fmt, int b_fmt, int64_t M, int64_t N, int64_t K, const char* fn,
         const char* a_name, const char* b_name, nb::handle out, nb::handle bias, int out_dtype, bool transpose,
         nb::handle row_scale, nb::handle col_scale, nb::handle row_zero_point, nb::handle col_zero_point,
         nb::handle a_scales, nb::handle a_zero_points, int64_t group_size, float alpha, int activation,
         bool a_k_major, bool b_k_major) -> nb::object {
        const dlx::Api* api_a;
        TensorView av, bv, biasv;
        if (!import_input(a, fn, a_name, &api_a, &av) || !fast::of_framework(b, api_a) ||
            !import_input(b, fn, b_name, nullptr, &bv))
          return nb::none();
        bool has_bias;
        if (!import_optional(bias, fn, "bias", api_a, &biasv, &has_bias)) return nb::none();
        GemmExtras e;
        if (!import_optional(row_scale, fn, "row_scale", api_a, &e.row_scale, &e.has_row_scale) ||
            !import_optional(col_scale, fn, "col_scale", api_a, &e.col_scale, &e.has_col_scale) ||
            !import_optional(row_zero_point, fn, "row_zero_point", api_a, &e.row_zero_point, &e.has_row_zero_point) ||
            !import_optional(col_zero_point, fn, "col_zero_point", api_a, &e.col_zero_point, &e.has_col_zero_point) ||
            !import_optional(a_scales, fn, "scales", api_a, &e.a_scales, &e.has_a_scales) ||
            !import_optional(a_zero_points, fn, "zero_points", api_a, &e.a_zero_points, &e.has_a_zero_points))
          return nb::none();
        e.group_size = group_size;
        e.alpha = alpha;
        e.activation = activation;
        e.a_k_major = a_k_major;
        e.b_k_major = b_k_major;
        GemmViews v = gemm_views(a_fmt, b_fmt, av, bv, M, N, K, fn, a_name, b_name);
        set_epilogue(&v, has_bias ? &biasv : nullptr, out_dtype, transpose);
        set_extras(&v, e);
        return finish(api_a, fn, v, av.device, out, [&](const TensorView& o, Stream s) { return gemm(v, o, s); });
      },
      "a"_a, "b"_a, "a_fmt"_a, "b_fmt"_a, "M"_a, "N"_a, "K"_a, "fn"_a, "a_name"_a, "b_name"_a, "out"_a.none(),
      "bias"_a.none() = nb::none(), "out_dtype"_a = 0, "transpose"_a = false, "row_scale"_a.none() = nb::none(),
      "col_scale"_a.none() = nb::none(), "row_zero_point"_a.none() = nb::none(),
      "col_zero_point"_a.none() = nb::none(), "a_scales"_a.none() = nb::none(),
      "a_zero_points"_a.none() = nb::none(), "group_size"_a = 0, "alpha"_a = 1.0f, "activation"_a = 0,
      "a_k_major"_a = false, "b_k_major"_a = false);
  // qg's exchange table for numpy.ndarray (numpy_exchange.cpp): NumPy arrays
  // then take the entries above. -> False for arguments of the wrong kind.
  m.def(
      "use_numpy_exchange",
      [](nb::handle ndarray_type, nb::handle empty, nb::handle dtypes) {
        return dlx::use_numpy(ndarray_type.ptr(), empty.ptr(), dtypes.ptr());
      },
      "ndarray_type"_a, "empty"_a, "dtypes"_a);
  m.def("fast_linear_q4_0", &linear_q4_0, "x"_a.none(), "weight_q"_a.none(), "bias"_a.none(),
        "fn"_a = "qg.linear_q4_0", "relu"_a = false);
}

}  // namespace qg::python
