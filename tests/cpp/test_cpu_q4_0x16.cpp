// SPDX-License-Identifier: MIT
// test_cpu_q4_0x16.cpp: q4_0x16 weights (formats.h) and qg::repack.
// * repack: the documented byte layout, exact both ways, strides, and every
//   refusal (rows not a multiple of 16, K, overlap, a device array, a pair
//   of formats it does not convert);
// * the CPU kernels (cpu_q4_0x16_scalar, _avx2, _avx_vnni, _avx512_vnni,
//   _amx) through the shared GEMM harness, which hands them qg::repack's
//   groups of each case's Q4_0 rows: every N from 1, group tails of A,
//   padded (unaligned) groups, strided C in every dtype, the epilogue, the
//   byte extremes and non-finite scales, against the float64 reference;
// * the promise that they give the panel kernels' bits: each equals
//   cpu_q4_0x16_scalar at every N, and cpu_avx512_vnni_panel / cpu_avx2_panel
//   on the same rows as Q4_0 where those run (N >= 4);
// * the public calls: qg::gemm and qg::linear_q4_0 take q4_0x16 weights and
//   dispatch picks these kernels.
// A kernel's tests are skipped where the CPU (or QG_CPU_ISA) lacks its ISA.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend.h"
#include "cpu/kernels.h"
#include "cpu_simd_cases.h"
#include "qg/qg.h"
#include "test_util.h"

namespace {

using qgtest::cpu_simd::kernel_runs_here;
using qgtest::f2u;
using qgtest::GemmCase;

constexpr qg::Format kX16 = qg::Format::q4_0x16;

// q4_0 rows [rows, K/32] -> q4_0x16 with qg::repack (contiguous both sides).
std::vector<uint8_t> to_x16(const std::vector<uint8_t>& rows, int64_t m, int64_t k) {
  std::vector<uint8_t> out(static_cast<size_t>(m / 16 * (k / 32) * 288));
  qg::RepackArgs r;
  r.x = rows.data();
  r.rows = m;
  r.k = k;
  r.x_row_stride = k / 32 * 18;
  r.y = out.data();
  r.y_row_stride = k / 32 * 288;
  const qg::Status s = qg::repack(r);
  EXPECT_TRUE(s.ok()) << s.message();
  return out;
}

// ------------------------------------------------------------------ repack

// Row r's block b lands at group r / 16, block b: its scale at byte 256 +
// 2 (r % 16), its code byte j at 64 (j / 4) + 4 (r % 16) + j % 4; and back.
TEST(Repack, DocumentedLayoutBothWays) {
  QG_SEEDED_RNG(rng, 9100);
  const int64_t m = 48, k = 96, nb = k / 32;
  std::vector<uint8_t> rows(static_cast<size_t>(m * nb * 18));
  for (uint8_t& b : rows) b = static_cast<uint8_t>(rng());
  const std::vector<uint8_t> x16 = to_x16(rows, m, k);
  for (int64_t r = 0; r < m; ++r)
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* src = &rows[(r * nb + b) * 18];
      const uint8_t* blk = &x16[((r / 16) * nb + b) * 288];
      ASSERT_EQ(std::memcmp(blk + 256 + 2 * (r % 16), src, 2), 0) << "scale of row " << r << " block " << b;
      for (int j = 0; j < 16; ++j)
        ASSERT_EQ(blk[64 * (j / 4) + 4 * (r % 16) + j % 4], src[2 + j]) << "row " << r << " block " << b << " byte " << j;
    }
  std::vector<uint8_t> back(rows.size(), 0);
  qg::RepackArgs r;
  r.from = kX16;
  r.to = qg::Format::q4_0;
  r.x = x16.data();
  r.rows = m;
  r.k = k;
  r.x_row_stride = nb * 288;
  r.y = back.data();
  r.y_row_stride = nb * 18;
  ASSERT_TRUE(qg::repack(r).ok());
  EXPECT_EQ(back, rows);
}

