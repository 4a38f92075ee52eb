r"""Programs written for CUDA, run on accel unmodified: the opt-in of docs/cuda-programs.md.

``import torch_accel.transfer_to_accel`` (or ``TORCH_ACCEL_TRANSFER_TO_ACCEL=1``
in the environment, read when torch_accel is imported, which ``import torch``
does) calls ``enable``. From then on, in this process, "cuda" means accel:

- device arguments: a ``TorchFunctionMode`` (``_CudaToAccel``) rewrites
  ``"cuda"``, ``"cuda:N"`` and ``torch.device("cuda", N)`` into accel's in every
  call that passes through ``__torch_function__`` (factory functions,
  ``Tensor.to``, ``Tensor.new_*``, ``pin_memory``...), turns ``Tensor.cuda`` into
  a move to accel (``nn.Module.cuda`` calls it for every parameter) and answers
  ``Tensor.is_cuda`` for accel tensors;
- ``torch.cuda``'s functions and classes are replaced by accel's (``_REDIRECTED``);
  those accel has no counterpart for raise an error that names them
  (``_REFUSED``) rather than reach a CUDA device;
- ``torch.autocast("cuda")``, ``torch.amp.GradScaler("cuda")``,
  ``torch.amp.custom_fwd/custom_bwd(device_type="cuda")``,
  ``torch.load(map_location="cuda")`` (and checkpoints saved on cuda),
  ``init_process_group("nccl")`` / ``new_group(backend="nccl")``,
  ``torch.set_default_device("cuda")`` / ``with torch.device("cuda")`` take
  accel's device type and c10d backend instead;
- accelerate's ``get_max_memory`` (``from_pretrained(max_memory=...)``) takes
  accel's device names as keys, once accelerate is imported.

Everything above is a patch in the registry (torch_accel/_patches.py), applied
by ``enable`` only: without the opt-in nothing here runs. The mode lives on the
torch-function mode stack of the thread that enabled it (PyTorch's stack is per
thread; autograd's threads inherit it); docs/cuda-programs.md lists what that
and the rest leave out.
"""

import functools
import inspect
import os
import re
import threading
from collections.abc import Callable
from typing import Any, Optional

import torch
from torch.overrides import TorchFunctionMode

from . import _patches
from ._dynamo.registration import call_after_import
from ._core import (
    DEVICE_TYPE,
    current_device,
    device,
    device_count,
    device_of,
    get_device_capability,
    get_device_name,
    get_device_properties,
    init,
    is_available,
    is_bf16_supported,
    is_initialized,
    set_device,
    synchronize,
)
from .graphs import Graph, graph, graph_pool_handle, is_current_stream_capturing, make_graphed_callables
from .memory import (
    empty_cache,
    get_per_process_memory_fraction,
    max_memory_allocated,
    max_memory_reserved,
    mem_get_info,
    memory_allocated,
    memory_reserved,
    memory_snapshot,
    memory_stats,
    memory_stats_as_nested_dict,
    memory_summary,
    reset_accumulated_memory_stats,
    reset_peak_memory_stats,
    set_per_process_memory_fraction,
)
from .multiprocessing import ipc_collect
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
from .streams import Event, Stream, StreamContext, current_stream, default_stream, set_stream, stream

ENVIRONMENT_VARIABLE = "TORCH_ACCEL_TRANSFER_TO_ACCEL"

_CUDA = "cuda"
_CUDA_DEVICE_STRING = re.compile(r"cuda(:\d+)?")
# torch.distributed's backend names for CUDA, in a backend string ("nccl",
# "cpu:gloo,cuda:nccl"); accel's backend runs NCCL under it on the CUDA runtime.
_CUDA_BACKEND_ENTRY = re.compile(r"(?:(?<=^)|(?<=,))(?:cuda:)?nccl(?=,|$)", re.IGNORECASE)

_enabled = False
_enable_lock = threading.Lock()


def enabled() -> bool:
    r"""Whether this process runs CUDA programs on accel (``enable`` was called)."""
    return _enabled


def enabled_by_environment() -> bool:
    r"""Whether ``TORCH_ACCEL_TRANSFER_TO_ACCEL`` asks for the opt-in: ``1``, ``0`` or unset."""
    value = os.environ.get(ENVIRONMENT_VARIABLE, "0")
    if value not in ("0", "1"):
        raise ValueError(f"{ENVIRONMENT_VARIABLE}={value!r}: expected 1 (run CUDA programs on accel) or 0")
    return value == "1"


