// SPDX-License-Identifier: MIT
// gemm_q4_0_q8_1_avx2.cpp: AVX2 GEMM, compiled with -mavx2 -mfma -mf16c and
// registered with an arch window that needs those (registry.cpp).
//
// The register tile is two rows of W by up to four rows of A. One ymm holds
// the two W rows' 16-byte code blocks side by side, [row 0 | row 1], and is
// split into low nibbles (elements 0..15 of each row) and high nibbles
// (16..31); the matching A operands are the block's two 16-byte halves, each
// broadcast to both lanes by vbroadcasti128 (a load, no shuffle). So
//   vpmaddubsw(lo, a[0..15]) + vpmaddubsw(hi, a[16..31])
// leaves, per 128-bit lane, one W row's 32 products folded into 8 int16 sums
// of four products; one vpmaddwd then gives 4 int32 lanes per row. Two output
// elements share each multiply, convert and FMA, about half the vector work
// of one element per ymm.
//
// The codes are unsigned nibbles w in 0..15; sum (w-8)*a = sum w*a - 8*sum a.
// The "8 * sum a" term, in the same int16 layout, depends only on A and is
// made once per call for every A block (prepare_a), together with the fp32
// A scale, instead of once per W row pair. Every int16 stays exact for every
// byte value, a = -128 included: |w*a pair| <= 3840, a lane before the
// subtraction <= 7680, after it <= 4096 (unlike the sign-flip trick, which
// wraps on -128).
//
// Each int32 lane is scaled by d = fp32(d_w) * fp32(d_a) and accumulated in
// fp32, one FMA per block. That equals d * (the block's integer sum) except
// when d is not finite: Inf * a lane that is 0 gives NaN where the block's
// whole sum, and so the documented result, is +-Inf. A non-finite d always
// leaves a non-finite accumulator (nothing finite cancels Inf or NaN), and
// finite scales cannot overflow a sum (|d| < 2^32, |block sum| <= 2^15), so
// an output that comes out non-finite, and only such an output, is computed
// again block by block (exact_element), off the fast path.
#include "cpu/kernels.h"

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>

#include <cstring>
#include <vector>

#include "cpu/thread_pool.h"
#include "epilogue.h"
#include "quant_block.h"

namespace qg::detail::cpu {

namespace {

constexpr int64_t kQ4Bytes = 18;  // block_q4_0: fp16 d, 16 code bytes
constexpr int64_t kQ8Bytes = 36;  // block_q8_1: fp16 d, fp16 s, 32 codes

// Tasks: kRowsPerTask rows of W by kColsPerTask rows of A. The task's W rows
// (16 x 8 KiB at K = 14336) stay in L2 while its A rows pass by in groups of
// four (64 KiB, also L2), each group reused by all the task's row pairs.
constexpr int64_t kRowsPerTask = 16;
constexpr int64_t kColsPerTask = 64;

// What the kernel reads per A block besides its codes, made once per call:
// the "8 * sum a" term in the int16 layout of the folded products (lane i:
// 8 * (a[2i] + a[2i+1] + a[16+2i] + a[17+2i])) and d_a as fp32.
struct APrep {
  const int16_t* corr;  // [n][nb][8]
  const float* d;       // [n][nb]
};

void prepare_a_rows(const uint8_t* A, int64_t row_stride, int64_t nb, int64_t n0, int64_t n1, int16_t* corr,
                    float* d) {
  const __m256i ones8 = _mm256_set1_epi8(1);
  for (int64_t n = n0; n < n1; ++n) {
    const uint8_t* ab = A + n * row_stride;
    int16_t* cn = corr + n * nb * 8;
    float* dn = d + n * nb;
    for (int64_t b = 0; b < nb; ++b, ab += kQ8Bytes) {
      const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ab + 4));
      const __m256i pairs = _mm256_maddubs_epi16(ones8, q);  // |pair| <= 256
      const __m128i s = _mm_add_epi16(_mm256_castsi256_si128(pairs), _mm256_extracti128_si256(pairs, 1));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(cn + b * 8), _mm_slli_epi16(s, 3));
      uint16_t h;
      std::memcpy(&h, ab, 2);
      dn[b] = _cvtsh_ss(h);
    }
  }
}

