// SPDX-License-Identifier: MIT
// cuda/runtime.cu: what the CUDA backend holds and sees (runtime version,
// compiled architectures, devices), plus device memory and qg's own streams.
// Everything here runs at Python import time too: no call may throw, abort or
// leave a CUDA error behind, and nothing creates a context it does not need.
#include <atomic>
#include <cstdlib>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "common.cuh"
#include "dispatch.h"

#ifndef QG_CUDA_ARCHS
#define QG_CUDA_ARCHS ""
#endif

namespace qg::detail::cuda {
namespace {

struct ArchEntry {
  std::string text;  // as CMake spelled it, without -real/-virtual: "90a"
  int number = 0;    // 90
  char suffix = 0;   // 'a' (arch-specific), 'f' (family) or 0
  bool sass = true;  // "-virtual" holds PTX only
  bool ptx = true;   // "-real" holds SASS only
};

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string cur;
  for (char ch : s) {
    if (ch == sep || ch == ',' || ch == ' ') {
      if (!cur.empty()) out.push_back(cur);
      cur.clear();
    } else {
      cur += ch;
    }
  }
  if (!cur.empty()) out.push_back(cur);
  return out;
}

bool parse_entry(const std::string& item, ArchEntry* e) {
  std::string s = item;
  e->sass = e->ptx = true;
  const auto dash = s.find('-');
  if (dash != std::string::npos) {
    const std::string kind = s.substr(dash + 1);
    s = s.substr(0, dash);
    if (kind == "real") e->ptx = false;
    else if (kind == "virtual") e->sass = false;
    else return false;
  }
  size_t i = 0;
  int number = 0;
  while (i < s.size() && s[i] >= '0' && s[i] <= '9') number = number * 10 + (s[i++] - '0');
  if (i == 0 || number <= 0) return false;
  e->suffix = 0;
  if (i < s.size()) {
    if (i + 1 != s.size() || (s[i] != 'a' && s[i] != 'f')) return false;
    e->suffix = s[i];
  }
  e->number = number;
  e->text = s;
  return true;
}

// CMAKE_CUDA_ARCHITECTURES as the build saw it ("80,90a": CMake passes the
// list comma-separated). Values CMake expands itself
// ("native", "all", "all-major") fall back to nvcc's __CUDA_ARCH_LIST__ (the
// virtual architectures compiled; it drops the 'a'/'f' suffix).
const std::vector<ArchEntry>& arch_entries() {
  static const std::vector<ArchEntry> entries = [] {
    std::vector<ArchEntry> out;
    bool ok = true;
    for (const std::string& item : split(QG_CUDA_ARCHS, ';')) {
      ArchEntry e;
      if (!parse_entry(item, &e)) {
        ok = false;
        break;
      }
      out.push_back(e);
    }
    if (ok && !out.empty()) return out;
    out.clear();
#ifdef __CUDA_ARCH_LIST__
    for (int v : {__CUDA_ARCH_LIST__}) {
      ArchEntry e;
      e.number = v / 10;
      e.text = std::to_string(e.number);
      out.push_back(e);
    }
#endif
    return out;
  }();
  return entries;
}

std::string archs_joined() {
  std::string s;
  for (const ArchEntry& e : arch_entries()) {
    if (!s.empty()) s += ";";
    s += e.text;
  }
  return s.empty() ? std::string("(none)") : s;
}

// SASS for sm_XY runs on X.Y..X.9; PTX for compute_XY is JIT-compiled for
// any later chip; arch-specific code (90a: wgmma, setmaxnreg) only on exactly
// that chip, and family code (100f) within its major version.
bool entry_runs_on(const ArchEntry& e, int cc) {
  if (e.suffix == 'a') return cc == e.number;
  if (e.suffix == 'f') return cc / 10 == e.number / 10 && cc >= e.number;
  if (e.sass && cc / 10 == e.number / 10 && cc >= e.number) return true;
  if (e.ptx && cc >= e.number) return true;
  return false;
}

bool cc_has_code(int cc) {
  for (const ArchEntry& e : arch_entries())
    if (entry_runs_on(e, cc)) return true;
  return false;
}

constexpr int kCachedDevices = 64;
std::atomic<int> g_cc_cache[kCachedDevices];  // 0: not looked up yet

// Compute capability without creating a context (attribute queries do not).
cudaError_t device_cc(int device, int* cc) {
  if (device >= 0 && device < kCachedDevices) {
    const int cached = g_cc_cache[device].load(std::memory_order_relaxed);
    if (cached > 0) {
      *cc = cached;
      return cudaSuccess;
    }
  }
  int major = 0, minor = 0;
  cudaError_t err = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
  if (err == cudaSuccess)
    err = cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device);
  if (err != cudaSuccess) {
    cudaGetLastError();
    return err;
  }
  *cc = major * 10 + minor;
  if (device >= 0 && device < kCachedDevices)
    g_cc_cache[device].store(*cc, std::memory_order_relaxed);
  return cudaSuccess;
}

std::string rebuild_hint(int cc) {
  const std::string arch = std::to_string(cc);
  return "rebuild with CUDAARCHS=\"" + arch + "\" pip install . (or cmake -DCMAKE_CUDA_ARCHITECTURES=" +
         arch + ")";
}

}  // namespace

bool device_has_code(int device, std::string* why) {
  int cc = 0;
  const cudaError_t err = device_cc(device, &cc);
  if (err != cudaSuccess) {
    if (why) *why = "cannot query cuda:" + std::to_string(device) + ": " + cuda_error_text(err);
    return false;
  }
  if (cc_has_code(cc)) return true;
  if (why)
    *why = "this build of qg holds code for CUDA architectures " + archs_joined() +
           ", none of which runs on cuda:" + std::to_string(device) + " (sm_" +
           std::to_string(cc) + "); " + rebuild_hint(cc);
  return false;
}

