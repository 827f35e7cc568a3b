// SPDX-License-Identifier: MIT
// quantize_q8_avx2.cpp: the reference Q8_0 / Q8_1 block quantizer of
// quant_block.h (quantize_codes_q8), eight lanes at a time, for the CPU
// reference quantizer to call where the CPU has AVX2 (quantize.cpp). It must
// give the same bytes as the scalar code, so every step is one the scalar
// code also rounds once: the product x * id is one vmulps, and roundf's
// half-away-from-zero is built from vroundps' truncation (frac = v - trunc(v)
// is exact for |v| < 2^23) instead of vroundps' nearest-even mode.
// Blocks holding NaN or +-Inf go to the scalar code, which defines them.
#include "cpu/kernels.h"

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>

#include <cstring>

#include "cpu/q8_block_scales.h"
#include "quant_block.h"

namespace qg::detail::cpu {

bool quantize_codes_q8_avx2(const uint8_t* x, uint8_t* qs, float* d_out, int* code_sum) {
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
  const __m256i exp_mask = _mm256_set1_epi32(0x7F800000);
  __m256 v[4];
  __m256 amax = _mm256_setzero_ps();
  __m256i nonfinite = _mm256_setzero_si256();
  for (int i = 0; i < 4; ++i) {
    v[i] = _mm256_castsi256_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + 32 * i)));
    const __m256i e = _mm256_and_si256(_mm256_castps_si256(v[i]), exp_mask);
    nonfinite = _mm256_or_si256(nonfinite, _mm256_cmpeq_epi32(e, exp_mask));
    amax = _mm256_max_ps(amax, _mm256_and_ps(v[i], abs_mask));
  }
  if (!_mm256_testz_si256(nonfinite, nonfinite)) return false;
  // The maximum of finite values does not depend on the order of comparisons.
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(amax), _mm256_extractf128_ps(amax, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  const float d = div_rn(_mm_cvtss_f32(m), 127.0f);
  const __m256 id = _mm256_set1_ps(inverse_scale(d));
  const __m256 half = _mm256_set1_ps(0.5f);
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256 sign_mask = _mm256_castsi256_ps(_mm256_set1_epi32(static_cast<int>(0x80000000u)));
  const __m256 hi = _mm256_set1_ps(127.0f), lo = _mm256_set1_ps(-128.0f);
  __m256i q[4];
  __m256i sum = _mm256_setzero_si256();
  for (int i = 0; i < 4; ++i) {
    const __m256 s = _mm256_mul_ps(v[i], id);
    const __m256 t = _mm256_round_ps(s, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    const __m256 up = _mm256_cmp_ps(_mm256_and_ps(_mm256_sub_ps(s, t), abs_mask), half, _CMP_GE_OQ);
    const __m256 step = _mm256_or_ps(_mm256_and_ps(one, up), _mm256_and_ps(s, sign_mask));  // +-1 or +-0
    const __m256 r = _mm256_min_ps(_mm256_max_ps(_mm256_add_ps(t, _mm256_and_ps(step, up)), lo), hi);
    q[i] = _mm256_cvttps_epi32(r);
    sum = _mm256_add_epi32(sum, q[i]);
  }
  // vpackssdw / vpacksswb interleave the 128-bit lanes; vpermd puts the
  // 32 codes back in element order.
  const __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(qs),
                      _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
  __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(sum), _mm256_extracti128_si256(sum, 1));
  s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4E));
  s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xB1));
  *code_sum = _mm_cvtsi128_si32(s4);
  *d_out = d;
  return true;
}

bool quantize_block_q8_avx2(const uint8_t* x, uint8_t* y, bool with_s) {
  return quantize_q8_block_with(quantize_codes_q8_avx2, x, y, with_s);
}

}  // namespace qg::detail::cpu

#else

namespace qg::detail::cpu {
bool quantize_codes_q8_avx2(const uint8_t*, uint8_t*, float*, int*) { return false; }
bool quantize_block_q8_avx2(const uint8_t*, uint8_t*, bool) { return false; }
}  // namespace qg::detail::cpu

#endif
