"""Accel graphs under torch.compile(mode="reduce-overhead") and
torch.accel.make_graphed_callables.

reduce-overhead: accel-only graphs are captured as accel graphs (no
cudagraph_skips), after a warm-up call, once per set of sizes; parameters are
read in place and other inputs copied; results equal the target's compiled
results (inference) and accel's default compile (training, same kernels),
bitwise; outputs of a replay are overwritten by the next one, as with cuda's
CUDA graph trees.

make_graphed_callables: a module and a function, forward and backward, give
the gradients eager mode gives, bitwise on the host runtime (see assert_same).
"""

import copy

import pytest
import torch
from torch import nn
from torch._dynamo.utils import counters

import torch_accel
from torch_accel._inductor import graphs as _inductor_graphs

DEVICE = "accel"
CAPTURES, REPLAYS, NOT_REPLAYED = (
    _inductor_graphs.CAPTURE_COUNTER,
    _inductor_graphs.REPLAY_COUNTER,
    _inductor_graphs.UNREPLAYED_COUNTER,
)


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    counters.clear()
    yield
    torch._dynamo.reset()


def assert_same(got, want):
    """Bitwise on the host runtime, where a replay reruns the very kernels;
    close on the CUDA runtime, where cuBLAS may pick other algorithms inside a
    capture (its workspace there is the capture stream's)."""
    got, want = got.detach().cpu(), want.detach().cpu()
    if torch_accel.runtime() == "host":
        assert torch.equal(got, want)
    else:
        torch.testing.assert_close(got, want)


def inductor_count(name):
    return counters["inductor"][name]


def mlp(seed=0):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 8), nn.Tanh())


def batches(n, *shape, seed=1):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(*shape, generator=g) for _ in range(n)]


# --- reduce-overhead: inference ---------------------------------------------------------


def test_inference_is_captured_without_skips_and_matches_target_bitwise(target):
    model = mlp()
    on_accel = torch.compile(copy.deepcopy(model).to(DEVICE), mode="reduce-overhead")
    with torch.no_grad():
        results = [on_accel(x.to(DEVICE)).cpu() for x in batches(5, 4, 16)]
    assert inductor_count("cudagraph_skips") == 0
    assert inductor_count(CAPTURES) == 1
    assert inductor_count(REPLAYS) == 4  # the first call warms up, the second captures and replays
    on_target = torch.compile(copy.deepcopy(model).to(target))
    with torch.no_grad():
        expected = [on_target(x.to(target)).cpu() for x in batches(5, 4, 16)]
    for got, want in zip(results, expected):
        assert torch.equal(got, want)


def test_convolutions_are_captured_with_the_targets_layout(target):
    # Inductor lays convolutions out for the device (channels-last on cpu) and
    # asserts their results' strides; a capture must hand out what the target's
    # kernel gives, not what the Meta kernel guesses for meta tensors.
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU(), nn.Conv2d(8, 4, 3))
    on_accel = torch.compile(copy.deepcopy(model).to(DEVICE), mode="reduce-overhead")
    on_target = torch.compile(copy.deepcopy(model).to(target))
    with torch.no_grad():
        for x in batches(3, 2, 3, 10, 10):
            assert_same(on_accel(x.to(DEVICE)), on_target(x.to(target)))
    assert inductor_count("cudagraph_skips") == 0
    assert inductor_count(CAPTURES) == 1


def test_first_call_warms_up_then_second_captures():
    f = torch.compile(lambda x: x * 2 + 1, mode="reduce-overhead")
    x = torch.randn(8, device=DEVICE)
    assert torch.equal(f(x).cpu(), (x * 2 + 1).cpu())
    assert inductor_count(CAPTURES) == 0
    assert torch.equal(f(x).cpu(), (x * 2 + 1).cpu())
    assert inductor_count(CAPTURES) == 1


