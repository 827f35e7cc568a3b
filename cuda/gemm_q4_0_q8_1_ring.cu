// SPDX-License-Identifier: MIT
// cuda/gemm_q4_0_q8_1_ring.cu: Q4_0 x Q8_1 decode at N = 1..6 on sm_90, W
// streamed through a ring of shared-memory stages by cp.async, one ring a
// warp, the activations in shared memory, and DP4A on them.
//
// Measured on an H200 (docs/architecture.md, "The ring GEMV"): at 4096 x
// 14336, cold, 13.3-13.4 us at N = 1 against cuda_mmvq's 17.0 (the read
// floor, a kernel that only reads the 33 MB, 12.2), 13.8-16.1 at N = 2..4
// against 18.1-21.7, 18.0-18.9 at N = 5..6 against 23.0-24.6; linear_q4_0
// in a CUDA graph 8.0 us at N = 1. Which geometry (2 to 4 stages of 64
// blocks, 8 or 16 warps of 2 rows a CTA), why the activations sit in shared
// memory and where N = 3..6 run: the same section.
//
// Why not cuda_mmvq's way. The GEMV loads W into registers, a lane two
// 144-byte chunks (one of each of its two rows) at a time, and at 4096 x
// 14336 a lane owns only two such loads: it requests one, waits the full
// DRAM latency, computes, requests the next and waits again. Nsight Compute
// showed issue slots 17 % busy and 27.6 cycles between a warp's instructions
// (docs/architecture.md), and with W in L2 it was barely faster than cold.
// Here the loads go to shared memory (LDGSTS), so they hold no registers
// and a warp keeps kStages - 1 stages of its rows requested while it
// computes one: the memory pipe never waits on the arithmetic.
//
// Why a ring a warp. A warp copies exactly the bytes it later reads (its
// own two rows), so a stage needs no CTA barrier: cp.async.wait_group makes
// a lane's own copies visible to it, and __syncwarp the other lanes'. The
// CTA is only a container of kWarps independent rings.
//
// A stage is 64 blocks (2048 values of K, 1152 bytes a row: 72 16-byte
// pieces, so a warp's copy instruction moves 512 contiguous bytes, four
// lines). Lane l takes the block pair 2l, 2l + 1 of both rows: 36 bytes,
// 9 whole words at word 9l of the row (9 is odd, so the 32 lanes' word loads
// fall in 32 banks); block 2l starts on a word, block 2l + 1 in the middle
// of one (q4_0_dp4a.cuh's unpack_block<0> and <1>). Each activation word a
// lane loads serves both rows.
//
// Activations: the CTA copies A's kCols rows, all of K, into shared memory
// once (cp.async, every thread), after the first stages of W are requested;
// a lane then reads its two blocks of each column, 72 bytes, by nine 8-byte
// shared loads, which fall in 32 banks a half-warp (the lanes' pairs are 18
// words apart). Read from global memory instead (L1/L2), those 72 bytes a
// lane are a warp instruction over 18 lines, nine of them a column and
// stage: from N = 2 they cost more than the ring saved (docs/architecture.md,
// "The ring GEMV"). Where N x K is too large to sit beside a ring of two
// stages, can_run refuses and cuda_mmvq runs.
//
// Where M has more row pairs than one wave of CTAs has warps (N = 1..2;
// can_run refuses N >= 3 there), each warp runs all of its pairs through
// one ring (the kChained instances): steps (pair, stage) in turn, the next
// pair's first stages requested while the current pair's last ones are
// computed. Within one wave a warp has at most one pair and the ring starts
// once. At 14336 x 4096 (3.4 pairs a warp) the chained form took the cold
// GEMM at N = 1 from 78 to 84-85 % of the read floor (docs/architecture.md,
// "The activations in shared memory"). Where K spans two stages and the
// chains are short, the chained form runs three CTAs an SM with rings of
// three stages (three_ctas_chained): linear_q4_0 at 14336 x 4096 N = 1 in
// a CUDA graph 9.1 us against 9.6-9.8 on two.
//
// linear_q4_0 (run_quantizing): the quantizer runs first and lets this
// kernel start early (grid_dependency.cuh); the first kStages - 1 steps of
// W (stages of one pair or, chained, of several), the caller's bytes, are
// requested before the wait for its output. That is right because the
// quantizer does not write W and lets this kernel launch only once it has
// itself waited for everything before it on the stream. After its wait this
// kernel lets the next one (the next call's quantizer) launch.
//
// Reduction: each lane sums its pairs over K in order; the warp adds its 32
// lanes by a fixed butterfly, so results are deterministic. Rows past M are
// read from row M - 1 and never stored.
#include <algorithm>
#include <string>
#include <type_traits>

