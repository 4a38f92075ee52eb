"""The device Triton compiles accel's kernels for: accel:N described as cuda:N.

Adapts torch._inductor.runtime.hints.DeviceProperties.create, which snapshots
a device for Triton kernels: its ``type`` becomes triton_meta["device"].type
and compile_meta["device_type"], from which CachingAutotuner builds Triton's
GPUTarget, picks the device interface it launches and benchmarks with, and
decides whether the static CUDA launcher applies. No Triton backend accepts
"accel". accel:N is cuda:N (same memory, same current stream), so Triton
kernels for accel:N are described as kernels for cuda:N: compiled for the
CUDA target, launched through the CUDA launchers on the stream the wrapper
passes (the accel current stream), with every cuda fast path. Compile worker
subprocesses then need nothing of accel.

With Triton's interpreter (TORCH_ACCEL_INDUCTOR=triton on the host runtime)
there is no cuda:N to ask: accel:N is described as the CUDA device below, so
that Inductor's heuristics (reduction splits, block sizes, persistent
reductions, mix-order fusion) decide as on the CUDA runtime on that GPU and
the generated code is that runtime's. The interpreter itself uses none of it.

Declared in torch_accel/_patches.py with the hash of the source it adapts;
applied by registration where accel's kernels are Triton's.
"""

from typing import Any

import torch

from .._core import DEVICE_TYPE
from .._patches import patch
from .codegen_config import registered


# An H100 (SXM), the GPU the project's CUDA runs use: compute capability 9.0.
INTERPRETED_CUDA_DEVICE = {
    "multi_processor_count": 132,
    "cc": 90,
    "major": 9,
    "regs_per_multiprocessor": 65536,
    "max_threads_per_multi_processor": 2048,
    "max_threads_per_block": 1024,
    "warp_size": 32,
}


@patch("torch._inductor.runtime.hints.DeviceProperties.create")
def accel_as_cuda(original: Any) -> None:
    # ``original`` is the 2.11 classmethod's function (cached with functools.cache).
    from torch._inductor.runtime.hints import DeviceProperties

    def create(cls: type, device: torch.device) -> Any:
        if device.type == DEVICE_TYPE:
            if registered().interpreted:
                return cls(type="cuda", index=device.index, **INTERPRETED_CUDA_DEVICE)
            device = torch.device("cuda", device.index)
        return original(cls, device)

    create.__doc__ = original.__doc__
    DeviceProperties.create = classmethod(create)  # type: ignore[method-assign, assignment]
