// SPDX-License-Identifier: MIT
// cuda/gemm_wo_f32.cu: INT4 group-wise weights x fp32 activations
// (cuda_wo_f32_split) on the bf16 weight-only kernels.
//
// Every fast weight-only kernel takes f16 or bf16 activations: its operand
// is a 16-bit float (the mma kernels) or 14-bit block fixed point (the N = 1
// DP4A kernel), and an fp32 x would lose bits in either. So each x goes in
// as two bf16 values:
//   hi = x with the low 16 bits of its fp32 pattern cleared (x truncated to
//        bf16, |x - hi| < 2^-7 |x|: no rounding, so no overflow to Inf next
//        to FLT_MAX), and
//   lo = bf16(x - hi), rounded to nearest even; x - hi is exact in fp32
//        (it is x's low 16 bits),
// so |x - hi - lo| <= 2^-8 |x - hi| < 2^-15 |x|: 16 significant bits of every
// x relative to itself (a block of x shares nothing). Since W x = W hi + W lo,
// one bf16 GEMM of 2N tokens (the N hi rows, then the N lo rows) writes both
// products to an fp32 scratch C2 [2N, M], and a second pass adds each
// token's two and applies the caller's epilogue (scales, beta, bias, relu,
// dtype, layout) through epilogue_store, as every kernel does. A non-finite
// x goes in as hi = bf16(x) (NaN stays NaN), lo = 0, so W hi carries it as
// the bf16 kernels carry a non-finite bf16 x.
//
// The GEMM of 2N tokens goes through the dispatcher, so it runs on whatever
// bf16 kernel is fastest for that N (the decode GEMVs, the tiled and
// warpgroup prefill GEMMs); can_run takes only calls for which that is not
// cuda_wo_generic, which reads fp32 x directly and would do twice its work
// here. (Nothing else asks whether the split beats cuda_wo_generic. At
// 64 x 64 x 64 its 128-token call runs as 8 slices of cuda_wo_gemv: while
// each slice was a launch of its own that took 30.6 us against the generic
// kernel's 21.7 on an H200; as one launch 12.4-12.5 us cold on an H100,
// where the generic kernel was not timed; bench/RESULTS.md.) Against a
// bf16 call this costs the split pass (x read, 2 N K bf16 written), the sum
// pass (2 N M fp32 read) and twice the tokens: 5-7 us more at N = 1..2 on an
// H200 at 4096 x 14336, where reading W bounds the time, and 1.7-2.5x the
// time from N = 16. The dispatcher's walk for the 2N-token call runs twice a
// call, in can_run and in run (host work only). Tokens go in slices whose
// scratch stays under kScratchBytes.
#include <algorithm>
#include <cstdint>
#include <string>

#include "dispatch.h"
#include "gemm_int.cuh"
#include "gemm_int_fast.cuh"
#include "workspace.cuh"

namespace qg::detail::cuda {
namespace {

constexpr int64_t kScratchBytes = int64_t{64} << 20;
constexpr int64_t kMaxSliceTokens = 32768;  // grid.y of both passes
constexpr int kThreads = 256;

// Scratch a token needs: its hi and lo rows of K bf16, its two fp32 rows of M.
int64_t scratch_per_token(const GemmArgs& g) { return 2 * 2 * g.a.k + 2 * 4 * g.a.rows; }

int64_t slice_tokens(const GemmArgs& g) {
  return std::clamp<int64_t>(kScratchBytes / std::max<int64_t>(scratch_per_token(g), 1), 1, kMaxSliceTokens);
}

// The bf16 GEMM of `tokens` split rows at xs into an fp32 C2 [tokens, M] at
// c2, no epilogue: what run() dispatches, and what can_run asks about.
GemmArgs split_gemm_args(const GemmArgs& g, int64_t tokens, const void* xs, void* c2) {
  GemmArgs s = g;
  s.b.data = xs;
  s.b.format = Format::bf16;
  s.b.rows = tokens;
  s.b.row_stride = 2 * g.a.k;
  s.b.block_stride = 0;
  s.c = c2;
  s.c_dtype = DType::f32;
  s.ldc = 1;
  s.ldc_n = g.a.rows;
  s.epilogue = Epilogue{};
  return s;
}

// Token j of n (row j of x, row_stride bytes apart) -> split rows j (hi) and
// n + j (lo) of K bf16 at xs. One token a CTA row of the grid.
__global__ void split_kernel(const uint8_t* x, int64_t row_stride, int64_t n, int64_t k, uint16_t* xs) {
  const int64_t j = blockIdx.y;
  const uint8_t* row = x + j * row_stride;
  uint16_t* hi = xs + j * k;
  uint16_t* lo = xs + (n + j) * k;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < k;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const uint32_t bits = load_u32_any(row + 4 * i);
    if ((bits & 0x7F800000u) == 0x7F800000u) {  // Inf or NaN
      hi[i] = fp32_to_bf16(bits_float(bits));
      lo[i] = 0;
    } else {
      const uint32_t top = bits & 0xFFFF0000u;
      hi[i] = static_cast<uint16_t>(top >> 16);
      lo[i] = fp32_to_bf16(bits_float(bits) - bits_float(top));  // exact difference, then rounded once
    }
  }
}

// C[m, j] = epilogue(C2[j, m] + C2[n + j, m]) for the n tokens of a slice.
__global__ void sum_pairs_kernel(const float* c2, int64_t m, int64_t n, EpilogueParams ep) {
  const int64_t j = blockIdx.y;
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; r < m;
       r += static_cast<int64_t>(gridDim.x) * blockDim.x)
    epilogue_store(ep, r, j, c2[j * m + r] + c2[(n + j) * m + r]);
}

