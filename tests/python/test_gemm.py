# SPDX-License-Identifier: MIT
"""gemm_q4_0_q8_1: Tier A (NMSE <= 1e-6 vs a float64 reference built from the
same codes), Tier B (quantization quality), shapes with tails, out=, empty
problems, non-contiguous inputs and input purity."""
from __future__ import annotations

import numpy as np
import pytest

import qg
import qg_ref as R
from conftest import needs_cuda, needs_torch

TIER_A = 1e-6


def quantized_pair(rng, M, N, K, lead_w=None, lead_a=None):
    w = rng.standard_normal((M, K)).astype(np.float32)
    a = rng.standard_normal((N, K)).astype(np.float32)
    if lead_w:
        w = w.reshape(*lead_w, K)
    if lead_a:
        a = a.reshape(*lead_a, K)
    return w, a, qg.quantize_q4_0(w), qg.quantize_q8_1(a)


SHAPES = [(1, 1, 32), (1, 7, 64), (3, 5, 96), (17, 9, 320), (33, 65, 1024), (64, 1, 4096),
          (5, 130, 256), (130, 8, 4096), (257, 129, 1024)]


@pytest.mark.parametrize("M,N,K", SHAPES, ids=str)
def test_tier_a_shapes(M, N, K, rng):
    _, _, wq, aq = quantized_pair(rng, M, N, K)
    out = np.full((M, N), np.nan, np.float32)  # poisoned: unwritten elements fail
    c = qg.gemm_q4_0_q8_1(wq, aq, M, N, K, out=out)
    assert c is out
    assert c.shape == (M, N) and c.dtype == np.float32
    assert np.isfinite(c).all()
    ref = R.gemm_ref(wq, aq)
    assert R.nmse(c, ref) <= TIER_A, R.nmse(c, ref)
    # M, N, K omitted: same result (the CPU backend is deterministic)
    np.testing.assert_array_equal(qg.gemm_q4_0_q8_1(wq, aq), c)


@pytest.mark.parametrize("M,N,K", [(1, 1, 32), (3, 5, 96), (17, 9, 320), (33, 65, 1024)], ids=str)
def test_tier_a_every_framework(M, N, K, fw, rng):
    _, _, wq, aq = quantized_pair(rng, M, N, K)
    c = qg.gemm_q4_0_q8_1(fw.to(wq), fw.to(aq), M, N, K)
    fw.check(c, np.float32, (M, N))
    c = fw.to_numpy(c)
    assert R.nmse(c, R.gemm_ref(wq, aq)) <= TIER_A
    if not fw.is_cuda:
        np.testing.assert_array_equal(c, qg.gemm_q4_0_q8_1(wq, aq))


@needs_cuda
@pytest.mark.parametrize("N", [1, 2, 4, 8, 9, 16, 31, 128, 512, 4096])
def test_cuda_n_sweep(N, cuda_fw, rng):
    M, K = 1024, 2048
    _, _, wq, aq = quantized_pair(rng, M, N, K)
    out = cuda_fw.empty((M, N), np.float32) if cuda_fw.kind != "jax" else None
    c = qg.gemm_q4_0_q8_1(cuda_fw.to(wq), cuda_fw.to(aq), M, N, K, out=out)
    cuda_fw.check(c, np.float32, (M, N))
    c = cuda_fw.to_numpy(c)
    assert np.isfinite(c).all()
    assert R.nmse(c, R.gemm_ref(wq, aq)) <= TIER_A


@needs_cuda
@pytest.mark.parametrize("M,N,K", SHAPES + [(4096, 4, 14336), (14336, 2, 4096), (1000, 1000, 4096)], ids=str)
def test_cuda_shapes(M, N, K, cuda_fw, rng):
    _, _, wq, aq = quantized_pair(rng, M, N, K)
    c = cuda_fw.to_numpy(qg.gemm_q4_0_q8_1(cuda_fw.to(wq), cuda_fw.to(aq), M, N, K))
    assert np.isfinite(c).all()
    assert R.nmse(c, R.gemm_ref(wq, aq)) <= TIER_A


