# SPDX-License-Identifier: MIT
"""NumPy references for qg's formats, written from ggml's C (ggml-quants.c)
and ggml-cuda's quantize.cu, independent of qg.

Layouts (little-endian, ggml's):
  Q4_0: fp16 d, 16 bytes; element j in the low nibble of byte j, j+16 in the high.
  Q8_0: fp16 d, 32 int8 codes.
  Q8_1: fp16 d, fp16 s, 32 int8 codes.
"""
from __future__ import annotations

import numpy as np

QK = 32
BYTES = {"q4_0": 18, "q8_0": 34, "q8_1": 36}
FP16_NAN = 0x7E00


def nmse(out, ref) -> float:
    out = np.asarray(out, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    den = np.sum(ref**2)
    return float(np.sum((out - ref) ** 2) / den) if den > 0 else float(np.sum(out**2))


def f16_bits(v: np.ndarray) -> np.ndarray:
    """float32 -> fp16 bits, round to nearest even (NumPy converts correctly)."""
    with np.errstate(over="ignore"):
        return np.asarray(v, dtype=np.float32).astype(np.float16).view(np.uint16)


def f16_value(bits: np.ndarray) -> np.ndarray:
    return np.asarray(bits, dtype=np.uint16).view(np.float16).astype(np.float32)


def round_half_away(v: np.ndarray) -> np.ndarray:
    """C's roundf on float32 values (computed in float64, where +0.5 is exact)."""
    v64 = np.asarray(v, dtype=np.float32).astype(np.float64)
    return np.sign(v64) * np.floor(np.abs(v64) + 0.5)


def _blocks(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float32)
    assert x.shape[-1] % QK == 0
    return x.reshape(*x.shape[:-1], x.shape[-1] // QK, QK)


def _q8_codes(scaled: np.ndarray) -> np.ndarray:
    """(int8)roundf(v), saturating, NaN -> 0 (qg's definition of ggml's UB cases)."""
    r = round_half_away(scaled)
    r = np.where(np.isnan(r), 0.0, r)
    return np.clip(r, -128, 127).astype(np.int8)


def quantize_q8_1_ref(x: np.ndarray) -> np.ndarray:
    """ggml's quantize_row_q8_1_ref, finite inputs: d = amax/127, id = 1/d,
    q = roundf(x*id), s = fp16((float)sum(q) * d)."""
    b = _blocks(x)
    amax = np.max(np.abs(b), axis=-1)
    d = (amax / np.float32(127)).astype(np.float32)
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        idv = np.where(d != 0, np.float32(1) / d, np.float32(0)).astype(np.float32)
        q = _q8_codes((b * idv[..., None]).astype(np.float32))
    s = (q.astype(np.int64).sum(-1).astype(np.float32) * d).astype(np.float32)
    return _pack_q8_1(f16_bits(d), f16_bits(s), q)


def quantize_q8_1_ggml_cuda_ref(x: np.ndarray) -> np.ndarray:
    """ggml-cuda's quantize_q8_1 as qg defines it: q = roundf(x / d) (true
    division), s = fp16(sum of x, accumulated in index order in float32)."""
    b = _blocks(x)
    amax = np.max(np.abs(b), axis=-1)
    d = (amax / np.float32(127)).astype(np.float32)
    with np.errstate(divide="ignore", invalid="ignore"):
        q = _q8_codes((b / d[..., None]).astype(np.float32))
    q[amax == 0] = 0
    xsum = np.add.accumulate(b, axis=-1, dtype=np.float32)[..., -1]  # sequential, not pairwise
    return _pack_q8_1(f16_bits(d), f16_bits(xsum), q)


def _pack_q8_1(d_bits, s_bits, q) -> np.ndarray:
    out = np.empty((*q.shape[:-1], 36), dtype=np.uint8)
    out[..., 0:2] = d_bits[..., None].view(np.uint8).reshape(*d_bits.shape, 2)
    out[..., 2:4] = s_bits[..., None].view(np.uint8).reshape(*s_bits.shape, 2)
    out[..., 4:] = q.view(np.uint8)
    return out


def quantize_q4_0_ref(x: np.ndarray) -> np.ndarray:
    """ggml's quantize_row_q4_0_ref, finite inputs (max keeps its sign; the
    first element of largest |x| wins; an all-(+-0) block keeps max = +0.0f,
    so d = +0/-8 = -0.0)."""
    b = _blocks(x)
    a = np.abs(b)
    idx = np.argmax(a, axis=-1)
    mx = np.take_along_axis(b, idx[..., None], -1)[..., 0]
    mx = np.where(np.max(a, axis=-1) == 0, np.float32(0), mx).astype(np.float32)
    d = (mx / np.float32(-8)).astype(np.float32)
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        idv = np.where(d != 0, np.float32(1) / d, np.float32(0)).astype(np.float32)
        v = ((b * idv[..., None]).astype(np.float32) + np.float32(8.5)).astype(np.float32)
    v = np.where(np.isnan(v), 8.5, v)
    codes = np.clip(np.trunc(np.clip(v, -1, 16)), 0, 15).astype(np.uint8)
    out = np.empty((*b.shape[:-1], 18), dtype=np.uint8)
    out[..., 0:2] = f16_bits(d)[..., None].view(np.uint8).reshape(*d.shape, 2)
    out[..., 2:] = codes[..., :16] | (codes[..., 16:] << 4)
    return out


# ------------------------------------------------------------------ unpacking
def unpack_q4_0(xq: np.ndarray):
    """-> (d float32 [..., nb], codes int16 [..., nb, 32] in 0..15)."""
    xq = np.ascontiguousarray(xq)
    assert xq.dtype == np.uint8 and xq.shape[-1] == 18
    d = f16_value(xq[..., 0:2].copy().view(np.uint16)[..., 0])
    qs = xq[..., 2:].astype(np.int16)
    codes = np.concatenate([qs & 0x0F, qs >> 4], axis=-1)
    return d, codes


def unpack_q8(xq: np.ndarray):
    """Q8_0 or Q8_1 -> (d float32, s float32 or None, codes int16 [..., nb, 32])."""
    xq = np.ascontiguousarray(xq)
    assert xq.dtype == np.uint8 and xq.shape[-1] in (34, 36)
    d = f16_value(xq[..., 0:2].copy().view(np.uint16)[..., 0])
    if xq.shape[-1] == 36:
        s = f16_value(xq[..., 2:4].copy().view(np.uint16)[..., 0])
        codes = xq[..., 4:].copy().view(np.int8).astype(np.int16)
    else:
        s = None
        codes = xq[..., 2:].copy().view(np.int8).astype(np.int16)
    return d, s, codes


def scale_bits(xq: np.ndarray) -> np.ndarray:
    """The fp16 d field of every block, as uint16 bits."""
    return np.ascontiguousarray(xq[..., 0:2]).view(np.uint16)[..., 0]


def dequantize_ref(xq: np.ndarray, fmt: str) -> np.ndarray:
    """code * d in float32 (exact): [..., nb, B] -> [..., nb*32]."""
    if fmt == "q4_0":
        d, codes = unpack_q4_0(xq)
        codes = codes - 8
    else:
        d, _, codes = unpack_q8(xq)
    with np.errstate(invalid="ignore"):
        y = codes.astype(np.float32) * d[..., None]
    return y.reshape(*y.shape[:-2], -1)


def gemm_ref(wq: np.ndarray, aq: np.ndarray) -> np.ndarray:
    """float64 C[M, N] = sum_b d_w * d_a * sum_i (w_i - 8) * a_i, from the codes.
    Leading dims of wq / aq are flattened to M / N."""
    dw, cw = unpack_q4_0(wq)
    da, _, ca = unpack_q8(aq)
    nb = cw.shape[-2]
    W = ((cw - 8).astype(np.float64) * dw[..., None].astype(np.float64)).reshape(-1, nb * QK)
    A = (ca.astype(np.float64) * da[..., None].astype(np.float64)).reshape(-1, nb * QK)
    return W @ A.T


def poison_equal(a: np.ndarray, b: np.ndarray) -> bool:
    """Bytes equal (NaN-aware for floats: compares the bit patterns)."""
    a = np.ascontiguousarray(a)
    b = np.ascontiguousarray(b)
    return a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes()


def assert_same_values(a: np.ndarray, b: np.ndarray) -> None:
    """Equal values, NaN in the same places, same sign of every zero; NaN
    payloads may differ (GPUs return the canonical NaN 0x7FFFFFFF from
    0 * NaN where x86 propagates the operand's payload)."""
    a = np.asarray(a)
    b = np.asarray(b)
    np.testing.assert_array_equal(a, b)  # NaN == NaN here, position by position
    ok = ~np.isnan(a)
    np.testing.assert_array_equal(np.signbit(a[ok]), np.signbit(b[ok]))
