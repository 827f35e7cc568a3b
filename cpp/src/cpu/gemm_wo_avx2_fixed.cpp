// SPDX-License-Identifier: MIT
// gemm_wo_avx2_fixed.cpp: INT4 weight-only decode (N = 1) with AVX2 integer
// products (cpu_wo_avx2_fixed, and cpu_wo_avx2_fixed20 for fp32
// activations), compiled with -mavx2 -mfma -mf16c and registered with an
// arch window that needs those, ahead of cpu_wo_avx2.
// Same operands and result as cpu_wo_avx2 (gemm_wo_avx2.cpp): W int4 rows
// (two's-complement nibbles, low nibble first) with group scales and
// optional zero points, one row x of activations,
// C[m] = sum_g s[m, g] * sum_{k in g} (q[m, k] - z[m, g]) * x[k], then the
// float epilogue.
//
// Why integers: cpu_wo_avx2 spends per 64 codes and row two sign
// extensions, two shifts, two masks, eight int->float conversions and eight
// FMAs, and at N = 1 that work, not memory, bounds it (1.5-2.1x its read
// floor, bench/RESULTS.md). Here x becomes int16 once per call and each 16
// codes take one vpmaddwd (16 products, adjacent pairs summed into int32):
// per 64 codes and row a load, an xor, three shifts and three masks, four
// vpmaddwd, three adds, a subtract, one conversion and one FMA (17 vector
// instructions in the compiled loop, against 28).
//
// The activations are block fixed point, as for cuda_wo_gemv_fixed: each
// 32 consecutive x share one power of two 2^e, e = ex - 14 where the
// block's largest |x| is m 2^ex (m in [0.5, 1)), so x_int = rint(x 2^-e)
// has |x_int| <= 2^14 (an int16) and any x is within half a unit of x_int,
// 2^-14 of that largest; an f16 x of at least 2^-3 of it is exact, a
// bf16 one of at least 2^-6 (docs/numerics.md). vpmaddwd takes x_int whole,
// where vpmaddubsw would need it split into two signed-byte digits, one of
// which cannot hold +2^14.
//
// fp32 activations would lose bits the caller gave at 14 (one output of a
// test drifted to an NMSE of 1.3e-5), so they take the 20-bit form
// (cpu_wo_avx2_fixed20): e = ex - 20, |x_int| <= 2^20, as
// cpu_wo_avx512_vnni carries x, split into three base-128 digits (0..127,
// 0..127, -64..64) that vpmaddubsw multiplies by the unsigned codes in two
// byte planes of 32 codes a load (low and high nibbles: 3 instructions to
// unpack, against the word planes' 6), each digit's pairs widened by a
// vpmaddwd by its weight (1, 128, 2^14): 21 vector instructions per 64
// codes and row besides the load, against the 14-bit form's 17 (counted
// the same way in the compiled loops; the 20-bit one also keeps its four
// row sums in memory, a load and a store more a row), the lane sums exact
// in int32 and the rest as below.
//
// The codes enter as unsigned u = q + 8: a 32-byte load of 64 codes (two
// 32-blocks) is 16 words of four codes each, one vpxor with 0x88 flips
// every nibble's sign bit, and plane v = (word >> 4v) & 15 holds code
// 4j + v in word j (the top plane needs no mask). The activations are laid
// out once per call to match (XChunk::words: plane v, word j = x_int of
// code 4j + v, block A's words 0-7, block B's 8-15). After the four
// vpmaddwd and adds, int32 lane i holds codes 8i..8i+7: lanes 0-3 block A,
// 4-7 block B. The 8 comes back out exactly: T = sum u x_int - 8 sum x_int
// = sum q x_int, |T| <= 2^20 (2^26 at 20 bits, then rounded once to
// fp32). Then t = float(T) - z sum x_int (with zero points), and per lane
// acc += s (2^e t): for groups of 64 or more
// the exact products 2^e t of a group are summed first and scaled once;
// for groups of 32 each chunk's. (s 2^e alone could be subnormal for tiny
// bf16 activations, losing bits; 2^e t is about the size of the
// activations.) After the last chunk the 8 lanes are added by a fixed
// tree; one order per output whatever the thread count.
//
// Activations holding Inf or NaN have no fixed-point form: such a call runs
// on cpu_wo_avx2, whose fp32 products carry them as the reference does.
//
// Work split: the decode row ranges of row_ranges.h (64 to 256 rows a
// task), four rows a step against the one x, each row prefetched 768 bytes
// ahead (prefetch.h), the prefetches running on into the step's next four
// rows. Into L1 (prefetcht0), unlike the other CPU kernels: on a 2-core
// Xeon VM, six rounds alternating with prefetcht1, 1308-1380 against
// 1382-1468 us at 4096 x 14336 and 1482-1587 against 1544-1683 at
// 14336 x 4096 (cold, f16). Prefetching 1536 or 3072 bytes ahead instead of
// 768, and two rows a step instead of four (more x traffic a code), were
// level or slower.
#include "cpu/kernels.h"

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "cpu/call_scratch.h"
#include "cpu/epilogue_rows.h"
#include "cpu/float_elem.h"
#include "cpu/lane_sum.h"
#include "cpu/prefetch.h"
#include "cpu/row_ranges.h"
#include "cpu/thread_pool.h"
#include "epilogue.h"

