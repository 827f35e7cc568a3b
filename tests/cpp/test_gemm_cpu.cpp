// SPDX-License-Identifier: MIT
// test_gemm_cpu.cpp: qg's GEMM on the CPU. The shared suite (test_util.h,
// qgtest::gemm_suite) runs on every CPU kernel registered for q4_0 x q8_1
// (cpu_avx512_vnni_panel, cpu_avx512_vnni, cpu_avx_vnni_panel, cpu_avx_vnni,
// cpu_avx2_panel, cpu_avx2, cpu_scalar: each forced through the registry by
// name, skipped where this CPU lacks its ISA) and on the
// public qg::gemm, against a float64 reference built from the same codes
// (Tier A), the quantization-quality check of reliability.md §9 (Tier B), the
// epilogue, and the Inf-scale block. Then what is CPU-only: thread counts, the
// registry's contents, the view API, and the pool under resizes.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <future>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "backend.h"
#include "cpu/kernels.h"
#include "dispatch.h"
#include "qg/qg.h"
#include "test_util.h"

namespace {

using qgtest::f2u;
using qgtest::GemmCase;

// ------------------------------------------------------------------ every CPU kernel
class GemmCpuKernel : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (GetParam() == "dispatch") return;
    const qg::detail::GemmKernel* k = qgtest::find_gemm_kernel(qg::detail::cpu::registry(), GetParam());
    ASSERT_NE(k, nullptr) << "the CPU registry has no kernel named " << GetParam();
    std::string why;
    if (!qgtest::gemm_kernel_runs_on(*k, qg::Device::cpu(), &why))
      GTEST_SKIP() << GetParam() << " cannot run on this CPU: " << why;
  }
  qgtest::GemmKernelTester& tester() { return tester_; }

  qgtest::HostMemory mem_;
  qgtest::GemmKernelTester tester_{qg::detail::cpu::registry(), GetParam(), mem_};
};

QG_GEMM_KERNEL_TESTS(GemmCpuKernel)

// Each output element is computed by one thread in a fixed order: the result
// does not depend on the thread count, bit for bit.
TEST_P(GemmCpuKernel, BitIdenticalAcrossThreadCounts) {
  QG_SEEDED_RNG(rng, 700);
  GemmCase c1 = qgtest::random_case(rng, 70, 200, 512);
  qgtest::set_c_layout(c1, qg::DType::f32, 201, 1);
  GemmCase c4 = c1;
  qg::set_cpu_threads(1);
  EXPECT_EQ(qg::cpu_threads(), 1);
  ASSERT_TRUE(tester().run(c1));
  qg::set_cpu_threads(4);
  EXPECT_EQ(qg::cpu_threads(), 4);
  ASSERT_TRUE(tester().run(c4));
  qg::set_cpu_threads(0);  // back to the default for the other tests
  ASSERT_EQ(c1.c_out.size(), c4.c_out.size());
  EXPECT_EQ(c1.c_out, c4.c_out) << "1 thread and 4 threads differ";
  qgtest::expect_gemm_output(c1);
}

// At N = 1 the tile kernels cut M into row ranges by the thread count (64 to
// 256 rows a task; here 256 at 2 threads and 64 at 16, the last range 13
// rows, not a whole step of 4): the same bits at 1, 2 and 16 threads.
TEST_P(GemmCpuKernel, DecodeRowRangesAcrossThreadCounts) {
  QG_SEEDED_RNG(rng, 710);
  const GemmCase base = qgtest::random_case(rng, 2061, 1, 512);
  std::vector<GemmCase> runs;
  for (int threads : {1, 2, 16}) {
    GemmCase c = base;
    qg::set_cpu_threads(threads);
    const bool ran = tester().run(c);
    qg::set_cpu_threads(0);  // back to the default for the other tests
    if (!ran) GTEST_SKIP() << GetParam() << " does not take N = 1: " << tester().refusals();
    runs.push_back(c);
  }
  EXPECT_EQ(runs[0].c_out, runs[1].c_out) << "1 thread and 2 threads differ";
  EXPECT_EQ(runs[0].c_out, runs[2].c_out) << "1 thread and 16 threads differ";
  qgtest::expect_gemm_output(runs[1]);
}

