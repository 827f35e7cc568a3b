// SPDX-License-Identifier: MIT
// cuda/gemm_i8_wgmma.cu: i8 x i8 on Hopper's warpgroup tensor cores (sm_90a),
// for products big enough to fill the GPU with 128-row tiles.
//
// C[m, n] = sum_k A[m, k] * B[n, k], both operands int8 rows along K: the
// K-major layout wgmma takes for 8-bit types (wgmma.cuh), so tiles go global
// -> shared by 2D tensor copies (tma.cuh) and never pass through registers.
//
// Roles. A CTA is three warpgroups. Warpgroup 0 is the producer: one thread
// issues, per K stage, one tensor copy of a 128 x 128-byte tile of P and one
// of a BN x 128-byte tile of Q into a ring of kStages stages, each completing
// on the stage's "full" mbarrier. Warpgroups 1 and 2 consume: each owns 64 of
// the tile's 128 P rows and all BN Q columns, waits for a stage, issues four
// wgmma.m64nBNk32 (one per 32-byte K step), and hands the stage back on its
// "empty" mbarrier once the MMAs that read it are done (wait_group 1: the
// next stage's MMAs are already queued behind them, so the tensor cores
// never wait for that bookkeeping). The producer runs up to kStages stages
// ahead, so the next tile's loads are in flight while the consumers store
// the last one.
//
// P and Q. wgmma's accumulator fragment holds column pairs (c, c + 1): the
// operand whose index runs along C's contiguous dimension goes on the Q
// (wgmma N) side, so that pairs are adjacent in memory -- A on the P side for
// row-major C, B there for the transposed C of x @ W^T.
//
// Tiles: 128 x 256 (4 stages of 48 KB: 192 KB of shared memory, one CTA per
// SM, 128 int32 accumulators a thread) where those tiles fill every SM, 128 x
// 128 (6 stages of 32 KB) otherwise. CTAs are persistent: one per SM, walking
// tiles in groups of 8 tile rows so that the CTAs running at once share
// operand rows in L2. Where even the narrow tiles leave SMs idle (N = 128 to
// 256 tokens against 4096 weight rows, K = 14336: 32 to 64 tiles), the CTAs
// of a cluster split each tile's K range and add their int32 partial tiles
// through distributed shared memory in rank order: deterministic, no
// workspace, no atomics (as cuda_i8_mma does for small N).
//
// Epilogue. The fragment's layout (pairs of columns, rows 8 apart) makes
// poor stores, and storing it element by element through the generic
// epilogue, fully unrolled over 128 accumulators, took 186 us at 4096^3 where
// the same kernel without stores took 89 (H200; instruction-cache misses:
// the generic epilogue inlined 128 times, and 32-byte store segments).
// So each warp moves its 16 x BN tile through a small private shared buffer,
// 16 x 32 sums at a time, and reads it back one column per lane: each store
// instruction then writes 32 consecutive elements of C along Q, and the
// generic epilogue_store_int (scales, beta, bias, relu, the cast, in the one
// fixed order) appears BN / 32 times in the code instead of BN: 128 us.
//
// Tails cost nothing in the main loop: the tensor copies fill rows past M
// or N and K past its end with zeros, and a zero adds nothing to a sum; the
// epilogue stores only elements inside C. Zero points (which need each row's
// code sum) are left to cuda_i8_mma: the registry entry does not claim them.
#include <cooperative_groups.h>

#include "bulk_copy.cuh"
#include "gemm_int_fast.cuh"
#include "tma.cuh"
#include "wgmma.cuh"

namespace cg = cooperative_groups;

