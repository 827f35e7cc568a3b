// SPDX-License-Identifier: MIT
// test_quantize_cpu.cpp: qg::quantize / qg::dequantize on the CPU against a
// straight transcription of ggml's reference quantizers (ggml-quants.c:
// quantize_row_q4_0_ref, quantize_row_q8_0_ref, quantize_row_q8_1_ref) and of
// ggml-cuda's quantize_q8_1, plus the edge blocks whose behaviour qg defines.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "qg/qg.h"
#include "test_util.h"

namespace {

using qgtest::f2u;
using qgtest::ref_fp16_to_fp32;
using qgtest::ref_fp32_to_fp16;
using qgtest::u2f;

constexpr float kInf = std::numeric_limits<float>::infinity();

// ================================================================== ggml transcriptions
// Written from ggml-quants.c as plain C++, with the test's own fp16 rounding.
// Only called on data for which ggml's C is well defined (finite blocks whose
// 1/d is finite or d == 0).

void ggml_quantize_row_q4_0_ref(const float* x, qg::block_q4_0* y, int64_t k) {
  const int qk = 32;
  const int64_t nb = k / qk;
  for (int64_t i = 0; i < nb; i++) {
    float amax = 0.0f;  // absolute max
    float max = 0.0f;
    for (int j = 0; j < qk; j++) {
      const float v = x[i * qk + j];
      if (amax < std::fabs(v)) {
        amax = std::fabs(v);
        max = v;
      }
    }
    const float d = max / -8;
    const float id = d ? 1.0f / d : 0.0f;
    y[i].d = ref_fp32_to_fp16(d);
    for (int j = 0; j < qk / 2; ++j) {
      const float x0 = x[i * qk + 0 + j] * id;
      const float x1 = x[i * qk + qk / 2 + j] * id;
      const uint8_t xi0 = static_cast<uint8_t>(std::min(15, static_cast<int>(static_cast<int8_t>(x0 + 8.5f))));
      const uint8_t xi1 = static_cast<uint8_t>(std::min(15, static_cast<int>(static_cast<int8_t>(x1 + 8.5f))));
      y[i].qs[j] = xi0;
      y[i].qs[j] |= static_cast<uint8_t>(xi1 << 4);
    }
  }
}

void ggml_quantize_row_q8_0_ref(const float* x, qg::block_q8_0* y, int64_t k) {
  const int64_t nb = k / 32;
  for (int64_t i = 0; i < nb; i++) {
    float amax = 0.0f;
    for (int j = 0; j < 32; j++) amax = std::max(amax, std::fabs(x[i * 32 + j]));
    const float d = amax / ((1 << 7) - 1);
    const float id = d ? 1.0f / d : 0.0f;
    y[i].d = ref_fp32_to_fp16(d);
    for (int j = 0; j < 32; ++j) {
      const float x0 = x[i * 32 + j] * id;
      y[i].qs[j] = static_cast<int8_t>(std::roundf(x0));
    }
  }
}

void ggml_quantize_row_q8_1_ref(const float* x, qg::block_q8_1* y, int64_t k) {
  const int64_t nb = k / 32;
  for (int64_t i = 0; i < nb; i++) {
    float amax = 0.0f;
    for (int j = 0; j < 32; j++) amax = std::max(amax, std::fabs(x[i * 32 + j]));
    const float d = amax / ((1 << 7) - 1);
    const float id = d ? 1.0f / d : 0.0f;
    y[i].d = ref_fp32_to_fp16(d);
    int sum = 0;
    for (int j = 0; j < 16; ++j) {
      const float v0 = x[i * 32 + j] * id;
      const float v1 = x[i * 32 + 16 + j] * id;
      y[i].qs[j] = static_cast<int8_t>(std::roundf(v0));
      y[i].qs[16 + j] = static_cast<int8_t>(std::roundf(v1));
      sum += y[i].qs[j];
      sum += y[i].qs[16 + j];
    }
    y[i].s = ref_fp32_to_fp16(static_cast<float>(sum) * d);
  }
}

// ggml-cuda quantize_q8_1: q = roundf(x / d), ds = {d, sum(x)}; the sum is
// taken in index order (qg's definition; CUDA's warp reduction order differs).
void ggml_cuda_quantize_row_q8_1(const float* x, qg::block_q8_1* y, int64_t k) {
  const int64_t nb = k / 32;
  for (int64_t i = 0; i < nb; i++) {
    float amax = 0.0f, sum = 0.0f;
    for (int j = 0; j < 32; j++) {
      amax = std::max(amax, std::fabs(x[i * 32 + j]));
      sum += x[i * 32 + j];
    }
    const float d = amax / 127;
    for (int j = 0; j < 32; j++)
      y[i].qs[j] = amax == 0.0f ? 0 : static_cast<int8_t>(std::roundf(x[i * 32 + j] / d));
    y[i].d = ref_fp32_to_fp16(d);
    y[i].s = ref_fp32_to_fp16(sum);
  }
}

// ================================================================== helpers
enum class Kind { q4_0, q8_0, q8_1_ref, q8_1_cuda };

const char* kind_name(Kind k) {
  switch (k) {
    case Kind::q4_0: return "q4_0";
    case Kind::q8_0: return "q8_0";
    case Kind::q8_1_ref: return "q8_1(reference)";
    case Kind::q8_1_cuda: return "q8_1(ggml_cuda)";
  }
  return "?";
}
qg::Format format_of(Kind k) {
  return k == Kind::q4_0 ? qg::Format::q4_0 : k == Kind::q8_0 ? qg::Format::q8_0 : qg::Format::q8_1;
}
qg::Q8_1Convention conv_of(Kind k) {
  return k == Kind::q8_1_cuda ? qg::Q8_1Convention::ggml_cuda : qg::Q8_1Convention::reference;
}
int bpb(Kind k) { return qg::format_traits(format_of(k)).bytes_per_block; }
const Kind kAllKinds[] = {Kind::q4_0, Kind::q8_0, Kind::q8_1_ref, Kind::q8_1_cuda};

// Reference bytes for rows x k contiguous values.
std::vector<uint8_t> reference_bytes(Kind kind, const float* x, int64_t rows, int64_t k) {
  const int64_t nb = k / 32;
  std::vector<uint8_t> out(static_cast<size_t>(rows * nb * bpb(kind)));
  for (int64_t r = 0; r < rows; ++r) {
    uint8_t* y = out.data() + r * nb * bpb(kind);
    const float* xr = x + r * k;
    switch (kind) {
      case Kind::q4_0: {
        std::vector<qg::block_q4_0> b(nb);
        ggml_quantize_row_q4_0_ref(xr, b.data(), k);
        std::memcpy(y, b.data(), nb * sizeof(qg::block_q4_0));
        break;
      }
      case Kind::q8_0: {
        std::vector<qg::block_q8_0> b(nb);
        ggml_quantize_row_q8_0_ref(xr, b.data(), k);
        std::memcpy(y, b.data(), nb * sizeof(qg::block_q8_0));
        break;
      }
      case Kind::q8_1_ref:
      case Kind::q8_1_cuda: {
        std::vector<qg::block_q8_1> b(nb);
        if (kind == Kind::q8_1_ref) ggml_quantize_row_q8_1_ref(xr, b.data(), k);
        else ggml_cuda_quantize_row_q8_1(xr, b.data(), k);
        std::memcpy(y, b.data(), nb * sizeof(qg::block_q8_1));
        break;
      }
    }
  }
  return out;
}

// qg through the public raw-pointer API, contiguous.
std::vector<uint8_t> qg_quantize(Kind kind, const void* x, qg::DType dtype, int64_t rows, int64_t k) {
  const int64_t row_bytes = k / 32 * bpb(kind);
  std::vector<uint8_t> out(static_cast<size_t>(rows * row_bytes), qgtest::kSentinelByte);
  qg::QuantizeArgs a;
  a.format = format_of(kind);
  a.x = x;
  a.x_dtype = dtype;
  a.rows = rows;
  a.k = k;
  a.x_row_stride = k;
  a.y = out.data();
  a.y_row_stride = row_bytes;
  a.device = qg::Device::cpu();
  a.q8_1_convention = conv_of(kind);
  const qg::Status s = qg::quantize(a);
  EXPECT_TRUE(s.ok()) << s.message();
  return out;
}
std::vector<uint8_t> qg_quantize(Kind kind, const std::vector<float>& x, int64_t rows, int64_t k) {
  return qg_quantize(kind, x.data(), qg::DType::f32, rows, k);
}

std::vector<float> qg_dequantize(qg::Format f, const std::vector<uint8_t>& xq, int64_t rows, int64_t k) {
  std::vector<float> y(static_cast<size_t>(rows * k));
  qgtest::fill_poison(y.data(), y.size());
  const qg::Status s = qg::dequantize(
      qgtest::dequantize_args(f, xq.data(), rows, k, k / 32 * qg::format_traits(f).bytes_per_block, y.data(), k));
  EXPECT_TRUE(s.ok()) << s.message();
  return y;
}

// Scale fields of a block (d, and s for Q8_1) and its codes, read from bytes.
uint16_t get_u16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}
uint16_t scale_d(const uint8_t* blk) { return get_u16(blk); }
uint16_t scale_s(const uint8_t* blk) { return get_u16(blk + 2); }
int code(Kind kind, const uint8_t* blk, int j) {
  if (kind == Kind::q4_0) return j < 16 ? (blk[2 + j] & 0x0F) : (blk[2 + j - 16] >> 4);
  if (kind == Kind::q8_0) return static_cast<int8_t>(blk[2 + j]);
  return static_cast<int8_t>(blk[4 + j]);
}

