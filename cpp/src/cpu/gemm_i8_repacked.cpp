// SPDX-License-Identifier: MIT
// gemm_i8_repacked.cpp: cpu_i8_repacked, an int8 x int8 GEMM whose operand
// is not contiguous along K (seed 001's B stored [K, N], a transposed view).
// The fast int8 kernels load rows along K; the reference kernel, which takes
// any strides, loads one byte at a time. So this entry copies each such
// operand once into K-contiguous rows (call_scratch slots 1 and 2) and
// hands the call back to qg::gemm, which validates it again and dispatches
// it to cpu_i8_avx512_vnni or cpu_i8_avx2: the same kernels, the same bits,
// as the [N, K] layout. The copy is a transpose of a [K, rows] byte matrix
// (pack_rows), spread over the thread pool by bands of 64 rows.
#include <algorithm>
#include <cstring>
#include <vector>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "cpu/call_scratch.h"
#include "cpu/features.h"
#include "cpu/kernels.h"
#include "cpu/thread_pool.h"
#include "cpu/tile_transpose.h"

namespace qg::detail::cpu {

#if defined(__SSE2__)
namespace {
// One 16-byte lane: a 16 x 16 block per round of SSE2 unpacks.
struct Sse2Lanes {
  using V = __m128i;
  static constexpr int kBlocks = 1;
  static V load(const uint8_t* p) { return _mm_load_si128(reinterpret_cast<const __m128i*>(p)); }
  static V lo8(V a, V b) { return _mm_unpacklo_epi8(a, b); }
  static V hi8(V a, V b) { return _mm_unpackhi_epi8(a, b); }
  static V lo16(V a, V b) { return _mm_unpacklo_epi16(a, b); }
  static V hi16(V a, V b) { return _mm_unpackhi_epi16(a, b); }
  static V lo32(V a, V b) { return _mm_unpacklo_epi32(a, b); }
  static V hi32(V a, V b) { return _mm_unpackhi_epi32(a, b); }
  static V lo64(V a, V b) { return _mm_unpacklo_epi64(a, b); }
  static V hi64(V a, V b) { return _mm_unpackhi_epi64(a, b); }
  static void store(V x, int, uint8_t* p) { _mm_store_si128(reinterpret_cast<__m128i*>(p), x); }
};
}  // namespace

void transpose_tile64_sse2(const uint8_t* src, int64_t src_stride, uint8_t* dst, int64_t dst_stride) {
  tile::transpose_tile64<Sse2Lanes>(src, src_stride, dst, dst_stride);
}
#endif

namespace {

using tile::kTile;

#if defined(__SSE2__)
using TileTranspose = void (*)(const uint8_t*, int64_t, uint8_t*, int64_t);

TileTranspose tile_transpose() {
  static const TileTranspose t = cpu_features().avx2 ? transpose_tile64_avx2 : transpose_tile64_sse2;
  return t;
}
#endif

// A task's bands of kTile rows: at least kMinTaskBytes, so that it is worth
// a worker's wake-up (a small B is packed by the calling thread alone), and
// kSlabBands where there are bands enough for every thread.
constexpr int64_t kMinTaskBytes = int64_t{256} << 10;
constexpr int64_t kSlabBands = 8;

// op's rows as rows x k contiguous bytes at dst: element (r, kk) is at
// op.data + r * row_stride + kk * block_stride (int8: one byte a block).
// Where rows are adjacent bytes (a [K, rows] array), whole 64 x 64 tiles
// go through tile_transpose; other strides and the tails go byte by byte.
void pack_rows(const Operand& op, int8_t* dst) {
  const auto* src = static_cast<const uint8_t*>(op.data);
  auto* out = reinterpret_cast<uint8_t*>(dst);
  const int64_t rows = op.rows, k = op.k, rs = op.row_stride, ks = op.block_stride;
  const int64_t bands = (rows + kTile - 1) / kTile;
  const int64_t band_bytes = kTile * (k > 0 ? k : 1);
  const int64_t per_thread = (bands + ThreadPool::instance().threads() - 1) / ThreadPool::instance().threads();
  const int64_t per_task = std::max<int64_t>({1, std::min<int64_t>(kSlabBands, per_thread), kMinTaskBytes / band_bytes});
  // A task takes per_task bands. Its whole tiles go K-slab by K-slab across
  // all its bands, so each of the slab's 64 source rows is read as one run
  // of per_task x 64 bytes while the slab's pages stay in the TLB (band by
  // band, a band's tiles touched a new 4 KB page for every source row: at
  // 4096 x 4096 the repack took about 1.5x as long); then each band's tails.
  ThreadPool::instance().parallel_for((bands + per_task - 1) / per_task, [&](int64_t task) {
    const int64_t b0 = task * per_task, b1 = std::min(bands, b0 + per_task);
#if defined(__SSE2__)
    const int64_t b1_whole = rs == 1 ? std::min(b1, rows / kTile) : b0;  // bands of 64 rows in this task
    const int64_t k_tiles = k / kTile * kTile;                            // K covered by whole tiles
    const TileTranspose transpose = tile_transpose();
    for (int64_t k0 = 0; k0 < k_tiles; k0 += kTile)
      for (int64_t band = b0; band < b1_whole; ++band) {
        const int64_t r0 = band * kTile;
        transpose(src + k0 * ks + r0, ks, out + r0 * k + k0, k);
      }
#else
    const int64_t b1_whole = b0, k_tiles = 0;
#endif
    for (int64_t r = b0 * kTile; r < std::min(rows, b1 * kTile); ++r) {
      // What the tiles left: every element of other strides, else the tails.
      const uint8_t* s = src + r * rs;
      uint8_t* d = out + r * k;
      for (int64_t kk = r < b1_whole * kTile ? k_tiles : 0; kk < k; ++kk) d[kk] = s[kk * ks];
    }
  });
}

}  // namespace

Status gemm_i8_repacked(const GemmArgs& args, Stream stream) {
  // The packed rows must outlive the inner call, whose kernel takes slot 0
  // of call_scratch: operand i packs into slot 1 + i.
  ScratchBytes own[2];
  GemmArgs g = args;
  Operand* ops[2] = {&g.a, &g.b};
  for (int i = 0; i < 2; ++i) {
    Operand& op = *ops[i];
    if (contiguous_along_k(op)) continue;
    auto* p = reinterpret_cast<int8_t*>(call_scratch(static_cast<size_t>(op.rows * op.k), own[i], 1 + i));
    pack_rows(op, p);
    op.data = p;
    op.row_stride = op.k;
    op.block_stride = 0;
  }
  return ::qg::gemm(g, stream);
}

}  // namespace qg::detail::cpu