namespace qg::detail::cpu {

namespace {

constexpr int64_t kChunk = 64;  // codes per 32-byte load
constexpr int64_t kChunkBytes = kChunk / 2;
constexpr int64_t kBlock = 32;  // activations sharing one power of two
constexpr int kStepRows = 4;
constexpr int64_t kPrefetchBytes = 768;

// One chunk of x after prepare_x, at kBits (14: |x_int| <= 2^14, an int16;
// 20: |x_int| <= 2^20, three base-128 digits): what the products read, and
// per int32 lane 8 * sum x_int, 2^e and (for zero points) sum x_int as a
// float.
template <int kBits>
struct alignas(32) XChunk {
  int16_t words[4][16];  // 14 bits: the words the four vpmaddwd read
  int32_t offset[8];
  float pow2[8];
  float sum[8];
};
template <>
struct alignas(32) XChunk<20> {
  // digits[d][p][b]: digit d (x_int = d0 + 128 d1 + 16384 d2; d0, d1 in
  // 0..127, d2 in -64..64) of code 2b + p, p = 0 for the codes in the low
  // nibbles of the chunk's bytes, 1 for those in the high ones.
  int8_t digits[3][2][32];
  int32_t offset[8];
  float pow2[8];
  float sum[8];
};

// What the loops need to know about K and the groups.
struct Layout {
  int64_t k = 0, chunks = 0, groups = 0;
  bool half_tail = false;        // K % 64 == 32: the last chunk holds 16 bytes
  int64_t chunks_per_group = 1;  // group % 64 == 0: a group spans whole chunks
};

Layout make_layout(int64_t k, int64_t group) {
  Layout L;
  L.k = k;
  L.chunks = (k + kChunk - 1) / kChunk;
  L.groups = k / group;
  L.half_tail = k % kChunk != 0;
  L.chunks_per_group = group >= kChunk ? group / kChunk : 1;
  return L;
}

// 8 activations of dtype d from p as floats.
inline __m256 load8(const uint8_t* p, DType d) {
  if (d == DType::f32) return _mm256_loadu_ps(reinterpret_cast<const float*>(p));
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  if (d == DType::f16) return _mm256_cvtph_ps(h);
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

// One 32-block of x (zeros past K) as x_int (|x_int| <= 2^bits) in four
// vectors of 8 (elements 0-7, 8-15, 16-23, 24-31) and its 2^e; false at an
// Inf or NaN.
bool block_to_fixed(const uint8_t* src, DType d, int64_t count, int bits, __m256i (&q)[4], float& pow2) {
  __m256 v[4];
  for (int i = 0; i < 4; ++i) v[i] = count >= 8 * (i + 1) ? load8(src + 8 * i * dtype_size(d), d) : _mm256_setzero_ps();
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
  const __m256 inf = _mm256_set1_ps(INFINITY);
  __m256 amax = _mm256_setzero_ps();
  for (int i = 0; i < 4; ++i) {
    const __m256 a = _mm256_and_ps(v[i], abs_mask);
    // Not below Inf (ordered): Inf or NaN.
    if (_mm256_movemask_ps(_mm256_cmp_ps(a, inf, _CMP_NLT_UQ)) != 0) return false;
    amax = _mm256_max_ps(amax, a);
  }
  __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(amax), _mm256_extractf128_ps(amax, 1));
  m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
  const float top = _mm_cvtss_f32(_mm_max_ss(m4, _mm_movehdup_ps(m4)));
  // top < 2^ex, so |x| 2^-(ex - bits) < 2^bits rounds to at most 2^bits.
  // e >= -149 keeps 2^e a (subnormal) float for the tiniest f32 blocks.
  int ex = 0;
  std::frexp(top, &ex);
  const int e = top == 0.0f ? 0 : (ex - bits < -149 ? -149 : ex - bits);
  pow2 = std::ldexp(1.0f, e);
  // x 2^-e in one or two exact multiplies (2^-e above 2^127 is not a float);
  // vcvtps2dq rounds to nearest even.
  const int up = -e;
  const __m256 f1 = _mm256_set1_ps(std::ldexp(1.0f, up > 127 ? 127 : up));
  const __m256 f2 = _mm256_set1_ps(std::ldexp(1.0f, up > 127 ? up - 127 : 0));
  for (int i = 0; i < 4; ++i) q[i] = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_mul_ps(v[i], f1), f2));
  return true;
}

