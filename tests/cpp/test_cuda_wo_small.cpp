// SPDX-License-Identifier: MIT
// test_cuda_wo_small.cpp: the weight-only GEMVs on CUDA cores, on bulk
// copies and on cp.async rings, the tiled prefill GEMMs, and fp32
// activations on them (cuda_wo_f32_split, CudaWoF32 below) (i4 weights with
// group scales and zero points x f16 / bf16 activations): cuda_wo_gemv_small (N = 1..2, groups >= 32),
// cuda_wo_gemv_bulk (N = 2..16, groups >= 128, sm_90), cuda_wo_gemv_mma
// (N = 2..16, groups >= 128, K % 256 = 0, sm_90) and cuda_wo_gemv_fixed
// (N = 1, groups >= 32, sm_90), cuda_wo_mma (N >= 17, groups >= 32,
// K % 128 = 0, sm_80+), cuda_wo_wgmma (N >= 33, groups >= 128, int8 zero
// points, K % 128 = 0, sm_90a), each forced by name
// through the registry after the dispatcher's admission, against a float64
// evaluation of the same codes, scales and activations: NMSE <= 1e-6 (bf16
// C: 2e-5, its own rounding). C starts NaN-poisoned, so an element left
// unwritten fails. Skips without a CUDA device or below the kernel's arch.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <qg/qg.h>

#include "backend.h"
#include "cuda_test_util.h"
#include "test_util.h"

namespace {

using qg::DType;
using qg::Format;
using qgtest::DevBytes;

// What each kernel takes; a case outside it must be refused, one inside run.
struct KernelScope {
  const char* name;
  int64_t min_n, max_n, min_group, k_multiple;
  // Zero points applied as z * sum x (an mma against ones): with an infinite
  // x that can be Inf - Inf, so such an output may be NaN where the
  // reference's sum (q - z) x is +-Inf (docs/numerics.md).
  bool zero_points_through_sum_x;
  // int32 zero points taken (cuda_wo_wgmma decodes q - z into fp16 / bf16
  // operands, exact for int8 z only, and refuses int32 ones).
  bool int32_zero_points = true;
};
constexpr KernelScope kSmall{"cuda_wo_gemv_small", 1, 2, 32, 32, false};
// N = 1 is left to the FFMA kernel (faster there).
constexpr KernelScope kBulk{"cuda_wo_gemv_bulk", 2, 16, 128, 128, true};
constexpr KernelScope kFixed{"cuda_wo_gemv_fixed", 1, 1, 32, 32, false};
constexpr KernelScope kMmaRing{"cuda_wo_gemv_mma", 2, 16, 128, 256, true};
// Takes any N from 17: no upper limit to test.
constexpr int64_t kAnyN = int64_t{1} << 40;
constexpr KernelScope kTiled{"cuda_wo_mma", 17, kAnyN, 32, 128, true};
constexpr KernelScope kWgmmaTiled{"cuda_wo_wgmma", 33, kAnyN, 128, 128, false, false};

// Every device buffer gets 16 bytes allocated past its end.
constexpr size_t kSlack = 16;

struct Case {
  int64_t m = 0, n = 0, k = 0, group = 32;
  DType x_dtype = DType::f16, scale_dtype = DType::f16, zp_dtype = DType::i8;
  bool zero_points = false;
  int64_t w_stride = 0, s_stride = 0, z_stride = 0, x_stride = 0;  // bytes, elements, elements, bytes
  std::vector<uint8_t> w, scales, zps, x, bias;
  std::vector<float> col_scale;  // one a token (the epilogue's column scales), or none
  DType c_dtype = DType::f32;
  int64_t ldc = 0, ldc_n = 1;
  bool relu = false;
  std::vector<uint8_t> c_init, c_out;

  std::string describe() const {
    return "M=" + std::to_string(m) + " N=" + std::to_string(n) + " K=" + std::to_string(k) +
           " group=" + std::to_string(group) + " x " + qg::dtype_name(x_dtype) + " scales " +
           qg::dtype_name(scale_dtype) + (zero_points ? std::string(" zp ") + qg::dtype_name(zp_dtype) : "") +
           " C " + qg::dtype_name(c_dtype) + " ldc=" + std::to_string(ldc) + " ldc_n=" + std::to_string(ldc_n) +
           (bias.empty() ? "" : " bias") + (relu ? " relu" : "");
  }
  // Token j's activation i (x_dtype's size apart).
  uint8_t* x_at(int64_t j, int64_t i) { return &x[j * x_stride + qg::dtype_size(x_dtype) * i]; }
  const uint8_t* x_at(int64_t j, int64_t i) const { return &x[j * x_stride + qg::dtype_size(x_dtype) * i]; }
  int64_t zero(int64_t r, int64_t g) const {
    if (!zero_points) return 0;
    const int64_t i = r * z_stride + g;
    if (zp_dtype == DType::i8) return static_cast<int8_t>(zps[i]);
    int32_t v;
    std::memcpy(&v, &zps[4 * i], 4);
    return v;
  }
  void set_c(DType dt, bool transposed) {
    c_dtype = dt;
    if (transposed) ldc = 1, ldc_n = m;
    else ldc = n, ldc_n = 1;
    const int64_t elems = (m - 1) * ldc + (n - 1) * ldc_n + 1, es = qg::dtype_size(dt);
    c_init.assign(static_cast<size_t>(elems * es), 0);
    for (int64_t i = 0; i < elems; ++i) qgtest::poison_element(&c_init[i * es], dt);
  }
};

// Random codes, scales in [1/128, 1/4], zero points (int8: any; int32:
// +-3000), activations in [-2, 2]; padded rows carry sentinels / NaN bits.
Case make_case(std::mt19937_64& rng, int64_t m, int64_t n, int64_t k, int64_t group, DType xd, DType sd, bool zp,
               DType zd = DType::i8, bool pad = false) {
  Case c;
  c.m = m, c.n = n, c.k = k, c.group = group;
  c.x_dtype = xd, c.scale_dtype = sd, c.zero_points = zp, c.zp_dtype = zd;
  c.w_stride = k / 2 + (pad ? 16 : 0);
  c.s_stride = k / group + (pad ? 3 : 0);
  c.z_stride = k / group + (pad ? 5 : 0);  // padded: a row stride of its own, not the scales'

  c.x_stride = qg::dtype_size(xd) * k + (pad ? 32 : 0);
  c.w.assign(static_cast<size_t>(m * c.w_stride), qgtest::kSentinelByte);
  for (int64_t r = 0; r < m; ++r) {
    uint8_t* row = &c.w[r * c.w_stride];
    for (int64_t i = 0; i < k / 2; i += 8) {
      const uint64_t v = rng();
      std::memcpy(row + i, &v, 8);  // k / 2 is a multiple of 16
    }
  }
  const int64_t ss = qg::dtype_size(sd);
  c.scales.assign(static_cast<size_t>(m * c.s_stride * ss), 0);
  for (int64_t r = 0; r < m; ++r)
    for (int64_t g = 0; g < k / group; ++g)
      qgtest::encode_float(&c.scales[(r * c.s_stride + g) * ss], sd,
                           qgtest::uniform(rng, 0.5f, 2.0f) * ((rng() & 1) ? 1.0f / 64 : 1.0f / 8));
  if (zp) {
    const int64_t zs = qg::dtype_size(zd);
    c.zps.assign(static_cast<size_t>(m * c.z_stride * zs), 0);
    for (int64_t i = 0; i < m * c.z_stride; ++i) {
      if (zd == DType::i8) {
        c.zps[i] = static_cast<uint8_t>(rng());
      } else {
        const int32_t v = std::uniform_int_distribution<int32_t>(-3000, 3000)(rng);
        std::memcpy(&c.zps[4 * i], &v, 4);
      }
    }
  }
  c.x.assign(static_cast<size_t>(n * c.x_stride), 0xFF);
  for (int64_t j = 0; j < n; ++j)
    for (int64_t i = 0; i < k; ++i) qgtest::encode_float(c.x_at(j, i), xd, qgtest::uniform(rng, -2, 2));
  c.set_c(DType::f32, false);
  return c;
}

// float64 of the same codes: sum_g s * sum_{k in g} (q - z) x, then bias,
// relu; the NMSE over W's rows `rows` (all when empty), at most `bound`
// (0: 1e-6, bf16 C 2e-5, its own rounding; negative: not checked). Returns
// that NMSE.
double check(const Case& c, const std::vector<int64_t>& rows = {}, double bound = 0) {
  SCOPED_TRACE(c.describe());
  EXPECT_EQ(c.c_out.size(), c.c_init.size());
  if (c.c_out.size() != c.c_init.size()) return INFINITY;
  std::vector<double> xs(static_cast<size_t>(c.n * c.k));
  for (int64_t j = 0; j < c.n; ++j)
    for (int64_t i = 0; i < c.k; ++i) xs[j * c.k + i] = qgtest::decode_float(c.x_at(j, i), c.x_dtype);
  const int64_t es = qg::dtype_size(c.c_dtype), ss = qg::dtype_size(c.scale_dtype);
  double num = 0, den = 0;
  int bad = 0;
  std::vector<double> acc(static_cast<size_t>(c.n)), part(static_cast<size_t>(c.n));
  std::vector<int64_t> all;
  if (rows.empty())
    for (int64_t r = 0; r < c.m; ++r) all.push_back(r);
  for (int64_t r : rows.empty() ? all : rows) {
    std::fill(acc.begin(), acc.end(), 0.0);
    for (int64_t g = 0; g < c.k / c.group; ++g) {
      std::fill(part.begin(), part.end(), 0.0);
      const int64_t z = c.zero(r, g);
      for (int64_t i = g * c.group; i < (g + 1) * c.group; ++i) {
        const uint8_t b = c.w[r * c.w_stride + i / 2];
        const int q = (((i & 1) ? b >> 4 : b & 15) ^ 8) - 8;
        const double v = static_cast<double>(q - z);
        for (int64_t j = 0; j < c.n; ++j) part[j] += v * xs[j * c.k + i];
      }
      const double s = qgtest::decode_float(&c.scales[(r * c.s_stride + g) * ss], c.scale_dtype);
      for (int64_t j = 0; j < c.n; ++j) acc[j] += s * part[j];
    }
    for (int64_t j = 0; j < c.n; ++j) {
      double ref = acc[j];
      if (!c.col_scale.empty()) ref *= c.col_scale[j];
      if (!c.bias.empty()) ref += qgtest::decode_float(&c.bias[4 * r], DType::f32);
      if (c.relu && ref < 0) ref = 0;
      const double got = qgtest::decode_float(&c.c_out[(r * c.ldc + j * c.ldc_n) * es], c.c_dtype);
      if (!std::isfinite(got)) {
        if (++bad <= 5) ADD_FAILURE() << "C[" << r << ", " << j << "] = " << got << " (unwritten?), reference " << ref;
        continue;
      }
      num += (got - ref) * (got - ref);
      den += ref * ref;
    }
  }
  EXPECT_EQ(bad, 0);
  if (bound == 0) bound = c.c_dtype == DType::bf16 ? 2e-5 : 1e-6;
  const double nmse = den > 0 ? num / den : 0.0;
  if (bound > 0) {
    EXPECT_LE(nmse, bound) << "NMSE vs float64";
  }
  return nmse;
}

class CudaWoGemv : public qgtest::CudaFixture<::testing::TestWithParam<KernelScope>> {
 protected:
  void SetUp() override {
    CudaFixture::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    std::string why;
    const std::string name = GetParam().name;
    for (const auto& e : qg::detail::cuda::registry().gemm)
      if (name == e.name) (e.b_format == Format::f16 ? f16_ : bf16_) = &e;
    ASSERT_NE(f16_, nullptr) << "the CUDA registry has no i4 x f16 " << name;
    ASSERT_NE(bf16_, nullptr) << "the CUDA registry has no i4 x bf16 " << name;
    if (!qgtest::gemm_kernel_runs_on(*f16_, qg::Device::cuda(0), &why))
      GTEST_SKIP() << name << " does not run on cuda:0: " << why;
  }