namespace qg::detail::cuda {
namespace {

using namespace intfast;

constexpr int kBM = 128;                   // P rows a tile: two consumer warpgroups x m64
constexpr int kBK = tma::kSwizzleBytes;    // K bytes a stage: one 128-byte swizzled row
constexpr int kThreads = 384;              // producer warpgroup + two consumer warpgroups
constexpr int kConsumerWarps = 8;          // arrivals that free a stage
// The register file split between the roles (setmaxnreg): one thread of the
// producer issues copies; the consumers hold up to 128 accumulators each.
// 128 x 40 + 256 x 232 = 64512 of the SM's 65536.
constexpr int kProducerRegs = 40, kConsumerRegs = 232;
constexpr int kStageCols = 32;             // epilogue: columns a warp moves through shared memory at once
constexpr int kStagePitch = kStageCols + 1;  // ints a staged row takes (+1: column reads hit 32 banks)
constexpr int kEpilogueBytes = kConsumerWarps * 16 * kStagePitch * 4;
constexpr int64_t kMinSide = 128;          // M and N both fill at least one tile side
constexpr int64_t kMinSplitSteps = 8;      // K stages a CTA of a split keeps (pipeline fill)

template <int BN_>
struct WgTile {
  static constexpr int BN = BN_;
  static constexpr int kStages = BN == 256 ? 4 : 6;
  // Wide tiles are launched only where they fill every SM: never split.
  static constexpr bool kSplitK = BN == 128;
  static constexpr int kPBytes = kBM * kBK, kQBytes = BN * kBK;
  static constexpr int kStageBytes = kPBytes + kQBytes;
  // The ring, 1024-byte aligned (the swizzle's period), the mbarriers, the
  // epilogue's staging; +1024 to align the dynamic shared memory's start.
  static constexpr int kBarrierBytes = 2 * kStages * 8;
  static constexpr int kSmemBytes = kStages * kStageBytes + kBarrierBytes + kEpilogueBytes + 1024;
  static_assert(kStageBytes % 1024 == 0, "every tile starts on the swizzle's 1024-byte period");
  static_assert(kBM * BN * 4 <= kStages * kStageBytes, "a split's partial tile fits in the ring");
};

struct WgShape {
  int64_t rows_p, rows_q, k;
  int64_t tiles_p, tiles_q;
  bool swap;                // P is B (C is [.., M] with m contiguous)
  bool plain_i32;           // int32 C, 4-byte aligned: the sum (or its relu) stored directly
  int splits;               // CTAs of a cluster sharing one tile's K range (1: no cluster)
  int64_t ld_p, ld_q;       // C's element steps along P and Q
};

// The sum at (p, q) of C, inside it.
__device__ __forceinline__ void store_one(const WgShape& s, const EpilogueParams& ep, int64_t p, int64_t q, int v) {
  if (s.plain_i32) {
    *reinterpret_cast<int*>(ep.c + (p * s.ld_p + q * s.ld_q) * 4) = ep.relu && v < 0 ? 0 : v;
    return;
  }
  epilogue_store_int(ep, s.swap ? q : p, s.swap ? p : q, v, 0, 0);
}

// Stores a consumer warp's 16 x BN sums: rows p_row .. p_row + 15, columns
// q_col .. q_col + BN - 1, lane (g, t) holding rows g, g + 8 and columns
// 8 j + 2 t, + 1 (wgmma.cuh). `buf`: the warp's 16 x kStagePitch ints.
template <int BN>
__device__ __forceinline__ void store_tile(const WgShape& s, const EpilogueParams& ep, const int (&acc)[BN / 2],
                                           int* buf, int64_t p_row, int64_t q_col, int lane) {
  const int g = lane / 4, t = lane % 4;
  const int rows = static_cast<int>(s.rows_p - p_row < 16 ? s.rows_p - p_row : 16);
#pragma unroll
  for (int c = 0; c < BN / kStageCols; ++c) {
#pragma unroll
    for (int jj = 0; jj < kStageCols / 8; ++jj) {
      const int j = c * (kStageCols / 8) + jj, col = 8 * jj + 2 * t;
      buf[g * kStagePitch + col] = acc[4 * j];
      buf[g * kStagePitch + col + 1] = acc[4 * j + 1];
      buf[(g + 8) * kStagePitch + col] = acc[4 * j + 2];
      buf[(g + 8) * kStagePitch + col + 1] = acc[4 * j + 3];
    }
    __syncwarp();
    const int64_t q = q_col + c * kStageCols + lane;
    if (q < s.rows_q) {
#pragma unroll 1
      for (int r = 0; r < rows; ++r) store_one(s, ep, p_row + r, q, buf[r * kStagePitch + lane]);
    }
    __syncwarp();  // the buffer is refilled by the next column block
  }
}

// The cluster's CTAs add their partial tiles through distributed shared
// memory, in rank order whatever the schedule (deterministic), each CTA's
// consumers finishing an interleaved 1/splits of the tile's elements. Every
// thread of every CTA takes part in the two cluster barriers.
template <class T>
__device__ __forceinline__ void cluster_reduce_store(const WgShape& s, const EpilogueParams& ep, const int* part,
                                                     int64_t tile, int rank, int warpgroup) {
  cg::cluster_group cluster = cg::this_cluster();
  cluster.sync();  // every CTA's partial tile is in its shared memory
  if (warpgroup > 0 && tile < s.tiles_p * s.tiles_q) {
    int64_t tp, tq;
    tile_coords(tile, s.tiles_p, s.tiles_q, &tp, &tq);
    const int ct = static_cast<int>(threadIdx.x) - 128;
    for (int i = rank * 256 + ct; i < kBM * T::BN; i += s.splits * 256) {
      const int64_t p = tp * kBM + i / T::BN, q = tq * T::BN + i % T::BN;
      if (p >= s.rows_p || q >= s.rows_q) continue;
      uint32_t v = 0;
      for (int c = 0; c < s.splits; ++c) v += static_cast<uint32_t>(cluster.map_shared_rank(part, c)[i]);
      store_one(s, ep, p, q, static_cast<int>(v));
    }
  }
  cluster.sync();  // no CTA leaves while others read its shared memory
}

template <class T>
__global__ void __launch_bounds__(kThreads, 1)
gemm_i8_wgmma_kernel(const __grid_constant__ CUtensorMap map_p, const __grid_constant__ CUtensorMap map_q,
                     WgShape s, EpilogueParams ep) {
#if QG_WGMMA_ENABLED
  extern __shared__ uint8_t smem_raw[];
  uint8_t* ring = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t{1023});
  uint64_t* full = reinterpret_cast<uint64_t*>(ring + T::kStages * T::kStageBytes);
  uint64_t* empty = full + T::kStages;
  int* staging = reinterpret_cast<int*>(ring + T::kStages * T::kStageBytes + T::kBarrierBytes);