#include "cp_async.cuh"
#include "device_limits.cuh"
#include "gemm_q4_0_q8_1.cuh"
#include "grid_dependency.cuh"
#include "q4_0_dp4a.cuh"
#include "quantize.cuh"
#include "warp_rows.cuh"

namespace qg::detail::cuda {
namespace {

constexpr int kRows = 2;                                   // W rows a warp streams
constexpr int kStageBlocks = 64;                           // a block pair a lane
constexpr int kStageRowBytes = kStageBlocks * kQ4_0Bytes;  // 1152
constexpr int kSlotBytes = kRows * kStageRowBytes;         // 2304
constexpr int kMaxStages = 4;                              // ring slots of a warp, at most
// N it takes, the widths built and measured (N = 3..6 only in one wave of
// CTAs: can_run). On sm_90 cuda_gemv_mma (int8 mma.sync) runs N = 4..8 first
// where it takes them, and N = 3 past one wave of its 32-row groups or
// where M is at most 16 rows an SM; the ring's DP4As grow with every column.
constexpr int kMaxCols = 6;
// Past one wave of CTAs (M > 4224 on an H200) the ring runs N = 1..2 only
// (can_run), in its chained form (gemm_ring_kernel's kChained).
constexpr int kMaxChainedCols = 2;
// Rings (warps) a CTA: 8, two CTAs an SM, or 16, one CTA an SM that holds
// the activations once (pick_warps); the chained form at short K also runs
// three CTAs of 8 (three_ctas_chained). Shared memory a CTA: sm_90 has 228
// KB an SM and reserves 1 KB a CTA. The rings (kStages x 2304 bytes a warp,
// 72 KB for 8 warps at four stages) and the activations (N x K / 32 x 36
// bytes) share half of it with two CTAs of 8 warps, a third with three,
// all a CTA may take with 16.
constexpr int kTwoCtaSmemBytes = (228 * 1024 - 2 * 1024) / 2;
constexpr int kThreeCtaSmemBytes = (228 * 1024 - 3 * 1024) / 3;
constexpr int kOneCtaSmemBytes = 227 * 1024;  // sm_90's most a CTA may take
__host__ __device__ constexpr int ring_bytes(int stages, int warps) { return warps * stages * kSlotBytes; }
// CTAs of `warps` rings an SM: two of 8, one of 16, or three of 8 (the
// chained form at short K: with_instance).
constexpr int default_ctas(int warps) { return 16 / warps; }
constexpr int smem_budget(int warps, int ctas) {
  return warps == 16 ? kOneCtaSmemBytes : (ctas == 3 ? kThreeCtaSmemBytes : kTwoCtaSmemBytes);
}
static_assert(kStageRowBytes % 16 == 0, "a stage's row bytes must be whole 16-byte pieces");
static_assert(ring_bytes(kMaxStages, 8) % 16 == 0, "the activations start 16-byte aligned");

struct Params {
  const uint8_t* w;
  const uint8_t* x;
  int64_t m, nb, ldw, ldx;
  uint32_t k80;  // kCodeBias, from a register
  bool x16;      // A's rows 16-byte aligned: 16-byte copies into shared memory, else 4-byte ones
};

// Activation bytes in shared memory: kCols rows of nb whole Q8_1 blocks.
int64_t activation_bytes(int64_t n, int64_t nb) { return n * nb * kQ8_1Bytes; }

// The deepest ring (kMaxStages down to 2) beside N x K's activations in a
// CTA of `warps` rings; 0 if even two stages do not fit.
int stages_for(int64_t n, int64_t nb, int warps, int ctas) {
  for (int s = kMaxStages; s >= 2; --s)
    if (ring_bytes(s, warps) + activation_bytes(n, nb) <= smem_budget(warps, ctas)) return s;
  return 0;
}
int stages_for(int64_t n, int64_t nb, int warps) { return stages_for(n, nb, warps, default_ctas(warps)); }

// Where a lane's pieces of the two rows of a pair start (rows past M are
// read from row M - 1): formed once a pair, so that a stage's copies need
// only 32-bit offsets.
struct RowSrc {
  const uint8_t* w[kRows];
};
__device__ __forceinline__ RowSrc row_src(const Params& p, int64_t r0, int lane) {
  RowSrc src;
#pragma unroll
  for (int r = 0; r < kRows; ++r) src.w[r] = p.w + min64(r0 + r, p.m - 1) * p.ldw + 16 * lane;
  return src;
}

// Block t (0, 1) of a lane's pair of A blocks of one column, the pair 72
// bytes at p in shared memory, 8-byte aligned: d_a and the 32 codes.
__device__ __forceinline__ void load_a_pair(const uint8_t* p, int t, q4dp4a::ABlock& a) {
  uint32_t w[9];
  const uint8_t* q = p + 36 * t;  // block t of the pair: 4-byte aligned, 8-byte for t = 0
  if (t == 0) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const uint2 v = reinterpret_cast<const uint2*>(q)[i];
      w[2 * i] = v.x, w[2 * i + 1] = v.y;
    }
    w[8] = reinterpret_cast<const uint32_t*>(q)[8];
  } else {
    w[0] = reinterpret_cast<const uint32_t*>(q)[0];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const uint2 v = reinterpret_cast<const uint2*>(q + 4)[i];
      w[1 + 2 * i] = v.x, w[2 + 2 * i] = v.y;
    }
  }
  a.d = half_bits_to_float(w[0] & 0xFFFFu);
