"""Runs the test suite (and the benchmarks, when there are any) on the runtime
selected by TORCH_ACCEL_RUNTIME and writes a Markdown report: the machine, the
versions, the pytest summary and every failure. `make gpu-test` calls it on a
GPU machine; the report is committed. If $OUT is set (the device tool), the
report and the raw logs are copied there too.
"""

import argparse
import datetime
import os
import platform
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def run(cmd: list[str], log_path: str) -> tuple[int, str]:
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""), PYTHONUNBUFFERED="1")
    with open(log_path, "w") as log:
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


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--output", required=True)
    parser.add_argument("pytest_args", nargs="*")
    args = parser.parse_args()

    log_dir = os.path.join(ROOT, "build", "gpu-test")
    os.makedirs(log_dir, exist_ok=True)
    test_log = os.path.join(log_dir, "pytest.log")
    test_rc, test_out = run(
        [sys.executable, "-m", "pytest", "test", "-q", "-rfEs", "-p", "no:cacheprovider", *args.pytest_args], test_log
    )
    summary = [line for line in test_out.splitlines() if line.startswith(("FAILED", "ERROR", "SKIPPED"))]
    tail = test_out.strip().splitlines()[-1] if test_out.strip() else "(no output)"

    sections = ["# GPU test report", "", *machine(), "", "## Tests", "", f"`pytest test`: **{tail}** (exit {test_rc})", ""]
    if summary:
        sections += ["Failures and skips:", "", "```", *summary, "```", ""]

    bench_script = os.path.join(ROOT, "benchmarks", "run.py")
    bench_rc = None
    if os.path.exists(bench_script):
        bench_log = os.path.join(log_dir, "bench.log")
        bench_rc, bench_out = run([sys.executable, bench_script], bench_log)
        sections += ["## Benchmarks", "", f"exit {bench_rc}", "", "```", bench_out.strip()[-6000:], "```", ""]
    else:
        sections += ["## Benchmarks", "", "benchmarks/run.py does not exist yet.", ""]

    os.makedirs(os.path.dirname(os.path.abspath(args.output)), exist_ok=True)
    with open(args.output, "w") as f:
        f.write("\n".join(sections))
    out_dir = os.environ.get("OUT")
    if out_dir:
        shutil.copy(args.output, out_dir)
        shutil.copy(test_log, out_dir)
    print(f"report written to {args.output}")
    return test_rc or (bench_rc or 0)


if __name__ == "__main__":
    sys.exit(main())
