"""FakeTensor / meta propagation for accel tensors, which torch.compile relies on."""

import torch
from torch._subclasses.fake_tensor import FakeTensorMode


def test_fake_accel_tensors_propagate_shapes_and_devices():
    with FakeTensorMode():
        x = torch.empty(4, 5, device="accel")
        y = torch.relu(x @ x.t()).sum(0)
        conv = torch.nn.functional.conv2d(torch.empty(2, 3, 8, 8, device="accel"), torch.empty(4, 3, 3, 3, device="accel"))
    assert y.shape == (4,) and y.device == torch.device("accel:0")
    assert conv.shape == (2, 4, 6, 6) and conv.device.type == "accel"


def test_from_real_accel_tensor_matches_real_results():
    real = torch.randn(3, 4, device="accel")
    expected = torch.nn.functional.layer_norm(real, (4,)).t().contiguous()
    with FakeTensorMode() as mode:
        fake = mode.from_tensor(real)
        out = torch.nn.functional.layer_norm(fake, (4,)).t().contiguous()
    assert out.device == real.device
    assert out.shape == expected.shape and out.stride() == expected.stride() and out.dtype == expected.dtype


def test_fake_mode_never_allocates_accel_memory():
    import torch_accel

    torch.empty(1, device="accel")
    before = torch_accel.memory_allocated()
    with FakeTensorMode():
        big = torch.empty(1 << 30, device="accel")
        (big * 2).sum()
    assert torch_accel.memory_allocated() == before


def test_fake_mixed_devices_is_an_error(two_devices):
    import pytest

    with FakeTensorMode():
        a = torch.empty(2, device="accel:0")
        b = torch.empty(2, device="accel:1")
        with pytest.raises(RuntimeError, match="accel:0.*accel:1|accel:1.*accel:0"):
            a + b
