// SPDX-License-Identifier: MIT
// cuda/gemm_wo_gemv_fixed.cu: INT4 weight-only decode of one token (N = 1)
// on sm_90 with the activations in block fixed point and DP4A, W streamed
// through a cp.async ring a warp (cuda_gemv_ring's design, for i4 rows and
// group scales).
//
// Measured on an H200 (bench_gemm, bf16 x, group 128; docs/architecture.md,
// "The fixed-point INT4 GEMV"): cold 15.1-15.2 us at 4096 x 14336 and
// 15.9-16.2 at 14336 x 4096 (read floor 11.1-11.3; cuda_wo_gemv_small
// 19.0 and 20.9-21.1), 13.3-13.4 with W in L2; 9.3 at 4096 x 4096
// (read floor 6.4). Nsight Compute (4096 x 14336, W in L2, the
// profiler's clocks): the pass 2.85 us, the GEMV 16.8, latency-bound: 0.77
// eligible warps a scheduler, an instruction issued every 2.4 cycles.
//
//   C[m, n] = sum_g s[m, g] * sum_{k in g} (q[m, k] - z[m, g]) * x[n, k]
//
// Why integers. The float GEMVs (cuda_wo_gemv_small: a LOP3 and an FFMA a
// code and N FFMAs, about 5 instructions a code as Nsight Compute counted)
// leave HBM a third busy at N = 1 (docs/architecture.md, "Decode against
// its read floor"). Q4_0 x Q8_1 reaches 91 % of the read floor on the same
// ring with DP4A: 4 products an instruction, exact. Here x becomes integers
// once per call, as the CPU's cpu_wo_avx512_vnni does: each 32 consecutive
// x of a row share one power of two 2^e, chosen from their largest |x| so
// that x_int = rint(x 2^-e) has |x_int| <= 2^14, and x ~= x_int 2^e. An
// f16 x of at least 2^-3 of its block's largest |x| is exact (11 significant
// bits), a bf16 one of at least 2^-6; any x is within half a unit, at most
// 2^-14 of that largest (docs/numerics.md). x_int = lo + 256 hi, lo in
// 0..255 (an unsigned byte) and hi in -64..64 (a signed one): two DP4As a
// word of codes, where the CPU kernel's 2^-20 takes three.
//
// Codes: u = nibble ^ 8 = q + 8 in 0..15 (two's-complement nibbles). One
// LOP3 a word gives its four low nibbles as the bytes u, and one more its
// four high ones as the bytes 16 u, left where they are: no shift. The
// DP4As then sum four ways a block and row: the low nibbles against the lo
// and the hi digits of x_int (L, H) and the high nibbles against them (16
// L', 16 H'); the 8 comes out through the block's sum of x_int:
//   16 T = 256 (16 H + 16 H') + (16 L + 16 L') - 128 sum x_int,
// T = sum q x_int, exact in int32 (|T| <= 2^22, so |16 T| < 2^27, and the
// shift back is exact); a zero point's z sum x_int is subtracted in fp32
// (one rounding, 2^-24 relative, as the CPU kernel). Then
// acc += s (2^e (T - z sum x_int)), fp32. Per 32 codes and row: 8 LOP3s,
// and 16 DP4As a column. Nsight Compute counts 2.4 instructions a code in
// all at 4096 x 14336 (W's copies, the scale loads and the loop
// included), 2.5 when the high nibbles were shifted down first.
//
// x's fixed-point form sits in shared memory, per column and stage of 64
// blocks: four planes of 16 bytes a block (the digit bytes in the order
// the unpacked code words need them: plane p, word w holds digit p / 2 of
// word 2 (p % 2) + w / 2, even codes for even w, odd ones for odd w) and a
// plane of 8 bytes a block (2^e as a float, sum x_int as an int32): a
// block's loads share one base address. Lane l takes blocks l and l + 32
// of a stage: its 16-byte W and x loads from shared memory are 16
// contiguous bytes a lane, conflict-free. Who makes it depends on K
// (pass_for): up to two stages each CTA converts x itself after requesting
// its first stages of W (x_to_fixed, one kernel); past that a pass
// (to_fixed_kernel: the same routine, a CTA a stage) writes the planes to a
// workspace once, and the GEMV, launched early behind it (grid_dependency.cuh),
// requests its first stages of W before it waits, then copies them in a
// stage at a time: one cp.async.bulk a stage, each completing on its own
// mbarrier, so that a warp waits only for the stage it is about to use,
// and no CTA barrier follows the copy (3-4 % faster at 4096 x 14336 and
// 4096 x 28672 than one commit group of cp.async pieces for all of x,
// whose wait was also a wait for the ring's first stages of W).
//
// The first kernel of a call (the pass, or the GEMV where there is none) is
// launched early behind whatever the stream ran before and waits for it
// before its first read, so that in a chain of calls each is launched
// before the one in front of it ends (docs/architecture.md, "The N = 1
// decode launched early too").
//
// A block whose x holds Inf or NaN has no fixed-point form: the conversion
// marks it (2^e stored as NaN) and the GEMV sums that block in fp32 from x
// as it is, so non-finite values propagate as in the float reference.
//
// Scales and zero points of a stage are loaded (not converted) when the
// stage's copies are issued, kStages - 1 stages ahead of their use, into
// registers of the stage's slot (the step loop is unrolled by the ring's
// depth so that each slot's registers are fixed); wo_params.cuh says why
// the conversion waits for the use.
//
// Reduction: each lane sums its blocks over K in order; the warp adds its
// 32 lanes by a fixed butterfly: deterministic. Rows past M are read from
// row M - 1 and never stored.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <optional>
#include <string>
#include <type_traits>

