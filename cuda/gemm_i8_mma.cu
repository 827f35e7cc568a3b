// SPDX-License-Identifier: MIT
// cuda/gemm_i8_mma.cu: i8 x i8 on int8 tensor cores (sm_80+), any M, N, K.
//
// C[m, n] = sum_k A[m, k] * B[n, k], both operands int8 rows along K. One
// mma.sync.m16n8k32 (s8 x s8 -> s32) takes a 16 x 32 slice of A and an
// 8 x 32 slice of B exactly as they lie in rows along K (the A fragment is
// row-major, the B fragment column-major: both are "rows along K"), so the
// operands go global -> shared by 16-byte cp.async (a STAGES-deep pipeline)
// and shared -> registers by ldmatrix: an 8 x 8 b16 matrix is 8 rows of 16
// bytes, and ldmatrix hands lane l the 4 bytes at row l / 4, bytes 4 (l % 4):
// exactly the s8 fragment's (row g, k = 4t .. 4t + 3). The int32 sums are
// exact (validation bounds K), and every output goes through
// epilogue_store_int, which applies zero points, scales, bias, relu and the
// cast in the one fixed order.
//
// Shared memory: a stage holds BM rows of A and BN rows of B, BK bytes each,
// no padding; the 16-byte chunk c of row r sits at chunk c ^ swz(r), so the 8
// rows an ldmatrix reads (consecutive rows, one logical chunk) fall in 8
// different 16-byte bank groups: conflict-free for BK = 64 (two rows a
// 128-byte line: swz = (r / 2) % 4) and BK >= 128 (swz = r % 8).
//
// Zero points: epilogue_store_int needs the code sums of row m of A and row
// n of B. With kZP the kernel adds them up from the fragments it already
// holds: one DP4A with 0x01010101 per fragment register (4 bytes of one row),
// summed over the 4 lanes of a quad at the end. No extra loads, and nothing
// at all when no zero point is given (a separate instantiation).
//
// Tiles (launch()): big N takes 128 x 256 (8 warps of 64 x 64: 32 mmas per 8
// ldmatrix.x4) or 128 x 128; N <= 64, 32, 16 take narrow tiles whose 8 warps
// split each stage's K steps in two (WK = 2) and add their partial tiles in
// shared memory. Where the tiles are too few to fill the GPU (small N, the
// decode-like shapes), the CTAs of an sm_90 cluster share one tile, take
// contiguous runs of K stages, and add their tiles through distributed shared
// memory in rank order: no workspace, no atomics, deterministic.
//
// Tails: chunks past K, and rows past M or N, are zero-filled by cp.async
// (src-size 0 reads nothing), so the inner loop has no branches and a zero
// code adds nothing to a product or a code sum. K must be a multiple of 16
// and rows 16-byte aligned (can_run); the generic kernel takes the rest.
#include <algorithm>

#include <cooperative_groups.h>

#include "gemm_int_fast.cuh"

namespace cg = cooperative_groups;

