// SPDX-License-Identifier: MIT
// gemm_q4_0_q8_1_avx2_body.h: the AVX2-width Q4_0 x Q8_1 kernels, compiled
// twice: by gemm_q4_0_q8_1_avx2.cpp (-mavx2 -mfma -mf16c; cpu_avx2 and
// cpu_avx2_panel) and by gemm_q4_0_q8_1_avxvnni.cpp (the same plus
// -mavxvnni; cpu_avx_vnni and cpu_avx_vnni_panel), which define
// QG_Q4_AVX2_VNNI as 0 or 1 first. The one difference is how a block's
// products become int32 lane sums (block_sums, half_times_cols): vpmaddubsw
// and vpmaddwd, or AVX-VNNI's vpdpbusd (ymm, VEX-encoded), which gives the
// same integers, so both kernels give the same bits. Everything here has
// internal linkage (an anonymous namespace), so each file keeps the copy
// compiled for its own ISA: an inline function shared between files built
// with different -m flags could be replaced at link time by the other
// file's copy.
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
// The "8 * sum a" term, in the int32 layout of the folded products, depends
// only on A and is made once per call for every A block by the shared driver
// (gemm_q4_0_q8_1_simd.cpp), together with the fp32 A scale, instead of once
// per W row pair; it is added after vpmaddwd. Every int16 stays exact for
// every byte value, a = -128 included: |w*a pair| <= 3840, a lane of the two
// vpmaddubsw sums <= 7680 (unlike the sign-flip trick, which wraps on -128).
//
// Each int32 lane is scaled by d = fp32(d_w) * fp32(d_a) and accumulated in
// fp32, one FMA per block; the driver recomputes outputs that come out
// non-finite exactly (see there), and does the task split and the epilogue.
//
// N = 1 (one activation row: decode) takes its own path, four W rows against
// the one A row per step in 64-row tasks (four_rows_times_one): the same
// arithmetic, so the same bits, with the A side loaded once per four rows.
// Passes that stream W from memory (N = 1, and the first column group of each
// task otherwise) prefetch each W row a few lines ahead (kPrefetchBytes),
// into L2 (prefetcht1), as the AVX-512 kernel does: against prefetcht0, on a
// 2-core Zen 4 VM, interleaved over three rounds at N = 1, 840-953 us
// against 974-1034 at 4096 x 14336 and 959-1036 against 1341-1390 at
// 14336 x 4096 (the AVX-512 kernel: 765-908 against 983-1054 and 866-980
// against 1275-1365); level at N = 2 and 8.
#pragma once

#if !defined(QG_Q4_AVX2_VNNI)
#error "define QG_Q4_AVX2_VNNI (0 or 1) before including gemm_q4_0_q8_1_avx2_body.h"
#endif

#include <immintrin.h>

#include <cstring>
#include <utility>

#include "cpu/float_elem.h"
#include "cpu/gemm_q4_0_q8_1_simd.h"
#include "cpu/prefetch.h"

