// SPDX-License-Identifier: MIT
// cuda/gemm_wo_gemv_mma.cu: INT4 weight-only GEMV for small batches on sm_90
// (cuda_wo_gemv_mma, N = 2..16): i4 weights with group scales (groups of 128
// or more, optional zero points) x f16 / bf16 activations, the design of
// cuda_gemv_mma (gemm_q4_0_q8_1_mma_ring.cu) with cuda_wo_gemv_bulk's
// arithmetic (wo_mma.cuh):
//
//   C[m, n] = sum_g s[m, g] * sum_{k in g} (q[m, k] - z[m, g]) * x[n, k]
//
// Why this shape. cuda_wo_gemv_bulk streams 16- or 32-row groups through a
// CTA-wide ring of bulk copies: every stage ends at a CTA barrier (or an
// `empty` mbarrier a producer warp waits on), and its activations come from
// L2 a macro step at a time. The Q4_0 kernels went the same way and
// cuda_gemv_mma, a ring a warp with the activations copied beside W, took
// 14-20 % less time than the bulk GEMV at N = 7..8 (4096 x 14336 and
// 4096 x 4096 on an H200; docs/architecture.md).
// Here each warp streams its slice of K of a 32-row group (16-row where M
// is at most 16 rows an SM) through its own two-slot cp.async ring, W and
// the N tokens' activations in the same slot, and never meets the other
// warps until the end, where their partial tiles are added in warp order.
//
// A stage is 256 values of K: per row 128 bytes of codes (eight 16-byte
// pieces), per token 512 bytes of activations (32 pieces). In the slot W's
// rows are 144 bytes apart (36 words, 4 mod 32) and the tokens' 576 (16 mod
// 32 words): the fragment loads below hit 32 banks, and an LDS.128 phase of
// eight lanes reads two tokens' 64 contiguous bytes each. A slot has room
// for one n8 tile of tokens up to N = 8 (9216 bytes with 32 rows) and two
// from N = 9 (13824); only the N tokens' pieces are copied.
//
// Fragment order, as cuda_wo_gemv_bulk: a 128-value macro step of a row is
// 16 words; lane (g, t) takes words t, t + 4, t + 8, t + 12 of rows g and
// g + 8, and mma.m16n8k16 step (i, h) takes nibble pairs (2h, 2h + 4) and
// (2h + 1, 2h + 5) of word 4i + t. The activations of lane (g', t') are the
// same K: one 16-byte load of token g' at 8 (4i + t') and two PRMTs. So a
// macro step lies in one group (groups >= 128) and its scale is one fp32 FMA
// on the exact mma sum; zero points as D - z sum x, sum x from one more mma
// against ones.
//
// The group scales (and zero points) are loaded from global memory when a
// stage's copies are issued and converted where used, as in the bulk kernel:
// any dtype, stride and alignment the weight-only kernels take.
//
// CTAs (pick_form; ring_forms.h): within one wave of 32-row groups a CTA of
// 8 warps, one an SM; where M is at most 16 rows an SM, 16-row groups so
// that every SM streams; past one wave c = ceil(groups / SMs) CTAs an SM
// of 4 warps (2 from c = 4, in waves past that; at N = 9..16 from c = 3).
// Rows past M are read from row M - 1 and never stored; columns past N read
// token N - 1.
//
// Launched early (programmatic dependent launch, grid_dependency.cuh): in a
// chain of decode GEMVs on one stream (a model's layers, a Python loop) each
// grid is launched before the one in front of it has finished, its CTAs take
// the SMs that one leaves, ask L2 for their first two stages of W and wait
// for it to complete before they read anything (x may be its output, and
// the kernel before may have written W) or write C (it may still be reading
// that memory). From Python on an H200, 4096 x 14336 bf16: 13.0-14.0 us a
// call at N = 2..4 against 14.2-15.9 launched plainly (bench/RESULTS.md).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <iterator>
#include <string>
#include <type_traits>