INSTANTIATE_TEST_SUITE_P(Kernels, GemmCpuKernel,
                         ::testing::ValuesIn(qgtest::gemm_kernel_names(qg::detail::cpu::registry(), qg::Format::q4_0,
                                                                       qg::Format::q8_1)),
                         qgtest::param_name);

// ------------------------------------------------------------------ the registry
// Most specialised first: AMX (N >= 16), then per ISA the panel kernel
// (N >= 4) before the tile kernel, AVX-512 VNNI, then AVX-VNNI, then AVX2,
// the scalar kernel last.
TEST(GemmCpuRegistry, ListsPanelAndTileKernelsPerIsaThenScalar) {
  const qg::detail::Registry& r = qg::detail::cpu::registry();
  const std::vector<std::string> names = {"cpu_amx",        "cpu_avx512_vnni_panel", "cpu_avx512_vnni",
                                          "cpu_avx_vnni_panel", "cpu_avx_vnni",      "cpu_avx2_panel",
                                          "cpu_avx2",       "cpu_scalar"};
  ASSERT_GE(r.gemm.size(), names.size());
  for (size_t i = 0; i < names.size(); ++i) {
    const qg::detail::GemmKernel& k = r.gemm[i];
    SCOPED_TRACE(names[i]);
    EXPECT_EQ(k.name, names[i]);
    EXPECT_EQ(k.a_format, qg::Format::q4_0);
    EXPECT_EQ(k.b_format, qg::Format::q8_1);
    EXPECT_EQ(k.epilogue_caps, static_cast<uint32_t>(qg::detail::kEpiFloatAll))
        << "CPU kernels implement the whole float epilogue";
  }
  std::vector<std::string> with_dispatch = names;
  with_dispatch.emplace_back("dispatch");
  EXPECT_EQ(qgtest::gemm_kernel_names(r, qg::Format::q4_0, qg::Format::q8_1), with_dispatch);
  EXPECT_EQ(qgtest::gemm_kernel_names(r, qg::Format::q8_0, qg::Format::q8_1), (std::vector<std::string>{"dispatch"}));

  // The ISA a kernel needs is its arch window: the AMX kernel amx_int8 on
  // top of the AVX-512 VNNI kernels' features (it adds each block in with
  // AVX-512), and it takes N from kQ4AmxMinN.
  const uint32_t isa_avx2 = qg::detail::kCpuAvx2 | qg::detail::kCpuFma | qg::detail::kCpuF16c;
  EXPECT_EQ(r.gemm[0].arch.cpu_features, isa_avx2 | qg::detail::kCpuAvx512Vnni | qg::detail::kCpuAmxInt8);
  {
    std::string amx_why;
    qg::detail::DeviceCaps avx512;  // AVX-512 VNNI without AMX (Ice Lake, Zen 4)
    avx512.cpu_features = isa_avx2 | qg::detail::kCpuAvx512Vnni;
    EXPECT_FALSE(qg::detail::arch_admits(r.gemm[0].arch, qg::Device::cpu(), avx512, &amx_why));
    EXPECT_EQ(amx_why.find("needs amx_int8,"), 0u) << amx_why;
    qg::GemmArgs few;
    few.a = qg::packed_operand(nullptr, qg::Format::q4_0, 1, 32);
    few.b = qg::packed_operand(nullptr, qg::Format::q8_1, qg::detail::cpu::kQ4AmxMinN - 1, 32);
    EXPECT_FALSE(r.gemm[0].can_run(few, &amx_why));
    EXPECT_EQ(amx_why, "N=15 is below its 16");
  }
  // The rest, from r.gemm[1]: the AVX-512 VNNI kernels need
  // avx512_vnni and (their driver) avx2+fma+f16c, the AVX-VNNI ones avx_vnni
  // and the same, the AVX2 kernels avx2+fma+f16c, the scalar kernel nothing,
  // so it is available on every CPU.
  const auto k = [&r](int i) -> const qg::detail::GemmKernel& { return r.gemm[1 + i]; };
  const uint32_t avx2 = qg::detail::kCpuAvx2 | qg::detail::kCpuFma | qg::detail::kCpuF16c;
  for (int i : {0, 1}) EXPECT_EQ(k(i).arch.cpu_features, avx2 | qg::detail::kCpuAvx512Vnni);
  for (int i : {2, 3}) EXPECT_EQ(k(i).arch.cpu_features, avx2 | qg::detail::kCpuAvxVnni);
  for (int i : {4, 5}) EXPECT_EQ(k(i).arch.cpu_features, avx2);
  EXPECT_EQ(k(6).arch.cpu_features, 0u);
  qg::detail::DeviceCaps none;  // a CPU without any extension
  std::string why;
  EXPECT_TRUE(qg::detail::arch_admits(k(6).arch, qg::Device::cpu(), none, &why)) << why;
  EXPECT_FALSE(qg::detail::arch_admits(k(5).arch, qg::Device::cpu(), none, &why));
  EXPECT_NE(why.find("avx2"), std::string::npos) << why;
  qg::detail::DeviceCaps only_avx2;  // e.g. AMD Zen 3
  only_avx2.cpu_features = avx2;
  for (int i : {4, 5}) EXPECT_TRUE(qg::detail::arch_admits(k(i).arch, qg::Device::cpu(), only_avx2, &why)) << why;
  for (int i : {0, 1}) {
    EXPECT_FALSE(qg::detail::arch_admits(k(i).arch, qg::Device::cpu(), only_avx2, &why));
    EXPECT_EQ(why.find("needs avx512_vnni,"), 0u) << why;
  }
  for (int i : {2, 3}) {
    EXPECT_FALSE(qg::detail::arch_admits(k(i).arch, qg::Device::cpu(), only_avx2, &why));
    EXPECT_EQ(why.find("needs avx_vnni,"), 0u) << why;
  }
  qg::detail::DeviceCaps client = only_avx2;  // Intel client cores from Alder Lake: AVX-VNNI, no AVX-512
  client.cpu_features |= qg::detail::kCpuAvxVnni;
  for (int i : {2, 3, 4, 5})
    EXPECT_TRUE(qg::detail::arch_admits(k(i).arch, qg::Device::cpu(), client, &why)) << why;
  EXPECT_FALSE(qg::detail::arch_admits(k(1).arch, qg::Device::cpu(), client, &why));
  qg::detail::DeviceCaps vnni_only;  // never offered alone, but the window asks for the driver's AVX2 too
  vnni_only.cpu_features = qg::detail::kCpuAvx512Vnni;
  EXPECT_FALSE(qg::detail::arch_admits(k(1).arch, qg::Device::cpu(), vnni_only, &why));
  qg::GemmArgs probe;
  probe.a = qg::packed_operand(nullptr, qg::Format::q4_0, 1, 32);
  probe.b = qg::packed_operand(nullptr, qg::Format::q8_1, 1, 32);
  probe.device = qg::Device::cpu();
  EXPECT_TRUE(k(6).can_run(probe, &why)) << "the scalar kernel takes any shape: " << why;
  // The panel kernels take N from their least and say why not below.
  for (int i : {0, 2, 4}) {
    const int64_t min_n = i == 0 ? qg::detail::cpu::kQ4PanelMinN : qg::detail::cpu::kQ4PanelAvx2MinN;
    probe.b = qg::packed_operand(nullptr, qg::Format::q8_1, min_n - 1, 32);
    EXPECT_FALSE(k(i).can_run(probe, &why));
    EXPECT_EQ(why, "N=" + std::to_string(min_n - 1) + " is below its " + std::to_string(min_n));
    probe.b = qg::packed_operand(nullptr, qg::Format::q8_1, min_n, 32);
    EXPECT_TRUE(k(i).can_run(probe, &why)) << why;
  }

  // A CUDA device is served by the CUDA registry, never by CPU kernels.
  EXPECT_EQ(&qg::detail::registry_for(qg::Device::cpu()), &r);
  EXPECT_NE(&qg::detail::registry_for(qg::Device::cuda(0)), &r);
  if (!qg::build_info().cuda_built) {
    EXPECT_TRUE(qg::detail::registry_for(qg::Device::cuda(0)).gemm.empty());
  }

  // quantize and dequantize: one reference kernel for the ggml blocks, one
  // for the integer family (scales outside)
  ASSERT_EQ(r.quantize.size(), 2u);
  ASSERT_EQ(r.dequantize.size(), 2u);
  for (int i = 0; i < 2; ++i) {
    EXPECT_STREQ(r.quantize[i].name, "cpu_reference");
    EXPECT_STREQ(r.dequantize[i].name, "cpu_reference");
  }
  EXPECT_EQ(r.quantize[0].formats, qg::detail::kGgmlFormats);
  EXPECT_EQ(r.quantize[1].formats, qg::detail::kIntegerFormats);
  EXPECT_EQ(r.dequantize[1].formats, qg::detail::kIntegerFormats);
}

