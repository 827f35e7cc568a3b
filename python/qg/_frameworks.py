# SPDX-License-Identifier: MIT
"""Framework glue: recognise an array's framework and device, allocate outputs
with that framework, and find the stream its work is queued on.

Nothing here checks shapes or dtypes: the C++ core does that in one place.
Frameworks are imported lazily, only when an array of theirs shows up.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass

import numpy as np

CPU, CUDA = 0, 1


@dataclass(frozen=True)
class Where:
    kind: str  # "numpy", "torch", "cupy", "jax"
    device: int  # CPU or CUDA
    index: int  # device ordinal
    jax_device: object = None  # the jax.Device, to put results back on it


def _module_of(x) -> str:
    return type(x).__module__.split(".", 1)[0]


def is_jax(x) -> bool:
    if "jax" not in sys.modules:
        return False
    import jax

    return isinstance(x, jax.Array)


_JAX_TRACER_TYPES: tuple | None = None


def _jax_tracer_types() -> tuple:
    """JAX's Tracer class, wherever this JAX version keeps it (jax.core.Tracer
    has been deprecated and moved over releases; jax._src.core.Tracer is the
    definition)."""
    global _JAX_TRACER_TYPES
    if _JAX_TRACER_TYPES is None:
        import importlib
        import warnings

        found = []
        for mod_name in ("jax._src.core", "jax.core", "jax.extend.core"):
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")  # deprecation warnings of moved names
                    t = getattr(importlib.import_module(mod_name), "Tracer", None)
            except Exception:  # noqa: BLE001 - a module this JAX does not have
                continue
            if isinstance(t, type) and t not in found:
                found.append(t)
        _JAX_TRACER_TYPES = tuple(found)
    return _JAX_TRACER_TYPES


def _jax_tracer(x) -> bool:
    """True for an abstract value under jax.jit / vmap / grad / ... (no data to read)."""
    types = _jax_tracer_types()
    if types and isinstance(x, types):
        return True
    # Fallback, should JAX move Tracer again: a concrete jax.Array knows its
    # devices; a tracer raises (ConcretizationTypeError and friends).
    try:
        x.devices()
    except Exception:  # noqa: BLE001
        return True
    return False


def _torch_tensor_type():
    """torch.Tensor when torch is imported (every torch tensor comes from an imported torch)."""
    torch = sys.modules.get("torch")
    return getattr(torch, "Tensor", None) if torch is not None else None


_NUMPY_WHERE = Where("numpy", CPU, 0)
_TORCH_CPU_WHERE = Where("torch", CPU, 0)
_TORCH_CUDA_WHERE: dict = {}  # device index -> Where
_TORCH_TYPES: set = set()  # torch tensor types seen here (their operators are registered)
_TORCH_STRIDED = None  # torch.strided, set with _TORCH_TYPES' first entry (no import per call)


def _torch_where(x, fn: str, arg: str) -> Where:
    if x.layout != _TORCH_STRIDED:
        raise TypeError(f"{fn}: {arg} is a {x.layout} torch tensor; pass a dense tensor ({arg}.to_dense())")
    if x.is_nested:
        raise TypeError(f"{fn}: {arg} is a nested torch tensor; pass a dense tensor ({arg}.to_padded_tensor(0))")
    if x.is_quantized:
        raise TypeError(
            f"{fn}: {arg} is a quantized torch tensor ({x.dtype}); pass a float tensor ({arg}.dequantize())"
        )
    if x.is_cpu:
        return _TORCH_CPU_WHERE
    if x.is_cuda:
        index = x.device.index or 0
        w = _TORCH_CUDA_WHERE.get(index)
        if w is None:
            w = _TORCH_CUDA_WHERE[index] = Where("torch", CUDA, index)
        return w
    raise ValueError(f"{fn}: torch tensors on '{x.device.type}' are not supported; use cpu or cuda")


def where(x, fn: str, arg: str = "x") -> Where:
    if type(x) in _TORCH_TYPES:  # the common case first: every call from a torch model
        return _torch_where(x, fn, arg)
    if isinstance(x, np.ndarray):
        return _NUMPY_WHERE
    tensor_type = _torch_tensor_type()
    if tensor_type is not None and isinstance(x, tensor_type):  # torch.Tensor and its subclasses
        from . import torch_ops  # registers qg's torch operators and the fast path

        torch_ops.enable_fast_path(type(x))
        if not _TORCH_DTYPE_NAMES:
            import torch

            global _TORCH_STRIDED
            _TORCH_STRIDED = torch.strided
            for name in ("float32", "float16", "bfloat16", "float64", "int8", "int16", "int32", "int64", "uint8"):
                _TORCH_DTYPE_NAMES[getattr(torch, name)] = name
        _TORCH_TYPES.add(type(x))
        return _torch_where(x, fn, arg)
    if _module_of(x) == "cupy":
        return Where("cupy", CUDA, int(x.device.id))
    if is_jax(x):
        if _jax_tracer(x):
            raise TypeError(
                f"{fn}: {arg} is a JAX tracer: qg does not support jax.jit, jax.vmap or jax.grad yet; "
                "call qg on concrete arrays, outside the transformation (the eager path)"
            )
        devices = list(x.devices())
        if len(devices) != 1:
            raise ValueError(f"{fn}: sharded JAX arrays are not supported; pass an array on one device")
        d = devices[0]
        if d.platform == "cpu":
            return Where("jax", CPU, 0, d)
        if d.platform in ("gpu", "cuda"):
            index = d.local_hardware_id if d.local_hardware_id is not None else d.id
            return Where("jax", CUDA, int(index), d)
        raise ValueError(f"{fn}: JAX arrays on '{d.platform}' are not supported; use cpu or gpu")
    raise TypeError(
        f"{fn}: {arg} must be a NumPy, PyTorch, CuPy or JAX array, got {type(x).__module__}.{type(x).__name__}"
    )


# torch dtype -> its name, filled when the first torch tensor shows up: str()
# of a torch dtype is slow. Only torch dtypes as keys, so torch.compile can
# read the table (it cannot hash NumPy dtypes).
_TORCH_DTYPE_NAMES: dict = {}


# NumPy dtype (NumPy's, JAX's and CuPy's arrays) -> (str name, .name): NumPy
# computes both in Python, about 2 us each, which was most of a NumPy call's
# host time. Bounded: a program meets few dtypes.
_NP_DTYPE_NAMES: dict = {}
_NP_DTYPE_NAMES_MAX = 256


def _np_dtype_names(dt) -> tuple:
    names = _NP_DTYPE_NAMES.get(dt)
    if names is None:
        names = (str(dt).rsplit(".", 1)[-1], dt.name)
        if len(_NP_DTYPE_NAMES) < _NP_DTYPE_NAMES_MAX:
            _NP_DTYPE_NAMES[dt] = names
    return names


def dtype_name(x) -> str:
    """'float32', 'bfloat16', ... for an array of any framework."""
    if type(x) in _TORCH_TYPES:
        name = _TORCH_DTYPE_NAMES.get(x.dtype)
        if name is not None:
            return name
        return str(x.dtype).rsplit(".", 1)[-1]
    dt = x.dtype
    if isinstance(dt, np.dtype):
        return _np_dtype_names(dt)[0]
    return str(dt).rsplit(".", 1)[-1]


def check_same_kind(wa: Where, wb: Where, fn: str, a: str, b: str) -> None:
    """Both operands of one call come from one framework: the result's kind is then never ambiguous."""
    if wa is wb:  # the shared Where of NumPy, torch on the CPU, or one CUDA device
        return
    if wa.kind != wb.kind:
        raise TypeError(
            f"{fn}: {a} is a {wa.kind} array but {b} is a {wb.kind} array; pass both from one framework "
            f"(the result is returned in that framework)"
        )
    if (wa.device, wa.index) != (wb.device, wb.index):
        dev = lambda x: "cpu" if x.device == CPU else f"cuda:{x.index}"  # noqa: E731
        raise ValueError(f"{fn}: {a} is on {dev(wa)} but {b} is on {dev(wb)}; move both to one device")


