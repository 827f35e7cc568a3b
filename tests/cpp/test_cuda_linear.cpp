// SPDX-License-Identifier: MIT
// test_cuda_linear.cpp: qg::linear_q4_0 (and qg::linear_int8) on CUDA
// equal the quantize + gemm they stand for (bias, cast, [N, M] output) byte
// for byte, on a stream of their own. Many calls back to back on one stream, one workspace, a different
// x each time, would show a GEMM reading the workspace before its own
// quantizer wrote it. Skips cleanly when no CUDA device is visible.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <qg/qg.h>

#include "cuda_test_util.h"
#include "linear_cases.h"
#include "test_util.h"

namespace {

using qgtest::CudaMemory;
using qgtest::linear::Case;

class CudaLinear : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (!qg::cuda_available(&why)) GTEST_SKIP() << "no CUDA device: " << why;
    ASSERT_EQ(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), cudaSuccess);
  }
  void TearDown() override {
    if (stream_) cudaStreamDestroy(stream_);
  }
  void run_all(const std::vector<Case>& cases, std::mt19937_64& rng) {
    for (const Case& c : cases) {
      qgtest::linear::expect_matches(mem_, c, rng, stream_);
      if (HasFatalFailure() || HasNonfatalFailure()) return;
    }
  }

  // Transfers synchronise the device: the tests' stream does not wait on the legacy stream.
  CudaMemory mem_{/*synchronized_transfers=*/true};
  cudaStream_t stream_ = nullptr;
};

TEST_F(CudaLinear, MatchesQuantizeThenGemm) {
  QG_SEEDED_RNG(rng, 1);
  run_all(qgtest::linear::shape_cases({32, 256}), rng);
}

TEST_F(CudaLinear, MatchesQuantizeThenGemmLargeK) {
  QG_SEEDED_RNG(rng, 2);
  run_all(qgtest::linear::shape_cases({4096, 14336}), rng);
}

// On sm_90a the warpgroup kernel quantizes x itself (its re-layout pass reads
// x, not Q8_1 blocks); elsewhere these go to quantize + the mma kernel.
TEST_F(CudaLinear, TensorCoreShapes) {
  QG_SEEDED_RNG(rng, 5);
  run_all(qgtest::linear::tensor_core_cases(), rng);
}

// Enough tokens and K that the quantizing re-layout pass has more CTAs of a
// stage (128 tokens x 8 blocks) than an H100 or H200 has SMs, so it runs
// them at 256 threads (several an SM), where the other tests take a thread
// a (token, block) in CTAs of 1024 (N < 64) or CTAs of one block (from
// N = 64): each x dtype, an odd N (the last token pair's empty half), x
// rows padded.
TEST_F(CudaLinear, QuantizingPassWithManyCtas) {
  QG_SEEDED_RNG(rng, 9);
  std::vector<Case> cases;
  int i = 0;
  for (qg::DType dt : {qg::DType::f32, qg::DType::f16, qg::DType::bf16})
    for (int64_t n : {600, 601}) {
      Case c;
      c.n = n;
      c.m = 128;
      c.k = 14336;  // 5 x 56 CTAs of 128 tokens x 8 blocks
      c.x_dtype = dt;
      c.bias = i % 2 == 0;
      c.x_pad = i % 3 == 1 ? 8 : (i % 3 == 2 ? 5 : 0);  // 5: x rows not 16-byte aligned, element loads
      ++i;
      cases.push_back(c);
    }
  run_all(cases, rng);
}

// Decode past one wave of the ring GEMV's CTAs (M > 4224 on an H200), where
// on sm_90 its warps run several row pairs through one ring, launched early
// behind the quantizer: N = 1..2, every x dtype, x rows padded now and then
// (at K = 2304 on three CTAs an SM, at K = 14336 on two).
// The reference (quantize, then qg::gemm) runs the same kernel, so this
// checks the early launch and the activations' wait; GemvRingStagesAndTails
// checks the arithmetic against float64.
TEST_F(CudaLinear, DecodePastOneWave) {
  QG_SEEDED_RNG(rng, 11);
  std::vector<Case> cases;
  int i = 0;
  for (qg::DType dt : {qg::DType::f32, qg::DType::f16, qg::DType::bf16})
    for (int64_t n : {1, 2})
      for (int64_t m : {4300, 9001}) {
        Case c;
        c.n = n;
        c.m = m;
        c.k = i % 3 == 2 ? 14336 : 2304;
        c.x_dtype = dt;
        c.y_dtype = i % 4 < 2 ? qg::DType::f32 : dt;
        c.bias = (i / 2) % 2 == 0;
        c.x_pad = i % 5 == 1 ? 3 : 0;
        ++i;
        cases.push_back(c);
      }
  run_all(cases, rng);
}

