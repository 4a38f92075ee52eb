"""torch.accel.amp.GradScaler: torch.amp.GradScaler with the device fixed to accel."""

import torch
from typing_extensions import deprecated

__all__ = ["GradScaler"]


class GradScaler(torch.amp.GradScaler):
    r"""See :class:`torch.amp.GradScaler`; the device is ``"accel"``.

    Deprecated, as torch.cuda.amp.GradScaler: use ``torch.amp.GradScaler("accel", ...)``.
    """

    @deprecated(
        "`torch.accel.amp.GradScaler(args...)` is deprecated. Please use `torch.amp.GradScaler('accel', args...)` instead.",
        category=FutureWarning,
    )
    def __init__(
        self,
        init_scale: float = 2.0**16,
        growth_factor: float = 2.0,
        backoff_factor: float = 0.5,
        growth_interval: int = 2000,
        enabled: bool = True,
    ) -> None:
        super().__init__(
            "accel",
            init_scale=init_scale,
            growth_factor=growth_factor,
            backoff_factor=backoff_factor,
            growth_interval=growth_interval,
            enabled=enabled,
        )
