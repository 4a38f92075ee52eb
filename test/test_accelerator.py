"""torch.accelerator acts on accel once torch_accel is imported.

Each function is compared with torch.accel's own answer and with the device
state it changes. A training script written only against torch.accelerator
runs in a process that imports torch_accel and must train on accel exactly as
it trains on the target device in a process without torch_accel.
"""

import os

import pytest
import torch

import torch_accel
from conftest import run_python

A = torch.accelerator
MiB = 1 << 20


def test_current_accelerator_is_accel():
    assert A.current_accelerator() == torch.device("accel")
    assert A.current_accelerator(check_available=True) == torch.device("accel")
    assert A.is_available() == torch_accel.is_available()
    assert A.device_count() == torch_accel.device_count() > 0


def test_current_device_index_follows_accel(two_devices):
    assert A.current_device_index() == torch_accel.current_device() == 0
    A.set_device_index(1)
    assert torch_accel.current_device() == 1 == A.current_device_index()
    torch_accel.set_device(0)
    assert A.current_device_index() == 0
    A.set_device_index("accel:1")
    assert torch_accel.current_device() == 1
    A.set_device_index(torch.device("accel", 0))
    assert torch_accel.current_device() == 0


def test_negative_device_index_is_a_no_op(two_devices):
    A.set_device_index(1)
    A.set_device_index(-1)
    assert torch_accel.current_device() == 1


def test_device_index_context_manager(two_devices):
    with A.device_index(1):
        assert torch_accel.current_device() == 1
        assert torch.empty(1, device="accel").device == torch.device("accel:1")
        with A.device_index(0):
            assert torch_accel.current_device() == 0
        assert torch_accel.current_device() == 1
    assert torch_accel.current_device() == 0
    with A.device_index(None):
        assert torch_accel.current_device() == 0


def test_current_stream_is_accels():
    for index in range(torch_accel.device_count()):
        assert A.current_stream(index) == torch_accel.current_stream(index) == torch_accel.default_stream(index)
        assert A.current_stream(f"accel:{index}").device == torch.device("accel", index)
    stream = torch_accel.Stream()
    with torch_accel.stream(stream):
        assert A.current_stream() == stream
    assert A.current_stream() == torch_accel.default_stream()


def test_set_stream_sets_accels_stream_and_device(two_devices):
    stream = torch_accel.Stream(device=1)
    A.set_stream(stream)
    # As torch.accel.set_stream: the stream's device becomes current.
    assert torch_accel.current_device() == 1
    assert torch_accel.current_stream(1) == stream
    assert torch_accel.current_stream(0) == torch_accel.default_stream(0)
    # Work queued now runs on it.
    event = torch.Event(device="accel:1")
    event.record()
    assert event.device == torch.device("accel:1")
    A.set_stream(torch_accel.default_stream(1))
    assert torch_accel.current_stream(1) == torch_accel.default_stream(1)


def test_streams_made_through_torch_stream_are_accel_streams():
    stream = torch.Stream(device=A.current_accelerator())
    assert stream.device_type == torch_accel.Stream().device_type
    assert stream.device == torch.device("accel:0")
    with stream:
        assert torch_accel.current_stream() == stream
    assert torch_accel.current_stream() == torch_accel.default_stream()


def test_synchronize_completes_queued_work(two_devices, target):
    for device in (None, 0, "accel:1", torch.device("accel", 1)):
        stream = torch_accel.Stream(device=device)
        with torch_accel.stream(stream):
            x = torch.randn(256, 256, device=stream.device)
            y = x @ x
            event = stream.record_event()
        A.synchronize(device)
        assert event.query() and stream.query()
        expected = x.to(target) @ x.to(target)
        assert torch.equal(y.cpu(), expected.cpu())


# --- Memory -----------------------------------------------------------------------


def test_memory_functions_are_accels():
    for index in range(torch_accel.device_count()):
        with torch_accel.device(index):
            before = A.memory_allocated()
            assert before == torch_accel.memory_allocated()
            block = torch.empty(MiB, dtype=torch.uint8, device="accel")
            assert A.memory_allocated() == torch_accel.memory_allocated() == before + MiB
            assert A.memory_allocated(index) == A.memory_allocated(f"accel:{index}") == before + MiB
            assert A.max_memory_allocated() == torch_accel.max_memory_allocated() >= before + MiB
            assert A.memory_reserved() == torch_accel.memory_reserved() >= before + MiB
            assert A.max_memory_reserved() == torch_accel.max_memory_reserved()
            assert A.memory_stats() == torch_accel.memory_stats()
            assert A.memory_stats(index)["allocated_bytes.all.current"] == before + MiB
            del block
            assert A.memory_allocated() == torch_accel.memory_allocated() == before


