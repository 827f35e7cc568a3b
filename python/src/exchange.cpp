// SPDX-License-Identifier: MIT
// exchange.cpp: finding and caching a type's DLPack exchange table.
#include "exchange.h"

#include <mutex>

namespace qg::python::dlx {

namespace {
// A handful of tensor types meet qg in one process (torch.Tensor,
// nn.Parameter, numpy.ndarray, ...): a short list beats a map. Only types
// that have a table are cached, each with a reference that keeps it alive,
// so that a short-lived type (a class made at run time, the list or NumPy
// scalar type of a wrong argument) neither fills the list nor leaves an
// entry that a later type at its address would take for its own. Callers
// hold the GIL, which serialises the cache; the mutex only keeps a future
// free-threaded build from tearing an entry.
struct Entry {
  PyTypeObject* type;
  const Api* api;
};
constexpr int kSlots = 16;
Entry g_cache[kSlots];
int g_used = 0;
std::mutex g_mutex;

const Api* lookup(PyTypeObject* type) {
  PyObject* capsule = PyObject_GetAttrString(reinterpret_cast<PyObject*>(type), "__dlpack_c_exchange_api__");
  if (capsule == nullptr) {
    PyErr_Clear();
    return numpy_api_for(type);
  }
  const Api* api = nullptr;
  if (PyCapsule_CheckExact(capsule))
    api = static_cast<const Api*>(PyCapsule_GetPointer(capsule, "dlpack_exchange_api"));
  if (api == nullptr) PyErr_Clear();
  Py_DECREF(capsule);  // the table is static data of the producer's module
  if (api && api->header.version.major != 1) api = nullptr;
  return api;
}
}  // namespace

const Api* api_for(PyTypeObject* type) {
  for (int i = 0; i < g_used; ++i)
    if (g_cache[i].type == type) return g_cache[i].api;
  const Api* api = lookup(type);
  if (api == nullptr) return nullptr;
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_used < kSlots) {
    Py_INCREF(type);  // held for the life of the process, as its table is
    g_cache[g_used++] = {type, api};
  }
  return api;
}

}  // namespace qg::python::dlx