// linear_int8: the int8 kernels' decode, tile and split shapes, tails, and
// the layouts that rule out their 16-byte paths.
TEST_F(CudaLinear, Int8MatchesQuantizeThenGemm) {
  QG_SEEDED_RNG(rng, 7);
  std::vector<Case> cases = qgtest::linear::int8_cases(qgtest::linear::shape_cases({32, 256, 4096}));
  for (const Case& c : qgtest::linear::int8_cases(qgtest::linear::tensor_core_cases())) cases.push_back(c);
  for (const Case& c : qgtest::linear::int8_cases(qgtest::linear::layout_cases())) cases.push_back(c);
  run_all(cases, rng);
}

TEST_F(CudaLinear, StridesAndAlignments) {
  QG_SEEDED_RNG(rng, 3);
  run_all(qgtest::linear::layout_cases(), rng);
}

// K = 0 launches no quantizer, and the GEMM writes the bias.
TEST_F(CudaLinear, KZeroWritesTheBias) {
  const std::vector<float> bias = {1.5f, -2.0f, 0.25f};
  qgtest::MemBytes dbias(mem_, qgtest::as_bytes(bias), 0);
  qgtest::MemBytes y(mem_, std::vector<uint8_t>(2 * 3 * 4, 0xFF), 0);
  qgtest::MemBytes any(mem_, std::vector<uint8_t>(64, 0), 0);
  qg::LinearQ4_0Args a;
  a.x = any.ptr();
  a.n = 2;
  a.k = 0;
  a.weight_q = any.ptr();
  a.m = 3;
  a.y = y.ptr();
  a.ldy = 3;
  a.bias = dbias.ptr();
  a.device = qg::Device::cuda(0);
  const qg::Status s = qg::linear_q4_0(a, stream_);
  ASSERT_TRUE(s.ok()) << s.message();
  mem_.synchronize(stream_);
  const std::vector<uint8_t> out = y.read();
  for (int r = 0; r < 2; ++r)
    for (int i = 0; i < 3; ++i) {
      float v;
      std::memcpy(&v, &out[(r * 3 + i) * 4], 4);
      EXPECT_EQ(v, bias[i]);
    }
}

// `calls` linear_q4_0 calls enqueued back to back on `stream`, one weight and
// one workspace, x and y different each time; then each y against
// quantize + gemm of its own x, computed afterwards.
void back_to_back(CudaMemory& mem, const Case& c, int calls, qg::Stream stream, std::mt19937_64& rng) {
  SCOPED_TRACE(c.describe() + " calls=" + std::to_string(calls));
  const qgtest::linear::HostData h = qgtest::linear::make_data(c, rng);
  qgtest::linear::Buffers b(mem, c, h);
  std::vector<std::unique_ptr<qgtest::MemBytes>> xs, ys;
  for (int i = 0; i < calls; ++i) {
    // No Inf: a NaN result would hide which activations it came from.
    xs.push_back(std::make_unique<qgtest::MemBytes>(mem, qgtest::linear::random_x(c, rng, false), 0));
    ys.push_back(std::make_unique<qgtest::MemBytes>(mem, h.y, 0));
  }
  const void* bias = c.bias ? b.bias.ptr() : nullptr;
  const qg::Device d = mem.device();
  for (int i = 0; i < calls; ++i) {
    const qg::Status s = qg::linear_q4_0(
        qgtest::linear::linear_args(c, xs[i]->ptr(), b.ws.ptr(), b.w.ptr(), ys[i]->ptr(), bias, d), stream);
    ASSERT_TRUE(s.ok()) << "call " << i << ": " << s.message();
  }
  mem.synchronize(stream);
  for (int i = 0; i < calls; ++i) {
    const qg::Status r = qgtest::linear::quantize_then_gemm(c, xs[i]->ptr(), b.ws_ref.ptr(), b.w.ptr(), nullptr,
                                                            b.y_ref.ptr(), bias, d, stream);
    ASSERT_TRUE(r.ok()) << r.message();
    mem.synchronize(stream);
    const int64_t at = qgtest::linear::first_difference(ys[i]->read(), b.y_ref.read());
    EXPECT_EQ(at, -1) << "call " << i << " of " << calls << ": y differs from quantize + gemm at byte " << at;
  }
}

TEST_F(CudaLinear, BackToBackCallsSeeTheirOwnActivations) {
  QG_SEEDED_RNG(rng, 4);
  for (int64_t n : {1, 2, 5, 8, 16}) {
    Case c;
    c.n = n;
    c.m = n == 1 || n == 8 ? 4096 : 512;
    c.k = 14336;
    c.bias = n % 2 == 1;
    back_to_back(mem_, c, 12, stream_, rng);
    if (HasFatalFailure() || HasNonfatalFailure()) return;
  }
  Case c;  // a short GEMM: the quantizer is the longer of the two
  c.n = 1;
  c.m = 64;
  c.k = 14336;
  c.x_dtype = qg::DType::bf16;
  c.y_dtype = qg::DType::bf16;
  back_to_back(mem_, c, 24, stream_, rng);
}

