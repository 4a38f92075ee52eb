"""Runs a command under a sanitized build of torch_accel._C: `make asan`, `make tsan`.

    python tools/sanitized_run.py run --sanitizer address|thread --library SO --build DIR
        [--suppressions FILE] -- COMMAND...
    python tools/sanitized_run.py check-planted --sanitizer address|thread --build DIR

``run`` starts COMMAND (pytest, in make's recipes) with the sanitizer's runtime
preloaded and its options in the environment, which every subprocess inherits,
and fails (exit status 1) if COMMAND failed or if any sanitizer report was
written to DIR/reports: a finding in a subprocess whose failure a test expected (fork,
DataLoader workers, the OpInfo sweep's crash-isolated children, distributed
ranks) still fails the run. ``check-planted`` builds test/sanitizers/
planted_defects.cpp (a small Python module, never part of torch_accel) with the
sanitizer's flags and checks that ``run`` fails on each of its defects, and
names the defect in the report; it proves that a finding fails the run.
docs/sanitizers.md says why each option is set.
"""

from __future__ import annotations

import argparse
import glob
import os
import re
import shutil
import subprocess
import sys
import sysconfig

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PLANTED_SOURCE = os.path.join(ROOT, "test", "sanitizers", "planted_defects.cpp")
UBSAN_REPORT_PATH_SOURCE = os.path.join(ROOT, "test", "sanitizers", "ubsan_report_path.c")

# The runtime library each sanitizer links (found in the library's ldd output).
RUNTIME = {"address": "libasan", "thread": "libtsan"}

# The compiler flags of setup.py's TORCH_ACCEL_SANITIZE modes, for the planted
# module: the same checks, the same fatality.
FLAGS = {
    "address": ["-fsanitize=address,undefined", "-fno-sanitize-recover=all"],
    "thread": ["-fsanitize=thread"],
}

# Each planted defect: the function of planted_defects.cpp that commits it, how
# it is reached (in the process, or in a subprocess whose failure the parent
# ignores) and what its report must say.
PLANTED = {
    "address": [
        ("heap_buffer_overflow", "direct", r"ERROR: AddressSanitizer: heap-buffer-overflow"),
        ("heap_buffer_overflow", "ignored-subprocess", r"ERROR: AddressSanitizer: heap-buffer-overflow"),
        ("signed_overflow", "direct", r"runtime error: signed integer overflow"),
        ("signed_overflow", "ignored-subprocess", r"runtime error: signed integer overflow"),
    ],
    "thread": [
        ("data_race", "direct", r"WARNING: ThreadSanitizer: data race"),
        ("data_race", "ignored-subprocess", r"WARNING: ThreadSanitizer: data race"),
    ],
}


def linked(library: str, name: str) -> str:
    """The path of the library ``name`` (a prefix: libasan) that ``library`` links."""
    ldd = subprocess.run(["ldd", library], capture_output=True, text=True, check=True).stdout
    for line in ldd.splitlines():
        words = line.split()
        if words and words[0].startswith(name) and len(words) > 2:
            return words[2]
    raise SystemExit(f"{library} does not link {name}: is it a sanitized build?")


def build_ubsan_report_path(build: str) -> str:
    """test/sanitizers/ubsan_report_path.c, compiled into ``build``: see there."""
    helper = os.path.join(build, "ubsan_report_path.so")
    cc = os.environ.get("CC", "gcc")
    subprocess.run([cc, "-shared", "-fPIC", "-O1", UBSAN_REPORT_PATH_SOURCE, "-o", helper, "-ldl", "-lubsan"], check=True)
    return helper


def preloaded_libraries(sanitizer: str, library: str, build: str) -> list[str]:
    """The libraries to preload, in order.

    The sanitizer's runtime must be the first library of the process (Python
    does not link it). Under ASan, gcc's UBSan runtime and the helper that
    gives it its report path follow. libstdc++ comes last: Python does not link
    it, and ASan's __cxa_throw interceptor finds the real one only if it is
    loaded when the runtime starts (else the first C++ exception aborts)."""
    if sanitizer == "address":
        runtimes = [linked(library, "libasan"), linked(library, "libubsan"), build_ubsan_report_path(build)]
    else:
        runtimes = [linked(library, "libtsan")]
    return [*runtimes, linked(library, "libstdc++")]


