# SPDX-License-Identifier: MIT
"""qg.torch.QuantizedLinear in its three weight formats.

Forward is compared with a float64 computation from the same codes: the
weight as dequantized_weight() returns it, and for int8 the activations as
quantize_tensor codes them per token (the layer's own quantizer), for q4_0 as
quantize_q8_1 codes them. Backward: the input's gradient is grad_y (masked
where the ReLU's output is 0) @ W_deq; the bias gets the summed grad_y; the
weights are buffers with no gradient."""
from __future__ import annotations

import numpy as np
import pytest

import int_ref as R
import qg
import qg_ref
from conftest import needs_torch, needs_torch_cuda

pytestmark = needs_torch
pytest.importorskip("torch")
import qg.torch  # noqa: E402 - after the skip: it imports torch

FORMATS = ["int8", "int4", "q4_0", "q4_0x16"]
CUDA_FORMATS = ["int8", "int4", "q4_0"]  # q4_0x16 is a CPU layout
TIER_A = 1e-6


def _layer(fmt, bias, relu, in_features=64, out_features=None, seed=0, device="cpu"):
    import torch

    if out_features is None:
        out_features = 32 if fmt == "q4_0x16" else 24  # q4_0x16: groups of 16 rows

    torch.manual_seed(seed)
    lin = torch.nn.Linear(in_features, out_features, bias=bias).to(device)
    return lin, qg.torch.QuantizedLinear.from_linear(lin, weight_format=fmt, group_size=32,
                                                      activation="relu" if relu else None)


