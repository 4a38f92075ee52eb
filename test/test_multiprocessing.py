"""accel tensors across processes: torch.multiprocessing (spawn) and DataLoader workers.

The stock torch.multiprocessing sends accel tensors as it sends cuda tensors:
the receiver's tensor is over the sender's accel memory (in-place writes are
seen on both sides), and the memory lives while any process holds it. Where
a storage cannot be shared the sending process gets a clear error naming
accel, never a receiver left waiting. The same tests run on both runtimes
(host: shared memory segments; CUDA: CUDA IPC handles, run by make gpu-test's
multiprocessing section); the tests with FakeRuntimeHandles run
torch_accel.multiprocessing's side of a runtime that shares by handle, as
the CUDA runtime does, on any machine. As for cuda, a receiver uses an accel
tensor while the process that made it lives.

Each multi-process test is bounded: queues are read with timeouts, processes
joined with timeouts and killed if still alive, and pytest-timeout stops the
test as a last resort. Spawned children start a Python with torch (a few
seconds each), so the tests share children where they can.
"""

import multiprocessing.reduction
import os
import subprocess
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


def join(*procs, expect_exitcode=0):
    for proc in procs:
        proc.join(TIMEOUT_S)
    alive = [proc for proc in procs if proc.is_alive()]
    for proc in alive:
        proc.kill()
        proc.join()
    assert not alive, "a child process did not finish"
    assert [proc.exitcode for proc in procs] == [expect_exitcode] * len(procs)


def start_serving_child():
    """A spawned child running worker.serve: (requests, replies, process)."""
    ctx = mp.get_context("spawn")
    requests, replies = ctx.Queue(), ctx.Queue()
    proc = ctx.Process(target=worker.serve, args=(requests, replies))
    proc.start()
    return requests, replies, proc


# --- In this process: the reduction itself ------------------------------------------


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


def test_received_in_the_same_process_is_the_same_storage():
    tensor = torch.arange(6, dtype=torch.int32, device="accel")
    payload = ForkingPickler.dumps(tensor)
    shared_at = tensor.untyped_storage().data_ptr()
    # Sharing again (as for a second message) moves nothing: the storage stays
    # where the first share put it, and either message gives it back.
    again = ForkingPickler.dumps(tensor)
    assert tensor.untyped_storage().data_ptr() == shared_at
    for message in (payload, again):
        received = ForkingPickler.loads(message)
        assert received.device == tensor.device
        assert received.untyped_storage().data_ptr() == shared_at
        assert torch.equal(received.cpu(), tensor.cpu())


def test_empty_tensors_cross_without_memory():
    tensor = torch.empty(0, 3, device="accel")
    received = ForkingPickler.loads(ForkingPickler.dumps(tensor))
    assert received.device == tensor.device and received.shape == (0, 3)


def test_cpu_tensors_keep_torchs_reduction():
    tensor = torch.arange(4.0)
    received = ForkingPickler.loads(ForkingPickler.dumps(tensor))
    assert torch.equal(received, tensor) and received.is_shared()


def test_a_storage_that_cannot_be_shared_fails_in_the_sender(monkeypatch):
    # Where the runtime cannot share a storage (shared memory exhausted, say),
    # the error reaches the sending process, naming accel. A spawned Process
    # pickles its arguments in start(), so start() raises and no child waits.
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


class FakeRuntimeHandles:
    """Stands in for a runtime that shares by handle bytes, without a file
    descriptor (the CUDA runtime: CUDA IPC handles, a cache key per block and
    offset), to run torch_accel.multiprocessing's side of it on any machine.
    Receiving "in another process" is receiving after this process' cache
    forgot the storage."""

    def __init__(self, monkeypatch):
        self.shared = 0
        self.reused = []
        self.opened = []
        self.memory = {}
        monkeypatch.setattr(accel_multiprocessing._C, "_share_storage", self.share)
        monkeypatch.setattr(accel_multiprocessing._C, "_open_shared_storage", self.open)
        monkeypatch.setattr(accel_multiprocessing._C, "_reuse_shared_storage", self.reuse)

    def share(self, storage):
        key = b"block-%d" % storage.data_ptr()
        self.memory[key] = storage
        # A new handle per message (its own counter slot), one key per storage.
        handle = key + b"/message-%d" % self.shared
        self.shared += 1
        return -1, handle, storage.nbytes(), key

    def open(self, fd, handle, nbytes, device):
        assert fd == -1
        self.opened.append((handle, nbytes, device))
        # The same memory, as a receiver's mapping is.
        return self.memory[handle.split(b"/")[0]]

    def reuse(self, handle, nbytes, device):
        self.reused.append((handle, nbytes, device))


def forget_received_storages():
    accel_multiprocessing._torch_reductions.shared_cache.clear()


