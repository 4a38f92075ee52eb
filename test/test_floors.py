"""tools/check_floors.py: csrc/'s floors include only the floors below them (docs/design.md)."""

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CHECKER = os.path.join(ROOT, "tools", "check_floors.py")


def _csrc(root, files: dict[str, str]) -> str:
    csrc = os.path.join(root, "csrc")
    for path, text in files.items():
        os.makedirs(os.path.dirname(os.path.join(csrc, path)), exist_ok=True)
        with open(os.path.join(csrc, path), "w") as f:
            f.write(text)
    return csrc


def _check(csrc=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, CHECKER, *([csrc] if csrc else [])], capture_output=True, text=True)


def test_csrc_passes_the_check():
    proc = _check()
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout == ""


def test_check_fails_on_an_include_of_a_floor_above(tmp_path):
    csrc = _csrc(tmp_path, {
        "core/AccelDevice.h": "#pragma once\n",
        "runtime/Runtime.h": "#include <csrc/core/AccelDevice.h>\n",
        "runtime/Hooks.cpp": "#include <csrc/runtime/Runtime.h>\n#include <csrc/aten/Fallback.h>\n",
        "aten/Fallback.h": "#include <csrc/runtime/Runtime.h>\n#include <csrc/graphs/Capture.h>\n",
        "graphs/Capture.h": "#include <csrc/aten/Fallback.h>\n",
    })  # fmt: skip
    proc = _check(csrc)
    assert proc.returncode == 1
    # Down and sideways (aten and graphs share a floor) pass; the one arrow up is found.
    assert proc.stdout.splitlines() == ["csrc/runtime/Hooks.cpp:2: includes csrc/aten/Fallback.h, a floor above its own"]


def test_check_keeps_the_runtimes_below_the_interface(tmp_path):
    csrc = _csrc(tmp_path, {
        "runtime/cuda/CudaRuntime.h": "#include <csrc/runtime/Runtime.h>\n",
        "runtime/host/HostRuntime.cpp": "#include <csrc/runtime/cuda/CudaRuntime.h>\n",
        "aten/Kernel.cpp": '#include "csrc/runtime/host/HostRuntime.h"\n',
    })  # fmt: skip
    proc = _check(csrc)
    assert proc.returncode == 1
    assert proc.stdout.splitlines() == [
        "csrc/aten/Kernel.cpp:1: includes csrc/runtime/host/HostRuntime.h, below the runtime interface "
        "(include csrc/runtime/Runtime.h)",
        "csrc/runtime/host/HostRuntime.cpp:1: includes csrc/runtime/cuda/CudaRuntime.h, below the runtime interface "
        "(include csrc/runtime/Runtime.h)",
    ]


def test_check_fails_on_a_folder_on_no_floor(tmp_path):
    csrc = _csrc(tmp_path, {"extras/Thing.cpp": "#include <csrc/core/AccelDevice.h>\n"})
    proc = _check(csrc)
    assert proc.returncode == 1
    assert proc.stdout.splitlines() == ["csrc/extras/ is on no floor (tools/check_floors.py FLOORS, docs/design.md)"]
