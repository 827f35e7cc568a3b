// SPDX-License-Identifier: MIT
// test_cpu_avx2.cpp: the AVX2 code paths of the CPU backend, beyond the shared
// GEMM suite: every tail of the GEMM's register tile (two W rows by up to four
// A rows) and of its 16 x 64 tasks, a non-finite scale in each position of the
// tile, the N = 1 path (four W rows per step, 64-row tasks, prefetching ahead
// and into the next row group), and the vector block quantizers (AVX2, and
// AVX-512 where the CPU runs the AVX-512 kernels) against the scalar one,
// byte for byte.
// Skipped where the CPU lacks AVX2 + FMA + F16C.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "backend.h"
#include "cpu/features.h"
#include "cpu/kernels.h"
#include "quant_block.h"
#include "cpu_simd_cases.h"
#include "test_util.h"

namespace {

using qgtest::GemmCase;

bool have_avx2() {
  const qg::detail::cpu::CpuFeatures& f = qg::detail::cpu::cpu_features();
  return f.avx2 && f.fma && f.f16c;
}

class CpuAvx2 : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!have_avx2()) GTEST_SKIP() << "this CPU (or QG_CPU_ISA) has no AVX2 + FMA + F16C";
  }
  qgtest::HostMemory mem_;
  qgtest::GemmKernelTester gemm_{qg::detail::cpu::registry(), "cpu_avx2", mem_};
  // Runs a case on cpu_avx2 and checks it against the float64 reference.
  std::function<void(const GemmCase&)> check_ = [this](const GemmCase& c) {
    GemmCase v = c;
    ASSERT_TRUE(gemm_.run_and_check(v)) << gemm_.refusals();
  };
};

// M and N from 1 to 9 cover every row-pair and column-group remainder; 15..17
// and 63..65, 129 the task edges; K = 32 is one block.
TEST_F(CpuAvx2, GemmEveryTileTail) {
  const std::vector<int64_t> ms = {1, 2, 3, 4, 5, 6, 7, 8, 9, 15, 16, 17, 33};
  const std::vector<int64_t> ns = {1, 2, 3, 4, 5, 6, 7, 8, 9, 63, 64, 65, 129};
  uint64_t salt = 0;
  for (int64_t k : {32, 64, 96})
    for (int64_t m : ms)
      for (int64_t n : ns) {
        QG_SEEDED_RNG(rng, 1000 + ++salt);
        GemmCase c = qgtest::random_case(rng, m, n, k);
        ASSERT_TRUE(gemm_.run_and_check(c));
        if (HasFailure()) return;
      }
}

// Odd row strides (the kernel loads each block with unaligned loads).
TEST_F(CpuAvx2, GemmTailsWithPaddedRows) {
  uint64_t salt = 0;
  for (int64_t m : {1, 3, 6})
    for (int64_t n : {1, 2, 5, 7}) {
      QG_SEEDED_RNG(rng, 1100 + ++salt);
      GemmCase c = qgtest::random_case(rng, m, n, 160, /*a_pad=*/7, /*b_pad=*/13);
      ASSERT_TRUE(gemm_.run_and_check(c));
    }
}

// Enough A rows that the per-call A side data (20 bytes a block) outgrows the
// buffer kept per thread and lives for the call only.
TEST_F(CpuAvx2, GemmWithLargeAScratch) {
  QG_SEEDED_RNG(rng, 1150);
  GemmCase c = qgtest::random_case(rng, 3, 1700, 4096);
  ASSERT_TRUE(gemm_.run_and_check(c));
}

// A +-Inf scale in one W row (or one A row), at every position of the 2 x 4
// tile: that row's (column's) outputs are +-Inf or NaN as the float64
// reference says, and no other output is touched by it.
TEST_F(CpuAvx2, GemmNonFiniteScaleInEveryTilePosition) {
  const int64_t m = 5, n = 7, k = 96;
  for (int side = 0; side < 2; ++side)
    for (int64_t row = 0; row < (side == 0 ? m : n); ++row)
      for (uint16_t bits : {uint16_t{0x7C00}, uint16_t{0xFC00}, uint16_t{0x7E00}}) {
        SCOPED_TRACE((side == 0 ? "W row " : "A row ") + std::to_string(row) + " scale bits " + std::to_string(bits));
        QG_SEEDED_RNG(rng, 1200 + side * 100 + row);
        GemmCase c = qgtest::random_case(rng, m, n, k);
        qgtest::store_u16(side == 0 ? c.w_block(row, 1) : c.a_block(row, 1), bits);
        ASSERT_TRUE(gemm_.run_and_check(c));
        for (int64_t i = 0; i < m; ++i)
          for (int64_t j = 0; j < n; ++j)
            EXPECT_EQ(std::isfinite(c.out(i, j)), (side == 0 ? i : j) != row) << "C[" << i << ", " << j << "]";
      }
}