def test_runtime_handles_map_a_storage_once_and_release_every_message(monkeypatch):
    runtime = FakeRuntimeHandles(monkeypatch)
    tensor = torch.arange(6.0, device="accel")
    first = ForkingPickler.dumps(tensor[1:])
    second = ForkingPickler.dumps(tensor[:2])
    # In the sending process: its own storage, each message released.
    assert ForkingPickler.loads(first).untyped_storage().data_ptr() == tensor.untyped_storage().data_ptr()
    assert [r[2] for r in runtime.reused] == [0] and not runtime.opened
    # Elsewhere: the first message maps the storage, the second reuses the mapping.
    forget_received_storages()
    a = ForkingPickler.loads(first)
    b = ForkingPickler.loads(second)
    assert len(runtime.opened) == 1 and len(runtime.reused) == 2
    assert runtime.opened[0][1:] == (tensor.untyped_storage().nbytes(), 0)
    assert runtime.reused[1][0] == bytes(runtime.opened[0][0]).replace(b"message-0", b"message-1")
    assert a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()
    assert torch.equal(a.cpu(), torch.arange(1.0, 6.0)) and torch.equal(b.cpu(), torch.arange(2.0))
    b.add_(10)
    assert torch.equal(tensor.cpu(), torch.tensor([10.0, 11.0, 2.0, 3.0, 4.0, 5.0]))


def test_runtime_handles_on_the_senders_device(monkeypatch, two_devices):
    runtime = FakeRuntimeHandles(monkeypatch)
    tensor = torch.ones(3, device="accel:1")
    payload = ForkingPickler.dumps(tensor)
    forget_received_storages()
    received = ForkingPickler.loads(payload)
    assert runtime.opened[0][2] == 1 and received.device == torch.device("accel:1")


def test_a_receiver_that_cannot_map_raises(monkeypatch):
    # The runtime's error (e.g. CUDA IPC refused) reaches the receiver as it is.
    FakeRuntimeHandles(monkeypatch)

    def refuse(fd, handle, nbytes, device):
        raise RuntimeError("accel (CUDA runtime): cannot map")

    monkeypatch.setattr(accel_multiprocessing._C, "_open_shared_storage", refuse)
    payload = ForkingPickler.dumps(torch.ones(2, device="accel"))
    forget_received_storages()
    with pytest.raises(RuntimeError, match="accel \\(CUDA runtime\\): cannot map"):
        ForkingPickler.loads(payload)


def test_shared_storage_entry_points_check_their_arguments():
    count = torch_accel.device_count()
    with pytest.raises(RuntimeError, match="Invalid accel device index"):
        accel_multiprocessing._C._open_shared_storage(-1, b"", 4, count)
    with pytest.raises(RuntimeError, match="Invalid accel device index"):
        accel_multiprocessing._C._reuse_shared_storage(b"", 4, count)
    with pytest.raises(TypeError, match="expected a torch.UntypedStorage"):
        accel_multiprocessing._C._share_storage(torch.ones(2, device="accel"))
    with pytest.raises(RuntimeError, match="expected an accel storage"):
        accel_multiprocessing._C._share_storage(torch.ones(2).untyped_storage())


def test_non_interprocess_event_cannot_be_sent():
    with pytest.raises(RuntimeError, match="needs an Event created with interprocess=True"):
        ForkingPickler.dumps(torch_accel.Event())


def test_interprocess_event_pickles_as_its_handle():
    event = torch_accel.Event(interprocess=True)
    event.record()
    # Received in the process that sent it: the event itself.
    received = ForkingPickler.loads(ForkingPickler.dumps(event))
    assert isinstance(received, torch_accel.Event)
    assert received.device == event.device and received.event_id == event.event_id
    received.synchronize()


def test_non_leaf_tensor_requiring_grad_is_refused_as_for_cuda():
    tensor = torch.ones(2, device="accel", requires_grad=True) * 2
    with pytest.raises(RuntimeError, match="Cowardly refusing to serialize non-leaf tensor"):
        ForkingPickler.dumps(tensor)


# --- Across processes (spawn) -----------------------------------------------------


