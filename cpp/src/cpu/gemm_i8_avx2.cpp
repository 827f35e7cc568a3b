// SPDX-License-Identifier: MIT
// gemm_i8_avx2.cpp: int8 x int8 GEMM with AVX2 (cpu_i8_avx2), compiled with
// -mavx2 -mfma -mf16c and registered with an arch window that needs those.
// C = A . B^T, both operands int8 rows along K; the int32 sums (and, with
// zero points, the rows' code sums) go to epilogue_store_int, so every output
// dtype gives the same bits as cpu_int_reference.
//
// Exact products: each 16 codes are sign-extended to int16 (vpmovsxbw) and
// multiplied with vpmaddwd, which adds pairs of int16 products into int32
// lanes without saturation. (vpmaddubsw with the usual sign trick saturates
// its int16 pair sums: -128 * -128 * 2 = 32768 does not fit.) Each lane's
// partial sum is bounded by the sum of |products|, which validation keeps
// below 2^31, so lane sums, their horizontal add and the reference's serial
// sum are the same integer.
//
// B (the activations) is widened to int16 once per call into a buffer whose
// rows are zero-padded to a multiple of 16: the inner loop then loads B as
// int16 and only A's codes are sign-extended, two vpmovsxbw per eight
// vpmaddwd in the 2 x 4 register tile (two rows of A by up to four rows of B:
// eight int32 accumulators, two widened A rows and four B rows fill 14 of the
// 16 ymm registers). A's last K % 16 codes go through a zero-padded copy, so
// no load reads past a row. Pool tasks are 16 rows of A by 64 rows of B, the
// A rows staying in L2 while B's rows pass in groups of four.
//
// N = 1 (GEMV) streams A: four A rows against the one widened B row per
// step, 64 rows a task, 64 bytes of each row per iteration with a software
// prefetch ahead (the hardware prefetchers stop at 4 KiB page edges) that
// runs on, past the rows' ends, into the task's next four rows: without it
// each step began on cold rows, which cost most where rows are short
// (14336 x 4096: about 20 % slower, measured interleaved on a 2-core Zen 4 VM).
// The prefetch goes into L2 (prefetcht1): against prefetcht0, interleaved
// over three rounds on that VM, 1842-1964 us against 1982-2130 at
// 4096 x 14336 and 1767-1941 against 2074-2193 at 14336 x 4096.
//
// N > 1: a task's first pass over its rows (the first four rows of B)
// prefetches them the same way; later passes find them in L2 (measured on
// that VM, old / new interleaved twice, ms at 4096 x 14336: N = 2
// 2.73-2.91 / 2.41-2.56, N = 4 3.23-3.42 / 2.75-2.91, N = 8 and 16 within
// the noise).
//
// Zero points need sum qa over each A row and sum qb over each B row: B's
// sums are made with the widening, once per call; A's once per task for the
// task's rows (in cache for the task's loop right after), with vpsadbw on
// the codes xor 0x80 (their unsigned offsets), so never once per output.
#include "cpu/kernels.h"

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "cpu/call_scratch.h"
#include "cpu/epilogue_rows.h"
#include "epilogue.h"

namespace qg::detail::cpu {

namespace {

constexpr int64_t kRowsPerTaskN1 = 64;
constexpr int64_t kPrefetchBytes = 1024;

inline __m256i widen16(const uint8_t* p) {
  return _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

// A row's last k % 16 codes (k16 = k rounded down to 16), zero-padded.
inline __m256i widen_tail(const uint8_t* row, int64_t k16, int64_t k) {
  alignas(16) uint8_t t[16] = {};
  std::memcpy(t, row + k16, static_cast<size_t>(k - k16));
  return widen16(t);
}

// sum of the k int8 codes at p (wrapping int32, as the reference's).
int32_t code_sum(const uint8_t* p, int64_t k) {
  const __m256i flip = _mm256_set1_epi8(static_cast<char>(0x80));
  __m256i acc = _mm256_setzero_si256();
  int64_t x = 0;
  // vpsadbw against zero adds eight unsigned bytes per 64-bit lane: the codes
  // xor 0x80 are q + 128, so the sum is that total - 128 k.
  for (; x + 32 <= k; x += 32) {
    const __m256i v = _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + x)), flip);
    acc = _mm256_add_epi64(acc, _mm256_sad_epu8(v, _mm256_setzero_si256()));
  }
  alignas(32) int64_t lanes[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), acc);
  int64_t s = lanes[0] + lanes[1] + lanes[2] + lanes[3] - 128 * x;
  for (; x < k; ++x) s += static_cast<int8_t>(p[x]);
  return static_cast<int32_t>(s);
}

