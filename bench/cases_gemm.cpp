// SPDX-License-Identifier: MIT
// bench/cases_gemm.cpp: GEMM cases, driven by the kernel registries.
// For every (A, B) format pair some registry entry serves, on each backend
// with a kernel for it, and for the LLM shape set (M x K = 4096 x 14336 and
// 14336 x 4096; N in 1..4096, CPU: cut at --qg_cpu_max_n), cold and hot:
//   <a>_<b>/<dev>/<mode>/M:/K:/N:                 qg::gemm, the dispatcher's choice (label: its name)
//   <a>_<b>/<dev>/<mode>/M:/K:/N:/kernel:<name>   each registry entry serving the pair, run directly
//                                                 (left out where it refuses the shape or device;
//                                                 CPU: N <= --qg_cpu_kernel_max_n)
//   cublas_fp16/cuda/<mode>/M:/K:/N:              the same product through cuBLAS fp16, beside each
//   cublas_i8/cuda/<mode>/M:/K:/N:                and through cuBLAS int8 (int32 out: torch._int_mm's kernels)
// C is fp32 row-major (int32 for integer x integer pairs), no epilogue;
// operands are contiguous gaussian rows quantized by qg (integer formats: per
// row), float activations are fp16 (or bf16) rows, and weight-only weights
// carry group scales of the activations' dtype (group 128; --qg_wo_group). Of the integer
// family the bench times the pairs that have a fast kernel (i8 x i8, i4 x f16,
// i4 x bf16, the pair torch's tinygemm takes, and i4 x f32, with fp16 scales);
// their reference kernels are left out of the per-kernel cases (seconds per
// call at these shapes).
#include <string>
#include <utility>
#include <vector>

#include "backend.h"
#include "dispatch.h"
#include "harness.h"
#include "validate.h"