@pytest.mark.filterwarnings("ignore:An output with one or more elements was resized")
def test_received_storage_is_not_resized():
    # A received storage cannot be resized (as for cuda): out= and resize_
    # that need more memory raise the target's error, and the tensor keeps
    # sharing the sender's memory. The reference is a cpu tensor over a
    # storage that cannot be resized either (a Python buffer; cpu's and
    # cuda's storage resizes raise the same error).
    expected_outcomes, _ = worker.grow_received(torch.frombuffer(bytearray(16), dtype=torch.float32))
    requests, replies, proc = start_serving_child()
    try:
        tensor = torch.zeros(4, device="accel")
        requests.put(("grow", tensor))
        outcomes, values = replies.get(timeout=TIMEOUT_S)
        requests.put(None)
        join(proc)
    finally:
        if proc.is_alive():
            proc.kill()
    errors = [error for error, _, _ in outcomes]
    assert errors[:2] == ["Trying to resize storage that is not resizable"] * 2, errors
    assert "not resizable" in errors[2]
    # After each error the tensor keeps its shape, which its storage holds.
    # The reference (cpu; cuda alike) keeps the shape the call asked for over
    # the 16 bytes that could not grow (ATen sets sizes before it resizes the
    # storage): a tensor that reads past its memory, which accel does not
    # copy (docs/fault-injection.md).
    assert [outcome[1:] for outcome in outcomes] == [((4,), 16)] * 3
    assert [outcome[1:] for outcome in expected_outcomes] == [((8,), 16), ((8,), 16), ((16,), 16)]
    assert [error for error, _, _ in expected_outcomes][:2] == errors[:2]
    assert values == [1.0] * 4
    assert tensor.tolist() == [1.0] * 4  # the child wrote to this process' memory


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


def test_queue_round_trips_and_ownership():
    requests, replies, proc = start_serving_child()
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
        # As for cuda, a receiver uses the memory while its producer lives.
        del produced

        # An event made here orders the child's stream after this process'
        # work on the tensor.
        event = torch_accel.Event(interprocess=True)
        tensor.fill_(5)
        event.record()
        requests.put(("wait_event", (tensor, event)))
        assert replies.get(timeout=TIMEOUT_S) == [5] * 5
        requests.put(None)
    finally:
        join(proc)


def test_consumer_that_dies_early_leaves_the_sender_working():
    requests, replies, proc = start_serving_child()
    tensor = torch.full((4,), 7.0, device="accel")
    requests.put(("echo", tensor))
    replies.get(timeout=TIMEOUT_S)
    requests.put(("exit", None))
    join(proc, expect_exitcode=3)
    # The sender's tensor is intact and usable; freeing it frees the memory.
    assert torch.equal(tensor.add(1).cpu(), torch.full((4,), 8.0))
    del tensor


def shared_segments():
    """This process' mappings and descriptors of shared memory segments
    (torch's names them torch_<pid>_...; unlinked, they read "(deleted)")."""
    with open("/proc/self/maps") as maps:
        mapped = sum("/dev/shm/torch_" in line for line in maps)
    fds = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            fds += "/dev/shm/torch_" in os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            pass  # the descriptor listdir used, closed since
    return mapped, fds


def test_ipc_collect_leaves_nothing_of_memory_every_receiver_released():
    requests, replies, proc = start_serving_child()
    try:
        torch_accel.ipc_collect()
        before = shared_segments()
        allocated = torch_accel.memory_allocated()
        tensor = torch.arange(1024.0, device="accel")
        requests.put(("release", tensor))
        assert replies.get(timeout=TIMEOUT_S) == torch.arange(1024.0).tolist()
        # The consumer released it; this process still holds and uses it.
        mapped, fds = shared_segments()
        assert mapped > before[0] and fds > before[1]
        tensor.add_(1)
        assert torch.equal(tensor.cpu(), torch.arange(1.0, 1025.0))
        del tensor
        torch_accel.ipc_collect()
        # Nothing of the segment is left here, and accel's memory is as before.
        assert shared_segments() == before
        assert torch_accel.memory_allocated() == allocated
        requests.put(None)
    finally:
        join(proc)


def test_ipc_collect_initialises_accel_as_cudas_does():
    # A fresh process: ipc_collect initialises accel (torch.cuda.ipc_collect
    # initialises CUDA), and with nothing shared it frees nothing.
    code = (
        "import torch, torch_accel\n"
        "assert not torch_accel.is_initialized()\n"
        "torch.accel.ipc_collect()\n"
        "assert torch_accel.is_initialized()\n"
        "assert torch.accel.ipc_collect is torch_accel.ipc_collect\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=TIMEOUT_S)


def test_dataloader_workers_return_accel_tensors():
    loader = torch.utils.data.DataLoader(
        worker.AccelDataset(),
        batch_size=2,
        num_workers=2,
        multiprocessing_context="spawn",
        timeout=TIMEOUT_S,
    )
    # Each batch is used while the workers that made it live (the loader
    # stops them when exhausted), as cuda tensors from workers must be.
    count = 0
    for i, (values, indices) in enumerate(loader):
        assert values.device == torch.device("accel:0")
        assert torch.equal(indices, torch.tensor([2 * i, 2 * i + 1]))
        assert torch.equal(values.cpu(), indices.to(torch.float32)[:, None].expand(2, 3))
        count += 1
        del values, indices
    assert count == 4


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
