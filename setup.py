"""Builds accel's native code: its core torch_accel/lib/libtorch_accel.so (csrc/ but csrc/python,
and accelrt; no Python), the Python bindings torch_accel._C over it, and the AOTInductor C shim
torch_accel/lib/libaccel_aoti_shim.so.

The CUDA runtime (csrc/runtime/cuda) is compiled and linked whenever the installed torch
is a CUDA build and a CUDA toolkit is found, so that machines without a GPU still prove
it compiles. The host runtime (csrc/runtime/host over third_party/accelrt) is always built.

The distribution declares the ``torch.backends`` entry point that makes ``import torch`` load
accel (torch_accel/_autoload.py). ``make install`` installs it editable with
TORCH_ACCEL_SKIP_EXTENSION=1 (metadata only: pip would compile in a throw-away directory) and
then compiles the extension in place with ``build_ext --inplace``, whose builds are incremental.

accel's c10d backend (csrc/distributed) is built whenever the installed torch has
torch.distributed; it needs no NCCL or Gloo headers (see csrc/distributed/AccelBackend.h).

TORCH_ACCEL_SANITIZE=address compiles and links the core (accelrt included) and _C with
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


def _native_flags(with_cuda, with_distributed, sanitize):
    """The compiler and linker flags of accel's core and of its bindings."""
    cxx_flags = ["-O2", "-std=c++17", "-Wall", "-Wno-unused-parameter", "-Wno-interference-size"]
    if with_cuda:
        cxx_flags.append("-DTORCH_ACCEL_WITH_CUDA=1")
    if with_distributed:
        cxx_flags.append("-DTORCH_ACCEL_WITH_DISTRIBUTED=1")
    link_flags = []
    if sanitize:
        # -O1 and frame pointers: stack traces in the reports name every frame.
        cxx_flags += [*sanitize, "-O1", "-g", "-fno-omit-frame-pointer"]
        link_flags += sanitize
    return cxx_flags, link_flags


# accel's native core (torch_accel/lib/libtorch_accel.so): all of csrc/ but its Python bindings
# (csrc/python/) and the AOTInductor shim's sources, with accelrt, linked against libtorch and
# c10 only, never libtorch_python, so that a C++ program without Python can link it
# (docs/design.md, "Layers and data flow"). Its symbols keep the default visibility: they are
# the interface the bindings (_C) and programs link to. In torch_accel/lib/ with the shim: no
# Python package, so that pkgutil does not take the library for a module of torch_accel.
_CORE = "torch_accel.lib.libtorch_accel"


def _core():
    with_cuda = _with_cuda()
    with_distributed = torch.distributed.is_available()
    sources = [
        s
        for s in _sources("csrc/**/*.cpp")
        if not s.startswith(("csrc/python/", "csrc/inductor/shim/"))  # _C's, the AOTInductor shim's (_aoti_shim)
        and (with_cuda or not s.startswith("csrc/runtime/cuda/"))
        and (with_distributed or not s.startswith(_DISTRIBUTED_SOURCES))
    ]
    sources += _sources("third_party/accelrt/src/*.cpp")
    cxx_flags, link_flags = _native_flags(with_cuda, with_distributed, _sanitize())
    # Every symbol the core uses must come from the libraries it links: a reference left to
    # whoever loads it (Python's, libtorch_python's) fails here rather than in a program.
    link_flags.append("-Wl,--no-undefined")
    kwargs = dict(
        name=_CORE,
        sources=sources,
        include_dirs=[ROOT, os.path.join(ROOT, "third_party/accelrt/include")],
        extra_compile_args={"cxx": cxx_flags},
        extra_link_args=link_flags,
    )
    extension = CUDAExtension(**kwargs) if with_cuda else CppExtension(**kwargs)
    extension.libraries = [library for library in extension.libraries if library != "torch_python"]
    return extension


# torch_accel._C: the Python bindings (csrc/python/) over the core, which it links; the core is
# found in lib/ next to it ($ORIGIN/lib). -fvisibility=hidden: the module exports only its init function.
def _bindings():
    with_distributed = torch.distributed.is_available()
    sources = [s for s in _sources("csrc/python/*.cpp") if with_distributed or not s.startswith(_DISTRIBUTED_SOURCES)]
    cxx_flags, link_flags = _native_flags(_with_cuda(), with_distributed, _sanitize())
    return CppExtension(
        name="torch_accel._C",
        sources=sources,
        include_dirs=[ROOT],
        libraries=["torch_accel"],  # its folder: _BuildExtension.build_extension
        extra_compile_args={"cxx": [*cxx_flags, "-fvisibility=hidden"]},
        extra_link_args=[*link_flags, "-Wl,-rpath,$ORIGIN/lib"],
    )


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


# The plain shared libraries among the extensions (lib*.so, not Python modules).
_LIBRARIES = (_CORE, _AOTI_SHIM)


class _BuildExtension(BuildExtension.with_options(use_ninja=True)):
    def run(self):
        # An in-place build copies the core and the shim into torch_accel/lib/, which git does not keep.
        os.makedirs(os.path.join(ROOT, "torch_accel", "lib"), exist_ok=True)
        super().run()

    def get_ext_filename(self, ext_name):
        # (distutils asks both for the full name and for its last component alone.)
        *package, name = ext_name.split(".")
        if name in (library.split(".")[-1] for library in _LIBRARIES):
            return os.path.join(*package, name + ".so")
        return super().get_ext_filename(ext_name)

    def build_extension(self, ext):
        if ext.name == "torch_accel._C":
            # The core, built before it (in place or into --build-lib).
            ext.library_dirs.append(os.path.dirname(self.get_ext_fullpath(_CORE)))
        super().build_extension(ext)


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
    ext_modules=[] if _skip_extension() else [_aoti_shim(), _core(), _bindings()],
    cmdclass={"build_ext": _BuildExtension},
    python_requires=">=3.10",
    install_requires=["torch==2.11.0"],
    entry_points={"torch.backends": ["accel = torch_accel._autoload:load"]},
)
