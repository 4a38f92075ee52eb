r"""torch_accel: PyTorch's PrivateUse1 device as ``accel``, backed by CUDA or a host runtime.

Importing this package registers the ``accel`` device type with PyTorch and
makes this module available as ``torch.accel``. Its API mirrors torch.cuda:
the runtime initialises lazily, on the first call that needs a device.

The runtime is chosen once per process from ``TORCH_ACCEL_RUNTIME``:
``auto`` (the default: CUDA when a CUDA device is visible, else host),
``cuda`` or ``host``. The host runtime has ``TORCH_ACCEL_HOST_DEVICES``
devices (default 2).
"""

import dataclasses
import functools
import sys
from typing import Any

import torch

from . import _C
from ._lazy import DeferredAccelCallError, _is_in_bad_fork, _lazy_call, _lazy_init, init, is_initialized
from ._utils import DeviceLike, _get_device_index
from . import amp, graphs, memory, random
from .graphs import AccelGraph, Graph, graph, graph_pool_handle, is_current_stream_capturing
from .graphs import make_graphed_callables
from .memory import (
    attach_out_of_memory_observer,
    empty_cache,
    get_per_process_memory_fraction,
    max_memory_allocated,
    max_memory_reserved,
    mem_get_info,
    memory_allocated,
    memory_reserved,
    memory_stats,
    memory_snapshot,
    memory_stats_as_nested_dict,
    memory_summary,
    reset_accumulated_memory_stats,
    reset_peak_memory_stats,
    set_per_process_memory_fraction,
)
from .random import (
    get_rng_state,
    get_rng_state_all,
    initial_seed,
    manual_seed,
    manual_seed_all,
    seed,
    seed_all,
    set_rng_state,
    set_rng_state_all,
)
from .streams import (
    Event,
    Stream,
    StreamContext,
    _set_stream_by_id,
    current_stream,
    default_stream,
    set_stream,
    stream,
)

__all__ = [
    *graphs.__all__,
    *memory.__all__,
    *random.__all__,
    "Event",
    "Stream",
    "StreamContext",
    "current_device",
    "current_stream",
    "default_generators",
    "default_stream",
    "device",
    "device_count",
    "device_of",
    "get_amp_supported_dtype",
    "get_device_capability",
    "get_device_name",
    "get_device_properties",
    "init",
    "ipc_collect",
    "is_available",
    "is_bf16_supported",
    "is_initialized",
    "runtime",
    "set_device",
    "set_stream",
    "stream",
    "synchronize",
]


def is_available() -> bool:
    r"""Return whether an accel device is available. Never raises, never initialises."""
    return device_count() > 0


def device_count() -> int:
    r"""Return the number of accel devices. Never raises, never creates a device context."""
    return _C._device_count()


def runtime() -> str:
    r"""Return the name of the runtime backing accel in this process: ``"cuda"`` or ``"host"``."""
    return _C._runtime_name()


def _target_device_type() -> str:
    r"""The device type whose kernels run accel's work: ``"cuda"`` or ``"cpu"``."""
    return _C._target_device_type()


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
        super().__init__(obj.get_device() if obj.device.type == "accel" else -1)


def ipc_collect() -> None:
    r"""Force collects accel memory after it has been released by the processes it was shared with.

    As torch.cuda.ipc_collect: a process that sent accel tensors to others
    (torch.multiprocessing) keeps their memory, even once it freed them
    itself, until every receiver released it. This frees the memory of those
    sent tensors that all receivers have released since, and the reference
    counting files no longer in use. Useful when the producer process stopped
    actively sending tensors and wants to release unused memory.

    On the CUDA runtime it collects what torch keeps for CUDA IPC, as
    torch.cuda.ipc_collect does. On the host runtime shared memory is freed
    as soon as the last process that holds it releases it, so there is
    nothing left to collect: it only initialises accel.
    """
    _lazy_init()
    _C._ipc_collect()


def synchronize(device: DeviceLike = None) -> None:
    r"""Wait for all work on all streams of an accel device (the current one if None) to complete."""
    _lazy_init()
    _C._synchronize(_get_device_index(device, optional=True))


@functools.cache
def _device_properties_type() -> type:
    # Made at the first use, not at import: a dataclass generates and compiles
    # its methods when it is made, which would add about 1.5 ms to
    # `import torch_accel`. The module __getattr__ also answers its name.
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

    _AccelDeviceProperties.__module__ = __name__
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


# Inductor's init_backend_registration() looks these up on the PrivateUse1
# device module to register the backend's code generators (see
# _inductor_registration): answering registers accel's backend.
_INDUCTOR_BACKEND_ATTRIBUTES = ("Scheduling", "PythonWrapperCodegen", "CppWrapperCodegen", "WrapperFxCodegen")


def __getattr__(name: str) -> Any:
    # torch.cuda's module global, which device-generic code reads (e.g.
    # torch.utils.checkpoint stashes and restores the device RNG state only
    # when it is true). Computed, so that it is also false in a forked child.
    if name == "_initialized":
        return is_initialized()
    if name == "_AccelDeviceProperties":
        return _device_properties_type()
    # default_generators is filled in at initialisation (as torch.cuda's).
    if name == "default_generators":
        from . import _lazy

        return _lazy.default_generators
    if name in _INDUCTOR_BACKEND_ATTRIBUTES:
        from ._inductor_registration import inductor_backend

        return getattr(inductor_backend(), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _register() -> None:
    torch.utils.rename_privateuse1_backend("accel")
    torch._register_device_module("accel", sys.modules[__name__])
    torch.utils.generate_methods_for_privateuse1_backend(
        for_tensor=True, for_module=True, for_packed_sequence=True, for_storage=True
    )
    from ._distributed import register_backend as register_c10d_backend
    from ._dynamo_registration import register_when_dynamo_loads
    from ._inductor_patches import apply_fake_tensor_patches
    from ._inductor_registration import prepare_triton_interpreter, register_if_inductor_loaded
    from ._profiler_patches import apply_profiler_patches
    from .multiprocessing import init_reductions as register_multiprocessing_reductions

    # FakeTensor is loaded with torch: adapting it costs nothing here, and
    # every tracer (Dynamo, AOTAutograd, Inductor, export) then sees it.
    apply_fake_tensor_patches()
    # So is the profiler (see _profiler_patches: use_device="accel" without a device).
    apply_profiler_patches()
    prepare_triton_interpreter()  # before Dynamo imports Triton
    register_when_dynamo_loads()
    register_if_inductor_loaded()
    register_c10d_backend()
    # torch.multiprocessing is loaded with torch, its reductions registered.
    register_multiprocessing_reductions()


_register()
del _register
