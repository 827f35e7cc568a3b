// SPDX-License-Identifier: MIT
// cuda/gemm_wo_gemv_small.cu: weight-only GEMV for N <= 2 (decode of one or
// two tokens): i4 weights with group scales (and zero points) x f16 / bf16
// activations, on plain FFMAs.
//
//   C[m, n] = sum_g s[m, g] * sum_{k in g} (q[m, k] - z[m, g]) * x[n, k]
//
// With N <= 2 a weight takes at most 2 FMAs, so what bounds the kernel is
// how W reaches the registers and how few instructions turn a nibble into a
// float; no shared memory for W, no tensor cores.
//
// W: every lane streams its own 16-byte chunks (32 codes of one row, inside
// one group since groups are powers of two >= 32) with ld.global.nc.
// L1::no_allocate (W is read once; L1 keeps the activations). A lane owns
// 4 rows and the same chunk of each: one load a
// row per step, and 2 steps in registers (one in flight while the other is
// used): 32 to 64 KB in flight per SM at 16 warps, above what HBM's latency
// needs (~25 KB on an H100). Chunk c of a row goes to lane c % 32 of warp (c / 32) % KS
// of the KS warps that share the rows: each warp load is 512 contiguous
// bytes of each row.
//
// Codes to floats, exactly: one LOP3 and one FFMA a code. For nibble j of a
// 32-bit word (j = 0..3; the word >> 16 gives nibbles 4..7 the same places),
// (w & 0xF << 4j) ^ (0x4B000000 | 8 << 4j) read as a float is 2^23 + 16^j u,
// u = nibble ^ 8 (the two's complement flip: code = u - 8). Then
// fma(that, 16^-j, -(2^23 16^-j + 8) - z) = u - 8 - z = q - z: the product is
// exact (a power of two), the sum is an integer below 2^24, so the FFMA
// rounds nothing. Zero points cost nothing per code; for int32 |z| > 2^23
// the folded constant rounds once (relative error 2^-24 of q - z).
//
// Activations: __ldg from L1 (every row of the GPU reads them), 16 bytes for
// 8 values of K, converted once (cvt for f16, a shift or mask for bf16) and
// used by all of the lane's rows.
//
// Accumulation: fp32 throughout. Per step a lane sums its chunk's 32 terms
// (q - z) x into acc[r][n] with FFMAs (one rounding per term: the product is
// not rounded on its own), then out[r][n] += s * acc[r][n], once per chunk:
// each chunk of a lane lies in its own group. Cost per code: 2 + N FFMA/LOP3 plus
// N / 4 conversions of x: about 3 instructions at N = 1 (Nsight Compute
// counted ~3.4 while ptxas split the conversion's LOP3 in two, see
// CodeBits), against ~5 that an SM can issue per code at full HBM
// bandwidth on an H100. At
// N = 4 (2 rows a lane, for registers) it measured slower than cuda_wo_gemv's
// tensor cores (39 against 34 us at M = 4096, K = 14336 on an H100), so it
// takes N <= 2 only: 22.8 and 25.8 us there, against 34.
//
// Reduction: xor shuffles within the warp (a fixed order), then the KS warps
// of a row group in shared memory in warp order: deterministic. Rows past M
// are read as row M - 1 and never stored.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>

#include "gemm_int_fast.cuh"
#include "wo_params.cuh"

