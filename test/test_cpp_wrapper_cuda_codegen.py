"""cpp_wrapper and AOTInductor on the CUDA runtime, generated and compiled on a
machine without a GPU (docs/compile.md, "cpp_wrapper and AOTInductor").

In a process on the host runtime that Inductor and the patches see as the
CUDA runtime of an H100 (as test_compile.py's _TRITON_CODEGEN does),
torch.compile with cpp_wrapper=True compiles a function of accel:1 tensors
and aoti_compile_and_package packages an exported accel:1 model, through
Inductor's own code paths: its Triton
kernels are compiled for sm_90 by Triton with the ptxas Triton ships (which
is what fills Inductor's CudaKernelParamCache, from which the C++ wrapper
loads and launches them), and the C++ wrapper is compiled and linked by
Inductor with accel's compile options. What is mocked is only what faces a
GPU: the CUDA driver's device queries and launcher (as
test_user_triton_kernels.py mocks them), torch.cuda's current device and
stream (accel's on the CUDA runtime), and the timing of a kernel's configs.
The wrapper's run is the GPU run's: the JIT wrapper's library is compiled and
linked here and refused only when the process loads it, for want of the CUDA
driver (libcuda.so.1).
"""

import importlib.util
import json
import re
import subprocess

import pytest
import torch
from torch.utils.cpp_extension import CUDA_HOME

from conftest import run_python
from test_compile import _TRITON_CODEGEN

pytestmark = pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="needs the triton package")

# The CUDA runtime of an H100, as Inductor, the patches and Triton's compiler
# see it: test_compile.py's (the extension's answers, register(CodegenConfig("cuda",
# "triton")), H100 properties), and what a kernel's compile and autotuning ask
# a GPU for.
_CUDA_RUNTIME = (
    _TRITON_CODEGEN[: _TRITON_CODEGEN.index("fn = lambda t:")]
    + """
import json, os
from triton.backends.nvidia.driver import CudaDriver
from triton.runtime import driver
from torch._inductor import config
from torch._inductor.codecache import CudaKernelParamCache
from torch._inductor.runtime.benchmarking import benchmarker

# accel's device properties are the GPU's on the CUDA runtime (the AOTInductor
# package records its compute capability).
host_properties = torch_accel._C._get_device_properties
torch_accel._C._get_device_properties = lambda index: {**host_properties(index), **vars(h100)}
CudaInterface.Worker.get_device_properties = staticmethod(lambda device=None: h100)
# On the CUDA runtime torch.cuda's current device and stream are accel's
# (docs/runtimes.md): Inductor asks for them to load and run a kernel.
CudaInterface.current_device = staticmethod(torch.accel.current_device)
CudaInterface.exchange_device = staticmethod(torch.accel._exchange_device)
CudaInterface.maybe_exchange_device = staticmethod(torch.accel._maybe_exchange_device)
CudaInterface.get_raw_stream = staticmethod(torch_accel._C._get_raw_stream)


class H100:
    def get_device_properties(self, device):
        return {"max_shared_mem": 232448, "multiprocessor_count": 132, "max_num_regs": 65536, "warpSize": 32}

    def load_binary(self, name, kernel, shared, device):
        return 1, 2, 32, 0, 1024  # module, function, registers, spills, most threads per block


class NoLaunch:
    def __init__(self, src, metadata):
        pass

    def __call__(self, *args):
        pass


class CudaRuntimeDriver(CudaDriver):
    # Triton's CUDA driver with its GPU-facing parts answered: compiles for
    # sm_90 (its own ptxas), loads nothing, launches nothing.
    def __init__(self):
        self.get_current_device = torch.accel.current_device
        self.get_current_stream = torch_accel._C._get_raw_stream
        self.set_current_device = torch.accel.set_device
        self.get_device_capability = lambda device=None: (9, 0)
        self.utils = H100()
        self.launcher_cls = NoLaunch


CudaDriver.is_active = staticmethod(lambda: True)
driver.set_active(CudaRuntimeDriver())
# A kernel with several configs is timed to pick one: with no GPU to time on,
# each is called once and all are equally fast (the first is kept).
benchmarker.benchmark_gpu = lambda fn, **kwargs: (fn(), 1.0)[1]
config.compile_threads = 1  # compile here, with this driver


def compiled_kernels():
    # What Inductor's compile of each Triton kernel left for the C++ wrapper.
    kernels = {}
    for name, entry in CudaKernelParamCache.cache.items():
        with open(entry["cubin_path"], "rb") as f:
            elf = f.read(52)
        # ELF64: e_machine at 18, e_flags at 48; a CUDA binary's e_flags name its
        # SM, in bits 8-15 from its ABI version 8 (e_ident[8]) on, bits 0-7 before.
        flags = int.from_bytes(elf[48:52], "little")
        sm = (flags >> 8) & 0xFF if elf[8] >= 8 else flags & 0xFF
        kernels[name] = {"cubin": entry["cubin_path"], "elf_machine": int.from_bytes(elf[18:20], "little"), "sm": sm}
    return kernels
"""
)

