"""TORCH_ACCEL_* environment variables: a malformed value is a clear ValueError at first use.

Each runtime setting is read when the runtime is selected, once per process
(in a fresh interpreter here). A bad value must name the variable and
the accepted range, never be clamped or wrap around (2**44 MiB is 2**64 bytes:
shifted into a size_t it would wrap to a limit of 0 bytes; 2**44 + 1 MiB to 1 MiB).
"""

import os
import subprocess
import sys

import pytest

from conftest import run_python

HOST = {"TORCH_ACCEL_RUNTIME": "host"}
MEMORY_RANGE = f"TORCH_ACCEL_HOST_MEMORY_MB must be an integer between 1 and {(2**64 - 1) >> 20}"
DEVICES_RANGE = "TORCH_ACCEL_HOST_DEVICES must be an integer between 0 and 64"

BAD_VALUES = [
    ("TORCH_ACCEL_HOST_MEMORY_MB", str(2**70), MEMORY_RANGE),
    ("TORCH_ACCEL_HOST_MEMORY_MB", str(2**44), MEMORY_RANGE),
    ("TORCH_ACCEL_HOST_MEMORY_MB", str(2**44 + 1), MEMORY_RANGE),
    ("TORCH_ACCEL_HOST_MEMORY_MB", "-1", MEMORY_RANGE),
    ("TORCH_ACCEL_HOST_MEMORY_MB", "0", MEMORY_RANGE),
    ("TORCH_ACCEL_HOST_MEMORY_MB", "64MB", MEMORY_RANGE),
    ("TORCH_ACCEL_HOST_MEMORY_MB", "1.5", MEMORY_RANGE),
    ("TORCH_ACCEL_HOST_DEVICES", str(2**70), DEVICES_RANGE),
    ("TORCH_ACCEL_HOST_DEVICES", "-1", DEVICES_RANGE),
    ("TORCH_ACCEL_HOST_DEVICES", "65", DEVICES_RANGE),
    ("TORCH_ACCEL_HOST_DEVICES", "two", DEVICES_RANGE),
    ("TORCH_ACCEL_HOST_DEVICES", " 2", DEVICES_RANGE),
    ("TORCH_ACCEL_RUNTIME", "tpu", "TORCH_ACCEL_RUNTIME must be one of auto, cuda, host; got 'tpu'"),
]


def test_bad_values_are_clear_errors_at_first_use():
    # A failed runtime selection is not cached (it is reported again on every
    # call), so one process can try every bad value in turn.
    proc = run_python(
        f"""
        import os, torch, torch_accel
        for name, value, message in {BAD_VALUES!r}:
            os.environ.update(TORCH_ACCEL_RUNTIME="host", TORCH_ACCEL_HOST_DEVICES="2")
            os.environ.pop("TORCH_ACCEL_HOST_MEMORY_MB", None)
            os.environ[name] = value
            assert torch_accel.device_count() == 0 and not torch_accel.is_available()  # never raise
            for first_use in (torch_accel.init, lambda: torch.empty(1, device="accel")):
                try:
                    first_use()
                except ValueError as e:
                    assert message in str(e) and repr(value) in str(e), (name, value, str(e))
                else:
                    raise AssertionError(f"{{name}}={{value!r}} was accepted")
        print("ok")
        """,
        env=HOST,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "ok"


def test_memory_limit_in_range_is_exact():
    # The largest accepted value gives exactly that many MiB (its bytes fill a size_t).
    proc = run_python(
        """
        import torch, torch_accel
        print(torch_accel.get_device_properties(0).total_memory)
        """,
        env={**HOST, "TORCH_ACCEL_HOST_MEMORY_MB": str((2**64 - 1) >> 20)},
    )
    assert proc.returncode == 0, proc.stderr
    assert int(proc.stdout) == ((2**64 - 1) >> 20) << 20


@pytest.mark.parametrize(
    "name, accepted",
    [("TORCH_ACCEL_SKIP_EXTENSION", "0 or 1"), ("TORCH_ACCEL_BUILD_CUDA", "auto, 0 or 1"), ("TORCH_ACCEL_SANITIZE", "0, address or thread")],
)
def test_build_variables(name, accepted):
    # setup.py reads them before building anything (--name builds nothing).
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, **{name: "yes"})
    proc = subprocess.run(
        [sys.executable, "setup.py", "--name"], cwd=root, env=env, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode != 0
    assert f"ValueError: {name} must be {accepted}, not 'yes'" in proc.stderr