namespace qg::detail::cuda {
namespace {

using namespace intfast;

constexpr int kWarps = 8;
constexpr int kThreads = 32 * kWarps;
constexpr int kMaxCols = 2;
constexpr int kMaxKSplit = 8;  // warps of a CTA sharing one row group

struct Params {
  const uint8_t* w;
  const uint8_t* x;
  const uint8_t* scales;
  const uint8_t* zeros;
  int64_t m, k, ldw, ldx;      // ldw, ldx in bytes
  int64_t s_stride, z_stride;  // bytes between rows of scales / zero points
  int s_shift, z_shift;        // log2 of the group sizes
  int scale_type;              // 0 f32, 1 f16, 2 bf16
  int zero_i32;                // zero points are int32 (else int8)
  int ksplit;                  // warps per row group: 1, 2, 4, 8
  uint32_t magic;              // 0x4B000000 (2^23's bits), see CodeBits
};

__device__ __forceinline__ int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

// 16 bytes of W, read once: the non-coherent path, not kept in L1.
__device__ __forceinline__ uint4 ld_stream(const uint8_t* p) {
  uint4 v;
#if __CUDA_ARCH__ >= 700
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
#else
  v = __ldg(reinterpret_cast<const uint4*>(p));
#endif
  return v;
}

// 8 activations (16 bytes) as floats, exact.
template <bool kBf16>
__device__ __forceinline__ void x_to_float(const uint4& v, float (&f)[8]) {
  const uint32_t u[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    if constexpr (kBf16) {
      f[2 * i] = __uint_as_float(u[i] << 16);
      f[2 * i + 1] = __uint_as_float(u[i] & 0xFFFF0000u);
    } else {
      const float2 t = __half22float2(*reinterpret_cast<const __half2*>(&u[i]));
      f[2 * i] = t.x;
      f[2 * i + 1] = t.y;
    }
  }
}

// The XOR operands of code_of, 0x4B000000 | 8 << 4j for j = 0..3, in
// registers. LOP3 takes one immediate: with both the mask and these as
// immediates, ptxas splits (w & mask) ^ bits into two LOP3s (4 instructions
// a code instead of 3). Built from Params::magic, which it cannot fold.
struct CodeBits {
  uint32_t b[4];
  __device__ __forceinline__ explicit CodeBits(uint32_t magic) {
#pragma unroll
    for (int j = 0; j < 4; ++j) b[j] = magic | (8u << (4 * j));
  }
};

// Nibble j (0..3) of w as q - z, given c = -(2^23 16^-j + 8) - z.
template <int kJ>
__device__ __forceinline__ float code_of(uint32_t w, const CodeBits& bits, float c) {
  constexpr uint32_t kMask = 0xFu << (4 * kJ);
  constexpr float kInv = 1.0f / static_cast<float>(1u << (4 * kJ));
  return fmaf(__uint_as_float((w & kMask) ^ bits.b[kJ]), kInv, c);
}

// What one step loads: one 16-byte chunk of each of the lane's rows, with
// its group's scale (and zero point).
template <int kRows, bool kZP>
struct Step {
  uint4 w[kRows];
  uint32_t s[kRows];
  int z[kRows];
};

template <int kRows, bool kZP>
__device__ __forceinline__ void load_step(Step<kRows, kZP>& st, const Params& p, const uint8_t* const (&wrow)[kRows],
                                          const uint8_t* const (&srow)[kRows],
                                          const uint8_t* const (&zrow)[kRows], int64_t chunk) {
#pragma unroll
  for (int r = 0; r < kRows; ++r) st.w[r] = ld_stream(wrow[r] + 16 * chunk);
  const int64_t sg = (chunk * 32) >> p.s_shift;
#pragma unroll
  for (int r = 0; r < kRows; ++r) st.s[r] = wo::load_scale_bits(p, srow[r], sg);
  if constexpr (kZP) {
    const int64_t zg = (chunk * 32) >> p.z_shift;
#pragma unroll
    for (int r = 0; r < kRows; ++r) st.z[r] = wo::load_zero_int(p, zrow[r], zg);
  }
}

// One chunk (32 values of K) of every row of the lane.
template <int kN, int kRows, bool kBf16, bool kZP>
__device__ __forceinline__ void use_step(float (&out)[kRows][kN], const Step<kRows, kZP>& st, const Params& p,
                                         const CodeBits& bits, const uint8_t* const (&xrow)[kN], int64_t chunk) {
  // -(2^23 16^-j + 8) - z for j = 0..3, per row.
  float c[kRows][4];
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    const float z = kZP ? static_cast<float>(st.z[r]) : 0.0f;
    c[r][0] = -8388616.0f - z;
    c[r][1] = -524296.0f - z;
    c[r][2] = -32776.0f - z;
    c[r][3] = -2056.0f - z;
  }
  float acc[kRows][kN];
#pragma unroll
  for (int r = 0; r < kRows; ++r)
#pragma unroll
    for (int n = 0; n < kN; ++n) acc[r][n] = 0.0f;
  // The activations of word q + 1 load while word q is used.
  const uint8_t* const xbase = xrow[0] + 64 * chunk;
  const int64_t ldx = p.ldx;
  uint4 xr[2][kN];
  auto load_x = [&](int q, uint4(&dst)[kN]) {
#pragma unroll
    for (int n = 0; n < kN; ++n) dst[n] = __ldg(reinterpret_cast<const uint4*>(xbase + n * ldx + 16 * q));
  };
  load_x(0, xr[0]);
#pragma unroll
  for (int q = 0; q < 4; ++q) {  // 32-bit word q of the chunk: K = 32 chunk + 8q .. + 7
    if (q < 3) load_x(q + 1, xr[(q + 1) & 1]);
    float xf[kN][8];
#pragma unroll
    for (int n = 0; n < kN; ++n) x_to_float<kBf16>(xr[q & 1][n], xf[n]);
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const uint32_t lo = q == 0 ? st.w[r].x : (q == 1 ? st.w[r].y : (q == 2 ? st.w[r].z : st.w[r].w));
      const uint32_t hi = lo >> 16;
      const float v[8] = {code_of<0>(lo, bits, c[r][0]), code_of<1>(lo, bits, c[r][1]),
                          code_of<2>(lo, bits, c[r][2]), code_of<3>(lo, bits, c[r][3]),
                          code_of<0>(hi, bits, c[r][0]), code_of<1>(hi, bits, c[r][1]),
                          code_of<2>(hi, bits, c[r][2]), code_of<3>(hi, bits, c[r][3])};
#pragma unroll
      for (int e = 0; e < 8; ++e)
#pragma unroll
        for (int n = 0; n < kN; ++n) acc[r][n] = fmaf(v[e], xf[n][e], acc[r][n]);
    }
  }
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    const float s = wo::scale_from_bits(p, st.s[r]);
#pragma unroll
    for (int n = 0; n < kN; ++n) out[r][n] = fmaf(s, acc[r][n], out[r][n]);
  }
}

