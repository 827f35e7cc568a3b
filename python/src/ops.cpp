// SPDX-License-Identifier: MIT
// ops.cpp: the generic bindings of the three core ops. The Python layer
// (qg/_api.py) has matched the arrays to a framework, allocated `out` from
// the result spec, and found the stream; all checking is in the core.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "bind_util.h"

namespace qg::python {

namespace {

nb::dict to_dict(const Explanation& e) {
  nb::dict d;
  d["op"] = e.op;
  d["problem"] = e.problem;
  d["chosen"] = e.chosen;
  d["candidates"] = e.candidates;
  return d;
}

}  // namespace

GemmViews gemm_views(int a_fmt, int b_fmt, const TensorView& a, const TensorView& b, int64_t m, int64_t n,
                     int64_t k, const char* fn, const char* a_name, const char* b_name) {
  GemmViews v;
  v.a_format = format_from(a_fmt);
  v.b_format = format_from(b_fmt);
  v.a = a;
  v.b = b;
  v.m = m;
  v.n = n;
  v.k = k;
  v.fn = fn;
  v.a_name = a_name;
  v.b_name = b_name;
  return v;
}

void set_epilogue(GemmViews* v, const TensorView* bias, int out_dtype, bool transpose) {
  v->bias = bias;
  v->out_dtype = out_dtype == 1 ? DType::f16 : out_dtype == 2 ? DType::bf16 : out_dtype == 3 ? DType::i32 : DType::f32;
  v->transpose_out = transpose;
}

void set_extras(GemmViews* v, const GemmExtras& e) {
  v->row_scale = e.has_row_scale ? &e.row_scale : nullptr;
  v->col_scale = e.has_col_scale ? &e.col_scale : nullptr;
  v->row_zero_point = e.has_row_zero_point ? &e.row_zero_point : nullptr;
  v->col_zero_point = e.has_col_zero_point ? &e.col_zero_point : nullptr;
  v->a_scales = e.has_a_scales ? &e.a_scales : nullptr;
  v->a_zero_points = e.has_a_zero_points ? &e.a_zero_points : nullptr;
  v->group_size = e.group_size;
  v->alpha = e.alpha;
  v->activation = e.activation == 1 ? Activation::relu : Activation::none;
  v->a_k_major = e.a_k_major;
  v->b_k_major = e.b_k_major;
}

nb::tuple spec_tuple(const ResultSpec& spec) {
  nb::list shape;
  for (int d = 0; d < spec.ndim; ++d) shape.append(spec.shape[d]);
  return nb::make_tuple(nb::tuple(shape), dtype_name(spec.dtype));
}

namespace {

using OptArray = std::optional<InArray>;

// An optional array's view, kept in *store; null when absent.
const TensorView* opt_view(const OptArray& a, const char* fn, const char* arg, TensorView* store,
                           bool bf16 = false) {
  if (!a) return nullptr;
  *store = to_view(*a, fn, arg, bf16);
  return store;
}

// The generic bindings' GEMM arguments after the operands: one list, shared
// by gemm_spec, gemm and explain_gemm (names as the Python layer passes them).
struct GemmCall {
  GemmViews v;
  TensorView bias;
  GemmExtras e;
};

void fill_call(GemmCall* c, const char* fn, const OptArray& bias, int out_dtype, bool transpose,
               const OptArray& row_scale, const OptArray& col_scale, const OptArray& row_zero_point,
               const OptArray& col_zero_point, const OptArray& a_scales, const OptArray& a_zero_points,
               int64_t group_size, float alpha, int activation, bool a_k_major, bool b_k_major) {
  set_epilogue(&c->v, opt_view(bias, fn, "bias", &c->bias), out_dtype, transpose);
  GemmExtras& e = c->e;
  e.has_row_scale = opt_view(row_scale, fn, "row_scale", &e.row_scale) != nullptr;
  e.has_col_scale = opt_view(col_scale, fn, "col_scale", &e.col_scale) != nullptr;
  e.has_row_zero_point = opt_view(row_zero_point, fn, "row_zero_point", &e.row_zero_point) != nullptr;
  e.has_col_zero_point = opt_view(col_zero_point, fn, "col_zero_point", &e.col_zero_point) != nullptr;
  e.has_a_scales = opt_view(a_scales, fn, "scales", &e.a_scales) != nullptr;
  e.has_a_zero_points = opt_view(a_zero_points, fn, "zero_points", &e.a_zero_points) != nullptr;
  e.group_size = group_size;
  e.alpha = alpha;
  e.activation = activation;
  e.a_k_major = a_k_major;
  e.b_k_major = b_k_major;
  set_extras(&c->v, e);
}

#define QG_GEMM_EXTRA_PARAMS                                                                                  \
  OptArray bias, int out_dtype, bool transpose, OptArray row_scale, OptArray col_scale, OptArray row_zero_point, \
      OptArray col_zero_point, OptArray a_scales, OptArray a_zero_points, int64_t group_size, float alpha,      \
      int activation, bool a_k_major, bool b_k_major
#define QG_GEMM_EXTRA_ARGS                                                                                   \
  bias, out_dtype, transpose, row_scale, col_scale, row_zero_point, col_zero_point, a_scales, a_zero_points, \
      group_size, alpha, activation, a_k_major, b_k_major
#define QG_GEMM_EXTRA_NAMES                                                                                   \
  "bias"_a.none() = nb::none(), "out_dtype"_a = 0, "transpose"_a = false, "row_scale"_a.none() = nb::none(),  \
      "col_scale"_a.none() = nb::none(), "row_zero_point"_a.none() = nb::none(),                              \
      "col_zero_point"_a.none() = nb::none(), "a_scales"_a.none() = nb::none(),                               \
      "a_zero_points"_a.none() = nb::none(), "group_size"_a = 0, "alpha"_a = 1.0f, "activation"_a = 0,         \
      "a_k_major"_a = false, "b_k_major"_a = false

QuantizeViews int_quantize_views(int fmt, const InArray& x, bool bf16, const char* fn, int granularity,
                                 int64_t group_size, bool asymmetric) {
  QuantizeViews v{format_from(fmt), to_view(x, fn, "x", bf16), Q8_1Convention::reference, fn};
  v.granularity = granularity_from(granularity);
  v.group_size = group_size;
  v.asymmetric = asymmetric;
  return v;
}

DequantizeViews int_dequantize_views(int fmt, const InArray& xq, int64_t k, const char* fn, int granularity,
                                     int64_t group_size) {
  DequantizeViews v{format_from(fmt), to_view(xq, fn, "xq"), k, fn};
  v.granularity = granularity_from(granularity);
  v.group_size = group_size;
  return v;
}

}  // namespace

void bind_ops(nb::module_& m) {
  m.def(
      "quantize_spec",
      [](int fmt, const InArray& x, bool bf16, const char* fn) {
        QuantizeViews v{format_from(fmt), to_view(x, fn, "x", bf16), Q8_1Convention::reference, fn};
        ResultSpec spec;
        throw_if_error(result_spec(v, &spec));
        return spec_tuple(spec);
      },
      "fmt"_a, "x"_a, "bf16"_a, "fn"_a);
  m.def(
      "quantize",
      [](int fmt, const InArray& x, const OutArray& out, uintptr_t stream, int convention, bool bf16, const char* fn) {
        const QuantizeViews v{format_from(fmt), to_view(x, fn, "x", bf16), convention_from(convention), fn};
        const TensorView ov = to_view(out, fn);
        throw_if_error(run_released(ov.device, [&] { return quantize(v, ov, stream_from(stream)); }));
      },
      "fmt"_a, "x"_a, "out"_a.noconvert(), "stream"_a, "convention"_a, "bf16"_a, "fn"_a);
  // Integer formats (scales outside the codes): the codes' spec and the
  // scales' spec (float32; zero points are int32 of the same shape).
  m.def(
      "quantize_int_spec",
      [](int fmt, const InArray& x, bool bf16, const char* fn, int granularity, int64_t group_size) {
        const QuantizeViews v = int_quantize_views(fmt, x, bf16, fn, granularity, group_size, false);
        ResultSpec codes, scales;
        throw_if_error(result_spec(v, &codes));
        throw_if_error(scales_spec(v, &scales));
        return nb::make_tuple(spec_tuple(codes), spec_tuple(scales));
      },
      "fmt"_a, "x"_a, "bf16"_a, "fn"_a, "granularity"_a, "group_size"_a);
  m.def(
      "quantize_int",
      [](int fmt, const InArray& x, bool bf16, const OutArray& codes, std::optional<OutArray> scales,
         std::optional<OutArray> zero_points, OptArray static_scales, OptArray static_zero_points, int granularity,
         int64_t group_size, bool asymmetric, uintptr_t stream, const char* fn) {
        QuantizeViews v = int_quantize_views(fmt, x, bf16, fn, granularity, group_size, asymmetric);
        TensorView ss, sz, sv, zv;
        v.static_scales = opt_view(static_scales, fn, "scale", &ss);
        v.static_zero_points = opt_view(static_zero_points, fn, "zero_point", &sz);
        QuantizeOutputs o{to_view(codes, fn)};
        if (scales) o.scales = &(sv = to_view(*scales, fn));
        if (zero_points) o.zero_points = &(zv = to_view(*zero_points, fn));
        throw_if_error(run_released(o.codes.device, [&] { return quantize(v, o, stream_from(stream)); }));
      },
      "fmt"_a, "x"_a, "bf16"_a, "codes"_a.noconvert(), "scales"_a.noconvert().none(),
      "zero_points"_a.noconvert().none(), "static_scales"_a.none(), "static_zero_points"_a.none(),
      "granularity"_a, "group_size"_a, "asymmetric"_a, "stream"_a, "fn"_a);
  m.def(
      "dequantize_spec",
      [](int fmt, const InArray& xq, int64_t k, const char* fn) {
        DequantizeViews v{format_from(fmt), to_view(xq, fn, "xq"), k, fn};
        ResultSpec spec;
        throw_if_error(result_spec(v, &spec));
        return spec_tuple(spec);
      },
      "fmt"_a, "xq"_a, "k"_a, "fn"_a);
  m.def(
      "dequantize",
      [](int fmt, const InArray& xq, int64_t k, const OutArray& out, uintptr_t stream, const char* fn, int granularity,
         int64_t group_size, OptArray scales, OptArray zero_points) {
        DequantizeViews v = int_dequantize_views(fmt, xq, k, fn, granularity, group_size);
        TensorView sv, zv;
        v.scales = opt_view(scales, fn, "scale", &sv);
        v.zero_points = opt_view(zero_points, fn, "zero_point", &zv);
        const TensorView ov = to_view(out, fn);
        throw_if_error(run_released(ov.device, [&] { return dequantize(v, ov, stream_from(stream)); }));
      },
      "fmt"_a, "xq"_a, "k"_a, "out"_a.noconvert(), "stream"_a, "fn"_a, "granularity"_a = 0, "group_size"_a = 0,
      "scales"_a.none() = nb::none(), "zero_points"_a.none() = nb::none());
  m.def(
      "repack_spec",
      [](int from, int to, const InArray& x, const char* fn) {
        RepackViews v{format_from(from), format_from(to), to_view(x, fn, "weight_q"), fn, "weight_q"};
        ResultSpec spec;
        throw_if_error(result_spec(v, &spec));
        return spec_tuple(spec);
      },
      "from_fmt"_a, "to_fmt"_a, "x"_a, "fn"_a);
  m.def(
      "repack",
      [](int from, int to, const InArray& x, const OutArray& out, const char* fn) {
        RepackViews v{format_from(from), format_from(to), to_view(x, fn, "weight_q"), fn, "weight_q"};
        const TensorView ov = to_view(out, fn);
        throw_if_error(run_released(ov.device, [&] { return repack(v, ov); }));
      },
      "from_fmt"_a, "to_fmt"_a, "x"_a, "out"_a.noconvert(), "fn"_a);
  m.def(
      "gemm_spec",
      [](int a_fmt, int b_fmt, const InArray& a, const InArray& b, int64_t M, int64_t N, int64_t K,
         const char* fn, const char* a_name, const char* b_name, QG_GEMM_EXTRA_PARAMS) {
        GemmCall c;
        c.v = gemm_views(a_fmt, b_fmt, to_view(a, fn, a_name), to_view(b, fn, b_name), M, N, K, fn, a_name, b_name);
        fill_call(&c, fn, QG_GEMM_EXTRA_ARGS);
        ResultSpec spec;
        throw_if_error(result_spec(c.v, &spec));
        return spec_tuple(spec);
      },
      "a_fmt"_a, "b_fmt"_a, "a"_a, "b"_a, "M"_a, "N"_a, "K"_a, "fn"_a, "a_name"_a, "b_name"_a, QG_GEMM_EXTRA_NAMES);
  m.def(
      "gemm",
      [](int a_fmt, int b_fmt, const InArray& a, const InArray& b, const OutArray& out, int64_t M, int64_t N,
         int64_t K, uintptr_t stream, const char* fn, const char* a_name, const char* b_name, QG_GEMM_EXTRA_PARAMS) {
        GemmCall c;
        c.v = gemm_views(a_fmt, b_fmt, to_view(a, fn, a_name), to_view(b, fn, b_name), M, N, K, fn, a_name, b_name);
        fill_call(&c, fn, QG_GEMM_EXTRA_ARGS);
        const TensorView ov = to_view(out, fn);
        throw_if_error(run_released(ov.device, [&] { return gemm(c.v, ov, stream_from(stream)); }));
      },
      "a_fmt"_a, "b_fmt"_a, "a"_a, "b"_a, "out"_a.noconvert(), "M"_a, "N"_a, "K"_a, "stream"_a, "fn"_a,
      "a_name"_a, "b_name"_a, QG_GEMM_EXTRA_NAMES);
  m.def(
      "explain_quantize",
      [](int fmt, const InArray& x, bool bf16, const char* fn) {
        Explanation e;
        throw_if_error(explain(QuantizeViews{format_from(fmt), to_view(x, fn, "x", bf16), Q8_1Convention::reference, fn}, &e));
        return to_dict(e);
      },
      "fmt"_a, "x"_a, "bf16"_a, "fn"_a);
  m.def(
      "explain_dequantize",
      [](int fmt, const InArray& xq, const char* fn) {
        Explanation e;
        throw_if_error(explain(DequantizeViews{format_from(fmt), to_view(xq, fn, "xq"), -1, fn}, &e));
        return to_dict(e);
      },
      "fmt"_a, "xq"_a, "fn"_a);
  m.def(
      "explain_gemm",
      [](int a_fmt, int b_fmt, const InArray& a, const InArray& b, const char* fn, const char* a_name,
         const char* b_name, int64_t M, int64_t N, int64_t K, QG_GEMM_EXTRA_PARAMS) {
        GemmCall c;
        c.v = gemm_views(a_fmt, b_fmt, to_view(a, fn, a_name), to_view(b, fn, b_name), M, N, K, fn, a_name, b_name);
        fill_call(&c, fn, QG_GEMM_EXTRA_ARGS);
        Explanation e;
        throw_if_error(explain(c.v, &e));
        return to_dict(e);
      },
      "a_fmt"_a, "b_fmt"_a, "a"_a, "b"_a, "fn"_a, "a_name"_a, "b_name"_a, "M"_a = -1, "N"_a = -1, "K"_a = -1,
      QG_GEMM_EXTRA_NAMES);
  m.def("format_traits", [](int fmt) {
    const FormatTraits& t = format_traits(format_from(fmt));
    nb::dict d;
    d["name"] = std::string(t.name);
    d["element_bits"] = t.element_bits;
    d["code_offset"] = t.code_offset;
    d["block_size"] = t.block_size;
    d["bytes_per_block"] = t.bytes_per_block;
    d["has_block_sum"] = t.has_block_sum;
    d["quantizable"] = t.quantizable;
    d["storage"] = std::string(dtype_name(t.storage));
    d["blocked_view"] = t.blocked_view;
    d["rows_per_block"] = t.rows_per_block;
    d["pads_k"] = t.pads_k;
    d["has_zero_point"] = t.has_zero_point;
    d["outside_scales"] = t.scale_place == ScalePlace::outside;
    return d;
  });
  m.attr("format_count") = kFormatCount;
}

}  // namespace qg::python
