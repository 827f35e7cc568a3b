// SPDX-License-Identifier: MIT
// cuda/gemm_q4_0_q8_1_wgmma.cu: Q4_0 x Q8_1 on Hopper's warpgroup MMAs
// (sm_90a), from N = 7 (kMinN below); the decode GEMV takes fewer tokens.
// Three registry entries: cuda_wgmma (int8 MMAs, every tile); from N = 65
// cuda_wgmma_f16 (the same kernel on fp16 codes, "The fp16 variant" below),
// which gives the same bits; and, tried first, from N = 17
// cuda_wgmma_folded (the scales folded into fp16 operands, "The folded
// variant" below), within the GEMM contract's NMSE but not those bits.
//
// What bounds a Q4_0 x Q8_1 GEMM on tensor cores is not the MMA but the
// block-32 rescale: every output needs acc += d_w * d_a * isum once per 32
// MACs. cuda_mma spends two FMAs on it (the magic-number trick, below) and
// about 15 more instructions per mma.sync on fragment loads, scale loads and
// nibble unpacking, all from the same issue slots: 157 TFLOP/s on an H200.
// Here one wgmma.m64n32k32 per warpgroup, block and 32 tokens replaces 16
// mma.sync, B (the activations) is read by the tensor cores straight from
// shared memory, and the issue slots go to the rescale.
//
// Operands.
//   - W (Q4_0) is wgmma's A, from registers. A block's byte j holds elements
//     j (low nibble) and j + 16 (high nibble), which is the register fragment
//     wgmma.cuh describes: one 32-bit word of bytes 4t..4t+3 gives a thread
//     both its k = 4t.. and k = 16 + 4t.. registers. W's bytes travel
//     untouched: a tensor copy brings 128 rows x 8 blocks (144 bytes a row)
//     into shared memory, and each thread loads its two words a block.
//   - The activations are B and must be K-major int8 rows in shared memory,
//     which Q8_1's 36-byte blocks (scale, sum, 32 codes) are not. A first
//     kernel (split_q8_1_kernel) rewrites them into a workspace: the codes as
//     [N, K] int8 rows, fetched by tensor copies in the 128-byte swizzle, and
//     per block the scales of token pairs as float4 (d_a, d_a', -M d_a,
//     -M d_a') with M = 1.5 * 2^23, ready for the rescale; plus one byte per
//     (block, 128 tokens) saying whether any of those scales is not finite.
//     That pass reads and writes about 2 N K bytes (3 N K with fp16 codes),
//     staged through shared memory so that its global accesses are whole
//     16-byte pieces (write_staged): on an H100 it takes 79 of the 865 µs
//     at N = 4096, K = 14336 (docs/architecture.md, "The re-layout passes").
//
// The rescale. Each wgmma starts its int32 sums at 0x4B400000, the bits of
// M = 1.5 * 2^23, so they come out as the float M + isum exactly (|isum| <=
// 32 * 8 * 128 = 2^15). Then f = fma(D as float, d_a, -M d_a) is isum * d_a
// rounded once, and acc = fma(d_w, f, acc): two FMAs and one move (resetting
// D to M) per output and block, no int -> float convert. A tile whose
// scales include a non-finite one takes acc += d_w * (d_a * float(isum)) for
// that stage instead, which agrees with the reference on every Inf and NaN
// (and is the same value for finite scales).
//
// Pipelining inside a warpgroup. Each consumer warpgroup owns 64 W rows x
// BN tokens (Cfg: 128, 64, 32 or 16, the narrowest that covers N), split
// into units of 32 (or 16) tokens with their own fp32 sums. A stage is 8
// blocks x the units, each one MMA into one of kInFlight + 1 sets of sums:
// unit U is issued, then unit U - kInFlight is waited for and rescaled, so
// kInFlight MMAs (two; three in the fp16 variant and the 16-token tile, one
// in the 32-token tile) stay queued while the FMAs run, and the W fragment of the next block and the scales of the next
// unit are loaded ahead (measured on an H200 with one
// MMA in flight and no prefetch: issue slots 40 % busy, a third of the
// stalls on those loads). The stage's code is straight-line and ends with
// nothing in flight.
//
// Roles. A CTA is two consumer warpgroups of 64 W rows each and a producer
// warpgroup, one thread of which issues per stage (8 blocks of K) the
// tensor copies (two or four code tiles, the W tile, the scales, the
// non-finite bytes) into a ring of 2 to 8 stages. The 16- and 32-token
// tiles have two such pairs of consumer warpgroups taking alternate stages
// (Cfg::kKGroups), whose sums pair 0 adds before it stores the tile. CTAs are persistent, walking 128 x BN tiles in
// groups of 8 tile rows (L2 reuse of W and codes). Where whole tiles would
// leave SMs idle (tiles fewer than the SMs, or a last wave far from full)
// the host plans tiles shared by K instead: groups of CTAs, one a tile
// column, take equal runs of K steps, and the last CTA to finish a shared
// tile adds its parts (work_split.h, gather_parts).
//
// Tails: the tensor copies fill W rows past M and tokens past N with zeros
// (d = 0: they add nothing), and the epilogue stores only elements inside C.
// K must be a multiple of 256 (whole stages; W rows 16-byte aligned).
#include <algorithm>
#include <cstdlib>
#include <type_traits>

#include "bulk_copy.cuh"
#include "folded_tiles.h"
#include "gemm_int_fast.cuh"
#include "grid_dependency.cuh"
#include "gemm_q4_0_q8_1.cuh"
#include "quantize.cuh"
#include "quantize_warp.cuh"
#include "tma.cuh"
#include "wgmma.cuh"
#include "work_split.h"
#include "workspace.cuh"

// The sm_80 pass of a multi-arch build compiles the kernel's body out (wgmma
// is sm_90a only), and each of its helpers would warn "declared but never
// referenced".
#pragma nv_diag_suppress 177

