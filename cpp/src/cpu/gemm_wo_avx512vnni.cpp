// SPDX-License-Identifier: MIT
// gemm_wo_avx512vnni.cpp: weight-only GEMM with AVX-512 VNNI
// (cpu_wo_avx512_vnni), compiled with -mavx512f -mavx512bw -mavx512vl
// -mavx512vnni -mfma -mf16c and registered with an arch window that needs
// those. Same operands as cpu_wo_avx2 (gemm_wo_avx2.cpp): W int4 rows
// (two's-complement nibbles, low nibble first) with group scales and
// optional zero points, X float rows (f32, f16 or bf16),
// C[m, n] = sum_g s[m, g] * sum_{k in g} (q[m, k] - z[m, g]) * x[n, k], then
// the float epilogue.
//
// Why integers: at N = 1 the float kernels are bound by turning codes into
// floats and one FMA per code (the AVX2 kernel: 14 ops per 32 codes), not by
// memory. vpdpbusd multiplies 64 unsigned bytes by 64 signed bytes and adds
// each four products into an int32 lane: 64 products an instruction, exact.
//
// The activations become integers once per call, in block fixed point: each
// 32 consecutive x of a row share one power of two 2^e, chosen from their
// largest |x| so that x_int = rint(x * 2^-e) has |x_int| <= 2^20, and
// x ~= x_int * 2^e. An f16 x of at least 2^-9 of its block's largest |x| is
// exact (11 significant bits), a bf16 one of at least 2^-12 (8 bits); any x
// is within half a unit of x_int, 2^-20 of that largest, the price of this
// kernel (docs/numerics.md). x_int
// is split into three base-128 digits, d0 + 128 d1 + 16384 d2 (d0, d1 in
// 0..127, d2 in -64..64), each a signed byte for vpdpbusd.
//
// The codes enter as unsigned bytes u = q + 8 (0..15): one vpternlogd makes
// (w & 0x0F) ^ 0x08 from a 64-byte load (128 codes), and a shift and another
// the high nibbles. The +8 comes back out exactly: sum u x_int = sum q x_int
// + 8 * sum x_int, and each lane's sum of x_int is made with the digits.
//
// Lanes: dword lane i of a 128-code chunk holds bytes 4i..4i+3, so its low
// nibbles are codes 8i, 8i+2, 8i+4, 8i+6 and its high nibbles the odd ones;
// the digit bytes are laid out to match. Per chunk, lane and X row:
//   S_j = sum of u * d_j over the lane's 8 codes (six vpdpbusd: 3 digits x
//         low/high nibbles; |S_j| <= 8 * 15 * 128),
//   T   = (S_2 * 128 + S_1) * 128 + S_0 - 8 * sum x_int = sum q * x_int,
//         exact in int32 (|T| <= 2^27),
//   t   = float(T) (one rounding, 2^-24 relative) - z * sum x_int,
//   acc += s * (2^e * t),
// with the lane's group scale s (four lanes of 8 codes make 32, so a lane
// lies in one group; a chunk spans 4 groups of 32, 2 of 64, or part of one
// of 128 or more) and its block's 2^e. After the last chunk the 16 lanes are
// added by a fixed tree. One order per output, whatever the thread count
// and N (N = 1 sums as the N > 1 tiles do).
//
// The loop per chunk, as compiled: per W row a load, two vpternlogd and a
// shift; per X row the six digit vectors loaded once for all four W rows;
// per (row, X row) six vpdpbusd with two shifts between them (T accumulated
// as one chain, the digits summed so far shifted in place), a subtract, a
// convert, a multiply and an FMA: 12 vector instructions (and register
// copies: vpdpbusd adds into its destination), with the
// group scale a broadcast from a per-step fp32 table (counted in the
// object file, tile<4, 1>). The earlier form (digits as
// memory operands of every vpdpbusd, three sums recombined by two shifts
// and two adds, the scales loaded, converted and permuted per row and
// chunk) took 14 % longer per W row at N = 1 and 20 % at N = 4 on a Zen 4
// core with W in L2 (0.456 against 0.39 us per row of 14336 codes at N = 1).
//
// Activations holding Inf or NaN have no fixed-point form: such a call runs
// on cpu_wo_avx2, whose fp32 products carry them as the reference does.
//
// Work split: tasks of 64 W rows by up to 64 X rows; at N <= 4 (one pass
// over the X rows, nothing for L2 to keep) the decode row ranges of
// row_ranges.h instead, 64 to 256 rows, so that a thread's stream restarts
// less often (at 14336 x 4096, N = 1, cold: 1270-1297 against 1381-1420 us,
// three rounds alternating on a 2-core Xeon VM). A task steps through its
// W rows four at a time against four X rows at a time (16 accumulators);
// the first four X rows stream W from memory with a software prefetch
// 4 KiB ahead on each row that runs on into the next four rows (and the
// next step's group scales, prefetch.h), and the further X rows find the
// task's W rows (64 x K / 2 bytes: 448 KB at K = 14336) in L2. The
// prefetch goes into L2 (prefetcht1): on a 2-core Zen 4 VM, interleaved
// over three rounds at N = 1, 995-1054 us against 1087-1210 with prefetcht0
// at 4096 x 14336, and 1155-1293 against 1278-1413 at 14336 x 4096
// (distances of 2, 4 and 8 KiB were level within the noise). Streaming four X rows at once, rather than
// one W row against tiles of X rows, took N = 2 from 3.7 to 1.9 ms and
// N = 8 from 10.3 to 6.8 ms at 4096 x 14336.
#include "cpu/kernels.h"

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && defined(__AVX512VNNI__) && \
    defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>

