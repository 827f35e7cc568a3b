// SPDX-License-Identifier: MIT
// test_cpu_vnni.cpp: the Q4_0 x Q8_1 tile kernels built on vpdpbusd,
// cpu_avx512_vnni (AVX-512 VNNI) and cpu_avx_vnni (the AVX2 kernel with
// AVX-VNNI), beyond the shared GEMM suite (test_gemm_cpu.cpp runs that on
// them too): every tail of their register tiles (four W rows by up to four A
// rows; two by four) and of their tasks, padded rows and strided C, a
// non-finite scale in each position of the tile, the N = 1 path (four W rows
// per step, 64-row tasks, prefetching into the next row group), the byte
// extremes where vpdpbusd's operand order matters (unsigned nibbles 0/15
// against signed codes -128/127), and bit-identity with cpu_avx2, which both
// are built to give (the same int32 lanes, FMA order and fold).
// Each kernel's tests are skipped where the CPU (or QG_CPU_ISA) lacks its
// ISA: AVX-512 F + BW + VL + VNNI with ZMM state enabled by the OS, or
// AVX-VNNI (and for cpu_avx_vnni, a build whose compiler took -mavxvnni).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend.h"
#include "cpu_simd_cases.h"
#include "test_util.h"

namespace {

using qgtest::GemmCase;

class CpuVnniTiles : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    const qg::detail::GemmKernel* k = qgtest::find_gemm_kernel(qg::detail::cpu::registry(), GetParam());
    ASSERT_NE(k, nullptr) << "the CPU registry has no kernel named " << GetParam();
    std::string why;
    if (!qgtest::gemm_kernel_runs_on(*k, qg::Device::cpu(), &why))
      GTEST_SKIP() << GetParam() << " cannot run here (" << why << ")";
  }
  qgtest::HostMemory mem_;
  qgtest::GemmKernelTester gemm_{qg::detail::cpu::registry(), GetParam(), mem_};
  qgtest::GemmKernelTester avx2_{qg::detail::cpu::registry(), "cpu_avx2", mem_};

  // Runs c on the kernel, checks it against the float64 reference, and
  // against cpu_avx2 bit for bit (every byte of C, guards and gaps included).
  void run_check_and_compare(const GemmCase& c) {
    GemmCase v = c, a = c;
    ASSERT_TRUE(gemm_.run_and_check(v)) << gemm_.refusals();
    ASSERT_TRUE(avx2_.run(a)) << avx2_.refusals();
    ASSERT_EQ(v.c_out.size(), a.c_out.size());
    if (v.c_out == a.c_out) return;
    int bad = 0;
    for (int64_t i = 0; i < c.m; ++i)
      for (int64_t j = 0; j < c.n; ++j)
        if (std::memcmp(&v.c_out[v.elem_offset(i, j)], &a.c_out[a.elem_offset(i, j)],
                        qg::dtype_size(c.c_dtype)) != 0 &&
            ++bad <= 3)
          ADD_FAILURE() << "C[" << i << ", " << j << "] = " << v.out(i, j) << ", cpu_avx2 gives " << a.out(i, j);
    ADD_FAILURE() << bad << " outputs differ from cpu_avx2 (" << c.describe() << ")";
  }
};

// M from 1 to 9 covers every remainder of the four-row tile, 17, 33 and 65
// the 16-row task edges; N from 1 to 9 every column-group remainder, 15..17,
// 63..65 and 129 the 64-column task edges; K = 32 is one block, 96 an odd
// count. N = 1 goes to its own path (four_rows_times_one).
TEST_P(CpuVnniTiles, GemmEveryTileTail) {
  qgtest::cpu_simd::random_shapes({32, 64, 96}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 17, 33, 65},
                                  {1, 2, 3, 4, 5, 6, 7, 8, 9, 15, 16, 17, 63, 64, 65, 129},
                                  [this](const GemmCase& c) { run_check_and_compare(c); }, 3000);
}

// K = 4096: long rows, so the first pass of each task prefetches past the end
// of its four rows into the task's next four.
TEST_P(CpuVnniTiles, GemmTileTailsLongRows) {
  qgtest::cpu_simd::random_shapes({4096}, {1, 3, 4, 5, 17, 33, 65}, {2, 5, 16, 17, 65},
                                  [this](const GemmCase& c) { run_check_and_compare(c); }, 3100);
}

