"""The GPU run: `make gpu-test` calls this on a GPU machine (TORCH_ACCEL_RUNTIME=cuda).

It runs the sections of tools/gpu/gpu_sections.py (dependencies, build, then the
sections of the steps asked for), each in its own process group with its own
time limit, within a whole-run deadline, and writes a Markdown report at the
start and again whenever a section starts or ends:

  python tools/gpu/gpu_report.py [--steps all|smoke,core,compile,...] [--sections NAME,...]
                                 [--deadline SECONDS] [--started EPOCH] [--output REPORT]
                                 [--pytest-args "..."] [--bench-args "..."] [--results-dir DIR]
                                 [--commit HASH] [--history FILE] [--table FILE]
                                 [--list] [--next SECONDS [--warm]]

Made for the device tool, whose commands are killed after 10 minutes and which
returns at most 8 files, from $OUT only. Where $OUT is set, the log of all
sections is written there as it grows, the report is copied there each time it
is written, and each section's artifacts (benchmark results, coverage files)
are copied there when it ends. A section that hangs is killed (its whole process
group) at its limit and reported as timed out with the end of its log; one that
crashes is reported with its signal; a pytest section that collects no test
fails. Every section runs whatever happened to the ones before it, until the
deadline (minus REPORT_RESERVE_S) leaves too little time to start one; those
left are reported as not run, with the reason. The exit status is 0 only when
every section asked for ran and passed.

The report says where the time went: before the runner (make's environment),
the machine's description, each section (a pytest section's start-up and
collection apart from its tests, and its slowest tests), and the build's
compile units (from ninja's log: CPU time, parallelism, the slowest units).
On a GPU, each section that ran is also entered in the history of sections
(test/reports/gpu-sections.md: the date, commit, GPU, outcome and time of each
section's last GPU run, oldest first), copied to $OUT as well; --next reads it
and prints the sections a window should run next.
"""

from __future__ import annotations

import argparse
import datetime
import fnmatch
import glob
import importlib.util
import json
import os
import platform
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
import traceback
from dataclasses import dataclass, field

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
RESULTS_DIR = os.path.join(ROOT, "benchmarks", "results")
# The reports are the test suite's results on a GPU: they stay beside the tests.
REPORTS_DIR = os.path.join(ROOT, "test", "reports")
HISTORY_FILE = os.path.join(REPORTS_DIR, "gpu-sections.md")
GPU_REQUIREMENTS = os.path.join(ROOT, "requirements-gpu.txt")

KILL_GRACE_S = 5  # between SIGTERM and SIGKILL to a section's process group
STACK_DUMP_WAIT_S = 1  # between SIGUSR1 (dump the Python stacks) and SIGTERM
REPORT_RESERVE_S = 10  # kept before the deadline: the last kill, the report
MIN_START_S = 15  # a section is not started with less time than this left
MAX_DETAILED_FAILURES = 15  # tracebacks shown per section; the rest by name
TRACEBACK_LINES = 40
LOG_TAIL_LINES = 30
OUT_FILE_LIMIT = 8  # the device tool returns at most this many files from $OUT

# A Python stack dump (faulthandler: a crash, or SIGUSR1 before a kill), and its
# frames of pytest's own machinery, left out of the report.
STACK_DUMP = re.compile(r"Fatal Python error|(Current thread|Thread) 0x[0-9a-f]+ \(most recent call first\)")
RUNNER_FRAME = re.compile(r'^\s+File "(.*/(_pytest|pluggy|xdist|execnet)/.*|.*/pytest/__main__\.py|<frozen runpy>)", line')
# pytest's exit statuses that say it did not run the tests (5, no tests, is judged apart).
PYTEST_ERRORS = {2: "interrupted", 3: "internal error", 4: "usage error"}

PENDING, RUNNING, PASSED, FAILED, TIMED_OUT, CRASHED, NOT_RUN = (
    "pending",
    "running",
    "passed",
    "failed",
    "timed out",
    "crashed",
    "not run",
)


def load_table(path: str):
    spec = importlib.util.spec_from_file_location("gpu_sections_table", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


@dataclass
class Result:
    section: object  # gpu_sections.Section
    state: str = PENDING
    note: str = ""  # why: not run, timed out, no tests, a missing dependency ...
    started: float | None = None
    seconds: float | None = None
    limit_s: float | None = None  # the limit it ran under (its own, or what the deadline left)
    exit: str = ""  # "exit 1", "SIGSEGV"
    argv: list[str] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)
    collected: int | None = None
    failures: list[tuple[str, str, str]] = field(default_factory=list)  # (nodeid, outcome, traceback)
    collect_errors: list[tuple[str, str]] = field(default_factory=list)
    skip_reasons: dict[str, int] = field(default_factory=dict)
    running: list[str] = field(default_factory=list)  # tests started and not finished
    log_tail: str = ""
    artifacts: list[str] = field(default_factory=list)
    test_seconds: dict[str, float] = field(default_factory=dict)  # each test's time, start to result
    details: list[str] = field(default_factory=list)  # where its time went (the build's compile units)