// Dispatch picks the first kernel the CPU admits: AMX from its least N where
// the CPU and OS offer it, then per ISA the panel kernel from its least N,
// the tile kernel below; AVX-512 VNNI where present, else AVX-VNNI (where
// this build has it), else AVX2, else the scalar kernel.
TEST(GemmCpuRegistry, DispatchChoosesTheFirstAdmittedKernel) {
  const auto& r = qg::detail::cpu::registry();
  std::string why;
  const bool amx = qgtest::gemm_kernel_runs_on(r.gemm[0], qg::Device::cpu(), &why);
  const bool vnni = qgtest::gemm_kernel_runs_on(r.gemm[2], qg::Device::cpu(), &why);
  const bool avx_vnni = qgtest::gemm_kernel_runs_on(r.gemm[4], qg::Device::cpu(), &why);
  const bool avx2 = qgtest::gemm_kernel_runs_on(r.gemm[6], qg::Device::cpu(), &why);
  for (int64_t n : {int64_t{3}, int64_t{4}, int64_t{5}, int64_t{15}, int64_t{16}, int64_t{64}}) {
    SCOPED_TRACE("N=" + std::to_string(n));
    std::vector<uint8_t> w(2 * 36), a(static_cast<size_t>(n) * 72);
    qg::GemmArgs g;
    g.a = qg::packed_operand(w.data(), qg::Format::q4_0, 2, 64);
    g.b = qg::packed_operand(a.data(), qg::Format::q8_1, n, 64);
    g.device = qg::Device::cpu();
    qg::Explanation e;
    ASSERT_TRUE(qg::explain(g, &e).ok());
    const bool panel = n >= qg::detail::cpu::kQ4PanelAvx2MinN;
    const char* want = amx && n >= qg::detail::cpu::kQ4AmxMinN ? "cpu_amx"
                       : vnni ? (n >= qg::detail::cpu::kQ4PanelMinN ? "cpu_avx512_vnni_panel" : "cpu_avx512_vnni")
                       : avx_vnni ? (panel ? "cpu_avx_vnni_panel" : "cpu_avx_vnni")
                       : avx2     ? (panel ? "cpu_avx2_panel" : "cpu_avx2")
                                  : "cpu_scalar";
    EXPECT_EQ(e.chosen, want) << why;
    EXPECT_EQ(e.op, "qg.gemm");
    EXPECT_EQ(e.problem, "q4_0 x q8_1 on cpu");
  }
}

