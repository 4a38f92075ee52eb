"""Graph capture on accel (torch.accel.Graph, torch.accel.graph, as torch.cuda's):
capture and replay, static inputs, memory pools, reset, errors, forbidden
operations, RNG, and a captured training step. Runtime-agnostic: on the CUDA
runtime the graphs are CUDA graphs; on the host runtime, recorded work."""

import gc

import pytest
import torch

import torch_accel


@pytest.fixture(autouse=True)
def no_capture_left():
    yield
    # A test that failed mid-capture must not leave the stream capturing.
    assert not torch_accel.is_current_stream_capturing()


def eager_steps(fn, tensors, steps, device):
    r"""Runs ``fn`` ``steps`` times on copies of ``tensors`` on ``device``; returns the copies."""
    copies = [t.to(device, copy=True) for t in tensors]
    for _ in range(steps):
        fn(*copies)
    return copies


def elementwise_matmul_inplace(x, w, acc):
    y = x @ w
    y.add_(1.5)
    z = torch.relu(y) * 2 - torch.sigmoid(y)
    acc.add_(z.sum(0))
    x.mul_(0.5)  # an input updated in place: each replay sees the previous one's
    return z


def test_api_names_mirror_torch_cuda():
    assert torch.accel.Graph is torch_accel.graphs.Graph
    assert torch.accel.AccelGraph is torch.accel.Graph
    assert torch.accel.graph is torch_accel.graphs.graph
    for name in ("capture_begin", "capture_end", "instantiate", "replay", "reset", "pool", "enable_debug_mode", "debug_dump"):
        assert callable(getattr(torch.accel.Graph, name)), name
    assert not torch.accel.is_current_stream_capturing()


def test_capture_records_without_running_and_replay_matches_eager(target):
    torch.manual_seed(0)
    x = torch.randn(8, 16).to("accel")
    w = torch.randn(16, 4).to("accel")
    acc = torch.zeros(4, device="accel")
    start = [x.cpu(), w.cpu(), acc.cpu()]

    g = torch.accel.Graph()
    with torch.accel.graph(g):
        assert torch.accel.is_current_stream_capturing()
        z = elementwise_matmul_inplace(x, w, acc)
    assert not torch.accel.is_current_stream_capturing()
    # Nothing ran during the capture: in-place updates wait for replay.
    assert torch.equal(x.cpu(), start[0])
    assert torch.equal(acc.cpu(), start[2])
    assert z.shape == (8, 4) and z.device.type == "accel"

    for steps in (1, 2, 3):
        g.replay()
        ex, _, eacc = eager_steps(elementwise_matmul_inplace, start, steps, target)
        assert torch.equal(x.cpu(), ex.cpu())
        assert torch.equal(acc.cpu(), eacc.cpu())
    # The output holds the last replay's result.
    ex = start[0].to(target) * 0.5**2
    ez = elementwise_matmul_inplace(ex, start[1].to(target), torch.zeros(4, device=target))
    assert torch.equal(z.cpu(), ez.cpu())


def test_static_input_pattern(target):
    static_in = torch.zeros(5, 3, device="accel")
    weight = torch.randn(3, 3).to("accel")
    g = torch.accel.Graph()
    with torch.accel.graph(g):
        static_out = torch.tanh(static_in @ weight).neg()
    for i in range(3):
        data = torch.randn(5, 3) + i
        static_in.copy_(data.to("accel"))
        g.replay()
        expected = torch.tanh(data.to(target) @ weight.to(target)).neg()
        assert torch.equal(static_out.cpu(), expected.cpu())


