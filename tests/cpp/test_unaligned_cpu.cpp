// SPDX-License-Identifier: MIT
// test_unaligned_cpu.cpp: quantize and dequantize on the CPU with every array
// at an odd address (a NumPy view at byte offset 1, a DLPack byte_offset) and
// input rows at odd strides. The bytes must equal those of the same call on
// aligned buffers, and the bytes around the output must stay untouched. Under
// UBSan (QG_SANITIZE=address,undefined) this also shows that no kernel reads or
// writes through a misaligned typed pointer.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "qg/qg.h"
#include "test_util.h"

namespace {

constexpr uint8_t kGap = qgtest::kSentinelByte;

// `bytes` bytes at `offset` past a 64-byte boundary (so offset 1 is
// misaligned for every element type), between guard bands of kGap.
class OffsetBuffer {
 public:
  OffsetBuffer(size_t bytes, size_t offset) : storage_(bytes + offset + 128, kGap) {
    const auto base = reinterpret_cast<uintptr_t>(storage_.data());
    data_ = storage_.data() + ((64 - base % 64) % 64) + offset;
    size_ = bytes;
  }
  uint8_t* data() { return data_; }
  std::vector<uint8_t> bytes() const { return std::vector<uint8_t>(data_, data_ + size_); }
  // Whether every byte outside [data(), data() + bytes) still holds kGap.
  bool guards_intact() const {
    for (const uint8_t* p = storage_.data(); p < storage_.data() + storage_.size(); ++p)
      if ((p < data_ || p >= data_ + size_) && *p != kGap) return false;
    return true;
  }