namespace qg::detail::cuda {
namespace {

using intfast::cached_fit;
using intfast::KernelFit;

constexpr int kMinM = 128;                // W rows a tile at least: two consumer warpgroups x m64
constexpr int kBlocks = 8;                // Q4_0 blocks (256 values of K) a stage
// A pair of consumer warpgroups (warps 0..7: a warpgroup must start at a
// warp index that is a multiple of 4) takes a tile's 128 W rows, 64 each, and
// a producer warpgroup (the last four warps) has one thread issue the copies.
// The one-unit tiles run two pairs (Cfg::kKGroups). The registers are moved
// to the consumers (setmaxnreg, Cfg::kConsumerRegs): with one pair
// 128 x 56 + 256 x 224 = 64512 of the SM's 65536, and per SM sub-partition
// one producer warp and two consumer warps, 16128 of 16384. (With 288
// threads and no producer warpgroup, ptxas holds every thread to 168: a
// sub-partition then has three warps.)
constexpr int kConsumerThreads = 256;  // a pair's
constexpr int kProducerRegs = 56;
constexpr int kConsumerWarps = 8;
constexpr int kCodeRowBytes = tma::kSwizzleBytes;                   // 4 blocks of codes a swizzled row
constexpr int kWRowBytes = kBlocks * kQ4_0Bytes;                    // 144
constexpr int kEpiPitch = 20;  // floats a staged token column takes: fragment writes hit 32 banks
constexpr int kEpilogueBytes = kConsumerWarps * 32 * kEpiPitch * 4;
constexpr int kFlagBytes = 16;    // a stage's non-finite bytes (8 used): one 16-byte tensor copy
constexpr int kFlagStride = 128;  // tensor copies land on 128-byte-aligned shared addresses
// Programmatic dependent launch (grid_dependency.cuh): up to kEarlyLaunchMaxN
// tokens the GEMM's CTAs start while the re-layout pass ends, and their
// producer requests the first kEarlyWStages stages of W (the caller's bytes,
// which the pass does not write) before waiting for it. Measured on an H200
// (docs/architecture.md, "Programmatic dependent launch"): 5-10 % faster
// from N = 16 to 128 and 0-4 % at 512 than the plain launch; all of the
// ring's W early was 2.5-3 µs slower than two stages at N <= 32 (our
// reading: the first stage's codes queue behind every stage's W); above 512
// tokens the GEMM level or up to 5 % faster, but linear_q4_0 1-4 % slower
// at N = 4096.
constexpr int kEarlyWStages = 2;
constexpr int64_t kEarlyLaunchMaxN = 512;
constexpr int kSplitTokens = 128; // tokens a CTA of the re-layout pass takes (and a non-finite byte covers)
static_assert(kMinM * kWRowBytes % 1024 == 0 && kWRowBytes % 16 == 0, "W boxes: whole 16-byte rows, 1024-byte tiles");

// A tile: BN = kUnits x kUnitN tokens, each unit one wgmma.m64n<kUnitN>k32
// a block; kStages stages in the ring (narrow tiles stream W, so they take
// as many as shared memory holds). kABufs W fragments rotate: with one unit
// a block, kInFlight MMAs in flight span as many blocks, so one buffer more
// is needed.
//
// kF16_: the fp16 variant (cuda_wgmma_f16, "The fp16 variant" below): codes
// as fp16, two m64n32k16 MMAs a unit and block, fp32 sums.
// kInFlight_: MMAs left queued while a unit is rescaled.
// kFold_: the folded variant (cuda_wgmma_folded, "The folded variant"
// below): fp16 operands with the scales inside them, one m64n128k16 (or,
// 64 tokens, m64n64k16; 32 tokens, m64n32k16) MMA a K step, the sums
// running across blocks; no scale table in the stages.
// kMSlices_: m64 slices of W rows a consumer warpgroup takes (the folded
// variant's tile is 256 rows, two slices, so that W's cheap bytes, not the
// activations' fp16 ones, grow with the tile).
template <int kUnitN_, int kUnits_, int kStages_, bool kF16_ = false, int kInFlight_ = 2, bool kFold_ = false,
          int kMSlices_ = 1, int kKGroups_ = 1>
struct Cfg {
  static constexpr int kUnitN = kUnitN_, kUnits = kUnits_, kStages = kStages_;
  static constexpr bool kF16 = kF16_, kFold = kFold_;
  static_assert(!kFold || (kF16 && kUnitN == 32 && (kUnits == 1 || kUnits == 2 || kUnits == 4)),
                "the folded variant: one n32, n64 or n128 MMA");
  static constexpr int kMSlices = kMSlices_;
  // What sharing a tile by K is charged, in this tile's steps (work_split.h;
  // the 256-row tile: folded_tiles.h's kFoldedTallShareCost).
  static constexpr int64_t kShareCost = kMSlices * kShareCostSteps;
  static_assert(kMSlices == 1 || kFold, "several m64 slices: the folded variant's loop only");
  // kKGroups_: pairs of consumer warpgroups on the same 128 W rows, pair p
  // taking the steps it with it % kKGroups == p; their sums are added in
  // shared memory at the end of each segment (pair 0 stores the tile).
  static constexpr int kKGroups = kKGroups_;
  static_assert(kKGroups == 1 || (kKGroups == 2 && (!kF16 || kFold) && kStages % 2 == 0),
                "two pairs of consumers: the int8 and folded tiles, an even ring");
  static constexpr int kConsumerThreads = kKGroups * ::qg::detail::cuda::kConsumerThreads;
  static constexpr int kThreads = kConsumerThreads + 128;
  // setmaxnreg: the producer keeps 56 (with 24 or 40 its loop spilled), the
  // consumers share the rest of the registers the CTA was launched with
  // (setmaxnreg.inc waits for registers a .dec in the same CTA gave back, so
  // asking past that pool never returns): 384 x 168 -> 256 x 224 with one
  // pair, 640 x 96 -> 512 x 104 with two.
  static constexpr int kProducerRegs = ::qg::detail::cuda::kProducerRegs;
  static constexpr int kLaunchRegs = 65536 / kThreads / 8 * 8;
  static constexpr int kConsumerRegs = (kLaunchRegs * kThreads - 128 * kProducerRegs) / kConsumerThreads / 8 * 8;
  static_assert(kKGroups > 1 || kConsumerRegs == 224, "one pair: 128 x 56 + 256 x 224");
  static_assert(kConsumerRegs >= kLaunchRegs && kConsumerRegs <= 256, "setmaxnreg.inc raises the count, to 256 at most");
  static constexpr int kBM = kMinM * kMSlices;           // W rows a tile
  static constexpr int kWBytes = kBM * kWRowBytes;
  static constexpr int kAccRows = kMSlices * kUnits;     // acc[slice * kUnits + unit][sum]
  static constexpr int BN = kUnitN * kUnits;
  static constexpr int kSums = kUnitN / 2;              // int32 / fp32 sums a thread per unit
  static constexpr int kInFlight = kInFlight_;
  static constexpr int kSets = kInFlight + 1;           // sets of kSums MMA sums: those in flight + the one rescaled
  // W fragments of whole blocks: a block's stays until its last unit retires.
  static constexpr int kABufs = kUnits == 1 ? kInFlight + 1 : 2;
  // The unit of a block after whose wait the previous block's buffer is free
  // and the next block's W loads into it.
  static constexpr int kLoadQ = kUnits == 1 ? 0 : kInFlight - 1;
  static_assert(kUnits == 1 || kLoadQ < kUnits, "the next block's W loads before its first MMA");
  static constexpr int kCodeElem = kF16 ? 2 : 1;        // bytes a re-laid activation code takes
  static constexpr int kBlockCodeBytes = 32 * kCodeElem;                   // one token's block of codes
  static constexpr int kBlocksPerRow = kCodeRowBytes / kBlockCodeBytes;    // blocks a swizzled row holds: 4 or 2
  static constexpr int kSubTiles = kBlocks / kBlocksPerRow;                // code tensor copies a stage
  static constexpr int kARegs = kF16 ? 8 : 4;           // W fragment registers a block (two K steps for fp16)
  using Sum = std::conditional_t<kF16, float, int>;     // what an MMA accumulates into
  using AReg = std::conditional_t<kF16, uint32_t, int>;
  static constexpr int kSubTileBytes = BN * kCodeRowBytes;  // all tokens, kBlocksPerRow blocks
  static constexpr int kCodeBytes = kSubTiles * kSubTileBytes;
  static constexpr int kPairs = BN / 2;
  static constexpr int kScaleBytes = kFold ? 0 : kBlocks * kPairs * 16;  // float4 per token pair and block
  static constexpr int kStageBytes = kCodeBytes + kWBytes + kScaleBytes;
  // A stage arrives and is handed back in parts, each with its own full and
  // empty barrier: the code sub-tiles (parts 0 .. kSubTiles - 1), then W with
  // the scale table and the non-finite flags (part kWPart). The folded
  // variant hands each part back as soon as its last MMA has retired, so the
  // producer refills a stage piece by piece instead of all at once.
  static constexpr int kWPart = kSubTiles, kParts = kSubTiles + 1;
  static_assert(kWBytes % 1024 == 0, "code tiles after W start on the swizzle's period");
  // Pair 1's sums for pair 0 and, folded, each thread's largest |d_w| bits.
  static constexpr int kReduceBytes =
      kKGroups == 1 ? 0 : (kAccRows * kSums + (kFold ? 1 : 0)) * 4 * ::qg::detail::cuda::kConsumerThreads;
  static constexpr int kSmemBytes = kStages * kStageBytes + kStages * kFlagStride + 2 * kStages * kParts * 8 +
                                    kEpilogueBytes + 16 + kReduceBytes + 1024;
  static_assert(kCodeBytes % 1024 == 0 && kStageBytes % 1024 == 0, "code tiles start on the swizzle's period");
  static_assert(kSmemBytes <= 227 * 1024, "fits an sm_90 SM's shared memory");
};
using CfgWide = Cfg<32, 4, 3>;  // N > 64: 128 tokens
using Cfg64 = Cfg<32, 2, 5>;    // N = 33..64
// The one-unit tiles: 16 or 32 tokens, too few for one pair of warpgroups to
// hide an MMA's latency (each rescale waits on the MMA of blocks before it),
// so two pairs share the ring, pair p taking the stages it % 2 == p, and sum
// at the end of the tile (measured on an H200: 5-9 % faster than one pair at
// N = 8 to 32 on both shapes, docs/architecture.md). With 104 registers a
// consumer, the 16-token tile keeps three MMAs queued, the 32-token one one.
using Cfg32 = Cfg<32, 1, 6, false, 1, false, 1, 2>;  // N = 17..32 (the exact kernels: the folded one runs there first)
using Cfg16 = Cfg<16, 1, 8, false, 3, false, 1, 2>;  // N <= 16
// The fp16 variant's tile: 128 tokens; a stage's codes take twice the bytes,
// so two stages fill shared memory. Three MMAs stay queued while a unit is
// rescaled (measured on an H200, 4096 x 14336: 4 to 6 % faster than two at N = 128, 512, 4096;
// four were slower than three).
using CfgWideF16 = Cfg<32, 4, 2, true, 3>;
// The folded variant's tiles: 128 or 256 W rows (one or two m64 slices a
// consumer warpgroup) x 128 tokens, two stages (82 or 100 KB each).
using CfgFolded = Cfg<32, 4, 2, true, 1, true, 1>;
using CfgFoldedTall = Cfg<32, 4, 2, true, 1, true, 2>;
using CfgFolded64 = Cfg<32, 2, 4, true, 1, true, 1>;  // 64 tokens: four stages of 50 KB
// 32 tokens. Measured on an H200 against the int8 kernel's 32-token tile
// (two consumer pairs, whose block rescale keeps it bound by its chain):
// 3-10 % faster at N = 17..32 on both LLM shapes, e.g. the GEMM at 14336 x
// 4096 N = 32 29.2-29.4 -> 27.6 us cold. Its own chain (unpack a block's W,
// then its MMAs) now runs in two consumer pairs too, on alternate stages:
// four stages (two a pair; six and pair 1's sums do not fit beside each
// other), 2-5 % faster than one pair on six stages, cold or hot, and 5-7 %
// in a CUDA graph on an H100 (N = 17, 24 and 32 measured) (docs/architecture.md, "The folded variant").
using CfgFolded32 = Cfg<32, 1, 4, true, 1, true, 1, 2>;

// Tokens. From N = 7 this kernel, with the quantization of linear_q4_0's x
// inside it, beat cuda_mmvq on an H200 (4096 x 14336, linear_q4_0 in a CUDA
// graph: 20.1 against 22.3 us at N = 7, 20.2 against 24.3 at N = 8); at
// N = 5..6 the GEMV was faster (18.2 / 19.9 against 20.2 / 20.6). The
// registry tries this kernel first, so cuda_mmvq keeps N <= 6 and the
// N = 7..8 shapes this one refuses. (On sm_90 cuda_gemv_mma, ahead of it,
// now takes N = 4..8 at every M and N = 9..16 within one wave.)
constexpr int64_t kMinN = 7;
// The fp16 variant (cuda_wgmma_f16) from this many tokens: it has only the
// 128-token tile.
constexpr int64_t kMinNF16 = 65;
// The folded variant (cuda_wgmma_folded) from this many tokens: its tiles
// are 32, 64 and 128 tokens; at N <= 16 the int8 kernel's 16-token tile
// stays (its ring of three queued MMAs in two consumer pairs).
constexpr int64_t kMinNFolded = 17;
// The folded variant's operands are fp16(code x scale): exact products
// rounded once. Scales up to these keep every such product below 2^15, far
// inside fp16's range (65504): |d_a| <= 256 (|code| <= 128), |d_w| <= 4096
// (|code - 8| <= 8). A block past them, or with a non-finite scale, makes
// its tile take the exact recomputation (recompute_exact).
constexpr float kFoldMaxA = 256.0f;
constexpr uint32_t kFoldMaxWBits = 0x6C00u;  // 4096.0 in fp16; magnitude bits above it, Inf and NaN included, do not fold
__host__ __device__ inline bool fold_carries(float d_a) { return fabsf(d_a) <= kFoldMaxA; }  // false for NaN

// The workspace: codes [N, K] int8, then per block a row of float4 scales of
// token pairs (npad = N rounded up to even, so 2 npad floats a row), then
// per 128 tokens a row of non-finite bytes, 16 per stage (8 used): a
// tensor copy's box must start on a 16-byte boundary. When tiles are shared
// by K, the parts' slots (fp32, kBM x BN each, two a CTA) and three counters
// per shared tile (tickets, parts stored, the folded variant's unsafe mark)
// follow.
struct SplitLayout {
  int64_t codes = 0, scales = 0, flags = 0, partials = 0, counters = 0, bytes = 0;
  int64_t scale_row_floats = 0, flag_rows = 0, flag_row = 0;
};

SplitLayout split_layout(int64_t n, int64_t k, int code_elem, int64_t partial_floats, int64_t counters) {
  auto up = [](int64_t v) { return (v + 255) / 256 * 256; };
  SplitLayout l;
  const int64_t nb = k / 32, npad = n + (n & 1);
  l.scale_row_floats = 2 * npad;
  l.flag_rows = (n + kSplitTokens - 1) / kSplitTokens;
  l.scales = up(n * k * code_elem);
  l.flag_row = nb / kBlocks * kFlagBytes;
  l.flags = l.scales + up(nb * l.scale_row_floats * 4);
  l.partials = l.flags + up(l.flag_rows * l.flag_row);
  l.counters = l.partials + up(partial_floats * 4);
  l.bytes = l.counters + up(counters * 4);
  return l;
}

// Where the two re-layout passes below write (the layout above), and the
// bookkeeping they share. A CTA owns 128 tokens x PB blocks (PB a divisor
// of kBlocks: blockIdx.y * PB is its first block), so it alone writes those
// blocks' non-finite bytes.
struct SplitDst {
  uint8_t* codes;
  int code_elem;  // 1: int8 codes; 2: fp16 codes in the fp16 variant's K order (f16_word)
  bool fold;      // fp16 values fp16(code x d_a) for the folded variant, where fold_carries(d_a)
  float* scales;
  int64_t scale_row_floats;
  uint8_t* flags;
  int64_t flag_row;
  unsigned* counters;
  int counter_count;
  int64_t k;

