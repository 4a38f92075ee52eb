"""Threads at once on two devices: allocating, switching devices and streams,
recording and waiting on events, capturing and replaying graphs, dispatching
operators and running backward passes, each thread's results compared with the
target's, computed in the same thread.

Small here (it runs in `make test`); `make tsan` runs it longer under
ThreadSanitizer (TORCH_ACCEL_STRESS_ROUNDS, see docs/sanitizers.md), where a
race in accel's C++ (the runtime, accelrt, the fallback, graph recording) is a
report that fails the run even if every result happens to be right.
"""

import gc
import os
import threading
import traceback

import pytest
import torch

import torch_accel

from _comparison import assert_same_bits

WORKERS = 4
ROUNDS = int(os.environ.get("TORCH_ACCEL_STRESS_ROUNDS", "3"))
# A worker that has not finished by then is hung (a deadlock between threads).
JOIN_TIMEOUT_S = 600


def check(accel: torch.Tensor, expected: torch.Tensor, what: str) -> None:
    # Bitwise: accel runs the target's kernel on the same inputs, in the same
    # thread (same intra-op thread count, so the same reduction order).
    assert accel.device.type == "accel", what
    assert accel.dtype == expected.dtype and accel.shape == expected.shape, what
    assert_same_bits(accel.cpu(), expected.cpu(), what)


def round_of_work(index: int, step: int, device: int, streams: dict, gen: torch.Generator, target: str) -> None:
    other = 1 - device
    where = f"worker {index}, round {step}, accel:{device}"
    x_cpu = torch.randn(16, 8, generator=gen)
    w_cpu = torch.randn(8, 4, generator=gen)
    x_t, w_t = x_cpu.to(target), w_cpu.to(target)

    with torch_accel.device(device):
        assert torch_accel.current_device() == device, where
        main = torch_accel.current_stream()
        side, capture = streams[device]

        # Allocation and operators on the current device and stream.
        x = x_cpu.to("accel")
        w = w_cpu.to("accel")
        assert x.device == torch.device("accel", device), where
        y = torch.relu(x @ w) + 1
        check(y, torch.relu(x_t @ w_t) + 1, f"{where}: matmul")
        v = y.clone()
        v[:, 1:3].mul_(3)  # in place through a view
        picked = torch.cat([v.index_select(0, torch.arange(0, 16, 3, device="accel")), v[:2]])
        v_t = (torch.relu(x_t @ w_t) + 1).clone()
        v_t[:, 1:3].mul_(3)
        picked_t = torch.cat([v_t.index_select(0, torch.arange(0, 16, 3, device=target)), v_t[:2]])
        check(picked, picked_t, f"{where}: views, index_select, cat")
        check(v.sort(dim=0).values.cumsum(0), v_t.sort(dim=0).values.cumsum(0), f"{where}: sort, cumsum")

        # A side stream, joined back with an event; a timed pair of events.
        side.wait_stream(main)
        start = torch_accel.Event(enable_timing=True)
        end = torch_accel.Event(enable_timing=True)
        with torch_accel.stream(side):
            assert torch_accel.current_stream() == side, where
            start.record()
            z = y * 2 - x.sum()
            end.record()
        assert torch_accel.current_stream() == main, where
        main.wait_event(end)
        z.record_stream(main)
        end.synchronize()
        assert end.query() and start.elapsed_time(end) >= 0, where
        check(z, (torch.relu(x_t @ w_t) + 1) * 2 - x_t.sum(), f"{where}: side stream")

        # To the other device and work there, under a nested device switch.
        z_other = z.to(f"accel:{other}")
        with torch_accel.device(other):
            assert torch_accel.current_device() == other, where
            u = z_other.exp().mean(1)
        assert torch_accel.current_device() == device, where
        assert u.device == torch.device("accel", other), where
        check(u, ((torch.relu(x_t @ w_t) + 1) * 2 - x_t.sum()).exp().mean(1), f"{where}: on accel:{other}")

        # A backward pass (autograd runs accel's part on its device thread).
        # The reference applies the same kernels without autograd: in torch
        # 2.11 a CUDA backward cannot run next to accel (docs/testing.md).
        leaf = x.detach().requires_grad_()
        activation = torch.sigmoid(leaf * w[:, :1].t().repeat(2, 1).reshape(16, 1))
        activation.sum().backward()
        scale_t = w_t[:, :1].t().repeat(2, 1).reshape(16, 1)
        sig_t = torch.sigmoid(x_t * scale_t)
        check(activation.detach(), sig_t, f"{where}: forward")
        check(leaf.grad, torch.ops.aten.sigmoid_backward(torch.ones_like(sig_t), sig_t) * scale_t, f"{where}: backward")

        # Capture on this thread's own stream while other threads capture and
        # run on theirs (thread_local: as on CUDA, other threads' calls do not
        # invalidate this capture), then replay with new inputs.
        static_in = torch.zeros(16, 8, device="accel")
        graph = torch_accel.graphs.Graph()
        capture.wait_stream(main)
        with torch_accel.stream(capture):
            graph.capture_begin(capture_error_mode="thread_local")
            try:
                static_out = torch.tanh(static_in @ w).neg() + static_in.mean()
            finally:
                graph.capture_end()
        main.wait_stream(capture)
        for _ in range(2):
            data = torch.randn(16, 8, generator=gen)
            static_in.copy_(data.to("accel"))
            graph.replay()
            data_t = data.to(target)
            check(static_out, torch.tanh(data_t @ w_t).neg() + data_t.mean(), f"{where}: graph replay")
        graph.reset()


