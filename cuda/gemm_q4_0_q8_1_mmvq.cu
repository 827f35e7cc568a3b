// SPDX-License-Identifier: MIT
// cuda/gemm_q4_0_q8_1_mmvq.cu: N <= 8, the decode case (ggml's mul_mat_vec_q).
//
// With N this small every W byte is used N times at most: the kernel is a
// stream over W, and what bounds it is how W reaches the registers (load
// width, bytes in flight) and, for larger N, how A does.
//
// W: 16-byte loads of whole 8-block chunks. 8 Q4_0 blocks are 144 bytes =
// 9 x 16, so when a row starts 16-byte aligned (base and row stride multiples
// of 16: packed rows with K a multiple of 256, the usual case) a lane reads
// chunk c of a row with 9 ld.global.nc.v4 and has 8 whole blocks in 36
// registers; a lane's two rows (below) put one chunk of each, 288 bytes,
// in flight before either is used. Block t of the chunk starts at byte 18t:
// for even t at a word (d = low half of word 9t/2, each code word one PRMT of
// two neighbours), for odd t in the middle of one (d = high half, the code
// words aligned). A warp instruction touches 32 lines (4 per row slot, see
// below): 8 tag-stage cycles for 512 bytes, a quarter of L1's rate; the
// sector a chunk shares with the next is read twice, from L1.
// The last nb % 8 blocks of a row, and every block of a row that is only
// 2-byte aligned, take the per-block path: 16-bit loads, as before.
//
// A: the bound for larger N is L1 -> register bandwidth (128 B/clk/SM), not
// DRAM: each lane must receive 36 bytes of A per block and column, against
// 18 bytes of W per block and row. So a lane computes kRows = 2 rows with
// each A word it loads (at N = 2 that took 19.7 to 17.9 us at 4096 x 14336
// on an H200, cold, against one row a lane with two chunks of it in
// flight; at N = 1 it measured level cold and 2 % faster in a CUDA graph),
// and the lanes of a warp are 8 row slots
// x 4 K positions: the 8 slots read the same A addresses (one tag lookup,
// L1 broadcasts). An A block is 36 bytes at 36t in the chunk's 288 bytes,
// 16-byte aligned every 4 blocks, so with 16-byte-aligned A rows it takes
// 3 or 4 vector loads (t % 4 decides which); otherwise 9 32-bit loads.
//
// Integer dot and the block layout in words: q4_0_dp4a.cuh (shared with
// cuda_gemv_ring).
//
// Work split: a CTA owns 8 * kRows rows; its warps (kw of them, 1..8, picked
// on the host) and the 4 K positions of each warp take chunks c = kpos,
// kpos + 4 kw, ... of every row. kw is picked so that, where possible, all
// CTAs are resident at once (one wave: no tail of half-empty SMs) with each
// lane owning about 2 chunks. Partial sums: fixed-order shuffles across the 4
// K positions, then the warps in shared memory in warp order: results are
// deterministic. Rows past M are computed on row M - 1 and never stored.
#include <cuda_fp16.h>

#include <algorithm>
#include <atomic>
#include <type_traits>

#include "cp_async.cuh"
#include "device_limits.cuh"
#include "gemm_q4_0_q8_1.cuh"
#include "q4_0_dp4a.cuh"
#include "quant_block.h"

