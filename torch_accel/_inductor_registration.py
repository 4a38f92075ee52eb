"""Registers Inductor's backend for accel, for the runtime in use.

Which kernels Inductor generates for accel depends on the runtime, chosen once
per process:

- ``host``: accel memory is host memory and accel ops run CPU kernels, so
  Inductor generates C++ kernels (CppScheduling) exactly as for cpu.
- ``cuda``: accel memory is CUDA memory and the accel current stream is the
  current CUDA stream, so Inductor generates Triton kernels (TritonScheduling)
  exactly as for cuda, compiled for the CUDA target and launched on the accel
  current stream.

The wrapper around the kernels is _inductor_codegen's. Where Inductor has no
hook for what accel needs, _inductor_patches adapts it.

When: Inductor's init_backend_registration() looks up ``Scheduling``,
``PythonWrapperCodegen``, ``CppWrapperCodegen`` and ``WrapperFxCodegen`` on the
PrivateUse1 device module. torch.accel answers from its module ``__getattr__``
by calling ``inductor_backend()``, which registers accel's backend, once. So
``import torch_accel`` never imports Inductor, and a process that never
compiles registers nothing. (A process that set up Inductor's backends before
importing torch_accel is never asked: ``register_if_inductor_loaded()``, called
at import, covers it.)

Why accel registers itself instead of letting init_backend_registration()
register what it looked up: only register_backend_for_device's full form takes
the custom pass that keys Inductor's FX graph cache on accel's runtime and code
(``AccelCodegenIdentity``). init_backend_registration() registers a PrivateUse1
backend only when all of Scheduling, PythonWrapperCodegen and CppWrapperCodegen
exist, and accel has no C++ wrapper (``CppWrapperCodegen`` is None: cpp_wrapper
and AOTInductor do not know the accel device), so it leaves accel's own
registration in place. test_compile checks that it does.

This module imports Inductor only inside its functions: importing it is free.
"""

import functools
import sys
from typing import NamedTuple, Optional

_DEVICE_TYPE = "accel"
RUNTIMES = ("host", "cuda")


class InductorBackend(NamedTuple):
    """Inductor's code generators for accel, by the names torch.accel exposes them under."""

    Scheduling: type
    PythonWrapperCodegen: type
    CppWrapperCodegen: Optional[type]
    WrapperFxCodegen: type


def backend_for_runtime(runtime: str) -> InductorBackend:
    """The code generators for accel on ``runtime`` ("host" or "cuda"). Registers nothing."""
    from torch._inductor.codegen.wrapper_fxir import WrapperFxCodegen

    from ._inductor_codegen import AccelWrapperCodegen

    if runtime == "host":
        from torch._inductor.codegen.cpp import CppScheduling

        return InductorBackend(CppScheduling, AccelWrapperCodegen, None, WrapperFxCodegen)
    if runtime == "cuda":
        # TritonScheduling, not cuda's CUDACombinedScheduling: the CUDA C++
        # templates (CUTLASS) that the latter adds under max-autotune
        # generate code for cuda devices only.
        from torch._inductor.codegen.triton import TritonScheduling

        return InductorBackend(TritonScheduling, AccelWrapperCodegen, None, WrapperFxCodegen)
    raise ValueError(f"accel has no Inductor backend for the runtime {runtime!r}; expected one of {RUNTIMES}")


def register(runtime: str) -> InductorBackend:
    """Register Inductor's backend for accel on ``runtime``; returns what was registered."""
    from torch._inductor.codegen.common import (
        get_device_op_overrides,
        register_backend_for_device,
        register_device_op_overrides,
    )

    from ._inductor_codegen import AccelCodegenIdentity, device_op_overrides
    from ._inductor_patches import apply_inductor_patches

    backend = backend_for_runtime(runtime)
    apply_inductor_patches(runtime)
    # Inductor loads its own device op overrides on the first lookup, and only
    # while none is registered at all: load them before adding accel's.
    get_device_op_overrides("cpu")
    register_device_op_overrides(_DEVICE_TYPE, device_op_overrides(runtime))
    register_backend_for_device(
        _DEVICE_TYPE,
        backend.Scheduling,
        backend.PythonWrapperCodegen,
        backend.CppWrapperCodegen,
        backend.WrapperFxCodegen,
        device_custom_pass=AccelCodegenIdentity(runtime),
    )
    return backend


@functools.cache
def inductor_backend() -> InductorBackend:
    """Register accel's backend for this process's runtime, once, and return it."""
    import torch_accel

    return register(torch_accel.runtime())


def register_if_inductor_loaded() -> None:
    """At ``import torch_accel``: if Inductor's backends were already set up
    (init_backend_registration is cached and will not ask torch.accel again),
    register accel's now; otherwise wait to be asked."""
    common = sys.modules.get("torch._inductor.codegen.common")
    if common is not None and common.init_backend_registration.cache_info().currsize:
        inductor_backend()
