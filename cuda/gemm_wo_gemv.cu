// SPDX-License-Identifier: MIT
// cuda/gemm_wo_gemv.cu: weight-only GEMM for decode (sm_80+; N > 16 in slices of 16 along the grid's y):
// i4 weights with group scales (and zero points) x f16 / bf16 activations.
//
//   C[m, n] = sum_g s[m, g] * sum_{k in g} (q[m, k] - z[m, g]) * x[n, k]
//
// Memory-bound: every weight byte is read once and used N times, so what
// matters is how W streams in, and that the arithmetic per byte stays small.
//
// Tensor cores, exactly. The codes are small integers, so (code) is exact in
// fp16 and bf16, and so is every activation: one mma.m16n8k16 (f16 or bf16
// in, fp32 accumulate) over 16 rows of W and 8 rows of x gives the integer-
// weighted sums exactly up to fp32 accumulation; the group scale is applied
// afterwards in fp32, once per 32 values of K (one "segment"):
//   out += s * D            (D: the segment's mma result)
// Zero points: D - z * S, where S = sum_{k in segment} x[n, k] comes from one
// more mma against an all-ones A fragment, once per segment and shared by
// every W row (so any int32 zero point is right, not only small ones).
//
// Segments and the K permutation. A mma k16 step must not mix groups (their
// scales differ), so each step takes its 16 values of K from one 32-value
// segment, which lies inside one group (group_size a power of two >= 32). Lane
// (g, t) of a quad reads word t of the segment's 16 bytes of rows g and g + 8:
// nibbles k = 8t .. 8t + 7. Any permutation of K applied to both operands
// leaves the sum unchanged, so the fragments take the nibble pairs that are
// cheapest to unpack: ((w >> 4i) & 0x000F000F) holds nibbles i and i + 4 in
// its two halves (one shift and one LOP3, with the fp16 exponent 0x6400 or the
// bf16 one 0x4300 and the two's complement flip 0x0008 folded into one XOR
// constant, then one HSUB2 leaves the code). Step 0 uses nibble pairs (0, 4)
// and (1, 5), step 1 (2, 6) and (3, 7); the activations match with two PRMTs
// per pair of 16-byte words of x.
//
// W streams through shared memory: each warp owns a ring of kStages macro
// steps (128 values of K for kRowTiles x 16 rows: 1 KB per row tile), filled
// with 16-byte cp.async and read back with 32-bit loads in the permuted order
// above (a row pitch of 80 bytes makes those conflict-free). A warp syncs
// only with itself; a CTA's warps take interleaved macro steps of the CTA's
// K range and add their partial sums in shared memory in warp order. Where
// the CTAs (row blocks) are too few to fill the GPU, an sm_90 cluster splits K
// between CTAs, which add their partial tiles through distributed shared
// memory in rank order. Results are deterministic.
//
// Rows past M are read as row M - 1 and never stored; columns past N as
// column N - 1 (the same, for N = 1 the loads of a quad coincide).
//
// N > 16: CTA row y of the grid takes columns 16 y .. 16 y + 15 (its slice
// of x's rows and C's columns), each slice re-reading W. One launch for all
// slices: launched one by one, each small slice paid a launch and the host
// its own walk (at 64 x 64, 128 tokens took 8 launches).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>

#include <cooperative_groups.h>

#include "gemm_int_fast.cuh"
#include "wo_mma.cuh"
#include "wo_params.cuh"

namespace cg = cooperative_groups;