  // Zeroes the shared tiles' counters (the GEMM that follows on the stream
  // counts its CTAs' arrivals there) and this CTA's non-finite marks.
  template <int PB>
  __device__ void begin(int (&nonfinite)[PB]) const {
    if (blockIdx.x == 0 && blockIdx.y == 0)
      for (int i = threadIdx.x; i < counter_count; i += blockDim.x) counters[i] = 0;
    if (threadIdx.x < PB) nonfinite[threadIdx.x] = 0;
    __syncthreads();
  }
  __device__ float* scale_slot(int64_t tok, int64_t b) const {
    return scales + b * scale_row_floats + (tok / 2) * 4 + (tok % 2);
  }
  // Whether the GEMM must treat a block of scale d apart: a non-finite
  // scale (the int8 rescale's fast form would turn Inf into NaN), or one the
  // folded operands cannot carry. Marked in the block's non-finite byte.
  __device__ bool needs_exact(float d) const { return fold ? !fold_carries(d) : !isfinite(d); }
  // Token tok's block b's scale d: (d, -M d) in its pair's float4. Int8
  // codes take d / 16 (exact): their MMA sums are 16 isum (high_nibbles_x16).
  __device__ void put_scale(int64_t tok, int64_t b, float d) const {
    float* slot = scale_slot(tok, b);
    const float ds = code_elem == 1 ? d * 0.0625f : d;
    slot[0] = ds;
    slot[2] = -kMagic * ds;  // exact: 2 significant bits times 11
  }
  // The odd last token's partner slot (token n, which does not exist).
  __device__ void put_partner(int64_t tok, int64_t b) const {
    float* slot = scale_slot(tok, b);
    slot[0] = 0.0f;
    slot[2] = 0.0f;
  }
  // After the CTA's puts: its non-finite bytes, at their place among the
  // stage's kFlagBytes; the CTA of a stage's first block also zeroes the
  // bytes past kBlocks (copied with the stage, never read).
  template <int PB>
  __device__ void end(const int (&nonfinite)[PB]) const {
    __syncthreads();
    const int first = static_cast<int>(blockIdx.y) * PB;
    uint8_t* stage = flags + blockIdx.x * flag_row + (first / kBlocks) * kFlagBytes;
    if (threadIdx.x < PB) stage[first % kBlocks + threadIdx.x] = nonfinite[threadIdx.x] ? 1 : 0;
    else if (first % kBlocks == 0 && threadIdx.x < PB + kFlagBytes - kBlocks) stage[kBlocks + threadIdx.x - PB] = 0;
  }
};

// The fp16 variant's codes: 32 fp16 a block (exact: |code| <= 128), K step
// s's slot 8h + 2t + l holding element 16s + 4t + 2l + h, the order in which
// load_w_f16 unpacks W (any permutation of a block's K applied to both
// operands leaves its integer sum unchanged). So the block's 16-byte piece
// 2s + h is, for t = 0..3, the pair (byte h, byte h + 2) of code word
// 4s + t, and this is one such pair: each is code x scale, the exact fp32
// product (8 bits times 11) rounded once to fp16; scale 1 for the codes
// themselves.
__device__ __forceinline__ uint32_t f16_word(uint32_t codes4, int h, float scale) {
  auto code = [&](int byte) -> uint32_t {
    const int8_t c = static_cast<int8_t>(codes4 >> (8 * byte));
    return __half_as_ushort(__float2half_rn(static_cast<float>(c) * scale));
  };
  return code(h) | (code(h + 2) << 16);
}

// Both re-layout passes stage a CTA's 128 tokens x PB blocks in shared
// memory as Q8_1 blocks (fp16 d, 2 bytes unused, 32 codes), each token's PB
// blocks in a row of 36 PB bytes as they lie in a Q8_1 tensor, and then
// write them out with every thread's global access a 16-byte piece of a
// contiguous run: at PB = 8 a warp writes one token's 512 (fp16) or 256
// (int8) code bytes, at PB = 1 the 64 or 32 bytes of 8 or 16 tokens, or 32
// tokens' scales of one block. (The first pass had each thread
// convert and write its own blocks: 16-byte stores 64 bytes apart, and on
// an H100 the pass took 25 of a 135 µs GEMM at N = 512, K = 14336, reading
// and writing about 1 TB/s.)
template <int PB>
constexpr int stage_row_bytes = PB * kQ8_1Bytes;  // a token's PB blocks (288 bytes for a stage's 8)
template <int PB>
constexpr int stage_words = kSplitTokens * stage_row_bytes<PB> / 4;

// The staged rows of tokens tok0 .. tok0 + tokens - 1 (blocks b0 ..
// b0 + PB - 1) out to dst; every thread of the CTA calls it after the staging.
template <int kCodeElem, int PB>
__device__ void write_staged_as(const SplitDst& dst, const uint32_t* stage, int64_t tok0, int tokens, int64_t b0,
                                int64_t n, int (&nonfinite)[PB]) {
  constexpr int kStageRowBytes = stage_row_bytes<PB>;
  auto scale_of = [&](int tk, int b) {
    return half_bits_to_float(stage[(tk * kStageRowBytes + b * kQ8_1Bytes) / 4] & 0xFFFFu);
  };
  // Scales, tokens fastest: a warp's stores fill 16 pairs' float4.
  for (int i = threadIdx.x; i < PB * kSplitTokens; i += blockDim.x) {
    const int b = i / kSplitTokens, tk = i % kSplitTokens;
    if (tk < tokens) {
      const float d = scale_of(tk, b);
      dst.put_scale(tok0 + tk, b0 + b, d);
      if (dst.needs_exact(d)) atomicOr(&nonfinite[b], 1);  // non-finite, or a scale the fold cannot carry
    } else if (tok0 + tk == n && (n & 1)) {
      dst.put_partner(tok0 + tk, b0 + b);
    }
  }
  // Codes: a token's row is kPieces 16-byte pieces, piece p of block p / kPer.
  constexpr int kPer = 2 * kCodeElem, kPieces = PB * kPer;
  for (int i = threadIdx.x; i < tokens * kPieces; i += blockDim.x) {
    const int tk = i / kPieces, p = i % kPieces, b = p / kPer, half = (p % kPer) / kCodeElem;
    const uint32_t* w = stage + (tk * kStageRowBytes + b * kQ8_1Bytes + 4 + 16 * half) / 4;
    uint4 v;
    if constexpr (kCodeElem == 1) {
      v = make_uint4(w[0], w[1], w[2], w[3]);
    } else {
      const int h = p % 2;
      const float d = scale_of(tk, b);
      const float scale = dst.fold && fold_carries(d) ? d : 1.0f;
      v = make_uint4(f16_word(w[0], h, scale), f16_word(w[1], h, scale), f16_word(w[2], h, scale),
                     f16_word(w[3], h, scale));
    }
    reinterpret_cast<uint4*>(dst.codes + ((tok0 + tk) * dst.k + b0 * 32) * kCodeElem)[p] = v;
  }
}
template <int PB>
__device__ void write_staged(const SplitDst& dst, const uint32_t* stage, int64_t tok0, int tokens, int64_t b0,
                             int64_t n, int (&nonfinite)[PB]) {
  if (dst.code_elem == 2) write_staged_as<2, PB>(dst, stage, tok0, tokens, b0, n, nonfinite);
  else write_staged_as<1, PB>(dst, stage, tok0, tokens, b0, n, nonfinite);
}

// One CTA per 128 tokens x 8 blocks: the Q8_1 rows come in as 16-byte
// pieces (a token's 8 blocks are 288 contiguous bytes, 18 pieces), then
// write_staged.
constexpr int kSplitThreads = 256;
__global__ void __launch_bounds__(kSplitThreads) split_q8_1_kernel(const uint8_t* a, int64_t lda, int64_t n,
                                                                   SplitDst dst) {
  launch_dependents();  // the GEMM's CTAs may start: they wait for this pass's writes (grid_dependency.cuh)
  __shared__ int nonfinite[kBlocks];
  __shared__ __align__(16) uint32_t stage[stage_words<kBlocks>];
  dst.begin(nonfinite);
  const int64_t tok0 = static_cast<int64_t>(blockIdx.x) * kSplitTokens, b0 = static_cast<int64_t>(blockIdx.y) * kBlocks;
  const int tokens = static_cast<int>(n - tok0 < kSplitTokens ? n - tok0 : kSplitTokens);
  constexpr int kRowPieces = stage_row_bytes<kBlocks> / 16;
  const uint8_t* src = a + tok0 * lda + b0 * kQ8_1Bytes;
#pragma unroll
  for (int r = 0; r < kSplitTokens * kRowPieces / kSplitThreads; ++r) {  // all loads issued before the first store
    const int i = threadIdx.x + r * kSplitThreads, tk = i / kRowPieces, p = i % kRowPieces;
    if (tk < tokens) reinterpret_cast<uint4*>(stage)[i] = __ldg(reinterpret_cast<const uint4*>(src + tk * lda) + p);
  }
  __syncthreads();
  write_staged(dst, stage, tok0, tokens, b0, n, nonfinite);
  dst.end(nonfinite);
}
static_assert(kSplitTokens * (stage_row_bytes<kBlocks> / 16) % kSplitThreads == 0, "whole rounds of 16-byte loads");

// linear_q4_0's activations quantized to Q8_1 (quant_block.h's reference
// arithmetic: the same codes and fp16 scales as quantize_q8_1) straight into
// the layout above, in place of quantize_q8_1 + split_q8_1_kernel: one pass
// over x instead of writing and reading back Q8_1 blocks, and one launch
// fewer. A CTA takes 128 tokens x PB blocks (so that it owns its blocks'
// non-finite bytes); a thread quantizes (token, block) items PB t + j,
// blockDim apart, so each PB threads read one token's 32 PB consecutive
// values; the blocks are staged as Q8_1 and written out by write_staged.
// PB = 8 (a stage, split_q8_1_kernel's grid) with 256 threads where those
// CTAs are at least the SMs, so that several CTAs share an SM and one's
// quantizing and writing overlap another's reads (measured on an H100,
// cold, 4096 x 14336: the pass took 20 µs at N = 512, 224 CTAs, and 144 at
// N = 4096, against 27 and 165 for the first, unstaged pass). Fewer stage
// CTAs than SMs leave most SMs idle (56 of 132 at K = 14336, 16 at
// K = 4096): Nsight Compute on an H100 put that pass at 6.0 µs at N = 32
// and 11.5 at N = 128, 4096 x 14336, a thread an item in CTAs of 1024. From
// kSplitOneBlockMinN tokens those calls take PB = 1 instead, 128-thread
// CTAs, 8 times as many: linear_q4_0 on an H100, cold and in CUDA graphs,
// 4-11 % faster at N = 128, 2-7 % at 96, 0-6 % at 64, 0-2.5 % at 256; below
// it the short pass on few SMs lets more of the GEMM's CTAs start early
// beside it (PB = 1 was level to 5 % slower at N = 17 and 32;
// bench/RESULTS.md).
constexpr int kQuantizeSplitThreads = kSplitTokens * kBlocks, kQuantizeSplitThreadsShared = 256;
constexpr int kQuantizeSplitThreadsOne = kSplitTokens;  // PB = 1: a thread a token
constexpr int64_t kSplitOneBlockMinN = 64;
// Stages of K the split pass covers: its grid.y, which CUDA caps at 65535.
constexpr int64_t kMaxSplitStages = 65535;

// 32 values of a block into v. vec: 16-byte loads (x and its row stride
// 16-byte aligned); otherwise element loads, aligned or byte by byte.
template <DType T>
__device__ __forceinline__ void load_block(const uint8_t* p, bool vec, bool aligned, float (&v)[32]) {
  constexpr int kEsize = T == DType::f32 ? 4 : 2;
  if (vec) {
#pragma unroll
    for (int c = 0; c < 32 * kEsize / 16; ++c) {
      const uint4 w = reinterpret_cast<const uint4*>(p)[c];
      const uint32_t u[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        if constexpr (T == DType::f32) {
          v[4 * c + j] = bits_float(u[j]);
        } else if constexpr (T == DType::f16) {
          v[8 * c + 2 * j] = fp16_to_fp32(static_cast<uint16_t>(u[j] & 0xFFFFu));
          v[8 * c + 2 * j + 1] = fp16_to_fp32(static_cast<uint16_t>(u[j] >> 16));
        } else {
          v[8 * c + 2 * j] = bf16_to_fp32(static_cast<uint16_t>(u[j] & 0xFFFFu));
          v[8 * c + 2 * j + 1] = bf16_to_fp32(static_cast<uint16_t>(u[j] >> 16));
        }
      }
    }
  } else {
#pragma unroll
    for (int i = 0; i < 32; ++i) v[i] = load_value<T>(p, i, aligned);
  }
}

// kThreads: the launch's block size, so that ptxas gives a thread the
// registers that size leaves. Bounded by 1024 threads, every instance was
// held to 64 registers and spilled 40 bytes a thread; the 256- and
// 128-thread instances now take 70-74 (three and seven CTAs an SM, no
// spill). Measured on an H100 against the spilling kernels: 1-2 % faster
// at 4096 x 14336 N = 512 (`linear_q4_0` cold and in graphs), within about
// 3 % either way elsewhere from N = 32 to 4096 (bench/RESULTS.md).
template <DType T, int PB, int kThreads>
__global__ void __launch_bounds__(kThreads)
quantize_split_kernel(const uint8_t* x, int64_t x_row_stride, bool x_vec, bool x_aligned, int64_t n, SplitDst dst) {
  static_assert(kBlocks % PB == 0, "a CTA's blocks lie in one stage");
  launch_dependents();  // the GEMM's CTAs may start: they wait for this pass's writes (grid_dependency.cuh)
  constexpr int kEsize = T == DType::f32 ? 4 : 2;
  constexpr int kStageRowBytes = stage_row_bytes<PB>;
  __shared__ int nonfinite[PB];
  __shared__ __align__(16) uint32_t stage[stage_words<PB>];
  dst.begin(nonfinite);
  const int64_t tok0 = static_cast<int64_t>(blockIdx.x) * kSplitTokens, b0 = static_cast<int64_t>(blockIdx.y) * PB;
  const int tokens = static_cast<int>(n - tok0 < kSplitTokens ? n - tok0 : kSplitTokens);
  for (int item = threadIdx.x; item < tokens * PB; item += blockDim.x) {
    const int j = item % PB, tk = item / PB;
    float v[32];
    load_block<T>(x + ((tok0 + tk) * x_row_stride + (b0 + j) * 32) * kEsize, x_vec, x_aligned, v);
    int8_t q[32];
    uint32_t dbits = kFp16NaN;  // a non-finite block: the reference's bytes, NaN scale and zero codes
    if (block_is_finite(v)) {
      int sum;
      dbits = fp32_to_fp16(quantize_codes_q8(v, q, &sum));  // the GEMM sees the format's fp16 scale
    } else {
#pragma unroll
      for (int i = 0; i < 32; ++i) q[i] = 0;
    }
    uint32_t* w = stage + (tk * kStageRowBytes + j * kQ8_1Bytes) / 4;
    w[0] = dbits;
#pragma unroll
    for (int i = 0; i < 8; ++i)
      w[1 + i] = static_cast<uint8_t>(q[4 * i]) | (static_cast<uint32_t>(static_cast<uint8_t>(q[4 * i + 1])) << 8) |
                 (static_cast<uint32_t>(static_cast<uint8_t>(q[4 * i + 2])) << 16) |
                 (static_cast<uint32_t>(static_cast<uint8_t>(q[4 * i + 3])) << 24);
  }
  __syncthreads();
  // write_staged marks the blocks the GEMM must treat apart: a scale that
  // overflowed fp16, a NaN one, or one the folded operands cannot carry.
  write_staged(dst, stage, tok0, tokens, b0, n, nonfinite);
  dst.end(nonfinite);
}

struct Shape {
  int64_t m, n, nb;
  bool m_contiguous;     // C's m step is 1: the epilogue's lanes run along m
  bool unit_c;           // C's elements lie at their own alignment: whole units go through store_unit
  bool pair_c;           // and m-contiguous C at twice it, an even token stride: rows m, m + 1 (m even) in one store
  WorkSplit work;        // which steps of which tiles each CTA runs (work_split.h)
  float* parts;          // shared tiles: work.part_slots() slots of kBM x BN floats
  unsigned* tickets;     // per shared tile: CTAs that have finished their steps of it
  unsigned* stored;      // per shared tile: CTAs that have stored their part
  uint32_t f16_magic;    // fp16 variant: 1024.0 in both halves (0x64006400), see f16_pair
  uint32_t f16_bias;     // and 1032.0 in both halves (0x64086408)
  // The folded variant's exact recomputation reads the operands from global
  // memory: W, and the re-laid activations with their scale table.
  unsigned* unsafe_marks;  // per shared tile: whether a part met a scale the fold cannot carry
  const uint8_t* w;
  int64_t w_row_stride;
  const uint16_t* act;     // [N, K] fp16, f16_word's order
  const float* act_scales;
  int64_t scale_row_floats, k;
  uint32_t early_w_stages;  // stages whose W the producer requests before waiting for the pass (kEarlyWStages)
};

// Shared-memory loads by 32-bit shared address: generic loads would carry
// 64-bit addresses (registers) and an address-space check each. volatile:
// they stay where the pipeline puts them, between its waits and MMAs.
__device__ __forceinline__ float4 lds_f4(uint32_t addr) {
  float4 v;
  asm volatile("ld.shared.v4.f32 {%0, %1, %2, %3}, [%4];" : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "r"(addr));
  return v;
}
__device__ __forceinline__ uint32_t lds_b32(uint32_t addr) {
  uint32_t v;
  asm volatile("ld.shared.b32 %0, [%1];" : "=r"(v) : "r"(addr));
  return v;
}
__device__ __forceinline__ uint32_t lds_u16(uint32_t addr) {
  unsigned short h;
  asm volatile("ld.shared.u16 %0, [%1];" : "=h"(h) : "r"(addr));
  return h;
}
__device__ __forceinline__ float lds_half(uint32_t addr) {
  unsigned short h;
  asm volatile("ld.shared.u16 %0, [%1];" : "=h"(h) : "r"(addr));
  return __half2float(__ushort_as_half(h));
}

// Four codes 0..15 in the high nibbles of bytes (the low nibbles ignored)
// -> the signed bytes 16 (code - 8) (codes_x16_high, gemm_q4_0_q8_1.cuh),
// where code - 8 from a low nibble took a mask, an add and an xor. The bias
// is an immediate here (cuda_mmvq passes it in a register because ptxas
// split the form into two LOP3s there; the SASS of this kernel has not been
// checked for it). The MMA's sums are 16 times the block's integer sum, and
// the activations' scales in the table are d / 16 (SplitDst::put_scale), so
// the rescale's products are the same.
__device__ __forceinline__ int high_nibbles_x16(uint32_t bytes) { return codes_x16_high(bytes, kCodeBias); }

// Block kB of the stage in W row `row` + 8 r (row: the W stage's row of lane
// g): its scale into dw, and the thread's code word, bytes 4t .. 4t + 3 of
// its 16 code bytes. A block sits at 18 kB of its row: its code bytes start
// 2 bytes past a word for even kB, so those take two words and a byte
// permute.
template <int kB>
__device__ __forceinline__ uint32_t w_block_addr(uint32_t row, int r) {
  return row + r * 8 * kWRowBytes + kB * kQ4_0Bytes;
}
template <int kB>
__device__ __forceinline__ uint32_t load_w_code_word(uint32_t blk, int t) {
  if constexpr (kB % 2 == 1) {
    return lds_b32(blk + 2 + 4 * t);
  } else {
    return __byte_perm(lds_b32(blk + 4 * t), lds_b32(blk + 4 * t + 4), 0x5432);
  }
}
template <int kB>
__device__ __forceinline__ uint32_t load_w_word(uint32_t row, int r, int t, float& dw) {
  const uint32_t blk = w_block_addr<kB>(row, r);
  dw = lds_half(blk);
  return load_w_code_word<kB>(blk, t);
}

// This thread's W fragment of block kB of the stage, rows `row` and row + 8,
// and those rows' scales.
template <int kB>
__device__ __forceinline__ void load_w(uint32_t row, int t, int (&a)[4], float (&dw)[2]) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const uint32_t q = load_w_word<kB>(row, r, t, dw[r]);
    a[r] = high_nibbles_x16(q << 4);  // the low nibbles, moved up
    a[r + 2] = high_nibbles_x16(q);
  }
}

