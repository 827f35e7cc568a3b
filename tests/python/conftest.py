# SPDX-License-Identifier: MIT
"""Shared fixtures for qg's pytest suite.

* `rng` / `make_rng(seed)`: seeded NumPy generators; the seed is printed so a
  failure can be replayed (pytest shows captured stdout of failing tests).
* `needs_torch`, `needs_jax`, `needs_cupy`, `needs_cuda`: skip markers.
* `fw`: parametrised over every installed framework x device combination
  (numpy-cpu, torch-cpu, jax-cpu and, when qg sees a GPU, torch-cuda,
  cupy-cuda, jax-gpu). Each is a `Framework` with `to(np_array)` and
  `to_numpy(array)` converters and `check(array, dtype, shape)`.
* Reference helpers (NumPy only) for the formats live in `qg_ref.py`.
"""
from __future__ import annotations

import importlib.util
import os
import sys
import zlib

import numpy as np
import pytest

import qg

sys.path.insert(0, os.path.dirname(__file__))  # so tests can `import qg_ref`


# --------------------------------------------------------------------------- seeds
def make_rng(seed: int) -> np.random.Generator:
    print(f"seed={seed}")
    return np.random.default_rng(seed)


@pytest.fixture
def rng(request):
    """A generator seeded from the test's id (stable across runs, distinct per
    test); QG_TEST_SEED overrides it."""
    env = os.environ.get("QG_TEST_SEED")
    seed = int(env) if env else zlib.crc32(request.node.nodeid.encode()) & 0x7FFFFFFF
    return make_rng(seed)


# ------------------------------------------------------------------ availability
def _has(mod: str) -> bool:
    return importlib.util.find_spec(mod) is not None


HAS_TORCH = _has("torch")
HAS_JAX = _has("jax")
HAS_CUPY = _has("cupy")
HAS_ML_DTYPES = _has("ml_dtypes")
CUDA = qg.cuda_available()

needs_torch = pytest.mark.skipif(not HAS_TORCH, reason="torch is not installed")
needs_jax = pytest.mark.skipif(not HAS_JAX, reason="jax is not installed")
needs_cupy = pytest.mark.skipif(not HAS_CUPY, reason="cupy is not installed")
needs_ml_dtypes = pytest.mark.skipif(not HAS_ML_DTYPES, reason="ml_dtypes is not installed")
needs_cuda = pytest.mark.skipif(not CUDA, reason=f"qg sees no CUDA device: {qg.cuda_unavailable_reason()}")


def torch_cuda_ok() -> bool:
    if not (HAS_TORCH and CUDA):
        return False
    import torch

    return torch.cuda.is_available()


def cupy_cuda_ok() -> bool:
    if not (HAS_CUPY and CUDA):
        return False
    try:
        import cupy

        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:  # noqa: BLE001 - cupy without a usable driver
        return False


def jax_gpu_ok() -> bool:
    if not (HAS_JAX and CUDA):
        return False
    try:
        import jax

        return len(jax.devices("gpu")) > 0
    except Exception:  # noqa: BLE001 - jax without a GPU plugin
        return False


needs_torch_cuda = pytest.mark.skipif(not torch_cuda_ok(), reason="needs torch with CUDA and a GPU qg can use")
needs_cupy_cuda = pytest.mark.skipif(not cupy_cuda_ok(), reason="needs cupy and a GPU qg can use")
needs_jax_gpu = pytest.mark.skipif(not jax_gpu_ok(), reason="needs jax with a GPU and a GPU qg can use")


# ------------------------------------------------------------------- frameworks
def _np_bf16_bits(x: np.ndarray) -> np.ndarray | None:
    return x.view(np.uint16) if x.dtype.name == "bfloat16" else None