// The four int32 totals of v[0..3]'s eight lanes each.
inline __m128i hsum4(__m256i v0, __m256i v1, __m256i v2, __m256i v3) {
  const __m256i t = _mm256_hadd_epi32(_mm256_hadd_epi32(v0, v1), _mm256_hadd_epi32(v2, v3));
  return _mm_add_epi32(_mm256_castsi256_si128(t), _mm256_extracti128_si256(t, 1));
}

// Rows a0, a1 of A (a1 == a0 for an odd last row) against NR widened rows
// b[j] of B (kp int16 each, zero past k); out[r][j] is the sum of row r, column j.
// With PF (a task's first pass over its rows, which reads them from memory)
// both rows are prefetched as four_rows_times_one's are, past their end into
// the rows `next` bytes further on (the task's next pair; 0: none).
template <int NR, bool PF>
void two_rows_times_cols(const uint8_t* a0, const uint8_t* a1, const int16_t* const* b, int64_t k, int64_t next,
                         int32_t (*out)[4]) {
  __m256i acc0[NR], acc1[NR];
  for (int j = 0; j < NR; ++j) acc0[j] = acc1[j] = _mm256_setzero_si256();
  const int64_t k16 = k & ~int64_t{15};
  auto step = [&](__m256i w0, __m256i w1, int64_t x) {
    for (int j = 0; j < NR; ++j) {
      const __m256i bj = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b[j] + x));
      acc0[j] = _mm256_add_epi32(acc0[j], _mm256_madd_epi16(w0, bj));
      acc1[j] = _mm256_add_epi32(acc1[j], _mm256_madd_epi16(w1, bj));
    }
  };
  for (int64_t x = 0; x < k16; x += 16) {
    if (PF && (x & 63) == 0) {
      const uint8_t* rows[2] = {a0, a1};
      prefetch_rows(rows, 2, x + kPrefetchBytes, k, next);
    }
    step(widen16(a0 + x), widen16(a1 + x), x);
  }
  if (k16 < k) step(widen_tail(a0, k16, k), widen_tail(a1, k16, k), k16);
  const __m256i z = _mm256_setzero_si256();
  __m256i v[4];
  for (int j = 0; j < 4; ++j) v[j] = j < NR ? acc0[j] : z;
  _mm_storeu_si128(reinterpret_cast<__m128i*>(out[0]), hsum4(v[0], v[1], v[2], v[3]));
  for (int j = 0; j < 4; ++j) v[j] = j < NR ? acc1[j] : z;
  _mm_storeu_si128(reinterpret_cast<__m128i*>(out[1]), hsum4(v[0], v[1], v[2], v[3]));
}

// N = 1: rows w[0..3] of A against the one widened B row; out[r] is row r's sum.
// Each row is prefetched kPrefetchBytes ahead, and past its end the row
// `next` bytes further on (the task's next four rows; 0: none).
void four_rows_times_one(const uint8_t* const* w, const int16_t* b, int64_t k, int64_t next, int32_t out[4]) {
  __m256i acc[4];
  for (int r = 0; r < 4; ++r) acc[r] = _mm256_setzero_si256();
  auto step = [&](int64_t x) {
    const __m256i bv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + x));
    for (int r = 0; r < 4; ++r) acc[r] = _mm256_add_epi32(acc[r], _mm256_madd_epi16(widen16(w[r] + x), bv));
  };
  int64_t x = 0;
  for (; x + 64 <= k; x += 64) {
    prefetch_rows(w, 4, x + kPrefetchBytes, k, next);
    step(x);
    step(x + 16);
    step(x + 32);
    step(x + 48);
  }
  for (; x + 16 <= k; x += 16) step(x);
  if (x < k) {
    const __m256i bv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + x));
    for (int r = 0; r < 4; ++r) acc[r] = _mm256_add_epi32(acc[r], _mm256_madd_epi16(widen_tail(w[r], x, k), bv));
  }
  _mm_storeu_si128(reinterpret_cast<__m128i*>(out), hsum4(acc[0], acc[1], acc[2], acc[3]));
}