 private:
  std::vector<uint8_t> storage_;
  uint8_t* data_;
  size_t size_;
};

struct QuantKind {
  const char* name;
  qg::Format format;
  qg::Q8_1Convention convention;
};
const QuantKind kKinds[] = {
    {"q4_0", qg::Format::q4_0, qg::Q8_1Convention::reference},
    {"q8_0", qg::Format::q8_0, qg::Q8_1Convention::reference},
    {"q8_1", qg::Format::q8_1, qg::Q8_1Convention::reference},
    {"q8_1/ggml_cuda", qg::Format::q8_1, qg::Q8_1Convention::ggml_cuda},
};
const qg::DType kInputTypes[] = {qg::DType::f32, qg::DType::f16, qg::DType::bf16};

// Random rows of `dtype` values, as bytes: rows x row_elems elements.
std::vector<uint8_t> random_values(std::mt19937_64& rng, qg::DType dtype, int64_t n) {
  const int esize = qg::dtype_size(dtype);
  std::vector<uint8_t> out(static_cast<size_t>(n * esize));
  for (int64_t i = 0; i < n; ++i) {
    const float f = qgtest::uniform(rng, -3.0f, 3.0f);
    if (dtype == qg::DType::f32) {
      std::memcpy(&out[i * 4], &f, 4);
    } else {
      const uint16_t h = dtype == qg::DType::f16 ? qgtest::random_fp16(rng, -8, 4)
                                                 : static_cast<uint16_t>(qgtest::f2u(f) >> 16);
      std::memcpy(&out[i * 2], &h, 2);
    }
  }
  return out;
}

// The only two calls into qg's API. x [rows, k] with rows `xs` elements apart
// -> out [rows, k/32, bpb], contiguous (the view API takes only contiguous
// outputs).
qg::Status quantize_strided(const QuantKind& kind, uint8_t* x, qg::DType dtype, int64_t rows, int64_t k,
                            int64_t xs, uint8_t* y) {
  const int64_t bpb = qg::format_traits(kind.format).bytes_per_block;
  qg::TensorView xv = qg::make_view(x, dtype, qg::Device::cpu(), {rows, k});
  xv.strides[0] = xs;
  xv.writable = false;
  const qg::TensorView yv = qg::make_view(y, qg::DType::u8, qg::Device::cpu(), {rows, k / 32, bpb});
  qg::QuantizeViews v;
  v.format = kind.format;
  v.x = xv;
  v.convention = kind.convention;
  return qg::quantize(v, yv);
}

// xq [rows, k/32, bpb] with rows `xs` bytes apart -> y [rows, k] f32, contiguous.
qg::Status dequantize_strided(qg::Format format, uint8_t* xq, int64_t rows, int64_t k, int64_t xs,
                              uint8_t* y) {
  const int64_t bpb = qg::format_traits(format).bytes_per_block;
  qg::TensorView xv = qg::make_view(xq, qg::DType::u8, qg::Device::cpu(), {rows, k / 32, bpb});
  xv.strides[0] = xs;
  xv.writable = false;
  const qg::TensorView yv = qg::make_view(y, qg::DType::f32, qg::Device::cpu(), {rows, k});
  qg::DequantizeViews v;
  v.format = format;
  v.xq = xv;
  v.k = k;
  return qg::dequantize(v, yv);
}

// got == want, reporting the first few differing bytes.
void expect_same_bytes(const std::vector<uint8_t>& got, const std::vector<uint8_t>& want,
                       const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int bad = 0;
  for (size_t i = 0; i < got.size(); ++i)
    if (got[i] != want[i] && ++bad <= 5)
      ADD_FAILURE() << what << ": byte " << i << " is " << int(got[i]) << ", expected " << int(want[i]);
  EXPECT_EQ(bad, 0) << what;
}

// 100 rows of K=96: several pool tasks. Input rows are an odd number of
// elements (or bytes) apart, so successive rows sit at different alignments.
constexpr int64_t kRows = 100, kK = 96;

TEST(UnalignedCpu, QuantizeFromOddAddressesMatchesAligned) {
  QG_SEEDED_RNG(rng, 700);
  for (qg::DType dtype : kInputTypes) {
    const int64_t esize = qg::dtype_size(dtype);
    const std::vector<uint8_t> dense = random_values(rng, dtype, kRows * kK);
    for (const QuantKind& kind : kKinds) {
      const int64_t row_bytes = kK / 32 * qg::format_traits(kind.format).bytes_per_block;
      // Aligned and contiguous: the bytes every other layout must reproduce.
      OffsetBuffer xa(dense.size(), 0), ya(static_cast<size_t>(kRows * row_bytes), 0);
      std::memcpy(xa.data(), dense.data(), dense.size());
      qg::Status s = quantize_strided(kind, xa.data(), dtype, kRows, kK, kK, ya.data());
      ASSERT_TRUE(s.ok()) << s.message();
      const std::vector<uint8_t> want = ya.bytes();
      for (size_t offset : {1, 2, 3}) {
        const std::string what = std::string(kind.name) + " from " + qg::dtype_name(dtype) +
                                 " at offset " + std::to_string(offset);
        SCOPED_TRACE(what);
        const int64_t xs = kK + 1;  // odd row stride
        OffsetBuffer x(static_cast<size_t>(kRows * xs * esize), offset);
        OffsetBuffer y(want.size(), offset);
        for (int64_t r = 0; r < kRows; ++r)
          std::memcpy(x.data() + r * xs * esize, &dense[r * kK * esize], kK * esize);
        s = quantize_strided(kind, x.data(), dtype, kRows, kK, xs, y.data());
        ASSERT_TRUE(s.ok()) << s.message();
        expect_same_bytes(y.bytes(), want, what);
        EXPECT_TRUE(y.guards_intact()) << what << ": bytes outside the output were written";
      }
    }
  }
}

TEST(UnalignedCpu, DequantizeToOddAddressesMatchesAligned) {
  QG_SEEDED_RNG(rng, 701);
  for (qg::Format format : {qg::Format::q4_0, qg::Format::q8_0, qg::Format::q8_1}) {
    const int64_t bpb = qg::format_traits(format).bytes_per_block;
    const int64_t row_bytes = kK / 32 * bpb, out_row_bytes = kK * 4;
    std::vector<uint8_t> packed(static_cast<size_t>(kRows * row_bytes));
    for (auto& b : packed) b = static_cast<uint8_t>(rng());
    for (size_t off = 0; off < packed.size(); off += bpb) {  // finite scales
      const uint16_t d = qgtest::random_fp16(rng, -8, 4);
      std::memcpy(&packed[off], &d, 2);
    }
    OffsetBuffer xa(packed.size(), 0), ya(static_cast<size_t>(kRows * out_row_bytes), 0);
    std::memcpy(xa.data(), packed.data(), packed.size());
    qg::Status s = dequantize_strided(format, xa.data(), kRows, kK, row_bytes, ya.data());
    ASSERT_TRUE(s.ok()) << s.message();
    const std::vector<uint8_t> want = ya.bytes();
    for (size_t offset : {1, 2, 3}) {
      const std::string what = std::string(qg::format_traits(format).name) + " at offset " +
                               std::to_string(offset);
      SCOPED_TRACE(what);
      const int64_t xs = row_bytes + 1;  // odd row stride in bytes
      OffsetBuffer x(static_cast<size_t>(kRows * xs), offset);
      OffsetBuffer y(want.size(), offset);
      for (int64_t r = 0; r < kRows; ++r) std::memcpy(x.data() + r * xs, &packed[r * row_bytes], row_bytes);
      s = dequantize_strided(format, x.data(), kRows, kK, xs, y.data());
      ASSERT_TRUE(s.ok()) << s.message();
      expect_same_bytes(y.bytes(), want, what);
      EXPECT_TRUE(y.guards_intact()) << what << ": bytes outside the output were written";
    }
  }
}

}  // namespace