class Framework:
    """One framework on one device: converts NumPy arrays there and back."""

    def __init__(self, name: str):
        self.name = name
        self.kind, self.device = name.split("-")
        self.is_cuda = self.device in ("cuda", "gpu")

    def __repr__(self):
        return self.name

    # NumPy -> framework ------------------------------------------------------
    def to(self, x: np.ndarray):
        if self.kind == "numpy":
            return x
        if self.kind == "torch":
            import torch

            bits = _np_bf16_bits(x)
            t = torch.from_numpy(bits.copy()).view(torch.bfloat16) if bits is not None else torch.from_numpy(x.copy())
            return t.to("cuda") if self.is_cuda else t
        if self.kind == "cupy":
            import cupy

            if _np_bf16_bits(x) is not None:
                pytest.skip("cupy has no bfloat16 dtype")
            return cupy.asarray(x)
        if self.kind == "jax":
            import jax

            dev = jax.devices("gpu")[0] if self.is_cuda else jax.devices("cpu")[0]
            return jax.device_put(x, dev)
        raise AssertionError(self.kind)

    def empty(self, shape, dtype):
        """An output buffer for out= (NaN-poisoned when float)."""
        a = np.full(shape, np.nan, dtype) if np.dtype(dtype).kind == "f" else np.full(shape, 0xAB, dtype)
        return self.to(a)

    # framework -> NumPy ------------------------------------------------------
    def to_numpy(self, a) -> np.ndarray:
        return to_numpy(a)

    def sync(self):
        if not self.is_cuda:
            return
        if self.kind == "torch":
            import torch

            torch.cuda.synchronize()
        elif self.kind == "cupy":
            import cupy

            cupy.cuda.Device().synchronize()

    # type / device / dtype checks --------------------------------------------
    def check(self, a, dtype, shape):
        """Asserts that `a` is this framework's array, on this device, with this
        NumPy dtype and shape."""
        dtype = np.dtype(dtype)
        shape = tuple(shape)
        if self.kind == "numpy":
            assert isinstance(a, np.ndarray), type(a)
            assert a.dtype == dtype and a.shape == shape, (a.dtype, a.shape)
        elif self.kind == "torch":
            import torch

            assert isinstance(a, torch.Tensor), type(a)
            assert a.device.type == ("cuda" if self.is_cuda else "cpu"), a.device
            assert a.dtype == {np.dtype(np.uint8): torch.uint8, np.dtype(np.float32): torch.float32}[dtype]
            assert tuple(a.shape) == shape
            assert not a.requires_grad
        elif self.kind == "cupy":
            import cupy

            assert isinstance(a, cupy.ndarray), type(a)
            assert a.dtype == dtype and a.shape == shape
        elif self.kind == "jax":
            import jax

            assert isinstance(a, jax.Array), type(a)
            assert a.dtype == dtype and a.shape == shape
            (dev,) = a.devices()
            want = jax.devices("gpu")[0] if self.is_cuda else jax.devices("cpu")[0]
            assert dev == want, f"result on {dev}, input was on {want}"


def to_numpy(a) -> np.ndarray:
    """Any supported array -> NumPy (bf16 upcast to float32)."""
    if isinstance(a, np.ndarray):
        return a
    mod = type(a).__module__.split(".", 1)[0]
    if mod == "torch":
        import torch

        t = a.detach().cpu()
        if t.dtype == torch.bfloat16:
            t = t.float()
        return t.numpy()
    if mod == "cupy":
        import cupy

        return cupy.asnumpy(a)
    return np.asarray(a)  # jax


def framework_names() -> list[str]:
    names = ["numpy-cpu"]
    if HAS_TORCH:
        names.append("torch-cpu")
    if HAS_JAX:
        names.append("jax-cpu")
    if torch_cuda_ok():
        names.append("torch-cuda")
    if cupy_cuda_ok():
        names.append("cupy-cuda")
    if jax_gpu_ok():
        names.append("jax-gpu")
    return names


FRAMEWORKS = framework_names()
CUDA_FRAMEWORKS = [n for n in FRAMEWORKS if not n.endswith("-cpu")]


@pytest.fixture(params=FRAMEWORKS)
def fw(request) -> Framework:
    return Framework(request.param)


@pytest.fixture(params=CUDA_FRAMEWORKS or [pytest.param(None, marks=pytest.mark.skip(
    reason=f"no CUDA framework usable with qg ({qg.cuda_unavailable_reason() or 'no GPU framework installed'})"))])
def cuda_fw(request) -> Framework:
    return Framework(request.param)


def pytest_report_header(config):
    return [
        f"qg {qg.__version__}: {qg.build_info()}",
        f"qg frameworks under test: {', '.join(FRAMEWORKS)}",
        f"qg CUDA: {'available' if CUDA else 'unavailable: ' + qg.cuda_unavailable_reason()}",
    ]


@pytest.fixture
def fresh_dynamo():
    """A clean torch._dynamo cache before and after the test (compiled
    graphs of one test must not serve another)."""
    import torch

    torch._dynamo.reset()
    yield
    torch._dynamo.reset()