# --- device arguments ---------------------------------------------------------------


def to_accel(device: Any) -> Any:
    r"""``device`` with cuda replaced by accel (a ``torch.device`` or a string);
    anything else unchanged."""
    if isinstance(device, torch.device):
        return torch.device(DEVICE_TYPE, device.index) if device.type == _CUDA else device
    if isinstance(device, str):
        match = _CUDA_DEVICE_STRING.fullmatch(device)
        if match is not None:
            return DEVICE_TYPE + (match.group(1) or "")
    return device


def _is_cuda_device(value: Any) -> bool:
    if isinstance(value, torch.device):
        return value.type == _CUDA
    return isinstance(value, str) and _CUDA_DEVICE_STRING.fullmatch(value) is not None


def _accel_device_of_cuda_argument(device: Any) -> torch.device:
    r"""The accel device ``Tensor.cuda(device)`` means: the current one for None, else its index."""
    if device is None:
        return torch.device(DEVICE_TYPE, current_device())
    if isinstance(device, int):
        return torch.device(DEVICE_TYPE, device)
    redirected = torch.device(to_accel(device))
    if redirected.type != DEVICE_TYPE:
        raise ValueError(f"Tensor.cuda(): expected a cuda device, got {device!r}")
    return redirected


def _tensor_cuda(
    tensor: torch.Tensor,
    device: Any = None,
    non_blocking: bool = False,
    memory_format: torch.memory_format = torch.preserve_format,
) -> torch.Tensor:
    return tensor.to(_accel_device_of_cuda_argument(device), non_blocking=non_blocking, memory_format=memory_format)


def _refuse_cuda_generator(value: Any) -> None:
    if isinstance(value, torch.Generator) and value.device.type == _CUDA:
        raise RuntimeError(
            "a torch.Generator on cuda is not redirected to accel by torch_accel's CUDA-program opt-in: "
            f"create it with device={DEVICE_TYPE!r} (torch.Generator is a type the opt-in cannot replace)"
        )


_TENSOR_CUDA = torch.Tensor.cuda
_TENSOR_IS_CUDA = torch.Tensor.is_cuda.__get__


class _CudaToAccel(TorchFunctionMode):
    r"""Rewrites cuda device arguments into accel's on every call that reaches ``__torch_function__``."""

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: Optional[dict] = None) -> Any:
        kwargs = kwargs or {}
        if func is torch.device:
            # torch.device("cuda") stays cuda's: libraries accept devices by
            # type name ("fp16 requires a device in ('cuda', ...)"); the
            # tensors made on it land on accel.
            return func(*args, **kwargs)
        if func is _TENSOR_CUDA:
            return _tensor_cuda(*args, **kwargs)
        # The getter is a new method-wrapper at each access: compared by equality.
        if func == _TENSOR_IS_CUDA:
            return args[0].device.type in (_CUDA, DEVICE_TYPE)
        if any(_is_cuda_device(a) for a in args):
            args = tuple(to_accel(a) for a in args)
        if "device" in kwargs:
            kwargs["device"] = to_accel(kwargs["device"])
        generator = kwargs.get("generator")
        if generator is not None:
            _refuse_cuda_generator(generator)
        return func(*args, **kwargs)


_mode: Optional[_CudaToAccel] = None


@_patches.patch("torch.utils._device.DeviceContext.__init__")
def default_device_on_accel(context_init: Callable[..., None]) -> None:
    # torch.set_default_device("cuda") and `with torch.device("cuda"):` push a
    # DeviceContext, which PyTorch keeps at the bottom of the mode stack, below
    # _CudaToAccel: the device it fills in must already be accel's.
    from torch.utils._device import DeviceContext

    @functools.wraps(context_init)
    def init(self: Any, device: Any) -> None:
        context_init(self, device)
        self.device = to_accel(self.device)

    DeviceContext.__init__ = init


# --- torch.cuda ---------------------------------------------------------------------

