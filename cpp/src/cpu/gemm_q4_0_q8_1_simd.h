// SPDX-License-Identifier: MIT
// gemm_q4_0_q8_1_simd.h: what the x86 SIMD GEMM kernels (AVX2, AVX-VNNI, AVX-512 VNNI)
// share. Each kernel file holds only its register tiles, compiled for its ISA,
// and hands them over as a TileKernels table; one driver (..._simd.cpp,
// compiled for AVX2, which every one of these kernels' arch windows includes)
// does the rest once for all: the per-call A preparation, the split into pool
// tasks, the exact recompute of non-finite outputs and the epilogue.
//
// This header holds declarations and constants only, no inline functions:
// a kernel file compiled with -mavx512* must not emit out-of-line copies of
// functions (COMDAT) that the linker could pick for code running on CPUs
// without AVX-512. (panel_group_block_bytes is one multiply, constexpr,
// folded where the kernel files use it: no copy of it is emitted there.)
#pragma once

#include <cstdint>

namespace qg::detail::cpu::q4q8 {

constexpr int64_t kQ4Bytes = 18;  // block_q4_0: fp16 d, 16 code bytes
constexpr int64_t kQ8Bytes = 36;  // block_q8_1: fp16 d, fp16 s, 32 codes

// Software prefetch distance per W row, used where a pass streams W from
// memory (N = 1 always; the first column group of a task otherwise; the
// panel kernels' pack).
constexpr int64_t kPrefetchBytes = 1536;

// The A side data the driver makes once per call (prepare_a_rows), for every
// A block: corr[4], the int32 lane layout of the kernels' block dot products,
// where lane i covers elements 4i..4i+3 and 16+4i..19+4i:
//   corr[i] = -8 * (a[4i] + .. + a[4i+3] + a[16+4i] + .. + a[19+4i]),
// so that a lane's sum of w*a over its eight unsigned nibbles w in 0..15 plus
// corr[i] is the lane's share of sum (w-8)*a, exact for every byte value
// (a = -128 included); and d_a as fp32. corr is [n][nb][4], d is [n][nb].
//
// A tile function computes rows w[0..R-1] of W (R = TileKernels::tile_rows;
// the driver repeats the last row where fewer are left) against `cols` rows
// a[j] of A (their corr[j], da[j] as above); out[r][j] gets row r's sum for
// column j (out has four columns whatever cols is). `next`: how far past
// each w[r] the task's next rows start (0: none), where the prefetches go
// once they run past the end of the rows (PF variants only).
using TileFn = void (*)(const uint8_t* const* w, const uint8_t* const* a, const int32_t* const* corr,
                        const float* const* da, int64_t nb, int64_t next, float (*out)[4]);
// N = 1: rows w[0..R-1] (R = step_rows) against the one A row; out[r] is row
// r's sum. Always prefetches (N = 1 streams W from memory).
using RowsFn = void (*)(const uint8_t* const* w, int64_t next, const uint8_t* a, const int32_t* corr,
                        const float* da, int64_t nb, float* out);

struct TileKernels {
  int tile_rows;       // W rows per TileFn call (at most 4)
  TileFn tiles[2][5];  // [prefetching first pass of a task][cols 1..4]; [.][0] unused
  int step_rows;       // W rows per RowsFn call (at most 4)
  RowsFn one_col;      // null where the kernel file was not compiled for its ISA
};

// The panel path (cpu_avx512_vnni_panel, cpu_avx2_panel): kPanelRows rows of W are first
// rearranged into a panel, then passed over by groups of up to kPanelCols
// rows of A. In the panel each int32 lane is one W row, so a lane of
// vpdpbusd sums four codes of one (W row, A row) pair and eight of them make
// the block's whole dot product: one convert and one FMA per block serve 16
// outputs, where the 4 x 4 tile above spends them on four.
//
// Panel layout, per block (kPanelBlockBytes): eight 64-byte vectors of
// unsigned nibbles, vector c holding in lane r the four codes of row r that
// meet A codes 4c..4c+3 (c < 4: the low nibbles of qs bytes 4c..4c+3; c >= 4:
// the high nibbles of bytes 4(c-4)..), then the 16 rows' d_w as fp32.
constexpr int kPanelRows = 16;
constexpr int kPanelCols = 16;
constexpr int64_t kPanelBlockBytes = 8 * 64 + 64;
// The A side of the panel path, made once per call: the A rows in groups of
// cols <= kPanelCols rows, interleaved per block (panel_group_block_bytes) as
// the group's 32-code blocks (row j at 32 j), then each row's -8 * (sum of
// those codes) as int32 at 32 cols + 4 j and its d_a as fp32 at 36 cols + 4 j.
// Every operand of a pass is then a fixed offset (the pass is compiled per
// width) from one pointer per block, and a narrow group takes only its own
// bytes of L2.
constexpr int64_t panel_group_block_bytes(int64_t cols) { return cols * (32 + 4 + 4); }
// Packs rows w[0..15] (repeats of the last row where fewer are left) into
// panel, prefetching each row kPrefetchBytes ahead and, past its end, the row
// `next` bytes further on (the task's next panel; 0: none): the pack is the
// one pass that reads W from memory, and with short rows (K = 4096: 2304
// bytes) most of a row would otherwise arrive unprefetched.
using PackFn = void (*)(const uint8_t* const* w, int64_t nb, int64_t next, uint8_t* panel);
// The panel against an A group of exactly `cols` rows (cols[c] reads the
// layout of a c-row group: its offsets depend on the width); out[j][r] gets W
// row r's sum for the group's row j.
using PanelFn = void (*)(const uint8_t* panel, int64_t nb, const uint8_t* group, float (*out)[kPanelRows]);
// q4_0x16 weights (formats.h, block_q4_0x16; 288 bytes a block of 16 rows):
// a group of 16 rows is already one int32 lane a row, its nibbles not yet
// split and its scales fp16. Kernels either pass over a group where it lies,
// splitting the nibbles as they load them (the same integers and products
// as a pass over the panel packed from the same rows, so the same bits), or
// unpack it into a panel first (X16PackFn: no gathers, four loads a block).
constexpr int64_t kX16BlockBytes = 288;
// How far ahead a pass over a group prefetches: one stream a thread, so
// further than the four-row streams' kPrefetchBytes (measured at N = 1 on a
// 2-core Xeon VM, cold: 1536 bytes 1253-1469 us, 3072 1149-1284, 6144
// 1142-1419, 12288 1238-1388; bench/RESULTS.md).
constexpr int64_t kX16PrefetchBytes = 3072;
using X16PackFn = void (*)(const uint8_t* group, int64_t nb, uint8_t* panel);
// N = 1 on q4_0x16 in place: `count` groups (stride bytes apart) against
// the one A row (a one-row A group), their blocks interleaved so that a
// pass keeps `count` accumulators and `count` memory streams going;
// out[q] gets group q's 16 sums. The same arithmetic as x16_cols[1].
constexpr int kX16DecodeGroups = 4;
using X16DecodeFn = void (*)(const uint8_t* groups, int64_t stride, int64_t nb, const uint8_t* a_group,
                             float (*out)[kPanelRows]);
struct PanelKernels {
  PackFn pack;                    // null where the kernel file was not compiled for its ISA
  // [1..16]; [0] unused. Passes may keep per-thread state for the next
  // (AMX: the tile configuration): call them only inside a driver task that
  // ends with end_task below (EndOfTask).
  PanelFn cols[kPanelCols + 1];
  // The A bytes a task's chunk of groups may take (the driver's chunk: the
  // groups a task passes over each packed panel): a pass that is cheap
  // beside the pack wants more groups per pack, up to kPanelMaxChunkGroups,
  // but as few as keep the chunk in L2, since every pass reads its group
  // again. 0: four groups whatever K.
  int64_t chunk_a_bytes = 0;
  // q4_0x16: passes over a group in place ([1..16]; all null where the
  // kernels take packed panels only), else the unpack into a panel.
  PanelFn x16_cols[kPanelCols + 1] = {};
  X16PackFn pack_x16 = nullptr;
  // [1..G]: G the most a pass takes (the rest null); all null: x16_cols[1],
  // a group at a time.
  X16DecodeFn x16_decode[kX16DecodeGroups + 1] = {};
  // Null, or what the driver calls at the end of each task (EndOfTask in
  // kernels.h): AMX passes keep the thread's tile configuration between
  // them.
  void (*end_task)() = nullptr;
};

// Defined by the kernel files; all null where their ISA was not compiled in
// (non-x86 hosts), which the entry points (..._simd.cpp) report.
extern const TileKernels kAvx2Tiles;
extern const TileKernels kAvx512VnniTiles;
extern const PanelKernels kAvx512VnniPanel;
extern const PanelKernels kAvx2Panel;
extern const TileKernels kAvxVnniTiles;  // also null where the compiler had no -mavxvnni
extern const PanelKernels kAvxVnniPanel;
// The panel passes on AMX tiles (gemm_q4_0_q8_1_amx.cpp): the panels hold the
// codes minus 8; null where the compiler had no -mamx-int8.
extern const PanelKernels kAmxPanel;

}  // namespace qg::detail::cpu::q4q8
