// SPDX-License-Identifier: MIT
// ops.cpp: bindings of the operations. Each takes arrays the Python layer has
// already matched to a framework and allocated `out` for; all checking is in
// the core (cpp/src/validate.cpp), which reports through Status.
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "convert.h"

namespace qg::python {

namespace {

Format format_from(int f) {
  if (f < 0 || f > static_cast<int>(Format::q8_1)) throw nb::value_error("qg: unknown format id");
  return static_cast<Format>(f);
}

Stream stream_from(uintptr_t s) { return reinterpret_cast<Stream>(s); }

nb::tuple to_tuple(const std::vector<int64_t>& shape) {
  nb::list l;
  for (int64_t s : shape) l.append(s);
  return nb::tuple(l);
}

nb::dict to_dict(const Explanation& e) {
  nb::dict d;
  d["op"] = e.op;
  d["chosen"] = e.chosen;
  d["candidates"] = e.candidates;
  return d;
}

}  // namespace

void bind_ops(nb::module_& m) {
  m.def(
      "quantize_shape",
      [](int fmt, const InArray& x, bool bf16) {
        std::vector<int64_t> shape;
        throw_if_error(quantize_output_shape(format_from(fmt), to_view(x, bf16), &shape));
        return to_tuple(shape);
      },
      "fmt"_a, "x"_a, "bf16"_a = false);
  m.def(
      "quantize",
      [](int fmt, const InArray& x, const OutArray& out, uintptr_t stream, int convention, bool bf16) {
        const TensorView xv = to_view(x, bf16), ov = to_view(out);
        Status s;
        {
          nb::gil_scoped_release release;
          s = quantize(format_from(fmt), xv, ov, stream_from(stream),
                       convention == 1 ? Q8_1Convention::ggml_cuda : Q8_1Convention::reference);
        }
        throw_if_error(s);
      },
      "fmt"_a, "x"_a, "out"_a.noconvert(), "stream"_a, "convention"_a, "bf16"_a = false);
  m.def(
      "dequantize_shape",
      [](int fmt, const InArray& xq, int64_t k) {
        std::vector<int64_t> shape;
        throw_if_error(dequantize_output_shape(format_from(fmt), to_view(xq), k, &shape));
        return to_tuple(shape);
      },
      "fmt"_a, "xq"_a, "k"_a);
  m.def(
      "dequantize",
      [](int fmt, const InArray& xq, int64_t k, const OutArray& out, uintptr_t stream) {
        const TensorView xv = to_view(xq), ov = to_view(out);
        Status s;
        {
          nb::gil_scoped_release release;
          s = dequantize(format_from(fmt), xv, k, ov, stream_from(stream));
        }
        throw_if_error(s);
      },
      "fmt"_a, "xq"_a, "k"_a, "out"_a.noconvert(), "stream"_a);
  m.def(
      "gemm_q4_0_q8_1_shape",
      [](const InArray& w, const InArray& a, int64_t M, int64_t N, int64_t K) {
        std::vector<int64_t> shape;
        throw_if_error(gemm_q4_0_q8_1_output_shape(to_view(w), to_view(a), M, N, K, &shape));
        return to_tuple(shape);
      },
      "w"_a, "a"_a, "M"_a, "N"_a, "K"_a);
  m.def(
      "gemm_q4_0_q8_1",
      [](const InArray& w, const InArray& a, const OutArray& out, int64_t M, int64_t N, int64_t K,
         uintptr_t stream) {
        const TensorView wv = to_view(w), av = to_view(a), ov = to_view(out);
        Status s;
        {
          nb::gil_scoped_release release;
          s = gemm_q4_0_q8_1(wv, av, ov, M, N, K, stream_from(stream));
        }
        throw_if_error(s);
      },
      "w"_a, "a"_a, "out"_a.noconvert(), "M"_a, "N"_a, "K"_a, "stream"_a);
  m.def(
      "explain_quantize",
      [](int fmt, const InArray& x, bool bf16) {
        Explanation e;
        throw_if_error(explain_quantize(format_from(fmt), to_view(x, bf16), &e));
        return to_dict(e);
      },
      "fmt"_a, "x"_a, "bf16"_a = false);
  m.def(
      "explain_dequantize",
      [](int fmt, const InArray& xq) {
        Explanation e;
        throw_if_error(explain_dequantize(format_from(fmt), to_view(xq), &e));
        return to_dict(e);
      },
      "fmt"_a, "xq"_a);
  m.def(
      "explain_gemm_q4_0_q8_1",
      [](const InArray& w, const InArray& a) {
        Explanation e;
        throw_if_error(explain_gemm_q4_0_q8_1(to_view(w), to_view(a), &e));
        return to_dict(e);
      },
      "w"_a, "a"_a);
  m.def(
      "format_traits",
      [](int fmt) {
        const FormatTraits& t = format_traits(format_from(fmt));
        nb::dict d;
        d["name"] = std::string(t.name);
        d["block_size"] = t.block_size;
        d["bytes_per_block"] = t.bytes_per_block;
        d["bits_per_code"] = t.bits_per_code;
        d["has_sum"] = t.has_sum;
        return d;
      },
      "fmt"_a);
}

}  // namespace qg::python
