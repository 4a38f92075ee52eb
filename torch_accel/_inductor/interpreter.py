"""Inductor's Triton kernels run by Triton's interpreter on accel's host memory.

With TORCH_ACCEL_INDUCTOR=triton on the host runtime, Inductor generates the
CUDA runtime's Triton code for accel (codegen_config) and Triton's
interpreter (TRITON_INTERPRET=1) runs it. How the interpreter reaches accel
memory: for each tensor argument, Triton's GridExecutor copies the tensor's
whole storage to a cpu storage (``untyped_storage().cpu()``), runs the
program instances on numpy views of that copy (through ``data_ptr()``), and
copies every storage back (``untyped_storage().copy_``). Those are accel's
ordinary device-to-host and host-to-device copies, so accel needs nothing
there: its memory is host memory, and the copies are memcpys.

What Inductor's kernels need that Triton 3.6 and Inductor 2.11 lack without a
GPU is adapted here; each patch names the code it adapts (declared in
torch_accel/_patches.py with the hash of its source, like every patch) and the
upstream report. Applied by registration, in the interpreter mode only:

- no active GPU driver: generated modules select one at import
  (triton_helpers.set_driver_to_gpu) and Inductor hashes the driver's backend
  (torch.utils._triton.triton_backend), both of which fail with none;
- the scheduler's has_triton() asks for a device Triton compiles for;
- libdevice: Inductor's kernels call triton.language.extra.libdevice
  (libdevice.exp, tanh, erf, pow, ...), stubs that the compiler maps to
  the backend's library and the interpreter does not, so they return None
  (triton-lang/triton#8825; intel/intel-xpu-backend-for-triton#3698). In the
  interpreter mode each is computed by torch's CPU kernel for the function;
- NumPy 2.4: the interpreter converts a one-element array to a loop bound in a
  way NumPy 2.4 rejects (triton-lang/triton#9171).
"""

import functools
from typing import Any

import torch

from .._patches import patch
from .device_properties import INTERPRETED_CUDA_DEVICE

# Adapts torch.utils._triton.triton_backend, Triton's compiler backend for the
# target of Triton's active driver, whose hash Inductor writes into every
# kernel's metadata and cache keys (triton_hash_with_backend). Without a GPU
# Triton has no active driver ("0 active drivers"); the interpreter mode's
# target is the CUDA device accel:N is described as (INTERPRETED_CUDA_DEVICE:
# compute capability 9.0, warps of 32), so its backend is Triton's for that
# target.


@patch("torch.utils._triton.triton_backend")
def backend_without_driver(original: Any) -> None:
    from torch.utils import _triton

    @functools.cache
    def triton_backend() -> Any:
        from triton.backends.compiler import GPUTarget
        from triton.compiler.compiler import make_backend

        return make_backend(GPUTarget("cuda", INTERPRETED_CUDA_DEVICE["cc"], INTERPRETED_CUDA_DEVICE["warp_size"]))

    triton_backend.__doc__ = original.__doc__
    _triton.triton_backend = triton_backend


# Adapts torch._inductor.runtime.triton_helpers.set_driver_to_gpu, which every
# generated Triton kernel module calls at import to make a GPU driver Triton's
# active one, and raises where there is none ("Could not find an active GPU
# backend"). Inductor's support for TRITON_INTERPRET (pytorch/pytorch#140841)
# still expects a GPU there; the interpreter needs no driver, so in the
# interpreter mode a machine without a GPU driver keeps none.


@patch("torch._inductor.runtime.triton_helpers.set_driver_to_gpu")
def no_gpu_driver(original: Any) -> None:
    from torch._inductor.runtime import triton_helpers

    def set_driver_to_gpu() -> None:
        try:
            original()
        except RuntimeError:
            pass  # no GPU driver: Triton's interpreter runs the kernels

    set_driver_to_gpu.__doc__ = original.__doc__
    triton_helpers.set_driver_to_gpu = set_driver_to_gpu


