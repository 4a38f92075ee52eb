"""Adaptations of PyTorch 2.11 internals that torch.compile on accel needs.

Every other piece of accel's torch.compile support goes through a registration
hook (device interface, backend for device, device op overrides). What follows
has no hook in 2.11: each patch names the code it adapts and why, wraps the
original rather than copying it, and is listed in ``SOURCE_SHA256`` with a
hash of the source it was written against; test_compile fails when that
source changes, so a PyTorch upgrade revisits every patch here.

This module imports Inductor only inside its functions: importing it is free.
"""

import functools
import hashlib
import importlib
import inspect
import sys
import types
from typing import Any, Callable, Optional

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
    "triton.runtime.interpreter._patch_lang_tensor": "efc91e4a5c969e2c7e14b35acb5f4bb9e47290c7a45189eb8840b1b6918d1e9a",
    "triton.language.extra.libdevice.exp": "9c20ec859c16dc6f98c13579874f809405bc61d4986f28591faa2eb68741adbb",
    "torch._inductor.runtime.triton_helpers.set_driver_to_gpu": "a8d38f89bf6ec0175c925040d8e7a824cfb1790d8ff2c8cfbda1763c5495a7f1",
    "torch.utils._triton.triton_backend": "71e9c8ee2d3143634f06bfba6f6afbdb5c9f3413b1feaf8910e05d65b47af00d",
    "torch.utils._triton.has_triton": "99b63406dc8e19922ef4e565418f0af05a3d98d23599c1038e04b38fd9465dcc",
    "torch._inductor.scheduler.MixOrderReduction.can_fuse": "e481a5ba835e37c924ef1a92c8b4b4b9e2650b04858d9c52c7032bfca148f6ea",
    "torch._inductor.fx_passes.post_grad.prepare_softmax_extra_check": "4be7447c174bbfcc92f4cac9c0ea78b9c52ed076b07f069a6c15f86d23643aa2",
    "torch._inductor.fx_passes.joint_graph.bmm_to_mm": "2905c8031e062f87afe9019c11e0c752b6d71e7e9b0878077450369c96256192",
    "torch._inductor.fx_passes.decompose_mem_bound_mm.check_device": "46d04407ec81235797e6c1c8deb608816ca06cb45100e5db21543fec63c7d766",
    "torch._inductor.lowering.sdpa_constraint": "f06d8ef3241774b9adecf0ccd02148e254b7fcc0c4e14c0ff4dea6617057f49d",
    # Patched by _inductor_graphs (mode="reduce-overhead" on accel).
    "torch._inductor.cudagraph_utils.check_lowering_disable_cudagraph": "60defaedd101526c16d1e98006d994c5af6c0d1c5be2aa68f47ca10b8e085ff1",
    "torch._inductor.output_code.cudagraph_post_compile": "5640203222393e8e3fad6ee8841b68c4d8a69654428c411514095a155381cd65",
    "torch._inductor.output_code.cudagraph_partition_post_compile": "3972900b57fba1425643273f4119c7593df05a172fc3a23deebbab98bd34bf5a",
}

# The device type accel's code is generated for ("cpu": C++, "cuda": Triton),
# set when accel's backend registers (apply_inductor_patches). Inductor's
# choices by device type are made for accel as for this type. It is not
# always the type whose kernels run accel's operators (the runtime's target):
# with TORCH_ACCEL_INDUCTOR=triton on the host runtime, Inductor generates the
# CUDA runtime's code and the operators it calls run CPU kernels.
_codegen_target = ""
# Whether Triton's interpreter runs the Triton kernels (on host memory).
_interpreted = False

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
# (CppScheduling) or "triton" (TritonScheduling).


def _patch_get_current_backend(kernels: str) -> None:
    from torch._inductor import utils

    original = utils.get_current_backend
    if not _first_patch("torch._inductor.utils.get_current_backend", original):
        return
    backend = kernels

    def get_current_backend(device_type: Any = None) -> str:
        if not device_type:
            from torch._inductor.virtualized import V

            device_type = V.graph.get_current_device_or_throw().type
        return backend if device_type == _DEVICE_TYPE else original(device_type)

    get_current_backend.__doc__ = original.__doc__
    utils.get_current_backend = get_current_backend
    _rebind(original, get_current_backend, "torch._inductor")


# --- Inductor, Triton kernels: accel is a GPU ---------------------------------
#
# Adapts torch._inductor.utils.is_gpu, which is membership in the module list
# GPU_TYPES. Inductor asks it (through is_gpu and device_need_guard) whether a
# device gets GPU treatment: Triton kernels, device guards and streams in the
# wrapper, GPU fusion rules. On the CUDA runtime accel is a CUDA GPU, so accel
# joins GPU_TYPES; so it does with TORCH_ACCEL_INDUCTOR=triton on the host
# runtime, which generates the CUDA runtime's code. torch._inductor.utils.get_gpu_type (cached) asserts that at
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


