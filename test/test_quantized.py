"""Quantized tensors on accel: QTensorImpls over accel memory (dispatch key
QuantizedPrivateUse1) whose operators run the target's quantized kernels
(QuantizedCPU on the host runtime, QuantizedCUDA on the CUDA runtime) through
the alias fallback.

Every test compares with the target device: accel raises where the target
raises (a NotImplementedError naming accel where the target has no kernel),
and otherwise gives the target's result bit for bit (integer representation,
quantizer, sizes, strides, aliasing). QuantizedCUDA has far fewer kernels
than QuantizedCPU, so on the CUDA runtime more of these calls raise, on both
devices alike.
"""

from __future__ import annotations

import io

import pytest
import torch

from _kinds import (
    ACCEL,
    TARGET,
    assert_names_accel,
    assert_same,
    assert_same_outcome,
    parts,
    without_device,
)


def sample(*shape: int, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(*shape, generator=g) * 3).to(TARGET)


def per_tensor(x: torch.Tensor, dtype: torch.dtype = torch.quint8) -> torch.Tensor:
    return torch.quantize_per_tensor(x, 0.05, 0 if dtype == torch.qint8 else 7, dtype)


def per_channel(x: torch.Tensor, axis: int = 1, dtype: torch.dtype = torch.qint8) -> torch.Tensor:
    channels = x.shape[axis]
    scales = torch.linspace(0.02, 0.1, channels, dtype=torch.double, device=x.device)
    zero_points = torch.arange(channels, device=x.device) % 3
    return torch.quantize_per_channel(x, scales, zero_points, axis, dtype)


QSCHEMES = {"per_tensor": per_tensor, "per_channel": per_channel}


@pytest.mark.parametrize("dtype", [torch.quint8, torch.qint8, torch.qint32])
def test_quantize_per_tensor_gives_a_quantized_accel_tensor(dtype):
    x = sample(4, 6)
    q = torch.quantize_per_tensor(x.to(ACCEL), 0.05, 3, dtype)
    assert q.device.type == ACCEL and q.is_quantized and q.dtype == dtype
    assert "QuantizedPrivateUse1" in str(torch._C._dispatch_keys(q))
    assert (q.qscheme(), q.q_scale(), q.q_zero_point()) == (torch.per_tensor_affine, 0.05, 3)
    assert_same_outcome(lambda x: torch.quantize_per_tensor(x, 0.05, 3, dtype), x)
    assert_same_outcome(lambda x: torch.quantize_per_tensor(x, 0.05, 3, dtype).dequantize(), x)


@pytest.mark.parametrize("axis", [0, 1])
@pytest.mark.parametrize("dtype", [torch.quint8, torch.qint8])
def test_quantize_per_channel_keeps_its_parameters_on_accel(dtype, axis):
    x = sample(4, 6)
    q = per_channel(x.to(ACCEL), axis, dtype)
    assert q.device.type == ACCEL and q.is_quantized
    assert q.q_per_channel_scales().device.type == ACCEL
    assert q.q_per_channel_zero_points().device.type == ACCEL
    assert q.q_per_channel_axis() == axis
    assert_same_outcome(lambda x: per_channel(x, axis, dtype), x)
    assert_same_outcome(lambda x: per_channel(x, axis, dtype).dequantize(), x)


def test_quantize_per_channel_with_float_zero_points():
    x = sample(4, 6)

    def quantize(x):
        scales = torch.linspace(0.02, 0.1, 6, device=x.device)
        zero_points = torch.linspace(-1.0, 1.0, 6, device=x.device)
        return torch.quantize_per_channel(x, scales, zero_points, 1, torch.quint8)

    assert_same_outcome(quantize, x)


# Views and reshapes (and the copies flip and contiguous make): they keep the
# quantizer, stay on accel, and alias their base exactly where the target's do.
VIEWS = {
    "flip": lambda q: q.flip(0),
    "ravel": lambda q: q.ravel(),
    "flatten": lambda q: q.flatten(),
    "t": lambda q: q.t(),
    "transpose": lambda q: q.transpose(0, 1),
    "permute": lambda q: q.permute(1, 0),
    "select": lambda q: q.select(0, 2),
    "narrow": lambda q: q.narrow(1, 1, 3),
    "slice": lambda q: q[1:3, ::2],
    "view": lambda q: q.view(24),
    "reshape": lambda q: q.reshape(6, 4),
    "unsqueeze": lambda q: q.unsqueeze(0),
    "squeeze": lambda q: q.unsqueeze(1).squeeze(1),
    "expand": lambda q: q.unsqueeze(0).expand(2, 4, 6),
    "as_strided": lambda q: q.as_strided((2, 2), (6, 1), 1),
    "contiguous": lambda q: q.t().contiguous(),
    "clone": lambda q: q.clone(),
    "detach": lambda q: q.detach(),
    "unfold": lambda q: q.unfold(1, 2, 2),
}


