"""Section `instructions`: the per-op list of the `ops` section in instructions
per call, counted by valgrind's callgrind in a child process (run.py
--callgrind-child): a stable metric where time varies. Needs valgrind."""

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

import torch

from . import ops
from .common import ROOT, RUN_PY, TARGET, per_op_goal_warnings, ratio_summary, table, warnings_markdown

# Wall time on a shared machine varies by some 10% from run to run; the number
# of instructions an op executes hardly varies. The per-op list runs in one
# child process under valgrind's callgrind, instrumented only once torch and
# torch_accel are imported and the cases built (--instr-atstart=no, then
# callgrind_control -i on: an uninstrumented start is ~3x faster), and
# collecting only around each timed loop (torch._C._valgrind_toggle; each
# loop's counts go to a dump file of their own). Kernels run on one thread
# there (both devices alike), so that the counts repeat from run to run.

CALLGRIND_WARMUP, CALLGRIND_ITERATIONS = 3, 20


def callgrind_child(out_dir: str) -> None:
    """Runs in the process under callgrind: every op, accel's and the
    target's, collected around CALLGRIND_ITERATIONS calls each (after
    CALLGRIND_WARMUP uncollected ones), in the order written to order.json."""
    # One thread: valgrind runs threads one at a time, and a thread pool's
    # workers spinning while they wait would add a varying count.
    torch.set_num_threads(1)
    cases = {"accel": ops.op_cases("accel"), TARGET: ops.op_cases(TARGET)}
    subprocess.run(["callgrind_control", "--instr=on", str(os.getpid())], check=True, capture_output=True)
    order = []
    for name in cases["accel"]:
        for device in ("accel", TARGET) if len(order) % 4 == 0 else (TARGET, "accel"):
            fn = cases[device][name]
            for _ in range(CALLGRIND_WARMUP):
                fn()
            torch._C._valgrind_toggle()
            for _ in range(CALLGRIND_ITERATIONS):
                fn()
            torch._C._valgrind_toggle_and_dump_stats()
            order.append((name, device))
    with open(os.path.join(out_dir, "order.json"), "w") as f:
        json.dump(order, f)


def bench_instructions(quick: bool) -> list[dict]:
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        raise RuntimeError("valgrind (callgrind) is not installed: no instruction counts")
    with tempfile.TemporaryDirectory(prefix="accel-callgrind-") as out_dir:
        command = [
            "valgrind",
            "--tool=callgrind",
            "--instr-atstart=no",
            "--collect-atstart=no",
            f"--callgrind-out-file={out_dir}/callgrind.out.%p",
            sys.executable,
            RUN_PY,
            "--callgrind-child",
            out_dir,
        ]
        if ops.SELECTED_OPS is not None:
            command.append(f"--ops={','.join(ops.SELECTED_OPS)}")
        env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
        proc = subprocess.run(command, capture_output=True, text=True, timeout=1200, cwd=ROOT, env=env)
        if proc.returncode != 0:
            raise RuntimeError(f"the callgrind child exited with {proc.returncode}: {' | '.join(proc.stderr.strip().splitlines()[-3:])}")
        with open(os.path.join(out_dir, "order.json")) as f:
            order = json.load(f)
        dumps = {}
        for path in os.listdir(out_dir):
            match = re.fullmatch(r"callgrind\.out\.\d+\.(\d+)", path)
            if match:
                with open(os.path.join(out_dir, path)) as f:
                    totals = re.search(r"^totals:\s*(\d+)", f.read(), re.MULTILINE)
                dumps[int(match.group(1))] = int(totals.group(1))
    if len(dumps) != len(order):
        raise RuntimeError(f"callgrind wrote {len(dumps)} dumps for {len(order)} measurements")
    per_call: dict[str, dict[str, float]] = {}
    for number, (name, device) in enumerate(order, start=1):
        per_call.setdefault(name, {})[device] = dumps[number] / CALLGRIND_ITERATIONS
    return [
        {"op": name, "accel_instr": counts["accel"], "target_instr": counts[TARGET], "ratio": counts["accel"] / counts[TARGET]}
        for name, counts in per_call.items()
    ]


def run(results: dict, quick: bool) -> None:
    results["instructions"] = bench_instructions(quick)
    results["instructions_summary"] = ratio_summary(results["instructions"])


def warnings(results: dict) -> list[str]:
    return per_op_goal_warnings("instructions", "instructions", results)


def markdown(results: dict) -> list[str]:
    rows = results["instructions"]
    summary = results["instructions_summary"]
    md = [
        f"## Eager per-op instructions, callgrind (accel/{TARGET}: median {summary['median']:.3f}, worst {summary['worst']:.3f} {summary['worst_op']})",
        "",
        f"Instructions per call, each the mean of {CALLGRIND_ITERATIONS} calls after {CALLGRIND_WARMUP} uncounted ones, "
        "accel's and the target's in one process under valgrind --tool=callgrind. "
        + ("Time per call from the ops section of this run." if "ops" in results else ""),
        "",
    ]
    times = {r["op"]: r for r in results.get("ops", [])}
    merged = [{**r, "accel_us": times.get(r["op"], {}).get("accel_us"), "time_ratio": times.get(r["op"], {}).get("ratio")} for r in rows]
    columns = ["op", "accel_instr", "target_instr", "ratio"] + (["accel_us", "time_ratio"] if times else [])
    return md + table(merged, columns) + warnings_markdown(warnings(results))
