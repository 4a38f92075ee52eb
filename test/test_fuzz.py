"""The differential fuzzer (tools/fuzz, docs/testing.md#differential-fuzzing):
a short fixed range of its seeded random programs agrees on accel and on the
target, and its machinery finds, shrinks and reproduces a planted difference.
`make fuzz` runs long ones."""

import os
import subprocess
import sys
import time


from tools.fuzz.differential import Step, check_seed, reproducer, run_steps, shrink

# Seeds 0..199: about 4,700 steps (docs/testing.md gives the time).
SEEDS = range(200)


def test_fixed_seeds_agree_with_the_target(target):
    started = time.process_time()
    failures, steps = [], 0
    for seed in SEEDS:
        outcome, repro = check_seed(seed, target)
        steps += len(outcome.steps)
        if outcome.mismatch is not None:
            failures.append(repro)
    assert not failures, f"{len(failures)} programs differ; the first, shrunk:\n" + failures[0]
    # The programs are not trivial: most of them ran, and some errors were compared.
    assert steps > 20 * len(SEEDS)
    print(f"{len(SEEDS)} programs, {steps} steps, {time.process_time() - started:.1f} s CPU")


def test_a_difference_is_found_shrunk_and_reproduced(target, tmp_path):
    # A planted difference: the target side's step makes other values than
    # accel's (Step.ref_src), among steps that do not matter to it.
    steps = [
        Step("t0 = base(1, torch.float32, (3, 2), (1, 3), 1, D[0])", ("t0",)),
        Step("t1 = t0.t().exp()", ("t1",)),
        Step("t2 = torch.ones(3, device=D[0])", ("t2",), ref_src="t2 = torch.ones(3, device=D[0]).neg()"),
        Step("t3 = t2 * 2", ("t3",)),
        Step("t4 = t0.sum(0)", ("t4",)),
        Step("t3.add_(1)"),
    ]
    tags = {"t0": 0, "t1": 0, "t2": 0, "t3": 0, "t4": 0}
    outcome = run_steps(steps, target, tags)
    assert outcome.mismatch is not None
    assert (outcome.mismatch.kind, outcome.mismatch.where, outcome.mismatch.step) == ("values", "t2", 2)
    shrunk = shrink(outcome, target, tags)
    assert [s.src for s in shrunk.steps] == ["t2 = torch.ones(3, device=D[0])"]
    script = tmp_path / "repro.py"
    script.write_text(reproducer(shrunk, None, target))
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    lines = [line for line in proc.stdout.splitlines() if "t2:" in line]
    assert len(lines) == 2 and "values=[1.0, 1.0, 1.0]" in proc.stdout and "values=[-1.0, -1.0, -1.0]" in proc.stdout


def test_an_error_on_one_side_and_a_device_rule_are_mismatches(target):
    # One side raises: a mismatch of kind "exception".
    steps = [Step("t0 = torch.ones(2, device=D[0])", ("t0",), ref_src="t0 = torch.ones(2, device=D[0])[5]")]
    assert run_steps(steps, target, {"t0": 0}).mismatch.kind == "exception"
    # A step CUDA's rules refuse that accel runs: a mismatch too.
    steps = [Step("t0 = torch.ones(2, device=D[0])", ("t0",)), Step("t0.add_(1)", accel_only=True)]
    assert run_steps(steps, target, {"t0": 0}).mismatch.kind == "accel-only step ran"
    # Strides that differ, with the same values.
    steps = [Step("t0 = torch.ones(2, 2, device=D[0])", ("t0",), ref_src="t0 = torch.ones(2, 2, device=D[0]).t()")]
    assert run_steps(steps, target, {"t0": 0}).mismatch.kind == "metadata"


def test_make_fuzz_runs_seeds_in_workers_and_reports(tmp_path):
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    proc = subprocess.run(
        [sys.executable, "-m", "tools.fuzz", "--seed", "1000", "--programs", "3", "--out", str(tmp_path)],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "fuzz: 3 programs (of seeds 1000..1002)" in proc.stdout and "0 mismatches" in proc.stdout
    assert (tmp_path / "summary.json").exists()