// The dispatcher's filters are data: a kernel whose epilogue lacks a feature
// the call needs, or whose arch window the CPU does not meet, is passed over
// with the reason, and the next one runs; a kernel for other formats is not a
// candidate at all.
bool any_shape(const qg::GemmArgs&, std::string*) { return true; }
bool never(const qg::GemmArgs&, std::string* why) {
  if (why) *why = "refuses everything";  // why may be null: the dispatcher asks for reasons only when it reports them
  return false;
}
qg::Status no_run(const qg::GemmArgs&, qg::Stream) { return {}; }

TEST(GemmCpuRegistry, DispatcherSkipsKernelsByEpilogueArchAndCanRun) {
  using qg::detail::GemmKernel;
  const uint32_t all = qg::detail::kEpiAll;
  const std::vector<GemmKernel> kernels = {
      {"other_formats", qg::Format::q8_0, qg::Format::q8_1, {}, all, any_shape, no_run},
      {"no_bias", qg::Format::q4_0, qg::Format::q8_1, {}, all & ~qg::detail::kEpiBias, any_shape, no_run},
      {"no_bf16_no_strided", qg::Format::q4_0, qg::Format::q8_1, {},
       all & ~(qg::detail::kEpiOutBf16 | qg::detail::kEpiStridedC), any_shape, no_run},
      {"needs_vnni", qg::Format::q4_0, qg::Format::q8_1, {0, 0, false, 1u << 31}, all, any_shape, no_run},
      {"refuses", qg::Format::q4_0, qg::Format::q8_1, {}, all, never, no_run},
      {"takes_all", qg::Format::q4_0, qg::Format::q8_1, {}, all, any_shape, no_run},
      {"after", qg::Format::q4_0, qg::Format::q8_1, {}, all, any_shape, no_run},
  };
  std::vector<uint8_t> w(36), a(72);
  std::vector<float> bias(1);
  qg::GemmArgs g;
  g.a = qg::packed_operand(w.data(), qg::Format::q4_0, 1, 64);
  g.b = qg::packed_operand(a.data(), qg::Format::q8_1, 1, 64);
  g.c_dtype = qg::DType::bf16;
  g.ldc = 1;
  g.ldc_n = 2;
  g.epilogue.bias = bias.data();
  g.device = qg::Device::cpu();
  const GemmKernel* chosen = nullptr;
  qg::Explanation e;
  ASSERT_TRUE(qg::detail::choose_kernel("qg.test", kernels, g, &chosen, &e).ok());
  ASSERT_NE(chosen, nullptr);
  EXPECT_STREQ(chosen->name, "takes_all");
  EXPECT_EQ(e.chosen, "takes_all");
  ASSERT_EQ(e.candidates.size(), 6u) << "the q8_0 kernel is no candidate";
  EXPECT_EQ(e.candidates[0], "no_bias: skipped (its epilogue lacks bias)");
  EXPECT_EQ(e.candidates[1], "no_bf16_no_strided: skipped (its epilogue lacks bfloat16 output, strided C)");
  EXPECT_EQ(e.candidates[2].rfind("needs_vnni: skipped (needs ", 0), 0u) << e.candidates[2];
  EXPECT_EQ(e.candidates[3], "refuses: skipped (refuses everything)");
  EXPECT_EQ(e.candidates[4], "takes_all: chosen");
  EXPECT_EQ(e.candidates[5], "after: not tried (an earlier one was chosen)");
  // Nothing admits the call: unsupported, with every reason.
  const std::vector<GemmKernel> none(kernels.begin(), kernels.begin() + 5);
  qg::Status s = qg::detail::choose_kernel("qg.test", none, g, &chosen, nullptr);
  EXPECT_EQ(s.code(), qg::StatusCode::unsupported);
  EXPECT_EQ(chosen, nullptr);
  for (const char* part : {"qg.test", "no kernel can run q4_0 x q8_1 on cpu", "lacks bias", "refuses everything"})
    EXPECT_NE(s.message().find(part), std::string::npos) << part << " not in: " << s.message();
  // No kernel serves the formats at all.
  g.b.format = qg::Format::q8_0;
  g.b.row_stride = 68;
  s = qg::detail::choose_kernel("qg.test", kernels, g, &chosen, nullptr);
  EXPECT_EQ(s.code(), qg::StatusCode::unsupported);
  EXPECT_NE(s.message().find("qg has no kernel for q4_0 x q8_0 on cpu"), std::string::npos) << s.message();
  // What a call needs, as the dispatcher computes it.
  g = qg::GemmArgs{};
  EXPECT_EQ(qg::detail::epilogue_needs(g), 0u);
  g.epilogue.alpha = 2.0f;
  g.epilogue.col_scale = bias.data();
  g.epilogue.beta = 1.0f;
  g.epilogue.activation = qg::Activation::relu;
  g.c_dtype = qg::DType::f16;
  EXPECT_EQ(qg::detail::epilogue_needs(g), qg::detail::kEpiAlpha | qg::detail::kEpiScales | qg::detail::kEpiBeta |
                                               qg::detail::kEpiRelu | qg::detail::kEpiOutF16);
}

