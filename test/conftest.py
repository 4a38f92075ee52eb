"""Shared fixtures. Tests are runtime-agnostic: they run on the host runtime in
CI and on the CUDA runtime via `make gpu-test`. ``target`` is the device type
whose kernels stand in for accel's: accel results are compared with it."""

import os
import subprocess
import sys
import textwrap

# Deterministic cuBLAS (it must be set before CUDA initialises): tests
# compare accel with the target bit for bit, also across processes.
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
# PyTorch's test machinery (torch.testing._internal, read at its import) skips
# the tests its databases mark slow (gradcheck-heavy OpInfo entries). Our
# device-generic tests take a few samples per op, so they run them all.
os.environ.setdefault("PYTORCH_TEST_WITH_SLOW", "1")

import pytest  # noqa: E402
import torch  # noqa: E402

import torch_accel  # noqa: E402

# Whether this build of torch_accel has the CUDA runtime: not where the installed
# torch has no CUDA or no CUDA toolkit was found at build time, nor in the
# sanitised builds (TORCH_ACCEL_BUILD_CUDA=0: `make asan`, `make tsan`). Tests of
# the CUDA runtime that need no GPU (stub libraries) run wherever it is built.
HAS_CUDA_RUNTIME: bool = torch_accel._C._has_cuda_runtime
NO_CUDA_RUNTIME = "this build of torch_accel has no CUDA runtime (a torch without CUDA, no CUDA toolkit, or TORCH_ACCEL_BUILD_CUDA=0)"


@pytest.fixture(scope="session")
def target() -> str:
    return torch_accel._target_device_type()


@pytest.fixture(scope="session")
def two_devices() -> None:
    if torch_accel.device_count() >= 2:
        return
    if torch_accel.runtime() == "cuda":
        # The CUDA runtime has as many accel devices as the machine has GPUs.
        pytest.skip("needs two GPUs; this machine has one")
    # The host runtime's device count is ours to choose: never skip there.
    pytest.fail("these tests need two accel devices (TORCH_ACCEL_HOST_DEVICES>=2 on the host runtime)")


def run_python(code: str, env: dict | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    """Run ``code`` in a fresh interpreter (for process-wide state: runtime
    selection, device counts, fork) and return the finished process."""
    full_env = dict(os.environ)
    full_env["PYTHONPATH"] = os.pathsep.join([os.path.dirname(os.path.dirname(__file__)), full_env.get("PYTHONPATH", "")])
    full_env.update(env or {})
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], env=full_env, capture_output=True, text=True, timeout=timeout
    )


def run_target_cases(target: str, output_dir, *flags: str, script: str = "_cases.py") -> dict:
    """Run a cases script of test/ (``_cases.py`` unless told) on the target
    device in a process without torch_accel (see _cases.py for why) and
    return its results. The script takes DEVICE OUTPUT [FLAGS...]."""
    output = output_dir / "cases.pt"
    env = dict(os.environ, TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    proc = subprocess.run(
        [sys.executable, os.path.join(os.path.dirname(__file__), script), target, str(output), *flags],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    return torch.load(output)


@pytest.fixture(autouse=True)
def _restore_device_and_streams():
    """Each test starts on device 0 with default streams, and leaves it so."""
    yield
    for index in range(torch_accel.device_count()):
        torch_accel.set_stream(torch_accel.default_stream(index))
    if torch_accel.device_count():
        torch_accel.set_device(0)


# --- PyTorch's device-generic tests: a report per class ---------------------
# test_device_generic.py instantiates PyTorch's device-generic test classes for
# accel; the summary says how each fared, and build/device-generic-report.json
# keeps the counts and the expected failures with their reasons.

_DEVICE_GENERIC = "test_device_generic.py::"
_device_generic_outcomes: dict[str, dict[str, int]] = {}


def pytest_runtest_logreport(report):
    # One report per test: its call, or the setup that failed or skipped it.
    parts = report.nodeid.split("::")
    if _DEVICE_GENERIC not in report.nodeid or len(parts) < 3 or not (report.when == "call" or report.outcome != "passed"):
        return
    outcome = "xfailed" if report.outcome == "skipped" and hasattr(report, "wasxfail") else report.outcome
    counts = _device_generic_outcomes.setdefault(parts[1], dict.fromkeys(("passed", "failed", "skipped", "xfailed"), 0))
    counts[outcome] += 1


def pytest_terminal_summary(terminalreporter):
    if not _device_generic_outcomes:
        return
    import json
    import sys as _sys

    generic = _sys.modules.get("test_device_generic")
    terminalreporter.section("PyTorch's device-generic tests on accel")
    for cls, counts in sorted(_device_generic_outcomes.items()):
        terminalreporter.write_line(f"{cls}: " + ", ".join(f"{n} {k}" for k, n in counts.items()))
    report = {
        "runtime": torch_accel.runtime(),
        "target": torch_accel._target_device_type(),
        "classes": _device_generic_outcomes,
        "known_failures": getattr(generic, "KNOWN_FAILURES", {}),
    }
    path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "build", "device-generic-report.json")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump(report, f, indent=1, sort_keys=True)
    terminalreporter.write_line(f"written to {os.path.relpath(path)}")