// Output (r, j) of the tile, from scratch, as the scalar kernel computes it:
// sum_b d * (exact integer sum). Only for outputs that came out non-finite.
float exact_element(const uint8_t* w, const uint8_t* a, int64_t nb) {
  float acc = 0.0f;
  for (int64_t b = 0; b < nb; ++b) {
    block_q4_0 wb;
    block_q8_1 ab;
    std::memcpy(&wb, w + b * kQ4Bytes, sizeof wb);
    std::memcpy(&ab, a + b * kQ8Bytes, sizeof ab);
    acc += fp16_to_fp32(wb.d) * fp16_to_fp32(ab.d) * static_cast<float>(dot_block_q4_0_q8_1(&wb, &ab));
  }
  return acc;
}

// Rows w0 and w1 of W (w1 == w0 for an odd last row) against NR rows of A;
// out[0][j] and out[1][j] get the two rows' sums for column j.
template <int NR>
void two_rows_times_cols(const uint8_t* w0, const uint8_t* w1, const uint8_t* const* a, const int16_t* const* corr,
                         const float* const* da, int64_t nb, float (*out)[4]) {
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  const __m256i ones16 = _mm256_set1_epi16(1);
  // vcvtph2ps gives [d_w0, d_w1, 0, 0]; this spreads it to [d_w0 x4 | d_w1 x4].
  const __m256i spread = _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1);
  __m256 acc[NR];
  for (int j = 0; j < NR; ++j) acc[j] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* p0 = w0 + b * kQ4Bytes;
    const uint8_t* p1 = w1 + b * kQ4Bytes;
    const __m256i q = _mm256_loadu2_m128i(reinterpret_cast<const __m128i*>(p1 + 2),
                                          reinterpret_cast<const __m128i*>(p0 + 2));
    const __m256i lo = _mm256_and_si256(q, low4);
    const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), low4);
    uint16_t h0, h1;
    std::memcpy(&h0, p0, 2);
    std::memcpy(&h1, p1, 2);
    const __m128i hw = _mm_cvtsi32_si128(static_cast<int>(h0 | (static_cast<uint32_t>(h1) << 16)));
    const __m256 dw = _mm256_permutevar8x32_ps(_mm256_castps128_ps256(_mm_cvtph_ps(hw)), spread);
    for (int j = 0; j < NR; ++j) {
      const uint8_t* ab = a[j] + b * kQ8Bytes + 4;
      const __m256i alo = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(ab)));
      const __m256i ahi = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(ab + 16)));
      const __m256i c = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(corr[j] + b * 8)));
      const __m256i p = _mm256_sub_epi16(_mm256_add_epi16(_mm256_maddubs_epi16(lo, alo), _mm256_maddubs_epi16(hi, ahi)), c);
      const __m256 dot = _mm256_cvtepi32_ps(_mm256_madd_epi16(p, ones16));
      acc[j] = _mm256_fmadd_ps(dot, _mm256_mul_ps(dw, _mm256_broadcast_ss(da[j] + b)), acc[j]);
    }
  }
  // Two rounds of vhaddps fold each column's four lanes per row: the result's
  // low half is row 0, columns 0..3, the high half row 1.
  __m256 v[4];
  for (int j = 0; j < 4; ++j) v[j] = j < NR ? acc[j] : _mm256_setzero_ps();
  const __m256 s = _mm256_hadd_ps(_mm256_hadd_ps(v[0], v[1]), _mm256_hadd_ps(v[2], v[3]));
  _mm_storeu_ps(out[0], _mm256_castps256_ps128(s));
  _mm_storeu_ps(out[1], _mm256_extractf128_ps(s, 1));
}

