// SPDX-License-Identifier: MIT
// linear_cases.h: the one-call linear layers against the two calls each
// stands for, on one backend (a qgtest::Memory) and one stream:
//   qg::linear_q4_0: qg::quantize (Q8_1, reference convention), then qg::gemm;
//   qg::linear_int8: qg::quantize (i8, one dynamic scale per token), then
//                    qg::gemm with the weight's and the tokens' scales;
// the GEMM writing y [N, M] (ldc = 1, ldc_n = ldy, bias in the epilogue).
// Both must leave the same bytes in y, with its gaps and guards (not in the
// workspace: a kernel that quantizes x into its own layout leaves it unused).
// Shared by the CPU and CUDA test files.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "test_util.h"

namespace qgtest::linear {

constexpr uint8_t kWorkspaceSentinel = 0xA5;

struct Case {
  qg::Format weight = qg::Format::q4_0;  // q4_0: linear_q4_0; i8: linear_int8
  int64_t n = 1, m = 1, k = 32;
  qg::DType x_dtype = qg::DType::f32, y_dtype = qg::DType::f32;
  bool bias = false;
  qg::DType bias_dtype = qg::DType::f32;
  bool relu = false;
  int64_t x_pad = 0;       // elements past K between rows of x
  int64_t y_pad = 0;       // elements past M between rows of y (ldy = M + y_pad)
  int64_t w_pad = 0;       // bytes past a row of blocks between weight rows
  size_t w_offset = 0;     // misalignment of the weight (bytes past 256)
  size_t ws_offset = 0;    // and of the workspace

