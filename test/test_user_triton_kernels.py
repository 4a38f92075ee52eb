"""Triton kernels written by users (@triton.jit, torch.library.triton_op) on accel tensors.

On the CUDA runtime accel's current device and stream are CUDA's current
device and stream (docs/runtimes.md), which is what Triton's launcher asks
for: a kernel launched on accel tensors runs on accel's current stream of
accel's current device, and a triton_op runs inside torch.compile, forward
and backward. On the host runtime the kernels run through Triton's
interpreter (TORCH_ACCEL_INDUCTOR=triton sets TRITON_INTERPRET=1), which
copies accel memory in and out with accel's ordinary copies, in the order of
accel's current stream; without the interpreter there is no Triton driver
and Triton refuses the launch. torch.library.wrap_triton refuses interpreted
kernels (PyTorch 2.11, on every device), so triton_op runs on the CUDA
runtime only. Where a launch goes on the CUDA runtime is checked on the host
too, up to the GPU: Triton's compiler and launcher with a mocked CUDA
driver. (docs/compile.md#user-triton-kernels)
"""

import textwrap

import pytest

import torch_accel
from conftest import run_python

pytest.importorskip("triton")
RUNTIME = torch_accel.runtime()


def _run(code, tmp_path, env=None):
    """Run ``code`` from a file in a fresh interpreter: triton.jit reads its kernels' source."""
    script = tmp_path / f"script{len(list(tmp_path.iterdir()))}.py"
    script.write_text(code)
    return run_python(f"exec(compile(open({str(script)!r}).read(), {str(script)!r}, 'exec'))", env=env, timeout=300)

_KERNEL = """
import torch, torch_accel
import triton
import triton.language as tl


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) + tl.load(y_ptr + offsets, mask=mask), mask=mask)


def add(x, y):
    out = torch.empty_like(x)
    add_kernel[(triton.cdiv(x.numel(), 32),)](x, y, out, x.numel(), BLOCK=32)
    return out
"""


