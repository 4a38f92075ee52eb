"""Lazy initialisation, queued calls, thread safety, fork safety and import cost.

Each test runs in a fresh interpreter: initialisation is process-wide state.
"""

import pytest

from conftest import run_python


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
