# SPDX-License-Identifier: MIT
"""qg's public functions. Each is a description (an _Op: which core op, which
formats, its name and argument names) over one path:

* fast path (torch tensors, eager): one call into C++ that reads the tensors
  through torch's DLPack C exchange API, validates, allocates the result with
  torch, and launches on torch's current stream;
* generic path (NumPy, CuPy, JAX, and torch with out=/stream= or special
  tensors): find the framework and device, ask the core for the result's
  shape, allocate it with the caller's framework, run on the caller's stream.

Under torch.compile / torch.export / torch.jit.trace the torch operators
registered in qg.torch_ops are called instead, so the graph records qg's op.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from . import _frameworks as fw
from . import _qg
from ._args import int_arg

# Format ids: the C++ enum's values (qg/formats.h).
Q4_0, Q8_0, Q8_1 = 0, 1, 2
I8, I4, I4X8 = 3, 4, 5  # integer codes, scales kept outside
F16, BF16, F32 = 6, 7, 8  # plain floats (activations of weight-only GEMMs)
Q4_0X16 = 9  # Q4_0 rows in groups of 16 (qg.repack; the CPU kernels' layout)
FORMATS = {"q4_0": Q4_0, "q8_0": Q8_0, "q8_1": Q8_1}
_REPACK_FORMATS = {"q4_0": Q4_0, "q4_0x16": Q4_0X16}
INT_FORMATS = {"i8": I8, "i4": I4, "i4x8": I4X8}
FLOAT_FORMATS = {"float16": F16, "bfloat16": BF16, "float32": F32}
# Granularity ids: the C++ enum's values (qg/ops.h).
GRANULARITY = {"tensor": 1, "row": 2, "group": 3}
_CONVENTIONS = {"reference": 0, "ggml_cuda": 1}


@dataclass(frozen=True)
class _Op:
    kind: str  # "quantize", "dequantize", "gemm"
    fn: str  # "qg.quantize_q4_0"
    fmt: int = 0  # quantize / dequantize
    a_fmt: int = 0  # gemm
    b_fmt: int = 0
    a_name: str = "a"
    b_name: str = "b"


def _size(value, name: str, fn: str) -> int:
    """M, N, K arguments: None -> -1 (inferred); else a non-negative int."""
    if value is None:
        return -1
    v = int_arg(value, name, fn, "an int or None")
    if v < 0:
        raise ValueError(f"{fn}: {name}={v} is negative; pass a size >= 0, or None to infer it")
    if v >= 2**62:
        raise ValueError(f"{fn}: {name}={v} is too large; sizes must be below 2**62")
    return v


def _convention(convention, fn: str) -> int:
    if not isinstance(convention, str):
        raise TypeError(
            f"{fn}: convention must be a str, 'reference' or 'ggml_cuda', "
            f"got {type(convention).__name__} {convention!r}"
        )
    c = _CONVENTIONS.get(convention)
    if c is None:
        raise ValueError(f"{fn}: convention must be 'reference' or 'ggml_cuda', got {convention!r}")
    return c


_FLOAT_IN = "float32, float16 or bfloat16"
_FORMAT_NAMES = {**{v: k for k, v in FORMATS.items()}, Q4_0X16: "q4_0x16"}
_FLAT_EXPECT = {
    I8: "int8 (i8 codes)",
    I4: "uint8 (i4 codes, two per byte)",
    I4X8: "int32 (i4x8 words, eight codes each)",
    F16: "float16",
    BF16: "bfloat16",
    F32: "float32",
}


def _packed(fmt: int) -> str:
    """What an operand of this format must be, for messages."""
    flat = _FLAT_EXPECT.get(fmt)
    return flat if flat is not None else f"uint8 (packed {_FORMAT_NAMES[fmt]} blocks)"


def _core(fn: str, call, *args, names=()):
    """Calls a binding; a nanobind argument-conversion error (an array DLPack
    could not carry past the checks above) comes back with qg's name on it."""
    try:
        return call(*args)
    except TypeError as e:
        msg = str(e)
        if msg.startswith("qg") or "incompatible function arguments" not in msg:
            raise
        arrays = ", ".join(names) or "an argument"
        raise TypeError(
            f"{fn}: {arrays} could not be passed to qg through DLPack (an unsupported dtype, layout or array type); "
            "pass a dense, native-byte-order array of a dtype qg takes"
        ) from None


