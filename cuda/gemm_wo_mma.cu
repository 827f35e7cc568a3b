// SPDX-License-Identifier: MIT
// cuda/gemm_wo_mma.cu: weight-only GEMM for prefill (N >= 17, K % 128 = 0; sm_80+):
// i4 weights with group scales (and zero points) x f16 / bf16 activations,
// tiled so that each weight byte read from memory serves up to 128 tokens.
//
//   C[m, n] = sum_g s[m, g] * sum_{k in g} (q[m, k] - z[m, g]) * x[n, k]
//
// The decode GEMVs stream W once and keep every token beside it; past 16
// tokens that stops fitting, and re-reading W per slice of 16 tokens (what
// cuda_wo_gemv does) costs N / 16 passes over the weights. Here a CTA owns a
// 128-row x BN-token tile of C (BN = 32, 64 or 128 by N) and walks K in
// stages of 128 values: the stage's 128 rows of codes (64 bytes each) and BN
// rows of activations (256 bytes each) go to shared memory through a
// three-deep cp.async pipeline, and eight warps (4 along M x 2 along N, 32 x
// BN/2 each) multiply them.
//
// The arithmetic is cuda_wo_gemv's, exactly: a code (and every activation)
// is an exact fp16 / bf16 number, so mma.m16n8k16 with fp32 accumulation
// gives each stage's integer-weighted sums up to fp32 rounding. Groups are
// powers of two >= 32, so every window of min(scale group, zero-point group,
// 128) values lies inside one group of each and its sums are scaled once, in fp32: one FMA an output per 128
// MACs for groups >= 128, per 64 or 32 for the smaller ones:
//   out += s * (D - z * S)     S = sum of the window's x (an mma against ones)
// K is permuted inside each 32-value segment as cuda_wo_gemv permutes it
// (wo_mma.cuh: nibble pairs (i, i + 4) of a word, the activations' halves
// matched by two PRMTs); the same permutation on both operands leaves the sums
// unchanged.
//
// Shared-memory pitches: a W row is 64 bytes + 16 (80: lane (g, t) reads word
// 4j + t of row g, banks 20 g + 4 j + t, all distinct); an activation row is
// 256 bytes + 64 (320: the 16-byte reads of lanes (g, t) in one quarter-warp
// fall in 16-byte slots 20 g + 4 j + t mod 8, all distinct).
//
// Scales (and zero points) of a stage are loaded a stage ahead into
// registers and converted where used (wo_params.cuh says why); groups under
// 128 need two or four a row and stage, so those instances take smaller
// token tiles (tile_nt). Where the
// tiles are fewer than the SMs, an sm_90 cluster splits K between CTAs,
// which add their partial tiles through distributed shared memory in rank
// order: results are deterministic.
//
// Rows past M and tokens past N are not copied (their shared-memory slots
// feed only outputs that are never stored). K is whole stages (can_run
// asks K % 128 = 0).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <mutex>
#include <type_traits>

#include "cluster_tile_sum.cuh"
#include "gemm_int_fast.cuh"
#include "wo_mma.cuh"
#include "wo_params.cuh"

