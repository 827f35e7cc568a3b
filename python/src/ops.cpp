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
  v->out_dtype = out_dtype == 1 ? DType::f16 : out_dtype == 2 ? DType::bf16 : DType::f32;
  v->transpose_out = transpose;
}

nb::tuple spec_tuple(const ResultSpec& spec) {
  nb::list shape;
  for (int d = 0; d < spec.ndim; ++d) shape.append(spec.shape[d]);
  return nb::make_tuple(nb::tuple(shape), dtype_name(spec.dtype));
}

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
      [](int fmt, const InArray& xq, int64_t k, const OutArray& out, uintptr_t stream, const char* fn) {
        const DequantizeViews v{format_from(fmt), to_view(xq, fn, "xq"), k, fn};
        const TensorView ov = to_view(out, fn);
        throw_if_error(run_released(ov.device, [&] { return dequantize(v, ov, stream_from(stream)); }));
      },
      "fmt"_a, "xq"_a, "k"_a, "out"_a.noconvert(), "stream"_a, "fn"_a);
  m.def(
      "gemm_spec",
      [](int a_fmt, int b_fmt, const InArray& a, const InArray& b, int64_t M, int64_t N, int64_t K,
         const char* fn, const char* a_name, const char* b_name, std::optional<InArray> bias, int out_dtype,
         bool transpose) {
        GemmViews v = gemm_views(a_fmt, b_fmt, to_view(a, fn, a_name), to_view(b, fn, b_name), M, N, K, fn,
                                 a_name, b_name);
        TensorView bv;
        set_epilogue(&v, bias ? &(bv = to_view(*bias, fn, "bias")) : nullptr, out_dtype, transpose);
        ResultSpec spec;
        throw_if_error(result_spec(v, &spec));
        return spec_tuple(spec);
      },
      "a_fmt"_a, "b_fmt"_a, "a"_a, "b"_a, "M"_a, "N"_a, "K"_a, "fn"_a, "a_name"_a, "b_name"_a, "bias"_a.none() = nb::none(),
      "out_dtype"_a = 0, "transpose"_a = false);
  m.def(
      "gemm",
      [](int a_fmt, int b_fmt, const InArray& a, const InArray& b, const OutArray& out, int64_t M, int64_t N,
         int64_t K, uintptr_t stream, const char* fn, const char* a_name, const char* b_name,
         std::optional<InArray> bias, int out_dtype, bool transpose) {
        GemmViews v = gemm_views(a_fmt, b_fmt, to_view(a, fn, a_name), to_view(b, fn, b_name), M, N, K, fn,
                                 a_name, b_name);
        TensorView bv;
        set_epilogue(&v, bias ? &(bv = to_view(*bias, fn, "bias")) : nullptr, out_dtype, transpose);
        const TensorView ov = to_view(out, fn);
        throw_if_error(run_released(ov.device, [&] { return gemm(v, ov, stream_from(stream)); }));
      },
      "a_fmt"_a, "b_fmt"_a, "a"_a, "b"_a, "out"_a.noconvert(), "M"_a, "N"_a, "K"_a, "stream"_a, "fn"_a,
      "a_name"_a, "b_name"_a, "bias"_a.none() = nb::none(), "out_dtype"_a = 0, "transpose"_a = false);
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
         const char* b_name) {
        Explanation e;
        throw_if_error(explain(gemm_views(a_fmt, b_fmt, to_view(a, fn, a_name), to_view(b, fn, b_name), -1, -1, -1,
                                          fn, a_name, b_name),
                               &e));
        return to_dict(e);
      },
      "a_fmt"_a, "b_fmt"_a, "a"_a, "b"_a, "fn"_a, "a_name"_a, "b_name"_a);
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
    return d;
  });
  m.attr("format_count") = kFormatCount;
}

}  // namespace qg::python
