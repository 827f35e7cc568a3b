// SPDX-License-Identifier: MIT
// qg/formats.h: formats as data. One row of the traits table per format says
// everything validation, shape inference, the bindings and the tests need to
// know about it; kernels are the only code that knows a format's bit layout.
// The block structs are byte-identical to ggml's (ggml-common.h), so GGUF
// tensors are used as they are, without repacking.
#pragma once

#include <cstdint>

#include "qg/tensor.h"

namespace qg {

// A closed enum: adding a format is a new value here, a row in the table
// (formats.cpp), and kernels registered for it. No plugin registry.
// ggml block formats first, then the integer family (scales outside), then
// plain floats (the activations of weight-only GEMMs), then layouts that
// rearrange another format's bytes for a kernel (q4_0x16: Q4_0 rows in
// groups of 16, made by qg::repack; see its row below).
enum class Format : uint8_t { q4_0, q8_0, q8_1, i8, i4, i4x8, f16, bf16, f32, q4_0x16 };
constexpr int kFormatCount = 10;

// How the codes of one block (or one row, for formats without blocks) sit in
// memory.
enum class Packing : uint8_t {
  bytes,          // one code per byte
  nibbles_split,  // ggml Q4_0: element j in the low nibble of byte j, element j + block/2 in the high nibble
  nibbles_rows16, // q4_0x16: 16 rows' nibbles_split bytes interleaved four at a time (block_q4_0x16)
  nibbles_pairs,  // two per byte, low nibble first (element 2i low, 2i+1 high)
  nibbles_i32,    // eight per int32, element i in bits 4i..4i+3
  bits_u32,       // 32 per uint32, one bit per element
  native,         // one float element of the storage dtype
};

// Where a format keeps its scales.
enum class ScalePlace : uint8_t {
  none,      // codes are the values (plain int8)
  in_block,  // each block starts with its scale (ggml, MX, MSFP)
  outside,   // a separate array: per tensor, row or group of K (Operand::scales)
};

enum class ScaleType : uint8_t { none, f16, bf16, f32, e8m0 };

struct FormatTraits {
  Format format;
  const char* name;        // ggml spelling: "q4_0"
  int element_bits;        // bits of one code
  bool is_signed;          // codes are stored signed (int8) rather than offset
  int code_offset;         // value = scale * (code - code_offset); Q4_0 stores v + 8
  int block_size;          // elements per block: K must be a multiple of it
  int bytes_per_block;     // scale, sums and codes of one block
  Packing packing;
  ScalePlace scale_place;
  ScaleType scale_type;
  bool has_zero_point;
  bool has_block_sum;      // the block also carries d * sum(codes) (Q8_1's s)
  bool quantizable;        // qg can produce it from float input
  const char* quantize_fn;    // Python-facing names, for messages: "qg.quantize_q4_0"
  const char* dequantize_fn;  // "qg.dequantize_q4_0"
  DType storage;              // dtype of the array holding a row: u8 (ggml blocks, i4), i8, i32 (i4x8), floats
  bool blocked_view;          // viewed as [..., K/block, bytes_per_block] (ggml); else flat [..., row elements]
  bool pads_k;                // K need not be a multiple of block_size: the last block is padded (i4, odd K)
  // Rows whose blocks are interleaved into one stored block: 16 for q4_0x16
  // (its [rows / 16, K / 32, 288] view holds 16 rows per leading index, and
  // an operand's row_stride steps from one group of 16 rows to the next); 1
  // for every other format. The row count must be a multiple of it.
  int rows_per_block;
};

const FormatTraits& format_traits(Format format);
// The format whose name is `name` ("q4_0"); false if there is none.
bool format_from_name(const char* name, Format* out);

// Blocks of one row of k elements (the last one padded where the format pads K).
inline int64_t row_blocks(const FormatTraits& t, int64_t k) { return (k + t.block_size - 1) / t.block_size; }
// Bytes of one row of k elements (of one group of rows_per_block rows).
inline int64_t row_bytes(const FormatTraits& t, int64_t k) { return row_blocks(t, k) * t.bytes_per_block; }
// Stored rows (groups of rows_per_block) that hold `rows` rows.
inline int64_t stored_rows(const FormatTraits& t, int64_t rows) { return rows / t.rows_per_block; }
// Storage elements of one row (the last dim of a flat view).
int64_t row_elements(const FormatTraits& t, int64_t k);
// Integer formats: the largest |value| a code can stand for, without and
// with a zero point (int8: 128 and 255; int4: 8 and 15). 0 for other formats.
int max_abs_code(const FormatTraits& t, bool zero_point);
inline bool is_integer_format(Format f) { return f == Format::i8 || f == Format::i4 || f == Format::i4x8; }
inline bool is_float_format(Format f) { return f == Format::f16 || f == Format::bf16 || f == Format::f32; }

// ------------------------------------------------------------ block structs
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

// q4_0x16: the blocks of 16 Q4_0 rows at one position along K, rearranged
// so that a 64-byte vector register load holds four code bytes of every row
// (one int32 lane a row): qs[c][r][i] is byte 4c + i of row r's block, so
// its low nibble is element 4c + i and its high nibble element 16 + 4c + i;
// then the 16 rows' fp16 scales. The same bytes as 16 block_q4_0, moved:
// qg::repack converts both ways, exactly. A decode kernel reads one stream
// of whole 64-byte lines per 16 rows, and its vpdpbusd lanes are rows, so
// no sum crosses lanes (docs/architecture.md, "q4_0x16").
constexpr int kQ4_0x16Rows = 16;
struct block_q4_0x16 {
  uint8_t qs[4][kQ4_0x16Rows][4];
  uint16_t d[kQ4_0x16Rows];  // row r's scale, fp16
};
static_assert(sizeof(block_q4_0x16) == 288, "block_q4_0x16 must be 16 block_q4_0");

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

// How quantize_q8_1 rounds and what it stores in s.
//   reference: ggml's quantize_row_q8_1_ref, q = roundf(x * (1/d)), s = fp16(d * sum(q)).
//   ggml_cuda: ggml's CUDA quantize_q8_1, q = roundf(x / d), s = fp16(sum(x)).
// qg's GEMM does not read s, so both feed gemm_q4_0_q8_1 identically well.
enum class Q8_1Convention : uint8_t { reference, ggml_cuda };

}  // namespace qg
