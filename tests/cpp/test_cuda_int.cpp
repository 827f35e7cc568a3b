// SPDX-License-Identifier: MIT
// test_cuda_int.cpp: the CUDA backend's integer family.
//   GEMM int x int: every pair of i8 / i4 / i4x8 against an int64 reference
//     (int32 output exact; float outputs within the epilogue's roundings),
//     tails, K = 0, zero points, K-major operands, the whole epilogue.
//   GEMM weight-only: i8 / i4 with group scales (and zero points) times
//     f16 / bf16 / f32 activations against float64 (NMSE).
//   quantize / dequantize: the same bytes (codes, scales, zero points) and
//     bits as the CPU backend, for every format, scope, input dtype, with
//     NaN / Inf / all-zero scopes and static scales.
// Each GEMM runs on the generic kernel forced by name and on qg::gemm (what
// the dispatcher picks). Skips cleanly when no CUDA device is visible.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <qg/qg.h>

#include "backend.h"
#include "cuda_test_util.h"
#include "dispatch.h"
#include "test_util.h"
#include "validate.h"

namespace {

using qg::DType;
using qg::Format;
using qg::Granularity;
using qgtest::as_bytes;
using qgtest::DevBytes;

constexpr Format kInts[] = {Format::i8, Format::i4, Format::i4x8};
constexpr uint8_t kSentinel = 0xA5;

class CudaInt : public qgtest::CudaFixture<> {};

// ====================================================================== operands
struct CodeRange {
  int lo, hi;
};
CodeRange range_of(Format f) { return f == Format::i8 ? CodeRange{-128, 127} : CodeRange{-8, 7}; }
int bpb_of(Format f) { return qg::format_traits(f).bytes_per_block; }
int64_t blocks_of(Format f, int64_t k) { return qg::row_blocks(qg::format_traits(f), k); }
DType dtype_of(Format f) { return f == Format::f16 ? DType::f16 : (f == Format::bf16 ? DType::bf16 : DType::f32); }

// One operand on the host: its element values (codes, or the float values
// stored) and its bytes, rows along K either contiguous (row_stride = a
// padded row) or K-major (a [blocks, rows] array: row_stride one block,
// block_stride a padded column of blocks).
struct HostOperand {
  Format format = Format::i8;
  int64_t rows = 0, k = 0;
  std::vector<int32_t> codes;  // integer formats, rows * k
  std::vector<double> values;  // float formats, rows * k (as stored)
  std::vector<uint8_t> bytes;
  int64_t row_stride = 0, block_stride = 0;
};

// Byte j of block b of one row of codes (an odd K's i4 pad nibble is 0).
uint8_t code_byte(Format f, const int32_t* c, int64_t k, int64_t b, int j) {
  if (f == Format::i8) return static_cast<uint8_t>(static_cast<int8_t>(c[b]));
  if (f == Format::i4) {
    const int lo = c[2 * b], hi = 2 * b + 1 < k ? c[2 * b + 1] : 0;
    return static_cast<uint8_t>((lo & 15) | ((hi & 15) << 4));
  }
  const int64_t e = 8 * b + 2 * j;  // i4x8: little-endian word, element i in bits 4i, stored + 8
  return static_cast<uint8_t>((c[e] + 8) | ((c[e + 1] + 8) << 4));
}

void lay_out(HostOperand& op, bool k_major, int64_t pad) {
  const int bpb = bpb_of(op.format);
  const int64_t nb = blocks_of(op.format, op.k);
  if (k_major) {
    op.row_stride = bpb;
    op.block_stride = op.rows * bpb + pad;
    op.bytes.assign(static_cast<size_t>(nb * op.block_stride), kSentinel);
  } else {
    op.row_stride = nb * bpb + pad;
    op.block_stride = 0;
    op.bytes.assign(static_cast<size_t>(op.rows * op.row_stride), kSentinel);
  }
  const int64_t bs = op.block_stride ? op.block_stride : bpb;
  const bool is_int = qg::is_integer_format(op.format);
  for (int64_t r = 0; r < op.rows; ++r)
    for (int64_t b = 0; b < nb; ++b) {
      uint8_t* p = op.bytes.data() + r * op.row_stride + b * bs;
      if (is_int) {
        for (int j = 0; j < bpb; ++j) p[j] = code_byte(op.format, op.codes.data() + r * op.k, op.k, b, j);
      } else {
        double& v = op.values[r * op.k + b];
        v = qgtest::encode_float(p, dtype_of(op.format), static_cast<float>(v));
      }
    }
}

HostOperand int_operand(Format f, int64_t rows, int64_t k, std::mt19937_64& rng, bool k_major, int64_t pad) {
  HostOperand op;
  op.format = f;
  op.rows = rows;
  op.k = k;
  const CodeRange c = range_of(f);
  std::uniform_int_distribution<int> dist(c.lo, c.hi);
  op.codes.resize(static_cast<size_t>(rows * k));
  for (auto& v : op.codes) v = dist(rng);
  lay_out(op, k_major, pad);
  return op;
}

HostOperand float_operand(Format f, int64_t rows, int64_t k, std::mt19937_64& rng, bool k_major, int64_t pad) {
  HostOperand op;
  op.format = f;
  op.rows = rows;
  op.k = k;
  op.values.resize(static_cast<size_t>(rows * k));
  for (auto& v : op.values) v = qgtest::uniform(rng, -1.0f, 1.0f);
  lay_out(op, k_major, pad);
  return op;
}

qg::Operand operand_of(const HostOperand& h, const DevBytes& d) {
  qg::Operand op;
  op.data = d.ptr();
  op.format = h.format;
  op.rows = h.rows;
  op.k = h.k;
  op.row_stride = h.row_stride;
  op.block_stride = h.block_stride;
  return op;
}

// ====================================================================== C
// The whole C buffer: a front guard, the elements at c + i * ldc + j * ldc_n,
// gaps, a tail; every slot starts as a poison value no kernel writes.
constexpr int64_t kFront = 16;
constexpr uint32_t kPoisonI32 = 0x7A5A5A5Au;

struct CBuffer {
  DType dtype = DType::f32;
  int64_t m = 0, n = 0, ldc = 0, ldc_n = 1;
  std::vector<uint8_t> init, out;
  int64_t es() const { return qg::dtype_size(dtype); }
  int64_t offset(int64_t i, int64_t j) const { return kFront + (i * ldc + j * ldc_n) * es(); }
  double value_in(int64_t i, int64_t j) const { return qgtest::decode_float(&init[offset(i, j)], dtype); }
};

void poison_slot(uint8_t* p, DType d) {
  if (d == DType::i32) std::memcpy(p, &kPoisonI32, 4);
  else qgtest::poison_element(p, d);
}
bool is_poison_slot(const uint8_t* p, DType d) {
  if (d == DType::i32) return std::memcmp(p, &kPoisonI32, 4) == 0;
  return qgtest::is_poison_element(p, d);
}

CBuffer make_c(DType dt, int64_t m, int64_t n, bool transposed, int64_t pad, std::mt19937_64& rng, bool values) {
  CBuffer c;
  c.dtype = dt;
  c.m = m;
  c.n = n;
  c.ldc = transposed ? 1 : n + pad;
  c.ldc_n = transposed ? m + pad : 1;
  const int64_t extent = (m - 1) * c.ldc + (n - 1) * c.ldc_n + 1;
  const int64_t slots = kFront / c.es() + extent + 7;
  c.init.resize(static_cast<size_t>(slots * c.es()));
  for (int64_t s = 0; s < slots; ++s) poison_slot(&c.init[s * c.es()], dt);
  if (values)
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j)
        qgtest::encode_float(&c.init[c.offset(i, j)], dt, qgtest::uniform(rng, -4.0f, 4.0f));
  return c;
}

