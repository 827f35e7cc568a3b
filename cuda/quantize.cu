// SPDX-License-Identifier: MIT
// cuda/quantize.cu: fp32/fp16/bf16 rows -> Q4_0 / Q8_0 / Q8_1 blocks and back.
//
// The block arithmetic is quant_block.h's, called on the device, so the bytes
// equal the CPU backend's. What this file adds is the memory layout.
//
// Quantize: each lane reads 32 bytes of x with two 16-byte loads, so a
// 32-value block is spread over 4 lanes (f32) or 2 (f16, bf16), and the
// block's max, code sum and non-finite test are shuffles among those lanes.
// Each lane writes its own 8 or 16 codes as 32-bit words. An earlier layout
// (one block per lane, the warp staging 32 blocks through shared memory with
// 4-byte loads) reached 66 % of the copy bandwidth on a 4096 x 14336 fp32
// tensor on an H200: it had one 4-byte load per lane in flight between
// shared-memory round trips.
//
// Dequantize still stages: one warp owns 32 consecutive blocks of a row; each
// lane dequantizes one block into shared memory (row pitch 33 floats, so lane l
// reading its block's value j hits bank (l + j) % 32: conflict-free), and the
// warp writes the floats back with 128-byte coalesced stores.
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "device_limits.cuh"
#include "format_dispatch.h"
#include "grid_dependency.cuh"
#include "quantize.cuh"
#include "quantize_warp.cuh"

