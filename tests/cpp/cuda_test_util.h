// SPDX-License-Identifier: MIT
// cuda_test_util.h: what the CUDA tests share: device buffers, the CUDA side
// of the GEMM harness's Memory, a fixture that skips without a device, and
// running one registry kernel the way the dispatcher would. Only the CUDA
// test files include it.
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "test_util.h"

#define CUDA_OK(expr)                                                                                         \
  do {                                                                                                        \
    const cudaError_t err_ = (expr);                                                                          \
    ASSERT_EQ(err_, cudaSuccess) << #expr << ": " << cudaGetErrorName(err_) << ": " << cudaGetErrorString(err_); \
  } while (0)

namespace qgtest {

// Host bytes copied to a cudaMalloc'd buffer, `offset` bytes past its start
// (cudaMalloc aligns to 256 bytes: an odd offset misaligns every typed
// access), with `slack` more bytes allocated past the end. Empty: a null
// pointer.
class DevBytes {
 public:
  explicit DevBytes(const std::vector<uint8_t>& host, size_t offset = 0, size_t slack = 0) : size_(host.size()) {
    if (host.empty()) return;
    if (cudaMalloc(&base_, size_ + offset + slack) != cudaSuccess) {
      cudaGetLastError();
      base_ = nullptr;
      ADD_FAILURE() << "cudaMalloc of " << size_ + offset + slack << " bytes failed";
      return;
    }
    ptr_ = static_cast<uint8_t*>(base_) + offset;
    EXPECT_EQ(cudaMemcpy(ptr_, host.data(), size_, cudaMemcpyHostToDevice), cudaSuccess);
    // A copy from pageable memory may return before it lands, and a kernel on
    // a non-blocking stream does not wait for the legacy stream's copies.
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  }
  ~DevBytes() {
    if (base_) cudaFree(base_);
  }
  DevBytes(const DevBytes&) = delete;
  DevBytes& operator=(const DevBytes&) = delete;
  uint8_t* ptr() const { return ptr_; }
  template <class T>
  T* as() const {
    return reinterpret_cast<T*>(ptr_);
  }
  std::vector<uint8_t> read() const {
    std::vector<uint8_t> out(size_);
    if (ptr_) {
      EXPECT_EQ(cudaMemcpy(out.data(), ptr_, size_, cudaMemcpyDeviceToHost), cudaSuccess);
    }
    return out;
  }

 private:
  size_t size_ = 0;
  void* base_ = nullptr;
  uint8_t* ptr_ = nullptr;
};

// Device memory for the GEMM harness. With synchronized_transfers, every
// transfer ends with a device-wide synchronisation: cudaMemcpy from pageable
// memory may return before the copy lands, and a stream of the test's own
// (non-blocking) does not wait on the legacy stream.
class CudaMemory : public Memory {
 public:
  explicit CudaMemory(bool synchronized_transfers = false) : sync_(synchronized_transfers) {}
  qg::Device device() const override { return qg::Device::cuda(0); }
  void* alloc(size_t bytes) override {
    void* p = nullptr;
    if (cudaMalloc(&p, bytes ? bytes : 1) != cudaSuccess) {
      cudaGetLastError();
      return nullptr;
    }
    return p;
  }
  void release(void* p) override { cudaFree(p); }
  void upload(void* dst, const void* src, size_t bytes) override {
    EXPECT_EQ(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice), cudaSuccess);
    if (sync_) {
      EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    }
  }
  void download(void* dst, const void* src, size_t bytes) override {
    if (sync_) {
      EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    }
    EXPECT_EQ(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost), cudaSuccess);
  }
  void synchronize(qg::Stream stream) override {
    const cudaError_t err = cudaStreamSynchronize(static_cast<cudaStream_t>(stream));
    EXPECT_EQ(err, cudaSuccess) << cudaGetErrorName(err) << ": " << cudaGetErrorString(err);
  }

 private:
  bool sync_;
};

// A fixture on cuda:0: skips without a CUDA device, and fails a test that
// leaves a CUDA error behind. A derived SetUp calls this one first and
// returns when IsSkipped() or HasFatalFailure().
template <class Base = ::testing::Test>
class CudaFixture : public Base {
 protected:
  void SetUp() override {
    std::string why;
    if (!qg::cuda_available(&why)) GTEST_SKIP() << "no CUDA device: " << why;
    CUDA_OK(cudaSetDevice(0));
  }
  void TearDown() override {
    if (qg::cuda_available()) {
      EXPECT_EQ(cudaGetLastError(), cudaSuccess);
    }
  }
};

// Runs `g` on kernel k after the dispatcher's checks, then synchronises the
// device: false when k refuses g (*why says why) or fails.
inline bool run_cuda_kernel(const qg::detail::GemmKernel& k, const qg::GemmArgs& g, std::string* why) {
  // The tests only hand a kernel what the public API would accept.
  if (const qg::Status v = qg::detail::check_gemm_args(g); !v.ok()) {
    ADD_FAILURE() << "the test built arguments qg rejects: " << v.message();
    return false;
  }
  const qg::detail::DeviceScope scope(g.device);  // as the dispatcher opens it
  if (!gemm_kernel_admits(k, g, why)) return false;
  const qg::Status s = k.run(g, nullptr);
  EXPECT_TRUE(s.ok()) << k.name << ": " << s.message();
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  return s.ok();
}

}  // namespace qgtest
