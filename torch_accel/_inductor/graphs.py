"""torch.compile(mode="reduce-overhead") on accel: compiled graphs replayed as accel graphs.

mode="reduce-overhead" sets Inductor's ``triton.cudagraphs``. For cuda,
Inductor then wraps each compiled graph in its CUDA graph trees
(torch/_inductor/cudagraph_trees.py). Those are written against torch.cuda
(torch.cuda.CUDAGraph, CUDA caching allocator pools and checkpoints, outputs
rebuilt as cuda tensors), so accel does not use them: an accel-only graph is
wrapped instead by ``AccelGraphed`` below, accel's own graph wrapper over
torch.accel.Graph, plugged where Inductor applies cudagraphify.

Adapts (declared in torch_accel/_patches.py with the hashes of their sources;
applied by registration):

- ``cudagraph_utils.check_lowering_disable_cudagraph``: accepts a graph whose
  only device is one accel device (Inductor accepts exactly one cuda device).
  For such a graph it applies the checks Inductor skips under
  ``graph_partition`` (on by default), since accel graphs are captured whole,
  not partitioned: an op that cannot be captured (``cudagraph_unsafe`` ops,
  data-dependent output sizes), and ``triton.cudagraph_skip_dynamic_graphs``.
- ``output_code.cudagraph_post_compile`` and
  ``output_code.cudagraph_partition_post_compile``: an accel-only graph gets
  ``AccelGraphed``; every other graph Inductor's own handling.
- ``output_code.CompiledFxGraph.post_compile``: an accel graph that runs
  without accel graphs logs why, as a cuda graph does (see skip_message).

What AccelGraphed does, and how it differs from the trees:

- Warmup: the first call with given sizes runs the compiled graph as compiled;
  the second captures it (into a private memory pool per graph) and replays.
- Static inputs (parameters, buffers: Inductor's ``static_input_idxs``; in a
  backward, the forward's outputs it saved) are captured in place and never
  copied; if one's memory moves, the graph is captured again for the new
  addresses (up to ``triton.cudagraph_unexpected_rerecord_limit``). Other
  tensor inputs are copied into the capture's own buffers.
- Sizes: one capture per distinct set of integer inputs (dynamic shapes), as
  the trees do, with their warning past
  ``triton.cudagraph_dynamic_shape_warn_limit``.
- Outputs live in the graph's pool and are overwritten by its next replay.
  As with the trees, an output of a previous replay that is still referenced
  when the graph replays again is invalidated: using it raises an error
  saying so (clone it first, or call torch.compiler.cudagraph_mark_step_begin).
  When a replay would invalidate outputs that autograd may still need (a
  training forward whose backward has not run yet, a backward whose
  gradients are still held, and no cudagraph_mark_step_begin since), the call
  runs the compiled graph without replaying instead: slower, never wrong.
  Outputs that alias a static input (a parameter saved for backward) are
  returned as captured, never invalidated; an output aliasing a copied input
  is a view of the capture's buffer (as with the trees, whose copies those
  are), handed out and invalidated like the graph's own memory.
- A capture that fails (something the capture cannot record) is recorded as
  a skip (cudagraph_skips, the cudagraphs log) and the graph runs as
  compiled from then on.
- Host runtime: the C++ kernels that Inductor's wrapper calls directly are
  recorded as host calls of the capture (_HostKernelCalls).
- Input mutation: a graph that mutates a non-static input is not captured
  (``skipping cudagraphs due to mutated inputs``, counted in cudagraph_skips,
  as the trees skip such graphs); mutating static inputs (BatchNorm running
  stats) is captured.
- There is no tree: each compiled graph (forward, backward) has its own
  captures and pool, so memory is not shared between graphs as the trees
  share it.

This module imports Inductor and Dynamo only inside its functions.
"""

import contextlib
import warnings
from typing import Any, Callable, Iterator, Optional, Sequence

import torch

from .. import _C
from .._core import DEVICE_TYPE, synchronize
from .._core import device as accel_device
from .._patches import patch
from .. import graphs as accel_graphs
from .. import streams as accel_streams
from .codegen_config import codegen_config


# Counted in torch._dynamo.utils.counters["inductor"]: graphs captured,
# replays, and calls that ran without replaying (see AccelGraphed).
CAPTURE_COUNTER = "accel_graph_captures"
REPLAY_COUNTER = "accel_graph_replays"
UNREPLAYED_COUNTER = "accel_graph_calls_not_replayed"


