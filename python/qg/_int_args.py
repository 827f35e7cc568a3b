# SPDX-License-Identifier: MIT
"""Argument parsing shared by the integer API (_int.py, _int4.py): format
choice, granularity and axis, and scale / zero-point arguments that may be
Python numbers or arrays. Every message names the public function and the fix."""
from __future__ import annotations

import numbers

import numpy as np

from . import _arrays as xa
from . import _frameworks as fw
from ._api import I4, I4X8, I8
from ._args import int_arg

# Code ranges of the integer formats (cpp/src/int_formats.h's code_range).
CODE_RANGE = {I8: (-128, 127), I4: (-8, 7), I4X8: (-8, 7)}
_FLOAT_DTYPES = ("float32", "float16", "bfloat16", "float64")
_INT_DTYPES = ("int8", "int16", "int32", "int64", "uint8")


def is_number(value) -> bool:
    """A Python or NumPy scalar real number (not bool, not an array)."""
    t = type(value)
    if t is float or t is int:  # the common case, without the ABC checks below
        return True
    if isinstance(value, (bool, np.bool_)):
        return False
    return isinstance(value, numbers.Real) and (not hasattr(value, "shape") or isinstance(value, np.generic))


def is_int_number(value) -> bool:
    return type(value) is int or (isinstance(value, numbers.Integral) and not isinstance(value, bool))


def int_format(fn: str, bits, packing) -> int:
    """bits 8 -> i8; bits 4 -> i4 (two per uint8) or, packing='int32', i4x8."""
    if packing not in ("uint8", "int32"):
        raise ValueError(f"{fn}: packing must be 'uint8' or 'int32', got {packing!r}")
    b = int_arg(bits, "bits", fn, "8 or 4")
    if b == 8:
        if packing != "uint8":
            raise ValueError(f"{fn}: packing='int32' is for bits=4 (eight codes a word); omit packing for bits=8")
        return I8
    if b == 4:
        return I4X8 if packing == "int32" else I4
    raise ValueError(f"{fn}: bits must be 8 or 4, got {b}")


def scheme_arg(fn: str, scheme) -> bool:
    """True for asymmetric."""
    if scheme not in ("symmetric", "asymmetric"):
        raise ValueError(f"{fn}: scheme must be 'symmetric' or 'asymmetric', got {scheme!r}")
    return scheme == "asymmetric"


def granularity_arg(fn: str, granularity) -> str:
    if granularity not in ("tensor", "channel", "group"):
        raise ValueError(f"{fn}: granularity must be 'tensor', 'channel' or 'group', got {granularity!r}")
    return granularity


def axis_arg(fn: str, axis, ndim: int) -> int:
    a = int_arg(axis, "axis", fn)
    if not -ndim <= a < ndim:
        raise ValueError(f"{fn}: axis={a} is out of range for an array of {ndim} dimension(s)")
    return a % ndim


def group_size_arg(fn: str, group_size) -> int:
    if group_size is None:
        raise ValueError(f"{fn}: granularity='group' needs group_size (e.g. group_size=128)")
    g = int_arg(group_size, "group_size", fn, "a positive int")
    if g <= 0:
        raise ValueError(f"{fn}: group_size must be positive, got {g}")
    return g


def shape_text(shape) -> str:
    return "[" + ", ".join(str(int(s)) for s in shape) + "]"


def float_array(fn: str, arg: str, value, w: fw.Where, dtype: str = "float32"):
    """An array argument of the caller's framework, cast to float32 (float16,
    bfloat16 and float64 are accepted and converted)."""
    fw.check_same_kind(w, fw.where(value, fn, arg), fn, "the operands", arg)
    name = fw.dtype_name(value)
    if name == dtype:
        return value
    if name not in _FLOAT_DTYPES:
        raise TypeError(f"{fn}: {arg} must be a float array (float32, float16 or bfloat16), got {name}")
    return xa.astype(value, w, dtype)


def int32_array(fn: str, arg: str, value, w: fw.Where):
    fw.check_same_kind(w, fw.where(value, fn, arg), fn, "the operands", arg)
    name = fw.dtype_name(value)
    if name == "int32":
        return value
    if name not in _INT_DTYPES:
        raise TypeError(f"{fn}: {arg} must be an integer array (int32 or int8), got {name}")
    return xa.astype(value, w, "int32")


def vector_scale(fn: str, arg: str, value, w: fw.Where, length: int, length_name: str):
    """A scale constant along K (the epilogue's row / column scales): a Python
    number -> (factor, None), to be folded into alpha (no array per call); an
    array of one element or of `length` -> (1.0, float32 [1] or [length])."""
    if is_number(value):
        return float(value), None
    if not hasattr(value, "shape"):
        raise TypeError(
            f"{fn}: {arg} must be a float or an array of shape [1] or [{length_name}], "
            f"got {type(value).__module__}.{type(value).__name__}"
        )
    arr = float_array(fn, arg, value, w)
    shape = arr.shape
    if len(shape) == 0 or (len(shape) > 1 and xa.numel(arr) == 1):
        arr = arr.reshape((1,))
    elif len(shape) != 1 or shape[0] not in (1, length):
        raise ValueError(
            f"{fn}: {arg} must be a float or an array of shape [1] or [{length_name}]=[{length}], "
            f"got shape {shape_text(shape)}"
        )
    return 1.0, arr


def vector_zero_point(fn: str, arg: str, value, w: fw.Where, length: int, length_name: str, fmt: int):
    """A zero point constant along K: None / 0 -> None; a Python int -> int32
    [1]; an integer array [1] or [length] -> int32. Values must lie in the
    format's code range (checked on the host; see _arrays.host_min_max)."""
    if value is None:
        return None
    lo, hi = CODE_RANGE[fmt]
    if is_int_number(value):
        v = int(value)
        if not lo <= v <= hi:
            raise ValueError(f"{fn}: {arg}={v} is outside the code range [{lo}, {hi}]; pass a zero point in it")
        return None if v == 0 else xa.full(w, (1,), v, "int32")
    if not hasattr(value, "shape"):
        raise TypeError(
            f"{fn}: {arg} must be an int or an int32 array of shape [1] or [{length_name}], "
            f"got {type(value).__module__}.{type(value).__name__}"
        )
    arr = int32_array(fn, arg, value, w)
    shape = arr.shape
    if len(shape) == 0 or (len(shape) > 1 and xa.numel(arr) == 1):
        arr = arr.reshape((1,))
    elif len(shape) != 1 or shape[0] not in (1, length):
        raise ValueError(
            f"{fn}: {arg} must be an int or an array of shape [1] or [{length_name}]=[{length}], "
            f"got shape {shape_text(shape)}"
        )
    xa.check_range(fn, arg, arr, w, lo, hi, "the code range of the operand's format")
    return arr


def out_dtype_arg(fn: str, out_dtype, allowed) -> str:
    """'float16', torch.float16, np.float16 or np.dtype('float16') -> 'float16'."""
    name = out_dtype
    if not isinstance(name, str):
        text = str(out_dtype)
        if text.startswith("torch."):
            name = text[len("torch."):]
        else:
            try:
                name = np.dtype(out_dtype).name
            except TypeError:
                name = text
    if name not in allowed:
        raise ValueError(f"{fn}: out_dtype must be one of {', '.join(repr(a) for a in allowed)}, got {out_dtype!r}")
    return name


def activation_arg(fn: str, activation) -> bool:
    """True for relu."""
    if activation is None or activation == "none":
        return False
    if activation == "relu":
        return True
    raise ValueError(f"{fn}: activation must be None or 'relu', got {activation!r}")
