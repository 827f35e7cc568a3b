// SPDX-License-Identifier: MIT
// cuda/gemm_q4_0_q8_1_mma.cu: the tensor-core GEMM (sm_80+), any M, N, K.
//
// One int8 mma.sync.m16n8k32 is exactly one Q4_0 x Q8_1 block: 32 values of
// K, and the codes lie in shared memory as the fragments want them, so the
// operands go from global to shared memory untouched (cp.async, a multi-stage
// pipeline) and from shared memory to registers with plain loads: no repacked
// weight layout. The block's arithmetic (codes as 16 * (q - 8), the
// magic-number rescale: two FMAs per output and block, no convert) is
// q4_0_mma.cuh's, shared with cuda_gemv_bulk.
//
// Tiles: a CTA owns BM rows of W x BN rows of A and walks K eight blocks (256
// values) per pipeline stage. Its warps form WM x WN x WK: WK > 1 splits each
// stage's blocks between warps, which then add their partial tiles in shared
// memory in a fixed order (results are deterministic). Small N gets narrow
// tiles, large N 128 x 128 ones (the choice is in launch()); where the tiles
// are too few to fill the GPU, the CTAs of an sm_90 cluster split K between
// them and add their tiles through distributed shared memory
// (cluster_reduce_store, sized in launch_tile()).
//
// Copies: 16-byte cp.async when both operands' rows are 16-byte aligned (K a
// multiple of 256 with packed rows, the usual case), else 4-byte cp.async. A
// Q4_0 row may start 2 bytes off a word; the copy then starts at the word
// below, and the thread reading a row adds that row's shift (0 or 2). Words
// past the end of a row, or of M or N, are zero-filled (copy_chunk), so tails
// need no branches in the inner loop: a zero W block has d_w = 0 and
// a zero A block d_a = 0, and neither adds anything.
#include <algorithm>
#include <atomic>

#include <cooperative_groups.h>

#include "cluster_split.cuh"
#include "cp_async.cuh"
#include "device_limits.cuh"
#include "gemm_q4_0_q8_1.cuh"
#include "q4_0_mma.cuh"

namespace cg = cooperative_groups;