  bool takes(const Case& c) const {
    const KernelScope& k = GetParam();
    return c.n >= k.min_n && c.n <= k.max_n && c.group >= k.min_group && c.k % k.k_multiple == 0 &&
           (!c.zero_points || c.zp_dtype == DType::i8 || k.int32_zero_points);
  }

  // Runs c if the kernel takes it and checks it; a refusal of a case it
  // takes fails, and so does running one it should refuse.
  void run_checked(Case& c) {
    std::string why;
    const bool ran = run(c, &why);
    ASSERT_EQ(ran, takes(c)) << c.describe() << (ran ? ": ran, should have been refused" : ": refused: " + why);
    if (ran) {
      ++ran_;
      check(c);
    }
  }

  // Runs c on the kernel for its activation dtype; false when refused.
  bool run(Case& c, std::string* why, size_t w_offset = 0) {
    DevBytes w(c.w, w_offset, kSlack), s(c.scales, 0, kSlack), z(c.zps, 0, kSlack), x(c.x, 0, kSlack);
    DevBytes cb(c.c_init, 0, kSlack), bias(c.bias, 0, kSlack);
    const qg::GemmArgs g = gemm_args(c, w.ptr(), s.ptr(), z.ptr(), x.ptr(), cb.ptr(), bias.ptr());
    if (!qgtest::run_cuda_kernel(kernel_for(c), g, why)) return false;
    c.c_out = cb.read();
    return true;
  }

  // c's call on device buffers (z and bias read only where c has them).
  static qg::GemmArgs gemm_args(const Case& c, const void* w, const void* s, const void* z, const void* x, void* out,
                                const void* bias) {
    qg::GemmArgs g;
    g.a = {w, Format::i4, c.m, c.k, c.w_stride, {}, {}};
    g.a.scales = {s, c.scale_dtype, qg::Granularity::group, c.group, c.s_stride};
    if (c.zero_points) g.a.zero_points = {z, c.zp_dtype, qg::Granularity::group, c.group, c.z_stride};
    g.b = {x, c.x_dtype == DType::f16 ? Format::f16 : Format::bf16, c.n, c.k, c.x_stride, {}, {}};
    g.c = out;
    g.c_dtype = c.c_dtype;
    g.ldc = c.ldc;
    g.ldc_n = c.ldc_n;
    g.epilogue.bias = c.bias.empty() ? nullptr : bias;
    g.epilogue.bias_dtype = DType::f32;
    g.epilogue.activation = c.relu ? qg::Activation::relu : qg::Activation::none;
    g.device = qg::Device::cuda(0);
    return g;
  }
  const qg::detail::GemmKernel& kernel_for(const Case& c) const { return c.x_dtype == DType::f16 ? *f16_ : *bf16_; }

