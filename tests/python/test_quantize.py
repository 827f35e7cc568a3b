# SPDX-License-Identifier: MIT
"""Quantize / dequantize: byte-exact against ggml's reference (gguf's NumPy
port for Q4_0/Q8_0, a transcription of quantize_row_q8_1_ref for Q8_1), the
defined behaviour for edge blocks, and identical bytes on every framework and
device."""
from __future__ import annotations

import numpy as np
import pytest

import qg
import qg_ref as R
from conftest import make_rng, needs_cuda, needs_ml_dtypes, needs_torch

try:
    from gguf import GGMLQuantizationType as GT
    from gguf.quants import dequantize as gguf_dequantize
    from gguf.quants import quantize as gguf_quantize
except ImportError:  # the gguf comparisons skip; everything else still runs
    GT = gguf_dequantize = gguf_quantize = None
needs_gguf = pytest.mark.skipif(GT is None, reason="the gguf package is not installed")

QUANTIZE = {"q4_0": qg.quantize_q4_0, "q8_0": qg.quantize_q8_0, "q8_1": qg.quantize_q8_1}
DEQUANTIZE = {"q4_0": qg.dequantize_q4_0, "q8_0": qg.dequantize_q8_0, "q8_1": qg.dequantize_q8_1}
GGUF_TYPE = {"q4_0": GT.Q4_0, "q8_0": GT.Q8_0} if GT is not None else {}
NEUTRAL = {"q4_0": 0x88, "q8_0": 0, "q8_1": 0}  # code bytes of a zero / non-finite block


