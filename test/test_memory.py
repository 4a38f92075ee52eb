"""accel memory: statistics per device, record_stream, out of memory,
the memory fraction, snapshots and history (in the format of PyTorch's memory
visualiser), out-of-memory observers, allocator settings, pinned host memory."""

import gc
import pickle
import threading

import pytest
import torch

import torch_accel

from conftest import run_python

MiB = 1 << 20


@pytest.fixture(autouse=True)
def collect_earlier_garbage():
    # Earlier tests may leave accel tensors in reference cycles; if the
    # collector freed them mid-test they would move the counts checked here.
    gc.collect()


def test_memory_allocated_follows_tensors():
    torch_accel.synchronize()
    before = torch_accel.memory_allocated()
    x = torch.empty(4 * MiB, dtype=torch.uint8, device="accel")
    assert torch_accel.memory_allocated() >= before + 4 * MiB
    assert torch_accel.max_memory_allocated() >= torch_accel.memory_allocated()
    assert torch_accel.memory_reserved() >= torch_accel.memory_allocated()
    del x
    assert torch_accel.memory_allocated() == before


def test_results_of_kernels_are_counted_as_accel_memory():
    # Kernel results are adopted as accel memory: the allocator sees them.
    x = torch.ones(MiB, device="accel")
    before = torch_accel.memory_allocated()
    y = x * 2
    assert torch_accel.memory_allocated() >= before + 4 * MiB
    del y
    assert torch_accel.memory_allocated() == before


def test_allocations_on_many_threads_keep_the_statistics():
    # Every allocation and free updates the statistics and the registries
    # under short locks; threads allocating at once (kernels run without the
    # GIL) must leave them as they found them, and results as on cpu.
    torch_accel.synchronize()
    count = torch_accel.device_count()
    before = [torch_accel.memory_stats(device) for device in range(count)]
    x = torch.randn(64, 64)
    expected = x + x * 2
    failures = []
    rounds, workers = 200, 4

    def work(device):
        torch_accel.set_device(device)
        a = x.to(f"accel:{device}")
        for _ in range(rounds):
            # Sizes of several classes, freed in another order than allocated.
            small = torch.empty(17, device="accel")
            result = a + a * 2
            large = torch.empty(3 * MiB, dtype=torch.uint8, device="accel")
            del small, large
            if not torch.equal(result.cpu(), expected):
                failures.append(device)
        del a, result

    devices = [i % count for i in range(workers)]
    threads = [threading.Thread(target=work, args=(device,)) for device in devices]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
    for device in range(count):
        after = torch_accel.memory_stats(device)
        assert after["allocated_bytes.all.current"] == before[device]["allocated_bytes.all.current"]
        assert after["allocation.all.current"] == before[device]["allocation.all.current"]
        allocated = after["allocation.all.allocated"] - before[device]["allocation.all.allocated"]
        freed = after["allocation.all.freed"] - before[device]["allocation.all.freed"]
        assert allocated == freed >= devices.count(device) * rounds * 4


def test_peak_reset():
    x = torch.empty(8 * MiB, dtype=torch.uint8, device="accel")
    del x
    assert torch_accel.max_memory_allocated() >= 8 * MiB
    torch_accel.reset_peak_memory_stats()
    assert torch_accel.max_memory_allocated() == torch_accel.memory_allocated()


def test_memory_stats_keys():
    torch.empty(1, device="accel")
    stats = torch_accel.memory_stats()
    for key in ("allocated_bytes.all.current", "allocated_bytes.all.peak", "reserved_bytes.all.current"):
        assert key in stats
    assert torch_accel.memory_stats_as_nested_dict()["allocated_bytes"]["all"]["current"] == stats[
        "allocated_bytes.all.current"
    ]


def test_memory_is_per_device(two_devices):
    torch.empty(1, device="accel:1")
    before = [torch_accel.memory_allocated(i) for i in range(2)]
    x = torch.empty(2 * MiB, dtype=torch.uint8, device="accel:1")
    assert torch_accel.memory_allocated(0) == before[0]
    assert torch_accel.memory_allocated(1) >= before[1] + 2 * MiB
    assert torch_accel.memory_allocated("accel:1") == torch_accel.memory_allocated(1)
    del x