@needs_cuda
def test_cuda_deterministic(cuda_fw, rng):
    """Same inputs on the same device give bit-identical output (reliability #28)."""
    _, _, wq, aq = quantized_pair(rng, 512, 64, 4096)
    w, a = cuda_fw.to(wq), cuda_fw.to(aq)
    c1 = cuda_fw.to_numpy(qg.gemm_q4_0_q8_1(w, a))
    c2 = cuda_fw.to_numpy(qg.gemm_q4_0_q8_1(w, a))
    np.testing.assert_array_equal(c1, c2)


def test_leading_dims(rng):
    _, _, wq, aq = quantized_pair(rng, 10, 6, 128, lead_w=(2, 5), lead_a=(2, 3))
    assert wq.shape == (2, 5, 4, 18) and aq.shape == (2, 3, 4, 36)
    c = qg.gemm_q4_0_q8_1(wq, aq)
    assert c.shape == (10, 6)
    np.testing.assert_array_equal(c, qg.gemm_q4_0_q8_1(wq.reshape(10, 4, 18), aq.reshape(6, 4, 36)))
    np.testing.assert_array_equal(qg.gemm_q4_0_q8_1(wq, aq, 10, 6, 128), c)
    assert R.nmse(c, R.gemm_ref(wq, aq)) <= TIER_A


def test_single_row_operands(rng):
    """A 2-D activation [nb, 36] is one row (N=1)."""
    _, _, wq, aq = quantized_pair(rng, 4, 1, 64)
    c = qg.gemm_q4_0_q8_1(wq, aq[0])
    assert c.shape == (4, 1)
    np.testing.assert_array_equal(c, qg.gemm_q4_0_q8_1(wq, aq))


@pytest.mark.parametrize("dist", ["uniform", "normal"])
def test_tier_b(dist, rng):
    """Quantization quality (reliability.md section 9), M=64, N=32, K=4096."""
    M, N, K = 64, 32, 4096
    if dist == "uniform":
        w = rng.uniform(-1, 1, (M, K)).astype(np.float32)
        a = rng.uniform(-1, 1, (N, K)).astype(np.float32)
    else:
        w = rng.standard_normal((M, K)).astype(np.float32)
        a = rng.standard_normal((N, K)).astype(np.float32)
    wq, aq = qg.quantize_q4_0(w), qg.quantize_q8_1(a)
    c = qg.gemm_q4_0_q8_1(wq, aq)
    w_deq = qg.dequantize_q4_0(wq).astype(np.float64)
    err_act = R.nmse(c, w_deq @ a.astype(np.float64).T)  # only the activation is quantized
    err_all = R.nmse(c, w.astype(np.float64) @ a.astype(np.float64).T)
    print(f"NMSE vs deq(W) @ A^T: {err_act:.3e}; vs W @ A^T: {err_all:.3e}")
    assert err_act <= 5e-4
    assert err_all <= 1.5e-2
    assert err_all > 1e-5  # Q4_0 is lossy: a tiny error would mean the reference is wrong


def test_activation_outlier_channels(rng):
    M, N, K = 64, 16, 2048
    w = rng.uniform(-1, 1, (M, K)).astype(np.float32)
    a = rng.uniform(-1, 1, (N, K)).astype(np.float32)
    a[:, rng.choice(K, 8, replace=False)] *= 50
    wq, aq = qg.quantize_q4_0(w), qg.quantize_q8_1(a)
    c = qg.gemm_q4_0_q8_1(wq, aq)
    assert R.nmse(c, R.gemm_ref(wq, aq)) <= TIER_A
    assert R.nmse(c, qg.dequantize_q4_0(wq).astype(np.float64) @ a.astype(np.float64).T) <= 2e-3


def test_ggml_cuda_convention_activation_same_gemm(rng):
    """The GEMM does not read s, and both conventions give the same codes on
    these values, so the GEMM results are identical."""
    _, a, wq, aq = quantized_pair(rng, 8, 5, 256)
    aq_cuda = qg.quantize_q8_1(a, convention="ggml_cuda")
    c = qg.gemm_q4_0_q8_1(wq, aq)
    c_cuda = qg.gemm_q4_0_q8_1(wq, aq_cuda)
    assert R.nmse(c_cuda, R.gemm_ref(wq, aq_cuda)) <= TIER_A
    if np.array_equal(aq[..., 4:], aq_cuda[..., 4:]):
        np.testing.assert_array_equal(c, c_cuda)