namespace qg::detail::cuda {
namespace {

using namespace intfast;
using namespace wo;

constexpr int kWarps = 8;
constexpr int kThreads = 32 * kWarps;
constexpr int kRowTiles = 2;                  // 16-row mma tiles per CTA (and per warp)
constexpr int kCtaRows = 16 * kRowTiles;
constexpr int kStages = 4;                    // macro steps in flight per warp
constexpr int kMacroK = 128;                  // values of K per macro step: 4 segments
constexpr int kMacroBytes = kMacroK / 2;      // 64 bytes of a W row
constexpr int kPitch = kMacroBytes + 16;      // 80: conflict-free 32-bit reads (banks 20 r + 4 j + t)
constexpr int kSlotBytes = kRowTiles * 16 * kPitch;
constexpr int kWarpRingBytes = kStages * kSlotBytes;
constexpr int kMaxCols = 16;                  // columns (activation rows) a CTA
constexpr int64_t kMaxSlices = 65535;         // slices of kMaxCols a launch: grid.y's limit
constexpr int kPartialFloats = kWarps * kCtaRows * kMaxCols;
constexpr int kSmemBytes = kWarps * kWarpRingBytes > (kPartialFloats + kCtaRows * kMaxCols) * 4
                               ? kWarps * kWarpRingBytes
                               : (kPartialFloats + kCtaRows * kMaxCols) * 4;

// What one 32-value segment of K reads from global memory besides W: the
// activations k = kseg + 8t .. + 7 of column g of each n8 tile, and the
// scales (zero points) of this lane's rows. A macro step loads all four
// segments' before it uses any, so a warp waits on one round trip per macro
// step, not four.
template <int kNT, bool kZP>
struct SegmentIn {
  uint4 x[kNT];
  uint32_t s[kRowTiles][2];  // as loaded: converted at the use (wo_params.cuh says why)
  int z[kRowTiles][2];
};

template <int kNT, bool kZP>
__device__ __forceinline__ void load_segment(SegmentIn<kNT, kZP>& in, const Params& p,
                                             const uint8_t* const (&xptr)[kNT],
                                             const uint8_t* const (&srow)[kRowTiles][2],
                                             const uint8_t* const (&zrow)[kRowTiles][2], int64_t kseg) {
#pragma unroll
  for (int nt = 0; nt < kNT; ++nt) in.x[nt] = __ldg(reinterpret_cast<const uint4*>(xptr[nt] + 2 * kseg));
  const int64_t sg = kseg >> p.s_shift;
#pragma unroll
  for (int r = 0; r < kRowTiles; ++r)
#pragma unroll
    for (int h = 0; h < 2; ++h) in.s[r][h] = load_scale_bits(p, srow[r][h], sg);
  if constexpr (kZP) {
    const int64_t zg = kseg >> p.z_shift;
#pragma unroll
    for (int r = 0; r < kRowTiles; ++r)
#pragma unroll
      for (int h = 0; h < 2; ++h) in.z[r][h] = load_zero_int(p, zrow[r][h], zg);
  }
}

// One 32-value segment of K (j of the macro step in `slot`) for every row
// tile: kNT x (2 + kZP ? 2 : 0) mmas per row tile, fp32 rescale.
template <int kNT, bool kBf16, bool kZP>
__device__ __forceinline__ void segment(float (&out)[kRowTiles][kNT][4], const SegmentIn<kNT, kZP>& in,
                                        const Params& p, const uint8_t* slot, int j, int g, int t, uint32_t bits) {
  // The activations paired as the W nibbles are: (x0, x4), (x1, x5) for
  // step 0, (x2, x6), (x3, x7) for step 1.
  uint32_t b[kNT][4];
#pragma unroll
  for (int nt = 0; nt < kNT; ++nt) {
    const uint4 v = in.x[nt];
    b[nt][0] = __byte_perm(v.x, v.z, 0x5410);
    b[nt][1] = __byte_perm(v.x, v.z, 0x7632);
    b[nt][2] = __byte_perm(v.y, v.w, 0x5410);
    b[nt][3] = __byte_perm(v.y, v.w, 0x7632);
  }
  float sx[kNT][4];  // zero points: S = sum of x over the segment, columns 2t, 2t + 1
  if constexpr (kZP) {
    const uint32_t one = kBf16 ? 0x3F803F80u : 0x3C003C00u;
    const uint32_t ones[4] = {one, one, one, one};
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt) {
      sx[nt][0] = sx[nt][1] = sx[nt][2] = sx[nt][3] = 0.0f;
      mma_16816<kBf16>(sx[nt], ones, b[nt][0], b[nt][1]);
      mma_16816<kBf16>(sx[nt], ones, b[nt][2], b[nt][3]);
    }
  }
#pragma unroll
  for (int r = 0; r < kRowTiles; ++r) {
    const uint32_t w0 = *reinterpret_cast<const uint32_t*>(slot + (r * 16 + g) * kPitch + 16 * j + 4 * t);
    const uint32_t w1 = *reinterpret_cast<const uint32_t*>(slot + (r * 16 + g + 8) * kPitch + 16 * j + 4 * t);
    const uint32_t a0[4] = {code_pair<kBf16, 0>(w0, bits), code_pair<kBf16, 0>(w1, bits),
                            code_pair<kBf16, 1>(w0, bits), code_pair<kBf16, 1>(w1, bits)};
    const uint32_t a1[4] = {code_pair<kBf16, 2>(w0, bits), code_pair<kBf16, 2>(w1, bits),
                            code_pair<kBf16, 3>(w0, bits), code_pair<kBf16, 3>(w1, bits)};
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt) {
      float d[4] = {0.0f, 0.0f, 0.0f, 0.0f};
      mma_16816<kBf16>(d, a0, b[nt][0], b[nt][1]);
      mma_16816<kBf16>(d, a1, b[nt][2], b[nt][3]);
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        float v = d[e];
        if constexpr (kZP) v = fmaf(-static_cast<float>(in.z[r][e >> 1]), sx[nt][e], v);
        out[r][nt][e] = fmaf(scale_from_bits(p, in.s[r][e >> 1]), v, out[r][nt][e]);
      }
    }
  }
}

