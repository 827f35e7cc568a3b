# SPDX-License-Identifier: MIT
"""qg.repack and q4_0x16 weights: the layout byte for byte, exact both ways,
gemm_q4_0_q8_1 / linear_q4_0 / explain taking the repacked weight on every
CPU framework, torch.compile, and the errors (rows not a multiple of 16, a
GPU array, a wrong target)."""
from __future__ import annotations

import numpy as np
import pytest

import qg
import qg_ref as R
from conftest import CUDA_FRAMEWORKS, FRAMEWORKS, Framework, needs_torch, to_numpy

TIER_A = 1e-6
CPU_FRAMEWORKS = [n for n in FRAMEWORKS if n.endswith("-cpu")]


def _weight(rng, m, k):
    return qg.quantize_q4_0(rng.standard_normal((m, k)).astype(np.float32))


def _layout_reference(wq: np.ndarray) -> np.ndarray:
    """q4_0x16 from Q4_0 [M, nb, 18] in NumPy, from the documented layout:
    per group of 16 rows and block, code byte j of row r at [j // 4][r][j % 4],
    then the 16 rows' fp16 scales."""
    m, nb, _ = wq.shape
    g = wq.reshape(m // 16, 16, nb, 18).transpose(0, 2, 1, 3)  # [G, nb, r, 18]
    codes = g[..., 2:].reshape(m // 16, nb, 16, 4, 4).transpose(0, 1, 3, 2, 4)  # [G, nb, c, r, i]
    return np.concatenate([codes.reshape(m // 16, nb, 256), g[..., :2].reshape(m // 16, nb, 32)], axis=-1)


@pytest.mark.parametrize("name", CPU_FRAMEWORKS)
@pytest.mark.parametrize("m,k", [(16, 32), (48, 96), (32, 1024)], ids=str)
def test_layout_and_round_trip(name, m, k, rng):
    f = Framework(name)
    wq = _weight(rng, m, k)
    x16 = qg.repack(f.to(wq), "q4_0x16")
    assert type(x16).__module__.split(".")[0] == type(f.to(wq)).__module__.split(".")[0]
    got = to_numpy(x16)
    assert got.shape == (m // 16, k // 32, 288) and got.dtype == np.uint8
    np.testing.assert_array_equal(got, _layout_reference(wq))
    back = to_numpy(qg.repack(x16, "q4_0"))
    np.testing.assert_array_equal(back, wq)


def test_leading_dims_are_rows(rng):
    wq = _weight(rng, 32, 64).reshape(2, 16, 2, 18)
    np.testing.assert_array_equal(qg.repack(wq, "q4_0x16"), qg.repack(wq.reshape(32, 2, 18), "q4_0x16"))


@pytest.mark.parametrize("name", CPU_FRAMEWORKS)
@pytest.mark.parametrize("n", [1, 3, 4, 17])
def test_gemm_and_linear_take_repacked_weights(name, n, rng):
    f = Framework(name)
    m, k = 48, 256
    wq = _weight(rng, m, k)
    x = rng.standard_normal((n, k)).astype(np.float32)
    aq = qg.quantize_q8_1(x)
    x16 = qg.repack(f.to(wq), "q4_0x16")
    c = to_numpy(qg.gemm_q4_0_q8_1(x16, f.to(aq)))
    assert c.shape == (m, n)
    ref = R.gemm_ref(wq, aq)
    assert R.nmse(c, ref) <= TIER_A
    y = to_numpy(qg.linear_q4_0(f.to(x), x16))
    assert y.shape == (n, m)
    assert R.nmse(y, ref.T) <= TIER_A
    # The same products as the Q4_0 panel kernels: bit for bit where the
    # Q4_0 call runs one (its explanation says so).
    chosen = qg.explain(qg.gemm_q4_0_q8_1, wq, aq).chosen
    if chosen == "cpu_amx" or chosen.endswith("_panel"):
        np.testing.assert_array_equal(c, qg.gemm_q4_0_q8_1(wq, aq))


def test_explain_names_a_q4_0x16_kernel(rng):
    wq, x = _weight(rng, 32, 128), rng.standard_normal((1, 128)).astype(np.float32)
    x16 = qg.repack(wq, "q4_0x16")
    e = qg.explain(qg.gemm_q4_0_q8_1, x16, qg.quantize_q8_1(x))
    assert e.chosen.startswith("cpu_q4_0x16_") and "q4_0x16" in e.problem, e
    e = qg.explain(qg.linear_q4_0, x, x16)
    assert e.chosen.startswith("cpu_q4_0x16_"), e


@needs_torch
def test_torch_compile_records_the_repacked_call(rng, fresh_dynamo):
    import torch

    wq = _weight(rng, 32, 64)
    wt = torch.from_numpy(qg.repack(wq, "q4_0x16"))
    xt = torch.from_numpy(rng.standard_normal((3, 64)).astype(np.float32))

    def f(xx):
        return qg.linear_q4_0(xx, wt)

    eager = f(xt)
    assert torch.equal(torch.compile(f, fullgraph=True, backend="eager")(xt), eager)


def test_errors_name_the_function_and_the_fix(rng):
    wq = _weight(rng, 24, 64)
    with pytest.raises(ValueError, match=r"^qg\.repack: weight_q holds 24 rows .* not a multiple of 16"):
        qg.repack(wq, "q4_0x16")
    with pytest.raises(ValueError, match=r"^qg\.repack: to must be 'q4_0x16' or 'q4_0'"):
        qg.repack(wq, "q8_0")
    with pytest.raises(ValueError, match=r"^qg\.repack: weight_q\.shape\[-1\] must be 18"):
        qg.repack(qg.repack(wq[:16], "q4_0x16"), "q4_0x16")
    with pytest.raises(TypeError, match=r"^qg\.repack: weight_q must be uint8"):
        qg.repack(wq.astype(np.int8), "q4_0x16")
    x16 = qg.repack(wq[:16], "q4_0x16")
    with pytest.raises(ValueError, match=r"^qg\.gemm_q4_0_q8_1: weight_q has 2 blocks per row \(K=64\) but"):
        qg.gemm_q4_0_q8_1(x16, qg.quantize_q8_1(np.ones((1, 96), np.float32)))


@pytest.mark.skipif(not CUDA_FRAMEWORKS, reason="no CUDA framework usable with qg")
def test_gpu_arrays_are_refused_with_the_fix(rng):
    f = Framework(CUDA_FRAMEWORKS[0])
    with pytest.raises(ValueError, match=r"^qg\.repack: q4_0x16 is the layout of qg's CPU kernels.*on the host"):
        qg.repack(f.to(_weight(rng, 16, 32)), "q4_0x16")
