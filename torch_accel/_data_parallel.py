"""nn.DataParallel over accel devices: patches of torch.nn.parallel.

DataParallel scatters its inputs, replicates the module and gathers the
outputs through torch.nn.parallel.comm, whose broadcast, broadcast_coalesced,
scatter and gather call C++ functions that make CUDA tensors only (without a
CUDA driver: "Found no NVIDIA driver"). PyTorch 2.11 has no hook for another
device there, so these patches send the calls that concern accel (an accel
tensor, an accel device, an accel stream) to torch.accel.comm and every other
call to the original. Device indices passed as ints name devices of the
tensors' type, as they do for cuda.

DataParallel takes its device type from torch._utils._get_available_device_type,
which answers cuda wherever CUDA is available (on the CUDA runtime accel:N is
cuda:N): a DataParallel of a module on accel would then expect it on cuda.
While a DataParallel (or data_parallel) is set up for a module on accel, that
function answers accel. docs/interop.md#dataparallel.
"""

import contextlib
import contextvars
import functools
import importlib
from collections.abc import Iterable, Iterator
from itertools import chain
from typing import Any

import torch

from . import _patches, comm

_ACCEL = "accel"

# The device type DataParallel's set-up should use, while one is set up for a
# module on accel (None: PyTorch's own answer).
_module_device_type: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "torch_accel_data_parallel_device_type", default=None
)


def _names_accel(device: Any) -> bool:
    if isinstance(device, str):
        return torch.device(device).type == _ACCEL
    return isinstance(device, torch.device) and device.type == _ACCEL


def _concerns_accel(
    tensors: Iterable[Any] = (), devices: Iterable[Any] | None = (), streams: Iterable[Any] | None = ()
) -> bool:
    """Whether a comm call is accel's: a tensor on accel, an accel device or an accel stream."""
    return (
        any(isinstance(t, torch.Tensor) and t.device.type == _ACCEL for t in tensors)
        or any(_names_accel(d) for d in devices or ())
        or any(s is not None and s.device.type == _ACCEL for s in streams or ())
    )


@_patches.patch(
    "torch.nn.parallel.comm.broadcast",
    "torch.nn.parallel.comm.broadcast_coalesced",
    "torch.nn.parallel.comm.scatter",
    "torch.nn.parallel.comm.gather",
)
def comm_for_accel(broadcast, broadcast_coalesced, scatter, gather) -> None:
    """torch.nn.parallel.comm's CUDA-only functions send accel's calls to
    torch.accel.comm. Patched in their module, which torch.nn.parallel's
    Broadcast, Scatter and Gather (and replicate) look them up in; torch.cuda.comm
    keeps cuda's."""
    module = torch.nn.parallel.comm

    @functools.wraps(broadcast)
    def broadcast_to_accel(tensor, devices=None, *, out=None):
        if _concerns_accel([tensor, *(out or ())], devices):
            return comm.broadcast(tensor, devices, out=out)
        return broadcast(tensor, devices, out=out)

    @functools.wraps(broadcast_coalesced)
    def broadcast_coalesced_to_accel(tensors, devices, buffer_size=10485760):
        devices = list(devices)
        if _concerns_accel(tensors, devices):
            return comm.broadcast_coalesced(tensors, devices, buffer_size)
        return broadcast_coalesced(tensors, devices, buffer_size)

    @functools.wraps(scatter)
    def scatter_to_accel(tensor, devices=None, chunk_sizes=None, dim=0, streams=None, *, out=None):
        if devices is not None:
            devices = list(devices)
        if _concerns_accel([tensor, *(out or ())], devices, streams):
            return comm.scatter(tensor, devices, chunk_sizes, dim, streams, out=out)
        return scatter(tensor, devices, chunk_sizes, dim, streams, out=out)

    @functools.wraps(gather)
    def gather_from_accel(tensors, dim=0, destination=None, *, out=None):
        tensors = list(tensors)
        if _concerns_accel(tensors):
            return comm.gather(tensors, dim, destination, out=out)
        return gather(tensors, dim, destination, out=out)

    module.broadcast = broadcast_to_accel
    module.broadcast_coalesced = broadcast_coalesced_to_accel
    module.scatter = scatter_to_accel
    module.gather = gather_from_accel


def _module_on_accel(module: torch.nn.Module, device_ids: Any) -> bool:
    """Whether a DataParallel of ``module`` over ``device_ids`` is accel's: its
    parameters and buffers are on accel, or ``device_ids`` name accel devices."""
    first = next(chain(module.parameters(), module.buffers()), None)
    if first is not None:
        return first.device.type == _ACCEL
    return any(_names_accel(d) for d in device_ids or ())


@contextlib.contextmanager
def _set_up_for(module: torch.nn.Module, device_ids: Any) -> Iterator[None]:
    if not _module_on_accel(module, device_ids):
        yield
        return
    token = _module_device_type.set(_ACCEL)
    try:
        yield
    finally:
        _module_device_type.reset(token)


@_patches.patch("torch._utils._get_available_device_type")
def available_device_type_of_the_module(original) -> None:
    """Answers accel while a DataParallel is set up for a module on accel;
    PyTorch's answer otherwise."""

    @functools.wraps(original)
    def _get_available_device_type():
        return _module_device_type.get() or original()

    # Where DataParallel's set-up looks it up: torch._utils (_get_all_device_indices
    # and _get_devices_properties call it there) and the name data_parallel.py imports.
    torch._utils._get_available_device_type = _get_available_device_type
    importlib.import_module("torch.nn.parallel.data_parallel")._get_available_device_type = _get_available_device_type


@_patches.patch(
    "torch.nn.parallel.data_parallel.DataParallel.__init__", "torch.nn.parallel.data_parallel.data_parallel"
)
def data_parallel_of_the_modules_device(init, data_parallel) -> None:
    """DataParallel and data_parallel set up with the module's device type when it is on accel."""

    @functools.wraps(init)
    def __init__(self, module, device_ids=None, output_device=None, dim=0):
        with _set_up_for(module, device_ids):
            init(self, module, device_ids, output_device, dim)

    @functools.wraps(data_parallel)
    def data_parallel_on_accel(module, inputs, device_ids=None, output_device=None, dim=0, module_kwargs=None):
        with _set_up_for(module, device_ids):
            return data_parallel(module, inputs, device_ids, output_device, dim, module_kwargs)

    module = importlib.import_module("torch.nn.parallel.data_parallel")
    module.DataParallel.__init__ = __init__
    module.data_parallel = data_parallel_on_accel
    # The package binds the name data_parallel to the function (and so hides the module).
    torch.nn.parallel.data_parallel = data_parallel_on_accel


def apply_data_parallel_patches() -> None:
    _patches.apply(comm_for_accel, available_device_type_of_the_module, data_parallel_of_the_modules_device)
