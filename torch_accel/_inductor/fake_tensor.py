"""FakeTensor: accel convolutions have the target's output layout.

FakeTensor is what Dynamo, AOTAutograd and Inductor all trace with.

Adapts torch._subclasses.fake_impls.conv, FakeTensor's rule for
aten.convolution and aten.convolution_backward. It predicts the output's
memory format from the backend ATen would select for the input's device; for
PrivateUse1 that is ConvBackend::Overrideable, which it predicts contiguous.
accel's convolution_overrideable runs the target's aten::convolution, whose
output is channels-last for channels-last inputs (CPU and cuDNN alike). The
mismatch makes Inductor's generated code fail its stride assertions (and
Inductor picks channels-last for convolutions by itself). The adapted rule
computes accel convolutions as fake tensors on the target device.

Applied at ``import torch_accel`` (registration.apply_fake_tensor_patches):
FakeTensor is loaded with torch, so adapting it costs nothing, and every
tracer then sees it.
"""

from typing import Any

import torch

from .._core import DEVICE_TYPE, _target_device_type
from .._patches import patch



def _target_device(device: torch.device) -> torch.device:
    target = _target_device_type()
    return torch.device(target, device.index) if target != "cpu" else torch.device("cpu")


def _refake(fake_mode: Any, tensor: Any, device: torch.device) -> Any:
    """The same fake tensor (a view of its meta storage) reported on ``device``."""
    from torch._subclasses.fake_tensor import FakeTensor, in_kernel_invocation_manager

    with in_kernel_invocation_manager(fake_mode):
        meta = torch.ops.aten.alias.default(tensor)
    return FakeTensor(fake_mode, meta, device)


@patch("torch._subclasses.fake_impls.conv")
def convolution_layout(original: Any) -> None:
    from torch._subclasses import fake_impls
    from torch._subclasses.fake_tensor import FakeTensor
    from torch.utils._pytree import tree_map

    def conv(fake_mode: Any, func: Any, *args: Any, **kwargs: Any) -> Any:
        accel = next(
            (a.fake_device for a in (*args, *kwargs.values()) if isinstance(a, FakeTensor) and a.fake_device.type == DEVICE_TYPE),
            None,
        )
        if accel is None:
            return original(fake_mode, func, *args, **kwargs)
        target = _target_device(accel)

        def to_target(a: Any) -> Any:
            return _refake(fake_mode, a, target) if isinstance(a, FakeTensor) and a.fake_device == accel else a

        def to_accel(a: Any) -> Any:
            return _refake(fake_mode, a, accel) if isinstance(a, FakeTensor) else a

        args, kwargs = tree_map(to_target, (args, kwargs))
        return tree_map(to_accel, original(fake_mode, func, *args, **kwargs))

    for op in (torch.ops.aten.convolution.default, torch.ops.aten.convolution_backward.default):
        fake_impls._deregister_op_impl(op)
        fake_impls.register_op_impl(op)(conv)
