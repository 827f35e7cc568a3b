# SPDX-License-Identifier: MIT
"""qg.int8_matmul with B stored [K, N] (seed 001's layout, which the core
repacks into K-contiguous rows) beside B stored [N, K] (no copy) and beside
the copy a caller would make with torch (B.T.contiguous(), then [N, K]).

    python bench/int8_kn.py [--device cuda|cpu] [--iters 200]

For each shape M x K x N it prints the time per call of the three, of
torch's transpose alone, and the kernel qg.explain names for the [K, N]
call; every [K, N] result is checked against the [N, K] one first. On CUDA
the times are CUDA-event averages over --iters calls after 10 warm-up calls
(the same weights each call, so L2-hot where they fit); on the CPU, wall
time over --iters calls. Then the host time per call of a 1 x 4096 x 4096
call in both layouts beside torch's `a + 1` (launches not synchronised:
the median of 7 repeats of 100 calls; on the CPU that is the whole call).
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch

import qg

SHAPES = [(1, 4096, 4096), (16, 4096, 4096), (16, 4096, 14336), (128, 4096, 4096), (4096, 4096, 4096)]


def per_call_us(fn, device: str, iters: int) -> float:
    for _ in range(10):
        fn()
    if device == "cuda":
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(iters):
            fn()
        end.record()
        torch.cuda.synchronize()
        return start.elapsed_time(end) * 1000 / iters
    t0 = time.perf_counter()
    for _ in range(iters):
        fn()
    return (time.perf_counter() - t0) * 1e6 / iters


def host_us(fn, device: str) -> float:
    for _ in range(50):
        fn()
    if device == "cuda":
        torch.cuda.synchronize()
    ts = []
    for _ in range(7):
        t0 = time.perf_counter()
        for _ in range(100):
            fn()
        ts.append((time.perf_counter() - t0) / 100 * 1e6)
        if device == "cuda":
            torch.cuda.synchronize()
    return statistics.median(ts)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--iters", type=int, default=200)
    ap.add_argument("--shapes", default=None, help="M,K,N;M,K,N;... (default: the LLM decode and square shapes)")
    args = ap.parse_args()
    dev = args.device
    shapes = SHAPES if not args.shapes else [tuple(int(v) for v in s.split(",")) for s in args.shapes.split(";")]
    g = torch.Generator(device=dev).manual_seed(7)
    print(f"device {dev}" + (f" ({torch.cuda.get_device_name(0)})" if dev == "cuda" else ""), flush=True)
    for m, k, n in shapes:
        a = torch.randint(-128, 128, (m, k), dtype=torch.int8, device=dev, generator=g)
        b_kn = torch.randint(-128, 128, (k, n), dtype=torch.int8, device=dev, generator=g)
        b_nk = b_kn.T.contiguous()
        if not torch.equal(qg.int8_matmul(a, b_kn), qg.int8_matmul(a, b_nk, b_layout="nk")):
            print(f"M={m} K={k} N={n}: [K, N] and [N, K] results differ")
            return 1
        kn = per_call_us(lambda: qg.int8_matmul(a, b_kn), dev, args.iters)
        nk = per_call_us(lambda: qg.int8_matmul(a, b_nk, b_layout="nk"), dev, args.iters)
        copy = per_call_us(lambda: qg.int8_matmul(a, b_kn.T.contiguous(), b_layout="nk"), dev, args.iters)
        transpose = per_call_us(lambda: b_kn.T.contiguous(), dev, args.iters)
        chosen = qg.explain(qg.int8_matmul, a, b_kn).chosen
        print(f"M={m} K={k} N={n}: kn {kn:.1f} us  nk {nk:.1f} us  torch-copy+nk {copy:.1f} us  "
              f"torch transpose {transpose:.1f} us  chosen(kn)={chosen}", flush=True)
    a = torch.randint(-128, 128, (1, 4096), dtype=torch.int8, device=dev, generator=g)
    b_kn = torch.randint(-128, 128, (4096, 4096), dtype=torch.int8, device=dev, generator=g)
    b_nk = b_kn.T.contiguous()
    for name, fn in (("kn", lambda: qg.int8_matmul(a, b_kn)), ("nk", lambda: qg.int8_matmul(a, b_nk, b_layout="nk")),
                     ("torch a+1", lambda: a + 1)):
        print(f"host us per call, {name}: {host_us(fn, dev):.1f}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
