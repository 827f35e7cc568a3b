// SPDX-License-Identifier: MIT
// cuda/gemm_i8_repacked.cu: cuda_i8_repacked, an int8 x int8 GEMM whose
// operand is not contiguous along K (seed 001's B stored [K, N], a
// transposed view). The tensor-core kernels read rows along K; the generic
// kernel, which takes any strides, loads one byte per MAC. So this entry
// copies each such operand once into K-contiguous rows of a stream-ordered
// workspace and hands the call back to qg::gemm, which validates it again and
// dispatches it to cuda_i8_wgmma / cuda_i8_mma / cuda_i8_dp4a: the same
// kernels, the same bits, as the [N, K] layout. It takes only calls those
// kernels can then run (K % 4 == 0, no group scales or zero points on the
// operands): for the others cuda_int_generic reads the operand in place,
// where a warp's lanes meet adjacent bytes of a [K, N] B. The CPU backend
// does the same (cpu/gemm_i8_repacked.cpp).
#include <string>

#include "gemm_int.cuh"
#include "workspace.cuh"

namespace qg::detail::cuda {

namespace {

// Destination rows start 16 bytes apart at least: the 16-byte copies of the
// tensor-core kernels need that alignment (int8_rows_ok).
constexpr int64_t kRowAlign = 16;
constexpr int kThreads = 256;

// ---------------------------------------------------------------- any strides
// A CTA turns a 64 x 64 byte tile one byte a thread at a time. Where rows
// are adjacent bytes a warp's 32 loads are one 32-byte sector and its 32
// stores one sector of a destination row; but with one byte in flight per
// load the copy is latency-bound (about 340 GB/s each way on an H200), so
// lines aligned to 4 bytes or more take the kernel below.
constexpr int kByteTile = 64;
// Rows of the shared tile are 68 bytes apart (17 words, odd), so the 32
// lanes storing one K-step of 32 consecutive rows hit 32 different banks.
constexpr int kBytePitch = kByteTile + 4;

// dst row r (ld bytes apart, K-contiguous) = element (r, kk) of src, which is
// at src + r * rs + kk * ks; dst bytes from k to ld are left as they are
// (the int8 kernels read a row's first k bytes only; the 16-byte kernel
// below writes zeros there, a by-product of its whole-piece stores).
__global__ void __launch_bounds__(kThreads) pack_rows_bytes(const uint8_t* __restrict__ src, int64_t rows, int64_t k,
                                                            int64_t rs, int64_t ks, uint8_t* __restrict__ dst,
                                                            int64_t ld) {
  __shared__ uint8_t tile[kByteTile][kBytePitch];  // [row - r0][kk - k0]
  const int64_t r0 = static_cast<int64_t>(blockIdx.x) * kByteTile, k0 = static_cast<int64_t>(blockIdx.y) * kByteTile;
#pragma unroll 4
  for (int e = threadIdx.x; e < kByteTile * kByteTile; e += kThreads) {
    const int kk = e / kByteTile, r = e % kByteTile;  // lanes along rows: adjacent source bytes
    if (r0 + r < rows && k0 + kk < k) tile[r][kk] = __ldg(src + (r0 + r) * rs + (k0 + kk) * ks);
  }
  __syncthreads();
#pragma unroll 4
  for (int e = threadIdx.x; e < kByteTile * kByteTile; e += kThreads) {
    const int r = e / kByteTile, kk = e % kByteTile;  // lanes along K: adjacent destination bytes
    if (r0 + r < rows && k0 + kk < k) dst[(r0 + r) * ld + k0 + kk] = tile[r][kk];
  }
}

// ------------------------------------------------ [K, rows] in aligned lines
// Rows adjacent bytes (rs = 1), each K-step's line 16-byte aligned (ks and
// the base multiples of 16): a CTA turns 64 K-steps x 256 rows (16 KB).
// It loads four 16-byte pieces a thread, all four in flight at once (the
// byte kernel had one byte in flight a load), into a shared tile as they
// are; then each thread reads a column of 16 K-steps x 4 rows as 16 words,
// transposes its 4 x 4 byte blocks with PRMTs and stores 16 K-contiguous
// bytes for each of its 4 rows: four lanes write one row's 64 bytes.
// Lines only 4-byte aligned (ks % 4 == 0: e.g. [K, N] with N % 16 != 0 but
// N % 4 == 0) take the same kernel with each 16-byte piece loaded as four
// words, sixteen loads in flight a thread; the tile and the stores are the
// same (the destination rows are padded to 16 bytes whatever the source).
constexpr int kLineK = 64, kLineRows = 256;
// 256-byte rows, unpadded: the XOR below spreads the column reads over the
// banks, and the 16-byte stores stay aligned.
constexpr int kLinePitch = kLineRows;

// Word w of tile row kk sits at word w ^ swizzle(kk): the lanes reading one
// K-step's words for 8 row-words and 4 K-blocks of 16 (kb = kk / 16) would
// otherwise meet in the same 8 banks (rows 16 apart are 16 x 64 words apart,
// a multiple of 32).
// XOR-ing bits 3-4 of the word index moves whole 32-byte groups, so a
// 16-byte piece stays contiguous and aligned.
__device__ __forceinline__ int swizzled_word(int kk, int w) { return w ^ (((kk >> 4) & 3) << 3); }

template <int kLoadBytes>  // 16 or 4: the alignment of the source lines
__global__ void __launch_bounds__(kThreads) pack_rows_lines(const uint8_t* __restrict__ src, int64_t rows, int64_t k,
                                                            int64_t ks, uint8_t* __restrict__ dst, int64_t ld) {
  static_assert(kLoadBytes == 16 || kLoadBytes == 4, "16-byte pieces or words");
  __shared__ alignas(16) uint32_t tile[kLineK][kLinePitch / 4];  // [kk - k0][row - r0], 4 rows a word
  const int64_t r0 = static_cast<int64_t>(blockIdx.x) * kLineRows, k0 = static_cast<int64_t>(blockIdx.y) * kLineK;
  const int t = threadIdx.x;
  // Loads: thread t takes piece t % 16 (rows 16p..16p+15) of K-steps t / 16 + 16 i.
  uint4 v[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int kk = t / 16 + 16 * i, p = t % 16;
    const int64_t r = r0 + 16 * p;
    const uint8_t* line = src + (k0 + kk) * ks + r;
    v[i] = make_uint4(0, 0, 0, 0);
    if (k0 + kk < k) {
      if (r + 16 <= rows) {
        if constexpr (kLoadBytes == 16) {
          v[i] = __ldg(reinterpret_cast<const uint4*>(line));
        } else {
          const auto* w = reinterpret_cast<const uint32_t*>(line);
          v[i] = make_uint4(__ldg(w), __ldg(w + 1), __ldg(w + 2), __ldg(w + 3));
        }
      } else {  // the rows' last piece: its bytes one by one, zeros past the end
        alignas(16) uint8_t b[16] = {};
        for (int j = 0; j < 16 && r + j < rows; ++j) b[j] = __ldg(line + j);
        v[i] = *reinterpret_cast<const uint4*>(b);
      }
    }
  }
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int kk = t / 16 + 16 * i;
    *reinterpret_cast<uint4*>(&tile[kk][swizzled_word(kk, 4 * (t % 16))]) = v[i];
  }
  __syncthreads();
  // Stores: lane l of warp w takes row-word 8w + l % 8 (rows 4 of them) and
  // K-block l / 8 (16 K-steps): a warp writes 8 rows x 64 bytes a store.
  const int lane = t % 32, rw = 8 * (t / 32) + lane % 8, kb = lane / 8;
  uint32_t col[16];
#pragma unroll
  for (int i = 0; i < 16; ++i) col[i] = tile[16 * kb + i][swizzled_word(16 * kb + i, rw)];
  // col[i] byte b = element (K-step 16 kb + i, row 4 rw + b). A 4 x 4 byte
  // transpose per group of four K-steps: out[q][b] holds K-steps 16 kb + 4q
  // .. + 3 of row 4 rw + b (PRMT selectors: interleave bytes 0-1 / 2-3 of
  // two words, then take halves).
  uint32_t out[4][4];
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    const uint32_t* c = col + 4 * q;
    const uint32_t lo01 = __byte_perm(c[0], c[1], 0x5140), lo23 = __byte_perm(c[2], c[3], 0x5140);
    const uint32_t hi01 = __byte_perm(c[0], c[1], 0x7362), hi23 = __byte_perm(c[2], c[3], 0x7362);
    out[q][0] = __byte_perm(lo01, lo23, 0x5410);
    out[q][1] = __byte_perm(lo01, lo23, 0x7632);
    out[q][2] = __byte_perm(hi01, hi23, 0x5410);
    out[q][3] = __byte_perm(hi01, hi23, 0x7632);
  }
  const int64_t kdst = k0 + 16 * kb;
  if (kdst >= ld) return;  // past the padded row (the last K tile)
#pragma unroll
  for (int b = 0; b < 4; ++b) {
    const int64_t r = r0 + 4 * rw + b;
    if (r < rows)
      *reinterpret_cast<uint4*>(dst + r * ld + kdst) = make_uint4(out[0][b], out[1][b], out[2][b], out[3][b]);
  }
}