#pragma unroll
  for (int k = 0; k < 8; ++k) a.q[k] = static_cast<int>(w[1 + k]);
}

// A's kCols rows, all of K, into shared memory at `dst` (row j at j * nb *
// 36): every thread of the CTA issues 16-byte copies (4-byte ones where A's
// rows are not 16-byte aligned) in one commit group.
template <int kCols>
__device__ __forceinline__ void copy_activations(const Params& p, uint8_t* dst) {
  const int64_t row_bytes = p.nb * kQ8_1Bytes;
  const uint32_t base = smem_u32(dst);
  if (p.x16) {
    const int64_t pieces = row_bytes / 16;  // nb % 8 == 0
    for (int64_t i = threadIdx.x; i < kCols * pieces; i += blockDim.x) {
      const int64_t j = i / pieces, q = i % pieces;
      cp_async<16>(base + static_cast<uint32_t>(j * row_bytes + 16 * q), p.x + j * p.ldx + 16 * q, 16);
    }
  } else {
    const int64_t words = row_bytes / 4;
    for (int64_t i = threadIdx.x; i < kCols * words; i += blockDim.x) {
      const int64_t j = i / words, q = i % words;
      cp_async<4>(base + static_cast<uint32_t>(j * row_bytes + 4 * q), p.x + j * p.ldx + 4 * q, 4);
    }
  }
  cp_async_commit();
}