def test_replay_reads_the_memory_a_storage_holds_now(target):
    # Replays call the target's kernels on views made once over the graph's
    # memory; a storage given new memory after capture (Storage.resize_) is
    # what later replays read and write, as the operators would in eager.
    a = torch.randn(4, 3).to("accel")
    w = torch.randn(3, 5).to("accel")
    g = torch.accel.Graph()
    with torch.accel.graph(g):
        out = torch.relu(a @ w)  # a fresh result copied into the graph's memory
        torch.mm(a, w, out=out)  # an out= call on it
        out.add_(a.sum())
    g.replay()
    a_cpu, w_cpu = a.cpu(), w.cpu()
    expected = torch.mm(a_cpu, w_cpu) + a_cpu.sum()
    assert torch.equal(out.cpu(), expected)
    storage = a.untyped_storage()
    nbytes = storage.nbytes()
    storage.resize_(0)
    storage.resize_(nbytes)
    data = torch.randn(4, 3)
    a.copy_(data.to("accel"))
    g.replay()
    on_target = data.to(target)
    expected = torch.mm(on_target, w.to(target)) + on_target.sum()
    assert torch.equal(out.cpu(), expected.cpu())


def test_replay_on_default_stream_and_views():
    x = torch.arange(12.0, device="accel")
    g = torch.accel.Graph()
    with torch.accel.graph(g):
        view = x.view(3, 4).t()  # views need no work
        out = view.contiguous() * 3
        x[:4].add_(1)  # in place through a view
    g.replay()  # on the default stream: allowed, as on CUDA
    torch.accel.synchronize()
    expected_x = torch.arange(12.0)
    expected_x[:4] += 1
    assert torch.equal(x.cpu(), expected_x)
    assert torch.equal(out.cpu(), torch.arange(12.0).view(3, 4).t().contiguous() * 3)


def test_pool_sharing_between_graphs():
    a = torch.ones(16, device="accel")
    g1 = torch.accel.Graph()
    with torch.accel.graph(g1):
        b = a * 2
    g2 = torch.accel.Graph()
    with torch.accel.graph(g2, pool=g1.pool()):
        c = b + 1
    assert g2.pool() == g1.pool()
    handle = torch.accel.graph_pool_handle()
    assert handle != g1.pool() and handle != torch.accel.graph_pool_handle()
    g3, g4 = torch.accel.Graph(), torch.accel.Graph()
    with torch.accel.graph(g3, pool=handle):
        d = c * c
    with torch.accel.graph(g4, pool=handle):
        e = d - a
    assert g3.pool() == g4.pool() == handle
    a.fill_(3.0)
    for g in (g1, g2, g3, g4):  # replayed in capture order, as pool sharing requires
        g.replay()
    assert torch.equal(e.cpu(), torch.full((16,), 46.0))  # ((3 * 2 + 1) ** 2) - 3


def test_memory_stays_with_the_graph_until_reset():
    gc.collect()
    torch.accel.synchronize()
    torch.accel.empty_cache()
    reserved_before = torch.accel.memory_reserved()
    allocated_before = torch.accel.memory_allocated()
    x = torch.ones(256, 256, device="accel")
    g = torch.accel.Graph()
    with torch.accel.graph(g):
        y = x * 2
        assert torch.accel.memory_allocated() >= allocated_before + 2 * x.nbytes
        z = y + 1
    del y  # freed in capture, still used by the graph
    reserved_captured = torch.accel.memory_reserved()
    assert reserved_captured >= reserved_before + 2 * x.nbytes
    del z
    gc.collect()
    torch.accel.empty_cache()
    # The graph's memory stays reserved while it may replay.
    assert torch.accel.memory_reserved() >= reserved_before + 2 * x.nbytes
    g.replay()
    g.reset()
    del x
    gc.collect()
    torch.accel.empty_cache()
    assert torch.accel.memory_reserved() <= reserved_before
    with pytest.raises(RuntimeError, match="without a preceding successful capture"):
        g.replay()


def test_reset_allows_a_new_capture():
    x = torch.ones(4, device="accel")
    g = torch.accel.Graph()
    with torch.accel.graph(g):
        x.add_(1)
    g.replay()
    g.reset()
    with torch.accel.graph(g):
        x.mul_(3)
    g.replay()
    assert torch.equal(x.cpu(), torch.full((4,), 6.0))


