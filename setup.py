"""Builds torch_accel._C.

The CUDA runtime (csrc/runtime/cuda) is compiled and linked whenever the installed torch
is a CUDA build and a CUDA toolkit is found, so that machines without a GPU still prove
it compiles. The host runtime (csrc/runtime/host over third_party/accelrt) is always built.

The distribution declares the ``torch.backends`` entry point that makes ``import torch`` load
accel (torch_accel/_autoload.py). ``make install`` installs it editable with
TORCH_ACCEL_SKIP_EXTENSION=1 (metadata only: pip would compile in a throw-away directory) and
then compiles the extension in place with ``build_ext --inplace``, whose builds are incremental.

accel's c10d backend (csrc/distributed) is built whenever the installed torch has
torch.distributed; it needs no NCCL or Gloo headers (see csrc/distributed/AccelBackend.h).

TORCH_ACCEL_SANITIZE=address compiles and links the extension (accelrt included) with
AddressSanitizer and UndefinedBehaviorSanitizer, every finding fatal; TORCH_ACCEL_SANITIZE=thread
with ThreadSanitizer. ``make asan`` and ``make tsan`` build it that way into build/asan/ and
build/tsan/ (never in place) and run tests with the sanitizer runtime preloaded
(docs/sanitizers.md).
"""

import glob
import os

# Building torch_accel must not import torch_accel: with the package installed
# editable, torch's backend autoload (the torch.backends entry point) would
# import it before its extension exists.
os.environ["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"

import torch  # noqa: E402
from setuptools import Extension, find_packages, setup
from torch.utils.cpp_extension import CUDA_HOME, BuildExtension, CppExtension, CUDAExtension, include_paths, library_paths

ROOT = os.path.dirname(os.path.abspath(__file__))


def _sources(pattern):
    return sorted(os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(ROOT, pattern), recursive=True))


def _with_cuda():
    flag = os.environ.get("TORCH_ACCEL_BUILD_CUDA") or "auto"
    if flag not in ("auto", "0", "1"):
        raise ValueError(f"TORCH_ACCEL_BUILD_CUDA must be auto, 0 or 1, not {flag!r}")
    available = torch.version.cuda is not None and CUDA_HOME is not None
    if flag == "1" and not available:
        raise RuntimeError(
            "TORCH_ACCEL_BUILD_CUDA=1 but the installed torch has no CUDA or no CUDA toolkit was found "
            f"(torch.version.cuda={torch.version.cuda}, CUDA_HOME={CUDA_HOME})"
        )
    return available if flag == "auto" else flag == "1"


# accel's c10d backend: sources compiled only against a torch with torch.distributed.
_DISTRIBUTED_SOURCES = ("csrc/distributed/", "csrc/python/Distributed.cpp")


# The sanitizers of TORCH_ACCEL_SANITIZE. address: AddressSanitizer and
# UndefinedBehaviorSanitizer, where -fno-sanitize-recover makes the first undefined
# behaviour abort the process, so a finding fails the test run. thread:
# ThreadSanitizer (its reports fail the run through make tsan's report check).
_SANITIZER_FLAGS = {
    "0": [],
    "address": ["-fsanitize=address,undefined", "-fno-sanitize-recover=all"],
    "thread": ["-fsanitize=thread"],
}


def _sanitize():
    flag = os.environ.get("TORCH_ACCEL_SANITIZE") or "0"
    if flag not in _SANITIZER_FLAGS:
        raise ValueError(f"TORCH_ACCEL_SANITIZE must be 0, address or thread, not {flag!r}")
    return _SANITIZER_FLAGS[flag]


