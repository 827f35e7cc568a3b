// SPDX-License-Identifier: MIT
// fast_path.h: the pieces of the single-crossing path (fast_ops.cpp) that the
// integer family's entries (fast_int_ops.cpp) share: reading tensors through
// their type's DLPack exchange table, allocating results with the caller's
// framework, and finding its current stream.
#pragma once

#include "bind_util.h"

namespace qg::python::fast {

// Reads an input's metadata through its type's exchange table. False: not
// for this path, either because the producer cannot export it (no table, or
// it declined, e.g. a sparse tensor; *error stays ok) or because a view
// cannot hold it (too many dimensions, an unknown device; *error says so).
bool read_input(nb::handle obj, const char* fn, const char* arg, const dlx::Api** api, TensorView* v, Status* error);

// read_input that raises what a view cannot hold with the core's message.
// False: not for this path; the generic path then reports it with qg's message.
bool import_input(nb::handle obj, const char* fn, const char* arg, const dlx::Api** api, TensorView* v);

// An optional input (None: absent, *present false). False: not for this path
// (another framework, or a view the core would refuse as not contiguous,
// which the generic path copies first).
bool import_optional(nb::handle obj, const char* fn, const char* arg, const dlx::Api* api, TensorView* v,
                     bool* present);

// Allocates the result with the caller's framework; *out views it.
nb::object allocate(const dlx::Api* api, const char* fn, const ResultSpec& spec, Device device, TensorView* out);

// The framework's current stream on device (null on the CPU).
Stream current_stream(const dlx::Api* api, Device device);

// A dynamic or static integer quantization (v fully set): the codes, and for
// dynamic scales the scales (and, asymmetric, the zero points), allocated
// with the caller's framework -> (codes, scales or None, zero points or None).
nb::tuple quantize_int(const dlx::Api* api, const char* fn, const QuantizeViews& v);

}  // namespace qg::python::fast