namespace qg::detail::cuda {
namespace {

using namespace intfast;
using namespace wo;

constexpr int kWarps = 8;
constexpr int kThreads = 32 * kWarps;
constexpr int kWarpsM = 4, kWarpsN = 2;
constexpr int kRT = 2;                   // m16 tiles a warp: 32 rows
constexpr int kBM = kWarpsM * 16 * kRT;  // 128 rows a CTA
constexpr int kStageK = 128;             // values of K a stage: 4 segments of 32
constexpr int kStages = 3;
constexpr int kMinGroup = 32;            // a 32-value segment inside one group
constexpr int kWPitch = kStageK / 2 + 16;  // 80
constexpr int kXPitch = 2 * kStageK + 64;  // 320
constexpr int kMinCols = 17;             // N <= 16 runs on the decode GEMVs

template <int kNT>
struct Tile {
  static constexpr int kBN = kWarpsN * 8 * kNT;
  static constexpr int kWBytes = kBM * kWPitch;
  static constexpr int kXBytes = kBN * kXPitch;
  static constexpr int kStageBytes = kWBytes + kXBytes;
  static constexpr int kRingBytes = kStages * kStageBytes;
  static constexpr int kPartialBytes = kBM * kBN * 4;  // a split CTA's tile of sums
  static constexpr int kSmemBytes = kRingBytes > kPartialBytes ? kRingBytes : kPartialBytes;
};

// The instances that exist: kWin, the 32-value segments between two
// rescales (4: groups >= 128, a stage; 2: groups of 64; 1: groups of 32),
// and the token tile that fits beside that many scales and zero points in
// registers.
constexpr bool instance_exists(int nt, bool zp, int win) {
  return win == 4 ? !(zp && nt == 8) : (nt == 2 || (nt == 4 && !zp));
}

template <int kNT, bool kBf16, bool kZP, int kWin>
__global__ void __launch_bounds__(kThreads, 1) gemm_wo_mma_kernel(Params p, EpilogueParams ep) {
  using T = Tile<kNT>;
  constexpr int kWins = kStageK / 32 / kWin;  // rescales a stage
  extern __shared__ __align__(128) uint8_t smem[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;
  const int wm = warp % kWarpsM, wn = warp / kWarpsM;
  const uint32_t bits = p.code_bits;

  const int splits = p.splits, rank = static_cast<int>(blockIdx.x % splits);
  const int64_t tile = blockIdx.x / splits;
  const int64_t tiles_n = (p.n + T::kBN - 1) / T::kBN;
  const int64_t row0 = (tile / tiles_n) * kBM, col0 = (tile % tiles_n) * T::kBN;
  const int64_t steps = (p.k + kStageK - 1) / kStageK;
  const int64_t step_lo = steps * rank / splits, step_hi = steps * (rank + 1) / splits;
  const int64_t my_steps = step_hi - step_lo;

  // This thread's copies: chunk ch of rows r, r + 64 of the stage's W (128
  // rows x 4 chunks of 16 bytes) and of rows q, q + 16, ... of its
  // activations (BN rows x 16 chunks). Rows past M or N are not copied:
  // what their slots hold reaches only outputs that are never stored.
  constexpr int kWCopies = kBM * 4 / kThreads;      // 2
  constexpr int kXCopies = T::kBN * 16 / kThreads;  // 2, 4 or 8
  const int wr = static_cast<int>(threadIdx.x) / 4, wch = static_cast<int>(threadIdx.x) % 4;
  const int xr = static_cast<int>(threadIdx.x) / 16, xch = static_cast<int>(threadIdx.x) % 16;
  const uint8_t* wsrc = p.w + (row0 + wr) * p.ldw + 16 * wch;
  const uint8_t* xsrc = p.x + (col0 + xr) * p.ldx + 16 * xch;
  const int w_rows = static_cast<int>(min64(p.m - row0 - wr, kBM)), x_rows = static_cast<int>(min64(p.n - col0 - xr, T::kBN));
  const uint32_t ring = smem_u32(smem);
  const uint32_t wdst = ring + static_cast<uint32_t>(wr * kWPitch + 16 * wch);
  const uint32_t xdst = ring + static_cast<uint32_t>(T::kWBytes + xr * kXPitch + 16 * xch);
  auto copy = [&](int64_t i) {  // stage step_lo + i into slot i % kStages
    const int64_t k0 = (step_lo + i) * kStageK;
    const uint32_t slot = static_cast<uint32_t>(i % kStages) * T::kStageBytes;
#pragma unroll
    for (int c = 0; c < kWCopies; ++c)
      if (c * (kThreads / 4) < w_rows)
        cp_async<16>(wdst + slot + c * (kThreads / 4) * kWPitch, wsrc + c * (kThreads / 4) * p.ldw + k0 / 2, 16);
#pragma unroll
    for (int c = 0; c < kXCopies; ++c)
      if (c * (kThreads / 16) < x_rows)
        cp_async<16>(xdst + slot + c * (kThreads / 16) * kXPitch, xsrc + c * (kThreads / 16) * p.ldx + 2 * k0, 16);
  };

  // Rows g and g + 8 of each of this warp's m16 tiles: their scales and zero points.
  const uint8_t* srow[kRT][2];
  const uint8_t* zrow[kRT][2];
#pragma unroll
  for (int r = 0; r < kRT; ++r)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int64_t row = min64(row0 + wm * 32 + r * 16 + g + 8 * h, p.m - 1);
      srow[r][h] = p.scales + row * p.s_stride;
      zrow[r][h] = kZP ? p.zeros + row * p.z_stride : p.zeros;
    }
  uint32_t sb[kWins][kRT][2];
  int zb[kWins][kRT][2];
  auto load_scales = [&](int64_t i, uint32_t (&s)[kWins][kRT][2], int (&z)[kWins][kRT][2]) {
#pragma unroll
    for (int w = 0; w < kWins; ++w) {
      const int64_t kw = (step_lo + i) * kStageK + 32 * kWin * w;
#pragma unroll
      for (int r = 0; r < kRT; ++r)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          s[w][r][h] = load_scale_bits(p, srow[r][h], kw >> p.s_shift);
          if constexpr (kZP) z[w][r][h] = load_zero_int(p, zrow[r][h], kw >> p.z_shift);
        }
    }
  };

