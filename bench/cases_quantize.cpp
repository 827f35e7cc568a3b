// SPDX-License-Identifier: MIT
// bench/cases_quantize.cpp: quantize and dequantize cases, driven by the
// format table and the kernel registries. For every format qg can produce
// (traits.quantizable) and every backend with a kernel serving it, for each
// distinct K of the shape set and each N (rows) of the backend's list, cold
// and hot:
//   quantize_<fmt>/<dev>/<mode>/K:/N:      fp32 [N, K] -> packed rows (qg::quantize)
//   dequantize_<fmt>/<dev>/<mode>/K:/N:    packed rows -> fp32 [N, K]  (qg::dequantize)
// plus .../kernel:<name> for each registry entry when more than one serves
// the format on that backend. No flops: %floor is bytes / the copy bandwidth
// measured at start-up (read + write), so 100 % means "as fast as a copy".
#include <string>
#include <vector>

#include "backend.h"
#include "dispatch.h"
#include "harness.h"
#include "validate.h"

namespace qgbench {

namespace {

template <class Args>
using Kernel = qg::detail::ConvertKernel<Args>;

const qg::detail::Registry& registry_of(Backend b) {
  return b == Backend::cuda ? qg::detail::cuda::registry() : qg::detail::cpu::registry();
}

int64_t packed_bytes(qg::Format f, int64_t rows, int64_t k) {
  return rows * qg::row_bytes(qg::format_traits(f), k);
}

qg::QuantizeArgs quantize_args(Backend be, qg::Format f, int64_t n, int64_t k, const void* x, void* y) {
  qg::QuantizeArgs q;
  q.format = f;
  q.x = x;
  q.x_dtype = qg::DType::f32;
  q.rows = n;
  q.k = k;
  q.x_row_stride = k;
  q.y = y;
  q.y_row_stride = qg::row_bytes(qg::format_traits(f), k);
  q.device = device_of(be);
  return q;
}

qg::DequantizeArgs dequantize_args(Backend be, qg::Format f, int64_t n, int64_t k, const void* xq, void* y) {
  qg::DequantizeArgs d;
  d.format = f;
  d.xq = xq;
  d.rows = n;
  d.k = k;
  d.xq_row_stride = qg::row_bytes(qg::format_traits(f), k);
  d.y = static_cast<float*>(y);
  d.y_row_stride = k;
  d.device = device_of(be);
  return d;
}


qg::Status check(const qg::QuantizeArgs& a) { return qg::detail::check_quantize_args(a); }
qg::Status check(const qg::DequantizeArgs& a) { return qg::detail::check_dequantize_args(a); }
qg::Status call(const qg::QuantizeArgs& a, qg::Stream s) { return qg::quantize(a, s); }
qg::Status call(const qg::DequantizeArgs& a, qg::Stream s) { return qg::dequantize(a, s); }

// One quantize or dequantize case: `in` rotates (cold), `out` is one buffer.
// kernel == nullptr: the public call.
template <class Args>
void bm_convert(benchmark::State& st, Backend be, Args args, const Kernel<Args>* kernel, Rotation& in,
                const Work& work, bool cold, const void* Args::*input) {
  const qg::Stream stream = stream_of(be);
  const qg::detail::DeviceScope scope(args.device);  // a kernel forced by name runs as the dispatcher runs it
  if (!label_case(st, be, kernel, args, kernel ? check(args) : qg::Status())) return;
  run_timed(st, be, work, warmups_for(be, in, cold), [&]() {
    args.*input = in.take(cold);
    return qg_error(kernel ? kernel->name : "qg", kernel ? kernel->run(args, stream) : call(args, stream));
  });
}

// A quantizer's buffers: fp32 [N, K] rows (rotating when cold) and one
// output of the packed bytes. False (the case skipped) on an error.
bool quantize_buffers(benchmark::State& st, Backend be, qg::Format f, int64_t k, int64_t n, bool cold, RotationPtr* x,
                      RotationPtr* y) {
  std::string err = f32_rows(be, n, k, x);
  if (err.empty()) err = output_buffer(be, packed_bytes(f, n, k), y);
  if (err.empty()) err = (*x)->prepare(cold);
  if (err.empty()) err = (*y)->prepare(false);
  if (!err.empty()) st.SkipWithError(err.c_str());
  return err.empty();
}

void bm_quantize(benchmark::State& st, Backend be, qg::Format f, const Kernel<qg::QuantizeArgs>* kernel, int64_t k,
                 int64_t n, bool cold) {
  RotationPtr x, y;
  if (!quantize_buffers(st, be, f, k, n, cold, &x, &y)) return;
  const Work work{0.0, 4.0 * n * k + double(packed_bytes(f, n, k))};
  bm_convert(st, be, quantize_args(be, f, n, k, x->slot(0), y->slot(0)), kernel, *x, work, cold,
             &qg::QuantizeArgs::x);
}

void bm_dequantize(benchmark::State& st, Backend be, qg::Format f, const Kernel<qg::DequantizeArgs>* kernel,
                   int64_t k, int64_t n, bool cold) {
  RotationPtr xq, y;
  std::string err = packed_rows(be, "a", f, n, k, &xq);
  if (err.empty()) err = output_buffer(be, 4 * n * k, &y);
  if (err.empty()) err = xq->prepare(cold);
  if (err.empty()) err = y->prepare(false);
  if (!err.empty()) {
    st.SkipWithError(err.c_str());
    return;
  }
  const Work work{0.0, double(packed_bytes(f, n, k)) + 4.0 * n * k};
  bm_convert(st, be, dequantize_args(be, f, n, k, xq->slot(0), y->slot(0)), kernel, *xq, work, cold,
             &qg::DequantizeArgs::xq);
}

// The quantizer's floor on the GPU: the same input rotation and output
// buffer, moved by a plain kernel (read_floor.cu) that reads the fp32 rows
// and writes the packed bytes' count, timed the same way:
//   move_<fmt>/cuda/<cold|hot>/K:<K>/N:<N>/manual_time
void bm_move(benchmark::State& st, qg::Format f, int64_t k, int64_t n, bool cold) {
  RotationPtr x, y;
  if (!quantize_buffers(st, Backend::cuda, f, k, n, cold, &x, &y)) return;
  const int64_t out_bytes = packed_bytes(f, n, k);
  const Work work{0.0, 4.0 * n * k + double(out_bytes)};
  run_timed(st, Backend::cuda, work, warmups_for(Backend::cuda, *x, cold),
            [&]() { return gpu_move_floor(x->take(cold), 4 * n * k, y->slot(0), out_bytes); });
}

template <class Args, class Bench, class MakeArgs>
void add_family(CaseList& cases, const char* verb, Backend be, const std::vector<Kernel<Args>>& table, Bench bench,
                MakeArgs make_args) {
  for (int fi = 0; fi < qg::kFormatCount; ++fi) {
    const qg::Format f = static_cast<qg::Format>(fi);
    const qg::FormatTraits& t = qg::format_traits(f);
    if (!t.quantizable) continue;  // no way to make its input (dequantize) or no quantizer
    // Formats with outside scales need a scales buffer and a granularity these
    // cases do not model yet; the ggml block formats are timed here.
    if (t.scale_place == qg::ScalePlace::outside) continue;
    std::vector<const Kernel<Args>*> kernels;
    for (const Kernel<Args>& kern : table)
      if (kern.formats & qg::detail::format_bit(f)) kernels.push_back(&kern);
    if (kernels.empty()) continue;
    const std::string op = std::string(verb) + "_" + t.name;
    for (int64_t k : distinct_k())
      for (int64_t n : n_list(be))
        for (bool cold : {true, false}) {
          cases.push_back({case_name(op, be, cold, 0, k, n), be,
                           [=](benchmark::State& st) { bench(st, be, f, nullptr, k, n, cold); }, nullptr});
          if (kernels.size() < 2) continue;  // the public call is that kernel
          for (const Kernel<Args>* kern : kernels)
            cases.push_back({case_name(op, be, cold, 0, k, n, kern->name), be,
                             [=](benchmark::State& st) { bench(st, be, f, kern, k, n, cold); },
                             [=]() {
                               const auto p = reinterpret_cast<void*>(uintptr_t(1) << 20);
                               return kernel_refuses(*kern, be, make_args(be, f, n, k, p, p));
                             }});
        }
  }
}

}  // namespace

void add_quantize_cases(CaseList& cases) {
  if (!qg::detail::cuda::registry().quantize.empty())  // CUDA built
    for (int fi = 0; fi < qg::kFormatCount; ++fi) {
      const qg::Format f = static_cast<qg::Format>(fi);
      const qg::FormatTraits& t = qg::format_traits(f);
      if (!t.quantizable || t.scale_place == qg::ScalePlace::outside) continue;  // as add_family
      bool has_kernel = false;
      for (const Kernel<qg::QuantizeArgs>& kern : qg::detail::cuda::registry().quantize)
        has_kernel = has_kernel || (kern.formats & qg::detail::format_bit(f));
      if (!has_kernel) continue;
      for (int64_t k : distinct_k())
        for (int64_t n : n_list(Backend::cuda))
          for (bool cold : {true, false})
            cases.push_back({case_name(std::string("move_") + t.name, Backend::cuda, cold, 0, k, n), Backend::cuda,
                             [=](benchmark::State& st) { bm_move(st, f, k, n, cold); }, nullptr});
    }
  for (Backend be : {Backend::cuda, Backend::cpu}) {
    const qg::detail::Registry& reg = registry_of(be);
    add_family<qg::QuantizeArgs>(cases, "quantize", be, reg.quantize, bm_quantize, quantize_args);
    add_family<qg::DequantizeArgs>(cases, "dequantize", be, reg.dequantize, bm_dequantize, dequantize_args);
  }
}

}  // namespace qgbench