// Padded rows in, padded groups out: only each side's blocks are read and
// written (the padding keeps its sentinel).
TEST(Repack, RowStridesBothSides) {
  QG_SEEDED_RNG(rng, 9110);
  const int64_t m = 32, k = 64, nb = 2, xs = nb * 18 + 5, ys = nb * 288 + 11;
  std::vector<uint8_t> rows(static_cast<size_t>(m * xs), 0xEE);
  for (int64_t r = 0; r < m; ++r)
    for (int64_t i = 0; i < nb * 18; ++i) rows[r * xs + i] = static_cast<uint8_t>(rng());
  std::vector<uint8_t> x16(static_cast<size_t>(m / 16 * ys), 0xA5);
  qg::RepackArgs a;
  a.x = rows.data();
  a.rows = m;
  a.k = k;
  a.x_row_stride = xs;
  a.y = x16.data();
  a.y_row_stride = ys;
  ASSERT_TRUE(qg::repack(a).ok());
  for (int64_t g = 0; g < m / 16; ++g)
    for (int64_t i = nb * 288; i < ys; ++i) ASSERT_EQ(x16[g * ys + i], 0xA5) << "group " << g << " padding byte " << i;
  std::vector<uint8_t> dense(rows.size());
  for (int64_t r = 0; r < m; ++r) std::memcpy(&dense[r * nb * 18], &rows[r * xs], nb * 18);
  dense.resize(static_cast<size_t>(m * nb * 18));
  const std::vector<uint8_t> want = to_x16(dense, m, k);
  for (int64_t g = 0; g < m / 16; ++g)
    ASSERT_EQ(std::memcmp(&x16[g * ys], &want[g * nb * 288], nb * 288), 0) << "group " << g;
}

TEST(Repack, RefusesWithTheFix) {
  std::vector<uint8_t> x(4096), y(4096);
  const auto call = [&](auto&& edit) {
    qg::RepackArgs a;
    a.x = x.data();
    a.rows = 16;
    a.k = 32;
    a.x_row_stride = 18;
    a.y = y.data();
    a.y_row_stride = 288;
    edit(a);
    return qg::repack(a);
  };
  const auto expect = [](const qg::Status& s, const std::string& part) {
    EXPECT_EQ(s.code(), qg::StatusCode::invalid_argument) << s.message();
    EXPECT_NE(s.message().find("qg.repack"), std::string::npos) << s.message();
    EXPECT_NE(s.message().find(part), std::string::npos) << s.message();
  };
  EXPECT_TRUE(call([](qg::RepackArgs&) {}).ok());
  expect(call([](qg::RepackArgs& a) { a.rows = 24; }), "not a multiple of 16");
  expect(call([](qg::RepackArgs& a) { a.k = 48; }), "not a multiple of 32");
  expect(call([](qg::RepackArgs& a) { a.to = qg::Format::q8_0; }), "q4_0 to q4_0x16 and back");
  expect(call([](qg::RepackArgs& a) { a.x_row_stride = 10; }), "x row stride");
  expect(call([&](qg::RepackArgs& a) { a.y = x.data() + 100; }), "overlaps");
  expect(call([](qg::RepackArgs& a) { a.device = qg::Device::cuda(0); }), "repack it on the host");
  expect(call([](qg::RepackArgs& a) { a.x = nullptr; }), "must not be null");
}

// ----------------------------------------------------------- the kernels

int64_t min_n_of(const std::string& name) { return name == "cpu_q4_0x16_amx" ? qg::detail::cpu::kQ4x16AmxMinN : 1; }

std::vector<int64_t> ns_for(const std::string& name, std::vector<int64_t> ns) {
  return qgtest::cpu_simd::at_least(std::move(ns), min_n_of(name));
}

class CpuQ4x16 : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    std::string why;
    if (!kernel_runs_here(GetParam(), &why))
      GTEST_SKIP() << GetParam() << " cannot run on this CPU (or under QG_CPU_ISA): " << why;
  }
  qgtest::HostMemory mem_;
  qgtest::GemmKernelTester gemm_{qg::detail::cpu::registry(), GetParam(), mem_, nullptr, kX16};
  qgtest::GemmKernelTester scalar_{qg::detail::cpu::registry(), "cpu_q4_0x16_scalar", mem_, nullptr, kX16};

  // Against the float64 reference, and the reference kernel's bits.
  void run_check(const GemmCase& c) {
    GemmCase v = c, s = c;
    ASSERT_TRUE(gemm_.run_and_check(v)) << gemm_.refusals();
    ASSERT_TRUE(scalar_.run(s));
    ASSERT_EQ(v.c_out, s.c_out) << GetParam() << "'s bytes differ from cpu_q4_0x16_scalar's (" << c.describe() << ")";
  }
};