namespace qg::detail::cpu::q4q8 {
namespace {

// One block's int32 lane sums of a row pair (see the top): the low-nibble
// products with A codes 0..15 and the high-nibble ones with 16..31, plus the
// correction c (-8 * sum a). AVX2: two vpmaddubsw, an int16 add (exact: a
// lane's pair sums are at most 7680), vpmaddwd and an int32 add. AVX-VNNI:
// two vpdpbusd into c, the same integers.
inline __m256i block_sums(__m256i lo, __m256i alo, __m256i hi, __m256i ahi, __m256i c) {
#if QG_Q4_AVX2_VNNI
  return _mm256_dpbusd_avx_epi32(_mm256_dpbusd_avx_epi32(c, lo, alo), hi, ahi);
#else
  const __m256i p = _mm256_add_epi16(_mm256_maddubs_epi16(lo, alo), _mm256_maddubs_epi16(hi, ahi));
  return _mm256_add_epi32(_mm256_madd_epi16(p, _mm256_set1_epi16(1)), c);
#endif
}


// Rows w[0] and w[1] of W (w[1] == w[0] for an odd last row) against NR rows
// of A; out[0][j] and out[1][j] get the two rows' sums for column j.
// With PF (the first pass of a task over its rows, which reads them from
// memory) the rows are prefetched kPrefetchBytes ahead, and past their end
// the rows `next` bytes further on (the task's next pair; 0: none), as in
// four_rows_times_one below; later passes find the rows in L2.
template <int NR, bool PF>
void two_rows_times_cols(const uint8_t* const* w, const uint8_t* const* a, const int32_t* const* corr,
                         const float* const* da, int64_t nb, int64_t next, float (*out)[4]) {
  const uint8_t* const w0 = w[0];
  const uint8_t* const w1 = w[1];
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  // vcvtph2ps gives [d_w0, d_w1, 0, 0]; this spreads it to [d_w0 x4 | d_w1 x4].
  const __m256i spread = _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1);
  __m256 acc[NR];
  for (int j = 0; j < NR; ++j) acc[j] = _mm256_setzero_ps();
  const int64_t row_bytes = nb * kQ4Bytes;
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* p0 = w0 + b * kQ4Bytes;
    const uint8_t* p1 = w1 + b * kQ4Bytes;
    if (PF) {
      // One prefetch per row and block (18 bytes): no 64-byte line is missed.
      prefetch_rows(w, 2, b * kQ4Bytes + kPrefetchBytes, row_bytes, next);
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
      const __m256i c = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(corr[j] + b * 4)));
      const __m256 dot = _mm256_cvtepi32_ps(block_sums(lo, alo, hi, ahi, c));
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

// One block of one row pair: the body of two_rows_times_cols for one A row,
// with dwa = [d_w0 * d_a x4 | d_w1 * d_a x4] already made.
inline __m256 pair_block(const uint8_t* p0, const uint8_t* p1, __m256i alo, __m256i ahi, __m256i c, __m256 dwa,
                         __m256 acc) {
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  const __m256i q =
      _mm256_loadu2_m128i(reinterpret_cast<const __m128i*>(p1 + 2), reinterpret_cast<const __m128i*>(p0 + 2));
  const __m256i lo = _mm256_and_si256(q, low4);
  const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), low4);
  return _mm256_fmadd_ps(_mm256_cvtepi32_ps(block_sums(lo, alo, hi, ahi, c)), dwa, acc);
}

