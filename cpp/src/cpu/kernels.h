// SPDX-License-Identifier: MIT
// kernels.h: the CPU backend's kernels, registered in registry.cpp.
#pragma once

#include "backend.h"
#include "cpu/prefetch.h"
#include "cpu/thread_pool.h"
#include "qg/ops.h"

namespace qg::detail::cpu {

// At the end of a driver's task, gives back what its kernel calls kept on
// the thread across calls (AMX: the tile configuration, amx_tiles.h), on
// every way out of the task; fn null: nothing kept.
struct EndOfTask {
  void (*fn)();
  explicit EndOfTask(void (*f)()) : fn(f) {}
  EndOfTask(const EndOfTask&) = delete;
  EndOfTask& operator=(const EndOfTask&) = delete;
  ~EndOfTask() {
    if (fn) fn();
  }
};

Status quantize_rows(const QuantizeArgs& args);
Status dequantize_rows(const DequantizeArgs& args);
// Integer formats with outside scales (quantize_tensor.cpp).
Status quantize_tensor_rows(const QuantizeArgs& args);
Status dequantize_tensor_rows(const DequantizeArgs& args);

// The integer family's readable kernels (gemm_int_reference.cpp): any
// integer pair, and integer weights with group scales x float activations.
Status gemm_int_reference(const GemmArgs& args);
Status gemm_weight_only_reference(const GemmArgs& args);
// AVX2 + FMA + F16C; callable only where cpu_features() has them.
// i8 x i8, exact int32 (the reference's bits), K-contiguous operands.
Status gemm_i8_avx2(const GemmArgs& args);
// The same bits for N <= kI8VnniMaxN (decode) with AVX-512 VNNI (vpdpbusd on a ^ 0x80);
// callable only where cpu_features().avx512_vnni and the AVX2 features.
Status gemm_i8_avx512vnni(const GemmArgs& args);
// The most rows of B it takes (its can_run refuses more).
constexpr int64_t kI8VnniMaxN = 16;
// The same bits from N = kI8AmxMinN with AMX (tdpbssd on 16 x 16 tiles of
// int32 sums that stay in the tiles for all of K); callable only where
// cpu_features().amx_int8 and the AVX-512 VNNI kernels' features. Its tile
// loop is gemm_i8_amx.cpp's (kI8Amx: null where the compiler had no AMX),
// the driver gemm_i8_avx2.cpp's, which packs B so that a step of 64 codes
// of 32 tokens is kI8AmxGroupBytes: two tiles of 16 rows, row q holding
// each token's codes 4q..4q+3.
Status gemm_i8_amx(const GemmArgs& args);
constexpr int64_t kI8AmxMinN = 16;
constexpr int64_t kI8AmxGroupBytes = 2048;
struct I8AmxKernels {
  // 32 rows of A from `a` (row_stride bytes apart, each readable for 64 *
  // steps bytes) against 32 packed rows of B; out: four 16 x 16 tiles of
  // int32 sums, (A rows 0..15, B rows 0..15), (0..15, 16..31), (16..31,
  // 0..15), (16..31, 16..31), each row-major by A row.
  // Call only inside a driver task that ends with end_task (EndOfTask): the
  // thread's tile configuration is kept from one call to the next.
  void (*block_2x2)(const uint8_t* a, int64_t row_stride, const uint8_t* b, int64_t steps, int32_t* out);
  void (*end_task)();  // gives back the tile configuration the task's blocks kept (amx_tiles.h)
};
extern const I8AmxKernels kI8Amx;
// i8 x i8 with an operand not contiguous along K (gemm_i8_repacked.cpp): that
// operand copied to K-contiguous rows, then qg::gemm again (the kernels above).
Status gemm_i8_repacked(const GemmArgs& args, Stream stream);
// i4 weights with group scales x f32/f16/bf16 activations, fp32 sums;
// K and the group size multiples of 32, K-contiguous operands.
Status gemm_wo_avx2(const GemmArgs& args);
// The same with AVX-512 VNNI: integer products of the codes and the
// activations in block fixed point (gemm_wo_avx512vnni.cpp says how exact);
// callable only where cpu_features().avx512_vnni and the AVX2 features.
// Groups of 32, 64 or a multiple of 128, K-contiguous operands.
Status gemm_wo_avx512vnni(const GemmArgs& args);
// The same at N = 1 with AVX2 integer products: the activations (f16 or
// bf16) as int16 in block fixed point, 14 bits (gemm_wo_avx2_fixed.cpp says
// how exact).
// Groups of 32 or a multiple of 64, K-contiguous operands.
Status gemm_wo_avx2_fixed(const GemmArgs& args);
// The same with 20 bits (three base-128 digits through vpmaddubsw), as
// cpu_wo_avx512_vnni carries x: for fp32 activations.
Status gemm_wo_avx2_fixed20(const GemmArgs& args);

// The codes and scale of quant_block.h's quantize_codes_q8 for one block of
// 32 finite floats (fp32 bytes at x, any alignment), with AVX2 (callable only
// where cpu_features().avx2); false, writing nothing, where the block holds
// NaN or +-Inf. The 32 codes go to qs (any alignment).
bool quantize_codes_q8_avx2(const uint8_t* x, uint8_t* qs, float* d, int* code_sum);
// The same block as the bytes of quant_block.h's quantize_block_q8_0 (d,
// codes: 34 bytes) or, with_s, of quantize_block_q8_1 by the reference
// convention (d, s = fp16(sum * d), codes: 36 bytes), written at y (any
// alignment) by the stores that make them: a block built in a local and
// copied out read its bytes back across three stores, which store-to-load
// forwarding cannot serve, and took twice as long.
bool quantize_block_q8_avx2(const uint8_t* x, uint8_t* y, bool with_s);
// The same two with AVX-512 (quantize_q8_avx512.cpp), callable only where
// cpu_features().avx512_vnni; the same bytes.
bool quantize_codes_q8_avx512(const uint8_t* x, uint8_t* qs, float* d, int* code_sum);
bool quantize_block_q8_avx512(const uint8_t* x, uint8_t* y, bool with_s);
// The integer quantizer's loops (quantize_tensor.cpp) with AVX2, callable
// only where cpu_features().avx2, .fma and .f16c: n values of dtype d at x
// (f32, f16 or bf16). The minimum, maximum and largest magnitude of the
// first n rounded down to 8 of them (each at least as low / high as 0; the
// caller adds the rest), false where those hold Inf or NaN; and
// its codes clamp(rint(x * inv) + zp, qmin, qmax), zp where x * inv is NaN,
// one signed byte each (a zero point is stored as its low byte, as the
// scalar code's cast does).
bool measure_scope_avx2(const uint8_t* x, DType d, int64_t n, float* lo, float* hi, float* absmax);
void quantize_codes_avx2(const uint8_t* x, DType d, int64_t n, float inv, int32_t zp, int qmin, int qmax,
                         int8_t* codes);
// n 4-bit codes (-8..7, one a byte) two a byte, low nibble first: as
// two's complement nibbles (i4) or as v + 8 (offset8: i4x8); an odd n's
// last byte gets a 0 code in its high nibble. int_formats.h's pack_pair.
void pack_nibbles_avx2(const int8_t* codes, int64_t n, bool offset8, uint8_t* out);

// The int8 repack's 64 x 64 byte transpose (gemm_i8_repacked.cpp):
// dst[r * dst_stride + kk] = src[kk * src_stride + r] for r, kk < 64. The
// SSE2 one on any x86-64 CPU; the AVX2 one (transpose_avx2.cpp) only where
// cpu_features().avx2.
void transpose_tile64_sse2(const uint8_t* src, int64_t src_stride, uint8_t* dst, int64_t dst_stride);
void transpose_tile64_avx2(const uint8_t* src, int64_t src_stride, uint8_t* dst, int64_t dst_stride);

// Readable reference: one block dot product at a time (quant_block.h).
Status gemm_q4_0_q8_1_scalar(const GemmArgs& args);
// AVX2 + FMA; callable only where cpu_features().avx2 && .fma.
Status gemm_q4_0_q8_1_avx2(const GemmArgs& args);
// AVX-512 F/BW/VL + VNNI (vpdpbusd); callable only where
// cpu_features().avx512_vnni and the AVX2 kernel's features. Same results as
// the AVX2 kernel. Both: gemm_q4_0_q8_1_simd.cpp with their own tiles.
Status gemm_q4_0_q8_1_avx512vnni(const GemmArgs& args);
// The same ISA from N = kQ4PanelMinN (measured: at N = 3 it took 1.12-1.19x
// the tile kernel's time, the per-call pack not repaid; bench/RESULTS.md): W
// rows rearranged per task into 16-row panels, each int32 lane one W row
// (gemm_q4_0_q8_1_simd.h). Its own
// summation order (one convert and FMA per whole block), so not the bits of
// the two above; within the same bound of the float64 reference.
Status gemm_q4_0_q8_1_avx512vnni_panel(const GemmArgs& args);
constexpr int64_t kQ4PanelMinN = 4;
// The panel path with AVX2 (vpmaddubsw): the same panels and A groups, the
// same bits as the AVX-512 VNNI panel kernel, for CPUs without AVX-512. From
// N = 4 as well (measured at N = 3: 0.94-1.04x the tile kernel's time, no
// clear gain).
Status gemm_q4_0_q8_1_avx2_panel(const GemmArgs& args);
constexpr int64_t kQ4PanelAvx2MinN = 4;
// The two AVX2 kernels built with AVX-VNNI (VEX vpdpbusd on ymm) making each
// block's int32 sums: the same integers, so the same bits as cpu_avx2 and
// cpu_avx2_panel; callable only where cpu_features().avx_vnni (which
// features.cpp offers only where q4_avx_vnni_compiled(): the compiler took
// -mavxvnni) and the AVX2 kernels' features.
Status gemm_q4_0_q8_1_avxvnni(const GemmArgs& args);
Status gemm_q4_0_q8_1_avxvnni_panel(const GemmArgs& args);
bool q4_avx_vnni_compiled();
// The panel path with each block's sums made by AMX (tdpbssd on 16 W rows x
// up to 16 A rows) and added in by AVX-512 as cpu_avx512_vnni_panel does: the
// same bits as that kernel. Callable only where cpu_features().amx_int8
// (which features.cpp offers only where amx_kernels_compiled() and the OS lets
// this process use the tiles) and the AVX-512 VNNI kernel's features. From
// N = kQ4AmxMinN.
Status gemm_q4_0_q8_1_amx(const GemmArgs& args);
constexpr int64_t kQ4AmxMinN = 16;
// Whether this build has the AMX kernels (the compiler took -mamx-int8).
bool amx_kernels_compiled();

// q4_0x16 weights (formats.h): the same kernels' passes reading 16-row
// groups as they lie, with no per-call rearrangement, so from N = 1. The
// panel kernels' arithmetic, so their bits: cpu_q4_0x16_scalar (any CPU;
// the reference), _avx2, _avx_vnni and _avx512_vnni (the passes split each group's
// nibbles as they load them), _amx (from kQ4x16AmxMinN, the group's codes
// unpacked into a signed panel first, as cpu_amx packs one).
Status gemm_q4_0x16_scalar(const GemmArgs& args);
Status gemm_q4_0x16_avx2(const GemmArgs& args);
Status gemm_q4_0x16_avx512vnni(const GemmArgs& args);
Status gemm_q4_0x16_avxvnni(const GemmArgs& args);
Status gemm_q4_0x16_amx(const GemmArgs& args);
// From here AMX's unpack and tile pass beat the AVX-512 pass in place (2-core
// Xeon VM, cold: N = 24 5.0-5.2 ms against 4.4-4.6, N = 32 level, N = 48
// 7.4-8.1 against 8.6-8.8; bench/RESULTS.md).
constexpr int64_t kQ4x16AmxMinN = 32;
// qg::repack's copy (checked by it): q4_0 rows <-> q4_0x16 groups, on the pool.
void repack_rows(const RepackArgs& args);

// How the GEMM is cut into pool tasks: tiles of kTileM rows of W by kTileN
// rows of A, so a tile's W rows stay in L2 while its A rows stream past.
constexpr int64_t kTileM = 16;
constexpr int64_t kTileN = 64;

// Below this many multiply-adds (about 30 us on one AVX2 core) a GEMM runs on
// the calling thread: waking the pool costs more than the work it would share.
constexpr int64_t kParallelMinMacs = int64_t{1} << 20;

// Runs body(t) for t in [0, tasks): on the pool, or inline for small work.
template <class Body>
void run_tiles(int64_t tasks, int64_t macs, const Body& body) {
  if (macs < kParallelMinMacs || tasks <= 1) {
    for (int64_t t = 0; t < tasks; ++t) body(t);
    return;
  }
  ThreadPool::instance().parallel_for(tasks, body);
}

}  // namespace qg::detail::cpu
