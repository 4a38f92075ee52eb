"""accel streams and events: PyTorch's generic torch.Stream / torch.Event on accel.

On the CUDA runtime they are CUDA streams and events (an accel stream id is a
CUDA stream id); on the host runtime they are accelrt streams and events.
"""

from typing import Any, Optional

import torch

from . import _C
from ._core import DeviceLike, _get_device_index, _lazy_init


class Stream(torch.Stream):
    r"""Wrapper around an accel stream.

    A stream is a linear sequence of execution on one device, independent of
    other streams. See torch.cuda.Stream; the semantics are the same.

    Args:
        device (torch.device or int, optional): the device of the stream. The
            current device if None (default).
        priority (int, optional): priority of the stream, which can be positive,
            0 (default) or negative. A lower number is a higher priority; values
            outside :meth:`priority_range` map to the nearest valid priority.
    """

    def __new__(cls, device: DeviceLike = None, priority: int = 0, **kwargs: Any) -> "Stream":
        _lazy_init()
        # (stream_id, device_index, device_type) wrap an existing stream.
        if kwargs.get("stream_id") is not None:
            return super().__new__(cls, priority=priority, **kwargs)
        index = _get_device_index(device, optional=True)
        # Before torch.device narrows it to an int8 (2**40 would become accel:0).
        _C._check_device_index(index)
        return super().__new__(cls, torch.device("accel", index), priority=priority)

    def wait_event(self, event: "torch.Event") -> None:
        r"""Make all future work submitted to this stream wait for ``event``."""
        event.wait(self)

    def wait_stream(self, stream: "torch.Stream") -> None:
        r"""Make all future work submitted to this stream wait for all work now queued on ``stream``."""
        self.wait_event(stream.record_event())

    def record_event(self, event: Optional["torch.Event"] = None) -> "torch.Event":
        r"""Record ``event`` (a new accel Event if None) on this stream and return it."""
        if event is None:
            event = Event()
        event.record(self)
        return event

    @property
    def priority(self) -> int:
        r"""The priority of this stream, a value of :meth:`priority_range` (0 for the default stream)."""
        return _C._stream_priority(self.stream_id, self.device_index, self.device_type)

    @staticmethod
    def priority_range() -> tuple[int, int]:
        r"""Return the (lowest, highest) stream priorities, as torch.cuda.Stream.priority_range.

        A lower number is a higher priority. On the CUDA runtime it is the
        range torch.cuda serves (e.g. ``(0, -3)``); on the host runtime it is
        accelrt's, ``(0, -1)``.
        """
        _lazy_init()
        return _C._stream_priority_range()

    @property
    def accel_stream(self) -> int:
        r"""The raw runtime handle of this stream (a cudaStream_t on the CUDA runtime)."""
        return _C._get_stream_handle(self.stream_id, self.device_index, self.device_type)

    def __repr__(self) -> str:
        return f"<torch_accel.Stream device={self.device} stream_id={self.stream_id}>"


class Event(torch.Event):
    r"""Wrapper around an accel event: a synchronisation marker in a stream.

    The event is created lazily, on the device of the stream it is first
    recorded on (an interprocess event: or on the current device when its
    :meth:`ipc_handle` is asked first). See torch.cuda.Event; the semantics
    are the same.

    Args:
        enable_timing (bool, optional): the event measures time (default False).
        blocking (bool, optional): ``synchronize`` blocks rather than spins (default False).
        interprocess (bool, optional): the event can be shared between processes
            (default False): :meth:`ipc_handle` and :meth:`from_ipc_handle`, and
            ``torch.multiprocessing`` sends it. Such an event does not measure
            time, as CUDA's.
    """

    _interprocess: Optional[Any]

    def __new__(cls, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False) -> "Event":
        if interprocess and enable_timing:
            raise ValueError(
                "accel: an interprocess Event cannot measure time: CUDA's interprocess events do not record "
                "timestamps (pass enable_timing=False)"
            )
        self = super().__new__(
            cls, device="accel", enable_timing=enable_timing, blocking=blocking, interprocess=interprocess
        )
        # torch.Event cannot make or adopt an interprocess event: such events
        # are the runtime's own (torch_accel._C._InterprocessEvent).
        self._interprocess = None
        if interprocess:
            _lazy_init()
            self._interprocess = _C._InterprocessEvent(blocking)
        return self

    @classmethod
    def from_ipc_handle(cls, device: DeviceLike, handle: bytes) -> "Event":
        r"""Reconstruct an event from an IPC handle (another process' :meth:`ipc_handle`) on the given device."""
        if not isinstance(handle, bytes):
            raise TypeError(f"from_ipc_handle expects the bytes of Event.ipc_handle(), but got {type(handle).__name__}")
        index = _get_device_index(device, optional=True)
        _C._check_device_index(index)
        event = cls(interprocess=True)
        event._interprocess = _C._InterprocessEvent.open(handle, index)
        return event

    def ipc_handle(self) -> bytes:
        r"""Return an IPC handle of this event (made with ``interprocess=True``).

        If not recorded yet, the event will use the current device.
        """
        if self._interprocess is None:
            raise RuntimeError(
                "accel: ipc_handle() needs an Event created with interprocess=True (torch.accel.Event(interprocess=True))"
            )
        return self._interprocess.ipc_handle()

    def record(self, stream: Optional[torch.Stream] = None) -> None:
        r"""Record the event in ``stream`` (the current stream if None); its device must be the event's."""
        if self._interprocess is None:
            super().record(stream)
            return
        if stream is None:
            stream = current_stream()
        self._interprocess.record(stream.stream_id, stream.device_index, stream.device_type)

    def wait(self, stream: Optional[torch.Stream] = None) -> None:
        r"""Make all future work submitted to ``stream`` (the current stream if None) wait for this event."""
        if self._interprocess is None:
            super().wait(stream)
            return
        if stream is None:
            stream = current_stream()
        self._interprocess.wait(stream.stream_id, stream.device_index, stream.device_type)

    def query(self) -> bool:
        r"""Whether all work the event captured has completed (True for an event never recorded)."""
        if self._interprocess is None:
            return super().query()
        return self._interprocess.query()

    def synchronize(self) -> None:
        r"""Wait until the work the event captured has completed."""
        if self._interprocess is None:
            super().synchronize()
            return
        self._interprocess.synchronize()

    def elapsed_time(self, end_event: "torch.Event") -> float:
        r"""Return the milliseconds between this event's and ``end_event``'s records.

        Both events need ``enable_timing=True`` and must have completed.
        """
        if self._interprocess is not None or getattr(end_event, "_interprocess", None) is not None:
            raise ValueError(
                "accel: elapsed_time needs events created with enable_timing=True; interprocess events do not measure time"
            )
        return _C._event_elapsed_time(self, end_event)

    @property
    def device(self) -> torch.device:
        r"""The device of the event (accel without an index until the event exists)."""
        if self._interprocess is None:
            return super().device
        index = self._interprocess.device
        return torch.device("accel", index) if index >= 0 else torch.device("accel")

    @property
    def event_id(self) -> int:
        r"""The raw runtime event (a cudaEvent_t on the CUDA runtime; 0 until it exists)."""
        if self._interprocess is None:
            return super().event_id
        return self._interprocess.event_id

    def __repr__(self) -> str:
        return f"<torch_accel.Event device={self.device} event_id={self.event_id}>"