def _reference(layer, x):
    """float64 y from the same codes the layer multiplies, [..., out]."""
    import torch

    w = layer.dequantized_weight().double().cpu().numpy()
    x2 = x.detach().reshape(-1, layer.in_features).cpu()
    if layer.weight_format == "int8":
        codes, scale = qg.quantize_tensor(x2.float(), granularity="channel")
        xs = codes.double().numpy() * scale.double().numpy()[:, None]
    elif layer.weight_format in ("q4_0", "q4_0x16"):
        xq = qg.quantize_q8_1(x2.float()).numpy()
        d, _, c = qg_ref.unpack_q8(xq)
        xs = (c.astype(np.float64) * d[..., None]).reshape(x2.shape[0], -1)
    else:
        xs = x2.double().numpy()
    y = xs @ w.T
    if layer.bias is not None:
        y = y + layer.bias.detach().double().cpu().numpy()
    if layer.activation == "relu":
        y = np.maximum(y, 0)
    return torch.from_numpy(y).reshape(*x.shape[:-1], layer.out_features)


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("bias", [False, True], ids=["nobias", "bias"])
@pytest.mark.parametrize("relu", [False, True], ids=["linear", "relu"])
def test_forward_matches_float64_from_the_same_codes(fmt, bias, relu):
    import torch

    lin, layer = _layer(fmt, bias, relu)
    x = torch.randn(3, 5, 64, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        y = layer(x)
    assert y.shape == (3, 5, layer.out_features) and y.dtype == torch.float32
    ref = _reference(layer, x)
    assert R.nmse(y.numpy(), ref.numpy()) <= TIER_A
    # and near the float layer: within what the format's quantization allows
    with torch.no_grad():
        full = lin(x)
        if relu:
            full = torch.relu(full)
    limit = {"int8": 1e-3, "int4": 3e-2, "q4_0": 3e-2, "q4_0x16": 3e-2}[fmt]
    assert R.nmse(y.numpy(), full.numpy()) <= limit


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_inputs_give_half_outputs(fmt, dtype):
    import torch

    tdt = getattr(torch, dtype)
    _, layer = _layer(fmt, True, False)
    x = torch.randn(4, 64, generator=torch.Generator().manual_seed(2)).to(tdt)
    with torch.no_grad():
        y = layer(x)
    assert y.dtype == tdt and y.shape == (4, layer.out_features)
    ref = _reference(layer, x.float()) if fmt != "int4" else _reference(layer, x)
    assert R.nmse(y.float().numpy(), ref.numpy()) <= (1e-4 if dtype == "bfloat16" else 1e-5)


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("bias", [False, True], ids=["nobias", "bias"])
@pytest.mark.parametrize("relu", [False, True], ids=["linear", "relu"])
def test_input_and_bias_gradients(fmt, bias, relu):
    import torch

    _, layer = _layer(fmt, bias, relu)
    x = torch.randn(6, 64, generator=torch.Generator().manual_seed(3), requires_grad=True)
    y = layer(x)
    g = torch.randn(y.shape, generator=torch.Generator().manual_seed(4))
    y.backward(g)
    w = layer.dequantized_weight().double()
    gm = g.double() * (y.detach() > 0).double() if relu else g.double()
    want = gm @ w
    assert R.nmse(x.grad.numpy(), want.numpy()) <= TIER_A
    if bias:
        assert R.nmse(layer.bias.grad.numpy(), gm.sum(0).numpy()) <= TIER_A
    for name, buf in layer.named_buffers():
        assert not buf.requires_grad, name
    assert [n for n, _ in layer.named_parameters()] == (["bias"] if bias else [])


@pytest.mark.parametrize("fmt", FORMATS)
def test_state_dict_round_trip(fmt, tmp_path):
    import torch

    _, layer = _layer(fmt, True, True)
    path = tmp_path / "layer.pt"
    torch.save(layer.state_dict(), path)
    fresh = qg.torch.QuantizedLinear(64, layer.out_features, weight_format=fmt, group_size=32, activation="relu")
    fresh.load_state_dict(torch.load(path))
    x = torch.randn(2, 64)
    with torch.no_grad():
        assert torch.equal(fresh(x), layer(x))
    keys = set(layer.state_dict())
    assert keys == ({"weight_q", "bias"} | ({"weight_scale"} if fmt not in ("q4_0", "q4_0x16") else set()))


def test_constructor_and_errors():
    import torch

    layer = qg.torch.QuantizedLinear(64, 8, bias=False, weight_format="int4", group_size=16)
    assert layer.weight_q.shape == (8, 32) and layer.weight_q.dtype == torch.uint8
    assert layer.weight_scale.shape == (8, 4) and layer.bias is None
    assert "weight_format='int4'" in repr(layer)
    with pytest.raises(ValueError, match=r"^qg\.torch\.QuantizedLinear: weight_format='int4' needs in_features"):
        qg.torch.QuantizedLinear(48, 8, weight_format="int4", group_size=32)
    with pytest.raises(ValueError, match=r"^qg\.torch\.QuantizedLinear: weight_format must be one of"):
        qg.torch.QuantizedLinear(64, 8, weight_format="int2")
    with pytest.raises(ValueError, match=r"^qg\.torch\.QuantizedLinear: weight_format='q4_0' needs in_features"):
        qg.torch.QuantizedLinear(40, 8, weight_format="q4_0")
    with pytest.raises(ValueError, match=r"^qg\.torch\.QuantizedLinear: activation must be None or 'relu'"):
        qg.torch.QuantizedLinear(64, 8, activation="gelu")
    with pytest.raises(ValueError, match=r"^qg\.torch\.QuantizedLinear: x must have shape \[\.\.\., 64\]"):
        layer(torch.zeros(2, 63))
    with pytest.raises(TypeError, match=r"^qg\.torch\.QuantizedLinear: x must be float32"):
        layer(torch.zeros(2, 64, dtype=torch.int32))
    with pytest.raises(TypeError, match=r"from_linear: linear must be a torch.nn.Linear"):
        qg.torch.QuantizedLinear.from_linear(torch.nn.Conv1d(1, 1, 1))


def test_q4_0x16_is_q4_0_repacked():
    """The q4_0x16 layer holds qg.repack of the q4_0 layer's codes and gives
    its outputs (bit for bit where the q4_0 call runs a panel kernel) and its
    input gradient; its shape rules and its CPU-only rule fail with the fix."""
    import torch

    lin = torch.nn.Linear(64, 48)
    a = qg.torch.QuantizedLinear.from_linear(lin, weight_format="q4_0")
    b = qg.torch.QuantizedLinear.from_linear(lin, weight_format="q4_0x16")
    assert b.weight_q.shape == (3, 2, 288)
    assert torch.equal(b.weight_q, qg.repack(a.weight_q, "q4_0x16"))
    assert torch.equal(b.dequantized_weight(), a.dequantized_weight())
    for n in (1, 5):
        x = torch.randn(n, 64, generator=torch.Generator().manual_seed(n))
        with torch.no_grad():
            ya, yb = a(x), b(x)
        chosen = qg.explain(qg.gemm_q4_0_q8_1, a.weight_q, qg.quantize_q8_1(x)).chosen
        if chosen == "cpu_amx" or chosen.endswith("_panel"):
            assert torch.equal(ya, yb)
        assert R.nmse(yb.numpy(), ya.numpy()) <= TIER_A
    with pytest.raises(ValueError, match=r"^qg\.torch\.QuantizedLinear: weight_format='q4_0x16' needs out_features "
                                         r"\(24\) to be a multiple of 16"):
        qg.torch.QuantizedLinear(64, 24, weight_format="q4_0x16")
    with pytest.raises(ValueError, match=r"^qg\.torch\.QuantizedLinear: weight_format='q4_0x16' needs in_features"):
        qg.torch.QuantizedLinear(40, 16, weight_format="q4_0x16")
    assert "weight_format='q4_0x16'" in repr(b)


@needs_torch_cuda
def test_q4_0x16_refuses_cuda_with_the_fix():
    import torch

    with pytest.raises(ValueError, match=r"^qg\.torch\.QuantizedLinear: weight_format='q4_0x16' is the layout of "
                                         r"qg's CPU kernels"):
        qg.torch.QuantizedLinear.from_linear(torch.nn.Linear(64, 16).cuda(), weight_format="q4_0x16")
    layer = qg.torch.QuantizedLinear(64, 16, weight_format="q4_0x16").cuda()
    with pytest.raises(ValueError, match=r"q4_0x16 is the layout of qg's CPU kernels; for cuda:0 pass the weight "
                                         r"as q4_0"):
        with torch.no_grad():
            layer(torch.randn(2, 64, device="cuda"))


@pytest.mark.parametrize("fmt", FORMATS)
def test_empty_batch_and_module_half(fmt):
    import torch

    _, layer = _layer(fmt, True, False)
    with torch.no_grad():
        assert layer(torch.zeros(0, 64)).shape == (0, layer.out_features)
        x = torch.randn(3, 64)
        y = layer(x)
        layer.half()  # scales and bias become float16: the layer still runs
        y16 = layer(x.half())
    assert y16.dtype == torch.float16
    assert R.nmse(y16.float().numpy(), y.numpy()) <= 1e-4


@pytest.mark.parametrize("fmt", FORMATS)
def test_torch_compile_fullgraph(fmt, fresh_dynamo):
    import torch

    _, layer = _layer(fmt, True, True)
    model = torch.nn.Sequential(layer, torch.nn.Linear(layer.out_features, 4))
    x = torch.randn(5, 64, generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        explanation = torch._dynamo.explain(model)(x)
        assert explanation.graph_break_count == 0, explanation.break_reasons
        compiled = torch.compile(model, backend="eager", fullgraph=True)
        assert torch.equal(compiled(x), model(x))
    # with autograd: the straight-through backward is traced too
    xr = x.clone().requires_grad_()
    compiled(xr).sum().backward()
    xe = x.clone().requires_grad_()
    model(xe).sum().backward()
    assert torch.equal(xr.grad, xe.grad)


@needs_torch_cuda
@pytest.mark.parametrize("fmt", CUDA_FORMATS)
def test_cuda_matches_cpu_and_to_device(fmt):
    import torch

    _, layer = _layer(fmt, True, True)
    x = torch.randn(7, 64)
    with torch.no_grad():
        cpu = layer(x)
        layer.to("cuda")
        assert layer.weight_q.is_cuda and layer.bias.is_cuda
        gpu = layer(x.cuda())
    assert gpu.is_cuda
    assert R.nmse(gpu.cpu().numpy(), cpu.numpy()) <= TIER_A


@needs_torch_cuda
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_int4_one_token_cuda_graph_capture(dtype):
    """One token of half activations: the weight-only decode GEMV (on sm_90
    the fixed-point one, which takes a workspace and launches a pass before
    the GEMV) captured in a CUDA graph and replayed on new input."""
    import torch

    tdt = getattr(torch, dtype)
    _, layer = _layer("int4", True, False, in_features=256, out_features=40, device="cuda")
    x = torch.randn(1, 256, device="cuda").to(tdt)
    with torch.no_grad():
        eager = layer(x)
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            layer(x)
        torch.cuda.current_stream().wait_stream(s)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            captured = layer(x)
        x.copy_(torch.randn(1, 256, device="cuda").to(tdt))
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(captured, layer(x))
        assert not torch.equal(captured, eager)
        ref = _reference(layer, x)
    assert R.nmse(captured.float().cpu().numpy(), ref.numpy()) <= (1e-4 if dtype == "bfloat16" else 1e-5)


@needs_torch_cuda
@pytest.mark.parametrize("fmt", CUDA_FORMATS)
def test_cuda_graph_capture(fmt):
    import torch

    _, layer = _layer(fmt, True, True, device="cuda")
    x = torch.randn(4, 64, device="cuda")
    with torch.no_grad():
        eager = layer(x)
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            layer(x)  # warm up on the side stream, as torch's docs do
        torch.cuda.current_stream().wait_stream(s)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            captured = layer(x)
        x.copy_(torch.randn(4, 64, device="cuda"))
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(captured, layer(x))
        assert not torch.equal(captured, eager)
