# SPDX-License-Identifier: MIT
"""qg.torch.QuantizedLinear: a frozen quantized linear layer (seed 001's
QuantizedLinear) in three weight formats, with bias and an optional ReLU
fused into the GEMM's epilogue.

* "int8": weights int8 per output channel (symmetric); each forward
  quantizes the activations per row (per token, symmetric, dynamic) and runs
  one int8 x int8 GEMM whose epilogue applies both scales, the bias and the
  ReLU and casts to x's dtype (W8A8).
* "int4": group-wise INT4 weights (GPTQ/AWQ style), float activations
  (weight-only, qg.linear_int4).
* "q4_0": ggml's Q4_0 weights, Q8_1 activations (qg.linear_q4_0).
* "q4_0x16": the same Q4_0 codes repacked for qg's CPU kernels
  (qg.repack; out_features a multiple of 16): faster CPU decode, the same
  products; a CPU layer (on CUDA use "q4_0").

Gradients: the weights are frozen (buffers). The input gets a
straight-through gradient, grad_x = grad_y @ W_deq (masked by the ReLU),
where W_deq is the dequantized weight; the bias (a Parameter) gets its
ordinary gradient. So the layer can sit inside a model that trains other
parameters (adapters, a float head) or needs input gradients.

Every qg call in forward is one of qg's registered torch operators while
torch traces, so torch.compile(fullgraph=True) and CUDA graph capture work.
"""
from __future__ import annotations

import math

import torch

from . import _api, _qg, torch_ops
from ._api import BF16, F16, F32, I4, I8, Q4_0, Q4_0X16, Q8_1, _Epilogue, _Op
from ._int import quantize_tensor

_FN = "qg.torch.QuantizedLinear"
_FORMATS = ("int8", "int4", "q4_0", "q4_0x16")
_Q4_FORMATS = ("q4_0", "q4_0x16")  # Q4_0 codes, Q8_1 activations
_OUT = {torch.float32: "float32", torch.float16: "float16", torch.bfloat16: "bfloat16"}
_Q4_0_BLOCK = 32

# The core calls forward makes, named after the layer for messages.
_QUANTIZE_X_I8 = _Op("quantize", _FN, fmt=I8)
_GEMM_I8 = _Op("gemm", _FN, a_fmt=I8, b_fmt=I8, a_name="weight_q", b_name="x")
_GEMM_I4 = {
    "float16": _Op("gemm", _FN, a_fmt=I4, b_fmt=F16, a_name="weight_q", b_name="x"),
    "bfloat16": _Op("gemm", _FN, a_fmt=I4, b_fmt=BF16, a_name="weight_q", b_name="x"),
    "float32": _Op("gemm", _FN, a_fmt=I4, b_fmt=F32, a_name="weight_q", b_name="x"),
}
_QUANTIZE_X_Q8_1 = _Op("quantize", _FN, fmt=Q8_1)
_GEMM_Q4 = {
    "q4_0": _Op("gemm", _FN, a_fmt=Q4_0, b_fmt=Q8_1, a_name="weight_q", b_name="x"),
    "q4_0x16": _Op("gemm", _FN, a_fmt=Q4_0X16, b_fmt=Q8_1, a_name="weight_q", b_name="x"),
}


