// SPDX-License-Identifier: MIT
// test_cpu_panel.cpp: the panel kernels (cpu_avx512_vnni_panel,
// cpu_avx_vnni_panel and cpu_avx2_panel, N >= 4; cpu_amx, N >= 16, whose
// shapes here are raised to that), beyond the shared GEMM suite
// (test_gemm_cpu.cpp runs that on them too): every tail of their 16-row panels, of their A
// groups (at most 16 rows, split evenly) and chunks (four groups; cpu_amx's
// as many as its A bytes allow at that K, 4 to 16 here), and of the
// AVX2 kernel's passes (at most four A rows, split evenly); padded rows and
// strided C, K = 0 with the whole epilogue, A groups in the call's own
// buffer, a non-finite scale at every lane of a panel and of a group, the
// byte extremes, the promise that an output's bits depend only on its own W
// row and A row (each is one lane, summed in one order whatever the call's M
// and N), and that all three kernels give the same bits.
// A kernel's tests are skipped where the CPU (or QG_CPU_ISA) lacks its ISA.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "amx_tile_state.h"
#include "backend.h"
#include "cpu/kernels.h"
#include "epilogue.h"
#include "cpu_simd_cases.h"
#include "test_util.h"

namespace {

using qgtest::cpu_simd::kernel_runs_here;
using qgtest::f2u;
using qgtest::GemmCase;

int64_t min_n_of(const std::string& name) {
  if (name == "cpu_amx") return qg::detail::cpu::kQ4AmxMinN;
  return name == "cpu_avx512_vnni_panel" ? qg::detail::cpu::kQ4PanelMinN : qg::detail::cpu::kQ4PanelAvx2MinN;
}

// The N of a test's shapes that `name` takes: each raised to its least N,
// without repeats.
std::vector<int64_t> ns_for(const std::string& name, std::vector<int64_t> ns) {
  return qgtest::cpu_simd::at_least(std::move(ns), min_n_of(name));
}

class CpuPanel : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    ASSERT_NE(qgtest::find_gemm_kernel(qg::detail::cpu::registry(), GetParam()), nullptr)
        << "the CPU registry has no kernel named " << GetParam();
    std::string why;
    if (!kernel_runs_here(GetParam(), &why))
      GTEST_SKIP() << GetParam() << " cannot run on this CPU (or under QG_CPU_ISA): " << why;
  }
  qgtest::HostMemory mem_;
  qgtest::GemmKernelTester gemm_{qg::detail::cpu::registry(), GetParam(), mem_};

  void run_check(const GemmCase& c) {
    GemmCase v = c;
    ASSERT_TRUE(gemm_.run_and_check(v)) << gemm_.refusals();
  }
};

// M from 1 to 17 covers every remainder of the 16-row panel, 31..33 the
// second panel's; N from 4 (the least they take) to 17 every group width
// (and every split of a group into the AVX2 kernel's passes) and the first
// even split into groups (17 = 9 + 8), 19..29 the splits into two groups of
// 9 to 15 rows (cpu_amx's group widths: its tile shapes), 31..33 two groups,
// 63..65 the four-group chunk edge, 129 three chunks; K = 32 is one block, 96
// an odd count.
TEST_P(CpuPanel, EveryPanelGroupAndChunkTail) {
  std::vector<int64_t> ms;
  for (int64_t m = 1; m <= 17; ++m) ms.push_back(m);
  for (int64_t m : {31, 32, 33}) ms.push_back(m);
  qgtest::cpu_simd::random_shapes(
      {32, 96}, ms,
      ns_for(GetParam(), {4, 5, 6, 7, 8, 9, 12, 15, 16, 17, 19, 21, 23, 25, 27, 29, 31, 32, 33, 63, 64, 65, 129}),
      [this](const GemmCase& c) { run_check(c); }, 5000);
}

// K = 4096 and 14336: long rows, the pack's prefetch running past each row's
// end, panels of 128 and 448 blocks. cpu_amx sizes its chunks by their A
// bytes (16 groups at K = 4096, 4 at K = 14336), so there N = 70 and 129
// run two and three chunks, the last a part one.
TEST_P(CpuPanel, LongRows) {
  qgtest::cpu_simd::random_shapes({4096, 14336}, {5, 16, 33}, ns_for(GetParam(), {4, 5, 16, 17, 70, 129}),
                                  [this](const GemmCase& c) { run_check(c); }, 5100);
}