  float out[kRT][kNT][4];
#pragma unroll
  for (int r = 0; r < kRT; ++r)
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) out[r][nt][e] = 0.0f;

#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < my_steps) copy(s);
    cp_async_commit();
  }
  if (my_steps > 0) load_scales(0, sb, zb);

  const uint32_t ones = kBf16 ? 0x3F803F80u : 0x3C003C00u;
  const uint32_t ones4[4] = {ones, ones, ones, ones};
  for (int64_t i = 0; i < my_steps; ++i) {
    cp_async_wait<kStages - 2>();
    __syncthreads();  // stage i has landed for every thread; every warp is done with slot (i - 1) % kStages
    if (i + kStages - 1 < my_steps) copy(i + kStages - 1);
    cp_async_commit();
    uint32_t nsb[kWins][kRT][2];
    int nzb[kWins][kRT][2];
    if (i + 1 < my_steps) load_scales(i + 1, nsb, nzb);

    const uint8_t* slot = smem + (i % kStages) * T::kStageBytes;
    const uint8_t* wtile = slot + (wm * 32 + g) * kWPitch + 4 * t;
    const uint8_t* xtile = slot + T::kWBytes + (wn * 8 * kNT + g) * kXPitch + 16 * t;
    float d[kRT][kNT][4];
#pragma unroll
    for (int r = 0; r < kRT; ++r)
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) d[r][nt][e] = 0.0f;
    float sx[kNT][4];
    if constexpr (kZP) {
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) sx[nt][e] = 0.0f;
    }
#pragma unroll
    for (int j = 0; j < kStageK / 32; ++j) {
      // The activations paired as the W nibbles are: (x0, x4), (x1, x5)
      // for the first k16 step, (x2, x6), (x3, x7) for the second.
      uint32_t b[kNT][4];
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt) {
        const uint4 v = *reinterpret_cast<const uint4*>(xtile + nt * 8 * kXPitch + 64 * j);
        b[nt][0] = __byte_perm(v.x, v.z, 0x5410);
        b[nt][1] = __byte_perm(v.x, v.z, 0x7632);
        b[nt][2] = __byte_perm(v.y, v.w, 0x5410);
        b[nt][3] = __byte_perm(v.y, v.w, 0x7632);
        if constexpr (kZP) {
          mma_16816<kBf16>(sx[nt], ones4, b[nt][0], b[nt][1]);
          mma_16816<kBf16>(sx[nt], ones4, b[nt][2], b[nt][3]);
        }
      }
#pragma unroll
      for (int r = 0; r < kRT; ++r) {
        const uint32_t w0 = *reinterpret_cast<const uint32_t*>(wtile + r * 16 * kWPitch + 16 * j);
        const uint32_t w1 = *reinterpret_cast<const uint32_t*>(wtile + (r * 16 + 8) * kWPitch + 16 * j);
        const uint32_t a0[4] = {code_pair<kBf16, 0>(w0, bits), code_pair<kBf16, 0>(w1, bits),
                                code_pair<kBf16, 1>(w0, bits), code_pair<kBf16, 1>(w1, bits)};
        const uint32_t a1[4] = {code_pair<kBf16, 2>(w0, bits), code_pair<kBf16, 2>(w1, bits),
                                code_pair<kBf16, 3>(w0, bits), code_pair<kBf16, 3>(w1, bits)};
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt) {
          mma_16816<kBf16>(d[r][nt], a0, b[nt][0], b[nt][1]);
          mma_16816<kBf16>(d[r][nt], a1, b[nt][2], b[nt][3]);
        }
      }
      if ((j + 1) % kWin != 0) continue;
      // The window's group scale (and zero point), once an output; the
      // window's sums start again from zero.
      const int w = j / kWin;
