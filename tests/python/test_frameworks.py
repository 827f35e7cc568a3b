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
from conftest import needs_cupy_cuda, needs_jax, needs_torch, needs_torch_cuda

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
