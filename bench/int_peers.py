# SPDX-License-Identifier: MIT
"""qg's integer GEMMs beside PyTorch's in one process, on one GPU.

    python bench/int_peers.py [--json out.json] [--iters 50]

* int8 x int8 -> int32: qg.int8_matmul(x, W, b_layout="nk") against
  torch._int_mm(x, W.t()) (cuBLASLt), at the LLM weight M=4096 x K=14336
  with N tokens, and square 4096^3 / 8192^3. torch._int_mm refuses N <= 16.
* int4 group-128 weight-only, bf16 activations: qg.linear_int4 against
  torch._weight_int4pack_mm (tinygemm), M=4096, K=14336.

Weights are cold: each call reads the next of enough copies to exceed twice
the GPU's L2, as a decode step does. Times are CUDA-event averages over
--iters calls (after a warm-up pass over every copy), in microseconds; the
script prints one line per case and can write them as JSON.
"""
from __future__ import annotations

import argparse
import json
import sys

import torch

import qg


def l2_bytes() -> int:
    return int(getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 60 << 20))


def copies_for(nbytes: int) -> int:
    return max(2, -(-2 * l2_bytes() // max(nbytes, 1)) + 1)


def time_us(fn, n_copies: int, iters: int) -> float:
    for i in range(n_copies):  # warm-up: first touch, module load, autotuning
        fn(i)
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for i in range(iters):
        fn(i % n_copies)
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) * 1000.0 / iters


def int8_cases(iters: int):
    shapes = [(4096, 14336, n) for n in (1, 8, 16, 32, 128, 512)] + [(4096, 4096, 4096), (8192, 8192, 8192)]
    for m, k, n in shapes:
        copies = copies_for(m * k)
        ws = [torch.randint(-127, 128, (m, k), dtype=torch.int8, device="cuda") for _ in range(copies)]
        x = torch.randint(-127, 128, (n, k), dtype=torch.int8, device="cuda")
        row = {"op": "int8 x int8 -> int32", "M": m, "K": k, "N": n}
        try:
            row["qg_us"] = time_us(lambda i: qg.int8_matmul(x, ws[i], b_layout="nk"), copies, iters)
            ref = torch._int_mm(x, ws[0].t()) if n > 16 else None
            if ref is not None:
                got = qg.int8_matmul(x, ws[0], b_layout="nk")
                row["exact"] = bool(torch.equal(got, ref))
        except Exception as e:  # report, keep measuring the rest
            row["qg_error"] = f"{type(e).__name__}: {e}"
        if n > 16:
            try:
                row["torch_int_mm_us"] = time_us(lambda i: torch._int_mm(x, ws[i].t()), copies, iters)
            except Exception as e:
                row["torch_error"] = f"{type(e).__name__}: {e}"
        else:
            row["torch_error"] = "torch._int_mm refuses N <= 16"
        if "qg_us" in row:
            row["TOPS"] = 2.0 * m * n * k / row["qg_us"] * 1e-6
        del ws
        torch.cuda.empty_cache()
        yield row


def int4_cases(iters: int):
    m, k, group = 4096, 14336, 128
    for n in (1, 2, 3, 4, 6, 8, 12, 16, 128, 512):
        copies = copies_for(m * k // 2)
        w = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        x = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
        row = {"op": "int4 g128 weight-only, bf16 x", "M": m, "K": k, "N": n}
        try:
            wq, scales = qg.quantize_tensor(w, bits=4, granularity="group", group_size=group)[:2]
            scales = scales.to(torch.bfloat16)
            wqs = [wq.clone() for _ in range(copies)]
            row["qg_us"] = time_us(lambda i: qg.linear_int4(x, wqs[i], scales, group_size=group), copies, iters)
            del wqs
        except Exception as e:
            row["qg_error"] = f"{type(e).__name__}: {e}"
        try:
            # tinygemm: uint8 codes 0..15 (value = (q - 8) * scale + zero), packed by torch.
            q = torch.randint(0, 16, (m, k), dtype=torch.int32, device="cuda")
            q8 = (q[:, ::2] << 4 | q[:, 1::2]).to(torch.uint8)
            packed = [torch._convert_weight_to_int4pack(q8, 8) for _ in range(copies)]
            sz = torch.rand(k // group, m, 2, device="cuda", dtype=torch.bfloat16)
            row["tinygemm_us"] = time_us(lambda i: torch._weight_int4pack_mm(x, packed[i], group, sz), copies, iters)
            del packed
        except Exception as e:
            row["tinygemm_error"] = f"{type(e).__name__}: {e}"
        torch.cuda.empty_cache()
        yield row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", help="write the rows here")
    ap.add_argument("--iters", type=int, default=50)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("int_peers: no CUDA device", file=sys.stderr)
        return 1
    rows = []
    print(f"device: {torch.cuda.get_device_name(0)}, torch {torch.__version__}, qg {qg.__version__}")
    for gen in (int8_cases(args.iters), int4_cases(args.iters)):
        for row in gen:
            rows.append(row)
            print(json.dumps(row))
            sys.stdout.flush()
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(0), "torch": torch.__version__, "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
