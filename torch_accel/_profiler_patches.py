"""The one adaptation of PyTorch 2.11's profiler that accel needs.

Everything else accel's profiling needs goes through PyTorch's hooks for a
PrivateUse1 backend (ProfilerStubs and a Kineto child profiler, both in
csrc/profiler). What follows has no hook: like every patch, it is declared in
torch_accel/_patches.py with the hash of the source it was written against
(test_patches fails when that source changes), names the code it adapts and
why, and wraps the original rather than copying it. Applied at ``import
torch_accel`` (the profiler is loaded with torch).

``torch.autograd.profiler.profile`` turns device profiling off, with a
warning, when ``use_device`` names cuda, xpu or hpu and that device is not
available. It has no such check for a PrivateUse1 backend, so with
``use_device="accel"`` (which ``torch.profiler.profile`` passes for
``ProfilerActivity.PrivateUse1``) in a process without accel devices it would
profile, then call ``torch.accel.synchronize()`` on exit, which raises for
want of a device and leaves the profiler enabled. The patch gives accel what
cuda gets: "accel is not available, disabling accel profiling", and a CPU-only
profile.
"""

import functools
import warnings
from typing import Any, Callable

import torch

from . import _patches
from ._core import DEVICE_TYPE, is_available



@_patches.patch("torch.autograd.profiler.profile.__init__")
def profile_without_device(original: Callable[..., Any]) -> None:
    @functools.wraps(original)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        # use_device is keyword-only in profile.__init__.
        if kwargs.get("use_device") == DEVICE_TYPE and not is_available():
            warnings.warn("accel is not available, disabling accel profiling", stacklevel=2)
            kwargs["use_device"] = None
        original(self, *args, **kwargs)

    torch.autograd.profiler.profile.__init__ = __init__


def apply_profiler_patches() -> None:
    _patches.apply(profile_without_device)