# What PyTorch refuses on every device: a quantized tensor gets other strides
# than its base's only when it is quantized per tensor (QTensorImpl's check),
# so these views and copies of a per-channel quantized tensor raise, on the
# target as on accel, with the same message. Every other case must not raise.
REFUSED = {
    ("per_channel", view): "Setting strides is possible only on uniformly quantized tensor"
    for view in ("as_strided", "contiguous", "expand", "flip", "permute", "t", "transpose", "unfold")
}


@pytest.mark.parametrize("view", sorted(VIEWS))
@pytest.mark.parametrize("qscheme", sorted(QSCHEMES))
def test_views_keep_the_quantizer_and_stay_on_accel(view, qscheme):
    x = sample(4, 6)

    def run(x):
        q = QSCHEMES[qscheme](x)
        result = VIEWS[view](q)
        return result, result.untyped_storage().data_ptr() == q.untyped_storage().data_ptr()

    result = assert_same_outcome(run, x)  # on both devices alike, error messages included
    refused = REFUSED.get((qscheme, view))
    if refused is not None:
        assert isinstance(result, RuntimeError) and refused in str(result), result
        return
    assert not isinstance(result, Exception), result
    view_result, _ = result
    assert view_result.is_quantized and view_result.device.type == ACCEL


@pytest.mark.parametrize("qscheme", sorted(QSCHEMES))
def test_cpu_and_back(qscheme):
    x = sample(4, 6)
    q_target = QSCHEMES[qscheme](x)
    q_accel = q_target.to(ACCEL)
    assert_same(q_accel, q_target)
    back = q_accel.cpu()
    assert back.device.type == "cpu" and back.is_quantized
    assert_same(back, q_target.cpu(), same_device=True)
    # Between accel tensors too (a copy: a new storage).
    again = q_accel.to(ACCEL, copy=True)
    assert again.untyped_storage().data_ptr() != q_accel.untyped_storage().data_ptr()
    assert_same(again, q_target)


@pytest.mark.parametrize("qscheme", sorted(QSCHEMES))
def test_printing_matches_the_target(qscheme):
    x = sample(3, 4)
    q_target = QSCHEMES[qscheme](x)
    text = repr(q_target.to(ACCEL))
    assert "device='accel:0'" in text
    assert without_device(text) == without_device(repr(q_target))


def test_factories_make_quantized_accel_tensors():
    def factories(device_of):
        device = device_of.device
        q = per_tensor(device_of)
        return [
            torch._empty_affine_quantized((2, 3), scale=0.5, zero_point=2, dtype=torch.quint8, device=device),
            torch._empty_per_channel_affine_quantized(
                (2, 3),
                scales=torch.ones(3, dtype=torch.double, device=device),
                zero_points=torch.zeros(3, dtype=torch.long, device=device),
                axis=1,
                dtype=torch.qint8,
                device=device,
            ),
            torch.empty_like(q),
            torch.ops.aten.empty_quantized([5], q),
            # Python's binding passes the default device (cpu) explicitly.
            torch.empty_quantized((5,), q),
        ]

    x = sample(2)
    target, accel = factories(x), factories(x.to(ACCEL))
    devices = [ACCEL] * 4 + ["cpu"]
    for a, t, device in zip(accel, target, devices, strict=True):
        # Uninitialized memory: everything but the integer values.
        assert a.is_quantized and a.device.type == device
        got, expected = parts(a), parts(t)
        got.pop("int_repr"), expected.pop("int_repr")
        assert_same(got, expected)
        assert (a.dtype, a.shape) == (t.dtype, t.shape)


def test_factory_on_another_device_makes_its_tensor_there():
    q = per_tensor(sample(3)).to(ACCEL)
    made = torch.ops.aten.empty_quantized([2], q, device="cpu")
    assert made.device.type == "cpu" and made.is_quantized and made.q_scale() == q.q_scale()


@pytest.mark.parametrize("qscheme", sorted(QSCHEMES))
def test_copy_between_quantized_tensors_takes_the_source_quantizer(qscheme):
    def copy(x):
        destination = per_tensor(x.flip(0))
        source = QSCHEMES[qscheme](x)
        destination.copy_(source)
        return destination

    assert_same_outcome(copy, sample(4, 6))


def test_copy_quantizes_a_float_source():
    def copy(x):
        destination = per_tensor(torch.zeros_like(x))
        destination.copy_(x * 2)
        return destination

    assert_same_outcome(copy, sample(4, 6))


