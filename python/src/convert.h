// SPDX-License-Identifier: MIT
// convert.h: DLPack arrays (nanobind) -> qg views, and qg::Status -> the
// Python exception its code stands for.
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include "qg/qg.h"

namespace qg::python {

namespace nb = nanobind;
using namespace nanobind::literals;

using InArray = nb::ndarray<nb::ro>;   // read-only is fine for inputs (JAX, frozen NumPy)
using OutArray = nb::ndarray<>;        // writable; bound with .noconvert() so no temporary copy

// bf16_from_u16: a uint16 array carrying bfloat16 bits (NumPy + ml_dtypes
// arrays cannot travel through DLPack as bfloat16).
TensorView to_view(const InArray& a, bool bf16_from_u16 = false);
TensorView to_view(const OutArray& a);

// Throws the Python exception for a failed status; returns on success.
void throw_if_error(const Status& status);

Device device_from(int kind, int id);  // Python-side device ("cpu"=0, "cuda"=1)

}  // namespace qg::python
