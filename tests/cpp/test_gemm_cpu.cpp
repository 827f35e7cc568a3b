// SPDX-License-Identifier: MIT
// test_gemm_cpu.cpp: gemm_q4_0_q8_1 on the CPU, each implementation forced
// through the registry (cpu_avx2, cpu_scalar) and through public dispatch,
// against a float64 reference built from the same codes (Tier A), plus the
// quantization-quality check of reliability.md §9 (Tier B).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <future>
#include <limits>
#include <thread>
#include <random>
#include <string>
#include <vector>

#include "backend.h"
#include "qg/qg.h"
#include "test_util.h"

namespace {

using qgtest::f2u;
using qgtest::ref_fp16_to_fp32;

// ------------------------------------------------------------------ problem setup
struct Problem {
  int64_t m = 0, n = 0, k = 0;
  int64_t ldw = 0, lda = 0, ldc = 0;  // bytes, bytes, elements
  std::vector<uint8_t> w, a;
  std::vector<float> c;  // m * ldc + tail, poisoned

  qg::GemmArgs args() {
    qg::GemmArgs g;
    g.w = w.empty() ? nullptr : w.data();
    g.a = a.empty() ? nullptr : a.data();
    g.c = c.empty() ? nullptr : c.data();
    g.m = m;
    g.n = n;
    g.k = k;
    g.ldw = ldw;
    g.lda = lda;
    g.ldc = ldc;
    g.device = qg::Device::cpu();
    return g;
  }
};

constexpr int64_t kTailFloats = 17;

// Random blocks: qs are raw random bytes (every nibble, every int8 incl. -128),
// scales random finite fp16 with exponents in [emin, emax]; padding bytes of
// padded rows hold the sentinel.
Problem make_problem(std::mt19937_64& rng, int64_t m, int64_t n, int64_t k, int64_t pad_w = 0,
                     int64_t pad_a = 0, int64_t pad_c = 0, int emin = -8, int emax = 3) {
  Problem p;
  p.m = m;
  p.n = n;
  p.k = k;
  const int64_t nb = k / 32;
  p.ldw = nb * 18 + pad_w;
  p.lda = nb * 36 + pad_a;
  p.ldc = n + pad_c;
  p.w.assign(static_cast<size_t>(m * p.ldw), qgtest::kSentinelByte);
  p.a.assign(static_cast<size_t>(n * p.lda), qgtest::kSentinelByte);
  for (int64_t r = 0; r < m; ++r)
    for (int64_t b = 0; b < nb; ++b) {
      uint8_t* blk = &p.w[r * p.ldw + b * 18];
      for (int i = 2; i < 18; ++i) blk[i] = static_cast<uint8_t>(rng());
      const uint16_t d = qgtest::random_fp16(rng, emin, emax);
      std::memcpy(blk, &d, 2);
    }
  for (int64_t r = 0; r < n; ++r)
    for (int64_t b = 0; b < nb; ++b) {
      uint8_t* blk = &p.a[r * p.lda + b * 36];
      for (int i = 2; i < 36; ++i) blk[i] = static_cast<uint8_t>(rng());  // s too: the GEMM must not use it
      const uint16_t d = qgtest::random_fp16(rng, emin, emax);
      std::memcpy(blk, &d, 2);
    }
  p.c.resize(static_cast<size_t>(m * p.ldc + kTailFloats));
  qgtest::fill_poison(p.c.data(), p.c.size());
  return p;
}

void set_scale(uint8_t* blk, uint16_t d) { std::memcpy(blk, &d, 2); }

// C[m,n] = sum_b double(fp16 d_w) * double(fp16 d_a) * sum_i (w_i - 8) * a_i, from the bytes.
std::vector<double> reference(const Problem& p) {
  const int64_t nb = p.k / 32;
  std::vector<double> c(static_cast<size_t>(p.m * p.n), 0.0);
  for (int64_t i = 0; i < p.m; ++i)
    for (int64_t j = 0; j < p.n; ++j) {
      double acc = 0;
      for (int64_t b = 0; b < nb; ++b) {
        const uint8_t* wb = &p.w[i * p.ldw + b * 18];
        const uint8_t* ab = &p.a[j * p.lda + b * 36];
        uint16_t dw, da;
        std::memcpy(&dw, wb, 2);
        std::memcpy(&da, ab, 2);
        int64_t dot = 0;
        for (int e = 0; e < 32; ++e) {
          const int wq = e < 16 ? (wb[2 + e] & 0x0F) : (wb[2 + e - 16] >> 4);
          dot += static_cast<int64_t>(wq - 8) * static_cast<int8_t>(ab[4 + e]);
        }
        acc += static_cast<double>(ref_fp16_to_fp32(dw)) * static_cast<double>(ref_fp16_to_fp32(da)) *
               static_cast<double>(dot);
      }
      c[i * p.n + j] = acc;
    }
  return c;
}

std::vector<double> output(const Problem& p) {
  std::vector<double> out(static_cast<size_t>(p.m * p.n));
  for (int64_t i = 0; i < p.m; ++i)
    for (int64_t j = 0; j < p.n; ++j) out[i * p.n + j] = p.c[i * p.ldc + j];
  return out;
}

// Every element of C written, every gap of C (row padding, tail) still poison.
void expect_c_written_gaps_untouched(const Problem& p) {
  int unwritten = 0, clobbered = 0;
  for (size_t idx = 0; idx < p.c.size(); ++idx) {
    const int64_t i = static_cast<int64_t>(idx) / p.ldc, j = static_cast<int64_t>(idx) % p.ldc;
    const bool inside = i < p.m && j < p.n;
    if (inside && qgtest::is_poison(p.c[idx]) && ++unwritten <= 3)
      ADD_FAILURE() << "C[" << i << "," << j << "] was not written";
    if (!inside && !qgtest::is_poison(p.c[idx]) && ++clobbered <= 3)
      ADD_FAILURE() << "C gap element " << idx << " was written (value " << p.c[idx] << ")";
  }
  EXPECT_EQ(unwritten, 0);
  EXPECT_EQ(clobbered, 0);
}

// ------------------------------------------------------------------ which implementation
const qg::detail::GemmImpl* find_impl(const std::string& name) {
  for (const auto& impl : qg::detail::cpu::gemm_q4_0_q8_1_impls())
    if (name == impl.name) return &impl;
  return nullptr;
}

class GemmCpu : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (GetParam() == "dispatch") return;
    impl_ = find_impl(GetParam());
    ASSERT_NE(impl_, nullptr) << "the CPU registry has no implementation named " << GetParam();
    qg::GemmArgs probe;
    probe.m = probe.n = 1;
    probe.k = 32;
    probe.device = qg::Device::cpu();
    std::string why;
    if (!impl_->can_run(probe, &why)) GTEST_SKIP() << GetParam() << " cannot run here: " << why;
  }

  qg::Status run(Problem& p) {
    const qg::GemmArgs g = p.args();
    if (!impl_) return qg::gemm_q4_0_q8_1(g);
    std::string why;
    EXPECT_TRUE(impl_->can_run(g, &why)) << why;
    return impl_->run(g, nullptr);
  }

  // Runs and checks Tier A: all written, gaps untouched, NMSE <= 1e-6.
  void run_and_check(Problem& p) {
    SCOPED_TRACE("M=" + std::to_string(p.m) + " N=" + std::to_string(p.n) + " K=" + std::to_string(p.k) +
                 " ldw=" + std::to_string(p.ldw) + " lda=" + std::to_string(p.lda) +
                 " ldc=" + std::to_string(p.ldc));
    const std::vector<uint8_t> w0 = p.w, a0 = p.a;
    const qg::Status s = run(p);
    ASSERT_TRUE(s.ok()) << s.message();
    EXPECT_EQ(p.w, w0) << "W was modified";
    EXPECT_EQ(p.a, a0) << "A was modified";
    expect_c_written_gaps_untouched(p);
    const double e = qgtest::nmse(output(p), reference(p));
    EXPECT_LE(e, 1e-6) << "NMSE vs float64 reference";
  }

  const qg::detail::GemmImpl* impl_ = nullptr;
};

