# SPDX-License-Identifier: MIT
"""INT4 packings and GEMMs under the seeds' names.

Seed 001: two codes per uint8 byte (format i4: two's complement, low nibble
first): pack_int4, unpack_int4, int4_packed_matmul (int32 result).
Seed 003: eight codes per int32 word (format i4x8: element i in bits
4i..4i+3, stored as v + 8): pack_int4_to_int32, unpack_int4_from_int32,
int4_matmul (per-row / per-column scales, float16 result), its CUDA-only and
plain-PyTorch variants, and generate_test_data.

Packing is the core's quantizer with a static scale of 1 (the values are
their own codes), so it runs on every device and is recorded as a qg
operator while torch traces; values outside [-8, 7] are refused first.
"""
from __future__ import annotations

from . import _api
from . import _arrays as xa
from . import _frameworks as fw
from . import _int_args as ia
from ._api import I4, I4X8, _Epilogue, _Op
from ._int import operand_layout

_INT_DTYPES = ("int8", "int16", "int32", "int64", "uint8")


def _codes_in_range(fn: str, x, w: fw.Where):
    """x (integers in [-8, 7]) as float32 values for the core's quantizer."""
    dt = fw.dtype_name(x)
    if dt not in _INT_DTYPES:
        raise TypeError(f"{fn}: x must be an integer array (int8, int16, int32, int64 or uint8) of values in "
                        f"[-8, 7], got {dt}")
    if len(tuple(x.shape)) < 1:
        raise ValueError(f"{fn}: x must have at least one dimension, got a 0-d array; reshape it to [1]")
    xa.check_range(fn, "x", x, w, -8, 7, "the int4 range")
    return xa.astype(x, w, "float32")


def _dim_arg(fn: str, dim, ndim: int) -> int:
    return ia.axis_arg(fn, dim, ndim) if ndim > 0 else 0


# -------------------------------------------------------- two per byte (i4)
_PACK_INT4 = _Op("quantize", "qg.pack_int4", fmt=I4)
_UNPACK_INT4 = _Op("dequantize", "qg.unpack_int4", fmt=I4)


def pack_int4(x):
    """int values in [-8, 7], [..., K] -> uint8 [..., ceil(K/2)], two per byte.

    Element 2i goes to the low nibble of byte i, element 2i+1 to the high
    nibble, as 4-bit two's complement; an odd K's last high nibble is 0.
    A value outside [-8, 7] raises ValueError (checked eagerly; while torch
    traces the values cannot be read, and out-of-range values saturate).
    """
    fn = _PACK_INT4.fn
    w = fw.where(x, fn, "x")
    xf = _codes_in_range(fn, x, w)
    one = xa.full(w, (1,), 1.0, "float32")
    return _api._run_quantize_int(_PACK_INT4, xf, "tensor", 0, False, one, None)[0]


def unpack_int4(p, K=None):
    """uint8 [..., ceil(K/2)] nibble pairs -> int8 values [..., K] in [-8, 7].

    K: the unpacked length (needed for an odd K; default 2 * p.shape[-1]).
    """
    fn = _UNPACK_INT4.fn
    w = fw.where(p, fn, "p")
    k = _api._size(K, "K", fn)
    one = xa.full(w, (1,), 1.0, "float32")
    return xa.astype(_api._run_dequantize_int(_UNPACK_INT4, p, k, "tensor", 0, one), w, "int8")


_INT4_PACKED_MATMUL = _Op("gemm", "qg.int4_packed_matmul", a_fmt=I4, b_fmt=I4, a_name="B_packed",
                          b_name="A_packed")


def int4_packed_matmul(A_packed, B_packed, K, *, b_layout="kn"):
    """C[M, N] = A @ B exactly, int32, with A and B INT4 packed two per byte (seed 001).

    A_packed: uint8 [M, ceil(K/2)] (pack_int4 of A [M, K]); B_packed: uint8
    [ceil(K/2), N] (pack_int4 of B [K, N] along K, i.e. pack_int4(B.T).T,
    b_layout="kn") or [N, ceil(K/2)] (b_layout="nk"). K: the unpacked length
    (an odd K is padded with a 0 code). Returns int32 [M, N].
    """
    op, a, b, k, epi, _ = _int4_packed_matmul_plan(A_packed, B_packed, K, b_layout=b_layout)
    return _api._run_gemm(op, a, b, None, None, k, None, None, epi)


