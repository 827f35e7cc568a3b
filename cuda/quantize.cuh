// SPDX-License-Identifier: MIT
// cuda/quantize.cuh: the CUDA quantize and dequantize kernels (quantize.cu),
// registered in registry.cu.
#pragma once

#include <string>

#include "common.cuh"

namespace qg::detail::cuda {

bool quantize_can_run(const QuantizeArgs& args, std::string* why_not);
Status quantize_run(const QuantizeArgs& args, Stream stream);
bool dequantize_can_run(const DequantizeArgs& args, std::string* why_not);
Status dequantize_run(const DequantizeArgs& args, Stream stream);

}  // namespace qg::detail::cuda
