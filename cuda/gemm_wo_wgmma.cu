// SPDX-License-Identifier: MIT
// cuda/gemm_wo_wgmma.cu: weight-only GEMM for prefill on Hopper's warpgroup
// MMAs (sm_90a): i4 weights with group scales (groups >= 128; int8 zero
// points or none) x f16 / bf16 activations, N >= 33, K % 128 = 0.
//
//   C[m, n] = sum_g s[m, g] * sum_{k in g} (q[m, k] - z[m, g]) * x[n, k]
//
// cuda_wo_mma feeds mma.sync from registers: every warp unpacks its own
// fragments of W and permutes the activations' halves to match them, about
// four instructions an MMA from two warps a scheduler, and stays near 235
// TFLOP/s. Here W is decoded once a CTA and stage into shared memory, as
// the exact fp16 / bf16 numbers q - z in wgmma's K-major layout with the
// 128-byte swizzle; the activations are copied next to it as they are (they
// already are K-major rows: only the swizzle is applied, by where each
// 16-byte copy lands); and wgmma.m64nNk16 reads both operands from shared
// memory (SS). The issue slots are left to the unpacking, the copies and
// the group rescale, and all of them overlap the MMAs of the stage before.
//
// Tile: 128 rows of W x BN tokens a CTA (BN = 64 or 128 by N), two
// warpgroups of 64 rows each. K goes in stages of 64 values (one 128-byte
// swizzled row of fp16 / bf16): the stage's 128 rows x 32 bytes of codes and
// BN rows x 128 bytes of activations travel through a kStages-deep cp.async
// ring (one commit group a stage and thread). A stage i, one barrier:
//   1. its four MMAs a warpgroup are issued (decoded buffer i % 2, ring slot
//      i % kStages) and committed; wgmma.wait_group 1 then means stage
//      i - 1's MMAs are done, so this warpgroup's rows of the other decoded
//      buffer are free (each warpgroup decodes the 64 rows its MMAs read);
//   2. while stage i's MMAs run, the copies of stage i + kStages - 2 are
//      issued into the slot of stage i - 2 (both warpgroups waited for its
//      MMAs before the last barrier) and stage i + 1's codes are decoded;
//   3. at a window's last stage, wgmma.wait_group 0 and the rescale;
//   4. the wait for stage i + 2's copies, a proxy fence (wgmma reads shared
//      memory through the async proxy) and the barrier.
// Windows: two stages (128 values) for groups of 128, four for larger ones,
// each inside one group, so a window's MMAs run on across its stages into
// one set of fp32 sums (scale-d = 0 at its first) that is scaled once:
// out += s * D, one FMA an output per 128 or 256 MACs. (Two sets of sums,
// one rescaled while the next window's MMAs run, made ptxas serialize every
// wgmma, C7514, and a run-time window end in a loop over stages made it
// inject waits, C7517: a window's stages are unrolled.) Zero points are
// decoded into the operand: q - z is an exact fp16 / bf16 number for int8 z
// (|q - z| <= 136 < 2^8), so the sums are those of (q - z) x with no sum of
// x; int32 zero points are left to cuda_wo_mma, which applies them through
// sums of x.
//
// The sums over K differ from the mma.sync kernels' only in the order in
// which fp32 adds them (each product is exact), well inside the GEMM
// contract's NMSE (docs/numerics.md). Rows past M and tokens past N are not
// copied: their slots feed only outputs that are never stored. Where the
// tiles are fewer than the SMs an sm_90 cluster splits K by whole windows and
// adds its tiles through distributed shared memory in rank order
// (cluster_tile_sum.cuh), so results are deterministic.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <mutex>
#include <type_traits>

#include "cluster_tile_sum.cuh"
#include "gemm_int_fast.cuh"
#include "wgmma.cuh"
#include "wo_mma.cuh"
#include "wo_params.cuh"

// The sm_80 pass of a multi-arch build compiles the kernel's MMAs out (wgmma
// is sm_90a only), and helpers left unreferenced would warn.
#pragma nv_diag_suppress 177

