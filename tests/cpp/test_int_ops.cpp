// SPDX-License-Identifier: MIT
// test_int_ops.cpp: the integer family through the public layers: the
// seed-named raw entry points (qg/int_ops.h) on the CPU, and the view layer's
// shape inference, layouts and messages for flat formats (integer codes,
// K-major operands, zero points, scales of one element, group scales).
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "qg/qg.h"
#include "test_util.h"

namespace {

using qg::DType;
using qg::Format;

std::vector<int8_t> random_codes(std::mt19937_64& rng, size_t n, int lo, int hi) {
  std::uniform_int_distribution<int> d(lo, hi);
  std::vector<int8_t> v(n);
  for (int8_t& x : v) x = static_cast<int8_t>(d(rng));
  return v;
}

// C[m, n] = sum_k A[m, k] * B[k, n] in int64, B [K, N].
std::vector<int64_t> matmul_kn(const std::vector<int8_t>& A, const std::vector<int8_t>& B, int64_t M, int64_t N,
                               int64_t K) {
  std::vector<int64_t> c(M * N, 0);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t k = 0; k < K; ++k)
      for (int64_t n = 0; n < N; ++n) c[m * N + n] += int64_t{A[m * K + k]} * B[k * N + n];
  return c;
}

qg::TensorView view(void* p, DType dtype, std::initializer_list<int64_t> shape) {
  return qg::make_view(p, dtype, qg::Device::cpu(), shape);
}

TEST(IntOps, Int8MatmulSeedLayoutIsExact) {
  std::mt19937_64 rng(qgtest::seed_for(1));
  for (auto [M, N, K] : {std::tuple<int64_t, int64_t, int64_t>{1, 1, 1}, {5, 3, 17}, {33, 65, 300}}) {
    SCOPED_TRACE("M=" + std::to_string(M) + " N=" + std::to_string(N) + " K=" + std::to_string(K));
    const auto A = random_codes(rng, M * K, -128, 127), B = random_codes(rng, K * N, -128, 127);
    const auto ref = matmul_kn(A, B, M, N, K);
    std::vector<int32_t> C(M * N, -7);
    ASSERT_TRUE(qg::int8_matmul(A.data(), B.data(), C.data(), M, N, K, qg::Device::cpu()).ok());
    for (int64_t i = 0; i < M * N; ++i) ASSERT_EQ(C[i], ref[i]) << "at " << i;
    // The same product with B given as [N, K] (a linear layer's weight).
    std::vector<int8_t> Bt(N * K);
    for (int64_t k = 0; k < K; ++k)
      for (int64_t n = 0; n < N; ++n) Bt[n * K + k] = B[k * N + n];
    std::vector<int32_t> C2(M * N, -7);
    ASSERT_TRUE(qg::int8_matmul(A.data(), Bt.data(), C2.data(), M, N, K, qg::Device::cpu(), nullptr, qg::BLayout::nk).ok());
    EXPECT_EQ(C2, C);
    // fp32 with the seed's scales: C = (A * sa) @ (B * sb) * sc
    std::vector<float> F(M * N);
    ASSERT_TRUE(qg::int8_matmul(A.data(), B.data(), F.data(), M, N, K, 0.5f, 0.25f, 2.0f, qg::Device::cpu()).ok());
    for (int64_t i = 0; i < M * N; ++i) ASSERT_FLOAT_EQ(F[i], static_cast<float>(ref[i]) * 0.25f);
  }
}

