"""PyTorch's OpInfo database, run on accel and compared with the target device.

Every entry of ``torch.testing._internal.common_methods_invocations.op_db`` is a
PyTorch operator with a generator of sample inputs. For each op and each dtype in
``DTYPES`` that the op supports on the target device (``cpu`` on the host runtime,
``cuda`` on the CUDA runtime), the first ``SAMPLES_PER_DTYPE`` samples are made on
the target device and copied to accel with the same strides and aliasing. The op
(and its in-place variant, on fresh copies) runs on both copies under the same
RNG seed, and accel must do exactly what the target does, since the alias
fallback runs the very same kernel over the same bytes:

- every output: same structure, device (accel for the target's device), shape,
  dtype, strides, storage offset and aliasing (a view of the same argument, or
  fresh memory), and the same values bitwise: ``assert_close(rtol=0, atol=0,
  equal_nan=True)``, plus a byte comparison for signed zeros;
- every tensor argument afterwards (in-place ops, ops with mutable arguments);
- where the target raises, accel raises the same exception type with the same
  message (device names aside). Such a sample compares errors, not results: an
  op all of whose samples raise must be listed in RAISES_ALIKE with the reason,
  and the summary counts these samples apart.

Exceptions to the bitwise rule are listed with their reasons: EXCLUDED (not run),
UNINITIALIZED_OUTPUTS (metadata only), NONDETERMINISTIC_ON_TARGET (tolerances,
for the samples of linalg.lstsq that use the gelsy driver). The summary says how
many ops and samples were compared each way.

The ops run in a worker process, so that a crash or hang in one op fails that op
and not the sweep (see "Crash isolation"). ``test_opinfo_ops_match_target``
prints the coverage figure and writes ``build/opinfo-coverage.json`` (passed and
failed ops with their messages, timings). It fails when an op fails that is not
in ``KNOWN_FAILURES`` or fails otherwise than listed there, when one listed
there passes (the list must stay honest),
or when fewer than ``MIN_OPS_TRIED`` ops ran (the sweep must not go vacuous).
``test_comparison_catches_differences`` checks the comparison itself.

See the figure with ``pytest test/test_opinfo.py -s``.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import re
import subprocess
import sys
import time
import traceback
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable

import pytest
import torch

import torch_accel

from _comparison import (
    ACCEL,
    CLOSE,
    CPU_TENSOR_ARGUMENTS,
    EXACT,
    METADATA,
    TARGET,
    Copier,
    compare_values,
    manual_seed,
    opinfo_samples,
    tensor_leaves,
)

# Needs expecttest (requirements-dev.txt); a missing module must fail, not skip.
from torch.testing._internal.common_methods_invocations import op_db  # noqa: E402


# float32 covers most kernels; the others reach integer, boolean and reduced
# precision kernels, and ops that only exist for them (bitwise ops, gcd, ...).
DTYPES = (torch.float32, torch.int64, torch.bool, torch.bfloat16, torch.complex64)
# The first samples of each dtype. On CUDA every sample costs more (first use of
# each kernel, synchronizing copies), so fewer are taken there.
SAMPLES_PER_DTYPE = {torch.float32: 100, torch.int64: 20, torch.bool: 20, torch.bfloat16: 20, torch.complex64: 20}
if TARGET == "cuda":
    SAMPLES_PER_DTYPE = {torch.float32: 20, torch.int64: 5, torch.bool: 5, torch.bfloat16: 5, torch.complex64: 5}
# TORCH_ACCEL_OPINFO_SAMPLES=N takes at most the first N samples of each dtype,
# for a quick run (make asan runs them all): every op still runs, at a fraction
# of the time (1: 3,021 samples instead of 28,850 on the host runtime). The
# lists' honesty (a known failure that passes, an op that only raised) is then
# not judged: the samples that show it may be among those left out.
SAMPLES_LIMIT = int(os.environ.get("TORCH_ACCEL_OPINFO_SAMPLES") or 0)
if SAMPLES_LIMIT > 0:
    SAMPLES_PER_DTYPE = {dtype: min(n, SAMPLES_LIMIT) for dtype, n in SAMPLES_PER_DTYPE.items()}
MIN_OPS_TRIED = 600
SEED = 1234
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COVERAGE_FILE = os.path.join(REPO, "build", "opinfo-coverage.json")

# Ops not run at all, each with the reason the comparison would be meaningless.
# Keys are op keys: the OpInfo name, plus "." and the variant name if it has one.
EXCLUDED: dict[str, str] = {
    **{
        name: "not an ATen operator: torch.cuda.jiterator compiles and launches CUDA kernels on its "
        "arguments directly, bypassing the dispatcher (CUDA only)"
        for name in (
            "jiterator_unary",
            "jiterator_binary",
            "jiterator_binary_return_by_ref",
            "jiterator_4inputs_with_extra_args",
            "jiterator_2inputs_2outputs",
        )
    },
}

# Ops whose outputs hold uninitialized memory: only their metadata (shape, dtype,
# strides, offset, aliasing, device) is compared, never their values.
UNINITIALIZED_OUTPUTS = {
    "empty",
    "empty_like",
    "empty_permuted",
    "empty_strided",
    "new_empty",
    "new_empty_strided",
}

# Ops whose target kernels give different bits from run to run for the same
# input: those samples are compared with tolerances (CLOSE) instead of bitwise.
# Other such cases are caught by running the target again (up to TARGET_RERUNS
# times) when accel differs, and counted as "not compared" rather than failed.
# linalg.lstsq: LAPACK's gelsy driver (the CPU's default driver) gives other
# last bits from one run to the next on the same input (MKL's LAPACK; seen on
# the 2-core AMD EPYC VM); the samples with another driver (gels, gelsd,
# gelss) are compared bitwise.
NONDETERMINISTIC_ON_TARGET = {
    "cpu": {
        "linalg.lstsq": "LAPACK's 'gelsy' driver differs in the last bits between runs",
        "linalg.lstsq.grad_oriented": "LAPACK's 'gelsy' driver differs in the last bits between runs",
    },
}.get(TARGET, {})
TARGET_RERUNS = 2


def sample_mode(key: str, sample, mode: str) -> str:
    """How one sample of op ``key`` is compared: ``mode``, except that
    linalg.lstsq is compared bitwise where its driver is not gelsy."""
    if mode == CLOSE and key in NONDETERMINISTIC_ON_TARGET and sample.kwargs.get("driver", "gelsy") != "gelsy":
        return EXACT
    return mode


def without_devices(message: str) -> str:
    """An error message with device names (accel's, the target's) and addresses
    made alike, to compare the two devices' errors."""
    message = re.sub(r",\s*device='[^']*'", "", message)  # a tensor's repr names its device unless it is cpu
    message = re.sub(rf"\b(?:{ACCEL}|{TARGET})(?::\d+)?\b", "<device>", message, flags=re.I)
    return re.sub(r"0x[0-9a-f]+", "<address>", message)