namespace qg::detail::cuda {
namespace {

using namespace intfast;
using namespace wo;

constexpr int kThreads = 256;     // two warpgroups
constexpr int kBM = 128;          // W rows a CTA: 64 a warpgroup
constexpr int kStageK = 64;       // values of K a stage: one swizzled 128-byte row of fp16 / bf16
constexpr int kMinWindowK = 128;  // values of K between two rescales: 128 (groups of 128) or 256
constexpr int kStages = 6;        // ring depth: a copy is issued four stages before its use
constexpr int kMinGroup = kMinWindowK;
constexpr int kMinCols = 33;      // below, cuda_wo_mma (measured: 35.6 against 48.8 us at 4096 x 14336, N = 32)
// A W row's 32 bytes of codes a stage, padded to 48: the decode's 16-byte
// reads of eight consecutive rows fall in 16-byte bank slots 3 r + c mod 8,
// all distinct.
constexpr int kWPitch = kStageK / 2 + 16;
constexpr int kSwizzleRow = 128;              // bytes of a swizzled row: 64 fp16 / bf16 values
constexpr int kDecBytes = kBM * kSwizzleRow;  // a stage of decoded W: 16 KB

template <int kBN>
struct Tile {
  // A ring slot: the activations first (a 1024-byte-aligned swizzled tile),
  // then the codes.
  static constexpr int kXBytes = kBN * kSwizzleRow;
  static constexpr int kWBytes = kBM * kWPitch;
  static constexpr int kSlotBytes = (kXBytes + kWBytes + 1023) / 1024 * 1024;
  static constexpr int kDecOffset = kStages * kSlotBytes;  // two decoded buffers after the ring
  static constexpr int kUsedBytes = kDecOffset + 2 * kDecBytes;
  static constexpr int kPartialBytes = kBM * kBN * 4;  // a split CTA's tile of sums, over the ring
  // + 1024: the dynamic shared memory's start is rounded up to the swizzle's 1024 bytes.
  static constexpr int kSmemBytes = (kUsedBytes > kPartialBytes ? kUsedBytes : kPartialBytes) + 1024;
};

// One pair of codes (the low nibbles of bytes 0 and 2 of r) as exact fp16 /
// bf16 numbers q - z: the exponent bits and two's complement flip of
// code_bits, then the subtraction that leaves q (and, with zero points, z).
template <bool kBf16, bool kZP>
__device__ __forceinline__ uint32_t decode_pair(uint32_t r, uint32_t bits, uint32_t z2) {
  uint32_t q = sub2<kBf16>((r & 0x000F000Fu) ^ bits, bits);
  if constexpr (kZP) q = sub2<kBf16>(q, z2);
  return q;
}

// z in both halves of an fp16 / bf16 pair (exact: |z| <= 128).
template <bool kBf16>
__device__ __forceinline__ uint32_t zero_pair(int z) {
  uint32_t v;
  if constexpr (kBf16) {
    const __nv_bfloat162 h = __bfloat162bfloat162(__int2bfloat16_rn(z));
    v = *reinterpret_cast<const uint32_t*>(&h);
  } else {
    const __half2 h = __half2half2(__int2half_rn(z));
    v = *reinterpret_cast<const uint32_t*>(&h);
  }
  return v;
}

template <int kBN, bool kBf16, bool kZP, int kWinStages>
__global__ void __launch_bounds__(kThreads, 1) gemm_wo_wgmma_kernel(Params p, EpilogueParams ep) {
  using T = Tile<kBN>;
  constexpr int kAcc = kBN / 2;  // fp32 sums a thread of an m64 x BN tile
  extern __shared__ uint8_t smem_raw[];
  // The swizzle repeats every 1024 bytes of the shared address, so every tile starts 1024-aligned.
  const uint32_t raw = smem_u32(smem_raw);
  const uint32_t base = (raw + 1023u) & ~1023u;
  uint8_t* smem = smem_raw + (base - raw);
  const int tid = static_cast<int>(threadIdx.x);
  const int wg = tid / 128, warp = (tid / 32) % 4, lane = tid % 32, g = lane / 4, t = lane % 4;
  const uint32_t bits = p.code_bits;

  const int splits = p.splits, rank = static_cast<int>(blockIdx.x % splits);
  const int64_t tile = blockIdx.x / splits;
  const int64_t tiles_n = (p.n + kBN - 1) / kBN;
  const int64_t row0 = (tile / tiles_n) * kBM, col0 = (tile % tiles_n) * kBN;
  // Windows of kWinStages stages inside one group (qg's validation gives
  // the zero points the scales' group); a whole number of them a CTA.
  constexpr int win_k = kWinStages * kStageK;
  const int64_t windows = p.k / win_k;
  const int64_t win_lo = windows * rank / splits, win_hi = windows * (rank + 1) / splits;
  const int steps = static_cast<int>(kWinStages * (win_hi - win_lo));  // K / 64: below 2^31 for any K below 2^37
  const int64_t k_lo = win_lo * win_k;
  // Ring slots advance by one a stage: offsets, not i % kStages (a 64-bit
  // division by 6 costs more than the rest of a copy's address).
  constexpr uint32_t kRingBytes = kStages * T::kSlotBytes;
  auto next_slot = [](uint32_t slot) { return slot + T::kSlotBytes == kRingBytes ? 0u : slot + T::kSlotBytes; };

  // This thread's copies a stage: 16-byte chunk wch of W row wr, and chunk
  // xch of activation rows xr + 32 c, which lands at chunk xch ^ (row % 8) of
  // its swizzled row ((xr + 32 c) % 8 = xr % 8).
  const int wr = tid / 2, wch = tid % 2;
  const bool w_in = row0 + wr < p.m;
  const uint8_t* wsrc = p.w + min64(row0 + wr, p.m - 1) * p.ldw + k_lo / 2 + 16 * wch;
  const uint32_t wdst = base + T::kXBytes + static_cast<uint32_t>(wr * kWPitch + 16 * wch);
  constexpr int kXCopies = kBN * (kSwizzleRow / 16) / kThreads;  // 4 or 2
  const int xr = tid / 8, xch = tid % 8;
  const uint32_t xdst = base + static_cast<uint32_t>(xr * kSwizzleRow + ((xch ^ (xr & 7)) << 4));
  const uint8_t* xsrc[kXCopies];
  bool x_in[kXCopies];
#pragma unroll
  for (int c = 0; c < kXCopies; ++c) {
    x_in[c] = col0 + xr + 32 * c < p.n;
    xsrc[c] = p.x + min64(col0 + xr + 32 * c, p.n - 1) * p.ldx + 2 * k_lo + 16 * xch;
  }
  uint32_t copy_slot = 0;
  auto copy_next = [&] {  // the next stage of this CTA's K into copy_slot
    if (w_in) cp_async<16>(wdst + copy_slot, wsrc, 16);
    wsrc += kStageK / 2;
#pragma unroll
    for (int c = 0; c < kXCopies; ++c) {
      if (x_in[c]) cp_async<16>(xdst + copy_slot + c * 32 * kSwizzleRow, xsrc[c], 16);
      xsrc[c] += 2 * kStageK;
    }
    copy_slot = next_slot(copy_slot);
  };

  // This thread decodes row dr's 32 codes 32 dc .. 32 dc + 31 of a stage:
  // word j (values 8 j .. 8 j + 7) becomes the 16-byte chunk 4 dc + j of
  // the row's swizzled 128 bytes. Byte b of a word holds values 2 b (low
  // nibble) and 2 b + 1 (high): PRMT puts byte b of w at byte 0 and byte b of
  // w >> 4 at byte 2, so their low nibbles are the pair in K order.
  // Each warp decodes the 16 rows its own share of the warpgroup's MMAs
  // reads (rows 16 warp .. 16 warp + 15 of the warpgroup's 64), so the
  // warpgroup's wait for its MMAs frees them whatever order its warps see.
  const int dr = wg * 64 + warp * 16 + lane % 16, dc = lane / 16;
  const uint8_t* dsrc = smem + T::kXBytes + dr * kWPitch + 16 * dc;
  const uint8_t* zrow = kZP ? p.zeros + min64(row0 + dr, p.m - 1) * p.z_stride : p.zeros;
  // The slot and decoded buffer of the next stage to decode.
  uint32_t dec_slot = 0, dec_buf = 0;
  auto decode_next = [&](uint32_t z2) {
    const uint4 v = *reinterpret_cast<const uint4*>(dsrc + dec_slot);
    const uint32_t word[4] = {v.x, v.y, v.z, v.w};
    uint8_t* drow = smem + T::kDecOffset + dec_buf + dr * kSwizzleRow;
    dec_slot = next_slot(dec_slot);
    dec_buf ^= kDecBytes;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const uint32_t w = word[j], hi = w >> 4;
      uint4 o;
      o.x = decode_pair<kBf16, kZP>(__byte_perm(w, hi, 0x4400), bits, z2);
      o.y = decode_pair<kBf16, kZP>(__byte_perm(w, hi, 0x5511), bits, z2);
      o.z = decode_pair<kBf16, kZP>(__byte_perm(w, hi, 0x6622), bits, z2);
      o.w = decode_pair<kBf16, kZP>(__byte_perm(w, hi, 0x7733), bits, z2);
      *reinterpret_cast<uint4*>(drow + (((4 * dc + j) ^ (dr & 7)) << 4)) = o;
    }
  };
  // Zero points of the decoded row, a window's ahead: z0 the window being
  // decoded, z1 and z2 the next two (loaded two windows before their use).
  auto load_z = [&](int64_t w) {
    return w < win_hi - win_lo ? load_zero_int(p, zrow, (k_lo + w * win_k) >> p.z_shift) : 0;
  };
  int z0 = 0, z1 = 0, z2 = 0;
  if constexpr (kZP) z0 = load_z(0), z1 = load_z(1), z2 = load_z(2);