# ----------------------------------------------------------------- generic path
# `route`: torch tensors go through qg.torch_ops first, which sends the call
# to a registered torch operator while torch traces (and checks autograd);
# the operators' implementations call back with route=False.
def _generic_quantize(op: _Op, x, out, stream, conv: int, route: bool = True):
    w = fw.where(x, op.fn, "x")
    if w.kind == "torch" and route:
        from . import torch_ops

        r = torch_ops.route_quantize(op, x, conv, out, stream)
        if r is not None:
            return r
    xin, bf16 = fw.prepare_input(x, w, op.fn, "x", _FLOAT_IN)
    with fw.device_context(w):
        shape, dtype = _core(op.fn, _qg.quantize_spec, op.fmt, xin, bf16, op.fn, names=("x",))
        result = fw.check_out(out, w, op.fn, dtype) if out is not None else fw.empty(w, shape, dtype)
        s = fw.stream_of(w, stream, op.fn)
        _core(op.fn, _qg.quantize, op.fmt, xin, result, s, conv, bf16, op.fn, names=("x", "out"))
    return fw.finish(result, w, s)


def _generic_dequantize(op: _Op, xq, k: int, out, stream, route: bool = True):
    w = fw.where(xq, op.fn, "xq")
    if w.kind == "torch" and route:
        from . import torch_ops

        r = torch_ops.route_dequantize(op, xq, k, out, stream)
        if r is not None:
            return r
    xin, _ = fw.prepare_input(xq, w, op.fn, "xq", _packed(op.fmt))
    with fw.device_context(w):
        shape, dtype = _core(op.fn, _qg.dequantize_spec, op.fmt, xin, k, op.fn, names=("xq",))
        result = fw.check_out(out, w, op.fn, dtype) if out is not None else fw.empty(w, shape, dtype)
        s = fw.stream_of(w, stream, op.fn)
        _core(op.fn, _qg.dequantize, op.fmt, xin, k, result, s, op.fn, names=("xq", "out"))
    return fw.finish(result, w, s)


_OUT_DTYPES = {"float32": 0, "float16": 1, "bfloat16": 2, "int32": 3}


class _Epilogue(NamedTuple):
    """What a GEMM call adds to its two operands (ops.h's GemmViews): the
    epilogue (bias, scales, zero points, alpha, relu, result dtype, a
    transposed result) and the operands' extras (group-wise scales of a, and
    operands stored K-major). A NamedTuple: cheap to build on every call."""

    bias: object = None  # [M] array of the operands' framework, or None
    out_dtype: str = "float32"  # or float16, bfloat16, int32 (integer operands)
    transpose: bool = False  # the result is [N, M] (x @ W^T) instead of [M, N]
    row_scale: object = None  # float32 [M] or [1]
    col_scale: object = None  # float32 [N] or [1]
    row_zero_point: object = None  # int32 [M] or [1] (integer operands)
    col_zero_point: object = None  # int32 [N] or [1]
    alpha: float = 1.0
    relu: bool = False
    a_scales: object = None  # group-wise scales of a: [M, K / group_size] (weight-only)
    a_zero_points: object = None  # int8 / int32, like a_scales
    group_size: int = 0
    a_k_major: bool = False  # a is a 2-D [K-storage, M] array (seed 001's B [K, N])
    b_k_major: bool = False

    def arrays(self):
        """(argument name, array) of every array the call carries besides its operands."""
        return [(name, self[i]) for i, name in _EPILOGUE_ARRAYS if self[i] is not None]


# _Epilogue's array fields as (index, argument name): indexing beats attribute
# lookups in arrays(), which runs on every GEMM call.
_EPILOGUE_ARRAYS = tuple(
    (_Epilogue._fields.index(field), name)
    for field, name in (
        ("bias", "bias"), ("row_scale", "row_scale"), ("col_scale", "col_scale"),
        ("row_zero_point", "row_zero_point"), ("col_zero_point", "col_zero_point"), ("a_scales", "scales"),
        ("a_zero_points", "zero_points"),
    )
)
_PLAIN = _Epilogue()
_EXTRA_EXPECT = {
    "bias": _FLOAT_IN, "row_scale": "float32", "col_scale": "float32", "row_zero_point": "int32",
    "col_zero_point": "int32", "scales": _FLOAT_IN, "zero_points": "int8 or int32",
}


