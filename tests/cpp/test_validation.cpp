// SPDX-License-Identifier: MIT
// test_validation.cpp: every bad input gets the right StatusCode and a message
// that names the function and the offending number (reliability.md §8), both
// through the view API (what Python calls) and the raw-pointer API; zero-size
// problems succeed without writing; explain() names the CPU implementation.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "qg/qg.h"
#include "test_util.h"

namespace {

using qg::DType;
using qg::Format;
using qg::StatusCode;

const qg::Device kCpu = qg::Device::cpu();

// A status with `code` whose message contains every one of `parts`.
::testing::AssertionResult IsError(const qg::Status& s, StatusCode code, std::vector<std::string> parts) {
  if (s.code() != code)
    return ::testing::AssertionFailure() << "expected " << qg::status_code_name(code) << ", got "
                                         << qg::status_code_name(s.code()) << ": \"" << s.message() << "\"";
  for (const std::string& p : parts)
    if (s.message().find(p) == std::string::npos)
      return ::testing::AssertionFailure() << "message \"" << s.message() << "\" does not contain \"" << p << "\"";
  return ::testing::AssertionSuccess() << s.message();
}

// Buffers big enough for every view below; sentinel-filled so "nothing written" is checkable.
struct Buffers {
  std::vector<uint8_t> w = std::vector<uint8_t>(4096, qgtest::kSentinelByte);
  std::vector<uint8_t> a = std::vector<uint8_t>(4096, qgtest::kSentinelByte);
  std::vector<float> c = std::vector<float>(1024, 0.0f);
  std::vector<float> x = std::vector<float>(4096, 0.5f);
  std::vector<uint8_t> q = std::vector<uint8_t>(4096, qgtest::kSentinelByte);
  Buffers() { qgtest::fill_poison(c.data(), c.size()); }
  bool c_untouched() const {
    for (float v : c)
      if (!qgtest::is_poison(v)) return false;
    return true;
  }
  bool q_untouched() const {
    for (uint8_t v : q)
      if (v != qgtest::kSentinelByte) return false;
    return true;
  }
};

qg::TensorView view(void* p, DType t, std::initializer_list<int64_t> shape, qg::Device d = kCpu) {
  return qg::make_view(p, t, d, shape);
}

// ================================================================== gemm, views
class GemmValidation : public ::testing::Test {
 protected:
  Buffers b;
  // valid: W [4, 2 blocks, 18] (M=4, K=64), A [3, 2, 36] (N=3), out [4, 3]
  qg::TensorView w = view(b.w.data(), DType::u8, {4, 2, 18});
  qg::TensorView a = view(b.a.data(), DType::u8, {3, 2, 36});
  qg::TensorView out = view(b.c.data(), DType::f32, {4, 3});
  const std::string fn = "qg.gemm_q4_0_q8_1";
};

TEST_F(GemmValidation, ValidCallSucceeds) {
  // make the blocks finite so the result is meaningful: zero scales everywhere
  std::fill(b.w.begin(), b.w.end(), 0);
  std::fill(b.a.begin(), b.a.end(), 0);
  const qg::Status s = qg::gemm_q4_0_q8_1(w, a, out, 4, 3, 64);
  ASSERT_TRUE(s.ok()) << s.message();
  for (int i = 0; i < 12; ++i) EXPECT_EQ(b.c[i], 0.0f);
  EXPECT_TRUE(qgtest::is_poison(b.c[12]));
}

TEST_F(GemmValidation, KNotMultipleOf32) {
  EXPECT_TRUE(IsError(qg::gemm_q4_0_q8_1(w, a, out, -1, -1, 100), StatusCode::invalid_argument,
                      {fn, "K=100", "32"}));
  EXPECT_TRUE(b.c_untouched());
}

TEST_F(GemmValidation, WrongDtypes) {
  qg::TensorView wf = view(b.x.data(), DType::f32, {4, 2, 18});
  EXPECT_TRUE(IsError(qg::gemm_q4_0_q8_1(wf, a, out, -1, -1, -1), StatusCode::type_error,
                      {fn, "weight_q", "uint8", "float32"}));
  qg::TensorView ai8 = view(b.a.data(), DType::i8, {3, 2, 36});
  EXPECT_TRUE(IsError(qg::gemm_q4_0_q8_1(w, ai8, out, -1, -1, -1), StatusCode::type_error,
                      {fn, "activation_q", "uint8", "int8"}));
  qg::TensorView out16 = view(b.c.data(), DType::f16, {4, 3});
  EXPECT_TRUE(IsError(qg::gemm_q4_0_q8_1(w, a, out16, -1, -1, -1), StatusCode::type_error,
                      {fn, "out", "float32", "float16"}));
  EXPECT_TRUE(b.c_untouched());
}

TEST_F(GemmValidation, PackedLastDimWrong) {
  // a Q8_1 array (36 bytes per block) passed as the weight
  qg::TensorView w36 = view(b.w.data(), DType::u8, {4, 2, 36});
  EXPECT_TRUE(IsError(qg::gemm_q4_0_q8_1(w36, a, out, -1, -1, -1), StatusCode::invalid_argument,
                      {fn, "weight_q.shape[-1]", "18", "36"}));
  qg::TensorView a18 = view(b.a.data(), DType::u8, {3, 2, 18});
  EXPECT_TRUE(IsError(qg::gemm_q4_0_q8_1(w, a18, out, -1, -1, -1), StatusCode::invalid_argument,
                      {fn, "activation_q.shape[-1]", "36", "18"}));
  // a flat byte array is not [..., blocks, bytes]
  qg::TensorView flat = view(b.w.data(), DType::u8, {144});
  EXPECT_TRUE(IsError(qg::gemm_q4_0_q8_1(flat, a, out, -1, -1, -1), StatusCode::invalid_argument,
                      {fn, "weight_q", "[144]"}));
  EXPECT_TRUE(b.c_untouched());
}

TEST_F(GemmValidation, BlockCountMismatch) {
  qg::TensorView a3 = view(b.a.data(), DType::u8, {3, 3, 36});
  EXPECT_TRUE(IsError(qg::gemm_q4_0_q8_1(w, a3, out, -1, -1, -1), StatusCode::invalid_argument,
                      {fn, "K=64", "K=96"}));
  EXPECT_TRUE(b.c_untouched());
}

TEST_F(GemmValidation, GivenMNKInconsistent) {
  EXPECT_TRUE(IsError(qg::gemm_q4_0_q8_1(w, a, out, 5, -1, -1), StatusCode::invalid_argument, {fn, "M=5", "M=4"}));
  EXPECT_TRUE(IsError(qg::gemm_q4_0_q8_1(w, a, out, -1, 2, -1), StatusCode::invalid_argument, {fn, "N=2", "N=3"}));
  EXPECT_TRUE(IsError(qg::gemm_q4_0_q8_1(w, a, out, -1, -1, 96), StatusCode::invalid_argument, {fn, "K=96", "K=64"}));
  std::vector<int64_t> shape;
  EXPECT_TRUE(IsError(qg::gemm_q4_0_q8_1_output_shape(w, a, 4, 3, 32, &shape), StatusCode::invalid_argument,
                      {fn, "K=32"}));
  EXPECT_TRUE(b.c_untouched());
}

TEST_F(GemmValidation, OutWrongShapeDeviceOrReadOnly) {
  qg::TensorView o = view(b.c.data(), DType::f32, {3, 4});
  EXPECT_TRUE(IsError(qg::gemm_q4_0_q8_1(w, a, o, -1, -1, -1), StatusCode::invalid_argument, {fn, "[3, 4]", "[4, 3]"}));
  o = view(b.c.data(), DType::f32, {12});
  EXPECT_TRUE(IsError(qg::gemm_q4_0_q8_1(w, a, o, -1, -1, -1), StatusCode::invalid_argument, {fn, "[12]", "[4, 3]"}));
  o = view(b.c.data(), DType::f32, {4, 3}, qg::Device::cuda(0));
  EXPECT_TRUE(IsError(qg::gemm_q4_0_q8_1(w, a, o, -1, -1, -1), StatusCode::invalid_argument, {fn, "cuda:0", "cpu"}));
  o = out;
  o.writable = false;
  EXPECT_TRUE(IsError(qg::gemm_q4_0_q8_1(w, a, o, -1, -1, -1), StatusCode::invalid_argument, {fn, "writable"}));
  o = out;
  o.strides[0] = 4;  // padded rows: out must be C-contiguous
  EXPECT_TRUE(IsError(qg::gemm_q4_0_q8_1(w, a, o, -1, -1, -1), StatusCode::invalid_argument, {fn, "contiguous"}));
  EXPECT_TRUE(b.c_untouched());
}

TEST_F(GemmValidation, OutAliasingAnInput) {
  // out [4, 3] f32 = 48 bytes placed inside W's bytes
  qg::TensorView o = view(b.w.data() + 16, DType::f32, {4, 3});
  const std::vector<uint8_t> w0 = b.w;
  EXPECT_TRUE(IsError(qg::gemm_q4_0_q8_1(w, a, o, -1, -1, -1), StatusCode::invalid_argument, {fn, "overlaps"}));
  o = view(b.a.data() + 200, DType::f32, {4, 3});  // A spans 216 bytes
  EXPECT_TRUE(IsError(qg::gemm_q4_0_q8_1(w, a, o, -1, -1, -1), StatusCode::invalid_argument, {fn, "overlaps"}));
  EXPECT_EQ(b.w, w0);
  // just past the end of W is fine
  std::vector<uint8_t> big(144 + 48 + 16, 0);
  qg::TensorView w2 = view(big.data(), DType::u8, {4, 2, 18});
  std::fill(b.a.begin(), b.a.end(), 0);
  qg::TensorView o2 = view(big.data() + 144, DType::f32, {4, 3});
  EXPECT_TRUE(qg::gemm_q4_0_q8_1(w2, a, o2, -1, -1, -1).ok());
}

TEST_F(GemmValidation, DevicesDiffer) {
  qg::TensorView ag = view(b.a.data(), DType::u8, {3, 2, 36}, qg::Device::cuda(0));
  EXPECT_TRUE(IsError(qg::gemm_q4_0_q8_1(w, ag, out, -1, -1, -1), StatusCode::invalid_argument,
                      {fn, "weight_q is on cpu", "activation_q is on cuda:0"}));
  qg::TensorView w1 = view(b.w.data(), DType::u8, {4, 2, 18}, qg::Device::cuda(1));
  EXPECT_TRUE(IsError(qg::gemm_q4_0_q8_1(w1, ag, out, -1, -1, -1), StatusCode::invalid_argument,
                      {fn, "cuda:1", "cuda:0"}));
  EXPECT_TRUE(b.c_untouched());
}

TEST_F(GemmValidation, CudaViewsWithoutCudaBuild) {
  if (qg::build_info().cuda_built) GTEST_SKIP() << "this build has the CUDA backend";
  const auto g = qg::Device::cuda(0);
  // never dereferenced: the call must stop before any backend touches them
  qg::TensorView wg = view(b.w.data(), DType::u8, {4, 2, 18}, g);
  qg::TensorView ag = view(b.a.data(), DType::u8, {3, 2, 36}, g);
  qg::TensorView og = view(b.c.data(), DType::f32, {4, 3}, g);
  EXPECT_TRUE(IsError(qg::gemm_q4_0_q8_1(wg, ag, og, -1, -1, -1), StatusCode::backend_unavailable, {fn, "cuda:0", "CUDA"}));
  qg::TensorView xg = view(b.x.data(), DType::f32, {2, 64}, g);
  qg::TensorView qg_ = view(b.q.data(), DType::u8, {2, 2, 18}, g);
  EXPECT_TRUE(IsError(qg::quantize(Format::q4_0, xg, qg_), StatusCode::backend_unavailable, {"qg.quantize_q4_0", "cuda:0"}));
  qg::TensorView yg = view(b.c.data(), DType::f32, {2, 64}, g);
  EXPECT_TRUE(IsError(qg::dequantize(Format::q4_0, qg_, -1, yg), StatusCode::backend_unavailable,
                      {"qg.dequantize_q4_0", "cuda:0"}));
  // raw pointers too
  qg::GemmArgs ga;
  ga.w = b.w.data();
  ga.a = b.a.data();
  ga.c = b.c.data();
  ga.m = 4;
  ga.n = 3;
  ga.k = 64;
  ga.ldw = 36;
  ga.lda = 72;
  ga.ldc = 3;
  ga.device = g;
  EXPECT_TRUE(IsError(qg::gemm_q4_0_q8_1(ga), StatusCode::backend_unavailable, {fn, "cuda:0"}));
  qg::Explanation e;
  EXPECT_TRUE(IsError(qg::explain_gemm_q4_0_q8_1(ga, &e), StatusCode::backend_unavailable, {fn}));
  EXPECT_TRUE(IsError(qg::device_alloc(g, 16, nullptr), StatusCode::backend_unavailable, {"qg.device_alloc"}));
  qg::Stream st = nullptr;
  EXPECT_TRUE(IsError(qg::internal_stream(g, &st), StatusCode::backend_unavailable, {"qg.internal_stream"}));
  EXPECT_TRUE(b.c_untouched());
  EXPECT_TRUE(b.q_untouched());
}

TEST_F(GemmValidation, NonFlattenableBatchStrides) {
  // W [2, 3, 2, 18] taken as [:, :3] of a [2, 4, 2, 18] array: dim 0 jumps 4 rows, dim 1 one row
  qg::TensorView ws = view(b.w.data(), DType::u8, {2, 3, 2, 18});
  ws.strides[0] = 4 * 36;
  ws.strides[1] = 36;
  qg::TensorView o = view(b.c.data(), DType::f32, {6, 3});
  EXPECT_TRUE(IsError(qg::gemm_q4_0_q8_1(ws, a, o, -1, -1, -1), StatusCode::invalid_argument,
                      {fn, "weight_q", "flattened", "[2, 3, 2, 18]"}));
  // not contiguous inside a row of blocks
  qg::TensorView wt = view(b.w.data(), DType::u8, {4, 2, 18});
  wt.strides[1] = 36;
  wt.strides[0] = 18;
  EXPECT_TRUE(IsError(qg::gemm_q4_0_q8_1(wt, a, out, -1, -1, -1), StatusCode::invalid_argument,
                      {fn, "weight_q", "contiguous"}));
  // negative row stride
  qg::TensorView an = view(b.a.data() + 2 * 72, DType::u8, {3, 2, 36});
  an.strides[0] = -72;
  EXPECT_TRUE(IsError(qg::gemm_q4_0_q8_1(w, an, out, -1, -1, -1), StatusCode::invalid_argument,
                      {fn, "activation_q", "negative"}));
  EXPECT_TRUE(b.c_untouched());
}

TEST_F(GemmValidation, ZeroSizeDims) {
  // M = 0: nothing written
  qg::TensorView w0 = view(nullptr, DType::u8, {0, 2, 18});
  qg::TensorView o0 = view(b.c.data(), DType::f32, {0, 3});
  EXPECT_TRUE(qg::gemm_q4_0_q8_1(w0, a, o0, -1, -1, -1).ok());
  // N = 0: nothing written
  qg::TensorView a0 = view(nullptr, DType::u8, {0, 2, 36});
  qg::TensorView o1 = view(b.c.data(), DType::f32, {4, 0});
  EXPECT_TRUE(qg::gemm_q4_0_q8_1(w, a0, o1, -1, -1, -1).ok());
  // batch dim of size 0 in a 4-d weight
  qg::TensorView w4 = view(nullptr, DType::u8, {3, 0, 2, 18});
  EXPECT_TRUE(qg::gemm_q4_0_q8_1(w4, a, o0, -1, -1, -1).ok());
  // null output pointer for an empty output
  qg::TensorView onull = view(nullptr, DType::f32, {0, 3});
  EXPECT_TRUE(qg::gemm_q4_0_q8_1(w0, a, onull, -1, -1, -1).ok());
  EXPECT_TRUE(b.c_untouched());
  // K = 0 (no blocks, null data): an empty sum, the [4, 3] output is all zeros
  qg::TensorView wk = view(nullptr, DType::u8, {4, 0, 18});
  qg::TensorView ak = view(nullptr, DType::u8, {3, 0, 36});
  const qg::Status s = qg::gemm_q4_0_q8_1(wk, ak, out, -1, -1, 0);
  ASSERT_TRUE(s.ok()) << s.message();
  for (int i = 0; i < 12; ++i) EXPECT_EQ(b.c[i], 0.0f) << i;
  for (size_t i = 12; i < b.c.size(); ++i) ASSERT_TRUE(qgtest::is_poison(b.c[i])) << i;
}

// ================================================================== gemm, raw pointers
class GemmRawValidation : public ::testing::Test {
 protected:
  Buffers b;
  qg::GemmArgs g = [this] {
    qg::GemmArgs x;
    x.w = b.w.data();
    x.a = b.a.data();
    x.c = b.c.data();
    x.m = 4;
    x.n = 3;
    x.k = 64;
    x.ldw = 36;
    x.lda = 72;
    x.ldc = 3;
    x.device = kCpu;
    return x;
  }();
  const std::string fn = "qg.gemm_q4_0_q8_1";
};

TEST_F(GemmRawValidation, BadSizesAndStrides) {
  qg::GemmArgs x = g;
  x.k = 100;
  EXPECT_TRUE(IsError(qg::gemm_q4_0_q8_1(x), StatusCode::invalid_argument, {fn, "K=100", "32"}));
  x = g;
  x.m = -1;
  EXPECT_TRUE(IsError(qg::gemm_q4_0_q8_1(x), StatusCode::invalid_argument, {fn, "M=-1"}));
  x = g;
  x.ldc = 2;
  EXPECT_TRUE(IsError(qg::gemm_q4_0_q8_1(x), StatusCode::invalid_argument, {fn, "ldc=2", "N=3"}));
  x = g;
  x.ldw = 35;
  EXPECT_TRUE(IsError(qg::gemm_q4_0_q8_1(x), StatusCode::invalid_argument, {fn, "ldw=35", "36"}));
  x = g;
  x.lda = 71;
  EXPECT_TRUE(IsError(qg::gemm_q4_0_q8_1(x), StatusCode::invalid_argument, {fn, "lda=71", "72"}));
  x = g;
  x.c = nullptr;
  EXPECT_TRUE(IsError(qg::gemm_q4_0_q8_1(x), StatusCode::invalid_argument, {fn, "null"}));
  x = g;
  x.w = nullptr;
  EXPECT_TRUE(IsError(qg::gemm_q4_0_q8_1(x), StatusCode::invalid_argument, {fn, "null"}));
  x = g;
  x.device = qg::Device::cuda(-1);
  EXPECT_TRUE(IsError(qg::gemm_q4_0_q8_1(x), StatusCode::invalid_argument, {fn, "-1"}));
  // the convenience overload validates K too
  EXPECT_TRUE(IsError(qg::gemm_q4_0_q8_1(b.w.data(), b.a.data(), b.c.data(), 4, 3, 40, kCpu),
                      StatusCode::invalid_argument, {fn, "K=40"}));
  EXPECT_TRUE(b.c_untouched());
}

TEST_F(GemmRawValidation, OutputOverlapsInput) {
  qg::GemmArgs x = g;
  x.c = reinterpret_cast<float*>(b.w.data() + 100);  // W spans bytes [0, 3*36+36) = [0, 144)
  EXPECT_TRUE(IsError(qg::gemm_q4_0_q8_1(x), StatusCode::invalid_argument, {fn, "overlaps"}));
  x = g;
  x.c = reinterpret_cast<float*>(b.a.data());
  EXPECT_TRUE(IsError(qg::gemm_q4_0_q8_1(x), StatusCode::invalid_argument, {fn, "overlaps"}));
  EXPECT_TRUE(b.c_untouched());
}

TEST_F(GemmRawValidation, ZeroSizeWritesNothing) {
  qg::GemmArgs x = g;
  x.m = 0;
  x.w = nullptr;
  EXPECT_TRUE(qg::gemm_q4_0_q8_1(x).ok());
  x = g;
  x.n = 0;
  x.a = nullptr;
  x.ldc = 0;
  EXPECT_TRUE(qg::gemm_q4_0_q8_1(x).ok());
  x = g;
  x.m = 0;
  x.c = nullptr;
  EXPECT_TRUE(qg::gemm_q4_0_q8_1(x).ok());
  EXPECT_TRUE(b.c_untouched());
  x = g;
  x.k = 0;
  x.w = x.a = nullptr;
  x.ldw = x.lda = 0;
  ASSERT_TRUE(qg::gemm_q4_0_q8_1(x).ok());
  for (int i = 0; i < 12; ++i) EXPECT_EQ(b.c[i], 0.0f);
  EXPECT_TRUE(qgtest::is_poison(b.c[12]));
}

// ================================================================== explain
TEST(Explain, GemmOnCpuNamesTheChosenKernelAndBothCandidates) {
  Buffers b;
  qg::GemmArgs g;
  g.w = b.w.data();
  g.a = b.a.data();
  g.m = 4;
  g.n = 3;
  g.k = 64;
  g.ldw = 36;
  g.lda = 72;
  g.ldc = 3;  // no output needed to explain
  qg::Explanation e;
  const qg::Status s = qg::explain_gemm_q4_0_q8_1(g, &e);
  ASSERT_TRUE(s.ok()) << s.message();
  const auto feats = qg::build_info().cpu_features;
  const bool avx2 = std::find(feats.begin(), feats.end(), "avx2") != feats.end() &&
                    std::find(feats.begin(), feats.end(), "fma") != feats.end();
  std::cout << "[  explain ] chosen " << e.chosen << "\n";
  for (const auto& c : e.candidates) std::cout << "[  explain ]   " << c << "\n";
  EXPECT_EQ(e.op, "qg.gemm_q4_0_q8_1");
  EXPECT_EQ(e.chosen, avx2 ? "cpu_avx2" : "cpu_scalar");
  ASSERT_EQ(e.candidates.size(), 2u);
  if (avx2) {
    EXPECT_EQ(e.candidates[0], "cpu_avx2: chosen");
    EXPECT_EQ(e.candidates[1].rfind("cpu_scalar: not tried", 0), 0u) << e.candidates[1];
  } else {
    EXPECT_EQ(e.candidates[0].rfind("cpu_avx2: skipped (", 0), 0u) << e.candidates[0];
    EXPECT_EQ(e.candidates[1], "cpu_scalar: chosen");
  }
  EXPECT_TRUE(b.c_untouched());

  // from views, before any output exists
  qg::Explanation ev;
  ASSERT_TRUE(qg::explain_gemm_q4_0_q8_1(view(b.w.data(), DType::u8, {4, 2, 18}),
                                         view(b.a.data(), DType::u8, {3, 2, 36}), &ev)
                  .ok());
  EXPECT_EQ(ev.chosen, e.chosen);
  EXPECT_EQ(ev.candidates, e.candidates);

  // explain runs the call's checks and returns its error
  g.k = 100;
  EXPECT_TRUE(IsError(qg::explain_gemm_q4_0_q8_1(g, &e), StatusCode::invalid_argument, {"qg.gemm_q4_0_q8_1", "K=100"}));
  EXPECT_TRUE(IsError(qg::explain_gemm_q4_0_q8_1(view(b.w.data(), DType::u8, {4, 2, 18}),
                                                 view(b.a.data(), DType::u8, {3, 3, 36}), &ev),
                      StatusCode::invalid_argument, {"K=64", "K=96"}));
}

TEST(Explain, QuantizeAndDequantizeOnCpu) {
  Buffers b;
  qg::Explanation e;
  ASSERT_TRUE(qg::explain_quantize(Format::q8_1, view(b.x.data(), DType::f32, {2, 64}), &e).ok());
  EXPECT_EQ(e.op, "qg.quantize_q8_1");
  EXPECT_EQ(e.chosen, "cpu_reference");
  ASSERT_EQ(e.candidates.size(), 1u);
  EXPECT_EQ(e.candidates[0], "cpu_reference: chosen");
  ASSERT_TRUE(qg::explain_dequantize(Format::q4_0, view(b.q.data(), DType::u8, {2, 2, 18}), &e).ok());
  EXPECT_EQ(e.op, "qg.dequantize_q4_0");
  EXPECT_EQ(e.chosen, "cpu_reference");
  EXPECT_TRUE(IsError(qg::explain_quantize(Format::q4_0, view(b.x.data(), DType::f32, {2, 50}), &e),
                      StatusCode::invalid_argument, {"qg.quantize_q4_0", "K=50"}));
  EXPECT_TRUE(b.q_untouched());
}

// ================================================================== quantize
TEST(QuantizeValidation, ViewErrors) {
  Buffers b;
  const qg::TensorView x = view(b.x.data(), DType::f32, {2, 64});
  const qg::TensorView out = view(b.q.data(), DType::u8, {2, 2, 18});
  const std::string fn = "qg.quantize_q4_0";
  EXPECT_TRUE(IsError(qg::quantize(Format::q4_0, view(b.x.data(), DType::f32, {2, 100}), out),
                      StatusCode::invalid_argument, {fn, "K=100", "32"}));
  EXPECT_TRUE(IsError(qg::quantize(Format::q8_1, view(b.x.data(), DType::f32, {2, 100}),
                                   view(b.q.data(), DType::u8, {2, 3, 36})),
                      StatusCode::invalid_argument, {"qg.quantize_q8_1", "K=100"}));
  EXPECT_TRUE(IsError(qg::quantize(Format::q4_0, view(b.x.data(), DType::f64, {2, 64}), out), StatusCode::type_error,
                      {fn, "float64"}));
  EXPECT_TRUE(IsError(qg::quantize(Format::q4_0, view(b.x.data(), DType::i32, {2, 64}), out), StatusCode::type_error,
                      {fn, "int32"}));
  EXPECT_TRUE(IsError(qg::quantize(Format::q4_0, view(b.x.data(), DType::f32, {}), out), StatusCode::invalid_argument,
                      {fn, "0-d"}));
  // out: wrong last dim (Q8_1 shape for a Q4_0 quantize), wrong dtype, device, read-only
  EXPECT_TRUE(IsError(qg::quantize(Format::q4_0, x, view(b.q.data(), DType::u8, {2, 2, 36})),
                      StatusCode::invalid_argument, {fn, "[2, 2, 36]", "[2, 2, 18]"}));
  EXPECT_TRUE(IsError(qg::quantize(Format::q4_0, x, view(b.q.data(), DType::i8, {2, 2, 18})), StatusCode::type_error,
                      {fn, "uint8", "int8"}));
  EXPECT_TRUE(IsError(qg::quantize(Format::q4_0, x, view(b.q.data(), DType::u8, {2, 2, 18}, qg::Device::cuda(0))),
                      StatusCode::invalid_argument, {fn, "cuda:0"}));
  qg::TensorView ro = out;
  ro.writable = false;
  EXPECT_TRUE(IsError(qg::quantize(Format::q4_0, x, ro), StatusCode::invalid_argument, {fn, "writable"}));
  // out aliasing x
  EXPECT_TRUE(IsError(qg::quantize(Format::q4_0, x, view(b.x.data() + 8, DType::u8, {2, 2, 18})),
                      StatusCode::invalid_argument, {fn, "overlaps"}));
  // x not contiguous along K
  qg::TensorView xs = x;
  xs.strides[1] = 2;
  EXPECT_TRUE(IsError(qg::quantize(Format::q4_0, xs, out), StatusCode::invalid_argument, {fn, "x", "contiguous"}));
  EXPECT_TRUE(b.q_untouched());
}

TEST(QuantizeValidation, RawErrors) {
  Buffers b;
  qg::QuantizeArgs a;
  a.x = b.x.data();
  a.rows = 2;
  a.k = 64;
  a.x_row_stride = 64;
  a.y = b.q.data();
  a.y_row_stride = 36;
  const std::string fn = "qg.quantize_q4_0";
  qg::QuantizeArgs x = a;
  x.k = 33;
  EXPECT_TRUE(IsError(qg::quantize(Format::q4_0, x), StatusCode::invalid_argument, {fn, "K=33"}));
  x = a;
  x.x_dtype = DType::u8;
  EXPECT_TRUE(IsError(qg::quantize(Format::q4_0, x), StatusCode::type_error, {fn, "uint8"}));
  x = a;
  x.x_row_stride = 40;
  EXPECT_TRUE(IsError(qg::quantize(Format::q4_0, x), StatusCode::invalid_argument, {fn, "40", "K=64"}));
  x = a;
  x.y_row_stride = 20;
  EXPECT_TRUE(IsError(qg::quantize(Format::q4_0, x), StatusCode::invalid_argument, {fn, "20", "36"}));
  x = a;
  x.y = reinterpret_cast<uint8_t*>(b.x.data()) + 100;
  EXPECT_TRUE(IsError(qg::quantize(Format::q4_0, x), StatusCode::invalid_argument, {fn, "overlaps"}));
  x = a;
  x.y = nullptr;
  EXPECT_TRUE(IsError(qg::quantize(Format::q4_0, x), StatusCode::invalid_argument, {fn, "null"}));
  x = a;
  x.rows = -3;
  EXPECT_TRUE(IsError(qg::quantize(Format::q4_0, x), StatusCode::invalid_argument, {fn, ">= 0"}));
  EXPECT_TRUE(b.q_untouched());
}

TEST(QuantizeValidation, ZeroSizeOkAndNothingWritten) {
  Buffers b;
  EXPECT_TRUE(qg::quantize(Format::q4_0, view(nullptr, DType::f32, {0, 64}), view(b.q.data(), DType::u8, {0, 2, 18}))
                  .ok());
  EXPECT_TRUE(qg::quantize(Format::q8_1, view(b.x.data(), DType::f32, {3, 0}), view(b.q.data(), DType::u8, {3, 0, 36}))
                  .ok());
  EXPECT_TRUE(qg::quantize(Format::q8_0, view(nullptr, DType::f16, {2, 0, 64}), view(nullptr, DType::u8, {2, 0, 2, 34}))
                  .ok());
  qg::QuantizeArgs a;
  a.rows = 0;
  a.k = 64;
  EXPECT_TRUE(qg::quantize(Format::q4_0, a).ok());
  a.rows = 5;
  a.k = 0;
  EXPECT_TRUE(qg::quantize(Format::q4_0, a).ok());
  EXPECT_TRUE(b.q_untouched());
}

// ================================================================== dequantize
TEST(DequantizeValidation, Errors) {
  Buffers b;
  const qg::TensorView xq = view(b.q.data(), DType::u8, {2, 2, 18});
  const qg::TensorView out = view(b.c.data(), DType::f32, {2, 64});
  const std::string fn = "qg.dequantize_q4_0";
  EXPECT_TRUE(IsError(qg::dequantize(Format::q4_0, xq, 100, out), StatusCode::invalid_argument, {fn, "K=100", "K=64"}));
  EXPECT_TRUE(IsError(qg::dequantize(Format::q4_0, view(b.q.data(), DType::f32, {2, 2, 18}), -1, out),
                      StatusCode::type_error, {fn, "xq", "uint8", "float32"}));
  EXPECT_TRUE(IsError(qg::dequantize(Format::q4_0, view(b.q.data(), DType::u8, {2, 2, 36}), -1, out),
                      StatusCode::invalid_argument, {fn, "xq.shape[-1]", "18", "36"}));
  EXPECT_TRUE(IsError(qg::dequantize(Format::q4_0, xq, -1, view(b.c.data(), DType::f32, {2, 96})),
                      StatusCode::invalid_argument, {fn, "[2, 96]", "[2, 64]"}));
  EXPECT_TRUE(IsError(qg::dequantize(Format::q4_0, xq, -1, view(b.c.data(), DType::f16, {2, 64})),
                      StatusCode::type_error, {fn, "float32", "float16"}));
  qg::TensorView ro = out;
  ro.writable = false;
  EXPECT_TRUE(IsError(qg::dequantize(Format::q4_0, xq, -1, ro), StatusCode::invalid_argument, {fn, "writable"}));
  EXPECT_TRUE(IsError(qg::dequantize(Format::q4_0, xq, -1, view(b.q.data() + 4, DType::f32, {2, 64})),
                      StatusCode::invalid_argument, {fn, "overlaps"}));
  EXPECT_TRUE(IsError(qg::dequantize(Format::q4_0, xq, -1, view(b.c.data(), DType::f32, {2, 64}, qg::Device::cuda(0))),
                      StatusCode::invalid_argument, {fn, "cuda:0"}));
  // raw
  qg::DequantizeArgs a;
  a.xq = b.q.data();
  a.rows = 2;
  a.k = 48;
  a.xq_row_stride = 36;
  a.y = b.c.data();
  a.y_row_stride = 64;
  EXPECT_TRUE(IsError(qg::dequantize(Format::q8_0, a), StatusCode::invalid_argument, {"qg.dequantize_q8_0", "K=48"}));
  a.k = 64;
  a.y_row_stride = 63;
  EXPECT_TRUE(IsError(qg::dequantize(Format::q4_0, a), StatusCode::invalid_argument, {fn, "63", "K=64"}));
  a.y_row_stride = 64;
  a.xq_row_stride = 30;
  EXPECT_TRUE(IsError(qg::dequantize(Format::q4_0, a), StatusCode::invalid_argument, {fn, "30", "36"}));
  EXPECT_TRUE(b.c_untouched());
}

TEST(DequantizeValidation, ZeroSizeOkAndNothingWritten) {
  Buffers b;
  EXPECT_TRUE(qg::dequantize(Format::q4_0, view(nullptr, DType::u8, {0, 2, 18}), -1, view(b.c.data(), DType::f32, {0, 64}))
                  .ok());
  EXPECT_TRUE(qg::dequantize(Format::q8_1, view(b.q.data(), DType::u8, {3, 0, 36}), 0, view(b.c.data(), DType::f32, {3, 0}))
                  .ok());
  EXPECT_TRUE(b.c_untouched());
}

// ================================================================== view rank
// A TensorView holds at most kMaxDims dims. A larger ndim (a 9-d DLPack array
// copied in without a check) must be rejected before shape[ndim - 1] is read;
// a negative one too.
TEST(ViewValidation, RankAboveMaxDimsRejected) {
  Buffers b;
  std::vector<int64_t> shape;
  qg::TensorView x = view(b.x.data(), DType::f32, {1, 1, 1, 1, 1, 1, 1, 64});
  x.ndim = qg::kMaxDims + 1;
  EXPECT_TRUE(IsError(qg::quantize_output_shape(Format::q4_0, x, &shape), StatusCode::invalid_argument,
                      {"qg.quantize_q4_0", "9", "8"}));
  qg::TensorView xq = view(b.q.data(), DType::u8, {1, 1, 1, 1, 1, 1, 2, 18});
  xq.ndim = qg::kMaxDims + 1;
  EXPECT_TRUE(IsError(qg::dequantize_output_shape(Format::q4_0, xq, -1, &shape), StatusCode::invalid_argument,
                      {"qg.dequantize_q4_0", "9", "8"}));
  qg::TensorView w = view(b.w.data(), DType::u8, {1, 1, 1, 1, 1, 1, 2, 18});
  w.ndim = qg::kMaxDims + 1;
  const qg::TensorView a = view(b.a.data(), DType::u8, {3, 2, 36});
  EXPECT_TRUE(IsError(qg::gemm_q4_0_q8_1_output_shape(w, a, -1, -1, -1, &shape), StatusCode::invalid_argument,
                      {"qg.gemm_q4_0_q8_1", "9", "8"}));
  x.ndim = -1;
  EXPECT_TRUE(IsError(qg::quantize_output_shape(Format::q4_0, x, &shape), StatusCode::invalid_argument,
                      {"qg.quantize_q4_0", "-1"}));
  EXPECT_TRUE(b.q_untouched());
}

// The same for out=: its rank is checked before its shape is read (a negative
// ndim must not throw out of a Status API, 9 must not read past shape[]).
TEST(ViewValidation, OutRankOutOfRangeRejected) {
  Buffers b;
  const qg::TensorView w = view(b.w.data(), DType::u8, {4, 2, 18});
  const qg::TensorView a = view(b.a.data(), DType::u8, {3, 2, 36});
  const qg::TensorView x = view(b.x.data(), DType::f32, {2, 64});
  const qg::TensorView xq = view(b.q.data(), DType::u8, {2, 2, 18});
  for (int ndim : {-1, qg::kMaxDims + 1}) {
    SCOPED_TRACE("out.ndim=" + std::to_string(ndim));
    qg::TensorView o = view(b.c.data(), DType::f32, {1, 1, 1, 1, 1, 1, 4, 3});
    o.ndim = ndim;
    EXPECT_TRUE(IsError(qg::gemm_q4_0_q8_1(w, a, o, -1, -1, -1), StatusCode::invalid_argument,
                        {"qg.gemm_q4_0_q8_1", "out", std::to_string(ndim)}));
    qg::TensorView oq = view(b.q.data() + 1024, DType::u8, {1, 1, 1, 1, 1, 2, 2, 18});
    oq.ndim = ndim;
    EXPECT_TRUE(IsError(qg::quantize(Format::q4_0, x, oq), StatusCode::invalid_argument,
                        {"qg.quantize_q4_0", "out", std::to_string(ndim)}));
    qg::TensorView od = view(b.c.data(), DType::f32, {1, 1, 1, 1, 1, 1, 2, 64});
    od.ndim = ndim;
    EXPECT_TRUE(IsError(qg::dequantize(Format::q4_0, xq, -1, od), StatusCode::invalid_argument,
                        {"qg.dequantize_q4_0", "out", std::to_string(ndim)}));
  }
  EXPECT_TRUE(b.c_untouched());
}

}  // namespace
