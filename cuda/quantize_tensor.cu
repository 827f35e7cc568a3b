// SPDX-License-Identifier: MIT
// cuda/quantize_tensor.cu: float rows -> i8 / i4 / i4x8 codes with outside
// scales, and back. Every number comes from int_formats.h (the same
// functions cpu/quantize_tensor.cpp calls), so both backends write the same
// codes, scales and zero points; this file only decides who computes what.
//
// Row and group scopes: one warp per scope. Its lanes measure the scope
// (min, max, absmax and "saw NaN or Inf"), the warp reduces them with
// shuffles (min and max are exact in any order, so the result is the CPU's),
// lane 0 stores the scale, then the warp quantizes the scope it just read.
//
// Tensor scope (dynamic): every value must be measured before any is
// quantized, and the call may neither allocate nor wait on the host, so it is
// four launches on the caller's stream that keep their running extent in the
// caller's own scale (and zero point) outputs, 4 bytes each:
//   symmetric:  scales[0] holds absmax's float bits (absmax >= 0, so its bits
//               order as unsigned ints order: atomicMax on them is a float max);
//   asymmetric: scales[0] holds ordered_key(lo), zero_points[0] ordered_key(hi)
//               (int_formats.h: keys order as the floats do; atomicMin / atomicMax).
// "Saw NaN or Inf" needs no third slot: it sets absmax's bits, or hi's key, to
// 0x7FFFFFFF, a NaN pattern above every finite value's and +Inf's, which no
// later atomicMax lowers and which reads back as NaN: the poisoned scope the
// CPU gets from params_of.
//   1. init: one thread resets the slots;
//   2. reduce: each CTA folds its extent into the slots with atomicMin /
//      atomicMax (integer atomics: float min/max are made integer ones);
//   3. quantize: every thread derives the same ScopeParams from the slots;
//   4. finalize: one thread overwrites the slots with the real scale and zero point.
// Stream order makes each launch see the previous one's writes.
#include <algorithm>
#include <string>

#include "epilogue.h"
#include "gemm_int.cuh"
#include "int_formats.h"

namespace qg::detail::cuda {
namespace {

constexpr unsigned kAll = 0xFFFFFFFFu;
constexpr int kWarps = 4;  // per CTA: scope, tensor-quantize and dequantize kernels
constexpr int kThreads = kWarps * 32;
constexpr int kReduceWarps = 8;
constexpr int kReduceThreads = kReduceWarps * 32;
// Elements a warp takes at a time where a row is cut into pieces (tensor
// scope, dequantize): even, so 4-bit pieces are whole bytes.
constexpr int64_t kChunk = 1024;
constexpr int64_t kMaxGrid = 1 << 20;       // grid-stride beyond this
constexpr int64_t kMaxReduceGrid = 1024;    // a few CTAs per SM: one set of atomics each
// The slot trick's "a non-finite value was seen": the bits of a NaN larger
// than every finite value's and +Inf's (0x7F800000), both as a float's bits
// (symmetric: absmax >= 0, so its bits order as it does) and as an
// ordered_key (asymmetric: keys of finite values and +-Inf are below it).
constexpr uint32_t kNonFinite = 0x7FFFFFFFu;

template <DType T>
__device__ __forceinline__ float load_x(const uint8_t* row, int64_t k) {
  return load_float_any(row + k * (T == DType::f32 ? 4 : 2), T);
}

// cpu/quantize_tensor.cpp's Extent: starts at 0 (so lo <= 0 <= hi), skips
// non-finite values and remembers them. A plain aggregate: it lives in
// shared memory, which takes no initializers.
struct Extent {
  float lo, hi, absmax;
  bool finite;
};

__device__ __forceinline__ Extent empty_extent() { return {0.0f, 0.0f, 0.0f, true}; }

__device__ __forceinline__ void add(Extent& e, float v) {
  if (!is_finite(v)) {  // NaN too: its exponent is all ones
    e.finite = false;
    return;
  }
  e.lo = fminf(e.lo, v);
  e.hi = fmaxf(e.hi, v);
  e.absmax = fmaxf(e.absmax, fabsf(v));
}

// All 32 lanes must call it. -0.0 versus +0.0 may come out either way, as
// nowhere on the CPU: the params below treat both as 0.
__device__ __forceinline__ Extent warp_reduce(Extent e) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) {
    e.lo = fminf(e.lo, __shfl_xor_sync(kAll, e.lo, off));
    e.hi = fmaxf(e.hi, __shfl_xor_sync(kAll, e.hi, off));
    e.absmax = fmaxf(e.absmax, __shfl_xor_sync(kAll, e.absmax, off));
  }
  e.finite = __all_sync(kAll, e.finite);
  return e;
}