// op's rows into K-contiguous rows ld bytes apart at dst, on cs.
void pack_rows(const Operand& op, int64_t ld, uint8_t* dst, cudaStream_t cs) {
  const auto* src = static_cast<const uint8_t*>(op.data);
  const int64_t rows = op.rows, k = op.k, rs = op.row_stride, ks = op.block_stride;
  const dim3 line_grid(static_cast<unsigned>((rows + kLineRows - 1) / kLineRows),
                       static_cast<unsigned>((k + kLineK - 1) / kLineK));
  if (rs == 1 && ks % 16 == 0 && is_aligned(src, 16)) {
    pack_rows_lines<16><<<line_grid, kThreads, 0, cs>>>(src, rows, k, ks, dst, ld);
  } else if (rs == 1 && ks % 4 == 0 && is_aligned(src, 4)) {
    pack_rows_lines<4><<<line_grid, kThreads, 0, cs>>>(src, rows, k, ks, dst, ld);
  } else {
    const dim3 grid(static_cast<unsigned>((rows + kByteTile - 1) / kByteTile),
                    static_cast<unsigned>((k + kByteTile - 1) / kByteTile));
    pack_rows_bytes<<<grid, kThreads, 0, cs>>>(src, rows, k, rs, ks, dst, ld);
  }
}

}  // namespace