# Ops that fail on accel today, per target: the reason, and the failure (a
# regular expression every failing sample's line must match: an op that starts
# failing in another way fails the sweep). Every entry must still fail: an op
# that starts passing must be removed from here.
_KNOWN_FAILURES_EVERYWHERE: dict[str, dict[str, str]] = {}
_DEVICE_TYPE_CHOICE = (
    "fallback bug: differs from CUDA's result; likely the composite op picks its kernel by device "
    "type (cuDNN / fused CUDA kernels for cuda tensors) and accel tensors get another one"
)
_VALUES_DIFFER = {"reason": _DEVICE_TYPE_CHOICE + ": values differ", "failure": r"Tensor-likes are not (equal|close)|different bits"}
KNOWN_FAILURES: dict[str, dict[str, str]] = {
    "cpu": _KNOWN_FAILURES_EVERYWHERE,
    "cuda": {
        **_KNOWN_FAILURES_EVERYWHERE,
        "nn.functional.batch_norm": _VALUES_DIFFER,
        "nn.functional.batch_norm.without_cudnn": _VALUES_DIFFER,
        "nn.functional.instance_norm": _VALUES_DIFFER,
        "nn.functional.grid_sample": _VALUES_DIFFER,
        "nn.functional.rms_norm": {
            "reason": _DEVICE_TYPE_CHOICE + ": strides of empty outputs differ",
            "failure": r"accel has \(torch\.Size\(\[.*\), cuda \(",
        },
    },
}.get(TARGET, {})


# Ops whose every sample raises on the target (and on accel, with the same
# message): they compare errors, not results, and each is listed with the
# reason. An op that raises for all its samples and is not listed fails the
# sweep. (None in torch 2.11 on the host runtime.)
RAISES_ALIKE: dict[str, str] = {}


