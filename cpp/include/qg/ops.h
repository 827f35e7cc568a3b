// SPDX-License-Identifier: MIT
// qg/ops.h: the operations. Two layers:
//   * view functions (TensorView in, TensorView out) check everything and are
//     what the Python bindings call;
//   * raw-pointer functions (the *Args structs) for C++ callers who own their
//     buffers; they run the same checks on what a pointer call can state.
// Nothing here allocates device memory or synchronises a stream.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "qg/formats.h"
#include "qg/status.h"
#include "qg/tensor.h"

namespace qg {

// ---------------------------------------------------------------- raw pointers
// rows x k values -> rows x (k/32) blocks. Strides in elements (x) and bytes (y).
struct QuantizeArgs {
  const void* x = nullptr;
  DType x_dtype = DType::f32;        // f32, f16 or bf16
  int64_t rows = 0;
  int64_t k = 0;                     // multiple of 32
  int64_t x_row_stride = 0;          // elements between rows (>= k)
  void* y = nullptr;                 // packed blocks
  int64_t y_row_stride = 0;          // bytes between rows (>= k/32 * bytes_per_block)
  Device device;
  Q8_1Convention q8_1_convention = Q8_1Convention::reference;
};

struct DequantizeArgs {
  const void* xq = nullptr;
  int64_t rows = 0;
  int64_t k = 0;
  int64_t xq_row_stride = 0;         // bytes
  float* y = nullptr;
  int64_t y_row_stride = 0;          // elements
  Device device;
};

// C[M, N] = W[M, K] . A[N, K]^T, W in Q4_0 and A in Q8_1, C row-major fp32.
struct GemmArgs {
  const void* w = nullptr;
  const void* a = nullptr;
  float* c = nullptr;
  int64_t m = 0, n = 0, k = 0;
  int64_t ldw = 0;                   // bytes between rows of W (>= k/32 * 18)
  int64_t lda = 0;                   // bytes between rows of A (>= k/32 * 36)
  int64_t ldc = 0;                   // elements between rows of C (>= n)
  Device device;
};

Status quantize(Format format, const QuantizeArgs& args, Stream stream = nullptr);
Status dequantize(Format format, const DequantizeArgs& args, Stream stream = nullptr);
Status gemm_q4_0_q8_1(const GemmArgs& args, Stream stream = nullptr);

// Contiguous convenience forms (row strides implied by k).
Status gemm_q4_0_q8_1(const void* w, const void* a, float* c, int64_t m, int64_t n, int64_t k,
                      Device device, Stream stream = nullptr);

// ----------------------------------------------------------------------- views
// Shapes: x [..., K] -> y [..., K/32, bytes_per_block] uint8.
Status quantize_output_shape(Format format, const TensorView& x, std::vector<int64_t>* shape);
Status quantize(Format format, const TensorView& x, const TensorView& out, Stream stream = nullptr,
                Q8_1Convention convention = Q8_1Convention::reference);

// xq [..., K/32, bytes_per_block] uint8 -> y [..., K] f32. k < 0: inferred.
Status dequantize_output_shape(Format format, const TensorView& xq, int64_t k,
                               std::vector<int64_t>* shape);
Status dequantize(Format format, const TensorView& xq, int64_t k, const TensorView& out,
                  Stream stream = nullptr);

// w [..., K/32, 18], a [..., K/32, 36] -> out [M, N] f32; M is the product of
// w's leading dims, N of a's. m, n, k < 0: inferred; otherwise checked.
Status gemm_q4_0_q8_1_output_shape(const TensorView& w, const TensorView& a, int64_t m, int64_t n,
                                   int64_t k, std::vector<int64_t>* shape);
Status gemm_q4_0_q8_1(const TensorView& w, const TensorView& a, const TensorView& out, int64_t m,
                      int64_t n, int64_t k, Stream stream = nullptr);

// -------------------------------------------------------- dispatch and backends
// Which implementation a call with these arguments would run, and why each
// more specialised one was passed over. One line per candidate; the chosen
// one is marked. Runs the same checks as the call and returns its error.
struct Explanation {
  std::string op;
  std::string chosen;
  std::vector<std::string> candidates;  // "name: chosen" / "name: skipped (reason)"
};
Status explain_gemm_q4_0_q8_1(const GemmArgs& args, Explanation* out);
Status explain_quantize(Format format, const QuantizeArgs& args, Explanation* out);
Status explain_dequantize(Format format, const DequantizeArgs& args, Explanation* out);
// The same from views, before any output exists.
Status explain_gemm_q4_0_q8_1(const TensorView& w, const TensorView& a, Explanation* out);
Status explain_quantize(Format format, const TensorView& x, Explanation* out);
Status explain_dequantize(Format format, const TensorView& xq, Explanation* out);

}  // namespace qg
