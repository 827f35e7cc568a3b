// SPDX-License-Identifier: MIT
// test_cuda_int_fast.cpp: the fast CUDA kernels of the integer family, each
// forced by name through the registry (after the dispatcher's admission:
// arch window, epilogue caps, can_run), against host references:
//   cuda_i8_mma, cuda_i8_wgmma, cuda_i8_dp4a  i8 x i8 (one suite over all
//                 three, each case run where the kernel's scope takes it and
//                 refused elsewhere):
//                 an int64 sum with zero points; int32 outputs bit-exact,
//                 float outputs (scales, bias, relu, beta, f16 / bf16,
//                 transposed C) NMSE <= 1e-6 against float64
//   cuda_wo_gemv  i4 (group scales, zero points) x f16 / bf16, N = 1..16:
//                 float64 reference, NMSE <= 1e-6
// Every output buffer starts NaN-poisoned (int32: a sentinel): an element
// left unwritten fails. Skips without a CUDA device or below the kernels' arch.
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
#include "test_util.h"

namespace {

using qg::DType;
using qg::Format;
using qgtest::as_bytes;
using qgtest::DevBytes;

constexpr uint32_t kI32Poison = 0xA5A5A5A5u;

// Every device buffer gets 16 bytes allocated past its end.
constexpr size_t kSlack = 16;

// Fills an output buffer of `elems` elements of `d` with poison.
std::vector<uint8_t> poisoned(DType d, int64_t elems) {
  const int64_t es = qg::dtype_size(d);
  std::vector<uint8_t> c(static_cast<size_t>(elems * es));
  for (int64_t i = 0; i < elems; ++i) {
    if (d == DType::i32) std::memcpy(&c[i * es], &kI32Poison, 4);
    else qgtest::poison_element(&c[i * es], d);
  }
  return c;
}

class CudaIntFast : public qgtest::CudaFixture<> {
 protected:
  // Skips unless a CUDA device is there and `name`'s arch window admits it.
  const qg::detail::GemmKernel* kernel(const std::string& name) {
    std::string why;
    if (!qg::cuda_available(&why)) return nullptr;
    const qg::detail::GemmKernel* k = qgtest::find_gemm_kernel(qg::detail::cuda::registry(), name);
    if (!k) {
      ADD_FAILURE() << "the CUDA registry has no kernel named " << name;
      return nullptr;
    }
    if (!qgtest::gemm_kernel_runs_on(*k, qg::Device::cuda(0), &why)) return nullptr;
    return k;
  }
};

#define QG_NEED_KERNEL(var, name)                                                       \
  const qg::detail::GemmKernel* var = kernel(name);                                     \
  if (HasFailure()) return;                                                             \
  if (!var) GTEST_SKIP() << name << " does not run on cuda:0 (arch window or no device)"

// ====================================================================== i8 x i8
struct I8Case {
  int64_t m = 0, n = 0, k = 0;
  int64_t a_stride = 0, b_stride = 0;
  size_t a_offset = 0, b_offset = 0;
  std::vector<int8_t> a, b;  // rows of a_stride / b_stride bytes (padding: sentinel)
  DType c_dtype = DType::i32;
  int64_t ldc = 0, ldc_n = 1;
  float alpha = 1.0f, beta = 0.0f;
  std::vector<float> row_scale, col_scale;  // empty: none; size 1: scalar
  std::vector<int32_t> row_zp, col_zp;      // empty: none; size 1: scalar
  std::vector<float> bias;
  bool relu = false;
  std::vector<uint8_t> c_init, c_out;