  const qg::detail::GemmKernel* f16_ = nullptr;
  const qg::detail::GemmKernel* bf16_ = nullptr;
  int ran_ = 0;
};

// Activations holding +-Inf and NaN: where the float64 reference is not
// finite the output must be the same non-finite value (NaN for NaN; NaN or
// that +-Inf where the kernel applies zero points through sum x), and every
// other output element is checked as usual. cuda_wo_gemv_fixed sums such
// blocks in fp32 from x as given (no fixed-point form exists); the other
// kernels multiply floats throughout.
TEST_P(CudaWoGemv, NonFiniteActivations) {
  QG_SEEDED_RNG(rng, 46);
  const KernelScope& k = GetParam();
  int idx = 0;
  for (int64_t n : {1, 2, 4, 24, 40})
    for (DType xd : {DType::f16, DType::bf16})
      for (bool with_nan : {false, true}) {
        if (n < k.min_n || n > k.max_n) continue;
        ++idx;
        // At N = 1 with NaN also K = 4224: cuda_wo_gemv_fixed converts x in
        // its CTAs at K = 1024 and by a pass past two stages; both mark the
        // blocks (the NaN sits in a block's last quarter, the -Inf in its first).
        for (int64_t kk : n == 1 && with_nan ? std::vector<int64_t>{1024, 4224} : std::vector<int64_t>{1024}) {
          Case c = make_case(rng, 67, n, kk, 128, xd, DType::f16, idx % 2 == 0);
          // Column 0: +Inf in block 3 (so most outputs are +-Inf); with_nan:
          // column n - 1 also NaN in block 20 and -Inf in block 21.
          auto put = [&](int64_t col, int64_t i, float v) {
            qgtest::encode_float(&c.x[col * c.x_stride + 2 * i], xd, v);
          };
          put(0, 3 * 32 + 5, INFINITY);
          if (with_nan) {
            put(n - 1, 20 * 32 + 31, NAN);
            put(n - 1, 21 * 32, -INFINITY);
          }
          std::string why;
          ASSERT_TRUE(run(c, &why)) << c.describe() << ": " << why;
          ++ran_;
          SCOPED_TRACE(c.describe());
          const int64_t ss = qg::dtype_size(c.scale_dtype);
          int nonfinite = 0;
          for (int64_t r = 0; r < c.m; ++r)
            for (int64_t j = 0; j < c.n; ++j) {
              double ref = 0;
              for (int64_t g = 0; g < c.k / c.group; ++g) {
                double part = 0;
                const int64_t z = c.zero(r, g);
                for (int64_t i = g * c.group; i < (g + 1) * c.group; ++i) {
                  const uint8_t b = c.w[r * c.w_stride + i / 2];
                  const int q = (((i & 1) ? b >> 4 : b & 15) ^ 8) - 8;
                  part += static_cast<double>(q - z) * qgtest::decode_float(&c.x[j * c.x_stride + 2 * i], xd);
                }
                ref += qgtest::decode_float(&c.scales[(r * c.s_stride + g) * ss], c.scale_dtype) * part;
              }
              const double got = qgtest::decode_float(&c.c_out[(r * c.ldc + j * c.ldc_n) * 4], DType::f32);
              if (std::isfinite(ref)) {
                EXPECT_NEAR(got, ref, 1e-3 * (1 + std::fabs(ref))) << "C[" << r << ", " << j << "]";
              } else {
                ++nonfinite;
                if (std::isnan(ref))
                  EXPECT_TRUE(std::isnan(got)) << "C[" << r << ", " << j << "] = " << got << ", reference NaN";
                else if (k.zero_points_through_sum_x && c.zero_points)
                  EXPECT_TRUE(std::isnan(got) || got == ref)
                      << "C[" << r << ", " << j << "] = " << got << ", reference " << ref;
                else
                  EXPECT_EQ(got, ref) << "C[" << r << ", " << j << "]";
              }
              if (HasFailure()) return;
            }
          EXPECT_GT(nonfinite, 0);
        }
      }
  EXPECT_GT(ran_, 0);  // every kernel takes one of these N
}

// Activations spanning 2^-12..2^3 inside each block of 32, and one block
// 1000x larger than the rest: every output within the block fixed-point
// bound of docs/numerics.md, sum_k |s (q - z)| 2^-14 max|x of k's block|,
// plus fp32 rounding (2^-20 of sum_k |s (q - z) x|). The float kernels are
// well inside it; cuda_wo_gemv_fixed's x_int carries 14 bits of each
// block's largest |x|.
TEST_P(CudaWoGemv, WideRangeActivations) {
  QG_SEEDED_RNG(rng, 47);
  const KernelScope& k = GetParam();
  for (int64_t n : {1, 2, 3, 20, 40}) {
    if (n < k.min_n || n > k.max_n) continue;
    for (DType xd : {DType::f16, DType::bf16}) {
      const int64_t kk = 2048;
      Case c = make_case(rng, 45, n, kk, 128, xd, DType::f32, n == 2 || xd == DType::bf16);
      for (int64_t j = 0; j < n; ++j)
        for (int64_t i = 0; i < kk; ++i) {
          float v = std::ldexp(qgtest::uniform(rng, 1.0f, 2.0f), static_cast<int>(rng() % 16) - 12);
          if (rng() & 1) v = -v;
          if (i / 32 == 17) v *= 1000.0f;
          qgtest::encode_float(&c.x[j * c.x_stride + 2 * i], xd, v);
        }
      std::string why;
      ASSERT_TRUE(run(c, &why)) << c.describe() << ": " << why;
      ++ran_;
      SCOPED_TRACE(c.describe());
      const int64_t ss = qg::dtype_size(c.scale_dtype);
      for (int64_t r = 0; r < c.m; ++r)
        for (int64_t j = 0; j < n; ++j) {
          double ref = 0, bound = 0, mag = 0;
          for (int64_t b = 0; b < kk / 32; ++b) {
            double bmax = 0;
            for (int64_t i = 32 * b; i < 32 * b + 32; ++i)
              bmax = std::max(bmax, std::fabs(qgtest::decode_float(&c.x[j * c.x_stride + 2 * i], xd)));
            for (int64_t i = 32 * b; i < 32 * b + 32; ++i) {
              const int64_t g = i / c.group;
              const uint8_t byte = c.w[r * c.w_stride + i / 2];
              const int q = (((i & 1) ? byte >> 4 : byte & 15) ^ 8) - 8;
              const double sw = qgtest::decode_float(&c.scales[(r * c.s_stride + g) * ss], c.scale_dtype) *
                                static_cast<double>(q - c.zero(r, g));
              const double xv = qgtest::decode_float(&c.x[j * c.x_stride + 2 * i], xd);
              ref += sw * xv;
              bound += std::fabs(sw) * std::ldexp(bmax, -14);
              mag += std::fabs(sw * xv);
            }
          }
          const double got = qgtest::decode_float(&c.c_out[(r * c.ldc + j * c.ldc_n) * 4], DType::f32);
          ASSERT_LE(std::fabs(got - ref), bound + std::ldexp(mag, -20)) << "C[" << r << ", " << j << "]";
        }
    }
  }
  EXPECT_GT(ran_, 0);  // every kernel takes one of these N
}

// Each activation as the kernel carries it, output by output: W row r holds
// code 1 at K position r % K and 0 elsewhere, scales 1, so C[r] is x[r % K]
// with no sum to hide a rounding. The float kernels return x exactly; the
// fixed-point one returns x_int 2^(ex - 14), ex the exponent of the block's
// largest |x| (frexp) and x_int rounded half to even (docs/numerics.md).
// Blocks rotate through: ties (odd multiples of half a unit), zeros, a wide
// range, values near the format's largest, and tiny ones (bf16 near and
// below its smallest normal, where 2^(14 - ex) is past fp32's range; f16
// subnormals; bf16 blocks whose largest is just above and just below
// 2^-114, either side of the last 2^(14 - ex) that fp32 holds).
// cuda_wo_gemv_fixed converts x inside each CTA at K = 4096 (two stages of
// 64 blocks) and by a pass at K = 4160 (three, the last one short). M = 2K
// (row r carries x[r % K]): at K = 4096 more CTAs than two an SM hold, so
// the instance of three CTAs an SM runs (on a GPU of 132 SMs).
TEST_P(CudaWoGemv, CarriesEachActivationByTheRule) {
  if (GetParam().min_n > 1) GTEST_SKIP() << GetParam().name << " does not take N = 1";
  const bool fixed = std::string(GetParam().name) == "cuda_wo_gemv_fixed";
  for (int64_t kk : {4096, 4160}) {
    for (DType xd : {DType::f16, DType::bf16}) {
      QG_SEEDED_RNG(rng, (xd == DType::f16 ? 49 : 50) + 2 * (kk % 4096));
      const int64_t mm = 2 * kk;
      Case c = make_case(rng, mm, 1, kk, 32, xd, DType::f32, false);
      std::fill(c.w.begin(), c.w.end(), uint8_t{0});
      for (int64_t r = 0; r < mm; ++r)
        c.w[r * c.w_stride + (r % kk) / 2] = static_cast<uint8_t>(r % 2 ? 0x10 : 0x01);
      for (int64_t i = 0; i < mm * c.s_stride; ++i) qgtest::encode_float(&c.scales[4 * i], DType::f32, 1.0f);
      const bool bf16 = xd == DType::bf16;
      for (int64_t i = 0; i < kk; ++i) {
        const int64_t b = i / 32, at = i % 32;
        const float sign = rng() % 2 ? 1.0f : -1.0f;
        float v = 0.0f;
        switch (b % 5) {
          case 0:  // largest 12 (a unit is 2^-10), odd multiples of 2^-11 below 2^-3 (bf16) or 1 (f16)
            v = at == 0 ? 12.0f : std::ldexp(static_cast<float>(2 * (rng() % (bf16 ? 127 : 1000)) + 1), -11);
            break;
          case 1:  // a block of zeros
            break;
          case 2:
            v = std::ldexp(qgtest::uniform(rng, 1.0f, 2.0f), static_cast<int>(rng() % 24) - 20);
            break;
          case 3:  // near the largest value
            v = bf16 ? std::ldexp(qgtest::uniform(rng, 1.0f, 2.0f), 120 - static_cast<int>(rng() % 20))
                     : qgtest::uniform(rng, 100.0f, 65504.0f);
            break;
          default:  // tiny: bf16 2^-136..2^-120 (or just above / below 2^-114), f16 subnormals and small normals
            if (bf16 && (b / 5) % 3 < 2)
              v = std::ldexp(at == 0 ? 1.5f : qgtest::uniform(rng, 1.0f, 2.0f), (b / 5) % 3 == 0 ? -114 : -115);
            else
              v = std::ldexp(qgtest::uniform(rng, 1.0f, 2.0f), (bf16 ? -136 : -25) + static_cast<int>(rng() % 16));
            break;
        }
        qgtest::encode_float(&c.x[2 * i], xd, sign * v);
      }
      std::string why;
      ASSERT_TRUE(run(c, &why)) << c.describe() << ": " << why;
      SCOPED_TRACE(c.describe());
      for (int64_t b = 0; b < kk / 32; ++b) {
        double amax = 0;
        for (int64_t i = 32 * b; i < 32 * b + 32; ++i)
          amax = std::max(amax, std::fabs(qgtest::decode_float(&c.x[2 * i], xd)));
        int ex = 0;
        std::frexp(amax, &ex);
        for (int64_t i = 32 * b; i < 32 * b + 32; ++i) {
          const double x = qgtest::decode_float(&c.x[2 * i], xd);
          const double want = fixed ? std::ldexp(std::nearbyint(std::ldexp(x, 14 - ex)), ex - 14) : x;
          for (int64_t r : {i, i + kk}) {
            const double got = qgtest::decode_float(&c.c_out[4 * r], DType::f32);
            ASSERT_EQ(got, want) << "C[" << r << "], x = " << x << ", block " << b << " of largest " << amax;
          }
        }
      }
    }
  }
}

// The integer sums at their largest: every code -8 or 7 against blocks whose
// x are all the format's largest significand (x_int = 2^14 - 8 for f16,
// 2^14 - 64 for bf16) with the signs of the codes, so that a block's
// sum q x_int reaches 2^22 in magnitude (cuda_wo_gemv_fixed forms 16 times
// it, near 2^26, before an exact shift). Every 16th block carries x, the
// rest are zeros, so any partial sum of a row is exact in fp32 however it
// is added: the fixed-point kernel must return each row's sum exactly; the
// others are held to the usual NMSE.
// K = 4096 (x converted in the CTAs) and 4224 (by the pass).
TEST_P(CudaWoGemv, LargestIntegerSumsAreExact) {
  if (GetParam().min_n > 1) GTEST_SKIP() << GetParam().name << " does not take N = 1";
  const bool fixed = std::string(GetParam().name) == "cuda_wo_gemv_fixed";
  // Group 32 and 128 (a kernel may add a group's blocks before scaling
  // them; with one block in 16 nonzero, any order is exact here).
  for (int64_t kk : {4096, 4224}) {
    for (DType xd : {DType::f16, DType::bf16}) {
      const int64_t group = xd == DType::f16 ? 32 : 128;
      QG_SEEDED_RNG(rng, (xd == DType::f16 ? 51 : 52) + 2 * (kk % 4096));
      const int64_t mm = 64;
      Case c = make_case(rng, mm, 1, kk, group, xd, DType::f32, false);
      for (int64_t i = 0; i < mm * c.s_stride; ++i) qgtest::encode_float(&c.scales[4 * i], DType::f32, 1.0f);
      // Row r: all -8 (r % 4 = 0), all 7 (1), -8 and 7 alternating by code (2) or by block (3).
      auto code = [](int64_t r, int64_t i) {
        switch (r % 4) {
          case 0: return -8;
          case 1: return 7;
          case 2: return i % 2 ? 7 : -8;
          default: return (i / 32) % 2 ? 7 : -8;
        }
      };
      for (int64_t r = 0; r < mm; ++r)
        for (int64_t i = 0; i < kk; i += 2)
          c.w[r * c.w_stride + i / 2] =
              static_cast<uint8_t>((code(r, i) & 0xF) | ((code(r, i + 1) & 0xF) << 4));
      // x: in every 16th block the largest significand below 2, signed all
      // +, all - or as row 2's codes (so that its block sums are largest
      // too); zeros elsewhere, which keeps every partial sum of a row
      // within fp32's 24 bits.
      const float big = xd == DType::f16 ? 2.0f - std::ldexp(1.0f, -10) : 2.0f - std::ldexp(1.0f, -7);
      for (int64_t i = 0; i < kk; ++i) {
        const int64_t b = i / 32, pick = b / 16;
        const float sign = pick % 3 == 0 ? 1.0f : (pick % 3 == 1 ? -1.0f : (i % 2 ? 1.0f : -1.0f));
        qgtest::encode_float(&c.x[2 * i], xd, b % 16 == 0 ? sign * big : 0.0f);
      }
      if (!fixed) {
        run_checked(c);
        if (HasFailure()) return;
        continue;
      }
      std::string why;
      ASSERT_TRUE(run(c, &why)) << c.describe() << ": " << why;
      SCOPED_TRACE(c.describe());
      for (int64_t r = 0; r < mm; ++r) {
        double want = 0;
        for (int64_t i = 0; i < kk; ++i) want += code(r, i) * qgtest::decode_float(&c.x[2 * i], xd);
        ASSERT_EQ(qgtest::decode_float(&c.c_out[4 * r], DType::f32), want) << "row " << r;
      }
    }
  }
}

// K long enough that activations held in shared memory leave room for
// fewer ring stages (cuda_wo_gemv_fixed: three slots a warp at K = 24576,
// two at K = 32768), N = 1 and 2 (and 17 and 40 for the prefill kernels),
// with and without zero points.
TEST_P(CudaWoGemv, LongK) {
  QG_SEEDED_RNG(rng, 48);
  int idx = 0;
  for (int64_t k : {24576, 32768})
    for (int64_t n : {1, 2, 17, 40}) {
      ++idx;
      Case c = make_case(rng, 301, n, k, 128, idx % 2 ? DType::bf16 : DType::f16, DType::bf16, idx % 2 == 0);
      run_checked(c);
      if (HasFailure()) return;
    }
  EXPECT_GT(ran_, 0);
}

// Every scale dtype, group 32, 64 and 128 and each kind of zero point, at
// the kernel's smallest N and (where it takes more) at N = 12, two n8 tiles:
// K whose last ring stage is partial, with x converted inside each CTA
// (K = 2176) and by the pass (K = 6272) at N = 1, rounded up to the
// kernel's K multiple elsewhere; odd M (a row pair past M), strides padded
// in every other case: the scale and zero-point loads of every width, and
// groups shorter and longer than a lane's share of a ring stage.
TEST_P(CudaWoGemv, EveryScaleTypeGroupAndZeroPoint) {
  QG_SEEDED_RNG(rng, 49);
  const int64_t n_lo = GetParam().min_n, n12 = std::clamp<int64_t>(12, GetParam().min_n, GetParam().max_n);
  const int64_t km = GetParam().k_multiple;
  int idx = 0;
  for (int64_t n : {n_lo, n12}) {
    if (idx > 0 && n12 == n_lo) break;  // a kernel that takes one N runs it once
    for (int64_t k : {2176, 6272})
      for (DType sd : {DType::f32, DType::f16, DType::bf16})
        for (int64_t group : {32, 64, 128})
          for (int zsel = 0; zsel < 3; ++zsel) {  // none, int8, int32
            ++idx;
            Case c = make_case(rng, 37, n, (k + km - 1) / km * km, group, idx % 2 ? DType::f16 : DType::bf16, sd,
                               zsel != 0, zsel == 2 ? DType::i32 : DType::i8, idx % 2 == 0);
            run_checked(c);
            if (HasFailure()) return;
          }
  }
  EXPECT_GT(ran_, 0);
}

// Every N up to 17 and 40 (the prefill kernels), M in {1, 31, 4096}, K with each group that divides it;
// scale, zero point and activation dtypes rotate. Each kernel runs what it
// takes and refuses the rest.
TEST_P(CudaWoGemv, EveryNShapeGroupAndDtype) {
  QG_SEEDED_RNG(rng, 40);
  struct KG {
    int64_t k, group;
  };
  const KG kgs[] = {{32, 32}, {128, 32}, {128, 64}, {128, 128}, {4096 + 32, 32}, {4096 + 128, 128}, {2048 + 256, 256}};
  int idx = 0;
  for (int64_t n : {1, 2, 3, 8, 9, 16, 17, 40})
    for (int64_t m : {1, 31, 4096})
      for (const KG& kg : kgs) {
        ++idx;
        if (m == 4096 && n > 2 && idx % 3 != 0) continue;  // keeps the float64 reference quick
        const DType xd = idx % 2 ? DType::f16 : DType::bf16;
        const DType sd = idx % 3 == 0 ? DType::f32 : (idx % 3 == 1 ? DType::f16 : DType::bf16);
        const int zsel = (idx / 2) % 3;  // none, int8, int32
        Case c = make_case(rng, m, n, kg.k, kg.group, xd, sd, zsel != 0, zsel == 2 ? DType::i32 : DType::i8,
                           idx % 4 == 3);
        run_checked(c);
        if (HasFailure()) return;
      }
  EXPECT_GT(ran_, 0);
}

// The decode shape: M = 4096, K = 14336, each group size, N = 1, 2, 8, 16.
TEST_P(CudaWoGemv, DecodeShape) {
  if (GetParam().min_n > 16) GTEST_SKIP() << GetParam().name << " is a prefill kernel (PrefillShapes)";
  QG_SEEDED_RNG(rng, 41);
  int idx = 0;
  for (int64_t group : {32, 64, 128, 256})
    for (int64_t n : {1, 2, 8, 16}) {
      ++idx;
      const DType xd = idx % 2 ? DType::bf16 : DType::f16;
      Case c = make_case(rng, 4096, n, 14336, group, xd, idx % 3 ? DType::bf16 : DType::f32, idx % 3 == 0,
                         idx % 5 == 0 ? DType::i32 : DType::i8);
      run_checked(c);
      if (HasFailure()) return;
    }
  EXPECT_GT(ran_, 0);
}

// More row groups than a grid holds (M = 9607: 301 groups of 32 rows, 601 of
// 16, over twice the CTAs a 132-SM GPU runs of either): each CTA streams
// several groups as one pipeline, and the bulk kernel's activation queue
// runs on across group boundaries. K of one partial stage
// (every stage ends a group), of two whole stages and of two stages and a
// partial one. N = 1 with and without zero points: cuda_wo_gemv_fixed runs
// this M on three CTAs an SM without them up to K = 4096 (two stages of
// activations beside a ring of four), else on two.
TEST_P(CudaWoGemv, SeveralRowGroupsPerCta) {
  QG_SEEDED_RNG(rng, 45);
  int idx = 0;
  for (int64_t k : {384, 4096, 4096 + 128})
    for (int64_t n : {1, 2, 8, 9, 24, 40}) {
      ++idx;
      for (bool zp : n == 1 ? std::vector<bool>{false, true} : std::vector<bool>{idx % 3 == 0}) {
        Case c = make_case(rng, 9607, n, k, 128, idx % 2 ? DType::bf16 : DType::f16, DType::f16, zp);
        run_checked(c);
        if (HasFailure()) return;
      }
    }
  EXPECT_GT(ran_, 0);
}

// Row-group counts on either side of each CTA form's edge, from this GPU's
// SM count S: M = 16 S and 16 S + 1 (cuda_wo_gemv_mma's 16-row groups, then
// 32-row ones in one wave), 32 S + 1, 64 S + 1 and 96 S + 1 (past one wave:
// two, three and four CTAs an SM) and 128 S + 33 (four an SM, in waves);
// K of one stage a warp and of a stage for only some of a CTA's warps.
// N = 3 and 12 (one n8 tile of tokens and two, whose forms change at other
// edges), each clamped to the kernel's N.
TEST_P(CudaWoGemv, RowGroupsAroundEachWave) {
  QG_SEEDED_RNG(rng, 53);
  int sms = 0;
  ASSERT_EQ(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0), cudaSuccess);
  const int64_t n3 = std::clamp<int64_t>(3, GetParam().min_n, GetParam().max_n);
  const int64_t n12 = std::clamp<int64_t>(12, GetParam().min_n, GetParam().max_n);
  int idx = 0;
  for (int64_t n : {n3, n12}) {
    if (idx > 0 && n12 == n3) break;  // a kernel that takes one N runs it once
    for (int64_t m : {16 * sms, 16 * sms + 1, 32 * sms + 1, 64 * sms + 1, 96 * sms + 1, 128 * sms + 33}) {
      ++idx;
      const int64_t k = idx % 2 ? 512 : 2048;
      Case c = make_case(rng, m, n, k, 128, idx % 2 ? DType::bf16 : DType::f16, DType::bf16, idx % 3 == 0);
      run_checked(c);
      if (HasFailure()) return;
    }
  }
  EXPECT_GT(ran_, 0);
}

