// SPDX-License-Identifier: MIT
// gemm_q4_0_q8_1_amx.cpp: the panel pass of the Q4_0 x Q8_1 GEMM on AMX
// (Intel's tile registers and tile multiply unit, Sapphire Rapids on),
// compiled with the AVX-512 VNNI kernel's flags plus -mamx-tile -mamx-int8
// and registered as cpu_amx with an arch window that needs amx_int8, which
// features.cpp offers only where the OS has granted this process the tile
// state. The driver around it (A groups, tasks, the exact recompute of
// non-finite outputs, the epilogue) is the panel kernels' one,
// gemm_q4_0_q8_1_simd.cpp; the panel layout is theirs too, with the codes
// stored minus 8 (panel_pack_avx512.h). Nothing here has external linkage
// except the table at the end (see gemm_q4_0_q8_1_simd.h on why).
//
// tdpbssd C, A, B adds to each int32 C[t][r] the products of row t of A and
// column r of B, four bytes at a time: C[t][r] += sum_c sum_i A[t][4c+i] *
// B[c][4r+i], signed bytes on both sides. With A = an A group's codes for one
// block (row t: A row t's 32 codes, 32 bytes apart in the group layout) and
// B = the panel's eight 64-byte vectors for that block (vector c, lane r: the
// four codes of W row r that meet A codes 4c..4c+3), one tdpbssd leaves the
// block's whole integer dot product for every (A row, W row) pair of the
// group and panel: |sum| <= 32 * 8 * 128 = 2^15, exact, and exact in fp32.
//
// Each block has its own scales, so the sums cannot accumulate in the tile:
// each block's C tile is stored (tilestored) and AVX-512 adds it in, A row by
// A row, as the AVX-512 VNNI panel pass does: d = d_w * d_a (one vmulps, d_a
// broadcast from the group), acc[t] = fma(float(sum), d, acc[t]). The same
// integers, the same two roundings in the same order: the same bits as
// cpu_avx512_vnni_panel, which the tests hold it to.
//
// Measured on one core of a Sapphire Rapids class VM (a panel block against
// 16 A rows, operands in L2; bench/RESULTS.md): the tile work of a block
// takes about 35 cycles (tile loads 14 + 11, zero and tdpbssd 18, tile store
// 14, partly overlapped), the vector work about 26 (48 instructions on two
// ports), and the two add up (66) whatever the distance between them in the
// instruction stream: they do not overlap. The AVX-512 VNNI pass spends 128
// vpdpbusd and the same 48 on those 16 x 16 x 32 multiply-adds; whole calls
// on AMX took 0.74-0.82x its time at N = 64 and 128. Both halves need
// 16-row tiles to pay: it is taken from N = 16 (forced at N = 4 and 8 the
// panel pass was faster or level).
#include "cpu/gemm_q4_0_q8_1_simd.h"

#if defined(__AMX_TILE__) && defined(__AMX_INT8__) && defined(__AVX512F__) && defined(__AVX512BW__) && \
    defined(__AVX512VL__) && defined(__AVX512VNNI__) && defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>

#include "cpu/amx_tiles.h"
#include "cpu/float_elem.h"
#include "cpu/panel_pack_avx512.h"