namespace qg::detail::cuda {
namespace {

using namespace intfast;

constexpr int64_t kMaxGridTiles = 0x7FFFFFFF / kMaxSplits;

template <int BM_, int BN_, int BK_, int WM_, int WN_, int WK_, int STAGES_>
struct Tile {
  static constexpr int BM = BM_, BN = BN_, BK = BK_, WM = WM_, WN = WN_, WK = WK_, STAGES = STAGES_;
  static constexpr int kWarps = WM * WN * WK;
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int WTM = BM / WM, WTN = BN / WN;  // warp tile
  static constexpr int MT = WTM / 16, NT = WTN / 8;    // mma tiles per warp
  static constexpr int kSteps = BK / 32;               // k32 steps per stage
  static constexpr int kStepsPerWarp = kSteps / WK;
  static constexpr int kChunks = BK / 16;              // 16-byte chunks per row and stage
  static constexpr int kStageBytes = (BM + BN) * BK;
  static_assert(WTM % 16 == 0 && WTN % 16 == 0, "warp tile: whole m16 tiles and pairs of n8 tiles");
  static_assert(kSteps % WK == 0, "K steps split evenly between warps");
  static_assert(BK == 64 || BK == 128 || BK == 256, "swizzle covers BK = 64, 128, 256");
  static_assert(kThreads % kChunks == 0 && (BM * kChunks) % kThreads == 0 && (BN * kChunks) % kThreads == 0,
                "whole copy rounds");
};

// Physical 16-byte chunk of logical chunk c in row r (see the file header).
template <int BK>
__device__ __forceinline__ int swizzle(int r, int c) {
  if constexpr (BK == 64) return c ^ ((r >> 1) & 3);
  else return c ^ (r & 7);
}

// After the K loop the pipeline's memory holds the WK partial tiles, then
// (with zero points) their code sums; the cluster reduction reads slot 0.
template <class T, bool kZP>
constexpr int reduce_bytes() {
  return T::WK * (T::BM * T::BN + (kZP ? T::BM + T::BN : 0)) * 4;
}

template <class T, bool kZP>
constexpr int smem_bytes() {
  const int pipe = T::STAGES * T::kStageBytes;
  const int red = reduce_bytes<T, kZP>();
  return pipe > red ? pipe : red;
}

struct Operands {
  const int8_t* a;
  const int8_t* b;
  int64_t m, n, k, lda, ldb;
  int splits;  // CTAs of a cluster sharing one tile's K range (1: no cluster)
};

// ------------------------------------------------------------ device helpers
__device__ __forceinline__ void ldmatrix_x4(uint32_t addr, int& r0, int& r1, int& r2, int& r3) {
#if __CUDA_ARCH__ >= 800
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
               : "r"(addr));
#endif
}

// acc += A * B, s8 x s8 -> s32, one 16 x 8 x 32 tile.
__device__ __forceinline__ void mma_s8(int (&acc)[4], const int (&a)[4], int b0, int b1) {
#if __CUDA_ARCH__ >= 800
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+r"(acc[0]), "+r"(acc[1]), "+r"(acc[2]), "+r"(acc[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#else
  __trap();
#endif
}

__device__ __forceinline__ int byte_sum(int v, int acc) { return __dp4a(v, 0x01010101, acc); }

// Sum over the 4 lanes of a quad (lanes 4g .. 4g + 3), in a fixed order.
__device__ __forceinline__ int quad_sum(int v) {
  v += __shfl_xor_sync(0xFFFFFFFFu, v, 1);
  v += __shfl_xor_sync(0xFFFFFFFFu, v, 2);
  return v;
}

// Which chunks of a stage this thread copies, fixed for a tile: chunk
// tid % kChunks of rows tid / kChunks + i * (kThreads / kChunks). Chunks of
// rows past M or N, or past K, copy as zeros: src-size 0, naming the
// operand's first byte (an address inside the caller's buffer, never past it).
template <class T>
struct CopyPlan {
  static constexpr int kRowStep = T::kThreads / T::kChunks;
  static constexpr int kARows = T::BM / kRowStep, kBRows = T::BN / kRowStep;

  const int8_t* a_src[kARows];
  const int8_t* b_src[kBRows];
  uint32_t a_dst[kARows], b_dst[kBRows];  // shared offsets within a stage
  const int8_t* a_base;                   // what a zero-filling copy names as its source
  const int8_t* b_base;
  unsigned a_ok, b_ok;                    // bit i: row i is inside M / N
  int chunk;

  __device__ __forceinline__ CopyPlan(const Operands& op, int64_t m0, int64_t n0) {
    const int tid = static_cast<int>(threadIdx.x);
    chunk = tid % T::kChunks;
    const int r0 = tid / T::kChunks;
    a_base = op.a;
    b_base = op.b;
    a_ok = b_ok = 0;
#pragma unroll
    for (int i = 0; i < kARows; ++i) {
      const int r = r0 + i * kRowStep;
      const bool ok = m0 + r < op.m;
      a_ok |= ok ? 1u << i : 0u;
      a_src[i] = ok ? op.a + (m0 + r) * op.lda + 16 * chunk : op.a;
      a_dst[i] = static_cast<uint32_t>(r * T::BK + 16 * swizzle<T::BK>(r, chunk));
    }
#pragma unroll
    for (int i = 0; i < kBRows; ++i) {
      const int r = r0 + i * kRowStep;
      const bool ok = n0 + r < op.n;
      b_ok |= ok ? 1u << i : 0u;
      b_src[i] = ok ? op.b + (n0 + r) * op.ldb + 16 * chunk : op.b;
      b_dst[i] = static_cast<uint32_t>(T::BM * T::BK + r * T::BK + 16 * swizzle<T::BK>(r, chunk));
    }
  }

