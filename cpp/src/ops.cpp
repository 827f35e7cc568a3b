// SPDX-License-Identifier: MIT
// ops.cpp: public entry points. Each one validates (validate.h), returns early
// for empty problems, then dispatches to the device's implementations.
#include <cstring>

#include "backend.h"
#include "dispatch.h"
#include "validate.h"

namespace qg {

using detail::choose_impl;

namespace {

template <class Impl>
const std::vector<Impl>& impls_for(Device device, const std::vector<Impl>& (*cpu_list)(),
                                   const std::vector<Impl>& (*cuda_list)()) {
  return device.type == DeviceType::cuda ? cuda_list() : cpu_list();
}

Status quantize_dispatch(Format format, const QuantizeArgs& args, Stream stream, Explanation* explain) {
  const std::string fn = detail::op_name("quantize", format);
  if (auto s = detail::check_quantize_args(fn, format, args, explain == nullptr); !s.ok()) return s;
  const auto& impls = impls_for(args.device, detail::cpu::quantize_impls, detail::cuda::quantize_impls);
  int chosen;
  auto can_run = [&](const detail::QuantizeImpl& impl, std::string* why) {
    return impl.can_run(format, args, why);
  };
  if (auto s = choose_impl(fn, args.device, impls, can_run, &chosen, explain); !s.ok()) return s;
  if (explain || args.rows == 0 || args.k == 0) return {};
  return impls[chosen].run(format, args, stream);
}

Status dequantize_dispatch(Format format, const DequantizeArgs& args, Stream stream, Explanation* explain) {
  const std::string fn = detail::op_name("dequantize", format);
  if (auto s = detail::check_dequantize_args(fn, format, args, explain == nullptr); !s.ok()) return s;
  const auto& impls = impls_for(args.device, detail::cpu::dequantize_impls, detail::cuda::dequantize_impls);
  int chosen;
  auto can_run = [&](const detail::DequantizeImpl& impl, std::string* why) {
    return impl.can_run(format, args, why);
  };
  if (auto s = choose_impl(fn, args.device, impls, can_run, &chosen, explain); !s.ok()) return s;
  if (explain || args.rows == 0 || args.k == 0) return {};
  return impls[chosen].run(format, args, stream);
}

Status gemm_dispatch(const GemmArgs& args, Stream stream, Explanation* explain) {
  const std::string fn = "qg.gemm_q4_0_q8_1";
  if (auto s = detail::check_gemm_args(fn, args, explain == nullptr); !s.ok()) return s;
  const auto& impls =
      impls_for(args.device, detail::cpu::gemm_q4_0_q8_1_impls, detail::cuda::gemm_q4_0_q8_1_impls);
  int chosen;
  auto can_run = [&](const detail::GemmImpl& impl, std::string* why) { return impl.can_run(args, why); };
  if (auto s = choose_impl(fn, args.device, impls, can_run, &chosen, explain); !s.ok()) return s;
  // K == 0 still runs: every implementation writes zeros for an empty sum.
  if (explain || args.m == 0 || args.n == 0) return {};
  return impls[chosen].run(args, stream);
}

}  // namespace

// ------------------------------------------------------------------ raw pointers
Status quantize(Format format, const QuantizeArgs& args, Stream stream) {
  return quantize_dispatch(format, args, stream, nullptr);
}
Status dequantize(Format format, const DequantizeArgs& args, Stream stream) {
  return dequantize_dispatch(format, args, stream, nullptr);
}
Status gemm_q4_0_q8_1(const GemmArgs& args, Stream stream) { return gemm_dispatch(args, stream, nullptr); }

Status gemm_q4_0_q8_1(const void* w, const void* a, float* c, int64_t m, int64_t n, int64_t k,
                      Device device, Stream stream) {
  GemmArgs args;
  args.w = w;
  args.a = a;
  args.c = c;
  args.m = m;
  args.n = n;
  args.k = k;
  args.ldw = k / kQK4_0 * static_cast<int64_t>(sizeof(block_q4_0));
  args.lda = k / kQK8_1 * static_cast<int64_t>(sizeof(block_q8_1));
  args.ldc = n;
  args.device = device;
  return gemm_dispatch(args, stream, nullptr);
}

Status explain_gemm_q4_0_q8_1(const GemmArgs& args, Explanation* out) {
  *out = Explanation{};
  return gemm_dispatch(args, nullptr, out);
}
Status explain_quantize(Format format, const QuantizeArgs& args, Explanation* out) {
  *out = Explanation{};
  return quantize_dispatch(format, args, nullptr, out);
}
Status explain_dequantize(Format format, const DequantizeArgs& args, Explanation* out) {
  *out = Explanation{};
  return dequantize_dispatch(format, args, nullptr, out);
}

// ------------------------------------------------------------------------ views
namespace {

Status invalid(const std::string& fn, const std::string& what) {
  return Status(StatusCode::invalid_argument, fn + ": " + what);
}

Status require_ndim(const std::string& fn, const char* arg, const TensorView& v, int min_ndim,
                    const char* expected) {
  if (v.ndim < 0 || v.ndim > kMaxDims)
    return invalid(fn, std::string(arg) + " has ndim=" + std::to_string(v.ndim) +
                           "; a qg view holds 0 to " + std::to_string(kMaxDims) + " dimensions");
  if (v.ndim < min_ndim)
    return invalid(fn, std::string(arg) + " must have shape " + expected + ", got a " +
                           std::to_string(v.ndim) + "-d array of shape " + detail::shape_string(v));
  return {};
}

// Packed arrays are uint8 [..., blocks, bytes_per_block].
Status check_packed(const std::string& fn, const char* arg, const TensorView& v, Format format) {
  const FormatTraits& t = format_traits(format);
  if (v.dtype != DType::u8)
    return Status(StatusCode::type_error, fn + ": " + arg + " must be uint8 (packed " + t.name +
                                              " blocks), got " + dtype_name(v.dtype));
  const std::string expected = std::string("[..., K//32, ") + std::to_string(t.bytes_per_block) + "]";
  if (auto s = require_ndim(fn, arg, v, 2, expected.c_str()); !s.ok()) return s;
  if (v.shape[v.ndim - 1] != t.bytes_per_block)
    return invalid(fn, std::string(arg) + ".shape[-1] must be " + std::to_string(t.bytes_per_block) +
                           " (bytes per " + t.name + " block), got " +
                           std::to_string(v.shape[v.ndim - 1]) + " (shape " +
                           detail::shape_string(v) + ")");
  return {};
}

std::vector<int64_t> leading(const TensorView& v, int drop) {
  return std::vector<int64_t>(v.shape, v.shape + v.ndim - drop);
}

}  // namespace

Status quantize_output_shape(Format format, const TensorView& x, std::vector<int64_t>* shape) {
  const std::string fn = detail::op_name("quantize", format);
  const FormatTraits& t = format_traits(format);
  if (x.dtype != DType::f32 && x.dtype != DType::f16 && x.dtype != DType::bf16)
    return Status(StatusCode::type_error, fn + ": x must be float32, float16 or bfloat16, got " +
                                              dtype_name(x.dtype));
  if (auto s = require_ndim(fn, "x", x, 1, "[..., K]"); !s.ok()) return s;
  const int64_t k = x.shape[x.ndim - 1];
  if (k % t.block_size != 0)
    return invalid(fn, "K=" + std::to_string(k) + " (x.shape[-1]) is not a multiple of " +
                           std::to_string(t.block_size) + ", the " + t.name + " block size");
  *shape = leading(x, 1);
  shape->push_back(k / t.block_size);
  shape->push_back(t.bytes_per_block);
  return {};
}

Status dequantize_output_shape(Format format, const TensorView& xq, int64_t k,
                               std::vector<int64_t>* shape) {
  const std::string fn = detail::op_name("dequantize", format);
  if (auto s = check_packed(fn, "xq", xq, format); !s.ok()) return s;
  const int64_t blocks = xq.shape[xq.ndim - 2];
  const int64_t inferred = blocks * format_traits(format).block_size;
  if (k >= 0 && k != inferred)
    return invalid(fn, "K=" + std::to_string(k) + " does not match xq, which holds " +
                           std::to_string(blocks) + " blocks per row (K=" + std::to_string(inferred) +
                           ")");
  *shape = leading(xq, 2);
  shape->push_back(inferred);
  return {};
}

Status gemm_q4_0_q8_1_output_shape(const TensorView& w, const TensorView& a, int64_t m, int64_t n,
                                   int64_t k, std::vector<int64_t>* shape) {
  const std::string fn = "qg.gemm_q4_0_q8_1";
  if (auto s = check_packed(fn, "weight_q", w, Format::q4_0); !s.ok()) return s;
  if (auto s = check_packed(fn, "activation_q", a, Format::q8_1); !s.ok()) return s;
  if (w.device != a.device)
    return invalid(fn, "weight_q is on " + device_name(w.device) + " but activation_q is on " +
                           device_name(a.device) + "; move both to one device");
  const int64_t wb = w.shape[w.ndim - 2], ab = a.shape[a.ndim - 2];
  if (wb != ab)
    return invalid(fn, "weight_q has " + std::to_string(wb) + " blocks per row (K=" +
                           std::to_string(wb * 32) + ") but activation_q has " + std::to_string(ab) +
                           " (K=" + std::to_string(ab * 32) + ")");
  int64_t wm = 1, an = 1;
  for (int d = 0; d < w.ndim - 2; ++d) wm *= w.shape[d];
  for (int d = 0; d < a.ndim - 2; ++d) an *= a.shape[d];
  if (k >= 0 && k % 32 != 0)
    return invalid(fn, "K=" + std::to_string(k) + " is not a multiple of 32, the Q4_0/Q8_1 block size");
  if (k >= 0 && k != wb * 32)
    return invalid(fn, "K=" + std::to_string(k) + " does not match weight_q, which holds " +
                           std::to_string(wb) + " blocks per row (K=" + std::to_string(wb * 32) + ")");
  if (m >= 0 && m != wm)
    return invalid(fn, "M=" + std::to_string(m) + " does not match weight_q of shape " +
                           detail::shape_string(w) + " (M=" + std::to_string(wm) + ")");
  if (n >= 0 && n != an)
    return invalid(fn, "N=" + std::to_string(n) + " does not match activation_q of shape " +
                           detail::shape_string(a) + " (N=" + std::to_string(an) + ")");
  *shape = {wm, an};
  return {};
}

namespace {

// Views -> raw args; out may be null (explain), then c stays null.
Status gemm_args_from_views(const TensorView& w, const TensorView& a, const TensorView* out,
                            int64_t m, int64_t n, int64_t k, GemmArgs* args) {
  const std::string fn = "qg.gemm_q4_0_q8_1";
  std::vector<int64_t> shape;
  if (auto s = gemm_q4_0_q8_1_output_shape(w, a, m, n, k, &shape); !s.ok()) return s;
  if (out) {
    if (auto s = detail::check_output(fn, *out, DType::f32, shape, w.device); !s.ok()) return s;
    args->c = static_cast<float*>(out->data);
  }
  detail::RowLayout wl, al;
  if (auto s = detail::row_layout(fn, "weight_q", w, 2, &wl); !s.ok()) return s;
  if (auto s = detail::row_layout(fn, "activation_q", a, 2, &al); !s.ok()) return s;
  args->w = w.data;
  args->a = a.data;
  args->m = shape[0];
  args->n = shape[1];
  args->k = w.shape[w.ndim - 2] * 32;
  args->ldw = wl.row_stride;
  args->lda = al.row_stride;
  args->ldc = shape[1];
  args->device = w.device;
  return {};
}

Status quantize_args_from_views(Format format, const TensorView& x, const TensorView* out,
                                Q8_1Convention convention, QuantizeArgs* args) {
  const std::string fn = detail::op_name("quantize", format);
  std::vector<int64_t> shape;
  if (auto s = quantize_output_shape(format, x, &shape); !s.ok()) return s;
  detail::RowLayout xl, yl;
  if (out) {
    if (auto s = detail::check_output(fn, *out, DType::u8, shape, x.device); !s.ok()) return s;
    if (auto s = detail::row_layout(fn, "out", *out, 2, &yl); !s.ok()) return s;
    args->y = out->data;
    args->y_row_stride = yl.row_stride;
  }
  if (auto s = detail::row_layout(fn, "x", x, 1, &xl); !s.ok()) return s;
  args->x = x.data;
  args->x_dtype = x.dtype;
  args->rows = xl.rows;
  args->k = x.shape[x.ndim - 1];
  args->x_row_stride = xl.row_stride;
  args->device = x.device;
  args->q8_1_convention = convention;
  return {};
}

Status dequantize_args_from_views(Format format, const TensorView& xq, int64_t k,
                                  const TensorView* out, DequantizeArgs* args) {
  const std::string fn = detail::op_name("dequantize", format);
  std::vector<int64_t> shape;
  if (auto s = dequantize_output_shape(format, xq, k, &shape); !s.ok()) return s;
  detail::RowLayout xl, yl;
  if (out) {
    if (auto s = detail::check_output(fn, *out, DType::f32, shape, xq.device); !s.ok()) return s;
    if (auto s = detail::row_layout(fn, "out", *out, 1, &yl); !s.ok()) return s;
    args->y = static_cast<float*>(out->data);
    args->y_row_stride = yl.row_stride;
  }
  if (auto s = detail::row_layout(fn, "xq", xq, 2, &xl); !s.ok()) return s;
  args->xq = xq.data;
  args->rows = xl.rows;
  args->k = shape.back();
  args->xq_row_stride = xl.row_stride;
  args->device = xq.device;
  return {};
}

}  // namespace

Status quantize(Format format, const TensorView& x, const TensorView& out, Stream stream,
                Q8_1Convention convention) {
  QuantizeArgs args;
  if (auto s = quantize_args_from_views(format, x, &out, convention, &args); !s.ok()) return s;
  return quantize_dispatch(format, args, stream, nullptr);
}

Status dequantize(Format format, const TensorView& xq, int64_t k, const TensorView& out, Stream stream) {
  DequantizeArgs args;
  if (auto s = dequantize_args_from_views(format, xq, k, &out, &args); !s.ok()) return s;
  return dequantize_dispatch(format, args, stream, nullptr);
}

Status gemm_q4_0_q8_1(const TensorView& w, const TensorView& a, const TensorView& out, int64_t m,
                      int64_t n, int64_t k, Stream stream) {
  GemmArgs args;
  if (auto s = gemm_args_from_views(w, a, &out, m, n, k, &args); !s.ok()) return s;
  return gemm_dispatch(args, stream, nullptr);
}

Status explain_quantize(Format format, const TensorView& x, Explanation* out) {
  QuantizeArgs args;
  if (auto s = quantize_args_from_views(format, x, nullptr, Q8_1Convention::reference, &args); !s.ok())
    return s;
  *out = Explanation{};
  return quantize_dispatch(format, args, nullptr, out);
}

Status explain_dequantize(Format format, const TensorView& xq, Explanation* out) {
  DequantizeArgs args;
  if (auto s = dequantize_args_from_views(format, xq, -1, nullptr, &args); !s.ok()) return s;
  *out = Explanation{};
  return dequantize_dispatch(format, args, nullptr, out);
}

Status explain_gemm_q4_0_q8_1(const TensorView& w, const TensorView& a, Explanation* out) {
  GemmArgs args;
  if (auto s = gemm_args_from_views(w, a, nullptr, -1, -1, -1, &args); !s.ok()) return s;
  *out = Explanation{};
  return gemm_dispatch(args, nullptr, out);
}

}  // namespace qg
