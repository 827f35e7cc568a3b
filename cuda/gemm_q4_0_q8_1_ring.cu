// SPDX-License-Identifier: MIT
// cuda/gemm_q4_0_q8_1_ring.cu: Q4_0 x Q8_1 decode at N = 1 on sm_90, W
// streamed through a ring of shared-memory stages by cp.async, one ring a
// warp, and DP4A on it.
//
// Measured on an H200 (docs/architecture.md, "The ring GEMV"): at 4096 x
// 14336, cold, 14.7 against cuda_mmvq's 16.9 us (the read floor, a kernel
// that only reads the 33 MB, 12.2); linear_q4_0 in a CUDA graph 10.1
// against 12.5. Which geometry (4 stages of 64 blocks, 8 warps of 2 rows a
// CTA) and why only N = 1: the same section.
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
// Activations: a lane's two blocks of each column, 72 bytes, by 8-byte loads
// (kA8; 4-byte ones where A's rows are only 4-byte aligned) from global
// memory, where they stay in L2 and L1 (every warp of the GPU reads them),
// requested before the wait for the stage's W.
//
// linear_q4_0 (run_quantizing): the quantizer runs first and lets this
// kernel start early (grid_dependency.cuh); the first kStages - 1 stages of
// W, the caller's bytes, which the quantizer does not write, are requested
// before the wait for its output.
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

namespace qg::detail::cuda {
namespace {

constexpr int kRows = 2;                                   // W rows a warp streams
constexpr int kStageBlocks = 64;                           // a block pair a lane
constexpr int kStageRowBytes = kStageBlocks * kQ4_0Bytes;  // 1152
constexpr int kSlotBytes = kRows * kStageRowBytes;         // 2304
constexpr int kStages = 4;                                 // ring slots of a warp
constexpr int kWarps = 8;                                  // rings of a CTA
constexpr int kThreads = 32 * kWarps;
constexpr int kCtaRows = kWarps * kRows;
constexpr int kSmemBytes = kWarps * kStages * kSlotBytes;  // 72 KB a CTA
// N it takes. The kernel is written for any N (kCols), but from N = 2 its
// activation loads (a lane's 72 bytes a column and stage, over 18 lines a
// warp instruction) cost more than its ring saves: measured on an H200
// against cuda_mmvq (docs/architecture.md), N = 2 was 7 % faster cold but
// level or 7 % slower in linear_q4_0's CUDA graphs, and N >= 3 slower.
constexpr int kMaxCols = 1;
static_assert(kStageRowBytes % 16 == 0, "a stage's row bytes must be whole 16-byte pieces");

struct Params {
  const uint8_t* w;
  const uint8_t* x;
  int64_t m, nb, ldw, ldx;
  uint32_t k80;  // kCodeBias, from a register
};

// Lane `lane`'s two A blocks of one column (72 bytes at p, 8-byte aligned
// with kA8).
template <bool kA8>
__device__ __forceinline__ void load_a_pair(const uint8_t* p, q4dp4a::ABlock (&a)[2]) {
  uint32_t w[18];
  if constexpr (kA8) {
#pragma unroll
    for (int i = 0; i < 9; ++i) {
      const uint2 v = __ldg(reinterpret_cast<const uint2*>(p) + i);
      w[2 * i] = v.x, w[2 * i + 1] = v.y;
    }
  } else {
#pragma unroll
    for (int i = 0; i < 18; ++i) w[i] = __ldg(reinterpret_cast<const uint32_t*>(p) + i);
  }
#pragma unroll
  for (int t = 0; t < 2; ++t) {
    a[t].d = half_bits_to_float(w[9 * t] & 0xFFFFu);
#pragma unroll
    for (int k = 0; k < 8; ++k) a[t].q[k] = static_cast<int>(w[9 * t + 1 + k]);
  }
}

// Registers: __launch_bounds__ allows 128 a thread; ptxas takes 83 at N = 1,
// which (allocated 256 a warp) leaves room for two CTAs an SM, 16 warps.
// Three (at most 80 registers, __launch_bounds__(kThreads, 3)) were level to
// 4 % faster cold, but with three stages 17 % slower in linear_q4_0's CUDA
// graph at 4096 x 14336; four stages at three CTAs were not timed there
// (docs/architecture.md, the geometry table).
template <int kCols, bool kA8>
__global__ void __launch_bounds__(kThreads, 2) gemm_ring_kernel(Params p, EpilogueParams ep) {
  extern __shared__ __align__(16) uint8_t smem[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t row0 = (static_cast<int64_t>(blockIdx.x) * kWarps + warp) * kRows;
  if (row0 >= p.m) return;  // no CTA barrier below: a warp without rows just leaves
  uint8_t* ring = smem + warp * (kStages * kSlotBytes);
  const uint8_t* wrow[kRows];
#pragma unroll
  for (int r = 0; r < kRows; ++r) wrow[r] = p.w + min64(row0 + r, p.m - 1) * p.ldw;
  const int stages = static_cast<int>((p.nb + kStageBlocks - 1) / kStageBlocks);

  // Stage s of both rows into its slot: lane l copies pieces l, l + 32, l + 64.
  auto issue = [&](int s) {
    const int64_t b0 = static_cast<int64_t>(s) * kStageBlocks;
    const int pieces = static_cast<int>(min64(kStageBlocks, p.nb - b0)) * kQ4_0Bytes / 16;  // nb % 8 == 0
    const uint32_t slot = smem_u32(ring + (s % kStages) * kSlotBytes);
#pragma unroll
    for (int r = 0; r < kRows; ++r)
#pragma unroll
      for (int i = 0; i < 3; ++i) {
        const int q = lane + 32 * i;
        if (q < pieces) cp_async<16>(slot + r * kStageRowBytes + 16 * q, wrow[r] + b0 * kQ4_0Bytes + 16 * q, 16);
      }
  };
  // One commit group a stage, empty ones too, so that stage s is always
  // group s and the wait below is one constant.
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < stages) issue(s);
    cp_async_commit();
  }
  wait_prerequisite();  // A may be the previous kernel's output (linear_q4_0's quantizer)

