// SPDX-License-Identifier: MIT
// cuda/gemm_wo_gemv_bulk.cu: weight-only GEMV for decode on sm_90, N = 2..16:
// i4 weights with group scales (group >= 128; optional zero points) x f16 /
// bf16 activations, W streamed by the bulk copy engine, tensor cores.
// cuda_wo_gemv_mma (gemm_wo_gemv_mma.cu) runs ahead of it where it can
// (K % 256 == 0; 14-33 % less time at 4096 x 14336 and 14336 x 4096 on an
// H200): this kernel keeps the rest (K % 256 == 128, GPUs past sm_90).
//
//   C[m, n] = sum_g s[m, g] * sum_{k in g} (q[m, k] - z[m, g]) * x[n, k]
//
// What it fixes. cuda_wo_gemv_small (FFMAs) spent ~3.4 instructions per
// code (before its split LOP3 was joined) and was issue-bound;
// cuda_wo_gemv (mma) fills a per-warp cp.async ring with 16-byte copies and
// reads it back 4 bytes at a time, 80 KB of shared memory per CTA, and is
// latency-bound. Here one bulk copy per row and stage
// moves 2 KB of a row (4096 values of K) into shared memory, three stages
// deep (2 CTAs x 3 x 33 KB per SM requested ahead), and each lane reads its
// share of W with eight 32-bit shared loads per 128 values of K. Measured
// (docs/architecture.md, which lists what was tried): faster than
// cuda_wo_gemv at every N, slower than cuda_wo_gemv_small at N = 1 (which
// therefore keeps N = 1) and level or faster at N = 2; what held it back
// longest was a scale conversion beside its load (below, StageScales).
//
// Fragment order. A 128-value "macro step" of a row is 64 bytes, 16 words;
// lane (g, t) of a quad takes words t, t + 4, t + 8, t + 12 of rows g and
// g + 8 (32 codes each). The mma m16n8k16 step (i, h), i = 0..3 (word
// 4i + t), h = 0..1, takes from lane t the nibble pairs (2h, 2h + 4) and
// (2h + 1, 2h + 5) of that word: K slots 2t, 2t + 1, 2t + 8, 2t + 9 hold
// K = 8(4i + t) + {2h, 2h + 4, 2h + 1, 2h + 5}. Any permutation of K applied
// to both operands leaves the dot product unchanged; the activations of
// lane (g', t') (column g' of the n8 tile) are the same K, one 16-byte load
// of x[8(4i + t') ..] and two PRMTs per step. Words rather than 16 bytes a
// lane so that the four lanes of a quad read 64 contiguous bytes of x per
// load (with 16-byte pieces 64 bytes apart, each load touched twice the
// sectors, and the activation loads were the kernel's largest stall). A
// step thus mixes the 4 segments (32 values) of one macro step, which lie
// in one group when groups are 128 or more: so the group scale is
// still applied once per macro step in fp32 after exact mma sums, as in
// cuda_wo_gemv (wo_mma.cuh has the shared unpacking, exact in fp16 and bf16:
// one shift, one LOP3 and one HSUB2 per pair of codes). Zero points: D - z S,
// with S = sum x from one more mma against an all-ones A fragment.
//
// Work split: a row group is two m16 tiles up to N = 8, one above
// (RowGroup below); a CTA (8 compute warps, plus a producer warp with two
// tiles) owns groups blockIdx.x, + gridDim.x, ... and streams them as one
// sequence of stages (32 or 16 rows x 32 macro steps), so the pipeline runs
// on across groups. Warp w takes macro steps
// 4w .. 4w + 3 of each stage. Shared rows are 2064 bytes (516
// words, 4 mod 32) apart: a warp's 32-bit loads (rows g = 0..7, words
// 4i + t) hit 32 different banks. The warps' partial tiles are added in
// shared memory in warp order: deterministic. Rows past M are read from row
// M - 1 and never stored; columns past N read column N - 1.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <type_traits>

#include "bulk_copy.cuh"
#include "device_limits.cuh"
#include "gemm_int_fast.cuh"
#include "wo_mma.cuh"
#include "wo_params.cuh"