namespace qg::detail::cuda {
namespace {

constexpr int kKLanes = 4;                 // K positions per warp (lanes of a row slot)
constexpr int kSlots = 32 / kKLanes;       // row slots per warp
constexpr int kMaxWarps = 8;               // warps of a CTA, all on the same rows
constexpr int kChunkBlocks = 8;            // 8 Q4_0 blocks = 144 bytes = 9 x 16
constexpr int kWChunkBytes = kChunkBlocks * kQ4_0Bytes;  // 144
constexpr int kAChunkBytes = kChunkBlocks * kQ8_1Bytes;  // 288 = 18 x 16
constexpr int64_t kMaxGrid = 0x7FFFFFFF;

constexpr int kLaneRows = 2;  // W rows per lane (header: A is the bound)
constexpr int kCtaRows = kSlots * kLaneRows;

__device__ __forceinline__ int4 ldg16(const uint8_t* p) { return __ldg(reinterpret_cast<const int4*>(p)); }
__device__ __forceinline__ int2 ldg8(const uint8_t* p) { return __ldg(reinterpret_cast<const int2*>(p)); }
__device__ __forceinline__ int ldg4(const uint8_t* p) { return __ldg(reinterpret_cast<const int*>(p)); }

// f(integral_constant<int, I>) for I = kBegin .. kEnd - 1: the chunk's block
// index must be a constant (register indices, the A load pattern).
template <int kBegin, int kEnd, class F>
__device__ __forceinline__ void static_for(F&& f) {
  if constexpr (kBegin < kEnd) {
    f(std::integral_constant<int, kBegin>{});
    static_for<kBegin + 1, kEnd>(f);
  }
}

using q4dp4a::ABlock;
using q4dp4a::dot_block;
using q4dp4a::load_a_words;

// Block t of a 16-byte-aligned A chunk (p = chunk + 36t, so p % 16 = 4 (t % 4)):
// the widest aligned loads that cover its 36 bytes.
template <int kPhase>
__device__ __forceinline__ ABlock load_a_vec(const uint8_t* p) {
  ABlock b;
  uint32_t ds;
  if constexpr (kPhase == 0) {  // 0 | 16 | 32
    const int4 x = ldg16(p), y = ldg16(p + 16);
    ds = x.x;
    b.q[0] = x.y, b.q[1] = x.z, b.q[2] = x.w;
    b.q[3] = y.x, b.q[4] = y.y, b.q[5] = y.z, b.q[6] = y.w;
    b.q[7] = ldg4(p + 32);
  } else if constexpr (kPhase == 1) {  // 4 | 8 | 16 | 32 (mod 16)
    ds = ldg4(p);
    const int2 x = ldg8(p + 4);
    const int4 y = ldg16(p + 12);
    const int2 z = ldg8(p + 28);
    b.q[0] = x.x, b.q[1] = x.y;
    b.q[2] = y.x, b.q[3] = y.y, b.q[4] = y.z, b.q[5] = y.w;
    b.q[6] = z.x, b.q[7] = z.y;
  } else if constexpr (kPhase == 2) {  // 8 | 16 | 32 (mod 16); the last load
    // runs 4 bytes into block t + 1, which is in the same chunk (t <= 6).
    const int2 x = ldg8(p);
    const int4 y = ldg16(p + 8), z = ldg16(p + 24);
    ds = x.x;
    b.q[0] = x.y;
    b.q[1] = y.x, b.q[2] = y.y, b.q[3] = y.z, b.q[4] = y.w;
    b.q[5] = z.x, b.q[6] = z.y, b.q[7] = z.z;
  } else {  // 12 | 16 | 32 (mod 16)
    ds = ldg4(p);
    const int4 x = ldg16(p + 4), y = ldg16(p + 20);
    b.q[0] = x.x, b.q[1] = x.y, b.q[2] = x.z, b.q[3] = x.w;
    b.q[4] = y.x, b.q[5] = y.y, b.q[6] = y.z, b.q[7] = y.w;
  }
  b.d = half_bits_to_float(ds & 0xFFFFu);
  return b;
}

// Block b of each row, any 2-byte-aligned row: 16-bit loads of W, 32-bit of A.
template <int kRows, int kCols>
__device__ __forceinline__ void dot_block_any(float (&acc)[kRows][kCols], const uint8_t* const (&wrow)[kRows],
                                              const uint8_t* a, int64_t lda, int64_t b, uint32_t k80) {
  float dw[kRows];
  uint32_t v[kRows][4];
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    const uint8_t* wb = wrow[r] + b * kQ4_0Bytes;
    dw[r] = half_bits_to_float(load_u16_b2(wb)) * 0.0625f;
#pragma unroll
    for (int k = 0; k < 4; ++k) v[r][k] = static_cast<uint32_t>(load_int_b2(wb + 2 + 4 * k));
  }
  const uint8_t* ab = a + b * kQ8_1Bytes;
  dot_block<kRows, kCols>(acc, dw, v, k80, [&](int j) { return load_a_words(ab + j * lda); });
}

// Chunk c (blocks 8c .. 8c + 7) of each of a lane's rows (16-byte aligned):
// 9 16-byte loads a row.
template <int kRows>
__device__ __forceinline__ void load_w_chunk(uint32_t (&w)[kRows][36], const uint8_t* const (&wrow)[kRows],
                                             int64_t c) {
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    const uint8_t* p = wrow[r] + c * kWChunkBytes;
#pragma unroll
    for (int i = 0; i < 9; ++i) {
      const int4 x = ldg16(p + 16 * i);
      w[r][4 * i] = x.x, w[r][4 * i + 1] = x.y, w[r][4 * i + 2] = x.z, w[r][4 * i + 3] = x.w;
    }
  }
}

