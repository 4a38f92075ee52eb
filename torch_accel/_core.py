r"""The device basics of accel, which every module of the package imports.

Lazy initialisation (torch.cuda's semantics, one gate: ``_lazy_init``), the
runtime and what it can do, device count, the current device, device
selection, synchronisation and device properties. The package face
(``__init__.py``, ``torch.accel``) re-exports the public names; modules of the
package import them from here, never from the face.

Nothing touches a device until the first call that needs one. Calls made
before that (for example seeding) can be queued with ``_lazy_call``; they run,
in order, during initialisation, and a failing one is reported with the
traceback of the place that queued it.
"""

import atexit
import dataclasses
import functools
import threading
import traceback
from collections.abc import Callable
from typing import Any, Optional, Union

import torch

from . import _C

DEVICE_TYPE = "accel"

DeviceLike = Optional[Union[torch.device, str, int]]

# --- lazy initialisation ---------------------------------------------------------

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


def _drain_autograd_device_threads() -> None:
    """Wait, at exit, until autograd's device threads have dropped their last graph.

    Autograd runs the accel part of a backward on a thread per device (as for
    cuda) and completes the caller's backward() before that thread lets go of
    the graph. A graph holding Python objects (a custom Function, a hook, the
    callback FSDP queues) then needs the GIL to be released; if the
    interpreter is finalizing by then, the thread is ended inside C++ and the
    process aborts ("terminate called without an active exception"). The
    interpreter runs this before it finalizes: a tiny backward on every
    device, which each device thread runs only after it has dropped the graph
    before it. A program that backpropagates on accel and returns at once
    then exits cleanly.
    """
    if not is_initialized():
        return
    try:
        with torch.enable_grad():
            for index in range(_C._device_count()):
                leaf = torch.zeros((), device=torch.device(DEVICE_TYPE, index), requires_grad=True)
                (leaf + 0).backward()
    except Exception:  # noqa: BLE001 - best effort at exit: the program's own outcome stands
        pass


atexit.register(_drain_autograd_device_threads)


# --- the runtime and what it can do ----------------------------------------------


def runtime() -> str:
    r"""Return the name of the runtime backing accel in this process: ``"cuda"`` or ``"host"``.

    A name to report and to key caches on; code that must know what the
    runtime can do asks :func:`capabilities`.
    """
    return _C._runtime_name()


def _target_device_type() -> str:
    r"""The device type whose kernels run accel's work: ``"cuda"`` or ``"cpu"``."""
    return _C._target_device_type()


class Capabilities:
    """What the runtime backing accel can do, for the code above it that must choose.

    (A plain class: a NamedTuple or a dataclass would cost a few hundred
    microseconds of ``import torch_accel``.)
    """

    __slots__ = ("host_memory", "inductor_kernels", "compiles_triton")

    def __init__(self, *, host_memory: bool, inductor_kernels: str, compiles_triton: bool) -> None:
        # Accel memory is host memory: host code (Inductor's C++ kernels,
        # Triton's interpreter) reads and writes it directly.
        self.host_memory = host_memory
        # The kernels Inductor generates for accel unless told otherwise
        # (TORCH_ACCEL_INDUCTOR): its kernels for the target, "cpp" or "triton".
        self.inductor_kernels = inductor_kernels
        # Triton compiles kernels for accel's devices and launches them there
        # (otherwise only Triton's interpreter runs Triton kernels, on host memory).
        self.compiles_triton = compiles_triton

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={getattr(self, name)!r}" for name in self.__slots__)
        return f"Capabilities({fields})"


# What a runtime whose target device type is the key answers (csrc/runtime's
# CudaRuntime and HostRuntime: accel memory is the target's memory and accel's
# kernels are the target's), for code that reasons about a runtime other than
# this process's; this process's own answers come from its runtime.
_CAPABILITIES_OF_TARGET = {
    "cpu": Capabilities(host_memory=True, inductor_kernels="cpp", compiles_triton=False),
    "cuda": Capabilities(host_memory=False, inductor_kernels="triton", compiles_triton=True),
}


def capabilities_of_target(target: str) -> Capabilities:
    """The capabilities of a runtime whose target device type is ``target``."""
    return _CAPABILITIES_OF_TARGET[target]


_capabilities: Optional[Capabilities] = None


def capabilities() -> Capabilities:
    """What the runtime of this process can do (see Capabilities), as the runtime answers it.

    Never initialises accel: the runtime is selected, not started."""
    global _capabilities
    if _capabilities is None:
        _capabilities = Capabilities(**_C._runtime_capabilities())
    return _capabilities


# --- devices ---------------------------------------------------------------------


def is_available() -> bool:
    r"""Return whether an accel device is available. Never raises, never initialises."""
    return device_count() > 0


def device_count() -> int:
    r"""Return the number of accel devices. Never raises, never creates a device context."""
    return _C._device_count()


def _get_device_index(device: Any, optional: bool = False) -> int:
    r"""Return the accel device index that ``device`` names.

    ``device`` may be a torch.device, a device string such as ``"accel:1"``, an
    int, or None. Without an index (``None``, ``"accel"``), ``optional=True``
    gives the current device and ``optional=False`` raises. A device of any
    other type raises ValueError; an argument of another kind, TypeError.
    Whether the index exists is checked where it is used.
    """
    if isinstance(device, str):
        device = torch.device(device)
    if isinstance(device, torch.device):
        if device.type != DEVICE_TYPE:
            raise ValueError(f"Expected an accel device, but got: {device}")
        index = device.index
    elif isinstance(device, bool):
        raise TypeError(f"Expected an accel device or an integer device index, but got a bool: {device}")
    elif isinstance(device, int):
        index = device
    elif device is None:
        index = None
    else:
        raise TypeError(
            "Expected an accel device (torch.device, str or int), but got "
            f"{type(device).__name__}: {device!r}"
        )
    if index is None:
        if not optional:
            raise ValueError(f"Expected an accel device with a specified index or an integer, but got: {device}")
        # current_device(), without its Python frame (this runs on every call
        # that takes a device).
        _lazy_init()
        return _C._get_device()
    return index


