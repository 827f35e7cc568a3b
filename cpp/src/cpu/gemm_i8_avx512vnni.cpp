// SPDX-License-Identifier: MIT
// gemm_i8_avx512vnni.cpp: int8 x int8 decode GEMM with AVX-512 VNNI
// (cpu_i8_avx512_vnni, N <= 16), compiled with -mavx512f -mavx512bw
// -mavx512vl -mavx512vnni -mfma -mf16c and registered with an arch window
// that needs those. C = A . B^T, both operands int8 rows along K; the int32
// sums (and, with zero points, the rows' code sums) go to epilogue_store_int,
// so every output dtype gives the same bits as cpu_int_reference and
// cpu_i8_avx2 (which takes N > 16).
//
// At N = 1 cpu_i8_avx2 spends a vpmovsxbw and a vpmaddwd on every 16 codes
// of A. vpdpbusd multiplies 64 unsigned bytes by 64 signed bytes and adds
// each four products into an int32 lane, so 64 codes of A cost one xor
// (a ^ 0x80 = a + 128, unsigned) and one vpdpbusd per row of B:
//   sum (a + 128) * b = sum a * b + 128 * sum b,
// and 128 * sum b (once per call) comes back out. The lane sums may pass
// 2^31 on the way (a + 128 up to 255), but vpdpbusd, vpaddd and vpsubd wrap
// modulo 2^32 and the true sum fits in int32 (validation bounds K), so the
// result is that exact sum.
//
// The operands are read where they lie: 64 bytes a step, the last K % 64
// through masked loads (zeros: u = 128 against b = 0), so nothing is copied
// per call. A streams four rows a step in tasks of 32 rows against up to
// four rows of B, with the same software prefetch as the weight-only kernel
// (4 KiB ahead into L2, running on into the task's next four rows); further
// groups of four B rows pass over the task's A rows again, from L2 (32 x
// 14336 bytes = 448 KB), without prefetch. One order per output whatever N.
#include "cpu/kernels.h"

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && defined(__AVX512VNNI__) && \
    defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>

#include "cpu/epilogue_rows.h"
#include "epilogue.h"

