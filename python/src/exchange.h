// SPDX-License-Identifier: MIT
// exchange.h: the DLPack C exchange API (DLPack 1.2 and later). A framework
// publishes a table of C functions on its tensor type as the capsule
// `__dlpack_c_exchange_api__`; through it a consumer reads a tensor's
// metadata without building a DLPack capsule, asks for the framework's
// current stream, and allocates results that come back as the framework's
// own tensors (torch >= 2.10: its caching allocator, capture-safe).
// qg uses it for the single-crossing fast path (fast_ops.cpp). The structs
// below are DLPack's ABI, laid out as the DLPack header declares them.
#pragma once

#include <Python.h>

#include <cstdint>

namespace qg::python::dlx {

struct Version {
  uint32_t major, minor;
};
struct Device {
  int32_t device_type;  // 1 = CPU, 2 = CUDA, 3 = CUDA host (pinned), 13 = CUDA managed
  int32_t device_id;
};
struct DataType {
  uint8_t code;  // 0 int, 1 uint, 2 float, 4 bfloat
  uint8_t bits;
  uint16_t lanes;
};
struct Tensor {
  void* data;
  Device device;
  int32_t ndim;
  DataType dtype;
  int64_t* shape;
  int64_t* strides;
  uint64_t byte_offset;
};
struct ManagedTensor {
  Version version;
  void* manager_ctx;
  void (*deleter)(ManagedTensor* self);
  uint64_t flags;
  Tensor dl_tensor;
};
struct ApiHeader {
  Version version;
  ApiHeader* prev_api;
};
struct Api {
  ApiHeader header;
  int (*managed_tensor_allocator)(Tensor* prototype, ManagedTensor** out, void* error_ctx,
                                  void (*set_error)(void* error_ctx, const char* kind, const char* message));
  int (*managed_tensor_from_py_object_no_sync)(void* py_object, ManagedTensor** out);
  int (*managed_tensor_to_py_object_no_sync)(ManagedTensor* tensor, void** out_py_object);
  int (*dltensor_from_py_object_no_sync)(void* py_object, Tensor* out);
  int (*current_work_stream)(int32_t device_type, int32_t device_id, void** out_stream);
};

constexpr int32_t kCPU = 1, kCUDA = 2, kCUDAHost = 3, kCUDAManaged = 13;

// The table published by `type`, or qg's own for numpy.ndarray
// (numpy_exchange.cpp), or null (none, or a major version other than 1).
// Types with a table are looked up once and cached; never raises.
const Api* api_for(PyTypeObject* type);

// qg's table for numpy.ndarray once use_numpy has named the type; null for
// every other type. Results are allocated with `empty` (numpy.empty), of
// `dtypes` (a tuple of numpy.dtype: uint8, int8, int32, float16, float32).
// False: arguments of the wrong kind.
const Api* numpy_api_for(PyTypeObject* type);
bool use_numpy(PyObject* ndarray_type, PyObject* empty, PyObject* dtypes);

}  // namespace qg::python::dlx
