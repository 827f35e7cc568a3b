# SPDX-License-Identifier: MIT
"""qg's operators registered with torch.library, and the torch side of the
fast path.

Eager calls with torch tensors take qg's single-crossing fast path (_api.py).
While torch traces (torch.compile, torch.export, torch.jit.trace, make_fx, a
TorchDispatchMode) or the tensors hold no data qg can read (FakeTensor and
other __torch_dispatch__ subclasses), the public functions call these
registered operators instead, so the graph records qg::quantize /
qg::dequantize / qg::gemm (and, for the integer formats, qg::quantize_int /
qg::dequantize_int) with shapes from their fake (meta) implementations,
and runs them through the same eager code later. out= is then recorded as the
operator followed by out.copy_(result); stream= cannot be recorded and raises.

Autograd: packed codes (uint8) cannot carry a gradient, so quantize_* on a
tensor that requires grad raises (detach it, or use qg.torch.fake_quantize,
whose backward is the straight-through estimator: dL/dx = dL/dy).

Importing this module imports torch; `import qg` alone does not. The public
home of the torch extras is qg.torch.
"""
from __future__ import annotations

import dataclasses
import sys
import warnings

from typing import Optional

import torch

from . import _api
from . import _qg

_TRAITS = [dict(_qg.format_traits(i)) for i in range(_qg.format_count)]
_NAMES = [t["name"] for t in _TRAITS]
_CONV_NAMES = ["reference", "ggml_cuda"]
_FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
# Bound once: the fast-path checks run on every eager call, where each
# attribute lookup counts.
_is_compiling = torch.compiler.is_compiling
_tracing_state = torch._C._get_tracing_state
_dispatch_depth = torch._C._len_torch_dispatch_stack
_is_grad_enabled = torch.is_grad_enabled
_STRIDED = torch.strided


# This module is the torch types' admission to the fast path
# (_api._FAST_TYPES): fast_ok, out_ok, epilogue_ok, extras_ok, plain_ok.
_SELF = sys.modules[__name__]
bf16_results = True  # torch has bfloat16 tensors for results


def out_ok(out) -> bool:
    """out= (a tensor of a fast type) may ride the fast path unless it requires grad."""
    return not out.requires_grad


_PLAIN_TYPES = (torch.Tensor, torch.nn.Parameter)
_OPAQUE: dict = {}  # tensor type -> overrides __torch_dispatch__ (holds no data qg can read)
_is_functorch_wrapped = getattr(torch._C._functorch, "is_functorch_wrapped_tensor", lambda t: False)


def enable_fast_path(tensor_type) -> None:
    """Lets eager calls with this tensor type take the single-crossing path
    (never for types that hold no data qg can read, such as FakeTensor)."""
    if (
        tensor_type not in _api._FAST_TYPES
        and hasattr(tensor_type, "__dlpack_c_exchange_api__")
        and not _opaque_type(tensor_type)
    ):
        _api._FAST_TYPES[tensor_type] = _SELF


# ------------------------------------------------- shape checks of the fakes
# While torch traces, the fake implementations are where bad shapes and dtypes
# are caught: they raise the same exception types as the core, named the same.
def _dtype_name(dt) -> str:
    return str(dt).replace("torch.", "")


def _check_float(fn: str, x, fmt: str) -> None:
    t = _TRAITS[_NAMES.index(fmt)]
    if x.dtype not in _FLOAT_DTYPES:
        raise TypeError(f"{fn}: x must be float32, float16 or bfloat16, got {_dtype_name(x.dtype)}")
    if x.dim() < 1:
        raise ValueError(f"{fn}: x must have shape [..., K], got a 0-d array; reshape it to [1, K]")
    torch._check_value(
        x.shape[-1] % t["block_size"] == 0,
        lambda: f"{fn}: K={x.shape[-1]} (x.shape[-1]) is not a multiple of {t['block_size']}, the {fmt} block size",
    )


