// SPDX-License-Identifier: MIT
// lane_sum.h: the sum of a ymm register's 8 fp32 lanes in one fixed order,
// ((0+4)+(2+6)) + ((1+5)+(3+7)), so that a kernel's result does not depend
// on anything but its inputs. Included by files compiled for AVX2; in an
// unnamed namespace (one copy per file, as prefetch.h).
#pragma once

#include <immintrin.h>

namespace qg::detail::cpu {
namespace {

inline float hsum8(__m256 v) {
  const __m128 q = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));  // lanes l + (l+4)
  const __m128 h = _mm_add_ps(q, _mm_movehl_ps(q, q));                                 // (0+4)+(2+6), (1+5)+(3+7)
  return _mm_cvtss_f32(_mm_add_ss(h, _mm_movehdup_ps(h)));
}

}  // namespace
}  // namespace qg::detail::cpu
