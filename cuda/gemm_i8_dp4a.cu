// SPDX-License-Identifier: MIT
// cuda/gemm_i8_dp4a.cu: i8 x i8 on CUDA cores (sm_61+), any M, N, K % 4 == 0.
//
// For GPUs without int8 tensor cores (Pascal, Volta, Turing: mma.m16n8k32 is
// sm_80+). C[m, n] = sum_k A[m, k] * B[n, k], both operands int8 rows along
// K, exactly as cuda_i8_mma computes it: DP4A multiplies the 4 signed bytes
// of one 32-bit word of A by those of one word of B and adds the 4 products
// to an int32, so a word of each row is the unit everywhere. The int32 sums
// are exact (validation bounds K); every output goes through
// epilogue_store_int.
//
// Tiles: a CTA of 256 threads owns a BM x BN tile of C and walks K 32 bytes
// (8 words) a stage. Each thread keeps a TM x TN register tile (8 x 8 for
// N > 64), so a word loaded from shared memory feeds TN (or TM) DP4As: 64
// DP4As per 4 LDS.128 a word step. DP4A is the whole arithmetic, so the issue
// slots and shared-memory bandwidth should go to DP4As, not to loads; 8 x 8
// is the largest tile whose main loop stays within 128 registers (two CTAs
// an SM on a 64K-register SM). Narrow N takes narrower tiles of 64 rows
// (launch()), so that fewer DP4As go to zero columns and a decode-like shape
// still spreads over M / 64 CTAs. A stage is 8 words so that the next
// stage's words held in registers stay at 8 a thread (4 of A, 4 of B).
//
// Shared memory holds each stage transposed, [word][row] as int32: the TM
// rows (TN columns) a thread multiplies are then 4 consecutive ints, one
// LDS.128 (LDS.64, LDS.32 for the narrow tiles). The 16 threads along N of a
// warp read 16 consecutive vectors of one word row (no bank conflicts), the
// 2 threads along M read the same vector (broadcast). The pitch is rows + 4
// ints, an odd number of 16-byte units, so that the stores below fall in 32
// different banks (StageLoad).
//
// Global -> shared: cp.async is sm_80+, so the next stage is loaded into
// registers before this stage's DP4As and stored to the other shared buffer
// after them: the loads' latency hides behind the arithmetic, one barrier a
// stage. The loads are 4-byte words (rows are only known to be 4-byte
// aligned), each thread taking consecutive words of one row of A and one of
// B, so it keeps one offset an operand rather than one a row.
//
// Tails: words past K, and rows past M or N, are stored as zeros, so the
// inner loop has no branches and a zero code adds nothing to a product or a
// code sum; outputs past M or N are not stored.
//
// Zero points: epilogue_store_int needs the code sums of row m of A and row
// n of B. With kZP each loading thread adds up the words it stores (one DP4A
// with 0x01010101 a word, into one register an operand, since its words are
// of one row), then the threads that share a row add theirs with shuffles.
// A separate instantiation: nothing at all when no zero point is given. It
// holds more values in the epilogue (every row's and column's code sum), which
// takes the 8 x 8 tile to about 140 registers.
#include <algorithm>

#include "gemm_int_fast.cuh"