// x rearranged into chunks (see the header); false at the first Inf or NaN.
template <int kBits>
bool prepare_x(const Operand& b, const Layout& L, XChunk<kBits>* xc) {
  const DType d = float_dtype(b.format);
  const int64_t es = dtype_size(d);
  const auto* src = static_cast<const uint8_t*>(b.data);
  // Elements (v, v + 4) of an 8-vector side by side: 64-bit element v.
  const __m256i pairs = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  for (int64_t c = 0; c < L.chunks; ++c) {
    XChunk<kBits>& o = xc[c];
    __m256i by_v[2][4];  // 14 bits, [block][v]: x_int of codes v, v + 4, ..., v + 28 of the block
    __m128i sums[2];     // [block]: lane sums, lane i%4 = codes 8(i%4)..8(i%4)+7
    float pow2[2];
    for (int blk = 0; blk < 2; ++blk) {
      const int64_t k0 = c * kChunk + blk * kBlock;
      __m256i q[4];
      if (!block_to_fixed(src + k0 * es, d, L.k - k0, kBits, q, pow2[blk])) return false;
      if constexpr (kBits == 20) {
        // The three digits of each x_int, by the nibble its code sits in:
        // code i of the chunk is plane i % 2, byte i / 2.
        alignas(32) int32_t xi[32];
        for (int i = 0; i < 4; ++i) _mm256_store_si256(reinterpret_cast<__m256i*>(xi + 8 * i), q[i]);
        for (int i = 0; i < 32; ++i) {
          const int code = blk * 32 + i, plane = code % 2, byte = code / 2;
          o.digits[0][plane][byte] = static_cast<int8_t>(xi[i] & 127);
          o.digits[1][plane][byte] = static_cast<int8_t>((xi[i] >> 7) & 127);
          o.digits[2][plane][byte] = static_cast<int8_t>(xi[i] >> 14);  // arithmetic: floor(x_int / 2^14)
        }
      } else {
        __m256i p[4];
        for (int i = 0; i < 4; ++i) p[i] = _mm256_permutevar8x32_epi32(q[i], pairs);
        // A 4 x 4 transpose of 64-bit elements: by_v[v] = element v of p[0..3].
        const __m256i lo01 = _mm256_unpacklo_epi64(p[0], p[1]), hi01 = _mm256_unpackhi_epi64(p[0], p[1]);
        const __m256i lo23 = _mm256_unpacklo_epi64(p[2], p[3]), hi23 = _mm256_unpackhi_epi64(p[2], p[3]);
        by_v[blk][0] = _mm256_permute2x128_si256(lo01, lo23, 0x20);
        by_v[blk][1] = _mm256_permute2x128_si256(hi01, hi23, 0x20);
        by_v[blk][2] = _mm256_permute2x128_si256(lo01, lo23, 0x31);
        by_v[blk][3] = _mm256_permute2x128_si256(hi01, hi23, 0x31);
      }
      const __m256i h = _mm256_hadd_epi32(_mm256_hadd_epi32(q[0], q[1]), _mm256_hadd_epi32(q[2], q[3]));
      sums[blk] = _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
    }
    // words[v]: block A's 8 then block B's 8, as int16 (packs interleaves
    // the two by 128-bit half; the qword permute puts them back in order).
    if constexpr (kBits == 14)
      for (int v = 0; v < 4; ++v)
        _mm256_store_si256(reinterpret_cast<__m256i*>(o.words[v]),
                           _mm256_permute4x64_epi64(_mm256_packs_epi32(by_v[0][v], by_v[1][v]), 0xD8));
    const __m256i lane_sums = _mm256_setr_m128i(sums[0], sums[1]);
    _mm256_store_si256(reinterpret_cast<__m256i*>(o.offset), _mm256_slli_epi32(lane_sums, 3));
    // |sum| <= 2^17 (14 bits: exact) or 2^23 (20 bits: exact).
    _mm256_store_ps(o.sum, _mm256_cvtepi32_ps(lane_sums));
    _mm256_store_ps(o.pow2, _mm256_setr_m128(_mm_set1_ps(pow2[0]), _mm_set1_ps(pow2[1])));
  }
  return true;
}