// One block of rows w[0..3] (w advanced by the caller) against A block ab.
inline void four_rows_block(const uint8_t* const* w, const uint8_t* ab, const int32_t* corr, const float* da,
                            __m256& acc01, __m256& acc23) {
  const __m256i alo = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(ab + 4)));
  const __m256i ahi = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(ab + 20)));
  const __m256i c = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(corr)));
  // The four rows' fp16 scales gathered with scalar loads (integer ports,
  // idle here) into one qword: one vcvtph2ps and one vmulps for four rows.
  const uint64_t h = gather_u16x4(w[0], w[1], w[2], w[3]);
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
void four_rows_times_one(const uint8_t* const* w0, int64_t next, const uint8_t* a, const int32_t* corr,
                         const float* da, int64_t nb, float out[4]) {
  __m256 acc01 = _mm256_setzero_ps(), acc23 = _mm256_setzero_ps();
  const uint8_t* w[4] = {w0[0], w0[1], w0[2], w0[3]};
  const int64_t row_bytes = nb * kQ4Bytes;
  int64_t b = 0;
  for (; b + 2 <= nb; b += 2) {
    prefetch_rows(w0, 4, b * kQ4Bytes + kPrefetchBytes, row_bytes, next);
    four_rows_block(w, a + b * kQ8Bytes, corr + b * 4, da + b, acc01, acc23);
    for (int r = 0; r < 4; ++r) w[r] += kQ4Bytes;
    four_rows_block(w, a + (b + 1) * kQ8Bytes, corr + (b + 1) * 4, da + b + 1, acc01, acc23);
    for (int r = 0; r < 4; ++r) w[r] += kQ4Bytes;
  }
  if (b < nb) four_rows_block(w, a + b * kQ8Bytes, corr + b * 4, da + b, acc01, acc23);
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

// ---- the panel path (gemm_q4_0_q8_1_simd.h, PanelKernels) ----
// The layout is the AVX-512 kernel's: a panel vector's low 32 bytes hold rows
// 0..7, its high 32 bytes rows 8..15, so a ymm is half a panel vector.

// Rows w[0..7]'s blocks: rows r and r + 4 share a ymm (one per 128-bit lane),
// and the 4 x 4 dword transpose of each lane (vpunpck{l,h}dq, then
// vpunpck{l,h}qdq: 8 shuffles for eight rows) leaves T_c with dword c of
// rows 0..7 in lane order.
void pack_half(const uint8_t* const* w, uint8_t* dst) {
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  __m256i l[4];
  for (int i = 0; i < 4; ++i)
    l[i] = _mm256_loadu2_m128i(reinterpret_cast<const __m128i*>(w[i + 4] + 2), reinterpret_cast<const __m128i*>(w[i] + 2));
  const __m256i t0 = _mm256_unpacklo_epi32(l[0], l[1]), t1 = _mm256_unpacklo_epi32(l[2], l[3]);
  const __m256i t2 = _mm256_unpackhi_epi32(l[0], l[1]), t3 = _mm256_unpackhi_epi32(l[2], l[3]);
  const __m256i t[4] = {_mm256_unpacklo_epi64(t0, t1), _mm256_unpackhi_epi64(t0, t1), _mm256_unpacklo_epi64(t2, t3),
                        _mm256_unpackhi_epi64(t2, t3)};
  for (int c = 0; c < 4; ++c) {
    _mm256_store_si256(reinterpret_cast<__m256i*>(dst + c * 64), _mm256_and_si256(t[c], low4));
    _mm256_store_si256(reinterpret_cast<__m256i*>(dst + (4 + c) * 64),
                       _mm256_and_si256(_mm256_srli_epi16(t[c], 4), low4));
  }
  const uint64_t h0 = gather_u16x4(w[0], w[1], w[2], w[3]), h1 = gather_u16x4(w[4], w[5], w[6], w[7]);
  _mm256_store_ps(reinterpret_cast<float*>(dst + 512),
                  _mm256_cvtph_ps(_mm_set_epi64x(static_cast<int64_t>(h1), static_cast<int64_t>(h0))));
}

void pack_panel(const uint8_t* const* w0, int64_t nb, int64_t next, uint8_t* panel) {
  const uint8_t* w[kPanelRows];
  for (int r = 0; r < kPanelRows; ++r) w[r] = w0[r];
  const int64_t row_bytes = nb * kQ4Bytes;
  for (int64_t b = 0; b < nb; ++b, panel += kPanelBlockBytes) {
    // One prefetch per row every two blocks (36 bytes: no line skipped).
    if ((b & 1) == 0) prefetch_rows(w0, kPanelRows, b * kQ4Bytes + kPrefetchBytes, row_bytes, next);
    pack_half(w, panel);
    pack_half(w + 8, panel + 32);
    for (int r = 0; r < kPanelRows; ++r) w[r] += kQ4Bytes;
  }
}

// Half a panel (8 W rows, `half` 0 or 1) against NJ rows J0.. of an NC-row A
// group. vpmaddubsw (unsigned nibbles x four A codes broadcast, signed)
// leaves two int16 pair sums per lane (row); the eight chunks of a block are
// added in int16 (each pair sum is at most 2 * 15 * 128 = 3840 in magnitude,
// eight of them 30720 < 2^15: no wrap), one vpmaddwd makes the lane's int32,
// -8 * sum a is added, and then, as in the AVX-512 pass, one convert and one
// FMA with d_w * d_a: the same operations on the same values in the same
// order, so the same bits as cpu_avx512_vnni_panel. At most four A rows a
// pass: their int16 and fp32 sums, the panel vector, the broadcast and the
// scales fill 13 of the 16 ymm registers.
//
// Blocks: where the pass finds half h of a block's code vector c (eight
// rows' unsigned nibbles) and those rows' fp32 scales: a packed panel, or a
// q4_0x16 group in place (nibbles split, fp16 scales widened as they load:
// the same values, so the same integers, products and bits).
struct PanelBlocks {
  static constexpr int64_t kBytes = kPanelBlockBytes;
  [[gnu::always_inline]] static __m256i codes(const uint8_t* p, int half, int c) {
    return _mm256_load_si256(reinterpret_cast<const __m256i*>(p + 32 * half + 64 * c));
  }
  [[gnu::always_inline]] static __m256 scales(const uint8_t* p, int half) {
    return _mm256_load_ps(reinterpret_cast<const float*>(p + 512 + 32 * half));
  }
  static void prefetch(const uint8_t*) {}  // a panel is in L2: its task packed it
};
struct X16Blocks {
  static constexpr int64_t kBytes = kX16BlockBytes;
  [[gnu::always_inline]] static __m256i codes(const uint8_t* p, int half, int c) {
    const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 32 * half + 64 * (c & 3)));
    return _mm256_and_si256(c < 4 ? q : _mm256_srli_epi16(q, 4), _mm256_set1_epi8(0x0F));
  }
  [[gnu::always_inline]] static __m256 scales(const uint8_t* p, int half) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 256 + 16 * half)));
  }
  // Once a block and pass: its 4.5 lines kX16PrefetchBytes ahead (a group
  // streams from memory in one pass at small N).
  [[gnu::always_inline]] static void prefetch(const uint8_t* p) {
#pragma GCC unroll 5
    for (int i = 0; i < 5; ++i) __builtin_prefetch(p + kX16PrefetchBytes + 64 * i, 0, 2);
  }
};

