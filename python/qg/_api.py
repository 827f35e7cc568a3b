# SPDX-License-Identifier: MIT
"""qg's public functions. Each one: find the caller's framework and device,
let the core compute the result's shape (and check the arguments), allocate
the result with the caller's framework, run on the caller's stream."""
from __future__ import annotations

from dataclasses import dataclass, field

from . import _frameworks as fw
from . import _qg

Q4_0, Q8_0, Q8_1 = 0, 1, 2
_CONVENTIONS = {"reference": 0, "ggml_cuda": 1}


def _run_quantize(fmt: int, fn: str, x, out, stream, convention: str = "reference"):
    if convention not in _CONVENTIONS:
        raise ValueError(f"{fn}: convention must be 'reference' or 'ggml_cuda', got {convention!r}")
    w = fw.where(x, fn)
    xin, bf16 = fw.prepare_input(x, w)
    with fw.device_context(w):
        shape = _qg.quantize_shape(fmt, xin, bf16)
        result = fw.check_out(out, w, fn) if out is not None else fw.empty(w, shape, "uint8")
        s = fw.stream_of(w, stream)
        _qg.quantize(fmt, xin, result, s, _CONVENTIONS[convention], bf16)
    return fw.finish(result, w, s)


def _run_dequantize(fmt: int, fn: str, xq, K, out, stream):
    w = fw.where(xq, fn)
    xin, _ = fw.prepare_input(xq, w)
    k = -1 if K is None else int(K)
    with fw.device_context(w):
        shape = _qg.dequantize_shape(fmt, xin, k)
        result = fw.check_out(out, w, fn) if out is not None else fw.empty(w, shape, "float32")
        s = fw.stream_of(w, stream)
        _qg.dequantize(fmt, xin, k, result, s)
    return fw.finish(result, w, s)


def quantize_q4_0(x, *, out=None, stream=None):
    """Quantize float values to Q4_0 blocks (ggml's quantize_row_q4_0_ref, byte for byte).

    x: float32, float16 or bfloat16 array of shape [..., K], K a multiple of 32.
    Returns uint8 [..., K//32, 18]: per block an fp16 scale d and 16 bytes of
    4-bit codes (element j in the low nibble of byte j, element j+16 in the high).
    """
    return _run_quantize(Q4_0, "qg.quantize_q4_0", x, out, stream)


def quantize_q8_0(x, *, out=None, stream=None):
    """Quantize to Q8_0 blocks (ggml's quantize_row_q8_0_ref): uint8 [..., K//32, 34]."""
    return _run_quantize(Q8_0, "qg.quantize_q8_0", x, out, stream)


def quantize_q8_1(x, *, convention: str = "reference", out=None, stream=None):
    """Quantize to Q8_1 blocks: uint8 [..., K//32, 36] = fp16 d, fp16 s, 32 int8 codes.

    convention="reference": ggml's quantize_row_q8_1_ref, q = roundf(x * (1/d)), s = fp16(d * sum q).
    convention="ggml_cuda": ggml's CUDA quantizer, q = roundf(x / d), s = fp16(sum x).
    gemm_q4_0_q8_1 does not read s, so it accepts either.
    """
    return _run_quantize(Q8_1, "qg.quantize_q8_1", x, out, stream, convention)


def dequantize_q4_0(xq, K=None, *, out=None, stream=None):
    """Q4_0 blocks uint8 [..., K//32, 18] -> float32 [..., K] (exact: code * d)."""
    return _run_dequantize(Q4_0, "qg.dequantize_q4_0", xq, K, out, stream)


def dequantize_q8_0(xq, K=None, *, out=None, stream=None):
    """Q8_0 blocks uint8 [..., K//32, 34] -> float32 [..., K]."""
    return _run_dequantize(Q8_0, "qg.dequantize_q8_0", xq, K, out, stream)


def dequantize_q8_1(xq, K=None, *, out=None, stream=None):
    """Q8_1 blocks uint8 [..., K//32, 36] -> float32 [..., K]."""
    return _run_dequantize(Q8_1, "qg.dequantize_q8_1", xq, K, out, stream)