def _gemm_inputs(op: _Op, a, b, epi: _Epilogue):
    """The generic path's view of a GEMM call: (where, a, b, the binding's
    arguments after the names), arrays made ready for DLPack."""
    w = fw.where(a, op.fn, op.a_name)
    wb = fw.where(b, op.fn, op.b_name)
    fw.check_same_kind(w, wb, op.fn, op.a_name, op.b_name)
    extras = epi.arrays()
    for name, value in extras:
        fw.check_same_kind(w, fw.where(value, op.fn, name), op.fn, op.a_name, name)
    return w, wb, extras


def _gemm_binding_args(op: _Op, a, b, w, wb, extras, epi: _Epilogue):
    ain, _ = fw.prepare_input(a, w, op.fn, op.a_name, _packed(op.a_fmt))
    bin_, _ = fw.prepare_input(b, wb, op.fn, op.b_name, _packed(op.b_fmt))
    views = {name: fw.prepare_input(value, w, op.fn, name, _EXTRA_EXPECT[name])[0] for name, value in extras}
    get = views.get
    args = (
        get("bias"), _OUT_DTYPES[epi.out_dtype], epi.transpose, get("row_scale"), get("col_scale"),
        get("row_zero_point"), get("col_zero_point"), get("scales"), get("zero_points"), epi.group_size,
        epi.alpha, 1 if epi.relu else 0, epi.a_k_major, epi.b_k_major,
    )
    return ain, bin_, args


def _generic_gemm(op: _Op, a, b, m: int, n: int, k: int, out, stream, route: bool = True, epi: _Epilogue = _PLAIN):
    w, wb, extras = _gemm_inputs(op, a, b, epi)
    if w.kind == "torch" and route:
        from . import torch_ops

        r = torch_ops.route_gemm(op, a, b, m, n, k, out, stream, epi)
        if r is not None:
            return r
    ain, bin_, args = _gemm_binding_args(op, a, b, w, wb, extras, epi)
    names = (op.a_name, op.b_name)
    with fw.device_context(w):
        shape, dtype = _core(
            op.fn, _qg.gemm_spec, op.a_fmt, op.b_fmt, ain, bin_, m, n, k, op.fn, op.a_name, op.b_name, *args,
            names=names,
        )
        result = fw.check_out(out, w, op.fn, dtype) if out is not None else fw.empty(w, shape, dtype)
        s = fw.stream_of(w, stream, op.fn)
        _core(op.fn, _qg.gemm, op.a_fmt, op.b_fmt, ain, bin_, result, m, n, k, s, op.fn, op.a_name, op.b_name,
              *args, names=(*names, "out"))
    return fw.finish(result, w, s)


def _explain_gemm(op: _Op, a, b, k, epi: _Epilogue):
    """The kernel walk of a GEMM call described as _run_gemm's arguments (k: None to infer)."""
    k = _size(k, "K", op.fn)
    w, wb, extras = _gemm_inputs(op, a, b, epi)
    ain, bin_, args = _gemm_binding_args(op, a, b, w, wb, extras, epi)
    with fw.device_context(w):
        return _core(op.fn, _qg.explain_gemm, op.a_fmt, op.b_fmt, ain, bin_, op.fn, op.a_name, op.b_name, -1, -1, k,
                     *args, names=(op.a_name, op.b_name))


def _generic_quantize_int(op: _Op, x, gran: str, group_size: int, asym: bool, scales=None, zero_points=None,
                          route: bool = True):
    """Integer formats: -> (codes, scales or None, zero points or None); given
    (static) scales / zero points are read, dynamic ones are written."""
    w = fw.where(x, op.fn, "x")
    for name, value in (("scale", scales), ("zero_point", zero_points)):
        if value is not None:
            fw.check_same_kind(w, fw.where(value, op.fn, name), op.fn, "x", name)
    if w.kind == "torch" and route:
        from . import torch_ops

        r = torch_ops.route_quantize_int(op, x, gran, group_size, asym, scales, zero_points)
        if r is not None:
            return r
    xin, bf16 = fw.prepare_input(x, w, op.fn, "x", _FLOAT_IN)
    sin = None if scales is None else fw.prepare_input(scales, w, op.fn, "scale", "float32")[0]
    zin = None if zero_points is None else fw.prepare_input(zero_points, w, op.fn, "zero_point", "int32")[0]
    g = GRANULARITY[gran]
    with fw.device_context(w):
        (cshape, cdtype), (sshape, _) = _core(
            op.fn, _qg.quantize_int_spec, op.fmt, xin, bf16, op.fn, g, group_size, names=("x",)
        )
        codes = fw.empty(w, cshape, cdtype)
        sc = zp = None
        if scales is None:
            sc = fw.empty(w, sshape, "float32")
            if asym:
                zp = fw.empty(w, sshape, "int32")
        s = fw.stream_of(w, None, op.fn)
        _core(op.fn, _qg.quantize_int, op.fmt, xin, bf16, codes, sc, zp, sin, zin, g, group_size, asym, s, op.fn,
              names=("x", "scale", "zero_point"))
    return (
        fw.finish(codes, w, s),
        None if sc is None else fw.finish(sc, w, s),
        None if zp is None else fw.finish(zp, w, s),
    )


