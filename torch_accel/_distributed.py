"""accel's c10d backend for torch.distributed.

``import torch_accel`` registers a backend named ``accel`` for the ``accel``
device type, so that ``init_process_group(backend="accel")``,
``init_process_group(backend="cpu:gloo,accel:accel")`` and
``init_process_group()`` (the accelerator's default backend) run collectives on
accel tensors.

The backend runs each collective on the engine that serves accel's target
device type, chosen by asking the runtime for that type and torch.distributed
for its default backend: NCCL for ``cuda`` (the CUDA runtime), Gloo for ``cpu``
(the host runtime). The engine sees target tensors over the accel tensors'
memory; see csrc/distributed/AccelBackend.h.

Where torch 2.11 picks a group's backends by name it has no hook for accel:
two patches adapt it (``backend_config``, ``default_backend_for_new_groups``),
declared in torch_accel/_patches.py with the hashes of their sources.

torch.distributed.distributed_c10d is already loaded by ``import torch`` (in
torch 2.11), so registering costs no imports.
"""

import functools
import inspect
import os
from datetime import timedelta
from typing import Any, Callable

import torch

from . import _C, _patches
from ._core import DEVICE_TYPE, _lazy_init, _target_device_type

BACKEND_NAME = "accel"
_AVOID_RECORD_STREAMS = "TORCH_NCCL_AVOID_RECORD_STREAMS"


def _new_gloo(store: Any, rank: int, size: int, timeout: timedelta, options: Any, backend_options: Any) -> Any:
    from torch.distributed import ProcessGroupGloo

    engine = ProcessGroupGloo(store, rank, size, timeout=timeout)
    engine.options.global_ranks_in_group = options.global_ranks_in_group
    engine.options.group_name = options.group_id
    return engine


def _new_nccl(store: Any, rank: int, size: int, timeout: timedelta, options: Any, backend_options: Any) -> Any:
    import torch.distributed as dist

    if not dist.is_nccl_available():
        raise RuntimeError(
            "accel's c10d backend runs collectives with NCCL on the cuda runtime, "
            "but this torch has no NCCL (torch.distributed.is_nccl_available() is False)"
        )
    if backend_options is None:
        backend_options = dist.ProcessGroupNCCL.Options()
        backend_options.is_high_priority_stream = False
    elif not isinstance(backend_options, dist.ProcessGroupNCCL.Options):
        raise TypeError(
            "accel's c10d backend runs NCCL on the cuda runtime: pg_options must be "
            f"ProcessGroupNCCL.Options, not {type(backend_options).__name__}"
        )
    backend_options._timeout = timeout
    backend_options.global_ranks_in_group = options.global_ranks_in_group
    backend_options.group_name = options.group_id
    # ProcessGroupNCCL keeps the memory of tensors that its streams still use
    # from being reused either by recordStream, which CUDA's caching allocator
    # ignores for the engine's target tensors (their DataPtrs are not the
    # allocator's), or, with TORCH_NCCL_AVOID_RECORD_STREAMS, by holding the
    # tensors until the caller's streams wait for the work; accel's target
    # tensors hold the accel memory (toTargetKeepingAlive), so accel needs the
    # latter. The constructor reads the variable: it is set for this group only.
    from unittest import mock

    with mock.patch.dict(os.environ, {_AVOID_RECORD_STREAMS: "1"}):
        return dist.ProcessGroupNCCL(store, rank, size, backend_options)


# How to create each engine torch.distributed may name as the default backend
# of accel's target device type.
_ENGINES: dict[str, Callable[..., Any]] = {"gloo": _new_gloo, "nccl": _new_nccl}


def engine_name() -> str:
    r"""The c10d backend accel's collectives run on: the default backend of accel's target device type."""
    from torch.distributed import Backend

    target = _target_device_type()
    name = Backend.default_device_backend_map.get(target)
    if name not in _ENGINES:
        raise RuntimeError(
            f"accel's c10d backend has no engine for its target device type {target!r}: "
            f"torch.distributed's default backend for it is {name!r}, and accel runs on "
            f"{' or '.join(sorted(_ENGINES))}"
        )
    return name


def _check_registrations() -> None:
    # register_backend without devices declares the backend for cpu and cuda:
    # accel tensors would then find no backend, and cpu tensors one that
    # refuses them. Say so when the group is created, not at the first
    # collective.
    from torch.distributed import Backend

    for name, plugin in Backend._plugins.items():
        if plugin.creator_fn is not _new_backend:
            continue
        devices = Backend.backend_capability.get(name.lower())
        if devices != [DEVICE_TYPE]:
            raise ValueError(
                f"accel's c10d backend is registered as {name.lower()!r} for devices {devices}, "
                f"but it runs collectives on accel tensors only: register it with "
                f"devices=[{DEVICE_TYPE!r}] (torch_accel registers it as {BACKEND_NAME!r} that way)"
            )


