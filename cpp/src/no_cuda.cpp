// SPDX-License-Identifier: MIT
// no_cuda.cpp: the CUDA backend of a build without nvcc. Everything answers
// "not built" with the way to get it, so call sites need no #ifdefs.
#include "backend.h"

namespace qg::detail::cuda {

namespace {
const char* kNotBuilt =
    "qg was built without CUDA (reinstall with nvcc on PATH, e.g. QG_CUDA=ON pip install .)";
Status not_built(const char* fn) {
  return Status(StatusCode::backend_unavailable, std::string(fn) + ": " + kNotBuilt);
}
}  // namespace

bool built() { return false; }
std::string runtime_version() { return {}; }
std::vector<std::string> compiled_archs() { return {}; }
std::vector<CudaDeviceInfo> devices(std::string* why) {
  if (why) *why = kNotBuilt;
  return {};
}
const Registry& registry() {
  static const Registry none;
  return none;
}
bool usable_device(int, int*, std::string* why) {
  if (why) *why = kNotBuilt;
  return false;
}
bool select_device(int, int* previous, std::string* why) {
  *previous = -1;
  if (why) *why = kNotBuilt;
  return false;
}
void restore_device(int) noexcept {}
Status device_alloc(int, size_t, void**) { return not_built("qg.device_alloc"); }
void device_free(int, void*) noexcept {}
Status internal_stream(int, Stream*) { return not_built("qg.internal_stream"); }
Status stream_synchronize(int, Stream) { return not_built("qg.stream_synchronize"); }

}  // namespace qg::detail::cuda
