// SPDX-License-Identifier: MIT
// quantize_q8_avx512.cpp: the reference Q8_0 / Q8_1 block quantizer of
// quant_block.h (quantize_codes_q8), a block in two zmm, for the CPU
// quantizer to call where the CPU has what the AVX-512 VNNI kernels are
// compiled with (quantize.cpp; this file takes their flags). The same bytes
// as the scalar code and the AVX2 block code (quantize_q8_avx2.cpp), in
// about half the AVX2 code's instructions: per 16 values a multiply, an
// absolute value, one add rounded toward zero and a truncating conversion
// give roundf's half-away-from-zero magnitude (the rule of quant_block.h's
// CUDA q8_code: |s| + 0.5 rounded toward zero reaches an integer n only when
// the exact sum does, so its truncation is floor(|s| + 0.5)), a masked
// subtract puts the sign back and two integer minimums saturate as q8_code
// does; vpmovdb narrows the codes. Blocks holding NaN or +-Inf go to the
// scalar code, which defines them.
#include "cpu/kernels.h"

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && defined(__F16C__)
#include <immintrin.h>

#include "cpu/q8_block_scales.h"
#include "quant_block.h"

namespace qg::detail::cpu {

bool quantize_codes_q8_avx512(const uint8_t* x, uint8_t* qs, float* d_out, int* code_sum) {
  const __m512 v[2] = {_mm512_loadu_ps(x), _mm512_loadu_ps(x + 64)};
  const __m512i exp_mask = _mm512_set1_epi32(0x7F800000);
  const auto exponent_all_ones = [&](__m512 a) {
    return _mm512_cmpeq_epi32_mask(_mm512_and_si512(_mm512_castps_si512(a), exp_mask), exp_mask);
  };
  if ((exponent_all_ones(v[0]) | exponent_all_ones(v[1])) != 0) return false;
  // The maximum of finite values does not depend on the order of comparisons.
  const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v[0]), _mm512_abs_ps(v[1])));
  const float d = div_rn(amax, 127.0f);
  const __m512 id = _mm512_set1_ps(inverse_scale(d));
  const __m512 half = _mm512_set1_ps(0.5f), zero = _mm512_setzero_ps();
  const __m512i hi = _mm512_set1_epi32(127), lo_magnitude = _mm512_set1_epi32(128);
  __m512i sum = _mm512_setzero_si512();
  for (int i = 0; i < 2; ++i) {
    const __m512 s = _mm512_mul_ps(v[i], id);
    const __m512 rounded = _mm512_add_round_ps(_mm512_abs_ps(s), half, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    // |s| <= 127 (1 + 2^-20) here, so the conversion cannot overflow.
    const __m512i magnitude = _mm512_min_epi32(_mm512_cvttps_epi32(rounded), lo_magnitude);
    const __mmask16 negative = _mm512_cmp_ps_mask(s, zero, _CMP_LT_OQ);
    const __m512i signed_q = _mm512_mask_sub_epi32(magnitude, negative, _mm512_setzero_si512(), magnitude);
    const __m512i q = _mm512_min_epi32(signed_q, hi);
    sum = _mm512_add_epi32(sum, q);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(qs + 16 * i), _mm512_cvtepi32_epi8(q));
  }
  *code_sum = _mm512_reduce_add_epi32(sum);
  *d_out = d;
  return true;
}

bool quantize_block_q8_avx512(const uint8_t* x, uint8_t* y, bool with_s) {
  return quantize_q8_block_with(quantize_codes_q8_avx512, x, y, with_s);
}

}  // namespace qg::detail::cpu

#else

namespace qg::detail::cpu {
bool quantize_codes_q8_avx512(const uint8_t*, uint8_t*, float*, int*) { return false; }
bool quantize_block_q8_avx512(const uint8_t*, uint8_t*, bool) { return false; }
}  // namespace qg::detail::cpu

#endif
