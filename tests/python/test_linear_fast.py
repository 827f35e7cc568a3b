# SPDX-License-Identifier: MIT
"""linear_q4_0's single-crossing entry (qg._qg.fast_linear_q4_0): an eager call
on plain torch tensors quantizes x and runs the GEMM in one core call. So does
QuantizedLinear(int8)'s forward (qg._qg.fast_linear_int8, qg::linear_int8). With the
entry turned away, the function's two steps (quantize x to Q8_1, then the GEMM
whose epilogue adds the bias and casts to x's dtype) make the call: the same
bytes, shapes and dtypes, or the same error. NumPy arrays take the entry too
(through qg's exchange table for them). What the entry does not take (a
non-contiguous x, stream=, tensors that require grad) goes to those steps
unchanged."""
from __future__ import annotations

import re

import numpy as np
import pytest

import qg
from conftest import needs_torch_cuda

torch = pytest.importorskip("torch")

K, M = 128, 40
LEADS = [(), (3,), (2, 3)]  # x 1-D, 2-D and 3-D
DTYPES = ["float32", "float16", "bfloat16"]


def _inputs(rng, lead, dtype, device="cpu", k=K, m=M):
    x = torch.from_numpy(rng.standard_normal((*lead, k)).astype(np.float32)).to(device, getattr(torch, dtype))
    wq = qg.quantize_q4_0(torch.from_numpy(rng.standard_normal((m, k)).astype(np.float32)).to(device))
    b = torch.from_numpy(rng.standard_normal(m).astype(np.float32)).to(device)
    return x, wq, b


class _Entry:
    """Wraps a single-crossing entry (qg._qg.<name>) to see what it did with
    each call ("taken", "declined" or "raised"); off() turns every call away."""

    def __init__(self, monkeypatch, name="fast_linear_q4_0"):
        from qg import _qg

        self._mp, self._qg, self._name, self._real = monkeypatch, _qg, name, getattr(_qg, name)
        self.calls: list = []
        monkeypatch.setattr(_qg, name, self._call)

    def _call(self, *args):
        try:
            r = self._real(*args)
        except Exception:
            self.calls.append("raised")
            raise
        self.calls.append("declined" if r is None else "taken")
        return r

    def last(self) -> str:
        return self.calls[-1] if self.calls else "not called"

    def off(self):
        self._mp.setattr(self._qg, self._name, lambda *args: None)

    def then_steps(self, call, expect="taken"):
        """The outcome of call() through the entry (which must have done
        `expect` with it), then with the entry off: (entry's, steps')."""
        first = _outcome(call)
        assert self.last() == expect
        self.off()
        return first, _outcome(call)


@pytest.fixture
def entry(monkeypatch):
    return _Entry(monkeypatch)


@pytest.fixture
def entry_int8(monkeypatch):
    return _Entry(monkeypatch, "fast_linear_int8")


def _outcome(call):
    """(dtype, shape, bytes) of the result, or (exception type, message)."""
    try:
        y = call()
    except (TypeError, ValueError, RuntimeError) as e:
        return type(e), str(e)
    return y.dtype, tuple(y.shape), y.cpu().flatten().view(torch.uint8).numpy().tobytes()


def _composed(x, wq, bias):
    """The public functions' composition: quantize_q8_1, gemm_q4_0_q8_1 (float32
    [M, N]), transposed, plus the bias in float32, cast once to x's dtype."""
    c = qg.gemm_q4_0_q8_1(wq, qg.quantize_q8_1(x.reshape(-1, x.shape[-1])))
    y = c.T if bias is None else c.T + bias.float()
    return y.to(x.dtype).reshape(*x.shape[:-1], wq.shape[0])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("lead", LEADS, ids=str)
@pytest.mark.parametrize("bias", ["none", "float32", "x_dtype"])
def test_entry_is_byte_identical_to_the_steps(entry, rng, dtype, lead, bias):
    x, wq, b = _inputs(rng, lead, dtype)
    b = None if bias == "none" else b if bias == "float32" else b.to(x.dtype)
    y = qg.linear_q4_0(x, wq, b)
    assert entry.last() == "taken"
    assert y.dtype == x.dtype and tuple(y.shape) == (*lead, M)
    assert torch.equal(y, _composed(x, wq, b))
    entry.off()
    assert _outcome(lambda: qg.linear_q4_0(x, wq, b)) == _outcome(lambda: y)


