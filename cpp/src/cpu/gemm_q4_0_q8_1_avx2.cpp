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
//
// N = 1 (one activation row: decode) takes its own path, four W rows against
// the one A row per step in 64-row tasks (four_rows_times_one): the same
// arithmetic, so the same bits, with the A side loaded once per four rows.
// Passes that stream W from memory (N = 1, and the first column group of each
// task otherwise) prefetch each W row a few lines ahead (kPrefetchBytes).
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

// Software prefetch distance per W row, used where a pass streams W from
// memory (N = 1 always; the first column group of a task otherwise). See
// four_rows_times_one.
constexpr int64_t kPrefetchBytes = 1536;

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
// With PF (the first pass of a task over its rows, which reads them from
// memory) the rows are prefetched kPrefetchBytes ahead, and past their end
// the rows `next` bytes further on (the task's next pair; 0: none), as in
// four_rows_times_one below; later passes find the rows in L2.
template <int NR, bool PF>
void two_rows_times_cols(const uint8_t* w0, const uint8_t* w1, const uint8_t* const* a, const int16_t* const* corr,
                         const float* const* da, int64_t nb, int64_t next, float (*out)[4]) {
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  const __m256i ones16 = _mm256_set1_epi16(1);
  // vcvtph2ps gives [d_w0, d_w1, 0, 0]; this spreads it to [d_w0 x4 | d_w1 x4].
  const __m256i spread = _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1);
  __m256 acc[NR];
  for (int j = 0; j < NR; ++j) acc[j] = _mm256_setzero_ps();
  // First b whose prefetch address b * 18 + kPrefetchBytes is past the rows.
  const int64_t row_bytes = nb * kQ4Bytes;
  const int64_t b_switch = row_bytes > kPrefetchBytes ? (row_bytes - kPrefetchBytes + kQ4Bytes - 1) / kQ4Bytes : 0;
  int64_t pf = kPrefetchBytes;
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* p0 = w0 + b * kQ4Bytes;
    const uint8_t* p1 = w1 + b * kQ4Bytes;
    if (PF) {
      // One prefetch per row and block (18 bytes): no 64-byte line is missed.
      if (b == b_switch) pf = next + kPrefetchBytes - row_bytes;
      _mm_prefetch(reinterpret_cast<const char*>(p0 + pf), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(p1 + pf), _MM_HINT_T0);
    }
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

// N = 1 (decode): four rows of W against the one row of A. Each A block
// (two vbroadcasti128 halves, its correction and d_a) is loaded once for four
// rows instead of once per row pair, the four fp16 W scales go through one
// vcvtph2ps and one vmulps, and the two row pairs are two independent FMA
// chains. Per row pair and block it is the same instruction sequence as
// two_rows_times_cols, with the same lanes accumulated in the same order and
// folded by the same vhaddps tree, so a column of A gets bit-identical
// results whether it comes alone (this path) or with others (the 2 x 4 tile).
//
// At N = 1 every W byte is used once, so the kernel should run at memory
// speed. Two things kept the 2 x 4 tile from it: vector work (about 7 cycles
// a row and block on Zen 3, where vpmaddubsw, vpmaddwd and vcvtdq2ps share
// two pipes), now about 3; and demand misses: the hardware prefetchers stop
// at 4 KiB page edges (W is rarely on huge pages) and start over on each new
// row, so each row is also prefetched kPrefetchBytes ahead with prefetcht0,
// one per row every two blocks (36 bytes: no 64-byte line is skipped). With
// both, two threads take about 0.95 ms for 33 MB of W, where a plain AVX2
// read of it takes about 0.7 ms. (Eight rows a step measured the same, with
// more spills and tail waste.)

inline int load_u16(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return h;
}

// One block of one row pair: the body of two_rows_times_cols for one A row,
// with dwa = [d_w0 * d_a x4 | d_w1 * d_a x4] already made.
inline __m256 pair_block(const uint8_t* p0, const uint8_t* p1, __m256i alo, __m256i ahi, __m256i c, __m256 dwa,
                         __m256 acc) {
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  const __m256i ones16 = _mm256_set1_epi16(1);
  const __m256i q =
      _mm256_loadu2_m128i(reinterpret_cast<const __m128i*>(p1 + 2), reinterpret_cast<const __m128i*>(p0 + 2));
  const __m256i lo = _mm256_and_si256(q, low4);
  const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), low4);
  const __m256i p = _mm256_sub_epi16(_mm256_add_epi16(_mm256_maddubs_epi16(lo, alo), _mm256_maddubs_epi16(hi, ahi)), c);
  return _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_madd_epi16(p, ones16)), dwa, acc);
}

// One block of rows w[0..3] (w advanced by the caller) against A block ab.
inline void four_rows_block(const uint8_t* const* w, const uint8_t* ab, const int16_t* corr, const float* da,
                            __m256& acc01, __m256& acc23) {
  const __m256i alo = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(ab + 4)));
  const __m256i ahi = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(ab + 20)));
  const __m256i c = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(corr)));
  // The four rows' fp16 scales gathered with scalar loads (integer ports,
  // idle here) into one qword: one vcvtph2ps and one vmulps for four rows.
  const uint64_t h = static_cast<uint64_t>(load_u16(w[0])) | static_cast<uint64_t>(load_u16(w[1])) << 16 |
                     static_cast<uint64_t>(load_u16(w[2])) << 32 | static_cast<uint64_t>(load_u16(w[3])) << 48;
  const __m128 d4 = _mm_mul_ps(_mm_cvtph_ps(_mm_cvtsi64_si128(static_cast<int64_t>(h))), _mm_broadcast_ss(da));
  // [d0 d1 d2 d3 | d0 d1 d2 d3], then in-lane vpermilps (cheap) rather than
  // lane-crossing vpermps (two uops and a long latency on Zen 3).
  const __m256 d8 = _mm256_insertf128_ps(_mm256_castps128_ps256(d4), d4, 1);
  const __m256 d01 = _mm256_permutevar_ps(d8, _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1));
  const __m256 d23 = _mm256_permutevar_ps(d8, _mm256_setr_epi32(2, 2, 2, 2, 3, 3, 3, 3));
  acc01 = pair_block(w[0], w[1], alo, ahi, c, d01, acc01);
  acc23 = pair_block(w[2], w[3], alo, ahi, c, d23, acc23);
}