_NP_OK_KINDS = "fiu"  # float, signed, unsigned: what DLPack carries and the core names in its errors


def prepare_input(x, w: Where, fn: str = "qg", arg: str = "x", expect: str = ""):
    """Returns (array for DLPack, is_bf16_bits). Never modifies x.

    Non-contiguous inputs are copied with their own framework (the core needs
    rows of one stride); NumPy bfloat16 (ml_dtypes) is passed as its uint16
    bits because DLPack cannot carry it from NumPy; torch views with the
    negative bit set are resolved (copied), so their values are read as seen.
    Dtypes DLPack cannot carry are refused here with qg's message (`expect`
    names the dtypes the argument takes, e.g. "float32, float16 or bfloat16").
    """
    bf16 = False
    if w.kind == "numpy":
        if isinstance(x, np.ma.MaskedArray):
            raise TypeError(
                f"{fn}: {arg} is a NumPy masked array, whose mask qg would ignore; pass {arg}.filled(value) "
                f"(or np.asarray({arg}) to use the data under the mask)"
            )
        if _np_dtype_names(x.dtype)[1] == "bfloat16":
            x, bf16 = x.view(np.uint16), True
        elif x.dtype.kind not in _NP_OK_KINDS or x.dtype.itemsize not in (1, 2, 4, 8) or x.dtype.fields:
            want = f"must be {expect}" if expect else f"has a dtype qg does not take (see help({fn}))"
            raise TypeError(f"{fn}: {arg} {want}, got {x.dtype}")
        elif not x.dtype.isnative:
            raise TypeError(
                f"{fn}: {arg} has non-native byte order ({x.dtype.str}); "
                f"pass {arg}.astype({arg}.dtype.newbyteorder('=')), the same values in native order"
            )
        if not x.flags.c_contiguous:
            x = np.ascontiguousarray(x)
    elif w.kind == "torch":
        if x.is_neg():
            x = x.resolve_neg()
        if x.is_conj():
            x = x.resolve_conj()
        if not x.is_contiguous():
            x = x.contiguous()
    elif w.kind == "cupy":
        if not x.flags.c_contiguous:
            import cupy

            with cupy.cuda.Device(w.index):
                x = cupy.ascontiguousarray(x)
    elif w.kind == "jax":
        x.block_until_ready()  # qg runs on its own stream: wait for JAX's producers
        if w.device == CPU and _np_dtype_names(x.dtype)[1] != "bfloat16":
            # A NumPy view of the host buffer (no copy, 0.6 us): the core
            # takes each input twice a call, and JAX's DLPack export costs
            # about 2 us a time. bfloat16 stays a JAX array, which DLPack
            # carries as such (NumPy's cannot).
            x = np.asarray(x)
    return x, bf16