// N = 1 (decode) has its own path: four W rows per step in 64-row tasks.
TEST_F(CpuAvx2, GemmSingleActivationRowTails) { qgtest::cpu_simd::single_row_tails(check_, 1400); }
TEST_F(CpuAvx2, GemmSingleActivationRowStrided) { qgtest::cpu_simd::single_row_strided(check_, 1500); }
TEST_F(CpuAvx2, GemmSingleActivationRowMatchesWiderCall) { qgtest::cpu_simd::single_row_matches_wider(gemm_, 1600); }
TEST_F(CpuAvx2, GemmSingleActivationRowNonFiniteScales) {
  qgtest::cpu_simd::single_row_non_finite_scales(gemm_, check_, 1700);
}

// The quantizer's vector block code (AVX2, and AVX-512 where the CPU runs
// the AVX-512 kernels) against quant_block.h's, on blocks built to hit
// roundf's ties (x * id = k + 0.5 exactly), the +-127 edge, signed zeros,
// denormals and ordinary gaussian data at many scales.
struct Q8BlockCode {
  const char* name;
  bool (*codes)(const uint8_t* x, uint8_t* qs, float* d, int* code_sum);
  bool (*block)(const uint8_t* x, uint8_t* y, bool with_s);
  bool (*available)();
};
const Q8BlockCode kQ8BlockCodes[] = {
    {"avx2", qg::detail::cpu::quantize_codes_q8_avx2, qg::detail::cpu::quantize_block_q8_avx2, have_avx2},
    {"avx512", qg::detail::cpu::quantize_codes_q8_avx512, qg::detail::cpu::quantize_block_q8_avx512,
     [] { return qg::detail::cpu::cpu_features().avx512_vnni && have_avx2(); }},
};

void PrintTo(const Q8BlockCode& c, std::ostream* os) { *os << c.name; }

class CpuQ8BlockCode : public ::testing::TestWithParam<Q8BlockCode> {
 protected:
  void SetUp() override {
    if (!GetParam().available()) GTEST_SKIP() << "this CPU (or QG_CPU_ISA) does not run the " << GetParam().name << " code";
  }
};

void expect_same_codes(const Q8BlockCode& impl, const float* x, const std::string& what) {
  int8_t want[32], got[32];
  int want_sum = 0, got_sum = 0;
  float got_d = 0;
  const float want_d = qg::detail::quantize_codes_q8(x, want, &want_sum);
  const auto* xb = reinterpret_cast<const uint8_t*>(x);
  ASSERT_TRUE(impl.codes(xb, reinterpret_cast<uint8_t*>(got), &got_d, &got_sum)) << what;
  ASSERT_EQ(qgtest::f2u(got_d), qgtest::f2u(want_d)) << what;
  ASSERT_EQ(got_sum, want_sum) << what;
  for (int j = 0; j < 32; ++j) ASSERT_EQ(got[j], want[j]) << what << ": element " << j << " x=" << x[j];
  // The whole block, fp16 scale and sum included, as quantize_block_q8_1 and
  // _q8_0 write it (d and s through vcvtps2ph against fp32_to_fp16), its
  // bytes written at an odd address and the values read from one.
  qg::block_q8_1 want1;
  qg::block_q8_0 want0;
  qg::detail::quantize_block_q8_1(x, &want1, qg::Q8_1Convention::reference);
  qg::detail::quantize_block_q8_0(x, &want0);
  alignas(32) uint8_t src[1 + 128], dst[1 + sizeof want1 + 1];
  std::memcpy(src + 1, x, 128);
  std::memset(dst, 0xA5, sizeof dst);
  ASSERT_TRUE(impl.block(src + 1, dst + 1, true)) << what;
  ASSERT_EQ(0, std::memcmp(dst + 1, &want1, sizeof want1)) << what << ": sum " << want_sum;
  ASSERT_EQ(dst[0], 0xA5) << what;
  ASSERT_EQ(dst[1 + sizeof want1], 0xA5) << what << ": written past the block";
  std::memset(dst, 0xA5, sizeof dst);
  ASSERT_TRUE(impl.block(src + 1, dst + 1, false)) << what;
  ASSERT_EQ(0, std::memcmp(dst + 1, &want0, sizeof want0)) << what;
  ASSERT_EQ(dst[1 + sizeof want0], 0xA5) << what << ": written past the block";
}