def _int4_packed_matmul_plan(A_packed, B_packed, K, *, b_layout="kn"):
    fn = _INT4_PACKED_MATMUL.fn
    if b_layout not in ("kn", "nk"):
        raise ValueError(f"{fn}: b_layout must be 'kn' (B_packed is [ceil(K/2), N]) or 'nk' ([N, ceil(K/2)]), "
                         f"got {b_layout!r}")
    k = _api._size(K, "K", fn)
    if k < 0:
        raise ValueError(f"{fn}: K must be given (the unpacked length: ceil(K/2) bytes cannot tell an odd K)")
    w = fw.where(A_packed, fn, "A_packed")
    fw.check_same_kind(w, fw.where(B_packed, fn, "B_packed"), fn, "A_packed", "B_packed")
    if len(tuple(B_packed.shape)) != 2:
        raise ValueError(f"{fn}: B_packed must be 2-D, got shape {ia.shape_text(B_packed.shape)}")
    if len(tuple(A_packed.shape)) != 2:
        raise ValueError(f"{fn}: A_packed must be 2-D [M, ceil(K/2)], got shape {ia.shape_text(A_packed.shape)}")
    a_core, a_kmajor = operand_layout(B_packed, w, b_layout == "kn")
    b_core, b_kmajor = operand_layout(A_packed, w, False)
    epi = _Epilogue(None, "int32", True, a_k_major=a_kmajor, b_k_major=b_kmajor)
    return _INT4_PACKED_MATMUL, a_core, b_core, k, epi, None


# ------------------------------------------------- eight per int32 (i4x8)
_PACK_I32 = _Op("quantize", "qg.pack_int4_to_int32", fmt=I4X8)
_UNPACK_I32 = _Op("dequantize", "qg.unpack_int4_from_int32", fmt=I4X8)


def pack_int4_to_int32(x, dim=-1):
    """int values in [-8, 7] -> int32 words of eight, along `dim` (seed 003).

    word = sum_i (v_i + 8) << 4i over eight consecutive elements along dim,
    whose length must be a multiple of 8; the result has that dim divided by
    8 (e.g. b [K, N] with dim=0 -> [K/8, N]). Out-of-range values raise
    ValueError (checked eagerly, as pack_int4).
    """
    fn = _PACK_I32.fn
    w = fw.where(x, fn, "x")
    xf = _codes_in_range(fn, x, w)
    ndim = len(tuple(x.shape))
    d = _dim_arg(fn, dim, ndim)
    last = ndim - 1
    xt = xa.moveaxis(xf, w, d, last)
    one = xa.full(w, (1,), 1.0, "float32")
    words = _api._run_quantize_int(_PACK_I32, xt, "tensor", 0, False, one, None)[0]
    return xa.moveaxis(words, w, last, d)


def unpack_int4_from_int32(p, dim=-1):
    """int32 words -> int8 values in [-8, 7], eight per word along `dim` (the inverse of pack_int4_to_int32)."""
    fn = _UNPACK_I32.fn
    w = fw.where(p, fn, "p")
    ndim = len(tuple(p.shape))
    if ndim < 1:
        raise ValueError(f"{fn}: p must have at least one dimension, got a 0-d array")
    d = _dim_arg(fn, dim, ndim)
    last = ndim - 1
    pt = xa.moveaxis(p, w, d, last)
    one = xa.full(w, (1,), 1.0, "float32")
    vals = xa.astype(_api._run_dequantize_int(_UNPACK_I32, pt, -1, "tensor", 0, one), w, "int8")
    return xa.moveaxis(vals, w, last, d)


_INT4_MATMUL = _Op("gemm", "qg.int4_matmul", a_fmt=I4X8, b_fmt=I4X8, a_name="b_packed", b_name="a_packed")


def _int4_matmul(fn: str, a_packed, b_packed, scale_a, scale_b):
    op, a, b, k, epi, _ = _int4_matmul_plan(a_packed, b_packed, scale_a, scale_b, fn=fn)
    return _api._run_gemm(op, a, b, None, None, k, None, None, epi)


def _int4_matmul_plan(a_packed, b_packed, scale_a, scale_b, fn: str = _INT4_MATMUL.fn):
    w = fw.where(a_packed, fn, "a_packed")
    fw.check_same_kind(w, fw.where(b_packed, fn, "b_packed"), fn, "a_packed", "b_packed")
    ashape, bshape = tuple(a_packed.shape), tuple(b_packed.shape)
    if len(ashape) != 2 or len(bshape) != 2:
        raise ValueError(f"{fn}: a_packed must be [M, K//8] and b_packed [K//8, N] (2-D), got shapes "
                         f"{ia.shape_text(ashape)} and {ia.shape_text(bshape)}")
    fa, col_scale = ia.vector_scale(fn, "scale_a", scale_a, w, ashape[0], "M")
    fb, row_scale = ia.vector_scale(fn, "scale_b", scale_b, w, bshape[1], "N")
    a_core, a_kmajor = operand_layout(b_packed, w, True)
    b_core, b_kmajor = operand_layout(a_packed, w, False)
    op = _INT4_MATMUL if fn == _INT4_MATMUL.fn else _Op("gemm", fn, a_fmt=I4X8, b_fmt=I4X8, a_name="b_packed",
                                                        b_name="a_packed")
    epi = _Epilogue(None, "float16", True, row_scale, col_scale, alpha=fa * fb, a_k_major=a_kmajor,
                    b_k_major=b_kmajor)
    return op, a_core, b_core, None, epi, None