namespace qg::detail::cuda {
namespace {

constexpr int kBlocksPerStage = 8;                               // 256 values of K
constexpr int kWBytesPerStage = kBlocksPerStage * kQ4_0Bytes;    // 144
constexpr int kABytesPerStage = kBlocksPerStage * kQ8_1Bytes;    // 288
// A rows in shared memory: 72 words padded to 76, so that the 8 rows of a B
// fragment (word 76g + t) fall in 32 different banks (72 would give 8g + t:
// 2-way conflicts).
constexpr int kAPitchWords = kABytesPerStage / 4 + 4;
constexpr int64_t kMaxGrid = 0x7FFFFFFF;

template <int BM_, int BN_, int WM_, int WN_, int WK_, int STAGES_>
struct Tile {
  static constexpr int BM = BM_, BN = BN_, WM = WM_, WN = WN_, WK = WK_, STAGES = STAGES_;
  static constexpr int kWarps = WM * WN * WK;
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int WTM = BM / WM, WTN = BN / WN;  // warp tile
  static constexpr int MT = WTM / 16, NT = WTN / 8;    // mma tiles per warp
  static constexpr int kBlocksPerWarp = kBlocksPerStage / WK;
  static_assert(WTM % 16 == 0 && WTN % 8 == 0 && kBlocksPerStage % WK == 0, "tile shape");
};

// W rows in shared memory: 36 words with 16-byte copies (144 bytes, 16-byte
// aligned; bank 4g + t for fragment rows g: conflict-free), 37 with 4-byte
// copies (the extra word holds the 2-byte shift).
template <bool kVec16>
__host__ __device__ constexpr int w_pitch_words() {
  return kVec16 ? kWBytesPerStage / 4 : kWBytesPerStage / 4 + 1;
}

template <class T, bool kVec16>
__host__ __device__ constexpr int stage_words() {
  return T::BM * w_pitch_words<kVec16>() + T::BN * kAPitchWords;
}

// After the K loop the pipeline's memory holds the WK - 1 partial tiles of
// the K-splitting warps, then the CTA's own tile for the cluster reduction.
template <class T, bool kVec16>
constexpr int smem_bytes() {
  const int pipe = T::STAGES * stage_words<T, kVec16>() * 4;
  const int reduce = T::WK * T::BM * T::BN * 4;
  return pipe > reduce ? pipe : reduce;
}

// ------------------------------------------------------------ device helpers
__device__ __forceinline__ uint32_t lds_u16(const uint8_t* p) {
  return *reinterpret_cast<const uint16_t*>(p);
}

struct Operands {
  const uint8_t* w;
  const uint8_t* a;
  int64_t m, n, nb, ldw, lda;
  int splits;    // CTAs of a cluster sharing one tile's K range (1: no cluster)
  uint32_t k80;  // kCodeBias, from a register (gemm_q4_0_q8_1.cuh)
};

// Copies kBytes of a row segment to shared memory. Whole chunks inside the
// row go by cp.async; chunks wholly outside are zero-filled. A chunk that
// straddles the row's first or last byte (a 2-byte-shifted Q4_0 row's first
// word, a row's last partial word or 16-byte chunk) is assembled from 2-byte
// loads of what lies inside the row: cp.async with a short src-size would
// still read whole words past the end of the caller's buffer.
template <int kBytes>
__device__ __forceinline__ void copy_chunk(uint32_t* dst, const uint8_t* src, const uint8_t* begin,
                                           const uint8_t* end) {
  if (src >= begin && src + kBytes <= end) {
    cp_async<kBytes>(smem_u32(dst), src, kBytes);
  } else if (src >= end || src + kBytes <= begin) {
    cp_async<kBytes>(smem_u32(dst), begin, 0);
  } else {
#pragma unroll
    for (int w = 0; w < kBytes / 4; ++w) {
      uint32_t v = 0;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const uint8_t* p = src + 4 * w + 2 * h;
        if (p >= begin && p < end) v |= static_cast<uint32_t>(*reinterpret_cast<const uint16_t*>(p)) << (16 * h);
      }
      dst[w] = v;
    }
  }
}

// Which copies of a stage this thread issues, fixed for a tile: one W row and
// one A row, and every kThreads/rows-th chunk of each (the copy code once ran
// a division, a 64-bit multiply and bounds checks per chunk and was a quarter
// of the kernel's instructions). Rows past M or N have begin == end and copy
// as zeros.
template <class T, bool kVec16>
struct CopyPlan {
  static constexpr int kCopy = kVec16 ? 16 : 4;
  static constexpr int kWChunks = w_pitch_words<kVec16>() * 4 / kCopy;  // per row and stage
  static constexpr int kAChunks = kABytesPerStage / kCopy;
  static constexpr int kWThreadsPerRow = T::kThreads / T::BM;
  static constexpr int kAThreadsPerRow = T::kThreads / T::BN;
  static constexpr int kWPerThread = (kWChunks + kWThreadsPerRow - 1) / kWThreadsPerRow;
  static constexpr int kAPerThread = (kAChunks + kAThreadsPerRow - 1) / kAThreadsPerRow;
  static_assert(T::kThreads % T::BM == 0 && T::kThreads % T::BN == 0, "whole threads per row");

  const uint8_t *w_begin, *w_end, *a_begin, *a_end;
  int w_row, w_first, a_row, a_first;

  __device__ __forceinline__ CopyPlan(const Operands& op, int64_t m0, int64_t n0) {
    const int tid = static_cast<int>(threadIdx.x);
    w_row = tid / kWThreadsPerRow;
    w_first = tid % kWThreadsPerRow;
    a_row = tid / kAThreadsPerRow;
    a_first = tid % kAThreadsPerRow;
    const bool w_ok = m0 + w_row < op.m, a_ok = n0 + a_row < op.n;
    w_begin = op.w + (w_ok ? (m0 + w_row) * op.ldw : 0);
    w_end = w_ok ? w_begin + op.nb * kQ4_0Bytes : w_begin;
    a_begin = op.a + (a_ok ? (n0 + a_row) * op.lda : 0);
    a_end = a_ok ? a_begin + op.nb * kQ8_1Bytes : a_begin;
  }

