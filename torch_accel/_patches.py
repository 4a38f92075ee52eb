"""The registry of every patch torch_accel makes to PyTorch 2.11 or another library.

Where PyTorch has a hook for what accel needs (device interface, backend for
device, device op overrides, c10d plugins, profiler stubs), torch_accel uses
it. Where it has none, a patch adapts the code in place. Every such patch is
declared here and nowhere else may PyTorch's or a library's attributes be
rebound (tools/check_package.py, run by ``make lint``, enforces it):

- ``SOURCE_SHA256`` names the code each patch adapts, with the sha256 of its
  torch 2.11.0 (and Triton 3.6, safetensors 0.8.0) source (``inspect.getsource``).
  test/test_patches.py checks every entry against the installed packages, so
  an upgrade makes every patch be reviewed.
- A patch is a function decorated with ``@patch(name, ...)``, the names it
  adapts; it receives the original of each name (as found before the patch)
  and installs its replacement. It lives in the module of the area it adapts:
  torch_accel/_inductor/ (FakeTensor, Inductor, Triton's interpreter; one
  module per area), _profiler_patches.py (the profiler), _distributed.py
  (torch.distributed's backend selection), _data_parallel.py (nn.DataParallel),
  _interop.py (DLPack, __cuda_array_interface__).
- ``apply(patch, ...)`` is the one way to apply a patch: once per process,
  recording the originals first, so ``original(name)`` always gives the
  unpatched code. Who applies what, and when, is up to the owner of the area
  (Inductor's patches: torch_accel/_inductor/registration.py).

Patches wrap the original rather than copy it, and name the code they adapt
and why. Importing this module imports nothing of PyTorch's.
"""

import hashlib
import importlib
import inspect
import sys
from collections.abc import Callable
from typing import Any