namespace qg::detail::cuda {
namespace {

using namespace intfast;
using namespace wo;

constexpr int kWarps = 8;
constexpr int kComputeThreads = 32 * kWarps;  // the eight warps that do the arithmetic
constexpr int kTileRows = 16;                              // one m16 tile
constexpr int kMacroK = 128;                               // values of K per macro step
constexpr int kMacroBytes = kMacroK / 2;                   // 64
constexpr int kPerWarp = 4;                                // macro steps of a warp per stage
constexpr int kStageMacros = kPerWarp * kWarps;            // 32: 4096 values of K per stage
constexpr int kStageRowBytes = kStageMacros * kMacroBytes; // 2048
constexpr int kPitch = kStageRowBytes + 16;                // 2064 bytes = 516 words: 516 = 4 mod 32
constexpr int kStages = 3;
constexpr int kMaxCols = 16;
constexpr int kXQ = 3;  // macro steps of activations a warp holds in flight (two row tiles)
constexpr int kMinGroup = kMacroK;

// A row group is kRT m16 tiles, the rows a CTA streams as one sequence of
// stages. With two tiles (one CTA an SM, the same 198 KB of W in flight per
// SM) each activation load serves twice the rows, and the registers left
// over hold a queue of kXQ macro steps' activations per warp (below), so a
// warp no longer waits on L2 at every macro step: Nsight Compute had shown
// that wait, long scoreboard on the activations, as the one-tile kernel's
// largest stall (36 % of samples at N = 8). Measured (H200, cold,
// docs/architecture.md): 2-4 % faster than one tile at N = 2..8 at
// 4096 x 14336, 0-2 % at 14336 x 4096 (level at N = 8); two n8 tiles
// (N = 9..16) keep one row tile, two being 10 % slower at N = 9.
//
// Who fills the ring. With two tiles a ninth warp only issues the bulk
// copies (a producer) and the eight compute warps free a slot by arriving on
// its `empty` mbarrier. A trace of the kernel (globaltimer per CTA and stage,
// H200, 4096 x 14336, cold) showed why: each UBLKCP of 2 KB holds its warp
// 40-60 ns, so warp 0 spent 4 µs issuing the three prologue stages and 2 µs
// refilling a slot, while the other seven waited at the stage barrier for
// it; compute on stage 0 began only at 7 µs, when all of the CTA's W had
// arrived. With the producer, stage 0 is computed from 3.5 µs while the rest
// streams in: 3-9 % faster at N = 2..8 (docs/architecture.md). The
// registers decide where it fits. Each of an SM's four schedulers has its
// own 16 K registers and nine warps put three on one of them: 168 a thread
// at most. The plain form fits them; the zero-point form needs 232 (it
// spilled at 168), so it keeps warp 0 as the issuer, and so does one tile,
// whose two CTAs an SM would be left 112 registers against the 120-128 it
// needs.
template <int kRT, bool kZP>
struct RowGroup {
  static constexpr int kRows = kTileRows * kRT;
  static constexpr int kStageBytes = kRows * kPitch;        // 33024 a tile
  static constexpr int kSmemBytes = kStages * kStageBytes;  // 99072 a tile
  static constexpr int kCtasPerSm = kRT == 1 ? 2 : 1;
  static constexpr bool kProducer = kRT == 2 && !kZP;
  static constexpr int kThreads = 32 * (kWarps + (kProducer ? 1 : 0));  // launched
};

template <int kNT, int kRT, bool kBf16, bool kZP>
__global__ void __launch_bounds__(RowGroup<kRT, kZP>::kThreads, RowGroup<kRT, kZP>::kCtasPerSm)
    gemm_wo_gemv_bulk_kernel(Params p, EpilogueParams ep) {
  using RG = RowGroup<kRT, kZP>;
  static_assert(kRT == 1 || kNT == 1, "two row tiles take one n8 tile (registers)");
  constexpr int kGroupRows = RG::kRows, kStageBytes = RG::kStageBytes;
  constexpr bool kXQueue = kRT == 2;  // activations from a queue (below)
  extern __shared__ __align__(128) uint8_t stage_mem[];
  __shared__ __align__(8) uint64_t full[kStages], empty[kStages];
  __shared__ float partial[kWarps][kGroupRows * 8 * kNT];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;
  const int64_t macros = p.k / kMacroK;
  const int64_t stages_per_group = (macros + kStageMacros - 1) / kStageMacros;
  const int64_t groups = (p.m + kGroupRows - 1) / kGroupRows;
  const int64_t my_groups = groups > blockIdx.x ? (groups - 1 - blockIdx.x) / gridDim.x + 1 : 0;
  const int64_t items = my_groups * stages_per_group;
  const uint32_t bits = p.code_bits;

  // One warp fills stage `item`: lane 0 announces the bytes, lane r copies row r.
  auto issue = [&](int64_t item) {
    const int64_t grp = blockIdx.x + (item / stages_per_group) * gridDim.x;
    const int64_t m0 = (item % stages_per_group) * kStageMacros;
    const uint32_t row_bytes = static_cast<uint32_t>(min64(kStageMacros, macros - m0) * kMacroBytes);
    const int slot = static_cast<int>(item % kStages);
    bulk::copy_rows(stage_mem + slot * kStageBytes, kPitch, p.w + m0 * kMacroBytes, p.ldw, grp * kGroupRows, p.m - 1,
                    kGroupRows, row_bytes, &full[slot]);
  };

  if (threadIdx.x == 0) {
    // empty[s]: every compute thread arrives once it has read slot s (each
    // thread's own arrival orders its own shared loads before the refill).
    for (int s = 0; s < kStages; ++s) bulk::mbar_init(&full[s], 1), bulk::mbar_init(&empty[s], kComputeThreads);
    bulk::mbar_init_fence();
  }
  __syncthreads();
  if constexpr (RG::kProducer) {
    if (warp == kWarps) {
      for (int64_t it = 0; it < items; ++it) {
        if (it >= kStages) bulk::mbar_wait(&empty[it % kStages], static_cast<uint32_t>((it / kStages - 1) & 1));
        issue(it);
      }
      return;
    }
  } else if (warp == 0) {
    for (int64_t i = 0; i < min64(items, kStages); ++i) issue(i);
  }

  // This lane's activations: column nt * 8 + g, K = 8(4i + t) .. of each macro step.
  const uint8_t* xp[kNT];
#pragma unroll
  for (int nt = 0; nt < kNT; ++nt) xp[nt] = p.x + min64(nt * 8 + g, p.n - 1) * p.ldx + 16 * t;

  // The scales (and zero points) of this lane's rows g, g + 8 for the
  // macro steps the warp takes in stage `item`: loaded a stage ahead, since
  // they come from memory as W does but one at a time, and a wait on each
  // would stall every stage. Kept as loaded and converted at the use: a
  // conversion here would make the warp wait for the load right here.
  struct StageScales {  // as loaded (scale_from_bits / float(z) at the use)
    uint32_t s[kPerWarp][kRT][2];
    int z[kPerWarp][kRT][2];
  };
  auto load_scales = [&](int64_t it, StageScales& out) {
    if (it >= items) return;
    const int64_t grp = blockIdx.x + (it / stages_per_group) * gridDim.x;
#pragma unroll
    for (int jj = 0; jj < kPerWarp; ++jj) {
      const int64_t ms = min64((it % stages_per_group) * kStageMacros + kPerWarp * warp + jj, macros - 1);
      const int64_t kk = ms * kMacroK;
#pragma unroll
      for (int r = 0; r < kRT; ++r)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int64_t row = min64(grp * kGroupRows + kTileRows * r + g + 8 * h, p.m - 1);
          out.s[jj][r][h] = load_scale_bits(p, p.scales + row * p.s_stride, kk >> p.s_shift);
          if constexpr (kZP) out.z[jj][r][h] = load_zero_int(p, p.zeros + row * p.z_stride, kk >> p.z_shift);
        }
    }
  };
  auto load_x = [&](int64_t ms, uint4 (&xv)[kNT][4]) {
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
      for (int i = 0; i < 4; ++i)
        xv[nt][i] = __ldg(reinterpret_cast<const uint4*>(xp[nt] + min64(ms, macros - 1) * (2 * kMacroK) + 64 * i));
  };

