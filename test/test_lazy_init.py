"""Lazy initialisation, queued calls, thread safety, fork safety and import cost.

Each test runs in a fresh interpreter: initialisation is process-wide state.
"""

import os

import pytest
import torch

from conftest import HAS_CUDA_RUNTIME, NO_CUDA_RUNTIME, run_python
from test_cuda_visible_devices import stub_libraries  # noqa: F401 (a fixture)


def check(code: str, **kwargs) -> str:
    proc = run_python(code, **kwargs)
    assert proc.returncode == 0, f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    return proc.stdout


def test_import_does_not_initialize():
    out = check(
        """
        import torch, torch_accel
        print(torch_accel.is_initialized())
        torch_accel.device_count(); torch_accel.is_available()
        print(torch_accel.is_initialized())
        torch.empty(1, device="accel")
        print(torch_accel.is_initialized())
        """
    )
    assert out.split() == ["False", "False", "True"]


def test_import_does_not_import_dynamo():
    out = check(
        """
        import sys, torch
        before = {m for m in sys.modules if m.startswith("torch._dynamo")}
        import torch_accel
        torch.empty(2, device="accel")
        after = {m for m in sys.modules if m.startswith("torch._dynamo")}
        print(sorted(after - before))
        """
    )
    assert out.strip() == "[]"


def test_init_is_idempotent_and_explicit():
    out = check(
        """
        import torch_accel
        torch_accel.init(); torch_accel.init()
        print(torch_accel.is_initialized())
        """
    )
    assert out.strip() == "True"


def test_queued_calls_run_in_order_at_init():
    out = check(
        """
        import torch_accel
        calls = []
        torch_accel._lazy_call(lambda: calls.append(1))
        torch_accel._lazy_call(lambda: calls.append(2))
        print(calls)
        torch_accel.current_device()
        print(calls)
        torch_accel._lazy_call(lambda: calls.append(3))  # after init: runs at once
        print(calls)
        """
    )
    assert out.split("\n")[:3] == ["[]", "[1, 2]", "[1, 2, 3]"]


def test_failing_queued_call_reports_origin():
    proc = run_python(
        """
        import torch_accel
        def queue_bad_call():
            torch_accel._lazy_call(lambda: 1 / 0)
        queue_bad_call()
        torch_accel.init()
        """
    )
    assert proc.returncode != 0
    assert "DeferredAccelCallError" in proc.stderr
    assert "division by zero" in proc.stderr
    assert "queue_bad_call" in proc.stderr  # the traceback of the place that queued it


def test_concurrent_init_from_threads():
    out = check(
        """
        import threading, torch_accel
        calls = []
        torch_accel._lazy_call(lambda: calls.append("once"))
        barrier = threading.Barrier(8)
        errors = []
        def worker():
            barrier.wait()
            try:
                torch_accel.init()
                torch_accel.current_device()
            except Exception as e:
                errors.append(e)
        threads = [threading.Thread(target=worker) for _ in range(8)]
        [t.start() for t in threads]; [t.join() for t in threads]
        print(calls, errors, torch_accel.is_initialized())
        """
    )
    assert out.strip() == "['once'] [] True"


def test_queued_call_may_use_accel_during_init():
    out = check(
        """
        import torch_accel
        seen = []
        torch_accel._lazy_call(lambda: seen.append(torch_accel.current_device()))
        torch_accel.init()
        print(seen)
        """
    )
    assert out.strip() == "[0]"


FORK_CHILD = """
import os, torch, torch_accel
{parent}
pid = os.fork()
if pid == 0:
    try:
        {child}
        os._exit(0)
    except RuntimeError as e:
        os._exit(3 if "Cannot re-initialize accel in forked subprocess" in str(e) else 4)
    except BaseException:
        os._exit(5)
_, status = os.waitpid(pid, 0)
print(os.waitstatus_to_exitcode(status))
"""