#pragma unroll
      for (int r = 0; r < kRT; ++r)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const float s = scale_from_bits(p, sb[w][r][h]);
          const float z = kZP ? -static_cast<float>(zb[w][r][h]) : 0.0f;
#pragma unroll
          for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
            for (int e = 2 * h; e < 2 * h + 2; ++e) {
              float v = d[r][nt][e];
              if constexpr (kZP) v = fmaf(z, sx[nt][e], v);
              out[r][nt][e] = fmaf(s, v, out[r][nt][e]);
              d[r][nt][e] = 0.0f;
            }
        }
      if constexpr (kZP) {
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e) sx[nt][e] = 0.0f;
      }
    }
    if (i + 1 < my_steps) {
#pragma unroll
      for (int w = 0; w < kWins; ++w)
#pragma unroll
        for (int r = 0; r < kRT; ++r)
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            sb[w][r][h] = nsb[w][r][h];
            if constexpr (kZP) zb[w][r][h] = nzb[w][r][h];
          }
    }
  }
  cp_async_wait<0>();

  // Output element (r, nt, e) of this lane: row wm * 32 + 16 r + g + 8 (e / 2),
  // column wn * 8 kNT + 8 nt + 2 t + e % 2 of the tile.
  if (splits == 1) {
#pragma unroll
    for (int r = 0; r < kRT; ++r)
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int64_t row = row0 + wm * 32 + r * 16 + g + 8 * (e >> 1);
          const int64_t col = col0 + wn * 8 * kNT + nt * 8 + 2 * t + (e & 1);
          if (row < p.m && col < p.n) epilogue_store(ep, row, col, out[r][nt][e]);
        }
    return;
  }
  __syncthreads();  // every warp is done with the ring: it becomes this CTA's tile of sums
  float* own = reinterpret_cast<float*>(smem);  // [row][column]
#pragma unroll
  for (int r = 0; r < kRT; ++r)
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e)
        own[(wm * 32 + r * 16 + g + 8 * (e >> 1)) * T::kBN + wn * 8 * kNT + nt * 8 + 2 * t + (e & 1)] =
            out[r][nt][e];
  store_cluster_sum<kBM, T::kBN, kThreads>(own, splits, rank, row0, col0, p.m, p.n, ep);
}

template <int kNT, bool kBf16, bool kZP, int kWin>
KernelFit fit_of(int device) {
  static std::once_flag once[kMaxDevices];
  static KernelFit cache[kMaxDevices];
  return cached_fit(gemm_wo_mma_kernel<kNT, kBf16, kZP, kWin>, kThreads, Tile<kNT>::kSmemBytes, device, once,
                    cache);
}

// Segments between rescales: the smaller group of the scales' and the zero
// points', up to a stage.
int window_segments(const GemmArgs& args) {
  int64_t g = std::min<int64_t>(args.a.scales.group_size, kStageK);
  if (args.a.zero_points.data) g = std::min<int64_t>(g, args.a.zero_points.group_size);
  return static_cast<int>(g / 32);
}

// Token tiles of 32, 64 or 128 by N, as registers allow: 64 at most with
// zero points (the sum-x accumulators) or with groups under 128 (a stage's
// two or four rescales' scales in registers), 32 with both.
// Measured on an H200 (bf16, cold, groups of 128): the 128-token tile
// against the 64- and 32-token ones at 4096 x 14336, N = 512: 250 against
// 297 and 369 us; at N = 128 the 64-token tile was faster there (84 against
// 92 us) and slower at 14336 x 4096 (94 against 87).
int tile_nt(int64_t n, bool zp, int win) {
  const int nt = n > 64 ? 8 : (n > 32 ? 4 : 2);
  for (int c = nt; c > 2; c /= 2)
    if (instance_exists(c, zp, win)) return c;
  return 2;
}