  std::string describe() const {
    std::string s = "M=" + std::to_string(m) + " N=" + std::to_string(n) + " K=" + std::to_string(k) + " C " +
                    qg::dtype_name(c_dtype) + " ldc=" + std::to_string(ldc) + " ldc_n=" + std::to_string(ldc_n);
    if (!row_zp.empty()) s += " row_zp[" + std::to_string(row_zp.size()) + "]";
    if (!col_zp.empty()) s += " col_zp[" + std::to_string(col_zp.size()) + "]";
    if (!row_scale.empty()) s += " row_scale[" + std::to_string(row_scale.size()) + "]";
    if (!col_scale.empty()) s += " col_scale[" + std::to_string(col_scale.size()) + "]";
    if (!bias.empty()) s += " bias";
    if (relu) s += " relu";
    if (alpha != 1.0f) s += " alpha";
    if (beta != 0.0f) s += " beta";
    return s;
  }
  int64_t extent() const { return (m - 1) * ldc + (n - 1) * ldc_n + 1; }
};

I8Case i8_case(std::mt19937_64& rng, int64_t m, int64_t n, int64_t k, DType c_dtype, bool transposed = false,
               int64_t pad = 0) {
  I8Case c;
  c.m = m, c.n = n, c.k = k;
  c.a_stride = k + pad;
  c.b_stride = k + pad;
  c.a.assign(static_cast<size_t>(m * c.a_stride), static_cast<int8_t>(qgtest::kSentinelByte));
  c.b.assign(static_cast<size_t>(n * c.b_stride), static_cast<int8_t>(qgtest::kSentinelByte));
  for (int64_t r = 0; r < m; ++r)
    for (int64_t i = 0; i < k; ++i) c.a[r * c.a_stride + i] = static_cast<int8_t>(rng());
  for (int64_t r = 0; r < n; ++r)
    for (int64_t i = 0; i < k; ++i) c.b[r * c.b_stride + i] = static_cast<int8_t>(rng());
  c.c_dtype = c_dtype;
  if (transposed) c.ldc = 1, c.ldc_n = m;
  else c.ldc = n, c.ldc_n = 1;
  c.c_init = poisoned(c_dtype, c.extent());
  return c;
}

// Runs c on k; false when refused.
bool run_i8(const qg::detail::GemmKernel& k, I8Case& c, std::string* why) {
  DevBytes a(as_bytes(c.a), c.a_offset, kSlack), b(as_bytes(c.b), c.b_offset, kSlack), cb(c.c_init, 0, kSlack);
  DevBytes rs(as_bytes(c.row_scale), 0, kSlack), cs(as_bytes(c.col_scale), 0, kSlack);
  DevBytes rz(as_bytes(c.row_zp), 0, kSlack), cz(as_bytes(c.col_zp), 0, kSlack);
  DevBytes bias(as_bytes(c.bias), 0, kSlack);
  qg::GemmArgs g;
  g.a = {a.ptr(), Format::i8, c.m, c.k, c.a_stride, {}, {}};
  g.b = {b.ptr(), Format::i8, c.n, c.k, c.b_stride, {}, {}};
  g.c = cb.ptr();
  g.c_dtype = c.c_dtype;
  g.ldc = c.ldc;
  g.ldc_n = c.ldc_n;
  g.epilogue.alpha = c.alpha;
  g.epilogue.beta = c.beta;
  g.epilogue.row_scale = reinterpret_cast<const float*>(rs.ptr());
  g.epilogue.col_scale = reinterpret_cast<const float*>(cs.ptr());
  g.epilogue.row_scale_scalar = c.row_scale.size() == 1 && c.m != 1;
  g.epilogue.col_scale_scalar = c.col_scale.size() == 1 && c.n != 1;
  g.epilogue.row_zero_point = reinterpret_cast<const int32_t*>(rz.ptr());
  g.epilogue.col_zero_point = reinterpret_cast<const int32_t*>(cz.ptr());
  g.epilogue.row_zero_point_scalar = c.row_zp.size() == 1 && c.m != 1;
  g.epilogue.col_zero_point_scalar = c.col_zp.size() == 1 && c.n != 1;
  g.epilogue.bias = bias.ptr();
  g.epilogue.bias_dtype = DType::f32;
  g.epilogue.activation = c.relu ? qg::Activation::relu : qg::Activation::none;
  g.device = qg::Device::cuda(0);
  g.fn = "qg.gemm";
  if (!qgtest::run_cuda_kernel(k, g, why)) return false;
  c.c_out = cb.read();
  EXPECT_EQ(a.read(), as_bytes(c.a)) << "the kernel wrote to its input a";
  return true;
}

template <class T>
T pick(const std::vector<T>& v, int64_t i) {
  return v.size() == 1 ? v[0] : v[i];
}

void check_i8(const I8Case& c) {
  SCOPED_TRACE(c.describe());
  ASSERT_EQ(c.c_out.size(), c.c_init.size());
  const int64_t es = qg::dtype_size(c.c_dtype);
  int bad = 0, unwritten = 0;
  double num = 0, den = 0;
  std::vector<char> element(c.c_out.size(), 0);
  for (int64_t i = 0; i < c.m; ++i)
    for (int64_t j = 0; j < c.n; ++j) {
      const int8_t* ar = &c.a[i * c.a_stride];
      const int8_t* br = &c.b[j * c.b_stride];
      const int64_t za = c.row_zp.empty() ? 0 : pick(c.row_zp, i);
      const int64_t zb = c.col_zp.empty() ? 0 : pick(c.col_zp, j);
      int64_t acc = 0;
      for (int64_t x = 0; x < c.k; ++x) acc += (ar[x] - za) * (br[x] - zb);
      const int64_t off = (i * c.ldc + j * c.ldc_n) * es;
      std::fill(element.begin() + off, element.begin() + off + es, 1);
      const uint8_t* p = &c.c_out[off];
      if (c.c_dtype == DType::i32) {
        int32_t got;
        std::memcpy(&got, p, 4);
        const int64_t want = c.relu && acc < 0 ? 0 : acc;
        if (got != want && ++bad <= 5)
          ADD_FAILURE() << "C[" << i << ", " << j << "] = " << got << ", exactly " << want << " expected";
        continue;
      }
      if (c.beta == 0.0f && qgtest::is_poison_element(p, c.c_dtype)) {
        if (++unwritten <= 3) ADD_FAILURE() << "C[" << i << ", " << j << "] was not written";
        continue;
      }
      double v = static_cast<double>(acc) * c.alpha;
      if (!c.row_scale.empty()) v *= pick(c.row_scale, i);
      if (!c.col_scale.empty()) v *= pick(c.col_scale, j);
      if (c.beta != 0.0f) v += static_cast<double>(c.beta) * qgtest::decode_float(&c.c_init[off], c.c_dtype);
      if (!c.bias.empty()) v += c.bias[i];
      if (c.relu && v < 0) v = 0;
      const double got = qgtest::decode_float(p, c.c_dtype);
      if (!std::isfinite(got)) {
        if (++bad <= 5) ADD_FAILURE() << "C[" << i << ", " << j << "] = " << got << ", reference " << v;
        continue;
      }
      num += (got - v) * (got - v);
      den += v * v;
    }
  EXPECT_EQ(bad, 0);
  EXPECT_EQ(unwritten, 0);
  if (c.c_dtype != DType::i32 && den > 0) {
    // f16 / bf16 outputs round to 11 / 8 bits: their NMSE is the cast's.
    const double limit = c.c_dtype == DType::f32 ? 1e-6 : (c.c_dtype == DType::f16 ? 1e-6 : 2e-5);
    EXPECT_LE(num / den, limit) << "NMSE vs float64 reference";
  }
  int clobbered = 0;
  for (size_t idx = 0; idx < c.c_out.size(); ++idx)
    if (!element[idx] && c.c_out[idx] != c.c_init[idx]) ++clobbered;
  EXPECT_EQ(clobbered, 0) << "bytes written outside the output elements";
}

// The int8 kernels and what each takes; a case outside its scope must be
// refused, one inside run.
struct I8Scope {
  const char* name;
  int64_t min_side;    // M and N both at least this
  bool zero_points;    // claims row / column zero points
  int64_t k_multiple;  // K a multiple of this
  int align;           // row starts and strides a multiple of this many bytes
};
constexpr I8Scope kMma{"cuda_i8_mma", 1, true, 16, 16};
constexpr I8Scope kWgmma{"cuda_i8_wgmma", 128, false, 16, 16};
constexpr I8Scope kDp4a{"cuda_i8_dp4a", 1, true, 4, 4};

class CudaI8 : public qgtest::CudaFixture<::testing::TestWithParam<I8Scope>> {
 protected:
  void SetUp() override {
    CudaFixture::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    const std::string name = GetParam().name;
    kernel_ = qgtest::find_gemm_kernel(qg::detail::cuda::registry(), name);
    ASSERT_NE(kernel_, nullptr) << "the CUDA registry has no kernel named " << name;
    std::string why;
    if (!qgtest::gemm_kernel_runs_on(*kernel_, qg::Device::cuda(0), &why))
      GTEST_SKIP() << name << " does not run on cuda:0: " << why;
  }