// Bytes outside C's elements must come back unchanged.
void expect_gaps_untouched(const CBuffer& c) {
  std::vector<char> element(c.init.size(), 0);
  for (int64_t i = 0; i < c.m; ++i)
    for (int64_t j = 0; j < c.n; ++j) std::memset(&element[c.offset(i, j)], 1, static_cast<size_t>(c.es()));
  int bad = 0;
  for (size_t b = 0; b < c.init.size(); ++b)
    if (!element[b] && c.out[b] != c.init[b] && ++bad <= 3)
      ADD_FAILURE() << "C buffer byte " << b << " (a gap) was written";
  EXPECT_EQ(bad, 0);
}

// ====================================================================== running a GEMM
// Runs g on the registry entry `kernel` serving its formats, or on qg::gemm
// for "dispatch". False when that kernel does not admit g (why says why).
bool run_gemm(const std::string& kernel, const qg::GemmArgs& g, std::string* why) {
  if (const qg::Status v = qg::detail::check_gemm_args(g); !v.ok()) {
    ADD_FAILURE() << "the test built arguments qg rejects: " << v.message();
    return false;
  }
  qg::Status s;
  if (kernel == "dispatch") {
    s = qg::gemm(g);
  } else {
    const qg::detail::GemmKernel* k = nullptr;
    for (const qg::detail::GemmKernel& e : qg::detail::cuda::registry().gemm)
      if (kernel == e.name && e.a_format == g.a.format && e.b_format == g.b.format) k = &e;
    if (!k) {
      ADD_FAILURE() << "no CUDA kernel " << kernel << " for " << qg::format_traits(g.a.format).name << " x "
                    << qg::format_traits(g.b.format).name;
      return false;
    }
    if (!qgtest::gemm_kernel_admits(*k, g, why)) return false;
    s = k->run(g, nullptr);
  }
  const cudaError_t err = cudaDeviceSynchronize();
  EXPECT_EQ(err, cudaSuccess) << cudaGetErrorName(err) << ": " << cudaGetErrorString(err);
  EXPECT_TRUE(s.ok()) << kernel << ": " << qg::status_code_name(s.code()) << ": " << s.message();
  return s.ok() && err == cudaSuccess;
}

const char* const kGenericAndDispatch[] = {"cuda_int_generic", "dispatch"};

// ====================================================================== int x int
struct IntGemm {
  Format fa = Format::i8, fb = Format::i8;
  int64_t m = 1, n = 1, k = 1;
  bool a_k_major = false, b_k_major = false;
  int64_t a_pad = 0, b_pad = 0;
  DType c_dtype = DType::i32;
  bool c_transposed = false;
  int64_t c_pad = 0;
  int za = 0, zb = 0;  // zero points: 0 none, 1 one for all rows, 2 one per row
  int scales = 0;      // 0 none, 1 row and column scales of one value, 2 per row / column
  float alpha = 1.0f, beta = 0.0f;
  bool bias = false;
  DType bias_dtype = DType::f32;
  bool relu = false;
  size_t offset = 0;  // bytes past a 256-byte boundary, for every buffer (odd: misaligned)

  std::string describe() const {
    return std::string(qg::format_traits(fa).name) + " x " + qg::format_traits(fb).name + " M=" + std::to_string(m) +
           " N=" + std::to_string(n) + " K=" + std::to_string(k) + " offset=" + std::to_string(offset) +
           " a_k_major=" + std::to_string(a_k_major) +
           " b_k_major=" + std::to_string(b_k_major) + " pads=" + std::to_string(a_pad) + "," + std::to_string(b_pad) +
           " out=" + qg::dtype_name(c_dtype) + (c_transposed ? " transposed" : "") + " c_pad=" + std::to_string(c_pad) +
           " za=" + std::to_string(za) + " zb=" + std::to_string(zb) + " scales=" + std::to_string(scales) +
           " alpha=" + std::to_string(alpha) + " beta=" + std::to_string(beta) +
           (bias ? std::string(" bias ") + qg::dtype_name(bias_dtype) : "") + (relu ? " relu" : "");
  }
};

std::vector<int32_t> zero_points(int mode, int64_t rows, Format f, std::mt19937_64& rng) {
  if (mode == 0) return {};
  const CodeRange c = range_of(f);
  std::uniform_int_distribution<int> dist(c.lo, c.hi);
  std::vector<int32_t> z(static_cast<size_t>(mode == 1 ? 1 : rows));
  for (auto& v : z) v = dist(rng);
  return z;
}