@pytest.mark.skipif(RUNTIME != "host", reason="the host runtime's interpreter (the CUDA runtime: below)")
def test_interpreted_kernel_on_accel_tensors_in_stream_order(tmp_path):
    proc = _run(
        _KERNEL
        + textwrap.dedent(
            """
            torch.accel.set_device(1)
            x = torch.randn(100, device="accel:1")
            y = torch.randn(100, device="accel:1")
            print(torch.equal(add(x, y), x + y))
            # On a side stream: the launch reads what the stream wrote before it,
            # and what it writes is there for the stream's next op.
            side = torch.accel.Stream("accel:1")
            with torch.accel.stream(side):
                x.mul_(2)
                out = add(x, y)
                total = out.sum()
            side.synchronize()
            print(torch.equal(out, x + y), torch.equal(total, (x + y).sum()))
            """
        ),
        tmp_path,
        {"TORCH_ACCEL_INDUCTOR": "triton"},
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["True", "True", "True"]


@pytest.mark.skipif(RUNTIME != "host", reason="the host runtime's refusals")
def test_host_runtime_refusals(tmp_path):
    # Without the interpreter Triton has no driver for the host; wrap_triton
    # refuses interpreted kernels. Both are errors, never wrong results.
    proc = _run(
        _KERNEL
        + textwrap.dedent(
            """
            x = torch.ones(4, device="accel")
            try:
                add(x, x)
            except RuntimeError as error:
                print("no driver:", error)
            """
        ),
        tmp_path,
        {"TORCH_ACCEL_INDUCTOR": "cpp"},
    )
    assert proc.returncode == 0, proc.stderr
    assert "no driver: 0 active drivers" in proc.stdout
    proc = _run(
        _KERNEL
        + textwrap.dedent(
            """
            from torch.library import wrap_triton
            try:
                wrap_triton(add_kernel)
            except RuntimeError as error:
                print("refused:", error)
            """
        ),
        tmp_path,
        {"TORCH_ACCEL_INDUCTOR": "triton"},
    )
    assert proc.returncode == 0, proc.stderr
    assert "refused: wrap_triton only works on functions annotated with triton.jit" in proc.stdout


# Triton's launcher, compiled for an sm_90 GPU, on the host runtime: its CUDA
# driver with the two functions that choose where a launch goes answered as
# the CUDA runtime answers them, and a launcher that records instead of
# launching. On the CUDA runtime GPUDriver binds torch.cuda.current_device
# and torch._C._cuda_getCurrentRawStream, which answer accel's current device
# and that device's current stream (an accel stream IS a CUDA stream:
# docs/runtimes.md); here accel's own functions stand in for them. What
# this checks is Triton's side: the binding, and that each launch asks for
# the current device and its current stream then, not the tensors' device.
_MOCKED_CUDA_DRIVER = """
import torch_accel
from triton.backends.driver import GPUDriver
from triton.backends.nvidia.driver import CudaDriver
from triton.runtime import driver

bare = object.__new__(CudaDriver)
GPUDriver.__init__(bare)
print(bare.get_current_device is torch.cuda.current_device, bare.get_current_stream is torch._C._cuda_getCurrentRawStream)

launches = []


class RecordingLauncher:
    def __init__(self, src, metadata):
        pass

    def __call__(self, grid_x, grid_y, grid_z, stream, function, packed_metadata, launch_metadata, enter, exit, *args):
        launches.append((torch.accel.current_device(), stream))


class H100:
    def get_device_properties(self, device):
        return {"max_shared_mem": 232448, "multiprocessor_count": 132, "max_num_regs": 65536, "warpSize": 32}

    def load_binary(self, name, kernel, shared, device):
        return 1, 2, 32, 0, 1024  # module, function, registers, spills, most threads per block


class CudaRuntimeDriver(CudaDriver):
    def __init__(self):
        self.get_current_device = torch.accel.current_device
        self.get_current_stream = torch_accel._C._get_raw_stream
        self.set_current_device = torch.accel.set_device
        self.get_device_capability = lambda device=None: (9, 0)
        self.utils = H100()
        self.launcher_cls = RecordingLauncher


driver.set_active(CudaRuntimeDriver())
"""


@pytest.mark.skipif(RUNTIME != "host", reason="a mocked CUDA driver on the host runtime (the CUDA runtime: below)")
def test_launch_goes_to_the_current_stream_with_a_mocked_cuda_driver(two_devices, tmp_path):
    proc = _run(
        _KERNEL
        + _MOCKED_CUDA_DRIVER
        + textwrap.dedent(
            """
            x = torch.randn(100, device="accel:1")
            side = torch.accel.Stream("accel:1")
            add(x, x)  # accel:0 is current: there, on its current stream, as for cuda
            with torch.accel.device(1), torch.accel.stream(side):
                add(x, x)
            with torch.accel.device(1):
                add(x, x)
            expected = [
                (0, torch.accel.current_stream(0).accel_stream),
                (1, side.accel_stream),
                (1, torch.accel.current_stream(1).accel_stream),
            ]
            print(launches == expected, side.accel_stream != torch.accel.default_stream(1).accel_stream)
            """
        ),
        tmp_path,
        {"TORCH_ACCEL_INDUCTOR": "cpp"},  # no interpreter: Triton's compiler and launcher
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["True"] * 4


@pytest.mark.skipif(RUNTIME != "cuda", reason="Triton compiles and launches on the CUDA runtime's GPU")
def test_launch_runs_on_accels_current_stream_and_device(tmp_path):
    # The last device (accel:1 where there are two GPUs), made current for the
    # launch; the hook sees the stream handle Triton launched on.
    proc = _run(
        _KERNEL
        + textwrap.dedent(
            """
            from triton import knobs
            launches = []
            knobs.runtime.launch_enter_hook.add(
                lambda metadata: launches.append((torch.cuda.current_device(), metadata.get()["stream"]))
            )
            last = torch.accel.device_count() - 1
            x = torch.randn(100, device=f"accel:{last}")
            side = torch.accel.Stream(f"accel:{last}")
            with torch.accel.device(last), torch.accel.stream(side):
                out = add(x, x)
                on_side = (last, torch.accel.current_stream().accel_stream)
            with torch.accel.device(last):
                add(x, x)
                on_default = (last, torch.accel.current_stream().accel_stream)
            side.synchronize()
            print(launches == [on_side, on_default], on_side[1] == side.accel_stream != on_default[1])
            print(torch.equal(out, x + x))
            """
        ),
        tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["True", "True", "True"]


@pytest.mark.skipif(RUNTIME != "cuda", reason="wrap_triton refuses the interpreter's kernels (the host runtime)")
def test_triton_op_compiled_forward_and_backward(tmp_path):
    proc = _run(
        _KERNEL
        + textwrap.dedent(
            """
            from torch.library import triton_op, wrap_triton
            from torch._inductor.utils import run_and_get_code

            @triton_op("accel_test::add", mutates_args={})
            def user_add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
                out = torch.empty_like(x)
                wrap_triton(add_kernel)[(triton.cdiv(x.numel(), 32),)](x, y, out, x.numel(), BLOCK=32)
                return out

            user_add.register_autograd(lambda ctx, grad: (grad, grad))
            x = torch.randn(100, device="accel:1", requires_grad=True)

            def step():
                total = torch.compile(lambda t: user_add(t.sin(), t).sum())(x)
                total.backward()
                return total

            total, codes = run_and_get_code(step)
            expected = (x.detach().sin() + x.detach()).sum()
            print(torch.allclose(total, expected), torch.allclose(x.grad, x.detach().cos() + 1))
            print(any("add_kernel" in c and "get_raw_stream(1)" in c for c in codes))
            """
        ),
        tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["True", "True", "True"]