  // The copies of K bytes k0 .. k0 + BK - 1 into the stage at shared address
  // `stage`. A chunk past K is zero-filled (K % 16 == 0: chunks are whole).
  __device__ __forceinline__ void load_stage(uint32_t stage, int64_t k0, int64_t k) const {
    const bool in_k = k0 + 16 * chunk < k;
#pragma unroll
    for (int i = 0; i < kARows; ++i) {
      const bool ok = in_k && ((a_ok >> i) & 1u);
      cp_async<16>(stage + a_dst[i], ok ? a_src[i] + k0 : a_base, ok ? 16 : 0);
    }
#pragma unroll
    for (int i = 0; i < kBRows; ++i) {
      const bool ok = in_k && ((b_ok >> i) & 1u);
      cp_async<16>(stage + b_dst[i], ok ? b_src[i] + k0 : b_base, ok ? 16 : 0);
    }
  }
};

// The cluster's CTAs add their tiles (and code sums) through distributed
// shared memory, in rank order whatever the schedule, each CTA finishing an
// interleaved 1/splits of the tile's elements.
template <class T, bool kZP>
__device__ __forceinline__ void cluster_reduce_store(const Operands& op, const EpilogueParams& ep, int* own,
                                                     int64_t m0, int64_t n0, int rank) {
#if __CUDA_ARCH__ >= 900
  cg::cluster_group cluster = cg::this_cluster();
  cluster.sync();  // every CTA's tile is in its shared memory
  const int* own_sa = own + T::WK * T::BM * T::BN;
  const int* own_sb = own_sa + T::WK * T::BM;
  for (int i = rank * T::kThreads + static_cast<int>(threadIdx.x); i < T::BM * T::BN; i += op.splits * T::kThreads) {
    const int r = i / T::BN, c = i % T::BN;
    if (m0 + r >= op.m || n0 + c >= op.n) continue;
    uint32_t v = 0, sa = 0, sb = 0;
    for (int q = 0; q < op.splits; ++q) {
      v += static_cast<uint32_t>(cluster.map_shared_rank(own, q)[i]);
      if constexpr (kZP) {
        sa += static_cast<uint32_t>(cluster.map_shared_rank(own_sa, q)[r]);
        sb += static_cast<uint32_t>(cluster.map_shared_rank(own_sb, q)[c]);
      }
    }
    epilogue_store_int(ep, m0 + r, n0 + c, static_cast<int32_t>(v), static_cast<int32_t>(sa),
                       static_cast<int32_t>(sb));
  }
  cluster.sync();  // no CTA reuses (or leaves) its shared memory while others read it
#else
  __trap();  // the host launches clusters only where the sm_90 image runs
#endif
}

template <class T, bool kZP>
__global__ void __launch_bounds__(T::kThreads)
gemm_i8_mma_kernel(Operands op, EpilogueParams ep) {
  extern __shared__ __align__(128) uint8_t smem[];
  const uint32_t smem_base = smem_u32(smem);

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;  // mma fragment coordinates
  const int wm = warp % T::WM, wn = (warp / T::WM) % T::WN, wk = warp / (T::WM * T::WN);

  const int64_t tiles_m = (op.m + T::BM - 1) / T::BM, tiles_n = (op.n + T::BN - 1) / T::BN;
  const int64_t tiles = tiles_m * tiles_n;
  const int64_t all_stages = (op.k + T::BK - 1) / T::BK;
  // Split K: the `splits` CTAs of a cluster (consecutive blockIdx.x) share a
  // tile, each taking a contiguous run of stages.
  const int splits = op.splits, rank = static_cast<int>(blockIdx.x % splits);
  const int64_t first_stage = all_stages * rank / splits;
  const int64_t stages = all_stages * (rank + 1) / splits - first_stage;
  const int64_t k_first = first_stage * T::BK;

  // ldmatrix row addresses within a stage, fixed per thread: A rows
  // (lane % 16) of each m16 tile, chunk half lane / 16; B rows (lane % 8) of
  // n8 tile pair member lane / 16, chunk half (lane / 8) % 2.
  uint32_t a_row_off[T::MT], b_row_off[T::NT / 2];
  int a_row[T::MT], b_row[T::NT / 2];
#pragma unroll
  for (int mi = 0; mi < T::MT; ++mi) {
    a_row[mi] = wm * T::WTM + mi * 16 + (lane & 15);
    a_row_off[mi] = static_cast<uint32_t>(a_row[mi] * T::BK);
  }
#pragma unroll
  for (int np = 0; np < T::NT / 2; ++np) {
    b_row[np] = wn * T::WTN + (2 * np + (lane >> 4)) * 8 + (lane & 7);
    b_row_off[np] = static_cast<uint32_t>(T::BM * T::BK + b_row[np] * T::BK);
  }
  const int a_half = lane >> 4, b_half = (lane >> 3) & 1;

  for (int64_t tile = blockIdx.x / splits; tile < tiles; tile += gridDim.x / splits) {
    int64_t tm, tn;
    tile_coords(tile, tiles_m, tiles_n, &tm, &tn);
    const int64_t m0 = tm * T::BM, n0 = tn * T::BN;
    const CopyPlan<T> plan(op, m0, n0);

    int acc[T::MT][T::NT][4];
#pragma unroll
    for (int mi = 0; mi < T::MT; ++mi)
#pragma unroll
      for (int ni = 0; ni < T::NT; ++ni)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[mi][ni][e] = 0;
    int sa[T::MT][2], sb[T::NT];  // code sums: rows g, g + 8 of each m16 tile; column g of each n8 tile
#pragma unroll
    for (int mi = 0; mi < T::MT; ++mi) sa[mi][0] = sa[mi][1] = 0;
#pragma unroll
    for (int ni = 0; ni < T::NT; ++ni) sb[ni] = 0;

#pragma unroll
    for (int s = 0; s < T::STAGES - 1; ++s) {
      if (s < stages) plan.load_stage(smem_base + s * T::kStageBytes, k_first + s * T::BK, op.k);
      cp_async_commit();
    }

    for (int64_t s = 0; s < stages; ++s) {
      cp_async_wait<T::STAGES - 2>();
      __syncthreads();  // stage s has landed for everyone; stage s - 1 is free
      {
        const int64_t next = s + T::STAGES - 1;
        if (next < stages)
          plan.load_stage(smem_base + static_cast<uint32_t>(next % T::STAGES) * T::kStageBytes,
                          k_first + next * T::BK, op.k);
        cp_async_commit();
      }
      const uint32_t stage = smem_base + static_cast<uint32_t>(s % T::STAGES) * T::kStageBytes;

#pragma unroll
      for (int j = 0; j < T::kStepsPerWarp; ++j) {
        const int ks = wk + j * T::WK;  // k32 step within the stage: chunks 2ks, 2ks + 1
        int a[T::MT][4], b[T::NT][2];
#pragma unroll
        for (int mi = 0; mi < T::MT; ++mi)
          ldmatrix_x4(stage + a_row_off[mi] + 16 * swizzle<T::BK>(a_row[mi], 2 * ks + a_half), a[mi][0], a[mi][1],
                      a[mi][2], a[mi][3]);
#pragma unroll
        for (int np = 0; np < T::NT / 2; ++np)
          ldmatrix_x4(stage + b_row_off[np] + 16 * swizzle<T::BK>(b_row[np], 2 * ks + b_half), b[2 * np][0],
                      b[2 * np][1], b[2 * np + 1][0], b[2 * np + 1][1]);
#pragma unroll
        for (int mi = 0; mi < T::MT; ++mi)
#pragma unroll
          for (int ni = 0; ni < T::NT; ++ni) mma_s8(acc[mi][ni], a[mi], b[ni][0], b[ni][1]);
        if constexpr (kZP) {
#pragma unroll
          for (int mi = 0; mi < T::MT; ++mi) {
            sa[mi][0] = byte_sum(a[mi][2], byte_sum(a[mi][0], sa[mi][0]));
            sa[mi][1] = byte_sum(a[mi][3], byte_sum(a[mi][1], sa[mi][1]));
          }
#pragma unroll
          for (int ni = 0; ni < T::NT; ++ni) sb[ni] = byte_sum(b[ni][1], byte_sum(b[ni][0], sb[ni]));
        }
      }
    }
    cp_async_wait<0>();
    __syncthreads();  // the pipeline's shared memory becomes the reduction buffer

    if constexpr (kZP) {
#pragma unroll
      for (int mi = 0; mi < T::MT; ++mi) {
        sa[mi][0] = quad_sum(sa[mi][0]);
        sa[mi][1] = quad_sum(sa[mi][1]);
      }
#pragma unroll
      for (int ni = 0; ni < T::NT; ++ni) sb[ni] = quad_sum(sb[ni]);
    }

    if (T::WK == 1 && splits == 1) {
      // Straight from the registers. Lane (g, t) holds columns 2t, 2t + 1;
      // their code sums are with the quads g' = 2t, 2t + 1.
#pragma unroll
      for (int ni = 0; ni < T::NT; ++ni) {
        int sbc[2] = {0, 0};
        if constexpr (kZP) {
          sbc[0] = __shfl_sync(0xFFFFFFFFu, sb[ni], 8 * t);
          sbc[1] = __shfl_sync(0xFFFFFFFFu, sb[ni], 8 * t + 4);
        }
#pragma unroll
        for (int mi = 0; mi < T::MT; ++mi)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int64_t m = m0 + wm * T::WTM + mi * 16 + g + (e >> 1) * 8;
            const int64_t n = n0 + wn * T::WTN + ni * 8 + 2 * t + (e & 1);
            if (m < op.m && n < op.n) epilogue_store_int(ep, m, n, acc[mi][ni][e], sa[mi][e >> 1], sbc[e & 1]);
          }
      }
    } else {
      // Each warp's partial tile into slot wk; code sums from one warp per
      // row (wn == 0) and per column (wm == 0) of each slot.
      int* red = reinterpret_cast<int*>(smem);
      int* red_sa = red + T::WK * T::BM * T::BN;
      int* red_sb = red_sa + T::WK * T::BM;
#pragma unroll
      for (int mi = 0; mi < T::MT; ++mi)
#pragma unroll
        for (int ni = 0; ni < T::NT; ++ni)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int r = wm * T::WTM + mi * 16 + g + (e >> 1) * 8, c = wn * T::WTN + ni * 8 + 2 * t + (e & 1);
            red[(wk * T::BM + r) * T::BN + c] = acc[mi][ni][e];
          }
      if constexpr (kZP) {
        if (wn == 0 && t == 0) {
#pragma unroll
          for (int mi = 0; mi < T::MT; ++mi) {
            red_sa[wk * T::BM + wm * T::WTM + mi * 16 + g] = sa[mi][0];
            red_sa[wk * T::BM + wm * T::WTM + mi * 16 + g + 8] = sa[mi][1];
          }
        }
        if (wm == 0 && t == 0) {
#pragma unroll
          for (int ni = 0; ni < T::NT; ++ni) red_sb[wk * T::BN + wn * T::WTN + ni * 8 + g] = sb[ni];
        }
      }
      __syncthreads();
      if (splits == 1) {
        for (int i = static_cast<int>(threadIdx.x); i < T::BM * T::BN; i += T::kThreads) {
          const int r = i / T::BN, c = i % T::BN;
          if (m0 + r >= op.m || n0 + c >= op.n) continue;
          uint32_t v = 0, va = 0, vb = 0;
#pragma unroll
          for (int q = 0; q < T::WK; ++q) {
            v += static_cast<uint32_t>(red[q * T::BM * T::BN + i]);
            if constexpr (kZP) {
              va += static_cast<uint32_t>(red_sa[q * T::BM + r]);
              vb += static_cast<uint32_t>(red_sb[q * T::BN + c]);
            }
          }
          epilogue_store_int(ep, m0 + r, n0 + c, static_cast<int32_t>(v), static_cast<int32_t>(va),
                             static_cast<int32_t>(vb));
        }
      } else {
        // Fold the WK slots into slot 0 (each thread its own elements), then
        // the cluster adds its CTAs' slot 0.
        if constexpr (T::WK > 1) {
          for (int i = static_cast<int>(threadIdx.x); i < T::BM * T::BN; i += T::kThreads) {
            uint32_t v = static_cast<uint32_t>(red[i]);
#pragma unroll
            for (int q = 1; q < T::WK; ++q) v += static_cast<uint32_t>(red[q * T::BM * T::BN + i]);
            red[i] = static_cast<int>(v);
          }
          if constexpr (kZP) {
            for (int i = static_cast<int>(threadIdx.x); i < T::BM + T::BN; i += T::kThreads) {
              int* base = i < T::BM ? red_sa + i : red_sb + (i - T::BM);
              const int stride = i < T::BM ? T::BM : T::BN;
              uint32_t v = static_cast<uint32_t>(base[0]);
#pragma unroll
              for (int q = 1; q < T::WK; ++q) v += static_cast<uint32_t>(base[q * stride]);
              base[0] = static_cast<int>(v);
            }
          }
        }
        cluster_reduce_store<T, kZP>(op, ep, red, m0, n0, rank);
      }
    }
    __syncthreads();  // the next tile's prologue overwrites the reduction buffer
  }
}

