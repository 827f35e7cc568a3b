# SPDX-License-Identifier: MIT
"""Bad input gives a precise Python exception whose message starts with the
function's name (reliability.md section 8), and explain()."""
from __future__ import annotations

import re

import numpy as np
import pytest

import qg
from conftest import CUDA_FRAMEWORKS, HAS_CUPY, HAS_JAX, HAS_TORCH, Framework, needs_jax, needs_torch

Q = {"q4_0": qg.quantize_q4_0, "q8_0": qg.quantize_q8_0, "q8_1": qg.quantize_q8_1}
DQ = {"q4_0": qg.dequantize_q4_0, "q8_0": qg.dequantize_q8_0, "q8_1": qg.dequantize_q8_1}
NB = {"q4_0": 18, "q8_0": 34, "q8_1": 36}
GEMM = "qg.gemm_q4_0_q8_1: "


def raises(exc, prefix, *fragments):
    """pytest.raises + the message starts with `prefix` and holds every fragment."""

    class _Ctx:
        def __enter__(self):
            self.cm = pytest.raises(exc)
            self.info = self.cm.__enter__()
            return self.info

        def __exit__(self, *e):
            r = self.cm.__exit__(*e)
            msg = str(self.info.value)
            assert msg.startswith(prefix), f"message {msg!r} does not start with {prefix!r}"
            for f in fragments:
                assert f in msg, f"{f!r} not in {msg!r}"
            return r

    return _Ctx()


@pytest.fixture
def wa():
    rng = np.random.default_rng(5)
    w = rng.standard_normal((4, 64)).astype(np.float32)
    a = rng.standard_normal((3, 64)).astype(np.float32)
    return qg.quantize_q4_0(w), qg.quantize_q8_1(a)


# ------------------------------------------------------------------- dtypes
@pytest.mark.parametrize("fmt", list(Q))
@pytest.mark.parametrize("dtype", [np.float64, np.int32, np.uint8, np.int8, np.uint16])
def test_quantize_wrong_dtype(fmt, dtype):
    x = np.ones((2, 64), dtype)
    with raises(TypeError, f"qg.quantize_{fmt}: ", "float32", np.dtype(dtype).name):
        Q[fmt](x)


@needs_torch
@pytest.mark.parametrize("fmt", list(Q))
def test_quantize_wrong_dtype_torch(fmt):
    import torch

    with raises(TypeError, f"qg.quantize_{fmt}: ", "float64"):
        Q[fmt](torch.ones(2, 64, dtype=torch.float64))


@pytest.mark.parametrize("fmt", list(DQ))
@pytest.mark.parametrize("dtype", [np.float32, np.int8, np.uint16])
def test_dequantize_wrong_dtype(fmt, dtype):
    with raises(TypeError, f"qg.dequantize_{fmt}: ", "uint8", np.dtype(dtype).name):
        DQ[fmt](np.zeros((2, 2, NB[fmt]), dtype))


def test_gemm_float_weight(wa):
    wq, aq = wa
    with raises(TypeError, GEMM, "weight_q", "uint8", "float32"):
        qg.gemm_q4_0_q8_1(np.ones((4, 2, 18), np.float32), aq)
    with raises(TypeError, GEMM, "activation_q", "uint8", "float32"):
        qg.gemm_q4_0_q8_1(wq, np.ones((3, 2, 36), np.float32))


def test_gemm_int8_packed(wa):
    wq, aq = wa
    with raises(TypeError, GEMM, "weight_q", "int8"):
        qg.gemm_q4_0_q8_1(wq.view(np.int8), aq)
    with raises(TypeError, GEMM, "activation_q", "int8"):
        qg.gemm_q4_0_q8_1(wq, aq.view(np.int8))


# ------------------------------------------------------------------- shapes
@pytest.mark.parametrize("fmt", list(Q))
@pytest.mark.parametrize("K", [1, 16, 33, 100])
def test_quantize_k_not_multiple_of_32(fmt, K):
    with raises(ValueError, f"qg.quantize_{fmt}: ", f"K={K}", "32"):
        Q[fmt](np.ones((2, K), np.float32))


def test_gemm_k_not_multiple_of_32(wa):
    with raises(ValueError, GEMM, "K=100", "32"):
        qg.gemm_q4_0_q8_1(*wa, 4, 3, 100)


