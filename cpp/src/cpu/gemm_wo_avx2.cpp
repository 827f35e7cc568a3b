// SPDX-License-Identifier: MIT
// gemm_wo_avx2.cpp: weight-only GEMM with AVX2 (cpu_wo_avx2), compiled with
// -mavx2 -mfma -mf16c and registered with an arch window that needs those.
// W: int4 rows (two's-complement nibbles, low nibble first) with group-wise
// scales (f32, f16 or bf16) and optional group zero points (int8 or int32);
// X: float rows (f32, f16 or bf16). C[m, n] = sum_g s[m, g] * sum_{k in g}
// (q[m, k] - z[m, g]) * x[n, k], in fp32, then the float epilogue.
//
// The codes are turned into floats in registers, 32 (16 bytes) at a time:
// two vpmovsxbd sign-extend 8 bytes each into int32 lanes, so a lane holds
// b = 16 * hi + lo_unsigned with hi the high nibble's signed value. Then
//   hi * 16 = b & ~15 (vpand)                      exact,
//   lo * 2^28 = b << 28 (vpslld: the low nibble in the sign bits, zeros below),
// and one vcvtdq2ps each: four ops for 16 codes. The mask, not a second
// shift (b >> 4), for the high nibble: on Zen 4 the vector shifts and the
// sign extensions share two pipes, which bound the loop, and a vpand runs on
// any of four (3-6 % faster at N = 1, bench/RESULTS.md; a mask and an xor
// for the low nibble too, with its 8 taken out through the sums of x, was
// slower again). The 2^28 and the 16 are taken out of the activations
// instead: the lanes that meet low nibbles hold x * 2^-28 (exact: a power of
// two, down to |x| = 2^-98), those that meet high ones x / 16 (down to
// 2^-122). The activations are rearranged once per call to match: each
// 32-element chunk becomes four runs of 8, [x[2l] * 2^-28, x[2l+1] / 16,
// x[16+2l] * 2^-28, x[17+2l] / 16] for lanes l = 0..7, so the inner loop is
// four FMAs with plain loads.
//
// Summation order (per output, not bit-equal to cpu_wo_reference's serial
// sum; the NMSE against float64 is far below 1e-6): each of the 8 lanes keeps
// two fp32 partial sums per group, one for the low-nibble products and one
// for the high, each adding its chunk's two products in K order; at the end
// of the group the two are added, the zero-point term z * (the lane's sum of
// the group's x, made once per call) is subtracted, and acc_lane += s * that
// (one FMA per lane, group and output). After the last group the 8 lanes are
// added by a fixed tree ((0+4)+(2+6)) + ((1+5)+(3+7)). Each output is made by
// one task in this fixed order: results do not depend on the thread count.
//
// N = 1 (decode) streams W: four rows against the one X row per step, in
// 64-row tasks, with a software prefetch ahead on each row (the hardware
// prefetchers stop at 4 KiB page edges) that runs on, past the rows' ends,
// into the task's next four rows (measured interleaved on a 2-core Zen 4 VM:
// 14336 x 4096 from 3.1 to 2.3-2.5 ms, 4096 x 14336 from 2.1-2.2 to 1.7-2.0),
// into L2 (prefetcht1: against prefetcht0, interleaved over three rounds,
// 1536-1751 us against 1726-1832 at 14336 x 4096, level at 4096 x 14336).
// N > 1: tasks of 16 W rows by 64 X rows; each W row's codes are unpacked once per four X rows (the 1 x 4
// register tile: two partials per output, 8 accumulators).
#include "cpu/kernels.h"

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>

#include <cstring>
#include <vector>

#include "cpu/call_scratch.h"
#include "cpu/epilogue_rows.h"
#include "cpu/float_elem.h"
#include "cpu/lane_sum.h"
#include "cpu/row_ranges.h"
#include "epilogue.h"

