"""A C++ program runs an AOTInductor package on accel without Python (examples/aoti).

The program (build/examples/aoti/accel_aoti_run PACKAGE INPUTS OUTPUTS) links accel's
core, torch_accel/lib/libtorch_accel.so, and loads the package with PyTorch's C++ package
loader; `make example-aoti` builds it, once per session here (ccache makes a rebuild
cheap). Each run's every loaded library is listed by the dynamic linker (LD_DEBUG=files):
none may be Python's. An MLP exported on accel with a dynamic batch runs in the program at
two batch sizes; its outputs equal the same package's run from Python bit for bit, and
eager accel's within rounding. See docs/compile.md, "A C++ program without Python".
"""

import copy
import os
import re
import subprocess

import pytest
import torch
from torch import nn

from test_aot_inductor import MLP

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROGRAM = os.path.join(ROOT, "build", "examples", "aoti", "accel_aoti_run")


@pytest.fixture(scope="module")
def program() -> str:
    """The program, built (or found up to date) by `make example-aoti`."""
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join(["/usr/lib/ccache", env.get("PATH", "")])
    proc = subprocess.run(
        ["make", "--no-print-directory", "-C", ROOT, "example-aoti"], env=env, capture_output=True, text=True, timeout=1200
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    return PROGRAM


@pytest.fixture(scope="module")
def model() -> nn.Module:
    torch.manual_seed(0)
    return MLP().eval()


@pytest.fixture(scope="module")
def package(model, tmp_path_factory) -> str:
    """``model`` exported on accel with a dynamic batch, compiled into a package."""
    path = tmp_path_factory.mktemp("aoti-program") / "mlp.pt2"
    batch = torch.export.Dim("batch", min=2, max=64)
    exported = torch.export.export(
        copy.deepcopy(model).to("accel"), (torch.randn(4, 16).to("accel"),), dynamic_shapes=({0: batch},)
    )
    return torch._inductor.aoti_compile_and_package(exported, package_path=str(path))


def run_program(program: str, package: str, inputs: list[torch.Tensor], folder, env: dict | None = None):
    """Runs the program on ``inputs``; returns the finished process, its outputs (None if it
    failed) and the paths of the libraries it loaded, from the dynamic linker's own log."""
    inputs_path, outputs_path, log = folder / "inputs.pt", folder / "outputs.pt", folder / "ld.log"
    torch.save(inputs, inputs_path)
    # The same number of threads as this process's kernels use: ATen's CPU kernels (and
    # MKL's) may split work by thread count.
    full_env = dict(os.environ, OMP_NUM_THREADS=str(torch.get_num_threads()), LD_DEBUG="files", LD_DEBUG_OUTPUT=str(log))
    full_env.update(env or {})
    proc = subprocess.run(
        [program, package, str(inputs_path), str(outputs_path)], env=full_env, capture_output=True, text=True, timeout=300
    )
    # LD_DEBUG_OUTPUT appends the process id to the file name.
    [log] = folder.glob("ld.log.*")
    loaded = set(re.findall(r"calling init: (\S+)", log.read_text()))
    log.unlink()
    outputs = torch.load(outputs_path) if proc.returncode == 0 else None
    return proc, outputs, loaded


def test_program_runs_the_package_without_python(program, package, tmp_path):
    proc, outputs, loaded = run_program(program, package, [torch.randn(4, 16)], tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert len(outputs) == 1 and outputs[0].shape == (4, 4)
    names = {os.path.basename(path) for path in loaded}
    # accel's core, the C shim its runner loads, and the model's own library (extracted
    # from the package under data/aotinductor/) ...
    assert {"libtorch_accel.so", "libaccel_aoti_shim.so"} <= names
    assert any("/data/aotinductor/" in path and path.endswith(".so") for path in loaded)
    # ... and nothing of Python's, in the program or in what it loaded.
    assert not [name for name in names if name.startswith(("libpython", "libtorch_python")) or "cpython" in name]


@pytest.mark.parametrize("batch", [4, 9])  # the batch exported with, and another within the dynamic range
def test_program_output_equals_python_and_eager_accel(program, package, model, batch, tmp_path):
    torch.manual_seed(batch)
    x = torch.randn(batch, 16)
    _, [result], _ = run_program(program, package, [x], tmp_path)
    with torch.no_grad():
        from_python = torch._inductor.aoti_load_package(package)(x.to("accel")).cpu()
        eager = copy.deepcopy(model).to("accel")(x.to("accel")).cpu()
    assert result.shape == (batch, 4)
    # The same model library on the same inputs, with as many threads: the same bits.
    torch.testing.assert_close(result, from_python, rtol=0, atol=0)
    # Within rounding, not bitwise: Inductor fuses softmax into one kernel whose
    # summation order is not eager softmax's (as test_aot_inductor.py's comparison).
    torch.testing.assert_close(result, eager, rtol=1e-5, atol=1e-6)


def test_program_reports_no_accel_device(program, package, tmp_path):
    proc, _, _ = run_program(
        program, package, [torch.randn(4, 16)], tmp_path, env={"TORCH_ACCEL_RUNTIME": "host", "TORCH_ACCEL_HOST_DEVICES": "0"}
    )
    assert proc.returncode == 1
    assert "No accel device is available" in proc.stderr


def test_program_reports_an_input_outside_the_dynamic_range(program, package, tmp_path):
    # The model checks its inputs with AOTI_RUNTIME_CHECK_INPUTS=1, as for cpu and cuda.
    proc, _, _ = run_program(program, package, [torch.randn(65, 16)], tmp_path, env={"AOTI_RUNTIME_CHECK_INPUTS": "1"})
    assert proc.returncode == 1
    assert "API call failed" in proc.stderr
