"""Inductor's C++ wrapper for accel: cpp_wrapper=True and AOTInductor.

With ``torch._inductor.config.cpp_wrapper`` (and always in AOTInductor), the
code around the kernels is C++ instead of Python. It is written against
PyTorch's AOTInductor C ABI (torch/csrc/inductor/aoti_torch/c/shim.h), which
names devices by their c10 DeviceType (accel is PrivateUse1) and calls the
operators Inductor falls back to through a per-device C shim,
``aoti_torch_<device>_<op>``. What accel changes in the wrapper Inductor
generates for cpu (host runtime) is therefore small:

- a buffer or a constant on accel is allocated on PrivateUse1
  (``codegen_device``);
- the wrapper includes accel's C shim (``get_device_include_path``; the
  header Inductor precompiles for a device is accel's, ``wrapper_header``), which
  tools/gen_aoti_c_shim.py generates at build time with the installed
  PyTorch's torchgen and which calls every operator through the dispatcher,
  as eager mode does. The shim is the shared library
  torch_accel/libaccel_aoti_shim.so, loaded into the process's global symbol
  scope (``load_shim``) before any generated library that calls it.

See docs/compile.md, "cpp_wrapper and AOTInductor".
"""

import contextlib
import os
import re
from collections.abc import Iterator
from typing import Any

import torch
from torch._inductor.codegen.cpp_wrapper_cpu import CppWrapperCpu
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


class AccelCppWrapperCpu(CppWrapperCpu):
    """The C++ wrapper around C++ kernels (host runtime), for accel devices."""

    def __init__(self) -> None:
        # Read by CppWrapperCpu: the device of the graph's buffers, its op
        # overrides, and the compile options (accel's are cpu's: no device toolkit).
        self.device = DEVICE_TYPE
        # While the AOTInductor model's constructor is generated: accel's
        # constants are described as the target's (_constants_as_target).
        self._describing_constants = False
        super().__init__()

    @staticmethod
    def create(is_subgraph: bool, subgraph_name: Any, parent_wrapper: Any, partition_signatures: Any = None) -> "AccelCppWrapperCpu":
        return AccelCppWrapperCpu()

    def codegen_device(self, device: torch.device) -> str:
        if device.type != DEVICE_TYPE:
            return super().codegen_device(device)
        if self._describing_constants:
            return super().codegen_device(torch.device(_target_device_type()))
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
            super().codegen_model_constructor()

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
            return super().write_wrapper_decl()
        # CppWrapperCpu binds each constant by reference to the model's
        # (``auto& name = constants_->at(i);``): bind accel views instead.
        bound = []
        writeline = self.prefix.writeline

        def bind_accel_views(line: Any) -> None:
            match = self._CONSTANT_BINDING.match(line) if isinstance(line, str) else None
            if match is None:
                return writeline(line)
            name, index = match.groups()
            bound.append(name)
            writeline(f"[[maybe_unused]] auto {name} = accel_constant_view(constants_->at({index}));")

        self.prefix.writeline = bind_accel_views  # type: ignore[method-assign]
        try:
            super().write_wrapper_decl()
        finally:
            del self.prefix.writeline
        if sorted(bound) != sorted(V.graph.constants):
            raise RuntimeError(
                f"accel: AOTInductor's model code binds its constants in a way torch_accel does not know "
                f"(bound {sorted(bound)}, constants {sorted(V.graph.constants)}); torch_accel must be updated "
                "for this PyTorch"
            )
