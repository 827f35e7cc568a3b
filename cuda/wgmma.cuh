// SPDX-License-Identifier: MIT
// cuda/wgmma.cuh: Hopper's warpgroup MMA (sm_90a) on int8 operands: B (and
// A, or A from registers) in shared memory as the 2D tensor copies of tma.cuh
// leave them.
//
// One wgmma.mma_async.m64nNk32.s32.s8.s8 is issued by the 128 threads of a
// warpgroup together: a 64 x 32 slice of A and an N x 32 slice of B, both read
// by the tensor cores straight from shared memory (no ldmatrix, no operand
// registers), accumulate into 64 x N int32 sums spread over the warpgroup's
// registers: thread (warp w, lane l) holds, for each n8 column block j, the
// four values (row 16w + l/4 [+8], column 8j + 2(l%4) [+1]), ordered
// (r, c), (r, c+1), (r+8, c), (r+8, c+1) -- mma.sync's C fragment, once per j.
//
// For 8-bit types both operands must be K-major (rows along K): exactly how
// qg stores int8 weights and activations. A shared-memory matrix descriptor
// names a tile: start address, the byte step between 8-row groups (SBO) and
// the swizzle. The tiles here are rows of 128 bytes (128 int8 of K) written
// by a tensor copy with the 128-byte swizzle (16-byte chunk c of row r at
// chunk c ^ (r % 8), the pattern repeating every 8 rows = 1024 bytes), so
// SBO = 1024 and the k-th 32-byte K step of the tile is the same descriptor
// with its start 32 k bytes further on: the hardware applies the swizzle to
// the full address, which is why every tile starts 1024-byte aligned.
//
// The instructions are asynchronous: fence before the first one that reads
// registers written by ordinary code, commit a group, and wait for groups
// before touching the accumulators or letting a stage's shared memory be
// overwritten. Bodies compile only for sm_90a; elsewhere they trap (the
// registry admits the kernels that use them on sm_90a alone).
#pragma once

#include <cstdint>

namespace qg::detail::cuda::wgmma {

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define QG_WGMMA_ENABLED 1
#else
#define QG_WGMMA_ENABLED 0
#endif

// Descriptor of a K-major tile with 128-byte rows and the 128-byte swizzle at
// shared address `addr` (1024-byte aligned, plus 32 k for K step k).
__device__ __forceinline__ uint64_t desc_k128_swizzled(uint32_t addr) {
  constexpr uint64_t kSbo = 1024 >> 4;       // bytes between 8-row core-matrix groups
  constexpr uint64_t kLbo = 1;               // unused by swizzled K-major tiles (one atom spans K)
  constexpr uint64_t kSwizzle128 = 1ull << 62;
  return static_cast<uint64_t>((addr & 0x3FFFF) >> 4) | (kLbo << 16) | (kSbo << 32) | kSwizzle128;
}

// desc_k128_swizzled's high word (SBO and the swizzle mode): the same for
// every such tile. The low word holds the address.
constexpr uint32_t kDescK128High = (1024 >> 4) | (1u << 30);

// The descriptor of the K step 32 bytes further on: the address field is
// addr >> 4, and shared addresses stay below 2^18, so this never carries.
__device__ __forceinline__ uint64_t desc_advance(uint64_t desc, uint32_t bytes) { return desc + (bytes >> 4); }

// Orders this warpgroup's register writes before the MMAs that read them.
__device__ __forceinline__ void fence() {
#if QG_WGMMA_ENABLED
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#endif
}

__device__ __forceinline__ void commit_group() {
#if QG_WGMMA_ENABLED
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#endif
}

// Waits until at most kPending committed groups are still running.
template <int kPending>
__device__ __forceinline__ void wait_group() {
#if QG_WGMMA_ENABLED
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
#endif
}

// Makes this thread's ordinary writes to shared memory (st.shared and the
// cp.async copies) visible to the async proxy, through which wgmma reads
// its operands from shared memory; a CTA barrier after it extends that to
// every warpgroup's MMAs.
__device__ __forceinline__ void fence_proxy_async_shared() {
#if QG_WGMMA_ENABLED
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}

// Moves this warpgroup's register allotment to kRegs a thread (a multiple of
// 8 in 24..256): producers give registers back, consumers take them, within
// what the CTA was launched with.
template <bool kIncrease, int kRegs>
__device__ __forceinline__ void set_max_registers() {
#if QG_WGMMA_ENABLED
  if constexpr (kIncrease) asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegs));
  else asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegs));