def gemm_q4_0_q8_1(weight_q, activation_q, M=None, N=None, K=None, *, out=None, stream=None):
    """C[M, N] = W[M, K] @ A[N, K]^T with W in Q4_0 and A in Q8_1, float32 out.

    weight_q: uint8 [..., K//32, 18] (M = product of the leading dims);
    activation_q: uint8 [..., K//32, 36] (N = product of the leading dims).
    M, N, K may be omitted; when given they are checked against the shapes.
    C[m, n] = sum over blocks b of fp32(d_w) * fp32(d_a) * sum_i (w_i - 8) * a_i,
    the integer part exact; the Q8_1 sum field s is not used.
    """
    fn = "qg.gemm_q4_0_q8_1"
    w = fw.where(weight_q, fn)
    wa = fw.where(activation_q, fn)
    if (w.device, w.index) != (wa.device, wa.index):
        dev = lambda x: "cpu" if x.device == fw.CPU else f"cuda:{x.index}"  # noqa: E731
        raise ValueError(
            f"{fn}: weight_q is on {dev(w)} but activation_q is on {dev(wa)}; move both to one device"
        )
    win, _ = fw.prepare_input(weight_q, w)
    ain, _ = fw.prepare_input(activation_q, wa)
    m, n, k = (-1 if v is None else int(v) for v in (M, N, K))
    with fw.device_context(w):
        shape = _qg.gemm_q4_0_q8_1_shape(win, ain, m, n, k)
        result = fw.check_out(out, w, fn) if out is not None else fw.empty(w, shape, "float32")
        s = fw.stream_of(w, stream)
        _qg.gemm_q4_0_q8_1(win, ain, result, m, n, k, s)
    return fw.finish(result, w, s)


@dataclass
class Explanation:
    """Which implementation a call would run, and why the others were passed over."""

    op: str
    chosen: str
    candidates: list = field(default_factory=list)

    def __str__(self) -> str:
        lines = [f"{self.op}: {self.chosen}"]
        lines += [f"  {c}" for c in self.candidates]
        return "\n".join(lines)


_QUANTIZERS = {quantize_q4_0: Q4_0, quantize_q8_0: Q8_0, quantize_q8_1: Q8_1}
_DEQUANTIZERS = {dequantize_q4_0: Q4_0, dequantize_q8_0: Q8_0, dequantize_q8_1: Q8_1}


def explain(op, *arrays) -> Explanation:
    """explain(qg.gemm_q4_0_q8_1, wq, aq) -> Explanation of the implementation that would run.

    `op` is one of qg's functions (or its name); the arrays are its array
    arguments. Runs the same checks as the call and raises the same errors.
    """
    if isinstance(op, str):
        import qg

        name = op[3:] if op.startswith("qg.") else op
        if not hasattr(qg, name):
            raise ValueError(f"qg.explain: qg has no function {op!r}")
        op = getattr(qg, name)
    fn = getattr(op, "__name__", str(op))
    w = fw.where(arrays[0], f"qg.explain({fn})") if arrays else None
    prepared = [fw.prepare_input(a, fw.where(a, f"qg.explain({fn})")) for a in arrays]
    with fw.device_context(w) if w else _nullctx():
        if op in _QUANTIZERS and len(arrays) == 1:
            d = _qg.explain_quantize(_QUANTIZERS[op], prepared[0][0], prepared[0][1])
        elif op in _DEQUANTIZERS and len(arrays) == 1:
            d = _qg.explain_dequantize(_DEQUANTIZERS[op], prepared[0][0])
        elif op is gemm_q4_0_q8_1 and len(arrays) == 2:
            d = _qg.explain_gemm_q4_0_q8_1(prepared[0][0], prepared[1][0])
        else:
            raise ValueError(
                f"qg.explain: expected a qg quantize/dequantize function and one array, or "
                f"gemm_q4_0_q8_1 and two arrays; got {fn} with {len(arrays)} array(s)"
            )
    return Explanation(d["op"], d["chosen"], list(d["candidates"]))


class _nullctx:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False