def test_memory_of_one_device_is_not_the_others(two_devices):
    before = [A.memory_allocated(i) for i in range(2)]
    block = torch.empty(MiB, dtype=torch.uint8, device="accel:1")
    assert A.memory_allocated(0) == before[0]
    assert A.memory_allocated(1) == before[1] + MiB
    del block


def test_reset_peak_memory_stats():
    block = torch.empty(4 * MiB, dtype=torch.uint8, device="accel")
    del block
    assert A.max_memory_allocated() >= A.memory_allocated() + 4 * MiB
    A.reset_peak_memory_stats()
    assert A.max_memory_allocated() == torch_accel.max_memory_allocated() == A.memory_allocated()
    assert A.max_memory_reserved() == torch_accel.max_memory_reserved() == A.memory_reserved()


def test_reset_accumulated_memory_stats():
    # (The host runtime keeps no accumulated counters: they read 0 there.)
    torch.empty(MiB, dtype=torch.uint8, device="accel")
    accumulated = ("allocation.all.allocated", "allocation.all.freed", "allocated_bytes.all.freed")
    assert [A.memory_stats()[k] for k in accumulated] == [torch_accel.memory_stats()[k] for k in accumulated]
    A.reset_accumulated_memory_stats()
    assert [A.memory_stats()[k] for k in accumulated] == [torch_accel.memory_stats()[k] for k in accumulated] == [0] * 3


def test_empty_cache_releases_accels_cached_memory():
    block = torch.empty(64 * MiB, dtype=torch.uint8, device="accel")
    del block
    # CUDA's caching allocator keeps the block's segment (at least 64 MiB
    # cached); the host runtime caches nothing.
    cached = A.memory_reserved() - A.memory_allocated()
    A.empty_cache()
    # The block's segment, now entirely free, is released.
    assert A.memory_reserved() - A.memory_allocated() <= max(cached - 64 * MiB, 0)
    assert A.memory_reserved() == torch_accel.memory_reserved()


def test_get_memory_info_is_accels():
    for index in range(torch_accel.device_count()):
        free, total = A.get_memory_info(index)
        assert (free, total) == torch_accel.mem_get_info(index)
        assert 0 < free <= total
        with torch_accel.device(index):
            assert A.get_memory_info() == torch_accel.mem_get_info(index)


def test_get_device_capability():
    capability = A.get_device_capability("accel:0")
    supported = capability["supported_dtypes"]
    assert {torch.float32, torch.float16, torch.int64, torch.bool} <= supported
    assert (torch.bfloat16 in supported) == torch_accel.is_bf16_supported(including_emulation=False)


# --- Bad input --------------------------------------------------------------------


@pytest.mark.parametrize(
    "call",
    [
        lambda: A.set_device_index(99),
        lambda: A.current_stream(99),
        lambda: A.synchronize(99),
        lambda: A.memory_allocated(99),
        lambda: A.memory_stats(99),
        lambda: A.reset_peak_memory_stats(99),
        lambda: A.get_memory_info(99),
        lambda: A.get_device_capability(99),
    ],
    ids=["set_device_index", "current_stream", "synchronize", "memory_allocated", "memory_stats", "reset_peak", "get_memory_info", "get_device_capability"],
)
def test_a_device_that_does_not_exist_is_a_clear_error(call):
    with pytest.raises(RuntimeError, match=r"Invalid accel device index 99: there (is|are) \d+ accel devices?"):
        call()


@pytest.mark.parametrize("index", [-5, -100])
def test_a_negative_index_names_no_device(index):
    # torch.accelerator passes negative indices other than -1 through (cuda:
    # "invalid device ordinal" from cudaSetDevice); the guard reports them.
    with pytest.raises(RuntimeError, match=rf"Invalid accel device index {index}: there (is|are) \d+ accel devices?"):
        with A.device_index(index):
            pass
    assert A.current_device_index() == 0


def test_an_index_beyond_int8_fails_in_torch_accelerator_itself():
    # torch._C._accelerator_* take a c10::DeviceIndex: PyTorch's pybind11
    # rejects 2**40 before accel is reached, for cuda as for accel (see
    # docs/known-limitations.md); the current device stays.
    for call in (A.set_device_index, A.current_stream, A.synchronize):
        with pytest.raises(TypeError, match="incompatible function arguments"):
            call(2**40)
    assert A.current_device_index() == 0