// Two calls back to back on one stream, as a model's layers run: the
// second reads the first's output as its activations and writes its own
// output over the first's activations. A kernel launched early behind the
// one before it (grid_dependency.cuh) must wait for that one's writes
// before it reads them, and for its reads before it writes. M = K = 512
// and 4608: cuda_wo_gemv_fixed converts x in each CTA at the first and
// runs its pass (launched early too, into a workspace the previous call's
// GEMV read) at the second.
TEST_P(CudaWoGemv, ChainedCallsOnOneStream) {
  QG_SEEDED_RNG(rng, 54);
  const int64_t n = std::clamp<int64_t>(4, GetParam().min_n, GetParam().max_n);
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  std::string refused;
  for (int64_t mk : {512, 4608}) {
    SCOPED_TRACE("M = K = " + std::to_string(mk));
    Case c1 = make_case(rng, mk, n, mk, 128, DType::bf16, DType::bf16, false);
    Case c2 = make_case(rng, mk, n, mk, 128, DType::bf16, DType::bf16, false);
    c1.set_c(DType::bf16, true);  // [N, M] bf16: the second call's x
    c2.set_c(DType::bf16, true);  // written over the first call's x
    if (!takes(c1)) {
      refused += " " + c1.describe();
      continue;
    }
    DevBytes w1(c1.w, 0, kSlack), s1(c1.scales, 0, kSlack), w2(c2.w, 0, kSlack), s2(c2.scales, 0, kSlack);
    DevBytes x(c1.x, 0, kSlack), y(c1.c_init, 0, kSlack);
    ASSERT_EQ(c1.x.size(), c1.c_init.size());
    const qg::GemmArgs g1 = gemm_args(c1, w1.ptr(), s1.ptr(), nullptr, x.ptr(), y.ptr(), nullptr);
    const qg::GemmArgs g2 = gemm_args(c2, w2.ptr(), s2.ptr(), nullptr, y.ptr(), x.ptr(), nullptr);
    for (const qg::GemmArgs* g : {&g1, &g2}) {
      const qg::Status v = qg::detail::check_gemm_args(*g);
      ASSERT_TRUE(v.ok()) << "the test built arguments qg rejects: " << v.message();
    }
    std::string why;
    ASSERT_TRUE(qgtest::gemm_kernel_admits(*bf16_, g1, &why)) << why;
    // Each round starts from the first call's x and a poisoned y, so the
    // second call can only read what the first wrote. The poison is finite
    // (0x4747, about 5.1e4 as a bf16): a NaN read too early would be marked
    // non-finite by cuda_wo_gemv_fixed's conversion and its block summed
    // again from x after the wait, hiding the early read.
    for (int rep = 0; rep < 3 && !HasFailure(); ++rep) {
      SCOPED_TRACE("round " + std::to_string(rep));
      CUDA_OK(cudaMemcpyAsync(x.ptr(), c1.x.data(), c1.x.size(), cudaMemcpyHostToDevice, stream));
      CUDA_OK(cudaMemsetAsync(y.ptr(), 0x47, c1.c_init.size(), stream));
      const qg::Status a = bf16_->run(g1, stream);
      const qg::Status b = bf16_->run(g2, stream);
      EXPECT_TRUE(a.ok() && b.ok()) << a.message() << " / " << b.message();
      EXPECT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
      c1.c_out = y.read();
      check(c1);
      c2.x = c1.c_out;  // the first call's bf16 output, as the second read it
      c2.c_out = x.read();
      check(c2);
      ++ran_;
    }
    if (HasFailure()) break;
  }
  EXPECT_EQ(cudaStreamDestroy(stream), cudaSuccess);
  if (ran_ == 0) GTEST_SKIP() << GetParam().name << " takes none of:" << refused;
}