// ±0 scales compare equal (ggml gives -0.0 for an all-zero Q4_0 block).
void canonicalise_zero_scales(Kind kind, std::vector<uint8_t>& bytes) {
  const int n = bpb(kind);
  for (size_t off = 0; off + n <= bytes.size(); off += n) {
    if ((scale_d(&bytes[off]) & 0x7FFF) == 0) bytes[off] = bytes[off + 1] = 0;
    if (kind == Kind::q8_1_ref || kind == Kind::q8_1_cuda)
      if ((scale_s(&bytes[off]) & 0x7FFF) == 0) bytes[off + 2] = bytes[off + 3] = 0;
  }
}

// Compares block by block; reports the first few differing blocks.
void expect_same_bytes(Kind kind, std::vector<uint8_t> got, std::vector<uint8_t> want,
                       const std::string& what) {
  ASSERT_EQ(got.size(), want.size());
  canonicalise_zero_scales(kind, got);
  canonicalise_zero_scales(kind, want);
  const int n = bpb(kind);
  int bad = 0;
  for (size_t off = 0; off < got.size(); off += n) {
    if (std::memcmp(&got[off], &want[off], n) != 0 && ++bad <= 3) {
      std::string g, w;
      char buf[8];
      for (int i = 0; i < n; ++i) {
        std::snprintf(buf, sizeof buf, "%02x", got[off + i]);
        g += buf;
        std::snprintf(buf, sizeof buf, "%02x", want[off + i]);
        w += buf;
      }
      ADD_FAILURE() << kind_name(kind) << " " << what << ": block " << off / n << " differs\n  qg:  " << g
                    << "\n  ref: " << w;
    }
  }
  EXPECT_EQ(bad, 0) << kind_name(kind) << " " << what << ": " << bad << " of " << got.size() / n
                    << " blocks differ";
}

// ================================================================== random data, byte-exact
struct Distribution {
  const char* name;
  std::function<float(std::mt19937_64&, int64_t /*index*/)> draw;
};

