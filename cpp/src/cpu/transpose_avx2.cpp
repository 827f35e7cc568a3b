// SPDX-License-Identifier: MIT
// transpose_avx2.cpp: the int8 repack's 64 x 64 byte transpose
// (tile_transpose.h, gemm_i8_repacked.cpp) with AVX2, for it to call where
// the CPU has AVX2. A 256-bit unpack works on its two 128-bit lanes apart,
// so each round turns two 16 x 16 blocks side by side (rows rb..rb+15 in
// the low lanes, rb+16..rb+31 in the high ones): half the shuffles of the
// SSE2 version for the same bytes, plus one lane extract per pair of
// 16-byte stores.
#include "cpu/kernels.h"

#if defined(__AVX2__)
#include <immintrin.h>

#include "cpu/tile_transpose.h"

namespace qg::detail::cpu {

namespace {
struct Avx2Lanes {
  using V = __m256i;
  static constexpr int kBlocks = 2;
  static V load(const uint8_t* p) { return _mm256_load_si256(reinterpret_cast<const __m256i*>(p)); }
  static V lo8(V a, V b) { return _mm256_unpacklo_epi8(a, b); }
  static V hi8(V a, V b) { return _mm256_unpackhi_epi8(a, b); }
  static V lo16(V a, V b) { return _mm256_unpacklo_epi16(a, b); }
  static V hi16(V a, V b) { return _mm256_unpackhi_epi16(a, b); }
  static V lo32(V a, V b) { return _mm256_unpacklo_epi32(a, b); }
  static V hi32(V a, V b) { return _mm256_unpackhi_epi32(a, b); }
  static V lo64(V a, V b) { return _mm256_unpacklo_epi64(a, b); }
  static V hi64(V a, V b) { return _mm256_unpackhi_epi64(a, b); }
  static void store(V x, int lane, uint8_t* p) {
    _mm_store_si128(reinterpret_cast<__m128i*>(p),
                    lane == 0 ? _mm256_castsi256_si128(x) : _mm256_extracti128_si256(x, 1));
  }
};
}  // namespace

void transpose_tile64_avx2(const uint8_t* src, int64_t src_stride, uint8_t* dst, int64_t dst_stride) {
  tile::transpose_tile64<Avx2Lanes>(src, src_stride, dst, dst_stride);
}

}  // namespace qg::detail::cpu

#else  // not compiled for AVX2: cpu_features() keeps it from being called

namespace qg::detail::cpu {
void transpose_tile64_avx2(const uint8_t*, int64_t, uint8_t*, int64_t) {}
}  // namespace qg::detail::cpu

#endif
