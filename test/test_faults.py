"""Injected faults (docs/fault-injection.md): accel's operations made to fail.

torch.accel._fault_injection (and TORCH_ACCEL_HOST_FAULTS) fails, on the
host runtime, the nth allocation, stream/event operation or copy, or each
with a seeded probability. Under it: every failure is a clear Python
exception naming the device (torch.OutOfMemoryError for an allocation,
RuntimeError otherwise), nothing crashes or hangs, the memory statistics
return to their baseline, training (autograd and optimizers) continues
after the error with the target's results, and a DataLoader worker's
failure reaches the main process. Distributed: a rank killed or stopped in
the middle of a collective makes the other fail within the group's timeout,
and a distributed checkpoint save that a killed rank interrupts leaves the
previous checkpoint loadable and intact (test/_faults_worker.py runs the
ranks).

Sweeps fail every operation of a kind in turn (nth = 1, 2, ... until an
nth beyond the program's operations), so each error path of the program
runs once.
"""

import copy
import gc
import hashlib
import os
import signal
import subprocess
import sys
import time

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import torch_accel
from conftest import run_python
from torch_accel import _fault_injection as faults

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "_faults_worker.py")
HOST = torch_accel.runtime() == "host"
# An nth no program here reaches: arms a kind only to count its operations.
COUNT_ONLY = 2**62

pytestmark = pytest.mark.skipif(not HOST, reason="fault injection is the host runtime's (docs/fault-injection.md)")


@pytest.fixture(autouse=True)
def _disarm():
    faults.clear()
    # What earlier tests left to the garbage collector goes now, not during
    # a test that compares memory with its baseline.
    gc.collect()
    yield
    faults.clear()


def memory_state(device: int = 0) -> dict:
    """What must return to its baseline after an error: every current statistic."""
    stats = torch.accel.memory_stats(device)
    state = {key: value for key, value in stats.items() if key.endswith(".current")}
    state["memory_allocated"] = torch.accel.memory_allocated(device)
    return state


def assert_memory_back(before: dict, context=None, device: int = 0) -> None:
    """The memory statistics are ``before`` again, once what the failure left
    to the garbage collector (a traceback in a reference cycle keeps the
    frames of the failed call) is collected."""
    if memory_state(device) != before:
        gc.collect()
    assert memory_state(device) == before, context


def operations_of(kind: str, program) -> int:
    """How many operations of ``kind`` one run of ``program`` makes."""
    with faults.injected(kind, nth=COUNT_ONLY):
        program()
        return faults.counts(kind).operations


def expected_error(kind: str):
    return torch.OutOfMemoryError if kind == "allocation" else RuntimeError


def check_error(kind: str, error: BaseException, device: int = 0) -> None:
    assert type(error) is expected_error(kind), repr(error)
    message = str(error)
    assert f"accel:{device}" in message, message
    if kind == "allocation":
        assert "out of memory" in message, message
    else:
        assert "injected fault" in message, message
    if kind == "copy":
        assert "copy failed" in message, message
    if kind == "stream_event":
        assert "from accelrt" in message, message  # the failed call, by name


# --- The switch -------------------------------------------------------------


