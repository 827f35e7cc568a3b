// SPDX-License-Identifier: MIT
// gemm_q4_0_q8_1_avx512vnni.cpp: AVX-512 VNNI register tiles for the Q4_0 x
// Q8_1 GEMM, compiled with -mavx512f -mavx512bw -mavx512vl -mavx512vnni -mfma
// -mf16c and registered with an arch window that needs those and AVX2
// (registry.cpp). The driver around them (A preparation, task split, the
// exact recompute of non-finite outputs, epilogue) is the one the AVX2 kernel
// uses: gemm_q4_0_q8_1_simd.cpp. Nothing here has external linkage except the
// table at the end (see gemm_q4_0_q8_1_simd.h on why that matters).
//
// vpdpbusd multiplies unsigned bytes (its first source) by signed bytes (its
// second), sums each group of four products into an int32 lane and adds that
// lane of the accumulator, without saturation. Q4_0 codes are unsigned
// nibbles w in 0..15 and Q8_1 codes signed bytes a, so the nibbles go in as
// the unsigned operand as they are, and sum (w-8)*a = sum w*a - 8*sum a takes
// the "-8 * sum a" term (made once per call for every A block by the driver,
// in this int32 lane layout) as the accumulator's starting value: no extra
// instruction, and exact for every byte value, a = -128 included (a lane:
// |8 * 8 * 128| + |8 * 15 * 128| < 2^15; the sign-flip trick of vpmaddubsw
// kernels wraps on -128 instead).
//
// The register tile is four rows of W by up to four rows of A. One zmm holds
// the four W rows' 16-byte code blocks, [row 0 | row 1 | row 2 | row 3], and
// is split into low nibbles (elements 0..15 of each row) and high nibbles
// (16..31); the matching A operands are the block's two 16-byte halves, each
// broadcast to all four 128-bit lanes by vbroadcasti32x4 (a load, no
// shuffle). Two vpdpbusd then leave, per 128-bit lane, one W row's block
// dot product in 4 int32 lanes, lane i covering elements 4i..4i+3 and
// 16+4i..19+4i: four output elements share each multiply, convert and FMA,
// where the AVX2 kernel's ymm tile shares them between two, and two vpdpbusd
// replace its vpmaddubsw x2, vpaddw, vpmaddwd and vpaddd.
//
// Those int32 lanes are exactly the AVX2 kernel's (after its vpmaddwd), each
// is scaled by d = fp32(d_w) * fp32(d_a) and accumulated by one FMA per block
// as there, and the four lanes of a row are folded as its vhaddps tree folds
// them, (l0 + l1) + (l2 + l3): so the results are the AVX2 kernel's, bit for
// bit, and a test holds both kernels to that where the CPU has AVX-512 VNNI.
//
// N = 1 (decode) takes its own path, four W rows (one zmm) against the one A
// row per step (four_rows_times_one): the same arithmetic in the same order,
// so the same bits as the 4 x 4 tile, with every W byte read once and
// prefetched kPrefetchBytes ahead as in the AVX2 kernel (the W stream, not
// the vector work, is what N = 1 waits for).
#include "cpu/gemm_q4_0_q8_1_simd.h"

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && defined(__AVX512VNNI__) && \
    defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>

#include <cstring>
#include <utility>

#include "cpu/float_elem.h"
#include "cpu/panel_pack_avx512.h"
#include "cpu/prefetch.h"

namespace qg::detail::cpu::q4q8 {

namespace {

// [d0, d1, d2, d3] -> [d0 x4 | d1 x4 | d2 x4 | d3 x4], one vpermps: each row's
// scale over its 128-bit lane. (Only elements 0..3 of the widened source are
// read, so its undefined upper part does not matter.)
__m512 spread4(__m128 d4) {
  return _mm512_permutexvar_ps(_mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3),
                               _mm512_castps128_ps512(d4));
}

// One block's dot products of four rows (lo/hi: their nibbles) with one A
// block: 4 int32 lanes per row, each lane's share of sum (w-8)*a. vpdpbusd's
// first multiplicand is the unsigned one: the nibbles; the second, signed:
// the A codes. The accumulator starts at the lanes' -8 * sum a.
__m512i block_dot(__m512i lo, __m512i hi, const uint8_t* ab, const int32_t* corr) {
  const __m512i alo = _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(ab + 4)));
  const __m512i ahi = _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(ab + 20)));
  const __m512i c = _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(corr)));
  return _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(c, lo, alo), hi, ahi);
}