def current_stream(device: DeviceLike = None) -> Stream:
    r"""Return the currently selected Stream for a given device (the current device if None)."""
    _lazy_init()
    stream_id, device_index, device_type = _C._get_current_stream(_get_device_index(device, optional=True))
    return Stream(stream_id=stream_id, device_index=device_index, device_type=device_type)


def default_stream(device: DeviceLike = None) -> Stream:
    r"""Return the default Stream for a given device (the current device if None)."""
    _lazy_init()
    stream_id, device_index, device_type = _C._get_default_stream(_get_device_index(device, optional=True))
    return Stream(stream_id=stream_id, device_index=device_index, device_type=device_type)


def set_stream(stream: torch.Stream) -> None:
    r"""Set the current stream; its device becomes the current device.

    Prefer the ``stream`` context manager, which restores what it changes.
    Unlike torch.cuda.set_stream, None is rejected rather than ignored.
    """
    if not isinstance(stream, torch.Stream):
        raise TypeError(f"set_stream expects an accel stream (torch.Stream), but got {type(stream).__name__}")
    _set_stream_by_id(stream.stream_id, stream.device_index, stream.device_type)


def _set_stream_by_id(stream_id: int, device_index: int, device_type: int) -> None:
    r"""Set the current stream from its packed (stream_id, device_index, device_type)."""
    _lazy_init()
    _C._set_stream(stream_id, device_index, device_type)


class StreamContext:
    r"""Context manager that selects a given stream.

    All accel work queued within its context goes to the selected stream. On
    exit, the previous current stream of the stream's device, the previous
    current stream of the current device and the previous current device are
    restored (also when the body raises). A None stream makes it a no-op.
    """

    cur_stream: Optional[torch.Stream]

    def __init__(self, stream: Optional[torch.Stream]) -> None:
        if stream is not None and not isinstance(stream, torch.Stream):
            raise TypeError(f"StreamContext expects an accel stream or None, but got {type(stream).__name__}")
        self.stream = stream
        self.src_prev_stream: Optional[torch.Stream] = None
        self.dst_prev_stream: Optional[torch.Stream] = None

    def __enter__(self) -> None:
        cur_stream = self.stream
        if cur_stream is None:
            return
        self.src_prev_stream = current_stream(None)
        # A stream on another device: remember that device's current stream too,
        # since set_stream changes it.
        if self.src_prev_stream.device != cur_stream.device:
            self.dst_prev_stream = current_stream(cur_stream.device)
        set_stream(cur_stream)

    def __exit__(self, exc_type: Any, exc_value: Any, traceback: Any) -> None:
        cur_stream = self.stream
        if cur_stream is None:
            return
        if self.dst_prev_stream is not None:
            set_stream(self.dst_prev_stream)
        set_stream(self.src_prev_stream)  # also restores the current device


def stream(stream: Optional[torch.Stream]) -> StreamContext:
    r"""Wrap StreamContext: ``with torch.accel.stream(s): ...`` runs the body on ``s``.

    A no-op if ``stream`` is None.
    """
    return StreamContext(stream)
