"""Graph capture on accel: torch.cuda.graphs' API (torch/cuda/graphs.py) for accel.

On the CUDA runtime an accel graph is a CUDA graph (``at::cuda::CUDAGraph``)
captured on the CUDA stream behind the current accel stream, with the caching
allocator's private memory pools. On the host runtime, whose streams run work
as it is issued, a capture records the work of the capturing stream instead of
running it, and ``replay()`` runs the recorded kernels again on the same
memory: the observable behaviour is CUDA's (see the README, "Graph capture").
"""

from __future__ import annotations

import gc
from typing import Any, NewType, Optional

import torch

from . import _C
from ._lazy import _lazy_init

__all__ = [
    "is_current_stream_capturing",
    "graph_pool_handle",
    "Graph",
    "AccelGraph",
    "graph",
]

# An opaque token naming a graph memory pool, as torch.cuda's _POOL_HANDLE.
_POOL_HANDLE = NewType("_POOL_HANDLE", tuple[int, int])


def is_current_stream_capturing() -> bool:
    r"""Return True if graph capture is underway on the current accel stream, False otherwise.

    Returns False, without initialising accel, before accel is initialised.
    """
    return _C._is_current_stream_capturing()


def graph_pool_handle() -> _POOL_HANDLE:
    r"""Return an opaque token representing the id of a graph memory pool.

    Graphs captured with the same token (``pool=``) share that pool.
    """
    _lazy_init()
    return _POOL_HANDLE(_C._graph_pool_handle())


class Graph(_C._AccelGraph):
    r"""Wrapper around an accel graph (torch.cuda.CUDAGraph's API).

    Arguments:
        keep_graph (bool, optional): as torch.cuda.CUDAGraph's: if True, the
            graph is instantiated by :meth:`instantiate` or the first
            :meth:`replay` rather than at the end of the capture.
    """

    def __new__(cls, keep_graph: bool = False) -> Graph:
        _lazy_init()
        return super().__new__(cls, keep_graph)

    def capture_begin(self, pool: Optional[_POOL_HANDLE] = None, capture_error_mode: str = "global") -> None:
        r"""Begin capturing accel work on the current stream.

        Typically you use :class:`graph` instead, which calls it.

        Arguments:
            pool (optional): token from :func:`graph_pool_handle` or
                :meth:`other_graph.pool() <Graph.pool>` hinting that this graph
                may share memory with that pool.
            capture_error_mode (str, optional): ``"global"``, ``"thread_local"``
                or ``"relaxed"``: cudaStreamCaptureMode on the CUDA runtime
                (which other threads' unsafe calls the capture forbids).
        """
        super().capture_begin(pool=pool, capture_error_mode=capture_error_mode)

    def capture_end(self) -> None:
        r"""End the capture on the current stream; :meth:`replay` may then be called."""
        super().capture_end()

    def instantiate(self) -> None:
        r"""Instantiate the graph (done by :meth:`capture_end` unless ``keep_graph=True``)."""
        super().instantiate()

    def replay(self) -> None:
        r"""Replay the work captured by this graph."""
        super().replay()

    def reset(self) -> None:
        r"""Delete the graph held by this instance, and give its memory back."""
        super().reset()

    def pool(self) -> _POOL_HANDLE:
        r"""Return an opaque token naming this graph's memory pool, for another graph's ``pool=``."""
        return super().pool()

    def enable_debug_mode(self) -> None:
        r"""Enable debugging mode for :meth:`debug_dump`."""
        return super().enable_debug_mode()

    def debug_dump(self, debug_path: str) -> None:
        r"""Dump the graph to ``debug_path`` (after :meth:`enable_debug_mode`).

        The CUDA runtime writes CUDA's graph dump; the host runtime writes its
        recorded steps, one per line.
        """
        return super().debug_dump(debug_path)


AccelGraph = Graph


class graph:
    r"""Context manager that captures accel work into a :class:`Graph` for later replay.

    As torch.cuda.graph: on entry it synchronises the device, collects
    garbage and empties the cache if torch.compiler.config.force_cudagraph_gc
    asks for it, makes ``stream`` (or a side stream of its own) current and
    begins the capture; on exit it ends the capture and restores the stream.

    Arguments:
        accel_graph (Graph): graph object used for capture.
        pool (optional): token from :func:`graph_pool_handle` or
            :meth:`other_graph.pool() <Graph.pool>` hinting that this graph's
            capture may share memory from that pool.
        stream (torch.accel.Stream, optional): the stream current in the
            context. If None, ``graph`` uses a side stream of its own.
        capture_error_mode (str, optional): see :meth:`Graph.capture_begin`.
    """

    default_capture_stream: Optional[torch.Stream] = None

    def __init__(
        self,
        accel_graph: Graph,
        pool: Optional[_POOL_HANDLE] = None,
        stream: Optional[torch.Stream] = None,
        capture_error_mode: str = "global",
    ) -> None:
        from .streams import Stream
        from .streams import stream as stream_context

        # Not thread safe, as torch.cuda.graph's: one capture at a time.
        if stream is None and self.__class__.default_capture_stream is None:
            self.__class__.default_capture_stream = Stream()

        self.pool: tuple[()] | tuple[_POOL_HANDLE] = () if pool is None else (pool,)
        self.capture_stream = stream if stream is not None else self.__class__.default_capture_stream
        if self.capture_stream is None:
            raise AssertionError("capture_stream must not be None")
        self.stream_ctx = stream_context(self.capture_stream)
        self.accel_graph = accel_graph
        self.capture_error_mode = capture_error_mode

    def __enter__(self) -> None:
        from . import memory, synchronize

        # Free as much memory as we can for the graph.
        synchronize()
        if torch.compiler.config.force_cudagraph_gc:
            gc.collect()
        memory.empty_cache()

        self.stream_ctx.__enter__()

        self.accel_graph.capture_begin(*self.pool, capture_error_mode=self.capture_error_mode)

    def __exit__(self, *args: Any) -> None:
        self.accel_graph.capture_end()
        self.stream_ctx.__exit__(*args)
        # Returning None propagates exceptions from capture_end or stream_ctx.__exit__.


# --- make_graphed_callables ---------------------------------------------------
# Forward and backward graphs of callables, as torch.cuda.make_graphed_callables;
# written in its own module (on top of Graph and graph above).

from ._graphed_callables import make_graphed_callables  # noqa: E402

__all__ += ["make_graphed_callables"]
