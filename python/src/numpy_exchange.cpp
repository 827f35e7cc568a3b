// SPDX-License-Identifier: MIT
// numpy_exchange.cpp: a DLPack exchange table (exchange.h) for numpy.ndarray,
// written by qg, so that NumPy calls take the single-crossing path that torch
// tensors take (fast_ops.cpp). NumPy publishes no such table (2.4 does not);
// without one a NumPy call crossed into C++ several times (a DLPack capsule
// per array, the result's spec, allocation in Python), about 18 us for a
// 64 x 64 x 64 GEMM on the CPU against 3.5 for the same call with torch.
//
// The table reads an ndarray through the buffer protocol (no capsule, no
// copy) and allocates results with numpy.empty. It declines what the generic
// path handles on its own terms (and with its own messages): arrays that are
// not C-contiguous (the generic path copies them), non-native byte order,
// and dtypes the core has no name for (bfloat16 of ml_dtypes, object,
// complex, ...). Only exact numpy.ndarray uses it (exchange.cpp looks it up by
// type), so subclasses such as masked arrays keep the generic path.
#include <Python.h>

#include <cstring>
#include <new>

#include "exchange.h"

namespace qg::python::dlx {

namespace {

PyTypeObject* g_ndarray = nullptr;
PyObject* g_empty = nullptr;  // numpy.empty
// numpy.dtype objects for the results the fast entries allocate, by the
// DLPack (code, bits) they are asked for.
struct ResultDtype {
  DataType dl;
  PyObject* dtype;
};
constexpr int kResultDtypes = 5;
ResultDtype g_dtypes[kResultDtypes];

constexpr int kMaxNdim = 64;  // NumPy's NPY_MAXDIMS
// The shape of the array read last: to_view copies it before the next read.
thread_local int64_t t_shape[kMaxNdim];

// The buffer's element type, or false for one the core has no name for.
// NumPy writes native types without a prefix ('f'), or with '<' / '=' when
// asked for a standard layout; '>' and '!' are the other byte order.
bool dtype_of_format(const char* format, Py_ssize_t itemsize, DataType* out) {
  if (format == nullptr) return false;
  char c = format[0];
  if (c == '@' || c == '=' || c == '<') {
#if PY_BIG_ENDIAN
    if (c == '<') return false;
#endif
    c = format[1];
    if (c == '\0' || format[2] != '\0') return false;
  } else if (format[1] != '\0') {
    return false;  // '>f', '!f', structured or sub-array formats
  }
  switch (c) {
    case 'B': *out = {1, 8, 1}; break;
    case 'b': *out = {0, 8, 1}; break;
    case 'H': *out = {1, 16, 1}; break;
    case 'i': case 'l': case 'q':
      if (itemsize != 4) return false;  // int64 and wider: the generic path names them
      *out = {0, 32, 1};
      break;
    case 'e': *out = {2, 16, 1}; break;
    case 'f': *out = {2, 32, 1}; break;
    case 'd': *out = {2, 64, 1}; break;
    default: return false;
  }
  return out->bits / 8 == itemsize;
}

int read_ndarray(void* py_object, Tensor* out) {
  Py_buffer b;
  if (PyObject_GetBuffer(static_cast<PyObject*>(py_object), &b, PyBUF_RECORDS_RO) != 0) return -1;
  DataType dt{};
  const bool ok = b.ndim <= kMaxNdim && dtype_of_format(b.format, b.itemsize, &dt) && PyBuffer_IsContiguous(&b, 'C');
  if (ok) {
    for (int i = 0; i < b.ndim; ++i) t_shape[i] = b.shape[i];
    *out = Tensor{b.buf, {kCPU, 0}, b.ndim, dt, t_shape, nullptr, 0};  // null strides: C order
  }
  PyBuffer_Release(&b);  // the array, which the caller holds, keeps the memory
  return ok ? 0 : -1;
}

// A result: the ndarray numpy.empty returned, owned by the managed tensor
// until it is handed to Python.
struct Managed {
  ManagedTensor mt;
  int64_t shape[kMaxNdim];
};

void delete_managed(ManagedTensor* self) {
  Py_XDECREF(static_cast<PyObject*>(self->manager_ctx));
  delete reinterpret_cast<Managed*>(self);
}

int allocate_ndarray(Tensor* proto, ManagedTensor** out, void* error_ctx,
                     void (*set_error)(void*, const char*, const char*)) {
  PyObject* dtype = nullptr;
  for (const ResultDtype& r : g_dtypes)
    if (r.dl.code == proto->dtype.code && r.dl.bits == proto->dtype.bits) dtype = r.dtype;
  if (dtype == nullptr || proto->ndim < 0 || proto->ndim > kMaxNdim || proto->device.device_type != kCPU) {
    set_error(error_ctx, "TypeError", "NumPy has no array of this dtype or device for the result");
    return -1;
  }
  PyObject* shape = PyTuple_New(proto->ndim);
  if (shape == nullptr) return -1;
  for (int i = 0; i < proto->ndim; ++i) {
    PyObject* extent = PyLong_FromLongLong(proto->shape[i]);
    if (extent == nullptr) {
      Py_DECREF(shape);
      return -1;
    }
    PyTuple_SET_ITEM(shape, i, extent);
  }
  PyObject* args[] = {shape, dtype};
  PyObject* array = PyObject_Vectorcall(g_empty, args, 2, nullptr);
  Py_DECREF(shape);
  Py_buffer b;
  if (array == nullptr || PyObject_GetBuffer(array, &b, PyBUF_RECORDS) != 0) {
    Py_XDECREF(array);
    return -1;  // NumPy's exception stays set: fast::allocate raises it as it is
  }
  Managed* m = new (std::nothrow) Managed;
  if (m == nullptr) {
    PyBuffer_Release(&b);
    Py_DECREF(array);
    set_error(error_ctx, "MemoryError", "out of host memory");
    return -1;
  }
  std::memcpy(m->shape, proto->shape, sizeof(int64_t) * proto->ndim);
  m->mt = ManagedTensor{{1, 0}, array, delete_managed, 0,
                        Tensor{b.buf, {kCPU, 0}, proto->ndim, proto->dtype, m->shape, nullptr, 0}};
  PyBuffer_Release(&b);  // the ndarray, held by the managed tensor, keeps the memory
  *out = &m->mt;
  return 0;
}

int to_ndarray(ManagedTensor* tensor, void** out_py_object) {
  PyObject* array = static_cast<PyObject*>(tensor->manager_ctx);
  Py_INCREF(array);
  tensor->deleter(tensor);
  *out_py_object = array;
  return 0;
}

// CPU arrays only: no current stream (fast::current_stream asks only for
// CUDA devices), and nothing reads a managed tensor from an ndarray.
const Api kNumpyApi{{{1, 0}, nullptr}, allocate_ndarray, nullptr, to_ndarray, read_ndarray, nullptr};

}  // namespace

const Api* numpy_api_for(PyTypeObject* type) { return type == g_ndarray && g_ndarray ? &kNumpyApi : nullptr; }

bool use_numpy(PyObject* ndarray_type, PyObject* empty, PyObject* dtypes) {
  // dtypes: numpy.dtype objects of uint8, int8, int32, float16, float32.
  static_assert(kResultDtypes == 5);
  if (!PyType_Check(ndarray_type) || !PyTuple_Check(dtypes) || PyTuple_GET_SIZE(dtypes) != kResultDtypes) return false;
  const DataType dl[kResultDtypes] = {{1, 8, 1}, {0, 8, 1}, {0, 32, 1}, {2, 16, 1}, {2, 32, 1}};
  for (int i = 0; i < kResultDtypes; ++i) {
    PyObject* d = PyTuple_GET_ITEM(dtypes, i);
    Py_INCREF(d);  // held for the life of the process, as the table is
    g_dtypes[i] = {dl[i], d};
  }
  Py_INCREF(empty);
  g_empty = empty;
  Py_INCREF(ndarray_type);
  g_ndarray = reinterpret_cast<PyTypeObject*>(ndarray_type);  // api_for caches no type without a table
  return true;
}

}  // namespace qg::python::dlx