TEST(IntOps, Int4PackedMatmulHandlesOddK) {
  std::mt19937_64 rng(qgtest::seed_for(2));
  const int64_t M = 7, N = 5, K = 13, KB = (K + 1) / 2;
  const auto A = random_codes(rng, M * K, -8, 7), B = random_codes(rng, K * N, -8, 7);
  std::vector<uint8_t> ap(M * KB, 0), bp(KB * N, 0);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t k = 0; k < K; ++k) ap[m * KB + k / 2] |= static_cast<uint8_t>((A[m * K + k] & 15) << (4 * (k % 2)));
  for (int64_t k = 0; k < K; ++k)
    for (int64_t n = 0; n < N; ++n) bp[(k / 2) * N + n] |= static_cast<uint8_t>((B[k * N + n] & 15) << (4 * (k % 2)));
  const auto ref = matmul_kn(A, B, M, N, K);
  std::vector<int32_t> C(M * N);
  ASSERT_TRUE(qg::int4_packed_matmul(ap.data(), bp.data(), C.data(), M, N, K, qg::Device::cpu()).ok());
  for (int64_t i = 0; i < M * N; ++i) ASSERT_EQ(C[i], ref[i]) << "at " << i;
}

TEST(IntOps, Int4MatmulInt32WordsWithScales) {
  std::mt19937_64 rng(qgtest::seed_for(3));
  const int64_t M = 9, N = 6, K = 24;
  const auto A = random_codes(rng, M * K, -8, 7), B = random_codes(rng, K * N, -8, 7);
  std::vector<int32_t> ap(M * K / 8, 0), bp(K / 8 * N, 0);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t k = 0; k < K; ++k)
      ap[m * (K / 8) + k / 8] |= static_cast<int32_t>(static_cast<uint32_t>(A[m * K + k] + 8) << (4 * (k % 8)));
  for (int64_t k = 0; k < K; ++k)
    for (int64_t n = 0; n < N; ++n)
      bp[(k / 8) * N + n] |= static_cast<int32_t>(static_cast<uint32_t>(B[k * N + n] + 8) << (4 * (k % 8)));
  std::vector<float> sa(M), sb(N);
  for (int64_t m = 0; m < M; ++m) sa[m] = 0.5f + 0.125f * m;
  for (int64_t n = 0; n < N; ++n) sb[n] = 0.25f + 0.0625f * n;
  std::vector<uint16_t> C(M * N);
  ASSERT_TRUE(qg::int4_matmul(ap.data(), bp.data(), sa.data(), sb.data(), C.data(), M, N, K, qg::Device::cpu()).ok());
  const auto ref = matmul_kn(A, B, M, N, K);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      const float want = static_cast<float>(ref[m * N + n]) * sb[n] * sa[m];  // the epilogue's order: row, then col
      EXPECT_EQ(C[m * N + n], qgtest::ref_fp32_to_fp16(want)) << "m=" << m << " n=" << n;
    }
}

TEST(IntOps, KPastTheInt32LimitIsRefusedWithTheLimit) {
  int8_t a = 0, b = 0;
  int32_t c = 0;
  const qg::Status s = qg::int8_matmul(&a, &b, &c, 1, 1, 131072, qg::Device::cpu());
  EXPECT_EQ(s.code(), qg::StatusCode::invalid_argument);
  EXPECT_NE(s.message().find("131071"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("qg::int8_matmul"), std::string::npos) << s.message();
}

TEST(IntViews, FlatOperandsInferShapesAndKMajorReadsTheTranspose) {
  std::mt19937_64 rng(qgtest::seed_for(4));
  const int64_t M = 4, N = 3, K = 10;
  auto W = random_codes(rng, M * K, -128, 127);  // a: [M, K]
  auto X = random_codes(rng, K * N, -128, 127);  // b given as [K, N]
  qg::GemmViews v;
  v.a_format = Format::i8;
  v.b_format = Format::i8;
  v.a = view(W.data(), DType::i8, {M, K});
  v.b = view(X.data(), DType::i8, {K, N});
  v.b_k_major = true;
  v.out_dtype = DType::i32;
  qg::ResultSpec spec;
  ASSERT_TRUE(qg::result_spec(v, &spec).ok());
  ASSERT_EQ(spec.ndim, 2);
  EXPECT_EQ(spec.shape[0], M);
  EXPECT_EQ(spec.shape[1], N);
  EXPECT_EQ(spec.dtype, DType::i32);
  std::vector<int32_t> C(M * N);
  ASSERT_TRUE(qg::gemm(v, view(C.data(), DType::i32, {M, N})).ok());
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      int64_t r = 0;
      for (int64_t k = 0; k < K; ++k) r += int64_t{W[m * K + k]} * X[k * N + n];
      ASSERT_EQ(C[m * N + n], r);
    }
}