#include "bulk_copy.cuh"
#include "cp_async.cuh"
#include "device_limits.cuh"
#include "gemm_int_fast.cuh"
#include "grid_dependency.cuh"
#include "warp_rows.cuh"
#include "wo_params.cuh"
#include "workspace.cuh"

namespace qg::detail::cuda {
namespace {

constexpr int kRows = 2;                              // W rows a warp streams
constexpr int kStageBlocks = 64;                      // blocks of 32 codes a stage: two a lane
constexpr int kStageRowBytes = kStageBlocks * 16;     // 1024
constexpr int kSlotBytes = kRows * kStageRowBytes;    // 2048
constexpr int kMaxStages = 4;
// N it takes. The kernel is written for kCols columns, and N = 2..4 were
// built and measured (8 warps a CTA to N = 2, 16 from N = 3): each column
// adds 16 DP4As a block and row, 2.8-6.0 us a column on an H200, so
// the tensor-core kernels (cuda_wo_gemv_bulk then, cuda_wo_gemv_mma now)
// are faster there (docs/architecture.md, "The fixed-point INT4 GEMV").
constexpr int kMaxCols = 1;
constexpr int kWarps = 8;                 // rings a CTA
constexpr int kFixedBlockBytes = 72;      // 64 digit bytes, 2^e and sum x_int
// A column's blocks are laid out by stage of the ring: the four digit planes
// of the stage's 64 blocks (1 KB each), then their 2^e and sum x_int (8 bytes
// a block). A lane's loads for one block are then one base address and
// constant offsets, and the 16-byte ones of a warp fall on 32 banks.
constexpr int kPlaneBytes = kStageBlocks * 16;                       // 1024
constexpr int kStageActBytes = kStageBlocks * kFixedBlockBytes;      // 4608
static_assert(kStageActBytes % 16 == 0, "stages of the activations stay 16-byte aligned");
// Shared memory a CTA when `ctas` share an SM: sm_90 has 228 KB an SM and
// reserves 1 KB a CTA. At K = 14336 the activations take 32 KB beside a
// ring of 64 KB (4 stages): two CTAs an SM. At K = 4096 they take 9 KB, and
// three CTAs with 4 stages each fit (below, with_instance).
constexpr int smem_budget(int ctas) { return (228 * 1024 - ctas * 1024) / ctas; }
__host__ __device__ constexpr int ring_bytes(int stages, int warps) { return warps * stages * kSlotBytes; }

// Bytes of one column's planes: whole stages (the pass zeroes the blocks
// past K in the last one).
int64_t column_bytes(int64_t nb) { return (nb + kStageBlocks - 1) / kStageBlocks * kStageActBytes; }

bool pass_for(int64_t nb);
// The activations' bytes in shared memory: the planes, and behind the pass
// one mbarrier a stage, on which that stage's copy completes.
int64_t act_bytes(int64_t n, int64_t nb) {
  return n * column_bytes(nb) + (pass_for(nb) ? 8 * ((nb + kStageBlocks - 1) / kStageBlocks) : 0);
}

// The deepest ring (2..4 stages) that fits beside the activations when
// `ctas` CTAs share an SM; 0 where none does.
int stages_for(int64_t n, int64_t nb, int ctas) {
  for (int s = kMaxStages; s >= 2; --s)
    if (ring_bytes(s, kWarps) + act_bytes(n, nb) <= smem_budget(ctas)) return s;
  return 0;
}

// ---------------------------------------------------------------------------
// The GEMV.

struct Params {
  const uint8_t* w;
  const uint8_t* x;     // the activations as given
  const uint8_t* xfix;  // the pass's planes, or null: each CTA converts x itself (pass_for)
  const uint8_t* scales;
  const uint8_t* zeros;
  int64_t m, k, nb, ldw, ldx, col_bytes;
  int64_t s_stride, z_stride;
  int s_shift, z_shift;
  int sg_shift, zg_shift;  // a block's group: block >> these (groups are 32 << shift)
  int scale_up;            // 16 for bf16 scales, 0 for f32 (scale_value)
  int s_bytes_shift;       // log2 of a scale's bytes
  int scale_type, zero_i32;
  uint32_t low_nibbles, high_nibbles;  // 0x0F0F0F0F, 0xF0F0F0F0 from registers: LOP3 takes one immediate
  bool x_bf16;
};

__device__ __forceinline__ int dp4a_uu(uint32_t a, uint32_t b, int c) {
  int d;
  asm("dp4a.u32.u32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
}
__device__ __forceinline__ int dp4a_su(uint32_t a, uint32_t b, int c) {
  int d;
  asm("dp4a.s32.u32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
}

// Where x's fixed-point form is made. Each CTA converts x itself where K
// spans at most kConvertInCtaStages stages of the ring; past that a pass
// converts it once for all CTAs. Every CTA repeats the conversion (about
// 60 instructions a lane for each 8 values), which costs more than it saves
// at long K. Measured on an H200, N = 1, cold / W in L2, µs, pass -> in
// the CTAs (bench/RESULTS.md): 4096 x 4096 10.0 / 8.8-8.9 -> 9.3-9.5 /
// 8.3-8.4, 11008 x 4096 15.2-15.3 / 13.1 -> 14.6-14.8 / 12.5-12.8,
// 14336 x 4096 16.7 / 14.0-14.2 -> 16.4-16.5 / 14.1-14.3, but 4096 x 14336
// 16.8-16.9 / 13.9-14.0 -> 17.0-17.1 / 15.0-15.2.
constexpr int kConvertInCtaStages = 2;
bool pass_for(int64_t nb) { return (nb + kStageBlocks - 1) / kStageBlocks > kConvertInCtaStages; }

// ---------------------------------------------------------------------------
// x to block fixed point, in shared memory: every CTA converts the column
// itself, once, while its first stages of W are in flight.
//
// Four lanes a block, a quarter each (8 values, 16 bytes of x): a CTA's 256
// threads make one stage of 64 blocks a round. Lane l of warp w takes block
// 8w + (l / 2) % 8 of the round's stage and quarter 2 (l / 16) + l % 2, so
// that a block's lanes are l, l ^ 1, l ^ 16, l ^ 17 (two shuffles reduce
// over them) and a half warp's 8-byte stores fill 128 contiguous bytes of
// one plane (no bank conflict). Per lane and round about 60 instructions,
// no division and, but for the rare blocks below 2^-114, no conversion to
// integer:
// - the block's largest |x| from the bits (|x| orders as its bits do in
//   both formats, and Inf and NaN lie above every finite value, which marks
//   the block);
// - x 2^(14 - e) + 1.5 2^23 by one FFMA, whose result's low 16 bits are
//   x_int = rint(x 2^(14 - e)) (x 2^(14 - e) is exact, below 2^14, and the
//   sum rounds once, to nearest even): the digit bytes are moved out of
//   those bits by PRMT, and sum x_int is the sum of the bits less 8 magic.
// The loads of all its rounds (two at most: it runs to K = 4096) are
// issued before the first is used: x is one L2 round trip away, and a
// round's arithmetic is shorter.
// The pass (to_fixed_kernel, below), which serves long K (pass_for), runs
// the same routine into a workspace.

constexpr uint32_t kRoundMagicBits = 0x4B400000u;  // 1.5 * 2^23

// Quarter `q` (codes 8q..8q + 7) of block c of the stage at `stage`: its
// digit words 2q, 2q + 1 (lo) and 8 + 2q, 9 + 2q (hi), and from q = 0 the
// block's 2^e and sum x_int. All 32 lanes take part (shuffles).
__device__ __forceinline__ void quarter_to_fixed(bool bf16, uint4 raw, uint8_t* stage, int c, int q) {
  const uint32_t w[4] = {raw.x, raw.y, raw.z, raw.w};
  uint32_t m = __vimax3_u16x2(__vimax3_u16x2(w[0] & 0x7FFF7FFFu, w[1] & 0x7FFF7FFFu, w[2] & 0x7FFF7FFFu),
                              w[3] & 0x7FFF7FFFu, 0u);
  m = max(m & 0xFFFFu, m >> 16);
  m = max(m, __shfl_xor_sync(0xFFFFFFFFu, m, 1));
  m = max(m, __shfl_xor_sync(0xFFFFFFFFu, m, 16));
  const bool finite = m < (bf16 ? 0x7F80u : 0x7C00u);
  const float amax = bf16 ? __uint_as_float(m << 16) : __half2float(__ushort_as_half(static_cast<unsigned short>(m)));
  int e = 0;
  if (finite) frexpf(amax, &e);  // amax = m 2^e, m in [0.5, 1): |x| 2^(14 - e) < 2^14
  float v[8];  // code 8q + 2i in word i's low half, 8q + 2i + 1 in its high one
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    if (bf16) {
      v[2 * i] = __uint_as_float(w[i] << 16);
      v[2 * i + 1] = __uint_as_float(w[i] & 0xFFFF0000u);
    } else {
      v[2 * i] = __half2float(__ushort_as_half(static_cast<unsigned short>(w[i])));
      v[2 * i + 1] = __half2float(__ushort_as_half(static_cast<unsigned short>(w[i] >> 16)));
    }
  }
  uint32_t f[8];  // 1.5 2^23 + x_int, as bits
  if (e >= -113) {  // 2^(14 - e) is a normal float (always for f16; bf16 blocks below 2^-114 take the other way)
    const float up = __uint_as_float(static_cast<uint32_t>(127 + 14 - e) << 23);
#pragma unroll
    for (int i = 0; i < 8; ++i) f[i] = __float_as_uint(__fmaf_rn(v[i], up, 12582912.0f));
  } else {
#pragma unroll
    for (int i = 0; i < 8; ++i) f[i] = kRoundMagicBits + static_cast<uint32_t>(__float2int_rn(ldexpf(v[i], 14 - e)));
  }
  int sum = static_cast<int>(f[0] + f[1] + f[2] + f[3] + f[4] + f[5] + f[6] + f[7] - 8u * kRoundMagicBits);
  sum += __shfl_xor_sync(0xFFFFFFFFu, sum, 1);
  sum += __shfl_xor_sync(0xFFFFFFFFu, sum, 16);
  // Byte j of the even word is code 8q + 2j, of the odd one 8q + 2j + 1;
  // the low byte of x_int goes to the lo digit, the next to the hi one.
  const uint32_t e02 = __byte_perm(f[0], f[2], 0x5140), e46 = __byte_perm(f[4], f[6], 0x5140);
  const uint32_t o13 = __byte_perm(f[1], f[3], 0x5140), o57 = __byte_perm(f[5], f[7], 0x5140);
  uint8_t* at = stage + (q / 2) * kPlaneBytes + c * 16 + 8 * (q % 2);
  *reinterpret_cast<uint2*>(at) = make_uint2(__byte_perm(e02, e46, 0x5410), __byte_perm(o13, o57, 0x5410));
  *reinterpret_cast<uint2*>(at + 2 * kPlaneBytes) =
      make_uint2(__byte_perm(e02, e46, 0x7632), __byte_perm(o13, o57, 0x7632));
  if (q == 0) {
    // NaN marks a block of non-finite x: the GEMV sums it in fp32 from x.
    const float d = !finite ? __int_as_float(0x7FC00000) : (amax > 0.0f ? ldexpf(1.0f, e - 14) : 0.0f);
    *reinterpret_cast<float2*>(stage + 4 * kPlaneBytes + 8 * c) = make_float2(d, __int_as_float(sum));
  }
}

// The column's `stages` stages (blocks past K as zeros: x = 0) into `act`.
template <int kWarps, int kBatch>
__device__ __forceinline__ void x_to_fixed(const Params& p, uint8_t* act, int stages) {
  static_assert(kWarps * 8 == kStageBlocks, "a CTA round is one stage: 8 blocks a warp");
  const int lane = threadIdx.x % 32;
  const int q = 2 * (lane / 16) + lane % 2;
  const int c = (threadIdx.x / 32) * 8 + (lane / 2) % 8;
  const uint8_t* xq = p.x + 64 * c + 16 * q;
  for (int s0 = 0; s0 < stages; s0 += kBatch) {
    uint4 raw[kBatch];
#pragma unroll
    for (int i = 0; i < kBatch; ++i) {
      raw[i] = make_uint4(0u, 0u, 0u, 0u);
      if (s0 + i < stages && (s0 + i) * kStageBlocks + c < p.nb)
        raw[i] = __ldg(reinterpret_cast<const uint4*>(xq + static_cast<uint32_t>((s0 + i) * kStageBlocks * 64)));
    }
#pragma unroll
    for (int i = 0; i < kBatch; ++i)
      if (s0 + i < stages) quarter_to_fixed(p.x_bf16, raw[i], act + (s0 + i) * kStageActBytes, c, q);
  }
}

// The pass, for K past kConvertInCtaStages stages: x [N, K] to block fixed
// point in a workspace, once for all CTAs of the GEMV, by the same routine:
// a CTA a stage and column (7 CTAs at K = 14336), laid out as in shared
// memory so that the GEMV copies it verbatim. Blocks past K, to the end of
// the last stage, are written as zeros (x = 0): the GEMV copies whole
// stages and never uses them.
struct FixedParams {
  const uint8_t* x;
  uint8_t* out;
  int64_t nb, ldx, col_bytes;
};

template <bool kBf16>
__global__ void __launch_bounds__(256) to_fixed_kernel(FixedParams p) {
  // Launched early behind whatever the stream ran last, often the previous
  // call's GEMV: x may be that kernel's output, and the workspace the bytes
  // it is still copying. So the wait comes first, and only then may the
  // GEMV launch: it requests W before its own wait (which is for this
  // grid), so no W it reads may predate the kernel before this one.
  wait_prerequisite();
  launch_dependents();
  const int lane = threadIdx.x % 32;
  const int q = 2 * (lane / 16) + lane % 2;
  const int c = (threadIdx.x / 32) * 8 + (lane / 2) % 8;
  const int64_t b = static_cast<int64_t>(blockIdx.x) * kStageBlocks + c;
  const uint8_t* xq = p.x + blockIdx.y * p.ldx + 64 * b + 16 * q;
  const uint4 raw = b < p.nb ? __ldg(reinterpret_cast<const uint4*>(xq)) : make_uint4(0u, 0u, 0u, 0u);
  quarter_to_fixed(kBf16, raw, p.out + blockIdx.y * p.col_bytes + blockIdx.x * kStageActBytes, c, q);
}

// What a lane loads for a stage besides W: the scale (and zero point) of
// each of its two blocks of each row, unconverted.
template <bool kZP>
struct StageMeta {
  uint32_t s[kRows][2];
  int z[kRows][2];
};

// The fp32 sum of (q - z) x over block b of a row whose 16 bytes of codes
// are at `codes` (shared memory), x as given: the rare path (a loop of
// 32 FMAs), reached only for blocks holding Inf or NaN.
__device__ __forceinline__ float float_block(const Params& p, int64_t col, int64_t b,
                                                         const uint8_t* codes, float z) {
  const uint8_t* xr = p.x + col * p.ldx + b * 64;
  float acc = 0.0f;
#pragma unroll 1
  for (int c = 0; c < 32; ++c) {
    const uint32_t nibble = (codes[c / 2] >> (4 * (c % 2))) & 0xFu;
    const int q = static_cast<int>(nibble ^ 8u) - 8;
    const uint16_t bits = reinterpret_cast<const uint16_t*>(xr)[c];
    const float xv =
        p.x_bf16 ? __uint_as_float(static_cast<uint32_t>(bits) << 16) : __half2float(__ushort_as_half(bits));
    acc = fmaf(static_cast<float>(q) - z, xv, acc);
  }
  return acc;
}

// Where a warp's copies of one row pair come from: the lane's first piece
// of W in each row, and each row's scales and zero points (rows past M read
// from row M - 1). Computed once a pair, so that a stage's copies need only
// 32-bit offsets.
struct PairSrc {
  const uint8_t* w[kRows];
  const uint8_t* s[kRows];
  const uint8_t* z[kRows];
};

template <bool kZP>
__device__ __forceinline__ PairSrc pair_src(const Params& p, int64_t r0, int lane) {
  PairSrc src;
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    const int64_t row = min64(r0 + r, p.m - 1);
    src.w[r] = p.w + row * p.ldw + 16 * lane;
    src.s[r] = p.scales + row * p.s_stride;
    src.z[r] = kZP ? p.zeros + row * p.z_stride : nullptr;
  }
  return src;
}

// The bits of a scale (4 or 2 bytes) and a zero point (int32 or int8) at a
// byte offset of their row: one address for either width.
__device__ __forceinline__ uint32_t scale_bits_at(const uint8_t* row, uint32_t off, bool wide) {
  return wide ? __ldg(reinterpret_cast<const unsigned int*>(row + off))
              : __ldg(reinterpret_cast<const unsigned short*>(row + off));
}
__device__ __forceinline__ int zero_at(const uint8_t* row, uint32_t off, bool wide) {
  return wide ? __ldg(reinterpret_cast<const int*>(row + off))
              : static_cast<int>(__ldg(reinterpret_cast<const signed char*>(row + off)));
}

// A group scale from its loaded bits without a branch: f16 by conversion,
// bf16 and f32 by moving the bits up 16 or 0 places.
__device__ __forceinline__ float scale_value(const Params& p, uint32_t bits) {
  const float h = __half2float(__ushort_as_half(static_cast<unsigned short>(bits)));
  const float f = __uint_as_float(bits << p.scale_up);
  return p.scale_type == 1 ? h : f;
}

// kCtas: the CTAs an SM the instance is built for (registers capped to
// let them in: 80 a thread at three; at two the cap of 128 leaves them at
// 88-112 by instance; with zero points three would spill, so those keep
// two).
template <int kCols, int kStages, int kWarps, bool kZP, int kCtas>
__global__ void __launch_bounds__(32 * kWarps, kCtas) wo_fixed_kernel(Params p, EpilogueParams ep) {
  extern __shared__ __align__(16) uint8_t smem[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  // Persistent CTAs: a warp's row pairs start at row0, row0 + pairs_step, ...
  const int64_t pairs_step = static_cast<int64_t>(gridDim.x) * kWarps * kRows;
  int64_t row0 = (static_cast<int64_t>(blockIdx.x) * kWarps + warp) * kRows;
  uint8_t* ring = smem + warp * (kStages * kSlotBytes);
  uint8_t* act = smem + ring_bytes(kStages, kWarps);
  uint64_t* x_landed = reinterpret_cast<uint64_t*>(act + kCols * p.col_bytes);  // behind the pass: one a stage
  const int nb = static_cast<int>(p.nb);  // a few thousand at most: can_run
  const int stages = (nb + kStageBlocks - 1) / kStageBlocks;
  const int64_t my_pairs = row0 < p.m ? (p.m - 1 - row0) / pairs_step + 1 : 0;
  const int64_t steps = my_pairs * stages;
  // Without a pass this grid is launched early behind whatever the stream
  // ran last (often the previous layer's GEMV) and may read nothing that
  // kernel could write, W and x included, until it has completed. Behind
  // the pass it need not wait here: the pass waited before letting this
  // grid launch. (Asking L2 for the ring's first stages before this wait,
  // as cuda_wo_gemv_mma does, was 3-5 % slower for a call on its own at
  // K = 4096 on an H200 and 3 % faster in a loop: not kept.)
  if (p.xfix == nullptr) wait_prerequisite();

  // Stage s of the pair at `src` into slot `at`, and its scales into `meta`.
  // All offsets inside a row are 32-bit (K is bounded by the activations'
  // room in shared memory): the 64-bit row arithmetic is done once a pair.
  // Whole stages (all but a row's last, where K is not a multiple of 2048)
  // take a path without a test a piece.
  auto issue_at = [&](const PairSrc& src, int s, int at, StageMeta<kZP>& meta) {
    const int b0 = s * kStageBlocks;
    const uint32_t slot = smem_u32(ring + at * kSlotBytes) + 16 * lane;
    auto piece = [&](int r, int t) {
      const int c = lane + 32 * t;
      cp_async<16>(slot + r * kStageRowBytes + 512 * t, src.w[r] + 16 * b0 + 512 * t, 16);
      meta.s[r][t] = scale_bits_at(src.s[r], static_cast<uint32_t>((b0 + c) >> p.sg_shift) << p.s_bytes_shift,
                                   p.scale_type == 0);
      if constexpr (kZP)
        meta.z[r][t] = zero_at(src.z[r], static_cast<uint32_t>((b0 + c) >> p.zg_shift) << (2 * p.zero_i32), p.zero_i32);
    };
    if (b0 + kStageBlocks <= nb) {
#pragma unroll
      for (int r = 0; r < kRows; ++r)
#pragma unroll
        for (int t = 0; t < 2; ++t) piece(r, t);
    } else {
#pragma unroll
      for (int r = 0; r < kRows; ++r)
#pragma unroll
        for (int t = 0; t < 2; ++t)
          if (b0 + lane + 32 * t < nb) piece(r, t);
    }
  };
  // Stage s from slot `at` into acc.
  auto compute = [&](float (&acc)[kRows][kCols], int s, int at, const StageMeta<kZP>& meta) {
    const uint8_t* slot = ring + at * kSlotBytes;
    // One block (t: the lane's first or second of the stage) in integers.
    auto fixed_block = [&](int t, int j, float d, int sum) {
      const int c = lane + 32 * t;
      const uint8_t* xs = act + j * p.col_bytes + s * kStageActBytes;
      uint32_t lo[8], hi[8];
#pragma unroll
      for (int q = 0; q < 2; ++q) {
        const uint4 a = *reinterpret_cast<const uint4*>(xs + q * kPlaneBytes + c * 16);
        const uint4 h = *reinterpret_cast<const uint4*>(xs + (2 + q) * kPlaneBytes + c * 16);
        lo[4 * q] = a.x, lo[4 * q + 1] = a.y, lo[4 * q + 2] = a.z, lo[4 * q + 3] = a.w;
        hi[4 * q] = h.x, hi[4 * q + 1] = h.y, hi[4 * q + 2] = h.z, hi[4 * q + 3] = h.w;
      }
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        const uint4 w = *reinterpret_cast<const uint4*>(slot + r * kStageRowBytes + 16 * c);
        const uint32_t ws[4] = {w.x, w.y, w.z, w.w};
        uint32_t u[8];
        // Low nibbles: q + 8. High ones: 16 (q + 8), left where they are
        // (one LOP3 a word, no shift); their sums come out 16 times too
        // large and are brought back in the exact integer sum below.
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          u[2 * i] = (ws[i] & p.low_nibbles) ^ 0x08080808u;
          u[2 * i + 1] = (ws[i] & p.high_nibbles) ^ 0x80808080u;
        }
        int s_lo[2] = {0, 0}, s_hi[2] = {0, 0};
#pragma unroll
        for (int q = 0; q < 8; ++q) {
          s_lo[q % 2] = dp4a_uu(u[q], lo[q], s_lo[q % 2]);
          s_hi[q % 2] = dp4a_su(hi[q], u[q], s_hi[q % 2]);
        }
        // sum (q + 8) x_int - 8 sum x_int = sum q x_int, exact: first 16
        // times it (below 2^27 in magnitude), then an exact shift.
        const int t8 = ((16 * s_hi[0] + s_hi[1]) * 256 + (16 * s_lo[0] + s_lo[1]) - 128 * sum) >> 4;
        const float sc = scale_value(p, meta.s[r][t]);
        const float tf =
            kZP ? fmaf(-static_cast<float>(meta.z[r][t]), static_cast<float>(sum), static_cast<float>(t8))
                : static_cast<float>(t8);
        // d tf is exact (d a power of two); s d rounded first could
        // underflow (bf16 blocks below 2^-100) or overflow.
        acc[r][j] = fmaf(sc, d * tf, acc[r][j]);
      }
    };
    // Any block of x that is not finite, or a stage past K: block by block.
    auto careful_block = [&](int t) {
      const int c = lane + 32 * t;
      const int b = s * kStageBlocks + c;
      if (b >= nb) return;  // the row's last stage can be short
#pragma unroll
      for (int j = 0; j < kCols; ++j) {
        const float2 mx =
            *reinterpret_cast<const float2*>(act + j * p.col_bytes + s * kStageActBytes + 4 * kPlaneBytes + 8 * c);
        if (isnan(mx.x)) {  // a block of non-finite x: fp32 from x as given
#pragma unroll
          for (int r = 0; r < kRows; ++r) {
            const float z = kZP ? static_cast<float>(meta.z[r][t]) : 0.0f;
            acc[r][j] = fmaf(scale_value(p, meta.s[r][t]),
                             float_block(p, j, b, slot + r * kStageRowBytes + 16 * c, z), acc[r][j]);
          }
        } else {
          fixed_block(t, j, mx.x, __float_as_int(mx.y));
        }
      }
    };
    // A whole stage of finite blocks (the rule) runs both of the lane's
    // blocks as one straight line: one test a lane and stage instead of a
    // branch a block, so that the second block's loads and products
    // overlap the first's.
    float2 mx[kCols][2];
    bool finite = (s + 1) * kStageBlocks <= nb;
#pragma unroll
    for (int j = 0; j < kCols; ++j)
#pragma unroll
      for (int t = 0; t < 2; ++t) {
        mx[j][t] = *reinterpret_cast<const float2*>(act + j * p.col_bytes + s * kStageActBytes + 4 * kPlaneBytes +
                                                    8 * (lane + 32 * t));
        finite = finite && !isnan(mx[j][t].x);
      }
    if (finite) {
#pragma unroll
      for (int t = 0; t < 2; ++t)
#pragma unroll
        for (int j = 0; j < kCols; ++j) fixed_block(t, j, mx[j][t].x, __float_as_int(mx[j][t].y));
    } else {
#pragma unroll
      for (int t = 0; t < 2; ++t) careful_block(t);
    }
  };
  float acc[kRows][kCols];
  zero_rows(acc);