# cpp_wrapper=True: torch.compile of a function of accel:1 tensors, with a
# dynamic shape. Inductor generates the wrapper's module, which compiles the C++
# wrapper (CppWrapperCodeCache.load_pybinding with device_type "accel") and
# loads it: the load is the GPU's part.
_JIT = (
    _CUDA_RUNTIME
    + """
from torch._inductor.cpp_builder import CppBuilder, CppTorchDeviceOptions
from torch._inductor.codecache import CppWrapperCodeCache
from torch._inductor.cpu_vec_isa import pick_vec_isa

modules = []
GraphLowering.save_output_code = staticmethod(modules.append)


def compile_and_call(fn, *args, **options):
    # The exception it ends with, if any: its first line.
    try:
        with config.patch(cpp_wrapper=True, **options):
            torch.compile(fn, dynamic=True)(*args)
    except Exception as error:
        return str(error).splitlines()[0]


def fn(t, w):
    # two Triton kernels, and mm: a fallback through accel's C shim
    return torch.softmax(torch.relu(t) @ w, -1) / 3 + 1, torch.sort(t, 1).values


load_error = compile_and_call(fn, torch.randn(64, 64, device="accel:1"), torch.randn(64, 64, device="accel:1"))
code = modules[-1]
kernels = compiled_kernels()


# Another function, with triton.autotune_at_compile_time off, after
# CudaKernelParamCache has been filled with the first one's kernels.
def other(t):
    return torch.softmax(t * 2, -1) + 1, t.sum(1)


refusal = compile_and_call(other, torch.randn(8, 8, device="accel:1"), **{"triton.autotune_at_compile_time": False})


def options(device):
    build = CppTorchDeviceOptions(device_type=device, vec_isa=pick_vec_isa(), **CppWrapperCodeCache.cpp_compile_command_flags)
    return CppBuilder(name="wrapper", sources="wrapper.cpp", BuildOption=build).get_command_line()


libraries = [os.path.join(d, f) for d, _, fs in os.walk(os.environ["TORCHINDUCTOR_CACHE_DIR"]) for f in fs if f.endswith(".main.so")]
print(json.dumps(dict(
    code=code, kernels=kernels, load_error=load_error, libraries=libraries, refusal=refusal,
    options={device: options(device) for device in ("accel", "cuda")},
)))
"""
)

# AOTInductor: an exported accel:1 model (parameters: the package's constants;
# addmm: a fallback; a user's Triton kernel through triton_op; a dynamic batch)
# packaged by aoti_compile_and_package.
_AOT = (
    _CUDA_RUNTIME
    + """
import zipfile
import triton
import triton.language as tl
from torch import nn
from torch.library import triton_op, wrap_triton


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) + tl.load(y_ptr + offsets, mask=mask), mask=mask)


@triton_op("accel_test::add", mutates_args={})
def user_add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    wrap_triton(add_kernel)[(triton.cdiv(x.numel(), 32),)](x, y, out, x.numel(), BLOCK=32)
    return out


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.mlp = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.LayerNorm(32), nn.Linear(32, 8))

    def forward(self, x):
        y = self.mlp(x)
        return user_add(y.sin(), y)


torch.manual_seed(0)
model = Model().to("accel:1")
batch = torch.export.Dim("batch", min=2, max=64)
program = torch.export.export(model, (torch.randn(4, 16, device="accel:1"),), dynamic_shapes=({0: batch},))
try:
    torch._inductor.aoti_compile_and_package(program, inductor_configs={"aot_inductor.emit_multi_arch_kernel": True})
    multi_arch_refusal = None
except Exception as error:
    multi_arch_refusal = str(error).splitlines()[0]
package = torch._inductor.aoti_compile_and_package(program, package_path=os.environ["PACKAGE"])
with zipfile.ZipFile(package) as archive:
    names = archive.namelist()
    wrapper = next(n for n in names if n.endswith(".wrapper.cpp"))
    metadata = next(n for n in names if n.endswith(".wrapper_metadata.json"))
    library = next(n for n in names if n.endswith(".so"))
    archive.extract(library, os.environ["UNPACKED"])
    print(json.dumps(dict(
        names=names, code=archive.read(wrapper).decode(), metadata=json.loads(archive.read(metadata)),
        library=os.path.join(os.environ["UNPACKED"], library), kernels=compiled_kernels(),
        multi_arch_refusal=multi_arch_refusal,
    )))
"""
)

