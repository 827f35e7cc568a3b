# SPDX-License-Identifier: MIT
"""qg's PyTorch extras (importing this module imports torch).

* fake_quantize(x, fmt="q8_0"): dequantize(quantize(x)) in x's dtype, with a
  straight-through gradient, for quantization-aware training in qg's exact
  formats; the torch operator qg::fake_quantize (torch.compile / export).
* QuantizedLinear: a frozen quantized linear layer (weights "int8", "int4"
  or "q4_0"; bias and ReLU fused), from_linear(nn.Linear), state_dict round
  trip, input gradients (straight-through), torch.compile and CUDA graphs.

qg's quantize / dequantize / gemm functions take torch tensors directly
(import qg); under torch.compile, torch.export and torch.jit.trace they are
recorded as the operators qg::quantize, qg::dequantize, qg::gemm,
qg::quantize_int and qg::dequantize_int.
"""
from .torch_linear import QuantizedLinear
from .torch_ops import fake_quantize

__all__ = ["QuantizedLinear", "fake_quantize"]
