// SPDX-License-Identifier: MIT
// convert.cpp: see convert.h.
#include "convert.h"

#include <Python.h>

namespace qg::python {

DType dtype_of(uint8_t code, uint8_t bits, uint16_t lanes) {
  if (lanes != 1) return DType::other;
  switch (code) {
    case 0: return bits == 8 ? DType::i8 : bits == 32 ? DType::i32 : DType::other;        // int
    case 1: return bits == 8 ? DType::u8 : bits == 16 ? DType::u16 : DType::other;        // uint
    case 2: return bits == 32 ? DType::f32 : bits == 16 ? DType::f16 : bits == 64 ? DType::f64 : DType::other;
    case 4: return bits == 16 ? DType::bf16 : DType::other;                               // bfloat
    default: return DType::other;
  }
}

namespace {

// Pinned host memory (cuda_host) is ordinary host memory to the CPU backend;
// managed memory is used from the device it belongs to.
bool device_of(int32_t type, int32_t id, Device* out) {
  if (type == dlx::kCUDA || type == dlx::kCUDAManaged) *out = Device::cuda(id);
  else if (type == dlx::kCPU || type == dlx::kCUDAHost) *out = Device::cpu();
  else return false;
  return true;
}

Status too_many_dims(const char* fn, const char* arg, int64_t ndim) {
  return Status(StatusCode::invalid_argument,
                std::string(fn) + ": " + arg + " has " + std::to_string(ndim) + " dimensions; qg takes at most " +
                    std::to_string(kMaxDims) + " (reshape it to fewer)");
}

Status wrong_device(const char* fn, const char* arg) {
  return Status(StatusCode::invalid_argument,
                std::string(fn) + ": " + arg + " must live on the CPU or a CUDA device; move it there");
}

template <class Array>
TensorView view_of(const Array& a, const char* fn, const char* arg) {
  if (a.ndim() > static_cast<size_t>(kMaxDims)) throw_if_error(too_many_dims(fn, arg, a.ndim()));
  TensorView v;
  if (!device_of(a.device_type(), a.device_id(), &v.device)) throw_if_error(wrong_device(fn, arg));
  v.data = const_cast<void*>(static_cast<const void*>(a.data()));
  const auto t = a.dtype();
  v.dtype = dtype_of(t.code, t.bits, t.lanes);
  v.ndim = static_cast<int>(a.ndim());
  for (int i = 0; i < v.ndim; ++i) {
    v.shape[i] = static_cast<int64_t>(a.shape(i));
    v.strides[i] = static_cast<int64_t>(a.stride(i));
  }
  return v;
}

}  // namespace

TensorView to_view(const InArray& a, const char* fn, const char* arg, bool bf16_from_u16) {
  TensorView v = view_of(a, fn, arg);
  v.writable = false;
  if (bf16_from_u16 && v.dtype == DType::u16) v.dtype = DType::bf16;
  return v;
}

TensorView to_view(const OutArray& a, const char* fn) {
  TensorView v = view_of(a, fn, "out");
  v.writable = true;
  return v;
}

bool to_view(const dlx::Tensor& t, const char* fn, const char* arg, TensorView* v, Status* error) {
  if (t.ndim < 0 || t.ndim > kMaxDims) {
    *error = too_many_dims(fn, arg, t.ndim);
    return false;
  }
  if (!device_of(t.device.device_type, t.device.device_id, &v->device)) {
    *error = wrong_device(fn, arg);
    return false;
  }
  v->data = static_cast<char*>(t.data) + t.byte_offset;
  v->dtype = dtype_of(t.dtype.code, t.dtype.bits, t.dtype.lanes);
  v->ndim = t.ndim;
  int64_t stride = 1;
  for (int i = t.ndim - 1; i >= 0; --i) {  // strides may be null before DLPack 1.2: C order
    v->shape[i] = t.shape[i];
    v->strides[i] = t.strides ? t.strides[i] : stride;
    stride *= t.shape[i];
  }
  v->writable = true;
  return true;
}

void throw_if_error(const Status& s) {
  if (s.ok()) return;
  PyObject* type = PyExc_RuntimeError;
  switch (s.code()) {
    case StatusCode::type_error: type = PyExc_TypeError; break;
    case StatusCode::invalid_argument: type = PyExc_ValueError; break;
    case StatusCode::overflow: type = PyExc_OverflowError; break;
    case StatusCode::unsupported: type = PyExc_NotImplementedError; break;
    case StatusCode::out_of_memory: type = PyExc_MemoryError; break;
    default: break;
  }
  PyErr_SetString(type, s.message().c_str());
  throw nb::python_error();
}

}  // namespace qg::python