// vhaddps within each 128-bit lane, as AVX2 has it and AVX-512 does not:
// [a0 + a1, a2 + a3, b0 + b1, b2 + b3] per lane, the same sums in the same
// order, so the fold below gives the AVX2 kernel's bits.
__m512 hadd(__m512 a, __m512 b) {
  return _mm512_add_ps(_mm512_shuffle_ps(a, b, _MM_SHUFFLE(2, 0, 2, 0)), _mm512_shuffle_ps(a, b, _MM_SHUFFLE(3, 1, 3, 1)));
}

// Rows w[0..3] of W against NR rows of A; out[r][j] gets row r's sum for
// column j. With PF (the first pass of a task over its rows, which reads them
// from memory) the rows are prefetched kPrefetchBytes ahead, and past their
// end the rows `next` bytes further on (the task's next four; 0: none); later
// passes find the rows in L2.
template <int NR, bool PF>
void four_rows_times_cols(const uint8_t* const* w, const uint8_t* const* a, const int32_t* const* corr,
                          const float* const* da, int64_t nb, int64_t next, float (*out)[4]) {
  const __m512i low4 = _mm512_set1_epi8(0x0F);
  __m512 acc[NR];
  for (int j = 0; j < NR; ++j) acc[j] = _mm512_setzero_ps();
  const int64_t row_bytes = nb * kQ4Bytes;
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* p0 = w[0] + b * kQ4Bytes;
    const uint8_t* p1 = w[1] + b * kQ4Bytes;
    const uint8_t* p2 = w[2] + b * kQ4Bytes;
    const uint8_t* p3 = w[3] + b * kQ4Bytes;
    if (PF) {
      // One prefetch per row and block (18 bytes): no 64-byte line is missed.
      prefetch_rows(w, 4, b * kQ4Bytes + kPrefetchBytes, row_bytes, next);
    }
    const __m512i q = load_codes4(p0, p1, p2, p3);
    const __m512i lo = _mm512_and_si512(q, low4);
    const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(q, 4), low4);
    const __m512 dw = spread4(scales4(p0, p1, p2, p3));
    for (int j = 0; j < NR; ++j) {
      const __m512 dot = _mm512_cvtepi32_ps(block_dot(lo, hi, a[j] + b * kQ8Bytes, corr[j] + b * 4));
      acc[j] = _mm512_fmadd_ps(dot, _mm512_mul_ps(dw, _mm512_set1_ps(da[j][b])), acc[j]);
    }
  }
  // Two rounds of the in-lane hadd fold each column's four lanes per row:
  // 128-bit lane r of the result is row r, columns 0..3, i.e. out[r].
  __m512 v[4];
  for (int j = 0; j < 4; ++j) v[j] = j < NR ? acc[j] : _mm512_setzero_ps();
  _mm512_storeu_ps(&out[0][0], hadd(hadd(v[0], v[1]), hadd(v[2], v[3])));
}

// One block of rows w[0..3] (w advanced by the caller) against A block ab.
// d_a multiplies the four scales before they are spread (one vmulps on an
// xmm): the same products, element for element, as four_rows_times_cols'.
// Forced inline: GCC otherwise calls it (three call sites), a call per block.
[[gnu::always_inline]] inline __m512 four_rows_block(const uint8_t* const* w, const uint8_t* ab, const int32_t* corr, const float* da, __m512 acc) {
  const __m512i low4 = _mm512_set1_epi8(0x0F);
  const __m512 dwa = spread4(_mm_mul_ps(scales4(w[0], w[1], w[2], w[3]), _mm_broadcast_ss(da)));
  const __m512i q = load_codes4(w[0], w[1], w[2], w[3]);
  const __m512i lo = _mm512_and_si512(q, low4);
  const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(q, 4), low4);
  return _mm512_fmadd_ps(_mm512_cvtepi32_ps(block_dot(lo, hi, ab, corr)), dwa, acc);
}