// The scales (and zero points) of a step's rows as fp32, `pitch` floats a
// row with zeros past the last group (a half last chunk's second lane group
// reads the one past it, against zero sums: a zero, not the next row's
// scale, which could be Inf).
struct StepScales {
  FloatTable s, z;
  int64_t pitch = 0;
};

void convert_row_scales(const OutsideScales& sc, int64_t row, int64_t groups, float* out) {
  const auto* p = static_cast<const uint8_t*>(sc.data) + row * sc.row_stride * dtype_size(sc.dtype);
  int64_t g = 0;
  if (sc.dtype == DType::f32) {
    std::memcpy(out, p, static_cast<size_t>(groups) * 4);
    return;
  }
  for (; g + 8 <= groups; g += 8) _mm256_storeu_ps(out + g, load8(p + 2 * g, sc.dtype));
  for (; g < groups; ++g) out[g] = load_elem(p + 2 * g, sc.dtype);
}

void convert_step_scales(const OutsideScales& sc, const OutsideScales& zp, const Layout& L, const int64_t* rows,
                         StepScales& out) {
  out.pitch = L.groups + 2;
  out.s.reserve(static_cast<size_t>(kStepRows * out.pitch));
  if (zp.data) out.z.reserve(static_cast<size_t>(kStepRows * out.pitch));
  for (int r = 0; r < kStepRows; ++r) {
    float* s = &out.s[r * out.pitch];
    convert_row_scales(sc, rows[r], L.groups, s);
    s[L.groups] = s[L.groups + 1] = 0.0f;
    if (!zp.data) continue;
    float* z = &out.z[r * out.pitch];
    for (int64_t g = 0; g < L.groups; ++g) z[g] = group_zero_point(zp, rows[r], g);
    z[L.groups] = z[L.groups + 1] = 0.0f;
  }
}

// A chunk's per-lane values from a row's fp32 table: groups of 32 give the
// two blocks' own (g, g + 1), longer groups one broadcast.
template <bool G32>
inline __m256 lanes_of(const float* row, int64_t g) {
  if (G32) return _mm256_setr_m128(_mm_broadcast_ss(row + g), _mm_broadcast_ss(row + g + 1));
  return _mm256_broadcast_ss(row + g);
}

