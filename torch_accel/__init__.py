r"""torch_accel: PyTorch's PrivateUse1 device as ``accel``, backed by CUDA or a host runtime.

Importing this package registers the ``accel`` device type with PyTorch and
makes this module available as ``torch.accel``. Its API mirrors torch.cuda:
the runtime initialises lazily, on the first call that needs a device.

The runtime is chosen once per process from ``TORCH_ACCEL_RUNTIME``:
``auto`` (the default: CUDA when a CUDA device is visible, else host),
``cuda`` or ``host``. The host runtime has ``TORCH_ACCEL_HOST_DEVICES``
devices (default 2).

This module is the package's face: it re-exports the API from the modules that
define it (the device basics from ``_core``; streams, memory, random numbers,
graphs) and registers accel with PyTorch. The package's own modules import
from those modules, never from here (torch_accel/README.md lists them;
``make lint`` checks it).
"""

import importlib
import os
import sys
from typing import Any

import torch

from . import _C, _core, _utils
from ._core import (
    DeferredAccelCallError,
    DeviceLike,
    _DeviceGuard,
    _exchange_device,
    _get_device_index,
    _is_in_bad_fork,
    _lazy_call,
    _lazy_init,
    _maybe_exchange_device,
    _target_device_type,
    current_device,
    device,
    device_count,
    device_of,
    get_amp_supported_dtype,
    get_device_capability,
    get_device_name,
    get_device_properties,
    init,
    is_available,
    is_bf16_supported,
    is_initialized,
    runtime,
    set_device,
    synchronize,
)
from . import _fault_injection, amp, comm, graphs, memory, random
from .graphs import AccelGraph, Graph, graph, graph_pool_handle, is_current_stream_capturing, make_graphed_callables
from .memory import (
    MemPool,
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
    use_mem_pool,
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


# Inductor's init_backend_registration() looks these up on the PrivateUse1
# device module to register the backend's code generators (see
# _inductor.registration): answering registers accel's backend.
_INDUCTOR_BACKEND_ATTRIBUTES = ("Scheduling", "PythonWrapperCodegen", "CppWrapperCodegen", "WrapperFxCodegen")


_LAZY_SUBMODULES = ("nvtx", "_sanitizer", "_gpu_trace")


def __getattr__(name: str) -> Any:
    # torch.cuda's module global, which device-generic code reads (e.g.
    # torch.utils.checkpoint stashes and restores the device RNG state only
    # when it is true). Computed, so that it is also false in a forked child.
    if name == "_initialized":
        return is_initialized()
    if name == "_AccelDeviceProperties":
        return _core._device_properties_type()
    # default_generators is filled in at initialisation (as torch.cuda's).
    if name == "default_generators":
        return _core.default_generators
    # Loaded on first use, as cheap imports want: the NVTX ranges, the stream
    # sanitizer, and the trace's callbacks that PyTorch looks up as
    # torch.accel._gpu_trace once a GPU trace is active.
    if name in _LAZY_SUBMODULES:
        return importlib.import_module(f".{name}", __name__)
    if name in _INDUCTOR_BACKEND_ATTRIBUTES:
        from ._inductor.registration import inductor_backend

        backend = inductor_backend()
        # None, although accel has a C++ wrapper (registered with the rest of
        # its backend): given all of Scheduling, PythonWrapperCodegen and
        # CppWrapperCodegen, init_backend_registration() would register them
        # again, without the custom pass accel registers them with.
        return None if name == "CppWrapperCodegen" else getattr(backend, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _register() -> None:
    torch.utils.rename_privateuse1_backend("accel")
    torch._register_device_module("accel", sys.modules[__name__])
    torch.utils.generate_methods_for_privateuse1_backend(
        for_tensor=True, for_module=True, for_packed_sequence=True, for_storage=True
    )
    from ._data_parallel import apply_data_parallel_patches
    from ._distributed import register_backend as register_c10d_backend
    from ._dynamo.registration import register_when_dynamo_loads
    from ._inductor.registration import (
        apply_fake_tensor_patches,
        prepare_triton_interpreter,
        register_if_inductor_loaded,
    )
    from ._interop import apply_interop_patches
    from ._profiler_patches import apply_profiler_patches
    from ._safetensors import apply_when_safetensors_loads
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
    # So are torch.nn.parallel and torch.utils.dlpack (docs/interop.md).
    apply_data_parallel_patches()
    apply_interop_patches()
    apply_when_safetensors_loads()  # an optional library: patched if and when it loads
    # The opt-in that runs CUDA programs on accel (docs/cuda-programs.md):
    # `import torch_accel.transfer_to_accel`, or this variable.
    from ._transfer import enable as run_cuda_programs_on_accel, enabled_by_environment

    if enabled_by_environment():
        run_cuda_programs_on_accel()


_register()
del _register

# As torch.cuda with TORCH_CUDA_SANITIZER: the stream sanitizer from the start
# (docs/stream-sanitizer.md). Only the variable is read unless it is set.
if os.environ.get("TORCH_ACCEL_SANITIZER", "") not in ("", "0"):
    from ._sanitizer import _enable_from_environment

    _enable_from_environment()
    del _enable_from_environment