// D = the magic number, as a move of an immediate into each register: a
// plain assignment lets the compiler copy one register holding the constant
// into the others, and if that register is an accumulator an MMA still
// writes, ptxas must wait for the MMA before the copy (it inserts a
// warpgroup.wait and the pipelining is gone).
__device__ __forceinline__ void reset_magic(int& v) { asm volatile("mov.b32 %0, 0x4B400000;" : "=r"(v)); }

// A consumer warpgroup's state while it walks one stage. The stage is
// 8 kUnits units (block b = U / kUnits, unit q = U % kUnits: tokens
// kUnitN q .. kUnitN (q + 1) - 1), each one wgmma.m64n<kUnitN>k32 (fp16
// variant: two m64n32k16) into the sums d[U % kSets]. Unit U is issued, then
// unit U - kInFlight is waited for and rescaled into acc[q], so kInFlight
// MMAs stay queued behind the FMAs. (Each queued unit holds kSums registers
// a thread; the wide tile's 64 fp32 sums, kSets x 16 sums, the fragments and
// the prefetched scales fit the consumers' 224.)
template <class C>
struct StageCtx {
  typename C::Sum (&d)[C::kSets][C::kSums];
  float (&acc)[C::kUnits][C::kSums];
  typename C::AReg (&a)[C::kABufs][C::kARegs];  // W fragments of blocks b % kABufs: live until their last MMA retires
  float (&dw)[C::kABufs][2];  // and their rows' scales
  float4 (&sc)[C::kUnitN / 8];  // the scales of the next unit to rescale, loaded a step ahead
  uint32_t w_row;             // shared address of this thread's first W row in the stage
  uint32_t scales;            // and of the stage's scales: [8 blocks][BN / 2 token pairs] float4
  uint32_t codes_desc;        // low word of the wgmma descriptor of the stage's first code tile
  int t;
  uint32_t f16_magic, f16_bias;  // the fp16 variant's unpacking constants (Shape)
};

template <class C, int U>
__device__ __forceinline__ void load_scales(StageCtx<C>& c) {
  const uint32_t p = c.scales + 16 * ((U / C::kUnits) * C::kPairs + (U % C::kUnits) * (C::kUnitN / 2) + c.t);
#pragma unroll
  for (int j = 0; j < C::kUnitN / 8; ++j) c.sc[j] = lds_f4(p + 64 * j);
}

// ---- The fp16 variant (cuda_wgmma_f16)
//
// The same pipeline with the codes of both operands as fp16 (exact: W's
// code - 8 and A's int8 codes are small integers) and fp16 MMAs that sum in
// fp32: every partial sum of a block is an integer below 2^15, so the MMA's
// D is isum exactly, and a block's first MMA starts from zero (scale-d = 0)
// instead of from a reset. The rescale is then f = D * d_a (the same value
// as the int8 path's fma(M + isum, d_a, -M d_a): isum * d_a rounded once) and
// acc = fma(d_w, f, acc): two instructions per output and block where the
// int8 path spends three (two FMAs and the reset move). The price: the fp16
// tensor rate is half the int8 one, the codes take twice the bytes (shared
// memory, L2), a unit is two MMAs, and W is unpacked to fp16 in registers
// (f16_pair). Measured 1-8 % faster than the int8 tile from N = 128 to 1024
// on an H200, not the 1.5x the instruction count suggested
// (docs/architecture.md, "The fp16 variant"). Non-finite scales need no
// branch: D * d_a meets the block's whole integer sum, as the reference's
// d_a * isum.

// Two nibbles of v (bits 0..3 and 16..19) as fp16 code - 8, packed: OR-ing
// them into the bits of 1024.0 gives 1024 + code exactly, and one sub.f16x2
// of 1032 gives code - 8. magic and bias come from kernel parameters: with
// both LOP3 operands immediate, ptxas splits the LOP3 in two.
__device__ __forceinline__ uint32_t f16_pair(uint32_t v, uint32_t magic, uint32_t bias) {
  const uint32_t x = (v & 0x000F000Fu) | magic;
  uint32_t r;
  asm("sub.rn.f16x2 %0, %1, %2;" : "=r"(r) : "r"(x), "r"(bias));
  return r;
}

// Block kB's fp16 fragments, rows `row` and row + 8 (load_w's rows and code
// word: bytes 4t .. 4t + 3 of the block, element 4t + i in the low nibble of
// byte i and 16 + 4t + i in its high nibble). The word shifted by 0, 8, 4 and
// 12 bits has, at bits 0..3 and 16..19, elements (4t, 4t + 2), (4t + 1,
// 4t + 3), (16 + 4t, 16 + 4t + 2) and (16 + 4t + 1, 16 + 4t + 3): the K slots
// (2t, 2t + 1) and (2t + 8, 2t + 9) of K steps 0 and 1, which is the order
// f16_word gives the activations.
template <int kB>
__device__ __forceinline__ void load_w_f16(uint32_t row, int t, uint32_t (&a)[8], float (&dw)[2], uint32_t magic,
                                           uint32_t bias) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const uint32_t q = load_w_word<kB>(row, r, t, dw[r]);
    a[r] = f16_pair(q, magic, bias);
    a[2 + r] = f16_pair(q >> 8, magic, bias);
    a[4 + r] = f16_pair(q >> 4, magic, bias);
    a[6 + r] = f16_pair(q >> 12, magic, bias);
  }
}

// W block kB's fragment and its rows' scales, for either variant.
template <class C, int kB>
__device__ __forceinline__ void load_w_any(StageCtx<C>& c, typename C::AReg (&a)[C::kARegs], float (&dw)[2]) {
  if constexpr (C::kF16)
    load_w_f16<kB>(c.w_row, c.t, a, dw, c.f16_magic, c.f16_bias);
  else
    load_w<kB>(c.w_row, c.t, a, dw);
}

// acc += d_w * d_a * isum for unit U (its thread's tokens 8j + 2t, + 1 of the
// unit are pair 4j + t). int8 sums: d reset to the magic number; kFinite: the
// two-FMA form; otherwise the reference's d_w * (d_a * isum), which is the
// same value for finite scales and right for Inf and NaN. fp16 variant: D is
// isum as a float, d_w * (D * d_a) is that same value, one FMUL and one FFMA.
template <class C, bool kFinite, int U>
__device__ __forceinline__ void rescale_unit(StageCtx<C>& c) {
  constexpr int q = U % C::kUnits, slot = (U / C::kUnits) % C::kABufs, set = U % C::kSets;
#pragma unroll
  for (int j = 0; j < C::kUnitN / 8; ++j) {
    const float4 s = c.sc[j];
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const float da = (e & 1) ? s.y : s.x, neg = (e & 1) ? s.w : s.z, w = c.dw[slot][e >> 1];
      float& acc = c.acc[q][4 * j + e];
      if constexpr (C::kF16) {
        acc = fmaf(w, c.d[set][4 * j + e] * da, acc);
      } else {
        int& v = c.d[set][4 * j + e];
        if constexpr (kFinite)
          acc = fmaf(w, fmaf(__int_as_float(v), da, neg), acc);
        else
          acc = fmaf(w, da * static_cast<float>(v - static_cast<int>(kMagicBits)), acc);
        reset_magic(v);
      }
    }
  }
}

// Unit U: its MMA (fp16 variant: the block's two K steps, one commit group),
// then unit U - kInFlight waited for and rescaled, the next block's W and
// the next scales loaded ahead.
template <class C, bool kFinite, int U>
__device__ __forceinline__ void unit_step(StageCtx<C>& c) {
  constexpr int b = U / C::kUnits, q = U % C::kUnits, kD = C::kInFlight;
  constexpr uint32_t kB = (b / C::kBlocksPerRow) * C::kSubTileBytes + q * C::kUnitN * kCodeRowBytes +
                          C::kBlockCodeBytes * (b % C::kBlocksPerRow);
  wgmma::fence();
  if constexpr (C::kF16) {
    static_assert(C::kUnitN == 32, "the fp16 MMA wrapper is m64n32k16");
    wgmma::mma_f16_rs_n32<kB, false, 0>(c.d[U % C::kSets], c.a[b % C::kABufs], c.codes_desc);
    wgmma::mma_f16_rs_n32<kB + 32, true, 4>(c.d[U % C::kSets], c.a[b % C::kABufs], c.codes_desc);
  } else {
    wgmma::mma_s8_rs<C::kUnitN, kB>(c.d[U % C::kSets], c.a[b % C::kABufs], c.codes_desc);
  }
  wgmma::commit_group();
  if constexpr (U >= kD) {
    wgmma::wait_group<kD>();
    // Only operands of retired MMAs are touched: an asm "+r" on registers an
    // MMA still reads would let the compiler move the value and reuse them.
    wgmma::fence_operands(c.d[(U - kD) % C::kSets]);
    if constexpr (q == C::kLoadQ && b > 0) wgmma::fence_operands(c.a[(b + 1) % C::kABufs]);
    rescale_unit<C, kFinite, U - kD>(c);  // (it may still read the d_w of the buffer reloaded below)
  }
  // The next block's W, into the buffer whose last MMA the wait retired.
  if constexpr (q == C::kLoadQ && b + 1 < kBlocks)
    load_w_any<C, b + 1>(c, c.a[(b + 1) % C::kABufs], c.dw[(b + 1) % C::kABufs]);
  if constexpr (U >= kD - 1) load_scales<C, U - kD + 1>(c);
}

template <class C, bool kFinite, int... U>
__device__ __forceinline__ void unit_steps(StageCtx<C>& c, std::integer_sequence<int, U...>) {
  (unit_step<C, kFinite, U>(c), ...);
}

// The last kInFlight units of a stage, after its final wait: U .. kLast.
template <class C, bool kFinite, int U, int kLast>
__device__ __forceinline__ void drain(StageCtx<C>& c) {
  rescale_unit<C, kFinite, U>(c);
  if constexpr (U < kLast) {
    load_scales<C, U + 1>(c);
    drain<C, kFinite, U + 1, kLast>(c);
  }
}

// One stage, straight-line code that ends with nothing in flight: ptxas
// cannot follow MMA groups still pending across a loop's back edge and
// would serialise every MMA of the kernel instead (warning C7514).
template <class C, bool kFinite>
__device__ __forceinline__ void consume_stage(StageCtx<C>& c) {
  constexpr int kLast = C::kUnits * kBlocks - 1;
  load_w_any<C, 0>(c, c.a[0], c.dw[0]);
  unit_steps<C, kFinite>(c, std::make_integer_sequence<int, kLast + 1>{});
  wgmma::wait_group<0>();
#pragma unroll
  for (int i = 0; i < C::kSets; ++i) wgmma::fence_operands(c.d[i]);
#pragma unroll
  for (int i = 0; i < C::kABufs; ++i) wgmma::fence_operands(c.a[i]);
  drain<C, kFinite, kLast - C::kInFlight + 1, kLast>(c);
}

// ---- The folded variant (cuda_wgmma_folded)
//
// What bounds the two variants above is the block-32 rescale: two or three
// instructions per output and block, issued beside the MMAs. Here the
// scales go inside the operands instead: the re-layout pass writes each
// activation as fp16(code x d_a), and W is unpacked to fp16(code - 8) and
// multiplied by its block's d_w in registers (mul.rn.f16x2: the exact
// product rounded once). The MMAs then sum the whole K range into one set of
// fp32 sums, one wgmma.m64n128k16 a K step for all 128 tokens of the tile
// (m64n64k16 for the 64-token tile of N <= 64, m64n32k16 for the 32-token
// one of N <= 32), and the rescale is gone:
// per 16 K, a thread spends on W 4 LOP3, 4 sub and 4 mul f16x2 and two or
// three shared loads, shared by all the tile's tokens.
//
// The price is rounding: each operand carries a relative error of at most
// 2^-11 (fp16's half ulp; a product of a code and a scale is never below
// the scale, so never subnormal unless the scale is), where the other
// variants are exact up to the fp32 rescale. Against float64 from the same
// codes that is an NMSE near 1e-7 on random data (docs/numerics.md), inside
// the GEMM contract of 1e-6, but not the other kernels' bits.
//
// Scales the fold cannot carry (non-finite ones, |d_a| > 256, |d_w| >
// 4096: their products could leave fp16's range) are found on the way: the
// re-layout pass marks A's in the stage's non-finite bytes and writes those
// blocks' plain codes; the W unpacking keeps the largest |d_w| it met. A
// tile that met one is recomputed exactly (recompute_exact), so Inf and NaN
// follow the reference as in the other variants.

// Block kB's folded fp16 fragments, rows `row` and row + 8 (load_w_f16's
// registers, each pair times the row's d_w), and the largest scale
// magnitude met, as fp16 bits, into worst.
template <int kB>
__device__ __forceinline__ void load_w_folded(uint32_t row, int t, uint32_t (&a)[8], uint32_t magic, uint32_t bias,
                                              uint32_t& worst) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const uint32_t blk = w_block_addr<kB>(row, r);
    const uint32_t dbits = lds_u16(blk);
    const uint32_t q = load_w_code_word<kB>(blk, t);
    worst = max(worst, dbits & 0x7FFFu);
    const uint32_t d2 = __byte_perm(dbits, 0, 0x1010);  // d_w in both halves
    const uint32_t pairs[4] = {f16_pair(q, magic, bias), f16_pair(q >> 8, magic, bias),
                               f16_pair(q >> 4, magic, bias), f16_pair(q >> 12, magic, bias)};
