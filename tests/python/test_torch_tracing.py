# SPDX-License-Identifier: MIT
"""qg under torch's tracers: torch.compile (fullgraph, eager and inductor
backends), torch.jit.trace, torch.export (strict and non-strict), make_fx and
FakeTensorMode record qg's registered operators (qg::quantize,
qg::dequantize, qg::gemm) and reproduce the eager result bit for bit."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import qg
from conftest import needs_torch, needs_torch_cuda

pytestmark = [needs_torch, pytest.mark.filterwarnings("ignore:.*is deprecated:DeprecationWarning")]

DEVICES = ["cpu", pytest.param("cuda", marks=needs_torch_cuda)]


@pytest.fixture(autouse=True)
def _fresh_dynamo(fresh_dynamo):
    """Every test here compiles from a clean torch._dynamo cache (conftest)."""


def gemm_fn(w, a):
    return qg.gemm_q4_0_q8_1(qg.quantize_q4_0(w), qg.quantize_q8_1(a))


def roundtrip_fn(x):
    return qg.dequantize_q4_0(qg.quantize_q4_0(x))


def _tensors(rng, device, *shapes):
    import torch

    return [torch.from_numpy(rng.standard_normal(s).astype(np.float32)).to(device) for s in shapes]


def _assert_same(got, want):
    import torch

    assert got.dtype == want.dtype and got.shape == want.shape and got.device == want.device
    assert torch.equal(got, want), (got - want).abs().max()


# ----------------------------------------------------------------- torch.compile
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("backend", ["eager", "inductor"])
def test_compile_fullgraph_gemm(backend, device, rng):
    import torch

    w, a = _tensors(rng, device, (40, 96), (3, 96))
    explanation = torch._dynamo.explain(gemm_fn)(w, a)
    assert explanation.graph_break_count == 0, explanation.break_reasons
    assert explanation.graph_count == 1
    compiled = torch.compile(gemm_fn, backend=backend, fullgraph=True)
    _assert_same(compiled(w, a), gemm_fn(w, a))
    w2, a2 = _tensors(rng, device, (40, 96), (3, 96))  # same shapes, new values: the graph is reused
    _assert_same(compiled(w2, a2), gemm_fn(w2, a2))


@pytest.mark.parametrize("device", DEVICES)
def test_compile_fullgraph_quantize_dequantize(device, rng):
    import torch

    (x,) = _tensors(rng, device, (5, 4, 64))
    explanation = torch._dynamo.explain(roundtrip_fn)(x)
    assert explanation.graph_break_count == 0, explanation.break_reasons
    compiled = torch.compile(roundtrip_fn, backend="eager", fullgraph=True)
    _assert_same(compiled(x), roundtrip_fn(x))
    # the graph holds qg's operators, not a trace through qg's Python code
    ops = [str(n.target) for g in explanation.graphs for n in g.graph.nodes if n.op == "call_function"]
    assert any("qg.quantize" in o for o in ops) and any("qg.dequantize" in o for o in ops), ops


def test_compile_dynamic_shapes(rng):
    import torch

    compiled = torch.compile(gemm_fn, backend="eager", fullgraph=True, dynamic=True)
    for m, n, k in ((8, 2, 64), (17, 5, 96), (3, 1, 32)):
        w, a = _tensors(rng, "cpu", (m, k), (n, k))
        _assert_same(compiled(w, a), gemm_fn(w, a))


def test_compile_out_and_mnk(rng):
    """out= under torch.compile: the operator, then out.copy_(result)."""
    import torch

    def f(w, a, out):
        return qg.gemm_q4_0_q8_1(qg.quantize_q4_0(w), qg.quantize_q8_1(a), 16, 3, 64, out=out)

    w, a = _tensors(rng, "cpu", (16, 64), (3, 64))
    out = torch.full((16, 3), float("nan"))
    r = torch.compile(f, backend="eager", fullgraph=True)(w, a, out)
    assert r is out
    _assert_same(out, gemm_fn(w, a))


def test_compile_error_names_qg(rng):
    """A bad shape is caught by the operator's fake implementation with qg's message."""
    import torch

    (x,) = _tensors(rng, "cpu", (2, 50))
    with pytest.raises(Exception, match=r"qg\.quantize_q4_0: K=50 .*multiple of 32") as e:
        torch.compile(roundtrip_fn, backend="eager", fullgraph=True)(x)
    assert isinstance(e.value, (ValueError, RuntimeError))


@pytest.mark.parametrize("tracer", ["compile", "jit_trace"])
def test_generic_path_is_traced(tracer, rng, monkeypatch):
    """A torch call that reaches the generic path under a tracer (here: no
    tensor type registered for the fast path yet, as in a process whose first
    qg call is traced) is recorded as qg's operator too, never run eagerly into
    a buffer the trace does not see (jit.trace used to return uninitialised
    memory; torch.compile(fullgraph=True) used to fail on it)."""
    import torch

    from qg import _api

    monkeypatch.setattr(_api, "_FAST_TYPES", {})
    w, a = _tensors(rng, "cpu", (16, 64), (3, 64))
    if tracer == "compile":
        got = torch.compile(gemm_fn, backend="eager", fullgraph=True)(w, a)
    else:
        traced = torch.jit.trace(gemm_fn, (w, a), check_trace=False)
        assert "qg::gemm" in str(traced.graph), traced.graph
        w, a = _tensors(rng, "cpu", (16, 64), (3, 64))
        got = traced(w, a)
    _assert_same(got, gemm_fn(w, a))


_FRESH = textwrap.dedent("""
    import torch, qg
    torch.manual_seed(0)
    w, a = torch.randn(16, 64), torch.randn(3, 64)
    def f(w, a):
        return qg.gemm_q4_0_q8_1(qg.quantize_q4_0(w), qg.quantize_q8_1(a))
    traced = torch.jit.trace(f, (w, a), check_trace=False)
    assert "qg::gemm" in str(traced.graph), traced.graph
    w, a = torch.randn(16, 64), torch.randn(3, 64)
    got, want = traced(w, a), f(w, a)
    assert torch.equal(got, want), (got, want)
    print("ok")