  const int warpgroup = threadIdx.x / 128, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (threadIdx.x == 0) {
    for (int i = 0; i < T::kStages; ++i) {
      bulk::mbar_init(&full[i], 1);
      bulk::mbar_init(&empty[i], kConsumerWarps);
    }
    bulk::mbar_init_fence();
  }
  __syncthreads();  // the only CTA-wide barrier: the roles part here

  // Split K: the `splits` CTAs of a cluster (consecutive blockIdx.x) share a
  // tile, each taking a contiguous run of K stages; the host launches at
  // most one tile per CTA then, so the ring is free for the reduction.
  const int splits = T::kSplitK ? s.splits : 1, rank = static_cast<int>(blockIdx.x % splits);
  const int64_t tiles = s.tiles_p * s.tiles_q;
  const int64_t all_steps = (s.k + kBK - 1) / kBK;
  const int64_t first_step = all_steps * rank / splits;
  const int64_t k_steps = all_steps * (rank + 1) / splits - first_step;
  const int64_t first_tile = blockIdx.x / splits, tile_step = gridDim.x / splits;

  if (warpgroup == 0) {
    wgmma::set_max_registers<false, kProducerRegs>();
    if (threadIdx.x == 0) {
      tma::prefetch_map(&map_p);
      tma::prefetch_map(&map_q);
      uint32_t it = 0;
      for (int64_t tile = first_tile; tile < tiles; tile += tile_step) {
        int64_t tp, tq;
        tile_coords(tile, s.tiles_p, s.tiles_q, &tp, &tq);
        const int32_t p0 = static_cast<int32_t>(tp * kBM), q0 = static_cast<int32_t>(tq * T::BN);
        for (int64_t ks = 0; ks < k_steps; ++ks, ++it) {
          const uint32_t stage = it % T::kStages, round = it / T::kStages;
          if (round > 0) bulk::mbar_wait(&empty[stage], (round - 1) & 1);  // its last readers are done
          uint8_t* dst = ring + stage * T::kStageBytes;
          bulk::mbar_arrive_expect(&full[stage], T::kStageBytes);
          const int32_t k0 = static_cast<int32_t>((first_step + ks) * kBK);
          tma::load_2d(dst, &map_p, k0, p0, &full[stage]);
          tma::load_2d(dst + T::kPBytes, &map_q, k0, q0, &full[stage]);
        }
      }
    }
  } else {
    // Consumers: warpgroup 1 takes P rows 0..63 of the tile, warpgroup 2 rows 64..127.
    wgmma::set_max_registers<true, kConsumerRegs>();
    const int half = warpgroup - 1;
    const int wq = warp % 4;  // warp within the warpgroup: rows 16 wq .. 16 wq + 15 of its 64
    int* buf = staging + (warp - 4) * 16 * kStagePitch;
    const uint32_t ring_u32 = smem_u32(ring);
    uint32_t it = 0;
    for (int64_t tile = first_tile; tile < tiles; tile += tile_step) {
      int64_t tp, tq;
      tile_coords(tile, s.tiles_p, s.tiles_q, &tp, &tq);

      int acc[T::BN / 2];
#pragma unroll
      for (int i = 0; i < T::BN / 2; ++i) acc[i] = 0;
      wgmma::fence_operands(acc);

      for (int64_t ks = 0; ks < k_steps; ++ks, ++it) {
        const uint32_t stage = it % T::kStages, round = it / T::kStages;
        bulk::mbar_wait(&full[stage], round & 1);
        const uint32_t p_tile = ring_u32 + stage * T::kStageBytes + half * 64 * kBK;
        const uint32_t q_tile = ring_u32 + stage * T::kStageBytes + T::kPBytes;
        const uint64_t da = wgmma::desc_k128_swizzled(p_tile), db = wgmma::desc_k128_swizzled(q_tile);
        wgmma::fence();
#pragma unroll
        for (int kk = 0; kk < kBK / 32; ++kk)
          wgmma::mma_s8<T::BN>(acc, wgmma::desc_advance(da, 32 * kk), wgmma::desc_advance(db, 32 * kk));
        wgmma::commit_group();
        // The previous stage's MMAs are done: its shared memory may be refilled.
        wgmma::wait_group<1>();
        wgmma::fence_operands(acc);
        if (ks > 0 && lane == 0) bulk::mbar_arrive(&empty[(it - 1) % T::kStages]);
      }
      wgmma::wait_group<0>();
      wgmma::fence_operands(acc);
      if (k_steps > 0 && lane == 0) bulk::mbar_arrive(&empty[(it - 1) % T::kStages]);

      const int row = half * 64 + wq * 16 + lane / 4;  // of the tile's 128
      if (T::kSplitK && splits > 1) {
        // The partial tile into this CTA's ring, row-major, for the cluster
        // to add up: every stage has landed, and once both consumer
        // warpgroups are here (named barrier 1: the producer warpgroup is not
        // part of it) no MMA still reads one.
        asm volatile("bar.sync 1, 256;\n" ::: "memory");
        int* part = reinterpret_cast<int*>(ring);
#pragma unroll
        for (int j = 0; j < T::BN / 8; ++j) {
          const int col = 8 * j + 2 * (lane % 4);
          part[row * T::BN + col] = acc[4 * j];
          part[row * T::BN + col + 1] = acc[4 * j + 1];
          part[(row + 8) * T::BN + col] = acc[4 * j + 2];
          part[(row + 8) * T::BN + col + 1] = acc[4 * j + 3];
        }
      } else {
        const int64_t p_row = tp * kBM + row - lane / 4;
        if (p_row < s.rows_p) store_tile<T::BN>(s, ep, acc, buf, p_row, tq * T::BN, lane);
      }
    }
  }
  if (T::kSplitK && splits > 1) cluster_reduce_store<T>(s, ep, reinterpret_cast<const int*>(ring), first_tile, rank, warpgroup);
#else
  __trap();  // the registry admits this kernel on sm_90a images alone
#endif
}

using TileWide = WgTile<256>;
using TileNarrow = WgTile<128>;

template <class T>
KernelFit fit_of(int device) {
  static std::once_flag once[kMaxDevices];
  static KernelFit cache[kMaxDevices];
  return cached_fit(gemm_i8_wgmma_kernel<T>, kThreads, T::kSmemBytes, device, once, cache);
}

template <class T>
Status launch(const GemmArgs& g, const Operand& p, const Operand& q, WgShape s, const DeviceLimits& lim,
              cudaStream_t stream) {
  const KernelFit fit = fit_of<T>(g.device.id);
  if (fit.blocks_per_sm == 0)
    return Status(StatusCode::cuda_error, std::string(g.fn) + " (cuda_i8_wgmma): the kernel cannot be launched on cuda:" +
                                              std::to_string(g.device.id) + " (" + shape_text(g) + ")");
  CUtensorMap map_p, map_q;
  if (!tma::encode_rows_k128(&map_p, p.data, s.rows_p, s.k, p.row_stride, kBM) ||
      !tma::encode_rows_k128(&map_q, q.data, s.rows_q, s.k, q.row_stride, T::BN))
    return Status(StatusCode::cuda_error, std::string(g.fn) +
                                              " (cuda_i8_wgmma): the driver refused the operands' tensor maps (" +
                                              shape_text(g) + "); a driver for CUDA 12 or newer is needed");
  s.tiles_q = (s.rows_q + T::BN - 1) / T::BN;
  const int64_t tiles = s.tiles_p * s.tiles_q;
  // Too few tiles for the SMs (a long K, few rows): split K over a cluster,
  // each CTA keeping at least kMinSplitSteps stages so its pipeline fills.
  s.splits = T::kSplitK ? pick_splits(fit, lim, tiles, (s.k + kBK - 1) / kBK, kMinSplitSteps) : 1;
  const int64_t grid =
      s.splits > 1 ? tiles * s.splits : std::min<int64_t>(tiles, static_cast<int64_t>(lim.sms) * fit.blocks_per_sm);
  launch_clustered(gemm_i8_wgmma_kernel<T>, grid, kThreads, T::kSmemBytes, s.splits, stream, map_p, map_q, s,
                   epilogue_params(g));
  return launch_result(g);
}

}  // namespace