def test_errors_as_cuda():
    g = torch.accel.Graph()
    with pytest.raises(RuntimeError, match="without a preceding successful capture"):
        g.replay()
    with pytest.raises(RuntimeError, match="without a preceding successful capture"):
        g.pool()
    assert torch.accel.current_stream() == torch.accel.default_stream()
    with pytest.raises(RuntimeError, match="accel graphs must be captured on a non-default stream"):
        g.capture_begin()
    assert not torch.accel.is_current_stream_capturing()
    with pytest.raises(RuntimeError, match="Unknown capture error mode"):
        with torch.accel.stream(torch.accel.Stream()):
            g.capture_begin(capture_error_mode="everywhere")
    x = torch.ones(2, device="accel")
    with torch.accel.graph(g):
        x.add_(1)
    with pytest.raises(RuntimeError, match="already owns a captured graph"):
        with torch.accel.graph(g):
            pass


@pytest.mark.parametrize("mode", ["global", "thread_local", "relaxed"])
def test_capture_error_modes_capture(mode):
    x = torch.ones(3, device="accel")
    g = torch.accel.Graph()
    with torch.accel.graph(g, capture_error_mode=mode):
        y = x + 1
    g.replay()
    assert torch.equal(y.cpu(), torch.full((3,), 2.0))


def forbidden_operations():
    def wait_outside_event(x):
        event = torch.accel.Event()
        event.record(torch.accel.default_stream())
        torch.accel.current_stream().wait_event(event)

    def synchronize_captured_event(x):
        torch.accel.current_stream().record_event().synchronize()

    host_only = pytest.mark.skipif(
        torch_accel.runtime() == "cuda", reason="CUDA's rules for events in a capture are CUDA's own"
    )
    return [
        pytest.param(lambda x: x.sum().item(), id="item"),
        pytest.param(lambda x: x.cpu(), id="cpu"),
        pytest.param(lambda x: print(x), id="print"),
        pytest.param(lambda x: torch.nonzero(x), id="nonzero-data-dependent"),
        pytest.param(lambda x: bool(x.sum() > 0), id="bool"),
        pytest.param(lambda x: torch.accel.synchronize(), id="device-synchronize"),
        pytest.param(lambda x: torch.accel.current_stream().synchronize(), id="stream-synchronize"),
        pytest.param(synchronize_captured_event, id="event-synchronize", marks=host_only),
        pytest.param(wait_outside_event, id="wait-event-outside-capture", marks=host_only),
    ]


@pytest.mark.parametrize("forbidden", forbidden_operations())
def test_forbidden_operation_invalidates_capture(forbidden):
    x = torch.ones(4, device="accel")
    g = torch.accel.Graph()
    with pytest.raises(RuntimeError, match="capture") as info:
        with torch.accel.graph(g):
            y = x * 2
            forbidden(y)
    # The capture ended with it (capture_end raised) ...
    assert not torch.accel.is_current_stream_capturing()
    if torch_accel.runtime() == "host":
        assert "invalidated" in str(info.value) and "accel" in str(info.value)
    with pytest.raises(RuntimeError, match="without a preceding successful capture"):
        g.replay()
    # ... and a new one works.
    g2 = torch.accel.Graph()
    with torch.accel.graph(g2):
        y = x * 3
    g2.replay()
    assert torch.equal(y.cpu(), torch.full((4,), 3.0))


def settled_memory():
    """(allocated, reserved) bytes of the current device, with the cache emptied."""
    gc.collect()
    torch.accel.synchronize()
    torch.accel.empty_cache()
    return torch.accel.memory_allocated(), torch.accel.memory_reserved()