namespace qg::detail::cpu::q4q8 {

namespace {

// Tiles 0/1: an A group's block, NT rows of 32 codes; 2/3: a panel block,
// eight rows of 64 bytes; 4/5: the block's sums, NT rows of 16 int32.
constexpr TileConfig config_for(int nt) {
  TileConfig c;
  for (int t = 0; t < 2; ++t) {
    c.rows[t] = static_cast<uint8_t>(nt);
    c.colsb[t] = 32;
    c.rows[2 + t] = 8;
    c.colsb[2 + t] = 64;
    c.rows[4 + t] = static_cast<uint8_t>(nt);
    c.colsb[4 + t] = 64;
  }
  return c;
}

// The panel against an A group of NT rows (gemm_q4_0_q8_1_simd.h, PanelFn),
// in the tile configuration of its width (amx_tiles.h: a static object,
// kept loaded for the task's next passes).
template <int NT>
void amx_panel_times_cols(const uint8_t* panel, int64_t nb, const uint8_t* group, float (*out)[kPanelRows]) {
  static constexpr TileConfig config = config_for(NT);
  ThreadTiles::use(config);
  constexpr int64_t kGroupBlockBytes = panel_group_block_bytes(NT);
  // Block b's sums are added in after block b + kLag's multiply is issued:
  // the vector loads wait for the tile store, which waits for tdpbssd.
  constexpr int kLag = 2;
  alignas(64) int32_t sums[kLag + 1][NT][16];
  __m512 acc[NT];
  for (int t = 0; t < NT; ++t) acc[t] = _mm512_setzero_ps();
  // Block b's sums on the tile unit, into sums[b % (kLag + 1)].
  const auto multiply = [&](int64_t b) {
    const uint8_t* a = group + b * kGroupBlockBytes;
    const uint8_t* w = panel + b * kPanelBlockBytes;
    if (b & 1) {
      _tile_loadd(1, a, 32);
      _tile_loadd(3, w, 64);
      _tile_zero(5);
      _tile_dpbssd(5, 1, 3);
      _tile_stored(5, sums[b % (kLag + 1)], 64);
    } else {
      _tile_loadd(0, a, 32);
      _tile_loadd(2, w, 64);
      _tile_zero(4);
      _tile_dpbssd(4, 0, 2);
      _tile_stored(4, sums[b % (kLag + 1)], 64);
    }
  };
  // Block b's sums into the accumulators (after a barrier: the tile store
  // must not look dead to the compiler, nor these loads movable above it).
  const auto add_in = [&](int64_t b) {
    tile_memory_fence();
    const __m512 dw = _mm512_load_ps(reinterpret_cast<const float*>(panel + b * kPanelBlockBytes + 512));
    const uint8_t* da = group + b * kGroupBlockBytes + NT * 36;
    const int32_t(*s)[16] = sums[b % (kLag + 1)];
#pragma GCC unroll 16
    for (int t = 0; t < NT; ++t) {
      const __m512 d = _mm512_mul_ps(dw, _mm512_set1_ps(load_f32(da + 4 * t)));
      acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512(s[t])), d, acc[t]);
    }
  };
  for (int64_t b = 0; b < nb; ++b) {
    multiply(b);
    if (b >= kLag) add_in(b - kLag);
  }
  for (int64_t b = nb > kLag ? nb - kLag : 0; b < nb; ++b) add_in(b);
  for (int t = 0; t < NT; ++t) _mm512_storeu_ps(out[t], acc[t]);
}

}  // namespace

extern const PanelKernels kAmxPanel = {
    pack_panel<true>,
    {nullptr, amx_panel_times_cols<1>, amx_panel_times_cols<2>, amx_panel_times_cols<3>, amx_panel_times_cols<4>,
     amx_panel_times_cols<5>, amx_panel_times_cols<6>, amx_panel_times_cols<7>, amx_panel_times_cols<8>,
     amx_panel_times_cols<9>, amx_panel_times_cols<10>, amx_panel_times_cols<11>, amx_panel_times_cols<12>,
     amx_panel_times_cols<13>, amx_panel_times_cols<14>, amx_panel_times_cols<15>, amx_panel_times_cols<16>},
    // A chunks of up to 1.25 MiB (the cores' L2 is 2 MiB; the panel takes
    // 258 KB of it at K = 14336): 4 groups at K = 14336, 16 at K = 4096.
    // The pack costs about one pass, so more groups a pack pay where their
    // A stays in L2, and cost where it does not: at 4096 x 14336, hot,
    // two rounds, 4 groups 15.0-17.4 ms at N = 128 against 18.6-22.3 with
    // 8 and 20.0-21.0 with 16 (2 groups: 18.6-18.8), 32.9-36.4 against
    // 36.1-40.8 at N = 256; at 14336 x 4096, 16 groups 30.7-31.8 against
    // 34.0-36.2 with 8 at N = 256 (bench/RESULTS.md).
    int64_t{1280} * 1024,
    {},
    pack_x16<true>,
    {},
    ThreadTiles::end_task};

}  // namespace qg::detail::cpu::q4q8

#else  // the compiler has no AMX (or this is not x86): empty, and features.cpp does not offer amx_int8

namespace qg::detail::cpu::q4q8 {
extern const PanelKernels kAmxPanel = {};
}  // namespace qg::detail::cpu::q4q8

#endif
