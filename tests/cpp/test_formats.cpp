// SPDX-License-Identifier: MIT
// test_formats.cpp: block layouts, the traits table, small public helpers,
// and the core's fp16 conversion (quant_block.h) against an independent
// reference, exhaustively where that is cheap and against F16C where present.
#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "qg/qg.h"
#include "quant_block.h"
#include "test_util.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define QG_TEST_X86 1
#endif

namespace {

using qgtest::f2u;
using qgtest::ref_fp16_to_fp32;
using qgtest::ref_fp32_to_fp16;
using qgtest::u2f;
using qg::detail::fp16_to_fp32;
using qg::detail::fp32_to_fp16;

// ------------------------------------------------------------------ layouts
TEST(Formats, BlockStructsAreByteIdenticalToGgml) {
  EXPECT_EQ(sizeof(qg::block_q4_0), 18u);
  EXPECT_EQ(sizeof(qg::block_q8_0), 34u);
  EXPECT_EQ(sizeof(qg::block_q8_1), 36u);
  EXPECT_EQ(offsetof(qg::block_q4_0, d), 0u);
  EXPECT_EQ(offsetof(qg::block_q4_0, qs), 2u);
  EXPECT_EQ(offsetof(qg::block_q8_0, d), 0u);
  EXPECT_EQ(offsetof(qg::block_q8_0, qs), 2u);
  EXPECT_EQ(offsetof(qg::block_q8_1, d), 0u);
  EXPECT_EQ(offsetof(qg::block_q8_1, s), 2u);
  EXPECT_EQ(offsetof(qg::block_q8_1, qs), 4u);
  // Packed rows carry no alignment promise; the structs must not ask for more than 2.
  EXPECT_LE(alignof(qg::block_q4_0), 2u);
  EXPECT_LE(alignof(qg::block_q8_1), 2u);
  EXPECT_EQ(qg::kQK4_0, 32);
  EXPECT_EQ(qg::kQK8_0, 32);
  EXPECT_EQ(qg::kQK8_1, 32);
}

TEST(Formats, TraitsTable) {
  struct Expected {
    qg::Format f;
    const char* name;
    int block, bytes, bits;
    bool is_signed;
    int code_offset;
    qg::Packing packing;
    bool sum;
  };
  const Expected table[] = {
      {qg::Format::q4_0, "q4_0", 32, 18, 4, false, 8, qg::Packing::nibbles_split, false},
      {qg::Format::q8_0, "q8_0", 32, 34, 8, true, 0, qg::Packing::bytes, false},
      {qg::Format::q8_1, "q8_1", 32, 36, 8, true, 0, qg::Packing::bytes, true},
  };
  ASSERT_EQ(qg::kFormatCount, 10);
  for (const auto& e : table) {
    const qg::FormatTraits& t = qg::format_traits(e.f);
    SCOPED_TRACE(e.name);
    EXPECT_EQ(t.format, e.f);
    EXPECT_STREQ(t.name, e.name);
    EXPECT_EQ(t.block_size, e.block);
    EXPECT_EQ(t.bytes_per_block, e.bytes);
    EXPECT_EQ(t.element_bits, e.bits);
    EXPECT_EQ(t.is_signed, e.is_signed);
    EXPECT_EQ(t.code_offset, e.code_offset);
    EXPECT_EQ(t.packing, e.packing);
    EXPECT_EQ(t.has_block_sum, e.sum);
    // ggml's blocks: one fp16 scale (and Q8_1's fp16 sum) at the start of the block
    EXPECT_EQ(t.scale_place, qg::ScalePlace::in_block);
    EXPECT_EQ(t.scale_type, qg::ScaleType::f16);
    EXPECT_FALSE(t.has_zero_point);
    EXPECT_TRUE(t.quantizable);
    EXPECT_EQ(std::string(t.quantize_fn), std::string("qg.quantize_") + e.name);
    EXPECT_EQ(std::string(t.dequantize_fn), std::string("qg.dequantize_") + e.name);
    // bytes = scale(s) + codes
    EXPECT_EQ(t.bytes_per_block, 2 * (e.sum ? 2 : 1) + t.block_size * t.element_bits / 8);
    EXPECT_EQ(qg::row_bytes(t, 32 * 5), 5 * e.bytes);
    EXPECT_TRUE(t.blocked_view);
    EXPECT_EQ(t.storage, qg::DType::u8);
    EXPECT_EQ(t.rows_per_block, 1);
    qg::Format back;
    ASSERT_TRUE(qg::format_from_name(e.name, &back));
    EXPECT_EQ(back, e.f);
  }
  qg::Format f;
  EXPECT_FALSE(qg::format_from_name("q4_1", &f));
  EXPECT_FALSE(qg::format_from_name(nullptr, &f));
}

// q4_0x16: 16 Q4_0 rows' blocks at one K position in one 288-byte block
// (made by qg::repack only: not quantizable), viewed [rows / 16, K / 32, 288].
TEST(Formats, Q4_0x16Row) {
  const qg::FormatTraits& t = qg::format_traits(qg::Format::q4_0x16);
  EXPECT_STREQ(t.name, "q4_0x16");
  EXPECT_EQ(t.block_size, 32);
  EXPECT_EQ(t.bytes_per_block, 16 * 18);
  EXPECT_EQ(sizeof(qg::block_q4_0x16), 288u);
  EXPECT_EQ(offsetof(qg::block_q4_0x16, d), 256u);
  EXPECT_EQ(t.rows_per_block, 16);
  EXPECT_EQ(t.packing, qg::Packing::nibbles_rows16);
  EXPECT_EQ(t.code_offset, 8);
  EXPECT_FALSE(t.quantizable);
  EXPECT_TRUE(t.blocked_view);
  EXPECT_EQ(qg::stored_rows(t, 64), 4);
  qg::Format back;
  ASSERT_TRUE(qg::format_from_name("q4_0x16", &back));
  EXPECT_EQ(back, qg::Format::q4_0x16);
  // Quantizing straight to it is refused with the way to make it.
  std::vector<float> x(32);
  std::vector<uint8_t> y(288 * 16);
  qg::QuantizeArgs q;
  q.format = qg::Format::q4_0x16;
  q.x = x.data();
  q.rows = 16;
  q.k = 32;
  q.x_row_stride = 32;
  q.y = y.data();
  q.y_row_stride = 288;
  const qg::Status s = qg::quantize(q);
  EXPECT_EQ(s.code(), qg::StatusCode::invalid_argument);
  EXPECT_NE(s.message().find("qg.repack"), std::string::npos) << s.message();
}

// The integer family keeps its scales outside the codes and is viewed as
// flat rows of its storage dtype (docs/architecture.md).
TEST(Formats, IntegerAndFloatRows) {
  struct Expected {
    qg::Format f;
    const char* name;
    int block, bytes, bits, offset;
    qg::Packing packing;
    qg::DType storage;
    bool zp, pads;
    int64_t k, row_bytes, row_elements;
  };
  const Expected table[] = {
      {qg::Format::i8, "i8", 1, 1, 8, 0, qg::Packing::bytes, qg::DType::i8, true, false, 7, 7, 7},
      {qg::Format::i4, "i4", 2, 1, 4, 0, qg::Packing::nibbles_pairs, qg::DType::u8, true, true, 7, 4, 4},
      {qg::Format::i4x8, "i4x8", 8, 4, 4, 8, qg::Packing::nibbles_i32, qg::DType::i32, false, false, 16, 8, 2},
      {qg::Format::f16, "f16", 1, 2, 16, 0, qg::Packing::native, qg::DType::f16, false, false, 3, 6, 3},
      {qg::Format::bf16, "bf16", 1, 2, 16, 0, qg::Packing::native, qg::DType::bf16, false, false, 3, 6, 3},
      {qg::Format::f32, "f32", 1, 4, 32, 0, qg::Packing::native, qg::DType::f32, false, false, 3, 12, 3},
  };
  for (const auto& e : table) {
    const qg::FormatTraits& t = qg::format_traits(e.f);
    SCOPED_TRACE(e.name);
    EXPECT_EQ(t.format, e.f);
    EXPECT_STREQ(t.name, e.name);
    EXPECT_EQ(t.block_size, e.block);
    EXPECT_EQ(t.bytes_per_block, e.bytes);
    EXPECT_EQ(t.element_bits, e.bits);
    EXPECT_EQ(t.code_offset, e.offset);
    EXPECT_EQ(t.packing, e.packing);
    EXPECT_EQ(t.storage, e.storage);
    EXPECT_EQ(t.has_zero_point, e.zp);
    EXPECT_EQ(t.pads_k, e.pads);
    EXPECT_FALSE(t.blocked_view);
    EXPECT_EQ(qg::row_bytes(t, e.k), e.row_bytes);
    EXPECT_EQ(qg::row_elements(t, e.k), e.row_elements);
    EXPECT_EQ(t.scale_place, qg::is_integer_format(e.f) ? qg::ScalePlace::outside : qg::ScalePlace::none);
  }
  // int32 accumulation bounds: the largest |code - zero point|.
  EXPECT_EQ(qg::max_abs_code(qg::format_traits(qg::Format::i8), false), 128);
  EXPECT_EQ(qg::max_abs_code(qg::format_traits(qg::Format::i8), true), 255);
  EXPECT_EQ(qg::max_abs_code(qg::format_traits(qg::Format::i4), false), 8);
  EXPECT_EQ(qg::max_abs_code(qg::format_traits(qg::Format::i4), true), 15);
  EXPECT_EQ(qg::max_abs_code(qg::format_traits(qg::Format::f16), false), 0);
}

TEST(Formats, DtypeDeviceAndStatusHelpers) {
  EXPECT_EQ(qg::dtype_size(qg::DType::f32), 4);
  EXPECT_EQ(qg::dtype_size(qg::DType::f16), 2);
  EXPECT_EQ(qg::dtype_size(qg::DType::bf16), 2);
  EXPECT_EQ(qg::dtype_size(qg::DType::u8), 1);
  EXPECT_EQ(qg::dtype_size(qg::DType::i8), 1);
  EXPECT_EQ(qg::dtype_size(qg::DType::i32), 4);
  EXPECT_EQ(qg::dtype_size(qg::DType::f64), 8);
  EXPECT_STREQ(qg::dtype_name(qg::DType::f32), "float32");
  EXPECT_STREQ(qg::dtype_name(qg::DType::bf16), "bfloat16");
  EXPECT_STREQ(qg::dtype_name(qg::DType::u8), "uint8");
  EXPECT_EQ(qg::device_name(qg::Device::cpu()), "cpu");
  EXPECT_EQ(qg::device_name(qg::Device::cuda(1)), "cuda:1");
  EXPECT_NE(qg::Device::cpu(), qg::Device::cuda(0));
  EXPECT_NE(qg::Device::cuda(0), qg::Device::cuda(1));
  EXPECT_STREQ(qg::status_code_name(qg::StatusCode::ok), "ok");
  EXPECT_STREQ(qg::status_code_name(qg::StatusCode::type_error), "type_error");
  EXPECT_STREQ(qg::status_code_name(qg::StatusCode::invalid_argument), "invalid_argument");
  EXPECT_STREQ(qg::status_code_name(qg::StatusCode::backend_unavailable), "backend_unavailable");
  EXPECT_TRUE(qg::Status().ok());
  EXPECT_FALSE(qg::Status(qg::StatusCode::overflow, "x").ok());
}

TEST(Formats, MakeViewAndContiguity) {
  float buf[24];
  qg::TensorView v = qg::make_view(buf, qg::DType::f32, qg::Device::cpu(), {2, 3, 4});
  EXPECT_EQ(v.ndim, 3);
  EXPECT_EQ(v.strides[0], 12);
  EXPECT_EQ(v.strides[1], 4);
  EXPECT_EQ(v.strides[2], 1);
  EXPECT_EQ(v.numel(), 24);
  EXPECT_TRUE(v.is_contiguous());
  v.strides[0] = 13;  // padded rows
  EXPECT_FALSE(v.is_contiguous());
  v = qg::make_view(buf, qg::DType::f32, qg::Device::cpu(), {1, 3, 4});
  v.strides[0] = 999;  // size-1 dims' strides do not matter
  EXPECT_TRUE(v.is_contiguous());
  v = qg::make_view(buf, qg::DType::f32, qg::Device::cpu(), {0, 5});
  EXPECT_EQ(v.numel(), 0);
}

TEST(Formats, BuildInfoOnCpu) {
  const qg::BuildInfo info = qg::build_info();
  EXPECT_EQ(info.version, std::to_string(QG_VERSION_MAJOR) + "." + std::to_string(QG_VERSION_MINOR) + "." +
                              std::to_string(QG_VERSION_PATCH));
  EXPECT_GE(info.cpu_threads, 1);
  if (!info.cuda_built) {
    EXPECT_TRUE(info.cuda_archs.empty());
    std::string why;
    EXPECT_FALSE(qg::cuda_available(&why));
    EXPECT_NE(why.find("without CUDA"), std::string::npos) << why;
    EXPECT_TRUE(qg::cuda_devices().empty());
  }
}

// ------------------------------------------------------------------ fp16: the reference itself
// The test's reference must be right before it judges anything: known encodings.
TEST(Fp16Reference, KnownEncodings) {
  EXPECT_EQ(ref_fp32_to_fp16(1.0f), 0x3C00);
  EXPECT_EQ(ref_fp32_to_fp16(-2.0f), 0xC000);
  EXPECT_EQ(ref_fp32_to_fp16(0.5f), 0x3800);
  EXPECT_EQ(ref_fp32_to_fp16(65504.0f), 0x7BFF);
  EXPECT_EQ(ref_fp32_to_fp16(std::ldexp(1.0f, -14)), 0x0400);
  EXPECT_EQ(ref_fp32_to_fp16(std::ldexp(1.0f, -24)), 0x0001);
  EXPECT_EQ(ref_fp32_to_fp16(0.333251953125f), 0x3555);
  EXPECT_EQ(ref_fp16_to_fp32(0x3555), 0.333251953125f);
  EXPECT_EQ(ref_fp16_to_fp32(0x7BFF), 65504.0f);
  EXPECT_EQ(ref_fp16_to_fp32(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(ref_fp16_to_fp32(0x03FF), std::ldexp(1023.0f, -24));
  EXPECT_TRUE(std::isinf(ref_fp16_to_fp32(0xFC00)));
}

// ------------------------------------------------------------------ fp16: the core
struct Case {
  float x;
  uint16_t h;
  const char* what;
};

TEST(Fp16, EdgeValues) {
  const float tie_one = 1.0f + std::ldexp(1.0f, -11);        // halfway 1 and 1+2^-10: even -> 1
  const float tie_odd = 1.0f + 3 * std::ldexp(1.0f, -11);    // halfway 1+2^-10 and 1+2^-9: even -> up
  const float two_m25 = std::ldexp(1.0f, -25);               // halfway 0 and 2^-24: even -> 0
  const Case cases[] = {
      {0.0f, 0x0000, "+0"},
      {-0.0f, 0x8000, "-0"},
      {1.0f, 0x3C00, "1"},
      {tie_one, 0x3C00, "1+2^-11 (tie to even, down)"},
      {std::nextafter(tie_one, 2.0f), 0x3C01, "just above 1+2^-11"},
      {tie_odd, 0x3C02, "1+3*2^-11 (tie to even, up)"},
      {-tie_one, 0xBC00, "-(1+2^-11)"},
      {65504.0f, 0x7BFF, "65504 (max finite)"},
      {65519.99f, 0x7BFF, "65519.99 (below the overflow tie)"},
      {std::nextafter(65520.0f, 0.0f), 0x7BFF, "largest float below 65520"},
      {65520.0f, 0x7C00, "65520 (tie, rounds to inf)"},
      {-65520.0f, 0xFC00, "-65520"},
      {1e6f, 0x7C00, "1e6"},
      {std::numeric_limits<float>::max(), 0x7C00, "FLT_MAX"},
      {std::numeric_limits<float>::infinity(), 0x7C00, "+inf"},
      {-std::numeric_limits<float>::infinity(), 0xFC00, "-inf"},
      {std::ldexp(1.0f, -14), 0x0400, "2^-14 (min normal)"},
      {std::ldexp(1.0f, -14) - std::ldexp(1.0f, -25), 0x0400, "2^-14 - 2^-25 (tie into normal)"},
      {std::ldexp(1.0f, -24), 0x0001, "2^-24 (min subnormal)"},
      {std::ldexp(3.0f, -25), 0x0002, "3*2^-25 (tie, even -> 2)"},
      {std::ldexp(5.0f, -25), 0x0002, "5*2^-25 (tie, even -> 2)"},
      {two_m25, 0x0000, "2^-25 exactly (tie to 0)"},
      {-two_m25, 0x8000, "-2^-25 exactly"},
      {two_m25 * 1.0000001f, 0x0001, "2^-25*1.0000001 (just above the tie)"},
      {std::nextafter(two_m25, 0.0f), 0x0000, "just below 2^-25"},
      {1e-8f, 0x0000, "1e-8"},
      {1e-40f, 0x0000, "fp32 subnormal"},
      {-1e-40f, 0x8000, "negative fp32 subnormal"},
      {std::numeric_limits<float>::denorm_min(), 0x0000, "fp32 denorm_min"},
      {0.1f, 0x2E66, "0.1"},
      {-75000.0f, 0xFC00, "-75000 (Q4_0 scale of a 6e5 block)"},
      {std::nanf(""), 0x7E00, "NaN"},
      {-std::nanf(""), 0xFE00, "-NaN"},
      {u2f(0x7F800001u), 0x7E00, "signalling NaN, low payload"},
      {u2f(0x7FFFFFFFu), 0x7E00, "NaN, all payload bits"},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(fp32_to_fp16(c.x), c.h) << c.what << " x=" << c.x << " bits=0x" << std::hex << f2u(c.x);
    if (!std::isnan(c.x)) {  // the reference canonicalises NaN the same way, checked elsewhere
      EXPECT_EQ(ref_fp32_to_fp16(c.x), c.h) << "reference: " << c.what;
    }
  }
}

// All 2^16 encodings: decode matches the reference bit for bit, and encode(decode(h)) == h
// (NaNs come back as the canonical quiet NaN with their sign).
TEST(Fp16, ExhaustiveRoundTrip) {
  int failures = 0;
  for (uint32_t h = 0; h < 65536; ++h) {
    const uint16_t hh = static_cast<uint16_t>(h);
    const float f = fp16_to_fp32(hh);
    const bool is_nan = (hh & 0x7C00) == 0x7C00 && (hh & 0x3FF) != 0;
    if (is_nan) {
      if (!std::isnan(f) || std::signbit(f) != bool(hh & 0x8000) ||
          fp32_to_fp16(f) != ((hh & 0x8000) | 0x7E00)) {
        if (++failures < 10) ADD_FAILURE() << "NaN encoding 0x" << std::hex << h;
      }
      continue;
    }
    const float r = ref_fp16_to_fp32(hh);
    if (f2u(f) != f2u(r) || fp32_to_fp16(f) != hh) {
      if (++failures < 10)
        ADD_FAILURE() << "h=0x" << std::hex << h << " decoded " << f << " (ref " << r << ") re-encoded 0x"
                      << fp32_to_fp16(f);
    }
  }
  EXPECT_EQ(failures, 0);
}

// Every rounding boundary: for each adjacent pair of finite fp16 values, the
// midpoint (exact in fp32) and its two fp32 neighbours.
TEST(Fp16, AllMidpointsAndNeighbours) {
  int failures = 0;
  for (uint32_t h = 0; h < 0x7C00; ++h) {
    const double lo = ref_fp16_to_fp32(static_cast<uint16_t>(h));
    const double hi = h + 1 == 0x7C00 ? 65536.0 : ref_fp16_to_fp32(static_cast<uint16_t>(h + 1));
    const float mid = static_cast<float>((lo + hi) / 2);
    ASSERT_EQ(static_cast<double>(mid), (lo + hi) / 2) << "midpoint not exact in fp32";
    const float probes[] = {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1e30f)};
    for (float p : probes) {
      for (float s : {p, -p}) {
        if (fp32_to_fp16(s) != ref_fp32_to_fp16(s) && ++failures < 10)
          ADD_FAILURE() << "x=" << s << " bits=0x" << std::hex << f2u(s) << " core 0x" << fp32_to_fp16(s)
                        << " ref 0x" << ref_fp32_to_fp16(s);
      }
    }
  }
  EXPECT_EQ(failures, 0);
}

// A dense sweep of fp32 bit patterns (every 61st, about 7e7) against the reference.
TEST(Fp16, StridedSweepOfAllFloats) {
  int failures = 0;
  for (uint64_t u = 0; u <= 0xFFFFFFFFull; u += 61) {
    const float f = u2f(static_cast<uint32_t>(u));
    const uint16_t got = fp32_to_fp16(f);
    const uint16_t want = ref_fp32_to_fp16(f);
    if (got != want && ++failures < 10)
      ADD_FAILURE() << "bits=0x" << std::hex << u << " core 0x" << got << " ref 0x" << want;
  }
  EXPECT_EQ(failures, 0);
}

#if defined(QG_TEST_X86) && (defined(__GNUC__) || defined(__clang__))
__attribute__((target("f16c"))) uint16_t hw_fp32_to_fp16(float f) {
  return static_cast<uint16_t>(_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT));
}
__attribute__((target("f16c"))) float hw_fp16_to_fp32(uint16_t h) { return _cvtsh_ss(h); }
#define QG_TEST_HAVE_F16C_CODE 1
#endif

TEST(Fp16, MatchesF16cOnRandomBitPatterns) {
#if defined(QG_TEST_HAVE_F16C_CODE)
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("f16c")) GTEST_SKIP() << "this CPU has no F16C";
  QG_SEEDED_RNG(rng, 1);
  int failures = 0;
  for (int i = 0; i < 1000000; ++i) {
    const uint32_t u = static_cast<uint32_t>(rng());
    const float f = u2f(u);
    const uint16_t got = fp32_to_fp16(f);
    const uint16_t hw = hw_fp32_to_fp16(f);
    // F16C keeps NaN payload bits; qg canonicalises. Both must be NaN of the same sign.
    const bool ok = std::isnan(f) ? ((hw & 0x7C00) == 0x7C00 && (hw & 0x3FF) && got == ((hw & 0x8000) | 0x7E00))
                                  : got == hw;
    if (!ok && ++failures < 10)
      ADD_FAILURE() << "bits=0x" << std::hex << u << " core 0x" << got << " f16c 0x" << hw;
  }
  EXPECT_EQ(failures, 0);
  // and decoding, all 2^16 (non-NaN bit-exact; NaN stays NaN)
  for (uint32_t h = 0; h < 65536; ++h) {
    const float a = fp16_to_fp32(static_cast<uint16_t>(h)), b = hw_fp16_to_fp32(static_cast<uint16_t>(h));
    if (std::isnan(b)) {
      EXPECT_TRUE(std::isnan(a)) << std::hex << h;
    } else {
      ASSERT_EQ(f2u(a), f2u(b)) << "h=0x" << std::hex << h;
    }
  }
#else
  GTEST_SKIP() << "not an x86 build";
#endif
}

TEST(Bf16, UpcastIsExactShift) {
  EXPECT_EQ(qg::detail::bf16_to_fp32(0x3F80), 1.0f);
  EXPECT_EQ(qg::detail::bf16_to_fp32(0xC000), -2.0f);
  EXPECT_TRUE(std::isinf(qg::detail::bf16_to_fp32(0x7F80)));
  EXPECT_TRUE(std::isnan(qg::detail::bf16_to_fp32(0x7FC0)));
  for (uint32_t b = 0; b < 65536; b += 7)
    ASSERT_EQ(f2u(qg::detail::bf16_to_fp32(static_cast<uint16_t>(b))), b << 16);
}

}  // namespace
