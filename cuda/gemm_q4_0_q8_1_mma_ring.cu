// SPDX-License-Identifier: MIT
// cuda/gemm_q4_0_q8_1_mma_ring.cu: Q4_0 x Q8_1 for small batches on sm_90
// (cuda_gemv_mma, N = 3..32): each warp streams a 32-row tile of W (16-row
// where M is at most 16 rows an SM) and the activations of its slice of K
// through its own cp.async ring, int8
// mma.sync.m16n8k32 on them (q4_0_mma.cuh's arithmetic), and the CTA's warps
// take one slice of K each; their partial tiles are added in shared memory in
// warp order.
//
// Why this shape. The ring GEMV (gemm_q4_0_q8_1_ring.cu) keeps W streaming
// with a ring a warp and no CTA barrier, but its DP4As grow with every
// column; the bulk and warpgroup kernels use the tensor cores but wait on
// CTA-wide stages. Here a warp's tensor-core work is a whole 32 x 8 kNT tile
// a block (2 kNT m16n8k32 MMAs over one W fragment pair and kNT B
// fragments), so it needs 32 rows, and M = 4096 has only 128 such row
// groups: the K slices give an SM its 8 warps of streams. Where M <= 16 x
// SMs, 32-row groups would leave half the SMs idle or more: there a warp's
// tile is 16 rows (one m16 tile, kRT = 1), which costs a B fragment's
// loads and scales a tile instead of a pair, and every SM streams.
//
// Why the activations go through the same ring. Read from global memory
// (L1/L2) a block ahead, a stage's activation loads (72 a lane at N = 16)
// and their 64-bit addresses made the loop about 980 instructions a stage
// against 770 and left L2's latency in every block: in a prototype on an
// H200 that form took 33 us cold at 4096 x 14336 N = 16, where the
// cuda_wgmma 16-token tile takes about 25.
// Copied with the stage's W by the same lanes into the same slot, they cost
// up to 9 more 16-byte cp.async a lane and stage and are read by 32-bit
// shared loads at fixed offsets. The price is shared memory: a slot holds
// the stage's 32 W rows (144 bytes each, 8 blocks) and room for 8 kNT
// tokens' 8 blocks (288 bytes each): 6912 bytes at N <= 8 (one n8 tile),
// 9216 at N = 9..16 (two), 13824 at N = 17..32 (four: 216 KiB for 8 warps'
// two slots); 2304 bytes fewer with 16 rows.
//
// Slices. K's stages (8 blocks, 256 values) are split evenly over the CTA's
// warps, and a CTA owns one row group. At the end each warp writes its
// partial tile into the ring slot it has just read, the CTA meets at one
// barrier and adds them in warp order, and stores through the epilogue.
//
// CTAs (pick_cta). Within one wave of row groups (groups <= SMs; 16-row
// groups up to 16 x SMs rows, 32-row ones up to 32 x SMs) a CTA has 8 warps
// and no SM holds two (at N <= 8 its 108 KiB with 32 rows, 72 with 16,
// would let two or three share: it asks for kOneCtaAnSmBytes). Past one wave, with c = ceil(groups / SMs),
// K is split over 4 warps (2 at c = 4, N <= 8) and each CTA asks for enough
// shared memory that at most c share an SM: every SM gets its share of the
// groups, also when the grid is launched early behind linear_q4_0's
// quantizer. At N = 9..16 (72 KiB a 4-warp CTA) can_run asks that all
// groups be resident at once, c <= 3; at N = 17..32 (108 KiB a 4-warp
// CTA) c <= 2. On an H200 at 14336 x 4096
// linear_q4_0's graph took 11-12 % less time at N = 4 and 8 than with waves
// of two 8-warp CTAs an SM (one binary), and at 11008 x 4096 N = 12 / 16
// 18-25 % less than on cuda_wgmma (docs/architecture.md, "Past one wave:
// fewer warps, c CTAs an SM"). A first, persistent form over several
// groups was 26-30 % slower than cuda_wgmma at 14336 x 4096 N = 9..16.
//
// Rows past M are read from row M - 1, and activation reads of columns past
// N from column N - 1 (never stored; only the N columns are copied). A stage
// whose activation scales include an Inf or NaN takes tile_block's exact
// non-finite rescale (one vote a stage).
//
// linear_q4_0: the quantizer runs first and lets this kernel start early
// (grid_dependency.cuh); the first stages' W copies, the caller's bytes,
// are requested before the wait for its output, their activations after.
// That is right because the quantizer does not write W and lets this kernel
// launch only once it has itself waited for everything before it on the
// stream. After its wait this kernel lets the next one launch.
#include <algorithm>
#include <iterator>
#include <limits>
#include <string>
#include <type_traits>

