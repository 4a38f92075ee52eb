"""Lazy initialisation of accel, with torch.cuda's semantics.

Nothing touches a device until the first call that needs one. Calls made
before that (for example seeding) can be queued with ``_lazy_call``; they run,
in order, during initialisation, and a failing one is reported with the
traceback of the place that queued it.
"""

import threading
import traceback
from collections.abc import Callable
from typing import Any

from . import _C

_initialized = False
_tls = threading.local()
_initialization_lock = threading.Lock()
_queued_calls: list[tuple[Callable[[], Any], list[str]]] = []
# As torch.cuda: only the latest manual_seed / manual_seed_all queued before
# initialisation matters, so each is kept in a slot instead of the queue.
_queued_seed_call: tuple[Callable[[], Any], list[str]] | None = None
_queued_seed_all_call: tuple[Callable[[], Any], list[str]] | None = None
# Per-device default generators (torch.Generator objects), set at init.
default_generators: tuple[Any, ...] = ()


class DeferredAccelCallError(Exception):
    """A call queued with ``_lazy_call`` failed when accel initialised."""


def _is_in_bad_fork() -> bool:
    """Whether this process was forked from one that had initialised accel."""
    return _C._is_in_bad_fork()


def is_initialized() -> bool:
    r"""Return whether accel's state has been initialized (and is usable in this process)."""
    return _initialized and not _is_in_bad_fork()


def _lazy_call(callable: Callable[[], Any], seed: bool = False, seed_all: bool = False) -> None:
    """Run ``callable`` now if accel is initialised, else queue it for initialisation.

    ``seed``/``seed_all`` mark seeding calls, of which only the latest of each
    kind runs (seed_all first, then seed), as in torch.cuda.
    """
    global _queued_seed_call, _queued_seed_all_call
    with _initialization_lock:
        if is_initialized():
            callable()
            return
        entry = (callable, traceback.format_stack())
        if seed_all:
            _queued_seed_all_call = entry
        elif seed:
            _queued_seed_call = entry
        else:
            _queued_calls.append(entry)


def init() -> None:
    r"""Initialize accel's state.

    Explicit calls are only needed to initialise eagerly: every accel call that
    needs a device initialises lazily. Does nothing if accel is already
    initialised. Raises RuntimeError when there is no accel device, when the
    runtime is misconfigured, or in a subprocess forked after initialisation.
    """
    _lazy_init()


def _lazy_init() -> None:
    global _initialized, default_generators, _queued_seed_call, _queued_seed_all_call
    if is_initialized() or hasattr(_tls, "is_initializing"):
        return
    with _initialization_lock:
        # Another thread may have finished initialising while we waited.
        if is_initialized():
            return
        # Raises for a forked child, a missing device, a bad configuration.
        _C._init()
        default_generators = tuple(_C._default_generator(i) for i in range(_C._device_count()))
        # Queued calls may call accel functions that would re-enter here; the
        # flag lets them through (this thread holds the lock).
        _tls.is_initializing = True
        try:
            seeds = [c for c in (_queued_seed_all_call, _queued_seed_call) if c is not None]
            for queued_call, origin in seeds + _queued_calls:
                try:
                    queued_call()
                except Exception as e:
                    msg = (
                        f"accel call failed lazily at initialization with error: {e}\n\n"
                        f"accel call was originally invoked at:\n\n{''.join(origin)}"
                    )
                    raise DeferredAccelCallError(msg) from e
            _queued_calls.clear()
            _queued_seed_call = _queued_seed_all_call = None
        finally:
            delattr(_tls, "is_initializing")
        _initialized = True