_NP_DTYPES = {"float32": np.float32, "uint8": np.uint8, "float16": np.float16, "int8": np.int8, "int32": np.int32}


def empty(w: Where, shape, dtype: str):
    """An uninitialised array of the caller's framework on the caller's device."""
    shape = tuple(int(s) for s in shape)
    if w.kind == "numpy" or (w.kind == "jax" and w.device == CPU):
        return np.empty(shape, dtype=_NP_DTYPES[dtype])
    if w.kind == "torch":
        import torch

        tdt = {
            "float32": torch.float32, "uint8": torch.uint8, "float16": torch.float16, "bfloat16": torch.bfloat16,
            "int8": torch.int8, "int32": torch.int32,
        }[dtype]
        device = torch.device("cuda", w.index) if w.device == CUDA else torch.device("cpu")
        return torch.empty(shape, dtype=tdt, device=device)
    if w.kind == "cupy":
        import cupy

        with cupy.cuda.Device(w.index):
            return cupy.empty(shape, dtype=_NP_DTYPES[dtype])
    if w.kind == "jax":  # GPU: JAX arrays are immutable, so qg allocates and hands over
        from . import _qg

        return _qg.empty_cuda(list(shape), dtype, w.index)
    raise AssertionError(w.kind)


def _dtype_text(dt: np.dtype) -> str:
    return dt.name if dt.isnative or dt.itemsize == 1 else f"{dt.name} with non-native byte order ({dt.str})"