namespace qg::detail::cpu {

namespace {

constexpr int64_t kChunk = 32;  // codes per 16 bytes
constexpr int64_t kRowsPerTaskN1 = 64;
constexpr int kStepRowsN1 = 4;  // measured best of 2, 3, 4 on Zen 3 (more spill)
constexpr int64_t kPrefetchBytes = 768;
constexpr float kLoScale = 1.0f / 268435456.0f;  // 2^-28
constexpr float kHiScale = 1.0f / 16.0f;         // the high nibbles come as 16 hi

// X rows n0..n1-1 rearranged (see the header) into xp ([n][k]) and, with zero
// points, each group's per-lane sums of x into xs ([n][groups][8]).
void prepare_x(const Operand& b, int64_t n0, int64_t n1, int64_t groups, int64_t chunks_per_group, float* xp,
               float* xs) {
  const int64_t k = b.k;
  const int64_t es = b.format == Format::f32 ? 4 : 2;
  const DType d = float_dtype(b.format);
  for (int64_t n = n0; n < n1; ++n) {
    const auto* src = static_cast<const uint8_t*>(b.data) + n * b.row_stride;
    float* dst = xp + n * k;
    float* sums = xs ? xs + n * groups * 8 : nullptr;
    for (int64_t c = 0; c < k / kChunk; ++c) {
      const uint8_t* s = src + c * kChunk * es;
      float* o = dst + c * kChunk;
      float v[kChunk];
      for (int e = 0; e < kChunk; ++e) v[e] = load_elem(s + e * es, d);
      for (int l = 0; l < 8; ++l) {
        o[l] = v[2 * l] * kLoScale;
        o[8 + l] = v[2 * l + 1] * kHiScale;
        o[16 + l] = v[16 + 2 * l] * kLoScale;
        o[24 + l] = v[17 + 2 * l] * kHiScale;
      }
      if (sums) {
        float* gs = sums + (c / chunks_per_group) * 8;
        if (c % chunks_per_group == 0)
          for (int l = 0; l < 8; ++l) gs[l] = 0.0f;
        for (int l = 0; l < 8; ++l) gs[l] += (v[2 * l] + v[2 * l + 1]) + (v[16 + 2 * l] + v[17 + 2 * l]);
      }
    }
  }
}

// R rows w[r] of W (row index rows[r] for their scales) against NR
// rearranged X rows xp[j] (group sums xs[j]); out[r][j] = the sum for (r, j).
template <int R, int NR, bool ZP, bool PF>
void tile(const uint8_t* const* w, const int64_t* rows, const float* const* xp, const float* const* xs,
          const OutsideScales& sc, const OutsideScales& zp, int64_t groups, int64_t chunks_per_group,
          int64_t next_step, float (*out)[4]) {
  const int64_t row_bytes = groups * chunks_per_group * 16;
  const __m256i hi_mask = _mm256_set1_epi32(-16);
  __m256 acc[R][NR];
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < NR; ++j) acc[r][j] = _mm256_setzero_ps();
  for (int64_t g = 0; g < groups; ++g) {
    __m256 plo[R][NR], phi[R][NR];
    for (int r = 0; r < R; ++r)
      for (int j = 0; j < NR; ++j) plo[r][j] = phi[r][j] = _mm256_setzero_ps();
    const int64_t c1 = (g + 1) * chunks_per_group;
    for (int64_t c = g * chunks_per_group; c < c1; ++c) {
      if (PF && (c & 3) == 0) prefetch_rows(w, R, c * 16 + kPrefetchBytes, row_bytes, next_step);
      for (int r = 0; r < R; ++r) {
        const uint8_t* p = w[r] + c * 16;
        const __m256i b0 = _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
        const __m256i b1 = _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p + 8)));
        const __m256 lo0 = _mm256_cvtepi32_ps(_mm256_slli_epi32(b0, 28));
        const __m256 hi0 = _mm256_cvtepi32_ps(_mm256_and_si256(b0, hi_mask));
        const __m256 lo1 = _mm256_cvtepi32_ps(_mm256_slli_epi32(b1, 28));
        const __m256 hi1 = _mm256_cvtepi32_ps(_mm256_and_si256(b1, hi_mask));
        for (int j = 0; j < NR; ++j) {
          const float* x = xp[j] + c * kChunk;
          plo[r][j] = _mm256_fmadd_ps(lo0, _mm256_loadu_ps(x), plo[r][j]);
          phi[r][j] = _mm256_fmadd_ps(hi0, _mm256_loadu_ps(x + 8), phi[r][j]);
          plo[r][j] = _mm256_fmadd_ps(lo1, _mm256_loadu_ps(x + 16), plo[r][j]);
          phi[r][j] = _mm256_fmadd_ps(hi1, _mm256_loadu_ps(x + 24), phi[r][j]);
        }
      }
    }
    for (int r = 0; r < R; ++r) {
      const __m256 s = _mm256_set1_ps(group_scale(sc, rows[r], g));
      const __m256 z = ZP ? _mm256_set1_ps(group_zero_point(zp, rows[r], g)) : _mm256_setzero_ps();
      for (int j = 0; j < NR; ++j) {
        __m256 t = _mm256_add_ps(plo[r][j], phi[r][j]);
        if (ZP) t = _mm256_fnmadd_ps(z, _mm256_loadu_ps(xs[j] + g * 8), t);
        acc[r][j] = _mm256_fmadd_ps(s, t, acc[r][j]);
      }
    }
  }
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < NR; ++j) out[r][j] = hsum8(acc[r][j]);
}

