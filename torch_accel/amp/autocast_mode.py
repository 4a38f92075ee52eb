"""torch.accel.amp.autocast: torch.autocast with the device type fixed to accel."""

import functools
from typing import Any

import torch
from typing_extensions import deprecated

__all__ = ["autocast", "custom_fwd", "custom_bwd"]


@deprecated(
    "`torch.accel.amp.autocast(args...)` is deprecated. Please use `torch.amp.autocast('accel', args...)` instead.",
    category=FutureWarning,
)
class autocast(torch.amp.autocast_mode.autocast):
    r"""See :class:`torch.autocast`; ``device_type`` is ``"accel"``.

    Like torch.cuda.amp.autocast, its default ``dtype`` is ``torch.float16``.
    Deprecated: use ``torch.amp.autocast("accel", ...)``.
    """

    # deprecated() wraps __new__; before Python 3.13, inspect.signature then
    # shows (*args, **kwargs) unless __new__ spells the arguments out.
    def __new__(cls, enabled: bool = True, dtype: torch.dtype = torch.float16, cache_enabled: bool = True) -> "autocast":
        return super().__new__(cls)

    def __init__(self, enabled: bool = True, dtype: torch.dtype = torch.float16, cache_enabled: bool = True) -> None:
        super().__init__("accel", enabled=enabled, dtype=dtype, cache_enabled=cache_enabled)


@deprecated(
    "`torch.accel.amp.custom_fwd(args...)` is deprecated. "
    "Please use `torch.amp.custom_fwd(args..., device_type='accel')` instead.",
    category=FutureWarning,
)
def custom_fwd(fwd: Any = None, *, cast_inputs: torch.dtype | None = None) -> Any:
    r"""Deprecated: use ``torch.amp.custom_fwd(args..., device_type="accel")``."""
    return functools.partial(torch.amp.custom_fwd, device_type="accel")(fwd=fwd, cast_inputs=cast_inputs)


@deprecated(
    "`torch.accel.amp.custom_bwd(args...)` is deprecated. "
    "Please use `torch.amp.custom_bwd(args..., device_type='accel')` instead.",
    category=FutureWarning,
)
def custom_bwd(bwd: Any) -> Any:
    r"""Deprecated: use ``torch.amp.custom_bwd(args..., device_type="accel")``."""
    return functools.partial(torch.amp.custom_bwd, device_type="accel")(bwd)
