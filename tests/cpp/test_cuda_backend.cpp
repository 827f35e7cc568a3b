// SPDX-License-Identifier: MIT
// test_cuda_backend.cpp: the CUDA backend against the CPU backend (quantize,
// dequantize: identical bytes/bits) and against a float64 reference computed
// from the same codes (GEMM: NMSE <= 1e-6). The shared GEMM suite
// (test_util.h) runs on every kernel of the CUDA registry for q4_0 x q8_1
// (each forced by name, where its arch window and can_run admit the case) and
// on the public qg::gemm: epilogue, output dtypes, transposed C, Inf scales.
// Skips cleanly when no CUDA device is visible.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <qg/qg.h>

#include "backend.h"
#include "cuda_test_util.h"
#include "test_util.h"

namespace {

// Fixed seeds, printed by the fixture (QG_TEST_SEED moves them).
const uint32_t kSeed = static_cast<uint32_t>(20250611u ^ (qgtest::base_seed() - 20240611u));

class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t bytes) : bytes_(bytes) {
    if (cudaMalloc(&ptr_, bytes ? bytes : 1) != cudaSuccess) {
      ptr_ = nullptr;
      cudaGetLastError();
    }
  }
  ~DeviceBuffer() {
    if (ptr_) cudaFree(ptr_);
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  bool ok() const { return ptr_ != nullptr; }
  template <typename T = uint8_t>
  T* at(size_t byte_offset = 0) const {
    return reinterpret_cast<T*>(static_cast<uint8_t*>(ptr_) + byte_offset);
  }
  size_t bytes() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// Truncating fp32 -> fp16, only used to make f16 inputs; any valid bits will
// do, since CPU and CUDA then read the same bits.
uint16_t to_fp16_bits(float f) {
  const uint32_t x = bits_of(f);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t ax = x & 0x7FFFFFFFu;
  if (ax > 0x7F800000u) return sign | 0x7E00u;
  if (ax >= 0x47800000u) return sign | 0x7C00u;
  if (ax < 0x38800000u) return sign | static_cast<uint16_t>(std::fabs(f) * 16777216.0f);
  return static_cast<uint16_t>(sign | (((ax >> 23) - 112u) << 10) | ((ax >> 13) & 0x3FFu));
}

double fp16_to_double(uint16_t h) {
  const int exp = (h >> 10) & 0x1F;
  const int mant = h & 0x3FF;
  const double sign = (h & 0x8000) ? -1.0 : 1.0;
  if (exp == 0x1F) return mant ? std::nan("") : sign * INFINITY;
  if (exp == 0) return sign * std::ldexp(static_cast<double>(mant), -24);
  return sign * std::ldexp(static_cast<double>(mant | 0x400), exp - 25);
}

int dtype_bytes(qg::DType t) { return t == qg::DType::f32 ? 4 : 2; }

// rows x k gaussian values with per-row scales; with specials, some blocks of
// row 0/1 hold zeros, -0.0, 1e-30, 1e6, 7e4, NaN, +-Inf, 65504, denormals,
// rounding ties.
std::vector<float> make_values(int64_t rows, int64_t k, std::mt19937& rng, bool specials) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const float scales[] = {1.0f, 0.01f, 100.0f, 3.0f};
  std::vector<float> v(static_cast<size_t>(rows * k));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < k; ++i) v[r * k + i] = normal(rng) * scales[r % 4];
  if (!specials) return v;
  const int64_t nb = k / 32;
  auto block = [&](int64_t r, int64_t b) -> float* {
    return v.data() + (r % rows) * k + (b % nb) * 32;
  };
  for (int j = 0; j < 32; ++j) block(0, 0)[j] = 0.0f;
  for (int j = 0; j < 32; ++j) block(0, 1)[j] = -0.0f;
  for (int j = 0; j < 32; ++j) block(0, 2)[j] = (j % 2 ? -1e-30f : 1e-30f) * (1 + j);
  block(0, 3)[5] = 1e6f;
  block(0, 4)[17] = -7e4f;
  block(0, 5)[9] = std::nanf("");
  block(1, 6)[31] = INFINITY;
  block(1, 7)[0] = -INFINITY;
  for (int j = 0; j < 32; ++j) block(1, 8)[j] = 65504.0f * (j % 3 ? 1 : -1);
  // Denormal-only block: 1/d overflows, treated as a zero block (quant_block.h).
  for (int j = 0; j < 32; ++j) block(1, 9)[j] = 1e-40f * static_cast<float>(j - 16);
  // amax 127 makes the Q8 scale exactly 1: codes of exact halves (roundf
  // rounds them away from zero) and of the floats just below a half.
  const float ties[] = {127.0f, 0.5f, -0.5f, 1.5f, -2.5f, 126.5f, -126.5f, 0.49999997f, -0.49999997f,
                        2.4999998f, -3.5f, 64.5f};
  for (int j = 0; j < 32; ++j) block(1, 10)[j] = ties[j % 12] * (j < 12 ? 1.0f : 0.25f);
  return v;
}

// Values of `dtype` laid out with row stride x_stride (elements); the padding
// between rows holds NaN bits so that reading it would show.
std::vector<uint8_t> encode(const std::vector<float>& v, int64_t rows, int64_t k, int64_t x_stride,
                            qg::DType dtype) {
  const int es = dtype_bytes(dtype);
  std::vector<uint8_t> out(static_cast<size_t>(rows * x_stride * es), 0xFF);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < k; ++i) {
      const float f = v[r * k + i];
      uint8_t* dst = out.data() + (r * x_stride + i) * es;
      if (dtype == qg::DType::f32) {
        std::memcpy(dst, &f, 4);
      } else {
        const uint16_t h = dtype == qg::DType::f16 ? to_fp16_bits(f)
                                                   : static_cast<uint16_t>(bits_of(f) >> 16);
        std::memcpy(dst, &h, 2);
      }
    }
  return out;
}

struct FormatCase {
  qg::Format format;
  qg::Q8_1Convention convention;
  const char* name;
};

const FormatCase kFormatCases[] = {
    {qg::Format::q4_0, qg::Q8_1Convention::reference, "q4_0"},
    {qg::Format::q8_0, qg::Q8_1Convention::reference, "q8_0"},
    {qg::Format::q8_1, qg::Q8_1Convention::reference, "q8_1/reference"},
    {qg::Format::q8_1, qg::Q8_1Convention::ggml_cuda, "q8_1/ggml_cuda"},
};

class CudaBackend : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (!qg::cuda_available(&why)) GTEST_SKIP() << "no CUDA device: " << why;
    CUDA_OK(cudaSetDevice(0));
    std::cout << "[   seed   ] kSeed=" << kSeed << " (base QG_TEST_SEED=" << qgtest::base_seed() << ")" << std::endl;
  }
};

// ------------------------------------------------------------------ quantize