def test_copy_across_devices():
    q = per_tensor(sample(4, 6))
    on_accel = per_tensor(torch.zeros(4, 6, device=ACCEL))
    on_accel.copy_(q.cpu())
    assert_same(on_accel, q)
    on_cpu = per_tensor(torch.zeros(4, 6))
    on_cpu.copy_(q.to(ACCEL))
    assert_same(on_cpu, q.cpu(), same_device=True)


def prepacked_weight(q: torch.Tensor):
    weight = torch.quantize_per_tensor(q.dequantize(), 0.05, 0, torch.qint8)
    return torch.ops.quantized.linear_prepack(weight, None)


# Quantized kernels: the target's (QuantizedCPU has most of these, QuantizedCUDA
# a few), or the same exception type.
KERNELS = {
    "int_repr": lambda q: q.int_repr(),
    "dequantize": lambda q: q.dequantize(),
    "relu": lambda q: torch.relu(q),
    "relu_": lambda q: torch.relu_(q.clone()),
    "cat": lambda q: torch.cat([q, q], dim=1),
    "max.dim": lambda q: torch.max(q, dim=1),
    "min.dim": lambda q: torch.min(q, dim=0),
    "topk": lambda q: torch.topk(q, 2),
    "sort": lambda q: torch.sort(q, dim=1, stable=True),
    "index_select": lambda q: q.index_select(1, torch.tensor([0, 3, 3], device=q.device)),
    "masked_fill_": lambda q: q.clone().masked_fill_(q.dequantize() > 0, 1.0),
    "fill_": lambda q: q.clone().fill_(0.5),
    "eq": lambda q: torch.eq(q, q.flip(0)),
    "clamp": lambda q: torch.clamp(q, -0.5, 0.5),
    "sigmoid": lambda q: torch.sigmoid(q),
    "tanh": lambda q: torch.tanh(q),
    "gelu": lambda q: torch.nn.functional.gelu(q),
    "hardsigmoid": lambda q: torch.nn.functional.hardsigmoid(q),
    "leaky_relu": lambda q: torch.nn.functional.leaky_relu(q, 0.1),
    "mean.dim": lambda q: q.mean(dim=1),
    "max_pool2d": lambda q: torch.nn.functional.max_pool2d(q.reshape(1, 1, 4, 6), 2),
    "adaptive_avg_pool2d": lambda q: torch.nn.functional.adaptive_avg_pool2d(q.reshape(1, 1, 4, 6), (2, 2)),
    "upsample_nearest2d": lambda q: torch.nn.functional.interpolate(q.reshape(1, 1, 4, 6), scale_factor=2),
    "quantized.add": lambda q: torch.ops.quantized.add(q, q.flip(0), 0.1, 5),
    "quantized.add_relu": lambda q: torch.ops.quantized.add_relu(q, q.flip(0), 0.1, 5),
    "quantized.linear": lambda q: torch.ops.quantized.linear(q, prepacked_weight(q), 0.2, 3),
    "index_put_": lambda q: q.clone().index_put_((torch.tensor([1], device=q.device),), q[0].dequantize()),
}


@pytest.mark.parametrize("kernel", sorted(KERNELS))
def test_quantized_kernels_match_the_target(kernel):
    assert_same_outcome(lambda x: KERNELS[kernel](per_tensor(x)), sample(4, 6))


@pytest.mark.parametrize("call", ["sum", "exp", "matmul"])
def test_operators_without_a_target_kernel_raise_naming_accel(call):
    calls = {"sum": lambda q: q.sum(), "exp": lambda q: q.exp(), "matmul": lambda q: q @ q.t()}
    error = assert_same_outcome(lambda x: calls[call](per_tensor(x)), sample(4, 6))
    assert isinstance(error, NotImplementedError)
    assert_names_accel(error)


def test_the_error_names_the_operator_and_the_target_key():
    q = per_tensor(sample(4, 6)).to(ACCEL)
    with pytest.raises(NotImplementedError, match=r"'aten::exp.*accel device.*Quantized"):
        q.exp()


@pytest.mark.parametrize("qscheme", sorted(QSCHEMES))
def test_save_and_load(qscheme):
    q_target = QSCHEMES[qscheme](sample(4, 6))
    buffer = io.BytesIO()
    torch.save(q_target.to(ACCEL), buffer)
    buffer.seek(0)
    loaded = torch.load(buffer)
    assert loaded.device.type == ACCEL
    assert_same(loaded, q_target)
    buffer.seek(0)
    assert_same(torch.load(buffer, map_location="cpu"), q_target.cpu(), same_device=True)


def test_per_channel_parameters_on_another_device_are_refused():
    x = sample(4, 6).to(ACCEL)
    with pytest.raises(RuntimeError, match="accel:0 and cpu"):
        scales, zero_points = torch.ones(6, dtype=torch.double), torch.zeros(6, dtype=torch.long)
        torch.quantize_per_channel(x, scales, zero_points, 1, torch.qint8)