def make_data(rng, dist: str, shape) -> np.ndarray:
    K = shape[-1]
    if dist == "normal":
        x = rng.standard_normal(shape)
    elif dist == "uniform":
        x = rng.uniform(-1, 1, shape)
    elif dist == "scaled_blocks":  # every block its own magnitude, 1e-6 .. 1e4
        x = rng.standard_normal(shape) * np.repeat(10.0 ** rng.uniform(-6, 4, (*shape[:-1], K // 32)), 32, -1)
    elif dist == "outliers":
        x = rng.standard_normal(shape)
        mask = rng.random(shape) < 0.01
        x[mask] *= 100
    elif dist == "positive":
        x = rng.exponential(1.0, shape)
    elif dist == "ties":
        # amax fixed at 127 (Q8: d = 1, id = 1) or 8 (Q4_0: d = -1): half-integers hit
        # the rounding ties of roundf and of trunc(x*id + 8.5).
        x = rng.integers(-16, 17, shape) / 2.0
        x[..., ::32] = 8.0
        if rng.random() < 0.5:
            x = x * (127 / 8)
    elif dist == "sparse":
        x = rng.standard_normal(shape) * (rng.random(shape) < 0.1)
    else:
        raise AssertionError(dist)
    return x.astype(np.float32)


def canon_zero_scale(q: np.ndarray) -> np.ndarray:
    """Clears the sign bit of +-0 fp16 scales (d field) so -0.0 == +0.0."""
    q = np.array(q, copy=True)
    d = R.scale_bits(q)
    zero = (d & 0x7FFF) == 0
    q[..., 1][zero] &= 0x7F
    return q


SHAPES = [(1, 32), (3, 64), (7, 96), (16, 1024), (2, 3, 128), (1, 4096), (33, 160)]
DISTS = ["normal", "uniform", "scaled_blocks", "outliers", "positive", "ties", "sparse"]


# ------------------------------------------------------------ Q4_0 / Q8_0 vs gguf
@needs_gguf
@pytest.mark.parametrize("fmt", ["q4_0", "q8_0"])
@pytest.mark.parametrize("dist", DISTS)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_matches_gguf(fmt, dist, shape, rng):
    x = make_data(rng, dist, shape)
    q = QUANTIZE[fmt](x)
    nb = shape[-1] // 32
    assert q.shape == (*shape[:-1], nb, R.BYTES[fmt]) and q.dtype == np.uint8
    g = gguf_quantize(x, GGUF_TYPE[fmt]).reshape(q.shape)
    np.testing.assert_array_equal(canon_zero_scale(q), canon_zero_scale(g))
    # and bit-exact, sign of zero included, against the C transcription
    if fmt == "q4_0":
        np.testing.assert_array_equal(q, R.quantize_q4_0_ref(x))


@needs_gguf
@pytest.mark.parametrize("seed", range(6))
def test_matches_gguf_many_seeds(seed):
    rng = make_rng(1000 + seed)
    x = make_data(rng, DISTS[seed % len(DISTS)], (8, 512)) * np.float32(10.0 ** rng.uniform(-3, 3))
    for fmt in ("q4_0", "q8_0"):
        q = QUANTIZE[fmt](x)
        g = gguf_quantize(x, GGUF_TYPE[fmt]).reshape(q.shape)
        np.testing.assert_array_equal(canon_zero_scale(q), canon_zero_scale(g), err_msg=fmt)


@needs_gguf
def test_q4_0_zero_block_scale_sign():
    """ggml's C keeps max = +0.0f for an all-zero block, so d = +0/-8 = -0.0
    (fp16 0x8000) whatever the signs of the zeros; qg does the same. gguf's
    NumPy port takes the first element as max, so a block of -0.0 gives +0
    there: the only byte difference from gguf, and why the other tests compare
    modulo the sign of a zero scale."""
    x = np.zeros((3, 64), np.float32)
    x[1] = -0.0
    x[2, ::2] = -0.0
    q = qg.quantize_q4_0(x)
    assert (R.scale_bits(q) == 0x8000).all(), R.scale_bits(q)
    assert (q[..., 2:] == 0x88).all()
    g = gguf_quantize(x, GT.Q4_0).reshape(q.shape)
    assert R.scale_bits(g)[0, 0] == 0x8000  # +0 input: gguf agrees
    assert R.scale_bits(g)[1, 0] == 0x0000  # -0 input: gguf gives +0
    np.testing.assert_array_equal(canon_zero_scale(q), canon_zero_scale(g))
    y = qg.dequantize_q4_0(q)
    assert (y == 0).all() and not np.isnan(y).any()


# ------------------------------------------------------------------------- Q8_1
@pytest.mark.parametrize("dist", DISTS)
@pytest.mark.parametrize("shape", [(1, 32), (5, 96), (16, 1024), (2, 3, 64)], ids=str)
def test_q8_1_reference(dist, shape, rng):
    x = make_data(rng, dist, shape)
    q = qg.quantize_q8_1(x)
    assert q.shape == (*shape[:-1], shape[-1] // 32, 36) and q.dtype == np.uint8
    np.testing.assert_array_equal(q, R.quantize_q8_1_ref(x))
    # same d and codes as Q8_0 (ggml's q8_0 and q8_1 refs share the code path)
    q80 = qg.quantize_q8_0(x)
    np.testing.assert_array_equal(q[..., 0:2], q80[..., 0:2])
    np.testing.assert_array_equal(q[..., 4:], q80[..., 2:])


@pytest.mark.parametrize("dist", DISTS)
@pytest.mark.parametrize("shape", [(1, 32), (5, 96), (16, 1024)], ids=str)
def test_q8_1_ggml_cuda_convention(dist, shape, rng):
    x = make_data(rng, dist, shape)
    q = qg.quantize_q8_1(x, convention="ggml_cuda")
    np.testing.assert_array_equal(q, R.quantize_q8_1_ggml_cuda_ref(x))
    # explicitly naming the default gives the default
    np.testing.assert_array_equal(qg.quantize_q8_1(x, convention="reference"), qg.quantize_q8_1(x))


def test_q8_1_conventions_differ_in_sum_field():
    """s = fp16(d * sum q) vs fp16(sum x): a block where they differ."""
    x = np.linspace(-1, 0.5, 32, dtype=np.float32)[None]
    ref = qg.quantize_q8_1(x)
    cuda = qg.quantize_q8_1(x, convention="ggml_cuda")
    s_ref = R.f16_value(ref[..., 2:4].copy().view(np.uint16))[0, 0, 0]
    s_cuda = R.f16_value(cuda[..., 2:4].copy().view(np.uint16))[0, 0, 0]
    assert s_cuda == np.float32(np.float16(np.add.accumulate(x[0], dtype=np.float32)[-1]))
    d, _, codes = R.unpack_q8(ref)
    assert s_ref == np.float32(np.float16(np.float32(codes.sum()) * d[0, 0]))
    assert s_ref != s_cuda


# ------------------------------------------------------------- fp16 / bf16 input
@pytest.mark.parametrize("fmt", ["q4_0", "q8_0", "q8_1"])
def test_fp16_input_is_fp32_upcast(fmt, fw, rng):
    x16 = (rng.standard_normal((6, 256)) * 3).astype(np.float16)
    want = QUANTIZE[fmt](x16.astype(np.float32))
    got = QUANTIZE[fmt](fw.to(x16))
    fw.check(got, np.uint8, want.shape)
    np.testing.assert_array_equal(fw.to_numpy(got), want)


@needs_ml_dtypes
@pytest.mark.parametrize("fmt", ["q4_0", "q8_0", "q8_1"])
def test_bf16_input_is_fp32_upcast(fmt, fw, rng):
    import ml_dtypes

    # magnitudes outside fp16's range, so the values are not fp16 values in disguise
    xb = (rng.standard_normal((6, 256)) * 10.0 ** rng.uniform(-12, 8, (6, 256))).astype(ml_dtypes.bfloat16)
    x32 = xb.astype(np.float32)
    with np.errstate(over="ignore"):
        assert not np.array_equal(x32, x32.astype(np.float16).astype(np.float32))  # bf16 != fp16 values
    want = QUANTIZE[fmt](x32)
    got = QUANTIZE[fmt](fw.to(xb))  # numpy: ml_dtypes bf16; torch: torch.bfloat16; jax: bfloat16
    fw.check(got, np.uint8, want.shape)
    np.testing.assert_array_equal(fw.to_numpy(got), want)


@needs_torch
def test_torch_bf16_and_fp16_direct(rng):
    import torch

    x = torch.from_numpy(rng.standard_normal((4, 128)).astype(np.float32))
    for dt in (torch.bfloat16, torch.float16):
        xd = x.to(dt)
        np.testing.assert_array_equal(qg.quantize_q4_0(xd).numpy(), qg.quantize_q4_0(xd.float().numpy()))
        np.testing.assert_array_equal(qg.quantize_q8_1(xd).numpy(), R.quantize_q8_1_ref(xd.float().numpy()))


# ------------------------------------------------------------------ batch dims
@pytest.mark.parametrize("fmt", ["q4_0", "q8_0", "q8_1"])
def test_leading_batch_dims(fmt, rng):
    x = rng.standard_normal((2, 3, 128)).astype(np.float32)
    q = QUANTIZE[fmt](x)
    assert q.shape == (2, 3, 4, R.BYTES[fmt])
    np.testing.assert_array_equal(q.reshape(6, 4, -1), QUANTIZE[fmt](x.reshape(6, 128)))
    y = DEQUANTIZE[fmt](q)
    assert y.shape == (2, 3, 128) and y.dtype == np.float32
    np.testing.assert_array_equal(y.reshape(6, 128), DEQUANTIZE[fmt](q.reshape(6, 4, -1)))


@pytest.mark.parametrize("fmt", ["q4_0", "q8_0", "q8_1"])
def test_one_dimensional_input(fmt, rng):
    x = rng.standard_normal(96).astype(np.float32)
    q = QUANTIZE[fmt](x)
    assert q.shape == (3, R.BYTES[fmt])
    np.testing.assert_array_equal(q, QUANTIZE[fmt](x[None])[0])
    assert DEQUANTIZE[fmt](q).shape == (96,)


@pytest.mark.parametrize("fmt", ["q4_0", "q8_0", "q8_1"])
@pytest.mark.parametrize("shape", [(0, 64), (3, 0), (2, 0, 32)], ids=str)
def test_empty_inputs(fmt, shape, fw):
    """Zero-size rows or K: an empty result of the right shape and dtype
    (reliability.md #5). NumPy gives zero-size arrays all-zero strides."""
    qshape = (*shape[:-1], shape[-1] // 32, R.BYTES[fmt])
    q = QUANTIZE[fmt](fw.to(np.zeros(shape, np.float32)))
    fw.check(q, np.uint8, qshape)
    y = DEQUANTIZE[fmt](q)
    fw.check(y, np.float32, shape)


# ------------------------------------------------------------------ dequantize
@pytest.mark.parametrize("fmt", ["q4_0", "q8_0", "q8_1"])
@pytest.mark.parametrize("dist", ["normal", "scaled_blocks", "ties"])
def test_dequantize_exact(fmt, dist, rng):
    x = make_data(rng, dist, (9, 320))
    q = QUANTIZE[fmt](x)
    y = DEQUANTIZE[fmt](q)
    assert y.shape == x.shape and y.dtype == np.float32
    np.testing.assert_array_equal(y, R.dequantize_ref(q, fmt))
    np.testing.assert_array_equal(DEQUANTIZE[fmt](q, 320), y)  # K given == K inferred
    if fmt in GGUF_TYPE:
        g = gguf_dequantize(q.reshape(9, -1), GGUF_TYPE[fmt])
        np.testing.assert_array_equal(y, g)


@pytest.mark.parametrize("fmt", ["q4_0", "q8_0", "q8_1"])
def test_dequantize_arbitrary_bytes(fmt, rng):
    """Any bit pattern (random scales incl. inf/NaN/subnormal fp16) dequantizes to
    code * d exactly; the output is poisoned first so unwritten elements show."""
    q = rng.integers(0, 256, (17, 5, R.BYTES[fmt]), dtype=np.uint8)
    out = np.full((17, 160), np.nan, np.float32)
    out[...] = 12345.0
    y = DEQUANTIZE[fmt](q, out=out)
    assert y is out
    assert R.poison_equal(y, R.dequantize_ref(q, fmt))


@pytest.mark.parametrize("fmt", ["q4_0", "q8_0", "q8_1"])
@pytest.mark.parametrize("dist", ["normal", "uniform"])
def test_round_trip_quality(fmt, dist, rng):
    """Tier B (reliability.md section 9): round-trip NMSE limits."""
    x = make_data(rng, dist, (64, 1024))
    err = R.nmse(DEQUANTIZE[fmt](QUANTIZE[fmt](x)), x)
    limit = 1.2e-2 if fmt == "q4_0" else 6e-5
    assert err <= limit, err
    # per element: |x - y| <= d/2 plus the fp16 rounding of d times the code;
    # Q4_0 maps -max to code 16, clamped to 15, so its bound is a whole d.
    q = QUANTIZE[fmt](x)
    d = np.abs(R.f16_value(R.scale_bits(q)))
    err_el = np.abs(DEQUANTIZE[fmt](q) - x).reshape(64, 32, 32)
    slack = 1.0 + 8 * 2**-11 if fmt == "q4_0" else 0.5 + 127 * 2**-11
    assert (err_el <= (slack + 1e-3) * d[..., None] + 1e-30).all()


# ------------------------------------------------------------------ edge blocks
def _block_row(fill, others_rng=None, n_blocks=4, at=1):
    """4 blocks per row; block `at` is `fill`, the others normal data."""
    rng = others_rng or np.random.default_rng(7)
    x = rng.standard_normal((3, n_blocks * 32)).astype(np.float32)
    x[:, at * 32 : (at + 1) * 32] = fill
    return x


@pytest.mark.parametrize("fmt", ["q4_0", "q8_0", "q8_1"])
def test_all_zero_block(fmt):
    x = _block_row(0.0)
    q = QUANTIZE[fmt](x)
    assert ((R.scale_bits(q)[:, 1] & 0x7FFF) == 0).all()
    codes = q[:, 1, 2:] if fmt != "q8_1" else q[:, 1, 4:]
    assert (codes == NEUTRAL[fmt]).all()
    if fmt == "q8_1":
        assert (q[:, 1, 2:4] == 0).all()  # s = +0
    y = DEQUANTIZE[fmt](q)
    assert (y[:, 32:64] == 0).all()
    assert np.isfinite(y).all()


@needs_gguf
@pytest.mark.parametrize("fmt", ["q4_0", "q8_0"])
@pytest.mark.parametrize("value", [1e-8, -1e-8, 1e-40, -1e-40, 6e5, -6e5, 70000.0, 524032.0, 524288.0])
def test_edge_magnitudes_match_gguf_scale(fmt, value):
    """Tiny (fp16 scale underflows to 0), denormal (fp32 1/d overflows) and huge
    (Q4_0: |max|/8 > 65504 -> fp16 inf scale, as gguf/ggml give) blocks."""
    rng = np.random.default_rng(3)
    blk = (rng.uniform(-1, 1, 32) * value).astype(np.float32)
    blk[5] = value
    x = _block_row(blk)
    q = QUANTIZE[fmt](x)
    with np.errstate(all="ignore"):
        g = gguf_quantize(x, GGUF_TYPE[fmt]).reshape(q.shape)
    # the scale always matches gguf
    np.testing.assert_array_equal(R.scale_bits(q), R.scale_bits(g))
    np.testing.assert_array_equal(q[:, [0, 2, 3]], g[:, [0, 2, 3]])  # neighbours untouched
    d = R.f16_value(R.scale_bits(q)[:, 1])
    if abs(value) < 1e-30:
        # Denormal block: 1/d overflows to inf, and ggml's C then casts +-inf to
        # int8 (UB; gguf's NumPy port happens to give 0). qg defines it as a zero
        # block (id = 0, neutral codes; quant_block.h), and the fp16 scale is +-0,
        # so every value dequantizes to exactly 0.
        if fmt == "q8_0":
            assert (q[:, 1, 2:].view(np.int8) == 0).all()
        else:
            assert (q[:, 1, 2:] == 0x88).all()
    else:
        np.testing.assert_array_equal(q, g)
    y = DEQUANTIZE[fmt](q)
    if abs(value) <= 1e-8:
        assert (d == 0).all()  # fp16 underflow
        assert (y[:, 32:64] == 0).all()
    if fmt == "q4_0" and abs(value) >= 524288.0:  # fp16(value/8) overflows
        assert np.isinf(d).all()
    if fmt == "q4_0" and abs(value) <= 524032.0:
        assert np.isfinite(d).all()
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal(y, gguf_dequantize(q.reshape(3, -1), GGUF_TYPE[fmt]))


@needs_gguf
def test_q4_0_huge_block_scale_is_fp16_inf():
    x = np.full((1, 32), 6e5, np.float32)
    q = qg.quantize_q4_0(x)
    assert R.scale_bits(q)[0, 0] == 0xFC00  # d = 6e5 / -8 = -75000 -> -inf
    assert (q[0, 0, 2:] == 0x00).all()  # every element is the max: code 0
    y = qg.dequantize_q4_0(q)
    assert np.isposinf(y).all()  # (0 - 8) * -inf
    with np.errstate(over="ignore"):
        g = gguf_quantize(x, GT.Q4_0)
    np.testing.assert_array_equal(q, g.reshape(q.shape))


def test_q8_1_sum_overflow_is_fp16_inf():
    """s = fp16(d * sum q) > 65504 saturates to inf (defined); d and codes stay
    exact and the GEMM (which does not read s) stays finite."""
    x = np.full((2, 64), 6e4, np.float32)
    x[1] *= -1
    q = qg.quantize_q8_1(x)
    s = q[..., 2:4].copy().view(np.uint16)[..., 0]
    assert (s[0] == 0x7C00).all() and (s[1] == 0xFC00).all()
    np.testing.assert_array_equal(q, R.quantize_q8_1_ref(x))
    qc = qg.quantize_q8_1(x, convention="ggml_cuda")
    assert (qc[0, :, 2:4].copy().view(np.uint16) == 0x7C00).all()
    w = qg.quantize_q4_0(np.ones((3, 64), np.float32))
    c = qg.gemm_q4_0_q8_1(w, q)
    assert np.isfinite(c).all()
    np.testing.assert_allclose(c, R.gemm_ref(w, q), rtol=1e-6)


@pytest.mark.parametrize("fmt", ["q4_0", "q8_0", "q8_1"])
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("pos", [0, 17, 31])
def test_non_finite_block(fmt, bad, pos):
    """A block holding NaN/Inf: scale NaN (0x7E00), neutral codes, dequantizes to
    all NaN; the other blocks of the row and the other rows are untouched."""
    x = _block_row(0.0)
    x[:, 32:64] = np.random.default_rng(11).standard_normal((3, 32))
    clean = x.copy()
    x[1, 32 + pos] = bad
    q = QUANTIZE[fmt](x)
    q_clean = QUANTIZE[fmt](clean)
    assert R.scale_bits(q)[1, 1] == R.FP16_NAN
    if fmt == "q8_1":
        assert q[1, 1, 2:4].view(np.uint16)[0] == R.FP16_NAN  # s
        assert (q[1, 1, 4:] == 0).all()
    else:
        assert (q[1, 1, 2:] == NEUTRAL[fmt]).all()
    mask = np.ones(q.shape[:2], bool)
    mask[1, 1] = False
    np.testing.assert_array_equal(q[mask], q_clean[mask])
    y = DEQUANTIZE[fmt](q)
    assert np.isnan(y[1, 32:64]).all()
    np.testing.assert_array_equal(np.delete(y.reshape(3, 4, 32), 1, 1)[1], np.delete(
        DEQUANTIZE[fmt](q_clean).reshape(3, 4, 32), 1, 1)[1])
    np.testing.assert_array_equal(y[[0, 2]], DEQUANTIZE[fmt](q_clean)[[0, 2]])


def test_non_finite_ggml_cuda_convention():
    x = _block_row(1.0)
    x[2, 40] = np.nan
    q = qg.quantize_q8_1(x, convention="ggml_cuda")
    assert q[2, 1, 0:4].tobytes() == bytes([0x00, 0x7E, 0x00, 0x7E])
    assert (q[2, 1, 4:] == 0).all()
    np.testing.assert_array_equal(q[:2], R.quantize_q8_1_ggml_cuda_ref(x[:2]))


def test_nan_weight_block_poisons_gemm_row(rng):
    x = rng.standard_normal((4, 128)).astype(np.float32)
    x[2, 70] = np.nan
    w = qg.quantize_q4_0(x)
    a = qg.quantize_q8_1(rng.standard_normal((5, 128)).astype(np.float32))
    c = qg.gemm_q4_0_q8_1(w, a)
    assert np.isnan(c[2]).all()
    assert np.isfinite(c[[0, 1, 3]]).all()
    assert R.nmse(c[[0, 1, 3]], R.gemm_ref(w, a)[[0, 1, 3]]) <= 1e-6


# ----------------------------------------------------- frameworks and devices
@pytest.mark.parametrize("fmt,conv", [("q4_0", None), ("q8_0", None), ("q8_1", "reference"), ("q8_1", "ggml_cuda")])
def test_identical_bytes_on_every_framework(fmt, conv, fw, rng):
    x = make_data(rng, "scaled_blocks", (37, 320))
    x[3, 5] = np.nan
    x[4, 40:72] = 0.0
    x[5, 64:96] = 1e-40
    x[6, 96:128] = 6e5
    kw = {"convention": conv} if conv else {}
    want = QUANTIZE[fmt](x, **kw)
    got = QUANTIZE[fmt](fw.to(x), **kw)
    fw.check(got, np.uint8, want.shape)
    np.testing.assert_array_equal(fw.to_numpy(got), want)
    y = DEQUANTIZE[fmt](got)
    fw.check(y, np.float32, x.shape)
    R.assert_same_values(fw.to_numpy(y), DEQUANTIZE[fmt](want))


@needs_cuda
@pytest.mark.parametrize("fmt", ["q4_0", "q8_0", "q8_1"])
@pytest.mark.parametrize("dist", DISTS)
def test_cuda_bytes_equal_cpu_large(fmt, dist, cuda_fw, rng):
    x = make_data(rng, dist, (1031, 4096))
    want = QUANTIZE[fmt](x)
    got = cuda_fw.to_numpy(QUANTIZE[fmt](cuda_fw.to(x)))
    np.testing.assert_array_equal(got, want)
    if fmt == "q8_1":
        got = cuda_fw.to_numpy(qg.quantize_q8_1(cuda_fw.to(x), convention="ggml_cuda"))
        np.testing.assert_array_equal(got, qg.quantize_q8_1(x, convention="ggml_cuda"))


# ---------------------------------------------------------- layout / out= / purity
@pytest.mark.parametrize("fmt", ["q4_0", "q8_0", "q8_1"])
def test_non_contiguous_numpy_input(fmt, rng):
    base = rng.standard_normal((10, 256)).astype(np.float32)
    for view in (base[:, ::2], base[::3], base[::-1], base.reshape(10, 2, 128).transpose(1, 0, 2),
                 np.asfortranarray(base)):
        assert not view.flags.c_contiguous or view is base
        np.testing.assert_array_equal(QUANTIZE[fmt](view), QUANTIZE[fmt](np.ascontiguousarray(view)))
    q = QUANTIZE[fmt](base)
    np.testing.assert_array_equal(DEQUANTIZE[fmt](q[::2]), DEQUANTIZE[fmt](np.ascontiguousarray(q[::2])))


@needs_torch
@pytest.mark.parametrize("fmt", ["q4_0", "q8_0", "q8_1"])
def test_non_contiguous_torch_input(fmt, rng):
    import torch

    base = torch.from_numpy(rng.standard_normal((128, 12)).astype(np.float32))
    xt = base.t()  # [12, 128], stride (1, 12)
    assert not xt.is_contiguous()
    np.testing.assert_array_equal(QUANTIZE[fmt](xt).numpy(), QUANTIZE[fmt](xt.contiguous()).numpy())
    wide = torch.from_numpy(rng.standard_normal((5, 256)).astype(np.float32))
    np.testing.assert_array_equal(QUANTIZE[fmt](wide[:, ::2]).numpy(), QUANTIZE[fmt](wide[:, ::2].contiguous()).numpy())


@pytest.mark.parametrize("fmt", ["q4_0", "q8_0", "q8_1"])
def test_inputs_never_written(fmt, fw, rng):
    x_np = make_data(rng, "normal", (6, 128))
    x = fw.to(x_np)
    q = QUANTIZE[fmt](x)
    q_before = fw.to_numpy(q).copy()
    DEQUANTIZE[fmt](q)
    DEQUANTIZE[fmt](q, 128)
    fw.sync()
    np.testing.assert_array_equal(fw.to_numpy(x), x_np)
    np.testing.assert_array_equal(fw.to_numpy(q), q_before)


@pytest.mark.parametrize("fmt", ["q4_0", "q8_0", "q8_1"])
def test_read_only_numpy_inputs_accepted(fmt, rng):
    x = rng.standard_normal((4, 64)).astype(np.float32)
    x.flags.writeable = False
    q = QUANTIZE[fmt](x)
    q.flags.writeable = False
    np.testing.assert_array_equal(DEQUANTIZE[fmt](q), R.dequantize_ref(q, fmt))


@pytest.mark.parametrize("fmt", ["q4_0", "q8_0", "q8_1"])
def test_out_argument(fmt, fw, rng):
    if fw.kind == "jax":
        pytest.skip("JAX arrays are immutable; out= is rejected (test_errors)")
    x = rng.standard_normal((5, 96)).astype(np.float32)
    out = fw.empty((5, 3, R.BYTES[fmt]), np.uint8)
    r = QUANTIZE[fmt](fw.to(x), out=out)
    assert r is out
    np.testing.assert_array_equal(fw.to_numpy(out), QUANTIZE[fmt](x))
    yout = fw.empty((5, 96), np.float32)
    r = DEQUANTIZE[fmt](out, out=yout)
    assert r is yout
    np.testing.assert_array_equal(fw.to_numpy(yout), DEQUANTIZE[fmt](QUANTIZE[fmt](x)))