// Odd row strides and C with gaps (transposed and row-major) of each output
// type; N = 32 fills two 16-token groups.
TEST_P(CpuPanel, PaddedRowsAndStridedC) {
  qgtest::cpu_simd::padded_rows_and_strided_c({1, 9, 17}, ns_for(GetParam(), {5, 17, 32, 40}), [this](const GemmCase& c) { run_check(c); },
                                              5200);
}

// K = 0 with the whole epilogue (alpha, beta * C, bf16 bias, relu) in every
// output dtype and C layout: the shared suite's case has N = 3, below these
// kernels.
TEST_P(CpuPanel, EpilogueWithKZero) {
  QG_SEEDED_RNG(rng, 5260);
  const int64_t n = ns_for(GetParam(), {6})[0];
  for (qg::DType dt : {qg::DType::f32, qg::DType::f16, qg::DType::bf16})
    for (const qgtest::gemm_suite::CLayout& l : qgtest::gemm_suite::c_layouts(19, n)) {
      SCOPED_TRACE(std::string("out ") + qg::dtype_name(dt) + ", C " + l.name);
      GemmCase c;
      c.m = 19;
      c.n = n;
      qgtest::set_c_layout(c, dt, l.ldc, l.ldc_n);
      c.alpha = 3.0f;
      c.beta = -0.5f;
      qgtest::fill_c_values(c, rng, 10.0f);
      qgtest::set_bias(c, rng, qg::DType::bf16, 10.0f);
      c.activation = qg::Activation::relu;
      run_check(c);
      if (HasFailure()) return;
    }
}

// The panels store a non-plain epilogue a run of 16 rows at a time
// (cpu/epilogue_rows.h): the same bytes as epilogue_store on each of the
// plain call's fp32 sums, for every output dtype, every epilogue step at
// once, C m-contiguous (x @ W^T) and interleaved, panels whole and cut.
TEST_P(CpuPanel, EpilogueRunsMatchElementEpilogue) {
  QG_SEEDED_RNG(rng, 5280);
  const qgtest::gemm_suite::Shape s{37, 21, 256};
  const auto& all = qgtest::gemm_suite::epilogue_configs().back();  // every step, bias bf16
  for (qg::DType dt : {qg::DType::f32, qg::DType::f16, qg::DType::bf16})
    for (const qgtest::gemm_suite::CLayout& l : qgtest::gemm_suite::run_layouts(s.m, s.n)) {
      SCOPED_TRACE(std::string("out ") + qg::dtype_name(dt) + ", C " + l.name);
      GemmCase e = qgtest::gemm_suite::epilogue_case(rng, s, all, dt, l);
      GemmCase sums = e;  // the same operands, C = the plain fp32 sums
      sums.alpha = 1.0f;
      sums.beta = 0.0f;
      sums.row_scale.clear();
      sums.col_scale.clear();
      sums.bias.clear();
      sums.activation = qg::Activation::none;
      qgtest::set_c_layout(sums, qg::DType::f32, 1, s.m);
      ASSERT_TRUE(gemm_.run(sums)) << gemm_.refusals();
      ASSERT_TRUE(gemm_.run(e)) << gemm_.refusals();
      std::vector<uint8_t> expect = e.c_init;
      qg::detail::EpilogueParams p;
      p.c = expect.data() + qgtest::kCFront;
      p.ldc = e.ldc;
      p.ldc_n = e.ldc_n;
      p.c_dtype = e.c_dtype;
      p.alpha = e.alpha;
      p.beta = e.beta;
      p.row_scale = e.row_scale.data();
      p.col_scale = e.col_scale.data();
      p.bias = e.bias.data();
      p.bias_dtype = e.bias_dtype;
      p.relu = e.activation == qg::Activation::relu;
      for (int64_t i = 0; i < s.m; ++i)
        for (int64_t j = 0; j < s.n; ++j) qg::detail::epilogue_store(p, i, j, static_cast<float>(sums.out(i, j)));
      EXPECT_EQ(expect, e.c_out);
    }
}

// The shared suite's wide scale range (subnormal fp16 scales included) at N
// every panel kernel takes (the suite's own N are below cpu_amx's), and an
// empty M.
TEST_P(CpuPanel, SubnormalAndLargeScalesAndEmptyM) {
  QG_SEEDED_RNG(rng, 5290);
  for (int64_t n : ns_for(GetParam(), {11, 17, 33})) {
    SCOPED_TRACE("N=" + std::to_string(n));
    run_check(qgtest::random_case(rng, 9, n, 32 * 9, 0, 0, /*emin=*/-15, /*emax=*/7));
    run_check(qgtest::random_case(rng, 21, n, 512, 0, 0, /*emin=*/-15, /*emax=*/7));
    if (HasFailure()) return;
  }
  GemmCase empty = qgtest::random_case(rng, 0, ns_for(GetParam(), {5})[0], 64);
  run_check(empty);
}