def _generic_dequantize_int(op: _Op, xq, k: int, gran: str, group_size: int, scales, zero_points=None,
                            route: bool = True):
    w = fw.where(xq, op.fn, "xq")
    for name, value in (("scale", scales), ("zero_point", zero_points)):
        if value is not None:
            fw.check_same_kind(w, fw.where(value, op.fn, name), op.fn, "q", name)
    if w.kind == "torch" and route:
        from . import torch_ops

        r = torch_ops.route_dequantize_int(op, xq, k, gran, group_size, scales, zero_points)
        if r is not None:
            return r
    xin, _ = fw.prepare_input(xq, w, op.fn, "q", _packed(op.fmt))
    sin = fw.prepare_input(scales, w, op.fn, "scale", "float32")[0]
    zin = None if zero_points is None else fw.prepare_input(zero_points, w, op.fn, "zero_point", "int32")[0]
    g = GRANULARITY[gran]
    with fw.device_context(w):
        shape, dtype = _core(op.fn, _qg.dequantize_spec, op.fmt, xin, k, op.fn, names=("q",))
        result = fw.empty(w, shape, dtype)
        s = fw.stream_of(w, None, op.fn)
        _core(op.fn, _qg.dequantize, op.fmt, xin, k, result, s, op.fn, g, group_size, sin, zin,
              names=("q", "out", "scale", "zero_point"))
    return fw.finish(result, w, s)


# ------------------------------------------------------------------- dispatch
# Types whose eager calls may take the fast path, each mapped to what admits
# a call there (an object with fast_ok, out_ok, epilogue_ok, extras_ok and
# plain_ok, and bf16_results): qg.torch_ops for torch's tensor types (added
# when torch first shows up), _NumpyAdmission for numpy.ndarray (qg's own
# exchange table, numpy_exchange.cpp). Everything else, and every call with
# stream=, takes the generic path; so does a call an admission refuses
# (torch while it traces, tensors the fast path cannot read as they are:
# negated, non-contiguous, fake, ...), and one the C++ entry declines.
_FAST_TYPES: dict = {}


class _NumpyAdmission:
    """numpy.ndarray on the fast path. The C++ entries decline what the
    generic path must handle (arrays that are not C-contiguous, non-native
    byte order, dtypes the core has no name for, a mix of frameworks), so
    this admits everything they can see through, except what they cannot:
    a read-only out= (the generic path says why it is refused) and
    bfloat16 results (NumPy has none; the generic path says so)."""

    bf16_results = False

    @staticmethod
    def fast_ok(op, x, out, y=None) -> bool:
        return True

    @staticmethod
    def out_ok(out) -> bool:
        return out.flags.writeable

    @staticmethod
    def epilogue_ok(op, epi) -> bool:
        return epi.out_dtype != "bfloat16"

    @staticmethod
    def extras_ok(op, tensors) -> bool:
        return True

    @staticmethod
    def plain_ok(*args) -> bool:
        return True


if _qg.use_numpy_exchange(np.ndarray, np.empty,
                          tuple(np.dtype(t) for t in ("uint8", "int8", "int32", "float16", "float32"))):
    _FAST_TYPES[np.ndarray] = _NumpyAdmission


def _admits_out(adm, out) -> bool:
    """out= may ride the fast path: None, or an array of the inputs' admission that it admits."""
    return out is None or (_FAST_TYPES.get(type(out)) is adm and adm.out_ok(out))


def _run_quantize(op: _Op, x, out, stream, convention="reference"):
    conv = _convention(convention, op.fn)
    adm = _FAST_TYPES.get(type(x))
    if stream is None and adm is not None and _admits_out(adm, out) and adm.fast_ok(op, x, out):
        r = _qg.fast_quantize(x, op.fmt, conv, op.fn, out)
        if r is not None:
            return r
    return _generic_quantize(op, x, out, stream, conv)


