"""The sanitizer runs' own machinery (tools/sanitized_run.py, behind `make asan`
and `make tsan`): a planted defect of each kind fails a run and is named in its
report, in the process or in a subprocess whose failure the parent ignores; a
clean command passes, a failing one fails. Each check builds a small module
apart (test/sanitizers/), never torch_accel, so it runs in `make test` too."""

import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOOL = os.path.join(ROOT, "tools", "sanitized_run.py")


def sanitized_run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, TOOL, *args], capture_output=True, text=True, timeout=300)


PLANTED = {
    "address": ["heap_buffer_overflow (direct)", "heap_buffer_overflow (ignored-subprocess)",
                "signed_overflow (direct)", "signed_overflow (ignored-subprocess)"],
    "thread": ["data_race (direct)", "data_race (ignored-subprocess)"],
}  # fmt: skip


@pytest.mark.parametrize("sanitizer", sorted(PLANTED))
def test_planted_defects_fail_the_run_and_a_clean_command_passes(sanitizer, tmp_path):
    proc = sanitized_run("check-planted", "--sanitizer", sanitizer, "--build", str(tmp_path))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    verdicts = dict(line[len("planted ") :].split(": ") for line in proc.stdout.splitlines() if line.startswith("planted "))
    assert sorted(verdicts) == sorted(PLANTED[sanitizer]), proc.stdout
    assert all(verdict.endswith("-> caught") for verdict in verdicts.values()), proc.stdout

    # The planted module as the sanitized library (its runtimes are preloaded):
    # a command that commits no defect writes no report and passes, and a
    # failing command fails with its own status.
    library = str(next((tmp_path / "planted").glob("planted_defects*.so")))
    run = ("run", "--sanitizer", sanitizer, "--library", library, "--build", str(tmp_path), "--", sys.executable, "-c")
    clean = sanitized_run(*run, "import sys; sys.exit(0)")
    assert clean.returncode == 0, clean.stdout + clean.stderr
    assert os.listdir(tmp_path / "reports") == []
    assert sanitized_run(*run, "import sys; sys.exit(3)").returncode == 3
