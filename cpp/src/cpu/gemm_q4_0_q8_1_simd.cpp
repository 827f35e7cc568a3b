// SPDX-License-Identifier: MIT
// gemm_q4_0_q8_1_simd.cpp: the driver shared by the x86 SIMD GEMM kernels
// (gemm_q4_0_q8_1_simd.h), compiled with -mavx2 -mfma -mf16c: every kernel
// it drives needs at least that (their arch windows, registry.cpp).
//
// Per call: the A side data (prepare_a_rows) once for every A block, then
// pool tasks of W rows x A rows, each task walking its rows in the kernel's
// tile (tile_rows W rows x up to four A rows), or, for N = 1, in 64-row tasks
// of step_rows rows each; the panel kernels (gemm_panel below) instead pack
// 16 W rows at a time and interleave the A rows in groups. The kernels scale
// each int32 lane of a block's dot
// product by d = fp32(d_w) * fp32(d_a) and accumulate in fp32, one FMA per
// block and lane. That equals d * (the block's integer sum) except when d is
// not finite: Inf * a lane that is 0 gives NaN where the block's whole sum,
// and so the documented result, is +-Inf. A non-finite d always leaves a
// non-finite accumulator (nothing finite cancels Inf or NaN), and finite
// scales cannot overflow a sum (|d| < 2^32, |block sum| <= 2^15), so an output
// that comes out non-finite, and only such an output, is computed again block
// by block (exact_element), off the fast path (the panel kernels' lanes hold
// whole block sums; for them this makes such outputs the scalar kernel's).
// Each output is made by one task in a fixed order: the result does not
// depend on the thread count.
#include "cpu/gemm_q4_0_q8_1_simd.h"

#include "cpu/kernels.h"

#include <string>

namespace qg::detail::cpu {
namespace {
Status not_compiled(const char* what) {
  return Status(StatusCode::unsupported, std::string("qg.gemm_q4_0_q8_1: the ") + what + " kernel was not compiled in");
}
}  // namespace
}  // namespace qg::detail::cpu

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>

#include <cstring>
#include <vector>

#include "cpu/call_scratch.h"
#include "cpu/epilogue_rows.h"
#include "cpu/float_elem.h"
#include "cpu/q4_0x16_rows.h"
#include "cpu/row_ranges.h"
#include "cpu/thread_pool.h"
#include "epilogue.h"
#include "quant_block.h"

namespace qg::detail::cpu {

namespace {

using namespace q4q8;

// Tasks: kRowsPerTask rows of W by kColsPerTask rows of A. The task's W rows
// (16 x 8 KiB at K = 14336) stay in L2 while its A rows pass by in groups of
// four (64 KiB, also L2), each group reused by all the task's row tiles.
constexpr int64_t kRowsPerTask = 16;
constexpr int64_t kColsPerTask = 64;

// The N = 1 path's row ranges: decode_row_ranges (row_ranges.h).

// -8 * the sums of four consecutive codes of a Q8_1 block ab, in the tiles'
// lane layout: [0..3 + 16..19, 4..7 + 20..23, 8..11 + 24..27, 12..15 + 28..31].
__m128i block_corr_lanes(const uint8_t* ab) {
  const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ab + 4));
  // Sums of four consecutive codes: [0..3, .., 12..15 | 16..19, .., 28..31].
  const __m256i quads = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(1), q), _mm256_set1_epi16(1));
  const __m128i s = _mm_add_epi32(_mm256_castsi256_si128(quads), _mm256_extracti128_si256(quads, 1));
  return _mm_sub_epi32(_mm_setzero_si128(), _mm_slli_epi32(s, 3));
}

// corr and d_a (gemm_q4_0_q8_1_simd.h) for A rows n0..n1-1.
void prepare_a_rows(const uint8_t* A, int64_t row_stride, int64_t nb, int64_t n0, int64_t n1, int32_t* corr,
                    float* d) {
  for (int64_t n = n0; n < n1; ++n) {
    const uint8_t* ab = A + n * row_stride;
    int32_t* cn = corr + n * nb * 4;
    float* dn = d + n * nb;
    for (int64_t b = 0; b < nb; ++b, ab += kQ8Bytes) {
      _mm_storeu_si128(reinterpret_cast<__m128i*>(cn + b * 4), block_corr_lanes(ab));
      dn[b] = _cvtsh_ss(load_u16(ab));
    }
  }
}