unsigned grid_x(int64_t elements) {
  return static_cast<unsigned>(std::min<int64_t>((elements + kThreads - 1) / kThreads, 1024));
}

}  // namespace

bool gemm_wo_f32_can_run(const GemmArgs& args, std::string* why_not) {
  auto no = [&](std::string why) {
    if (why_not) *why_not = std::move(why);
    return false;
  };
  if (args.a.format != Format::i4 || args.b.format != Format::f32) return no("i4 weights x f32 activations only");
  if (!contiguous_along_k(args.b)) return no("the activations are not K-contiguous");
  if (args.a.k == 0) return no("K = 0: no products to split (cuda_wo_generic writes the empty sums' epilogue)");
  // The call it would make, on scratch laid out as run() lays it out from
  // the pool's 256-byte alignment (can_run reads no memory): a bf16 kernel
  // faster than cuda_wo_generic must take it.
  const int64_t n = std::min(args.b.rows, slice_tokens(args));
  auto* probe = reinterpret_cast<uint8_t*>(uintptr_t{1} << 20);
  const GemmArgs split = split_gemm_args(args, 2 * n, probe, probe + n * 4 * args.a.k);
  const GemmKernel* k = nullptr;
  if (!choose_kernel(args.fn, registry().gemm, split, &k, nullptr).ok() || std::string(k->name) == "cuda_wo_generic")
    return no("no bf16 weight-only kernel but cuda_wo_generic takes its 2N-token GEMM (which would be slower)");
  return true;
}

Status gemm_wo_f32_run(const GemmArgs& args, Stream stream) {
  if (args.a.rows <= 0 || args.b.rows <= 0) return Status::success();
  const cudaStream_t cs = to_cuda(stream);
  const int64_t m = args.a.rows, k = args.a.k, step = slice_tokens(args);
  for (int64_t n0 = 0; n0 < args.b.rows; n0 += step) {
    const GemmArgs part = gemm_columns(args, n0, std::min(step, args.b.rows - n0));
    const int64_t n = part.b.rows;
    // Freed in stream order once both passes and the GEMM are queued.
    Workspace ws(args.device.id, static_cast<size_t>(n * scratch_per_token(args)), cs);
    if (!ws.ok()) {  // no scratch memory: the kernel that needs none
      if (Status s = gemm_wo_generic_run(part, stream); !s.ok()) return s;
      continue;
    }
    auto* xs = reinterpret_cast<uint16_t*>(ws.bytes());
    auto* c2 = reinterpret_cast<float*>(ws.bytes() + n * 4 * k);
    if (k > 0)
      split_kernel<<<dim3(grid_x(k), static_cast<unsigned>(n)), kThreads, 0, cs>>>(
          static_cast<const uint8_t*>(part.b.data), part.b.row_stride, n, k, xs);
    if (Status s = intfast::launch_result(part); !s.ok()) return s;
    const GemmArgs split = split_gemm_args(part, 2 * n, xs, c2);
    const GemmKernel* kern = nullptr;
    if (Status s = choose_kernel(args.fn, registry().gemm, split, &kern, nullptr); !s.ok()) return s;
    if (Status s = kern->run(split, stream); !s.ok()) return s;
    sum_pairs_kernel<<<dim3(grid_x(m), static_cast<unsigned>(n)), kThreads, 0, cs>>>(c2, m, n, epilogue_params(part));
    if (Status s = intfast::launch_result(part); !s.ok()) return s;
  }
  return Status::success();
}

}  // namespace qg::detail::cuda
