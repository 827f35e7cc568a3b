# SPDX-License-Identifier: MIT
"""The integer family (seed 001 and 003 names): quantize_tensor /
dequantize_tensor, int8_matmul, the INT4 packings and GEMMs, linear_int4.

References (int_ref.py) are NumPy transcriptions of cpp/src/int_formats.h:
codes and scales must match them byte for byte; integer GEMMs are compared
bit-exact with an int64 product; float results with a float64 product of the
same codes (NMSE <= 1e-6; bfloat16 results, whose rounding alone is ~1e-6,
within 5e-5). Every framework the fixtures offer is run; CUDA cases skip
without a GPU."""
from __future__ import annotations

import numpy as np
import pytest

import int_ref as R
import qg
from conftest import needs_ml_dtypes, needs_torch

TIER_A = 1e-6
TIER_BF16 = 5e-5


def _np(a) -> np.ndarray:
    """Any framework's array -> NumPy (bfloat16 -> float32)."""
    from conftest import to_numpy

    return np.asarray(to_numpy(a))


def _same_kind(a, like) -> bool:
    return type(a).__module__.split(".")[0] == type(like).__module__.split(".")[0]


def _to_dtype(fw, x: np.ndarray, dtype: str):
    """x in dtype on fw (bfloat16: torch, or NumPy / JAX through ml_dtypes)."""
    if dtype == "float32":
        return fw.to(x)
    if dtype == "float16":
        return fw.to(x.astype(np.float16))
    if fw.kind == "torch":
        import torch

        return fw.to(x).to(torch.bfloat16)
    if fw.kind == "cupy":
        pytest.skip("cupy has no bfloat16")
    ml_dtypes = pytest.importorskip("ml_dtypes")
    return fw.to(x.astype(ml_dtypes.bfloat16))


def _rounded_f32(x: np.ndarray, dtype: str) -> np.ndarray:
    """The float32 values the quantizer reads from x stored in dtype."""
    if dtype == "float16":
        return x.astype(np.float16).astype(np.float32)
    if dtype == "bfloat16":
        ml_dtypes = pytest.importorskip("ml_dtypes")
        return x.astype(ml_dtypes.bfloat16).astype(np.float32)
    return x


def _packed(codes: np.ndarray, bits: int, packing: str = "uint8") -> np.ndarray:
    if bits == 8:
        return codes.astype(np.int8)
    return R.pack_i4x8(codes) if packing == "int32" else R.pack_i4(codes)


def _assert_scales_equal(got, want):
    got, want = np.asarray(got, np.float32), np.asarray(want, np.float32)
    assert got.shape == want.shape, (got.shape, want.shape)
    np.testing.assert_array_equal(got, want)  # NaN == NaN positionally


# ============================================================ quantize_tensor
GRANS = [("tensor", None, (5, 37)), ("channel", None, (6, 37)), ("group", 16, (3, 2, 64))]


@pytest.mark.parametrize("bits", [8, 4])
@pytest.mark.parametrize("scheme", ["symmetric", "asymmetric"])
@pytest.mark.parametrize("gran,gs,shape", GRANS, ids=[g[0] for g in GRANS])
def test_quantize_matches_reference(fw, bits, scheme, gran, gs, shape, rng):
    if bits == 4 and gran == "channel":
        shape = shape[-2:]
    x = (rng.standard_normal(shape) * 3 + 0.5).astype(np.float32)
    asym = scheme == "asymmetric"
    out = qg.quantize_tensor(fw.to(x), bits=bits, scheme=scheme, granularity=gran, group_size=gs)
    assert len(out) == (3 if asym else 2)
    assert all(_same_kind(o, fw.to(x)) for o in out)
    codes, scale = _np(out[0]), _np(out[1])
    ref_gran = {"channel": "row"}.get(gran, gran)
    if gran == "channel" and len(shape) > 2:
        ref_codes, ref_scale, ref_zp = R.quantize(x.reshape(shape[0], -1), bits, asym, "row")
        ref_codes = ref_codes.reshape(shape)
    else:
        ref_codes, ref_scale, ref_zp = R.quantize(x, bits, asym, ref_gran, gs or 0)
    want = _packed(ref_codes, bits)
    assert codes.dtype == want.dtype and codes.shape == want.shape
    np.testing.assert_array_equal(codes, want)
    _assert_scales_equal(scale, ref_scale)
    assert scale.dtype == np.float32
    if asym:
        zp = _np(out[2])
        assert zp.dtype == np.int32
        np.testing.assert_array_equal(zp, ref_zp)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("bits", [8, 4])
def test_quantize_half_inputs_read_as_float32(fw, dtype, bits, rng):
    x = rng.standard_normal((4, 24)).astype(np.float32)
    codes, scale = qg.quantize_tensor(_to_dtype(fw, x, dtype), bits=bits, granularity="channel")
    ref_codes, ref_scale, _ = R.quantize(_rounded_f32(x, dtype), bits, False, "row")
    np.testing.assert_array_equal(_np(codes), _packed(ref_codes, bits))
    _assert_scales_equal(_np(scale), ref_scale)


def test_quantize_int32_packing_is_seed_003_words(fw, rng):
    x = rng.standard_normal((3, 40)).astype(np.float32)
    codes, scale = qg.quantize_tensor(fw.to(x), bits=4, packing="int32", granularity="channel")
    ref_codes, ref_scale, _ = R.quantize(x, 4, False, "row")
    got = _np(codes)
    assert got.dtype == np.int32 and got.shape == (3, 5)
    np.testing.assert_array_equal(got, R.pack_i4x8(ref_codes))
    _assert_scales_equal(_np(scale), ref_scale)
    # dequantize_tensor reads the words back
    y = _np(qg.dequantize_tensor(codes, scale, packing="int32"))
    np.testing.assert_array_equal(y, R.dequantize(ref_codes, ref_scale[:, None]))


@pytest.mark.parametrize("axis", [0, 1, -1, 2])
def test_quantize_channel_any_axis_int8(fw, axis, rng):
    x = rng.standard_normal((3, 4, 5)).astype(np.float32)
    codes, scale = qg.quantize_tensor(fw.to(x), granularity="channel", axis=axis)
    moved = np.moveaxis(x, axis, 0)
    ref_codes, ref_scale, _ = R.quantize(moved.reshape(moved.shape[0], -1), 8, False, "row")
    want = np.moveaxis(ref_codes.reshape(moved.shape), 0, axis).astype(np.int8)
    got = _np(codes)
    assert got.shape == x.shape
    np.testing.assert_array_equal(got, want)
    _assert_scales_equal(_np(scale), ref_scale)
    y = _np(qg.dequantize_tensor(codes, scale, axis=axis))  # granularity inferred: channel
    bshape = [1] * 3
    bshape[axis] = -1
    np.testing.assert_array_equal(y, R.dequantize(want, ref_scale.reshape(bshape)))