def test_gemm_q8_1_as_weight(wa):
    _, aq = wa
    with raises(ValueError, GEMM, "weight_q", "18", "36"):
        qg.gemm_q4_0_q8_1(aq, aq)


def test_gemm_q4_0_as_activation(wa):
    wq, _ = wa
    with raises(ValueError, GEMM, "activation_q", "36", "18"):
        qg.gemm_q4_0_q8_1(wq, wq)


def test_gemm_block_count_mismatch(wa):
    wq, aq = wa
    with raises(ValueError, GEMM, "2 blocks", "K=64", "K=32"):
        qg.gemm_q4_0_q8_1(wq, aq[:, :1].copy())


@pytest.mark.parametrize("M,N,K,fragment", [(5, 3, 64, "M=5"), (4, 2, 64, "N=2"), (4, 3, 96, "K=96"),
                                             (4, 3, 32, "K=32")])
def test_gemm_mnk_inconsistent(wa, M, N, K, fragment):
    with raises(ValueError, GEMM, fragment) as e:
        qg.gemm_q4_0_q8_1(*wa, M, N, K)
    assert re.search(r"\b(4|3|64)\b", str(e.value)), str(e.value)  # the actual value is named too


@pytest.mark.parametrize("fmt", list(DQ))
def test_dequantize_k_mismatch(fmt):
    xq = Q[fmt](np.ones((2, 64), np.float32))
    with raises(ValueError, f"qg.dequantize_{fmt}: ", "K=96", "K=64"):
        DQ[fmt](xq, 96)
    with raises(ValueError, f"qg.dequantize_{fmt}: ", "K=48"):
        DQ[fmt](xq, 48)


@pytest.mark.parametrize("fmt", list(DQ))
def test_dequantize_wrong_last_dim(fmt):
    with raises(ValueError, f"qg.dequantize_{fmt}: ", str(NB[fmt])):
        DQ[fmt](np.zeros((2, 2, NB[fmt] + 1), np.uint8))


@pytest.mark.parametrize("fmt", list(Q))
def test_zero_dim_input(fmt):
    with raises(ValueError, f"qg.quantize_{fmt}: ", "0-d"):
        Q[fmt](np.array(1.0, np.float32))
    with raises(ValueError, f"qg.dequantize_{fmt}: "):
        DQ[fmt](np.array(1, np.uint8))
    with raises(ValueError, f"qg.dequantize_{fmt}: "):
        DQ[fmt](np.zeros(NB[fmt], np.uint8))  # 1-d: no block dimension


def test_gemm_zero_dim(wa):
    wq, aq = wa
    with raises(ValueError, GEMM):
        qg.gemm_q4_0_q8_1(np.array(1, np.uint8), aq)


# --------------------------------------------------------------- non-arrays
@pytest.mark.parametrize("bad", [[1.0] * 32, (1.0,) * 32, 3.0, None, "x"])
def test_non_array_input(bad, wa):
    with raises(TypeError, "qg.quantize_q4_0: ", "array"):
        qg.quantize_q4_0(bad)
    with raises(TypeError, "qg.dequantize_q8_1: ", "array"):
        qg.dequantize_q8_1(bad)
    with raises(TypeError, GEMM, "array"):
        qg.gemm_q4_0_q8_1(bad, wa[1])
    with raises(TypeError, GEMM, "array"):
        qg.gemm_q4_0_q8_1(wa[0], bad)


def test_bogus_convention():
    with raises(ValueError, "qg.quantize_q8_1: ", "bogus", "reference", "ggml_cuda"):
        qg.quantize_q8_1(np.ones((1, 32), np.float32), convention="bogus")


# -------------------------------------------------------------------- out=
def test_out_wrong_shape(wa):
    with raises(ValueError, GEMM, "[4, 4]", "[4, 3]"):
        qg.gemm_q4_0_q8_1(*wa, out=np.empty((4, 4), np.float32))
    with raises(ValueError, "qg.quantize_q4_0: ", "shape"):
        qg.quantize_q4_0(np.ones((2, 64), np.float32), out=np.empty((2, 2, 34), np.uint8))
    with raises(ValueError, "qg.dequantize_q4_0: ", "shape"):
        qg.dequantize_q4_0(wa[0], out=np.empty((4, 32), np.float32))