struct Shape {
  int64_t m, n, k;
};
const Shape kShapes[] = {
    {1, 1, 32},   {1, 7, 64},    {3, 5, 96},   {17, 9, 320}, {33, 65, 1024}, {64, 1, 4096},
    {5, 130, 256}, {1, 8, 32},   {1, 9, 32},   {16, 64, 64}, {17, 65, 96},   {2, 3, 32 * 7},
};

TEST_P(GemmCpu, RandomCodesMatchFloat64Reference) {
  uint64_t salt = 0;
  for (const Shape& s : kShapes) {
    QG_SEEDED_RNG(rng, ++salt);
    Problem p = make_problem(rng, s.m, s.n, s.k);
    run_and_check(p);
  }
}

TEST_P(GemmCpu, StridedOperandsWithSentinels) {
  uint64_t salt = 100;
  for (const Shape& s : kShapes) {
    QG_SEEDED_RNG(rng, ++salt);
    Problem p = make_problem(rng, s.m, s.n, s.k, /*pad_w=*/5, /*pad_a=*/3, /*pad_c=*/3);
    run_and_check(p);
  }
}

// Wide scale range, subnormal fp16 scales included.
TEST_P(GemmCpu, SubnormalAndLargeScales) {
  QG_SEEDED_RNG(rng, 200);
  Problem p = make_problem(rng, 9, 11, 32 * 9, 0, 0, 0, /*emin=*/-15, /*emax=*/7);
  run_and_check(p);
}

