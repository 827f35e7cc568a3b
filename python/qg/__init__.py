# SPDX-License-Identifier: MIT
"""qg: quantized GEMM for NumPy, PyTorch, CuPy and JAX arrays, on CPU and CUDA.

Formats are byte-identical to ggml's (GGUF): Q4_0, Q8_0, Q8_1.
"""
from ._api import (
    Explanation,
    dequantize_q4_0,
    dequantize_q8_0,
    dequantize_q8_1,
    explain,
    gemm_q4_0_q8_1,
    linear_q4_0,
    quantize_q4_0,
    quantize_q8_0,
    quantize_q8_1,
)
from ._runtime import (
    build_info,
    cpu_threads,
    cuda_available,
    cuda_devices,
    cuda_unavailable_reason,
    set_cpu_threads,
)

__version__ = build_info()["version"]

__all__ = [
    "Explanation",
    "build_info",
    "cpu_threads",
    "cuda_available",
    "cuda_devices",
    "cuda_unavailable_reason",
    "dequantize_q4_0",
    "dequantize_q8_0",
    "dequantize_q8_1",
    "explain",
    "gemm_q4_0_q8_1",
    "linear_q4_0",
    "quantize_q4_0",
    "quantize_q8_0",
    "quantize_q8_1",
    "set_cpu_threads",
]
