"""test/gpu_report.py, which `make gpu-test` runs on a lent GPU machine: what
it leaves under $OUT (the only thing the device tool returns) and its report.
Run here on this process's runtime, with a two-test selection and one quick
benchmark section."""

import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
SELECTION = ["-k", "test_registered_as_torch_accel or test_runtime_and_target"]
QUICK_BENCH = "--bench-args=--quick --sections streams"


def gpu_report(tmp_path, *args: str) -> subprocess.CompletedProcess:
    out = tmp_path / "out"
    out.mkdir(exist_ok=True)
    env = dict(os.environ, OUT=str(out))
    cmd = [sys.executable, os.path.join(HERE, "gpu_report.py"), "--output", str(tmp_path / "reports" / "gpu-test.md")]
    cmd += ["--results-dir", str(tmp_path / "results"), *args]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)


def test_tests_and_benchmarks_land_under_out(tmp_path):
    proc = gpu_report(tmp_path, QUICK_BENCH, *SELECTION)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    results = sorted(p.name for p in (tmp_path / "results").iterdir())
    assert len(results) == 2 and {os.path.splitext(name)[1] for name in results} == {".md", ".json"}
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == sorted(["gpu-test.md", "pytest.log", "bench.log", *results])
    report = (tmp_path / "reports" / "gpu-test.md").read_text()
    assert report == (tmp_path / "out" / "gpu-test.md").read_text()
    assert "## Tests" in report and "2 passed" in report and "(exit 0)" in report
    assert "## Benchmarks" in report and "Stream and event calls" in report
    assert "2 passed" in (tmp_path / "out" / "pytest.log").read_text()


def test_failing_tests_fail_the_run_and_are_reported(tmp_path):
    # No test selected is pytest's exit 5: a failure, which the report keeps.
    proc = gpu_report(tmp_path, "--steps", "tests", "-k", "no_test_has_this_name")
    assert proc.returncode == 5
    report = (tmp_path / "out" / "gpu-test.md").read_text()
    assert "(exit 5)" in report and "## Benchmarks" not in report


def test_benchmarks_alone_write_results_and_no_report(tmp_path):
    proc = gpu_report(tmp_path, "--steps", "bench", QUICK_BENCH)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert not (tmp_path / "reports").exists()
    names = sorted(p.name for p in (tmp_path / "out").iterdir())
    assert names == sorted(["bench.log", *(p.name for p in (tmp_path / "results").iterdir())])


@pytest.mark.parametrize("steps", ["", "tests,benchmarks"])
def test_unknown_steps_are_refused(tmp_path, steps):
    proc = gpu_report(tmp_path, "--steps", steps)
    assert proc.returncode == 2
    assert "--steps takes a comma-separated list of tests, bench" in proc.stderr
    assert not any((tmp_path / "out").iterdir())
