"""Streams and events, through torch.accel's classes and PyTorch's generic torch.Stream/torch.Event."""

import threading

import pytest
import torch

import torch_accel

# Large enough that a copy takes measurable time on either runtime.
BIG = 1 << 24


def test_default_and_current_stream():
    default = torch_accel.default_stream()
    current = torch_accel.current_stream()
    assert current == default
    assert isinstance(current, torch_accel.Stream)
    assert isinstance(current, torch.Stream)
    assert current.device == torch.device("accel:0")


def test_new_streams_are_distinct_and_on_the_right_device(two_devices):
    s0 = torch_accel.Stream()
    s1 = torch_accel.Stream(device=1)
    assert s0.device == torch.device("accel:0")
    assert s1.device == torch.device("accel:1")
    assert s0 != torch_accel.default_stream(0)
    assert s1 != torch_accel.default_stream(1)
    with torch_accel.device(1):
        assert torch_accel.Stream().device == torch.device("accel:1")


def test_stream_priority():
    high = torch_accel.Stream(priority=-1)
    low = torch_accel.Stream(priority=0)
    assert high != low
    assert high.query() and low.query()


def test_stream_priorities_have_cudas_semantics(two_devices):
    # (lowest, highest), a lower number a higher priority, the default 0 the
    # lowest: CUDA's convention. Host runtime: accelrt's (0, -1); CUDA
    # runtime: the range torch.cuda.Stream.priority_range() gives.
    least, greatest = torch_accel.Stream.priority_range()
    assert least == 0 and greatest < 0
    if torch_accel.runtime() == "cuda":
        assert (least, greatest) == torch.cuda.Stream.priority_range()
    else:
        assert (least, greatest) == (0, -1)
    for device in (0, 1):
        for priority in range(greatest, least + 1):
            stream = torch_accel.Stream(device=device, priority=priority)
            assert stream.priority == priority and stream.device_index == device
        # Outside the range: the nearest end, as torch.cuda.Stream.
        assert torch_accel.Stream(device=device, priority=greatest - 100).priority == greatest
        assert torch_accel.Stream(device=device, priority=least + 100).priority == least
        assert torch_accel.Stream(device=device).priority == 0
        assert torch_accel.default_stream(device).priority == 0
        assert torch_accel.current_stream(device).priority == 0


def test_current_stream_reports_the_priority_of_the_stream_set():
    high = torch_accel.Stream(priority=torch_accel.Stream.priority_range()[1])
    with torch_accel.stream(high):
        current = torch_accel.current_stream()
        assert current == high and current.priority == high.priority < 0
    assert torch_accel.current_stream().priority == 0


def test_generic_torch_stream_and_event(two_devices):
    s = torch.Stream(device="accel:1")
    assert s.device == torch.device("accel:1")
    e = torch.Event(device="accel:1", enable_timing=True)
    s.record_event(e)
    e.synchronize()
    assert e.query()
    assert s.query()
    s.synchronize()


def test_stream_equality_hash_repr():
    s = torch_accel.Stream()
    same = torch_accel.Stream(stream_id=s.stream_id, device_index=s.device_index, device_type=s.device_type)
    assert s == same
    assert hash(s) == hash(same)
    assert s != torch_accel.default_stream()
    assert "accel:0" in repr(s)
    assert "accel" in repr(torch.Stream(device="accel:0"))


def test_stream_context_switches_and_restores():
    s = torch_accel.Stream()
    default = torch_accel.current_stream()
    with torch_accel.stream(s):
        assert torch_accel.current_stream() == s
    assert torch_accel.current_stream() == default


def test_stream_context_nested():
    s1, s2 = torch_accel.Stream(), torch_accel.Stream()
    with torch_accel.stream(s1):
        with torch_accel.stream(s2):
            assert torch_accel.current_stream() == s2
        assert torch_accel.current_stream() == s1
    assert torch_accel.current_stream() == torch_accel.default_stream()


def test_stream_context_restores_on_exception():
    s = torch_accel.Stream()
    with pytest.raises(ZeroDivisionError):
        with torch_accel.stream(s):
            1 / 0
    assert torch_accel.current_stream() == torch_accel.default_stream()