// B rows n0..n1-1 widened to int16 rows of kp (zero past k), and their code sums.
void widen_rows(const uint8_t* B, int64_t row_stride, int64_t k, int64_t kp, int64_t n0, int64_t n1, int16_t* out,
                int32_t* sums, bool want_sums) {
  for (int64_t n = n0; n < n1; ++n) {
    const uint8_t* src = B + n * row_stride;
    int16_t* dst = out + n * kp;
    const int64_t k16 = k & ~int64_t{15};
    for (int64_t x = 0; x < k16; x += 16)
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + x), widen16(src + x));
    for (int64_t x = k16; x < kp; ++x) dst[x] = x < k ? static_cast<int8_t>(src[x]) : 0;
    sums[n] = want_sums ? code_sum(src, k) : 0;
  }
}

// What both int8 drivers take from a call: the shape, the epilogue, whether
// zero points need the rows' code sums, and the operands.
struct I8Call {
  int64_t m_rows, n_rows, k;
  EpilogueParams ep;
  bool zp;
  const uint8_t *A, *B;
  explicit I8Call(const GemmArgs& g)
      : m_rows(g.a.rows), n_rows(g.b.rows), k(g.a.k), ep(epilogue_params(g)), zp(ep.row_zp || ep.col_zp),
        A(static_cast<const uint8_t*>(g.a.data)), B(static_cast<const uint8_t*>(g.b.data)) {}
};

}  // namespace

Status gemm_i8_avx2(const GemmArgs& g) {
  const I8Call c(g);
  if (c.m_rows == 0 || c.n_rows == 0) return {};
  const int64_t kp = (c.k + 15) & ~int64_t{15};

  const size_t wide_bytes = static_cast<size_t>(c.n_rows * kp) * 2;
  ScratchBytes own;  // the widened B rows (2 bytes a code) and B's sums
  uint8_t* scratch = call_scratch(wide_bytes + static_cast<size_t>(c.n_rows) * 4, own);
  auto* wide = reinterpret_cast<int16_t*>(scratch);
  auto* sum_b = reinterpret_cast<int32_t*>(scratch + wide_bytes);
  {
    const int64_t per = 8;
    run_tiles((c.n_rows + per - 1) / per, c.n_rows * c.k * 8, [&](int64_t t) {
      const int64_t n0 = t * per, n1 = n0 + per < c.n_rows ? n0 + per : c.n_rows;
      widen_rows(c.B, g.b.row_stride, c.k, kp, n0, n1, wide, sum_b, c.zp);
    });
  }

  if (c.n_rows == 1) {
    const int64_t tasks = (c.m_rows + kRowsPerTaskN1 - 1) / kRowsPerTaskN1;
    run_tiles(tasks, c.m_rows * c.k, [&](int64_t t) {
      const int64_t m0 = t * kRowsPerTaskN1, m1 = m0 + kRowsPerTaskN1 < c.m_rows ? m0 + kRowsPerTaskN1 : c.m_rows;
      for (int64_t m = m0; m < m1; m += 4) {
        const int rows = static_cast<int>(m1 - m < 4 ? m1 - m : 4);
        const uint8_t* w[4];
        for (int r = 0; r < 4; ++r) w[r] = c.A + (m + (r < rows ? r : rows - 1)) * g.a.row_stride;
        int32_t out[4][1], sum_a[4];  // the tile's one column
        four_rows_times_one(w, wide, c.k, m + 4 < m1 ? 4 * g.a.row_stride : 0, &out[0][0]);
        for (int r = 0; r < rows; ++r) sum_a[r] = c.zp ? code_sum(w[r], c.k) : 0;
        epilogue_store_int_tile(c.ep, m, rows, 0, 1, out, sum_a, sum_b);
      }
    });
    return {};
  }

  const int64_t tiles_m = (c.m_rows + kTileM - 1) / kTileM;
  const int64_t tiles_n = (c.n_rows + kTileN - 1) / kTileN;
  using TileFn = void (*)(const uint8_t*, const uint8_t*, const int16_t* const*, int64_t, int64_t, int32_t (*)[4]);
  static constexpr TileFn kFirst[5] = {nullptr, two_rows_times_cols<1, true>, two_rows_times_cols<2, true>,
                                       two_rows_times_cols<3, true>, two_rows_times_cols<4, true>};
  static constexpr TileFn kAgain[5] = {nullptr, two_rows_times_cols<1, false>, two_rows_times_cols<2, false>,
                                       two_rows_times_cols<3, false>, two_rows_times_cols<4, false>};
  run_tiles(tiles_m * tiles_n, c.m_rows * c.n_rows * c.k, [&](int64_t t) {
    const int64_t m0 = (t / tiles_n) * kTileM, n0 = (t % tiles_n) * kTileN;
    const int64_t m1 = m0 + kTileM < c.m_rows ? m0 + kTileM : c.m_rows;
    const int64_t n1 = n0 + kTileN < c.n_rows ? n0 + kTileN : c.n_rows;
    int32_t sum_a[kTileM] = {};
    if (c.zp)
      for (int64_t m = m0; m < m1; ++m) sum_a[m - m0] = code_sum(c.A + m * g.a.row_stride, c.k);
    for (int64_t n = n0; n < n1; n += 4) {
      const int cols = static_cast<int>(n1 - n < 4 ? n1 - n : 4);
      const int16_t* b[4];
      for (int j = 0; j < 4; ++j) b[j] = wide + (n + (j < cols ? j : 0)) * kp;
      const TileFn tile = n == n0 ? kFirst[cols] : kAgain[cols];
      for (int64_t m = m0; m < m1; m += 2) {
        const int rows = m + 1 < m1 ? 2 : 1;
        const uint8_t* a0 = c.A + m * g.a.row_stride;
        const uint8_t* a1 = rows == 2 ? a0 + g.a.row_stride : a0;
        int32_t out[2][4];
        tile(a0, a1, b, c.k, m + 2 < m1 ? 2 * g.a.row_stride : 0, out);
        epilogue_store_int_tile(c.ep, m, rows, n, cols, out, sum_a + (m - m0), sum_b + n);
      }
    }
  });
  return {};
}