def _run_dequantize(op: _Op, xq, K, out, stream):
    k = _size(K, "K", op.fn)
    adm = _FAST_TYPES.get(type(xq))
    if stream is None and adm is not None and _admits_out(adm, out) and adm.fast_ok(op, xq, out):
        r = _qg.fast_dequantize(xq, op.fmt, k, op.fn, out)
        if r is not None:
            return r
    return _generic_dequantize(op, xq, k, out, stream)


def _run_gemm(op: _Op, a, b, M, N, K, out, stream, epi: _Epilogue = _PLAIN):
    fn = op.fn
    m = -1 if M is None else _size(M, "M", fn)
    n = -1 if N is None else _size(N, "N", fn)
    k = -1 if K is None else _size(K, "K", fn)
    adm = _FAST_TYPES.get(type(a))
    if (stream is None and adm is not None and _FAST_TYPES.get(type(b)) is adm and _admits_out(adm, out)
            and adm.fast_ok(op, a, out, b) and adm.epilogue_ok(op, epi)):
        if epi is _PLAIN:  # the binding's defaults: 14 arguments fewer to convert, about 0.6 us
            r = _qg.fast_gemm(a, b, op.a_fmt, op.b_fmt, m, n, k, fn, op.a_name, op.b_name, out)
        else:
            r = _qg.fast_gemm(
                a, b, op.a_fmt, op.b_fmt, m, n, k, fn, op.a_name, op.b_name, out, epi.bias,
                _OUT_DTYPES[epi.out_dtype], epi.transpose, epi.row_scale, epi.col_scale, epi.row_zero_point,
                epi.col_zero_point, epi.a_scales, epi.a_zero_points, epi.group_size, epi.alpha,
                1 if epi.relu else 0, epi.a_k_major, epi.b_k_major,
            )
        if r is not None:
            return r
    return _generic_gemm(op, a, b, m, n, k, out, stream, epi=epi)


def _run_quantize_int(op: _Op, x, gran: str, group_size: int = 0, asym: bool = False, scales=None,
                      zero_points=None):
    """-> (codes, scales or None, zero points or None), on the fast path when it can."""
    adm = _FAST_TYPES.get(type(x))
    if adm is not None and adm.fast_ok(op, x, None):
        if scales is None or adm.extras_ok(op, (scales, zero_points)):  # zero points come with scales
            r = _qg.fast_quantize_int(x, op.fmt, GRANULARITY[gran], group_size, asym, scales, zero_points, op.fn)
            if r is not None:
                return r
    return _generic_quantize_int(op, x, gran, group_size, asym, scales, zero_points)


def _run_dequantize_int(op: _Op, xq, k: int, gran: str, group_size: int, scales, zero_points=None):
    adm = _FAST_TYPES.get(type(xq))
    if adm is not None and adm.fast_ok(op, xq, None):
        if adm.extras_ok(op, (scales, zero_points)):
            r = _qg.fast_dequantize(xq, op.fmt, k, op.fn, None, GRANULARITY[gran], group_size, scales, zero_points)
            if r is not None:
                return r
    return _generic_dequantize_int(op, xq, k, gran, group_size, scales, zero_points)


# ------------------------------------------------------------ public functions
_QUANTIZE = {name: _Op("quantize", f"qg.quantize_{name}", fmt=f) for name, f in FORMATS.items()}
_DEQUANTIZE = {name: _Op("dequantize", f"qg.dequantize_{name}", fmt=f) for name, f in FORMATS.items()}
_GEMM_Q4_0_Q8_1 = _Op("gemm", "qg.gemm_q4_0_q8_1", a_fmt=Q4_0, b_fmt=Q8_1, a_name="weight_q", b_name="activation_q")


def quantize_q4_0(x, *, out=None, stream=None):
    """Quantize float values to Q4_0 blocks (ggml's quantize_row_q4_0_ref, byte for byte).

    x: float32, float16 or bfloat16 array of shape [..., K], K a multiple of 32.
    Returns uint8 [..., K//32, 18]: per block an fp16 scale d and 16 bytes of
    4-bit codes (element j in the low nibble of byte j, element j+16 in the high).
    """
    return _run_quantize(_QUANTIZE["q4_0"], x, out, stream)


def quantize_q8_0(x, *, out=None, stream=None):
    """Quantize to Q8_0 blocks (ggml's quantize_row_q8_0_ref): uint8 [..., K//32, 34]."""
    return _run_quantize(_QUANTIZE["q8_0"], x, out, stream)


