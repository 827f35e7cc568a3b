# SPDX-License-Identifier: MIT
"""qg's PyTorch extras (importing this module imports torch).

* fake_quantize(x, fmt="q8_0"): dequantize(quantize(x)) in x's dtype, with a
  straight-through gradient, for quantization-aware training in qg's exact
  formats; the torch operator qg::fake_quantize (torch.compile / export).

qg's quantize / dequantize / gemm functions take torch tensors directly
(import qg); under torch.compile, torch.export and torch.jit.trace they are
recorded as the operators qg::quantize, qg::dequantize and qg::gemm.
"""
from .torch_ops import fake_quantize

__all__ = ["fake_quantize"]