// ------------------------------------------------------------------ views
qg::GemmViews gemm_views(const qg::TensorView& w, const qg::TensorView& a) {
  qg::GemmViews v;
  v.a = w;
  v.b = a;
  v.fn = "qg.gemm_q4_0_q8_1";
  v.a_name = "weight_q";
  v.b_name = "activation_q";
  return v;
}

// The raw call on host buffers of a case (row-major float32 C of its own).
qg::Status raw_gemm(const GemmCase& c, float* out) {
  return qg::gemm_q4_0_q8_1(c.a.data(), c.b.data(), out, c.m, c.n, c.k, qg::Device::cpu());
}

// The view API flattens batch dims of W and A: same numbers as the raw call.
TEST(GemmCpuViews, BatchDimsFlattenToRows) {
  QG_SEEDED_RNG(rng, 800);
  const int64_t nb = 3;
  GemmCase p = qgtest::random_case(rng, 6, 10, 32 * nb);
  std::vector<float> want(60);
  ASSERT_TRUE(raw_gemm(p, want.data()).ok());
  std::vector<float> c(6 * 10 + 17);
  qgtest::fill_poison(c.data(), c.size());
  const auto cpu = qg::Device::cpu();
  const qg::TensorView wv = qg::make_view(p.a.data(), qg::DType::u8, cpu, {2, 3, nb, 18});
  const qg::TensorView av = qg::make_view(p.b.data(), qg::DType::u8, cpu, {5, 2, nb, 36});
  const qg::TensorView cv = qg::make_view(c.data(), qg::DType::f32, cpu, {6, 10});
  qg::GemmViews v = gemm_views(wv, av);
  v.m = 6;
  v.n = 10;
  v.k = 32 * nb;
  qg::ResultSpec spec;
  ASSERT_TRUE(qg::result_spec(v, &spec).ok());
  ASSERT_EQ(spec.ndim, 2);
  EXPECT_EQ(spec.shape[0], 6);
  EXPECT_EQ(spec.shape[1], 10);
  EXPECT_EQ(spec.dtype, qg::DType::f32);
  const qg::Status s = qg::gemm(v, cv);
  ASSERT_TRUE(s.ok()) << s.message();
  for (int64_t i = 0; i < 60; ++i) ASSERT_EQ(f2u(c[i]), f2u(want[i])) << i;
  for (int64_t i = 60; i < 60 + 17; ++i) ASSERT_TRUE(qgtest::is_poison(c[i]));
  // and through GemmArgs with explicit packed operands
  std::vector<float> c2(60);
  qg::GemmArgs g;
  g.a = qg::packed_operand(p.a.data(), qg::Format::q4_0, 6, 32 * nb);
  g.b = qg::packed_operand(p.b.data(), qg::Format::q8_1, 10, 32 * nb);
  g.c = c2.data();
  g.ldc = 10;
  g.device = cpu;
  ASSERT_TRUE(qg::gemm(g).ok());
  for (int64_t i = 0; i < 60; ++i) ASSERT_EQ(f2u(c2[i]), f2u(want[i])) << i;
}