// Unit scales: every partial sum is an integer below 2^24, so any correct
// implementation is exact, whatever the bytes (a = -128 included).
TEST_P(GemmCpu, IntegerPartExactForAnyBytes) {
  QG_SEEDED_RNG(rng, 300);
  for (const Shape& s : {Shape{7, 13, 4096}, Shape{1, 5, 32}, Shape{19, 3, 32 * 33}}) {
    Problem p = make_problem(rng, s.m, s.n, s.k);
    for (int64_t r = 0; r < p.m; ++r)
      for (int64_t b = 0; b < p.k / 32; ++b) set_scale(&p.w[r * p.ldw + b * 18], 0x3C00);
    for (int64_t r = 0; r < p.n; ++r)
      for (int64_t b = 0; b < p.k / 32; ++b) set_scale(&p.a[r * p.lda + b * 36], 0x3C00);
    ASSERT_TRUE(run(p).ok());
    const std::vector<double> want = reference(p);
    for (int64_t i = 0; i < p.m; ++i)
      for (int64_t j = 0; j < p.n; ++j)
        ASSERT_EQ(static_cast<double>(p.c[i * p.ldc + j]), want[i * p.n + j]) << "C[" << i << "," << j << "]";
  }
}

// The extremes of the integer part, where sign-flip tricks wrap: w nibble 0
// (w-8 = -8) or 15 against a = -128 or 127 in every position.
TEST_P(GemmCpu, ExtremeCodes) {
  struct Ext {
    uint8_t nibble;
    int8_t a;
  };
  for (const Ext& e : {Ext{0, -128}, Ext{15, -128}, Ext{0, 127}, Ext{15, 127}, Ext{8, -128}}) {
    const int64_t m = 3, n = 6, k = 32 * 128;
    Problem p;
    p.m = m;
    p.n = n;
    p.k = k;
    p.ldw = k / 32 * 18;
    p.lda = k / 32 * 36;
    p.ldc = n;
    p.w.resize(m * p.ldw);
    p.a.resize(n * p.lda);
    for (int64_t b = 0; b < m * k / 32; ++b) {
      set_scale(&p.w[b * 18], 0x3C00);
      std::memset(&p.w[b * 18 + 2], e.nibble | (e.nibble << 4), 16);
    }
    for (int64_t b = 0; b < n * k / 32; ++b) {
      set_scale(&p.a[b * 36], 0x3C00);
      set_scale(&p.a[b * 36 + 2], 0x7E00);  // s = NaN: must not be read
      std::memset(&p.a[b * 36 + 4], static_cast<uint8_t>(e.a), 32);
    }
    p.c.resize(m * n + kTailFloats);
    qgtest::fill_poison(p.c.data(), p.c.size());
    ASSERT_TRUE(run(p).ok());
    const double want = (e.nibble - 8.0) * e.a * k;
    for (int64_t i = 0; i < m * n; ++i)
      ASSERT_EQ(static_cast<double>(p.c[i]), want) << "nibble " << int(e.nibble) << " a " << int(e.a);
    for (int64_t i = m * n; i < m * n + kTailFloats; ++i) ASSERT_TRUE(qgtest::is_poison(p.c[i]));
  }
}

// K = 0 with M, N > 0: an empty sum, all zeros (null operand pointers are fine).
TEST_P(GemmCpu, KZeroGivesZeros) {
  Problem p;
  p.m = 5;
  p.n = 7;
  p.k = 0;
  p.ldc = 9;
  p.c.resize(p.m * p.ldc + kTailFloats);
  qgtest::fill_poison(p.c.data(), p.c.size());
  ASSERT_TRUE(run(p).ok());
  for (int64_t i = 0; i < p.m; ++i)
    for (int64_t j = 0; j < p.n; ++j) EXPECT_EQ(p.c[i * p.ldc + j], 0.0f) << "C[" << i << "," << j << "]";
  expect_c_written_gaps_untouched(p);
}

