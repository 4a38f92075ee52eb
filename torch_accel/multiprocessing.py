"""Sharing accel tensors between processes (torch.multiprocessing).

``import torch_accel`` registers a reduction for accel storages with
multiprocessing's ``ForkingPickler``, next to the ones
``torch.multiprocessing.reductions`` registers for cpu and cuda, so that the
stock ``torch.multiprocessing`` (Queue, Pipe, Process arguments, DataLoader
workers) sends accel tensors as it sends cuda tensors: the receiver gets a
tensor over the *same* accel memory, its in-place writes are seen by the
sender, and the memory lives while any process holds it.

Tensors need nothing of their own: torch's tensor reduction sends a non-cuda
tensor as its storage and its geometry, and the storage reaches this module.
The runtime decides how memory is shared (``Runtime::shareStorage``): on the
host runtime, a POSIX shared memory segment passed by file descriptor, exactly
as torch passes a cpu storage's (``DupFd``); on the CUDA runtime, CUDA IPC
handles of the caching allocator's blocks with torch's reference counting for
cuda storages (the sender keeps the memory until every receiver released it)
and an interprocess event that orders the receiver after the sender's stream
(compiled, not yet run on a GPU).

accel events made with ``interprocess=True`` cross as cuda's do: as their
``ipc_handle()``, reopened with ``Event.from_ipc_handle``.

A storage received twice (the same tensor sent again, or two views of one
storage sent apart) is mapped once, through torch's ``shared_cache``, so the
receiver's tensors share one storage as the sender's do.

``ipc_collect`` (``torch.accel.ipc_collect``) frees what a sender keeps for
receivers that released it.
"""

import multiprocessing
import os
from multiprocessing import reduction
from typing import Any

import torch
from torch.multiprocessing import reductions as _torch_reductions

from . import _C
from ._core import DEVICE_TYPE, _lazy_init
from .streams import Event


# torch's reduction for storages of the other device types.
_reduce_torch_storage = _torch_reductions.reduce_storage


def ipc_collect() -> None:
    r"""Force collects accel memory after it has been released by the processes it was shared with.

    As torch.cuda.ipc_collect: a process that sent accel tensors to others
    (torch.multiprocessing) keeps their memory, even once it freed them
    itself, until every receiver released it. This frees the memory of those
    sent tensors that all receivers have released since, and the reference
    counting files no longer in use. Useful when the producer process stopped
    actively sending tensors and wants to release unused memory.

    On the CUDA runtime it collects what torch keeps for CUDA IPC, as
    torch.cuda.ipc_collect does. On the host runtime shared memory is freed
    as soon as the last process that holds it releases it, so there is
    nothing left to collect: it only initialises accel.
    """
    _lazy_init()
    _C._ipc_collect()


def _rebuild_empty_storage(device: int) -> torch.UntypedStorage:
    return torch.UntypedStorage(0, device=torch.device(DEVICE_TYPE, device))


def _cache_key(fd: int, key: bytes) -> tuple:
    # The runtime's key where it gives one (CUDA: the block and offset), else
    # the identity of the shared memory file (as torch keys cpu storages).
    return ("accel", key) if key else ("accel", _torch_reductions.fd_id(fd))


def _rebuild_storage(df: Any, runtime_handle: bytes, nbytes: int, key: bytes, device: int) -> torch.UntypedStorage:
    r"""Maps, in the receiving process, the accel storage that ``_reduce_storage`` shared."""
    _lazy_init()
    fd = df.detach() if df is not None else -1
    try:
        cache_key = _cache_key(fd, key)
        storage = _torch_reductions.storage_from_cache(torch.UntypedStorage, cache_key)
        if storage is not None:
            # Mapped here already (or this process' own storage, sent back):
            # after the sender's work, as a new mapping would be, and without
            # what the sender counted for this message.
            _C._reuse_shared_storage(runtime_handle, nbytes, device)
            return storage
        storage = _C._open_shared_storage(fd, runtime_handle, nbytes, device)
        _torch_reductions.shared_cache[cache_key] = _torch_reductions.StorageWeakRef(storage)
        return storage
    finally:
        if fd >= 0:
            os.close(fd)


def _reduce_storage(storage: torch.UntypedStorage) -> tuple:
    r"""``ForkingPickler``'s reduction for ``torch.UntypedStorage``: accel's own, torch's otherwise."""
    if storage.device.type != DEVICE_TYPE:
        return _reduce_torch_storage(storage)
    device = storage.device.index
    if storage.nbytes() == 0:
        return (_rebuild_empty_storage, (device,))
    try:
        fd, runtime_handle, nbytes, key = _C._share_storage(storage)
    except RuntimeError as e:
        raise RuntimeError(f"Cannot send an accel tensor to another process: {e}") from e
    # A descriptor travels as torch sends cpu storages' (a duplicate, handed
    # over by the sender's resource sharer, or through the pipe of a spawned
    # Process): the memory stays alive while it is in transit.
    df = multiprocessing.reduction.DupFd(fd) if fd >= 0 else None
    # Keeps this process' own storage under the receiver's key, as torch does
    # for the storages it sends: a tensor sent back is this storage again.
    _torch_reductions.shared_cache[_cache_key(fd, key)] = _torch_reductions.StorageWeakRef(storage)
    return (_rebuild_storage, (df, runtime_handle, nbytes, key, device))


def _rebuild_event(device: int, handle: bytes) -> Event:
    return Event.from_ipc_handle(device, handle)


def _reduce_event(event: Event) -> tuple:
    r"""``ForkingPickler``'s reduction for accel events (those made with ``interprocess=True``)."""
    handle = event.ipc_handle()
    return (_rebuild_event, (event.device.index, handle))


def init_reductions() -> None:
    r"""Registers accel's reductions (``torch.multiprocessing.reductions.init_reductions`` registers torch's)."""
    reduction.register(torch.UntypedStorage, _reduce_storage)
    reduction.register(Event, _reduce_event)