// Runs one case on `kernel` and checks every element: int32 output exactly
// the int64 sum, float outputs within the float epilogue's roundings.
void check_int_gemm(const IntGemm& cfg, std::mt19937_64& rng, const std::string& kernel) {
  SCOPED_TRACE(kernel + ": " + cfg.describe());
  const HostOperand a = int_operand(cfg.fa, cfg.m, cfg.k, rng, cfg.a_k_major, cfg.a_pad);
  const HostOperand b = int_operand(cfg.fb, cfg.n, cfg.k, rng, cfg.b_k_major, cfg.b_pad);
  const std::vector<int32_t> za = zero_points(cfg.za, cfg.m, cfg.fa, rng), zb = zero_points(cfg.zb, cfg.n, cfg.fb, rng);
  std::vector<float> rs, cs;
  auto scale = [&] { return qgtest::uniform(rng, 0.25f, 2.0f) * ((rng() & 1) ? 1.0f : -1.0f); };
  if (cfg.scales) {
    rs.resize(cfg.scales == 1 ? 1 : static_cast<size_t>(cfg.m));
    cs.resize(cfg.scales == 1 ? 1 : static_cast<size_t>(cfg.n));
    for (auto& v : rs) v = scale();
    for (auto& v : cs) v = scale();
  }
  std::vector<uint8_t> bias;
  if (cfg.bias) {
    const int bs = qg::dtype_size(cfg.bias_dtype);
    bias.resize(static_cast<size_t>(cfg.m * bs));
    for (int64_t i = 0; i < cfg.m; ++i)
      qgtest::encode_float(&bias[i * bs], cfg.bias_dtype, qgtest::uniform(rng, -8.0f, 8.0f));
  }
  // Float16 / bfloat16 outputs: alpha brings the largest sum near 256.
  float alpha = cfg.alpha;
  if (cfg.c_dtype == DType::f16 || cfg.c_dtype == DType::bf16) {
    const double big = std::max<double>(1.0, static_cast<double>(cfg.k) * (cfg.za ? 255 : 128) * (cfg.zb ? 255 : 128));
    alpha *= static_cast<float>(std::ldexp(256.0, -static_cast<int>(std::ceil(std::log2(big)))));
  }
  CBuffer c = make_c(cfg.c_dtype, cfg.m, cfg.n, cfg.c_transposed, cfg.c_pad, rng, cfg.beta != 0.0f);

  const size_t o = cfg.offset;
  DevBytes da(a.bytes, o), db(b.bytes, o), dza(as_bytes(za), o), dzb(as_bytes(zb), o), drs(as_bytes(rs), o),
      dcs(as_bytes(cs), o), dbias(bias, o), dc(c.init, o);
  qg::GemmArgs g;
  g.a = operand_of(a, da);
  g.b = operand_of(b, db);
  g.c = dc.ptr() + kFront;
  g.c_dtype = cfg.c_dtype;
  g.ldc = c.ldc;
  g.ldc_n = c.ldc_n;
  g.epilogue.alpha = alpha;
  g.epilogue.beta = cfg.beta;
  g.epilogue.row_scale = drs.as<float>();
  g.epilogue.col_scale = dcs.as<float>();
  g.epilogue.row_scale_scalar = g.epilogue.col_scale_scalar = cfg.scales == 1;
  g.epilogue.row_zero_point = dza.as<int32_t>();
  g.epilogue.col_zero_point = dzb.as<int32_t>();
  g.epilogue.row_zero_point_scalar = cfg.za == 1;
  g.epilogue.col_zero_point_scalar = cfg.zb == 1;
  g.epilogue.bias = dbias.ptr();
  g.epilogue.bias_dtype = cfg.bias_dtype;
  g.epilogue.activation = cfg.relu ? qg::Activation::relu : qg::Activation::none;
  g.device = qg::Device::cuda(0);
  std::string why;
  if (!run_gemm(kernel, g, &why)) {
    if (!why.empty()) ADD_FAILURE() << kernel << " refused: " << why;
    return;
  }
  c.out = dc.read();
  EXPECT_EQ(da.read(), a.bytes) << "a was written";
  EXPECT_EQ(db.read(), b.bytes) << "b was written";

  const double eps = std::ldexp(1.0, -24);
  double half_ulp = 0, tiny = 1e-44;
  if (cfg.c_dtype == DType::f16) half_ulp = std::ldexp(1.0, -11), tiny = std::ldexp(1.0, -25);
  if (cfg.c_dtype == DType::bf16) half_ulp = std::ldexp(1.0, -8), tiny = std::ldexp(1.0, -133);
  int wrong = 0;
  for (int64_t i = 0; i < cfg.m; ++i)
    for (int64_t j = 0; j < cfg.n; ++j) {
      const int64_t zai = za.empty() ? 0 : za[cfg.za == 1 ? 0 : i];
      const int64_t zbj = zb.empty() ? 0 : zb[cfg.zb == 1 ? 0 : j];
      int64_t acc = 0;
      for (int64_t e = 0; e < cfg.k; ++e) acc += (a.codes[i * cfg.k + e] - zai) * (b.codes[j * cfg.k + e] - zbj);
      const uint8_t* p = &c.out[c.offset(i, j)];
      if (is_poison_slot(p, cfg.c_dtype)) {
        if (++wrong <= 5) ADD_FAILURE() << "C[" << i << ", " << j << "] was not written";
        continue;
      }
      if (cfg.c_dtype == DType::i32) {
        int32_t got;
        std::memcpy(&got, p, 4);
        const int64_t want = cfg.relu && acc < 0 ? 0 : acc;
        if (got != want && ++wrong <= 5)
          ADD_FAILURE() << "C[" << i << ", " << j << "] = " << got << ", exactly " << want << " expected";
        continue;
      }
      double s = alpha;
      if (!rs.empty()) s *= rs[cfg.scales == 1 ? 0 : i];
      if (!cs.empty()) s *= cs[cfg.scales == 1 ? 0 : j];
      double v = static_cast<double>(acc) * s, t = std::fabs(v);
      if (cfg.beta != 0.0f) {
        const double old = static_cast<double>(cfg.beta) * c.value_in(i, j);
        v += old;
        t += std::fabs(old);
      }
      if (cfg.bias) {
        const double bv = qgtest::decode_float(&bias[i * qg::dtype_size(cfg.bias_dtype)], cfg.bias_dtype);
        v += bv;
        t += std::fabs(bv);
      }
      if (cfg.relu && v < 0) v = 0;
      const double f32_err = 8 * eps * t;  // int -> float, alpha, two scales, beta * C, two adds
      const double bound = f32_err + half_ulp * (std::fabs(v) + f32_err) + tiny;
      const double got = qgtest::decode_float(p, cfg.c_dtype);
      if (!(std::fabs(got - v) <= bound) && ++wrong <= 5)
        ADD_FAILURE() << "C[" << i << ", " << j << "] = " << got << ", reference " << v << " (integer sum " << acc
                      << ", allowed error " << bound << ")";
    }
  EXPECT_EQ(wrong, 0);
  expect_gaps_untouched(c);
}

// K values each pair takes: i4x8 needs multiples of 8; i4 pads an odd K.
std::vector<int64_t> tail_ks(Format fa, Format fb) {
  if (fa == Format::i4x8 || fb == Format::i4x8) return {0, 8, 32, 64, 72};
  return {0, 1, 7, 33, 65};
}

TEST_F(CudaInt, GemmEveryPairAndTail) {
  QG_SEEDED_RNG(rng, 1);
  struct MN {
    int64_t m, n;
  };
  for (const char* kernel : kGenericAndDispatch)
    for (Format fa : kInts)
      for (Format fb : kInts)
        for (const MN& s : {MN{1, 1}, MN{7, 33}, MN{65, 7}, MN{33, 65}})
          for (int64_t k : tail_ks(fa, fb))
            for (DType out : {DType::i32, DType::f32}) {
              IntGemm cfg;
              cfg.fa = fa;
              cfg.fb = fb;
              cfg.m = s.m;
              cfg.n = s.n;
              cfg.k = k;
              cfg.c_dtype = out;
              check_int_gemm(cfg, rng, kernel);
            }
}

// Codes at the ends of their ranges: -128 * -128 sums (the int32 limit's
// worst case, wrapping inside the kernel where zero points are applied).
TEST_F(CudaInt, GemmExtremeCodes) {
  QG_SEEDED_RNG(rng, 2);
  for (const char* kernel : kGenericAndDispatch) {
    // i8 x i8, all codes -128, K at the validation limit: 131071 * 16384 < 2^31.
    IntGemm cfg;
    cfg.m = 3;
    cfg.n = 2;
    cfg.k = 131071;
    SCOPED_TRACE(cfg.describe());
    std::vector<uint8_t> a(static_cast<size_t>(cfg.m * cfg.k), 0x80), b(static_cast<size_t>(cfg.n * cfg.k), 0x80);
    CBuffer c = make_c(DType::i32, cfg.m, cfg.n, false, 0, rng, false);
    DevBytes da(a), db(b), dc(c.init);
    qg::GemmArgs g;
    g.a = qg::packed_operand(da.ptr(), Format::i8, cfg.m, cfg.k);
    g.b = qg::packed_operand(db.ptr(), Format::i8, cfg.n, cfg.k);
    g.c = dc.ptr() + kFront;
    g.c_dtype = DType::i32;
    g.ldc = c.ldc;
    g.device = qg::Device::cuda(0);
    std::string why;
    ASSERT_TRUE(run_gemm(kernel, g, &why)) << why;
    c.out = dc.read();
    for (int64_t i = 0; i < cfg.m; ++i)
      for (int64_t j = 0; j < cfg.n; ++j) {
        int32_t got;
        std::memcpy(&got, &c.out[c.offset(i, j)], 4);
        EXPECT_EQ(got, 131071 * 16384) << "C[" << i << ", " << j << "]";
      }
    expect_gaps_untouched(c);
  }
}

TEST_F(CudaInt, GemmZeroPoints) {
  QG_SEEDED_RNG(rng, 3);
  const std::pair<Format, Format> pairs[] = {
      {Format::i8, Format::i8}, {Format::i4, Format::i4}, {Format::i8, Format::i4}, {Format::i4, Format::i8}};
  for (const char* kernel : kGenericAndDispatch)
    for (const auto& p : pairs)
      for (int za : {0, 1, 2})
        for (int zb : {0, 1, 2})
          for (DType out : {DType::i32, DType::f32})
            for (int64_t k : {33, 64}) {
              IntGemm cfg;
              cfg.fa = p.first;
              cfg.fb = p.second;
              cfg.m = 17;
              cfg.n = 9;
              cfg.k = k;
              cfg.za = za;
              cfg.zb = zb;
              cfg.c_dtype = out;
              cfg.relu = za == 2 && zb == 1;
              check_int_gemm(cfg, rng, kernel);
            }
}