EM_CUDA = 190  # an ELF file's e_machine for NVIDIA CUDA


def run_mocked(script, tmp_path, **env):
    # What compiles the wrapper as for cuda: a CUDA build of torch and a CUDA toolkit
    # (the build machine's, as for torch_accel's own CUDA sources), no GPU.
    assert torch.version.cuda and CUDA_HOME, f"needs a CUDA build of torch and a CUDA toolkit (CUDA_HOME={CUDA_HOME})"
    # From a file: triton.jit reads its kernels' source.
    path = tmp_path / "script.py"
    path.write_text(script)
    proc = run_python(
        f"exec(compile(open({str(path)!r}).read(), {str(path)!r}, 'exec'))",
        env={
            "TORCH_ACCEL_RUNTIME": "host",
            "TORCH_ACCEL_HOST_DEVICES": "2",
            # a fresh cache: the C++ wrapper compiles in this run
            "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor"),
            **env,
        },
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-5000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def undefined_symbols(library):
    return set(subprocess.run(["nm", "-D", "--undefined-only", library], capture_output=True, text=True, check=True).stdout.split())


def launched_kernels(code):
    """The kernels the C++ wrapper launches (each through a call_<kernel> function it defines)."""
    return set(re.findall(r"^static inline void call_(\w+)\($", code, re.M))


def kernel_launches(code):
    """The arguments of each kernel launch in the wrapper's code."""
    return re.findall(r"^\s*call_\w+\((.*)\);$", code, re.M)


def assert_kernels_compiled_for_sm90(kernels, code):
    # Inductor's own compile of each kernel the wrapper launches (none by hand):
    # a CUDA binary for sm_90, the H100 it was told of.
    launched = launched_kernels(code)
    assert len(launched) >= 2 and launched <= set(kernels)
    for name in launched:
        assert kernels[name]["elf_machine"] == EM_CUDA, name
        assert kernels[name]["sm"] == 90, kernels[name]


def assert_accel_buffers_and_shim(code, device_index):
    # Buffers on accel (PrivateUse1 in the C ABI) of the graph's device;
    # operators Inductor does not generate go through accel's C shim, not cuda's.
    allocations = re.findall(r"aoti_torch_empty_strided\(.*?, (cached_torch_device_type_\w+), *([\w>-]+), ", code)
    assert allocations and set(allocations) == {("cached_torch_device_type_privateuse1", device_index)}
    assert re.search(r"aoti_torch_accel_(mm|addmm)_out\(", code) and "aoti_torch_cuda_" not in code