def _check_packed(fn: str, arg: str, x, fmt: str) -> None:
    t = _TRAITS[_NAMES.index(fmt)]
    if x.dtype != torch.uint8:
        raise TypeError(f"{fn}: {arg} must be uint8 (packed {fmt} blocks), got {_dtype_name(x.dtype)}")
    if x.dim() < 2:
        raise ValueError(
            f"{fn}: {arg} must have shape [..., K//{t['block_size']}, {t['bytes_per_block']}], "
            f"got a {x.dim()}-d array of shape {list(x.shape)}"
        )
    torch._check_value(
        x.shape[-1] == t["bytes_per_block"],
        lambda: f"{fn}: {arg}.shape[-1] must be {t['bytes_per_block']} (bytes per {fmt} block), got {x.shape[-1]}",
    )


def _rows(x, drop: int):
    r = 1
    for s in x.shape[: x.dim() - drop]:
        r = r * s
    return r


# ------------------------------------------------------------ registered ops
@torch.library.custom_op("qg::quantize", mutates_args=())
def _quantize_op(x: torch.Tensor, fmt: str, convention: str) -> torch.Tensor:
    op = _api._QUANTIZE[fmt]
    return _api._generic_quantize(op, x.detach(), None, None, _CONV_NAMES.index(convention), route=False)