  bool takes(const I8Case& c) const {
    return c.m >= GetParam().min_side && c.n >= GetParam().min_side && c.k % GetParam().k_multiple == 0;
  }

  // Drops the zero points of c when the kernel does not claim them (the
  // dispatcher would not hand it such a call); the rest of the epilogue stays.
  void fit_epilogue(I8Case& c) const {
    if (GetParam().zero_points) return;
    c.row_zp.clear();
    c.col_zp.clear();
  }

  void run_checked(I8Case& c) {
    std::string why;
    const bool ran = run_i8(*kernel_, c, &why);
    ASSERT_EQ(ran, takes(c)) << c.describe() << (ran ? ": ran, should have been refused" : ": refused: " + why);
    if (ran) {
      ++ran_;
      check_i8(c);
    }
  }

  const qg::detail::GemmKernel* kernel_ = nullptr;
  int ran_ = 0;
};

// Edges of every tile size the kernels use (16..256 rows), row-major and
// transposed C, padded rows, every output dtype.
TEST_P(CudaI8, EveryTailExact) {
  QG_SEEDED_RNG(rng, 1);
  const DType dtypes[] = {DType::i32, DType::f32, DType::f16, DType::bf16};
  const std::vector<int64_t> edges = {1, 15, 16, 17, 127, 128, 129, 255, 257, 300};
  int idx = 0;
  for (int64_t kk : {16, 48, 144, 4096})
    for (int64_t m : edges)
      for (int64_t n : edges) {
        if (kk == 4096 && m * n > 20000) continue;  // keep the host reference quick
        if (kk == 144 && m * n < 10000) continue;
        const DType dt = dtypes[idx++ % 4];
        I8Case c = i8_case(rng, m, n, kk, dt, idx % 3 == 0, idx % 5 == 0 ? 16 : 0);
        if (dt == DType::f16) c.alpha = 1.0f / 1024;  // sums reach 2^20: keep them inside fp16's range
        run_checked(c);
        if (HasFailure()) return;
      }
  EXPECT_GT(ran_, 0);
}

TEST_P(CudaI8, ZeroPointsAndEpilogue) {
  QG_SEEDED_RNG(rng, 2);
  struct Shape {
    int64_t m, n, k;
  };
  // Narrow tiles (split K over clusters on sm_90: N = 16 x K = 8192, and
  // 300 x 200 x 8192 for the warpgroup kernel), the mid and large tiles
  // (2304 x 2048: the 128 x 256 warpgroup tiles fill the SMs), and small odd
  // shapes.
  for (const Shape& s : {Shape{17, 5, 48}, Shape{300, 16, 8192}, Shape{129, 33, 1024}, Shape{257, 64, 2048},
                         Shape{300, 129, 512}, Shape{300, 200, 8192}, Shape{2304, 2048, 128}}) {
    for (int variant = 0; variant < 4; ++variant) {
      const bool i32 = variant == 0;
      I8Case c = i8_case(rng, s.m, s.n, s.k, i32 ? DType::i32 : (variant == 3 ? DType::bf16 : DType::f32),
                         variant == 2);
      std::uniform_int_distribution<int32_t> zp(-128, 127);
      if (variant != 1) {
        for (int64_t i = 0; i < s.m; ++i) c.row_zp.push_back(zp(rng));
        c.col_zp.push_back(zp(rng));  // scalar
      } else {
        c.row_zp.push_back(zp(rng));  // scalar
        for (int64_t j = 0; j < s.n; ++j) c.col_zp.push_back(zp(rng));
      }
      fit_epilogue(c);
      c.relu = variant != 1;
      if (!i32) {
        for (int64_t i = 0; i < s.m; ++i) c.row_scale.push_back(qgtest::uniform(rng, 0.5f, 2.0f) / 1024.0f);
        for (int64_t j = 0; j < s.n; ++j) c.col_scale.push_back(qgtest::uniform(rng, 0.5f, 2.0f) / 64.0f);
        for (int64_t i = 0; i < s.m; ++i) c.bias.push_back(qgtest::uniform(rng, -50.0f, 50.0f));
        c.alpha = 0.75f;
      }
      if (variant == 1) {  // beta: C holds values
        c.beta = 0.5f;
        for (int64_t i = 0; i < s.m; ++i)
          for (int64_t j = 0; j < s.n; ++j)
            qgtest::encode_float(&c.c_init[(i * c.ldc + j * c.ldc_n) * 4], DType::f32, qgtest::uniform(rng, -9, 9));
      }
      run_checked(c);
      if (HasFailure()) return;
    }
  }
  EXPECT_GT(ran_, 0);
}

// Long K (many pipeline rounds), from decode widths to two wide tiles.
TEST_P(CudaI8, TallK) {
  QG_SEEDED_RNG(rng, 3);
  for (int64_t n : {1, 16, 32, 64, 128, 256}) {
    I8Case c = i8_case(rng, n > 64 ? 384 : 1024, n, 14336, DType::i32, n == 256);
    run_checked(c);
    if (HasFailure()) return;
  }
  EXPECT_GT(ran_, 0);
}

// More tiles than resident CTAs, both tile widths (the 128 x 256 tiles where
// they fill every SM), both C orientations: each persistent CTA walks
// several tiles through one ring of stages.
TEST_P(CudaI8, ManyTilesPerCta) {
  QG_SEEDED_RNG(rng, 5);
  struct Shape {
    int64_t m, n, k;
    bool transposed;
  };
  // 20000 x 200: enough 128 x 256 tiles to take the wide ones, whose
  // 256-row copies of B then reach past its 200 rows (zero-filled).
  for (const Shape& s : {Shape{4096, 1000, 64, false}, Shape{1000, 4096, 64, true}, Shape{2200, 2100, 272, false},
                         Shape{640, 700, 1024, true}, Shape{20000, 200, 64, false}}) {
    I8Case c = i8_case(rng, s.m, s.n, s.k, DType::i32, s.transposed);
    run_checked(c);
    if (HasFailure()) return;
  }
  EXPECT_GT(ran_, 0);
}

TEST_P(CudaI8, RefusesWhatItCannotRead) {
  QG_SEEDED_RNG(rng, 4);
  const I8Scope& scope = GetParam();
  const int64_t side = scope.min_side < 17 ? 17 : scope.min_side;
  // An offset (and a row stride's excess) that breaks the scope's alignment
  // by the least it can: 4 bytes for the 16-byte kernels, 2 for the 4-byte one.
  const size_t off = scope.align > 4 ? 4 : 2;
  const std::string align_text = std::to_string(scope.align) + "-byte";
  std::string why;
  {
    I8Case c = i8_case(rng, side, side, 64, DType::i32);
    c.a_offset = off;
    EXPECT_FALSE(run_i8(*kernel_, c, &why));
    EXPECT_NE(why.find(align_text), std::string::npos) << why;
  }
  {
    I8Case c = i8_case(rng, side, side, 64, DType::i32, false, static_cast<int64_t>(off));  // row stride 64 + off
    EXPECT_FALSE(run_i8(*kernel_, c, &why));
    EXPECT_NE(why.find(align_text), std::string::npos) << why;
  }
  {
    const int64_t k = 32 + scope.k_multiple / 2;  // 40 for K % 16, 34 for K % 4
    I8Case c = i8_case(rng, side, side, k, DType::i32);
    EXPECT_FALSE(run_i8(*kernel_, c, &why));
    EXPECT_NE(why.find("multiple of " + std::to_string(scope.k_multiple)), std::string::npos) << why;
  }
  {
    I8Case c = i8_case(rng, side, side, 64, DType::i32);
    c.b_offset = 1;
    EXPECT_FALSE(run_i8(*kernel_, c, &why));
  }
  if (scope.min_side > 1) {
    I8Case c = i8_case(rng, scope.min_side - 1, 512, 64, DType::i32);
    EXPECT_FALSE(run_i8(*kernel_, c, &why));
    EXPECT_NE(why.find("cuda_i8_mma"), std::string::npos) << why;
  }
}

std::string i8_scope_name(const ::testing::TestParamInfo<I8Scope>& info) { return info.param.name; }

INSTANTIATE_TEST_SUITE_P(Kernels, CudaI8, ::testing::Values(kMma, kWgmma, kDp4a), i8_scope_name);

// ====================================================================== weight-only GEMV
struct WoCase {
  int64_t m = 0, n = 0, k = 0, group = 32;
  DType x_dtype = DType::f16, scale_dtype = DType::f16, zp_dtype = DType::i8;
  bool zero_points = false;
  int64_t w_stride = 0, s_stride = 0, x_stride = 0;  // bytes, elements, bytes
  std::vector<uint8_t> w, scales, zps, x;
  DType c_dtype = DType::f32;
  int64_t ldc = 0, ldc_n = 1;
  std::vector<uint8_t> c_init, c_out;
  std::vector<float> bias;
  std::vector<float> col_scale;  // [N] of the epilogue, or empty
  float beta = 0.0f;             // where not 0, C's start must be finite
  bool relu = false;