def test_off_by_default_and_nothing_counted():
    proc = run_python(
        """
        import torch, torch_accel
        from torch_accel import _fault_injection as faults
        x = torch.ones(1000, device="accel")
        e = torch.accel.Event(enable_timing=True)
        e.record(); e.synchronize()
        y = (x * 2).cpu()
        print([tuple(faults.counts(k)) for k in faults.KINDS])
        """
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[(0, 0), (0, 0), (0, 0)]"


def test_environment_variable_arms_faults_for_the_process():
    proc = run_python(
        """
        import torch, torch_accel
        from torch_accel import _fault_injection as faults
        a = torch.ones(10, device="accel:1")
        try:
            torch.ones(10, device="accel:1")
        except torch.OutOfMemoryError as e:
            assert "accel:1" in str(e), str(e)
            print("oom")
        b = torch.ones(10, device="accel:1")
        print(tuple(faults.counts("allocation")), tuple(faults.counts("copy")))
        """,
        env={"TORCH_ACCEL_HOST_FAULTS": "allocation:nth=2,copy:probability=0.5:seed=3"},
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split("\n")[:2] == ["oom", "(3, 1) (0, 0)"]


BAD_VARIABLES = [
    ("memory:nth=1", "names no kind of fault"),
    ("allocation", "has no KEY=VALUE"),
    ("allocation:nth=0", "nth that is not an integer >= 1"),
    ("allocation:nth=-1", "nth that is not an integer >= 1"),
    ("allocation:nth=1x", "nth that is not an integer >= 1"),
    ("copy:probability=1.5", "probability that is not a number from 0 to 1"),
    ("copy:probability=nan", "probability that is not a number from 0 to 1"),
    ("copy:probability=0.1:seed=-2", "seed that is not an integer >= 0"),
    ("copy:p=0.1", "has a key other than nth, probability and seed"),
    ("copy:nth=1,copy:nth=2", "names a kind a second time"),
    ("allocation:nth=1,", "names no kind of fault"),
]


def test_malformed_environment_variable_is_a_clear_error_at_first_use():
    proc = run_python(
        f"""
        import os, torch, torch_accel
        for value, why in {BAD_VARIABLES!r}:
            os.environ["TORCH_ACCEL_HOST_FAULTS"] = value
            assert torch_accel.device_count() == 0  # never raises
            try:
                torch.empty(1, device="accel")
            except ValueError as e:
                assert "TORCH_ACCEL_HOST_FAULTS" in str(e) and why in str(e) and repr(value) in str(e), (value, str(e))
            else:
                raise AssertionError(f"{{value!r}} was accepted")
        os.environ["TORCH_ACCEL_HOST_FAULTS"] = ""
        assert torch.ones(1, device="accel").item() == 1
        print("ok")
        """
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "ok"


@pytest.mark.parametrize(
    "kwargs",
    [dict(kind="memory", nth=1), dict(kind="copy", nth=-1), dict(kind="copy", probability=1.5), dict(kind="copy", seed=-1)],
)
def test_bad_arguments_raise_value_error(kwargs):
    with pytest.raises(ValueError, match="accel"):
        faults.inject(kwargs.pop("kind"), **kwargs)


def test_nth_fails_once_and_counts():
    def allocate():  # exactly one allocation
        return torch.empty(4, device="accel")

    with faults.injected("allocation", nth=3):
        allocate()
        allocate()
        with pytest.raises(torch.OutOfMemoryError):
            allocate()
        allocate()
        assert faults.counts("allocation") == (4, 1)
    allocate()
    assert faults.counts("allocation") == (0, 0)  # disarmed: nothing counted


def test_same_seed_fails_the_same_operations():
    def pattern(seed: int) -> list[bool]:
        failed = []
        with faults.injected("allocation", probability=0.3, seed=seed):
            for _ in range(64):
                try:
                    torch.empty(4, device="accel")
                    failed.append(False)
                except torch.OutOfMemoryError:
                    failed.append(True)
        return failed

    first = pattern(11)
    assert first == pattern(11)
    assert first != pattern(12)
    assert 5 <= sum(first) <= 35


# --- Each kind of operation fails clearly and leaves no trace ---------------


def test_failed_allocation_names_its_device_and_leaves_memory_at_baseline():
    for device in range(torch.accel.device_count()):
        before = memory_state(device)
        with faults.injected("allocation", nth=1), pytest.raises(torch.OutOfMemoryError) as error:
            torch.empty(1 << 20, device=f"accel:{device}")
        check_error("allocation", error.value, device)
        assert_memory_back(before, device=device)
        assert torch.ones(3, device=f"accel:{device}").sum().item() == 3


def stream_event_operations(device: int):
    d = f"accel:{device}"
    stream = torch.accel.Stream(device=d)
    recorded = torch.accel.Event(enable_timing=True)
    recorded.record(stream)
    end = torch.accel.Event(enable_timing=True)
    end.record(stream)
    return {
        "Event.record": lambda: torch.accel.Event().record(stream),
        "Event.query": recorded.query,
        "Event.synchronize": recorded.synchronize,
        "Event.wait": lambda: recorded.wait(stream),
        "Event.elapsed_time": lambda: recorded.elapsed_time(end),
        "Stream.query": stream.query,
        "Stream.synchronize": stream.synchronize,
        "Stream.wait_event": lambda: stream.wait_event(recorded),
        "Stream.wait_stream": lambda: stream.wait_stream(torch.accel.default_stream(d)),
        "Stream.record_event": stream.record_event,
        "synchronize": lambda: torch.accel.synchronize(d),
    }


@pytest.mark.parametrize("name", sorted(stream_event_operations(0)))
def test_failed_stream_or_event_operation_names_its_device(name):
    # On accel:1 while accel:0 is current: the message names the device of
    # the stream or event, not the current one.
    device = torch.accel.device_count() - 1
    operation = stream_event_operations(device)[name]
    with faults.injected("stream_event", probability=1.0), pytest.raises(RuntimeError) as error:
        operation()
    check_error("stream_event", error.value, device)
    assert torch.accel.current_device() == 0
    operation()  # works again once disarmed


def test_failed_creation_of_a_stream_pool_is_tried_again():
    # A device's streams are created at its first new stream (accelrt
    # streams, 64 per device): a failure half way leaves none behind, and
    # the next use creates them.
    proc = run_python(
        """
        import torch, torch_accel
        from torch_accel import _fault_injection as faults
        faults.inject("stream_event", nth=40)
        try:
            torch.accel.Stream(device="accel:1")
        except RuntimeError as e:
            assert "accel:1 (host runtime) error: injected fault" in str(e), str(e)
            print("failed")
        faults.clear()
        streams = [torch.accel.Stream(device="accel:1", priority=p) for p in (0, -1) for _ in range(32)]
        assert len({s.stream_id for s in streams}) == 64
        for s in streams:
            assert s.query()
            e = s.record_event()
            e.synchronize()
        print("ok")
        """
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["failed", "ok"]


COPIES = {
    "cpu to accel": lambda d: torch.arange(6.0).to(d),
    "accel to cpu": lambda d: torch.arange(6.0, device=d).cpu(),
    "accel to accel (dtype)": lambda d: torch.arange(6.0, device=d).to(torch.float16),
    "copy_ strided": lambda d: torch.zeros(3, 2, device=d).t().copy_(torch.ones(2, 3)),
    "large": lambda d: torch.ones(1 << 16, device=d).cpu(),
    "item": lambda d: torch.ones(3, device=d)[1].item(),
}


@pytest.mark.parametrize("name", sorted(COPIES))
def test_failed_copy_names_its_device_and_leaves_memory_at_baseline(name):
    device = torch.accel.device_count() - 1
    before = memory_state(device)
    with faults.injected("copy", nth=1), pytest.raises(RuntimeError) as error:
        COPIES[name](f"accel:{device}")
    check_error("copy", error.value, device)
    assert_memory_back(before, device=device)
    COPIES[name](f"accel:{device}")


def test_failed_copy_leaves_the_destination_unchanged():
    destination = torch.arange(8.0, device="accel")
    with faults.injected("copy", nth=1), pytest.raises(RuntimeError):
        destination.copy_(torch.zeros(8))
    assert torch.equal(destination.cpu(), torch.arange(8.0))


# --- A resize that cannot allocate leaves the tensor as it was --------------
# ATen's resize sets the new sizes before it allocates: after an out-of-memory
# error the tensor (on cpu and cuda alike) claims memory it does not have.


def test_failed_resize_leaves_the_tensor_as_it_was():
    x = torch.arange(6.0, device="accel").reshape(2, 3)
    before = memory_state()
    with faults.injected("allocation", nth=1), pytest.raises(torch.OutOfMemoryError):
        x.resize_(1 << 20)
    assert (x.shape, x.stride(), x.untyped_storage().nbytes()) == ((2, 3), (3, 1), 24)
    assert torch.equal(x.cpu(), torch.arange(6.0).reshape(2, 3))
    assert_memory_back(before)
    y = torch.zeros(2, 3, 4, 5, device="accel")
    with faults.injected("allocation", nth=1), pytest.raises(torch.OutOfMemoryError):
        y.resize_(4, 3, 8, 8, memory_format=torch.channels_last)
    assert (y.shape, y.stride()) == ((2, 3, 4, 5), (60, 20, 5, 1))
    assert x.resize_(1 << 10).shape == (1 << 10,)
    assert y.resize_(4, 3, 8, 8, memory_format=torch.channels_last).stride() == torch.empty(4, 3, 8, 8).to(memory_format=torch.channels_last).stride()


def test_failed_resize_of_an_out_argument_leaves_it_as_it_was():
    a = torch.arange(1000.0)
    accel_a = a.to("accel")
    out = torch.arange(2.0, device="accel")
    out_view = out[:]
    with faults.injected("allocation", nth=1), pytest.raises(torch.OutOfMemoryError) as error:
        torch.add(accel_a, accel_a, out=out)
    assert "accel:0" in str(error.value)
    for t in (out, out_view):
        assert (t.shape, t.untyped_storage().nbytes()) == ((2,), 8)
        assert torch.equal(t.cpu(), torch.arange(2.0))
    torch.add(accel_a, accel_a, out=out)  # the same call without the fault: as on cpu
    expected = torch.arange(2.0)
    torch.add(a, a, out=expected)
    assert torch.equal(out.cpu(), expected)


# --- Operators that allocate several times ----------------------------------

OPERATORS = {
    "sort": lambda x: torch.sort(x, dim=1),
    "topk": lambda x: torch.topk(x, 3, dim=1),
    "max(dim)": lambda x: torch.max(x, dim=0),
    "unique": lambda x: torch.unique(x.round(), return_inverse=True, return_counts=True),
    "nonzero": lambda x: torch.nonzero(x > 0),
    "cat": lambda x: torch.cat([x, x * 2, x + 1]),
    "matmul chain": lambda x: (x @ x.T).softmax(-1) @ x,
    "index_put": lambda x: x.clone().index_put_((torch.tensor([0, 2], device=x.device),), x[:2] * 3),
    "qr": lambda x: torch.linalg.qr(x[:, :4]),
    "sort out=": lambda x: torch.sort(x, dim=1, out=(torch.empty(1, device=x.device), torch.empty(1, dtype=torch.long, device=x.device))),
}


def results_on_cpu(result):
    if isinstance(result, torch.Tensor):
        return result.cpu()
    return [results_on_cpu(r) for r in result]


@pytest.mark.parametrize("name", sorted(OPERATORS))
def test_every_allocation_of_an_operator_fails_cleanly(name):
    op = OPERATORS[name]
    torch.manual_seed(0)
    x_cpu = torch.randn(6, 5)
    x = x_cpu.to("accel")
    expected = results_on_cpu(op(x_cpu))
    total = operations_of("allocation", lambda: op(x))
    assert total >= 1
    before = memory_state()
    for nth in range(1, total + 1):
        with faults.injected("allocation", nth=nth), pytest.raises(torch.OutOfMemoryError) as error:
            op(x)
        check_error("allocation", error.value)
        del error  # its traceback keeps the failed call's frames
        assert_memory_back(before, (name, nth))
        torch.testing.assert_close(results_on_cpu(op(x)), expected, rtol=0, atol=0, equal_nan=True)
    assert torch.equal(x.cpu(), x_cpu)


# --- Training continues after an error, with the target's results -----------

OPTIMIZERS = {
    # foreach pinned on both devices: PyTorch picks foreach for accel and the
    # per-tensor loop for cpu by default, two orders of rounding.
    "sgd-momentum": lambda params: torch.optim.SGD(params, lr=0.1, momentum=0.9, foreach=False),
    "adam": lambda params: torch.optim.Adam(params, lr=0.01, foreach=False),
    "adamw-foreach": lambda params: torch.optim.AdamW(params, lr=0.01, foreach=True),
}


class Trainer:
    """A small model and its optimizer on one device; ``step`` is one training step."""

    def __init__(self, device: str, optimizer: str, streams: bool = False):
        torch.manual_seed(0)
        self.device = device
        self.model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 4)).to(device)
        self.optimizer = OPTIMIZERS[optimizer](self.model.parameters())
        self.streams = streams and device != "cpu"
        generator = torch.Generator().manual_seed(1)
        self.batches = [(torch.randn(5, 8, generator=generator), torch.randn(5, 4, generator=generator)) for _ in range(3)]
        self.steps = 0

    def step(self) -> torch.Tensor:
        x, y = (t.to(self.device) for t in self.batches[self.steps % len(self.batches)])
        self.optimizer.zero_grad(set_to_none=True)
        if self.streams:
            side = torch.accel.Stream()
            side.wait_stream(torch.accel.current_stream())
            with torch.accel.stream(side):
                out = self.model(x)
            torch.accel.current_stream().wait_stream(side)
        else:
            out = self.model(x)
        loss = F.mse_loss(out, y)
        loss.backward()
        self.optimizer.step()
        if self.streams:
            done = torch.accel.Event()
            done.record()
            done.synchronize()
        self.steps += 1
        return loss.detach().cpu()

    def state(self) -> dict:
        return {
            "model": {k: v.cpu().clone() for k, v in self.model.state_dict().items()},
            "optimizer": copy.deepcopy(
                {
                    "state": {k: {n: t.cpu() if isinstance(t, torch.Tensor) else t for n, t in s.items()} for k, s in self.optimizer.state_dict()["state"].items()},
                    "param_groups": self.optimizer.state_dict()["param_groups"],
                }
            ),
        }

    def load(self, state: dict) -> None:
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])


