// SPDX-License-Identifier: MIT
// cpu_simd_cases.h: the cases the SIMD CPU Q4_0 kernels share beyond the
// GEMM suite: the shape sweeps their tiles and panels are tested over, the
// byte extremes, non-finite scales, and the N = 1 (decode) cases that every
// kernel with a dedicated single-row path must pass (cpu_avx2,
// cpu_avx512_vnni). `check` runs a case on the kernel under test and checks
// it against the float64 reference (and whatever else that kernel's file
// compares it with).
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <random>
#include <string>
#include <vector>

#include <algorithm>

#include "backend.h"
#include "test_util.h"

namespace qgtest::cpu_simd {

// Whether the CPU registry's kernel `name` runs here (its ISA on this CPU,
// under QG_CPU_ISA); why not, if not.
inline bool kernel_runs_here(const std::string& name, std::string* why) {
  const qg::detail::GemmKernel* k = find_gemm_kernel(qg::detail::cpu::registry(), name);
  if (!k) {
    *why = "the CPU registry has no kernel named " + name;
    return false;
  }
  return gemm_kernel_runs_on(*k, qg::Device::cpu(), why);
}

// A test's N values each raised to a kernel's least N, without repeats.
inline std::vector<int64_t> at_least(std::vector<int64_t> ns, int64_t min_n) {
  for (int64_t& n : ns) n = std::max(n, min_n);
  std::sort(ns.begin(), ns.end());
  ns.erase(std::unique(ns.begin(), ns.end()), ns.end());
  return ns;
}

// fn(rng, m, n, k) at every K x M x N (in that order; case i's rng seeded
// seed_base + i); stops at the first failure.
template <class Fn>
void each_shape(const std::vector<int64_t>& ks, const std::vector<int64_t>& ms, const std::vector<int64_t>& ns,
                Fn&& fn, uint64_t seed_base) {
  uint64_t salt = 0;
  for (int64_t k : ks)
    for (int64_t m : ms)
      for (int64_t n : ns) {
        SCOPED_TRACE("M=" + std::to_string(m) + " N=" + std::to_string(n) + " K=" + std::to_string(k));
        QG_SEEDED_RNG(rng, seed_base + ++salt);
        fn(rng, m, n, k);
        if (::testing::Test::HasFailure()) return;
      }
}

// A random case at every K x M x N, each through `check`.
template <class Check>
void random_shapes(const std::vector<int64_t>& ks, const std::vector<int64_t>& ms, const std::vector<int64_t>& ns,
                   Check&& check, uint64_t seed_base) {
  each_shape(ks, ms, ns, [&](std::mt19937_64& rng, int64_t m, int64_t n, int64_t k) { check(random_case(rng, m, n, k)); },
             seed_base);
}

// Odd row strides (every block load is unaligned) and C with poisoned gaps,
// transposed and row-major (kernels copy runs of outputs along either), of
// each output type, K = 160, at every M x N: only each row's blocks are
// read, only C's elements written.
template <class Check>
void padded_rows_and_strided_c(const std::vector<int64_t>& ms, const std::vector<int64_t>& ns, Check&& check,
                               uint64_t seed_base) {
  uint64_t salt = 0;
  for (int64_t m : ms)
    for (int64_t n : ns)
      for (qg::DType dt : {qg::DType::f32, qg::DType::f16, qg::DType::bf16})
        for (bool transposed : {true, false}) {
          SCOPED_TRACE("M=" + std::to_string(m) + " N=" + std::to_string(n) + " " + qg::dtype_name(dt) +
                       (transposed ? ", C transposed" : ", C row-major") + " with gaps");
          QG_SEEDED_RNG(rng, seed_base + ++salt);
          GemmCase c = random_case(rng, m, n, 160, /*a_pad=*/7, /*b_pad=*/13);
          if (transposed) set_c_layout(c, dt, 1, m + 3);
          else set_c_layout(c, dt, n + 5, 1);
          check(c);
          if (::testing::Test::HasFailure()) return;
        }
}

// M from 1 to 9 covers every four-row remainder, 17, 63..65 and 129 the
// 64-row task edges; K = 32 and 64 leave the two-block loop empty, 96 and 160
// end on one block; K = 4096 runs the prefetches past the end of each row
// group into the next.
template <class Check>
void single_row_tails(Check&& check, uint64_t seed_base) {
  uint64_t salt = 0;
  for (int64_t k : {32, 64, 96, 160, 4096})
    for (int64_t m : {1, 2, 3, 4, 5, 6, 7, 8, 9, 17, 63, 64, 65, 129}) {
      SCOPED_TRACE("M=" + std::to_string(m) + " K=" + std::to_string(k));
      QG_SEEDED_RNG(rng, seed_base + ++salt);
      check(random_case(rng, m, 1, k));
      if (::testing::Test::HasFailure()) return;
    }
}

// Padded rows of W and A (unaligned, odd strides) and a strided C: the path
// must read only each row's blocks and write only C[i, 0].
template <class Check>
void single_row_strided(Check&& check, uint64_t seed_base) {
  uint64_t salt = 0;
  for (int64_t m : {1, 3, 5, 9, 70})
    for (int64_t k : {32, 96, 1024}) {
      SCOPED_TRACE("M=" + std::to_string(m) + " K=" + std::to_string(k));
      QG_SEEDED_RNG(rng, seed_base + ++salt);
      GemmCase c = random_case(rng, m, 1, k, /*a_pad=*/7, /*b_pad=*/13);
      set_c_layout(c, qg::DType::f32, 3, 1);
      check(c);
      if (::testing::Test::HasFailure()) return;
    }
}

// A column of A alone gives the same bits as in a wider call: the N = 1 path
// accumulates the same lanes in the same order and folds them as the wider
// tile does.
inline void single_row_matches_wider(GemmKernelTester& t, uint64_t seed_base) {
  const int64_t n = 5;
  for (int64_t m : {1, 6, 67})
    for (int64_t k : {32, 96, 4096}) {
      SCOPED_TRACE("M=" + std::to_string(m) + " K=" + std::to_string(k));
      QG_SEEDED_RNG(rng, seed_base + m + k);
      GemmCase wide = random_case(rng, m, n, k);
      ASSERT_TRUE(t.run(wide));
      for (int64_t j = 0; j < n; ++j) {
        GemmCase one = wide;
        one.n = 1;
        one.b.assign(wide.b.begin() + j * wide.b_stride, wide.b.begin() + (j + 1) * wide.b_stride);
        set_c_layout(one, qg::DType::f32, 1, 1);
        ASSERT_TRUE(t.run(one));
        for (int64_t i = 0; i < m; ++i)
          ASSERT_EQ(f2u(static_cast<float>(one.out(i, 0))), f2u(static_cast<float>(wide.out(i, j))))
              << "C[" << i << ", " << j << "]";
      }
    }
}

// A +-Inf or NaN scale in one W row, at every position of the four-row group
// and its tails, or in the A row: that row's output (every output) is +-Inf
// or NaN as the float64 reference says, and no other output is touched.
template <class Check>
void single_row_non_finite_scales(GemmKernelTester& t, Check&& check, uint64_t seed_base) {
  const int64_t m = 9, k = 4096;
  for (int64_t row = -1; row < m; ++row)
    for (uint16_t bits : {uint16_t{0x7C00}, uint16_t{0xFC00}, uint16_t{0x7E00}}) {
      SCOPED_TRACE((row < 0 ? std::string("A row") : "W row " + std::to_string(row)) + " scale bits " +
                   std::to_string(bits));
      QG_SEEDED_RNG(rng, seed_base + row);
      GemmCase c = random_case(rng, m, 1, k);
      store_u16(row < 0 ? c.a_block(0, 77) : c.w_block(row, 77), bits);
      check(c);
      GemmCase v = c;
      ASSERT_TRUE(t.run(v));
      for (int64_t i = 0; i < m; ++i) EXPECT_EQ(std::isfinite(v.out(i, 0)), row >= 0 && i != row) << "C[" << i << "]";
      if (::testing::Test::HasFailure()) return;
    }
}

// A +-Inf or NaN scale in one W row or one A row, at each row and in each of
// `blocks`: that row's (column's) outputs are +-Inf or NaN as the float64
// reference says (`check` runs the case against it), and no other output is
// touched by it.
template <class Check>
void non_finite_scale_everywhere(GemmKernelTester& t, Check&& check, int64_t m, int64_t n, int64_t k,
                                 std::initializer_list<int64_t> blocks, uint64_t seed_base) {
  for (int side = 0; side < 2; ++side)
    for (int64_t row = 0; row < (side == 0 ? m : n); ++row)
      for (int64_t blk : blocks)
        for (uint16_t bits : {uint16_t{0x7C00}, uint16_t{0xFC00}, uint16_t{0x7E00}}) {
          SCOPED_TRACE((side == 0 ? "W row " : "A row ") + std::to_string(row) + " block " + std::to_string(blk) +
                       " scale bits " + std::to_string(bits));
          QG_SEEDED_RNG(rng, seed_base + side * 100 + row * 3 + blk);
          GemmCase c = random_case(rng, m, n, k);
          store_u16(side == 0 ? c.w_block(row, blk) : c.a_block(row, blk), bits);
          check(c);
          // C row-major, then with W's rows adjacent (x @ W^T's layout,
          // where the panel kernels copy a column's outputs at once).
          for (int64_t ldc : {n, int64_t{1}}) {
            GemmCase v = c;
            if (ldc == 1) set_c_layout(v, qg::DType::f32, 1, m + 2);
            ASSERT_TRUE(t.run(v));
            for (int64_t i = 0; i < m; ++i)
              for (int64_t j = 0; j < n; ++j)
                EXPECT_EQ(std::isfinite(v.out(i, j)), (side == 0 ? i : j) != row)
                    << "C[" << i << ", " << j << "] ldc=" << ldc;
            if (::testing::Test::HasFailure()) return;
          }
        }
}

// Unit scales and codes drawn from the byte extremes, mixed within each int32
// lane and across lanes, rows and columns: nibbles 0, 8 and 15 against codes
// -128, -127, 0 and 127, so every output is an integer a kernel must hit
// exactly; each A block's s is NaN, which no kernel may read.
inline void fill_extreme_codes(GemmCase& c, std::mt19937_64& rng) {
  const uint8_t nibbles[] = {0, 8, 15};
  const int8_t codes[] = {-128, -127, 0, 127};
  set_all_scales(c, 0x3C00);
  for (int64_t r = 0; r < c.m; ++r)
    for (int64_t blk = 0; blk < c.k / 32; ++blk)
      for (int i = 0; i < 16; ++i)
        c.w_block(r, blk)[2 + i] = static_cast<uint8_t>(nibbles[rng() % 3] | nibbles[rng() % 3] << 4);
  for (int64_t r = 0; r < c.n; ++r)
    for (int64_t blk = 0; blk < c.k / 32; ++blk) {
      store_u16(c.a_block(r, blk) + 2, 0x7E00);
      for (int i = 0; i < 32; ++i) c.a_block(r, blk)[4 + i] = static_cast<uint8_t>(codes[rng() % 4]);
    }
}

// fill_extreme_codes at every K x M x N: each output exact on the kernel
// under test (t), then `also` on the case (a kernel's further comparisons).
template <class Also>
void extreme_codes_exact(GemmKernelTester& t, const std::vector<int64_t>& ks, const std::vector<int64_t>& ms,
                         const std::vector<int64_t>& ns, Also&& also, uint64_t seed_base) {
  each_shape(
      ks, ms, ns,
      [&](std::mt19937_64& rng, int64_t m, int64_t n, int64_t k) {
        GemmCase c = random_case(rng, m, n, k);
        fill_extreme_codes(c, rng);
        GemmCase v = c;
        ASSERT_TRUE(t.run(v)) << t.refusals();
        expect_gemm_exact(v);
        also(c);
      },
      seed_base);
}

// Unit scales, every nibble `nib` and every code `code`: the largest block
// sums of either sign (|sum| = 2^15 at the extreme).
inline void fill_uniform_codes(GemmCase& c, uint8_t nib, int8_t code) {
  set_all_scales(c, 0x3C00);
  for (int64_t r = 0; r < c.m; ++r)
    for (int64_t blk = 0; blk < c.k / 32; ++blk) std::memset(c.w_block(r, blk) + 2, nib | nib << 4, 16);
  for (int64_t r = 0; r < c.n; ++r)
    for (int64_t blk = 0; blk < c.k / 32; ++blk) std::memset(c.a_block(r, blk) + 4, static_cast<uint8_t>(code), 32);
}

}  // namespace qgtest::cpu_simd
