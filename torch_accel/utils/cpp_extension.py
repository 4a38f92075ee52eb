"""Building users' C++ and CUDA extensions for accel, as torch.utils.cpp_extension builds them for cuda.

An extension includes ``<torch_accel/extension.h>`` (accel's device type, device
guard, current stream, allocator and ``TORCH_ACCEL_LIBRARY_IMPL``; see
docs/extensions.md) and is built with :func:`AccelExtension` in its setup.py::

    from torch_accel.utils.cpp_extension import AccelExtension, BuildExtension
    setup(ext_modules=[AccelExtension("my_ops", ["my_ops.cpp"])], cmdclass={"build_ext": BuildExtension})

A C++ extension runs on the host runtime (accel memory is host memory); an
extension with CUDA sources (``.cu``) is built with nvcc for the CUDA runtime
and gets ``accel::getCurrentCUDAStream()``.
"""

import os
from collections.abc import Sequence

from torch.utils.cpp_extension import BuildExtension, CppExtension, CUDAExtension
from torch.utils.cpp_extension import include_paths as _torch_include_paths

__all__ = ["AccelExtension", "BuildExtension", "include_paths"]

_CUDA_SUFFIXES = (".cu", ".cuh")


def _accel_include() -> str:
    return os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "include")


def include_paths(cuda: bool = False) -> list[str]:
    r"""Return the include paths an accel extension needs: accel's public header and torch's (with CUDA's if ``cuda``).

    For builds that do not go through :func:`AccelExtension` (e.g.
    ``torch.utils.cpp_extension.load(..., extra_include_paths=include_paths())``).
    """
    return [_accel_include(), *_torch_include_paths(device_type="cuda" if cuda else "cpu")]


def AccelExtension(name: str, sources: Sequence[str], *args, cuda: bool | None = None, **kwargs):
    r"""Return a setuptools Extension for an accel C++ or CUDA extension.

    torch.utils.cpp_extension's ``CppExtension`` (``cuda=False``) or
    ``CUDAExtension`` (``cuda=True``; by default, when a source is a ``.cu``
    file) with accel's include path, and ``TORCH_ACCEL_EXTENSION_CUDA``
    defined for a CUDA extension (it enables ``accel::getCurrentCUDAStream``).
    The other arguments are those of CppExtension / CUDAExtension.
    """
    if isinstance(sources, str):
        raise TypeError("AccelExtension: sources must be a list of file names, not a str")
    sources = list(sources)
    if cuda is None:
        cuda = any(str(source).endswith(_CUDA_SUFFIXES) for source in sources)
    # CppExtension and CUDAExtension add torch's own include paths.
    kwargs["include_dirs"] = [_accel_include(), *kwargs.get("include_dirs", [])]
    if cuda:
        define = "-DTORCH_ACCEL_EXTENSION_CUDA=1"
        args_by_compiler = dict(kwargs.get("extra_compile_args") or {})
        if isinstance(kwargs.get("extra_compile_args"), list):
            args_by_compiler = {"cxx": list(kwargs["extra_compile_args"])}
        for compiler in ("cxx", "nvcc"):
            args_by_compiler[compiler] = [*args_by_compiler.get(compiler, []), define]
        kwargs["extra_compile_args"] = args_by_compiler
        return CUDAExtension(name, sources, *args, **kwargs)
    return CppExtension(name, sources, *args, **kwargs)