def quantize_q8_1(x, *, convention: str = "reference", out=None, stream=None):
    """Quantize to Q8_1 blocks: uint8 [..., K//32, 36] = fp16 d, fp16 s, 32 int8 codes.

    convention="reference": ggml's quantize_row_q8_1_ref, q = roundf(x * (1/d)), s = fp16(d * sum q).
    convention="ggml_cuda": ggml's CUDA quantizer, q = roundf(x / d), s = fp16(sum x).
    gemm_q4_0_q8_1 does not read s, so it accepts either.
    """
    return _run_quantize(_QUANTIZE["q8_1"], x, out, stream, convention)


def dequantize_q4_0(xq, K=None, *, out=None, stream=None):
    """Q4_0 blocks uint8 [..., K//32, 18] -> float32 [..., K] (exact: code * d)."""
    return _run_dequantize(_DEQUANTIZE["q4_0"], xq, K, out, stream)


def dequantize_q8_0(xq, K=None, *, out=None, stream=None):
    """Q8_0 blocks uint8 [..., K//32, 34] -> float32 [..., K]."""
    return _run_dequantize(_DEQUANTIZE["q8_0"], xq, K, out, stream)


def dequantize_q8_1(xq, K=None, *, out=None, stream=None):
    """Q8_1 blocks uint8 [..., K//32, 36] -> float32 [..., K]."""
    return _run_dequantize(_DEQUANTIZE["q8_1"], xq, K, out, stream)


_GEMM_Q4_0X16_Q8_1 = _Op("gemm", "qg.gemm_q4_0_q8_1", a_fmt=Q4_0X16, b_fmt=Q8_1, a_name="weight_q",
                         b_name="activation_q")
_Q4_0X16_BYTES = 288


def _is_x16(weight_q) -> bool:
    """A weight of qg.repack's q4_0x16 layout: [M // 16, K // 32, 288] (Q4_0's last dim is 18)."""
    shape = getattr(weight_q, "shape", None)
    return shape is not None and len(shape) >= 2 and shape[-1] == _Q4_0X16_BYTES


def repack(weight_q, to: str):
    """The same Q4_0 blocks in another layout, exactly: to="q4_0x16" takes Q4_0
    uint8 [..., K//32, 18] whose rows (the product of the leading dims) are a
    multiple of 16 and returns uint8 [rows // 16, K//32, 288]; to="q4_0" turns
    that back into [rows, K//32, 18].

    q4_0x16 holds 16 rows' blocks at one K position together (per block: 4 x 16
    x 4 code bytes, code byte j of row r at [j // 4][r][j % 4], then the 16 fp16
    scales), the layout qg's CPU kernels read in one stream: gemm_q4_0_q8_1 and
    linear_q4_0 take it as weight_q. A load-time step for CPU (host) arrays.
    """
    fn = "qg.repack"
    if not isinstance(to, str) or to not in _REPACK_FORMATS:
        raise ValueError(f"{fn}: to must be 'q4_0x16' or 'q4_0', got {to!r}")
    src = "q4_0" if to == "q4_0x16" else "q4_0x16"
    src_fmt, dst_fmt = _REPACK_FORMATS[src], _REPACK_FORMATS[to]
    w = fw.where(weight_q, fn, "weight_q")
    xin, _ = fw.prepare_input(weight_q, w, fn, "weight_q", f"uint8 (packed {src} blocks)")
    with fw.device_context(w):
        shape, dtype = _core(fn, _qg.repack_spec, src_fmt, dst_fmt, xin, fn, names=("weight_q",))
        result = fw.empty(w, shape, dtype)
        _core(fn, _qg.repack, src_fmt, dst_fmt, xin, result, fn, names=("weight_q", "out"))
    return fw.finish(result, w, None)


def gemm_q4_0_q8_1(weight_q, activation_q, M=None, N=None, K=None, *, out=None, stream=None):
    """C[M, N] = W[M, K] @ A[N, K]^T with W in Q4_0 and A in Q8_1, float32 out.

    weight_q: uint8 [..., K//32, 18] (M = product of the leading dims);
    activation_q: uint8 [..., K//32, 36] (N = product of the leading dims).
    M, N, K may be omitted; when given they are checked against the shapes.
    C[m, n] = sum over blocks b of fp32(d_w) * fp32(d_a) * sum_i (w_i - 8) * a_i,
    the integer part exact; the Q8_1 sum field s is not used.
    weight_q may also be qg.repack(w, "q4_0x16"): uint8 [M // 16, K // 32, 288]
    on the CPU, the same products summed as the Q4_0 panel kernels sum them.
    """
    op = _GEMM_Q4_0X16_Q8_1 if _is_x16(weight_q) else _GEMM_Q4_0_Q8_1
    return _run_gemm(op, weight_q, activation_q, M, N, K, out, stream)