// M = 16..80: one to five groups (a task takes four, or at small N the
// decode's row ranges); N from 1 to 17 every A group width, 19..33 two
// groups, 35..47 three of 11 to 16 rows (the AMX kernel's tile widths, from
// its least N), 63..65 the four-group chunk edge, 129 three chunks; K = 32
// one block, 96 an odd count.
TEST_P(CpuQ4x16, EveryWidthAndGroupCount) {
  qgtest::cpu_simd::random_shapes(
      {32, 96}, {16, 32, 48, 80},
      ns_for(GetParam(), {1, 2, 3, 4, 5, 6, 7, 8, 9, 12, 15, 16, 17, 19, 23, 29, 31, 32, 33, 35, 39, 43, 47, 63, 64, 65, 129}),
      [this](const GemmCase& c) { run_check(c); }, 9200);
}

TEST_P(CpuQ4x16, LongRows) {
  qgtest::cpu_simd::random_shapes({4096, 14336}, {16, 48}, ns_for(GetParam(), {1, 2, 5, 17}),
                                  [this](const GemmCase& c) { run_check(c); }, 9300);
}

// Groups 7 bytes apart past their blocks (every group unaligned), strided C
// of each output dtype.
TEST_P(CpuQ4x16, PaddedGroupsAndStridedC) {
  qgtest::cpu_simd::padded_rows_and_strided_c({16, 48}, ns_for(GetParam(), {1, 3, 17, 40}),
                                              [this](const GemmCase& c) { run_check(c); }, 9400);
}

// alpha, beta * C, bias, relu and row / column scales, in every dtype.
TEST_P(CpuQ4x16, Epilogue) {
  QG_SEEDED_RNG(rng, 9500);
  for (int64_t n : ns_for(GetParam(), {1, 6, 17}))
    for (qg::DType dt : {qg::DType::f32, qg::DType::f16, qg::DType::bf16}) {
      SCOPED_TRACE("N=" + std::to_string(n) + " " + qg::dtype_name(dt));
      GemmCase c = qgtest::random_case(rng, 32, n, 256);
      qgtest::set_c_layout(c, dt, 1, 35);
      c.alpha = 0.75f;
      c.beta = -0.5f;
      c.row_scale.assign(32, 1.25f);
      c.col_scale.assign(static_cast<size_t>(n), 0.5f);
      c.bias.resize(32 * 4);
      for (int i = 0; i < 32; ++i) {
        const float v = 0.1f * static_cast<float>(i) - 1.0f;
        std::memcpy(&c.bias[4 * i], &v, 4);
      }
      c.activation = qg::Activation::relu;
      run_check(c);
      if (HasFailure()) return;
    }
}

TEST_P(CpuQ4x16, NonFiniteScaleInEveryLane) {
  qgtest::cpu_simd::non_finite_scale_everywhere(gemm_, [this](const GemmCase& c) { run_check(c); }, 32,
                                                ns_for(GetParam(), {3})[0], 96, {0, 1}, 9600);
}

TEST_P(CpuQ4x16, ExtremeCodesExact) {
  qgtest::cpu_simd::extreme_codes_exact(gemm_, {32, 4096}, {16, 32}, ns_for(GetParam(), {1, 4, 17}),
                                        [](const GemmCase&) {}, 9700);
}

INSTANTIATE_TEST_SUITE_P(Kernels, CpuQ4x16,
                         ::testing::Values("cpu_q4_0x16_scalar", "cpu_q4_0x16_avx2", "cpu_q4_0x16_avx_vnni",
                                           "cpu_q4_0x16_avx512_vnni", "cpu_q4_0x16_amx"),
                         qgtest::param_name);

// The same rows as Q4_0 through a panel kernel (N >= 4) and as q4_0x16
// through each q4_0x16 kernel: the same bytes out, for every dtype.
class CpuQ4x16Panel : public ::testing::TestWithParam<std::string> {};

TEST_P(CpuQ4x16Panel, SameBitsAsThePanelKernel) {
  std::string why;
  for (const std::string& name : {std::string("cpu_avx2_panel"), GetParam()})
    if (!kernel_runs_here(name, &why)) GTEST_SKIP() << name << " cannot run here: " << why;
  const char* panel = kernel_runs_here("cpu_avx512_vnni_panel", &why) ? "cpu_avx512_vnni_panel" : "cpu_avx2_panel";
  qgtest::HostMemory mem;
  qgtest::GemmKernelTester a(qg::detail::cpu::registry(), panel, mem);
  qgtest::GemmKernelTester b(qg::detail::cpu::registry(), GetParam(), mem, nullptr, kX16);
  uint64_t salt = 0;
  for (int64_t m : {16, 48})
    for (int64_t n : ns_for(GetParam(), {4, 5, 16, 17, 21, 70}))
      for (qg::DType dt : {qg::DType::f32, qg::DType::bf16}) {
        SCOPED_TRACE("M=" + std::to_string(m) + " N=" + std::to_string(n) + " " + qg::dtype_name(dt));
        QG_SEEDED_RNG(rng, 9800 + ++salt);
        GemmCase c = qgtest::random_case(rng, m, n, 1024, /*a_pad=*/3, /*b_pad=*/5);
        qgtest::set_c_layout(c, dt, 1, m + 1);
        GemmCase x = c, y = c;
        ASSERT_TRUE(a.run(x)) << a.refusals();
        ASSERT_TRUE(b.run(y)) << b.refusals();
        EXPECT_EQ(x.c_out, y.c_out) << GetParam() << "'s bytes differ from " << panel << "'s";
      }
}

