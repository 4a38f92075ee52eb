"""Inductor's choices by device type in lowerings, FX passes and fusion, made for accel as for its code's target.

accel's code is generated for cpu (C++) or for cuda (Triton) (codegen_config).
Where Inductor 2.11 makes a choice for the cpu or the cuda device type only,
the patches here make it for accel too, so that compiled accel computes what
compiled cpu or cuda computes, and as fast:

- cpu: a division by a constant stays a division (lowering.div_prim);
- cuda: mix-order reduction fusion (scheduler.MixOrderReduction.can_fuse),
  online softmax (fx_passes.post_grad.prepare_softmax_extra_check), bmm of
  batch 1 as mm (fx_passes.joint_graph.bmm_to_mm), SDPA's attention bias
  aligned (lowering.sdpa_constraint).

Each adaptation lets the original see accel as the target at the one point
where it asks for the device type. The patches are declared in
torch_accel/_patches.py with the hashes of the sources they adapt, and applied
by registration (those for cuda where accel's kernels are Triton's).
"""

import inspect
from typing import Any, Optional

import torch

from .._core import DEVICE_TYPE
from .._patches import patch
from .codegen_config import registered



# --- C++ kernels: a division by a constant is a division ----------------------
#
# Adapts torch._inductor.lowering.div_prim, the lowering of prims.div (and,
# through it, of aten.div): for every device type but cpu it replaces a
# division by a constant with a multiplication by its reciprocal, which is
# not always the same float; on cpu it keeps the division, as eager does
# (pytorch/pytorch#157959). Where accel's code is generated for cpu, accel keeps it too,
# so compiled accel computes what compiled cpu does, bit for bit. The
# lowering is registered again (same options) around the original one.


@patch("torch._inductor.lowering.div_prim")
def div_by_constant(registered_lowering: Any) -> None:
    from torch._inductor import lowering
    from torch._inductor.virtualized import ops

    original = inspect.unwrap(registered_lowering)

    def div_prim(a: Any, b: Any) -> Any:
        if (
            registered().target == "cpu"
            and isinstance(a, lowering.ir.IRNode)
            and lowering.ir.get_device_type(a) == DEVICE_TYPE
            and lowering.get_constant_value(b) is not None
            and not all(lowering.is_boolean_type(x) or lowering.is_integer_type(x) for x in (a, b))
        ):
            # The original's cpu path: a true division.
            return lowering.make_pointwise(lambda *args: ops.truediv(*args))(a, b)
        return original(a, b)

    div_prim.__doc__ = original.__doc__
    lowering.div_prim = lowering.register_lowering([torch.ops.prims.div], broadcast=True)(div_prim)


# --- Triton kernels: the choices Inductor makes for cuda -----------------------
#
# Where accel's code is generated for cuda (the CUDA runtime or the
# interpreter mode that generates its code), the choices Inductor 2.11 makes
# for the cuda device type only are made for accel too, so that accel's
# Triton code is cuda's for the same graph:
#
# - mix-order reduction fusion (scheduler.MixOrderReduction.can_fuse): two
#   reductions of one tensor along different dimensions (a layer norm's
#   backward: the input gradient reduces rows, the weight gradient columns)
#   fuse into one kernel; only for device types cuda and xpu.
# - online softmax (post_grad.prepare_softmax_extra_check): a softmax's max
#   and sum computed in one pass over the row (the online algorithm) where the
#   reduction is not persistent (rows wider than Inductor keeps in registers);
#   only for cuda and xpu. It rounds differently from the two-pass softmax, so
#   it is about bits as well as speed.
# - bmm of batch 1 as mm (joint_graph.bmm_to_mm): only for get_gpu_type(),
#   which is cuda where accel's code is Triton (see backend_choice.gpu_types).
# - SDPA's attention bias aligned (lowering.sdpa_constraint): the bias of the
#   memory-efficient attention gets strides aligned to 8 elements, which
#   CUDA's kernel requires ("attn_bias is not correctly aligned"); only for
#   tensors with is_cuda. Without it, compiled efficient attention with a
#   computed bias whose rows are not a multiple of 8 long fails on accel.


def _device_seen_as_target(device: Optional[torch.device]) -> Optional[torch.device]:
    if device is not None and device.type == DEVICE_TYPE:
        return torch.device(registered().target, device.index)
    return device