// W written by a kernel just before the call, one that lets the next
// kernel launch early: qg's quantizer (quantize_q8_0 of floats into W's
// bytes, which the GEMV then reads as codes). A kernel that requests W
// before its own wait (cuda_wo_gemv_fixed behind its pass, K = 4608 here)
// must still read only what the quantizer wrote: the kernel in front of it
// waits for the quantizer before it lets it launch.
TEST_P(CudaWoGemv, WeightsWrittenByAKernelJustBefore) {
  QG_SEEDED_RNG(rng, 55);
  const int64_t n = std::clamp<int64_t>(1, GetParam().min_n, GetParam().max_n);
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  std::string refused;
  for (int64_t k : {512, 4608}) {
    Case c = make_case(rng, 1024, n, k, 128, DType::bf16, DType::bf16, false);
    SCOPED_TRACE(c.describe());
    if (!takes(c)) {
      refused += " " + c.describe();
      continue;
    }
    DevBytes w(c.w, 0, kSlack), s(c.scales, 0, kSlack), x(c.x, 0, kSlack), y(c.c_init, 0, kSlack);
    const qg::GemmArgs g = gemm_args(c, w.ptr(), s.ptr(), nullptr, x.ptr(), y.ptr(), nullptr);
    const qg::Status v = qg::detail::check_gemm_args(g);
    ASSERT_TRUE(v.ok()) << "the test built arguments qg rejects: " << v.message();
    std::string why;
    ASSERT_TRUE(qgtest::gemm_kernel_admits(*bf16_, g, &why)) << why;
    // As many Q8_0 blocks (34 bytes) as fit in a row of W's bytes.
    const int64_t kq = c.w_stride / 34 * 32;
    std::vector<uint8_t> wf(static_cast<size_t>(c.m * kq * 4));
    for (int64_t i = 0; i < c.m * kq; ++i) qgtest::encode_float(&wf[4 * i], DType::f32, qgtest::uniform(rng, -2, 2));
    DevBytes w_float(wf, 0, kSlack);
    qg::QuantizeArgs q;
    q.format = Format::q8_0;
    q.x = w_float.ptr();
    q.x_dtype = DType::f32;
    q.rows = c.m;
    q.k = kq;
    q.x_row_stride = kq;
    q.y = w.ptr();
    q.y_row_stride = c.w_stride;
    q.device = qg::Device::cuda(0);
    for (int rep = 0; rep < 3 && !HasFailure(); ++rep) {
      SCOPED_TRACE("round " + std::to_string(rep));
      CUDA_OK(cudaMemcpyAsync(w.ptr(), c.w.data(), c.w.size(), cudaMemcpyHostToDevice, stream));  // the old codes
      CUDA_OK(cudaMemsetAsync(y.ptr(), 0xFF, c.c_init.size(), stream));
      const qg::Status a = qg::quantize(q, stream);
      const qg::Status b = bf16_->run(g, stream);
      EXPECT_TRUE(a.ok() && b.ok()) << a.message() << " / " << b.message();
      EXPECT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
      Case now = c;
      now.w = w.read();
      ASSERT_NE(now.w, c.w) << "the quantizer wrote no byte of W";
      now.c_out = y.read();
      check(now);
      ++ran_;
    }
    if (HasFailure()) break;
  }
  EXPECT_EQ(cudaStreamDestroy(stream), cudaSuccess);
  if (ran_ == 0) GTEST_SKIP() << GetParam().name << " takes none of:" << refused;
}