class Run:
    def __init__(self, args, table):
        self.args = args
        self.table = table
        self.started = args.started or time.time()
        self.deadline_at = self.started + args.deadline if args.deadline else None
        self.run_id = datetime.datetime.fromtimestamp(self.started, datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ") + f"-{os.getpid()}"
        self.out_dir = os.environ.get("OUT") or None
        self.report_path = os.path.abspath(args.output)
        stem = os.path.splitext(os.path.basename(self.report_path))[0]
        log_dir = self.out_dir or os.path.join(ROOT, "build", "gpu-test")
        os.makedirs(log_dir, exist_ok=True)
        self.log_path = os.path.join(log_dir, stem + ".log")
        open(self.log_path, "w").close()
        self.work_dir = os.path.join(ROOT, "build", "gpu-test", self.run_id)
        os.makedirs(self.work_dir, exist_ok=True)
        self.runner_started = time.time()
        self.machine: list[str] = []
        self.machine_seconds = 0.0  # describing the machine and accel
        self.gpus: list[str] = []  # what torch saw; the history of sections is kept only where there are some
        self.commit = args.commit or None
        self.problems: list[str] = []  # shown at the top: a missing dependency, a stale table
        self.results: list[Result] = []
        self.other_steps: list[str] = []
        self.finished = False

    # -- time ------------------------------------------------------------------

    def probe_timeout(self) -> float:
        """For the machine's description: at most 60 s, and never past the deadline."""
        remaining = self.remaining()
        return 60 if remaining is None else max(1, min(60, remaining))

    def remaining(self) -> float | None:
        return None if self.deadline_at is None else self.deadline_at - self.args.reserve_s - time.time()

    # -- processes ---------------------------------------------------------------

    def env(self, section) -> dict:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (HERE, ROOT, env.get("PYTHONPATH", "")) if p)
        env["PYTHONUNBUFFERED"] = "1"
        env["GPU_REPORT_LOG"] = self.log_path
        env.update(section.env)
        return env

    def expand(self, words) -> list[str]:
        out = []
        for word in words:
            if word == "{bench_args}":
                out += shlex.split(self.args.bench_args)
                continue
            out.append(
                word.replace("{python}", sys.executable)
                .replace("{results}", self.args.results_dir)
                .replace("{run_id}", self.run_id)
            )
        return out

    def run_process(self, argv: list[str], env: dict, limit: float, result: Result) -> tuple[int | None, bool]:
        """Run argv in a new process group, its output appended to the log.
        Returns (exit status or None if killed, killed at the limit)."""
        with open(self.log_path, "a") as log:
            log.write(f"\n===== section {result.section.name}: {shlex.join(argv)} (limit {limit:.0f} s)\n")
            log.flush()
            proc = subprocess.Popen(
                argv, cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        timed_out = False
        try:
            proc.wait(timeout=limit)
        except subprocess.TimeoutExpired:
            timed_out = True
            # pytest sections dump their Python stacks on SIGUSR1 (gpu_results_plugin);
            # a process that does not handle it ends, as all of them are about to.
            self.signal_group(proc.pid, signal.SIGUSR1)
            time.sleep(STACK_DUMP_WAIT_S)
            self.signal_group(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=KILL_GRACE_S)
            except subprocess.TimeoutExpired:
                pass
        # Whatever is left of the group (a hung child, a worker) goes too.
        self.signal_group(proc.pid, signal.SIGKILL)
        rc = proc.wait()
        return rc, timed_out

    @staticmethod
    def signal_group(pgid: int, sig: int) -> None:
        try:
            os.killpg(pgid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def log_tail(self, offset: int, lines: int = LOG_TAIL_LINES) -> str:
        """The end of the section's log; where Python dumped its stacks (a crash,
        or SIGUSR1 before a kill), the output before the dump and the dump's start."""
        with open(self.log_path, errors="replace") as f:
            f.seek(offset)
            rows = f.read().rstrip().splitlines()
        dump = next((i for i, row in enumerate(rows) if STACK_DUMP.search(row)), None)
        if dump is None:
            return "\n".join(rows[-lines:])
        stacks = [row for row in rows[dump:] if not RUNNER_FRAME.match(row)]
        return "\n".join(rows[max(0, dump - 8) : dump] + stacks[:lines] + (["..."] if len(stacks) > lines else []))

    # -- sections ----------------------------------------------------------------

    def run_section(self, result: Result) -> None:
        section = result.section
        remaining = self.remaining()
        limit = section.limit_s if remaining is None else min(section.limit_s, remaining)
        if remaining is not None and limit < min(section.limit_s, self.args.min_start_s):
            result.state, result.note = NOT_RUN, f"the whole-run deadline ({self.args.deadline:.0f} s) left {max(remaining, 0):.0f} s"
            return
        argv, missing = self.section_argv(section)
        if missing:
            self.problems.append(f"section {section.name} names files that do not exist: {', '.join(missing)}")
        if argv is None:
            result.state, result.counts, result.collected = FAILED, {}, 0
            result.note = f"{', '.join(missing)} not found"
            return
        result.argv, result.limit_s, result.state, result.started = argv, limit, RUNNING, time.time()
        self.write_report()
        print(f"[{self.elapsed()}] {section.name}: started (limit {limit:.0f} s)", flush=True)
        offset = os.path.getsize(self.log_path)
        ninja_logs = ninja_log_sizes() if section is getattr(self.table, "BUILD", None) else None
        rc, timed_out = self.run_process(argv, self.env(section), limit, result)
        if ninja_logs is not None:
            result.details = describe_compile_units(ninja_log_entries(ninja_logs))
        result.seconds = time.time() - result.started
        result.log_tail = self.log_tail(offset)
        if section.tests:
            self.read_events(result)
        if timed_out:
            result.state = TIMED_OUT
            cut_by_deadline = limit < section.limit_s
            result.note = f"killed at {'the whole-run deadline' if cut_by_deadline else 'its limit'} after {limit:.0f} s"
            if result.running:
                result.note += "; running: " + ", ".join(result.running)
        elif rc < 0:
            result.state, result.exit = CRASHED, signal_name(-rc)
            result.note = f"killed by {result.exit}" + (" while running " + ", ".join(result.running) if result.running else "")
        else:
            result.exit = f"exit {rc}"
            if section.tests and rc in PYTEST_ERRORS:
                result.state, result.note = FAILED, f"pytest: {PYTEST_ERRORS[rc]}"
            elif section.tests and (rc == 5 or not result.collected) and not result.collect_errors:
                result.state, result.note = FAILED, "no tests collected"
            elif rc != 0 or missing or any(result.counts.get(k) for k in ("failed", "error")) or result.collect_errors:
                result.state = FAILED
                if missing:
                    result.note = f"{', '.join(missing)} not found"
            else:
                result.state = PASSED
        result.artifacts = self.copy_artifacts(section)
        print(f"[{self.elapsed()}] {section.name}: {self.outcome(result)}", flush=True)

    def section_argv(self, section) -> tuple[list[str] | None, list[str]]:
        if section.command:
            return self.expand(section.command), []
        present = [t for t in section.tests if os.path.exists(os.path.join(ROOT, t.split("::")[0]))]
        missing = [t for t in section.tests if t not in present]
        if not present:
            return None, missing
        events = os.path.join(self.work_dir, section.name + ".events")
        test_timeout = section.test_timeout_s or max(10, min(180, section.limit_s - 15))
        argv = [sys.executable, "-m", "pytest", *present, "-p", "gpu_results_plugin", f"--gpu-results={events}"]
        argv += ["-p", "no:cacheprovider", "-v", "--tb=short", "-rfE", "--continue-on-collection-errors"]
        argv += [f"--timeout={test_timeout}"]
        if section.k:
            argv += ["-k", section.k]
        if section.m:
            argv += ["-m", section.m]
        if section.workers:
            argv += ["-n", str(section.workers)]
        argv += shlex.split(self.args.pytest_args)
        return argv, missing

    def read_events(self, result: Result) -> None:
        path = os.path.join(self.work_dir, result.section.name + ".events")
        started: dict[str, float] = {}
        counts: dict[str, int] = {}
        if not os.path.exists(path):
            return
        with open(path, errors="replace") as f:
            for line in f:
                try:
                    event = json.loads(line)
                except ValueError:  # a line cut short by a kill
                    continue
                kind = event.get("event")
                if kind == "collected":
                    result.collected = max(result.collected or 0, event["count"])
                elif kind == "collect_error":
                    result.collect_errors.append((event["nodeid"], event.get("longrepr") or ""))
                elif kind == "start":
                    started[event["nodeid"]] = event.get("time", 0.0)
                elif kind == "result":
                    began = started.pop(event["nodeid"], None)
                    if began is not None and "time" in event:
                        result.test_seconds[event["nodeid"]] = event["time"] - began
                    outcome = event["outcome"]
                    counts[outcome] = counts.get(outcome, 0) + 1
                    if outcome in ("failed", "error", "xpassed"):
                        result.failures.append((event["nodeid"], outcome, event.get("longrepr") or ""))
                    elif outcome == "skipped" and event.get("reason"):
                        reason = event["reason"].removeprefix("Skipped: ")
                        result.skip_reasons[reason] = result.skip_reasons.get(reason, 0) + 1
        result.counts = counts
        result.running = list(started)

    def copy_artifacts(self, section) -> list[str]:
        copied = []
        for pattern in section.artifacts:
            pattern = os.path.join(ROOT, self.expand([pattern])[0])
            for path in sorted(glob.glob(pattern)):
                if os.path.getmtime(path) < self.started:
                    continue  # not written by this run
                copied.append(os.path.relpath(path, ROOT))
                if self.out_dir:
                    shutil.copy(path, self.out_dir)
        return copied

    def check_dependencies(self, result: Result) -> None:
        """Imports every module of REQUIRED_MODULES in a fresh interpreter."""
        modules = list(self.table.REQUIRED_MODULES)
        code = (
            "import importlib, json, sys\n"
            "missing = {}\n"
            f"for name in {modules!r}:\n"
            "    try:\n"
            "        importlib.import_module(name)\n"
            "    except BaseException as error:\n"
            "        missing[name] = f'{type(error).__name__}: {error}'.splitlines()[0]\n"
            "print(json.dumps(missing))\n"
        )
        env = dict(self.env(result.section), TORCH_DEVICE_BACKEND_AUTOLOAD="0")
        result.started, result.argv, result.state = time.time(), [sys.executable, "-c", "<import each module>"], RUNNING
        try:
            proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
            missing = json.loads(proc.stdout.strip().splitlines()[-1])
        except (subprocess.TimeoutExpired, ValueError, IndexError) as error:
            missing = {"(the check itself)": str(error)}
        result.seconds = time.time() - result.started
        if not missing:
            result.state, result.exit = PASSED, "exit 0"
            result.note = f"{len(modules)} modules import"
            return
        pins = read_pins()
        lines = []
        for name, error in missing.items():
            dist = self.table.REQUIRED_MODULES.get(name, name)
            pin = pins.get(dist.lower())
            how = f"pip: {pin}, in requirements-gpu.txt" if pin else f"pip: {dist}, NOT in requirements-gpu.txt: add it there, pinned"
            lines.append(f"{name} ({how}): {error}")
        result.state, result.exit = FAILED, "missing modules"
        result.note = "missing: " + ", ".join(missing)
        result.log_tail = "\n".join(lines)
        message = (
            f"Missing Python modules: {', '.join(missing)}. The tests that import them fail. Bring them as wheels: "
            "`make gpu-wheels` where pip reaches PyPI (it fills .whl/ from requirements-gpu.txt), then carry `.whl` "
            "to the GPU machine: `make gpu-test` installs .whl/*.whl offline before it starts."
        )
        self.problems.insert(0, message)
        print("ERROR: " + message + "\n  " + "\n  ".join(lines), flush=True)

    # -- machine -------------------------------------------------------------------

    def describe_machine(self) -> None:
        code = (
            "import json, os, platform, torch\n"
            "info = {'torch': torch.__version__, 'cuda': torch.version.cuda, 'gpus': []}\n"
            "if torch.cuda.is_available():\n"
            "    for i in range(torch.cuda.device_count()):\n"
            "        p = torch.cuda.get_device_properties(i)\n"
            "        info['gpus'].append(f'{p.name}, {p.total_memory / 2**30:.1f} GiB, sm {p.major}.{p.minor}')\n"
            "print(json.dumps(info))\n"
        )
        env = dict(os.environ, TORCH_DEVICE_BACKEND_AUTOLOAD="0")
        rows = [
            f"- host: {platform.node()} ({platform.machine()}, {os.cpu_count()} CPUs), Python {platform.python_version()} ({sys.executable})",
            f"- TORCH_ACCEL_RUNTIME={os.environ.get('TORCH_ACCEL_RUNTIME', '(unset: auto)')}",
        ]
        info = run_json([sys.executable, "-c", code], env, self.probe_timeout())
        if isinstance(info, dict):
            self.gpus = info["gpus"]
            rows.append(f"- torch {info['torch']} (CUDA {info['cuda']}); GPUs seen by torch: {'; '.join(info['gpus']) or 'none'}")
        else:
            rows.append(f"- torch: {info}")
        smi = shutil.which("nvidia-smi")
        if smi:
            out = run_text([smi, "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"])
            rows.append(f"- nvidia-smi: {out}")
        nvcc = shutil.which("nvcc") or (os.path.exists("/usr/local/cuda/bin/nvcc") and "/usr/local/cuda/bin/nvcc")
        if nvcc:
            rows.append(f"- nvcc: {run_text([nvcc, '--version']).splitlines()[-1]}")
        commit = run_text(["git", "-C", ROOT, "log", "-1", "--format=%h %s"])
        if self.commit:
            rows.append(f"- commit: {self.commit} (as given: GPU_TEST_COMMIT)")
        elif commit.startswith("(failed"):
            rows.append("- commit: unknown (this copy of the tree has no git metadata; pass GPU_TEST_COMMIT)")
        else:
            dirty = run_text(["git", "-C", ROOT, "status", "--porcelain", "--untracked-files=no"])
            dirty = bool(dirty) and not dirty.startswith("(")
            self.commit = commit.split()[0] + (" (with uncommitted changes)" if dirty else "")
            rows.append(f"- commit: {commit[:100]}" + (" (with uncommitted changes)" if dirty else ""))
        self.machine = rows

    def describe_accel(self) -> None:
        code = (
            "import json, torch, torch_accel\n"
            "n = torch_accel.device_count()\n"
            "names = [torch_accel.get_device_properties(i).name for i in range(n)]\n"
            "print(json.dumps(f'{torch_accel.runtime()} runtime, {n} device(s)' + (': ' + '; '.join(names) if names else '')))\n"
        )
        accel = run_json([sys.executable, "-c", code], self.env(self.table.BUILD), self.probe_timeout())
        self.machine.append(f"- accel: {accel}")
        if isinstance(accel, str) and " 0 device(s)" in accel:
            self.problems.append(f"accel has no device ({accel}): every test that needs one fails below")

    # -- the run -------------------------------------------------------------------

    def plan(self) -> None:
        table = self.table
        sections = list(table.SECTIONS)
        unassigned = unassigned_test_files(table)
        if unassigned:
            sections.append(
                table.Section(
                    name="unassigned",
                    step=getattr(table, "UNASSIGNED_STEP", table.STEPS[0]),
                    what="test files that no section names (add them to tools/gpu/gpu_sections.py)",
                    limit_s=300,
                    estimate_s=60,
                    tests=tuple(unassigned),
                )
            )
        subset_steps = set(getattr(table, "SUBSET_STEPS", ()))
        if self.args.sections:
            chosen = [s for s in sections if s.name in self.args.sections]
        else:
            chosen = [
                s for s in sections if s.step in self.args.steps or ("all" in self.args.steps and s.step not in subset_steps)
            ]
        self.other_steps = sorted(
            {s.step for s in sections} - {s.step for s in chosen}, key=lambda s: table.STEPS.index(s) if s in table.STEPS else len(table.STEPS)
        )
        deps = table.Section(name="dependencies", step="*", what="every module the suite imports (REQUIRED_MODULES)", limit_s=120, estimate_s=10)
        first = [deps] + ([table.BUILD] if getattr(table, "BUILD", None) else [])
        self.results = [Result(s) for s in first + chosen]

    def execute(self) -> int:
        self.plan()
        if getattr(self.table, "DESCRIBE_MACHINE", True):
            began = time.time()
            self.describe_machine()
            self.machine_seconds += time.time() - began
        self.write_report()
        for result in self.results:
            try:
                if result.section.name == "dependencies":
                    self.check_dependencies(result)
                else:
                    self.run_section(result)
                    built = result.section is getattr(self.table, "BUILD", None) and result.state == PASSED
                    if built and getattr(self.table, "DESCRIBE_MACHINE", True):
                        began = time.time()
                        self.describe_accel()
                        self.machine_seconds += time.time() - began
            except Exception:  # a bug here must not cost the other sections
                result.state, result.note = FAILED, "the runner failed: " + traceback.format_exc().strip().splitlines()[-1]
                result.log_tail = traceback.format_exc()
                print(result.log_tail, flush=True)
            self.write_report()
            self.record_history(result)
        self.finished = True
        self.write_report()
        print(self.summary_text(), flush=True)
        print(f"report: {self.report_path}" + (f" (and {self.out_dir})" if self.out_dir else ""), flush=True)
        return 0 if all(r.state == PASSED for r in self.results) else 1

    def records_history(self) -> bool:
        """Only GPU runs go into the history of sections (a table may say otherwise, for tests)."""
        return bool(self.args.history) and (bool(self.gpus) or getattr(self.table, "RECORD_WITHOUT_GPU", False))

    def record_history(self, result: Result) -> None:
        """Enters a section that ran in the history of sections, and copies it to $OUT."""
        in_table = result.section is getattr(self.table, "BUILD", None) or result.section in self.table.SECTIONS
        if result.state in (PENDING, RUNNING, NOT_RUN) or not in_table or not self.records_history():
            return
        history = SectionHistory.read(self.args.history)
        outcome = result.state + (f" ({result.exit})" if result.exit and result.state in (FAILED, CRASHED) else "")
        history.enter(
            result.section,
            when=datetime.datetime.fromtimestamp(self.started, datetime.timezone.utc).strftime("%Y-%m-%d %H:%M"),
            commit=self.commit or "unknown",
            gpu=self.gpus[0].split(",")[0] if self.gpus else "none",
            outcome=outcome,
            tests=count_text(result) if (result.counts or result.collected is not None) else "",
            seconds=result.seconds,
        )
        history.write(self.args.history, self.table)
        if self.out_dir:
            shutil.copy(self.args.history, os.path.join(self.out_dir, os.path.basename(self.args.history)))

    def elapsed(self) -> str:
        return f"{time.time() - self.started:5.0f} s"

    # -- report ---------------------------------------------------------------------

    @staticmethod
    def outcome(result: Result) -> str:
        text = result.state
        if result.counts or result.collected is not None:
            text += f" ({count_text(result)})"
        if result.note:
            text += f": {result.note}"
        return text

    def summary_text(self) -> str:
        return "\n".join(f"  {r.section.name:<16} {self.outcome(r)}" for r in self.results)

    def state_line(self) -> str:
        running = [r for r in self.results if r.state == RUNNING]
        not_run = [r for r in self.results if r.state == NOT_RUN]
        if running:
            r = running[0]
            return f"**running**: section {r.section.name} since {r.started - self.started:.0f} s (limit {r.limit_s:.0f} s)"
        if not self.finished:
            return "**starting**"
        bad = [r for r in self.results if r.state not in (PASSED, NOT_RUN)]
        if not_run:
            text = f"**cut short**: {len(not_run)} section(s) not run ({', '.join(r.section.name for r in not_run)}): {not_run[0].note}"
            return text + (f"; {len(bad)} did not pass: {', '.join(r.section.name for r in bad)}" if bad else "")
        if bad:
            return f"**finished, {len(bad)} section(s) did not pass**: {', '.join(r.section.name for r in bad)}"
        return "**finished, every section passed**"

    def render(self) -> str:
        args = self.args
        started = datetime.datetime.fromtimestamp(self.started, datetime.timezone.utc)
        what = f"sections {', '.join(args.sections)}" if args.sections else f"steps {', '.join(args.steps)}"
        deadline = f"{args.deadline:.0f} s" if args.deadline else "none"
        lines = [
            "# GPU test report",
            "",
            f"{what}; started {started:%Y-%m-%d %H:%M:%S} UTC; whole-run deadline {deadline}; "
            f"written at {time.time() - self.started:.0f} s. State: {self.state_line()}",
            "",
            *self.machine,
            "",
        ]
        if self.problems:
            lines += ["**Problems:**", "", *[f"- {p}" for p in self.problems], ""]
        lines += ["| section | step | outcome | tests | time | limit |", "|---|---|---|---|---|---|"]
        for r in self.results:
            s = r.section
            secs = "" if r.seconds is None else f"{r.seconds:.1f} s"
            if r.state == RUNNING:
                secs = f"{time.time() - r.started:.0f} s so far"
            outcome = r.state if r.state != NOT_RUN else f"not run: {r.note}"
            if r.exit and r.state in (FAILED, CRASHED):
                outcome += f" ({r.exit})"
            tests = count_text(r) if (r.counts or r.collected is not None) else ""
            lines.append(f"| {s.name} | {s.step} | {outcome} | {tests} | {secs} | {s.limit_s} s |")
        lines.append("")
        if self.other_steps:
            lines += [f"Steps not run by this command: {', '.join(self.other_steps)} (`make gpu-test GPU_TEST_STEPS=<step>`).", ""]
        lines += self.render_time()
        for r in self.results:
            if r.state in (PENDING, NOT_RUN) and not r.note:
                continue
            lines += self.render_section(r)
        files = self.out_files()
        if self.out_dir and len(files) > OUT_FILE_LIMIT:
            lines += [f"**$OUT holds {len(files)} files; the device tool returns {OUT_FILE_LIMIT}:** {', '.join(files)}", ""]
        lines.append(f"Log of every section: `{os.path.basename(self.log_path)}`" + (" (in $OUT)" if self.out_dir else f" ({os.path.relpath(self.log_path, ROOT)})"))
        return "\n".join(lines) + "\n"

    def render_time(self) -> list[str]:
        """Where the run's time went, part by part."""
        before = max(0.0, self.runner_started - self.started)
        parts: list[tuple[str, float, str]] = []
        if before >= 0.5:
            parts.append(("before the runner (make: .venv, wheels)", before, ""))
        if self.machine_seconds:
            parts.append(("describing the machine and accel", self.machine_seconds, ""))
        for r in self.results:
            if r.seconds is None:
                continue
            note = "; ".join(r.details)
            if r.test_seconds and not r.section.workers:
                tests = sum(r.test_seconds.values())
                slowest = sorted(r.test_seconds.items(), key=lambda item: -item[1])[:3]
                note = f"start-up and collection {max(0.0, r.seconds - tests):.0f} s; slowest: " + ", ".join(
                    f"`{nodeid.split('::', 1)[-1]}` {seconds:.1f} s" for nodeid, seconds in slowest
                )
            parts.append((r.section.name, r.seconds, note))
        if not parts:
            return []
        total = max(time.time() - self.started, sum(seconds for _, seconds, _ in parts))
        lines = ["## Where the time went", "", "| part | time | share | notes |", "|---|---|---|---|"]
        for name, seconds, note in parts:
            lines.append(f"| {name} | {seconds:.1f} s | {100 * seconds / total:.0f}% | {note} |")
        lines += [f"| total (from the start of `make gpu-test`) | {total:.1f} s | | |", ""]
        return lines

    def render_section(self, r: Result) -> list[str]:
        s = r.section
        lines = [f"## {s.name}: {r.state}", "", f"{s.what}."]
        if r.argv:
            lines += ["", "`" + shlex.join(shorten_argv(r.argv)) + "`"]
        lines.append("")
        facts = []
        if r.seconds is not None:
            facts.append(f"{r.seconds:.1f} s of {r.limit_s:.0f} s allowed" if r.limit_s else f"{r.seconds:.1f} s")
        if r.exit:
            facts.append(r.exit)
        if r.counts or r.collected is not None:
            facts.append(count_text(r))
        if r.note and r.note not in facts:
            facts.append(r.note)
        if facts:
            lines += ["; ".join(facts) + ".", ""]
        if r.artifacts:
            lines += [f"Files written: {', '.join(r.artifacts)}.", ""]
        for nodeid, error in r.collect_errors:
            lines += [f"Collection error in `{nodeid}`:", "", "```", trim(error), "```", ""]
        for i, (nodeid, outcome, tb) in enumerate(r.failures):
            if i == MAX_DETAILED_FAILURES:
                rest = [n for n, _, _ in r.failures[i:]]
                lines += [f"And {len(rest)} more: " + ", ".join(f"`{n}`" for n in rest), ""]
                break
            lines += [f"**{outcome.upper()}** `{nodeid}`", "", "```", trim(tb), "```", ""]
        if r.skip_reasons:
            lines += ["Skipped: " + "; ".join(f"{reason} ({n})" for reason, n in sorted(r.skip_reasons.items())), ""]
        show_tail = r.state in (TIMED_OUT, CRASHED) or (r.state == FAILED and not r.failures and not r.collect_errors)
        show_tail = show_tail or (r.state == PASSED and bool(s.command))
        if show_tail and r.log_tail:
            lines += ["End of its log:", "", "```", r.log_tail, "```", ""]
        return lines

    def out_files(self) -> list[str]:
        return sorted(os.listdir(self.out_dir)) if self.out_dir and os.path.isdir(self.out_dir) else []

    def write_report(self) -> None:
        os.makedirs(os.path.dirname(self.report_path), exist_ok=True)
        text = self.render()
        tmp = self.report_path + ".tmp"
        with open(tmp, "w") as f:
            f.write(text)
        os.replace(tmp, self.report_path)  # never a half-written report
        if self.out_dir:
            shutil.copy(self.report_path, os.path.join(self.out_dir, os.path.basename(self.report_path)))


# -- helpers ---------------------------------------------------------------------------


def signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def count_text(r: Result) -> str:
    order = ("passed", "failed", "error", "skipped", "xfailed", "xpassed")
    parts = [f"{r.counts[k]} {k}" for k in order if r.counts.get(k)]
    ran = sum(r.counts.values())
    if r.collected is not None and r.collected != ran:
        parts.append(f"{r.collected} collected")
    if r.collect_errors:
        parts.append(f"{len(r.collect_errors)} collection error(s)")
    return ", ".join(parts) or "no tests collected"


def trim(text: str, lines: int = TRACEBACK_LINES) -> str:
    rows = text.rstrip().splitlines()
    return "\n".join((["..."] if len(rows) > lines else []) + rows[-lines:])


def shorten_argv(argv: list[str]) -> list[str]:
    """The command as a person would type it: python for the interpreter, without the results plugin."""
    out: list[str] = []
    for word in argv:
        if word.startswith("--gpu-results="):
            continue
        if word == "gpu_results_plugin" and out and out[-1] == "-p":
            out.pop()
            continue
        out.append("python" if word == sys.executable else word)
    return out


def run_text(argv: list[str]) -> str:
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"(failed: {error})"
    if proc.returncode != 0:
        return f"(failed: {proc.stderr.strip()[-200:]})"
    return proc.stdout.strip()


def run_json(argv: list[str], env: dict, timeout: float):
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env, cwd=ROOT)
        if proc.returncode == 0:
            return json.loads(proc.stdout.strip().splitlines()[-1])
        return f"(failed: {' | '.join(proc.stderr.strip().splitlines()[-2:])})"
    except (OSError, subprocess.TimeoutExpired, ValueError, IndexError) as error:
        return f"(failed: {error})"


def read_pins(path: str = GPU_REQUIREMENTS) -> dict[str, str]:
    """requirements-gpu.txt's lines by distribution name (lower case)."""
    pins = {}
    if os.path.exists(path):
        for line in open(path):
            line = line.split("#")[0].strip()
            if line:
                pins[line.split("==")[0].strip().lower()] = line
    return pins


def unassigned_test_files(table) -> list[str]:
    pattern = getattr(table, "TEST_FILES_GLOB", "test/test_*.py")
    if not pattern:
        return []
    named = {t.split("::")[0] for s in table.SECTIONS for t in s.tests}
    exempt = set(getattr(table, "GPU_EXEMPT", {}))
    files = sorted(os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(ROOT, pattern)))
    return [f for f in files if f not in named and f not in exempt and not fnmatch.fnmatch(f, "*/_*")]