#pragma unroll
    for (int i = 0; i < 4; ++i) asm("mul.rn.f16x2 %0, %1, %2;" : "=r"(a[2 * i + r]) : "r"(pairs[i]), "r"(d2));
  }
}

template <class C>
struct FoldCtx {
  float (&acc)[C::kAccRows][C::kSums];
  uint32_t (&a)[2][C::kMSlices][8];  // W fragments of blocks b % 2, per slice: live until their MMAs retire
  uint32_t w_row, codes_desc;        // w_row: this thread's first W row of slice 0 in the stage (shared address)
  int t;
  uint32_t f16_magic, f16_bias;
  uint32_t& worst;
  uint64_t* full;   // the stage's part barriers (C::kParts each)
  uint64_t* empty;
  uint32_t parity;  // of this use of the stage
  bool arriver;     // this thread hands parts back for its warp
};

// The sums of m64 slice sl: its n32 units (four for an n128 MMA's
// registers, two for n64, one for n32).
template <class C>
__device__ __forceinline__ float (&slice_acc(float (&acc)[C::kAccRows][C::kSums], int sl))[C::kUnits][C::kSums] {
  return *reinterpret_cast<float(*)[C::kUnits][C::kSums]>(&acc[sl * C::kUnits]);
}

// Block kB's fragments of every slice of the stage whose first W row (slice
// 0, this thread) is at w_row; slice sl's rows lie 64 sl rows further.
template <class C, int kB>
__device__ __forceinline__ void load_w_folded_slices(FoldCtx<C>& c, uint32_t w_row, uint32_t (&a)[C::kMSlices][8]) {
#pragma unroll
  for (int sl = 0; sl < C::kMSlices; ++sl)
    load_w_folded<kB>(w_row + sl * 64 * kWRowBytes, c.t, a[sl], c.f16_magic, c.f16_bias, c.worst);
}

// One K step of a slice: all the tile's tokens in one MMA.
template <class C, uint32_t kB, int kA>
__device__ __forceinline__ void folded_mma(float (&acc)[C::kUnits][C::kSums], uint32_t (&a)[8], uint32_t desc) {
  if constexpr (C::kUnits == 4) wgmma::mma_f16_rs_n128<kB, kA>(acc, a, desc);
  else if constexpr (C::kUnits == 2) wgmma::mma_f16_rs_n64<kB, kA>(acc, a, desc);
  else wgmma::mma_f16_rs_n32<kB, true, kA>(acc[0], a, desc);
}

// Block b: its MMAs (two K steps x the slices, the slices alternating so
// that consecutive MMAs add into different sums) as one group, then (after
// the previous block's group retires) the next block's W unpacked into the
// buffers that group read, while this block's MMAs run.
template <class C, int b>
__device__ __forceinline__ void folded_block(FoldCtx<C>& c) {
  constexpr uint32_t kB = (b / C::kBlocksPerRow) * C::kSubTileBytes + C::kBlockCodeBytes * (b % C::kBlocksPerRow);
  if constexpr (b % C::kBlocksPerRow == 0) bulk::mbar_wait(&c.full[b / C::kBlocksPerRow], c.parity);
  wgmma::fence();
#pragma unroll
  for (int sl = 0; sl < C::kMSlices; ++sl) folded_mma<C, kB, 0>(slice_acc<C>(c.acc, sl), c.a[b % 2][sl], c.codes_desc);
#pragma unroll
  for (int sl = 0; sl < C::kMSlices; ++sl)
    folded_mma<C, kB + 32, 4>(slice_acc<C>(c.acc, sl), c.a[b % 2][sl], c.codes_desc);
  wgmma::commit_group();
  if constexpr (b + 1 < kBlocks) {
    wgmma::wait_group<1>();
    // Blocks up to b - 1 have retired: the sub-tile that ended with b - 1 is free.
    if constexpr (b > 0 && b % C::kBlocksPerRow == 0)
      if (c.arriver) bulk::mbar_arrive(&c.empty[b / C::kBlocksPerRow - 1]);
#pragma unroll
    for (int sl = 0; sl < C::kMSlices; ++sl) wgmma::fence_operands(c.a[(b + 1) % 2][sl]);
    load_w_folded_slices<C, b + 1>(c, c.w_row, c.a[(b + 1) % 2]);
    // The last block's W is in registers (the unpacking used the loads): W's part is free.
    if constexpr (b + 2 == kBlocks)
      if (c.arriver) bulk::mbar_arrive(&c.empty[C::kWPart]);
  }
}

template <class C, int... B>
__device__ __forceinline__ void folded_blocks(FoldCtx<C>& c, std::integer_sequence<int, B...>) {
  (folded_block<C, B>(c), ...);
}

// One stage of the folded variant, straight-line and ending with nothing in
// flight (consume_stage says why). Its parts are waited for and handed back
// one by one inside (folded_block): code sub-tile i before block
// kBlocksPerRow * i and after that block pair's MMAs retire, W once the last
// block's W is in registers (docs/architecture.md, "Stages in parts"). Decoding the next stage's first block
// while this one's last MMAs ran, which means waiting for the next stage's
// data before releasing this one, was measured slower on an H200 (1.15-1.41x
// the time at N = 128..4096): with two stages in the ring it holds back the
// producer's next copy.
template <class C>
__device__ __forceinline__ void consume_stage_folded(FoldCtx<C>& c) {
  load_w_folded_slices<C, 0>(c, c.w_row, c.a[0]);
  folded_blocks<C>(c, std::make_integer_sequence<int, kBlocks>{});
  wgmma::wait_group<0>();
  if (c.arriver) bulk::mbar_arrive(&c.empty[C::kSubTiles - 1]);
  wgmma::fence_operands(c.acc);
#pragma unroll
  for (int sl = 0; sl < C::kMSlices; ++sl) {
    wgmma::fence_operands(c.a[0][sl]);
    wgmma::fence_operands(c.a[1][sl]);
  }
}

// Whether p holds in any consumer thread (all 256 must call it).
__device__ __forceinline__ bool consumers_any(bool p) {
  uint32_t r;
  asm volatile(
      "{\n.reg .pred p, q;\nsetp.ne.u32 p, %1, 0;\nbar.red.or.pred q, 1, %2, p;\nselp.u32 %0, 1, 0, q;\n}\n"
      : "=r"(r)
      : "r"(static_cast<uint32_t>(p)), "n"(kConsumerThreads)
      : "memory");
  return r != 0;
}

// A folded tile that met a scale the fold cannot carry: this thread's sums
// (rows m0 and m0 + 8, its tokens of the tile from n0) recomputed from the
// integer codes over all of K, in block order, as the other variants'
// non-finite path: acc += d_w * (d_a * isum). The codes come back from the
// folded values exactly: fp16(c x d_a) / d_a is within 128 x 2^-11 of c.
// Scalar and from global memory: slow, and only such tiles take it.
template <class C>
__device__ void recompute_exact(const Shape& s, float (&acc)[C::kUnits][C::kSums], int64_t m0, int64_t n0, int t) {
  // The sums in local memory (indexed at run time), copied to acc at the
  // end: acc stays in registers through the main loop.
  float sums[C::kUnits][C::kSums];
  for (int q = 0; q < C::kUnits; ++q)
    for (int i = 0; i < C::kSums; ++i) sums[q][i] = 0.0f;
  for (int64_t b = 0; b < s.nb; ++b) {
    int wc[2][32];
    float dw[2];
    for (int r = 0; r < 2; ++r) {
      const int64_t row = m0 + 8 * r;
      dw[r] = 0.0f;
      for (int e = 0; e < 32; ++e) wc[r][e] = 0;
      if (row >= s.m) continue;
      const uint8_t* blk = s.w + row * s.w_row_stride + b * kQ4_0Bytes;
      dw[r] = half_bits_to_float(static_cast<uint32_t>(blk[0]) | (static_cast<uint32_t>(blk[1]) << 8));
      for (int j = 0; j < 16; ++j) {
        wc[r][j] = (blk[2 + j] & 0x0F) - 8;
        wc[r][j + 16] = (blk[2 + j] >> 4) - 8;
      }
    }
    for (int q = 0; q < C::kUnits; ++q)
      for (int j = 0; j < C::kUnitN / 8; ++j)
        for (int l = 0; l < 2; ++l) {
          const int64_t tok = n0 + q * C::kUnitN + 8 * j + 2 * t + l;
          if (tok >= s.n) continue;
          const float da = s.act_scales[b * s.scale_row_floats + (tok / 2) * 4 + tok % 2];
          const bool folded = fold_carries(da);
          const uint16_t* v = s.act + tok * s.k + b * 32;
          int isum[2] = {0, 0};
          for (int slot = 0; slot < 32; ++slot) {
            // f16_word's order: K step st's slot 8h + 2u + l2 holds element 16 st + 4u + 2 l2 + h.
            const int st = slot / 16, h = (slot / 8) % 2, u = (slot / 2) % 4, l2 = slot % 2;
            const int e = 16 * st + 4 * u + 2 * l2 + h;
            const float x = half_bits_to_float(v[slot]);
            const int code = !folded ? static_cast<int>(x) : (da == 0.0f ? 0 : static_cast<int>(rintf(x / da)));
            isum[0] += wc[0][e] * code;
            isum[1] += wc[1][e] * code;
          }
          for (int r = 0; r < 2; ++r) {
            float& out = sums[q][4 * j + 2 * r + l];
            out = fmaf(dw[r], da * static_cast<float>(isum[r]), out);
          }
        }
  }
#pragma unroll
  for (int q = 0; q < C::kUnits; ++q)
#pragma unroll
    for (int i = 0; i < C::kSums; ++i) acc[q][i] = sums[q][i];
}

// The staging buffer by 32-bit shared address. Through a generic pointer
// every load of it was an LD with 64-bit address arithmetic around it:
// Nsight Compute's SASS of the folded 256-row tile (14336 x 4096, N = 512,
// H200) counted about 9 instructions an element for plain fp32 C and 22 for
// fp16 C. "memory": the fill, the __syncwarp and the loads keep their order.
__device__ __forceinline__ void sts_f32(uint32_t addr, float v) {
  asm volatile("st.shared.f32 [%0], %1;" ::"r"(addr), "f"(v) : "memory");
}
__device__ __forceinline__ float lds_f32(uint32_t addr) {
  float v;
  asm volatile("ld.shared.f32 %0, [%1];" : "=f"(v) : "r"(addr) : "memory");
  return v;
}
__device__ __forceinline__ float2 lds_f2(uint32_t addr) {
  float2 v;
  asm volatile("ld.shared.v2.f32 {%0, %1}, [%2];" : "=f"(v.x), "=f"(v.y) : "r"(addr) : "memory");
  return v;
}

// A staged unit (16 W rows x kUnitN tokens, every one inside C, C's
// elements aligned: Shape::unit_c) stored by each lane stepping one pointer
// by a constant stride. Three versions:
// - m-contiguous C with two rows a lane (Shape::pair_c: C's pairs of rows
//   aligned), fp32 with nothing to apply or a linear layer's bias and ReLU
//   in any dtype (store_unit_pairs, below);
// - fp32 with nothing to apply otherwise (store_unit_plain). Through
//   epilogue_store each element had paid a dependent chain of 64-bit address
//   arithmetic in a loop that was not unrolled, and the tile's eight inlined
//   copies of that loop missed the instruction cache on every tile: Nsight
//   Compute put 28 % of the warps' samples of the 256-row tile (14336 x
//   4096, N = 512) in those loops, stalled on fixed-latency waits and
//   instruction fetch.
// - any other epilogue, a loop that is not unrolled (unrolled, back when
//   each of the tile's units had its own copy of the stores, its eight
//   copies of every epilogue step made ptxas spill in two configurations
//   and take 6-30x as long on each kernel, and the kernel slower; not tried
//   again since the units share one copy, store_tile), with the
//   terms of the lane's one W row (m-contiguous C: its bias, its row scale)
//   or its one token (its column scale) loaded once before it. Through
//   epilogue_store every element waited on its bias load (an L2 round trip,
//   two consumer warps a scheduler to hide it): fp16 y with an fp16 bias
//   took 1.5x the time of plain fp32 y at 14336 x 4096.
template <int kUnitN>
__device__ __forceinline__ void store_unit_plain(const EpilogueParams& ep, bool m_contiguous, uint32_t buf,
                                                 int64_t m0, int64_t nc, int lane) {
  float* c = reinterpret_cast<float*>(ep.c);
  if (m_contiguous) {  // lane: W row m0 + lane % 16, tokens lane / 16 + 2 j
    const uint32_t src = buf + 4 * ((lane / 16) * kEpiPitch + lane % 16);
    float* p = c + (m0 + lane % 16) + (nc + lane / 16) * ep.ldc_n;
    const int64_t step = 2 * ep.ldc_n;
#pragma unroll
    for (int j = 0; j < kUnitN / 2; ++j, p += step) *p = lds_f32(src + 4 * 2 * j * kEpiPitch);
  } else if (lane < kUnitN) {  // lane: token nc + lane, W rows m0 + r
    float* p = c + m0 * ep.ldc + (nc + lane) * ep.ldc_n;
#pragma unroll
    for (int r = 0; r < 16; ++r, p += ep.ldc) *p = lds_f32(buf + 4 * (lane * kEpiPitch + r));
  }
}

__device__ __forceinline__ void store_float_aligned(uint8_t* p, DType dtype, float v) {
  if (dtype == DType::f32) *reinterpret_cast<float*>(p) = v;
  else if (dtype == DType::f16) *reinterpret_cast<uint16_t*>(p) = fp32_to_fp16(v);
  else *reinterpret_cast<uint16_t*>(p) = fp32_to_bf16(v);
}