@pytest.mark.parametrize("bits", [8, 4])
@pytest.mark.parametrize("asym", [False, True])
def test_static_scales(fw, bits, asym, rng):
    x = rng.standard_normal((4, 22)).astype(np.float32)
    scale = (rng.random(4) * 0.2 + 0.01).astype(np.float32)
    qmin, qmax = R.QRANGE[bits]
    zp = rng.integers(qmin, qmax + 1, 4).astype(np.int32) if asym else None
    kw = dict(bits=bits, granularity="channel", scale=fw.to(scale))
    if asym:
        kw.update(scheme="asymmetric", zero_point=fw.to(zp))
    out = qg.quantize_tensor(fw.to(x), **kw)
    ref = R.quantize_codes(x, scale[:, None], (zp if asym else np.zeros(4, np.int64))[:, None], bits)
    np.testing.assert_array_equal(_np(out[0]), _packed(ref, bits))
    _assert_scales_equal(_np(out[1]), scale)
    if asym:
        np.testing.assert_array_equal(_np(out[2]), zp)
        back = _np(qg.dequantize_tensor(out[0], out[1], out[2], K=22))
        np.testing.assert_array_equal(back, R.dequantize(ref, scale[:, None], zp[:, None]))


def test_static_python_scale_per_tensor(fw, rng):
    x = rng.standard_normal((2, 9)).astype(np.float32)
    codes, scale = qg.quantize_tensor(fw.to(x), scale=0.02)
    np.testing.assert_array_equal(_np(codes), R.quantize_codes(x, np.float32(0.02), 0, 8).astype(np.int8))
    assert _np(scale).shape == (1,)
    codes, scale, zp = qg.quantize_tensor(fw.to(x), scheme="asymmetric", scale=0.02, zero_point=-3)
    np.testing.assert_array_equal(_np(codes), R.quantize_codes(x, np.float32(0.02), -3, 8).astype(np.int8))
    np.testing.assert_array_equal(_np(zp), [-3])


@pytest.mark.parametrize("shape", [(1, 1), (1, 3), (7, 1), (0, 8), (4, 0)], ids=str)
@pytest.mark.parametrize("bits", [8, 4])
def test_quantize_edge_shapes(fw, shape, bits, rng):
    x = rng.standard_normal(shape).astype(np.float32)
    codes, scale = qg.quantize_tensor(fw.to(x), bits=bits, granularity="channel")
    ref_codes, ref_scale, _ = R.quantize(x, bits, False, "row")
    got = _np(codes)
    assert got.shape == _packed(ref_codes, bits).shape
    np.testing.assert_array_equal(got, _packed(ref_codes, bits))
    _assert_scales_equal(_np(scale), ref_scale)
    codes, scale = qg.quantize_tensor(fw.to(x), bits=bits)  # per tensor, also when empty
    assert _np(scale).shape == (1,)
    np.testing.assert_array_equal(_np(codes), _packed(R.quantize(x, bits, False, "tensor")[0], bits))
    back = _np(qg.dequantize_tensor(codes, scale, K=shape[-1]))
    assert back.shape == shape and back.dtype == np.float32


def test_non_finite_scope_is_poisoned(rng):
    x = rng.standard_normal((3, 16)).astype(np.float32)
    x[1, 5] = np.nan
    x[2, 0] = np.inf
    codes, scale = qg.quantize_tensor(x, granularity="channel")
    ref_codes, ref_scale, _ = R.quantize(x, 8, False, "row")
    np.testing.assert_array_equal(codes, ref_codes.astype(np.int8))
    _assert_scales_equal(scale, ref_scale)
    assert np.isnan(scale[1]) and np.isnan(scale[2]) and np.isfinite(scale[0])
    assert (codes[1:] == 0).all()


def test_all_zero_scope_has_zero_scale():
    codes, scale, zp = qg.quantize_tensor(np.zeros((2, 8), np.float32), scheme="asymmetric", granularity="channel")
    assert (scale == 0).all() and (codes == zp[:, None]).all()
    assert (qg.dequantize_tensor(codes, scale, zp) == 0).all()


def test_non_contiguous_input(fw, rng):
    x = rng.standard_normal((6, 40)).astype(np.float32)
    if fw.kind == "jax":
        pytest.skip("JAX arrays have no strided views")
    xv = fw.to(x)[::2, ::3]
    want = qg.quantize_tensor(fw.to(np.ascontiguousarray(x[::2, ::3])), bits=4, granularity="group", group_size=2)
    got = qg.quantize_tensor(xv, bits=4, granularity="group", group_size=2)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(_np(g), _np(w))


# ========================================================== dequantize_tensor
@pytest.mark.parametrize("bits", [8, 4])
@pytest.mark.parametrize("gran,gs,shape", GRANS, ids=[g[0] for g in GRANS])
def test_dequantize_inverts_with_inferred_granularity(fw, bits, gran, gs, shape, rng):
    if bits == 4 and gran == "channel":
        shape = shape[-2:]
    x = rng.standard_normal(shape).astype(np.float32)
    codes, scale, zp = qg.quantize_tensor(fw.to(x), bits=bits, scheme="asymmetric", granularity=gran,
                                          group_size=gs)
    y = qg.dequantize_tensor(codes, scale, zp, K=shape[-1])  # granularity from scale's shape
    assert _same_kind(y, codes)
    got = _np(y)
    assert got.dtype == np.float32 and got.shape == shape
    c = R.unpack_i4(_np(codes), shape[-1]) if bits == 4 else _np(codes).astype(np.int64)
    s, z = _np(scale), _np(zp)
    if gran == "channel":
        bshape = (-1,) + (1,) * (len(shape) - 1)
        want = R.dequantize(c, s.reshape(bshape), z.reshape(bshape))
    elif gran == "group":
        want = R.dequantize(c, R.expand_groups(s, gs), R.expand_groups(z, gs))
    else:
        want = R.dequantize(c, s, z)
    np.testing.assert_array_equal(got, want)
    # round trip within half a step (the range includes 0, so nothing saturates)
    assert np.max(np.abs(got - x)) <= np.max(s) * 0.5 + 1e-6


def test_dequantize_accepts_half_scales_and_int8_zero_points(rng):
    x = rng.standard_normal((4, 32)).astype(np.float32)
    codes, scale, zp = qg.quantize_tensor(x, bits=4, scheme="asymmetric", granularity="group", group_size=8)
    y = qg.dequantize_tensor(codes, scale.astype(np.float16), zp.astype(np.int8))
    want = R.dequantize(R.unpack_i4(codes, 32), R.expand_groups(scale.astype(np.float16).astype(np.float32), 8),
                        R.expand_groups(zp, 8))
    np.testing.assert_array_equal(y, want)


def test_dequantize_int32_gemm_result_seed_001(fw, rng):
    """The seed's flow: quantize both, int32 GEMM, dequantize_tensor(C, scale_a * scale_b)."""
    A = rng.standard_normal((9, 48)).astype(np.float32)
    B = rng.standard_normal((48, 7)).astype(np.float32)
    A_q, sa = qg.quantize_tensor(fw.to(A))
    B_q, sb = qg.quantize_tensor(fw.to(B))
    C = qg.int8_matmul(A_q, B_q, scale_a=sa, scale_b=sb, scale_c=1.0)  # the seed's call, word for word
    assert _np(C).dtype == np.int32
    C_f = qg.dequantize_tensor(C, sa * sb)
    assert _same_kind(C_f, C)
    got = _np(C_f)
    exact = _np(C).astype(np.float64) * float(_np(sa)[0]) * float(_np(sb)[0])
    assert R.nmse(got, exact) <= TIER_A
    assert R.nmse(got, A.astype(np.float64) @ B) <= 1e-3  # per-tensor int8 quality
    # per-channel scales, laid along an axis; python scale and zero point
    s = rng.random(7).astype(np.float32)
    got = _np(qg.dequantize_tensor(C, fw.to(s), granularity="channel", axis=1))
    np.testing.assert_allclose(got, _np(C).astype(np.float32) * s[None, :], rtol=1e-6)
    got = _np(qg.dequantize_tensor(C, 0.5, 3))
    np.testing.assert_array_equal(got, (_np(C).astype(np.float32) - 3) * np.float32(0.5))