def test_stream_context_for_stream_on_another_device(two_devices):
    s1 = torch_accel.Stream(device=1)
    other = torch_accel.Stream(device=1)
    torch_accel.set_stream(other)  # current stream of device 1 before the context
    torch_accel.set_device(0)
    with torch_accel.stream(s1):
        assert torch_accel.current_device() == 1
        assert torch_accel.current_stream() == s1
        assert torch_accel.current_stream(0) == torch_accel.default_stream(0)
    assert torch_accel.current_device() == 0
    assert torch_accel.current_stream(1) == other
    assert torch_accel.current_stream(0) == torch_accel.default_stream(0)


def test_stream_context_none_is_noop():
    with torch_accel.stream(None):
        assert torch_accel.current_stream() == torch_accel.default_stream()


def test_torch_stream_as_context_manager(two_devices):
    s = torch.Stream(device="accel:1")
    with s:
        assert torch_accel.current_stream(1) == s
    assert torch_accel.current_stream(1) == torch_accel.default_stream(1)


def test_set_stream_sets_device(two_devices):
    s = torch_accel.Stream(device=1)
    torch_accel.set_stream(s)
    assert torch_accel.current_device() == 1
    assert torch_accel.current_stream() == s


def test_current_stream_is_per_thread():
    s = torch_accel.Stream()
    torch_accel.set_stream(s)
    seen = []
    t = threading.Thread(target=lambda: seen.append(torch_accel.current_stream()))
    t.start()
    t.join()
    assert seen == [torch_accel.default_stream()]
    assert torch_accel.current_stream() == s


def test_raw_stream_handle():
    s = torch_accel.Stream()
    with torch_accel.stream(s):
        assert torch_accel._C._get_raw_stream(0) == s.accel_stream
    if torch_accel.runtime() == "cuda":
        # An accel stream IS a CUDA stream: same id, same cudaStream_t.
        cuda_stream = torch.cuda.Stream(stream_id=s.stream_id, device_index=0, device_type=1)
        assert cuda_stream.cuda_stream == s.accel_stream
        with torch_accel.stream(s):
            assert torch.cuda.current_stream().cuda_stream == s.accel_stream


# Events ---------------------------------------------------------------------


def test_event_record_query_synchronize():
    e = torch_accel.Event()
    assert e.query()  # never recorded: complete, as CUDA
    x = torch.empty(BIG, dtype=torch.uint8, device="accel")
    x.copy_(torch.ones(BIG, dtype=torch.uint8))
    e.record()
    e.synchronize()
    assert e.query()
    assert e.device == torch.device("accel:0")


def test_event_elapsed_time_positive():
    start = torch_accel.Event(enable_timing=True)
    end = torch_accel.Event(enable_timing=True)
    src = torch.ones(BIG, dtype=torch.uint8)
    dst = torch.empty(BIG, dtype=torch.uint8, device="accel")
    start.record()
    for _ in range(4):
        dst.copy_(src)
    end.record()
    end.synchronize()
    assert start.elapsed_time(end) > 0


def test_generic_event_elapsed_time(two_devices):
    s = torch_accel.Stream(device=1)
    start = torch.Event(device="accel:1", enable_timing=True)
    end = torch.Event(device="accel:1", enable_timing=True)
    dst = torch.empty(BIG, dtype=torch.uint8, device="accel:1")
    with torch_accel.stream(s):
        start.record(s)
        dst.copy_(torch.ones(BIG, dtype=torch.uint8))
        end.record(s)
    end.synchronize()
    assert start.elapsed_time(end) > 0


def test_stream_record_event_returns_accel_event():
    s = torch_accel.Stream()
    e = s.record_event()
    assert isinstance(e, torch_accel.Event)
    e.synchronize()
    assert e.query()