template <int kNT, bool kBf16, bool kZP>
__global__ void __launch_bounds__(kThreads)
gemm_wo_gemv_kernel(Params p, EpilogueParams ep) {
  extern __shared__ __align__(128) uint8_t smem[];
  constexpr int kCols = 8 * kNT;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;
  uint8_t* ring = smem + warp * kWarpRingBytes;
  const uint32_t ring_addr = smem_u32(ring);
  const uint32_t bits = p.code_bits;

  const int64_t row_blocks = (p.m + kCtaRows - 1) / kCtaRows;
  const int64_t macro_steps = (p.k + kMacroK - 1) / kMacroK;
  const int splits = p.splits, rank = static_cast<int>(blockIdx.x % splits);
  const int64_t step_lo = macro_steps * rank / splits, step_hi = macro_steps * (rank + 1) / splits;
  // This warp's macro steps: step_lo + warp + i * kWarps, i < my_steps.
  const int64_t span = step_hi - step_lo;
  const int64_t my_steps = span > warp ? (span - warp + kWarps - 1) / kWarps : 0;

  // Activations k = 8t .. 8t + 7 of each segment, column c0 + g of each n8
  // tile of this CTA row's slice.
  const int64_t c0 = static_cast<int64_t>(kMaxCols) * blockIdx.y;
  const uint8_t* xptr[kNT];
#pragma unroll
  for (int nt = 0; nt < kNT; ++nt) xptr[nt] = p.x + min64(c0 + nt * 8 + g, p.n - 1) * p.ldx + 16 * t;

  for (int64_t rb = blockIdx.x / splits; rb < row_blocks; rb += gridDim.x / splits) {
    const int64_t row0 = rb * kCtaRows;
    // Rows g and g + 8 of each row tile: this lane's fragment rows, and the
    // rows it copies (chunk t of each).
    const uint8_t* wsrc[kRowTiles][2];
    const uint8_t* srow[kRowTiles][2];
    const uint8_t* zrow[kRowTiles][2];
#pragma unroll
    for (int r = 0; r < kRowTiles; ++r)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int64_t row = min64(row0 + r * 16 + g + 8 * h, p.m - 1);
        wsrc[r][h] = p.w + row * p.ldw + 16 * t;
        srow[r][h] = p.scales + row * p.s_stride;
        zrow[r][h] = kZP ? p.zeros + row * p.z_stride : p.zeros;
      }

    float out[kRowTiles][kNT][4];
#pragma unroll
    for (int r = 0; r < kRowTiles; ++r)
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) out[r][nt][e] = 0.0f;

    // Copies macro step i of this warp into its ring slot; segments past K
    // are not copied (and not read).
    auto copy = [&](int64_t i) {
      const int64_t ms = step_lo + warp + i * kWarps;
      const uint32_t slot = ring_addr + static_cast<uint32_t>(i % kStages) * kSlotBytes;
      if (ms * kMacroK + 32 * t < p.k) {
#pragma unroll
        for (int r = 0; r < kRowTiles; ++r)
#pragma unroll
          for (int h = 0; h < 2; ++h)
            cp_async<16>(slot + (r * 16 + g + 8 * h) * kPitch + 16 * t, wsrc[r][h] + ms * kMacroBytes, 16);
      }
    };