// A row-sliced W view (rows of a wider buffer) runs with a row stride > row bytes.
TEST(GemmCpuViews, RowSlicedWeightView) {
  QG_SEEDED_RNG(rng, 801);
  const int64_t nb = 4;
  GemmCase p = qgtest::random_case(rng, 5, 3, 32 * nb, /*a_pad=*/18 * 2);  // each row: 4 blocks + 2 unused
  std::vector<float> want(15);
  qg::GemmArgs g;
  g.a = {p.a.data(), qg::Format::q4_0, 5, 32 * nb, p.a_stride, {}, {}};
  g.b = qg::packed_operand(p.b.data(), qg::Format::q8_1, 3, 32 * nb);
  g.c = want.data();
  g.ldc = 3;
  g.device = qg::Device::cpu();
  ASSERT_TRUE(qg::gemm(g).ok());
  qg::TensorView wv = qg::make_view(p.a.data(), qg::DType::u8, qg::Device::cpu(), {5, nb, 18});
  wv.strides[0] = (nb + 2) * 18;
  const qg::TensorView av = qg::make_view(p.b.data(), qg::DType::u8, qg::Device::cpu(), {3, nb, 36});
  std::vector<float> c(15);
  qgtest::fill_poison(c.data(), c.size());
  const qg::Status s = qg::gemm(gemm_views(wv, av), qg::make_view(c.data(), qg::DType::f32, qg::Device::cpu(), {5, 3}));
  ASSERT_TRUE(s.ok()) << s.message();
  for (int64_t i = 0; i < 15; ++i) ASSERT_EQ(f2u(c[i]), f2u(want[i])) << i;
}

