"""What torch.cuda.amp.common offers, for accel."""

from .._core import is_available

__all__ = ["amp_definitely_not_available"]


def amp_definitely_not_available() -> bool:
    r"""Return True when no accel device exists, so autocast on accel cannot run."""
    return not is_available()
