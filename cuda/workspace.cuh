// SPDX-License-Identifier: MIT
// cuda/workspace.cuh: device scratch memory for a kernel that needs its
// operands in another layout first, allocated in stream order.
//
// The memory comes from a pool qg owns on each device (not the device's
// default pool, whose settings belong to the application) and goes back to it
// in stream order when the Workspace is destroyed, after the launches that
// use it have been queued: the next call on the stream reuses the same bytes
// without a device synchronisation, and stream capture records the pair as a
// graph allocation (CUDA's stream-ordered allocator; no qg test captures it
// yet). The pool keeps up to kKeepBytes between calls so that a loop of calls
// does not map and unmap memory each time.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <mutex>

#include "device_limits.cuh"

namespace qg::detail::cuda {

class Workspace {
 public:
  static constexpr uint64_t kKeepBytes = uint64_t{256} << 20;

  // `bytes` on `device` (the current device), ordered on `stream`; ok() is
  // false when the pool or the memory is not available (the caller then
  // takes a path that needs none).
  Workspace(int device, size_t bytes, cudaStream_t stream) : stream_(stream) {
    cudaMemPool_t pool = pool_of(device);
    if (!pool || cudaMallocFromPoolAsync(&ptr_, bytes, pool, stream) != cudaSuccess) {
      cudaGetLastError();  // an allocation failure is not sticky: leave no error behind
      ptr_ = nullptr;
    }
  }
  ~Workspace() {
    if (ptr_) cudaFreeAsync(ptr_, stream_);
  }
  Workspace(const Workspace&) = delete;
  Workspace& operator=(const Workspace&) = delete;

  bool ok() const { return ptr_ != nullptr; }
  uint8_t* bytes() const { return static_cast<uint8_t*>(ptr_); }

 private:
  static cudaMemPool_t pool_of(int device) {
    static std::once_flag once[kMaxDevices];
    static cudaMemPool_t pools[kMaxDevices] = {};
    if (device < 0 || device >= kMaxDevices) return nullptr;
    std::call_once(once[device], [device] {
      cudaMemPoolProps props{};
      props.allocType = cudaMemAllocationTypePinned;
      props.location.type = cudaMemLocationTypeDevice;
      props.location.id = device;
      cudaMemPool_t pool = nullptr;
      if (cudaMemPoolCreate(&pool, &props) != cudaSuccess) {
        cudaGetLastError();
        return;
      }
      uint64_t keep = kKeepBytes;
      cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep);
      pools[device] = pool;
    });
    return pools[device];
  }

  void* ptr_ = nullptr;
  cudaStream_t stream_ = nullptr;
};

}  // namespace qg::detail::cuda
