# SPDX-License-Identifier: MIT
"""The integer family's public functions (seed 001's names): quantize_tensor,
dequantize_tensor, int8_matmul, and the weight-only linear_int4.

Each maps its arguments onto one core call (_api.py's _run_* functions: the
torch fast path when it can, the generic path otherwise, qg's registered
torch operators while torch traces). Scales and zero points constant along K
go to the GEMM's epilogue; group-wise weight scales go with the weight
operand (docs/architecture.md, "The integer family").

That mapping (the plan) is Python, tens of microseconds a call. So
quantize_tensor, int8_matmul and linear_int4 first hand eager calls on torch
tensors to their single-crossing entries (python/src/fast_int_ops.cpp), which
make the same core call when the arguments are plain (what the plan would
pass on unchanged) and otherwise return None, leaving the call to the plan.
"""
from __future__ import annotations

from . import _api
from . import _arrays as xa
from . import _frameworks as fw
from . import _int_args as ia
from . import _qg
from ._api import _FAST_TYPES, BF16, F16, F32, I4, I4X8, I8, _Epilogue, _Op

# ------------------------------------------------------------ quantize_tensor
_QT_FN = "qg.quantize_tensor"
_QT_OPS = {f: _Op("quantize", _QT_FN, fmt=f) for f in (I8, I4, I4X8)}
_DT_FN = "qg.dequantize_tensor"
_DT_OPS = {f: _Op("dequantize", _DT_FN, fmt=f) for f in (I8, I4, I4X8)}


def _static_scale(fn: str, value, w: fw.Where, shape, what: str):
    """A given scale: a Python number (per-tensor only) or a float array of `shape`."""
    if ia.is_number(value):
        if tuple(shape) != (1,):
            raise ValueError(
                f"{fn}: a Python number as scale is one scale for the tensor; granularity {what} needs an array "
                f"of shape {ia.shape_text(shape)}"
            )
        return xa.full(w, (1,), float(value), "float32")
    if not hasattr(value, "shape"):
        raise TypeError(f"{fn}: scale must be a float or a float32 array, got {type(value).__module__}."
                        f"{type(value).__name__}")
    arr = ia.float_array(fn, "scale", value, w)
    if tuple(shape) == (1,) and xa.numel(arr) == 1:
        return arr.reshape((1,))
    if tuple(arr.shape) != tuple(shape):
        raise ValueError(
            f"{fn}: scale must have shape {ia.shape_text(shape)} for granularity {what}, "
            f"got {ia.shape_text(arr.shape)}"
        )
    return arr


def _static_zero_point(fn: str, value, w: fw.Where, shape, fmt: int, what: str):
    lo, hi = ia.CODE_RANGE[fmt]
    if ia.is_int_number(value):
        v = int(value)
        if not lo <= v <= hi:
            raise ValueError(f"{fn}: zero_point={v} is outside the code range [{lo}, {hi}] of bits="
                             f"{8 if fmt == I8 else 4}; pass a zero point in it")
        return xa.full(w, tuple(shape), v, "int32")
    if not hasattr(value, "shape"):
        raise TypeError(f"{fn}: zero_point must be an int or an int32 array, got {type(value).__module__}."
                        f"{type(value).__name__}")
    arr = ia.int32_array(fn, "zero_point", value, w)
    if tuple(shape) == (1,) and xa.numel(arr) == 1:
        arr = arr.reshape((1,))
    elif tuple(arr.shape) != tuple(shape):
        raise ValueError(
            f"{fn}: zero_point must have shape {ia.shape_text(shape)} for granularity {what} (the scale's), "
            f"got {ia.shape_text(arr.shape)}"
        )
    xa.check_range(fn, "zero_point", arr, w, lo, hi, f"the code range of bits={8 if fmt == I8 else 4}")
    return arr


def _rows_view(x, w: fw.Where, axis: int):
    """x as [C, rest] rows, C = x.shape[axis] (axis moved first by a copy when it is not 0)."""
    xt = xa.moveaxis(x, w, axis, 0)
    shape = tuple(xt.shape)
    rest = 1
    for s in shape[1:]:
        rest *= s
    return xt, xt.reshape((shape[0], rest))


