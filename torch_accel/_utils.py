"""Argument normalisation shared by torch.accel's functions."""

from typing import Any, Optional, Union

import torch

from . import _C
from ._lazy import _lazy_init

_DEVICE_TYPE = "accel"

DeviceLike = Optional[Union[torch.device, str, int]]


def _get_device_index(device: Any, optional: bool = False) -> int:
    r"""Return the accel device index that ``device`` names.

    ``device`` may be a torch.device, a device string such as ``"accel:1"``, an
    int, or None. Without an index (``None``, ``"accel"``), ``optional=True``
    gives the current device and ``optional=False`` raises. A device of any
    other type raises ValueError; an argument of another kind, TypeError.
    Whether the index exists is checked where it is used.
    """
    if isinstance(device, str):
        device = torch.device(device)
    if isinstance(device, torch.device):
        if device.type != _DEVICE_TYPE:
            raise ValueError(f"Expected an accel device, but got: {device}")
        index = device.index
    elif isinstance(device, bool):
        raise TypeError(f"Expected an accel device or an integer device index, but got a bool: {device}")
    elif isinstance(device, int):
        index = device
    elif device is None:
        index = None
    else:
        raise TypeError(
            "Expected an accel device (torch.device, str or int), but got "
            f"{type(device).__name__}: {device!r}"
        )
    if index is None:
        if not optional:
            raise ValueError(f"Expected an accel device with a specified index or an integer, but got: {device}")
        # torch_accel.current_device(), without importing it on every call
        # (a function-level import costs more than the rest of this function).
        _lazy_init()
        return _C._get_device()
    return index