def assert_same_training(accel: Trainer, cpu: Trainer) -> None:
    for (name, a), (_, c) in zip(accel.model.state_dict().items(), cpu.model.state_dict().items()):
        assert torch.equal(a.cpu(), c), name
    for a, c in zip(accel.optimizer.state.values(), cpu.optimizer.state.values()):
        for key in c:
            assert torch.equal(torch.as_tensor(a[key]).cpu(), torch.as_tensor(c[key])), key


def sweep_training_step(kind: str, optimizer: str, streams: bool = False, first_step: bool = False) -> int:
    """Fail each operation of ``kind`` in a training step in turn; after each
    failure, check the error, the memory and the model, then train on and
    compare with the same training on cpu. ``first_step``: the failing step
    is the optimizer's first (its state is created inside it)."""
    accel = Trainer("accel", optimizer, streams)
    cpu = Trainer("cpu", optimizer)
    if not first_step:
        assert torch.equal(accel.step(), cpu.step())
    probe = copy.deepcopy(accel)
    total = operations_of(kind, probe.step)
    del probe
    assert total >= 1
    for nth in range(1, total + 2):
        if first_step and nth > 1:
            accel, cpu = Trainer("accel", optimizer, streams), Trainer("cpu", optimizer)
        accel.optimizer.zero_grad(set_to_none=True)
        before, memory_before = accel.state(), memory_state()
        steps = accel.steps
        failed = False
        try:
            with faults.injected(kind, nth=nth):
                loss = accel.step()
        except (torch.OutOfMemoryError, RuntimeError) as error:
            check_error(kind, error)
            failed = True
        # (After the except block, which keeps the failed step's frames alive.)
        if failed:
            assert nth <= total
            assert torch.accel.current_stream() == torch.accel.default_stream()
            accel.steps = steps
            accel.optimizer.zero_grad(set_to_none=True)
            if not first_step:
                # Nothing that failed still holds memory (an update that
                # failed half way may have changed values, not sizes).
                assert_memory_back(memory_before, nth)
            # torch.optim's step is not transactional (on any device): a
            # step that fails half way leaves a partial update, which the
            # state from before the step undoes.
            accel.load(before)
            loss = accel.step()
        else:
            assert nth == total + 1  # beyond the step's operations: nothing failed
        assert torch.equal(loss, cpu.step()), nth
        assert_same_training(accel, cpu)
    return total