def _accel_only(device_types: Any) -> bool:
    types = set(device_types) - {"meta"}
    return types == {DEVICE_TYPE}


# --- the lowering check ---------------------------------------------------------


def _check_lowering(original: Callable[..., Optional[str]]) -> Callable[..., Optional[str]]:
    def check_lowering_disable_cudagraph(device_node_mapping: dict[torch.device, torch.fx.Node]) -> Optional[str]:
        devices = [d for d in device_node_mapping if d.type != "meta"]
        if len(devices) != 1 or devices[0].type != DEVICE_TYPE:
            return original(device_node_mapping)
        return _accel_graph_reason()

    check_lowering_disable_cudagraph.__doc__ = original.__doc__
    return check_lowering_disable_cudagraph


def _accel_graph_reason() -> Optional[str]:
    """Why the accel graph being lowered (V.graph) cannot be captured, or None."""
    from torch._inductor import config
    from torch._inductor.utils import any_is_symbolic, get_first_incompatible_cudagraph_node
    from torch._inductor.virtualized import V

    graph = V.graph
    gm = getattr(graph, "module", None)
    if isinstance(gm, torch.fx.GraphModule):
        node = get_first_incompatible_cudagraph_node(gm)
        if node is not None:
            reason = f"disabling cudagraphs due to incompatible op {node.target}"
            if stack_trace := node.meta.get("stack_trace"):
                reason = f"{reason} Found from {stack_trace}\n"
            return reason
    if config.triton.cudagraph_skip_dynamic_graphs and any_is_symbolic(*graph.example_inputs):
        return "graph with symbolic shapes inputs and config.triton.cudagraph_skip_dynamic_graphs=True.\n"
    return None


# --- post compile: wrap accel-only graphs ---------------------------------------


class _ForwardBackwardPair:
    """State a training forward shares with its backward (see AccelGraphed)."""

    __slots__ = ("backward_pending",)

    def __init__(self) -> None:
        self.backward_pending = False


def _pair_of(boxed_forward_device_index: Any) -> Optional[_ForwardBackwardPair]:
    # Inductor passes the same BoxedDeviceIndex to the forward and the
    # backward of one graph: the pair's state rides on it.
    if boxed_forward_device_index is None:
        return None
    pair = getattr(boxed_forward_device_index, "_accel_graphs_pair", None)
    if pair is None:
        pair = _ForwardBackwardPair()
        boxed_forward_device_index._accel_graphs_pair = pair
    return pair


def _post_compile(original: Callable[..., None]) -> Callable[..., None]:
    def post_compile(
        example_inputs: Sequence[Any],
        compiled_graph: Any,
        cudagraphs: Any,
        constants: dict[str, Any],
        boxed_forward_device_index: Any,
    ) -> None:
        if not _accel_only(compiled_graph.device_types):
            return original(example_inputs, compiled_graph, cudagraphs, constants, boxed_forward_device_index)
        _graph_accel(compiled_graph, cudagraphs, boxed_forward_device_index)

    post_compile.__doc__ = original.__doc__
    return post_compile


def _graph_accel(compiled_graph: Any, cudagraphs: Any, boxed_forward_device_index: Any) -> None:
    """Wrap ``compiled_graph`` (accel-only, no lowering reason) in AccelGraphed, or record why not."""
    from torch._inductor.cudagraph_utils import (
        format_default_skip_message,
        get_mutation_stack_trace,
        log_cudagraph_skip_and_bump_counter,
    )
    from torch._inductor.utils import BoxedBool

    info = compiled_graph.cudagraph_info
    assert info is not None and compiled_graph.current_callable is not None
    fx_kwargs = compiled_graph.fx_kwargs
    static_input_idxs = tuple(fx_kwargs["static_input_idxs"] or ())
    reason = None
    if info.cudagraph_fail_reasons:
        reason = format_default_skip_message(", ".join(info.cudagraph_fail_reasons))
    else:
        mutated = [i for i in compiled_graph.mutated_input_idxs if i not in set(static_input_idxs)]
        if mutated:
            reason = get_mutation_stack_trace(info.placeholders, mutated)
    if reason is None and _kernels_run_by_interpreter():
        reason = format_default_skip_message(
            "Triton kernels run by Triton's interpreter (TORCH_ACCEL_INDUCTOR=triton on the host runtime), "
            "which a capture cannot record"
        )
    if reason is not None:
        BoxedBool.disable(cudagraphs)
        log_cudagraph_skip_and_bump_counter(reason)
        return
    is_backward = fx_kwargs["is_backward"]
    is_inference = fx_kwargs["is_inference"]
    compiled_graph.current_callable = AccelGraphed(
        compiled_graph.current_callable,
        static_input_idxs=static_input_idxs,
        stack_traces=list(info.stack_traces),
        kind="backward" if is_backward else ("inference" if is_inference else "forward"),
        pair=None if is_inference else _pair_of(boxed_forward_device_index),
    )


