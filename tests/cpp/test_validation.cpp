// SPDX-License-Identifier: MIT
// test_validation.cpp: every bad input gets the right StatusCode and a message
// that names the function and the offending number (reliability.md §8), both
// through the view API (what Python calls) and the raw-pointer API; zero-size
// problems succeed without writing; explain() names the CPU kernel. Also the
// epilogue's arguments, and the view defects: negative shape entries,
// broadcast (stride-0) rows, and a quantize input whose result would exceed
// kMaxDims.
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

// ... and that does not contain `absent`.
::testing::AssertionResult Lacks(const qg::Status& s, const std::string& absent) {
  if (s.message().find(absent) != std::string::npos)
    return ::testing::AssertionFailure() << "message \"" << s.message() << "\" mentions \"" << absent << "\"";
  return ::testing::AssertionSuccess();
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

// The view calls the Python layer makes: gemm_q4_0_q8_1 names its arrays weight_q and activation_q.
qg::GemmViews gemm_views(const qg::TensorView& w, const qg::TensorView& a, int64_t m = -1, int64_t n = -1,
                         int64_t k = -1) {
  qg::GemmViews v;
  v.a_format = Format::q4_0;
  v.b_format = Format::q8_1;
  v.a = w;
  v.b = a;
  v.m = m;
  v.n = n;
  v.k = k;
  v.fn = "qg.gemm_q4_0_q8_1";
  v.a_name = "weight_q";
  v.b_name = "activation_q";
  return v;
}
qg::Status gemm_v(const qg::TensorView& w, const qg::TensorView& a, const qg::TensorView& out, int64_t m, int64_t n,
                  int64_t k) {
  return qg::gemm(gemm_views(w, a, m, n, k), out);
}
qg::QuantizeViews quantize_views(Format f, const qg::TensorView& x) {
  return qg::QuantizeViews{f, x, qg::Q8_1Convention::reference, nullptr};
}
qg::Status quantize_v(Format f, const qg::TensorView& x, const qg::TensorView& out) {
  return qg::quantize(quantize_views(f, x), out);
}
qg::Status dequantize_v(Format f, const qg::TensorView& xq, int64_t k, const qg::TensorView& out) {
  return qg::dequantize(qg::DequantizeViews{f, xq, k, nullptr}, out);
}
template <class Views>
qg::Status spec_of(const Views& v) {
  qg::ResultSpec spec;
  return qg::result_spec(v, &spec);
}

// GemmArgs the way gemm_q4_0_q8_1 fills them: W (Q4_0) is a, A (Q8_1) is b.
qg::GemmArgs gemm_args(const void* w, const void* a, float* c, int64_t m, int64_t n, int64_t k, int64_t ldw,
                       int64_t lda, int64_t ldc, qg::Device device = kCpu) {
  qg::GemmArgs g;
  g.a = {w, Format::q4_0, m, k, ldw, {}, {}};
  g.b = {a, Format::q8_1, n, k, lda, {}, {}};
  g.c = c;
  g.ldc = ldc;
  g.device = device;
  g.fn = "qg.gemm_q4_0_q8_1";
  return g;
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
  const qg::Status s = gemm_v(w, a, out, 4, 3, 64);
  ASSERT_TRUE(s.ok()) << s.message();
  for (int i = 0; i < 12; ++i) EXPECT_EQ(b.c[i], 0.0f);
  EXPECT_TRUE(qgtest::is_poison(b.c[12]));
}

TEST_F(GemmValidation, KNotMultipleOf32) {
  EXPECT_TRUE(IsError(gemm_v(w, a, out, -1, -1, 100), StatusCode::invalid_argument, {fn, "K=100", "32"}));
  EXPECT_TRUE(b.c_untouched());
}

TEST_F(GemmValidation, WrongDtypes) {
  qg::TensorView wf = view(b.x.data(), DType::f32, {4, 2, 18});
  EXPECT_TRUE(IsError(gemm_v(wf, a, out, -1, -1, -1), StatusCode::type_error, {fn, "weight_q", "uint8", "float32"}));
  qg::TensorView ai8 = view(b.a.data(), DType::i8, {3, 2, 36});
  EXPECT_TRUE(IsError(gemm_v(w, ai8, out, -1, -1, -1), StatusCode::type_error, {fn, "activation_q", "uint8", "int8"}));
  qg::TensorView out16 = view(b.c.data(), DType::f16, {4, 3});
  EXPECT_TRUE(IsError(gemm_v(w, a, out16, -1, -1, -1), StatusCode::type_error, {fn, "out", "float32", "float16"}));
  EXPECT_TRUE(b.c_untouched());
}

TEST_F(GemmValidation, PackedLastDimWrong) {
  // a Q8_1 array (36 bytes per block) passed as the weight
  qg::TensorView w36 = view(b.w.data(), DType::u8, {4, 2, 36});
  EXPECT_TRUE(IsError(gemm_v(w36, a, out, -1, -1, -1), StatusCode::invalid_argument,
                      {fn, "weight_q.shape[-1]", "18", "36"}));
  qg::TensorView a18 = view(b.a.data(), DType::u8, {3, 2, 18});
  EXPECT_TRUE(IsError(gemm_v(w, a18, out, -1, -1, -1), StatusCode::invalid_argument,
                      {fn, "activation_q.shape[-1]", "36", "18"}));
  // a flat byte array is not [..., blocks, bytes]
  qg::TensorView flat = view(b.w.data(), DType::u8, {144});
  EXPECT_TRUE(IsError(gemm_v(flat, a, out, -1, -1, -1), StatusCode::invalid_argument, {fn, "weight_q", "[144]"}));
  EXPECT_TRUE(b.c_untouched());
}

TEST_F(GemmValidation, BlockCountMismatch) {
  qg::TensorView a3 = view(b.a.data(), DType::u8, {3, 3, 36});
  EXPECT_TRUE(IsError(gemm_v(w, a3, out, -1, -1, -1), StatusCode::invalid_argument, {fn, "K=64", "K=96"}));
  EXPECT_TRUE(b.c_untouched());
}

TEST_F(GemmValidation, GivenMNKInconsistent) {
  EXPECT_TRUE(IsError(gemm_v(w, a, out, 5, -1, -1), StatusCode::invalid_argument, {fn, "M=5", "M=4"}));
  EXPECT_TRUE(IsError(gemm_v(w, a, out, -1, 2, -1), StatusCode::invalid_argument, {fn, "N=2", "N=3"}));
  EXPECT_TRUE(IsError(gemm_v(w, a, out, -1, -1, 96), StatusCode::invalid_argument, {fn, "K=96", "K=64"}));
  EXPECT_TRUE(IsError(spec_of(gemm_views(w, a, 4, 3, 32)), StatusCode::invalid_argument, {fn, "K=32"}));
  EXPECT_TRUE(b.c_untouched());
}

TEST_F(GemmValidation, OutWrongShapeDeviceOrReadOnly) {
  qg::TensorView o = view(b.c.data(), DType::f32, {3, 4});
  EXPECT_TRUE(IsError(gemm_v(w, a, o, -1, -1, -1), StatusCode::invalid_argument, {fn, "[3, 4]", "[4, 3]"}));
  o = view(b.c.data(), DType::f32, {12});
  EXPECT_TRUE(IsError(gemm_v(w, a, o, -1, -1, -1), StatusCode::invalid_argument, {fn, "[12]", "[4, 3]"}));
  o = view(b.c.data(), DType::f32, {4, 3}, qg::Device::cuda(0));
  EXPECT_TRUE(IsError(gemm_v(w, a, o, -1, -1, -1), StatusCode::invalid_argument, {fn, "cuda:0", "cpu"}));
  o = out;
  o.writable = false;
  EXPECT_TRUE(IsError(gemm_v(w, a, o, -1, -1, -1), StatusCode::invalid_argument, {fn, "writable"}));
  o = out;
  o.strides[0] = 4;  // padded rows: out must be C-contiguous
  EXPECT_TRUE(IsError(gemm_v(w, a, o, -1, -1, -1), StatusCode::invalid_argument, {fn, "contiguous"}));
  EXPECT_TRUE(b.c_untouched());
}

TEST_F(GemmValidation, OutAliasingAnInput) {
  // out [4, 3] f32 = 48 bytes placed inside W's bytes
  qg::TensorView o = view(b.w.data() + 16, DType::f32, {4, 3});
  const std::vector<uint8_t> w0 = b.w;
  EXPECT_TRUE(IsError(gemm_v(w, a, o, -1, -1, -1), StatusCode::invalid_argument, {fn, "overlaps"}));
  o = view(b.a.data() + 200, DType::f32, {4, 3});  // A spans 216 bytes
  EXPECT_TRUE(IsError(gemm_v(w, a, o, -1, -1, -1), StatusCode::invalid_argument, {fn, "overlaps"}));
  EXPECT_EQ(b.w, w0);
  // just past the end of W is fine
  std::vector<uint8_t> big(144 + 48 + 16, 0);
  qg::TensorView w2 = view(big.data(), DType::u8, {4, 2, 18});
  std::fill(b.a.begin(), b.a.end(), 0);
  qg::TensorView o2 = view(big.data() + 144, DType::f32, {4, 3});
  EXPECT_TRUE(gemm_v(w2, a, o2, -1, -1, -1).ok());
}

TEST_F(GemmValidation, DevicesDiffer) {
  qg::TensorView ag = view(b.a.data(), DType::u8, {3, 2, 36}, qg::Device::cuda(0));
  EXPECT_TRUE(IsError(gemm_v(w, ag, out, -1, -1, -1), StatusCode::invalid_argument,
                      {fn, "weight_q is on cpu", "activation_q is on cuda:0"}));
  qg::TensorView w1 = view(b.w.data(), DType::u8, {4, 2, 18}, qg::Device::cuda(1));
  EXPECT_TRUE(IsError(gemm_v(w1, ag, out, -1, -1, -1), StatusCode::invalid_argument, {fn, "cuda:1", "cuda:0"}));
  EXPECT_TRUE(b.c_untouched());
}

TEST_F(GemmValidation, CudaViewsWithoutCudaBuild) {
  if (qg::build_info().cuda_built) GTEST_SKIP() << "this build has the CUDA backend";
  const auto g = qg::Device::cuda(0);
  // never dereferenced: the call must stop before any backend touches them
  qg::TensorView wg = view(b.w.data(), DType::u8, {4, 2, 18}, g);
  qg::TensorView ag = view(b.a.data(), DType::u8, {3, 2, 36}, g);
  qg::TensorView og = view(b.c.data(), DType::f32, {4, 3}, g);
  EXPECT_TRUE(IsError(gemm_v(wg, ag, og, -1, -1, -1), StatusCode::backend_unavailable, {fn, "cuda:0", "CUDA"}));
  qg::TensorView xg = view(b.x.data(), DType::f32, {2, 64}, g);
  qg::TensorView qg_ = view(b.q.data(), DType::u8, {2, 2, 18}, g);
  EXPECT_TRUE(IsError(quantize_v(Format::q4_0, xg, qg_), StatusCode::backend_unavailable, {"qg.quantize_q4_0", "cuda:0"}));
  qg::TensorView yg = view(b.c.data(), DType::f32, {2, 64}, g);
  EXPECT_TRUE(IsError(dequantize_v(Format::q4_0, qg_, -1, yg), StatusCode::backend_unavailable,
                      {"qg.dequantize_q4_0", "cuda:0"}));
  // raw pointers too
  const qg::GemmArgs ga = gemm_args(b.w.data(), b.a.data(), b.c.data(), 4, 3, 64, 36, 72, 3, g);
  EXPECT_TRUE(IsError(qg::gemm(ga), StatusCode::backend_unavailable, {fn, "cuda:0"}));
  EXPECT_TRUE(IsError(qg::gemm_q4_0_q8_1(b.w.data(), b.a.data(), b.c.data(), 4, 3, 64, g),
                      StatusCode::backend_unavailable, {fn, "cuda:0"}));
  qg::Explanation e;
  EXPECT_TRUE(IsError(qg::explain(ga, &e), StatusCode::backend_unavailable, {fn}));
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
  EXPECT_TRUE(IsError(gemm_v(ws, a, o, -1, -1, -1), StatusCode::invalid_argument,
                      {fn, "weight_q", "flattened", "[2, 3, 2, 18]"}));
  // not contiguous inside a row of blocks
  qg::TensorView wt = view(b.w.data(), DType::u8, {4, 2, 18});
  wt.strides[1] = 36;
  wt.strides[0] = 18;
  EXPECT_TRUE(IsError(gemm_v(wt, a, out, -1, -1, -1), StatusCode::invalid_argument, {fn, "weight_q", "contiguous"}));
  // negative row stride
  qg::TensorView an = view(b.a.data() + 2 * 72, DType::u8, {3, 2, 36});
  an.strides[0] = -72;
  EXPECT_TRUE(IsError(gemm_v(w, an, out, -1, -1, -1), StatusCode::invalid_argument, {fn, "activation_q", "negative"}));
  EXPECT_TRUE(b.c_untouched());
}

// Defect 3: a broadcast weight (np.broadcast_to / expand: every row the same
// memory, row stride 0) is rejected by the view layer with what it is and the
// fix, not with a raw-pointer stride name the caller never passed.
TEST_F(GemmValidation, BroadcastRowsRejected) {
  qg::TensorView wb = view(b.w.data(), DType::u8, {4, 2, 18});
  wb.strides[0] = 0;
  qg::Status s = gemm_v(wb, a, out, -1, -1, -1);
  EXPECT_TRUE(IsError(s, StatusCode::invalid_argument, {fn, "weight_q", "share memory", "broadcast", "pass a contiguous copy"}));
  EXPECT_TRUE(Lacks(s, "ldw"));
  EXPECT_TRUE(Lacks(s, "row_stride"));
  qg::Explanation e;
  EXPECT_TRUE(IsError(qg::explain(gemm_views(wb, a), &e), StatusCode::invalid_argument, {"weight_q", "broadcast"}));
  // the activation likewise
  qg::TensorView ab = view(b.a.data(), DType::u8, {3, 2, 36});
  ab.strides[0] = 0;
  s = gemm_v(w, ab, out, -1, -1, -1);
  EXPECT_TRUE(IsError(s, StatusCode::invalid_argument, {fn, "activation_q", "share memory", "pass a contiguous copy"}));
  EXPECT_TRUE(Lacks(s, "lda"));
  // rows that overlap partly (stride 18 bytes between rows of 36)
  qg::TensorView wo = view(b.w.data(), DType::u8, {4, 2, 18});
  wo.strides[0] = 18;
  s = gemm_v(wo, a, out, -1, -1, -1);
  EXPECT_TRUE(IsError(s, StatusCode::invalid_argument, {fn, "weight_q", "share memory", "pass a contiguous copy"}));
  EXPECT_TRUE(Lacks(s, "ldw"));
  // a broadcast batch dimension ([2, 3] rows, the 2 copies sharing memory)
  qg::TensorView w4 = view(b.w.data(), DType::u8, {2, 3, 2, 18});
  w4.strides[0] = 0;
  s = gemm_v(w4, a, view(b.c.data(), DType::f32, {6, 3}), -1, -1, -1);
  EXPECT_TRUE(IsError(s, StatusCode::invalid_argument, {fn, "weight_q", "pass a contiguous copy"}));
  EXPECT_TRUE(Lacks(s, "ldw"));
  // a one-row view may have any row stride
  std::fill(b.w.begin(), b.w.end(), 0);
  std::fill(b.a.begin(), b.a.end(), 0);
  qg::TensorView w1 = view(b.w.data(), DType::u8, {1, 2, 18});
  w1.strides[0] = 0;
  EXPECT_TRUE(gemm_v(w1, a, view(b.c.data(), DType::f32, {1, 3}), -1, -1, -1).ok());
  for (size_t i = 3; i < b.c.size(); ++i) ASSERT_TRUE(qgtest::is_poison(b.c[i])) << i;
}

TEST_F(GemmValidation, ZeroSizeDims) {
  // M = 0: nothing written
  qg::TensorView w0 = view(nullptr, DType::u8, {0, 2, 18});
  qg::TensorView o0 = view(b.c.data(), DType::f32, {0, 3});
  EXPECT_TRUE(gemm_v(w0, a, o0, -1, -1, -1).ok());
  // N = 0: nothing written
  qg::TensorView a0 = view(nullptr, DType::u8, {0, 2, 36});
  qg::TensorView o1 = view(b.c.data(), DType::f32, {4, 0});
  EXPECT_TRUE(gemm_v(w, a0, o1, -1, -1, -1).ok());
  // batch dim of size 0 in a 4-d weight
  qg::TensorView w4 = view(nullptr, DType::u8, {3, 0, 2, 18});
  EXPECT_TRUE(gemm_v(w4, a, o0, -1, -1, -1).ok());
  // null output pointer for an empty output
  qg::TensorView onull = view(nullptr, DType::f32, {0, 3});
  EXPECT_TRUE(gemm_v(w0, a, onull, -1, -1, -1).ok());
  EXPECT_TRUE(b.c_untouched());
  // K = 0 (no blocks, null data): an empty sum, the [4, 3] output is all zeros
  qg::TensorView wk = view(nullptr, DType::u8, {4, 0, 18});
  qg::TensorView ak = view(nullptr, DType::u8, {3, 0, 36});
  const qg::Status s = gemm_v(wk, ak, out, -1, -1, 0);
  ASSERT_TRUE(s.ok()) << s.message();
  for (int i = 0; i < 12; ++i) EXPECT_EQ(b.c[i], 0.0f) << i;
  for (size_t i = 12; i < b.c.size(); ++i) ASSERT_TRUE(qgtest::is_poison(b.c[i])) << i;
}

// The epilogue's view arguments: 1-D, of the right length, dtype, device, contiguous.
TEST_F(GemmValidation, EpilogueViewArguments) {
  std::vector<float> vec(64, 1.0f);
  std::vector<uint16_t> half(64, 0x3C00);
  auto call = [&](const qg::TensorView* bias, const qg::TensorView* rs, const qg::TensorView* cs,
                  DType out_dtype = DType::f32, bool transpose = false) {
    qg::GemmViews v = gemm_views(w, a);
    v.bias = bias;
    v.row_scale = rs;
    v.col_scale = cs;
    v.out_dtype = out_dtype;
    v.transpose_out = transpose;
    return v;
  };
  qg::TensorView bias_short = view(vec.data(), DType::f32, {3});
  EXPECT_TRUE(IsError(qg::gemm(call(&bias_short, nullptr, nullptr), out), StatusCode::invalid_argument,
                      {fn, "bias", "[4]", "[3]"}));
  qg::TensorView bias_i8 = view(vec.data(), DType::i8, {4});
  EXPECT_TRUE(IsError(qg::gemm(call(&bias_i8, nullptr, nullptr), out), StatusCode::type_error, {fn, "bias", "int8"}));
  qg::TensorView bias_2d = view(vec.data(), DType::f32, {4, 1});
  EXPECT_TRUE(IsError(qg::gemm(call(&bias_2d, nullptr, nullptr), out), StatusCode::invalid_argument, {fn, "bias", "[4, 1]"}));
  qg::TensorView bias_strided = view(vec.data(), DType::f32, {4});
  bias_strided.strides[0] = 2;
  EXPECT_TRUE(IsError(qg::gemm(call(&bias_strided, nullptr, nullptr), out), StatusCode::invalid_argument,
                      {fn, "bias", "contiguous"}));
  qg::TensorView bias_gpu = view(vec.data(), DType::f32, {4}, qg::Device::cuda(0));
  EXPECT_TRUE(IsError(qg::gemm(call(&bias_gpu, nullptr, nullptr), out), StatusCode::invalid_argument,
                      {fn, "bias", "cuda:0"}));
  qg::TensorView rs_f16 = view(half.data(), DType::f16, {4});
  EXPECT_TRUE(IsError(qg::gemm(call(nullptr, &rs_f16, nullptr), out), StatusCode::type_error,
                      {fn, "row_scale", "float32", "float16"}));
  qg::TensorView cs_long = view(vec.data(), DType::f32, {4});  // N = 3
  EXPECT_TRUE(IsError(qg::gemm(call(nullptr, nullptr, &cs_long), out), StatusCode::invalid_argument,
                      {fn, "col_scale", "[3]", "[4]"}));
  EXPECT_TRUE(IsError(qg::gemm(call(nullptr, nullptr, nullptr, DType::u8), out), StatusCode::type_error,
                      {fn, "out_dtype", "uint8"}));
  // out must match out_dtype and, with transpose_out, the [N, M] shape
  EXPECT_TRUE(IsError(qg::gemm(call(nullptr, nullptr, nullptr, DType::bf16), out), StatusCode::type_error,
                      {fn, "out", "bfloat16", "float32"}));
  EXPECT_TRUE(IsError(qg::gemm(call(nullptr, nullptr, nullptr, DType::f32, true), out), StatusCode::invalid_argument,
                      {fn, "[4, 3]", "[3, 4]"}));
  qg::ResultSpec spec;
  ASSERT_TRUE(qg::result_spec(call(nullptr, nullptr, nullptr, DType::f16, true), &spec).ok());
  EXPECT_EQ(spec.ndim, 2);
  EXPECT_EQ(spec.shape[0], 3);
  EXPECT_EQ(spec.shape[1], 4);
  EXPECT_EQ(spec.dtype, DType::f16);
  // the output may not overlap the bias
  qg::TensorView bias_in_out = view(b.c.data() + 2, DType::f32, {4});
  EXPECT_TRUE(IsError(qg::gemm(call(&bias_in_out, nullptr, nullptr), out), StatusCode::invalid_argument,
                      {fn, "overlaps"}));
  EXPECT_TRUE(b.c_untouched());
}

// ================================================================== gemm, raw pointers
class GemmRawValidation : public ::testing::Test {
 protected:
  Buffers b;
  qg::GemmArgs g = gemm_args(b.w.data(), b.a.data(), b.c.data(), 4, 3, 64, 36, 72, 3);
  const std::string fn = "qg.gemm_q4_0_q8_1";
};

TEST_F(GemmRawValidation, BadSizesAndStrides) {
  qg::GemmArgs x = g;
  x.a.k = x.b.k = 100;
  EXPECT_TRUE(IsError(qg::gemm(x), StatusCode::invalid_argument, {fn, "K=100", "32"}));
  x = g;
  x.a.rows = -1;  // M
  EXPECT_TRUE(IsError(qg::gemm(x), StatusCode::invalid_argument, {fn, "rows=-1", ">= 0"}));
  x = g;
  x.b.rows = -2;  // N
  EXPECT_TRUE(IsError(qg::gemm(x), StatusCode::invalid_argument, {fn, "rows=-2"}));
  x = g;
  x.ldc = 2;
  EXPECT_TRUE(IsError(qg::gemm(x), StatusCode::invalid_argument, {fn, "ldc=2", "N=3"}));
  x = g;
  x.a.row_stride = 35;  // ldw
  EXPECT_TRUE(IsError(qg::gemm(x), StatusCode::invalid_argument, {fn, "a row stride 35", "36"}));
  x = g;
  x.b.row_stride = 71;  // lda
  EXPECT_TRUE(IsError(qg::gemm(x), StatusCode::invalid_argument, {fn, "b row stride 71", "72"}));
  x = g;
  x.c = nullptr;
  EXPECT_TRUE(IsError(qg::gemm(x), StatusCode::invalid_argument, {fn, "null"}));
  x = g;
  x.a.data = nullptr;
  EXPECT_TRUE(IsError(qg::gemm(x), StatusCode::invalid_argument, {fn, "null"}));
  x = g;
  x.device = qg::Device::cuda(-1);
  EXPECT_TRUE(IsError(qg::gemm(x), StatusCode::invalid_argument, {fn, "-1"}));
  // the two operands must run along one K
  x = g;
  x.b.k = 96;
  EXPECT_TRUE(IsError(qg::gemm(x), StatusCode::invalid_argument, {fn, "K=64", "K=96"}));
  // the convenience overload validates K too
  EXPECT_TRUE(IsError(qg::gemm_q4_0_q8_1(b.w.data(), b.a.data(), b.c.data(), 4, 3, 40, kCpu),
                      StatusCode::invalid_argument, {fn, "K=40"}));
  // without fn, messages start with qg.gemm
  x = g;
  x.fn = nullptr;
  x.ldc = 2;
  EXPECT_TRUE(IsError(qg::gemm(x), StatusCode::invalid_argument, {"qg.gemm: ", "ldc=2"}));
  EXPECT_TRUE(b.c_untouched());
}

TEST_F(GemmRawValidation, EpilogueAndOutputArguments) {
  std::vector<float> bias(4, 1.0f);
  qg::GemmArgs x = g;
  x.c_dtype = DType::i8;
  EXPECT_TRUE(IsError(qg::gemm(x), StatusCode::type_error, {fn, "output dtype", "int8"}));
  x = g;
  x.epilogue.bias = bias.data();
  x.epilogue.bias_dtype = DType::f64;
  EXPECT_TRUE(IsError(qg::gemm(x), StatusCode::type_error, {fn, "bias", "float64"}));
  x = g;
  x.ldc_n = 0;  // every column on one element
  EXPECT_TRUE(IsError(qg::gemm(x), StatusCode::invalid_argument, {fn, "ldc_n=0", "overlap"}));
  x = g;
  x.ldc = 1;
  x.ldc_n = 3;  // transposed C needs ldc_n >= M = 4
  EXPECT_TRUE(IsError(qg::gemm(x), StatusCode::invalid_argument, {fn, "ldc=1", "ldc_n=3"}));
  x = g;
  x.epilogue.bias = b.c.data() + 5;  // C spans 12 floats
  EXPECT_TRUE(IsError(qg::gemm(x), StatusCode::invalid_argument, {fn, "overlaps"}));
  x = g;
  x.epilogue.row_scale = b.c.data() + 10;
  EXPECT_TRUE(IsError(qg::gemm(x), StatusCode::invalid_argument, {fn, "overlaps"}));
  x = g;
  x.epilogue.col_scale = b.c.data();
  EXPECT_TRUE(IsError(qg::gemm(x), StatusCode::invalid_argument, {fn, "overlaps"}));
  // Q4_0 and Q8_1 keep their scales in their blocks: outside scales are refused
  x = g;
  x.a.scales.data = bias.data();
  x.a.scales.granularity = qg::Granularity::row;
  EXPECT_TRUE(IsError(qg::gemm(x), StatusCode::invalid_argument, {fn, "q4_0", "scales"}));
  x = g;
  x.b.zero_points.data = bias.data();
  x.b.zero_points.granularity = qg::Granularity::row;
  EXPECT_TRUE(IsError(qg::gemm(x), StatusCode::invalid_argument, {fn, "q8_1", "zero points"}));
  // no kernel for a format pair
  x = g;
  x.a.format = Format::q8_0;
  x.a.row_stride = 68;
  EXPECT_TRUE(IsError(qg::gemm(x), StatusCode::unsupported, {fn, "q8_0 x q8_1"}));
  EXPECT_TRUE(b.c_untouched());
  // and a valid transposed, bfloat16 C: ldc = 1, ldc_n = M
  std::fill(b.w.begin(), b.w.end(), 0);
  std::fill(b.a.begin(), b.a.end(), 0);
  std::vector<uint16_t> c16(12 + 4, 0xFFFF);
  x = g;
  x.c = c16.data();
  x.c_dtype = DType::bf16;
  x.ldc = 1;
  x.ldc_n = 4;
  x.epilogue.bias = bias.data();
  const qg::Status s = qg::gemm(x);
  ASSERT_TRUE(s.ok()) << s.message();
  for (int i = 0; i < 12; ++i) EXPECT_EQ(c16[i], 0x3F80) << i;  // 0 + bias 1.0
  for (int i = 12; i < 16; ++i) EXPECT_EQ(c16[i], 0xFFFF) << i;
}

TEST_F(GemmRawValidation, OutputOverlapsInput) {
  qg::GemmArgs x = g;
  x.c = reinterpret_cast<float*>(b.w.data() + 100);  // W spans bytes [0, 3*36+36) = [0, 144)
  EXPECT_TRUE(IsError(qg::gemm(x), StatusCode::invalid_argument, {fn, "overlaps"}));
  x = g;
  x.c = reinterpret_cast<float*>(b.a.data());
  EXPECT_TRUE(IsError(qg::gemm(x), StatusCode::invalid_argument, {fn, "overlaps"}));
  EXPECT_TRUE(b.c_untouched());
}

TEST_F(GemmRawValidation, ZeroSizeWritesNothing) {
  qg::GemmArgs x = g;
  x.a.rows = 0;
  x.a.data = nullptr;
  EXPECT_TRUE(qg::gemm(x).ok());
  x = g;
  x.b.rows = 0;
  x.b.data = nullptr;
  x.ldc = 0;
  EXPECT_TRUE(qg::gemm(x).ok());
  x = g;
  x.a.rows = 0;
  x.c = nullptr;
  EXPECT_TRUE(qg::gemm(x).ok());
  EXPECT_TRUE(b.c_untouched());
  x = g;
  x.a.k = x.b.k = 0;
  x.a.data = x.b.data = nullptr;
  x.a.row_stride = x.b.row_stride = 0;
  ASSERT_TRUE(qg::gemm(x).ok());
  for (int i = 0; i < 12; ++i) EXPECT_EQ(b.c[i], 0.0f);
  EXPECT_TRUE(qgtest::is_poison(b.c[12]));
}

// ================================================================== explain
TEST(Explain, GemmOnCpuNamesTheChosenKernelAndEveryCandidate) {
  Buffers b;
  qg::GemmArgs g = gemm_args(b.w.data(), b.a.data(), nullptr, 4, 3, 64, 36, 72, 3);  // no output needed to explain
  qg::Explanation e;
  const qg::Status s = qg::explain(g, &e);
  ASSERT_TRUE(s.ok()) << s.message();
  const auto feats = qg::build_info().cpu_features;
  auto has = [&](const char* f) { return std::find(feats.begin(), feats.end(), f) != feats.end(); };
  const bool avx2 = has("avx2") && has("fma") && has("f16c");
  const bool vnni = avx2 && has("avx512_vnni");
  const bool avx_vnni = !vnni && avx2 && has("avx_vnni");
  std::cout << "[  explain ] " << e.op << ": " << e.problem << ": chosen " << e.chosen << "\n";
  for (const auto& c : e.candidates) std::cout << "[  explain ]   " << c << "\n";
  EXPECT_EQ(e.op, "qg.gemm_q4_0_q8_1");
  EXPECT_EQ(e.problem, "q4_0 x q8_1 on cpu");
  EXPECT_EQ(e.chosen, vnni ? "cpu_avx512_vnni" : avx_vnni ? "cpu_avx_vnni" : avx2 ? "cpu_avx2" : "cpu_scalar");
  ASSERT_EQ(e.candidates.size(), 8u);
  // The AMX kernel first: below its N where the CPU offers it, else for the ISA.
  EXPECT_TRUE(e.candidates[0] == "cpu_amx: skipped (N=3 is below its 16)" ||
              e.candidates[0].rfind("cpu_amx: skipped (needs ", 0) == 0)
      << e.candidates[0];
  if (vnni) {
    // N = 3: below the panel kernel's N, with its reason.
    EXPECT_EQ(e.candidates[1], "cpu_avx512_vnni_panel: skipped (N=3 is below its 4)");
    EXPECT_EQ(e.candidates[2], "cpu_avx512_vnni: chosen");
    for (int i = 3; i < 8; ++i) EXPECT_NE(e.candidates[i].find(": not tried"), std::string::npos) << e.candidates[i];
  } else if (avx_vnni) {
    EXPECT_EQ(e.candidates[1].rfind("cpu_avx512_vnni_panel: skipped (needs avx512_vnni,", 0), 0u) << e.candidates[1];
    EXPECT_EQ(e.candidates[3], "cpu_avx_vnni_panel: skipped (N=3 is below its 4)");
    EXPECT_EQ(e.candidates[4], "cpu_avx_vnni: chosen");
    for (int i = 5; i < 8; ++i) EXPECT_NE(e.candidates[i].find(": not tried"), std::string::npos) << e.candidates[i];
  } else if (avx2) {
    EXPECT_EQ(e.candidates[1].rfind("cpu_avx512_vnni_panel: skipped (needs avx512_vnni,", 0), 0u) << e.candidates[1];
    EXPECT_EQ(e.candidates[2].rfind("cpu_avx512_vnni: skipped (needs avx512_vnni,", 0), 0u) << e.candidates[2];
    EXPECT_EQ(e.candidates[3].rfind("cpu_avx_vnni_panel: skipped (", 0), 0u) << e.candidates[3];
    EXPECT_EQ(e.candidates[4].rfind("cpu_avx_vnni: skipped (", 0), 0u) << e.candidates[4];
    EXPECT_EQ(e.candidates[5], "cpu_avx2_panel: skipped (N=3 is below its 4)");
    EXPECT_EQ(e.candidates[6], "cpu_avx2: chosen");
    EXPECT_EQ(e.candidates[7].rfind("cpu_scalar: not tried", 0), 0u) << e.candidates[7];
  } else {
    for (int i = 0; i < 7; ++i) EXPECT_NE(e.candidates[i].find(": skipped ("), std::string::npos) << e.candidates[i];
    EXPECT_EQ(e.candidates[7], "cpu_scalar: chosen");
  }
  EXPECT_TRUE(b.c_untouched());

  // from views, before any output exists
  qg::Explanation ev;
  ASSERT_TRUE(qg::explain(gemm_views(view(b.w.data(), DType::u8, {4, 2, 18}), view(b.a.data(), DType::u8, {3, 2, 36})),
                          &ev)
                  .ok());
  EXPECT_EQ(ev.op, e.op);
  EXPECT_EQ(ev.problem, e.problem);
  EXPECT_EQ(ev.chosen, e.chosen);
  EXPECT_EQ(ev.candidates, e.candidates);

  // explain runs the call's checks and returns its error
  g.a.k = g.b.k = 100;
  EXPECT_TRUE(IsError(qg::explain(g, &e), StatusCode::invalid_argument, {"qg.gemm_q4_0_q8_1", "K=100"}));
  EXPECT_TRUE(IsError(qg::explain(gemm_views(view(b.w.data(), DType::u8, {4, 2, 18}),
                                             view(b.a.data(), DType::u8, {3, 3, 36})),
                                  &ev),
                      StatusCode::invalid_argument, {"K=64", "K=96"}));
}

TEST(Explain, QuantizeAndDequantizeOnCpu) {
  Buffers b;
  qg::Explanation e;
  ASSERT_TRUE(qg::explain(quantize_views(Format::q8_1, view(b.x.data(), DType::f32, {2, 64})), &e).ok());
  EXPECT_EQ(e.op, "qg.quantize_q8_1");
  EXPECT_EQ(e.problem, "float32 -> q8_1 on cpu");
  EXPECT_EQ(e.chosen, "cpu_reference");
  ASSERT_EQ(e.candidates.size(), 1u);
  EXPECT_EQ(e.candidates[0], "cpu_reference: chosen");
  ASSERT_TRUE(qg::explain(qg::DequantizeViews{Format::q4_0, view(b.q.data(), DType::u8, {2, 2, 18}), -1, nullptr}, &e)
                  .ok());
  EXPECT_EQ(e.op, "qg.dequantize_q4_0");
  EXPECT_EQ(e.problem, "q4_0 -> float32 on cpu");
  EXPECT_EQ(e.chosen, "cpu_reference");
  EXPECT_TRUE(IsError(qg::explain(quantize_views(Format::q4_0, view(b.x.data(), DType::f32, {2, 50})), &e),
                      StatusCode::invalid_argument, {"qg.quantize_q4_0", "K=50"}));
  // raw arguments, and a caller-facing name of the caller's choosing
  qg::QuantizeArgs q;
  q.format = Format::q8_0;
  q.x = b.x.data();
  q.x_dtype = DType::bf16;
  q.rows = 2;
  q.k = 64;
  q.x_row_stride = 64;
  ASSERT_TRUE(qg::explain(q, &e).ok());
  EXPECT_EQ(e.op, "qg.quantize_q8_0");
  EXPECT_EQ(e.problem, "bfloat16 -> q8_0 on cpu");
  q.fn = "my.quantize";
  ASSERT_TRUE(qg::explain(q, &e).ok());
  EXPECT_EQ(e.op, "my.quantize");
  EXPECT_TRUE(b.q_untouched());
}

// ================================================================== quantize
TEST(QuantizeValidation, ViewErrors) {
  Buffers b;
  const qg::TensorView x = view(b.x.data(), DType::f32, {2, 64});
  const qg::TensorView out = view(b.q.data(), DType::u8, {2, 2, 18});
  const std::string fn = "qg.quantize_q4_0";
  EXPECT_TRUE(IsError(quantize_v(Format::q4_0, view(b.x.data(), DType::f32, {2, 100}), out),
                      StatusCode::invalid_argument, {fn, "K=100", "32"}));
  EXPECT_TRUE(IsError(quantize_v(Format::q8_1, view(b.x.data(), DType::f32, {2, 100}),
                                 view(b.q.data(), DType::u8, {2, 3, 36})),
                      StatusCode::invalid_argument, {"qg.quantize_q8_1", "K=100"}));
  EXPECT_TRUE(IsError(quantize_v(Format::q4_0, view(b.x.data(), DType::f64, {2, 64}), out), StatusCode::type_error,
                      {fn, "float64"}));
  EXPECT_TRUE(IsError(quantize_v(Format::q4_0, view(b.x.data(), DType::i32, {2, 64}), out), StatusCode::type_error,
                      {fn, "int32"}));
  EXPECT_TRUE(IsError(quantize_v(Format::q4_0, view(b.x.data(), DType::f32, {}), out), StatusCode::invalid_argument,
                      {fn, "0-d"}));
  // out: wrong last dim (Q8_1 shape for a Q4_0 quantize), wrong dtype, device, read-only
  EXPECT_TRUE(IsError(quantize_v(Format::q4_0, x, view(b.q.data(), DType::u8, {2, 2, 36})),
                      StatusCode::invalid_argument, {fn, "[2, 2, 36]", "[2, 2, 18]"}));
  EXPECT_TRUE(IsError(quantize_v(Format::q4_0, x, view(b.q.data(), DType::i8, {2, 2, 18})), StatusCode::type_error,
                      {fn, "uint8", "int8"}));
  EXPECT_TRUE(IsError(quantize_v(Format::q4_0, x, view(b.q.data(), DType::u8, {2, 2, 18}, qg::Device::cuda(0))),
                      StatusCode::invalid_argument, {fn, "cuda:0"}));
  qg::TensorView ro = out;
  ro.writable = false;
  EXPECT_TRUE(IsError(quantize_v(Format::q4_0, x, ro), StatusCode::invalid_argument, {fn, "writable"}));
  // out aliasing x
  EXPECT_TRUE(IsError(quantize_v(Format::q4_0, x, view(b.x.data() + 8, DType::u8, {2, 2, 18})),
                      StatusCode::invalid_argument, {fn, "overlaps"}));
  // x not contiguous along K
  qg::TensorView xs = x;
  xs.strides[1] = 2;
  EXPECT_TRUE(IsError(quantize_v(Format::q4_0, xs, out), StatusCode::invalid_argument, {fn, "x", "contiguous"}));
  // a caller-facing name replaces the format's
  qg::QuantizeViews named = quantize_views(Format::q4_0, view(b.x.data(), DType::f32, {2, 100}));
  named.fn = "qg.my_quantize";
  EXPECT_TRUE(IsError(qg::quantize(named, out), StatusCode::invalid_argument, {"qg.my_quantize:", "K=100"}));
  EXPECT_TRUE(b.q_untouched());
}

TEST(QuantizeValidation, RawErrors) {
  Buffers b;
  qg::QuantizeArgs a;
  a.format = Format::q4_0;
  a.x = b.x.data();
  a.rows = 2;
  a.k = 64;
  a.x_row_stride = 64;
  a.y = b.q.data();
  a.y_row_stride = 36;
  const std::string fn = "qg.quantize_q4_0";
  qg::QuantizeArgs x = a;
  x.k = 33;
  EXPECT_TRUE(IsError(qg::quantize(x), StatusCode::invalid_argument, {fn, "K=33"}));
  x = a;
  x.x_dtype = DType::u8;
  EXPECT_TRUE(IsError(qg::quantize(x), StatusCode::type_error, {fn, "uint8"}));
  x = a;
  x.x_row_stride = 40;
  EXPECT_TRUE(IsError(qg::quantize(x), StatusCode::invalid_argument, {fn, "40", "K=64"}));
  x = a;
  x.y_row_stride = 20;
  EXPECT_TRUE(IsError(qg::quantize(x), StatusCode::invalid_argument, {fn, "20", "36"}));
  x = a;
  x.y = reinterpret_cast<uint8_t*>(b.x.data()) + 100;
  EXPECT_TRUE(IsError(qg::quantize(x), StatusCode::invalid_argument, {fn, "overlaps"}));
  x = a;
  x.y = nullptr;
  EXPECT_TRUE(IsError(qg::quantize(x), StatusCode::invalid_argument, {fn, "null"}));
  x = a;
  x.rows = -3;
  EXPECT_TRUE(IsError(qg::quantize(x), StatusCode::invalid_argument, {fn, ">= 0"}));
  x = a;
  x.format = Format::q8_1;
  x.k = 48;
  EXPECT_TRUE(IsError(qg::quantize(x), StatusCode::invalid_argument, {"qg.quantize_q8_1", "K=48"}));
  EXPECT_TRUE(b.q_untouched());
}

TEST(QuantizeValidation, ZeroSizeOkAndNothingWritten) {
  Buffers b;
  EXPECT_TRUE(quantize_v(Format::q4_0, view(nullptr, DType::f32, {0, 64}), view(b.q.data(), DType::u8, {0, 2, 18})).ok());
  EXPECT_TRUE(quantize_v(Format::q8_1, view(b.x.data(), DType::f32, {3, 0}), view(b.q.data(), DType::u8, {3, 0, 36})).ok());
  EXPECT_TRUE(quantize_v(Format::q8_0, view(nullptr, DType::f16, {2, 0, 64}), view(nullptr, DType::u8, {2, 0, 2, 34})).ok());
  qg::QuantizeArgs a;
  a.rows = 0;
  a.k = 64;
  EXPECT_TRUE(qg::quantize(a).ok());
  a.rows = 5;
  a.k = 0;
  EXPECT_TRUE(qg::quantize(a).ok());
  EXPECT_TRUE(b.q_untouched());
}

// ================================================================== dequantize
TEST(DequantizeValidation, Errors) {
  Buffers b;
  const qg::TensorView xq = view(b.q.data(), DType::u8, {2, 2, 18});
  const qg::TensorView out = view(b.c.data(), DType::f32, {2, 64});
  const std::string fn = "qg.dequantize_q4_0";
  EXPECT_TRUE(IsError(dequantize_v(Format::q4_0, xq, 100, out), StatusCode::invalid_argument, {fn, "K=100", "K=64"}));
  EXPECT_TRUE(IsError(dequantize_v(Format::q4_0, view(b.q.data(), DType::f32, {2, 2, 18}), -1, out),
                      StatusCode::type_error, {fn, "xq", "uint8", "float32"}));
  EXPECT_TRUE(IsError(dequantize_v(Format::q4_0, view(b.q.data(), DType::u8, {2, 2, 36}), -1, out),
                      StatusCode::invalid_argument, {fn, "xq.shape[-1]", "18", "36"}));
  EXPECT_TRUE(IsError(dequantize_v(Format::q4_0, xq, -1, view(b.c.data(), DType::f32, {2, 96})),
                      StatusCode::invalid_argument, {fn, "[2, 96]", "[2, 64]"}));
  EXPECT_TRUE(IsError(dequantize_v(Format::q4_0, xq, -1, view(b.c.data(), DType::f16, {2, 64})),
                      StatusCode::type_error, {fn, "float32", "float16"}));
  qg::TensorView ro = out;
  ro.writable = false;
  EXPECT_TRUE(IsError(dequantize_v(Format::q4_0, xq, -1, ro), StatusCode::invalid_argument, {fn, "writable"}));
  EXPECT_TRUE(IsError(dequantize_v(Format::q4_0, xq, -1, view(b.q.data() + 4, DType::f32, {2, 64})),
                      StatusCode::invalid_argument, {fn, "overlaps"}));
  EXPECT_TRUE(IsError(dequantize_v(Format::q4_0, xq, -1, view(b.c.data(), DType::f32, {2, 64}, qg::Device::cuda(0))),
                      StatusCode::invalid_argument, {fn, "cuda:0"}));
  // raw
  qg::DequantizeArgs a = qgtest::dequantize_args(Format::q8_0, b.q.data(), 2, 48, 36, b.c.data(), 64);
  EXPECT_TRUE(IsError(qg::dequantize(a), StatusCode::invalid_argument, {"qg.dequantize_q8_0", "K=48"}));
  a.format = Format::q4_0;
  a.k = 64;
  a.y_row_stride = 63;
  EXPECT_TRUE(IsError(qg::dequantize(a), StatusCode::invalid_argument, {fn, "63", "K=64"}));
  a.y_row_stride = 64;
  a.xq_row_stride = 30;
  EXPECT_TRUE(IsError(qg::dequantize(a), StatusCode::invalid_argument, {fn, "30", "36"}));
  EXPECT_TRUE(b.c_untouched());
}

// Zero points outside the codes' range (host memory) are refused, as
// quantize's static ones are: the value says which and where, and y is not
// written. At the range's ends they are taken.
TEST(DequantizeValidation, ZeroPointsOutsideTheCodeRange) {
  const int64_t rows = 2, k = 32;
  std::vector<int8_t> codes(static_cast<size_t>(rows * k), 3);
  std::vector<float> scales = {0.5f, 0.25f}, y(static_cast<size_t>(rows * k), 0.0f);
  const std::vector<float> untouched = y;
  std::vector<int32_t> zps = {0, 0};
  qg::DequantizeArgs d = qgtest::dequantize_args(Format::i8, codes.data(), rows, k, k, y.data(), k);
  d.granularity = qg::Granularity::row;
  d.scales = scales.data();
  d.zero_points = zps.data();
  const std::string fn = qg::format_traits(Format::i8).dequantize_fn;
  for (const int32_t bad : {128, -129, INT32_MIN, INT32_MAX}) {
    zps = {0, bad};
    EXPECT_TRUE(IsError(qg::dequantize(d), StatusCode::invalid_argument,
                        {fn, "zero point[1]=" + std::to_string(bad), "[-128, 127]"}));
    EXPECT_EQ(y, untouched);
  }
  zps = {-128, 127};
  ASSERT_TRUE(qg::dequantize(d).ok());
  EXPECT_EQ(y[0], 0.5f * (3 + 128));
  EXPECT_EQ(y[k], 0.25f * (3 - 127));
}

TEST(DequantizeValidation, ZeroSizeOkAndNothingWritten) {
  Buffers b;
  EXPECT_TRUE(
      dequantize_v(Format::q4_0, view(nullptr, DType::u8, {0, 2, 18}), -1, view(b.c.data(), DType::f32, {0, 64})).ok());
  EXPECT_TRUE(
      dequantize_v(Format::q8_1, view(b.q.data(), DType::u8, {3, 0, 36}), 0, view(b.c.data(), DType::f32, {3, 0})).ok());
  EXPECT_TRUE(b.c_untouched());
}

// ================================================================== view rank and shape
// A TensorView holds at most kMaxDims dims. A larger ndim (a 9-d DLPack array
// copied in without a check) must be rejected before shape[ndim - 1] is read;
// a negative one too.
TEST(ViewValidation, RankAboveMaxDimsRejected) {
  Buffers b;
  qg::TensorView x = view(b.x.data(), DType::f32, {1, 1, 1, 1, 1, 1, 1, 64});
  x.ndim = qg::kMaxDims + 1;
  EXPECT_TRUE(IsError(spec_of(quantize_views(Format::q4_0, x)), StatusCode::invalid_argument,
                      {"qg.quantize_q4_0", "9", "8"}));
  qg::TensorView xq = view(b.q.data(), DType::u8, {1, 1, 1, 1, 1, 1, 2, 18});
  xq.ndim = qg::kMaxDims + 1;
  EXPECT_TRUE(IsError(spec_of(qg::DequantizeViews{Format::q4_0, xq, -1, nullptr}), StatusCode::invalid_argument,
                      {"qg.dequantize_q4_0", "9", "8"}));
  qg::TensorView w = view(b.w.data(), DType::u8, {1, 1, 1, 1, 1, 1, 2, 18});
  w.ndim = qg::kMaxDims + 1;
  const qg::TensorView a = view(b.a.data(), DType::u8, {3, 2, 36});
  EXPECT_TRUE(IsError(spec_of(gemm_views(w, a)), StatusCode::invalid_argument, {"qg.gemm_q4_0_q8_1", "9", "8"}));
  x.ndim = -1;
  EXPECT_TRUE(IsError(spec_of(quantize_views(Format::q4_0, x)), StatusCode::invalid_argument,
                      {"qg.quantize_q4_0", "-1"}));
  EXPECT_TRUE(b.q_untouched());
}

// Defect 4: an 8-d x is a valid view, but its quantized result would have 9
// dims, one more than a view can hold: rejected up front, naming the function
// and the 9, through result_spec, quantize and explain alike.
TEST(ViewValidation, QuantizeOfEightDimsRejectedForItsNineDimResult) {
  Buffers b;
  const qg::TensorView x = view(b.x.data(), DType::f32, {1, 2, 1, 1, 1, 1, 1, 64});
  ASSERT_EQ(x.ndim, qg::kMaxDims);
  for (Format f : {Format::q4_0, Format::q8_0, Format::q8_1}) {
    const std::string fn = qg::format_traits(f).quantize_fn;
    SCOPED_TRACE(fn);
    const qg::QuantizeViews v = quantize_views(f, x);
    EXPECT_TRUE(IsError(spec_of(v), StatusCode::invalid_argument, {fn + ":", "x has 8 dimensions", "would have 9"}));
    qg::TensorView out = view(b.q.data(), DType::u8, {1, 2, 1, 1, 1, 1, 1, 2});  // any: never reached
    EXPECT_TRUE(IsError(qg::quantize(v, out), StatusCode::invalid_argument, {fn + ":", "would have 9"}));
    qg::Explanation e;
    EXPECT_TRUE(IsError(qg::explain(v, &e), StatusCode::invalid_argument, {fn + ":", "would have 9"}));
  }
  // 7 dims are fine: the result has 8
  const qg::TensorView x7 = view(b.x.data(), DType::f32, {1, 2, 1, 1, 1, 1, 64});
  qg::ResultSpec spec;
  ASSERT_TRUE(qg::result_spec(quantize_views(Format::q4_0, x7), &spec).ok());
  EXPECT_EQ(spec.ndim, 8);
  EXPECT_EQ(spec.shape[6], 2);
  EXPECT_EQ(spec.shape[7], 18);
  EXPECT_TRUE(quantize_v(Format::q4_0, x7, view(b.q.data(), DType::u8, {1, 2, 1, 1, 1, 1, 2, 18})).ok());
  // dequantize of an 8-d xq gives 7 dims: fine
  std::fill(b.q.begin(), b.q.end(), 0);
  const qg::TensorView xq8 = view(b.q.data(), DType::u8, {1, 2, 1, 1, 1, 1, 2, 18});
  ASSERT_TRUE(qg::result_spec(qg::DequantizeViews{Format::q4_0, xq8, -1, nullptr}, &spec).ok());
  EXPECT_EQ(spec.ndim, 7);
  EXPECT_EQ(spec.shape[6], 64);
}

// Defect 2: a negative shape entry (a corrupt DLPack header, a C++ caller's
// bug) is a ValueError-class invalid_argument naming the argument, for every
// view an op takes, before anything is computed from it.
TEST(ViewValidation, NegativeShapeEntriesRejected) {
  Buffers b;
  std::vector<float> vec(16, 1.0f);
  // quantize: x
  for (auto shape : {std::vector<int64_t>{-2, 64}, std::vector<int64_t>{2, -64}, std::vector<int64_t>{3, -1, 64}}) {
    qg::TensorView x = view(b.x.data(), DType::f32, {});
    x.ndim = static_cast<int>(shape.size());
    for (size_t d = 0; d < shape.size(); ++d) x.shape[d] = shape[d];
    const std::string s = qg::detail::shape_string(x);
    SCOPED_TRACE("x shape " + s);
    EXPECT_TRUE(IsError(spec_of(quantize_views(Format::q8_0, x)), StatusCode::invalid_argument,
                        {"qg.quantize_q8_0", "x", "negative", s}));
    EXPECT_TRUE(IsError(quantize_v(Format::q8_0, x, view(b.q.data(), DType::u8, {2, 2, 34})),
                        StatusCode::invalid_argument, {"qg.quantize_q8_0", "x", "negative"}));
    qg::Explanation e;
    EXPECT_TRUE(IsError(qg::explain(quantize_views(Format::q8_0, x), &e), StatusCode::invalid_argument,
                        {"x", "negative"}));
  }
  // dequantize: xq, and out
  qg::TensorView xq = view(b.q.data(), DType::u8, {2, -2, 18});
  EXPECT_TRUE(IsError(dequantize_v(Format::q4_0, xq, -1, view(b.c.data(), DType::f32, {2, 64})),
                      StatusCode::invalid_argument, {"qg.dequantize_q4_0", "xq", "negative"}));
  xq = view(b.q.data(), DType::u8, {-1, 2, 18});
  EXPECT_TRUE(IsError(spec_of(qg::DequantizeViews{Format::q4_0, xq, -1, nullptr}), StatusCode::invalid_argument,
                      {"qg.dequantize_q4_0", "xq", "negative"}));
  // gemm: weight, activation, out, bias, scales
  const qg::TensorView w = view(b.w.data(), DType::u8, {4, 2, 18});
  const qg::TensorView a = view(b.a.data(), DType::u8, {3, 2, 36});
  const qg::TensorView out = view(b.c.data(), DType::f32, {4, 3});
  EXPECT_TRUE(IsError(gemm_v(view(b.w.data(), DType::u8, {-4, 2, 18}), a, out, -1, -1, -1),
                      StatusCode::invalid_argument, {"qg.gemm_q4_0_q8_1", "weight_q", "negative"}));
  EXPECT_TRUE(IsError(gemm_v(view(b.w.data(), DType::u8, {-2, -2, 2, 18}), a, out, -1, -1, -1),
                      StatusCode::invalid_argument, {"weight_q", "negative"}));  // product positive, still refused
  EXPECT_TRUE(IsError(gemm_v(w, view(b.a.data(), DType::u8, {3, -2, 36}), out, -1, -1, -1),
                      StatusCode::invalid_argument, {"qg.gemm_q4_0_q8_1", "activation_q", "negative"}));
  EXPECT_TRUE(IsError(gemm_v(w, a, view(b.c.data(), DType::f32, {4, -3}), -1, -1, -1), StatusCode::invalid_argument,
                      {"qg.gemm_q4_0_q8_1", "out", "negative"}));
  qg::TensorView neg1d = view(vec.data(), DType::f32, {-4});
  for (int which = 0; which < 3; ++which) {
    qg::GemmViews v = gemm_views(w, a);
    const char* name = which == 0 ? "bias" : which == 1 ? "row_scale" : "col_scale";
    (which == 0 ? v.bias : which == 1 ? v.row_scale : v.col_scale) = &neg1d;
    EXPECT_TRUE(IsError(qg::gemm(v, out), StatusCode::invalid_argument, {"qg.gemm_q4_0_q8_1", name, "negative"}));
  }
  qg::Explanation e;
  EXPECT_TRUE(IsError(qg::explain(gemm_views(w, view(b.a.data(), DType::u8, {-3, 2, 36})), &e),
                      StatusCode::invalid_argument, {"activation_q", "negative"}));
  EXPECT_TRUE(b.c_untouched());
  EXPECT_TRUE(b.q_untouched());
}

// The product of a view's leading dims must fit in int64: [3, 2^62, 2, 18]
// would give M < 0 and [2^32 + 1, 2^32, 2, 18] a wrapped M = 2^32.
TEST(ViewValidation, LeadingDimProductOverflowRejected) {
  Buffers b;
  const qg::TensorView a = view(b.a.data(), DType::u8, {3, 2, 36});
  for (auto dims : {std::pair<int64_t, int64_t>{3, int64_t{1} << 62},
                    std::pair<int64_t, int64_t>{(int64_t{1} << 32) + 1, int64_t{1} << 32}}) {
    SCOPED_TRACE(std::to_string(dims.first) + " x " + std::to_string(dims.second));
    const qg::TensorView w = view(b.w.data(), DType::u8, {dims.first, dims.second, 2, 18});
    const qg::Status s = spec_of(gemm_views(w, a));
    EXPECT_FALSE(s.ok()) << "M overflowed int64 but result_spec accepted it";
    EXPECT_TRUE(s.code() == StatusCode::overflow || s.code() == StatusCode::invalid_argument) << s.message();
    EXPECT_NE(s.message().find("weight_q"), std::string::npos) << s.message();
    qg::Explanation e;
    EXPECT_FALSE(qg::explain(gemm_views(w, a), &e).ok());
  }
}

// A bias (or scale) view of M > 0 elements with a null data pointer is an
// error, as a null operand is, not a silent "no bias".
TEST_F(GemmValidation, NullDataEpilogueViewRejected) {
  std::fill(b.w.begin(), b.w.end(), 0);
  std::fill(b.a.begin(), b.a.end(), 0);
  qg::GemmViews v = gemm_views(w, a);
  const qg::TensorView bias = view(nullptr, DType::f32, {4});
  v.bias = &bias;
  EXPECT_TRUE(IsError(qg::gemm(v, out), StatusCode::invalid_argument, {fn, "bias", "null"}));
  EXPECT_TRUE(b.c_untouched());
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
    EXPECT_TRUE(IsError(gemm_v(w, a, o, -1, -1, -1), StatusCode::invalid_argument,
                        {"qg.gemm_q4_0_q8_1", "out", std::to_string(ndim)}));
    qg::TensorView oq = view(b.q.data() + 1024, DType::u8, {1, 1, 1, 1, 1, 2, 2, 18});
    oq.ndim = ndim;
    EXPECT_TRUE(IsError(quantize_v(Format::q4_0, x, oq), StatusCode::invalid_argument,
                        {"qg.quantize_q4_0", "out", std::to_string(ndim)}));
    qg::TensorView od = view(b.c.data(), DType::f32, {1, 1, 1, 1, 1, 1, 2, 64});
    od.ndim = ndim;
    EXPECT_TRUE(IsError(dequantize_v(Format::q4_0, xq, -1, od), StatusCode::invalid_argument,
                        {"qg.dequantize_q4_0", "out", std::to_string(ndim)}));
  }
  EXPECT_TRUE(b.c_untouched());
}

}  // namespace
