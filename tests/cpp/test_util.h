// SPDX-License-Identifier: MIT
// test_util.h: shared helpers for qg's C++ tests: seeded RNGs (the seed is
// printed), NMSE, NaN poisoning and sentinels, and an fp16 conversion written
// independently of the core's (double arithmetic, not bit manipulation).
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <limits>
#include <random>
#include <string>
#include <vector>

namespace qgtest {

// ------------------------------------------------------------------ bits
inline uint32_t f2u(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float u2f(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// ------------------------------------------------------------------ seeds
// Base seed: QG_TEST_SEED from the environment, else a fixed default, so a
// failure is reproducible by rerunning with the printed value.
inline uint64_t base_seed() {
  if (const char* s = std::getenv("QG_TEST_SEED")) return std::strtoull(s, nullptr, 0);
  return 20240611u;
}

// A per-test seed: the base mixed with the test's name and a salt (so tests
// do not share streams), printed to stdout.
inline uint64_t seed_for(uint64_t salt) {
  std::string name = "?";
  if (const auto* info = ::testing::UnitTest::GetInstance()->current_test_info())
    name = std::string(info->test_suite_name()) + "." + info->name();
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (char c : name) h = (h ^ static_cast<uint8_t>(c)) * 1099511628211ull;
  const uint64_t seed = base_seed() ^ h ^ (salt * 0x9E3779B97F4A7C15ull);
  std::cout << "[   seed   ] " << name << " salt=" << salt << " seed=" << seed
            << " (base QG_TEST_SEED=" << base_seed() << ")" << std::endl;
  return seed;
}

// Declares `std::mt19937_64 name` seeded by seed_for(salt) and a SCOPED_TRACE
// carrying the seed, so every assertion failure in the scope names it.
#define QG_SEEDED_RNG(name, salt)                                              \
  const uint64_t name##_seed = ::qgtest::seed_for(salt);                       \
  SCOPED_TRACE("seed=" + std::to_string(name##_seed) + " salt=" + std::to_string(salt)); \
  std::mt19937_64 name(name##_seed)

inline float uniform(std::mt19937_64& rng, float lo, float hi) {
  return std::uniform_real_distribution<float>(lo, hi)(rng);
}

// ------------------------------------------------------------------ fp16 reference
// binary16 -> value, via ldexp in double (exact).
inline float ref_fp16_to_fp32(uint16_t h) {
  const bool neg = h & 0x8000;
  const int e = (h >> 10) & 0x1F;
  const int m = h & 0x3FF;
  double v;
  if (e == 0x1F) {
    if (m != 0) return u2f((neg ? 0x80000000u : 0u) | 0x7FC00000u | (static_cast<uint32_t>(m) << 13));
    v = std::numeric_limits<double>::infinity();
  } else if (e == 0) {
    v = std::ldexp(static_cast<double>(m), -24);
  } else {
    v = std::ldexp(1024.0 + m, e - 25);
  }
  return static_cast<float>(neg ? -v : v);
}

// value -> binary16 with IEEE round-to-nearest-even, computed as "round |x|
// to a multiple of the fp16 quantum at its binade" in double; NaN -> the
// canonical quiet NaN 0x7E00 with x's sign.
inline uint16_t ref_fp32_to_fp16(float f) {
  const uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  if (std::isnan(f)) return sign | 0x7E00;
  const double v = std::fabs(static_cast<double>(f));
  if (std::isinf(v) || v >= 65520.0) return sign | 0x7C00;
  if (v == 0.0) return sign;
  int e;
  std::frexp(v, &e);                         // v in [2^(e-1), 2^e)
  const int q = e - 1 - 10 < -24 ? -24 : e - 1 - 10;  // quantum 2^q: 11 significant bits, or 2^-24
  const double r = std::nearbyint(std::ldexp(v, -q));  // exact scaling; RNE (default mode)
  const double rv = std::ldexp(r, q);
  if (rv >= 65520.0) return sign | 0x7C00;
  if (rv < std::ldexp(1.0, -14)) return static_cast<uint16_t>(sign | static_cast<uint16_t>(r));  // subnormal (r <= 1024)
  int e2;
  const double frac = std::frexp(rv, &e2);   // rv = frac * 2^e2, frac in [0.5, 1)
  const int biased = e2 - 1 + 15;
  const int mant = static_cast<int>(std::ldexp(frac, 11)) - 1024;
  return static_cast<uint16_t>(sign | (biased << 10) | mant);
}

inline float ref_bf16_to_fp32(uint16_t b) { return u2f(static_cast<uint32_t>(b) << 16); }

// A random finite fp16 with exponent in [emin, emax] (unbiased), random sign
// and mantissa; emin = -15 gives subnormals (and zero) too.
inline uint16_t random_fp16(std::mt19937_64& rng, int emin, int emax) {
  const int e = std::uniform_int_distribution<int>(emin, emax)(rng);
  const uint16_t biased = static_cast<uint16_t>(e + 15 < 0 ? 0 : e + 15);
  const uint16_t mant = static_cast<uint16_t>(rng() & 0x3FF);
  const uint16_t sign = (rng() & 1) ? 0x8000 : 0;
  return static_cast<uint16_t>(sign | (biased << 10) | mant);
}

// ------------------------------------------------------------------ metrics
// NMSE = sum (out - ref)^2 / sum ref^2, in float64. Infinite if any output is
// non-finite where the reference is finite.
inline double nmse(const std::vector<double>& out, const std::vector<double>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    if (!std::isfinite(out[i])) return std::numeric_limits<double>::infinity();
    num += (out[i] - ref[i]) * (out[i] - ref[i]);
    den += ref[i] * ref[i];
  }
  return den == 0 ? (num == 0 ? 0 : std::numeric_limits<double>::infinity()) : num / den;
}

// ------------------------------------------------------------------ poisoning
// A quiet NaN with a recognisable payload: outputs are filled with it before a
// call (an unwritten element stays NaN and fails), and gaps between strided
// rows must still hold exactly these bits afterwards.
constexpr uint32_t kPoisonBits = 0x7FC5A5A5u;
inline float poison() { return u2f(kPoisonBits); }
inline void fill_poison(float* p, size_t n) {
  for (size_t i = 0; i < n; ++i) std::memcpy(p + i, &kPoisonBits, 4);
}
inline bool is_poison(float f) { return f2u(f) == kPoisonBits; }

constexpr uint8_t kSentinelByte = 0xA5;

}  // namespace qgtest