// Operands as [K-blocks, rows] arrays (seed 001's B [K, N], seed 003's
// [K/8, N] words): row_stride one block, block_stride a (padded) column.
TEST_F(CudaInt, GemmKMajorOperands) {
  QG_SEEDED_RNG(rng, 4);
  for (const char* kernel : kGenericAndDispatch)
    for (Format fa : kInts)
      for (Format fb : kInts)
        for (int layout = 1; layout < 4; ++layout) {
          IntGemm cfg;
          cfg.fa = fa;
          cfg.fb = fb;
          cfg.m = 19;
          cfg.n = 11;
          cfg.k = (fa == Format::i4x8 || fb == Format::i4x8) ? 72 : 39;
          cfg.a_k_major = layout & 1;
          cfg.b_k_major = layout & 2;
          cfg.a_pad = layout == 3 ? 3 : 0;
          cfg.b_pad = layout == 2 ? 0 : 5;
          cfg.za = fa == Format::i4x8 ? 0 : 2;
          cfg.zb = fb == Format::i4x8 ? 0 : 1;
          check_int_gemm(cfg, rng, kernel);
          cfg.c_dtype = DType::f32;
          cfg.scales = 2;
          check_int_gemm(cfg, rng, kernel);
        }
}

// int8 x int8 with B, and A too, stored K-major (seed 001's B [K, N]):
// cuda_i8_repacked copies them to K-contiguous rows and dispatches again, so
// the tensor-core kernels run them (M and N from 1 to past the warpgroup
// kernel's 128, K with and without a 16-byte multiple); bit-exact int32 and
// the float epilogue, the callers' operands unwritten (check_int_gemm).
TEST_F(CudaInt, GemmKMajorInt8Repacked) {
  QG_SEEDED_RNG(rng, 14);
  struct Shape {
    int64_t m, n, k;
  };
  // Row counts a multiple of 16 with unpadded columns (K-steps 16-byte
  // aligned) take the line kernel with 16-byte loads, other multiples of 4
  // (200, 300 rows) the same kernel with word loads, the rest and the padded
  // column (b_pad 5) the any-stride one; K % 4 != 0 is refused (dispatch
  // then runs cuda_int_generic on the operands in place).
  for (const Shape& sh : {Shape{1, 3, 1}, Shape{9, 1, 7}, Shape{32, 16, 64}, Shape{33, 70, 65}, Shape{5, 130, 300},
                          Shape{256, 512, 1024}, Shape{130, 300, 1024}, Shape{200, 129, 4100}})
    for (int layout = 1; layout < 4; ++layout) {
      IntGemm cfg;
      cfg.m = sh.m;
      cfg.n = sh.n;
      cfg.k = sh.k;
      cfg.a_k_major = layout & 1;
      cfg.b_k_major = layout & 2;
      cfg.b_pad = layout == 3 ? 5 : 0;
      // One row stored K-major is contiguous along K all the same: nothing to repack.
      const bool a_rows = !cfg.a_k_major || cfg.m == 1, b_rows = !cfg.b_k_major || (cfg.n == 1 && cfg.b_pad == 0);
      check_int_gemm(cfg, rng, (a_rows && b_rows) || cfg.k % 4 != 0 ? "dispatch" : "cuda_i8_repacked");
      cfg.c_dtype = DType::f32;
      cfg.scales = 2;
      cfg.bias = true;
      cfg.relu = true;
      check_int_gemm(cfg, rng, "dispatch");
      cfg.c_dtype = DType::i32;
      cfg.scales = 0;
      cfg.bias = cfg.relu = false;
      cfg.za = cfg.zb = 2;
      check_int_gemm(cfg, rng, "dispatch");
      if (HasFailure()) return;
    }
  // Columns padded to 16-byte multiples around row counts that are not
  // (30 rows in 32 bytes, 200 in 208, 300 in 304: a second CTA of rows with
  // the tail): the 16-byte kernel with its byte path for the last piece and
  // a K tail; then every buffer at an odd address (the any-stride kernel).
  IntGemm padded;
  padded.m = 30;
  padded.n = 200;
  padded.k = 100;
  padded.a_k_major = padded.b_k_major = true;
  padded.a_pad = 2;
  padded.b_pad = 8;
  check_int_gemm(padded, rng, "cuda_i8_repacked");
  IntGemm second_cta = padded;
  second_cta.n = 300;
  second_cta.b_pad = 4;
  second_cta.k = 1100;
  check_int_gemm(second_cta, rng, "cuda_i8_repacked");
  padded.offset = 1;
  padded.c_dtype = DType::f16;
  padded.scales = 1;
  check_int_gemm(padded, rng, "cuda_i8_repacked");
  // Dispatch names it for a K-major B, and it refuses operands already contiguous along K.
  HostOperand a = int_operand(Format::i8, 256, 512, rng, false, 0), b = int_operand(Format::i8, 256, 512, rng, true, 0);
  DevBytes da(a.bytes, 0), db(b.bytes, 0);
  std::vector<uint8_t> c_bytes(256 * 256 * 4);
  DevBytes dc(c_bytes, 0);
  qg::GemmArgs g;
  g.a = operand_of(a, da);
  g.b = operand_of(b, db);
  g.c = dc.ptr();
  g.c_dtype = DType::i32;
  g.ldc = 256;
  g.device = qg::Device::cuda(0);
  qg::Explanation ex;
  QG_OK(qg::explain(g, &ex));
  EXPECT_EQ(ex.chosen, "cuda_i8_repacked");
  const HostOperand b_rows = int_operand(Format::i8, 256, 512, rng, false, 0);
  DevBytes db_rows(b_rows.bytes, 0);
  g.b = operand_of(b_rows, db_rows);
  const qg::detail::GemmKernel* repacked = nullptr;
  for (const qg::detail::GemmKernel& k : qg::detail::cuda::registry().gemm)
    if (std::string(k.name) == "cuda_i8_repacked") repacked = &k;
  ASSERT_NE(repacked, nullptr);
  std::string why;
  EXPECT_FALSE(repacked->can_run(g, &why));
  EXPECT_NE(why.find("contiguous along K"), std::string::npos) << why;
  // K % 4 != 0: no int8 kernel would take the copy.
  HostOperand b7 = int_operand(Format::i8, 256, 7, rng, true, 0), a7 = int_operand(Format::i8, 256, 7, rng, false, 0);
  DevBytes db7(b7.bytes, 0), da7(a7.bytes, 0);
  g.a = operand_of(a7, da7);
  g.b = operand_of(b7, db7);
  EXPECT_FALSE(repacked->can_run(g, &why));
  EXPECT_NE(why.find("multiple of 4"), std::string::npos) << why;
}

// Row-major operands with padded rows at odd strides, then every buffer
// (operands, C, zero points, scales, bias) at an odd address: byte loads and
// the epilogue's unaligned-safe stores everywhere.
TEST_F(CudaInt, GemmPaddedRowsAndMisalignedBuffers) {
  QG_SEEDED_RNG(rng, 5);
  for (const char* kernel : kGenericAndDispatch)
    for (Format fa : kInts)
      for (Format fb : kInts) {
        IntGemm cfg;
        cfg.fa = fa;
        cfg.fb = fb;
        cfg.m = 23;
        cfg.n = 14;
        cfg.k = 136;
        cfg.a_pad = 1;
        cfg.b_pad = 7;
        check_int_gemm(cfg, rng, kernel);
        cfg.offset = 1;
        cfg.za = fa == Format::i4x8 ? 0 : 2;
        cfg.zb = fb == Format::i4x8 ? 0 : 2;
        check_int_gemm(cfg, rng, kernel);
        cfg.za = cfg.zb = 0;
        cfg.c_dtype = DType::f16;
        cfg.scales = 2;
        cfg.bias = true;
        cfg.bias_dtype = DType::bf16;
        cfg.c_transposed = true;
        check_int_gemm(cfg, rng, kernel);
      }
}

