// SPDX-License-Identifier: MIT
// test_util.h: shared helpers for qg's C++ tests: seeded RNGs (the seed is
// printed), NMSE, NaN poisoning and sentinels, an fp16 conversion written
// independently of the core's (double arithmetic, not bit manipulation), and
// the GEMM harness: a GEMM test written once (qgtest::gemm_suite) runs on
// every kernel a backend registers for a format pair, CPU and CUDA alike.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <limits>
#include <random>
#include <string>
#include <vector>

// The GEMM harness reads the backends' registries and runs their kernels
// directly: the tests see the core's private headers (cpp/src).
#include "backend.h"
#include "dispatch.h"
#include "qg/qg.h"
#include "validate.h"

#define QG_OK(expr)                                                                                           \
  do {                                                                                                        \
    const qg::Status st_ = (expr);                                                                            \
    ASSERT_TRUE(st_.ok()) << #expr << ": " << qg::status_code_name(st_.code()) << ": " << st_.message();      \
  } while (0)

namespace qgtest {

// ------------------------------------------------------------------ bits
inline uint32_t f2u(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float u2f(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// ------------------------------------------------------------------ seeds
// Base seed: QG_TEST_SEED from the environment, else a fixed default, so a
// failure is reproducible by rerunning with the printed value.
inline uint64_t base_seed() {
  if (const char* s = std::getenv("QG_TEST_SEED")) return std::strtoull(s, nullptr, 0);
  return 20240611u;
}

// A per-test seed: the base mixed with the test's name and a salt (so tests
// do not share streams), printed to stdout.
inline uint64_t seed_for(uint64_t salt) {
  std::string name = "?";
  if (const auto* info = ::testing::UnitTest::GetInstance()->current_test_info())
    name = std::string(info->test_suite_name()) + "." + info->name();
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (char c : name) h = (h ^ static_cast<uint8_t>(c)) * 1099511628211ull;
  const uint64_t seed = base_seed() ^ h ^ (salt * 0x9E3779B97F4A7C15ull);
  std::cout << "[   seed   ] " << name << " salt=" << salt << " seed=" << seed
            << " (base QG_TEST_SEED=" << base_seed() << ")" << std::endl;
  return seed;
}

// Declares `std::mt19937_64 name` seeded by seed_for(salt) and a SCOPED_TRACE
// carrying the seed, so every assertion failure in the scope names it.
#define QG_SEEDED_RNG(name, salt)                                              \
  const uint64_t name##_seed = ::qgtest::seed_for(salt);                       \
  SCOPED_TRACE("seed=" + std::to_string(name##_seed) + " salt=" + std::to_string(salt)); \
  std::mt19937_64 name(name##_seed)

inline float uniform(std::mt19937_64& rng, float lo, float hi) {
  return std::uniform_real_distribution<float>(lo, hi)(rng);
}

// ------------------------------------------------------------------ fp16 reference
// binary16 -> value, via ldexp in double (exact).
inline float ref_fp16_to_fp32(uint16_t h) {
  const bool neg = h & 0x8000;
  const int e = (h >> 10) & 0x1F;
  const int m = h & 0x3FF;
  double v;
  if (e == 0x1F) {
    if (m != 0) return u2f((neg ? 0x80000000u : 0u) | 0x7FC00000u | (static_cast<uint32_t>(m) << 13));
    v = std::numeric_limits<double>::infinity();
  } else if (e == 0) {
    v = std::ldexp(static_cast<double>(m), -24);
  } else {
    v = std::ldexp(1024.0 + m, e - 25);
  }
  return static_cast<float>(neg ? -v : v);
}

// value -> binary16 with IEEE round-to-nearest-even, computed as "round |x|
// to a multiple of the fp16 quantum at its binade" in double; NaN -> the
// canonical quiet NaN 0x7E00 with x's sign.
inline uint16_t ref_fp32_to_fp16(float f) {
  const uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  if (std::isnan(f)) return sign | 0x7E00;
  const double v = std::fabs(static_cast<double>(f));
  if (std::isinf(v) || v >= 65520.0) return sign | 0x7C00;
  if (v == 0.0) return sign;
  int e;
  std::frexp(v, &e);                         // v in [2^(e-1), 2^e)
  const int q = e - 1 - 10 < -24 ? -24 : e - 1 - 10;  // quantum 2^q: 11 significant bits, or 2^-24
  const double r = std::nearbyint(std::ldexp(v, -q));  // exact scaling; RNE (default mode)
  const double rv = std::ldexp(r, q);
  if (rv >= 65520.0) return sign | 0x7C00;
  if (rv < std::ldexp(1.0, -14)) return static_cast<uint16_t>(sign | static_cast<uint16_t>(r));  // subnormal (r <= 1024)
  int e2;
  const double frac = std::frexp(rv, &e2);   // rv = frac * 2^e2, frac in [0.5, 1)
  const int biased = e2 - 1 + 15;
  const int mant = static_cast<int>(std::ldexp(frac, 11)) - 1024;
  return static_cast<uint16_t>(sign | (biased << 10) | mant);
}

inline float ref_bf16_to_fp32(uint16_t b) { return u2f(static_cast<uint32_t>(b) << 16); }

// A random finite fp16 with exponent in [emin, emax] (unbiased), random sign
// and mantissa; emin = -15 gives subnormals (and zero) too.
inline uint16_t random_fp16(std::mt19937_64& rng, int emin, int emax) {
  const int e = std::uniform_int_distribution<int>(emin, emax)(rng);
  const uint16_t biased = static_cast<uint16_t>(e + 15 < 0 ? 0 : e + 15);
  const uint16_t mant = static_cast<uint16_t>(rng() & 0x3FF);
  const uint16_t sign = (rng() & 1) ? 0x8000 : 0;
  return static_cast<uint16_t>(sign | (biased << 10) | mant);
}

// ------------------------------------------------------------------ metrics
// NMSE = sum (out - ref)^2 / sum ref^2, in float64. Infinite if any output is
// non-finite where the reference is finite.
inline double nmse(const std::vector<double>& out, const std::vector<double>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    if (!std::isfinite(out[i])) return std::numeric_limits<double>::infinity();
    num += (out[i] - ref[i]) * (out[i] - ref[i]);
    den += ref[i] * ref[i];
  }
  return den == 0 ? (num == 0 ? 0 : std::numeric_limits<double>::infinity()) : num / den;
}

// ------------------------------------------------------------------ poisoning
// A quiet NaN with a recognisable payload: outputs are filled with it before a
// call (an unwritten element stays NaN and fails), and gaps between strided
// rows must still hold exactly these bits afterwards.
constexpr uint32_t kPoisonBits = 0x7FC5A5A5u;
inline float poison() { return u2f(kPoisonBits); }
inline void fill_poison(float* p, size_t n) {
  for (size_t i = 0; i < n; ++i) std::memcpy(p + i, &kPoisonBits, 4);
}
inline bool is_poison(float f) { return f2u(f) == kPoisonBits; }

constexpr uint8_t kSentinelByte = 0xA5;

}  // namespace qgtest


// ====================================================================== GEMM harness
// A GEMM case is described on the host: packed operand bytes (rows padded with
// sentinels), the whole C buffer (a front guard, the strided elements, the gaps
// between them and a tail, poisoned with a NaN of the output dtype), and the
// epilogue's arrays. A Memory puts it where a kernel can read it (host memory
// for the CPU; the CUDA tests supply one backed by cudaMalloc). A
// GemmKernelTester runs cases on one registered kernel, forced by name (or on
// the public qg::gemm, "dispatch"), after the same admission the dispatcher
// applies: arch window, epilogue capabilities, can_run. The checks compare
// with a float64 evaluation of ops.h's formula from the same bytes.
namespace qgtest {

// ------------------------------------------------------------------ dtypes
constexpr uint16_t kPoisonF16 = 0x7E5A;   // quiet NaNs with payloads no kernel produces
constexpr uint16_t kPoisonBf16 = 0x7FA5;

inline void poison_element(uint8_t* p, qg::DType d) {
  if (d == qg::DType::f32) {
    std::memcpy(p, &kPoisonBits, 4);
  } else {
    const uint16_t h = d == qg::DType::f16 ? kPoisonF16 : kPoisonBf16;
    std::memcpy(p, &h, 2);
  }
}
inline bool is_poison_element(const uint8_t* p, qg::DType d) {
  uint8_t want[4];
  poison_element(want, d);
  return std::memcmp(p, want, static_cast<size_t>(qg::dtype_size(d))) == 0;
}

// The value of a float32/float16/bfloat16 element (independent decoders).
inline double decode_float(const uint8_t* p, qg::DType d) {
  if (d == qg::DType::f32) {
    float f;
    std::memcpy(&f, p, 4);
    return f;
  }
  uint16_t h;
  std::memcpy(&h, p, 2);
  return d == qg::DType::f16 ? ref_fp16_to_fp32(h) : ref_bf16_to_fp32(h);
}
// Stores v (float16: rounded to nearest even; bfloat16: truncated) and returns
// the value stored, so callers hold values exactly representable in d.
inline float encode_float(uint8_t* p, qg::DType d, float v) {
  if (d == qg::DType::f32) {
    std::memcpy(p, &v, 4);
    return v;
  }
  const uint16_t h = d == qg::DType::f16 ? ref_fp32_to_fp16(v) : static_cast<uint16_t>(f2u(v) >> 16);
  std::memcpy(p, &h, 2);
  return static_cast<float>(d == qg::DType::f16 ? ref_fp16_to_fp32(h) : ref_bf16_to_fp32(h));
}

inline uint16_t load_u16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}
inline void store_u16(uint8_t* p, uint16_t v) { std::memcpy(p, &v, 2); }

// ------------------------------------------------------------------ memory
class Memory {
 public:
  virtual ~Memory() = default;
  virtual qg::Device device() const = 0;
  virtual void* alloc(size_t bytes) = 0;  // 256-byte aligned; null on failure
  virtual void release(void* p) = 0;
  virtual void upload(void* dst, const void* src, size_t bytes) = 0;
  virtual void download(void* dst, const void* src, size_t bytes) = 0;
  virtual void synchronize(qg::Stream stream) = 0;
};

class HostMemory : public Memory {
 public:
  qg::Device device() const override { return qg::Device::cpu(); }
  void* alloc(size_t bytes) override { return std::aligned_alloc(256, (bytes + 256) / 256 * 256); }
  void release(void* p) override { std::free(p); }
  void upload(void* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }
  void download(void* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }
  void synchronize(qg::Stream) override {}
};

// Host bytes copied into `mem` at `offset` bytes past a 256-byte boundary
// (offset 1 makes every typed access misaligned). Empty -> null pointer.
class MemBytes {
 public:
  MemBytes(Memory& mem, const std::vector<uint8_t>& host, size_t offset) : mem_(mem), size_(host.size()) {
    if (host.empty()) return;
    base_ = static_cast<uint8_t*>(mem.alloc(host.size() + offset));
    if (!base_) {
      ADD_FAILURE() << "could not allocate " << host.size() + offset << " bytes on " << qg::device_name(mem.device());
      return;
    }
    ptr_ = base_ + offset;
    mem.upload(ptr_, host.data(), host.size());
  }
  ~MemBytes() {
    if (base_) mem_.release(base_);
  }
  MemBytes(const MemBytes&) = delete;
  MemBytes& operator=(const MemBytes&) = delete;
  uint8_t* ptr() const { return ptr_; }
  std::vector<uint8_t> read() const {
    std::vector<uint8_t> out(size_);
    if (ptr_) mem_.download(out.data(), ptr_, size_);
    return out;
  }

 private:
  Memory& mem_;
  size_t size_;
  uint8_t* base_ = nullptr;
  uint8_t* ptr_ = nullptr;
};

template <class T>
std::vector<uint8_t> as_bytes(const std::vector<T>& v) {
  std::vector<uint8_t> out(v.size() * sizeof(T));
  if (!v.empty()) std::memcpy(out.data(), v.data(), out.size());
  return out;
}

// ------------------------------------------------------------------ a case
constexpr int64_t kCFront = 16;      // guard bytes before C[0, 0]
constexpr int64_t kCTailElems = 17;  // guard elements after the last one

struct GemmCase {
  int64_t m = 0, n = 0, k = 0;
  int64_t a_stride = 0, b_stride = 0;  // bytes between rows of a (Q4_0, M rows) and b (Q8_1, N rows)
  std::vector<uint8_t> a, b;
  qg::DType c_dtype = qg::DType::f32;
  int64_t ldc = 0, ldc_n = 1;          // elements
  std::vector<uint8_t> c_init;         // the whole C buffer before the call
  std::vector<uint8_t> c_out;          // and after it
  float alpha = 1.0f, beta = 0.0f;
  std::vector<float> row_scale, col_scale;  // empty: none
  std::vector<uint8_t> bias;                // empty: none
  qg::DType bias_dtype = qg::DType::f32;
  qg::Activation activation = qg::Activation::none;
  // Relative error a kernel may put into each product term by rounding its
  // operands (0: the operands are exact). cuda_wgmma_folded multiplies
  // fp16(code x d_w) by fp16(code x d_a): kFoldedRounding.
  double operand_rounding = 0.0;
  size_t a_offset = 0, b_offset = 0, c_offset = 0, bias_offset = 0, scale_offset = 0;  // misalignment

  int64_t elem_offset(int64_t i, int64_t j) const {  // byte offset of C[i, j] in the C buffer
    return kCFront + (i * ldc + j * ldc_n) * qg::dtype_size(c_dtype);
  }
  double out(int64_t i, int64_t j) const { return decode_float(&c_out[elem_offset(i, j)], c_dtype); }
  double in(int64_t i, int64_t j) const { return decode_float(&c_init[elem_offset(i, j)], c_dtype); }
  uint8_t* w_block(int64_t row, int64_t blk) { return &a[row * a_stride + blk * 18]; }
  uint8_t* a_block(int64_t row, int64_t blk) { return &b[row * b_stride + blk * 36]; }

  std::string describe() const {
    std::string s = "M=" + std::to_string(m) + " N=" + std::to_string(n) + " K=" + std::to_string(k) +
                    " a_stride=" + std::to_string(a_stride) + " b_stride=" + std::to_string(b_stride) +
                    " C " + qg::dtype_name(c_dtype) + " ldc=" + std::to_string(ldc) +
                    " ldc_n=" + std::to_string(ldc_n);
    if (alpha != 1.0f) s += " alpha=" + std::to_string(alpha);
    if (beta != 0.0f) s += " beta=" + std::to_string(beta);
    if (!row_scale.empty()) s += " row_scale";
    if (!col_scale.empty()) s += " col_scale";
    if (!bias.empty()) s += std::string(" bias(") + qg::dtype_name(bias_dtype) + ")";
    if (activation == qg::Activation::relu) s += " relu";
    if (a_offset || b_offset || c_offset || bias_offset || scale_offset)
      s += " offsets a=" + std::to_string(a_offset) + " b=" + std::to_string(b_offset) +
           " c=" + std::to_string(c_offset) + " bias=" + std::to_string(bias_offset) +
           " scales=" + std::to_string(scale_offset);
    return s;
  }
};

// C of `dtype` with element (i, j) at i * ldc + j * ldc_n, every byte of the
// buffer (elements, gaps, guards) poisoned.
inline void set_c_layout(GemmCase& c, qg::DType dtype, int64_t ldc, int64_t ldc_n) {
  c.c_dtype = dtype;
  c.ldc = ldc;
  c.ldc_n = ldc_n;
  const int64_t es = qg::dtype_size(dtype);
  const int64_t extent = c.m > 0 && c.n > 0 ? (c.m - 1) * ldc + (c.n - 1) * ldc_n + 1 : 0;
  c.c_init.assign(static_cast<size_t>(kCFront + (extent + kCTailElems) * es), 0);
  for (size_t off = 0; off + es <= c.c_init.size(); off += es) poison_element(&c.c_init[off], dtype);
  c.c_out.clear();
}

// C's elements (not its gaps) hold values in [-range, range], for beta != 0.
inline void fill_c_values(GemmCase& c, std::mt19937_64& rng, float range) {
  for (int64_t i = 0; i < c.m; ++i)
    for (int64_t j = 0; j < c.n; ++j) encode_float(&c.c_init[c.elem_offset(i, j)], c.c_dtype, uniform(rng, -range, range));
}

inline void set_bias(GemmCase& c, std::mt19937_64& rng, qg::DType dtype, float range) {
  c.bias_dtype = dtype;
  c.bias.assign(static_cast<size_t>(c.m * qg::dtype_size(dtype)), 0);
  for (int64_t i = 0; i < c.m; ++i) encode_float(&c.bias[i * qg::dtype_size(dtype)], dtype, uniform(rng, -range, range));
}

// Random blocks: codes are raw random bytes (every nibble; every int8, -128
// included; Q8_1's s too, which the GEMM must not read); scales random finite
// fp16 with exponents in [emin, emax]; row padding holds the sentinel. C is
// row-major float32, poisoned.
inline GemmCase random_case(std::mt19937_64& rng, int64_t m, int64_t n, int64_t k, int64_t a_pad = 0,
                            int64_t b_pad = 0, int emin = -8, int emax = 3) {
  GemmCase c;
  c.m = m;
  c.n = n;
  c.k = k;
  const int64_t nb = k / 32;
  c.a_stride = nb * 18 + a_pad;
  c.b_stride = nb * 36 + b_pad;
  c.a.assign(static_cast<size_t>(m * c.a_stride), kSentinelByte);
  c.b.assign(static_cast<size_t>(n * c.b_stride), kSentinelByte);
  for (int64_t r = 0; r < m; ++r)
    for (int64_t blk = 0; blk < nb; ++blk) {
      uint8_t* p = c.w_block(r, blk);
      for (int i = 2; i < 18; ++i) p[i] = static_cast<uint8_t>(rng());
      store_u16(p, random_fp16(rng, emin, emax));
    }
  for (int64_t r = 0; r < n; ++r)
    for (int64_t blk = 0; blk < nb; ++blk) {
      uint8_t* p = c.a_block(r, blk);
      for (int i = 2; i < 36; ++i) p[i] = static_cast<uint8_t>(rng());
      store_u16(p, random_fp16(rng, emin, emax));
    }
  set_c_layout(c, qg::DType::f32, n, 1);
  return c;
}

// Every scale of a and b set to `d` (fp16 bits).
inline void set_all_scales(GemmCase& c, uint16_t d) {
  for (int64_t r = 0; r < c.m; ++r)
    for (int64_t blk = 0; blk < c.k / 32; ++blk) store_u16(c.w_block(r, blk), d);
  for (int64_t r = 0; r < c.n; ++r)
    for (int64_t blk = 0; blk < c.k / 32; ++blk) store_u16(c.a_block(r, blk), d);
}

// Two operands each rounded once to fp16: (1 + 2^-11)^2 - 1.
constexpr double kFoldedRounding = 0x1p-10 + 0x1p-22;

// The operand rounding of a kernel (GemmCase::operand_rounding): only the
// folded warpgroup kernel rounds its operands.
inline double operand_rounding_of(const std::string& kernel) {
  return kernel == "cuda_wgmma_folded" ? kFoldedRounding : 0.0;
}

// ------------------------------------------------------------------ reference
// value: ops.h's formula in float64 from the bytes,
//   acc = sum_b fp16(d_w) * fp16(d_a) * sum_i (w_i - 8) * a_i   (integer part exact)
//   v   = relu?(acc * alpha * row_scale[m] * col_scale[n] + beta * C[m, n] + bias[m])
// bound: what the kernel's float32 arithmetic may add: every rounding is
// relative to a partial result no larger than T = |scales| * sum_b |d| *
// sum_i |(w_i - 8) a_i| + |beta C| + |bias|, whatever the summation order
// (lanes, K split across threads); then the cast's half ulp.
struct GemmReference {
  std::vector<double> value, bound;  // [m * n], (i, j) at i * n + j
};

inline GemmReference gemm_reference(const GemmCase& c) {
  GemmReference r;
  r.value.assign(static_cast<size_t>(c.m * c.n), 0.0);
  r.bound.assign(static_cast<size_t>(c.m * c.n), 0.0);
  const int64_t nb = c.k / 32;
  const double eps = std::ldexp(1.0, -24);
  double half_ulp = 0, tiny = 1e-44;
  if (c.c_dtype == qg::DType::f16) half_ulp = std::ldexp(1.0, -11), tiny = std::ldexp(1.0, -25);
  if (c.c_dtype == qg::DType::bf16) half_ulp = std::ldexp(1.0, -8), tiny = std::ldexp(1.0, -133);
  for (int64_t i = 0; i < c.m; ++i)
    for (int64_t j = 0; j < c.n; ++j) {
      double acc = 0, mag = 0;
      for (int64_t blk = 0; blk < nb; ++blk) {
        const uint8_t* wb = &c.a[i * c.a_stride + blk * 18];
        const uint8_t* ab = &c.b[j * c.b_stride + blk * 36];
        int64_t dot = 0, dot_abs = 0;
        for (int e = 0; e < 32; ++e) {
          const int wq = e < 16 ? (wb[2 + e] & 0x0F) : (wb[2 + e - 16] >> 4);
          const int64_t p = static_cast<int64_t>(wq - 8) * static_cast<int8_t>(ab[4 + e]);
          dot += p;
          dot_abs += p < 0 ? -p : p;
        }
        const double d = static_cast<double>(ref_fp16_to_fp32(load_u16(wb))) *
                         static_cast<double>(ref_fp16_to_fp32(load_u16(ab)));
        acc += d * static_cast<double>(dot);
        mag += std::fabs(d) * static_cast<double>(dot_abs);
      }
      double s = c.alpha;
      if (!c.row_scale.empty()) s *= c.row_scale[i];
      if (!c.col_scale.empty()) s *= c.col_scale[j];
      double v = acc * s, t = std::fabs(s) * mag;
      const double operand_err = c.operand_rounding * t;
      if (c.beta != 0.0f) {
        const double old = static_cast<double>(c.beta) * c.in(i, j);
        v += old;
        t += std::fabs(old);
      }
      if (!c.bias.empty()) {
        const double bv = decode_float(&c.bias[i * qg::dtype_size(c.bias_dtype)], c.bias_dtype);
        v += bv;
        t += std::fabs(bv);
      }
      if (c.activation == qg::Activation::relu && v < 0) v = 0;
      const double f32_err = static_cast<double>(nb + 12) * 2 * eps * t;
      r.value[i * c.n + j] = v;
      r.bound[i * c.n + j] = f32_err + operand_err + half_ulp * (std::fabs(v) + f32_err + operand_err) + tiny;
    }
  return r;
}

// Every element of C written and within the bound of the reference (NaN where
// the reference is NaN, the same infinity where it is infinite); every other
// byte of the C buffer (gaps between rows or columns, guards) unchanged; for
// float32 C also NMSE <= 1e-6 over the finite elements.
inline void expect_gemm_output(const GemmCase& c) {
  SCOPED_TRACE(c.describe());
  ASSERT_EQ(c.c_out.size(), c.c_init.size()) << "the case was not run";
  const GemmReference ref = gemm_reference(c);
  const int64_t es = qg::dtype_size(c.c_dtype);
  std::vector<char> element(c.c_init.size(), 0);
  int unwritten = 0, wrong = 0, clobbered = 0;
  double num = 0, den = 0;
  for (int64_t i = 0; i < c.m; ++i)
    for (int64_t j = 0; j < c.n; ++j) {
      const int64_t off = c.elem_offset(i, j);
      std::fill(element.begin() + off, element.begin() + off + es, 1);
      const uint8_t* p = &c.c_out[off];
      if (c.beta == 0.0f && is_poison_element(p, c.c_dtype)) {
        if (++unwritten <= 3) ADD_FAILURE() << "C[" << i << ", " << j << "] was not written";
        continue;
      }
      const double got = decode_float(p, c.c_dtype), want = ref.value[i * c.n + j], bd = ref.bound[i * c.n + j];
      bool ok;
      if (std::isnan(want)) {
        ok = std::isnan(got);
      } else if (std::isinf(want)) {
        ok = got == want;
      } else {
        ok = std::isfinite(got) && std::fabs(got - want) <= bd;
        // a float16 result at the edge of its range may round to infinity
        if (!ok && c.c_dtype == qg::DType::f16 && std::fabs(want) + bd >= 65504.0)
          ok = std::isinf(got) && (got > 0) == (want > 0);
        if (std::isfinite(got)) {
          num += (got - want) * (got - want);
          den += want * want;
        }
      }
      if (!ok && ++wrong <= 5)
        ADD_FAILURE() << "C[" << i << ", " << j << "] = " << got << ", reference " << want << " (allowed error "
                      << bd << ")";
    }
  for (size_t idx = 0; idx < c.c_init.size(); ++idx)
    if (!element[idx] && c.c_out[idx] != c.c_init[idx] && ++clobbered <= 3)
      ADD_FAILURE() << "C buffer byte " << idx << " outside the output elements was written";
  EXPECT_EQ(unwritten, 0) << "unwritten elements";
  EXPECT_EQ(wrong, 0) << "elements outside the allowed error";
  EXPECT_EQ(clobbered, 0) << "bytes written outside the output elements";
  if (c.c_dtype == qg::DType::f32 && den > 0) {
    EXPECT_LE(num / den, 1e-6) << "NMSE vs float64 reference";
  }
}

// Exactly the reference (integer-valued cases), and the gaps untouched.
inline void expect_gemm_exact(const GemmCase& c) {
  expect_gemm_output(c);
  const GemmReference ref = gemm_reference(c);
  int bad = 0;
  for (int64_t i = 0; i < c.m; ++i)
    for (int64_t j = 0; j < c.n; ++j)
      if (c.out(i, j) != ref.value[i * c.n + j] && ++bad <= 3)
        ADD_FAILURE() << "C[" << i << ", " << j << "] = " << c.out(i, j) << ", exactly " << ref.value[i * c.n + j]
                      << " expected";
  EXPECT_EQ(bad, 0) << c.describe();
}

// ------------------------------------------------------------------ kernels
inline const qg::detail::GemmKernel* find_gemm_kernel(const qg::detail::Registry& r, const std::string& name) {
  for (const qg::detail::GemmKernel& k : r.gemm)
    if (name == k.name) return &k;
  return nullptr;
}

// The registry's kernels for the format pair, in registry order, then
// "dispatch" (the public qg::gemm): the parameters of a kernel test suite.
inline std::vector<std::string> gemm_kernel_names(const qg::detail::Registry& r, qg::Format a, qg::Format b) {
  std::vector<std::string> names;
  for (const qg::detail::GemmKernel& k : r.gemm)
    if (k.a_format == a && k.b_format == b) names.emplace_back(k.name);
  names.emplace_back("dispatch");
  return names;
}

// Whether the dispatcher would let `k` run `g`: its arch window admits the
// device, its epilogue covers the call, its can_run agrees.
inline bool gemm_kernel_admits(const qg::detail::GemmKernel& k, const qg::GemmArgs& g, std::string* why) {
  qg::detail::DeviceCaps caps;
  if (const qg::Status s = qg::detail::device_caps(g.fn, g.device, &caps); !s.ok()) {
    *why = s.message();
    return false;
  }
  return qg::detail::kernel_admits(k, g, caps, why);
}

// Whether `k`'s arch window admits `device` at all (empty *why when it does).
inline bool gemm_kernel_runs_on(const qg::detail::GemmKernel& k, qg::Device device, std::string* why) {
  qg::detail::DeviceCaps caps;
  if (const qg::Status s = qg::detail::device_caps("qg.gemm", device, &caps); !s.ok()) {
    *why = s.message();
    return false;
  }
  return qg::detail::arch_admits(k.arch, device, caps, why);
}

inline std::string param_name(const ::testing::TestParamInfo<std::string>& info) { return info.param; }

class GemmKernelTester {
 public:
  // weight_format: the layout the kernel gets W in. A case's a always holds
  // Q4_0 rows (what the reference reads and tests edit); for q4_0x16 the
  // tester hands the kernel qg::repack's groups of them (M a multiple of 16).
  GemmKernelTester(const qg::detail::Registry& registry, std::string name, Memory& mem, qg::Stream stream = nullptr,
                   qg::Format weight_format = qg::Format::q4_0)
      : name_(std::move(name)), mem_(mem), stream_(stream), weight_format_(weight_format) {
    if (name_ != "dispatch") kernel_ = find_gemm_kernel(registry, name_);
  }
  const std::string& name() const { return name_; }
  bool is_dispatch() const { return name_ == "dispatch"; }
  const qg::detail::GemmKernel* kernel() const { return kernel_; }
  Memory& memory() { return mem_; }
  int ran() const { return ran_; }
  int refused() const { return refused_; }
  const std::string& refusals() const { return refusals_; }

  // Runs c: C comes back in c.c_out. False (and counted, with the reason)
  // when the kernel does not take the case; a failure is reported.
  bool run(GemmCase& c) {
    if (!is_dispatch() && !kernel_) {
      ADD_FAILURE() << "no kernel named " << name_ << " in the registry";
      return false;
    }
    int64_t a_stride = c.a_stride;
    const std::vector<uint8_t> a_bytes = weight_bytes(c, weight_format_, &a_stride);
    MemBytes a(mem_, a_bytes, c.a_offset), b(mem_, c.b, c.b_offset), cbuf(mem_, c.c_init, c.c_offset);
    MemBytes rs(mem_, as_bytes(c.row_scale), c.scale_offset), cs(mem_, as_bytes(c.col_scale), c.scale_offset);
    MemBytes bias(mem_, c.bias, c.bias_offset);
    qg::GemmArgs g;
    g.a = {a.ptr(), weight_format_, c.m, c.k, a_stride, {}, {}};
    g.b = {b.ptr(), qg::Format::q8_1, c.n, c.k, c.b_stride, {}, {}};
    g.c = cbuf.ptr() + kCFront;
    g.c_dtype = c.c_dtype;
    g.ldc = c.ldc;
    g.ldc_n = c.ldc_n;
    g.epilogue.alpha = c.alpha;
    g.epilogue.beta = c.beta;
    g.epilogue.row_scale = reinterpret_cast<const float*>(rs.ptr());
    g.epilogue.col_scale = reinterpret_cast<const float*>(cs.ptr());
    g.epilogue.bias = bias.ptr();
    g.epilogue.bias_dtype = c.bias_dtype;
    g.epilogue.activation = c.activation;
    g.device = mem_.device();
    g.fn = "qg.gemm";
    // The harness only hands a kernel what the public API would accept.
    if (const qg::Status v = qg::detail::check_gemm_args(g); !v.ok()) {
      ADD_FAILURE() << "the harness built arguments qg rejects: " << v.message() << " (" << c.describe() << ")";
      return false;
    }
    qg::Status s;
    if (kernel_) {
      c.operand_rounding = operand_rounding_of(kernel_->name);
      const qg::detail::DeviceScope scope(g.device);  // as the dispatcher opens it
      std::string why;
      if (!gemm_kernel_admits(*kernel_, g, &why)) {
        if (++refused_ <= 3) refusals_ += (refusals_.empty() ? "" : "; ") + c.describe() + ": " + why;
        return false;
      }
      s = kernel_->run(g, stream_);
    } else {
      qg::Explanation e;  // the kernel dispatch picks sets the bound
      if (qg::explain(g, &e).ok()) c.operand_rounding = operand_rounding_of(e.chosen);
      s = qg::gemm(g, stream_);
    }
    mem_.synchronize(stream_);
    EXPECT_TRUE(s.ok()) << name_ << ": " << qg::status_code_name(s.code()) << ": " << s.message() << " ("
                        << c.describe() << ")";
    c.c_out = cbuf.read();
    EXPECT_EQ(a.read(), a_bytes) << name_ << " wrote to its input a";
    EXPECT_EQ(b.read(), c.b) << name_ << " wrote to its input b";
    ++ran_;
    return s.ok();
  }

  // W as the kernel gets it: c.a, or its q4_0x16 groups, made by
  // qg::repack on the host; a group's stride carries the case's row padding
  // (a_stride past its blocks). stride: bytes between stored rows.
  static std::vector<uint8_t> weight_bytes(const GemmCase& c, qg::Format format, int64_t* stride) {
    if (format != qg::Format::q4_0x16) return c.a;
    const int64_t group = c.k / 32 * 288 + (c.m > 1 ? c.a_stride - c.k / 32 * 18 : 0);
    std::vector<uint8_t> x16(static_cast<size_t>(c.m / 16 * group), 0xA5);
    qg::RepackArgs r;
    r.x = c.a.data();
    r.rows = c.m;
    r.k = c.k;
    r.x_row_stride = c.a_stride;
    r.y = x16.data();
    r.y_row_stride = group;
    const qg::Status s = qg::repack(r);
    EXPECT_TRUE(s.ok()) << "qg::repack: " << s.message() << " (" << c.describe() << ")";
    *stride = group;
    return x16;
  }

  // Runs c and checks it against the reference; false when refused.
  bool run_and_check(GemmCase& c) {
    if (!run(c)) return false;
    expect_gemm_output(c);
    return true;
  }

 private:
  std::string name_;
  const qg::detail::GemmKernel* kernel_ = nullptr;
  Memory& mem_;
  qg::Stream stream_;
  qg::Format weight_format_;
  int ran_ = 0, refused_ = 0;
  std::string refusals_;
};

// Ends a suite test as skipped when the kernel took none of its cases.
#define QG_SKIP_IF_NOTHING_RAN(tester)                                                                  \
  do {                                                                                                 \
    if ((tester).ran() == 0)                                                                           \
      GTEST_SKIP() << (tester).name() << " took none of this test's cases: " << (tester).refusals();   \
  } while (0)

// Quantizes rows x k floats with qg on the CPU (bytes are the same on every
// backend) into rows of `stride` bytes.
inline std::vector<uint8_t> quantize_on_cpu(qg::Format f, const std::vector<float>& x, int64_t rows, int64_t k,
                                            int64_t stride,
                                            qg::Q8_1Convention conv = qg::Q8_1Convention::reference) {
  std::vector<uint8_t> y(static_cast<size_t>(rows * stride), kSentinelByte);
  qg::QuantizeArgs q;
  q.format = f;
  q.x = x.data();
  q.rows = rows;
  q.k = k;
  q.x_row_stride = k;
  q.y = y.data();
  q.y_row_stride = stride;
  q.device = qg::Device::cpu();
  q.q8_1_convention = conv;
  const qg::Status s = qg::quantize(q);
  EXPECT_TRUE(s.ok()) << s.message();
  return y;
}

// The raw arguments of a dequantization on the CPU: rows x k values from
// rows of xq xq_stride bytes apart into rows of y y_stride floats apart (the
// caller sets the device, scales and zero points where it needs others).
inline qg::DequantizeArgs dequantize_args(qg::Format f, const void* xq, int64_t rows, int64_t k, int64_t xq_stride,
                                          float* y, int64_t y_stride) {
  qg::DequantizeArgs a;
  a.format = f;
  a.xq = xq;
  a.rows = rows;
  a.k = k;
  a.xq_row_stride = xq_stride;
  a.y = y;
  a.y_row_stride = y_stride;
  a.device = qg::Device::cpu();
  return a;
}

// ====================================================================== the suite
// Each function is one test, run by a backend's test file on each of its
// kernels through QG_GEMM_KERNEL_TESTS (below).
namespace gemm_suite {

struct Shape {
  int64_t m, n, k;
};
// Tails of every tile (CPU 16 x 64, CUDA 64 x 64 and N <= 8), M = 1, N = 1,
// K = 32; and N = 1..4, 7..8, 12 and 16 with K a multiple of 256 (the ring,
// bulk and tensor-core ring GEMVs' shapes).
inline const std::vector<Shape>& shapes() {
  static const std::vector<Shape> s = {
      {1, 1, 32},    {1, 7, 64}, {3, 5, 96},   {17, 9, 320}, {33, 65, 1024}, {64, 1, 4096},
      {5, 130, 256}, {1, 8, 32}, {1, 9, 32},   {16, 64, 64}, {17, 65, 96},   {2, 3, 32 * 7},
      {70, 4, 160},  {65, 66, 96}, {33, 7, 512}, {3, 8, 256},   {5, 1, 512},    {37, 1, 2304},
      {19, 1, 256},  {33, 2, 512}, {5, 3, 2304}, {19, 4, 256},   {37, 12, 2304}, {5, 16, 256},
  };
  return s;
}

inline void random_codes(GemmKernelTester& t) {
  uint64_t salt = 0;
  for (const Shape& s : shapes()) {
    QG_SEEDED_RNG(rng, ++salt);
    GemmCase c = random_case(rng, s.m, s.n, s.k);
    t.run_and_check(c);
  }
  QG_SKIP_IF_NOTHING_RAN(t);
}

// Padded rows of a and b (padding = sentinels, which would corrupt a result
// if read) and of C; once with strides the fast paths can load in words, once odd.
inline void strided_operands(GemmKernelTester& t) {
  uint64_t salt = 100;
  for (const Shape& s : shapes()) {
    for (bool odd : {false, true}) {
      QG_SEEDED_RNG(rng, ++salt);
      GemmCase c = random_case(rng, s.m, s.n, s.k, odd ? 5 : 6, odd ? 3 : 8);
      set_c_layout(c, qg::DType::f32, s.n + 3, 1);
      t.run_and_check(c);
    }
  }
  QG_SKIP_IF_NOTHING_RAN(t);
}

// A wide scale range, subnormal fp16 scales included.
inline void subnormal_and_large_scales(GemmKernelTester& t) {
  QG_SEEDED_RNG(rng, 200);
  for (const Shape& s : {Shape{9, 11, 32 * 9}, Shape{9, 3, 32 * 9}, Shape{9, 7, 512}, Shape{9, 1, 512}}) {
    GemmCase c = random_case(rng, s.m, s.n, s.k, 0, 0, /*emin=*/-15, /*emax=*/7);
    t.run_and_check(c);
  }
  QG_SKIP_IF_NOTHING_RAN(t);
}

// Unit scales: every partial sum is an integer below 2^24, so a correct kernel
// is exact, whatever the bytes (a = -128 included).
inline void integer_part_exact(GemmKernelTester& t) {
  QG_SEEDED_RNG(rng, 300);
  for (const Shape& s :
       {Shape{7, 13, 4096}, Shape{1, 5, 32}, Shape{19, 3, 32 * 33}, Shape{70, 70, 256}, Shape{7, 8, 512}, Shape{7, 1, 2304}}) {
    GemmCase c = random_case(rng, s.m, s.n, s.k);
    set_all_scales(c, 0x3C00);
    if (t.run(c)) expect_gemm_exact(c);
  }
  QG_SKIP_IF_NOTHING_RAN(t);
}

// The extremes of the integer part, where sign-flip tricks wrap: w nibble 0
// (w - 8 = -8) or 15 against a = -128 or 127 in every position; s = NaN.
inline void extreme_codes(GemmKernelTester& t) {
  struct Ext {
    uint8_t nibble;
    int8_t a;
  };
  for (const Ext& e : {Ext{0, -128}, Ext{15, -128}, Ext{0, 127}, Ext{15, 127}, Ext{8, -128}}) {
    for (int64_t n : {int64_t{1}, int64_t{6}, int64_t{70}}) {
      SCOPED_TRACE("nibble " + std::to_string(e.nibble) + " a " + std::to_string(e.a));
      std::mt19937_64 unused(0);
      GemmCase c = random_case(unused, 3, n, 32 * 128);
      set_all_scales(c, 0x3C00);
      for (int64_t r = 0; r < c.m; ++r)
        for (int64_t blk = 0; blk < c.k / 32; ++blk)
          std::memset(c.w_block(r, blk) + 2, e.nibble | (e.nibble << 4), 16);
      for (int64_t r = 0; r < c.n; ++r)
        for (int64_t blk = 0; blk < c.k / 32; ++blk) {
          store_u16(c.a_block(r, blk) + 2, 0x7E00);  // s = NaN: must not be read
          std::memset(c.a_block(r, blk) + 4, static_cast<uint8_t>(e.a), 32);
        }
      if (!t.run(c)) continue;
      expect_gemm_exact(c);
      EXPECT_EQ(c.out(0, 0), (e.nibble - 8.0) * e.a * c.k);
    }
  }
  QG_SKIP_IF_NOTHING_RAN(t);
}

// K = 0 with M, N > 0: an empty sum, all zeros (null operand pointers).
inline void k_zero(GemmKernelTester& t) {
  GemmCase c;
  c.m = 5;
  c.n = 7;
  set_c_layout(c, qg::DType::f32, 9, 1);
  if (t.run(c)) {
    for (int64_t i = 0; i < c.m; ++i)
      for (int64_t j = 0; j < c.n; ++j) EXPECT_EQ(c.out(i, j), 0.0) << "C[" << i << "," << j << "]";
    expect_gemm_output(c);
  }
  QG_SKIP_IF_NOTHING_RAN(t);
}

// M = 0 or N = 0: nothing to do, nothing written.
inline void empty_m_or_n(GemmKernelTester& t) {
  QG_SEEDED_RNG(rng, 400);
  for (const Shape& s : {Shape{0, 5, 64}, Shape{4, 0, 64}, Shape{0, 0, 64}, Shape{0, 3, 0}}) {
    GemmCase c = random_case(rng, s.m, s.n, s.k);
    if (t.run(c)) {
      EXPECT_EQ(c.c_out, c.c_init) << "M=" << s.m << " N=" << s.n << ": C was written";
    }
  }
  QG_SKIP_IF_NOTHING_RAN(t);
}

// A NaN scale (qg's marker of a non-finite block) poisons exactly its row of
// a (or row of b, a column of C) and nothing else.
inline void nan_block_poisons_its_row_and_column_only(GemmKernelTester& t) {
  QG_SEEDED_RNG(rng, 500);
  for (const Shape& s : {Shape{6, 8, 32 * 5}, Shape{6, 10, 32 * 5}, Shape{70, 80, 64}, Shape{6, 8, 256}, Shape{6, 1, 256},
                         Shape{6, 10, 256}}) {
    GemmCase c = random_case(rng, s.m, s.n, s.k);
    store_u16(c.w_block(2, 1), 0x7E00);
    const bool nan_column = c.n > 7;  // with fewer columns, W's NaN block alone
    if (nan_column) store_u16(c.a_block(7, 0), 0x7E00);
    if (!t.run(c)) continue;
    expect_gemm_output(c);  // NaN exactly where the reference is NaN
    for (int64_t i = 0; i < c.m; ++i)
      for (int64_t j = 0; j < c.n; ++j)
        ASSERT_EQ(std::isnan(c.out(i, j)), i == 2 || (nan_column && j == 7))
            << "C[" << i << "," << j << "] = " << c.out(i, j);
  }
  QG_SKIP_IF_NOTHING_RAN(t);
}

// A Q4_0 block whose fp16 scale overflowed to +-Inf: every kernel gives the
// documented sum_b d_w * d_a * (exact integer sum), so +-Inf when that sum is
// nonzero (a lane-wise Inf * 0 must not turn it into NaN), NaN when it is 0.
inline void inf_scale_block(GemmKernelTester& t) {
  // x = zeros(32); x[0] = 6e5; x[1] = 1: d = 6e5 / -8 = -75000 -> fp16 -Inf; codes
  // 0 (x[0]) and 8 (all others), so the integer sum against a = ones is -8 * 127.
  for (float big : {6e5f, -6e5f}) {
    SCOPED_TRACE("x[0] = " + std::to_string(big));
    std::vector<float> x(32, 0.0f), ones(32, 1.0f);
    x[0] = big;
    x[1] = 1.0f;
    GemmCase c;
    c.m = c.n = 1;
    c.k = 32;
    c.a_stride = 18;
    c.b_stride = 36;
    c.a = quantize_on_cpu(qg::Format::q4_0, x, 1, 32, 18);
    c.b = quantize_on_cpu(qg::Format::q8_1, ones, 1, 32, 36);
    ASSERT_EQ(load_u16(c.a.data()), big > 0 ? 0xFC00 : 0x7C00) << "the Q4_0 scale should overflow to -+Inf";
    ASSERT_EQ(c.a[2] & 0x0F, 0);
    set_c_layout(c, qg::DType::f32, 1, 1);
    if (!t.run(c)) continue;
    const double want = big > 0 ? INFINITY : -INFINITY;
    EXPECT_EQ(c.out(0, 0), want) << "C = sum_b d_w * d_a * (exact integer sum) = " << (big > 0 ? "-Inf" : "+Inf")
                                 << " * -1016";
    expect_gemm_output(c);
  }
  // The same from the other operand: a Q8_1 block whose scale overflows
  // (1e7 / 127 -> fp16 +Inf; codes 127 and 0) against W = ones (d = -1/8,
  // every code 0): -1/8 * Inf * (-8 * 127) = +Inf.
  {
    std::vector<float> xa(32, 0.0f), ones(32, 1.0f);
    xa[0] = 1e7f;
    xa[1] = 1.0f;
    GemmCase c;
    c.m = c.n = 1;
    c.k = 32;
    c.a_stride = 18;
    c.b_stride = 36;
    c.a = quantize_on_cpu(qg::Format::q4_0, ones, 1, 32, 18);
    c.b = quantize_on_cpu(qg::Format::q8_1, xa, 1, 32, 36);
    EXPECT_EQ(load_u16(c.b.data()), 0x7C00) << "the Q8_1 scale should overflow to +Inf";
    set_c_layout(c, qg::DType::f32, 1, 1);
    if (t.run(c)) {
      EXPECT_EQ(c.out(0, 0), INFINITY);
      expect_gemm_output(c);
    }
  }
  // The block inside larger problems: several blocks per row, other rows and
  // columns finite; every output dtype and an epilogue.
  QG_SEEDED_RNG(rng, 510);
  std::vector<float> x(32, 0.0f);
  x[0] = 6e5f;
  x[1] = 1.0f;
  const std::vector<uint8_t> inf_block = quantize_on_cpu(qg::Format::q4_0, x, 1, 32, 18);
  for (const Shape& s : {Shape{3, 5, 96}, Shape{20, 70, 160}, Shape{3, 1, 256}}) {
    for (qg::DType dt : {qg::DType::f32, qg::DType::f16, qg::DType::bf16}) {
      GemmCase c = random_case(rng, s.m, s.n, s.k, 0, 0, -10, -4);
      std::memcpy(c.w_block(1, 1), inf_block.data(), 18);
      set_c_layout(c, dt, s.n, 1);
      if (dt != qg::DType::f32) {
        c.alpha = 0.5f;
        set_bias(c, rng, qg::DType::f32, 4.0f);
      }
      if (!t.run(c)) continue;
      expect_gemm_output(c);  // +-Inf (or NaN where the block's integer sum is 0) in row 1 only
      for (int64_t j = 0; j < c.n; ++j) {
        EXPECT_FALSE(std::isfinite(c.out(1, j))) << "C[1," << j << "]";
        EXPECT_TRUE(std::isfinite(c.out(0, j))) << "C[0," << j << "]";
      }
    }
  }
  QG_SKIP_IF_NOTHING_RAN(t);
}

// Tier B (reliability.md §9): uniform[-1,1] W and A quantized by qg.
inline void tier_b_against_unquantized_inputs(GemmKernelTester& t) {
  QG_SEEDED_RNG(rng, 600);
  for (const Shape& s : {Shape{64, 33, 4096}, Shape{64, 5, 4096}, Shape{64, 1, 4096}}) {
    std::vector<float> w(s.m * s.k), a(s.n * s.k);
    for (auto& v : w) v = uniform(rng, -1.0f, 1.0f);
    for (auto& v : a) v = uniform(rng, -1.0f, 1.0f);
    for (qg::Q8_1Convention conv : {qg::Q8_1Convention::reference, qg::Q8_1Convention::ggml_cuda}) {
      SCOPED_TRACE(conv == qg::Q8_1Convention::reference ? "q8_1 reference" : "q8_1 ggml_cuda");
      GemmCase c;
      c.m = s.m;
      c.n = s.n;
      c.k = s.k;
      c.a_stride = s.k / 32 * 18;
      c.b_stride = s.k / 32 * 36;
      c.a = quantize_on_cpu(qg::Format::q4_0, w, s.m, s.k, c.a_stride);
      c.b = quantize_on_cpu(qg::Format::q8_1, a, s.n, s.k, c.b_stride, conv);
      set_c_layout(c, qg::DType::f32, s.n, 1);
      std::vector<float> wd(s.m * s.k);
      ASSERT_TRUE(qg::dequantize(dequantize_args(qg::Format::q4_0, c.a.data(), s.m, s.k, c.a_stride, wd.data(), s.k)).ok());
      if (!t.run(c)) continue;
      expect_gemm_output(c);
      std::vector<double> out(s.m * s.n), ref_deq(s.m * s.n), ref_orig(s.m * s.n);
      for (int64_t i = 0; i < s.m; ++i)
        for (int64_t j = 0; j < s.n; ++j) {
          double s1 = 0, s2 = 0;
          for (int64_t e = 0; e < s.k; ++e) {
            s1 += static_cast<double>(wd[i * s.k + e]) * a[j * s.k + e];
            s2 += static_cast<double>(w[i * s.k + e]) * a[j * s.k + e];
          }
          ref_deq[i * s.n + j] = s1;
          ref_orig[i * s.n + j] = s2;
          out[i * s.n + j] = c.out(i, j);
        }
      const double e_deq = nmse(out, ref_deq), e_orig = nmse(out, ref_orig);
      std::cout << "[  nmse    ] " << t.name() << " N=" << s.n << " vs dequant(W)@A: " << e_deq
                << ", vs W@A: " << e_orig << "\n";
      EXPECT_LE(e_deq, 5e-4);
      EXPECT_LE(e_orig, 1.5e-2);
    }
  }
  QG_SKIP_IF_NOTHING_RAN(t);
}

// ------------------------------------------------------------------ epilogue
struct EpilogueConfig {
  const char* name;
  bool alpha, row_scale, col_scale, beta, bias;
  qg::DType bias_dtype;
  bool relu;
};
inline const std::vector<EpilogueConfig>& epilogue_configs() {
  using D = qg::DType;
  static const std::vector<EpilogueConfig> configs = {
      {"none", false, false, false, false, false, D::f32, false},
      {"alpha", true, false, false, false, false, D::f32, false},
      {"row_scale", false, true, false, false, false, D::f32, false},
      {"col_scale", false, false, true, false, false, D::f32, false},
      {"beta", false, false, false, true, false, D::f32, false},
      {"bias f32", false, false, false, false, true, D::f32, false},
      {"bias f16", false, false, false, false, true, D::f16, false},
      {"bias bf16", false, false, false, false, true, D::bf16, false},
      {"relu", false, false, false, false, false, D::f32, true},
      {"all, bias f32", true, true, true, true, true, D::f32, true},
      {"all, bias f16", true, true, true, true, true, D::f16, true},
      {"all, bias bf16", true, true, true, true, true, D::bf16, true},
  };
  return configs;
}

struct CLayout {
  const char* name;
  int64_t ldc, ldc_n;
};
// Row-major, padded rows, transposed ([N, M]: x @ W^T), transposed padded, interleaved.
inline std::vector<CLayout> c_layouts(int64_t m, int64_t n) {
  return {{"row-major", n, 1},
          {"row-major padded", n + 3, 1},
          {"transposed", 1, m},
          {"transposed padded", 1, m + 2},
          {"interleaved", 2 * n + 1, 2}};
}

// C m-contiguous (x @ W^T, padded) and interleaved: the layouts for which a
// kernel's run-at-a-time epilogue is checked against epilogue_store's bytes.
inline std::vector<CLayout> run_layouts(int64_t m, int64_t n) {
  return {{"transposed padded", 1, m + 2}, {"interleaved", 2 * n + 1, 2}};
}

// Scales small enough that no float16 output overflows (|C| < 1e4).
inline GemmCase epilogue_case(std::mt19937_64& rng, const Shape& s, const EpilogueConfig& e, qg::DType dt,
                              const CLayout& l) {
  GemmCase c = random_case(rng, s.m, s.n, s.k, 0, 0, -10, -4);
  set_c_layout(c, dt, l.ldc, l.ldc_n);
  if (e.alpha) c.alpha = -0.625f;
  auto scale = [&] { return uniform(rng, 0.25f, 2.0f) * ((rng() & 1) ? 1.0f : -1.0f); };
  if (e.row_scale)
    for (int64_t i = 0; i < s.m; ++i) c.row_scale.push_back(scale());
  if (e.col_scale)
    for (int64_t j = 0; j < s.n; ++j) c.col_scale.push_back(scale());
  if (e.beta) {
    c.beta = 0.5f;
    fill_c_values(c, rng, 40.0f);
  }
  if (e.bias) set_bias(c, rng, e.bias_dtype, 30.0f);
  if (e.relu) c.activation = qg::Activation::relu;
  return c;
}

// Each epilogue feature alone and all together, for every output dtype and C
// layout, against the float64 formula. C is NaN-poisoned whenever beta == 0,
// so a kernel that reads C without being asked to fails.
inline void epilogue_features(GemmKernelTester& t) {
  QG_SEEDED_RNG(rng, 1000);  // one stream, drawn in loop order: a failure's seed reproduces it
  for (const Shape& s : {Shape{19, 5, 96}, Shape{33, 70, 160}, Shape{1, 1, 32}, Shape{19, 7, 256}, Shape{19, 1, 256}}) {
    for (const EpilogueConfig& e : epilogue_configs()) {
      for (qg::DType dt : {qg::DType::f32, qg::DType::f16, qg::DType::bf16}) {
        for (const CLayout& l : c_layouts(s.m, s.n)) {
          SCOPED_TRACE(std::string("epilogue ") + e.name + ", out " + qg::dtype_name(dt) + ", C " + l.name);
          GemmCase c = epilogue_case(rng, s, e, dt, l);
          t.run_and_check(c);
          if (e.relu && !c.c_out.empty()) {  // relu really clamps: no negative outputs
            for (int64_t i = 0; i < c.m; ++i)
              for (int64_t j = 0; j < c.n; ++j) ASSERT_FALSE(c.out(i, j) < 0) << "C[" << i << "," << j << "]";
          }
        }
      }
    }
  }
  QG_SKIP_IF_NOTHING_RAN(t);
}

// K = 0: the empty sum (0) still goes through beta * C, bias and relu.
inline void epilogue_k_zero(GemmKernelTester& t) {
  QG_SEEDED_RNG(rng, 1500);
  for (qg::DType dt : {qg::DType::f32, qg::DType::f16, qg::DType::bf16}) {
    for (const CLayout& l : c_layouts(4, 3)) {
      SCOPED_TRACE(std::string("out ") + qg::dtype_name(dt) + ", C " + l.name);
      GemmCase c;
      c.m = 4;
      c.n = 3;
      set_c_layout(c, dt, l.ldc, l.ldc_n);
      c.alpha = 3.0f;
      c.beta = -0.5f;
      fill_c_values(c, rng, 10.0f);
      set_bias(c, rng, qg::DType::bf16, 10.0f);
      c.activation = qg::Activation::relu;
      t.run_and_check(c);
    }
  }
  QG_SKIP_IF_NOTHING_RAN(t);
}

// Operands, C, bias and scales at odd addresses and odd row strides (a NumPy
// view at byte offset 1). Fast kernels that need aligned operands refuse the
// first cases (their can_run); C, bias and scales may sit anywhere for all.
inline void misaligned_buffers(GemmKernelTester& t) {
  QG_SEEDED_RNG(rng, 1600);
  struct Offsets {
    size_t a, b, c, bias, scales;
    int64_t a_pad, b_pad;
  };
  for (const Offsets& o : {Offsets{1, 2, 1, 1, 2, 1, 2}, Offsets{1, 0, 0, 0, 0, 0, 0}, Offsets{0, 2, 0, 0, 0, 0, 0},
                           Offsets{0, 0, 1, 1, 1, 0, 0}, Offsets{0, 0, 2, 3, 2, 2, 4}}) {
    for (const Shape& s : {Shape{19, 5, 96}, Shape{33, 70, 160}, Shape{19, 1, 256}}) {
      for (qg::DType dt : {qg::DType::f32, qg::DType::f16}) {
        GemmCase c = random_case(rng, s.m, s.n, s.k, o.a_pad, o.b_pad, -10, -4);
        set_c_layout(c, dt, 1, s.m);  // transposed
        c.a_offset = o.a;
        c.b_offset = o.b;
        c.c_offset = o.c;
        c.bias_offset = o.bias;
        c.scale_offset = o.scales;
        set_bias(c, rng, qg::DType::f16, 5.0f);
        for (int64_t i = 0; i < s.m; ++i) c.row_scale.push_back(uniform(rng, 0.5f, 1.5f));
        for (int64_t j = 0; j < s.n; ++j) c.col_scale.push_back(uniform(rng, 0.5f, 1.5f));
        c.beta = 2.0f;
        fill_c_values(c, rng, 3.0f);
        t.run_and_check(c);
      }
    }
  }
  QG_SKIP_IF_NOTHING_RAN(t);
}

// Same inputs twice: bit-identical outputs.
inline void deterministic(GemmKernelTester& t) {
  QG_SEEDED_RNG(rng, 1700);
  for (const Shape& s : {Shape{70, 6, 512}, Shape{70, 130, 512}, Shape{70, 1, 512}}) {
    GemmCase c = epilogue_case(rng, s, epilogue_configs().back(), qg::DType::f32, {"row-major", s.n, 1});
    GemmCase again = c;
    if (!t.run(c) || !t.run(again)) continue;
    EXPECT_EQ(c.c_out, again.c_out) << c.describe();
  }
  QG_SKIP_IF_NOTHING_RAN(t);
}

}  // namespace gemm_suite
}  // namespace qgtest

// The suite as TEST_Ps of `Fixture`, a TestWithParam<std::string> (the kernel
// name) that provides qgtest::GemmKernelTester& tester().
#define QG_GEMM_KERNEL_TESTS(Fixture)                                                                           \
  TEST_P(Fixture, RandomCodesMatchFloat64Reference) { ::qgtest::gemm_suite::random_codes(tester()); }          \
  TEST_P(Fixture, StridedOperandsWithSentinels) { ::qgtest::gemm_suite::strided_operands(tester()); }          \
  TEST_P(Fixture, SubnormalAndLargeScales) { ::qgtest::gemm_suite::subnormal_and_large_scales(tester()); }     \
  TEST_P(Fixture, IntegerPartExactForAnyBytes) { ::qgtest::gemm_suite::integer_part_exact(tester()); }         \
  TEST_P(Fixture, ExtremeCodes) { ::qgtest::gemm_suite::extreme_codes(tester()); }                             \
  TEST_P(Fixture, KZeroGivesZeros) { ::qgtest::gemm_suite::k_zero(tester()); }                                 \
  TEST_P(Fixture, EmptyMOrNWritesNothing) { ::qgtest::gemm_suite::empty_m_or_n(tester()); }                    \
  TEST_P(Fixture, NaNBlockPoisonsItsRowAndColumnOnly) {                                                        \
    ::qgtest::gemm_suite::nan_block_poisons_its_row_and_column_only(tester());                                 \
  }                                                                                                            \
  TEST_P(Fixture, InfScaleBlockGivesSignedInfinity) { ::qgtest::gemm_suite::inf_scale_block(tester()); }       \
  TEST_P(Fixture, TierBAgainstUnquantizedInputs) {                                                             \
    ::qgtest::gemm_suite::tier_b_against_unquantized_inputs(tester());                                         \
  }                                                                                                            \
  TEST_P(Fixture, EpilogueEachFeatureAndAllDtypesAndLayouts) {                                                 \
    ::qgtest::gemm_suite::epilogue_features(tester());                                                         \
  }                                                                                                            \
  TEST_P(Fixture, EpilogueWithKZero) { ::qgtest::gemm_suite::epilogue_k_zero(tester()); }                      \
  TEST_P(Fixture, MisalignedBuffers) { ::qgtest::gemm_suite::misaligned_buffers(tester()); }                   \
  TEST_P(Fixture, DeterministicRunToRun) { ::qgtest::gemm_suite::deterministic(tester()); }
