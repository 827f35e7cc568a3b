// SPDX-License-Identifier: MIT
// cuda/gemm_q4_0_q8_1_bulk.cu: Q4_0 x Q8_1 for small batches on sm_90,
// N = 7..8: W streamed by the bulk copy engine into a ring of shared-memory
// stages that a producer warp keeps full, int8 tensor cores
// (mma.sync.m16n8k32, one a block) on it.
//
// Why not cuda_mmvq's way. The GEMV loads W into registers, each lane a few
// 144-byte chunks with one in flight at a time, and its DP4As and A's loads
// grow with every token. Here the copy engine keeps tens of KB of W in
// flight per SM without a register per byte, and one tensor-core
// instruction does a block's 16 x 8 products, so the cost hardly grows from
// N = 1 to 8. Where it runs is measured (H200, docs/architecture.md): at
// N = 8 it is faster than cuda_wgmma and cuda_mmvq at every shape measured
// with at most one 32-row group a CTA (cold, 4096 x 14336: 20.1 against
// 26.6 us; 4096 x 4096: 11.4 against 15.4), and level at 14336 x 4096,
// which it leaves to them; below N = 7 cuda_mmvq is faster on some shapes
// (K = 4096 with W in L2; M = 2048, whose 64 row groups leave half the SMs
// idle), though not at 4096 x 14336 (N = 3: 18.2 against 20.1 us). Two n8
// tiles (N = 9..16) spilled at the 96 registers below and were 12 % slower
// than cuda_wgmma at N = 16. Since 2026-12-03 cuda_gemv_mma, registered
// ahead of it, takes N = 7..8 on sm_90 (17.1 against 20.1 us cold at 4096 x
// 14336 N = 8; docs/architecture.md, "From N = 4: one n8 tile") and every
// shape this one takes there; this kernel runs past sm_90.
//
// Who issues the copies. A trace of the INT4 bulk kernel
// (gemm_wo_gemv_bulk.cu) showed a cp.async.bulk holding its warp 40-60 ns;
// here a 17th warp, the producer, only issues them (one per row and stage,
// lane r copying row r), and waits on a stage's `empty` mbarrier, on which
// every compute thread arrives once it has read the stage, before it refills
// it. No CTA-wide barrier on the stage path: a warp runs on to the next
// stage as soon as its bytes have landed. (One 2D tensor copy a stage, 32
// rows x 1168 bytes, issued far fewer instructions and was 9-15 % slower.)
//
// Work split. A CTA owns row groups of 32 rows (two m16 tiles) blockIdx.x,
// + gridDim.x, ..., and streams each as stages of 64 blocks (2048 values of
// K, 1152 bytes a row); stages run on across groups. Dispatch gives it at
// most one group a resident CTA (can_run: past that cuda_wgmma is level or
// faster), so in practice a CTA streams one group. Compute warp w takes
// blocks 4w .. 4w + 3 of each stage for both tiles, so each B fragment (the
// activations) serves 32 rows. The warps' partial tiles are added in shared
// memory in warp order: deterministic. Rows past M are read from row M - 1
// and never stored; columns past N read column N - 1. Other geometries
// measured slower (docs/architecture.md): 3 or 5 stages, stages of 32, 48,
// 96 or 128 blocks, 8 or 12 compute warps.
//
// Registers: 17 warps put five on one of the SM's four schedulers, whose
// 16 K registers then allow 96 a thread (ptxas applies that limit from
// __launch_bounds__).
//
// W's words. Shared rows are 1168 bytes (292 words, 4 mod 32) apart, so a
// warp's loads of words (row g, word c + t) fall in 32 banks. A block is 18
// bytes: an even block of a stage starts on a word (d_w the low half of its
// first word, each code word one PRMT of two neighbours), an odd one in the
// middle of one (d_w the high half, the code words aligned). A warp's blocks
// start at an even index, so the parity is known at compile time.
//
// Activations come from global memory (they are small and shared by every
// CTA, so L2 holds them), requested one stage ahead: they are in flight
// while the warp computes the stage before.
#include <algorithm>

#include "bulk_copy.cuh"
#include "device_limits.cuh"
#include "gemm_q4_0_q8_1.cuh"
#include "q4_0_mma.cuh"