// M = 0 or N = 0: nothing to do, nothing written.
TEST_P(GemmCpu, EmptyMOrNWritesNothing) {
  QG_SEEDED_RNG(rng, 400);
  for (const Shape& s : {Shape{0, 5, 64}, Shape{4, 0, 64}, Shape{0, 0, 64}, Shape{0, 3, 0}}) {
    Problem p = make_problem(rng, s.m, s.n, s.k);
    p.c.assign(kTailFloats, 0.0f);
    qgtest::fill_poison(p.c.data(), p.c.size());
    ASSERT_TRUE(run(p).ok()) << "M=" << s.m << " N=" << s.n;
    for (float v : p.c) ASSERT_TRUE(qgtest::is_poison(v)) << "M=" << s.m << " N=" << s.n;
  }
}

// A NaN scale (qg's marker of a non-finite block) poisons exactly its row of
// W (or column of A) and nothing else.
TEST_P(GemmCpu, NaNBlockPoisonsItsRowAndColumnOnly) {
  QG_SEEDED_RNG(rng, 500);
  Problem p = make_problem(rng, 6, 10, 32 * 5);
  set_scale(&p.w[2 * p.ldw + 3 * 18], 0x7E00);
  set_scale(&p.a[7 * p.lda + 0 * 36], 0x7E00);
  ASSERT_TRUE(run(p).ok());
  const std::vector<double> want = reference(p);
  double num = 0, den = 0;
  for (int64_t i = 0; i < p.m; ++i)
    for (int64_t j = 0; j < p.n; ++j) {
      const float v = p.c[i * p.ldc + j];
      if (i == 2 || j == 7) {
        EXPECT_TRUE(std::isnan(v)) << "C[" << i << "," << j << "] = " << v;
      } else {
        ASSERT_TRUE(std::isfinite(v)) << "C[" << i << "," << j << "]";
        num += (v - want[i * p.n + j]) * (v - want[i * p.n + j]);
        den += want[i * p.n + j] * want[i * p.n + j];
      }
    }
  EXPECT_LE(num / den, 1e-6);
}

// Tier B (reliability.md §9): uniform[-1,1] W and A quantized by qg.
TEST_P(GemmCpu, TierBAgainstUnquantizedInputs) {
  QG_SEEDED_RNG(rng, 600);
  const int64_t m = 64, n = 33, k = 4096;
  std::vector<float> w(m * k), a(n * k);
  for (auto& v : w) v = qgtest::uniform(rng, -1.0f, 1.0f);
  for (auto& v : a) v = qgtest::uniform(rng, -1.0f, 1.0f);
  for (qg::Q8_1Convention conv : {qg::Q8_1Convention::reference, qg::Q8_1Convention::ggml_cuda}) {
    SCOPED_TRACE(conv == qg::Q8_1Convention::reference ? "q8_1 reference" : "q8_1 ggml_cuda");
    Problem p;
    p.m = m;
    p.n = n;
    p.k = k;
    p.ldw = k / 32 * 18;
    p.lda = k / 32 * 36;
    p.ldc = n;
    p.w.resize(m * p.ldw);
    p.a.resize(n * p.lda);
    p.c.resize(m * n + kTailFloats);
    qgtest::fill_poison(p.c.data(), p.c.size());
    qg::QuantizeArgs qa;
    qa.x = w.data();
    qa.rows = m;
    qa.k = k;
    qa.x_row_stride = k;
    qa.y = p.w.data();
    qa.y_row_stride = p.ldw;
    ASSERT_TRUE(qg::quantize(qg::Format::q4_0, qa).ok());
    qa.x = a.data();
    qa.rows = n;
    qa.y = p.a.data();
    qa.y_row_stride = p.lda;
    qa.q8_1_convention = conv;
    ASSERT_TRUE(qg::quantize(qg::Format::q8_1, qa).ok());
    std::vector<float> wd(m * k);
    qg::DequantizeArgs da;
    da.xq = p.w.data();
    da.rows = m;
    da.k = k;
    da.xq_row_stride = p.ldw;
    da.y = wd.data();
    da.y_row_stride = k;
    ASSERT_TRUE(qg::dequantize(qg::Format::q4_0, da).ok());

    ASSERT_TRUE(run(p).ok());
    std::vector<double> ref_deq(m * n), ref_orig(m * n);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double s1 = 0, s2 = 0;
        for (int64_t e = 0; e < k; ++e) {
          s1 += static_cast<double>(wd[i * k + e]) * a[j * k + e];
          s2 += static_cast<double>(w[i * k + e]) * a[j * k + e];
        }
        ref_deq[i * n + j] = s1;
        ref_orig[i * n + j] = s2;
      }
    const std::vector<double> out = output(p);
    const double e_deq = qgtest::nmse(out, ref_deq), e_orig = qgtest::nmse(out, ref_orig);
    std::cout << "[  nmse    ] " << GetParam() << " vs dequant(W)@A: " << e_deq << ", vs W@A: " << e_orig << "\n";
    EXPECT_LE(e_deq, 5e-4);
    EXPECT_LE(e_orig, 1.5e-2);
    EXPECT_LE(qgtest::nmse(out, reference(p)), 1e-6);
  }
}