def test_mem_get_info():
    free, total = torch_accel.mem_get_info()
    assert 0 < free <= total
    assert total == torch_accel.get_device_properties().total_memory


def test_empty_cache_keeps_live_tensors():
    x = torch.arange(10.0, device="accel")
    torch_accel.empty_cache()
    assert torch.equal(x.cpu(), torch.arange(10.0))


def test_record_stream_keeps_memory_for_the_stream():
    stream = torch_accel.Stream()
    x = torch.ones(MiB, device="accel")
    # torch.ones fills x on the current stream: the side stream waits for it
    # (without this, a race on a GPU; the stream sanitizer reports it).
    stream.wait_stream(torch_accel.current_stream())
    with torch_accel.stream(stream):
        y = x * 3
    x.record_stream(stream)
    del x
    stream.synchronize()
    assert torch.equal(y.cpu(), torch.full((MiB,), 3.0))


def test_out_of_memory_names_accel_and_recovers():
    free, total = torch_accel.mem_get_info()
    with pytest.raises(torch.OutOfMemoryError, match=r"accel"):
        torch.empty(total * 4, dtype=torch.uint8, device="accel")
    x = torch.ones(2, 3, device="accel")
    with pytest.raises(torch.OutOfMemoryError, match=r"accel"):
        x.new_empty(total * 4, dtype=torch.uint8)
    # Nothing is corrupted and the device keeps working.
    assert torch.equal((x + 1).cpu(), torch.full((2, 3), 2.0))


