"""The PyTorch profiler on accel: record_function ranges, per-operator accel time
and Chrome traces, through both of PyTorch's routes for a PrivateUse1 device.

- Kineto: torch.profiler.profile(activities=[CPU, PrivateUse1]) (and
  torch.autograd.profiler.profile(use_device="accel", use_kineto=True)). Device
  kernels are Kineto activities linked to the operator that ran them: the
  target kernels torch_accel recorded (host runtime) or CUPTI's (CUDA runtime).
- ProfilerStubs: torch.autograd.profiler.profile(use_device="accel"). Each
  operator is timed with accel events on the current accel stream.
"""

import json
import warnings

import pytest
import torch
from torch.autograd import DeviceType
from torch.autograd import profiler as autograd_profiler
from torch.profiler import ProfilerActivity, profile, record_function, schedule

import torch_accel
from conftest import run_python

ACCEL_ACTIVITIES = [ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]
# Kineto's categories for device activities in a Chrome trace.
DEVICE_CATEGORIES = {"kernel", "gpu_memcpy", "gpu_memset"}


def kineto_profile():
    return profile(activities=ACCEL_ACTIVITIES)


def stubs_profile():
    return autograd_profiler.profile(use_device="accel")


def events_of(prof):
    """The FunctionEvents of either profiler object."""
    return prof.events() if hasattr(prof, "events") else prof.function_events


def model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8))


def workload(device):
    """A matmul, a relu and a small model's forward and backward, each in its own range."""
    net = model().to(device)
    a = torch.randn(128, 128).to(device)
    x = torch.randn(16, 32).to(device)
    with record_function("range_matmul"):
        b = a @ a
    with record_function("range_relu"):
        c = b.relu()
    with record_function("range_forward"):
        loss = net(x).square().mean()
    with record_function("range_backward"):
        loss.backward()
    return c, loss, [p.grad for p in net.parameters()]


def load_trace(prof, tmp_path):
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    with open(path) as f:
        return json.load(f)["traceEvents"]


def device_events(events):
    return [e for e in events if e.device_type != DeviceType.CPU]


def total_device_time(events, name):
    return sum(e.device_time_total for e in events if e.name == name)


@pytest.fixture(autouse=True)
def _warm_up():
    # First calls (allocator pools, BLAS handles) would otherwise dominate
    # the first profiled operators.
    workload("accel")
    torch_accel.synchronize()


@pytest.mark.parametrize("make_profile", [kineto_profile, stubs_profile], ids=["kineto", "stubs"])
def test_ranges_and_operators_appear(make_profile):
    with make_profile() as prof:
        workload("accel")
    names = {e.name for e in events_of(prof)}
    for expected in (
        "range_matmul",
        "range_relu",
        "range_forward",
        "range_backward",
        "aten::matmul",
        "aten::mm",
        "aten::relu",
        "aten::linear",
        "aten::addmm",
        "AddmmBackward0",
        "aten::threshold_backward",
    ):
        assert expected in names, expected


@pytest.mark.parametrize("make_profile", [kineto_profile, stubs_profile], ids=["kineto", "stubs"])
def test_accel_time_per_operator(make_profile):
    with make_profile() as prof:
        workload("accel")
    events = events_of(prof)
    for name in ("aten::mm", "aten::relu", "aten::addmm", "aten::threshold_backward"):
        assert total_device_time(events, name) > 0, name
    # Each range holds its operators' accel time.
    for name in ("range_matmul", "range_relu", "range_forward", "range_backward"):
        assert total_device_time(events, name) > 0, name
    for e in events:
        assert 0 <= e.self_device_time_total <= e.device_time_total, e.name
    averages = prof.key_averages()
    assert averages.self_cpu_time_total > 0
    assert sum(a.self_device_time_total for a in averages) > 0


@pytest.mark.parametrize("make_profile", [kineto_profile, stubs_profile], ids=["kineto", "stubs"])
def test_each_operator_gets_accel_time_of_its_own(make_profile):
    big = torch.randn(64, 64, device="accel")
    tiny = torch.ones(4, device="accel")
    with make_profile() as prof:
        big @ big
        tiny + 1
    events = events_of(prof)
    for name in ("aten::mm", "aten::add"):
        assert [e.name for e in events].count(name) == 1, name
        assert total_device_time(events, name) > 0, name


def test_accel_work_runs_in_the_order_of_its_operators(tmp_path):
    # Order, not duration: the matmul's accel work ends before the add's begins
    # (one stream), and each is linked to its own operator.
    big = torch.randn(64, 64, device="accel")
    tiny = torch.ones(4, device="accel")
    with kineto_profile() as prof:
        big @ big
        tiny + 1
    trace = load_trace(prof, tmp_path)
    ops = {e["args"]["External id"]: e for e in trace if e.get("cat") == "cpu_op"}
    work = {}
    for kernel in (e for e in trace if e.get("cat") in DEVICE_CATEGORIES):
        op = ops.get(kernel["args"].get("External id"))
        if op is not None and op["name"] in ("aten::mm", "aten::add"):
            work.setdefault(op["name"], []).append(kernel)
    assert set(work) == {"aten::mm", "aten::add"}
    mm_end = max(k["ts"] + k["dur"] for k in work["aten::mm"])
    add_start = min(k["ts"] for k in work["aten::add"])
    assert mm_end <= add_start
    assert ops_order(ops, "aten::mm") < ops_order(ops, "aten::add")


