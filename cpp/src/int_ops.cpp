// SPDX-License-Identifier: MIT
// int_ops.cpp: the seed-named integer entry points as GemmArgs. The core's
// GEMM is C' = a . b^T with a's rows first; a seed's C = A . B is C' = B^T . A^T
// written transposed, so a = B (N rows along K; read K-major when B is
// [K, N]), b = A, and C' (n, m) lands at C[m, n] (ldc = 1, ldc_n = N). That
// also puts a linear layer's per-output-feature bias and scales (indexed by
// n) on a's rows, where the epilogue has them.
#include "qg/int_ops.h"

namespace qg {

namespace {

GemmArgs seed_gemm(const void* A, Format fa, const void* B, Format fb, BLayout b_layout, void* C, DType c_dtype,
                   int64_t M, int64_t N, int64_t K, Device device, const char* fn) {
  const FormatTraits& tb = format_traits(fb);
  GemmArgs g;
  g.a.data = B;
  g.a.format = fb;
  g.a.rows = N;
  g.a.k = K;
  if (b_layout == BLayout::kn) {  // B [K-storage, N]: row n's blocks are N storage units apart
    g.a.row_stride = tb.bytes_per_block;
    g.a.block_stride = N * tb.bytes_per_block;
  } else {
    g.a.row_stride = row_bytes(tb, K < 0 ? 0 : K);
  }
  g.b = packed_operand(A, fa, M, K);
  g.c = C;
  g.c_dtype = c_dtype;
  g.ldc = 1;
  g.ldc_n = N;
  g.device = device;
  g.fn = fn;
  return g;
}

}  // namespace

Status int8_matmul(const int8_t* A, const int8_t* B, int32_t* C, int64_t M, int64_t N, int64_t K, Device device,
                   Stream stream, BLayout b_layout) {
  return gemm(seed_gemm(A, Format::i8, B, Format::i8, b_layout, C, DType::i32, M, N, K, device, "qg::int8_matmul"),
              stream);
}

Status int8_matmul(const int8_t* A, const int8_t* B, float* C, int64_t M, int64_t N, int64_t K, float scale_a,
                   float scale_b, float scale_c, Device device, Stream stream, BLayout b_layout) {
  GemmArgs g = seed_gemm(A, Format::i8, B, Format::i8, b_layout, C, DType::f32, M, N, K, device, "qg::int8_matmul");
  g.epilogue.alpha = scale_a * scale_b * scale_c;
  return gemm(g, stream);
}

Status int8_matmul_cuda(const int8_t* A, const int8_t* B, int32_t* C, int64_t M, int64_t N, int64_t K, float,
                        float, float, Stream stream, int device) {
  GemmArgs g = seed_gemm(A, Format::i8, B, Format::i8, BLayout::kn, C, DType::i32, M, N, K, Device::cuda(device),
                         "qg::int8_matmul_cuda");
  return gemm(g, stream);
}

Status int8_matmul_cuda(const int8_t* A, const int8_t* B, float* C, int64_t M, int64_t N, int64_t K, float scale_a,
                        float scale_b, float scale_c, Stream stream, int device) {
  GemmArgs g = seed_gemm(A, Format::i8, B, Format::i8, BLayout::kn, C, DType::f32, M, N, K, Device::cuda(device),
                         "qg::int8_matmul_cuda");
  g.epilogue.alpha = scale_a * scale_b * scale_c;
  return gemm(g, stream);
}

Status int4_packed_matmul(const uint8_t* A, const uint8_t* B, int32_t* C, int64_t M, int64_t N, int64_t K,
                          Device device, Stream stream) {
  return gemm(seed_gemm(A, Format::i4, B, Format::i4, BLayout::kn, C, DType::i32, M, N, K, device,
                        "qg::int4_packed_matmul"),
              stream);
}

Status int4_matmul(const int32_t* a_packed, const int32_t* b_packed, const float* scale_a, const float* scale_b,
                   uint16_t* c_fp16, int64_t M, int64_t N, int64_t K, Device device, Stream stream) {
  GemmArgs g = seed_gemm(a_packed, Format::i4x8, b_packed, Format::i4x8, BLayout::kn, c_fp16, DType::f16, M, N, K,
                         device, "qg::int4_matmul");
  g.epilogue.row_scale = scale_b;  // a's rows are B's columns
  g.epilogue.col_scale = scale_a;
  return gemm(g, stream);
}

}  // namespace qg