#endif
}

// Keeps the compiler from moving accumulator reads or writes across an
// asynchronous MMA that still owns them.
template <int kRegs>
__device__ __forceinline__ void fence_operands(int (&d)[kRegs]) {
#pragma unroll
  for (int i = 0; i < kRegs; ++i) asm volatile("" : "+r"(d[i])::"memory");
}

#define QG_ACC8(d, i)                                                                                       \
  "+r"(d[(i) + 0]), "+r"(d[(i) + 1]), "+r"(d[(i) + 2]), "+r"(d[(i) + 3]), "+r"(d[(i) + 4]), "+r"(d[(i) + 5]), \
      "+r"(d[(i) + 6]), "+r"(d[(i) + 7])

// d += A (64 x 32, desc a) * B^T (N x 32, desc b), s8 x s8 -> s32. N = 128 or 256.
// (scale-d, a predicate, is always true: the accumulators start at zero.)
template <int N>
__device__ __forceinline__ void mma_s8(int (&d)[N / 2], uint64_t a, uint64_t b);

template <>
__device__ __forceinline__ void mma_s8<128>(int (&d)[64], uint64_t a, uint64_t b) {
#if QG_WGMMA_ENABLED
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k32.s32.s8.s8 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
      "}, %64, %65, p;\n}\n"
      : QG_ACC8(d, 0), QG_ACC8(d, 8), QG_ACC8(d, 16), QG_ACC8(d, 24), QG_ACC8(d, 32), QG_ACC8(d, 40),
        QG_ACC8(d, 48), QG_ACC8(d, 56)
      : "l"(a), "l"(b), "r"(1));
#else
  __trap();
#endif
}

template <>
__device__ __forceinline__ void mma_s8<256>(int (&d)[128], uint64_t a, uint64_t b) {
#if QG_WGMMA_ENABLED
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k32.s32.s8.s8 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "
      "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "
      "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "
      "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, "
      "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
      "}, %128, %129, p;\n}\n"
      : QG_ACC8(d, 0), QG_ACC8(d, 8), QG_ACC8(d, 16), QG_ACC8(d, 24), QG_ACC8(d, 32), QG_ACC8(d, 40),
        QG_ACC8(d, 48), QG_ACC8(d, 56), QG_ACC8(d, 64), QG_ACC8(d, 72), QG_ACC8(d, 80), QG_ACC8(d, 88),
        QG_ACC8(d, 96), QG_ACC8(d, 104), QG_ACC8(d, 112), QG_ACC8(d, 120)
      : "l"(a), "l"(b), "r"(1));
#else
  __trap();
#endif
}

// The asm prologue of an RS wgmma: predicate p = (operand P != 0) for
// scale-d, and desc = {b_lo (operand LO) + the K step's offset (operand
// OFF), the constant high word (operand HI)}.
#define QG_DESC_PROLOGUE(P, LO, OFF, HI)                                          \
  "{\n.reg .pred p;\n.reg .b32 lo, hi;\n.reg .b64 desc;\nsetp.ne.b32 p, %" P ", 0;\n" \
  "add.u32 lo, %" LO ", %" OFF ";\nmov.b32 hi, %" HI ";\nmov.b64 desc, {lo, hi};\n"
