"""Registers accel with Dynamo and Inductor's device lists when, and only when, they load.

``import torch_accel`` must not pay for importing torch._dynamo or Inductor.
Two registrations must happen as soon as the module they concern has executed,
whoever imports it first:

- accel's Dynamo device interface, with torch._dynamo.device_interface;
- where Inductor generates Triton kernels for accel, accel among its GPU types, in
  torch._inductor.utils (which Dynamo imports): AOTAutograd asks is_gpu while
  it traces the first graph, before Inductor registers accel's backend (see
  torch_accel._inductor.backend_choice.gpu_types). Not from the device-interface hook:
  torch._inductor.utils imports that module halfway through its own execution.

- FlexAttention's acceptance of accel, in torch.nn.attention.flex_attention
  (torch_accel._inductor.flex_attention; that module imports Dynamo and Triton).

call_after_import() runs a function right after a module first executes (at
once if it has), through a one-shot import hook.
"""

import importlib.abc
import importlib.machinery
import sys
from types import ModuleType
from typing import Callable, Optional, Sequence


def _register_interface() -> None:
    from .device_interface import register_accel_interface

    register_accel_interface()


def _join_gpu_types() -> None:
    from .._inductor.registration import join_gpu_types

    join_gpu_types()


class _LoaderThenCall(importlib.abc.Loader):
    """Runs the real loader, then the callback."""

    def __init__(self, loader: importlib.abc.Loader, callback: Callable[[], None]) -> None:
        self._loader = loader
        self._callback = callback

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> Optional[ModuleType]:
        return self._loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self._loader.exec_module(module)
        self._callback()


class _CallAfterImport(importlib.abc.MetaPathFinder):
    """Finds one module through the other finders, wrapping its loader."""

    def __init__(self, fullname: str, callback: Callable[[], None]) -> None:
        self.fullname = fullname
        self._callback = callback

    def find_spec(
        self, fullname: str, path: Optional[Sequence[str]], target: Optional[ModuleType] = None
    ) -> Optional[importlib.machinery.ModuleSpec]:
        if fullname != self.fullname:
            return None
        sys.meta_path.remove(self)  # one shot
        for finder in sys.meta_path:
            find_spec = getattr(finder, "find_spec", None)
            spec = find_spec(fullname, path, target) if find_spec else None
            if spec is not None:
                if spec.loader is not None:
                    spec.loader = _LoaderThenCall(spec.loader, self._callback)
                return spec
        return None


def call_after_import(fullname: str, callback: Callable[[], None]) -> None:
    """Call ``callback`` once module ``fullname`` has executed: now if it has, else right after it does."""
    if fullname in sys.modules:
        callback()
    elif not any(isinstance(finder, _CallAfterImport) and finder.fullname == fullname for finder in sys.meta_path):
        sys.meta_path.insert(0, _CallAfterImport(fullname, callback))


def _accept_in_flex_attention() -> None:
    from .._inductor.registration import apply_flex_attention_patches

    apply_flex_attention_patches()


def register_when_dynamo_loads() -> None:
    call_after_import("torch._dynamo.device_interface", _register_interface)
    call_after_import("torch._inductor.utils", _join_gpu_types)
    call_after_import("torch.nn.attention.flex_attention", _accept_in_flex_attention)
