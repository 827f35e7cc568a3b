// SPDX-License-Identifier: MIT
// tile_transpose.h: the int8 repack's 64 x 64 byte transpose
// (gemm_i8_repacked.cpp), written once for a vector width: Lanes::V holds
// one or more 16-byte lanes, each lane turning its own 16 x 16 block (SSE2
// one lane; AVX2 two, so each unpack does two blocks' work). The including
// file compiles it for its ISA and supplies Lanes:
//   V                       the vector type
//   kBlocks                 16-byte lanes of V (blocks turned side by side)
//   load(p)                 16 * kBlocks bytes, 64-byte-tile aligned
//   lo8/hi8, lo16/hi16, lo32/hi32, lo64/hi64   the per-lane unpacks
//   store(x, b, p)          lane b of x to p (16 bytes)
#pragma once

#include <cstdint>
#include <cstring>

namespace qg::detail::cpu::tile {

constexpr int64_t kTile = 64;

// x[i] holds K-step i of kBlocks blocks side by side; afterwards lane b of
// x[j] holds row j of block b: four rounds of unpacks (bytes, pairs, quads,
// halves), 64 unpacks for kBlocks blocks of 16 x 16 bytes.
template <class Lanes>
inline void transpose16x16(typename Lanes::V (&x)[16]) {
  typename Lanes::V a[16], b[16];
  for (int i = 0; i < 16; i += 2) {
    a[i] = Lanes::lo8(x[i], x[i + 1]);
    a[i + 1] = Lanes::hi8(x[i], x[i + 1]);
  }
  for (int i = 0; i < 16; i += 4)
    for (int h = 0; h < 2; ++h) {
      b[i + 2 * h] = Lanes::lo16(a[i + h], a[i + h + 2]);
      b[i + 2 * h + 1] = Lanes::hi16(a[i + h], a[i + h + 2]);
    }
  for (int i = 0; i < 16; i += 8)
    for (int h = 0; h < 4; ++h) {
      a[i + 2 * h] = Lanes::lo32(b[i + h], b[i + h + 4]);
      a[i + 2 * h + 1] = Lanes::hi32(b[i + h], b[i + h + 4]);
    }
  for (int h = 0; h < 8; ++h) {
    x[2 * h] = Lanes::lo64(a[h], a[h + 8]);
    x[2 * h + 1] = Lanes::hi64(a[h], a[h + 8]);
  }
}

// dst[r * dst_stride + kk] = src[kk * src_stride + r] for r, kk < 64. Whole
// lines are copied into a 4 KB buffer, transposed block by block into a
// second one, and copied out: the source is read and the destination
// written in whole lines. (Straight from source to destination, one side
// strides by the other's row length, and at 4096 bytes those lines share an
// L1 set.)
template <class Lanes>
inline void transpose_tile64(const uint8_t* src, int64_t src_stride, uint8_t* dst, int64_t dst_stride) {
  constexpr int64_t kWidth = 16 * Lanes::kBlocks;  // rows a load covers
  alignas(64) uint8_t in[kTile][kTile];             // [kk][row]
  alignas(64) uint8_t buf[kTile][kTile];            // [row][kk]
  for (int64_t i = 0; i < kTile; ++i) std::memcpy(in[i], src + i * src_stride, kTile);
  for (int64_t kb = 0; kb < kTile; kb += 16)
    for (int64_t rb = 0; rb < kTile; rb += kWidth) {
      typename Lanes::V x[16];
      for (int i = 0; i < 16; ++i) x[i] = Lanes::load(&in[kb + i][rb]);
      transpose16x16<Lanes>(x);
      for (int j = 0; j < 16; ++j)
        for (int b = 0; b < Lanes::kBlocks; ++b) Lanes::store(x[j], b, &buf[rb + 16 * b + j][kb]);
    }
  for (int64_t j = 0; j < kTile; ++j) std::memcpy(dst + j * dst_stride, buf[j], kTile);
}

}  // namespace qg::detail::cpu::tile
