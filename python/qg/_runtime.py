# SPDX-License-Identifier: MIT
"""What this build holds and which devices it sees."""
from __future__ import annotations


from . import _qg
from ._args import int_arg


def build_info() -> dict:
    """version, cuda_built, cuda_runtime_version, cuda_archs, cpu_features, cpu_threads."""
    return dict(_qg.build_info())


def cuda_devices() -> list:
    """The CUDA devices qg can use (empty without CUDA or a GPU)."""
    return list(_qg.cuda_devices()[0])


def cuda_available() -> bool:
    """True when this build has the CUDA backend and sees at least one GPU."""
    return len(_qg.cuda_devices()[0]) > 0


def cuda_unavailable_reason() -> str:
    """Why cuda_available() is False ('' when it is True)."""
    devices, why = _qg.cuda_devices()
    return "" if devices else why


def set_cpu_threads(threads: int) -> None:
    """Worker threads of the CPU backend (0 = all hardware threads; env QG_NUM_THREADS)."""
    fn = "qg.set_cpu_threads"
    threads = int_arg(threads, "threads", fn)
    if not 0 <= threads <= 4096:
        raise ValueError(f"{fn}: threads={threads} must be between 0 (all hardware threads) and 4096")
    _qg.set_cpu_threads(threads)


def cpu_threads() -> int:
    return int(_qg.cpu_threads())