# --- Inductor, Triton kernels: Triton compiles accel kernels for CUDA ----------
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
#
# With Triton's interpreter (TORCH_ACCEL_INDUCTOR=triton on the host runtime)
# there is no cuda:N to ask: accel:N is described as the CUDA device below, so
# that Inductor's heuristics (reduction splits, block sizes, persistent
# reductions, mix-order fusion) decide as on the CUDA runtime on that GPU and
# the generated code is that runtime's. The interpreter itself uses none of it.

# An H100 (SXM), the GPU the project's CUDA runs use: compute capability 9.0.
_INTERPRETED_CUDA_DEVICE = {
    "multi_processor_count": 132,
    "cc": 90,
    "major": 9,
    "regs_per_multiprocessor": 65536,
    "max_threads_per_multi_processor": 2048,
    "max_threads_per_block": 1024,
    "warp_size": 32,
}


def _patch_device_properties() -> None:
    from torch._inductor.runtime.hints import DeviceProperties

    original = vars(DeviceProperties)["create"].__func__  # functools.cache of the 2.11 function
    if not _first_patch("torch._inductor.runtime.hints.DeviceProperties.create", original):
        return

    def create(cls: type, device: torch.device) -> Any:
        if device.type == _DEVICE_TYPE:
            if _interpreted:
                return cls(type="cuda", index=device.index, **_INTERPRETED_CUDA_DEVICE)
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
# in Scheduler's fusion). Where accel's code is generated for cpu (C++), accel nodes are
# generated by the same CppScheduling for the same CPU, so they answer yes.


def _target_is_cpu() -> bool:
    return _codegen_target == "cpu"


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
# (pytorch/pytorch#157959). Where accel's code is generated for cpu, accel keeps it too,
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
# half its instructions in such a kernel). Decided by _codegen_target: with
# TORCH_ACCEL_INDUCTOR=triton on the host runtime, as on the CUDA runtime
# (whose code that mode generates; oneDNN takes either layout).