_LINEAR_Q4_0 = _Op("gemm", "qg.linear_q4_0", a_fmt=Q4_0, b_fmt=Q8_1, a_name="weight_q", b_name="x")
_LINEAR_Q4_0X16 = _Op("gemm", "qg.linear_q4_0", a_fmt=Q4_0X16, b_fmt=Q8_1, a_name="weight_q", b_name="x")
_LINEAR_Q4_0_QUANTIZE = _Op("quantize", "qg.linear_q4_0", fmt=Q8_1)


def linear_q4_0(x, weight_q, bias=None, *, stream=None):
    """y = x @ W^T + bias with W in Q4_0: the call a model's linear layer makes.

    x: float32, float16 or bfloat16 [..., K] activations; weight_q: Q4_0 uint8
    [M, K//32, 18] (M = product of its leading dims), or on the CPU the
    q4_0x16 layout qg.repack makes of it ([M//16, K//32, 288]: faster
    decode, the same products); bias: [M] float or None.
    Returns [..., M] in x's dtype (torch.nn.functional.linear's orientation).
    x is quantized to Q8_1 (ggml's reference rounding), multiplied exactly as
    gemm_q4_0_q8_1 does, and the bias add and the cast to x's dtype happen in
    the GEMM's epilogue, which writes the [N, M] result directly. NumPy and
    CuPy take float32 or float16 x (they have no bfloat16 result arrays).
    """
    fn = _LINEAR_Q4_0.fn
    # Plain torch tensors: both steps below in one core call (None: not plain).
    adm = _FAST_TYPES.get(type(x))
    if stream is None and adm is not None and adm.plain_ok(x, weight_q, bias):
        y = _qg.fast_linear_q4_0(x, weight_q, bias, fn)
        if y is not None:
            return y
    dtype = _linear_q4_0_x_dtype(x)
    shape = tuple(x.shape)
    xq = _run_quantize(_LINEAR_Q4_0_QUANTIZE, x, None, stream)
    op = _LINEAR_Q4_0X16 if _is_x16(weight_q) else _LINEAR_Q4_0
    y = _run_gemm(op, weight_q, xq, None, None, None, None, stream, _Epilogue(bias, dtype, True))
    return y.reshape(*shape[:-1], y.shape[-1])


def _linear_q4_0_x_dtype(x) -> str:
    """linear_q4_0's checks of x before its steps; -> x's dtype name (the result's)."""
    fn = _LINEAR_Q4_0.fn
    kind = fw.where(x, fn, "x").kind
    dtype = fw.dtype_name(x)
    if dtype not in _OUT_DTYPES:
        raise TypeError(f"{fn}: x must be float32, float16 or bfloat16, got {dtype}")
    if dtype == "bfloat16" and kind != "torch":
        raise TypeError(f"{fn}: x is a {kind} bfloat16 array, whose result qg cannot return as bfloat16 there; "
                        "pass x as float32 or float16, or use torch tensors")
    if len(tuple(x.shape)) < 1:
        raise ValueError(f"{fn}: x must have shape [..., K], got a 0-d array; reshape it to [1, K]")
    return dtype


def _linear_q4_0_plan(x, weight_q, bias=None):
    """explain(qg.linear_q4_0, x, weight_q[, bias]): the GEMM kernel of the
    call. Its first step runs (x quantized to Q8_1) so that the GEMM is
    judged on the operands the call would give it; on sm_90a from N = 7 the
    chosen warpgroup kernel quantizes x itself in the call."""
    dtype = _linear_q4_0_x_dtype(x)
    xq = _run_quantize(_LINEAR_Q4_0_QUANTIZE, x, None, None)
    return _LINEAR_Q4_0X16 if _is_x16(weight_q) else _LINEAR_Q4_0, weight_q, xq, None, _Epilogue(bias, dtype, True), None


# -------------------------------------------------------------------- explain
@dataclass
class Explanation:
    """Which kernel a call would run, and why the others were passed over."""

    op: str
    chosen: str
    candidates: list = field(default_factory=list)
    problem: str = ""  # the formats and device: "q4_0 x q8_1 on cuda:0"

    def __str__(self) -> str:
        lines = [f"{self.op} ({self.problem}): {self.chosen}"]
        lines += [f"  {c}" for c in self.candidates]
        return "\n".join(lines)