namespace qg::detail::cpu {

namespace {

constexpr int64_t kStep = 64;  // codes per load
constexpr int kRows = 4;       // rows of A a step
constexpr int64_t kRowsPerTask = 32;  // their A rows stay in L2 between the passes of a task
constexpr int kCols = 4;              // rows of B a pass
constexpr int64_t kPrefetchBytes = 4096;

inline __mmask64 tail_mask(int64_t k) {
  const int64_t rest = k % kStep;
  return rest == 0 ? ~__mmask64{0} : (__mmask64{1} << rest) - 1;
}

// The sum of the 16 lanes, modulo 2^32 (vector adds: the lanes wrap, as the
// result may, without the signed overflow a scalar int sum would be).
inline int32_t wrapping_sum(__m512i v) {
  const __m256i h = _mm256_add_epi32(_mm512_castsi512_si256(v), _mm512_extracti64x4_epi64(v, 1));
  __m128i q = _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
  q = _mm_add_epi32(q, _mm_shuffle_epi32(q, 0x4E));
  q = _mm_add_epi32(q, _mm_shuffle_epi32(q, 0xB1));
  return _mm_cvtsi128_si32(q);
}

// sum of row p's k codes (wrapping int32, as the reference's): vpdpbusd of
// ones (unsigned) against the codes (signed).
int32_t code_sum(const uint8_t* p, int64_t k) {
  const __m512i ones = _mm512_set1_epi8(1);
  __m512i acc = _mm512_setzero_si512();
  for (int64_t x = 0; x < k; x += kStep) {
    const __mmask64 m = x + kStep <= k ? ~__mmask64{0} : tail_mask(k);
    acc = _mm512_dpbusd_epi32(acc, ones, _mm512_maskz_loadu_epi8(m, p + x));
  }
  return wrapping_sum(acc);
}

// Rows a[0..3] of A against NR rows b[j] of B; out[r][j] = the int32 sum of
// row r and column j, with 128 * sum b[j] (b_offset[j]) taken back out. With
// ZP, sum_a[r] = row r's code sum. With PF, each row is prefetched
// kPrefetchBytes ahead, and past its end the row `next` bytes further on
// (0: none).
template <int NR, bool ZP, bool PF>
void rows_times_cols(const uint8_t* const* a, const uint8_t* const* b, const int32_t* b_offset, int64_t k,
                     int64_t next, int32_t (*out)[4], int32_t* sum_a) {
  const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
  const __m512i ones = _mm512_set1_epi8(1);
  __m512i acc[kRows][NR], asum[kRows];
  for (int r = 0; r < kRows; ++r) {
    asum[r] = _mm512_setzero_si512();
    for (int j = 0; j < NR; ++j) acc[r][j] = _mm512_setzero_si512();
  }
  for (int64_t x = 0; x < k; x += kStep) {
    if (PF) prefetch_rows(a, kRows, x + kPrefetchBytes, k, next);
    const __mmask64 m = x + kStep <= k ? ~__mmask64{0} : tail_mask(k);
    __m512i bv[NR];
    for (int j = 0; j < NR; ++j) bv[j] = _mm512_maskz_loadu_epi8(m, b[j] + x);
    for (int r = 0; r < kRows; ++r) {
      // Masked-off bytes load as 0 and become 128, against b = 0 (and, for
      // the code sums, are counted as 128 like every other byte: see below).
      const __m512i u = _mm512_xor_si512(_mm512_maskz_loadu_epi8(m, a[r] + x), flip);
      for (int j = 0; j < NR; ++j) acc[r][j] = _mm512_dpbusd_epi32(acc[r][j], u, bv[j]);
      if (ZP) asum[r] = _mm512_dpbusd_epi32(asum[r], u, ones);
    }
  }
  const int64_t padded = (k + kStep - 1) / kStep * kStep;  // bytes counted in asum, each a + 128
  for (int r = 0; r < kRows; ++r) {
    for (int j = 0; j < NR; ++j)
      out[r][j] = static_cast<int32_t>(static_cast<uint32_t>(wrapping_sum(acc[r][j])) -
                                       static_cast<uint32_t>(b_offset[j]));
    if (ZP)
      sum_a[r] = static_cast<int32_t>(static_cast<uint32_t>(wrapping_sum(asum[r])) -
                                      static_cast<uint32_t>(128 * padded));
  }
}

using TileFn = void (*)(const uint8_t* const*, const uint8_t* const*, const int32_t*, int64_t, int64_t,
                        int32_t (*)[4], int32_t*);

template <bool ZP>
void run(const GemmArgs& g) {
  const int64_t m_rows = g.a.rows, n_rows = g.b.rows, k = g.a.k;
  const EpilogueParams ep = epilogue_params(g);
  const auto* A = static_cast<const uint8_t*>(g.a.data);
  const auto* B = static_cast<const uint8_t*>(g.b.data);
  const uint8_t* b[kI8VnniMaxN];
  int32_t sum_b[kI8VnniMaxN] = {}, b_offset[kI8VnniMaxN] = {};
  for (int64_t j = 0; j < n_rows; ++j) {
    b[j] = B + j * g.b.row_stride;
    sum_b[j] = code_sum(b[j], k);
    b_offset[j] = static_cast<int32_t>(128u * static_cast<uint32_t>(sum_b[j]));
  }
  // The first pass over a task's A rows streams them from memory
  // (prefetched) and, with zero points, sums their codes; the passes for
  // further rows of B find the rows in L2 and the sums in sum_a.
  static constexpr TileFn kFirst[kCols + 1] = {nullptr, rows_times_cols<1, ZP, true>, rows_times_cols<2, ZP, true>,
                                              rows_times_cols<3, ZP, true>, rows_times_cols<4, ZP, true>};
  static constexpr TileFn kAgain[kCols + 1] = {nullptr, rows_times_cols<1, false, false>,
                                              rows_times_cols<2, false, false>, rows_times_cols<3, false, false>,
                                              rows_times_cols<4, false, false>};
  static_assert(kRowsPerTask % kRows == 0, "a task's steps fill sum_a exactly");
  const int64_t tasks = (m_rows + kRowsPerTask - 1) / kRowsPerTask;
  run_tiles(tasks, m_rows * n_rows * k, [&](int64_t t) {
    const int64_t m0 = t * kRowsPerTask, m1 = m0 + kRowsPerTask < m_rows ? m0 + kRowsPerTask : m_rows;
    int32_t sum_a[kRowsPerTask] = {};  // the task's rows' code sums (zero points only)
    for (int64_t n = 0; n < n_rows; n += kCols) {
      const int cols = static_cast<int>(n_rows - n < kCols ? n_rows - n : kCols);
      const TileFn tile = n == 0 ? kFirst[cols] : kAgain[cols];
      for (int64_t m = m0; m < m1; m += kRows) {
        const int rows = static_cast<int>(m1 - m < kRows ? m1 - m : kRows);
        const uint8_t* a[kRows];
        for (int r = 0; r < kRows; ++r) a[r] = A + (m + (r < rows ? r : rows - 1)) * g.a.row_stride;
        int32_t out[kRows][4];
        tile(a, b + n, b_offset + n, k, m + kRows < m1 ? kRows * g.a.row_stride : 0, out, sum_a + (m - m0));
        epilogue_store_int_tile(ep, m, rows, n, cols, out, sum_a + (m - m0), sum_b + n);
      }
    }
  });
}

}  // namespace

Status gemm_i8_avx512vnni(const GemmArgs& g) {
  if (g.a.rows == 0 || g.b.rows == 0) return {};
  const EpilogueParams ep = epilogue_params(g);
  if (ep.row_zp || ep.col_zp) run<true>(g);
  else run<false>(g);
  return {};
}

}  // namespace qg::detail::cpu

#else  // not compiled for AVX-512 VNNI (non-x86 host): its arch window keeps it from being chosen

namespace qg::detail::cpu {
Status gemm_i8_avx512vnni(const GemmArgs&) {
  return Status(StatusCode::unsupported, "qg.gemm: the AVX-512 VNNI int8 kernel was not compiled in");
}
}  // namespace qg::detail::cpu

#endif
