// SPDX-License-Identifier: MIT
// bench/cases_linear.cpp: qg::linear_q4_0, the whole call (quantize_q8_1 of
// float32 x into a workspace, then the Q4_0 x Q8_1 GEMM writing fp32 y
// [N, M]; on sm_90a from N = 9 the warpgroup kernel quantizes x itself), on
// CUDA for every N of the N list and each shape:
//   linear_q4_0/cuda/<cold|hot|graph>/M:<M>/K:<K>/N:<N>/manual_time
// Beside quantize_q8_1/cuda/.../K:/N: and q4_0_q8_1/cuda/.../M:/K:/N: of the
// same run: the float-activation call a model makes, quantization included.
// Cold rotates x and the weights as those cases do (the same rotations).
// graph: hot, kGraphCalls calls in one CUDA graph (run_graph_timed), timed as
// llama.cpp's test-backend-ops perf mode times MUL_MAT: its figures set
// beside these compare like with like.
//   linear_q4_0_f16/cuda/<cold|hot>/M:<M>/K:<K>/N:<N>/manual_time
// The same call as a half-precision model makes it: fp16 x, fp16 y and an
// fp16 bias [M], so that the GEMM's epilogue adds the bias and converts.
#include <string>

#include "harness.h"

namespace qgbench {

namespace {

// x, y and the bias (null: none) all of dtype dt.
qg::LinearQ4_0Args linear_args(int64_t m, int64_t n, int64_t k, qg::DType dt, const void* x, void* ws, const void* w,
                               void* y, const void* bias) {
  qg::LinearQ4_0Args a;
  a.x = x;
  a.x_dtype = dt;
  a.n = n;
  a.k = k;
  a.x_row_stride = k;
  a.xq_workspace = ws;
  a.weight_q = w;
  a.m = m;
  a.weight_row_stride = qg::row_bytes(qg::format_traits(qg::Format::q4_0), k);
  a.y = y;
  a.y_dtype = dt;
  a.ldy = m;
  a.bias = bias;
  a.bias_dtype = dt;
  a.device = device_of(Backend::cuda);
  return a;
}

constexpr int kGraphCalls = 64;

enum class Mode { cold, hot, graph };

void bm_linear(benchmark::State& st, int64_t m, int64_t k, int64_t n, Mode mode, bool f16) {
  const bool cold = mode == Mode::cold;
  const Backend be = Backend::cuda;
  const int64_t esize = f16 ? 2 : 4;
  const int64_t xq_bytes = n * qg::row_bytes(qg::format_traits(qg::Format::q8_1), k);
  int64_t y_bytes = m * n * esize;
  if (y_bytes == xq_bytes) y_bytes += 4;  // output buffers of one size are one buffer
  RotationPtr w, x, ws, y, bias;
  std::string err = packed_rows(be, "w", qg::Format::q4_0, m, k, &w);
  if (err.empty()) err = f16 ? f16_rows(be, "x", n, k, &x) : f32_rows(be, n, k, &x);
  if (err.empty() && f16) err = f16_rows(be, "bias", 1, m, &bias);
  if (err.empty() && f16) err = bias->prepare(false);
  if (err.empty()) err = output_buffer(be, xq_bytes, &ws);
  if (err.empty()) err = output_buffer(be, y_bytes, &y);
  if (err.empty()) err = w->prepare(cold);
  if (err.empty()) err = x->prepare(cold);
  if (err.empty()) err = ws->prepare(false);
  if (err.empty()) err = y->prepare(false);
  if (!err.empty()) {
    st.SkipWithError(err.c_str());
    return;
  }
  qg::LinearQ4_0Args a =
      linear_args(m, n, k, f16 ? qg::DType::f16 : qg::DType::f32, x->slot(0), ws->slot(0), w->slot(0), y->slot(0),
                  f16 ? bias->slot(0) : nullptr);
  // The label names the GEMM kernel (after its quantizer, or quantizing x
  // itself where it can).
  qg::GemmArgs g;
  g.a = qg::packed_operand(a.weight_q, qg::Format::q4_0, m, k);
  g.b = qg::packed_operand(a.xq_workspace, qg::Format::q8_1, n, k);
  g.c = a.y;
  g.ldc = 1;
  g.ldc_n = m;
  g.c_dtype = a.y_dtype;
  g.epilogue.bias = a.bias;
  g.epilogue.bias_dtype = a.bias_dtype;
  g.device = a.device;
  qg::Explanation ex;
  if (qg::explain(g, &ex).ok()) st.SetLabel("gemm kernel " + ex.chosen);
  const Work work{2.0 * m * n * k, double(m * qg::row_bytes(qg::format_traits(qg::Format::q4_0), k)) +
                                       double(esize) * (n * k + m * n) + (f16 ? 2.0 * m : 0.0)};
  const qg::Stream stream = stream_of(be);
  auto call = [&]() {
    a.weight_q = w->take(cold);
    a.x = x->take(cold);
    return qg_error("qg::linear_q4_0", qg::linear_q4_0(a, stream));
  };
  if (mode == Mode::graph) run_graph_timed(st, work, kGraphCalls, call);
  else run_timed(st, be, work, warmups_for(be, *w, cold), call);
}

}  // namespace

void add_linear_cases(CaseList& cases) {
  const Backend be = Backend::cuda;
  if (qg::detail::cuda::registry().gemm.empty()) return;  // CUDA not built
  for (const Shape& s : g_opt.shapes)
    for (int64_t n : n_list(be)) {
      const int64_t m = s.m, k = s.k;
      for (bool cold : {true, false})
        for (bool f16 : {false, true})
          cases.push_back({case_name(f16 ? "linear_q4_0_f16" : "linear_q4_0", be, cold, m, k, n), be,
                           [=](benchmark::State& st) { bm_linear(st, m, k, n, cold ? Mode::cold : Mode::hot, f16); },
                           nullptr});
      cases.push_back({"linear_q4_0/cuda/graph/M:" + std::to_string(m) + "/K:" + std::to_string(k) +
                           "/N:" + std::to_string(n),
                       be, [=](benchmark::State& st) { bm_linear(st, m, k, n, Mode::graph, false); }, nullptr});
    }
}

}  // namespace qgbench
