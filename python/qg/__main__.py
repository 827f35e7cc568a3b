# SPDX-License-Identifier: MIT
"""python -m qg info | demo [--device cpu|cuda] [--M 4096 --N 2 --K 14336]"""
from __future__ import annotations

import argparse
import sys
import time

import numpy as np

import qg


def info() -> int:
    b = qg.build_info()
    print(f"qg {b['version']}")
    print(f"  CPU backend: yes ({b['cpu_threads']} threads; features: {', '.join(b['cpu_features']) or 'none'})")
    if b["cuda_built"]:
        print(f"  CUDA backend: built with CUDA runtime {b['cuda_runtime_version']}, archs {', '.join(b['cuda_archs'])}")
    else:
        print("  CUDA backend: not built (reinstall with nvcc on PATH: QG_CUDA=ON pip install .)")
    devices = qg.cuda_devices()
    if devices:
        for d in devices:
            cc = d["compute_capability"]
            runnable = "runs" if d["has_compiled_code"] else "NO compiled code for it"
            print(
                f"  cuda:{d['id']}: {d['name']}, sm_{cc}, {d['multiprocessors']} SMs, "
                f"{d['memory_bytes'] / 2**30:.0f} GiB, L2 {d['l2_bytes'] / 2**20:.0f} MiB ({runnable})"
            )
    else:
        print(f"  CUDA devices: none ({qg.cuda_unavailable_reason()})")
    return 0


def _nmse(out, ref) -> float:
    out = np.asarray(out, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    return float(np.sum((out - ref) ** 2) / np.sum(ref**2))


def _cuda_framework():
    """('torch' | 'cupy', None) for a framework that can hold CUDA arrays, or (None, why not)."""
    why = []
    try:
        import torch
    except ImportError:
        why.append("torch is not installed")
    else:
        if torch.cuda.is_available():
            return "torch", None
        why.append(f"torch {torch.__version__} sees no CUDA device")
    try:
        import cupy
    except ImportError:
        why.append("cupy is not installed")
    else:
        try:
            if cupy.cuda.runtime.getDeviceCount() > 0:
                return "cupy", None
            why.append("cupy sees no CUDA device")
        except Exception as e:  # noqa: BLE001 - cupy without a usable driver
            why.append(f"cupy cannot use CUDA ({e})")
    return None, "; ".join(why)


class CudaUnusable(RuntimeError):
    pass


def demo(device: str, M: int, N: int, K: int, seed: int) -> int:
    """The seed-000 quick start: quantize W and A, GEMM, compare with W @ A^T."""
    framework, why_not = None, None
    if device in ("cuda", "auto"):
        if not qg.cuda_available():
            why_not = f"qg sees no usable CUDA device: {qg.cuda_unavailable_reason()}"
        else:
            framework, why_not = _cuda_framework()
            if framework is None:
                why_not = f"qg sees a GPU, but no framework here can hold CUDA arrays for the demo ({why_not})"
        if device == "cuda" and framework is None:
            raise CudaUnusable(
                f"python -m qg demo --device cuda: {why_not}. Run with --device cpu, or see `python -m qg info`."
            )
    use_cuda = framework is not None
    rng = np.random.default_rng(seed)
    weight = rng.standard_normal((M, K), dtype=np.float32)
    activation = rng.standard_normal((N, K), dtype=np.float32)
    print(f"qg demo: M={M} N={N} K={K} seed={seed} on {'cuda' if use_cuda else 'cpu'}")
    if device == "auto" and not use_cuda:
        print(f"  (not on CUDA: {why_not})")

    if framework == "torch":
        import torch

        w = torch.from_numpy(weight).cuda()
        a = torch.from_numpy(activation).cuda()
        sync = torch.cuda.synchronize
        to_np = lambda t: t.cpu().numpy()  # noqa: E731
    elif framework == "cupy":
        import cupy

        w, a = cupy.asarray(weight), cupy.asarray(activation)
        sync = cupy.cuda.Device().synchronize
        to_np = cupy.asnumpy
    else:
        w, a = weight, activation
        sync = lambda: None  # noqa: E731
        to_np = np.asarray

    weight_q = qg.quantize_q4_0(w)
    activation_q = qg.quantize_q8_1(a)
    out = qg.gemm_q4_0_q8_1(weight_q, activation_q, M, N, K)
    sync()
    reps = 20
    t0 = time.perf_counter()
    for _ in range(reps):
        out = qg.gemm_q4_0_q8_1(weight_q, activation_q, M, N, K)
    sync()
    dt = (time.perf_counter() - t0) / reps

    ref = weight.astype(np.float64) @ activation.astype(np.float64).T
    print(f"  weight_q {tuple(weight_q.shape)} uint8, activation_q {tuple(activation_q.shape)} uint8")
    print(f"  implementation: {qg.explain(qg.gemm_q4_0_q8_1, weight_q, activation_q).chosen}")
    print(f"  NMSE vs fp32 W @ A^T: {_nmse(to_np(out), ref):.6e}")
    flops = 2.0 * M * N * K
    print(f"  time: {dt * 1e6:.1f} us per GEMM ({flops / dt / 1e9:.1f} GFLOP/s, wall clock, mean of {reps})")
    return 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m qg", description="qg: quantized GEMM")
    sub = p.add_subparsers(dest="cmd", required=True)
    sub.add_parser("info", help="version, build options, backends, CUDA archs, devices")
    d = sub.add_parser("demo", help="quantize + GEMM + NMSE on the best device present")
    d.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    d.add_argument("--M", type=int, default=4096)
    d.add_argument("--N", type=int, default=2)
    d.add_argument("--K", type=int, default=14336)
    d.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    if args.cmd == "info":
        return info()
    try:
        return demo(args.device, args.M, args.N, args.K, args.seed)
    except CudaUnusable as e:
        print(f"error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