def test_parameters_are_read_in_place_and_other_inputs_copied():
    model = mlp().to(DEVICE)
    compiled = torch.compile(model, mode="reduce-overhead")
    reference = torch.compile(model)  # the same parameters, compiled without graphs
    xs = [x.to(DEVICE) for x in batches(4, 4, 16)]
    with torch.no_grad():
        for x in xs[:2]:
            compiled(x)
        assert inductor_count(CAPTURES) == 1
        # A parameter changed in place: the graph reads the new values.
        model[0].weight.mul_(0.5)
        got = compiled(xs[2]).clone()
        assert torch.equal(got.cpu(), reference(xs[2]).cpu())
        # A new input tensor (other memory) is copied in: the result is for it.
        got = compiled(xs[3]).clone()
        assert torch.equal(got.cpu(), reference(xs[3]).cpu())
    assert inductor_count(CAPTURES) == 1


def test_replay_reads_inputs_and_parameters_written_in_place(target):
    # A replay calls the target's kernels on views of the graph's memory made
    # once: writes into that memory between replays (the same input tensor
    # refilled, parameters updated in place) are what the next replay reads.
    model = mlp()
    on_accel = copy.deepcopy(model).to(DEVICE)
    compiled = torch.compile(on_accel, mode="reduce-overhead")
    on_target = copy.deepcopy(model).to(target)
    reference = torch.compile(on_target)
    x = torch.zeros(4, 16, device=DEVICE)
    x_target = torch.zeros(4, 16, device=target)
    with torch.no_grad():
        for step, batch in enumerate(batches(5, 4, 16)):
            x.copy_(batch.to(DEVICE))
            x_target.copy_(batch.to(target))
            if step >= 3:
                for p, q in zip(on_accel.parameters(), on_target.parameters()):
                    p.mul_(0.5)
                    q.mul_(0.5)
            assert torch.equal(compiled(x).cpu(), reference(x_target).cpu())
    assert inductor_count(CAPTURES) == 1
    assert inductor_count(REPLAYS) == 4


def test_outputs_still_referenced_when_the_graph_is_freed_say_so():
    f = torch.compile(lambda x: x * 3 + 1, mode="reduce-overhead")
    x = torch.randn(6, device=DEVICE)
    f(x)
    kept = f(x)  # captured and replayed
    assert torch.equal(kept.cpu(), (x * 3 + 1).cpu())
    del f
    torch._dynamo.reset()
    import gc

    gc.collect()
    with pytest.raises(RuntimeError, match="whose graph has been freed"):
        kept.cpu()


def test_output_of_a_previous_replay_is_overwritten_and_says_so():
    f = torch.compile(lambda x: x * 3 + 1, mode="reduce-overhead")
    xs = [torch.randn(6, device=DEVICE) for _ in range(4)]
    f(xs[0])
    f(xs[1])  # captured and replayed
    kept = f(xs[2])
    cloned = kept.clone()
    latest = f(xs[3])
    with pytest.raises(RuntimeError, match="overwritten by a subsequent run"):
        kept.cpu()
    assert torch.equal(cloned.cpu(), (xs[2] * 3 + 1).cpu())
    assert torch.equal(latest.cpu(), (xs[3] * 3 + 1).cpu())


def test_new_sizes_are_captured_again(target):
    def f(x):
        return torch.relu(x @ x.T).sum(1)

    compiled = torch.compile(f, mode="reduce-overhead", dynamic=True)
    on_target = torch.compile(f, dynamic=True)
    for n in (4, 4, 6, 6, 6, 4):
        x = torch.randn(n, 5)
        assert torch.equal(compiled(x.to(DEVICE)).cpu(), on_target(x.to(target)).cpu())
    assert inductor_count(CAPTURES) == 2
    assert inductor_count("cudagraph_skips") == 0