# The code each patch adapts, with the sha256 of its torch 2.11.0 (Triton 3.6, safetensors 0.8.0)
# source. By the module that patches it.
SOURCE_SHA256 = {
    # _inductor/fake_tensor.py
    "torch._subclasses.fake_impls.conv": "ffa40aa86d96c3779f3697e0be7914c936e298b534110201667a784907d041cb",
    # _inductor/backend_choice.py
    "torch._inductor.utils.get_current_backend": "fdbd7dc979ba487185f37d6667845881c297422d2ff5609410dd3d458cde9a86",
    "torch._inductor.utils.is_gpu": "3f477e69f84157f442372f35bdec680c5585f8da58202e38787491bbd246b626",
    "torch._inductor.utils.get_gpu_type": "9f6c073f0df19606d72bd55973da0ab1179a8b36599f7358d89f204fef7c7791",
    "torch._inductor.ir.is_cpu": "5449d162cfd24cbae10a701882c7cbd3562b1b944ae16b46ba39fb2892e791f6",
    "torch._inductor.scheduler.BaseSchedulerNode.is_cpu": "3abf458ee46f55f4b78e8089c736e9b9c3e3813e5e7062d1aadfc92eaac05340",
    # _inductor/device_properties.py
    "torch._inductor.runtime.hints.DeviceProperties.create": "760dfde73f9663e6a4e913be0f534acef2e9329fde0bc94046ec83e1f4fe859a",
    # _inductor/convolution.py
    "torch._inductor.graph.GraphLowering.decide_layout_opt": "bef90675b8c18d39035ff933c70cec0dc09a135e7b6c710ff0d49bd8157b613a",
    "torch._inductor.kernel.conv.convolution": "c56742ea0753e60e358a27fe65d67b6f8526ba6c1ef181dc489cfd4c0a6aa86b",
    # _inductor/lowering.py
    "torch._inductor.lowering.div_prim": "75e87a9bf283a7c2b0b672ef778498974cb4a04a6aa9f34304cbc46c7f445f93",
    "torch._inductor.scheduler.MixOrderReduction.can_fuse": "e481a5ba835e37c924ef1a92c8b4b4b9e2650b04858d9c52c7032bfca148f6ea",
    "torch._inductor.fx_passes.post_grad.prepare_softmax_extra_check": "4be7447c174bbfcc92f4cac9c0ea78b9c52ed076b07f069a6c15f86d23643aa2",
    "torch._inductor.fx_passes.joint_graph.bmm_to_mm": "2905c8031e062f87afe9019c11e0c752b6d71e7e9b0878077450369c96256192",
    "torch._inductor.fx_passes.decompose_mem_bound_mm.check_device": "46d04407ec81235797e6c1c8deb608816ca06cb45100e5db21543fec63c7d766",
    "torch._inductor.lowering.sdpa_constraint": "f06d8ef3241774b9adecf0ccd02148e254b7fcc0c4e14c0ff4dea6617057f49d",
    # _inductor/graphs.py (mode="reduce-overhead")
    "torch._inductor.output_code.CompiledFxGraph.post_compile": "0fa28fd8275d826280a1ed1ddf414c14c480d607ef2851e98671e363104ef119",
    "torch._inductor.cudagraph_utils.check_lowering_disable_cudagraph": "60defaedd101526c16d1e98006d994c5af6c0d1c5be2aa68f47ca10b8e085ff1",
    "torch._inductor.output_code.cudagraph_post_compile": "5640203222393e8e3fad6ee8841b68c4d8a69654428c411514095a155381cd65",
    "torch._inductor.output_code.cudagraph_partition_post_compile": "3972900b57fba1425643273f4119c7593df05a172fc3a23deebbab98bd34bf5a",
    # _inductor/interpreter.py (TORCH_ACCEL_INDUCTOR=triton on the host runtime)
    "torch.utils._triton.has_triton": "99b63406dc8e19922ef4e565418f0af05a3d98d23599c1038e04b38fd9465dcc",
    "torch.utils._triton.triton_backend": "71e9c8ee2d3143634f06bfba6f6afbdb5c9f3413b1feaf8910e05d65b47af00d",
    "torch._inductor.runtime.triton_helpers.set_driver_to_gpu": "a8d38f89bf6ec0175c925040d8e7a824cfb1790d8ff2c8cfbda1763c5495a7f1",
    "triton.language.extra.libdevice.exp": "9c20ec859c16dc6f98c13579874f809405bc61d4986f28591faa2eb68741adbb",
    "triton.runtime.interpreter._patch_lang_tensor": "efc91e4a5c969e2c7e14b35acb5f4bb9e47290c7a45189eb8840b1b6918d1e9a",
    # _profiler_patches.py
    "torch.autograd.profiler.profile.__init__": "ea6ecd049a2176606ceda286a514ef780c7d9ac937d531d4e28a9ccd8ed6d018",
    # _distributed.py
    "torch.distributed.distributed_c10d.BackendConfig.__init__": "d928aa616689aa3fa60d89e61cd8718ba5b15b6e0f0de834ff5b7eb000928003",
    "torch.distributed.distributed_c10d._new_process_group_helper": "a525cc222c385ff58c995e9b3bc97eba6ae9107d88ffd0c519d694904cc27e7a",
    # _data_parallel.py (nn.DataParallel over accel devices)
    "torch.nn.parallel.comm.broadcast": "5c959ac5a71150997f353ab960ed22ddc69138c35db6a970ecd6cdaa5aeaa676",
    "torch.nn.parallel.comm.broadcast_coalesced": "27dd4cbc61bc54a3dfc2915fc3a3428aefb73af95665e0b0767b13bfd175d6c8",
    "torch.nn.parallel.comm.scatter": "44e4f5f71a646da57d921f642d6fd61808130a9bdcd6585ea4aa98a7c2057a68",
    "torch.nn.parallel.comm.gather": "5ed17efa8bf6aab8cfa658afa354c265970c42a975c79e68763c4b0b1495d989",
    "torch._utils._get_available_device_type": "6df82059093e1639db7f36c462f57a9d63a2f9c0edbf8b4e3f4b7f2055d68da1",
    "torch.nn.parallel.data_parallel.DataParallel.__init__": "da9aabf67411d3f468134aea2c433255275035eb17ec68849553b86f4dae949a",
    "torch.nn.parallel.data_parallel.data_parallel": "0901210c0e55e8688f8259b794083334b4e86ce413305cf11271a42a8ddf3391",
    # _interop.py (DLPack, __cuda_array_interface__)
    "torch._tensor.Tensor.__dlpack_device__": "f8e6198f4e14f7d804be5a6c067ee7d1def86f6e67c0e12fb57bc20cd3737217",
    "torch._tensor.Tensor.__dlpack__": "c67cfc5a76af4b7e8db19d3d5ec444e5abffe41b4b683fc70f3ae54c002a25e7",
    "torch._tensor.Tensor.__cuda_array_interface__": "340dabaaf51338cb82399f2a6cb9a48558bd20c15586b4201be3e2fc2efcb1ab",
    "torch.utils.dlpack.from_dlpack": "9079d1714f876d35fb1ec213e053bbbc103d70955b3456f94fdc6431a2092a67",
    # _safetensors.py (safetensors 0.8.0, a test dependency; patched when it loads)
    "safetensors.torch.load_file": "e4dd067a52391628f8a441384012e1f66fbec41fba6dca5113789cf9764a2163",
}


