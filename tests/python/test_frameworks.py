# SPDX-License-Identifier: MIT
"""Framework in = framework out, on the caller's device and stream; CUDA
streams, graphs, cupy streams, autograd inputs."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import qg
import qg_ref as R
from conftest import HAS_JAX, HAS_TORCH, Framework, needs_cupy_cuda, needs_jax, needs_torch, needs_torch_cuda

FUNCS_Q = [("q4_0", qg.quantize_q4_0, qg.dequantize_q4_0, 18), ("q8_0", qg.quantize_q8_0, qg.dequantize_q8_0, 34),
           ("q8_1", qg.quantize_q8_1, qg.dequantize_q8_1, 36)]


@pytest.mark.parametrize("fmt,quant,dequant,nbytes", FUNCS_Q, ids=[f[0] for f in FUNCS_Q])
def test_each_function_returns_framework_array(fmt, quant, dequant, nbytes, fw, rng):
    x = rng.standard_normal((3, 4, 64)).astype(np.float32)
    q = quant(fw.to(x))
    fw.check(q, np.uint8, (3, 4, 2, nbytes))
    np.testing.assert_array_equal(fw.to_numpy(q), quant(x))
    y = dequant(q)
    fw.check(y, np.float32, (3, 4, 64))
    y = dequant(q, 64)
    fw.check(y, np.float32, (3, 4, 64))
    np.testing.assert_array_equal(fw.to_numpy(y), dequant(quant(x)))


def test_gemm_returns_framework_array(fw, rng):
    w = rng.standard_normal((5, 96)).astype(np.float32)
    a = rng.standard_normal((2, 3, 96)).astype(np.float32)
    wq, aq = qg.quantize_q4_0(fw.to(w)), qg.quantize_q8_1(fw.to(a))
    c = qg.gemm_q4_0_q8_1(wq, aq)
    fw.check(c, np.float32, (5, 6))
    assert R.nmse(fw.to_numpy(c), R.gemm_ref(qg.quantize_q4_0(w), qg.quantize_q8_1(a))) <= 1e-6


@needs_jax
def test_jax_returns_jax_array(rng):
    import jax

    x = jax.device_put(rng.standard_normal((4, 64)).astype(np.float32), jax.devices("cpu")[0])
    for r in (qg.quantize_q4_0(x), qg.quantize_q8_1(x), qg.dequantize_q4_0(qg.quantize_q4_0(x)),
              qg.gemm_q4_0_q8_1(qg.quantize_q4_0(x), qg.quantize_q8_1(x))):
        assert isinstance(r, jax.Array)
        assert not isinstance(r, np.ndarray)


@needs_jax
def test_jax_result_stays_on_input_device():
    """A JAX array on one device gives a result on that device, not on JAX's
    default device (on a GPU machine: a jax-cpu input must not come back on
    the GPU). Run in a subprocess with two host devices."""
    code = textwrap.dedent("""
        import jax, numpy as np, qg
        cpus = jax.devices("cpu")
        assert len(cpus) == 2, cpus
        x = np.random.default_rng(0).standard_normal((4, 64)).astype(np.float32)
        with jax.default_device(cpus[1]):
            xa = jax.device_put(x, cpus[0])
            for r in (qg.quantize_q4_0(xa), qg.dequantize_q4_0(jax.device_put(qg.quantize_q4_0(x), cpus[0]))):
                assert r.devices() == {cpus[0]}, f"input on {cpus[0]}, result on {r.devices()}"
        print("ok")
    """)
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=2", JAX_PLATFORMS="cpu")
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and "ok" in p.stdout, p.stdout + p.stderr


@needs_torch
@pytest.mark.parametrize("fn", [qg.quantize_q4_0, qg.quantize_q8_0, qg.quantize_q8_1])
def test_torch_requires_grad_input_raises(fn, rng):
    """Packed codes cannot carry a gradient: the call refuses instead of silently dropping the graph."""
    import torch

    x = torch.from_numpy(rng.standard_normal((4, 64)).astype(np.float32)).requires_grad_()
    with pytest.raises(RuntimeError, match=r"^qg\.quantize_q\d_\d: x requires grad.*detach\(\).*fake_quantize"):
        fn(x)
    with pytest.raises(RuntimeError, match="requires grad"):
        fn(x, out=fn(x.detach()))  # the generic path applies the same rule
    assert x.grad is None and x.requires_grad  # input untouched
    # Where no graph is being recorded there is nothing to lose.
    with torch.no_grad():
        np.testing.assert_array_equal(fn(x).numpy(), fn(x.detach().numpy()))
    np.testing.assert_array_equal(fn(x.detach()).numpy(), fn(x.detach().numpy()))


# ------------------------------------------------------------------ CUDA streams
@needs_torch_cuda
def test_torch_non_default_stream(rng):
    import torch

    w = torch.from_numpy(rng.standard_normal((256, 1024)).astype(np.float32)).cuda()
    a = torch.from_numpy(rng.standard_normal((8, 1024)).astype(np.float32)).cuda()
    want = qg.gemm_q4_0_q8_1(qg.quantize_q4_0(w), qg.quantize_q8_1(a)).cpu().numpy()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        a2 = a * 1.0  # produced on s: qg must queue behind it on s
        got = qg.gemm_q4_0_q8_1(qg.quantize_q4_0(w), qg.quantize_q8_1(a2))
    s.synchronize()
    np.testing.assert_array_equal(got.cpu().numpy(), want)


@needs_torch_cuda
def test_torch_stream_keyword(rng):
    import torch

    x = torch.from_numpy(rng.standard_normal((64, 512)).astype(np.float32)).cuda()
    want = qg.quantize_q8_1(x.cpu()).numpy()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    got = qg.quantize_q8_1(x, stream=s)
    s.synchronize()
    np.testing.assert_array_equal(got.cpu().numpy(), want)
    got = qg.quantize_q8_1(x, stream=s.cuda_stream)  # raw int handle
    s.synchronize()
    np.testing.assert_array_equal(got.cpu().numpy(), want)
    wq = qg.quantize_q4_0(x)
    c = qg.gemm_q4_0_q8_1(wq, got, stream=s)
    s.synchronize()
    np.testing.assert_allclose(c.cpu().numpy(), qg.gemm_q4_0_q8_1(wq.cpu(), got.cpu()).numpy(), rtol=1e-5, atol=1e-3)


@needs_torch_cuda
def test_torch_cuda_graph_capture_and_replay(rng):
    import torch

    M, N, K = 512, 4, 2048
    w = torch.from_numpy(rng.standard_normal((M, K)).astype(np.float32)).cuda()
    wq = qg.quantize_q4_0(w)
    a_static = torch.zeros((N, K), device="cuda")
    c_static = torch.empty((M, N), device="cuda")
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):  # warm up outside capture
        qg.gemm_q4_0_q8_1(wq, qg.quantize_q8_1(a_static), out=c_static)
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        aq = qg.quantize_q8_1(a_static)
        qg.gemm_q4_0_q8_1(wq, aq, out=c_static)
    for _ in range(3):
        a_new = torch.from_numpy(rng.standard_normal((N, K)).astype(np.float32)).cuda()
        a_static.copy_(a_new)  # update the input in place, then replay
        g.replay()
        torch.cuda.synchronize()
        eager = qg.gemm_q4_0_q8_1(wq, qg.quantize_q8_1(a_new))
        torch.cuda.synchronize()
        np.testing.assert_array_equal(c_static.cpu().numpy(), eager.cpu().numpy())


@needs_torch_cuda
def test_torch_device_guard_other_device(rng):
    """Tensor on cuda:1 while cuda:0 is current: correct result (reliability #10)."""
    import torch

    if torch.cuda.device_count() < 2 or len(qg.cuda_devices()) < 2:
        pytest.skip("needs two GPUs")
    x = torch.from_numpy(rng.standard_normal((16, 256)).astype(np.float32))
    with torch.cuda.device(0):
        q = qg.quantize_q4_0(x.to("cuda:1"))
        assert q.device == torch.device("cuda:1")
        np.testing.assert_array_equal(q.cpu().numpy(), qg.quantize_q4_0(x).numpy())
        assert torch.cuda.current_device() == 0


@needs_torch_cuda
def test_torch_gemms_on_other_device(rng):
    """Every decode and prefill GEMM on cuda:1 while cuda:0 is current: the
    kernels' occupancy queries and launches are on cuda:1, the result is the
    CPU's, and cuda:0 is current again after each call."""
    import torch

    if torch.cuda.device_count() < 2 or len(qg.cuda_devices()) < 2:
        pytest.skip("needs two GPUs")
    M, K = 512, 4096
    w = rng.standard_normal((M, K)).astype(np.float32)
    wq = qg.quantize_q4_0(w)
    codes = rng.integers(-8, 8, size=(M, K), dtype=np.int8)
    packed = qg.pack_int4(codes)
    scales = (rng.random((M, K // 128)) + 0.5).astype(np.float16)
    with torch.cuda.device(0):
        for n in (1, 3, 8, 64):
            x = torch.from_numpy(rng.standard_normal((n, K)).astype(np.float32))
            got = qg.gemm_q4_0_q8_1(torch.from_numpy(wq).to("cuda:1"), qg.quantize_q8_1(x.to("cuda:1")))
            assert got.device == torch.device("cuda:1") and torch.cuda.current_device() == 0
            want = qg.gemm_q4_0_q8_1(wq, qg.quantize_q8_1(x.numpy()))
            assert R.nmse(got.cpu().numpy(), want) <= 1e-6, n
            y = qg.linear_q4_0(x.to("cuda:1"), torch.from_numpy(wq).to("cuda:1"))
            assert y.device == torch.device("cuda:1") and torch.cuda.current_device() == 0
            assert R.nmse(y.cpu().numpy(), qg.linear_q4_0(x.numpy(), wq)) <= 1e-6, n
            xb = x.to(torch.bfloat16)
            y4 = qg.linear_int4(xb.to("cuda:1"), torch.from_numpy(packed).to("cuda:1"),
                                torch.from_numpy(scales).to("cuda:1"))
            assert y4.device == torch.device("cuda:1") and torch.cuda.current_device() == 0
            want4 = qg.linear_int4(xb.float().numpy(), packed, scales)
            assert R.nmse(y4.float().cpu().numpy(), want4) <= 1e-5, n


@needs_cupy_cuda
def test_cupy_current_stream(rng):
    import cupy

    x = rng.standard_normal((128, 1024)).astype(np.float32)
    want = qg.quantize_q8_1(x)
    s = cupy.cuda.Stream(non_blocking=True)
    with s:
        xd = cupy.asarray(x) * 1.0  # produced on s
        q = qg.quantize_q8_1(xd)
        wq = qg.quantize_q4_0(xd)
        c = qg.gemm_q4_0_q8_1(wq, q)
    s.synchronize()
    assert isinstance(q, cupy.ndarray)
    np.testing.assert_array_equal(cupy.asnumpy(q), want)
    assert R.nmse(cupy.asnumpy(c), R.gemm_ref(qg.quantize_q4_0(x), want)) <= 1e-6
    q2 = qg.quantize_q8_1(cupy.asarray(x), stream=s)
    s.synchronize()
    np.testing.assert_array_equal(cupy.asnumpy(q2), want)


# ------------------------------------------------------- JAX transformations
def _jax_transforms():
    import jax

    return {
        "jit": lambda f: jax.jit(f),
        "vmap": lambda f: jax.vmap(f),
        "grad": lambda f: jax.grad(lambda x: f(x).astype("float32").sum()),
    }


@needs_jax
@pytest.mark.parametrize("transform", ["jit", "vmap", "grad"])
@pytest.mark.parametrize("call", ["quantize", "dequantize", "gemm"])
def test_jax_transformations_raise_clear_type_error(transform, call, rng):
    """Under jax.jit / vmap / grad qg sees tracers, which hold no data: a
    TypeError naming the function, not a crash or an opaque JAX error."""
    import jax.numpy as jnp

    x = rng.standard_normal((2, 3, 64)).astype(np.float32)
    if call == "quantize":
        fn, f, arg = "qg.quantize_q8_0", qg.quantize_q8_0, x
    elif call == "dequantize":
        if transform == "grad":
            pytest.skip("jax.grad does not trace integer (packed) inputs")
        fn, f, arg = "qg.dequantize_q4_0", qg.dequantize_q4_0, qg.quantize_q4_0(x)
    else:
        wq = jnp.asarray(qg.quantize_q4_0(x[0]))  # a concrete weight, a traced activation
        fn, f, arg = "qg.quantize_q8_1", lambda a: qg.gemm_q4_0_q8_1(wq, qg.quantize_q8_1(a)), x
    with pytest.raises(TypeError) as e:
        _jax_transforms()[transform](f)(jnp.asarray(arg))
    msg = str(e.value)
    assert msg.startswith(f"{fn}: "), msg
    for fragment in ("JAX tracer", "jax.jit, jax.vmap or jax.grad", "eager"):
        assert fragment in msg, msg


@needs_jax
@pytest.mark.parametrize("transform", ["jit", "vmap"])
def test_jax_transformations_gemm_operands(transform, rng):
    """gemm's own check: traced packed operands are named."""
    import jax
    import jax.numpy as jnp

    x = rng.standard_normal((2, 3, 64)).astype(np.float32)
    wq, aq = jnp.asarray(qg.quantize_q4_0(x)), jnp.asarray(qg.quantize_q8_1(x))
    t = jax.jit if transform == "jit" else jax.vmap
    with pytest.raises(TypeError, match=r"^qg\.gemm_q4_0_q8_1: weight_q is a JAX tracer.*eager"):
        t(qg.gemm_q4_0_q8_1)(wq, aq)
    w0 = wq[0]  # concrete: sliced outside the transformation
    with pytest.raises(TypeError, match=r"^qg\.gemm_q4_0_q8_1: activation_q is a JAX tracer.*eager"):
        t(lambda a: qg.gemm_q4_0_q8_1(w0, a))(aq)


@needs_jax
def test_jax_tracer_detection_without_tracer_class(monkeypatch, rng):
    """Should JAX move its Tracer class again, tracers are still recognised."""
    import jax
    import jax.numpy as jnp

    from qg import _frameworks

    monkeypatch.setattr(_frameworks, "_JAX_TRACER_TYPES", ())
    x = jnp.asarray(rng.standard_normal((2, 64)).astype(np.float32))
    with pytest.raises(TypeError, match=r"^qg\.quantize_q4_0: x is a JAX tracer"):
        jax.jit(qg.quantize_q4_0)(x)
    np.testing.assert_array_equal(np.asarray(qg.quantize_q4_0(x)), qg.quantize_q4_0(np.asarray(x)))  # eager works


# ---------------------------------------------------------------- mixed kinds
def _other_kinds():
    kinds = []
    if HAS_TORCH:
        kinds.append("torch")
    if HAS_JAX:
        kinds.append("jax")
    return kinds or [pytest.param(None, marks=pytest.mark.skip(reason="neither torch nor jax is installed"))]


@pytest.mark.parametrize("kind", _other_kinds())
def test_mixed_framework_operands_rejected(kind, rng):
    """Both operands from one framework; the result comes back in that framework."""
    other = Framework(f"{kind}-cpu")
    wq = qg.quantize_q4_0(rng.standard_normal((4, 64)).astype(np.float32))
    aq = qg.quantize_q8_1(rng.standard_normal((3, 64)).astype(np.float32))
    for w, a, first, second in ((wq, other.to(aq), "numpy", kind), (other.to(wq), aq, kind, "numpy")):
        pattern = rf"^qg\.gemm_q4_0_q8_1: weight_q is a {first} array but activation_q is a {second} array; " \
                  r"pass both from one framework"
        with pytest.raises(TypeError, match=pattern):
            qg.gemm_q4_0_q8_1(w, a)
        with pytest.raises(TypeError, match=pattern):
            qg.explain(qg.gemm_q4_0_q8_1, w, a)
    # out= of another framework than the inputs: the same rule
    with pytest.raises(TypeError, match=rf"^qg\.gemm_q4_0_q8_1: out is a numpy array but the inputs are {kind}"):
        qg.gemm_q4_0_q8_1(other.to(wq), other.to(aq), out=np.empty((4, 3), np.float32))
    if kind == "torch":
        import torch

        with pytest.raises(TypeError, match=r"^qg\.quantize_q4_0: out is a torch array but the inputs are numpy"):
            qg.quantize_q4_0(np.ones((2, 64), np.float32), out=torch.empty((2, 2, 18), dtype=torch.uint8))
    # one framework: fine, and the result is that framework's
    other.check(qg.gemm_q4_0_q8_1(other.to(wq), other.to(aq)), np.float32, (4, 3))
