"""FlexAttention on accel: accel is routed as its target (cpu or cuda).

PyTorch 2.11's FlexAttention (torch.nn.attention.flex_attention, its
higher-order op and Inductor's flex lowerings) decides by device type: which
devices it accepts at all, what cpu cannot do (backward, returning the
log-sum-exp or the max scores), which kernel the compiled op lowers to (the
C++ template for cpu, the Triton templates for every other device), which
block sizes the Triton templates take (a heuristic per device type) and how
many splits the Triton decoding kernel makes (the SM count of cuda's current
device). accel runs its target's kernels, so each of these answers is the
target's: cpu where Inductor generates C++ for accel (the host runtime), cuda
where it generates Triton (the CUDA runtime, and the Triton mode of the host
runtime, which generates the CUDA runtime's code). The target is asked of
the runtime (codegen_config), never assumed from the runtime's name.

The eager op is the higher-order op's own implementation (torch ops on the
tensors' device): nothing of it is adapted.

Declared in torch_accel/_patches.py with the hashes of the sources they
adapt; applied by registration: the torch.nn.attention ones as soon as that
module has executed (it is loaded on first use, and imports Dynamo and
Triton: ``import torch_accel`` does not import it), the Inductor ones when
accel's backend registers.
"""

from typing import Any

import torch

from .._core import DEVICE_TYPE
from .._patches import patch
from .codegen_config import codegen_config, registered


@torch.compiler.assume_constant_result
def _target_is_cpu() -> bool:
    """Whether accel's FlexAttention is cpu's (C++ kernels); otherwise cuda's (Triton kernels).

    A constant for Dynamo, which traces the torch.nn.attention functions
    below when flex_attention is compiled (and when it runs eagerly: it runs
    through torch.compile with the eager backend)."""
    return codegen_config().target == "cpu"


def _is_accel(tensor: torch.Tensor) -> bool:
    return tensor.device.type == DEVICE_TYPE


# --- torch.nn.attention.flex_attention: which devices, and what cpu cannot do --
#
# Adapts _validate_device, which accepts cuda, cpu, xpu and hpu only
# ("FlexAttention is only supported on CUDA, CPU or HPU devices") and refuses
# inputs requiring grad on cpu (Inductor has no C++ template for the
# backward), and _apply_kernel_options, which on cpu never asks the forward
# kernel for the log-sum-exp unless the caller wants it (the C++ template
# cannot produce it) and refuses to return the max scores. accel is accepted,
# with cpu's limits where its target is cpu.


@patch("torch.nn.attention.flex_attention._validate_device")
def validate_device(original: Any) -> None:
    from torch.nn.attention import flex_attention as module

    def _validate_device(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor) -> None:
        if not _is_accel(query):
            return original(query, key, value)
        if _target_is_cpu() and (query.requires_grad or key.requires_grad or value.requires_grad):
            raise NotImplementedError(
                "FlexAttention does not support backward on accel with the host runtime's C++ kernels, as on cpu "
                "(its target): set requires_grad=False on the query, key and value, or set "
                "TORCH_ACCEL_INDUCTOR=triton (Triton kernels, run by Triton's interpreter)"
            )

    _validate_device.__doc__ = original.__doc__
    module._validate_device = _validate_device


@patch("torch.nn.attention.flex_attention._apply_kernel_options")
def kernel_options_as_target(original: Any) -> None:
    from torch.nn.attention import flex_attention as module

    def _apply_kernel_options(
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        return_lse: bool,
        kernel_options: Any,
        return_aux: Any = None,
    ) -> dict[str, Any]:
        options = original(query, key, value, return_lse, kernel_options, return_aux)
        if not (_is_accel(query) and _target_is_cpu()):
            return options
        # As for inputs on cpu: the log-sum-exp only when asked for, never the max scores.
        if not (return_aux.lse if return_aux is not None else return_lse):
            options["OUTPUT_LOGSUMEXP"] = False
        if options["OUTPUT_MAX"]:
            raise NotImplementedError(
                "Returning max scores is not supported on accel with the host runtime's C++ kernels, as on cpu (its target)."
            )
        return options

    _apply_kernel_options.__doc__ = original.__doc__
    module._apply_kernel_options = _apply_kernel_options


# --- Inductor: the flex_attention lowering takes the target's template --------
#
# Adapts the lowering of torch.ops.higher_order.flex_attention
# (torch._inductor.kernel.flex.flex_attention.flex_attention), which lowers to
# the C++ template (lower_cpu) for cpu and to the Triton templates for every
# other device type. An accel graph on a cpu target takes lower_cpu: the same
# template and code as cpu's. On a cuda target the lowering is left as it
# is. The lowering is registered in Inductor's lowerings table (the module
# attribute is only its registered wrapper), so the table's entry is replaced.