def test_out_wrong_dtype(wa):
    with raises(TypeError, GEMM, "float32", "float64"):
        qg.gemm_q4_0_q8_1(*wa, out=np.empty((4, 3), np.float64))
    with raises(TypeError, "qg.quantize_q8_1: ", "uint8", "int8"):
        qg.quantize_q8_1(np.ones((2, 64), np.float32), out=np.empty((2, 2, 36), np.int8))
    with raises(TypeError, "qg.dequantize_q4_0: ", "float32", "float16"):
        qg.dequantize_q4_0(wa[0], out=np.empty((4, 64), np.float16))


def test_out_read_only_numpy(wa):
    out = np.empty((4, 3), np.float32)
    out.flags.writeable = False
    with raises(ValueError, GEMM, "writable"):
        qg.gemm_q4_0_q8_1(*wa, out=out)
    y = np.empty((4, 64), np.float32)
    y.flags.writeable = False
    with raises(ValueError, "qg.dequantize_q4_0: ", "writable"):
        qg.dequantize_q4_0(wa[0], out=y)


def test_out_non_contiguous(wa):
    out = np.empty((4, 6), np.float32)[:, ::2]
    with raises(ValueError, GEMM, "contiguous"):
        qg.gemm_q4_0_q8_1(*wa, out=out)


def test_out_aliases_input(wa):
    """out overlapping the input being read: ValueError, not a silent wrong answer."""
    x = np.ones((2, 64), np.float32)
    buf = x.view(np.uint8).reshape(-1)[: 2 * 2 * 36].reshape(2, 2, 36)  # contiguous, inside x
    assert buf.flags.c_contiguous and np.shares_memory(buf, x)
    with raises(ValueError, "qg.quantize_q8_1: ", "overlap"):
        qg.quantize_q8_1(x, out=buf)


@needs_jax
def test_out_jax(wa):
    import jax.numpy as jnp

    with raises(TypeError, GEMM, "JAX"):
        qg.gemm_q4_0_q8_1(*wa, out=jnp.zeros((4, 3), jnp.float32))
    with raises(TypeError, "qg.quantize_q4_0: ", "JAX"):
        qg.quantize_q4_0(np.ones((2, 64), np.float32), out=jnp.zeros((2, 2, 18), jnp.uint8))


@needs_torch
def test_out_requires_grad(wa):
    import torch

    out = torch.empty((4, 3), requires_grad=True)
    with raises(ValueError, GEMM, "grad"):
        qg.gemm_q4_0_q8_1(torch.from_numpy(wa[0]), torch.from_numpy(wa[1]), out=out)


def test_out_not_an_array(wa):
    with raises(TypeError, GEMM, "array"):
        qg.gemm_q4_0_q8_1(*wa, out=[[0.0] * 3] * 4)


# ------------------------------------------------------------------ devices
def test_weight_and_activation_on_different_devices(wa):
    if not CUDA_FRAMEWORKS:
        pytest.skip(f"needs a CUDA framework qg can use ({qg.cuda_unavailable_reason()})")
    f = Framework(CUDA_FRAMEWORKS[0])
    wq, aq = wa
    # A NumPy operand with another framework's: rejected as mixed kinds.
    with raises(TypeError, GEMM, "numpy", f.kind, "one framework"):
        qg.gemm_q4_0_q8_1(wq, f.to(aq))
    with raises(TypeError, GEMM, "numpy", f.kind, "one framework"):
        qg.gemm_q4_0_q8_1(f.to(wq), aq)
    # One framework, two devices.
    if f.kind in ("torch", "jax"):
        cpu = Framework(f"{f.kind}-cpu")
        with raises(ValueError, GEMM, "cpu", "cuda"):
            qg.gemm_q4_0_q8_1(cpu.to(wq), f.to(aq))
        with raises(ValueError, GEMM, "cuda", "cpu"):
            qg.gemm_q4_0_q8_1(f.to(wq), cpu.to(aq))
    if f.kind != "jax":
        with raises(ValueError, GEMM, "cuda", "cpu"):
            qg.gemm_q4_0_q8_1(f.to(wq), f.to(aq), out=np.empty((4, 3), np.float32))


def _gpu_array():
    """A CUDA array from any installed framework, or None."""
    if HAS_TORCH:
        import torch

        if torch.cuda.is_available():
            return torch.ones((2, 64), device="cuda")
    if HAS_CUPY:
        try:
            import cupy

            return cupy.ones((2, 64), dtype=cupy.float32)
        except Exception:  # noqa: BLE001
            pass
    if HAS_JAX:
        import jax

        try:
            return jax.device_put(np.ones((2, 64), np.float32), jax.devices("gpu")[0])
        except RuntimeError:
            pass
    return None


