# SPDX-License-Identifier: MIT
"""The few array operations the integer API does with the caller's own
framework (NumPy, PyTorch, CuPy, JAX): reshapes and axis moves around a core
call, dtype casts, small constant arrays, and reading a min / max on the host
for range checks. Everything else is the core's work.

Each function takes the array's `Where` (qg._frameworks.where) so it never
guesses the framework twice; frameworks are imported only when their arrays
show up.
"""
from __future__ import annotations

import numpy as np

from . import _frameworks as fw


def is_c_contiguous(x, w: fw.Where) -> bool:
    """Row-major dense (JAX arrays always are: they expose no strides)."""
    if w.kind == "torch":
        return x.is_contiguous()
    if w.kind in ("numpy", "cupy"):
        return bool(x.flags.c_contiguous)
    return True


def moveaxis(x, w: fw.Where, src: int, dst: int):
    """x with axis src moved to dst, as a contiguous array of x's framework."""
    if src == dst:
        return x
    if w.kind == "numpy":
        return np.ascontiguousarray(np.moveaxis(x, src, dst))
    if w.kind == "torch":
        return x.movedim(src, dst).contiguous()
    if w.kind == "cupy":
        import cupy

        with cupy.cuda.Device(w.index):
            return cupy.ascontiguousarray(cupy.moveaxis(x, src, dst))
    import jax.numpy as jnp

    return jnp.moveaxis(x, src, dst)


def astype(x, w: fw.Where, dtype: str):
    """x cast to dtype ('float32', 'int8', 'int32', ...) by its framework (no copy when it already is)."""
    if fw.dtype_name(x) == dtype:
        return x
    if w.kind == "torch":
        import torch

        return x.to(getattr(torch, dtype))
    if w.kind == "cupy":
        import cupy

        with cupy.cuda.Device(w.index):
            return x.astype(dtype)
    return x.astype(dtype)  # NumPy, JAX


def full(w: fw.Where, shape, value, dtype: str):
    """A small constant array of the caller's framework on the caller's device."""
    shape = tuple(shape)
    if w.kind == "numpy":
        return np.full(shape, value, dtype=dtype)
    if w.kind == "torch":
        import torch

        device = torch.device("cuda", w.index) if w.device == fw.CUDA else torch.device("cpu")
        return torch.full(shape, value, dtype=getattr(torch, dtype), device=device)
    if w.kind == "cupy":
        import cupy

        with cupy.cuda.Device(w.index):
            return cupy.full(shape, value, dtype=dtype)
    import jax

    return jax.device_put(np.full(shape, value, dtype=dtype), w.jax_device)


def numel(x) -> int:
    n = 1
    for s in x.shape:
        n *= int(s)
    return n


def _torch_values_unreadable(x) -> bool:
    """True while torch traces or captures a CUDA graph, or for tensors that
    hold no data (FakeTensor, functorch wrappers): a host read is impossible
    or would break the capture, so range checks are skipped there."""
    import torch

    from . import torch_ops

    if torch_ops._use_op(x):
        return True
    return x.is_cuda and torch.cuda.is_current_stream_capturing()


def host_min_max(x, w: fw.Where):
    """(min, max) of an integer array as Python ints, read on the host; None
    when the array is empty or its values cannot be read now (torch tracing,
    CUDA graph capture). A device array costs one synchronising read."""
    if numel(x) == 0:
        return None
    if w.kind == "torch":
        if _torch_values_unreadable(x):
            return None
        import torch

        lo, hi = torch.aminmax(x.detach().to(torch.int64) if x.dtype == torch.uint8 else x.detach())
        return int(lo), int(hi)
    return int(x.min()), int(x.max())


def check_range(fn: str, arg: str, x, w: fw.Where, lo: int, hi: int, what: str) -> None:
    """ValueError when an integer array holds a value outside [lo, hi] (what:
    the reason the range holds, for the message)."""
    mm = host_min_max(x, w)
    if mm is None:
        return
    if mm[0] < lo or mm[1] > hi:
        raise ValueError(
            f"{fn}: {arg} must hold values in [{lo}, {hi}] ({what}), got values in [{mm[0]}, {mm[1]}]; "
            f"clip them (or quantize with a scale that maps them into range)"
        )