# -- the build's compile units (ninja's log) ------------------------------------------------


def ninja_log_sizes() -> dict[str, int]:
    """The size of each ninja log of the build folder, before the build runs."""
    return {path: os.path.getsize(path) for path in glob.glob(os.path.join(ROOT, "build", "temp.*", ".ninja_log"))}


def ninja_log_entries(before: dict[str, int]) -> list[tuple[str, float, float]]:
    """(unit, start, end) in seconds of the units compiled since ``before``
    (ninja_log_sizes); a log that shrank was rewritten by ninja: all of it."""
    entries = []
    for path in glob.glob(os.path.join(ROOT, "build", "temp.*", ".ninja_log")):
        with open(path, errors="replace") as f:
            if os.path.getsize(path) >= before.get(path, 0):
                f.seek(before.get(path, 0))
            for line in f:
                fields = line.rstrip("\n").split("\t")
                if len(fields) >= 4 and fields[0].isdigit() and fields[1].isdigit():
                    entries.append((os.path.basename(fields[3]), int(fields[0]) / 1000, int(fields[1]) / 1000))
    return entries


def describe_compile_units(entries: list[tuple[str, float, float]]) -> list[str]:
    """One line on the build's compile units: how many, their CPU time, the
    parallelism it ran with, and the slowest."""
    if not entries:
        return ["no unit compiled (up to date)"]
    cpu = sum(end - start for _, start, end in entries)
    wall = max(end for _, _, end in entries) - min(start for _, start, _ in entries)
    slowest = sorted(entries, key=lambda e: -(e[2] - e[1]))[:3]
    return [
        f"{len(entries)} units, {cpu:.0f} s of compiling in {wall:.0f} s ({cpu / wall if wall else 1:.1f} at a time, "
        f"{os.cpu_count()} CPUs); slowest: " + ", ".join(f"{unit} {end - start:.0f} s" for unit, start, end in slowest)
    ]