bool gemm_i8_wgmma_can_run(const GemmArgs& args, std::string* why_not) {
  const int64_t m = args.a.rows, n = args.b.rows, k = args.a.k;
  if (k <= 0 || k % 16 != 0) {
    if (why_not) *why_not = "K=" + std::to_string(k) + " is not a positive multiple of 16 (16-byte tensor-copy rows)";
    return false;
  }
  // Below a 128 x 128 tile on either side most of each tile would be zeros:
  // the split-K mma.sync kernel is the one for skinny products.
  if (m < kMinSide || n < kMinSide) {
    if (why_not)
      *why_not = "M=" + std::to_string(m) + ", N=" + std::to_string(n) + ": both must be >= " +
                 std::to_string(kMinSide) + " (128-row warpgroup tiles; cuda_i8_mma takes skinny products)";
    return false;
  }
  if (m > INT32_MAX || n > INT32_MAX || k > INT32_MAX) {
    if (why_not) *why_not = "a dimension is past 2^31 (tensor-copy coordinates are 32-bit)";
    return false;
  }
  constexpr const char* kHow = "tensor copies need both";
  return int8_rows_ok(args.a, "a", 16, kHow, why_not) && int8_rows_ok(args.b, "b", 16, kHow, why_not);
}

Status gemm_i8_wgmma_run(const GemmArgs& args, Stream stream) {
  if (args.a.rows <= 0 || args.b.rows <= 0) return Status::success();
  const DeviceLimits lim = device_limits(args.device.id);

  WgShape s{};
  s.swap = args.ldc == 1 && args.ldc_n != 1;
  const Operand& p = s.swap ? args.b : args.a;
  const Operand& q = s.swap ? args.a : args.b;
  s.rows_p = p.rows;
  s.rows_q = q.rows;
  s.k = args.a.k;
  s.ld_p = s.swap ? args.ldc_n : args.ldc;
  s.ld_q = s.swap ? args.ldc : args.ldc_n;
  s.plain_i32 = args.c_dtype == DType::i32 && is_aligned(args.c, 4);
  s.tiles_p = (s.rows_p + kBM - 1) / kBM;

  const cudaStream_t cs = to_cuda(stream);
  const int64_t wide_tiles = s.tiles_p * ((s.rows_q + TileWide::BN - 1) / TileWide::BN);
  if (wide_tiles >= lim.sms) return launch<TileWide>(args, p, q, s, lim, cs);
  return launch<TileNarrow>(args, p, q, s, lim, cs);
}

}  // namespace qg::detail::cuda