  // The scales of this thread's two output rows (16 warp + g and + 8 of its
  // warpgroup's 64), s_cur for the next window to rescale, s_nxt the one after.
  const uint8_t* srow[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) srow[h] = p.scales + min64(row0 + wg * 64 + warp * 16 + g + 8 * h, p.m - 1) * p.s_stride;
  auto load_s = [&](int64_t w, uint32_t (&s)[2]) {
    if (w >= win_hi - win_lo) return;
#pragma unroll
    for (int h = 0; h < 2; ++h) s[h] = load_scale_bits(p, srow[h], (k_lo + w * win_k) >> p.s_shift);
  };
  uint32_t s_cur[2] = {0, 0}, s_nxt[2] = {0, 0};
  load_s(0, s_cur);
  load_s(1, s_nxt);
  int64_t s_next_window = 2;

  float out[kAcc];
#pragma unroll
  for (int j = 0; j < kAcc; ++j) out[j] = 0.0f;
  float acc[kAcc];
  // Element j of the sums: row 16 warp + g + 8 ((j >> 1) & 1) of the
  // warpgroup's 64, column 8 (j >> 2) + 2 t + (j & 1).
  auto rescale = [&] {
    wgmma::fence_operands(acc);
    const float s0 = scale_from_bits(p, s_cur[0]), s1 = scale_from_bits(p, s_cur[1]);
#pragma unroll
    for (int j = 0; j < kAcc; ++j) out[j] = fmaf((j & 2) ? s1 : s0, acc[j], out[j]);
    s_cur[0] = s_nxt[0], s_cur[1] = s_nxt[1];
    load_s(s_next_window++, s_nxt);
  };