// ---- cpu_i8_amx's driver (its tile loop: gemm_i8_amx.cpp) ----
//
// B is packed once per call for the tiles (kernels.h, kI8AmxGroupBytes): a
// step of 64 codes of 32 tokens is two tiles of 16 rows, row q of a tile
// holding each of its 16 tokens' codes 4q..4q+3; tokens past N and codes past
// K are zeros. Tasks are 32 rows of A (two tiles) by every pair of token
// tiles: the 32 rows (448 KB at K = 14336) stay in L2 while B passes by.
// A's rows are read where they lie when all 32 exist and K is a multiple of
// 64; otherwise (the last rows, or a K tail) they are first copied into a
// zero-padded block, so no tile load reads past the operand.
namespace {

constexpr int64_t kAmxRows = 32;    // A rows a block
constexpr int64_t kAmxTokens = 32;  // B rows a block

// Pairs p0..p1-1 of B's rows (32 rows a pair, zeros past n_rows) into the packed layout.
void pack_b_for_tiles(const uint8_t* B, int64_t row_stride, int64_t n_rows, int64_t k, int64_t steps, int64_t p0,
                      int64_t p1, uint8_t* packed) {
  for (int64_t p = p0; p < p1; ++p)
    for (int64_t s = 0; s < steps; ++s) {
      uint8_t* step = packed + (p * steps + s) * kI8AmxGroupBytes;
      for (int64_t t = 0; t < kAmxTokens; ++t) {
        const int64_t n = p * kAmxTokens + t;
        uint8_t* dst = step + (t / 16) * (kI8AmxGroupBytes / 2) + (t % 16) * 4;
        const int64_t x0 = s * 64;
        const int64_t have = n < n_rows ? std::min<int64_t>(64, k - x0) : 0;
        alignas(16) uint8_t codes[64] = {};
        if (have > 0) std::memcpy(codes, B + n * row_stride + x0, static_cast<size_t>(have));
        for (int q = 0; q < 16; ++q) std::memcpy(dst + q * 64, codes + 4 * q, 4);
      }
    }
}

}  // namespace