def test_cuda_array_in_cpu_only_build():
    if qg.build_info()["cuda_built"]:
        pytest.skip("this qg build has the CUDA backend")
    x = _gpu_array()
    if x is None:
        pytest.skip("no GPU framework present to make a CUDA array")
    with raises(RuntimeError, "qg.quantize_q4_0: ", "CUDA", "pip install"):
        qg.quantize_q4_0(x)


# -------------------------------------------------------------------- explain
def _candidate_names(e):
    return [c.split(":", 1)[0].strip() for c in e.candidates]


def test_explain_gemm(wa):
    e = qg.explain(qg.gemm_q4_0_q8_1, *wa)
    assert isinstance(e, qg.Explanation)
    assert e.op == "qg.gemm_q4_0_q8_1"
    names = _candidate_names(e)
    assert e.chosen in names
    assert e.chosen in ("cpu_avx512_vnni", "cpu_avx_vnni", "cpu_avx2", "cpu_scalar"), e.chosen
    text = str(e)
    assert text.splitlines()[0] == f"qg.gemm_q4_0_q8_1 (q4_0 x q8_1 on cpu): {e.chosen}"
    assert e.problem == "q4_0 x q8_1 on cpu"
    for n in names:
        assert n in text
    assert "cpu_scalar" in names  # the portable fallback is always listed
    assert qg.explain("gemm_q4_0_q8_1", *wa).chosen == e.chosen
    assert qg.explain("qg.gemm_q4_0_q8_1", *wa).chosen == e.chosen


def test_explain_gemm_takes_a_panel_kernel_from_four_activation_rows():
    # Per ISA, a tile kernel for decode (N <= 3) and a panel kernel from N = 4;
    # on AMX CPUs the AMX panel passes from N = 16.
    rng = np.random.default_rng(6)
    w = qg.quantize_q4_0(rng.standard_normal((20, 64)).astype(np.float32))
    feats = set(qg.build_info()["cpu_features"])
    avx2 = {"avx2", "fma", "f16c"} <= feats
    isa = "avx512_vnni" if avx2 and "avx512_vnni" in feats else "avx2" if avx2 else None
    for n, panel in ((3, False), (4, True), (15, True), (21, True)):
        a = qg.quantize_q8_1(rng.standard_normal((n, 64)).astype(np.float32))
        e = qg.explain(qg.gemm_q4_0_q8_1, w, a)
        if "amx_int8" in feats and n >= 16:
            assert e.chosen == "cpu_amx", (n, str(e))
        elif isa is None:
            assert e.chosen == "cpu_scalar", e.chosen
        elif isa == "avx2" and "avx_vnni" in feats:
            assert e.chosen == "cpu_avx_vnni" + ("_panel" if panel else ""), (n, str(e))
        else:
            assert e.chosen == f"cpu_{isa}" + ("_panel" if panel else ""), (n, str(e))
        if not panel:
            assert any(c.startswith("cpu_avx512_vnni_panel: skipped") for c in e.candidates), str(e)


@pytest.mark.parametrize("fmt", list(Q))
def test_explain_quantize_dequantize(fmt):
    x = np.ones((2, 64), np.float32)
    for op, arg in ((Q[fmt], x), (DQ[fmt], Q[fmt](x))):
        e = qg.explain(op, arg)
        assert e.op == f"qg.{op.__name__}"
        assert e.chosen in _candidate_names(e)
        assert e.chosen.startswith("cpu_")
        assert e.chosen in str(e)


def test_explain_framework_arrays(fw, wa):
    e = qg.explain(qg.gemm_q4_0_q8_1, fw.to(wa[0]), fw.to(wa[1]))
    assert e.chosen in _candidate_names(e)
    if fw.is_cuda:
        assert e.chosen in ("cuda_gemv_bulk", "cuda_gemv_mma", "cuda_gemv_ring", "cuda_mmvq", "cuda_wgmma", "cuda_wgmma_f16", "cuda_wgmma_folded", "cuda_mma", "cuda_dp4a_tiled", "cuda_generic"), e.chosen
    else:
        assert e.chosen in (
            "cpu_amx",
            "cpu_avx512_vnni_panel",
            "cpu_avx512_vnni",
            "cpu_avx_vnni_panel",
            "cpu_avx_vnni",
            "cpu_avx2_panel",
            "cpu_avx2",
            "cpu_scalar",
        ), e.chosen