// Odd row strides and a strided C of each output type.
TEST_P(CpuVnniTiles, GemmTailsWithPaddedRowsAndStridedC) {
  qgtest::cpu_simd::padded_rows_and_strided_c({1, 3, 6, 9}, {1, 2, 5, 7, 17},
                                              [this](const GemmCase& c) { run_check_and_compare(c); }, 3200);
}

// Enough A rows that the per-call A side data (20 bytes a block) outgrows the
// buffer kept per thread and lives for the call only.
TEST_P(CpuVnniTiles, GemmWithLargeAScratch) {
  QG_SEEDED_RNG(rng, 3250);
  run_check_and_compare(qgtest::random_case(rng, 5, 1700, 4096));
}

// A +-Inf or NaN scale in one W row (or one A row) in the first, a middle or
// the last block, at every position of the 4 x 4 tile (M = 9: two full row
// tiles and a one-row tail; N = 7: a full column group and a three-column
// tail): that row's (column's) outputs are +-Inf or NaN as the float64
// reference says, and no other output is touched by it.
TEST_P(CpuVnniTiles, GemmNonFiniteScaleInEveryTilePosition) {
  qgtest::cpu_simd::non_finite_scale_everywhere(
      gemm_, [this](const GemmCase& c) { run_check_and_compare(c); }, 9, 7, 96, {0, 1, 2}, 3300);
}

// N = 1 (decode): four W rows per step in 64-row tasks, checked against the
// reference and cpu_avx2.
TEST_P(CpuVnniTiles, GemmSingleActivationRowTails) {
  qgtest::cpu_simd::single_row_tails([this](const GemmCase& c) { run_check_and_compare(c); }, 3400);
}
TEST_P(CpuVnniTiles, GemmSingleActivationRowStrided) {
  qgtest::cpu_simd::single_row_strided([this](const GemmCase& c) { run_check_and_compare(c); }, 3500);
}
TEST_P(CpuVnniTiles, GemmSingleActivationRowMatchesWiderCall) {
  qgtest::cpu_simd::single_row_matches_wider(gemm_, 3600);
}
TEST_P(CpuVnniTiles, GemmSingleActivationRowNonFiniteScales) {
  qgtest::cpu_simd::single_row_non_finite_scales(gemm_, [this](const GemmCase& c) { run_check_and_compare(c); },
                                                 3700);
}

// The byte extremes, mixed within each int32 lane of vpdpbusd (four
// consecutive codes) and across lanes, rows and columns: nibbles 0, 8 and 15
// against codes -128, -127, 0 and 127, with unit scales so every output is an
// integer the kernel must hit exactly. A swapped operand order (signed
// nibbles, unsigned codes) or a saturating vpdpbusds would be off here by
// whole multiples of 256 (code -128 read as 128) or clipped sums.
TEST_P(CpuVnniTiles, GemmExtremeCodesExact) {
  qgtest::cpu_simd::extreme_codes_exact(gemm_, {32, 96, 4096}, {1, 4, 5, 9}, {1, 3, 4, 6},
                                        [this](const GemmCase& c) { run_check_and_compare(c); }, 3800);
  if (HasFailure()) return;
  // The largest lane sums of either sign: every nibble 15 (w - 8 = 7) or 0
  // (-8) against every code -128 or 127, in every position.
  for (uint8_t nib : {uint8_t{0}, uint8_t{15}})
    for (int8_t code : {int8_t{-128}, int8_t{127}}) {
      SCOPED_TRACE("nibble " + std::to_string(nib) + " code " + std::to_string(code));
      QG_SEEDED_RNG(rng, 3900 + nib + code);
      GemmCase c = qgtest::random_case(rng, 5, 6, 4096);
      qgtest::cpu_simd::fill_uniform_codes(c, nib, code);
      for (int64_t n : {int64_t{6}, int64_t{1}}) {
        GemmCase v = c;
        if (n == 1) {
          v.n = 1;
          v.b.resize(static_cast<size_t>(v.b_stride));
          qgtest::set_c_layout(v, qg::DType::f32, 1, 1);
        }
        ASSERT_TRUE(gemm_.run(v));
        qgtest::expect_gemm_exact(v);
        EXPECT_EQ(v.out(0, 0), (nib - 8.0) * code * c.k);
      }
    }
}

INSTANTIATE_TEST_SUITE_P(Kernels, CpuVnniTiles, ::testing::Values("cpu_avx512_vnni", "cpu_avx_vnni"),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });

}  // namespace