def _accel_runs_on_mkldnn() -> bool:
    from torch._inductor.utils import SUPPORTED_MKLDNN_DEVICES

    return (
        _codegen_target in SUPPORTED_MKLDNN_DEVICES
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
# extern call, same result), on the CUDA runtime (and in the Triton mode that
# generates its code: _codegen_target) cuda's choices. The lowering
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
    conv.ir = _IrSeenByConvolutions(conv.ir, _codegen_target)  # type: ignore[attr-defined]


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


# --- Inductor, Triton kernels: the choices Inductor makes for cuda -----------
#
# Where accel's code is generated for cuda (_codegen_target, the CUDA runtime
# or the interpreter mode that generates its code), the choices Inductor 2.11
# makes for the cuda device type only are made for accel too, so that accel's
# Triton code is cuda's for the same graph:
#
# - mix-order reduction fusion (scheduler.MixOrderReduction.can_fuse): two
#   reductions of one tensor along different dimensions (a layer norm's
#   backward: the input gradient reduces rows, the weight gradient columns)
#   fuse into one kernel; only for device types cuda and xpu.
# - online softmax (post_grad.prepare_softmax_extra_check): a softmax's max
#   and sum computed in one pass over the row (the online algorithm) where the
#   reduction is not persistent (rows wider than Inductor keeps in registers);
#   only for cuda and xpu. It rounds differently from the two-pass softmax, so
#   it is about bits as well as speed.
# - bmm of batch 1 as mm (joint_graph.bmm_to_mm): only for get_gpu_type(),
#   which is cuda where accel's code is Triton (see patch_gpu_types).
# - SDPA's attention bias aligned (lowering.sdpa_constraint): the bias of the
#   memory-efficient attention gets strides aligned to 8 elements, which
#   CUDA's kernel requires ("attn_bias is not correctly aligned"); only for
#   tensors with is_cuda. Without it, compiled efficient attention with a
#   computed bias whose rows are not a multiple of 8 long fails on accel.
#
# Each adaptation lets the original see accel as cuda at the one point where
# it asks for the device type.


def _device_seen_as_target(device: Optional[torch.device]) -> Optional[torch.device]:
    if device is not None and device.type == _DEVICE_TYPE:
        return torch.device(_codegen_target, device.index)
    return device


def _patch_mix_order_reduction() -> None:
    from torch._inductor.scheduler import MixOrderReduction

    original = vars(MixOrderReduction)["can_fuse"].__func__  # a classmethod
    if not _first_patch("torch._inductor.scheduler.MixOrderReduction.can_fuse", original):
        return

    def can_fuse(cls: type, node1: Any, node2: Any) -> bool:
        device = node1.get_device()
        if device is None or device.type != _DEVICE_TYPE:
            return original(cls, node1, node2)
        # The original reads the device type from node1.get_device() once;
        # node1 answers the target for the duration of the call.
        node1.get_device = lambda: _device_seen_as_target(device)
        try:
            return original(cls, node1, node2)
        finally:
            del node1.get_device

    can_fuse.__doc__ = original.__doc__
    MixOrderReduction.can_fuse = classmethod(can_fuse)  # type: ignore[method-assign, assignment]


def _patch_online_softmax() -> None:
    from torch._inductor import config
    from torch._inductor.fx_passes import post_grad
    from torch._inductor.utils import get_current_backend

    original = post_grad.prepare_softmax_extra_check
    if not _first_patch("torch._inductor.fx_passes.post_grad.prepare_softmax_extra_check", original):
        return

    def prepare_softmax_extra_check(match: Any) -> bool:
        if match.kwargs["x"].meta["val"].device.type == _DEVICE_TYPE:
            # The original's condition for cuda, with accel's backend (config.cuda_backend is cuda's).
            return bool(config.online_softmax) and get_current_backend(_DEVICE_TYPE) == "triton"
        return original(match)

    prepare_softmax_extra_check.__doc__ = original.__doc__
    # post_grad's lazy_init registers the pattern with the module's function,
    # on the first post-grad pass: after init_backend_registration, which
    # registers accel's backend.
    post_grad.prepare_softmax_extra_check = prepare_softmax_extra_check


def _patch_bmm_to_mm() -> None:
    from torch._inductor.fx_passes import joint_graph

    _first_patch("torch._inductor.fx_passes.joint_graph.bmm_to_mm", joint_graph.bmm_to_mm)
    original = joint_graph.check_device
    if not _first_patch("torch._inductor.fx_passes.decompose_mem_bound_mm.check_device", original):
        return

    def check_device(a: torch.Tensor, b: torch.Tensor, device: str = "cuda") -> bool:
        if a.device.type == b.device.type == _DEVICE_TYPE:
            return _codegen_target == device
        return original(a, b, device)

    check_device.__doc__ = original.__doc__
    # bmm_to_mm is joint_graph's only caller of check_device.
    joint_graph.check_device = check_device  # type: ignore[attr-defined]


class _SeenOnCuda:
    """A tensor's fake value, except that it reports is_cuda."""

    is_cuda = True

    def __init__(self, value: Any) -> None:
        self._value = value

    def __getattr__(self, name: str) -> Any:
        return getattr(self._value, name)


class _FxArgSeenOnCuda:
    def __init__(self, node: Any) -> None:
        self.meta = {**node.meta, "val": _SeenOnCuda(node.meta["val"])}


class _FxNodeSeenOnCuda:
    """What sdpa_constraint reads of an FX node (target, args, kwargs and their
    fake values), with accel tensors reported as cuda tensors."""

    def __init__(self, node: torch.fx.Node) -> None:
        def seen(arg: Any) -> Any:
            value = getattr(arg, "meta", {}).get("val")
            return _FxArgSeenOnCuda(arg) if isinstance(value, torch.Tensor) and value.device.type == _DEVICE_TYPE else arg

        self.target = node.target
        self.args = tuple(seen(a) for a in node.args)
        self.kwargs = {k: seen(v) for k, v in node.kwargs.items()}


def _patch_sdpa_constraint() -> None:
    from torch._inductor import lowering

    original = lowering.sdpa_constraint
    if not _first_patch("torch._inductor.lowering.sdpa_constraint", original):
        return

    def sdpa_constraint(fx_node: torch.fx.Node, *args: Any, **kwargs: Any) -> Any:
        if _codegen_target == "cuda":
            return original(_FxNodeSeenOnCuda(fx_node), *args, **kwargs)
        return original(fx_node, *args, **kwargs)

    sdpa_constraint.__doc__ = original.__doc__
    lowering.sdpa_constraint = sdpa_constraint
    # The lowerings registered it with their fallbacks (make_fallback).
    constraints = lowering._maybe_layout_constraints
    for op, constraint in list(constraints.items()):
        if constraint is original:
            constraints[op] = sdpa_constraint


def apply_inductor_patches(config: Any) -> None:
    """Patches for Inductor, applied when accel's backend registers with
    ``config`` (an _inductor_registration.CodegenConfig)."""
    global _codegen_target, _interpreted
    _codegen_target, _interpreted = config.target, config.interpreted
    _patch_get_current_backend(config.kernels)
    _patch_is_cpu()
    _patch_div_by_constant()
    _patch_layout_optimization()
    _patch_convolution_lowering()
    _patch_cudagraph_skip_message()
    from ._inductor_graphs import apply_graph_patches

    apply_graph_patches()
    if config.kernels == "triton":
        patch_gpu_types()  # applied once torch._inductor.utils loaded; a no-op then
        _patch_device_properties()
        _patch_mix_order_reduction()
        _patch_online_softmax()
        _patch_bmm_to_mm()
        _patch_sdpa_constraint()
    if config.interpreted:
        from ._inductor_interpreter import apply_interpreter_patches

        apply_interpreter_patches()