  float acc[kRows][kCols];
#pragma unroll
  for (int r = 0; r < kRows; ++r)
#pragma unroll
    for (int j = 0; j < kCols; ++j) acc[r][j] = 0.0f;

  for (int s = 0; s < stages; ++s) {
    __syncwarp();  // every lane has read the slot that stage s + kStages - 1 refills
    if (s + kStages - 1 < stages) issue(s + kStages - 1);
    cp_async_commit();
    const int64_t b = static_cast<int64_t>(s) * kStageBlocks + 2 * lane;
    const bool active = b < p.nb;  // the row's last stage can be short
    q4dp4a::ABlock a[kCols][2];
    if (active) {
#pragma unroll
      for (int j = 0; j < kCols; ++j) load_a_pair<kA8>(p.x + j * p.ldx + b * kQ8_1Bytes, a[j]);
    }
    cp_async_wait<kStages - 1>();  // this lane's copies of stage s
    __syncwarp();                      // and every other lane's
    if (active) {
      const uint8_t* slot = ring + (s % kStages) * kSlotBytes;
      auto pair_block = [&](auto tc) {
        constexpr int t = decltype(tc)::value;
        float dw[kRows];
        uint32_t v[kRows][4];
#pragma unroll
        for (int r = 0; r < kRows; ++r)
          q4dp4a::unpack_block<t>(reinterpret_cast<const uint32_t*>(slot + r * kStageRowBytes) + 9 * lane, dw[r],
                                  v[r]);
        q4dp4a::dot_block<kRows, kCols>(acc, dw, v, p.k80, [&](int j) { return a[j][t]; });
      };
      pair_block(std::integral_constant<int, 0>{});
      pair_block(std::integral_constant<int, 1>{});
    }
  }

