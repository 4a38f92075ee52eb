"""Random number generation on accel, with torch.cuda.random's API.

Each accel device has a default generator (``torch.accel.default_generators``)
wrapping a target-device generator of its own, so accel's random numbers for a
seed are those the target device produces for that seed, while accel's streams
stay independent of the target's. ``torch.manual_seed`` seeds accel too.
"""

from collections.abc import Iterable

import torch
from torch import Tensor

from . import _core
from ._core import _lazy_call, _lazy_init, current_device, device_count, is_initialized

__all__ = [
    "get_rng_state",
    "get_rng_state_all",
    "set_rng_state",
    "set_rng_state_all",
    "manual_seed",
    "manual_seed_all",
    "seed",
    "seed_all",
    "initial_seed",
]


def _device_index(device: int | str | torch.device) -> int | None:
    if isinstance(device, str):
        device = torch.device(device)
    elif isinstance(device, int):
        return device
    if device.type != "accel":
        raise ValueError(f"Expected an accel device, got {device}")
    return device.index


def _generator(index: int | None) -> torch.Generator:
    if index is None:
        index = current_device()
    if not 0 <= index < device_count():
        raise RuntimeError(f"Invalid accel device index {index}: there are {device_count()} accel devices")
    # Set at initialisation: read from _core at each call.
    return _core.default_generators[index]


def get_rng_state(device: int | str | torch.device = "accel") -> Tensor:
    r"""Return the random number generator state of the given accel device as a ByteTensor.

    Args:
        device (torch.device or int, optional): The device to return the RNG state of.
            Default: ``'accel'`` (the current accel device).

    .. warning::
        This function eagerly initializes accel.
    """
    _lazy_init()
    return _generator(_device_index(device)).get_state()


def get_rng_state_all() -> list[Tensor]:
    r"""Return a list of ByteTensor representing the random number states of all accel devices."""
    return [get_rng_state(i) for i in range(device_count())]


def set_rng_state(new_state: Tensor, device: int | str | torch.device = "accel") -> None:
    r"""Set the random number generator state of the given accel device.

    Args:
        new_state (torch.ByteTensor): The desired state.
        device (torch.device or int, optional): The device to set the RNG state of.
            Default: ``'accel'`` (the current accel device).
    """
    if not is_initialized():
        # The callback runs later, at initialisation: keep the state as it is now.
        new_state = new_state.clone(memory_format=torch.contiguous_format)
    index = _device_index(device)
    _lazy_call(lambda: _generator(index).set_state(new_state))


def set_rng_state_all(new_states: Iterable[Tensor]) -> None:
    r"""Set the random number generator state of all accel devices, one state per device."""
    for index, state in enumerate(new_states):
        set_rng_state(state, index)


def manual_seed(seed: int) -> None:
    r"""Set the seed for generating random numbers on the current accel device.

    It is safe to call this function when accel is not available; it is then
    silently ignored. Before initialisation the seed is applied at initialisation.

    Args:
        seed (int): The desired seed.
    """
    seed = int(seed)
    _lazy_call(lambda: _generator(None).manual_seed(seed), seed=True)


def manual_seed_all(seed: int) -> None:
    r"""Set the seed for generating random numbers on all accel devices.

    It is safe to call this function when accel is not available; it is then
    silently ignored.

    Args:
        seed (int): The desired seed.
    """
    seed = int(seed)

    def cb() -> None:
        for generator in _core.default_generators:
            generator.manual_seed(seed)

    _lazy_call(cb, seed_all=True)


def seed() -> None:
    r"""Set the seed for generating random numbers to a random number for the current accel device."""
    _lazy_call(lambda: _generator(None).seed())


def seed_all() -> None:
    r"""Set the seed for generating random numbers to a random number on all accel devices (the same one)."""

    def cb() -> None:
        generators = _core.default_generators
        if generators:
            generators[0].seed()
            for generator in generators[1:]:
                generator.manual_seed(generators[0].initial_seed())

    _lazy_call(cb)


def initial_seed() -> int:
    r"""Return the current random seed of the current accel device.

    .. warning::
        This function eagerly initializes accel.
    """
    _lazy_init()
    return _generator(None).initial_seed()