""")


def test_first_call_in_process_traced():
    """The same in a fresh process, where qg.torch_ops is not even imported when tracing starts."""
    p = subprocess.run([sys.executable, "-c", _FRESH], capture_output=True, text=True, timeout=300,
                       env=dict(os.environ, PYTHONWARNINGS="ignore"))
    assert p.returncode == 0 and "ok" in p.stdout, p.stdout[-3000:] + p.stderr[-3000:]


# -------------------------------------------------------------- torch.jit.trace
@pytest.mark.parametrize("device", DEVICES)
def test_jit_trace_gemm(device, rng):
    import torch

    w, a = _tensors(rng, device, (24, 64), (2, 64))
    traced = torch.jit.trace(gemm_fn, (w, a))
    text = str(traced.graph)
    assert "qg::quantize" in text and "qg::gemm" in text, text
    assert "aten::empty" not in text, text  # nothing allocated outside qg's operators
    for _ in range(2):
        w, a = _tensors(rng, device, (24, 64), (2, 64))
        _assert_same(traced(w, a), gemm_fn(w, a))


def test_jit_trace_quantize_dequantize(rng):
    import torch

    (x,) = _tensors(rng, "cpu", (6, 128))
    traced = torch.jit.trace(roundtrip_fn, (x,))
    text = str(traced.graph)
    assert "qg::quantize" in text and "qg::dequantize" in text, text
    (x2,) = _tensors(rng, "cpu", (6, 128))
    _assert_same(traced(x2), roundtrip_fn(x2))


def test_jit_trace_out(rng):
    import torch

    def f(x, out):
        return qg.quantize_q8_1(x, out=out)

    (x,) = _tensors(rng, "cpu", (4, 64))
    traced = torch.jit.trace(f, (x, torch.empty(4, 2, 36, dtype=torch.uint8)))
    assert "qg::quantize" in str(traced.graph)
    (x2,) = _tensors(rng, "cpu", (4, 64))
    out = torch.zeros(4, 2, 36, dtype=torch.uint8)
    traced(x2, out)
    _assert_same(out, qg.quantize_q8_1(x2))


def test_jit_trace_stream_is_an_error(rng):
    """A stream cannot be recorded in a trace: a clear error, not a trace that ignores it."""
    import torch

    (x,) = _tensors(rng, "cpu", (4, 64))
    with pytest.raises(ValueError, match=r"^qg\.quantize_q4_0: stream= cannot be recorded"):
        torch.jit.trace(lambda t: qg.quantize_q4_0(t, stream=0), (x,))


# ----------------------------------------------------------------- torch.export
class _Gemm:
    @staticmethod
    def module():
        import torch

        class M(torch.nn.Module):
            def forward(self, w, a):
                return gemm_fn(w, a)

        return M()


@pytest.mark.parametrize("strict", [False, True], ids=["non_strict", "strict"])
def test_export(strict, rng):
    import torch

    w, a = _tensors(rng, "cpu", (16, 64), (3, 64))
    ep = torch.export.export(_Gemm.module(), (w, a), strict=strict)
    targets = [str(n.target) for n in ep.graph.nodes if n.op == "call_function"]
    assert targets == ["qg.quantize.default", "qg.quantize.default", "qg.gemm.default"], targets
    w2, a2 = _tensors(rng, "cpu", (16, 64), (3, 64))
    _assert_same(ep.module()(w2, a2), gemm_fn(w2, a2))


def test_export_dynamic_shapes(rng):
    import torch

    w, a = _tensors(rng, "cpu", (16, 64), (3, 64))
    dims = ({0: torch.export.Dim("M")}, {0: torch.export.Dim("N")})
    ep = torch.export.export(_Gemm.module(), (w, a), dynamic_shapes=dims)
    w2, a2 = _tensors(rng, "cpu", (7, 64), (5, 64))
    _assert_same(ep.module()(w2, a2), gemm_fn(w2, a2))


# ------------------------------------------------------- make_fx, FakeTensorMode
def test_make_fx_records_qg_ops(rng):
    """make_fx traces real tensors under a TorchDispatchMode: qg must go through its operators."""
    import torch
    from torch.fx.experimental.proxy_tensor import make_fx

    w, a = _tensors(rng, "cpu", (8, 64), (2, 64))
    gm = make_fx(gemm_fn)(w, a)
    targets = [str(n.target) for n in gm.graph.nodes if n.op == "call_function"]
    assert targets == ["qg.quantize.default", "qg.quantize.default", "qg.gemm.default"], targets
    w2, a2 = _tensors(rng, "cpu", (8, 64), (2, 64))
    _assert_same(gm(w2, a2), gemm_fn(w2, a2))


def test_fake_tensor_mode_shapes():
    import torch
    from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode

    with FakeTensorMode():
        x = torch.empty(3, 5, 96)
        q = qg.quantize_q8_1(x)
        assert isinstance(q, FakeTensor) and q.shape == (3, 5, 3, 36) and q.dtype == torch.uint8
        y = qg.dequantize_q8_1(q)
        assert y.shape == (3, 5, 96) and y.dtype == torch.float32
        c = qg.gemm_q4_0_q8_1(qg.quantize_q4_0(torch.empty(7, 96)), q)
        assert c.shape == (7, 15) and c.dtype == torch.float32
        with pytest.raises(ValueError, match=r"^qg\.quantize_q4_0: K=50"):
            qg.quantize_q4_0(torch.empty(2, 50))
        with pytest.raises(TypeError, match=r"^qg\.quantize_q4_0: x must be float32.*float64"):
            qg.quantize_q4_0(torch.empty(2, 64, dtype=torch.float64))
        with pytest.raises(ValueError, match=r"^qg\.gemm_q4_0_q8_1: weight_q has 3 blocks .* activation_q has 2"):
            qg.gemm_q4_0_q8_1(qg.quantize_q4_0(torch.empty(7, 96)), qg.quantize_q8_1(torch.empty(2, 64)))
        with pytest.raises(ValueError, match=r"^qg\.dequantize_q8_1: K=64 does not match"):
            qg.dequantize_q8_1(q, 64)
        with pytest.raises(ValueError, match=r"^qg\.gemm_q4_0_q8_1: M=8 does not match weight_q \(M=7\)"):
            qg.gemm_q4_0_q8_1(qg.quantize_q4_0(torch.empty(7, 96)), q, 8)
        with pytest.raises(TypeError, match=r"^qg\.dequantize_q4_0: xq must be uint8 \(packed q4_0 blocks\)"):
            qg.dequantize_q4_0(torch.empty(2, 2, 18))