// Two adjacent elements of C (lo at p, hi after it) in one store. fp16: one
// cvt.rn.f16x2.f32 for both, which rounds as fp32_to_fp16 does; a NaN half,
// whose bits the hardware makes 0x7FFF, is replaced by fp32_to_fp16's (the
// sign and kFp16NaN) through a mask rather than a branch around every pair.
template <DType CT>
__device__ __forceinline__ void store_pair(uint8_t* p, float lo, float hi) {
  if constexpr (CT == DType::f32) {
    *reinterpret_cast<float2*>(p) = make_float2(lo, hi);
  } else if constexpr (CT == DType::f16) {
    uint32_t w;
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(w) : "f"(hi), "f"(lo));
    const uint32_t mask = (lo != lo ? 0x0000FFFFu : 0u) | (hi != hi ? 0xFFFF0000u : 0u);
    const uint32_t canon = ((__float_as_uint(lo) >> 16) & 0x8000u) | (__float_as_uint(hi) & 0x80000000u) |
                           (static_cast<uint32_t>(kFp16NaN) * 0x00010001u);
    w = (w & ~mask) | (canon & mask);
    *reinterpret_cast<uint32_t*>(p) = w;
  } else {
    *reinterpret_cast<uint32_t*>(p) = fp32_to_bf16(lo) | (static_cast<uint32_t>(fp32_to_bf16(hi)) << 16);
  }
}

// m-contiguous C, two W rows a lane: rows m0 + 2 (lane % 8) and the next,
// tokens nc + lane / 8 + 4 j. Either plain fp32 (kPlain) or a linear layer's
// epilogue: C of dtype CT, a bias and/or ReLU, nothing else. The steps are
// epilogue_value's, called on a copy of ep whose dtype, alpha, beta and
// scales the compiler then knows, so the bytes are epilogue_store's. Half
// the store instructions of one row a lane, and for fp16 one conversion a
// pair (docs/architecture.md, "The epilogue's unit stores", has the
// figures).
template <int kUnitN, DType CT, bool kPlain>
__device__ __forceinline__ void store_unit_pairs(EpilogueParams e, uint32_t buf, int64_t m0, int64_t nc, int lane) {
  e.c_dtype = CT;
  e.alpha = 1.0f;
  e.beta = 0.0f;
  e.row_scale = nullptr;
  e.col_scale = nullptr;
  if constexpr (kPlain) {
    e.bias = nullptr;
    e.relu = false;
  }
  constexpr int64_t kEsize = CT == DType::f32 ? 4 : 2;
  const int64_t m = m0 + 2 * (lane % 8);
  const EpilogueRowTerms row_lo = epilogue_row_terms(e, m), row_hi = epilogue_row_terms(e, m + 1);
  const uint32_t src = buf + 4 * ((lane / 8) * kEpiPitch + 2 * (lane % 8));
  float2 v[kUnitN / 4];
#pragma unroll
  for (int j = 0; j < kUnitN / 4; ++j) v[j] = lds_f2(src + 4 * 4 * j * kEpiPitch);
  uint8_t* p = e.c + (m + (nc + lane / 8) * e.ldc_n) * kEsize;
  const int64_t step = 4 * e.ldc_n * kEsize;
#pragma unroll
  for (int j = 0; j < kUnitN / 4; ++j, p += step)
    store_pair<CT>(p, epilogue_value(e, v[j].x, row_lo, 1.0f, p), epilogue_value(e, v[j].y, row_hi, 1.0f, p + kEsize));
}

template <int kUnitN>
__device__ __forceinline__ void store_unit_epilogue(const EpilogueParams& ep, bool m_contiguous, uint32_t buf,
                                                    int64_t m0, int64_t nc, int lane) {
  const int esize = dtype_bytes(ep.c_dtype);
  if (m_contiguous) {
    const int64_t m = m0 + lane % 16;
    const EpilogueRowTerms row = epilogue_row_terms(ep, m);
    uint8_t* p = ep.c + (m + (nc + lane / 16) * ep.ldc_n) * esize;
    const int64_t step = 2 * ep.ldc_n * esize;
#pragma unroll 1
    for (int i = lane / 16; i < kUnitN; i += 2, p += step)
      store_float_aligned(p, ep.c_dtype,
                          epilogue_value(ep, lds_f32(buf + 4 * (i * kEpiPitch + lane % 16)), row,
                                         epilogue_col_scale(ep, nc + i), p));
  } else if (lane < kUnitN) {
    const float col_scale = epilogue_col_scale(ep, nc + lane);
    uint8_t* p = ep.c + (m0 * ep.ldc + (nc + lane) * ep.ldc_n) * esize;
    const int64_t step = ep.ldc * esize;
#pragma unroll 1
    for (int r = 0; r < 16; ++r, p += step)
      store_float_aligned(p, ep.c_dtype,
                          epilogue_value(ep, lds_f32(buf + 4 * (lane * kEpiPitch + r)), epilogue_row_terms(ep, m0 + r),
                                         col_scale, p));
  }
}

// A linear layer's epilogue: alpha 1, beta 0, no scales (a bias and ReLU
// allowed, any C dtype).
__device__ __forceinline__ bool linear_epilogue(const EpilogueParams& ep) {
  return ep.alpha == 1.0f && ep.beta == 0.0f && !ep.row_scale && !ep.col_scale;
}

// false leaves the unit to epilogue_store (tails, unaligned C). The fp16
// variant keeps epilogue_store for every epilogue but the plain one, and
// one row a lane for that: with store_unit_epilogue inlined ptxas spilled
// 120 bytes in it, with store_unit_pairs 184 (the only configuration that
// spilled each time), and that variant serves only QG_CUDA_FOLDED=0.
template <class C>
__device__ __forceinline__ bool store_unit(const Shape& s, const EpilogueParams& ep, uint32_t buf, int64_t m0,
                                           int64_t nc, int lane) {
  constexpr bool kUnitEpilogue = !(C::kF16 && !C::kFold);
  if (!s.unit_c || m0 + 16 > s.m || nc + C::kUnitN > s.n || (!ep.plain && !kUnitEpilogue)) return false;
  if (ep.plain) {
    if constexpr (kUnitEpilogue) {
      if (s.pair_c) {
        store_unit_pairs<C::kUnitN, DType::f32, true>(ep, buf, m0, nc, lane);
        return true;
      }
    }
    store_unit_plain<C::kUnitN>(ep, s.m_contiguous, buf, m0, nc, lane);
  } else if constexpr (kUnitEpilogue) {
    if (s.pair_c && linear_epilogue(ep)) {
      if (ep.c_dtype == DType::f16) store_unit_pairs<C::kUnitN, DType::f16, false>(ep, buf, m0, nc, lane);
      else if (ep.c_dtype == DType::bf16) store_unit_pairs<C::kUnitN, DType::bf16, false>(ep, buf, m0, nc, lane);
      else store_unit_pairs<C::kUnitN, DType::f32, false>(ep, buf, m0, nc, lane);
    } else {
      store_unit_epilogue<C::kUnitN>(ep, s.m_contiguous, buf, m0, nc, lane);
    }
  }
  return true;
}

// Unit u of a consumer warp's sums (slice u / kUnits, unit u % kUnits) into
// its staging buffer at shared address buf, as the fragments lie (token
// columns of kEpiPitch floats). u is known at run time only, so that the
// unit stores after it are one copy of code a kernel (store_tile); registers
// cannot be indexed at run time, hence one compile-time case a unit.
template <class C, int U = 0>
__device__ __forceinline__ void stage_unit(const float (&acc)[C::kAccRows][C::kSums], int u, uint32_t buf, int lane) {
  if constexpr (U < C::kAccRows) {
    if (u != U) {
      stage_unit<C, U + 1>(acc, u, buf, lane);
      return;
    }
    const int g = lane / 4, t = lane % 4;
#pragma unroll
    for (int j = 0; j < C::kUnitN / 8; ++j) {
      const int col = 8 * j + 2 * t;
      sts_f32(buf + 4 * (col * kEpiPitch + g), acc[U][4 * j]);
      sts_f32(buf + 4 * ((col + 1) * kEpiPitch + g), acc[U][4 * j + 1]);
      sts_f32(buf + 4 * (col * kEpiPitch + g + 8), acc[U][4 * j + 2]);
      sts_f32(buf + 4 * ((col + 1) * kEpiPitch + g + 8), acc[U][4 * j + 3]);
    }
  }
}

// Stores a consumer warp's 16 W rows a slice x BN tokens (rows m0 + 64 sl
// of the tile, tokens from n0) through its staging buffer (32 tokens x
// kEpiPitch floats at shared address buf, one unit at a time): every store
// instruction then covers 16 consecutive m of two tokens (one row a lane) or
// of four tokens (two rows a lane), or up to 32 consecutive tokens,
// whichever C's layout makes contiguous, instead of the fragment's
// scattered pairs. The loop over the units is not unrolled: unrolled, each
// of the tile's units had its own copy of the stores, each fetched again at
// every tile. Nsight Compute (H200,
// 14336 x 4096, N = 512, folded 256-row tile, fp16 C with the two-row
// stores): 2796 of the 3238 warp samples in those copies waited on
// instruction fetch, and the kernel took 145.0 µs against 117.8 with fp32 C.
// The fp16 variant keeps it unrolled: rolled, with all its sums live
// through the loop, ptxas spilled 208 bytes there (that variant serves
// QG_CUDA_FOLDED=0).
template <class C>
__device__ __forceinline__ void store_tile(const Shape& s, const EpilogueParams& ep,
                                           const float (&acc)[C::kAccRows][C::kSums], uint32_t buf, int64_t m0,
                                           int64_t n0, int lane) {
#pragma unroll(C::kF16 && !C::kFold ? C::kAccRows : 1)
  for (int u = 0; u < C::kAccRows; ++u) {
    const int64_t mu = m0 + 64 * (u / C::kUnits), nc = n0 + (u % C::kUnits) * C::kUnitN;
    if (mu >= s.m) break;  // this slice and the next are past M
    stage_unit<C>(acc, u, buf, lane);
    __syncwarp();
    if (!store_unit<C>(s, ep, buf, mu, nc, lane)) {  // tails, unaligned C, the fp16 variant's epilogues
      if (s.m_contiguous) {
        const int mi = lane % 16;
        if (mu + mi < s.m) {
#pragma unroll 1
          for (int i = lane / 16; i < C::kUnitN && nc + i < s.n; i += 2)
            epilogue_store(ep, mu + mi, nc + i, lds_f32(buf + 4 * (i * kEpiPitch + mi)));
        }
      } else if (lane < C::kUnitN && nc + lane < s.n) {
#pragma unroll 1
        for (int r = 0; r < 16 && mu + r < s.m; ++r)
          epilogue_store(ep, mu + r, nc + lane, lds_f32(buf + 4 * (lane * kEpiPitch + r)));
      }
    }
    __syncwarp();  // the buffer is refilled by the next unit
  }
}

// The consumer threads' barrier (named barrier 1; the producer warpgroup
// never joins it).
__device__ __forceinline__ void consumers_sync() {
  asm volatile("bar.sync 1, %0;\n" ::"n"(kConsumerThreads) : "memory");
}
// The two consumer pairs' barriers (kKGroups = 2): one pair arrives, the
// other waits.
template <int kId, int kCount>
__device__ __forceinline__ void pair_bar_sync() {
  asm volatile("bar.sync %0, %1;\n" ::"n"(kId), "n"(kCount) : "memory");
}
template <int kId, int kCount>
__device__ __forceinline__ void pair_bar_arrive() {
  asm volatile("bar.arrive %0, %1;\n" ::"n"(kId), "n"(kCount) : "memory");
}

