// SPDX-License-Identifier: MIT
// validate.cpp: argument checks shared by every op (see validate.h).
#include "validate.h"

#include <cstdint>

namespace qg::detail {

namespace {

Status invalid(const std::string& fn, const std::string& what) {
  return Status(StatusCode::invalid_argument, fn + ": " + what);
}

// Byte ranges [lo, hi) touched by a strided 2-D region; used for overlap checks.
struct Span {
  uintptr_t lo = 0, hi = 0;
};
Span span_of(const void* p, int64_t rows, int64_t row_stride_bytes, int64_t row_bytes) {
  if (p == nullptr || rows <= 0 || row_bytes <= 0) return {};
  const uintptr_t lo = reinterpret_cast<uintptr_t>(p);
  return {lo, lo + static_cast<uintptr_t>((rows - 1) * row_stride_bytes + row_bytes)};
}
bool overlaps(Span a, Span b) { return a.lo < b.hi && b.lo < a.hi && a.hi > a.lo && b.hi > b.lo; }

Status check_device(const std::string& fn, Device device) {
  if (device.id < 0) return invalid(fn, "device id " + std::to_string(device.id) + " is negative");
  return {};
}

// rows x k values in blocks of t.block_size: the checks quantize and dequantize share.
Status check_block_rows(const std::string& fn, const FormatTraits& t, int64_t rows, int64_t k,
                        Device device) {
  if (rows < 0 || k < 0) return invalid(fn, "rows and K must be >= 0");
  if (k % t.block_size != 0)
    return invalid(fn, "K=" + std::to_string(k) + " is not a multiple of " +
                           std::to_string(t.block_size) + ", the " + t.name + " block size");
  return check_device(fn, device);
}

}  // namespace

std::string op_name(const char* verb, Format format) {
  return std::string("qg.") + verb + "_" + format_traits(format).name;
}

std::string shape_string(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

std::string shape_string(const TensorView& view) {
  return shape_string(std::vector<int64_t>(view.shape, view.shape + view.ndim));
}

Status check_quantize_args(const std::string& fn, Format format, const QuantizeArgs& a,
                           bool need_output) {
  const FormatTraits& t = format_traits(format);
  if (a.x_dtype != DType::f32 && a.x_dtype != DType::f16 && a.x_dtype != DType::bf16)
    return Status(StatusCode::type_error, fn + ": x must be float32, float16 or bfloat16, got " +
                                              dtype_name(a.x_dtype));
  if (auto s = check_block_rows(fn, t, a.rows, a.k, a.device); !s.ok()) return s;
  if (a.rows == 0 || a.k == 0) return {};
  const int64_t row_bytes = a.k / t.block_size * t.bytes_per_block;
  if (a.x == nullptr) return invalid(fn, "x must not be null");
  if (!need_output) return {};
  if (a.y == nullptr) return invalid(fn, "y must not be null");
  if (a.x_row_stride < a.k && a.rows > 1 && a.x_row_stride != 0)
    return invalid(fn, "x row stride " + std::to_string(a.x_row_stride) + " is less than K=" +
                           std::to_string(a.k));
  if (a.y_row_stride < row_bytes && a.rows > 1)
    return invalid(fn, "y row stride " + std::to_string(a.y_row_stride) +
                           " bytes is less than a row of blocks (" + std::to_string(row_bytes) +
                           " bytes): output rows would overlap");
  const int64_t xsize = dtype_size(a.x_dtype);
  if (overlaps(span_of(a.x, a.rows, a.x_row_stride * xsize, a.k * xsize),
               span_of(a.y, a.rows, a.y_row_stride, row_bytes)))
    return invalid(fn, "the output overlaps the input x; pass a separate out array");
  return {};
}

Status check_dequantize_args(const std::string& fn, Format format, const DequantizeArgs& a,
                             bool need_output) {
  const FormatTraits& t = format_traits(format);
  if (auto s = check_block_rows(fn, t, a.rows, a.k, a.device); !s.ok()) return s;
  if (a.rows == 0 || a.k == 0) return {};
  const int64_t row_bytes = a.k / t.block_size * t.bytes_per_block;
  if (a.xq == nullptr) return invalid(fn, "xq must not be null");
  if (!need_output) return {};
  if (a.y == nullptr) return invalid(fn, "y must not be null");
  if (a.xq_row_stride < row_bytes && a.rows > 1 && a.xq_row_stride != 0)
    return invalid(fn, "xq row stride " + std::to_string(a.xq_row_stride) +
                           " bytes is less than a row of blocks (" + std::to_string(row_bytes) + ")");
  if (a.y_row_stride < a.k && a.rows > 1)
    return invalid(fn, "y row stride " + std::to_string(a.y_row_stride) + " is less than K=" +
                           std::to_string(a.k) + ": output rows would overlap");
  if (overlaps(span_of(a.xq, a.rows, a.xq_row_stride, row_bytes),
               span_of(a.y, a.rows, a.y_row_stride * 4, a.k * 4)))
    return invalid(fn, "the output overlaps the input xq; pass a separate out array");
  return {};
}

Status check_gemm_args(const std::string& fn, const GemmArgs& a, bool need_output) {
  if (a.m < 0 || a.n < 0 || a.k < 0)
    return invalid(fn, "M, N and K must be >= 0 (got M=" + std::to_string(a.m) +
                           ", N=" + std::to_string(a.n) + ", K=" + std::to_string(a.k) + ")");
  if (a.k % kQK4_0 != 0)
    return invalid(fn, "K=" + std::to_string(a.k) + " is not a multiple of 32, the Q4_0/Q8_1 block size");
  if (auto s = check_device(fn, a.device); !s.ok()) return s;
  if (a.m == 0 || a.n == 0) return {};
  if (a.c == nullptr && need_output) return invalid(fn, "the output pointer c must not be null");
  if (a.ldc < a.n && a.m > 1)
    return invalid(fn, "ldc=" + std::to_string(a.ldc) + " is less than N=" + std::to_string(a.n) +
                           ": output rows would overlap");
  const Span c = span_of(a.c, a.m, a.ldc * 4, a.n * 4);
  if (a.k == 0) return {};
  const int64_t nb = a.k / kQK4_0;
  if (a.w == nullptr || a.a == nullptr) return invalid(fn, "weight and activation pointers must not be null");
  if (a.ldw < nb * static_cast<int64_t>(sizeof(block_q4_0)) && a.m > 1)
    return invalid(fn, "ldw=" + std::to_string(a.ldw) + " bytes is less than a row of Q4_0 blocks (" +
                           std::to_string(nb * 18) + " bytes for K=" + std::to_string(a.k) + ")");
  if (a.lda < nb * static_cast<int64_t>(sizeof(block_q8_1)) && a.n > 1)
    return invalid(fn, "lda=" + std::to_string(a.lda) + " bytes is less than a row of Q8_1 blocks (" +
                           std::to_string(nb * 36) + " bytes for K=" + std::to_string(a.k) + ")");
  if (overlaps(c, span_of(a.w, a.m, a.ldw, nb * 18)) || overlaps(c, span_of(a.a, a.n, a.lda, nb * 36)))
    return invalid(fn, "the output overlaps an input; pass a separate out array");
  return {};
}

Status row_layout(const std::string& fn, const char* arg, const TensorView& v, int inner,
                  RowLayout* out) {
  // inner dims: C-contiguous among themselves
  int64_t expected = 1;
  for (int d = v.ndim - 1; d >= v.ndim - inner; --d) {
    if (v.shape[d] != 1 && v.strides[d] != expected && v.numel() != 0)
      return invalid(fn, std::string(arg) + " must be contiguous in its last " +
                             std::to_string(inner) + " dimension(s) (shape " + shape_string(v) +
                             "); pass a contiguous copy");
    expected *= v.shape[d];
  }
  // leading dims: flattened to rows, which must then share one stride
  int64_t rows = 1, row_stride = expected;
  int64_t prev_stride = 0, prev_size = 0;  // innermost non-1 leading dim seen so far
  for (int d = v.ndim - inner - 1; d >= 0; --d) {
    rows *= v.shape[d];
    if (v.shape[d] == 1) continue;
    if (prev_size == 0) {
      row_stride = v.strides[d];
    } else if (v.strides[d] != prev_stride * prev_size && v.numel() != 0) {
      return invalid(fn, std::string(arg) + " has batch dimensions that cannot be flattened to "
                             "rows of one stride (shape " + shape_string(v) +
                             "); pass a contiguous copy");
    }
    prev_stride = v.strides[d];
    prev_size = v.shape[d];
  }
  if (row_stride < 0 && v.numel() != 0)
    return invalid(fn, std::string(arg) + " has a negative stride; pass a contiguous copy");
  out->rows = rows;
  out->row_stride = row_stride;
  return {};
}

Status check_output(const std::string& fn, const TensorView& out, DType dtype,
                    const std::vector<int64_t>& shape, Device device) {
  if (out.ndim < 0 || out.ndim > kMaxDims)
    return invalid(fn, "out has ndim=" + std::to_string(out.ndim) + "; a qg view holds 0 to " +
                           std::to_string(kMaxDims) + " dimensions");
  if (out.dtype != dtype)
    return Status(StatusCode::type_error, fn + ": out must be " + dtype_name(dtype) + ", got " +
                                              dtype_name(out.dtype));
  std::vector<int64_t> got(out.shape, out.shape + out.ndim);
  if (got != shape)
    return invalid(fn, "out has shape " + shape_string(got) + " but the result has shape " +
                           shape_string(shape));
  if (out.device != device)
    return invalid(fn, "out is on " + device_name(out.device) + " but the inputs are on " +
                           device_name(device));
  if (!out.writable) return invalid(fn, "out must be writable (it is a read-only array)");
  if (!out.is_contiguous()) return invalid(fn, "out must be C-contiguous");
  return {};
}

}  // namespace qg::detail
