# SPDX-License-Identifier: MIT
"""qg's operators registered with torch.library, and the torch side of the
fast path.

Eager calls with torch tensors take qg's single-crossing fast path (_api.py).
While torch traces (torch.compile, torch.export, torch.jit.trace) the public
functions call these registered operators instead, so the graph records
qg::quantize / qg::dequantize / qg::gemm with shapes from their fake (meta)
implementations, and runs them through the same eager code later.

Autograd: packed codes (uint8) cannot carry a gradient, so quantize_* on a
tensor that requires grad raises (detach it, or use fake_quantize, whose
backward is the straight-through estimator: dL/dx = dL/dy).

Importing this module imports torch; `import qg` alone does not.
"""
from __future__ import annotations

import torch

from . import _api
from . import _qg

_TRAITS = [dict(_qg.format_traits(i)) for i in range(_qg.format_count)]
_NAMES = [t["name"] for t in _TRAITS]
_CONV_NAMES = ["reference", "ggml_cuda"]


def enable_fast_path(tensor_type) -> None:
    """Lets eager calls with this tensor type take the single-crossing path."""
    if tensor_type not in _api._FAST_TYPES and hasattr(tensor_type, "__dlpack_c_exchange_api__"):
        _api._FAST_TYPES.add(tensor_type)


# ------------------------------------------------------------ registered ops
@torch.library.custom_op("qg::quantize", mutates_args=())
def _quantize_op(x: torch.Tensor, fmt: str, convention: str) -> torch.Tensor:
    op = _api._QUANTIZE[fmt]
    return _api._generic_quantize(op, x.detach(), None, None, _CONV_NAMES.index(convention))


@_quantize_op.register_fake
def _(x, fmt, convention):
    t = _TRAITS[_NAMES.index(fmt)]
    torch._check(x.shape[-1] % t["block_size"] == 0, lambda: f"qg.quantize_{fmt}: K must be a multiple of {t['block_size']}")
    return x.new_empty((*x.shape[:-1], x.shape[-1] // t["block_size"], t["bytes_per_block"]), dtype=torch.uint8)


@torch.library.custom_op("qg::dequantize", mutates_args=())
def _dequantize_op(xq: torch.Tensor, fmt: str, k: int) -> torch.Tensor:
    return _api._generic_dequantize(_api._DEQUANTIZE[fmt], xq, k, None, None)


@_dequantize_op.register_fake
def _(xq, fmt, k):
    t = _TRAITS[_NAMES.index(fmt)]
    return xq.new_empty((*xq.shape[:-2], xq.shape[-2] * t["block_size"]), dtype=torch.float32)


@torch.library.custom_op("qg::gemm", mutates_args=())
def _gemm_op(a: torch.Tensor, b: torch.Tensor, a_fmt: str, b_fmt: str, m: int, n: int, k: int) -> torch.Tensor:
    op = _GEMM_OPS[(a_fmt, b_fmt)]
    return _api._generic_gemm(op, a, b, m, n, k, None, None)


@_gemm_op.register_fake
def _(a, b, a_fmt, b_fmt, m, n, k):
    rows_a, rows_b = 1, 1
    for s in a.shape[:-2]:
        rows_a = rows_a * s
    for s in b.shape[:-2]:
        rows_b = rows_b * s
    return a.new_empty((rows_a, rows_b), dtype=torch.float32)


_GEMM_OPS = {(_NAMES[_api._GEMM_Q4_0_Q8_1.a_fmt], _NAMES[_api._GEMM_Q4_0_Q8_1.b_fmt]): _api._GEMM_Q4_0_Q8_1}


@torch.library.custom_op("qg::fake_quantize", mutates_args=())
def _fake_quantize_op(x: torch.Tensor, fmt: str) -> torch.Tensor:
    q = _api._generic_quantize(_api._QUANTIZE[fmt], x.detach(), None, None, 0)
    return _api._generic_dequantize(_api._DEQUANTIZE[fmt], q, -1, None, None).to(x.dtype)


@_fake_quantize_op.register_fake
def _(x, fmt):
    return torch.empty_like(x)


def _fake_quantize_backward(ctx, grad):
    return grad, None  # straight-through: the rounding is treated as the identity


_fake_quantize_op.register_autograd(_fake_quantize_backward)


def fake_quantize(x: torch.Tensor, fmt: str = "q8_0") -> torch.Tensor:
    """dequantize(quantize(x)) in x's dtype, differentiable with the
    straight-through estimator (the gradient passes through unchanged), for
    quantization-aware training with qg's exact formats."""
    if fmt not in _NAMES:
        raise ValueError(f"qg.torch_ops.fake_quantize: fmt must be one of {_NAMES}, got {fmt!r}")
    return _fake_quantize_op(x, fmt)


# ------------------------------------------------- routes from the public API
def _tracing() -> bool:
    return torch.compiler.is_compiling() or torch._C._get_tracing_state() is not None


def _grad_check(op, x) -> None:
    if x.requires_grad and torch.is_grad_enabled():
        raise RuntimeError(
            f"{op.fn}: x requires grad, but packed codes cannot carry a gradient, so the autograd graph would be "
            f"lost; pass x.detach() (inference), or use qg.torch_ops.fake_quantize(x, '{_NAMES[op.fmt]}') for "
            "quantization-aware training (straight-through gradient)"
        )


# Each returns None for an ordinary eager call (the fast path takes it), else
# the result: the registered operator while torch traces (out= is then
# written by the generic path, which records no operator), or the generic
# path for views it must resolve (negated, non-contiguous).
def special_quantize(op, x, conv: int, out):
    _grad_check(op, x)
    if _tracing() and out is None:
        return _quantize_op(x, _NAMES[op.fmt], _CONV_NAMES[conv])
    if out is not None and _tracing() or x.is_neg() or not x.is_contiguous():
        return _api._generic_quantize(op, x, out, None, conv)
    return None


def special_dequantize(op, xq, k: int, out):
    if _tracing() and out is None:
        return _dequantize_op(xq, _NAMES[op.fmt], k)
    if out is not None and _tracing() or xq.is_neg() or not xq.is_contiguous():
        return _api._generic_dequantize(op, xq, k, out, None)
    return None


def special_gemm(op, a, b, m: int, n: int, k: int, out):
    if _tracing() and out is None:
        return _gemm_op(a, b, _NAMES[op.a_fmt], _NAMES[op.b_fmt], m, n, k)
    if out is not None and _tracing() or a.is_neg() or b.is_neg() or not (a.is_contiguous() and b.is_contiguous()):
        return _api._generic_gemm(op, a, b, m, n, k, out, None)
    return None


def check_generic(op, x) -> None:
    """The generic path's autograd rule for quantize_* (the same as the fast path's)."""
    if op.kind == "quantize":
        _grad_check(op, x)


enable_fast_path(torch.Tensor)
enable_fast_path(torch.nn.Parameter)