std::vector<Distribution> distributions() {
  return {
      {"uniform[-1,1]", [](std::mt19937_64& r, int64_t) { return qgtest::uniform(r, -1.0f, 1.0f); }},
      {"normal(0,1)",
       [](std::mt19937_64& r, int64_t) { return std::normal_distribution<float>(0.0f, 1.0f)(r); }},
      {"normal(0,1e3)",
       [](std::mt19937_64& r, int64_t) { return std::normal_distribution<float>(0.0f, 1e3f)(r); }},
      {"positive uniform[0,5]", [](std::mt19937_64& r, int64_t) { return qgtest::uniform(r, 0.0f, 5.0f); }},
      {"log-uniform magnitudes 1e-6..1e4",
       [](std::mt19937_64& r, int64_t) {
         const float mag = std::pow(10.0f, qgtest::uniform(r, -6.0f, 4.0f));
         return (r() & 1) ? mag : -mag;
       }},
      {"outliers (1% x1000)",
       [](std::mt19937_64& r, int64_t) {
         const float v = std::normal_distribution<float>(0.0f, 1.0f)(r);
         return (r() % 100 == 0) ? v * 1000.0f : v;
       }},
      {"small integers (ties)",
       [](std::mt19937_64& r, int64_t) { return static_cast<float>(static_cast<int>(r() % 33) - 16) * 0.5f; }},
      {"fp16-representable",
       [](std::mt19937_64& r, int64_t) { return ref_fp16_to_fp32(qgtest::random_fp16(r, -8, 6)); }},
      {"sparse (75% zeros)",
       [](std::mt19937_64& r, int64_t) { return (r() % 4) ? 0.0f : qgtest::uniform(r, -3.0f, 3.0f); }},
  };
}

TEST(QuantizeCpu, MatchesGgmlReferenceOnRandomData) {
  const int64_t rows = 7, k = 32 * 13;
  uint64_t salt = 0;
  for (const Distribution& dist : distributions()) {
    for (int rep = 0; rep < 3; ++rep) {
      QG_SEEDED_RNG(rng, ++salt);
      SCOPED_TRACE(dist.name);
      std::vector<float> x(rows * k);
      for (int64_t i = 0; i < rows * k; ++i) x[i] = dist.draw(rng, i);
      for (Kind kind : kAllKinds)
        expect_same_bytes(kind, qg_quantize(kind, x, rows, k), reference_bytes(kind, x.data(), rows, k),
                          dist.name);
    }
  }
}

TEST(QuantizeCpu, SingleBlockAndLongRow) {
  QG_SEEDED_RNG(rng, 7);
  for (int64_t k : {32, 4096, 14336}) {
    std::vector<float> x(k);
    for (auto& v : x) v = std::normal_distribution<float>(0.0f, 2.0f)(rng);
    for (Kind kind : kAllKinds)
      expect_same_bytes(kind, qg_quantize(kind, x, 1, k), reference_bytes(kind, x.data(), 1, k),
                        "k=" + std::to_string(k));
  }
}

// Fewer rows than threads: each row is cut into block ranges, one a pool
// task (an uneven 203 blocks, so the ranges differ in length). The bytes,
// and the dequantized values, must not depend on the thread count.
TEST(QuantizeCpu, RowsSplitAcrossThreadsGiveTheSameBytes) {
  QG_SEEDED_RNG(rng, 8);
  const int64_t k = 32 * 203;
  for (int64_t rows : {1, 2}) {
    std::vector<float> x(rows * k);
    for (auto& v : x) v = std::normal_distribution<float>(0.0f, 3.0f)(rng);
    for (Kind kind : kAllKinds) {
      const std::vector<uint8_t> want = reference_bytes(kind, x.data(), rows, k);
      std::vector<float> first_y;
      for (int threads : {1, 2, 3, 8}) {
        qg::set_cpu_threads(threads);
        const std::vector<uint8_t> got = qg_quantize(kind, x, rows, k);
        const std::vector<float> y = qg_dequantize(format_of(kind), got, rows, k);
        qg::set_cpu_threads(0);  // back to the default for the other tests
        const std::string what = "rows=" + std::to_string(rows) + " threads=" + std::to_string(threads);
        expect_same_bytes(kind, got, want, what);
        if (first_y.empty()) first_y = y;
        ASSERT_EQ(y.size(), first_y.size());
        EXPECT_EQ(std::memcmp(y.data(), first_y.data(), y.size() * sizeof(float)), 0) << what;
      }
    }
  }
}

// ================================================================== edge blocks
// Three blocks per row: random, the edge block under test, random. The random
// neighbours must come out exactly as the reference gives them.
struct EdgeRow {
  std::vector<float> x;  // 96 values
};
EdgeRow edge_row(std::mt19937_64& rng, const std::function<float(int)>& edge) {
  EdgeRow r;
  r.x.resize(96);
  for (int j = 0; j < 96; ++j) r.x[j] = (j >= 32 && j < 64) ? edge(j - 32) : qgtest::uniform(rng, -2.0f, 2.0f);
  return r;
}

void expect_neighbours_match_reference(Kind kind, const std::vector<uint8_t>& got, const std::vector<float>& x) {
  const int n = bpb(kind);
  const std::vector<uint8_t> want = reference_bytes(kind, x.data(), 1, 96);
  for (int b : {0, 2}) {
    std::vector<uint8_t> g(got.begin() + b * n, got.begin() + (b + 1) * n);
    std::vector<uint8_t> w(want.begin() + b * n, want.begin() + (b + 1) * n);
    expect_same_bytes(kind, g, w, "neighbour block " + std::to_string(b));
  }
}