def current_device() -> int:
    r"""Return the index of the currently selected accel device."""
    _lazy_init()
    return _C._get_device()


def set_device(device: DeviceLike) -> None:
    r"""Set the current accel device.

    Prefer the ``device`` context manager, which restores the previous device.
    Unlike torch.cuda.set_device, a negative index is an error, not a no-op.
    """
    index = _get_device_index(device)
    _lazy_init()
    _C._set_device(index)


def _exchange_device(device: int) -> int:
    r"""Make ``device`` current and return the previous device; ``device=-1`` does nothing and gives -1.

    Any other index that names no accel device raises (torch.cuda ignores
    every negative index).
    """
    if device == -1:
        return -1
    _lazy_init()
    return _C._exchange_device(device)


def _maybe_exchange_device(device: int) -> int:
    r"""Like _exchange_device, but never creates a context on ``device``."""
    if device == -1:
        return -1
    _lazy_init()
    return _C._maybe_exchange_device(device)


class device:
    r"""Context manager that changes the selected accel device.

    Args:
        device (torch.device, str or int): device index to select. ``-1`` or
            None makes it a no-op; any other index that names no accel device
            (``-5`` included, which torch.cuda.device ignores) raises
            RuntimeError on entry.
    """

    def __init__(self, device: Any) -> None:
        self.idx = -1 if device is None else _get_device_index(device, optional=True)
        self.prev_idx = -1

    def __enter__(self) -> None:
        self.prev_idx = _exchange_device(self.idx)

    def __exit__(self, exc_type: Any, exc_value: Any, traceback: Any) -> None:
        self.idx = _maybe_exchange_device(self.prev_idx)


# Context manager that makes accel:index current and restores the previous
# device on exit; as torch.cuda._DeviceGuard, it takes only an int (-1: no-op)
# and costs less than ``device``: a C type, which Inductor's generated
# wrappers enter on every call of a compiled graph.
_DeviceGuard = _C._DeviceGuard


class device_of(device):
    r"""Context manager that makes the device of ``obj`` current; a no-op for non-accel objects.

    Args:
        obj (Tensor or Storage): object allocated on the selected device.
    """

    def __init__(self, obj: Any) -> None:
        super().__init__(obj.get_device() if obj.device.type == DEVICE_TYPE else -1)


def synchronize(device: DeviceLike = None) -> None:
    r"""Wait for all work on all streams of an accel device (the current one if None) to complete."""
    _lazy_init()
    _C._synchronize(_get_device_index(device, optional=True))


# --- device properties -----------------------------------------------------------


@functools.cache
def _device_properties_type() -> type:
    # Made at the first use, not at import: a dataclass generates and compiles
    # its methods when it is made, which would add about 1.5 ms to
    # `import torch_accel`. The face's module __getattr__ answers its name.
    @dataclasses.dataclass(frozen=True)
    class _AccelDeviceProperties:
        r"""Properties of an accel device, as torch.cuda.get_device_properties reports them."""

        name: str
        total_memory: int
        major: int
        minor: int
        multi_processor_count: int
        warp_size: int
        max_threads_per_block: int
        max_threads_per_multi_processor: int
        regs_per_multiprocessor: int
        shared_memory_per_block: int
        shared_memory_per_multiprocessor: int
        L2_cache_size: int
        uuid: str

        def __repr__(self) -> str:
            return (
                f"_AccelDeviceProperties(name='{self.name}', major={self.major}, minor={self.minor}, "
                f"total_memory={self.total_memory // (1024 * 1024)}MB, "
                f"multi_processor_count={self.multi_processor_count})"
            )

    # Its public home (pickle finds it there): torch.accel._AccelDeviceProperties.
    _AccelDeviceProperties.__module__ = __name__.rpartition(".")[0]
    _AccelDeviceProperties.__qualname__ = "_AccelDeviceProperties"
    return _AccelDeviceProperties


def get_device_properties(device: DeviceLike = None) -> "_AccelDeviceProperties":
    r"""Return the properties of an accel device (the current one if None)."""
    _lazy_init()
    return _device_properties_type()(**_C._get_device_properties(_get_device_index(device, optional=True)))


def get_device_name(device: DeviceLike = None) -> str:
    r"""Return the name of an accel device (the current one if None)."""
    return get_device_properties(device).name


def get_device_capability(device: DeviceLike = None) -> tuple[int, int]:
    r"""Return the (major, minor) compute capability of an accel device (the current one if None)."""
    props = get_device_properties(device)
    return props.major, props.minor


def is_bf16_supported(including_emulation: bool = True) -> bool:
    r"""Return whether the current accel device supports bfloat16.

    With ``including_emulation`` (the default, as torch.cuda), bfloat16 counts
    as supported wherever it computes correctly, natively or emulated.
    """
    if not is_available():
        return False
    if including_emulation:
        return True
    return "BFloat16" in _C._supported_dtypes(current_device())


def get_amp_supported_dtype() -> list[torch.dtype]:
    r"""Return the dtypes that ``torch.autocast("accel", dtype=...)`` accepts.

    torch.autocast asks a PrivateUse1 device module for them: with any other
    dtype it warns and runs with autocast disabled. float16 always; bfloat16
    where :func:`is_bf16_supported` says so.
    """
    return [torch.float16, torch.bfloat16] if is_bf16_supported() else [torch.float16]