@pytest.mark.parametrize(
    "child",
    [
        'torch.empty(2, device="accel")',
        "torch_accel.current_device()",
        "torch_accel.Stream()",
        'torch.zeros(2).to("accel")',
    ],
)
def test_fork_after_init_poisons_child(child):
    out = check(FORK_CHILD.format(parent='torch.empty(1, device="accel")', child=child))
    assert out.strip() == "3"


# What a child forked after initialisation may do with an accel tensor it
# inherited. Each must raise CUDA's error with accel's name (on both runtimes:
# the check sits above the runtime interface), never run on the copy-on-write
# memory, never hang.
INHERITED_TENSOR_USES = [
    "x + 1",
    "x.cpu()",
    "print(x)",
    "x[0].item()",
    "x.fill_(1)",
    "x.sum()",
    "x.clone()",
    "torch.empty_like(x)",
    "x.new_zeros(2)",
    "x.to('accel:1')",
    "x.copy_(torch.zeros(4))",
    "torch.zeros(4).copy_(x)",
    "torch_accel.Stream()",
    "torch.Stream(device='accel')",
    "torch_accel.Event().record()",
    "torch_accel.current_stream()",
    "torch_accel.synchronize()",
    "torch_accel.Stream.priority_range()",
    "torch.accelerator.current_stream()",
    "torch.accelerator.synchronize()",
    "torch.randn(2, device='accel')",
    "torch.ones(4).pin_memory()",
]

FORK_EACH = """
import os, sys, time, torch, torch_accel
x = torch.arange(4.0, device="accel")
results = {}
for use in USES:
    pid = os.fork()
    if pid == 0:
        try:
            eval(use)
            os._exit(2)  # it ran
        except RuntimeError as e:
            message = str(e)
            named = "Cannot re-initialize accel in forked subprocess" in message and "'spawn' start method" in message
            os._exit(3 if named else 4)
        except BaseException:
            os._exit(5)
    deadline = time.monotonic() + 60
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            results[use] = os.waitstatus_to_exitcode(status)
            break
        if time.monotonic() > deadline:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            results[use] = "hung"
            break
        time.sleep(0.01)
print(results)
"""


def test_fork_child_touching_an_inherited_tensor_gets_a_clear_error(two_devices):
    out = check(f"USES = {INHERITED_TENSOR_USES!r}\n" + FORK_EACH, timeout=300)
    results = eval(out.strip().splitlines()[-1])
    assert results == {use: 3 for use in INHERITED_TENSOR_USES}


def test_fork_child_that_never_touches_accel_is_unaffected():
    # It may hold (and drop) inherited accel tensors, count devices and do CPU work.
    out = check(
        FORK_CHILD.format(
            parent='x = torch.arange(4.0, device="accel")',
            child="""assert torch_accel.device_count() > 0 and torch_accel.is_available()
        assert not torch_accel.is_initialized() and not torch_accel._initialized and torch_accel._is_in_bad_fork()
        assert torch.equal(torch.arange(4.0) * 2, torch.tensor([0.0, 2.0, 4.0, 6.0]))
        torch.manual_seed(0)  # seeds the CPU, skips accel (as cuda in a bad fork)
        assert not torch.ones(2).is_pinned()
        del x
        import gc; gc.collect()""",
        )
    )
    assert out.strip() == "0"


def test_fork_before_init_is_fine():
    out = check(
        FORK_CHILD.format(
            parent="torch_accel.device_count()",
            child='assert torch.equal(torch.arange(3).to("accel").cpu(), torch.arange(3))',
        )
    )
    assert out.strip() == "0"


def test_fork_child_still_reports_devices():
    out = check(
        FORK_CHILD.format(
            parent="torch_accel.init()",
            child="assert torch_accel.device_count() > 0 and not torch_accel.is_initialized()",
        )
    )
    assert out.strip() == "0"