using TileFn = void (*)(const uint8_t* const*, const int64_t*, const float* const*, const float* const*,
                        const OutsideScales&, const OutsideScales&, int64_t, int64_t, int64_t, float (*)[4]);

template <bool ZP>
Status run(const GemmArgs& g) {
  const int64_t m_rows = g.a.rows, n_rows = g.b.rows, k = g.a.k;
  const EpilogueParams ep = epilogue_params(g);
  const int64_t groups = k == 0 ? 0 : k / g.a.scales.group_size;
  const int64_t cpg = groups == 0 ? 0 : k / kChunk / groups;
  const auto* W = static_cast<const uint8_t*>(g.a.data);

  const size_t xp_bytes = static_cast<size_t>(n_rows * k) * 4;
  ScratchBytes own;  // the rearranged X (4 bytes a code) and its group sums
  uint8_t* scratch = call_scratch(xp_bytes + (ZP ? static_cast<size_t>(n_rows * groups) * 32 : 0), own);
  auto* xp = reinterpret_cast<float*>(scratch);
  float* xs = ZP ? reinterpret_cast<float*>(scratch + xp_bytes) : nullptr;
  {
    const int64_t per = 8;
    run_tiles((n_rows + per - 1) / per, n_rows * k * 8, [&](int64_t t) {
      const int64_t n0 = t * per, n1 = n0 + per < n_rows ? n0 + per : n_rows;
      prepare_x(g.b, n0, n1, groups, cpg, xp, xs);
    });
  }

  if (n_rows == 1) {
    const int64_t tasks = (m_rows + kRowsPerTaskN1 - 1) / kRowsPerTaskN1;
    run_tiles(tasks, m_rows * k, [&](int64_t t) {
      const int64_t m0 = t * kRowsPerTaskN1, m1 = m0 + kRowsPerTaskN1 < m_rows ? m0 + kRowsPerTaskN1 : m_rows;
      const float* x[1] = {xp};
      const float* s[1] = {xs};
      for (int64_t m = m0; m < m1; m += kStepRowsN1) {
        const StepRows<kStepRowsN1> step(W, g.a.row_stride, m, m1);
        float out[kStepRowsN1][4];
        tile<kStepRowsN1, 1, ZP, true>(step.w, step.idx, x, s, g.a.scales, g.a.zero_points, groups, cpg, step.next,
                                       out);
        epilogue_store_tile(ep, m, step.rows, 0, 1, out);
      }
    });
    return {};
  }

  static constexpr TileFn kTiles[5] = {nullptr, tile<1, 1, ZP, false>, tile<1, 2, ZP, false>,
                                       tile<1, 3, ZP, false>, tile<1, 4, ZP, false>};
  const int64_t tiles_m = (m_rows + kTileM - 1) / kTileM;
  const int64_t tiles_n = (n_rows + kTileN - 1) / kTileN;
  run_tiles(tiles_m * tiles_n, m_rows * n_rows * k, [&](int64_t t) {
    const int64_t m0 = (t / tiles_n) * kTileM, n0 = (t % tiles_n) * kTileN;
    const int64_t m1 = m0 + kTileM < m_rows ? m0 + kTileM : m_rows;
    const int64_t n1 = n0 + kTileN < n_rows ? n0 + kTileN : n_rows;
    for (int64_t n = n0; n < n1; n += 4) {
      const int cols = static_cast<int>(n1 - n < 4 ? n1 - n : 4);
      const float* x[4];
      const float* s[4];
      for (int j = 0; j < 4; ++j) {
        const int64_t col = n + (j < cols ? j : 0);
        x[j] = xp + col * k;
        s[j] = ZP ? xs + col * groups * 8 : nullptr;
      }
      for (int64_t m = m0; m < m1; ++m) {
        const uint8_t* w[1] = {W + m * g.a.row_stride};
        float out[1][4];
        kTiles[cols](w, &m, x, s, g.a.scales, g.a.zero_points, groups, cpg, 0, out);
        epilogue_store_tile(ep, m, 1, n, cols, out);
      }
    }
  });
  return {};
}

}  // namespace

Status gemm_wo_avx2(const GemmArgs& g) {
  if (g.a.rows == 0 || g.b.rows == 0) return {};
  return g.a.zero_points.data ? run<true>(g) : run<false>(g);
}

}  // namespace qg::detail::cpu

#else  // not compiled for AVX2 (non-x86 host): its arch window keeps it from being chosen

namespace qg::detail::cpu {
Status gemm_wo_avx2(const GemmArgs&) {
  return Status(StatusCode::unsupported, "qg.gemm: the AVX2 weight-only kernel was not compiled in");
}
}  // namespace qg::detail::cpu

#endif