# ================================================================ int8_matmul
def _int8(rng, shape):
    return rng.integers(-128, 128, shape).astype(np.int8)


MATMUL_SHAPES = [(1, 1, 1), (3, 17, 5), (7, 64, 1), (1, 33, 9), (0, 8, 4), (5, 8, 0), (4, 0, 3), (20, 100, 33)]


@pytest.mark.parametrize("M,K,N", MATMUL_SHAPES, ids=str)
@pytest.mark.parametrize("b_layout", ["kn", "nk"])
def test_int8_matmul_int32_exact(fw, M, K, N, b_layout, rng):
    A, B = _int8(rng, (M, K)), _int8(rng, (K, N))
    Bl = B if b_layout == "kn" else np.ascontiguousarray(B.T)
    C = qg.int8_matmul(fw.to(A), fw.to(Bl), b_layout=b_layout)
    assert _same_kind(C, fw.to(A))
    got = _np(C)
    assert got.dtype == np.int32 and got.shape == (M, N)
    np.testing.assert_array_equal(got, A.astype(np.int64) @ B.astype(np.int64))


@pytest.mark.parametrize("za,zb", [(3, None), (None, -7), (-128, 127), ("array", "array"), ("one", "one")])
def test_int8_matmul_zero_points_exact(fw, za, zb, rng):
    M, K, N = 5, 31, 6
    A, B = _int8(rng, (M, K)), _int8(rng, (K, N))

    def zp(v, n):
        if v == "array":
            return rng.integers(-128, 128, n).astype(np.int32)
        if v == "one":
            return rng.integers(-128, 128, 1).astype(np.int32)
        return v

    za, zb = zp(za, M), zp(zb, N)
    arg = lambda v: fw.to(v) if isinstance(v, np.ndarray) else v  # noqa: E731
    C = qg.int8_matmul(fw.to(A), fw.to(B), zero_point_a=arg(za), zero_point_b=arg(zb), activation="relu")
    za_ = np.zeros(M, np.int64) if za is None else np.broadcast_to(np.asarray(za, np.int64), (M,))
    zb_ = np.zeros(N, np.int64) if zb is None else np.broadcast_to(np.asarray(zb, np.int64), (N,))
    want = (A.astype(np.int64) - za_[:, None]) @ (B.astype(np.int64) - zb_[None, :])
    np.testing.assert_array_equal(_np(C), np.maximum(want, 0))


def test_int8_matmul_transposed_views(fw, rng):
    if fw.kind == "jax":
        pytest.skip("JAX arrays have no strided views")
    M, K, N = 6, 40, 9
    A, W = _int8(rng, (M, K)), _int8(rng, (N, K))
    want = A.astype(np.int64) @ W.T.astype(np.int64)
    Bt = fw.to(W).T  # [K, N], a transposed view: K-contiguous
    np.testing.assert_array_equal(_np(qg.int8_matmul(fw.to(A), Bt)), want)
    At = fw.to(np.ascontiguousarray(A.T)).T  # A as a transposed view
    np.testing.assert_array_equal(_np(qg.int8_matmul(At, Bt)), want)
    np.testing.assert_array_equal(_np(qg.int8_matmul(At, fw.to(W), b_layout="nk")), want)
    Bs = fw.to(np.ascontiguousarray(np.repeat(W.T, 2, axis=1)))[:, ::2]  # a strided slice
    np.testing.assert_array_equal(_np(qg.int8_matmul(fw.to(A), Bs)), want)
    if fw.kind == "numpy":  # a flipped view (negative stride): copied before the core sees it
        Bf = np.ascontiguousarray(W.T[::-1])[::-1]
        np.testing.assert_array_equal(_np(qg.int8_matmul(A, Bf)), want)


