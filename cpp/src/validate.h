// SPDX-License-Identifier: MIT
// validate.h: the one place arguments are checked, for every op and format.
// Every public entry point runs these before dispatch; kernels may assume what
// they establish. The block size, bytes per block and scale placement come
// from the format table, never from literals. Messages name the caller-facing
// function, the argument, the expected and actual values, and the fix.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "qg/ops.h"

namespace qg::detail {

// Byte ranges [lo, hi) touched by a strided 2-D region (rows of row_bytes,
// row_stride_bytes apart); empty for a null pointer or no bytes. For the
// overlap checks of every op.
struct Span {
  uintptr_t lo = 0, hi = 0;
};
Span span_of(const void* p, int64_t rows, int64_t row_stride_bytes, int64_t row_bytes);
bool overlaps(Span a, Span b);
// The bytes an operand's data covers (its rows, or q4_0x16's groups of them).
Span operand_span(const Operand& op);

// Raw-pointer arguments: sizes, strides, pointers, dtypes, overlap.
// need_output=false (explain) skips the checks on the output.
Status check_gemm_args(const GemmArgs& args, bool need_output = true);
Status check_quantize_args(const QuantizeArgs& args, bool need_output = true);
Status check_dequantize_args(const DequantizeArgs& args, bool need_output = true);

// A view's leading dims flattened to rows over its last `inner` dims, which
// must be C-contiguous; the rows must share one stride (in elements), and
// distinct rows must not overlap (no stride-0 broadcast views).
struct RowLayout {
  int64_t rows = 0;
  int64_t row_stride = 0;
};
Status row_layout(const char* fn, const char* arg, const TensorView& view, int inner, RowLayout* out);

// The shape and dims of a view are sane: 0..kMaxDims dims, no negative sizes.
Status check_view(const char* fn, const char* arg, const TensorView& view);

// Quantize / dequantize of a layout made by qg::repack (rows_per_block > 1):
// refused, naming the way through q4_0. what: "quantize to", "dequantize".
Status check_not_repacked(const char* fn, const FormatTraits& t, const char* what);

// A packed view of `format`: uint8 [..., blocks, bytes_per_block].
Status check_packed_view(const char* fn, const char* arg, const TensorView& view, Format format);

// out has exactly the shape and dtype of `spec`, the inputs' device, is
// writable and C-contiguous.
Status check_output(const char* fn, const TensorView& out, const ResultSpec& spec, Device device);

std::string shape_string(const TensorView& view);
std::string shape_string(const int64_t* shape, int ndim);

inline Status invalid(const char* fn, const std::string& what) {
  return Status(StatusCode::invalid_argument, std::string(fn) + ": " + what);
}
inline Status type_error(const char* fn, const std::string& what) {
  return Status(StatusCode::type_error, std::string(fn) + ": " + what);
}

inline bool is_float_dtype(DType d) { return d == DType::f32 || d == DType::f16 || d == DType::bf16; }

}  // namespace qg::detail