  // One ring through all of the warp's pairs: step i is stage i % stages of
  // pair i / stages, in slot i % kStages; one commit group a step, empty
  // ones too, so that the wait below is one constant.
  StageMeta<kZP> meta[kStages];
  int64_t issue_row0 = row0, issued = 0;
  int issue_s = 0;
  PairSrc src = pair_src<kZP>(p, issue_row0, lane);
  auto issue_next = [&](int at) {
    if (issued < steps) {
      issue_at(src, issue_s, at, meta[at]);
      if (++issue_s == stages) {
        issue_s = 0, issue_row0 += pairs_step;
        src = pair_src<kZP>(p, issue_row0, lane);
      }
    }
    ++issued;
    cp_async_commit();
  };
  // Behind the pass, the two-CTA instances take x a stage at a time. The
  // three-CTA one is chosen only where K spans two stages at most (each
  // CTA converts x itself there: pass_for), so its plain copy below is not
  // reached today. It stays rather than the staged one because, compiled
  // with the staged copy, that instance ran 3-5 % slower at 14336 x 4096
  // though it never took it (bench/RESULTS.md); with the plain copy its
  // machine code is the one measured. Either copy is correct there.
  const bool staged = kCtas == 2 && p.xfix != nullptr;
  if (staged && threadIdx.x == 0) {
    for (int t = 0; t < stages; ++t) bulk::mbar_init(&x_landed[t], 1);
    bulk::mbar_init_fence();
  }
#pragma unroll
  for (int k = 0; k < kStages - 1; ++k) issue_next(k);
  if (!staged) {
    if (kCtas == 2 || p.xfix == nullptr) {
      x_to_fixed<kWarps, kConvertInCtaStages>(p, act, stages);  // one batch: pass_for
    } else {
      wait_prerequisite();  // the pass's planes
      // 32-bit counters (the planes fit in shared memory): fewer
      // instructions a piece than 64-bit ones.
      const uint32_t end = smem_u32(act) + static_cast<uint32_t>(kCols * p.col_bytes);
      const uint8_t* src = p.xfix + 16 * threadIdx.x;
      for (uint32_t at = smem_u32(act) + 16 * threadIdx.x; at < end; at += 16 * blockDim.x, src += 16 * blockDim.x)
        cp_async<16>(at, src, 16);
      cp_async_commit();
      cp_async_wait<0>();
    }
    __syncthreads();  // every thread's blocks of x (or copies of them); no CTA barrier below
  } else {
    wait_prerequisite();  // the pass's planes
    __syncthreads();      // the mbarriers initialised before anyone waits on them; no CTA barrier below
    // One bulk copy a stage, each completing on its own mbarrier: a warp
    // starts its first stage once that stage of x has landed, where one
    // commit group of cp.async pieces and a CTA barrier made every warp
    // wait for all of x and for the ring's first stages of W behind it.
    // Warp 0 always has a pair (the grid holds no CTA without one), so it
    // waits for every stage before the CTA can end with a copy in flight.
    if (warp == 0)
      for (int t = lane; t < stages; t += 32) {
        bulk::mbar_arrive_expect(&x_landed[t], kStageActBytes);
        bulk::copy_g2s(act + t * kStageActBytes, p.xfix + t * kStageActBytes, kStageActBytes, &x_landed[t]);
      }
  }
  // Every wait is behind: the next kernel may launch, and its CTAs take
  // this grid's SMs as they free.
  launch_dependents();
  int s = 0;
  for (int64_t i0 = 0; i0 < steps; i0 += kStages) {
#pragma unroll
    for (int d = 0; d < kStages; ++d) {
      if (i0 + d < steps) {
        __syncwarp();  // every lane has read the slot that the next issue refills
        issue_next((d + kStages - 1) % kStages);
        cp_async_wait<kStages - 1>();  // this lane's copies of step i0 + d
        __syncwarp();                  // and every other lane's
        if (staged && i0 + d < stages) bulk::mbar_wait(&x_landed[s], 0);  // the first pair: stage s of x
        compute(acc, s, d, meta[d]);
        if (++s == stages) {
          warp_sum_store(acc, lane, row0, p.m, ep);  // the pair's outputs; acc zeroed
          s = 0, row0 += pairs_step;
        }
      }
    }
  }
}

template <int kCols, int kStages, int kWarps, bool kZP, int kCtas>
int resident_ctas(int device) {
  return resident_ctas_of<wo_fixed_kernel<kCols, kStages, kWarps, kZP, kCtas>>(device, 32 * kWarps,
                                                                               smem_budget(kCtas), 90);
}

// f(kernel, per_sm, stages, warps) for the instance that runs g; f(nullptr,
// -1, 0, warps) where none does. Three CTAs an SM where M asks for more
// CTAs than two an SM hold, each still gets a ring of 4 stages (K up to
// 4096: two stages of activations) and there are no zero points; else two with the deepest ring
// that fits. H200, N = 1, µs, cold / W in L2 (bench/RESULTS.md): three took
// 17.9-18.2 / 14.8-15.0 at 14336 x 4096 against 19.4-19.5 / 15.7-15.9 for
// two, and 16.0-16.3 / 13.6-13.8 at 11008 x 4096 against 17.3 / 14.4-14.5;
// at 4096 x 4096 (256 CTAs: no third one to place) 10.9-11.1 / 9.7-9.9
// against 10.3 / 9.0 (the cap of 80 registers costs), and at 4096 x 14336,
// where a third CTA leaves room for 2 stages only, 21.1-21.3 cold against
// 18.5-18.6.
template <class F>
decltype(auto) with_instance(const GemmArgs& g, F&& f) {
  const int64_t nb = g.a.k / 32;
  const int stages = stages_for(g.b.rows, nb, 2);
  const bool zp = g.a.zero_points.data != nullptr;
  const int64_t ctas = ((g.a.rows + kRows - 1) / kRows + kWarps - 1) / kWarps;
  const bool three = !zp && stages_for(g.b.rows, nb, 3) == kMaxStages &&
                     ctas > 2 * static_cast<int64_t>(device_limits(g.device.id).sms);
  auto by_stages = [&](auto cols, auto zpc) -> decltype(auto) {
    constexpr int kCols = decltype(cols)::value, kW = kWarps;
    constexpr bool kZ = decltype(zpc)::value;
    if constexpr (!kZ) {
      // Where a device holds fewer than three of it, the two-CTA instance
      // (more registers) is the better one.
      const int per_sm = three ? resident_ctas<kCols, 4, kW, kZ, 3>(g.device.id) : 0;
      if (per_sm >= 3) return f(wo_fixed_kernel<kCols, 4, kW, kZ, 3>, per_sm, 4, kW);
    }
    switch (stages) {
      case 4: return f(wo_fixed_kernel<kCols, 4, kW, kZ, 2>, resident_ctas<kCols, 4, kW, kZ, 2>(g.device.id), 4, kW);
      case 3: return f(wo_fixed_kernel<kCols, 3, kW, kZ, 2>, resident_ctas<kCols, 3, kW, kZ, 2>(g.device.id), 3, kW);
      case 2: return f(wo_fixed_kernel<kCols, 2, kW, kZ, 2>, resident_ctas<kCols, 2, kW, kZ, 2>(g.device.id), 2, kW);
      default: return f(decltype(&wo_fixed_kernel<kCols, 4, kW, kZ, 2>){nullptr}, -1, 0, kW);
    }
  };
  static_assert(kMaxCols == 1, "instances are built for N = 1");
  if (zp) return by_stages(std::integral_constant<int, 1>{}, std::true_type{});
  return by_stages(std::integral_constant<int, 1>{}, std::false_type{});
}

}  // namespace