@patch("torch._inductor.kernel.flex.flex_attention.flex_attention")
def lowering_as_target(original: Any) -> None:
    from torch._inductor.kernel.flex.flex_cpu import lower_cpu
    from torch._inductor.lowering import lowerings

    def flex_attention(query: Any, *args: Any, **kwargs: Any) -> Any:
        if query.get_device().type == DEVICE_TYPE and registered().target == "cpu":
            return lower_cpu(query, *args, **kwargs)
        return original(query, *args, **kwargs)

    flex_attention.__doc__ = original.__doc__
    operator = torch.ops.higher_order.flex_attention
    assert lowerings[operator] is original, "the flex_attention lowering is not the one this patch adapts"
    lowerings[operator] = flex_attention


# --- Inductor, Triton decoding: the SM count of accel's device ----------------
#
# Adapts torch._inductor.kernel.flex.flex_decoding.get_split_k, which splits
# the keys of a short query (the decoding kernel) into two splits per SM of
# cuda's current device (torch.cuda.get_device_properties("cuda")). For an
# accel query the SMs are those of the query's device as Inductor describes it
# (DeviceProperties: the GPU on the CUDA runtime, the interpreted CUDA device
# in the Triton mode, where no cuda device exists to ask). get_split_k is
# given no device: the query is the first argument of the node being lowered.


@patch("torch._inductor.kernel.flex.flex_decoding.get_split_k")
def split_k_for_accel(original: Any) -> None:
    from torch._inductor.kernel.flex import flex_decoding
    from torch._inductor.runtime.hints import DeviceProperties
    from torch._inductor.virtualized import V

    def get_split_k(B: int, H: int, Mk: int) -> int:
        node = V.graph.current_node
        query = node.args[0].meta.get("val") if node is not None and node.args else None
        if not (isinstance(query, torch.Tensor) and _is_accel(query)):
            return original(B, H, Mk)
        num_sm = DeviceProperties.create(query.device).multi_processor_count
        # The rest of the 2.11 rule: two splits per SM over the batch and heads, at least one.
        return max(num_sm // max(B * H, 1) * 2, 1)

    get_split_k.__doc__ = original.__doc__
    flex_decoding.get_split_k = get_split_k


# --- Inductor: the target's template configurations ---------------------------
#
# Adapts torch._inductor.choices.InductorChoices.get_config_heuristics, which
# picks the block sizes, warps and stages of the Triton templates (the flex
# attention, flex decoding and convolution configurations) by device type,
# and for a type it does not know returns the base heuristic, which has no
# flex configurations at all (Inductor then finds "No choices to select").
# accel gets its target's heuristic: cuda's where its kernels are Triton's.
# cuda's asks torch.cuda.get_device_capability() (the current cuda device:
# accel's current device on the CUDA runtime). In the Triton mode of the host
# runtime there is no cuda device: while the heuristic decides, the
# capability is the interpreted CUDA device's (device_properties), so the
# configurations are those that device would get. Only for calls on that
# heuristic, only in that mode, on the compiling thread; the binding is then
# restored, not declared as a patch of its own (the opt-in of _transfer owns
# that name in the registry, and one name has one patch).


@patch("torch._inductor.choices.InductorChoices.get_config_heuristics")
def config_heuristics_as_target(get_config_heuristics: Any) -> None:
    from torch._inductor.choices import InductorChoices

    from .device_properties import INTERPRETED_CUDA_DEVICE

    capability = (INTERPRETED_CUDA_DEVICE["major"], INTERPRETED_CUDA_DEVICE["cc"] % 10)

    def interpreted_device_capability(device: Any = None) -> tuple[int, int]:
        return capability

    class OnInterpretedDevice:
        """A heuristic whose methods see the interpreted CUDA device's capability."""

        def __init__(self, heuristic: Any) -> None:
            self._heuristic = heuristic

        def __getattr__(self, name: str) -> Any:
            attribute = getattr(self._heuristic, name)
            if not callable(attribute):
                return attribute

            def call(*args: Any, **kwargs: Any) -> Any:
                # Whatever is bound now comes back: PyTorch's function, or the
                # CUDA-program opt-in's (_transfer, the registry's one patch of
                # torch.cuda.get_device_capability, docs/cuda-programs.md).
                bound = torch.cuda.get_device_capability
                torch.cuda.get_device_capability = interpreted_device_capability
                try:
                    return attribute(*args, **kwargs)
                finally:
                    torch.cuda.get_device_capability = bound

            return call

    def get_config_heuristics_for_target(self: Any, device_type: Any = "cuda") -> Any:
        if device_type != DEVICE_TYPE:
            return get_config_heuristics(self, device_type)
        config = registered()
        heuristic = get_config_heuristics(self, config.target)
        return OnInterpretedDevice(heuristic) if config.interpreted else heuristic

    get_config_heuristics_for_target.__doc__ = get_config_heuristics.__doc__
    InductorChoices.get_config_heuristics = get_config_heuristics_for_target  # type: ignore[method-assign]