def test_model_on_another_device_than_the_current_one_is_captured_on_its_own(two_devices):
    # The capture runs on the model's device (its stream, under its guard),
    # whichever device is current: captured on the current device's stream,
    # the graph would miss the model's work and replays would return stale
    # outputs.
    model = mlp().to("accel:1")
    compiled = torch.compile(model, mode="reduce-overhead")
    reference = torch.compile(model)  # the same parameters, compiled without graphs
    with torch.no_grad(), torch.accel.device(0):
        for x in batches(4, 4, 16):
            x = x.to("accel:1")
            got = compiled(x)
            assert got.device == torch.device("accel:1")
            assert_same(got, reference(x))
        assert torch.accel.current_device() == 0
        assert torch.accel.current_stream(0) == torch.accel.default_stream(0)
        assert torch.accel.current_stream(1) == torch.accel.default_stream(1)
    assert inductor_count("cudagraph_skips") == 0
    assert inductor_count(CAPTURES) == 1
    assert inductor_count(REPLAYS) == 3


def test_library_workspaces_are_cleared_around_each_capture(monkeypatch):
    # The runtime's hook (CUDA: cuBLAS's workspaces, as Inductor's trees clear
    # them around their captures) runs before the capture begins and after it
    # ends, outside it.
    events = []
    begin, end = torch.accel.Graph.capture_begin, torch.accel.Graph.capture_end

    def clear():
        events.append(("clear", torch.accel.is_current_stream_capturing()))

    def capture_begin(self, *args, **kwargs):
        events.append(("begin", torch.accel.is_current_stream_capturing()))
        begin(self, *args, **kwargs)

    def capture_end(self):
        end(self)
        events.append(("end", torch.accel.is_current_stream_capturing()))

    monkeypatch.setattr(torch_accel._C, "_clear_library_workspaces", clear)
    monkeypatch.setattr(torch.accel.Graph, "capture_begin", capture_begin)
    monkeypatch.setattr(torch.accel.Graph, "capture_end", capture_end)
    f = torch.compile(lambda x, w: torch.relu(x @ w), mode="reduce-overhead")
    x, w = torch.randn(8, 8, device=DEVICE), torch.randn(8, 8, device=DEVICE)
    for _ in range(4):
        assert_same(f(x, w), torch.relu(x @ w))
    assert inductor_count(CAPTURES) == 1
    assert events == [("clear", False), ("begin", False), ("end", False), ("clear", False)]


# A custom operator that reads device data (.item()), which a capture forbids.
_PEEK_LIBRARY = None


def _peek():
    global _PEEK_LIBRARY
    if _PEEK_LIBRARY is None:
        _PEEK_LIBRARY = torch.library.Library("accel_graphs_test", "DEF")  # noqa: TOR901
        _PEEK_LIBRARY.define("peek(Tensor x) -> Tensor")
        _PEEK_LIBRARY.impl("peek", lambda x: x * (1.0 if x.sum().item() < 1e30 else 2.0), "CompositeExplicitAutograd")
        _PEEK_LIBRARY.impl("peek", lambda x: torch.empty_like(x), "Meta")
    return torch.ops.accel_graphs_test.peek


def test_a_capture_that_an_operation_invalidates_leaves_nothing_behind():
    peek = _peek()
    f = torch.compile(lambda x: peek(x + 1) * 2, mode="reduce-overhead")
    x = torch.randn(64, device=DEVICE)
    for _ in range(3):
        assert torch.equal(f(x).cpu(), ((x + 1) * 2).cpu())
    assert inductor_count("cudagraph_skips") == 1  # the capture failed, and the graph runs as compiled
    assert inductor_count(CAPTURES) == 0
    assert not torch.accel.is_current_stream_capturing()
    assert torch.accel.current_stream() == torch.accel.default_stream()
    # Another graph captures and replays as ever.
    g = torch.compile(lambda x: x * 3 - 1, mode="reduce-overhead")
    for _ in range(3):
        assert torch.equal(g(x).cpu(), (x * 3 - 1).cpu())
    assert inductor_count(CAPTURES) == 1


def test_mutated_input_is_skipped_with_cudas_reason():
    def f(x):
        x.add_(1)
        return x * 2

    compiled = torch.compile(f, mode="reduce-overhead")
    x = torch.randn(5, device=DEVICE)
    expected = x.clone()
    for _ in range(3):
        result = compiled(x)
        expected.add_(1)
        assert torch.equal(x.cpu(), expected.cpu())
        assert torch.equal(result.cpu(), (expected * 2).cpu())
    assert inductor_count("cudagraph_skips") == 1
    assert inductor_count(CAPTURES) == 0