// cpu/quantize_tensor.cpp's params_of.
__device__ __forceinline__ ScopeParams params_of(const Extent& e, bool asymmetric, CodeRange c) {
  const float nan = bits_float(0x7FC00000u);
  if (asymmetric) return asymmetric_params(e.finite ? e.lo : nan, e.finite ? e.hi : nan, c);
  return symmetric_params(e.finite ? e.absmax : nan, c);
}

// The tensor slots as params: symmetric, slot0 holds absmax's bits; asymmetric,
// slot0 holds lo's ordered_key and hi_slot hi's. A kNonFinite slot reads back
// as a NaN, which makes the params poisoned as params_of's NaN does (same
// scale bits, zero point 0).
__device__ __forceinline__ ScopeParams tensor_params(uint32_t slot0, const int32_t* hi_slot, CodeRange c) {
  if (hi_slot) return asymmetric_params(ordered_value(static_cast<int32_t>(slot0)), ordered_value(*hi_slot), c);
  return symmetric_params(bits_float(slot0), c);
}

__device__ __forceinline__ ScopeParams given_params(const uint8_t* scales, const uint8_t* zero_points, int64_t i) {
  const float s = bits_float(load_u32_any(scales + 4 * i));
  const int32_t z = zero_points ? static_cast<int32_t>(load_u32_any(zero_points + 4 * i)) : 0;
  return static_params(s, z);
}

// Codes [k0, k1) of one row, by `stride` threads, this one being `t` (k0 even for 4-bit formats:
// scopes and chunks start at row, group or chunk boundaries, all even). A
// 4-bit lane writes whole bytes, pairs (k, k + 1); an odd K's last byte gets a
// 0 high nibble, as the CPU writes it.
template <Format F, DType T>
__device__ __forceinline__ void write_codes(const uint8_t* xr, uint8_t* yr, int64_t k0, int64_t k1,
                                            const ScopeParams& p, int t, int stride) {
  const CodeRange c = code_range(F);
  if constexpr (F == Format::i8) {
    for (int64_t k = k0 + t; k < k1; k += stride)
      yr[k] = static_cast<uint8_t>(static_cast<int8_t>(quantize_value(load_x<T>(xr, k), p, c)));
  } else {
    for (int64_t k = k0 + 2 * t; k < k1; k += 2 * stride) {
      const int32_t lo = quantize_value(load_x<T>(xr, k), p, c);
      const int32_t hi = k + 1 < k1 ? quantize_value(load_x<T>(xr, k + 1), p, c) : 0;
      yr[k >> 1] = pack_pair(F, lo, hi);
    }
  }
}

struct QuantizeLayout {
  const uint8_t* x;
  int64_t x_row_stride;  // bytes
  uint8_t* y;
  int64_t y_row_stride;  // bytes
  int64_t rows, k;
};