  // Issues the copies of one stage (K blocks kb0 .. kb0 + 7). A stage that
  // lies wholly inside the row (all but a row's last, and a 2-byte-shifted
  // row's first) goes by plain cp.async with no per-chunk checks.
  __device__ __forceinline__ void load_stage(uint32_t* stage, int64_t kb0) const {
    constexpr int kWPitch = w_pitch_words<kVec16>();
    {
      // The word-aligned start of this stage's bytes (rows are 2-byte aligned).
      const uint8_t* start = reinterpret_cast<const uint8_t*>(
          reinterpret_cast<uintptr_t>(w_begin + kb0 * kQ4_0Bytes) & ~static_cast<uintptr_t>(3));
      uint32_t* dst = stage + w_row * kWPitch;
      const bool inside = start >= w_begin && start + kWChunks * kCopy <= w_end;
#pragma unroll
      for (int k = 0; k < kWPerThread; ++k) {
        const int c = w_first + k * kWThreadsPerRow;
        if (kWChunks % kWThreadsPerRow != 0 && c >= kWChunks) break;
        if (inside)
          cp_async<kCopy>(smem_u32(dst + c * (kCopy / 4)), start + c * kCopy, kCopy);
        else
          copy_chunk<kCopy>(dst + c * (kCopy / 4), start + c * kCopy, w_begin, w_end);
      }
    }
    {
      const uint8_t* start = a_begin + kb0 * kQ8_1Bytes;
      uint32_t* dst = stage + T::BM * kWPitch + a_row * kAPitchWords;
      const bool inside = start + kABytesPerStage <= a_end;
#pragma unroll
      for (int k = 0; k < kAPerThread; ++k) {
        const int c = a_first + k * kAThreadsPerRow;
        if (kAChunks % kAThreadsPerRow != 0 && c >= kAChunks) break;
        if (inside)
          cp_async<kCopy>(smem_u32(dst + c * (kCopy / 4)), start + c * kCopy, kCopy);
        else
          copy_chunk<kCopy>(dst + c * (kCopy / 4), start + c * kCopy, a_begin, a_end);
      }
    }
  }
};

// The mmas and rescales of one K block for a warp's MT x NT tiles: W's words
// from shared memory by 16-bit loads (a row may start 2 bytes into a word),
// then q4_0_mma.cuh's arithmetic. kAllFinite: every d_a of the warp is finite.
template <class T, bool kAllFinite>
__device__ __forceinline__ void block_mma(float (&acc)[T::MT][T::NT][4], const uint8_t* sw,
                                          const int (&w_off)[T::MT][2], int j, int t, const int (&b)[T::NT][2],
                                          const q4mma::AScale (&s)[T::NT][2], uint32_t k80) {
#pragma unroll
  for (int mi = 0; mi < T::MT; ++mi) {
    uint32_t q[2];
    float dw16[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const uint8_t* w = sw + w_off[mi][h] + j * kQ4_0Bytes;
      dw16[h] = half_bits_to_float(lds_u16(w)) * 0.0625f;
      q[h] = lds_u16(w + 2 + 4 * t) | (lds_u16(w + 4 + 4 * t) << 16);
    }
    q4mma::tile_block<T::NT, kAllFinite>(acc[mi], q, dw16, b, s, k80);
  }
}

// The cluster's CTAs add their tiles through distributed shared memory, in
// rank order whatever the schedule (deterministic), each CTA finishing an
// interleaved 1/splits of the tile's elements.
template <class T>
__device__ __forceinline__ void cluster_reduce_store(const Operands& op, const EpilogueParams& ep, float* own,
                                                     int64_t m0, int64_t n0, int rank) {
#if __CUDA_ARCH__ >= 900
  cg::cluster_group cluster = cg::this_cluster();
  cluster.sync();  // every CTA's tile is in its shared memory
  for (int i = rank * T::kThreads + static_cast<int>(threadIdx.x); i < T::BM * T::BN; i += op.splits * T::kThreads) {
    const int r = i / T::BN, c = i % T::BN;
    if (m0 + r >= op.m || n0 + c >= op.n) continue;
    float v = 0.0f;
    for (int q = 0; q < op.splits; ++q) v += cluster.map_shared_rank(own, q)[i];
    epilogue_store(ep, m0 + r, n0 + c, v);
  }
  cluster.sync();  // no CTA reuses (or leaves) its shared memory while others read it
#else
  __trap();  // the host launches clusters only where the sm_90 image runs
#endif
}

template <class T, bool kVec16>
__global__ void __launch_bounds__(T::kThreads)
gemm_mma_kernel(Operands op, EpilogueParams ep) {
  extern __shared__ __align__(16) uint32_t smem[];
  constexpr int kWPitch = w_pitch_words<kVec16>();
  constexpr int kStageWords = stage_words<T, kVec16>();

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;  // mma fragment coordinates
  const int wm = warp % T::WM, wn = (warp / T::WM) % T::WN, wk = warp / (T::WM * T::WN);

  const int64_t tiles_n = (op.n + T::BN - 1) / T::BN;
  const int64_t tiles = ((op.m + T::BM - 1) / T::BM) * tiles_n;
  const int64_t all_stages = (op.nb + kBlocksPerStage - 1) / kBlocksPerStage;
  // Split K: the `splits` CTAs of a cluster (consecutive blockIdx.x) share a
  // tile, each taking a contiguous run of stages.
  const int splits = op.splits, rank = static_cast<int>(blockIdx.x % splits);
  const int64_t first_stage = all_stages * rank / splits;
  const int64_t stages = all_stages * (rank + 1) / splits - first_stage;
  const int64_t kb_first = first_stage * kBlocksPerStage;

  for (int64_t tile = blockIdx.x / splits; tile < tiles; tile += gridDim.x / splits) {
    const int64_t m0 = (tile / tiles_n) * T::BM, n0 = (tile % tiles_n) * T::BN;
    const CopyPlan<T, kVec16> plan(op, m0, n0);

    // Each of this thread's W rows starts 0 or 2 bytes into its shared-memory
    // row: the same for every stage, since a stage is 144 bytes of the row.
    int w_off[T::MT][2];
#pragma unroll
    for (int mi = 0; mi < T::MT; ++mi)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int r = wm * T::WTM + mi * 16 + g + 8 * h;
        const int64_t row = m0 + r < op.m ? m0 + r : 0;
        const int shift = kVec16 ? 0 : static_cast<int>(reinterpret_cast<uintptr_t>(op.w + row * op.ldw) & 3);
        w_off[mi][h] = r * kWPitch * 4 + shift;
      }

    float acc[T::MT][T::NT][4];
#pragma unroll
    for (int mi = 0; mi < T::MT; ++mi)
#pragma unroll
      for (int ni = 0; ni < T::NT; ++ni)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[mi][ni][e] = 0.0f;

#pragma unroll
    for (int s = 0; s < T::STAGES - 1; ++s) {
      if (s < stages) plan.load_stage(smem + s * kStageWords, kb_first + s * kBlocksPerStage);
      cp_async_commit();
    }

    for (int64_t s = 0; s < stages; ++s) {
      cp_async_wait<T::STAGES - 2>();
      __syncthreads();  // stage s has landed for everyone; stage s - 1 is free
      {
        const int64_t next = s + T::STAGES - 1;
        if (next < stages)
          plan.load_stage(smem + (next % T::STAGES) * kStageWords, kb_first + next * kBlocksPerStage);
        cp_async_commit();
      }

      const uint32_t* stage = smem + (s % T::STAGES) * kStageWords;
      const uint8_t* sw = reinterpret_cast<const uint8_t*>(stage);
      const uint32_t* sa = stage + T::BM * kWPitch;

#pragma unroll
      for (int jj = 0; jj < T::kBlocksPerWarp; ++jj) {
        const int j = wk + jj * T::WK;  // block within the stage

        // B fragments and the scales of this thread's output columns 2t, 2t + 1.
        int b[T::NT][2];
        q4mma::AScale sc[T::NT][2];
        bool finite = true;
#pragma unroll
        for (int ni = 0; ni < T::NT; ++ni) {
          const uint32_t* arow = sa + (wn * T::WTN + ni * 8 + g) * kAPitchWords + j * (kQ8_1Bytes / 4);
          b[ni][0] = static_cast<int>(arow[1 + t]);
          b[ni][1] = static_cast<int>(arow[5 + t]);
#pragma unroll
          for (int c = 0; c < 2; ++c) {
            const uint32_t* scol = sa + (wn * T::WTN + ni * 8 + 2 * t + c) * kAPitchWords + j * (kQ8_1Bytes / 4);
            sc[ni][c] = q4mma::a_scale(scol[0]);
            finite = finite && isfinite(sc[ni][c].d);
          }
        }

        // One vote per block, not a branch per mma: a branch between an mma
        // and its FMAs would expose the mma's latency once per tile.
        if (__all_sync(0xFFFFFFFFu, finite))
          block_mma<T, true>(acc, sw, w_off, j, t, b, sc, op.k80);
        else
          block_mma<T, false>(acc, sw, w_off, j, t, b, sc, op.k80);
      }
    }
    cp_async_wait<0>();
    __syncthreads();  // the pipeline's shared memory becomes the reduction buffer

    float* red = reinterpret_cast<float*>(smem);
    if (T::WK > 1 && wk > 0) {
#pragma unroll
      for (int mi = 0; mi < T::MT; ++mi)
#pragma unroll
        for (int ni = 0; ni < T::NT; ++ni)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int r = wm * T::WTM + mi * 16 + g + (e >> 1) * 8, c = wn * T::WTN + ni * 8 + 2 * t + (e & 1);
            red[((wk - 1) * T::BM + r) * T::BN + c] = acc[mi][ni][e];
          }
    }
    if (T::WK > 1) __syncthreads();
    float* own = red + (T::WK - 1) * T::BM * T::BN;  // this CTA's tile, for the cluster
    if (wk == 0) {
#pragma unroll
      for (int mi = 0; mi < T::MT; ++mi)
#pragma unroll
        for (int ni = 0; ni < T::NT; ++ni)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int r = wm * T::WTM + mi * 16 + g + (e >> 1) * 8, c = wn * T::WTN + ni * 8 + 2 * t + (e & 1);
            float v = acc[mi][ni][e];
#pragma unroll
            for (int k = 1; k < T::WK; ++k) v += red[((k - 1) * T::BM + r) * T::BN + c];
            if (splits > 1)
              own[r * T::BN + c] = v;
            else if (m0 + r < op.m && n0 + c < op.n)
              epilogue_store(ep, m0 + r, n0 + c, v);
          }
    }
    if (splits > 1) cluster_reduce_store<T>(op, ep, own, m0, n0, rank);
    __syncthreads();  // the next tile's prologue overwrites red
  }
}