@_quantize_op.register_fake
def _(x, fmt, convention):
    t = _TRAITS[_NAMES.index(fmt)]
    fn = _api._QUANTIZE[fmt].fn
    _check_float(fn, x, fmt)
    if x.dim() + 1 > 8:
        raise ValueError(
            f"{fn}: x has {x.dim()} dimensions, so the result would have {x.dim() + 1}, more than qg's limit of 8; "
            "merge leading dimensions of x (reshape) first"
        )
    return x.new_empty((*x.shape[:-1], x.shape[-1] // t["block_size"], t["bytes_per_block"]), dtype=torch.uint8)


@torch.library.custom_op("qg::dequantize", mutates_args=())
def _dequantize_op(xq: torch.Tensor, fmt: str, k: int) -> torch.Tensor:
    return _api._generic_dequantize(_api._DEQUANTIZE[fmt], xq, k, None, None, route=False)


@_dequantize_op.register_fake
def _(xq, fmt, k):
    t = _TRAITS[_NAMES.index(fmt)]
    fn = _api._DEQUANTIZE[fmt].fn
    _check_packed(fn, "xq", xq, fmt)
    inferred = xq.shape[-2] * t["block_size"]
    if k >= 0:
        torch._check_value(
            k == inferred,
            lambda: f"{fn}: K={k} does not match xq, which holds {xq.shape[-2]} blocks per row (K={inferred})",
        )
    return xq.new_empty((*xq.shape[:-2], inferred), dtype=torch.float32)


# One operator for every GEMM entry point. fn, the formats and the argument
# names say which public function it stands for (messages, checks); the rest
# are ops.h's GemmViews fields: the epilogue (bias, result dtype, transposed
# result, row / column scales and zero points, alpha, relu) and the operands'
# extras (group-wise scales of a, K-major operands).
@torch.library.custom_op("qg::gemm", mutates_args=())
def _gemm_op(
    a: torch.Tensor, b: torch.Tensor, fn: str, a_fmt: int, b_fmt: int, a_name: str, b_name: str, m: int, n: int,
    k: int, bias: Optional[torch.Tensor], out_dtype: str, transpose: bool,
    row_scale: Optional[torch.Tensor] = None, col_scale: Optional[torch.Tensor] = None,
    row_zero_point: Optional[torch.Tensor] = None, col_zero_point: Optional[torch.Tensor] = None,
    a_scales: Optional[torch.Tensor] = None, a_zero_points: Optional[torch.Tensor] = None, group_size: int = 0,
    alpha: float = 1.0, relu: bool = False, a_k_major: bool = False, b_k_major: bool = False,
) -> torch.Tensor:
    op = _api._Op("gemm", fn, a_fmt=a_fmt, b_fmt=b_fmt, a_name=a_name, b_name=b_name)
    epi = _api._Epilogue(
        bias, out_dtype, transpose, row_scale, col_scale, row_zero_point, col_zero_point, alpha, relu, a_scales,
        a_zero_points, group_size, a_k_major, b_k_major,
    )
    return _api._generic_gemm(op, a, b, m, n, k, None, None, route=False, epi=epi)


_TORCH_DTYPES = {
    "uint8": torch.uint8, "int8": torch.int8, "int32": torch.int32, "float16": torch.float16,
    "bfloat16": torch.bfloat16, "float32": torch.float32,
}


def _row_elements(t: dict, k):
    """Storage elements of one row of k values of a flat format (formats.h's row_elements)."""
    esize = _TORCH_DTYPES[t["storage"]].itemsize
    return (k + t["block_size"] - 1) // t["block_size"] * t["bytes_per_block"] // esize


def _operand_rows_k(fn: str, arg: str, x, fmt: int, k_major: bool, k_given: int):
    """(rows, K) of a GEMM operand, with the core's checks and messages."""
    t = _TRAITS[fmt]
    if t["blocked_view"]:
        _check_packed(fn, arg, x, t["name"])
        return _rows(x, 2) * t["rows_per_block"], x.shape[-2] * t["block_size"]
    if x.dtype != _TORCH_DTYPES[t["storage"]]:
        raise TypeError(f"{fn}: {arg} must be {t['storage']} ({t['name']} codes), got {_dtype_name(x.dtype)}")
    need = 2 if k_major else 1
    if x.dim() < need:
        raise ValueError(f"{fn}: {arg} must have at least {need} dimension(s), got shape {list(x.shape)}")
    if k_major and x.dim() != 2:
        raise ValueError(f"{fn}: {arg} must be 2-D [K, N] here, got shape {list(x.shape)}")
    elements = x.shape[0] if k_major else x.shape[-1]
    rows = x.shape[1] if k_major else _rows(x, 1)
    esize = _TORCH_DTYPES[t["storage"]].itemsize
    full = elements * esize // t["bytes_per_block"] * t["block_size"]
    if k_given < 0:
        return rows, full
    torch._check_value(
        _row_elements(t, k_given) == elements,
        lambda: f"{fn}: K={k_given} does not match {arg}, whose rows hold {elements} {t['storage']} elements",
    )
    return rows, k_given


@_gemm_op.register_fake
def _(a, b, fn, a_fmt, b_fmt, a_name, b_name, m, n, k, bias, out_dtype, transpose, row_scale=None, col_scale=None,
      row_zero_point=None, col_zero_point=None, a_scales=None, a_zero_points=None, group_size=0, alpha=1.0,
      relu=False, a_k_major=False, b_k_major=False):
    rows_a, ka = _operand_rows_k(fn, a_name, a, a_fmt, a_k_major, k)
    rows_b, kb = _operand_rows_k(fn, b_name, b, b_fmt, b_k_major, k)
    if _TRAITS[a_fmt]["blocked_view"]:
        torch._check_value(
            ka == kb,
            lambda: f"{fn}: {a_name} has {a.shape[-2]} blocks per row (K={ka}) but {b_name} has "
            f"{b.shape[-2]} (K={kb})",
        )
    else:
        torch._check_value(ka == kb, lambda: f"{fn}: {a_name} has K={ka} but {b_name} has K={kb}")
    for name, given, actual, arg in (("K", k, ka, a_name), ("M", m, rows_a, a_name), ("N", n, rows_b, b_name)):
        if given >= 0:
            torch._check_value(
                given == actual,
                lambda name=name, given=given, actual=actual, arg=arg: (
                    f"{fn}: {name}={given} does not match {arg} ({name}={actual})"
                ),
            )
    for name, v, length, scalar_ok in (
        ("bias", bias, rows_a, False), ("row_scale", row_scale, rows_a, True), ("col_scale", col_scale, rows_b, True),
        ("row_zero_point", row_zero_point, rows_a, True), ("col_zero_point", col_zero_point, rows_b, True),
    ):
        if v is not None:
            torch._check_value(
                v.dim() == 1 and (v.shape[0] == length or (scalar_ok and v.shape[0] == 1)),
                lambda name=name, v=v, length=length: f"{fn}: {name} must have shape [{length}], got {list(v.shape)}",
            )
    shape = (rows_b, rows_a) if transpose else (rows_a, rows_b)
    return a.new_empty(shape, dtype=getattr(torch, out_dtype))


# ----------------------------------------------------- the integer family
# quantize_int: x -> (codes, scales, zero points). Static calls (given
# scales) and symmetric ones return empty [0] tensors in the places they do
# not produce (a custom operator's outputs may not alias its inputs).
@torch.library.custom_op("qg::quantize_int", mutates_args=())
def _quantize_int_op(
    x: torch.Tensor, fmt: int, granularity: str, group_size: int, asymmetric: bool,
    scales: Optional[torch.Tensor], zero_points: Optional[torch.Tensor], fn: str,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    op = _api._Op("quantize", fn, fmt=fmt)
    codes, sc, zp = _api._generic_quantize_int(
        op, x.detach(), granularity, group_size, asymmetric, scales, zero_points, route=False
    )
    empty = lambda dt: x.new_empty((0,), dtype=dt)  # noqa: E731
    return codes, empty(torch.float32) if sc is None else sc, empty(torch.int32) if zp is None else zp


@_quantize_int_op.register_fake
def _(x, fmt, granularity, group_size, asymmetric, scales, zero_points, fn):
    t = _TRAITS[fmt]
    if x.dtype not in _FLOAT_DTYPES:
        raise TypeError(f"{fn}: x must be float32, float16 or bfloat16, got {_dtype_name(x.dtype)}")
    if x.dim() < 1:
        raise ValueError(f"{fn}: x must have shape [..., K], got a 0-d array; reshape it to [1, K]")
    k = x.shape[-1]
    if not t["pads_k"]:
        torch._check_value(
            k % t["block_size"] == 0,
            lambda: f"{fn}: K={k} (x.shape[-1]) is not a multiple of {t['block_size']}, the {t['name']} block size",
        )
    codes = x.new_empty((*x.shape[:-1], _row_elements(t, k)), dtype=_TORCH_DTYPES[t["storage"]])
    if scales is not None:
        return codes, x.new_empty((0,), dtype=torch.float32), x.new_empty((0,), dtype=torch.int32)
    if granularity == "tensor":
        shape = (1,)
    elif granularity == "row":
        shape = tuple(x.shape[:-1])
    else:
        torch._check_value(
            group_size > 0 and k % group_size == 0,
            lambda: f"{fn}: group_size={group_size} must be positive and divide K={k}",
        )
        shape = (*x.shape[:-1], k // group_size)
    zp = x.new_empty(shape if asymmetric else (0,), dtype=torch.int32)
    return codes, x.new_empty(shape, dtype=torch.float32), zp


@torch.library.custom_op("qg::dequantize_int", mutates_args=())
def _dequantize_int_op(
    xq: torch.Tensor, fmt: int, k: int, granularity: str, group_size: int, scales: torch.Tensor,
    zero_points: Optional[torch.Tensor], fn: str,
) -> torch.Tensor:
    op = _api._Op("dequantize", fn, fmt=fmt)
    return _api._generic_dequantize_int(op, xq, k, granularity, group_size, scales, zero_points, route=False)


@_dequantize_int_op.register_fake
def _(xq, fmt, k, granularity, group_size, scales, zero_points, fn):
    _, kk = _operand_rows_k(fn, "q", xq, fmt, False, k)
    return xq.new_empty((*xq.shape[:-1], kk), dtype=torch.float32)


# ------------------------------------------------------------- fake quantize
_FAKE_QUANTIZE_FN = "qg.torch.fake_quantize"
_QUANTIZABLE = [n for n, t in zip(_NAMES, _TRAITS) if t["quantizable"] and t["blocked_view"]]  # the ggml formats


@torch.library.custom_op("qg::fake_quantize", mutates_args=())
def _fake_quantize_op(x: torch.Tensor, fmt: str) -> torch.Tensor:
    q = _api._generic_quantize(
        dataclasses.replace(_api._QUANTIZE[fmt], fn=_FAKE_QUANTIZE_FN), x.detach(), None, None, 0, route=False
    )
    y = _api._generic_dequantize(
        dataclasses.replace(_api._DEQUANTIZE[fmt], fn=_FAKE_QUANTIZE_FN), q, -1, None, None, route=False
    )
    return y.to(x.dtype)


@_fake_quantize_op.register_fake
def _(x, fmt):
    _check_float(_FAKE_QUANTIZE_FN, x, fmt)
    return torch.empty_like(x, memory_format=torch.contiguous_format)


def _fake_quantize_backward(ctx, grad):
    return grad, None  # straight-through: the rounding is treated as the identity


_fake_quantize_op.register_autograd(_fake_quantize_backward)


def fake_quantize(x: torch.Tensor, fmt: str = "q8_0") -> torch.Tensor:
    """Quantize-dequantize (fake quantization) for quantization-aware training.

    Returns dequantize(quantize(x)) in x's dtype and shape: the exact values
    qg's fmt ("q4_0", "q8_0" or "q8_1") represents, bit for bit what
    qg.dequantize_<fmt>(qg.quantize_<fmt>(x)) gives. x: a float32, float16 or
    bfloat16 tensor [..., K], K a multiple of 32, on the CPU or a CUDA device.
    Differentiable with the straight-through estimator: the gradient passes
    through unchanged (dL/dx = dL/dy). Registered as the torch operator
    qg::fake_quantize, so it works under torch.compile and torch.export.
    """
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{_FAKE_QUANTIZE_FN}: x must be a torch.Tensor, got {type(x).__module__}.{type(x).__name__}")
    if not isinstance(fmt, str) or fmt not in _QUANTIZABLE:
        raise ValueError(f"{_FAKE_QUANTIZE_FN}: fmt must be one of {_QUANTIZABLE}, got {fmt!r}")
    return _fake_quantize_op(x, fmt)


# ------------------------------------------------- routes from the public API


def _tracing() -> bool:
    return torch.compiler.is_compiling() or torch._C._get_tracing_state() is not None


def _opaque_type(tt) -> bool:
    """A tensor type that overrides __torch_dispatch__ (FakeTensor,
    FunctionalTensor, DTensor, ...): its instances hold no data qg can read."""
    if tt in _PLAIN_TYPES:
        return False
    r = _OPAQUE.get(tt)
    if r is None:
        r = _OPAQUE[tt] = any(
            "__torch_dispatch__" in vars(c)
            for c in tt.__mro__
            if c not in _PLAIN_TYPES and c is not object and c is not torch._C.TensorBase
        )
    return r


def _use_op(*tensors) -> bool:
    """True when the call must go through the registered operator: torch
    traces, a TorchDispatchMode is active (make_fx, FakeTensorMode, a user's
    mode), or a tensor holds no data qg can read (a __torch_dispatch__
    subclass, or a torch.func.vmap / grad wrapper)."""
    if _tracing() or torch.compiler.is_exporting() or torch._C._len_torch_dispatch_stack() > 0:
        return True
    return any(
        isinstance(t, torch.Tensor) and (_opaque_type(type(t)) or _is_functorch_wrapped(t)) for t in tensors
    )


def _grad_check(op, x) -> None:
    if x.requires_grad and _is_grad_enabled():
        fmt = _NAMES[op.fmt]
        alt = (
            f"qg.torch.fake_quantize(x, '{fmt}') for quantization-aware training (straight-through gradient)"
            if fmt in _QUANTIZABLE
            else "qg.torch.QuantizedLinear, whose input gets a straight-through gradient"
        )
        raise RuntimeError(
            f"{op.fn}: x requires grad, but integer codes cannot carry a gradient, so the autograd graph would be "
            f"lost; pass x.detach() (inference), or use {alt}"
        )


def fast_ok(op, x, out, y=None) -> bool:
    """May this eager call take the single-crossing path? False: the generic
    path, which resolves views and routes to the registered operators.

    x, y and out are of types in _api._FAST_TYPES (plain tensor types). The
    fast path itself declines what torch will not export (sparse tensors,
    functorch wrappers). Complex tensors (the only ones with a lazy conj bit)
    are refused by the core's dtype check."""
    if _is_compiling() or _tracing_state() is not None:
        return False
    if op.kind == "quantize":
        _grad_check(op, x)
    if _dispatch_depth() > 0:
        return False
    if x.layout != _STRIDED or x.is_neg() or not x.is_contiguous():
        return False
    if y is not None and (y.layout != _STRIDED or y.is_neg() or not y.is_contiguous()):
        return False
    if out is not None and (out.layout != _STRIDED or out.is_neg() or out.is_conj() or out.is_meta):
        return False  # the generic path explains what is wrong with it
    return True


def plain_ok(*args) -> bool:
    """May an eager call take an entry that declines what is not plain (the
    integer family's qg._qg.fast_int8_matmul, fast_linear_int4,
    fast_quantize_tensor, and fast_linear_q4_0 and fast_linear_int8)? args: the arguments the entry
    reads as tensors; None and Python numbers pass. False while torch traces,
    and for an argument that is not a tensor of a fast type, a lazily negated
    view (exported as stored) or one that requires grad: the function's plan
    (or steps) then takes the call and says what is wrong. The entries decline
    whatever else is not plain themselves."""
    if _is_compiling() or _tracing_state() is not None or _dispatch_depth() > 0:
        return False
    fast = _api._FAST_TYPES
    for t in args:
        tt = type(t)
        if fast.get(tt) is _SELF:
            if t.is_neg() or (t.requires_grad and _is_grad_enabled()):
                return False
        elif t is not None and tt is not float and tt is not int:
            return False
    return True


def _recorded(fn: str, result, out, stream):
    """The operator's result as the call's result; out= is written with
    copy_, which every tracer records."""
    if stream is not None:
        raise ValueError(
            f"{fn}: stream= cannot be recorded while torch traces (torch.compile, torch.export, torch.jit.trace); "
            "omit it: the recorded operator runs on torch's current stream"
        )
    if out is None:
        return result
    from . import _frameworks as fw

    kind = fw.where(out, fn, "out").kind  # qg's message for what is no array at all
    if kind != "torch":
        raise TypeError(
            f"{fn}: out is a {kind} array but the inputs are torch arrays; pass out from the inputs' framework "
            "(or omit out=)"
        )
    if out.dtype != result.dtype:
        raise TypeError(f"{fn}: out must be {_dtype_name(result.dtype)}, got {_dtype_name(out.dtype)}")
    if torch._C._get_tracing_state() is not None:
        with warnings.catch_warnings():  # (not under dynamo, which cannot trace warnings filters)
            warnings.simplefilter("ignore", torch.jit.TracerWarning)  # shapes are fixed in a jit trace anyway
            same_shape = tuple(out.shape) == tuple(result.shape)
    else:
        same_shape = tuple(out.shape) == tuple(result.shape)
    if not same_shape:
        raise ValueError(f"{fn}: out has shape {list(out.shape)} but the result has shape {list(result.shape)}")
    if out.device != result.device:
        raise ValueError(f"{fn}: out is on {out.device} but the inputs are on {result.device}")
    if out.requires_grad:
        raise ValueError(f"{fn}: out must not require grad")
    out.copy_(result)
    return out


def route_quantize(op, x, conv: int, out, stream):
    """The generic path's torch step: the autograd rule, and the registered
    operator while torch traces (None: run eagerly)."""
    _grad_check(op, x)
    if not _use_op(x, out):
        return None
    return _recorded(op.fn, _quantize_op(x, _NAMES[op.fmt], _CONV_NAMES[conv]), out, stream)


def route_dequantize(op, xq, k: int, out, stream):
    if not _use_op(xq, out):
        return None
    return _recorded(op.fn, _dequantize_op(xq, _NAMES[op.fmt], k), out, stream)


def _bias_grad_check(op, bias, name: str = "bias") -> None:
    """qg's GEMM has no backward: a bias (or scale) that requires grad (with
    grad mode on) is refused rather than silently dropped from the graph."""
    if isinstance(bias, torch.Tensor) and bias.requires_grad and _is_grad_enabled():
        raise RuntimeError(
            f"{op.fn}: {name} requires grad, but qg's quantized GEMM has no backward, so the autograd graph would "
            f"be lost; call it under torch.no_grad() / torch.inference_mode(), pass {name}.detach(), or use "
            "qg.torch.QuantizedLinear (input gradients)"
        )


def extras_ok(op, tensors) -> bool:
    """May the fast path take these optional tensors (scales, zero points)?
    None entries are absent. Negated views go to the generic path, which
    resolves them; a tensor that requires grad is refused there too."""
    for t in tensors:
        if t is None:
            continue
        if _api._FAST_TYPES.get(type(t)) is not _SELF or t.layout != _STRIDED or t.is_neg():
            return False
        if t.requires_grad and _is_grad_enabled():
            return False  # the generic path raises the message
    return True


def epilogue_ok(op, epi) -> bool:
    """_bias_grad_check and extras_ok for every array of a GEMM call's _Epilogue."""
    if epi is _api._PLAIN:
        return True
    fast = _api._FAST_TYPES
    for name, t in epi.arrays():
        if fast.get(type(t)) is not _SELF:
            _bias_grad_check(op, t, name)  # a tensor subclass may require grad too
            return False
        if t.requires_grad:
            _bias_grad_check(op, t, name)
        if t.layout != _STRIDED or t.is_neg():
            return False
    return True


def route_gemm(op, a, b, m: int, n: int, k: int, out, stream, epi=None):
    epi = epi or _api._PLAIN
    arrays = epi.arrays()
    for name, t in arrays:
        _bias_grad_check(op, t, name)
    if not _use_op(a, b, out, *(t for _, t in arrays)):
        return None
    result = _gemm_op(
        a, b, op.fn, op.a_fmt, op.b_fmt, op.a_name, op.b_name, m, n, k, epi.bias, epi.out_dtype, epi.transpose,
        epi.row_scale, epi.col_scale, epi.row_zero_point, epi.col_zero_point, epi.a_scales, epi.a_zero_points,
        epi.group_size, float(epi.alpha), bool(epi.relu), epi.a_k_major, epi.b_k_major,
    )
    return _recorded(op.fn, result, out, stream)


def _static_grad_check(op, t, name: str) -> None:
    if isinstance(t, torch.Tensor) and t.requires_grad and torch.is_grad_enabled():
        raise RuntimeError(
            f"{op.fn}: {name} requires grad, but integer codes cannot carry a gradient; pass {name}.detach()"
        )


def route_quantize_int(op, x, gran: str, group_size: int, asym: bool, scales, zero_points):
    """The generic path's torch step for the integer formats: the autograd
    rule, and qg::quantize_int while torch traces (None: run eagerly)."""
    _grad_check(op, x)
    _static_grad_check(op, scales, "scale")
    if not _use_op(x, scales, zero_points):
        return None
    codes, sc, zp = _quantize_int_op(x, op.fmt, gran, group_size, asym, scales, zero_points, op.fn)
    return codes, (None if scales is not None else sc), (zp if asym and scales is None else None)


def route_dequantize_int(op, xq, k: int, gran: str, group_size: int, scales, zero_points):
    _static_grad_check(op, scales, "scale")
    if not _use_op(xq, scales, zero_points):
        return None
    return _dequantize_int_op(xq, op.fmt, k, gran, group_size, scales, zero_points, op.fn)


enable_fast_path(torch.Tensor)
enable_fast_path(torch.nn.Parameter)
