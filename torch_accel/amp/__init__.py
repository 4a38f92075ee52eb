r"""Automatic mixed precision on accel, with torch.cuda.amp's API.

As in PyTorch 2.11's torch.cuda.amp, these are deprecated spellings of
``torch.amp.autocast("accel", ...)``, ``torch.amp.GradScaler("accel", ...)``
and ``torch.amp.custom_fwd/custom_bwd(device_type="accel")``; they warn with
a FutureWarning and behave exactly like them. The autocast policy itself
(which operators run in float16/bfloat16, which in float32) is CUDA's; see
csrc/amp/AutocastPolicy.cpp.
"""

from .autocast_mode import autocast, custom_bwd, custom_fwd
from .common import amp_definitely_not_available
from .grad_scaler import GradScaler

__all__ = [
    "amp_definitely_not_available",
    "autocast",
    "custom_bwd",
    "custom_fwd",
    "GradScaler",
]
