"""The compiler flags (--cflags) or linker flags (--libs) of a C++ program that links accel's core.

    python examples/aoti/torch_flags.py --cflags | --libs

Used by ``make example-aoti`` at build time; the program it builds runs without Python.

The program links accel's core (torch_accel/lib/libtorch_accel.so) and, before it, every library of
torch's that the core links (on a CUDA build of torch: its CUDA libraries too), with an rpath to
both folders. The core carries no rpath of its own (its folder and torch's are unrelated in an
editable install), so the program loads torch's libraries from torch's folder first; the core's
dependencies are then found loaded.
"""

import os
import subprocess
import sys

os.environ["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"  # only torch's paths are needed, not accel

import torch  # noqa: E402
from torch.utils.cpp_extension import include_paths, library_paths  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PACKAGE = os.path.join(ROOT, "torch_accel")
CORE = os.path.join(PACKAGE, "lib", "libtorch_accel.so")


def needed(library: str) -> list[str]:
    """The DT_NEEDED entries of ``library``."""
    dynamic = subprocess.run(["readelf", "--dynamic", library], capture_output=True, text=True, check=True).stdout
    return [line.split("[", 1)[1].rstrip("]") for line in dynamic.splitlines() if "(NEEDED)" in line]


def torch_libraries() -> list[str]:
    """The names (for -l) of torch's libraries that the core links, libtorch first."""
    [torch_lib] = library_paths()
    names = ["torch"]
    for soname in needed(CORE):
        name = soname.removeprefix("lib").removesuffix(".so")
        if os.path.exists(os.path.join(torch_lib, soname)) and name not in names:
            names.append(name)
    return names


def cflags() -> list[str]:
    abi = int(torch._C._GLIBCXX_USE_CXX11_ABI)
    return [f"-D_GLIBCXX_USE_CXX11_ABI={abi}", *(f"-I{path}" for path in [*include_paths(), os.path.join(PACKAGE, "include")])]


def libs() -> list[str]:
    if not os.path.exists(CORE):
        raise SystemExit(f"{CORE} is not built: run `make install`")
    [torch_lib] = library_paths()
    folders = [torch_lib, os.path.dirname(CORE)]
    # --no-as-needed: the program calls into few of torch's libraries itself, but must load them all.
    return [
        *(f"-L{folder}" for folder in folders),
        *(f"-Wl,-rpath,{folder}" for folder in folders),
        "-Wl,--no-as-needed",
        *(f"-l{name}" for name in torch_libraries()),
        "-ltorch_accel",
        "-Wl,--as-needed",
    ]


if __name__ == "__main__":
    if sys.argv[1:] not in (["--cflags"], ["--libs"]):
        raise SystemExit(__doc__)
    print(" ".join(cflags() if sys.argv[1] == "--cflags" else libs()))
