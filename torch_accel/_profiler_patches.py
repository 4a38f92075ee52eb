"""The one adaptation of PyTorch 2.11's profiler that accel needs.

Everything else accel's profiling needs goes through PyTorch's hooks for a
PrivateUse1 backend (ProfilerStubs and a Kineto child profiler, both in
csrc/profiler). What follows has no hook: like _inductor_patches, the patch
names the code it adapts and why, wraps the original rather than copying it,
and records the hash of the source it was written against; test_profiler fails
when that source changes.

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
import hashlib
import inspect
import warnings
from typing import Any, Callable

import torch

_DEVICE_TYPE = "accel"

# The code each patch adapts, with the sha256 of its torch 2.11.0 source
# (inspect.getsource). test_profiler checks them against the installed torch.
SOURCE_SHA256 = {
    "torch.autograd.profiler.profile.__init__": "ea6ecd049a2176606ceda286a514ef780c7d9ac937d531d4e28a9ccd8ed6d018",
}

_original_profile_init: Callable[..., Any] | None = None


def original(name: str) -> Callable[..., Any]:
    """The unpatched function ``name`` (one of SOURCE_SHA256)."""
    assert name == "torch.autograd.profiler.profile.__init__", name
    return inspect.unwrap(torch.autograd.profiler.profile.__init__)


def source_sha256(function: Callable[..., Any]) -> str:
    return hashlib.sha256(inspect.getsource(function).encode()).hexdigest()


def _accel_available() -> bool:
    import torch_accel

    return torch_accel.is_available()


def apply_profiler_patches() -> None:
    global _original_profile_init
    if _original_profile_init is not None:
        return
    profile = torch.autograd.profiler.profile
    _original_profile_init = profile.__init__

    @functools.wraps(_original_profile_init)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        # use_device is keyword-only in profile.__init__.
        if kwargs.get("use_device") == _DEVICE_TYPE and not _accel_available():
            warnings.warn("accel is not available, disabling accel profiling", stacklevel=2)
            kwargs["use_device"] = None
        _original_profile_init(self, *args, **kwargs)

    profile.__init__ = __init__