def _same_error(call, explain_call):
    with pytest.raises(Exception) as e1:
        call()
    with pytest.raises(Exception) as e2:
        explain_call()
    assert type(e1.value) is type(e2.value), (e1.value, e2.value)
    return str(e1.value), str(e2.value)


@pytest.mark.parametrize("case", ["k50", "f64", "q8_1_weight", "block_mismatch", "zero_d", "int8"])
def test_explain_raises_like_the_call(case, wa):
    wq, aq = wa
    if case == "k50":
        x = np.ones((2, 50), np.float32)
        m1, m2 = _same_error(lambda: qg.quantize_q4_0(x), lambda: qg.explain(qg.quantize_q4_0, x))
    elif case == "f64":
        x = np.ones((2, 64), np.float64)
        m1, m2 = _same_error(lambda: qg.quantize_q8_1(x), lambda: qg.explain(qg.quantize_q8_1, x))
    elif case == "q8_1_weight":
        m1, m2 = _same_error(lambda: qg.gemm_q4_0_q8_1(aq, aq), lambda: qg.explain(qg.gemm_q4_0_q8_1, aq, aq))
    elif case == "block_mismatch":
        a1 = aq[:, :1].copy()
        m1, m2 = _same_error(lambda: qg.gemm_q4_0_q8_1(wq, a1), lambda: qg.explain(qg.gemm_q4_0_q8_1, wq, a1))
    elif case == "zero_d":
        x = np.array(1.0, np.float32)
        m1, m2 = _same_error(lambda: qg.quantize_q4_0(x), lambda: qg.explain(qg.quantize_q4_0, x))
    else:
        m1, m2 = _same_error(lambda: qg.dequantize_q4_0(wq.view(np.int8)),
                             lambda: qg.explain(qg.dequantize_q4_0, wq.view(np.int8)))
    assert m1 == m2  # the core's checks: the very same message


@pytest.mark.parametrize("which", [0, 1])
def test_explain_non_array_message_names_qg(which, wa):
    """explain(op, <list>) raises TypeError whose message starts with 'qg.'
    for every argument position (like the call itself)."""
    args = list(wa)
    args[which] = [1, 2, 3]
    with pytest.raises(TypeError) as e:
        qg.explain(qg.gemm_q4_0_q8_1, *args)
    assert str(e.value).startswith("qg."), str(e.value)


def test_explain_bad_op():
    with raises(ValueError, "qg.explain: ", "nope"):
        qg.explain("nope", np.ones((1, 32), np.float32))
    with raises(ValueError, "qg.explain: "):
        qg.explain(qg.gemm_q4_0_q8_1, np.zeros((1, 1, 18), np.uint8))  # one array for a 2-array op


# ------------------------------------------------------------------- runtime
def test_runtime_introspection():
    b = qg.build_info()
    for key in ("version", "cuda_built", "cuda_runtime_version", "cuda_archs", "cpu_features", "cpu_threads"):
        assert key in b
    assert qg.__version__ == b["version"]
    assert isinstance(qg.cuda_available(), bool)
    assert isinstance(qg.cuda_devices(), list)
    if qg.cuda_available():
        assert qg.cuda_unavailable_reason() == "" and qg.cuda_devices()
    else:
        assert qg.cuda_unavailable_reason() != "" and qg.cuda_devices() == []
    assert qg.cpu_threads() >= 1


# --------------------------------------------- unbranded errors (each names fn, argument, fix)
@pytest.mark.parametrize("fmt", list(Q))
@pytest.mark.parametrize("dtype", [">f4", ">f2"])
def test_quantize_big_endian(fmt, dtype):
    x = np.ones((2, 64), dtype)
    with raises(TypeError, f"qg.quantize_{fmt}: ", "x has non-native byte order", dtype, "astype"):
        Q[fmt](x)
    with raises(TypeError, f"qg.quantize_{fmt}: ", "non-native"):
        qg.explain(Q[fmt], x)


def test_dequantize_gemm_non_native_and_exotic_dtypes(wa):
    wq, aq = wa
    with raises(TypeError, "qg.dequantize_q4_0: ", "xq must be uint8 (packed q4_0 blocks), got object"):
        qg.dequantize_q4_0(wq.astype(object))
    with raises(TypeError, GEMM, "activation_q must be uint8 (packed q8_1 blocks)", "complex64"):
        qg.gemm_q4_0_q8_1(wq, aq.astype(np.complex64))


