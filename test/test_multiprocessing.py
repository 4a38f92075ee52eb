"""accel tensors across processes: torch.multiprocessing (spawn) and DataLoader workers.

The stock torch.multiprocessing sends accel tensors as it sends cuda tensors:
the receiver's tensor is over the sender's accel memory (in-place writes are
seen on both sides), and the memory lives while any process holds it. Where
the runtime cannot share (the CUDA runtime, for now) the sending process gets
a clear error naming accel, never a receiver left waiting.

Each multi-process test is bounded: queues are read with timeouts, processes
joined with timeouts and killed if still alive, and pytest-timeout stops the
test as a last resort. Spawned children start a Python with torch (a few
seconds each), so the tests share children where they can.
"""

import multiprocessing.reduction
import os
import sys
import warnings

import pytest
import torch
import torch.multiprocessing as mp

import torch_accel
from torch_accel import multiprocessing as accel_multiprocessing

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import _multiprocessing_worker as worker  # noqa: E402

TIMEOUT_S = 60
pytestmark = pytest.mark.timeout(150)

ForkingPickler = multiprocessing.reduction.ForkingPickler


def sharing_works() -> bool:
    return torch_accel._C._runtime_name() == "host"


needs_sharing = pytest.mark.skipif(
    not sharing_works(), reason="sharing accel memory between processes is implemented on the host runtime only"
)


def join(*procs, expect_exitcode=0):
    for proc in procs:
        proc.join(TIMEOUT_S)
    alive = [proc for proc in procs if proc.is_alive()]
    for proc in alive:
        proc.kill()
        proc.join()
    assert not alive, "a child process did not finish"
    assert [proc.exitcode for proc in procs] == [expect_exitcode] * len(procs)


# --- In this process: the reduction itself ------------------------------------------


@needs_sharing
def test_reduction_keeps_the_senders_tensors_and_views(two_devices):
    base = torch.arange(12.0, device="accel:1")
    view = base[2:8].view(2, 3)
    other = torch.ones(3, device="accel:1")  # not shared: stays accelrt memory
    ForkingPickler.dumps(view)
    # The storage moved into shared memory: base and view still share it, on accel:1.
    assert view.device == base.device == torch.device("accel:1")
    assert view.data_ptr() == base.data_ptr() + 2 * base.element_size()
    assert torch.equal(base.cpu(), torch.arange(12.0))
    base.add_(1)
    assert torch.equal(view.cpu(), torch.arange(3.0, 9.0).view(2, 3))
    # Operators keep working on shared storages, next to unshared ones.
    assert torch.equal((view.flatten()[:3] + other).cpu(), torch.tensor([4.0, 5.0, 6.0]))


@needs_sharing
def test_received_in_the_same_process_is_the_same_storage():
    tensor = torch.arange(6, dtype=torch.int32, device="accel")
    payload = ForkingPickler.dumps(tensor)
    # Sharing again (as for a second message) maps nothing new.
    assert bytes(ForkingPickler.dumps(tensor)) != b""
    received = ForkingPickler.loads(payload)
    assert received.device == tensor.device
    assert received.untyped_storage().data_ptr() == tensor.untyped_storage().data_ptr()
    assert torch.equal(received.cpu(), tensor.cpu())


def test_empty_tensors_cross_without_memory():
    tensor = torch.empty(0, 3, device="accel")
    received = ForkingPickler.loads(ForkingPickler.dumps(tensor))
    assert received.device == tensor.device and received.shape == (0, 3)


def test_cpu_tensors_keep_torchs_reduction():
    tensor = torch.arange(4.0)
    received = ForkingPickler.loads(ForkingPickler.dumps(tensor))
    assert torch.equal(received, tensor) and received.is_shared()


def test_a_runtime_that_cannot_share_fails_in_the_sender(monkeypatch):
    # The CUDA runtime's answer for now (its shareStorage raises): the error
    # reaches the sending process, naming accel. A spawned Process pickles its
    # arguments in start(), so start() raises and no child waits.
    def refuse(storage):
        raise RuntimeError("Sharing accel tensors between processes (torch.multiprocessing) is not supported")

    monkeypatch.setattr(accel_multiprocessing._C, "_share_storage", refuse)
    tensor = torch.ones(2, device="accel")
    with pytest.raises(RuntimeError, match="Cannot send an accel tensor to another process: Sharing accel tensors"):
        ForkingPickler.dumps(tensor)
    ctx = mp.get_context("spawn")
    proc = ctx.Process(target=worker.add_in_place, args=(tensor, 1.0, ctx.SimpleQueue()))
    with pytest.raises(RuntimeError, match="Cannot send an accel tensor to another process"):
        proc.start()
    assert proc.exitcode is None and not proc.is_alive()


def test_non_leaf_tensor_requiring_grad_is_refused_as_for_cuda():
    tensor = torch.ones(2, device="accel", requires_grad=True) * 2
    with pytest.raises(RuntimeError, match="Cowardly refusing to serialize non-leaf tensor"):
        ForkingPickler.dumps(tensor)