def sanitizer_environment(sanitizer: str, library: str, build: str, reports: str, suppressions: str | None) -> dict:
    env = dict(os.environ)
    env["LD_PRELOAD"] = " ".join(preloaded_libraries(sanitizer, library, build))
    suppress = f":suppressions={os.path.abspath(suppressions)}" if suppressions else ""
    if sanitizer == "address":
        # detect_leaks=0: Python and PyTorch keep memory until exit on purpose.
        # allocator_may_return_null: tests ask for impossibly large blocks and
        # expect PyTorch's out-of-memory error.
        env["ASAN_OPTIONS"] = f"detect_leaks=0:allocator_may_return_null=1:log_path={reports}/asan{suppress}"
        env["UBSAN_OPTIONS"] = f"print_stacktrace=1:halt_on_error=1:log_path={reports}/ubsan"
        env["TORCH_ACCEL_UBSAN_LOG_PATH"] = f"{reports}/ubsan"  # what gets it there: ubsan_report_path.c
    else:
        # ignore_noninstrumented_modules: PyTorch, Python and their libraries
        # are not instrumented; TSan then ignores the memory accesses its
        # interceptors see from them (memcpy, free, ...), which it cannot order
        # against their own (uninstrumented) atomics and would report as races.
        # Accesses by accel's instrumented code are all still checked.
        # allocator_may_return_null as for ASan; second_deadlock_stack: both
        # stacks of a lock-order inversion.
        env["TSAN_OPTIONS"] = (
            f"ignore_noninstrumented_modules=1:allocator_may_return_null=1:second_deadlock_stack=1"
            f":log_path={reports}/tsan{suppress}"
        )
    return env


def run(sanitizer: str, library: str, build: str, suppressions: str | None, command: list[str], reports_name: str = "reports") -> tuple[int, list[str]]:
    """Runs ``command``; returns its exit status and the reports written (to ``build``/reports)."""
    build = os.path.abspath(build)
    reports = os.path.join(build, reports_name)
    shutil.rmtree(reports, ignore_errors=True)
    os.makedirs(reports)
    env = sanitizer_environment(sanitizer, library, build, reports, suppressions)
    status = subprocess.run(command, env=env).returncode
    return status, sorted(glob.glob(os.path.join(reports, "*")))


def print_reports(paths: list[str]) -> None:
    print(f"== {len(paths)} sanitizer report(s):")
    for path in paths:
        print(f"-- {path}")
        with open(path, errors="replace") as f:
            print(f.read())


def build_planted(sanitizer: str, build: str) -> str:
    """Compiles the planted module into ``build``/planted and returns its path."""
    out_dir = os.path.join(build, "planted")
    os.makedirs(out_dir, exist_ok=True)
    module = os.path.join(out_dir, "planted_defects" + sysconfig.get_config_var("EXT_SUFFIX"))
    cxx = os.environ.get("CXX", "g++")
    command = [
        cxx, "-shared", "-fPIC", "-std=c++17", "-O1", "-g", "-fno-omit-frame-pointer", "-pthread",
        *FLAGS[sanitizer], f"-I{sysconfig.get_paths()['include']}", PLANTED_SOURCE, "-o", module,
    ]  # fmt: skip
    subprocess.run(command, check=True)
    return module


def check_planted(sanitizer: str, build: str) -> int:
    module = build_planted(sanitizer, build)
    directory = os.path.dirname(module)
    caught = []
    for function, how, expected in PLANTED[sanitizer]:
        call = f"import planted_defects; planted_defects.{function}()"
        if how == "ignored-subprocess":
            # The parent ignores its child's failure and exits 0: only the
            # report file can fail the run.
            call = f"import subprocess, sys; subprocess.run([sys.executable, '-c', {call!r}]); sys.exit(0)"
        command = [sys.executable, "-c", call]
        os.environ["PYTHONPATH"] = directory  # for the subprocess too
        status, paths = run(sanitizer, module, directory, None, command, reports_name=f"reports-{function}-{how}")
        text = "".join(open(p, errors="replace").read() for p in paths)
        named = re.search(expected, text) is not None and function in text
        failed = status != 0 or bool(paths)
        verdict = "caught" if failed and named else "MISSED"
        print(f"planted {function} ({how}): exit status {status}, {len(paths)} report(s) -> {verdict}")
        if verdict == "MISSED":
            print_reports(paths)
        caught.append(verdict == "caught")
    return 0 if all(caught) else 1


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="action", required=True)
    run_parser = sub.add_parser("run")
    run_parser.add_argument("--sanitizer", choices=sorted(RUNTIME), required=True)
    run_parser.add_argument("--library", required=True, help="the sanitized _C: its runtime is preloaded")
    run_parser.add_argument("--build", required=True, help="the build's directory: reports go to its reports/")
    run_parser.add_argument("--suppressions")
    run_parser.add_argument("command", nargs=argparse.REMAINDER)
    planted_parser = sub.add_parser("check-planted")
    planted_parser.add_argument("--sanitizer", choices=sorted(RUNTIME), required=True)
    planted_parser.add_argument("--build", required=True)
    args = parser.parse_args(argv)
    if args.action == "check-planted":
        return check_planted(args.sanitizer, args.build)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("run: no command after --")
    status, paths = run(args.sanitizer, args.library, args.build, args.suppressions, command)
    if paths:
        print_reports(paths)
        return 1
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