// The panel path's A group (gemm_q4_0_q8_1_simd.h): rows a0 .. a0 + cols - 1
// of A, interleaved block by block.
void prepare_a_group(const uint8_t* a0, int64_t row_stride, int64_t nb, int cols, uint8_t* group) {
  for (int64_t b = 0; b < nb; ++b, group += panel_group_block_bytes(cols))
    for (int j = 0; j < cols; ++j) {
      const uint8_t* ab = a0 + j * row_stride + b * kQ8Bytes;
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(group + 32 * j),
                          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ab + 4)));
      __m128i c = block_corr_lanes(ab);
      c = _mm_add_epi32(c, _mm_shuffle_epi32(c, 0x4E));
      c = _mm_add_epi32(c, _mm_shuffle_epi32(c, 0xB1));
      const int32_t total = _mm_cvtsi128_si32(c);
      const float d = _cvtsh_ss(load_u16(ab));
      std::memcpy(group + 32 * cols + 4 * j, &total, 4);
      std::memcpy(group + 36 * cols + 4 * j, &d, 4);
    }
}

// Output (r, j) of the tile, from scratch, as the scalar kernel computes it:
// sum_b d * (exact integer sum). Only for outputs that came out non-finite.
// get(b, &block): W's block b of the row (q4_0 rows, or a q4_0x16 group's row).
template <class RowBlock>
float exact_sum(const RowBlock& get, const uint8_t* a, int64_t nb) {
  float acc = 0.0f;
  for (int64_t b = 0; b < nb; ++b) {
    block_q4_0 wb;
    block_q8_1 ab;
    get(b, &wb);
    std::memcpy(&ab, a + b * kQ8Bytes, sizeof ab);
    acc += fp16_to_fp32(wb.d) * fp16_to_fp32(ab.d) * static_cast<float>(dot_block_q4_0_q8_1(&wb, &ab));
  }
  return acc;
}
float exact_element(const uint8_t* w, const uint8_t* a, int64_t nb) {
  return exact_sum([&](int64_t b, block_q4_0* wb) { std::memcpy(wb, w + b * kQ4Bytes, sizeof *wb); }, a, nb);
}
float exact_element_x16(const uint8_t* grp, int r, const uint8_t* a, int64_t nb) {
  return exact_sum([&](int64_t b, block_q4_0* wb) { x16_get_row(grp + b * kX16BlockBytes, r, wb); }, a, nb);
}

// The per-call A side data (20 bytes per A block). Up to kKeptPrepBytes it is
// kept per calling thread and only grown, so a steady stream of calls
// (decode) allocates nothing; a larger one lives for its call only, so a
// single prefill does not pin tens of MiB for the life of the thread.
constexpr size_t kKeptPrepBytes = size_t{4} << 20;
ScratchBytes& kept_prep_buffer() {
  thread_local ScratchBytes buf;
  return buf;
}