// d += A (64 x 32, in registers) * B^T (N x 32, at the descriptor b_lo
// advanced by kBytes), s8 x s8 -> s32, N / 2 sums a thread (n8 blocks j < N / 8).
// N = 16 or 32. A's fragment is mma.sync.m16n8k32's, once per warp of the
// warpgroup: warp w, lane (g = l / 4, t = l % 4) holds rows 16w + g and
// 16w + g + 8, K bytes 4t..4t+3 (a[0], a[1]) and 16+4t..16+4t+3 (a[2],
// a[3]). The MMA reads a asynchronously: a is tied to the instruction ("+r",
// so its values stay in the registers the MMA reads) and must be kept live
// and unchanged until the group is waited (fence_operands on it after the
// wait). b_lo is the low word of a desc_k128_swizzled descriptor; the K
// step's offset is added to it inside the instruction's block, a 32-bit add
// (the address field never carries), and the constant high word joined to
// it there: with many MMAs unrolled, descriptors computed ahead would each
// hold two registers until their MMA, and a 64-bit add per MMA cost ptxas
// four instructions (two adds, two moves to uniform registers).
template <int N, uint32_t kBytes>
__device__ __forceinline__ void mma_s8_rs(int (&d)[N / 2], int (&a)[4], uint32_t b_lo) {
#if QG_WGMMA_ENABLED
  static_assert(N == 16 || N == 32, "m64n16k32 or m64n32k32");
  if constexpr (N == 32) {
    asm volatile(
        QG_DESC_PROLOGUE("21", "20", "22", "23")
        "wgmma.mma_async.sync.aligned.m64n32k32.s32.s8.s8 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15"
        "}, {%16, %17, %18, %19}, desc, p;\n}\n"
        : QG_ACC8(d, 0), QG_ACC8(d, 8), "+r"(a[0]), "+r"(a[1]), "+r"(a[2]), "+r"(a[3])
        : "r"(b_lo), "r"(1), "n"(kBytes >> 4), "n"(kDescK128High));
  } else {
    asm volatile(
        QG_DESC_PROLOGUE("13", "12", "14", "15")
        "wgmma.mma_async.sync.aligned.m64n16k32.s32.s8.s8 {"
        "%0, %1, %2, %3, %4, %5, %6, %7"
        "}, {%8, %9, %10, %11}, desc, p;\n}\n"
        : QG_ACC8(d, 0), "+r"(a[0]), "+r"(a[1]), "+r"(a[2]), "+r"(a[3])
        : "r"(b_lo), "r"(1), "n"(kBytes >> 4), "n"(kDescK128High));
  }
#else
  __trap();
#endif
}

// d = A (64 x 16, in registers) * B^T (32 x 16, at the descriptor b_lo
// advanced by kBytes as in mma_s8_rs) [+ d when kAccumulate], f16 x f16 -> f32: wgmma.m64n32k16 with
// A from registers, 16 sums a thread laid out as mma_s8_rs's. A's fragment
// is mma.sync.m16n8k16's, once per warp: lane (g = l / 4, t = l % 4) holds
// rows 16w + g (a[0], a[2]) and 16w + g + 8 (a[1], a[3]), K slots 2t, 2t + 1
// (a[0], a[1]) and 2t + 8, 2t + 9 (a[2], a[3]), the lower K in the low half.
// kAccumulate = false is the instruction's scale-d = 0: d's old values are
// not read, so a block's first MMA needs no reset of the sums. B is K-major
// fp16 rows in the 128-byte swizzle (64 values a row), so a K step of 16 is
// 32 bytes, as for s8's K step of 32. a is tied to the instruction as in
// mma_s8_rs and must stay unchanged until the group is waited.
template <uint32_t kBytes, bool kAccumulate, int kA>
__device__ __forceinline__ void mma_f16_rs_n32(float (&d)[16], uint32_t (&a)[8], uint32_t b_lo) {
#if QG_WGMMA_ENABLED
  static_assert(kA == 0 || kA == 4, "a[kA .. kA + 3] is one K step's fragment");
  asm volatile(
      QG_DESC_PROLOGUE("21", "20", "22", "23")
      "wgmma.mma_async.sync.aligned.m64n32k16.f32.f16.f16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15"
      "}, {%16, %17, %18, %19}, desc, p, 1, 1, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+r"(a[kA]), "+r"(a[kA + 1]), "+r"(a[kA + 2]), "+r"(a[kA + 3])
      : "r"(b_lo), "r"(kAccumulate ? 1 : 0), "n"(kBytes >> 4), "n"(kDescK128High));
#else
  __trap();
#endif
}

