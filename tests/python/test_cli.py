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
    assert m and m.group(1) in ("cpu_avx512_vnni", "cpu_avx_vnni", "cpu_avx2", "cpu_scalar"), p.stdout


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


def test_demo_cuda_without_usable_gpu():
    """--device cuda where no GPU is usable: a clear message saying why (qg's
    cuda_unavailable_reason), a non-zero exit, never a traceback such as
    ModuleNotFoundError for cupy. On a GPU machine the GPU is hidden."""
    import os

    env = dict(os.environ, CUDA_VISIBLE_DEVICES="")
    p = subprocess.run([sys.executable, "-m", "qg", "demo", "--device", "cuda", "--M", "64", "--K", "256"],
                       capture_output=True, text=True, timeout=120, env=env)
    assert p.returncode != 0, p.stdout + p.stderr
    assert "Traceback" not in p.stderr and "ModuleNotFoundError" not in p.stderr, p.stderr
    assert "qg sees no usable CUDA device: " in p.stderr, p.stderr
    assert "--device cpu" in p.stderr, p.stderr
    if not qg.cuda_available():  # the same reason qg gives in this process
        assert qg.cuda_unavailable_reason() in p.stderr, p.stderr
    reason = p.stderr.split("qg sees no usable CUDA device: ", 1)[1].strip()
    assert len(reason) > 10, p.stderr
    assert "NMSE" not in p.stdout  # nothing ran


def test_demo_auto_falls_back_to_cpu_with_reason():
    import os

    env = dict(os.environ, CUDA_VISIBLE_DEVICES="")
    p = subprocess.run([sys.executable, "-m", "qg", "demo", "--M", "64", "--N", "1", "--K", "256"],
                       capture_output=True, text=True, timeout=120, env=env)
    assert p.returncode == 0, p.stderr
    assert "on cpu" in p.stdout and "not on CUDA: qg sees no usable CUDA device" in p.stdout, p.stdout
