// SPDX-License-Identifier: MIT
// test_cpu_int.cpp: the integer family on the CPU. Every CPU kernel serving
// an integer pair (cpu_i8_avx2, cpu_int_reference, and the public qg::gemm),
// forced by name through the registry, against a plain int64 sum written
// here and the epilogue's float steps replayed in the same order, so int32
// and float outputs are compared bit for bit; the weight-only kernels
// (cpu_wo_avx2, cpu_wo_reference) against float64 (NMSE); validation of the
// integer GEMM's limits; and the CPU integer quantizer's rules on
// hand-computed codes, plus quantize -> dequantize round trips.
// AVX2 kernels are skipped where the CPU lacks AVX2 + FMA + F16C.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "amx_tile_state.h"
#include "backend.h"
#include "cpu/features.h"
#include "cpu/kernels.h"
#include "dispatch.h"
#include "epilogue.h"
#include "int_formats.h"
#include "qg/qg.h"
#include "test_util.h"
#include "validate.h"

namespace {

using qg::DType;
using qg::Format;
using qgtest::f2u;

// ------------------------------------------------------------------ operands
// Integer codes of `rows` rows along K, packed as `format` stores them:
// rows contiguous along K (row_stride = row bytes + pad), or K-major (the
// [K-storage, rows] array of a [K, N] B: block_stride = rows * unit bytes).
struct IntOperand {
  Format format = Format::i8;
  int64_t rows = 0, k = 0, row_stride = 0, block_stride = 0;
  std::vector<int32_t> codes;  // [rows][k]
  std::vector<uint8_t> bytes;
  int32_t code(int64_t r, int64_t x) const { return codes[r * k + x]; }
};

qg::detail::CodeRange range_of(Format f) { return qg::detail::code_range(f); }

// The storage unit `blk` of row r (i8: one code; i4: two, low nibble first;
// i4x8: eight, element i in bits 4i..4i+3 of a little-endian word, stored v + 8).
void write_unit(const IntOperand& op, int64_t r, int64_t blk, uint8_t* dst) {
  auto c = [&](int64_t x) { return x < op.k ? op.code(r, x) : 0; };
  if (op.format == Format::i8) {
    dst[0] = static_cast<uint8_t>(static_cast<int8_t>(c(blk)));
  } else if (op.format == Format::i4) {
    dst[0] = static_cast<uint8_t>((c(2 * blk) & 15) | ((c(2 * blk + 1) & 15) << 4));
  } else {
    uint32_t w = 0;
    for (int i = 0; i < 8; ++i) w |= static_cast<uint32_t>(c(8 * blk + i) + 8) << (4 * i);
    std::memcpy(dst, &w, 4);
  }
}

IntOperand make_operand(std::mt19937_64& rng, Format f, int64_t rows, int64_t k, bool k_major = false,
                        int64_t pad = 0) {
  IntOperand op;
  op.format = f;
  op.rows = rows;
  op.k = k;
  const qg::detail::CodeRange cr = range_of(f);
  op.codes.resize(static_cast<size_t>(rows * k));
  for (auto& v : op.codes) v = cr.qmin + static_cast<int32_t>(rng() % static_cast<uint64_t>(cr.qmax - cr.qmin + 1));
  const qg::FormatTraits& t = qg::format_traits(f);
  const int64_t nb = qg::row_blocks(t, k), ub = t.bytes_per_block;
  if (k_major) {
    op.row_stride = ub;
    op.block_stride = rows * ub;
    op.bytes.assign(static_cast<size_t>(std::max<int64_t>(nb * rows * ub, 1)), qgtest::kSentinelByte);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t b = 0; b < nb; ++b) write_unit(op, r, b, &op.bytes[b * op.block_stride + r * op.row_stride]);
  } else {
    op.row_stride = nb * ub + pad;
    op.bytes.assign(static_cast<size_t>(std::max<int64_t>(rows * op.row_stride, 1)), qgtest::kSentinelByte);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t b = 0; b < nb; ++b) write_unit(op, r, b, &op.bytes[r * op.row_stride + b * ub]);
  }
  return op;
}

// Every code of op set to v (contiguous rows), bytes rewritten.
void fill_codes(IntOperand& op, int32_t v) {
  ASSERT_EQ(op.block_stride, 0);
  for (auto& c : op.codes) c = v;
  const qg::FormatTraits& t = qg::format_traits(op.format);
  for (int64_t r = 0; r < op.rows; ++r)
    for (int64_t b = 0; b < qg::row_blocks(t, op.k); ++b)
      write_unit(op, r, b, &op.bytes[r * op.row_stride + b * t.bytes_per_block]);
}

qg::Operand operand_of(const IntOperand& op) {
  qg::Operand o;
  o.data = op.bytes.data();
  o.format = op.format;
  o.rows = op.rows;
  o.k = op.k;
  o.row_stride = op.row_stride;
  o.block_stride = op.block_stride;
  return o;
}

// ------------------------------------------------------------------ a case
struct IntCase {
  IntOperand a, b;
  DType c_dtype = DType::i32;
  int64_t ldc = 0, ldc_n = 1;
  std::vector<uint8_t> c;  // the whole C buffer, poisoned
  float alpha = 1.0f, beta = 0.0f;
  std::vector<float> row_scale, col_scale;  // one element: the scalar form
  std::vector<int32_t> row_zp, col_zp;      // likewise
  std::vector<uint8_t> bias;
  DType bias_dtype = DType::f32;
  bool relu = false;

  int64_t m() const { return a.rows; }
  int64_t n() const { return b.rows; }
  int64_t es() const { return qg::dtype_size(c_dtype); }
  int64_t off(int64_t i, int64_t j) const { return (i * ldc + j * ldc_n) * es(); }
  std::string describe() const {
    std::string s = std::string(qg::format_traits(a.format).name) + " x " + qg::format_traits(b.format).name +
                    " M=" + std::to_string(m()) + " N=" + std::to_string(n()) + " K=" + std::to_string(a.k) +
                    " out " + qg::dtype_name(c_dtype) + " ldc=" + std::to_string(ldc) +
                    " ldc_n=" + std::to_string(ldc_n);
    if (b.block_stride) s += " b K-major";
    if (!row_zp.empty()) s += " row_zp[" + std::to_string(row_zp.size()) + "]";
    if (!col_zp.empty()) s += " col_zp[" + std::to_string(col_zp.size()) + "]";
    if (!row_scale.empty()) s += " row_scale[" + std::to_string(row_scale.size()) + "]";
    if (!col_scale.empty()) s += " col_scale[" + std::to_string(col_scale.size()) + "]";
    if (alpha != 1.0f) s += " alpha";
    if (beta != 0.0f) s += " beta";
    if (!bias.empty()) s += std::string(" bias ") + qg::dtype_name(bias_dtype);
    if (relu) s += " relu";
    return s;
  }
};

void set_layout(IntCase& c, DType dt, int64_t ldc, int64_t ldc_n) {
  c.c_dtype = dt;
  c.ldc = ldc;
  c.ldc_n = ldc_n;
  const int64_t extent = c.m() > 0 && c.n() > 0 ? (c.m() - 1) * ldc + (c.n() - 1) * ldc_n + 1 : 0;
  c.c.assign(static_cast<size_t>((extent + 7) * c.es()), 0);
  for (size_t o = 0; o + c.es() <= c.c.size(); o += c.es()) {
    if (dt == DType::i32) std::memcpy(&c.c[o], &qgtest::kPoisonBits, 4);  // any fixed pattern
    else qgtest::poison_element(&c.c[o], dt);
  }
}

IntCase make_case(std::mt19937_64& rng, Format fa, Format fb, int64_t m, int64_t n, int64_t k, bool b_k_major = false) {
  IntCase c;
  c.a = make_operand(rng, fa, m, k, false, static_cast<int64_t>(rng() % 3));
  c.b = make_operand(rng, fb, n, k, b_k_major, static_cast<int64_t>(rng() % 3));
  set_layout(c, DType::i32, n, 1);
  return c;
}

qg::GemmArgs args_of(IntCase& c) {
  qg::GemmArgs g;
  g.a = operand_of(c.a);
  g.b = operand_of(c.b);
  g.c = c.c.empty() ? nullptr : c.c.data();
  g.c_dtype = c.c_dtype;
  g.ldc = c.ldc;
  g.ldc_n = c.ldc_n;
  g.epilogue.alpha = c.alpha;
  g.epilogue.beta = c.beta;
  g.epilogue.row_scale = c.row_scale.empty() ? nullptr : c.row_scale.data();
  g.epilogue.col_scale = c.col_scale.empty() ? nullptr : c.col_scale.data();
  g.epilogue.row_scale_scalar = c.row_scale.size() == 1 && c.m() != 1;
  g.epilogue.col_scale_scalar = c.col_scale.size() == 1 && c.n() != 1;
  g.epilogue.row_zero_point = c.row_zp.empty() ? nullptr : c.row_zp.data();
  g.epilogue.col_zero_point = c.col_zp.empty() ? nullptr : c.col_zp.data();
  g.epilogue.row_zero_point_scalar = c.row_zp.size() == 1 && c.m() != 1;
  g.epilogue.col_zero_point_scalar = c.col_zp.size() == 1 && c.n() != 1;
  g.epilogue.bias = c.bias.empty() ? nullptr : c.bias.data();
  g.epilogue.bias_dtype = c.bias_dtype;
  g.epilogue.activation = c.relu ? qg::Activation::relu : qg::Activation::none;
  g.device = qg::Device::cpu();
  return g;
}

// ------------------------------------------------------------------ expected
uint16_t bf16_rne(float f) {
  const uint32_t x = f2u(f);
  return static_cast<uint16_t>((x + 0x7FFFu + ((x >> 16) & 1u)) >> 16);
}

// C[i, j] as every kernel must store it: the int64 sum of (qa - za)(qb - zb),
// then ops.h's float steps in their order, each rounded to float32.
void expected_element(const IntCase& c, const std::vector<uint8_t>& c_before, int64_t i, int64_t j, uint8_t* dst) {
  const int32_t za = c.row_zp.empty() ? 0 : c.row_zp[c.row_zp.size() == 1 ? 0 : i];
  const int32_t zb = c.col_zp.empty() ? 0 : c.col_zp[c.col_zp.size() == 1 ? 0 : j];
  int64_t acc = 0;
  for (int64_t x = 0; x < c.a.k; ++x)
    acc += static_cast<int64_t>(c.a.code(i, x) - za) * static_cast<int64_t>(c.b.code(j, x) - zb);
  EXPECT_LE(std::llabs(acc), int64_t{1} << 31) << "the test built a sum past int32";
  const int32_t s = static_cast<int32_t>(acc);
  if (c.c_dtype == DType::i32) {
    const int32_t v = c.relu && s < 0 ? 0 : s;
    std::memcpy(dst, &v, 4);
    return;
  }
  volatile float v = static_cast<float>(s);
  if (c.alpha != 1.0f) v = v * c.alpha;
  if (!c.row_scale.empty()) v = v * c.row_scale[c.row_scale.size() == 1 ? 0 : i];
  if (!c.col_scale.empty()) v = v * c.col_scale[c.col_scale.size() == 1 ? 0 : j];
  if (c.beta != 0.0f) {
    const volatile float old = static_cast<float>(qgtest::decode_float(&c_before[c.off(i, j)], c.c_dtype));
    const volatile float bc = c.beta * old;
    v = v + bc;
  }
  if (!c.bias.empty()) {
    const int64_t bs = qg::dtype_size(c.bias_dtype);
    v = v + static_cast<float>(qgtest::decode_float(&c.bias[i * bs], c.bias_dtype));
  }
  if (c.relu && v < 0.0f) v = 0.0f;
  const float f = v;
  if (c.c_dtype == DType::f32) std::memcpy(dst, &f, 4);
  else if (c.c_dtype == DType::f16) qgtest::store_u16(dst, qgtest::ref_fp32_to_fp16(f));
  else qgtest::store_u16(dst, bf16_rne(f));
}

// The whole C buffer as it must be after the call: every element written
// (NaN poison gone), every other byte untouched.
std::vector<uint8_t> expected_buffer(const IntCase& c) {
  std::vector<uint8_t> want = c.c;
  for (int64_t i = 0; i < c.m(); ++i)
    for (int64_t j = 0; j < c.n(); ++j) expected_element(c, c.c, i, j, &want[c.off(i, j)]);
  return want;
}

