// SPDX-License-Identifier: MIT
// bench/harness.h: the small harness under ./build/bench_gemm (Google
// Benchmark). DESIGN.md section 8 is the spec; measured numbers go to
// bench/RESULTS.md. The harness knows no format and no kernel: it owns the
// options, the ceilings measured at start-up, the buffer rotations (cold /
// hot), the timers and the counters. The cases (cases_gemm.cpp,
// cases_quantize.cpp) walk qg's format table and the CPU and CUDA kernel
// registries and add one benchmark per (op, backend, shape, mode[, kernel]).
//
// Case names: <op>/<device>/<cold|hot>[/M:<M>]/K:<K>/N:<N>[/kernel:<name>]
//   q4_0_q8_1/cuda/cold/M:4096/K:14336/N:1/manual_time             qg::gemm (the dispatcher's choice)
//   q4_0_q8_1/cuda/cold/M:4096/K:14336/N:1/kernel:cuda_mmvq/manual_time   one registry entry, forced
//   cublas_fp16/cuda/hot/M:14336/K:4096/N:512/manual_time           the baseline beside each case
//   quantize_q8_1/cuda/cold/K:14336/N:16/manual_time                 (N = rows)
//   dequantize_q4_0/cpu/hot/K:4096/N:4
//   q4_0_q8_1/cpu/hot/M:4096/K:14336/N:1
// CUDA cases time the device with events (Google Benchmark's manual time,
// hence the /manual_time suffix); CPU cases time the wall clock.
// Counters (per call, averaged over the timed iterations): us, TFLOP/s (2MNK,
// GEMM only), GB/s of compulsory traffic (inputs read once, outputs written
// once) and %floor = 100 * floor_time / time, floor_time = max(bytes /
// peak_bw, flops / peak_flops) with both peaks measured at start-up on the
// machine itself (CPU: bandwidth only).
//
// "cold": each call reads the next of several input buffers whose total
// exceeds 2x the last-level cache (L2 on the GPU), so the weights stream from
// DRAM as they do in decode; "hot": one buffer, repeated.
//
// Options: --qg_<name>=value or the environment variable QG_BENCH_<NAME>
// (the flag wins); --qg_help lists them.
#pragma once

#include <benchmark/benchmark.h>
#include <qg/qg.h>

#include "dispatch.h"

#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace qgbench {

constexpr int64_t kMiB = int64_t(1) << 20;
constexpr int64_t kGiB = int64_t(1) << 30;

// ===================================================================== options

struct Shape {
  int64_t m, k;
};

struct Options {
  std::vector<Shape> shapes;     // GEMM weight shapes M x K (quantize: their distinct K)
  std::vector<int64_t> gpu_n;    // N of the CUDA cases
  std::vector<int64_t> cpu_n;    // N of the CPU cases
  int64_t cpu_kernel_max_n = 32; // largest N of the CPU per-kernel cases (/kernel:<name>)
  int gpu_group = 64;
  bool blocker = true;
  int device = 0;
  int64_t cpu_cold_bytes = kGiB;
  int64_t wo_group = 128;        // group size of the weight-only (int4 x float) cases' scales
};
extern Options g_opt;

// ===================================================================== backends

enum class Backend { cpu, cuda };
const char* backend_name(Backend b);  // "cpu", "cuda"
qg::Device device_of(Backend b);      // the CPU, or the CUDA device under test
qg::Stream stream_of(Backend b);      // the bench's stream (nullptr on the CPU)
// Whether the backend was started (CPU: always; CUDA: a device is up). False
// only while listing cases (--benchmark_list_tests) on a machine without one.
bool backend_live(Backend b);
bool have_cublas();

// ===================================================================== work model

struct Work {
  double flops = 0;  // 0: no compute floor (quantize, dequantize)
  double bytes = 0;  // compulsory traffic: inputs read once, outputs written once
};

std::string qg_error(const char* what, const qg::Status& s);  // "" when ok

// Labels a case with the kernel it times, or with the dispatcher's choice
// when kernel is null. False, with the case skipped, when the public call's
// checks (`checked`) or the kernel's own judgement refuse the arguments: the
// bench hands a kernel only what the public call would accept.
template <class Kernel, class Args>
bool label_case(benchmark::State& st, Backend be, const Kernel* kernel, const Args& args, const qg::Status& checked);

// Why the dispatcher would not let kernel `k` run `a` ("" when it would):
// dispatch.h's kernel_admits. Before the backend's device is up (listing
// cases) the arch window cannot be judged and is taken as admitting.
template <class Kernel, class Args>
std::string kernel_refuses(const Kernel& k, Backend be, const Args& a) {
  qg::detail::DeviceCaps caps{k.arch.min_cc, ~0u};
  if (backend_live(be))
    if (const qg::Status s = qg::detail::device_caps("qg.bench", a.device, &caps); !s.ok()) return s.message();
  std::string why;
  if (qg::detail::kernel_admits(k, a, caps, &why)) return {};
  return why.empty() ? std::string("can_run refuses") : why;
}

template <class Kernel, class Args>
bool label_case(benchmark::State& st, Backend be, const Kernel* kernel, const Args& args, const qg::Status& checked) {
  if (!kernel) {
    qg::Explanation ex;
    if (qg::explain(args, &ex).ok()) st.SetLabel(ex.chosen);
    return true;
  }
  std::string err = qg_error("qg bench", checked);
  if (err.empty()) err = kernel_refuses(*kernel, be, args);
  if (!err.empty()) {
    st.SkipWithError((std::string(kernel->name) + ": " + err).c_str());
    return false;
  }
  st.SetLabel(kernel->name);
  return true;
}

