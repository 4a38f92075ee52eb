"""Inductor's choices for convolutions: accel convolutions are laid out and lowered as the target's.

accel convolutions run the target's aten::convolution (csrc/aten/Convolution.cpp):
oneDNN's on a cpu target, cuDNN's on cuda. Inductor decides the layout of a
graph's convolutions and how to lower them by device type; both decisions are
made for accel as for the device type accel's code is generated for
(codegen_config).

The patches are declared in torch_accel/_patches.py with the hashes of the
sources they adapt, and applied by registration.
"""

import types
from typing import Any

import torch

from .._core import DEVICE_TYPE
from .._patches import patch
from .codegen_config import registered



# --- the layout: channels-last where the target's convolutions are oneDNN's ----
#
# Adapts torch._inductor.graph.GraphLowering.decide_layout_opt, which decides
# whether a graph's convolutions (and the tensors around them) go
# channels-last. Its first rule: where every convolution runs on an mkldnn
# device type (SUPPORTED_MKLDNN_DEVICES: cpu, xpu), always, because oneDNN is
# faster channels-last; otherwise heuristics tuned for cuDNN, which keep small
# convolutions (<= 64 channels) contiguous. On a cpu target accel's
# convolutions are oneDNN's, and the first rule is the one that fits. The
# cost of the wrong rule is not only the convolution: Inductor's C++ kernels
# vectorize along the innermost dimension, so a contiguous
# max_pool2d_with_indices or its backward runs scalar (the CNN benchmark's
# training step spent about half its instructions in such a kernel). Decided
# by the code's target: with TORCH_ACCEL_INDUCTOR=triton on the host runtime,
# as on the CUDA runtime (whose code that mode generates; oneDNN takes either
# layout).


def _accel_runs_on_mkldnn() -> bool:
    from torch._inductor.utils import SUPPORTED_MKLDNN_DEVICES

    return (
        registered().target in SUPPORTED_MKLDNN_DEVICES
        and torch.backends.mkldnn.enabled
        and torch.backends.mkldnn.is_available()
    )


@patch("torch._inductor.graph.GraphLowering.decide_layout_opt")
def layout_optimization(original: Any) -> None:
    # ``original`` is the staticmethod's function.
    from torch._inductor import config
    from torch._inductor.graph import GraphLowering
    from torch._inductor.utils import SUPPORTED_MKLDNN_DEVICES

    def decide_layout_opt(gm: torch.fx.GraphModule, *, is_inference: bool) -> bool:
        decision = original(gm, is_inference=is_inference)
        if decision or not config.layout_optimization or not _accel_runs_on_mkldnn():
            return decision
        devices = [
            node.args[i].meta["val"].device.type
            for node in gm.graph.nodes
            if node.target is torch.ops.aten.convolution.default
            for i in (0, 1)
        ]
        # The original's first rule, with accel counted as the mkldnn device it runs on.
        return DEVICE_TYPE in devices and all(d == DEVICE_TYPE or d in SUPPORTED_MKLDNN_DEVICES for d in devices)

    decide_layout_opt.__doc__ = original.__doc__
    GraphLowering.decide_layout_opt = staticmethod(decide_layout_opt)  # type: ignore[method-assign, assignment]


# --- the lowering: the target's bias handling and templates -------------------
#
# Adapts torch._inductor.kernel.conv.convolution, the lowering of
# aten.convolution. It asks ir.get_device_type(x) for the input's device type
# and, for every type but cpu, peels the bias off the convolution into a
# separate add ("cudnn is slower with it"); the type also picks the autotuning
# configurations of its Triton templates (max-autotune). accel convolutions
# run the target's kernel, so the lowering should decide as for the target:
# on the host runtime, oneDNN's convolution with its bias, as for cpu (same
# extern call, same result), on the CUDA runtime (and in the Triton mode that
# generates its code) cuda's choices. The lowering reads the type through its
# module's ``ir``; that module global is replaced by a view of
# torch._inductor.ir whose get_device_type reports accel as the code's target
# (everything else is ir's own), so only kernel/conv.py sees it.


class _IrSeenByConvolutions(types.ModuleType):
    """torch._inductor.ir, except that get_device_type names accel's target."""

    def __init__(self, ir: types.ModuleType, target: str) -> None:
        super().__init__(ir.__name__, ir.__doc__)
        self._ir = ir
        self._target = target

    def __getattr__(self, name: str) -> Any:
        return getattr(self._ir, name)

    def get_device_type(self, x: Any) -> Any:
        device_type = self._ir.get_device_type(x)
        return self._target if device_type == DEVICE_TYPE else device_type


@patch("torch._inductor.kernel.conv.convolution")
def convolution_lowering(original: Any) -> None:
    from torch._inductor.kernel import conv

    conv.ir = _IrSeenByConvolutions(conv.ir, registered().target)  # type: ignore[attr-defined]