@pytest.mark.parametrize("fmt", list(Q))
def test_quantize_float8_and_object(fmt):
    ml_dtypes = pytest.importorskip("ml_dtypes")
    for dt, name in ((ml_dtypes.float8_e4m3fn, "float8_e4m3fn"), (object, "object"), (np.complex64, "complex64"),
                     (np.bool_, "bool"), ("M8[s]", "datetime64[s]")):
        x = np.zeros((2, 64), dt)
        with raises(TypeError, f"qg.quantize_{fmt}: ", "x must be float32, float16 or bfloat16", f"got {name}"):
            Q[fmt](x)


def test_quantize_masked_array():
    x = np.ma.array(np.ones((2, 64), np.float32), mask=np.zeros((2, 64), bool))
    with raises(TypeError, "qg.quantize_q4_0: ", "x is a NumPy masked array", "x.filled("):
        qg.quantize_q4_0(x)


@pytest.mark.parametrize("M,N,K,exc,fragments", [
    (2**70, None, None, ValueError, ("M=1180591620717411303424", "too large", "2**62")),
    (-2, None, None, ValueError, ("M=-2", "negative", "None to infer")),
    (None, None, -32, ValueError, ("K=-32", "negative")),
    (None, -1, None, ValueError, ("N=-1", "negative")),
    (4.7, None, None, TypeError, ("M must be an int or None", "float 4.7")),
    ("4", None, None, TypeError, ("M must be an int or None", "str '4'")),
    (None, True, None, TypeError, ("N must be an int or None", "bool")),
    (None, None, 64.0, TypeError, ("K must be an int or None", "float")),
], ids=["M_2e70", "M_neg", "K_neg", "N_neg", "M_float", "M_str", "N_bool", "K_float"])
def test_gemm_bad_sizes(wa, M, N, K, exc, fragments):
    with raises(exc, GEMM, *fragments):
        qg.gemm_q4_0_q8_1(*wa, M, N, K)


def test_sizes_accept_integer_likes(wa):
    np.testing.assert_array_equal(qg.gemm_q4_0_q8_1(*wa, np.int64(4), np.int32(3), np.uint16(64)),
                                  qg.gemm_q4_0_q8_1(*wa))


@pytest.mark.parametrize("K,exc,fragment", [(-5, ValueError, "K=-5 is negative"), (2**70, ValueError, "too large"),
                                            (64.0, TypeError, "K must be an int or None"),
                                            ("64", TypeError, "K must be an int or None")])
def test_dequantize_bad_k(wa, K, exc, fragment):
    with raises(exc, "qg.dequantize_q4_0: ", fragment):
        qg.dequantize_q4_0(wa[0], K)


def test_set_cpu_threads_bad_values():
    before = qg.cpu_threads()
    try:
        with raises(ValueError, "qg.set_cpu_threads: ", "threads=2147483648", "between 0", "4096"):
            qg.set_cpu_threads(2**31)
        with raises(ValueError, "qg.set_cpu_threads: ", "threads=-1", "between 0"):
            qg.set_cpu_threads(-1)
        with raises(TypeError, "qg.set_cpu_threads: ", "threads must be an int", "str"):
            qg.set_cpu_threads("2")
        with raises(TypeError, "qg.set_cpu_threads: ", "threads must be an int", "float"):
            qg.set_cpu_threads(2.0)
        with raises(TypeError, "qg.set_cpu_threads: ", "bool"):
            qg.set_cpu_threads(True)
        assert qg.cpu_threads() == before  # nothing changed by the refused calls
        qg.set_cpu_threads(np.int64(2))  # integer-likes are fine
        assert qg.cpu_threads() == 2
    finally:
        qg.set_cpu_threads(before)


def test_quantize_8d_input_result_would_be_9d():
    x = np.ones((1,) * 7 + (32,), np.float32)
    with raises(ValueError, "qg.quantize_q4_0: ", "x has 8 dimensions", "would have 9", "reshape"):
        qg.quantize_q4_0(x)
    assert qg.quantize_q4_0(x[0]).shape == (1,) * 6 + (1, 18)  # 7-d in, 8-d out: fine