// Row scope: g = K, one group a row. Scope s = r * groups + j, the CPU's index.
template <Format F, DType T>
__global__ void __launch_bounds__(kThreads)
quantize_scopes_kernel(QuantizeLayout l, int64_t g, int64_t groups, bool asymmetric, uint8_t* scales,
                       uint8_t* zero_points, const uint8_t* given_scales, const uint8_t* given_zero_points) {
  const int lane = threadIdx.x % 32;
  const int64_t scopes = l.rows * groups;
  for (int64_t s = static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32; s < scopes;
       s += static_cast<int64_t>(gridDim.x) * kWarps) {  // warp-uniform: the shuffles see every lane
    const int64_t r = s / groups, k0 = (s % groups) * g, k1 = k0 + g;
    const uint8_t* xr = l.x + r * l.x_row_stride;
    ScopeParams p;
    if (given_scales) {
      p = given_params(given_scales, given_zero_points, s);
    } else {
      Extent e = empty_extent();
      for (int64_t k = k0 + lane; k < k1; k += 32) add(e, load_x<T>(xr, k));
      p = params_of(warp_reduce(e), asymmetric, code_range(F));
      if (lane == 0) {
        store_u32_any(scales + 4 * s, float_bits(p.scale));
        if (zero_points) store_u32_any(zero_points + 4 * s, static_cast<uint32_t>(p.zp));
      }
    }
    write_codes<F, T>(xr, l.y + r * l.y_row_stride, k0, k1, p, lane, 32);
  }
}

// Long scopes (a row of an activation, K in the thousands): a warp per scope
// is one latency chain of K / 32 loads, twice (a 1 x 14336 row took 111 us on
// an H200). Here a CTA takes a scope: its warps' extents meet in shared
// memory, and min / max / absmax are exact in any order, so the parameters
// and the bytes are the warp kernel's (and the CPU's).
constexpr int kLongWarps = 16;
constexpr int kLongThreads = kLongWarps * 32;
constexpr int64_t kLongScope = 2048;  // from this scope length on, a CTA per scope

template <Format F, DType T>
__global__ void __launch_bounds__(kLongThreads)
quantize_long_scopes_kernel(QuantizeLayout l, int64_t g, int64_t groups, bool asymmetric, uint8_t* scales,
                            uint8_t* zero_points, const uint8_t* given_scales, const uint8_t* given_zero_points) {
  __shared__ Extent part[kLongWarps];
  // ScopeParams has default member initializers, which __shared__ variables
  // cannot take: its fields travel one by one.
  __shared__ float p_scale, p_inv;
  __shared__ int32_t p_zp;
  __shared__ bool p_poisoned;
  auto publish = [&](const ScopeParams& p) {
    p_scale = p.scale, p_inv = p.inv, p_zp = p.zp, p_poisoned = p.poisoned;
  };
  const int t = threadIdx.x, lane = t % 32, warp = t / 32;
  const int64_t scopes = l.rows * groups;
  for (int64_t s = blockIdx.x; s < scopes; s += gridDim.x) {  // CTA-uniform
    const int64_t r = s / groups, k0 = (s % groups) * g, k1 = k0 + g;
    const uint8_t* xr = l.x + r * l.x_row_stride;
    if (given_scales) {
      if (t == 0) publish(given_params(given_scales, given_zero_points, s));
    } else {
      Extent e = empty_extent();
      for (int64_t k = k0 + t; k < k1; k += kLongThreads) add(e, load_x<T>(xr, k));
      e = warp_reduce(e);
      if (lane == 0) part[warp] = e;
      __syncthreads();
      if (warp == 0) {
        e = warp_reduce(lane < kLongWarps ? part[lane] : empty_extent());
        if (lane == 0) {
          const ScopeParams p = params_of(e, asymmetric, code_range(F));
          publish(p);
          store_u32_any(scales + 4 * s, float_bits(p.scale));
          if (zero_points) store_u32_any(zero_points + 4 * s, static_cast<uint32_t>(p.zp));
        }
      }
    }
    __syncthreads();
    ScopeParams p;
    p.scale = p_scale, p.inv = p_inv, p.zp = p_zp, p.poisoned = p_poisoned;
    write_codes<F, T>(xr, l.y + r * l.y_row_stride, k0, k1, p, t, kLongThreads);
    __syncthreads();  // part[] and the parameters are reused by the next scope
  }
}