def op_key(op) -> str:
    return f"{op.name}.{op.variant_test_name}" if op.variant_test_name else op.name


# ---------------------------------------------------------------------------
# Running an op and comparing results
# ---------------------------------------------------------------------------


@dataclass
class Outcome:
    """What one call did: its result, or the exception it raised."""

    result: Any = None
    error: BaseException | None = None


def call(fn: Callable, input: Any, args: tuple, kwargs: dict) -> Outcome:
    # The same seed for both devices: random ops must draw the same numbers.
    manual_seed(SEED)
    try:
        return Outcome(result=fn(input, *args, **kwargs))
    except Exception as error:  # noqa: BLE001 - any exception is an outcome to compare
        return Outcome(error=error)


def check_call(
    fn: Callable, sample, mode: str, cpu_args: bool, note: Callable[[str], None] = lambda phase: None
) -> bool:
    """Runs ``fn`` on a target copy and an accel copy of ``sample`` and compares
    the outcomes; raises AssertionError (or accel's own exception) on a difference.
    Returns whether both raised. ``note`` hears each phase as it begins (to tell
    where a crash happened)."""
    # Fresh copies: earlier calls may have mutated the sample.
    note("copying the sample")
    target_args = Copier(TARGET, cpu_args).sample(sample)
    accel_args = Copier(ACCEL, cpu_args).sample(sample)
    note(f"running on {TARGET}")
    target = call(fn, *target_args)
    note("running on accel")
    accel = call(fn, *accel_args)
    note("comparing")
    if target.error is not None:
        if accel.error is None:
            raise AssertionError(f"target raised {describe(target.error)}; accel did not")
        if type(accel.error) is not type(target.error):
            raise AssertionError(f"target raised {describe(target.error)}; accel raised {describe(accel.error)}")
        if without_devices(str(accel.error)) != without_devices(str(target.error)):
            raise AssertionError(f"target raised {describe(target.error)}; accel raised another message: {describe(accel.error)}")
        return True
    if accel.error is not None:
        raise accel.error
    try:
        compare_outcomes(accel.result, accel_args, target.result, target_args, mode)
    except AssertionError:
        # A target kernel that differs from run to run cannot be matched bitwise
        # either: before blaming accel, run the target again (the known cases are
        # in NONDETERMINISTIC_ON_TARGET; this catches the others).
        for _ in range(TARGET_RERUNS):
            note(f"running on {TARGET} again")
            again_args = Copier(TARGET, cpu_args).sample(sample)
            again = call(fn, *again_args)
            try:
                compare_outcomes(again.result, again_args, target.result, target_args, mode, check_device=False)
            except AssertionError as error:
                raise TargetNondeterministic(str(error)) from None
        raise
    return False


class TargetNondeterministic(Exception):
    """The target gave different results for the same sample in two runs."""


def compare_outcomes(
    result: Any, args: Any, target_result: Any, target_args: Any, mode: str, check_device: bool = True
) -> None:
    """Compares a call's result and its arguments afterwards with the target's."""
    compare_values(result, target_result, "output", mode, args, target_args, check_device)
    # Tensor arguments after the call: in-place ops and ops with mutable arguments.
    # (Other leaves differ on purpose: device arguments were redirected to accel.)
    compare_values(
        tensor_leaves(args), tensor_leaves(target_args), "argument after the call", mode, args, target_args, False
    )


def first_line(error: BaseException) -> str:
    lines = str(error).strip().splitlines()
    return lines[0] if lines else ""


def describe(error: BaseException) -> str:
    return f"{type(error).__name__}: {first_line(error)}"


# ---------------------------------------------------------------------------
# The sweep
# ---------------------------------------------------------------------------


@dataclass
class OpReport:
    key: str
    samples_tried: int = 0
    samples_passed: int = 0
    samples_nondeterministic: int = 0  # not compared: the target disagreed with itself
    samples_raised: int = 0  # passed by raising the target's exception, with its message
    samples_by_mode: dict = field(default_factory=dict)  # compared values: EXACT, CLOSE or METADATA -> count
    seconds: float = 0.0
    failures: list[str] = field(default_factory=list)  # one line per failing sample
    skipped: str | None = None  # why nothing ran (no dtype supported, samples failed to build)


