// SPDX-License-Identifier: MIT
// tensor.cpp: dtype names and sizes, device names, view helpers.
#include "qg/tensor.h"

namespace qg {

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::f32: return "float32";
    case DType::f16: return "float16";
    case DType::bf16: return "bfloat16";
    case DType::u8: return "uint8";
    case DType::i8: return "int8";
    case DType::i32: return "int32";
    case DType::u16: return "uint16";
    case DType::f64: return "float64";
    case DType::other: return "an unsupported dtype";
  }
  return "an unsupported dtype";
}

int dtype_size(DType dtype) {
  switch (dtype) {
    case DType::f32: case DType::i32: return 4;
    case DType::f16: case DType::bf16: case DType::u16: return 2;
    case DType::u8: case DType::i8: return 1;
    case DType::f64: return 8;
    case DType::other: return 0;
  }
  return 0;
}

std::string device_name(Device device) {
  if (device.type == DeviceType::cpu) return "cpu";
  return "cuda:" + std::to_string(device.id);
}

namespace {
// Products of sizes wrap instead of overflowing (signed overflow is undefined
// behaviour): a view too large to address is rejected by validation, which
// checks its extent exactly; these helpers only must not crash on it first.
int64_t wrapping_mul(int64_t a, int64_t b) {
  return static_cast<int64_t>(static_cast<uint64_t>(a) * static_cast<uint64_t>(b));
}
}  // namespace

int64_t TensorView::numel() const {
  int64_t n = 1;
  for (int i = 0; i < ndim; ++i) n = wrapping_mul(n, shape[i]);
  return n;
}

bool TensorView::is_contiguous() const {
  // An empty array has no elements to lay out (NumPy >= 2 gives it zero strides).
  for (int i = 0; i < ndim; ++i)
    if (shape[i] == 0) return true;
  int64_t expected = 1;
  for (int i = ndim - 1; i >= 0; --i) {
    if (shape[i] != 1 && strides[i] != expected) return false;
    expected = wrapping_mul(expected, shape[i]);
  }
  return true;
}

TensorView make_view(void* data, DType dtype, Device device, std::initializer_list<int64_t> shape) {
  TensorView v;
  v.data = data;
  v.dtype = dtype;
  v.device = device;
  v.ndim = static_cast<int>(shape.size());
  int i = 0;
  for (int64_t s : shape) v.shape[i++] = s;
  int64_t stride = 1;
  for (int d = v.ndim - 1; d >= 0; --d) {
    v.strides[d] = stride;
    stride = wrapping_mul(stride, v.shape[d]);
  }
  return v;
}

}  // namespace qg