  // The warp's 32 partial sums of each output, by a fixed butterfly: every
  // lane ends with every total; lane r * kCols + j stores output (r, j).
#pragma unroll
  for (int r = 0; r < kRows; ++r)
#pragma unroll
    for (int j = 0; j < kCols; ++j)
#pragma unroll
      for (int o = 16; o >= 1; o /= 2) acc[r][j] += __shfl_xor_sync(0xFFFFFFFFu, acc[r][j], o);
#pragma unroll
  for (int r = 0; r < kRows; ++r)
#pragma unroll
    for (int j = 0; j < kCols; ++j)
      if (lane == r * kCols + j && row0 + r < p.m ) epilogue_store(ep, row0 + r, j, acc[r][j]);
}

// Resident CTAs per SM of one instance (device_limits.cuh): -1 without
// sm_90 code, 0 where the device cannot hold a CTA. The instructions are
// sm_80's (cp.async), but the early launch behind the quantizer needs
// griddepcontrol.wait, which an image for an older target compiles to
// nothing: there the GEMV could read the activations before they are
// written.
template <int kCols, bool kA8>
int resident_ctas(int device) {
  return resident_ctas_of<gemm_ring_kernel<kCols, kA8>>(device, kThreads, kSmemBytes, 90);
}

// f(kernel, per_sm) for the instance that runs `g`: N = 1, A 8-byte aligned
// (8-byte loads) or not.
template <class F>
decltype(auto) with_instance(const GemmArgs& g, F&& f) {
  if (is_aligned(g.b.data, 8) && (g.b.rows == 1 || g.b.row_stride % 8 == 0))
    return f(gemm_ring_kernel<1, true>, resident_ctas<1, true>(g.device.id));
  return f(gemm_ring_kernel<1, false>, resident_ctas<1, false>(g.device.id));
}

Status launch(const GemmArgs& args, Stream stream, bool early) {
  if (args.a.rows <= 0 || args.b.rows <= 0) return Status::success();
  DeviceGuard guard(args.device.id);
  if (Status s = guard_status(guard, args.fn, args.device.id); !s.ok()) return s;
  const Params p{static_cast<const uint8_t*>(args.a.data), static_cast<const uint8_t*>(args.b.data), args.a.rows,
                 args.a.k / 32, args.a.row_stride, args.b.row_stride, kCodeBias};
  return with_instance(args, [&](auto kernel, int per_sm) {
    std::string why;
    if (!ctas_fit(per_sm, args.device.id, "sm_90", &why))
      return Status(StatusCode::cuda_error, std::string(args.fn) + " (cuda_gemv_ring): " + why + " (" +
                                                gemm_shape(args) + "); qg.explain shows the kernels that can run it");
    const int64_t grid = (p.m + kCtaRows - 1) / kCtaRows;
    launch_maybe_early(kernel, dim3(static_cast<unsigned>(grid)), dim3(kThreads), kSmemBytes, to_cuda(stream), early,
                       p, epilogue_params(args));
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
              " (measured slower than cuda_mmvq there)");
  if (args.a.k % 256 != 0 || args.a.k == 0)
    return no("K=" + std::to_string(args.a.k) +
              " is not a positive multiple of 256 (stages are whole 16-byte pieces of W)");
  // cp.async.cg moves 16-byte pieces between 16-byte-aligned addresses.
  if (!is_aligned(args.a.data, 16) || (args.a.rows > 1 && args.a.row_stride % 16 != 0))
    return no("W's rows are not 16-byte aligned (ptr % 16 = " +
              std::to_string(reinterpret_cast<uintptr_t>(args.a.data) % 16) +
              ", row stride = " + std::to_string(args.a.row_stride) + ")");
  if (!gemm_operands_aligned(args, why_not)) return false;  // A's 32-bit loads
  // The grid is one CTA per kWarps row pairs.
  if ((args.a.rows + kCtaRows - 1) / kCtaRows > 0x7FFFFFFF)
    return no("M=" + std::to_string(args.a.rows) + " needs more CTAs than a grid holds");
  DeviceGuard guard(args.device.id);
  const int per_sm = guard.error() != cudaSuccess ? -1 : with_instance(args, [](auto, int n) { return n; });
  return ctas_fit(per_sm, args.device.id, "sm_90", why_not);
}

Status gemm_ring_run(const GemmArgs& args, Stream stream) { return launch(args, stream, false); }

// linear_q4_0: the quantizer, then this kernel launched early behind it
// (header).
Status gemm_ring_run_quantizing(const GemmArgs& args, const QuantizeArgs& from_float, Stream stream) {
  if (Status s = quantize_run(from_float, stream); !s.ok()) return s;
  return launch(args, stream, true);
}

}  // namespace qg::detail::cuda