# -- the history of sections (test/reports/gpu-sections.md) -----------------------------------

HISTORY_COLUMNS = ("section", "step", "last GPU run (UTC)", "commit", "GPU", "outcome", "tests", "time")
NEVER = "never"


class SectionHistory:
    """The last GPU run of every section, as a Markdown table (one row a section)."""

    def __init__(self, rows: dict[str, dict[str, str]]):
        self.rows = rows

    @classmethod
    def read(cls, path: str) -> "SectionHistory":
        rows: dict[str, dict[str, str]] = {}
        if os.path.exists(path):
            for line in open(path):
                cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
                if not line.startswith("| ") or len(cells) != len(HISTORY_COLUMNS) or cells[0] in ("section", "---"):
                    continue
                rows[cells[0]] = dict(zip(HISTORY_COLUMNS, cells))
        return cls(rows)

    def enter(self, section, *, when: str, commit: str, gpu: str, outcome: str, tests: str, seconds: float | None) -> None:
        clean = lambda text: str(text).replace("|", "/").replace("\n", " ")  # noqa: E731 - one cell of the table
        self.rows[section.name] = dict(
            zip(
                HISTORY_COLUMNS,
                map(clean, (section.name, section.step, when, commit, gpu, outcome, tests, "" if seconds is None else f"{seconds:.0f} s")),
            )
        )

    def last_run(self, name: str) -> str:
        return self.rows.get(name, {}).get("last GPU run (UTC)", NEVER) or NEVER

    def ordered(self, table) -> list[dict[str, str]]:
        """Every section of the table (and rows of sections no longer in it, last), oldest run first."""
        order = [s.name for s in [table.BUILD, *table.SECTIONS] if s is not None]
        rows = []
        for index, section in enumerate(s for s in [table.BUILD, *table.SECTIONS] if s is not None):
            row = dict(self.rows.get(section.name) or dict.fromkeys(HISTORY_COLUMNS, ""))
            row.update(section=section.name, step=section.step)
            row["last GPU run (UTC)"] = self.last_run(section.name)
            rows.append((0, row["last GPU run (UTC)"] if row["last GPU run (UTC)"] != NEVER else "", index, row))
        for name, row in self.rows.items():
            if name not in order:
                rows.append((1, row.get("last GPU run (UTC)", ""), 0, {**row, "step": f"{row.get('step', '')} (no longer in the table)"}))
        return [row for *_, row in sorted(rows, key=lambda r: r[:3])]

    def write(self, path: str, table) -> None:
        lines = [
            "# The GPU sections' last runs",
            "",
            "Every section of `tools/gpu/gpu_sections.py` with its last run on a GPU, oldest first (never-run",
            "sections at the top, in the table's order): the next window runs from the top",
            "(`python tools/gpu/gpu_report.py --next SECONDS` picks what fits; docs/gpu-runs.md has the plan).",
            "`tools/gpu/gpu_report.py` rewrites it after each section of a GPU run and copies it to `$OUT`:",
            "commit the returned copy here. The rows of 2026-11-23 come from that H100 run's report",
            "(test/reports/gpu-test.md), which ran the suite of the time as one pytest command.",
            "",
            "| " + " | ".join(HISTORY_COLUMNS) + " |",
            "|" + "---|" * len(HISTORY_COLUMNS),
        ]
        for row in self.ordered(table):
            lines.append("| " + " | ".join(row.get(column, "") for column in HISTORY_COLUMNS) + " |")
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        with open(path + ".tmp", "w") as f:
            f.write("\n".join(lines) + "\n")
        os.replace(path + ".tmp", path)


