# SPDX-License-Identifier: MIT
"""qg: quantized GEMM for NumPy, PyTorch, CuPy and JAX arrays, on CPU and CUDA.

Formats are byte-identical to ggml's (GGUF): Q4_0, Q8_0, Q8_1. The integer
family (INT8, INT4 two per byte, INT4 eight per int32 word) keeps its scales
outside the codes: quantize_tensor / dequantize_tensor, int8_matmul,
int4_packed_matmul, int4_matmul and the weight-only linear_int4.
"""
from ._api import (
    Explanation,
    dequantize_q4_0,
    dequantize_q8_0,
    dequantize_q8_1,
    explain,
    gemm_q4_0_q8_1,
    linear_q4_0,
    repack,
    quantize_q4_0,
    quantize_q8_0,
    quantize_q8_1,
)
from ._int import dequantize_tensor, int8_matmul, linear_int4, quantize_tensor
from ._int4 import (
    generate_test_data,
    int4_matmul,
    int4_matmul_cuda,
    int4_matmul_pytorch,
    int4_packed_matmul,
    pack_int4,
    pack_int4_to_int32,
    unpack_int4,
    unpack_int4_from_int32,
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
    "dequantize_tensor",
    "explain",
    "gemm_q4_0_q8_1",
    "generate_test_data",
    "int4_matmul",
    "int4_matmul_cuda",
    "int4_matmul_pytorch",
    "int4_packed_matmul",
    "int8_matmul",
    "linear_int4",
    "linear_q4_0",
    "repack",
    "pack_int4",
    "pack_int4_to_int32",
    "quantize_q4_0",
    "quantize_q8_0",
    "quantize_q8_1",
    "quantize_tensor",
    "set_cpu_threads",
    "unpack_int4",
    "unpack_int4_from_int32",
]