INSTANTIATE_TEST_SUITE_P(Kernels, CpuQ4x16Panel,
                         ::testing::Values("cpu_q4_0x16_scalar", "cpu_q4_0x16_avx2", "cpu_q4_0x16_avx_vnni",
                                           "cpu_q4_0x16_avx512_vnni", "cpu_q4_0x16_amx"),
                         qgtest::param_name);

// ------------------------------------------------------- the public calls

// Whether dispatch runs a Q4_0 call with N activation rows on a panel
// kernel (cpu_amx included), whose sums q4_0x16's kernels share; not under
// QG_CPU_ISA=scalar, nor at N < 4 (the tile kernels).
bool q4_0_runs_panel_arithmetic(int64_t n) {
  std::vector<uint8_t> w(18), a(static_cast<size_t>(36 * n));
  std::vector<float> y(static_cast<size_t>(n));
  qg::GemmArgs g;
  g.a = qg::packed_operand(w.data(), qg::Format::q4_0, 1, 32);
  g.b = qg::packed_operand(a.data(), qg::Format::q8_1, n, 32);
  g.c = y.data();
  g.ldc = n;
  qg::Explanation e;
  EXPECT_TRUE(qg::explain(g, &e).ok());
  return e.chosen == "cpu_amx" || e.chosen.find("_panel") != std::string::npos;
}

// qg::gemm with a q4_0x16 weight: dispatch picks one of its kernels, and
// the result is the Q4_0 panel path's (N >= 4) on the same rows.
TEST(Q4x16Public, GemmDispatchesToItsKernels) {
  QG_SEEDED_RNG(rng, 9900);
  const int64_t m = 64, n = 5, k = 512;
  GemmCase c = qgtest::random_case(rng, m, n, k);
  const std::vector<uint8_t> x16 = to_x16(c.a, m, k);
  std::vector<float> y(static_cast<size_t>(m * n));
  qg::GemmArgs g;
  g.a = qg::packed_operand(x16.data(), kX16, m, k);
  g.b = qg::packed_operand(c.b.data(), qg::Format::q8_1, n, k);
  g.c = y.data();
  g.ldc = n;
  g.device = qg::Device::cpu();
  qg::Explanation e;
  ASSERT_TRUE(qg::explain(g, &e).ok());
  EXPECT_EQ(e.chosen.rfind("cpu_q4_0x16_", 0), 0u) << e.chosen;
  EXPECT_NE(e.problem.find("q4_0x16"), std::string::npos) << e.problem;
  ASSERT_TRUE(qg::gemm(g).ok());
  std::vector<float> want(y.size());
  ASSERT_TRUE(qg::gemm_q4_0_q8_1(c.a.data(), c.b.data(), want.data(), m, n, k, qg::Device::cpu()).ok());
  const bool same_sum = q4_0_runs_panel_arithmetic(n);
  for (size_t i = 0; i < y.size(); ++i) {
    if (same_sum) ASSERT_EQ(f2u(y[i]), f2u(want[i])) << "element " << i;
    else ASSERT_NEAR(y[i], want[i], 1e-4 * (1.0 + std::abs(want[i]))) << "element " << i;
  }
}

TEST(Q4x16Public, GemmRefusesRowsThatAreNotGroups) {
  std::vector<uint8_t> w(288 * 4), a(36 * 4);
  std::vector<float> y(64);
  qg::GemmArgs g;
  g.a = qg::packed_operand(w.data(), kX16, 24, 32);
  g.b = qg::packed_operand(a.data(), qg::Format::q8_1, 1, 32);
  g.c = y.data();
  g.ldc = 1;
  const qg::Status s = qg::gemm(g);
  EXPECT_EQ(s.code(), qg::StatusCode::invalid_argument);
  EXPECT_NE(s.message().find("not a multiple of 16"), std::string::npos) << s.message();
}