// ------------------------------------------------------------ configurations
//                    BM   BN   BK  WM WN WK stages
using TileN16 = Tile<64, 16, 256, 4, 1, 2, 4>;    // N <= 16: warp 16 x 16, 8 warps, 80 KB
using TileN32 = Tile<128, 32, 128, 4, 1, 2, 4>;   // N <= 32: warp 32 x 32, 80 KB
using TileN64 = Tile<128, 64, 128, 2, 2, 2, 4>;   // N <= 64: warp 64 x 32, 96 KB
using TileMid = Tile<128, 128, 64, 2, 4, 1, 4>;   // warp 64 x 32, 64 KB: two CTAs an SM
using TileLarge = Tile<128, 256, 64, 2, 4, 1, 4>; // warp 64 x 64, 96 KB

template <class T, bool kZP>
KernelFit fit_of(int device) {
  static std::once_flag once[kMaxDevices];
  static KernelFit cache[kMaxDevices];
  return cached_fit(gemm_i8_mma_kernel<T, kZP>, T::kThreads, smem_bytes<T, kZP>(), device, once, cache);
}

template <class T>
int64_t tile_count(int64_t m, int64_t n) {
  return ((m + T::BM - 1) / T::BM) * ((n + T::BN - 1) / T::BN);
}

template <class T, bool kZP>
Status launch_tile(const GemmArgs& g, Operands op, const DeviceLimits& lim, cudaStream_t stream) {
  const KernelFit fit = fit_of<T, kZP>(g.device.id);
  if (fit.blocks_per_sm == 0)
    return Status(StatusCode::cuda_error, std::string(g.fn) + " (cuda_i8_mma): the kernel cannot be launched on cuda:" +
                                              std::to_string(g.device.id) + " (" + shape_text(g) + ")");
  const int64_t tiles = tile_count<T>(op.m, op.n);
  const int64_t stages = (op.k + T::BK - 1) / T::BK;
  // Each CTA of a split keeps at least two stages, so that its pipeline fills.
  op.splits = pick_splits(fit, lim, tiles, stages, 2);
  const int64_t grid = std::min<int64_t>(tiles, kMaxGridTiles) * op.splits;
  launch_clustered(gemm_i8_mma_kernel<T, kZP>, grid, T::kThreads, smem_bytes<T, kZP>(), op.splits, stream, op,
                   epilogue_params(g));
  return launch_result(g);
}

