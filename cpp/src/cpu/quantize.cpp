// SPDX-License-Identifier: MIT
// quantize.cpp: CPU quantize/dequantize, a row per task, through the shared
// block functions of quant_block.h (the same ones the CUDA kernels call).
#include "cpu/kernels.h"

#include <cstring>

#include "cpu/thread_pool.h"
#include "quant_block.h"

namespace qg::detail::cpu {

namespace {

// Loads 32 values of any supported dtype as fp32 (exact for f16 and bf16).
void load_block(const void* x, DType dtype, int64_t offset, float* out) {
  switch (dtype) {
    case DType::f32: {
      const float* p = static_cast<const float*>(x) + offset;
      for (int j = 0; j < 32; ++j) out[j] = p[j];
      return;
    }
    case DType::f16: {
      const uint16_t* p = static_cast<const uint16_t*>(x) + offset;
      for (int j = 0; j < 32; ++j) out[j] = fp16_to_fp32(p[j]);
      return;
    }
    default: {  // bf16, validated before
      const uint16_t* p = static_cast<const uint16_t*>(x) + offset;
      for (int j = 0; j < 32; ++j) out[j] = bf16_to_fp32(p[j]);
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
  ThreadPool::instance().parallel_for(tasks, [&](int64_t t) {
    float v[32];
    for (int64_t r = t * per; r < a.rows && r < (t + 1) * per; ++r) {
      uint8_t* y = static_cast<uint8_t*>(a.y) + r * a.y_row_stride;
      for (int64_t b = 0; b < nb; ++b) {
        load_block(a.x, a.x_dtype, r * a.x_row_stride + b * 32, v);
        // Built in a local and copied: packed rows carry no alignment promise.
        switch (format) {
          case Format::q4_0: {
            block_q4_0 blk;
            quantize_block_q4_0(v, &blk);
            std::memcpy(y + b * sizeof blk, &blk, sizeof blk);
            break;
          }
          case Format::q8_0: {
            block_q8_0 blk;
            quantize_block_q8_0(v, &blk);
            std::memcpy(y + b * sizeof blk, &blk, sizeof blk);
            break;
          }
          case Format::q8_1: {
            block_q8_1 blk;
            quantize_block_q8_1(v, &blk, a.q8_1_convention);
            std::memcpy(y + b * sizeof blk, &blk, sizeof blk);
            break;
          }
        }
      }
    }
  });
  return {};
}

Status dequantize_rows(Format format, const DequantizeArgs& a) {
  const int64_t nb = a.k / 32;
  const int64_t per = rows_per_task(a.k);
  const int64_t tasks = (a.rows + per - 1) / per;
  ThreadPool::instance().parallel_for(tasks, [&](int64_t t) {
    for (int64_t r = t * per; r < a.rows && r < (t + 1) * per; ++r) {
      const uint8_t* x = static_cast<const uint8_t*>(a.xq) + r * a.xq_row_stride;
      float* y = a.y + r * a.y_row_stride;
      for (int64_t b = 0; b < nb; ++b) {
        switch (format) {
          case Format::q4_0: {
            block_q4_0 blk;
            std::memcpy(&blk, x + b * sizeof blk, sizeof blk);
            dequantize_block_q4_0(&blk, y + b * 32);
            break;
          }
          case Format::q8_0: {
            block_q8_0 blk;
            std::memcpy(&blk, x + b * sizeof blk, sizeof blk);
            dequantize_block_q8(blk.d, blk.qs, y + b * 32);
            break;
          }
          case Format::q8_1: {
            block_q8_1 blk;
            std::memcpy(&blk, x + b * sizeof blk, sizeof blk);
            dequantize_block_q8(blk.d, blk.qs, y + b * 32);
            break;
          }
        }
      }
    }
  });
  return {};
}

}  // namespace qg::detail::cpu
