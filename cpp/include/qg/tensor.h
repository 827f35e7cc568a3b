// SPDX-License-Identifier: MIT
// qg/tensor.h: a framework-free view of an array (pointer, dtype, shape,
// strides, device). The bindings fill it from DLPack; C++ callers from anything.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>

namespace qg {

enum class DType : uint8_t { f32, f16, bf16, u8, i8, i32, u16, f64, other };

const char* dtype_name(DType dtype);
int dtype_size(DType dtype);

enum class DeviceType : uint8_t { cpu, cuda };

struct Device {
  DeviceType type = DeviceType::cpu;
  int id = 0;

  static Device cpu() { return {DeviceType::cpu, 0}; }
  static Device cuda(int id = 0) { return {DeviceType::cuda, id}; }
  bool operator==(const Device& o) const { return type == o.type && id == o.id; }
  bool operator!=(const Device& o) const { return !(*this == o); }
};

std::string device_name(Device device);  // "cpu", "cuda:1"

// Opaque stream handle: a cudaStream_t converts to it implicitly; nullptr is
// CUDA's legacy default stream. Ignored on the CPU.
using Stream = void*;

constexpr int kMaxDims = 8;

struct TensorView {
  void* data = nullptr;
  DType dtype = DType::f32;
  Device device;
  int ndim = 0;
  int64_t shape[kMaxDims] = {};
  int64_t strides[kMaxDims] = {};  // in elements, as DLPack
  bool writable = true;

  int64_t numel() const;
  bool is_contiguous() const;      // C order (size-1 dims' strides ignored)
};

// Builds a C-contiguous view.
TensorView make_view(void* data, DType dtype, Device device, std::initializer_list<int64_t> shape);

}  // namespace qg
