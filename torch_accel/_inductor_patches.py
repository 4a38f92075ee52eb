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
import types
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
    "torch._inductor.graph.GraphLowering.decide_layout_opt": "bef90675b8c18d39035ff933c70cec0dc09a135e7b6c710ff0d49bd8157b613a",
    "torch._inductor.kernel.conv.convolution": "c56742ea0753e60e358a27fe65d67b6f8526ba6c1ef181dc489cfd4c0a6aa86b",
    "torch._inductor.output_code.CompiledFxGraph.post_compile": "0fa28fd8275d826280a1ed1ddf414c14c480d607ef2851e98671e363104ef119",
    "torch._inductor.ir.is_cpu": "5449d162cfd24cbae10a701882c7cbd3562b1b944ae16b46ba39fb2892e791f6",
    "torch._inductor.scheduler.BaseSchedulerNode.is_cpu": "3abf458ee46f55f4b78e8089c736e9b9c3e3813e5e7062d1aadfc92eaac05340",
    "torch._inductor.lowering.div_prim": "75e87a9bf283a7c2b0b672ef778498974cb4a04a6aa9f34304cbc46c7f445f93",
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
#
# When: as soon as torch._inductor.utils has executed (_dynamo_registration;
# Dynamo imports it), not when accel's backend registers. Inductor registers
# backends only once AOTAutograd has traced the first graph (compile_fx's
# _compile_fx_inner), and the tracing already asks is_gpu:
# convolution_backward's decomposition, for one, applies only to GPU types.
# Patched later, the first graph of a process would be traced as for a CPU and
# later graphs as for cuda.


def patch_gpu_types() -> None:
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


# --- Inductor, host runtime: C++ code for accel follows cpu's heuristics ------
#
# Adapts torch._inductor.ir.is_cpu and
# torch._inductor.scheduler.BaseSchedulerNode.is_cpu. Inductor asks them, for
# an IR node and a scheduler node, whether its code is generated for a CPU,
# and then applies what it knows about its C++ code generation: realize a
# reused result of exp/sigmoid rather than recompute it (ir.is_cpu, in
# StorageBox.should_realize_on_reuse), and never reorder loops or invert loop
# indices to fuse nodes ("does not work for CPU" codegen; BaseSchedulerNode.is_cpu,
# in Scheduler's fusion). Where accel's target is cpu, accel nodes are
# generated by the same CppScheduling for the same CPU, so they answer yes.


def _target_is_cpu() -> bool:
    import torch_accel

    return torch_accel._target_device_type() == "cpu"


def _patch_is_cpu() -> None:
    from torch._inductor import ir, scheduler

    if _first_patch("torch._inductor.ir.is_cpu", ir.is_cpu):
        original = ir.is_cpu

        def is_cpu(x: Any) -> bool:
            return _target_is_cpu() if ir.get_device_type(x) == _DEVICE_TYPE else original(x)

        is_cpu.__doc__ = original.__doc__
        ir.is_cpu = is_cpu
        _rebind(original, is_cpu, "torch._inductor")

    original_node_is_cpu = scheduler.BaseSchedulerNode.is_cpu
    if _first_patch("torch._inductor.scheduler.BaseSchedulerNode.is_cpu", original_node_is_cpu):

        def node_is_cpu(self: Any) -> bool:
            device = self.get_device()
            if device is not None and device.type == _DEVICE_TYPE:
                return _target_is_cpu()
            return original_node_is_cpu(self)

        scheduler.BaseSchedulerNode.is_cpu = node_is_cpu  # type: ignore[method-assign]


# Adapts torch._inductor.lowering.div_prim, the lowering of prims.div (and,
# through it, of aten.div): for every device type but cpu it replaces a
# division by a constant with a multiplication by its reciprocal, which is
# not always the same float; on cpu it keeps the division, as eager does
# (pytorch/pytorch#157959). Where accel's target is cpu, accel keeps it too,
# so compiled accel computes what compiled cpu does, bit for bit. The
# lowering is registered again (same options) around the original one.


def _patch_div_by_constant() -> None:
    from torch._inductor import lowering
    from torch._inductor.virtualized import ops

    registered = lowering.div_prim
    original = inspect.unwrap(registered)
    if not _first_patch("torch._inductor.lowering.div_prim", original):
        return

    def div_prim(a: Any, b: Any) -> Any:
        if (
            _target_is_cpu()
            and isinstance(a, lowering.ir.IRNode)
            and lowering.ir.get_device_type(a) == _DEVICE_TYPE
            and lowering.get_constant_value(b) is not None
            and not all(lowering.is_boolean_type(x) or lowering.is_integer_type(x) for x in (a, b))
        ):
            # The original's cpu path: a true division.
            return lowering.make_pointwise(lambda *args: ops.truediv(*args))(a, b)
        return original(a, b)

    div_prim.__doc__ = original.__doc__
    lowering.div_prim = lowering.register_lowering([torch.ops.prims.div], broadcast=True)(div_prim)


# --- Inductor: accel convolutions are laid out as the target's ---------------
#
# Adapts torch._inductor.graph.GraphLowering.decide_layout_opt, which decides
# whether a graph's convolutions (and the tensors around them) go
# channels-last. Its first rule: where every convolution runs on an mkldnn
# device type (SUPPORTED_MKLDNN_DEVICES: cpu, xpu), always, because oneDNN is
# faster channels-last; otherwise heuristics tuned for cuDNN, which keep small
# convolutions (<= 64 channels) contiguous. accel convolutions run the
# target's aten::convolution (csrc/aten/Convolution.cpp), so on a cpu target
# they are oneDNN's, and the first rule is the one that fits. The cost of the
# wrong rule is not only the convolution: Inductor's C++ kernels vectorize
# along the innermost dimension, so a contiguous max_pool2d_with_indices or
# its backward runs scalar (the CNN benchmark's training step spent about
# half its instructions in such a kernel).