namespace qg::detail::cuda {
namespace {

constexpr int kWarps = 16;                                 // compute warps
constexpr int kComputeThreads = 32 * kWarps;
constexpr int kThreads = kComputeThreads + 32;             // and the producer warp
constexpr int kTiles = 2;                                  // m16 tiles of a row group
constexpr int kGroupRows = 16 * kTiles;                    // 32: one row a producer lane
constexpr int kWarpBlocks = 4;                             // blocks of a warp per stage (even: parity)
constexpr int kStageBlocks = kWarps * kWarpBlocks;         // 64 blocks, 2048 values of K
constexpr int kStageRowBytes = kStageBlocks * kQ4_0Bytes;  // 1152
constexpr int kPitch = kStageRowBytes + 16;                // 1168 bytes = 292 words, 4 mod 32
constexpr int kStageBytes = kGroupRows * kPitch;           // 37376
constexpr int kStages = 4;                                 // 146 KB of W requested ahead an SM
constexpr int kMinCols = 7, kMaxCols = 8;                  // N it takes (measured: docs/architecture.md)
constexpr int kSmemBytes = kStages * kStageBytes + kWarps * kGroupRows * 8 * 4;  // the ring, the warps' tiles
static_assert(kWarpBlocks % 2 == 0, "a warp's first block must be even (its parity is compile-time)");
static_assert(kStageBlocks % 8 == 0, "a stage's row bytes must be whole 16-byte units");

struct Params {
  const uint8_t* w;
  const uint8_t* x;
  int64_t m, n, nb, ldw, ldx;
  uint32_t k80;  // kCodeBias, from a register
};

// A warp's activations for one stage: per block, the B fragment (codes 4t..
// and 16 + 4t.. of column g) and the first words (d, s) of output columns 2t
// and 2t + 1, as loaded.
struct StageX {
  uint32_t b[kWarpBlocks][2];
  uint32_t ds[kWarpBlocks][2];
};

__global__ void __launch_bounds__(kThreads, 1) gemm_bulk_kernel(Params p, EpilogueParams ep) {
  extern __shared__ __align__(16) uint8_t smem[];  // bulk copies: 16-byte-aligned ends
  __shared__ __align__(8) uint64_t full[kStages], empty[kStages];
  constexpr int kCols = 8;
  float* partial = reinterpret_cast<float*>(smem + kStages * kStageBytes);  // [kWarps][kGroupRows * kCols]
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;
  const int64_t stages_per_group = (p.nb + kStageBlocks - 1) / kStageBlocks;
  const int64_t groups = (p.m + kGroupRows - 1) / kGroupRows;
  const int64_t my_groups = groups > blockIdx.x ? (groups - 1 - blockIdx.x) / gridDim.x + 1 : 0;
  const int64_t items = my_groups * stages_per_group;

  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) bulk::mbar_init(&full[s], 1), bulk::mbar_init(&empty[s], kComputeThreads);
    bulk::mbar_init_fence();
  }
  __syncthreads();

  if (warp == kWarps) {  // the producer
    for (int64_t it = 0; it < items; ++it) {
      const int slot = static_cast<int>(it % kStages);
      if (it >= kStages) bulk::mbar_wait(&empty[slot], static_cast<uint32_t>((it / kStages - 1) & 1));
      const int64_t grp = blockIdx.x + (it / stages_per_group) * gridDim.x;
      const int64_t b0 = (it % stages_per_group) * kStageBlocks;
      const uint32_t row_bytes = static_cast<uint32_t>(min64(kStageBlocks, p.nb - b0) * kQ4_0Bytes);
      bulk::copy_rows(smem + slot * kStageBytes, kPitch, p.w + b0 * kQ4_0Bytes, p.ldw, grp * kGroupRows, p.m - 1,
                      kGroupRows, row_bytes, &full[slot]);
    }
    return;
  }

