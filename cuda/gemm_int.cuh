// SPDX-License-Identifier: MIT
// cuda/gemm_int.cuh: the CUDA kernels of the integer family, registered in
// registry.cu:
//   gemm_int_generic  any pair of i8 / i4 / i4x8, any strides (byte loads):
//                     acc = sum qa * qb in int32, then epilogue_store_int
//   gemm_wo_generic   i8 / i4 weights with group scales (and zero points) x
//                     f16 / bf16 / f32 activations, fp32 sums, then epilogue_store
//   int_quantize / int_dequantize  float rows <-> i8 / i4 / i4x8 codes with
//                     outside scales, the same bytes as the CPU backend
// And the host-side dispatch both files share: a run-time format or dtype as
// a compile-time one, so the kernels' per-element branches fold away.
#pragma once

#include <string>

#include "common.cuh"

namespace qg::detail::cuda {

bool gemm_int_generic_can_run(const GemmArgs& args, std::string* why_not);
Status gemm_int_generic_run(const GemmArgs& args, Stream stream);
bool gemm_wo_generic_can_run(const GemmArgs& args, std::string* why_not);
Status gemm_wo_generic_run(const GemmArgs& args, Stream stream);

bool int_quantize_can_run(const QuantizeArgs& args, std::string* why_not);
Status int_quantize_run(const QuantizeArgs& args, Stream stream);
bool int_dequantize_can_run(const DequantizeArgs& args, std::string* why_not);
Status int_dequantize_run(const DequantizeArgs& args, Stream stream);

template <Format F>
struct FormatConst {
  static constexpr Format value = F;
};
template <DType T>
struct DTypeConst {
  static constexpr DType value = T;
};

// A run-time integer format as a compile-time one (validation admits only these).
template <class Fn>
void with_int_format(Format f, Fn&& fn) {
  if (f == Format::i4) fn(FormatConst<Format::i4>{});
  else if (f == Format::i4x8) fn(FormatConst<Format::i4x8>{});
  else fn(FormatConst<Format::i8>{});
}

template <class Fn>
void with_float_format(Format f, Fn&& fn) {
  if (f == Format::f16) fn(FormatConst<Format::f16>{});
  else if (f == Format::bf16) fn(FormatConst<Format::bf16>{});
  else fn(FormatConst<Format::f32>{});
}

template <class Fn>
void with_dtype(DType d, Fn&& fn) {
  if (d == DType::f16) fn(DTypeConst<DType::f16>{});
  else if (d == DType::bf16) fn(DTypeConst<DType::bf16>{});
  else fn(DTypeConst<DType::f32>{});
}

}  // namespace qg::detail::cuda