@pytest.mark.parametrize("optimizer", sorted(OPTIMIZERS))
def test_training_continues_after_each_failed_allocation(optimizer):
    sweep_training_step("allocation", optimizer)


@pytest.mark.parametrize("optimizer", sorted(OPTIMIZERS))
def test_first_optimizer_step_continues_after_each_failed_allocation(optimizer):
    sweep_training_step("allocation", optimizer, first_step=True)


def test_training_continues_after_each_failed_copy():
    assert sweep_training_step("copy", "adam") >= 3  # two batches in, the loss out


def test_training_on_a_side_stream_continues_after_each_failed_stream_or_event_operation():
    assert sweep_training_step("stream_event", "sgd-momentum", streams=True) >= 4


def test_training_under_random_faults_matches_the_target():
    accel, cpu = Trainer("accel", "adam", streams=True), Trainer("cpu", "adam")
    failures = 0
    with faults.injected("allocation", probability=0.02, seed=5):
        for _ in range(30):
            before = accel.state()
            steps = accel.steps
            try:
                loss = accel.step()
            except torch.OutOfMemoryError as error:
                check_error("allocation", error)
                failures += 1
                accel.steps = steps
                accel.load(before)
                continue
            assert torch.equal(loss, cpu.step())
        assert faults.counts("allocation").injected == failures
    assert failures > 0
    assert_same_training(accel, cpu)