#include "bulk_copy.cuh"
#include "cp_async.cuh"
#include "device_limits.cuh"
#include "gemm_int_fast.cuh"
#include "grid_dependency.cuh"
#include "ring_forms.h"
#include "ring_partials.cuh"
#include "wo_mma.cuh"
#include "wo_params.cuh"

namespace qg::detail::cuda {
namespace {

using namespace intfast;
using namespace wo;

constexpr int kStageK = 256;                  // values of K a stage
constexpr int kMacroK = 128;                  // a macro step: one group at most
constexpr int kStageMacros = kStageK / kMacroK;
constexpr int kWRowBytes = kStageK / 2;       // 128: eight 16-byte pieces
constexpr int kWPitch = kWRowBytes + 16;      // 144 = 36 words, 4 mod 32
constexpr int kXRowBytes = kStageK * 2;       // 512: 32 pieces
constexpr int kXPitch = kXRowBytes + 64;      // 576 = 144 words, 16 mod 32
constexpr int kMinCols = 2, kMaxCols = 16;   // one n8 tile of tokens to N = 8, two past it
constexpr int kMinGroup = kMacroK;
constexpr int kRingSlots = 2;

__host__ __device__ constexpr int group_rows(int rt) { return 16 * rt; }
__host__ __device__ constexpr int w_bytes(int rt) { return group_rows(rt) * kWPitch; }
__host__ __device__ constexpr int slot_bytes(int nt, int rt) { return w_bytes(rt) + 8 * nt * kXPitch; }
template <int kNT, int kRT, int kW>
constexpr int smem_bytes() {
  return kW * kRingSlots * slot_bytes(kNT, kRT);
}

template <int kNT, int kRT, int kW, bool kBf16, bool kZP>
__device__ __forceinline__ void wo_mma_ring_body(const Params& p, const EpilogueParams& ep) {
  constexpr int kTokens = 8 * kNT, kRows = group_rows(kRT), kSlotBytes = slot_bytes(kNT, kRT);
  constexpr int kWBytes = w_bytes(kRT);
  constexpr int kWLane = kRows * (kWRowBytes / 16) / 32;  // 8 or 4 pieces a lane and stage
  extern __shared__ __align__(16) uint8_t smem[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  uint8_t* ring = smem + warp * kRingSlots * kSlotBytes;
  const uint32_t ring_s = smem_u32(ring);
  const int64_t row0 = static_cast<int64_t>(blockIdx.x) * kRows;
  const int n = static_cast<int>(p.n);

  const int ns = static_cast<int>(p.k / kStageK);
  auto stages_of = [&](int w) { return (w + 1) * ns / kW - w * ns / kW; };
  const int s_begin = warp * ns / kW, my = stages_of(warp);
  // Launched early (grid_dependency.cuh): this CTA may start while the
  // stream's previous kernel is finishing, often the previous layer's GEMV.
  // Until that kernel has completed it may read nothing that kernel could
  // write, W included; asking L2 for the first two stages of its rows is
  // safe (L2 is where every write lands), and has them near once the wait
  // returns. Then the next kernel may be launched the same way.
  if (lane < kRows && my > 0)
    bulk::prefetch_l2(p.w + min64(row0 + lane, p.m - 1) * p.ldw + static_cast<int64_t>(s_begin) * kWRowBytes,
                      min(my, 2) * kWRowBytes);
  wait_prerequisite();
  launch_dependents();

  // This lane's W pieces: row pc / 8, piece pc % 8 of each stage; its
  // activation pieces: piece `lane` of token j, j < N.
  const uint8_t* w_src[kWLane];
#pragma unroll
  for (int i = 0; i < kWLane; ++i) {
    const int pc = lane + 32 * i;
    w_src[i] = p.w + min64(row0 + pc / 8, p.m - 1) * p.ldw + static_cast<int64_t>(s_begin) * kWRowBytes + (pc % 8) * 16;
  }
  const uint8_t* x_src = p.x + static_cast<int64_t>(s_begin) * kXRowBytes + lane * 16;
  auto issue = [&](int i) {
    if (i >= my) return;
    const uint32_t dst = ring_s + static_cast<uint32_t>(i % kRingSlots) * kSlotBytes;
#pragma unroll
    for (int k = 0; k < kWLane; ++k) {
      const int pc = lane + 32 * k;
      cp_async<16>(dst + (pc / 8) * kWPitch + (pc % 8) * 16, w_src[k] + static_cast<int64_t>(i) * kWRowBytes, 16);
    }
#pragma unroll
    for (int j = 0; j < kTokens; ++j)
      if (j < n)
        cp_async<16>(dst + kWBytes + j * kXPitch + lane * 16, x_src + j * p.ldx + static_cast<int64_t>(i) * kXRowBytes,
                     16);
  };

  // The scales (and zero points) of this lane's rows 16 r + g + 8 h for the
  // two macro steps of stage i, as loaded.
  struct StageScales {
    uint32_t s[kStageMacros][kRT][2];
    int z[kStageMacros][kRT][2];
  };
  const uint8_t* s_row[kRT][2];
  const uint8_t* z_row[kRT][2];
#pragma unroll
  for (int r = 0; r < kRT; ++r)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int64_t row = min64(row0 + 16 * r + g + 8 * h, p.m - 1);
      s_row[r][h] = p.scales + row * p.s_stride;
      z_row[r][h] = kZP ? p.zeros + row * p.z_stride : nullptr;
    }
  auto load_scales = [&](int i, StageScales& out) {
    if (i >= my) return;
#pragma unroll
    for (int j = 0; j < kStageMacros; ++j) {
      const int64_t kk = static_cast<int64_t>(s_begin + i) * kStageK + j * kMacroK;
#pragma unroll
      for (int r = 0; r < kRT; ++r)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          out.s[j][r][h] = load_scale_bits(p, s_row[r][h], kk >> p.s_shift);
          if constexpr (kZP) out.z[j][r][h] = load_zero_int(p, z_row[r][h], kk >> p.z_shift);
        }
    }
  };

