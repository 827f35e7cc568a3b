#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Host overhead of qg's Python calls, beside torch references, in one run.

    python bench/host_overhead.py [--json out.json] [--device cpu|cuda|all]

For each device (the CPU always; CUDA when torch sees a GPU) and framework
(torch; numpy, jax and cupy when installed, for information) it times
back-to-back calls of

  * qg.gemm_q4_0_q8_1 at M=4096, K=14336, N=1 (decode) and at 64x64x64,
    each also with out= (a preallocated result);
  * on CUDA, qg.gemm_q4_0_q8_1 at N=16 and N=128 and qg.linear_q4_0 of
    16 fp16 tokens (the tensor-core GEMM and its re-layout pass), and
    qg.linear_q4_0 of 1 fp16 token (the quantizer and the decode GEMV);
  * qg.quantize_q8_1 of a 1 x 14336 activation (also with out=);
  * the integer family: int8_matmul of a 1 x 14336 int8 row against int8
    [4096, 14336] weights (int32, and fp32 with per-row scales),
    quantize_tensor of that row, linear_int4 (group 128), and
    QuantizedLinear's forward at 64 x 64 x 64 for its three weight formats
    (informational: two calls each, against torch.mm of the same size);
  * references, in torch: `a + 1` on the 1 x 14336 tensor, and torch.mm of
    the same sizes (float32 on the CPU, float16 on CUDA).

"us per call" is the median over --repeats repeats of (wall time of n calls
issued back to back) / n, after warm-up; n is sized so a repeat takes about
--target-ms. On CUDA that time is the host's: the n calls (n <= 100, so
that queued GPU work never fills the launch queue and stalls the host) are
launched without synchronising (the stream is synchronised after the clock stops),
and the GPU time of the same call is measured separately from a CUDA graph
of it replayed (CUDA events; events around calls queued behind a GPU sleep
when a graph cannot be captured), so "bound" says whether a call is limited
by the host or by the GPU. "ratio" divides by the torch reference of the same
kind on the same device in this run (GEMMs by torch.mm of their size,
quantize by `a + 1`).