def test_out_of_memory_inside_a_kernel():
    # A host-runtime device with a small memory limit: the kernel's result
    # allocation fails inside the fallback.
    # Host runtime: 64 MiB devices. CUDA runtime: the caching allocator capped.
    proc = run_python(
        """
        import torch, torch_accel
        if torch_accel.runtime() == "cuda":
            torch.cuda.init()
            torch.cuda.set_per_process_memory_fraction((64 << 20) / torch.cuda.mem_get_info()[1])
        x = torch.ones(10 << 20, device="accel")   # 40 MiB
        try:
            y = x * 2                               # another 40 MiB
        except torch.OutOfMemoryError as e:
            assert "accel:0" in str(e), str(e)
        else:
            raise AssertionError("no OOM")
        del x
        y = torch.ones(10 << 20, device="accel").mul_(2)   # fits once x is freed
        assert y.sum().item() == 2 * (10 << 20)
        print("ok")
        """,
        env={"TORCH_ACCEL_HOST_MEMORY_MB": "64"},
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "ok"


def test_torch_accelerator_memory_functions_match(target):
    if torch.accelerator.current_accelerator().type != "accel":
        pytest.skip("torch.accelerator is cuda here (CUDA runtime on a GPU machine)")
    x = torch.empty(MiB, dtype=torch.uint8, device="accel")
    assert torch.accelerator.memory_allocated(0) == torch_accel.memory_allocated(0)
    del x


# memory_summary, the memory fraction ---------------------------------------------


def test_memory_summary_is_torch_cuda_table(monkeypatch):
    # torch.cuda.memory_summary, fed accel's statistics, prints the same
    # table as accel's, but for the device's name in its labels.
    x = torch.empty(3 * MiB + 5, dtype=torch.uint8, device="accel")
    y = torch.empty(100, device="accel")
    stats = torch_accel.memory_stats()
    monkeypatch.setattr(torch_accel.memory, "memory_stats", lambda device=None: stats)
    monkeypatch.setattr(torch.cuda.memory, "memory_stats", lambda device=None: stats)
    for abbreviated in (False, True):
        ours = torch_accel.memory_summary(0, abbreviated=abbreviated).splitlines()
        theirs = torch.cuda.memory_summary(0, abbreviated=abbreviated).splitlines()
        assert len(ours) == len(theirs)
        assert all(len(line) == 77 for line in ours), ours
        assert "PyTorch accel memory summary, device ID 0" in ours[1]
        assert f"accel OOMs: {stats['num_ooms']} " in ours[3]
        renamed = {"GPU reserved memory": "Reserved memory", "GPU reserved segments": "Reserved segments",
                   "Oversize GPU segments": "Oversize segments"}
        for mine, cuda_line in list(zip(ours, theirs))[4:]:
            for cuda_name, name in renamed.items():
                cuda_line = cuda_line.replace(cuda_name, name.ljust(len(cuda_name)))
            assert mine == cuda_line
    del x, y


def test_memory_summary_counts_the_allocations():
    torch_accel.reset_peak_memory_stats()
    before = torch_accel.memory_stats()["allocation.all.current"]
    xs = [torch.empty(1000, dtype=torch.uint8, device="accel") for _ in range(3)]
    row = next(line for line in torch_accel.memory_summary().splitlines() if line.startswith("| Allocations"))
    assert int(row.split("|")[2].split()[0]) == before + 3
    del xs


def test_set_per_process_memory_fraction_checks_its_arguments():
    with pytest.raises(TypeError, match="must be `float`"):
        torch_accel.set_per_process_memory_fraction(1)
    with pytest.raises(ValueError, match="Allowed range: 0~1"):
        torch_accel.set_per_process_memory_fraction(1.5)
    with pytest.raises(RuntimeError, match="Invalid accel device index 64"):
        torch_accel.set_per_process_memory_fraction(0.5, 64)
    assert torch_accel.get_per_process_memory_fraction() == 1.0


def test_memory_fraction_caps_allocations():
    proc = run_python(
        """
        import torch, torch_accel
        free, total = torch_accel.mem_get_info()
        fraction = (64 << 20) / total
        torch_accel.set_per_process_memory_fraction(fraction)
        assert torch_accel.get_per_process_memory_fraction() == fraction
        x = torch.empty(40 << 20, dtype=torch.uint8, device="accel")
        try:
            torch.empty(40 << 20, dtype=torch.uint8, device="accel")
        except torch.OutOfMemoryError as e:
            assert "accel:0" in str(e), str(e)
        else:
            raise AssertionError("the fraction did not cap the allocation")
        # The device itself still has the memory: mem_get_info reports the
        # device, as cudaMemGetInfo does, not the cap.
        free, total_now = torch_accel.mem_get_info()
        assert total_now == total and free >= 40 << 20, (free, total)
        assert free <= total - torch_accel.memory_allocated()
        if torch_accel.runtime() == "host":
            assert free == total - torch_accel.memory_allocated()
        assert torch_accel.memory_stats()["num_ooms"] == 1
        del x
        y = torch.empty(40 << 20, dtype=torch.uint8, device="accel")   # fits again
        torch_accel.set_per_process_memory_fraction(1.0)
        z = torch.empty(40 << 20, dtype=torch.uint8, device="accel")   # no cap any more
        print("ok")
        """,
        env={"TORCH_ACCEL_HOST_MEMORY_MB": "256"},
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "ok"


def test_memory_fraction_is_per_device(two_devices):
    proc = run_python(
        """
        import torch, torch_accel
        total = torch_accel.mem_get_info(1)[1]
        torch_accel.set_per_process_memory_fraction((16 << 20) / total, device=1)
        assert torch_accel.get_per_process_memory_fraction(0) == 1.0
        torch.empty(32 << 20, dtype=torch.uint8, device="accel:0")
        try:
            torch.empty(32 << 20, dtype=torch.uint8, device="accel:1")
        except torch.OutOfMemoryError as e:
            assert "accel:1" in str(e), str(e)
        else:
            raise AssertionError("accel:1 was not capped")
        print("ok")
        """,
        env={"TORCH_ACCEL_HOST_MEMORY_MB": "256"},
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "ok"


# Snapshots and history -----------------------------------------------------------


@pytest.fixture
def recording():
    """Records memory history (Python stacks) for the test, then stops."""
    torch_accel.memory._record_memory_history(stacks="python", max_entries=10000, clear_history=True)
    yield
    torch_accel.memory._record_memory_history(None)


def _block_at(snapshot, address):
    for segment in snapshot["segments"]:
        for block in segment["blocks"]:
            if block["address"] == address:
                return segment, block
    raise AssertionError(f"no block at {address:#x}")


def allocate_for_the_snapshot():
    return torch.empty(3 * MiB, dtype=torch.uint8, device="accel")


def test_snapshot_has_the_visualiser_format(recording):
    kept = allocate_for_the_snapshot()
    freed = torch.ones(1000, device="accel")
    freed_address = freed.data_ptr()
    del freed
    snapshot = torch_accel.memory._snapshot()

    assert {"segments", "device_traces", "allocator_settings"} <= snapshot.keys()
    assert len(snapshot["device_traces"]) == torch_accel.device_count()
    for segment in snapshot["segments"]:
        assert {"device", "address", "total_size", "allocated_size", "active_size", "requested_size", "stream",
                "segment_type", "segment_pool_id", "is_expandable", "frames", "blocks"} <= segment.keys()
        assert segment["segment_type"] in ("small", "large")
        assert sum(b["size"] for b in segment["blocks"]) == segment["total_size"]
        for block in segment["blocks"]:
            assert {"address", "size", "requested_size", "state", "frames"} <= block.keys()
            assert block["state"] in ("active_allocated", "active_pending_free", "inactive")

    segment, block = _block_at(snapshot, kept.data_ptr())
    assert segment["device"] == 0 and segment["segment_type"] == "large"
    assert block["state"] == "active_allocated" and block["requested_size"] == 3 * MiB
    # The block remembers where it was allocated, down to this file's function.
    assert any(f["name"] == "allocate_for_the_snapshot" and f["filename"] == __file__ for f in block["frames"])

    trace = snapshot["device_traces"][0]
    for entry in trace:
        assert {"action", "size", "stream", "time_us", "frames"} <= entry.keys()
        assert ("device_free" if entry["action"] == "oom" else "addr") in entry
    actions = [(e["action"], e["addr"]) for e in trace if e["action"] != "snapshot"]
    assert ("alloc", kept.data_ptr()) in actions
    block_events = [a for a, addr in actions if addr == freed_address and a in ("alloc", "free_requested", "free_completed")]
    assert block_events[-3:] == ["alloc", "free_requested", "free_completed"]
    alloc = next(e for e in trace if e["action"] == "alloc" and e["addr"] == kept.data_ptr())
    assert any(f["name"] == "allocate_for_the_snapshot" for f in alloc["frames"])
    assert [e["time_us"] for e in trace] == sorted(e["time_us"] for e in trace)


def test_snapshot_records_the_allocating_stream(recording):
    # The stream is the native handle, as cuda's snapshot records the cudaStream_t.
    side = torch_accel.Stream()
    with torch_accel.stream(side):
        on_side = allocate_for_the_snapshot()
    on_default = allocate_for_the_snapshot()
    snapshot = torch_accel.memory._snapshot()
    assert _block_at(snapshot, on_side.data_ptr())[0]["stream"] == side.accel_stream != 0
    assert _block_at(snapshot, on_default.data_ptr())[0]["stream"] == torch_accel.default_stream().accel_stream
    alloc = next(e for e in snapshot["device_traces"][0] if e["action"] == "alloc" and e["addr"] == on_side.data_ptr())
    assert alloc["stream"] == side.accel_stream
    del on_side, on_default


def test_memory_viz_reads_the_snapshot(recording, tmp_path):
    from torch.cuda import _memory_viz

    x = allocate_for_the_snapshot()
    y = torch.ones(100, device="accel") * 2
    del y
    path = tmp_path / "snapshot.pickle"
    torch_accel.memory._dump_snapshot(str(path))
    with open(path, "rb") as f:
        snapshot = pickle.load(f)
    _block_at(snapshot, x.data_ptr())

    summary = _memory_viz.segsum(snapshot)  # checks its own accounting
    assert f"segments: {len(snapshot['segments'])}" in summary
    assert "allocate_for_the_snapshot" in _memory_viz.memory(snapshot, format_flamegraph=lambda lines: lines)
    assert "allocate_for_the_snapshot" in _memory_viz.segments(snapshot, format_flamegraph=lambda lines: lines)
    text = _memory_viz.trace(snapshot)
    assert "Device 0" in text and "cudaMalloc(" in text and "del " in text
    for html in (_memory_viz.segment_plot(snapshot), _memory_viz.trace_plot(snapshot),
                 _memory_viz.trace_plot(snapshot, plot_segments=True)):
        assert "MemoryViz.js" in html and "snapshot.pickle" in html
    del x


def test_memory_snapshot_lists_the_segments():
    x = allocate_for_the_snapshot()
    segments = torch_accel.memory_snapshot()
    assert any(b["address"] == x.data_ptr() for s in segments for b in s["blocks"])
    # A pool's snapshot lists only its segments (test_memory_pools.py): a pool
    # that holds nothing, none.
    assert torch_accel.memory_snapshot(mempool_id=(0, 2**40)) == []


def test_history_is_off_by_default_and_after_stopping():
    torch_accel.memory._record_memory_history(stacks="python")
    torch_accel.memory._record_memory_history(None)
    x = allocate_for_the_snapshot()
    snapshot = torch_accel.memory._snapshot()
    assert all(trace == [] for trace in snapshot["device_traces"])
    _, block = _block_at(snapshot, x.data_ptr())
    assert block["frames"] == []


def test_history_keeps_the_newest_max_entries():
    torch_accel.memory._record_memory_history(stacks="python", max_entries=4, clear_history=True)
    try:
        xs = [torch.empty(1000 + i, dtype=torch.uint8, device="accel") for i in range(5)]
        trace = torch_accel.memory._snapshot()["device_traces"][0]
    finally:
        torch_accel.memory._record_memory_history(None)
    assert len(trace) == 4
    # The newest: the last tensor's allocation, then the snapshot's own entry.
    assert trace[-1]["action"] == "snapshot"
    assert trace[-2]["action"] == "alloc" and trace[-2]["addr"] == xs[-1].data_ptr()
    del xs


def test_state_only_history_keeps_contexts_not_events():
    torch_accel.memory._record_memory_history("state", stacks="python", clear_history=True)
    try:
        x = allocate_for_the_snapshot()
        snapshot = torch_accel.memory._snapshot()
    finally:
        torch_accel.memory._record_memory_history(None)
    _, block = _block_at(snapshot, x.data_ptr())
    assert any(f["name"] == "allocate_for_the_snapshot" for f in block["frames"])
    assert len(snapshot["device_traces"][0]) <= 1


def test_skip_actions_and_the_legacy_form():
    torch_accel.memory._record_memory_history(
        stacks="python", clear_history=True, skip_actions=["segment_alloc", "segment_free", "snapshot"]
    )
    try:
        x = allocate_for_the_snapshot()
        actions = {e["action"] for e in torch_accel.memory._snapshot()["device_traces"][0]}
    finally:
        torch_accel.memory._record_memory_history(None)
    assert "alloc" in actions and not actions & {"segment_alloc", "segment_free", "snapshot"}
    # torch.cuda's legacy form: enabled as a bool.
    torch_accel.memory._record_memory_history(True, trace_alloc_max_entries=100, trace_alloc_record_context=True)
    try:
        y = allocate_for_the_snapshot()
        trace = torch_accel.memory._snapshot()["device_traces"][0]
    finally:
        torch_accel.memory._record_memory_history(False)
    assert any(e["action"] == "alloc" and e["addr"] == y.data_ptr() and e["frames"] for e in trace)
    del x, y


def test_record_memory_history_checks_its_arguments():
    with pytest.raises(ValueError, match="expected enabled to be one of 'state', 'all' or None, got 'yes'"):
        torch_accel.memory._record_memory_history("yes")
    with pytest.raises(ValueError, match="expected context"):
        torch_accel.memory._record_memory_history(context="sometimes")
    with pytest.raises(ValueError, match="expected stacks"):
        torch_accel.memory._record_memory_history(stacks="cpp")
    with pytest.raises(ValueError, match="unknown action 'malloc'"):
        torch_accel.memory._record_memory_history(skip_actions=["malloc"])
    with pytest.raises(NotImplementedError, match="compile_context"):
        torch_accel.memory._record_memory_history(compile_context=True)
    torch_accel.memory._record_memory_history(None)


def test_python_stacks_leave_out_cpp_frames_and_all_stacks_add_them():
    def cpp_frames(frames):
        # C++ frames name qualified functions (at::empty, c10::...); Python's never do.
        return [f for f in frames if "::" in f["name"]]

    for stacks in ("python", "all"):
        torch_accel.memory._record_memory_history(stacks=stacks, clear_history=True)
        try:
            x = allocate_for_the_snapshot()
            _, block = _block_at(torch_accel.memory._snapshot(), x.data_ptr())
        finally:
            torch_accel.memory._record_memory_history(None)
        assert any(f["name"] == "allocate_for_the_snapshot" for f in block["frames"])
        assert bool(cpp_frames(block["frames"])) == (stacks == "all"), cpp_frames(block["frames"])[:5]
        del x


# Out-of-memory observers -----------------------------------------------------------


def test_out_of_memory_observer_sees_the_failing_allocation():
    proc = run_python(
        """
        import torch, torch_accel
        if torch_accel.runtime() == "cuda":
            torch_accel.set_per_process_memory_fraction((64 << 20) / torch_accel.mem_get_info()[1])
        calls = []
        def observer(device, alloc, device_total, device_free):
            calls.append((device, alloc, device_total, device_free, torch_accel.memory._snapshot()))
        torch_accel.memory._record_memory_history(stacks="python")
        torch_accel.memory.attach_out_of_memory_observer(observer)
        x = torch.ones(10 << 20, device="accel")                          # 40 MiB
        try:
            torch.empty(40 << 20, dtype=torch.uint8, device="accel")      # 40 MiB more
        except torch.OutOfMemoryError as e:
            assert "accel" in str(e)
        else:
            raise AssertionError("no OOM")
        assert len(calls) == 1, calls
        device, alloc, device_total, device_free, snapshot = calls[0]
        assert device == 0 and alloc >= 40 << 20 and device_total <= 64 << 20, calls[0][:4]
        # The snapshot shows the memory at the failure: x, and the OOM last.
        assert any(b["address"] == x.data_ptr() for s in snapshot["segments"] for b in s["blocks"])
        oom = [e for e in snapshot["device_traces"][0] if e["action"] == "oom"]
        assert len(oom) == 1 and oom[0]["size"] == alloc and oom[0]["device_free"] == device_free, oom
        assert any(f["filename"] == "<string>" for f in oom[0]["frames"])
        assert torch_accel.memory_stats()["num_ooms"] == 1
        # Inside a kernel (the fallback allocating the result) too.
        try:
            x * 2
        except torch.OutOfMemoryError:
            pass
        assert len(calls) == 2
        print("ok")
        """,
        env={"TORCH_ACCEL_HOST_MEMORY_MB": "64"},
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "ok"


def test_an_observer_error_does_not_replace_the_out_of_memory_error():
    proc = run_python(
        """
        import warnings, torch, torch_accel
        def observer(device, alloc, device_total, device_free):
            raise KeyError("observer failed")
        torch_accel.memory.attach_out_of_memory_observer(observer)
        total = torch_accel.mem_get_info()[1]
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                torch.empty(total * 2, dtype=torch.uint8, device="accel")
            except torch.OutOfMemoryError:
                pass
        assert any("observer failed" in str(w.message) for w in caught), [str(w.message) for w in caught]
        assert torch.ones(3, device="accel").sum().item() == 3
        print("ok")
        """,
        env={"TORCH_ACCEL_HOST_MEMORY_MB": "64"},
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "ok"


def test_out_of_memory_observer_must_be_callable():
    with pytest.raises(TypeError, match="expects a callable"):
        torch_accel.memory.attach_out_of_memory_observer(42)


# Allocator settings ------------------------------------------------------------------


def test_allocator_settings_from_the_environment():
    proc = run_python(
        """
        import torch, torch_accel
        torch.empty(1, device="accel")
        assert torch_accel.memory_stats()["max_split_size"] == 64 << 20
        settings = torch_accel.memory._snapshot()["allocator_settings"]
        assert settings["max_split_size"] == 64 << 20
        assert settings["garbage_collection_threshold"] == 0.6
        assert settings["PYTORCH_ALLOC_CONF"] == "max_split_size_mb:64,garbage_collection_threshold:0.6"
        torch_accel.memory._set_allocator_settings("max_split_size_mb:128")
        assert torch_accel.memory_stats()["max_split_size"] == 128 << 20
        print("ok")
        """,
        env={"PYTORCH_ALLOC_CONF": "max_split_size_mb:64,garbage_collection_threshold:0.6"},
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "ok"


INVALID_SETTINGS = [
    ("max_split_size_mb:1", "too small"),
    ("max_split_size_mb:lots", ""),
    ("garbage_collection_threshold:1.5", r"\(0.0, 1.0\)"),
    ("expandable_segments:maybe", "True' or 'False"),
    ("max_cache:1", "Unrecognized key 'max_cache'"),
]


@pytest.mark.parametrize("setting, reason", [INVALID_SETTINGS[1], INVALID_SETTINGS[4]])
def test_invalid_allocator_settings_are_reported_when_accel_initialises(setting, reason):
    proc = run_python(
        f"""
        import re, torch, torch_accel
        try:
            torch.empty(1, device="accel")
        except ValueError as e:
            message = str(e)
        else:
            raise AssertionError("accepted")
        assert "accel: invalid allocator settings PYTORCH_ALLOC_CONF='{setting}'" in message, message
        assert re.search({reason!r}, message), message
        print("ok")
        """,
        env={"PYTORCH_ALLOC_CONF": setting},
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "ok"


@pytest.mark.parametrize("setting, reason", INVALID_SETTINGS)
def test_set_allocator_settings_rejects_invalid_settings(setting, reason):
    # Each is rejected before it changes a setting.
    before = torch_accel.memory_stats()["max_split_size"]
    with pytest.raises(ValueError, match=f"accel: invalid allocator settings '{setting}': .*{reason}"):
        torch_accel.memory._set_allocator_settings(setting)
    assert torch_accel.memory_stats()["max_split_size"] == before


def test_set_allocator_settings_takes_a_string():
    with pytest.raises(TypeError):
        torch_accel.memory._set_allocator_settings(1)


def test_expandable_segments_warn_where_unsupported():
    proc = run_python(
        """
        import warnings, torch, torch_accel
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            x = torch.ones(4, device="accel") + 1
        messages = [str(w.message) for w in caught if "expandable_segments" in str(w.message)]
        # Only the host runtime lacks them (CUDA's allocator has them).
        assert len(messages) == (1 if torch_accel.runtime() == "host" else 0), messages
        assert torch.equal(x.cpu(), torch.full((4,), 2.0))
        print("ok")
        """,
        env={"PYTORCH_ALLOC_CONF": "expandable_segments:True"},
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "ok"


# Pinned memory ----------------------------------------------------------------


def test_pin_memory():
    x = torch.randn(16)
    assert not x.is_pinned()
    pinned = x.pin_memory()
    assert pinned.is_pinned()
    assert torch.equal(pinned, x)


def test_non_blocking_copy_from_pinned_memory():
    src = torch.arange(1 << 16, dtype=torch.float32).pin_memory()
    stream = torch_accel.Stream()
    with torch_accel.stream(stream):
        dst = src.to("accel", non_blocking=True)
        back = torch.empty_like(src).pin_memory()
        back.copy_(dst * 2, non_blocking=True)
    stream.synchronize()
    assert torch.equal(back, src * 2)


def test_dataloader_pin_memory():
    dataset = torch.utils.data.TensorDataset(torch.arange(16.0).view(8, 2))
    loader = torch.utils.data.DataLoader(dataset, batch_size=4, pin_memory=True)
    batches = [batch.to("accel", non_blocking=True) for (batch,) in loader]
    torch_accel.synchronize()
    assert torch.equal(torch.cat(batches).cpu(), torch.arange(16.0).view(8, 2))


def test_device_from_pointer_answers_as_cuda_does(two_devices):
    # What ATen's from_blob asks of accel for a pointer given without a device
    # index (at::Context::getDeviceFromPtr): the device of accel memory, also
    # inside a block; pinned host memory is accepted, as
    # at::cuda::getDeviceFromPtr accepts it (the device it was allocated
    # against; on the host runtime, the current one); other memory is refused.
    for index in range(torch_accel.device_count()):
        block = torch.empty(64, device=f"accel:{index}")
        assert torch_accel._C._device_from_pointer(block.data_ptr()) == index
        assert torch_accel._C._device_from_pointer(block[5:].data_ptr()) == index
    pinned = torch.randn(16).pin_memory()
    assert 0 <= torch_accel._C._device_from_pointer(pinned.data_ptr()) < torch_accel.device_count()
    with pytest.raises(RuntimeError, match="resides on host memory and is not registered with any accel"):
        torch_accel._C._device_from_pointer(torch.randn(16).data_ptr())
