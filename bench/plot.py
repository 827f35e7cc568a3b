#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Draw bench_gemm's Google Benchmark JSON as PNGs.

    ./build/bench_gemm --benchmark_out=results.json --benchmark_out_format=json
    python bench/plot.py results.json [-o outdir]

Writes, for each device present in the file (cuda, cpu):
  roofline_<device>.png  achieved TFLOP/s against arithmetic intensity
                         (flop per byte of compulsory traffic), one marker per
                         case, with the measured bandwidth and compute ceilings
                         from the JSON context when they are there;
  speedup_cuda_<mode>.png  qg q4_0_q8_1 over cublas_fp16 (time ratio) per
                         (M, K, N), for "cold" and, if present, "hot";
  speedup_cuda_kernels_<mode>.png  the same ratio for each forced kernel
                         (cases named .../kernel:<name>), side by side;
  time_vs_n_<device>_<mode>.png  µs against N, one panel per (M, K): the
                         public call, each forced kernel, cuBLAS fp16, the
                         bandwidth floor (W bytes / measured copy bandwidth)
                         and, when the run has read_q4_0 cases, the read
                         floor: a kernel that only reads W, timed the same way.
Case names: <op>/<cpu|cuda>/<cold|hot>[/M:<M>]/K:<K>/N:<N>[/kernel:<name>]
(bench/harness.h); without /kernel: the public call (the dispatcher's choice).
Needs only matplotlib (Agg backend: no display, no GPU). Cases that are
missing, skipped with an error or lack counters are left out, not fatal.
"""

import argparse
import json
import math
import os
import re
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

NAME_RE = re.compile(
    r"^(?P<op>[A-Za-z0-9_]+)/(?P<dev>cpu|cuda)/(?P<mode>cold|hot)"
    r"(?:/M:(?P<M>\d+))?/K:(?P<K>\d+)/N:(?P<N>\d+)"
    r"(?:/kernel:(?P<kernel>[A-Za-z0-9_.\-]+))?(?=/|$)"
)
# bench_gemm's read floors: read_<format>/<dev>/<mode>/M:<M>/K:<K>
READ_RE = re.compile(r"^read_(?P<fmt>[A-Za-z0-9_]+)/(?P<dev>cpu|cuda)/(?P<mode>cold|hot)/M:(?P<M>\d+)/K:(?P<K>\d+)(?=/|$)")


def _float(value):
    try:
        v = float(value)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def load(path):
    with open(path) as f:
        data = json.load(f)
    context = data.get("context", {}) or {}
    cases = []
    for b in data.get("benchmarks", []):
        if b.get("error_occurred") or b.get("skipped"):
            continue
        # With --benchmark_repetitions keep the median (or the plain runs).
        if b.get("run_type") == "aggregate" and b.get("aggregate_name") != "median":
            continue
        name = b.get("run_name") or b.get("name", "")
        r = READ_RE.match(name)
        if r and _float(b.get("us")):
            key = (r["dev"], r["mode"], int(r["M"]), int(r["K"]), r["fmt"])
            context.setdefault("_read_floor_us", {})[key] = _float(b.get("us"))
            continue
        m = NAME_RE.match(name)
        if not m:
            continue
        us = _float(b.get("us"))
        if us is None or us <= 0:
            continue
        cases.append(
            {
                "op": m["op"],
                "dev": m["dev"],
                "mode": m["mode"],
                "M": int(m["M"]) if m["M"] else None,
                "K": int(m["K"]),
                "N": int(m["N"]),
                "kernel": m["kernel"],
                "us": us,
                "tflops": _float(b.get("TFLOP/s")),
                "gbps": _float(b.get("GB/s")),
                "floor": _float(b.get("%floor")),
                "label": b.get("label", ""),
                "aggregate": b.get("run_type") == "aggregate",
            }
        )
    # Prefer medians when both plain repetitions and aggregates exist.
    keyed = {}
    for c in cases:
        key = (c["op"], c["dev"], c["mode"], c["M"], c["K"], c["N"], c["kernel"])
        if key not in keyed or c["aggregate"]:
            keyed[key] = c
    return context, list(keyed.values())


def title_suffix(context):
    parts = []
    for key in ("cuda_device", "qg_commit"):
        if context.get(key):
            parts.append(f"{key.split('_')[-1]}: {context[key]}")
    return "  (" + ", ".join(parts) + ")" if parts else ""


def roofline(context, cases, dev, outdir):
    pts = [c for c in cases if c["dev"] == dev and c["tflops"] and c["gbps"]]
    if not pts:
        return None
    fig, ax = plt.subplots(figsize=(9, 6))
    # Colour: which code and cold/hot; marker: which weight shape.
    styles = {
        ("q4_0_q8_1", "cold"): ("tab:blue", "qg q4_0_q8_1 cold"),
        ("q4_0_q8_1", "hot"): ("tab:cyan", "qg q4_0_q8_1 hot"),
        ("cublas_fp16", "cold"): ("tab:red", "cuBLAS fp16 cold"),
        ("cublas_fp16", "hot"): ("tab:orange", "cuBLAS fp16 hot"),
    }
    markers = ["o", "^", "s", "D", "v", "P", "*"]
    shapes = sorted({(c["M"], c["K"]) for c in pts if c["M"] is not None})
    shape_marker = {s: markers[i % len(markers)] for i, s in enumerate(shapes)}
    # Forced kernels (.../kernel:<name>): one colour per kernel, cold and hot.
    palette = ["tab:green", "tab:purple", "tab:brown", "tab:pink", "tab:olive", "tab:gray"]
    kernels = sorted({(c["op"], c["kernel"]) for c in pts if c["kernel"]})
    for i, (op, kernel) in enumerate(kernels):
        color = palette[i % len(palette)]
        for mode in ("cold", "hot"):
            styles[(op, mode, kernel)] = (color, f"{op} kernel {kernel} {mode}")
    for key, (color, label) in styles.items():
        op, mode = key[0], key[1]
        kernel = key[2] if len(key) > 2 else None
        sel = [c for c in pts if c["op"] == op and c["mode"] == mode and c["kernel"] == kernel]
        if not sel:
            continue
        ax.scatter([], [], marker="o", color=color, label=label,
                   edgecolors="black" if mode == "cold" else "none", linewidths=0.5)
        for shape in shapes:
            sub = [c for c in sel if (c["M"], c["K"]) == shape]
            if not sub:
                continue
            ai = [c["tflops"] * 1e12 / (c["gbps"] * 1e9) for c in sub]
            tf = [c["tflops"] for c in sub]
            ax.scatter(ai, tf, marker=shape_marker[shape], color=color, alpha=0.8,
                       edgecolors="black" if mode == "cold" else "none", linewidths=0.5)
            if mode == "cold" and kernel is None:
                for x, y, c in zip(ai, tf, sub):
                    ax.annotate(f"N={c['N']}", (x, y), textcoords="offset points", xytext=(4, -8),
                                fontsize=6, color=color)
    for shape in shapes:
        ax.scatter([], [], marker=shape_marker[shape], color="gray", label=f"M={shape[0]}, K={shape[1]}")
    others = [c for c in pts if c["kernel"] is None and (c["op"], c["mode"]) not in styles]
    if others:
        ai = [c["tflops"] * 1e12 / (c["gbps"] * 1e9) for c in others]
        ax.scatter(ai, [c["tflops"] for c in others], marker="x", color="gray", label="other")

    all_ai = [c["tflops"] * 1e12 / (c["gbps"] * 1e9) for c in pts]
    lo, hi = min(all_ai) / 2, max(all_ai) * 2
    bw = _float(context.get("gpu_peak_bw_GBps" if dev == "cuda" else "cpu_peak_bw_GBps"))
    peak = _float(context.get("gpu_peak_fp16_TFLOPs")) if dev == "cuda" else None
    xs = [lo * (hi / lo) ** (i / 200) for i in range(201)]
    if bw:
        ys = [x * bw * 1e9 / 1e12 for x in xs]
        if peak:
            ys = [min(y, peak) for y in ys]
        label = f"measured ceiling: {bw:.0f} GB/s"
        if peak:
            label += f", {peak:.0f} TFLOP/s (cuBLAS fp16)"
        ax.plot(xs, ys, "k--", linewidth=1, label=label)
    elif peak:
        ax.axhline(peak, color="k", linestyle="--", linewidth=1, label=f"fp16 peak {peak:.0f} TFLOP/s")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ax.set_xlabel("arithmetic intensity (flop / byte of compulsory traffic)")
    ax.set_ylabel("achieved TFLOP/s")
    ax.set_title(f"bench_gemm roofline, {dev}{title_suffix(context)}", fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="upper left")
    path = os.path.join(outdir, f"roofline_{dev}.png")
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)
    return path


def _by_shape(cases, mode, op, kernel=None):
    return {(c["M"], c["K"], c["N"]): c for c in cases
            if c["dev"] == "cuda" and c["mode"] == mode and c["op"] == op and c["kernel"] == kernel
            and c["M"] is not None}


def speedup(context, cases, mode, outdir):
    qg = _by_shape(cases, mode, "q4_0_q8_1")
    cb = _by_shape(cases, mode, "cublas_fp16")
    keys = sorted(set(qg) & set(cb))
    if not keys:
        return None
    ratios = [cb[k]["us"] / qg[k]["us"] for k in keys]
    labels = [f"{m}x{k}\nN={n}" for (m, k, n) in keys]
    fig, ax = plt.subplots(figsize=(max(8, 0.55 * len(keys) + 2), 5))
    colors = ["tab:green" if r >= 1 else "tab:red" for r in ratios]
    bars = ax.bar(range(len(keys)), ratios, color=colors)
    ax.axhline(1.0, color="k", linewidth=0.8)
    for bar, r in zip(bars, ratios):
        ax.annotate(f"{r:.2f}", (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                    ha="center", va="bottom", fontsize=6)
    ax.set_xticks(range(len(keys)))
    ax.set_xticklabels(labels, fontsize=6)
    ax.set_xlabel("M x K, N")
    ax.set_ylabel("speedup = cuBLAS fp16 time / qg q4_0_q8_1 time")
    ax.set_title(f"qg Q4_0 x Q8_1 vs cuBLAS fp16, {mode}{title_suffix(context)}", fontsize=10)
    ax.grid(True, axis="y", alpha=0.3)
    path = os.path.join(outdir, f"speedup_cuda_{mode}.png")
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)
    return path


def speedup_kernels(context, cases, mode, outdir):
    """Grouped bars: cuBLAS fp16 time / each forced q4_0_q8_1 kernel's time."""
    cb = _by_shape(cases, mode, "cublas_fp16")
    kernels = sorted({c["kernel"] for c in cases
                      if c["dev"] == "cuda" and c["op"] == "q4_0_q8_1" and c["kernel"]})
    series = {k: _by_shape(cases, mode, "q4_0_q8_1", k) for k in kernels}
    keys = sorted(set(cb) & set().union(*[set(v) for v in series.values()])) if series else []
    if not keys:
        return None
    palette = ["tab:green", "tab:purple", "tab:brown", "tab:pink", "tab:olive", "tab:gray"]
    width = 0.8 / len(kernels)
    fig, ax = plt.subplots(figsize=(max(8, 0.3 * len(keys) * len(kernels) + 2), 5))
    for i, k in enumerate(kernels):
        xs = [j + (i - (len(kernels) - 1) / 2) * width for j, key in enumerate(keys) if key in series[k]]
        ys = [cb[key]["us"] / series[k][key]["us"] for key in keys if key in series[k]]
        ax.bar(xs, ys, width=width, color=palette[i % len(palette)], label=k)
    ax.axhline(1.0, color="k", linewidth=0.8)
    ax.set_yscale("log")
    ax.set_xticks(range(len(keys)))
    ax.set_xticklabels([f"{m}x{k}\nN={n}" for (m, k, n) in keys], fontsize=6)
    ax.set_xlabel("M x K, N (a missing bar: the kernel does not take that N)")
    ax.set_ylabel("speedup = cuBLAS fp16 time / kernel time")
    ax.set_title(f"q4_0_q8_1 kernels vs cuBLAS fp16, {mode}{title_suffix(context)}", fontsize=10)
    ax.grid(True, axis="y", which="both", alpha=0.3)
    ax.legend(fontsize=8)
    path = os.path.join(outdir, f"speedup_cuda_kernels_{mode}.png")
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)
    return path

