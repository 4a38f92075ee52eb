"""Registers Inductor's backend for accel, for the runtime in use.

Which kernels Inductor generates for accel depends on the runtime, chosen once
per process, and on ``TORCH_ACCEL_INDUCTOR`` (``auto``, the default, ``cpp``
or ``triton``), read once per process when Dynamo or Inductor first needs it:

- host runtime, ``auto``/``cpp``: accel memory is host memory and accel ops
  run CPU kernels, so Inductor generates C++ kernels (CppScheduling) exactly
  as for cpu.
- CUDA runtime (``auto``/``triton``): accel memory is CUDA memory and the
  accel current stream is the current CUDA stream, so Inductor generates
  Triton kernels (TritonScheduling) exactly as for cuda, compiled for the
  CUDA target and launched on the accel current stream.
- host runtime, ``triton``: Inductor generates what it generates on the CUDA
  runtime (the same Triton kernels and wrapper, for a CUDA target described
  as an sm_90 GPU, see _inductor_patches) and Triton's interpreter
  (``TRITON_INTERPRET=1``) runs the kernels on accel's host memory. It runs
  the CUDA runtime's code generation where no GPU exists.

``CodegenConfig`` names the combination; its ``target`` ("cpu" or "cuda") is
the device type Inductor generates code for, which the patches key on.

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
import os
import sys
from typing import NamedTuple, Optional

_DEVICE_TYPE = "accel"
RUNTIMES = ("host", "cuda")
KERNELS = ("cpp", "triton")
# TORCH_ACCEL_INDUCTOR's values; auto: the runtime's own kernels (C++ on the
# host runtime, Triton on the CUDA runtime).
INDUCTOR_MODES = ("auto", "cpp", "triton")
_MODE_VARIABLE = "TORCH_ACCEL_INDUCTOR"


class CodegenConfig(NamedTuple):
    """What Inductor generates for accel in this process."""

    runtime: str  # where accel memory lives and which kernels eager ops run: "host" or "cuda"
    kernels: str  # the kernels Inductor generates: "cpp" or "triton"

    @property
    def target(self) -> str:
        """The device type Inductor generates code for: its choices by device type are this type's."""
        return "cuda" if self.kernels == "triton" else "cpu"

    @property
    def interpreted(self) -> bool:
        """Triton kernels run by Triton's interpreter on host memory (no GPU)."""
        return self.kernels == "triton" and self.runtime == "host"


def kernels_for_runtime(runtime: str) -> str:
    """The kernels TORCH_ACCEL_INDUCTOR chooses on ``runtime`` ("cpp" or "triton").

    Read strictly, as every TORCH_ACCEL_* variable: unset or empty is
    ``auto``; any other value must be one of INDUCTOR_MODES.
    """
    value = os.environ.get(_MODE_VARIABLE, "")
    mode = value or "auto"
    if mode not in INDUCTOR_MODES:
        raise ValueError(f"{_MODE_VARIABLE} must be one of {', '.join(INDUCTOR_MODES)}; got {value!r}")
    if mode == "auto":
        return "triton" if runtime == "cuda" else "cpp"
    if mode == "cpp" and runtime == "cuda":
        raise ValueError(
            f"{_MODE_VARIABLE}=cpp needs the host runtime: C++ kernels read host memory, and accel memory is "
            f"CUDA memory on the cuda runtime this process runs (set {_MODE_VARIABLE} to auto or triton)"
        )
    return mode


@functools.cache
def codegen_config() -> CodegenConfig:
    """This process's CodegenConfig (its runtime and TORCH_ACCEL_INDUCTOR), read once."""
    import torch_accel

    runtime = torch_accel.runtime()
    return CodegenConfig(runtime, kernels_for_runtime(runtime))


class InductorBackend(NamedTuple):
    """Inductor's code generators for accel, by the names torch.accel exposes them under."""

    Scheduling: type
    PythonWrapperCodegen: type
    CppWrapperCodegen: Optional[type]
    WrapperFxCodegen: type