// sum u x_int over each int32 lane's 8 codes of one 32-byte load of codes
// u = q + 8 (wv, already xor-ed), exact in int32.
template <int kBits>
inline __m256i lane_products(__m256i u, const XChunk<kBits>& xc) {
  if constexpr (kBits == 14) {
    // Word j holds codes 4j..4j+3, one a nibble: u_v = (word >> 4v) & 15.
    const __m256i low4 = _mm256_set1_epi16(0x000F);
    const auto* xw = reinterpret_cast<const __m256i*>(xc.words);
    __m256i t = _mm256_madd_epi16(_mm256_and_si256(u, low4), _mm256_load_si256(xw + 0));
    t = _mm256_add_epi32(t, _mm256_madd_epi16(_mm256_and_si256(_mm256_srli_epi16(u, 4), low4),
                                              _mm256_load_si256(xw + 1)));
    t = _mm256_add_epi32(t, _mm256_madd_epi16(_mm256_and_si256(_mm256_srli_epi16(u, 8), low4),
                                              _mm256_load_si256(xw + 2)));
    return _mm256_add_epi32(t, _mm256_madd_epi16(_mm256_srli_epi16(u, 12), _mm256_load_si256(xw + 3)));
  } else {
    // Byte b holds codes 2b (low nibble) and 2b + 1. Per digit, vpmaddubsw
    // (unsigned codes x signed digits, adjacent pairs into int16: at most
    // 2 x 15 x 127) on both planes, the two added (int16 lane p: codes
    // 4p..4p+3, at most 7620), and vpmaddwd by the digit's weight (1, 128,
    // 2^14) widens adjacent lanes into int32 lane i: codes 8i..8i+7, as
    // the 14-bit words give. |sum u x_int| <= 8 x 15 x 2^20 < 2^27.
    const __m256i low4 = _mm256_set1_epi8(0x0F);
    const __m256i lo = _mm256_and_si256(u, low4), hi = _mm256_and_si256(_mm256_srli_epi16(u, 4), low4);
    const auto* xd = reinterpret_cast<const __m256i*>(xc.digits);
    auto digit = [&](int dgt, int16_t weight) {
      const __m256i pairs = _mm256_add_epi16(_mm256_maddubs_epi16(lo, _mm256_load_si256(xd + 2 * dgt)),
                                             _mm256_maddubs_epi16(hi, _mm256_load_si256(xd + 2 * dgt + 1)));
      return _mm256_madd_epi16(pairs, _mm256_set1_epi16(weight));
    };
    return _mm256_add_epi32(_mm256_add_epi32(digit(0, 1), digit(1, 128)), digit(2, 16384));
  }
}

// kStepRows rows w[r] against the prepared x; out[r][0] = the sum for row r.
// Groups of 32: acc += s (2^e t) each chunk. Longer groups: 2^e t summed
// over the group's chunks first, then acc += s * that, one multiply a chunk
// fewer.
template <int kBits, bool ZP, bool G32>
void tile(const uint8_t* const* w, const StepScales& ss, const XChunk<kBits>* x, const Layout& L, int64_t next_step,
          float (*out)[4]) {
  const __m256i flip = _mm256_set1_epi8(static_cast<char>(0x88));
  const int64_t row_bytes = L.k / 2;
  __m256 acc[kStepRows], part[kStepRows];
  for (int r = 0; r < kStepRows; ++r) acc[r] = part[r] = _mm256_setzero_ps();
  int64_t g = 0, chunk_in_group = 0;  // the chunk's first group, without a division
  for (int64_t c = 0; c < L.chunks; ++c) {
    if ((c & 1) == 0)
      prefetch_rows<PrefetchTo::l1>(w, kStepRows, c * kChunkBytes + kPrefetchBytes, row_bytes, next_step);
    const XChunk<kBits>& xc = x[c];
    const bool half = L.half_tail && c + 1 == L.chunks;
    for (int r = 0; r < kStepRows; ++r) {
      const uint8_t* p = w[r] + c * kChunkBytes;
      // Past K (a half last chunk) the bytes load as 0: u = 8 against zero x.
      const __m256i wv = half ? _mm256_zextsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)))
                              : _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
      __m256i t = lane_products<kBits>(_mm256_xor_si256(wv, flip), xc);
      t = _mm256_sub_epi32(t, _mm256_load_si256(reinterpret_cast<const __m256i*>(xc.offset)));
      __m256 tf = _mm256_cvtepi32_ps(t);
      if (ZP) tf = _mm256_fnmadd_ps(lanes_of<G32>(&ss.z[r * ss.pitch], g), _mm256_load_ps(xc.sum), tf);
      if (G32) {
        acc[r] = _mm256_fmadd_ps(lanes_of<true>(&ss.s[r * ss.pitch], g), _mm256_mul_ps(tf, _mm256_load_ps(xc.pow2)),
                                 acc[r]);
      } else {
        part[r] = _mm256_fmadd_ps(tf, _mm256_load_ps(xc.pow2), part[r]);
      }
    }
    if (G32) {
      g += 2;
    } else if (++chunk_in_group == L.chunks_per_group) {
      for (int r = 0; r < kStepRows; ++r) {
        acc[r] = _mm256_fmadd_ps(_mm256_broadcast_ss(&ss.s[r * ss.pitch + g]), part[r], acc[r]);
        part[r] = _mm256_setzero_ps();
      }
      chunk_in_group = 0;
      ++g;
    }
  }
  for (int r = 0; r < kStepRows; ++r) out[r][0] = hsum8(acc[r]);
}