@pytest.mark.parametrize(
    "x_shape,m",
    [((0, K), M), ((2, 0), M), ((2, K), 0), ((1, 1, K), 1)],
    ids=["no_tokens", "k0", "m0", "m1"],
)
def test_empty_and_single_sizes_match_the_steps(entry, rng, x_shape, m):
    x = torch.from_numpy(rng.standard_normal(x_shape).astype(np.float32))
    wq = qg.quantize_q4_0(torch.from_numpy(rng.standard_normal((m, x_shape[-1])).astype(np.float32)))
    b = torch.from_numpy(rng.standard_normal(m).astype(np.float32))
    fast, steps = entry.then_steps(lambda: qg.linear_q4_0(x, wq, b))
    assert fast == steps


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_numpy_takes_the_entry_with_the_same_bytes(entry, rng, dtype):
    x, wq, b = _inputs(rng, (2, 3), dtype)
    y = qg.linear_q4_0(x, wq, b)
    y_np = qg.linear_q4_0(x.numpy(), wq.numpy(), b.numpy())
    assert entry.calls == ["taken", "taken"]  # NumPy arrays take the entry as torch tensors do
    assert isinstance(y_np, np.ndarray) and y_np.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(y_np, y.numpy())
    entry.off()
    np.testing.assert_array_equal(qg.linear_q4_0(x.numpy(), wq.numpy(), b.numpy()), y_np)  # the steps


def test_what_the_entry_does_not_take_goes_to_the_steps(entry, rng):
    x, wq, b = _inputs(rng, (4,), "float32")
    want = qg.linear_q4_0(x, wq, b)
    wide = torch.from_numpy(rng.standard_normal((4, 2 * K)).astype(np.float32))
    wide[:, ::2] = x
    b2 = torch.stack([b, b], 1)
    cases = {
        "x strided": lambda: qg.linear_q4_0(wide[:, ::2], wq, b),
        "x transposed": lambda: qg.linear_q4_0(x.T.contiguous().T, wq, b),
        "weight rows strided": lambda: qg.linear_q4_0(x, torch.stack([wq, wq], 1)[:, 0], b),
        "bias strided": lambda: qg.linear_q4_0(x, wq, b2[:, 0]),
        "bias negated view": lambda: qg.linear_q4_0(x, wq, (-b)._neg_view()),
        "stream=": lambda: qg.linear_q4_0(x, wq, b, stream=0),
    }
    for name, call in cases.items():
        entry.calls.clear()
        y = call()
        assert entry.last() in ("declined", "not called"), name
        assert torch.equal(y, want), name


def test_errors_are_the_steps_errors(entry, rng):
    x, wq, b = _inputs(rng, (2,), "float32", k=64, m=8)
    cases = {
        "bias shape": (lambda: qg.linear_q4_0(x, wq, b[:5]), r"bias must have shape \[8\], got \[5\]"),
        "bias 2-D": (lambda: qg.linear_q4_0(x, wq, b[:, None]), r"bias must have shape \[8\]"),
        "bias dtype": (lambda: qg.linear_q4_0(x, wq, b.int()), r"bias must be float32, float16 or bfloat16"),
        "bias number": (lambda: qg.linear_q4_0(x, wq, 1.0), r"bias must be a NumPy"),
        "K not /32": (lambda: qg.linear_q4_0(torch.ones(2, 80), wq), r"K=80 \(x\.shape\[-1\]\) is not a multiple"),
        "K differs": (lambda: qg.linear_q4_0(torch.ones(2, 96), wq), r"weight_q has 2 blocks per row \(K=64\)"),
        "x int32": (lambda: qg.linear_q4_0(x.int(), wq), r"x must be float32, float16 or bfloat16, got int32"),
        "x float64": (lambda: qg.linear_q4_0(x.double(), wq), r"x must be float32, .* got float64"),
        "x 0-d": (lambda: qg.linear_q4_0(x[0, 0], wq), r"got a 0-d array"),
        "x 9-d": (lambda: qg.linear_q4_0(x.reshape(1, 1, 1, 1, 1, 1, 1, 2, 64), wq), r"9 dimensions"),
        "weight dtype": (lambda: qg.linear_q4_0(x, torch.ones(8, 2, 18)), r"weight_q must be uint8"),
        "weight 1-D": (lambda: qg.linear_q4_0(x, wq.reshape(-1)), r"weight_q must have shape \[\.\.\., K//32, 18\]"),
        "weight NumPy": (lambda: qg.linear_q4_0(x, wq.numpy()), r"one framework"),
        "bias NumPy": (lambda: qg.linear_q4_0(x, wq, b.numpy()), r"one framework"),
        "weight None": (lambda: qg.linear_q4_0(x, None), r"weight_q must be a NumPy"),
        "x requires grad": (lambda: qg.linear_q4_0(x.clone().requires_grad_(), wq), r"x requires grad"),
        "bias requires grad": (lambda: qg.linear_q4_0(x, wq, torch.nn.Parameter(b)), r"bias requires grad"),
    }
    fast = {}
    for name, (call, message) in cases.items():
        fast[name] = _outcome(call)
        kind, text = fast[name]
        assert isinstance(kind, type) and issubclass(kind, Exception), name
        assert text.startswith("qg.linear_q4_0: ") and re.search(message, text), (name, text)
    # The core's checks behind the entry, not only the steps, raised some of them.
    assert entry.calls.count("raised") >= 5
    entry.off()
    for name, (call, _) in cases.items():
        assert _outcome(call) == fast[name], name