  // This lane's activation columns: g for the B fragment, 2t and 2t + 1 for
  // the scales of its outputs (past N: column N - 1, never stored). Byte
  // offsets from p.x, 32-bit: can_run bounds A's extent below 2^31.
  const uint32_t xb = static_cast<uint32_t>(min64(g, p.n - 1) * p.ldx + 4 + 4 * t);
  const uint32_t xs[2] = {static_cast<uint32_t>(min64(2 * t, p.n - 1) * p.ldx),
                          static_cast<uint32_t>(min64(2 * t + 1, p.n - 1) * p.ldx)};
  auto ldx4 = [&](uint32_t off) { return __ldg(reinterpret_cast<const uint32_t*>(p.x + off)); };
  auto load_x = [&](int64_t si, StageX& out) {
#pragma unroll
    for (int jj = 0; jj < kWarpBlocks; ++jj) {
      const uint32_t off =
          static_cast<uint32_t>(min64(si * kStageBlocks + warp * kWarpBlocks + jj, p.nb - 1) * kQ8_1Bytes);
      out.b[jj][0] = ldx4(xb + off);
      out.b[jj][1] = ldx4(xb + off + 16);
      out.ds[jj][0] = ldx4(xs[0] + off);
      out.ds[jj][1] = ldx4(xs[1] + off);
    }
  };

  // The next stage's activations are requested before the wait for this
  // stage's W (they do not depend on it) and sit in registers meanwhile; the
  // queue runs on across row groups (a group's first stage after another's
  // last).
  StageX cur, next;
  load_x(0, cur);
  int64_t item = 0;
  for (int64_t gi = 0; gi < my_groups; ++gi) {
    const int64_t row0 = (blockIdx.x + gi * gridDim.x) * kGroupRows;
    float acc[kTiles][1][4] = {};

    for (int64_t si = 0; si < stages_per_group; ++si, ++item) {
      const int slot = static_cast<int>(item % kStages);
      load_x(si + 1 < stages_per_group ? si + 1 : 0, next);
      bulk::mbar_wait(&full[slot], static_cast<uint32_t>((item / kStages) & 1));
      const uint8_t* stage = smem + slot * kStageBytes;
#pragma unroll
      for (int jj = 0; jj < kWarpBlocks; ++jj) {
        if (si * kStageBlocks + warp * kWarpBlocks + jj >= p.nb) break;  // the row's last stage is short
        const int b[1][2] = {{static_cast<int>(cur.b[jj][0]), static_cast<int>(cur.b[jj][1])}};
        const q4mma::AScale sc[1][2] = {{q4mma::a_scale(cur.ds[jj][0]), q4mma::a_scale(cur.ds[jj][1])}};
        const bool finite = isfinite(sc[0][0].d) && isfinite(sc[0][1].d);
        // Block j of the stage's rows: at byte 18j, a word boundary for even
        // j (jj's parity, warp * kWarpBlocks being even).
        const int j = warp * kWarpBlocks + jj;
        const int word0 = (kQ4_0Bytes * j) / 4;
        uint32_t q[kTiles][2];
        float dw16[kTiles][2];
#pragma unroll
        for (int mi = 0; mi < kTiles; ++mi)
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const uint32_t* w = reinterpret_cast<const uint32_t*>(stage + (16 * mi + g + 8 * h) * kPitch) + word0;
            if (jj % 2 == 0) {
              dw16[mi][h] = half_bits_to_float(w[0] & 0xFFFFu) * 0.0625f;
              q[mi][h] = __byte_perm(w[t], w[t + 1], 0x5432);
            } else {
              dw16[mi][h] = half_bits_to_float(w[0] >> 16) * 0.0625f;
              q[mi][h] = w[1 + t];
            }
          }
        // One vote per block, not a branch per mma (cuda_mma's reason).
        if (__all_sync(0xFFFFFFFFu, finite)) {
#pragma unroll
          for (int mi = 0; mi < kTiles; ++mi) q4mma::tile_block<1, true>(acc[mi], q[mi], dw16[mi], b, sc, p.k80);
        } else {
#pragma unroll
          for (int mi = 0; mi < kTiles; ++mi) q4mma::tile_block<1, false>(acc[mi], q[mi], dw16[mi], b, sc, p.k80);
        }
      }
      bulk::mbar_arrive(&empty[slot]);  // this thread's reads of the slot are done
      cur = next;
    }