  // The queue: this warp's activations for its next kXQ macro steps, in
  // flight while it works on the current one. A step's activations depend
  // only on its K, so the queue runs on across stages and row groups, and
  // the warp waits on L2 only where a step takes longer to arrive than
  // kXQ - 1 steps take to compute.
  uint4 xq[kXQueue ? kXQ : 1][kNT][4];
  int64_t q_si = 0;  // the stage and macro step the queue requests next
  int q_jj = 0;
  auto q_push = [&](uint4 (&dst)[kNT][4]) {
    load_x(q_si * kStageMacros + kPerWarp * warp + q_jj, dst);
    if (++q_jj == kPerWarp) {
      q_jj = 0;
      if (++q_si == stages_per_group) q_si = 0;
    }
  };
  if constexpr (kXQueue) {
#pragma unroll
    for (int d = 0; d < kXQ; ++d) q_push(xq[d]);
  }

  StageScales cur{}, next{};
  load_scales(0, cur);
  int64_t item = 0;
  for (int64_t gi = 0; gi < my_groups; ++gi) {
    const int64_t row0 = (blockIdx.x + gi * gridDim.x) * kGroupRows;
    float out[kRT][kNT][4];
#pragma unroll
    for (int r = 0; r < kRT; ++r)
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) out[r][nt][e] = 0.0f;