// The same on the legacy default stream, which the tests' other work does not use.
TEST_F(CudaLinear, BackToBackOnTheDefaultStream) {
  QG_SEEDED_RNG(rng, 5);
  Case c;
  c.n = 1;
  c.m = 4096;
  c.k = 4096;
  c.x_dtype = qg::DType::f16;
  c.y_dtype = qg::DType::f16;
  c.bias = true;
  c.bias_dtype = qg::DType::f16;
  back_to_back(mem_, c, 16, nullptr, rng);
}

// A 512 x 4096 layer with a bias, at n tokens: the stream-order tests' case.
Case biased_layer(int64_t n) {
  Case c;
  c.n = n;
  c.m = 512;
  c.k = 4096;
  c.bias = true;
  return c;
}

// Two linear_q4_0 calls on one stream with the layer's weights replaced
// between them by `replace(w)`, which enqueues the write into W on the
// stream; then each call's y against quantize + gemm on the weights it had
// to read: the first ones, and the bytes W holds at the end.
template <class Replace>
void weights_replaced_between_calls(CudaMemory& mem, const Case& c, qg::Stream stream, std::mt19937_64& rng,
                                    Replace&& replace) {
  SCOPED_TRACE(c.describe());
  qgtest::linear::HostData first = qgtest::linear::make_data(c, rng);
  first.x = qgtest::linear::random_x(c, rng, false);  // finite: the two calls' y must differ
  qgtest::linear::Buffers b(mem, c, first);           // b.w: the first weights, then the new ones
  qgtest::MemBytes w1(mem, first.w, c.w_offset);      // the first weights, for the first call's reference
  qgtest::MemBytes y1(mem, first.y, 0), y2(mem, first.y, 0);
  const qg::Device d = mem.device();
  auto call = [&](void* y) {
    return qg::linear_q4_0(qgtest::linear::linear_args(c, b.x.ptr(), b.ws.ptr(), b.w.ptr(), y, b.bias.ptr(), d),
                           stream);
  };
  const qg::Status s1 = call(y1.ptr());
  ASSERT_TRUE(s1.ok()) << s1.message();
  replace(b.w.ptr());
  if (::testing::Test::HasFatalFailure()) return;
  const qg::Status s2 = call(y2.ptr());
  ASSERT_TRUE(s2.ok()) << s2.message();
  mem.synchronize(stream);
  const struct {
    qgtest::MemBytes* y;
    const void* w;
    const char* which;
  } calls[] = {{&y1, w1.ptr(), "first"}, {&y2, b.w.ptr(), "second"}};
  for (const auto& k : calls) {
    const qg::Status r = qgtest::linear::quantize_then_gemm(c, b.x.ptr(), b.ws_ref.ptr(), k.w, nullptr,
                                                            b.y_ref.ptr(), b.bias.ptr(), d, stream);
    ASSERT_TRUE(r.ok()) << r.message();
    mem.synchronize(stream);
    const int64_t at = qgtest::linear::first_difference(k.y->read(), b.y_ref.read());
    EXPECT_EQ(at, -1) << "the " << k.which << " call differs from quantize + gemm on its weights at byte " << at;
  }
  EXPECT_NE(qgtest::linear::first_difference(y1.read(), y2.read()), -1) << "both calls gave the same y";
}

// Weights written by the work just before a call (a copy on the same
// stream) are the weights it reads. On sm_90a up to 512 tokens the
// warpgroup GEMM, and on sm_90 the ring GEMV (N = 1 and 3 here), request
// their first stages of W before they wait for the quantizer (programmatic
// dependent launch), which is right only because the quantizer lets them
// launch once it has waited for everything before it on the stream (it is
// launched early itself, behind the stream's previous kernel).
TEST_F(CudaLinear, WeightsWrittenJustBeforeTheCall) {
  QG_SEEDED_RNG(rng, 7);
  for (int64_t n : {1, 3, 16, 128, 512}) {
    const Case c = biased_layer(n);
    const qgtest::linear::HostData second = qgtest::linear::make_data(c, rng);
    qgtest::MemBytes w2(mem_, second.w, c.w_offset);
    weights_replaced_between_calls(mem_, c, stream_, rng, [&](void* w) {
      ASSERT_EQ(cudaMemcpyAsync(w, w2.ptr(), second.w.size(), cudaMemcpyDeviceToDevice, stream_), cudaSuccess);
    });
    if (HasFatalFailure() || HasNonfatalFailure()) return;
  }
}