@pytest.mark.parametrize("out_dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("scales", ["floats", "vectors", "ones"])
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("relu", [False, True])
def test_int8_matmul_float_epilogue(fw, out_dtype, scales, bias, relu, rng):
    if out_dtype == "bfloat16" and fw.kind != "torch":
        pytest.skip("bfloat16 results are torch only")
    M, K, N = 7, 50, 11
    A, B = _int8(rng, (M, K)), _int8(rng, (K, N))
    if scales == "floats":
        sa, sb = 0.01, 0.02
        sa_, sb_ = np.full(M, 0.01), np.full(N, 0.02)
    elif scales == "vectors":
        sa_ = ((rng.random(M) + 0.1) * 0.01).astype(np.float32)  # results stay inside float16's range
        sb_ = ((rng.random(N) + 0.1) * 0.01).astype(np.float32)
        sa, sb = fw.to(sa_), fw.to(sb_)
    else:
        sa_, sb_ = np.full(M, 0.025, np.float32), np.full(N, 0.05, np.float32)
        sa, sb = fw.to(sa_[:1]), fw.to(sb_[:1])
    b = rng.standard_normal(N).astype(np.float32) * 100 if bias else None
    C = qg.int8_matmul(fw.to(A), fw.to(B), sa, sb, 1.5, bias=None if b is None else fw.to(b),
                       activation="relu" if relu else None, out_dtype=out_dtype, zero_point_a=2)
    want = ((A.astype(np.float64) - 2) @ B) * np.asarray(sa_, np.float64)[:, None] * np.asarray(sb_)[None, :] * 1.5
    if b is not None:
        want = want + b
    if relu:
        want = np.maximum(want, 0)
    got = _np(C)
    assert got.shape == (M, N)
    assert str(C.dtype).endswith(out_dtype)
    assert R.nmse(got, want) <= (TIER_BF16 if out_dtype == "bfloat16" else TIER_A)


def test_int8_matmul_leading_dims_of_A(rng):
    A, B = _int8(rng, (2, 3, 16)), _int8(rng, (16, 5))
    C = qg.int8_matmul(A, B)
    assert C.shape == (2, 3, 5)
    np.testing.assert_array_equal(C, A.astype(np.int64) @ B)


# ===================================================================== INT4
def _int4(rng, shape):
    return rng.integers(-8, 8, shape).astype(np.int8)


@pytest.mark.parametrize("shape", [(1,), (5,), (3, 8), (2, 3, 7), (4, 0), (0, 3)], ids=str)
def test_pack_int4_layout(fw, shape, rng):
    v = _int4(rng, shape)
    p = qg.pack_int4(fw.to(v))
    got = _np(p)
    assert got.dtype == np.uint8 and got.shape == (*shape[:-1], (shape[-1] + 1) // 2)
    np.testing.assert_array_equal(got, R.pack_i4(v))
    back = _np(qg.unpack_int4(p, shape[-1]))
    assert back.dtype == np.int8
    np.testing.assert_array_equal(back, v)


def test_pack_int4_low_nibble_first_twos_complement():
    p = qg.pack_int4(np.array([[1, -1, -8, 7, 3]], np.int8))
    np.testing.assert_array_equal(p, [[0xF1, 0x78, 0x03]])


@pytest.mark.parametrize("M,K,N", [(1, 1, 1), (3, 7, 5), (4, 32, 1), (1, 33, 9), (6, 2, 3), (0, 4, 2), (2, 0, 3)],
                         ids=str)
@pytest.mark.parametrize("b_layout", ["kn", "nk"])
def test_int4_packed_matmul_exact(fw, M, K, N, b_layout, rng):
    A, B = _int4(rng, (M, K)), _int4(rng, (K, N))
    A_p = R.pack_i4(A)
    B_p = R.pack_i4(B.T)  # [N, ceil(K/2)]
    if b_layout == "kn":
        B_p = np.ascontiguousarray(B_p.T)  # [ceil(K/2), N]
    C = qg.int4_packed_matmul(fw.to(A_p), fw.to(B_p), K, b_layout=b_layout)
    got = _np(C)
    assert got.dtype == np.int32 and got.shape == (M, N)
    np.testing.assert_array_equal(got, A.astype(np.int64) @ B.astype(np.int64))


@pytest.mark.parametrize("shape,dim", [((3, 16), -1), ((16, 5), 0), ((2, 8, 3), 1), ((8,), 0)], ids=str)
def test_pack_int4_to_int32_seed_003_formula(fw, shape, dim, rng):
    v = _int4(rng, shape)
    p = qg.pack_int4_to_int32(fw.to(v), dim=dim)
    moved = np.moveaxis(v, dim, -1)
    want = np.moveaxis(R.pack_i4x8(moved), -1, dim)
    got = _np(p)
    assert got.dtype == np.int32 and got.shape == want.shape
    np.testing.assert_array_equal(got, want)
    # the seed's formula, word by word
    flat = moved.reshape(-1, 8).astype(np.int64) + 8
    words = (flat << (4 * np.arange(8))).sum(-1).astype(np.uint32).view(np.int32)
    np.testing.assert_array_equal(np.moveaxis(got, dim, -1).reshape(-1), words)
    np.testing.assert_array_equal(_np(qg.unpack_int4_from_int32(p, dim=dim)), v)


@pytest.mark.parametrize("M,K,N", [(1, 8, 1), (5, 64, 7), (16, 256, 33), (3, 8, 0)], ids=str)
def test_int4_matmul_seed_003(fw, M, K, N, rng):
    a, b = _int4(rng, (M, K)), _int4(rng, (K, N))
    sa, sb = rng.random(M).astype(np.float32) + 0.05, rng.random(N).astype(np.float32) + 0.05
    a_p = qg.pack_int4_to_int32(fw.to(a))
    b_p = qg.pack_int4_to_int32(fw.to(b), dim=0)
    assert tuple(b_p.shape) == (K // 8, N)
    C = qg.int4_matmul(a_p, b_p, fw.to(sa), fw.to(sb))
    got = _np(C)
    assert got.dtype == np.float16 and got.shape == (M, N)
    want = (a.astype(np.float64) @ b) * sa[:, None].astype(np.float64) * sb[None, :]
    assert R.nmse(got, want) <= TIER_A


@needs_torch
def test_int4_matmul_variants_and_generate_test_data():
    import torch

    a_p, b_p, sa, sb, a, b = qg.generate_test_data(12, 64, 9, seed=3)
    assert a_p.dtype == torch.int32 and a_p.shape == (12, 8) and b_p.shape == (8, 9)
    assert sa.shape == (12,) and sb.shape == (9,) and a.shape == (12, 64) and b.shape == (64, 9)
    assert int(a.min()) >= -8 and int(a.max()) <= 7
    assert torch.equal(qg.unpack_int4_from_int32(a_p), a) and torch.equal(qg.unpack_int4_from_int32(b_p, 0), b)
    again = qg.generate_test_data(12, 64, 9, seed=3)
    assert all(torch.equal(x, y) for x, y in zip(again, (a_p, b_p, sa, sb, a, b)))
    got = qg.int4_matmul(a_p, b_p, sa, sb)
    ref = qg.int4_matmul_pytorch(a_p, b_p, sa, sb)
    assert got.dtype == ref.dtype == torch.float16
    want = (a.double() @ b.double()) * sa.double()[:, None] * sb.double()[None, :]
    assert R.nmse(got.numpy(), want.numpy()) <= TIER_A
    assert R.nmse(ref.numpy(), want.numpy()) <= TIER_A
    if not qg.cuda_available() or not torch.cuda.is_available():
        with pytest.raises(RuntimeError, match=r"^qg\.int4_matmul_cuda: .*(CUDA|cuda)"):
            qg.int4_matmul_cuda(a_p, b_p, sa, sb)
    else:
        c = qg.int4_matmul_cuda(a_p.cuda(), b_p.cuda(), sa.cuda(), sb.cuda())
        assert torch.equal(c.cpu(), got)


# ================================================================ linear_int4
def _weight_int4(rng, n_out, k, gs, asym):
    w = rng.standard_normal((n_out, k)).astype(np.float32)
    out = qg.quantize_tensor(w, bits=4, scheme="asymmetric" if asym else "symmetric", granularity="group",
                             group_size=gs)
    q, s = out[0], out[1]
    zp = out[2] if asym else None
    w_deq = R.dequantize(R.unpack_i4(q, k), R.expand_groups(s, gs), 0 if zp is None else R.expand_groups(zp, gs))
    return q, s, zp, w_deq


@pytest.mark.parametrize("lead,K,N,gs", [((1,), 32, 1, 32), ((3,), 64, 5, 16), ((2, 3), 128, 17, 32),
                                         ((0,), 32, 4, 8), ((4,), 256, 40, 128)], ids=str)
@pytest.mark.parametrize("asym", [False, True])
@pytest.mark.parametrize("bias", [False, True])
def test_linear_int4_matches_float64(fw, lead, K, N, gs, asym, bias, rng):
    q, s, zp, w_deq = _weight_int4(rng, N, K, gs, asym)
    x = rng.standard_normal((*lead, K)).astype(np.float32)
    b = rng.standard_normal(N).astype(np.float32) if bias else None
    y = qg.linear_int4(fw.to(x), fw.to(q), fw.to(s), None if zp is None else fw.to(zp), group_size=gs,
                       bias=None if b is None else fw.to(b))
    assert _same_kind(y, fw.to(x))
    got = _np(y)
    assert got.shape == (*lead, N) and got.dtype == np.float32
    want = x.astype(np.float64) @ w_deq.T.astype(np.float64) + (0 if b is None else b)
    assert R.nmse(got, want) <= TIER_A


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("scale_dtype", ["float32", "float16"])
def test_linear_int4_half_activations(fw, dtype, scale_dtype, rng):
    if dtype == "bfloat16" and fw.kind != "torch":
        pytest.skip("bfloat16 results are torch only")
    q, s, zp, _ = _weight_int4(rng, 24, 64, 32, True)
    s_h = s.astype(scale_dtype)
    w_deq = R.dequantize(R.unpack_i4(q, 64), R.expand_groups(s_h.astype(np.float32), 32), R.expand_groups(zp, 32))
    x = rng.standard_normal((5, 64)).astype(np.float32)
    xt = _to_dtype(fw, x, dtype)
    y = qg.linear_int4(xt, fw.to(q), fw.to(s_h), fw.to(zp.astype(np.int8)), group_size=32, activation="relu")
    assert str(y.dtype).endswith(dtype)
    want = np.maximum(_rounded_f32(x, dtype).astype(np.float64) @ w_deq.T, 0)
    assert R.nmse(_np(y), want) <= (TIER_BF16 if dtype == "bfloat16" else TIER_A)


# A prompt's worth of tokens (33: past one 32-token tile) of half-precision
# activations, K a multiple of 128: on CUDA a tiled prefill GEMM takes it,
# with each group size, without zero points and with int32 (as
# quantize_tensor gives them) and int8 ones. On an sm_90 GPU (checked
# through torch) groups of 128 without zero points or with int8 ones run on
# cuda_wo_wgmma; the rest on cuda_wo_mma.
@pytest.mark.parametrize("gs", [32, 64, 128])
@pytest.mark.parametrize("zp_dtype", [None, "int32", "int8"])
def test_linear_int4_prefill_tokens(fw, gs, zp_dtype, rng):
    dtype = "bfloat16" if fw.kind == "torch" else "float16"
    k, n_out, tokens = 384, 72, 33
    q, s, zp, _ = _weight_int4(rng, n_out, k, gs, zp_dtype is not None)
    if zp is not None:
        assert np.abs(zp).max() <= 127
        zp = zp.astype(zp_dtype)
    s_h = s.astype(np.float16)
    w_deq = R.dequantize(R.unpack_i4(q, k), R.expand_groups(s_h.astype(np.float32), gs),
                         0 if zp is None else R.expand_groups(zp.astype(np.int32), gs))
    x = rng.standard_normal((tokens, k)).astype(np.float32)
    args = (_to_dtype(fw, x, dtype), fw.to(q), fw.to(s_h), None if zp is None else fw.to(zp))
    if fw.device == "cuda":  # a tiled GEMM, not the GEMV over slices of 16 tokens
        chosen = qg.explain(qg.linear_int4, *args, group_size=gs).chosen
        wgmma = gs >= 128 and zp_dtype != "int32"
        cap = None
        if fw.kind == "torch":
            import torch
            cap = torch.cuda.get_device_capability()
        if cap == (9, 0):
            assert chosen == ("cuda_wo_wgmma" if wgmma else "cuda_wo_mma"), chosen
        else:
            assert chosen in ("cuda_wo_wgmma", "cuda_wo_mma"), chosen
            assert wgmma or chosen == "cuda_wo_mma", chosen
    y = qg.linear_int4(*args, group_size=gs)
    assert str(y.dtype).endswith(dtype) and tuple(y.shape) == (tokens, n_out)
    want = _rounded_f32(x, dtype).astype(np.float64) @ w_deq.T
    assert R.nmse(_np(y), want) <= (TIER_BF16 if dtype == "bfloat16" else TIER_A)


# fp32 activations on CUDA: each x as two bf16 (hi, lo) on the bf16 kernels
# (cuda_wo_f32_split), 16 significant bits of every x, so an NMSE of 1e-8
# against float64 of the fp32 x (one bf16 an x would give about 1e-6).
@pytest.mark.parametrize("tokens", [1, 3, 40])
def test_linear_int4_fp32_activations_on_cuda(fw, tokens, rng):
    if fw.device != "cuda":
        pytest.skip("the CUDA kernel for fp32 activations")
    k, n_out, gs = 512, 96, 128
    q, s, zp, w_deq = _weight_int4(rng, n_out, k, gs, True)
    x = rng.standard_normal((tokens, k)).astype(np.float32)
    b = rng.standard_normal(n_out).astype(np.float32)
    args = (fw.to(x), fw.to(q), fw.to(s), fw.to(zp))
    assert qg.explain(qg.linear_int4, *args, group_size=gs, bias=fw.to(b)).chosen == "cuda_wo_f32_split"
    y = qg.linear_int4(*args, group_size=gs, bias=fw.to(b), activation="relu")
    assert _same_kind(y, fw.to(x)) and str(y.dtype).endswith("float32")
    want = np.maximum(x.astype(np.float64) @ w_deq.T.astype(np.float64) + b, 0)
    assert R.nmse(_np(y), want) <= 1e-8


# ===================================================================== errors
def test_errors_int8_matmul():
    A, B = np.zeros((4, 8), np.int8), np.zeros((8, 3), np.int8)
    fn = r"^qg\.int8_matmul: "
    with pytest.raises(TypeError, match=fn + r".*A must be int8"):
        qg.int8_matmul(A.astype(np.float32), B)
    with pytest.raises(TypeError, match=fn + r".*B must be int8"):
        qg.int8_matmul(A, B.astype(np.int16))
    with pytest.raises(ValueError, match=fn + r"B has K=9 but A has K=8"):
        qg.int8_matmul(A, np.zeros((9, 3), np.int8))
    with pytest.raises(ValueError, match=fn + r"B must be 2-D"):
        qg.int8_matmul(A, np.zeros((8, 3, 1), np.int8))
    with pytest.raises(ValueError, match=fn + r"scale_a .*\[1\] or \[M\]=\[4\], got shape \[3\]"):
        qg.int8_matmul(A, B, np.ones(3, np.float32), out_dtype="float32")
    with pytest.raises(ValueError, match=fn + r"scale_b .*\[N\]=\[3\]"):
        qg.int8_matmul(A, B, 1.0, np.ones(4, np.float32), out_dtype="float32")
    with pytest.raises(TypeError, match=fn + r"scale_a must be a float array"):
        qg.int8_matmul(A, B, np.ones(4, np.int32), out_dtype="float32")
    with pytest.raises(ValueError, match=fn + r"out_dtype='int32' is the exact integer sum.*out_dtype='float32'"):
        qg.int8_matmul(A, B, bias=np.ones(3, np.float32))
    # Seed 001 passes scales with its int32 result: they are checked, not applied.
    np.testing.assert_array_equal(qg.int8_matmul(A, B, 0.5, np.ones(3, np.float32)), qg.int8_matmul(A, B))
    with pytest.raises(ValueError, match=fn + r"scale_a .*\[1\] or \[M\]=\[4\], got shape \[3\]"):
        qg.int8_matmul(A, B, np.ones(3, np.float32))
    with pytest.raises(ValueError, match=fn + r"zero_point_a=200 is outside the code range \[-128, 127\]"):
        qg.int8_matmul(A, B, zero_point_a=200)
    with pytest.raises(ValueError, match=fn + r"zero_point_b must hold values in \[-128, 127\].*\[-300, 5\]"):
        qg.int8_matmul(A, B, zero_point_b=np.array([5, -300, 0], np.int32))
    with pytest.raises(ValueError, match=fn + r"zero_point_b .*\[N\]=\[3\]"):
        qg.int8_matmul(A, B, zero_point_b=np.zeros(4, np.int32))
    with pytest.raises(TypeError, match=fn + r"zero_point_a must be an integer array"):
        qg.int8_matmul(A, B, zero_point_a=np.zeros(4, np.float32))
    with pytest.raises(ValueError, match=fn + r"b_layout must be"):
        qg.int8_matmul(A, B, b_layout="mn")
    with pytest.raises(ValueError, match=fn + r"activation must be None or 'relu'"):
        qg.int8_matmul(A, B, activation="gelu")
    with pytest.raises(ValueError, match=fn + r"out_dtype must be one of"):
        qg.int8_matmul(A, B, out_dtype="int8")
    with pytest.raises(TypeError, match=fn + r"scale_c must be a Python float"):
        qg.int8_matmul(A, B, scale_c=np.ones(1, np.float32), out_dtype="float32")
    with pytest.raises(ValueError, match=fn + r"bias must have shape \[3\]"):
        qg.int8_matmul(A, B, bias=np.ones(4, np.float32), out_dtype="float32")
    with pytest.raises(TypeError, match=fn + r"A is a numpy array but B is a"):
        import jax.numpy as jnp  # noqa: F401 - only when jax is installed

        qg.int8_matmul(A, jnp.asarray(B))


def test_error_int8_matmul_k_past_int32_limit():
    K = 131072  # symmetric int8: 131071 is the largest exact K
    A, B = np.ones((1, K), np.int8), np.ones((K, 1), np.int8)
    with pytest.raises(ValueError, match=r"^qg\.int8_matmul: K=131072 is past 131071.*split K"):
        qg.int8_matmul(A, B)
    np.testing.assert_array_equal(qg.int8_matmul(A[:, :-1], B[:-1]), [[K - 1]])
    with pytest.raises(ValueError, match=r"^qg\.int8_matmul: K=40000 is past 33025.*zero points"):
        qg.int8_matmul(A[:, :40000], B[:40000], zero_point_a=1, zero_point_b=-1)


def test_errors_quantize_tensor():
    x = np.zeros((4, 8), np.float32)
    fn = r"^qg\.quantize_tensor: "
    with pytest.raises(ValueError, match=fn + r"bits must be 8 or 4, got 3"):
        qg.quantize_tensor(x, bits=3)
    with pytest.raises(ValueError, match=fn + r"scheme must be"):
        qg.quantize_tensor(x, scheme="affine")
    with pytest.raises(ValueError, match=fn + r"granularity must be"):
        qg.quantize_tensor(x, granularity="row")
    with pytest.raises(ValueError, match=fn + r"granularity='group' needs group_size"):
        qg.quantize_tensor(x, granularity="group")
    with pytest.raises(ValueError, match=fn + r"group_size=3 does not divide K=8"):
        qg.quantize_tensor(x, granularity="group", group_size=3)
    with pytest.raises(ValueError, match=fn + r"group_size is for granularity='group'"):
        qg.quantize_tensor(x, group_size=4)
    with pytest.raises(ValueError, match=fn + r"bits=4 with granularity='channel' takes 2-D x \[C, K\] and axis=0"):
        qg.quantize_tensor(x, bits=4, granularity="channel", axis=1)
    with pytest.raises(ValueError, match=fn + r"packing='int32' .* symmetric only"):
        qg.quantize_tensor(x, bits=4, packing="int32", scheme="asymmetric")
    with pytest.raises(ValueError, match=fn + r"packing='int32' is for bits=4"):
        qg.quantize_tensor(x, packing="int32")
    with pytest.raises(ValueError, match=fn + r"K=12 .* not a multiple of 8, the i4x8 block size"):
        qg.quantize_tensor(np.zeros((2, 12), np.float32), bits=4, packing="int32")
    with pytest.raises(TypeError, match=fn + r"x must be float32, float16 or bfloat16, got int32"):
        qg.quantize_tensor(x.astype(np.int32))
    with pytest.raises(ValueError, match=fn + r"scale must have shape \[4\] for granularity 'channel', got \[3\]"):
        qg.quantize_tensor(x, granularity="channel", scale=np.ones(3, np.float32))
    with pytest.raises(ValueError, match=fn + r"a Python number as scale is one scale for the tensor"):
        qg.quantize_tensor(x, granularity="channel", scale=0.5)
    with pytest.raises(ValueError, match=fn + r"zero_point must have shape \[4\]"):
        qg.quantize_tensor(x, granularity="channel", scheme="asymmetric", scale=np.ones(4, np.float32),
                           zero_point=np.zeros(2, np.int32))
    with pytest.raises(ValueError, match=fn + r"zero_point=9 is outside the code range \[-8, 7\]"):
        qg.quantize_tensor(x, bits=4, scheme="asymmetric", scale=1.0, zero_point=9)
    with pytest.raises(ValueError, match=fn + r"zero_point must hold values in \[-128, 127\]"):
        qg.quantize_tensor(x, granularity="channel", scheme="asymmetric", scale=np.ones(4, np.float32),
                           zero_point=np.array([0, 0, 0, 1000], np.int32))
    with pytest.raises(ValueError, match=fn + r"zero_point was given without scale"):
        qg.quantize_tensor(x, scheme="asymmetric", zero_point=1)
    with pytest.raises(ValueError, match=fn + r"static asymmetric quantization needs zero_point"):
        qg.quantize_tensor(x, scheme="asymmetric", scale=1.0)
    with pytest.raises(ValueError, match=fn + r"symmetric quantization takes no zero_point"):
        qg.quantize_tensor(x, scale=1.0, zero_point=0)
    with pytest.raises(ValueError, match=fn + r"x must have shape \[..., K\], got a 0-d array"):
        qg.quantize_tensor(np.array(1.0, np.float32))
    with pytest.raises(TypeError, match=fn + r"scale must be a float array"):
        qg.quantize_tensor(x, scale=np.ones(1, np.int32))


def test_errors_dequantize_tensor():
    fn = r"^qg\.dequantize_tensor: "
    with pytest.raises(TypeError, match=fn + r"q must be int8 .* got float32"):
        qg.dequantize_tensor(np.zeros((2, 4), np.float32), 1.0)
    with pytest.raises(ValueError, match=fn + r"cannot tell the granularity from scale of shape \[3\]"):
        qg.dequantize_tensor(np.zeros((2, 4), np.int8), np.ones(3, np.float32))
    with pytest.raises(ValueError, match=fn + r"q is int8, which holds 8-bit codes, but bits=4"):
        qg.dequantize_tensor(np.zeros((2, 4), np.int8), 1.0, bits=4)
    with pytest.raises(ValueError, match=fn + r"K=9 does not match"):
        qg.dequantize_tensor(np.zeros((2, 4), np.uint8), 1.0, K=9)
    with pytest.raises(ValueError, match=fn + r"scale has 3 groups per row, which does not divide K=8"):
        qg.dequantize_tensor(np.zeros((2, 4), np.uint8), np.ones((2, 3), np.float32))
    with pytest.raises(ValueError, match=fn + r"zero_point=200 is outside the code range \[-128, 127\]"):
        qg.dequantize_tensor(np.zeros((2, 4), np.int8), 1.0, 200)


def test_errors_int4():
    with pytest.raises(ValueError, match=r"^qg\.pack_int4: x must hold values in \[-8, 7\].*\[-9, 3\]"):
        qg.pack_int4(np.array([3, -9], np.int8))
    with pytest.raises(TypeError, match=r"^qg\.pack_int4: x must be an integer array"):
        qg.pack_int4(np.zeros(4, np.float32))
    with pytest.raises(ValueError, match=r"^qg\.pack_int4_to_int32: x must hold values in \[-8, 7\]"):
        qg.pack_int4_to_int32(np.full(8, 8, np.int32))
    with pytest.raises(ValueError, match=r"^qg\.pack_int4_to_int32: K=12 .*multiple of 8"):
        qg.pack_int4_to_int32(np.zeros((2, 12), np.int8))
    with pytest.raises(ValueError, match=r"^qg\.int4_packed_matmul: K must be given"):
        qg.int4_packed_matmul(np.zeros((2, 2), np.uint8), np.zeros((2, 2), np.uint8), None)
    with pytest.raises(ValueError, match=r"^qg\.int4_packed_matmul: K=7 does not match B_packed"):
        qg.int4_packed_matmul(np.zeros((2, 2), np.uint8), np.zeros((3, 2), np.uint8), 7)
    with pytest.raises(TypeError, match=r"^qg\.int4_matmul: b_packed must be int32"):
        qg.int4_matmul(np.zeros((2, 1), np.int32), np.zeros((1, 3), np.uint8), 1.0, 1.0)
    with pytest.raises(ValueError, match=r"^qg\.int4_matmul: scale_b .*\[N\]=\[3\]"):
        qg.int4_matmul(np.zeros((2, 1), np.int32), np.zeros((1, 3), np.int32), 1.0, np.ones(2, np.float32))
    with pytest.raises(ValueError, match=r"^qg\.generate_test_data: K=12 is not a multiple of 8"):
        pytest.importorskip("torch")
        qg.generate_test_data(2, 12, 3)


def test_errors_linear_int4(rng):
    q, s, _, _ = _weight_int4(rng, 4, 64, 32, False)
    x = np.zeros((2, 64), np.float32)
    fn = r"^qg\.linear_int4: "
    with pytest.raises(TypeError, match=fn + r"x must be float32, float16 or bfloat16, got int8"):
        qg.linear_int4(x.astype(np.int8), q, s, group_size=32)
    with pytest.raises(ValueError, match=fn + r"scales must have shape \[4, 4\] .*got \[4, 2\]"):
        qg.linear_int4(x, q, s, group_size=16)
    with pytest.raises(ValueError, match=fn + r"weight_q has K=64 but x has K=65|K=65 does not match weight_q"):
        qg.linear_int4(np.zeros((2, 65), np.float32), q, s, group_size=32)
    with pytest.raises(TypeError, match=fn + r"weight_q must be uint8"):
        qg.linear_int4(x, q.view(np.int8), s, group_size=32)
    with pytest.raises(ValueError, match=fn + r"zero_points must hold values in \[-8, 7\]"):
        qg.linear_int4(x, q, s, np.full((4, 2), 9, np.int32), group_size=32)
    with pytest.raises(TypeError, match=fn + r"zero_points must be int8 or int32"):
        qg.linear_int4(x, q, s, np.zeros((4, 2), np.float32), group_size=32)
    with pytest.raises(ValueError, match=fn + r"group_size must be positive"):
        qg.linear_int4(x, q, s, group_size=0)


# ========================================================== CPU == CUDA
def _check_cuda_kn_int8(cuda_fw, rng, n):
    """int8_matmul with B stored [K, N] on the GPU against the CPU: int32 exact, and with scales, bias and relu;
    the caller's B left as it was, and the core's repack named by qg.explain."""
    A, B = _int8(rng, (130, 512)), _int8(rng, (512, n))
    sa, sb, bias = (rng.uniform(0.5, 2, k).astype(np.float32) for k in (130, n, n))
    gB = cuda_fw.to(B)
    np.testing.assert_array_equal(_np(qg.int8_matmul(cuda_fw.to(A), gB)), qg.int8_matmul(A, B))
    got = _np(qg.int8_matmul(cuda_fw.to(A), gB, cuda_fw.to(sa), cuda_fw.to(sb), bias=cuda_fw.to(bias),
                             activation="relu", out_dtype="float32"))
    want = qg.int8_matmul(A, B, sa, sb, bias=bias, activation="relu", out_dtype="float32")
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-3)
    np.testing.assert_array_equal(_np(gB), B)
    assert qg.explain(qg.int8_matmul, cuda_fw.to(A), gB).chosen == "cuda_i8_repacked"


def test_cuda_bytes_equal_cpu(cuda_fw, rng):
    x = rng.standard_normal((33, 200)).astype(np.float32)
    for kw in (dict(), dict(bits=4, granularity="channel"), dict(bits=4, scheme="asymmetric", granularity="group",
                                                                  group_size=40),
               dict(granularity="channel", scheme="asymmetric"), dict(bits=4, packing="int32", granularity="group",
                                                                       group_size=40)):
        cpu = qg.quantize_tensor(x, **kw)
        gpu = qg.quantize_tensor(cuda_fw.to(x), **kw)
        for c, g in zip(cpu, gpu):
            assert np.asarray(c).tobytes() == _np(g).tobytes(), kw
    A, B = _int8(rng, (37, 300)), _int8(rng, (300, 45))
    np.testing.assert_array_equal(_np(qg.int8_matmul(cuda_fw.to(A), cuda_fw.to(B))), qg.int8_matmul(A, B))
    # B stored [K, N] on the GPU: the core repacks it (cuda_i8_repacked); N = 256 takes its line
    # kernel with 16-byte loads (K-steps 16-byte aligned), N = 200 with word loads, N = 45 (just above)
    # and N = 201 its any-stride one.
    for n in (256, 200, 201):
        _check_cuda_kn_int8(cuda_fw, rng, n)
    q, s, zp, _ = _weight_int4(rng, 24, 128, 32, True)
    xs = rng.standard_normal((3, 128)).astype(np.float32)
    want = qg.linear_int4(xs, q, s, zp, group_size=32)
    got = _np(qg.linear_int4(cuda_fw.to(xs), cuda_fw.to(q), cuda_fw.to(s), cuda_fw.to(zp), group_size=32))
    assert R.nmse(got, want) <= TIER_A


# =================================================== torch tracing of the new ops
@needs_torch
def test_int_functions_under_torch_compile(fresh_dynamo, rng):
    import torch

    def f(x, w):
        xq, xs = qg.quantize_tensor(x, granularity="channel")
        wq, ws = qg.quantize_tensor(w, granularity="channel")
        y = qg.int8_matmul(xq, wq, xs, ws, out_dtype="float32", b_layout="nk", activation="relu")
        q4, s4 = qg.quantize_tensor(w, bits=4, granularity="group", group_size=16)
        z = qg.linear_int4(x, q4, s4, group_size=16)
        return y + z + qg.dequantize_tensor(wq, ws).sum()

    x = torch.from_numpy(rng.standard_normal((5, 32)).astype(np.float32))
    w = torch.from_numpy(rng.standard_normal((7, 32)).astype(np.float32))
    explanation = torch._dynamo.explain(f)(x, w)
    assert explanation.graph_break_count == 0, explanation.break_reasons
    ops = [str(n.target) for g in explanation.graphs for n in g.graph.nodes if n.op == "call_function"]
    assert any("qg.quantize_int" in o for o in ops) and any("qg.gemm" in o for o in ops), ops
    compiled = torch.compile(f, backend="eager", fullgraph=True)
    assert torch.equal(compiled(x, w), f(x, w))


@needs_torch
def test_fake_implementations_give_the_eager_shapes(rng):
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode

    x = torch.from_numpy(rng.standard_normal((3, 4, 22)).astype(np.float32))
    A = torch.from_numpy(_int8(rng, (5, 22)))
    B = torch.from_numpy(_int8(rng, (22, 6)))
    cases = [
        lambda x, A, B: qg.quantize_tensor(x, bits=4, scheme="asymmetric", granularity="group", group_size=2),
        lambda x, A, B: qg.quantize_tensor(x, granularity="channel", axis=2),
        lambda x, A, B: qg.int8_matmul(A, B, zero_point_a=1),
        lambda x, A, B: qg.int4_packed_matmul(qg.pack_int4(A.clamp(-8, 7)), qg.pack_int4(B.T.clamp(-8, 7)).T, 22),
        lambda x, A, B: qg.unpack_int4(qg.pack_int4(A.clamp(-8, 7)), 22),
    ]
    for case in cases:
        eager = case(x, A, B)
        eager = eager if isinstance(eager, tuple) else (eager,)
        with FakeTensorMode(allow_non_fake_inputs=True) as mode:
            fake = case(mode.from_tensor(x), mode.from_tensor(A), mode.from_tensor(B))
        fake = fake if isinstance(fake, tuple) else (fake,)
        assert [(t.shape, t.dtype) for t in fake] == [(t.shape, t.dtype) for t in eager]


@needs_torch
def test_fast_path_equals_generic_path(rng):
    """Eager torch calls take the single-crossing path; out-of-order views the generic one: same bytes."""
    import torch

    A = torch.from_numpy(_int8(rng, (6, 40)))
    W = torch.from_numpy(_int8(rng, (9, 40)))
    sa, sb = torch.rand(6) + 0.1, torch.rand(9) + 0.1
    fast = qg.int8_matmul(A, W, sa, sb, out_dtype="float16", b_layout="nk")
    slow = qg.int8_matmul(A.T.contiguous().T, W, sa[None].expand(2, 6)[0], sb, out_dtype="float16", b_layout="nk")
    assert torch.equal(fast, slow)
    x = torch.from_numpy(rng.standard_normal((4, 40)).astype(np.float32))
    assert all(torch.equal(a, b) for a, b in zip(qg.quantize_tensor(x, granularity="channel"),
                                                 qg.quantize_tensor(x[:, None, :].expand(4, 2, 40)[:, 0],
                                                                    granularity="channel")))


@needs_torch
def test_single_crossing_entries_equal_the_plans(monkeypatch, rng):
    """Eager calls on plain torch tensors go to the integer family's C++ entries; with them turned away, the
    Python plans make each call: the same bytes, shapes and dtypes, or the same error."""
    import torch

    from qg import _qg, torch_ops

    A = torch.from_numpy(_int8(rng, (3, 2, 40)))
    W = torch.from_numpy(_int8(rng, (9, 40)))
    sa, sb = torch.rand(6) + 0.1, torch.rand(9) + 0.1
    x = torch.from_numpy(rng.standard_normal((2, 3, 64)).astype(np.float32))
    q, s, _, _ = (torch.from_numpy(a) if a is not None else None for a in _weight_int4(rng, 5, 64, 16, False))
    bias = torch.rand(5)
    cases = [
        lambda: qg.int8_matmul(A, W.T),
        lambda: qg.int8_matmul(A[0], W, sa[:2], sb, 0.5, out_dtype="float16", b_layout="nk", activation="relu"),
        lambda: qg.int8_matmul(A, W, 2.0, sb[:1], bias=sb, out_dtype="bfloat16", b_layout="nk"),
        lambda: qg.int8_matmul(A, W.T.contiguous(), sa, sb.half(), out_dtype="float32"),  # the plan converts
        lambda: qg.int8_matmul(A, W, bias=sb, b_layout="nk"),  # an int32 result takes no bias
        lambda: qg.int8_matmul(A, W, sa[:5], b_layout="nk"),  # scale_a of neither [1] nor [M]
        lambda: qg.int8_matmul(A[..., :39], W, b_layout="nk"),  # K differs: the core's message
        lambda: qg.quantize_tensor(x[0], granularity="channel"),
        lambda: qg.quantize_tensor(x, bits=4, scheme="asymmetric", granularity="group", group_size=8),
        lambda: qg.quantize_tensor(x, bits=4, packing="int32"),
        lambda: qg.quantize_tensor(x, granularity="group", group_size=7),
        lambda: qg.quantize_tensor(x.int()),
        lambda: qg.linear_int4(x, q, s, group_size=16),
        lambda: qg.linear_int4(x.half(), q, s.half(), bias=bias, activation="relu", group_size=16),
        lambda: qg.linear_int4(x[..., :48], q, s, group_size=16),
    ]

    def outcome(case):
        try:
            r = case()
        except (TypeError, ValueError) as e:
            return type(e), str(e)
        return [(t.dtype, tuple(t.shape), t.float().numpy().tobytes()) for t in (r if isinstance(r, tuple) else (r,))]

    taken = []  # the entries that made a call (not None)

    def counted(name):
        entry = getattr(_qg, name)

        def call(*args):
            r = entry(*args)
            if r is not None:
                taken.append(name)
            return r

        return call

    for name in ("fast_int8_matmul", "fast_quantize_tensor", "fast_linear_int4"):
        monkeypatch.setattr(_qg, name, counted(name))
    with torch.no_grad():
        fast = [outcome(c) for c in cases]
        assert sorted(set(taken)) == ["fast_int8_matmul", "fast_linear_int4", "fast_quantize_tensor"]
        monkeypatch.setattr(torch_ops, "plain_ok", lambda *args: False)
        assert [outcome(c) for c in cases] == fast


@needs_torch
def test_quantize_refuses_grad_inputs():
    import torch

    x = torch.ones(2, 8, requires_grad=True)
    with pytest.raises(RuntimeError, match=r"^qg\.quantize_tensor: x requires grad.*detach\(\).*QuantizedLinear"):
        qg.quantize_tensor(x)
    qg.quantize_tensor(x.detach())
    with torch.no_grad():
        qg.quantize_tensor(x)


@needs_ml_dtypes
def test_numpy_bfloat16_input(rng):
    import ml_dtypes

    x = rng.standard_normal((3, 16)).astype(np.float32)
    codes, scale = qg.quantize_tensor(x.astype(ml_dtypes.bfloat16), granularity="channel")
    ref_codes, ref_scale, _ = R.quantize(x.astype(ml_dtypes.bfloat16).astype(np.float32), 8, False, "row")
    np.testing.assert_array_equal(codes, ref_codes.astype(np.int8))
    _assert_scales_equal(scale, ref_scale)


# ==================================================================== explain
def test_explain_integer_gemms(rng):
    A, W = _int8(rng, (3, 64)), _int8(rng, (5, 64))
    e = qg.explain(qg.int8_matmul, A, np.ascontiguousarray(W.T))
    assert e.op == "qg.int8_matmul" and e.problem.startswith("i8 x i8 on cpu") and e.chosen
    assert any(c.startswith(e.chosen + ": chosen") for c in e.candidates)
    # the transposed view of [N, K] weights reads as K-contiguous rows, as b_layout="nk" does
    assert qg.explain(qg.int8_matmul, A, W.T).chosen == qg.explain("int8_matmul", A, W, b_layout="nk").chosen
    # a [K, N] B stored row-major (seed 001's layout): the CPU core copies it to K-contiguous rows
    # (cpu_i8_repacked) and runs the kernel [N, K] rows get; a CPU without AVX2 reads it in the reference
    nk = qg.explain("int8_matmul", A, W, b_layout="nk").chosen
    assert e.chosen == ("cpu_int_reference" if nk == "cpu_int_reference" else "cpu_i8_repacked")
    q, s, _, _ = _weight_int4(rng, 8, 64, 32, False)
    e = qg.explain(qg.linear_int4, np.ones((2, 64), np.float16), q, s, group_size=32)
    assert e.op == "qg.linear_int4" and e.problem.startswith("i4 x f16")
    e = qg.explain(qg.int4_packed_matmul, R.pack_i4(_int4(rng, (2, 7))), R.pack_i4(_int4(rng, (3, 7))), 7,
                   b_layout="nk")
    assert e.problem.startswith("i4 x i4")
    with pytest.raises(ValueError, match=r"^qg\.int8_matmul: B has K=63 but A has K=64"):
        qg.explain(qg.int8_matmul, A, np.zeros((63, 5), np.int8))
    with pytest.raises(TypeError, match=r"^qg\.explain: .* takes no keyword arguments"):
        qg.explain(qg.quantize_q8_0, np.zeros((1, 32), np.float32), fmt="x")
