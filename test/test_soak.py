"""The soak (tools/soak.py, docs/soak.md): a short run of its training loop
(eager and compiled, side streams, pinned-memory DataLoader workers,
checkpoints) keeps memory statistics, file descriptors and threads flat, and
the check fails a run with a leak planted in it. `make soak` runs long ones."""

import json
import os
import subprocess
import sys

import pytest

from tools.soak import BOUNDS, check

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_soak(tmp_path, *args: str) -> tuple[subprocess.CompletedProcess, dict]:
    # A process of its own: DataLoader workers fork, and the figures are the
    # whole process's.
    report = tmp_path / "soak.json"
    proc = subprocess.run(
        [sys.executable, "-m", "tools.soak", "--json", str(report), *args],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
    )
    assert report.exists(), proc.stdout + proc.stderr
    return proc, json.loads(report.read_text())


def test_training_loop_stays_flat(tmp_path):
    # 12 rounds of 24 steps: 288 steps, half of them compiled, 6 checkpoints.
    proc, report = run_soak(tmp_path, "--rounds", "12", "--warmup-rounds", "4")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert report["over"] == []
    samples = report["samples"]
    assert [s["round"] for s in samples] == list(range(1, 13)) and samples[-1]["steps"] == 288
    after = samples[3:]
    # The counts come back to exactly the same value at every round's end, and
    # the model's tensors are there (nothing was freed under the loop's feet).
    for name in ("allocated_bytes", "allocations", "segments", "fds", "threads"):
        assert len({s[name] for s in after}) == 1, (name, [s[name] for s in after])
    assert after[0]["allocated_bytes"] > 0


def test_a_planted_leak_fails_the_run(tmp_path):
    # One accel tensor kept per step, one open file and one thread per round:
    # the run fails and names each figure they grow.
    leaks = ["--plant-leak", "tensor", "--plant-leak", "fd", "--plant-leak", "thread"]
    proc, report = run_soak(tmp_path, "--rounds", "6", "--warmup-rounds", "2", "--batches", "8", "--no-compile", *leaks)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert {"allocated_bytes", "allocations", "fds", "threads"} <= set(report["over"]), report["over"]
    assert "grew beyond the bound" in proc.stderr
    growth = report["growth"]
    # 4 rounds after the reference, 8 steps each: 32 tensors of 4096 floats.
    assert growth["allocations"] == 32 and growth["allocated_bytes"] == 32 * 4096 * 4
    assert growth["fds"] == 4 and growth["threads"] == 4


def figures(**values):
    return {name: values.get(name, 100) for name in BOUNDS}


def test_check_compares_with_the_end_of_the_warm_up():
    # Growth during the warm-up does not count; any after it, beyond the bound, does.
    samples = [{"round": r, **figures(fds=3 + min(r, 3))} for r in range(1, 8)]
    verdict = check(samples, warmup_rounds=3)
    assert verdict.over == [] and verdict.reference["fds"] == 6 and verdict.growth["fds"] == 0
    samples[-1]["fds"] += 1
    assert check(samples, warmup_rounds=3).over == ["fds"]
    # Within its bound, resident memory may move both ways.
    bound = BOUNDS["rss_bytes"][0]
    samples = [{"round": r, **figures(rss_bytes=1000 + (bound if r == 5 else 0) - (50 if r == 6 else 0))} for r in range(1, 8)]
    assert check(samples, warmup_rounds=3).over == []
    samples[4]["rss_bytes"] += 1
    assert check(samples, warmup_rounds=3).over == ["rss_bytes"]
    with pytest.raises(ValueError, match="fewer than 2"):
        check(samples, warmup_rounds=7)
