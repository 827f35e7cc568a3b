// SPDX-License-Identifier: MIT
// validate.h: the one place arguments are checked. Every public entry point
// runs these before dispatch; implementations may assume what they establish.
// Messages name the Python-facing function ("qg.gemm_q4_0_q8_1: ...") and say
// what to change.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "qg/ops.h"

namespace qg::detail {

std::string op_name(const char* verb, Format format);  // "qg.quantize_q4_0"

// Raw-pointer arguments: sizes, strides, pointers, overlap.
// need_output=false (explain) skips the checks on the output pointer.
Status check_quantize_args(const std::string& fn, Format format, const QuantizeArgs& args,
                           bool need_output = true);
Status check_dequantize_args(const std::string& fn, Format format, const DequantizeArgs& args,
                             bool need_output = true);
Status check_gemm_args(const std::string& fn, const GemmArgs& args, bool need_output = true);

// A view's leading dims flattened to rows over its last `inner` dims, which
// must be C-contiguous; the rows must share one stride (in elements).
struct RowLayout {
  int64_t rows = 0;
  int64_t row_stride = 0;
};
Status row_layout(const std::string& fn, const char* arg, const TensorView& view, int inner,
                  RowLayout* out);

// out has exactly `shape`, `dtype`, the device of the inputs, and is writable.
Status check_output(const std::string& fn, const TensorView& out, DType dtype,
                    const std::vector<int64_t>& shape, Device device);

std::string shape_string(const TensorView& view);
std::string shape_string(const std::vector<int64_t>& shape);

}  // namespace qg::detail
