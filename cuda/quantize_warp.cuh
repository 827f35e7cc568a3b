// SPDX-License-Identifier: MIT
// cuda/quantize_warp.cuh: reading float activations of any dtype
// (load_value: quantize.cu and the warpgroup GEMM's pass that quantizes x
// straight into its own layout), and one quantization block per warp, one
// value per lane (quant_block.h's arithmetic as warp reductions, the same
// bytes: quantize.cu's few-blocks kernel).
#pragma once

#include <cstdint>

#include "common.cuh"
#include "quant_block.h"

namespace qg::detail::cuda {

// Value i of a row of T (f32, f16, bf16) at `row`; `aligned`: the row is
// aligned to T, else it is read byte by byte.
template <DType T>
__device__ __forceinline__ float load_value(const uint8_t* row, int64_t i, bool aligned) {
  if constexpr (T == DType::f32) {
    if (aligned) return reinterpret_cast<const float*>(row)[i];
    const uint8_t* p = row + 4 * i;
    return bits_float(static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) |
                      (static_cast<uint32_t>(p[2]) << 16) | (static_cast<uint32_t>(p[3]) << 24));
  } else {
    const uint16_t h = aligned ? reinterpret_cast<const uint16_t*>(row)[i] : load_u16_b1(row + 2 * i);
    if constexpr (T == DType::f16) return fp16_to_fp32(h);
    else return bf16_to_fp32(h);
  }
}

// The block's largest magnitude, on every lane (a max: order-free, exact).
__device__ __forceinline__ float warp_abs_max(float v) {
  float amax = fabsf(v);
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xFFFFFFFFu, amax, off));
  return amax;
}

// Q8_0 / Q8_1 with the reference rounding (quantize_codes_q8): this lane's
// code and the block's fp32 scale d = amax / 127 (stored as fp16 by the
// format). The block must be finite (the reference writes NaN otherwise).
struct WarpQ8 {
  int8_t code;
  float d;
};
__device__ __forceinline__ WarpQ8 warp_quantize_q8(float v) {
  const float d = div_rn(warp_abs_max(v), 127.0f);
  return {q8_code(mul_rn(v, inverse_scale(d))), d};
}

}  // namespace qg::detail::cuda
