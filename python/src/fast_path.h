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
// *api (where api is not null) is the table it was read through.
bool read_input(nb::handle obj, const char* fn, const char* arg, const dlx::Api** api, TensorView* v, Status* error);

// read_input that raises what a view cannot hold with the core's message.
// False: not for this path; the generic path then reports it with qg's message.
bool import_input(nb::handle obj, const char* fn, const char* arg, const dlx::Api** api, TensorView* v);

// Whether obj is an array of the framework whose table is `api`: checked
// before an argument is read, so that another framework's array is never
// read (nor its view refused) by the wrong table.
bool of_framework(nb::handle obj, const dlx::Api* api);

// An optional input (None: absent, *present false). False: not for this path
// (another framework, or a view the core would refuse as not contiguous,
// which the generic path copies first).
bool import_optional(nb::handle obj, const char* fn, const char* arg, const dlx::Api* api, TensorView* v,
                     bool* present);

// The plain case of an entry that declines rather than raises (the integer
// family's, linear_q4_0's): a C-contiguous tensor of `api` (any exchange
// table when *api is null; *api then names it). Everything else, including
// what a view cannot hold (whose message the Python path's earlier checks may
// precede), is not plain, and the Python path takes the call.
bool plain_tensor(nb::handle obj, const char* fn, const char* arg, const dlx::Api** api, TensorView* v);

// An optional plain tensor (None: absent, *present false).
bool plain_optional(nb::handle obj, const char* fn, const char* arg, const dlx::Api* api, TensorView* v,
                    bool* present);

// Float activations of a GEMM whose result is in their dtype: their format
// and the result dtype's id (set_epilogue's). False: not a float dtype.
bool float_format(DType d, Format* fmt, int* dtype);

// Allocates the result with the caller's framework; *out views it.
nb::object allocate(const dlx::Api* api, const char* fn, const ResultSpec& spec, Device device, TensorView* out);

// A [rows, cols] result's shape as [*lead, cols], lead the leading dims of
// `rows_of` (the input whose rows are the result's rows): the Python
// functions' reshape, here without a copy or a view of one.
ResultSpec rows_shape(const ResultSpec& spec, const TensorView& rows_of);

// The framework's current stream on device (null on the CPU).
Stream current_stream(const dlx::Api* api, Device device);

// A dynamic or static integer quantization (v fully set): the codes, and for
// dynamic scales the scales (and, asymmetric, the zero points), allocated
// with the caller's framework -> (codes, scales or None, zero points or None).
nb::tuple quantize_int(const dlx::Api* api, const char* fn, const QuantizeViews& v);

// The fields a one-call linear layer (LinearQ4_0Args, LinearInt8Args) takes
// from plain tensors alike: x [..., K] C-contiguous, y [N, M] of `y_dtype`
// (spec: the GEMM's result spec), the bias, the relu, the device, fn.
template <class Args>
void fill_linear(Args* a, const TensorView& xv, const ResultSpec& spec, const TensorView& y, DType y_dtype,
                 const TensorView* bias, bool relu, const char* fn) {
  a->x = xv.data;
  a->x_dtype = xv.dtype;
  a->n = spec.shape[0];
  a->k = xv.shape[xv.ndim - 1];
  a->x_row_stride = a->k;
  a->m = spec.shape[1];
  a->y = y.data;
  a->y_dtype = y_dtype;
  a->ldy = a->m;
  if (bias) {
    a->bias = bias->data;
    a->bias_dtype = bias->dtype;
  }
  a->activation = relu ? Activation::relu : Activation::none;
  a->device = xv.device;
  a->fn = fn;
}

}  // namespace qg::python::fast