@pytest.mark.parametrize("forbidden", forbidden_operations())
def test_failed_capture_leaves_nothing_behind(forbidden):
    # On the CUDA runtime, CUDAGraph itself leaves the caching allocator in
    # capture mode with the graph's pool held and the generators in capture
    # mode when cudaStreamEndCapture fails; accel's graph undoes that, and
    # torch.accel.graph restores the stream even though capture_end raises.
    x = torch.ones(4096, device="accel")
    side = torch.accel.Stream()
    with torch.accel.stream(side):
        stream_before = torch.accel.current_stream()
        memory_before = settled_memory()
        g = torch.accel.Graph()
        with pytest.raises(RuntimeError, match="capture"):
            with torch.accel.graph(g):
                y = x * 2
                noise = torch.rand(16, device="accel")
                forbidden(y)
        assert torch.accel.current_stream() == stream_before
        assert not torch.accel.is_current_stream_capturing()
        del y, noise
        # What the capture allocated went back with its pool.
        assert settled_memory() == memory_before
        # The allocator recycles blocks again (in capture mode, CUDA's would
        # not process the events of a block freed after record_stream) ...
        other = torch.accel.Stream()
        for _ in range(3):
            block = torch.empty(1 << 18, device="accel")
            block.record_stream(other)
            del block
            torch.accel.synchronize()
        torch.accel.empty_cache()
        assert settled_memory() == memory_before
        # ... eager random work runs as ever (in capture mode, CUDA's
        # generator would refuse: "Offset increment outside graph capture") ...
        torch.accel.manual_seed(7)
        first = torch.rand(8, device="accel")
        torch.accel.manual_seed(7)
        assert torch.equal(torch.rand(8, device="accel").cpu(), first.cpu())
        # ... and the same graph captures again.
        with torch.accel.graph(g):
            z = x + 1
        g.replay()
        assert torch.equal(z.cpu(), torch.full((4096,), 2.0))
    assert torch.accel.current_stream() == torch.accel.default_stream()


def test_failed_capture_begin_restores_the_stream(monkeypatch):
    def refuse(self, *args, **kwargs):
        raise RuntimeError("accel: this capture cannot begin")

    g = torch.accel.Graph()
    monkeypatch.setattr(torch.accel.Graph, "capture_begin", refuse)
    with pytest.raises(RuntimeError, match="cannot begin"):
        with torch.accel.graph(g):
            pass
    assert torch.accel.current_stream() == torch.accel.default_stream()


def test_concurrent_captures_into_one_pool_are_refused_and_the_first_goes_on():
    # CUDA's allocators refuse to record into a pool that a capture records
    # into; accel refuses before anything began, on both runtimes.
    x = torch.ones(4, device="accel")
    pool = torch.accel.graph_pool_handle()
    g1, g2 = torch.accel.Graph(), torch.accel.Graph()
    s2 = torch.accel.Stream()
    with torch.accel.graph(g1, pool=pool):
        y = x + 1
        with torch.accel.stream(s2):
            with pytest.raises(RuntimeError, match="another graph is capturing into the memory pool"):
                g2.capture_begin(pool=pool)
            assert not torch.accel.is_current_stream_capturing()
        z = y * 2
    g1.replay()
    assert torch.equal(z.cpu(), torch.full((4,), 4.0))
    # One after the other, they share it.
    with torch.accel.graph(g2, pool=pool, stream=s2):
        w = z + 1
    g2.replay()
    assert torch.equal(w.cpu(), torch.full((4,), 5.0))


def test_work_on_other_streams_runs_during_capture():
    x = torch.ones(4, device="accel")
    other = torch.accel.Stream()
    other.wait_stream(torch.accel.current_stream())  # x is written on the current stream
    g = torch.accel.Graph()
    # "relaxed": on CUDA, the other stream's allocation may need cudaMalloc,
    # which the "global" mode forbids during a capture.
    with torch.accel.graph(g, capture_error_mode="relaxed"):
        with torch.accel.stream(other):
            outside = x + 41  # not the capturing stream: runs now
        captured = x * 7
    torch.accel.current_stream().wait_stream(other)  # after the capture: waiting on it is not captured
    assert torch.equal(outside.cpu(), torch.full((4,), 42.0))  # reading another stream's result is fine
    g.replay()
    assert torch.equal(captured.cpu(), torch.full((4,), 7.0))