// ------------------------------------------------------------------ kernels
bool cpu_has(uint32_t need) {
  qg::detail::DeviceCaps caps;
  if (!qg::detail::device_caps("qg.gemm", qg::Device::cpu(), &caps).ok()) return false;
  return (caps.cpu_features & need) == need;
}
bool have_avx2() { return cpu_has(qg::detail::kCpuAvx2 | qg::detail::kCpuFma | qg::detail::kCpuF16c); }

// Kernels serving (a, b), in registry order, then "dispatch" (qg::gemm).
std::vector<const qg::detail::GemmKernel*> kernels_for(Format a, Format b) {
  std::vector<const qg::detail::GemmKernel*> out;
  for (const qg::detail::GemmKernel& k : qg::detail::cpu::registry().gemm)
    if (k.a_format == a && k.b_format == b) out.push_back(&k);
  out.push_back(nullptr);
  return out;
}
std::string name_of(const qg::detail::GemmKernel* k) { return k ? k->name : "dispatch"; }

enum class Outcome { ran, no_isa, refused };

// Runs the case on kernel k (null: qg::gemm) on a copy of its C buffer.
Outcome run_on(const qg::detail::GemmKernel* k, IntCase& c, std::vector<uint8_t>* out) {
  IntCase run = c;
  const qg::GemmArgs g = args_of(run);
  const qg::Status v = qg::detail::check_gemm_args(g);
  EXPECT_TRUE(v.ok()) << "the test built arguments qg rejects: " << v.message() << " (" << c.describe() << ")";
  if (!v.ok()) return Outcome::refused;
  std::string why;
  if (k && !qgtest::gemm_kernel_runs_on(*k, qg::Device::cpu(), &why)) return Outcome::no_isa;
  if (k && !qgtest::gemm_kernel_admits(*k, g, &why)) return Outcome::refused;
  const qg::Status s = k ? k->run(g, nullptr) : qg::gemm(g);
  EXPECT_TRUE(s.ok()) << name_of(k) << ": " << s.message() << " (" << c.describe() << ")";
  *out = run.c;
  return Outcome::ran;
}

// Every kernel serving the case's pair gives exactly the expected bytes.
// Returns how many kernels (of the registry's, not counting dispatch) ran it.
int check_all_kernels(IntCase& c) {
  SCOPED_TRACE(c.describe());
  const std::vector<uint8_t> want = expected_buffer(c);
  int ran = 0;
  for (const qg::detail::GemmKernel* k : kernels_for(c.a.format, c.b.format)) {
    std::vector<uint8_t> got;
    const Outcome o = run_on(k, c, &got);
    if (o != Outcome::ran) continue;
    if (k) ++ran;
    int bad = 0;
    for (int64_t i = 0; i < c.m() && bad < 3; ++i)
      for (int64_t j = 0; j < c.n() && bad < 3; ++j)
        if (std::memcmp(&got[c.off(i, j)], &want[c.off(i, j)], c.es()) != 0) {
          ++bad;
          ADD_FAILURE() << name_of(k) << ": C[" << i << ", " << j << "] = "
                        << (c.c_dtype == DType::i32 ? 0.0 : qgtest::decode_float(&got[c.off(i, j)], c.c_dtype))
                        << " bytes differ from the expected "
                        << (c.c_dtype == DType::i32 ? 0.0 : qgtest::decode_float(&want[c.off(i, j)], c.c_dtype));
        }
    EXPECT_EQ(got, want) << name_of(k) << ": the C buffer (elements or the bytes between them) differs";
  }
  return ran;
}

struct Pair {
  Format a, b;
  std::vector<int64_t> ks;
};
std::vector<Pair> int_pairs() {
  return {{Format::i8, Format::i8, {1, 3, 17, 64, 65, 300}},
          {Format::i4, Format::i4, {1, 3, 17, 64, 65, 301}},
          {Format::i4x8, Format::i4x8, {8, 64, 296}},
          {Format::i4, Format::i8, {3, 17, 64, 65, 300}}};
}

// ------------------------------------------------------------------ integer x integer
TEST(CpuIntGemm, RegistryListsTheAvx2KernelsFirst) {
  const qg::detail::Registry& r = qg::detail::cpu::registry();
  auto order = [&](Format a, Format b) {
    std::vector<std::string> names;
    for (const qg::detail::GemmKernel* k : kernels_for(a, b)) names.push_back(name_of(k));
    return names;
  };
  EXPECT_EQ(order(Format::i8, Format::i8),
            (std::vector<std::string>{"cpu_i8_amx", "cpu_i8_avx512_vnni", "cpu_i8_avx2", "cpu_i8_repacked",
                                      "cpu_int_reference", "dispatch"}));
  for (Format fb : {Format::f16, Format::bf16})
    EXPECT_EQ(order(Format::i4, fb),
              (std::vector<std::string>{"cpu_wo_avx512_vnni", "cpu_wo_avx2_fixed", "cpu_wo_avx2_fixed20", "cpu_wo_avx2",
                                        "cpu_wo_reference", "dispatch"}));
  EXPECT_EQ(order(Format::i4, Format::f32), (std::vector<std::string>{"cpu_wo_avx512_vnni", "cpu_wo_avx2_fixed20",
                                                                      "cpu_wo_avx2", "cpu_wo_reference", "dispatch"}));
  const uint32_t avx2 = qg::detail::kCpuAvx2 | qg::detail::kCpuFma | qg::detail::kCpuF16c;
  for (const qg::detail::GemmKernel& k : r.gemm) {
    const std::string name = k.name;
    if (name.find("avx2") != std::string::npos && k.a_format != Format::q4_0) {
      EXPECT_EQ(k.arch.cpu_features, avx2) << name;
    }
    if (name == "cpu_i8_repacked") {
      EXPECT_EQ(k.arch.cpu_features, avx2) << name;  // it hands the call to the AVX2 kernels
    }
    if (name == "cpu_wo_avx512_vnni" || name == "cpu_i8_avx512_vnni") {
      EXPECT_EQ(k.arch.cpu_features, avx2 | qg::detail::kCpuAvx512Vnni) << name;
    }
    if (name == "cpu_i8_amx") {
      EXPECT_EQ(k.arch.cpu_features, avx2 | qg::detail::kCpuAvx512Vnni | qg::detail::kCpuAmxInt8) << name;
    }
  }
}

// The VNNI decode kernel takes N <= 16 (four rows of B a pass over A, the
// later passes from L2) and says why it refuses more; dispatch then takes
// the AVX2 kernel (or the reference), with the same bits. N = 5..16 cover
// every width of a last group of columns.
TEST(CpuIntGemm, VnniDecodeKernelTakesUpToSixteenRowsOfB) {
  QG_SEEDED_RNG(rng, 45);
  const qg::detail::GemmKernel* vnni = kernels_for(Format::i8, Format::i8)[1];
  ASSERT_STREQ(vnni->name, "cpu_i8_avx512_vnni");
  for (int64_t n : {4, 5, 6, 7, 8, 13, 16, 17}) {
    SCOPED_TRACE("N=" + std::to_string(n));
    IntCase c = make_case(rng, Format::i8, Format::i8, 70, n, 200);
    const qg::GemmArgs g = args_of(c);
    std::string why;
    EXPECT_EQ(vnni->can_run(g, &why), n <= 16) << why;
    if (n > 16) {
      EXPECT_NE(why.find("N=17 is above its 16"), std::string::npos) << why;
    }
    check_all_kernels(c);
  }
}

// The AMX kernel takes N >= 16 (tiles of 16 rows of B) and says why not
// below; it runs (where the CPU and OS offer AMX) on every tail of its 32 x 32
// blocks and of its 64-code steps, rows copied or read in place, with the
// bytes of every other kernel and the reference.
TEST(CpuIntGemm, AmxKernelOnEveryBlockAndStepTail) {
  QG_SEEDED_RNG(rng, 46);
  const qg::detail::GemmKernel* amx = kernels_for(Format::i8, Format::i8)[0];
  ASSERT_STREQ(amx->name, "cpu_i8_amx");
  std::string why;
  const bool here = qgtest::gemm_kernel_runs_on(*amx, qg::Device::cpu(), &why);
  for (int64_t k : {1, 4, 63, 64, 128, 300})
    for (int64_t m : {1, 16, 31, 32, 33, 70})
      for (int64_t n : {15, 16, 17, 32, 33, 70}) {
        SCOPED_TRACE("M=" + std::to_string(m) + " N=" + std::to_string(n) + " K=" + std::to_string(k));
        IntCase c = make_case(rng, Format::i8, Format::i8, m, n, k);
        EXPECT_EQ(amx->can_run(args_of(c), &why), n >= 16) << why;
        if (n < 16) {
          EXPECT_EQ(why, "N=15 is below its 16");
        }
        std::vector<uint8_t> got;
        EXPECT_EQ(run_on(amx, c, &got), !here ? Outcome::no_isa : n < 16 ? Outcome::refused : Outcome::ran);
        check_all_kernels(c);
        if (HasFailure()) return;
      }
  // Longer K (65 steps of 64 codes) over many blocks and pairs: K a multiple
  // of 64 (rows read in place but the last block's) and not (every block
  // copied).
  for (int64_t k : {4160, 4100}) {
    SCOPED_TRACE("M=530 N=40 K=" + std::to_string(k));
    IntCase c = make_case(rng, Format::i8, Format::i8, 530, 40, k);
    std::vector<uint8_t> got;
    EXPECT_EQ(run_on(amx, c, &got), here ? Outcome::ran : Outcome::no_isa);
    check_all_kernels(c);
    if (HasFailure()) return;
  }
}

// cpu_i8_amx keeps its tile configuration for a task's tile blocks and
// gives it back at the task's end, as cpu_amx does (amx_tile_state.h).
// M = 64, N = 40, K = 128: small enough to stay on the calling thread, two
// tasks (32-row blocks) of two token pairs each.
#if defined(QG_TEST_AMX_INTRINSICS) && defined(__x86_64__)
TEST(CpuIntGemm, AmxKernelKeepsTheCallersTileConfiguration) {
  QG_SEEDED_RNG(rng, 47);
  const qg::detail::GemmKernel* amx = kernels_for(Format::i8, Format::i8)[0];
  ASSERT_STREQ(amx->name, "cpu_i8_amx");
  std::string why;
  if (!qgtest::gemm_kernel_runs_on(*amx, qg::Device::cpu(), &why)) GTEST_SKIP() << "cpu_i8_amx cannot run here: " << why;
  IntCase c = make_case(rng, Format::i8, Format::i8, 64, 40, 128);
  qgtest::expect_callers_tiles_kept([&] {
    std::vector<uint8_t> got;
    EXPECT_EQ(run_on(amx, c, &got), Outcome::ran);
    check_all_kernels(c);
  });
}
#endif

TEST(CpuIntGemm, EveryPairAndShapeExactInt32) {
  uint64_t salt = 0;
  const std::vector<int64_t> sizes = {1, 3, 17, 64, 65};
  for (const Pair& p : int_pairs())
    for (int64_t k : p.ks) {
      QG_SEEDED_RNG(rng, ++salt);
      for (int64_t m : sizes)
        for (int64_t n : sizes) {
          IntCase c = make_case(rng, p.a, p.b, m, n, k);
          check_all_kernels(c);
          if (HasFailure()) return;
        }
      // 300 along M and along N (the 16 x 64 tasks' tails, the GEMV path's 64-row tasks)
      for (auto mn : {std::pair<int64_t, int64_t>{300, 3}, {3, 300}, {300, 1}, {129, 2}}) {
        IntCase c = make_case(rng, p.a, p.b, mn.first, mn.second, k);
        check_all_kernels(c);
        if (HasFailure()) return;
      }
    }
}

// Extreme codes: every product -128 * -128 (the case vpmaddubsw saturates),
// and the sum at the int32 limit's edge.
TEST(CpuIntGemm, ExtremeCodesAtTheInt32Limit) {
  QG_SEEDED_RNG(rng, 50);
  for (int32_t va : {-128, 127})
    for (int32_t vb : {-128, 127})
      for (int64_t k : {int64_t{16}, int64_t{33}, int64_t{131071}}) {
        for (int64_t n : {int64_t{1}, int64_t{5}, int64_t{17}}) {
          IntCase c = make_case(rng, Format::i8, Format::i8, 3, n, k);
          fill_codes(c.a, va);
          fill_codes(c.b, vb);
          set_layout(c, DType::i32, n, 1);
          check_all_kernels(c);
          if (HasFailure()) return;
        }
      }
}