void expect_zero_block(Kind kind, const std::vector<float>& x, const char* what) {
  SCOPED_TRACE(std::string(kind_name(kind)) + " " + what);
  const std::vector<uint8_t> q = qg_quantize(kind, x, 1, 96);
  const uint8_t* blk = q.data() + bpb(kind);
  EXPECT_EQ(scale_d(blk) & 0x7FFF, 0) << "scale must be +-0, got 0x" << std::hex << scale_d(blk);
  if (kind == Kind::q8_1_ref || kind == Kind::q8_1_cuda) {
    EXPECT_EQ(scale_s(blk) & 0x7FFF, 0) << "sum must be +-0, got 0x" << std::hex << scale_s(blk);
  }
  for (int j = 0; j < 32; ++j) EXPECT_EQ(code(kind, blk, j), kind == Kind::q4_0 ? 8 : 0) << "j=" << j;
  expect_neighbours_match_reference(kind, q, x);
  // matches ggml too (the reference is well defined here: d == 0 -> id = 0)
  expect_same_bytes(kind, q, reference_bytes(kind, x.data(), 1, 96), what);
  const std::vector<float> y = qg_dequantize(format_of(kind), q, 1, 96);
  for (int j = 32; j < 64; ++j) {
    EXPECT_FALSE(std::isnan(y[j])) << "j=" << j;
    EXPECT_EQ(y[j], 0.0f) << "j=" << j;
  }
}

TEST(QuantizeEdge, AllZeroBlock) {
  QG_SEEDED_RNG(rng, 11);
  const EdgeRow r = edge_row(rng, [](int) { return 0.0f; });
  for (Kind kind : kAllKinds) expect_zero_block(kind, r.x, "all +0");
}

TEST(QuantizeEdge, AllNegativeZeroBlock) {
  QG_SEEDED_RNG(rng, 12);
  const EdgeRow r = edge_row(rng, [](int) { return -0.0f; });
  for (Kind kind : kAllKinds) expect_zero_block(kind, r.x, "all -0");
}

// Denormal-only block: d is denormal and 1/d overflows to inf, where ggml's C
// would cast inf/NaN to int (UB). qg defines it as a zero block: id = 0,
// neutral codes (Q4_0 nibble 8, Q8 code 0), scale underflows to +-0, dequant 0.
TEST(QuantizeEdge, DenormalOnlyBlock) {
  QG_SEEDED_RNG(rng, 13);
  auto edge = [](int j) { return j % 3 == 0 ? 1e-40f : j % 3 == 1 ? -7e-41f : 0.0f; };
  const EdgeRow r = edge_row(rng, edge);
  for (Kind kind : kAllKinds) {
    SCOPED_TRACE(kind_name(kind));
    const std::vector<uint8_t> q = qg_quantize(kind, r.x, 1, 96);
    const uint8_t* blk = q.data() + bpb(kind);
    EXPECT_EQ(scale_d(blk) & 0x7FFF, 0) << std::hex << scale_d(blk);
    for (int j = 0; j < 32; ++j) {
      const int c = code(kind, blk, j);
      switch (kind) {
        case Kind::q4_0:
          EXPECT_EQ(c, 8) << "j=" << j;
          break;
        case Kind::q8_0:
        case Kind::q8_1_ref:
          EXPECT_EQ(c, 0) << "j=" << j;
          break;
        case Kind::q8_1_cuda:  // x / d is finite here: the transcription is well defined
          break;
      }
    }
    if (kind == Kind::q8_1_cuda) {
      expect_same_bytes(kind, q, reference_bytes(kind, r.x.data(), 1, 96), "denormal");
    }
    expect_neighbours_match_reference(kind, q, r.x);
    const std::vector<float> y = qg_dequantize(format_of(kind), q, 1, 96);
    for (int j = 32; j < 64; ++j) {
      EXPECT_TRUE(std::isfinite(y[j])) << "j=" << j;
      EXPECT_EQ(y[j], 0.0f) << "j=" << j;
    }
  }
}

// The smallest denormal: d = amax/127 itself underflows to 0 (ggml_cuda then
// divides by zero). Defined: scale 0, dequant 0, no NaN.
TEST(QuantizeEdge, SmallestDenormalBlock) {
  QG_SEEDED_RNG(rng, 14);
  const float tiny = std::numeric_limits<float>::denorm_min();
  const EdgeRow r = edge_row(rng, [&](int j) { return j % 2 ? tiny : (j % 5 ? -tiny : 0.0f); });
  for (Kind kind : kAllKinds) {
    SCOPED_TRACE(kind_name(kind));
    const std::vector<uint8_t> q = qg_quantize(kind, r.x, 1, 96);
    EXPECT_EQ(scale_d(q.data() + bpb(kind)) & 0x7FFF, 0);
    expect_neighbours_match_reference(kind, q, r.x);
    const std::vector<float> y = qg_dequantize(format_of(kind), q, 1, 96);
    for (int j = 32; j < 64; ++j) EXPECT_EQ(y[j], 0.0f) << "j=" << j;
  }
}

// 1e-8: 1/d is finite, but the fp16 scale underflows to 0 (reference is well defined).
TEST(QuantizeEdge, TinyBlockScaleUnderflows) {
  QG_SEEDED_RNG(rng, 15);
  std::mt19937_64 r2(rng());
  const EdgeRow r = edge_row(rng, [&](int) { return qgtest::uniform(r2, -1e-8f, 1e-8f); });
  for (Kind kind : kAllKinds) {
    SCOPED_TRACE(kind_name(kind));
    const std::vector<uint8_t> q = qg_quantize(kind, r.x, 1, 96);
    expect_same_bytes(kind, q, reference_bytes(kind, r.x.data(), 1, 96), "1e-8 block");
    EXPECT_EQ(scale_d(q.data() + bpb(kind)) & 0x7FFF, 0);
    const std::vector<float> y = qg_dequantize(format_of(kind), q, 1, 96);
    for (int j = 32; j < 64; ++j) EXPECT_EQ(y[j], 0.0f) << "j=" << j;
  }
}

