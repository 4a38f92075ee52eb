"""Inductor's C++ wrapper for accel: cpp_wrapper=True and AOTInductor.

With ``torch._inductor.config.cpp_wrapper`` (and always in AOTInductor), the
code around the kernels is C++ instead of Python. It is written against
PyTorch's AOTInductor C ABI (torch/csrc/inductor/aoti_torch/c/shim.h), which
names devices by their c10 DeviceType (accel is PrivateUse1) and calls the
operators Inductor falls back to through a per-device C shim,
``aoti_torch_<device>_<op>``. What accel changes in the wrapper Inductor
generates for its target is therefore small, the same for cpu's
(AccelCppWrapperCpu, the host runtime's C++ kernels) and for cuda's
(AccelCppWrapperGpu, the CUDA runtime's Triton kernels, launched with CUDA's
current device and stream, which are accel's on that runtime):

- a buffer or a constant on accel is allocated on PrivateUse1
  (``codegen_device``);
- the wrapper includes accel's C shim (``get_device_include_path``; the
  header Inductor precompiles for a device is accel's, ``wrapper_header``), which
  tools/gen_aoti_c_shim.py generates at build time with the installed
  PyTorch's torchgen and which calls every operator through the dispatcher,
  as eager mode does. The shim is the shared library
  torch_accel/lib/libaccel_aoti_shim.so, loaded into the process's global symbol
  scope (``load_shim``) before any generated library that calls it;
- the wrapper is compiled with the target's options (``compile_options``:
  for cuda, its headers, libraries and USE_CUDA);
- AOTInductor: PyTorch's model runtime, which knows only its own devices by
  name, holds the constants on the target; the model reads them through
  accel views (see _AccelCppWrapper).

See docs/compile.md, "cpp_wrapper and AOTInductor".
"""

import contextlib
import os
import re
from collections.abc import Iterator
from typing import Any

import torch
from torch._inductor import config
from torch._inductor.codegen.common import get_device_op_overrides
from torch._inductor.codegen.cpp_wrapper_cpu import CppWrapperCpu
from torch._inductor.codegen.cpp_wrapper_gpu import CppWrapperGpu
from torch._inductor.virtualized import V

from .._core import DEVICE_TYPE, _target_device_type
from .._patches import patch

_HEADERS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "include", "torch_accel", "inductor")


def accel_wrapper_header(aot_mode: bool) -> str:
    """The header a C++ wrapper for accel includes: PyTorch's wrapper headers
    (AOTInductor's or cpp_wrapper's) and accel's C shim, by its absolute path
    (Inductor compiles with torch's include directories only)."""
    return os.path.join(_HEADERS, "aoti_include.h" if aot_mode else "cpp_wrapper.h")


@patch("torch._inductor.codecache._get_cpp_wrapper_header")
def wrapper_header(original: Any) -> None:
    """The header Inductor precompiles for a C++ wrapper is named after the device
    (torch/csrc/inductor/cpp_wrapper/<device>.h), which PyTorch has only for its own
    devices: for accel it is accel's (accel_wrapper_header)."""
    from torch._inductor import codecache

    def _get_cpp_wrapper_header(device: str, aot_mode: bool = False) -> str:
        if device.split(":", maxsplit=1)[0] != DEVICE_TYPE:
            return original(device, aot_mode)
        return accel_wrapper_header(aot_mode)

    codecache._get_cpp_wrapper_header = _get_cpp_wrapper_header


def _target_for_compile_options() -> str:
    """The device whose compile options a C++ wrapper for accel is built with."""
    from .codegen_config import registered

    return "cuda" if registered().kernels == "triton" else "cpu"


@patch("torch._inductor.cpp_builder.get_cpp_torch_device_options")
def compile_options(original: Any) -> None:
    """A C++ wrapper is compiled with its device's options (include directories,
    libraries, macros), which PyTorch knows for its own devices: accel's are
    its target's (cuda's toolkit and USE_CUDA where accel runs Triton kernels)."""
    from torch._inductor import cpp_builder

    def get_cpp_torch_device_options(device_type: str, aot_mode: bool = False, compile_only: bool = False) -> Any:
        if device_type == DEVICE_TYPE:
            device_type = _target_for_compile_options()
        return original(device_type, aot_mode, compile_only)

    cpp_builder.get_cpp_torch_device_options = get_cpp_torch_device_options


def load_shim() -> None:
    """Load accel's C shim where the libraries that Inductor generates find its symbols.

    The generated libraries do not link the shim (Inductor links only
    libtorch's), so its ``aoti_torch_accel_*`` functions must be in the
    process's global scope when one is loaded, compiled now or found in
    Inductor's caches: registration loads it with accel's backend. Loading it
    initialises no device.
    """
    from .. import _C

    _C._load_aoti_shim()


