// SPDX-License-Identifier: MIT
// cuda/gemm_int_generic.cu: the last-resort GEMMs of the integer family, for
// every operand layout the reference kernels take (K-strided blocks, a [K, N]
// B, rows at any byte address). One thread per output element, codes read a
// byte at a time through int_formats.h's load_code, so no address is assumed
// aligned; the arithmetic is gemm_int_reference.cpp's:
//   int x int:    acc = sum qa * qb in int32 (wrapping: validation bounds K
//                 so the zero-point-corrected sum is exact), plus the code
//                 sums the zero-point terms need; then epilogue_store_int.
//   weight-only:  acc = sum_k s[m, k/G] * (q - z[m, k/G]) * x[n, k] in fp32;
//                 then epilogue_store.
// The formats are template parameters, so the per-element format branches
// of load_code fold away. Slow and obviously right; faster kernels sit in
// front of these in the registry.
#include <algorithm>
#include <string>

#include "epilogue.h"
#include "gemm_int.cuh"
#include "int_formats.h"

namespace qg::detail::cuda {
namespace {

constexpr int kThreads = 128;
constexpr int64_t kMaxGrid = 1 << 20;  // grid-stride beyond this

// Bytes between consecutive blocks along K (0 in the operand: contiguous).
int64_t block_stride_of(const Operand& op) {
  return op.block_stride ? op.block_stride : format_traits(op.format).bytes_per_block;
}

// The row layout of one operand, passed to the kernels by value.
struct RowsOf {
  const uint8_t* data;
  int64_t row_stride, block_stride;  // bytes
};

RowsOf rows_of(const Operand& op) {
  return {static_cast<const uint8_t*>(op.data), op.row_stride, block_stride_of(op)};
}

template <Format FA, Format FB>
__global__ void __launch_bounds__(kThreads)
gemm_int_kernel(RowsOf a, RowsOf b, EpilogueParams ep, int64_t m, int64_t n, int64_t k) {
  const int64_t total = m * n;
  for (int64_t idx = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; idx < total;
       idx += static_cast<int64_t>(gridDim.x) * kThreads) {
    const int64_t row = idx / n, col = idx % n;
    const uint8_t* ar = a.data + row * a.row_stride;
    const uint8_t* br = b.data + col * b.row_stride;
    // Unsigned sums: the wrap-around the epilogue relies on is defined.
    // A product of two codes is at most 128 * 128, so it never wraps itself.
    uint32_t acc = 0, sum_a = 0, sum_b = 0;
    for (int64_t x = 0; x < k; ++x) {
      const int32_t qa = load_code(FA, ar, a.block_stride, x);
      const int32_t qb = load_code(FB, br, b.block_stride, x);
      acc += static_cast<uint32_t>(qa * qb);
      sum_a += static_cast<uint32_t>(qa);
      sum_b += static_cast<uint32_t>(qb);
    }
    epilogue_store_int(ep, row, col, static_cast<int32_t>(acc), static_cast<int32_t>(sum_a),
                       static_cast<int32_t>(sum_b));
  }
}

// Scales and zero points are read once per group (byte loads, any dtype of
// load_group_scale), not once per element.
template <Format FA, Format FB>
__global__ void __launch_bounds__(kThreads)
gemm_wo_kernel(RowsOf a, OutsideScales scales, OutsideScales zero_points, RowsOf b, EpilogueParams ep, int64_t m,
               int64_t n, int64_t k) {
  const int64_t total = m * n;
  const int64_t gs = scales.group_size;  // > 0 and divides K (validation)
  for (int64_t idx = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; idx < total;
       idx += static_cast<int64_t>(gridDim.x) * kThreads) {
    const int64_t row = idx / n, col = idx % n;
    const uint8_t* ar = a.data + row * a.row_stride;
    const uint8_t* br = b.data + col * b.row_stride;
    float acc = 0.0f;
    for (int64_t g = 0, k0 = 0; k0 < k; ++g, k0 += gs) {
      const float s = load_group_scale(scales, row, g);
      const int32_t z = load_group_zero_point(zero_points, row, g);
      for (int64_t x = k0; x < k0 + gs; ++x) {
        const float w = dequantize_value(load_code(FA, ar, a.block_stride, x), s, z);
        acc = fmaf(w, load_float_elem(FB, br, b.block_stride, x), acc);
      }
    }
    epilogue_store(ep, row, col, acc);
  }
}

unsigned grid_for(int64_t outputs) {
  return static_cast<unsigned>(std::min<int64_t>((outputs + kThreads - 1) / kThreads, kMaxGrid));
}

// Both GEMMs' host side: nothing to do for an empty C, the device, then one
// launch of a thread per output element; a launch error names the shape
// and what `shape_extra()` adds (built only then).
template <class Launch, class ShapeExtra>
Status run_one_thread_per_output(const GemmArgs& args, Stream stream, Launch&& launch, ShapeExtra&& shape_extra) {
  const int64_t m = args.a.rows, n = args.b.rows;
  if (m <= 0 || n <= 0) return Status::success();
  launch(rows_of(args.a), rows_of(args.b), epilogue_params(args), grid_for(m * n), to_cuda(stream));
  return launch_status(args.fn, [&] {
    return "M=" + std::to_string(m) + ", N=" + std::to_string(n) + ", K=" + std::to_string(args.a.k) + shape_extra();
  });
}

}  // namespace

bool gemm_int_generic_can_run(const GemmArgs&, std::string*) { return true; }

Status gemm_int_generic_run(const GemmArgs& args, Stream stream) {
  return run_one_thread_per_output(
      args, stream, [&](const RowsOf& a, const RowsOf& b, const EpilogueParams& ep, unsigned grid, cudaStream_t st) {
        with_int_format(args.a.format, [&](auto fa) {
          with_int_format(args.b.format, [&](auto fb) {
            gemm_int_kernel<decltype(fa)::value, decltype(fb)::value>
                <<<grid, kThreads, 0, st>>>(a, b, ep, args.a.rows, args.b.rows, args.a.k);
          });
        });
      },
      [] { return std::string(); });
}

bool gemm_wo_generic_can_run(const GemmArgs&, std::string*) { return true; }

Status gemm_wo_generic_run(const GemmArgs& args, Stream stream) {
  return run_one_thread_per_output(
      args, stream,
      [&](const RowsOf& a, const RowsOf& b, const EpilogueParams& ep, unsigned grid, cudaStream_t st) {
        // The registry sends i8 and i4 weights here (i4x8 pairs only with integer b).
        auto int_fmt = [&](auto fn) {
          if (args.a.format == Format::i4) fn(FormatConst<Format::i4>{});
          else fn(FormatConst<Format::i8>{});
        };
        int_fmt([&](auto fa) {
          with_float_format(args.b.format, [&](auto fb) {
            gemm_wo_kernel<decltype(fa)::value, decltype(fb)::value><<<grid, kThreads, 0, st>>>(
                a, args.a.scales, args.a.zero_points, b, ep, args.a.rows, args.b.rows, args.a.k);
          });
        });
      },
      [&] { return ", group_size=" + std::to_string(args.a.scales.group_size); });
}

}  // namespace qg::detail::cuda
