"""The differential fuzzer (``make fuzz``): random programs run on accel and on
its target, compared (docs/testing.md#differential-fuzzing).

    python -m tools.fuzz [--seed N] [--programs N] [--time S] [--jobs N] [--out DIR]
    python -m tools.fuzz --worker FIRST LAST     (one process's share; used by the above)

Seeds FIRST..LAST run in worker processes of ``--chunk`` seeds each, so that a
crash (a signal, an abort) costs one program: the driver records the seed it
died on as a mismatch of kind "crash" and starts a new worker after it. Every
mismatch's reproducer (shrunk) is written to ``--out`` (default
build/fuzz/) and printed; the run ends with its figures and fails if anything
differed.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import subprocess
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def worker(first: int, last: int, shrink: bool) -> None:
    """Runs seeds first..last-1 and reports each on stdout, one JSON line per
    seed (its start first, so that a crash names it)."""
    import resource

    import torch  # noqa: F401 - loads torch_accel (autoload)

    from .differential import check_seed, target_device

    target = target_device()
    for seed in range(first, last):
        print(json.dumps({"start": seed}), flush=True)
        outcome, repro = check_seed(seed, target, do_shrink=shrink)
        ops = collections.Counter()
        for step in outcome.steps:
            for name in re.findall(r"(?:torch\.(?:linalg\.)?|\.)([a-z_][a-z0-9_]*)\(", step.src):
                ops[name] += 1
        record = {
            "seed": seed,
            "steps": len(outcome.steps),
            "raised": len(outcome.raised),
            "refused": outcome.refused,
            "families": collections.Counter(s.family for s in outcome.steps),
            "ops": ops,
            "cpu_s": resource.getrusage(resource.RUSAGE_SELF).ru_utime + resource.getrusage(resource.RUSAGE_SELF).ru_stime,
        }
        if outcome.mismatch:
            m = outcome.mismatch
            record["mismatch"] = {"kind": m.kind, "where": m.where, "detail": m.detail[:400], "reproducer": repro}
        print(json.dumps(record), flush=True)


def drive(args) -> int:
    first, last = args.seed, args.seed + args.programs
    deadline = time.time() + args.time if args.time else None
    os.makedirs(args.out, exist_ok=True)
    started = time.time()
    totals = {"programs": 0, "steps": 0, "raised": 0, "refused": 0, "cpu_s": 0.0}
    families, ops = collections.Counter(), collections.Counter()
    mismatches = []
    queue = [(s, min(s + args.chunk, last)) for s in range(first, last, args.chunk)]
    lock = threading.Lock()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")]))

    def out_of_time() -> bool:
        return deadline is not None and time.time() > deadline

    def record_mismatch(seed, kind, where, detail, reproducer):
        path = os.path.join(args.out, f"seed{seed}.py")
        with open(path, "w") as f:
            f.write(reproducer)
        mismatches.append({"seed": seed, "kind": kind, "where": where, "detail": detail, "file": path})
        print(f"MISMATCH seed {seed}: {kind} at {where}\n  {detail}\n  reproducer: {path}\n{reproducer}", flush=True)

    def run_chunk(chunk) -> None:
        cmd = [sys.executable, "-m", "tools.fuzz", "--worker", str(chunk[0]), str(chunk[1])]
        if args.no_shrink:
            cmd.append("--no-shrink")
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL if args.quiet else None, text=True)
        current, cpu_base = None, 0.0
        for line in proc.stdout:
            rec = json.loads(line)
            if "start" in rec:
                current = rec["start"]
                continue
            current = None
            with lock:
                totals["programs"] += 1
                totals["steps"] += rec["steps"]
                totals["raised"] += rec["raised"]
                totals["refused"] += rec["refused"]
                totals["cpu_s"] += rec["cpu_s"] - cpu_base
                families.update(rec["families"])
                ops.update(rec["ops"])
                if "mismatch" in rec:
                    m = rec["mismatch"]
                    record_mismatch(rec["seed"], m["kind"], m["where"], m["detail"], m["reproducer"])
            cpu_base = rec["cpu_s"]
            if out_of_time():
                proc.kill()
                break
        proc.wait()
        if current is not None and proc.returncode != 0 and not out_of_time():
            script = f"# seed {current} crashed the worker: rerun it with\n#   python -m tools.fuzz --worker {current} {current + 1} --no-shrink\n"
            with lock:
                totals["programs"] += 1
                record_mismatch(current, "crash", f"seed {current}", f"worker died (exit {proc.returncode})", script)
                if current + 1 < chunk[1]:
                    queue.insert(0, (current + 1, chunk[1]))

    def thread() -> None:
        while not out_of_time():
            with lock:
                if not queue:
                    return
                chunk = queue.pop(0)
            run_chunk(chunk)

    threads = [threading.Thread(target=thread) for _ in range(args.jobs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.time() - started
    summary = {
        "seeds": [first, last],
        "programs": totals["programs"],
        "steps": totals["steps"],
        "steps_raising_alike": totals["raised"],
        "steps_refused_for_devices": totals["refused"],
        "cpu_s": round(totals["cpu_s"], 1),
        "wall_s": round(elapsed, 1),
        "families": dict(families.most_common()),
        "distinct_ops": len(ops),
        "ops": dict(ops.most_common()),
        "mismatches": mismatches,
    }
    with open(os.path.join(args.out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    print(
        f"fuzz: {totals['programs']} programs (of seeds {first}..{last - 1}), {totals['steps']} steps "
        f"({totals['raised']} raising alike on both devices, {totals['refused']} refused by accel for their devices), {len(ops)} distinct operators and methods, "
        f"{totals['cpu_s']:.0f} s CPU in the workers, {elapsed:.0f} s wall; {len(mismatches)} mismatches "
        f"(summary: {os.path.join(args.out, 'summary.json')})"
    )
    return 1 if mismatches else 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.fuzz", description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=0, help="first seed (default 0)")
    parser.add_argument("--programs", type=int, default=1000, help="how many programs (default 1000)")
    parser.add_argument("--time", type=float, default=0, help="stop starting programs after this many seconds (0: no limit)")
    parser.add_argument("--jobs", type=int, default=1, help="worker processes at once (default 1)")
    parser.add_argument("--chunk", type=int, default=500, help="seeds per worker process (default 500)")
    parser.add_argument("--out", default=os.path.join(ROOT, "build", "fuzz"), help="where reproducers go (default build/fuzz)")
    parser.add_argument("--quiet", action="store_true", help="hide the workers' stderr")
    parser.add_argument("--no-shrink", action="store_true", help="print mismatches as generated, unshrunk")
    parser.add_argument("--worker", nargs=2, type=int, metavar=("FIRST", "LAST"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        worker(args.worker[0], args.worker[1], not args.no_shrink)
        return 0
    return drive(args)


if __name__ == "__main__":
    sys.exit(main())
