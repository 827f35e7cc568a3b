# SPDX-License-Identifier: MIT
"""linear_q4_0: y = x @ W^T + bias with W in Q4_0, [..., M] in x's dtype.

The reference is built from the same codes in float64: quantize_q8_1(x) and
W's Q4_0 blocks through qg_ref.gemm_ref, transposed, plus the bias, cast to
x's dtype. The GEMM's sum is exact per block, so the fp32 result agrees with
it to fp32 rounding (Tier A), and the cast to fp16/bf16 is the epilogue's
round-to-nearest-even of that value."""
from __future__ import annotations

import numpy as np
import pytest

import qg
import qg_ref as R
from conftest import needs_torch

TIER_A = 1e-6
SHAPES = [((1,), 32, 1), ((3,), 64, 5), ((2, 3), 96, 17), ((4,), 1024, 130), ((1, 1), 256, 64)]


def _case(rng, lead, K, M, bias: bool):
    x = rng.standard_normal((*lead, K)).astype(np.float32)
    w = rng.standard_normal((M, K)).astype(np.float32)
    b = rng.standard_normal(M).astype(np.float32) if bias else None
    return x, qg.quantize_q4_0(w), b


def _reference(x_np, wq, b):
    """float64 from the same codes: (W . A^T)^T + bias, [..., M]."""
    lead, K = x_np.shape[:-1], x_np.shape[-1]
    aq = qg.quantize_q8_1(x_np.reshape(-1, K))
    y = R.gemm_ref(wq, aq).T  # [N, M]
    if b is not None:
        y = y + b.astype(np.float64)
    return y.reshape(*lead, wq.shape[0])


@pytest.mark.parametrize("lead,K,M", SHAPES, ids=str)
@pytest.mark.parametrize("bias", [False, True], ids=["nobias", "bias"])
def test_matches_float64_reference_every_framework(fw, lead, K, M, bias, rng):
    x, wq, b = _case(rng, lead, K, M, bias)
    y = qg.linear_q4_0(fw.to(x), fw.to(wq), None if b is None else fw.to(b))
    assert type(y).__module__.split(".")[0] == type(fw.to(x)).__module__.split(".")[0]
    got = fw.to_numpy(y)
    assert got.shape == (*lead, M) and got.dtype == np.float32
    assert np.isfinite(got).all()
    assert R.nmse(got, _reference(x, wq, b)) <= TIER_A


@needs_torch
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_result_in_x_dtype_is_the_rounded_fp32_result(dtype, rng):
    import torch

    tdt = getattr(torch, dtype)
    x, wq, b = _case(rng, (3, 2), 128, 40, True)
    xt = torch.from_numpy(x).to(tdt)
    y = qg.linear_q4_0(xt, torch.from_numpy(wq), torch.from_numpy(b))
    assert y.dtype == tdt and y.shape == (3, 2, 40)
    # The same codes through the fp32 path, rounded once to the dtype.
    y32 = qg.linear_q4_0(xt.float(), torch.from_numpy(wq), torch.from_numpy(b))
    exact = torch.equal(y, y32.to(tdt))
    assert exact, (y.float() - y32).abs().max()


@needs_torch
def test_cuda_matches_reference_and_cpu(cuda_fw, rng):
    x, wq, b = _case(rng, (5,), 256, 33, True)
    y = qg.linear_q4_0(cuda_fw.to(x), cuda_fw.to(wq), cuda_fw.to(b))
    assert R.nmse(cuda_fw.to_numpy(y), _reference(x, wq, b)) <= TIER_A
    # CPU and CUDA write the same epilogue: compare the two backends.
    y_cpu = qg.linear_q4_0(x, wq, b)
    np.testing.assert_allclose(cuda_fw.to_numpy(y), y_cpu, rtol=1e-5, atol=1e-5)


@needs_torch
def test_torch_compile_and_trace_record_qg_ops(rng, fresh_dynamo):
    import torch

    x, wq, b = _case(rng, (2, 3), 64, 48, True)
    wt, bt, xt = torch.from_numpy(wq), torch.from_numpy(b), torch.from_numpy(x)

    def f(xx):
        return qg.linear_q4_0(xx, wt, bt)

    eager = f(xt)
    assert torch.equal(torch.compile(f, fullgraph=True, backend="eager")(xt), eager)
    traced = torch.jit.trace(f, (xt,))
    assert "qg::" in str(traced.graph)
    x2 = torch.from_numpy(rng.standard_normal((2, 3, 64)).astype(np.float32))
    assert torch.equal(traced(x2), f(x2))