// |max| = 6e5: Q4_0's d = max/-8 = -75000 does not fit fp16 and becomes -inf, as in ggml.
TEST(QuantizeEdge, HugeQ4_0BlockScaleOverflowsLikeGgml) {
  QG_SEEDED_RNG(rng, 16);
  std::mt19937_64 r2(rng());
  const EdgeRow r = edge_row(rng, [&](int j) { return j == 5 ? 6e5f : qgtest::uniform(r2, -5e5f, 5e5f); });
  const std::vector<uint8_t> q = qg_quantize(Kind::q4_0, r.x, 1, 96);
  expect_same_bytes(Kind::q4_0, q, reference_bytes(Kind::q4_0, r.x.data(), 1, 96), "6e5 block");
  EXPECT_EQ(scale_d(q.data() + 18), 0xFC00) << std::hex << scale_d(q.data() + 18);
  EXPECT_EQ(code(Kind::q4_0, q.data() + 18, 5), 0);
}

// The fp16 boundary of Q4_0's scale: |max| = 524160 is the first value whose
// max/8 rounds to inf (65520 is the overflow tie); the float just below stays finite.
TEST(QuantizeEdge, Q4_0ScaleOverflowBoundary) {
  for (float mx : {std::nextafter(524160.0f, 0.0f), 524160.0f, -524160.0f}) {
    std::vector<float> x(32, 1.0f);
    x[9] = mx;
    const std::vector<uint8_t> q = qg_quantize(Kind::q4_0, x, 1, 32);
    expect_same_bytes(Kind::q4_0, q, reference_bytes(Kind::q4_0, x.data(), 1, 32), "boundary");
    const uint16_t want = std::fabs(mx) < 524160.0f ? 0x7BFF : 0x7C00;
    EXPECT_EQ(scale_d(q.data()) & 0x7FFF, want) << "max=" << mx;
    EXPECT_EQ(scale_d(q.data()) & 0x8000, mx > 0 ? 0x8000 : 0) << "d = max / -8 has the opposite sign";
  }
}

// Q8: |max| = 1e5 has a finite scale (787.4); all-positive 1e5 overflows the
// fp16 sum s of Q8_1 in both conventions; |max| = 1e7 overflows d itself.
TEST(QuantizeEdge, HugeQ8Blocks) {
  QG_SEEDED_RNG(rng, 17);
  std::mt19937_64 r2(rng());
  const EdgeRow mixed = edge_row(rng, [&](int j) { return j == 3 ? -1e5f : qgtest::uniform(r2, -1e5f, 1e5f); });
  const EdgeRow positive = edge_row(rng, [&](int) { return 1e5f; });
  const EdgeRow enormous = edge_row(rng, [&](int j) { return j == 0 ? 1e7f : qgtest::uniform(r2, -1e7f, 1e7f); });
  for (Kind kind : {Kind::q8_0, Kind::q8_1_ref, Kind::q8_1_cuda}) {
    SCOPED_TRACE(kind_name(kind));
    const int n = bpb(kind);
    std::vector<uint8_t> q = qg_quantize(kind, mixed.x, 1, 96);
    expect_same_bytes(kind, q, reference_bytes(kind, mixed.x.data(), 1, 96), "1e5 mixed");
    EXPECT_EQ(scale_d(q.data() + n), ref_fp32_to_fp16(1e5f / 127));
    EXPECT_EQ(code(kind, q.data() + n, 3), -127);

    q = qg_quantize(kind, positive.x, 1, 96);
    expect_same_bytes(kind, q, reference_bytes(kind, positive.x.data(), 1, 96), "1e5 positive");
    for (int j = 0; j < 32; ++j) EXPECT_EQ(code(kind, q.data() + n, j), 127);
    if (kind != Kind::q8_0) {
      EXPECT_EQ(scale_s(q.data() + n), 0x7C00) << "s overflows to +inf";
    }

    q = qg_quantize(kind, enormous.x, 1, 96);
    expect_same_bytes(kind, q, reference_bytes(kind, enormous.x.data(), 1, 96), "1e7");
    EXPECT_EQ(scale_d(q.data() + n), 0x7C00) << "d = 1e7/127 overflows fp16";
  }
}

// NaN, +Inf or -Inf anywhere in a block: scale NaN (0x7E00), neutral codes,
// the whole block dequantizes to NaN, the neighbouring blocks are unaffected.
TEST(QuantizeEdge, NonFiniteBlock) {
  const float specials[] = {std::nanf(""), -std::nanf(""), kInf, -kInf};
  const char* names[] = {"NaN", "-NaN", "+Inf", "-Inf"};
  for (int s = 0; s < 4; ++s) {
    for (int pos : {0, 13, 31}) {
      QG_SEEDED_RNG(rng, 20 + s * 32 + pos);
      SCOPED_TRACE(std::string(names[s]) + " at " + std::to_string(pos));
      std::mt19937_64 r2(rng());
      const EdgeRow r = edge_row(rng, [&](int j) { return j == pos ? specials[s] : qgtest::uniform(r2, -1.0f, 1.0f); });
      for (Kind kind : kAllKinds) {
        SCOPED_TRACE(kind_name(kind));
        const std::vector<uint8_t> q = qg_quantize(kind, r.x, 1, 96);
        const uint8_t* blk = q.data() + bpb(kind);
        EXPECT_EQ(scale_d(blk), 0x7E00) << std::hex << scale_d(blk);
        if (kind == Kind::q8_1_ref || kind == Kind::q8_1_cuda) {
          EXPECT_EQ(scale_s(blk), 0x7E00);
        }
        for (int j = 0; j < 32; ++j) EXPECT_EQ(code(kind, blk, j), kind == Kind::q4_0 ? 8 : 0) << "j=" << j;
        expect_neighbours_match_reference(kind, q, r.x);
        const std::vector<float> y = qg_dequantize(format_of(kind), q, 1, 96);
        const std::vector<uint8_t> want = reference_bytes(kind, r.x.data(), 1, 96);
        const std::vector<float> yref = qg_dequantize(format_of(kind), want, 1, 96);
        for (int j = 0; j < 96; ++j) {
          if (j >= 32 && j < 64) {
            EXPECT_TRUE(std::isnan(y[j])) << "j=" << j << " y=" << y[j];
          } else {
            EXPECT_EQ(f2u(y[j]), f2u(yref[j])) << "j=" << j;
            EXPECT_TRUE(std::isfinite(y[j]));
          }
        }
      }
    }
  }
}