// N = 1: rows w0[0..3] (repeats of the last row where fewer are left) times
// the A row; out[r] is row r's sum. As in the AVX2 kernel, each row is
// prefetched kPrefetchBytes ahead once every two blocks (36 bytes: no 64-byte
// line is skipped) and, past the end of the rows, at the start of the
// caller's next group `next` bytes on (0: none), so that group does not begin
// with a cold first kPrefetchBytes of each row. One FMA chain: a block is
// about 15 uops against the chain's 4-cycle latency, and it keeps the order of
// four_rows_times_cols.
void four_rows_times_one(const uint8_t* const* w0, int64_t next, const uint8_t* a, const int32_t* corr,
                         const float* da, int64_t nb, float* out) {
  __m512 acc = _mm512_setzero_ps();
  const uint8_t* w[4] = {w0[0], w0[1], w0[2], w0[3]};
  const int64_t row_bytes = nb * kQ4Bytes;
  int64_t b = 0;
  for (; b + 2 <= nb; b += 2) {
    prefetch_rows(w0, 4, b * kQ4Bytes + kPrefetchBytes, row_bytes, next);
    acc = four_rows_block(w, a + b * kQ8Bytes, corr + b * 4, da + b, acc);
    for (int r = 0; r < 4; ++r) w[r] += kQ4Bytes;
    acc = four_rows_block(w, a + (b + 1) * kQ8Bytes, corr + (b + 1) * 4, da + b + 1, acc);
    for (int r = 0; r < 4; ++r) w[r] += kQ4Bytes;
  }
  if (b < nb) acc = four_rows_block(w, a + b * kQ8Bytes, corr + b * 4, da + b, acc);
  // The fold of four_rows_times_cols with one column: lane r's element 0 is
  // (l0 + l1) + (l2 + l3) of row r; vpermps gathers the four into an xmm.
  const __m512 t = hadd(acc, acc);
  const __m512 s = hadd(t, t);
  const __m512 firsts = _mm512_permutexvar_ps(_mm512_setr_epi32(0, 4, 8, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0), s);
  _mm_storeu_ps(out, _mm512_castps512_ps128(firsts));
}

// ---- the panel path (gemm_q4_0_q8_1_simd.h, PanelKernels) ----

// Where a pass finds a block's eight vectors of unsigned nibbles (lane r:
// W row r) and the 16 rows' scales as fp32: a packed panel, or a q4_0x16
// group in place (its nibbles split and its fp16 scales widened here: the
// same values, so the pass's integers and products are the same).
struct PanelBlocks {
  static constexpr int64_t kBytes = kPanelBlockBytes;
  [[gnu::always_inline]] static void load(const uint8_t* p, __m512i* wv, __m512* dw) {
#pragma GCC unroll 8
    for (int c = 0; c < 8; ++c) wv[c] = _mm512_load_si512(p + c * 64);
    *dw = _mm512_load_ps(reinterpret_cast<const float*>(p + 512));
  }
};
// A group streams from memory in one pass at small N (decode): each of its
// 4.5 lines a block is prefetched kPrefetchBytes ahead, running on into the
// task's next group (adjacent where the groups are packed).
struct X16Blocks {
  static constexpr int64_t kBytes = kX16BlockBytes;
  [[gnu::always_inline]] static void load(const uint8_t* p, __m512i* wv, __m512* dw) {
    const __m512i low4 = _mm512_set1_epi8(0x0F);
#pragma GCC unroll 5
    for (int i = 0; i < 5; ++i) __builtin_prefetch(p + kX16PrefetchBytes + 64 * i, 0, 2);
#pragma GCC unroll 4
    for (int c = 0; c < 4; ++c) {
      const __m512i q = _mm512_loadu_si512(p + c * 64);
      wv[c] = _mm512_and_si512(q, low4);
      wv[4 + c] = _mm512_and_si512(_mm512_srli_epi16(q, 4), low4);
    }
    *dw = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 256)));
  }
};

// The 16 W rows against NC rows of an A group. Per block and A row: the integer
// sum starts at -8 * sum a (the nibbles enter unsigned, as in the tiles),
// eight vpdpbusd add the block's 32 products for all 16 W rows, each against
// four A codes broadcast from memory ({1to16}: no shuffle, no register), then
// one convert and one FMA with d_w * d_a. The block's integer sum is at most
// 2^15 in magnitude, so its conversion is exact. Every A operand sits at a fixed offset
// from `group` (the interleaved layout), so the unrolled loop needs no
// pointer per row; NC accumulators, the eight code vectors and the scales
// take 25 of the 32 zmm registers at NC = 16.
template <int NC, class Blocks>
void panel_times_cols(const uint8_t* panel, int64_t nb, const uint8_t* group, float (*out)[kPanelRows]) {
  __m512 acc[NC];
  for (int j = 0; j < NC; ++j) acc[j] = _mm512_setzero_ps();
  constexpr int64_t kGroupBlockBytes = panel_group_block_bytes(NC);
  for (int64_t b = 0; b < nb; ++b, panel += Blocks::kBytes, group += kGroupBlockBytes) {
    __m512i wv[8];
    __m512 dw;
    Blocks::load(panel, wv, &dw);
#pragma GCC unroll 16
    for (int j = 0; j < NC; ++j) {
      // A block's eight vpdpbusd in one dependent chain (about 5 cycles
      // each) would outlast the rest of its work where few A rows give few
      // chains: at NC <= 2 two chains (even and odd c), added at the end
      // (the same integer). Wider groups have NC chains to overlap. (N = 1
      // on q4_0x16 takes x16_decode below instead.)
      constexpr int kChains = NC <= 2 ? 2 : 1;
      __m512i chain[kChains];
      chain[0] = _mm512_set1_epi32(load_i32(group + NC * 32 + 4 * j));
      if constexpr (kChains == 2) chain[1] = _mm512_setzero_si512();
#pragma GCC unroll 8
      for (int c = 0; c < 8; ++c)
        chain[c % kChains] =
            _mm512_dpbusd_epi32(chain[c % kChains], wv[c], _mm512_set1_epi32(load_i32(group + 32 * j + 4 * c)));
      if constexpr (kChains == 2) chain[0] = _mm512_add_epi32(chain[0], chain[1]);
      const __m512i s = chain[0];
      const __m512 d = _mm512_mul_ps(dw, _mm512_set1_ps(load_f32(group + NC * 36 + 4 * j)));
      acc[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), d, acc[j]);
    }
  }
  for (int j = 0; j < NC; ++j) _mm512_storeu_ps(out[j], acc[j]);
}