// Zero points, scalar and per row, int32 output (exact) and float outputs
// with scales, bias and relu: the same bits from every kernel.
TEST(CpuIntGemm, ZeroPointsScalarAndPerRow) {
  QG_SEEDED_RNG(rng, 100);
  for (const Pair& p : int_pairs())
    for (int64_t k : {p.ks[1], p.ks.back()})
      for (int zp_form = 0; zp_form < 4; ++zp_form)
        for (DType dt : {DType::i32, DType::f32, DType::f16, DType::bf16}) {
          // N = 20 (cpu_i8_amx's tiles) at the longer K
          const int64_t m = 19, n = zp_form == 3 ? 1 : k == p.ks.back() ? 20 : 6;
          IntCase c = make_case(rng, p.a, p.b, m, n, k);
          const qg::detail::CodeRange ra = range_of(p.a), rb = range_of(p.b);
          auto zp = [&](qg::detail::CodeRange r) {
            return r.qmin + static_cast<int32_t>(rng() % static_cast<uint64_t>(r.qmax - r.qmin + 1));
          };
          // 0: scalar both; 1: per row both; 2: only a's rows; 3: only b's (N = 1)
          if (zp_form == 0) {
            c.row_zp = {zp(ra)};
            c.col_zp = {zp(rb)};
          }
          if (zp_form == 1 || zp_form == 2)
            for (int64_t i = 0; i < m; ++i) c.row_zp.push_back(zp(ra));
          if (zp_form == 1 || zp_form == 3)
            for (int64_t j = 0; j < n; ++j) c.col_zp.push_back(zp(rb));
          set_layout(c, dt, n, 1);
          if (dt != DType::i32) {
            for (int64_t i = 0; i < m; ++i) c.row_scale.push_back(qgtest::uniform(rng, -0.01f, 0.01f));
            c.col_scale = {qgtest::uniform(rng, 0.5f, 2.0f)};
            c.bias.resize(static_cast<size_t>(m) * 4);
            for (int64_t i = 0; i < m; ++i) qgtest::encode_float(&c.bias[i * 4], DType::f32, qgtest::uniform(rng, -3, 3));
          }
          c.relu = zp_form == 1;
          check_all_kernels(c);
          if (HasFailure()) return;
        }
}

// B given as [K, N] (K-major: seed 001's int8 B, seed 003's [K/8, N] words):
// the reference kernels take it, and an int8 one cpu_i8_repacked; the AVX2
// kernels refuse (their can_run) and say why, so dispatch still serves it.
TEST(CpuIntGemm, KMajorOperands) {
  QG_SEEDED_RNG(rng, 200);
  for (const Pair& p : int_pairs())
    for (int64_t k : {p.ks[0], p.ks.back()})
      for (int64_t n : {1, 5, 64}) {
        IntCase c = make_case(rng, p.a, p.b, 7, n, k, /*b_k_major=*/true);
        EXPECT_GE(check_all_kernels(c), 1) << "no kernel took a K-major b";
        if (HasFailure()) return;
      }
  // can_run judges the layout whatever this CPU has (the ISA is the arch window's).
  IntCase c = make_case(rng, Format::i8, Format::i8, 4, 4, 64, true);
  const qg::GemmArgs g = args_of(c);
  for (const qg::detail::GemmKernel* k : kernels_for(Format::i8, Format::i8)) {
    if (!k || std::string(k->name) == "cpu_int_reference") continue;
    std::string why;
    if (std::string(k->name) == "cpu_i8_repacked") {
      EXPECT_TRUE(k->can_run(g, &why)) << why;
      continue;
    }
    EXPECT_FALSE(k->can_run(g, &why)) << k->name;
    EXPECT_NE(why.find("not contiguous along K"), std::string::npos) << k->name << ": " << why;
  }
}

// An int8 operand strided along K (a B stored [K, N], an A read through its
// transpose) is copied to K-contiguous rows by cpu_i8_repacked, which hands
// the call back to qg::gemm and so to the int8 kernels: the reference's
// bytes, with zero points and the float epilogue, and dispatch picks it
// where the CPU has AVX2. It refuses operands that need no copy.
TEST(CpuIntGemm, KMajorInt8RepackedForTheInt8Kernels) {
  QG_SEEDED_RNG(rng, 201);
  const qg::detail::GemmKernel* repacked = nullptr;
  for (const qg::detail::GemmKernel* k : kernels_for(Format::i8, Format::i8))
    if (k && std::string(k->name) == "cpu_i8_repacked") repacked = k;
  ASSERT_NE(repacked, nullptr);
  std::string why;
  const bool has_isa = qgtest::gemm_kernel_runs_on(*repacked, qg::Device::cpu(), &why);
  for (int64_t k : {1, 3, 65, 300})
    for (int64_t n : {1, 5, 17, 70})
      for (bool a_k_major : {false, true}) {
        IntCase c = make_case(rng, Format::i8, Format::i8, 9, n, k, /*b_k_major=*/true);
        if (a_k_major) c.a = make_operand(rng, Format::i8, 9, k, true, 0);
        c.row_zp = {static_cast<int32_t>(rng() % 256) - 128};
        c.col_zp.resize(static_cast<size_t>(n));
        for (int32_t& z : c.col_zp) z = static_cast<int32_t>(rng() % 256) - 128;
        c.row_scale.resize(9);
        for (float& f : c.row_scale) f = 0.25f + static_cast<float>(rng() % 100) / 64.0f;
        c.alpha = 0.125f;
        c.bias.resize(9 * 4);
        for (int i = 0; i < 9; ++i) {
          const float b = static_cast<float>(static_cast<int>(rng() % 2001) - 1000);
          std::memcpy(&c.bias[static_cast<size_t>(i) * 4], &b, 4);
        }
        c.relu = (k + n) % 2 == 0;
        set_layout(c, n % 2 ? DType::f32 : DType::f16, n, 1);
        SCOPED_TRACE(a_k_major ? "a K-major too" : "b K-major");
        EXPECT_GE(check_all_kernels(c), 1);
        IntCase plain = make_case(rng, Format::i8, Format::i8, 9, n, k);
        EXPECT_FALSE(repacked->can_run(args_of(plain), &why));
        EXPECT_NE(why.find("contiguous along K"), std::string::npos) << why;
        if (!has_isa || (n == 1 && !a_k_major)) continue;  // one row of B is contiguous either way
        qg::Explanation e;
        ASSERT_TRUE(qg::explain(args_of(c), &e).ok());
        EXPECT_EQ(e.chosen, "cpu_i8_repacked");
        if (HasFailure()) return;
      }
  // A B of 1100 rows x 4096: 17 whole bands of 64 rows and a part, one a
  // pool task, 4.5 MB (past the kept buffer: memory for the call).
  IntCase big = make_case(rng, Format::i8, Format::i8, 3, 1100, 4096, /*b_k_major=*/true);
  EXPECT_GE(check_all_kernels(big), 1);
  // Rows two bytes apart (a [K, N] view of every other column): the byte-by-byte path.
  IntCase gaps = make_case(rng, Format::i8, Format::i8, 5, 70, 130);
  IntOperand& b = gaps.b;
  b.row_stride = 2;
  b.block_stride = 2 * b.rows;
  b.bytes.assign(static_cast<size_t>(b.k * b.block_stride), qgtest::kSentinelByte);
  for (int64_t r = 0; r < b.rows; ++r)
    for (int64_t kk = 0; kk < b.k; ++kk) write_unit(b, r, kk, &b.bytes[kk * b.block_stride + r * b.row_stride]);
  SCOPED_TRACE("rows two bytes apart");
  EXPECT_GE(check_all_kernels(gaps), 1);
}

// The repack's 64 x 64 byte transposes, SSE2 and (where the CPU has it)
// AVX2, byte for byte against the definition, with source and destination
// rows at strides that are not multiples of 64 and the destination's gaps
// left as they were.
TEST(CpuIntGemm, RepackTileTransposes) {
#if defined(__SSE2__)
  QG_SEEDED_RNG(rng, 202);
  constexpr int64_t kSrcStride = 100, kDstStride = 70;
  std::vector<uint8_t> src(64 * kSrcStride);
  for (uint8_t& v : src) v = static_cast<uint8_t>(rng());
  using Fn = void (*)(const uint8_t*, int64_t, uint8_t*, int64_t);
  std::vector<std::pair<const char*, Fn>> fns = {{"sse2", qg::detail::cpu::transpose_tile64_sse2}};
  if (qg::detail::cpu::cpu_features().avx2) fns.emplace_back("avx2", qg::detail::cpu::transpose_tile64_avx2);
  for (const auto& [name, fn] : fns) {
    SCOPED_TRACE(name);
    std::vector<uint8_t> dst(64 * kDstStride, qgtest::kSentinelByte);
    fn(src.data(), kSrcStride, dst.data(), kDstStride);
    int bad = 0;
    for (int64_t r = 0; r < 64; ++r)
      for (int64_t j = 0; j < kDstStride; ++j) {
        const uint8_t want = j < 64 ? src[j * kSrcStride + r] : qgtest::kSentinelByte;
        if (dst[r * kDstStride + j] != want && ++bad <= 5)
          ADD_FAILURE() << "dst[" << r << "][" << j << "] = " << int(dst[r * kDstStride + j]) << ", want "
                        << int(want);
      }
    EXPECT_EQ(bad, 0);
  }
#else
  GTEST_SKIP() << "the tile transposes are x86-64 code";
#endif
}

// Every output dtype, row / column scales (per row and the one-element
// scalar form), alpha, beta, bias of each dtype, relu, row-major and
// transposed C (ldc = 1, ldc_n = M); C is NaN-poisoned and every element
// must be overwritten (beta = 0) while the gaps keep their bytes.
TEST(CpuIntGemm, EpilogueDtypesScalesBiasReluStridedC) {
  QG_SEEDED_RNG(rng, 300);
  struct Cfg {
    bool rs, rs_scalar, cs, cs_scalar, alpha, beta, bias;
    DType bias_dtype;
    bool relu;
  };
  const std::vector<Cfg> cfgs = {
      {false, false, false, false, false, false, false, DType::f32, false},
      {true, false, false, false, false, false, false, DType::f32, false},
      {true, true, true, true, false, false, false, DType::f32, false},
      {false, false, true, false, true, false, false, DType::f32, true},
      {false, false, false, false, false, true, false, DType::f32, false},
      {false, false, false, false, false, false, true, DType::f16, false},
      {true, false, true, false, true, true, true, DType::bf16, true},
      {true, true, true, false, true, false, true, DType::f32, true},
  };
  for (const Pair& p : {int_pairs()[0], int_pairs()[1]})
    for (const Cfg& e : cfgs)
      for (DType dt : {DType::f32, DType::f16, DType::bf16, DType::i32})
        for (bool transposed : {false, true}) {
          const bool float_only = e.rs || e.cs || e.alpha || e.beta || e.bias;
          if (dt == DType::i32 && float_only) continue;
          // N = 6 and, C transposed, 1; N = 18 (cpu_i8_amx's tiles) for the odd configurations
          const int64_t m = 21, n = transposed ? 1 : (&e - cfgs.data()) % 2 ? 18 : 6, k = p.ks[3];
          IntCase c = make_case(rng, p.a, p.b, m, n, k);
          if (transposed) set_layout(c, dt, 1, m + 2);
          else set_layout(c, dt, n + 1, 1);
          if (e.rs) {
            if (e.rs_scalar) c.row_scale = {qgtest::uniform(rng, 0.001f, 0.01f)};
            else
              for (int64_t i = 0; i < m; ++i) c.row_scale.push_back(qgtest::uniform(rng, -0.01f, 0.01f));
          }
          if (e.cs) {
            if (e.cs_scalar) c.col_scale = {qgtest::uniform(rng, 0.5f, 2.0f)};
            else
              for (int64_t j = 0; j < n; ++j) c.col_scale.push_back(qgtest::uniform(rng, -2.0f, 2.0f));
          }
          if (e.alpha) c.alpha = 0.0078125f;
          if (e.beta) {
            c.beta = -0.5f;
            for (int64_t i = 0; i < m; ++i)
              for (int64_t j = 0; j < n; ++j) qgtest::encode_float(&c.c[c.off(i, j)], dt, qgtest::uniform(rng, -50, 50));
          }
          if (e.bias) {
            c.bias_dtype = e.bias_dtype;
            const int64_t bs = qg::dtype_size(e.bias_dtype);
            c.bias.resize(static_cast<size_t>(m * bs));
            for (int64_t i = 0; i < m; ++i) qgtest::encode_float(&c.bias[i * bs], e.bias_dtype, qgtest::uniform(rng, -20, 20));
          }
          c.relu = e.relu;
          check_all_kernels(c);
          if (HasFailure()) return;
        }
}