class _AccelCppWrapper:
    """What accel changes in PyTorch's C++ wrappers (CppWrapperCpu, CppWrapperGpu)."""

    # Read by CppWrapperCpu: the device of the graph's buffers and constants,
    # and the one compile options are asked for (compile_options).
    device: str
    _describing_constants = False

    @classmethod
    def create(cls, is_subgraph: bool, subgraph_name: Any, parent_wrapper: Any, partition_signatures: Any = None) -> Any:
        # As PyTorch's C++ wrappers: subgraphs get a wrapper of the same kind.
        return cls()

    def codegen_device(self, device: torch.device) -> str:
        if device.type != DEVICE_TYPE:
            return super().codegen_device(device)  # type: ignore[misc]
        if self._describing_constants:
            return super().codegen_device(torch.device(_target_device_type(), device.index))  # type: ignore[misc]
        # The C ABI knows accel as PrivateUse1 (aoti_torch_device_type_privateuse1).
        self.used_cached_devices.add("privateuse1")
        return f"cached_torch_device_type_privateuse1, {device.index if device.index else 0}"

    @staticmethod
    def get_device_include_path(device: str) -> str:
        if device != DEVICE_TYPE:
            return CppWrapperCpu.get_device_include_path(device)
        return f'#include "{accel_wrapper_header(V.graph.aot_mode)}"'

    # AOTInductor: the model's constants. PyTorch's model runtime loads them
    # on its own device, which is the target (AccelAOTIModelRunner creates the
    # model for it): the constructor describes accel constants as the
    # target's, and the model's code reads each through an accel view of it
    # (torch_accel/inductor/constant_view.h) instead of the constant itself.

    def codegen_model_constructor(self) -> None:
        with self._constants_as_target():
            super().codegen_model_constructor()  # type: ignore[misc]

    @contextlib.contextmanager
    def _constants_as_target(self) -> Iterator[None]:
        self._describing_constants = True
        try:
            yield
        finally:
            self._describing_constants = False

    _CONSTANT_BINDING = re.compile(r"^\[\[maybe_unused\]\] auto& (\w+) = constants_->at\((\d+)\);$")

    def write_wrapper_decl(self) -> None:
        if not V.graph.aot_mode or not V.graph.constants:
            return super().write_wrapper_decl()  # type: ignore[misc]
        # CppWrapperCpu binds each constant by reference to the model's
        # (``auto& name = constants_->at(i);``): bind accel views instead.
        bound = []
        prefix = self.prefix  # type: ignore[attr-defined]
        writeline = prefix.writeline

        def bind_accel_views(line: Any) -> None:
            match = self._CONSTANT_BINDING.match(line) if isinstance(line, str) else None
            if match is None:
                return writeline(line)
            name, index = match.groups()
            bound.append(name)
            writeline(f"[[maybe_unused]] auto {name} = accel_constant_view(constants_->at({index}));")

        prefix.writeline = bind_accel_views
        try:
            super().write_wrapper_decl()  # type: ignore[misc]
        finally:
            del prefix.writeline
        if sorted(bound) != sorted(V.graph.constants):
            raise RuntimeError(
                f"accel: AOTInductor's model code binds its constants in a way torch_accel does not know "
                f"(bound {sorted(bound)}, constants {sorted(V.graph.constants)}); torch_accel must be updated "
                "for this PyTorch"
            )


class AccelCppWrapperCpu(_AccelCppWrapper, CppWrapperCpu):
    """The C++ wrapper around C++ kernels (the host runtime), for accel devices."""

    def __init__(self) -> None:
        self.device = DEVICE_TYPE
        super().__init__()


class AccelCppWrapperGpu(_AccelCppWrapper, CppWrapperGpu):
    """The C++ wrapper around Triton kernels (the CUDA runtime), for accel devices.

    Its C++ snippets (kernel loading and launch, device guard, current
    stream) are CUDA's: on the CUDA runtime accel:N is cuda:N, and accel's
    current stream is CUDA's current stream (docs/compile.md).
    """

    def __init__(self) -> None:
        super().__init__()  # CppWrapperGpu: the device is Inductor's GPU type
        self.device = DEVICE_TYPE
        self.device_codegen = get_device_op_overrides(DEVICE_TYPE)  # cuda's C++ snippets (codegen)
        if V.graph.aot_mode and config.aot_inductor.emit_multi_arch_kernel:
            # AotCodeCompiler builds the multi-arch binaries (nvcc -fatbin) for
            # packages of cuda only; for accel's it would fail on the missing files.
            raise RuntimeError(
                "accel: torch._inductor.config.aot_inductor.emit_multi_arch_kernel is not supported for accel "
                "(PyTorch builds multi-arch kernels for packages compiled for cuda only); leave it off: the "
                "package holds the kernels compiled for this GPU"
            )

    def finalize_prefix(self) -> None:
        # The wrapper loads each Triton kernel from the binary that compiling it
        # left in Inductor's CudaKernelParamCache, which is keyed by kernel name
        # (triton_poi_fused_0, ...) across the process's graphs. The kernels are
        # compiled while the wrapper is generated (triton.autotune_at_compile_time,
        # on by default for a C++ wrapper); without that, Inductor compiles them
        # in a first run of the graph's Python wrapper, which it makes for cuda
        # and xpu devices only. For accel nothing would compile them: the wrapper
        # would load nothing, or another graph's kernels of the same names.
        if self._triton_call_wrappers and not config.triton.autotune_at_compile_time:
            raise RuntimeError(
                "accel: cpp_wrapper and AOTInductor compile accel's Triton kernels while the C++ wrapper is generated, "
                "but torch._inductor.config.triton.autotune_at_compile_time is False; leave it unset or set it True"
            )
        super().finalize_prefix()


class InterpretedKernelsRefusal(AccelCppWrapperGpu):
    """The C++ wrapper registered where Triton's interpreter runs accel's kernels
    (TORCH_ACCEL_INDUCTOR=triton on the host runtime): it refuses, clearly. A
    C++ wrapper launches compiled GPU binaries; interpreted kernels are Python."""

    def __init__(self) -> None:
        raise RuntimeError(
            "accel: cpp_wrapper and AOTInductor need compiled kernels, but TORCH_ACCEL_INDUCTOR=triton runs "
            "accel's Triton kernels through Triton's interpreter on the host runtime; use the host runtime's "
            "C++ kernels (TORCH_ACCEL_INDUCTOR unset) or the CUDA runtime"
        )