// Enough A rows (N = 1700 at K = 4096: 8.7 MB of A groups) that the groups
// outgrow the buffer kept per thread and live for the call only.
TEST_P(CpuPanel, LargeAGroupsInTheCallsOwnBuffer) {
  QG_SEEDED_RNG(rng, 5270);
  run_check(qgtest::random_case(rng, 21, 1700, 4096));
}

// Below its least N it refuses, and says so.
TEST_P(CpuPanel, RefusesFewActivationRows) {
  const int64_t min_n = min_n_of(GetParam());
  for (int64_t n = 1; n < min_n; ++n) {
    QG_SEEDED_RNG(rng, 5250 + n);
    GemmCase c = qgtest::random_case(rng, 8, n, 64);
    EXPECT_FALSE(gemm_.run(c)) << "N=" << n;
  }
  EXPECT_NE(gemm_.refusals().find("is below its " + std::to_string(min_n)), std::string::npos) << gemm_.refusals();
}

// An output is one int32 lane of one panel against one row of one group,
// summed block by block in the same order whatever else the call holds: the
// same W row and A row give the same bits at any M, N, position in the
// panel, group or chunk.
TEST_P(CpuPanel, OutputBitsDependOnlyOnTheirRows) {
  QG_SEEDED_RNG(rng, 5300);
  const int64_t k = 1024;
  GemmCase wide = qgtest::random_case(rng, 37, 70, k);
  ASSERT_TRUE(gemm_.run(wide));
  // A narrower call on a slice of the rows: W rows 3..11, A rows 20..26 (N = 7;
  // cpu_amx: 20..35).
  GemmCase part = wide;
  part.m = 9;
  part.n = ns_for(GetParam(), {7})[0];
  part.a.assign(wide.a.begin() + 3 * wide.a_stride, wide.a.begin() + 12 * wide.a_stride);
  part.b.assign(wide.b.begin() + 20 * wide.b_stride, wide.b.begin() + (20 + part.n) * wide.b_stride);
  qgtest::set_c_layout(part, qg::DType::f32, part.n, 1);
  ASSERT_TRUE(gemm_.run(part));
  for (int64_t i = 0; i < part.m; ++i)
    for (int64_t j = 0; j < part.n; ++j)
      ASSERT_EQ(f2u(static_cast<float>(part.out(i, j))), f2u(static_cast<float>(wide.out(3 + i, 20 + j))))
          << "C[" << i << ", " << j << "]";
}

// A +-Inf or NaN scale in one W row (every lane of a panel and the next
// panel's first) or one A row (every row of a 9 + 8 group split), in the
// first or a middle block: that row's (column's) outputs are +-Inf or NaN as
// the float64 reference says, and no other output is touched by it.
TEST_P(CpuPanel, NonFiniteScaleInEveryLane) {
  qgtest::cpu_simd::non_finite_scale_everywhere(gemm_, [this](const GemmCase& c) { run_check(c); }, 17, 17, 96, {0, 1},
                                                5400);
}

// The byte extremes, mixed within each int32 lane (four consecutive codes of
// one W row against four of one A row) and across lanes: nibbles 0, 8 and 15
// against codes -128, -127, 0 and 127, with unit scales so every output is an
// integer the kernel must hit exactly; then the largest block sums of either
// sign (|sum| = 2^15 at the extreme, still exact in fp32).
TEST_P(CpuPanel, ExtremeCodesExact) {
  qgtest::cpu_simd::extreme_codes_exact(gemm_, {32, 4096}, {1, 16, 19}, ns_for(GetParam(), {4, 5, 16, 21}),
                                        [](const GemmCase&) {}, 5500);
  if (HasFailure()) return;
  for (uint8_t nib : {uint8_t{0}, uint8_t{15}})
    for (int8_t code : {int8_t{-128}, int8_t{127}}) {
      SCOPED_TRACE("nibble " + std::to_string(nib) + " code " + std::to_string(code));
      QG_SEEDED_RNG(rng, 5600 + nib + code);
      GemmCase c = qgtest::random_case(rng, 17, ns_for(GetParam(), {6})[0], 4096);
      qgtest::cpu_simd::fill_uniform_codes(c, nib, code);
      GemmCase v = c;
      ASSERT_TRUE(gemm_.run(v));
      qgtest::expect_gemm_exact(v);
      EXPECT_EQ(v.out(0, 0), (nib - 8.0) * code * c.k);
    }
}