Status gemm_i8_amx(const GemmArgs& g) {
  if (!kI8Amx.block_2x2) return Status(StatusCode::unsupported, "qg.gemm: the AMX int8 kernel was not compiled in");
  const I8Call c(g);
  if (c.m_rows == 0 || c.n_rows == 0) return {};
  const int64_t steps = (c.k + 63) / 64, kp = steps * 64;
  const int64_t pairs = (c.n_rows + kAmxTokens - 1) / kAmxTokens;

  const size_t packed_bytes = static_cast<size_t>(pairs * steps) * kI8AmxGroupBytes;
  ScratchBytes own;  // packed B, then B's code sums
  uint8_t* scratch = call_scratch(packed_bytes + static_cast<size_t>(pairs * kAmxTokens) * 4, own);
  auto* sum_b = reinterpret_cast<int32_t*>(scratch + packed_bytes);
  run_tiles(pairs, c.n_rows * c.k * 8, [&](int64_t p) {
    pack_b_for_tiles(c.B, g.b.row_stride, c.n_rows, c.k, steps, p, p + 1, scratch);
    for (int64_t n = p * kAmxTokens; n < std::min(c.n_rows, (p + 1) * kAmxTokens); ++n)
      sum_b[n] = c.zp ? code_sum(c.B + n * g.b.row_stride, c.k) : 0;
  });

  const int64_t blocks = (c.m_rows + kAmxRows - 1) / kAmxRows;
  run_tiles(blocks, c.m_rows * c.n_rows * c.k, [&](int64_t t) {
    const EndOfTask end_of_task{kI8Amx.end_task};
    const int64_t m0 = t * kAmxRows;
    const int rows = static_cast<int>(std::min(kAmxRows, c.m_rows - m0));
    int32_t sum_a[kAmxRows] = {};
    if (c.zp)
      for (int r = 0; r < rows; ++r) sum_a[r] = code_sum(c.A + (m0 + r) * g.a.row_stride, c.k);
    // The block's rows where they lie, or copied (see above).
    const uint8_t* a = c.A + m0 * g.a.row_stride;
    int64_t a_stride = g.a.row_stride;
    thread_local ScratchBytes kept_rows;
    ScratchBytes own_rows;
    if (rows < kAmxRows || kp != c.k) {
      const size_t bytes = static_cast<size_t>(kAmxRows * kp);
      ScratchBytes& buf = bytes <= kKeptScratchBytes ? kept_rows : own_rows;
      if (buf.size() < bytes) buf.resize(bytes);
      // Each byte written once: a row's codes, then zeros to kp; missing rows all zeros.
      for (int r = 0; r < kAmxRows; ++r) {
        uint8_t* dst = buf.data() + r * kp;
        const int64_t have = r < rows ? c.k : 0;
        if (have > 0) std::memcpy(dst, a + r * g.a.row_stride, static_cast<size_t>(have));
        std::memset(dst + have, 0, static_cast<size_t>(kp - have));
      }
      a = buf.data();
      a_stride = kp;
    }
    alignas(64) int32_t out[4][16][16];
    for (int64_t p = 0; p < pairs; ++p) {
      kI8Amx.block_2x2(a, a_stride, scratch + p * steps * kI8AmxGroupBytes, steps, &out[0][0][0]);
      for (int i = 0; i < 2; ++i)
        for (int j = 0; j < 2; ++j) {
          const int64_t m = m0 + 16 * i, n = p * kAmxTokens + 16 * j;
          const int r_here = static_cast<int>(std::min<int64_t>(16, c.m_rows - m));
          const int c_here = static_cast<int>(std::min<int64_t>(16, c.n_rows - n));
          if (r_here <= 0 || c_here <= 0) continue;
          epilogue_store_int_tile(c.ep, m, r_here, n, c_here, out[2 * i + j], sum_a + 16 * i, sum_b + n);
        }
    }
  });
  return {};
}

}  // namespace qg::detail::cpu

#else  // not compiled for AVX2 (non-x86 host): its arch window keeps it from being chosen

namespace qg::detail::cpu {
Status gemm_i8_avx2(const GemmArgs&) {
  return Status(StatusCode::unsupported, "qg.gemm: the AVX2 int8 kernel was not compiled in");
}
Status gemm_i8_amx(const GemmArgs&) {
  return Status(StatusCode::unsupported, "qg.gemm: the AMX int8 kernel was not compiled in");
}
}  // namespace qg::detail::cpu

#endif