  // Copies run kAhead stages ahead, into the slot of stage i - 2, whose
  // MMAs both warpgroups waited for before the last barrier.
  constexpr int kAhead = kStages - 2;
  static_assert(kAhead <= kStages - 2, "stage i - 1's slot may still be read by the other warpgroup's MMAs");
#pragma unroll
  for (int s = 0; s < kAhead; ++s) {
    if (s < steps) copy_next();
    cp_async_commit();
  }
  cp_async_wait<kAhead - 2>();  // stages 0 and 1 (this thread's copies)
  __syncthreads();              // ... and every thread's
  if (steps > 0) decode_next(kZP ? zero_pair<kBf16>(z0) : 0u);
  wgmma::fence_proxy_async_shared();
  __syncthreads();

  const uint32_t dec_base = base + T::kDecOffset + static_cast<uint32_t>(wg * 64 * kSwizzleRow);
  // A window's stages unrolled: the waits below are then all ptxas needs
  // to see (with a loop over stages it injects waits of its own).
  uint32_t mma_slot = 0;
  for (int i0 = 0; i0 < steps; i0 += kWinStages) {
#pragma unroll
    for (int ws = 0; ws < kWinStages; ++ws) {
      const int i = i0 + ws;
      // Here stage i is decoded and stage i + 1 has landed, for every thread.
      const uint64_t a = wgmma::desc_k128_swizzled(dec_base + (ws % 2) * kDecBytes);  // i0 is even
      const uint64_t b = wgmma::desc_k128_swizzled(base + mma_slot);
      mma_slot = next_slot(mma_slot);
      wgmma::fence();
#pragma unroll
      for (int kk = 0; kk < kStageK / 16; ++kk)
        wgmma::mma_ss<kBN, kBf16>(acc, wgmma::desc_advance(a, 32 * kk), wgmma::desc_advance(b, 32 * kk),
                                  (ws > 0 || kk > 0) ? 1 : 0);
      wgmma::commit_group();
      wgmma::wait_group<1>();  // stage i - 1's MMAs (this warpgroup's): its decoded rows are free
      // While stage i's MMAs run: the copies of stage i + kAhead and stage
      // i + 1 decoded into the other buffer.
      if (i + kAhead < steps) copy_next();
      cp_async_commit();
      if (i + 1 < steps) {
        if constexpr (kZP) {
          if (ws == kWinStages - 1) z0 = z1, z1 = z2, z2 = load_z((i + 1) / kWinStages + 2);
        }
        decode_next(kZP ? zero_pair<kBf16>(z0) : 0u);
      }
      if (ws == kWinStages - 1) {  // the window's sums, once complete, scaled into out
        wgmma::wait_group<0>();
        rescale();
      }
      cp_async_wait<kAhead - 2>();  // stage i + 2 (this thread's copies)
      wgmma::fence_proxy_async_shared();
      __syncthreads();  // stage i + 1 decoded, stage i + 2 landed, stage i - 1 done in both warpgroups
    }
  }
  cp_async_wait<0>();

