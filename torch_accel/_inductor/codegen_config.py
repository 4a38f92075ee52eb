"""What Inductor generates for accel in this process, which the patches key on.

Which kernels Inductor generates for accel depends on what the runtime can do
(torch_accel._core.capabilities, fixed per process) and on
``TORCH_ACCEL_INDUCTOR`` (``auto``, the default, ``cpp`` or ``triton``), read
once per process when Dynamo or Inductor first needs it:

- ``auto``: the runtime's own kernels. Where accel memory is host memory and
  accel ops run CPU kernels (the host runtime), C++ kernels (CppScheduling)
  exactly as for cpu; where it is CUDA memory and the accel current stream is
  the current CUDA stream (the CUDA runtime), Triton kernels
  (TritonScheduling) exactly as for cuda, compiled for the CUDA target and
  launched on the accel current stream.
- ``cpp``: C++ kernels, which need accel memory to be host memory.
- ``triton`` where Triton does not compile for accel's devices (the host
  runtime): Inductor generates what it generates on the CUDA runtime (the
  same Triton kernels and wrapper, for a CUDA target described as an sm_90
  GPU, see device_properties) and Triton's interpreter (``TRITON_INTERPRET=1``)
  runs the kernels on accel's host memory. It runs the CUDA runtime's code
  generation where no GPU exists.

``CodegenConfig`` names the combination; its ``target`` ("cpu" or "cuda") is
the device type Inductor generates code for, on which the patches key.
``registered()`` is the configuration accel's backend was registered with
(registration.register), which the patches read.
"""

import functools
import os
from typing import NamedTuple, Optional

from .._core import DEVICE_TYPE, Capabilities, capabilities, runtime

KERNELS = ("cpp", "triton")
# TORCH_ACCEL_INDUCTOR's values; auto: the runtime's own kernels.
INDUCTOR_MODES = ("auto", "cpp", "triton")
MODE_VARIABLE = "TORCH_ACCEL_INDUCTOR"


class CodegenConfig(NamedTuple):
    """What Inductor generates for accel in this process."""

    # The runtime's name ("host" or "cuda"): it keys Inductor's FX graph cache
    # (codegen.AccelCodegenIdentity); what the code does never depends on it.
    runtime: str
    kernels: str  # the kernels Inductor generates: "cpp" or "triton"
    # Triton kernels run by Triton's interpreter on host memory (Triton does
    # not compile for the runtime's devices).
    interpreted: bool = False

    @property
    def target(self) -> str:
        """The device type Inductor generates code for: its choices by device type are this type's."""
        return "cuda" if self.kernels == "triton" else "cpu"


def kernels_for(capabilities: Capabilities) -> str:
    """The kernels TORCH_ACCEL_INDUCTOR chooses on a runtime with ``capabilities`` ("cpp" or "triton").

    Read strictly, as every TORCH_ACCEL_* variable: unset or empty is
    ``auto``; any other value must be one of INDUCTOR_MODES.
    """
    value = os.environ.get(MODE_VARIABLE, "")
    mode = value or "auto"
    if mode not in INDUCTOR_MODES:
        raise ValueError(f"{MODE_VARIABLE} must be one of {', '.join(INDUCTOR_MODES)}; got {value!r}")
    if mode == "auto":
        return capabilities.inductor_kernels
    if mode == "cpp" and not capabilities.host_memory:
        raise ValueError(
            f"{MODE_VARIABLE}=cpp needs the host runtime: C++ kernels read host memory, and accel memory is "
            f"device memory on the runtime this process runs (set {MODE_VARIABLE} to auto or triton)"
        )
    return mode


def config_for(runtime: str, capabilities: Capabilities) -> CodegenConfig:
    """The CodegenConfig of a runtime named ``runtime`` with ``capabilities``, under TORCH_ACCEL_INDUCTOR."""
    kernels = kernels_for(capabilities)
    return CodegenConfig(runtime, kernels, interpreted=kernels == "triton" and not capabilities.compiles_triton)


@functools.cache
def codegen_config() -> CodegenConfig:
    """This process's CodegenConfig (its runtime and TORCH_ACCEL_INDUCTOR), read once."""
    return config_for(runtime(), capabilities())


def generates_triton() -> bool:
    """Whether Inductor generates Triton kernels for accel in this process
    (False for a bad configuration, which compiling for accel reports)."""
    try:
        return codegen_config().kernels == "triton"
    except (ValueError, RuntimeError):
        return False


_registered: Optional[CodegenConfig] = None


def set_registered(config: CodegenConfig) -> None:
    """Record ``config`` as the one accel's backend registers with (registration.register)."""
    global _registered
    _registered = config


def registered() -> CodegenConfig:
    """The CodegenConfig accel's backend was registered with, which the patches key on."""
    assert _registered is not None, "accel's Inductor backend is not registered"
    return _registered
