"""Users' own kernels on accel (docs/extensions.md).

The example extension (examples/extension) is built once per session, as
`make example-extension` builds it: its C++ variant where accel memory is host
memory (host runtime), its CUDA variant otherwise (CUDA runtime, nvcc). Its
operators run on accel tensors with a kernel of their own for accel
(``scale_add``, through <torch_accel/extension.h>) or with only target kernels
(``square``, through torch_accel's fallback), and a ``torch.library`` operator
with only a target kernel runs through the fallback too; each runs on the
current accel stream of the device of its tensors.
"""

import importlib.util
import os
import subprocess
import sys

import pytest
import torch

import torch_accel
from torch_accel._core import capabilities
from torch_accel.utils.cpp_extension import AccelExtension, include_paths

from _comparison import assert_same_bits

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def example():
    """The example extension, built (incrementally, into build/) for the runtime that runs."""
    cuda = not capabilities().host_memory
    variant = "cuda" if cuda else "cpp"
    build = os.path.join(ROOT, "build", "examples", "extension", variant)
    env = dict(os.environ, ACCEL_EXAMPLE_CUDA="1" if cuda else "0", TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    env["PATH"] = os.pathsep.join(["/usr/lib/ccache", env.get("PATH", "")])
    proc = subprocess.run(
        [sys.executable, os.path.join(ROOT, "examples", "extension", "setup.py"), "-q", "build_ext",
         "--build-lib", build, "--build-temp", os.path.join(build, "temp")],
        env=env, capture_output=True, text=True, timeout=1200,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    [library] = [f for f in os.listdir(build) if f.startswith("accel_example") and f.endswith(".so")]
    spec = importlib.util.spec_from_file_location("accel_example", os.path.join(build, library))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.built_with_cuda == cuda
    return module


def _expected_launch(stream: torch.Stream, example) -> tuple[int, int, int, int]:
    # The CUDA variant launches on the stream's cudaStream_t; the C++ one runs
    # on the calling thread (0).
    handle = stream.native_handle
    return (stream.device_index, stream.stream_id, handle, handle if example.built_with_cuda else 0)


def test_include_paths_name_the_public_header():
    [accel_include, *torch_includes] = include_paths()
    assert os.path.isfile(os.path.join(accel_include, "torch_accel", "extension.h"))
    assert torch_includes == torch.utils.cpp_extension.include_paths()


def test_accel_extension_chooses_cuda_by_its_sources():
    cpp = AccelExtension("m", ["a.cpp"])
    assert cpp.include_dirs[0] == include_paths()[0]
    assert not any("TORCH_ACCEL_EXTENSION_CUDA" in a for a in cpp.extra_compile_args)
    cuda = AccelExtension("m", ["a.cpp", "b.cu"], extra_compile_args={"cxx": ["-O1"]})
    assert cuda.extra_compile_args["cxx"] == ["-O1", "-DTORCH_ACCEL_EXTENSION_CUDA=1"]
    assert "-DTORCH_ACCEL_EXTENSION_CUDA=1" in cuda.extra_compile_args["nvcc"]
    with pytest.raises(TypeError, match="list of file names"):
        AccelExtension("m", "a.cpp")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_own_accel_kernel_matches_its_target_kernel(example, target, dtype):
    x = torch.randn(1000, dtype=dtype)
    y = torch.randn(1000, dtype=dtype)
    out = torch.ops.accel_example.scale_add(x.to("accel"), y.to("accel"), 0.75)
    assert out.device == torch.device("accel", 0)
    expected = torch.ops.accel_example.scale_add(x.to(target), y.to(target), 0.75)
    if example.built_with_cuda:
        # The CUDA kernel (ops_cuda.cu) against the CPU loop: x + a * y may be
        # contracted into one fused multiply-add by nvcc, so within rounding.
        torch.testing.assert_close(out.cpu(), expected.cpu())
    else:
        # The same loop (scaleAddLoop) on the same bytes.
        assert_same_bits(out.to(target), expected, "accel_example::scale_add")


def test_own_accel_kernel_runs_on_the_current_stream_of_its_tensors_device(example, two_devices):
    x = torch.randn(64, device="accel:1")
    side = torch_accel.Stream(device=1)
    # side is accel:1's current stream while accel:0 is the current device.
    with torch_accel.stream(side), torch_accel.device(0):
        out = torch.ops.accel_example.scale_add(x, x, 2.0)
        assert torch_accel.current_device() == 0
    # The guard put the result on x's device and ran on that device's current stream.
    assert out.device == torch.device("accel", 1)
    assert example.last_launch() == _expected_launch(side, example)
    side.synchronize()
    torch.testing.assert_close(out.cpu(), x.cpu() * 3)


def test_own_accel_kernel_rejects_bad_arguments_clearly(example):
    x = torch.ones(4, device="accel")
    with pytest.raises(ValueError, match=r"y must be an accel tensor, got cpu"):
        torch.ops.accel_example.scale_add(x, torch.ones(4), 1.0)
    with pytest.raises(ValueError, match="same shape"):
        torch.ops.accel_example.scale_add(x, torch.ones(5, device="accel"), 1.0)


def test_extension_operator_with_target_kernels_only_runs_through_the_fallback(example, target):
    x = torch.randn(8, 8)
    side = torch_accel.Stream()
    with torch_accel.stream(side):
        out = torch.ops.accel_example.square(x.to("accel"))
    side.synchronize()
    assert out.device == torch.device("accel", 0)
    # The target's kernel ran (it records itself) on accel's current stream.
    assert example.last_launch() == _expected_launch(side, example)
    assert_same_bits(out.to(target), torch.ops.accel_example.square(x.to(target)), "accel_example::square")


def test_torch_library_operator_with_a_target_kernel_runs_through_the_fallback(target):
    seen = []

    @torch.library.custom_op("accel_test_ext::scaled_sin", mutates_args=(), device_types=target)
    def scaled_sin(x: torch.Tensor, scale: float) -> torch.Tensor:
        # The kernel gets target tensors over accel memory; the current accel
        # stream is the one the caller chose.
        seen.append((x.device.type, torch_accel.current_stream()))
        return torch.sin(x) * scale

    x = torch.randn(32)
    side = torch_accel.Stream()
    with torch_accel.stream(side):
        out = scaled_sin(x.to("accel"), 2.0)
    side.synchronize()
    assert out.device == torch.device("accel", 0)
    assert seen == [(target, side)]
    assert_same_bits(out.to(target), scaled_sin(x.to(target), 2.0), "accel_test_ext::scaled_sin")