TEST_F(CudaInt, GemmEpilogue) {
  QG_SEEDED_RNG(rng, 6);
  const std::pair<Format, Format> pairs[] = {
      {Format::i8, Format::i8}, {Format::i4x8, Format::i4x8}, {Format::i4, Format::i8}, {Format::i4, Format::i4}};
  for (const char* kernel : kGenericAndDispatch)
    for (const auto& p : pairs)
      for (DType out : {DType::f32, DType::f16, DType::bf16})
        for (int variant = 0; variant < 6; ++variant) {
          IntGemm cfg;
          cfg.fa = p.first;
          cfg.fb = p.second;
          cfg.m = 21;
          cfg.n = 13;
          cfg.k = p.first == Format::i4x8 ? 96 : 97;
          cfg.c_dtype = out;
          switch (variant) {
            case 0: cfg.scales = 2; break;
            case 1: cfg.scales = 1; cfg.c_transposed = true; break;
            case 2: cfg.bias = true; cfg.bias_dtype = DType::f32; cfg.relu = true; break;
            case 3: cfg.bias = true; cfg.bias_dtype = DType::f16; cfg.alpha = -0.75f; cfg.c_pad = 3; break;
            case 4: cfg.beta = 0.5f; cfg.bias = true; cfg.bias_dtype = DType::bf16; cfg.scales = 2; break;
            default:
              cfg.scales = 2;
              cfg.bias = true;
              cfg.relu = true;
              cfg.beta = -1.5f;
              cfg.alpha = 1.25f;
              cfg.c_transposed = true;
              cfg.c_pad = 2;
              cfg.za = p.first == Format::i4x8 ? 0 : 2;
              cfg.zb = p.second == Format::i4x8 ? 0 : 2;
              break;
          }
          check_int_gemm(cfg, rng, kernel);
        }
}

// More outputs than the grid cap of threads (2^20 CTAs x 128): the kernel's
// grid-stride loop covers the rest. i4 x i4, K = 1: every output is exact in
// float16 (|acc| <= 64), which keeps C at 288 MB.
TEST_F(CudaInt, GemmGridStrideBeyondTheGridCap) {
  QG_SEEDED_RNG(rng, 7);
  const int64_t m = 12000, n = 12000;
  const HostOperand a = int_operand(Format::i4, m, 1, rng, false, 0);
  const HostOperand b = int_operand(Format::i4, n, 1, rng, false, 0);
  const size_t c_bytes = static_cast<size_t>(m * n * 2);
  DevBytes da(a.bytes), db(b.bytes);
  void* dc = nullptr;
  if (cudaMalloc(&dc, c_bytes) != cudaSuccess) {
    cudaGetLastError();
    GTEST_SKIP() << "no room for a " << c_bytes << "-byte C";
  }
  CUDA_OK(cudaMemset(dc, 0xFF, c_bytes));
  qg::GemmArgs g;
  g.a = operand_of(a, da);
  g.b = operand_of(b, db);
  g.c = dc;
  g.c_dtype = DType::f16;
  g.ldc = n;
  g.device = qg::Device::cuda(0);
  std::string why;
  const bool ran = run_gemm("cuda_int_generic", g, &why);
  std::vector<uint16_t> c(static_cast<size_t>(m * n));
  const cudaError_t copy = cudaMemcpy(c.data(), dc, c_bytes, cudaMemcpyDeviceToHost);
  cudaFree(dc);
  ASSERT_TRUE(ran) << why;
  ASSERT_EQ(copy, cudaSuccess);
  int64_t wrong = 0;
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      const double want = static_cast<double>(a.codes[i]) * b.codes[j];
      const double got = qgtest::ref_fp16_to_fp32(c[i * n + j]);
      if (got != want && ++wrong <= 5) ADD_FAILURE() << "C[" << i << ", " << j << "] = " << got << ", want " << want;
    }
  EXPECT_EQ(wrong, 0);
}

// ====================================================================== weight-only
struct WoGemm {
  Format fa = Format::i4, fb = Format::f16;
  int64_t m = 1, n = 1, k = 32, group = 32;
  DType scale_dtype = DType::f32;
  int zp = 0;  // 0 none, 1 int8, 2 int32
  int64_t scale_pad = 0;  // elements past the groups of a row
  bool b_k_major = false;
  DType c_dtype = DType::f32;
  bool bias = false;
  size_t offset = 0;  // bytes past a 256-byte boundary, for every buffer

  std::string describe() const {
    return std::string(qg::format_traits(fa).name) + " x " + qg::format_traits(fb).name + " M=" + std::to_string(m) +
           " N=" + std::to_string(n) + " K=" + std::to_string(k) + " group=" + std::to_string(group) +
           " offset=" + std::to_string(offset) +
           " scales " + qg::dtype_name(scale_dtype) + " zp=" + std::to_string(zp) +
           " scale_pad=" + std::to_string(scale_pad) + " b_k_major=" + std::to_string(b_k_major) +
           " out=" + qg::dtype_name(c_dtype) + (bias ? " bias" : "");
  }
};

void check_wo_gemm(const WoGemm& cfg, std::mt19937_64& rng, const std::string& kernel) {
  SCOPED_TRACE(kernel + ": " + cfg.describe());
  const HostOperand a = int_operand(cfg.fa, cfg.m, cfg.k, rng, false, 0);
  const HostOperand b = float_operand(cfg.fb, cfg.n, cfg.k, rng, cfg.b_k_major, cfg.b_k_major ? 6 : 2);
  const int64_t groups = cfg.k / cfg.group, srow = groups + cfg.scale_pad;
  const int ss = qg::dtype_size(cfg.scale_dtype);
  std::vector<uint8_t> scales(static_cast<size_t>(cfg.m * srow * ss), kSentinel), zps;
  std::vector<double> s(static_cast<size_t>(cfg.m * groups)), z(static_cast<size_t>(cfg.m * groups), 0.0);
  const CodeRange cr = range_of(cfg.fa);
  std::uniform_int_distribution<int> zdist(cr.lo, cr.hi);
  if (cfg.zp) zps.assign(static_cast<size_t>(cfg.m * srow * (cfg.zp == 1 ? 1 : 4)), kSentinel);
  for (int64_t r = 0; r < cfg.m; ++r)
    for (int64_t gi = 0; gi < groups; ++gi) {
      const int64_t at = r * srow + gi;
      s[r * groups + gi] = qgtest::encode_float(&scales[at * ss], cfg.scale_dtype,
                                                qgtest::uniform(rng, 0.002f, 0.02f) * ((rng() & 1) ? 1.0f : -1.0f));
      if (cfg.zp) {
        const int32_t zv = zdist(rng);
        z[r * groups + gi] = zv;
        if (cfg.zp == 1) zps[at] = static_cast<uint8_t>(static_cast<int8_t>(zv));
        else std::memcpy(&zps[at * 4], &zv, 4);
      }
    }
  std::vector<uint8_t> bias;
  if (cfg.bias) {
    bias.resize(static_cast<size_t>(cfg.m * 4));
    for (int64_t i = 0; i < cfg.m; ++i)
      qgtest::encode_float(&bias[i * 4], DType::f32, qgtest::uniform(rng, -1.0f, 1.0f));
  }
  CBuffer c = make_c(cfg.c_dtype, cfg.m, cfg.n, false, 1, rng, false);

  const size_t o = cfg.offset;
  DevBytes da(a.bytes, o), db(b.bytes, o), dscales(scales, o), dzps(zps, o), dbias(bias, o), dc(c.init, o);
  qg::GemmArgs g;
  g.a = operand_of(a, da);
  g.a.scales = {dscales.ptr(), cfg.scale_dtype, Granularity::group, cfg.group, srow};
  if (cfg.zp) g.a.zero_points = {dzps.ptr(), cfg.zp == 1 ? DType::i8 : DType::i32, Granularity::group, cfg.group, srow};
  g.b = operand_of(b, db);
  g.c = dc.ptr() + kFront;
  g.c_dtype = cfg.c_dtype;
  g.ldc = c.ldc;
  g.ldc_n = c.ldc_n;
  g.epilogue.bias = dbias.ptr();
  g.device = qg::Device::cuda(0);
  std::string why;
  if (!run_gemm(kernel, g, &why)) {
    if (!why.empty()) ADD_FAILURE() << kernel << " refused: " << why;
    return;
  }
  c.out = dc.read();
  double num = 0, den = 0;
  int bad = 0;
  for (int64_t i = 0; i < cfg.m; ++i)
    for (int64_t j = 0; j < cfg.n; ++j) {
      double want = 0;
      for (int64_t e = 0; e < cfg.k; ++e) {
        const int64_t gi = i * groups + e / cfg.group;
        want += s[gi] * (a.codes[i * cfg.k + e] - z[gi]) * b.values[j * cfg.k + e];
      }
      if (cfg.bias) want += qgtest::decode_float(&bias[i * 4], DType::f32);
      const double got = qgtest::decode_float(&c.out[c.offset(i, j)], cfg.c_dtype);
      if (!std::isfinite(got)) {
        if (++bad <= 5) ADD_FAILURE() << "C[" << i << ", " << j << "] = " << got << " (unwritten or non-finite)";
        continue;
      }
      num += (got - want) * (got - want);
      den += want * want;
    }
  EXPECT_EQ(bad, 0);
  // bfloat16 output alone costs about 2^-9 / sqrt(3) relative: NMSE ~1e-6.
  const double limit = cfg.c_dtype == DType::bf16 ? 1e-5 : 1e-6;
  EXPECT_LE(den > 0 ? num / den : num, limit) << "NMSE vs float64";
  expect_gaps_untouched(c);
}