// Each output element is computed by one thread in a fixed order: the result
// does not depend on the thread count, bit for bit.
TEST_P(GemmCpu, BitIdenticalAcrossThreadCounts) {
  QG_SEEDED_RNG(rng, 700);
  Problem p1 = make_problem(rng, 70, 200, 512, 0, 0, 1);
  Problem p4 = p1;
  qg::set_cpu_threads(1);
  EXPECT_EQ(qg::cpu_threads(), 1);
  ASSERT_TRUE(run(p1).ok());
  qg::set_cpu_threads(4);
  EXPECT_EQ(qg::cpu_threads(), 4);
  ASSERT_TRUE(run(p4).ok());
  qg::set_cpu_threads(0);  // back to the default for the other tests
  ASSERT_EQ(p1.c.size(), p4.c.size());
  for (size_t i = 0; i < p1.c.size(); ++i) ASSERT_EQ(f2u(p1.c[i]), f2u(p4.c[i])) << "element " << i;
  EXPECT_LE(qgtest::nmse(output(p1), reference(p1)), 1e-6);
}

INSTANTIATE_TEST_SUITE_P(Impls, GemmCpu, ::testing::Values("cpu_avx2", "cpu_scalar", "dispatch"),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

// ------------------------------------------------------------------ across implementations
TEST(GemmCpuRegistry, ListsAvx2ThenScalar) {
  const auto& impls = qg::detail::cpu::gemm_q4_0_q8_1_impls();
  ASSERT_EQ(impls.size(), 2u);
  EXPECT_STREQ(impls[0].name, "cpu_avx2");
  EXPECT_STREQ(impls[1].name, "cpu_scalar");
  qg::GemmArgs probe;
  probe.m = probe.n = 1;
  probe.k = 32;
  probe.device = qg::Device::cpu();
  std::string why;
  EXPECT_TRUE(impls[1].can_run(probe, &why)) << "the scalar kernel must always be available";
  probe.device = qg::Device::cuda(0);
  EXPECT_FALSE(impls[1].can_run(probe, &why));
  EXPECT_NE(why.find("cuda:0"), std::string::npos) << why;
}

// The view API flattens batch dims of W and A: same numbers as the raw call.
TEST(GemmCpuViews, BatchDimsFlattenToRows) {
  QG_SEEDED_RNG(rng, 800);
  const int64_t nb = 3;
  Problem p = make_problem(rng, 6, 10, 32 * nb);
  ASSERT_TRUE(qg::gemm_q4_0_q8_1(p.args()).ok());
  std::vector<float> c(6 * 10 + kTailFloats);
  qgtest::fill_poison(c.data(), c.size());
  const auto cpu = qg::Device::cpu();
  const qg::TensorView wv = qg::make_view(p.w.data(), qg::DType::u8, cpu, {2, 3, nb, 18});
  const qg::TensorView av = qg::make_view(p.a.data(), qg::DType::u8, cpu, {5, 2, nb, 36});
  const qg::TensorView cv = qg::make_view(c.data(), qg::DType::f32, cpu, {6, 10});
  std::vector<int64_t> shape;
  ASSERT_TRUE(qg::gemm_q4_0_q8_1_output_shape(wv, av, -1, -1, -1, &shape).ok());
  EXPECT_EQ(shape, (std::vector<int64_t>{6, 10}));
  const qg::Status s = qg::gemm_q4_0_q8_1(wv, av, cv, 6, 10, 32 * nb);
  ASSERT_TRUE(s.ok()) << s.message();
  for (int64_t i = 0; i < 60; ++i) ASSERT_EQ(f2u(c[i]), f2u(p.c[i])) << i;
  for (int64_t i = 60; i < 60 + kTailFloats; ++i) ASSERT_TRUE(qgtest::is_poison(c[i]));
  // and the convenience overload
  std::vector<float> c2(60);
  ASSERT_TRUE(qg::gemm_q4_0_q8_1(p.w.data(), p.a.data(), c2.data(), 6, 10, 32 * nb, cpu).ok());
  for (int64_t i = 0; i < 60; ++i) ASSERT_EQ(f2u(c2[i]), f2u(p.c[i])) << i;
}

// A row-sliced W view (rows of a wider buffer) runs with ldw > row bytes.
TEST(GemmCpuViews, RowSlicedWeightView) {
  QG_SEEDED_RNG(rng, 801);
  const int64_t nb = 4;
  Problem p = make_problem(rng, 5, 3, 32 * nb, /*pad_w=*/18 * 2, 0, 0);  // each row: 4 blocks + 2 unused blocks
  ASSERT_TRUE(qg::gemm_q4_0_q8_1(p.args()).ok());
  qg::TensorView wv = qg::make_view(p.w.data(), qg::DType::u8, qg::Device::cpu(), {5, nb, 18});
  wv.strides[0] = (nb + 2) * 18;
  const qg::TensorView av = qg::make_view(p.a.data(), qg::DType::u8, qg::Device::cpu(), {3, nb, 36});
  std::vector<float> c(15);
  qgtest::fill_poison(c.data(), c.size());
  const qg::Status s = qg::gemm_q4_0_q8_1(wv, av, qg::make_view(c.data(), qg::DType::f32, qg::Device::cpu(), {5, 3}),
                                         -1, -1, -1);
  ASSERT_TRUE(s.ok()) << s.message();
  for (int64_t i = 0; i < 15; ++i) ASSERT_EQ(f2u(c[i]), f2u(p.c[i])) << i;
}

// The pool is rebuilt by set_cpu_threads; a call right after must use every
// new worker exactly once. (A worker that starts with a stale generation
// count runs an extra pass, over-decrements the pool's active count, and the
// caller either returns before all tiles are written or waits forever.)
// A hang is caught by a watchdog: the test then fails and ends the process,
// since the stuck call holds the pool.
TEST(CpuThreadPool, ResizeBetweenCallsNeitherHangsNorReturnsEarly) {
  QG_SEEDED_RNG(rng, 900);
  Problem p = make_problem(rng, 64, 256, 256);
  for (int64_t r = 0; r < p.m; ++r)
    for (int64_t b = 0; b < p.k / 32; ++b) set_scale(&p.w[r * p.ldw + b * 18], 0x3C00);
  for (int64_t r = 0; r < p.n; ++r)
    for (int64_t b = 0; b < p.k / 32; ++b) set_scale(&p.a[r * p.lda + b * 36], 0x3C00);
  qg::set_cpu_threads(1);
  ASSERT_TRUE(qg::gemm_q4_0_q8_1(p.args()).ok());
  const std::vector<float> want = p.c;
  const int iterations = 8000;
  std::promise<int> result;
  std::future<int> done = result.get_future();
  std::thread runner([&] {
    int bad = 0;
    for (int it = 0; it < iterations; ++it) {
      qgtest::fill_poison(p.c.data(), p.c.size());
      qg::set_cpu_threads(2 + it % 3);  // the call follows at once: new workers are still starting
      if (!qg::gemm_q4_0_q8_1(p.args()).ok() || std::memcmp(p.c.data(), want.data(), want.size() * 4) != 0) ++bad;
    }
    result.set_value(bad);
  });
  if (done.wait_for(std::chrono::seconds(90)) == std::future_status::timeout) {
    ADD_FAILURE() << "gemm_q4_0_q8_1 did not return within 90 s after set_cpu_threads: the CPU thread "
                     "pool deadlocked (see ThreadPool::start / worker_loop: new workers begin with seen=0)";
    std::fflush(stdout);
    std::fflush(stderr);
    std::_Exit(1);
  }
  runner.join();
  qg::set_cpu_threads(0);
  EXPECT_EQ(done.get(), 0) << "calls that returned before every output element was written";
}

}  // namespace