@needs_torch
def test_quantize_8d_torch_input():
    import torch

    with raises(ValueError, "qg.quantize_q8_1: ", "x has 8 dimensions", "would have 9"):
        qg.quantize_q8_1(torch.ones((1,) * 7 + (32,)))


@pytest.mark.parametrize("op", [3, None, np.sum, [qg.quantize_q4_0], {"op": 1}],
                         ids=["int", "None", "np.sum", "list", "dict"])
def test_explain_wrong_op_type(op):
    with raises(TypeError, "qg.explain: ", "op must be one of qg's", "qg.gemm_q4_0_q8_1"):
        qg.explain(op, np.ones((1, 32), np.float32))


@pytest.mark.parametrize("bad_out,exc,fragments", [
    ("abc", TypeError, ("out must be a NumPy, PyTorch, CuPy or JAX array", "str")),
    ([[0.0] * 3] * 4, TypeError, ("out must be a NumPy",)),
    (np.empty((4, 3), ">f4"), TypeError, ("out must be float32", "non-native", ">f4")),
    (np.empty((4, 3), object), TypeError, ("out must be float32, got object",)),
    (np.empty((4, 3), np.complex64), TypeError, ("out must be float32, got complex64",)),
    (np.empty((4, 3), np.float64), TypeError, ("out must be float32, got float64",)),
], ids=["str", "list", "big_endian", "object", "complex", "float64"])
def test_out_of_wrong_type(wa, bad_out, exc, fragments):
    with raises(exc, GEMM, *fragments):
        qg.gemm_q4_0_q8_1(*wa, out=bad_out)


def test_out_bfloat16_numpy():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    with raises(TypeError, "qg.quantize_q4_0: ", "out must be uint8, got bfloat16"):
        qg.quantize_q4_0(np.ones((2, 64), np.float32), out=np.empty((2, 2, 18), ml_dtypes.bfloat16))
    with raises(TypeError, "qg.quantize_q4_0: ", "out must be uint8, got float8_e4m3fn"):
        qg.quantize_q4_0(np.ones((2, 64), np.float32), out=np.empty((2, 2, 18), ml_dtypes.float8_e4m3fn))


@pytest.mark.parametrize("stream,exc,fragment", [
    ("abc", TypeError, "stream must be an int handle"),
    (1.5, TypeError, "stream must be an int handle"),
    (object(), TypeError, "torch.cuda.Stream or a cupy.cuda.Stream"),
    (True, TypeError, "got bool"),
    (-1, ValueError, "stream=-1 is not a valid cudaStream_t"),
    (2**64, ValueError, "is not a valid cudaStream_t"),
], ids=["str", "float", "object", "bool", "negative", "2**64"])
def test_stream_of_wrong_type_on_cpu(wa, stream, exc, fragment):
    """Checked on every device, even the CPU where no stream is used."""
    with raises(exc, GEMM, fragment):
        qg.gemm_q4_0_q8_1(*wa, stream=stream)
    with raises(exc, "qg.quantize_q4_0: ", fragment):
        qg.quantize_q4_0(np.ones((2, 64), np.float32), stream=stream)
    if HAS_TORCH:
        import torch

        with raises(exc, "qg.dequantize_q4_0: ", fragment):
            qg.dequantize_q4_0(torch.from_numpy(wa[0]), stream=stream)


def test_stream_int_accepted_on_cpu(wa):
    np.testing.assert_array_equal(qg.gemm_q4_0_q8_1(*wa, stream=0), qg.gemm_q4_0_q8_1(*wa))


@pytest.mark.parametrize("conv", [1, None, b"reference", ["reference"]], ids=["int", "None", "bytes", "list"])
def test_convention_of_wrong_type(conv):
    with raises(TypeError, "qg.quantize_q8_1: ", "convention must be a str", "'reference' or 'ggml_cuda'"):
        qg.quantize_q8_1(np.ones((1, 32), np.float32), convention=conv)


def test_core_argument_error_is_branded(monkeypatch):
    """The last line of defence: an array nanobind cannot convert gets qg's name
    (on the generic path, which NumPy arrays take where the fast one declines)."""
    from qg import _api, _frameworks

    monkeypatch.delitem(_api._FAST_TYPES, np.ndarray)
    monkeypatch.setattr(_frameworks, "prepare_input", lambda x, *a, **k: ([1.0] * 32, False))
    with raises(TypeError, "qg.quantize_q4_0: ", "x could not be passed to qg through DLPack"):
        qg.quantize_q4_0(np.ones((1, 32), np.float32))