def check_out(out, w: Where, fn: str, dtype: str | None = None):
    """out= must be a writable array of the inputs' framework and device.

    dtype (the result's): checked here for NumPy arrays, whose dtypes DLPack
    may not carry (non-native byte order, ml_dtypes, object); the core checks
    shape, dtype, device, layout and overlap of everything that reaches it."""
    ow = where(out, fn, "out")
    if ow.kind == "jax":
        raise TypeError(f"{fn}: out= cannot be a JAX array (JAX arrays are immutable); omit out=")
    if (ow.device, ow.index) != (w.device, w.index):
        dev = lambda x: "cpu" if x.device == CPU else f"cuda:{x.index}"  # noqa: E731
        raise ValueError(f"{fn}: out is on {dev(ow)} but the inputs are on {dev(w)}; pass out on {dev(w)}")
    if ow.kind != w.kind:
        raise TypeError(
            f"{fn}: out is a {ow.kind} array but the inputs are {w.kind} arrays; pass out from the inputs' "
            f"framework (or omit out=)"
        )
    if ow.kind == "numpy":
        if dtype is not None and out.dtype != np.dtype(dtype):
            raise TypeError(f"{fn}: out must be {dtype}, got {_dtype_text(out.dtype)}")
        if not out.flags.writeable:
            raise ValueError(f"{fn}: out must be writable (it is a read-only NumPy array)")
    if ow.kind == "torch":
        if out.requires_grad:
            raise ValueError(f"{fn}: out must not require grad")
        if out.is_neg() or out.is_conj():
            raise ValueError(
                f"{fn}: out is a lazily {'negated' if out.is_neg() else 'conjugated'} torch view, which qg would "
                f"write as stored, not as seen; pass a plain tensor"
            )
    return out


def stream_handle(stream, fn: str) -> int | None:
    """Validates stream= (on every device: a wrong type is an error even where
    it would be ignored). None: the framework's current stream."""
    if stream is None:
        return None
    if isinstance(stream, bool):
        raise TypeError(f"{fn}: stream must be an int handle, a torch.cuda.Stream or a cupy.cuda.Stream, got bool")
    if isinstance(stream, int):
        handle = stream
    else:
        for attr in ("cuda_stream", "ptr"):  # torch.cuda.Stream, cupy.cuda.Stream
            value = getattr(stream, attr, None)
            if isinstance(value, int) and not isinstance(value, bool):
                handle = value
                break
        else:
            raise TypeError(
                f"{fn}: stream must be an int handle (cudaStream_t), a torch.cuda.Stream or a cupy.cuda.Stream, "
                f"got {type(stream).__module__}.{type(stream).__name__}"
            )
    if not 0 <= handle < 2**64:
        raise ValueError(f"{fn}: stream={handle} is not a valid cudaStream_t handle (0 <= handle < 2**64)")
    return handle


def stream_of(w: Where, stream, fn: str = "qg") -> int:
    """The stream handle to queue CUDA work on (0 on the CPU)."""
    handle = stream_handle(stream, fn)
    if w.device == CPU:
        return 0
    if handle is not None:
        return handle
    if w.kind == "torch":
        import torch

        return int(torch.cuda.current_stream(w.index).cuda_stream)
    if w.kind == "cupy":
        import cupy

        with cupy.cuda.Device(w.index):
            return int(cupy.cuda.get_current_stream().ptr)
    if w.kind == "jax":
        from . import _qg

        return int(_qg.internal_stream(w.index))
    return 0


def _jax_default_device_is(jax, device) -> bool:
    """Whether JAX puts a new array on `device` by itself: no default device
    set (jax.default_device, JAX_DEFAULT_DEVICE) and `device` the first of
    the default backend's, which must be the CPU."""
    return jax.config.jax_default_device is None and jax.default_backend() == "cpu" and jax.devices()[0] == device


def finish(result, w: Where, stream: int):
    """Hands the result back as the caller's kind of array."""
    if w.kind != "jax":
        return result
    import jax

    if w.device == CPU:
        if _jax_default_device_is(jax, w.jax_device):
            return jax.numpy.asarray(result)  # about 15 us, where device_put takes 30
        return jax.device_put(result, w.jax_device)  # not JAX's default device, which may be a GPU
    from . import _qg

    _qg.stream_synchronize(w.index, stream)  # JAX reads it on its own stream
    return jax.dlpack.from_dlpack(result)


class device_context:
    """Makes the arrays' device current for the framework while qg runs: torch
    refuses to export a tensor through DLPack from a non-current device."""

    def __init__(self, w: Where):
        self._w = w
        self._ctx = None

    def __enter__(self):
        if self._w.device == CUDA and self._w.kind == "torch":
            import torch

            self._ctx = torch.cuda.device(self._w.index)
        elif self._w.device == CUDA and self._w.kind == "cupy":
            import cupy

            self._ctx = cupy.cuda.Device(self._w.index)
        if self._ctx is not None:
            self._ctx.__enter__()
        return self

    def __exit__(self, *exc):
        if self._ctx is not None:
            self._ctx.__exit__(*exc)
        return False