#include <atomic>
#include <cmath>
#include <algorithm>
#include <memory>

#include "cpu/call_scratch.h"
#include "cpu/epilogue_rows.h"
#include "cpu/float_elem.h"
#include "cpu/row_ranges.h"
#include "epilogue.h"

namespace qg::detail::cpu {

namespace {

constexpr int64_t kChunk = 128;  // codes per 64-byte load
constexpr int64_t kChunkBytes = kChunk / 2;
constexpr int64_t kLanes = 16;
constexpr int64_t kBlock = 32;      // activations sharing one power of two
constexpr int kMagnitudeBits = 20;  // |x_int| <= 2^20
constexpr int kStepRows = 4;        // W rows a step, against up to four X rows
constexpr int64_t kTaskRows = 64;   // W rows of a task: 64 x 7 KB stay in L2 between passes
constexpr int64_t kTaskCols = 64;   // X rows of a task
constexpr int64_t kPrefetchBytes = 4096;

// What the loops need to know about K and the groups.
struct Layout {
  int64_t k = 0, chunks = 0, groups = 0;
  int64_t groups_per_chunk = 1;  // 4 (group 32), 2 (64), or 1 (a multiple of 128)
  int64_t chunks_per_group = 1;  // 1 for groups of up to 128
  __mmask64 tail_mask = ~__mmask64{0};  // the last chunk's bytes inside the row
  __m512i spread;                       // lane i -> its group within the chunk
};

Layout make_layout(int64_t k, int64_t group) {
  Layout L;
  L.k = k;
  L.chunks = (k + kChunk - 1) / kChunk;
  L.groups = k / group;
  L.groups_per_chunk = group < kChunk ? kChunk / group : 1;
  L.chunks_per_group = group < kChunk ? 1 : group / kChunk;
  const int64_t tail_bytes = (k - (L.chunks - 1) * kChunk) / 2;
  if (tail_bytes < kChunkBytes) L.tail_mask = (__mmask64{1} << tail_bytes) - 1;
  alignas(64) int32_t idx[kLanes];
  for (int64_t i = 0; i < kLanes; ++i) idx[i] = group < kChunk ? static_cast<int32_t>(8 * i / group) : 0;
  L.spread = _mm512_load_si512(idx);
  return L;
}

// One X row's chunk after prepare_x: the digit bytes the six vpdpbusd read
// (digit j of the low-nibble codes, then of the high-nibble codes), and per
// lane 8 * sum x_int, 2^e and (for zero points) sum x_int as a float.
struct XChunk {
  int8_t digits[3][2][kChunkBytes];
  int32_t offset[kLanes];
  float pow2[kLanes];
  float sum[kLanes];
};
static_assert(sizeof(XChunk) % 64 == 0, "chunks stay 64-byte aligned");

// 16 activations of dtype d from p (zero past `count`) as floats.
inline __m512 load16(const uint8_t* p, DType d, int64_t count) {
  const auto mask = static_cast<__mmask16>(count >= 16 ? 0xFFFF : count <= 0 ? 0 : (1u << count) - 1);
  if (d == DType::f32) return _mm512_maskz_loadu_ps(mask, p);
  const __m256i h = _mm256_maskz_loadu_epi16(mask, p);
  if (d == DType::f16) return _mm512_cvtph_ps(h);
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

// The scales (and zero points) of a step's rows as fp32, one row of
// `pitch` floats each: converted once per step, 16 a vector, so the hot loop
// takes a group's scale as one broadcast operand of its multiply instead of
// a load, a conversion and a permute per row and chunk. pitch leaves at
// least three zeros after a row's last group, so that a chunk's four lanes
// of groups never read the next row's scales (an Inf there times a zero
// sum would be a NaN), and the table ends with 16 more floats for the last
// row's whole-vector loads.
// (FloatTable, not std::vector: call_scratch.h says why.)
struct StepScales {
  FloatTable s, z;
  int64_t pitch = 0;
};

void convert_step_scales(const OutsideScales& sc, const OutsideScales& zp, const Layout& L, const int64_t* rows,
                         StepScales& out) {
  out.pitch = (L.groups + 3 + 15) / 16 * 16;
  const size_t size = static_cast<size_t>(kStepRows * out.pitch + 16);
  // The 16 floats after the last row: zeros for its whole-vector loads.
  for (FloatTable* t : {&out.s, &out.z}) {
    float* table = t->reserve(size);
    std::fill(table + size - 16, table + size, 0.0f);
  }
  for (int r = 0; r < kStepRows; ++r)
    for (int64_t g = 0; g < out.pitch; g += 16) {
      const int64_t left = L.groups - g;
      const auto* sp = static_cast<const uint8_t*>(sc.data) + (rows[r] * sc.row_stride + g) * dtype_size(sc.dtype);
      _mm512_storeu_ps(&out.s[r * out.pitch + g], load16(sp, sc.dtype, left));
      if (!zp.data) continue;
      // (pitch runs up to 18 past the groups: left may be 0 or below, no lanes.)
      const auto mask = static_cast<__mmask16>(left >= 16 ? 0xFFFF : left <= 0 ? 0 : (1u << left) - 1);
      const auto* zq = static_cast<const uint8_t*>(zp.data) + (rows[r] * zp.row_stride + g) * dtype_size(zp.dtype);
      const __m512i zi = zp.dtype == DType::i8 ? _mm512_cvtepi8_epi32(_mm_maskz_loadu_epi8(mask, zq))
                                               : _mm512_maskz_loadu_epi32(mask, zq);
      _mm512_storeu_ps(&out.z[r * out.pitch + g], _mm512_cvtepi32_ps(zi));
    }
}

// X rows n0..n1-1 into fixed-point chunks (see the header), xc[n * chunks + c].
// Returns false, leaving the rest undone, at the first Inf or NaN.
bool prepare_x(const Operand& b, const Layout& L, int64_t n0, int64_t n1, XChunk* xc) {
  const DType d = float_dtype(b.format);
  const int64_t es = dtype_size(d);
  const __m512 inf = _mm512_set1_ps(INFINITY);
  const __m512i seven = _mm512_set1_epi32(127);
  // Element m of a 32-block's low-nibble bytes is its element 2m, of the high 2m + 1.
  const __m512i evens = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i odds = _mm512_add_epi32(evens, _mm512_set1_epi32(1));
  for (int64_t n = n0; n < n1; ++n) {
    const auto* src = static_cast<const uint8_t*>(b.data) + n * b.row_stride;
    for (int64_t c = 0; c < L.chunks; ++c) {
      XChunk& o = xc[n * L.chunks + c];
      for (int64_t blk = 0; blk < kChunk / kBlock; ++blk) {
        const int64_t k0 = c * kChunk + blk * kBlock;
        const __m512 v0 = load16(src + k0 * es, d, L.k - k0);
        const __m512 v1 = load16(src + (k0 + 16) * es, d, L.k - k0 - 16);
        const __m512 a0 = _mm512_abs_ps(v0), a1 = _mm512_abs_ps(v1);
        if (_mm512_cmp_ps_mask(a0, inf, _CMP_LT_OQ) != 0xFFFF || _mm512_cmp_ps_mask(a1, inf, _CMP_LT_OQ) != 0xFFFF)
          return false;
        const float amax = _mm512_reduce_max_ps(_mm512_max_ps(a0, a1));
        // amax < 2^ex, so |x| * 2^-(ex - 20) < 2^20 and rounds to at most 2^20.
        // e >= -149 keeps 2^e a (subnormal) float for the tiniest f32 blocks.
        int ex = 0;
        std::frexp(amax, &ex);
        const int e = amax == 0.0f ? 0 : (ex - kMagnitudeBits < -149 ? -149 : ex - kMagnitudeBits);
        // vscalefps multiplies by 2^-e exactly; vcvtps2dq rounds to nearest even.
        const __m512 shift = _mm512_set1_ps(static_cast<float>(-e));
        const __m512i q0 = _mm512_cvtps_epi32(_mm512_scalef_ps(v0, shift));
        const __m512i q1 = _mm512_cvtps_epi32(_mm512_scalef_ps(v1, shift));
        const __m512i qn[2] = {_mm512_permutex2var_epi32(q0, evens, q1), _mm512_permutex2var_epi32(q0, odds, q1)};
        for (int h = 0; h < 2; ++h) {
          int8_t* at = &o.digits[0][h][16 * blk];
          const int64_t step = &o.digits[1][h][0] - &o.digits[0][h][0];
          _mm_storeu_si128(reinterpret_cast<__m128i*>(at), _mm512_cvtepi32_epi8(_mm512_and_si512(qn[h], seven)));
          _mm_storeu_si128(reinterpret_cast<__m128i*>(at + step),
                           _mm512_cvtepi32_epi8(_mm512_and_si512(_mm512_srai_epi32(qn[h], 7), seven)));
          _mm_storeu_si128(reinterpret_cast<__m128i*>(at + 2 * step),
                           _mm512_cvtepi32_epi8(_mm512_srai_epi32(qn[h], 14)));  // -64..64
        }
        // Lane l of the block: the sum of its elements 8l..8l+7 (pairs m = 4l..4l+3).
        alignas(64) int32_t pair[16];
        _mm512_store_si512(pair, _mm512_add_epi32(qn[0], qn[1]));
        const float pow2 = std::ldexp(1.0f, e);
        for (int64_t l = 0; l < kBlock / 8; ++l) {
          const int64_t lane = blk * (kBlock / 8) + l;
          const int32_t sum = (pair[4 * l] + pair[4 * l + 1]) + (pair[4 * l + 2] + pair[4 * l + 3]);
          o.offset[lane] = 8 * sum;
          o.sum[lane] = static_cast<float>(sum);  // |sum| <= 2^23: exact
          o.pow2[lane] = pow2;
        }
      }
    }
  }
  return true;
}

inline float hsum16(__m512 v) {
  const __m256 h = _mm256_add_ps(_mm512_castps512_ps256(v), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
  const __m128 q = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
  const __m128 e = _mm_add_ps(q, _mm_movehl_ps(q, q));
  return _mm_cvtss_f32(_mm_add_ss(e, _mm_movehdup_ps(e)));
}

inline __m512i load64(const int8_t* p) { return _mm512_load_si512(p); }

// R rows w[r] of W against NR prepared X rows x[j]; out[r][j] = the sum for
// (r, j). ss holds the rows' scales (and zero points) as fp32. With PF, each
// row is prefetched kPrefetchBytes ahead, and past its end the row
// next_step bytes further on (0: none).
template <int R, int NR, bool ZP, bool PF>
void tile(const uint8_t* const* w, const StepScales& ss, const XChunk* const* x, const Layout& L, int64_t next_step,
          float (*out)[4]) {
  const __m512i low4 = _mm512_set1_epi8(0x0F), eight = _mm512_set1_epi8(0x08);
  constexpr int kAndXor = 0x6A;  // vpternlogd truth table of (a & b) ^ c
  const int64_t row_bytes = L.k / 2;
  const bool wide = L.groups_per_chunk == 1;  // one group per chunk: its scale is a broadcast
  __m512 acc[R][NR];
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < NR; ++j) acc[r][j] = _mm512_setzero_ps();
  int64_t g0 = 0, chunk_in_group = 0;  // the chunk's first group, without a division
  for (int64_t c = 0; c < L.chunks; ++c) {
    const int64_t g = g0;
    if (++chunk_in_group == L.chunks_per_group) {
      chunk_in_group = 0;
      g0 += L.groups_per_chunk;
    }
    if (PF) prefetch_rows(w, R, c * kChunkBytes + kPrefetchBytes, row_bytes, next_step);
    const __mmask64 mask = c + 1 < L.chunks ? ~__mmask64{0} : L.tail_mask;
    // The rows' codes first, then each X row's six digit vectors loaded once
    // and used by all R rows: with the digits as memory operands of every
    // vpdpbusd, the loads (6 x 64 bytes per row and X row) were the busiest
    // unit.
    __m512i lo[R], hi[R];
    __m512 s[R], z[R];
    for (int r = 0; r < R; ++r) {
      // Bytes past K load as 0, i.e. u = 8 (q = 0), against zero digits.
      const __m512i wv = _mm512_maskz_loadu_epi8(mask, w[r] + c * kChunkBytes);
      lo[r] = _mm512_ternarylogic_epi32(wv, low4, eight, kAndXor);
      hi[r] = _mm512_ternarylogic_epi32(_mm512_srli_epi16(wv, 4), low4, eight, kAndXor);
      const float* sr = &ss.s[r * ss.pitch + g];
      s[r] = wide ? _mm512_set1_ps(*sr) : _mm512_permutexvar_ps(L.spread, _mm512_loadu_ps(sr));
      if (ZP) {
        const float* zr = &ss.z[r * ss.pitch + g];
        z[r] = wide ? _mm512_set1_ps(*zr) : _mm512_permutexvar_ps(L.spread, _mm512_loadu_ps(zr));
      }
    }
    for (int j = 0; j < NR; ++j) {
      const XChunk& xj = x[j][c];
      const __m512i d2l = load64(xj.digits[2][0]), d2h = load64(xj.digits[2][1]);
      const __m512i d1l = load64(xj.digits[1][0]), d1h = load64(xj.digits[1][1]);
      const __m512i d0l = load64(xj.digits[0][0]), d0h = load64(xj.digits[0][1]);
      const __m512i offset = _mm512_load_si512(xj.offset);
      const __m512 pow2 = _mm512_load_ps(xj.pow2);
      for (int r = 0; r < R; ++r) {
        // ((S_2 * 128 + S_1) * 128 + S_0) as one chain: each shift is applied
        // to the digits summed so far, two shifts where separate sums took
        // two shifts and two adds.
        __m512i t = _mm512_dpbusd_epi32(_mm512_setzero_si512(), lo[r], d2l);
        t = _mm512_dpbusd_epi32(t, hi[r], d2h);
        t = _mm512_slli_epi32(t, 7);
        t = _mm512_dpbusd_epi32(t, lo[r], d1l);
        t = _mm512_dpbusd_epi32(t, hi[r], d1h);
        t = _mm512_slli_epi32(t, 7);
        t = _mm512_dpbusd_epi32(t, lo[r], d0l);
        t = _mm512_dpbusd_epi32(t, hi[r], d0h);
        __m512 tf = _mm512_cvtepi32_ps(_mm512_sub_epi32(t, offset));
        if (ZP) tf = _mm512_fnmadd_ps(z[r], _mm512_load_ps(xj.sum), tf);
        // s (2^e t): s 2^e alone could be subnormal for tiny activations.
        acc[r][j] = _mm512_fmadd_ps(s[r], _mm512_mul_ps(tf, pow2), acc[r][j]);
      }
    }
  }
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < NR; ++j) out[r][j] = hsum16(acc[r][j]);
}

using TileFn = void (*)(const uint8_t* const*, const StepScales&, const XChunk* const*, const Layout&, int64_t,
                        float (*)[4]);

template <bool ZP>
void run(const GemmArgs& g, const Layout& L, const XChunk* xc) {
  const int64_t m_rows = g.a.rows, n_rows = g.b.rows;
  const EpilogueParams ep = epilogue_params(g);
  const auto* W = static_cast<const uint8_t*>(g.a.data);
  // The first pass over a task's W rows streams them from memory (prefetched);
  // the passes for further X rows find them in L2.
  static constexpr TileFn kFirst[5] = {nullptr, tile<kStepRows, 1, ZP, true>, tile<kStepRows, 2, ZP, true>,
                                       tile<kStepRows, 3, ZP, true>, tile<kStepRows, 4, ZP, true>};
  static constexpr TileFn kAgain[5] = {nullptr, tile<kStepRows, 1, ZP, false>, tile<kStepRows, 2, ZP, false>,
                                       tile<kStepRows, 3, ZP, false>, tile<kStepRows, 4, ZP, false>};
  // With one pass over the X rows (N <= 4) no task's rows are read twice,
  // so the decode paths' longer ranges (row_ranges.h) restart the stream
  // less often; with more X rows, 64 rows a task stay in L2 between passes.
  const int64_t task_rows =
      n_rows <= 4 ? decode_row_ranges(m_rows, ThreadPool::instance().threads()).rows_per_task : kTaskRows;
  const int64_t tiles_m = (m_rows + task_rows - 1) / task_rows;
  const int64_t tiles_n = (n_rows + kTaskCols - 1) / kTaskCols;
  run_tiles(tiles_m * tiles_n, m_rows * n_rows * L.k, [&](int64_t t) {
    const int64_t m0 = (t / tiles_n) * task_rows, n0 = (t % tiles_n) * kTaskCols;
    const int64_t m1 = m0 + task_rows < m_rows ? m0 + task_rows : m_rows;
    const int64_t n1 = n0 + kTaskCols < n_rows ? n0 + kTaskCols : n_rows;
    StepScales ss;  // one allocation a task, reused by its steps
    for (int64_t n = n0; n < n1; n += 4) {
      const int cols = static_cast<int>(n1 - n < 4 ? n1 - n : 4);
      const XChunk* x[4];
      for (int j = 0; j < 4; ++j) x[j] = xc + (n + (j < cols ? j : 0)) * L.chunks;
      const TileFn tile_fn = n == n0 ? kFirst[cols] : kAgain[cols];
      for (int64_t m = m0; m < m1; m += kStepRows) {
        const StepRows<kStepRows> step(W, g.a.row_stride, m, m1);
        if (n == n0) {
          const int64_t ahead = m1 - m - kStepRows < kStepRows ? m1 - m - kStepRows : kStepRows;
          prefetch_group_scales(g.a.scales, m + kStepRows, ahead, L.groups);
          prefetch_group_scales(g.a.zero_points, m + kStepRows, ahead, L.groups);
        }
        // One step's scales for each pass over its rows: the same few
        // hundred bytes again, against the 28 KB of codes the pass reads.
        convert_step_scales(g.a.scales, g.a.zero_points, L, step.idx, ss);
        float out[kStepRows][4];
        tile_fn(step.w, ss, x, L, step.next, out);
        epilogue_store_tile(ep, m, step.rows, n, cols, out);
      }
    }
  });
}

}  // namespace

Status gemm_wo_avx512vnni(const GemmArgs& g) {
  if (g.a.rows == 0 || g.b.rows == 0) return {};
  const Layout L = make_layout(g.a.k, g.a.scales.group_size);
  const int64_t n_rows = g.b.rows;
  ScratchBytes own;
  auto* xc = reinterpret_cast<XChunk*>(call_scratch(static_cast<size_t>(n_rows * L.chunks) * sizeof(XChunk), own));
  std::atomic<bool> finite{true};
  const int64_t per = 8;
  run_tiles((n_rows + per - 1) / per, n_rows * L.k * 8, [&](int64_t t) {
    const int64_t n0 = t * per, n1 = n0 + per < n_rows ? n0 + per : n_rows;
    if (!prepare_x(g.b, L, n0, n1, xc)) finite.store(false, std::memory_order_relaxed);
  });
  if (!finite.load()) return gemm_wo_avx2(g);
  if (g.a.zero_points.data) run<true>(g, L, xc);
  else run<false>(g, L, xc);
  return {};
}

}  // namespace qg::detail::cpu

#else  // not compiled for AVX-512 VNNI (non-x86 host): its arch window keeps it from being chosen

namespace qg::detail::cpu {
Status gemm_wo_avx512vnni(const GemmArgs&) {
  return Status(StatusCode::unsupported, "qg.gemm: the AVX-512 VNNI weight-only kernel was not compiled in");
}
}  // namespace qg::detail::cpu

#endif