def quantize_tensor(x, *, bits=8, scheme="symmetric", granularity="tensor", axis=0, group_size=None, scale=None,
                    zero_point=None, packing="uint8"):
    """Quantize float values to integer codes with scales kept outside.

    x: float32, float16 or bfloat16 array of shape [..., K], any framework.
    bits=8: int8 codes of x's shape. bits=4: two's-complement nibbles, two per
    uint8, low nibble first, [..., ceil(K/2)] (an odd K's last byte has a 0
    high nibble); with packing="int32", eight per int32 word ([..., K/8],
    element i in bits 4i..4i+3 stored as v + 8, seed 003's layout; symmetric only).
    granularity: "tensor" (scale shape [1]); "channel" (one scale per index of
    `axis`: shape [x.shape[axis]]; bits=4 takes 2-D x with axis=0 only, as
    the codes are packed along the last axis); "group" (groups of group_size
    along the last axis: scale [..., K / group_size]).
    scheme="symmetric": scale = absmax / qmax (127 or 7), code = clamp(round(x / scale))
    (round half to even). "asymmetric": the range [min(x, 0), max(x, 0)] over
    qmax - qmin steps, zero_point = qmin - round(min / scale), code =
    clamp(round(x / scale) + zero_point). Dynamic scales are computed by the
    kernel (docs/numerics.md); scale= (and zero_point= for asymmetric) give
    static values instead, of the granularity's shape (a Python number is a
    per-tensor value); zero points must lie in the code range.

    Returns (codes, scale) for symmetric, (codes, scale, zero_point) for
    asymmetric: scale float32, zero_point int32, in x's framework and device.
    """
    adm = _FAST_TYPES.get(type(x))
    if adm is not None and adm.plain_ok(x):
        r = _qg.fast_quantize_tensor(x, bits, scheme, granularity, axis, group_size, scale, zero_point, packing)
        if r is not None:
            return r
    fn = _QT_FN
    fmt = ia.int_format(fn, bits, packing)
    asym = ia.scheme_arg(fn, scheme)
    gran = ia.granularity_arg(fn, granularity)
    if asym and fmt == I4X8:
        raise ValueError(f"{fn}: packing='int32' (seed 003's words) is symmetric only; pass scheme='symmetric' "
                         "or packing='uint8'")
    w = fw.where(x, fn, "x")
    shape = x.shape
    if len(shape) < 1:
        raise ValueError(f"{fn}: x must have shape [..., K], got a 0-d array; reshape it to [1, K]")
    gs = 0
    if gran == "group":
        gs = ia.group_size_arg(fn, group_size)
    elif group_size is not None:
        raise ValueError(f"{fn}: group_size is for granularity='group'; omit it for granularity={gran!r}")

    moved = None  # the axis moved to the front for a per-channel scale
    if gran == "channel":
        ax = ia.axis_arg(fn, axis, len(shape))
        if fmt != I8 and (len(shape) != 2 or ax != 0):
            raise ValueError(
                f"{fn}: bits=4 with granularity='channel' takes 2-D x [C, K] and axis=0 (codes are packed along "
                f"the last axis), got shape {ia.shape_text(shape)} and axis={axis}; reshape x to [C, K] "
                "(moving the channel axis first), or use bits=8"
            )
        if len(shape) == 2 and ax == 0:
            xv = x  # already [C, K] rows
        else:  # bits=8 (checked above)
            xt, xv = _rows_view(x, w, ax)
            moved = (ax, tuple(xt.shape))
        core_gran, scale_shape = "row", (shape[ax],)
    elif gran == "tensor":
        xv, core_gran, scale_shape = x, "tensor", (1,)
    else:
        xv, core_gran = x, "group"
        k = shape[-1]
        if k % gs != 0:
            raise ValueError(f"{fn}: group_size={gs} does not divide K={k} (x.shape[-1]); pick a divisor of K")
        scale_shape = (*shape[:-1], k // gs)

    s_arr = z_arr = None
    if zero_point is not None and scale is None:
        raise ValueError(f"{fn}: zero_point was given without scale; static quantization takes both "
                         "(or omit both for dynamic scales)")
    if scale is not None:
        if asym and zero_point is None:
            raise ValueError(f"{fn}: static asymmetric quantization needs zero_point as well as scale")
        if not asym and zero_point is not None:
            raise ValueError(f"{fn}: symmetric quantization takes no zero_point; pass scheme='asymmetric' "
                             "or omit zero_point")
        s_arr = _static_scale(fn, scale, w, scale_shape, repr(gran))
        if asym:
            z_arr = _static_zero_point(fn, zero_point, w, scale_shape, fmt, repr(gran))

    codes, sc, zp = _api._run_quantize_int(_QT_OPS[fmt], xv, core_gran, gs, asym, s_arr, z_arr)
    if s_arr is None and 0 in shape:
        # An empty scope's parameters are those of an all-zero one (scale 0,
        # zero point qmin), which the core does not write when x is empty.
        sc = xa.full(w, tuple(sc.shape), 0.0, "float32")
        if asym:
            zp = xa.full(w, tuple(zp.shape), ia.CODE_RANGE[fmt][0], "int32")
    if moved is not None:
        ax, moved_shape = moved
        codes = xa.moveaxis(codes.reshape(moved_shape), w, 0, ax)
    if s_arr is not None:
        sc, zp = s_arr, z_arr
    return (codes, sc, zp) if asym else (codes, sc)


# ---------------------------------------------------------- dequantize_tensor
def _infer_granularity(fn: str, q, scale, axis: int):
    if ia.is_number(scale):
        return "tensor"
    sshape, qshape = tuple(scale.shape), tuple(q.shape)
    if len(sshape) <= 1 and xa.numel(scale) == 1:
        return "tensor"
    if len(sshape) == 1 and len(qshape) >= 1 and sshape[0] == qshape[axis % len(qshape)]:
        return "channel"
    if len(sshape) == len(qshape) and sshape[:-1] == qshape[:-1]:
        return "group"
    raise ValueError(
        f"{fn}: cannot tell the granularity from scale of shape {ia.shape_text(sshape)} for q of shape "
        f"{ia.shape_text(qshape)}; pass granularity= ('tensor': scale [1], 'channel': [q.shape[axis]], "
        "'group': [..., K / group_size])"
    )


def _dequantize_int32(fn: str, q, w: fw.Where, scale, zero_point, granularity, axis):
    """value = scale * (q - zero_point) for int32 arrays (integer GEMM results),
    with the caller's framework: scale broadcasts against q (a per-channel
    scale is laid along `axis`)."""
    if granularity == "group":
        raise ValueError(f"{fn}: int32 values (GEMM results) take granularity 'tensor' or 'channel', not 'group'")
    v = xa.astype(q, w, "float32")
    ndim = len(tuple(q.shape))

    def along_axis(a, arg):
        if granularity != "channel" or ia.is_number(a):
            return a
        ax = ia.axis_arg(fn, axis, ndim)
        if len(tuple(a.shape)) != 1 or tuple(a.shape)[0] not in (1, tuple(q.shape)[ax]):
            raise ValueError(f"{fn}: {arg} must have shape [{tuple(q.shape)[ax]}] (q.shape[{ax}]) for "
                             f"granularity='channel', got {ia.shape_text(a.shape)}")
        return a.reshape(tuple(-1 if d == ax else 1 for d in range(ndim)))

    if zero_point is not None:
        if ia.is_int_number(zero_point):
            if zero_point != 0:
                v = v - float(zero_point)
        else:
            z = xa.astype(ia.int32_array(fn, "zero_point", zero_point, w), w, "float32")
            v = v - along_axis(z, "zero_point")
    if ia.is_number(scale):
        return v * float(scale) if float(scale) != 1.0 else v
    s = ia.float_array(fn, "scale", scale, w)
    return v * along_axis(s, "scale")


def dequantize_tensor(q, scale, zero_point=None, *, bits=None, granularity=None, axis=0, group_size=None, K=None,
                      packing="uint8"):
    """Integer codes (or an integer GEMM's int32 result) -> float32 values.

    q: int8 codes [..., K] (bits=8); uint8 nibble pairs [..., ceil(K/2)]
    (bits=4; pass K for an odd K); int32 words [..., K/8] with
    packing="int32" (or bits=4); or any other int32 array, read as integer
    values (e.g. int8_matmul's result): value = scale * (q - zero_point).
    scale / zero_point: as quantize_tensor returned them (float32 / int32;
    float16, bfloat16 and int8 arrays are converted), or Python numbers.
    granularity ("tensor", "channel" along `axis`, "group" of group_size
    along the last axis) is inferred from scale's shape when omitted; for
    int32 values, scale broadcasts against q as in NumPy (the seed's
    dequantize_tensor(C_int32, scale_a * scale_b)).
    Returns float32 of q's shape (last axis K) in q's framework and device.
    """
    fn = _DT_FN
    w = fw.where(q, fn, "q")
    dt = fw.dtype_name(q)
    if granularity is not None:
        ia.granularity_arg(fn, granularity)
    if dt == "int32" and packing != "int32" and bits in (None, 32):
        return _dequantize_int32(fn, q, w, scale, zero_point, granularity, axis)
    if packing not in ("uint8", "int32"):
        raise ValueError(f"{fn}: packing must be 'uint8' or 'int32', got {packing!r}")
    fmt = {"int8": I8, "uint8": I4, "int32": I4X8}.get(dt)
    if fmt is None:
        raise TypeError(
            f"{fn}: q must be int8 (bits=8 codes), uint8 (bits=4 codes, two per byte) or int32 (words of eight "
            f"4-bit codes with packing='int32', or integer GEMM results), got {dt}"
        )
    want_bits = 8 if fmt == I8 else 4
    if bits is not None and (not ia.is_int_number(bits) or int(bits) != want_bits):
        raise ValueError(f"{fn}: q is {dt}, which holds {want_bits}-bit codes, but bits={bits!r}; omit bits or "
                         f"pass bits={want_bits}")
    if fmt == I4 and packing == "int32":
        raise ValueError(f"{fn}: packing='int32' takes int32 words, but q is uint8 (two codes per byte); "
                         "omit packing")
    shape = tuple(q.shape)
    if len(shape) < 1:
        raise ValueError(f"{fn}: q must have at least one dimension, got a 0-d array")
    k = _api._size(K, "K", fn)
    per_elem = {I8: 1, I4: 2, I4X8: 8}[fmt]
    k_eff = k if k >= 0 else shape[-1] * per_elem
    gran = granularity or _infer_granularity(fn, q, scale, axis)

    moved = None
    gs = 0
    if gran == "tensor":
        qv, core_gran, sshape = q, "tensor", (1,)
    elif gran == "channel":
        ax = ia.axis_arg(fn, axis, len(shape))
        if fmt != I8 and (len(shape) != 2 or ax != 0):
            raise ValueError(
                f"{fn}: 4-bit codes with granularity='channel' take 2-D q [C, packed K] and axis=0, got shape "
                f"{ia.shape_text(shape)} and axis={axis}"
            )
        if fmt == I8:
            qt, qv = _rows_view(q, w, ax)
            moved = (ax, tuple(qt.shape))
        else:
            qv = q
        core_gran, sshape = "row", (shape[ax],)
    else:
        qv, core_gran = q, "group"
        if ia.is_number(scale) or len(tuple(scale.shape)) != len(shape) or tuple(scale.shape)[:-1] != shape[:-1]:
            got = "a number" if ia.is_number(scale) else ia.shape_text(scale.shape)
            raise ValueError(f"{fn}: granularity='group' takes scale of shape [..., K / group_size] with q's "
                             f"leading dims {ia.shape_text(shape[:-1])}, got {got}")
        groups = tuple(scale.shape)[-1]
        if group_size is not None:
            gs = ia.group_size_arg(fn, group_size)
        else:
            if groups == 0 or k_eff % groups != 0:
                raise ValueError(f"{fn}: scale has {groups} groups per row, which does not divide K={k_eff}; "
                                 "pass group_size= (and K= for an odd K)")
            gs = k_eff // groups
        sshape = (*shape[:-1], k_eff // gs if gs else 0)
    s_arr = _static_scale(fn, scale, w, sshape, repr(gran))
    z_arr = None if zero_point is None else _static_zero_point(fn, zero_point, w, sshape, fmt, repr(gran))
    y = _api._run_dequantize_int(_DT_OPS[fmt], qv, k, core_gran, gs, s_arr, z_arr)
    if moved is not None:
        ax, moved_shape = moved
        y = xa.moveaxis(y.reshape(moved_shape), w, 0, ax)
    return y


# ---------------------------------------------------------------- int8_matmul
_I8_FN = "qg.int8_matmul"
_INT8_MATMUL = _Op("gemm", _I8_FN, a_fmt=I8, b_fmt=I8, a_name="B", b_name="A")
_MATMUL_OUT = ("int32", "float32", "float16", "bfloat16")


def operand_layout(x, w: fw.Where, k_major: bool):
    """A 2-D operand as the core reads it: (array, k_major). A transposed view
    of a contiguous array (W.T) is passed as the contiguous array with the
    other layout, so it needs no copy and keeps the fast path."""
    if len(x.shape) == 2 and not xa.is_c_contiguous(x, w):
        xt = x.T
        if xa.is_c_contiguous(xt, w):
            return xt, not k_major
    return x, k_major


def int8_matmul(A, B, scale_a=1.0, scale_b=1.0, scale_c=1.0, *, zero_point_a=None, zero_point_b=None, bias=None,
                activation=None, out_dtype="int32", b_layout="kn"):
    """C = (A - za) * scale_a @ (B - zb) * scale_b * scale_c + bias, then relu (seed 001's int8_matmul).

    A: int8 [..., K] (M = product of the leading dims); B: int8 [K, N]
    (b_layout="kn", seed 001; copied once to K-contiguous rows unless it is
    a transposed view of an [N, K] array) or [N, K] (b_layout="nk", a linear
    layer's weight: no copy). Returns [..., N] (A's leading dims).
    out_dtype="int32" (default): the exact integer sum_k (a - za)(b - zb),
    as in seed 001: the scales are checked but not applied (an integer
    result cannot carry them; dequantize it with
    dequantize_tensor(C, scale_a * scale_b)), and bias must be None
    (activation None or "relu"). out_dtype "float32", "float16" or
    "bfloat16" applies the scales and bias in the GEMM's epilogue. scale_a: a float, or a float32 array [1] or [M] (per
    row of A); scale_b: a float, or [1] or [N] (per column of the result);
    scale_c: a float. zero_point_a / zero_point_b: an int, or an int32 array
    [1] / [M] resp. [1] / [N], in [-128, 127]. bias: float [N].
    K is limited to what int32 accumulates exactly (131071 without zero
    points); a larger K raises, naming the limit.
    """
    adm = _FAST_TYPES.get(type(A))
    if (adm is not None and adm.plain_ok(A, B, scale_a, scale_b, bias)
            and (out_dtype != "bfloat16" or adm.bf16_results)):
        r = _qg.fast_int8_matmul(A, B, scale_a, scale_b, scale_c, zero_point_a, zero_point_b, bias, activation,
                                 out_dtype, b_layout)
        if r is not None:
            return r
    op, a, b, k, epi, shape = _int8_matmul_plan(A, B, scale_a, scale_b, scale_c, zero_point_a=zero_point_a,
                                                zero_point_b=zero_point_b, bias=bias, activation=activation,
                                                out_dtype=out_dtype, b_layout=b_layout)
    y = _api._run_gemm(op, a, b, None, None, None, None, None, epi)
    return y if shape is None else y.reshape(shape)


def _int8_matmul_plan(A, B, scale_a=1.0, scale_b=1.0, scale_c=1.0, *, zero_point_a=None, zero_point_b=None,
                      bias=None, activation=None, out_dtype="int32", b_layout="kn"):
    """int8_matmul's arguments as one core GEMM: (op, a, b, K, epilogue, result shape or None)."""
    fn = _I8_FN
    relu = ia.activation_arg(fn, activation)
    dtype = ia.out_dtype_arg(fn, out_dtype, _MATMUL_OUT)
    if b_layout not in ("kn", "nk"):
        raise ValueError(f"{fn}: b_layout must be 'kn' (B is [K, N]) or 'nk' (B is [N, K]), got {b_layout!r}")
    w = fw.where(A, fn, "A")
    fw.check_same_kind(w, fw.where(B, fn, "B"), fn, "A", "B")
    ashape, bshape = A.shape, B.shape
    if len(ashape) < 1:
        raise ValueError(f"{fn}: A must have shape [M, K], got a 0-d array")
    if len(bshape) != 2:
        want = "[K, N]" if b_layout == "kn" else "[N, K]"
        raise ValueError(f"{fn}: B must be 2-D {want} (b_layout={b_layout!r}), got shape {ia.shape_text(bshape)}")
    m = 1
    for s in ashape[:-1]:
        m *= s
    n = bshape[1] if b_layout == "kn" else bshape[0]
    a_core, a_kmajor = operand_layout(B, w, b_layout == "kn")
    if a_kmajor and not xa.is_c_contiguous(a_core, w):
        # B stored [K, N] (seed 001) goes to the core as it is: the core
        # copies it once into the K-contiguous rows its int8 kernels read
        # (cpu_i8_repacked, cuda_i8_repacked). A strided view of it (a
        # column slice, a flipped NumPy view) would be copied twice, made
        # contiguous here and then repacked, so it gets one transposing copy
        # to [N, K] rows here instead.
        a_core, a_kmajor = xa.moveaxis(a_core, w, 0, 1), False
    b_core, b_kmajor = operand_layout(A, w, False) if len(ashape) == 2 else (A, False)

    fa, col_scale = ia.vector_scale(fn, "scale_a", scale_a, w, m, "M")
    fb, row_scale = ia.vector_scale(fn, "scale_b", scale_b, w, n, "N")
    if not ia.is_number(scale_c):
        raise TypeError(f"{fn}: scale_c must be a Python float (it multiplies the whole result), got "
                        f"{type(scale_c).__module__}.{type(scale_c).__name__}")
    alpha = fa * fb * float(scale_c)
    col_zp = ia.vector_zero_point(fn, "zero_point_a", zero_point_a, w, m, "M", I8)
    row_zp = ia.vector_zero_point(fn, "zero_point_b", zero_point_b, w, n, "N", I8)
    if dtype == "int32":
        # Seed 001 passes its scales with an int32 result and then
        # dequantizes with scale_a * scale_b: the integer result is the exact
        # sum, and the scales (checked above) are the caller's to apply.
        if bias is not None:
            raise ValueError(
                f"{fn}: out_dtype='int32' is the exact integer sum and takes no bias (a float operation); pass "
                "out_dtype='float32' (or 'float16', 'bfloat16') to add it in the GEMM"
            )
        alpha, col_scale, row_scale = 1.0, None, None
    elif dtype == "bfloat16" and w.kind != "torch":
        raise TypeError(f"{fn}: out_dtype='bfloat16' needs torch tensors ({w.kind} has no bfloat16 result arrays "
                        "qg can return); pass out_dtype='float32' or 'float16'")
    epi = _Epilogue(bias, dtype, True, row_scale, col_scale, row_zp, col_zp, alpha, relu, None, None, 0,
                    a_kmajor, b_kmajor)
    return _INT8_MATMUL, a_core, b_core, None, epi, None if len(ashape) == 2 else (*ashape[:-1], n)


# ----------------------------------------------------------------- linear_int4
_LI4_FN = "qg.linear_int4"
_LINEAR_INT4 = {
    name: _Op("gemm", _LI4_FN, a_fmt=I4, b_fmt=f, a_name="weight_q", b_name="x")
    for name, f in (("float16", F16), ("bfloat16", BF16), ("float32", F32))
}


def linear_int4(x, weight_q, scales, zero_points=None, *, group_size=128, bias=None, activation=None):
    """y = x @ W^T + bias (then relu) with W in group-wise INT4 (weight-only, GPTQ/AWQ style).

    x: float32, float16 or bfloat16 [..., K]. weight_q: uint8 [N_out, ceil(K/2)]
    (two's-complement nibbles, low first: quantize_tensor(W, bits=4,
    granularity="group", group_size=...)). scales: float32 / float16 /
    bfloat16 [N_out, K / group_size]; zero_points: int8 or int32 of that
    shape (values in [-8, 7]) or None: W[n, k] = scale * (q - zero_point).
    bias: float [N_out]. Returns [..., N_out] in x's dtype; the float
    activations are read as they are (no activation quantization).
    NumPy and CuPy take float32 or float16 x (no bfloat16 result arrays).
    """
    adm = _FAST_TYPES.get(type(x))
    if adm is not None and adm.plain_ok(x, weight_q, scales, bias):
        r = _qg.fast_linear_int4(x, weight_q, scales, zero_points, group_size, bias, activation)
        if r is not None:
            return r
    op, a, b, k, epi, out_shape = _linear_int4_plan(x, weight_q, scales, zero_points, group_size=group_size,
                                                    bias=bias, activation=activation)
    y = _api._run_gemm(op, a, b, None, None, k, None, None, epi)
    return y if len(out_shape) == 2 else y.reshape((*out_shape[:-1], y.shape[-1]))


def _linear_int4_plan(x, weight_q, scales, zero_points=None, *, group_size=128, bias=None, activation=None):
    """linear_int4's arguments as one core GEMM: (op, a, b, K, epilogue, result shape)."""
    fn = _LI4_FN
    relu = ia.activation_arg(fn, activation)
    w = fw.where(x, fn, "x")
    dtype = fw.dtype_name(x)
    op = _LINEAR_INT4.get(dtype)
    if op is None:
        raise TypeError(f"{fn}: x must be float32, float16 or bfloat16, got {dtype}")
    if dtype == "bfloat16" and w.kind != "torch":
        raise TypeError(f"{fn}: x is a {w.kind} bfloat16 array, whose result qg cannot return as bfloat16 there; "
                        "pass x as float32 or float16, or use torch tensors")
    shape = x.shape
    if len(shape) < 1:
        raise ValueError(f"{fn}: x must have shape [..., K], got a 0-d array; reshape it to [1, K]")
    gs = ia.group_size_arg(fn, group_size)
    if w.kind == "numpy" and hasattr(scales, "dtype") and fw.dtype_name(scales) == "bfloat16":
        scales = xa.astype(scales, w, "float32")  # NumPy bfloat16 (ml_dtypes) cannot travel through DLPack
    if zero_points is not None and hasattr(zero_points, "shape"):
        fw.check_same_kind(w, fw.where(zero_points, fn, "zero_points"), fn, "x", "zero_points")
        if fw.dtype_name(zero_points) in ("int8", "int32"):
            xa.check_range(fn, "zero_points", zero_points, w, -8, 7, "the int4 code range")
    epi = _Epilogue(bias, dtype, True, relu=relu, a_scales=scales, a_zero_points=zero_points, group_size=gs)
    wshape = weight_q.shape
    n_out = wshape[0] if len(wshape) >= 1 else 0
    return op, weight_q, x, shape[-1], epi, (*shape[:-1], n_out)


_api._GEMM_PLANS.update({int8_matmul: _int8_matmul_plan, linear_int4: _linear_int4_plan})