// ------------------------------------------------------------ configurations
//                     BM   BN  WM WN WK stages
using TileDecode = Tile<32, 8, 2, 1, 2, 6>;     // N <= 8
using TileNarrow = Tile<32, 16, 2, 1, 2, 6>;    // N <= 16
using TileSmall = Tile<64, 32, 2, 1, 2, 4>;     // N <= 32
using TileMid = Tile<64, 64, 2, 2, 1, 3>;       // N <= 64, or too few 128-wide tiles
using TileWide = Tile<64, 128, 1, 4, 2, 3>;     // big N, few W rows
using TileLarge = Tile<128, 128, 2, 4, 1, 3>;   // big M and N

// What each kernel instance can do on a device is asked once (kernel_fit).
using clusters::KernelFit;
using clusters::kMaxSplits;

template <class T, bool kVec16>
KernelFit kernel_fit(int device, const DeviceLimits& lim) {
  static std::atomic<int> cached[64];  // 1 + 2 * blocks_per_sm + clusters, written last
  static std::atomic<int> cached_clusters[64][kMaxSplits + 1];
  if (device >= 0 && device < 64) {
    const int v = cached[device].load(std::memory_order_acquire);
    if (v > 0) {
      KernelFit fit{(v - 1) / 2, ((v - 1) & 1) != 0};
      for (int c = 2; c <= kMaxSplits; ++c) fit.max_clusters[c] = cached_clusters[device][c].load(std::memory_order_relaxed);
      return fit;
    }
  }
  constexpr int kSmem = smem_bytes<T, kVec16>();
  auto* kernel = gemm_mma_kernel<T, kVec16>;
  const KernelFit fit = clusters::query_fit(kernel, T::kThreads, kSmem, lim.cc_major);
  if (fit.blocks_per_sm > 0 && device >= 0 && device < 64) {
    for (int c = 2; c <= kMaxSplits; ++c) cached_clusters[device][c].store(fit.max_clusters[c], std::memory_order_relaxed);
    cached[device].store(1 + 2 * fit.blocks_per_sm + (fit.clusters ? 1 : 0), std::memory_order_release);
  }
  return fit;
}