class Patch:
    """A patch: the qualified names of the code it adapts, and the function that
    installs it, called once with their originals (by ``apply``)."""

    __slots__ = ("names", "install")

    def __init__(self, names: tuple[str, ...], install: Callable[..., None]) -> None:
        self.names = names
        self.install = install

    def __repr__(self) -> str:
        return f"<patch {self.install.__module__}.{self.install.__qualname__} of {', '.join(self.names)}>"


# Every declared patch, by each name it adapts.
_declared: dict[str, Patch] = {}
# Qualified name -> the original, for the patches applied in this process.
_originals: dict[str, Any] = {}


def patch(*names: str) -> Callable[[Callable[..., None]], Patch]:
    """Declare the decorated function as the patch of ``names`` (keys of SOURCE_SHA256).

    The function is not called here: ``apply`` calls it, once, with the
    original of each name in order.
    """
    for name in names:
        if name not in SOURCE_SHA256:
            raise KeyError(f"{name} is patched without a hash of its source in torch_accel._patches.SOURCE_SHA256")

    def declare(install: Callable[..., None]) -> Patch:
        declared = Patch(names, install)
        for name in names:
            if name in _declared:
                raise ValueError(f"{name} is patched twice: by {_declared[name].install.__qualname__} and {install.__qualname__}")
            _declared[name] = declared
        return declared

    return declare


def _resolve(name: str) -> Any:
    """The function ``name`` (a module attribute or a class attribute) names now;
    for a classmethod or staticmethod, its function; for a property, its getter."""
    owner_name, _, attribute = name.rpartition(".")
    try:
        owner: Any = importlib.import_module(owner_name)
    except ModuleNotFoundError:
        module_name, _, class_name = owner_name.rpartition(".")
        owner = getattr(importlib.import_module(module_name), class_name)
    value = vars(owner)[attribute]
    if isinstance(value, property):
        return value.fget
    return getattr(value, "__func__", value)


def apply(*patches: Patch) -> None:
    """Apply each of ``patches`` unless it is applied already: record the
    originals of its names, then install it with them."""
    for declared in patches:
        if declared.names[0] in _originals:
            continue
        originals = [_resolve(name) for name in declared.names]
        _originals.update(zip(declared.names, originals))
        declared.install(*originals)


def declared() -> dict[str, Patch]:
    """Every patch declared by the modules imported so far, by name."""
    return dict(_declared)


def original(name: str) -> Callable[..., Any]:
    """The unpatched code ``name`` (one of SOURCE_SHA256), patched or not, unwrapped."""
    if name not in SOURCE_SHA256:
        raise KeyError(f"{name} is not in torch_accel._patches.SOURCE_SHA256")
    return inspect.unwrap(_originals[name] if name in _originals else _resolve(name))


def source_sha256(function: Callable[..., Any]) -> str:
    return hashlib.sha256(inspect.getsource(function).encode()).hexdigest()


def rebind(original: Any, replacement: Any, package: str) -> None:
    """Replace ``original`` with ``replacement`` wherever a loaded module of
    ``package`` bound it by name (``from .utils import f``); modules loaded
    later import the replacement from its defining module. For patches only."""
    for name, module in list(sys.modules.items()):
        if module is None or not (name == package or name.startswith(package + ".")):
            continue
        for attribute, value in list(vars(module).items()):
            if value is original:
                setattr(module, attribute, replacement)