// N = 1 on q4_0x16 (gemm_q4_0_q8_1_simd.h, X16DecodeFn): G groups a pass,
// block by block, so G accumulators and G streams are in flight (one group
// a pass leaves a block's eight vpdpbusd and its FMA waiting on each other,
// and one stream a thread). The A row's eight code dwords are broadcast
// once a block for all G. Per group the operations of panel_times_cols<1>
// on the same values (its integer sum in two chains instead of four: the
// same integer): the same bits. (The high nibbles taken as byte & 0xF0 in
// a chain shifted down at the end, one logic op a vector fewer, measured
// level: the pass waits on L3 and memory, not on its ports.)
template <int G>
void x16_decode(const uint8_t* w, int64_t stride, int64_t nb, const uint8_t* group, float (*out)[kPanelRows]) {
  __m512 acc[G];
  for (int q = 0; q < G; ++q) acc[q] = _mm512_setzero_ps();
  constexpr int64_t kGroupBlockBytes = panel_group_block_bytes(1);
  for (int64_t b = 0; b < nb; ++b, w += kX16BlockBytes, group += kGroupBlockBytes) {
    __m512i a[8];
#pragma GCC unroll 8
    for (int c = 0; c < 8; ++c) a[c] = _mm512_set1_epi32(load_i32(group + 4 * c));
    const __m512 da = _mm512_set1_ps(load_f32(group + 36));
#pragma GCC unroll 4
    for (int q = 0; q < G; ++q) {
      __m512i wv[8];
      __m512 dw;
      X16Blocks::load(w + q * stride, wv, &dw);
      __m512i chain[2] = {_mm512_set1_epi32(load_i32(group + 32)), _mm512_setzero_si512()};
#pragma GCC unroll 8
      for (int c = 0; c < 8; ++c) chain[c % 2] = _mm512_dpbusd_epi32(chain[c % 2], wv[c], a[c]);
      const __m512i s = _mm512_add_epi32(chain[0], chain[1]);
      acc[q] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(dw, da), acc[q]);
    }
  }
  for (int q = 0; q < G; ++q) _mm512_storeu_ps(out[q], acc[q]);
}

template <size_t... I>
constexpr PanelKernels panel_kernels(std::index_sequence<I...>) {
  return {pack_panel<false>,
          {nullptr, panel_times_cols<I + 1, PanelBlocks>...},
          0,
          {nullptr, panel_times_cols<I + 1, X16Blocks>...},
          nullptr,
          {nullptr, x16_decode<1>, x16_decode<2>, x16_decode<3>, x16_decode<4>}};
}

}  // namespace

extern const PanelKernels kAvx512VnniPanel = panel_kernels(std::make_index_sequence<kPanelCols>{});

extern const TileKernels kAvx512VnniTiles = {
    4,
    {{nullptr, four_rows_times_cols<1, false>, four_rows_times_cols<2, false>, four_rows_times_cols<3, false>,
      four_rows_times_cols<4, false>},
     {nullptr, four_rows_times_cols<1, true>, four_rows_times_cols<2, true>, four_rows_times_cols<3, true>,
      four_rows_times_cols<4, true>}},
    4,
    four_rows_times_one};

}  // namespace qg::detail::cpu::q4q8

#else  // not compiled for AVX-512 VNNI (non-x86 host): its arch window keeps it from being chosen

namespace qg::detail::cpu::q4q8 {
extern const TileKernels kAvx512VnniTiles = {};
extern const PanelKernels kAvx512VnniPanel = {};
}  // namespace qg::detail::cpu::q4q8

#endif