def _kernels_run_by_interpreter() -> bool:
    return codegen_config().interpreted


def _kernels_called_directly() -> bool:
    """Whether Inductor's kernels for accel are C++ functions that the wrapper
    calls directly on host memory (the host runtime's C++ kernels)."""
    return codegen_config().kernels == "cpp"


# --- C++ kernels inside a capture (host runtime) --------------------------------
#
# A capture records the work issued to accel: operators, through the
# dispatcher. On the host runtime, the C++ kernels Inductor generates are not
# operators: the generated wrapper calls them directly, with the data
# pointers of accel tensors (host memory), so a capture would neither see nor
# replay them. While a compiled graph is captured, each such kernel of its
# module is therefore called through _C._graph_record_host_call, which records
# the call (the kernel and its arguments, holding the tensors, hence their
# memory) as a step that every replay makes again; nothing runs at capture,
# as for the operators around it.


def _is_cpp_kernel(value: Any) -> bool:
    # Inductor's cpp_pybinding loads each C++ kernel as a builtin function named "kernel".
    return type(value).__name__ == "builtin_function_or_method" and getattr(value, "__name__", "") == "kernel"


def _call_device(args: tuple[Any, ...]) -> int:
    for arg in args:
        if isinstance(arg, torch.Tensor) and arg.device.type == "accel":
            return arg.device.index
    return _C._get_device()


class _HostKernelCalls:
    """While capturing, the C++ kernels of a compiled module are recorded as
    host calls of the capture instead of running."""

    def __init__(self, model: Callable[..., Any]) -> None:
        function = getattr(model, "__func__", model)
        self.namespace: dict[str, Any] = getattr(function, "__globals__", {})
        self.kernels = {name: v for name, v in self.namespace.items() if _is_cpp_kernel(v)}

    @staticmethod
    def _recorded(kernel: Callable[..., None]) -> Callable[..., None]:
        def record_call(*args: Any) -> None:
            _C._graph_record_host_call(kernel, args, _call_device(args))

        return record_call

    def __enter__(self) -> "_HostKernelCalls":
        for name, kernel in self.kernels.items():
            self.namespace[name] = self._recorded(kernel)
        return self

    def __exit__(self, *exc: Any) -> None:
        self.namespace.update(self.kernels)


# --- the graph wrapper ----------------------------------------------------------

def _overwritten_message(stack_trace: Optional[str]) -> str:
    where = stack_trace.strip() if stack_trace else "[Could not find stack trace]"
    return (
        "Error: accessing an accel tensor output of torch.compile(mode=\"reduce-overhead\") that has been "
        f"overwritten by a subsequent run of its graph. Stack trace: {where}. To prevent overwriting, clone "
        "the tensor outside of torch.compile() or call torch.compiler.cudagraph_mark_step_begin() before each "
        "model invocation."
    )


_FREED_MESSAGE = (
    "Error: accessing an accel tensor output of torch.compile(mode=\"reduce-overhead\") whose graph has been "
    "freed (torch._dynamo.reset() or the compiled function deleted); clone outputs you keep beyond their graph."
)


_mark_step_box: Any = None


def _mark_step() -> int:
    """torch.compiler.cudagraph_mark_step_begin()'s counter (it changes at each call)."""
    global _mark_step_box
    if _mark_step_box is None:
        from torch._inductor.cudagraph_trees import MarkStepBox

        _mark_step_box = MarkStepBox
    return _mark_step_box.mark_step_counter