INSTANTIATE_TEST_SUITE_P(Kernels, CpuPanel,
                         ::testing::Values("cpu_amx", "cpu_avx512_vnni_panel", "cpu_avx_vnni_panel", "cpu_avx2_panel"),
                         qgtest::param_name);

// The AVX2, AVX-VNNI and AMX panel kernels perform the AVX-512 one's
// operations on the same values in the same order (whole block sums, one
// convert and one FMA each): the same bits, for every output dtype and the
// epilogue. Each pair runs where both of its kernels can, at the N both take.
class CpuPanelPair : public ::testing::TestWithParam<std::pair<std::string, std::string>> {};

TEST_P(CpuPanelPair, SameBits) {
  const auto& [first, second] = GetParam();
  std::string why;
  for (const std::string& name : {first, second})
    if (!kernel_runs_here(name, &why)) GTEST_SKIP() << name << " cannot run here: " << why;
  qgtest::HostMemory mem;
  qgtest::GemmKernelTester a(qg::detail::cpu::registry(), first, mem);
  qgtest::GemmKernelTester b(qg::detail::cpu::registry(), second, mem);
  uint64_t salt = 0;
  for (int64_t m : {1, 16, 37})
    for (int64_t n : {4, 5, 7, 16, 17, 19, 21, 23, 25, 29, 31, 70})  // 17..31: cpu_amx's group widths 8..16
      for (qg::DType dt : {qg::DType::f32, qg::DType::bf16}) {
        if (n < std::max(min_n_of(first), min_n_of(second))) continue;
        SCOPED_TRACE("M=" + std::to_string(m) + " N=" + std::to_string(n) + " " + qg::dtype_name(dt));
        QG_SEEDED_RNG(rng, 5700 + ++salt);
        GemmCase c = qgtest::random_case(rng, m, n, 1024, /*a_pad=*/3, /*b_pad=*/5);
        qgtest::set_c_layout(c, dt, 1, m + 1);
        GemmCase x = c, y = c;
        ASSERT_TRUE(a.run_and_check(x)) << a.refusals();
        ASSERT_TRUE(b.run(y)) << b.refusals();
        EXPECT_EQ(x.c_out, y.c_out) << second << "'s bytes differ from " << first << "'s";
      }
}

INSTANTIATE_TEST_SUITE_P(
    Kernels, CpuPanelPair,
    ::testing::Values(std::pair<std::string, std::string>{"cpu_avx512_vnni_panel", "cpu_amx"},
                      std::pair<std::string, std::string>{"cpu_avx512_vnni_panel", "cpu_avx2_panel"},
                      std::pair<std::string, std::string>{"cpu_avx2_panel", "cpu_avx_vnni_panel"}),
    [](const ::testing::TestParamInfo<std::pair<std::string, std::string>>& i) {
      return i.param.first + "_vs_" + i.param.second;
    });

// cpu_amx configures the tiles at a task's first pass over a panel, keeps
// them for the task's other passes, and puts back the calling thread's
// configuration at the task's end (or releases the tiles where there was
// none): AMX code that configures a thread's tiles once and keeps them
// (ggml does) still finds its configuration after a qg call. Run where
// cpu_amx runs; the call is small enough to stay on the calling thread, and
// it makes 16 passes in one task (four panels x A groups of 13, 12, 12 and
// 12 rows): a configuration switched to, and one kept from pass to pass.
#if defined(QG_TEST_AMX_INTRINSICS) && defined(__x86_64__)
TEST(CpuAmx, KeepsTheCallersTileConfiguration) {
  std::string why;
  if (!kernel_runs_here("cpu_amx", &why)) GTEST_SKIP() << "cpu_amx cannot run here: " << why;
  qgtest::HostMemory mem;
  qgtest::GemmKernelTester gemm(qg::detail::cpu::registry(), "cpu_amx", mem);
  QG_SEEDED_RNG(rng, 5800);
  const GemmCase c = qgtest::random_case(rng, 64, 49, 64);
  qgtest::expect_callers_tiles_kept([&] {
    GemmCase v = c;
    ASSERT_TRUE(gemm.run_and_check(v)) << gemm.refusals();
  });
}
#endif

}  // namespace