Status gemm_tiled(const GemmArgs& g, const TileKernels& k) {
  const int64_t m_rows = g.a.rows, n_rows = g.b.rows, nb = g.a.k / 32;
  if (m_rows == 0 || n_rows == 0) return {};
  const EpilogueParams ep = epilogue_params(g);
  const auto* W = static_cast<const uint8_t*>(g.a.data);
  const auto* A = static_cast<const uint8_t*>(g.b.data);

  const size_t corr_bytes = static_cast<size_t>(n_rows * nb) * 16;
  const size_t need = corr_bytes + static_cast<size_t>(n_rows * nb) * 4 + 16;
  ScratchBytes own;
  ScratchBytes& buf = need <= kKeptPrepBytes ? kept_prep_buffer() : own;
  if (buf.size() < need) buf.resize(need);
  auto* corr = reinterpret_cast<int32_t*>(buf.data());
  auto* da = reinterpret_cast<float*>(buf.data() + corr_bytes);
  {
    const int64_t per = 8;
    run_tiles((n_rows + per - 1) / per, n_rows * g.a.k, [&](int64_t t) {
      const int64_t n0 = t * per, n1 = n0 + per < n_rows ? n0 + per : n_rows;
      prepare_a_rows(A, g.b.row_stride, nb, n0, n1, corr, da);
    });
  }

  if (n_rows == 1) {
    const int64_t step = k.step_rows;
    const RowRanges ranges = decode_row_ranges(m_rows, ThreadPool::instance().threads());
    run_tiles(ranges.tasks, m_rows * g.a.k, [&](int64_t t) {
      const int64_t m0 = ranges.begin(t), m1 = ranges.end(t, m_rows);
      for (int64_t m = m0; m < m1; m += step) {
        const int rows = static_cast<int>(m1 - m < step ? m1 - m : step);
        const uint8_t* w[4];
        for (int r = 0; r < step; ++r) w[r] = W + (m + (r < rows ? r : rows - 1)) * g.a.row_stride;
        // The task's next group, or (last group) none: the prefetches past
        // the task's end then go back over lines already read.
        const int64_t next = m + step < m1 ? step * g.a.row_stride : 0;
        float out[4];
        k.one_col(w, next, A, corr, da, nb, out);
        for (int r = 0; r < rows; ++r) {
          float v = out[r];
          if (!is_finite(v)) v = exact_element(w[r], A, nb);
          epilogue_store(ep, m + r, 0, v);
        }
      }
    });
    return {};
  }

  const int64_t step = k.tile_rows;
  const int64_t tiles_m = (m_rows + kRowsPerTask - 1) / kRowsPerTask;
  const int64_t tiles_n = (n_rows + kColsPerTask - 1) / kColsPerTask;
  run_tiles(tiles_m * tiles_n, m_rows * n_rows * g.a.k, [&](int64_t t) {
    const int64_t m0 = (t / tiles_n) * kRowsPerTask, n0 = (t % tiles_n) * kColsPerTask;
    const int64_t m1 = m0 + kRowsPerTask < m_rows ? m0 + kRowsPerTask : m_rows;
    const int64_t n1 = n0 + kColsPerTask < n_rows ? n0 + kColsPerTask : n_rows;
    for (int64_t n = n0; n < n1; n += 4) {
      const int cols = static_cast<int>(n1 - n < 4 ? n1 - n : 4);
      const uint8_t* a[4];
      const int32_t* c[4];
      const float* d[4];
      for (int j = 0; j < 4; ++j) {
        const int64_t col = n + (j < cols ? j : 0);
        a[j] = A + col * g.b.row_stride;
        c[j] = corr + col * nb * 4;
        d[j] = da + col * nb;
      }
      const TileFn tile = k.tiles[n == n0][cols];
      float out[4][4];
      for (int64_t m = m0; m < m1; m += step) {
        const int rows = static_cast<int>(m1 - m < step ? m1 - m : step);
        const uint8_t* w[4];
        for (int r = 0; r < step; ++r) w[r] = W + (m + (r < rows ? r : rows - 1)) * g.a.row_stride;
        tile(w, a, c, d, nb, m + step < m1 ? step * g.a.row_stride : 0, out);
        for (int r = 0; r < rows; ++r)
          for (int j = 0; j < cols; ++j) {
            float v = out[r][j];
            if (!is_finite(v)) v = exact_element(w[r], a[j], nb);
            epilogue_store(ep, m + r, n + j, v);
          }
      }
    }
  });
  return {};
}

// The panel path: W as 16-row panels, packed per task from q4_0 rows, or
// q4_0x16 groups (rows_per_block 16: M a multiple of 16) passed over where
// they lie or unpacked (PanelKernels::x16_cols, pack_x16). The A rows in
// groups of at most kPanelCols (as even as
// possible: N = 17 is 9 + 8, not 16 + 1, since a pass over a panel costs its
// loads whatever its width), and pool tasks of kPanelsPerTask consecutive
// kPanelRows-row panels of W by kPanelChunkGroups groups. A task packs each
// panel (the one read of those W rows from memory; the pack prefetches the
// task's next panel as it ends), then passes over it from L2 once per group.
// Tasks run chunk by chunk, so the threads share one chunk of A (64 rows:
// 1.15 MB with their sums and scales at K = 14336) in L3 while W streams past.
constexpr int64_t kPanelChunkGroups = 4;  // unless the kernels size it (PanelKernels::chunk_a_bytes)
constexpr int64_t kPanelMaxChunkGroups = 16;

// The groups of a chunk: kPanelChunkGroups, or as many full groups as fit
// the kernels' chunk_a_bytes at this K (at least two, at most
// kPanelMaxChunkGroups).
int64_t panel_chunk_groups(const PanelKernels& p, int64_t nb) {
  if (p.chunk_a_bytes <= 0 || nb <= 0) return kPanelChunkGroups;  // K = 0: no A bytes to fit
  const int64_t fit = p.chunk_a_bytes / (nb * panel_group_block_bytes(kPanelCols));
  return fit < 2 ? 2 : (fit > kPanelMaxChunkGroups ? kPanelMaxChunkGroups : fit);
}
constexpr int64_t kPanelsPerTask = 4;