def test_ddp_step_continues_after_each_failed_stream_or_event_operation(tmp_path):
    # DDP on accel's c10d backend times its steps with accel events. (A
    # failure inside backward, e.g. an allocation, leaves PyTorch's DDP
    # reducer waiting for the rest of that reduction, on every device:
    # docs/fault-injection.md.)
    import datetime

    import torch.distributed as dist

    dist.init_process_group(
        "accel", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1, timeout=datetime.timedelta(seconds=30)
    )
    try:
        torch.manual_seed(0)
        cpu_model = nn.Linear(4, 3)
        model = nn.parallel.DistributedDataParallel(copy.deepcopy(cpu_model).to("accel"))
        x = torch.randn(5, 4)
        cpu_model(x).sum().backward()

        def step():
            model.zero_grad(set_to_none=True)
            model(x.to("accel")).sum().backward()

        total = operations_of("stream_event", step)
        assert total >= 2
        failures = 0
        for nth in range(1, total + 1):
            failed = False
            with faults.injected("stream_event", nth=nth):
                try:
                    step()
                except RuntimeError as error:
                    check_error("stream_event", error)
                    failed = True
                # DDP times only some iterations: later steps may make fewer operations.
                assert failed == (faults.counts("stream_event").injected == 1), nth
            failures += failed
            step()
            for p, c in zip(model.module.parameters(), cpu_model.parameters()):
                assert torch.equal(p.grad.cpu(), c.grad), nth
        assert failures >= 2
    finally:
        dist.destroy_process_group()


