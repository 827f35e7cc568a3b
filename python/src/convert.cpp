// SPDX-License-Identifier: MIT
// convert.cpp: see convert.h.
#include "convert.h"

#include <Python.h>

namespace qg::python {

namespace {

DType dtype_of(nb::dlpack::dtype t) {
  using code = nb::dlpack::dtype_code;
  const auto c = static_cast<code>(t.code);
  if (t.lanes != 1) return DType::other;
  if (c == code::Float && t.bits == 32) return DType::f32;
  if (c == code::Float && t.bits == 16) return DType::f16;
  if (c == code::Float && t.bits == 64) return DType::f64;
  if (c == code::Bfloat && t.bits == 16) return DType::bf16;
  if (c == code::UInt && t.bits == 8) return DType::u8;
  if (c == code::UInt && t.bits == 16) return DType::u16;
  if (c == code::Int && t.bits == 8) return DType::i8;
  if (c == code::Int && t.bits == 32) return DType::i32;
  return DType::other;
}

Device device_of(int32_t type, int32_t id) {
  // Pinned host memory (cuda_host) is ordinary host memory to the CPU backend;
  // managed memory is used from the device it belongs to.
  if (type == nb::device::cuda::value || type == nb::device::cuda_managed::value) return Device::cuda(id);
  return Device::cpu();
}

template <class Array>
TensorView view_of(const Array& a) {
  if (a.ndim() > kMaxDims)
    throw nb::value_error(("qg: arrays of more than " + std::to_string(kMaxDims) +
                           " dimensions are not supported").c_str());
  const int32_t type = a.device_type();
  if (type != nb::device::cpu::value && type != nb::device::cuda::value &&
      type != nb::device::cuda_host::value && type != nb::device::cuda_managed::value)
    throw nb::value_error("qg: arrays must live on the CPU or a CUDA device");
  TensorView v;
  v.data = const_cast<void*>(static_cast<const void*>(a.data()));
  v.dtype = dtype_of(a.dtype());
  v.device = device_of(type, a.device_id());
  v.ndim = static_cast<int>(a.ndim());
  for (int i = 0; i < v.ndim; ++i) {
    v.shape[i] = static_cast<int64_t>(a.shape(i));
    v.strides[i] = static_cast<int64_t>(a.stride(i));
  }
  return v;
}

}  // namespace

TensorView to_view(const InArray& a, bool bf16_from_u16) {
  TensorView v = view_of(a);
  v.writable = false;
  if (bf16_from_u16 && v.dtype == DType::u16) v.dtype = DType::bf16;
  return v;
}

TensorView to_view(const OutArray& a) {
  TensorView v = view_of(a);
  v.writable = true;
  return v;
}

Device device_from(int kind, int id) { return kind == 1 ? Device::cuda(id) : Device::cpu(); }

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