// Transposed C (ldc = 1, ldc_n = M) in f32 / f16 / bf16, bias and relu.
TEST_P(CudaWoGemv, TransposedCBiasRelu) {
  QG_SEEDED_RNG(rng, 42);
  int idx = 0;
  for (int64_t n : {1, 2, 1, 2, 5, 16, 40, 70})
    for (DType cd : {DType::f32, DType::f16, DType::bf16}) {
      ++idx;
      Case c = make_case(rng, 77, n, 512, idx % 2 ? 64 : 128, idx % 2 ? DType::f16 : DType::bf16, DType::f16,
                         idx % 3 == 0);
      c.set_c(cd, idx % 2 == 1);
      c.bias.resize(static_cast<size_t>(4 * c.m));
      for (int64_t r = 0; r < c.m; ++r) qgtest::encode_float(&c.bias[4 * r], DType::f32, qgtest::uniform(rng, -1, 1));
      c.relu = idx % 4 < 2;
      run_checked(c);
      if (HasFailure()) return;
    }
  EXPECT_GT(ran_, 0);
}

// Two runs of one case write the same bytes (fixed-order reductions).
TEST_P(CudaWoGemv, Deterministic) {
  QG_SEEDED_RNG(rng, 43);
  const int64_t n = std::min<int64_t>(std::max<int64_t>(2, GetParam().min_n), GetParam().max_n);
  Case c = make_case(rng, 1000, n, 8192, 128, DType::bf16, DType::bf16, true);
  std::string why;
  ASSERT_TRUE(run(c, &why)) << why;
  const std::vector<uint8_t> first = c.c_out;
  ASSERT_TRUE(run(c, &why)) << why;
  EXPECT_EQ(first, c.c_out);
}

TEST_P(CudaWoGemv, RefusesWhatItCannotRead) {
  QG_SEEDED_RNG(rng, 44);
  const KernelScope& k = GetParam();
  const int64_t n_in = std::min<int64_t>(std::max<int64_t>(2, k.min_n), k.max_n);  // an N it takes
  std::string why;
  if (k.max_n < kAnyN) {
    const int64_t n = k.max_n + 1;
    Case c = make_case(rng, 8, n, 256, 128, DType::f16, DType::f16, false);
    EXPECT_FALSE(run(c, &why));
    EXPECT_NE(why.find("N=" + std::to_string(n)), std::string::npos) << why;
  }
  if (k.min_n > 1) {
    Case c = make_case(rng, 8, k.min_n - 1, 256, 128, DType::f16, DType::f16, false);
    EXPECT_FALSE(run(c, &why));
    EXPECT_NE(why.find("N=" + std::to_string(k.min_n - 1)), std::string::npos) << why;
  }
  {
    Case c = make_case(rng, 8, n_in, 256, 128, DType::f16, DType::f16, false);
    EXPECT_FALSE(run(c, &why, 8));
    EXPECT_NE(why.find("16-byte"), std::string::npos) << why;
  }
  {
    // K % 32 != 0 (group 16) for the small and fixed kernels, K % 128 != 0
    // for the bulk one, K % 256 != 0 for cuda_wo_gemv_mma.
    Case c = k.k_multiple == 32 ? make_case(rng, 8, n_in, 48, 16, DType::f16, DType::f16, false)
                                : make_case(rng, 8, n_in, 256 + 32, 32, DType::f16, DType::f16, false);
    EXPECT_FALSE(run(c, &why));
    EXPECT_NE(why.find("multiple of " + std::to_string(k.k_multiple)), std::string::npos) << why;
  }
  {
    Case c = make_case(rng, 8, k.min_n, 256, k.min_group / 2, DType::bf16, DType::f32, false);
    EXPECT_FALSE(run(c, &why));
    EXPECT_NE(why.find("group"), std::string::npos) << why;
  }
}

// Prefill: N on either side of each token tile (32, 64, 128) and of two and
// three of them; M of one row, of a 128-row tile and one row past it; K of
// one stage, of nine and of 32, where the tiles are few enough that an
// sm_90 cluster splits K; groups of 32, 64, 128 and 256 (a rescale every
// one, two or four 32-value segments, and once a stage), every scale and
// zero-point dtype, plain and transposed C in every dtype, bias and relu.
TEST_P(CudaWoGemv, PrefillShapes) {
  if (GetParam().max_n < 17) GTEST_SKIP() << GetParam().name << " is a decode kernel (N <= " << GetParam().max_n << ")";
  QG_SEEDED_RNG(rng, 56);
  int idx = 0;
  for (int64_t n : {17, 31, 32, 33, 63, 64, 65, 100, 127, 128, 129, 255, 300})
    for (int64_t m : {1, 128, 129, 520}) {
      ++idx;
      const int64_t k = idx % 3 == 0 ? 128 : (idx % 3 == 1 ? 1024 + 128 : 4096);
      const int64_t group = idx % 4 == 3 && k % 256 == 0 ? 256 : int64_t{32} << ((idx / 3) % 3);
      const DType sd = idx % 3 == 0 ? DType::f32 : (idx % 3 == 1 ? DType::f16 : DType::bf16);
      const int zsel = (idx / 2) % 3;  // none, int8, int32
      Case c = make_case(rng, m, n, k, group, idx % 2 ? DType::f16 : DType::bf16, sd, zsel != 0,
                         zsel == 2 ? DType::i32 : DType::i8, idx % 4 == 1);
      // int32 zero points within +-100 here: at make_case's +-3000 the z sum x
      // term would dwarf the codes' (an output with W's term dropped would
      // still pass the bf16 C bound). Such cases keep bf16 C rather than fp16
      // (at +-3000 their sums passed fp16's range).
      if (zsel == 2)
        for (size_t i = 0; i + 4 <= c.zps.size(); i += 4) {
          const int32_t v = std::uniform_int_distribution<int32_t>(-100, 100)(rng);
          std::memcpy(&c.zps[i], &v, 4);
        }
      const DType cd = idx % 5 == 0 ? DType::bf16 : (idx % 5 == 1 ? DType::f16 : DType::f32);
      c.set_c(cd == DType::f16 && zsel == 2 ? DType::bf16 : cd, idx % 2 == 0);
      if (idx % 7 == 0) {
        c.bias.resize(static_cast<size_t>(4 * c.m));
        for (int64_t r = 0; r < c.m; ++r) qgtest::encode_float(&c.bias[4 * r], DType::f32, qgtest::uniform(rng, -1, 1));
        c.relu = idx % 2 == 0;
      }
      run_checked(c);
      if (HasFailure()) return;
    }
  EXPECT_GT(ran_, 0);
}