def _alias_of_memory(t: torch.Tensor) -> torch.Tensor:
    """``t`` over a storage of its own, not owning ``t``'s memory.

    A static input may be the output of another graph (a forward's output
    saved for the backward), whose storage that graph invalidates when it
    replays again; the capture must go on reading the memory.
    """
    storage = t.untyped_storage()
    alias = torch._C._construct_storage_from_data_pointer(storage.data_ptr(), t.device, storage.nbytes())
    return torch.empty((0,), dtype=t.dtype, device=t.device).set_(alias, t.storage_offset(), t.size(), t.stride())


# One capture stream per accel device, made on first use (as the trees keep
# one per device): the caching allocator hands a block freed on one stream
# only to allocations on that stream, so the captures of a device share
# memory only if they share a stream.
_capture_streams: dict[int, torch.Stream] = {}


def _capture_stream(device: torch.device) -> torch.Stream:
    stream = _capture_streams.get(device.index)
    if stream is None:
        stream = _capture_streams[device.index] = accel_streams.Stream(device=device)
    return stream


@contextlib.contextmanager
def _library_workspaces_cleared() -> Iterator[None]:
    """Clears the target libraries' per-stream workspaces before and after a
    capture, as Inductor's cudagraph trees clear cuBLAS's around theirs
    (clear_cublas_manager): a capture runs on its own stream, for which a
    library would allocate a workspace inside the graph's pool and keep it
    for work outside the graph (see Runtime::clearLibraryWorkspaces)."""
    _C._clear_library_workspaces()
    try:
        yield
    finally:
        _C._clear_library_workspaces()


class _Capture:
    """One capture of a compiled graph, for one set of integer inputs and static input addresses."""

    def __init__(self, owner: "AccelGraphed", inputs: list[Any]) -> None:
        from torch._dynamo import utils as dynamo_utils

        static = owner.static_input_idxs
        self.copy_idxs = [i for i, x in enumerate(inputs) if isinstance(x, torch.Tensor) and i not in static]
        self.static_idxs = [i for i in sorted(static) if isinstance(inputs[i], torch.Tensor)]
        self.static_ptrs = {i: inputs[i].data_ptr() for i in self.static_idxs}
        self.static_inputs: list[Any] = []
        for i, x in enumerate(inputs):
            if i in self.copy_idxs:
                buffer = torch.empty_strided(x.size(), x.stride(), dtype=x.dtype, device=x.device)
                buffer.copy_(x)
                self.static_inputs.append(buffer)
            elif isinstance(x, torch.Tensor):
                self.static_inputs.append(_alias_of_memory(x))
            else:
                self.static_inputs.append(x)
        self.device = next(x.device for x in self.static_inputs if isinstance(x, torch.Tensor))

        # On the model's device, whichever is current (as the trees capture
        # under torch.cuda.device): its graph, its capture stream, and the
        # synchronisation and empty_cache of torch.accel.graph's entry.
        with accel_device(self.device):
            synchronize(self.device)
            self.graph = accel_graphs.Graph()
            host_kernels = _HostKernelCalls(owner.model) if _kernels_called_directly() else None
            with (
                dynamo_utils.preserve_rng_state(),
                host_kernels or contextlib.nullcontext(),
                _library_workspaces_cleared(),
                accel_graphs.graph(self.graph, stream=_capture_stream(self.device), capture_error_mode="thread_local"),
            ):
                outputs = owner.model(list(self.static_inputs))
        if not isinstance(outputs, (list, tuple)):
            outputs = (outputs,)
        self.call = self._plan(outputs, owner.stack_traces)
        self.replayed_at_step = _mark_step()

    def _plan(self, outputs: Sequence[Any], traces: list[Optional[str]]) -> Any:
        """How a replay copies the inputs and returns each output
        (_C._CapturedCall): a static input's alias, or a value, as captured;
        other tensors (the graph's memory, or an alias of an input buffer)
        over storages made at each replay, which its next replay invalidates."""
        static_storages = {self.static_inputs[i].untyped_storage().data_ptr() for i in self.static_idxs}
        # (data pointer, bytes, error message once overwritten) of each storage handed out.
        storages: list[tuple[int, int, str]] = []
        index: dict[int, int] = {}
        graph_memory: list[int] = []
        for k, out in enumerate(outputs):
            if not isinstance(out, torch.Tensor) or out.untyped_storage().data_ptr() in static_storages:
                graph_memory.append(-1)
                continue
            storage = out.untyped_storage()
            if storage.data_ptr() not in index:
                index[storage.data_ptr()] = len(storages)
                trace = traces[k] if k < len(traces) else None
                storages.append((storage.data_ptr(), storage.nbytes(), _overwritten_message(trace)))
            graph_memory.append(index[storage.data_ptr()])
        return _C._CapturedCall(
            [(i, self.static_ptrs[i]) for i in self.static_idxs],
            [(self.static_inputs[i], i) for i in self.copy_idxs],
            list(outputs),
            graph_memory,
            storages,
            self.device,
            _FREED_MESSAGE,
        )

    def matches(self, inputs: list[Any]) -> bool:
        """Whether the static inputs are where they were at capture."""
        return self.call.matches(inputs)

    def outputs_alive(self) -> bool:
        return self.call.outputs_alive()

    def invalidate_outputs(self, message: Optional[str] = None) -> None:
        self.call.invalidate_outputs(message)

    def replay(self, inputs: list[Any]) -> list[Any]:
        # The captured static inputs do not own their memory (_alias_of_memory):
        # the caller's list keeps it alive until the replay is done.
        results = self.call.replay(self.graph, inputs)
        inputs.clear()
        self.replayed_at_step = _mark_step()
        return results


