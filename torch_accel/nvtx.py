r"""NVTX ranges and marks for accel, as torch.cuda.nvtx for cuda.

Each range and mark goes to two places:

- the runtime's annotations (``Runtime::profilerAnnotations``): NVTX on the CUDA
  runtime, which Nsight Systems shows as torch.cuda.nvtx's; Intel ITT on the
  host runtime where PyTorch has it (VTune);
- torch.profiler: a range is a ``record_function`` range (a user annotation in
  the profiler's events and in its Chrome trace), a mark a range of no length.

Return values are torch.cuda.nvtx's: where the annotations are NVTX, NVTX's own
(the zero-based depth of the range pushed or popped while a tool such as
Nsight Systems tracks them, a negative number otherwise); elsewhere the
zero-based depth of this thread's ranges, and -1 for a pop with no range open.
See docs/profiler.md#nvtx-ranges.
"""

import contextlib
import functools
import threading
from collections.abc import Iterator
from typing import Any, Callable, Optional

import torch

from . import _C

__all__ = ["range_push", "range_pop", "mark", "range"]


class _Annotations:
    # The runtime's annotation functions: push, pop and mark, each None
    # where the runtime has none.
    def __init__(
        self,
        push: Optional[Callable[[str], Any]],
        pop: Optional[Callable[[], Any]],
        mark: Optional[Callable[[str], Any]],
        returns_depth: bool,
    ) -> None:
        self.push, self.pop, self.mark = push, pop, mark
        # Whether push and pop return the depth torch.cuda.nvtx returns (NVTX's).
        self.returns_depth = returns_depth


@functools.cache
def _annotations() -> _Annotations:
    kind = _C._profiler_annotations()
    if kind == "nvtx":
        nvtx = torch._C._nvtx
        return _Annotations(nvtx.rangePushA, nvtx.rangePop, nvtx.markA, returns_depth=True)
    if kind == "itt" and torch._C._itt.is_available():
        itt = torch._C._itt
        return _Annotations(itt.rangePush, itt.rangePop, itt.mark, returns_depth=False)
    return _Annotations(None, None, None, returns_depth=False)


class _OpenRanges(threading.local):
    # This thread's open ranges, innermost last: the profiler's handle of each.
    def __init__(self) -> None:
        self.handles: list[Any] = []


_open_ranges = _OpenRanges()


def _check_message(msg: Any, function: str) -> None:
    if not isinstance(msg, str):
        raise TypeError(f"torch.accel.nvtx.{function}: msg must be a str, but got {type(msg).__name__}")


def range_push(msg: str) -> int:
    r"""Push a range onto this thread's stack of nested ranges; return the zero-based depth of the range started.

    Args:
        msg (str): the message (name) of the range
    """
    _check_message(msg, "range_push")
    annotations = _annotations()
    result = annotations.push(msg) if annotations.push is not None else None
    _open_ranges.handles.append(torch.ops.profiler._record_function_enter_new(msg, None))
    if annotations.returns_depth:
        return result
    return len(_open_ranges.handles) - 1


def range_pop() -> int:
    r"""Pop a range off this thread's stack of nested ranges; return the zero-based depth of the range ended."""
    annotations = _annotations()
    result = annotations.pop() if annotations.pop is not None else None
    handles = _open_ranges.handles
    depth = len(handles) - 1
    if handles:
        torch.ops.profiler._record_function_exit._RecordFunction(handles.pop())
    if annotations.returns_depth:
        return result
    return depth


def mark(msg: str) -> None:
    r"""Describe an instantaneous event that occurred at some point.

    Args:
        msg (str): the message of the event
    """
    _check_message(msg, "mark")
    annotations = _annotations()
    if annotations.mark is not None:
        annotations.mark(msg)
    torch.ops.profiler._record_function_exit._RecordFunction(torch.ops.profiler._record_function_enter_new(msg, None))


@contextlib.contextmanager
def range(msg: str, *args: Any, **kwargs: Any) -> Iterator[None]:
    r"""Context manager / decorator that pushes a range at the start of its scope and pops it at the end.

    Extra arguments are passed to ``msg.format()``.

    Args:
        msg (str): the message of the range
    """
    range_push(msg.format(*args, **kwargs))
    try:
        yield
    finally:
        range_pop()
