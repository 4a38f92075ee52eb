r"""The accel stream sanitizer: finds kernels on different accel streams that race on memory.

As torch.cuda._sanitizer for cuda (and built on its analysis): while enabled,
every operator on accel tensors is recorded as a kernel on the current accel
stream that reads and writes its arguments' memory, and accel's guard,
events and allocator report every synchronisation and every allocation and
free (csrc/runtime/AccelTrace.h, through ``torch.accel._gpu_trace``). A
kernel that accesses memory another stream wrote (or writes memory another
stream read) with no event, ``wait_stream`` or synchronisation ordering the
two raises :class:`AccelSanitizerErrors`, after printing both accesses with
their stack traces. Beyond torch.cuda's sanitizer, freeing memory that
another stream may still be using (a tensor used on a side stream without
``record_stream`` or a synchronisation) is reported too, by the next
operator after the free.

On the host runtime every queued operation completes before it returns, so
a missing synchronisation never corrupts data there; the sanitizer is how
CPU-only CI finds the races that would on a GPU.

Enable it with ``TORCH_ACCEL_SANITIZER=1`` (read when torch_accel is
imported) or :func:`enable_accel_sanitizer`; :class:`AccelSanitizerDispatchMode`
is a context manager for a scope. Off, it costs nothing: no operator hook is
installed and each trace report is one load of a flag. See
docs/stream-sanitizer.md.
"""

import contextlib
import functools
import importlib
import inspect
import io
import os
import sys
import threading
import traceback
from collections.abc import Iterator
from typing import Any, Optional

import torch
import torch.cuda._sanitizer as _csan
from torch.utils._python_dispatch import TorchDispatchMode

from . import _C, _gpu_trace
from .graphs import is_current_stream_capturing
from .streams import current_stream

__all__ = [
    "AccelSanitizer",
    "AccelSanitizerDispatchMode",
    "AccelSanitizerErrors",
    "UnsynchronizedAccessError",
    "UnsynchronizedFreeError",
    "enable_accel_sanitizer",
]

aten = torch.ops.aten

# Factories whose result is memory no kernel has written yet (torch.cuda's
# sanitizer counts them as writes on the current stream): allocating on one
# stream and writing on another races with nothing. The *_like and new_*
# factories are PyTorch's FACTORY_FUNCTION_REGEX's already.
_UNWRITTEN_FACTORIES = (aten.empty.memory_format, aten.empty_strided.default)

# PyTorch's stream-agnostic analysis, reused as it is: the per-stream vector
# clocks that events and synchronisations advance (StreamSynchronizations),
# the record of each allocation's last write and reads since (EventHandler),
# and the report of a race with both accesses' stack traces.
SynchronizationError = _csan.SynchronizationError
UnsynchronizedAccessError = _csan.UnsynchronizedAccessError


class AccelSanitizerErrors(_csan.CUDASanitizerErrors):
    r"""The races one operator met (``errors``); each was printed to stderr first."""


class UnsynchronizedFreeError(SynchronizationError):
    r"""Memory freed on its allocation stream while another stream may still use it.

    The caching allocator hands freed memory to the next allocation on the
    stream that allocated it; without ``record_stream`` for the other stream,
    or a synchronisation ordering the other stream's access before the free,
    that next allocation's kernels race with the access.
    """

    def __init__(
        self,
        data_ptr: int,
        allocation_stream: int,
        free_stack_trace: traceback.StackSummary,
        access: _csan.Access,
    ) -> None:
        self.data_ptr = data_ptr
        self.allocation_stream = allocation_stream
        self.free_stack_trace = free_stack_trace
        self.access = access

    def __str__(self) -> str:
        with io.StringIO() as message:
            message.write(
                "============================\n"
                f"accel sanitizer: memory at data pointer {self.data_ptr}, allocated on stream "
                f"{self.allocation_stream}, was freed while stream {self.access.stream} may still use it "
                "(call record_stream for that stream, or synchronize before the free)\n"
                "Freed with stack trace:\n"
            )
            message.write("".join(self.free_stack_trace.format()))
            message.write(f"Access by stream {self.access.stream} during kernel:\n{self.access.operator}\n")
            message.write(f"{self.access.type}\nWith stack trace:\n{''.join(self.access.stack_trace.format())}")
            return message.getvalue()


