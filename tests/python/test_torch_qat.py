# SPDX-License-Identifier: MIT
"""qg.torch.fake_quantize: forward = dequantize(quantize(x)) bit for bit,
backward = straight-through (dL/dx = dL/dy), also under torch.compile; and
the qg.torch module itself."""
from __future__ import annotations

import sys

import numpy as np
import pytest

import qg
from conftest import needs_torch, needs_torch_cuda

pytestmark = [needs_torch, pytest.mark.filterwarnings("ignore:.*is deprecated:DeprecationWarning")]

FMTS = ["q4_0", "q8_0", "q8_1"]
DEVICES = ["cpu", pytest.param("cuda", marks=needs_torch_cuda)]


@pytest.fixture(autouse=True)
def _fresh_dynamo(fresh_dynamo):
    """Every test here compiles from a clean torch._dynamo cache (conftest)."""


def _x(rng, shape, device="cpu", dtype=None):
    import torch

    t = torch.from_numpy((rng.standard_normal(shape) * 3).astype(np.float32)).to(device)
    return t if dtype is None else t.to(dtype)


def _reference(x, fmt):
    """dequantize(quantize(x)) through qg's public functions, in x's dtype."""
    q = getattr(qg, f"quantize_{fmt}")(x)
    return getattr(qg, f"dequantize_{fmt}")(q).to(x.dtype)


def test_qg_torch_module():
    import torch

    import qg.torch as qt
    from qg import torch_ops

    assert qt.__name__ == "qg.torch" and qg.torch is qt
    assert qt.fake_quantize is torch_ops.fake_quantize
    assert "fake_quantize" in qt.__all__ and qt.fake_quantize.__doc__
    # qg's own modules still see the real torch, not qg.torch
    assert torch_ops.torch is sys.modules["torch"] is torch
    assert torch.__name__ == "torch" and hasattr(torch, "Tensor")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("fmt", FMTS)
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_forward_is_dequantize_of_quantize(fmt, dtype, device, rng):
    import torch

    from qg.torch import fake_quantize

    x = _x(rng, (3, 5, 96), device, getattr(torch, dtype))
    y = fake_quantize(x, fmt)
    assert y.dtype == x.dtype and y.shape == x.shape and y.device == x.device
    assert torch.equal(y, _reference(x, fmt))
    assert not torch.equal(y, x)  # it does quantize
    if fmt == "q8_0":
        assert torch.equal(fake_quantize(x), y)  # the default format


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("fmt", FMTS)
def test_backward_is_straight_through(fmt, device, rng):
    import torch

    from qg.torch import fake_quantize

    x = _x(rng, (4, 64), device).requires_grad_()
    y = fake_quantize(x, fmt)
    assert y.requires_grad and y.grad_fn is not None
    upstream = _x(rng, (4, 64), device)
    y.backward(upstream)
    assert torch.equal(x.grad, upstream)
    # composed with other ops: d/dx sum(fake_quantize(x) * c) = c
    x.grad = None
    c = _x(rng, (4, 64), device)
    (fake_quantize(x, fmt) * c).sum().backward()
    assert torch.equal(x.grad, c)


def test_gradcheck_straight_through(rng):
    """The registered autograd formula is what torch.autograd.grad sees, also for bf16 and a non-contiguous x."""
    import torch

    from qg.torch import fake_quantize

    x = _x(rng, (64, 6)).t().to(torch.bfloat16).requires_grad_()  # [6, 64], non-contiguous
    assert not x.is_contiguous()
    y = fake_quantize(x, "q4_0")
    assert torch.equal(y, _reference(x.detach().contiguous(), "q4_0"))
    g = _x(rng, (6, 64)).to(torch.bfloat16)
    (gx,) = torch.autograd.grad(y, x, g)
    assert torch.equal(gx, g)


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_under_torch_compile(backend, rng):
    import torch

    from qg.torch import fake_quantize

    def loss_fn(x, w):
        return (fake_quantize(x, "q4_0") * w).sum()

    x0, w = _x(rng, (8, 64)), _x(rng, (8, 64))
    explanation = torch._dynamo.explain(loss_fn)(x0, w)
    assert explanation.graph_break_count == 0, explanation.break_reasons
    compiled = torch.compile(loss_fn, backend=backend, fullgraph=True)
    x_eager, x_comp = x0.clone().requires_grad_(), x0.clone().requires_grad_()
    le, lc = loss_fn(x_eager, w), compiled(x_comp, w)
    le.backward()
    lc.backward()
    assert torch.equal(lc.detach(), le.detach())
    assert torch.equal(x_comp.grad, w) and torch.equal(x_eager.grad, w)


@pytest.mark.parametrize("device", DEVICES)
def test_under_torch_compile_inductor(device, rng):
    """The default backend: forward bit for bit, gradient straight through."""
    import torch

    from qg.torch import fake_quantize

    def f(x):
        return fake_quantize(x, "q8_1")

    x = _x(rng, (8, 96), device).requires_grad_()
    y = torch.compile(f, fullgraph=True)(x)
    assert torch.equal(y.detach(), _reference(x.detach(), "q8_1"))
    g = _x(rng, (8, 96), device)
    y.backward(g)
    assert torch.equal(x.grad, g)


def test_quantize_still_refuses_grad_with_fake_quantize_hint(rng):
    x = _x(rng, (2, 64)).requires_grad_()
    with pytest.raises(RuntimeError, match=r"qg\.torch\.fake_quantize\(x, 'q4_0'\)"):
        qg.quantize_q4_0(x)


def test_bad_arguments(rng):
    import torch

    from qg.torch import fake_quantize

    x = _x(rng, (2, 64))
    with pytest.raises(ValueError, match=r"^qg\.torch\.fake_quantize: fmt must be one of .*'q4_0'.*got 'q5_0'"):
        fake_quantize(x, "q5_0")
    with pytest.raises(ValueError, match=r"^qg\.torch\.fake_quantize: fmt"):
        fake_quantize(x, 0)
    with pytest.raises(TypeError, match=r"^qg\.torch\.fake_quantize: x must be a torch\.Tensor, got numpy"):
        fake_quantize(x.numpy())
    with pytest.raises(TypeError, match=r"^qg\.torch\.fake_quantize: x must be float32, float16 or bfloat16.*float64"):
        fake_quantize(x.double())
    with pytest.raises(ValueError, match=r"^qg\.torch\.fake_quantize: K=48 .*multiple of 32"):
        fake_quantize(torch.zeros(2, 48))
