"""Runs the test suite and the benchmarks on the runtime selected by
TORCH_ACCEL_RUNTIME and writes a Markdown report: the machine, the versions,
the pytest summary and every failure. `make gpu-test` calls it on a GPU
machine; the report and the benchmark results are committed.

  python test/gpu_report.py --output REPORT [--steps tests,bench] [--bench-args="..."]
                            [--results-dir DIR] [pytest args...]

Made for the device tool, whose commands are killed after 10 minutes and which
returns only what is under $OUT: where $OUT is set, the logs are written there
as they grow, the report is written (and copied there) as soon as the tests
end, before the benchmarks start, and the benchmarks' result files are copied
there when they end. A run cut short still returns what it did. The two steps
can also run as separate commands (`--steps tests`, then `--steps bench`); a
run without the tests step writes no report (the benchmark results carry the
machine themselves).
"""

import argparse
import datetime
import glob
import os
import platform
import shlex
import shutil
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS_DIR = os.path.join(ROOT, "benchmarks", "results")
STEPS = ("tests", "bench")
sys.path.insert(0, ROOT)


def run(cmd: list[str], log_path: str) -> tuple[int, str]:
    """Run ``cmd``, echoing its output and writing it to ``log_path`` line by line."""
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""), PYTHONUNBUFFERED="1")
    with open(log_path, "w", buffering=1) as log:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        lines = []
        for line in proc.stdout:
            sys.stdout.write(line)
            log.write(line)
            lines.append(line)
        return proc.wait(), "".join(lines)


def machine() -> list[str]:
    import torch

    import torch_accel

    rows = [
        f"- date: {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M UTC}",
        f"- host: {platform.node()} ({platform.machine()}, {os.cpu_count()} CPUs), Python {platform.python_version()}",
        f"- torch {torch.__version__} (CUDA {torch.version.cuda})",
        f"- accel runtime: {torch_accel.runtime()}, {torch_accel.device_count()} device(s)",
    ]
    for index in range(torch_accel.device_count()):
        props = torch_accel.get_device_properties(index)
        rows.append(f"- accel:{index}: {props.name}, {props.total_memory / 2**30:.1f} GiB, sm {props.major}.{props.minor}")
    smi = shutil.which("nvidia-smi")
    if smi:
        out = subprocess.run(
            [smi, "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"], capture_output=True, text=True
        )
        rows.append(f"- nvidia-smi: {out.stdout.strip()}")
    return rows


def tests_section(log_dir: str, pytest_args: list[str]) -> tuple[int, list[str]]:
    rc, out = run(
        [sys.executable, "-m", "pytest", "test", "-q", "-rfEs", "-p", "no:cacheprovider", *pytest_args],
        os.path.join(log_dir, "pytest.log"),
    )
    failures = [line for line in out.splitlines() if line.startswith(("FAILED", "ERROR", "SKIPPED"))]
    tail = out.strip().splitlines()[-1] if out.strip() else "(no output)"
    command = " ".join(["pytest test", *pytest_args])
    section = ["## Tests", "", f"`{command}`: **{tail}** (exit {rc})", ""]
    if failures:
        section += ["Failures and skips:", "", "```", *failures, "```", ""]
    return rc, section


def bench_section(log_dir: str, results_dir: str, bench_args: list[str]) -> tuple[int, list[str], list[str]]:
    """Run the benchmarks; returns their exit code, the report's section and the result files they wrote."""
    started = time.time()
    cmd = [sys.executable, os.path.join(ROOT, "benchmarks", "run.py"), "--output-dir", results_dir, *bench_args]
    rc, out = run(cmd, os.path.join(log_dir, "bench.log"))
    written = sorted(p for p in glob.glob(os.path.join(results_dir, "*")) if os.path.getmtime(p) >= started)
    command = " ".join(["benchmarks/run.py", *bench_args])
    section = ["## Benchmarks", "", f"`{command}`: exit {rc}", ""]
    section += [f"Results: {', '.join(os.path.relpath(p, ROOT) for p in written) or 'none written'}", ""]
    section += ["```", out.strip()[-6000:], "```", ""]
    return rc, section, written


def main() -> int:
    # allow_abbrev=False: an option for pytest (the rest of the command line) is never taken for one of these.
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter, allow_abbrev=False
    )
    parser.add_argument("--output", required=True, help="the report (Markdown); written only when the tests run")
    parser.add_argument("--steps", default=",".join(STEPS), help="comma-separated, of: tests, bench")
    parser.add_argument("--bench-args", default="", help="arguments for benchmarks/run.py, as one string (--bench-args=...)")
    parser.add_argument("--results-dir", default=RESULTS_DIR, help="where benchmarks/run.py writes its results")
    args, pytest_args = parser.parse_known_args()
    steps = [s for s in args.steps.split(",") if s]
    unknown = sorted(set(steps) - set(STEPS))
    if unknown or not steps:
        parser.error(f"--steps takes a comma-separated list of {', '.join(STEPS)}; got {args.steps!r}")

    out_dir = os.environ.get("OUT")
    log_dir = out_dir or os.path.join(ROOT, "build", "gpu-test")
    os.makedirs(log_dir, exist_ok=True)
    report = ["# GPU test report", "", *machine(), ""]

    def write_report() -> None:
        os.makedirs(os.path.dirname(os.path.abspath(args.output)), exist_ok=True)
        with open(args.output, "w") as f:
            f.write("\n".join(report))
        if out_dir:
            shutil.copy(args.output, out_dir)
        print(f"report written to {args.output}")

    test_rc = bench_rc = 0
    if "tests" in steps:
        test_rc, section = tests_section(log_dir, pytest_args)
        report += section
        write_report()  # before the benchmarks: a run cut short in them keeps the test results
    if "bench" in steps:
        bench_rc, section, written = bench_section(log_dir, args.results_dir, shlex.split(args.bench_args))
        for path in written if out_dir else ():
            shutil.copy(path, out_dir)
        if "tests" in steps:
            report += section
            write_report()
    return test_rc or bench_rc


if __name__ == "__main__":
    sys.exit(main())