def test_random_numbers_are_fresh_at_each_replay():
    torch.accel.manual_seed(1234)
    x = torch.zeros(64, device="accel")
    g = torch.accel.Graph()
    with torch.accel.graph(g):
        noise = torch.rand(64, device="accel")
        noisy = x + torch.randn_like(x)
        dropped = torch.nn.functional.dropout(x + 1, p=0.5)
    state = torch.accel.get_rng_state()
    draws = []
    for _ in range(3):
        g.replay()
        draws.append((noise.cpu(), noisy.cpu(), dropped.cpu()))
        assert not torch.equal(torch.accel.get_rng_state(), state)  # the generator advances
        state = torch.accel.get_rng_state()
    for earlier, later in zip(draws, draws[1:]):
        for a, b in zip(earlier, later):
            assert not torch.equal(a, b)
    assert ((draws[0][0] >= 0) & (draws[0][0] < 1)).all()
    assert set(draws[0][2].unique().tolist()) <= {0.0, 2.0}


def test_replays_draw_from_a_registered_user_generator_as_eager(target):
    # torch.rand(..., generator=g) captured: each replay draws the numbers the
    # next eager call would, and advances g as that call would (CUDA: the
    # graph-safe state of g's CUDA generator, registered with the graph).
    g = torch.Generator("accel").manual_seed(2024)
    reference = torch.Generator(target).manual_seed(2024)
    graph = torch.accel.Graph()
    graph.register_generator_state(g)
    with torch.accel.graph(graph):
        drawn = torch.rand(32, device="accel", generator=g)
        scaled = torch.randn(8, device="accel", generator=g) * 3
    for _ in range(3):
        graph.replay()
        assert torch.equal(drawn.cpu(), torch.rand(32, device=target, generator=reference).cpu())
        assert torch.equal(scaled.cpu(), (torch.randn(8, device=target, generator=reference) * 3).cpu())
    # Eager work after the replays goes on from where they left g.
    assert torch.equal(torch.rand(4, device="accel", generator=g).cpu(), torch.rand(4, device=target, generator=reference).cpu())


def test_register_generator_state_takes_accel_generators_before_capture():
    graph = torch.accel.Graph()
    with pytest.raises(ValueError, match="accel generator"):
        graph.register_generator_state(torch.Generator("cpu"))
    with pytest.raises(TypeError):
        graph.register_generator_state(3)
    g = torch.Generator("accel")
    with torch.accel.graph(graph):
        with pytest.raises(RuntimeError, match="(?i)capturing"):
            torch.accel.Graph().register_generator_state(g)
        y = torch.ones(2, device="accel") + 1
    graph.replay()
    assert torch.equal(y.cpu(), torch.full((2,), 2.0))


def test_debug_dump(tmp_path):
    g = torch.accel.Graph()
    g.enable_debug_mode()
    x = torch.ones(4, device="accel")
    with torch.accel.graph(g):
        y = x.exp()
    g.replay()
    path = tmp_path / "graph.dot"
    g.debug_dump(str(path))
    assert path.stat().st_size > 0
    assert torch.equal(y.cpu(), torch.ones(4).exp())


def make_mlp(device):
    torch.manual_seed(7)
    model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2)).to(device)
    return model, torch.optim.SGD(model.parameters(), lr=0.1, foreach=False)


def train_step(model, optimizer, inputs, targets):
    optimizer.zero_grad(set_to_none=True)
    loss = torch.nn.functional.mse_loss(model(inputs), targets)
    loss.backward()
    optimizer.step()
    return loss


