// SPDX-License-Identifier: MIT
// kernels.h: the CPU backend's kernels, registered in registry.cpp.
#pragma once

#include "qg/ops.h"

namespace qg::detail::cpu {

Status quantize_rows(const QuantizeArgs& args);
Status dequantize_rows(const DequantizeArgs& args);

// Readable reference: one block dot product at a time (quant_block.h).
Status gemm_q4_0_q8_1_scalar(const GemmArgs& args);
// AVX2 + FMA; callable only where cpu_features().avx2 && .fma.
Status gemm_q4_0_q8_1_avx2(const GemmArgs& args);

// How the GEMM is cut into pool tasks: tiles of kTileM rows of W by kTileN
// rows of A, so a tile's W rows stay in L2 while its A rows stream past.
constexpr int64_t kTileM = 16;
constexpr int64_t kTileN = 64;

}  // namespace qg::detail::cpu
