"""accel against its target device, side by side: `make bench`.

Every figure is accel's time over the target's (cuda on the CUDA runtime, cpu
on the host runtime), each the median of repeated runs after warm-up, taken in
this one process with accel's and the target's runs alternating (so that a
drifting machine slows both alike); the exception is CUDA training steps, whose cuda reference
runs in a child process without torch_accel (see workloads.py). The per-op
list is also measured in instructions per call (valgrind's callgrind, in a
child process: a stable metric where time varies), and every accel/target
ratio above the goals of issue 19 is printed as a warning. Results go to
benchmarks/results/<runtime>-<machine>.{md,json}, rewritten after each section
(a run killed in a later section keeps the earlier ones); each run's per-op
figures are added to benchmarks/results/history.jsonl.

This file is the driver (arguments, the sections registry, the results files and
the history); each section is a module of benchmarks/sections/.

  python benchmarks/run.py [--quick] [--sections ops,instructions,calls,throughput,streams,sdpa,flex,aoti,models,compiled,graphs,startup]
                           [--no-compile] [--no-history] [--output-dir DIR] [--run-id ID] [--ops OP,OP]
                           [--models transformer,cnn]

--ops keeps only the named ops of the per-op list (its names, as in the
tables: `--ops add,clone,torch.tensor(list)`), for quick measurements of a
change; such a run is a partial one and is best kept out of the history
(--no-history). --models keeps only the named models of the training steps
(sections models and compiled).
"""

import argparse
import datetime
import json
import os
import platform
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)
sys.path.insert(0, HERE)

import torch  # noqa: E402

import torch_accel  # noqa: E402
from sections import aoti, calls, compiled, flex, graphs, instructions, models, ops, sdpa, startup, streams, throughput  # noqa: E402
from sections.common import TARGET  # noqa: E402

# The sections, in the order they run and appear in the results. Each module has
# run(results, quick), which adds its figures to `results` under its name (the
# JSON keys), and markdown(results), its heading and table; a section with goals
# (issue 19) also has warnings(results), its figures above them.
SECTIONS = {
    "ops": ops,
    "instructions": instructions,
    "calls": calls,
    "throughput": throughput,
    "streams": streams,
    "sdpa": sdpa,
    "flex": flex,
    "aoti": aoti,
    "models": models,
    "compiled": compiled,
    "graphs": graphs,
    "startup": startup,
}


def section_warnings(name: str, results: dict) -> list[str]:
    """One line for every figure of section `name` above its goal."""
    warnings = getattr(SECTIONS[name], "warnings", None)
    return warnings(results) if warnings else []


# Report --------------------------------------------------------------------------------


def machine() -> dict:
    info = {
        "date": f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M UTC}",
        "host": platform.node(),
        "cpu": platform.processor() or platform.machine(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "runtime": torch_accel.runtime(),
        "target": TARGET,
    }
    if TARGET == "cuda":
        info["gpu"] = torch.cuda.get_device_name(0)
    return info


def write_results(results: dict, output_dir: str) -> str:
    """Writes <runtime>-<machine>.{json,md} (through a temporary file each: a
    run killed while writing leaves the previous complete file)."""
    os.makedirs(output_dir, exist_ok=True)
    machine_info = results["machine"]
    name = f"{machine_info['runtime']}-{re.sub(r'[^A-Za-z0-9]+', '-', machine_info.get('gpu', platform.node()))}"
    md = [f"# accel benchmarks: {machine_info['runtime']} runtime", ""]
    md += [f"- {k}: {v}" for k, v in machine_info.items()] + [""]
    for section in SECTIONS:
        if section in results:
            md += SECTIONS[section].markdown(results) + [""]
    base = os.path.join(output_dir, name)
    for path, text in ((base + ".json", json.dumps(results, indent=1)), (base + ".md", "\n".join(md))):
        with open(path + ".tmp", "w") as f:
            f.write(text)
        os.replace(path + ".tmp", path)
    return base


# The per-op figures of every run, one JSON line each (results/history.jsonl,
# committed): the trend from one change to the next, with the machine.
HISTORY = "history.jsonl"
HISTORY_SECTIONS = ("ops", "instructions", "calls", "startup")


def source_revision() -> str:
    """The commit this run measured ("+changes" when the worktree differed from it)."""
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--", "csrc", "torch_accel"], capture_output=True, text=True, cwd=ROOT, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return commit + ("+changes" if dirty else "")