def ops_order(ops: dict, name: str) -> float:
    """When the (only) operator ``name`` of a trace began."""
    (start,) = [e["ts"] for e in ops.values() if e["name"] == name]
    return start


def test_kernels_are_linked_to_their_operators():
    with kineto_profile() as prof:
        workload("accel")
    events = prof.events()
    kernels = device_events(events)
    assert kernels
    assert all(k.device_type == DeviceType.PrivateUse1 for k in kernels)
    # Operators that ran accel work carry it as their own kernels.
    mm = [e for e in events if e.name == "aten::mm"]
    assert mm and all(e.kernels for e in mm)
    assert all(k.duration > 0 for e in mm for k in e.kernels)
    # Operators that ran none have no accel time of their own.
    views = [e for e in events if e.name in ("aten::t", "aten::transpose", "aten::view")]
    assert views and all(e.self_device_time_total == 0 for e in views)


def test_table_names_the_accel_columns():
    with kineto_profile() as prof:
        workload("accel")
    table = prof.key_averages().table(sort_by="self_device_time_total", row_limit=5)
    assert "Self ACCEL" in table and "ACCEL total" in table
    # PyTorch's name for the PrivateUse1 column sorts the same way.
    assert prof.key_averages().table(sort_by="self_privateuse1_time_total", row_limit=5) == table
    rows = sorted(prof.key_averages(), key=lambda a: a.self_device_time_total, reverse=True)
    assert rows[0].key in table.splitlines()[3]


def test_chrome_trace_has_ranges_and_accel_kernels(tmp_path):
    with kineto_profile() as prof:
        workload("accel")
    trace = load_trace(prof, tmp_path)
    annotations = {e["name"] for e in trace if e.get("cat") == "user_annotation"}
    assert {"range_matmul", "range_relu", "range_forward", "range_backward"} <= annotations
    ops = {e["args"]["External id"]: e["name"] for e in trace if e.get("cat") == "cpu_op"}
    kernels = [e for e in trace if e.get("cat") in DEVICE_CATEGORIES]
    assert kernels
    # Every process is named once (on the CUDA runtime, CUPTI's kernels of
    # cuda:N are on process N, which Kineto names and accel must not name
    # again), and every device row after its device: accel:N, or GPU N (the
    # same device) where Kineto records the kernels itself.
    names = {}
    for e in trace:
        if e.get("ph") == "M" and e.get("name") in ("process_name", "process_labels"):
            names.setdefault((e["pid"], e["name"]), []).extend(e["args"].values())
    assert all(len(values) == 1 for values in names.values()), names
    for kernel in kernels:
        pid = kernel["pid"]
        labels = names.get((pid, "process_name"), []) + names.get((pid, "process_labels"), [])
        assert {f"accel:{pid}", f"GPU {pid}"} & set(labels), (kernel, labels)
    # Kernels point back at operators, and the matmul has one.
    linked = {ops.get(k["args"].get("External id")) for k in kernels}
    assert "aten::mm" in linked


def test_stubs_profile_exports_its_ranges(tmp_path):
    # Per-operator accel time lives in the tables; PyTorch's trace of this
    # route holds the CPU side (as for cuda without CUPTI).
    with stubs_profile() as prof:
        workload("accel")
    trace = load_trace(prof, tmp_path)
    names = {e["name"] for e in trace}
    assert {"range_matmul", "range_forward", "aten::mm"} <= names


def test_autograd_profiler_with_kineto_records_kernels():
    with autograd_profiler.profile(use_device="accel", use_kineto=True) as prof:
        workload("accel")
    events = prof.function_events
    assert device_events(events)
    assert total_device_time(events, "aten::mm") > 0


def test_cpu_only_profile_has_no_accel_time():
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        workload("accel")
    events = prof.events()
    assert "aten::mm" in {e.name for e in events}
    assert not device_events(events)
    assert all(e.device_time_total == 0 for e in events)
    assert "ACCEL" not in prof.key_averages().table()


def test_same_operators_as_on_the_target(target):
    # Forward only: CUDA backward cannot run next to accel in one process
    # (see docs/known-limitations.md, "CUDA autograd next to accel").
    def forward(device):
        net = model().to(device)
        a = torch.randn(64, 64).to(device)
        x = torch.randn(16, 32).to(device)
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            with record_function("range"):
                (a @ a).relu() + 1
                net(x).softmax(-1)
        return {e.name for e in prof.events()}

    assert forward("accel") == forward(target)