# torch.<target> must know that accel started its runtime, as if it had
# started it itself: on the CUDA runtime torch.cuda is then initialised and a
# forked child that uses torch.cuda gets torch's own error; the host runtime's
# target (the CPU) has no such state, and torch.cuda is never touched.
TARGET_MODULE_AFTER_ACCEL = """
import os, torch, torch_accel
torch.ones(2, device="accel") + 1
print(torch.cuda.is_initialized())
pid = os.fork()
if pid == 0:
    try:
        torch.empty(1, device="cuda")
        os._exit(0)
    except RuntimeError as e:
        os._exit(3 if "Cannot re-initialize CUDA in forked subprocess" in str(e) else 4)
    except BaseException:
        os._exit(5)
_, status = os.waitpid(pid, 0)
print(os.waitstatus_to_exitcode(status))
"""


def test_target_module_knows_accel_initialised_its_runtime(target):
    out = check(TARGET_MODULE_AFTER_ACCEL).split()
    if target == "cuda":
        assert out == ["True", "3"]
    else:
        assert out[0] == "False"  # the child's torch.cuda then fails as it would anyway


def test_host_runtime_never_touches_torch_cuda():
    out = check(
        """
        import torch, torch_accel
        def refuse():
            raise AssertionError("torch.cuda._lazy_init called")
        torch.cuda._lazy_init = refuse
        torch_accel.init()
        torch.ones(2, device="accel") + 1
        print(torch_accel.runtime(), torch.cuda.is_initialized())
        """,
        env={"TORCH_ACCEL_RUNTIME": "host"},
    )
    assert out.split() == ["host", "False"]


@pytest.mark.skipif(not HAS_CUDA_RUNTIME, reason=NO_CUDA_RUNTIME)
def test_cuda_runtime_initialisation_calls_torch_cudas_own(stub_libraries):
    # A mocked CUDA target (stub NVML: one GPU; the stub driver has none):
    # accel's lazy initialisation goes through torch.cuda._lazy_init before it
    # starts CUDA itself, which the stub driver would refuse anyway.
    from test_cuda_visible_devices import UUIDS

    env = {
        "LD_LIBRARY_PATH": os.pathsep.join(filter(None, [stub_libraries, os.environ.get("LD_LIBRARY_PATH")])),
        "STUB_NVML_UUIDS": UUIDS[0],
        "CUDA_VISIBLE_DEVICES": "0",
        "TORCH_ACCEL_RUNTIME": "cuda",
    }
    out = check(
        """
        import torch, torch_accel
        class Called(Exception):
            pass
        def lazy_init():
            raise Called("torch.cuda._lazy_init")
        torch.cuda._lazy_init = lazy_init
        try:
            torch_accel.init()
        except Called as e:
            print(torch_accel.runtime(), "called", torch_accel.is_initialized())
        """,
        env=env,
    )
    assert out.split() == ["cuda", "called", "False"]


def test_exit_right_after_a_backward_with_python_callbacks_is_clean():
    # Autograd runs accel's part of a backward on a device thread, which
    # drops the graph (and the Python callbacks it holds, such as the one FSDP
    # queues) only after backward() has returned. Released during interpreter
    # finalization, they aborted the process ("terminate called without an
    # active exception") in about one exit of ten; here the callback's release
    # takes 0.1 s, which made it abort at every exit.
    out = check(
        """
        import time, torch, torch_accel
        from torch.autograd import Variable

        class SlowToRelease:
            def __del__(self):
                time.sleep(0.1)

        def queue_final_callback(grad):
            held = SlowToRelease()
            Variable._execution_engine.queue_callback(lambda: held)
            return grad

        for device in ("accel:0", "accel:1"):
            x = torch.ones(3, device=device, requires_grad=True)
            y = x * 2
            y.register_hook(queue_final_callback)
            y.sum().backward()
        print(x.grad.tolist())
        """
    )
    assert out.split() == ["[2.0,", "2.0,", "2.0]"]