namespace qg::detail::cuda {
namespace {

constexpr int kQuantizeThreads = 256;
// Below this many warp tasks of one step each, the whole tensor is one wave
// on an H100/H200 (132 SMs x 64 resident warps): one step per warp then.
constexpr int64_t kOneWaveWarps = 132 * 64;
constexpr int kWarpsPerCta = 4;         // dequantize
constexpr int kBlocksPerWarp = 32;      // dequantize
constexpr int kPitch = 33;              // floats per staged block (32 + 1 pad)
constexpr int kMaxBytesPerBlock = 36;   // block_q8_1
constexpr int64_t kMaxGrid = 1 << 20;   // grid-stride beyond this

// Copies a warp's packed bytes between global and shared memory, 16 bits at a
// time when the global side allows it (every block size here is even, so
// only the row base and stride decide).
__device__ __forceinline__ void copy_bytes_warp(uint8_t* dst, const uint8_t* src, int bytes, int lane) {
  if (((reinterpret_cast<uintptr_t>(dst) | reinterpret_cast<uintptr_t>(src)) & 1) == 0) {
    uint16_t* d16 = reinterpret_cast<uint16_t*>(dst);
    const uint16_t* s16 = reinterpret_cast<const uint16_t*>(src);
    for (int i = lane; i < bytes / 2; i += 32) d16[i] = s16[i];
  } else {
    for (int i = lane; i < bytes; i += 32) dst[i] = src[i];
  }
}

// How a lane reads its 32 bytes of x: two 16-byte loads (row base and stride
// 16-byte aligned), element-sized loads, or byte loads (any address).
enum class XAccess { vector, element, byte };

// 16 bytes of x at p.
template <DType T>
__device__ __forceinline__ uint4 load_16(const uint8_t* p, XAccess access) {
  if (access == XAccess::vector) return __ldg(reinterpret_cast<const uint4*>(p));
  uint32_t w[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    if (access == XAccess::element && T == DType::f32) {
      w[i] = reinterpret_cast<const uint32_t*>(p)[i];
    } else if (access == XAccess::element) {
      const uint16_t* p16 = reinterpret_cast<const uint16_t*>(p);
      w[i] = static_cast<uint32_t>(p16[2 * i]) | (static_cast<uint32_t>(p16[2 * i + 1]) << 16);
    } else {
      w[i] = static_cast<uint32_t>(p[4 * i]) | (static_cast<uint32_t>(p[4 * i + 1]) << 8) |
             (static_cast<uint32_t>(p[4 * i + 2]) << 16) | (static_cast<uint32_t>(p[4 * i + 3]) << 24);
    }
  }
  return make_uint4(w[0], w[1], w[2], w[3]);
}

// A lane's 32 bytes as V floats (8 f32 or 16 f16/bf16).
template <DType T, int V>
__device__ __forceinline__ void unpack_lane(const uint4 (&raw)[2], float (&v)[V]) {
  const uint32_t w[8] = {raw[0].x, raw[0].y, raw[0].z, raw[0].w, raw[1].x, raw[1].y, raw[1].z, raw[1].w};
#pragma unroll
  for (int i = 0; i < V; ++i) {
    if constexpr (T == DType::f32) {
      v[i] = bits_float(w[i]);
    } else {
      const uint16_t h = static_cast<uint16_t>(w[i / 2] >> (16 * (i % 2)));
      v[i] = T == DType::f16 ? fp16_to_fp32(h) : bf16_to_fp32(h);
    }
  }
}

// 4 bytes at p, whose alignment is at least kAlign (4, 2 or 1), or, with
// kAlign = 0, at least the run-time `align`.
template <int kAlign>
__device__ __forceinline__ void store_word(uint8_t* p, uint32_t w, int align) {
  const int a = kAlign ? kAlign : align;
  if (a >= 4) {
    *reinterpret_cast<uint32_t*>(p) = w;
  } else if (a >= 2) {
    reinterpret_cast<uint16_t*>(p)[0] = static_cast<uint16_t>(w);
    reinterpret_cast<uint16_t*>(p)[1] = static_cast<uint16_t>(w >> 16);
  } else {
    for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(w >> (8 * i));
  }
}
template <int kAlign>
__device__ __forceinline__ void store_half(uint8_t* p, uint16_t h, int align) {
  const int a = kAlign ? kAlign : align;
  if (a >= 2) {
    *reinterpret_cast<uint16_t*>(p) = h;
  } else {
    p[0] = static_cast<uint8_t>(h);
    p[1] = static_cast<uint8_t>(h >> 8);
  }
}

constexpr uint32_t kAbsInf = 0x7F800000u;  // |x| bits at or above this: Inf or NaN

// One block held by G lanes, V = 32 / G consecutive values each (this lane's
// are values sub*V .. sub*V + V - 1): quant_block.h's block quantizers with
// their loops split into a per-lane part and group reductions that give the
// same numbers (a max and an integer sum do not depend on the order; Q4_0's
// "first value of largest magnitude" is a (magnitude, index) reduction; the
// ggml_cuda convention's fp32 sum, which does, is passed from lane to lane in
// index order). Magnitudes are compared as the integer bits of |x|, which
// order finite floats as their values do and put Inf and NaN above them all:
// the block's largest one also says whether the block is finite. Every lane
// computes unconditionally, because the shuffles need the whole warp; a
// non-finite block's bytes are selected at the end. yb == nullptr: a lane
// past the row's end, which computes but stores nothing.
template <Format F, int V, int G, int kAlign>
__device__ __forceinline__ void quantize_lane(const float (&v)[V], int sub, uint8_t* yb, int y_align,
                                              Q8_1Convention convention) {
  constexpr int kWords = V / 4;  // 4 codes per word, one byte each
  uint32_t w[kWords] = {};
  if constexpr (F == Format::q4_0) {
    // The reference keeps the first value whose magnitude beats all before:
    // the group's largest magnitude (a max of the bits), then the lowest lane
    // holding it (a ballot), and that lane's first value with it. The
    // shuffle runs on every lane, before any select: a full-mask shuffle
    // that some lanes skip never completes.
    uint32_t abits = 0;
#pragma unroll
    for (int i = 0; i < V; ++i) abits = max(abits, float_bits(v[i]) & 0x7FFFFFFFu);
#pragma unroll
    for (int off = G / 2; off > 0; off >>= 1) abits = max(abits, __shfl_xor_sync(0xFFFFFFFFu, abits, off));
    float first = 0.0f;
    bool holds = false;
#pragma unroll
    for (int i = V - 1; i >= 0; --i) {
      const bool here = (float_bits(v[i]) & 0x7FFFFFFFu) == abits;
      first = here ? v[i] : first;
      holds = holds || here;
    }
    const int group0 = (threadIdx.x % 32) & ~(G - 1);
    const uint32_t holders = (__ballot_sync(0xFFFFFFFFu, holds) >> group0) & ((1u << G) - 1u);
    const float held = __shfl_sync(0xFFFFFFFFu, first, group0 + __ffs(holders) - 1);
    // An all-zero block keeps the reference's +0 (its max never moves).
    const float max = abits == 0 ? 0.0f : held;
    const bool finite = abits < kAbsInf;
    // max / -8 as a product: the same correctly rounded quotient, no division.
    const float d = mul_rn(max, -0.125f), id = inverse_scale(d);
#pragma unroll
    for (int i = 0; i < V; ++i) w[i / 4] |= static_cast<uint32_t>(q4_0_code(mul_rn(v[i], id))) << (8 * (i % 4));
    // Byte j packs values j and j + 16: the partner of the lower half's lane
    // sub is lane sub + G/2.
#pragma unroll
    for (int k = 0; k < kWords; ++k) {
      const uint32_t hi = __shfl_xor_sync(0xFFFFFFFFu, w[k], G / 2);
      w[k] = finite ? (w[k] | (hi << 4)) : 0x88888888u;
    }
    if (yb == nullptr || sub >= G / 2) return;
#pragma unroll
    for (int k = 0; k < kWords; ++k) store_word<kAlign>(yb + 2 + sub * V + 4 * k, w[k], y_align);
    if (sub == 0) store_half<kAlign>(yb, finite ? fp32_to_fp16(d) : kFp16NaN, y_align);
  } else {
    uint32_t abits = 0;
#pragma unroll
    for (int i = 0; i < V; ++i) abits = max(abits, float_bits(v[i]) & 0x7FFFFFFFu);
#pragma unroll
    for (int off = G / 2; off > 0; off >>= 1) abits = max(abits, __shfl_xor_sync(0xFFFFFFFFu, abits, off));
    const bool finite = abits < kAbsInf;
    const float amax = bits_float(abits);
    const float d = div_rn(amax, 127.0f);
    uint16_t s = kFp16NaN;
    if (F == Format::q8_1 && convention == Q8_1Convention::ggml_cuda) {
#pragma unroll
      for (int i = 0; i < V; ++i)
        w[i / 4] |= static_cast<uint32_t>(static_cast<uint8_t>(amax == 0.0f ? 0 : q8_code(div_rn(v[i], d))))
                    << (8 * (i % 4));
      float xsum = 0.0f;
      const int group0 = (threadIdx.x % 32) & ~(G - 1);
#pragma unroll
      for (int step = 0; step < G; ++step) {
        float part = xsum;
        if (sub == step)
#pragma unroll
          for (int i = 0; i < V; ++i) part = add_rn(part, v[i]);
        xsum = __shfl_sync(0xFFFFFFFFu, part, group0 + step);
      }
      s = fp32_to_fp16(xsum);
    } else {
      const float id = inverse_scale(d);
      int sum = 0;
#pragma unroll
      for (int i = 0; i < V; ++i) {
        const int8_t q = q8_code(mul_rn(v[i], id));
        sum += q;
        w[i / 4] |= static_cast<uint32_t>(static_cast<uint8_t>(q)) << (8 * (i % 4));
      }
      if constexpr (F == Format::q8_1) {
#pragma unroll
        for (int off = G / 2; off > 0; off >>= 1) sum += __shfl_xor_sync(0xFFFFFFFFu, sum, off);
        s = fp32_to_fp16(mul_rn(static_cast<float>(sum), d));
      }
    }
    if (yb == nullptr) return;
    constexpr int kCodes = F == Format::q8_1 ? 4 : 2;  // byte offset of the codes
#pragma unroll
    for (int k = 0; k < kWords; ++k) store_word<kAlign>(yb + kCodes + sub * V + 4 * k, finite ? w[k] : 0u, y_align);
    if (sub != 0) return;
    const uint16_t dh = finite ? fp32_to_fp16(d) : kFp16NaN;
    if constexpr (F == Format::q8_1) store_word<kAlign>(yb, dh | (static_cast<uint32_t>(finite ? s : kFp16NaN) << 16), y_align);
    else store_half<kAlign>(yb, dh, y_align);
  }
}

// Each lane reads 32 bytes of x (V = 8 f32 or 16 f16/bf16 values) with two
// 16-byte loads, so G = 32 / V lanes hold a block (4 or 2) and a warp covers
// 32 / G consecutive blocks per step, 1 KB of the row. Why not fewer values
// per lane, in one load: every lane of a block's group repeats the block's
// scalar work (two correctly rounded divisions, the reductions, the fp16
// scale), and at 8 lanes per f32 block that made the kernel issue-bound (47 %
// of the copy bandwidth on a 4096 x 14336 f32 tensor on an H200). The two
// loads of a lane fall in one 32-byte sector, and the second hits L1: Nsight
// Compute measured a 56 % L1 hit rate, and the second loads are half of all.
// A warp's task is U steps of one row, loaded before any arithmetic, so that
// U x 32 bytes per lane are in flight (U = 4 for tensors that fill the GPU
// many times over; 1 for smaller ones, where more warps in one wave hide the
// latency better).
template <Format F, DType T, int U, bool kVector>
__global__ void __launch_bounds__(kQuantizeThreads)
quantize_kernel(const uint8_t* __restrict__ x, int64_t rows, int64_t nb, int64_t x_row_stride,
                uint8_t* __restrict__ y, int64_t y_row_stride, Q8_1Convention convention, XAccess access,
                int y_align) {
  constexpr int kEsize = T == DType::f32 ? 4 : 2;
  constexpr int G = kEsize, V = 32 / G, kBlocksPerStep = 32 / G, kTaskBlocks = kBlocksPerStep * U;
  constexpr int kBpb = static_cast<int>(sizeof(typename BlockOf<F>::type));
  // kVector: 16-byte loads, and y aligned as its blocks allow (4 bytes for
  // Q8_1, 2 for the others), so that neither is a run-time branch per load
  // and store (they made up a third of the instructions).
  constexpr int kAlign = kVector ? (F == Format::q8_1 ? 4 : 2) : 0;
  // Launched early (launch_quantize_from): x may be the previous kernel's
  // output, so nothing is read before the wait. Then a GEMM launched early
  // behind this pass (linear_q4_0 on cuda_gemv_ring) may start streaming
  // its weights; it waits for this grid's completion before it reads y
  // (grid_dependency.cuh), and the weights it reads first are not older
  // than the kernel before this one. Kernels launched plainly ignore both.
  wait_prerequisite();
  launch_dependents();
  const int lane = threadIdx.x % 32, sub = lane % G, slot = lane / G;
  const int64_t tasks_per_row = (nb + kTaskBlocks - 1) / kTaskBlocks;
  const int64_t tasks = rows * tasks_per_row;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * (kQuantizeThreads / 32);
  for (int64_t task = static_cast<int64_t>(blockIdx.x) * (kQuantizeThreads / 32) + threadIdx.x / 32; task < tasks;
       task += warps) {
    const int64_t row = task / tasks_per_row;
    const int64_t b0 = (task - row * tasks_per_row) * kTaskBlocks + slot;
    const uint8_t* xb = x + (row * x_row_stride + b0 * 32 + sub * V) * kEsize;
    uint8_t* yb = y + row * y_row_stride + b0 * kBpb;
    uint4 raw[U][2];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const bool in_row = b0 + u * kBlocksPerStep < nb;
      const uint8_t* p = xb + u * kBlocksPerStep * 32 * kEsize;
      if constexpr (kVector) {
        raw[u][0] = in_row ? __ldg(reinterpret_cast<const uint4*>(p)) : make_uint4(0, 0, 0, 0);
        raw[u][1] = in_row ? __ldg(reinterpret_cast<const uint4*>(p) + 1) : make_uint4(0, 0, 0, 0);
      } else {
        raw[u][0] = in_row ? load_16<T>(p, access) : make_uint4(0, 0, 0, 0);
        raw[u][1] = in_row ? load_16<T>(p + 16, access) : make_uint4(0, 0, 0, 0);
      }
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const bool in_row = b0 + u * kBlocksPerStep < nb;
      float v[V];
      unpack_lane<T, V>(raw[u], v);
      quantize_lane<F, V, G, kAlign>(v, sub, in_row ? yb + u * kBlocksPerStep * kBpb : nullptr, y_align,
                                     convention);
    }
  }
}

template <Format F>
__global__ void __launch_bounds__(kWarpsPerCta * 32)
dequantize_kernel(const uint8_t* __restrict__ xq, int64_t rows, int64_t nb, int64_t xq_row_stride,
                  float* __restrict__ y, int64_t y_row_stride) {
  using Block = typename BlockOf<F>::type;
  constexpr int kBpb = static_cast<int>(sizeof(Block));
  __shared__ __align__(16) uint8_t sq[kWarpsPerCta][kBlocksPerWarp * kMaxBytesPerBlock];
  __shared__ float sy[kWarpsPerCta][kBlocksPerWarp * kPitch];

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t chunks_per_row = (nb + kBlocksPerWarp - 1) / kBlocksPerWarp;
  const int64_t chunks = rows * chunks_per_row;
  uint8_t* qs = sq[warp];
  float* ys = sy[warp];
  for (int64_t c = static_cast<int64_t>(blockIdx.x) * kWarpsPerCta + warp; c < chunks;
       c += static_cast<int64_t>(gridDim.x) * kWarpsPerCta) {
    const int64_t row = c / chunks_per_row;
    const int64_t b0 = (c % chunks_per_row) * kBlocksPerWarp;
    const int nblk = static_cast<int>(min(static_cast<int64_t>(kBlocksPerWarp), nb - b0));
    copy_bytes_warp(qs, xq + row * xq_row_stride + b0 * kBpb, nblk * kBpb, lane);
    __syncwarp();
    if (lane < nblk) dequantize_block<F>(reinterpret_cast<const Block*>(qs + lane * kBpb), ys + lane * kPitch);
    __syncwarp();
    float* yrow = y + row * y_row_stride + b0 * 32;
    for (int i = 0; i < nblk; ++i) yrow[i * 32 + lane] = ys[i * kPitch + lane];
    __syncwarp();
  }
}

unsigned grid_for(int64_t rows, int64_t nb) {
  const int64_t chunks = rows * ((nb + kBlocksPerWarp - 1) / kBlocksPerWarp);  // warps
  const int64_t ctas = (chunks + kWarpsPerCta - 1) / kWarpsPerCta;
  return static_cast<unsigned>(ctas < 1 ? 1 : (ctas > kMaxGrid ? kMaxGrid : ctas));
}

// The largest of 4, 2, 1 that divides v.
int alignment_of(uintptr_t v) { return v % 4 == 0 ? 4 : (v % 2 == 0 ? 2 : 1); }

template <Format F, DType T>
void launch_quantize_from(const QuantizeArgs& a, cudaStream_t stream) {
  constexpr int kEsize = T == DType::f32 ? 4 : 2;
  constexpr int kBlocksPerStep = 32 / kEsize;  // 32 / G blocks per warp step
  constexpr int kBpb = static_cast<int>(sizeof(typename BlockOf<F>::type));
  const int64_t nb = a.k / 32;
  const uintptr_t x_addr = reinterpret_cast<uintptr_t>(a.x);
  const XAccess access = (x_addr % 16 == 0 && (a.x_row_stride * kEsize) % 16 == 0) ? XAccess::vector
                         : x_addr % kEsize == 0                                     ? XAccess::element
                                                                                    : XAccess::byte;
  const int y_align = std::min({alignment_of(reinterpret_cast<uintptr_t>(a.y)),
                                alignment_of(static_cast<uintptr_t>(a.y_row_stride)), alignment_of(kBpb)});
  const int64_t one_step_warps = a.rows * ((nb + kBlocksPerStep - 1) / kBlocksPerStep);
  const bool one_wave = one_step_warps <= kOneWaveWarps;
  const bool vector = access == XAccess::vector && y_align == (F == Format::q8_1 ? 4 : 2);
  using Kernel = decltype(&quantize_kernel<F, T, 1, true>);
  const Kernel kernel = one_wave ? (vector ? quantize_kernel<F, T, 1, true> : quantize_kernel<F, T, 1, false>)
                                 : (vector ? quantize_kernel<F, T, 4, true> : quantize_kernel<F, T, 4, false>);
  const int64_t warps = one_wave ? one_step_warps : (one_step_warps + 3) / 4;
  constexpr int kWarpsPerQuantizeCta = kQuantizeThreads / 32;
  const int64_t ctas = std::min((warps + kWarpsPerQuantizeCta - 1) / kWarpsPerQuantizeCta, kMaxGrid);
  // Launched early behind the stream's previous kernel (often the previous
  // layer's GEMV, which lets it launch once that one has waited for its own
  // input): the kernel waits for it before reading x, and a loop of calls
  // from Python no longer pays this launch between the two. Not while the
  // stream is captured: in a CUDA graph the launch costs little already, and
  // there the early quantizer made linear_q4_0 1-6 % slower at 4096 x 14336
  // on an H200 (0-4 % faster at 14336 x 4096; bench/RESULTS.md). Nor before
  // sm_90, which has no programmatic dependent launch.
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  const bool early = device_limits(a.device.id).cc_major >= 9 &&
                     cudaStreamIsCapturing(stream, &capture) == cudaSuccess && capture == cudaStreamCaptureStatusNone;
  launch_maybe_early(kernel, dim3(static_cast<unsigned>(std::max<int64_t>(ctas, 1))), dim3(kQuantizeThreads), 0,
                     stream, early, static_cast<const uint8_t*>(a.x), a.rows, nb, a.x_row_stride,
                     static_cast<uint8_t*>(a.y), a.y_row_stride, a.q8_1_convention, access, y_align);
}

template <Format F>
void launch_quantize(const QuantizeArgs& a, cudaStream_t stream) {
  switch (a.x_dtype) {
    case DType::f16:
      launch_quantize_from<F, DType::f16>(a, stream);
      break;
    case DType::bf16:
      launch_quantize_from<F, DType::bf16>(a, stream);
      break;
    default:
      launch_quantize_from<F, DType::f32>(a, stream);
      break;
  }
}

std::string rows_k(int64_t rows, int64_t k) { return "rows=" + std::to_string(rows) + ", k=" + std::to_string(k); }

}  // namespace