# --- Processes --------------------------------------------------------------


def test_dataloader_worker_failure_reaches_the_main_process(monkeypatch):
    import _faults_worker

    # The worker (spawned: it uses accel) arms faults from the environment.
    monkeypatch.setenv("TORCH_ACCEL_HOST_FAULTS", "allocation:nth=3")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([HERE, os.environ.get("PYTHONPATH", "")]))
    loader = torch.utils.data.DataLoader(
        _faults_worker.AccelSquares(8), batch_size=2, num_workers=1, multiprocessing_context="spawn", timeout=120
    )
    start = time.monotonic()
    with pytest.raises(torch.OutOfMemoryError) as error:
        list(loader)
    message = str(error.value)
    assert "DataLoader worker process 0" in message and "accel:0" in message and "out of memory" in message, message
    assert time.monotonic() - start < 120


def run_ranks(mode: str, tmp_path, timeout_s: float, *args: str) -> tuple[list[subprocess.Popen], list[str]]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.dirname(HERE), HERE, os.environ.get("PYTHONPATH", "")]))
    logs = [open(tmp_path / f"rank{rank}.log", "w+") for rank in range(2)]
    procs = [
        subprocess.Popen(
            [sys.executable, WORKER, mode, str(rank), str(tmp_path / "store"), str(tmp_path), str(timeout_s), *args],
            env=env,
            stdout=logs[rank],
            stderr=subprocess.STDOUT,
        )
        for rank in range(2)
    ]
    texts = []
    try:
        procs[0].wait(timeout=120)
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
    for log in logs:
        log.seek(0)
        texts.append(log.read()[-6000:])
        log.close()
    return procs, texts


@pytest.mark.parametrize("how", ["killed", "stopped"])
def test_rank_lost_in_a_collective_fails_the_others_within_the_timeout(tmp_path, how):
    timeout_s = 3.0
    procs, logs = run_ranks("collective", tmp_path, timeout_s, how)
    assert procs[0].returncode == 0, logs[0]
    if how == "killed":
        assert procs[1].returncode == -signal.SIGKILL, logs[1]
    result = torch.load(tmp_path / "rank0.pt")
    assert result["error_type"] in ("RuntimeError", "DistBackendError", "DistNetworkError"), result
    # Within the group's timeout (and the time to notice it on a busy machine).
    assert result["elapsed_s"] < timeout_s + 5.0, result


def test_checkpoint_save_interrupted_by_a_killed_rank_leaves_the_previous_one_intact(tmp_path):
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.api import CheckpointException

    import _faults_worker

    procs, logs = run_ranks("checkpoint", tmp_path, 3.0)
    assert procs[0].returncode == 0, logs[0]
    assert procs[1].returncode == -signal.SIGKILL, logs[1]
    result = torch.load(tmp_path / "rank0.pt")
    assert result["error_type"] is not None, result
    assert result["elapsed_s"] < 3.0 + 5.0, result
    previous = tmp_path / "step1"
    # Byte for byte what the completed save wrote.
    assert {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in previous.iterdir()} == result["step1_files"]
    loaded = {k: torch.zeros_like(v, device="accel") for k, v in _faults_worker.checkpoint_state(1, "cpu").items()}
    dcp.load(loaded, checkpoint_id=previous, no_dist=True)
    for key, value in _faults_worker.checkpoint_state(1, "cpu").items():
        assert torch.equal(loaded[key].cpu(), value), key
    # The interrupted save is no checkpoint: loading it is an error, not data.
    assert not (tmp_path / "step2" / ".metadata").exists()
    with pytest.raises(CheckpointException, match="metadata is None"):
        dcp.load(loaded, checkpoint_id=tmp_path / "step2", no_dist=True)
