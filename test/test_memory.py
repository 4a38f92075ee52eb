"""accel memory: statistics per device, record_stream, out of memory,
pinned host memory."""

import gc

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