template <class T>
int64_t tile_count(int64_t m, int64_t n) {
  return ((m + T::BM - 1) / T::BM) * ((n + T::BN - 1) / T::BN);
}

template <class T, bool kVec16>
Status launch_tile(const GemmArgs& g, Operands op, const DeviceLimits& lim, cudaStream_t stream) {
  const KernelFit fit = kernel_fit<T, kVec16>(g.device.id, lim);
  if (fit.blocks_per_sm == 0)
    return Status(StatusCode::cuda_error, std::string(g.fn) + " (cuda): the tensor-core kernel cannot be launched on cuda:" +
                                              std::to_string(g.device.id) + " (" + gemm_shape(g) + ")");
  // Too few tiles to fill the GPU (small N, or small M): split K across a
  // cluster so that every SM streams its share of W. The largest split whose
  // clusters are all resident at once: one more than fits would run as a
  // second wave and double the time. Each CTA keeps at least two stages (512
  // values of K) so that its pipeline fills.
  const int64_t tiles = tile_count<T>(op.m, op.n);
  const int64_t slots = static_cast<int64_t>(lim.sms) * fit.blocks_per_sm;
  const int64_t stages = (op.nb + kBlocksPerStage - 1) / kBlocksPerStage;
  op.splits = 1;
  if (fit.clusters && tiles < slots) {
    for (int64_t c = std::min<int64_t>({slots / tiles, kMaxSplits, stages / 2}); c >= 2; --c)
      if (tiles <= fit.max_clusters[c]) {
        op.splits = static_cast<int>(c);
        break;
      }
  }

  const unsigned grid = static_cast<unsigned>(std::min<int64_t>(tiles, kMaxGrid / kMaxSplits) * op.splits);
  clusters::launch_clustered(gemm_mma_kernel<T, kVec16>, grid, T::kThreads, smem_bytes<T, kVec16>(), op.splits, stream,
                             op, epilogue_params(g));
  return gemm_launch_status(g);
}