template <int NC, int J0, int NJ, class Blocks>
void half_times_cols(const uint8_t* panel, int64_t nb, const uint8_t* group, int half, float (*out)[kPanelRows]) {
  constexpr int64_t kGroupBlockBytes = panel_group_block_bytes(NC);
  const uint8_t* ph = panel;
  __m256 acc[NJ];
  for (int j = 0; j < NJ; ++j) acc[j] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b, ph += Blocks::kBytes, group += kGroupBlockBytes) {
    Blocks::prefetch(ph);
    __m256i t[NJ];
#if QG_Q4_AVX2_VNNI
    // vpdpbusd adds each lane's four products into an int32 sum: two chains
    // a column (even and odd c, the first starting at -8 * sum a), added at
    // the end, so that four columns keep eight vpdpbusd in flight instead of
    // waiting out eight dependent ones (same integers either way).
    __m256i u[NJ];
#pragma GCC unroll 4
    for (int j = 0; j < NJ; ++j) {
      t[j] = _mm256_set1_epi32(load_i32(group + NC * 32 + 4 * (J0 + j)));
      u[j] = _mm256_setzero_si256();
    }
#pragma GCC unroll 8
    for (int c = 0; c < 8; ++c) {
      const __m256i wv = Blocks::codes(ph, half, c);
#pragma GCC unroll 4
      for (int j = 0; j < NJ; ++j) {
        __m256i& sum = c % 2 == 0 ? t[j] : u[j];
        sum = _mm256_dpbusd_avx_epi32(sum, wv, _mm256_set1_epi32(load_i32(group + 32 * (J0 + j) + 4 * c)));
      }
    }
#pragma GCC unroll 4
    for (int j = 0; j < NJ; ++j) t[j] = _mm256_add_epi32(t[j], u[j]);
#else
    const __m256i ones16 = _mm256_set1_epi16(1);
#pragma GCC unroll 8
    for (int c = 0; c < 8; ++c) {
      const __m256i wv = Blocks::codes(ph, half, c);
#pragma GCC unroll 4
      for (int j = 0; j < NJ; ++j) {
        const __m256i m = _mm256_maddubs_epi16(wv, _mm256_set1_epi32(load_i32(group + 32 * (J0 + j) + 4 * c)));
        t[j] = c == 0 ? m : _mm256_add_epi16(t[j], m);
        // Keeps the sums in this order: GCC otherwise re-associates the
        // adds into a tree that holds every product at once and spills.
        __asm__("" : "+x"(t[j]));
      }
    }
#pragma GCC unroll 4
    for (int j = 0; j < NJ; ++j)
      t[j] = _mm256_add_epi32(_mm256_madd_epi16(t[j], ones16),
                              _mm256_set1_epi32(load_i32(group + NC * 32 + 4 * (J0 + j))));
#endif
    const __m256 dw = Blocks::scales(ph, half);
#pragma GCC unroll 4
    for (int j = 0; j < NJ; ++j) {
      const __m256i s = t[j];
      const __m256 d = _mm256_mul_ps(dw, _mm256_set1_ps(load_f32(group + NC * 36 + 4 * (J0 + j))));
      acc[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), d, acc[j]);
    }
  }
  for (int j = 0; j < NJ; ++j) _mm256_storeu_ps(out[J0 + j] + 8 * half, acc[j]);
}