// offset: bytes added to both device pointers (1: byte-wise loads and stores).
void check_quantize(const FormatCase& fc, qg::DType dtype, int64_t rows, int64_t k,
                    int64_t x_pad, int64_t y_pad, uint32_t seed, size_t offset = 0) {
  SCOPED_TRACE(std::string("format=") + fc.name + " dtype=" + qg::dtype_name(dtype) +
               " rows=" + std::to_string(rows) + " k=" + std::to_string(k) +
               " x_pad=" + std::to_string(x_pad) + " y_pad=" + std::to_string(y_pad) +
               " offset=" + std::to_string(offset) +
               " seed=" + std::to_string(seed));
  std::mt19937 rng(seed);
  const std::vector<float> values = make_values(rows, k, rng, true);
  const int64_t x_stride = k + x_pad;
  const std::vector<uint8_t> x = encode(values, rows, k, x_stride, dtype);
  const int bpb = qg::format_traits(fc.format).bytes_per_block;
  const int64_t y_stride = k / 32 * bpb + y_pad;
  const size_t y_bytes = static_cast<size_t>(rows * y_stride);

  std::vector<uint8_t> y_cpu(y_bytes, 0xCD);
  qg::QuantizeArgs args;
  args.format = fc.format;
  args.x = x.data();
  args.x_dtype = dtype;
  args.rows = rows;
  args.k = k;
  args.x_row_stride = x_stride;
  args.y = y_cpu.data();
  args.y_row_stride = y_stride;
  args.device = qg::Device::cpu();
  args.q8_1_convention = fc.convention;
  QG_OK(qg::quantize(args));

  DeviceBuffer dx(x.size() + offset), dy(y_bytes + offset);
  ASSERT_TRUE(dx.ok() && dy.ok());
  CUDA_OK(cudaMemcpy(dx.at(offset), x.data(), x.size(), cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemset(dy.at(), 0xCD, y_bytes + offset));
  args.x = dx.at(offset);
  args.y = dy.at(offset);
  args.device = qg::Device::cuda(0);
  QG_OK(qg::quantize(args));
  CUDA_OK(cudaDeviceSynchronize());
  std::vector<uint8_t> y_gpu(y_bytes);
  CUDA_OK(cudaMemcpy(y_gpu.data(), dy.at(offset), y_bytes, cudaMemcpyDeviceToHost));

  for (size_t i = 0; i < y_bytes; ++i) {
    if (y_cpu[i] != y_gpu[i]) {
      const int64_t row = static_cast<int64_t>(i) / y_stride;
      const int64_t in_row = static_cast<int64_t>(i) % y_stride;
      FAIL() << "first differing byte " << i << " (row " << row << ", block " << in_row / bpb
             << ", byte " << in_row % bpb << "): cpu 0x" << std::hex << int(y_cpu[i])
             << " cuda 0x" << int(y_gpu[i]);
    }
  }
}

TEST_F(CudaBackend, QuantizeMatchesCpuBytes) {
  const qg::DType dtypes[] = {qg::DType::f32, qg::DType::f16, qg::DType::bf16};
  for (const FormatCase& fc : kFormatCases)
    for (qg::DType dt : dtypes) {
      // One wave of one-step warps (a decode step's activations).
      check_quantize(fc, dt, 37, 32 * 70, 0, 0, kSeed);
      // Row strides that rule out 16-byte loads (element loads); an odd packed
      // row stride (byte-wise stores); k = 32.
      check_quantize(fc, dt, 5, 32, 9, 7, kSeed + 1);
      check_quantize(fc, dt, 3, 32 * 33, 32, 2, kSeed + 2);
      // Misaligned x and y: byte-wise loads and stores.
      check_quantize(fc, dt, 3, 32 * 33, 0, 0, kSeed + 3, 1);
      // More than a wave of one-step warps, so 4 steps per warp: 40 blocks a
      // row (tasks of 16 blocks for f32, 32 for 16-bit x: a tail of 8), in
      // 16-byte loads, element loads and byte loads.
      check_quantize(fc, dt, 2000, 32 * 40, 0, 0, kSeed + 4);
      check_quantize(fc, dt, 2000, 32 * 40, 1, 3, kSeed + 5);
      check_quantize(fc, dt, 2000, 32 * 40, 0, 0, kSeed + 6, 1);
    }
}

// ---------------------------------------------------------------- dequantize

void check_dequantize(const FormatCase& fc, int64_t rows, int64_t k, int64_t xq_pad,
                      int64_t y_pad, uint32_t seed) {
  SCOPED_TRACE(std::string("format=") + fc.name + " rows=" + std::to_string(rows) +
               " k=" + std::to_string(k) + " xq_pad=" + std::to_string(xq_pad) +
               " seed=" + std::to_string(seed));
  std::mt19937 rng(seed);
  const std::vector<float> values = make_values(rows, k, rng, true);
  const int bpb = qg::format_traits(fc.format).bytes_per_block;
  const int64_t xq_stride = k / 32 * bpb + xq_pad;
  std::vector<uint8_t> xq(static_cast<size_t>(rows * xq_stride), 0xAB);
  qg::QuantizeArgs qa;
  qa.format = fc.format;
  qa.x = values.data();
  qa.rows = rows;
  qa.k = k;
  qa.x_row_stride = k;
  qa.y = xq.data();
  qa.y_row_stride = xq_stride;
  qa.device = qg::Device::cpu();
  qa.q8_1_convention = fc.convention;
  QG_OK(qg::quantize(qa));

  const int64_t y_stride = k + y_pad;
  const float sentinel = -12345.678f;
  const size_t y_count = static_cast<size_t>(rows * y_stride);
  std::vector<float> y_cpu(y_count, sentinel);
  qg::DequantizeArgs da = qgtest::dequantize_args(fc.format, xq.data(), rows, k, xq_stride, y_cpu.data(), y_stride);
  QG_OK(qg::dequantize(da));

  DeviceBuffer dxq(xq.size()), dy(y_count * 4);
  ASSERT_TRUE(dxq.ok() && dy.ok());
  CUDA_OK(cudaMemcpy(dxq.at(), xq.data(), xq.size(), cudaMemcpyHostToDevice));
  std::vector<float> y_gpu(y_count, sentinel);
  CUDA_OK(cudaMemcpy(dy.at(), y_gpu.data(), y_count * 4, cudaMemcpyHostToDevice));
  da.xq = dxq.at();
  da.y = dy.at<float>();
  da.device = qg::Device::cuda(0);
  QG_OK(qg::dequantize(da));
  CUDA_OK(cudaDeviceSynchronize());
  CUDA_OK(cudaMemcpy(y_gpu.data(), dy.at(), y_count * 4, cudaMemcpyDeviceToHost));

  for (size_t i = 0; i < y_count; ++i) {
    const bool both_nan = std::isnan(y_cpu[i]) && std::isnan(y_gpu[i]);
    if (!both_nan && bits_of(y_cpu[i]) != bits_of(y_gpu[i]))
      FAIL() << "element " << i << " (row " << i / y_stride << ", col " << i % y_stride
             << "): cpu " << y_cpu[i] << " (0x" << std::hex << bits_of(y_cpu[i]) << ") cuda "
             << y_gpu[i] << " (0x" << bits_of(y_gpu[i]) << ")";
  }
}

TEST_F(CudaBackend, DequantizeMatchesCpuBits) {
  for (const FormatCase& fc : kFormatCases) {
    check_dequantize(fc, 37, 32 * 70, 0, 0, kSeed);
    check_dequantize(fc, 4, 32 * 9, 1, 3, kSeed + 1);  // odd packed stride: byte loads
    check_dequantize(fc, 2, 32, 6, 1, kSeed + 2);
  }
}

// ---------------------------------------------------------------------- GEMM

struct GemmCase {
  int64_t m, n, k;
  int64_t ldw_pad = 0, lda_pad = 0, ldc_pad = 0;  // bytes, bytes, elements
  size_t w_offset = 0, a_offset = 0;              // bytes past a cudaMalloc'd base
  const char* expect_impl = nullptr;              // substring of the chosen implementation
  const char* force_kernel = nullptr;             // run this registry kernel itself, not qg::gemm
};

std::string describe(const GemmCase& g) {
  return "M=" + std::to_string(g.m) + " N=" + std::to_string(g.n) + " K=" + std::to_string(g.k) +
         " ldw_pad=" + std::to_string(g.ldw_pad) + " lda_pad=" + std::to_string(g.lda_pad) +
         " ldc_pad=" + std::to_string(g.ldc_pad) + " w_offset=" + std::to_string(g.w_offset) +
         " a_offset=" + std::to_string(g.a_offset);
}

// Quantizes rows x k gaussian values on the CPU into rows of `stride` bytes.
void quantize_on_cpu(qg::Format format, int64_t rows, int64_t k, int64_t stride, std::mt19937& rng,
                     std::vector<uint8_t>* out) {
  const std::vector<float> values = make_values(rows, k, rng, false);
  out->assign(static_cast<size_t>(rows * stride), 0xEE);
  qg::QuantizeArgs qa;
  qa.format = format;
  qa.x = values.data();
  qa.rows = rows;
  qa.k = k;
  qa.x_row_stride = k;
  qa.y = out->data();
  qa.y_row_stride = stride;
  qa.device = qg::Device::cpu();
  QG_OK(qg::quantize(qa));
}

// float64 reference from the codes: sum_b d_w * d_a * sum_i (w_i - 8) * a_i.
std::vector<double> reference_gemm(const std::vector<uint8_t>& w, const std::vector<uint8_t>& a,
                                   const GemmCase& g, int64_t ldw, int64_t lda) {
  const int64_t nb = g.k / 32;
  std::vector<double> ref(static_cast<size_t>(g.m * g.n), 0.0);
  std::vector<double> dw(static_cast<size_t>(g.m * nb)), da(static_cast<size_t>(g.n * nb));
  for (int64_t r = 0; r < g.m; ++r)
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* p = w.data() + r * ldw + b * 18;
      dw[r * nb + b] = fp16_to_double(static_cast<uint16_t>(p[0] | (p[1] << 8)));
    }
  for (int64_t r = 0; r < g.n; ++r)
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* p = a.data() + r * lda + b * 36;
      da[r * nb + b] = fp16_to_double(static_cast<uint16_t>(p[0] | (p[1] << 8)));
    }
  for (int64_t i = 0; i < g.m; ++i)
    for (int64_t j = 0; j < g.n; ++j) {
      double acc = 0.0;
      for (int64_t b = 0; b < nb; ++b) {
        const uint8_t* wb = w.data() + i * ldw + b * 18 + 2;
        const int8_t* ab = reinterpret_cast<const int8_t*>(a.data() + j * lda + b * 36 + 4);
        int sumi = 0;
        for (int q = 0; q < 16; ++q) {
          sumi += ((wb[q] & 0x0F) - 8) * ab[q];
          sumi += ((wb[q] >> 4) - 8) * ab[q + 16];
        }
        acc += dw[i * nb + b] * da[j * nb + b] * sumi;
      }
      ref[i * g.n + j] = acc;
    }
  return ref;
}