def test_graph_with_cpu_tensor_is_skipped_as_on_cuda():
    f = torch.compile(lambda x, y: x + y.to(DEVICE), mode="reduce-overhead")
    x, y = torch.randn(3, device=DEVICE), torch.randn(3)
    for _ in range(2):
        assert torch.equal(f(x, y).cpu(), x.cpu() + y)
    assert inductor_count("cudagraph_skips") >= 1
    assert inductor_count(CAPTURES) == 0


# --- reduce-overhead: training -----------------------------------------------------------


def train(model, compile_mode, steps):
    step_model = torch.compile(model, mode=compile_mode) if compile_mode else model
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    losses = []
    for x in batches(steps, 4, 16):
        opt.zero_grad(set_to_none=True)
        loss = step_model(x.to(DEVICE)).square().mean()
        loss.backward()
        opt.step()
        losses.append(loss.detach().cpu())
    return losses, [p.detach().cpu() for p in model.parameters()] + [b.cpu() for b in model.buffers()]


@pytest.mark.parametrize("batch_norm", [False, True], ids=["mlp", "batchnorm"])
def test_training_replays_forward_and_backward_bitwise(batch_norm):
    def make():
        model = mlp()
        if batch_norm:
            model = nn.Sequential(model[0], nn.BatchNorm1d(32), *model[1:])
        return model.to(DEVICE)

    losses, state = train(make(), "reduce-overhead", 5)
    assert inductor_count("cudagraph_skips") == 0
    assert inductor_count(CAPTURES) == 2  # the forward graph and the backward graph
    assert inductor_count(NOT_REPLAYED) == 0
    torch._dynamo.reset()
    ref_losses, ref_state = train(make(), None, 5)
    ref_compiled_losses, ref_compiled_state = train(make(), "default", 5)
    for got, want in zip(losses + state, ref_compiled_losses + ref_compiled_state):
        assert_same(got, want)
    for got, want in zip(losses + state, ref_losses + ref_state):
        torch.testing.assert_close(got, want)


def test_second_forward_before_backward_runs_without_replaying():
    model = mlp().to(DEVICE)
    compiled = torch.compile(model, mode="reduce-overhead")
    xs = [x.to(DEVICE) for x in batches(4, 4, 16)]
    for x in xs[:2]:
        compiled(x).sum().backward()
    model.zero_grad(set_to_none=True)
    # Two forwards, then both backwards: the second forward must not overwrite
    # what the first saved for its backward.
    with pytest.warns(UserWarning, match="without replaying"):
        a = compiled(xs[2]).sum()
        b = compiled(xs[3]).sum()
    (a + b).backward()
    got = [p.grad.clone() for p in model.parameters()]
    assert inductor_count(NOT_REPLAYED) >= 1
    model.zero_grad(set_to_none=True)
    (model(xs[2]).sum() + model(xs[3]).sum()).backward()
    for g, p in zip(got, model.parameters()):
        torch.testing.assert_close(g, p.grad)


def test_mark_step_begin_starts_a_new_iteration():
    model = mlp().to(DEVICE)
    compiled = torch.compile(model, mode="reduce-overhead")
    xs = [x.to(DEVICE) for x in batches(3, 4, 16)]
    for x in xs[:2]:
        compiled(x).sum().backward()
    replays = inductor_count(REPLAYS)
    torch.compiler.cudagraph_mark_step_begin()
    out = compiled(xs[2])
    assert inductor_count(REPLAYS) == replays + 1
    assert inductor_count(NOT_REPLAYED) == 0
    torch.testing.assert_close(out.detach().cpu(), model(xs[2]).detach().cpu())


# --- make_graphed_callables ---------------------------------------------------------------