def _accel_runs_on_mkldnn() -> bool:
    from torch._inductor.utils import SUPPORTED_MKLDNN_DEVICES

    import torch_accel

    return (
        torch_accel._target_device_type() in SUPPORTED_MKLDNN_DEVICES
        and torch.backends.mkldnn.enabled
        and torch.backends.mkldnn.is_available()
    )


def _patch_layout_optimization() -> None:
    from torch._inductor import config
    from torch._inductor.graph import GraphLowering

    original = vars(GraphLowering)["decide_layout_opt"].__func__  # a staticmethod
    if not _first_patch("torch._inductor.graph.GraphLowering.decide_layout_opt", original):
        return
    from torch._inductor.utils import SUPPORTED_MKLDNN_DEVICES

    def decide_layout_opt(gm: torch.fx.GraphModule, *, is_inference: bool) -> bool:
        decision = original(gm, is_inference=is_inference)
        if decision or not config.layout_optimization or not _accel_runs_on_mkldnn():
            return decision
        devices = [
            node.args[i].meta["val"].device.type
            for node in gm.graph.nodes
            if node.target is torch.ops.aten.convolution.default
            for i in (0, 1)
        ]
        # The original's first rule, with accel counted as the mkldnn device it runs on.
        return _DEVICE_TYPE in devices and all(d == _DEVICE_TYPE or d in SUPPORTED_MKLDNN_DEVICES for d in devices)

    decide_layout_opt.__doc__ = original.__doc__
    GraphLowering.decide_layout_opt = staticmethod(decide_layout_opt)  # type: ignore[method-assign, assignment]


# --- Inductor: accel convolutions are lowered as the target's -----------------
#
# Adapts torch._inductor.kernel.conv.convolution, the lowering of
# aten.convolution. It asks ir.get_device_type(x) for the input's device type
# and, for every type but cpu, peels the bias off the convolution into a
# separate add ("cudnn is slower with it"); the type also picks the autotuning
# configurations of its Triton templates (max-autotune). accel convolutions
# run the target's kernel, so the lowering should decide as for the target:
# on the host runtime, oneDNN's convolution with its bias, as for cpu (same
# extern call, same result), on the CUDA runtime cuda's choices. The lowering
# reads the type through its module's ``ir``; that module global is replaced
# by a view of torch._inductor.ir whose get_device_type reports accel as the
# target (everything else is ir's own), so only kernel/conv.py sees it.


class _IrSeenByConvolutions(types.ModuleType):
    """torch._inductor.ir, except that get_device_type names accel's target."""

    def __init__(self, ir: types.ModuleType, target: str) -> None:
        super().__init__(ir.__name__, ir.__doc__)
        self._ir = ir
        self._target = target

    def __getattr__(self, name: str) -> Any:
        return getattr(self._ir, name)

    def get_device_type(self, x: Any) -> Any:
        device_type = self._ir.get_device_type(x)
        return self._target if device_type == _DEVICE_TYPE else device_type


def _patch_convolution_lowering() -> None:
    from torch._inductor.kernel import conv

    if not _first_patch("torch._inductor.kernel.conv.convolution", inspect.unwrap(conv.convolution)):
        return
    import torch_accel

    conv.ir = _IrSeenByConvolutions(conv.ir, torch_accel._target_device_type())  # type: ignore[attr-defined]


# --- Inductor: mode="reduce-overhead" says why accel graphs run without CUDA graphs
#
# Adapts torch._inductor.output_code.CompiledFxGraph.post_compile. With
# triton.cudagraphs (mode="reduce-overhead"), Inductor records why a graph
# cannot be captured (for an accel graph: check_lowering_disable_cudagraph
# accepts exactly one device, of type cuda, and reports "multiple devices:
# device(type='accel', index=0)"), then logs the reason only if the graph has
# a cuda device and otherwise just counts the skip (cudagraph_skips). accel
# graphs get the log line cuda graphs get (artifact "cudagraphs", TORCH_LOGS=
# cudagraphs), on fresh compiles and cache hits alike; the count stays
# Inductor's. See the README on why accel has no CUDA graphs.


def _patch_cudagraph_skip_message() -> None:
    from torch._inductor import config
    from torch._inductor.cudagraph_utils import cudagraphs_log
    from torch._inductor.output_code import CompiledFxGraph

    original = CompiledFxGraph.post_compile
    if not _first_patch("torch._inductor.output_code.CompiledFxGraph.post_compile", original):
        return

    def post_compile(self: Any, example_inputs: Any, constants: Any, graph_kwargs: Any) -> None:
        if (
            config.triton.cudagraphs
            and self.disabled_cudagraphs_reason
            and _DEVICE_TYPE in self.device_types
            and "cuda" not in self.device_types
        ):
            cudagraphs_log.warning(self.disabled_cudagraphs_reason)
        return original(self, example_inputs, constants, graph_kwargs)

    post_compile.__doc__ = original.__doc__
    CompiledFxGraph.post_compile = post_compile  # type: ignore[method-assign]


def apply_inductor_patches(runtime: str) -> None:
    """Patches for Inductor, applied when accel's backend registers for ``runtime``."""
    _patch_get_current_backend(runtime)
    _patch_is_cpu()
    _patch_div_by_constant()
    _patch_layout_optimization()
    _patch_convolution_lowering()
    _patch_cudagraph_skip_message()
    if runtime == "cuda":
        patch_gpu_types()  # applied once torch._inductor.utils loaded; a no-op then
        _patch_device_properties()
