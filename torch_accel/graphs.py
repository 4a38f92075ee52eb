"""Graph capture on accel: torch.cuda.graphs' API (torch/cuda/graphs.py) for accel.

On the CUDA runtime an accel graph is a CUDA graph (``at::cuda::CUDAGraph``)
captured on the CUDA stream behind the current accel stream, with the caching
allocator's private memory pools. On the host runtime, whose streams run work
as it is issued, a capture records the work of the capturing stream instead of
running it, and ``replay()`` runs the recorded kernels again on the same
memory: the observable behaviour is CUDA's (see docs/graphs.md).
``make_graphed_callables`` (forward and backward graphs of modules and
functions) is written on top of them, below, as in torch/cuda/graphs.py.
"""

from __future__ import annotations

import gc
import sys
from typing import Any, Callable, NewType, Optional, Union

import torch
from torch.utils._pytree import tree_flatten, tree_unflatten

from . import _C
from ._core import _lazy_init, synchronize
from .memory import empty_cache
from .streams import Stream, current_stream
from .streams import stream as stream_context

__all__ = [
    "is_current_stream_capturing",
    "graph_pool_handle",
    "Graph",
    "AccelGraph",
    "graph",
    "make_graphed_callables",
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

    def register_generator_state(self, generator: torch.Generator) -> None:
        r"""Register an accel generator with the graph (torch.cuda.CUDAGraph's method).

        Random work captured with ``generator`` then draws fresh numbers from
        it at each replay, advancing it as eager work would. The default
        generator of the capturing device is registered by
        :meth:`capture_begin`; register any other before the capture begins.

        Arguments:
            generator (torch.Generator): an accel generator, ``torch.Generator("accel")``.
        """
        super().register_generator_state(generator)

    def capture_begin(self, pool: Optional[_POOL_HANDLE] = None, capture_error_mode: str = "global") -> None:
        r"""Begin capturing accel work on the current stream.

        Typically you use :class:`graph` instead, which calls it. If it
        raises, nothing is left capturing (see :meth:`capture_end`).

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
        r"""End the capture on the current stream; :meth:`replay` may then be called.

        If the capture failed (an operation it forbids invalidated it), this
        raises, and the capture is over all the same: the memory allocator is
        out of capture mode with the graph's pool given back, generators are
        out of capture mode, and the graph may capture again. Called on
        another stream than the capturing one, it raises and the capture goes
        on, as on cuda.
        """
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
    Unlike torch.cuda.graph, the stream is restored also when beginning or
    ending the capture raises (a capture that an operation in the body
    invalidated), so a failed capture leaves nothing behind.

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
        # Free as much memory as we can for the graph.
        synchronize()
        if torch.compiler.config.force_cudagraph_gc:
            gc.collect()
        empty_cache()

        self.stream_ctx.__enter__()
        try:
            self.accel_graph.capture_begin(*self.pool, capture_error_mode=self.capture_error_mode)
        except BaseException:
            self.stream_ctx.__exit__(*sys.exc_info())
            raise

    def __exit__(self, *args: Any) -> None:
        try:
            self.accel_graph.capture_end()
        finally:
            self.stream_ctx.__exit__(*args)
        # Returning None propagates exceptions from capture_end or stream_ctx.__exit__.


# --- make_graphed_callables: modules and functions replayed as accel graphs, forward and backward
#
# torch.accel.make_graphed_callables has torch.cuda.make_graphed_callables's
# arguments, checks and semantics, on the graphs above:
#
# - each callable runs ``num_warmup_iters`` times (forward, and backward through
#   torch.autograd.grad where something requires grad) on a side stream, so that
#   lazily initialised state (workspaces, autograd's engine) exists before
#   capture;
# - the forward passes are captured in the order given, then the backward passes
#   in reverse order, all in one memory pool (``pool``, or a new one), so the
#   graphs must be replayed in that order (forward in order, backward in reverse),
#   as on cuda;
# - a graphed callable copies its tensor arguments into the static inputs it was
#   captured with, replays, and returns the static outputs (detached, then wrapped
#   by autograd): they are overwritten by the next replay of the same callable,
#   as torch.cuda's are. Parameters are used in place (never copied); their
#   gradients flow to them through autograd as in eager mode.
# - a graphed module runs its graphs only while its ``training`` flag is what it
#   was at capture; otherwise it runs its original forward.
#
# The graphs record the kernels the callables issue; Python control flow, hooks
# and anything read on the host during the call are fixed at capture (what
# torch.cuda requires too: no data-dependent control flow, no ``.item()``, no
# CPU synchronisation).

_Callable = Union[torch.nn.Module, Callable[..., Any]]


def _flat_tensors(args: Any, what: str) -> tuple[tuple[torch.Tensor, ...], Any]:
    flat, spec = tree_flatten(args)
    for item in flat:
        if not isinstance(item, torch.Tensor):
            # AssertionError, as torch.cuda raises for the same mistake.
            raise AssertionError(
                f"make_graphed_callables on accel: {what} must contain only tensors (other values would be "
                f"fixed at capture); got {type(item).__name__}"
            )
    return tuple(flat), spec


def _check_callable(func: _Callable, flat_args: tuple[torch.Tensor, ...]) -> None:
    # The conditions torch.cuda.make_graphed_callables asserts, with its exception type.
    if isinstance(func, torch.nn.Module):
        if func._backward_hooks or func._forward_hooks or func._forward_pre_hooks:
            raise AssertionError(
                "make_graphed_callables on accel: modules must not have hooks registered when they are passed "
                "(a graph replays the kernels captured, so hooks would not run); hooks registered afterwards "
                "are allowed"
            )
        if any(b.requires_grad for b in func.buffers()):
            raise AssertionError(
                "make_graphed_callables on accel: only parameters may be trainable; every buffer of a graphed "
                "module must have requires_grad=False"
            )
    for arg in flat_args:
        if arg.device.type != "accel":
            raise ValueError(
                f"make_graphed_callables on accel: sample arguments must be accel tensors; got one on {arg.device}"
            )


class _GraphedCall:
    """The captured forward and backward graphs of one callable, with their static tensors."""

    def __init__(
        self,
        func: _Callable,
        flat_args: tuple[torch.Tensor, ...],
        args_spec: Any,
        params: tuple[torch.Tensor, ...],
    ) -> None:
        self.func = func
        self.args_spec = args_spec
        self.num_args = len(flat_args)
        # The static inputs: the sample arguments themselves (captured in place,
        # as torch.cuda does), then the module's parameters.
        self.static_inputs = flat_args + params
        self.fwd_graph: Any = None
        self.bwd_graph: Any = None
        self.static_outputs: tuple[torch.Tensor, ...] = ()
        self.outputs_spec: Any = None
        self.static_grad_outputs: tuple[Optional[torch.Tensor], ...] = ()
        self.static_grad_inputs: tuple[Optional[torch.Tensor], ...] = ()

    def call_func(self, inputs: tuple[torch.Tensor, ...]) -> tuple[tuple[torch.Tensor, ...], Any]:
        args = tree_unflatten(list(inputs[: self.num_args]), self.args_spec)
        outputs = self.func(*args)
        flat, spec = tree_flatten(outputs)
        for item in flat:
            if not isinstance(item, torch.Tensor):
                raise TypeError(
                    "make_graphed_callables on accel: a graphed callable must return tensors (or nested "
                    f"tuples/lists of tensors); got {type(item).__name__}"
                )
        return tuple(flat), spec

    def grad_inputs_of(self, inputs: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, ...]:
        return tuple(t for t in inputs if t.requires_grad)

    def backward_once(
        self,
        outputs: tuple[torch.Tensor, ...],
        grad_outputs: tuple[Optional[torch.Tensor], ...],
        allow_unused: bool,
    ) -> tuple[Optional[torch.Tensor], ...]:
        differentiable = [(o, g) for o, g in zip(outputs, grad_outputs) if o.requires_grad and g is not None]
        wanted = self.grad_inputs_of(self.static_inputs)
        if not differentiable or not wanted:
            return tuple(None for _ in wanted)
        return torch.autograd.grad(
            tuple(o for o, _ in differentiable),
            wanted,
            grad_outputs=tuple(g for _, g in differentiable),
            allow_unused=allow_unused,
        )


def _make_autograd_function(call: _GraphedCall) -> Callable[..., Any]:
    """The graphed function of ``call``: an autograd.Function over its two graphs."""
    requires_grad_mask = tuple(t.requires_grad for t in call.static_inputs)

    class Graphed(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, *inputs: torch.Tensor) -> tuple[torch.Tensor, ...]:
            for static, new in zip(call.static_inputs[: call.num_args], inputs[: call.num_args]):
                if static.data_ptr() != new.data_ptr():
                    static.copy_(new)
            call.fwd_graph.replay()
            return tuple(o.detach() for o in call.static_outputs)

        @staticmethod
        @torch.autograd.function.once_differentiable
        def backward(ctx: Any, *grads: Optional[torch.Tensor]) -> tuple[Optional[torch.Tensor], ...]:
            if call.bwd_graph is None:
                return tuple(None for _ in requires_grad_mask)
            for static, grad in zip(call.static_grad_outputs, grads):
                if static is None:
                    continue
                if grad is None:
                    static.zero_()  # autograd passed no gradient for this output: it is zero
                elif static.data_ptr() != grad.data_ptr():
                    static.copy_(grad)
            call.bwd_graph.replay()
            grad_inputs = iter(call.static_grad_inputs)
            # One gradient per input of forward; None where the input needs none.
            return tuple(
                (lambda g: None if g is None else g.detach())(next(grad_inputs)) if needs else None
                for needs in requires_grad_mask
            )

    def functionalized(*user_args: Any) -> Any:
        flat, _ = tree_flatten(user_args)
        if len(flat) != call.num_args:
            raise TypeError(
                f"make_graphed_callables on accel: the graphed callable was captured with {call.num_args} "
                f"tensor arguments; got {len(flat)}"
            )
        outputs = Graphed.apply(*flat, *call.static_inputs[call.num_args :])
        return tree_unflatten(list(outputs), call.outputs_spec)

    return functionalized


def make_graphed_callables(
    callables: Union[_Callable, tuple[_Callable, ...]],
    sample_args: Union[tuple[Any, ...], tuple[tuple[Any, ...], ...]],
    num_warmup_iters: int = 3,
    allow_unused_input: bool = False,
    pool: Optional[tuple[int, int]] = None,
) -> Any:
    r"""Graphed versions of ``callables`` (modules or functions), forward and backward.

    Accel's counterpart of :func:`torch.cuda.make_graphed_callables`, with its
    arguments: ``sample_args`` is a tuple of tensor arguments for one callable,
    or a tuple of such tuples for a tuple of callables; ``num_warmup_iters``
    eager iterations run before capture; ``allow_unused_input`` lets inputs
    have no gradient; ``pool`` is a memory pool handle
    (:func:`torch.accel.graph_pool_handle`) to capture into. Returns the
    graphed callable, or a tuple of them in the order given. See the module
    documentation for the replay order and the outputs' lifetime.
    """
    if torch.is_autocast_enabled() and torch.is_autocast_cache_enabled():
        raise RuntimeError(
            "make_graphed_callables on accel does not support the autocast caching; pass cache_enabled=False "
            "to autocast"
        )
    just_one = False
    if not isinstance(callables, tuple):
        just_one = True
        callables = (callables,)
        sample_args = (sample_args,)  # type: ignore[assignment]
    if len(callables) != len(sample_args):
        raise ValueError(
            f"make_graphed_callables on accel: {len(callables)} callables but {len(sample_args)} sets of sample arguments"
        )
    if num_warmup_iters < 0:
        raise ValueError(f"make_graphed_callables on accel: num_warmup_iters must be >= 0; got {num_warmup_iters}")

    calls = []
    for func, args in zip(callables, sample_args):
        if not isinstance(args, (tuple, list)):
            raise TypeError(
                "make_graphed_callables on accel: sample_args must be a tuple of arguments per callable; got "
                f"{type(args).__name__}"
            )
        flat_args, args_spec = _flat_tensors(tuple(args), "sample_args")
        _check_callable(func, flat_args)
        params = tuple(func.parameters()) if isinstance(func, torch.nn.Module) else ()
        calls.append(_GraphedCall(func, flat_args, args_spec, params))

    mempool = graph_pool_handle() if pool is None else pool

    # Warm up on a side stream (as torch.cuda does), then wait for it.
    synchronize()
    side = Stream()
    side.wait_stream(current_stream())
    with stream_context(side):
        for call in calls:
            for _ in range(num_warmup_iters):
                outputs, _ = call.call_func(call.static_inputs)
                grads = tuple(torch.empty_like(o) if o.requires_grad else None for o in outputs)
                call.backward_once(outputs, grads, allow_unused_input)
                del outputs, grads
    current_stream().wait_stream(side)
    synchronize()

    # Capture the forward passes in order, then the backward passes in reverse
    # order, into one pool.
    for call in calls:
        call.fwd_graph = Graph()
        with graph(call.fwd_graph, pool=mempool):
            call.static_outputs, call.outputs_spec = call.call_func(call.static_inputs)
    for call in reversed(calls):
        if not any(o.requires_grad for o in call.static_outputs) or not call.grad_inputs_of(call.static_inputs):
            call.static_grad_outputs = tuple(None for _ in call.static_outputs)
            call.static_grad_inputs = tuple(None for _ in call.grad_inputs_of(call.static_inputs))
            continue
        call.static_grad_outputs = tuple(torch.empty_like(o) if o.requires_grad else None for o in call.static_outputs)
        call.bwd_graph = Graph()
        with graph(call.bwd_graph, pool=mempool):
            call.static_grad_inputs = call.backward_once(call.static_outputs, call.static_grad_outputs, allow_unused_input)

    graphed = []
    for func, call in zip(callables, calls):
        functionalized = _make_autograd_function(call)
        if isinstance(func, torch.nn.Module):
            func.forward = _forward_while_training_is(func, func.training, functionalized, func.forward)  # type: ignore[method-assign]
            graphed.append(func)
        else:
            graphed.append(functionalized)
    return graphed[0] if just_one else tuple(graphed)


def _forward_while_training_is(
    module: torch.nn.Module, training: bool, graphed: Callable[..., Any], original: Callable[..., Any]
) -> Callable[..., Any]:
    """The module's forward: the graphs while ``module.training`` is as at capture, else the original."""

    def forward(*args: Any, **kwargs: Any) -> Any:
        if module.training == training and not kwargs:
            return graphed(*args)
        return original(*args, **kwargs)

    return forward