def worker(index: int, streams: dict, barrier: threading.Barrier, target: str, failures: list) -> None:
    try:
        gen = torch.Generator().manual_seed(index)
        barrier.wait()
        for step in range(ROUNDS):
            device = (index + step) % 2
            torch_accel.set_device(device)  # set_device, then the context manager inside
            round_of_work(index, step, device, streams, gen, target)
    except BaseException:
        failures.append(f"worker {index}:\n{traceback.format_exc()}")
        barrier.abort()


def test_threads_on_two_devices_match_the_target(two_devices, target):
    gc.collect()
    # Each worker's own side and capture streams, made here: pool streams are
    # handed out round-robin (32 per priority, as CUDA's), so these are distinct
    # while fewer than 32 are taken, and no other thread's work enters a capture.
    streams = [
        {device: (torch_accel.Stream(device=device), torch_accel.Stream(device=device)) for device in range(2)}
        for _ in range(WORKERS)
    ]
    for device in range(2):
        ids = [s.stream_id for per_worker in streams for s in per_worker[device]]
        assert len(set(ids)) == len(ids)
    before = [torch_accel.memory_allocated(device) for device in range(2)]

    failures: list = []
    barrier = threading.Barrier(WORKERS)
    threads = [
        threading.Thread(target=worker, args=(index, streams[index], barrier, target, failures), daemon=True)
        for index in range(WORKERS)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(JOIN_TIMEOUT_S)
    assert not any(thread.is_alive() for thread in threads), "a worker hung"
    assert failures == [], "\n".join(failures)

    # Every block the workers took went back: the statistics are per device,
    # updated by all threads at once.
    gc.collect()
    for device in range(2):
        torch_accel.synchronize(device)
        assert torch_accel.memory_allocated(device) == before[device], f"accel:{device}"
    # The main thread's device and streams are its own: the workers changed theirs.
    assert torch_accel.current_device() == 0
    assert torch_accel.current_stream(0) == torch_accel.default_stream(0)



@pytest.mark.skipif(torch_accel.runtime() == "cuda", reason="the host runtime's capture checks: CUDA's are the driver's")
def test_other_threads_fail_captures_that_end_and_are_dropped_at_the_same_time():
    # Host runtime: a thread that synchronizes the device, or an event or
    # stream that another thread's capture holds, fails that capture. It used
    # to find the capture, release the lock that ends captures, then
    # invalidate it: the owner could end the capture and drop its graph in
    # between (a use after free). Now finding and invalidating happen under
    # that lock (docs/sanitizers.md). Each side may win: the capture ends
    # cleanly, or it is invalidated and capture_end raises; never a crash, and
    # no capture is left recording.
    rounds = 50 * ROUNDS
    stream = torch_accel.Stream(device=0)
    shared: dict = {}
    failures: list = []
    outcomes = {"captured": 0, "invalidated": 0, "refused": 0}
    barrier = threading.Barrier(2)

    def owner():
        try:
            barrier.wait()
            x = torch.ones(8, device="accel:0")
            for _ in range(rounds):
                graph = torch_accel.graphs.Graph()
                with torch_accel.stream(stream):
                    graph.capture_begin()
                    # The other thread may invalidate the capture at any point
                    # of it, before these operations too: they then raise.
                    invalidated_while_recording = False
                    try:
                        y = x * 2
                        shared["event"] = torch_accel.current_stream().record_event()
                    except RuntimeError as error:
                        assert "invalidated" in str(error), error
                        invalidated_while_recording = True
                    try:
                        graph.capture_end()
                    except RuntimeError as error:
                        assert "invalidated" in str(error), error
                        outcomes["invalidated"] += 1
                        continue
                    assert not invalidated_while_recording, "an invalidated capture ended cleanly"
                graph.replay()
                assert torch.equal(y.cpu(), torch.full((8,), 2.0))
                outcomes["captured"] += 1
                del graph, y  # the capture's memory and its RecordingCapture go
        except BaseException:
            failures.append(traceback.format_exc())

    def other():
        try:
            barrier.wait()
            for i in range(rounds):
                try:
                    if i % 3 == 0:
                        torch_accel.synchronize(0)
                    elif i % 3 == 1 and "event" in shared:
                        shared["event"].query()
                    else:
                        stream.query()
                except RuntimeError as error:
                    assert "is capturing a graph" in str(error), error
                    outcomes["refused"] += 1
        except BaseException:
            failures.append(traceback.format_exc())

    threads = [threading.Thread(target=owner, daemon=True), threading.Thread(target=other, daemon=True)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(JOIN_TIMEOUT_S)
    assert not any(thread.is_alive() for thread in threads), "a thread hung"
    assert failures == [], "\n".join(failures)
    assert outcomes["captured"] + outcomes["invalidated"] == rounds
    with torch_accel.stream(stream):
        assert not torch_accel.is_current_stream_capturing()