    for (int64_t si = 0; si < stages_per_group; ++si, ++item) {
      const int slot = static_cast<int>(item % kStages);
      const int64_t ms0 = si * kStageMacros + kPerWarp * warp;
      // The activations and the next stage's scales do not depend on W:
      // requested before the wait for it.
      uint4 xv[kNT][4];
      if constexpr (!kXQueue) load_x(ms0, xv);
      load_scales(item + 1, next);
      bulk::mbar_wait(&full[slot], static_cast<uint32_t>((item / kStages) & 1));
#pragma unroll
      for (int jj = 0; jj < kPerWarp; ++jj) {
        const int64_t ms = ms0 + jj;
        if constexpr (kXQueue) {
#pragma unroll
          for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
            for (int i = 0; i < 4; ++i) {
              xv[nt][i] = xq[0][nt][i];
#pragma unroll
              for (int d = 0; d + 1 < kXQ; ++d) xq[d][nt][i] = xq[d + 1][nt][i];
            }
          q_push(xq[kXQ - 1]);  // even for a step past K: the queue stays in step
          if (ms >= macros) continue;
        } else {
          if (ms >= macros) break;
          if (jj > 0) load_x(ms, xv);
        }
        const uint8_t* ws = stage_mem + slot * kStageBytes + g * kPitch + (kPerWarp * warp + jj) * kMacroBytes + 4 * t;
        float d[kRT][kNT][4], sx[kNT][4];
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            sx[nt][e] = 0.0f;
#pragma unroll
            for (int r = 0; r < kRT; ++r) d[r][nt][e] = 0.0f;
          }
        uint32_t wg[kRT][4], w8[kRT][4];
#pragma unroll
        for (int r = 0; r < kRT; ++r) {
          const uint32_t* w0 = reinterpret_cast<const uint32_t*>(ws + kTileRows * r * kPitch);
          const uint32_t* w1 = reinterpret_cast<const uint32_t*>(ws + (kTileRows * r + 8) * kPitch);
#pragma unroll
          for (int i = 0; i < 4; ++i) wg[r][i] = w0[4 * i], w8[r][i] = w1[4 * i];
        }
        macro_step_mma<kRT, kNT, kBf16, kZP>(d, sx, wg, w8, xv, bits);
        // d[r][nt][e]: row 16r + g (e < 2) or 16r + g + 8, column nt * 8 + 2t + e % 2.
#pragma unroll
        for (int r = 0; r < kRT; ++r)
#pragma unroll
          for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              const int h = e / 2;
              const float v =
                  kZP ? fmaf(-static_cast<float>(cur.z[jj][r][h]), sx[nt][e], d[r][nt][e]) : d[r][nt][e];
              out[r][nt][e] = fmaf(scale_from_bits(p, cur.s[jj][r][h]), v, out[r][nt][e]);
            }
      }
      cur = next;
      if constexpr (RG::kProducer) {
        bulk::mbar_arrive(&empty[slot]);
      } else {
        __syncthreads();  // every warp is done with the slot before it is refilled
        if (warp == 0 && item + kStages < items) issue(item + kStages);
      }
    }

    constexpr int kCols = 8 * kNT;
#pragma unroll
    for (int r = 0; r < kRT; ++r)
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e)
          partial[warp][(kTileRows * r + g + 8 * (e / 2)) * kCols + nt * 8 + 2 * t + e % 2] = out[r][nt][e];
    bulk::consumers_sync<kComputeThreads>();  // the producer warp, if any, has left
    const int64_t n_here = min64(p.n, kCols);
    for (int o = threadIdx.x; o < kGroupRows * kCols; o += kComputeThreads) {
      const int64_t row = row0 + o / kCols, col = o % kCols;
      if (row >= p.m || col >= n_here) continue;
      float v = partial[0][o];
#pragma unroll
      for (int i = 1; i < kWarps; ++i) v += partial[i][o];
      epilogue_store(ep, row, col, v);
    }
    bulk::consumers_sync<kComputeThreads>();  // partial[] is rewritten by the next group
  }
}

// Resident CTAs per SM of an instance (device_limits.cuh): -1 without sm_90
// code, 0 where the device cannot hold its 99 KB (one tile) or 198 KB CTA.
template <int kNT, int kRT, bool kBf16, bool kZP>
int resident_ctas(int device) {
  using RG = RowGroup<kRT, kZP>;
  return resident_ctas_sm90<gemm_wo_gemv_bulk_kernel<kNT, kRT, kBf16, kZP>>(device, RG::kThreads, RG::kSmemBytes);
}