Targets checked (and printed): on CUDA, every qg call on torch tensors costs
<= 10 us of host time; on the CPU, the 64x64x64 GEMM costs <= 3x torch.mm of
the same tiny problem. Exit status is 0 either way (a measurement, not a
test); --strict makes a missed target exit 1.
"""
from __future__ import annotations

import argparse
import datetime
import gc
import json
import platform
import statistics
import sys
import time

M_BIG, K_BIG = 4096, 14336
TINY = 64
CUDA_HOST_TARGET_US = 10.0
CPU_TINY_RATIO_TARGET = 3.0
CUDA_MAX_CALLS = 100


# ------------------------------------------------------------------ timing
def _noop():
    pass


class Timer:
    def __init__(self, repeats: int, target_s: float, max_calls: int):
        self.repeats = repeats
        self.target_s = target_s
        self.max_calls = max_calls

    def host(self, fn, sync=_noop, max_calls=None, repeat_factor=1):
        """Median us per call of n back-to-back calls (clock stopped before sync)."""
        for _ in range(3):
            fn()
        sync()
        t0 = time.perf_counter()
        fn()
        sync()
        one = max(time.perf_counter() - t0, 1e-7)
        n = int(min(max_calls or self.max_calls, max(3, self.target_s / one)))
        host, wall = [], []
        gc_was = gc.isenabled()
        gc.disable()
        try:
            for _ in range(self.repeats * repeat_factor):
                t0 = time.perf_counter()
                for _ in range(n):
                    fn()
                t1 = time.perf_counter()
                sync()
                t2 = time.perf_counter()
                host.append((t1 - t0) / n * 1e6)
                wall.append((t2 - t0) / n * 1e6)
        finally:
            if gc_was:
                gc.enable()
        return statistics.median(host), statistics.median(wall), n


def cuda_gpu_us(torch, fn, calls: int = 20, replays: int = 5):
    """GPU time per call: a CUDA graph of `calls` calls, replayed; else events behind a sleep."""
    try:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                fn()
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for _ in range(calls):
                fn()
        graph.replay()
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        best = float("inf")
        for _ in range(3):
            start.record()
            for _ in range(replays):
                graph.replay()
            end.record()
            end.synchronize()
            best = min(best, start.elapsed_time(end) * 1e3 / (replays * calls))
        del graph
        return best, "graph"
    except Exception as e:  # noqa: BLE001 - any capture failure falls back to events
        graph_error = f"{type(e).__name__}: {e}"
    torch.cuda.synchronize()
    # Events around each call, queued while the GPU sleeps, so the launches'
    # host time is not in the events.
    evs = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(calls)]
    torch.cuda._sleep(50_000_000)
    for s, e in evs:
        s.record()
        fn()
        e.record()
    torch.cuda.synchronize()
    times = [s.elapsed_time(e) * 1e3 for s, e in evs]
    return statistics.median(times), "events (no graph: " + graph_error[:80] + ")"


# ------------------------------------------------------------------ cases
class Row(dict):
    pass


def row(case, kind, framework, device, host_us, wall_us, n, gpu_us=None, gpu_method=None, kernel=None):
    r = Row(case=case, kind=kind, framework=framework, device=device, us_per_call=host_us,
            wall_us_per_call=wall_us, calls_per_repeat=n, kernel=kernel)
    if gpu_us is not None:
        r["gpu_us_per_call"] = gpu_us
        r["gpu_method"] = gpu_method
        r["bound"] = "host" if host_us > gpu_us else "GPU"
    return r


def explain_kernel(qg, op, *arrays, **kwargs):
    try:
        return qg.explain(op, *arrays, **kwargs).chosen
    except Exception as e:  # noqa: BLE001 - informational
        return f"? ({type(e).__name__})"


def torch_rows(qg, torch, device: str, timer: Timer, data):
    """qg and the references on torch tensors of `device`."""
    cuda = device == "cuda"
    sync = torch.cuda.synchronize if cuda else _noop
    dev = torch.device(device)
    rows = []

    def measure(case, kind, fn, kernel=None, framework="torch"):
        # CUDA: at most CUDA_MAX_CALLS launches per repeat (and 3x the
        # repeats), so a GPU-bound call never fills the launch queue, whose
        # back-pressure would bill GPU time to the host.
        host, wall, n = (timer.host(fn, sync, CUDA_MAX_CALLS, 3) if cuda else timer.host(fn, sync))
        gpu = method = None
        if cuda:
            gpu, method = cuda_gpu_us(torch, fn)
        rows.append(row(case, kind, framework, device, host, wall, n, gpu, method, kernel))

    w_big = data["w_big_q"].to(dev)
    a_big = data["a_big_q"].to(dev)
    w_tiny = data["w_tiny_q"].to(dev)
    a_tiny = data["a_tiny_q"].to(dev)
    x = data["x"].to(dev)
    out_big = torch.empty(M_BIG, 1, device=dev)
    out_tiny = torch.empty(TINY, TINY, device=dev)
    out_q = torch.empty(1, K_BIG // 32, 36, dtype=torch.uint8, device=dev)
    g = qg.gemm_q4_0_q8_1
    kb, kt = explain_kernel(qg, g, w_big, a_big), explain_kernel(qg, g, w_tiny, a_tiny)
    kq = explain_kernel(qg, qg.quantize_q8_1, x)
    measure(f"qg gemm {M_BIG}x{K_BIG} N=1", "gemm_big", lambda: g(w_big, a_big), kb)
    measure(f"qg gemm {M_BIG}x{K_BIG} N=1 out=", "gemm_big", lambda: g(w_big, a_big, out=out_big), kb)
    measure(f"qg gemm {TINY}x{TINY}x{TINY}", "gemm_tiny", lambda: g(w_tiny, a_tiny), kt)
    measure(f"qg gemm {TINY}x{TINY}x{TINY} out=", "gemm_tiny", lambda: g(w_tiny, a_tiny, out=out_tiny), kt)
    if not cuda:
        # Informational: the same call on one qg CPU thread (no thread-pool
        # hand-off), to split the tiny GEMM's time into pool and kernel.
        threads = qg.cpu_threads()
        qg.set_cpu_threads(1)
        try:
            measure(f"qg gemm {TINY}x{TINY}x{TINY} out=, 1 qg thread", "gemm_tiny_info",
                    lambda: g(w_tiny, a_tiny, out=out_tiny), kt)
        finally:
            qg.set_cpu_threads(threads)
    if cuda:
        # The tensor-core GEMM's calls (a re-layout pass and the GEMM, a
        # scratch buffer from qg's pool, tensor maps): host time only matters
        # where it approaches the GPU time, so two small token counts.
        for n_tok in (16, 128):
            a_n = qg.quantize_q8_1(torch.randn(n_tok, K_BIG, device=dev))
            measure(f"qg gemm {M_BIG}x{K_BIG} N={n_tok}", "gemm_big", lambda a=a_n: g(w_big, a),
                    explain_kernel(qg, g, w_big, a_n))
        x16 = torch.randn(16, K_BIG, device=dev, dtype=torch.float16)
        measure(f"qg linear_q4_0 16x{K_BIG} fp16 @ [{M_BIG},{K_BIG}]^T", "gemm_big",
                lambda: qg.linear_q4_0(x16, w_big), explain_kernel(qg, qg.linear_q4_0, x16, w_big))
        # Decode's call: one token, quantized and multiplied in one call
        # (the GEMV launched early behind the quantizer).
        x1 = torch.randn(1, K_BIG, device=dev, dtype=torch.float16)
        measure(f"qg linear_q4_0 1x{K_BIG} fp16 @ [{M_BIG},{K_BIG}]^T", "gemm_big",
                lambda: qg.linear_q4_0(x1, w_big), explain_kernel(qg, qg.linear_q4_0, x1, w_big))
    measure(f"qg quantize_q8_1 1x{K_BIG}", "quantize", lambda: qg.quantize_q8_1(x), kq)
    measure(f"qg quantize_q8_1 1x{K_BIG} out=", "quantize", lambda: qg.quantize_q8_1(x, out=out_q), kq)

    # The integer family: the decode calls a model makes.
    act = torch.float16 if cuda else torch.float32
    w8, s8 = data["w_big_i8"][0].to(dev), data["w_big_i8"][1].to(dev)
    x8, sx8 = qg.quantize_tensor(x, granularity="channel")
    w4, s4 = data["w_big_i4"][0].to(dev), data["w_big_i4"][1].to(dev, act)
    xa = x.to(act)
    ki8 = explain_kernel(qg, qg.int8_matmul, x8, w8, b_layout="nk")
    measure(f"qg int8_matmul 1x{K_BIG} @ [{M_BIG},{K_BIG}]^T int32", "gemm_big",
            lambda: qg.int8_matmul(x8, w8, b_layout="nk"), ki8)
    measure(f"qg int8_matmul 1x{K_BIG} @ [{M_BIG},{K_BIG}]^T scaled fp32", "gemm_big",
            lambda: qg.int8_matmul(x8, w8, sx8, s8, out_dtype="float32", b_layout="nk"), ki8)
    measure(f"qg quantize_tensor 1x{K_BIG} int8 per row", "quantize",
            lambda: qg.quantize_tensor(x, granularity="channel"))
    measure(f"qg linear_int4 1x{K_BIG} g128 {M_BIG} out", "gemm_big",
            lambda: qg.linear_int4(xa, w4, s4, group_size=128),
            explain_kernel(qg, qg.linear_int4, xa, w4, s4, group_size=128))
    import qg.torch as qgt

    lin = torch.nn.Linear(TINY, TINY).to(dev)
    xt = data["a_tiny"].to(dev)
    for fmt in ("int8", "int4", "q4_0"):
        mod = qgt.QuantizedLinear.from_linear(lin, weight_format=fmt, group_size=32)
        with torch.no_grad():
            measure(f"qg QuantizedLinear({fmt}) {TINY}x{TINY}x{TINY}", "gemm_tiny_info", lambda m=mod: m(xt))

    # References: float32 on the CPU, float16 on CUDA (what a model would run).
    dt = torch.float16 if cuda else torch.float32
    wf = data["w_big"].to(dev, dt)
    xf = data["x"].to(dev, dt).reshape(K_BIG, 1)
    ta, tb = data["w_tiny"].to(dev, dt), data["a_tiny"].to(dev, dt).t().contiguous()
    dname = "fp16" if cuda else "fp32"
    measure(f"ref torch a + 1 (1x{K_BIG} fp32)", "ref_add", lambda: x + 1)
    measure(f"ref torch.mm {M_BIG}x{K_BIG} @ {K_BIG}x1 {dname}", "ref_mm_big", lambda: torch.mm(wf, xf))
    measure(f"ref torch.mm {TINY}x{TINY}x{TINY} {dname}", "ref_mm_tiny", lambda: torch.mm(ta, tb))
    del wf
    return rows


def numpy_rows(qg, np, timer: Timer, data):
    rows = []

    def measure(case, kind, fn, kernel=None):
        host, wall, n = timer.host(fn)
        rows.append(row(case, kind, "numpy", "cpu", host, wall, n, kernel=kernel))

    w_big, a_big = data["w_big_q"].numpy(), data["a_big_q"].numpy()
    w_tiny, a_tiny = data["w_tiny_q"].numpy(), data["a_tiny_q"].numpy()
    x = data["x"].numpy()
    out_big, out_tiny = np.empty((M_BIG, 1), np.float32), np.empty((TINY, TINY), np.float32)
    g = qg.gemm_q4_0_q8_1
    kb, kt = explain_kernel(qg, g, w_big, a_big), explain_kernel(qg, g, w_tiny, a_tiny)
    measure(f"qg gemm {M_BIG}x{K_BIG} N=1", "gemm_big", lambda: g(w_big, a_big), kb)
    measure(f"qg gemm {M_BIG}x{K_BIG} N=1 out=", "gemm_big", lambda: g(w_big, a_big, out=out_big), kb)
    measure(f"qg gemm {TINY}x{TINY}x{TINY}", "gemm_tiny", lambda: g(w_tiny, a_tiny), kt)
    measure(f"qg gemm {TINY}x{TINY}x{TINY} out=", "gemm_tiny", lambda: g(w_tiny, a_tiny, out=out_tiny), kt)
    measure(f"qg quantize_q8_1 1x{K_BIG}", "quantize", lambda: qg.quantize_q8_1(x),
            explain_kernel(qg, qg.quantize_q8_1, x))
    ta, tb = data["w_tiny"].numpy(), data["a_tiny"].numpy().T.copy()
    measure(f"ref numpy a + 1 (1x{K_BIG} fp32)", "ref_add", lambda: x + 1)
    measure(f"ref numpy matmul {TINY}x{TINY}x{TINY} fp32", "ref_mm_tiny", lambda: ta @ tb)
    return rows


def jax_rows(qg, jax, timer: Timer, data):
    import jax.numpy as jnp

    rows = []
    for jdev in {d.platform: d for d in jax.devices()}.values():
        device = "cuda" if jdev.platform == "gpu" else jdev.platform

        def put(t):
            return jax.device_put(jnp.asarray(t.numpy()), jdev)

        w_big, a_big, w_tiny, a_tiny, x = (put(data[k]) for k in ("w_big_q", "a_big_q", "w_tiny_q", "a_tiny_q", "x"))
        g = qg.gemm_q4_0_q8_1

        def measure(case, kind, fn, kernel=None):
            last = []

            def call():
                last[:] = [fn()]

            def sync():
                if last:
                    jax.block_until_ready(last[0])

            if device == "cuda":
                host, wall, n = timer.host(call, sync, CUDA_MAX_CALLS, 3)
            else:
                host, wall, n = timer.host(call, sync)
            rows.append(row(case, kind, "jax", device, host, wall, n, kernel=kernel))

        try:
            kb, kt = explain_kernel(qg, g, w_big, a_big), explain_kernel(qg, g, w_tiny, a_tiny)
            measure(f"qg gemm {M_BIG}x{K_BIG} N=1", "gemm_big", lambda: g(w_big, a_big), kb)
            measure(f"qg gemm {TINY}x{TINY}x{TINY}", "gemm_tiny", lambda: g(w_tiny, a_tiny), kt)
            measure(f"qg quantize_q8_1 1x{K_BIG}", "quantize", lambda: qg.quantize_q8_1(x),
                    explain_kernel(qg, qg.quantize_q8_1, x))
        except Exception as e:  # noqa: BLE001 - informational
            print(f"host_overhead: jax on {device}: {type(e).__name__}: {e}", file=sys.stderr)
        ta, tb = put(data["w_tiny"]), put(data["a_tiny"]).T
        measure(f"ref jax a + 1 (1x{K_BIG} fp32)", "ref_add", lambda: x + 1)
        measure(f"ref jax matmul {TINY}x{TINY}x{TINY} fp32", "ref_mm_tiny", lambda: ta @ tb)
    return rows


def cupy_rows(qg, cp, timer: Timer, data):
    rows = []
    sync = cp.cuda.Stream.null.synchronize

    def measure(case, kind, fn, kernel=None):
        host, wall, n = timer.host(fn, lambda: cp.cuda.get_current_stream().synchronize(), CUDA_MAX_CALLS, 3)
        rows.append(row(case, kind, "cupy", "cuda", host, wall, n, kernel=kernel))

    w_big, a_big, w_tiny, a_tiny, x = (cp.asarray(data[k].numpy())
                                       for k in ("w_big_q", "a_big_q", "w_tiny_q", "a_tiny_q", "x"))
    sync()
    g = qg.gemm_q4_0_q8_1
    kb, kt = explain_kernel(qg, g, w_big, a_big), explain_kernel(qg, g, w_tiny, a_tiny)
    measure(f"qg gemm {M_BIG}x{K_BIG} N=1", "gemm_big", lambda: g(w_big, a_big), kb)
    measure(f"qg gemm {TINY}x{TINY}x{TINY}", "gemm_tiny", lambda: g(w_tiny, a_tiny), kt)
    measure(f"qg quantize_q8_1 1x{K_BIG}", "quantize", lambda: qg.quantize_q8_1(x),
            explain_kernel(qg, qg.quantize_q8_1, x))
    measure(f"ref cupy a + 1 (1x{K_BIG} fp32)", "ref_add", lambda: x + 1)
    return rows


# ------------------------------------------------------------------ report
REF_OF = {"gemm_big": "ref_mm_big", "gemm_tiny": "ref_mm_tiny", "gemm_tiny_info": "ref_mm_tiny", "quantize": "ref_add",
          "ref_mm_big": "ref_mm_big", "ref_mm_tiny": "ref_mm_tiny", "ref_add": "ref_add"}


def add_ratios(rows):
    refs = {(r["device"], r["kind"]): r for r in rows if r["framework"] == "torch" and r["kind"].startswith("ref_")}
    for r in rows:
        ref = refs.get((r["device"], REF_OF[r["kind"]]))
        if ref:
            r["ratio"] = r["us_per_call"] / ref["us_per_call"]
            r["ratio_to"] = ref["case"]


def check_targets(rows):
    targets = []
    for r in rows:
        if r["framework"] != "torch" or not r["case"].startswith("qg "):
            continue
        if r["device"] == "cuda":
            ok = r["us_per_call"] <= CUDA_HOST_TARGET_US
            targets.append(dict(case=r["case"], device="cuda", target=f"host <= {CUDA_HOST_TARGET_US:g} us per call",
                                value=f"{r['us_per_call']:.1f} us", ok=ok))
        elif r["device"] == "cpu" and r["kind"] == "gemm_tiny" and "ratio" in r:
            ok = r["ratio"] <= CPU_TINY_RATIO_TARGET
            targets.append(dict(case=r["case"], device="cpu",
                                target=f"<= {CPU_TINY_RATIO_TARGET:g}x torch.mm {TINY}^3",
                                value=f"{r['ratio']:.2f}x ({r['us_per_call']:.1f} us)", ok=ok))
    for r in rows:
        r["target"] = next((("met" if t["ok"] else "MISSED") for t in targets
                            if t["case"] == r["case"] and t["device"] == r["device"] and r["framework"] == "torch"), "")
    return targets


def markdown(rows, targets, meta):
    out = [f"qg host overhead — {meta['date']}, {meta['machine']}; qg {meta['qg_version']} "
           f"(cuda built: {meta['qg_cuda_built']}), torch {meta['torch']}, {meta['cpu_threads']} CPU threads"
           + (f"; GPU: {meta['gpu']}" if meta.get("gpu") else ""), ""]
    out.append("| case | framework/device | us per call | GPU us per call | bound | ratio to torch ref | "
               "torch ref | kernel | target |")
    out.append("|---|---|---:|---:|---|---:|---|---|---|")
    for r in rows:
        gpu = f"{r['gpu_us_per_call']:.1f}" if "gpu_us_per_call" in r else "—"
        ratio = f"{r['ratio']:.2f}x" if "ratio" in r else "—"
        ref = r.get("ratio_to", "—").replace("ref ", "") if "ratio" in r else "—"
        out.append(f"| {r['case']} | {r['framework']}/{r['device']} | {r['us_per_call']:.1f} | {gpu} | "
                   f"{r.get('bound', '—')} | {ratio} | {ref} | {r['kernel'] or '—'} | {r['target'] or ''} |")
    out.append("")
    out.append("us per call: median over repeats of (wall time of n back-to-back calls) / n; on CUDA the "
               "host's time (launches without synchronising), GPU us from a CUDA graph of the call.")
    if targets:
        out.append("")
        out.append("Targets:")
        for t in targets:
            out.append(f"* {t['device']} {t['case']}: {t['target']}: {t['value']} — {'met' if t['ok'] else 'MISSED'}")
        floor = next((r for r in rows if r["framework"] == "torch" and r["device"] == "cuda"
                      and r["kind"] == "ref_add"), None)
        if floor:
            out.append(f"* (for scale: torch's own `a + 1` on CUDA costs {floor['us_per_call']:.1f} us of host time "
                       "per call on this machine)")
    else:
        out.append("")
        out.append("Targets: none applicable in this run.")
    if not meta.get("gpu"):
        out.append(f"* cuda: not measured ({meta.get('cuda_note', 'no GPU')}); the <= {CUDA_HOST_TARGET_US:g} us "
                   "host target needs a CUDA device")
    return "\n".join(out)


# ------------------------------------------------------------------ main
def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", metavar="PATH", help="also write the rows, targets and context as JSON")
    ap.add_argument("--device", choices=("all", "cpu", "cuda"), default="all")
    ap.add_argument("--repeats", type=int, default=7, help="repeats per case; the median is reported (default 7)")
    ap.add_argument("--target-ms", type=float, default=10.0, help="wall time of one repeat (default 10 ms)")
    ap.add_argument("--max-calls", type=int, default=2000, help="most calls per repeat (default 2000)")
    ap.add_argument("--no-others", action="store_true", help="torch only: skip numpy, jax, cupy")
    ap.add_argument("--strict", action="store_true", help="exit 1 when a target is missed")
    args = ap.parse_args(argv)

    t_start = time.perf_counter()
    import numpy as np
    import torch

    import qg

    timer = Timer(max(1, args.repeats), args.target_ms * 1e-3, max(3, args.max_calls))
    info = qg.build_info()
    meta = dict(date=datetime.datetime.now().isoformat(timespec="seconds"), machine=platform.machine(),
                python=platform.python_version(), qg_version=info.get("version"), qg_cuda_built=info.get("cuda_built"),
                qg_cpu_features=info.get("cpu_features"), cpu_threads=qg.cpu_threads(), torch=torch.__version__,
                torch_threads=torch.get_num_threads(), repeats=timer.repeats, target_ms=args.target_ms)

    # Inputs, quantized once on the CPU and copied to each framework/device.
    gen = torch.Generator().manual_seed(0)
    data = dict(w_big=torch.randn(M_BIG, K_BIG, generator=gen), x=torch.randn(1, K_BIG, generator=gen),
                w_tiny=torch.randn(TINY, TINY, generator=gen), a_tiny=torch.randn(TINY, TINY, generator=gen))
    data["w_big_q"] = qg.quantize_q4_0(data["w_big"])
    data["a_big_q"] = qg.quantize_q8_1(data["x"])
    data["w_tiny_q"] = qg.quantize_q4_0(data["w_tiny"])
    data["a_tiny_q"] = qg.quantize_q8_1(data["a_tiny"])
    data["w_big_i8"] = qg.quantize_tensor(data["w_big"], granularity="channel")
    data["w_big_i4"] = qg.quantize_tensor(data["w_big"], bits=4, granularity="group", group_size=128)

    devices = []
    if args.device in ("all", "cpu"):
        devices.append("cpu")
    if args.device in ("all", "cuda"):
        if torch.cuda.is_available() and qg.cuda_available():
            devices.append("cuda")
            meta["gpu"] = torch.cuda.get_device_name()
        else:
            meta["cuda_note"] = ("torch sees no GPU" if not torch.cuda.is_available()
                                 else "qg: " + qg.cuda_unavailable_reason())

    rows = []
    for device in devices:
        rows += torch_rows(qg, torch, device, timer, data)
    if not args.no_others:
        if "cpu" in devices:
            rows += numpy_rows(qg, np, timer, data)
        try:
            import jax
        except ImportError:
            jax = None
        if jax is not None:
            try:
                rows += [r for r in jax_rows(qg, jax, timer, data) if r["device"] in devices]
            except Exception as e:  # noqa: BLE001 - informational
                print(f"host_overhead: jax skipped: {type(e).__name__}: {e}", file=sys.stderr)
        if "cuda" in devices:
            try:
                import cupy as cp
            except ImportError:
                cp = None
            if cp is not None:
                try:
                    rows += cupy_rows(qg, cp, timer, data)
                except Exception as e:  # noqa: BLE001 - informational
                    print(f"host_overhead: cupy skipped: {type(e).__name__}: {e}", file=sys.stderr)

    add_ratios(rows)
    targets = check_targets(rows)
    meta["seconds"] = round(time.perf_counter() - t_start, 1)
    print(markdown(rows, targets, meta))
    print(f"\n({meta['seconds']} s)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(context=meta, rows=rows, targets=targets), f, indent=1)
    return 1 if args.strict and not all(t["ok"] for t in targets) else 0


if __name__ == "__main__":
    sys.exit(main())
