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
runtime only. (docs/compile.md#user-triton-kernels)
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


@pytest.mark.skipif(RUNTIME != "cuda", reason="Triton compiles and launches on the CUDA runtime's GPU")
def test_launch_runs_on_accels_current_stream_and_device(two_devices, tmp_path):
    proc = _run(
        _KERNEL
        + textwrap.dedent(
            """
            from triton import knobs
            launches = []
            knobs.runtime.launch_enter_hook = lambda metadata: launches.append(metadata.get()["stream"])
            x = torch.randn(100, device="accel:1")
            side = torch.accel.Stream("accel:1")
            with torch.accel.device(1), torch.accel.stream(side):
                out = add(x, x)
                current = torch.accel.current_stream().accel_stream
            side.synchronize()
            print(launches == [current], current == side.accel_stream, torch.equal(out, x + x))
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