def _forward(x, bias, weight_q, weight_scale, weight_zero_point, fmt: str, group_size: int, relu: bool,
             in_features: int):
    """y = act(x @ W^T + bias) in x's dtype, [..., out_features]."""
    dtype = _OUT.get(x.dtype)
    if dtype is None:
        raise TypeError(f"{_FN}: x must be float32, float16 or bfloat16, got {str(x.dtype).replace('torch.', '')}")
    shape = x.shape
    ndim = len(shape)
    if ndim < 1 or shape[-1] != in_features:
        raise ValueError(f"{_FN}: x must have shape [..., {in_features}] (in_features), got {list(shape)}")
    # The GEMMs below are the core calls qg.int8_matmul, qg.linear_int4 and
    # qg.linear_q4_0 make: for plain tensors their single-crossing entries
    # make them under the layer's name (None: the steps below do). int8 and
    # q4_0 quantize x and multiply in one core call (qg::linear_int8,
    # qg::linear_q4_0), the same bytes as the two steps.
    act = "relu" if relu else None
    if fmt == "int4" and torch_ops.plain_ok(x, weight_q, weight_scale, bias):
        y = _qg.fast_linear_int4(x, weight_q, weight_scale, weight_zero_point, group_size, bias, act, _FN)
        if y is not None:
            return y
    if fmt in _Q4_FORMATS and torch_ops.plain_ok(x, weight_q, bias):  # qg.linear_q4_0's one core call
        y = _qg.fast_linear_q4_0(x, weight_q, bias, _FN, relu)
        if y is not None:
            return y
    if fmt == "int8" and torch_ops.plain_ok(x, weight_q, weight_scale, bias):  # qg::linear_int8, one core call
        y = _qg.fast_linear_int8(x, weight_q, weight_scale, bias, _FN, relu)
        if y is not None:
            return y
    if ndim == 2:
        x2 = x
    else:
        tokens = 1
        for s in shape[:-1]:
            tokens = tokens * s
        x2 = x.reshape(tokens, in_features)
    if fmt == "int8":
        codes, x_scale, _ = _api._run_quantize_int(_QUANTIZE_X_I8, x2, "row")  # per token, symmetric
        if weight_scale.dtype != torch.float32:
            weight_scale = weight_scale.float()  # e.g. after module.half(): the epilogue's scales are float32
        y = None
        if torch_ops.plain_ok(codes, weight_q, x_scale, weight_scale, bias):
            y = _qg.fast_int8_matmul(codes, weight_q, x_scale, weight_scale, 1.0, None, None, bias, act, dtype, "nk",
                                     _FN, "weight_q", "x")
        if y is None:
            epi = _Epilogue(bias, dtype, True, weight_scale, x_scale, relu=relu)
            y = _api._run_gemm(_GEMM_I8, weight_q, codes, None, None, None, None, None, epi)
    elif fmt == "int4":
        epi = _Epilogue(bias, dtype, True, relu=relu, a_scales=weight_scale, a_zero_points=weight_zero_point,
                        group_size=group_size)
        y = _api._run_gemm(_GEMM_I4[dtype], weight_q, x2, None, None, in_features, None, None, epi)
    else:
        xq = _api._run_quantize(_QUANTIZE_X_Q8_1, x2, None, None)
        y = _api._run_gemm(_GEMM_Q4[fmt], weight_q, xq, None, None, None, None, None,
                           _Epilogue(bias, dtype, True, relu=relu))
    return y if ndim == 2 else y.reshape(*shape[:-1], y.shape[-1])


def _dequantized_weight(weight_q, weight_scale, weight_zero_point, fmt: str, group_size: int, in_features: int):
    """W_deq float32 [out_features, in_features], exactly the values the GEMM
    multiplies. Calls qg's registered operators directly: backward runs them
    under torch.compile's strict tracing of autograd.Function backwards, which
    admits torch operators but not the public functions' Python glue."""
    if fmt == "q4_0x16":
        weight_q = _q4_0_rows(weight_q)
    if fmt in _Q4_FORMATS:
        return torch_ops._dequantize_op(weight_q, "q4_0", in_features).reshape(weight_q.shape[0], in_features)
    scale = weight_scale.to(torch.float32)
    if fmt == "int8":
        return torch_ops._dequantize_int_op(weight_q, I8, in_features, "row", 0, scale, None, _FN)
    zp = None if weight_zero_point is None else weight_zero_point.to(torch.int32)
    return torch_ops._dequantize_int_op(weight_q, I4, in_features, "group", group_size, scale, zp, _FN)


def _q4_0_rows(w16: torch.Tensor) -> torch.Tensor:
    """q4_0x16 [G, nb, 288] -> Q4_0 [16 G, nb, 18] with torch ops (qg.repack's
    inverse; traceable): code byte 4c+i of row r at [c][r][i], then the 16
    rows' fp16 scales."""
    g, nb = w16.shape[0], w16.shape[1]
    codes = w16[..., :256].reshape(g, nb, 4, 16, 4).permute(0, 3, 1, 2, 4).reshape(g * 16, nb, 16)
    scales = w16[..., 256:].reshape(g, nb, 16, 2).permute(0, 2, 1, 3).reshape(g * 16, nb, 2)
    return torch.cat([scales, codes], dim=-1)