// K = 0: the empty sum (0) through the epilogue; every element written.
TEST(CpuIntGemm, KZero) {
  QG_SEEDED_RNG(rng, 400);
  for (DType dt : {DType::i32, DType::f32, DType::bf16}) {
    IntCase c = make_case(rng, Format::i8, Format::i8, 5, 3, 0);
    set_layout(c, dt, 1, 5);
    if (dt != DType::i32) {
      c.bias.resize(20);
      for (int i = 0; i < 5; ++i) qgtest::encode_float(&c.bias[i * 4], DType::f32, static_cast<float>(i) - 2.0f);
      c.relu = true;
    }
    check_all_kernels(c);
  }
}

// Validation: K past the exact-int32 limit (named in the message), int32
// output with a bias, zero points on a weight-only pair.
TEST(CpuIntGemm, ValidationErrors) {
  std::vector<uint8_t> a(4), b(4);
  qg::GemmArgs g;
  g.a = {a.data(), Format::i8, 1, 131072, 131072, {}, {}, 0};
  g.b = {b.data(), Format::i8, 1, 131072, 131072, {}, {}, 0};
  g.c_dtype = DType::i32;
  int32_t out = 0;
  g.c = &out;
  g.ldc = 1;
  g.device = qg::Device::cpu();
  qg::Status s = qg::detail::check_gemm_args(g);
  EXPECT_EQ(s.code(), qg::StatusCode::invalid_argument);
  EXPECT_NE(s.message().find("131071"), std::string::npos) << s.message();
  // with int8 zero points the limit is 2^31 / (255 * 255)
  const int32_t zp = 3;
  g.a.k = g.b.k = 40000;
  g.a.row_stride = g.b.row_stride = 40000;
  g.epilogue.row_zero_point = &zp;
  g.epilogue.row_zero_point_scalar = true;
  g.epilogue.col_zero_point = &zp;
  g.epilogue.col_zero_point_scalar = true;
  s = qg::detail::check_gemm_args(g);
  EXPECT_NE(s.message().find("33025"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("zero points"), std::string::npos) << s.message();
  g.epilogue.row_zero_point = g.epilogue.col_zero_point = nullptr;
  g.a.k = g.b.k = 64;
  float bias = 1.0f;
  g.epilogue.bias = &bias;
  s = qg::detail::check_gemm_args(g);
  EXPECT_EQ(s.code(), qg::StatusCode::invalid_argument);
  EXPECT_NE(s.message().find("int32 output"), std::string::npos) << s.message();
  // zero points with a weight-only pair
  std::vector<float> x(64);
  std::vector<float> scales(2, 1.0f);
  qg::GemmArgs w;
  w.a = {a.data(), Format::i4, 1, 64, 32, {scales.data(), DType::f32, qg::Granularity::group, 32, 2}, {}, 0};
  w.b = {x.data(), Format::f32, 1, 64, 256, {}, {}, 0};
  w.c = &out;
  w.ldc = 1;
  w.device = qg::Device::cpu();
  EXPECT_TRUE(qg::detail::check_gemm_args(w).ok());
  w.epilogue.col_zero_point = &zp;
  w.epilogue.col_zero_point_scalar = true;
  s = qg::detail::check_gemm_args(w);
  EXPECT_EQ(s.code(), qg::StatusCode::invalid_argument);
  EXPECT_NE(s.message().find("zero points"), std::string::npos) << s.message();
}

// Zero points outside their operand's code range are refused where they are
// host memory (the int32 K limit, and the codes a zero point becomes, count
// on the range), naming the first one out of it.
TEST(CpuIntGemm, ZeroPointsOutsideTheCodeRangeRefused) {
  std::vector<uint8_t> a(64 * 3), b(64 * 2);
  std::vector<int32_t> c(6);
  qg::GemmArgs g;
  g.a = qg::packed_operand(a.data(), Format::i8, 3, 64);
  g.b = qg::packed_operand(b.data(), Format::i8, 2, 64);
  g.c = c.data();
  g.c_dtype = DType::i32;
  g.ldc = 2;
  g.device = qg::Device::cpu();
  const int32_t rows_ok[3] = {-128, 0, 127}, rows_bad[3] = {5, 128, 0}, col_bad = -129;
  g.epilogue.row_zero_point = rows_ok;
  EXPECT_TRUE(qg::gemm(g).ok());
  g.epilogue.row_zero_point = rows_bad;
  qg::Status s = qg::gemm(g);
  EXPECT_EQ(s.code(), qg::StatusCode::invalid_argument);
  EXPECT_NE(s.message().find("row zero point[1]=128 is outside the code range [-128, 127]"), std::string::npos)
      << s.message();
  g.epilogue.row_zero_point = nullptr;
  g.epilogue.col_zero_point = &col_bad;
  g.epilogue.col_zero_point_scalar = true;
  s = qg::gemm(g);
  EXPECT_NE(s.message().find("column zero point[0]=-129"), std::string::npos) << s.message();
  // Static zero points of quantize: i4 codes are -8..7.
  const std::vector<float> x(2 * 64, 1.0f);
  const float scales[2] = {0.5f, 0.5f};
  const int32_t zps[2] = {7, 8};
  std::vector<uint8_t> y(2 * 32, qgtest::kSentinelByte);
  qg::QuantizeArgs q;
  q.format = Format::i4;
  q.x = x.data();
  q.rows = 2;
  q.k = 64;
  q.x_row_stride = 64;
  q.y = y.data();
  q.y_row_stride = 32;
  q.device = qg::Device::cpu();
  q.granularity = qg::Granularity::row;
  q.static_scales = scales;
  q.static_zero_points = zps;
  s = qg::quantize(q);
  EXPECT_EQ(s.code(), qg::StatusCode::invalid_argument);
  EXPECT_NE(s.message().find("static zero point[1]=8 is outside the code range [-8, 7] of i4"), std::string::npos)
      << s.message();
  EXPECT_EQ(y, std::vector<uint8_t>(2 * 32, qgtest::kSentinelByte)) << "nothing written";
}

// ------------------------------------------------------------------ weight-only
struct WoCase {
  IntOperand w;
  Format xf = Format::f32;
  int64_t n = 0, group = 32;
  std::vector<float> x;            // [n][k] values (exact in xf)
  std::vector<uint8_t> xbytes;
  DType scale_dtype = DType::f32;
  std::vector<uint8_t> scales;     // [m][groups]
  std::vector<float> scale_values;
  DType zp_dtype = DType::i8;
  std::vector<uint8_t> zps;        // empty: none
  std::vector<int32_t> zp_values;
};

DType dtype_of(Format f) { return f == Format::f32 ? DType::f32 : f == Format::f16 ? DType::f16 : DType::bf16; }

WoCase make_wo(std::mt19937_64& rng, Format wf, Format xf, int64_t m, int64_t n, int64_t k, int64_t group,
               DType sdt, bool zp, DType zdt) {
  WoCase c;
  c.w = make_operand(rng, wf, m, k, false, static_cast<int64_t>(rng() % 2));
  c.xf = xf;
  c.n = n;
  c.group = group;
  const DType xd = dtype_of(xf);
  const int64_t xs = qg::dtype_size(xd);
  c.x.resize(static_cast<size_t>(n * k));
  c.xbytes.resize(static_cast<size_t>(std::max<int64_t>(n * k * xs, 1)));
  std::normal_distribution<float> gauss;
  for (int64_t i = 0; i < n * k; ++i) c.x[i] = qgtest::encode_float(&c.xbytes[i * xs], xd, gauss(rng));
  const int64_t groups = k / group;
  c.scale_dtype = sdt;
  const int64_t ss = qg::dtype_size(sdt);
  c.scales.resize(static_cast<size_t>(std::max<int64_t>(m * groups * ss, 1)));
  c.scale_values.resize(static_cast<size_t>(m * groups));
  for (int64_t i = 0; i < m * groups; ++i)
    c.scale_values[i] = qgtest::encode_float(&c.scales[i * ss], sdt, qgtest::uniform(rng, 0.001f, 0.02f));
  if (zp) {
    c.zp_dtype = zdt;
    const qg::detail::CodeRange r = range_of(wf);
    c.zp_values.resize(static_cast<size_t>(m * groups));
    c.zps.resize(static_cast<size_t>(std::max<int64_t>(m * groups * qg::dtype_size(zdt), 1)));
    for (int64_t i = 0; i < m * groups; ++i) {
      c.zp_values[i] = r.qmin + static_cast<int32_t>(rng() % static_cast<uint64_t>(r.qmax - r.qmin + 1));
      if (zdt == DType::i8) c.zps[i] = static_cast<uint8_t>(static_cast<int8_t>(c.zp_values[i]));
      else std::memcpy(&c.zps[i * 4], &c.zp_values[i], 4);
    }
  }
  return c;
}

qg::GemmArgs wo_args(WoCase& c, std::vector<float>& out) {
  const int64_t k = c.w.k, m = c.w.rows;
  qg::GemmArgs g;
  g.a = operand_of(c.w);
  g.a.scales = {c.scales.data(), c.scale_dtype, qg::Granularity::group, c.group, k / c.group};
  if (!c.zps.empty()) g.a.zero_points = {c.zps.data(), c.zp_dtype, qg::Granularity::group, c.group, k / c.group};
  g.b = {c.xbytes.data(), c.xf, c.n, k, k * qg::dtype_size(dtype_of(c.xf)), {}, {}, 0};
  out.assign(static_cast<size_t>(m * c.n), qgtest::poison());
  g.c = out.data();
  g.c_dtype = DType::f32;
  g.ldc = 1;  // [N, M]: x @ W^T
  g.ldc_n = m;
  g.device = qg::Device::cpu();
  return g;
}

std::vector<double> wo_reference(const WoCase& c) {
  const int64_t m = c.w.rows, k = c.w.k, groups = k / c.group;
  std::vector<double> ref(static_cast<size_t>(m * c.n));
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < c.n; ++j) {
      double acc = 0;
      for (int64_t x = 0; x < k; ++x) {
        const int64_t gi = i * groups + x / c.group;
        const double z = c.zp_values.empty() ? 0 : c.zp_values[gi];
        acc += static_cast<double>(c.scale_values[gi]) * (c.w.code(i, x) - z) * c.x[j * k + x];
      }
      ref[j * m + i] = acc;
    }
  return ref;
}

// cpu_wo_avx2_fixed and cpu_wo_avx2_fixed20 take one row of activations
// only (their can_run says so); every other weight-only kernel takes any N.
bool one_token_kernel(const qg::detail::GemmKernel* k) {
  return k && (std::string(k->name) == "cpu_wo_avx2_fixed" || std::string(k->name) == "cpu_wo_avx2_fixed20");
}

// Whether kernel k (null: dispatch) is to run call g here: false where this
// CPU lacks its ISA or it is a one-token kernel and N > 1; any other
// refusal by can_run is a failure.
bool wo_kernel_takes(const qg::detail::GemmKernel* k, const qg::GemmArgs& g) {
  std::string why;
  if (!k) return true;
  if (!qgtest::gemm_kernel_runs_on(*k, qg::Device::cpu(), &why)) return false;
  if (one_token_kernel(k) && g.b.rows != 1) {
    EXPECT_FALSE(qgtest::gemm_kernel_admits(*k, g, &why)) << k->name << " took N=" << g.b.rows;
    return false;
  }
  if (!qgtest::gemm_kernel_admits(*k, g, &why)) {
    ADD_FAILURE() << k->name << " refused: " << why;
    return false;
  }
  return true;
}