    // acc[mi][0][e]: row 16 mi + g (e < 2) or + 8, column 2t + e % 2.
#pragma unroll
    for (int mi = 0; mi < kTiles; ++mi)
#pragma unroll
      for (int e = 0; e < 4; ++e)
        partial[warp * kGroupRows * kCols + (16 * mi + g + 8 * (e / 2)) * kCols + 2 * t + e % 2] = acc[mi][0][e];
    bulk::consumers_sync<kComputeThreads>();
    for (int o = threadIdx.x; o < kGroupRows * kCols; o += kComputeThreads) {
      const int64_t row = row0 + o / kCols, col = o % kCols;
      if (row >= p.m || col >= p.n) continue;
      float v = partial[o];
#pragma unroll
      for (int i = 1; i < kWarps; ++i) v += partial[i * kGroupRows * kCols + o];
      epilogue_store(ep, row, col, v);
    }
    bulk::consumers_sync<kComputeThreads>();  // partial[] is rewritten by the next group
  }
}

// Resident CTAs per SM (device_limits.cuh): -1 without sm_90 code, 0 where
// the device cannot hold a CTA.
int resident_ctas(int device) { return resident_ctas_sm90<gemm_bulk_kernel>(device, kThreads, kSmemBytes); }

}  // namespace

bool gemm_bulk_can_run(const GemmArgs& args, std::string* why_not) {
  auto no = [&](std::string why) {
    if (why_not) *why_not = std::move(why);
    return false;
  };
  // Below N = 7 cuda_mmvq is faster on some of the measured shapes (those
  // with K = 4096 when W is in L2, and M = 2048), above N = 8 cuda_wgmma
  // (docs/architecture.md).
  if (args.b.rows < kMinCols || args.b.rows > kMaxCols)
    return no("N=" + std::to_string(args.b.rows) + " outside 7..8 (measured faster elsewhere)");
  if (args.a.k % 256 != 0 || args.a.k == 0)
    return no("K=" + std::to_string(args.a.k) + " is not a positive multiple of 256 (stages are whole 16-byte runs of W)");
  // The bulk copies move whole 16-byte units between 16-byte-aligned ends.
  if (!w_rows_16_byte_aligned(args, why_not)) return false;
  if (!gemm_operands_aligned(args, why_not)) return false;  // A's 32-bit loads
  if (!a_within_32_bit_offsets(args, why_not)) return false;
  const int per_sm = resident_ctas(args.device.id);
  if (!ctas_fit(per_sm, args.device.id, "sm_90", why_not)) return false;
  // One row group a CTA, all resident at once. With more groups than that,
  // CTAs take several and the split is uneven (14336 rows on 132 SMs: 4
  // groups against an average of 3.4); measured there, cuda_wgmma is level
  // on the GEMM and faster in linear_q4_0, whose x it quantizes itself.
  return row_groups_fit_one_wave(args, kGroupRows, per_sm, device_limits(args.device.id).sms, why_not);
}

Status gemm_bulk_run(const GemmArgs& args, Stream stream) {
  if (args.a.rows <= 0 || args.b.rows <= 0) return Status::success();
  const int per_sm = resident_ctas(args.device.id);
  if (per_sm <= 0)
    return Status(StatusCode::cuda_error, std::string(args.fn) + " (cuda_gemv_bulk): cannot launch on cuda:" +
                                              std::to_string(args.device.id) + " (" + gemm_shape(args) + ")");
  const Params p{static_cast<const uint8_t*>(args.a.data), static_cast<const uint8_t*>(args.b.data), args.a.rows,
                 args.b.rows, args.a.k / 32, args.a.row_stride, args.b.row_stride, kCodeBias};
  const int64_t groups = (p.m + kGroupRows - 1) / kGroupRows;
  const int64_t grid = std::min<int64_t>(groups, static_cast<int64_t>(per_sm) * device_limits(args.device.id).sms);
  gemm_bulk_kernel<<<static_cast<unsigned>(grid), kThreads, kSmemBytes, to_cuda(stream)>>>(p, epilogue_params(args));
  return gemm_launch_status(args);
}

}  // namespace qg::detail::cuda