class _QuantizedLinearFn(torch.autograd.Function):
    """forward: the quantized GEMM; backward: straight-through to the input
    (grad_y @ W_deq), the bias's gradient, none for the frozen weights."""

    @staticmethod
    def forward(ctx, x, bias, weight_q, weight_scale, weight_zero_point, fmt, group_size, relu, in_features):
        y = _forward(x, bias, weight_q, weight_scale, weight_zero_point, fmt, group_size, relu, in_features)
        ctx.save_for_backward(weight_q, weight_scale, weight_zero_point, y if relu else None)
        ctx.fmt, ctx.group_size, ctx.relu, ctx.in_features = fmt, group_size, relu, in_features
        ctx.x_dtype = x.dtype
        ctx.bias_dtype = None if bias is None else bias.dtype
        return y

    @staticmethod
    def backward(ctx, grad_y):
        weight_q, weight_scale, weight_zero_point, y = ctx.saved_tensors
        if ctx.relu:
            grad_y = grad_y * (y > 0).to(grad_y.dtype)  # d relu(z) / dz = 1 where z > 0, i.e. where y > 0
        out_features = grad_y.shape[-1]
        grad_x = grad_bias = None
        if ctx.needs_input_grad[0]:
            w = _dequantized_weight(weight_q, weight_scale, weight_zero_point, ctx.fmt, ctx.group_size,
                                    ctx.in_features)
            grad_x = (grad_y.to(torch.float32) @ w).to(ctx.x_dtype)
        if ctx.needs_input_grad[1]:
            grad_bias = grad_y.reshape(-1, out_features).to(torch.float32).sum(0).to(ctx.bias_dtype)
        return grad_x, grad_bias, None, None, None, None, None, None, None