// Column j of a weight-only case alone (N = 1).
WoCase column_case(const WoCase& c, int64_t j) {
  WoCase col = c;
  col.n = 1;
  const int64_t k = c.w.k, xs = qg::dtype_size(dtype_of(c.xf));
  col.x.assign(c.x.begin() + j * k, c.x.begin() + (j + 1) * k);
  col.xbytes.assign(c.xbytes.begin() + j * k * xs, c.xbytes.begin() + (j + 1) * k * xs);
  return col;
}

TEST(CpuWeightOnlyGemm, MatchesFloat64) {
  uint64_t salt = 500;
  struct Shape {
    int64_t m, n, k;
  };
  for (Format wf : {Format::i4, Format::i8})
    for (Format xf : {Format::f32, Format::f16, Format::bf16})
      for (int64_t group : {32, 64, 128})
        for (int zp = 0; zp < 3; ++zp)
          for (const Shape& s : {Shape{67, 1, 256}, Shape{5, 7, 384}, Shape{130, 3, 128}}) {
            if (s.k % group) continue;
            QG_SEEDED_RNG(rng, ++salt);
            const DType sdt = group == 64 ? DType::f16 : group == 128 ? DType::bf16 : DType::f32;
            WoCase c = make_wo(rng, wf, xf, s.m, s.n, s.k, group, sdt, zp != 0, zp == 2 ? DType::i32 : DType::i8);
            const std::vector<double> ref = wo_reference(c);
            SCOPED_TRACE(std::string(qg::format_traits(wf).name) + " x " + qg::format_traits(xf).name + " group " +
                         std::to_string(group) + " zp " + std::to_string(zp) + " M=" + std::to_string(s.m) +
                         " N=" + std::to_string(s.n) + " K=" + std::to_string(s.k));
            for (const qg::detail::GemmKernel* k : kernels_for(wf, xf)) {
              std::vector<float> out;
              qg::GemmArgs g = wo_args(c, out);
              ASSERT_TRUE(qg::detail::check_gemm_args(g).ok()) << qg::detail::check_gemm_args(g).message();
              if (!wo_kernel_takes(k, g)) continue;
              const qg::Status st = k ? k->run(g, nullptr) : qg::gemm(g);
              ASSERT_TRUE(st.ok()) << st.message();
              std::vector<double> got(out.begin(), out.end());
              const double e = qgtest::nmse(got, ref);
              EXPECT_LE(e, 1e-6) << name_of(k);
              if (HasFailure()) return;
            }
          }
}

// The same bits whatever the thread count, and N = 1 equal to the same
// column inside a wider call (GEMV and tile paths sum in one order). A
// one-token kernel is held to the first at N = 1.
TEST(CpuWeightOnlyGemm, DeterministicAcrossThreadsAndPaths) {
  QG_SEEDED_RNG(rng, 600);
  const WoCase wide = make_wo(rng, Format::i4, Format::bf16, 300, 5, 1024, 128, DType::f16, true, DType::i8);
  for (const qg::detail::GemmKernel* k : kernels_for(Format::i4, Format::bf16)) {
    if (!k) continue;
    std::string why;
    if (!qgtest::gemm_kernel_runs_on(*k, qg::Device::cpu(), &why)) continue;
    WoCase c = one_token_kernel(k) ? column_case(wide, 2) : wide;
    std::vector<float> one, four;
    qg::set_cpu_threads(1);
    ASSERT_TRUE(k->run(wo_args(c, one), nullptr).ok());
    qg::set_cpu_threads(4);
    ASSERT_TRUE(k->run(wo_args(c, four), nullptr).ok());
    qg::set_cpu_threads(0);
    EXPECT_EQ(std::memcmp(one.data(), four.data(), one.size() * 4), 0) << k->name;
    if (one_token_kernel(k)) continue;
    // Column 2 alone (the N = 1 path) against the same column of the N = 5 call.
    WoCase col = column_case(c, 2);
    std::vector<float> single;
    ASSERT_TRUE(k->run(wo_args(col, single), nullptr).ok());
    EXPECT_EQ(std::memcmp(single.data(), four.data() + 2 * c.w.rows, single.size() * 4), 0) << k->name;
  }
}

// The weight-only kernels store a non-plain epilogue by register tile
// (cpu/epilogue_rows.h): the same bytes as epilogue_store applied to the
// plain call's fp32 sums, in every output dtype with every epilogue step at
// once, C m-contiguous (x @ W^T, padded) and row-major, at N = 1 (the GEMV
// paths) and N = 6 (a tile of 4 columns and one of 2); 21 rows leave a
// tail of one.
TEST(CpuWeightOnlyGemm, EpilogueTilesMatchElementEpilogue) {
  QG_SEEDED_RNG(rng, 650);
  const int64_t m = 21, k = 256;
  for (Format xf : {Format::bf16, Format::f32})
    for (int64_t n : {1, 6}) {
      WoCase c = make_wo(rng, Format::i4, xf, m, n, k, 128, DType::f16, true, DType::i8);
      std::vector<float> row_scale, col_scale;
      auto scale = [&] { return qgtest::uniform(rng, 0.25f, 2.0f) * ((rng() & 1) ? 1.0f : -1.0f); };
      for (int64_t i = 0; i < m; ++i) row_scale.push_back(scale());
      for (int64_t j = 0; j < n; ++j) col_scale.push_back(scale());
      std::vector<uint8_t> bias(static_cast<size_t>(2 * m));
      for (int64_t i = 0; i < m; ++i) qgtest::encode_float(&bias[2 * i], DType::bf16, qgtest::uniform(rng, -30, 30));
      for (const qg::detail::GemmKernel* kern : kernels_for(Format::i4, xf)) {
        std::vector<float> sums;
        const qg::GemmArgs plain = wo_args(c, sums);
        if (!wo_kernel_takes(kern, plain)) continue;
        ASSERT_TRUE((kern ? kern->run(plain, nullptr) : qg::gemm(plain)).ok()) << name_of(kern);
        for (DType dt : {DType::f32, DType::f16, DType::bf16})
          for (bool m_contiguous : {true, false}) {
            SCOPED_TRACE(name_of(kern) + ", x " + qg::format_traits(xf).name + ", N=" + std::to_string(n) +
                         ", out " + qg::dtype_name(dt) + (m_contiguous ? ", C [N, M]" : ", C [M, N]"));
            const int64_t es = qg::dtype_size(dt);
            const int64_t ldc = m_contiguous ? 1 : n + 1, ldc_n = m_contiguous ? m + 2 : 1;
            std::vector<uint8_t> cbuf(static_cast<size_t>(((m - 1) * ldc + (n - 1) * ldc_n + 1) * es), 0xA5);
            for (int64_t i = 0; i < m; ++i)
              for (int64_t j = 0; j < n; ++j)
                qgtest::encode_float(&cbuf[(i * ldc + j * ldc_n) * es], dt, qgtest::uniform(rng, -40, 40));
            std::vector<float> unused;
            qg::GemmArgs e = wo_args(c, unused);
            e.c = cbuf.data();
            e.c_dtype = dt;
            e.ldc = ldc;
            e.ldc_n = ldc_n;
            e.epilogue.alpha = -0.625f;
            e.epilogue.row_scale = row_scale.data();
            e.epilogue.col_scale = col_scale.data();
            e.epilogue.beta = 0.5f;
            e.epilogue.bias = bias.data();
            e.epilogue.bias_dtype = DType::bf16;
            e.epilogue.activation = qg::Activation::relu;
            std::vector<uint8_t> expect = cbuf;
            qg::detail::EpilogueParams p = qg::detail::epilogue_params(e);
            p.c = expect.data();
            for (int64_t i = 0; i < m; ++i)
              for (int64_t j = 0; j < n; ++j) qg::detail::epilogue_store(p, i, j, sums[j * m + i]);
            ASSERT_TRUE((kern ? kern->run(e, nullptr) : qg::gemm(e)).ok()) << name_of(kern);
            EXPECT_EQ(expect, cbuf);
          }
      }
    }
}

const qg::detail::GemmKernel* wo_kernel(const char* name, Format xf) {
  for (const qg::detail::GemmKernel* k : kernels_for(Format::i4, xf))
    if (k && std::string(k->name) == name) return k;
  ADD_FAILURE() << "no kernel " << name;
  return nullptr;
}

// Zero points grouped differently from their scales are refused by name
// (every kernel reads a scale and its zero point by one group index).
TEST(CpuWeightOnlyGemm, ZeroPointGroupsMustMatchTheScales) {
  QG_SEEDED_RNG(rng, 720);
  WoCase c = make_wo(rng, Format::i4, Format::f16, 5, 1, 256, 64, DType::f16, true, DType::i8);
  std::vector<float> out;
  qg::GemmArgs g = wo_args(c, out);
  g.a.zero_points.group_size = 128;
  g.a.zero_points.row_stride = 2;
  const qg::Status s = qg::gemm(g);
  EXPECT_EQ(s.code(), qg::StatusCode::invalid_argument);
  EXPECT_NE(s.message().find("group_size=128 must equal the scales' group_size=64"), std::string::npos) << s.message();
  for (float v : out) EXPECT_EQ(f2u(v), f2u(qgtest::poison())) << "C was written";
}

// cpu_wo_avx2 refuses K or groups not multiples of 32, cpu_wo_avx512 also
// groups other than 32, 64 and multiples of 128, cpu_wo_avx2_fixed groups
// other than 32 and multiples of 64 (and N > 1), each with its reason;
// dispatch falls back to the next kernel that takes the call.
TEST(CpuWeightOnlyGemm, SimdKernelsRefuseGroupsTheyCannotLoadAndDispatchFallsBack) {
  QG_SEEDED_RNG(rng, 700);
  struct Case {
    int64_t k, group;
    bool avx2_takes;
  };
  for (const Case& cs : {Case{48, 16, false}, Case{192, 96, true}, Case{320, 160, true}}) {
    SCOPED_TRACE("K=" + std::to_string(cs.k) + " group " + std::to_string(cs.group));
    WoCase c = make_wo(rng, Format::i4, Format::f32, 9, 2, cs.k, cs.group, DType::f32, true, DType::i32);
    const std::vector<double> ref = wo_reference(c);
    std::vector<float> out;
    qg::GemmArgs g = wo_args(c, out);
    // can_run judges the shape whatever this CPU has (the ISA is the arch window's).
    std::string why;
    EXPECT_FALSE(wo_kernel("cpu_wo_avx512_vnni", Format::f32)->can_run(g, &why));
    EXPECT_NE(why.find("group_size 32, 64 or a multiple of 128"), std::string::npos) << why;
    why.clear();
    EXPECT_EQ(wo_kernel("cpu_wo_avx2", Format::f32)->can_run(g, &why), cs.avx2_takes);
    if (!cs.avx2_takes) {
      EXPECT_NE(why.find("multiples of 32"), std::string::npos) << why;
    }
    // The one-token kernel: N = 2 refused as such; at N = 1, none of these groups.
    const qg::detail::GemmKernel* fixed = wo_kernel("cpu_wo_avx2_fixed", Format::f16);
    why.clear();
    EXPECT_FALSE(fixed->can_run(g, &why));
    EXPECT_NE(why.find("N=2: it takes one row of activations"), std::string::npos) << why;
    qg::GemmArgs one = g;
    one.b.rows = 1;
    why.clear();
    EXPECT_FALSE(fixed->can_run(one, &why));
    EXPECT_NE(why.find("group_size 32 or a multiple of 64"), std::string::npos) << why;
    qg::Explanation e;
    ASSERT_TRUE(qg::explain(g, &e).ok());
    EXPECT_EQ(e.chosen, cs.avx2_takes && have_avx2() ? "cpu_wo_avx2" : "cpu_wo_reference");
    ASSERT_TRUE(qg::gemm(g).ok());
    EXPECT_LE(qgtest::nmse(std::vector<double>(out.begin(), out.end()), ref), 1e-6);
  }
}