@pytest.mark.parametrize("device", ["cpu", "cuda:0", torch.device("meta")])
def test_a_device_of_another_type_is_rejected(device):
    with pytest.raises(ValueError, match="doesn't match the current accelerator accel"):
        A.current_stream(device)
    with pytest.raises(ValueError, match="doesn't match the current accelerator accel"):
        A.memory_allocated(device)


def test_a_stream_of_another_device_type_is_rejected():
    with pytest.raises(RuntimeError, match="stream.s device type CPU doesn.t match the current accelerator ACCEL"):
        A.set_stream(torch.Stream(device="cpu"))


# --- Before initialisation ----------------------------------------------------------


def test_memory_queries_before_initialisation_do_not_initialise_accel():
    proc = run_python(
        """
        import torch, torch_accel
        A = torch.accelerator
        assert A.current_accelerator() == torch.device("accel")
        assert A.device_count() == torch_accel.device_count()
        # As torch.cuda before CUDA starts: nothing to report, nothing to free.
        assert A.memory_stats() == {} and A.memory_allocated() == 0 and A.max_memory_reserved() == 0
        A.empty_cache()
        assert not torch_accel.is_initialized()
        # Asking for the current device initialises, as on CUDA.
        assert A.current_device_index() == 0
        assert torch_accel.is_initialized()
        assert A.memory_stats()["allocated_bytes.all.current"] == 0
        print("ok")
        """
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "ok"


# --- A device-agnostic training script ------------------------------------------------

SCRIPT = os.path.join(os.path.dirname(__file__), "_device_agnostic_training.py")


@pytest.fixture(scope="module")
def script_on_accel(tmp_path_factory):
    """The script in a process that imports torch_accel, with torch.accel's own
    view of the same memory taken while the model is alive."""
    output = tmp_path_factory.mktemp("accelerator") / "accel.pt"
    proc = run_python(
        f"""
        import runpy
        import torch
        import torch_accel
        record, model = runpy.run_path({SCRIPT!r})["train"]()
        record["accel"] = {{
            "memory_allocated": torch.accel.memory_allocated(),
            "max_memory_allocated": torch.accel.max_memory_allocated(),
            "memory_reserved": torch.accel.memory_reserved(),
            "memory_stats": dict(torch.accel.memory_stats()),
            "accelerator_memory_stats": dict(torch.accelerator.memory_stats()),
            "accelerator_memory_allocated": torch.accelerator.memory_allocated(),
        }}
        torch.save(record, {str(output)!r})
        """,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    return torch.load(output)


@pytest.fixture(scope="module")
def script_on_target(tmp_path_factory):
    """The script in a process without torch_accel: its accelerator is the
    target (cuda), or there is none and it runs on the CPU (host runtime)."""
    output = tmp_path_factory.mktemp("accelerator") / "target.pt"
    proc = run_python(
        f"import runpy, sys; sys.argv = [{SCRIPT!r}, {str(output)!r}]; runpy.run_path({SCRIPT!r}, run_name='__main__')",
        env={"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"},
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    return torch.load(output)


def test_device_agnostic_script_runs_on_accel(script_on_accel):
    record = script_on_accel
    assert record["device"] == "accel"
    assert record["device_index"] == 0
    assert record["parameter_devices"] == ["accel:0"]
    assert all(allocated > 0 for allocated in record["memory_allocated"])
    assert record["max_memory_allocated"] >= max(record["memory_allocated"])
    # torch.accel sees the same allocator state as torch.accelerator.
    accel = record["accel"]
    assert accel["memory_allocated"] == accel["accelerator_memory_allocated"] > 0
    assert accel["memory_stats"] == accel["accelerator_memory_stats"]
    assert accel["max_memory_allocated"] == record["max_memory_allocated"]
    assert accel["memory_reserved"] >= accel["memory_allocated"]


def test_device_agnostic_script_matches_the_target_bitwise(script_on_accel, script_on_target, target):
    assert script_on_target["device"] == ("cuda" if target == "cuda" else "cpu")
    assert len(script_on_accel["losses"]) == len(script_on_target["losses"]) == 5
    for i, (a, e) in enumerate(zip(script_on_accel["losses"], script_on_target["losses"])):
        assert torch.equal(a, e), f"loss {i}"
    assert script_on_accel["losses"][-1] < script_on_accel["losses"][0]
    for name, value in script_on_target["state"].items():
        assert torch.equal(script_on_accel["state"][name], value), name
