// SPDX-License-Identifier: MIT
// quantize_tensor_avx2.cpp: the two loops of the integer quantizer
// (quantize_tensor.cpp) eight values at a time, for it to call where the CPU
// has AVX2 and F16C. They must give int_formats.h's bytes, so each step is
// one the scalar rules also take once:
//  - measuring: minimum, maximum and largest magnitude are exact in any
//    order; a value whose exponent bits are all ones (Inf, NaN) marks the
//    scope non-finite, which is all the scalar Extent keeps of it;
//  - coding: x * inv is one vmulps (IEEE, never an FMA), vroundps in its
//    nearest-even mode is rintf, r + zp one vaddps, and the clamp to
//    [qmin, qmax] a max and a min; a NaN r takes zp, as quantize_value, as
//    the low byte the scalar code stores (blended in before the narrowing,
//    whose saturation would otherwise change a zero point past the range).
// Rows of f32 load as they are, f16 through vcvtph2ps (exact), bf16 as
// their bits shifted up (exact).
#include "cpu/kernels.h"

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>

#include "cpu/float_elem.h"
#include "int_formats.h"

namespace qg::detail::cpu {

namespace {

inline __m256 load8(const uint8_t* p, DType d) {
  if (d == DType::f32) return _mm256_loadu_ps(reinterpret_cast<const float*>(p));
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  if (d == DType::f16) return _mm256_cvtph_ps(h);
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

inline float hmin(__m256 v) {
  __m128 m = _mm_min_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_min_ps(m, _mm_movehl_ps(m, m));
  return _mm_cvtss_f32(_mm_min_ss(m, _mm_movehdup_ps(m)));
}
inline float hmax(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  return _mm_cvtss_f32(_mm_max_ss(m, _mm_movehdup_ps(m)));
}

}  // namespace

bool measure_scope_avx2(const uint8_t* x, DType d, int64_t n, float* lo, float* hi, float* absmax) {
  const int64_t es = dtype_size(d);
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
  const __m256i exp_mask = _mm256_set1_epi32(0x7F800000);
  __m256 vlo = _mm256_setzero_ps(), vhi = _mm256_setzero_ps(), vabs = _mm256_setzero_ps();
  __m256i bad = _mm256_setzero_si256();
  int64_t k = 0;
  for (; k + 8 <= n; k += 8) {
    const __m256 v = load8(x + k * es, d);
    bad = _mm256_or_si256(bad, _mm256_cmpeq_epi32(_mm256_and_si256(_mm256_castps_si256(v), exp_mask), exp_mask));
    vlo = _mm256_min_ps(vlo, v);
    vhi = _mm256_max_ps(vhi, v);
    vabs = _mm256_max_ps(vabs, _mm256_and_ps(v, abs_mask));
  }
  *lo = hmin(vlo);
  *hi = hmax(vhi);
  *absmax = hmax(vabs);
  return _mm256_testz_si256(bad, bad) != 0;
}

void quantize_codes_avx2(const uint8_t* x, DType d, int64_t n, float inv, int32_t zp, int qmin, int qmax,
                         int8_t* codes) {
  const int64_t es = dtype_size(d);
  const __m256 vinv = _mm256_set1_ps(inv), vzp = _mm256_set1_ps(static_cast<float>(zp));
  const __m256 vmin = _mm256_set1_ps(static_cast<float>(qmin)), vmax = _mm256_set1_ps(static_cast<float>(qmax));
  const __m256i zp_byte = _mm256_set1_epi32(static_cast<int8_t>(zp));
  int64_t k = 0;
  for (; k + 8 <= n; k += 8) {
    const __m256 r = _mm256_round_ps(_mm256_mul_ps(load8(x + k * es, d), vinv),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m256 t = _mm256_min_ps(_mm256_max_ps(_mm256_add_ps(r, vzp), vmin), vmax);
    const __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(r, r, _CMP_UNORD_Q));
    const __m256i i = _mm256_blendv_epi8(_mm256_cvttps_epi32(t), zp_byte, nan);
    const __m128i w = _mm_packs_epi32(_mm256_castsi256_si128(i), _mm256_extracti128_si256(i, 1));
    _mm_storel_epi64(reinterpret_cast<__m128i*>(codes + k), _mm_packs_epi16(w, w));
  }
  const CodeRange c{qmin, qmax};
  ScopeParams p;
  p.inv = inv;
  p.zp = zp;
  for (; k < n; ++k) codes[k] = static_cast<int8_t>(quantize_value(load_elem(x + k * es, d), p, c));
}

void pack_nibbles_avx2(const int8_t* codes, int64_t n, bool offset8, uint8_t* out) {
  // Bytes 2i and 2i + 1 of the codes are the low and the high byte of
  // 16-bit lane i: keep their low nibbles (with the +8 of i4x8, which on a
  // nibble of -8..7 is a flip of its top bit), then fold the high byte's
  // nibble down beside the low one and narrow the lanes to bytes.
  const __m256i keep = _mm256_set1_epi16(0x0F0F), flip = _mm256_set1_epi16(offset8 ? 0x0808 : 0);
  const __m256i low_byte = _mm256_set1_epi16(0x00FF);
  int64_t k = 0;
  for (; k + 32 <= n; k += 32) {
    const __m256i c = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(codes + k));
    __m256i v = _mm256_xor_si256(_mm256_and_si256(c, keep), flip);
    v = _mm256_and_si256(_mm256_or_si256(v, _mm256_srli_epi16(v, 4)), low_byte);
    const __m128i b = _mm_packus_epi16(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + k / 2), b);
  }
  const Format f = offset8 ? Format::i4x8 : Format::i4;
  for (; k < n; k += 2) out[k / 2] = pack_pair(f, codes[k], k + 1 < n ? codes[k + 1] : 0);
}

}  // namespace qg::detail::cpu

#else  // not compiled for AVX2: cpu_features() keeps it from being called

namespace qg::detail::cpu {
bool measure_scope_avx2(const uint8_t*, DType, int64_t, float*, float*, float*) { return false; }
void quantize_codes_avx2(const uint8_t*, DType, int64_t, float, int32_t, int, int, int8_t*) {}
void pack_nibbles_avx2(const int8_t*, int64_t, bool, uint8_t*) {}
}  // namespace qg::detail::cpu

#endif