// K past the last whole 128 codes (the AVX-512 kernel's masked last load,
// its zero-padded activations and its partial groups of scales), groups of
// 256 (two loads a group), every scale and zero-point dtype, on every kernel.
TEST(CpuWeightOnlyGemm, KTailsAndLongGroups) {
  uint64_t salt = 900;
  struct Shape {
    int64_t m, n, k, group;
  };
  for (Format xf : {Format::f32, Format::f16, Format::bf16})
    for (const Shape& s : {Shape{5, 1, 32, 32}, Shape{67, 1, 96, 32}, Shape{9, 3, 160, 32}, Shape{7, 1, 192, 64},
                           Shape{66, 5, 448, 64}, Shape{6, 1, 512, 256}, Shape{9, 2, 768, 256}, Shape{3, 1, 416, 32},
                           // 14 and 15 groups a row: the AVX-512 kernel's scale table runs 18 and 17 past them
                           Shape{4, 1, 448, 32}, Shape{4, 2, 480, 32}})
      for (int zp = 0; zp < 3; ++zp) {
        QG_SEEDED_RNG(rng, ++salt);
        const DType sdt = salt % 3 == 0 ? DType::f32 : salt % 3 == 1 ? DType::f16 : DType::bf16;
        WoCase c = make_wo(rng, Format::i4, xf, s.m, s.n, s.k, s.group, sdt, zp != 0, zp == 2 ? DType::i32 : DType::i8);
        const std::vector<double> ref = wo_reference(c);
        SCOPED_TRACE(std::string(qg::format_traits(xf).name) + " group " + std::to_string(s.group) + " zp " +
                     std::to_string(zp) + " M=" + std::to_string(s.m) + " N=" + std::to_string(s.n) +
                     " K=" + std::to_string(s.k));
        for (const qg::detail::GemmKernel* k : kernels_for(Format::i4, xf)) {
          std::vector<float> out;
          qg::GemmArgs g = wo_args(c, out);
          if (!wo_kernel_takes(k, g)) continue;
          ASSERT_TRUE((k ? k->run(g, nullptr) : qg::gemm(g)).ok()) << name_of(k);
          EXPECT_LE(qgtest::nmse(std::vector<double>(out.begin(), out.end()), ref), 1e-6) << name_of(k);
          if (HasFailure()) return;
        }
      }
}

// Sets x[j][x] to v (rounded to the activations' dtype), in bytes and values.
void set_x(WoCase& c, int64_t j, int64_t x, float v) {
  const DType d = dtype_of(c.xf);
  const int64_t i = j * c.w.k + x;
  c.x[i] = qgtest::encode_float(&c.xbytes[i * qg::dtype_size(d)], d, v);
}

// The kernels that carry each activation in block fixed point (docs/
// numerics.md): every 32 consecutive x share a power of two 2^e, e = ex -
// bits where the block's largest |x| is m 2^ex (m in [0.5, 1)), and x_int =
// rint(x 2^-e), so any x is within 2^-bits of that largest.
struct FixedPointKernel {
  const char* name;
  int bits;
  bool one_token;  // takes N = 1 only
  bool takes_f32;  // fp32 activations too (else f16 and bf16 only)
};

class CpuWoFixedPoint : public ::testing::TestWithParam<FixedPointKernel> {
 protected:
  // The kernel, or null (and the test skipped) where this CPU lacks its ISA.
  const qg::detail::GemmKernel* kernel(Format xf) {
    const qg::detail::GemmKernel* k = wo_kernel(GetParam().name, xf);
    std::string why;
    if (k && !qgtest::gemm_kernel_runs_on(*k, qg::Device::cpu(), &why)) return nullptr;
    return k;
  }
  // How far C[i, j] of case c may be from float64: each x within 2^-bits
  // of its 32-block's largest |x|, plus fp32 rounding (10^-6 of each |x|),
  // times |s (q - z)|.
  double bound(const WoCase& c, int64_t i, int64_t j) const {
    const int64_t kk = c.w.k, groups = kk / c.group;
    double sum = 0;
    for (int64_t b = 0; b < kk / 32; ++b) {
      double amax = 0;
      for (int64_t x = 32 * b; x < 32 * b + 32; ++x) amax = std::max(amax, std::fabs(double(c.x[j * kk + x])));
      for (int64_t x = 32 * b; x < 32 * b + 32; ++x) {
        const int64_t gi = i * groups + x / c.group;
        const double z = c.zp_values.empty() ? 0 : c.zp_values[gi];
        const double w = std::fabs(c.scale_values[gi] * (c.w.code(i, x) - z));
        sum += w * (std::ldexp(amax, -GetParam().bits) + 1e-6 * std::fabs(double(c.x[j * kk + x])));
      }
    }
    return sum;
  }
  // Every output of case c within bound() of the float64 reference.
  void expect_within_bound(const WoCase& c, const std::vector<float>& out, const std::vector<double>& ref,
                           const std::string& what) {
    const int64_t m = c.w.rows;
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < c.n; ++j) {
        EXPECT_LE(std::fabs(out[j * m + i] - ref[j * m + i]), bound(c, i, j))
            << what << " C[" << i << ", " << j << "] = " << out[j * m + i] << ", want " << ref[j * m + i];
        if (::testing::Test::HasFailure()) return;
      }
  }
  // Runs case c on k into out ([N, M]): a one-token kernel column by column.
  void run_columns(const qg::detail::GemmKernel* k, const WoCase& c, std::vector<float>& out) {
    const int64_t m = c.w.rows;
    if (!GetParam().one_token) {
      WoCase run = c;
      ASSERT_TRUE(k->run(wo_args(run, out), nullptr).ok());
      return;
    }
    out.assign(static_cast<size_t>(m * c.n), 0.0f);
    for (int64_t j = 0; j < c.n; ++j) {
      WoCase col = column_case(c, j);
      std::vector<float> one;
      const qg::GemmArgs g = wo_args(col, one);
      std::string why;
      ASSERT_TRUE(qgtest::gemm_kernel_admits(*k, g, &why)) << why;
      ASSERT_TRUE(k->run(g, nullptr).ok());
      std::copy(one.begin(), one.end(), out.begin() + j * m);
    }
  }
};

// Activations spanning 2^-12..2^3 inside each block (and one block 1e3 x
// larger, an outlier channel): every output within the kernel's bound plus
// fp32 rounding, and the NMSE within the contract.
TEST_P(CpuWoFixedPoint, WithinItsBound) {
  uint64_t salt = 950;
  for (Format xf : {Format::f32, Format::f16, Format::bf16}) {
    if (xf == Format::f32 && !GetParam().takes_f32) continue;
    const qg::detail::GemmKernel* k = kernel(xf);
    if (!k) GTEST_SKIP() << GetParam().name << " needs an ISA this CPU lacks";
    for (int64_t group : {int64_t{128}, int64_t{32}}) {
      QG_SEEDED_RNG(rng, ++salt);
      // Groups of 32 with K ending half-way through a 64-code chunk.
      const int64_t k_len = group == 32 ? 1056 : 1024;
      WoCase c = make_wo(rng, Format::i4, xf, 37, 3, k_len, group, DType::f16, true, DType::i8);
      for (int64_t j = 0; j < c.n; ++j)
        for (int64_t x = 0; x < c.w.k; ++x) {
          const float mag = std::ldexp(1.0f, static_cast<int>(rng() % 15) - 12);  // f16 keeps all
          set_x(c, j, x, (rng() % 2 ? mag : -mag) * qgtest::uniform(rng, 1.0f, 2.0f) * (x / 32 == 5 ? 1e3f : 1.0f));
        }
      const std::vector<double> ref = wo_reference(c);
      std::vector<float> out;
      run_columns(k, c, out);
      expect_within_bound(c, out, ref, std::string(qg::format_traits(xf).name) + " group " + std::to_string(group));
      if (HasFailure()) return;
      EXPECT_LE(qgtest::nmse(std::vector<double>(out.begin(), out.end()), ref), 1e-6) << qg::format_traits(xf).name;
    }
  }
}

// Tiny bf16 activations (2^-124..2^-123, near the smallest normal; their
// blocks' 2^e near 2^-136): the kernels scale s (2^e t), whose 2^e t is
// exact, not (s 2^e) t, in which s 2^e would be a subnormal of a few bits.
// Held to the same bound.
TEST_P(CpuWoFixedPoint, TinyActivationsKeepTheirBits) {
  const qg::detail::GemmKernel* k = kernel(Format::bf16);
  if (!k) GTEST_SKIP() << GetParam().name << " needs an ISA this CPU lacks";
  uint64_t salt = 970;
  for (int64_t group : {int64_t{32}, int64_t{128}}) {
    QG_SEEDED_RNG(rng, ++salt);
    WoCase c = make_wo(rng, Format::i4, Format::bf16, 21, 2, 512, group, DType::f32, false, DType::i8);
    for (int64_t j = 0; j < c.n; ++j)
      for (int64_t x = 0; x < c.w.k; ++x)
        set_x(c, j, x, (rng() % 2 ? 1.0f : -1.0f) * std::ldexp(qgtest::uniform(rng, 1.0f, 2.0f), -124));
    const std::vector<double> ref = wo_reference(c);
    std::vector<float> out;
    run_columns(k, c, out);
    expect_within_bound(c, out, ref, "group " + std::to_string(group));
    if (HasFailure()) return;
  }
}

// The fixed-point rule itself, output by output: W row r holds code 1 at
// K position r and 0 elsewhere (scale 1), so C[r] is x[r] as the kernel
// carries it, with no sum to hide a rounding. Each 32-block's power of two
// is the one docs/numerics.md states (2^(ex - bits)), x_int rounds half to
// even, and an f16 x of at least 2^-(bits - 11) of its block's largest comes
// back exactly. Groups of 32 and 128 (the one-token kernel scales them on
// two paths).
TEST_P(CpuWoFixedPoint, FollowsTheRule) {
  const int bits = GetParam().bits;
  for (Format xf : {Format::f32, Format::f16})
    for (int64_t group : {int64_t{32}, int64_t{128}}) {
      if (xf == Format::f32 && !GetParam().takes_f32) continue;
      const qg::detail::GemmKernel* k = kernel(xf);
      if (!k) GTEST_SKIP() << GetParam().name << " needs an ISA this CPU lacks";
      QG_SEEDED_RNG(rng, (xf == Format::f32 ? 980 : 981) + 2 * group);
      const int64_t kk = 128;
      WoCase c = make_wo(rng, Format::i4, xf, kk, 1, kk, group, DType::f32, false, DType::i8);
      fill_codes(c.w, 0);
      for (int64_t r = 0; r < kk; ++r) {
        c.w.codes[r * kk + r] = 1;
        write_unit(c.w, r, r / 2, &c.w.bytes[r * c.w.row_stride + r / 2]);
      }
      for (auto& v : c.scale_values) v = 1.0f;
      for (int64_t i = 0; i < static_cast<int64_t>(c.scale_values.size()); ++i)
        qgtest::encode_float(&c.scales[i * 4], DType::f32, 1.0f);
      for (int64_t x = 0; x < kk; ++x) {
        // Every block's largest is 12 (ex = 4: a unit of x_int is 2^(4 - bits)).
        float v = x % 32 == 0 ? 12.0f : std::ldexp(qgtest::uniform(rng, 1.0f, 2.0f), static_cast<int>(rng() % 13) - 10);
        // Some values exactly half a unit off a whole one (ties to even; an
        // odd multiple of 2^(3 - bits) below 2 is an f16 too).
        if (x % 5 == 1) v = std::ldexp(static_cast<float>(2 * (rng() % 1000) + 1), 3 - bits);
        bool negative = rng() % 2;
        // fp32: blocks 1 and 2 led by +-16 (1 - 2^-22) instead (ex = 4 still),
        // whose x_int rounds up to +-2^bits, the ends of the rule.
        if (xf == Format::f32 && (x == 32 || x == 64)) {
          v = 16.0f * (1.0f - std::ldexp(1.0f, -22));
          negative = x == 64;
        }
        set_x(c, 0, x, negative ? -v : v);
      }
      std::vector<float> out;
      run_columns(k, c, out);
      for (int64_t b = 0; b < kk / 32; ++b) {
        double amax = 0;
        for (int64_t x = 32 * b; x < 32 * b + 32; ++x) amax = std::max(amax, std::fabs(double(c.x[x])));
        int ex = 0;
        std::frexp(amax, &ex);
        const int e = ex - bits;
        for (int64_t x = 32 * b; x < 32 * b + 32; ++x) {
          const double want = std::ldexp(std::nearbyint(std::ldexp(double(c.x[x]), -e)), e);
          EXPECT_EQ(double(out[x]), want) << qg::format_traits(xf).name << " group " << group << " x[" << x
                                          << "] = " << c.x[x];
          if (xf == Format::f16 && std::fabs(double(c.x[x])) >= std::ldexp(amax, 11 - bits)) {
            EXPECT_EQ(out[x], c.x[x]) << "f16 x[" << x << "] within 2^-" << bits - 11 << " of its block's largest";
          }
        }
      }
      if (HasFailure()) return;
    }
}