TEST(IntViews, ZeroPointsAndScalarScalesInTheEpilogue) {
  std::mt19937_64 rng(qgtest::seed_for(5));
  const int64_t M = 5, N = 4, K = 33;
  auto W = random_codes(rng, M * K, -128, 127), X = random_codes(rng, N * K, -128, 127);
  std::vector<int32_t> zw(M), zx{3};
  for (int64_t m = 0; m < M; ++m) zw[m] = static_cast<int32_t>(m) - 2;
  float sx = 0.5f;
  qg::GemmViews v;
  v.a_format = v.b_format = Format::i8;
  v.a = view(W.data(), DType::i8, {M, K});
  v.b = view(X.data(), DType::i8, {N, K});
  const qg::TensorView zwv = view(zw.data(), DType::i32, {M}), zxv = view(zx.data(), DType::i32, {1});
  const qg::TensorView sxv = view(&sx, DType::f32, {1});
  v.row_zero_point = &zwv;
  v.col_zero_point = &zxv;
  v.out_dtype = DType::i32;
  std::vector<int32_t> C(M * N);
  ASSERT_TRUE(qg::gemm(v, view(C.data(), DType::i32, {M, N})).ok());
  v.out_dtype = DType::f32;
  v.col_scale = &sxv;
  std::vector<float> F(M * N);
  ASSERT_TRUE(qg::gemm(v, view(F.data(), DType::f32, {M, N})).ok());
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      int64_t r = 0;
      for (int64_t k = 0; k < K; ++k) r += (int64_t{W[m * K + k]} - zw[m]) * (int64_t{X[n * K + k]} - zx[0]);
      ASSERT_EQ(C[m * N + n], r) << "m=" << m << " n=" << n;
      ASSERT_FLOAT_EQ(F[m * N + n], static_cast<float>(r) * 0.5f);
    }
  // int32 output with a scale is refused, naming the fix.
  v.out_dtype = DType::i32;
  const qg::Status s = qg::gemm(v, view(C.data(), DType::i32, {M, N}));
  EXPECT_EQ(s.code(), qg::StatusCode::invalid_argument);
  EXPECT_NE(s.message().find("out_dtype float32"), std::string::npos) << s.message();
}

TEST(IntViews, MessagesNameTheArgumentAndTheFix) {
  std::vector<int8_t> W(12), X(12);
  std::vector<float> Xf(12);
  qg::GemmViews v;
  v.fn = "qg.int8_matmul";
  v.a_format = v.b_format = Format::i8;
  v.a = view(W.data(), DType::i8, {3, 4});
  v.b = view(Xf.data(), DType::f32, {3, 4});  // wrong dtype for i8
  qg::ResultSpec spec;
  qg::Status s = qg::result_spec(v, &spec);
  EXPECT_EQ(s.code(), qg::StatusCode::type_error);
  EXPECT_NE(s.message().find("qg.int8_matmul: b must be int8"), std::string::npos) << s.message();
  v.b = view(X.data(), DType::i8, {4, 3});  // K = 3, a has K = 4
  s = qg::result_spec(v, &spec);
  EXPECT_EQ(s.code(), qg::StatusCode::invalid_argument);
  EXPECT_NE(s.message().find("K=4"), std::string::npos) << s.message();
  std::vector<int32_t> z(2);
  const qg::TensorView zv = view(z.data(), DType::i32, {2});
  v.b = view(X.data(), DType::i8, {3, 4});
  v.row_zero_point = &zv;  // [2] for M = 3
  s = qg::result_spec(v, &spec);
  EXPECT_EQ(s.code(), qg::StatusCode::invalid_argument);
  EXPECT_NE(s.message().find("row_zero_point must have shape [1] or [3]"), std::string::npos) << s.message();
}