#pragma unroll
    for (int s = 0; s < kStages - 1; ++s) {
      if (s < my_steps) copy(s);
      cp_async_commit();
    }
    for (int64_t i = 0; i < my_steps; ++i) {
      cp_async_wait<kStages - 2>();
      __syncwarp();  // step i has landed for every lane; slot (i - 1) % kStages is free
      if (i + kStages - 1 < my_steps) copy(i + kStages - 1);
      cp_async_commit();
      const int64_t ms = step_lo + warp + i * kWarps;
      const uint8_t* slot = ring + (i % kStages) * kSlotBytes;
      // Segments past K (the last macro step when K % 128 != 0) load and add
      // nothing (uniform branches).
      SegmentIn<kNT, kZP> in[kMacroK / 32];
#pragma unroll
      for (int j = 0; j < kMacroK / 32; ++j)
        if (ms * kMacroK + 32 * j < p.k) load_segment<kNT, kZP>(in[j], p, xptr, srow, zrow, ms * kMacroK + 32 * j);
#pragma unroll
      for (int j = 0; j < kMacroK / 32; ++j)
        if (ms * kMacroK + 32 * j < p.k) segment<kNT, kBf16, kZP>(out, in[j], p, slot, j, g, t, bits);
    }
    cp_async_wait<0>();
    __syncthreads();  // every warp is done with its ring: it becomes the partial sums

    float* partial = reinterpret_cast<float*>(smem);  // [warp][row][column]
    float* own = partial + kPartialFloats;            // [row][column], the CTA's sums
#pragma unroll
    for (int r = 0; r < kRowTiles; ++r)
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e)
          partial[(warp * kCtaRows + r * 16 + g + 8 * (e >> 1)) * kMaxCols + nt * 8 + 2 * t + (e & 1)] =
              out[r][nt][e];
    __syncthreads();
    for (int o = static_cast<int>(threadIdx.x); o < kCtaRows * kCols; o += kThreads) {
      const int r = o / kCols, c = o % kCols;
      float v = partial[r * kMaxCols + c];
#pragma unroll
      for (int w = 1; w < kWarps; ++w) v += partial[(w * kCtaRows + r) * kMaxCols + c];
      if (splits == 1) {
        if (row0 + r < p.m && c0 + c < p.n) epilogue_store(ep, row0 + r, c0 + c, v);
      } else {
        own[o] = v;
      }
    }
    if (splits > 1) {
#if __CUDA_ARCH__ >= 900
      cg::cluster_group cluster = cg::this_cluster();
      cluster.sync();  // every CTA's sums are in its shared memory
      for (int o = rank * kThreads + static_cast<int>(threadIdx.x); o < kCtaRows * kCols; o += splits * kThreads) {
        const int r = o / kCols, c = o % kCols;
        if (row0 + r >= p.m || c0 + c >= p.n) continue;
        float v = 0.0f;
        for (int q = 0; q < splits; ++q) v += cluster.map_shared_rank(own, q)[o];
        epilogue_store(ep, row0 + r, c0 + c, v);
      }
      cluster.sync();  // no CTA reuses (or leaves) its shared memory while others read it
#else
      __trap();  // the host launches clusters only where the sm_90 image runs
#endif
    }
    __syncthreads();  // the next row block's copies overwrite the partial sums
  }
}

template <int kNT, bool kBf16, bool kZP>
KernelFit fit_of(int device) {
  static std::once_flag once[kMaxDevices];
  static KernelFit cache[kMaxDevices];
  return cached_fit(gemm_wo_gemv_kernel<kNT, kBf16, kZP>, kThreads, kSmemBytes, device, once, cache);
}

template <int kNT, bool kBf16, bool kZP>
Status launch(const GemmArgs& g, Params p, cudaStream_t stream) {
  const KernelFit fit = fit_of<kNT, kBf16, kZP>(g.device.id);
  if (fit.blocks_per_sm == 0)
    return Status(StatusCode::cuda_error, std::string(g.fn) + " (cuda_wo_gemv): the kernel cannot be launched on cuda:" +
                                              std::to_string(g.device.id) + " (" + shape_text(g) + ")");
  const int64_t row_blocks = (p.m + kCtaRows - 1) / kCtaRows;
  const int64_t macro_steps = (p.k + kMacroK - 1) / kMacroK;
  const int64_t slices = (p.n + kMaxCols - 1) / kMaxCols;  // gemm_wo_gemv_run keeps them to kMaxSlices
  // Each warp of a split CTA keeps at least two macro steps.
  p.splits = pick_splits(fit, device_limits(g.device.id), row_blocks * slices, macro_steps, 2 * kWarps);
  const int64_t grid = std::min<int64_t>(row_blocks, 0x7FFFFFFF / kMaxSplits) * p.splits;
  launch_clustered_2d(gemm_wo_gemv_kernel<kNT, kBf16, kZP>, grid, static_cast<unsigned>(slices), kThreads,
                      kSmemBytes, p.splits, stream, p, epilogue_params(g));
  return launch_result(g);
}

template <bool kBf16, bool kZP>
Status launch_cols(const GemmArgs& g, const Params& p, cudaStream_t stream) {
  return p.n <= 8 ? launch<1, kBf16, kZP>(g, p, stream) : launch<2, kBf16, kZP>(g, p, stream);
}