// The loaded chunk's 8 blocks against A's, A rows 16-byte aligned (kAVec) or
// only 4-byte aligned.
template <int kRows, int kCols, bool kAVec>
__device__ __forceinline__ void dot_loaded_chunk(float (&acc)[kRows][kCols], const uint32_t (&w)[kRows][36],
                                                 const uint8_t* a, int64_t lda, int64_t c, uint32_t k80) {
  const uint8_t* ac = a + c * kAChunkBytes;
  static_for<0, kChunkBlocks>([&](auto tc) {
    constexpr int t = decltype(tc)::value;
    float dw[kRows];
    uint32_t v[kRows][4];
#pragma unroll
    for (int r = 0; r < kRows; ++r) q4dp4a::unpack_block<t>(w[r], dw[r], v[r]);
    const uint8_t* ab = ac + t * kQ8_1Bytes;
    dot_block<kRows, kCols>(acc, dw, v, k80, [&](int j) {
      if constexpr (kAVec) {
        return load_a_vec<t % 4>(ab + j * lda);
      } else {
        return load_a_words(ab + j * lda);
      }
    });
  });
}

template <int kCols, bool kWVec, bool kAVec>
__global__ void __launch_bounds__(32 * kMaxWarps, 2)
gemm_mmvq_kernel(const uint8_t* __restrict__ w, const uint8_t* __restrict__ a, EpilogueParams ep,
                 int64_t m, int64_t nb, int64_t ldw, int64_t lda, uint32_t k80) {
  constexpr int kRows = kLaneRows;
  __shared__ float partial[kMaxWarps][kCtaRows * kCols];
  const int warps = blockDim.x / 32;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int slot = lane / kKLanes;
  const int kpos = warp * kKLanes + lane % kKLanes;  // this lane's K position, 0 .. stride - 1
  const int stride = warps * kKLanes;

  for (int64_t row0 = static_cast<int64_t>(blockIdx.x) * kCtaRows; row0 < m;
       row0 += static_cast<int64_t>(gridDim.x) * kCtaRows) {
    const uint8_t* wrow[kRows];
#pragma unroll
    for (int r = 0; r < kRows; ++r) wrow[r] = w + min(row0 + slot * kRows + r, m - 1) * ldw;

    float acc[kRows][kCols];
#pragma unroll
    for (int r = 0; r < kRows; ++r)
#pragma unroll
      for (int j = 0; j < kCols; ++j) acc[r][j] = 0.0f;

    int64_t b0 = 0;  // first block of the per-block path
    if constexpr (kWVec) {
      const int64_t chunks = nb / kChunkBlocks;
      // All 9 x kRows loads of a chunk first: 288 bytes in flight per lane.
      for (int64_t c = kpos; c < chunks; c += stride) {
        uint32_t w[kRows][36];
        load_w_chunk<kRows>(w, wrow, c);
        dot_loaded_chunk<kRows, kCols, kAVec>(acc, w, a, lda, c, k80);
      }
      b0 = chunks * kChunkBlocks;
    }
    for (int64_t b = b0 + kpos; b < nb; b += stride) dot_block_any<kRows, kCols>(acc, wrow, a, lda, b, k80);

    // The 4 K positions of a row slot (lanes 4s .. 4s + 3), then the warps.
#pragma unroll
    for (int r = 0; r < kRows; ++r)
#pragma unroll
      for (int j = 0; j < kCols; ++j) {
        float v = acc[r][j];
        v += __shfl_xor_sync(0xFFFFFFFFu, v, 1);
        v += __shfl_xor_sync(0xFFFFFFFFu, v, 2);
        if (lane % kKLanes == 0) partial[warp][(slot * kRows + r) * kCols + j] = v;
      }
    __syncthreads();
    for (int o = threadIdx.x; o < kCtaRows * kCols; o += blockDim.x) {
      float v = partial[0][o];
      for (int i = 1; i < warps; ++i) v += partial[i][o];
      const int64_t row = row0 + o / kCols;
      if (row < m) epilogue_store(ep, row, o % kCols, v);
    }
    __syncthreads();  // partial[] is reused by the next row group
  }
}

