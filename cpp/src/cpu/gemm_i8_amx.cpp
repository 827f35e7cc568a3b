// SPDX-License-Identifier: MIT
// gemm_i8_amx.cpp: the tile loop of the int8 x int8 GEMM on AMX (cpu_i8_amx),
// compiled with the AVX-512 flags plus -mamx-tile -mamx-int8. The driver
// around it (B packed for the tiles, the tasks, the rows' code sums for zero
// points, the epilogue) is in gemm_i8_avx2.cpp, compiled for AVX2; only the
// table at the end has external linkage (amx_tiles.h says why that matters).
//
// tdpbssd C, A, B adds to each int32 C[r][c] the products of row r of A and
// column c of B over 64 bytes of K, signed bytes on both sides, wrapping
// modulo 2^32 as the reference's sum does (validation bounds K so that the
// exact sum fits). A is 16 rows of the weights as they lie (64 bytes of
// each, the row stride apart); B is 16 rows of activations packed by the
// driver so that tile row q holds, for each of the 16 tokens, the four codes
// that meet A's bytes 4q..4q+3 (kI8AmxGroupBytes a step). Unlike Q4_0's
// blocks, int8 rows have one scale each, so the sums stay in the tiles for
// the whole of K and leave them once, at the end: the tile unit does all the
// work, four tdpbssd a step on a 2 x 2 block of tiles (32 W rows x 32
// tokens), each A and B tile loaded once for two of them.
#include "cpu/kernels.h"

#if defined(__AMX_TILE__) && defined(__AMX_INT8__) && defined(__AVX512F__)
#include <immintrin.h>

#include "cpu/amx_tiles.h"

namespace qg::detail::cpu {

namespace {

// Tiles 0/1: W rows 0..15 / 16..31, 64 bytes of K; 2/3: tokens 0..15 /
// 16..31, 16 rows of four codes a token; 4..7: C for (W tile, token tile)
// (0, 0), (0, 1), (1, 0), (1, 1). All 16 rows of 64 bytes.
constexpr TileConfig full_tiles() {
  TileConfig c;
  for (int t = 0; t < 8; ++t) {
    c.rows[t] = 16;
    c.colsb[t] = 64;
  }
  return c;
}

// 32 rows of W from w (row_stride bytes apart, each readable for 64 * steps
// bytes) against 32 packed tokens b (kI8AmxGroupBytes a step); out gets the
// four 16 x 16 int32 tiles in the order above, W rows by tokens.
void block_2x2(const uint8_t* w, int64_t row_stride, const uint8_t* b, int64_t steps, int32_t* out) {
  static constexpr TileConfig config = full_tiles();
  ThreadTiles::use(config);  // kept for the task's next blocks (amx_tiles.h)
  _tile_zero(4);
  _tile_zero(5);
  _tile_zero(6);
  _tile_zero(7);
  const uint8_t* w1 = w + 16 * row_stride;
  for (int64_t s = 0; s < steps; ++s, b += kI8AmxGroupBytes) {
    _tile_loadd(0, w + 64 * s, row_stride);
    _tile_loadd(2, b, 64);
    _tile_loadd(3, b + kI8AmxGroupBytes / 2, 64);
    _tile_dpbssd(4, 0, 2);
    _tile_dpbssd(5, 0, 3);
    _tile_loadd(1, w1 + 64 * s, row_stride);
    _tile_dpbssd(6, 1, 2);
    _tile_dpbssd(7, 1, 3);
  }
  _tile_stored(4, out, 64);
  _tile_stored(5, out + 256, 64);
  _tile_stored(6, out + 512, 64);
  _tile_stored(7, out + 768, 64);
  tile_memory_fence();  // the caller reads out next
}

}  // namespace

extern const I8AmxKernels kI8Amx = {block_2x2, ThreadTiles::end_task};

}  // namespace qg::detail::cpu

#else  // the compiler has no AMX (or this is not x86): empty, and features.cpp does not offer amx_int8

namespace qg::detail::cpu {
extern const I8AmxKernels kI8Amx = {};
}  // namespace qg::detail::cpu

#endif