bool gemm_wo_gemv_fixed_can_run(const GemmArgs& args, std::string* why_not) {
  auto no = [&](std::string why) {
    if (why_not) *why_not = std::move(why);
    return false;
  };
  if (args.b.rows != kMaxCols)
    return no("N=" + std::to_string(args.b.rows) + " is not 1 (one-token decode GEMV; the tensor-core GEMVs are "
              "faster from N = 2)");
  if (!gemm_wo_gemv_can_run(args, why_not)) return false;  // operands: formats, alignment, groups
  if (args.a.k == 0) return no("K=0: nothing to stream");
  const int64_t nb = args.a.k / 32;
  if (stages_for(args.b.rows, nb, 2) == 0)
    return no("N=" + std::to_string(args.b.rows) + " x K=" + std::to_string(args.a.k) +
              " activations in block fixed point (" + std::to_string(act_bytes(args.b.rows, nb)) +
              " bytes) do not fit in shared memory beside a ring of two stages");
  const int per_sm = with_instance(args, [](auto, int n, int, int) { return n; });
  return ctas_fit(per_sm, args.device.id, "sm_90", why_not);
}

Status gemm_wo_gemv_fixed_run(const GemmArgs& args, Stream stream) {
  if (args.a.rows <= 0 || args.b.rows <= 0) return Status::success();
  const cudaStream_t cs = to_cuda(stream);
  const int64_t nb = args.a.k / 32, n = args.b.rows;
  const int64_t col_bytes = column_bytes(nb);
  const bool bf16 = args.b.format == Format::bf16;
  Params p{};
  wo::set_operand_params(p, args);
  p.nb = nb;
  p.col_bytes = col_bytes;
  p.low_nibbles = 0x0F0F0F0Fu;
  p.high_nibbles = 0xF0F0F0F0u;
  p.sg_shift = p.s_shift - 5;
  p.zg_shift = p.zeros ? p.z_shift - 5 : 0;
  p.scale_up = p.scale_type == 2 ? 16 : 0;
  p.s_bytes_shift = p.scale_type == 0 ? 2 : 1;
  p.x_bf16 = bf16;
  // Long K: the pass first, into a workspace, and the GEMV launched early
  // behind it; without scratch memory, the GEMV that needs none.
  std::optional<Workspace> ws;
  if (pass_for(nb)) {
    ws.emplace(args.device.id, static_cast<size_t>(n * col_bytes), cs);
    if (!ws->ok()) return gemm_wo_gemv_run(args, stream);
    const FixedParams fp{static_cast<const uint8_t*>(args.b.data), ws->bytes(), nb, args.b.row_stride, col_bytes};
    const dim3 pass_grid(static_cast<unsigned>(col_bytes / kStageActBytes), static_cast<unsigned>(n));
    launch_maybe_early(bf16 ? to_fixed_kernel<true> : to_fixed_kernel<false>, pass_grid, dim3(256), 0, cs, true, fp);
    p.xfix = ws->bytes();
  }
  return with_instance(args, [&](auto kernel, int per_sm, int stages, int warps) {
    std::string why;
    if (!ctas_fit(per_sm, args.device.id, "sm_90", &why))
      return Status(StatusCode::cuda_error, std::string(args.fn) + " (cuda_wo_gemv_fixed): " + why + " (" +
                                                intfast::shape_text(args) + ")");
    const int64_t pairs = (args.a.rows + kRows - 1) / kRows;
    const int64_t grid = std::min<int64_t>((pairs + warps - 1) / warps,
                                           static_cast<int64_t>(per_sm) * device_limits(args.device.id).sms);
    const int64_t smem = ring_bytes(stages, warps) + act_bytes(n, nb);
    launch_maybe_early(kernel, dim3(static_cast<unsigned>(grid)), dim3(32 * warps), static_cast<size_t>(smem), cs,
                       true, p, epilogue_params(args));
    return intfast::launch_result(args);
  });
}

}  // namespace qg::detail::cuda
