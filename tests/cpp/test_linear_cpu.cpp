// SPDX-License-Identifier: MIT
// test_linear_cpu.cpp: qg::linear_q4_0 and qg::linear_int8 on the CPU equal
// the quantize + gemm they stand for (bias, cast, [N, M] output) byte for
// byte, and their own checks: the workspaces, the overlaps only the pair can
// see, K = 0.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include <qg/qg.h>

#include "linear_cases.h"
#include "test_util.h"

namespace {

using qgtest::linear::Case;

TEST(LinearCpu, MatchesQuantizeThenGemm) {
  QG_SEEDED_RNG(rng, 1);
  qgtest::HostMemory mem;
  for (const Case& c : qgtest::linear::shape_cases({32, 256, 4096})) {
    qgtest::linear::expect_matches(mem, c, rng, nullptr);
    if (HasFatalFailure() || HasNonfatalFailure()) return;
  }
}

TEST(LinearCpu, StridesAndAlignments) {
  QG_SEEDED_RNG(rng, 2);
  qgtest::HostMemory mem;
  for (const Case& c : qgtest::linear::layout_cases()) {
    qgtest::linear::expect_matches(mem, c, rng, nullptr);
    if (HasFatalFailure() || HasNonfatalFailure()) return;
  }
}

TEST(LinearCpu, Int8MatchesQuantizeThenGemm) {
  QG_SEEDED_RNG(rng, 3);
  qgtest::HostMemory mem;
  std::vector<Case> cases = qgtest::linear::int8_cases(qgtest::linear::shape_cases({32, 256}));
  for (const Case& c : qgtest::linear::int8_cases(qgtest::linear::layout_cases())) cases.push_back(c);
  for (const Case& c : cases) {
    qgtest::linear::expect_matches(mem, c, rng, nullptr);
    if (HasFatalFailure() || HasNonfatalFailure()) return;
  }
}

// K = 0: no quantization; y is the bias (or zeros), cast.
TEST(LinearCpu, KZeroWritesTheBias) {
  const float bias[3] = {1.5f, -2.0f, 0.25f};
  float y[2 * 3];
  qg::LinearQ4_0Args a;
  float x = 0.0f;
  uint8_t w = 0;
  a.x = &x;
  a.n = 2;
  a.k = 0;
  a.x_row_stride = 0;
  a.weight_q = &w;
  a.m = 3;
  a.weight_row_stride = 0;
  a.y = y;
  a.ldy = 3;
  a.bias = bias;
  a.device = qg::Device::cpu();
  const qg::Status s = qg::linear_q4_0(a);
  ASSERT_TRUE(s.ok()) << s.message();
  for (int r = 0; r < 2; ++r)
    for (int i = 0; i < 3; ++i) EXPECT_EQ(y[r * 3 + i], bias[i]);
}

class LinearCpuChecks : public ::testing::Test {
 protected:
  static constexpr int64_t kN = 2, kM = 4, kK = 64;
  std::vector<float> x = std::vector<float>(kN * kK, 1.0f);
  std::vector<uint8_t> w = std::vector<uint8_t>(kM * (kK / 32) * 18 + 1024, 0);
  std::vector<uint8_t> ws = std::vector<uint8_t>(kN * (kK / 32) * 36, 0);
  std::vector<float> y = std::vector<float>(kN * kM, 0.0f);
  std::vector<float> bias = std::vector<float>(kM, 0.0f);