namespace qg::detail::cuda {
namespace {

using namespace intfast;

constexpr int kThreads = 256;
constexpr int kStageWords = 8;  // K words (4 codes each) a stage: 32 bytes of a row
constexpr int64_t kMaxGrid = 0x7FFFFFFF;

template <int BM_, int BN_, int TM_, int TN_>
struct Tile {
  static constexpr int BM = BM_, BN = BN_, TM = TM_, TN = TN_;
  static constexpr int TY = BM / TM, TX = BN / TN;  // threads along M and N
  // A thread's TM rows are GM groups of TMV consecutive rows, BM / GM apart
  // (likewise its columns): one vector load each.
  static constexpr int TMV = TM < 4 ? TM : 4, TNV = TN < 4 ? TN : 4;
  static constexpr int GM = TM / TMV, GN = TN / TNV;
  static constexpr int PA = BM + 4, PB = BN + 4;  // shared pitches (ints)
  static_assert(TY * TX == kThreads, "the thread grid covers the tile");
  static_assert(TX == 16, "a warp is 2 thread rows x 16 thread columns (the bank analysis above)");
  static_assert(TM % TMV == 0 && TN % TNV == 0 && (TMV == 1 || TMV == 2 || TMV == 4) &&
                    (TNV == 1 || TNV == 2 || TNV == 4),
                "vector loads of 1, 2 or 4 ints");
  static_assert(BM % 8 == 0 && BN % 8 == 0, "pitches of an odd number of 16-byte units");
};

//                  BM   BN TM TN
using TileN16 = Tile<64, 16, 4, 1>;     // N <= 16
using TileN32 = Tile<64, 32, 4, 2>;     // N <= 32
using TileN64 = Tile<128, 64, 8, 4>;    // N <= 64
using TileLarge = Tile<128, 128, 8, 8>;

// Which words of a stage a thread loads, for an operand of R staged rows:
// kWords consecutive words of one row (4 when R = 128), kPerRow threads a
// row, the first kLoaders threads. A warp's store of its threads' j-th words
// covers 32 / kPerRow consecutive rows and kPerRow words kWords apart; with a
// pitch of P = 4 * odd ints, word w starts at bank 4 * odd * w mod 32, and
// those kPerRow starts are 32 / kPerRow banks apart: 32 different banks.
template <int R>
struct StageLoad {
  static constexpr int kWords = R * kStageWords >= kThreads ? R * kStageWords / kThreads : 1;
  static constexpr int kPerRow = kStageWords / kWords;
  static constexpr int kLoaders = R * kPerRow;
  static_assert(kWords * kPerRow == kStageWords && kLoaders <= kThreads &&
                    (kLoaders == kThreads || kWords == 1),
                "a stage's words split evenly between the loading threads");
};

struct Operands {
  const int8_t* a;
  const int8_t* b;
  int64_t m, n, k, lda, ldb;
};

// V consecutive ints from shared memory, one access (p is V-int aligned).
template <int V>
__device__ __forceinline__ void load_shared(const int* p, int* out) {
  if constexpr (V == 4) {
    const int4 v = *reinterpret_cast<const int4*>(p);
    out[0] = v.x, out[1] = v.y, out[2] = v.z, out[3] = v.w;
  } else if constexpr (V == 2) {
    const int2 v = *reinterpret_cast<const int2*>(p);
    out[0] = v.x, out[1] = v.y;
  } else {
    out[0] = *p;
  }
}

template <class T, bool kZP>
__global__ void __launch_bounds__(kThreads)
gemm_i8_dp4a_kernel(Operands op, EpilogueParams ep) {
  __shared__ __align__(16) int s_a[2][kStageWords][T::PA];
  __shared__ __align__(16) int s_b[2][kStageWords][T::PB];
  __shared__ int s_sum[kZP ? T::BM + T::BN : 1];  // code sums of the tile's rows of A, then of B

  using LoadA = StageLoad<T::BM>;
  using LoadB = StageLoad<T::BN>;
  const int tid = static_cast<int>(threadIdx.x);
  const int tx = tid % T::TX, ty = tid / T::TX;
  // Loading: words w0 .. w0 + kWords - 1 of staged row `row`, fixed per thread.
  const int a_row = tid / LoadA::kPerRow, a_w0 = (tid % LoadA::kPerRow) * LoadA::kWords;
  const int b_row = tid / LoadB::kPerRow, b_w0 = (tid % LoadB::kPerRow) * LoadB::kWords;
  const bool a_loads = LoadA::kLoaders == kThreads || tid < LoadA::kLoaders;
  const bool b_loads = LoadB::kLoaders == kThreads || tid < LoadB::kLoaders;
  const int* a_words = reinterpret_cast<const int*>(op.a);
  const int* b_words = reinterpret_cast<const int*>(op.b);

  // Validation bounds K far below 2^31 (int32 sums stay exact), so K's
  // counters are 32-bit.
  const int kwords = static_cast<int>(op.k / 4);
  const int stages = (kwords + kStageWords - 1) / kStageWords;
  const int64_t tiles_m = (op.m + T::BM - 1) / T::BM, tiles_n = (op.n + T::BN - 1) / T::BN;
  const int64_t tiles = tiles_m * tiles_n;

  for (int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    int64_t tm, tn;
    tile_coords(tile, tiles_m, tiles_n, &tm, &tn);
    const int64_t m0 = tm * T::BM, n0 = tn * T::BN;

    int acc[T::TM][T::TN];
#pragma unroll
    for (int i = 0; i < T::TM; ++i)
#pragma unroll
      for (int j = 0; j < T::TN; ++j) acc[i][j] = 0;
    // kZP: code sums of the words this thread loads (one row of A, one of B).
    int a_sum = 0, b_sum = 0;

    // The next stage's words, held between their loads and their stores.
    int ra[LoadA::kWords], rb[LoadB::kWords];
    // Whether this thread's rows lie inside M / N; the word offsets of its
    // first words of the next stage (rows > 1: can_run made the strides
    // multiples of 4; one row: row 0's offset is 0 whatever the stride), and
    // the words of K left from that stage's first word. Pointers are formed
    // only for words inside the operands.
    const bool a_ok = a_loads && m0 + a_row < op.m, b_ok = b_loads && n0 + b_row < op.n;
    int64_t a_off = a_ok ? (m0 + a_row) * (op.lda / 4) + a_w0 : 0;
    int64_t b_off = b_ok ? (n0 + b_row) * (op.ldb / 4) + b_w0 : 0;
    int k_left = kwords;

    auto fetch = [&]() {
#pragma unroll
      for (int j = 0; j < LoadA::kWords; ++j) ra[j] = a_ok && a_w0 + j < k_left ? __ldg(a_words + (a_off + j)) : 0;
#pragma unroll
      for (int j = 0; j < LoadB::kWords; ++j) rb[j] = b_ok && b_w0 + j < k_left ? __ldg(b_words + (b_off + j)) : 0;
      a_off += kStageWords;
      b_off += kStageWords;
      k_left -= kStageWords;
    };
    // Rows past M or N and words past K store zeros.
    auto stash = [&](int buf) {
      if (a_loads) {
#pragma unroll
        for (int j = 0; j < LoadA::kWords; ++j) s_a[buf][a_w0 + j][a_row] = ra[j];
      }
      if (b_loads) {
#pragma unroll
        for (int j = 0; j < LoadB::kWords; ++j) s_b[buf][b_w0 + j][b_row] = rb[j];
      }
      if constexpr (kZP) {
#pragma unroll
        for (int j = 0; j < LoadA::kWords; ++j) a_sum = dp4a(ra[j], 0x01010101, a_sum);
#pragma unroll
        for (int j = 0; j < LoadB::kWords; ++j) b_sum = dp4a(rb[j], 0x01010101, b_sum);
      }
    };
    auto compute = [&](int buf) {
#pragma unroll
      for (int q = 0; q < kStageWords; ++q) {
        // All of B's words, then A's a vector at a time: TN + 4 live words.
        int b[T::TN];
#pragma unroll
        for (int g = 0; g < T::GN; ++g)
          load_shared<T::TNV>(&s_b[buf][q][g * (T::BN / T::GN) + tx * T::TNV], &b[g * T::TNV]);
#pragma unroll
        for (int g = 0; g < T::GM; ++g) {
          int a[T::TMV];
          load_shared<T::TMV>(&s_a[buf][q][g * (T::BM / T::GM) + ty * T::TMV], a);
#pragma unroll
          for (int e = 0; e < T::TMV; ++e)
#pragma unroll
            for (int j = 0; j < T::TN; ++j) acc[g * T::TMV + e][j] = dp4a(a[e], b[j], acc[g * T::TMV + e][j]);
        }
      }
    };

    if (stages > 0) {
      fetch();
      stash(0);
    }
    __syncthreads();
    for (int s = 0; s < stages; ++s) {
      const int buf = s & 1;
      const bool more = s + 1 < stages;
      if (more) fetch();
      compute(buf);
      // The other buffer was last read in the previous stage, before the
      // barrier that ended it.
      if (more) stash(buf ^ 1);
      __syncthreads();
    }

    if constexpr (kZP) {
      // The kPerRow threads of a row are consecutive lanes of one warp.
#pragma unroll
      for (int o = 1; o < LoadA::kPerRow; o *= 2) a_sum += __shfl_xor_sync(0xFFFFFFFFu, a_sum, o);
#pragma unroll
      for (int o = 1; o < LoadB::kPerRow; o *= 2) b_sum += __shfl_xor_sync(0xFFFFFFFFu, b_sum, o);
      if (a_loads && a_w0 == 0) s_sum[a_row] = a_sum;
      if (b_loads && b_w0 == 0) s_sum[T::BM + b_row] = b_sum;
      __syncthreads();
    }

#pragma unroll
    for (int i = 0; i < T::TM; ++i) {
      const int r = (i / T::TMV) * (T::BM / T::GM) + ty * T::TMV + i % T::TMV;
      if (m0 + r >= op.m) continue;
      int sa = 0;
      if constexpr (kZP) sa = s_sum[r];
#pragma unroll
      for (int j = 0; j < T::TN; ++j) {
        const int c = (j / T::TNV) * (T::BN / T::GN) + tx * T::TNV + j % T::TNV;
        if (n0 + c >= op.n) continue;
        int sb = 0;
        if constexpr (kZP) sb = s_sum[T::BM + c];
        epilogue_store_int(ep, m0 + r, n0 + c, acc[i][j], sa, sb);
      }
    }
    __syncthreads();  // the next tile's first stage and code sums overwrite shared memory
  }
}

template <class T, bool kZP>
Status launch_tile(const GemmArgs& g, const Operands& op, cudaStream_t stream) {
  const int64_t tiles = ((op.m + T::BM - 1) / T::BM) * ((op.n + T::BN - 1) / T::BN);
  const unsigned grid = static_cast<unsigned>(std::min<int64_t>(tiles, kMaxGrid));
  gemm_i8_dp4a_kernel<T, kZP><<<grid, kThreads, 0, stream>>>(op, epilogue_params(g));
  return launch_result(g);
}

// The narrowest tile that covers N: past it, columns of the tile would be
// DP4As on zero rows. Tiles are picked by N only: M is the weights' rows,
// the large side in a linear layer.
template <bool kZP>
Status launch(const GemmArgs& g, const Operands& op, cudaStream_t stream) {
  if (op.n > 64) return launch_tile<TileLarge, kZP>(g, op, stream);
  if (op.n > 32) return launch_tile<TileN64, kZP>(g, op, stream);
  if (op.n > 16) return launch_tile<TileN32, kZP>(g, op, stream);
  return launch_tile<TileN16, kZP>(g, op, stream);
}

}  // namespace

bool gemm_i8_dp4a_can_run(const GemmArgs& args, std::string* why_not) {
  if (args.a.k % 4 != 0) {
    if (why_not)
      *why_not = "K=" + std::to_string(args.a.k) +
                 " is not a multiple of 4 (DP4A reads 4 codes a word; cuda_int_generic takes any K)";
    return false;
  }
  constexpr const char* kHow =
      "DP4A reads rows as 4-byte words: start them at, and pad the stride to, a multiple of 4 bytes";
  return int8_rows_ok(args.a, "a", 4, kHow, why_not) && int8_rows_ok(args.b, "b", 4, kHow, why_not);
}

Status gemm_i8_dp4a_run(const GemmArgs& args, Stream stream) {
  if (args.a.rows <= 0 || args.b.rows <= 0) return Status::success();
  const Operands op{static_cast<const int8_t*>(args.a.data), static_cast<const int8_t*>(args.b.data),
                    args.a.rows, args.b.rows, args.a.k, args.a.row_stride, args.b.row_stride};
  const bool zp = args.epilogue.row_zero_point || args.epilogue.col_zero_point;
  return zp ? launch<true>(args, op, to_cuda(stream)) : launch<false>(args, op, to_cuda(stream));
}

}  // namespace qg::detail::cuda