  // Where this lane reads a stage's activations: token 8 nt + g (N - 1 past
  // N), 16 bytes at 8 (4 i + t) of each macro step.
  int x_off[kNT];
#pragma unroll
  for (int nt = 0; nt < kNT; ++nt) x_off[nt] = kWBytes + min(8 * nt + g, n - 1) * kXPitch + 16 * t;
  const uint32_t bits = p.code_bits;

  issue(0);
  cp_async_commit();
  StageScales cur{}, next{};
  load_scales(0, cur);

  float acc[kRT][kNT][4] = {};
  for (int i = 0; i < my; ++i) {
    issue(i + 1);
    cp_async_commit();
    load_scales(i + 1, next);
    cp_async_wait<1>();  // stage i's group has landed; stage i + 1's may be in flight
    __syncwarp();
    const uint8_t* st = ring + (i % kRingSlots) * kSlotBytes;
#pragma unroll
    for (int j = 0; j < kStageMacros; ++j) {
      uint4 xv[kNT][4];
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
        for (int q = 0; q < 4; ++q)
          xv[nt][q] = *reinterpret_cast<const uint4*>(st + x_off[nt] + j * (kXRowBytes / 2) + 64 * q);
      uint32_t wg[kRT][4], w8[kRT][4];
#pragma unroll
      for (int r = 0; r < kRT; ++r) {
        const uint32_t* w0 = reinterpret_cast<const uint32_t*>(st + (16 * r + g) * kWPitch + j * (kWRowBytes / 2)) + t;
        const uint32_t* w1 = w0 + 8 * kWPitch / 4;
#pragma unroll
        for (int q = 0; q < 4; ++q) wg[r][q] = w0[4 * q], w8[r][q] = w1[4 * q];
      }
      float d[kRT][kNT][4] = {}, sx[kNT][4] = {};
      macro_step_mma<kRT, kNT, kBf16, kZP>(d, sx, wg, w8, xv, bits);
      // d[r][nt][e]: row 16 r + g (+ 8 for e >= 2), column 8 nt + 2t + e % 2.
#pragma unroll
      for (int r = 0; r < kRT; ++r)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int h = e / 2;
          const float s = scale_from_bits(p, cur.s[j][r][h]);
#pragma unroll
          for (int nt = 0; nt < kNT; ++nt) {
            const float v = kZP ? fmaf(-static_cast<float>(cur.z[j][r][h]), sx[nt][e], d[r][nt][e]) : d[r][nt][e];
            acc[r][nt][e] = fmaf(s, v, acc[r][nt][e]);
          }
        }
    }
    cur = next;
    __syncwarp();  // the slot is refilled by a later stage's copies
  }