// kChained: the form for more row pairs than one wave of CTAs has warps
// (N <= kMaxChainedCols), in which a warp runs all of its pairs through one
// ring (below). Measured on an H200 at 14336 x 4096 (3.4 pairs a warp,
// docs/architecture.md): 5-9 % faster cold at N = 1..2, 1-5 % slower with W
// in L2.
//
// Registers: __launch_bounds__ allows 128 a thread with two CTAs of 8 warps
// or one of 16, 85 with three (kCtas); ptxas takes 56-63 at N = 1 and
// 63-108 at N = 2..6 (chained: 79-80 at N = 1, 87-90 at N = 2; on three
// CTAs 72 and 71; the activation words are loaded from shared memory just
// before their DP4As, not held a stage ahead), and shared memory is sized
// for 16 warps an SM (two CTAs of 8, one of 16) or 24 (three of 8). Before
// the activations moved into shared memory (global loads, 83 registers at
// N = 1), three CTAs of 8 warps an SM (three stages) had been level to 4 %
// faster cold but 17 % slower in linear_q4_0's CUDA graph at 4096 x 14336
// (docs/architecture.md, the geometry table); since 2026-12-02 the chained
// form runs three where K spans two stages and its chains are short.
template <int kCols, int kStages, int kWarps, bool kChained, int kCtas = default_ctas(kWarps)>
__global__ void __launch_bounds__(32 * kWarps, kCtas) gemm_ring_kernel(Params p, EpilogueParams ep) {
  extern __shared__ __align__(16) uint8_t smem[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  // Persistent CTAs: the warp's row pairs start at row0, row0 + pairs_step,
  // ... (at most one where the grid covers M in one wave, the only case
  // the unchained form is launched for), against the activations copied
  // once.
  const int64_t pairs_step = static_cast<int64_t>(gridDim.x) * kWarps * kRows;
  int64_t row0 = (static_cast<int64_t>(blockIdx.x) * kWarps + warp) * kRows;
  uint8_t* ring = smem + warp * (kStages * kSlotBytes);
  uint8_t* act = smem + ring_bytes(kStages, kWarps);  // A's kCols rows
  const int nb = static_cast<int>(p.nb);  // a few thousand at most: the activations fit in shared memory
  const int stages = (nb + kStageBlocks - 1) / kStageBlocks;

  // Stage s of the pair whose rows' lane pieces start at `src` into ring
  // slot `at`: lane l copies pieces l, l + 32, l + 64 of each row (the third
  // for lanes 0..7 of a whole stage's 72). Offsets inside a row are 32-bit
  // and the 64-bit row addresses are formed once a pair (row_src); whole
  // stages, all but a row's last where K is not a multiple of 2048, take
  // no test a piece but the third's.
  auto issue_at = [&](const RowSrc& src, int s, int at) {
    const int b0 = s * kStageBlocks;
    const int off = b0 * kQ4_0Bytes;
    const uint32_t slot = smem_u32(ring + at * kSlotBytes) + 16 * lane;
    if (b0 + kStageBlocks <= nb) {
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        cp_async<16>(slot + r * kStageRowBytes, src.w[r] + off, 16);
        cp_async<16>(slot + r * kStageRowBytes + 512, src.w[r] + off + 512, 16);
        if (lane < kStageRowBytes / 16 - 64) cp_async<16>(slot + r * kStageRowBytes + 1024, src.w[r] + off + 1024, 16);
      }
    } else {
      const int pieces = (nb - b0) * kQ4_0Bytes / 16;  // nb % 8 == 0
#pragma unroll
      for (int r = 0; r < kRows; ++r)
#pragma unroll
        for (int i = 0; i < 3; ++i)
          if (lane + 32 * i < pieces) cp_async<16>(slot + r * kStageRowBytes + 512 * i, src.w[r] + off + 512 * i, 16);
    }
  };
  // Stage s of a pair, from ring slot `at`, into acc.
  auto compute = [&](float (&acc)[kRows][kCols], int s, int at) {
    const int b = s * kStageBlocks + 2 * lane;
    if (b >= nb) return;  // the row's last stage can be short
    const uint8_t* slot = ring + at * kSlotBytes;
    const uint8_t* a_pair = act + b * kQ8_1Bytes;
    auto pair_block = [&](auto tc) {
      constexpr int t = decltype(tc)::value;
      float dw[kRows];
      uint32_t v[kRows][4];
#pragma unroll
      for (int r = 0; r < kRows; ++r)
        q4dp4a::unpack_block<t>(reinterpret_cast<const uint32_t*>(slot + r * kStageRowBytes) + 9 * lane, dw[r], v[r]);
      q4dp4a::dot_block<kRows, kCols>(acc, dw, v, p.k80, [&](int j) {
        q4dp4a::ABlock a;
        load_a_pair(a_pair + j * nb * kQ8_1Bytes, t, a);
        return a;
      });
    };
    pair_block(std::integral_constant<int, 0>{});
    pair_block(std::integral_constant<int, 1>{});
  };
  // The warp's 32 partial sums of each output of rows r0, r0 + 1 added and
  // stored (warp_rows.cuh); acc is zeroed for the next pair.
  auto finish_pair = [&](float (&acc)[kRows][kCols], int64_t r0) { warp_sum_store(acc, lane, r0, p.m, ep); };
  float acc[kRows][kCols];
  zero_rows(acc);

  if constexpr (kChained) {
    // Several pairs a warp: one ring through all of them. Step i is stage
    // i % stages of the warp's pair i / stages, in slot i % kStages; the
    // next pair's first stages are requested while the current pair's last
    // ones are computed, so the ring never drains between pairs.
    const int64_t my_pairs = row0 < p.m ? (p.m - 1 - row0) / pairs_step + 1 : 0;
    const int64_t steps = my_pairs * stages;
    int64_t issue_row0 = row0, issued = 0;
    int issue_s = 0, issue_slot = 0;
    RowSrc src = row_src(p, issue_row0, lane);
    auto issue_next = [&] {
      if (issued < steps) {
        issue_at(src, issue_s, issue_slot);
        if (++issue_s == stages) {
          issue_s = 0, issue_row0 += pairs_step;
          src = row_src(p, issue_row0, lane);
        }
      }
      ++issued;
      issue_slot = issue_slot + 1 == kStages ? 0 : issue_slot + 1;
      cp_async_commit();  // empty groups too: step i is always the i-th W group
    };
#pragma unroll
    for (int k = 0; k < kStages - 1; ++k) issue_next();
    wait_prerequisite();  // A may be the previous kernel's output (linear_q4_0's quantizer)
    launch_dependents();  // the next call's quantizer may launch: it waits for this grid
    copy_activations<kCols>(p, act);
    cp_async_wait<0>();  // the activations (and the first steps, requested before them)
    __syncthreads();     // every thread's copies of the activations; no CTA barrier below
    int s = 0, slot = 0;
    for (int64_t i = 0; i < steps; ++i) {
      __syncwarp();  // every lane has read the slot that step i + kStages - 1 refills
      issue_next();
      cp_async_wait<kStages - 1>();  // this lane's copies of step i
      __syncwarp();                  // and every other lane's
      compute(acc, s, slot);
      slot = slot + 1 == kStages ? 0 : slot + 1;
      if (++s == stages) {
        finish_pair(acc, row0);
        s = 0, row0 += pairs_step;
      }
    }
  } else {
    // One ring a pair: its first kStages - 1 stages, one commit group a
    // stage, empty ones too, so that stage s is always the pair's group s
    // and the wait below is one constant. The first pair's go before the
    // wait for A. (launch gives this form one pair a warp at most; the loop
    // over pairs below is kept general.)
    RowSrc src = row_src(p, row0, lane);
    auto issue = [&](int s) { issue_at(src, s, s % kStages); };
    auto prologue = [&] {
#pragma unroll
      for (int s = 0; s < kStages - 1; ++s) {
        if (row0 < p.m && s < stages) issue(s);
        cp_async_commit();
      }
    };
    prologue();
    wait_prerequisite();  // A may be the previous kernel's output (linear_q4_0's quantizer)
    launch_dependents();  // the next call's quantizer may launch: it waits for this grid
    copy_activations<kCols>(p, act);
    cp_async_wait<0>();  // the activations (and the first stages, requested before them)
    __syncthreads();     // every thread's copies of the activations; no CTA barrier below

    for (bool first = true; row0 < p.m; row0 += pairs_step, first = false) {
      if (!first) {
        __syncwarp();  // every lane has read the last pair's slots before the prologue refills them
        src = row_src(p, row0, lane);
        prologue();
      }
      for (int s = 0; s < stages; ++s) {
        __syncwarp();  // every lane has read the slot that stage s + kStages - 1 refills
        if (s + kStages - 1 < stages) issue(s + kStages - 1);
        cp_async_commit();
        cp_async_wait<kStages - 1>();  // this lane's copies of stage s
        __syncwarp();                  // and every other lane's
        compute(acc, s, s % kStages);
      }
      finish_pair(acc, row0);
    }
  }
}