# torch.cuda's name -> accel's implementation. Where torch.cuda keeps a
# deprecated alias, the alias maps to what it stands for.
_REDIRECTED: dict[str, Any] = {
    "is_available": is_available,
    "device_count": device_count,
    "current_device": current_device,
    "set_device": set_device,
    "device": device,
    "device_of": device_of,
    "synchronize": synchronize,
    "init": init,
    "is_initialized": is_initialized,
    "get_device_name": get_device_name,
    "get_device_capability": get_device_capability,
    "get_device_properties": get_device_properties,
    "is_bf16_supported": is_bf16_supported,
    "Stream": Stream,
    "Event": Event,
    "StreamContext": StreamContext,
    "stream": stream,
    "current_stream": current_stream,
    "default_stream": default_stream,
    "set_stream": set_stream,
    "empty_cache": empty_cache,
    "mem_get_info": mem_get_info,
    "memory_allocated": memory_allocated,
    "max_memory_allocated": max_memory_allocated,
    "memory_reserved": memory_reserved,
    "max_memory_reserved": max_memory_reserved,
    "memory_cached": memory_reserved,
    "max_memory_cached": max_memory_reserved,
    "memory_stats": memory_stats,
    "memory_stats_as_nested_dict": memory_stats_as_nested_dict,
    "memory_summary": memory_summary,
    "memory_snapshot": memory_snapshot,
    "reset_peak_memory_stats": reset_peak_memory_stats,
    "reset_max_memory_allocated": reset_peak_memory_stats,
    "reset_max_memory_cached": reset_peak_memory_stats,
    "reset_accumulated_memory_stats": reset_accumulated_memory_stats,
    "set_per_process_memory_fraction": set_per_process_memory_fraction,
    "get_per_process_memory_fraction": get_per_process_memory_fraction,
    "ipc_collect": ipc_collect,
    "manual_seed": manual_seed,
    "manual_seed_all": manual_seed_all,
    "seed": seed,
    "seed_all": seed_all,
    "initial_seed": initial_seed,
    "get_rng_state": get_rng_state,
    "get_rng_state_all": get_rng_state_all,
    "set_rng_state": set_rng_state,
    "set_rng_state_all": set_rng_state_all,
    "CUDAGraph": Graph,
    "graph": graph,
    "graph_pool_handle": graph_pool_handle,
    "is_current_stream_capturing": is_current_stream_capturing,
    "make_graphed_callables": make_graphed_callables,
}

# torch.cuda's names accel has no counterpart for, with what to use instead
# (or why there is none). Calling one raises; it never reaches a CUDA device.
_REFUSED: dict[str, str] = {
    "ExternalStream": "accel streams are created by accel (torch.accel.Stream)",
    "get_stream_from_external": "accel streams are created by accel (torch.accel.Stream)",
    "GreenContext": "accel has no green contexts",
    "can_device_access_peer": "copies between accel devices need no peer access check",
    "caching_allocator_alloc": "allocate accel memory with torch.empty(..., device='accel')",
    "caching_allocator_delete": "allocate accel memory with torch.empty(..., device='accel')",
    "caching_allocator_enable": "accel's caching allocator is always on",
    "CUDAPluggableAllocator": "accel has no pluggable allocator here",
    "change_current_allocator": "accel has no pluggable allocator here",
    "MemPool": "accel has no memory pools here",
    "use_mem_pool": "accel has no memory pools here",
    "cudart": "accel exposes no CUDA runtime bindings",
    "current_blas_handle": "accel exposes no cuBLAS handle",
    "list_gpu_processes": "NVML queries are not redirected",
    "utilization": "NVML queries are not redirected",
    "memory_usage": "NVML queries are not redirected",
    "temperature": "NVML queries are not redirected",
    "power_draw": "NVML queries are not redirected",
    "clock_rate": "NVML queries are not redirected",
    "device_memory_used": "NVML queries are not redirected; use torch.cuda.mem_get_info",
    "host_memory_stats": "accel has no host memory statistics",
    "host_memory_stats_as_nested_dict": "accel has no host memory statistics",
    "reset_accumulated_host_memory_stats": "accel has no host memory statistics",
    "reset_peak_host_memory_stats": "accel has no host memory statistics",
    "get_sync_debug_mode": "accel has no synchronisation debug mode",
    "set_sync_debug_mode": "accel has no synchronisation debug mode",
}


class _CudaDevice(device):
    r"""``torch.cuda.device`` on accel: takes cuda devices (``torch.device("cuda")`` stays cuda's)."""

    def __init__(self, device: Any) -> None:
        super().__init__(to_accel(device))


class _AnyAccelStream(type(Stream)):  # type: ignore[misc]
    def __instancecheck__(cls, instance: Any) -> bool:
        # isinstance(torch.cuda.current_stream(), torch.cuda.Stream) holds.
        return isinstance(instance, Stream)