template <int kN, bool kBf16, bool kZP, int kRows, int kDepth>
__global__ void __launch_bounds__(kThreads, 2) gemm_wo_gemv_small_kernel(Params p, EpilogueParams ep) {
  __shared__ float partial[kWarps][kRows * kMaxCols];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int ks = p.ksplit, group_in_cta = warp / ks, kw = warp % ks;
  const int groups_per_cta = kWarps / ks;
  const int64_t chunks = p.k / 32;
  const int64_t stride = 32 * static_cast<int64_t>(ks);
  const int64_t first = 32 * kw + lane;
  const int64_t steps = first < chunks ? (chunks - first + stride - 1) / stride : 0;
  const int64_t row_groups = (p.m + kRows - 1) / kRows;
  const CodeBits bits(p.magic);

  const uint8_t* xrow[kN];
#pragma unroll
  for (int n = 0; n < kN; ++n) xrow[n] = p.x + n * p.ldx;

  for (int64_t rg0 = static_cast<int64_t>(blockIdx.x) * groups_per_cta; rg0 < row_groups;
       rg0 += static_cast<int64_t>(gridDim.x) * groups_per_cta) {
    const int64_t row0 = (rg0 + group_in_cta) * kRows;
    const uint8_t* wrow[kRows];
    const uint8_t* srow[kRows];
    const uint8_t* zrow[kRows];
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const int64_t row = min64(row0 + r, p.m - 1);
      wrow[r] = p.w + row * p.ldw;
      srow[r] = p.scales + row * p.s_stride;
      zrow[r] = kZP ? p.zeros + row * p.z_stride : p.zeros;
    }
    float out[kRows][kN];
#pragma unroll
    for (int r = 0; r < kRows; ++r)
#pragma unroll
      for (int n = 0; n < kN; ++n) out[r][n] = 0.0f;

    // A ring of kDepth steps in registers: slot d holds step i + d; it is
    // refilled with step i + d + kDepth right after it is used.
    Step<kRows, kZP> ring[kDepth];
#pragma unroll
    for (int d = 0; d < kDepth; ++d)
      if (d < steps) load_step<kRows, kZP>(ring[d], p, wrow, srow, zrow, first + d * stride);
    for (int64_t i = 0; i < steps; i += kDepth) {
#pragma unroll
      for (int d = 0; d < kDepth; ++d) {
        if (i + d < steps) {
          use_step<kN, kRows, kBf16, kZP>(out, ring[d], p, bits, xrow, first + (i + d) * stride);
          if (i + d + kDepth < steps) load_step<kRows, kZP>(ring[d], p, wrow, srow, zrow, first + (i + d + kDepth) * stride);
        }
      }
    }

    // Warp sums (every lane ends with the totals), then warp kw's row into
    // shared memory.
#pragma unroll
    for (int r = 0; r < kRows; ++r)
#pragma unroll
      for (int n = 0; n < kN; ++n) {
        float v = out[r][n];
#pragma unroll
        for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xFFFFFFFFu, v, o);
        if (lane == r * kN + n) partial[warp][r * kN + n] = v;
      }
    __syncthreads();
    const int per_group = kRows * kN;
    if (static_cast<int>(threadIdx.x) < groups_per_cta * per_group) {
      const int g = threadIdx.x / per_group, e = threadIdx.x % per_group;
      const int r = e / kN, n = e % kN;
      const int64_t row = (rg0 + g) * kRows + r;
      float v = partial[g * ks][e];
      for (int w = 1; w < ks; ++w) v += partial[g * ks + w][e];
      if (row < p.m) epilogue_store(ep, row, n, v);
    }
    __syncthreads();  // the next row block reuses `partial`
  }
}