// The same with the weights written by a kernel: qg's own quantize_q4_0 of
// new float weights into the layer's weight buffer. That kernel is
// launched early behind the first call's GEMM and must not overwrite W
// before that GEMM has read it; the second call's quantizer is launched
// early behind it and its GEMM behind the quantizer, which must still read
// only the new weights.
TEST_F(CudaLinear, WeightsQuantizedByTheKernelJustBefore) {
  QG_SEEDED_RNG(rng, 8);
  for (int64_t n : {1, 3, 8, 16}) {
    const Case c = biased_layer(n);
    std::vector<uint8_t> wf(static_cast<size_t>(c.m * c.k * 4));
    for (int64_t i = 0; i < c.m * c.k; ++i)
      qgtest::encode_float(&wf[4 * i], qg::DType::f32, qgtest::uniform(rng, -1, 1));
    qgtest::MemBytes w_float(mem_, wf, 0);
    weights_replaced_between_calls(mem_, c, stream_, rng, [&](void* w) {
      qg::QuantizeArgs q;
      q.format = qg::Format::q4_0;
      q.x = w_float.ptr();
      q.x_dtype = qg::DType::f32;
      q.rows = c.m;
      q.k = c.k;
      q.x_row_stride = c.k;
      q.y = w;
      q.y_row_stride = c.w_row();
      q.device = mem_.device();
      const qg::Status sq = qg::quantize(q, stream_);
      ASSERT_TRUE(sq.ok()) << sq.message();
    });
    if (HasFatalFailure() || HasNonfatalFailure()) return;
  }
}

// linear_q4_0 captured into a CUDA graph, as torch's CUDA graphs and
// llama.cpp replay a model: the graph, launched twice, writes what the direct
// calls would. From N = 7 on sm_90a each call takes its scratch from qg's
// pool in stream order, which capture records as graph allocations.
TEST_F(CudaLinear, CapturedInACudaGraph) {
  QG_SEEDED_RNG(rng, 6);
  for (int64_t n : {1, 16, 100}) {
    const Case c = biased_layer(n);
    SCOPED_TRACE(c.describe());
    const qgtest::linear::HostData h = qgtest::linear::make_data(c, rng);
    qgtest::linear::Buffers b(mem_, c, h);
    constexpr int kCalls = 3;
    std::vector<std::unique_ptr<qgtest::MemBytes>> xs, ys;
    for (int i = 0; i < kCalls; ++i) {
      xs.push_back(std::make_unique<qgtest::MemBytes>(mem_, qgtest::linear::random_x(c, rng, false), 0));
      ys.push_back(std::make_unique<qgtest::MemBytes>(mem_, h.y, 0));
    }
    qgtest::MemBytes y_warm(mem_, h.y, 0);
    const qg::Device d = mem_.device();
    auto call = [&](int i, void* y) {
      return qg::linear_q4_0(
          qgtest::linear::linear_args(c, xs[i]->ptr(), b.ws.ptr(), b.w.ptr(), y, b.bias.ptr(), d), stream_);
    };
    const qg::Status warm = call(0, y_warm.ptr());  // outside the capture, as frameworks warm up
    ASSERT_TRUE(warm.ok()) << warm.message();
    mem_.synchronize(stream_);
    cudaGraph_t graph = nullptr;
    ASSERT_EQ(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal), cudaSuccess);
    qg::Status captured;
    for (int i = 0; i < kCalls && captured.ok(); ++i) captured = call(i, ys[i]->ptr());
    const cudaError_t ended = cudaStreamEndCapture(stream_, &graph);
    ASSERT_TRUE(captured.ok()) << captured.message();
    ASSERT_EQ(ended, cudaSuccess) << cudaGetErrorString(ended);
    cudaGraphExec_t exec = nullptr;
    ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
    for (int launch = 0; launch < 2; ++launch) EXPECT_EQ(cudaGraphLaunch(exec, stream_), cudaSuccess);
    mem_.synchronize(stream_);
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    for (int i = 0; i < kCalls; ++i) {
      const qg::Status r = qgtest::linear::quantize_then_gemm(c, xs[i]->ptr(), b.ws_ref.ptr(), b.w.ptr(), nullptr,
                                                              b.y_ref.ptr(), b.bias.ptr(), d, stream_);
      ASSERT_TRUE(r.ok()) << r.message();
      mem_.synchronize(stream_);
      const int64_t at = qgtest::linear::first_difference(ys[i]->read(), b.y_ref.read());
      EXPECT_EQ(at, -1) << "call " << i << ": y differs from quantize + gemm at byte " << at;
    }
  }
}

}  // namespace