class _CudaStream(Stream, metaclass=_AnyAccelStream):
    r"""``torch.cuda.Stream`` on accel: takes cuda devices."""

    def __new__(cls, device: Any = None, priority: int = 0, **kwargs: Any) -> "_CudaStream":
        return super().__new__(cls, to_accel(device), priority, **kwargs)


def _taking_cuda_devices(function: Callable[..., Any]) -> Callable[..., Any]:
    r"""``function`` with cuda devices among its arguments replaced by accel's."""

    @functools.wraps(function)
    def redirected(*args: Any, **kwargs: Any) -> Any:
        return function(*(to_accel(a) for a in args), **{k: to_accel(v) for k, v in kwargs.items()})

    return redirected


def _redirection(name: str) -> Any:
    if name == "device":
        return _CudaDevice
    if name == "Stream":
        return _CudaStream
    replacement = _REDIRECTED[name]
    return replacement if inspect.isclass(replacement) else _taking_cuda_devices(replacement)


def refusal_message(name: str) -> str:
    return (
        f"torch.cuda.{name} is not redirected to accel by torch_accel's CUDA-program opt-in "
        f"({ENVIRONMENT_VARIABLE}, torch_accel.transfer_to_accel): {_REFUSED[name]} (docs/cuda-programs.md)"
    )


def _refusing(name: str, original: Any) -> Any:
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(refusal_message(name))

    if inspect.isclass(original):
        # Still a class, so that isinstance(x, torch.cuda.<name>) keeps working (False).
        return type(name, (), {"__new__": lambda cls, *args, **kwargs: refuse(), "__doc__": refusal_message(name)})
    refuse.__name__ = refuse.__qualname__ = name
    refuse.__doc__ = refusal_message(name)
    return refuse


@_patches.patch(
    "torch.cuda.is_available",
    "torch.cuda.device_count",
    "torch.cuda.current_device",
    "torch.cuda.set_device",
    "torch.cuda.device",
    "torch.cuda.device_of",
    "torch.cuda.synchronize",
    "torch.cuda.init",
    "torch.cuda.is_initialized",
    "torch.cuda.get_device_name",
    "torch.cuda.get_device_capability",
    "torch.cuda.get_device_properties",
    "torch.cuda.is_bf16_supported",
    "torch.cuda.Stream",
    "torch.cuda.Event",
    "torch.cuda.StreamContext",
    "torch.cuda.stream",
    "torch.cuda.current_stream",
    "torch.cuda.default_stream",
    "torch.cuda.set_stream",
    "torch.cuda.empty_cache",
    "torch.cuda.mem_get_info",
    "torch.cuda.memory_allocated",
    "torch.cuda.max_memory_allocated",
    "torch.cuda.memory_reserved",
    "torch.cuda.max_memory_reserved",
    "torch.cuda.memory_cached",
    "torch.cuda.max_memory_cached",
    "torch.cuda.memory_stats",
    "torch.cuda.memory_stats_as_nested_dict",
    "torch.cuda.memory_summary",
    "torch.cuda.memory_snapshot",
    "torch.cuda.reset_peak_memory_stats",
    "torch.cuda.reset_max_memory_allocated",
    "torch.cuda.reset_max_memory_cached",
    "torch.cuda.reset_accumulated_memory_stats",
    "torch.cuda.set_per_process_memory_fraction",
    "torch.cuda.get_per_process_memory_fraction",
    "torch.cuda.ipc_collect",
    "torch.cuda.manual_seed",
    "torch.cuda.manual_seed_all",
    "torch.cuda.seed",
    "torch.cuda.seed_all",
    "torch.cuda.initial_seed",
    "torch.cuda.get_rng_state",
    "torch.cuda.get_rng_state_all",
    "torch.cuda.set_rng_state",
    "torch.cuda.set_rng_state_all",
    "torch.cuda.CUDAGraph",
    "torch.cuda.graph",
    "torch.cuda.graph_pool_handle",
    "torch.cuda.is_current_stream_capturing",
    "torch.cuda.make_graphed_callables",
)
def cuda_module_redirected(*originals: Any) -> None:
    # The names are the keys of _REDIRECTED, in order (test_transfer_to_accel checks it).
    for name in _REDIRECTED:
        setattr(torch.cuda, name, _redirection(name))