// An LLM layer's K (14336 = 112 stages) at M = 1024: eight row tiles, so an
// sm_90 cluster splits K eight ways (14 stages a CTA), at N = 64 and 128
// with groups of 128, and N = 100 and 80 with groups of 32 and 64.
TEST_P(CudaWoGemv, PrefillLongKSplit) {
  if (GetParam().max_n < 17) GTEST_SKIP() << GetParam().name << " is a decode kernel (N <= " << GetParam().max_n << ")";
  QG_SEEDED_RNG(rng, 57);
  struct NG {
    int64_t n, group;
  };
  int idx = 0;
  for (const NG& ng : {NG{64, 128}, NG{128, 128}, NG{100, 32}, NG{80, 64}}) {
    ++idx;
    Case c = make_case(rng, 1024, ng.n, 14336, ng.group, idx % 2 ? DType::bf16 : DType::f16, DType::bf16,
                       idx % 2 == 1);
    run_checked(c);
    if (HasFailure()) return;
  }
  EXPECT_GT(ran_, 0);
}

// int32 zero points: taken by the kernels that apply zero points through
// sums of x (or to each code), refused, saying so, by cuda_wo_wgmma.
TEST_P(CudaWoGemv, Int32ZeroPoints) {
  QG_SEEDED_RNG(rng, 59);
  const KernelScope& k = GetParam();
  const int64_t n = std::clamp<int64_t>(24, k.min_n, k.max_n);
  Case c = make_case(rng, 130, n, 1024, 128, DType::bf16, DType::f32, true, DType::i32);
  for (size_t i = 0; i + 4 <= c.zps.size(); i += 4) {
    const int32_t v = std::uniform_int_distribution<int32_t>(-100, 100)(rng);
    std::memcpy(&c.zps[i], &v, 4);
  }
  if (!k.int32_zero_points) {
    std::string why;
    EXPECT_FALSE(run(c, &why));
    EXPECT_NE(why.find("int32 zero points"), std::string::npos) << why;
    return;
  }
  run_checked(c);
}

// Groups of 256 and 512 at long K (a window of four stages in
// cuda_wo_wgmma, one rescale a stage in cuda_wo_mma) with and without zero
// points, N across the token tiles.
TEST_P(CudaWoGemv, PrefillLargeGroups) {
  if (GetParam().max_n < 17) GTEST_SKIP() << GetParam().name << " is a decode kernel (N <= " << GetParam().max_n << ")";
  QG_SEEDED_RNG(rng, 60);
  int idx = 0;
  for (int64_t group : {256, 512})
    for (int64_t n : {40, 130}) {
      ++idx;
      Case c = make_case(rng, 300, n, 6144, group, idx % 2 ? DType::bf16 : DType::f16, DType::bf16, idx % 3 != 0);
      run_checked(c);
      if (HasFailure()) return;
    }
  EXPECT_GT(ran_, 0);
}

std::string scope_name(const ::testing::TestParamInfo<KernelScope>& info) { return info.param.name; }

INSTANTIATE_TEST_SUITE_P(Kernels, CudaWoGemv, ::testing::Values(kSmall, kBulk, kFixed, kMmaRing, kTiled, kWgmmaTiled),
                         scope_name);

// ------------------------------------------------ fp32 activations
// cuda_wo_f32_split: each fp32 x as bf16 hi + lo, one GEMM of 2N tokens on
// the bf16 kernels, the pairs added through the epilogue. Through the public
// qg::gemm (so that the dispatcher's choice is checked too) and against
// float64 of the fp32 x as given: it keeps 16 significant bits of every x,
// so the NMSE bound is 1e-8, which x rounded to one bf16 (2^-9) misses.
class CudaWoF32 : public qgtest::CudaFixture<> {
 protected:
  static constexpr const char* kName = "cuda_wo_f32_split";
  static constexpr double kBound = 1e-8;

  // Runs c through qg::gemm (its kernel must be cuda_wo_f32_split) and reads C.
  void run(Case& c) {
    ASSERT_EQ(c.x_dtype, DType::f32);
    DevBytes w(c.w, 0, kSlack), s(c.scales, 0, kSlack), z(c.zps, 0, kSlack), x(c.x, 0, kSlack);
    DevBytes cb(c.c_init, 0, kSlack), bias(c.bias, 0, kSlack);
    std::vector<uint8_t> cs_bytes(c.col_scale.size() * 4);
    if (!c.col_scale.empty()) std::memcpy(cs_bytes.data(), c.col_scale.data(), cs_bytes.size());
    DevBytes cs(cs_bytes, 0, kSlack);
    qg::GemmArgs g;
    g.a = {w.ptr(), Format::i4, c.m, c.k, c.w_stride, {}, {}};
    g.a.scales = {s.ptr(), c.scale_dtype, qg::Granularity::group, c.group, c.s_stride};
    if (c.zero_points) g.a.zero_points = {z.ptr(), c.zp_dtype, qg::Granularity::group, c.group, c.z_stride};
    g.b = {x.ptr(), Format::f32, c.n, c.k, c.x_stride, {}, {}};
    g.c = cb.ptr();
    g.c_dtype = c.c_dtype;
    g.ldc = c.ldc;
    g.ldc_n = c.ldc_n;
    g.epilogue.col_scale = c.col_scale.empty() ? nullptr : reinterpret_cast<const float*>(cs.ptr());
    g.epilogue.bias = c.bias.empty() ? nullptr : bias.ptr();
    g.epilogue.bias_dtype = DType::f32;
    g.epilogue.activation = c.relu ? qg::Activation::relu : qg::Activation::none;
    g.device = qg::Device::cuda(0);
    g.fn = "qg.gemm";
    qg::Explanation e;
    ASSERT_TRUE(qg::explain(g, &e).ok());
    ASSERT_EQ(e.chosen, kName) << c.describe();
    QG_OK(qg::gemm(g, nullptr));
    CUDA_OK(cudaDeviceSynchronize());
    c.c_out = cb.read();
  }

  // Code `q` at position i of every W row (the scales' and zero points'
  // groups untouched).
  static void set_code(Case& c, int64_t i, int q) {
    for (int64_t r = 0; r < c.m; ++r) {
      uint8_t& b = c.w[r * c.w_stride + i / 2];
      const uint8_t nib = static_cast<uint8_t>(q & 15);
      b = (i & 1) ? static_cast<uint8_t>((b & 0x0F) | (nib << 4)) : static_cast<uint8_t>((b & 0xF0) | nib);
    }
  }
};

// Decode and prefill token counts, so that the 2N-token call lands on the
// GEMVs (`cuda_wo_gemv_small`, `_mma`, and `_bulk` where K % 256 = 128) and
// the tiled and warpgroup GEMMs; every scale dtype, int8 and int32 zero
// points, groups of 32 and 128, padded rows.
TEST_F(CudaWoF32, MatchesFloat64AcrossShapes) {
  QG_SEEDED_RNG(rng, 70);
  int idx = 0;
  for (int64_t n : {1, 2, 3, 8, 9, 17, 40, 129})
    for (int64_t group : {32, 128}) {
      ++idx;
      const DType sd = idx % 3 == 0 ? DType::f32 : idx % 3 == 1 ? DType::f16 : DType::bf16;
      const int64_t k = n == 3 && group == 128 ? 1152 : 1024;
      Case c = make_case(rng, 136, n, k, group, DType::f32, sd, idx % 2 == 0, idx % 4 == 0 ? DType::i32 : DType::i8,
                         idx % 5 == 0);
      run(c);
      if (HasFatalFailure()) return;
      check(c, {}, kBound);
      if (HasFailure()) return;
    }
}