TEST_F(CudaInt, GemmWeightOnly) {
  QG_SEEDED_RNG(rng, 10);
  struct Shape {
    int64_t m, n, k;
  };
  const Shape shapes[] = {{33, 7, 256}, {1, 1, 128}, {65, 17, 384}};
  const DType scale_dtypes[] = {DType::f32, DType::f16, DType::bf16};
  int variant = 0;
  for (const char* kernel : {"cuda_wo_generic", "dispatch"})
    for (Format fa : {Format::i8, Format::i4})
      for (Format fb : {Format::f16, Format::bf16, Format::f32})
        for (int64_t group : {32, 64, 128})
          for (int zp : {0, 1, 2}) {
            ++variant;
            const Shape& s = shapes[variant % 3];
            WoGemm cfg;
            cfg.fa = fa;
            cfg.fb = fb;
            cfg.m = s.m;
            cfg.n = s.n;
            cfg.k = s.k;
            cfg.group = group;
            cfg.zp = zp;
            cfg.scale_dtype = scale_dtypes[(variant / 3) % 3];
            cfg.scale_pad = variant % 2;
            cfg.b_k_major = variant % 5 == 0;
            cfg.c_dtype = variant % 7 == 0 ? DType::f16 : (variant % 11 == 0 ? DType::bf16 : DType::f32);
            cfg.bias = variant % 4 == 0;
            cfg.offset = variant % 3 == 1 ? 1 : 0;
            check_wo_gemm(cfg, rng, kernel);
          }
}

// ====================================================================== quantize
struct Quant {
  Format f = Format::i8;
  bool asymmetric = false;
  Granularity gran = Granularity::row;
  int64_t group = 0;
  DType dt = DType::f32;
  int64_t rows = 1, k = 32, x_pad = 0, y_pad = 0;
  // 0 none; 1 NaN, +-Inf, all-zero and -0.0 scopes; 2 every value 0; 3 +Inf only;
  // 4 the largest and smallest values at the end of the last row
  int specials = 0;
  bool given = false;  // static scales (and zero points)
  size_t offset = 0;   // x, codes (and scales, but a tensor scope's dynamic ones) this many bytes off alignment

  std::string describe() const {
    const char* g = gran == Granularity::tensor ? "tensor" : (gran == Granularity::row ? "row" : "group");
    return std::string(qg::format_traits(f).name) + (asymmetric ? " asymmetric" : " symmetric") + " " + g +
           (gran == Granularity::group ? "(" + std::to_string(group) + ")" : "") + " x " + qg::dtype_name(dt) +
           " rows=" + std::to_string(rows) + " k=" + std::to_string(k) + " pads=" + std::to_string(x_pad) + "," +
           std::to_string(y_pad) + " specials=" + std::to_string(specials) + (given ? " static" : " dynamic") +
           " offset=" + std::to_string(offset);
  }
  int64_t groups() const { return gran == Granularity::group ? k / group : 1; }
  int64_t scopes() const { return gran == Granularity::tensor ? 1 : rows * groups(); }
};

std::vector<float> quant_values(const Quant& q, std::mt19937_64& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const float row_scale[] = {1.0f, 0.01f, 100.0f, 3.0f};
  std::vector<float> v(static_cast<size_t>(q.rows * q.k));
  for (int64_t r = 0; r < q.rows; ++r)
    for (int64_t e = 0; e < q.k; ++e) v[r * q.k + e] = normal(rng) * row_scale[r % 4];
  const int64_t g = q.gran == Granularity::group ? q.group : q.k;
  auto at = [&](int64_t r, int64_t e) -> float& { return v[(r % q.rows) * q.k + (e % q.k)]; };
  switch (q.specials) {
    case 1:
      for (int64_t e = 0; e < g; ++e) at(0, g + e) = 0.0f;        // an all-zero scope (row 0's second group)
      at(1, 3) = std::nanf("");                                  // NaN
      at(2, q.k - 1) = INFINITY;                                 // +Inf
      at(3, 0) = -INFINITY;                                      // -Inf
      for (int64_t e = 0; e < g; ++e) at(4, e) = -0.0f;          // a scope of -0.0
      at(5, 1) = 1e-40f;                                         // a denormal (float32 only survives)
      break;
    case 2:
      for (auto& x : v) x = 0.0f;
      break;
    case 3:
      at(q.rows - 1, q.k / 2) = INFINITY;
      break;
    case 4:
      at(q.rows - 1, q.k - 1) = 2e4f;
      at(q.rows - 1, q.k - 2) = -3e4f;
      break;
    default:
      break;
  }
  return v;
}

// Values in dtype with row stride k + x_pad; the padding holds NaN bits, so
// a kernel reading it would poison a scope.
std::vector<uint8_t> encode_rows(const std::vector<float>& v, const Quant& q) {
  const int es = qg::dtype_size(q.dt);
  std::vector<uint8_t> out(static_cast<size_t>(q.rows * (q.k + q.x_pad) * es), 0xFF);
  for (int64_t r = 0; r < q.rows; ++r)
    for (int64_t e = 0; e < q.k; ++e) qgtest::encode_float(&out[(r * (q.k + q.x_pad) + e) * es], q.dt, v[r * q.k + e]);
  return out;
}

size_t first_difference(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
  for (size_t i = 0; i < a.size() && i < b.size(); ++i)
    if (a[i] != b[i]) return i;
  return a.size() == b.size() ? SIZE_MAX : std::min(a.size(), b.size());
}

