// SPDX-License-Identifier: MIT
// runtime.cpp: bindings of build facts, device queries, and the device memory
// and stream helpers used for JAX, whose arrays qg must allocate itself.
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "convert.h"

namespace qg::python {

void bind_runtime(nb::module_& m) {
  m.def("build_info", [] {
    const BuildInfo b = build_info();
    nb::dict d;
    d["version"] = b.version;
    d["cuda_built"] = b.cuda_built;
    d["cuda_runtime_version"] = b.cuda_runtime_version;
    d["cuda_archs"] = b.cuda_archs;
    d["cpu_features"] = b.cpu_features;
    d["cpu_threads"] = b.cpu_threads;
    return d;
  });
  m.def("cuda_devices", [] {
    std::string why;
    nb::list out;
    for (const CudaDeviceInfo& i : cuda_devices(&why)) {
      nb::dict d;
      d["id"] = i.id;
      d["name"] = i.name;
      d["compute_capability"] = i.compute_capability;
      d["multiprocessors"] = i.multiprocessors;
      d["memory_bytes"] = i.memory_bytes;
      d["l2_bytes"] = i.l2_bytes;
      d["has_compiled_code"] = i.has_compiled_code;
      out.append(d);
    }
    return nb::make_tuple(out, why);
  });
  m.def("set_cpu_threads", &set_cpu_threads, "threads"_a);
  m.def("cpu_threads", &cpu_threads);

  // A CUDA buffer owned by the returned array; freed when the last consumer
  // (e.g. the JAX array made from it through DLPack) lets go.
  m.def(
      "empty_cuda",
      [](std::vector<size_t> shape, const std::string& dtype, int device) {
        nb::dlpack::dtype dt;
        size_t itemsize;
        if (dtype == "float32") {
          dt = nb::dtype<float>();
          itemsize = 4;
        } else if (dtype == "uint8") {
          dt = nb::dtype<uint8_t>();
          itemsize = 1;
        } else if (dtype == "float16") {
          dt = nb::dlpack::dtype{static_cast<uint8_t>(nb::dlpack::dtype_code::Float), 16, 1};
          itemsize = 2;
        } else if (dtype == "int8") {
          dt = nb::dtype<int8_t>();
          itemsize = 1;
        } else if (dtype == "int32") {
          dt = nb::dtype<int32_t>();
          itemsize = 4;
        } else {
          throw nb::value_error(("qg.empty_cuda: unsupported dtype " + dtype).c_str());
        }
        size_t bytes = itemsize;
        for (size_t s : shape) bytes *= s;
        void* ptr = nullptr;
        if (bytes > 0) throw_if_error(device_alloc(Device::cuda(device), bytes, &ptr));
        struct Buffer {
          void* ptr;
          int device;
        };
        nb::capsule owner(new Buffer{ptr, device}, [](void* p) noexcept {
          auto* b = static_cast<Buffer*>(p);
          device_free(Device::cuda(b->device), b->ptr);
          delete b;
        });
        return nb::ndarray<nb::array_api>(ptr, shape.size(), shape.data(), owner, nullptr, dt,
                                          nb::device::cuda::value, device);
      },
      "shape"_a, "dtype"_a, "device"_a);
  m.def(
      "internal_stream",
      [](int device) {
        Stream s = nullptr;
        throw_if_error(internal_stream(Device::cuda(device), &s));
        return reinterpret_cast<uintptr_t>(s);
      },
      "device"_a);
  m.def(
      "stream_synchronize",
      [](int device, uintptr_t stream) {
        Status s;
        {
          nb::gil_scoped_release release;
          s = stream_synchronize(Device::cuda(device), reinterpret_cast<Stream>(stream));
        }
        throw_if_error(s);
      },
      "device"_a, "stream"_a);
}

}  // namespace qg::python
