// SPDX-License-Identifier: MIT
// qg/formats.h: block formats as data. Structs are byte-identical to ggml's
// (ggml-common.h), so GGUF tensors are used as they are, without repacking.
#pragma once

#include <cstdint>

namespace qg {

enum class Format : uint8_t { q4_0, q8_0, q8_1 };

constexpr int kQK4_0 = 32;
constexpr int kQK8_0 = 32;
constexpr int kQK8_1 = 32;

// Scales are IEEE binary16 stored as raw bits: the core never depends on a
// compiler's half type, and the bytes are exactly what ggml writes.
struct block_q4_0 {
  uint16_t d;                // scale, fp16
  uint8_t qs[kQK4_0 / 2];    // element j in the low nibble of qs[j], element j+16 in the high nibble
};
static_assert(sizeof(block_q4_0) == 18, "block_q4_0 must be 18 bytes, as in ggml");

struct block_q8_0 {
  uint16_t d;                // scale, fp16
  int8_t qs[kQK8_0];
};
static_assert(sizeof(block_q8_0) == 34, "block_q8_0 must be 34 bytes, as in ggml");

struct block_q8_1 {
  uint16_t d;                // scale, fp16
  uint16_t s;                // d * sum(qs), fp16 (ggml's half2 ds = {d, s})
  int8_t qs[kQK8_1];
};
static_assert(sizeof(block_q8_1) == 36, "block_q8_1 must be 36 bytes, as in ggml");

struct FormatTraits {
  Format format;
  const char* name;          // ggml spelling: "q4_0"
  int block_size;            // elements per block
  int bytes_per_block;
  int bits_per_code;
  bool has_sum;              // block carries d * sum(q) (Q8_1)
};

const FormatTraits& format_traits(Format format);

// How quantize_q8_1 rounds and what it stores in s.
//   reference: ggml's quantize_row_q8_1_ref, q = roundf(x * (1/d)), s = fp16(d * sum(q)).
//   ggml_cuda: ggml's CUDA quantize_q8_1, q = roundf(x / d), s = fp16(sum(x)).
// qg's GEMM does not read s, so both feed gemm_q4_0_q8_1 identically well.
enum class Q8_1Convention : uint8_t { reference, ggml_cuda };

}  // namespace qg