def next_sections(table, history: SectionHistory, budget_s: float, warm: bool) -> tuple[list, float]:
    """The sections a window with ``budget_s`` seconds for one command should
    run: never run first, then the longest since their last run, as many as
    their estimates fit (with a fresh build unless ``warm``). The steps of
    SUBSET_STEPS (smoke) are not offered: a window runs its smoke step whole."""
    subset = set(getattr(table, "SUBSET_STEPS", ()))
    fixed = 10 + (0 if warm or table.BUILD is None else table.BUILD.estimate_s)  # dependencies, build
    rows = {row["section"]: row for row in history.ordered(table)}
    candidates = [s for s in table.SECTIONS if s.step not in subset]
    candidates.sort(key=lambda s: (rows[s.name]["last GPU run (UTC)"] != NEVER, rows[s.name]["last GPU run (UTC)"]))
    chosen, total = [], fixed
    for section in candidates:
        if total + section.estimate_s <= budget_s:
            chosen.append(section)
            total += section.estimate_s
    return chosen, total


def list_table(table) -> str:
    rows = ["| section | step | limit | estimate | runs |", "|---|---|---|---|---|"]
    for s in [table.BUILD, *table.SECTIONS]:
        if s.command:
            runs = "`" + " ".join(s.command) + "`"
        else:
            runs = "pytest " + " ".join(f"`{t}`" for t in s.tests)
            runs += f" -k `{s.k}`" if s.k else ""
            runs += f" -m `{s.m}`" if s.m else ""
            runs += f" -n {s.workers}" if s.workers else ""
        rows.append(f"| {s.name} | {s.step} | {s.limit_s} s | {s.estimate_s} s | {runs} |")
    totals = {}
    for s in table.SECTIONS:
        totals[s.step] = totals.get(s.step, 0) + s.estimate_s
    rows += ["", "Estimated per step (with a fresh build): " + ", ".join(f"{k} {v + table.BUILD.estimate_s} s" for k, v in totals.items())]
    return "\n".join(rows)