// ================================================================== input dtypes
TEST(QuantizeCpu, Float16InputEqualsItsFp32Upcast) {
  QG_SEEDED_RNG(rng, 30);
  const int64_t rows = 5, k = 32 * 9;
  for (auto range : {std::pair<int, int>{-15, 15}, std::pair<int, int>{-4, 2}}) {
    std::vector<uint16_t> h(rows * k);
    std::vector<float> f(rows * k);
    for (int64_t i = 0; i < rows * k; ++i) {
      h[i] = qgtest::random_fp16(rng, range.first, range.second);
      f[i] = ref_fp16_to_fp32(h[i]);
    }
    for (Kind kind : kAllKinds) {
      expect_same_bytes(kind, qg_quantize(kind, h.data(), qg::DType::f16, rows, k),
                        qg_quantize(kind, f.data(), qg::DType::f32, rows, k), "f16 vs f32");
      expect_same_bytes(kind, qg_quantize(kind, h.data(), qg::DType::f16, rows, k),
                        reference_bytes(kind, f.data(), rows, k), "f16 vs ggml");
    }
  }
}

TEST(QuantizeCpu, BFloat16InputEqualsItsFp32Upcast) {
  QG_SEEDED_RNG(rng, 31);
  const int64_t rows = 5, k = 32 * 9;
  for (bool full_range : {false, true}) {
    std::vector<uint16_t> b(rows * k);
    std::vector<float> f(rows * k);
    for (int64_t i = 0; i < rows * k; ++i) {
      uint16_t v;
      do {
        v = static_cast<uint16_t>(rng());
        if (!full_range) v = static_cast<uint16_t>((v & 0x807F) | ((120 + rng() % 16) << 7));  // |x| ~ 2^-7..2^8
      } while (((v >> 7) & 0xFF) == 0xFF);  // finite only
      b[i] = v;
      f[i] = qgtest::ref_bf16_to_fp32(v);
    }
    for (Kind kind : kAllKinds)
      expect_same_bytes(kind, qg_quantize(kind, b.data(), qg::DType::bf16, rows, k),
                        qg_quantize(kind, f.data(), qg::DType::f32, rows, k),
                        full_range ? "bf16 full range" : "bf16");
  }
}

// ================================================================== strides
// Padded input rows (padding holds NaN: reading it would poison a block) and
// padded output rows (padding holds sentinels that must survive).
TEST(QuantizeCpu, StridedRowsLeaveGapsUntouched) {
  QG_SEEDED_RNG(rng, 40);
  const int64_t rows = 6, k = 32 * 5, xs = k + 40;
  std::vector<float> x(rows * xs, std::nanf(""));
  std::vector<float> dense(rows * k);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < k; ++j) x[r * xs + j] = dense[r * k + j] = qgtest::uniform(rng, -3.0f, 3.0f);
  for (qg::DType dtype : {qg::DType::f32, qg::DType::f16}) {
    std::vector<uint16_t> xh;
    if (dtype == qg::DType::f16) {
      xh.resize(x.size());
      for (size_t i = 0; i < x.size(); ++i) xh[i] = ref_fp32_to_fp16(x[i]);
      for (size_t i = 0; i < dense.size(); ++i) dense[i] = ref_fp16_to_fp32(ref_fp32_to_fp16(dense[i]));
    }
    for (Kind kind : kAllKinds) {
      SCOPED_TRACE(std::string(kind_name(kind)) + (dtype == qg::DType::f16 ? " f16" : " f32"));
      const int64_t row_bytes = k / 32 * bpb(kind), ys = row_bytes + 7;
      std::vector<uint8_t> y(rows * ys + 64, qgtest::kSentinelByte);
      qg::QuantizeArgs a;
      a.format = format_of(kind);
      a.x = dtype == qg::DType::f16 ? static_cast<const void*>(xh.data()) : x.data();
      a.x_dtype = dtype;
      a.rows = rows;
      a.k = k;
      a.x_row_stride = xs;
      a.y = y.data();
      a.y_row_stride = ys;
      a.device = qg::Device::cpu();
      a.q8_1_convention = conv_of(kind);
      const qg::Status s = qg::quantize(a);
      ASSERT_TRUE(s.ok()) << s.message();
      const std::vector<uint8_t> want = reference_bytes(kind, dense.data(), rows, k);
      for (int64_t r = 0; r < rows; ++r) {
        std::vector<uint8_t> got_row(y.begin() + r * ys, y.begin() + r * ys + row_bytes);
        std::vector<uint8_t> want_row(want.begin() + r * row_bytes, want.begin() + (r + 1) * row_bytes);
        expect_same_bytes(kind, got_row, want_row, "row " + std::to_string(r));
      }
      for (size_t i = 0; i < y.size(); ++i) {
        const int64_t r = static_cast<int64_t>(i) / ys, off = static_cast<int64_t>(i) % ys;
        const bool inside = r < rows && off < row_bytes;
        if (!inside) {
          ASSERT_EQ(y[i], qgtest::kSentinelByte) << "gap byte " << i << " was written";
        }
      }
    }
  }
}