def test_s_field_not_read(rng):
    """Garbage in the Q8_1 s field (NaN) does not change the result."""
    _, _, wq, aq = quantized_pair(rng, 6, 7, 128)
    bad = aq.copy()
    bad[..., 2:4] = np.frombuffer(np.uint16(R.FP16_NAN).tobytes(), np.uint8)
    np.testing.assert_array_equal(qg.gemm_q4_0_q8_1(wq, bad), qg.gemm_q4_0_q8_1(wq, aq))


def test_extreme_codes_exact(rng):
    """All weight codes 0 (w-8 = -8) and activation codes -128/127 with unit
    scales: the integer part is exact and the result is an exact float."""
    M, N, K = 3, 4, 1024
    wq = np.zeros((M, K // 32, 18), np.uint8)
    wq[..., 0:2] = np.frombuffer(np.float16(1.0).tobytes(), np.uint8)  # d_w = 1, codes 0
    aq = np.zeros((N, K // 32, 36), np.uint8)
    aq[..., 0:2] = np.frombuffer(np.float16(1.0).tobytes(), np.uint8)
    aq[0, :, 4:] = np.uint8(0x80)  # -128
    aq[1, :, 4:] = 127
    c = qg.gemm_q4_0_q8_1(wq, aq)
    np.testing.assert_array_equal(c[:, 0], np.full(M, -8 * -128 * K, np.float32))
    np.testing.assert_array_equal(c[:, 1], np.full(M, -8 * 127 * K, np.float32))
    np.testing.assert_array_equal(c[:, 2:], 0)


# ------------------------------------------------------------------ out= / empty
def test_out_returned_and_written(fw, rng):
    if fw.kind == "jax":
        pytest.skip("JAX out= is rejected (test_errors)")
    _, _, wq, aq = quantized_pair(rng, 9, 11, 96)
    out = fw.empty((9, 11), np.float32)
    r = qg.gemm_q4_0_q8_1(fw.to(wq), fw.to(aq), out=out)
    assert r is out
    fw.sync()
    np.testing.assert_array_equal(fw.to_numpy(out), qg.gemm_q4_0_q8_1(wq, aq)) if not fw.is_cuda else None
    assert R.nmse(fw.to_numpy(out), R.gemm_ref(wq, aq)) <= TIER_A


def test_k_zero_gives_zeros(fw):
    wq = np.zeros((4, 0, 18), np.uint8)
    aq = np.zeros((3, 0, 36), np.uint8)
    c = qg.gemm_q4_0_q8_1(fw.to(wq), fw.to(aq), 4, 3, 0)
    fw.check(c, np.float32, (4, 3))
    assert (fw.to_numpy(c) == 0).all()
    if fw.kind != "jax":  # out= poisoned with NaN is overwritten with zeros
        out = fw.empty((4, 3), np.float32)
        qg.gemm_q4_0_q8_1(fw.to(wq), fw.to(aq), out=out)
        fw.sync()
        assert (fw.to_numpy(out) == 0).all()


@pytest.mark.parametrize("M,N", [(0, 5), (5, 0), (0, 0)])
def test_empty_m_or_n(M, N, fw):
    wq = np.zeros((M, 2, 18), np.uint8)
    aq = np.zeros((N, 2, 36), np.uint8)
    c = qg.gemm_q4_0_q8_1(fw.to(wq), fw.to(aq))
    fw.check(c, np.float32, (M, N))
    c = qg.gemm_q4_0_q8_1(fw.to(wq), fw.to(aq), M, N, 64)
    fw.check(c, np.float32, (M, N))


# ------------------------------------------------------------ layout / purity
def test_non_contiguous_numpy(rng):
    _, _, wq, aq = quantized_pair(rng, 20, 14, 128)
    for wv, av in ((wq[::2], aq), (wq, aq[::2]), (wq[::-1], aq[1::3]), (wq[3:9], aq[2:])):
        want = qg.gemm_q4_0_q8_1(np.ascontiguousarray(wv), np.ascontiguousarray(av))
        np.testing.assert_array_equal(qg.gemm_q4_0_q8_1(wv, av), want)
    # quantize from a strided float view, then GEMM
    wide = rng.standard_normal((6, 256)).astype(np.float32)
    wq2 = qg.quantize_q4_0(wide[:, ::2])
    np.testing.assert_array_equal(wq2, qg.quantize_q4_0(np.ascontiguousarray(wide[:, ::2])))
    np.testing.assert_array_equal(qg.gemm_q4_0_q8_1(wq2, aq), qg.gemm_q4_0_q8_1(wq2.copy(), aq))


@needs_torch
def test_non_contiguous_torch(rng):
    import torch

    w = torch.from_numpy(rng.standard_normal((128, 10)).astype(np.float32)).t()  # [10, 128], transposed
    a = torch.from_numpy(rng.standard_normal((12, 128)).astype(np.float32))
    assert not w.is_contiguous()
    wq, aq = qg.quantize_q4_0(w), qg.quantize_q8_1(a)
    np.testing.assert_array_equal(wq.numpy(), qg.quantize_q4_0(w.contiguous()).numpy())
    c = qg.gemm_q4_0_q8_1(wq, aq[::2])
    np.testing.assert_array_equal(c.numpy(), qg.gemm_q4_0_q8_1(wq, aq[::2].contiguous()).numpy())
    # batch dims permuted: [3, 4, nb, 36] -> [4, 3, nb, 36]
    a3 = qg.quantize_q8_1(torch.from_numpy(rng.standard_normal((3, 4, 128)).astype(np.float32)))
    ap = a3.permute(1, 0, 2, 3)
    np.testing.assert_array_equal(qg.gemm_q4_0_q8_1(wq, ap).numpy(), qg.gemm_q4_0_q8_1(wq, ap.contiguous()).numpy())


def test_inputs_never_written(fw, rng):
    _, _, wq, aq = quantized_pair(rng, 9, 7, 160)
    w, a = fw.to(wq), fw.to(aq)
    qg.gemm_q4_0_q8_1(w, a)
    qg.gemm_q4_0_q8_1(w, a, 9, 7, 160)
    fw.sync()
    np.testing.assert_array_equal(fw.to_numpy(w), wq)
    np.testing.assert_array_equal(fw.to_numpy(a), aq)


def test_read_only_inputs(rng):
    _, _, wq, aq = quantized_pair(rng, 5, 3, 64)
    want = qg.gemm_q4_0_q8_1(wq, aq)
    wq.flags.writeable = False
    aq.flags.writeable = False
    np.testing.assert_array_equal(qg.gemm_q4_0_q8_1(wq, aq), want)


def test_aliased_inputs_same_buffer(rng):
    """W and A as views of one buffer (reading aliases must be correct)."""
    x = rng.standard_normal((8, 128)).astype(np.float32)
    w4 = qg.quantize_q4_0(x)
    buf = np.zeros(w4.nbytes + qg.quantize_q8_1(x).nbytes, np.uint8)
    wv = buf[: w4.nbytes].reshape(w4.shape)
    av = buf[w4.nbytes :].reshape(8, 4, 36)
    wv[...] = w4
    av[...] = qg.quantize_q8_1(x)
    np.testing.assert_array_equal(qg.gemm_q4_0_q8_1(wv, av), qg.gemm_q4_0_q8_1(w4, qg.quantize_q8_1(x)))


def test_cpu_threads_do_not_change_result(rng):
    _, _, wq, aq = quantized_pair(rng, 67, 9, 512)
    before = qg.cpu_threads()
    try:
        qg.set_cpu_threads(1)
        assert qg.cpu_threads() == 1
        c1 = qg.gemm_q4_0_q8_1(wq, aq)
        qg.set_cpu_threads(2)
        c2 = qg.gemm_q4_0_q8_1(wq, aq)
    finally:
        qg.set_cpu_threads(before)
    np.testing.assert_array_equal(c1, c2)