def test_cpp_wrapper_on_the_cuda_runtime_generates_and_compiles(tmp_path):
    result = run_mocked(_JIT, tmp_path)
    code = result["code"]
    assert_kernels_compiled_for_sm90(result["kernels"], code)
    # accel's wrapper header (which includes cuda's launch code: USE_CUDA)
    assert re.search(r'#include ".*/torch_accel/inductor/cpp_wrapper\.h"', code)
    assert_accel_buffers_and_shim(code, "1")
    # accel:1 is cuda:1 on the CUDA runtime: CUDA's guard sets both.
    assert "AOTICudaGuard device_guard(1);" in code
    # Each kernel, loaded from the cubin Inductor compiled, is launched on the
    # current stream of device 1 (CUDA's, which is accel's there).
    for name, kernel in result["kernels"].items():
        assert f'loadKernel("{kernel["cubin"]}", "{name}"' in code
    assert "AOTI_TORCH_ERROR_CODE_CHECK(aoti_torch_get_current_cuda_stream(1, (void**)&stream1));" in code
    launches = kernel_launches(code)
    assert len(launches) >= 2 and all(args.endswith(", 1, stream1") for args in launches)
    # Compiled (with cuda's options) and linked; loading it is the GPU's part.
    assert "device_type='accel'" in code or 'device_type="accel"' in code
    assert result["options"]["accel"] == result["options"]["cuda"]
    assert " USE_CUDA" in result["options"]["accel"] and re.search(r"-I\S*cuda\S*/include", result["options"]["accel"])
    assert len(result["libraries"]) == 1
    # Loaded where a CUDA driver is installed; else refused for want of it, and only for that.
    assert result["load_error"] in (None, "ImportError: libcuda.so.1: cannot open shared object file: No such file or directory")
    missing = undefined_symbols(result["libraries"][0])
    # Without compile-time autotuning nothing compiles accel's kernels (Inductor's
    # first pass that would is for cuda and xpu only): refused, rather than a
    # wrapper that loads another graph's kernels of the same names.
    assert result["refusal"] == (
        "RuntimeError: accel: cpp_wrapper and AOTInductor compile accel's Triton kernels while the C++ wrapper is generated, "
        "but torch._inductor.config.triton.autotune_at_compile_time is False; leave it unset or set it True"
    )
    assert {"aoti_torch_accel_mm_out", "aoti_torch_get_current_cuda_stream", "cuLaunchKernel"} <= missing


def test_aot_inductor_on_the_cuda_runtime_packages_and_compiles(tmp_path):
    result = run_mocked(_AOT, tmp_path, PACKAGE=str(tmp_path / "model.pt2"), UNPACKED=str(tmp_path / "unpacked"))
    code = result["code"]
    assert_kernels_compiled_for_sm90(result["kernels"], code)
    # The package is accel's (loaded by accel's model runner), for the GPU it was compiled on.
    assert result["metadata"]["AOTI_DEVICE_KEY"] == "accel"
    assert result["metadata"]["AOTI_COMPUTE_CAPABILITY"] == "90"
    assert re.search(r'#include ".*/torch_accel/inductor/aoti_include\.h"', code)
    # Its kernels travel in the package as the cubins Inductor compiled.
    packaged = {name.rsplit("/", 1)[-1] for name in result["names"] if name.endswith(".cubin")}
    launched = launched_kernels(code)
    assert "add_kernel_0" in launched  # the user's kernel, with Inductor's
    assert packaged == {result["kernels"][name]["cubin"].rsplit("/", 1)[-1] for name in launched}
    # Buffers on the model's accel device (the runner creates it for accel:N's cuda:N).
    assert_accel_buffers_and_shim(code, "this->device_idx_")
    # Constants are described as the target's (PyTorch's model runtime loads
    # them on cuda) and the model reads each through an accel view.
    constants = re.findall(r"constants_info_\[(\d+)\]\.device_type = (\w+);", code)
    assert len(constants) >= 4 and {device for _, device in constants} == {"cached_torch_device_type_cuda"}
    views = re.findall(r"auto (\w+) = accel_constant_view\(constants_->at\((\d+)\)\);", code)
    assert sorted(index for _, index in views) == sorted(index for index, _ in constants)
    assert "auto& constant_" not in code
    # Kernels run on the stream the run is given (AccelAOTIModelRunner passes
    # accel's current stream), with CUDA's guard of the model's device.
    assert "AOTICudaStreamGuard stream_guard(stream, this->device_idx_);" in code
    launches = kernel_launches(code)
    assert launches and all(args.endswith(", this->device_idx_, stream, kernels, this->cubin_dir_") for args in launches)
    # Compiled with cuda's options and linked: the calls into accel's shim, CUDA's driver and runtime.
    compile_command = re.search(r"^// Compile cmd\n// (.*)$", code, re.M).group(1)
    assert " USE_CUDA" in compile_command and re.search(r"-I\S*cuda\S*/include", compile_command)
    missing = undefined_symbols(result["library"])
    assert {"aoti_torch_accel_addmm_out", "aoti_torch_accel_constant_view", "aoti_torch_create_cuda_stream_guard", "cuLaunchKernel"} <= missing
    # Multi-arch kernels are built for cuda's packages only: refused clearly.
    assert result["multi_arch_refusal"] == (
        "RuntimeError: accel: torch._inductor.config.aot_inductor.emit_multi_arch_kernel is not supported for "
        "accel (PyTorch builds multi-arch kernels for packages compiled for cuda only); leave it off: the package "
        "holds the kernels compiled for this GPU"
    )