// Quantizes on the CPU and on CUDA (on `stream`) and compares every byte of
// the codes (padding included), the scales and the zero points.
void check_quantize(const Quant& q, std::mt19937_64& rng, cudaStream_t stream = nullptr) {
  SCOPED_TRACE(q.describe());
  const std::vector<uint8_t> x = encode_rows(quant_values(q, rng), q);
  const int64_t rb = qg::row_bytes(qg::format_traits(q.f), q.k), y_stride = rb + q.y_pad;
  const size_t ns = static_cast<size_t>(q.scopes());
  std::vector<float> given_s;
  std::vector<int32_t> given_z;
  if (q.given) {
    const CodeRange cr = range_of(q.f);
    std::uniform_int_distribution<int> zdist(cr.lo, cr.hi);
    for (size_t i = 0; i < ns; ++i) {
      given_s.push_back(qgtest::uniform(rng, 0.005f, 0.5f));
      if (q.asymmetric) given_z.push_back(zdist(rng));
    }
    given_s[0] = 0.0f;                           // a zero scale: every code is the zero point
    if (ns > 2) given_s[2] = -given_s[2];        // a negative one
    if (ns > 3) given_s[3] = std::nanf("");      // a NaN one
  }

  qg::QuantizeArgs args;
  args.format = q.f;
  args.x_dtype = q.dt;
  args.rows = q.rows;
  args.k = q.k;
  args.x_row_stride = q.k + q.x_pad;
  args.y_row_stride = y_stride;
  args.granularity = q.gran;
  args.group_size = q.gran == Granularity::group ? q.group : 0;

  // CPU
  std::vector<uint8_t> y_cpu(static_cast<size_t>(q.rows * y_stride), 0xCD), s_cpu(ns * 4, 0xEE),
      z_cpu(q.asymmetric && !q.given ? ns * 4 : 0, 0xEE);
  {
    qg::QuantizeArgs h = args;
    h.x = x.data();
    h.y = y_cpu.data();
    h.device = qg::Device::cpu();
    if (q.given) {
      h.static_scales = given_s.data();
      h.static_zero_points = given_z.empty() ? nullptr : given_z.data();
    } else {
      h.scales = reinterpret_cast<float*>(s_cpu.data());
      h.zero_points = z_cpu.empty() ? nullptr : reinterpret_cast<int32_t*>(z_cpu.data());
    }
    QG_OK(qg::quantize(h));
  }
  // CUDA
  const size_t o = q.offset, so = q.gran == Granularity::tensor && !q.given ? 0 : q.offset;
  DevBytes dx(x, o), dy(std::vector<uint8_t>(y_cpu.size(), 0xCD), o), ds(std::vector<uint8_t>(s_cpu.size(), 0xEE), so),
      dz(std::vector<uint8_t>(z_cpu.size(), 0xEE), so), dgs(as_bytes(given_s), o), dgz(as_bytes(given_z), o);
  qg::QuantizeArgs d = args;
  d.x = dx.ptr();
  d.y = dy.ptr();
  d.device = qg::Device::cuda(0);
  if (q.given) {
    d.static_scales = dgs.as<float>();
    d.static_zero_points = dgz.as<int32_t>();
  } else {
    d.scales = ds.as<float>();
    d.zero_points = dz.as<int32_t>();
  }
  qg::Explanation ex;
  QG_OK(qg::explain(d, &ex));
  EXPECT_EQ(ex.chosen, "cuda_int_rows");
  QG_OK(qg::quantize(d, stream));
  CUDA_OK(cudaStreamSynchronize(stream));

  const std::vector<uint8_t> y_gpu = dy.read();
  if (const size_t i = first_difference(y_cpu, y_gpu); i != SIZE_MAX)
    FAIL() << "codes differ first at byte " << i << " (row " << i / y_stride << ", byte " << i % y_stride
           << "): cpu 0x" << std::hex << int(y_cpu[i]) << ", cuda 0x" << int(y_gpu[i]);
  if (q.given) {
    EXPECT_EQ(ds.read(), s_cpu) << "static scales: the scale outputs must stay unwritten";
    return;
  }
  const std::vector<uint8_t> s_gpu = ds.read(), z_gpu = dz.read();
  if (const size_t i = first_difference(s_cpu, s_gpu); i != SIZE_MAX) {
    float a, b;
    std::memcpy(&a, &s_cpu[i / 4 * 4], 4);
    std::memcpy(&b, &s_gpu[i / 4 * 4], 4);
    FAIL() << "scale " << i / 4 << " differs: cpu " << a << " (0x" << std::hex << qgtest::f2u(a) << "), cuda " << b
           << " (0x" << qgtest::f2u(b) << ")";
  }
  if (const size_t i = first_difference(z_cpu, z_gpu); i != SIZE_MAX) {
    int32_t a, b;
    std::memcpy(&a, &z_cpu[i / 4 * 4], 4);
    std::memcpy(&b, &z_gpu[i / 4 * 4], 4);
    FAIL() << "zero point " << i / 4 << " differs: cpu " << a << ", cuda " << b;
  }
}

// K and group sizes each format takes: i4 pads an odd K (row and tensor
// scopes); i4x8 needs multiples of 8.
int64_t k_for(Format f, Granularity g) {
  if (f == Format::i4 && g != Granularity::group) return 33;
  if (f == Format::i8) return 120;
  return 96;
}
int64_t group_for(Format f) { return f == Format::i8 ? 24 : (f == Format::i4 ? 16 : 32); }

// fn(format, asymmetric, scope) for every scheme the CUDA kernels take: each
// integer format, symmetric and asymmetric (i4x8: symmetric only), each scope.
template <class Fn>
void for_each_scheme(Fn&& fn) {
  for (Format f : kInts)
    for (bool asym : {false, true}) {
      if (asym && f == Format::i4x8) continue;  // symmetric only
      for (Granularity gran : {Granularity::tensor, Granularity::row, Granularity::group}) fn(f, asym, gran);
    }
}

TEST_F(CudaInt, QuantizeMatchesCpuBytes) {
  QG_SEEDED_RNG(rng, 20);
  for_each_scheme([&](Format f, bool asym, Granularity gran) {
    for (DType dt : {DType::f32, DType::f16, DType::bf16})
      for (int specials : {0, 1, 2, 3}) {
        Quant q{f, asym, gran, group_for(f), dt, 7, k_for(f, gran)};
        q.x_pad = specials == 1 ? 3 : 0;
        q.y_pad = specials == 1 ? 5 : 0;
        q.specials = specials;
        check_quantize(q, rng);
        if (specials == 1) {
          q.offset = dt == DType::f32 ? 2 : 1;  // misaligned x, codes and (row, group) scales
          check_quantize(q, rng);
        }
      }
  });
}

// Large enough for many CTAs in the tensor reduction (and chunked rows: K
// is not a multiple of the kernels' 1024-element chunks), with one large
// value in the last row so the last CTA's atomics decide the scale.
TEST_F(CudaInt, QuantizeLargeTensors) {
  QG_SEEDED_RNG(rng, 21);
  for_each_scheme([&](Format f, bool asym, Granularity gran) {
    for (DType dt : {DType::f32, DType::bf16}) {
      Quant q{f, asym, gran, 8, dt, 600, 2056};
      q.specials = gran == Granularity::tensor && dt == DType::bf16 ? 3 : 4;
      check_quantize(q, rng);
      if (gran == Granularity::tensor) {
        q.specials = 1;  // NaN anywhere poisons the tensor's scale
        check_quantize(q, rng);
      }
    }
  });
}

TEST_F(CudaInt, QuantizeStaticScales) {
  QG_SEEDED_RNG(rng, 22);
  for_each_scheme([&](Format f, bool asym, Granularity gran) {
    for (DType dt : {DType::f32, DType::f16}) {
      Quant q{f, asym, gran, group_for(f), dt, 6, k_for(f, gran)};
      q.specials = 1;
      q.given = true;
      q.y_pad = 2;
      check_quantize(q, rng);
      q.offset = 1;
      check_quantize(q, rng);
    }
  });
}

// The tensor scope's launch sequence (init, reduce, quantize, finalize) on a
// stream of the caller's, with no synchronisation inside the call.
TEST_F(CudaInt, QuantizeTensorScopeOnAStream) {
  QG_SEEDED_RNG(rng, 23);
  cudaStream_t stream = nullptr;
  CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  for (Format f : {Format::i8, Format::i4})
    for (bool asym : {false, true})
      check_quantize(Quant{f, asym, Granularity::tensor, 0, DType::f32, 300, 4096}, rng, stream);
  CUDA_OK(cudaStreamDestroy(stream));
}