def _ordered_copy_through_streams(producer: torch.Stream, consumer: torch.Stream, sync_with_event: bool) -> bool:
    """Producer fills a buffer; consumer, after waiting, reads it. True if the consumer saw the producer's data."""
    src = torch.arange(BIG, dtype=torch.int32).remainder_(251).to(torch.uint8)
    on_device = src.to(producer.device)
    buffer = torch.zeros(BIG, dtype=torch.uint8).to(producer.device)
    out = torch.empty(BIG, dtype=torch.uint8, device=consumer.device)
    with torch_accel.stream(producer):
        # Keep the producer busy with copies on the device: a blocking copy
        # from the host would synchronise the producer stream itself (as
        # CUDA's does) and make the wait below redundant.
        for _ in range(3):
            buffer.copy_(on_device)
    if sync_with_event:
        consumer.wait_event(producer.record_event())
    else:
        consumer.wait_stream(producer)
    with torch_accel.stream(consumer):
        out.copy_(buffer)
    consumer.synchronize()
    return torch.equal(out.cpu(), src)


@pytest.mark.parametrize("sync_with_event", [True, False], ids=["wait_event", "wait_stream"])
def test_cross_stream_ordering(sync_with_event):
    assert _ordered_copy_through_streams(torch_accel.Stream(), torch_accel.Stream(), sync_with_event)


def test_cross_device_stream_ordering(two_devices):
    assert _ordered_copy_through_streams(torch_accel.Stream(device=0), torch_accel.Stream(device=1), True)


def test_event_wait_on_generic_stream():
    producer = torch.Stream(device="accel:0")
    consumer = torch.Stream(device="accel:0")
    e = torch.Event(device="accel:0")
    producer.record_event(e)
    e.wait(consumer)
    consumer.synchronize()
    assert e.query()


# Bad input ------------------------------------------------------------------


def test_elapsed_time_without_timing():
    start, end = torch_accel.Event(), torch_accel.Event()
    start.record()
    end.record()
    end.synchronize()
    with pytest.raises(ValueError, match="enable_timing=True"):
        start.elapsed_time(end)


def test_elapsed_time_before_record():
    start = torch_accel.Event(enable_timing=True)
    end = torch_accel.Event(enable_timing=True)
    start.record()
    with pytest.raises(ValueError, match="must be recorded"):
        start.elapsed_time(end)


def test_event_recorded_on_stream_of_another_device(two_devices):
    e = torch_accel.Event()
    e.record(torch_accel.Stream(device=0))
    with pytest.raises(RuntimeError, match=r"accel:0.*accel:1"):
        e.record(torch_accel.Stream(device=1))


def test_event_of_another_device_type():
    e = torch.Event(device="cpu")
    with pytest.raises(RuntimeError, match="does not match"):
        e.record(torch_accel.Stream())


def test_stream_on_missing_device():
    count = torch_accel.device_count()
    with pytest.raises(RuntimeError, match="Invalid accel device index"):
        torch_accel.Stream(device=count)
    with pytest.raises(RuntimeError, match="Invalid accel device index"):
        torch.Stream(device=f"accel:{count}")
    with pytest.raises(RuntimeError, match="Invalid accel device index 7: there"):
        torch.Stream(device="accel:7", priority=-1)


def test_generic_event_on_missing_device_keeps_only_the_device_type():
    # PyTorch's torch.Event(device=...) keeps the device type and drops the
    # index (torch/csrc/Event.cpp), for cuda as for accel: nothing is created
    # until the event is recorded, and then it belongs to the stream's device.
    event = torch.Event(device="accel:7")
    assert event.device.type == "accel"
    event.record()
    assert event.device == torch.device("accel:0")
    event.synchronize()
    with pytest.raises(RuntimeError, match="Invalid accel device index 7"):
        event.record(torch.Stream(device="accel:7"))


@pytest.mark.parametrize("bad", [None, 0, "accel:0"])
def test_set_stream_rejects_non_streams(bad):
    with pytest.raises(TypeError, match="set_stream expects an accel stream"):
        torch_accel.set_stream(bad)
    assert torch_accel.current_stream() == torch_accel.default_stream()


def test_set_stream_of_another_device_type():
    if not torch.cuda.is_available():
        s = torch.Stream(device="cpu")
    else:
        s = torch.cuda.Stream()
    with pytest.raises(RuntimeError, match="Expected an accel stream"):
        torch_accel.set_stream(s)


def test_stream_context_rejects_non_streams():
    with pytest.raises(TypeError):
        torch_accel.stream("accel:0")