def time_vs_n(context, cases, dev, mode, outdir):
    """One panel per (M, K): time against N for each series, log-log."""
    sel = [c for c in cases if c["dev"] == dev and c["mode"] == mode and c["M"] is not None]
    # Every (M, K) a GEMM case has; the Q4_0 floors are drawn only where the
    # run has Q4_0 cases (a run of the integer family alone has other bytes).
    shapes = sorted({(c["M"], c["K"]) for c in sel if c["op"] != "cublas_fp16"})
    if not shapes:
        return None
    has_q4_0 = any(c["op"] == "q4_0_q8_1" for c in sel)
    series = sorted({(c["op"], c["kernel"] or "") for c in sel}, key=lambda s: (s[0] != "q4_0_q8_1", s[1] != "", s))
    palette = ["tab:blue", "tab:green", "tab:purple", "tab:brown", "tab:pink", "tab:olive", "tab:cyan"]
    colors, i = {}, 0
    for op, kernel in series:
        if op == "cublas_fp16":
            colors[(op, kernel)] = "tab:red"
        else:
            colors[(op, kernel)] = palette[i % len(palette)]
            i += 1
    bw = _float(context.get("gpu_peak_bw_GBps" if dev == "cuda" else "cpu_peak_bw_GBps"))
    fig, axes = plt.subplots(1, len(shapes), figsize=(6.5 * len(shapes), 5), squeeze=False)
    for ax, (m, k) in zip(axes[0], shapes):
        for op, kernel in series:
            pts = sorted((c["N"], c["us"]) for c in sel
                         if (c["M"], c["K"]) == (m, k) and c["op"] == op and (c["kernel"] or "") == kernel)
            if not pts:
                continue
            if op == "q4_0_q8_1":
                label = f"qg kernel {kernel}" if kernel else "qg (dispatched)"
            else:
                label = "cuBLAS fp16" if op == "cublas_fp16" else op + (f" {kernel}" if kernel else "")
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", markersize=3,
                    linewidth=2.2 if not kernel else 1, linestyle="-" if not kernel else "--",
                    color=colors[(op, kernel)], label=label)
        if bw and has_q4_0:
            ns = sorted({c["N"] for c in sel if (c["M"], c["K"]) == (m, k)})
            # Compulsory bytes of the Q4_0 weights alone: 18 bytes per 32 values.
            floor_us = m * k / 32 * 18 / (bw * 1e9) * 1e6
            ax.plot(ns, [floor_us] * len(ns), "k:", linewidth=1, label=f"W bytes / {bw:.0f} GB/s")
        read_us = context.get("_read_floor_us", {}).get((dev, mode, m, k, "q4_0"))
        if read_us:
            ns = sorted({c["N"] for c in sel if (c["M"], c["K"]) == (m, k)})
            ax.plot(ns, [read_us] * len(ns), "k--", linewidth=1, label=f"a read of W alone ({read_us:.1f} µs)")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("N (activation rows)")
        ax.set_ylabel("µs per call")
        ax.set_title(f"M={m}, K={k}, {mode}", fontsize=10)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(f"bench_gemm time vs N, {dev}{title_suffix(context)}", fontsize=10)
    path = os.path.join(outdir, f"time_vs_n_{dev}_{mode}.png")
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)
    return path


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results", help="Google Benchmark JSON (--benchmark_out_format=json)")
    ap.add_argument("-o", "--outdir", default=".", help="where to write the PNGs (default .)")
    args = ap.parse_args(argv)
    context, cases = load(args.results)
    os.makedirs(args.outdir, exist_ok=True)
    written = []
    for dev in ("cuda", "cpu"):
        p = roofline(context, cases, dev, args.outdir)
        if p:
            written.append(p)
    for dev in ("cuda", "cpu"):
        for mode in ("cold", "hot"):
            p = time_vs_n(context, cases, dev, mode, args.outdir)
            if p:
                written.append(p)
    for mode in ("cold", "hot"):
        for chart in (speedup, speedup_kernels):
            p = chart(context, cases, mode, args.outdir)
            if p:
                written.append(p)
    if not written:
        print(f"plot.py: no plottable cases in {args.results}", file=sys.stderr)
        return 1
    for p in written:
        print(p)
    if not any("speedup" in p for p in written):
        print("plot.py: no q4_0_q8_1/cuda + cublas_fp16/cuda pairs: no speedup chart", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