// The same through the view API: x a row slice of a wider array, batched dims.
TEST(QuantizeCpu, ViewsWithPaddedRowsAndBatchDims) {
  QG_SEEDED_RNG(rng, 41);
  const int64_t b0 = 2, b1 = 3, k = 64, xs = 100;
  std::vector<float> x(b0 * b1 * xs, std::nanf(""));
  std::vector<float> dense(b0 * b1 * k);
  for (int64_t r = 0; r < b0 * b1; ++r)
    for (int64_t j = 0; j < k; ++j) x[r * xs + j] = dense[r * k + j] = qgtest::uniform(rng, -1.0f, 1.0f);
  qg::TensorView xv = qg::make_view(x.data(), qg::DType::f32, qg::Device::cpu(), {b0, b1, k});
  xv.strides[0] = b1 * xs;
  xv.strides[1] = xs;
  xv.writable = false;  // read-only inputs are fine
  for (Kind kind : kAllKinds) {
    SCOPED_TRACE(kind_name(kind));
    const qg::QuantizeViews v{format_of(kind), xv, conv_of(kind), nullptr};
    qg::ResultSpec spec;
    ASSERT_TRUE(qg::result_spec(v, &spec).ok());
    EXPECT_EQ(spec.dtype, qg::DType::u8);
    ASSERT_EQ(std::vector<int64_t>(spec.shape, spec.shape + spec.ndim),
              (std::vector<int64_t>{b0, b1, k / 32, bpb(kind)}));
    std::vector<uint8_t> y(b0 * b1 * k / 32 * bpb(kind), qgtest::kSentinelByte);
    const qg::TensorView yv =
        qg::make_view(y.data(), qg::DType::u8, qg::Device::cpu(), {b0, b1, k / 32, bpb(kind)});
    const qg::Status s = qg::quantize(v, yv);
    ASSERT_TRUE(s.ok()) << s.message();
    expect_same_bytes(kind, y, reference_bytes(kind, dense.data(), b0 * b1, k), "view");
  }
}

// ================================================================== dequantize
// fp32 output is code * fp16(d), one correctly rounded product: bit-exact,
// for any bytes (random codes; random finite, subnormal, +-0, inf and NaN scales).
TEST(DequantizeCpu, BitExactForAnyBytes) {
  QG_SEEDED_RNG(rng, 50);
  const int64_t rows = 9, k = 32 * 11;
  for (qg::Format f : {qg::Format::q4_0, qg::Format::q8_0, qg::Format::q8_1}) {
    const int n = qg::format_traits(f).bytes_per_block;
    SCOPED_TRACE(qg::format_traits(f).name);
    std::vector<uint8_t> xq(rows * k / 32 * n);
    for (auto& b : xq) b = static_cast<uint8_t>(rng());
    const uint16_t specials[] = {0x0000, 0x8000, 0x0001, 0x83FF, 0x7BFF, 0x7C00, 0xFC00, 0x7E00, 0x3C00};
    for (size_t off = 0, i = 0; off < xq.size(); off += n, ++i) {
      const uint16_t d = i < 9 ? specials[i] : qgtest::random_fp16(rng, -15, 15);
      std::memcpy(&xq[off], &d, 2);
    }
    const std::vector<float> y = qg_dequantize(f, xq, rows, k);
    int bad = 0;
    for (int64_t i = 0; i < rows * k; ++i) {
      const uint8_t* blk = &xq[(i / 32) * n];
      const int j = static_cast<int>(i % 32);
      const float d = ref_fp16_to_fp32(scale_d(blk));
      float want;
      if (f == qg::Format::q4_0) want = static_cast<float>((j < 16 ? (blk[2 + j] & 15) : (blk[2 + j - 16] >> 4)) - 8) * d;
      else want = static_cast<float>(static_cast<int8_t>(blk[(f == qg::Format::q8_1 ? 4 : 2) + j])) * d;
      const bool ok = std::isnan(want) ? std::isnan(y[i]) : f2u(y[i]) == f2u(want);
      if (!ok && ++bad < 5) ADD_FAILURE() << "element " << i << ": got " << y[i] << " want " << want;
    }
    EXPECT_EQ(bad, 0);
  }
}

TEST(DequantizeCpu, StridedOutputFullyWrittenGapsUntouched) {
  QG_SEEDED_RNG(rng, 51);
  const int64_t rows = 5, k = 96;
  for (qg::Format f : {qg::Format::q4_0, qg::Format::q8_0, qg::Format::q8_1}) {
    SCOPED_TRACE(qg::format_traits(f).name);
    const int n = qg::format_traits(f).bytes_per_block;
    const int64_t row_bytes = k / 32 * n, xs = row_bytes + 5, ys = k + 3;
    std::vector<uint8_t> xq(rows * xs, 0xFF);  // gap bytes: scale 0xFFFF (NaN) if ever read
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t b = 0; b < k / 32; ++b) {
        uint8_t* blk = &xq[r * xs + b * n];
        for (int i = 0; i < n; ++i) blk[i] = static_cast<uint8_t>(rng());
        const uint16_t d = qgtest::random_fp16(rng, -6, 6);
        std::memcpy(blk, &d, 2);
      }
    std::vector<float> y(rows * ys + 16);
    qgtest::fill_poison(y.data(), y.size());
    const qg::Status s = qg::dequantize(qgtest::dequantize_args(f, xq.data(), rows, k, xs, y.data(), ys));
    ASSERT_TRUE(s.ok()) << s.message();
    // compact copy -> contiguous dequant must equal the strided result row by row
    std::vector<uint8_t> compact(rows * row_bytes);
    for (int64_t r = 0; r < rows; ++r) std::memcpy(&compact[r * row_bytes], &xq[r * xs], row_bytes);
    const std::vector<float> dense = qg_dequantize(f, compact, rows, k);
    for (size_t i = 0; i < y.size(); ++i) {
      const int64_t r = static_cast<int64_t>(i) / ys, c = static_cast<int64_t>(i) % ys;
      if (r < rows && c < k) {
        ASSERT_FALSE(std::isnan(y[i])) << "element (" << r << "," << c << ") not written";
        ASSERT_EQ(f2u(y[i]), f2u(dense[r * k + c]));
      } else {
        ASSERT_TRUE(qgtest::is_poison(y[i])) << "gap element " << i << " was written";
      }
    }
  }
}