  const int row_base = wg * 64 + warp * 16 + g;
  if (splits == 1) {
#pragma unroll
    for (int j = 0; j < kAcc; ++j) {
      const int64_t row = row0 + row_base + 8 * ((j >> 1) & 1);
      const int64_t col = col0 + 8 * (j >> 2) + 2 * t + (j & 1);
      if (row < p.m && col < p.n) epilogue_store(ep, row, col, out[j]);
    }
    return;
  }
  __syncthreads();  // every thread is done with the ring: it becomes this CTA's tile of sums
  float* own = reinterpret_cast<float*>(smem);  // [row][column]
#pragma unroll
  for (int j = 0; j < kAcc; ++j)
    own[(row_base + 8 * ((j >> 1) & 1)) * kBN + 8 * (j >> 2) + 2 * t + (j & 1)] = out[j];
  store_cluster_sum<kBM, kBN, kThreads>(own, splits, rank, row0, col0, p.m, p.n, ep);
}

template <int kBN, bool kBf16, bool kZP, int kWinStages>
KernelFit fit_of(int device) {
  static std::once_flag once[kMaxDevices];
  static KernelFit cache[kMaxDevices];
  return cached_fit(gemm_wo_wgmma_kernel<kBN, kBf16, kZP, kWinStages>, kThreads, Tile<kBN>::kSmemBytes, device, once,
                    cache);
}

// Stages between rescales: two (128 values) for groups of 128, four (256)
// for larger ones.
int window_stages(const GemmArgs& args) { return args.a.scales.group_size >= 256 ? 4 : 2; }

// Calls f(kBN, kBf16, kZP, kWinStages) as integral constants for args'
// instance: the 128-token tile past 64 tokens, the 64-token one up to it.
template <class F>
auto with_instance(const GemmArgs& args, F&& f) {
  const bool bf16 = args.b.format == Format::bf16, zp = args.a.zero_points.data != nullptr;
  auto by_window = [&](auto bn, auto b16, auto z) {
    return window_stages(args) == 4 ? f(bn, b16, z, std::integral_constant<int, 4>{})
                                    : f(bn, b16, z, std::integral_constant<int, 2>{});
  };
  auto by_dtype = [&](auto bn) {
    if (bf16)
      return zp ? by_window(bn, std::true_type{}, std::true_type{}) : by_window(bn, std::true_type{}, std::false_type{});
    return zp ? by_window(bn, std::false_type{}, std::true_type{}) : by_window(bn, std::false_type{}, std::false_type{});
  };
  if (args.b.rows > 64) return by_dtype(std::integral_constant<int, 128>{});
  return by_dtype(std::integral_constant<int, 64>{});
}

}  // namespace

