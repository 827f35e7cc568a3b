// SPDX-License-Identifier: MIT
// cuda/quantize_warp.cuh: reading one float activation of any dtype, for the
// warpgroup GEMM's pass that quantizes x straight into its own layout.
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

}  // namespace qg::detail::cuda