@needs_torch
def test_autograd_is_refused_not_dropped(rng):
    import torch

    x, wq, b = _case(rng, (2,), 64, 8, True)
    wt = torch.from_numpy(wq)
    with pytest.raises(RuntimeError, match=r"^qg\.linear_q4_0: bias requires grad.*no_grad"):
        qg.linear_q4_0(torch.from_numpy(x), wt, torch.nn.Parameter(torch.from_numpy(b)))
    with pytest.raises(RuntimeError, match=r"^qg\.linear_q4_0: x requires grad"):
        qg.linear_q4_0(torch.from_numpy(x).requires_grad_(), wt)
    with torch.no_grad():
        y = qg.linear_q4_0(torch.from_numpy(x), wt, torch.nn.Parameter(torch.from_numpy(b)))
    assert y.shape == (2, 8)


def test_errors_name_the_function_and_the_fix(rng):
    x, wq, b = _case(rng, (2,), 64, 8, True)
    with pytest.raises(ValueError, match=r"^qg\.linear_q4_0: bias must have shape \[8\]"):
        qg.linear_q4_0(x, wq, b[:5])
    with pytest.raises(ValueError, match=r"^qg\.linear_q4_0: K=80 \(x\.shape\[-1\]\) is not a multiple of 32"):
        qg.linear_q4_0(np.ones((2, 80), np.float32), wq)
    with pytest.raises(ValueError, match=r"^qg\.linear_q4_0: weight_q has 2 blocks per row \(K=64\) but x has 3"):
        qg.linear_q4_0(np.ones((2, 96), np.float32), wq)
    with pytest.raises(TypeError, match=r"^qg\.linear_q4_0: x must be float32, float16 or bfloat16, got int32"):
        qg.linear_q4_0(np.ones((2, 64), np.int32), wq)
    with pytest.raises(TypeError, match=r"^qg\.linear_q4_0: x must be a NumPy"):
        qg.linear_q4_0([[1.0] * 64], wq)


@needs_torch
def test_mixed_frameworks_rejected(rng):
    import torch

    x, wq, b = _case(rng, (2,), 64, 8, True)
    with pytest.raises(TypeError, match=r"^qg\.linear_q4_0: .*one framework"):
        qg.linear_q4_0(x, wq, torch.from_numpy(b))
    with pytest.raises(TypeError, match=r"^qg\.linear_q4_0: .*one framework"):
        qg.linear_q4_0(torch.from_numpy(x), wq)


@pytest.mark.parametrize("lead,K,M", [((1,), 64, 8), ((20,), 256, 130)], ids=str)
def test_explain_names_the_gemm_kernel_of_the_call(lead, K, M, rng):
    """explain(qg.linear_q4_0, ...) names the kernel that the call's GEMM
    takes: the one explain(qg.gemm_q4_0_q8_1, ...) names for the same weight
    and x quantized to Q8_1 (the epilogue does not change the choice here)."""
    x, wq, b = _case(rng, lead, K, M, True)
    e = qg.explain(qg.linear_q4_0, x, wq, b)
    assert e.op == "qg.linear_q4_0"
    assert e.chosen == qg.explain(qg.gemm_q4_0_q8_1, wq, qg.quantize_q8_1(x.reshape(-1, K))).chosen
    assert qg.explain("linear_q4_0", x, wq).chosen == e.chosen
    with pytest.raises(TypeError, match="qg.linear_q4_0: x must be float32"):
        qg.explain(qg.linear_q4_0, x.astype(np.int32), wq)


def test_cuda_explain_names_the_gemm_kernel_of_the_call(cuda_fw, rng):
    """On the GPU the decode GEMV at N = 1 and, on sm_90a from N = 7, the
    warpgroup kernel (which quantizes x itself in the call)."""
    for n in (1, 16):
        x, wq, _ = _case(rng, (n,), 256, 256, False)
        xd, wd = cuda_fw.to(x), cuda_fw.to(wq)
        chosen = qg.explain(qg.linear_q4_0, xd, wd).chosen
        assert chosen == qg.explain(qg.gemm_q4_0_q8_1, wd, qg.quantize_q8_1(xd)).chosen
        assert chosen.startswith("cuda_")