// Resident CTAs per SM of one instance (device_limits.cuh), with the
// largest shared memory any call gives it (smem_budget): -1 without
// sm_90 code, 0 where the device cannot hold a CTA. The instructions are
// sm_80's (cp.async), but the early launch behind the quantizer needs
// griddepcontrol.wait, which an image for an older target compiles to
// nothing: there the GEMV could read the activations before they are
// written.
template <int kCols, int kStages, int kWarps, bool kChained, int kCtas = default_ctas(kWarps)>
int resident_ctas(int device) {
  return resident_ctas_of<gemm_ring_kernel<kCols, kStages, kWarps, kChained, kCtas>>(device, 32 * kWarps,
                                                                                     smem_budget(kWarps, kCtas), 90);
}

// Rings a CTA for N columns: 8 (two CTAs an SM) up to N = 4, 16 (one CTA an
// SM) from N = 5, where two CTAs' copies of K = 14336's activations leave
// no room for a ring. Measured on an H200 (docs/architecture.md, "The
// activations in shared memory, N = 1..6"): at N = 5..6 16 warps were
// 14-20 % faster than cuda_mmvq; at N = 3..4 they were 4-8 % faster than 8
// warps in a CUDA graph but 3-5 % slower cold, at N = 1..2 level or slower.
constexpr int pick_warps(int64_t n) { return n <= 4 ? 8 : 16; }