Status gemm_panel(const GemmArgs& g, const PanelKernels& p) {
  const int64_t m_rows = g.a.rows, n_rows = g.b.rows, nb = g.a.k / 32;
  if (m_rows == 0 || n_rows == 0) return {};
  const EpilogueParams ep = epilogue_params(g);
  const auto* W = static_cast<const uint8_t*>(g.a.data);
  const auto* A = static_cast<const uint8_t*>(g.b.data);
  const bool x16 = g.a.format == Format::q4_0x16;
  const bool in_place = x16 && p.x16_cols[1] != nullptr;
  const bool decode_groups = in_place && n_rows == 1 && p.x16_decode[1] != nullptr;

  const int64_t groups = (n_rows + kPanelCols - 1) / kPanelCols;
  const int64_t base = n_rows / groups, extra = n_rows % groups;  // the first `extra` groups take one more
  const auto group_start = [&](int64_t grp) { return grp * base + (grp < extra ? grp : extra); };
  // Group grp's bytes start at nb * 40 * group_start(grp): each takes its rows' share.
  const auto group_data = [&](uint8_t* all, int64_t grp) { return all + nb * panel_group_block_bytes(group_start(grp)); };
  ScratchBytes own;
  uint8_t* agroups = call_scratch(static_cast<size_t>(nb * panel_group_block_bytes(n_rows)), own);
  run_tiles(groups, n_rows * g.a.k, [&](int64_t grp) {
    const int64_t n0 = group_start(grp);
    prepare_a_group(A + n0 * g.b.row_stride, g.b.row_stride, nb, static_cast<int>(group_start(grp + 1) - n0),
                    group_data(agroups, grp));
  });

  const int64_t panels = (m_rows + kPanelRows - 1) / kPanelRows;
  // q4_0x16 read in place with all A rows in one chunk (decode and small
  // N): W streams from memory once, each task's groups as one run, so the
  // decode paths' longer row ranges (row_ranges.h), in whole groups.
  const int64_t chunk_groups = panel_chunk_groups(p, nb);
  const int64_t panels_per_task =
      in_place && groups <= chunk_groups
          ? decode_row_ranges(m_rows, ThreadPool::instance().threads()).rows_per_task / kPanelRows
          : kPanelsPerTask;
  const int64_t panel_tasks = (panels + panels_per_task - 1) / panels_per_task;
  const int64_t chunks = (groups + chunk_groups - 1) / chunk_groups;
  run_tiles(panel_tasks * chunks, m_rows * n_rows * g.a.k, [&](int64_t t) {
    const int64_t p0 = (t % panel_tasks) * panels_per_task, g0 = (t / panel_tasks) * chunk_groups;
    const int64_t p1 = p0 + panels_per_task < panels ? p0 + panels_per_task : panels;
    const int64_t g1 = g0 + chunk_groups < groups ? g0 + chunk_groups : groups;
    const EndOfTask end_of_task{p.end_task};
    // The panel's own scratch (not call_scratch: this thread may be the
    // caller, whose call_scratch holds A): kept per thread up to
    // kKeptScratchBytes (K up to about 233k), the task's own beyond.
    thread_local ScratchBytes kept_panel;
    ScratchBytes own_panel;
    const size_t panel_bytes = in_place ? 64 : static_cast<size_t>(nb * kPanelBlockBytes) + 63;
    ScratchBytes& panel_buf = panel_bytes <= kKeptScratchBytes ? kept_panel : own_panel;
    if (panel_buf.size() < panel_bytes) panel_buf.resize(panel_bytes);
    uint8_t* panel = panel_buf.data() + ((64 - (reinterpret_cast<uintptr_t>(panel_buf.data()) & 63)) & 63);
    // Panel pi's outputs for A group grp (out[j][r]: A row j, W row r)
    // through the epilogue; w: its rows (q4_0), unused for q4_0x16.
    const auto finish = [&](int64_t pi, const uint8_t* const* w, const RowTerms& terms, int64_t grp,
                            float (*out)[kPanelRows]) {
      const int64_t m0 = pi * kPanelRows, n = group_start(grp);
      const int rows = static_cast<int>(m_rows - m0 < kPanelRows ? m_rows - m0 : kPanelRows);
      const int cols = static_cast<int>(group_start(grp + 1) - n);
      // An output that came out non-finite, from scratch (see the top).
      const auto exact = [&](int r, int64_t col) {
        const uint8_t* a = A + col * g.b.row_stride;
        return x16 ? exact_element_x16(W + pi * g.a.row_stride, r, a, nb) : exact_element(w[r], a, nb);
      };
      if (ep.plain) {
        for (int j = 0; j < cols; ++j) {
          // One test of the 16 lanes (vectorised; the lanes past `rows`
          // hold sums of repeated rows, finite or not, and only send the
          // column down the slow path), the rare recompute after it.
          bool finite = true;
          for (int r = 0; r < kPanelRows; ++r) finite &= is_finite(out[j][r]);
          if (!finite)
            for (int r = 0; r < rows; ++r)
              if (!is_finite(out[j][r])) out[j][r] = exact(r, n + j);
        }
        // Runs of adjacent outputs copied at once, not one epilogue_store
        // an output (each re-reads C's strides: the stores may alias
        // them). A profile of cpu_amx at N = 64, hot: the column loop took
        // 7 % of the call's samples before with x @ W^T's [N, M], 4 %
        // after; with [M, N] the scalar stores took 6 % (the AMX pass 48).
        if (ep.ldc == 1) {
          // The panel's rows are adjacent in C (x @ W^T's [N, M]): a column's run.
          for (int j = 0; j < cols; ++j) {
            uint8_t* dst = ep.c + (m0 + (n + j) * ep.ldc_n) * 4;
            if (rows == kPanelRows) std::memcpy(dst, out[j], sizeof out[j]);
            else std::memcpy(dst, out[j], static_cast<size_t>(rows) * 4);
          }
        } else if (ep.ldc_n == 1) {
          // The group's tokens are adjacent ([M, N], the GEMM's own C): a row's run.
          for (int r = 0; r < rows; ++r) {
            float run[kPanelCols];
            for (int j = 0; j < cols; ++j) run[j] = out[j][r];
            uint8_t* dst = ep.c + ((m0 + r) * ep.ldc + n) * 4;
            if (cols == kPanelCols) std::memcpy(dst, run, sizeof run);  // a fixed size: inlined
            else std::memcpy(dst, run, static_cast<size_t>(cols) * 4);
          }
        } else {
          for (int j = 0; j < cols; ++j)
            for (int r = 0; r < rows; ++r) epilogue_store(ep, m0 + r, n + j, out[j][r]);
        }
      } else {
        for (int j = 0; j < cols; ++j) {
          for (int r = 0; r < rows; ++r)
            if (!is_finite(out[j][r])) out[j][r] = exact(r, n + j);
          epilogue_store_rows(ep, terms, m0, rows, n + j, out[j]);
        }
      }
    };
    static_assert(kPanelRows <= kMaxEpilogueRun, "a panel's rows are one epilogue run");
    if (decode_groups) {
      // One A row against q4_0x16 groups in place: as many groups a pass as
      // the kernels take (x16_decode), interleaved block by block.
      int most = 1;
      while (most < kX16DecodeGroups && p.x16_decode[most + 1]) ++most;
      for (int64_t pi = p0; pi < p1; pi += most) {
        const int count = static_cast<int>(p1 - pi < most ? p1 - pi : most);
        float out[kX16DecodeGroups][kPanelRows];
        p.x16_decode[count](W + pi * g.a.row_stride, g.a.row_stride, nb, group_data(agroups, 0), out);
        for (int q = 0; q < count; ++q) {
          RowTerms terms;
          load_row_terms(ep, (pi + q) * kPanelRows, kPanelRows, &terms);
          finish(pi + q, nullptr, terms, 0, &out[q]);
        }
      }
      return;
    }
    for (int64_t pi = p0; pi < p1; ++pi) {
      const int64_t m0 = pi * kPanelRows;
      const int rows = static_cast<int>(m_rows - m0 < kPanelRows ? m_rows - m0 : kPanelRows);
      const uint8_t* w[kPanelRows];
      const uint8_t* blocks = panel;  // what the passes read
      const PanelFn* passes = p.cols;
      if (!x16) {
        for (int r = 0; r < kPanelRows; ++r) w[r] = W + (m0 + (r < rows ? r : rows - 1)) * g.a.row_stride;
        // The next panel's rows start kPanelRows rows on (its last may be
        // shorter: those prefetches then fall on rows of this panel or past
        // W, harmless either way).
        p.pack(w, nb, pi + 1 < p1 ? kPanelRows * g.a.row_stride : 0, panel);
      } else if (in_place) {
        blocks = W + pi * g.a.row_stride;
        passes = p.x16_cols;
      } else {
        p.pack_x16(W + pi * g.a.row_stride, nb, panel);
      }
      RowTerms terms;  // the panel's rows' bias and scale, loaded once for all its columns
      load_row_terms(ep, m0, rows, &terms);
      for (int64_t grp = g0; grp < g1; ++grp) {
        float out[kPanelCols][kPanelRows];
        passes[group_start(grp + 1) - group_start(grp)](blocks, nb, group_data(agroups, grp), out);
        finish(pi, w, terms, grp, out);
      }
    }
  });
  return {};
}