TEST(IntViews, QuantizeWritesCodesScalesAndZeroPoints) {
  // Two rows, asymmetric per row: row 0 = [0, 1, 2, 3] -> scale 3/255, zp -128;
  // row 1 = [-1, 0, 1, 2] -> scale 3/255, zp = -128 - round(-1 * 85) = -43.
  std::vector<float> x{0, 1, 2, 3, -1, 0, 1, 2};
  qg::QuantizeViews q;
  q.format = Format::i8;
  q.x = view(x.data(), DType::f32, {2, 4});
  q.granularity = qg::Granularity::row;
  q.asymmetric = true;
  qg::ResultSpec codes, scales;
  ASSERT_TRUE(qg::result_spec(q, &codes).ok());
  ASSERT_TRUE(qg::scales_spec(q, &scales).ok());
  EXPECT_EQ(codes.dtype, DType::i8);
  EXPECT_EQ(codes.ndim, 2);
  EXPECT_EQ(scales.ndim, 1);
  EXPECT_EQ(scales.shape[0], 2);
  std::vector<int8_t> y(8);
  std::vector<float> s(2);
  std::vector<int32_t> z(2);
  const qg::TensorView sv = view(s.data(), DType::f32, {2}), zv = view(z.data(), DType::i32, {2});
  qg::QuantizeOutputs out{view(y.data(), DType::i8, {2, 4}), &sv, &zv};
  ASSERT_TRUE(qg::quantize(q, out).ok());
  EXPECT_FLOAT_EQ(s[0], 3.0f / 255.0f);
  EXPECT_EQ(z[0], -128);
  EXPECT_EQ(z[1], -43);
  EXPECT_EQ(y[0], -128);
  EXPECT_EQ(y[3], 127);
  EXPECT_EQ(y[4], -128);  // -1 -> round(-85) - 43 = -128
  EXPECT_EQ(y[5], -43);   // 0 -> the zero point
  // Dequantize inverts it within half a step.
  qg::DequantizeViews d;
  d.format = Format::i8;
  d.xq = view(y.data(), DType::i8, {2, 4});
  d.granularity = qg::Granularity::row;
  d.scales = &sv;
  d.zero_points = &zv;
  std::vector<float> back(8);
  ASSERT_TRUE(qg::dequantize(d, view(back.data(), DType::f32, {2, 4})).ok());
  for (int i = 0; i < 8; ++i) EXPECT_NEAR(back[i], x[i], 0.5 * 3.0 / 255.0 + 1e-7) << i;
}

}  // namespace

namespace {

// Scopes over no values (a tensor scope of an empty x, rows of K = 0) still
// get their parameters: those of an all-zero scope (scale 0; zero point qmin
// when asymmetric), never uninitialised memory.
TEST(IntViews, EmptyScopesGetAllZeroParameters) {
  float dummy = 0.0f;
  qg::QuantizeArgs a;
  a.format = Format::i8;
  a.x = &dummy;
  a.x_dtype = DType::f32;
  a.rows = 3;
  a.k = 0;
  a.y = &dummy;
  a.device = qg::Device::cpu();
  a.granularity = qg::Granularity::row;
  std::vector<float> s(3, -1.0f);
  std::vector<int32_t> z(3, 99);
  a.scales = s.data();
  a.zero_points = z.data();
  ASSERT_TRUE(qg::quantize(a).ok());
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(s[i], 0.0f);
    EXPECT_EQ(z[i], -128);
  }
  a.rows = 0;
  a.k = 5;
  a.granularity = qg::Granularity::tensor;
  a.zero_points = nullptr;
  s[0] = -1.0f;
  ASSERT_TRUE(qg::quantize(a).ok());
  EXPECT_EQ(s[0], 0.0f);
}

}  // namespace