// Every 32-value block of every token holds one x of 2^40 where every W row
// has code 0 (it adds nothing), beside x of 2^-20..2^0: each x keeps 16
// bits of its own, so the small ones survive and the outputs meet 1e-8. A
// block fixed point (bits shared with the block's largest x) would lose
// them all, and x rounded to one bf16 each would miss 1e-8 too (checked,
// so the test fails for the reason it is about).
TEST_F(CudaWoF32, KeepsSixteenBitsOfEachActivation) {
  QG_SEEDED_RNG(rng, 71);
  for (int64_t n : {1, 5, 40}) {
    Case c = make_case(rng, 96, n, 2048, 128, DType::f32, DType::f32, false);
    for (int64_t i = 0; i < c.k; ++i) {
      const bool huge = i % 32 == 5;
      if (huge) set_code(c, i, 0);
      for (int64_t j = 0; j < n; ++j) {
        const float mag = huge ? std::ldexp(1.0f, 40)
                               : std::ldexp(qgtest::uniform(rng, 1.0f, 2.0f), static_cast<int>(rng() % 21) - 20);
        qgtest::encode_float(c.x_at(j, i), DType::f32, (rng() & 1) ? mag : -mag);
      }
    }
    Case rounded = c;  // the same x, each rounded to bf16
    for (int64_t j = 0; j < n; ++j)
      for (int64_t i = 0; i < c.k; ++i) {
        const uint32_t u = qgtest::f2u(qgtest::decode_float(c.x_at(j, i), DType::f32));
        const float b = qgtest::u2f((u + 0x7FFFu + ((u >> 16) & 1u)) & 0xFFFF0000u);  // nearest even
        qgtest::encode_float(rounded.x_at(j, i), DType::f32, b);
      }
    run(c);
    if (HasFatalFailure()) return;
    check(c, {}, kBound);
    rounded.c_out = c.c_out;  // C of the real x, against float64 of the rounded x
    EXPECT_GT(check(rounded, {}, -1), kBound) << "one bf16 an x would pass too: the test does not tell";
  }
}

// x next to FLT_MAX (which bf16 rounding would turn into Inf; the split
// truncates hi), -3.3e38 and a subnormal, against scales of 2^-100 (each
// huge x meets code 1 in every row, so that no kernel's fp32 group sum
// overflows): every output within the documented bound, sum |s (q - z) x|
// 2^-15 (2^-14 here, fp32 rounding included). From N = 3 a token with one
// +Inf and nothing else non-finite: where its code is not 0 the reference
// is +-Inf and so must C be (had the Inf gone in as hi = Inf, lo = Inf -
// Inf, it would be NaN); and a token holding a NaN whose payload sits in the
// low 16 bits, and a -Inf: NaN everywhere.
TEST_F(CudaWoF32, NonFiniteHugeAndSubnormalActivations) {
  QG_SEEDED_RNG(rng, 72);
  for (int64_t n : {1, 3, 24}) {
    Case c = make_case(rng, 40, n, 512, 128, DType::f32, DType::f32, false);
    for (int64_t r = 0; r < c.m; ++r)
      for (int64_t g = 0; g < c.k / c.group; ++g)
        qgtest::encode_float(&c.scales[(r * c.s_stride + g) * 4], DType::f32, std::ldexp(1.0f, -100));
    set_code(c, 7, 1);
    set_code(c, 300, 1);
    qgtest::encode_float(c.x_at(0, 7), DType::f32, 3.4028234e38f);
    qgtest::encode_float(c.x_at(0, 300), DType::f32, -3.3e38f);
    qgtest::encode_float(c.x_at(0, 9), DType::f32, 1e-42f);
    const int64_t inf_token = n >= 3 ? 1 : -1, nan_token = n >= 3 ? n - 1 : -1;
    if (n >= 3) {
      qgtest::encode_float(c.x_at(inf_token, 40), DType::f32, INFINITY);
      const uint32_t low_payload_nan = 0x7F800001u;
      std::memcpy(c.x_at(nan_token, 200), &low_payload_nan, 4);
      qgtest::encode_float(c.x_at(nan_token, 400), DType::f32, -INFINITY);
    }
    run(c);
    if (HasFatalFailure()) return;
    SCOPED_TRACE(c.describe());
    int infinite = 0;
    for (int64_t r = 0; r < c.m; ++r)
      for (int64_t j = 0; j < n; ++j) {
        double ref = 0, mag = 0;
        for (int64_t i = 0; i < c.k; ++i) {
          const uint8_t b = c.w[r * c.w_stride + i / 2];
          const int q = (((i & 1) ? b >> 4 : b & 15) ^ 8) - 8;
          const double s = qgtest::decode_float(&c.scales[(r * c.s_stride + i / c.group) * 4], DType::f32);
          const double x = qgtest::decode_float(c.x_at(j, i), DType::f32);
          ref += s * q * x;  // 0 * Inf is NaN, as in the kernels
          if (std::isfinite(x)) mag += std::fabs(s * q * x);
        }
        const double got = qgtest::decode_float(&c.c_out[(r * c.ldc + j * c.ldc_n) * 4], DType::f32);
        if (j == nan_token) {
          EXPECT_TRUE(std::isnan(got)) << "C[" << r << ", " << j << "] = " << got << ": the token holds a NaN";
        } else if (!std::isfinite(ref)) {
          infinite += std::isinf(ref);
          if (std::isnan(ref)) {
            EXPECT_TRUE(std::isnan(got)) << "C[" << r << ", " << j << "] = " << got;
          } else {
            EXPECT_EQ(got, ref) << "C[" << r << ", " << j << "]";
          }
        } else {
          EXPECT_LE(std::fabs(got - ref), std::ldexp(mag, -14)) << "C[" << r << ", " << j << "], reference " << ref;
        }
        if (HasFailure()) return;
      }
    if (n >= 3) {
      EXPECT_GT(infinite, 0) << "no row met the +Inf with a nonzero code";
    }
  }
}

// The epilogue on each token's pair: column scales, bias and ReLU, C
// transposed, f16 and bf16 C.
TEST_F(CudaWoF32, EpilogueOnEachPair) {
  QG_SEEDED_RNG(rng, 73);
  int idx = 0;
  for (int64_t n : {1, 4, 33})
    for (DType cd : {DType::f32, DType::f16, DType::bf16}) {
      ++idx;
      Case c = make_case(rng, 72, n, 1024, 128, DType::f32, DType::bf16, idx % 2 == 0);
      c.bias.resize(static_cast<size_t>(4 * c.m));
      for (int64_t r = 0; r < c.m; ++r) qgtest::encode_float(&c.bias[4 * r], DType::f32, qgtest::uniform(rng, -1, 1));
      for (int64_t j = 0; j < n; ++j) c.col_scale.push_back(qgtest::uniform(rng, 0.25f, 4.0f));
      c.relu = idx % 2 == 1;
      c.set_c(cd, idx % 3 == 0);
      run(c);
      if (HasFatalFailure()) return;
      check(c, {}, cd == DType::f32 ? kBound : 0.0);
    }
}

// More tokens than one slice of scratch (64 MiB: at M = K = 8192 a token
// needs 96 KiB, so 1400 tokens go in three slices), with a column scale a
// token (offset with each slice): every output written, sampled rows
// against float64.
TEST_F(CudaWoF32, TokensInSlices) {
  QG_SEEDED_RNG(rng, 74);
  Case c = make_case(rng, 8192, 1400, 8192, 128, DType::f32, DType::f16, true);
  for (int64_t j = 0; j < c.n; ++j) c.col_scale.push_back(1.0f + static_cast<float>(j % 7));
  run(c);
  if (HasFatalFailure()) return;
  for (int64_t r = 0; r < c.m; ++r)
    for (int64_t j = 0; j < c.n; ++j)
      ASSERT_TRUE(std::isfinite(qgtest::decode_float(&c.c_out[(r * c.ldc + j * c.ldc_n) * 4], DType::f32)))
          << "C[" << r << ", " << j << "] unwritten";
  check(c, {0, 1, 2047, 4096, 6000, 8190, 8191}, kBound);
}

// K = 0 (a valid call: C is the epilogue of empty sums) gives the bulk
// GEMV no macro step to stream, and its two-tile form's activation queue
// would read before x: it refuses, and the dispatcher moves on. Its can_run
// tests K before asking anything of a device, so this needs no GPU.
TEST(CudaWoGemvScope, BulkRefusesKZero) {
  const qg::detail::GemmKernel* k = qgtest::find_gemm_kernel(qg::detail::cuda::registry(), "cuda_wo_gemv_bulk");
  ASSERT_NE(k, nullptr);
  alignas(16) static uint8_t stand_in[16];
  for (const int64_t n : {2, 8, 16}) {
    qg::GemmArgs g;
    g.a = {stand_in, qg::Format::i4, 64, 0, 16, {}, {}};
    g.a.scales = {stand_in, DType::f16, qg::Granularity::group, 128, 1};
    g.b = {stand_in, qg::Format::bf16, n, 0, 16, {}, {}};
    g.device = qg::Device::cuda(0);
    std::string why;
    EXPECT_FALSE(k->can_run(g, &why)) << "N = " << n;
    EXPECT_NE(why.find("K=0"), std::string::npos) << why;
  }
}

}  // namespace