def _stack_trace() -> traceback.StackSummary:
    stack = traceback.StackSummary.extract(traceback.walk_stack(inspect.currentframe()), lookup_lines=False)
    stack.reverse()  # walk_stack goes from the innermost frame out
    return stack


def _stream_id(stream: torch.Stream) -> int:
    # The id accel's trace reports the stream under (csrc/runtime/AccelTrace.h).
    return _C._trace_stream_id(stream.stream_id, stream.device_index)


class _ArgumentHandler(_csan.ArgumentHandler):
    # torch.cuda's, for accel tensors instead of cuda ones; it also notes the
    # accel devices involved: the first whose memory is read (else the first
    # of all) runs the kernel on its current stream.
    def __init__(self) -> None:
        super().__init__()
        self.devices: list[int] = []
        self.read_devices: list[int] = []

    @property
    def device_index(self) -> Optional[int]:
        if self.read_devices:
            return self.read_devices[0]
        return self.devices[0] if self.devices else None

    def _handle_argument(
        self,
        value: Any,
        is_write: bool,
        metadata_only: bool,
        name: Optional[str] = None,
        is_output: bool = False,
    ) -> None:
        if not isinstance(value, torch.Tensor) or value.device.type != "accel":
            return
        index = value.device.index
        if index not in self.devices:
            self.devices.append(index)
        if not is_write and not metadata_only and index not in self.read_devices:
            self.read_devices.append(index)
        # An empty tensor has no memory (data_ptr 0): tell empty tensors apart by identity.
        key = value.data_ptr() or id(value)
        if is_write:
            self.dataptrs_written.add(key)
        elif not metadata_only:
            self.dataptrs_read.add(key)
        aliases = self.tensor_aliases.setdefault(key, [])
        if name is not None:
            aliases.append(name)
        if is_output:
            self.outputs.add(key)


class _EventHandler(_csan.EventHandler):
    # torch.cuda's analysis, and what an allocation's free needs: the stream
    # that allocated the memory and the streams record_stream named for it.
    def __init__(self) -> None:
        super().__init__()
        self.allocation_streams: dict[int, int] = {}
        self.recorded_streams: dict[int, set[int]] = {}
        self.pending_errors: list[SynchronizationError] = []
        # The stream and event reports made while an operator runs, per
        # thread (None outside one): see AccelSanitizerDispatchMode.
        self._running = threading.local()

    def report(self, method: str, args: tuple) -> None:
        deferred = getattr(self._running, "reports", None)
        if deferred is not None and method not in _MEMORY_METHODS:
            deferred.append((method, args))
        else:
            getattr(self, method)(*args)

    @contextlib.contextmanager
    def running_operator(self) -> Iterator[list]:
        previous = getattr(self._running, "reports", None)
        self._running.reports = []
        try:
            yield self._running.reports
        finally:
            self._running.reports = previous

    # An event of the analysis' own, never a runtime's (those are addresses).
    _BARRIER_EVENT = -1

    def barrier(self, waiting: int, waited: int) -> None:
        # `waiting` orders its later work after `waited`'s work so far.
        self.syncs.create_event(self._BARRIER_EVENT)
        self.syncs.record_state(self._BARRIER_EVENT, waited)
        self.syncs.stream_wait_for_event(waiting, self._BARRIER_EVENT)
        self.syncs.delete_event(self._BARRIER_EVENT)

    def replay(self, reports: list) -> None:
        for method, args in reports:
            getattr(self, method)(*args)

    def _handle_memory_allocation(self, data_ptr: int) -> None:
        super()._handle_memory_allocation(data_ptr)
        self.allocation_streams[data_ptr] = _stream_id(current_stream())
        self.recorded_streams.pop(data_ptr, None)

    def _handle_memory_deallocation(self, data_ptr: int) -> None:
        self.tensors_accessed.ensure_tensor_exists(data_ptr)
        stream = self.allocation_streams.pop(data_ptr, None)
        recorded = self.recorded_streams.pop(data_ptr, set())
        if stream is not None:
            free_stack_trace: Optional[traceback.StackSummary] = None
            write = self.tensors_accessed.get_write(data_ptr)
            accesses = ([write] if write is not None else []) + self.tensors_accessed.get_reads(data_ptr)
            for access in accesses:
                if access.stream == stream or access.stream in recorded:
                    continue
                if not self.syncs.is_ordered_after(stream, access.seq_num, access.stream):
                    free_stack_trace = free_stack_trace or _stack_trace()
                    self.pending_errors.append(UnsynchronizedFreeError(data_ptr, stream, free_stack_trace, access))
        super()._handle_memory_deallocation(data_ptr)

    def record_stream(self, data_ptr: int, stream: int) -> None:
        self.recorded_streams.setdefault(data_ptr, set()).add(stream)


