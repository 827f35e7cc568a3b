// SPDX-License-Identifier: MIT
// cpu/panel_pack_avx512.h: 16 rows of Q4_0 W (or one q4_0x16 group)
// rearranged into the panel layout (gemm_q4_0_q8_1_simd.h) with AVX-512, for the two kernel files that pass
// over such panels: the AVX-512 VNNI one keeps the nibbles unsigned
// (vpdpbusd's unsigned operand; the -8 comes in through the A side's sums),
// the AMX one stores the codes minus 8 (tdpbssd multiplies signed bytes on
// both sides, and a panel is packed once for all its A groups, where the
// correction would cost an add per A row and block).
//
// Include only from files compiled with -mavx512f -mavx512bw -mavx512vl:
// everything here is in an unnamed namespace (one copy per file), so no
// AVX-512 code can be picked by the linker for a caller built without it.
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "cpu/float_elem.h"
#include "cpu/gemm_q4_0_q8_1_simd.h"
#include "cpu/prefetch.h"

namespace qg::detail::cpu::q4q8 {
namespace {

// The 16 code bytes of one block of each of four rows: [p0 | p1 | p2 | p3].
inline __m512i load_codes4(const uint8_t* p0, const uint8_t* p1, const uint8_t* p2, const uint8_t* p3) {
  const __m256i q01 =
      _mm256_loadu2_m128i(reinterpret_cast<const __m128i*>(p1 + 2), reinterpret_cast<const __m128i*>(p0 + 2));
  const __m256i q23 =
      _mm256_loadu2_m128i(reinterpret_cast<const __m128i*>(p3 + 2), reinterpret_cast<const __m128i*>(p2 + 2));
  return _mm512_inserti64x4(_mm512_castsi256_si512(q01), q23, 1);
}

// The four rows' fp16 scales, gathered with scalar loads (integer ports, idle
// here) into one qword for one vcvtph2ps: [d0, d1, d2, d3] as fp32.
inline __m128 scales4(const uint8_t* p0, const uint8_t* p1, const uint8_t* p2, const uint8_t* p3) {
  return _mm_cvtph_ps(_mm_cvtsi64_si128(static_cast<int64_t>(gather_u16x4(p0, p1, p2, p3))));
}

// Rows w[0..15]'s blocks, rearranged so that each int32 lane is one row:
// four load_codes4 vectors hold rows 4q..4q+3, dword c of row 4q+r' in lane
// 4r'+c; two vpermt2d per pair of them gather dwords 0 and 1 (2 and 3) of
// eight rows, and vshufi64x2 joins the two halves, so T_c holds dword c of
// all sixteen rows (8 shuffles a block, where scalar 4-byte loads would take
// 64). The nibbles are split here, once per panel, so the passes over the
// panel only load. kSigned: each code minus 8, as a signed byte in -8..7.
// The rows are prefetched kPrefetchBytes ahead and, past their end, `next`
// bytes further on (the task's next panel; 0: none).
template <bool kSigned>
void pack_panel(const uint8_t* const* w0, int64_t nb, int64_t next, uint8_t* panel) {
  const uint8_t* w[kPanelRows];
  for (int r = 0; r < kPanelRows; ++r) w[r] = w0[r];
  const int64_t row_bytes = nb * kQ4Bytes;
  const __m512i low4 = _mm512_set1_epi8(0x0F);
  const __m512i eight = _mm512_set1_epi8(8);
  const __m512i even = _mm512_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28, 1, 5, 9, 13, 17, 21, 25, 29);
  const __m512i odd = _mm512_setr_epi32(2, 6, 10, 14, 18, 22, 26, 30, 3, 7, 11, 15, 19, 23, 27, 31);
  const auto codes = [&](__m512i nibbles) { return kSigned ? _mm512_sub_epi8(nibbles, eight) : nibbles; };
  for (int64_t b = 0; b < nb; ++b, panel += kPanelBlockBytes) {
    // One prefetch per row every two blocks (36 bytes: no line skipped).
    if ((b & 1) == 0) prefetch_rows(w0, kPanelRows, b * kQ4Bytes + kPrefetchBytes, row_bytes, next);
    const __m512i z0 = load_codes4(w[0], w[1], w[2], w[3]);
    const __m512i z1 = load_codes4(w[4], w[5], w[6], w[7]);
    const __m512i z2 = load_codes4(w[8], w[9], w[10], w[11]);
    const __m512i z3 = load_codes4(w[12], w[13], w[14], w[15]);
    const __m512i u01 = _mm512_permutex2var_epi32(z0, even, z1);  // dword 0 | dword 1 of rows 0..7
    const __m512i v01 = _mm512_permutex2var_epi32(z0, odd, z1);   // dword 2 | dword 3
    const __m512i u23 = _mm512_permutex2var_epi32(z2, even, z3);  // the same for rows 8..15
    const __m512i v23 = _mm512_permutex2var_epi32(z2, odd, z3);
    const __m512i t[4] = {_mm512_shuffle_i64x2(u01, u23, 0x44), _mm512_shuffle_i64x2(u01, u23, 0xEE),
                          _mm512_shuffle_i64x2(v01, v23, 0x44), _mm512_shuffle_i64x2(v01, v23, 0xEE)};
    for (int c = 0; c < 4; ++c) {
      _mm512_store_si512(panel + c * 64, codes(_mm512_and_si512(t[c], low4)));
      _mm512_store_si512(panel + (4 + c) * 64, codes(_mm512_and_si512(_mm512_srli_epi16(t[c], 4), low4)));
    }
    // (vinsertf64x4 of float bits: AVX-512 F, where vinsertf32x8 needs DQ.)
    const __m256 d_lo = _mm256_set_m128(scales4(w[4], w[5], w[6], w[7]), scales4(w[0], w[1], w[2], w[3]));
    const __m256 d_hi = _mm256_set_m128(scales4(w[12], w[13], w[14], w[15]), scales4(w[8], w[9], w[10], w[11]));
    const __m512d d = _mm512_insertf64x4(_mm512_castpd256_pd512(_mm256_castps_pd(d_lo)), _mm256_castps_pd(d_hi), 1);
    _mm512_store_pd(reinterpret_cast<double*>(panel + 512), d);
    for (int r = 0; r < kPanelRows; ++r) w[r] += kQ4Bytes;
  }
}

// A q4_0x16 group (gemm_q4_0_q8_1_simd.h) unpacked into the panel layout:
// its four code vectors are already pack_panel's T_c, so a block is four
// loads, the nibble split and one vcvtph2ps of the 16 scales.
template <bool kSigned>
void pack_x16(const uint8_t* group, int64_t nb, uint8_t* panel) {
  const __m512i low4 = _mm512_set1_epi8(0x0F);
  const __m512i eight = _mm512_set1_epi8(8);
  const auto codes = [&](__m512i nibbles) { return kSigned ? _mm512_sub_epi8(nibbles, eight) : nibbles; };
  for (int64_t b = 0; b < nb; ++b, panel += kPanelBlockBytes, group += kX16BlockBytes) {
    for (int c = 0; c < 4; ++c) {
      const __m512i t = _mm512_loadu_si512(group + c * 64);
      _mm512_store_si512(panel + c * 64, codes(_mm512_and_si512(t, low4)));
      _mm512_store_si512(panel + (4 + c) * 64, codes(_mm512_and_si512(_mm512_srli_epi16(t, 4), low4)));
    }
    _mm512_store_ps(reinterpret_cast<float*>(panel + 512),
                    _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(group + 256))));
  }
}

}  // namespace
}  // namespace qg::detail::cpu::q4q8
