"""Registers accel's Dynamo device interface when, and only when, Dynamo loads.

``import torch_accel`` must not pay for importing torch._dynamo. If Dynamo's
device-interface module is already loaded, accel registers at once; otherwise
a one-shot import hook registers right after that module first executes.
"""

import importlib.abc
import importlib.machinery
import sys
from types import ModuleType
from typing import Optional, Sequence

_DEVICE_INTERFACE_MODULE = "torch._dynamo.device_interface"


def _register() -> None:
    from ._dynamo_interface import register_accel_interface

    register_accel_interface()


class _LoaderThenRegister(importlib.abc.Loader):
    """Runs the real loader, then registers accel's interface."""

    def __init__(self, loader: importlib.abc.Loader) -> None:
        self._loader = loader

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> Optional[ModuleType]:
        return self._loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self._loader.exec_module(module)
        _register()


class _RegisterAfterImport(importlib.abc.MetaPathFinder):
    """Finds Dynamo's device-interface module through the other finders, wrapping its loader."""

    def find_spec(
        self, fullname: str, path: Optional[Sequence[str]], target: Optional[ModuleType] = None
    ) -> Optional[importlib.machinery.ModuleSpec]:
        if fullname != _DEVICE_INTERFACE_MODULE:
            return None
        sys.meta_path.remove(self)  # one shot
        for finder in sys.meta_path:
            find_spec = getattr(finder, "find_spec", None)
            spec = find_spec(fullname, path, target) if find_spec else None
            if spec is not None:
                if spec.loader is not None:
                    spec.loader = _LoaderThenRegister(spec.loader)
                return spec
        return None


def register_when_dynamo_loads() -> None:
    if _DEVICE_INTERFACE_MODULE in sys.modules:
        _register()
    elif not any(isinstance(finder, _RegisterAfterImport) for finder in sys.meta_path):
        sys.meta_path.insert(0, _RegisterAfterImport())