// q4_0x16 is a CPU weight layout: on another device, as the activation
// operand, and to quantize or dequantize it is refused with the fix (no
// kernel would take it; a generic one must never misread it as q4_0).
TEST(Q4x16Public, RefusedWhereNoKernelReadsIt) {
  std::vector<uint8_t> w(288 * 2), a(36 * 16);
  std::vector<float> y(256), x(512);
  const auto expect = [](const qg::Status& s, const std::string& part) {
    EXPECT_EQ(s.code(), qg::StatusCode::invalid_argument) << s.message();
    EXPECT_NE(s.message().find(part), std::string::npos) << s.message();
  };
  qg::GemmArgs g;
  g.a = qg::packed_operand(w.data(), kX16, 16, 32);
  g.b = qg::packed_operand(a.data(), qg::Format::q8_1, 1, 32);
  g.c = y.data();
  g.ldc = 1;
  g.device = qg::Device::cuda(0);
  expect(qg::gemm(g), "layout of qg's CPU kernels");
  expect(qg::gemm(g), "qg.repack(w, \"q4_0\")");
  g.device = qg::Device::cpu();
  g.b = qg::packed_operand(w.data(), kX16, 16, 32);
  expect(qg::gemm(g), "b is q4_0x16, a weight layout");
  qg::DequantizeArgs d;
  d.format = kX16;
  d.xq = w.data();
  d.rows = 16;
  d.k = 32;
  d.xq_row_stride = 288;
  d.y = x.data();
  d.y_row_stride = 32;
  expect(qg::dequantize(d), "go through q4_0");
  qg::TensorView v;
  const int64_t shape[3] = {1, 1, 288};
  v.data = w.data();
  v.dtype = qg::DType::u8;
  v.ndim = 3;
  for (int i = 0; i < 3; ++i) v.shape[i] = shape[i];
  v.strides[0] = 288;
  v.strides[1] = 288;
  v.strides[2] = 1;
  qg::ResultSpec spec;
  expect(qg::result_spec(qg::DequantizeViews{kX16, v}, &spec), "go through q4_0");
}

// linear_q4_0 with weight_format q4_0x16: the same bits as with the Q4_0
// rows wherever both run the panel arithmetic, and close to them where the
// Q4_0 call runs a tile kernel (N < 4: a block's four lanes summed apart).
TEST(Q4x16Public, LinearTakesRepackedWeights) {
  QG_SEEDED_RNG(rng, 9950);
  const int64_t m = 48, k = 256;
  std::vector<uint8_t> wq(static_cast<size_t>(m * k / 32 * 18));
  std::vector<float> wf(static_cast<size_t>(m * k));
  std::normal_distribution<float> nd;
  for (float& v : wf) v = nd(rng);
  ASSERT_TRUE(qg::quantize(qg::QuantizeArgs{qg::Format::q4_0, wf.data(), qg::DType::f32, m, k, k, wq.data(), k / 32 * 18,
                                            qg::Device::cpu()})
                  .ok());
  const std::vector<uint8_t> x16 = to_x16(wq, m, k);
  for (int64_t n : {1, 4, 9}) {
    SCOPED_TRACE("N=" + std::to_string(n));
    std::vector<float> x(static_cast<size_t>(n * k));
    for (float& v : x) v = nd(rng);
    std::vector<uint8_t> ws(static_cast<size_t>(n * k / 32 * 36));
    std::vector<float> y_rows(static_cast<size_t>(n * m)), y_x16(y_rows.size());
    for (bool repacked : {false, true}) {
      qg::LinearQ4_0Args a;
      a.x = x.data();
      a.n = n;
      a.k = k;
      a.x_row_stride = k;
      a.xq_workspace = ws.data();
      a.weight_q = repacked ? x16.data() : wq.data();
      a.weight_format = repacked ? kX16 : qg::Format::q4_0;
      a.m = m;
      a.weight_row_stride = repacked ? k / 32 * 288 : k / 32 * 18;
      a.y = repacked ? y_x16.data() : y_rows.data();
      a.ldy = m;
      a.device = qg::Device::cpu();
      const qg::Status s = qg::linear_q4_0(a);
      ASSERT_TRUE(s.ok()) << s.message();
    }
    const bool same_sum = q4_0_runs_panel_arithmetic(n);
    for (size_t i = 0; i < y_rows.size(); ++i) {
      if (same_sum) ASSERT_EQ(f2u(y_x16[i]), f2u(y_rows[i])) << "element " << i;
      else ASSERT_NEAR(y_x16[i], y_rows[i], 1e-4 * (1.0 + std::abs(y_rows[i]))) << "element " << i;
    }
  }
}

}  // namespace