// ============================================================= buffer rotation

// `count` slots of `slot_bytes` in one allocation; slots are filled with real
// data on first use (prepare), never inside a timed region. Rotations are
// kept for the whole run and shared by every case that asks for the same key.
struct Rotation {
  std::string what;
  void* base = nullptr;
  size_t slot_bytes = 0;
  size_t stride = 0;
  int count = 0;
  int next = 0;
  std::vector<char> filled;
  std::function<std::string(void*, int)> fill;
  // Optional: fills n contiguous slots in one pass (many small slots would
  // otherwise cost one fill, and one synchronisation, each).
  std::function<std::string(void*, int)> fill_all;
  // distinct > 0: only slots 0..distinct-1 get fresh data; slot i is a copy
  // of slot i % distinct (made with copy). Caches see addresses, not values,
  // so the copies are as cold as fresh data and much cheaper to make.
  int distinct = 0;
  std::function<std::string(void* dst, const void* src, size_t bytes)> copy;
  std::function<void(void*)> release;

  ~Rotation();
  void* slot(int i) const { return static_cast<char*>(base) + stride * size_t(i); }
  std::string prepare(bool cold);  // fills the slots a mode will read
  void* take(bool cold) {
    if (!cold) return slot(0);
    void* p = slot(next);
    next = (next + 1) % count;
    return p;
  }
};
using RotationPtr = std::shared_ptr<Rotation>;

// Inputs, rotated when cold: as many slots as make more than 2x the
// last-level cache. "" or the error.
// rows x k gaussian fp32 quantized by qg into `format` (contiguous rows);
// `role` keeps operands of equal shape apart ("w", "a").
std::string packed_rows(Backend b, const char* role, qg::Format format, int64_t rows, int64_t k,
                        RotationPtr* out);
std::string f32_rows(Backend b, int64_t rows, int64_t k, RotationPtr* out);
std::string f16_rows(Backend b, const char* role, int64_t rows, int64_t k, RotationPtr* out);
std::string bf16_rows(Backend b, const char* role, int64_t rows, int64_t k, RotationPtr* out);
// Outputs: one buffer, filled with NaN-ish bytes once (pages faulted in).
std::string output_buffer(Backend b, int64_t bytes, RotationPtr* out);

// Calls before timing: CUDA: enough to cycle the rotation once (module load,
// first touch); CPU: one (wakes the thread pool).
int warmups_for(Backend b, const Rotation& rotated, bool cold);

// ===================================================================== timing

// Times call() (one operation; on CUDA it enqueues on stream_of(cuda) and
// returns without synchronising) and sets the counters. CPU: wall clock per
// call. CUDA: calls queued in groups behind a held stream, each between its
// own event pair, so the events see device time only (manual time). A call's
// error skips the case with that message.
void run_timed(benchmark::State& st, Backend b, const Work& work, int warmups,
               const std::function<std::string()>& call);

// CUDA only: `reps` calls captured into one CUDA graph, the graph launched
// between an event pair, and the time per call is the graph's over reps: the
// calls back to back with no launch gaps, which is how llama.cpp's
// test-backend-ops perf mode times its operations (many copies of the node in
// one graph). An iteration is one call (a launch every reps iterations), so
// --benchmark_min_time means the same wall time as in the other cases.
// call() must not synchronise (stream capture forbids it).
void run_graph_timed(benchmark::State& st, const Work& work, int reps, const std::function<std::string()>& call);

// C[M, N] = W[M, K] . A[N, K]^T, all row-major fp16, fp32 accumulate, on the
// bench's CUDA stream (cublasGemmEx). Only when have_cublas().
std::string cublas_gemm_f16(int64_t m, int64_t n, int64_t k, const void* w, const void* a, void* c);
// The same with int8 W and A, int32 C (CUBLAS_COMPUTE_32I): torch._int_mm's kernels.
std::string cublas_gemm_i8(int64_t m, int64_t n, int64_t k, const void* w, const void* a, void* c);

// Reads `bytes` at p (16-byte aligned) and nothing else, on the bench's CUDA
// stream: the floor of a GEMM that must read them (read_floor.cu).
std::string gpu_read_floor(const void* p, int64_t bytes);
// Reads in_bytes at `in` and writes out_bytes (<= in_bytes) at `out`, the
// writes spread through the reads: the floor of a quantizer moving them.
std::string gpu_move_floor(const void* in, int64_t in_bytes, void* out, int64_t out_bytes);
// The same on the CPU: the GEMMs' thread pool reads the bytes (one
// contiguous slice a thread) and nothing else.
std::string cpu_read_floor(const void* p, int64_t bytes);

// ===================================================================== cases

struct Case {
  std::string name;
  Backend backend;
  std::function<void(benchmark::State&)> fn;
  // Asked once the backends are up: a reason not to register the case (a
  // forced kernel that refuses the shape or the device), or "".
  std::function<std::string()> refusal;
};
using CaseList = std::vector<Case>;

std::string case_name(const std::string& op, Backend b, bool cold, int64_t m, int64_t k, int64_t n,
                      const std::string& kernel = "");
// The N list of a backend, and the distinct K of the shapes.
const std::vector<int64_t>& n_list(Backend b);
std::vector<int64_t> distinct_k();

void add_gemm_cases(CaseList& cases);      // cases_gemm.cpp
void add_quantize_cases(CaseList& cases);  // cases_quantize.cpp
void add_linear_cases(CaseList& cases);    // cases_linear.cpp
void add_read_floor_cases(CaseList& cases);  // cases_read_floor.cpp

}  // namespace qgbench