def int4_matmul(a_packed, b_packed, scale_a, scale_b):
    """C = (A * scale_a[:, None]) @ (B * scale_b[None, :]) in float16 (seed 003).

    a_packed: int32 [M, K//8] (pack_int4_to_int32 of A [M, K] along K);
    b_packed: int32 [K//8, N] (of B [K, N] along dim 0); scale_a: float32
    [M] (per row of A), scale_b: float32 [N] (per column of B); either may be
    a float or [1]. The integer sum is exact; the scales are applied once per
    output in float32, then rounded to float16. Runs wherever the arrays live
    (CPU or CUDA; any framework). Returns float16 [M, N].
    """
    return _int4_matmul(_INT4_MATMUL.fn, a_packed, b_packed, scale_a, scale_b)


def int4_matmul_cuda(a_packed, b_packed, scale_a, scale_b):
    """int4_matmul that insists on the GPU: raises RuntimeError when the arrays
    are not on a CUDA device or this qg has no usable CUDA, instead of running
    on the CPU."""
    fn = "qg.int4_matmul_cuda"
    from . import _runtime

    w = fw.where(a_packed, fn, "a_packed")
    if w.device != fw.CUDA:
        raise RuntimeError(f"{fn}: a_packed is on the CPU; move the arrays to a CUDA device (e.g. "
                           "a_packed.cuda()), or call qg.int4_matmul, which runs on the CPU too")
    if not _runtime.cuda_available():
        raise RuntimeError(f"{fn}: qg cannot use CUDA here: {_runtime.cuda_unavailable_reason()}")
    return _int4_matmul(fn, a_packed, b_packed, scale_a, scale_b)


def int4_matmul_pytorch(a_packed, b_packed, scale_a, scale_b):
    """The readable PyTorch reference of int4_matmul: unpack, multiply in
    float32, scale, round to float16. Exact integer sums while K < 2**18
    (|code| <= 8, so every partial sum stays below float32's 2**24)."""
    import torch

    shifts = torch.arange(0, 32, 4, dtype=torch.int32, device=a_packed.device)  # element i in bits 4i..4i+3
    a = ((a_packed.unsqueeze(-1) >> shifts) & 15) - 8  # [M, K/8, 8]
    a = a.reshape(a_packed.shape[0], -1)  # [M, K]
    b = ((b_packed.unsqueeze(1) >> shifts.view(1, 8, 1)) & 15) - 8  # [K/8, 8, N]
    b = b.reshape(-1, b_packed.shape[1])  # [K, N]
    c = a.to(torch.float32) @ b.to(torch.float32)
    c = c * scale_a.to(torch.float32).reshape(-1, 1) * scale_b.to(torch.float32).reshape(1, -1)
    return c.to(torch.float16)


def generate_test_data(M, K, N, *, seed=0, device="cpu"):
    """Random int4 operands for int4_matmul (seed 003), as torch tensors.

    Returns (a_packed int32 [M, K//8], b_packed int32 [K//8, N], scale_a
    float32 [M], scale_b float32 [N], a_original int8 [M, K], b_original
    int8 [K, N]): the originals hold the int4 values (uniform in [-8, 7]),
    packed along K; scales uniform in [0.01, 0.11). K must be a multiple of 8.
    Deterministic for a given seed (generated on the CPU, then moved to device).
    """
    import torch

    fn = "qg.generate_test_data"
    from ._args import int_arg

    m, k, n = (int_arg(v, name, fn) for v, name in ((M, "M"), (K, "K"), (N, "N")))
    if min(m, k, n) < 0:
        raise ValueError(f"{fn}: M, K and N must be >= 0, got M={m}, K={k}, N={n}")
    if k % 8 != 0:
        raise ValueError(f"{fn}: K={k} is not a multiple of 8 (eight int4 values per int32 word); pick such a K")
    g = torch.Generator().manual_seed(int_arg(seed, "seed", fn))
    a_original = torch.randint(-8, 8, (m, k), generator=g, dtype=torch.int8)
    b_original = torch.randint(-8, 8, (k, n), generator=g, dtype=torch.int8)
    scale_a = torch.rand(m, generator=g, dtype=torch.float32) * 0.1 + 0.01
    scale_b = torch.rand(n, generator=g, dtype=torch.float32) * 0.1 + 0.01
    a_original, b_original, scale_a, scale_b = (t.to(device) for t in (a_original, b_original, scale_a, scale_b))
    a_packed = pack_int4_to_int32(a_original, dim=-1)
    b_packed = pack_int4_to_int32(b_original, dim=0)
    return a_packed, b_packed, scale_a, scale_b, a_original, b_original


_api._GEMM_PLANS.update({
    int4_packed_matmul: _int4_packed_matmul_plan, int4_matmul: _int4_matmul_plan,
    int4_matmul_cuda: lambda *a, **k: _int4_matmul_plan(*a, fn="qg.int4_matmul_cuda", **k),
})
