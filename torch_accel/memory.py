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
    "memory_summary",
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


# memory_summary's rows: (title, memory_stats key, counts bytes).
_SUMMARY_ROWS = (
    ("Allocated memory", "allocated_bytes", True),
    ("Active memory", "active_bytes", True),
    ("Requested memory", "requested_bytes", True),
    ("Reserved memory", "reserved_bytes", True),
    ("Non-releasable memory", "inactive_split_bytes", True),
    ("Allocations", "allocation", False),
    ("Active allocs", "active", False),
    ("Reserved segments", "segment", False),
    ("Non-releasable allocs", "inactive_split", False),
)


def _format_count(value: int, is_bytes: bool) -> str:
    if not is_bytes:
        return str(value)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{value} {unit}" if unit == "B" else f"{value:.2f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def memory_summary(device: DeviceLike = None, abbreviated: bool = False) -> str:
    r"""Return a human-readable table of the accel memory allocator's statistics for a given device.

    As torch.cuda.memory_summary: for each statistic of :func:`memory_stats`,
    its current value, its peak, and the totals allocated and freed; unless
    ``abbreviated``, also split into the large and small pools. Useful to
    print during training or when out of memory (FSDP logs it).
    """
    index = _get_device_index(device, optional=True)
    stats = memory_stats(index)
    pools = ("all",) if abbreviated else ("all", "large_pool", "small_pool")
    columns = ("current", "peak", "allocated", "freed")
    header = f"{'':<28}" + "".join(f"{c:>16}" for c in ("Cur Usage", "Peak Usage", "Tot Alloc", "Tot Freed"))
    rule = "=" * len(header)
    lines = [rule, f" accel memory summary, device {index} ({_C._runtime_name()} runtime)", rule, header]
    for title, key, is_bytes in _SUMMARY_ROWS:
        lines.append("-" * len(header))
        for pool in pools:
            name = title if pool == "all" else f"  from {pool.split('_')[0]} pool"
            values = (_format_count(stats.get(f"{key}.{pool}.{c}", 0), is_bytes) for c in columns)
            lines.append(f"{name:<28}" + "".join(f"{v:>16}" for v in values))
    lines.append("-" * len(header))
    lines.append(
        f"Allocator retries: {stats.get('num_alloc_retries', 0)}    Out-of-memory errors: {stats.get('num_ooms', 0)}"
    )
    lines.append(rule)
    return "\n".join(lines) + "\n"


del torch
