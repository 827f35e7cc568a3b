// SPDX-License-Identifier: MIT
// qg/ops.h: the operations. Three of them serve every format:
//   quantize   float rows  -> packed rows of a format
//   dequantize packed rows -> float rows
//   gemm       C = A . B^T for any pair of operand formats a backend has a kernel for
// Each comes in two layers:
//   * raw pointers (QuantizeArgs, DequantizeArgs, GemmArgs): for C++ callers who
//     own their buffers; row strides, a Device and a Stream;
//   * views (TensorView in, TensorView out): what the Python bindings call; they
//     infer shapes, check layouts, and call the raw layer.
// Both run the same checks (validate.cpp). Nothing here allocates device
// memory or synchronises a stream; every call returns a Status.
// The seed libraries' names (gemm_q4_0_q8_1, ...) are one-line wrappers;
// linear_q4_0 and linear_int8 (raw pointers only) are quantize + gemm in one
// call.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "qg/formats.h"
#include "qg/status.h"
#include "qg/tensor.h"

namespace qg {

// ------------------------------------------------------------------ operands
enum class Granularity : uint8_t {
  none,    // absent
  tensor,  // one value
  row,     // one value per row of the operand
  group,   // one value per row and group of group_size elements of K
};

// Scales or zero points kept outside the packed data (formats whose traits
// say ScalePlace::outside). Shapes: tensor [1], row [rows], group
// [rows, K / group_size] with row_stride elements between rows.
struct OutsideScales {
  const void* data = nullptr;
  DType dtype = DType::f32;
  Granularity granularity = Granularity::none;
  int64_t group_size = 0;
  int64_t row_stride = 0;
};

// One GEMM operand: `rows` rows of `k` elements in `format`, row_stride bytes
// apart (any value when rows <= 1). block_stride: bytes between consecutive
// blocks of a row along K; 0 means contiguous (bytes_per_block). A [K, N]
// int8 matrix read as N rows along K has row_stride 1 and block_stride N.
// scales / zero_points: group-wise values that change along K (weight-only
// GEMMs: granularity group, shape [rows, K / group_size]). Scales constant
// along K go to the epilogue (row_scale, col_scale, zero points) instead.
struct Operand {
  const void* data = nullptr;
  Format format = Format::q4_0;
  int64_t rows = 0;
  int64_t k = 0;
  int64_t row_stride = 0;
  OutsideScales scales;
  OutsideScales zero_points;
  int64_t block_stride = 0;
};

// A contiguous operand: row_stride is one row of blocks.
Operand packed_operand(const void* data, Format format, int64_t rows, int64_t k);

// ------------------------------------------------------------------ epilogue
enum class Activation : uint8_t { none, relu };

// Applied to each accumulated element, always in this order:
//   acc = sum (qa - za[m]) * (qb - zb[n])            integer operands with zero points (exact, int32)
//   v = acc * alpha * row_scale[m] * col_scale[n]    scales
//   v = v + beta * C[m, n]                            accumulate into C (C is not read when beta == 0)
//   v = v + bias[m]                                   bias
//   v = activation(v)                                 activation (relu keeps NaN)
//   C[m, n] = cast(v)                                 cast to GemmArgs::c_dtype (round to nearest even)
struct Epilogue {
  float alpha = 1.0f;
  const float* row_scale = nullptr;  // [M] (per row of a: output feature), [1] if row_scale_scalar, or null
  const float* col_scale = nullptr;  // [N] (per row of b), [1] if col_scale_scalar, or null
  bool row_scale_scalar = false;     // one value for every row (a per-tensor scale in device memory)
  bool col_scale_scalar = false;
  // Integer operands only: int32 zero points of a's rows and b's rows
  // ([M] / [N], or [1] when *_scalar), or null. Each in its operand's code
  // range (i8: -128..127): refused otherwise where they are host memory;
  // in device memory they are the caller's to keep there.
  const int32_t* row_zero_point = nullptr;
  const int32_t* col_zero_point = nullptr;
  bool row_zero_point_scalar = false;
  bool col_zero_point_scalar = false;
  float beta = 0.0f;
  const void* bias = nullptr;        // [M] of bias_dtype, or null
  DType bias_dtype = DType::f32;     // f32, f16 or bf16
  Activation activation = Activation::none;
};

// --------------------------------------------------------------------- gemm
// C[M, N] = A[M, K] . B[N, K]^T. Both operands are rows along K (a linear
// layer's weight and its activations). Element (m, n) of C is at
// c + m * ldc + n * ldc_n elements: ldc_n = 1 is row-major C; ldc = 1 and
// ldc_n = M write the [N, M] result of x @ W^T directly.
struct GemmArgs {
  Operand a;                      // M rows: weights
  Operand b;                      // N rows: activations
  void* c = nullptr;
  DType c_dtype = DType::f32;     // f32, f16, bf16; i32 (integer operands: the exact sum, no scales or bias)
  int64_t ldc = 0;
  int64_t ldc_n = 1;
  Epilogue epilogue;
  Device device;
  const char* fn = "qg.gemm";     // the caller-facing name messages start with
};

Status gemm(const GemmArgs& args, Stream stream = nullptr);

// Seed 000: C[M, N] = W . A^T, W Q4_0 [M, K/32] blocks, A Q8_1 [N, K/32] blocks,
// C fp32 row-major; all contiguous, on `device`.
Status gemm_q4_0_q8_1(const void* w, const void* a, float* c, int64_t m, int64_t n, int64_t k,
                      Device device, Stream stream = nullptr);

// ----------------------------------------------------------- quantize, dequantize
// rows x k values -> rows x (k / block) blocks. Strides in elements (x), bytes (y).
struct QuantizeArgs {
  Format format = Format::q4_0;
  const void* x = nullptr;
  DType x_dtype = DType::f32;      // f32, f16 or bf16
  int64_t rows = 0;
  int64_t k = 0;
  int64_t x_row_stride = 0;
  void* y = nullptr;
  int64_t y_row_stride = 0;
  Device device;
  Q8_1Convention q8_1_convention = Q8_1Convention::reference;
  const char* fn = nullptr;        // default: the format's quantize_fn
  // Formats with outside scales (i8, i4, i4x8). One scope per tensor, row,
  // or group of group_size elements of K. Dynamic: the kernel computes each
  // scope's fp32 scale (and int32 zero point when zero_points is given:
  // asymmetric) and writes them, [1], [rows] or [rows, K / group_size]
  // contiguous. Static: static_scales (and static_zero_points, in the
  // format's code range: refused otherwise where they are host memory) of
  // those shapes are read instead, and scales / zero_points stay unused.
  Granularity granularity = Granularity::none;
  int64_t group_size = 0;
  float* scales = nullptr;
  int32_t* zero_points = nullptr;
  const float* static_scales = nullptr;
  const int32_t* static_zero_points = nullptr;
};

struct DequantizeArgs {
  Format format = Format::q4_0;
  const void* xq = nullptr;
  int64_t rows = 0;
  int64_t k = 0;
  int64_t xq_row_stride = 0;       // bytes
  float* y = nullptr;
  int64_t y_row_stride = 0;        // elements
  Device device;
  const char* fn = nullptr;        // default: the format's dequantize_fn
  // Formats with outside scales: as QuantizeArgs' static ones.
  Granularity granularity = Granularity::none;
  int64_t group_size = 0;
  const float* scales = nullptr;
  const int32_t* zero_points = nullptr;
};

Status quantize(const QuantizeArgs& args, Stream stream = nullptr);
Status dequantize(const DequantizeArgs& args, Stream stream = nullptr);

// ------------------------------------------------------------------- repack
// The same blocks in another layout of one format: q4_0 rows <-> q4_0x16
// groups of 16 rows (formats.h), exact both ways (every byte moved, none
// changed). rows: the weight's rows, a multiple of 16; k a multiple of 32.
// Strides in bytes between stored rows of each side (a q4_0 row, a q4_0x16
// group). Host memory only: q4_0x16 is the layout of qg's CPU kernels.
struct RepackArgs {
  Format from = Format::q4_0;
  Format to = Format::q4_0x16;
  const void* x = nullptr;
  int64_t rows = 0, k = 0, x_row_stride = 0;
  void* y = nullptr;
  int64_t y_row_stride = 0;
  Device device;
  const char* fn = nullptr;        // default "qg.repack"
};

Status repack(const RepackArgs& args);

// ------------------------------------------------------------------- linear
// A model's linear layer with Q4_0 weights: y[n, m] = x[n] . W[m]^T + bias[m].
// x is quantized to Q8_1 (the reference convention), then multiplied as
// gemm_q4_0_q8_1 does, the epilogue adding bias and writing y [N, M] in
// y_dtype: byte for byte quantize + gemm with ldc = 1, ldc_n = ldy. The Q8_1
// blocks go to xq_workspace, except where the GEMM kernel quantizes x into
// its own layout (the warpgroup kernel on sm_90a): the workspace's contents
// afterwards are unspecified.
// Both kernels are chosen before either runs, then enqueued on `stream` back
// to back. Strides: x and y in elements, the weight in bytes.
struct LinearQ4_0Args {
  const void* x = nullptr;         // [n, k] f32, f16 or bf16
  DType x_dtype = DType::f32;
  int64_t n = 0, k = 0, x_row_stride = 0;
  void* xq_workspace = nullptr;    // n * (k / 32) * 36 bytes on `device`, caller-owned scratch
  const void* weight_q = nullptr;  // [m, k / 32] Q4_0 blocks, or [m / 16, k / 32] q4_0x16 (CPU)
  int64_t m = 0, weight_row_stride = 0;  // bytes between stored rows (q4_0x16: groups of 16)
  Format weight_format = Format::q4_0;   // q4_0 or q4_0x16
  void* y = nullptr;               // [n, m], row n at y + n * ldy
  DType y_dtype = DType::f32;      // f32, f16 or bf16
  int64_t ldy = 0;
  const void* bias = nullptr;      // [m] of bias_dtype, or null
  DType bias_dtype = DType::f32;
  Activation activation = Activation::none;  // relu: max(0, x . W^T + bias), in the epilogue
  Device device;
  const char* fn = nullptr;        // default "qg.linear_q4_0"
};

Status linear_q4_0(const LinearQ4_0Args& args, Stream stream = nullptr);

// A linear layer with int8 weights, one scale per output feature, and int8
// activations quantized per token on the fly (symmetric, dynamic):
// y[n, m] = (qx[n] . W[m]) * sx[n] * sw[m] + bias[m], relu optionally.
// Byte for byte quantize (i8, per row) + gemm with row_scale = weight_scale
// and col_scale = the token scales, ldc = 1, ldc_n = ldy. The codes and the
// token scales go to the caller's workspaces. Both kernels are chosen before
// either runs, then enqueued on `stream` back to back. Strides: x and y in
// elements, the weight in bytes.
struct LinearInt8Args {
  const void* x = nullptr;         // [n, k] f32, f16 or bf16
  DType x_dtype = DType::f32;
  int64_t n = 0, k = 0, x_row_stride = 0;
  void* x_codes_workspace = nullptr;    // n * k bytes on `device`: the token codes
  float* x_scales_workspace = nullptr;  // n floats on `device`: the token scales
  const void* weight_q = nullptr;  // [m, k] int8
  int64_t m = 0, weight_row_stride = 0;
  const float* weight_scale = nullptr;  // [m]
  void* y = nullptr;               // [n, m], row n at y + n * ldy
  DType y_dtype = DType::f32;      // f32, f16 or bf16
  int64_t ldy = 0;
  const void* bias = nullptr;      // [m] of bias_dtype, or null
  DType bias_dtype = DType::f32;
  Activation activation = Activation::none;
  Device device;
  const char* fn = nullptr;        // default "qg.linear_int8"
};

Status linear_int8(const LinearInt8Args& args, Stream stream = nullptr);

// -------------------------------------------------------------------- views
// A result's shape and dtype, before it exists (no heap allocation).
struct ResultSpec {
  int ndim = 0;
  int64_t shape[kMaxDims] = {};
  DType dtype = DType::f32;
};

// x [..., K] float -> [..., K / block, bytes_per_block] uint8 (ggml formats)
// or the flat codes [..., row elements] of an integer format (int8 [..., K],
// uint8 [..., ceil(K/2)], int32 [..., K/8]).
struct QuantizeViews {
  Format format = Format::q4_0;
  TensorView x;
  Q8_1Convention convention = Q8_1Convention::reference;
  const char* fn = nullptr;
  // Integer formats: the scope of a scale, asymmetric (zero points), and
  // given scales / zero points (static; float32 / int32 of scales_spec's shape).
  Granularity granularity = Granularity::none;
  int64_t group_size = 0;
  bool asymmetric = false;
  const TensorView* static_scales = nullptr;
  const TensorView* static_zero_points = nullptr;
};

// Where a dynamic integer quantization writes its scales (float32) and zero
// points (int32; asymmetric only), of scales_spec's shape.
struct QuantizeOutputs {
  TensorView codes;
  const TensorView* scales = nullptr;
  const TensorView* zero_points = nullptr;
};

// xq [..., K / block, bytes_per_block] uint8 -> [..., K] float32. k < 0: inferred
// (integer formats: i4 needs k for an odd K). Integer formats take scales and
// zero points of scales_spec's shape.
struct DequantizeViews {
  Format format = Format::q4_0;
  TensorView xq;
  int64_t k = -1;
  const char* fn = nullptr;
  Granularity granularity = Granularity::none;
  int64_t group_size = 0;
  const TensorView* scales = nullptr;
  const TensorView* zero_points = nullptr;
};

// a [..., K / block, bytes] (M = product of the leading dims), b likewise (N)
// -> [M, N] (or [N, M] with transpose_out). m, n, k < 0: inferred, else checked.
// bias / row_scale / col_scale: 1-D views or null.
struct GemmViews {
  Format a_format = Format::q4_0;
  Format b_format = Format::q8_1;
  TensorView a, b;
  int64_t m = -1, n = -1, k = -1;
  const TensorView* bias = nullptr;
  const TensorView* row_scale = nullptr;
  const TensorView* col_scale = nullptr;
  float alpha = 1.0f, beta = 0.0f;
  Activation activation = Activation::none;
  DType out_dtype = DType::f32;
  bool transpose_out = false;
  const char* fn = "qg.gemm";
  const char* a_name = "a";       // argument names, for messages ("weight_q")
  const char* b_name = "b";
  // Flat (non-ggml) formats. a_k_major / b_k_major: the operand is a 2-D
  // [K-storage, rows] array (seed 001's B [K, N], seed 003's [K/8, N] words)
  // read as rows along K.
  bool a_k_major = false;
  bool b_k_major = false;
  // row_scale / col_scale of one element apply to every row / column.
  // Zero points (int32, [1] or [M] / [N]) of integer operands.
  const TensorView* row_zero_point = nullptr;
  const TensorView* col_zero_point = nullptr;
  // Group-wise scales / zero points of a (weight-only GEMMs): [M, K / group_size].
  const TensorView* a_scales = nullptr;
  const TensorView* a_zero_points = nullptr;
  int64_t group_size = 0;
};

// x [..., K / 32, bytes of `from`] -> [rows / 16, K / 32, 288] (to q4_0x16,
// rows = the product of x's leading dims) or [rows, K / 32, 18] (to q4_0).
struct RepackViews {
  Format from = Format::q4_0;
  Format to = Format::q4_0x16;
  TensorView x;
  const char* fn = nullptr;        // default "qg.repack"
  const char* x_name = nullptr;    // x's name in messages (default "x")
};

Status result_spec(const QuantizeViews& v, ResultSpec* out);
// The shape of an integer quantization's scales (and zero points).
Status scales_spec(const QuantizeViews& v, ResultSpec* out);
Status result_spec(const DequantizeViews& v, ResultSpec* out);
Status result_spec(const GemmViews& v, ResultSpec* out);
Status quantize(const QuantizeViews& v, const TensorView& out, Stream stream = nullptr);
Status quantize(const QuantizeViews& v, const QuantizeOutputs& out, Stream stream = nullptr);
Status dequantize(const DequantizeViews& v, const TensorView& out, Stream stream = nullptr);
Status gemm(const GemmViews& v, const TensorView& out, Stream stream = nullptr);
Status result_spec(const RepackViews& v, ResultSpec* out);
Status repack(const RepackViews& v, const TensorView& out);

// ------------------------------------------------------------------ explain
// Which kernel a call with these arguments would run, and why each other
// kernel registered for the same formats was passed over. Runs the same
// checks as the call (without the output) and returns its error.
struct Explanation {
  std::string op;                       // "qg.gemm_q4_0_q8_1"
  std::string problem;                  // "q4_0 x q8_1 on cuda:0"
  std::string chosen;                   // kernel name
  std::vector<std::string> candidates;  // "name: chosen" / "name: skipped (reason)" / "name: not tried ..."
};
Status explain(const GemmArgs& args, Explanation* out);
Status explain(const QuantizeArgs& args, Explanation* out);
Status explain(const DequantizeArgs& args, Explanation* out);
Status explain(const GemmViews& v, Explanation* out);
Status explain(const QuantizeViews& v, Explanation* out);
Status explain(const DequantizeViews& v, Explanation* out);

}  // namespace qg