// Calls f(kNT, kBf16, kZP, kWin) as integral constants for args' instance.
template <class F>
auto with_instance(const GemmArgs& args, F&& f) {
  const bool bf16 = args.b.format == Format::bf16, zp = args.a.zero_points.data != nullptr;
  const int win = window_segments(args);
  auto by_dtype = [&](auto nt, auto w) {
    if (bf16) return zp ? f(nt, std::true_type{}, std::true_type{}, w) : f(nt, std::true_type{}, std::false_type{}, w);
    return zp ? f(nt, std::false_type{}, std::true_type{}, w) : f(nt, std::false_type{}, std::false_type{}, w);
  };
  auto by_tile = [&](auto w) {
    int nt = tile_nt(args.b.rows, zp, decltype(w)::value);
    // The 128-token tile's 150 KB of shared memory is more than some GPUs
    // give a CTA (sm_86 / sm_89: 99 KB); the 64-token tile (90 KB) fits them.
    if (nt == 8 && (bf16 ? fit_of<8, true, false, 4>(args.device.id) : fit_of<8, false, false, 4>(args.device.id))
                           .blocks_per_sm == 0)
      nt = 4;
    switch (nt) {
      case 8: return by_dtype(std::integral_constant<int, 8>{}, w);
      case 4: return by_dtype(std::integral_constant<int, 4>{}, w);
      default: return by_dtype(std::integral_constant<int, 2>{}, w);
    }
  };
  switch (win) {
    case 4: return by_tile(std::integral_constant<int, 4>{});
    case 2: return by_tile(std::integral_constant<int, 2>{});
    default: return by_tile(std::integral_constant<int, 1>{});
  }
}

}  // namespace

bool gemm_wo_mma_can_run(const GemmArgs& args, std::string* why_not) {
  static_assert(kBM == 128, "tiled_wo_admits counts 128-row tiles");
  if (!tiled_wo_admits(args, kMinCols, "the decode GEMVs take N <= 16", kStageK, "a stage", 32, why_not))
    return false;
  if (!groups_at_least(args, kMinGroup, why_not)) return false;
  const KernelFit fit = with_instance(args, [&](auto nt, auto bf16, auto zp, auto win) {
    constexpr int kNT = decltype(nt)::value, kWin = decltype(win)::value;
    constexpr bool kZP = decltype(zp)::value;
    if constexpr (instance_exists(kNT, kZP, kWin)) return fit_of<kNT, decltype(bf16)::value, kZP, kWin>(args.device.id);
    else return KernelFit{};  // tile_nt picks none of these
  });
  return ctas_fit(fit.blocks_per_sm, args.device.id, "sm_80", why_not);
}

Status gemm_wo_mma_run(const GemmArgs& args, Stream stream) {
  if (args.a.rows <= 0 || args.b.rows <= 0) return Status::success();
  const Params p = gemv_params(args);
  const EpilogueParams ep = epilogue_params(args);
  return with_instance(args, [&](auto nt, auto bf16, auto zp, auto win) {
    constexpr int kNT = decltype(nt)::value, kWin = decltype(win)::value;
    constexpr bool kBf16 = decltype(bf16)::value, kZP = decltype(zp)::value;
    if constexpr (!instance_exists(kNT, kZP, kWin)) {
      return Status(StatusCode::unsupported, std::string(args.fn) + " (cuda_wo_mma): no such tile");  // tile_nt picks none
    } else {
      const int64_t tiles = (p.m + kBM - 1) / kBM * ((p.n + Tile<kNT>::kBN - 1) / Tile<kNT>::kBN);
      // K split where the tiles leave SMs idle, each CTA keeping at least 8 stages.
      return launch_tiled_wo(args, "cuda_wo_mma", gemm_wo_mma_kernel<kNT, kBf16, kZP, kWin>,
                             fit_of<kNT, kBf16, kZP, kWin>(args.device.id), kThreads, Tile<kNT>::kSmemBytes, tiles,
                             (p.k + kStageK - 1) / kStageK, 8, p, to_cuda(stream), ep);
    }
  });
}

}  // namespace qg::detail::cuda
