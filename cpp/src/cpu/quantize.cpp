// SPDX-License-Identifier: MIT
// quantize.cpp: CPU quantize/dequantize, rows (or parts of a row) a task,
// through the shared block functions of quant_block.h (the same ones the
// CUDA kernels call).
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

// The vector block quantizer this call takes, or null: for Q8_0, and Q8_1
// by the reference convention, the AVX-512 one where the AVX-512 kernels run,
// else the AVX2 one. Each writes the scalar code's bytes for a finite block
// of 32 fp32 values at x (bytes, any alignment) straight to y, and returns
// false (nothing written) for a non-finite block. On a 2-core Xeon VM the
// AVX-512 one quantized a 1 x 14336 row on one thread in 0.5x (Q8_0) and
// 0.7x (Q8_1) the AVX2 one's time (bench/RESULTS.md).
using BlockQuantizer = bool (*)(const uint8_t* x, uint8_t* y, bool with_s);
template <Format F>
BlockQuantizer vector_quantizer(const QuantizeArgs& a) {
  if (F == Format::q4_0 || (F == Format::q8_1 && a.q8_1_convention != Q8_1Convention::reference)) return nullptr;
  const CpuFeatures& f = cpu_features();
  if (f.avx512_vnni && f.f16c) return quantize_block_q8_avx512;
  if (f.avx2 && f.fma && f.f16c) return quantize_block_q8_avx2;
  return nullptr;
}

// How the rows' blocks become pool tasks: `per` whole rows a task (enough
// elements to amortise the pool's hand-off), or, where there are fewer
// rows than threads (a decode step's activations: N = 1), each row cut
// into `parts` ranges of at least min_blocks blocks, so that every thread
// quantizes part of it. On a 2-core Xeon VM (bench_gemm, three rounds,
// min-max, us), quantize_q8_1 of one 14336-wide row: hot 9.5-10.2 -> 5.9-6.5,
// cold 14.1-14.2 -> 8.7-9.3; of one 4096-wide row (two parts of 64
// blocks) cold 5.2-5.7 -> 3.2-3.3, hot level. Dequantizing, about four
// times cheaper a block, gains from 128 blocks a part (14336: hot
// 5.3-5.5 -> 3.9-4.0) and lost at 64 (4096 hot: 1.6-1.8 -> 2.2-2.9).
constexpr int64_t kQuantizeMinBlocks = 64;
constexpr int64_t kDequantizeMinBlocks = 128;
struct BlockTasks {
  int64_t rows = 0, nb = 0, per = 1, parts = 1;
  int64_t count() const { return parts > 1 ? rows * parts : (rows + per - 1) / per; }
  // Task t's rows [r0, r1) and, within each, blocks [b0, b1).
  void bounds(int64_t t, int64_t* r0, int64_t* r1, int64_t* b0, int64_t* b1) const {
    if (parts > 1) {
      *r0 = t / parts;
      *r1 = *r0 + 1;
      const int64_t p = t % parts;
      *b0 = nb * p / parts;
      *b1 = nb * (p + 1) / parts;
      return;
    }
    *r0 = t * per;
    *r1 = *r0 + per < rows ? *r0 + per : rows;
    *b0 = 0;
    *b1 = nb;
  }
};

BlockTasks block_tasks(int64_t rows, int64_t k, int64_t min_blocks) {
  BlockTasks bt;
  bt.rows = rows;
  bt.nb = k / 32;
  bt.per = k >= 4096 ? 1 : (4096 + k - 1) / (k ? k : 1);
  const int64_t threads = ThreadPool::instance().threads();
  if (rows > 0 && rows < threads) {
    const int64_t by_size = bt.nb / min_blocks;
    const int64_t want = (threads + rows - 1) / rows;
    bt.parts = by_size < want ? by_size : want;
    if (bt.parts < 1) bt.parts = 1;
  }
  return bt;
}

// The scalar code builds F's blocks in a local and copies them out; the
// vector block quantizers (Q8) write their bytes straight into y. Like
// every access here, neither assumes alignment.
template <Format F>
void quantize_rows_as(const QuantizeArgs& a) {
  using Block = typename BlockOf<F>::type;
  const BlockTasks bt = block_tasks(a.rows, a.k, kQuantizeMinBlocks);
  const int64_t esize = dtype_size(a.x_dtype);
  const auto* x = static_cast<const uint8_t*>(a.x);
  auto* y = static_cast<uint8_t*>(a.y);
  const BlockQuantizer vector_q8 = vector_quantizer<F>(a);
  ThreadPool::instance().parallel_for(bt.count(), [&](int64_t t) {
    float v[32];
    Block blk;
    int64_t r0, r1, b0, b1;
    bt.bounds(t, &r0, &r1, &b0, &b1);
    for (int64_t r = r0; r < r1; ++r) {
      const uint8_t* xr = x + r * a.x_row_stride * esize;
      uint8_t* yr = y + r * a.y_row_stride;
      for (int64_t b = b0; b < b1; ++b) {
        const uint8_t* xb = xr + b * 32 * esize;
        uint8_t* yb = yr + b * sizeof blk;
        // The vector quantizer reads fp32 blocks where they lie and f16 /
        // bf16 ones widened; a block it declines (non-finite) goes to the
        // scalar code.
        const bool widen = a.x_dtype != DType::f32;
        if (widen) load_block(xb, a.x_dtype, v);
        if (vector_q8 && vector_q8(widen ? reinterpret_cast<const uint8_t*>(v) : xb, yb, F == Format::q8_1)) continue;
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
  const BlockTasks bt = block_tasks(a.rows, a.k, kDequantizeMinBlocks);
  const auto* x = static_cast<const uint8_t*>(a.xq);
  // Through void*: the float* of the interface may point anywhere.
  auto* y = static_cast<uint8_t*>(static_cast<void*>(a.y));
  ThreadPool::instance().parallel_for(bt.count(), [&](int64_t t) {
    float v[32];
    Block blk;
    int64_t r0, r1, b0, b1;
    bt.bounds(t, &r0, &r1, &b0, &b1);
    for (int64_t r = r0; r < r1; ++r) {
      const uint8_t* xr = x + r * a.xq_row_stride;
      uint8_t* yr = y + r * a.y_row_stride * static_cast<int64_t>(sizeof(float));
      for (int64_t b = b0; b < b1; ++b) {
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