bool quantize_can_run(const QuantizeArgs&, std::string*) { return true; }

Status quantize_run(const QuantizeArgs& args, Stream stream) {
  const char* fn = args.fn ? args.fn : format_traits(args.format).quantize_fn;
  if (args.rows <= 0 || args.k <= 0) return Status::success();
  with_format(args.format, [&](auto tag) { launch_quantize<decltype(tag)::value>(args, to_cuda(stream)); });
  return launch_status(fn, [&] { return rows_k(args.rows, args.k); });
}

bool dequantize_can_run(const DequantizeArgs& args, std::string* why_not) {
  if (!is_aligned(args.y, alignof(float))) {
    if (why_not) *why_not = "output pointer is not 4-byte aligned";
    return false;
  }
  return true;
}

Status dequantize_run(const DequantizeArgs& args, Stream stream) {
  const char* fn = args.fn ? args.fn : format_traits(args.format).dequantize_fn;
  if (args.rows <= 0 || args.k <= 0) return Status::success();
  const int64_t nb = args.k / 32;
  const unsigned grid = grid_for(args.rows, nb);
  const uint8_t* xq = static_cast<const uint8_t*>(args.xq);
  const cudaStream_t st = to_cuda(stream);
  with_format(args.format, [&](auto tag) {
    dequantize_kernel<decltype(tag)::value><<<grid, kWarpsPerCta * 32, 0, st>>>(
        xq, args.rows, nb, args.xq_row_stride, args.y, args.y_row_stride);
  });
  return launch_status(fn, [&] { return rows_k(args.rows, args.k); });
}

}  // namespace qg::detail::cuda