// Rows w0[0..3] (repeats of the last row where fewer are left) times the A
// row; out[r] is row r's sum. The caller's next group of rows starts `next`
// bytes after this one (0: none): once the prefetch distance runs past the
// end of the rows, the prefetches move on to the start of the next group's
// rows, so the next call does not begin with a cold first kPrefetchBytes of
// each row (at K = 4096, 2304-byte rows, a quarter of all lines would be read
// on demand). One offset from the current block serves all four rows.
void four_rows_times_one(const uint8_t* const* w0, int64_t next, const uint8_t* a, const int16_t* corr,
                         const float* da, int64_t nb, float out[4]) {
  __m256 acc01 = _mm256_setzero_ps(), acc23 = _mm256_setzero_ps();
  const uint8_t* w[4] = {w0[0], w0[1], w0[2], w0[3]};
  const int64_t row_bytes = nb * kQ4Bytes;
  // First even b whose prefetch address b * 18 + kPrefetchBytes is past the row.
  int64_t b_switch = (row_bytes - kPrefetchBytes + 2 * kQ4Bytes - 1) / (2 * kQ4Bytes) * 2;
  if (b_switch < 0) b_switch = 0;
  int64_t pf = kPrefetchBytes;
  int64_t b = 0;
  for (; b + 2 <= nb; b += 2) {
    if (b == b_switch) pf = next + kPrefetchBytes - row_bytes;
    for (int r = 0; r < 4; ++r) _mm_prefetch(reinterpret_cast<const char*>(w[r] + pf), _MM_HINT_T0);
    four_rows_block(w, a + b * kQ8Bytes, corr + b * 8, da + b, acc01, acc23);
    for (int r = 0; r < 4; ++r) w[r] += kQ4Bytes;
    four_rows_block(w, a + (b + 1) * kQ8Bytes, corr + (b + 1) * 8, da + b + 1, acc01, acc23);
    for (int r = 0; r < 4; ++r) w[r] += kQ4Bytes;
  }
  if (b < nb) four_rows_block(w, a + b * kQ8Bytes, corr + b * 8, da + b, acc01, acc23);
  // The same vhaddps tree as two_rows_times_cols: row r's sum is
  // (lane0 + lane1) + (lane2 + lane3). t = [r0 01, r0 23, r2 01, r2 23 | r1 .., r3 ..].
  const __m256 t = _mm256_hadd_ps(acc01, acc23);
  const __m256 s = _mm256_hadd_ps(t, t);  // [r0, r2, r0, r2 | r1, r3, r1, r3]
  alignas(32) float v[8];
  _mm256_store_ps(v, s);
  out[0] = v[0];
  out[1] = v[4];
  out[2] = v[1];
  out[3] = v[5];
}

// Rows per pool task at N = 1: big enough that the per-task cost (an atomic
// and an indirect call) is lost in the stream, small enough that two threads
// still balance when one is briefly disturbed.
constexpr int64_t kRowsPerTaskN1 = 64;

using TileFn = void (*)(const uint8_t*, const uint8_t*, const uint8_t* const*, const int16_t* const*,
                        const float* const*, int64_t, int64_t, float (*)[4]);
constexpr TileFn kTiles[2][5] = {
    {nullptr, two_rows_times_cols<1, false>, two_rows_times_cols<2, false>, two_rows_times_cols<3, false>,
     two_rows_times_cols<4, false>},
    {nullptr, two_rows_times_cols<1, true>, two_rows_times_cols<2, true>, two_rows_times_cols<3, true>,
     two_rows_times_cols<4, true>}};

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

  if (n_rows == 1) {
    const int64_t tasks = (m_rows + kRowsPerTaskN1 - 1) / kRowsPerTaskN1;
    run_tiles(tasks, m_rows * g.a.k, [&](int64_t t) {
      const int64_t m0 = t * kRowsPerTaskN1, m1 = m0 + kRowsPerTaskN1 < m_rows ? m0 + kRowsPerTaskN1 : m_rows;
      for (int64_t m = m0; m < m1; m += 4) {
        const int rows = static_cast<int>(m1 - m < 4 ? m1 - m : 4);
        const uint8_t* w[4];
        for (int r = 0; r < 4; ++r) w[r] = W + (m + (r < rows ? r : rows - 1)) * g.a.row_stride;
        // The task's next group, or (last group) none: the prefetches past
        // the task's end then go back over lines already read.
        const int64_t next = m + 4 < m1 ? 4 * g.a.row_stride : 0;
        float out[4];
        four_rows_times_one(w, next, A, corr, da, nb, out);
        for (int r = 0; r < rows; ++r) {
          float v = out[r];
          if (!is_finite(v)) v = exact_element(w[r], A, nb);
          epilogue_store(ep, m + r, 0, v);
        }
      }
    });
    return {};
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
        kTiles[n == n0][cols](w0, w1, a, c, d, nb, m + 2 < m1 ? 2 * g.a.row_stride : 0, out);
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
