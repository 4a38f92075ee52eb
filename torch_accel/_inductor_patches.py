"""Adaptations of PyTorch 2.11 internals that torch.compile on accel needs.

Every other piece of accel's torch.compile support goes through a registration
hook (device interface, backend for device, device op overrides). What follows
has no hook in 2.11: each patch names the code it adapts and why, wraps the
original rather than copying it, and is listed in ``SOURCE_SHA256`` with a
hash of the source it was written against; test_compile fails when that
source changes, so a PyTorch upgrade revisits every patch here.

This module imports Inductor only inside its functions: importing it is free.
"""

import hashlib
import importlib
import inspect
import sys
from typing import Any, Callable

import torch

_DEVICE_TYPE = "accel"

# The code each patch adapts, with the sha256 of its torch 2.11.0 source
# (inspect.getsource). test_compile checks them against the installed torch.
SOURCE_SHA256 = {
    "torch._subclasses.fake_impls.conv": "ffa40aa86d96c3779f3697e0be7914c936e298b534110201667a784907d041cb",
    "torch._inductor.utils.get_current_backend": "fdbd7dc979ba487185f37d6667845881c297422d2ff5609410dd3d458cde9a86",
    "torch._inductor.utils.is_gpu": "3f477e69f84157f442372f35bdec680c5585f8da58202e38787491bbd246b626",
    "torch._inductor.utils.get_gpu_type": "9f6c073f0df19606d72bd55973da0ab1179a8b36599f7358d89f204fef7c7791",
    "torch._inductor.runtime.hints.DeviceProperties.create": "760dfde73f9663e6a4e913be0f534acef2e9329fde0bc94046ec83e1f4fe859a",
}

# Qualified name -> the original, for the patches applied in this process.
_originals: dict[str, Callable[..., Any]] = {}


def _resolve(name: str) -> Callable[..., Any]:
    """The object ``name`` (a module attribute or a class attribute) names now."""
    owner_name, _, attribute = name.rpartition(".")
    try:
        owner: Any = importlib.import_module(owner_name)
    except ModuleNotFoundError:
        module_name, _, class_name = owner_name.rpartition(".")
        owner = getattr(importlib.import_module(module_name), class_name)
    value = vars(owner)[attribute]
    return getattr(value, "__func__", value)  # a classmethod's function


def original(name: str) -> Callable[..., Any]:
    """The unpatched function ``name`` (one of SOURCE_SHA256), patched or not."""
    return inspect.unwrap(_originals[name] if name in _originals else _resolve(name))


def source_sha256(function: Callable[..., Any]) -> str:
    return hashlib.sha256(inspect.getsource(function).encode()).hexdigest()


def _first_patch(name: str, function: Callable[..., Any]) -> bool:
    """Record ``function`` as the original of ``name``; False if already patched (patches apply once)."""
    assert name in SOURCE_SHA256, name
    if name in _originals:
        return False
    _originals[name] = function
    return True


def _rebind(original: Callable[..., Any], replacement: Callable[..., Any], package: str) -> None:
    """Replace ``original`` with ``replacement`` wherever a loaded module of
    ``package`` bound it by name (``from .utils import f``); modules loaded
    later import the replacement from its defining module."""
    for name, module in list(sys.modules.items()):
        if module is None or not (name == package or name.startswith(package + ".")):
            continue
        for attribute, value in list(vars(module).items()):
            if value is original:
                setattr(module, attribute, replacement)


# --- FakeTensor: accel convolutions have the target's output layout ----------
#
# Adapts torch._subclasses.fake_impls.conv, FakeTensor's rule for
# aten.convolution and aten.convolution_backward. It predicts the output's
# memory format from the backend ATen would select for the input's device; for
# PrivateUse1 that is ConvBackend::Overrideable, which it predicts contiguous.
# accel's convolution_overrideable runs the target's aten::convolution, whose
# output is channels-last for channels-last inputs (CPU and cuDNN alike). The
# mismatch makes Inductor's generated code fail its stride assertions (and
# Inductor picks channels-last for convolutions by itself). The adapted rule
# computes accel convolutions as fake tensors on the target device.


def _target_device(device: torch.device) -> torch.device:
    import torch_accel

    target = torch_accel._target_device_type()
    return torch.device(target, device.index) if target != "cpu" else torch.device("cpu")


def _refake(fake_mode: Any, tensor: Any, device: torch.device) -> Any:
    """The same fake tensor (a view of its meta storage) reported on ``device``."""
    from torch._subclasses.fake_tensor import FakeTensor, in_kernel_invocation_manager

    with in_kernel_invocation_manager(fake_mode):
        meta = torch.ops.aten.alias.default(tensor)
    return FakeTensor(fake_mode, meta, device)