def backend_for(kernels: str) -> InductorBackend:
    """The code generators for accel generating ``kernels`` ("cpp" or "triton"). Registers nothing."""
    from torch._inductor.codegen.wrapper_fxir import WrapperFxCodegen

    from ._inductor_codegen import AccelWrapperCodegen

    if kernels == "cpp":
        from torch._inductor.codegen.cpp import CppScheduling

        return InductorBackend(CppScheduling, AccelWrapperCodegen, None, WrapperFxCodegen)
    if kernels == "triton":
        # TritonScheduling, not cuda's CUDACombinedScheduling: the CUDA C++
        # templates (CUTLASS) that the latter adds under max-autotune
        # generate code for cuda devices only.
        from torch._inductor.codegen.triton import TritonScheduling

        return InductorBackend(TritonScheduling, AccelWrapperCodegen, None, WrapperFxCodegen)
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
    if os.environ.get(_MODE_VARIABLE) != "triton" or "triton" in sys.modules:
        return
    try:
        config = codegen_config()
    except (ValueError, RuntimeError):
        return  # compiling for accel reports it
    if config.interpreted:
        os.environ.setdefault("TRITON_INTERPRET", "1")


def _check_triton_interpreter() -> None:
    """Triton's interpreter runs the kernels of this process (see prepare_triton_interpreter)."""
    value = os.environ.get("TRITON_INTERPRET", "")
    if value != "1":
        raise ValueError(
            f"{_MODE_VARIABLE}=triton runs Triton kernels through Triton's interpreter on the host runtime, "
            f"which needs TRITON_INTERPRET=1; it is {value!r} (leave it unset or set it to 1)"
        )
    import triton.language
    from triton.runtime.interpreter import InterpretedFunction

    if not isinstance(triton.language.sigmoid, InterpretedFunction):
        raise RuntimeError(
            f"{_MODE_VARIABLE}=triton: Triton was imported before torch_accel set TRITON_INTERPRET=1, so its "
            "functions are compiled, not interpreted; set TRITON_INTERPRET=1 in the environment (or import "
            "torch_accel before triton)"
        )


def register(config: CodegenConfig) -> InductorBackend:
    """Register Inductor's backend for accel as ``config`` says; returns what was registered."""
    from torch._inductor.codegen.common import (
        get_device_op_overrides,
        register_backend_for_device,
        register_device_op_overrides,
    )

    from ._inductor_codegen import AccelCodegenIdentity, device_op_overrides
    from ._inductor_patches import apply_inductor_patches

    backend = backend_for(config.kernels)
    if config.interpreted:
        _check_triton_interpreter()
    apply_inductor_patches(config)
    # Inductor loads its own device op overrides on the first lookup, and only
    # while none is registered at all: load them before adding accel's.
    get_device_op_overrides("cpu")
    register_device_op_overrides(_DEVICE_TYPE, device_op_overrides(config.kernels))
    register_backend_for_device(
        _DEVICE_TYPE,
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

    from ._inductor_codegen import AccelWrapperCodegen

    class MisconfiguredScheduling:
        def __init__(self, *args: object, **kwargs: object) -> None:
            raise type(error)(*error.args)

    return InductorBackend(MisconfiguredScheduling, AccelWrapperCodegen, None, WrapperFxCodegen)


@functools.cache
def inductor_backend() -> InductorBackend:
    """Register accel's backend for this process's configuration, once, and return it."""
    try:
        config = codegen_config()
    except (ValueError, RuntimeError) as error:  # a bad TORCH_ACCEL_INDUCTOR or TORCH_ACCEL_RUNTIME
        from torch._inductor.codegen.common import register_backend_for_device

        backend = _backend_reporting(error)
        register_backend_for_device(_DEVICE_TYPE, *backend)
        return backend
    return register(config)


def generates_triton() -> bool:
    """Whether Inductor generates Triton kernels for accel in this process
    (False for a bad configuration, which compiling for accel reports)."""
    try:
        return codegen_config().kernels == "triton"
    except (ValueError, RuntimeError):
        return False


def register_if_inductor_loaded() -> None:
    """At ``import torch_accel``: if Inductor's backends were already set up
    (init_backend_registration is cached and will not ask torch.accel again),
    register accel's now; otherwise wait to be asked."""
    common = sys.modules.get("torch._inductor.codegen.common")
    if common is not None and common.init_backend_registration.cache_info().currsize:
        inductor_backend()
