"""accel device memory, with torch.cuda.memory's API.

On the CUDA runtime these are CUDA's caching allocator's figures for the
device (accel memory is CUDA memory); on the host runtime, accelrt's, which
has no cache, so reserved equals allocated.
"""

import collections
from typing import Any

import torch

from . import _C
from ._lazy import _lazy_init, is_initialized
from ._utils import DeviceLike, _get_device_index

__all__ = [
    "empty_cache",
    "max_memory_allocated",
    "max_memory_reserved",
    "mem_get_info",
    "memory_allocated",
    "memory_reserved",
    "memory_stats",
    "memory_stats_as_nested_dict",
    "reset_accumulated_memory_stats",
    "reset_peak_memory_stats",
]


def empty_cache() -> None:
    r"""Release all unoccupied cached memory held by the accel allocator.

    Does nothing before accel is initialised.
    """
    if is_initialized():
        _C._empty_cache()


def memory_stats_as_nested_dict(device: DeviceLike = None) -> dict[str, Any]:
    r"""Return the result of :func:`memory_stats` as a nested dictionary."""
    if not is_initialized():
        return {}
    return _C._memory_stats(_get_device_index(device, optional=True))


def memory_stats(device: DeviceLike = None) -> dict[str, Any]:
    r"""Return a dictionary of accel memory allocator statistics for a given device.

    The keys are those of :func:`torch.cuda.memory_stats`, e.g.
    ``"allocated_bytes.all.current"`` and ``"reserved_bytes.all.peak"``.
    Returns an empty dictionary before accel is initialised.
    """
    flat: list[tuple[str, Any]] = []

    def flatten(prefix: str, value: Any) -> None:
        if isinstance(value, dict):
            for key, inner in value.items():
                flatten(f"{prefix}.{key}" if prefix else key, inner)
        else:
            flat.append((prefix, value))

    flatten("", memory_stats_as_nested_dict(device))
    flat.sort()
    return collections.OrderedDict(flat)


def _stat(device: DeviceLike, key: str) -> int:
    return memory_stats(device).get(key, 0)


def memory_allocated(device: DeviceLike = None) -> int:
    r"""Return the accel memory occupied by tensors on a given device, in bytes."""
    return _stat(device, "allocated_bytes.all.current")


def max_memory_allocated(device: DeviceLike = None) -> int:
    r"""Return the peak accel memory occupied by tensors on a given device since the start or the last reset, in bytes."""
    return _stat(device, "allocated_bytes.all.peak")


def memory_reserved(device: DeviceLike = None) -> int:
    r"""Return the accel memory managed by the allocator on a given device, in bytes."""
    return _stat(device, "reserved_bytes.all.current")


def max_memory_reserved(device: DeviceLike = None) -> int:
    r"""Return the peak accel memory managed by the allocator on a given device, in bytes."""
    return _stat(device, "reserved_bytes.all.peak")


def reset_peak_memory_stats(device: DeviceLike = None) -> None:
    r"""Reset the "peak" statistics tracked by the accel memory allocator for a given device."""
    _lazy_init()
    _C._reset_peak_memory_stats(_get_device_index(device, optional=True))


def reset_accumulated_memory_stats(device: DeviceLike = None) -> None:
    r"""Reset the "accumulated" (historical) statistics of the accel memory allocator for a given device."""
    _lazy_init()
    _C._reset_accumulated_memory_stats(_get_device_index(device, optional=True))


def mem_get_info(device: DeviceLike = None) -> tuple[int, int]:
    r"""Return the global free and total memory of a given accel device, in bytes."""
    _lazy_init()
    return tuple(_C._mem_get_info(_get_device_index(device, optional=True)))


del torch
