# SPDX-License-Identifier: MIT
"""NumPy arrays on the single-crossing path (qg's DLPack exchange table for
numpy.ndarray, python/src/numpy_exchange.cpp). Every call is made twice: as
it comes (plain arrays take the fast entries) and with numpy.ndarray taken
off the fast path (the generic path). Both must give the same dtype, shape
and bytes, or the same exception and message. What the table declines
(non-contiguous, non-native byte order, dtypes the core has no name for,
subclasses) must reach the generic path, and the caller's arrays are never
written."""
from __future__ import annotations

import numpy as np
import pytest

import qg
from qg import _api, _qg
from conftest import needs_ml_dtypes

ENTRIES = ("fast_quantize", "fast_dequantize", "fast_gemm", "fast_linear_q4_0", "fast_quantize_int",
           "fast_int8_matmul", "fast_quantize_tensor", "fast_linear_int4")


@pytest.fixture
def taken(monkeypatch):
    """The fast entries that returned a result (not None), in call order."""
    log: list = []

    def wrap(name):
        real = getattr(_qg, name)

        def call(*args, **kwargs):
            r = real(*args, **kwargs)
            if r is not None:
                log.append(name)
            return r

        return call

    for name in ENTRIES:
        if hasattr(_qg, name):
            monkeypatch.setattr(_qg, name, wrap(name))
    return log


def _outcome(call):
    """(dtype, shape, bytes) of each result array, or (exception type, message)."""
    try:
        r = call()
    except (TypeError, ValueError, OverflowError, NotImplementedError, MemoryError) as e:
        return type(e), str(e)
    return [(a.dtype.str, a.shape, a.tobytes()) for a in (r if isinstance(r, tuple) else (r,)) if a is not None]


def _generic(monkeypatch, call):
    with monkeypatch.context() as m:
        m.delitem(_api._FAST_TYPES, np.ndarray)
        return _outcome(call)


def _operands(rng, m=40, k=128, n=3):
    w = rng.standard_normal((m, k)).astype(np.float32)
    x = rng.standard_normal((n, k)).astype(np.float32)
    return w, x, qg.quantize_q4_0(w), qg.quantize_q8_1(x)


def test_numpy_ndarray_is_on_the_fast_path():
    assert np.ndarray in _api._FAST_TYPES


def test_plain_calls_take_the_fast_entries_with_the_generic_bytes(monkeypatch, rng, taken):
    w, x, wq, xq = _operands(rng)
    bias = rng.standard_normal(40).astype(np.float32)
    a8 = rng.integers(-128, 128, (5, 64), dtype=np.int8)
    w8 = rng.integers(-128, 128, (7, 64), dtype=np.int8)
    w4 = rng.integers(0, 256, (7, 32), dtype=np.uint8)
    s4 = rng.uniform(0.5, 2, (7, 4)).astype(np.float16)
    cases = {
        "quantize_q4_0": (lambda: qg.quantize_q4_0(w), "fast_quantize"),
        "quantize_q8_0 f16": (lambda: qg.quantize_q8_0(x.astype(np.float16)), "fast_quantize"),
        "quantize_q8_1": (lambda: qg.quantize_q8_1(x), "fast_quantize"),
        "dequantize_q4_0": (lambda: qg.dequantize_q4_0(wq), "fast_dequantize"),
        "gemm": (lambda: qg.gemm_q4_0_q8_1(wq, xq), "fast_gemm"),
        "gemm 3-D activations": (lambda: qg.gemm_q4_0_q8_1(wq, xq.reshape(1, 3, 4, 36)), "fast_gemm"),
        "linear_q4_0": (lambda: qg.linear_q4_0(x, wq, bias), "fast_linear_q4_0"),
        "linear_q4_0 f16": (lambda: qg.linear_q4_0(x.astype(np.float16), wq), "fast_linear_q4_0"),
        "int8_matmul int32": (lambda: qg.int8_matmul(a8, w8, b_layout="nk"), "fast_int8_matmul"),
        "int8_matmul f16": (lambda: qg.int8_matmul(a8, w8, 0.5, 0.25, out_dtype="float16", b_layout="nk"),
                            "fast_int8_matmul"),
        "quantize_tensor": (lambda: qg.quantize_tensor(x, granularity="channel", axis=0), "fast_quantize_tensor"),
        "quantize_tensor int4 asym": (lambda: qg.quantize_tensor(x, bits=4, scheme="asymmetric"),
                                      "fast_quantize_tensor"),
        "linear_int4": (lambda: qg.linear_int4(a8.astype(np.float32), w4, s4, group_size=16), "fast_linear_int4"),
    }
    for name, (call, entry) in cases.items():
        taken.clear()
        fast = _outcome(call)
        assert taken == [entry], (name, taken)
        assert not isinstance(fast[0], type), (name, fast)
        assert _generic(monkeypatch, call) == fast, name


def test_results_are_fresh_writable_c_arrays(rng):
    _, _, wq, xq = _operands(rng)
    y = qg.gemm_q4_0_q8_1(wq, xq)
    assert type(y) is np.ndarray and y.flags.c_contiguous and y.flags.writeable and y.flags.owndata
    del wq, xq  # the result keeps nothing of the inputs alive and is kept alive by itself
    y[:] = 1.0
    assert float(y.sum()) == y.size


def test_out_is_written_in_place_and_returned(monkeypatch, rng, taken):
    _, _, wq, xq = _operands(rng)
    want = qg.gemm_q4_0_q8_1(wq, xq)
    out = np.full((40, 3), np.nan, np.float32)
    taken.clear()
    got = qg.gemm_q4_0_q8_1(wq, xq, out=out)
    assert taken == ["fast_gemm"] and got is out
    np.testing.assert_array_equal(out, want)


