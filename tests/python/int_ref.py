# SPDX-License-Identifier: MIT
"""NumPy references for qg's integer formats, transcribed from the rules in
cpp/src/int_formats.h (docs/numerics.md states them in words), independent of qg:

  symmetric:  scale = absmax / qmax (float32 division), zero point 0
  asymmetric: lo = min(x, 0), hi = max(x, 0), scale = (hi - lo) / (qmax - qmin),
              zp = qmin - clamp(round(lo * inv), qmin - qmax, 0), at most qmax
  code = clamp(round(x * inv) + zp, qmin, qmax), inv = 1 / scale (0 when scale
  is 0 or 1 / scale overflows), round half to even, float32 arithmetic
  a scope holding NaN or +-Inf: scale NaN, every code = zp (0)
  value = scale * (code - zp)

Packings: i8 int8 codes; i4 two's-complement nibbles, two per byte, low first
(odd K: a 0 high nibble); i4x8 eight per int32 word, element i in bits
4i..4i+3, stored as v + 8.
"""
from __future__ import annotations

import numpy as np

QRANGE = {8: (-128, 127), 4: (-8, 7)}


def _f32(v):
    return np.asarray(v, dtype=np.float32)


def _inverse(scale: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        inv = (np.float32(1) / scale).astype(np.float32)
    return np.where((scale == 0) | ~np.isfinite(inv), np.float32(0), inv).astype(np.float32)


def _clamp(r: np.ndarray, lo: int, hi: int) -> np.ndarray:
    r = np.where(np.isnan(r), 0, r)
    return np.clip(r, lo, hi).astype(np.int64)


def scope_params(x: np.ndarray, bits: int, asymmetric: bool, axis=None):
    """(scale, zp) of scopes reduced over `axis` of float32 x (None: all)."""
    qmin, qmax = QRANGE[bits]
    x = _f32(x)
    finite = np.all(np.isfinite(x), axis=axis)
    with np.errstate(invalid="ignore"):
        if asymmetric:
            # qg's running extent starts at 0 (so an empty scope has lo = hi = 0)
            lo = np.min(np.where(np.isfinite(x), x, 0), axis=axis, initial=0).astype(np.float32)
            hi = np.max(np.where(np.isfinite(x), x, 0), axis=axis, initial=0).astype(np.float32)
            scale = ((hi - lo).astype(np.float32) / np.float32(qmax - qmin)).astype(np.float32)
            inv = _inverse(scale)
            zp = qmin - _clamp(np.rint((lo * inv).astype(np.float32)), qmin - qmax, 0)
            zp = np.minimum(zp, qmax)
        else:
            amax = np.max(np.abs(np.where(np.isfinite(x), x, 0)), axis=axis, initial=0).astype(np.float32)
            scale = (amax / np.float32(qmax)).astype(np.float32)
            zp = np.zeros(np.shape(scale), np.int64)
    scale = np.where(finite, scale, np.float32(np.nan)).astype(np.float32)
    zp = np.where(finite, zp, 0)
    return np.asarray(scale, np.float32), np.asarray(zp, np.int64)


def quantize_codes(x: np.ndarray, scale, zp, bits: int) -> np.ndarray:
    """Codes (int64) of float32 x with broadcastable scale / zp."""
    qmin, qmax = QRANGE[bits]
    scale = _f32(scale)
    zp = np.asarray(zp, np.int64)
    inv = _inverse(scale)
    with np.errstate(invalid="ignore", over="ignore"):
        r = np.rint((_f32(x) * inv).astype(np.float32))
        codes = _clamp((r + zp.astype(np.float32)).astype(np.float32), qmin, qmax)
    bad = np.isnan(scale) | np.isnan(r)  # a poisoned scope, or NaN x
    return np.where(bad, zp, codes)


def quantize(x: np.ndarray, bits: int, asymmetric: bool, granularity: str, group_size: int = 0):
    """x float [..., K] -> (codes int64 [..., K], scale float32, zp int64) with
    qg's scale shapes: tensor [1], row [...], group [..., K / G]."""
    x = _f32(x)
    k = x.shape[-1]
    if granularity == "tensor":
        scale, zp = scope_params(x, bits, asymmetric, None)
        scale, zp = scale.reshape(1), zp.reshape(1)
        codes = quantize_codes(x, scale, zp, bits)
    elif granularity == "row":
        scale, zp = scope_params(x, bits, asymmetric, -1)
        codes = quantize_codes(x, scale[..., None], zp[..., None], bits)
    else:
        g = x.reshape(*x.shape[:-1], k // group_size, group_size)
        scale, zp = scope_params(g, bits, asymmetric, -1)
        codes = quantize_codes(g, scale[..., None], zp[..., None], bits).reshape(x.shape)
    return codes, scale, zp


def dequantize(codes, scale, zp=0) -> np.ndarray:
    """float32 scale * (code - zp), broadcast."""
    with np.errstate(invalid="ignore"):
        return (_f32(scale) * (np.asarray(codes, np.int64) - np.asarray(zp, np.int64)).astype(np.float32)).astype(
            np.float32)


def expand_groups(v: np.ndarray, group_size: int) -> np.ndarray:
    """[..., K/G] -> [..., K]: each group's value repeated over its elements."""
    return np.repeat(np.asarray(v), group_size, axis=-1)


def pack_i4(codes: np.ndarray) -> np.ndarray:
    """int values in [-8, 7] [..., K] -> uint8 [..., ceil(K/2)], low nibble first."""
    c = np.asarray(codes, np.int64)
    k = c.shape[-1]
    if k % 2:
        c = np.concatenate([c, np.zeros((*c.shape[:-1], 1), np.int64)], axis=-1)
    lo, hi = c[..., 0::2] & 15, c[..., 1::2] & 15
    return (lo | (hi << 4)).astype(np.uint8)


def unpack_i4(p: np.ndarray, k: int) -> np.ndarray:
    p = np.asarray(p, np.int64)
    v = np.stack([p & 15, p >> 4], axis=-1).reshape(*p.shape[:-1], -1)[..., :k]
    return ((v ^ 8) - 8).astype(np.int64)


def pack_i4x8(codes: np.ndarray) -> np.ndarray:
    """int values in [-8, 7] [..., K] (K % 8 == 0) -> int32 [..., K/8], word = sum (v_i + 8) << 4i."""
    c = np.asarray(codes, np.int64) + 8
    c = c.reshape(*c.shape[:-1], -1, 8)
    words = np.zeros(c.shape[:-1], np.uint64)
    for i in range(8):
        words |= c[..., i].astype(np.uint64) << np.uint64(4 * i)
    return words.astype(np.uint32).view(np.int32)


def unpack_i4x8(p: np.ndarray) -> np.ndarray:
    u = np.asarray(p).astype(np.int32).view(np.uint32).astype(np.int64)
    v = np.stack([(u >> (4 * i)) & 15 for i in range(8)], axis=-1)
    return (v.reshape(*u.shape[:-1], -1) - 8).astype(np.int64)


def nmse(out, ref) -> float:
    out = np.asarray(out, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    den = np.sum(ref**2)
    return float(np.sum((out - ref) ** 2) / den) if den > 0 else float(np.sum(out**2))
