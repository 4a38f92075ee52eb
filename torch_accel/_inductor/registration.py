"""Registers Inductor's backend for accel, and applies the patches of Inductor it needs.

What Inductor generates for accel (C++ or Triton kernels, Triton's
interpreter) is codegen_config's; the wrapper around the kernels is
codegen's. Where PyTorch has no hook for what accel needs, a module of this
package per area adapts it (fake_tensor, backend_choice, device_properties,
convolution, lowering, graphs, flex_attention, interpreter), each patch declared in
torch_accel/_patches.py with the hash of the source it adapts. This module
alone applies them, each when its area needs it:

- at ``import torch_accel``: FakeTensor's (apply_fake_tensor_patches), which
  every tracer uses;
- as soon as torch.nn.attention.flex_attention has executed: its own
  (apply_flex_attention_patches, called by torch_accel._dynamo.registration);
- as soon as torch._inductor.utils has executed, where accel's kernels are
  Triton's: accel among Inductor's GPU types (join_gpu_types, called by
  torch_accel._dynamo.registration);
- when accel's backend registers (register): the others, for the
  configuration registered.

When the backend registers: Inductor's init_backend_registration() looks up
``Scheduling``, ``PythonWrapperCodegen``, ``CppWrapperCodegen`` and
``WrapperFxCodegen`` on the PrivateUse1 device module. torch.accel answers
from its module ``__getattr__`` by calling ``inductor_backend()``, which
registers accel's backend, once. So ``import torch_accel`` never imports
Inductor, and a process that never compiles registers nothing. (A process
that set up Inductor's backends before importing torch_accel is never asked:
``register_if_inductor_loaded()``, called at import, covers it.)

Why accel registers itself instead of letting init_backend_registration()
register what it looked up: only register_backend_for_device's full form takes
the custom pass that keys Inductor's FX graph cache on accel's runtime and code
(``AccelCodegenIdentity``). init_backend_registration() registers a PrivateUse1
backend only when all of Scheduling, PythonWrapperCodegen and CppWrapperCodegen
exist; torch.accel answers ``CppWrapperCodegen`` with None (accel's C++
wrapper, cpp_wrapper.AccelCppWrapperCpu, is registered here with the rest), so
it leaves accel's own registration in place. test_compile checks that it does.

This module imports Inductor, codegen_config and the patch modules only
inside its functions: importing it, at ``import torch_accel``, is free.
"""

import functools
import os
import sys
from typing import TYPE_CHECKING, NamedTuple, Optional

from .. import _patches
from .._core import DEVICE_TYPE

if TYPE_CHECKING:
    from .codegen_config import CodegenConfig


class InductorBackend(NamedTuple):
    """Inductor's code generators for accel, by the names torch.accel exposes them under."""

    Scheduling: type
    PythonWrapperCodegen: type
    CppWrapperCodegen: Optional[type]
    WrapperFxCodegen: type


def backend_for(kernels: str) -> InductorBackend:
    """The code generators for accel generating ``kernels`` ("cpp" or "triton"). Registers nothing."""
    from torch._inductor.codegen.wrapper_fxir import WrapperFxCodegen

    from .codegen import AccelWrapperCodegen

    if kernels == "cpp":
        from torch._inductor.codegen.cpp import CppScheduling

        from .cpp_wrapper import AccelCppWrapperCpu

        return InductorBackend(CppScheduling, AccelWrapperCodegen, AccelCppWrapperCpu, WrapperFxCodegen)
    if kernels == "triton":
        # TritonScheduling, not cuda's CUDACombinedScheduling: the CUDA C++
        # templates (CUTLASS) that the latter adds under max-autotune
        # generate code for cuda devices only.
        from torch._inductor.codegen.triton import TritonScheduling

        from .cpp_wrapper import AccelCppWrapperGpu

        return InductorBackend(TritonScheduling, AccelWrapperCodegen, AccelCppWrapperGpu, WrapperFxCodegen)
    from .codegen_config import KERNELS

    raise ValueError(f"accel has no Inductor backend generating {kernels!r} kernels; expected one of {KERNELS}")


def prepare_triton_interpreter() -> None:
    """At ``import torch_accel``: with TORCH_ACCEL_INDUCTOR=triton on the host
    runtime, set TRITON_INTERPRET=1 for this process.

    Triton reads it when its functions are defined: ``triton.jit`` makes an
    interpreted function only while it is set, and the kernels Inductor
    generates call jit functions of triton.language and of Inductor's
    triton_helpers, defined when those modules are imported (Dynamo imports
    Triton). So it must be set before Triton is imported, which the
    registration of accel's backend (at the first compile) is too late for.
    """
    # codegen_config.MODE_VARIABLE, read without importing it.
    if os.environ.get("TORCH_ACCEL_INDUCTOR") != "triton" or "triton" in sys.modules:
        return
    from .codegen_config import codegen_config

    try:
        config = codegen_config()
    except (ValueError, RuntimeError):
        return  # compiling for accel reports it
    if config.interpreted:
        os.environ.setdefault("TRITON_INTERPRET", "1")


def _check_triton_interpreter() -> None:
    """Triton's interpreter runs the kernels of this process (see prepare_triton_interpreter)."""
    from .codegen_config import MODE_VARIABLE

    value = os.environ.get("TRITON_INTERPRET", "")
    if value != "1":
        raise ValueError(
            f"{MODE_VARIABLE}=triton runs Triton kernels through Triton's interpreter on the host runtime, "
            f"which needs TRITON_INTERPRET=1; it is {value!r} (leave it unset or set it to 1)"
        )
    import triton.language
    from triton.runtime.interpreter import InterpretedFunction

    if not isinstance(triton.language.sigmoid, InterpretedFunction):
        raise RuntimeError(
            f"{MODE_VARIABLE}=triton: Triton was imported before torch_accel set TRITON_INTERPRET=1, so its "
            "functions are compiled, not interpreted; set TRITON_INTERPRET=1 in the environment (or import "
            "torch_accel before triton)"
        )