// N = 1 on q4_0x16 (gemm_q4_0_q8_1_simd.h, X16DecodeFn): G groups a pass,
// block by block, each in its two halves, so 2G accumulators and G streams
// are in flight where one group a pass waits on each block's chain; the A
// row's code dwords broadcast once a block for all of them. Per group and
// half the operations of half_times_cols<1, 0, 1, X16Blocks> on the same
// values in the same order: the same bits. G <= 2: the eight broadcasts,
// four accumulators and a block's sums fill the 16 ymm registers.
template <int G>
void x16_decode(const uint8_t* w, int64_t stride, int64_t nb, const uint8_t* group, float (*out)[kPanelRows]) {
  __m256 acc[G][2];
  for (int q = 0; q < G; ++q) acc[q][0] = acc[q][1] = _mm256_setzero_ps();
  constexpr int64_t kGroupBlockBytes = panel_group_block_bytes(1);
  for (int64_t b = 0; b < nb; ++b, w += kX16BlockBytes, group += kGroupBlockBytes) {
    __m256i a[8];
#pragma GCC unroll 8
    for (int c = 0; c < 8; ++c) a[c] = _mm256_set1_epi32(load_i32(group + 4 * c));
    const __m256 da = _mm256_set1_ps(load_f32(group + 36));
#pragma GCC unroll 2
    for (int q = 0; q < G; ++q) {
      const uint8_t* p = w + q * stride;
      X16Blocks::prefetch(p);
#pragma GCC unroll 2
      for (int half = 0; half < 2; ++half) {
#if QG_Q4_AVX2_VNNI
        __m256i t = _mm256_set1_epi32(load_i32(group + 32)), u = _mm256_setzero_si256();
#pragma GCC unroll 8
        for (int c = 0; c < 8; ++c) {
          __m256i& sum = c % 2 == 0 ? t : u;
          sum = _mm256_dpbusd_avx_epi32(sum, X16Blocks::codes(p, half, c), a[c]);
        }
        t = _mm256_add_epi32(t, u);
#else
        __m256i t = _mm256_maddubs_epi16(X16Blocks::codes(p, half, 0), a[0]);
#pragma GCC unroll 7
        for (int c = 1; c < 8; ++c) {
          t = _mm256_add_epi16(t, _mm256_maddubs_epi16(X16Blocks::codes(p, half, c), a[c]));
          __asm__("" : "+x"(t));  // this order, as half_times_cols keeps it
        }
        t = _mm256_add_epi32(_mm256_madd_epi16(t, _mm256_set1_epi16(1)), _mm256_set1_epi32(load_i32(group + 32)));
#endif
        const __m256 d = _mm256_mul_ps(X16Blocks::scales(p, half), da);
        acc[q][half] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(t), d, acc[q][half]);
      }
    }
  }
  for (int q = 0; q < G; ++q) {
    _mm256_storeu_ps(out[q], acc[q][0]);
    _mm256_storeu_ps(out[q] + 8, acc[q][1]);
  }
}

// The group's NC rows in ceil(NC / 4) passes as even as possible (5 = 3 + 2,
// not 4 + 1: a pass costs its panel loads whatever its width), for each half
// of the panel.
constexpr int kPassCols = 4;
constexpr int passes(int nc) { return (nc + kPassCols - 1) / kPassCols; }
constexpr int pass_start(int nc, int i) { return i * (nc / passes(nc)) + (i < nc % passes(nc) ? i : nc % passes(nc)); }

template <int NC, int I, class Blocks>
void passes_from(const uint8_t* panel, int64_t nb, const uint8_t* group, int half, float (*out)[kPanelRows]) {
  constexpr int j0 = pass_start(NC, I), nj = pass_start(NC, I + 1) - j0;
  half_times_cols<NC, j0, nj, Blocks>(panel, nb, group, half, out);
  if constexpr (I + 1 < passes(NC)) passes_from<NC, I + 1, Blocks>(panel, nb, group, half, out);
}

template <int NC, class Blocks>
void panel_times_cols(const uint8_t* panel, int64_t nb, const uint8_t* group, float (*out)[kPanelRows]) {
  for (int half = 0; half < 2; ++half) passes_from<NC, 0, Blocks>(panel, nb, group, half, out);
}

// The kernel tables, one pair per file that compiles this.
template <size_t... I>
constexpr PanelKernels panel_kernels_of(std::index_sequence<I...>) {
  return {pack_panel, {nullptr, panel_times_cols<I + 1, PanelBlocks>...}, 0,
          {nullptr, panel_times_cols<I + 1, X16Blocks>...}, nullptr,
          {nullptr, x16_decode<1>, x16_decode<2>, nullptr, nullptr}};
}
constexpr PanelKernels panel_kernels() { return panel_kernels_of(std::make_index_sequence<kPanelCols>{}); }

constexpr TileKernels tile_kernels() {
  return {
    2,
    {{nullptr, two_rows_times_cols<1, false>, two_rows_times_cols<2, false>, two_rows_times_cols<3, false>,
      two_rows_times_cols<4, false>},
     {nullptr, two_rows_times_cols<1, true>, two_rows_times_cols<2, true>, two_rows_times_cols<3, true>,
      two_rows_times_cols<4, true>}},
    4,
    four_rows_times_one};
}

}  // namespace
}  // namespace qg::detail::cpu::q4q8