bool gemm_i8_repacked_can_run(const GemmArgs& args, std::string* why_not) {
  if (!operand_strided_along_k(args, why_not)) return false;
  for (const Operand* o : {&args.a, &args.b})
    if (o->scales.data || o->zero_points.data) {
      if (why_not) *why_not = "an operand has group-wise scales or zero points (the int8 kernels take none)";
      return false;
    }
  if (args.a.k % 4 != 0) {
    if (why_not) *why_not = "K=" + std::to_string(args.a.k) + " is not a multiple of 4 (no int8 kernel would take the copy)";
    return false;
  }
  return true;
}

Status gemm_i8_repacked_run(const GemmArgs& args, Stream stream) {
  if (args.a.rows <= 0 || args.b.rows <= 0) return Status::success();
  const cudaStream_t cs = to_cuda(stream);
  const int64_t k = args.a.k, ld = (k + kRowAlign - 1) / kRowAlign * kRowAlign;
  GemmArgs g = args;
  Operand* ops[2] = {&g.a, &g.b};
  int64_t offset[2] = {0, 0}, bytes = 0;
  for (int i = 0; i < 2; ++i)
    if (!contiguous_along_k(*ops[i])) {
      offset[i] = bytes;
      bytes += ops[i]->rows * ld;
    }
  // Freed in stream order after the inner call has queued its kernels.
  Workspace ws(args.device.id, static_cast<size_t>(bytes > 0 ? bytes : 1), cs);
  if (!ws.ok()) return gemm_int_generic_run(args, stream);  // no scratch memory: the kernel that needs none
  for (int i = 0; i < 2; ++i) {
    Operand& op = *ops[i];
    if (contiguous_along_k(op)) continue;
    uint8_t* rows = ws.bytes() + offset[i];
    if (k > 0) {
      pack_rows(op, ld, rows, cs);
      if (Status s = launch_status(args.fn, [&] { return "repacking an operand of " + std::to_string(op.rows) +
                                                         " rows x K=" + std::to_string(k); });
          !s.ok())
        return s;
    }
    op.data = rows;
    op.row_stride = ld;
    op.block_stride = 0;
  }
  return ::qg::gemm(g, stream);
}

}  // namespace qg::detail::cuda