@needs_torch_cuda
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("lead", LEADS, ids=str)
def test_cuda_entry_is_byte_identical_to_the_steps(entry, rng, dtype, lead):
    x, wq, b = _inputs(rng, lead, dtype, "cuda")
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())  # the inputs were made on the default stream
    with torch.cuda.stream(stream):  # the entry runs on torch's current stream
        y = qg.linear_q4_0(x, wq, b)
    stream.synchronize()
    assert entry.last() == "taken"
    assert y.is_cuda and y.dtype == x.dtype and tuple(y.shape) == (*lead, M)
    y_cpu = qg.linear_q4_0(x.cpu(), wq.cpu(), b.cpu())
    torch.testing.assert_close(y.cpu().float(), y_cpu.float(), rtol=1e-5 if dtype == "float32" else 1e-2, atol=1e-5)
    entry.off()
    assert _outcome(lambda: qg.linear_q4_0(x, wq, b)) == _outcome(lambda: y)


@needs_torch_cuda
def test_cuda_device_mismatch_is_the_steps_error(entry, rng):
    x, wq, b = _inputs(rng, (2,), "float32", "cuda")
    fast = _outcome(lambda: qg.linear_q4_0(x, wq.cpu(), b))
    assert fast[0] is ValueError and "weight_q is on cpu" in fast[1]
    entry.off()
    assert _outcome(lambda: qg.linear_q4_0(x, wq.cpu(), b)) == fast


@pytest.mark.parametrize("relu", [False, True], ids=["linear", "relu"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_quantized_linear_q4_0_takes_the_entry(entry, rng, dtype, relu):
    """QuantizedLinear(q4_0)'s forward makes the same one core call (relu in
    the epilogue), with the same bytes as its own two steps."""
    lin = torch.nn.Linear(K, M).to(getattr(torch, dtype))
    import qg.torch as qgt

    layer = qgt.QuantizedLinear.from_linear(lin, weight_format="q4_0", activation="relu" if relu else None)
    x, _, _ = _inputs(rng, (2, 3), dtype)
    with torch.no_grad():
        fast, steps = entry.then_steps(lambda: layer(x))
    assert fast == steps
    if relu:
        assert (layer(x).float() >= 0).all()


def _int8_layer(dtype, relu, device="cpu", bias=True):
    import qg.torch as qgt

    lin = torch.nn.Linear(K, M, bias=bias).to(device, getattr(torch, dtype))
    return qgt.QuantizedLinear.from_linear(lin, weight_format="int8", activation="relu" if relu else None)


@pytest.mark.parametrize("relu", [False, True], ids=["linear", "relu"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("lead", [(2, 3), (1,), (0,)], ids=str)
@pytest.mark.parametrize("bias", [True, False], ids=["bias", "no_bias"])
def test_quantized_linear_int8_takes_the_entry(entry_int8, rng, dtype, relu, lead, bias):
    """QuantizedLinear(int8)'s forward quantizes x per token and runs the int8
    GEMM in one core call, with the same bytes as its own two steps
    (quantize_tensor per row, then the GEMM with both scales in its epilogue)."""
    layer = _int8_layer(dtype, relu, bias=bias)
    x, _, _ = _inputs(rng, lead, dtype)
    with torch.no_grad():
        fast, steps = entry_int8.then_steps(lambda: layer(x))
    assert fast == steps
    assert fast[1] == (*lead, M)


def test_quantized_linear_int8_entry_declines_what_is_not_plain(entry_int8, rng):
    """A float16 weight scale (after module.half()) is the steps' to convert:
    the entry declines and the steps give the result."""
    layer = _int8_layer("float32", False)
    x, _, _ = _inputs(rng, (3,), "float32")
    layer.weight_scale = layer.weight_scale.half()
    with torch.no_grad():
        declined, steps = entry_int8.then_steps(lambda: layer(x), expect="declined")
        assert declined == steps


def test_quantized_linear_int8_entry_under_autograd(entry_int8, rng):
    """With x requiring grad the forward (inside the layer's autograd
    function) still makes the one call, and the input gradient flows."""
    layer = _int8_layer("float32", True)
    x, _, _ = _inputs(rng, (3,), "float32")
    xg = x.clone().requires_grad_(True)
    y = layer(xg)
    assert entry_int8.last() == "taken"
    with torch.no_grad():
        assert torch.equal(y.detach(), layer(x))
    y.sum().backward()
    assert xg.grad is not None and xg.grad.shape == x.shape


@needs_torch_cuda
@pytest.mark.parametrize("dtype", DTYPES)
def test_cuda_quantized_linear_int8_takes_the_entry(entry_int8, rng, dtype):
    layer = _int8_layer(dtype, True, "cuda")
    x, _, _ = _inputs(rng, (5,), dtype, "cuda")
    with torch.no_grad():
        fast, steps = entry_int8.then_steps(lambda: layer(x))
    assert fast == steps