  bool int8() const { return weight == qg::Format::i8; }
  int64_t ldy() const { return m + y_pad; }
  // The quantized x: Q8_1 blocks, or int8 codes, then (int8) the token
  // scales from the first 256-byte boundary past the codes.
  int64_t xq_row() const { return int8() ? k : k / 32 * 36; }
  int64_t scales_at() const { return (n * k + 255) / 256 * 256; }
  int64_t ws_bytes() const { return int8() ? scales_at() + 4 * n : n * xq_row(); }
  int64_t w_row() const { return (int8() ? k : k / 32 * 18) + w_pad; }
  std::string describe() const {
    return std::string(int8() ? "linear_int8" : "linear_q4_0") + " N=" + std::to_string(n) + " M=" + std::to_string(m) + " K=" + std::to_string(k) + " x " +
           qg::dtype_name(x_dtype) + " y " + qg::dtype_name(y_dtype) +
           (bias ? std::string(" bias ") + qg::dtype_name(bias_dtype) : std::string(" no bias")) +
           (relu ? " relu" : "") +
           " x_pad=" + std::to_string(x_pad) + " y_pad=" + std::to_string(y_pad) + " w_pad=" +
           std::to_string(w_pad) + " w_offset=" + std::to_string(w_offset) + " ws_offset=" +
           std::to_string(ws_offset);
  }
};

// The host bytes of one case: x (gaussian rows of varied scale, with
// specials a zero block, a block of subnormal scale, blocks whose scale the
// folded operands cannot carry, and now and then an Inf, which makes the
// last row's results NaN), the Q4_0 weight, the bias, and a poisoned y.
struct HostData {
  std::vector<uint8_t> x, w, w_scale, bias, y;
};

inline std::vector<uint8_t> random_x(const Case& c, std::mt19937_64& rng, bool specials = true) {
  const int64_t esize = qg::dtype_size(c.x_dtype), stride = c.k + c.x_pad;
  std::vector<uint8_t> x(static_cast<size_t>(c.n * stride * esize), 0);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const float scales[] = {1.0f, 0.03f, 40.0f, 3.0f};
  for (int64_t r = 0; r < c.n; ++r)
    for (int64_t i = 0; i < stride; ++i) {
      float v = normal(rng) * scales[(r + rng() % 2) % 4];
      if (i >= c.k) v = 1e30f;  // past K: never read
      encode_float(&x[(r * stride + i) * esize], c.x_dtype, v);
    }
  if (specials && c.k >= 64 && c.n > 0) {
    for (int j = 0; j < 32; ++j) encode_float(&x[(32 + j) * esize], c.x_dtype, 0.0f);
    if (rng() % 4 == 0) encode_float(&x[(c.n - 1) * stride * esize], c.x_dtype, INFINITY);
  }
  // A block whose scale is subnormal in fp32 (f32 and bf16 x; f16 flushes
  // it to zeros), and, in the last row, one whose scale (about 313) the
  // folded fp16 operands cannot carry, so its tile is summed exactly.
  if (specials && c.k >= 128 && c.n > 0) {
    for (int j = 0; j < 32; ++j) encode_float(&x[(64 + j) * esize], c.x_dtype, normal(rng) * 1e-37f);
    for (int j = 0; j < 32; ++j)
      encode_float(&x[((c.n - 1) * stride + 96 + j) * esize], c.x_dtype, (j % 2 ? -1.0f : 1.0f) * (1000.0f + 1250.0f * j));
  }
  // From K = 512 one more such block in the first row, block 13: in a
  // second stage of 8 blocks, at a place other than its first, so that the
  // re-layout passes' non-finite bytes are checked there too.
  if (specials && c.k >= 512 && c.n > 0)
    for (int j = 0; j < 32; ++j)
      encode_float(&x[(13 * 32 + j) * esize], c.x_dtype, (j % 2 ? 1.0f : -1.0f) * (900.0f + 1100.0f * j));
  return x;
}

inline HostData make_data(const Case& c, std::mt19937_64& rng) {
  HostData h;
  h.x = random_x(c, rng);
  std::normal_distribution<float> normal(0.0f, 0.5f);
  if (c.int8()) {  // codes over the whole int8 range, and a scale per row
    h.w.assign(static_cast<size_t>(c.m * c.w_row()), 0x7F);
    for (int64_t r = 0; r < c.m; ++r)
      for (int64_t i = 0; i < c.k; ++i) h.w[r * c.w_row() + i] = static_cast<uint8_t>(rng() % 256);
    std::vector<float> scale(static_cast<size_t>(c.m));
    for (float& v : scale) v = std::ldexp(1.0f + static_cast<float>(rng() % 1000) / 1000.0f, -9 + int(rng() % 6));
    h.w_scale = as_bytes(scale);
  } else {
    std::vector<float> wf(static_cast<size_t>(c.m * c.k));
    for (float& v : wf) v = normal(rng);
    h.w = quantize_on_cpu(qg::Format::q4_0, wf, c.m, c.k, c.w_row());
  }
  if (c.bias) {
    const int64_t bs = qg::dtype_size(c.bias_dtype);
    h.bias.resize(static_cast<size_t>(c.m * bs));
    for (int64_t i = 0; i < c.m; ++i) encode_float(&h.bias[i * bs], c.bias_dtype, normal(rng) * 4.0f);
  }
  const int64_t ysize = qg::dtype_size(c.y_dtype);
  h.y.resize(static_cast<size_t>((c.n * c.ldy() + kCTailElems) * ysize));
  for (size_t i = 0; i < h.y.size(); i += static_cast<size_t>(ysize)) poison_element(&h.y[i], c.y_dtype);
  return h;
}

// The fields both linear calls take alike from a case.
template <class Args>
void fill_common(Args& a, const Case& c, const void* x, void* y, const void* bias, qg::Device device) {
  a.x = x;
  a.x_dtype = c.x_dtype;
  a.n = c.n;
  a.k = c.k;
  a.x_row_stride = c.k + c.x_pad;
  a.m = c.m;
  a.weight_row_stride = c.w_row();
  a.y = y;
  a.y_dtype = c.y_dtype;
  a.ldy = c.ldy();
  a.bias = bias;
  a.bias_dtype = c.bias_dtype;
  a.activation = c.relu ? qg::Activation::relu : qg::Activation::none;
  a.device = device;
}

inline qg::LinearQ4_0Args linear_args(const Case& c, const void* x, void* ws, const void* w, void* y,
                                      const void* bias, qg::Device device) {
  qg::LinearQ4_0Args a;
  fill_common(a, c, x, y, bias, device);
  a.xq_workspace = ws;
  a.weight_q = w;
  return a;
}

// The linear call of the case's weight format, enqueued on `stream`.
inline qg::Status run_linear(const Case& c, const void* x, void* ws, const void* w, const void* w_scale, void* y,
                             const void* bias, qg::Device device, qg::Stream stream) {
  if (!c.int8()) return qg::linear_q4_0(linear_args(c, x, ws, w, y, bias, device), stream);
  qg::LinearInt8Args a;
  fill_common(a, c, x, y, bias, device);
  a.x_codes_workspace = ws;
  a.x_scales_workspace = ws ? reinterpret_cast<float*>(static_cast<uint8_t*>(ws) + c.scales_at()) : nullptr;
  a.weight_q = w;
  a.weight_scale = static_cast<const float*>(w_scale);
  return qg::linear_int8(a, stream);
}

// The two calls the case's linear call stands for, enqueued on `stream`.
inline qg::Status quantize_then_gemm(const Case& c, const void* x, void* ws, const void* w, const void* w_scale,
                                     void* y, const void* bias, qg::Device device, qg::Stream stream) {
  float* x_scales = c.int8() ? reinterpret_cast<float*>(static_cast<uint8_t*>(ws) + c.scales_at()) : nullptr;
  qg::QuantizeArgs q;
  q.format = c.int8() ? qg::Format::i8 : qg::Format::q8_1;
  q.x = x;
  q.x_dtype = c.x_dtype;
  q.rows = c.n;
  q.k = c.k;
  q.x_row_stride = c.k + c.x_pad;
  q.y = ws;
  q.y_row_stride = c.xq_row();
  q.device = device;
  q.q8_1_convention = qg::Q8_1Convention::reference;
  if (c.int8()) {
    q.granularity = qg::Granularity::row;
    q.scales = x_scales;
  }
  if (qg::Status s = qg::quantize(q, stream); !s.ok()) return s;
  qg::GemmArgs g;
  g.a = qg::packed_operand(w, c.weight, c.m, c.k);
  g.a.row_stride = c.w_row();
  g.b = qg::packed_operand(ws, q.format, c.n, c.k);
  g.c = y;
  g.c_dtype = c.y_dtype;
  g.ldc = 1;
  g.ldc_n = c.ldy();
  if (c.int8()) {
    g.epilogue.row_scale = static_cast<const float*>(w_scale);
    g.epilogue.col_scale = x_scales;
  }
  g.epilogue.bias = bias;
  g.epilogue.bias_dtype = c.bias_dtype;
  g.epilogue.activation = c.relu ? qg::Activation::relu : qg::Activation::none;
  g.device = device;
  return qg::gemm(g, stream);
}

// The device copies of one case's inputs, and a y and a workspace per path.
struct Buffers {
  MemBytes x, w, w_scale, bias, ws, ws_ref, y, y_ref;
  Buffers(Memory& mem, const Case& c, const HostData& h)
      : x(mem, h.x, 0),
        w(mem, h.w, c.w_offset),
        w_scale(mem, h.w_scale, 0),
        bias(mem, h.bias, 0),
        ws(mem, std::vector<uint8_t>(static_cast<size_t>(c.ws_bytes()), kWorkspaceSentinel), c.ws_offset),
        ws_ref(mem, std::vector<uint8_t>(static_cast<size_t>(c.ws_bytes()), kWorkspaceSentinel), 0),
        y(mem, h.y, 0),
        y_ref(mem, h.y, 0) {}
};

// First differing byte of two results, or -1.
inline int64_t first_difference(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
  if (a.size() != b.size()) return 0;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i] != b[i]) return static_cast<int64_t>(i);
  return -1;
}

