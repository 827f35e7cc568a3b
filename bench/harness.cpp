// SPDX-License-Identifier: MIT
// bench/harness.cpp: options, start-up ceilings, buffer rotations, timers,
// counters and main() of ./build/bench_gemm. See harness.h for the case names
// and counters; the cases are in cases_gemm.cpp and cases_quantize.cpp.
#include "harness.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <thread>
#include <utility>

#include "backend.h"  // the kernel registries, for the JSON context
#include "epilogue.h"  // fp32_to_bf16 (and, through quant_block.h, fp32_to_fp16): the core's roundings
#include "cpu/thread_pool.h"

#ifndef QG_BENCH_CUDA
#define QG_BENCH_CUDA 0
#endif
#ifndef QG_BENCH_CUBLAS
#define QG_BENCH_CUBLAS 0
#endif
#if !QG_BENCH_CUDA
#undef QG_BENCH_CUBLAS
#define QG_BENCH_CUBLAS 0
#endif
#ifndef QG_GIT_COMMIT
#define QG_GIT_COMMIT "unknown"
#endif

#if QG_BENCH_CUDA
#include <cuda_runtime.h>
#if QG_BENCH_CUBLAS
#include <cublas_v2.h>
#endif
#endif

namespace qgbench {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// ===================================================================== options

struct OptionSpec {
  const char* name;
  const char* help;
};
const OptionSpec kOptionSpecs[] = {
    {"shapes", "comma list of MxK weight shapes (default 4096x14336,14336x4096)"},
    {"n", "comma list of N for the CUDA cases (default 1,2,4,8,16,32,128,512,4096)"},
    {"cpu_n", "comma list of N for the CPU cases (default: the CUDA list cut at cpu_max_n)"},
    {"cpu_max_n", "largest N of the default CPU list (default 128)"},
    {"cpu_kernel_max_n", "largest N of the CPU per-kernel cases (.../kernel:<name>; default 32: "
                         "the scalar kernel is ~10x slower than the vector one)"},
    {"gpu_group", "most calls queued behind one hold of the stream; each call still has its own "
                  "event pair (default 64; the group is sized to about 1 ms of work)"},
    {"blocker", "1: hold the stream with a host function until a group of launches is queued, "
                "so host launch latency stays out of the events (default 1)"},
    {"device", "CUDA device ordinal (default 0)"},
    {"cpu_cold_bytes", "cap on the CPU cold rotation per buffer set (default 1 GiB)"},
    {"wo_group", "group size of the weight-only (i4 x f16/bf16) cases' scales: a power of two "
                 "from 32 dividing every shape's K (default 128, the GPTQ/AWQ shape)"},
};

std::map<std::string, std::string> g_flags;  // --qg_<name>=value

std::string option(const std::string& name) {
  auto it = g_flags.find(name);
  if (it != g_flags.end()) return it->second;
  std::string env = "QG_BENCH_";
  for (char ch : name) env += static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  const char* v = std::getenv(env.c_str());
  return v ? std::string(v) : std::string();
}

int64_t option_int(const std::string& name, int64_t fallback) {
  std::string v = option(name);
  if (v.empty()) return fallback;
  char* end = nullptr;
  long long x = std::strtoll(v.c_str(), &end, 10);
  if (end == v.c_str()) {
    std::fprintf(stderr, "bench_gemm: option %s=%s is not an integer; using %lld\n", name.c_str(),
                 v.c_str(), static_cast<long long>(fallback));
    return fallback;
  }
  return x;
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string cur;
  std::istringstream in(s);
  while (std::getline(in, cur, sep))
    if (!cur.empty()) out.push_back(cur);
  return out;
}

std::vector<int64_t> option_list(const std::string& name, std::vector<int64_t> fallback) {
  std::string v = option(name);
  if (v.empty()) return fallback;
  std::vector<int64_t> out;
  for (const std::string& item : split(v, ',')) {
    long long x = std::atoll(item.c_str());
    if (x > 0) out.push_back(x);
  }
  return out.empty() ? fallback : out;
}

void load_options() {
  g_opt.shapes.clear();
  std::string shapes = option("shapes");
  if (shapes.empty()) shapes = "4096x14336,14336x4096";
  for (const std::string& item : split(shapes, ',')) {
    long long m = 0, k = 0;
    if (std::sscanf(item.c_str(), "%lldx%lld", &m, &k) == 2 && m > 0 && k > 0 && k % 32 == 0)
      g_opt.shapes.push_back({m, k});
    else
      std::fprintf(stderr, "bench_gemm: ignoring shape '%s' (want MxK, K a multiple of 32)\n",
                   item.c_str());
  }
  const std::vector<int64_t> llm_n{1, 2, 4, 8, 16, 32, 64, 128, 512, 4096};
  g_opt.gpu_n = option_list("n", llm_n);
  // The CPU shape policy: the same LLM shapes, N cut at cpu_max_n, so that a
  // 2-core machine gets through the CPU cases in seconds.
  const int64_t cpu_max_n = option_int("cpu_max_n", 128);
  std::vector<int64_t> cpu_default;
  for (int64_t n : llm_n)
    if (n <= cpu_max_n) cpu_default.push_back(n);
  g_opt.cpu_n = option_list("cpu_n", cpu_default);
  g_opt.cpu_kernel_max_n = option_int("cpu_kernel_max_n", 32);
  g_opt.gpu_group = static_cast<int>(std::min<int64_t>(1024, std::max<int64_t>(1, option_int("gpu_group", 64))));
  g_opt.blocker = option_int("blocker", 1) != 0;
  g_opt.device = static_cast<int>(option_int("device", 0));
  g_opt.cpu_cold_bytes = std::max<int64_t>(kMiB, option_int("cpu_cold_bytes", kGiB));
  const int64_t wo_group = option_int("wo_group", 128);
  bool group_fits = wo_group >= 32 && (wo_group & (wo_group - 1)) == 0;
  for (const Shape& s : g_opt.shapes) group_fits = group_fits && s.k % wo_group == 0;
  if (group_fits)
    g_opt.wo_group = wo_group;
  else
    std::fprintf(stderr, "bench_gemm: ignoring wo_group=%lld (want a power of two from 32 dividing every K); using 128\n",
                 static_cast<long long>(wo_group));
}

// Whether Google Benchmark's --benchmark_filter selects a case name: used only
// to skip start-up measurements (peaks, CUDA context) nothing will use.
bool filter_selects(const std::string& name) {
  std::string f = benchmark::GetBenchmarkFilter();
  if (f.empty() || f == "all") return true;
  bool negative = false;
  if (f[0] == '-') {
    negative = true;
    f = f.substr(1);
  }
  try {
    std::regex re(f, std::regex::extended);
    return std::regex_search(name, re) != negative;
  } catch (const std::exception&) {
    return true;  // benchmark will judge the filter itself
  }
}

// ============================================================= data generators

// splitmix64: fast, seeded, good enough to make gaussian test data.
struct Rng {
  uint64_t s;
  explicit Rng(uint64_t seed) : s(seed) {}
  uint64_t next() {
    uint64_t z = (s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  double uniform() { return ((next() >> 11) + 0.5) * (1.0 / 9007199254740992.0); }  // (0, 1)
};

void fill_gaussian(float* x, size_t n, uint64_t seed) {
  Rng rng(seed);
  const double two_pi = 6.283185307179586;
  for (size_t i = 0; i < n; i += 2) {
    double r = std::sqrt(-2.0 * std::log(rng.uniform()));
    double t = two_pi * rng.uniform();
    x[i] = static_cast<float>(r * std::cos(t));
    if (i + 1 < n) x[i + 1] = static_cast<float>(r * std::sin(t));
  }
}

size_t round_up(size_t x, size_t a) { return (x + a - 1) / a * a; }

int64_t packed_row_bytes(qg::Format f, int64_t k) { return qg::row_bytes(qg::format_traits(f), k); }

// How many slots of slot_bytes a cold rotation needs: together more than
// 2x the cache, and at least two so that consecutive calls never share one.
// At most 65536 (only operands under ~1.6 KiB, e.g. one activation row of
// K <= 1024, fall short of 2x the cache then; filling millions of slots one
// by one would take minutes).
int cold_slots(int64_t slot_bytes, int64_t cache_bytes, int64_t cap_bytes) {
  int64_t n = std::max<int64_t>(2, 2 * cache_bytes / std::max<int64_t>(1, slot_bytes) + 1);
  n = std::min<int64_t>(n, 65536);
  if (cap_bytes > 0) n = std::min(n, std::max<int64_t>(2, cap_bytes / std::max<int64_t>(1, slot_bytes)));
  return static_cast<int>(n);
}

void set_counters(benchmark::State& st, double total_s, int64_t calls, const Work& w, double peak_bw,
                  double peak_flops) {
  if (calls <= 0 || total_s <= 0) return;
  const double t = total_s / double(calls);
  st.counters["us"] = t * 1e6;
  if (w.flops > 0) st.counters["TFLOP/s"] = w.flops / t * 1e-12;
  st.counters["GB/s"] = w.bytes / t * 1e-9;
  double floor_s = 0;
  if (peak_bw > 0) floor_s = w.bytes / peak_bw;
  if (peak_flops > 0 && w.flops > 0) floor_s = std::max(floor_s, w.flops / peak_flops);
  if (floor_s > 0) st.counters["%floor"] = 100.0 * floor_s / t;
}

std::map<std::string, RotationPtr> g_buffers;  // kept for the whole run; cases share them

using FillFn = std::function<std::string(void*, int)>;

// ========================================================================== CPU

int64_t cpu_llc_bytes(std::string* source) {
  // Sum the distinct last-level (L3) instances, so a chip with several L3
  // slices (chiplets) is counted whole.
  std::set<std::string> seen;
  int64_t total = 0;
  const long ncpu = sysconf(_SC_NPROCESSORS_CONF);
  for (long cpu = 0; cpu < std::max(1L, ncpu); ++cpu) {
    for (int idx = 0; idx < 10; ++idx) {
      const std::string dir = "/sys/devices/system/cpu/cpu" + std::to_string(cpu) + "/cache/index" +
                              std::to_string(idx) + "/";
      std::ifstream level_f(dir + "level");
      if (!level_f) break;
      int level = 0;
      level_f >> level;
      if (level != 3) continue;
      std::string shared, size;
      std::ifstream(dir + "shared_cpu_list") >> shared;
      std::ifstream(dir + "size") >> size;
      if (size.empty() || !seen.insert(shared.empty() ? dir : shared).second) continue;
      int64_t v = std::atoll(size.c_str());
      const char unit = size.back();
      if (unit == 'K') v *= 1024;
      if (unit == 'M') v *= kMiB;
      total += v;
    }
  }
  if (total > 0) {
    *source = "sysfs L3, " + std::to_string(seen.size()) + " instance(s)";
    return total;
  }
#ifdef _SC_LEVEL3_CACHE_SIZE
  const long v = sysconf(_SC_LEVEL3_CACHE_SIZE);
  if (v > 0) {
    *source = "sysconf(_SC_LEVEL3_CACHE_SIZE)";
    return v;
  }
#endif
  *source = "default";
  return 64 * kMiB;
}

struct Cpu {
  bool init = false;
  int threads = 1;
  int64_t llc_bytes = 64 * kMiB;
  std::string llc_source;
  double peak_bw = 0;  // bytes/s
  std::vector<float> pool;
};
Cpu g_cpu;

void* host_alloc(size_t bytes) { return std::aligned_alloc(4096, round_up(std::max<size_t>(bytes, 1), 4096)); }

// Many threads, as the GEMM uses: one core cannot draw the socket's bandwidth.
double measure_cpu_bandwidth(int threads) {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  const double ram = double(pages) * double(page);
  const size_t bytes = (ram >= 16.0 * kGiB) ? size_t(kGiB) : size_t(256 * kMiB);
  char* src = static_cast<char*>(host_alloc(bytes));
  char* dst = static_cast<char*>(host_alloc(bytes));
  if (!src || !dst) {
    std::free(src);
    std::free(dst);
    return 0;
  }
  for (size_t i = 0; i < bytes; i += 4096) src[i] = static_cast<char>(i * 131 + 7);  // fault in
  std::memset(dst, 1, bytes);
  auto copy = [&] {
    std::vector<std::thread> pool;
    const size_t part = round_up(bytes / size_t(threads), 4096);
    for (int t = 0; t < threads; ++t) {
      const size_t lo = std::min(bytes, part * size_t(t)), hi = std::min(bytes, lo + part);
      pool.emplace_back([=] { std::memcpy(dst + lo, src + lo, hi - lo); });
    }
    for (auto& th : pool) th.join();
  };
  copy();  // warm-up
  double best = 0;
  for (int rep = 0; rep < 3; ++rep) {
    auto t0 = Clock::now();
    copy();
    best = std::max(best, 2.0 * double(bytes) / seconds_since(t0));  // read + write
  }
  benchmark::DoNotOptimize(dst[bytes / 2]);
  std::free(src);
  std::free(dst);
  return best;
}

void cpu_init() {
  if (g_cpu.init) return;
  g_cpu.init = true;
  g_cpu.threads = std::max(1, qg::cpu_threads());
  g_cpu.llc_bytes = cpu_llc_bytes(&g_cpu.llc_source);
  g_cpu.peak_bw = measure_cpu_bandwidth(g_cpu.threads);
  std::fprintf(stderr,
               "bench_gemm: CPU: %d threads, last-level cache %.1f MiB (%s), peak bandwidth "
               "%.1f GB/s (threaded memcpy, read + write bytes, best of 3)\n",
               g_cpu.threads, double(g_cpu.llc_bytes) / kMiB, g_cpu.llc_source.c_str(), g_cpu.peak_bw * 1e-9);
}

const std::vector<float>& cpu_pool() {
  if (g_cpu.pool.empty()) {
    g_cpu.pool.resize(size_t(1) << 22);  // 16 MiB of N(0, 1)
    fill_gaussian(g_cpu.pool.data(), g_cpu.pool.size(), 0x9b05u);
  }
  return g_cpu.pool;
}

// rows x k fp32 from random places in the pool, quantized by qg on the CPU.

// rows x k fp32 values from x quantized to fmt, contiguous, into y on device.
// Formats with outside scales are quantized per row; the scales go to
// `scales` (rows floats on device), which the GEMM cases do not read: they
// time the codes, and give scales of their own to the epilogue.
qg::QuantizeArgs quantize_chunk(qg::Format fmt, const float* x, int64_t rows, int64_t k, void* y, qg::Device device,
                                float* scales = nullptr) {
  qg::QuantizeArgs q;
  if (qg::format_traits(fmt).scale_place == qg::ScalePlace::outside) {
    q.granularity = qg::Granularity::row;
    q.scales = scales;
  }
  q.format = fmt;
  q.x = x;
  q.x_dtype = qg::DType::f32;
  q.rows = rows;
  q.k = k;
  q.x_row_stride = k;
  q.y = y;
  q.y_row_stride = qg::row_bytes(qg::format_traits(fmt), k);
  q.device = device;
  return q;
}

std::string cpu_fill_quantized(qg::Format fmt, void* dst, int64_t rows, int64_t k, uint64_t seed) {
  const std::vector<float>& pool = cpu_pool();
  const int64_t pool_n = int64_t(pool.size());
  if (k > pool_n / 2) return "K too large for the data pool";
  const int64_t row_bytes = packed_row_bytes(fmt, k);
  const int64_t chunk = std::max<int64_t>(1, std::min<int64_t>(rows, pool_n / 2 / k));
  Rng rng(seed);
  std::vector<float> scales(static_cast<size_t>(chunk));
  for (int64_t r = 0; r < rows; r += chunk) {
    const int64_t nr = std::min(chunk, rows - r);
    const int64_t off = int64_t(rng.next() % uint64_t(pool_n - nr * k + 1)) / 64 * 64;
    const qg::QuantizeArgs q = quantize_chunk(fmt, pool.data() + off, nr, k, static_cast<char*>(dst) + r * row_bytes,
                                              qg::Device::cpu(), scales.data());
    std::string err = qg_error("qg::quantize", qg::quantize(q));
    if (!err.empty()) return err;
  }
  return {};
}

std::string cpu_fill_f32(void* dst, int64_t n, uint64_t seed) {
  const std::vector<float>& pool = cpu_pool();
  const int64_t pool_n = int64_t(pool.size());
  const int64_t chunk = pool_n / 2;
  Rng rng(seed);
  for (int64_t i = 0; i < n; i += chunk) {
    const int64_t c = std::min(chunk, n - i);
    const int64_t off = int64_t(rng.next() % uint64_t(pool_n - c + 1));
    std::memcpy(static_cast<float*>(dst) + i, pool.data() + off, size_t(c) * 4);
  }
  return {};
}

// n 16-bit floats (fp16 or bf16 bits by `to_bits`) from the fp32 pool.
std::string cpu_fill_16(void* dst, int64_t n, uint64_t seed, uint16_t (*to_bits)(float)) {
  std::vector<float> tmp(size_t(std::min<int64_t>(n, int64_t(1) << 20)));
  Rng rng(seed);
  for (int64_t i = 0; i < n; i += int64_t(tmp.size())) {
    const int64_t c = std::min<int64_t>(int64_t(tmp.size()), n - i);
    cpu_fill_f32(tmp.data(), c, rng.next());
    for (int64_t j = 0; j < c; ++j) static_cast<uint16_t*>(dst)[i + j] = to_bits(tmp[size_t(j)]);
  }
  return {};
}
std::string cpu_fill_f16(void* dst, int64_t n, uint64_t seed) {
  return cpu_fill_16(dst, n, seed, qg::detail::fp32_to_fp16);
}
std::string cpu_fill_bf16(void* dst, int64_t n, uint64_t seed) {
  return cpu_fill_16(dst, n, seed, qg::detail::fp32_to_bf16);
}

// ========================================================================= CUDA
#if QG_BENCH_CUDA

std::string cuda_error(const char* what, cudaError_t e) {
  if (e == cudaSuccess) return {};
  return std::string(what) + ": " + cudaGetErrorName(e) + ": " + cudaGetErrorString(e);
}
#if QG_BENCH_CUBLAS
std::string cublas_error(const char* what, cublasStatus_t s) {
  if (s == CUBLAS_STATUS_SUCCESS) return {};
  return std::string(what) + ": " + cublasGetStatusName(s) + ": " + cublasGetStatusString(s);
}
#endif

// Holds the stream at a host function until every timed launch is queued, so
// the events measure the device back to back and not the host's launch
// latency (the device would otherwise reach the start event, then wait for
// the launch). Times out rather than deadlock if a call synchronises.
struct StreamBlocker {
  std::atomic<int> open{1};
  std::atomic<int> timed_out{0};
  static void CUDART_CB hold(void* p) {
    auto* b = static_cast<StreamBlocker*>(p);
    const auto t0 = Clock::now();
    while (!b->open.load(std::memory_order_acquire)) {
      if (seconds_since(t0) > 10.0) {
        b->timed_out.store(1);
        return;
      }
      std::this_thread::yield();
    }
  }
  cudaError_t arm(cudaStream_t s) {
    open.store(0);
    timed_out.store(0);
    return cudaLaunchHostFunc(s, hold, this);
  }
  void release() { open.store(1, std::memory_order_release); }
};

struct Gpu {
  bool ok = false;
  std::string why;
  int dev = 0;
  std::string name;
  int cc = 0;
  int sms = 0;
  int64_t l2_bytes = 0;
  int64_t mem_bytes = 0;
  cudaStream_t stream = nullptr;
  cudaEvent_t ev0 = nullptr, ev1 = nullptr;
  std::vector<cudaEvent_t> evs;  // 2 per call of a group
  StreamBlocker blocker;
  float* pool32 = nullptr;     // N(0, 1) fp32
  uint16_t* pool16 = nullptr;  // the same as fp16 bits
  uint16_t* pool16bf = nullptr;  // and as bf16 bits
  float* scratch = nullptr;    // scales of integer quantization while filling (not read)
  int64_t scratch_n = 0;
  int64_t pool_n = 0;
  double peak_bw = 0;     // bytes/s
  double peak_flops = 0;  // flop/s, cuBLAS fp16 tensor cores
  std::string peak_note;
#if QG_BENCH_CUBLAS
  cublasHandle_t blas = nullptr;
  void* blas_ws = nullptr;
#endif
};
Gpu g_gpu;

// Device allocation; on out-of-memory, drop the cached buffers of other
// cases (the shared_ptrs in use survive) and try once more.
std::string device_alloc(size_t bytes, void** p) {
  cudaError_t e = cudaMalloc(p, bytes);
  if (e == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();
    g_buffers.clear();
    e = cudaMalloc(p, bytes);
  }
  return cuda_error("cudaMalloc", e);
}

// n elements of `elem` bytes from random places of a device pool.
std::string gpu_fill_from_pool(void* dst, const void* pool, int elem, int64_t n, uint64_t seed) {
  const int64_t chunk = g_gpu.pool_n / 2;
  Rng rng(seed);
  for (int64_t i = 0; i < n; i += chunk) {
    const int64_t c = std::min(chunk, n - i);
    const int64_t off = int64_t(rng.next() % uint64_t(g_gpu.pool_n - c + 1)) / 64 * 64;
    std::string err = cuda_error(
        "cudaMemcpyAsync", cudaMemcpyAsync(static_cast<char*>(dst) + i * elem,
                                           static_cast<const char*>(pool) + off * elem, size_t(c) * elem,
                                           cudaMemcpyDeviceToDevice, g_gpu.stream));
    if (!err.empty()) return err;
  }
  return cuda_error("cudaStreamSynchronize", cudaStreamSynchronize(g_gpu.stream));
}
std::string gpu_fill_f32(void* dst, int64_t n, uint64_t seed) {
  return gpu_fill_from_pool(dst, g_gpu.pool32, 4, n, seed);
}
std::string gpu_fill_f16(void* dst, int64_t n, uint64_t seed) {
  return gpu_fill_from_pool(dst, g_gpu.pool16, 2, n, seed);
}
std::string gpu_fill_bf16(void* dst, int64_t n, uint64_t seed) {
  return gpu_fill_from_pool(dst, g_gpu.pool16bf, 2, n, seed);
}

// rows x k fp32 from random places in the pool, quantized by qg on the device.
std::string gpu_fill_quantized(qg::Format fmt, void* dst, int64_t rows, int64_t k, uint64_t seed) {
  if (k > g_gpu.pool_n / 2) return "K too large for the data pool";
  const int64_t row_bytes = packed_row_bytes(fmt, k);
  const int64_t chunk = std::max<int64_t>(1, std::min<int64_t>(rows, g_gpu.pool_n / 2 / k));
  Rng rng(seed);
  if (g_gpu.scratch_n < chunk) {
    if (g_gpu.scratch) cudaFree(g_gpu.scratch);
    g_gpu.scratch = nullptr;
    const std::string e = cuda_error("cudaMalloc", cudaMalloc(&g_gpu.scratch, size_t(chunk) * 4));
    if (!e.empty()) return e;
    g_gpu.scratch_n = chunk;
  }
  for (int64_t r = 0; r < rows; r += chunk) {
    const int64_t nr = std::min(chunk, rows - r);
    const int64_t off = int64_t(rng.next() % uint64_t(g_gpu.pool_n - nr * k + 1)) / 64 * 64;
    const qg::QuantizeArgs q = quantize_chunk(fmt, g_gpu.pool32 + off, nr, k, static_cast<char*>(dst) + r * row_bytes,
                                              qg::Device::cuda(g_gpu.dev), g_gpu.scratch);
    std::string err = qg_error("qg::quantize", qg::quantize(q, g_gpu.stream));
    if (!err.empty()) return err;
  }
  return cuda_error("cudaStreamSynchronize", cudaStreamSynchronize(g_gpu.stream));
}

#if QG_BENCH_CUBLAS
// C[M, N] = W[M, K] . A[N, K]^T, all row-major fp16, fp32 accumulate. In
// cuBLAS's column-major terms that is C^T (N x M) = A (op T on K x N) . W^T
// (K x M): the "TN" layout its fastest kernels are built for.
std::string cublas_f16(int64_t m, int64_t n, int64_t k, const void* w, const void* a, void* c) {
  if (m > INT32_MAX || n > INT32_MAX || k > INT32_MAX) return "cuBLAS takes 32-bit dimensions";
  const float alpha = 1.0f, beta = 0.0f;
  return cublas_error("cublasGemmEx",
                      cublasGemmEx(g_gpu.blas, CUBLAS_OP_T, CUBLAS_OP_N, int(n), int(m), int(k), &alpha, a,
                                   CUDA_R_16F, int(k), w, CUDA_R_16F, int(k), &beta, c, CUDA_R_16F, int(n),
                                   CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

// The same product with int8 operands and an int32 result (CUBLAS_COMPUTE_32I),
// "TN" as above: cuBLAS hands it to its cuBLASLt int8 kernels, which is what
// torch._int_mm runs.
std::string cublas_i8(int64_t m, int64_t n, int64_t k, const void* w, const void* a, void* c) {
  if (m > INT32_MAX || n > INT32_MAX || k > INT32_MAX) return "cuBLAS takes 32-bit dimensions";
  const int32_t alpha = 1, beta = 0;
  return cublas_error("cublasGemmEx",
                      cublasGemmEx(g_gpu.blas, CUBLAS_OP_T, CUBLAS_OP_N, int(n), int(m), int(k), &alpha, a, CUDA_R_8I,
                                   int(k), w, CUDA_R_8I, int(k), &beta, c, CUDA_R_32I, int(n), CUBLAS_COMPUTE_32I,
                                   CUBLAS_GEMM_DEFAULT));
}
#endif

// One timed operation between ev0 and ev1; seconds, or < 0 with *err.
double gpu_time_once(const std::function<std::string()>& op, std::string* err) {
  *err = cuda_error("cudaEventRecord", cudaEventRecord(g_gpu.ev0, g_gpu.stream));
  if (err->empty()) *err = op();
  if (err->empty()) *err = cuda_error("cudaEventRecord", cudaEventRecord(g_gpu.ev1, g_gpu.stream));
  if (err->empty()) *err = cuda_error("cudaEventSynchronize", cudaEventSynchronize(g_gpu.ev1));
  float ms = 0;
  if (err->empty()) *err = cuda_error("cudaEventElapsedTime", cudaEventElapsedTime(&ms, g_gpu.ev0, g_gpu.ev1));
  return err->empty() ? double(ms) * 1e-3 : -1.0;
}

// The ceilings: device-to-device copy bandwidth and cuBLAS fp16 8192^3.
std::string measure_gpu_peaks() {
  std::string err;
  // Bandwidth: device-to-device copy of 1 GiB (2 GiB of traffic), best of 5
  // after 2 warm-ups.
  {
    const size_t bytes = size_t(kGiB);
    void *src = nullptr, *dst = nullptr;
    err = device_alloc(bytes, &src);
    if (err.empty()) err = device_alloc(bytes, &dst);
    if (err.empty()) err = gpu_fill_f32(src, int64_t(bytes / 4), 7);
    for (int rep = 0; rep < 7 && err.empty(); ++rep) {
      const double s = gpu_time_once([&] {
        return cuda_error("cudaMemcpyAsync", cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, g_gpu.stream));
      }, &err);
      if (err.empty() && rep >= 2 && s > 0) g_gpu.peak_bw = std::max(g_gpu.peak_bw, 2.0 * double(bytes) / s);
    }
    if (src) cudaFree(src);
    if (dst) cudaFree(dst);
    if (!err.empty()) return "bandwidth peak: " + err;
  }
#if QG_BENCH_CUBLAS
  // Compute: cuBLAS fp16 GEMM 8192^3, fp32 accumulate, tensor cores, best of
  // 10 after 3 warm-ups.
  {
    const int64_t n = 8192;
    const size_t elems = size_t(n) * n;
    void *a = nullptr, *b = nullptr, *c = nullptr;
    err = device_alloc(elems * 2, &a);
    if (err.empty()) err = device_alloc(elems * 2, &b);
    if (err.empty()) err = device_alloc(elems * 2, &c);
    if (err.empty()) err = gpu_fill_f16(a, int64_t(elems), 11);
    if (err.empty()) err = gpu_fill_f16(b, int64_t(elems), 12);
    for (int rep = 0; rep < 13 && err.empty(); ++rep) {
      const double s = gpu_time_once([&] { return cublas_f16(n, n, n, a, b, c); }, &err);
      if (err.empty() && rep >= 3 && s > 0)
        g_gpu.peak_flops = std::max(g_gpu.peak_flops, 2.0 * double(n) * n * n / s);
    }
    if (a) cudaFree(a);
    if (b) cudaFree(b);
    if (c) cudaFree(c);
    if (!err.empty()) return "compute peak: " + err;
  }
#endif
  return {};
}

void gpu_init() {
  Gpu& g = g_gpu;
  std::string why;
  if (qg::cuda_devices(&why).empty()) {
    g.why = "qg sees no CUDA device" + (why.empty() ? std::string() : ": " + why);
    return;
  }
  g.dev = g_opt.device;
  std::string err = cuda_error("cudaSetDevice", cudaSetDevice(g.dev));
  cudaDeviceProp prop;
  if (err.empty()) err = cuda_error("cudaGetDeviceProperties", cudaGetDeviceProperties(&prop, g.dev));
  if (err.empty()) {
    g.name = prop.name;
    g.cc = prop.major * 10 + prop.minor;
    g.sms = prop.multiProcessorCount;
    g.l2_bytes = prop.l2CacheSize;
    g.mem_bytes = int64_t(prop.totalGlobalMem);
    err = cuda_error("cudaStreamCreateWithFlags", cudaStreamCreateWithFlags(&g.stream, cudaStreamNonBlocking));
  }
  if (err.empty()) err = cuda_error("cudaEventCreate", cudaEventCreate(&g.ev0));
  if (err.empty()) err = cuda_error("cudaEventCreate", cudaEventCreate(&g.ev1));
  g.evs.assign(size_t(2 * g_opt.gpu_group), nullptr);
  for (size_t i = 0; i < g.evs.size() && err.empty(); ++i)
    err = cuda_error("cudaEventCreate", cudaEventCreate(&g.evs[i]));
#if QG_BENCH_CUBLAS
  if (err.empty()) err = cublas_error("cublasCreate", cublasCreate(&g.blas));
  if (err.empty()) err = cublas_error("cublasSetStream", cublasSetStream(g.blas, g.stream));
  // Our own workspace, so cuBLAS never allocates while the stream is held.
  const size_t ws_bytes = size_t(32 * kMiB);
  if (err.empty()) err = device_alloc(ws_bytes, &g.blas_ws);
  if (err.empty()) err = cublas_error("cublasSetWorkspace", cublasSetWorkspace(g.blas, g.blas_ws, ws_bytes));
#endif
  if (err.empty()) {
    // 16M gaussians: every buffer is cut from random places of this pool.
    g.pool_n = int64_t(1) << 24;
    std::vector<float> host(size_t(g.pool_n));
    fill_gaussian(host.data(), host.size(), 0x5eedu);
    std::vector<uint16_t> host16(host.size()), host16bf(host.size());
    for (size_t i = 0; i < host.size(); ++i) {
      host16[i] = qg::detail::fp32_to_fp16(host[i]);
      host16bf[i] = qg::detail::fp32_to_bf16(host[i]);
    }
    void* p = nullptr;
    err = device_alloc(host.size() * 4, &p);
    g.pool32 = static_cast<float*>(p);
    if (err.empty()) err = device_alloc(host.size() * 2, &p);
    if (err.empty()) g.pool16 = static_cast<uint16_t*>(p);
    if (err.empty()) err = device_alloc(host.size() * 2, &p);
    if (err.empty()) g.pool16bf = static_cast<uint16_t*>(p);
    if (err.empty())
      err = cuda_error("cudaMemcpy", cudaMemcpy(g.pool32, host.data(), host.size() * 4, cudaMemcpyHostToDevice));
    if (err.empty())
      err = cuda_error("cudaMemcpy", cudaMemcpy(g.pool16, host16.data(), host16.size() * 2, cudaMemcpyHostToDevice));
    if (err.empty())
      err = cuda_error("cudaMemcpy",
                       cudaMemcpy(g.pool16bf, host16bf.data(), host16bf.size() * 2, cudaMemcpyHostToDevice));
  }
  if (!err.empty()) {
    g.why = err;
    return;
  }
  g.ok = true;
  const std::string perr = measure_gpu_peaks();
  if (!perr.empty()) {
    g.peak_note = "peak measurement failed: " + perr;
    std::fprintf(stderr, "bench_gemm: %s\n", g.peak_note.c_str());
  }
  std::fprintf(stderr,
               "bench_gemm: CUDA device %d: %s (sm_%d, %d SMs, L2 %.1f MiB); peak bandwidth %.1f GB/s "
               "(1 GiB device-to-device copy, read + write bytes, best of 5); peak compute %.1f TFLOP/s "
               "(cuBLAS fp16 8192^3, fp32 accumulate, tensor cores, best of 10%s)\n",
               g.dev, g.name.c_str(), g.cc, g.sms, double(g.l2_bytes) / kMiB, g.peak_bw * 1e-9,
               g.peak_flops * 1e-12, QG_BENCH_CUBLAS ? "" : "; cuBLAS not built: no compute floor");
  std::fprintf(stderr,
               "bench_gemm: note: the int8 (dp4a / int8 mma) kernels are judged against that fp16 "
               "tensor-core rate in %%floor\n");
}

// Calls are queued in groups behind a held stream, each call between its own
// cudaEvent pair, so the device runs them back to back and the events see
// device time only, not the host's launch latency nor a per-call
// synchronisation. Each benchmark iteration then reports one measured call
// (SetIterationTime); a group is measured whenever the measured calls run
// out. Wall time stays near the device time even for 2 us kernels.
void run_gpu_case(benchmark::State& st, const Work& work, int warmups, const std::function<std::string()>& launch) {
  Gpu& g = g_gpu;
  // Warm-up (module load, first-touch, handles): one call alone, then the
  // rest timed as a whole to size the groups. A call slower than 20 ms needs
  // no more warming (one call streams more than the L2 holds), so a slow
  // kernel (cuda_generic at N = 4096: ~1 s) costs one warm-up, not a rotation.
  std::string err;
  double first = gpu_time_once(launch, &err);
  if (err.empty() && first >= 20e-3) first = std::min(first, gpu_time_once(launch, &err));  // module load?
  const int rest = first < 20e-3 ? std::max(0, warmups - 1) : 0;
  if (err.empty() && rest > 0) err = cuda_error("cudaEventRecord", cudaEventRecord(g.ev0, g.stream));
  for (int i = 0; i < rest && err.empty(); ++i) err = launch();
  if (err.empty() && rest > 0) err = cuda_error("cudaEventRecord", cudaEventRecord(g.ev1, g.stream));
  if (err.empty()) err = cuda_error("warm-up: cudaStreamSynchronize", cudaStreamSynchronize(g.stream));
  if (err.empty()) err = cuda_error("warm-up: cudaGetLastError", cudaGetLastError());
  float warm_ms = 0;
  if (err.empty() && rest > 0)
    err = cuda_error("cudaEventElapsedTime", cudaEventElapsedTime(&warm_ms, g.ev0, g.ev1));
  if (!err.empty()) {
    st.SkipWithError(err.c_str());
    return;
  }
  const double per_call = std::max(1e-7, rest > 0 ? double(warm_ms) * 1e-3 / rest : first);
  const int group = int(std::max(1.0, std::min(double(g_opt.gpu_group), 1e-3 / per_call)));

  std::vector<double> measured;  // seconds per call, not yet reported
  size_t next = 0;
  auto measure_group = [&]() -> std::string {
    measured.clear();
    next = 0;
    std::string e;
    if (g_opt.blocker) e = cuda_error("cudaLaunchHostFunc", g.blocker.arm(g.stream));
    int queued = 0;
    for (; queued < group && e.empty(); ++queued) {
      e = cuda_error("cudaEventRecord", cudaEventRecord(g.evs[2 * queued], g.stream));
      if (e.empty()) e = launch();
      if (e.empty()) e = cuda_error("cudaEventRecord", cudaEventRecord(g.evs[2 * queued + 1], g.stream));
    }
    g.blocker.release();  // always, or the stream would wait for the timeout
    const std::string se = cuda_error("cudaStreamSynchronize", cudaStreamSynchronize(g.stream));
    if (e.empty()) e = se;
    if (e.empty()) e = cuda_error("cudaGetLastError", cudaGetLastError());
    if (e.empty() && g.blocker.timed_out.load())
      e = "the stream hold timed out: a call synchronised while launches were queued "
          "(rerun with --qg_blocker=0)";
    for (int i = 0; i < queued && e.empty(); ++i) {
      float ms = 0;
      e = cuda_error("cudaEventElapsedTime", cudaEventElapsedTime(&ms, g.evs[2 * i], g.evs[2 * i + 1]));
      measured.push_back(double(ms) * 1e-3);
    }
    return e;
  };

  double total = 0;
  int64_t calls = 0;
  for (auto _ : st) {
    if (next == measured.size()) {
      err = measure_group();
      if (!err.empty()) {
        st.SkipWithError(err.c_str());
        break;
      }
    }
    const double s = measured[next++];
    st.SetIterationTime(s);
    total += s;
    ++calls;
  }
  set_counters(st, total, calls, work, g.peak_bw, g.peak_flops);
}

// See harness.h.
void run_gpu_graph_case(benchmark::State& st, const Work& work, int reps, const std::function<std::string()>& call) {
  Gpu& g = g_gpu;
  std::string err = call();  // module load, first touch, outside the capture
  if (err.empty()) err = cuda_error("cudaStreamSynchronize", cudaStreamSynchronize(g.stream));
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  if (err.empty()) err = cuda_error("cudaStreamBeginCapture", cudaStreamBeginCapture(g.stream, cudaStreamCaptureModeThreadLocal));
  if (err.empty()) {
    for (int i = 0; i < reps && err.empty(); ++i) err = call();
    const std::string end = cuda_error("cudaStreamEndCapture", cudaStreamEndCapture(g.stream, &graph));
    if (err.empty()) err = end;
  }
  if (err.empty()) err = cuda_error("cudaGraphInstantiate", cudaGraphInstantiate(&exec, graph, 0));
  auto launch_timed = [&](float* ms) -> std::string {
    std::string e = cuda_error("cudaEventRecord", cudaEventRecord(g.ev0, g.stream));
    if (e.empty()) e = cuda_error("cudaGraphLaunch", cudaGraphLaunch(exec, g.stream));
    if (e.empty()) e = cuda_error("cudaEventRecord", cudaEventRecord(g.ev1, g.stream));
    if (e.empty()) e = cuda_error("cudaEventSynchronize", cudaEventSynchronize(g.ev1));
    if (e.empty()) e = cuda_error("cudaEventElapsedTime", cudaEventElapsedTime(ms, g.ev0, g.ev1));
    return e;
  };
  float ms = 0;
  for (int i = 0; i < 3 && err.empty(); ++i) err = launch_timed(&ms);  // uploads the graph
  double total = 0, s = 0;
  int64_t calls = 0;
  int left_in_graph = 0;
  // An iteration is one call: a graph launch times `reps` of them, and the
  // next reps - 1 iterations take its time per call. So --benchmark_min_time
  // buys the same wall time here as in the other cases (an iteration that
  // launched the whole graph ran reps times longer than the time it reports).
  for (auto _ : st) {
    if (left_in_graph == 0) {
      if (err.empty()) err = launch_timed(&ms);
      if (!err.empty()) {
        st.SkipWithError(err.c_str());
        break;
      }
      s = double(ms) * 1e-3 / reps;
      left_in_graph = reps;
    }
    --left_in_graph;
    st.SetIterationTime(s);
    total += s;
    ++calls;
  }
  if (exec) cudaGraphExecDestroy(exec);
  if (graph) cudaGraphDestroy(graph);
  cudaGetLastError();
  if (err.empty()) set_counters(st, total, calls, work, g.peak_bw, g.peak_flops);
}
#endif  // QG_BENCH_CUDA

void run_cpu_case(benchmark::State& st, const Work& work, int warmups, const std::function<std::string()>& call) {
  std::string err;
  for (int i = 0; i < std::max(1, warmups) && err.empty(); ++i) err = call();  // wakes the pool, faults pages in
  if (!err.empty()) {
    st.SkipWithError(err.c_str());
    return;
  }
  double total = 0;
  int64_t calls = 0;
  for (auto _ : st) {
    const auto t0 = Clock::now();
    err = call();
    const double s = seconds_since(t0);
    if (!err.empty()) {
      st.SkipWithError(err.c_str());
      break;
    }
    total += s;
    ++calls;
  }
  set_counters(st, total, calls, work, g_cpu.peak_bw, 0.0);
}

// ================================================================ rotations

std::string make_rotation(Backend b, const std::string& key, int64_t slot_bytes, int count, FillFn fill,
                          FillFn fill_all, RotationPtr* out) {
  auto it = g_buffers.find(key);
  if (it != g_buffers.end()) {
    *out = it->second;
    return {};
  }
  auto r = std::make_shared<Rotation>();
  r->what = key;
  r->slot_bytes = size_t(slot_bytes);
  r->stride = round_up(size_t(std::max<int64_t>(slot_bytes, 1)), 256);
  r->count = count;
  r->filled.assign(size_t(count), 0);
  r->fill = std::move(fill);
  r->fill_all = std::move(fill_all);
  if (b == Backend::cpu) {
    r->release = [](void* p) { std::free(p); };
    r->base = host_alloc(r->stride * size_t(count));
    if (!r->base) return key + ": host allocation failed";
  } else {
#if QG_BENCH_CUDA
    r->release = [](void* p) { cudaFree(p); };
    std::string err = device_alloc(r->stride * size_t(count), &r->base);
    if (!err.empty()) {
      r->base = nullptr;
      return key + ": " + err;
    }
#else
    return key + ": this bench was built without CUDA";
#endif
  }
  if (b == Backend::cpu) {
    // Fresh data for about 16 MiB of slots, copies after: quantizing on the
    // CPU is slow, and a cold rotation of small slots would otherwise cost
    // seconds per case to fill.
    r->distinct = int(std::max<int64_t>(1, (16 * kMiB + slot_bytes - 1) / std::max<int64_t>(1, slot_bytes)));
    r->copy = [](void* dst, const void* src, size_t bytes) {
      std::memcpy(dst, src, bytes);
      return std::string();
    };
  }
  g_buffers[key] = r;
  *out = r;
  return {};
}

int cold_count(Backend b, int64_t slot_bytes) {
#if QG_BENCH_CUDA
  if (b == Backend::cuda) return cold_slots(slot_bytes, g_gpu.l2_bytes, 0);
#endif
  (void)b;
  return cold_slots(slot_bytes, g_cpu.llc_bytes, g_opt.cpu_cold_bytes);
}

std::string key_of(Backend b, const std::string& what, int64_t rows, int64_t k) {
  return std::string(backend_name(b)) + "/" + what + "/" + std::to_string(rows) + "x" + std::to_string(k);
}

}  // namespace

// ===================================================================== public

Options g_opt;

Rotation::~Rotation() {
  if (base && release) release(base);
}

std::string Rotation::prepare(bool cold) {
  const int n = cold ? count : 1;
  const int fresh = (distinct > 0 && copy) ? std::min(n, distinct) : n;
  // (Refilling an already filled slot is harmless: it gets other real data.)
  if (fresh > 1 && fill_all && stride == slot_bytes &&
      std::any_of(filled.begin(), filled.begin() + fresh, [](char f) { return f == 0; })) {
    std::string err = fill_all(base, fresh);
    if (!err.empty()) return what + ": " + err;
    std::fill(filled.begin(), filled.begin() + fresh, 1);
  }
  for (int i = 0; i < n; ++i) {
    if (filled[size_t(i)]) continue;
    std::string err = i < fresh ? fill(slot(i), i) : copy(slot(i), slot(i % fresh), slot_bytes);
    if (!err.empty()) return what + ": " + err;
    filled[size_t(i)] = 1;
  }
  return {};
}

const char* backend_name(Backend b) { return b == Backend::cuda ? "cuda" : "cpu"; }

qg::Device device_of(Backend b) {
#if QG_BENCH_CUDA
  if (b == Backend::cuda) return qg::Device::cuda(g_gpu.dev);
#endif
  return b == Backend::cuda ? qg::Device::cuda(g_opt.device) : qg::Device::cpu();
}

qg::Stream stream_of(Backend b) {
#if QG_BENCH_CUDA
  if (b == Backend::cuda) return g_gpu.stream;
#endif
  (void)b;
  return nullptr;
}

bool backend_live(Backend b) {
#if QG_BENCH_CUDA
  if (b == Backend::cuda) return g_gpu.ok;
#endif
  return b == Backend::cpu;
}

bool have_cublas() { return QG_BENCH_CUBLAS != 0; }

#if QG_BENCH_CUDA
std::string gpu_read_bytes(const void* p, int64_t bytes, int sms, int* sink, cudaStream_t stream);  // read_floor.cu
std::string gpu_read_floor(const void* p, int64_t bytes) {
  static int* sink = nullptr;  // where the read kernel's checksum would go (never, in practice)
  if (!sink) {
    std::string err = device_alloc(sizeof(int), reinterpret_cast<void**>(&sink));
    if (!err.empty()) return err;
  }
  return gpu_read_bytes(p, bytes, g_gpu.sms, sink, g_gpu.stream);
}
std::string gpu_move_bytes(const void* in, int64_t in_bytes, void* out, int64_t out_bytes, int sms,
                           cudaStream_t stream);  // read_floor.cu
std::string gpu_move_floor(const void* in, int64_t in_bytes, void* out, int64_t out_bytes) {
  return gpu_move_bytes(in, in_bytes, out, out_bytes, g_gpu.sms, g_gpu.stream);
}
#else
std::string gpu_read_floor(const void*, int64_t) { return "CUDA is not built"; }
std::string gpu_move_floor(const void*, int64_t, void*, int64_t) { return "CUDA is not built"; }
#endif

std::string cpu_read_floor(const void* p, int64_t bytes) {
  const auto* base = static_cast<const uint64_t*>(p);
  const int64_t words = bytes / 8, tasks = g_cpu.threads;
  std::atomic<uint64_t> sink{0};
  qg::detail::cpu::ThreadPool::instance().parallel_for(tasks, [&](int64_t t) {
    const int64_t lo = words * t / tasks, hi = words * (t + 1) / tasks;
    uint64_t acc[8] = {};
    int64_t i = lo;
    for (; i + 8 <= hi; i += 8)  // one 64-byte line an iteration, eight independent chains
      for (int j = 0; j < 8; ++j) acc[j] ^= base[i + j];
    for (; i < hi; ++i) acc[0] ^= base[i];
    uint64_t x = 0;
    for (uint64_t a : acc) x ^= a;
    sink.fetch_xor(x, std::memory_order_relaxed);
  });
  benchmark::DoNotOptimize(sink.load());
  return {};
}

std::string qg_error(const char* what, const qg::Status& s) {
  if (s.ok()) return {};
  return std::string(what) + ": " + qg::status_code_name(s.code()) + ": " + s.message();
}

// q4_0x16 (CPU only): rows quantized to Q4_0, then qg::repack'ed.
std::string cpu_fill_repacked(qg::Format fmt, void* dst, int64_t rows, int64_t k, uint64_t seed) {
  std::vector<uint8_t> q4(static_cast<size_t>(rows * packed_row_bytes(qg::Format::q4_0, k)));
  std::string err = cpu_fill_quantized(qg::Format::q4_0, q4.data(), rows, k, seed);
  if (!err.empty()) return err;
  qg::RepackArgs r;
  r.from = qg::Format::q4_0;
  r.to = fmt;
  r.x = q4.data();
  r.rows = rows;
  r.k = k;
  r.x_row_stride = packed_row_bytes(qg::Format::q4_0, k);
  r.y = dst;
  r.y_row_stride = packed_row_bytes(fmt, k);
  return qg_error("qg::repack", qg::repack(r));
}

std::string packed_rows(Backend b, const char* role, qg::Format format, int64_t rows, int64_t k, RotationPtr* out) {
  const qg::FormatTraits& t = qg::format_traits(format);
  const bool repacked = t.rows_per_block > 1;
  if (repacked && b != Backend::cpu) return std::string(t.name) + " is a CPU layout";
  if (!t.quantizable && !repacked) return std::string("qg cannot produce ") + t.name + " from float data";
  const int64_t bytes = rows / t.rows_per_block * packed_row_bytes(format, k);
  const uint64_t seed = std::string(role) == "w" ? 1000 : 2000;
  FillFn fill, fill_all;
#if QG_BENCH_CUDA
  if (b == Backend::cuda) {
    fill = [=](void* p, int i) { return gpu_fill_quantized(format, p, rows, k, seed + uint64_t(i)); };
    fill_all = [=](void* p, int slots) { return gpu_fill_quantized(format, p, slots * rows, k, seed + 999); };
  }
#endif
  if (b == Backend::cpu) {
    const auto cpu_fill = repacked ? cpu_fill_repacked : cpu_fill_quantized;
    fill = [=](void* p, int i) { return cpu_fill(format, p, rows, k, seed + uint64_t(i)); };
    fill_all = [=](void* p, int slots) { return cpu_fill(format, p, slots * rows, k, seed + 999); };
  }
  return make_rotation(b, key_of(b, std::string(role) + "_" + t.name, rows, k), bytes, cold_count(b, bytes),
                       fill, fill_all, out);
}

namespace {
using FillFloats = std::string (*)(void* dst, int64_t n, uint64_t seed);

// rows x k floats of esize bytes, each slot filled with its own seed
// (seed_base + slot), or all at once with seed_base + 999.
std::string float_rows(Backend b, const std::string& name, int64_t rows, int64_t k, int64_t esize,
                       uint64_t seed_base, FillFloats cpu_fill, FillFloats gpu_fill, RotationPtr* out) {
  const int64_t bytes = rows * k * esize;
  FillFn fill, fill_all;
  const FillFloats fill_fn = b == Backend::cpu ? cpu_fill : gpu_fill;
  if (fill_fn) {
    fill = [=](void* p, int i) { return fill_fn(p, rows * k, seed_base + uint64_t(i)); };
    fill_all = [=](void* p, int slots) { return fill_fn(p, slots * rows * k, seed_base + 999); };
  }
  return make_rotation(b, key_of(b, name, rows, k), bytes, cold_count(b, bytes), fill, fill_all, out);
}

#if QG_BENCH_CUDA
constexpr FillFloats kGpuFillF32 = gpu_fill_f32, kGpuFillF16 = gpu_fill_f16, kGpuFillBf16 = gpu_fill_bf16;
#else
constexpr FillFloats kGpuFillF32 = nullptr, kGpuFillF16 = nullptr, kGpuFillBf16 = nullptr;
#endif
}  // namespace

std::string f32_rows(Backend b, int64_t rows, int64_t k, RotationPtr* out) {
  return float_rows(b, "f32", rows, k, 4, 3000, cpu_fill_f32, kGpuFillF32, out);
}

std::string f16_rows(Backend b, const char* role, int64_t rows, int64_t k, RotationPtr* out) {
  return float_rows(b, std::string(role) + "_f16", rows, k, 2, 4000, cpu_fill_f16, kGpuFillF16, out);
}

std::string bf16_rows(Backend b, const char* role, int64_t rows, int64_t k, RotationPtr* out) {
  return float_rows(b, std::string(role) + "_bf16", rows, k, 2, 5000, cpu_fill_bf16, kGpuFillBf16, out);
}

std::string output_buffer(Backend b, int64_t bytes, RotationPtr* out) {
  FillFn fill;
#if QG_BENCH_CUDA
  if (b == Backend::cuda)
    fill = [=](void* p, int) {
      // NaN-ish bytes: an unwritten output never looks plausible.
      cudaError_t e = cudaMemsetAsync(p, 0xff, size_t(bytes), g_gpu.stream);
      if (e == cudaSuccess) e = cudaStreamSynchronize(g_gpu.stream);
      return cuda_error("cudaMemset", e);
    };
#endif
  if (b == Backend::cpu)
    fill = [=](void* p, int) {
      std::memset(p, 0xff, size_t(bytes));  // faults the pages in outside the timing
      return std::string();
    };
  return make_rotation(b, std::string(backend_name(b)) + "/out/" + std::to_string(bytes), bytes, 1, fill, nullptr,
                       out);
}

int warmups_for(Backend b, const Rotation& rotated, bool cold) {
  if (b == Backend::cpu) return 1;
  return cold ? rotated.count + 2 : 3;
}

void run_timed(benchmark::State& st, Backend b, const Work& work, int warmups,
               const std::function<std::string()>& call) {
#if QG_BENCH_CUDA
  if (b == Backend::cuda) {
    run_gpu_case(st, work, warmups, call);
    return;
  }
#endif
  if (b == Backend::cuda) {
    st.SkipWithError("this bench was built without CUDA");
    return;
  }
  run_cpu_case(st, work, warmups, call);
}

void run_graph_timed(benchmark::State& st, const Work& work, int reps, const std::function<std::string()>& call) {
#if QG_BENCH_CUDA
  run_gpu_graph_case(st, work, reps, call);
#else
  (void)work, (void)reps, (void)call;
  st.SkipWithError("this bench was built without CUDA");
#endif
}

std::string cublas_gemm_f16(int64_t m, int64_t n, int64_t k, const void* w, const void* a, void* c) {
#if QG_BENCH_CUBLAS
  return cublas_f16(m, n, k, w, a, c);
#else
  (void)m, (void)n, (void)k, (void)w, (void)a, (void)c;
  return "this bench was built without cuBLAS";
#endif
}

std::string cublas_gemm_i8(int64_t m, int64_t n, int64_t k, const void* w, const void* a, void* c) {
#if QG_BENCH_CUBLAS
  return cublas_i8(m, n, k, w, a, c);
#else
  (void)m, (void)n, (void)k, (void)w, (void)a, (void)c;
  return "this bench was built without cuBLAS";
#endif
}

std::string case_name(const std::string& op, Backend b, bool cold, int64_t m, int64_t k, int64_t n,
                      const std::string& kernel) {
  std::string s = op + "/" + backend_name(b) + "/" + (cold ? "cold" : "hot");
  if (m > 0) s += "/M:" + std::to_string(m);
  s += "/K:" + std::to_string(k) + "/N:" + std::to_string(n);
  if (!kernel.empty()) s += "/kernel:" + kernel;
  return s;
}

const std::vector<int64_t>& n_list(Backend b) { return b == Backend::cuda ? g_opt.gpu_n : g_opt.cpu_n; }

std::vector<int64_t> distinct_k() {
  std::vector<int64_t> ks;
  for (const Shape& s : g_opt.shapes)
    if (std::find(ks.begin(), ks.end(), s.k) == ks.end()) ks.push_back(s.k);
  return ks;
}

}  // namespace qgbench

// ===================================================================== main

namespace {

std::string fmt(double v, const char* f = "%.1f") {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

void print_help() {
  std::printf("bench_gemm options (flag --qg_<name>=V, or environment QG_BENCH_<NAME>=V):\n");
  for (const qgbench::OptionSpec& o : qgbench::kOptionSpecs) std::printf("  %-18s %s\n", o.name, o.help);
  std::printf("plus Google Benchmark's own flags (--benchmark_filter=q4_0, --benchmark_out=r.json "
              "--benchmark_out_format=json, --benchmark_min_time=...; see --help).\n"
              "Per-kernel cases end in /kernel:<name>; --benchmark_filter=-kernel: leaves them out.\n");
}

// "gemm: cpu_avx2 (q4_0 x q8_1), ...; quantize: cpu_reference (q4_0, q8_0, q8_1); ..."
std::string describe_registry(const qg::detail::Registry& r) {
  auto formats = [](uint32_t bits) {
    std::string s;
    for (int f = 0; f < qg::kFormatCount; ++f)
      if (bits & (1u << f)) s += (s.empty() ? "" : ", ") + std::string(qg::format_traits(qg::Format(f)).name);
    return s;
  };
  std::string gemm, quantize, dequantize;
  for (const auto& k : r.gemm)
    gemm += (gemm.empty() ? "" : ", ") + std::string(k.name) + " (" + qg::format_traits(k.a_format).name + " x " +
            qg::format_traits(k.b_format).name + ")";
  for (const auto& k : r.quantize)
    quantize += (quantize.empty() ? "" : ", ") + std::string(k.name) + " (" + formats(k.formats) + ")";
  for (const auto& k : r.dequantize)
    dequantize += (dequantize.empty() ? "" : ", ") + std::string(k.name) + " (" + formats(k.formats) + ")";
  if (gemm.empty() && quantize.empty() && dequantize.empty()) return "none";
  return "gemm: " + gemm + "; quantize: " + quantize + "; dequantize: " + dequantize;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace qgbench;
  // Our own flags out first, so Google Benchmark sees only its own.
  bool list_only = false, help = false;
  std::vector<char*> args;
  std::vector<std::string> rewritten;
  rewritten.reserve(size_t(argc));
  for (int i = 0; i < argc; ++i) {
    std::string a = argv[i];
    if (i > 0 && a.rfind("--qg_", 0) == 0) {
      if (a == "--qg_help") {
        help = true;
        continue;
      }
      const size_t eq = a.find('=');
      g_flags[a.substr(5, eq == std::string::npos ? std::string::npos : eq - 5)] =
          eq == std::string::npos ? "1" : a.substr(eq + 1);
      continue;
    }
    if (a.rfind("--benchmark_list_tests", 0) == 0 && a != "--benchmark_list_tests=false" &&
        a != "--benchmark_list_tests=0")
      list_only = true;
#ifdef QG_BENCH_MIN_TIME_IS_DOUBLE
    // Google Benchmark < 1.8 takes --benchmark_min_time as a bare number of
    // seconds; accept the newer "0.5s" spelling there too.
    if (a.rfind("--benchmark_min_time=", 0) == 0 && a.size() > 21 && a.back() == 's') a.pop_back();
#endif
    rewritten.push_back(a);
  }
  for (std::string& s : rewritten) args.push_back(&s[0]);
  args.push_back(nullptr);
  int nargs = int(rewritten.size());
  if (help) {
    print_help();
    return 0;
  }
  benchmark::Initialize(&nargs, args.data());
  if (benchmark::ReportUnrecognizedArguments(nargs, args.data())) return 1;
  for (const auto& kv : g_flags) {
    bool known = false;
    for (const OptionSpec& o : kOptionSpecs) known = known || kv.first == o.name;
    if (!known) {
      std::fprintf(stderr, "bench_gemm: unknown option --qg_%s (see --qg_help)\n", kv.first.c_str());
      return 1;
    }
  }
  load_options();

  CaseList cases;
  add_gemm_cases(cases);
  add_quantize_cases(cases);
  add_linear_cases(cases);
  add_read_floor_cases(cases);
  auto selected = [](const Case& c) {
    return filter_selects(c.backend == Backend::cuda ? c.name + "/manual_time" : c.name);
  };
  bool want_cpu = false, want_cuda = false;
  for (const Case& c : cases) (c.backend == Backend::cuda ? want_cuda : want_cpu) |= selected(c);

  const qg::BuildInfo info = qg::build_info();
  benchmark::AddCustomContext("qg_version", info.version);
  benchmark::AddCustomContext("qg_commit", QG_GIT_COMMIT);
  benchmark::AddCustomContext("qg_cuda_built", info.cuda_built ? "yes" : "no");
  benchmark::AddCustomContext("qg_wo_group", std::to_string(g_opt.wo_group));
  {
    std::string feats;
    for (const std::string& f : info.cpu_features) feats += (feats.empty() ? "" : ",") + f;
    benchmark::AddCustomContext("qg_cpu_features", feats.empty() ? "none" : feats);
  }
  benchmark::AddCustomContext("qg_cpu_threads", std::to_string(qg::cpu_threads()));
  benchmark::AddCustomContext("qg_kernels_cpu", describe_registry(qg::detail::cpu::registry()));
  if (info.cuda_built) benchmark::AddCustomContext("qg_kernels_cuda", describe_registry(qg::detail::cuda::registry()));
  benchmark::AddCustomContext(
      "case_names",
      "<op>/<cpu|cuda>/<cold|hot|graph>[/M:<M>]/K:<K>/N:<N>[/kernel:<name>]: without /kernel: the public call "
      "(the dispatcher's choice is the label); with it, that registry entry run directly. Floors: "
      "read_<fmt>/<dev>/<mode>/M:<M>/K:<K> reads a GEMM's weight bytes only; move_<fmt>/cuda/<mode>/K:<K>/N:<N> "
      "reads a quantizer's input and writes its output's byte count, both with a plain kernel on the same buffers");
  benchmark::AddCustomContext(
      "cold_rule",
      "cold: each call reads the next of several input buffers totalling > 2x the last-level "
      "cache (GPU L2, CPU L3); hot: one buffer repeated; graph: hot, 64 calls captured in one CUDA graph, "
      "time per call = graph time / 64 (llama.cpp's perf mode); data is gaussian fp32 quantized by qg");
  benchmark::AddCustomContext(
      "counters", "us = time per call; TFLOP/s = 2MNK/t; GB/s = (compulsory input + output bytes)/t; "
                  "%floor = 100 * max(bytes/peak_bw, flops/peak_flops)/t");

  if (want_cpu && !list_only) {
    cpu_init();
    benchmark::AddCustomContext("cpu_peak_bw_GBps", fmt(g_cpu.peak_bw * 1e-9));
    benchmark::AddCustomContext("cpu_llc_bytes", std::to_string(g_cpu.llc_bytes));
    benchmark::AddCustomContext(
        "cpu_floor_note",
        "CPU %floor is the bandwidth floor only (bytes / cpu_peak_bw, threaded memcpy read + write); "
        "no compute floor is applied on the CPU; time is wall clock");
  }

  bool cuda_ok = false;
#if QG_BENCH_CUDA
  if (want_cuda && !list_only) {
    gpu_init();
    cuda_ok = g_gpu.ok;
    if (!cuda_ok) {
      std::fprintf(stderr, "bench_gemm: CUDA cases skipped: %s\n", g_gpu.why.c_str());
      benchmark::AddCustomContext("cuda", "unavailable: " + g_gpu.why);
    } else {
      benchmark::AddCustomContext("cuda_device", g_gpu.name);
      benchmark::AddCustomContext("cuda_cc", std::to_string(g_gpu.cc));
      benchmark::AddCustomContext("cuda_sms", std::to_string(g_gpu.sms));
      benchmark::AddCustomContext("cuda_l2_bytes", std::to_string(g_gpu.l2_bytes));
      benchmark::AddCustomContext("gpu_peak_bw_GBps", fmt(g_gpu.peak_bw * 1e-9));
      if (g_gpu.peak_flops > 0) benchmark::AddCustomContext("gpu_peak_fp16_TFLOPs", fmt(g_gpu.peak_flops * 1e-12));
      if (!g_gpu.peak_note.empty()) benchmark::AddCustomContext("gpu_peak_note", g_gpu.peak_note);
      benchmark::AddCustomContext(
          "gpu_floor_note",
          std::string("GPU %floor = max(bytes / gpu_peak_bw, flops / gpu_peak_fp16) with the bandwidth "
                      "of a 1 GiB device-to-device copy (read + write) and the rate of a cuBLAS fp16 "
                      "8192^3 GEMM (fp32 accumulate, tensor cores); the int8 / dp4a kernels "
                      "are judged against that fp16 tensor-core rate") +
              (QG_BENCH_CUBLAS ? "" : "; cuBLAS not built: bandwidth floor only"));
      benchmark::AddCustomContext(
          "gpu_timing",
          "a cudaEvent pair around each call on a non-blocking stream; calls queued in groups of "
          "up to " + std::to_string(g_opt.gpu_group) + " (about 1 ms of work) " +
              (g_opt.blocker ? "behind a host-function hold of the stream, so host launch latency "
                               "is not timed; "
                             : "with no hold of the stream (launch latency can be timed); ") +
              "each benchmark iteration reports one measured call");
    }
  }
#endif
  if (list_only) cuda_ok = QG_BENCH_CUDA != 0;

  // Forced kernels that refuse a case (a GEMV kernel at N = 512, an arch the
  // device lacks) are left out, counted per kernel.
  std::map<std::string, std::pair<int, std::string>> refused;  // key: op + kernel
  for (const Case& c : cases) {
    if (c.backend == Backend::cuda && !cuda_ok) continue;
    if (c.refusal) {
      const std::string why = c.refusal();
      if (!why.empty()) {
        if (selected(c)) {
          const size_t pos = c.name.rfind("/kernel:");
          const std::string key = c.name.substr(0, c.name.find('/')) + "/" + backend_name(c.backend) + " " +
                                  (pos == std::string::npos ? c.name : c.name.substr(pos + 8));
          auto& e = refused[key];
          if (e.first++ == 0) e.second = why;
        }
        continue;
      }
    }
    auto* b = benchmark::RegisterBenchmark(c.name.c_str(), c.fn);
    b->Unit(benchmark::kMicrosecond);
    if (c.backend == Backend::cuda) b->UseManualTime();
  }
  if (!refused.empty()) {
    std::string summary;
    for (const auto& kv : refused) {
      std::fprintf(stderr, "bench_gemm: %s: %d case(s) left out, the kernel refuses them (e.g. %s)\n",
                   kv.first.c_str(), kv.second.first, kv.second.second.c_str());
      summary += (summary.empty() ? "" : "; ") + kv.first + ": " + std::to_string(kv.second.first) + " (e.g. " +
                 kv.second.second + ")";
    }
    benchmark::AddCustomContext("kernel_cases_left_out", summary);
  }
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  g_buffers.clear();
  return 0;
}