class QuantizedLinear(torch.nn.Module):
    """y = act(x @ W^T + bias) with a frozen quantized weight W.

    QuantizedLinear(in_features, out_features, bias=True, *, weight_format="int8",
    group_size=128, activation=None, device=None, dtype=None) makes a layer
    whose weight is nn.Linear's default initialisation, quantized; usually
    you build one from a trained layer with QuantizedLinear.from_linear.

    weight_format: "int8" (per-output-channel int8 weights x per-token int8
    activations), "int4" (group-wise int4 weights, float activations;
    in_features must be a multiple of group_size), "q4_0" (ggml Q4_0
    weights x Q8_1 activations; in_features a multiple of 32) or "q4_0x16"
    (the Q4_0 codes repacked for qg's CPU kernels, qg.repack: CPU only,
    out_features also a multiple of 16).
    activation: None or "relu" (fused into the GEMM).
    Buffers (state_dict): weight_q (int8 [out, in] | uint8 [out, ceil(in/2)]
    | uint8 [out, in/32, 18] | uint8 [out/16, in/32, 288]), weight_scale
    (float32 [out] | float32 or float16 [out, in/group_size]; absent for
    q4_0 and q4_0x16), weight_zero_point
    (int4 only, optional: int8/int32 [out, in/group_size]); bias is a
    Parameter [out] (dtype: `dtype`, default float32) or None.
    forward(x): x float32 / float16 / bfloat16 [..., in_features] on the
    layer's device -> [..., out_features] in x's dtype. The weights get no
    gradient; the input gets grad_y @ W_deq (straight-through), the bias its
    ordinary gradient.
    """

    def __init__(self, in_features, out_features, bias=True, *, weight_format="int8", group_size=128,
                 activation=None, device=None, dtype=None):
        super().__init__()
        self._setup(in_features, out_features, weight_format, group_size, activation)
        w = torch.empty(self.out_features, self.in_features, device=device, dtype=torch.float32)
        torch.nn.init.kaiming_uniform_(w, a=math.sqrt(5))  # nn.Linear's default
        self._register_weight(w)
        if bias:
            bound = 1 / math.sqrt(self.in_features) if self.in_features > 0 else 0.0
            b = torch.empty(self.out_features, device=device, dtype=dtype or torch.float32).uniform_(-bound, bound)
            self.bias = torch.nn.Parameter(b)
        else:
            self.register_parameter("bias", None)

    def _setup(self, in_features, out_features, weight_format, group_size, activation):
        from ._args import int_arg

        self.in_features = int_arg(in_features, "in_features", _FN)
        self.out_features = int_arg(out_features, "out_features", _FN)
        if self.in_features < 0 or self.out_features < 0:
            raise ValueError(f"{_FN}: in_features and out_features must be >= 0, got {in_features}, {out_features}")
        if weight_format not in _FORMATS:
            raise ValueError(f"{_FN}: weight_format must be one of {_FORMATS}, got {weight_format!r}")
        if activation not in (None, "relu"):
            raise ValueError(f"{_FN}: activation must be None or 'relu', got {activation!r}")
        self.weight_format = weight_format
        self.activation = activation
        self.group_size = int_arg(group_size, "group_size", _FN)
        if weight_format == "int4" and (self.group_size <= 0 or self.in_features % self.group_size != 0):
            raise ValueError(
                f"{_FN}: weight_format='int4' needs in_features ({self.in_features}) to be a multiple of group_size "
                f"({self.group_size}); pass a group_size that divides it (e.g. 32, 64 or 128)"
            )
        if weight_format in _Q4_FORMATS and self.in_features % _Q4_0_BLOCK != 0:
            raise ValueError(f"{_FN}: weight_format={weight_format!r} needs in_features ({self.in_features}) to be a "
                             f"multiple of {_Q4_0_BLOCK}, the Q4_0 block size; pad the layer or use 'int8' or 'int4'")
        if weight_format == "q4_0x16" and self.out_features % 16 != 0:
            raise ValueError(f"{_FN}: weight_format='q4_0x16' needs out_features ({self.out_features}) to be a "
                             "multiple of 16, the rows of one q4_0x16 block; use 'q4_0'")

    def _register_weight(self, w: torch.Tensor) -> None:
        """Quantizes a float weight [out, in] into the buffers."""
        w = w.detach()
        if tuple(w.shape) != (self.out_features, self.in_features):
            raise ValueError(f"{_FN}: the weight must have shape [{self.out_features}, {self.in_features}], "
                             f"got {list(w.shape)}")
        scale = zero_point = None
        if self.weight_format == "int8":
            q, scale = quantize_tensor(w, bits=8, granularity="channel", axis=0)
        elif self.weight_format == "int4":
            q, scale = quantize_tensor(w, bits=4, granularity="group", group_size=self.group_size)
        else:
            from ._api import quantize_q4_0, repack

            if self.weight_format == "q4_0x16" and w.device.type != "cpu":
                raise ValueError(f"{_FN}: weight_format='q4_0x16' is the layout of qg's CPU kernels; the weight is on "
                                 f"{w.device}: use 'q4_0' there, or build the layer on the CPU")
            q = quantize_q4_0(w.to(torch.float32))
            if self.weight_format == "q4_0x16":
                q = repack(q, "q4_0x16")
        self.register_buffer("weight_q", q)
        self.register_buffer("weight_scale", scale)
        self.register_buffer("weight_zero_point", zero_point)

    @classmethod
    def from_linear(cls, linear: torch.nn.Linear, weight_format="int8", group_size=128, activation=None):
        """A QuantizedLinear holding linear's weight quantized (int8: per output
        channel, symmetric; int4: groups of group_size along in_features,
        symmetric; q4_0: ggml's Q4_0; q4_0x16: that, repacked for the CPU) and
        a copy of its bias, on its device."""
        if not isinstance(linear, torch.nn.Linear):
            raise TypeError(f"{_FN}.from_linear: linear must be a torch.nn.Linear, got {type(linear).__name__}")
        m = cls.__new__(cls)
        torch.nn.Module.__init__(m)
        m._setup(linear.in_features, linear.out_features, weight_format, group_size, activation)
        m._register_weight(linear.weight.to(torch.float32))
        if linear.bias is not None:
            m.bias = torch.nn.Parameter(linear.bias.detach().clone())
        else:
            m.register_parameter("bias", None)
        return m

    def dequantized_weight(self) -> torch.Tensor:
        """The float32 weight [out_features, in_features] the layer multiplies by."""
        return _dequantized_weight(self.weight_q, self.weight_scale, self.weight_zero_point, self.weight_format,
                                   self.group_size, self.in_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # The registries nn.Module.__getattr__ would search: that Python
        # fallback costs about a microsecond for each name, on every call.
        buffers, bias = self._buffers, self._parameters["bias"]
        args = (x, bias, buffers["weight_q"], buffers["weight_scale"], buffers["weight_zero_point"],
                self.weight_format, self.group_size, self.activation == "relu", self.in_features)
        if torch.is_grad_enabled() and (x.requires_grad or (bias is not None and bias.requires_grad)):
            return _QuantizedLinearFn.apply(*args)
        return _forward(*args)

    def extra_repr(self) -> str:
        group = f", group_size={self.group_size}" if self.weight_format == "int4" else ""
        act = f", activation={self.activation!r}" if self.activation else ""
        return (f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}, "
                f"weight_format={self.weight_format!r}{group}{act}")
