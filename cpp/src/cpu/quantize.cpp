// SPDX-License-Identifier: MIT
// quantize.cpp: CPU quantize/dequantize, a row per task, through the shared
// block functions of quant_block.h (the same ones the CUDA kernels call).
//
// No pointer here carries an alignment promise: a NumPy view at offset 1, a
// DLPack byte_offset or an odd row stride can put any array at any address.
// So every access to the caller's memory is a memcpy to or from a local
// (compilers turn it into plain unaligned loads and stores), rows are found
// by byte arithmetic, and no misaligned typed pointer is ever formed.
#include "cpu/kernels.h"

#include <cstring>

#include "cpu/thread_pool.h"
#include "quant_block.h"

namespace qg::detail::cpu {

namespace {

// Loads 32 values of any supported dtype, starting at byte p, as fp32 (exact
// for f16 and bf16).
void load_block(const uint8_t* p, DType dtype, float* out) {
  if (dtype == DType::f32) {
    std::memcpy(out, p, 32 * sizeof(float));
    return;
  }
  uint16_t h[32];
  std::memcpy(h, p, sizeof h);
  if (dtype == DType::f16) {
    for (int j = 0; j < 32; ++j) out[j] = fp16_to_fp32(h[j]);
  } else {  // bf16, validated before
    for (int j = 0; j < 32; ++j) out[j] = bf16_to_fp32(h[j]);
  }
}

// One block of 32 values quantized into its packed bytes at y. Built in a
// local and copied out, like every store here.
void quantize_block(Format format, const float* v, Q8_1Convention convention, uint8_t* y) {
  switch (format) {
    case Format::q4_0: {
      block_q4_0 blk;
      quantize_block_q4_0(v, &blk);
      std::memcpy(y, &blk, sizeof blk);
      return;
    }
    case Format::q8_0: {
      block_q8_0 blk;
      quantize_block_q8_0(v, &blk);
      std::memcpy(y, &blk, sizeof blk);
      return;
    }
    case Format::q8_1: {
      block_q8_1 blk;
      quantize_block_q8_1(v, &blk, convention);
      std::memcpy(y, &blk, sizeof blk);
      return;
    }
  }
}

// The packed block at x, dequantized into 32 floats at out (a local).
void dequantize_block(Format format, const uint8_t* x, float* out) {
  switch (format) {
    case Format::q4_0: {
      block_q4_0 blk;
      std::memcpy(&blk, x, sizeof blk);
      dequantize_block_q4_0(&blk, out);
      return;
    }
    case Format::q8_0: {
      block_q8_0 blk;
      std::memcpy(&blk, x, sizeof blk);
      dequantize_block_q8(blk.d, blk.qs, out);
      return;
    }
    case Format::q8_1: {
      block_q8_1 blk;
      std::memcpy(&blk, x, sizeof blk);
      dequantize_block_q8(blk.d, blk.qs, out);
      return;
    }
  }
}

// Rows per task: enough work to amortise the pool's hand-off.
int64_t rows_per_task(int64_t k) { return k >= 4096 ? 1 : (4096 + k - 1) / (k ? k : 1); }

}  // namespace

Status quantize_rows(Format format, const QuantizeArgs& a) {
  const int64_t nb = a.k / 32;
  const int64_t per = rows_per_task(a.k);
  const int64_t tasks = (a.rows + per - 1) / per;
  const int64_t esize = dtype_size(a.x_dtype);
  const int64_t bpb = format_traits(format).bytes_per_block;
  const auto* x = static_cast<const uint8_t*>(a.x);
  auto* y = static_cast<uint8_t*>(a.y);
  ThreadPool::instance().parallel_for(tasks, [&](int64_t t) {
    float v[32];
    for (int64_t r = t * per; r < a.rows && r < (t + 1) * per; ++r) {
      const uint8_t* xr = x + r * a.x_row_stride * esize;
      uint8_t* yr = y + r * a.y_row_stride;
      for (int64_t b = 0; b < nb; ++b) {
        load_block(xr + b * 32 * esize, a.x_dtype, v);
        quantize_block(format, v, a.q8_1_convention, yr + b * bpb);
      }
    }
  });
  return {};
}

Status dequantize_rows(Format format, const DequantizeArgs& a) {
  const int64_t nb = a.k / 32;
  const int64_t per = rows_per_task(a.k);
  const int64_t tasks = (a.rows + per - 1) / per;
  const int64_t bpb = format_traits(format).bytes_per_block;
  const auto* x = static_cast<const uint8_t*>(a.xq);
  // Through void*: the float* of the interface may point anywhere.
  auto* y = static_cast<uint8_t*>(static_cast<void*>(a.y));
  ThreadPool::instance().parallel_for(tasks, [&](int64_t t) {
    float v[32];
    for (int64_t r = t * per; r < a.rows && r < (t + 1) * per; ++r) {
      const uint8_t* xr = x + r * a.xq_row_stride;
      uint8_t* yr = y + r * a.y_row_stride * static_cast<int64_t>(sizeof(float));
      for (int64_t b = 0; b < nb; ++b) {
        dequantize_block(format, xr + b * bpb, v);
        std::memcpy(yr + b * sizeof v, v, sizeof v);
      }
    }
  });
  return {};
}

}  // namespace qg::detail::cpu
