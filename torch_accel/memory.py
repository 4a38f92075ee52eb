"""accel device memory, with torch.cuda.memory's API.

On the CUDA runtime these are CUDA's caching allocator's figures for the
device (accel memory is CUDA memory); on the host runtime, those of accel's
own allocator over accelrt, which caches nothing, so reserved equals
allocated and every allocation is a segment of its own.

Snapshots (:func:`_snapshot`, :func:`_dump_snapshot`) have the format of
``torch.cuda.memory._snapshot()``, so PyTorch's memory visualiser
(``torch.cuda._memory_viz``, https://pytorch.org/memory_viz) reads them.
"""

import collections
import contextlib
import ctypes
import pickle
import sys
from collections.abc import Callable, Iterator
from inspect import signature
from typing import Any, Literal, Optional

import torch

from . import _C
from ._core import DeviceLike, _get_device_index, _lazy_init, current_device, is_initialized

__all__ = [
    "AccelPluggableAllocator",
    "MemPool",
    "attach_out_of_memory_observer",
    "change_current_allocator",
    "empty_cache",
    "get_per_process_memory_fraction",
    "max_memory_allocated",
    "max_memory_reserved",
    "mem_get_info",
    "memory_allocated",
    "memory_reserved",
    "memory_stats",
    "memory_stats_as_nested_dict",
    "memory_snapshot",
    "memory_summary",
    "reset_accumulated_memory_stats",
    "reset_peak_memory_stats",
    "set_per_process_memory_fraction",
    "use_mem_pool",
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


def set_per_process_memory_fraction(fraction: float, device: DeviceLike = None) -> None:
    r"""Set the fraction of an accel device's total memory this process may allocate.

    As torch.cuda.set_per_process_memory_fraction: an allocation that would
    take the allocator's reserved memory on the device beyond
    ``fraction * total memory`` raises :class:`torch.OutOfMemoryError`.

    Args:
        fraction (float): 0 to 1.
        device (torch.device or int, optional): the device; the current one if ``None``.
    """
    _lazy_init()
    index = _get_device_index(device, optional=True)
    if not isinstance(fraction, float):
        raise TypeError("Invalid type for fraction argument, must be `float`")
    if fraction < 0 or fraction > 1:
        raise ValueError(f"Invalid fraction value: {fraction}. Allowed range: 0~1")
    _C._set_memory_fraction(fraction, index)


def get_per_process_memory_fraction(device: DeviceLike = None) -> float:
    r"""Return the fraction of an accel device's memory this process may allocate (1.0 unless set)."""
    _lazy_init()
    return _C._get_memory_fraction(_get_device_index(device, optional=True))


def _format_size(size: int, scale: float) -> str:
    # memory_summary's byte cells: the unit is chosen from the row's first
    # column (`scale`), as torch.cuda's table does.
    units = ["B  ", "KiB", "MiB", "GiB", "TiB", "PiB"]
    unit = 0
    while unit + 1 < len(units) and scale >= 768 * 1024:
        size //= 1024
        scale /= 1024
        unit += 1
    return f"{size:6d} {units[unit]}"


def _format_count(count: int, scale: float) -> str:
    units = [" ", "K", "M"]
    unit = 0
    while unit + 1 < len(units) and scale >= 750 * 1000:
        count //= 1000
        scale /= 1000
        unit += 1
    return f"{count:7d} {units[unit]} "


# memory_summary's sections: (memory_stats key, title, formatter).
_SUMMARY_METRICS = (
    ("allocated_bytes", "Allocated memory", _format_size),
    ("active_bytes", "Active memory", _format_size),
    ("requested_bytes", "Requested memory", _format_size),
    ("reserved_bytes", "Reserved memory", _format_size),
    ("inactive_split_bytes", "Non-releasable memory", _format_size),
    ("allocation", "Allocations", _format_count),
    ("active", "Active allocs", _format_count),
    ("segment", "Reserved segments", _format_count),
    ("inactive_split", "Non-releasable allocs", _format_count),
)
_SUMMARY_OVERSIZE = (
    ("oversize_allocations", "Oversize allocations"),
    ("oversize_segments", "Oversize segments"),
)


def memory_summary(device: DeviceLike = None, abbreviated: bool = False) -> str:
    r"""Return a human-readable printout of the accel memory allocator's statistics for a given device.

    torch.cuda.memory_summary's table: for each statistic of
    :func:`memory_stats`, its current value, peak, and totals allocated and
    freed, split into the large and small pools unless ``abbreviated``.
    Useful to print during training or when out of memory (FSDP logs it).

    Args:
        device (torch.device or int, optional): the device; the current one if ``None``.
        abbreviated (bool, optional): whether to leave out the pool rows.
    """
    index = _get_device_index(device, optional=True)
    stats = memory_stats(index)

    def stat(key: str) -> int:
        return stats.get(key, 0)

    width = 75
    lines = [
        "=" * width,
        f" {'':16} PyTorch accel memory summary, device ID {index:<16d} ",
        "-" * width,
        f"  {'':9} accel OOMs: {stat('num_ooms'):<11d} | {'':3} device malloc retries: {stat('num_alloc_retries'):<8d}  ",
        "=" * width,
        "        Metric         | Cur Usage  | Peak Usage | Tot Alloc  | Tot Freed  ",
    ]
    columns = ("current", "peak", "allocated", "freed")
    for key, title, formatter in _SUMMARY_METRICS:
        lines.append("-" * width)
        rows = [("all", title)]
        if not abbreviated:
            rows += [("large_pool", "      from large pool"), ("small_pool", "      from small pool")]
        # Every row of a section uses the units its "all" row's values call for.
        scales = [stat(f"{key}.all.{column}") for column in columns]
        for pool, name in rows:
            cells = " | ".join(
                formatter(stat(f"{key}.{pool}.{column}"), scale) for column, scale in zip(columns, scales)
            )
            lines.append(f" {name:<21} | {cells} ")
    for key, title in _SUMMARY_OVERSIZE:
        lines.append("-" * width)
        cells = " | ".join(
            _format_count(stat(f"{key}.{column}"), stat(f"{key}.{column}")) for column in columns
        )
        lines.append(f" {title:<21} | {cells} ")
    lines.append("=" * width)
    return "|" + "|\n|".join(lines) + "|\n"


# Memory history and snapshots --------------------------------------------------


def _record_memory_history(enabled: Literal["state", "all"] | None = "all", *args, **kwargs) -> None:
    r"""Record the stack traces of accel allocations, and a history of allocations and frees.

    torch.cuda.memory._record_memory_history, for accel: :func:`_snapshot`
    then tells what allocated each block of accel memory, and its
    ``device_traces`` list what the allocator did. ``enabled`` may also be a
    bool, with the arguments of torch.cuda's legacy form.

    Args:
        enabled: ``None`` stops recording; ``"state"`` keeps the stack trace of
            each live allocation; ``"all"`` also keeps a history of alloc/free
            events (default).
        context: which events keep a stack trace: ``None``, ``"state"`` (live
            allocations), ``"alloc"`` (also allocations in the history) or
            ``"all"`` (also frees; default).
        stacks: ``"python"`` (Python and TorchScript frames) or ``"all"``
            (also C++ frames; default).
        max_entries: the most history entries kept per device (the newest).
        device: ignored, as on cuda: recording covers every device.
        clear_history: drop the history recorded so far.
        compile_context, global_record_annotations: not supported on accel;
            must be False.
        skip_actions: actions not to record (``"alloc"``, ``"free_requested"``,
            ``"free_completed"``, ``"segment_alloc"``, ``"segment_free"``,
            ``"oom"``, ``"snapshot"``).
    """
    if isinstance(enabled, bool):
        return _record_memory_history_legacy(enabled, *args, **kwargs)
    return _record_memory_history_impl(enabled, *args, **kwargs)


def _record_memory_history_impl(
    enabled: str | None = "all",
    context: str | None = "all",
    stacks: str = "all",
    max_entries: int = sys.maxsize,
    device: DeviceLike = None,
    clear_history: bool = False,
    compile_context: bool = False,
    global_record_annotations: bool = False,
    skip_actions: list[str] | None = None,
) -> None:
    for name, value in (("compile_context", compile_context), ("global_record_annotations", global_record_annotations)):
        if value:
            raise NotImplementedError(f"torch.accel.memory._record_memory_history: {name}=True is not supported on accel")
    if not isinstance(max_entries, int) or max_entries < 0:
        raise ValueError(
            f"torch.accel.memory._record_memory_history: max_entries must be a non-negative int, got {max_entries!r}"
        )
    _lazy_init()
    _C._record_memory_history(
        enabled, context, stacks, max_entries, clear_history, list(skip_actions) if skip_actions is not None else []
    )


_record_memory_history.__signature__ = signature(_record_memory_history_impl)  # type: ignore[attr-defined]


def _record_memory_history_legacy(
    enabled: bool,
    record_context: bool = True,
    trace_alloc_max_entries: int = 1,
    trace_alloc_record_context: bool = False,
    device: DeviceLike = None,
    record_context_cpp: bool = False,
    clear_history: bool = False,
    compile_context: bool = False,
    global_record_annotations: bool = False,
    skip_actions: list[str] | None = None,
) -> None:
    # torch.cuda's first form, mapped onto the second as its C++ side does.
    if trace_alloc_record_context:
        context = "alloc"
    elif record_context:
        context = "state"
    else:
        context = None
    _record_memory_history_impl(
        ("all" if trace_alloc_max_entries > 1 else "state") if enabled else None,
        context,
        "all" if record_context_cpp else "python",
        trace_alloc_max_entries,
        device,
        clear_history,
        compile_context,
        global_record_annotations,
        skip_actions,
    )


def _snapshot(device: DeviceLike = None, augment_with_fx_traces: bool = False) -> dict[str, Any]:
    r"""Return a snapshot of the accel memory allocator's state, in torch.cuda.memory._snapshot's format.

    A dict with ``segments`` (every segment of every device, with its blocks
    and the stack trace of their allocation when recorded),
    ``device_traces`` (one list per device of the events recorded by
    :func:`_record_memory_history`) and ``allocator_settings``. The
    ``device`` argument is ignored, as on cuda. ``augment_with_fx_traces``
    adds FX node information to the frames of FX-generated code.
    """
    _lazy_init()
    snapshot = _C._memory_snapshot(True)
    if augment_with_fx_traces:
        from torch._utils import _augment_memory_snapshot_stack_traces

        snapshot = _augment_memory_snapshot_stack_traces(snapshot)
    return snapshot


def _dump_snapshot(filename: str = "dump_snapshot.pickle", augment_with_fx_traces: bool = False) -> None:
    r"""Save :func:`_snapshot` as a pickle, the file pytorch.org/memory_viz opens."""
    snapshot = _snapshot(augment_with_fx_traces=augment_with_fx_traces)
    with open(filename, "wb") as f:
        pickle.dump(snapshot, f)


def memory_snapshot(mempool_id: Optional[tuple[int, int]] = None, include_traces: bool = True) -> list[dict[str, Any]]:
    r"""Return the segments of the accel memory allocator's state on every device (see :func:`_snapshot`).

    With ``mempool_id`` (a :class:`MemPool`'s ``id``), only the segments of that pool.
    """
    _lazy_init()
    pool = (0, 0) if mempool_id is None else _pool_id(mempool_id, "memory_snapshot")
    return _C._memory_snapshot(include_traces, pool)["segments"]


def _pool_id(mempool_id: Any, where: str) -> tuple[int, int]:
    if (
        not isinstance(mempool_id, tuple)
        or len(mempool_id) != 2
        or not all(isinstance(part, int) and part >= 0 for part in mempool_id)
    ):
        raise TypeError(f"torch.accel.{where}: expected a memory pool id (a MemPool's id, a tuple of two ints), got {mempool_id!r}")
    return mempool_id


def _save_segment_usage(filename: str = "output.svg", snapshot: dict[str, Any] | None = None) -> None:
    from torch.cuda._memory_viz import segments

    with open(filename, "w") as f:
        f.write(segments(_snapshot() if snapshot is None else snapshot))


def _save_memory_usage(filename: str = "output.svg", snapshot: dict[str, Any] | None = None) -> None:
    from torch.cuda._memory_viz import memory

    with open(filename, "w") as f:
        f.write(memory(_snapshot() if snapshot is None else snapshot))


def attach_out_of_memory_observer(observer: Callable[[int, int, int, int], None]) -> None:
    r"""Call ``observer(device, alloc, device_total, device_free)`` whenever an accel allocation fails.

    torch.cuda's observer (``torch._C._cuda_attach_out_of_memory_observer``):
    it runs before the :class:`torch.OutOfMemoryError` is raised, with the
    device, the bytes requested, the bytes the process may use on the device
    (its total, or the cap of :func:`set_per_process_memory_fraction`) and
    the bytes free. A snapshot taken in it (:func:`_snapshot`) shows the
    memory at the failure, and its history ends with the ``"oom"`` event.
    Observers stay attached for the life of the process.
    """
    if not callable(observer):
        raise TypeError(
            f"torch.accel.memory.attach_out_of_memory_observer expects a callable, got {type(observer).__name__}"
        )
    _lazy_init()
    _C._attach_out_of_memory_observer(observer)


def _set_allocator_settings(env: str) -> None:
    r"""Change the allocator settings, given in PYTORCH_ALLOC_CONF's format (e.g. ``"max_split_size_mb:256"``).

    As torch.cuda.memory._set_allocator_settings, through
    ``torch._C._accelerator_setAllocatorSettings``: the settings are c10's,
    shared by every accelerator.
    """
    if not isinstance(env, str):
        raise TypeError(f"torch.accel.memory._set_allocator_settings expects a str, got {type(env).__name__}")
    try:
        torch._C._accelerator_setAllocatorSettings(env)
    except (ValueError, RuntimeError) as e:
        raise ValueError(
            f"accel: invalid allocator settings {env!r}: {e}. Expected comma-separated key:value pairs such as "
            "max_split_size_mb:256,garbage_collection_threshold:0.8,expandable_segments:False"
        ) from None



# Pluggable allocators and memory pools -----------------------------------------


class _AccelAllocator:
    r"""Wrapper over an accel memory allocator (as torch.cuda.memory._CUDAAllocator)."""

    def __init__(self, allocator: "_C._PluggableAllocator") -> None:
        self._allocator = allocator

    def allocator(self) -> "_C._PluggableAllocator":
        return self._allocator


class AccelPluggableAllocator(_AccelAllocator):
    r"""accel memory allocator loaded from a shared library, as torch.cuda.memory.CUDAPluggableAllocator.

    Make it the allocator of all accel memory with :func:`change_current_allocator`
    (before accel memory is first allocated), or of one pool with ``MemPool(allocator)``.

    Args:
        path_to_so_file (str): the shared library.
        alloc_fn_name (str): its allocation function,
            ``void* alloc(ssize_t size, int device, void* stream)``.
        free_fn_name (str): its release function,
            ``void free(void* ptr, size_t size, int device, void* stream)``.

    The stream is the runtime's: a ``cudaStream_t`` on the CUDA runtime (torch.cuda's
    signatures exactly), an accelrt stream on the host runtime. On the host runtime
    the memory must be host memory (the CPU's kernels read and write it).
    """

    def __init__(self, path_to_so_file: str, alloc_fn_name: str, free_fn_name: str) -> None:
        library = ctypes.CDLL(path_to_so_file)
        functions = []
        for role, name in (("allocation", alloc_fn_name), ("release", free_fn_name)):
            try:
                address = ctypes.cast(getattr(library, name), ctypes.c_void_p).value
            except AttributeError:
                raise AttributeError(
                    f"torch.accel.memory.AccelPluggableAllocator: {path_to_so_file} has no {role} function {name!r}"
                ) from None
            functions.append(address)
        # The library stays loaded as long as the allocator may call it.
        self._library = library
        super().__init__(_C._pluggable_allocator(*functions))


def change_current_allocator(allocator: _AccelAllocator) -> None:
    r"""Make ``allocator`` the allocator of all accel memory, as torch.cuda.memory.change_current_allocator.

    Only before accel memory is first allocated (a RuntimeError afterwards).
    """
    if not isinstance(allocator, _AccelAllocator):
        raise TypeError(
            f"torch.accel.memory.change_current_allocator expects an AccelPluggableAllocator, got {type(allocator).__name__}"
        )
    _C._change_current_allocator(allocator.allocator())


class MemPool:
    r"""A pool of accel memory, as torch.cuda.MemPool.

    Allocations routed to the pool (:func:`use_mem_pool`, or a graph captured with
    ``pool=pool.id``) take their memory from it; memory freed in the pool stays in it
    (reserved: :func:`memory_reserved` counts it, :func:`memory_allocated` no longer
    does) for its later allocations, until the pool is deleted (which releases its
    cached memory, and that of its tensors still alive once they are freed and
    :func:`empty_cache` runs). The pool belongs to the current accel device.

    Args:
        allocator (AccelPluggableAllocator, optional): where the pool's memory comes
            from; the accel allocator's source if ``None``.
        use_on_oom (bool): whether an allocation outside the pool that fails may
            use the pool's cached memory (CUDA runtime only).
        no_split (bool): whether the pool's segments are never split (the host
            runtime never splits them).
    """

    def __init__(
        self, allocator: Optional[_AccelAllocator] = None, use_on_oom: bool = False, no_split: bool = False
    ) -> None:
        _lazy_init()
        if allocator is not None and not isinstance(allocator, _AccelAllocator):
            raise TypeError(
                f"torch.accel.MemPool: allocator must be an AccelPluggableAllocator or None, got {type(allocator).__name__}"
            )
        self._allocator = allocator
        self._device = current_device()
        pool_id = _C._graph_pool_handle()
        _C._mem_pool_create(
            self._device, pool_id, None if allocator is None else allocator.allocator(), bool(use_on_oom), bool(no_split)
        )
        self._id: Optional[tuple[int, int]] = pool_id

    @property
    def id(self) -> tuple[int, int]:
        r"""The id of this pool, a tuple of two ints (for ``graph(pool=...)`` and :func:`memory_snapshot`)."""
        return self._id

    @property
    def allocator(self) -> Optional[_AccelAllocator]:
        r"""The allocator this pool's memory comes from (``None``: the accel allocator's source)."""
        return self._allocator

    @property
    def device(self) -> int:
        r"""The index of the accel device this pool belongs to."""
        return self._device

    def use_count(self) -> int:
        r"""Return the uses of this pool: its own, each active :func:`use_mem_pool`, each graph using it."""
        return _C._mem_pool_use_count(self._device, self._id)

    def snapshot(self, include_traces: bool = True) -> list[dict[str, Any]]:
        r"""Return the segments of this pool, in :func:`memory_snapshot`'s format."""
        return memory_snapshot(self._id, include_traces=include_traces)

    def __del__(self) -> None:
        pool_id, self._id = getattr(self, "_id", None), None
        if pool_id is None or _C is None:
            return
        # As torch.cuda's: the pool's own use goes, and its cached memory with it.
        _C._mem_pool_release(self._device, pool_id)
        _C._empty_pool_cache(pool_id)


@contextlib.contextmanager
def use_mem_pool(pool: MemPool, device: DeviceLike = None) -> Iterator[None]:
    r"""Route the allocations of this thread on an accel device to ``pool``, as torch.cuda.use_mem_pool.

    Args:
        pool (MemPool): the pool.
        device (torch.device or int, optional): the device; the current one if ``None``.
            It must be the pool's device.

    Only this thread's allocations go to the pool: those of threads started inside
    (autograd's backward, for one) do not.
    """
    if not isinstance(pool, MemPool):
        raise TypeError(f"torch.accel.use_mem_pool expects a torch.accel.MemPool, got {type(pool).__name__}")
    index = current_device() if device is None else _get_device_index(device)
    if index != pool.device:
        # torch.cuda would create a second pool of the same id on that device.
        raise ValueError(
            f"torch.accel.use_mem_pool: the memory pool {pool.id} belongs to accel:{pool.device}; allocations on "
            f"accel:{index} cannot be routed to it"
        )
    _C._begin_allocate_current_thread_to_pool(index, pool.id)
    try:
        yield
    finally:
        _C._end_allocate_to_pool(index, pool.id)
        _C._mem_pool_release(index, pool.id)