// The chained form with three CTAs of 8 warps an SM, each a ring of three
// stages (24 warps an SM instead of 16, each with one stage less in
// flight), where K spans two stages (2048 < K <= 4096) and two CTAs an SM
// would give each warp at most kThreeCtaMaxPairs row pairs. Measured on an
// H200 (docs/architecture.md, "Three CTAs an SM for the chained ring"),
// three against two, µs, linear_q4_0 in a CUDA graph at N = 1: 9.1-9.2 /
// 9.6-9.8 at 14336 x 4096 (3.4 pairs a warp at two), 8.2 / 8.3-8.4 at
// 12288 x 4096, 8.1-8.3 / 8.2 at 11008 x 4096; but slower at 22016 and 28672 x 4096 (5.2
// and 6.8 pairs a warp: a long chain keeps a ring of four busy), at K = 2048
// (one stage a pair) and at K = 14336 (three stages of seven in flight).
constexpr int64_t kThreeCtaMaxPairs = 4;
bool three_ctas_chained(const GemmArgs& g) {
  const int64_t nb = g.a.k / 32;
  if ((nb + kStageBlocks - 1) / kStageBlocks != 2 || stages_for(g.b.rows, nb, 8, 3) < 3) return false;
  const int64_t two_cta_warps = 2 * static_cast<int64_t>(device_limits(g.device.id).sms) * 8;
  return (g.a.rows + kRows - 1) / kRows <= kThreeCtaMaxPairs * two_cta_warps;
}