def apply_fake_tensor_patches() -> None:
    """At ``import torch_accel``: FakeTensor's patches (FakeTensor is loaded with torch)."""
    from . import fake_tensor

    _patches.apply(fake_tensor.convolution_layout)


def apply_flex_attention_patches() -> None:
    """Once torch.nn.attention.flex_attention has executed: it accepts accel
    as accel's target (see flex_attention)."""
    from . import flex_attention

    _patches.apply(flex_attention.validate_device, flex_attention.kernel_options_as_target)


def join_gpu_types() -> None:
    """Once torch._inductor.utils has executed: where accel's kernels are
    Triton's (the CUDA runtime, or TORCH_ACCEL_INDUCTOR=triton), accel is one
    of Inductor's GPU types (see backend_choice.gpu_types)."""
    from .codegen_config import generates_triton

    if generates_triton():
        from . import backend_choice

        _patches.apply(backend_choice.gpu_types)


def _apply_inductor_patches(config: "CodegenConfig") -> None:
    """The patches of Inductor for accel's backend registering with ``config``
    (each applied once per process; the patches read ``config`` through
    codegen_config.registered())."""
    from . import backend_choice, convolution, cpp_wrapper, device_properties, flex_attention, graphs, lowering
    from .codegen_config import set_registered

    set_registered(config)
    _patches.apply(
        flex_attention.lowering_as_target,
        flex_attention.split_k_for_accel,
        flex_attention.config_heuristics_as_target,
        backend_choice.current_backend,
        backend_choice.ir_is_cpu,
        backend_choice.scheduler_node_is_cpu,
        lowering.div_by_constant,
        convolution.layout_optimization,
        convolution.convolution_lowering,
        graphs.skip_message,
        graphs.lowering_check,
        graphs.accel_graphed_post_compile,
        cpp_wrapper.wrapper_header,
        cpp_wrapper.compile_options,
    )
    if config.kernels == "triton":
        _patches.apply(
            backend_choice.gpu_types,  # applied once torch._inductor.utils loaded; a no-op then
            device_properties.accel_as_cuda,
            lowering.mix_order_reduction,
            lowering.online_softmax,
            lowering.bmm_as_mm,
            lowering.sdpa_bias_alignment,
        )
    if config.interpreted:
        from . import interpreter

        _patches.apply(
            interpreter.has_triton_without_gpu,
            interpreter.backend_without_driver,
            interpreter.no_gpu_driver,
            interpreter.libdevice_functions,
            interpreter.tensor_index_for_numpy_2_4,
        )


def register(config: "CodegenConfig") -> InductorBackend:
    """Register Inductor's backend for accel as ``config`` says; returns what was registered."""
    from torch._inductor.codegen.common import (
        get_device_op_overrides,
        register_backend_for_device,
        register_device_op_overrides,
    )

    from .codegen import AccelCodegenIdentity, device_op_overrides

    backend = backend_for(config.kernels)
    if config.interpreted:
        _check_triton_interpreter()
        from .cpp_wrapper import InterpretedKernelsRefusal

        backend = backend._replace(CppWrapperCodegen=InterpretedKernelsRefusal)
    if backend.CppWrapperCodegen is not None:
        from .cpp_wrapper import load_shim

        load_shim()
    _apply_inductor_patches(config)
    # Inductor loads its own device op overrides on the first lookup, and only
    # while none is registered at all: load them before adding accel's.
    get_device_op_overrides("cpu")
    register_device_op_overrides(DEVICE_TYPE, device_op_overrides(config.kernels))
    register_backend_for_device(
        DEVICE_TYPE,
        backend.Scheduling,
        backend.PythonWrapperCodegen,
        backend.CppWrapperCodegen,
        backend.WrapperFxCodegen,
        device_custom_pass=AccelCodegenIdentity(config),
    )
    return backend


def _backend_reporting(error: Exception) -> InductorBackend:
    """A backend that raises ``error`` when Inductor generates code for an accel graph.

    A bad configuration must not break torch.compile for other devices:
    Inductor asks torch.accel for its backend while it sets up every
    device's (init_backend_registration), whatever the graph compiled.
    """
    from torch._inductor.codegen.wrapper_fxir import WrapperFxCodegen

    from .codegen import AccelWrapperCodegen

    class MisconfiguredScheduling:
        def __init__(self, *args: object, **kwargs: object) -> None:
            raise type(error)(*error.args)

    return InductorBackend(MisconfiguredScheduling, AccelWrapperCodegen, None, WrapperFxCodegen)


@functools.cache
def inductor_backend() -> InductorBackend:
    """Register accel's backend for this process's configuration, once, and return it."""
    from .codegen_config import codegen_config

    try:
        config = codegen_config()
    except (ValueError, RuntimeError) as error:  # a bad TORCH_ACCEL_INDUCTOR or TORCH_ACCEL_RUNTIME
        from torch._inductor.codegen.common import register_backend_for_device

        backend = _backend_reporting(error)
        register_backend_for_device(DEVICE_TYPE, *backend)
        return backend
    return register(config)


def register_if_inductor_loaded() -> None:
    """At ``import torch_accel``: if Inductor's backends were already set up
    (init_backend_registration is cached and will not ask torch.accel again),
    register accel's now; otherwise wait to be asked."""
    common = sys.modules.get("torch._inductor.codegen.common")
    if common is not None and common.init_backend_registration.cache_info().currsize:
        inductor_backend()