// d += A (64 x 16, in registers) * B^T (128 x 16, at the descriptor b_lo
// advanced by kBytes), f16 x f16 -> f32: wgmma.m64n128k16 with A from
// registers, its 64 sums a thread as four m64n32 units' (d[q] holds tokens
// 32 q .. 32 q + 31, each laid out as mma_f16_rs_n32's d), so that one
// instruction stands for four of those. a[kA .. kA + 3] is one K step's
// fragment, as in mma_f16_rs_n32, tied to the instruction until its group is
// waited. scale-d is always 1: the sums run on across blocks (the folded
// kernel's scales are inside its operands), and a tile's first MMA adds
// onto zeros.
#define QG_FACC16(d, q)                                                                                        \
  "+f"(d[q][0]), "+f"(d[q][1]), "+f"(d[q][2]), "+f"(d[q][3]), "+f"(d[q][4]), "+f"(d[q][5]), "+f"(d[q][6]),     \
      "+f"(d[q][7]), "+f"(d[q][8]), "+f"(d[q][9]), "+f"(d[q][10]), "+f"(d[q][11]), "+f"(d[q][12]), "+f"(d[q][13]), \
      "+f"(d[q][14]), "+f"(d[q][15])
template <uint32_t kBytes, int kA>
__device__ __forceinline__ void mma_f16_rs_n128(float (&d)[4][16], uint32_t (&a)[8], uint32_t b_lo) {
#if QG_WGMMA_ENABLED
  static_assert(kA == 0 || kA == 4, "a[kA .. kA + 3] is one K step's fragment");
  asm volatile(
      QG_DESC_PROLOGUE("69", "68", "70", "71")
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
      "}, {%64, %65, %66, %67}, desc, p, 1, 1, 0;\n}\n"
      : QG_FACC16(d, 0), QG_FACC16(d, 1), QG_FACC16(d, 2), QG_FACC16(d, 3), "+r"(a[kA]), "+r"(a[kA + 1]),
        "+r"(a[kA + 2]), "+r"(a[kA + 3])
      : "r"(b_lo), "r"(1), "n"(kBytes >> 4), "n"(kDescK128High));
#else
  __trap();
#endif
}
// The same with 64 tokens (two units' sums): wgmma.m64n64k16.
template <uint32_t kBytes, int kA>
__device__ __forceinline__ void mma_f16_rs_n64(float (&d)[2][16], uint32_t (&a)[8], uint32_t b_lo) {
#if QG_WGMMA_ENABLED
  static_assert(kA == 0 || kA == 4, "a[kA .. kA + 3] is one K step's fragment");
  asm volatile(
      QG_DESC_PROLOGUE("37", "36", "38", "39")
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
      "}, {%32, %33, %34, %35}, desc, p, 1, 1, 0;\n}\n"
      : QG_FACC16(d, 0), QG_FACC16(d, 1), "+r"(a[kA]), "+r"(a[kA + 1]), "+r"(a[kA + 2]), "+r"(a[kA + 3])
      : "r"(b_lo), "r"(1), "n"(kBytes >> 4), "n"(kDescK128High));
#else
  __trap();
#endif
}