class AccelGraphed:
    """A compiled graph replayed as accel graphs: one capture per set of
    integer inputs (sizes) and addresses of its static inputs."""

    def __init__(
        self,
        model: Callable[[list[Any]], Any],
        *,
        static_input_idxs: Sequence[int],
        stack_traces: list[Optional[str]],
        kind: str,
        pair: Optional[_ForwardBackwardPair],
    ) -> None:
        from torch._dynamo.utils import counters
        from torch._inductor import config

        self.model = model
        self.static_input_idxs = frozenset(static_input_idxs)
        self.stack_traces = stack_traces
        self.kind = kind  # "inference", "forward" or "backward"
        self.pair = pair
        self.warmed_up: set[tuple[int, ...]] = set()
        # Where the integer inputs are (the key of the captures), found at the first call.
        self.int_idxs: Optional[list[int]] = None
        # By sizes: the captures, the latest last.
        self.captures: dict[tuple[int, ...], list[_Capture]] = {}
        self.recapture_limit = config.triton.cudagraph_unexpected_rerecord_limit
        self.warned: set[str] = set()
        self.capture_failed = False
        self.counters = counters  # looked up at each count: Dynamo may replace counters["inductor"]

    def __call__(self, inputs: list[Any]) -> Any:
        if self.capture_failed:
            return self.model(inputs)
        if self.int_idxs is None:
            # A compiled graph takes its integer inputs (sizes) at the same places at each call.
            self.int_idxs = [i for i, x in enumerate(inputs) if isinstance(x, int)]
        key = tuple([inputs[i] for i in self.int_idxs]) if self.int_idxs else ()
        captures = self.captures.get(key)
        capture = None
        if captures:
            # The latest capture first: static inputs rarely move.
            capture = captures[-1]
            if not capture.matches(inputs):
                capture = next((c for c in reversed(captures) if c.matches(inputs)), None)
        if capture is None:
            if key not in self.warmed_up:
                self.warmed_up.add(key)
                return self._run_compiled(inputs)
            if captures and len(captures) >= self.recapture_limit:
                return self._run_unreplayed(
                    inputs,
                    "its static inputs (parameters) moved more often than "
                    "torch._inductor.config.triton.cudagraph_unexpected_rerecord_limit allows",
                )
            if captures is None:
                from torch._inductor.cudagraph_utils import maybe_warning_due_to_dynamic_shape

                maybe_warning_due_to_dynamic_shape(self.captures, key)
                captures = self.captures[key] = []
            try:
                capture = _Capture(self, inputs)
            except Exception as error:  # noqa: BLE001 - reported, and the graph runs as compiled
                return self._give_up(inputs, error)
            captures.append(capture)
            self.counters["inductor"][CAPTURE_COUNTER] += 1
        elif capture.outputs_alive() and not self._may_invalidate(capture):
            return self._run_unreplayed(
                inputs,
                "the outputs of its previous replay are still in use (a pending backward, or gradients still held)",
            )
        if self.pair is not None:
            self.pair.backward_pending = self.kind == "forward"
        self.counters["inductor"][REPLAY_COUNTER] += 1
        return capture.replay(inputs)

    def _give_up(self, inputs: list[Any], error: Exception) -> Any:
        """The capture failed (something in the graph cannot be captured): the
        graph runs as compiled from now on, and the skip is recorded as
        Inductor records its own (cudagraph_skips, the cudagraphs log)."""
        from torch._inductor.cudagraph_utils import format_default_skip_message, log_cudagraph_skip_and_bump_counter

        self.capture_failed = True
        self.captures.clear()
        message = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        log_cudagraph_skip_and_bump_counter(
            format_default_skip_message(f"an error while capturing the accel graph ({type(error).__name__}: {message})")
        )
        return self.model(inputs)

    def _may_invalidate(self, capture: _Capture) -> bool:
        """Whether outputs of ``capture``'s last replay, still referenced, may be overwritten now."""
        if capture.replayed_at_step != _mark_step():
            return True  # torch.compiler.cudagraph_mark_step_begin() since: a new iteration
        if self.kind == "inference":
            return True  # each invocation is a new iteration, as with the trees
        if self.kind == "forward":
            return self.pair is None or not self.pair.backward_pending
        return False  # a backward's gradients may be accumulated into .grad

    def _run_compiled(self, inputs: list[Any]) -> Any:
        if self.pair is not None and self.kind == "backward":
            self.pair.backward_pending = False
        return self.model(inputs)

    def _run_unreplayed(self, inputs: list[Any], why: str) -> Any:
        self.counters["inductor"][UNREPLAYED_COUNTER] += 1
        if why not in self.warned:
            self.warned.add(why)
            warnings.warn(
                f"accel graphs (mode=\"reduce-overhead\"): a {self.kind} graph ran without replaying because {why}. "
                "Consider running with torch.no_grad() or calling torch.compiler.cudagraph_mark_step_begin() "
                "before each model invocation"
            )
        return self._run_compiled(inputs)