@patch("torch._inductor.scheduler.MixOrderReduction.can_fuse")
def mix_order_reduction(original: Any) -> None:
    # ``original`` is the classmethod's function.
    from torch._inductor.scheduler import MixOrderReduction

    def can_fuse(cls: type, node1: Any, node2: Any) -> bool:
        device = node1.get_device()
        if device is None or device.type != DEVICE_TYPE:
            return original(cls, node1, node2)
        # The original reads the device type from node1.get_device() once;
        # node1 answers the target for the duration of the call.
        node1.get_device = lambda: _device_seen_as_target(device)
        try:
            return original(cls, node1, node2)
        finally:
            del node1.get_device

    can_fuse.__doc__ = original.__doc__
    MixOrderReduction.can_fuse = classmethod(can_fuse)  # type: ignore[method-assign, assignment]


@patch("torch._inductor.fx_passes.post_grad.prepare_softmax_extra_check")
def online_softmax(original: Any) -> None:
    from torch._inductor import config
    from torch._inductor.fx_passes import post_grad
    from torch._inductor.utils import get_current_backend

    def prepare_softmax_extra_check(match: Any) -> bool:
        if match.kwargs["x"].meta["val"].device.type == DEVICE_TYPE:
            # The original's condition for cuda, with accel's backend (config.cuda_backend is cuda's).
            return bool(config.online_softmax) and get_current_backend(DEVICE_TYPE) == "triton"
        return original(match)

    prepare_softmax_extra_check.__doc__ = original.__doc__
    # post_grad's lazy_init registers the pattern with the module's function,
    # on the first post-grad pass: after init_backend_registration, which
    # registers accel's backend.
    post_grad.prepare_softmax_extra_check = prepare_softmax_extra_check


@patch("torch._inductor.fx_passes.joint_graph.bmm_to_mm", "torch._inductor.fx_passes.decompose_mem_bound_mm.check_device")
def bmm_as_mm(bmm_to_mm: Any, original: Any) -> None:
    # bmm_to_mm asks check_device(a, b, device=get_gpu_type()); joint_graph
    # imported check_device by name.
    from torch._inductor.fx_passes import joint_graph

    def check_device(a: torch.Tensor, b: torch.Tensor, device: str = "cuda") -> bool:
        if a.device.type == b.device.type == DEVICE_TYPE:
            return registered().target == device
        return original(a, b, device)

    check_device.__doc__ = original.__doc__
    # bmm_to_mm is joint_graph's only caller of check_device.
    joint_graph.check_device = check_device  # type: ignore[attr-defined]


class _SeenOnCuda:
    """A tensor's fake value, except that it reports is_cuda."""

    is_cuda = True

    def __init__(self, value: Any) -> None:
        self._value = value

    def __getattr__(self, name: str) -> Any:
        return getattr(self._value, name)


class _FxArgSeenOnCuda:
    def __init__(self, node: Any) -> None:
        self.meta = {**node.meta, "val": _SeenOnCuda(node.meta["val"])}


class _FxNodeSeenOnCuda:
    """What sdpa_constraint reads of an FX node (target, args, kwargs and their
    fake values), with accel tensors reported as cuda tensors."""

    def __init__(self, node: torch.fx.Node) -> None:
        def seen(arg: Any) -> Any:
            value = getattr(arg, "meta", {}).get("val")
            return _FxArgSeenOnCuda(arg) if isinstance(value, torch.Tensor) and value.device.type == DEVICE_TYPE else arg

        self.target = node.target
        self.args = tuple(seen(a) for a in node.args)
        self.kwargs = {k: seen(v) for k, v in node.kwargs.items()}


@patch("torch._inductor.lowering.sdpa_constraint")
def sdpa_bias_alignment(original: Any) -> None:
    from torch._inductor import lowering

    def sdpa_constraint(fx_node: torch.fx.Node, *args: Any, **kwargs: Any) -> Any:
        if registered().target == "cuda":
            return original(_FxNodeSeenOnCuda(fx_node), *args, **kwargs)
        return original(fx_node, *args, **kwargs)

    sdpa_constraint.__doc__ = original.__doc__
    lowering.sdpa_constraint = sdpa_constraint
    # The lowerings registered it with their fallbacks (make_fallback).
    constraints = lowering._maybe_layout_constraints
    for op, constraint in list(constraints.items()):
        if constraint is original:
            constraints[op] = sdpa_constraint