_OPS = {
    **{f: _QUANTIZE[n] for n, f in (("q4_0", quantize_q4_0), ("q8_0", quantize_q8_0), ("q8_1", quantize_q8_1))},
    **{
        f: _DEQUANTIZE[n]
        for n, f in (("q4_0", dequantize_q4_0), ("q8_0", dequantize_q8_0), ("q8_1", dequantize_q8_1))
    },
    gemm_q4_0_q8_1: _GEMM_Q4_0_Q8_1,
}


# Public GEMM functions whose arguments are mapped onto the core by a plan
# function (the integer family: _int.py, _int4.py register theirs): plan(*args,
# **kwargs) -> (op, a, b, K, _Epilogue, result shape or None).
_GEMM_PLANS: dict = {linear_q4_0: _linear_q4_0_plan}


def explain(op, *arrays, **kwargs) -> Explanation:
    """explain(qg.gemm_q4_0_q8_1, wq, aq) -> Explanation of the kernel that would run.

    `op` is one of qg's functions (or its name); the arrays are its array
    arguments. Runs the same checks as the call and raises the same errors.
    The integer GEMMs take their keyword arguments too, e.g.
    explain(qg.int8_matmul, A, B, out_dtype="float16", b_layout="nk") or
    explain(qg.linear_int4, x, weight_q, scales, group_size=32).
    explain(qg.linear_q4_0, x, weight_q[, bias]) names the GEMM kernel of the
    call (its quantize step runs to judge it on the real operands).
    """
    if isinstance(op, str):
        import qg

        name = op[3:] if op.startswith("qg.") else op
        if not hasattr(qg, name):
            raise ValueError(f"qg.explain: qg has no function {op!r}; pass e.g. qg.gemm_q4_0_q8_1 or its name")
        op = getattr(qg, name)
    try:
        spec = _OPS.get(op)
        plan = _GEMM_PLANS.get(op)
    except TypeError:  # unhashable
        spec = plan = None
    if spec is _GEMM_Q4_0_Q8_1 and arrays and _is_x16(arrays[0]):
        spec = _GEMM_Q4_0X16_Q8_1
    if plan is not None:
        gop, a, b, k, epi, _ = plan(*arrays, **kwargs)
        d = _explain_gemm(gop, a, b, k, epi)
        return Explanation(d["op"], d["chosen"], list(d["candidates"]), d["problem"])
    if kwargs:
        raise TypeError(f"qg.explain: {getattr(op, '__name__', op)} takes no keyword arguments here, got "
                        f"{', '.join(kwargs)}")
    if spec is None:
        raise TypeError(
            f"qg.explain: op must be one of qg's quantize/dequantize/gemm functions (e.g. qg.gemm_q4_0_q8_1) or its "
            f"name, got {type(op).__module__}.{type(op).__name__} {op!r:.60}"
        )
    names = (spec.a_name, spec.b_name) if spec.kind == "gemm" else (("x",) if spec.kind == "quantize" else ("xq",))
    if len(arrays) != len(names):
        raise ValueError(
            f"qg.explain: {spec.fn} takes {len(names)} array(s) ({', '.join(names)}), got {len(arrays)}; "
            f"pass qg.explain({spec.fn}, {', '.join(names)})"
        )
    wheres = [fw.where(a, spec.fn, nm) for a, nm in zip(arrays, names)]
    if len(wheres) == 2:
        fw.check_same_kind(wheres[0], wheres[1], spec.fn, *names)
    expects = (
        (_packed(spec.a_fmt), _packed(spec.b_fmt)) if spec.kind == "gemm"
        else (_FLOAT_IN,) if spec.kind == "quantize" else (_packed(spec.fmt),)
    )
    prepared = [fw.prepare_input(a, w, spec.fn, nm, ex) for a, w, nm, ex in zip(arrays, wheres, names, expects)]
    with fw.device_context(wheres[0]):
        if spec.kind == "quantize":
            d = _core(spec.fn, _qg.explain_quantize, spec.fmt, prepared[0][0], prepared[0][1], spec.fn, names=names)
        elif spec.kind == "dequantize":
            d = _core(spec.fn, _qg.explain_dequantize, spec.fmt, prepared[0][0], spec.fn, names=names)
        else:
            d = _core(spec.fn, _qg.explain_gemm, spec.a_fmt, spec.b_fmt, prepared[0][0], prepared[1][0], spec.fn,
                      spec.a_name, spec.b_name, names=names)
    return Explanation(d["op"], d["chosen"], list(d["candidates"]), d["problem"])