def test_inputs_are_never_written_and_may_be_read_only(rng, taken):
    w, x, wq, xq = _operands(rng)
    for a in (w, x, wq, xq):
        a.flags.writeable = False
    before = [a.tobytes() for a in (w, x, wq, xq)]
    taken.clear()
    qg.quantize_q4_0(w)
    qg.gemm_q4_0_q8_1(wq, xq)
    qg.linear_q4_0(x, wq)
    assert taken == ["fast_quantize", "fast_gemm", "fast_linear_q4_0"]
    assert [a.tobytes() for a in (w, x, wq, xq)] == before


def test_what_the_table_declines_takes_the_generic_path(monkeypatch, rng, taken):
    w, x, wq, xq = _operands(rng)
    wide = np.zeros((3, 256), np.float32)
    wide[:, ::2] = x
    cases = {
        "x strided": lambda: qg.quantize_q8_1(wide[:, ::2]),
        "x Fortran order": lambda: qg.quantize_q8_1(np.asfortranarray(x)),
        "activations strided": lambda: qg.gemm_q4_0_q8_1(wq, np.stack([xq, xq], 1)[:, 0]),
        "x big-endian": lambda: qg.quantize_q8_1(x.astype(">f4")),
        "x masked": lambda: qg.quantize_q8_1(np.ma.masked_array(x)),
        "x int64": lambda: qg.quantize_q8_1(x.astype(np.int64)),
        "x bool": lambda: qg.quantize_q8_1(x > 0),
        "x complex": lambda: qg.quantize_q8_1(x.astype(np.complex64)),
        "out read-only": lambda: qg.gemm_q4_0_q8_1(wq, xq, out=_read_only(np.zeros((40, 3), np.float32))),
        "out big-endian": lambda: qg.gemm_q4_0_q8_1(wq, xq, out=np.zeros((40, 3), ">f4")),
        "int8_matmul bfloat16 result": lambda: qg.int8_matmul(np.ones((2, 32), np.int8), np.ones((3, 32), np.int8),
                                                              out_dtype="bfloat16", b_layout="nk"),
    }
    for name, call in cases.items():
        taken.clear()
        fast = _outcome(call)
        assert taken == [], (name, taken)
        assert _generic(monkeypatch, call) == fast, name


def _read_only(a):
    a.flags.writeable = False
    return a


@needs_ml_dtypes
def test_bfloat16_arrays_take_the_generic_path(monkeypatch, rng, taken):
    import ml_dtypes

    _, x, wq, _ = _operands(rng)
    xb = x.astype(ml_dtypes.bfloat16)
    for call in (lambda: qg.quantize_q8_1(xb), lambda: qg.linear_q4_0(xb, wq)):
        taken.clear()
        fast = _outcome(call)
        assert taken == []
        assert _generic(monkeypatch, call) == fast


def test_errors_match_the_generic_path(monkeypatch, rng, taken):
    w, x, wq, xq = _operands(rng)
    torch = pytest.importorskip("torch")
    cases = {
        "float64 x": lambda: qg.quantize_q8_1(x.astype(np.float64)),
        "K not /32": lambda: qg.quantize_q8_1(np.ones((2, 40), np.float32)),
        "K differs": lambda: qg.gemm_q4_0_q8_1(wq, qg.quantize_q8_1(np.ones((2, 64), np.float32))),
        "weight float": lambda: qg.gemm_q4_0_q8_1(w, xq),
        "out shape": lambda: qg.gemm_q4_0_q8_1(wq, xq, out=np.zeros((3, 40), np.float32)),
        "out dtype": lambda: qg.gemm_q4_0_q8_1(wq, xq, out=np.zeros((40, 3), np.float64)),
        "out is an input": lambda: qg.dequantize_q4_0(wq, out=wq.view(np.float32)),
        "bias shape": lambda: qg.linear_q4_0(x, wq, np.ones(5, np.float32)),
        "mixed frameworks": lambda: qg.gemm_q4_0_q8_1(wq, torch.from_numpy(xq)),
        "out of torch": lambda: qg.gemm_q4_0_q8_1(wq, xq, out=torch.zeros(40, 3)),
        "int8 K limit": lambda: qg.int8_matmul(np.ones((1, 1), np.int8), np.ones((1, 1), np.int8), b_layout="xy"),
        # NumPy's own exceptions when it cannot allocate the result, as NumPy words them
        "result of 4 TiB": lambda: qg.int8_matmul(np.zeros((2**20, 0), np.int8), np.zeros((0, 2**20), np.int8)),
        "result too big to index": lambda: qg.int8_matmul(np.zeros((2**31, 0), np.int8), np.zeros((0, 2**31), np.int8)),
        # another framework's array is never read by NumPy's table (nor refused for its view)
        "torch bias of 9 dims": lambda: qg.linear_q4_0(x, wq, torch.zeros((1,) * 8 + (40,))),
        "torch activations of 9 dims": lambda: qg.gemm_q4_0_q8_1(wq, torch.zeros((1,) * 8 + (3, 144), dtype=torch.uint8)),
        "torch out of 9 dims": lambda: qg.gemm_q4_0_q8_1(wq, xq, out=torch.zeros((1,) * 7 + (40, 3))),
    }
    for name, call in cases.items():
        fast = _outcome(call)
        assert isinstance(fast[0], type), (name, fast)
        assert _generic(monkeypatch, call) == fast, name