# --- the patches -----------------------------------------------------------------


@patch("torch._inductor.cudagraph_utils.check_lowering_disable_cudagraph")
def lowering_check(original: Callable[..., Optional[str]]) -> None:
    from torch._inductor import cudagraph_utils

    cudagraph_utils.check_lowering_disable_cudagraph = _check_lowering(original)


@patch("torch._inductor.output_code.cudagraph_post_compile", "torch._inductor.output_code.cudagraph_partition_post_compile")
def accel_graphed_post_compile(post_compile: Callable[..., None], partition_post_compile: Callable[..., None]) -> None:
    from torch._inductor import output_code

    output_code.cudagraph_post_compile = _post_compile(post_compile)
    output_code.cudagraph_partition_post_compile = _post_compile(partition_post_compile)


# Adapts torch._inductor.output_code.CompiledFxGraph.post_compile, so that an
# accel graph that runs without accel graphs says why. With
# triton.cudagraphs (mode="reduce-overhead"), Inductor records why a graph
# cannot be captured (check_lowering_disable_cudagraph, before accel's
# lowering_check, accepted exactly one device, of type cuda, and reported
# "multiple devices: device(type='accel', index=0)"), then logs the reason only
# if the graph has a cuda device and otherwise just counts the skip
# (cudagraph_skips). accel graphs get the log line cuda graphs get (artifact
# "cudagraphs", TORCH_LOGS=cudagraphs), on fresh compiles and cache hits
# alike; the count stays Inductor's.


@patch("torch._inductor.output_code.CompiledFxGraph.post_compile")
def skip_message(original: Callable[..., None]) -> None:
    from torch._inductor import config
    from torch._inductor.cudagraph_utils import cudagraphs_log
    from torch._inductor.output_code import CompiledFxGraph

    def post_compile(self: Any, example_inputs: Any, constants: Any, graph_kwargs: Any) -> None:
        if (
            config.triton.cudagraphs
            and self.disabled_cudagraphs_reason
            and DEVICE_TYPE in self.device_types
            and "cuda" not in self.device_types
        ):
            cudagraphs_log.warning(self.disabled_cudagraphs_reason)
        return original(self, example_inputs, constants, graph_kwargs)

    post_compile.__doc__ = original.__doc__
    CompiledFxGraph.post_compile = post_compile  # type: ignore[method-assign]