def test_captured_training_step_matches_eager(target):
    torch.manual_seed(3)
    batches = [(torch.randn(4, 6), torch.randn(4, 2)) for _ in range(5)]
    model, optimizer = make_mlp("accel")
    static_in = torch.zeros(4, 6, device="accel")
    static_target = torch.zeros(4, 2, device="accel")
    # Warm up on a side stream (as torch.cuda's whole-network capture does).
    side = torch.accel.Stream()
    side.wait_stream(torch.accel.current_stream())
    with torch.accel.stream(side):
        static_in.copy_(batches[0][0].to("accel"))
        static_target.copy_(batches[0][1].to("accel"))
        train_step(model, optimizer, static_in, static_target)
    torch.accel.current_stream().wait_stream(side)
    g = torch.accel.Graph()
    with torch.accel.graph(g):
        static_loss = train_step(model, optimizer, static_in, static_target)

    eager_model, eager_optimizer = make_mlp(target)
    train_step(eager_model, eager_optimizer, batches[0][0].to(target), batches[0][1].to(target))
    for inputs, targets in batches[1:]:
        static_in.copy_(inputs.to("accel"))
        static_target.copy_(targets.to("accel"))
        g.replay()
        eager_loss = train_step(eager_model, eager_optimizer, inputs.to(target), targets.to(target))
        assert torch.equal(static_loss.cpu(), eager_loss.detach().cpu())
    for p, q in zip(model.parameters(), eager_model.parameters()):
        assert torch.equal(p.detach().cpu(), q.detach().cpu())


def test_forked_stream_joins_the_capture():
    x = torch.ones(8, device="accel")
    side = torch.accel.Stream()
    g = torch.accel.Graph()
    with torch.accel.graph(g):
        side.wait_stream(torch.accel.current_stream())  # forks the capture onto `side`
        with torch.accel.stream(side):
            assert torch.accel.is_current_stream_capturing()
            y = x * 2
        torch.accel.current_stream().wait_stream(side)  # joins it back
        z = y + x
    assert not torch.accel.is_current_stream_capturing()
    with torch.accel.stream(side):
        assert not torch.accel.is_current_stream_capturing()
    x.fill_(5.0)
    g.replay()
    assert torch.equal(z.cpu(), torch.full((8,), 15.0))


def test_cpu_scalars_keep_their_captured_value():
    x = torch.zeros(3, device="accel")
    scale = torch.tensor(2.0)  # a CPU scalar: its value at capture is what replays
    g = torch.accel.Graph()
    with torch.accel.graph(g):
        x.add_(scale)
    scale.fill_(100.0)
    g.replay()
    g.replay()
    assert torch.equal(x.cpu(), torch.full((3,), 4.0))


OPERATORS = {
    "softmax-layer_norm": lambda x: torch.softmax(torch.nn.functional.layer_norm(x, (8,)), -1),
    "cat-stack": lambda x: torch.stack([torch.cat([x, x * 2], 0)] * 2),
    "max-topk-sort": lambda x: torch.max(x, 1)[0] + torch.topk(x, 3, 1)[0].sum(1) + torch.sort(x, 1)[0][:, 0],
    "argmax-cumsum-where": lambda x: torch.where(x > 0, x.cumsum(1), x.argmax(1, keepdim=True).float()),
    "conv2d-max_pool2d": lambda x: torch.nn.functional.max_pool2d(
        torch.nn.functional.conv2d(x.view(1, 1, 8, 8), x.view(1, 1, 8, 8)[:, :, :3, :3]), 2
    ),
    "sdpa": lambda x: torch.nn.functional.scaled_dot_product_attention(*[x.view(1, 2, 4, 8)] * 3),
    "cross_entropy": lambda x: torch.nn.functional.cross_entropy(x, x.abs().argmax(1)),
    "embedding-arange": lambda x: torch.nn.functional.embedding(torch.arange(3, device=x.device), x),
}


@pytest.mark.parametrize("fn", OPERATORS.values(), ids=OPERATORS.keys())
def test_operators_replay_as_eager(fn, target):
    x = torch.randn(8, 8)
    static_x = x.to("accel")
    g = torch.accel.Graph()
    with torch.accel.graph(g):
        out = fn(static_x)
    g.replay()
    assert torch.equal(out.cpu(), fn(x.to(target)).cpu())