// One case: linear_q4_0 and quantize + gemm on `stream`, then the bytes.
inline void expect_matches(Memory& mem, const Case& c, std::mt19937_64& rng, qg::Stream stream) {
  SCOPED_TRACE(c.describe());
  const HostData h = make_data(c, rng);
  Buffers b(mem, c, h);
  const qg::Device d = mem.device();
  const void* bias = c.bias ? b.bias.ptr() : nullptr;
  const qg::Status s = run_linear(c, b.x.ptr(), b.ws.ptr(), b.w.ptr(), b.w_scale.ptr(), b.y.ptr(), bias, d, stream);
  ASSERT_TRUE(s.ok()) << s.message();
  const qg::Status r =
      quantize_then_gemm(c, b.x.ptr(), b.ws_ref.ptr(), b.w.ptr(), b.w_scale.ptr(), b.y_ref.ptr(), bias, d, stream);
  ASSERT_TRUE(r.ok()) << r.message();
  mem.synchronize(stream);
  const std::vector<uint8_t> y = b.y.read(), y_ref = b.y_ref.read();
  const int64_t at = first_difference(y, y_ref);
  EXPECT_EQ(at, -1) << "y differs from quantize + gemm at byte " << at << " (element "
                    << at / qg::dtype_size(c.y_dtype) << ")";
  // The reference itself wrote every element and nothing between rows.
  const int64_t ysize = qg::dtype_size(c.y_dtype);
  for (int64_t i = 0; i < c.n * c.ldy(); ++i) {
    const bool inside = i % c.ldy() < c.m;
    if (inside == is_poison_element(&y_ref[i * ysize], c.y_dtype)) {
      ADD_FAILURE() << "y element " << i << (inside ? " was not written" : " (a gap) was written");
      break;
    }
  }
}