// Step 1. The slots start where a CPU Extent starts: absmax = +0.0 (bits 0),
// lo = hi = 0 (ordered_key(0.0f) = 0).
__global__ void tensor_init_kernel(uint32_t* slot0, int32_t* hi_slot) {
  *slot0 = static_cast<uint32_t>(ordered_key(0.0f));
  if (hi_slot) *hi_slot = ordered_key(0.0f);
}

// Step 2. Warps take chunks of rows; a CTA's extent goes through shared
// memory to one thread, whose atomics fold it into the slots. A non-finite
// value sets slot0 (symmetric) or hi_slot (asymmetric) to kNonFinite, which
// no later atomicMax lowers.
template <DType T>
__global__ void __launch_bounds__(kReduceThreads)
tensor_reduce_kernel(QuantizeLayout l, uint32_t* slot0, int32_t* hi_slot) {
  __shared__ Extent part[kReduceWarps];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int64_t chunks_per_row = (l.k + kChunk - 1) / kChunk, items = l.rows * chunks_per_row;
  Extent e = empty_extent();
  for (int64_t c = static_cast<int64_t>(blockIdx.x) * kReduceWarps + warp; c < items;
       c += static_cast<int64_t>(gridDim.x) * kReduceWarps) {
    const int64_t r = c / chunks_per_row, k0 = (c % chunks_per_row) * kChunk;
    const int64_t k1 = k0 + kChunk < l.k ? k0 + kChunk : l.k;
    const uint8_t* xr = l.x + r * l.x_row_stride;
    for (int64_t k = k0 + lane; k < k1; k += 32) add(e, load_x<T>(xr, k));
  }
  e = warp_reduce(e);
  if (lane == 0) part[warp] = e;
  __syncthreads();
  if (warp != 0) return;
  e = warp_reduce(lane < kReduceWarps ? part[lane] : empty_extent());
  if (lane != 0) return;
  if (hi_slot) {
    atomicMin(reinterpret_cast<int32_t*>(slot0), ordered_key(e.lo));
    atomicMax(hi_slot, e.finite ? ordered_key(e.hi) : static_cast<int32_t>(kNonFinite));
  } else {
    atomicMax(slot0, e.finite ? float_bits(e.absmax) : kNonFinite);
  }
}

// Step 3 (dynamic: slot0 set; static: given_scales set). Warps take chunks.
template <Format F, DType T>
__global__ void __launch_bounds__(kThreads)
quantize_tensor_kernel(QuantizeLayout l, const uint32_t* slot0, const int32_t* hi_slot, const uint8_t* given_scales,
                       const uint8_t* given_zero_points) {
  const int lane = threadIdx.x % 32;
  const ScopeParams p =
      given_scales ? given_params(given_scales, given_zero_points, 0) : tensor_params(*slot0, hi_slot, code_range(F));
  const int64_t chunks_per_row = (l.k + kChunk - 1) / kChunk, items = l.rows * chunks_per_row;
  for (int64_t c = static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32; c < items;
       c += static_cast<int64_t>(gridDim.x) * kWarps) {
    const int64_t r = c / chunks_per_row, k0 = (c % chunks_per_row) * kChunk;
    const int64_t k1 = k0 + kChunk < l.k ? k0 + kChunk : l.k;
    write_codes<F, T>(l.x + r * l.x_row_stride, l.y + r * l.y_row_stride, k0, k1, p, lane, 32);
  }
}

// Step 4: the slots become the outputs (every step-3 thread has read them).
__global__ void tensor_finalize_kernel(uint32_t* slot0, int32_t* hi_slot, CodeRange c) {
  const ScopeParams p = tensor_params(*slot0, hi_slot, c);
  *slot0 = float_bits(p.scale);
  if (hi_slot) *hi_slot = p.zp;
}

// Empty scopes (K = 0, or a tensor scope over no values) get the parameters
// of an all-zero scope, as on the CPU, so no output is left unwritten.
// Byte stores: row and group scales carry no alignment promise.
__global__ void fill_scopes_kernel(uint8_t* scales, uint8_t* zero_points, int64_t count, uint32_t scale_bits,
                                   uint32_t zp_bits) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    for (int b = 0; b < 4; ++b) {
      scales[4 * i + b] = static_cast<uint8_t>(scale_bits >> (8 * b));
      if (zero_points) zero_points[4 * i + b] = static_cast<uint8_t>(zp_bits >> (8 * b));
    }
}