@pytest.mark.parametrize("layout", ["weight", "input", "both"])
def test_convolution_results_are_laid_out_as_eager(layout, target):
    # The target picks a convolution's memory format by device (channels-last
    # input or weight), which its Meta kernel cannot see: the captured results,
    # their gradients included, have eager's strides.
    torch.manual_seed(0)
    x, w = torch.randn(2, 3, 8, 8), torch.randn(4, 3, 3, 3)
    if layout in ("input", "both"):
        x = x.to(memory_format=torch.channels_last)
    if layout in ("weight", "both"):
        w = w.to(memory_format=torch.channels_last)
    static_x, static_w = x.to("accel").requires_grad_(), w.to("accel").requires_grad_()
    g = torch.accel.Graph()
    with torch.accel.graph(g):
        out = torch.nn.functional.conv2d(static_x, static_w)
        grad_x, grad_w = torch.autograd.grad(out.sum(), (static_x, static_w))
    g.replay()
    eager_x, eager_w = x.to(target).requires_grad_(), w.to(target).requires_grad_()
    eager = torch.nn.functional.conv2d(eager_x, eager_w)
    eager_grads = torch.autograd.grad(eager.sum(), (eager_x, eager_w))
    for got, want in zip((out, grad_x, grad_w), (eager, *eager_grads)):
        assert got.stride() == want.stride()
        if torch_accel.runtime() == "host":  # the same kernels rerun
            assert torch.equal(got.detach().cpu(), want.detach().cpu())
        else:  # cuDNN may choose another algorithm inside a capture
            torch.testing.assert_close(got.detach().cpu(), want.detach().cpu())


def test_batch_norm_running_stats_update_at_replay_only(target):
    bn, eager_bn = torch.nn.BatchNorm1d(8).to("accel"), torch.nn.BatchNorm1d(8).to(target)
    x = torch.randn(4, 8)
    static_x = x.to("accel")
    g = torch.accel.Graph()
    with torch.accel.graph(g):
        out = bn(static_x)
    assert torch.equal(bn.running_mean.cpu(), torch.zeros(8))
    for _ in range(2):
        g.replay()
        expected = eager_bn(x.to(target))
    assert torch.equal(out.cpu(), expected.detach().cpu())
    assert torch.equal(bn.running_mean.cpu(), eager_bn.running_mean.cpu())
    assert torch.equal(bn.num_batches_tracked.cpu(), eager_bn.num_batches_tracked.cpu())


def test_argument_errors_raise_as_eager_and_keep_the_capture():
    x, y = torch.ones(3, device="accel"), torch.ones(4, device="accel")
    g = torch.accel.Graph()
    with torch.accel.graph(g):
        with pytest.raises(RuntimeError, match="must match the size|broadcast"):
            x + y
        z = x * 5
    g.replay()
    assert torch.equal(z.cpu(), torch.full((3,), 5.0))


# Lives as long as the process: deleting a library before Inductor is first
# imported breaks Inductor's import in torch 2.11 (core_aten_decompositions
# then returns a table that cannot be unpacked), which would fail later tests.
_LIBRARY_WITHOUT_META = None


@pytest.mark.skipif(torch_accel.runtime() == "cuda", reason="a CUDA graph captures kernels without Meta kernels")
def test_operator_without_meta_kernel_invalidates_the_capture():
    global _LIBRARY_WITHOUT_META
    if _LIBRARY_WITHOUT_META is None:
        _LIBRARY_WITHOUT_META = torch.library.Library("accel_graph_test", "DEF")  # noqa: TOR901
        _LIBRARY_WITHOUT_META.define("twice(Tensor x) -> Tensor")
        _LIBRARY_WITHOUT_META.impl("twice", lambda x: x * 2, "CPU")
    x = torch.ones(3, device="accel")
    assert torch.equal(torch.ops.accel_graph_test.twice(x).cpu(), torch.full((3,), 2.0))  # eager: fine
    g = torch.accel.Graph()
    with pytest.raises(RuntimeError, match="invalidated.*accel_graph_test::twice.*Meta kernel"):
        with torch.accel.graph(g):
            torch.ops.accel_graph_test.twice(x)
