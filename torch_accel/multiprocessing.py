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
as torch passes a cpu storage's (``DupFd``); the CUDA runtime does not share
yet and raises in the sending process.

A storage received twice (the same tensor sent again, or two views of one
storage sent apart) is mapped once, through torch's ``shared_cache``, so the
receiver's tensors share one storage as the sender's do.
"""

import multiprocessing
import os
from multiprocessing import reduction
from typing import Any

import torch
from torch.multiprocessing import reductions as _torch_reductions

from . import _C

DEVICE_TYPE = "accel"

# torch's reduction for storages of the other device types.
_reduce_torch_storage = _torch_reductions.reduce_storage


def _rebuild_empty_storage(device: int) -> torch.UntypedStorage:
    return torch.UntypedStorage(0, device=torch.device(DEVICE_TYPE, device))


def _rebuild_storage(df: Any, runtime_handle: bytes, nbytes: int, device: int) -> torch.UntypedStorage:
    r"""Maps, in the receiving process, the accel storage that ``_reduce_storage`` shared."""
    from . import _lazy_init

    _lazy_init()
    fd = df.detach() if df is not None else -1
    try:
        key = (_torch_reductions.fd_id(fd),) if fd >= 0 else (runtime_handle,)
        storage = _torch_reductions.storage_from_cache(torch.UntypedStorage, key)
        if storage is not None:
            return storage
        storage = _C._open_shared_storage(fd, runtime_handle, nbytes, device)
        _torch_reductions.shared_cache[key] = _torch_reductions.StorageWeakRef(storage)
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
        fd, runtime_handle, nbytes = _C._share_storage(storage)
    except RuntimeError as e:
        raise RuntimeError(f"Cannot send an accel tensor to another process: {e}") from e
    # The descriptor travels as torch sends cpu storages' (a duplicate, handed
    # over by the sender's resource sharer, or through the pipe of a spawned
    # Process): the segment stays alive while it is in transit.
    df = multiprocessing.reduction.DupFd(fd) if fd >= 0 else None
    key = (_torch_reductions.fd_id(fd),) if fd >= 0 else (runtime_handle,)
    # Keeps the receiver's cache key of this process' own storage, as torch
    # does for the storages it sends.
    _torch_reductions.shared_cache[key] = _torch_reductions.StorageWeakRef(storage)
    return (_rebuild_storage, (df, runtime_handle, nbytes, device))


def init_reductions() -> None:
    r"""Registers accel's storage reduction (``torch.multiprocessing.reductions.init_reductions`` registers torch's)."""
    reduction.register(torch.UntypedStorage, _reduce_storage)