namespace qgbench {

namespace {

using qg::detail::GemmKernel;

const qg::detail::Registry& registry_of(Backend b) {
  return b == Backend::cuda ? qg::detail::cuda::registry() : qg::detail::cpu::registry();
}

std::string op_name(qg::Format a, qg::Format b) {
  return std::string(qg::format_traits(a).name) + "_" + qg::format_traits(b).name;
}


bool weight_only(qg::Format fa, qg::Format fb) { return qg::is_integer_format(fa) && qg::is_float_format(fb); }

// The pairs worth a case: the ggml ones, and the integer family's with a fast kernel.
bool benched(qg::Format fa, qg::Format fb) {
  if (!qg::is_integer_format(fa) && !qg::is_float_format(fa)) return true;
  return (fa == qg::Format::i8 && fb == qg::Format::i8) ||
         (fa == qg::Format::i4 && (fb == qg::Format::f16 || fb == qg::Format::bf16 || fb == qg::Format::f32));
}

bool slow_reference(const GemmKernel& k, qg::Format fa) {
  const std::string name = k.name;
  return qg::is_integer_format(fa) &&
         (name.find("reference") != std::string::npos || name.find("generic") != std::string::npos);
}

Work gemm_work(qg::Format fa, qg::Format fb, int64_t m, int64_t n, int64_t k) {
  const double scales = weight_only(fa, fb) ? 2.0 * m * (k / g_opt.wo_group) : 0.0;
  const qg::FormatTraits& ta = qg::format_traits(fa);
  return {2.0 * m * n * k, double(m / ta.rows_per_block * qg::row_bytes(ta, k)) +
                               double(n * qg::row_bytes(qg::format_traits(fb), k)) + 4.0 * m * n + scales};
}
Work gemm_fp16_work(int64_t m, int64_t n, int64_t k) {
  return {2.0 * m * n * k, 2.0 * m * k + 2.0 * n * k + 2.0 * m * n};
}

qg::GemmArgs gemm_args(Backend be, qg::Format fa, qg::Format fb, int64_t m, int64_t n, int64_t k, const void* w,
                       const void* a, void* c, const void* scales = nullptr) {
  qg::GemmArgs g;
  g.a = qg::packed_operand(w, fa, m, k);
  g.b = qg::packed_operand(a, fb, n, k);
  if (weight_only(fa, fb))
    g.a.scales = {scales ? scales : w, fb == qg::Format::bf16 ? qg::DType::bf16 : qg::DType::f16,
                  qg::Granularity::group, g_opt.wo_group, k / g_opt.wo_group};
  g.c = c;
  g.c_dtype = qg::is_integer_format(fa) && qg::is_integer_format(fb) ? qg::DType::i32 : qg::DType::f32;
  g.ldc = n;
  g.ldc_n = 1;
  g.device = device_of(be);
  g.fn = "qg.gemm";
  return g;
}


std::string f32_activation_rows(Backend b, const char*, int64_t rows, int64_t k, RotationPtr* out) {
  return f32_rows(b, rows, k, out);
}

// kernel == nullptr: qg::gemm.
void bm_gemm(benchmark::State& st, Backend be, qg::Format fa, qg::Format fb, const GemmKernel* kernel, int64_t m,
             int64_t k, int64_t n, bool cold) {
  RotationPtr w, a, c, s;
  const bool wo = weight_only(fa, fb);
  // Scales in the activations' dtype, fp16 for fp32 activations (gemm_args).
  const auto scale_rows = fb == qg::Format::bf16 ? bf16_rows : f16_rows;
  const auto activation_rows = fb == qg::Format::f32 ? f32_activation_rows : scale_rows;
  std::string err = packed_rows(be, "w", fa, m, k, &w);
  if (err.empty()) err = qg::is_float_format(fb) ? activation_rows(be, "a", n, k, &a) : packed_rows(be, "a", fb, n, k, &a);
  if (err.empty() && wo) err = scale_rows(be, "s", m, k / g_opt.wo_group, &s);
  if (err.empty()) err = output_buffer(be, m * n * 4, &c);
  if (err.empty()) err = w->prepare(cold);
  if (err.empty()) err = a->prepare(cold);
  if (err.empty() && wo) err = s->prepare(cold);
  if (err.empty()) err = c->prepare(false);
  if (!err.empty()) {
    st.SkipWithError(err.c_str());
    return;
  }
  qg::GemmArgs g = gemm_args(be, fa, fb, m, n, k, w->slot(0), a->slot(0), c->slot(0), wo ? s->slot(0) : nullptr);
  const qg::Stream stream = stream_of(be);
  const qg::detail::DeviceScope scope(g.device);  // a kernel forced by name runs as the dispatcher runs it
  if (!label_case(st, be, kernel, g, kernel ? qg::detail::check_gemm_args(g) : qg::Status())) return;
  run_timed(st, be, gemm_work(fa, fb, m, n, k), warmups_for(be, *w, cold), [&]() {
    g.a.data = w->take(cold);
    g.b.data = a->take(cold);
    if (wo) g.a.scales.data = s->take(cold);
    return qg_error(kernel ? kernel->name : "qg::gemm", kernel ? kernel->run(g, stream) : qg::gemm(g, stream));
  });
}

// A cuBLAS baseline beside each CUDA case: operands from `rows` (fp16 rows,
// or int8 rows quantized by qg), C of c_bytes per element, timed like qg's.
using RowsFn = std::string (*)(const char* role, int64_t rows, int64_t k, RotationPtr* out);
using CublasFn = std::string (*)(int64_t m, int64_t n, int64_t k, const void* w, const void* a, void* c);

void bm_cublas(benchmark::State& st, RowsFn rows, CublasFn gemm, const char* label, int64_t c_bytes,
               const Work& work, int64_t m, int64_t k, int64_t n, bool cold) {
  const Backend be = Backend::cuda;
  RotationPtr w, a, c;
  std::string err = rows("w", m, k, &w);
  if (err.empty()) err = rows("a", n, k, &a);
  if (err.empty()) err = output_buffer(be, m * n * c_bytes, &c);
  if (err.empty()) err = w->prepare(cold);
  if (err.empty()) err = a->prepare(cold);
  if (err.empty()) err = c->prepare(false);
  if (!err.empty()) {
    st.SkipWithError(err.c_str());
    return;
  }
  st.SetLabel(label);
  void* cp = c->slot(0);
  run_timed(st, be, work, warmups_for(be, *w, cold), [&]() { return gemm(m, n, k, w->take(cold), a->take(cold), cp); });
}

std::string f16_cuda_rows(const char* role, int64_t rows, int64_t k, RotationPtr* out) {
  return f16_rows(Backend::cuda, role, rows, k, out);
}
std::string i8_cuda_rows(const char* role, int64_t rows, int64_t k, RotationPtr* out) {
  return packed_rows(Backend::cuda, role, qg::Format::i8, rows, k, out);
}

void bm_cublas_fp16(benchmark::State& st, int64_t m, int64_t k, int64_t n, bool cold) {
  bm_cublas(st, f16_cuda_rows, cublas_gemm_f16, "cublasGemmEx f16 in/out, f32 compute", 2, gemm_fp16_work(m, n, k), m,
            k, n, cold);
}

// int32 out, as torch._int_mm.
void bm_cublas_i8(benchmark::State& st, int64_t m, int64_t k, int64_t n, bool cold) {
  bm_cublas(st, i8_cuda_rows, cublas_gemm_i8, "cublasGemmEx s8 in, s32 out, compute 32I", 4,
            gemm_work(qg::Format::i8, qg::Format::i8, m, n, k), m, k, n, cold);
}

// The format pairs the registries serve, in registry order (CUDA's first).
std::vector<std::pair<qg::Format, qg::Format>> format_pairs() {
  std::vector<std::pair<qg::Format, qg::Format>> pairs;
  for (Backend be : {Backend::cuda, Backend::cpu})
    for (const GemmKernel& k : registry_of(be).gemm) {
      const std::pair<qg::Format, qg::Format> p{k.a_format, k.b_format};
      bool seen = !benched(k.a_format, k.b_format);
      for (const auto& q : pairs) seen = seen || q == p;
      if (!seen) pairs.push_back(p);
    }
  return pairs;
}

}  // namespace

void add_gemm_cases(CaseList& cases) {
  const auto pairs = format_pairs();
  for (Backend be : {Backend::cuda, Backend::cpu}) {
    const qg::detail::Registry& reg = registry_of(be);
    if (reg.gemm.empty()) continue;  // CUDA not built
    for (const Shape& s : g_opt.shapes)
      for (int64_t n : n_list(be))
        for (bool cold : {true, false}) {
          const int64_t m = s.m, k = s.k;
          for (const auto& [fa, fb] : pairs) {
            std::vector<const GemmKernel*> kernels;
            for (const GemmKernel& kern : reg.gemm)
              if (kern.a_format == fa && kern.b_format == fb && !slow_reference(kern, fa)) kernels.push_back(&kern);
            if (kernels.empty() && qg::is_integer_format(fa)) continue;  // only a reference kernel: not benched
            if (kernels.empty()) continue;
            const std::string op = op_name(fa, fb);
            cases.push_back({case_name(op, be, cold, m, k, n), be,
                             [=](benchmark::State& st) { bm_gemm(st, be, fa, fb, nullptr, m, k, n, cold); },
                             nullptr});
            if (be == Backend::cpu && n > g_opt.cpu_kernel_max_n) continue;
            for (const GemmKernel* kern : kernels)
              cases.push_back({case_name(op, be, cold, m, k, n, kern->name), be,
                               [=](benchmark::State& st) { bm_gemm(st, be, fa, fb, kern, m, k, n, cold); },
                               [=]() {
                                 // Probe pointers: aligned like the real buffers (256 bytes).
                                 const auto p = reinterpret_cast<void*>(uintptr_t(1) << 20);
                                 return kernel_refuses(*kern, be, gemm_args(be, fa, fb, m, n, k, p, p, p));
                               }});
          }
          if (be == Backend::cuda && have_cublas()) {
            cases.push_back({case_name("cublas_fp16", be, cold, m, k, n), be,
                             [=](benchmark::State& st) { bm_cublas_fp16(st, m, k, n, cold); }, nullptr});
            cases.push_back({case_name("cublas_i8", be, cold, m, k, n), be,
                             [=](benchmark::State& st) { bm_cublas_i8(st, m, k, n, cold); }, nullptr});
          }
        }
  }
}

}  // namespace qgbench