def run_op(
    op, note: Callable[[str], None] = lambda where: None, samples_per_dtype: dict | None = None
) -> OpReport:
    """Runs the samples of ``op`` (``samples_per_dtype``: how many of each
    dtype, SAMPLES_PER_DTYPE unless given); ``note`` hears where it is (for
    crash reports)."""
    samples_per_dtype = samples_per_dtype or SAMPLES_PER_DTYPE
    report = OpReport(op_key(op))
    supported = op.supported_dtypes(TARGET)
    dtypes = [dtype for dtype in DTYPES if dtype in supported]
    if not dtypes:
        report.skipped = f"supports none of {[str(d) for d in DTYPES]} on {TARGET}"
        return report
    key = report.key
    mode = METADATA if key in UNINITIALIZED_OUTPUTS else CLOSE if key in NONDETERMINISTIC_ON_TARGET else EXACT
    cpu_args = op.name in CPU_TENSOR_ARGUMENTS
    variants = [("", op)]
    if op.inplace_variant is not None:
        variants.append(("inplace", op.inplace_variant))
    for dtype in dtypes:
        try:
            samples = opinfo_samples(op, TARGET, dtype, samples_per_dtype[dtype])
        except Exception as error:  # noqa: BLE001
            report.failures.append(f"{dtype}: building samples on {TARGET} raised {describe(error)}")
            continue
        for index, sample in enumerate(samples):
            for variant, fn in variants:
                report.samples_tried += 1
                where = f"{variant} {dtype} sample {index}".lstrip()
                try:
                    this_mode = sample_mode(key, sample, mode)
                    raised = check_call(fn, sample, this_mode, cpu_args, lambda phase: note(f"{where}, {phase}"))
                    report.samples_passed += 1
                    report.samples_raised += raised
                    if not raised:
                        report.samples_by_mode[this_mode] = report.samples_by_mode.get(this_mode, 0) + 1
                except TargetNondeterministic:
                    report.samples_nondeterministic += 1
                except Exception as error:  # noqa: BLE001
                    report.failures.append(f"{where}: {describe(error)}")
    return report


@contextlib.contextmanager
def deterministic_target():
    """On CUDA some kernels (atomics: index_add, scatter_add, ...) differ from run
    to run; the deterministic implementations make both runs comparable. The CPU
    kernels are deterministic already, and are left as they are."""
    if TARGET != "cuda":
        yield
        return
    previous = (torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled())
    torch.use_deterministic_algorithms(True, warn_only=True)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(previous[0], warn_only=previous[1])


def run_ops(ops, log_path: str) -> None:
    """Runs ``ops`` (pairs of op_db index and OpInfo) in this process, appending
    to the results log at ``log_path`` (see ResultsLog)."""
    where_fd = os.open(log_path + ".where", os.O_WRONLY | os.O_CREAT)
    with open(log_path, "a") as log, deterministic_target(), warnings.catch_warnings():
        warnings.simplefilter("ignore")

        def write(record: dict) -> None:
            log.write(json.dumps(record) + "\n")
            log.flush()

        def note(where: str) -> None:
            # Where the running op is, for a crash report: overwritten in place,
            # one system call, many times per op.
            os.pwrite(where_fd, where.encode()[:WHERE_SIZE].ljust(WHERE_SIZE), 0)

        for index, op in ops:
            note("building samples")
            write({"start": index, "key": op_key(op)})
            start = time.monotonic()
            try:
                report = run_op(op, note)
            except Exception:  # noqa: BLE001 - a broken op must not end the sweep
                report = OpReport(op_key(op))
                report.failures.append("harness error: " + traceback.format_exc().strip().splitlines()[-1])
            report.seconds = round(time.monotonic() - start, 3)
            write({"done": index, "report": report.__dict__})


# ---------------------------------------------------------------------------
# Crash isolation
#
# A fallback bug can crash the process (a segfault, an abort from a C++ check)
# or hang it, and must not take the sweep down with it. So the ops run in child
# processes that append to a results log one JSON line when they start an op and
# one when they finish it. When a child dies, or an op takes longer than
# OP_TIMEOUT seconds, the op it was running is recorded as failed and a new child
# goes on with the next op.
#
# The test starts one worker process (this file, run with --worker). The worker
# imports torch and op_db once and forks a child for the ops, and a new one after
# each crash: cheap, and safe because neither accel nor CUDA is initialized in
# the worker. Where it cannot fork, the worker runs the ops itself, and the test
# starts a new worker after a crash.
# ---------------------------------------------------------------------------