def _extension():
    with_cuda = _with_cuda()
    sanitize = _sanitize()
    with_distributed = torch.distributed.is_available()
    sources = [
        s
        for s in _sources("csrc/**/*.cpp")
        if (with_cuda or not s.startswith("csrc/runtime/cuda/"))
        and (with_distributed or not s.startswith(_DISTRIBUTED_SOURCES))
        and not s.startswith("csrc/inductor/shim/")  # the AOTInductor shim's (_aoti_shim)
    ]
    sources += _sources("third_party/accelrt/src/*.cpp")
    cxx_flags = ["-O2", "-std=c++17", "-Wall", "-Wno-unused-parameter", "-Wno-interference-size", "-fvisibility=hidden"]
    if with_cuda:
        cxx_flags.append("-DTORCH_ACCEL_WITH_CUDA=1")
    if with_distributed:
        cxx_flags.append("-DTORCH_ACCEL_WITH_DISTRIBUTED=1")
    link_flags = []
    if sanitize:
        # -O1 and frame pointers: stack traces in the reports name every frame.
        cxx_flags += [*sanitize, "-O1", "-g", "-fno-omit-frame-pointer"]
        link_flags += sanitize
    kwargs = dict(
        name="torch_accel._C",
        sources=sources,
        include_dirs=[ROOT, os.path.join(ROOT, "third_party/accelrt/include")],
        extra_compile_args={"cxx": cxx_flags},
        extra_link_args=link_flags,
    )
    return CUDAExtension(**kwargs) if with_cuda else CppExtension(**kwargs)


# accel's AOTInductor C shim (tools/gen_aoti_c_shim.py): a library of its own, since code that
# cpp_wrapper and AOTInductor generate calls it, also in programs without Python (docs/compile.md).
# In torch_accel/lib/, which is no Python package: the package's modules are all importable.
_AOTI_SHIM = "torch_accel.lib.libaccel_aoti_shim"
AOTI_SHIM_HEADER = os.path.join(ROOT, "torch_accel", "include", "torch_accel", "inductor", "c_shim_accel.h")


def _aoti_shim():
    """Generates accel's C shim for the installed PyTorch and declares the library it is built into."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("gen_aoti_c_shim", os.path.join(ROOT, "tools", "gen_aoti_c_shim.py"))
    generator = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(generator)
    source = os.path.join(ROOT, "build", "generated", "c_shim_accel.cpp")
    generator.main(AOTI_SHIM_HEADER, source)
    # Only libtorch's and c10's libraries: not torch_python (CppExtension's), so that
    # a program without Python can load it.
    return Extension(
        _AOTI_SHIM,
        sources=[os.path.relpath(source, ROOT), *_sources("csrc/inductor/shim/*.cpp")],
        include_dirs=[*include_paths(), os.path.join(ROOT, "torch_accel", "include")],
        library_dirs=library_paths(),
        libraries=["c10", "torch_cpu"],
        extra_compile_args={"cxx": ["-O2", "-std=c++17", "-Wno-unused-parameter"]},
        language="c++",
    )


class _BuildExtension(BuildExtension.with_options(use_ninja=True)):
    def run(self):
        # An in-place build copies the shim into torch_accel/lib/, which git does not keep.
        os.makedirs(os.path.join(ROOT, "torch_accel", "lib"), exist_ok=True)
        super().run()

    def get_ext_filename(self, ext_name):
        # The shim is a plain shared library (libaccel_aoti_shim.so), not a Python module.
        # (distutils asks both for the full name and for its last component alone.)
        *package, name = ext_name.split(".")
        if name == _AOTI_SHIM.split(".")[-1]:
            return os.path.join(*package, name + ".so")
        return super().get_ext_filename(ext_name)


def _skip_extension():
    flag = os.environ.get("TORCH_ACCEL_SKIP_EXTENSION") or "0"
    if flag not in ("0", "1"):
        raise ValueError(f"TORCH_ACCEL_SKIP_EXTENSION must be 0 or 1, not {flag!r}")
    return flag == "1"


setup(
    name="torch-accel",
    version="0.1.0",
    description="PrivateUse1 backend 'accel' for PyTorch, backed by CUDA or by an emulated host runtime",
    packages=find_packages(include=["torch_accel", "torch_accel.*"]),
    # The public header of users' extensions (torch_accel.utils.cpp_extension.include_paths()).
    package_data={"torch_accel": ["include/torch_accel/*.h", "include/torch_accel/inductor/*.h"]},
    ext_modules=[] if _skip_extension() else [_aoti_shim(), _extension()],
    cmdclass={"build_ext": _BuildExtension},
    python_requires=">=3.10",
    install_requires=["torch==2.11.0"],
    entry_points={"torch.backends": ["accel = torch_accel._autoload:load"]},
)