// The kernel files' tables are empty where their ISA was not compiled in
// (non-x86 hosts, or a compiler without -mavxvnni).
Status run_tiles_of(const GemmArgs& g, const TileKernels& k, const char* what) {
  if (!k.one_col) return not_compiled(what);
  return gemm_tiled(g, k);
}

Status run_panel_of(const GemmArgs& g, const PanelKernels& p, const char* what) {
  if (!p.pack) return not_compiled(what);
  return gemm_panel(g, p);
}

}  // namespace
}  // namespace qg::detail::cpu

#else  // not compiled for AVX2 (non-x86 host): the arch windows keep these kernels from being chosen

namespace qg::detail::cpu {
namespace {
Status run_tiles_of(const GemmArgs&, const q4q8::TileKernels&, const char* what) { return not_compiled(what); }
Status run_panel_of(const GemmArgs&, const q4q8::PanelKernels&, const char* what) { return not_compiled(what); }
}  // namespace
}  // namespace qg::detail::cpu

#endif

namespace qg::detail::cpu {

Status gemm_q4_0_q8_1_avx2(const GemmArgs& g) { return run_tiles_of(g, q4q8::kAvx2Tiles, "AVX2"); }
Status gemm_q4_0_q8_1_avx512vnni(const GemmArgs& g) { return run_tiles_of(g, q4q8::kAvx512VnniTiles, "AVX-512 VNNI"); }
Status gemm_q4_0_q8_1_avxvnni(const GemmArgs& g) { return run_tiles_of(g, q4q8::kAvxVnniTiles, "AVX-VNNI"); }
Status gemm_q4_0_q8_1_avx2_panel(const GemmArgs& g) { return run_panel_of(g, q4q8::kAvx2Panel, "AVX2 panel"); }
Status gemm_q4_0_q8_1_avx512vnni_panel(const GemmArgs& g) {
  return run_panel_of(g, q4q8::kAvx512VnniPanel, "AVX-512 VNNI panel");
}
Status gemm_q4_0_q8_1_avxvnni_panel(const GemmArgs& g) {
  return run_panel_of(g, q4q8::kAvxVnniPanel, "AVX-VNNI panel");
}

Status gemm_q4_0_q8_1_amx(const GemmArgs& g) { return run_panel_of(g, q4q8::kAmxPanel, "AMX"); }

Status gemm_q4_0x16_avx2(const GemmArgs& g) { return run_panel_of(g, q4q8::kAvx2Panel, "AVX2 q4_0x16"); }
Status gemm_q4_0x16_avx512vnni(const GemmArgs& g) {
  return run_panel_of(g, q4q8::kAvx512VnniPanel, "AVX-512 VNNI q4_0x16");
}
Status gemm_q4_0x16_avxvnni(const GemmArgs& g) { return run_panel_of(g, q4q8::kAvxVnniPanel, "AVX-VNNI q4_0x16"); }
Status gemm_q4_0x16_amx(const GemmArgs& g) { return run_panel_of(g, q4q8::kAmxPanel, "AMX q4_0x16"); }

bool amx_kernels_compiled() { return q4q8::kAmxPanel.pack != nullptr && kI8Amx.block_2x2 != nullptr; }

bool q4_avx_vnni_compiled() { return q4q8::kAvxVnniTiles.one_col != nullptr && q4q8::kAvxVnniPanel.pack != nullptr; }

}  // namespace qg::detail::cpu