OP_TIMEOUT = 120
WHERE_SIZE = 200  # bytes of the file that says where the running op is


class ResultsLog:
    """Reads a results log as it grows: {"start": index, "key": key} when an op
    starts, {"done": index, "report": OpReport fields} when it ends. Beside it,
    the file ``<log>.where`` says where in its samples the running op is."""

    def __init__(self, path: str):
        self.path = path
        self.offset = 0
        self.reports: dict[int, OpReport] = {}
        self.running: tuple[int, str] | None = None  # (index, key) of an op started, not done
        self.started_at = 0.0

    def read(self) -> None:
        with open(self.path, "rb") as f:
            f.seek(self.offset)
            for line in f:
                if not line.endswith(b"\n"):
                    break  # still being written: read it next time
                self.offset += len(line)
                record = json.loads(line)
                if "start" in record:
                    self.running, self.started_at = (record["start"], record["key"]), time.monotonic()
                else:
                    self.reports[record["done"]] = OpReport(**record["report"])
                    self.running = None

    def fail_running(self, reason: str) -> int:
        """Records the running op as failed (the process running it died); returns its index."""
        index, key = self.running
        with open(self.path + ".where", errors="replace") as f:
            where = f.read().strip()
        report = OpReport(key, samples_tried=1, failures=[f"{where}: {reason}"])
        with open(self.path, "a") as f:
            f.write(json.dumps({"done": index, "report": report.__dict__}) + "\n")
        self.read()
        return index


def supervise(log: ResultsLog, poll: Callable[[], int | None], kill: Callable[[], None], timeout: float):
    """Follows ``log`` until the process (``poll`` gives its exit status, or
    None while it runs) exits; kills it when an op runs longer than ``timeout``.
    Returns (exit status, timed out)."""
    while True:
        status = poll()
        log.read()  # after poll: a process that exited has written everything
        if status is not None:
            return status, False
        if log.running is not None and time.monotonic() - log.started_at > timeout:
            kill()
            return poll_until_exit(poll), True
        time.sleep(0.05)


def poll_until_exit(poll: Callable[[], int | None]) -> int:
    while (status := poll()) is None:
        time.sleep(0.01)
    return status


def crash_reason(status: int, timed_out: bool, stderr_path: str) -> str:
    """One line saying how a process died, from its exit status and stderr."""
    if timed_out:
        return f"timed out after {OP_TIMEOUT} s"
    how = f"signal {-status}" if status < 0 else f"exit status {status}"
    with open(stderr_path, errors="replace") as f:
        lines = [line.strip() for line in f if line.strip()]
    fatal = [line for line in lines if line.startswith(("Fatal Python error", "terminate called"))]
    detail = fatal[0] if fatal else (lines[-1] if lines else "")
    return f"process died ({how}): {detail}"


def worker_main(log_path: str, first_index: int) -> None:
    """The worker process: runs the ops of op_db from ``first_index`` on."""
    ops = [(i, op) for i, op in enumerate(op_db) if i >= first_index and op_key(op) not in EXCLUDED]
    if not hasattr(os, "fork") or torch_accel.is_initialized() or torch.cuda.is_initialized():
        run_ops(ops, log_path)
        return
    log = ResultsLog(log_path)
    log.read()
    for attempt in itertools.count():
        remaining = [(i, op) for i, op in ops if i not in log.reports]
        if not remaining:
            return
        stderr_path = f"{log_path}.child-{attempt}.stderr"
        pid = os.fork()
        if pid == 0:  # the child: its stderr to its own file, for crash_reason
            os.dup2(os.open(stderr_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC), 2)
            status = 1
            try:
                run_ops(remaining, log_path)
                status = 0
            finally:
                os._exit(status)  # no atexit handlers, nothing of the worker's

        def poll() -> int | None:
            done, wait_status = os.waitpid(pid, os.WNOHANG)
            return None if done == 0 else os.waitstatus_to_exitcode(wait_status)

        status, timed_out = supervise(log, poll, lambda: os.kill(pid, 9), OP_TIMEOUT)
        if log.running is not None:
            log.fail_running(crash_reason(status, timed_out, stderr_path))
        elif status != 0:
            raise RuntimeError(f"an OpInfo child failed outside any op (status {status}), see {stderr_path}")