// Resident CTAs per SM of `kernel` at each CTA size 32 .. 256, asked once per
// device (registers decide; 0 where the query failed).
template <class Kernel>
int resident_ctas(Kernel kernel, int device, int warps, std::atomic<int> (&cache)[64][kMaxWarps + 1]) {
  if (device >= 0 && device < 64) {
    const int v = cache[device][warps].load(std::memory_order_relaxed);
    if (v > 0) return v - 1;
  }
  int blocks = 0;
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, 32 * warps, 0) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  if (device >= 0 && device < 64) cache[device][warps].store(blocks + 1, std::memory_order_relaxed);
  return blocks;
}

template <int kCols, bool kWVec, bool kAVec>
void launch(const GemmArgs& g, cudaStream_t stream) {
  static std::atomic<int> occupancy[64][kMaxWarps + 1];
  auto* kernel = gemm_mmvq_kernel<kCols, kWVec, kAVec>;
  const int64_t m = g.a.rows, nb = g.a.k / 32;
  const int64_t ctas = (m + kCtaRows - 1) / kCtaRows;
  // Units of K work per row: 8-block chunks (plus a short tail), or blocks.
  const int64_t units = kWVec ? std::max<int64_t>(nb / kChunkBlocks, 1) : std::max<int64_t>(nb, 1);
  // No more warps than give each K position a unit of work.
  const int max_warps =
      static_cast<int>(std::clamp<int64_t>((units + kKLanes - 1) / kKLanes, 1, kMaxWarps));
  // The most warps per CTA with which every CTA is resident at once; if none
  // fits, there are several waves anyway and short CTAs balance them best.
  int warps = max_warps;
  const int sms = device_limits(g.device.id).sms;
  for (int kw = max_warps; kw >= 1; --kw) {
    const int per_sm = resident_ctas(kernel, g.device.id, kw, occupancy);
    if (per_sm > 0 && ctas <= static_cast<int64_t>(per_sm) * sms) {
      warps = kw;
      break;
    }
  }
  const int64_t grid = std::min<int64_t>(ctas, kMaxGrid);
  kernel<<<static_cast<unsigned>(grid), 32 * warps, 0, stream>>>(
      static_cast<const uint8_t*>(g.a.data), static_cast<const uint8_t*>(g.b.data), epilogue_params(g), m, nb,
      g.a.row_stride, g.b.row_stride, kCodeBias);
}

template <int kCols>
void launch_cols(const GemmArgs& g, cudaStream_t stream) {
  // 16-byte W chunks need every row to start 16-byte aligned; A's vector
  // loads need the same of A's rows. A single row's stride is never used.
  const bool w16 = is_aligned(g.a.data, 16) && (g.a.rows == 1 || g.a.row_stride % 16 == 0);
  const bool a16 = is_aligned(g.b.data, 16) && (g.b.rows == 1 || g.b.row_stride % 16 == 0);
  if (!w16) launch<kCols, false, false>(g, stream);
  else if (a16) launch<kCols, true, true>(g, stream);
  else launch<kCols, true, false>(g, stream);
}

}  // namespace

bool gemm_mmvq_can_run(const GemmArgs& args, std::string* why_not) {
  if (args.b.rows > 8) {
    if (why_not) *why_not = "N=" + std::to_string(args.b.rows) + " > 8 (GEMV kernel)";
    return false;
  }
  return gemm_operands_aligned(args, why_not);
}

Status gemm_mmvq_run(const GemmArgs& args, Stream stream) {
  // K = 0 needs no special case: no blocks, and C is written with zeros.
  if (args.a.rows <= 0 || args.b.rows <= 0) return Status::success();
  const cudaStream_t st = to_cuda(stream);
  switch (args.b.rows) {
    case 1: launch_cols<1>(args, st); break;
    case 2: launch_cols<2>(args, st); break;
    case 3: launch_cols<3>(args, st); break;
    case 4: launch_cols<4>(args, st); break;
    case 5: launch_cols<5>(args, st); break;
    case 6: launch_cols<6>(args, st); break;
    case 7: launch_cols<7>(args, st); break;
    case 8: launch_cols<8>(args, st); break;
    default:
      return Status(StatusCode::unsupported,
                    std::string(args.fn) + " (cuda_mmvq): N > 8 (" + gemm_shape(args) + ")");
  }
  return gemm_launch_status(args);
}

}  // namespace qg::detail::cuda