template <Format F>
__global__ void __launch_bounds__(kThreads)
dequantize_kernel(const uint8_t* xq, int64_t xq_row_stride, uint8_t* y, int64_t y_row_stride, int64_t rows, int64_t k,
                  Granularity granularity, int64_t group_size, const uint8_t* scales, const uint8_t* zero_points) {
  constexpr int64_t kBytesPerBlock = F == Format::i4x8 ? 4 : 1;  // contiguous rows
  const int lane = threadIdx.x % 32;
  const int64_t chunks_per_row = (k + kChunk - 1) / kChunk, items = rows * chunks_per_row;
  for (int64_t c = static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32; c < items;
       c += static_cast<int64_t>(gridDim.x) * kWarps) {
    const int64_t r = c / chunks_per_row, k0 = (c % chunks_per_row) * kChunk;
    const int64_t k1 = k0 + kChunk < k ? k0 + kChunk : k;
    const uint8_t* xr = xq + r * xq_row_stride;
    uint8_t* yr = y + r * y_row_stride;
    for (int64_t e = k0 + lane; e < k1; e += 32) {
      const int64_t i = scope_index(granularity, r, e, k, group_size);
      const float s = bits_float(load_u32_any(scales + 4 * i));
      const int32_t z = zero_points ? static_cast<int32_t>(load_u32_any(zero_points + 4 * i)) : 0;
      store_u32_any(yr + 4 * e, float_bits(dequantize_value(load_code(F, xr, kBytesPerBlock, e), s, z)));
    }
  }
}

unsigned grid_for(int64_t warps, int warps_per_cta, int64_t cap) {
  const int64_t ctas = (warps + warps_per_cta - 1) / warps_per_cta;
  return static_cast<unsigned>(ctas < 1 ? 1 : (ctas > cap ? cap : ctas));
}

template <Format F, DType T>
void launch_quantize(const QuantizeArgs& a, cudaStream_t st) {
  const QuantizeLayout l{static_cast<const uint8_t*>(a.x), a.x_row_stride * dtype_size(a.x_dtype),
                         static_cast<uint8_t*>(a.y), a.y_row_stride, a.rows, a.k};
  const auto* given_s = reinterpret_cast<const uint8_t*>(a.static_scales);
  const auto* given_z = reinterpret_cast<const uint8_t*>(a.static_zero_points);
  if (a.granularity != Granularity::tensor) {
    const bool row = a.granularity == Granularity::row;
    const int64_t g = row ? a.k : a.group_size, groups = row ? 1 : a.k / a.group_size;
    const bool asymmetric = given_s ? given_z != nullptr : a.zero_points != nullptr;
    auto* scales = reinterpret_cast<uint8_t*>(a.scales);
    auto* zps = reinterpret_cast<uint8_t*>(a.zero_points);
    if (g >= kLongScope)
      quantize_long_scopes_kernel<F, T><<<grid_for(a.rows * groups, 1, kMaxGrid), kLongThreads, 0, st>>>(
          l, g, groups, asymmetric, scales, zps, given_s, given_z);
    else
      quantize_scopes_kernel<F, T><<<grid_for(a.rows * groups, kWarps, kMaxGrid), kThreads, 0, st>>>(
          l, g, groups, asymmetric, scales, zps, given_s, given_z);
    return;
  }
  const int64_t items = a.rows * ((a.k + kChunk - 1) / kChunk);
  const unsigned grid = grid_for(items, kWarps, kMaxGrid);
  if (given_s) {
    quantize_tensor_kernel<F, T><<<grid, kThreads, 0, st>>>(l, nullptr, nullptr, given_s, given_z);
    return;
  }
  // can_run has checked that both slots are 4-byte aligned (atomics need it).
  auto* slot0 = reinterpret_cast<uint32_t*>(a.scales);
  int32_t* hi_slot = a.zero_points;  // null: symmetric
  tensor_init_kernel<<<1, 1, 0, st>>>(slot0, hi_slot);
  tensor_reduce_kernel<T><<<grid_for(items, kReduceWarps, kMaxReduceGrid), kReduceThreads, 0, st>>>(l, slot0, hi_slot);
  quantize_tensor_kernel<F, T><<<grid, kThreads, 0, st>>>(l, slot0, hi_slot, nullptr, nullptr);
  tensor_finalize_kernel<<<1, 1, 0, st>>>(slot0, hi_slot, code_range(F));
}