using TileFn = void (*)(const uint8_t*, const uint8_t*, const uint8_t* const*, const int16_t* const*,
                        const float* const*, int64_t, float (*)[4]);
constexpr TileFn kTiles[5] = {nullptr, two_rows_times_cols<1>, two_rows_times_cols<2>, two_rows_times_cols<3>,
                              two_rows_times_cols<4>};

// The per-call A side data (20 bytes per A block). Up to kKeptPrepBytes it is
// kept per calling thread and only grown, so a steady stream of calls
// (decode) allocates nothing; a larger one lives for its call only, so a
// single prefill does not pin tens of MiB for the life of the thread.
constexpr size_t kKeptPrepBytes = size_t{4} << 20;
std::vector<uint8_t>& kept_prep_buffer() {
  thread_local std::vector<uint8_t> buf;
  return buf;
}

}  // namespace

Status gemm_q4_0_q8_1_avx2(const GemmArgs& g) {
  const int64_t m_rows = g.a.rows, n_rows = g.b.rows, nb = g.a.k / 32;
  if (m_rows == 0 || n_rows == 0) return {};
  const EpilogueParams ep = epilogue_params(g);
  const auto* W = static_cast<const uint8_t*>(g.a.data);
  const auto* A = static_cast<const uint8_t*>(g.b.data);

  const size_t corr_bytes = static_cast<size_t>(n_rows * nb) * 16;
  const size_t need = corr_bytes + static_cast<size_t>(n_rows * nb) * 4 + 16;
  std::vector<uint8_t> own;
  std::vector<uint8_t>& buf = need <= kKeptPrepBytes ? kept_prep_buffer() : own;
  if (buf.size() < need) buf.resize(need);
  auto* corr = reinterpret_cast<int16_t*>(buf.data());
  auto* da = reinterpret_cast<float*>(buf.data() + corr_bytes);
  {
    const int64_t per = 8;
    run_tiles((n_rows + per - 1) / per, n_rows * g.a.k, [&](int64_t t) {
      const int64_t n0 = t * per, n1 = n0 + per < n_rows ? n0 + per : n_rows;
      prepare_a_rows(A, g.b.row_stride, nb, n0, n1, corr, da);
    });
  }

  const int64_t tiles_m = (m_rows + kRowsPerTask - 1) / kRowsPerTask;
  const int64_t tiles_n = (n_rows + kColsPerTask - 1) / kColsPerTask;
  run_tiles(tiles_m * tiles_n, m_rows * n_rows * g.a.k, [&](int64_t t) {
    const int64_t m0 = (t / tiles_n) * kRowsPerTask, n0 = (t % tiles_n) * kColsPerTask;
    const int64_t m1 = m0 + kRowsPerTask < m_rows ? m0 + kRowsPerTask : m_rows;
    const int64_t n1 = n0 + kColsPerTask < n_rows ? n0 + kColsPerTask : n_rows;
    for (int64_t n = n0; n < n1; n += 4) {
      const int cols = static_cast<int>(n1 - n < 4 ? n1 - n : 4);
      const uint8_t* a[4];
      const int16_t* c[4];
      const float* d[4];
      for (int j = 0; j < 4; ++j) {
        const int64_t col = n + (j < cols ? j : 0);
        a[j] = A + col * g.b.row_stride;
        c[j] = corr + col * nb * 8;
        d[j] = da + col * nb;
      }
      float out[2][4];
      for (int64_t m = m0; m < m1; m += 2) {
        const int rows = m + 1 < m1 ? 2 : 1;
        const uint8_t* w0 = W + m * g.a.row_stride;
        const uint8_t* w1 = W + (m + rows - 1) * g.a.row_stride;
        kTiles[cols](w0, w1, a, c, d, nb, out);
        for (int r = 0; r < rows; ++r)
          for (int j = 0; j < cols; ++j) {
            float v = out[r][j];
            if (!is_finite(v)) v = exact_element(r ? w1 : w0, a[j], nb);
            epilogue_store(ep, m + r, n + j, v);
          }
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
