"""What torch.cuda.amp.common offers, for accel."""

__all__ = ["amp_definitely_not_available"]


def amp_definitely_not_available() -> bool:
    r"""Return True when no accel device exists, so autocast on accel cannot run."""
    from .. import is_available

    return not is_available()