TEST_P(CpuQ8BlockCode, MatchesScalarCodes) {
  const Q8BlockCode& impl = GetParam();
  float x[32];
  // d = 1, id = 1: every k + 0.5 is a tie, both signs.
  for (int base = -127; base <= 126; base += 32) {
    x[0] = 127.0f;
    for (int j = 1; j < 32; ++j) x[j] = static_cast<float>(base + j) + 0.5f;
    for (int j = 1; j < 32; ++j) x[j] = std::fmin(std::fmax(x[j], -127.0f), 127.0f);
    expect_same_codes(impl, x, "ties at base " + std::to_string(base));
    for (float& v : x) v = -v;
    expect_same_codes(impl, x, "negated ties at base " + std::to_string(base));
  }
  // Scaled by powers of two, the ties stay ties.
  for (int e = -20; e <= 20; e += 5) {
    const float s = std::ldexp(1.0f, e);
    for (int j = 0; j < 32; ++j) x[j] = (static_cast<float>(j) - 15.5f) * s;
    x[31] = 127.0f * s;
    expect_same_codes(impl, x, "scaled ties 2^" + std::to_string(e));
  }
  // Neighbours of 0.5 and of the ends, zeros of both signs.
  x[0] = -127.0f;
  for (int j = 1; j < 32; ++j) x[j] = 0.0f;
  x[1] = std::nextafter(0.5f, 0.0f);
  x[2] = std::nextafter(0.5f, 1.0f);
  x[3] = -std::nextafter(0.5f, 0.0f);
  x[4] = -std::nextafter(0.5f, 1.0f);
  x[5] = -0.0f;
  x[6] = std::nextafter(127.0f, 0.0f);
  x[7] = std::nextafter(-126.5f, 0.0f);
  expect_same_codes(impl, x, "neighbours");
  for (float& v : x) v = 0.0f;
  expect_same_codes(impl, x, "zeros");
  for (float& v : x) v = -0.0f;
  expect_same_codes(impl, x, "negative zeros");
  for (int j = 0; j < 32; ++j) x[j] = std::numeric_limits<float>::denorm_min() * static_cast<float>(j - 16);
  expect_same_codes(impl, x, "denormals");
  QG_SEEDED_RNG(rng, 1300);
  std::normal_distribution<float> gauss;
  for (int it = 0; it < 20000; ++it) {
    const float s = std::ldexp(1.0f, static_cast<int>(rng() % 60) - 30);
    for (float& v : x) v = gauss(rng) * s;
    expect_same_codes(impl, x, "gaussian block " + std::to_string(it));
  }
}

TEST_P(CpuQ8BlockCode, LeavesNonFiniteBlocksToScalarCode) {
  float x[32];
  for (float bad : {std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                    std::numeric_limits<float>::quiet_NaN()})
    for (int pos : {0, 13, 31}) {
      for (int j = 0; j < 32; ++j) x[j] = static_cast<float>(j);
      x[pos] = bad;
      uint8_t qs[32];
      float d = 0;
      int sum = 0;
      EXPECT_FALSE(GetParam().codes(reinterpret_cast<const uint8_t*>(x), qs, &d, &sum)) << bad << " at " << pos;
    }
}

INSTANTIATE_TEST_SUITE_P(Isa, CpuQ8BlockCode, ::testing::ValuesIn(kQ8BlockCodes),
                         [](const ::testing::TestParamInfo<Q8BlockCode>& i) { return std::string(i.param.name); });

}  // namespace