// The largest tiles that still give every SM work: a big tile reads each
// operand byte from shared memory fewer times per mma.
template <bool kZP>
Status launch(const GemmArgs& g, const Operands& op, const DeviceLimits& lim, cudaStream_t stream) {
  const int64_t m = op.m, n = op.n;
  if (n > 64) {
    if (n > 128 && tile_count<TileLarge>(m, n) >= lim.sms && fit_of<TileLarge, kZP>(g.device.id).blocks_per_sm > 0)
      return launch_tile<TileLarge, kZP>(g, op, lim, stream);
    return launch_tile<TileMid, kZP>(g, op, lim, stream);
  }
  if (n > 32) return launch_tile<TileN64, kZP>(g, op, lim, stream);
  if (n > 16) return launch_tile<TileN32, kZP>(g, op, lim, stream);
  return launch_tile<TileN16, kZP>(g, op, lim, stream);
}

}  // namespace

bool gemm_i8_mma_can_run(const GemmArgs& args, std::string* why_not) {
  if (args.a.k % 16 != 0) {
    if (why_not) *why_not = "K=" + std::to_string(args.a.k) + " is not a multiple of 16 (16-byte copies of rows)";
    return false;
  }
  constexpr const char* kHow = "16-byte cp.async";
  return int8_rows_ok(args.a, "a", 16, kHow, why_not) && int8_rows_ok(args.b, "b", 16, kHow, why_not);
}

Status gemm_i8_mma_run(const GemmArgs& args, Stream stream) {
  if (args.a.rows <= 0 || args.b.rows <= 0) return Status::success();
  const Operands op{static_cast<const int8_t*>(args.a.data), static_cast<const int8_t*>(args.b.data),
                    args.a.rows, args.b.rows, args.a.k, args.a.row_stride, args.b.row_stride, 1};
  const DeviceLimits lim = device_limits(args.device.id);
  const bool zp = args.epilogue.row_zero_point || args.epilogue.col_zero_point;
  return zp ? launch<true>(args, op, lim, to_cuda(stream)) : launch<false>(args, op, lim, to_cuda(stream));
}

}  // namespace qg::detail::cuda