__device__ __forceinline__ unsigned load_acquire(const unsigned* p) {
  unsigned v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

// A tile shared by K (work_split.h), once this CTA's steps of it are done.
// The CTA takes a ticket. All but the last store their part in the
// workspace as the fragments lie (sum v of consumer thread x at v * 256 + x:
// each warp store covers 128 consecutive bytes) and count it stored. The
// last waits until the others' parts are stored (they took their tickets
// first, so they are running and about to: no CTA waits on one that may
// not have started), adds the parts in the order of their CTAs, whoever it
// is, so the bits do not depend on who arrives last, and returns true (its
// caller stores the tile). Where the last is the tile's first sharer (as
// where a run ends with the first steps of a row: that CTA reaches the
// tile late) its part stays in registers; otherwise it stores it too and
// reads it back in its place. All of a part's loads are issued
// before the first add waits (one L2 round trip a part, not one a sum).
// The folded variant passes `unsafe` (this CTA's verdict, the same in every
// consumer thread): the last gets back whether any part met a scale the
// fold cannot carry.
template <class C>
__device__ __forceinline__ bool gather_parts(const Shape& s, float (&acc)[C::kAccRows][C::kSums], const Segment& sg,
                                             volatile unsigned* ticket, bool* unsafe = nullptr) {
  constexpr int64_t kTileFloats = C::kBM * C::BN;
  const int64_t row = sg.tm - s.work.whole_rows, tile = sg.shared;  // its shared row, its shared tile
  const int64_t me = blockIdx.x / s.work.cols, first = s.work.first_sharer(row);
  const int64_t sharers = s.work.last_sharer(row) - first + 1;
  if (sharers == 1) return true;  // the plan left this shared row's tile to one CTA: nothing to add
  auto part = [&](int64_t g) { return s.parts + s.work.part_slot(g, row, sg.tn) * kTileFloats + threadIdx.x; };
  auto store_mine = [&] {
    float* mine = part(me);
#pragma unroll
    for (int q = 0; q < C::kAccRows; ++q)
#pragma unroll
      for (int i = 0; i < C::kSums; ++i) mine[(q * C::kSums + i) * kConsumerThreads] = acc[q][i];
  };
  consumers_sync();  // every thread has read the previous ticket
  if (threadIdx.x == 0) *ticket = atomicAdd(&s.tickets[tile], 1u);
  consumers_sync();
  if (static_cast<int64_t>(*ticket) < sharers - 1) {
    store_mine();
    if (unsafe && *unsafe && threadIdx.x == 0) atomicOr(&s.unsafe_marks[tile], 1u);
    // The part is visible device-wide before the count says it is stored
    // (the fence-then-count pattern of a last-block reduction).
    __threadfence();
    consumers_sync();
    if (threadIdx.x == 0) atomicAdd(&s.stored[tile], 1u);
    return false;
  }
  if (threadIdx.x == 0)
    while (load_acquire(&s.stored[tile]) < static_cast<unsigned>(sharers - 1)) __nanosleep(64);
  consumers_sync();
  __threadfence();
  if (unsafe) *unsafe = *unsafe || __ldcg(&s.unsafe_marks[tile]) != 0;
  if (me != first) {
    store_mine();  // this thread reads back its own stores below
    const float* p = part(first);
#pragma unroll
    for (int q = 0; q < C::kAccRows; ++q)
#pragma unroll
      for (int i = 0; i < C::kSums; ++i) acc[q][i] = __ldcg(p + (q * C::kSums + i) * kConsumerThreads);
  }
  for (int64_t g = first + 1; g < first + sharers; ++g) {
    const float* p = part(g);
#pragma unroll
    for (int q = 0; q < C::kAccRows; ++q)
#pragma unroll
      for (int i = 0; i < C::kSums; ++i)  // __ldcg: from L2, where the other SMs' stores are
        acc[q][i] += __ldcg(p + (q * C::kSums + i) * kConsumerThreads);
  }
  return true;
}

template <class C>
__global__ void __launch_bounds__(C::kThreads, 1)
gemm_q4_0_wgmma_kernel(const __grid_constant__ CUtensorMap map_w, const __grid_constant__ CUtensorMap map_codes,
                       const __grid_constant__ CUtensorMap map_scales, const __grid_constant__ CUtensorMap map_flags,
                       Shape s, EpilogueParams ep) {
#if QG_WGMMA_ENABLED
  extern __shared__ uint8_t smem_raw[];
  uint8_t* ring = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t{1023});
  // Each stage's non-finite bytes arrive by tensor copy with the stage, so
  // they are ordered by the same full/empty barriers as its other data.
  uint8_t* stage_flags = ring + C::kStages * C::kStageBytes;
  uint64_t* full = reinterpret_cast<uint64_t*>(stage_flags + C::kStages * kFlagStride);  // [stage][part]
  uint64_t* empty = full + C::kStages * C::kParts;
  float* staging = reinterpret_cast<float*>(empty + C::kStages * C::kParts);
  volatile unsigned* ticket = reinterpret_cast<volatile unsigned*>(staging + kEpilogueBytes / 4);  // gather_parts'
  float* reduce = staging + kEpilogueBytes / 4 + 4;  // kReduceBytes: pair 1's sums (and, folded, |d_w| marks) for pair 0

  const int warpgroup = threadIdx.x / 128, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (threadIdx.x == 0) {
    for (int i = 0; i < C::kStages * C::kParts; ++i) {
      bulk::mbar_init(&full[i], 1);
      bulk::mbar_init(&empty[i], kConsumerWarps);
    }
    bulk::mbar_init_fence();
  }
  __syncthreads();  // the only CTA-wide barrier: the roles part here

  // The producer and the consumers walk the same segments (work_split.h):
  // whole tiles, then a run of steps that may cut tiles at either end.
  Segment sg;
  if (threadIdx.x >= C::kConsumerThreads) {
    wgmma::set_max_registers<false, C::kProducerRegs>();
    if (threadIdx.x == C::kConsumerThreads) {
      tma::prefetch_map(&map_w);
      tma::prefetch_map(&map_codes);
      tma::prefetch_map(&map_scales);
      tma::prefetch_map(&map_flags);
      auto load_w = [&](uint32_t stage, int64_t step, int64_t tm) {
        uint64_t* pfull = full + stage * C::kParts;
        bulk::mbar_arrive_expect(&pfull[C::kWPart], C::kWBytes + C::kScaleBytes + kFlagBytes);
        tma::load_2d(ring + stage * C::kStageBytes + C::kCodeBytes, &map_w,
                     static_cast<int32_t>(step * kBlocks) * kQ4_0Bytes, static_cast<int32_t>(tm * C::kBM),
                     &pfull[C::kWPart]);
      };
      uint32_t it = 0;
      for (WorkWalk walk(s.work, blockIdx.x); it < s.early_w_stages && walk.next(sg);)
        for (int64_t ks = 0; ks < sg.steps && it < s.early_w_stages; ++ks, ++it) load_w(it, sg.first_step + ks, sg.tm);
      const uint32_t early = it;
      wait_prerequisite();
      it = 0;
      for (WorkWalk walk(s.work, blockIdx.x); walk.next(sg);) {
        const int64_t tm = sg.tm, tn = sg.tn;
        const int32_t n0 = static_cast<int32_t>(tn * C::BN);
        for (int64_t ks = 0; ks < sg.steps; ++ks, ++it) {
          const uint32_t stage = it % C::kStages, round = it / C::kStages;
          uint64_t* pfull = full + stage * C::kParts;
          uint64_t* pempty = empty + stage * C::kParts;
          const int64_t step = sg.first_step + ks;
          uint8_t* dst = ring + stage * C::kStageBytes;
          const int32_t kb = static_cast<int32_t>(step * kBlocks);
          // Each part once its last readers are done, in the order the
          // folded consumers hand them back: the sub-tiles but the last, W,
          // the last sub-tile.
#pragma unroll
          for (int i = 0; i < C::kSubTiles; ++i) {
            if (i == C::kSubTiles - 1) {
              if (round > 0) bulk::mbar_wait(&pempty[C::kWPart], (round - 1) & 1);
              if (round > 0 || it >= early) load_w(stage, step, tm);  // the first `early` went before the wait
              if constexpr (!C::kFold)
                tma::load_2d(dst + C::kCodeBytes + C::kWBytes, &map_scales, 2 * n0, kb, &pfull[C::kWPart]);
              tma::load_2d(stage_flags + stage * kFlagStride, &map_flags, static_cast<int32_t>(step * kFlagBytes),
                           n0 / kSplitTokens, &pfull[C::kWPart]);
            }
            if (round > 0) bulk::mbar_wait(&pempty[i], (round - 1) & 1);
            bulk::mbar_arrive_expect(&pfull[i], C::kSubTileBytes);
            tma::load_2d(dst + i * C::kSubTileBytes, &map_codes, kb * C::kBlockCodeBytes + i * kCodeRowBytes, n0,
                         &pfull[i]);
          }
        }
      }
    }
  } else {
    wgmma::set_max_registers<true, C::kConsumerRegs>();
    wait_prerequisite();  // the consumers read the pass's scales and counters themselves (recompute_exact, gather_parts)
    const int wq = warp % 4, g = lane / 4, t = lane % 4;
    const uint32_t kgroup = static_cast<uint32_t>(warpgroup / 2);  // (0 with one pair)
    const int w_row = (warpgroup % 2) * 64 * C::kMSlices + wq * 16 + g;  // the stage's W row of a[0] (slice 0)
    bool reduced_before = false;
    const uint32_t buf = smem_u32(staging + warp * 32 * kEpiPitch);
    const uint32_t ring_u32 = smem_u32(ring);
    uint32_t it = 0;
    for (WorkWalk walk(s.work, blockIdx.x); walk.next(sg);) {
      const int64_t tm = sg.tm, tn = sg.tn;

      float acc[C::kAccRows][C::kSums];
      typename C::Sum d[C::kSets][C::kSums];
#pragma unroll
      for (int q = 0; q < C::kAccRows; ++q)
#pragma unroll
        for (int i = 0; i < C::kSums; ++i) acc[q][i] = 0.0f;
#pragma unroll
      for (int u = 0; u < C::kSets; ++u)
#pragma unroll
        for (int i = 0; i < C::kSums; ++i) {
          if constexpr (C::kF16) d[u][i] = 0.0f;  // never read: each block's first MMA has scale-d = 0
          else reset_magic(d[u][i]);
        }
      typename C::AReg a[C::kABufs][C::kARegs];
      float dw[C::kABufs][2];
      float4 sc[C::kUnitN / 8];
      uint32_t fold_a[2][C::kMSlices][8];
      uint32_t worst = 0;  // folded variant: the largest |d_w| met, as fp16 bits; kFoldMaxWBits + 1 for a marked A block

      for (int64_t ks = 0; ks < sg.steps; ++ks, ++it) {
        if constexpr (C::kKGroups > 1)
          if (it % C::kKGroups != kgroup) continue;
        const uint32_t stage = it % C::kStages, round = it / C::kStages;
        uint64_t* pfull = full + stage * C::kParts;
        uint64_t* pempty = empty + stage * C::kParts;
        const uint32_t st = ring_u32 + stage * C::kStageBytes;
        if constexpr (C::kFold) {
          // W and the flags first; each code sub-tile is waited for before its first block.
          bulk::mbar_wait(&pfull[C::kWPart], round & 1);
          if (*reinterpret_cast<const uint64_t*>(stage_flags + stage * kFlagStride) != 0) worst = kFoldMaxWBits + 1;
          FoldCtx<C> c{acc,        fold_a,     st + C::kCodeBytes + w_row * kWRowBytes,
                       static_cast<uint32_t>(wgmma::desc_k128_swizzled(st)),
                       t,          s.f16_magic, s.f16_bias, worst, pfull, pempty, round & 1, lane == 0};
          consume_stage_folded<C>(c);
        } else {
#pragma unroll
          for (int p = 0; p < C::kParts; ++p) bulk::mbar_wait(&pfull[p], round & 1);
          StageCtx<C> c{d,
                        acc,
                        a,
                        dw,
                        sc,
                        st + C::kCodeBytes + w_row * kWRowBytes,
                        st + C::kCodeBytes + C::kWBytes,
                        static_cast<uint32_t>(wgmma::desc_k128_swizzled(st)),
                        t,
                        s.f16_magic,
                        s.f16_bias};
          if constexpr (C::kF16) {
            consume_stage<C, true>(c);  // its rescale needs no case for non-finite scales
          } else {
            // One branch a stage, so that the hot loop's code holds one rescale.
            if (*reinterpret_cast<const uint64_t*>(stage_flags + stage * kFlagStride) == 0)
              consume_stage<C, true>(c);
            else
              consume_stage<C, false>(c);
          }
        }
        if constexpr (!C::kFold) {
          if (lane == 0) {
#pragma unroll
            for (int p = 0; p < C::kParts; ++p) bulk::mbar_arrive(&pempty[p]);
          }
        }
      }

      if constexpr (C::kKGroups > 1) {
        // Pair 1 hands its sums to pair 0 through shared memory (named
        // barriers 2: stored, 3: read), in a fixed order: the same bits
        // whichever pair finishes first. The folded tile's pair 1 hands over
        // its largest |d_w| too, so that a tile whose unsafe scale lay in
        // pair 1's stages is recomputed exactly.
        const int ct = threadIdx.x % kConsumerThreads;
        if (kgroup == 1) {
          if (reduced_before) pair_bar_sync<3, C::kConsumerThreads>();
#pragma unroll
          for (int q = 0; q < C::kAccRows; ++q)
#pragma unroll
            for (int i = 0; i < C::kSums; ++i)
              sts_f32(smem_u32(reduce + (q * C::kSums + i) * kConsumerThreads + ct), acc[q][i]);
          if constexpr (C::kFold)
            sts_f32(smem_u32(reduce + C::kAccRows * C::kSums * kConsumerThreads + ct), __uint_as_float(worst));
          pair_bar_arrive<2, C::kConsumerThreads>();
          reduced_before = true;
          continue;
        }
        pair_bar_sync<2, C::kConsumerThreads>();
#pragma unroll
        for (int q = 0; q < C::kAccRows; ++q)
#pragma unroll
          for (int i = 0; i < C::kSums; ++i)
            acc[q][i] += lds_f32(smem_u32(reduce + (q * C::kSums + i) * kConsumerThreads + ct));
        if constexpr (C::kFold)
          worst = max(worst, __float_as_uint(lds_f32(smem_u32(reduce + C::kAccRows * C::kSums * kConsumerThreads + ct))));
        pair_bar_arrive<3, C::kConsumerThreads>();
      }

      bool unsafe = false;
      if constexpr (C::kFold) unsafe = consumers_any(worst > kFoldMaxWBits);
      if (sg.shared < 0 || gather_parts<C>(s, acc, sg, ticket, C::kFold ? &unsafe : nullptr)) {
        const int64_t n0 = tn * C::BN;
        if constexpr (C::kFold) {
          if (unsafe) {
#pragma unroll
            for (int sl = 0; sl < C::kMSlices; ++sl)  // this thread's first row of the slice
              recompute_exact<C>(s, slice_acc<C>(acc, sl), tm * C::kBM + w_row + 64 * sl, n0, t);
          }
        }
        store_tile<C>(s, ep, acc, buf, tm * C::kBM + w_row - g, n0, lane);
      }
    }
    if constexpr (C::kKGroups > 1)
      if (kgroup == 1 && reduced_before) pair_bar_sync<3, C::kConsumerThreads>();  // pair 0's last read
  }
#else
  __trap();  // the registry admits this kernel on sm_90a images alone
#endif
}

template <class C>
KernelFit fit_of(int device) {
  static std::once_flag once[kMaxDevices];
  static KernelFit cache[kMaxDevices];
  return cached_fit(gemm_q4_0_wgmma_kernel<C>, C::kThreads, C::kSmemBytes, device, once, cache);
}

Status refused(const GemmArgs& g, const std::string& what) {
  return Status(StatusCode::cuda_error, std::string(g.fn) + " (cuda_wgmma): " + what + " (" + gemm_shape(g) + ")");
}