@pytest.mark.parametrize("make_profile", [kineto_profile, stubs_profile], ids=["kineto", "stubs"])
def test_profiling_changes_no_results_device_or_stream(make_profile, two_devices, target):
    torch_accel.set_device(1)
    side = torch_accel.Stream()
    torch_accel.set_stream(side)
    unprofiled = workload("accel")
    with make_profile() as prof:
        profiled = workload("accel")
        assert torch_accel.current_device() == 1
        assert torch_accel.current_stream() == side
    assert torch_accel.current_device() == 1
    assert torch_accel.current_stream() == side
    assert total_device_time(events_of(prof), "aten::mm") > 0
    results = [profiled[0], profiled[1], *profiled[2]]
    for got, plain in zip(results, [unprofiled[0], unprofiled[1], *unprofiled[2]]):
        assert got.device == torch.device("accel:1")
        assert torch.equal(got.cpu(), plain.cpu())
    # The forward part against the target (CUDA backward cannot run here).
    a = torch.randn(128, 128)
    assert torch.equal((a.to(target) @ a.to(target)).relu().cpu(), (a.to("accel") @ a.to("accel")).relu().cpu())


def test_kernels_are_on_the_device_and_stream_that_ran_them(two_devices, tmp_path):
    def kernel_rows(device, stream):
        with torch_accel.device(device), torch_accel.stream(stream):
            with kineto_profile() as prof:
                workload("accel")
        return {(k["pid"], k["args"]["stream"]) for k in load_trace(prof, tmp_path) if k.get("cat") == "kernel"}

    on_default = kernel_rows(0, torch_accel.default_stream(0))
    side = torch_accel.Stream(device=1)
    on_side = kernel_rows(1, side)
    assert {pid for pid, _ in on_default} == {0}
    assert {pid for pid, _ in on_side} == {1}
    assert len({stream for _, stream in on_side}) == 1
    assert {stream for _, stream in on_side} != {stream for _, stream in on_default}


def test_each_scheduled_cycle_has_its_own_kernels():
    cycles = []
    a = torch.randn(64, 64, device="accel")
    with profile(
        activities=ACCEL_ACTIVITIES,
        schedule=schedule(wait=1, warmup=1, active=2, repeat=2),
        on_trace_ready=lambda p: cycles.append(p.events()),
    ) as prof:
        for _ in range(8):
            a @ a
            prof.step()
    assert len(cycles) == 2
    for events in cycles:
        mm = [e for e in events if e.name == "aten::mm"]
        assert len(mm) == 2  # the two active steps
        assert all(e.kernels for e in mm)


NO_DEVICE_ENV = {"TORCH_ACCEL_RUNTIME": "host", "TORCH_ACCEL_HOST_DEVICES": "0"}


def test_without_accel_devices_profiling_falls_back_to_cpu_as_for_cuda(tmp_path):
    # As torch.autograd.profiler.profile does for use_device="cuda" without
    # CUDA: a warning, then a CPU-only profile; exiting leaves no profiler on.
    proc = run_python(
        f"""
        import json, warnings
        import torch, torch_accel
        from torch.autograd import profiler as autograd_profiler
        from torch.profiler import ProfilerActivity, profile, record_function

        assert torch_accel.device_count() == 0
        makers = [
            lambda: autograd_profiler.profile(use_device="accel"),
            lambda: autograd_profiler.profile(use_device="accel", use_kineto=True),
            lambda: profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]),
        ]
        for make in makers:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                with make() as prof:
                    with record_function("range"):
                        torch.ones(8).mul(2)
            messages = [str(w.message) for w in caught]
            assert "accel is not available, disabling accel profiling" in messages, messages
            assert not torch.autograd._profiler_enabled()
            events = prof.events() if hasattr(prof, "events") else prof.function_events
            assert {{"range", "aten::mul"}} <= {{e.name for e in events}}
            assert all(e.device_type.name == "CPU" and e.device_time_total == 0 for e in events)
            assert "ACCEL" not in prof.key_averages().table()
            prof.export_chrome_trace({str(tmp_path / "trace.json")!r})
            with open({str(tmp_path / "trace.json")!r}) as f:
                assert "range" in {{e["name"] for e in json.load(f)["traceEvents"]}}
        # PyTorch's own wording for cuda, which accel's follows.
        if not torch.cuda.is_available():
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                autograd_profiler.profile(use_device="cuda")
            assert "CUDA is not available, disabling CUDA profiling" in [str(w.message) for w in caught]
        print("ok")
        """,
        env=NO_DEVICE_ENV,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "ok"


def test_profiler_patch_follows_what_the_constructor_does_for_cuda():
    # The hash of the constructor's source is checked with every patch's
    # (test_patches). The patch wraps PyTorch's constructor, which checks
    # cuda's availability (the behaviour accel's patch follows) and not a
    # PrivateUse1 backend's.
    import inspect

    from torch_accel import _patches

    source = inspect.getsource(_patches.original("torch.autograd.profiler.profile.__init__"))
    assert 'self.use_device == "cuda" and not torch.cuda.is_available()' in source
    assert torch.autograd.profiler.profile.__init__ is not _patches.original("torch.autograd.profiler.profile.__init__")