# Interprocess events (torch.cuda.Event(interprocess=True)'s API) ---------------
#
# Across processes: test_multiprocessing.py. On the host runtime accelrt's work
# is complete when queued, so an opened event is complete; on the CUDA runtime
# these are CUDA IPC events.


def test_interprocess_event_handle_opens_in_the_same_process():
    e = torch_accel.Event(interprocess=True)
    assert e.query() and e.event_id == 0  # created lazily, as CUDA's
    x = torch.ones(1024, device="accel")
    e.record()
    assert e.device == torch.device("accel:0") and e.event_id != 0
    handle = e.ipc_handle()
    assert isinstance(handle, bytes) and len(handle) == 64  # CUDA_IPC_HANDLE_SIZE
    # The handle of one event is the same each time.
    assert e.ipc_handle() == handle
    # A process opening its own handle gets its event (CUDA opens only other
    # processes' handles).
    opened = torch_accel.Event.from_ipc_handle(0, handle)
    assert isinstance(opened, torch_accel.Event)
    assert opened.device == torch.device("accel:0") and opened.event_id == e.event_id
    # Waiting on it orders a stream after the recorded work.
    consumer = torch_accel.Stream()
    opened.wait(consumer)
    with torch_accel.stream(consumer):
        y = x * 2
    consumer.synchronize()
    opened.synchronize()
    assert opened.query()
    assert torch.equal(y.cpu(), torch.full((1024,), 2.0))
    # An opened event can be recorded too, as CUDA's.
    opened.record()
    assert opened.query()


def test_interprocess_event_handle_before_record_uses_the_current_device(two_devices):
    with torch_accel.device(1):
        e = torch_accel.Event(interprocess=True)
        e.ipc_handle()
    assert e.device == torch.device("accel:1")
    with pytest.raises(RuntimeError, match=r"accel:1.*accel:0"):
        e.record(torch_accel.Stream(device=0))
    e.record(torch_accel.Stream(device=1))
    opened = torch_accel.Event.from_ipc_handle(torch.device("accel:1"), e.ipc_handle())
    assert opened.device == torch.device("accel:1")


def test_interprocess_event_through_stream_record_and_wait():
    producer, consumer = torch_accel.Stream(), torch_accel.Stream()
    e = torch_accel.Event(interprocess=True)
    assert producer.record_event(e) is e
    consumer.wait_event(e)
    e.synchronize()
    assert e.query() and "torch_accel.Event device=accel:0" in repr(e)


def test_ipc_handle_needs_an_interprocess_event():
    e = torch_accel.Event()
    e.record()
    with pytest.raises(RuntimeError, match="accel: ipc_handle\\(\\) needs an Event created with interprocess=True"):
        e.ipc_handle()


def test_interprocess_event_does_not_measure_time():
    with pytest.raises(ValueError, match="interprocess Event cannot measure time"):
        torch_accel.Event(enable_timing=True, interprocess=True)
    e = torch_accel.Event(interprocess=True)
    timed = torch_accel.Event(enable_timing=True)
    e.record()
    timed.record()
    with pytest.raises(ValueError, match="enable_timing=True"):
        e.elapsed_time(e)
    with pytest.raises(ValueError, match="enable_timing=True"):
        timed.elapsed_time(e)


def test_from_ipc_handle_rejects_what_is_no_handle():
    with pytest.raises(ValueError, match="not an interprocess event handle of accel"):
        torch_accel.Event.from_ipc_handle(0, b"short")
    # The right size: the host runtime checks its tag, CUDA the handle itself.
    with pytest.raises((ValueError, RuntimeError), match="not an interprocess event handle of accel|CUDA"):
        torch_accel.Event.from_ipc_handle(0, b"\0" * 64)
    with pytest.raises(TypeError, match="bytes of Event.ipc_handle"):
        torch_accel.Event.from_ipc_handle(0, "text")
    handle = torch_accel.Event(interprocess=True).ipc_handle()
    with pytest.raises(RuntimeError, match="Invalid accel device index"):
        torch_accel.Event.from_ipc_handle(torch_accel.device_count(), handle)
    with pytest.raises(ValueError, match="Expected an accel device"):
        torch_accel.Event.from_ipc_handle("cpu", handle)