// A group size the kernel takes: a power of two, at least one 32-value segment.
bool group_ok(int64_t gs) { return gs >= 32 && (gs & (gs - 1)) == 0; }

}  // namespace

bool gemm_wo_gemv_can_run(const GemmArgs& args, std::string* why_not) {
  auto no = [&](std::string why) {
    if (why_not) *why_not = std::move(why);
    return false;
  };
  const Operand& a = args.a;
  const Operand& b = args.b;
  if (a.format != Format::i4 || (b.format != Format::f16 && b.format != Format::bf16))
    return no("i4 weights x f16 / bf16 activations only");
  if (a.k % 32 != 0) return no("K=" + std::to_string(a.k) + " is not a multiple of 32 (16-byte weight segments)");
  if (a.block_stride != 0 && a.block_stride != 1) return no("the weights are not K-contiguous");
  if (b.block_stride != 0 && b.block_stride != 2) return no("the activations are not K-contiguous");
  if (!is_aligned(a.data, 16) || (a.rows > 1 && a.row_stride % 16 != 0))
    return no("weight rows are not 16-byte aligned (ptr % 16 = " +
              std::to_string(reinterpret_cast<uintptr_t>(a.data) % 16) + ", row stride = " +
              std::to_string(a.row_stride) + ")");
  if (!is_aligned(b.data, 16) || (b.rows > 1 && b.row_stride % 16 != 0))
    return no("activation rows are not 16-byte aligned (ptr % 16 = " +
              std::to_string(reinterpret_cast<uintptr_t>(b.data) % 16) + ", row stride = " +
              std::to_string(b.row_stride) + ")");
  const OutsideScales& s = a.scales;
  if (s.granularity != Granularity::group || !group_ok(s.group_size))
    return no("weight scales must be group-wise with a power-of-two group size >= 32 (got " +
              std::to_string(s.group_size) + ")");
  if (s.dtype != DType::f32 && s.dtype != DType::f16 && s.dtype != DType::bf16) return no("scale dtype");
  if (!is_aligned(s.data, static_cast<uintptr_t>(dtype_size_of(s.dtype))))
    return no("weight scales are not aligned to their element size");
  const OutsideScales& z = a.zero_points;
  if (z.data) {
    if (z.granularity != Granularity::group || !group_ok(z.group_size))
      return no("weight zero points must be group-wise with a power-of-two group size >= 32 (got " +
                std::to_string(z.group_size) + ")");
    if (z.dtype != DType::i8 && z.dtype != DType::i32) return no("zero point dtype");
    if (!is_aligned(z.data, static_cast<uintptr_t>(dtype_size_of(z.dtype))))
      return no("weight zero points are not aligned to their element size");
  }
  return true;
}

namespace {

// One launch for all of args' activation rows (at most kMaxSlices slices).
Status run_columns(const GemmArgs& args, cudaStream_t st) {
  const Params p = wo::gemv_params(args);
  const bool bf16 = args.b.format == Format::bf16, zp = p.zeros != nullptr;
  if (bf16) return zp ? launch_cols<true, true>(args, p, st) : launch_cols<true, false>(args, p, st);
  return zp ? launch_cols<false, true>(args, p, st) : launch_cols<false, false>(args, p, st);
}

}  // namespace

// N > 16 runs as GEMVs over slices of 16 activation rows, each re-reading W
// (N / 16 passes over the weights: the tiled kernels take large N where
// they can, K % 128 == 0), still far faster than the byte-load kernel. The
// slices are the grid's rows, up to kMaxSlices a launch (grid.y's limit);
// past that, launches of that many slices, each the same GEMM on rows n0..
// of b and the columns n0.. of C (and of a per-column scale).
Status gemm_wo_gemv_run(const GemmArgs& args, Stream stream) {
  if (args.a.rows <= 0 || args.b.rows <= 0) return Status::success();
  const cudaStream_t st = to_cuda(stream);
  constexpr int64_t kLaunchCols = kMaxCols * kMaxSlices;
  if (args.b.rows <= kLaunchCols) return run_columns(args, st);
  for (int64_t n0 = 0; n0 < args.b.rows; n0 += kLaunchCols)
    if (Status s = run_columns(gemm_columns(args, n0, std::min<int64_t>(kLaunchCols, args.b.rows - n0)), st);
        !s.ok())
      return s;
  return Status::success();
}

}  // namespace qg::detail::cuda