// The activations re-laid, then the GEMM on them with BN = C::BN tokens a
// tile. Where whole tiles would leave SMs idle (fewer tiles than SMs, or a
// last wave far from full), tiles are shared by K so that every SM runs
// about the same number of steps (work_split.h): the parts meet through the
// workspace, not a cluster, so how many CTAs share a tile is not bound by
// how many clusters of a size fit in a GPC at once.
template <class C>
Status run_tiles(const GemmArgs& args, const QuantizeArgs* from_float, Stream stream) {
  const cudaStream_t cs = to_cuda(stream);
  const KernelFit fit = fit_of<C>(args.device.id);
  if (fit.blocks_per_sm == 0) return refused(args, "the kernel cannot be launched on cuda:" + std::to_string(args.device.id));
  const DeviceLimits lim = device_limits(args.device.id);
  const int64_t m = args.a.rows, n = args.b.rows, k = args.a.k, nb = k / 32;

  Shape s{};
  s.m = m;
  s.n = n;
  s.nb = nb;
  s.m_contiguous = args.ldc == 1;
  const EpilogueParams ep = epilogue_params(args);
  s.unit_c = args.c_dtype != DType::i32 &&  // (validation gives this op fp32, fp16 or bf16 C)
              is_aligned(args.c, static_cast<uintptr_t>(dtype_bytes(args.c_dtype)));
  s.pair_c = s.unit_c && s.m_contiguous && is_aligned(args.c, static_cast<uintptr_t>(2 * dtype_bytes(args.c_dtype))) &&
             args.ldc_n % 2 == 0;
  s.f16_magic = 0x64006400u;
  s.f16_bias = 0x64086408u;
  const int64_t slots = static_cast<int64_t>(lim.sms) * fit.blocks_per_sm;
  s.work = plan_work((m + C::kBM - 1) / C::kBM, (n + C::BN - 1) / C::BN, nb / kBlocks, slots, C::kShareCost);
  const int64_t grid = s.work.ctas;

  // Shared tiles: tickets, stored counts and the folded variant's unsafe marks, zeroed by the re-layout pass.
  const int64_t shared = s.work.shared_tiles(), counters = 3 * shared;
  const SplitLayout lay = split_layout(n, k, C::kCodeElem, s.work.part_slots() * C::kBM * C::BN, counters);
  Workspace ws(args.device.id, static_cast<size_t>(lay.bytes), cs);
  if (!ws.ok()) {  // no scratch memory: the kernel that needs none
    if (from_float)
      if (Status st = quantize_run(*from_float, stream); !st.ok()) return st;
    return gemm_mma_run(args, stream);
  }
  uint8_t* codes = ws.bytes() + lay.codes;
  float* scales = reinterpret_cast<float*>(ws.bytes() + lay.scales);
  uint8_t* flags = ws.bytes() + lay.flags;
  s.parts = reinterpret_cast<float*>(ws.bytes() + lay.partials);
  s.tickets = reinterpret_cast<unsigned*>(ws.bytes() + lay.counters);
  s.stored = s.tickets + shared;
  s.unsafe_marks = s.stored + shared;
  const dim3 split_grid(static_cast<unsigned>(lay.flag_rows), static_cast<unsigned>(nb / kBlocks));
  s.w = static_cast<const uint8_t*>(args.a.data);
  s.w_row_stride = args.a.row_stride;
  s.act = reinterpret_cast<const uint16_t*>(codes);
  s.act_scales = scales;
  s.scale_row_floats = lay.scale_row_floats;
  s.k = k;
  const SplitDst dst{codes, C::kCodeElem, C::kFold, scales, lay.scale_row_floats, flags, lay.flag_row, s.tickets,
                     static_cast<int>(counters), k};
  if (from_float) {
    const QuantizeArgs& q = *from_float;
    const uint8_t* x = static_cast<const uint8_t*>(q.x);
    auto launch_from = [&](auto kernel, int esize, int blocks_a_cta, int threads) {
      const bool vec = is_aligned(x, 16) && (q.x_row_stride * esize) % 16 == 0;
      const dim3 grid(split_grid.x, static_cast<unsigned>(nb / blocks_a_cta));
      kernel<<<grid, threads, 0, cs>>>(x, q.x_row_stride, vec, is_aligned(x, esize), n, dst);
    };
    auto launch_blocks = [&](auto blocks_a_cta, auto threads_a_cta) {
      constexpr int PB = decltype(blocks_a_cta)::value, kThreads = decltype(threads_a_cta)::value;
      if (q.x_dtype == DType::f16) launch_from(quantize_split_kernel<DType::f16, PB, kThreads>, 2, PB, kThreads);
      else if (q.x_dtype == DType::bf16) launch_from(quantize_split_kernel<DType::bf16, PB, kThreads>, 2, PB, kThreads);
      else launch_from(quantize_split_kernel<DType::f32, PB, kThreads>, 4, PB, kThreads);
    };
    // A stage a CTA where those CTAs fill the SMs or N is small, else a
    // block a CTA (kSplitOneBlockMinN says why).
    const bool fill = int64_t{split_grid.x} * split_grid.y >= lim.sms;
    using Stage = std::integral_constant<int, kBlocks>;
    if (fill)
      launch_blocks(Stage{}, std::integral_constant<int, kQuantizeSplitThreadsShared>{});
    else if (n < kSplitOneBlockMinN)
      launch_blocks(Stage{}, std::integral_constant<int, kQuantizeSplitThreads>{});
    else
      launch_blocks(std::integral_constant<int, 1>{}, std::integral_constant<int, kQuantizeSplitThreadsOne>{});
  } else {
    split_q8_1_kernel<<<split_grid, kSplitThreads, 0, cs>>>(static_cast<const uint8_t*>(args.b.data),
                                                            args.b.row_stride, n, dst);
  }

  CUtensorMap map_w, map_codes, map_scales, map_flags;
  if (!tma::encode_rows_plain(&map_w, CU_TENSOR_MAP_DATA_TYPE_UINT8, args.a.data, m, nb * kQ4_0Bytes,
                              args.a.row_stride, kWRowBytes, C::kBM) ||
      !tma::encode_rows_k128(&map_codes, codes, n, k * C::kCodeElem, k * C::kCodeElem, C::BN) ||
      !tma::encode_rows_plain(&map_scales, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, scales, nb, lay.scale_row_floats,
                              lay.scale_row_floats * 4, 2 * C::BN, kBlocks) ||
      !tma::encode_rows_plain(&map_flags, CU_TENSOR_MAP_DATA_TYPE_UINT8, flags, lay.flag_rows, lay.flag_row,
                              lay.flag_row, kFlagBytes, 1))
    return refused(args, "the driver refused the operands' tensor maps; a driver for CUDA 12 or newer is needed");
  const bool early = n <= kEarlyLaunchMaxN;
  s.early_w_stages = early ? static_cast<uint32_t>(std::min(kEarlyWStages, C::kStages)) : 0u;
  launch_maybe_early(gemm_q4_0_wgmma_kernel<C>, dim3(static_cast<unsigned>(grid)), dim3(C::kThreads), C::kSmemBytes, cs,
                     early, map_w, map_codes, map_scales, map_flags, s, ep);
  return gemm_launch_status(args);
}

}  // namespace

bool gemm_wgmma_can_run(const GemmArgs& args, std::string* why_not) {
  const int64_t m = args.a.rows, n = args.b.rows, k = args.a.k;
  if (k <= 0 || k % 256 != 0) {
    if (why_not) *why_not = "K=" + std::to_string(k) + " is not a positive multiple of 256 (whole 8-block stages)";
    return false;
  }
  if (m < kMinM || n < kMinN) {
    if (why_not)
      *why_not = "M=" + std::to_string(m) + ", N=" + std::to_string(n) + ": needs M >= " + std::to_string(kMinM) +
                 " and N >= " + std::to_string(kMinN) + " (128-row warpgroup tiles; cuda_mma and cuda_mmvq take the rest)";
    return false;
  }
  if (m > INT32_MAX || n > INT32_MAX || k > INT32_MAX) {
    if (why_not) *why_not = "a dimension is past 2^31 (tensor-copy coordinates are 32-bit)";
    return false;
  }
  // The activations' split pass runs a CTA row per stage of K (grid.y), and
  // CUDA caps grid.y at 65535.
  if (k / 256 > kMaxSplitStages) {
    if (why_not)
      *why_not = "K=" + std::to_string(k) + " spans " + std::to_string(k / 256) + " stages of 256, past the " +
                 std::to_string(kMaxSplitStages) + " of the activations' split pass (CUDA's grid.y limit; the "
                 "kernels after it in dispatch order take any K)";
    return false;
  }
  for (const auto& [o, name] : {std::pair<const Operand&, const char*>{args.a, "W"}, {args.b, "A"}}) {
    if (!is_aligned(o.data, 16) || o.row_stride % 16 != 0) {
      if (why_not)
        *why_not = std::string(name) + " rows are not 16-byte aligned (ptr % 16 = " +
                   std::to_string(reinterpret_cast<uintptr_t>(o.data) % 16) + ", row stride = " +
                   std::to_string(o.row_stride) + "; tensor copies and 16-byte loads need both)";
      return false;
    }
  }
  return true;
}

// QG_CUDA_FOLDED=0 in the environment asks for the exact kernels: dispatch
// then passes this one over (read at every call, so that a process can
// switch; a getenv is far below a launch's cost).
bool folded_turned_off() {
  const char* v = std::getenv("QG_CUDA_FOLDED");
  return v && v[0] == '0' && v[1] == '\0';
}

namespace {
// cuda_wgmma's scope from min_n tokens; `tile` says why fewer are refused.
bool can_run_from(const GemmArgs& args, std::string* why_not, int64_t min_n, const char* tile) {
  if (!gemm_wgmma_can_run(args, why_not)) return false;
  if (args.b.rows < min_n) {
    if (why_not)
      *why_not = "N=" + std::to_string(args.b.rows) + " < " + std::to_string(min_n) + " (" + tile +
                 "; cuda_wgmma takes fewer)";
    return false;
  }
  return true;
}
}  // namespace

bool gemm_wgmma_folded_can_run(const GemmArgs& args, std::string* why_not) {
  if (folded_turned_off()) {
    if (why_not) *why_not = "QG_CUDA_FOLDED=0 in the environment asks for the exact kernels";
    return false;
  }
  return can_run_from(args, why_not, kMinNFolded, "the int8 16-token tile is faster there");
}

bool gemm_wgmma_f16_can_run(const GemmArgs& args, std::string* why_not) {
  return can_run_from(args, why_not, kMinNF16, "its one tile is 128 tokens");
}

namespace {

enum class Variant { int8, f16, folded };

// The fp16 variant has one tile; the folded one and the int8 kernel take the
// narrowest tile whose tokens cover N (up to 128), so that few tokens do
// not pay for a wide tile's zeros (the folded one's 128-token tiles by
// waves, folded_tiles.h).
template <Variant kV>
Status run_any_tile(const GemmArgs& args, const QuantizeArgs* from_float, Stream stream) {
  if (args.a.rows <= 0 || args.b.rows <= 0) return Status::success();
  if constexpr (kV == Variant::f16) {
    return run_tiles<CfgWideF16>(args, from_float, stream);
  } else if constexpr (kV == Variant::folded) {
    // 32 tokens up to N = 32, 64 up to N = 64 (four stages of 50 KB); from
    // N = 65 the 128-token tiles were faster (H200: 49.2 against 55.7 µs at N = 128,
    // 4096 x 14336; docs/architecture.md).
    if (args.b.rows <= CfgFolded32::BN) return run_tiles<CfgFolded32>(args, from_float, stream);
    if (args.b.rows <= CfgFolded64::BN) return run_tiles<CfgFolded64>(args, from_float, stream);
    // 256 or 128 rows by waves of tiles (folded_tiles.h).
    static_assert(CfgFoldedTall::kBM == kFoldedTallRows && CfgFolded::kBM == kFoldedRows &&
                      CfgFoldedTall::BN == kFoldedTokens && CfgFolded::BN == kFoldedTokens,
                  "folded_tiles.h describes these tiles");
      if (folded_tall_tile(args.a.rows, args.b.rows, args.a.k, device_limits(args.device.id).sms))
      return run_tiles<CfgFoldedTall>(args, from_float, stream);
    return run_tiles<CfgFolded>(args, from_float, stream);
  } else {
    const int64_t n = args.b.rows;
    if (n <= Cfg16::BN) return run_tiles<Cfg16>(args, from_float, stream);
    if (n <= Cfg32::BN) return run_tiles<Cfg32>(args, from_float, stream);
    if (n <= Cfg64::BN) return run_tiles<Cfg64>(args, from_float, stream);
    return run_tiles<CfgWide>(args, from_float, stream);
  }
}

}  // namespace

Status gemm_wgmma_run(const GemmArgs& args, Stream stream) {
  return run_any_tile<Variant::int8>(args, nullptr, stream);
}

Status gemm_wgmma_run_quantizing(const GemmArgs& args, const QuantizeArgs& from_float, Stream stream) {
  return run_any_tile<Variant::int8>(args, &from_float, stream);
}

Status gemm_wgmma_f16_run(const GemmArgs& args, Stream stream) {
  return run_any_tile<Variant::f16>(args, nullptr, stream);
}

Status gemm_wgmma_f16_run_quantizing(const GemmArgs& args, const QuantizeArgs& from_float, Stream stream) {
  return run_any_tile<Variant::f16>(args, &from_float, stream);
}

Status gemm_wgmma_folded_run(const GemmArgs& args, Stream stream) {
  return run_any_tile<Variant::folded>(args, nullptr, stream);
}

Status gemm_wgmma_folded_run_quantizing(const GemmArgs& args, const QuantizeArgs& from_float, Stream stream) {
  return run_any_tile<Variant::folded>(args, &from_float, stream);
}

}  // namespace qg::detail::cuda