#undef QG_FACC16
#undef QG_DESC_PROLOGUE

// d = A (64 x 16 at descriptor a) * B^T (N x 16 at descriptor b) [+ d where
// scale_d != 0], f16 x f16 or bf16 x bf16 -> f32: wgmma.m64nNk16 with both
// operands in shared memory (SS), each K-major in the 128-byte swizzle as
// desc_k128_swizzled describes (64 values a row, a K step of 16 is 32 bytes
// further on). N / 2 sums a thread, laid out as mma_f16_rs_n32's, one n8
// block j after another: d[4 j + e] is row 16 w + g + 8 (e / 2), column
// 8 j + 2 t + e % 2 of the 64 x N tile. scale_d = 0 starts the sums afresh
// (d's old values are not read). N = 64 or 128.
#define QG_FACC8(d, i)                                                                                          \
  "+f"(d[(i) + 0]), "+f"(d[(i) + 1]), "+f"(d[(i) + 2]), "+f"(d[(i) + 3]), "+f"(d[(i) + 4]), "+f"(d[(i) + 5]), \
      "+f"(d[(i) + 6]), "+f"(d[(i) + 7])
// One asm body per N; T is the operand type's PTX name ("f16" or "bf16").
#define QG_MMA_SS_N64(T)                                                                                         \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"                                                   \
               "wgmma.mma_async.sync.aligned.m64n64k16.f32." T "." T " {"                                       \
               "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"                                                                                         \
               "}, %32, %33, p, 1, 1, 0, 0;\n}\n"                                                               \
               : QG_FACC8(d, 0), QG_FACC8(d, 8), QG_FACC8(d, 16), QG_FACC8(d, 24)                               \
               : "l"(a), "l"(b), "r"(scale_d))
#define QG_MMA_SS_N128(T)                                                                                        \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"                                                   \
               "wgmma.mma_async.sync.aligned.m64n128k16.f32." T "." T " {"                                      \
               "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"                                                                                         \
               "}, %64, %65, p, 1, 1, 0, 0;\n}\n"                                                               \
               : QG_FACC8(d, 0), QG_FACC8(d, 8), QG_FACC8(d, 16), QG_FACC8(d, 24), QG_FACC8(d, 32),             \
                 QG_FACC8(d, 40), QG_FACC8(d, 48), QG_FACC8(d, 56)                                              \
               : "l"(a), "l"(b), "r"(scale_d))
template <int N, bool kBf16>
__device__ __forceinline__ void mma_ss(float (&d)[N / 2], uint64_t a, uint64_t b, int scale_d) {
#if QG_WGMMA_ENABLED
  static_assert(N == 64 || N == 128, "m64n64k16 or m64n128k16");
  if constexpr (N == 64) {
    if constexpr (kBf16) QG_MMA_SS_N64("bf16");
    else QG_MMA_SS_N64("f16");
  } else {
    if constexpr (kBf16) QG_MMA_SS_N128("bf16");
    else QG_MMA_SS_N128("f16");
  }
#else
  __trap();
#endif
}
#undef QG_MMA_SS_N64
#undef QG_MMA_SS_N128
#undef QG_FACC8


// fence_operands for fp32 sums.
template <int kRegs>
__device__ __forceinline__ void fence_operands(float (&d)[kRegs]) {
#pragma unroll
  for (int i = 0; i < kRegs; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

template <int kRows, int kRegs>
__device__ __forceinline__ void fence_operands(float (&d)[kRows][kRegs]) {
#pragma unroll
  for (int r = 0; r < kRows; ++r) fence_operands(d[r]);
}

template <int kRegs>
__device__ __forceinline__ void fence_operands(uint32_t (&d)[kRegs]) {
#pragma unroll
  for (int i = 0; i < kRegs; ++i) asm volatile("" : "+r"(d[i])::"memory");
}

#undef QG_ACC8

}  // namespace qg::detail::cuda::wgmma
