// SPDX-License-Identifier: MIT
// cuda/wo_params.cuh: what the weight-only GEMV kernels (gemm_wo_gemv*.cu)
// take from the arguments as they are: W and the activations as bytes, the
// group scales and zero points with their row strides in bytes and their
// group sizes as shifts; and the loads of one scale or zero point.
#pragma once

#include <cuda_fp16.h>

#include <cstdint>
#include <string>

#include "common.cuh"

namespace qg::detail::cuda::wo {

inline int64_t dtype_size_of(DType d) { return d == DType::f32 || d == DType::i32 ? 4 : (d == DType::i8 ? 1 : 2); }

// The group sizes the kernels take are powers of two: a shift, not a division.
inline int log2_of(int64_t v) {
  int s = 0;
  while ((int64_t{1} << s) < v) ++s;
  return s;
}

// Fills the fields the two kernels' Params have in common; each caller sets
// its own (N, the K split).
template <class Params>
void set_operand_params(Params& p, const GemmArgs& args) {
  p.w = static_cast<const uint8_t*>(args.a.data);
  p.x = static_cast<const uint8_t*>(args.b.data);
  p.scales = static_cast<const uint8_t*>(args.a.scales.data);
  p.zeros = static_cast<const uint8_t*>(args.a.zero_points.data);
  p.m = args.a.rows;
  p.k = args.a.k;
  p.ldw = args.a.row_stride;
  p.ldx = args.b.row_stride;
  p.s_stride = args.a.scales.row_stride * dtype_size_of(args.a.scales.dtype);
  p.z_stride = args.a.zero_points.row_stride * dtype_size_of(args.a.zero_points.dtype);
  p.s_shift = log2_of(args.a.scales.group_size);
  p.z_shift = p.zeros ? log2_of(args.a.zero_points.group_size) : 0;
  p.scale_type = args.a.scales.dtype == DType::f32 ? 0 : (args.a.scales.dtype == DType::f16 ? 1 : 2);
  p.zero_i32 = args.a.zero_points.dtype == DType::i32 ? 1 : 0;
}

// The tensor-core GEMVs that apply a group's scale once a 128-value macro
// step (cuda_wo_gemv_bulk, cuda_wo_gemv_mma) need the scales' and zero
// points' groups to be powers of two of at least min_group; false, with the
// reason, otherwise.
inline bool groups_at_least(const GemmArgs& g, int64_t min_group, std::string* why_not) {
  auto fits = [&](int64_t gs) { return gs >= min_group && (gs & (gs - 1)) == 0; };
  auto no = [&](const char* what, int64_t gs) {
    if (why_not)
      *why_not = std::string("weight ") + what + " need a power-of-two group size >= " + std::to_string(min_group) +
                 " (got " + std::to_string(gs) + ")";
    return false;
  };
  if (!fits(g.a.scales.group_size)) return no("scales", g.a.scales.group_size);
  if (g.a.zero_points.data && !fits(g.a.zero_points.group_size)) return no("zero points", g.a.zero_points.group_size);
  return true;
}

// Group `group` of a row of scales / zero points starting at `row`. The
// _bits / _int forms return what was loaded, unconverted: a kernel that
// loads them ahead keeps those and converts at the use. A conversion next
// to the load makes the warp wait for the load right there (the scales come
// from DRAM, about a microsecond away), which defeats loading ahead.
template <class Params>
__device__ __forceinline__ uint32_t load_scale_bits(const Params& p, const uint8_t* row, int64_t group) {
  if (p.scale_type == 0) return __ldg(reinterpret_cast<const unsigned int*>(row) + group);
  return __ldg(reinterpret_cast<const unsigned short*>(row) + group);
}

template <class Params>
__device__ __forceinline__ float scale_from_bits(const Params& p, uint32_t bits) {
  if (p.scale_type == 0) return __uint_as_float(bits);
  if (p.scale_type == 1) return __half2float(__ushort_as_half(static_cast<unsigned short>(bits)));
  return __uint_as_float(bits << 16);
}

template <class Params>
__device__ __forceinline__ int load_zero_int(const Params& p, const uint8_t* row, int64_t group) {
  return p.zero_i32 ? __ldg(reinterpret_cast<const int*>(row) + group)
                    : static_cast<int>(__ldg(reinterpret_cast<const signed char*>(row) + group));
}

}  // namespace qg::detail::cuda::wo