#include "cp_async.cuh"
#include "device_limits.cuh"
#include "gemm_q4_0_q8_1.cuh"
#include "grid_dependency.cuh"
#include "q4_0_mma.cuh"
#include "quantize.cuh"
#include "ring_forms.h"
#include "ring_partials.cuh"

namespace qg::detail::cuda {
namespace {

constexpr int kStageBlocks = 8;                         // 256 values of K
constexpr int kWRowBytes = kStageBlocks * kQ4_0Bytes;   // 144: nine 16-byte pieces
constexpr int kXRowBytes = kStageBlocks * kQ8_1Bytes;   // 288: eighteen
constexpr int kXRowPieces = kXRowBytes / 16;
constexpr int kMinCols = 3, kMaxCols = 32;              // N it takes (measured: docs/architecture.md)
constexpr int kMinColsOneWave = 4;  // N = 3 within one wave of 32-row groups: cuda_gemv_ring is faster
// and past N = 24 with 32-row groups cuda_wgmma_folded is, where K is past
// 12288 (pick_cta)
constexpr int kMaxColsOneWave = 24;
constexpr int64_t kMaxKPastColsOneWave = 12288;
// Rows a group: two m16 tiles (32 rows), or one (16) where the 16-row
// groups fit one wave (pick_cta).
__host__ __device__ constexpr int group_rows(int rt) { return 16 * rt; }
constexpr int kWarps = 8;  // K slices a CTA within one wave (pick_cta)
__host__ __device__ constexpr int w_bytes(int rt) { return group_rows(rt) * kWRowBytes; }  // 4608 or 2304
// W pieces of a stage (nine a row), and at most how many a lane copies: 9
// at 32 rows, 4 or 5 at 16 (144 pieces).
__host__ __device__ constexpr int w_pieces(int rt) { return group_rows(rt) * 9; }
__host__ __device__ constexpr int w_lane_pieces(int rt) { return (w_pieces(rt) + 31) / 32; }
// kNT n8 tiles: 8 kNT tokens a slot (N <= 8: one tile, 6912 bytes a slot at
// 32 rows; N = 9..16: two, 9216; N = 17..32: four, 13824). Only the N
// tokens' pieces are copied; reads of the columns past N go to column
// N - 1's row.
__host__ __device__ constexpr int slot_bytes(int nt, int rt) { return w_bytes(rt) + 8 * nt * kXRowBytes; }
// n8 tiles for N tokens: one up to 8, two up to 16, four up to 32.
__host__ __device__ constexpr int n8_tiles(int64_t n) { return n > 16 ? 4 : n > 8 ? 2 : 1; }
// Activation pieces a lane copies at most: 8 kNT tokens of 18.
__host__ __device__ constexpr int x_lane_pieces(int nt) { return (8 * nt * kXRowPieces + 31) / 32; }
// The largest token index whose row offset a lane forms (its pieces
// rounded up to whole rounds of the warp): 8, 15 or 31.
__host__ __device__ constexpr int last_formed_token(int nt) { return (32 * x_lane_pieces(nt) - 1) / kXRowPieces; }
static_assert(last_formed_token(1) == 8 && last_formed_token(2) == 15 && last_formed_token(4) == 31);

// Two slots a warp: against three, 2-11 % faster at every shape measured
// at N = 9..16, and 2-11 % cold at N = 1..8 (docs/architecture.md).
constexpr int kRingSlots = 2;

template <int kNT, int kRT, int kSlots, int kW>
constexpr int smem_bytes() {
  return kW * kSlots * slot_bytes(kNT, kRT);
}
// Where the row groups fit one CTA an SM, N <= 8's CTAs of 8 warps (108
// KiB with 32 rows, two of which fit an SM; 72 with 16, three) ask for
// kOneCtaAnSmBytes (ring_forms.h says why), and launch_smem pads CTAs past
// one wave the same way.
static_assert(smem_bytes<1, 2, kRingSlots, kWarps>() < kOneCtaAnSmBytes, "the padding only adds");

struct Params {
  const uint8_t* w;
  const uint8_t* x;
  int64_t m, ldw;
  int n, nb, ldx;
  uint32_t k80;  // kCodeBias, from a register
};

// cp.async.wait_group takes an immediate: at most `pending` of this lane's
// groups still in flight.
__device__ __forceinline__ void wait_pending(int pending) {
  switch (pending) {
    case 0: cp_async_wait<0>(); break;
    case 1: cp_async_wait<1>(); break;
    case 2: cp_async_wait<2>(); break;
    default: cp_async_wait<3>(); break;
  }
}

// kX16: A's base and row stride are 16-byte aligned, so its stage rows go
// as 16-byte pieces; otherwise (4-byte aligned, as a caller's workspace may
// be) as 4-byte ones, so that such A takes the same kernel, and bits, as an
// aligned copy of it.
template <int kNT, int kRT, int kSlots, bool kX16, int kW>
__device__ __forceinline__ void gemm_mma_ring_body(const Params& p, const EpilogueParams& ep) {
  static_assert(kSlots >= 2 && kSlots <= 4, "wait_pending covers rings of 2..4 slots");
  constexpr int kTokens = 8 * kNT, kSlotBytes = slot_bytes(kNT, kRT), kXLane = x_lane_pieces(kNT);
  constexpr int kGroupRows = group_rows(kRT), kWBytes = w_bytes(kRT);
  constexpr int kWPieces = w_pieces(kRT), kWLane = w_lane_pieces(kRT);
  extern __shared__ __align__(16) uint8_t smem[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  uint8_t* ring = smem + warp * kSlots * kSlotBytes;
  const uint32_t ring_s = smem_u32(ring);

  const int64_t row0 = static_cast<int64_t>(blockIdx.x) * kGroupRows;
  const int ns = p.nb / kStageBlocks;
  auto stages_of = [&](int w) { return (w + 1) * ns / kW - w * ns / kW; };
  const int s_begin = warp * ns / kW, my = stages_of(warp);

  // This lane's pieces of a stage: W piece c of row r (nine a row),
  // activation piece c of token tk (eighteen a token, the N tokens' only);
  // the slot's bytes are the pieces in order, so piece i lands at 16 i.
  const uint8_t* w_src[kWLane];
  uint32_t x_src[kXLane];
  const int x_pieces = p.n * kXRowPieces;
#pragma unroll
  for (int i = 0; i < kWLane; ++i) {
    const int pc = lane + 32 * i;
    w_src[i] = p.w + min64(row0 + pc / 9, p.m - 1) * p.ldw + s_begin * kWRowBytes + (pc % 9) * 16;
  }
#pragma unroll
  for (int i = 0; i < kXLane; ++i) {
    const int pc = lane + 32 * i;
    // Pieces of tokens past N are never copied (issue_x), but their
    // offsets are formed too, in unsigned arithmetic: one past A's span may
    // wrap, harmlessly; the copied ones lie inside it (can_run).
    x_src[i] = static_cast<uint32_t>(pc / kXRowPieces) * static_cast<uint32_t>(p.ldx) +
               static_cast<uint32_t>(s_begin * kXRowBytes + (pc % kXRowPieces) * 16);
  }
  auto issue_w = [&](int i) {
    if (i >= my) return;
    const uint32_t dst = ring_s + static_cast<uint32_t>(i % kSlots) * kSlotBytes;
#pragma unroll
    for (int k = 0; k < kWLane; ++k)
      if (32 * k + 31 < kWPieces || lane + 32 * k < kWPieces)  // 16 rows: 144 pieces, lanes 0..15 a fifth
        cp_async<16>(dst + 16 * (lane + 32 * k), w_src[k] + i * kWRowBytes, 16);
  };
  auto issue_x = [&](int i) {
    if (i >= my) return;
    const uint32_t dst = ring_s + static_cast<uint32_t>(i % kSlots) * kSlotBytes + kWBytes;
    if constexpr (kX16) {
#pragma unroll
      for (int k = 0; k < kXLane; ++k)
        if (lane + 32 * k < x_pieces)
          cp_async<16>(dst + 16 * (lane + 32 * k), p.x + x_src[k] + static_cast<uint32_t>(i * kXRowBytes), 16);
    } else {
      // Word w of each token's stage row: lanes take w = lane, lane + 32,
      // lane + 64 (< 72).
      const uint32_t stage = static_cast<uint32_t>((s_begin + i) * kXRowBytes);
#pragma unroll
      for (int tk = 0; tk < kTokens; ++tk) {
        if (tk >= p.n) break;
        const uint8_t* row = p.x + static_cast<uint32_t>(tk * p.ldx) + stage;
#pragma unroll
        for (int j = 0; j < 3; ++j) {
          const int w = lane + 32 * j;
          if (j < 2 || w < kXRowBytes / 4) cp_async<4>(dst + tk * kXRowBytes + 4 * w, row + 4 * w, 4);
        }
      }
    }
  };
  // Where this lane reads a stage's activations: its B fragment's token
  // 8 ni + g and its scales' tokens 8 ni + 2t, + 1, each past N read from
  // token N - 1 (copied; its products land in columns never stored).
  int xb_off[kNT], xd_off[kNT][2];
#pragma unroll
  for (int ni = 0; ni < kNT; ++ni) {
    xb_off[ni] = min(8 * ni + g, p.n - 1) * kXRowBytes + 4 + 4 * t;
#pragma unroll
    for (int c = 0; c < 2; ++c) xd_off[ni][c] = min(8 * ni + 2 * t + c, p.n - 1) * kXRowBytes;
  }
  // The finite vote's share: 32 / kTokens lanes a token (token N - 1 past
  // N), each kVoteBlocks of its 8 blocks' scales.
  constexpr int kVoteBlocks = kStageBlocks * kTokens / 32;  // 2 or 4
  const int vote_off = min(lane / (32 / kTokens), p.n - 1) * kXRowBytes +
                       kVoteBlocks * (lane % (32 / kTokens)) * kQ8_1Bytes;

  // The first kSlots - 1 stages: W (one commit group each), then, once the
  // quantizer's output is visible, their activations (one group).
#pragma unroll
  for (int i = 0; i < kSlots - 1; ++i) {
    issue_w(i);
    cp_async_commit();
  }
  wait_prerequisite();  // A may be the previous kernel's output (linear_q4_0's quantizer)
  launch_dependents();  // the next call's quantizer may launch: it waits for this grid
#pragma unroll
  for (int i = 0; i < kSlots - 1; ++i) issue_x(i);
  cp_async_commit();

  float acc[kRT][kNT][4] = {};
  for (int i = 0; i < my; ++i) {
    issue_w(i + kSlots - 1);
    issue_x(i + kSlots - 1);
    cp_async_commit();
    // Stage i's W group and the prologue's activation group must have
    // landed; the loop's own groups after them may still be in flight.
    wait_pending(min(i + 1, kSlots - 1));
    __syncwarp();
    const uint8_t* st = ring + (i % kSlots) * kSlotBytes;
    const uint8_t* xs = st + kWBytes;
    // One vote a stage: every activation scale of its tokens x 8 blocks
    // finite, so the magic-number rescale applies.
    bool finite = true;
#pragma unroll
    for (int j = 0; j < kVoteBlocks; ++j) {
      const uint32_t h = *reinterpret_cast<const uint16_t*>(xs + vote_off + j * kQ8_1Bytes);
      finite &= (h & 0x7C00u) != 0x7C00u;
    }
    auto stage_blocks = [&](auto all_finite) {
      constexpr bool kFinite = decltype(all_finite)::value;
#pragma unroll
      for (int j = 0; j < kStageBlocks; ++j) {
        int b[kNT][2];
        q4mma::AScale sc[kNT][2];
#pragma unroll
        for (int ni = 0; ni < kNT; ++ni) {
          const uint8_t* xb = xs + xb_off[ni] + j * kQ8_1Bytes;
          b[ni][0] = *reinterpret_cast<const int*>(xb);
          b[ni][1] = *reinterpret_cast<const int*>(xb + 16);
          sc[ni][0] = q4mma::a_scale(*reinterpret_cast<const uint16_t*>(xs + xd_off[ni][0] + j * kQ8_1Bytes));
          sc[ni][1] = q4mma::a_scale(*reinterpret_cast<const uint16_t*>(xs + xd_off[ni][1] + j * kQ8_1Bytes));
        }
        // Block j of a row: at byte 18 j, a word boundary for even j (d_w
        // the low half of its first word, each code word a PRMT of two
        // neighbours), mid-word for odd j (d_w the high half, code words
        // aligned). Rows are 144 bytes (36 words, 4 mod 32) apart, so the
        // warp's loads of words (row g, word c + t) fall in 32 banks.
        const int word0 = (kQ4_0Bytes * j) / 4;
#pragma unroll
        for (int mi = 0; mi < kRT; ++mi) {
          uint32_t q[2];
          float dw16[2];
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const uint32_t* w =
                reinterpret_cast<const uint32_t*>(st + (16 * mi + g + 8 * h) * kWRowBytes) + word0;
            if (j % 2 == 0) {
              dw16[h] = half_bits_to_float(w[0] & 0xFFFFu) * 0.0625f;
              q[h] = __byte_perm(w[t], w[t + 1], 0x5432);
            } else {
              dw16[h] = half_bits_to_float(w[0] >> 16) * 0.0625f;
              q[h] = w[1 + t];
            }
          }
          q4mma::tile_block<kNT, kFinite>(acc[mi], q, dw16, b, sc, p.k80);
        }
      }
    };
    if (__all_sync(0xFFFFFFFFu, finite))
      stage_blocks(std::true_type{});
    else
      stage_blocks(std::false_type{});
    __syncwarp();  // the slot is refilled by a later stage's copies
  }

  add_partials_in_warp_order<kRT, kNT, kW, kSlots, kSlotBytes>(
      acc, smem, warp, lane, stages_of, row0, p.m, p.n, ep.ldc == 1,
      [&](int64_t row, int col, float v) { epilogue_store(ep, row, col, v); });
}

// kW warps a CTA, at most kCtas CTAs an SM: each CTA asks for enough
// shared memory that no more fit (each an instance of its own, so that
// device_limits.cuh caches its residency apart). The instances share an SM
// as pick_cta says only while they need at most 128 registers a thread at
// N <= 8 and 168 at N = 9..16 (ptxas at sm_90a: 72-101 and 86-130); past
// that they would run fewer an SM, correct but slower.
template <int kNT, int kRT, int kW, int kCtas, bool kX16>
__global__ void __launch_bounds__(32 * kW, 1) gemm_mma_ring_entry(Params p, EpilogueParams ep) {
  gemm_mma_ring_body<kNT, kRT, kRingSlots, kX16, kW>(p, ep);
}

// The shared memory a CTA asks for: its own, or more, so that no more than
// kCtas fit an SM.
template <int kNT, int kRT, int kW, int kCtas>
constexpr int launch_smem() {
  constexpr int own = smem_bytes<kNT, kRT, kRingSlots, kW>();
  static_assert(ring_ctas_fit_exactly(own, kCtas), "kCtas such CTAs fit an SM, and one more does not");
  return ring_launch_smem(own, kCtas);
}

// The forms (ring_forms.h) this kernel has instances of.
constexpr CtaForm kForms[] = {
    {1, 2, 8, 1}, {1, 2, 4, 2}, {1, 2, 4, 3}, {1, 2, 4, 4}, {1, 2, 2, 4},  // 32 rows, N <= 8
    {2, 2, 8, 1}, {2, 2, 4, 2}, {2, 2, 4, 3},                              // 32 rows, N = 9..16
    {4, 2, 8, 1}, {4, 2, 4, 2},                                            // 32 rows, N = 17..32
    {1, 1, 8, 1}, {2, 1, 8, 1}, {4, 1, 8, 1},                              // 16 rows, one wave
};

// Within one wave of row groups (groups <= SMs), 8 warps, one CTA an SM.
// Past it, c = ceil(groups / SMs) CTAs an SM and no more, of 4 warps (2 at
// c = 4 and N <= 8). Measured on an H200 at K = 4096 (linear_q4_0 in a CUDA
// graph, N = 4 / 8, us): at c = 2 (8192 rows) 4 warps padded to two an SM
// 8.2 / 8.5, unpadded (four an SM fit) 10.1 / 11.4, two 8-warp CTAs 9.0 /
// 9.7; at c = 3 (12288) 11.3 / 11.7 against 13.0 / 14.5 unpadded; at c = 4
// (14336) 2 warps 13.5 / 14.7, 4 warps 14.3 / 15.1 (both padded to four an
// SM), two 8-warp CTAs an SM 15.4 / 16.5.
// Unpadded, the early launch behind the quantizer can crowd the grid onto
// fewer SMs (the reading, as for one wave). Past four groups an SM, four
// 4-warp CTAs an SM in waves (28672 rows: 26.3 / 28.3, 2 warps seven an SM
// 28.7 / 30.4). At N = 9..16 (two n8 tiles, 72 KiB) c <= 3: can_run asks
// that all groups be resident at once; at c = 2 (8192 x 4096, N = 12 / 16)
// padded to two an SM 10.7 / 11.1-11.3, three an SM 13.8 / 14.3.
// Up to 16 rows an SM (M <= 16 x SMs), groups of 16 rows (one m16 tile a
// warp), 8 warps, one CTA an SM: twice the SMs that 32-row groups keep busy
// (2048 x 14336 in a graph, N = 4 / 8 / 16: 8.4-8.5 / 9.3-9.4 / 13.1 us
// against 12.0-12.4 / 13.2-13.3 / 18.2-18.5). Past that, 16-row groups were slower even
// where they spread the rows more evenly than 32-row ones: at 14336 x 4096,
// seven 2-warp CTAs an SM (112 rows) took 17.1-17.2 / 20.7 at N = 4 / 8
// against 13.9-14.0 / 16.3-16.4 for four of 32 rows (128), and so did each
// group's K split
// over a cluster of two CTAs (docs/architecture.md, "Past one wave").
// Four n8 tiles (N = 17..32), against cuda_wgmma_folded, the GEMM cold on
// an H200 (us, N = 17 / 24 / 32): 16-row groups (2048 x 14336) 20.3 /
// 22.0 / 24.3 against 25.2 / 25.1 / 24.2; 32-row groups in one wave
// (4096 x 14336) 28.5 / 30.2 / 32.3 against 31.2 / 31.0 / 30.0, so there
// can_run stops at N = 24 where K is past 12288 (at N = 24 / 28 / 32:
// 4096 x 4096 13.7 / 14.2 / 14.6 against 20.5 / 20.7 / 19.5, 4096 x 8192
// 20.4 / 21.2 / 21.9 against 24.7 / 24.8 / 23.7, 4096 x 11008 24.8 /
// 25.8 / 26.8 against 27.8 / 28.0 / 26.8); c = 2 (8192 x 4096, 4 warps) 19.3 / 20.3 / 21.4
// against 24.2 / 23.9 / 23.0; c = 4 (14336 x 4096, 2-warp CTAs four an
// SM, an instance since removed) 32.0 / 34.3 / 35.7 against 28.8 / 28.7 /
// 27.7, so can_run asks for c <= 2.
CtaForm pick_cta(const GemmArgs& g) {
  const int64_t sms = device_limits(g.device.id).sms;
  auto per_sm = [&](int rows) { return ((g.a.rows + rows - 1) / rows + sms - 1) / sms; };
  const int64_t c = per_sm(32), c16 = per_sm(16);
  const int nt = n8_tiles(g.b.rows);
  if (c16 == 1) return {nt, 1, 8, 1};
  if (nt == 4) return c <= 1 ? CtaForm{4, 2, 8, 1} : CtaForm{4, 2, 4, 2};
  if (nt == 2) return c <= 1 ? CtaForm{2, 2, 8, 1} : c == 2 ? CtaForm{2, 2, 4, 2} : CtaForm{2, 2, 4, 3};
  switch (c) {
    case 0:
    case 1: return {1, 2, 8, 1};
    case 2: return {1, 2, 4, 2};
    case 3: return {1, 2, 4, 3};
    case 4: return {1, 2, 2, 4};
    default: return {1, 2, 4, 4};
  }
}

// f(kernel, shared bytes, resident CTAs an SM, threads, rows a group) for
// one instance.
template <int kNT, int kRT, int kW, int kCtas, bool kX16, class F>
decltype(auto) with_instance(int device, F&& f) {
  constexpr auto kernel = gemm_mma_ring_entry<kNT, kRT, kW, kCtas, kX16>;
  constexpr int smem = launch_smem<kNT, kRT, kW, kCtas>();
  return f(kernel, smem, resident_ctas_sm90<kernel>(device, 32 * kW, smem), 32 * kW, group_rows(kRT));
}
// The instance of form `want`, which must be one of kForms (pick_cta's
// forms all are): the last entry is taken without a comparison.
template <bool kX16, size_t I = 0, class F>
decltype(auto) with_form(const CtaForm& want, int device, F&& f) {
  constexpr CtaForm fm = kForms[I];
  if constexpr (I + 1 < std::size(kForms)) {
    if (!(want == fm))
      return with_form<kX16, I + 1>(want, device, f);
  }
  return with_instance<fm.nt, fm.rt, fm.w, fm.ctas, kX16>(device, f);
}
template <bool kX16, class F>
decltype(auto) with_kernel(const GemmArgs& g, F&& f) {
  return with_form<kX16>(pick_cta(g), g.device.id, f);
}

// A's base and row stride 16-byte aligned: 16-byte copies (kX16).
bool a_16_byte(const GemmArgs& g) { return is_aligned(g.b.data, 16) && g.b.row_stride % 16 == 0; }

// The residency of the instance launch runs (can_run's too: the two
// alignments' instances differ in registers).
int resident_ctas_of_instance(const GemmArgs& g) {
  auto per_sm = [](auto, int, int n, int, int) { return n; };
  return a_16_byte(g) ? with_kernel<true>(g, per_sm) : with_kernel<false>(g, per_sm);
}

Status launch(const GemmArgs& args, Stream stream, bool early) {
  if (args.a.rows <= 0 || args.b.rows <= 0) return Status::success();
  const int per_sm = resident_ctas_of_instance(args);
  std::string why;
  if (!ctas_fit(per_sm, args.device.id, "sm_90", &why))
    return Status(StatusCode::cuda_error, std::string(args.fn) + " (cuda_gemv_mma): " + why + " (" +
                                              gemm_shape(args) + "); qg.explain shows the kernels that can run it");
  const Params p{static_cast<const uint8_t*>(args.a.data),
                 static_cast<const uint8_t*>(args.b.data),
                 args.a.rows,
                 args.a.row_stride,
                 static_cast<int>(args.b.rows),
                 static_cast<int>(args.a.k / 32),
                 static_cast<int>(args.b.row_stride),
                 kCodeBias};
  // One CTA a row group (can_run: at N = 9..16 all resident at once).
  auto go = [&](auto kernel, int smem, int, int threads, int rows) {
    const int64_t grid = (args.a.rows + rows - 1) / rows;
    launch_maybe_early(kernel, dim3(static_cast<unsigned>(grid)), dim3(threads), static_cast<size_t>(smem),
                       to_cuda(stream), early, p, epilogue_params(args));
    return gemm_launch_status(args);
  };
  return a_16_byte(args) ? with_kernel<true>(args, go) : with_kernel<false>(args, go);
}

}  // namespace

bool gemm_mma_ring_can_run(const GemmArgs& args, std::string* why_not) {
  auto no = [&](std::string why) {
    if (why_not) *why_not = std::move(why);
    return false;
  };
  if (args.b.rows < kMinCols || args.b.rows > kMaxCols)
    return no("N=" + std::to_string(args.b.rows) + " outside " + std::to_string(kMinCols) + ".." +
              std::to_string(kMaxCols) + " (measured faster elsewhere)");
  const int sms = device_limits(args.device.id).sms;
  // N = 3 where pick_cta takes 32-row groups in one wave (past 16 rows an
  // SM, not past 32).
  const CtaForm form = pick_cta(args);
  if (args.b.rows < kMinColsOneWave && form.rt == 2 && form.ctas == 1)
    return no("N=" + std::to_string(args.b.rows) + " with M=" + std::to_string(args.a.rows) +
              " in one wave of row groups of 32 (measured faster on cuda_gemv_ring)");
  // Past N = 24 with 32-row groups and K > 12288 (measured in one wave;
  // at c = 2 taken to hold as well, not measured).
  if (args.b.rows > kMaxColsOneWave && args.a.k > kMaxKPastColsOneWave && form.rt == 2)
    return no("N=" + std::to_string(args.b.rows) + " with M=" + std::to_string(args.a.rows) + " and K=" +
              std::to_string(args.a.k) + " > " + std::to_string(kMaxKPastColsOneWave) +
              " in row groups of 32 (measured faster on cuda_wgmma_folded)");
  if (args.a.k % 256 != 0 || args.a.k == 0)
    return no("K=" + std::to_string(args.a.k) +
              " is not a positive multiple of 256 (stages are whole 16-byte pieces of W and A)");
  // cp.async.cg moves 16-byte pieces between 16-byte-aligned addresses.
  if (!w_rows_16_byte_aligned(args, why_not)) return false;
  if (!gemm_operands_aligned(args, why_not)) return false;  // A's 4-byte copies at the least
  if (!a_within_32_bit_offsets(args, why_not)) return false;
  // Each lane forms the 32-bit offsets of its activation pieces for all 8
  // kNT tokens of the tile (and one more at kNT = 1: five rounds of 32
  // pieces pass the 144 of 8 tokens), those past N (never copied) included;
  // their row strides are held to int's range.
  const int nt = n8_tiles(args.b.rows), strides = last_formed_token(nt);
  if (args.b.row_stride > std::numeric_limits<int>::max() / strides)
    return no("A's row stride " + std::to_string(args.b.row_stride) + " bytes: " + std::to_string(strides) +
              " of them must fit a 32-bit offset (" + std::to_string(8 * nt) + "-token tiles)");
  const int per_sm = resident_ctas_of_instance(args);
  if (!ctas_fit(per_sm, args.device.id, "sm_90", why_not)) return false;
  // N <= 8: any number of row groups (past four an SM, in waves: pick_cta).
  if (args.b.rows <= 8) return true;
  // N = 9..32: one row group a CTA, all resident at once (header: with more
  // groups than that a persistent form was slower than cuda_wgmma).
  return row_groups_fit_one_wave(args, group_rows(form.rt), per_sm, sms, why_not);
}

Status gemm_mma_ring_run(const GemmArgs& args, Stream stream) { return launch(args, stream, false); }

// linear_q4_0: the quantizer, then this kernel launched early behind it
// (header).
Status gemm_mma_ring_run_quantizing(const GemmArgs& args, const QuantizeArgs& from_float, Stream stream) {
  if (Status s = quantize_run(from_float, stream); !s.ok()) return s;
  return launch(args, stream, true);
}

}  // namespace qg::detail::cuda