@_patches.patch(
    "torch.cuda.ExternalStream",
    "torch.cuda.get_stream_from_external",
    "torch.cuda.GreenContext",
    "torch.cuda.can_device_access_peer",
    "torch.cuda.caching_allocator_alloc",
    "torch.cuda.caching_allocator_delete",
    "torch.cuda.caching_allocator_enable",
    "torch.cuda.CUDAPluggableAllocator",
    "torch.cuda.change_current_allocator",
    "torch.cuda.MemPool",
    "torch.cuda.use_mem_pool",
    "torch.cuda.cudart",
    "torch.cuda.current_blas_handle",
    "torch.cuda.list_gpu_processes",
    "torch.cuda.utilization",
    "torch.cuda.memory_usage",
    "torch.cuda.temperature",
    "torch.cuda.power_draw",
    "torch.cuda.clock_rate",
    "torch.cuda.device_memory_used",
    "torch.cuda.host_memory_stats",
    "torch.cuda.host_memory_stats_as_nested_dict",
    "torch.cuda.reset_accumulated_host_memory_stats",
    "torch.cuda.reset_peak_host_memory_stats",
    "torch.cuda.get_sync_debug_mode",
    "torch.cuda.set_sync_debug_mode",
)
def cuda_module_refused(*originals: Any) -> None:
    for name, original in zip(_REFUSED, originals):
        setattr(torch.cuda, name, _refusing(name, original))


# --- amp ----------------------------------------------------------------------------


@_patches.patch("torch.amp.autocast_mode.autocast.__init__")
def autocast_on_accel(autocast_init: Callable[..., None]) -> None:
    # torch.cuda.amp.autocast passes "cuda" here too.
    @functools.wraps(autocast_init)
    def init(self: Any, device_type: str, *args: Any, **kwargs: Any) -> None:
        autocast_init(self, DEVICE_TYPE if device_type == _CUDA else device_type, *args, **kwargs)

    torch.amp.autocast_mode.autocast.__init__ = init


@_patches.patch("torch.amp.grad_scaler.GradScaler.__init__")
def grad_scaler_on_accel(scaler_init: Callable[..., None]) -> None:
    # GradScaler's device defaults to "cuda"; torch.cuda.amp.GradScaler passes it.
    signature = inspect.signature(scaler_init)

    @functools.wraps(scaler_init)
    def init(*args: Any, **kwargs: Any) -> None:
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        if bound.arguments["device"] == _CUDA:
            bound.arguments["device"] = DEVICE_TYPE
        scaler_init(*bound.args, **bound.kwargs)

    torch.amp.grad_scaler.GradScaler.__init__ = init