  add_partials_in_warp_order<kRT, kNT, kW, kRingSlots, kSlotBytes>(
      acc, smem, warp, lane, stages_of, row0, p.m, n, ep.ldc == 1,
      [&](int64_t row, int col, float v) { epilogue_store(ep, row, col, v); });
}

template <int kNT, int kRT, int kW, int kCtas, bool kBf16, bool kZP>
__global__ void __launch_bounds__(32 * kW, 1) gemm_wo_mma_ring_entry(Params p, EpilogueParams ep) {
  wo_mma_ring_body<kNT, kRT, kW, kBf16, kZP>(p, ep);
}

template <int kNT, int kRT, int kW, int kCtas>
constexpr int launch_smem() {
  constexpr int own = smem_bytes<kNT, kRT, kW>();
  static_assert(ring_ctas_fit_exactly(own, kCtas), "kCtas such CTAs fit an SM, and one more does not");
  return ring_launch_smem(own, kCtas);
}

// The forms this kernel has instances of.
constexpr CtaForm kForms[] = {
    {1, 2, 8, 1}, {1, 2, 4, 2}, {1, 2, 4, 3}, {1, 2, 2, 4},  // 32 rows, N <= 8
    {1, 1, 8, 1},                                            // 16 rows, one wave
    {2, 2, 8, 1}, {2, 2, 4, 2}, {2, 2, 2, 4},                // 32 rows, N = 9..16
    {2, 1, 8, 1},                                            // 16 rows, one wave
};

// As cuda_gemv_mma's pick_cta at N <= 8, except past four groups an SM:
// the slots here are larger (f16 / bf16 activations: 512 bytes a token and
// stage against Q8_1's 288), so four 4-warp CTAs do not fit an SM and 2-warp
// CTAs, four an SM, run in waves. At N = 9..16 (two n8 tiles, 13824-byte
// slots) three 4-warp CTAs do not fit either, so 2-warp CTAs four an SM take
// over from three groups an SM; cuda_gemv_mma refuses N = 9..16 past three
// groups an SM, this kernel runs them (in waves past four). As for
// cuda_gemv_mma, the forms share an SM as said only while ptxas keeps the
// instances within the registers that allows (80-186 a thread at sm_90a;
// at most 168 for three 4-warp CTAs).
CtaForm pick_form(const GemmArgs& g) {
  const int64_t sms = device_limits(g.device.id).sms;
  auto per_sm = [&](int rows) { return ((g.a.rows + rows - 1) / rows + sms - 1) / sms; };
  const int nt = g.b.rows > 8 ? 2 : 1;
  if (per_sm(16) == 1) return {nt, 1, 8, 1};
  switch (per_sm(32)) {
    case 0:
    case 1: return {nt, 2, 8, 1};
    case 2: return {nt, 2, 4, 2};
    case 3: return nt == 1 ? CtaForm{1, 2, 4, 3} : CtaForm{2, 2, 2, 4};
    default: return {nt, 2, 2, 4};
  }
}