# --- Across processes (spawn) -----------------------------------------------------


@needs_sharing
def test_process_argument_is_the_senders_memory(two_devices):
    ctx = mp.get_context("spawn")
    done = ctx.Queue()
    tensor = torch.arange(8.0, device="accel:1")[1:7]
    proc = ctx.Process(target=worker.add_in_place, args=(tensor, 10.0, done))
    proc.start()
    try:
        what, device, seen = done.get(timeout=TIMEOUT_S)
    finally:
        join(proc)
    assert (what, device) == ("added", "accel:1")
    assert seen == torch.arange(11.0, 17.0).tolist()
    # The child's in-place write is this process' tensor's.
    assert torch.equal(tensor.cpu(), torch.arange(11.0, 17.0))


@needs_sharing
def test_queue_round_trips_and_ownership():
    ctx = mp.get_context("spawn")
    requests, replies = ctx.Queue(), ctx.Queue()
    proc = ctx.Process(target=worker.serve, args=(requests, replies))
    proc.start()
    try:
        # There and back: the child sees the values; what comes back is this
        # process' own storage.
        tensor = torch.arange(5, dtype=torch.int64, device="accel")
        requests.put(("echo", tensor))
        device, values, back = replies.get(timeout=TIMEOUT_S)
        assert device == "accel:0" and torch.equal(values, torch.arange(5))
        assert back.data_ptr() == tensor.data_ptr()

        # In place in the child, seen here; a view of a storage already sent.
        requests.put(("add", (tensor[1:3], 100)))
        assert replies.get(timeout=TIMEOUT_S) == "added"
        assert torch.equal(tensor.cpu(), torch.tensor([0, 101, 102, 3, 4]))

        # Made in the child, kept here after the child freed it.
        requests.put(("produce", ("accel:0", torch.linspace(0, 1, 7))))
        produced = replies.get(timeout=TIMEOUT_S)
        requests.put("taken")
        assert replies.get(timeout=TIMEOUT_S) == "freed"
        assert produced.device == torch.device("accel:0")
        assert torch.equal(produced.cpu(), torch.linspace(0, 1, 7))
        produced.mul_(2)
        assert torch.equal(produced.cpu(), torch.linspace(0, 2, 7))
        requests.put(None)
    finally:
        join(proc)


@needs_sharing
def test_consumer_that_dies_early_leaves_the_sender_working():
    ctx = mp.get_context("spawn")
    requests, replies = ctx.Queue(), ctx.Queue()
    proc = ctx.Process(target=worker.serve, args=(requests, replies))
    proc.start()
    tensor = torch.full((4,), 7.0, device="accel")
    requests.put(("echo", tensor))
    replies.get(timeout=TIMEOUT_S)
    requests.put(("exit", None))
    join(proc, expect_exitcode=3)
    # The sender's tensor is intact and usable; freeing it frees the memory.
    assert torch.equal(tensor.add(1).cpu(), torch.full((4,), 8.0))
    del tensor


@needs_sharing
def test_dataloader_workers_return_accel_tensors():
    loader = torch.utils.data.DataLoader(
        worker.AccelDataset(),
        batch_size=2,
        num_workers=2,
        multiprocessing_context="spawn",
        timeout=TIMEOUT_S,
    )
    batches = list(loader)
    assert len(batches) == 4
    for i, (values, indices) in enumerate(batches):
        assert values.device == torch.device("accel:0")
        assert torch.equal(indices, torch.tensor([2 * i, 2 * i + 1]))
        assert torch.equal(values.cpu(), indices.to(torch.float32)[:, None].expand(2, 3))


# --- Pinned memory in data loading ---------------------------------------------------


@pytest.mark.parametrize("device_argument", [{}, {"pin_memory_device": "accel"}])
def test_dataloader_pins_batches_in_accels_pinned_memory(device_argument):
    # DataLoader pins through the current accelerator (torch.accelerator), as
    # for cuda; torch 2.11 deprecates pin_memory_device and uses the
    # accelerator either way. is_pinned() asks accel's pinned allocator.
    dataset = torch.utils.data.TensorDataset(torch.arange(12.0).view(6, 2))
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "pin_memory_device is deprecated")
        loader = torch.utils.data.DataLoader(dataset, batch_size=3, pin_memory=True, **device_argument)
        batches = [batch for (batch,) in loader]
    assert len(batches) == 2
    for i, batch in enumerate(batches):
        assert batch.device == torch.device("cpu") and batch.is_pinned()
        moved = batch.to("accel", non_blocking=True)
        torch.accel.current_stream().synchronize()
        assert moved.device == torch.device("accel:0")
        assert torch.equal(moved.cpu(), torch.arange(6.0 * i, 6.0 * i + 6).view(3, 2))