// The view API's epilogue arguments map onto GemmArgs' (transpose_out: ldc = 1,
// ldc_n = M): bit-identical to the raw call, and to the float64 formula.
TEST(GemmCpuViews, EpilogueMatchesRawCall) {
  QG_SEEDED_RNG(rng, 802);
  const int64_t m = 21, n = 6, k = 128;
  GemmCase p = qgtest::random_case(rng, m, n, k, 0, 0, -10, -4);
  std::vector<float> rs(m), cs(n);
  std::vector<uint16_t> bias(m);
  for (auto& v : rs) v = qgtest::uniform(rng, 0.5f, 1.5f);
  for (auto& v : cs) v = qgtest::uniform(rng, -1.5f, 1.5f);
  for (auto& v : bias) v = qgtest::ref_fp32_to_fp16(qgtest::uniform(rng, -3.0f, 3.0f));
  const auto cpu = qg::Device::cpu();
  for (bool transpose : {false, true}) {
    SCOPED_TRACE(transpose ? "transpose_out" : "row-major");
    // initial C for beta, in the output's layout ([N, M] when transposed), bfloat16
    std::vector<uint16_t> c0(m * n);
    for (auto& v : c0) v = static_cast<uint16_t>(f2u(qgtest::uniform(rng, -5.0f, 5.0f)) >> 16);
    std::vector<uint16_t> c_view = c0, c_raw = c0;

    qg::TensorView bias_v = qg::make_view(bias.data(), qg::DType::f16, cpu, {m});
    qg::TensorView rs_v = qg::make_view(rs.data(), qg::DType::f32, cpu, {m});
    qg::TensorView cs_v = qg::make_view(cs.data(), qg::DType::f32, cpu, {n});
    qg::GemmViews v = gemm_views(qg::make_view(p.a.data(), qg::DType::u8, cpu, {m, k / 32, 18}),
                                 qg::make_view(p.b.data(), qg::DType::u8, cpu, {n, k / 32, 36}));
    v.bias = &bias_v;
    v.row_scale = &rs_v;
    v.col_scale = &cs_v;
    v.alpha = 1.25f;
    v.beta = -0.75f;
    v.activation = qg::Activation::relu;
    v.out_dtype = qg::DType::bf16;
    v.transpose_out = transpose;
    qg::ResultSpec spec;
    ASSERT_TRUE(qg::result_spec(v, &spec).ok());
    ASSERT_EQ(spec.ndim, 2);
    EXPECT_EQ(spec.shape[0], transpose ? n : m);
    EXPECT_EQ(spec.shape[1], transpose ? m : n);
    EXPECT_EQ(spec.dtype, qg::DType::bf16);
    const qg::Status s =
        qg::gemm(v, qg::make_view(c_view.data(), qg::DType::bf16, cpu, {spec.shape[0], spec.shape[1]}));
    ASSERT_TRUE(s.ok()) << s.message();

    qg::GemmArgs g;
    g.a = qg::packed_operand(p.a.data(), qg::Format::q4_0, m, k);
    g.b = qg::packed_operand(p.b.data(), qg::Format::q8_1, n, k);
    g.c = c_raw.data();
    g.c_dtype = qg::DType::bf16;
    g.ldc = transpose ? 1 : n;
    g.ldc_n = transpose ? m : 1;
    g.epilogue.alpha = 1.25f;
    g.epilogue.beta = -0.75f;
    g.epilogue.row_scale = rs.data();
    g.epilogue.col_scale = cs.data();
    g.epilogue.bias = bias.data();
    g.epilogue.bias_dtype = qg::DType::f16;
    g.epilogue.activation = qg::Activation::relu;
    g.device = cpu;
    ASSERT_TRUE(qg::gemm(g).ok());
    EXPECT_EQ(c_view, c_raw);

    // and the formula, through the harness's reference
    GemmCase r = p;
    qgtest::set_c_layout(r, qg::DType::bf16, g.ldc, g.ldc_n);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) std::memcpy(&r.c_init[r.elem_offset(i, j)], &c0[i * g.ldc + j * g.ldc_n], 2);
    r.c_out = r.c_init;
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) std::memcpy(&r.c_out[r.elem_offset(i, j)], &c_view[i * g.ldc + j * g.ldc_n], 2);
    r.alpha = 1.25f;
    r.beta = -0.75f;
    r.row_scale = rs;
    r.col_scale = cs;
    r.bias = qgtest::as_bytes(bias);
    r.bias_dtype = qg::DType::f16;
    r.activation = qg::Activation::relu;
    qgtest::expect_gemm_output(r);
  }
}