std::string rows_k(int64_t rows, int64_t k) { return "rows=" + std::to_string(rows) + ", k=" + std::to_string(k); }

}  // namespace

bool int_quantize_can_run(const QuantizeArgs& a, std::string* why_not) {
  if (a.granularity != Granularity::tensor || a.static_scales) return true;
  if (!is_aligned(a.scales, 4) || !is_aligned(a.zero_points, 4)) {
    if (why_not)
      *why_not = "a per-tensor scale (and zero point) computed on the GPU is reduced in place with atomics; "
                 "its output must be 4-byte aligned";
    return false;
  }
  return true;
}

Status int_quantize_run(const QuantizeArgs& args, Stream stream) {
  const char* fn = args.fn ? args.fn : format_traits(args.format).quantize_fn;
  const int64_t empty_scopes = args.granularity == Granularity::tensor ? 1
                               : args.granularity == Granularity::row ? args.rows : 0;
  const bool empty = args.rows <= 0 || args.k <= 0;
  if (empty && (args.static_scales || !args.scales || empty_scopes <= 0)) return Status::success();
  const cudaStream_t st = to_cuda(stream);
  if (empty) {
    const CodeRange c = code_range(args.format);
    const ScopeParams p = args.zero_points ? asymmetric_params(0.0f, 0.0f, c) : symmetric_params(0.0f, c);
    const unsigned grid = static_cast<unsigned>(std::min<int64_t>((empty_scopes + 255) / 256, 1 << 16));
    fill_scopes_kernel<<<grid, 256, 0, st>>>(reinterpret_cast<uint8_t*>(args.scales),
                                             reinterpret_cast<uint8_t*>(args.zero_points), empty_scopes,
                                             float_bits(p.scale), static_cast<uint32_t>(p.zp));
    return launch_status(fn, [&] { return rows_k(args.rows, args.k); });
  }
  with_int_format(args.format, [&](auto f) {
    with_dtype(args.x_dtype, [&](auto t) { launch_quantize<decltype(f)::value, decltype(t)::value>(args, st); });
  });
  return launch_status(fn, [&] { return rows_k(args.rows, args.k); });
}

bool int_dequantize_can_run(const DequantizeArgs&, std::string*) { return true; }

Status int_dequantize_run(const DequantizeArgs& args, Stream stream) {
  const char* fn = args.fn ? args.fn : format_traits(args.format).dequantize_fn;
  if (args.rows <= 0 || args.k <= 0) return Status::success();
  const int64_t items = args.rows * ((args.k + kChunk - 1) / kChunk);
  const unsigned grid = grid_for(items, kWarps, kMaxGrid);
  const cudaStream_t st = to_cuda(stream);
  with_int_format(args.format, [&](auto f) {
    dequantize_kernel<decltype(f)::value><<<grid, kThreads, 0, st>>>(
        static_cast<const uint8_t*>(args.xq), args.xq_row_stride, reinterpret_cast<uint8_t*>(args.y),
        args.y_row_stride * 4, args.rows, args.k, args.granularity, args.group_size,
        reinterpret_cast<const uint8_t*>(args.scales), reinterpret_cast<const uint8_t*>(args.zero_points));
  });
  return launch_status(fn, [&] { return rows_k(args.rows, args.k); });
}

}  // namespace qg::detail::cuda
