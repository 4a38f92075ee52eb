r"""Fault injection: make accel's operations fail on purpose, to test error paths.

``torch.accel._fault_injection`` (docs/fault-injection.md). On the host
runtime, operations of an armed *kind* fail as if the device had failed them:

- ``"allocation"``: allocations of accel memory raise ``torch.OutOfMemoryError``;
- ``"stream_event"``: stream and event operations (record, wait, query,
  synchronize, elapsed time, creation) raise ``RuntimeError``;
- ``"copy"``: copies to, from and between accel devices raise ``RuntimeError``.

Each message names the device. Counting a kind's operations from when it is
armed, operation ``nth`` fails (once), and each operation fails with
``probability``, drawn from a generator seeded with ``seed``: the same plan
fails the same operations of the same program. Nothing is armed unless a test
arms it, or ``TORCH_ACCEL_HOST_FAULTS`` does for a whole process (children
included), e.g. ``allocation:nth=3,copy:probability=0.01:seed=7``. The CUDA
runtime injects nothing and raises when asked to.
"""

import contextlib
from collections.abc import Iterator
from typing import NamedTuple

from . import _C, _core

__all__ = ["KINDS", "FaultCounts", "counts", "inject", "injected", "clear"]

KINDS = ("allocation", "stream_event", "copy")


class FaultCounts(NamedTuple):
    """Operations of a kind counted, and failed by injection, since it was armed."""

    operations: int
    injected: int


def _check_kind(kind: str) -> None:
    if kind not in KINDS:
        raise ValueError(f"accel: no fault kind {kind!r}; the kinds are {', '.join(KINDS)}")


def inject(kind: str, *, nth: int = 0, probability: float = 0.0, seed: int = 0) -> None:
    r"""Arm ``kind``: its ``nth`` operation from now fails (0: none), and each
    fails with ``probability`` (seeded by ``seed``). Neither disarms it. Resets
    its counts."""
    _check_kind(kind)
    if not isinstance(nth, int) or nth < 0:
        raise ValueError(f"accel: nth must be an integer >= 0, got {nth!r}")
    if not 0.0 <= probability <= 1.0:
        raise ValueError(f"accel: a fault probability must lie in [0, 1], got {probability!r}")
    if not isinstance(seed, int) or seed < 0:
        raise ValueError(f"accel: seed must be an integer >= 0, got {seed!r}")
    _core._lazy_init()
    _C._inject_faults(kind, nth, float(probability), seed)


def clear(kind: str | None = None) -> None:
    r"""Disarm ``kind`` (every kind when None)."""
    for k in KINDS if kind is None else (kind,):
        inject(k)


def counts(kind: str) -> FaultCounts:
    r"""How many operations of ``kind`` ran and how many failed since it was armed."""
    _check_kind(kind)
    _core._lazy_init()
    return FaultCounts(*_C._fault_counts(kind))


@contextlib.contextmanager
def injected(kind: str, *, nth: int = 0, probability: float = 0.0, seed: int = 0) -> Iterator[None]:
    r"""Arm ``kind`` for the ``with`` block, then disarm it (also when the block raises)."""
    inject(kind, nth=nth, probability=probability, seed=seed)
    try:
        yield
    finally:
        clear(kind)