template <int kNT, int kRT, bool kBf16, bool kZP>
Status launch(const GemmArgs& g, const Params& p, cudaStream_t stream) {
  const int per_sm = resident_ctas<kNT, kRT, kBf16, kZP>(g.device.id);
  if (per_sm <= 0)
    return Status(StatusCode::cuda_error, std::string(g.fn) + " (cuda_wo_gemv_bulk): cannot launch on cuda:" +
                                              std::to_string(g.device.id) + " (" + shape_text(g) + ")");
  using RG = RowGroup<kRT, kZP>;
  const int64_t groups = (p.m + RG::kRows - 1) / RG::kRows;
  const int64_t grid = std::min<int64_t>(groups, static_cast<int64_t>(per_sm) * device_limits(g.device.id).sms);
  gemm_wo_gemv_bulk_kernel<kNT, kRT, kBf16, kZP>
      <<<static_cast<unsigned>(grid), RG::kThreads, RG::kSmemBytes, stream>>>(p, epilogue_params(g));
  return launch_result(g);
}

// The kernel instance a call runs, chosen in one place for the launch and
// for can_run's occupancy check: two row tiles (one n8 tile) up to N = 8,
// one row tile (two n8 tiles) above; the activations' dtype; zero points or
// not. f(nt, rt, bf16, zp) receives them as std::integral_constant values.
template <class F>
auto with_instance(const GemmArgs& g, F&& f) {
  using std::integral_constant;
  const bool bf16 = g.b.format == Format::bf16, zp = g.a.zero_points.data != nullptr;
  auto pick_zp = [&](auto nt, auto rt, auto b) {
    return zp ? f(nt, rt, b, integral_constant<bool, true>{}) : f(nt, rt, b, integral_constant<bool, false>{});
  };
  auto pick_dtype = [&](auto nt, auto rt) {
    return bf16 ? pick_zp(nt, rt, integral_constant<bool, true>{}) : pick_zp(nt, rt, integral_constant<bool, false>{});
  };
  return g.b.rows <= 8 ? pick_dtype(integral_constant<int, 1>{}, integral_constant<int, 2>{})
                       : pick_dtype(integral_constant<int, 2>{}, integral_constant<int, 1>{});
}

}  // namespace

bool gemm_wo_gemv_bulk_can_run(const GemmArgs& args, std::string* why_not) {
  auto no = [&](std::string why) {
    if (why_not) *why_not = std::move(why);
    return false;
  };
  if (args.b.rows > kMaxCols) return no("N=" + std::to_string(args.b.rows) + " > 16 (GEMV kernel)");
  // N = 1 goes to cuda_wo_gemv_small, measured faster there (registry.cu).
  if (args.b.rows == 1) return no("N=1: the FFMA GEMV (cuda_wo_gemv_small) is faster for one column");
  // K = 0: no macro step to stream, and the two-tile form's activation
  // queue would load from before x (its first step is macros - 1 = -1).
  if (args.a.k == 0) return no("K=0: nothing to stream");
  if (args.a.k % kMacroK != 0)
    return no("K=" + std::to_string(args.a.k) + " is not a multiple of 128 (the kernel's macro step)");
  if (!groups_at_least(args, kMinGroup, why_not)) return false;
  // The rest (formats, K-contiguous 16-byte-aligned rows, scale and zero
  // point dtypes) as the mma GEMV it shares its unpacking with.
  if (!gemm_wo_gemv_can_run(args, why_not)) return false;
  const int per_sm = with_instance(args, [&](auto nt, auto rt, auto bf16, auto zp) {
    return resident_ctas<decltype(nt)::value, decltype(rt)::value, decltype(bf16)::value, decltype(zp)::value>(
        args.device.id);
  });
  if (!ctas_fit(per_sm, args.device.id, "sm_90", why_not)) return false;
  return true;
}

Status gemm_wo_gemv_bulk_run(const GemmArgs& args, Stream stream) {
  if (args.a.rows <= 0 || args.b.rows <= 0) return Status::success();
  const Params p = gemv_params(args);
  return with_instance(args, [&](auto nt, auto rt, auto bf16, auto zp) {
    return launch<decltype(nt)::value, decltype(rt)::value, decltype(bf16)::value, decltype(zp)::value>(
        args, p, to_cuda(stream));
  });
}

}  // namespace qg::detail::cuda