// Activations holding Inf or NaN have no fixed-point form: the kernel hands
// the call to the fp32 kernel, and every output is what the float64
// reference gives (+-Inf, NaN, or finite where its row and column are).
TEST_P(CpuWoFixedPoint, NonFiniteActivationsMatchTheReference) {
  const qg::detail::GemmKernel* k = kernel(Format::f16);
  if (!k) GTEST_SKIP() << GetParam().name << " needs an ISA this CPU lacks";
  QG_SEEDED_RNG(rng, 990);
  WoCase c = make_wo(rng, Format::i4, Format::f16, 9, 4, 256, 64, DType::f32, false, DType::i8);
  set_x(c, 1, 70, std::numeric_limits<float>::infinity());
  set_x(c, 2, 3, std::numeric_limits<float>::quiet_NaN());
  const std::vector<double> ref = wo_reference(c);
  std::vector<float> out;
  run_columns(k, c, out);
  const int64_t m = c.w.rows;
  for (size_t i = 0; i < ref.size(); ++i) {
    if (std::isnan(ref[i])) {
      EXPECT_TRUE(std::isnan(out[i])) << i;
    } else if (std::isinf(ref[i])) {
      EXPECT_EQ(double(out[i]), ref[i]) << i;
    } else {
      EXPECT_LE(std::fabs(out[i] - ref[i]), bound(c, int64_t(i) % m, int64_t(i) / m)) << i;
    }
  }
}