bool usable_device(int device, int* cc, std::string* why) {
  const cudaError_t err = device_cc(device, cc);
  if (err != cudaSuccess) {
    if (why) *why = "cannot query cuda:" + std::to_string(device) + ": " + cuda_error_text(err);
    return false;
  }
  return device_has_code(device, why);
}

bool built() { return true; }

std::string runtime_version() {
  int v = 0;
  if (cudaRuntimeGetVersion(&v) != cudaSuccess) {
    cudaGetLastError();
    return "unknown";
  }
  return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10);
}

std::vector<std::string> compiled_archs() {
  std::vector<std::string> out;
  for (const ArchEntry& e : arch_entries()) out.push_back(e.text);
  return out;
}

std::vector<CudaDeviceInfo> devices(std::string* why) {
  std::vector<CudaDeviceInfo> out;
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    cudaGetLastError();
    if (why) *why = cuda_error_text(err);
    return out;
  }
  if (count == 0) {
    if (why) {
      const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
      *why = std::string("no CUDA device is visible") +
             (visible ? std::string(" (CUDA_VISIBLE_DEVICES=\"") + visible + "\")" : std::string());
    }
    return out;
  }
  for (int d = 0; d < count; ++d) {
    cudaDeviceProp prop;
    err = cudaGetDeviceProperties(&prop, d);
    if (err != cudaSuccess) {
      cudaGetLastError();
      if (why && why->empty()) *why = "cuda:" + std::to_string(d) + ": " + cuda_error_text(err);
      continue;
    }
    CudaDeviceInfo info;
    info.id = d;
    info.name = prop.name;
    info.compute_capability = prop.major * 10 + prop.minor;
    info.multiprocessors = prop.multiProcessorCount;
    info.memory_bytes = static_cast<int64_t>(prop.totalGlobalMem);
    info.l2_bytes = static_cast<int64_t>(prop.l2CacheSize);
    info.has_compiled_code = cc_has_code(info.compute_capability);
    out.push_back(info);
  }
  if (out.empty() && why && why->empty()) *why = "no CUDA device could be queried";
  return out;
}

bool select_device(int device, int* previous, std::string* why) {
  cudaError_t err = cudaGetDevice(previous);
  if (err == cudaSuccess && *previous != device) err = cudaSetDevice(device);
  if (err == cudaSuccess) return true;
  cudaGetLastError();
  *previous = -1;
  if (why) *why = cuda_error_text(err);
  return false;
}

void restore_device(int previous) noexcept {
  if (previous < 0) return;
  int now = -1;
  if (cudaGetDevice(&now) != cudaSuccess || (now != previous && cudaSetDevice(previous) != cudaSuccess))
    cudaGetLastError();  // leave no error behind
}

Status device_alloc(int device, size_t bytes, void** ptr) {
  *ptr = nullptr;
  if (bytes == 0) return Status::success();
  const DeviceScope scope(Device::cuda(device));
  if (Status s = scope.status("qg.device_alloc"); !s.ok()) return s;
  const cudaError_t err = cudaMalloc(ptr, bytes);
  if (err == cudaSuccess) return Status::success();
  cudaGetLastError();
  *ptr = nullptr;
  const std::string msg = "qg.device_alloc (cuda): " + cuda_error_text(err) + " (" +
                          std::to_string(bytes) + " bytes on cuda:" + std::to_string(device) + ")";
  return Status(err == cudaErrorMemoryAllocation ? StatusCode::out_of_memory : StatusCode::cuda_error,
                msg);
}

void device_free(int device, void* ptr) noexcept {
  if (ptr == nullptr) return;
  const DeviceScope scope(Device::cuda(device));
  if (scope.status("qg.device_free").ok()) cudaFree(ptr);
  cudaGetLastError();
}

Status internal_stream(int device, Stream* stream) {
  // Streams live for the process: destroying them from a static destructor
  // would run after the driver has shut down.
  static std::mutex mutex;
  static std::unordered_map<int, cudaStream_t>* streams = new std::unordered_map<int, cudaStream_t>();
  std::lock_guard<std::mutex> lock(mutex);
  auto it = streams->find(device);
  if (it != streams->end()) {
    *stream = it->second;
    return Status::success();
  }
  const DeviceScope scope(Device::cuda(device));
  if (Status s = scope.status("qg.internal_stream"); !s.ok()) return s;
  cudaStream_t s = nullptr;
  // Non-blocking: qg's work must not serialise against the legacy default stream.
  const cudaError_t err = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  if (err != cudaSuccess) {
    cudaGetLastError();
    return Status(StatusCode::cuda_error, "qg.internal_stream (cuda): " + cuda_error_text(err) +
                                              " (cuda:" + std::to_string(device) + ")");
  }
  (*streams)[device] = s;
  *stream = s;
  return Status::success();
}

Status stream_synchronize(int device, Stream stream) {
  const DeviceScope scope(Device::cuda(device));
  if (Status s = scope.status("qg.stream_synchronize"); !s.ok()) return s;
  const cudaError_t err = cudaStreamSynchronize(to_cuda(stream));
  if (err == cudaSuccess) return Status::success();
  cudaGetLastError();
  return Status(StatusCode::cuda_error, "qg.stream_synchronize (cuda): " + cuda_error_text(err) +
                                            " (cuda:" + std::to_string(device) + ")");
}

}  // namespace qg::detail::cuda
