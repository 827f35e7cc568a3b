// SPDX-License-Identifier: MIT
// quantize_tensor.cpp: float rows -> integer codes with outside scales (i8,
// i4, i4x8), and back. The rules are int_formats.h's (the CUDA kernels call
// the same functions), so both backends write the same bytes.
//
// A scope (tensor, row or group) is measured, then quantized: rows and
// groups in one pass over each row (a row is in cache after its measuring
// loop); a per-tensor scale needs every value first, so its minimum and
// maximum are reduced over the pool's tasks (min and max are exact in any
// order), then a second pass quantizes. Where the CPU has AVX2 both loops
// run eight values at a time (quantize_tensor_avx2.cpp: the same bytes).
#include <algorithm>
#include <cstring>
#include <vector>

#include "cpu/features.h"
#include "cpu/kernels.h"
#include "cpu/thread_pool.h"
#include "int_formats.h"

namespace qg::detail::cpu {

namespace {

float load_x(const uint8_t* p, DType dtype) {
  if (dtype == DType::f32) {
    float v;
    std::memcpy(&v, p, 4);
    return v;
  }
  uint16_t h;
  std::memcpy(&h, p, 2);
  return dtype == DType::f16 ? fp16_to_fp32(h) : bf16_to_fp32(h);
}

// min, max and finiteness of values [k0, k1) of one row.
struct Extent {
  float lo = 0.0f, hi = 0.0f, absmax = 0.0f;
  bool finite = true;
  void add(float v) {
    if (!is_finite(v) || v != v) {
      finite = false;
      return;
    }
    lo = std::min(lo, v);
    hi = std::max(hi, v);
    absmax = std::max(absmax, std::fabs(v));
  }
  void merge(const Extent& o) {
    lo = std::min(lo, o.lo);
    hi = std::max(hi, o.hi);
    absmax = std::max(absmax, o.absmax);
    finite = finite && o.finite;
  }
};

ScopeParams params_of(const Extent& e, bool asymmetric, CodeRange c) {
  const float nan = bits_float(0x7FC00000u);
  if (asymmetric) return asymmetric_params(e.finite ? e.lo : nan, e.finite ? e.hi : nan, c);
  return symmetric_params(e.finite ? e.absmax : nan, c);
}

bool vector_loops() {
  static const bool yes = cpu_features().avx2 && cpu_features().fma && cpu_features().f16c;
  return yes;
}

// Codes [k0, k1) of row r (k0 even) from their scope's parameters.
void write_codes(const QuantizeArgs& a, const uint8_t* xr, uint8_t* yr, int64_t k0, int64_t k1,
                 const ScopeParams& p) {
  const int64_t esize = dtype_size(a.x_dtype);
  const CodeRange c = code_range(a.format);
  if (vector_loops() && !p.poisoned) {
    if (a.format == Format::i8) {
      quantize_codes_avx2(xr + k0 * esize, a.x_dtype, k1 - k0, p.inv, p.zp, c.qmin, c.qmax,
                          reinterpret_cast<int8_t*>(yr + k0));
      return;
    }
    // 4-bit codes: a run of them as bytes, then packed two a byte (an odd
    // K's last byte gets a 0 high nibble, as below).
    constexpr int64_t kRun = 256;
    int8_t codes[kRun];
    for (int64_t k = k0; k < k1; k += kRun) {
      const int64_t n = std::min(kRun, k1 - k);
      quantize_codes_avx2(xr + k * esize, a.x_dtype, n, p.inv, p.zp, c.qmin, c.qmax, codes);
      pack_nibbles_avx2(codes, n, a.format == Format::i4x8, yr + (k >> 1));
    }
    return;
  }
  auto code = [&](int64_t k) { return k < k1 ? quantize_value(load_x(xr + k * esize, a.x_dtype), p, c) : 0; };
  if (a.format == Format::i8) {
    for (int64_t k = k0; k < k1; ++k) yr[k] = static_cast<uint8_t>(static_cast<int8_t>(code(k)));
    return;
  }
  // i4 and i4x8: two codes a byte (k0 is even: scopes start at row or group
  // boundaries, and group sizes of 4-bit formats are even); an odd K's last
  // byte gets a 0 high nibble. i4x8 words are little-endian bytes.
  for (int64_t k = k0; k < k1; k += 2) yr[k >> 1] = pack_pair(a.format, code(k), code(k + 1));
}

Extent measure(const QuantizeArgs& a, const uint8_t* xr, int64_t k0, int64_t k1) {
  const int64_t esize = dtype_size(a.x_dtype);
  Extent e;
  int64_t k = k0;
  if (vector_loops()) {
    e.finite = measure_scope_avx2(xr + k0 * esize, a.x_dtype, k1 - k0, &e.lo, &e.hi, &e.absmax);
    k += (k1 - k0) & ~int64_t{7};
  }
  for (; k < k1; ++k) e.add(load_x(xr + k * esize, a.x_dtype));
  return e;
}

int64_t rows_per_task(int64_t k) { return k >= 4096 ? 1 : (4096 + k - 1) / (k ? k : 1); }

}  // namespace

Status quantize_tensor_rows(const QuantizeArgs& a) {
  const int64_t esize = dtype_size(a.x_dtype);
  const auto* x = static_cast<const uint8_t*>(a.x);
  auto* y = static_cast<uint8_t*>(a.y);
  const bool asym = a.static_scales ? a.static_zero_points != nullptr : a.zero_points != nullptr;
  const CodeRange c = code_range(a.format);
  const int64_t per = rows_per_task(a.k);
  const int64_t tasks = (a.rows + per - 1) / per;
  auto row_x = [&](int64_t r) { return x + r * a.x_row_stride * esize; };
  auto row_y = [&](int64_t r) { return y + r * a.y_row_stride; };
  auto store_params = [&](int64_t i, const ScopeParams& p) {
    if (a.static_scales) return;
    std::memcpy(reinterpret_cast<uint8_t*>(a.scales) + 4 * i, &p.scale, 4);
    if (a.zero_points) std::memcpy(reinterpret_cast<uint8_t*>(a.zero_points) + 4 * i, &p.zp, 4);
  };
  auto given = [&](int64_t i) {
    float s;
    int32_t z = 0;
    std::memcpy(&s, reinterpret_cast<const uint8_t*>(a.static_scales) + 4 * i, 4);
    if (a.static_zero_points) std::memcpy(&z, reinterpret_cast<const uint8_t*>(a.static_zero_points) + 4 * i, 4);
    return static_params(s, z);
  };

  if (a.granularity == Granularity::tensor) {
    ScopeParams p;
    if (a.static_scales) {
      p = given(0);
    } else {
      std::vector<Extent> part(static_cast<size_t>(tasks));
      ThreadPool::instance().parallel_for(tasks, [&](int64_t t) {
        for (int64_t r = t * per; r < a.rows && r < (t + 1) * per; ++r) part[t].merge(measure(a, row_x(r), 0, a.k));
      });
      Extent all;
      for (const Extent& e : part) all.merge(e);
      p = params_of(all, asym, c);
      store_params(0, p);
    }
    ThreadPool::instance().parallel_for(tasks, [&](int64_t t) {
      for (int64_t r = t * per; r < a.rows && r < (t + 1) * per; ++r) write_codes(a, row_x(r), row_y(r), 0, a.k, p);
    });
    return {};
  }
  const int64_t g = a.granularity == Granularity::row ? a.k : a.group_size;
  const int64_t groups = a.granularity == Granularity::row ? 1 : a.k / g;
  ThreadPool::instance().parallel_for(tasks, [&](int64_t t) {
    for (int64_t r = t * per; r < a.rows && r < (t + 1) * per; ++r)
      for (int64_t j = 0; j < groups; ++j) {
        const int64_t i = r * groups + j;
        ScopeParams p;
        if (a.static_scales) {
          p = given(i);
        } else {
          p = params_of(measure(a, row_x(r), j * g, (j + 1) * g), asym, c);
          store_params(i, p);
        }
        write_codes(a, row_x(r), row_y(r), j * g, (j + 1) * g, p);
      }
  });
  return {};
}

Status dequantize_tensor_rows(const DequantizeArgs& a) {
  const auto* xq = static_cast<const uint8_t*>(a.xq);
  auto* y = static_cast<uint8_t*>(static_cast<void*>(a.y));
  const int64_t per = rows_per_task(a.k);
  const int64_t tasks = (a.rows + per - 1) / per;
  ThreadPool::instance().parallel_for(tasks, [&](int64_t t) {
    for (int64_t r = t * per; r < a.rows && r < (t + 1) * per; ++r) {
      const uint8_t* xr = xq + r * a.xq_row_stride;
      uint8_t* yr = y + r * a.y_row_stride * 4;
      for (int64_t k = 0; k < a.k; ++k) {
        const int64_t i = scope_index(a.granularity, r, k, a.k, a.group_size);
        float s;
        int32_t z = 0;
        std::memcpy(&s, reinterpret_cast<const uint8_t*>(a.scales) + 4 * i, 4);
        if (a.zero_points) std::memcpy(&z, reinterpret_cast<const uint8_t*>(a.zero_points) + 4 * i, 4);
        const float v = dequantize_value(load_code(a.format, xr, format_traits(a.format).bytes_per_block, k), s, z);
        std::memcpy(yr + 4 * k, &v, 4);
      }
    }
  });
  return {};
}

}  // namespace qg::detail::cpu