  qg::LinearQ4_0Args args() {
    qg::LinearQ4_0Args a;
    a.x = x.data();
    a.n = kN;
    a.k = kK;
    a.x_row_stride = kK;
    a.xq_workspace = ws.data();
    a.weight_q = w.data();
    a.m = kM;
    a.weight_row_stride = (kK / 32) * 18;
    a.y = y.data();
    a.ldy = kM;
    a.bias = bias.data();
    a.device = qg::Device::cpu();
    return a;
  }
};

TEST_F(LinearCpuChecks, AcceptsTheBaseCase) {
  const qg::Status s = qg::linear_q4_0(args());
  EXPECT_TRUE(s.ok()) << s.message();
}

TEST_F(LinearCpuChecks, NamesItselfInMessages) {
  qg::LinearQ4_0Args a = args();
  a.xq_workspace = nullptr;
  const qg::Status s = qg::linear_q4_0(a);
  EXPECT_EQ(s.code(), qg::StatusCode::invalid_argument);
  EXPECT_NE(s.message().find("qg.linear_q4_0"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("xq_workspace"), std::string::npos) << s.message();
}

TEST_F(LinearCpuChecks, RejectsAWorkspaceOverTheWeightOrBias) {
  qg::LinearQ4_0Args a = args();
  a.xq_workspace = w.data() + 8;  // the weight is read while the quantizer may still write
  EXPECT_EQ(qg::linear_q4_0(a).code(), qg::StatusCode::invalid_argument);
  a = args();
  std::vector<uint8_t> shared(ws.size() + 64);
  a.xq_workspace = shared.data();
  a.bias = shared.data() + 16;
  EXPECT_EQ(qg::linear_q4_0(a).code(), qg::StatusCode::invalid_argument);
}

TEST_F(LinearCpuChecks, RejectsYOverXOrTheWorkspace) {
  qg::LinearQ4_0Args a = args();
  a.y = x.data();
  EXPECT_EQ(qg::linear_q4_0(a).code(), qg::StatusCode::invalid_argument);
  a = args();
  a.y = ws.data();
  EXPECT_EQ(qg::linear_q4_0(a).code(), qg::StatusCode::invalid_argument);
}

TEST_F(LinearCpuChecks, RejectsBadShapesAndDtypes) {
  qg::LinearQ4_0Args a = args();
  a.k = 48;  // not a multiple of 32
  EXPECT_EQ(qg::linear_q4_0(a).code(), qg::StatusCode::invalid_argument);
  a = args();
  a.n = -1;
  EXPECT_EQ(qg::linear_q4_0(a).code(), qg::StatusCode::invalid_argument);
  a = args();
  a.x_dtype = qg::DType::i32;
  EXPECT_FALSE(qg::linear_q4_0(a).ok());
  a = args();
  a.y_dtype = qg::DType::u8;
  EXPECT_FALSE(qg::linear_q4_0(a).ok());
  a = args();
  a.ldy = kM - 1;  // rows of y would overlap
  EXPECT_EQ(qg::linear_q4_0(a).code(), qg::StatusCode::invalid_argument);
}

TEST_F(LinearCpuChecks, EmptyNOrMWritesNothing) {
  qg::LinearQ4_0Args a = args();
  a.n = 0;
  EXPECT_TRUE(qg::linear_q4_0(a).ok());
  a = args();
  a.m = 0;
  a.ldy = 1;
  EXPECT_TRUE(qg::linear_q4_0(a).ok());
  for (float v : y) EXPECT_EQ(v, 0.0f);
}

class LinearInt8CpuChecks : public ::testing::Test {
 protected:
  static constexpr int64_t kN = 2, kM = 4, kK = 64;
  std::vector<float> x = std::vector<float>(kN * kK, 1.0f);
  std::vector<int8_t> w = std::vector<int8_t>(kM * kK, 3);
  std::vector<float> w_scale = std::vector<float>(kM, 0.5f);
  std::vector<int8_t> codes = std::vector<int8_t>(kN * kK, 0);
  std::vector<float> scales = std::vector<float>(kN, 0.0f);
  std::vector<float> y = std::vector<float>(kN * kM, 0.0f);

  qg::LinearInt8Args args() {
    qg::LinearInt8Args a;
    a.x = x.data();
    a.n = kN;
    a.k = kK;
    a.x_row_stride = kK;
    a.x_codes_workspace = codes.data();
    a.x_scales_workspace = scales.data();
    a.weight_q = w.data();
    a.m = kM;
    a.weight_row_stride = kK;
    a.weight_scale = w_scale.data();
    a.y = y.data();
    a.ldy = kM;
    a.device = qg::Device::cpu();
    return a;
  }
};

// x all ones: codes 127, token scale 1/127; W all 3 with scale 0.5: each
// output is 64 * 127 * 3 * (1/127) * 0.5 = 96 up to the scale's rounding.
TEST_F(LinearInt8CpuChecks, ComputesTheLayer) {
  const qg::Status s = qg::linear_int8(args());
  ASSERT_TRUE(s.ok()) << s.message();
  for (float v : y) EXPECT_NEAR(v, 96.0f, 1e-4f);
}

TEST_F(LinearInt8CpuChecks, NamesItselfAndTheMissingArgument) {
  qg::LinearInt8Args a = args();
  a.x_scales_workspace = nullptr;
  qg::Status s = qg::linear_int8(a);
  EXPECT_EQ(s.code(), qg::StatusCode::invalid_argument);
  EXPECT_NE(s.message().find("qg.linear_int8"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("x_scales_workspace"), std::string::npos) << s.message();
  a = args();
  a.weight_scale = nullptr;
  s = qg::linear_int8(a);
  EXPECT_EQ(s.code(), qg::StatusCode::invalid_argument);
  EXPECT_NE(s.message().find("weight_scale"), std::string::npos) << s.message();
}

TEST_F(LinearInt8CpuChecks, RejectsOverlappingWorkspaces) {
  qg::LinearInt8Args a = args();
  a.x_scales_workspace = reinterpret_cast<float*>(codes.data() + 8);  // inside the codes
  EXPECT_EQ(qg::linear_int8(a).code(), qg::StatusCode::invalid_argument);
  a = args();
  a.x_codes_workspace = w.data();  // the weight would be overwritten before the GEMM reads it
  EXPECT_EQ(qg::linear_int8(a).code(), qg::StatusCode::invalid_argument);
  a = args();
  a.x_scales_workspace = w_scale.data();
  EXPECT_EQ(qg::linear_int8(a).code(), qg::StatusCode::invalid_argument);
  a = args();
  a.y = x.data();
  EXPECT_EQ(qg::linear_int8(a).code(), qg::StatusCode::invalid_argument);
  for (float v : y) EXPECT_EQ(v, 0.0f);
}

TEST_F(LinearInt8CpuChecks, KZeroWritesTheBias) {
  const float bias[kM] = {1.5f, -2.0f, 0.25f, 4.0f};
  qg::LinearInt8Args a = args();
  a.k = 0;
  a.bias = bias;
  const qg::Status s = qg::linear_int8(a);
  ASSERT_TRUE(s.ok()) << s.message();
  for (int r = 0; r < kN; ++r)
    for (int i = 0; i < kM; ++i) EXPECT_EQ(y[r * kM + i], bias[i]);
}

}  // namespace