# The trace's callbacks, added once to the registries (which cannot remove
# one) and forwarding to the handler of the sanitizer now enabled, if any.
_active_handler: Optional[_EventHandler] = None
_callbacks_added = False
_memory_callbacks_added = False

# (registry name, handler method): the reports of streams and events, which
# accel's own trace makes, and of memory, which the trace of the runtime's
# memory makes (Runtime::memoryTraceDeviceType).
_STREAM_AND_EVENT_REPORTS = (
    ("EventCreationCallbacks", "_handle_event_creation"),
    ("EventDeletionCallbacks", "_handle_event_deletion"),
    ("EventRecordCallbacks", "_handle_event_record"),
    ("EventWaitCallbacks", "_handle_event_wait"),
    ("StreamCreationCallbacks", "_handle_stream_creation"),
    ("DeviceSynchronizationCallbacks", "_handle_device_synchronization"),
    ("StreamSynchronizationCallbacks", "_handle_stream_synchronization"),
    ("EventSynchronizationCallbacks", "_handle_event_synchronization"),
)
_MEMORY_REPORTS = (
    ("MemoryAllocationCallbacks", "_handle_memory_allocation"),
    ("MemoryDeallocationCallbacks", "_handle_memory_deallocation"),
)


_MEMORY_METHODS = frozenset(method for _, method in _MEMORY_REPORTS)


def _forward(method: str, *args: int) -> None:
    if _active_handler is not None:
        _active_handler.report(method, args)


def _memory_trace() -> Any:
    # The _gpu_trace module of the device type whose trace reports accel
    # memory: accel's own, or the target's where its allocator serves accel.
    device_module = getattr(torch, _C._memory_trace_device_type())
    return importlib.import_module(f"{device_module.__name__}._gpu_trace")


def _add_callbacks() -> None:
    global _callbacks_added
    if not _callbacks_added:
        torch._C._activate_gpu_trace()
        for registry, method in _STREAM_AND_EVENT_REPORTS:
            getattr(_gpu_trace, registry).add_callback(functools.partial(_forward, method))
        _callbacks_added = True
    _add_memory_callbacks()


def _add_memory_callbacks() -> None:
    # Where accel memory is reported depends on the runtime, which a
    # misconfigured environment (TORCH_ACCEL_RUNTIME=bogus) makes fail at its
    # first use: not here, where TORCH_ACCEL_SANITIZER=1 runs at import.
    # Without a runtime there is no accel memory to follow; the next
    # operator tries again.
    global _memory_callbacks_added
    if _memory_callbacks_added:
        return
    try:
        trace = _memory_trace()
    except (RuntimeError, ValueError):
        return
    for registry, method in _MEMORY_REPORTS:
        getattr(trace, registry).add_callback(functools.partial(_forward, method))
    _memory_callbacks_added = True