// f(kernel, shared bytes, resident CTAs an SM, threads, rows a group) for
// the instance of form `want` (one of kForms: the last is taken without a
// comparison), activation dtype and zero points.
template <bool kBf16, bool kZP, size_t I = 0, class F>
decltype(auto) with_form(const CtaForm& want, int device, F&& f) {
  constexpr CtaForm fm = kForms[I];
  if constexpr (I + 1 < std::size(kForms)) {
    if (!(want == fm)) return with_form<kBf16, kZP, I + 1>(want, device, f);
  }
  constexpr auto kernel = gemm_wo_mma_ring_entry<fm.nt, fm.rt, fm.w, fm.ctas, kBf16, kZP>;
  constexpr int smem = launch_smem<fm.nt, fm.rt, fm.w, fm.ctas>();
  return f(kernel, smem, resident_ctas_sm90<kernel>(device, 32 * fm.w, smem), 32 * fm.w, group_rows(fm.rt));
}
template <class F>
decltype(auto) with_kernel(const GemmArgs& g, F&& f) {
  const CtaForm form = pick_form(g);
  const bool bf16 = g.b.format == Format::bf16, zp = g.a.zero_points.data != nullptr;
  if (bf16) return zp ? with_form<true, true>(form, g.device.id, f) : with_form<true, false>(form, g.device.id, f);
  return zp ? with_form<false, true>(form, g.device.id, f) : with_form<false, false>(form, g.device.id, f);
}

int resident_ctas_of_instance(const GemmArgs& g) {
  return with_kernel(g, [](auto, int, int n, int, int) { return n; });
}

}  // namespace

bool gemm_wo_gemv_mma_can_run(const GemmArgs& args, std::string* why_not) {
  auto no = [&](std::string why) {
    if (why_not) *why_not = std::move(why);
    return false;
  };
  if (args.b.rows < kMinCols || args.b.rows > kMaxCols)
    return no("N=" + std::to_string(args.b.rows) + " outside " + std::to_string(kMinCols) + ".." +
              std::to_string(kMaxCols) + " (N = 1 runs faster on cuda_wo_gemv_fixed)");
  if (args.a.k % kStageK != 0)
    return no("K=" + std::to_string(args.a.k) + " is not a multiple of 256 (the kernel's ring stage)");
  if (!groups_at_least(args, kMinGroup, why_not)) return false;
  // Formats, K-contiguous 16-byte-aligned rows, scale and zero-point dtypes:
  // as the mma GEMV whose unpacking it shares.
  if (!gemm_wo_gemv_can_run(args, why_not)) return false;
  const int per_sm = resident_ctas_of_instance(args);
  return ctas_fit(per_sm, args.device.id, "sm_90", why_not);
}

Status gemm_wo_gemv_mma_run(const GemmArgs& args, Stream stream) {
  if (args.a.rows <= 0 || args.b.rows <= 0) return Status::success();
  const Params p = gemv_params(args);
  const EpilogueParams ep = epilogue_params(args);
  return with_kernel(args, [&](auto kernel, int smem, int per_sm, int threads, int rows) {
    if (per_sm <= 0)
      return Status(StatusCode::cuda_error, std::string(args.fn) + " (cuda_wo_gemv_mma): cannot launch on cuda:" +
                                                std::to_string(args.device.id) + " (" + shape_text(args) + ")");
    const int64_t grid = (args.a.rows + rows - 1) / rows;
    // Early behind whatever the stream ran before (see the kernel's start):
    // in a chain of decode GEMVs each starts on the SMs the one before it
    // leaves, with its first stages of W asked of L2.
    launch_maybe_early(kernel, dim3(static_cast<unsigned>(grid)), dim3(threads), static_cast<size_t>(smem),
                       to_cuda(stream), true, p, ep);
    return launch_result(args);
  });
}

}  // namespace qg::detail::cuda