# Adapts torch.utils._triton.has_triton as the scheduler sees it: whether a
# device Triton compiles for exists (cuda with sm_70 or later, xpu, Triton's
# cpu backend, mtia). The scheduler refuses to generate Triton code for a GPU
# type without one (TritonMissing). With TORCH_ACCEL_INDUCTOR=triton on the
# host runtime Triton's interpreter runs accel's kernels, which needs only the
# triton package. Rebound in torch._inductor.scheduler alone: elsewhere
# has_triton gates features for cuda devices (shape padding, user-defined
# Triton kernels in Dynamo), which the interpreter mode does not emulate.


@patch("torch.utils._triton.has_triton")
def has_triton_without_gpu(original: Any) -> None:
    # ``original`` is also the scheduler's has_triton (imported by name).
    from torch._inductor import scheduler
    from torch.utils import _triton

    def has_triton() -> bool:
        return _triton.has_triton_package() or original()

    has_triton.__doc__ = original.__doc__
    scheduler.has_triton = has_triton  # type: ignore[attr-defined]


# Adapts triton.language.extra.libdevice, the functions Inductor's kernels call
# for math that triton.language lacks or computes differently (see the module
# docstring). Each stub is replaced by the function computed with torch's CPU
# kernel on the interpreter's numpy data: an elementwise function of its
# arguments (broadcast as numpy broadcasts), its result in the first float
# argument's type except where the function's result is boolean or integer.
# Names: Inductor 2.11's TritonOverrides and triton_helpers.

_LIBDEVICE = {
    **{
        name: getattr(torch, name)
        for name in (
            "acos", "acosh", "asin", "asinh", "atan", "atan2", "atanh", "ceil", "copysign", "cos", "cosh",
            "erf", "erfc", "erfinv", "exp", "exp2", "expm1", "floor", "fmod", "hypot", "isinf", "isnan",
            "ldexp", "lgamma", "log10", "log1p", "log2", "nextafter", "pow", "rsqrt", "signbit", "sin",
            "sinh", "tan", "tanh", "trunc",
        )
    },
    "fast_tanhf": torch.tanh,
    "nearbyint": torch.round,  # to nearest, ties to even, as rint
    "llrint": lambda x: torch.round(x).to(torch.int64),
    "ilogb": lambda x: (torch.frexp(x)[1] - 1).to(torch.int32),
}  # fmt: skip


def _interpreted(function: Any) -> Any:
    def libdevice_function(*args: Any, **kwargs: Any) -> Any:
        import numpy as np
        import triton.language as tl
        from triton.runtime.interpreter import TensorHandle, _get_np_dtype

        tensors = [a for a in args if isinstance(a, tl.core.tensor)]
        values = [torch.from_numpy(np.asarray(a.handle.data)) if isinstance(a, tl.core.tensor) else a for a in args]
        result = function(*values).numpy()
        if result.dtype == np.bool_:
            dtype = tl.int1
        elif result.dtype.kind in "iu":
            dtype = {4: tl.int32, 8: tl.int64}[result.dtype.itemsize]
        else:
            dtype = next(t.dtype.scalar for t in tensors if t.dtype.scalar.is_floating())
            result = result.astype(_get_np_dtype(dtype))
        is_block = any(t.type.is_block() for t in tensors)
        return tl.core.tensor(TensorHandle(result, dtype), tl.core.block_type(dtype, list(result.shape)) if is_block else dtype)

    return libdevice_function


@patch("triton.language.extra.libdevice.exp")
def libdevice_functions(exp: Any) -> None:
    # Hashed: libdevice.exp, standing for the module's stubs, which are all alike.
    from triton.language.extra import libdevice

    for name, function in _LIBDEVICE.items():
        setattr(libdevice, name, _interpreted(function))


# Adapts triton.runtime.interpreter._patch_lang_tensor, which gives Triton
# tensors, while a kernel is interpreted, the conversions Python needs; its
# __index__ (a loop bound such as r0_numel in tl.range) converts the one-element
# array of a scalar with int(), which NumPy 2.4 refuses for arrays of one
# dimension (triton-lang/triton#9171, fixed after Triton 3.6 by #9172): the
# element is taken with item().


@patch("triton.runtime.interpreter._patch_lang_tensor")
def tensor_index_for_numpy_2_4(original: Any) -> None:
    from triton.runtime import interpreter

    def _patch_lang_tensor(tensor: Any, scope: Any) -> None:
        original(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.item()))

    interpreter._patch_lang_tensor = _patch_lang_tensor