def _patch_fake_convolution() -> None:
    from torch._subclasses import fake_impls
    from torch._subclasses.fake_tensor import FakeTensor
    from torch.utils._pytree import tree_map

    original = fake_impls.conv
    if not _first_patch("torch._subclasses.fake_impls.conv", original):
        return

    def conv(fake_mode: Any, func: Any, *args: Any, **kwargs: Any) -> Any:
        accel = next(
            (a.fake_device for a in (*args, *kwargs.values()) if isinstance(a, FakeTensor) and a.fake_device.type == _DEVICE_TYPE),
            None,
        )
        if accel is None:
            return original(fake_mode, func, *args, **kwargs)
        target = _target_device(accel)

        def to_target(a: Any) -> Any:
            return _refake(fake_mode, a, target) if isinstance(a, FakeTensor) and a.fake_device == accel else a

        def to_accel(a: Any) -> Any:
            return _refake(fake_mode, a, accel) if isinstance(a, FakeTensor) else a

        args, kwargs = tree_map(to_target, (args, kwargs))
        return tree_map(to_accel, original(fake_mode, func, *args, **kwargs))

    for op in (torch.ops.aten.convolution.default, torch.ops.aten.convolution_backward.default):
        fake_impls._deregister_op_impl(op)
        fake_impls.register_op_impl(op)(conv)


def apply_fake_tensor_patches() -> None:
    """Patches for FakeTensor, which Dynamo, AOTAutograd and Inductor all trace with."""
    _patch_fake_convolution()


# --- Inductor: accel generates code for its runtime's backend ---------------
#
# Adapts torch._inductor.utils.get_current_backend, which names the code
# generator for a device type ("cpp", "triton", ...) from Inductor's config:
# config.cpu_backend for cpu, config.cuda_backend for every device type it does
# not know. Inductor's CSE, dtype propagation and fusion rules branch on that
# name, so accel must get the name of the Scheduling registered for it: "cpp"
# on the host runtime (CppScheduling), "triton" on the CUDA runtime.

_ACCEL_BACKEND = {"host": "cpp", "cuda": "triton"}


def _patch_get_current_backend(runtime: str) -> None:
    from torch._inductor import utils

    original = utils.get_current_backend
    if not _first_patch("torch._inductor.utils.get_current_backend", original):
        return
    backend = _ACCEL_BACKEND[runtime]

    def get_current_backend(device_type: Any = None) -> str:
        if not device_type:
            from torch._inductor.virtualized import V

            device_type = V.graph.get_current_device_or_throw().type
        return backend if device_type == _DEVICE_TYPE else original(device_type)

    get_current_backend.__doc__ = original.__doc__
    utils.get_current_backend = get_current_backend
    _rebind(original, get_current_backend, "torch._inductor")


# --- Inductor, CUDA runtime: accel is a GPU ---------------------------------
#
# Adapts torch._inductor.utils.is_gpu, which is membership in the module list
# GPU_TYPES. Inductor asks it (through is_gpu and device_need_guard) whether a
# device gets GPU treatment: Triton kernels, device guards and streams in the
# wrapper, GPU fusion rules. On the CUDA runtime accel is a CUDA GPU, so accel
# joins GPU_TYPES. torch._inductor.utils.get_gpu_type (cached) asserts that at
# most one *available* type in GPU_TYPES exists; it is evaluated first, so it
# keeps answering "cuda", the GPU accel runs on.


def _patch_gpu_types() -> None:
    from torch._inductor import utils

    if not _first_patch("torch._inductor.utils.is_gpu", utils.is_gpu):
        return
    _first_patch("torch._inductor.utils.get_gpu_type", utils.get_gpu_type)
    utils.get_gpu_type()
    utils.GPU_TYPES.append(_DEVICE_TYPE)


# --- Inductor, CUDA runtime: Triton compiles accel kernels for CUDA ----------
#
# Adapts torch._inductor.runtime.hints.DeviceProperties.create, which snapshots
# a device for Triton kernels: its ``type`` becomes triton_meta["device"].type
# and compile_meta["device_type"], from which CachingAutotuner builds Triton's
# GPUTarget, picks the device interface it launches and benchmarks with, and
# decides whether the static CUDA launcher applies. No Triton backend accepts
# "accel". accel:N is cuda:N (same memory, same current stream), so Triton
# kernels for accel:N are described as kernels for cuda:N: compiled for the
# CUDA target, launched through the CUDA launchers on the stream the wrapper
# passes (the accel current stream), with every cuda fast path. Compile worker
# subprocesses then need nothing of accel.


def _patch_device_properties() -> None:
    from torch._inductor.runtime.hints import DeviceProperties

    original = vars(DeviceProperties)["create"].__func__  # functools.cache of the 2.11 function
    if not _first_patch("torch._inductor.runtime.hints.DeviceProperties.create", original):
        return

    def create(cls: type, device: torch.device) -> Any:
        if device.type == _DEVICE_TYPE:
            device = torch.device("cuda", device.index)
        return original(cls, device)

    create.__doc__ = original.__doc__
    DeviceProperties.create = classmethod(create)  # type: ignore[method-assign, assignment]


def apply_inductor_patches(runtime: str) -> None:
    """Patches for Inductor, applied when accel's backend registers for ``runtime``."""
    _patch_get_current_backend(runtime)
    if runtime == "cuda":
        _patch_gpu_types()
        _patch_device_properties()