// The largest warp tiles that still give every SM work, counting on split K
// where clusters exist: a big tile reads W and A fewer times from shared
// memory per mma.
template <bool kVec16>
Status launch(const GemmArgs& g, const Operands& op, const DeviceLimits& lim, cudaStream_t stream) {
  const int64_t m = op.m, n = op.n;
  // A K too short to split over a cluster (fewer than 4 stages) and too few
  // 64 x 64 tiles to give every SM one: a big tile would leave one CTA to do
  // a small problem alone (64 x 64 x 64: one CTA of 4 warps, each issuing
  // about 4,200 instructions about 17 cycles apart; 19 us on an H200 against
  // 5.5 for one thread an output, bench/RESULTS.md). 32 x 16 tiles spread it.
  const int64_t stages = (op.nb + kBlocksPerStage - 1) / kBlocksPerStage;
  if (n > 16 && stages < 4 && tile_count<TileMid>(m, n) < lim.sms)
    return launch_tile<TileNarrow, kVec16>(g, op, lim, stream);
  if (n > 64) {
    const int64_t enough = lim.cc_major >= 9 ? 1 : lim.sms * 3 / 4;
    // (A 128 x 128 tile's pipeline needs more shared memory than some GPUs have.)
    if (tile_count<TileLarge>(m, n) >= enough && kernel_fit<TileLarge, kVec16>(g.device.id, lim).blocks_per_sm > 0)
      return launch_tile<TileLarge, kVec16>(g, op, lim, stream);
    if (tile_count<TileWide>(m, n) >= enough && kernel_fit<TileWide, kVec16>(g.device.id, lim).blocks_per_sm > 0)
      return launch_tile<TileWide, kVec16>(g, op, lim, stream);
  }
  if (n > 32) return launch_tile<TileMid, kVec16>(g, op, lim, stream);
  if (n > 16) return launch_tile<TileSmall, kVec16>(g, op, lim, stream);
  if (n > 8) return launch_tile<TileNarrow, kVec16>(g, op, lim, stream);
  return launch_tile<TileDecode, kVec16>(g, op, lim, stream);
}

}  // namespace

bool gemm_mma_can_run(const GemmArgs& args, std::string* why_not) {
  return gemm_operands_aligned(args, why_not);
}

Status gemm_mma_run(const GemmArgs& args, Stream stream) {
  if (args.a.rows <= 0 || args.b.rows <= 0) return Status::success();
  const Operands op{static_cast<const uint8_t*>(args.a.data), static_cast<const uint8_t*>(args.b.data),
                    args.a.rows, args.b.rows, args.a.k / 32, args.a.row_stride, args.b.row_stride, 1,
                    kCodeBias};
  const DeviceLimits lim = device_limits(args.device.id);
  // 16-byte copies need every row's stage (144 and 288 bytes) 16-byte aligned.
  const bool vec16 = is_aligned(op.w, 16) && is_aligned(op.a, 16) && (op.m <= 1 || op.ldw % 16 == 0) &&
                     (op.n <= 1 || op.lda % 16 == 0);
  return vec16 ? launch<true>(args, op, lim, to_cuda(stream)) : launch<false>(args, op, lim, to_cuda(stream));
}

}  // namespace qg::detail::cuda