def _custom_autograd_decorator(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def decorator(*args: Any, device_type: str, **kwargs: Any) -> Any:
        return original(*args, device_type=DEVICE_TYPE if device_type == _CUDA else device_type, **kwargs)

    return decorator


@_patches.patch("torch.amp.autocast_mode.custom_fwd", "torch.amp.autocast_mode.custom_bwd")
def custom_autograd_on_accel(custom_fwd: Callable[..., Any], custom_bwd: Callable[..., Any]) -> None:
    # torch.cuda.amp.custom_fwd/custom_bwd call these with device_type="cuda".
    for original in (custom_fwd, custom_bwd):
        replacement = _custom_autograd_decorator(original)
        setattr(torch.amp.autocast_mode, original.__name__, replacement)
        _patches.rebind(original, replacement, "torch")


# --- serialization ------------------------------------------------------------------


def _restore_cuda_on_accel(map_location: Any) -> Any:
    r"""``map_location`` for torch.load with cuda replaced by accel: in strings and
    devices, in a dict's values, and for storages saved on cuda (map_location None)."""
    from torch.serialization import default_restore_location

    if map_location is None:

        def restore(storage: Any, location: str) -> Any:
            if _CUDA_DEVICE_STRING.fullmatch(location):
                return default_restore_location(storage, to_accel(location))
            return None

        return restore
    if isinstance(map_location, dict):
        return {key: to_accel(value) for key, value in map_location.items()}
    return to_accel(map_location)


@_patches.patch("torch.serialization.load")
def load_onto_accel(load: Callable[..., Any]) -> None:
    signature = inspect.signature(load)

    @functools.wraps(load)
    def load_redirected(*args: Any, **kwargs: Any) -> Any:
        bound = signature.bind(*args, **kwargs)
        bound.arguments["map_location"] = _restore_cuda_on_accel(bound.arguments.get("map_location"))
        return load(*bound.args, **bound.kwargs)

    torch.serialization.load = load_redirected
    _patches.rebind(load, load_redirected, "torch")


# --- torch.distributed --------------------------------------------------------------


def to_accel_backend(backend: Any) -> Any:
    r"""A c10d backend string with CUDA's (``nccl``, ``cuda:nccl``) replaced by accel's."""
    if not isinstance(backend, str):
        return backend
    from ._distributed import BACKEND_NAME

    return _CUDA_BACKEND_ENTRY.sub(lambda m: f"{DEVICE_TYPE}:{BACKEND_NAME}" if ":" in m.group(0) else BACKEND_NAME, backend)


def _group_maker_on_accel(make: Callable[..., Any]) -> Callable[..., Any]:
    signature = inspect.signature(make)

    @functools.wraps(make)
    def make_on_accel(*args: Any, **kwargs: Any) -> Any:
        bound = signature.bind(*args, **kwargs)
        arguments = bound.arguments
        if "backend" in arguments:
            arguments["backend"] = to_accel_backend(arguments["backend"])
        if arguments.get("device_id") is not None:
            arguments["device_id"] = to_accel(arguments["device_id"])
        return make(*bound.args, **bound.kwargs)

    return make_on_accel


@_patches.patch(
    "torch.distributed.distributed_c10d.init_process_group",
    "torch.distributed.distributed_c10d.new_group",
)
def process_groups_on_accel(init_process_group: Callable[..., Any], new_group: Callable[..., Any]) -> None:
    from torch.distributed import distributed_c10d

    for original in (init_process_group, new_group):
        replacement = _group_maker_on_accel(original)
        setattr(distributed_c10d, original.__name__, replacement)
        _patches.rebind(original, replacement, "torch")


# --- accelerate ----------------------------------------------------------------------


def _max_memory_key(key: Any) -> Any:
    r"""accelerate's key for ``key``: the index of an accel (or cuda) device, which
    is what accelerate's integer keys mean under the opt-in; other keys unchanged."""
    if isinstance(key, (str, torch.device)) and not isinstance(key, int):
        try:
            parsed = torch.device(to_accel(key))
        except RuntimeError:
            return key
        if parsed.type == DEVICE_TYPE and parsed.index is not None:
            return parsed.index
    return key


@_patches.patch("accelerate.utils.modeling.get_max_memory")
def max_memory_with_accel_keys(get_max_memory: Callable[..., Any]) -> None:
    # from_pretrained(device_map=..., max_memory={"accel:0": ..., "accel:1": ...}):
    # accelerate knows devices by integer index ("Device accel:0 is not
    # recognized"); under the opt-in its indices are accel's.
    from accelerate.utils import modeling

    @functools.wraps(get_max_memory)
    def get_max_memory_with_accel_keys(max_memory: Optional[dict] = None) -> Any:
        if max_memory is not None:
            # In place, as accelerate converts the sizes: transformers' own
            # get_max_memory reads the caller's dict again afterwards.
            for key in [key for key in max_memory if _max_memory_key(key) is not key]:
                max_memory[_max_memory_key(key)] = max_memory.pop(key)
        return get_max_memory(max_memory)

    modeling.get_max_memory = get_max_memory_with_accel_keys
    _patches.rebind(get_max_memory, get_max_memory_with_accel_keys, "accelerate")
    _patches.rebind(get_max_memory, get_max_memory_with_accel_keys, "transformers")


def _patch_accelerate() -> None:
    _patches.apply(max_memory_with_accel_keys)


# --- the opt-in ---------------------------------------------------------------------


def enable() -> None:
    r"""Run this process's CUDA code on accel (see the module's docstring); idempotent.

    Applies the patches above and pushes the device-argument mode onto this
    thread's torch-function mode stack.
    """
    global _enabled, _mode
    with _enable_lock:
        if _enabled:
            return
        _patches.apply(
            cuda_module_redirected,
            cuda_module_refused,
            autocast_on_accel,
            grad_scaler_on_accel,
            custom_autograd_on_accel,
            default_device_on_accel,
            load_onto_accel,
        )
        if torch.distributed.is_available():
            _patches.apply(process_groups_on_accel)
        # accelerate's, when (if ever) it is imported: importing it here would
        # cost every opted-in program seconds.
        call_after_import("accelerate.utils.modeling", _patch_accelerate)
        _mode = _CudaToAccel()
        _mode.__enter__()
        _enabled = True
