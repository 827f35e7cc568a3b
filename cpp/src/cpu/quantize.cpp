// SPDX-License-Identifier: MIT
// quantize.cpp: CPU quantize/dequantize, a row per task, through the shared
// block functions of quant_block.h (the same ones the CUDA kernels call).
//
// No pointer here carries an alignment promise: a NumPy view at offset 1, a
// DLPack byte_offset or an odd row stride can put any array at any address.
// So every access to the caller's memory is a memcpy to or from a local
// (compilers turn it into plain unaligned loads and stores) or, in the AVX2
// block quantizer, an unaligned vector load or store (_mm256_loadu_si256 /
// _storeu_si256, defined for any address); rows are found by byte
// arithmetic, and no misaligned pointer is dereferenced as its type.
#include "cpu/kernels.h"

#include <cstring>

#include "cpu/features.h"
#include "cpu/thread_pool.h"
#include "format_dispatch.h"

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

// A finite block of 32 fp32 values at x (bytes, any alignment) through the
// AVX2 block quantizer, which writes the scalar code's bytes straight to y;
// false (nothing written) for a non-finite block.
template <Format F>
bool quantize_block_vector(const uint8_t* x, uint8_t* y) {
  if constexpr (F == Format::q4_0) {
    return false;
  } else {
    return quantize_block_q8_avx2(x, y, F == Format::q8_1);
  }
}

// Rows per task: enough work to amortise the pool's hand-off.
int64_t rows_per_task(int64_t k) { return k >= 4096 ? 1 : (4096 + k - 1) / (k ? k : 1); }

// The scalar code builds F's blocks in a local and copies them out; the
// AVX2 block quantizer (Q8) writes its bytes straight into y. Like every
// access here, neither assumes alignment.
template <Format F>
void quantize_rows_as(const QuantizeArgs& a) {
  using Block = typename BlockOf<F>::type;
  const int64_t nb = a.k / 32;
  const int64_t per = rows_per_task(a.k);
  const int64_t tasks = (a.rows + per - 1) / per;
  const int64_t esize = dtype_size(a.x_dtype);
  const auto* x = static_cast<const uint8_t*>(a.x);
  auto* y = static_cast<uint8_t*>(a.y);
  // Q8_0, and Q8_1 by the reference convention: the AVX2 block quantizer
  // gives the scalar code's bytes, several times faster.
  const bool vector_q8 = F != Format::q4_0 && (F == Format::q8_0 || a.q8_1_convention == Q8_1Convention::reference) &&
                         cpu_features().avx2 && cpu_features().fma && cpu_features().f16c;
  ThreadPool::instance().parallel_for(tasks, [&](int64_t t) {
    float v[32];
    Block blk;
    for (int64_t r = t * per; r < a.rows && r < (t + 1) * per; ++r) {
      const uint8_t* xr = x + r * a.x_row_stride * esize;
      uint8_t* yr = y + r * a.y_row_stride;
      for (int64_t b = 0; b < nb; ++b) {
        const uint8_t* xb = xr + b * 32 * esize;
        uint8_t* yb = yr + b * sizeof blk;
        // The vector quantizer reads fp32 blocks where they lie and f16 /
        // bf16 ones widened; a block it declines (non-finite) goes to the
        // scalar code.
        const bool widen = a.x_dtype != DType::f32;
        if (widen) load_block(xb, a.x_dtype, v);
        if (vector_q8 && quantize_block_vector<F>(widen ? reinterpret_cast<const uint8_t*>(v) : xb, yb)) continue;
        if (!widen) load_block(xb, a.x_dtype, v);
        quantize_block<F>(v, &blk, a.q8_1_convention);
        std::memcpy(yb, &blk, sizeof blk);
      }
    }
  });
}

template <Format F>
void dequantize_rows_as(const DequantizeArgs& a) {
  using Block = typename BlockOf<F>::type;
  const int64_t nb = a.k / 32;
  const int64_t per = rows_per_task(a.k);
  const int64_t tasks = (a.rows + per - 1) / per;
  const auto* x = static_cast<const uint8_t*>(a.xq);
  // Through void*: the float* of the interface may point anywhere.
  auto* y = static_cast<uint8_t*>(static_cast<void*>(a.y));
  ThreadPool::instance().parallel_for(tasks, [&](int64_t t) {
    float v[32];
    Block blk;
    for (int64_t r = t * per; r < a.rows && r < (t + 1) * per; ++r) {
      const uint8_t* xr = x + r * a.xq_row_stride;
      uint8_t* yr = y + r * a.y_row_stride * static_cast<int64_t>(sizeof(float));
      for (int64_t b = 0; b < nb; ++b) {
        std::memcpy(&blk, xr + b * sizeof blk, sizeof blk);
        dequantize_block<F>(&blk, v);
        std::memcpy(yr + b * sizeof v, v, sizeof v);
      }
    }
  });
}

}  // namespace

Status quantize_rows(const QuantizeArgs& a) {
  with_format(a.format, [&](auto tag) { quantize_rows_as<decltype(tag)::value>(a); });
  return {};
}

Status dequantize_rows(const DequantizeArgs& a) {
  with_format(a.format, [&](auto tag) { dequantize_rows_as<decltype(tag)::value>(a); });
  return {};
}

}  // namespace qg::detail::cpu