// Tier B: round-trip quality per format (reliability.md §9: Q4_0 <= 1.2e-2, Q8_x <= 6e-5).
TEST(QuantizeCpu, RoundTripNmseWithinFormatLimits) {
  QG_SEEDED_RNG(rng, 60);
  const int64_t rows = 64, k = 4096;
  for (bool gaussian : {true, false}) {
    std::vector<float> x(rows * k);
    for (auto& v : x)
      v = gaussian ? std::normal_distribution<float>(0.0f, 1.0f)(rng) : qgtest::uniform(rng, -1.0f, 1.0f);
    for (Kind kind : kAllKinds) {
      const std::vector<float> y = qg_dequantize(format_of(kind), qg_quantize(kind, x, rows, k), rows, k);
      const double e = qgtest::nmse(std::vector<double>(y.begin(), y.end()), std::vector<double>(x.begin(), x.end()));
      const double limit = kind == Kind::q4_0 ? 1.2e-2 : 6e-5;
      std::cout << "[  nmse    ] " << kind_name(kind) << (gaussian ? " gaussian " : " uniform ") << e << "\n";
      EXPECT_LE(e, limit) << kind_name(kind) << (gaussian ? " gaussian" : " uniform");
      EXPECT_GT(e, 0.0);  // quantization is lossy: a zero would mean the check compared x with itself
    }
  }
}

// Q8_1 conventions differ only where documented: same d; codes within 1 step; s
// is d*sum(q) (reference) or sum(x) (ggml_cuda).
TEST(QuantizeCpu, Q8_1ConventionsAgreeOnScaleAndDifferOnlyInS) {
  QG_SEEDED_RNG(rng, 61);
  const int64_t rows = 16, k = 256;
  std::vector<float> x(rows * k);
  for (auto& v : x) v = std::normal_distribution<float>(0.5f, 1.0f)(rng);
  const std::vector<uint8_t> a = qg_quantize(Kind::q8_1_ref, x, rows, k);
  const std::vector<uint8_t> b = qg_quantize(Kind::q8_1_cuda, x, rows, k);
  int code_diffs = 0;
  for (int64_t blk = 0; blk < rows * k / 32; ++blk) {
    const uint8_t* pa = &a[blk * 36];
    const uint8_t* pb = &b[blk * 36];
    EXPECT_EQ(scale_d(pa), scale_d(pb));
    int sum = 0;
    double xs = 0;
    for (int j = 0; j < 32; ++j) {
      const int ca = code(Kind::q8_1_ref, pa, j), cb = code(Kind::q8_1_cuda, pb, j);
      EXPECT_LE(std::abs(ca - cb), 1);
      code_diffs += ca != cb;
      sum += ca;
      xs += x[blk * 32 + j];
    }
    const double d = ref_fp16_to_fp32(scale_d(pa));
    EXPECT_NEAR(ref_fp16_to_fp32(scale_s(pa)), d * sum, std::fabs(d * sum) * 2e-3 + 1e-3);
    EXPECT_NEAR(ref_fp16_to_fp32(scale_s(pb)), xs, std::fabs(xs) * 2e-3 + 1e-3);
  }
  std::cout << "[  info    ] q8_1 codes differing between conventions: " << code_diffs << "\n";
}

// Inputs on which x / d and x * (1/d) round to different codes, found by
// nudging x = (c + 1/2) * d a few ulps: the two conventions must differ there,
// and each must match its own transcription.
TEST(QuantizeCpu, Q8_1ConventionsDifferWhereDivisionAndReciprocalDisagree) {
  QG_SEEDED_RNG(rng, 62);
  const int64_t rows = 64, k = 32;
  std::vector<float> x(rows * k);
  int discriminating = 0;
  for (int64_t r = 0; r < rows; ++r) {
    float* b = &x[r * k];
    const float amax = qgtest::uniform(rng, 0.01f, 100.0f);
    b[0] = (rng() & 1) ? amax : -amax;
    const float d = amax / 127;
    const float id = 1.0f / d;
    for (int j = 1; j < 32; ++j) {
      const int c = static_cast<int>(rng() % 249) - 124;  // |c + 1/2| <= 124.5 < 127
      const float centre = (static_cast<float>(c) + 0.5f) * d;
      b[j] = centre;
      float lo = centre, hi = centre;
      for (int step = 0; step < 6; ++step) {
        if (std::roundf(hi / d) != std::roundf(hi * id)) { b[j] = hi; ++discriminating; break; }
        if (std::roundf(lo / d) != std::roundf(lo * id)) { b[j] = lo; ++discriminating; break; }
        hi = std::nextafter(hi, kInf);
        lo = std::nextafter(lo, -kInf);
      }
    }
  }
  std::cout << "[  info    ] elements where x/d and x*(1/d) round apart: " << discriminating << "\n";
  ASSERT_GT(discriminating, 50) << "the search for discriminating inputs found too few";
  const std::vector<uint8_t> a = qg_quantize(Kind::q8_1_ref, x, rows, k);
  const std::vector<uint8_t> b = qg_quantize(Kind::q8_1_cuda, x, rows, k);
  expect_same_bytes(Kind::q8_1_ref, a, reference_bytes(Kind::q8_1_ref, x.data(), rows, k), "reference");
  expect_same_bytes(Kind::q8_1_cuda, b, reference_bytes(Kind::q8_1_cuda, x.data(), rows, k), "ggml_cuda");
  expect_same_bytes(Kind::q8_0, qg_quantize(Kind::q8_0, x, rows, k), reference_bytes(Kind::q8_0, x.data(), rows, k),
                    "q8_0");
  int code_diffs = 0;
  for (int64_t blk = 0; blk < rows; ++blk)
    for (int j = 0; j < 32; ++j) code_diffs += code(Kind::q8_1_ref, &a[blk * 36], j) != code(Kind::q8_1_cuda, &b[blk * 36], j);
  EXPECT_EQ(code_diffs, discriminating);
}

}  // namespace
