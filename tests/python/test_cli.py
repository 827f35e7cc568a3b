# SPDX-License-Identifier: MIT
"""`python -m qg info | demo`."""
from __future__ import annotations

import re
import subprocess
import sys

import pytest

import qg


def run_qg(*args, timeout=120):
    return subprocess.run([sys.executable, "-m", "qg", *args], capture_output=True, text=True, timeout=timeout)


def test_info():
    p = run_qg("info")
    assert p.returncode == 0, p.stderr
    assert f"qg {qg.__version__}" in p.stdout
    assert "CPU backend" in p.stdout
    assert "CUDA" in p.stdout
    if not qg.cuda_available():
        assert qg.cuda_unavailable_reason() in p.stdout


def test_demo_cpu():
    p = run_qg("demo", "--device", "cpu", "--M", "256", "--N", "2", "--K", "1024")
    assert p.returncode == 0, p.stderr
    assert "M=256 N=2 K=1024" in p.stdout and "on cpu" in p.stdout
    m = re.search(r"NMSE vs fp32 W @ A\^T: ([0-9.eE+-]+)", p.stdout)
    assert m, p.stdout
    nmse = float(m.group(1))
    assert 1e-5 < nmse < 1.5e-2, nmse  # Q4_0 x Q8_1 on Gaussian data: lossy, but bounded
    m = re.search(r"implementation: (\S+)", p.stdout)
    assert m and m.group(1) in ("cpu_avx2", "cpu_scalar"), p.stdout


@pytest.mark.skipif(not qg.cuda_available(), reason=f"qg sees no CUDA device: {qg.cuda_unavailable_reason()}")
def test_demo_cuda():
    p = run_qg("demo", "--device", "cuda", "--M", "4096", "--N", "2", "--K", "4096")
    assert p.returncode == 0, p.stderr
    nmse = float(re.search(r"NMSE vs fp32 W @ A\^T: ([0-9.eE+-]+)", p.stdout).group(1))
    assert nmse < 1.5e-2
    assert re.search(r"implementation: cuda_", p.stdout), p.stdout


def test_bad_subcommand():
    p = run_qg("frobnicate")
    assert p.returncode == 2
    assert "invalid choice" in p.stderr
