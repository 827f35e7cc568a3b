// SPDX-License-Identifier: MIT
// runtime.cpp: build facts and device queries, forwarded to the backends.
#include "qg/runtime.h"

#include "backend.h"
#include "cpu/thread_pool.h"

#ifndef QG_VERSION_STRING
#define QG_VERSION_STRING "0.0.0"
#endif

namespace qg {

BuildInfo build_info() {
  BuildInfo info;
  info.version = QG_VERSION_STRING;
  info.cuda_built = detail::cuda::built();
  if (info.cuda_built) {
    info.cuda_runtime_version = detail::cuda::runtime_version();
    info.cuda_archs = detail::cuda::compiled_archs();
  }
  info.cpu_features = detail::cpu::features();
  info.cpu_threads = cpu_threads();
  return info;
}

std::vector<CudaDeviceInfo> cuda_devices(std::string* why) { return detail::cuda::devices(why); }

bool cuda_available(std::string* why) {
  std::string reason;
  const bool ok = !detail::cuda::devices(&reason).empty();
  if (why) *why = ok ? std::string() : reason;
  return ok;
}

void set_cpu_threads(int threads) { detail::cpu::ThreadPool::instance().set_threads(threads); }
int cpu_threads() { return detail::cpu::ThreadPool::instance().threads(); }

namespace {
Status need_cuda(const char* fn, Device device) {
  if (device.type != DeviceType::cuda)
    return Status(StatusCode::invalid_argument, std::string(fn) + ": expects a CUDA device, got " +
                                                    device_name(device));
  return {};
}
}  // namespace

Status device_alloc(Device device, size_t bytes, void** ptr) {
  if (auto s = need_cuda("qg.device_alloc", device); !s.ok()) return s;
  return detail::cuda::device_alloc(device.id, bytes, ptr);
}

void device_free(Device device, void* ptr) noexcept {
  if (device.type == DeviceType::cuda) detail::cuda::device_free(device.id, ptr);
}

Status internal_stream(Device device, Stream* stream) {
  if (auto s = need_cuda("qg.internal_stream", device); !s.ok()) return s;
  return detail::cuda::internal_stream(device.id, stream);
}

Status stream_synchronize(Device device, Stream stream) {
  if (device.type != DeviceType::cuda) return {};
  return detail::cuda::stream_synchronize(device.id, stream);
}

}  // namespace qg