template <int kBits>
void run(const GemmArgs& g, const Layout& L, const XChunk<kBits>* xc) {
  using TileFn = void (*)(const uint8_t* const*, const StepScales&, const XChunk<kBits>*, const Layout&, int64_t,
                          float (*)[4]);
  const int64_t m_rows = g.a.rows;
  const EpilogueParams ep = epilogue_params(g);
  const auto* W = static_cast<const uint8_t*>(g.a.data);
  const bool zp = g.a.zero_points.data != nullptr, g32 = g.a.scales.group_size == 32;
  const TileFn tile_fn = zp ? (g32 ? tile<kBits, true, true> : tile<kBits, true, false>)
                            : (g32 ? tile<kBits, false, true> : tile<kBits, false, false>);
  const RowRanges ranges = decode_row_ranges(m_rows, ThreadPool::instance().threads());
  run_tiles(ranges.tasks, m_rows * L.k, [&](int64_t t) {
    const int64_t m0 = ranges.begin(t), m1 = ranges.end(t, m_rows);
    StepScales ss;  // one allocation a task, reused by its steps
    for (int64_t m = m0; m < m1; m += kStepRows) {
      const StepRows<kStepRows> step(W, g.a.row_stride, m, m1);
      const int64_t ahead = m1 - m - kStepRows < kStepRows ? m1 - m - kStepRows : kStepRows;
      prefetch_group_scales(g.a.scales, m + kStepRows, ahead, L.groups);
      prefetch_group_scales(g.a.zero_points, m + kStepRows, ahead, L.groups);
      convert_step_scales(g.a.scales, g.a.zero_points, L, step.idx, ss);
      float out[kStepRows][4];
      tile_fn(step.w, ss, xc, L, step.next, out);
      epilogue_store_tile(ep, m, step.rows, 0, 1, out);
    }
  });
}

template <int kBits>
Status run_fixed(const GemmArgs& g) {
  if (g.a.rows == 0 || g.b.rows == 0) return {};
  const Layout L = make_layout(g.a.k, g.a.scales.group_size);
  ScratchBytes own;
  auto* xc = reinterpret_cast<XChunk<kBits>*>(call_scratch(static_cast<size_t>(L.chunks) * sizeof(XChunk<kBits>), own));
  if (!prepare_x<kBits>(g.b, L, xc)) return gemm_wo_avx2(g);
  run<kBits>(g, L, xc);
  return {};
}

}  // namespace

Status gemm_wo_avx2_fixed(const GemmArgs& g) { return run_fixed<14>(g); }
Status gemm_wo_avx2_fixed20(const GemmArgs& g) { return run_fixed<20>(g); }

}  // namespace qg::detail::cpu

#else  // not compiled for AVX2 (non-x86 host): its arch window keeps it from being chosen

namespace qg::detail::cpu {
Status gemm_wo_avx2_fixed(const GemmArgs&) {
  return Status(StatusCode::unsupported, "qg.gemm: the AVX2 fixed-point weight-only kernel was not compiled in");
}
Status gemm_wo_avx2_fixed20(const GemmArgs&) {
  return Status(StatusCode::unsupported, "qg.gemm: the AVX2 fixed-point weight-only kernel was not compiled in");
}
}  // namespace qg::detail::cpu

#endif
