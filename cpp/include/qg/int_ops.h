// SPDX-License-Identifier: MIT
// qg/int_ops.h: the integer family's raw-pointer entry points, with the seed
// libraries' names and argument orders (seed 001's int8_matmul_cuda, seed
// 003's int4_matmul). Each fills a GemmArgs (ops.h) and calls qg::gemm, so
// validation, dispatch and the epilogue are the same as for every other op.
// Row-major matrices; CUDA entry points take device pointers on `device`.
#pragma once

#include <cstdint>

#include "qg/ops.h"

namespace qg {

// How B is laid out: seed 001's [K, N] row-major, or the [N, K] of a linear
// layer's weight (K-contiguous rows: the layout the fast kernels read).
enum class BLayout : uint8_t { kn, nk };

// Seed 001: C[M, N] = A[M, K] . B, int8 operands.
//   int32 C: the exact integer sum sum_k A[m, k] * B[k, n]. As in seed 001,
//   the scales are not applied to an integer result: dequantize it with
//   scale_a * scale_b * scale_c (C = (A * scale_a) @ (B * scale_b) * scale_c).
//   float C: that product, scaled in the epilogue.
// K is bounded by exact int32 accumulation (131071 for int8).
Status int8_matmul(const int8_t* A, const int8_t* B, int32_t* C, int64_t M, int64_t N, int64_t K, Device device,
                   Stream stream = nullptr, BLayout b_layout = BLayout::kn);
Status int8_matmul(const int8_t* A, const int8_t* B, float* C, int64_t M, int64_t N, int64_t K, float scale_a,
                   float scale_b, float scale_c, Device device, Stream stream = nullptr,
                   BLayout b_layout = BLayout::kn);
// The seed's spelling, on CUDA device `device` (default 0).
Status int8_matmul_cuda(const int8_t* A, const int8_t* B, int32_t* C, int64_t M, int64_t N, int64_t K, float scale_a,
                        float scale_b, float scale_c, Stream stream = nullptr, int device = 0);
Status int8_matmul_cuda(const int8_t* A, const int8_t* B, float* C, int64_t M, int64_t N, int64_t K, float scale_a,
                        float scale_b, float scale_c, Stream stream = nullptr, int device = 0);

// Seed 001's INT4: two signed values per byte, low nibble first; A rows of
// ceil(K/2) bytes, B [ceil(K/2), N] bytes (pairs along K); int32 C, exact.
Status int4_packed_matmul(const uint8_t* A, const uint8_t* B, int32_t* C, int64_t M, int64_t N, int64_t K,
                          Device device, Stream stream = nullptr);

// Seed 003: a_packed [M, K/8] and b_packed [K/8, N] int32 words of eight
// values v + 8 (word = sum (v_i + 8) << 4i), scale_a [M], scale_b [N] fp32;
// C [M, N] fp16 (raw bits) = scale_a[m] * scale_b[n] * sum_k a * b.
Status int4_matmul(const int32_t* a_packed, const int32_t* b_packed, const float* scale_a, const float* scale_b,
                   uint16_t* c_fp16, int64_t M, int64_t N, int64_t K, Device device, Stream stream = nullptr);

}  // namespace qg