  std::string describe() const {
    return "M=" + std::to_string(m) + " N=" + std::to_string(n) + " K=" + std::to_string(k) +
           " group=" + std::to_string(group) + " x " + qg::dtype_name(x_dtype) + " scales " +
           qg::dtype_name(scale_dtype) + (zero_points ? std::string(" zp ") + qg::dtype_name(zp_dtype) : "") +
           " C " + qg::dtype_name(c_dtype) + " ldc=" + std::to_string(ldc) + " ldc_n=" + std::to_string(ldc_n) +
           (col_scale.empty() ? "" : " col_scale") + (beta != 0.0f ? " beta=" + std::to_string(beta) : "");
  }
  int code(int64_t r, int64_t i) const {
    const uint8_t b = w[r * w_stride + i / 2];
    const int v = (i & 1) ? b >> 4 : b & 15;
    return (v ^ 8) - 8;
  }
  double scale(int64_t r, int64_t g) const {
    return qgtest::decode_float(&scales[(r * s_stride + g) * qg::dtype_size(scale_dtype)], scale_dtype);
  }
  int64_t zero(int64_t r, int64_t g) const {
    if (!zero_points) return 0;
    const int64_t i = r * s_stride + g;
    if (zp_dtype == DType::i8) return static_cast<int8_t>(zps[i]);
    int32_t v;
    std::memcpy(&v, &zps[4 * i], 4);
    return v;
  }
  double xv(int64_t j, int64_t i) const { return qgtest::decode_float(&x[j * x_stride + 2 * i], x_dtype); }
};

WoCase wo_case(std::mt19937_64& rng, int64_t m, int64_t n, int64_t k, int64_t group, DType x_dtype, DType s_dtype,
               bool zp, DType zp_dtype = DType::i8, bool pad = false) {
  WoCase c;
  c.m = m, c.n = n, c.k = k, c.group = group;
  c.x_dtype = x_dtype;
  c.scale_dtype = s_dtype;
  c.zero_points = zp;
  c.zp_dtype = zp_dtype;
  c.w_stride = k / 2 + (pad ? 16 : 0);
  c.s_stride = k / group + (pad ? 3 : 0);
  c.x_stride = 2 * k + (pad ? 32 : 0);
  c.w.assign(static_cast<size_t>(m * c.w_stride), qgtest::kSentinelByte);
  for (int64_t r = 0; r < m; ++r)
    for (int64_t i = 0; i < k / 2; ++i) c.w[r * c.w_stride + i] = static_cast<uint8_t>(rng());
  const int64_t ss = qg::dtype_size(s_dtype);
  c.scales.assign(static_cast<size_t>(m * c.s_stride * ss), 0);
  for (int64_t r = 0; r < m; ++r)
    for (int64_t g = 0; g < k / group; ++g)
      qgtest::encode_float(&c.scales[(r * c.s_stride + g) * ss], s_dtype,
                           qgtest::uniform(rng, 0.5f, 2.0f) * ((rng() & 1) ? 1.0f / 64 : 1.0f / 8));
  if (zp) {
    const int64_t zs = qg::dtype_size(zp_dtype);
    c.zps.assign(static_cast<size_t>(m * c.s_stride * zs), 0);
    for (int64_t i = 0; i < m * c.s_stride; ++i) {
      const int32_t v = zp_dtype == DType::i8 ? std::uniform_int_distribution<int32_t>(-128, 127)(rng)
                                              : std::uniform_int_distribution<int32_t>(-3000, 3000)(rng);
      if (zp_dtype == DType::i8) c.zps[i] = static_cast<uint8_t>(static_cast<int8_t>(v));
      else std::memcpy(&c.zps[4 * i], &v, 4);
    }
  }
  c.x.assign(static_cast<size_t>(n * c.x_stride), 0xFF);  // padding: NaN bits
  for (int64_t j = 0; j < n; ++j)
    for (int64_t i = 0; i < k; ++i) qgtest::encode_float(&c.x[j * c.x_stride + 2 * i], x_dtype, qgtest::uniform(rng, -2, 2));
  c.ldc = n;
  c.ldc_n = 1;
  c.c_init = poisoned(c.c_dtype, (m - 1) * c.ldc + (n - 1) * c.ldc_n + 1);
  return c;
}

void set_wo_layout(WoCase& c, DType dt, bool transposed) {
  c.c_dtype = dt;
  if (transposed) c.ldc = 1, c.ldc_n = c.m;
  else c.ldc = c.n, c.ldc_n = 1;
  c.c_init = poisoned(dt, (c.m - 1) * c.ldc + (c.n - 1) * c.ldc_n + 1);
}

bool run_wo(const qg::detail::GemmKernel& k, WoCase& c, std::string* why, size_t w_offset = 0) {
  DevBytes w(c.w, w_offset, kSlack), s(c.scales, 0, kSlack), z(c.zps, 0, kSlack), x(c.x, 0, kSlack);
  DevBytes cb(c.c_init, 0, kSlack), bias(as_bytes(c.bias), 0, kSlack), cs(as_bytes(c.col_scale), 0, kSlack);
  qg::GemmArgs g;
  g.a = {w.ptr(), Format::i4, c.m, c.k, c.w_stride, {}, {}};
  g.a.scales = {s.ptr(), c.scale_dtype, qg::Granularity::group, c.group, c.s_stride};
  if (c.zero_points) g.a.zero_points = {z.ptr(), c.zp_dtype, qg::Granularity::group, c.group, c.s_stride};
  g.b = {x.ptr(), c.x_dtype == DType::f16 ? Format::f16 : Format::bf16, c.n, c.k, c.x_stride, {}, {}};
  g.c = cb.ptr();
  g.c_dtype = c.c_dtype;
  g.ldc = c.ldc;
  g.ldc_n = c.ldc_n;
  g.epilogue.bias = bias.ptr();
  if (!c.col_scale.empty()) g.epilogue.col_scale = reinterpret_cast<const float*>(cs.ptr());
  g.epilogue.beta = c.beta;
  g.epilogue.activation = c.relu ? qg::Activation::relu : qg::Activation::none;
  g.device = qg::Device::cuda(0);
  g.fn = "qg.gemm";
  if (!qgtest::run_cuda_kernel(k, g, why)) return false;
  c.c_out = cb.read();
  return true;
}

void check_wo(const WoCase& c) {
  SCOPED_TRACE(c.describe());
  ASSERT_EQ(c.c_out.size(), c.c_init.size());
  const int64_t es = qg::dtype_size(c.c_dtype);
  double num = 0, den = 0;
  int bad = 0;
  for (int64_t i = 0; i < c.m; ++i)
    for (int64_t j = 0; j < c.n; ++j) {
      double acc = 0;
      for (int64_t kk = 0; kk < c.k; ++kk) {
        const int64_t g = kk / c.group;
        acc += c.scale(i, g) * static_cast<double>(c.code(i, kk) - c.zero(i, g)) * c.xv(j, kk);
      }
      if (!c.col_scale.empty()) acc *= c.col_scale[j];
      if (c.beta != 0.0f) acc += c.beta * qgtest::decode_float(&c.c_init[(i * c.ldc + j * c.ldc_n) * es], c.c_dtype);
      if (!c.bias.empty()) acc += c.bias[i];
      if (c.relu && acc < 0) acc = 0;
      const uint8_t* p = &c.c_out[(i * c.ldc + j * c.ldc_n) * es];
      const double got = qgtest::decode_float(p, c.c_dtype);
      if (!std::isfinite(got)) {
        if (++bad <= 5) ADD_FAILURE() << "C[" << i << ", " << j << "] = " << got << " (unwritten?), reference " << acc;
        continue;
      }
      num += (got - acc) * (got - acc);
      den += acc * acc;
    }
  EXPECT_EQ(bad, 0);
  const double limit = c.c_dtype == DType::bf16 ? 2e-5 : 1e-6;
  if (den > 0) {
    EXPECT_LE(num / den, limit) << "NMSE vs float64 reference";
  }
}

TEST_F(CudaIntFast, WoGemvEveryNGroupAndDtype) {
  QG_NEED_KERNEL(kf16, "cuda_wo_gemv");  // the registry's first entry of that name: i4 x f16
  ASSERT_EQ(kf16->b_format, Format::f16);
  const qg::detail::GemmKernel* kbf16 = nullptr;
  for (const auto& e : qg::detail::cuda::registry().gemm)
    if (std::string(e.name) == "cuda_wo_gemv" && e.b_format == Format::bf16) kbf16 = &e;
  ASSERT_NE(kbf16, nullptr);
  QG_SEEDED_RNG(rng, 10);
  int idx = 0;
  for (int64_t n = 1; n <= 16; ++n)
    for (int64_t group : {32, 64, 128}) {
      ++idx;
      const DType xd = idx % 2 ? DType::f16 : DType::bf16;
      const DType sd = idx % 3 == 0 ? DType::f32 : (idx % 3 == 1 ? DType::f16 : DType::bf16);
      const bool zp = idx % 4 >= 2;
      const DType zd = idx % 8 >= 6 ? DType::i32 : DType::i8;
      const int64_t m = idx % 5 == 0 ? 1 : (idx % 2 ? 33 : 129);
      const int64_t k = group == 32 ? 96 : (group == 64 ? 640 : 1024 + 128);
      WoCase c = wo_case(rng, m, n, k, group, xd, sd, zp, zd, idx % 3 == 2);
      if (idx % 4 == 1) set_wo_layout(c, idx % 8 == 1 ? DType::f16 : DType::f32, true);
      std::string why;
      ASSERT_TRUE(run_wo(xd == DType::f16 ? *kf16 : *kbf16, c, &why)) << c.describe() << ": refused: " << why;
      check_wo(c);
      if (HasFailure()) return;
    }
}

TEST_F(CudaIntFast, WoGemvDecodeShapes) {
  QG_NEED_KERNEL(k, "cuda_wo_gemv");  // the f16 entry
  QG_SEEDED_RNG(rng, 11);
  for (int64_t n : {1, 8, 16}) {
    WoCase c = wo_case(rng, 1000, n, 4096 + 32, 32, DType::f16, DType::f16, n == 8);
    c.bias.resize(static_cast<size_t>(c.m));
    for (float& b : c.bias) b = qgtest::uniform(rng, -1, 1);
    c.relu = n == 16;
    std::string why;
    ASSERT_TRUE(run_wo(*k, c, &why)) << why;
    check_wo(c);
  }
}

// N > 16 runs as slices of 16 activation rows (and of C's columns), the
// rows of one launch's grid: tails of a slice (17, 33, 100), slices with
// and without a K split over a cluster (a 32-row block and K = 4128, where
// an sm_90 image splits K in two: the cluster's sum stored at each slice's
// column offset, by rank 0 alone at M = 16 and by both ranks at M = 40),
// many slices of a short K that ends inside a macro step (128 tokens at
// 64 x 96) and rows past one block. Where `terms`, the epilogue's
// per-column scale and C read back (beta) are indexed by the absolute
// column, split or not.
TEST_F(CudaIntFast, WoGemvLargeNRunsInSlices) {
  QG_NEED_KERNEL(k, "cuda_wo_gemv");  // the f16 entry
  QG_SEEDED_RNG(rng, 13);
  struct Shape {
    int64_t m, n, k, group;
    bool terms;
  };
  int idx = 0;
  for (const Shape sh : {Shape{65, 17, 512, 64, false}, Shape{65, 32, 512, 64, false}, Shape{65, 33, 512, 64, true},
                         Shape{65, 100, 512, 64, false}, Shape{16, 40, 4096 + 32, 32, false},
                         Shape{40, 40, 4096 + 32, 32, true}, Shape{40, 40, 4096 + 32, 32, false},
                         Shape{64, 128, 96, 32, false}, Shape{1000, 50, 160, 32, true}}) {
    ++idx;
    WoCase c = wo_case(rng, sh.m, sh.n, sh.k, sh.group, DType::f16, idx % 2 ? DType::f16 : DType::f32, idx % 2 == 0);
    if (idx % 4 >= 2) set_wo_layout(c, DType::f16, true);
    if (sh.terms) {
      c.col_scale.resize(static_cast<size_t>(c.n));
      for (float& v : c.col_scale) v = qgtest::uniform(rng, 0.25f, 4.0f);
      c.beta = 0.5f;
      const int64_t es = qg::dtype_size(c.c_dtype);
      for (size_t i = 0; i < c.c_init.size() / es; ++i)
        qgtest::encode_float(&c.c_init[i * es], c.c_dtype, qgtest::uniform(rng, -1, 1));
    }
    std::string why;
    ASSERT_TRUE(run_wo(*k, c, &why)) << c.describe() << ": refused: " << why;
    check_wo(c);
    if (HasFailure()) return;
  }
}

TEST_F(CudaIntFast, WoGemvRefusesWhatItCannotRead) {
  QG_NEED_KERNEL(k, "cuda_wo_gemv");
  QG_SEEDED_RNG(rng, 12);
  std::string why;
  {
    WoCase c = wo_case(rng, 8, 2, 64, 32, DType::f16, DType::f16, false);
    EXPECT_FALSE(run_wo(*k, c, &why, 8));
    EXPECT_NE(why.find("16-byte"), std::string::npos) << why;
  }
  {
    WoCase c = wo_case(rng, 8, 2, 48, 16, DType::f16, DType::f16, false);  // K % 32 != 0, group 16
    EXPECT_FALSE(run_wo(*k, c, &why));
  }
}

}  // namespace