// f(kernel, per_sm, stages, warps) for the instance that runs `g` (N =
// 1..kMaxCols, the deepest ring that fits beside its activations; `chained`:
// the form whose warps run several row pairs through one ring, built for
// N <= kMaxChainedCols, where M may exceed one wave of CTAs);
// f(nullptr, -1, 0, warps) where none does.
template <class F>
decltype(auto) with_instance(const GemmArgs& g, bool chained, F&& f) {
  const int warps = pick_warps(g.b.rows);
  const int stages = stages_for(g.b.rows, g.a.k / 32, warps);
  auto by_warps = [&](auto cols, auto w, auto ch) -> decltype(auto) {
    constexpr int kCols = decltype(cols)::value, kW = decltype(w)::value;
    constexpr bool kCh = decltype(ch)::value;
    switch (stages) {
      case 4: return f(gemm_ring_kernel<kCols, 4, kW, kCh>, resident_ctas<kCols, 4, kW, kCh>(g.device.id), 4, kW);
      case 3: return f(gemm_ring_kernel<kCols, 3, kW, kCh>, resident_ctas<kCols, 3, kW, kCh>(g.device.id), 3, kW);
      case 2: return f(gemm_ring_kernel<kCols, 2, kW, kCh>, resident_ctas<kCols, 2, kW, kCh>(g.device.id), 2, kW);
      default: return f(decltype(&gemm_ring_kernel<kCols, 4, kW, kCh>){nullptr}, -1, 0, kW);
    }
  };
  auto by_cols = [&](auto cols) -> decltype(auto) {
    constexpr int kCols = decltype(cols)::value;
    if constexpr (kCols <= kMaxChainedCols) {
      static_assert(pick_warps(kMaxChainedCols) == 8, "the chained instances have 8 warps, as pick_warps gives");
      if (chained && three_ctas_chained(g)) {
        const int per_sm = resident_ctas<kCols, 3, 8, true, 3>(g.device.id);
        if (per_sm >= 3) return f(gemm_ring_kernel<kCols, 3, 8, true, 3>, per_sm, 3, 8);
      }
      if (chained) return by_warps(cols, std::integral_constant<int, 8>{}, std::true_type{});
    }
    if (warps == 16) return by_warps(cols, std::integral_constant<int, 16>{}, std::false_type{});
    return by_warps(cols, std::integral_constant<int, 8>{}, std::false_type{});
  };
  switch (g.b.rows) {
    case 1: return by_cols(std::integral_constant<int, 1>{});
    case 2: return by_cols(std::integral_constant<int, 2>{});
    case 3: return by_cols(std::integral_constant<int, 3>{});
    case 4: return by_cols(std::integral_constant<int, 4>{});
    case 5: return by_cols(std::integral_constant<int, 5>{});
    default: return by_cols(std::integral_constant<int, 6>{});
  }
}

// CTAs of `warps` rings that cover M's row pairs once, against one wave.
int64_t ctas_for_m(const GemmArgs& g, int warps) { return (g.a.rows + warps * kRows - 1) / (warps * kRows); }

Status launch(const GemmArgs& args, Stream stream, bool early) {
  if (args.a.rows <= 0 || args.b.rows <= 0) return Status::success();
  const int64_t nb = args.a.k / 32;
  const Params p{static_cast<const uint8_t*>(args.a.data),
                 static_cast<const uint8_t*>(args.b.data),
                 args.a.rows,
                 nb,
                 args.a.row_stride,
                 args.b.row_stride,
                 kCodeBias,
                 is_aligned(args.b.data, 16) && (args.b.rows == 1 || args.b.row_stride % 16 == 0)};
  // More row pairs than one wave of CTAs has warps: the chained form.
  const int per_sm_plain = with_instance(args, false, [](auto, int n, int, int) { return n; });
  const bool chained = args.b.rows <= kMaxChainedCols && per_sm_plain > 0 &&
                       ctas_for_m(args, pick_warps(args.b.rows)) >
                           static_cast<int64_t>(per_sm_plain) * device_limits(args.device.id).sms;
  return with_instance(args, chained, [&](auto kernel, int per_sm, int stages, int warps) {
    std::string why;
    if (!ctas_fit(per_sm, args.device.id, "sm_90", &why))
      return Status(StatusCode::cuda_error, std::string(args.fn) + " (cuda_gemv_ring): " + why + " (" +
                                                gemm_shape(args) + "); qg.explain shows the kernels that can run it");
    // Persistent CTAs: one wave at most, each warp taking its row pairs in
    // turn (and the CTA's activations copied once).
    const int64_t grid = std::min<int64_t>(ctas_for_m(args, warps),
                                           static_cast<int64_t>(per_sm) * device_limits(args.device.id).sms);
    const int64_t smem = ring_bytes(stages, warps) + activation_bytes(args.b.rows, nb);
    launch_maybe_early(kernel, dim3(static_cast<unsigned>(grid)), dim3(32 * warps), static_cast<size_t>(smem),
                       to_cuda(stream), early, p, epilogue_params(args));
    return gemm_launch_status(args);
  });
}

}  // namespace