// A per-tensor scale computed on the GPU is reduced in place with atomics,
// which need a 4-byte aligned output: the kernel refuses a misaligned one
// and the call says why (there is no other CUDA kernel to fall back to).
TEST_F(CudaInt, QuantizeTensorScopeNeedsAlignedScaleOutput) {
  std::vector<float> x(64, 1.0f);
  DevBytes dx(as_bytes(x)), dy(std::vector<uint8_t>(64)), ds(std::vector<uint8_t>(8), 1);
  qg::QuantizeArgs q;
  q.format = Format::i8;
  q.x = dx.ptr();
  q.rows = 1;
  q.k = 64;
  q.y = dy.ptr();
  q.granularity = Granularity::tensor;
  q.scales = ds.as<float>();
  q.device = qg::Device::cuda(0);
  const qg::Status s = qg::quantize(q);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("4-byte aligned"), std::string::npos) << s.message();
}

// Scopes over no values get an all-zero scope's parameters, as on the CPU
// (scale 0; zero point qmin when asymmetric), including at odd addresses.
TEST_F(CudaInt, QuantizeEmptyScopesAreWritten) {
  float host_x = 0.0f;
  DevBytes dx(as_bytes(std::vector<float>{host_x})), dy(std::vector<uint8_t>(4));
  DevBytes ds(std::vector<uint8_t>(12, 0xAB), 1), dz(std::vector<uint8_t>(12, 0xAB), 3);
  qg::QuantizeArgs q;
  q.format = Format::i4;
  q.x = dx.ptr();
  q.rows = 3;
  q.k = 0;
  q.y = dy.ptr();
  q.granularity = Granularity::row;
  q.scales = ds.as<float>();
  q.zero_points = dz.as<int32_t>();
  q.device = qg::Device::cuda(0);
  ASSERT_TRUE(qg::quantize(q).ok());
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const std::vector<uint8_t> s = ds.read(), z = dz.read();
  for (int i = 0; i < 3; ++i) {
    float sv;
    int32_t zv;
    std::memcpy(&sv, s.data() + 4 * i, 4);
    std::memcpy(&zv, z.data() + 4 * i, 4);
    EXPECT_EQ(sv, 0.0f) << i;
    EXPECT_EQ(zv, -8) << i;
  }
}

// ====================================================================== dequantize
void check_dequantize(const Quant& q, int64_t xq_pad, std::mt19937_64& rng) {
  SCOPED_TRACE(q.describe() + " xq_pad=" + std::to_string(xq_pad));
  const size_t o = q.offset;
  const std::vector<float> v = quant_values(q, rng);
  const int64_t rb = qg::row_bytes(qg::format_traits(q.f), q.k), xq_stride = rb + xq_pad;
  const size_t ns = static_cast<size_t>(q.scopes());
  std::vector<uint8_t> xq(static_cast<size_t>(q.rows * xq_stride), kSentinel);
  std::vector<float> scales(ns);
  std::vector<int32_t> zps(q.asymmetric ? ns : 0);
  qg::QuantizeArgs qa;
  qa.format = q.f;
  qa.x = v.data();
  qa.rows = q.rows;
  qa.k = q.k;
  qa.x_row_stride = q.k;
  qa.y = xq.data();
  qa.y_row_stride = xq_stride;
  qa.granularity = q.gran;
  qa.group_size = q.gran == Granularity::group ? q.group : 0;
  qa.scales = scales.data();
  qa.zero_points = zps.empty() ? nullptr : zps.data();
  QG_OK(qg::quantize(qa));

  const int64_t y_stride = q.k + q.y_pad;
  const size_t y_count = static_cast<size_t>(q.rows * y_stride);
  const float sentinel = -12345.678f;
  std::vector<float> y_cpu(y_count, sentinel);
  qg::DequantizeArgs da = qgtest::dequantize_args(q.f, xq.data(), q.rows, q.k, xq_stride, y_cpu.data(), y_stride);
  da.granularity = q.gran;
  da.group_size = qa.group_size;
  da.scales = scales.data();
  da.zero_points = qa.zero_points;
  QG_OK(qg::dequantize(da));

  DevBytes dxq(xq, o), ds(as_bytes(scales), o), dz(as_bytes(zps), o),
      dy(as_bytes(std::vector<float>(y_count, sentinel)), o);
  da.xq = dxq.ptr();
  da.y = dy.as<float>();
  da.scales = ds.as<float>();
  da.zero_points = dz.as<int32_t>();
  da.device = qg::Device::cuda(0);
  qg::Explanation ex;
  QG_OK(qg::explain(da, &ex));
  EXPECT_EQ(ex.chosen, "cuda_int_rows");
  QG_OK(qg::dequantize(da));
  CUDA_OK(cudaDeviceSynchronize());
  const std::vector<uint8_t> raw = dy.read();
  std::vector<float> y_gpu(y_count);
  std::memcpy(y_gpu.data(), raw.data(), raw.size());
  // NaN payloads may differ (x86 keeps an operand's, CUDA makes a canonical one).
  for (size_t i = 0; i < y_count; ++i) {
    const bool both_nan = std::isnan(y_cpu[i]) && std::isnan(y_gpu[i]);
    if (!both_nan && qgtest::f2u(y_cpu[i]) != qgtest::f2u(y_gpu[i]))
      FAIL() << "element " << i << " (row " << i / y_stride << ", col " << i % y_stride << "): cpu " << y_cpu[i]
             << ", cuda " << y_gpu[i];
  }
}

TEST_F(CudaInt, DequantizeMatchesCpuBits) {
  QG_SEEDED_RNG(rng, 30);
  for_each_scheme([&](Format f, bool asym, Granularity gran) {
    Quant q{f, asym, gran, group_for(f), DType::f32, 7, k_for(f, gran)};
    q.y_pad = 3;
    q.specials = 1;
    q.offset = 1;  // every buffer misaligned
    check_dequantize(q, 1, rng);
    check_dequantize(Quant{f, asym, gran, 8, DType::f32, 130, 2056}, 0, rng);
  });
}

// ====================================================================== the registry
// The integer entries as data (needs no GPU): the generic kernels serve every
// pair, come last for it (the last resort), and cover every epilogue they can.
TEST(CudaIntRegistry, GenericKernelsServeEveryIntegerPair) {
  const qg::detail::Registry& r = qg::detail::cuda::registry();
  auto last_for = [&](Format fa, Format fb) -> const qg::detail::GemmKernel* {
    const qg::detail::GemmKernel* last = nullptr;
    for (const qg::detail::GemmKernel& k : r.gemm)
      if (k.a_format == fa && k.b_format == fb) last = &k;
    return last;
  };
  for (Format fa : kInts)
    for (Format fb : kInts) {
      const qg::detail::GemmKernel* k = last_for(fa, fb);
      ASSERT_NE(k, nullptr) << qg::format_traits(fa).name << " x " << qg::format_traits(fb).name;
      EXPECT_STREQ(k->name, "cuda_int_generic");
      EXPECT_EQ(k->epilogue_caps, static_cast<uint32_t>(qg::detail::kEpiAll));
      EXPECT_EQ(k->arch.min_cc, 0);
    }
  for (Format fa : {Format::i8, Format::i4})
    for (Format fb : {Format::f16, Format::bf16, Format::f32}) {
      const qg::detail::GemmKernel* k = last_for(fa, fb);
      ASSERT_NE(k, nullptr) << qg::format_traits(fa).name << " x " << qg::format_traits(fb).name;
      EXPECT_STREQ(k->name, "cuda_wo_generic");
      EXPECT_EQ(k->epilogue_caps, static_cast<uint32_t>(qg::detail::kEpiFloatAll));
      EXPECT_EQ(k->arch.min_cc, 0);
    }
  auto named = [](const auto& table, const char* name) {
    for (const auto& k : table)
      if (std::string(k.name) == name) return k.formats;
    return 0u;
  };
  EXPECT_EQ(named(r.quantize, "cuda_int_rows"), qg::detail::kIntegerFormats);
  EXPECT_EQ(named(r.dequantize, "cuda_int_rows"), qg::detail::kIntegerFormats);
}

}  // namespace