// Rows per lane: 4 share each conversion of x.
template <int kN>
constexpr int rows_of() {
  return 4;
}
constexpr int kRingDepth = 2;  // steps in registers: one in flight while one is used

template <int kN, bool kBf16, bool kZP>
KernelFit fit_of(int device) {
  static std::once_flag once[kMaxDevices];
  static KernelFit cache[kMaxDevices];
  return cached_fit(gemm_wo_gemv_small_kernel<kN, kBf16, kZP, rows_of<kN>(), kRingDepth>, kThreads, 0, device,
                    once, cache);
}

template <int kN, bool kBf16, bool kZP>
Status launch(const GemmArgs& g, Params p, cudaStream_t stream) {
  const KernelFit fit = fit_of<kN, kBf16, kZP>(g.device.id);
  if (fit.blocks_per_sm == 0)
    return Status(StatusCode::cuda_error, std::string(g.fn) +
                                              " (cuda_wo_gemv_small): the kernel cannot be launched on cuda:" +
                                              std::to_string(g.device.id) + " (" + shape_text(g) + ")");
  const int64_t row_groups = (p.m + rows_of<kN>() - 1) / rows_of<kN>();
  const int64_t chunks = p.k / 32;
  const int64_t warp_slots = static_cast<int64_t>(device_limits(g.device.id).sms) * fit.blocks_per_sm * kWarps;
  // Split K over more warps of a CTA while every warp of the launch still
  // fits at once (one wave) and each lane keeps at least 2 steps.
  int ks = 1;
  while (ks < kMaxKSplit && row_groups * ks * 2 <= warp_slots && chunks >= 32 * 2 * ks * 2) ks *= 2;
  p.ksplit = ks;
  const int64_t groups_per_cta = kWarps / ks;
  const int64_t grid = std::min<int64_t>((row_groups + groups_per_cta - 1) / groups_per_cta, 0x7FFFFFFF);
  gemm_wo_gemv_small_kernel<kN, kBf16, kZP, rows_of<kN>(), kRingDepth>
      <<<static_cast<unsigned>(grid), kThreads, 0, stream>>>(p, epilogue_params(g));
  return launch_result(g);
}

template <bool kBf16, bool kZP>
Status launch_cols(const GemmArgs& g, const Params& p, cudaStream_t stream, int64_t n) {
  return n == 1 ? launch<1, kBf16, kZP>(g, p, stream) : launch<2, kBf16, kZP>(g, p, stream);
}

}  // namespace

// The same operands as cuda_wo_gemv (16-byte-aligned K-contiguous rows, K a
// multiple of 32, power-of-two groups >= 32), with N <= 2.
bool gemm_wo_gemv_small_can_run(const GemmArgs& args, std::string* why_not) {
  const Operand& a = args.a;
  const Operand& b = args.b;
  if (a.format != Format::i4 || (b.format != Format::f16 && b.format != Format::bf16)) {
    if (why_not) *why_not = "i4 weights x f16 / bf16 activations only";
    return false;
  }
  if (b.rows > kMaxCols) {
    if (why_not) *why_not = "N=" + std::to_string(b.rows) + " > 2 (small-N GEMV kernel)";
    return false;
  }
  return gemm_wo_gemv_can_run(args, why_not);
}

Status gemm_wo_gemv_small_run(const GemmArgs& args, Stream stream) {
  if (args.a.rows <= 0 || args.b.rows <= 0) return Status::success();
  Params p{};
  wo::set_operand_params(p, args);
  p.ksplit = 1;
  p.magic = 0x4B000000u;
  const cudaStream_t st = to_cuda(stream);
  const bool bf16 = args.b.format == Format::bf16, zp = p.zeros != nullptr;
  const int64_t n = args.b.rows;
  if (bf16) return zp ? launch_cols<true, true>(args, p, st, n) : launch_cols<true, false>(args, p, st, n);
  return zp ? launch_cols<false, true>(args, p, st, n) : launch_cols<false, false>(args, p, st, n);
}

}  // namespace qg::detail::cuda