// N = 1..9 and 16 (the decode kernel, then the tensor-core one), each K, every
// x / y dtype pair, with and without a bias (of a rotating dtype), now and
// then relu, M cycling through tails of the kernels' row groups.
inline std::vector<Case> shape_cases(const std::vector<int64_t>& ks) {
  const int64_t ns[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 16};
  const int64_t ms[] = {1, 7, 64, 133, 19, 256};
  const qg::DType dts[] = {qg::DType::f32, qg::DType::f16, qg::DType::bf16};
  std::vector<Case> out;
  int i = 0;
  for (int64_t k : ks)
    for (int64_t n : ns)
      for (qg::DType xd : dts)
        for (qg::DType yd : dts)
          for (bool bias : {false, true}) {
            Case c;
            c.n = n;
            c.k = k;
            c.m = ms[i % 6];
            c.x_dtype = xd;
            c.y_dtype = yd;
            c.bias = bias;
            c.bias_dtype = dts[i % 3];
            c.relu = i % 4 == 3;
            ++i;
            out.push_back(c);
          }
  return out;
}

// The tensor-core GEMMs' shapes (M >= 128, K a multiple of 256; N past the
// decode kernel's, across the 16- to 128-token tiles, with tails, and split
// K where the tiles are few), every x dtype, padded x rows now and then.
inline std::vector<Case> tensor_core_cases() {
  const int64_t ns[] = {9, 16, 17, 33, 64, 65, 130, 300};
  const qg::DType dts[] = {qg::DType::f32, qg::DType::f16, qg::DType::bf16};
  std::vector<Case> out;
  int i = 0;
  for (int64_t k : {256, 4096})
    for (int64_t n : ns)
      for (int64_t m : {128, 300}) {
        Case c;
        c.n = n;
        c.m = m;
        c.k = k;
        c.x_dtype = dts[i % 3];
        c.y_dtype = dts[(i / 3) % 3];
        c.bias = i % 2 == 0;
        c.bias_dtype = dts[(i / 2) % 3];
        c.x_pad = i % 4 == 1 ? 5 : 0;
        c.y_pad = i % 5 == 2 ? 3 : 0;
        c.relu = i % 3 == 2;
        ++i;
        out.push_back(c);
      }
  return out;
}

// Strides and alignments the fast paths refuse or special-case: padded x
// rows, y rows wider than M, weight rows only 2-byte aligned (the per-block
// path), a workspace only 4-byte aligned (A read word by word).
inline std::vector<Case> layout_cases() {
  std::vector<Case> out;
  const int64_t ns[] = {1, 3, 8, 12};
  for (int64_t n : ns)
    for (int variant = 0; variant < 4; ++variant) {
      Case c;
      c.n = n;
      c.m = 77;
      c.k = variant % 2 ? 4096 : 288;
      c.x_dtype = variant == 2 ? qg::DType::bf16 : qg::DType::f16;
      c.y_dtype = variant == 1 ? qg::DType::f16 : qg::DType::f32;
      c.bias = variant != 3;
      c.x_pad = 3 + variant;
      c.y_pad = 5;
      c.w_pad = variant == 0 ? 2 : (variant == 2 ? 16 : 0);
      c.w_offset = variant == 1 ? 2 : 0;
      c.ws_offset = variant == 3 ? 4 : 0;
      out.push_back(c);
    }
  return out;
}

// The same cases with int8 weights (linear_int8): the decode and tile
// tails of the int8 kernels, K not a multiple of 16 now and then (the
// kernels that need 16-byte rows refuse it).
inline std::vector<Case> int8_cases(std::vector<Case> cases) {
  int i = 0;
  for (Case& c : cases) {
    c.weight = qg::Format::i8;
    if (i++ % 5 == 4) c.k += 8;
    c.w_offset = 0;  // int8 rows have no 2-byte-aligned fast path to test
  }
  return cases;
}

}  // namespace qgtest::linear