def _new_backend(options: Any, backend_options: Any) -> Any:
    r"""Creates accel's backend for a process group (register_backend's extended API)."""
    _check_registrations()
    try:
        _lazy_init()
    except Exception as e:
        raise RuntimeError(f"accel's c10d backend cannot be created: {e}") from e
    name = engine_name()
    engine = _ENGINES[name](
        options.store, options.group_rank, options.group_size, options.timeout, options, backend_options
    )
    # As torch.distributed does for the engines it creates itself.
    engine._set_sequence_number_for_group()
    return _C._c10d_accel_backend(engine)


def _accel_backend_named(name: str) -> str:
    r"""accel's backend for a ``device:backend`` entry ``accel:<name>``, where name is an engine's."""
    engine = engine_name()
    if name != engine:
        raise ValueError(
            f"accel's collectives run on {engine!r} on this runtime ({_C._runtime_name()}), not {name!r}: "
            f"name accel:{engine} or accel:{BACKEND_NAME} in the backend string"
        )
    return BACKEND_NAME


# Where torch 2.11 picks backends by name, make it pick accel's:
#
# - ``"cpu:gloo,accel:nccl"`` (``accel:gloo`` on the host runtime): the
#   engine's name for the accel device means accel's backend, which runs that
#   engine; torch would hand accel tensors to the engine itself. Adapts
#   torch.distributed.distributed_c10d.BackendConfig.__init__, which parses
#   the backend string into a device -> backend map.
# - ``init_process_group()`` without a backend: torch takes the accelerator's
#   default backend (``default_device_backend_map``) only when ``device_id``
#   is given; without it, it makes an "undefined" group whose default backend
#   is Gloo's type (NCCL's where NCCL serves it), which an accel-only group
#   lacks: DDP then fails ("Could not find backend type ... gloo") and
#   ``get_backend()`` says "undefined". For accel the group gets the default
#   backend in both cases, as cuda's gets NCCL in both. Adapts
#   torch.distributed.distributed_c10d._new_process_group_helper, which makes
#   every group, looked up as a module global: init_process_group(),
#   new_group() and init_device_mesh() (which imported init_process_group
#   itself before torch_accel loaded) all pass there.


@_patches.patch("torch.distributed.distributed_c10d.BackendConfig.__init__")
def backend_config(config_init: Callable[..., None]) -> None:
    from torch.distributed import Backend, distributed_c10d

    @functools.wraps(config_init)
    def backend_config_init(self: Any, backend: Any) -> None:
        config_init(self, backend)
        name = self.device_backend_map.get(DEVICE_TYPE)
        if name is not None and name in _ENGINES:
            self.device_backend_map[DEVICE_TYPE] = Backend(_accel_backend_named(name))

    distributed_c10d.BackendConfig.__init__ = backend_config_init


@_patches.patch("torch.distributed.distributed_c10d._new_process_group_helper")
def default_backend_for_new_groups(new_group_helper: Callable[..., Any]) -> None:
    from torch.distributed import Backend, distributed_c10d

    signature = inspect.signature(new_group_helper)

    @functools.wraps(new_group_helper)
    def new_group_helper_with_accel_default(*args: Any, **kwargs: Any) -> Any:
        bound = signature.bind(*args, **kwargs)
        arguments = bound.arguments
        if (
            str(arguments["backend"]) == Backend.UNDEFINED
            and torch._C._get_accelerator().type == DEVICE_TYPE
            and DEVICE_TYPE in Backend.default_device_backend_map
        ):
            arguments["backend"] = Backend(Backend.default_device_backend_map[DEVICE_TYPE])
        return new_group_helper(*bound.args, **bound.kwargs)

    distributed_c10d._new_process_group_helper = new_group_helper_with_accel_default


def register_backend() -> None:
    r"""Registers accel's c10d backend with torch.distributed (once; a no-op without torch.distributed)."""
    if not torch.distributed.is_available() or not hasattr(_C, "_c10d_accel_backend"):
        return
    from torch.distributed import Backend

    if BACKEND_NAME.upper() in Backend._plugins:
        return
    Backend.register_backend(BACKEND_NAME, _new_backend, extended_api=True, devices=[DEVICE_TYPE])
    _patches.apply(backend_config, default_backend_for_new_groups)