class AccelSanitizerDispatchMode(TorchDispatchMode):
    r"""Records each operator on accel tensors as a kernel on its device's current stream.

    A context manager: the sanitizer is on inside it, with a fresh record (an
    enclosing sanitizer's record resumes at its exit).
    """

    def __init__(self) -> None:
        super().__init__()
        _add_callbacks()
        self.event_handler = _EventHandler()
        self._previous_handler: list[Optional[_EventHandler]] = []

    def __enter__(self) -> "AccelSanitizerDispatchMode":
        global _active_handler
        self._previous_handler.append(_active_handler)
        _active_handler = self.event_handler
        return super().__enter__()

    def __exit__(self, exc_type: Any, exc_value: Any, tb: Any) -> None:
        global _active_handler
        try:
            return super().__exit__(exc_type, exc_value, tb)
        finally:
            _active_handler = self._previous_handler.pop()

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        if not _memory_callbacks_added:
            _add_memory_callbacks()
        self._raise(self._take_pending_errors())
        if func is aten.record_stream.default:
            # Not a kernel: it tells the allocator that the stream uses the memory.
            tensor, stream = args
            if tensor.device.type == "accel":
                self.event_handler.record_stream(tensor.data_ptr(), _stream_id(stream))
            return func(*args, **kwargs)

        if is_current_stream_capturing():
            # A capture runs nothing: its operators run at each replay, which
            # the sanitizer does not see (as torch.cuda's does not see CUDA
            # graph replays). Recording them as kernels would report races
            # that never happen.
            return func(*args, **kwargs)
        is_factory = func in _UNWRITTEN_FACTORIES or bool(_csan.FACTORY_FUNCTION_REGEX.match(func._schema.name))
        handler = _ArgumentHandler()
        handler.parse_inputs(func._schema, args, kwargs, is_factory=is_factory)
        # The synchronisations an operator reports while it runs (a blocking
        # copy's synchronisation of its stream, say) follow its kernel: they
        # are replayed once the kernel is recorded. Allocations are recorded
        # at once, before the kernel that writes them.
        with self.event_handler.running_operator() as reports:
            outputs = func(*args, **kwargs)
        handler.parse_outputs(func._schema, outputs, is_factory=is_factory)
        if handler.device_index is None:
            self.event_handler.replay(reports)
            return outputs  # no accel tensor: no accel kernel
        stream = _stream_id(current_stream(handler.device_index))
        # A copy between two accel devices runs on the source device's current
        # stream, behind a two-way barrier with the other device's current
        # stream, as CUDA's copy between devices (its own CUDA events, which
        # accel's trace does not hear on the CUDA runtime, and none on the
        # host runtime): the other stream's work before the copy, and the
        # copy before the other stream's later work.
        others = [_stream_id(current_stream(i)) for i in handler.devices if i != handler.device_index]
        for other in others:
            self.event_handler.barrier(waiting=stream, waited=other)
        errors = self.event_handler._handle_kernel_launch(
            stream,
            handler.dataptrs_read - handler.dataptrs_written,
            handler.dataptrs_written,
            handler.outputs,
            func._schema,
            handler.tensor_aliases,
        )
        for other in others:
            self.event_handler.barrier(waiting=other, waited=stream)
        self.event_handler.replay(reports)
        self._raise(self._take_pending_errors() + errors)
        return outputs

    def _take_pending_errors(self) -> list:
        errors, self.event_handler.pending_errors = self.event_handler.pending_errors, []
        return errors

    @staticmethod
    def _raise(errors: list) -> None:
        if errors:
            for error in errors:
                print(error, file=sys.stderr)
            raise AccelSanitizerErrors(errors)


class AccelSanitizer:
    r"""The process's sanitizer: a dispatch mode entered by :meth:`enable` until :meth:`disable`."""

    def __init__(self) -> None:
        self.dispatch: Optional[AccelSanitizerDispatchMode] = None
        self.enabled = False

    def enable(self) -> None:
        if self.enabled:
            return
        self.dispatch = AccelSanitizerDispatchMode()
        self.dispatch.__enter__()
        self.enabled = True

    def disable(self) -> None:
        if not self.enabled:
            return
        assert self.dispatch is not None
        self.dispatch.__exit__(None, None, None)
        self.enabled = False

    def __del__(self) -> None:
        # The module may outlive parts of the interpreter at exit (as torch.cuda's).
        if sys is not None and not sys.is_finalizing() and self.enabled:
            self.disable()


accel_sanitizer = AccelSanitizer()


def enable_accel_sanitizer() -> None:
    r"""Enable the accel stream sanitizer for the rest of the program.

    Every operator on accel tensors from here on is checked for accesses that
    race with another stream's; a race raises :class:`AccelSanitizerErrors`
    after printing both accesses' stack traces to stderr. Enable it at the
    start of the program: memory used before is learnt on first use.
    """
    accel_sanitizer.enable()


def _enable_from_environment() -> None:
    # TORCH_ACCEL_SANITIZER: "1" enables, "0" or unset leaves it off; any
    # other value is an error rather than a guess.
    value = os.environ.get("TORCH_ACCEL_SANITIZER", "")
    if value in ("", "0"):
        return
    if value != "1":
        raise ValueError(f"TORCH_ACCEL_SANITIZER must be 0 or 1, but is {value!r}")
    enable_accel_sanitizer()