def add_to_history(results: dict, path: str, quick: bool) -> None:
    """Adds this run's entry; a run whose sections ran in separate processes
    (one --run-id) keeps one entry, which each process completes."""
    entry = {"machine": results["machine"], "revision": source_revision(), "quick": quick}
    lines = []
    if os.path.exists(path):
        with open(path) as f:
            lines = f.read().splitlines()
    run_id = results["machine"].get("run_id")
    if run_id and lines and json.loads(lines[-1]).get("machine", {}).get("run_id") == run_id:
        entry = {**json.loads(lines.pop()), **entry}
    for section in ("ops", "instructions"):
        if section in results:
            entry[section] = {
                "summary": results[f"{section}_summary"],
                "ratios": {r["op"]: round(r["ratio"], 4) for r in results[section]},
                "accel": {r["op"]: round(r.get("accel_instr", r.get("accel_us", 0)), 3) for r in results[section]},
                "target": {r["op"]: round(r.get("target_instr", r.get("target_us", 0)), 3) for r in results[section]},
            }
    if "calls" in results:
        entry["calls"] = {r["call"]: round(r["accel_us"], 3) for r in results["calls"]}
    if "startup" in results:
        entry["startup_ms"] = {r["what"]: round(r.get("added_ms", r["ms"]), 2) for r in results["startup"]}
    lines.append(json.dumps(entry))
    with open(path + ".tmp", "w") as f:
        f.write("\n".join(lines) + "\n")
    os.replace(path + ".tmp", path)
    print(f"added to {path}", flush=True)


def previous_results(output_dir: str, run_id: str, machine_info: dict) -> dict:
    """The results file of this machine written earlier in the same run (same
    --run-id): the run's other sections, kept beside this process's."""
    name = f"{machine_info['runtime']}-{re.sub(r'[^A-Za-z0-9]+', '-', machine_info.get('gpu', platform.node()))}.json"
    try:
        with open(os.path.join(output_dir, name)) as f:
            previous = json.load(f)
    except (OSError, ValueError):
        return {}
    return previous if previous.get("machine", {}).get("run_id") == run_id else {}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fewer repeats and smaller sizes")
    parser.add_argument("--sections", default=",".join(SECTIONS), help=f"comma-separated, of: {', '.join(SECTIONS)}")
    parser.add_argument("--no-compile", action="store_true", help="leave out the compiled training steps")
    parser.add_argument("--output-dir", default=os.path.join(HERE, "results"))
    parser.add_argument(
        "--run-id",
        default=None,
        help="sections run by separate processes of one run share an id: each adds its own to the results file "
        "that an earlier process of the same run wrote (tools/gpu/gpu_report.py runs one section per process)",
    )
    parser.add_argument("--no-history", action="store_true", help=f"do not add this run to {HISTORY}")
    parser.add_argument(
        "--ops",
        default=None,
        help="comma-separated names of the per-op list (sections ops and instructions) to measure instead of all of them",
    )
    parser.add_argument(
        "--models",
        default=None,
        help=f"comma-separated models of the training steps (sections models and compiled), of: {', '.join(models.MODELS)}",
    )
    parser.add_argument("--callgrind-child", metavar="DIR", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.ops is not None:
        selected = [name.strip() for name in args.ops.split(",") if name.strip()]
        known = ops.all_op_cases("cpu")
        unknown_ops = [name for name in selected if name not in known]
        if unknown_ops or not selected:
            what = f"unknown ops {unknown_ops}" if unknown_ops else "no op"
            parser.error(f"{what} in --ops; the per-op list has: {', '.join(known)}")
        ops.select(selected)
    if args.models is not None:
        chosen = [name.strip() for name in args.models.split(",") if name.strip()]
        unknown_models = [name for name in chosen if name not in models.MODELS]
        if unknown_models or not chosen:
            parser.error(f"--models takes some of {', '.join(models.MODELS)}; got {args.models!r}")
        models.select(chosen)
    if args.callgrind_child:
        instructions.callgrind_child(args.callgrind_child)
        return 0
    sections = [s for s in args.sections.split(",") if s]
    unknown = sorted(set(sections) - set(SECTIONS))
    if unknown:
        parser.error(f"unknown sections {unknown}; choose from {', '.join(SECTIONS)}")
    if args.no_compile:
        sections = [s for s in sections if s != "compiled"]

    info = machine()
    if args.run_id:
        info["run_id"] = args.run_id
    results = previous_results(args.output_dir, args.run_id, info) if args.run_id else {}
    results["machine"] = {**results.get("machine", {}), **info}
    failed = []
    for section in SECTIONS:  # in the table's order, each written as soon as it is done
        if section not in sections:
            continue
        try:
            SECTIONS[section].run(results, args.quick)
        except Exception as error:  # report, go on with the other sections, and fail the run
            print(f"section {section} failed: {error}", file=sys.stderr, flush=True)
            failed.append(section)
            continue
        base = write_results(results, args.output_dir)
        for warning in section_warnings(section, results):
            print(f"WARNING: above goal: {warning}", file=sys.stderr, flush=True)
        markdown = SECTIONS[section].markdown(results)
        print("\n".join(markdown) + "\n", flush=True)
        print(f"written to {base}.{{md,json}}", flush=True)
        # The section's heading again (with its median and worst ratio), last:
        # a log's tail shows it whatever the table's length.
        print(f"summary: {markdown[0].lstrip('# ')}", flush=True)
    if not args.no_history and any(s in results for s in HISTORY_SECTIONS):
        add_to_history(results, os.path.join(args.output_dir, HISTORY), args.quick)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