# ------------------------------------------------------------- torch specials
@needs_torch
@pytest.mark.filterwarnings("ignore:Sparse CSR tensor support is in beta")
@pytest.mark.parametrize("layout", ["coo", "csr"])
def test_torch_sparse_tensors(wa, layout):
    import torch

    def sparse(t):
        return t.to_sparse() if layout == "coo" else t.to_sparse_csr()

    x = torch.ones(2, 64)
    with raises(TypeError, "qg.quantize_q4_0: ", "x is a torch.sparse_", "x.to_dense()"):
        qg.quantize_q4_0(sparse(x))
    wq, aq = torch.from_numpy(wa[0]), torch.from_numpy(wa[1])
    with raises(TypeError, "qg.dequantize_q4_0: ", "xq is a torch.sparse_coo", "xq.to_dense()"):
        qg.dequantize_q4_0(wq.to_sparse())  # packed arrays are 3-d: COO only
    with raises(TypeError, GEMM, "weight_q is a torch.sparse_coo", "weight_q.to_dense()"):
        qg.gemm_q4_0_q8_1(wq.to_sparse(), aq)
    with raises(TypeError, GEMM, "activation_q is a torch.sparse_coo", "activation_q.to_dense()"):
        qg.gemm_q4_0_q8_1(wq, aq.to_sparse())
    with raises(TypeError, GEMM, "out is a torch.sparse_", "out.to_dense()"):
        qg.gemm_q4_0_q8_1(wq, aq, out=sparse(torch.zeros(4, 3)))


@needs_torch
def test_torch_nested_and_quantized_tensors():
    import warnings

    import torch

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        nested = torch.nested.nested_tensor([torch.ones(64), torch.ones(64)])
        quantized = torch.quantize_per_tensor(torch.ones(2, 64), 0.1, 0, torch.quint8)
    with raises(TypeError, "qg.quantize_q4_0: ", "x is a nested torch tensor", "to_padded_tensor"):
        qg.quantize_q4_0(nested)
    with raises(TypeError, "qg.quantize_q4_0: ", "x is a quantized torch tensor", "x.dequantize()"):
        qg.quantize_q4_0(quantized)


@needs_torch
@pytest.mark.parametrize("fmt", list(Q))
def test_torch_negated_view_quantize_reads_values_as_seen(fmt):
    import torch

    rng = np.random.default_rng(11)
    print("seed=11")
    plain = torch.from_numpy(rng.standard_normal((4, 96)).astype(np.float32))
    neg = plain._neg_view()
    assert neg.is_neg() and torch.equal(neg, -plain)
    want = Q[fmt](-plain.numpy())
    np.testing.assert_array_equal(Q[fmt](neg).numpy(), want)
    np.testing.assert_array_equal(Q[fmt](neg, out=torch.empty(4, 3, NB[fmt], dtype=torch.uint8)).numpy(), want)
    np.testing.assert_array_equal(Q[fmt](neg[:, :64]).numpy(), Q[fmt](-plain.numpy()[:, :64]))  # neg + strided
    assert not torch.equal(Q[fmt](neg), Q[fmt](plain))


@needs_torch
def test_torch_negated_view_gemm_reads_values_as_seen(wa):
    import torch

    wq, aq = torch.from_numpy(wa[0]), torch.from_numpy(wa[1])
    for w, a in ((wq._neg_view(), aq), (wq, aq._neg_view()), (wq._neg_view(), aq._neg_view())):
        assert w.is_neg() or a.is_neg()
        want = qg.gemm_q4_0_q8_1(w.resolve_neg().numpy(), a.resolve_neg().numpy())  # the bytes as seen
        np.testing.assert_array_equal(qg.gemm_q4_0_q8_1(w, a).numpy(), want)
    np.testing.assert_array_equal(qg.dequantize_q8_1(aq._neg_view()).numpy(), qg.dequantize_q8_1((-aq).numpy()))


@needs_torch
def test_torch_negated_out_rejected(wa):
    import torch

    wq, aq = torch.from_numpy(wa[0]), torch.from_numpy(wa[1])
    out = torch.zeros(4, 3)._neg_view()
    with raises(ValueError, GEMM, "out is a lazily negated torch view", "pass a plain tensor"):
        qg.gemm_q4_0_q8_1(wq, aq, out=out)
    assert torch.equal(out, torch.zeros(4, 3))  # untouched
