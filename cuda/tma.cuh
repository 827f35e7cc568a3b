// SPDX-License-Identifier: MIT
// cuda/tma.cuh: 2D tensor copies (sm_90's TMA unit with a tensor map) of
// row-major operands into shared memory: int8 tiles in the 128-byte swizzle
// that wgmma.cuh's descriptors read, and plain boxes of bytes or floats.
//
// A tensor map describes the operand once (base, K and row count, row
// stride) and a box of rows x 128 bytes; one thread then moves a whole box
// with one instruction, completing on an mbarrier (bulk_copy.cuh) with the
// box's byte count. Rows past the operand's end and K past its length arrive
// as zeros -- the tails of every tile cost no code -- and still count in the
// completed bytes. The map is built on the host through the driver's
// cuTensorMapEncodeTiled, reached via the runtime so that qg links no
// libcuda. Encoding is a pure function of its arguments (about 50 ns a map
// on an H200's host, a copy of a kept one 5 ns); a decode loop asks for the
// same maps every call (same weights, same workspace from the pool), so each
// thread keeps the last few maps it encoded and copies a match instead.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "cp_async.cuh"

namespace qg::detail::cuda::tma {

// The bytes of the innermost box dimension the 128-byte swizzle allows.
constexpr int kSwizzleBytes = 128;

using EncodeTiled = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                 const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                                 CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

// The driver's encoder, looked up once; nullptr where the driver lacks it.
inline EncodeTiled encoder() {
  static EncodeTiled fn = [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult found{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &found) !=
            cudaSuccess ||
        found != cudaDriverEntryPointSuccess)
      p = nullptr;
    return reinterpret_cast<EncodeTiled>(p);
  }();
  return fn;
}

// Everything a 2D tiled map is encoded from: two maps with equal keys are
// the same 128 bytes.
struct MapKey {
  const void* base;
  cuuint64_t dims[2];
  cuuint64_t stride;
  cuuint32_t box[2];
  CUtensorMapDataType type;
  CUtensorMapSwizzle swizzle;

  bool operator==(const MapKey& o) const {
    return base == o.base && dims[0] == o.dims[0] && dims[1] == o.dims[1] && stride == o.stride &&
           box[0] == o.box[0] && box[1] == o.box[1] && type == o.type && swizzle == o.swizzle;
  }
};

// The map for `key`, from this thread's last kCachedMaps encodings when one
// matches (a call encodes up to four maps: eight covers two kinds of call
// alternating, e.g. two layers of a model). False when the driver refuses it;
// refusals are not kept.
inline bool encode_2d(CUtensorMap* map, const MapKey& key) {
  constexpr int kCachedMaps = 8;
  struct Entry {
    MapKey key;
    CUtensorMap map;
    bool used;
  };
  thread_local Entry cache[kCachedMaps] = {};
  thread_local int next = 0;
  for (const Entry& e : cache)
    if (e.used && e.key == key) {
      *map = e.map;
      return true;
    }
  const EncodeTiled fn = encoder();
  if (!fn) return false;
  const cuuint64_t strides[1] = {key.stride};
  const cuuint32_t element_strides[2] = {1, 1};
  if (fn(map, key.type, 2, const_cast<void*>(key.base), key.dims, strides, key.box, element_strides,
         CU_TENSOR_MAP_INTERLEAVE_NONE, key.swizzle, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
         CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) != CUDA_SUCCESS)
    return false;
  cache[next] = Entry{key, *map, true};
  next = (next + 1) % kCachedMaps;
  return true;
}

// A map of `rows` int8 rows of `k` bytes, `row_stride` bytes apart (a
// multiple of 16; base 16-byte aligned), read in boxes of box_rows x 128
// bytes with the 128-byte swizzle. False when the driver refuses it.
inline bool encode_rows_k128(CUtensorMap* map, const void* base, int64_t rows, int64_t k, int64_t row_stride,
                             int box_rows) {
  // One row: the stride is never stepped over, but must still be valid.
  const int64_t stride = rows > 1 ? row_stride : ((k + 15) / 16) * 16;
  const MapKey key{base,
                   {static_cast<cuuint64_t>(k), static_cast<cuuint64_t>(rows)},
                   static_cast<cuuint64_t>(stride),
                   {kSwizzleBytes, static_cast<cuuint32_t>(box_rows)},
                   CU_TENSOR_MAP_DATA_TYPE_UINT8,
                   CU_TENSOR_MAP_SWIZZLE_128B};
  return encode_2d(map, key);
}

// A map of `rows` rows of `width` elements of `type` (uint8 or float32),
// `row_stride` bytes apart (a multiple of 16; base 16-byte aligned), read in
// boxes of box_rows x box_width elements (box_width x element size a multiple
// of 16, at most 256 elements) without a swizzle: the box lands row after row,
// box_width elements a row. A copy's inner coordinate times the element size
// must be a multiple of 16 (the hardware faults with an illegal instruction
// otherwise), and its shared destination 128-byte aligned. False when the
// driver refuses the map.
inline bool encode_rows_plain(CUtensorMap* map, CUtensorMapDataType type, const void* base, int64_t rows,
                              int64_t width, int64_t row_stride, int box_width, int box_rows) {
  const int64_t elem = type == CU_TENSOR_MAP_DATA_TYPE_FLOAT32 ? 4 : 1;
  const int64_t stride = rows > 1 ? row_stride : ((width * elem + 15) / 16) * 16;
  const MapKey key{base,
                   {static_cast<cuuint64_t>(width), static_cast<cuuint64_t>(rows)},
                   static_cast<cuuint64_t>(stride),
                   {static_cast<cuuint32_t>(box_width), static_cast<cuuint32_t>(box_rows)},
                   type,
                   CU_TENSOR_MAP_SWIZZLE_NONE};
  return encode_2d(map, key);
}

// The box at (K byte k0, row r0) of `map` into shared memory at dst (1024-byte
// aligned), completing on bar. The .shared::cluster form with the CTA's own
// addresses: a launch without clusters is a cluster of one.
__device__ __forceinline__ void load_2d(void* dst, const CUtensorMap* map, int32_t k0, int32_t r0, uint64_t* bar) {
#if __CUDA_ARCH__ >= 900
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];" ::"r"(
          smem_u32(dst)),
      "l"(map), "r"(k0), "r"(r0), "r"(smem_u32(bar))
      : "memory");
#else
  __trap();
#endif
}

// Brings the map (a kernel parameter in constant space) into the TMA unit's
// cache ahead of the first copy.
__device__ __forceinline__ void prefetch_map(const CUtensorMap* map) {
#if __CUDA_ARCH__ >= 900
  asm volatile("prefetch.tensormap [%0];" ::"l"(map) : "memory");
#endif
}

}  // namespace qg::detail::cuda::tma