def default_output(steps: list[str], sections: list[str]) -> str:
    if sections:
        name = "gpu-test-sections"
    elif "all" in steps:
        name = "gpu-test"
    else:
        name = "gpu-test-" + "-".join(steps)
    return os.path.join(REPORTS_DIR, name + ".md")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter, allow_abbrev=False)
    parser.add_argument("--table", default=os.path.join(HERE, "gpu_sections.py"), help="the section table (a Python file)")
    parser.add_argument("--steps", default="all", help="comma-separated steps of the table, or all")
    parser.add_argument("--sections", default="", help="comma-separated section names: run only these (after dependencies, build)")
    parser.add_argument("--deadline", type=float, default=540, help="seconds for the whole run from --started; 0: none")
    parser.add_argument("--started", type=float, default=None, help="when the command began (seconds since the epoch)")
    parser.add_argument("--output", default=None, help="the report (default test/reports/gpu-test[-STEPS].md)")
    parser.add_argument("--pytest-args", default="", help="added to every pytest section, as one string")
    parser.add_argument("--bench-args", default="", help="added to every benchmark section, as one string")
    parser.add_argument("--results-dir", default=RESULTS_DIR, help="where benchmarks/run.py writes its results")
    parser.add_argument("--reserve-s", type=float, default=REPORT_RESERVE_S, help="seconds kept before the deadline for the report")
    parser.add_argument("--min-start-s", type=float, default=MIN_START_S, help="a section is not started with less time left")
    parser.add_argument("--commit", default="", help="the commit tested, where the tree has no git metadata (GPU_TEST_COMMIT)")
    parser.add_argument("--history", default=HISTORY_FILE, help="the history of sections to update (GPU runs only)")
    parser.add_argument("--list", action="store_true", help="print the section table and exit")
    parser.add_argument("--next", type=float, metavar="SECONDS", help="print the sections to run next in a command of SECONDS and exit")
    parser.add_argument("--warm", action="store_true", help="with --next: the machine is warm (the build takes seconds)")
    args = parser.parse_args(argv)
    table = load_table(args.table)
    if args.list:
        print(list_table(table))
        return 0
    if args.next is not None:
        history = SectionHistory.read(args.history)
        chosen, total = next_sections(table, history, args.next, args.warm)
        if not chosen:
            print(f"no section fits {args.next:.0f} s")
            return 1
        for section in chosen:
            print(f"{section.name:<18} est. {section.estimate_s:>4} s  last GPU run: {history.last_run(section.name)}")
        print(f"make gpu-test GPU_TEST_SECTIONS={','.join(s.name for s in chosen)}  # about {total:.0f} s")
        return 0
    args.steps = [s for s in args.steps.split(",") if s]
    args.sections = [s for s in args.sections.split(",") if s]
    known_steps = set(table.STEPS) | {"all"}
    if not args.steps or set(args.steps) - known_steps:
        parser.error(f"--steps takes a comma-separated list of {', '.join(table.STEPS)}, or all; got {','.join(args.steps)!r}")
    names = {s.name for s in table.SECTIONS} | {"unassigned"}
    if set(args.sections) - names:
        parser.error(f"unknown sections {sorted(set(args.sections) - names)}; the table has {', '.join(sorted(names))}")
    args.output = args.output or default_output(args.steps, args.sections)
    args.results_dir = os.path.abspath(args.results_dir)
    return Run(args, table).execute()


if __name__ == "__main__":
    sys.exit(main())