bool gemm_wo_wgmma_can_run(const GemmArgs& args, std::string* why_not) {
  auto no = [&](std::string why) {
    if (why_not) *why_not = std::move(why);
    return false;
  };
  static_assert(kBM == 128, "tiled_wo_admits counts 128-row tiles");
  if (!tiled_wo_admits(args, kMinCols, "cuda_wo_mma's smaller tiles are faster there", kMinWindowK,
                       "a window between rescales", 64, why_not))
    return false;
  if (!groups_at_least(args, kMinGroup, why_not)) return false;
  // qg's validation asks both of these; the kernel's windows depend on them.
  if (args.a.k % (window_stages(args) * kStageK) != 0 ||
      (args.a.zero_points.data && args.a.zero_points.group_size != args.a.scales.group_size))
    return no("K=" + std::to_string(args.a.k) + " is not a multiple of the group (" +
              std::to_string(args.a.scales.group_size) + "), or the zero points' group is not the scales'");
  if (args.a.zero_points.data && args.a.zero_points.dtype != DType::i8)
    return no("int32 zero points: q - z may not be an exact fp16 / bf16 number (cuda_wo_mma applies them through "
              "sums of x)");
  const KernelFit fit = with_instance(args, [&](auto bn, auto bf16, auto zp, auto win) {
    return fit_of<decltype(bn)::value, decltype(bf16)::value, decltype(zp)::value, decltype(win)::value>(
        args.device.id);
  });
  return ctas_fit(fit.blocks_per_sm, args.device.id, "sm_90a", why_not);
}

Status gemm_wo_wgmma_run(const GemmArgs& args, Stream stream) {
  if (args.a.rows <= 0 || args.b.rows <= 0) return Status::success();
  const Params p = gemv_params(args);
  const EpilogueParams ep = epilogue_params(args);
  return with_instance(args, [&](auto bn, auto bf16, auto zp, auto win) {
    constexpr int kBN = decltype(bn)::value, kWinStages = decltype(win)::value;
    constexpr bool kBf16 = decltype(bf16)::value, kZP = decltype(zp)::value;
    const int64_t tiles = (p.m + kBM - 1) / kBM * ((p.n + kBN - 1) / kBN);
    // K split by whole windows where the tiles leave SMs idle, each CTA
    // keeping at least 1024 values of K.
    constexpr int64_t kWinK = kWinStages * kStageK;
    return launch_tiled_wo(args, "cuda_wo_wgmma", gemm_wo_wgmma_kernel<kBN, kBf16, kZP, kWinStages>,
                           fit_of<kBN, kBf16, kZP, kWinStages>(args.device.id), kThreads, Tile<kBN>::kSmemBytes, tiles,
                           p.k / kWinK, 1024 / kWinK, p, to_cuda(stream), ep);
  });
}

}  // namespace qg::detail::cuda
