// SPDX-License-Identifier: MIT
// gemm_q4_0_q8_1_avx2.cpp: AVX2 GEMM, compiled with -mavx2 -mfma -mf16c and
// registered with an arch window that needs those (registry.cpp).
//
// Per block, vpmaddubsw multiplies the unsigned nibbles (0..15) by the signed
// Q8_1 codes; a second vpmaddubsw with all-ones bytes gives the pairwise sums
// of the codes, and  sum (w-8)*a = sum w*a - 8 * sum a  is then formed in
// int16 lanes (|w*a pair| <= 3840, |8*a pair| <= 2048, no overflow) before
// vpmaddwd widens it. That is exact for every byte value, a = -128 included,
// unlike the sign-flip trick, which wraps on -128.
//
// The eight int32 lanes are scaled and accumulated as floats (one FMA per
// block). That equals d * (sum of lanes) except when d is not finite: an
// Inf scale times a lane that is 0 gives NaN where the block's whole sum,
// and so the documented result, is +-Inf. Such blocks (a branch that is never
// taken on finite data) add d * (exact integer sum) to a scalar instead.
#include "cpu/kernels.h"

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>

#include <cstring>

#include "cpu/thread_pool.h"
#include "epilogue.h"

namespace qg::detail::cpu {

namespace {

inline float load_fp16(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

inline int hsum_epi32(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
  return _mm_cvtsi128_si32(s);
}

// MR rows of W against NR rows of A, a 2 x 4 register tile at most: each W
// block is unpacked once and used NR times, and each A block is loaded, and
// its code sums (the "- 8 * sum a" term) formed, once for MR rows. At small K
// that per-block A work is most of the cost, so sharing it between two W rows
// is what keeps a 64x64x64 GEMM near torch.mm's time.
template <int MR, int NR>
void rows_times_cols(const uint8_t* const* w, const uint8_t* const* a, int64_t nb, float (*c)[4]) {
  const __m128i low4 = _mm_set1_epi8(0x0F);
  const __m256i ones8 = _mm256_set1_epi8(1);
  const __m256i ones16 = _mm256_set1_epi16(1);
  __m256 acc[MR][NR];
  float odd[MR][4];  // blocks with a non-finite scale (see the file comment)
  for (int r = 0; r < MR; ++r)
    for (int j = 0; j < 4; ++j) {
      if (j < NR) acc[r][j] = _mm256_setzero_ps();
      odd[r][j] = 0.0f;
    }
  for (int64_t b = 0; b < nb; ++b) {
    __m256i wq[MR];
    float dw[MR];
    for (int r = 0; r < MR; ++r) {
      const uint8_t* wb = w[r] + b * 18;
      const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(wb + 2));
      wq[r] = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(q, 4), low4),  // elements 16..31
                               _mm_and_si128(q, low4));                   // elements 0..15
      dw[r] = load_fp16(wb);
    }
    for (int j = 0; j < NR; ++j) {
      const uint8_t* ab = a[j] + b * 36;
      const __m256i aq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ab + 4));
      const __m256i sa = _mm256_slli_epi16(_mm256_maddubs_epi16(ones8, aq), 3);
      const float da = load_fp16(ab);
      for (int r = 0; r < MR; ++r) {
        const __m256i dot = _mm256_madd_epi16(_mm256_sub_epi16(_mm256_maddubs_epi16(wq[r], aq), sa), ones16);
        const float d = dw[r] * da;
        if (is_finite(d)) acc[r][j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_set1_ps(d), acc[r][j]);
        else odd[r][j] += d * static_cast<float>(hsum_epi32(dot));
      }
    }
  }
  for (int r = 0; r < MR; ++r) {
    if constexpr (NR == 4) {
      // Four horizontal sums at once: two rounds of vhaddps leave each
      // column's eight lanes folded to two, one per 128-bit half.
      const __m256 s = _mm256_hadd_ps(_mm256_hadd_ps(acc[r][0], acc[r][1]), _mm256_hadd_ps(acc[r][2], acc[r][3]));
      const __m128 sums = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
      _mm_storeu_ps(c[r], _mm_add_ps(sums, _mm_loadu_ps(odd[r])));
    } else {
      for (int j = 0; j < NR; ++j) c[r][j] = hsum(acc[r][j]) + odd[r][j];
    }
  }
}

template <int MR>
void rows_times_cols(int64_t cols, const uint8_t* const* w, const uint8_t* const* a, int64_t nb, float (*c)[4]) {
  switch (cols) {
    case 4: rows_times_cols<MR, 4>(w, a, nb, c); break;
    case 3: rows_times_cols<MR, 3>(w, a, nb, c); break;
    case 2: rows_times_cols<MR, 2>(w, a, nb, c); break;
    default: rows_times_cols<MR, 1>(w, a, nb, c); break;
  }
}

}  // namespace

Status gemm_q4_0_q8_1_avx2(const GemmArgs& g) {
  const int64_t m_rows = g.a.rows, n_rows = g.b.rows, nb = g.a.k / 32;
  const EpilogueParams ep = epilogue_params(g);
  const int64_t tiles_m = (m_rows + kTileM - 1) / kTileM;
  const int64_t tiles_n = (n_rows + kTileN - 1) / kTileN;
  const auto* W = static_cast<const uint8_t*>(g.a.data);
  const auto* A = static_cast<const uint8_t*>(g.b.data);
  run_tiles(tiles_m * tiles_n, m_rows * n_rows * g.a.k, [&](int64_t t) {
    const int64_t m0 = (t / tiles_n) * kTileM, n0 = (t % tiles_n) * kTileN;
    const int64_t m1 = m0 + kTileM < m_rows ? m0 + kTileM : m_rows;
    const int64_t n1 = n0 + kTileN < n_rows ? n0 + kTileN : n_rows;
    for (int64_t n = n0; n < n1; n += 4) {
      const uint8_t* a[4];
      const int64_t cols = n1 - n < 4 ? n1 - n : 4;
      for (int j = 0; j < 4; ++j) a[j] = A + (n + (j < cols ? j : 0)) * g.b.row_stride;
      float out[2][4];
      for (int64_t m = m0; m < m1; m += 2) {
        const int rows = m + 1 < m1 ? 2 : 1;
        const uint8_t* w[2] = {W + m * g.a.row_stride, W + (m + rows - 1) * g.a.row_stride};
        if (rows == 2) rows_times_cols<2>(cols, w, a, nb, out);
        else rows_times_cols<1>(cols, w, a, nb, out);
        for (int r = 0; r < rows; ++r)
          for (int64_t j = 0; j < cols; ++j) epilogue_store(ep, m + r, n + j, out[r][j]);
      }
    }
  });
  return {};
}

}  // namespace qg::detail::cpu

#else  // not compiled for AVX2 (non-x86 host): its arch window keeps it from being chosen

namespace qg::detail::cpu {
Status gemm_q4_0_q8_1_avx2(const GemmArgs&) {
  return Status(StatusCode::unsupported, "qg.gemm_q4_0_q8_1: the AVX2 kernel was not compiled in");
}
}  // namespace qg::detail::cpu

#endif