// A scale is read by its own row only. The kernels keep a step's scales in
// an fp32 table, and a K that ends inside a chunk leaves lanes past the
// last group, which must read zeros, not the next row's first scale (an Inf
// times their zero sums would be a NaN). Every odd row's first scale here
// is Inf, K ends inside the chunk, and every even row must still come out
// finite and equal to the reference. (The odd rows themselves are not
// checked: an Inf scale times a zero code is NaN element by element in the
// reference, and Inf or NaN by its group's sum in the kernels.)
TEST_P(CpuWoFixedPoint, ScalesStayInTheirRow) {
  const qg::detail::GemmKernel* k = kernel(Format::f16);
  if (!k) GTEST_SKIP() << GetParam().name << " needs an ISA this CPU lacks";
  QG_SEEDED_RNG(rng, 995);
  for (int64_t group : {32, 64}) {
    SCOPED_TRACE("group " + std::to_string(group));
    const int64_t m = 9, k_len = group == 32 ? 96 : 64, groups = k_len / group;
    WoCase c = make_wo(rng, Format::i4, Format::f16, m, 3, k_len, group, DType::f32, false, DType::i8);
    for (int64_t i = 1; i < m; i += 2) {
      c.scale_values[i * groups] = std::numeric_limits<float>::infinity();
      std::memcpy(&c.scales[4 * i * groups], &c.scale_values[i * groups], 4);
    }
    const std::vector<double> ref = wo_reference(c);
    std::vector<float> out;
    run_columns(k, c, out);
    for (size_t i = 0; i < ref.size(); ++i) {
      if ((i % m) % 2) continue;
      ASSERT_TRUE(std::isfinite(ref[i])) << i;
      EXPECT_LE(std::fabs(out[i] - ref[i]), bound(c, int64_t(i) % m, int64_t(i) / m))
          << "row " << i % m << " column " << i / m;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Kernels, CpuWoFixedPoint,
                         ::testing::Values(FixedPointKernel{"cpu_wo_avx512_vnni", 20, false, true},
                                           FixedPointKernel{"cpu_wo_avx2_fixed", 14, true, false},
                                           FixedPointKernel{"cpu_wo_avx2_fixed20", 20, true, true}),
                         [](const ::testing::TestParamInfo<FixedPointKernel>& i) { return std::string(i.param.name); });

// ------------------------------------------------------------------ quantize rules
struct Quantized {
  std::vector<uint8_t> codes;
  std::vector<float> scales;
  std::vector<int32_t> zps;
};

Quantized quantize(Format f, const std::vector<float>& x, int64_t rows, int64_t k, qg::Granularity gr,
                   int64_t group = 0, bool asym = false, const float* static_s = nullptr,
                   const int32_t* static_z = nullptr) {
  const qg::FormatTraits& t = qg::format_traits(f);
  Quantized q;
  q.codes.assign(static_cast<size_t>(rows * qg::row_bytes(t, k)), qgtest::kSentinelByte);
  const int64_t ns = gr == qg::Granularity::tensor ? 1 : gr == qg::Granularity::row ? rows : rows * (k / group);
  q.scales.assign(static_cast<size_t>(ns), -1.0f);
  q.zps.assign(static_cast<size_t>(ns), -999);
  qg::QuantizeArgs a;
  a.format = f;
  a.x = x.data();
  a.rows = rows;
  a.k = k;
  a.x_row_stride = k;
  a.y = q.codes.data();
  a.y_row_stride = qg::row_bytes(t, k);
  a.device = qg::Device::cpu();
  a.granularity = gr;
  a.group_size = group;
  if (static_s) {
    a.static_scales = static_s;
    a.static_zero_points = static_z;
  } else {
    a.scales = q.scales.data();
    a.zero_points = asym ? q.zps.data() : nullptr;
  }
  const qg::Status s = qg::quantize(a);
  EXPECT_TRUE(s.ok()) << s.message();
  return q;
}

std::vector<int> i8_codes(const Quantized& q) {
  std::vector<int> v;
  for (uint8_t b : q.codes) v.push_back(static_cast<int8_t>(b));
  return v;
}

TEST(CpuQuantizeTensor, SymmetricInt8PerTensorRoundsHalfToEven) {
  // absmax 127: scale 1, codes rint(x) with ties to even.
  const std::vector<float> x = {127.0f, -3.5f, 2.5f, 0.49f, -127.0f, 1.5f, -0.5f, 126.5f};
  const Quantized q = quantize(Format::i8, x, 2, 4, qg::Granularity::tensor);
  EXPECT_EQ(q.scales[0], 1.0f);
  EXPECT_EQ(i8_codes(q), (std::vector<int>{127, -4, 2, 0, -127, 2, 0, 126}));
  // scale = absmax / 127 in float: 2.54 / 127
  const Quantized q2 = quantize(Format::i8, {2.54f, -1.27f}, 1, 2, qg::Granularity::tensor);
  EXPECT_EQ(q2.scales[0], 2.54f / 127.0f);
  EXPECT_EQ(i8_codes(q2), (std::vector<int>{127, static_cast<int>(std::nearbyint(-1.27f * (1.0f / (2.54f / 127.0f))))}));
}

TEST(CpuQuantizeTensor, AsymmetricInt8) {
  // [0, 255]: scale 1, zp = -128 - rint(0) = -128
  Quantized q = quantize(Format::i8, {0.0f, 255.0f, 10.5f, 100.0f}, 1, 4, qg::Granularity::tensor, 0, true);
  EXPECT_EQ(q.scales[0], 1.0f);
  EXPECT_EQ(q.zps[0], -128);
  EXPECT_EQ(i8_codes(q), (std::vector<int>{-128, 127, -118, -28}));
  // [-51, 204]: scale 1, zp = -128 + 51 = -77
  q = quantize(Format::i8, {-51.0f, 204.0f, 0.0f, 1.0f}, 1, 4, qg::Granularity::tensor, 0, true);
  EXPECT_EQ(q.scales[0], 1.0f);
  EXPECT_EQ(q.zps[0], -77);
  EXPECT_EQ(i8_codes(q), (std::vector<int>{-128, 127, -77, -76}));
}

TEST(CpuQuantizeTensor, PerRowAndPerGroup) {
  // rows: absmax 127 (scale 1) and 63.5 (scale 0.5)
  Quantized q = quantize(Format::i8, {127.0f, 1.5f, -2.5f, 63.5f, 1.25f, -0.75f}, 2, 3, qg::Granularity::row);
  EXPECT_EQ(q.scales, (std::vector<float>{1.0f, 0.5f}));
  EXPECT_EQ(i8_codes(q), (std::vector<int>{127, 2, -2, 127, 2, -2}));
  // int4 groups of 4: absmax 7 (scale 1) and 14 (scale 2); low nibble first
  q = quantize(Format::i4, {7.0f, -3.5f, 2.5f, 1.0f, 14.0f, -5.0f, 3.0f, -14.0f}, 1, 8, qg::Granularity::group, 4);
  EXPECT_EQ(q.scales, (std::vector<float>{1.0f, 2.0f}));
  // codes 7 -4 2 1 | 7 -2 2 -7
  EXPECT_EQ(q.codes, (std::vector<uint8_t>{0xC7, 0x12, 0xE7, 0x92}));
}

TEST(CpuQuantizeTensor, Int4OddKAndInt4x8Words) {
  // K = 3: the last byte's high nibble is 0
  Quantized q = quantize(Format::i4, {7.0f, -7.0f, 3.0f, 3.5f, 0.0f, -7.0f}, 2, 3, qg::Granularity::row);
  EXPECT_EQ(q.codes, (std::vector<uint8_t>{0x97, 0x03, 0x04, 0x09}));  // 7 -7 3 | 4 0 -7
  // i4x8: eight codes a little-endian int32, element i in bits 4i.. as v + 8
  q = quantize(Format::i4x8, {0.0f, 1.0f, 2.0f, 3.5f, -1.0f, -2.5f, 7.0f, -7.0f}, 1, 8, qg::Granularity::tensor);
  EXPECT_EQ(q.scales[0], 1.0f);
  const int codes[8] = {0, 1, 2, 4, -1, -2, 7, -7};
  uint32_t want = 0;
  for (int i = 0; i < 8; ++i) want |= static_cast<uint32_t>(codes[i] + 8) << (4 * i);
  uint32_t got;
  std::memcpy(&got, q.codes.data(), 4);
  EXPECT_EQ(got, want);
}

TEST(CpuQuantizeTensor, StaticScales) {
  const float s = 0.5f;
  const int32_t z = 3;
  // clamp(rint(x / 0.5) + 3): 1.25 -> 2.5 -> 2 (+3 = 5); -100 saturates; 60 saturates
  const Quantized q = quantize(Format::i8, {1.25f, -100.0f, 60.0f, 0.0f}, 1, 4, qg::Granularity::tensor, 0, false, &s, &z);
  EXPECT_EQ(i8_codes(q), (std::vector<int>{5, -128, 123, 3}));
  EXPECT_EQ(q.scales[0], -1.0f) << "static scales are read, not written";
}

TEST(CpuQuantizeTensor, NaNPoisonsItsScopeOnlyAndZeroScopes) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (bool asym : {false, true}) {
    SCOPED_TRACE(asym ? "asymmetric" : "symmetric");
    const Quantized q =
        quantize(Format::i8, {1.0f, nan, 3.0f, 127.0f, -1.0f, 2.0f, 0.0f, 0.0f, 0.0f}, 3, 3, qg::Granularity::row, 0, asym);
    const std::vector<int> codes = i8_codes(q);
    EXPECT_TRUE(std::isnan(q.scales[0]));
    const int zp0 = asym ? q.zps[0] : 0;
    EXPECT_EQ(codes[0], zp0);
    EXPECT_EQ(codes[1], zp0);
    EXPECT_EQ(codes[2], zp0);
    EXPECT_TRUE(std::isfinite(q.scales[1]));
    if (!asym) {
      EXPECT_EQ(q.scales[1], 1.0f);
      EXPECT_EQ((std::vector<int>(codes.begin() + 3, codes.begin() + 6)), (std::vector<int>{127, -1, 2}));
    }
    // all-zero row: scale 0 and codes that dequantize to 0
    EXPECT_EQ(q.scales[2], 0.0f);
    for (int i = 6; i < 9; ++i) EXPECT_EQ(codes[i], asym ? q.zps[2] : 0);
  }
}

// The AVX2 loops of the integer quantizer against int_formats.h's scalar
// rules, value by value: every dtype, lengths with every tail, values at
// rounding ties, past the code range, signed zeros, subnormals, Inf and NaN
// (which a static scope codes; a dynamic one is poisoned before coding).
TEST(CpuQuantizeTensor, VectorLoopsMatchTheScalarRules) {
  const auto& cf = qg::detail::cpu::cpu_features();
  if (!(cf.avx2 && cf.fma && cf.f16c)) GTEST_SKIP() << "this CPU (or QG_CPU_ISA) has no AVX2 + FMA + F16C";
  QG_SEEDED_RNG(rng, 830);
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  const float specials[] = {0.0f, -0.0f, 0.5f, -0.5f, 1.5f, -2.5f, 126.5f, -127.5f, 127.5f, 1e30f, -1e30f,
                            1e-40f, -1e-45f, 3.0e38f, inf, -inf, nan};
  constexpr int kFinite = 14;  // specials[0 .. kFinite - 1] are finite (in f32)
  std::uniform_real_distribution<float> mag(-6.0f, 6.0f);
  std::uniform_int_distribution<int> pick(0, 99), finite_special(0, kFinite - 1), any_special(0, 16);
  for (DType dt : {DType::f32, DType::f16, DType::bf16})
    for (int64_t n = 0; n <= 67; ++n)
      for (int trial = 0; trial < 3; ++trial) {
        SCOPED_TRACE(std::string(qg::dtype_name(dt)) + " n " + std::to_string(n) + " trial " + std::to_string(trial));
        // Values: random magnitudes and signs, 15 % of them special. Trial 0
        // draws no Inf or NaN in f32 (f16 turns its largest values into Inf),
        // so that the measured extent is compared too; the others draw all.
        std::vector<float> v(static_cast<size_t>(n));
        for (auto& x : v) {
          if (pick(rng) >= 15) {
            x = std::ldexp(mag(rng), static_cast<int>(mag(rng)));
            continue;
          }
          x = specials[trial == 0 ? finite_special(rng) : any_special(rng)];
        }
        std::vector<uint8_t> bytes(static_cast<size_t>(n) * qg::dtype_size(dt));
        for (int64_t k = 0; k < n; ++k) {
          if (dt == DType::f32) {
            std::memcpy(&bytes[4 * k], &v[k], 4);
            continue;
          }
          const uint16_t h = dt == DType::f16 ? qg::detail::fp32_to_fp16(v[k]) : qg::detail::fp32_to_bf16(v[k]);
          std::memcpy(&bytes[2 * k], &h, 2);
          v[k] = dt == DType::f16 ? qg::detail::fp16_to_fp32(h) : qg::detail::bf16_to_fp32(h);  // what the loops read
        }
        float lo = -1.0f, hi = -1.0f, absmax = -1.0f;
        // The extent of values [0, m): finite, min, max, largest magnitude.
        struct Want {
          bool finite = true;
          float lo = 0.0f, hi = 0.0f, abs = 0.0f;
        };
        auto extent = [&](int64_t m) {
          Want w;
          for (int64_t k = 0; k < m; ++k) {
            if (!qg::detail::is_finite(v[k])) {
              w.finite = false;
              continue;
            }
            w.lo = std::min(w.lo, v[k]);
            w.hi = std::max(w.hi, v[k]);
            w.abs = std::max(w.abs, std::fabs(v[k]));
          }
          return w;
        };
        // The loop measures the whole vectors; the caller adds the last n % 8.
        const Want vec = extent(n & ~int64_t{7});
        ASSERT_EQ(qg::detail::cpu::measure_scope_avx2(bytes.data(), dt, n, &lo, &hi, &absmax), vec.finite);
        if (vec.finite) {  // zeros of either sign are the same extent
          EXPECT_EQ(lo, vec.lo);
          EXPECT_EQ(hi, vec.hi);
          EXPECT_EQ(absmax, vec.abs);
        }
        const Want all = extent(n);
        const bool finite = all.finite;
        const float want_lo = all.lo, want_hi = all.hi, want_abs = all.abs;
        // Codes with a dynamic scope's parameters where it is finite, and
        // with static ones for every trial: a plain, a tiny and a zero scale,
        // and a zero point past the code range (which NaN codes store as its
        // low byte; validation refuses it where it can read it, and the
        // loops must match the scalar code anyway).
        std::vector<qg::detail::ScopeParams> params;
        for (qg::Format f : {Format::i8, Format::i4}) {
          const qg::detail::CodeRange c = qg::detail::code_range(f);
          if (finite) {
            params.push_back(qg::detail::symmetric_params(want_abs, c));
            params.push_back(qg::detail::asymmetric_params(want_lo, want_hi, c));
          }
          params.push_back(qg::detail::static_params(0.25f, f == Format::i8 ? -3 : 2));
          params.push_back(qg::detail::static_params(1e-30f, 0));
          params.push_back(qg::detail::static_params(0.0f, 1));
          params.push_back(qg::detail::static_params(0.5f, 200));
          params.push_back(qg::detail::static_params(0.0f, -300));
          for (const qg::detail::ScopeParams& p : params) {
            std::vector<int8_t> codes(static_cast<size_t>(n) + 1, 77);
            qg::detail::cpu::quantize_codes_avx2(bytes.data(), dt, n, p.inv, p.zp, c.qmin, c.qmax, codes.data());
            for (int64_t k = 0; k < n; ++k)
              ASSERT_EQ(codes[k], static_cast<int8_t>(qg::detail::quantize_value(v[k], p, c)))
                  << "x " << v[k] << " scale " << p.scale << " zp " << p.zp << " qmax " << c.qmax << " at " << k;
            EXPECT_EQ(codes[n], 77) << "wrote past n";
          }
          params.clear();
        }
      }
  // Packing 4-bit codes two a byte, both forms, every tail.
  std::uniform_int_distribution<int> code(-8, 7);
  for (int64_t n = 0; n <= 99; ++n)
    for (Format f : {Format::i4, Format::i4x8}) {
      std::vector<int8_t> codes(static_cast<size_t>(n));
      for (auto& c : codes) c = static_cast<int8_t>(code(rng));
      std::vector<uint8_t> packed(static_cast<size_t>(n + 1) / 2 + 1, 0xA5);
      qg::detail::cpu::pack_nibbles_avx2(codes.data(), n, f == Format::i4x8, packed.data());
      for (int64_t i = 0; i < n; i += 2)
        ASSERT_EQ(packed[i / 2], qg::detail::pack_pair(f, codes[i], i + 1 < n ? codes[i + 1] : 0))
            << qg::format_traits(f).name << " n " << n << " byte " << i / 2;
      EXPECT_EQ(packed.back(), 0xA5) << "wrote past the last byte, n " << n;
    }
}

// Whole calls on rows longer than the loops' vectors and the 4-bit path's
// runs of 256 codes, against the scalar rules applied here element by
// element: every format, scope and form, an odd K, a NaN that poisons its
// scope, an Inf, ties. On an AVX2 CPU this is the vector path end to end.
TEST(CpuQuantizeTensor, LongRowsMatchTheScalarRules) {
  namespace d = qg::detail;
  uint64_t salt = 840;
  for (Format f : {Format::i8, Format::i4, Format::i4x8})
    for (qg::Granularity gr : {qg::Granularity::tensor, qg::Granularity::row, qg::Granularity::group})
      for (int64_t group : {int64_t{32}, int64_t{128}})
        for (bool asym : {false, true}) {
          if ((asym && f == Format::i4x8) || (gr != qg::Granularity::group && group == 128)) continue;
          const int64_t rows = 3, k = gr == qg::Granularity::group ? 768 : (f == Format::i4 ? 701 : 704);
          const int64_t g = gr == qg::Granularity::group ? group : 0;
          SCOPED_TRACE(std::string(qg::format_traits(f).name) + (asym ? " asymmetric" : " symmetric") + " scope " +
                       std::to_string(static_cast<int>(gr)) + " group " + std::to_string(g));
          QG_SEEDED_RNG(rng, ++salt);
          std::normal_distribution<float> gauss(asym ? 0.5f : 0.0f, 3.0f);
          std::vector<float> x(static_cast<size_t>(rows * k));
          for (auto& v : x) v = gauss(rng);
          for (int64_t i = 0; i < k; i += 7) x[i] = 0.5f * static_cast<float>(i % 9) - 2.0f;  // ties once scaled by 1
          x[1 * k + 300] = std::numeric_limits<float>::quiet_NaN();  // poisons row 1 (or its group, or the tensor)
          x[2 * k + 37] = std::numeric_limits<float>::infinity();
          const Quantized q = quantize(f, x, rows, k, gr, g, asym);
          const d::CodeRange c = d::code_range(f);
          const int64_t per_row = gr == qg::Granularity::tensor ? rows * k : gr == qg::Granularity::row ? k : g;
          const int64_t rb = qg::row_bytes(qg::format_traits(f), k);
          for (int64_t r = 0; r < rows; ++r) {
            std::vector<int> codes(static_cast<size_t>(k) + 1, 0);
            for (int64_t e = 0; e < k; ++e) {
              const int64_t scope = d::scope_index(gr, r, e, k, g);
              // The scope's values: the whole tensor, the row, or the group.
              const int64_t first =
                  gr == qg::Granularity::tensor ? 0 : r * k + (gr == qg::Granularity::group ? (e / g) * g : 0);
              bool finite = true;
              float lo = 0.0f, hi = 0.0f, am = 0.0f;
              for (int64_t i = first; i < first + per_row; ++i) {
                if (!d::is_finite(x[i])) {
                  finite = false;
                  continue;
                }
                lo = std::min(lo, x[i]);
                hi = std::max(hi, x[i]);
                am = std::max(am, std::fabs(x[i]));
              }
              const float nan = std::numeric_limits<float>::quiet_NaN();
              const d::ScopeParams p = asym ? d::asymmetric_params(finite ? lo : nan, finite ? hi : nan, c)
                                            : d::symmetric_params(finite ? am : nan, c);
              if (e == 0 || scope != d::scope_index(gr, r, e - 1, k, g)) {
                ASSERT_EQ(d::float_bits(q.scales[scope]), d::float_bits(p.scale)) << "scope " << scope;
                if (asym) {
                  ASSERT_EQ(q.zps[scope], p.zp) << "scope " << scope;
                }
              }
              codes[e] = d::quantize_value(x[r * k + e], p, c);
            }
            for (int64_t b = 0; b < rb; ++b) {
              const int hi = 2 * b + 1 < k ? codes[2 * b + 1] : 0;
              const uint8_t want = f == Format::i8 ? static_cast<uint8_t>(static_cast<int8_t>(codes[b]))
                                                   : d::pack_pair(f, codes[2 * b], hi);
              ASSERT_EQ(q.codes[r * rb + b], want) << "row " << r << " byte " << b;
            }
          }
        }
}

// quantize -> dequantize within half a scale, for every format, scope and
// symmetric / asymmetric form.
TEST(CpuQuantizeTensor, RoundTripWithinHalfAScale) {
  uint64_t salt = 800;
  for (Format f : {Format::i8, Format::i4, Format::i4x8})
    for (qg::Granularity gr : {qg::Granularity::tensor, qg::Granularity::row, qg::Granularity::group})
      for (bool asym : {false, true}) {
        if (asym && f == Format::i4x8) continue;  // i4x8 is symmetric
        QG_SEEDED_RNG(rng, ++salt);
        const int64_t rows = 5, k = 64, group = gr == qg::Granularity::group ? 16 : 0;
        std::vector<float> x(static_cast<size_t>(rows * k));
        std::normal_distribution<float> gauss(asym ? 1.0f : 0.0f, 2.0f);
        for (auto& v : x) v = gauss(rng);
        const Quantized q = quantize(f, x, rows, k, gr, group, asym);
        std::vector<float> y(x.size(), qgtest::poison());
        qg::DequantizeArgs d;
        d.format = f;
        d.xq = q.codes.data();
        d.rows = rows;
        d.k = k;
        d.xq_row_stride = qg::row_bytes(qg::format_traits(f), k);
        d.y = y.data();
        d.y_row_stride = k;
        d.device = qg::Device::cpu();
        d.granularity = gr;
        d.group_size = group;
        d.scales = q.scales.data();
        d.zero_points = asym ? q.zps.data() : nullptr;
        ASSERT_TRUE(qg::dequantize(d).ok());
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t e = 0; e < k; ++e) {
            const float s = q.scales[qg::detail::scope_index(gr, r, e, k, group)];
            ASSERT_LE(std::fabs(x[r * k + e] - y[r * k + e]), 0.5 * s * (1 + 1e-5) + 1e-7)
                << qg::format_traits(f).name << " row " << r << " k " << e << " x=" << x[r * k + e];
          }
      }
}

}  // namespace
