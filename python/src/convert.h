// SPDX-License-Identifier: MIT
// convert.h: arrays (nanobind DLPack arrays, or DLPack exchange tensors) ->
// qg views, and qg::Status -> the Python exception its code stands for.
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include "exchange.h"
#include "qg/qg.h"

namespace qg::python {

namespace nb = nanobind;
using namespace nanobind::literals;

using InArray = nb::ndarray<nb::ro>;   // read-only is fine for inputs (JAX, frozen NumPy)
using OutArray = nb::ndarray<>;        // writable; bound with .noconvert() so no temporary copy

// fn/arg name the function and argument in errors ("qg.quantize_q4_0", "x").
// bf16_from_u16: a uint16 array carrying bfloat16 bits (NumPy + ml_dtypes
// arrays cannot travel through DLPack as bfloat16).
TensorView to_view(const InArray& a, const char* fn, const char* arg, bool bf16_from_u16 = false);
TensorView to_view(const OutArray& a, const char* fn);
// Fails (returns false, *error set) for what a view cannot hold.
bool to_view(const dlx::Tensor& t, const char* fn, const char* arg, TensorView* out, Status* error);

DType dtype_of(uint8_t code, uint8_t bits, uint16_t lanes);

// Throws the Python exception for a failed status; returns on success.
void throw_if_error(const Status& status);

}  // namespace qg::python