def test_make_graphed_callables_module_forward_backward_bitwise():
    model, reference = mlp().to(DEVICE), mlp().to(DEVICE)
    sample = torch.randn(4, 16, device=DEVICE, requires_grad=True)
    graphed = torch.accel.make_graphed_callables(model, (sample,))
    assert graphed is model
    opt, ref_opt = (torch.optim.SGD(m.parameters(), lr=0.1) for m in (model, reference))
    for x in batches(3, 4, 16):
        x = x.to(DEVICE)
        inputs = [x.clone().requires_grad_() for _ in range(2)]
        for m, o, inp in ((graphed, opt, inputs[0]), (reference, ref_opt, inputs[1])):
            o.zero_grad(set_to_none=True)
            m(inp).square().sum().backward()
        assert_same(inputs[0].grad, inputs[1].grad)
        for p, q in zip(model.parameters(), reference.parameters()):
            assert_same(p.grad, q.grad)
        opt.step()
        ref_opt.step()
    for p, q in zip(model.parameters(), reference.parameters()):
        assert_same(p, q)
    # Outside the training mode it was captured in, the module runs its original forward.
    model.eval()
    x = torch.randn(2, 16, device=DEVICE)
    assert torch.equal(model(x).cpu(), reference.eval()(x).cpu())


def test_make_graphed_callables_function_and_tuple():
    def f(a, b):
        return (a * b).sin(), a + b.exp()

    def g(c):
        return c.tanh() * 3

    a, b = (torch.randn(5, device=DEVICE, requires_grad=True) for _ in range(2))
    c = torch.randn(5, device=DEVICE, requires_grad=True)
    gf, gg = torch.accel.make_graphed_callables((f, g), ((a, b), (c,)))
    for seed in range(3):
        torch.manual_seed(seed)
        x, y = (torch.randn(5, device=DEVICE, requires_grad=True) for _ in range(2))
        x2, y2 = (t.detach().clone().requires_grad_() for t in (x, y))
        p, q = gf(x, y)
        r = gg(p)
        (r.sum() + q.sum()).backward()
        p2, q2 = f(x2, y2)
        r2 = g(p2)
        (r2.sum() + q2.sum()).backward()
        for got, want in ((r, r2), (q, q2), (x.grad, x2.grad), (y.grad, y2.grad)):
            assert_same(got, want)


def test_make_graphed_callables_into_a_given_pool_without_warmup():
    def f(a):
        return a * a + 1

    a = torch.randn(6, device=DEVICE, requires_grad=True)
    graphed = torch.accel.make_graphed_callables(f, (a,), num_warmup_iters=0, pool=torch.accel.graph_pool_handle())
    x = torch.randn(6, device=DEVICE, requires_grad=True)
    out = graphed(x)
    out.sum().backward()
    assert_same(out, x * x + 1)
    assert_same(x.grad, 2 * x)


def test_make_graphed_callables_rejects_what_cuda_rejects():
    model = mlp().to(DEVICE)
    model.register_forward_hook(lambda *args: None)
    with pytest.raises(AssertionError, match="hooks"):
        torch.accel.make_graphed_callables(model, (torch.randn(4, 16, device=DEVICE),))
    with pytest.raises(ValueError, match="accel tensors"):
        torch.accel.make_graphed_callables(lambda x: x * 2, (torch.randn(3),))


def test_a_failed_capture_is_recorded_and_the_graph_runs_as_compiled(monkeypatch):
    def refuse(self, *args, **kwargs):
        raise RuntimeError("accel: this capture cannot begin")

    monkeypatch.setattr(torch.accel.Graph, "capture_begin", refuse)
    f = torch.compile(lambda x: x * 2 + 1, mode="reduce-overhead")
    x = torch.randn(8, device=DEVICE)
    for _ in range(4):
        assert torch.equal(f(x).cpu(), (x * 2 + 1).cpu())
    assert torch.accel.current_stream() == torch.accel.default_stream()  # the capture stream was left
    assert inductor_count("cudagraph_skips") == 1
    assert inductor_count(CAPTURES) == 0
    assert inductor_count(REPLAYS) == 0