bool gemm_ring_can_run(const GemmArgs& args, std::string* why_not) {
  auto no = [&](std::string why) {
    if (why_not) *why_not = std::move(why);
    return false;
  };
  if (args.b.rows < 1) return no("N=" + std::to_string(args.b.rows) + ": nothing to compute");
  if (args.b.rows > kMaxCols)
    return no("N=" + std::to_string(args.b.rows) + " > " + std::to_string(kMaxCols) +
              " (cuda_gemv_mma, cuda_gemv_bulk and cuda_wgmma take more columns)");
  if (args.a.k % 256 != 0 || args.a.k == 0)
    return no("K=" + std::to_string(args.a.k) +
              " is not a positive multiple of 256 (stages are whole 16-byte pieces of W)");
  // cp.async.cg moves 16-byte pieces between 16-byte-aligned addresses.
  if (!w_rows_16_byte_aligned(args, why_not)) return false;
  if (!gemm_operands_aligned(args, why_not)) return false;  // A's 32-bit loads
  if (stages_for(args.b.rows, args.a.k / 32, pick_warps(args.b.rows)) == 0)
    return no("N=" + std::to_string(args.b.rows) + " x K=" + std::to_string(args.a.k) + " activations (" +
              std::to_string(activation_bytes(args.b.rows, args.a.k / 32)) +
              " bytes) do not fit in shared memory beside a ring of two stages");
  const int per_sm = with_instance(args, false, [](auto, int n, int, int) { return n; });
  if (!ctas_fit(per_sm, args.device.id, "sm_90", why_not)) return false;
  // From N = 3 the ring only where one wave of CTAs covers M: where warps
  // took several row pairs (each starting its ring again) it was slower than
  // cuda_mmvq hot at N = 3..4 (docs/architecture.md, "The ring GEMV"); the
  // chained form, which does not restart the ring, is built for N <= 2 only.
  const int64_t ctas = ctas_for_m(args, pick_warps(args.b.rows));
  const int64_t wave = static_cast<int64_t>(per_sm) * device_limits(args.device.id).sms;
  if (args.b.rows <= kMaxChainedCols && ctas > wave) {  // launch takes the chained form
    const int per_sm_chained = with_instance(args, true, [](auto, int n, int, int) { return n; });
    if (!ctas_fit(per_sm_chained, args.device.id, "sm_90", why_not)) return false;
  }
  if (args.b.rows >= 3 && ctas > wave)
    return no("N=" + std::to_string(args.b.rows) + " with M=" + std::to_string(args.a.rows) + " needs " +
              std::to_string(ctas) + " CTAs, more than one wave (" + std::to_string(wave) +
              "): measured slower than cuda_mmvq there from N = 3");
  return true;
}

Status gemm_ring_run(const GemmArgs& args, Stream stream) { return launch(args, stream, false); }

// linear_q4_0: the quantizer, then this kernel launched early behind it
// (header).
Status gemm_ring_run_quantizing(const GemmArgs& args, const QuantizeArgs& from_float, Stream stream) {
  if (Status s = quantize_run(from_float, stream); !s.ok()) return s;
  return launch(args, stream, true);
}

}  // namespace qg::detail::cuda