def run_sweep(workdir: str) -> list[OpReport]:
    """Runs every op of op_db in worker processes and returns their reports."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([REPO, env.get("PYTHONPATH", "")])
    env["PYTHONFAULTHANDLER"] = "1"  # a crash prints the Python stack to stderr
    log_path = os.path.join(workdir, "results.jsonl")
    open(log_path, "w").close()
    log = ResultsLog(log_path)
    first_index = 0
    for attempt in itertools.count():
        stderr_path = os.path.join(workdir, f"worker-{attempt}.stderr")
        with open(stderr_path, "w") as stderr:
            worker = subprocess.Popen(
                [sys.executable, os.path.abspath(__file__), "--worker", log_path, str(first_index)],
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=stderr,
            )
        # A forking worker handles its children's timeouts itself: give it longer.
        status, timed_out = supervise(log, worker.poll, worker.kill, OP_TIMEOUT + 30)
        if log.running is None:
            if status != 0:
                with open(stderr_path, errors="replace") as f:
                    raise RuntimeError(f"the OpInfo worker failed outside any op:\n{f.read()[-3000:]}")
            return [log.reports[index] for index in sorted(log.reports)]
        first_index = log.fail_running(crash_reason(status, timed_out, stderr_path)) + 1
    raise AssertionError("unreachable")


def summarize(reports: list[OpReport], seconds: float) -> dict:
    tried = [r for r in reports if r.skipped is None]
    passed = [r.key for r in tried if not r.failures]
    failed = {r.key: r.failures for r in tried if r.failures}
    samples_tried = sum(r.samples_tried for r in tried)
    samples_passed = sum(r.samples_passed for r in tried)
    nondeterministic = {r.key: r.samples_nondeterministic for r in tried if r.samples_nondeterministic}
    # Ops that passed only because every sample raised on both devices.
    only_raised = [r.key for r in tried if not r.failures and r.samples_raised == r.samples_passed]
    # How the samples that gave results were compared, and the ops with any
    # sample compared other than bitwise.
    by_mode = {m: sum(r.samples_by_mode.get(m, 0) for r in tried) for m in (EXACT, CLOSE, METADATA)}
    ops_by_mode = {m: sorted(r.key for r in tried if r.samples_by_mode.get(m)) for m in (CLOSE, METADATA)}
    bitwise_only = [key for key in passed if key not in ops_by_mode[CLOSE] + ops_by_mode[METADATA] + only_raised]
    samples_raised = sum(r.samples_raised for r in tried)
    return {
        "target": TARGET,
        "dtypes": [str(d) for d in DTYPES],
        "samples_per_dtype": {str(d): n for d, n in SAMPLES_PER_DTYPE.items()},
        "seconds": round(seconds, 1),
        "ops_tried": len(tried),
        "ops_passed": len(passed),
        "samples_tried": samples_tried,
        "samples_passed": samples_passed,
        "samples_nondeterministic": sum(nondeterministic.values()),
        "coverage": f"ops {len(passed)}/{len(tried)}, samples {samples_passed}/{samples_tried}"
        + (f" ({sum(nondeterministic.values())} not compared: target nondeterministic)" if nondeterministic else "")
        + f"; {len(bitwise_only)} ops bitwise in every sample, {len(ops_by_mode[CLOSE])} with samples within tolerance "
        f"({', '.join(ops_by_mode[CLOSE])}), {len(ops_by_mode[METADATA])} on metadata only; samples: {by_mode[EXACT]} "
        f"bitwise, {by_mode[CLOSE]} within tolerance, {by_mode[METADATA]} metadata, {samples_raised} raised alike",
        "ops_bitwise_in_every_sample": len(bitwise_only),
        "ops_with_samples_within_tolerance": ops_by_mode[CLOSE],
        "ops_on_metadata_only": ops_by_mode[METADATA],
        "samples_by_mode": by_mode,
        "samples_raised_alike": samples_raised,
        "passed": passed,
        "failed": failed,
        "nondeterministic_on_target": nondeterministic,
        "passed_only_by_raising": only_raised,
        "slowest_ops": {r.key: r.seconds for r in sorted(reports, key=lambda r: -r.seconds)[:20]},
        "skipped": {r.key: r.skipped for r in reports if r.skipped is not None},
        "excluded": EXCLUDED,
    }


def test_opinfo_ops_match_target(tmp_path):
    start = time.monotonic()
    reports = run_sweep(str(tmp_path))
    summary = summarize(reports, time.monotonic() - start)
    os.makedirs(os.path.dirname(COVERAGE_FILE), exist_ok=True)
    with open(COVERAGE_FILE, "w") as f:
        json.dump(summary, f, indent=1)
    print(f"\nOpInfo on accel vs {TARGET}: {summary['coverage']} in {summary['seconds']} s ({COVERAGE_FILE})")

    failed = summary["failed"]
    new_failures = {key: lines for key, lines in failed.items() if key not in KNOWN_FAILURES}
    # A known failure must fail as documented, every failing sample of it.
    for key, lines in failed.items():
        if key in KNOWN_FAILURES:
            other = [line for line in lines if not re.search(KNOWN_FAILURES[key]["failure"], line)]
            if other:
                new_failures[key] = [f"fails otherwise than KNOWN_FAILURES says: {line}" for line in other]
    now_passing = sorted(key for key in KNOWN_FAILURES if key in summary["passed"] and not SAMPLES_LIMIT)
    problems = []
    if new_failures:
        problems.append(f"{len(new_failures)} ops fail that are not in KNOWN_FAILURES:")
        for key, lines in sorted(new_failures.items()):
            problems.append(f"  {key}: {lines[0]}" + (f" (+{len(lines) - 1} more)" if len(lines) > 1 else ""))
    if now_passing:
        problems.append(f"ops in KNOWN_FAILURES that pass now (remove them): {now_passing}")
    unlisted_raising = sorted(set(summary["passed_only_by_raising"]) - set(RAISES_ALIKE)) if not SAMPLES_LIMIT else []
    if unlisted_raising:
        problems.append(f"ops that only raised (on both devices alike), not listed in RAISES_ALIKE: {unlisted_raising}")
    if summary["ops_tried"] < MIN_OPS_TRIED:
        problems.append(f"only {summary['ops_tried']} ops tried, expected at least {MIN_OPS_TRIED}")
    # No op ran more samples than SAMPLES_PER_DTYPE allows: with
    # TORCH_ACCEL_OPINFO_SAMPLES=1 (make asan), one per dtype and variant.
    most = {}
    for op in op_db:
        most[op_key(op)] = max(most.get(op_key(op), 0), most_samples(op, SAMPLES_PER_DTYPE))
    too_many = {r.key: r.samples_tried for r in reports if r.samples_tried > most[r.key]}
    if too_many:
        problems.append(f"ops that ran more samples than SAMPLES_PER_DTYPE allows: {too_many}")
    assert not problems, "\n".join(problems)


def most_samples(op, samples_per_dtype: dict) -> int:
    """The most samples run_op runs for ``op``: each supported dtype's count, for
    the op and for its in-place variant."""
    supported = op.supported_dtypes(TARGET)
    variants = 2 if op.inplace_variant is not None else 1
    return variants * sum(n for dtype, n in samples_per_dtype.items() if dtype in supported)


# A sample of op_db, one op of each family of kernels (elementwise, reductions,
# scans, sorting, matrix products, convolution, normalisation, indexing and
# scatter, data-dependent shapes, FFT, pooling, interpolation, losses), each
# with the first samples of every dtype of DTYPES it supports, run in this
# process with the sweep's comparison: the GPU run's smoke step takes these
# instead of the whole sweep.
SAMPLED_OPS = (
    "add",
    "div.no_rounding_mode",
    "pow",
    "sigmoid",
    "where",
    "clamp",
    "bitwise_and",
    "sum",
    "amax",
    "argmax",
    "var",
    "softmax",
    "cumsum",
    "sort",
    "topk",
    "matmul",
    "addmm",
    "nn.functional.conv2d",
    "nn.functional.layer_norm",
    "nn.functional.batch_norm",
    "gather",
    "scatter_add",
    "index_put",
    "cat",
    "nonzero",
    "unique",
    "fft.fft",
    "nn.functional.max_pool2d",
    "nn.functional.interpolate.bilinear",
    "nn.functional.cross_entropy",
)
SAMPLES_OF_SAMPLED_OPS = 3


@pytest.mark.parametrize("key", SAMPLED_OPS)
def test_sampled_op_matches_target(key):
    ops = [op for op in op_db if op_key(op) == key]
    assert len(ops) == 1, f"{key} names {len(ops)} entries of op_db"
    samples = {dtype: min(n, SAMPLES_OF_SAMPLED_OPS) for dtype, n in SAMPLES_PER_DTYPE.items()}
    with deterministic_target(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        report = run_op(ops[0], samples_per_dtype=samples)
    assert report.skipped is None, report.skipped
    assert report.samples_tried > 0
    if key in KNOWN_FAILURES:  # as the sweep: a known failure must still fail
        assert report.failures, f"{key} is in KNOWN_FAILURES and passes now"
    else:
        assert not report.failures, "\n".join(report.failures)


def test_comparison_catches_differences():
    """The comparison itself, on made-up results: each kind of difference that the
    sweep must catch is caught, and equal results pass."""
    arg = torch.arange(6.0, device=TARGET).reshape(2, 3)
    accel_arg = arg.to(ACCEL)

    def compare(accel_result, target_result):
        compare_outcomes(accel_result, (accel_arg,), target_result, (arg,), EXACT)

    compare(accel_arg + 1, arg + 1)
    compare(torch.full((2,), float("nan"), device=ACCEL), torch.full((2,), float("nan"), device=TARGET))
    compare(accel_arg.view(6), arg.view(6))  # a view of the argument on both sides
    compare((accel_arg.shape, 3, None), (arg.shape, 3, None))
    differences = {
        "one ulp": (torch.nextafter(accel_arg, accel_arg + 1), arg.clone()),
        "signed zero": (torch.zeros(3, device=ACCEL), -torch.zeros(3, device=TARGET)),
        "strides": (accel_arg.t().contiguous().t(), arg),
        "a copy, not a view": (accel_arg.clone().view(6), arg.view(6)),
        "storage offset": (accel_arg.view(6)[1:], arg.view(6)[:5]),
        "result on the target device": (arg + 1, arg + 1),
        "dtype": (accel_arg.double(), arg),
        "structure": ((accel_arg,), [arg]),
        "Python value": (1, 2),
    }
    for name, (accel_result, target_result) in differences.items():
        with pytest.raises(AssertionError):
            compare(accel_result, target_result)
            pytest.fail(f"not caught: {name}")

    # A mutated argument must be mutated the same way.
    with pytest.raises(AssertionError):
        compare_outcomes(None, (accel_arg + 1,), None, (arg,), EXACT)

    # Exceptions: accel must raise exactly when the target does, the same type.
    from torch.testing._internal.opinfo.core import SampleInput

    def raising(on_target: type | None, on_accel: type | None) -> Callable:
        def fn(x: torch.Tensor) -> torch.Tensor:
            error = on_accel if x.device.type == ACCEL else on_target
            if error is not None:
                raise error("made-up error")
            return x

        return fn

    sample = SampleInput(arg)
    assert check_call(raising(None, None), sample, EXACT, False) is False
    assert check_call(raising(TypeError, TypeError), sample, EXACT, False) is True
    with pytest.raises(AssertionError, match="accel did not"):
        check_call(raising(ValueError, None), sample, EXACT, False)
    with pytest.raises(AssertionError, match="accel raised TypeError"):
        check_call(raising(ValueError, TypeError), sample, EXACT, False)
    with pytest.raises(ValueError):
        check_call(raising(None, ValueError), sample, EXACT, False)

    # The same type with another message is a difference; device names aside.
    def raising_message(message_for: Callable[[str], str]) -> Callable:
        def fn(x: torch.Tensor) -> torch.Tensor:
            raise RuntimeError(message_for(x.device.type))

        return fn

    assert check_call(raising_message(lambda device: f"bad input on {device}:0"), sample, EXACT, False) is True
    with pytest.raises(AssertionError, match="another message"):
        check_call(raising_message(lambda device: "accel's own words" if device == ACCEL else "the target's"), sample, EXACT, False)

    # linalg.lstsq: only gelsy's samples within tolerance.
    key = next(iter(NONDETERMINISTIC_ON_TARGET), None)
    if key is not None:
        assert sample_mode(key, SampleInput(arg, kwargs={"driver": "gels"}), CLOSE) == EXACT
        assert sample_mode(key, SampleInput(arg, kwargs={"driver": "gelsy"}), CLOSE) == CLOSE
        assert sample_mode(key, SampleInput(arg), CLOSE) == CLOSE  # the CPU's default driver is gelsy


if __name__ == "__main__" and sys.argv[1:2] == ["--worker"]:
    worker_main(log_path=sys.argv[2], first_index=int(sys.argv[3]))