// ------------------------------------------------------------------ the pool
// The pool is rebuilt by set_cpu_threads; a call right after must use every
// new worker exactly once. (A worker that starts with a stale generation
// count runs an extra pass, over-decrements the pool's active count, and the
// caller either returns before all tiles are written or waits forever.)
// A hang is caught by a watchdog: the test then fails and ends the process,
// since the stuck call holds the pool.
TEST(CpuThreadPool, ResizeBetweenCallsNeitherHangsNorReturnsEarly) {
  QG_SEEDED_RNG(rng, 900);
  GemmCase p = qgtest::random_case(rng, 64, 256, 256);
  qgtest::set_all_scales(p, 0x3C00);
  std::vector<float> c(p.m * p.n);
  auto call = [&] { return qg::gemm_q4_0_q8_1(p.a.data(), p.b.data(), c.data(), p.m, p.n, p.k, qg::Device::cpu()); };
  qg::set_cpu_threads(1);
  ASSERT_TRUE(call().ok());
  const std::vector<float> want = c;
  const int iterations = 8000;
  std::promise<int> result;
  std::future<int> done = result.get_future();
  std::thread runner([&] {
    int bad = 0;
    for (int it = 0; it < iterations; ++it) {
      qgtest::fill_poison(c.data(), c.size());
      qg::set_cpu_threads(2 + it % 3);  // the call follows at once: new workers are still starting
      if (!call().ok() || std::memcmp(c.data(), want.data(), want.size() * 4) != 0) ++bad;
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