// Runs one case on CUDA (on `stream`) and checks it; returns C (ldc layout).
void run_gemm_case(const GemmCase& g, cudaStream_t stream, uint32_t seed, std::vector<float>* c_out,
                   std::string* chosen_out = nullptr) {
  SCOPED_TRACE(describe(g) + " seed=" + std::to_string(seed));
  std::mt19937 rng(seed);
  const int64_t nb = g.k / 32;
  const int64_t ldw = nb * 18 + g.ldw_pad, lda = nb * 36 + g.lda_pad, ldc = g.n + g.ldc_pad;
  std::vector<uint8_t> w, a;
  ASSERT_NO_FATAL_FAILURE(quantize_on_cpu(qg::Format::q4_0, g.m, g.k, ldw, rng, &w));
  ASSERT_NO_FATAL_FAILURE(quantize_on_cpu(qg::Format::q8_1, g.n, g.k, lda, rng, &a));

  DeviceBuffer dw(w.size() + g.w_offset), da(a.size() + g.a_offset);
  const size_t c_count = static_cast<size_t>(g.m * ldc);
  DeviceBuffer dc(c_count * 4);
  ASSERT_TRUE(dw.ok() && da.ok() && dc.ok());
  CUDA_OK(cudaMemcpy(dw.at(g.w_offset), w.data(), w.size(), cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(da.at(g.a_offset), a.data(), a.size(), cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemset(dc.at(), 0xFF, c_count * 4));  // NaN poison: unwritten outputs fail
  // The copies and the memset ran on the legacy stream, which a non-blocking
  // stream of the caller's does not wait for; the memset (and a copy from
  // pageable memory) may still be running when its call returns.
  CUDA_OK(cudaDeviceSynchronize());

  qg::GemmArgs args;
  args.a = {dw.at(g.w_offset), qg::Format::q4_0, g.m, g.k, ldw, {}, {}};
  args.b = {da.at(g.a_offset), qg::Format::q8_1, g.n, g.k, lda, {}, {}};
  args.c = dc.at<float>();
  args.ldc = ldc;
  args.device = qg::Device::cuda(0);
  args.fn = "qg.gemm_q4_0_q8_1";

  if (g.force_kernel) {
    const qg::detail::GemmKernel* k = qgtest::find_gemm_kernel(qg::detail::cuda::registry(), g.force_kernel);
    ASSERT_NE(k, nullptr) << g.force_kernel;
    const qg::detail::DeviceScope scope(args.device);  // as the dispatcher opens it
    std::string why;
    ASSERT_TRUE(k->can_run(args, &why)) << g.force_kernel << ": " << why;
    if (chosen_out) *chosen_out = k->name;
    QG_OK(k->run(args, stream));
  } else {
    qg::Explanation ex;
    QG_OK(qg::explain(args, &ex));
    EXPECT_EQ(ex.op, "qg.gemm_q4_0_q8_1");
    EXPECT_EQ(ex.problem, "q4_0 x q8_1 on cuda:0");
    if (chosen_out) *chosen_out = ex.chosen;
    if (g.expect_impl) {
      std::string lines;
      for (const std::string& s : ex.candidates) lines += "\n  " + s;
      EXPECT_NE(ex.chosen.find(g.expect_impl), std::string::npos)
          << "expected " << g.expect_impl << ", chosen " << ex.chosen << lines;
    }
    QG_OK(qg::gemm(args, stream));
  }
  CUDA_OK(cudaStreamSynchronize(stream));
  std::vector<float> c(c_count);
  CUDA_OK(cudaMemcpy(c.data(), dc.at(), c_count * 4, cudaMemcpyDeviceToHost));

  const std::vector<double> ref = reference_gemm(w, a, g, ldw, lda);
  double err = 0.0, norm = 0.0;
  int64_t bad = 0;
  for (int64_t i = 0; i < g.m; ++i) {
    for (int64_t j = 0; j < ldc; ++j) {
      const float v = c[i * ldc + j];
      if (j >= g.n) {  // padding between rows of C must stay untouched
        if (bits_of(v) != 0xFFFFFFFFu && bad++ < 5)
          ADD_FAILURE() << "C padding written at (" << i << ", " << j << "): " << v;
        continue;
      }
      if (!std::isfinite(v)) {
        if (bad++ < 5) ADD_FAILURE() << "C(" << i << ", " << j << ") = " << v;
        continue;
      }
      const double r = ref[i * g.n + j];
      err += (v - r) * (v - r);
      norm += r * r;
    }
  }
  EXPECT_EQ(bad, 0);
  const double nmse = norm > 0 ? err / norm : err;
  EXPECT_LE(nmse, 1e-6) << "NMSE vs float64 reference";
  if (c_out) *c_out = std::move(c);
}

// The kernel dispatch picks for N > 8 with aligned operands: the tensor-core
// kernel from sm_80 on, the DP4A tiles before.
const char* tiled_impl() {
  std::string why;
  const std::vector<qg::CudaDeviceInfo> devs = qg::cuda_devices(&why);
  return !devs.empty() && devs[0].compute_capability >= 80 ? "cuda_mma" : "dp4a_tiled";
}

// ... and for M >= 128, N >= 9, K % 256 == 0 on an sm_90 device with the
// sm_90a image: the warpgroup kernel.
bool warpgroup_runs() {
  std::string why;
  const qg::detail::GemmKernel* k = qgtest::find_gemm_kernel(qg::detail::cuda::registry(), "cuda_wgmma");
  return k && qgtest::gemm_kernel_runs_on(*k, qg::Device::cuda(0), &why);
}
const char* warpgroup_impl() { return warpgroup_runs() ? "cuda_wgmma" : tiled_impl(); }

// Whether the registry's kernel `name` takes an M x N x K Q4_0 x Q8_1 GEMM
// with contiguous rows on cuda:0: its arch window, then its can_run (the
// build's image, the occupancy query, the shape rules). can_run reads only
// the operands' addresses, so a small aligned buffer stands in for them.
bool kernel_takes(const char* name, int64_t m, int64_t n, int64_t k) {
  std::string why;
  const qg::detail::GemmKernel* kern = qgtest::find_gemm_kernel(qg::detail::cuda::registry(), name);
  if (!kern || !qgtest::gemm_kernel_runs_on(*kern, qg::Device::cuda(0), &why)) return false;
  alignas(16) static uint8_t stand_in[16];
  qg::GemmArgs g;
  g.a = {stand_in, qg::Format::q4_0, m, k, k / 32 * 18, {}, {}};
  g.b = {stand_in, qg::Format::q8_1, n, k, k / 32 * 36, {}, {}};
  g.device = qg::Device::cuda(0);
  g.fn = "qg.gemm";
  return kern->can_run(g, &why);
}
// The bulk-copy GEMV: N = 7..8, K % 256 == 0, 16-byte-aligned W rows and at
// most one 32-row group per resident CTA on an sm_90 device (tried before
// the warpgroup kernel and cuda_mmvq).
bool bulk_runs() { return kernel_takes("cuda_gemv_bulk", 32, 8, 256); }
int sm_count() {
  int sms = 0;
  return cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0) == cudaSuccess ? sms : 0;
}
// The cp.async ring GEMV: N = 1..6, K % 256 == 0 and 16-byte-aligned W rows
// on an sm_90 device, with N x K's activations small enough for shared
// memory (tried after the tensor-core ring GEMV, the bulk GEMV and the
// warpgroup kernel, before cuda_mmvq).
constexpr int64_t kRingMaxN = 6;
bool ring_runs() { return kernel_takes("cuda_gemv_ring", 16, 1, 256); }
// Decode shapes with such rows: the tensor-core ring GEMV (N >= 4, or 3
// where M is at most 16 rows an SM or past one wave of its 32-row groups) or the
// bulk GEMV where one takes the shape, else the warpgroup kernel for N =
// 7..8 where that runs (M >= 128), else the ring GEMV where it takes the
// shape, else cuda_mmvq.
const char* decode_impl(int64_t m, int64_t n, int64_t k) {
  if (kernel_takes("cuda_gemv_mma", m, n, k)) return "cuda_gemv_mma";
  if (kernel_takes("cuda_gemv_bulk", m, n, k)) return "cuda_gemv_bulk";
  if (n >= 7 && m >= 128 && warpgroup_runs()) return "cuda_wgmma";
  if (kernel_takes("cuda_gemv_ring", m, n, k)) return "cuda_gemv_ring";
  return "mmvq";
}

TEST_F(CudaBackend, GemmShapes) {
  const char* tiled = tiled_impl();
  const GemmCase cases[] = {
      {1, 1, 32, 0, 0, 0, 0, 0, "mmvq"},
      {7, 3, 96, 0, 0, 0, 0, 0, "mmvq"},
      {33, 9, 320, 0, 0, 0, 0, 0, tiled},
      {130, 8, 4096, 0, 0, 0, 0, 0, decode_impl(130, 8, 4096)},
      {127, 8, 4096, 0, 0, 0, 0, 0, decode_impl(127, 8, 4096)},
      {64, 64, 128, 0, 0, 0, 0, 0, tiled},
      {257, 129, 1024, 0, 0, 0, 0, 0, warpgroup_impl()},
      {1, 512, 256, 0, 0, 0, 0, 0, tiled},
      {5, 300, 32, 0, 0, 0, 0, 0, tiled},
      {4096, 1, 4096, 0, 0, 0, 0, 0, decode_impl(4096, 1, 4096)},
      {512, 2, 14336, 0, 0, 0, 0, 0, decode_impl(512, 2, 14336)},
      {65, 100, 14336, 0, 0, 0, 0, 0, tiled},
  };
  uint32_t seed = kSeed;
  for (const GemmCase& g : cases) run_gemm_case(g, nullptr, seed++, nullptr);
}

// Every tail of every tile the kernels use (GEMV N <= 8; tensor-core tiles of
// 8, 16, 32, 64 and 128 columns; DP4A tiles of 64), M a multiple of none, and
// K = 13 blocks: one full 8-block stage and a partial one.
TEST_F(CudaBackend, GemmNSweep) {
  uint32_t seed = kSeed + 100;
  const char* tiled = tiled_impl();
  for (int64_t n : {1, 2, 3, 4, 5, 6, 7, 8, 9, 15, 16, 17, 31, 33, 63, 65, 127, 128, 129, 512}) {
    GemmCase g{97, n, 32 * 13};
    g.expect_impl = n <= 8 ? "mmvq" : tiled;
    run_gemm_case(g, nullptr, seed++, nullptr);
  }
  for (int64_t n : {1, 9, 17, 129}) run_gemm_case({50, n, 32}, nullptr, seed++, nullptr);  // K = 32
}

// Shapes big enough for the tensor-core kernel's 64 x 128 and 128 x 128 tiles
// (it picks them once there are about a wave of them), with K tails, once with
// 16-byte-aligned rows (16-byte copies) and once without (4-byte copies).
TEST_F(CudaBackend, GemmLargeTiles) {
  uint32_t seed = kSeed + 150;
  const char* tiled = tiled_impl();
  run_gemm_case({1300, 1100, 320, 0, 0, 0, 0, 0, tiled}, nullptr, seed++, nullptr);
  run_gemm_case({1000, 800, 288, 0, 0, 0, 0, 0, tiled}, nullptr, seed++, nullptr);
  run_gemm_case({1000, 800, 288, 6, 12, 0, 0, 0, tiled}, nullptr, seed++, nullptr);
  run_gemm_case({1031, 777, 512, 0, 0, 5, 0, 0, warpgroup_impl()}, nullptr, seed++, nullptr);
}

// Few tiles and a long K: on sm_90 the tensor-core kernel splits K across the
// CTAs of a cluster and adds their tiles through distributed shared memory.
// Tails in M, N and K, 16-byte and 4-byte copies, a padded C; the sum order is
// fixed, so two runs are bit-identical. (M = 5000 at N = 16: the warpgroup
// kernel's 16-token tile, forced by name where it runs, as dispatch gives
// such shapes to cuda_gemv_mma.)
TEST_F(CudaBackend, GemmSplitKAcrossClusters) {
  uint32_t seed = kSeed + 170;
  const char* tiled = tiled_impl();
  for (const GemmCase& g : {GemmCase{97, 12, 4192, 0, 0, 0, 0, 0, tiled}, GemmCase{300, 70, 8224, 0, 0, 3, 0, 0, tiled},
                            GemmCase{33, 129, 2080, 6, 12, 0, 0, 0, tiled}, GemmCase{5000, 16, 14336, 0, 0, 0, 0, 0, warpgroup_runs() ? nullptr : tiled,
                                     warpgroup_runs() ? "cuda_wgmma" : nullptr},
                            GemmCase{130, 40, 1056, 0, 0, 0, 2, 0, tiled}}) {
    std::vector<float> first, again;
    run_gemm_case(g, nullptr, seed, &first);
    run_gemm_case(g, nullptr, seed, &again);
    ASSERT_EQ(first.size(), again.size());
    EXPECT_EQ(0, std::memcmp(first.data(), again.data(), first.size() * 4)) << describe(g);
    ++seed;
  }
}

TEST_F(CudaBackend, GemmStridedRows) {
  uint32_t seed = kSeed + 200;
  // ldw, lda, ldc larger than the minimum, still aligned enough for the fast
  // paths (96 and 192 bytes: the tensor-core kernel's 16-byte copies).
  run_gemm_case({45, 5, 256, 10, 8, 3, 0, 0, "mmvq"}, nullptr, seed++, nullptr);
  run_gemm_case({70, 77, 288, 6, 12, 5, 0, 0, tiled_impl()}, nullptr, seed++, nullptr);
}

// Each path of the GEMV kernel (cuda_mmvq) for several N: 16-byte W chunks
// with 16-byte A loads or 32-bit A loads (A's pointer or row stride off 16), the 16-bit per-block path (W's pointer or row stride
// off 16), a K that is not a multiple of 256 (chunks plus a per-block tail;
// ldw padded to a multiple of 16, or a single row), K = 32 (tail only), long K
// (every warp of a CTA), and M tails of every row group (8 or 16 rows per CTA).
// The kernel runs itself (the tensor-core ring GEMV takes some of these
// shapes first in dispatch). The last case runs twice: bit-identical.
TEST_F(CudaBackend, GemmMmvqPaths) {
  uint32_t seed = kSeed + 250;
  constexpr const char* kMmvq = "cuda_mmvq";
  for (int64_t n : {1, 2, 3, 5, 8}) {
    const GemmCase cases[] = {
        {61, n, 4096, 0, 0, 0, 0, 0, nullptr, kMmvq},       // 16-byte W and A
        {61, n, 4096, 0, 0, 0, 0, 4, nullptr, kMmvq},       // A at 4 mod 16: 32-bit A loads
        {61, n, 4096, 0, 4, 0, 0, 0, nullptr, kMmvq},       // lda = 16k + 4 (N = 1: still 16-byte)
        {61, n, 4096, 0, 0, 0, 2, 0, nullptr, kMmvq},       // W at 2 mod 16: per-block path
        {61, n, 4096, 2, 0, 1, 0, 0, nullptr, kMmvq},       // ldw = 16k + 2: per-block path
        {37, n, 32 * 13, 6, 12, 1, 0, 0, nullptr, kMmvq},   // ldw 240, lda 480: 1 chunk + 5 tail blocks
        {1, n, 32 * 13, 0, 0, 0, 0, 0, nullptr, kMmvq},     // one row: its stride does not matter
        {17, n, 32, 14, 12, 0, 0, 0, nullptr, kMmvq},       // K = 32, 16-byte rows: tail only
        {17, n, 32, 0, 0, 0, 0, 0, nullptr, kMmvq},         // K = 32, packed: per-block path
        {23, n, 32 * 264, 0, 0, 0, 0, 0, nullptr, kMmvq},   // 33 chunks: uneven split over warps
        {127, n, 14336, 0, 0, 2, 0, 0, nullptr, kMmvq},     // long K, several CTAs
    };
    for (const GemmCase& g : cases) run_gemm_case(g, nullptr, seed++, nullptr);
  }
  const GemmCase g{300, 8, 14336 + 96, 10, 4, 0, 0, 0, nullptr, kMmvq};  // ldw, lda multiples of 16; 3-block tail
  std::vector<float> first, again;
  run_gemm_case(g, nullptr, seed, &first);
  run_gemm_case(g, nullptr, seed, &again);
  ASSERT_EQ(first.size(), again.size());
  EXPECT_EQ(0, std::memcmp(first.data(), again.data(), first.size() * 4)) << describe(g);
}

// The bulk GEMV's ring of 4 stages (64 blocks each): K = 14336 is 7 stages,
// so the ring wraps; with M = 32 x SMs - 5 every SM streams one row group,
// the last with 27 rows, and K = 2304 ends on a short stage of 8 blocks; one
// more row group than SMs is refused. N = 7..8 (the N it takes).
TEST_F(CudaBackend, GemvBulkRingAndTails) {
  if (!bulk_runs()) GTEST_SKIP() << "cuda_gemv_bulk does not run on cuda:0";
  const int sms = sm_count();
  ASSERT_GT(sms, 0);
  qgtest::CudaMemory mem;
  qgtest::GemmKernelTester tester(qg::detail::cuda::registry(), "cuda_gemv_bulk", mem);
  struct Shape {
    int64_t m, k;
  };
  int salt = 0;
  for (const Shape s : {Shape{300, 14336}, Shape{32 * sms - 5, 2304}})
    for (int64_t n : {7, 8}) {
      QG_SEEDED_RNG(rng, 2100 + ++salt);
      qgtest::GemmCase c = qgtest::random_case(rng, s.m, n, s.k);
      EXPECT_TRUE(tester.run_and_check(c)) << "M=" << s.m << " N=" << n << " K=" << s.k << ": " << tester.refusals();
    }
  QG_SEEDED_RNG(rng, 2199);
  qgtest::GemmCase over = qgtest::random_case(rng, 32 * sms + 1, 8, 256);
  EXPECT_FALSE(tester.run_and_check(over)) << "one row group more than SMs should be refused";
  EXPECT_NE(tester.refusals().find("row groups of 32"), std::string::npos) << tester.refusals();
}

// The tensor-core ring GEMV (N = 3..32): K's stages of 8 blocks split over
// a CTA's 8 warps, evenly (K = 2048: one a warp; 14336: seven) and not (K =
// 256: one stage, seven warps idle; 2304: nine stages), W rows padded by 16
// bytes and C rows by one element, A rows padded by 16 bytes, and A only
// 4-byte aligned (its base 4 or 8 mod 16, or its row stride 4 mod 16:
// 4-byte copies). With S SMs, up to M = 16 S rows go in groups of 16 (M =
// 1, 45: a group's tail; 64, 300), N = 3..16 and seven N of four n8 tiles
// (17..32); past that in groups of 32: within one wave (16 S + 45, 32 S -
// 5; N = 4, 8, 9, 16, 17, 24; at N = 4, 9, 21 and 32 also one stage,
// 4-byte A copies, padded W and C; N = 27 at K = 12288), one n8 tile at
// N <= 8, two at N = 9..16, four at 17..32 (past K = 12288 to 24). Past one wave, c = ceil(groups / SMs) CTAs an SM: 4 warps at
// c = 2 (M = 32 S + 1: N = 3, 5, 12, 20; 2 x 32 S - 3: N = 31, 32) and 3
// (2 x 32 S + 33, 3 x 32 S: N = 4, 9, 14, 16), 2 warps at c = 4 (3 x 32 S
// + 7: N = 3, 6, 7), 4 warps in waves of four an SM at c = 6 (5 x 32 S +
// 77: N = 8), with stages split evenly, unevenly (K = 2304) and one stage
// for two warps (K = 256). Non-finite activation scales at N = 6, 14 and
// 27. Refused: N = 33; N = 3, and N = 25 at K = 12544, within one wave of
// 32-row groups;
// more row groups than three an SM at N = 9..16 and two at 17..32; an A
// row stride whose tile's offsets pass 32 bits. The last cases run twice:
// bit-identical.
TEST_F(CudaBackend, GemvMmaRingSlicesAndTails) {
  constexpr const char* kMmaRing = "cuda_gemv_mma";
  if (!kernel_takes(kMmaRing, 32, 16, 256)) GTEST_SKIP() << kMmaRing << " does not run on cuda:0";
  uint32_t seed = kSeed + 380;
  const int64_t one_wave = 32 * sm_count() - 5;
  std::vector<int64_t> ns;
  for (int64_t n = 3; n <= 16; ++n) ns.push_back(n);
  for (int64_t n : {17, 18, 23, 24, 25, 31, 32}) ns.push_back(n);  // four n8 tiles
  for (const int64_t n : ns) {
    const GemmCase cases[] = {
        {1, n, 256, 0, 0, 0, 0, 0, nullptr, kMmaRing},       // one stage: seven warps idle
        {45, n, 2304, 0, 0, 0, 0, 0, nullptr, kMmaRing},     // nine stages over eight warps; a group's tail
        {300, n, 14336, 16, 0, 1, 0, 0, nullptr, kMmaRing},  // seven stages a warp; padded W and C rows
        {64, n, 2048, 0, 16, 0, 0, 0, nullptr, kMmaRing},    // one stage a warp; A rows padded by 16 bytes
        {45, n, 4096, 0, 4, 0, 0, 0, nullptr, kMmaRing},     // A's row stride 4 mod 16: 4-byte copies
        {45, n, 2304, 0, 0, 0, 0, 4, nullptr, kMmaRing},     // A's base 4 mod 16
        {45, n, 4096, 0, 0, 0, 0, 8, nullptr, kMmaRing},     // A's base 8 mod 16
    };
    for (const GemmCase& g : cases) run_gemm_case(g, nullptr, seed++, nullptr);
  }
  for (int64_t n : {4, 8, 9, 16, 17, 24}) {
    run_gemm_case({one_wave, n, 4096, 0, 0, 0, 0, 0, nullptr, kMmaRing}, nullptr, seed++, nullptr);
    run_gemm_case({16 * sm_count() + 45, n, 2304, 0, 0, 0, 0, 0, nullptr, kMmaRing}, nullptr, seed++, nullptr);
  }
  // 32-row groups within one wave: one stage, 4-byte A copies, padded W and C.
  for (int64_t n : {4, 9, 21, 32}) {  // N = 32: K up to 12288
    const int64_t m = 16 * sm_count() + 45;
    run_gemm_case({m, n, 256, 0, 0, 0, 0, 0, nullptr, kMmaRing}, nullptr, seed++, nullptr);
    run_gemm_case({m, n, 4096, 0, 4, 0, 0, 0, nullptr, kMmaRing}, nullptr, seed++, nullptr);
    run_gemm_case({m, n, 2304, 16, 0, 1, 0, 0, nullptr, kMmaRing}, nullptr, seed++, nullptr);
  }
  run_gemm_case({16 * sm_count() + 45, 27, 12288, 0, 0, 0, 0, 0, nullptr, kMmaRing}, nullptr, seed++, nullptr);
  // Past one wave: CTAs of 4 warps, two or three an SM; of 2, four an SM;
  // of 4, in waves of four an SM.
  const int64_t sms = sm_count();
  const GemmCase past[] = {
      {32 * sms + 1, 5, 2304, 0, 0, 0, 0, 0, nullptr, kMmaRing},        // 4 warps, nine stages
      {32 * sms + 1, 3, 4096, 0, 0, 0, 0, 0, nullptr, kMmaRing},        // N = 3, 4 warps
      {32 * sms + 1, 12, 2304, 0, 0, 0, 0, 0, nullptr, kMmaRing},       // two n8 tiles, 4 warps
      {2 * 32 * sms + 33, 16, 4096, 0, 0, 1, 0, 0, nullptr, kMmaRing},  // padded C rows
      {2 * 32 * sms + 33, 4, 4096, 0, 0, 0, 0, 4, nullptr, kMmaRing},   // A's base 4 mod 16
      {3 * 32 * sms, 9, 256, 0, 0, 0, 0, 0, nullptr, kMmaRing},         // two n8 tiles, three groups an SM
      {3 * 32 * sms + 7, 3, 256, 0, 0, 0, 0, 0, nullptr, kMmaRing},     // 2 warps, one stage
      {3 * 32 * sms + 7, 6, 2304, 16, 4, 0, 0, 0, nullptr, kMmaRing},   // 2 warps; padded W, 4-byte A copies
      {5 * 32 * sms + 77, 8, 512, 0, 0, 1, 0, 0, nullptr, kMmaRing},    // 4 warps, in waves of four an SM
      {32 * sms + 1, 20, 2304, 0, 0, 1, 0, 0, nullptr, kMmaRing},       // four n8 tiles, 4 warps, two an SM
      {2 * 32 * sms - 3, 32, 256, 16, 0, 0, 0, 4, nullptr, kMmaRing},   // one stage; padded W, 4-byte A copies
  };
  for (const GemmCase& g : past) run_gemm_case(g, nullptr, seed++, nullptr);
  qgtest::CudaMemory mem;
  qgtest::GemmKernelTester tester(qg::detail::cuda::registry(), kMmaRing, mem);
  // C as x @ W^T (rows adjacent, a linear layer's layout), where the warps'
  // partial tiles are laid column by column and stored token by token: 16-
  // and 32-row groups, one, two and four n8 tiles, within one wave and past
  // it (4-warp CTAs two an SM, 2-warp ones four an SM), fp32 and bf16 C,
  // C's token rows padded.
  {
    QG_SEEDED_RNG(rng, 2327);
    struct MContiguous {
      int64_t m, n, k;
      qg::DType dtype;
    };
    const MContiguous mc[] = {{45, 30, 2304, qg::DType::f32},           {300, 8, 4096, qg::DType::bf16},
                              {one_wave, 17, 4096, qg::DType::f32},     {16 * sms + 45, 32, 2304, qg::DType::f32},
                              {16 * sms + 45, 12, 256, qg::DType::f16}, {32 * sms + 1, 20, 2304, qg::DType::f32},
                              {2 * 32 * sms - 3, 31, 256, qg::DType::bf16}, {3 * 32 * sms + 7, 6, 2304, qg::DType::f32}};
    for (const MContiguous& t : mc) {
      qgtest::GemmCase c = qgtest::random_case(rng, t.m, t.n, t.k);
      qgtest::set_c_layout(c, t.dtype, 1, t.m + 3);
      EXPECT_TRUE(tester.run_and_check(c)) << "C m-contiguous, M=" << t.m << " N=" << t.n << " K=" << t.k << ": "
                                           << tester.refusals();
    }
  }
  // A's row stride such that the N - 1 strides of A's span fit a 32-bit
  // offset but the 15, 31 or 8 of the tokens whose offsets a lane forms (16-,
  // 32- and 8-token tiles) do not: the offsets of the tokens past N would
  // overflow (can_run reads only the addresses).
  {
    alignas(16) static uint8_t stand_in[16];
    qg::GemmArgs g;
    g.a = {stand_in, qg::Format::q4_0, 64, 256, 8 * 18, {}, {}};
    g.b = {stand_in, qg::Format::q8_1, 12, 256, int64_t{80} << 20, {}, {}};
    g.device = qg::Device::cuda(0);
    g.fn = "qg.gemm";
    const qg::detail::GemmKernel* kern = qgtest::find_gemm_kernel(qg::detail::cuda::registry(), kMmaRing);
    ASSERT_NE(kern, nullptr);
    std::string why;
    EXPECT_TRUE(kern->can_run(g, &why)) << why;  // 16-token tiles: 15 strides fit
    g.b.rows = 20;                                // 32-token tiles: 31 do not
    EXPECT_FALSE(kern->can_run(g, &why));
    EXPECT_NE(why.find("31 of them must fit a 32-bit offset"), std::string::npos) << why;
    g.b = {stand_in, qg::Format::q8_1, 4, 256, int64_t{320} << 20, {}, {}};  // 8-token tiles: 8 do not
    why.clear();
    EXPECT_FALSE(kern->can_run(g, &why));
    EXPECT_NE(why.find("8 of them must fit a 32-bit offset"), std::string::npos) << why;
  }
  const std::pair<int64_t, const char*> refused[] = {
      {3, "in one wave of row groups of 32 (measured faster on cuda_gemv_ring)"},
      {25, "> 12288 in row groups of 32 (measured faster on cuda_wgmma_folded)"},
      {33, "outside 3..32"}};
  for (const auto& [n, why] : refused) {
    qgtest::GemmKernelTester fresh(qg::detail::cuda::registry(), kMmaRing, mem);  // its own refusal list
    QG_SEEDED_RNG(rng, 2300 + n);
    qgtest::GemmCase c = qgtest::random_case(rng, n == 33 ? 64 : 16 * sm_count() + 45, n, n == 25 ? 12544 : 4096);
    EXPECT_FALSE(fresh.run_and_check(c)) << "N = " << n << " should be refused";
    EXPECT_NE(fresh.refusals().find(why), std::string::npos) << fresh.refusals();
  }
  {
    qgtest::GemmKernelTester fresh(qg::detail::cuda::registry(), kMmaRing, mem);
    QG_SEEDED_RNG(rng, 2325);
    qgtest::GemmCase c = qgtest::random_case(rng, 3 * 32 * sm_count() + 1, 12, 256);
    EXPECT_FALSE(fresh.run_and_check(c)) << "more row groups than three CTAs an SM should be refused at N = 12";
    EXPECT_NE(fresh.refusals().find("row groups of 32"), std::string::npos) << fresh.refusals();
  }
  {
    qgtest::GemmKernelTester fresh(qg::detail::cuda::registry(), kMmaRing, mem);
    QG_SEEDED_RNG(rng, 2326);
    qgtest::GemmCase c = qgtest::random_case(rng, 2 * 32 * sm_count() + 1, 32, 256);
    EXPECT_FALSE(fresh.run_and_check(c)) << "more row groups than two CTAs an SM should be refused at N = 32";
    EXPECT_NE(fresh.refusals().find("row groups of 32"), std::string::npos) << fresh.refusals();
  }
  // The same at N = 27 (four n8 tiles; tokens 27..31 read token 26's
  // scales): tokens 2 and 26.
  {
    QG_SEEDED_RNG(rng, 2332);
    qgtest::GemmCase c = qgtest::random_case(rng, 70, 27, 4096);
    qgtest::store_u16(c.a_block(2, 33), 0x7C00);
    qgtest::store_u16(c.a_block(26, 120), 0x7E00);
    EXPECT_TRUE(tester.run_and_check(c)) << tester.refusals();
  }
  // An activation block of +Inf scale and one of NaN (tokens 3 and 11),
  // each in a different stage of a different warp's slice: those stages take
  // the exact non-finite rescale.
  {
    QG_SEEDED_RNG(rng, 2330);
    qgtest::GemmCase c = qgtest::random_case(rng, 70, 14, 4096);
    qgtest::store_u16(c.a_block(3, 20), 0x7C00);
    qgtest::store_u16(c.a_block(11, 97), 0x7E00);
    EXPECT_TRUE(tester.run_and_check(c)) << tester.refusals();
  }
  // The same at N = 6 (one n8 tile; tokens 6 and 7 read token 5's scales).
  {
    QG_SEEDED_RNG(rng, 2331);
    qgtest::GemmCase c = qgtest::random_case(rng, 70, 6, 4096);
    qgtest::store_u16(c.a_block(1, 20), 0x7C00);
    qgtest::store_u16(c.a_block(5, 97), 0x7E00);
    EXPECT_TRUE(tester.run_and_check(c)) << tester.refusals();
  }
  for (const GemmCase& g : {GemmCase{one_wave, 13, 14336, 0, 0, 0, 0, 0, nullptr, kMmaRing},
                            GemmCase{3 * 32 * sms + 7, 7, 2304, 0, 0, 0, 0, 0, nullptr, kMmaRing},
                            GemmCase{2 * 32 * sms + 33, 14, 4096, 0, 0, 0, 0, 0, nullptr, kMmaRing},
                            GemmCase{300, 10, 14336, 0, 0, 0, 0, 0, nullptr, kMmaRing},
                            GemmCase{one_wave, 23, 14336, 0, 0, 0, 0, 0, nullptr, kMmaRing},
                            GemmCase{2 * 32 * sms - 3, 31, 4096, 0, 0, 0, 0, 0, nullptr, kMmaRing}}) {
    std::vector<float> first, again;
    run_gemm_case(g, nullptr, seed, &first);
    run_gemm_case(g, nullptr, seed, &again);
    ASSERT_EQ(first.size(), again.size());
    EXPECT_EQ(0, std::memcmp(first.data(), again.data(), first.size() * 4)) << describe(g);
  }
}

// The ring GEMV's stages (64 blocks) and rings (2 to 4 slots a warp, by
// N x K; 8 warps a CTA up to N = 4, 16 at N = 5..6): K = 256 is one short
// stage, K = 2304 a full one and a short one of 8 blocks, K = 14336 seven
// stages (the ring wraps; at N = 3 and 4 a ring of three and two slots
// beside the activations, at N = 5 and 6 of four and three); M = 1, an odd M (the last
// warp's second row is past M), and rows for several CTAs; W rows padded by
// 16 bytes (still 16-byte aligned); A copied into shared memory by 16-byte
// pieces, and by 4-byte ones (A's base 4 or 8 mod 16, or a padded row
// stride); more rows than one wave of CTAs holds. Forced by name, every N it
// takes; N = 7, activations too large for shared memory, and N = 3 past one
// wave are refused. The last cases run twice: bit-identical.
TEST_F(CudaBackend, GemvRingStagesAndTails) {
  if (!ring_runs()) GTEST_SKIP() << "cuda_gemv_ring does not run on cuda:0";
  uint32_t seed = kSeed + 280;
  constexpr const char* kRing = "cuda_gemv_ring";
  for (int64_t n = 1; n <= kRingMaxN; ++n) {
    const GemmCase cases[] = {
        {1, n, 256, 0, 0, 0, 0, 0, nullptr, kRing},        // one short stage
        {61, n, 2304, 0, 0, 0, 0, 0, nullptr, kRing},      // a full stage and 8 blocks; odd M
        {300, n, 14336, 16, 0, 1, 0, 0, nullptr, kRing},   // the ring wraps; padded W rows and C
        {45, n, 4096, 0, 4, 0, 0, 0, nullptr, kRing},      // A's row stride 4 mod 16: 4-byte copies
        {45, n, 4096, 0, 0, 0, 0, 4, nullptr, kRing},      // A's base 4 mod 16: 4-byte copies
        {45, n, 4096, 0, 0, 0, 0, 8, nullptr, kRing},      // A's base 8 mod 16: 4-byte copies
    };
    for (const GemmCase& g : cases) run_gemm_case(g, nullptr, seed++, nullptr);
  }
  // More rows than one wave of CTAs (two an SM): the persistent CTAs' warps
  // run several row pairs through one ring (N <= 2; from N = 3 refused,
  // below): one stage a pair (the first requests span three pairs), a full
  // and a short stage, and two full ones (K = 2304 and 4096: the instance of
  // three CTAs an SM and rings of three slots, about 1.3 pairs a warp), and
  // at K = 14592 just past one wave (most warps one pair, some two), the
  // ring wrapping inside and across pairs.
  const int64_t past_wave = 16 * 4 * sm_count() + 19;
  for (int64_t n : {1, 2}) {
    run_gemm_case({past_wave, n, 256, 0, 0, 0, 0, 0, nullptr, kRing}, nullptr, seed++, nullptr);
    run_gemm_case({past_wave, n, 2304, 0, 0, 0, 0, 0, nullptr, kRing}, nullptr, seed++, nullptr);
    run_gemm_case({past_wave, n, 4096, 0, 0, 0, 0, 0, nullptr, kRing}, nullptr, seed++, nullptr);
    run_gemm_case({16 * 2 * sm_count() + 77, n, 14336 + 256, 0, 0, 1, 0, 0, nullptr, kRing}, nullptr, seed++,
                  nullptr);
    // A's base 4 mod 16 past one wave: the chained form's 4-byte copies of
    // the activations, whose own commit group shifts the ring's numbering.
    run_gemm_case({past_wave, n, 2304, 0, 0, 0, 0, 4, nullptr, kRing}, nullptr, seed++, nullptr);
  }
  // Chained through rings of three and of two slots (N = 2 beside K = 20480
  // and K = 28672 activations).
  for (int64_t k : {20480, 28672})
    run_gemm_case({32 * sm_count() + 77, 2, k, 0, 0, 0, 0, 0, nullptr, kRing}, nullptr, seed++, nullptr);
  {
    qgtest::CudaMemory mem;
    qgtest::GemmKernelTester tester(qg::detail::cuda::registry(), kRing, mem);
    QG_SEEDED_RNG(rng, 2201);
    qgtest::GemmCase seven = qgtest::random_case(rng, 64, kRingMaxN + 1, 4096);
    EXPECT_FALSE(tester.run_and_check(seven)) << "N = 7 should be refused";
    EXPECT_NE(tester.refusals().find("N=7 > 6"), std::string::npos) << tester.refusals();
    // 6 x 736 blocks of activations leave no room for two stages of the ring.
    qgtest::GemmCase wide = qgtest::random_case(rng, 64, kRingMaxN, 23552);
    EXPECT_FALSE(tester.run_and_check(wide)) << "N = 6, K = 23552 should be refused";
    EXPECT_NE(tester.refusals().find("do not fit in shared memory"), std::string::npos) << tester.refusals();
    qgtest::GemmCase tall = qgtest::random_case(rng, past_wave, 3, 2304);
    EXPECT_FALSE(tester.run_and_check(tall)) << "N = 3 past one wave of CTAs should be refused";
    EXPECT_NE(tester.refusals().find("more than one wave"), std::string::npos) << tester.refusals();
  }
  for (const GemmCase& g : {GemmCase{257, 1, 14336 + 256, 0, 0, 0, 0, 0, nullptr, kRing},
                            GemmCase{257, kRingMaxN, 14336 + 256, 0, 0, 0, 0, 0, nullptr, kRing},
                            GemmCase{past_wave, 2, 2304, 0, 0, 0, 0, 0, nullptr, kRing}}) {
    std::vector<float> first, again;
    run_gemm_case(g, nullptr, seed, &first);
    run_gemm_case(g, nullptr, seed, &again);
    ASSERT_EQ(first.size(), again.size());
    EXPECT_EQ(0, std::memcmp(first.data(), again.data(), first.size() * 4)) << describe(g);
  }
}

TEST_F(CudaBackend, GemmMisalignedOperandsUseGeneric) {
  uint32_t seed = kSeed + 300;
  // A two bytes off a 4-byte boundary: no 32-bit loads of A allowed.
  run_gemm_case({19, 4, 160, 0, 0, 0, 0, 2, "generic"}, nullptr, seed++, nullptr);
  run_gemm_case({66, 40, 160, 0, 0, 0, 0, 2, "generic"}, nullptr, seed++, nullptr);
  // W at an odd address: no 16-bit loads of W allowed.
  run_gemm_case({19, 3, 96, 0, 0, 0, 1, 0, "generic"}, nullptr, seed++, nullptr);
  // Odd ldw and lda not a multiple of 4.
  run_gemm_case({21, 12, 128, 1, 2, 1, 0, 0, "generic"}, nullptr, seed++, nullptr);
}

TEST_F(CudaBackend, GemmOnNonDefaultStreamIsIdentical) {
  cudaStream_t stream = nullptr;
  CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  for (const GemmCase& g : {GemmCase{200, 4, 512}, GemmCase{200, 100, 512}}) {
    std::vector<float> c_default, c_stream, c_again;
    run_gemm_case(g, nullptr, kSeed + 400, &c_default);
    run_gemm_case(g, stream, kSeed + 400, &c_stream);
    run_gemm_case(g, stream, kSeed + 400, &c_again);
    ASSERT_EQ(c_default.size(), c_stream.size());
    // Same kernel, same data: bit-identical, and deterministic run to run.
    EXPECT_EQ(0, std::memcmp(c_default.data(), c_stream.data(), c_default.size() * 4))
        << describe(g);
    EXPECT_EQ(0, std::memcmp(c_stream.data(), c_again.data(), c_stream.size() * 4))
        << describe(g);
  }
  CUDA_OK(cudaStreamDestroy(stream));
}

TEST_F(CudaBackend, QuantizeOnNonDefaultStream) {
  SCOPED_TRACE("seed=" + std::to_string(kSeed + 500));
  cudaStream_t stream = nullptr;
  CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  std::mt19937 rng(kSeed + 500);
  const int64_t rows = 9, k = 32 * 40;
  const std::vector<float> values = make_values(rows, k, rng, true);
  const size_t y_bytes = static_cast<size_t>(rows * (k / 32) * 36);
  std::vector<uint8_t> y_cpu(y_bytes), y_gpu(y_bytes);
  qg::QuantizeArgs qa;
  qa.format = qg::Format::q8_1;
  qa.x = values.data();
  qa.rows = rows;
  qa.k = k;
  qa.x_row_stride = k;
  qa.y = y_cpu.data();
  qa.y_row_stride = (k / 32) * 36;
  qa.device = qg::Device::cpu();
  QG_OK(qg::quantize(qa));

  DeviceBuffer dx(values.size() * 4), dy(y_bytes);
  ASSERT_TRUE(dx.ok() && dy.ok());
  CUDA_OK(cudaMemcpyAsync(dx.at(), values.data(), values.size() * 4, cudaMemcpyHostToDevice, stream));
  qa.x = dx.at();
  qa.y = dy.at();
  qa.device = qg::Device::cuda(0);
  QG_OK(qg::quantize(qa, stream));
  CUDA_OK(cudaMemcpyAsync(y_gpu.data(), dy.at(), y_bytes, cudaMemcpyDeviceToHost, stream));
  CUDA_OK(cudaStreamSynchronize(stream));
  EXPECT_EQ(0, std::memcmp(y_cpu.data(), y_gpu.data(), y_bytes));
  CUDA_OK(cudaStreamDestroy(stream));
}

TEST_F(CudaBackend, DevicesReported) {
  std::string why;
  const std::vector<qg::CudaDeviceInfo> devs = qg::cuda_devices(&why);
  ASSERT_FALSE(devs.empty()) << why;
  EXPECT_GT(devs[0].compute_capability, 0);
  EXPECT_GT(devs[0].multiprocessors, 0);
  EXPECT_GT(devs[0].memory_bytes, 0);
  EXPECT_TRUE(devs[0].has_compiled_code);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

// The dispatcher's device scope (dispatch.h): a device that cannot be made
// current is named in the error, no CUDA error is left behind, and the
// caller's device stays current; before a walk of a table (ready) the
// device's own reason comes first, as it did before any scope. Runs
// without a GPU too (then nothing can be selected at all).
TEST(CudaDeviceScope, NamesTheDeviceItCannotSelect) {
  int before = -1;
  const bool have_device = cudaGetDevice(&before) == cudaSuccess;
  cudaGetLastError();
  {
    const qg::detail::DeviceScope scope(qg::Device::cuda(4096));
    const qg::Status s = scope.status("qg.test");
    EXPECT_EQ(s.code(), qg::StatusCode::cuda_error);
    EXPECT_EQ(s.message().rfind("qg.test (cuda): cannot select cuda:4096: ", 0), 0u) << s.message();
    const qg::Status r = scope.ready("qg.test");
    EXPECT_EQ(r.code(), qg::StatusCode::backend_unavailable) << r.message();
    EXPECT_NE(r.message().find("cuda:4096"), std::string::npos) << r.message();
  }
  if (have_device) {  // (without a driver every call, cudaGetLastError too, reports that)
    EXPECT_EQ(cudaGetLastError(), cudaSuccess);
    int after = -1;
    CUDA_OK(cudaGetDevice(&after));
    EXPECT_EQ(after, before);
  }
}

// A call on the current device selects nothing and leaves it current; the
// CPU needs no scope.
TEST_F(CudaBackend, DeviceScopeOnTheCurrentDevice) {
  {
    const qg::detail::DeviceScope scope(qg::Device::cuda(0));
    QG_OK(scope.status("qg.test"));
    int now = -1;
    CUDA_OK(cudaGetDevice(&now));
    EXPECT_EQ(now, 0);
  }
  const qg::detail::DeviceScope cpu(qg::Device::cpu());
  QG_OK(cpu.status("qg.test"));
  QG_OK(cpu.ready("qg.test"));
  int now = -1;
  CUDA_OK(cudaGetDevice(&now));
  EXPECT_EQ(now, 0);
}

// ------------------------------------------------------------ every CUDA kernel
// The CUDA registry as data: which kernels serve q4_0 x q8_1, in dispatch
// order, and the hardware each needs. Needs no GPU.
// QG_CUDA_FOLDED=0 turns the folded kernel off (the exact ones then take its
// shapes) and says so in its refusal; unset, it admits the same shape. Its
// can_run judges the shape alone, so this needs no GPU.
TEST(CudaRegistry, FoldedKernelTurnedOffByTheEnvironment) {
  const qg::detail::GemmKernel* k = qgtest::find_gemm_kernel(qg::detail::cuda::registry(), "cuda_wgmma_folded");
  ASSERT_NE(k, nullptr);
  alignas(16) static uint8_t w[256 * 8 * 18], a[128 * 8 * 36];
  qg::GemmArgs g;
  g.a = {w, qg::Format::q4_0, 256, 256, 8 * 18, {}, {}};
  g.b = {a, qg::Format::q8_1, 128, 256, 8 * 36, {}, {}};
  g.fn = "qg.gemm";
  std::string why;
  ASSERT_EQ(unsetenv("QG_CUDA_FOLDED"), 0);
  EXPECT_TRUE(k->can_run(g, &why)) << why;
  ASSERT_EQ(setenv("QG_CUDA_FOLDED", "0", 1), 0);
  why.clear();
  EXPECT_FALSE(k->can_run(g, &why));
  EXPECT_NE(why.find("QG_CUDA_FOLDED=0"), std::string::npos) << why;
  ASSERT_EQ(setenv("QG_CUDA_FOLDED", "1", 1), 0);  // anything else leaves it on
  EXPECT_TRUE(k->can_run(g, &why)) << why;
  ASSERT_EQ(unsetenv("QG_CUDA_FOLDED"), 0);
}

TEST(CudaRegistry, ListsTheKernelsInDispatchOrder) {
  const qg::detail::Registry& r = qg::detail::cuda::registry();
  EXPECT_EQ(&qg::detail::registry_for(qg::Device::cuda(0)), &r);
  EXPECT_EQ(qgtest::gemm_kernel_names(r, qg::Format::q4_0, qg::Format::q8_1),
            (std::vector<std::string>{"cuda_gemv_mma", "cuda_wgmma_folded", "cuda_wgmma_f16", "cuda_gemv_bulk",
                                      "cuda_wgmma", "cuda_gemv_ring", "cuda_mmvq", "cuda_mma", "cuda_dp4a_tiled",
                                      "cuda_generic", "dispatch"}));
  // The Q4_0 kernels come first (the integer family's follow: test_cuda_int*.cpp).
  ASSERT_GE(r.gemm.size(), 10u);
  for (int i = 0; i < 10; ++i) {
    const qg::detail::GemmKernel& k = r.gemm[i];
    SCOPED_TRACE(k.name);
    EXPECT_EQ(k.epilogue_caps, static_cast<uint32_t>(qg::detail::kEpiFloatAll));
    EXPECT_EQ(k.arch.cpu_features, 0u);
    EXPECT_EQ(k.arch.arch_specific, i == 1 || i == 2 || i == 4);  // wgmma: the sm_90a image only
  }
  EXPECT_EQ(r.gemm[0].arch.min_cc, 90);  // griddepcontrol; measured on Hopper only
  EXPECT_EQ(r.gemm[0].arch.max_cc, 90);
  EXPECT_EQ(r.gemm[1].arch.min_cc, 90);  // wgmma, tensor copies
  EXPECT_EQ(r.gemm[2].arch.min_cc, 90);
  EXPECT_EQ(r.gemm[3].arch.min_cc, 90);  // bulk copies (any sm_90 image)
  EXPECT_EQ(r.gemm[3].arch.max_cc, 0);
  EXPECT_EQ(r.gemm[4].arch.min_cc, 90);
  EXPECT_EQ(r.gemm[5].arch.min_cc, 90);  // griddepcontrol; measured on Hopper only
  EXPECT_EQ(r.gemm[5].arch.max_cc, 90);
  EXPECT_EQ(r.gemm[6].arch.min_cc, 61);  // DP4A
  EXPECT_EQ(r.gemm[7].arch.min_cc, 80);  // int8 mma.sync m16n8k32, cp.async
  EXPECT_EQ(r.gemm[8].arch.min_cc, 61);
  EXPECT_EQ(r.gemm[9].arch.min_cc, 0);   // byte loads, plain arithmetic: any GPU
  // quantize / dequantize: the ggml blocks' kernel first, then the integer family's.
  ASSERT_GE(r.quantize.size(), 1u);
  ASSERT_GE(r.dequantize.size(), 1u);
  EXPECT_EQ(r.quantize[0].formats, qg::detail::kGgmlFormats);
  EXPECT_EQ(r.dequantize[0].formats, qg::detail::kGgmlFormats);
}

// The shared suite on one CUDA kernel (forced by name), or on qg::gemm.
class GemmCudaKernel : public qgtest::CudaFixture<::testing::TestWithParam<std::string>> {
 protected:
  void SetUp() override {
    CudaFixture::SetUp();
    if (IsSkipped() || HasFatalFailure() || GetParam() == "dispatch") return;
    std::string why;
    const qg::detail::GemmKernel* k = qgtest::find_gemm_kernel(qg::detail::cuda::registry(), GetParam());
    ASSERT_NE(k, nullptr) << "the CUDA registry has no kernel named " << GetParam();
    if (!qgtest::gemm_kernel_runs_on(*k, qg::Device::cuda(0), &why))
      GTEST_SKIP() << GetParam() << " cannot run on cuda:0: " << why;
  }
  qgtest::GemmKernelTester& tester() { return tester_; }

  qgtest::CudaMemory mem_;
  qgtest::GemmKernelTester tester_{qg::detail::cuda::registry(), GetParam(), mem_};
};

QG_GEMM_KERNEL_TESTS(GemmCudaKernel)

// Which kernel takes which case: the GEMV kernel N <= 8 only, the bulk GEMV
// K % 256 == 0 only (these have K = 64), the warpgroup
// kernel 128 x 128 tiles and more only (test_cuda_q4_0_wgmma.cpp), the fast
// paths aligned operands only, the generic kernel anything.
TEST_P(GemmCudaKernel, AdmitsWhatItsCanRunSays) {
  if (tester().is_dispatch()) GTEST_SKIP() << "dispatch takes every case";
  QG_SEEDED_RNG(rng, 1800);
  const std::string name = GetParam();
  qgtest::GemmCase small = qgtest::random_case(rng, 9, 8, 64);
  qgtest::GemmCase wide = qgtest::random_case(rng, 9, 9, 64);
  qgtest::GemmCase odd = qgtest::random_case(rng, 9, 4, 64, /*a_pad=*/1, /*b_pad=*/2);
  const bool warpgroup = name.rfind("cuda_wgmma", 0) == 0;  // M >= 128 only
  const bool bulk = name == "cuda_gemv_bulk" || name == "cuda_gemv_ring" || name == "cuda_gemv_mma";  // K % 256 == 0 only
  EXPECT_EQ(tester().run_and_check(small), !warpgroup && !bulk);
  EXPECT_EQ(tester().run_and_check(wide), name != "cuda_mmvq" && !warpgroup && !bulk);
  EXPECT_EQ(tester().run_and_check(odd), name == "cuda_generic") << tester().refusals();
}

// The decode shapes on 16-byte-aligned W rows (the GEMV's vector path): one
// row and row groups with tails, N = 1..9, 15, 17 (the GEMV refuses N > 8),
// whole 8-block chunks and blocks past the last one (padded rows), and
// M = 4500 (563 eight-row CTAs of the GEMV: a grid of row groups with a
// tail). Every kernel runs them.
TEST_P(GemmCudaKernel, GemvShapesOnAlignedRows) {
  struct S {
    int64_t m, k, a_pad;
    std::vector<int64_t> ns;
  };
  const std::vector<int64_t> all_n = {1, 2, 3, 4, 5, 6, 7, 8, 9, 15, 17};
  const std::vector<S> shapes = {
      {1, 256, 0, all_n},      {15, 256, 0, all_n},  {17, 32 * 8 * 17, 0, all_n}, {33, 32 * 8 * 9, 0, all_n},
      {70, 288, 14, all_n},    {16, 32 * 138, 12, {1, 4, 8}},                      {4500, 256, 0, {1, 3}},
  };
  uint64_t salt = 0;
  for (const S& s : shapes)
    for (int64_t n : s.ns) {
      QG_SEEDED_RNG(rng, 1900 + ++salt);
      qgtest::GemmCase c = qgtest::random_case(rng, s.m, n, s.k, s.a_pad);
      tester().run_and_check(c);
    }
  QG_SKIP_IF_NOTHING_RAN(tester());
}

INSTANTIATE_TEST_SUITE_P(Kernels, GemmCudaKernel,
                         ::testing::ValuesIn(qgtest::gemm_kernel_names(qg::detail::cuda::registry(),
                                                                       qg::Format::q4_0, qg::Format::q8_1)),
                         qgtest::param_name);

}  // namespace
