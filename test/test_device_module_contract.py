"""The device module contract (docs/device-module-contract.md): what PyTorch's
device-generic code reads from ``torch.accel``, and the readers that matter most.

Every attribute the note lists must exist with torch.cuda's signature; the
behaviour tests run PyTorch's own readers (checkpoint, fork_rng, torch.manual_seed,
autocast, save_on_cpu, Tensor.accel(), torch.load, FakeTensor, DataParallel's
helpers, FSDP2) on accel and compare with the result they must give.
"""

import inspect
import io
import os
import re
import warnings

import pytest
import torch
import torch.nn as nn
from torch.utils.checkpoint import checkpoint

import torch_accel
from conftest import run_python

NOTE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs", "device-module-contract.md")


def contract_entries() -> list[tuple[str, str]]:
    """(attribute path, its cell) for every entry of the note's tables."""
    entries = []
    with open(NOTE) as f:
        for line in f:
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if len(cells) != 3 or not cells[0].startswith("`"):
                continue
            for name in re.findall(r"`([A-Za-z_][\w.]*)", cells[0]):
                entries.append((name, cells[2]))
    return entries


ENTRIES = contract_entries()


def resolve(path: str):
    obj = torch.accel
    for part in path.split("."):
        obj = getattr(obj, part)
    return obj


def test_the_note_lists_the_known_readers():
    names = {name for name, _ in ENTRIES}
    # The ones whose absence once broke a reader, and the big ones.
    for name in ("_initialized", "_is_in_bad_fork", "manual_seed_all", "get_rng_state", "set_rng_state", "device",
                 "device_count", "get_amp_supported_dtype", "Stream", "current_stream", "memory_summary"):
        assert name in names


@pytest.mark.parametrize("path", [n for n, provided in ENTRIES if not provided.startswith("absent")])
def test_every_listed_attribute_exists(path):
    assert torch.accel is torch_accel
    resolve(path)


@pytest.mark.parametrize("path", [n for n, provided in ENTRIES if provided.startswith("absent")])
def test_attributes_listed_as_absent_are_absent(path):
    # PyTorch reads these only behind hasattr(): providing a wrong one would be worse.
    assert not hasattr(torch.accel, path)


# Signatures that device-generic code relies on: the parameters torch.cuda's
# function has (by name, in order, with the same defaults where torch.cuda has one).
SAME_SIGNATURE_AS_CUDA = [
    "current_device", "device_count", "is_available", "is_initialized", "manual_seed_all", "set_device",
    "synchronize", "get_device_properties", "get_device_name", "get_rng_state", "set_rng_state",
    "current_stream", "stream", "memory_stats", "memory_allocated", "memory_reserved", "empty_cache",
    "memory_summary",
]


@pytest.mark.parametrize("name", SAME_SIGNATURE_AS_CUDA)
def test_signature_matches_torch_cuda(name):
    ours = inspect.signature(getattr(torch.accel, name)).parameters
    theirs = inspect.signature(getattr(torch.cuda, name)).parameters
    assert list(ours) == list(theirs), (list(ours), list(theirs))
    for param in theirs:
        default = theirs[param].default
        if default is not inspect.Parameter.empty and default not in ("cuda", None):
            assert ours[param].default == default, param


def test_initialized_follows_initialisation():
    proc = run_python(
        """
        import torch, torch_accel
        assert torch_accel._initialized is False
        torch.empty(1, device="accel")
        assert torch_accel._initialized is True and torch.accel._initialized is True
        print("ok")
        """
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "ok"


# --- torch.utils.checkpoint ---------------------------------------------------


def dropout_model() -> nn.Module:
    return nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Dropout(0.5), nn.Linear(32, 32), nn.Dropout(0.3), nn.Linear(32, 4))


def gradients(model: nn.Module, x: torch.Tensor, run) -> list[torch.Tensor]:
    model.zero_grad()
    x = x.detach().requires_grad_()
    torch.manual_seed(1234)
    run(model, x).square().sum().backward()
    return [p.grad.clone() for p in model.parameters()] + [x.grad.clone()]


@pytest.mark.parametrize("use_reentrant", [True, False])
@pytest.mark.parametrize("device", ["accel:0", "accel:1"])
def test_checkpointed_dropout_gradients_are_bitwise_those_without_checkpointing(use_reentrant, device, two_devices):
    # On accel:1 the states are those of the inputs' device, not the current
    # one (checkpoint reads them inside torch.accel.device(1)).
    torch.manual_seed(0)
    model = dropout_model().to(device)
    x = torch.randn(8, 16, device=device)
    plain = gradients(model, x, lambda m, inp: m(inp))
    ckpt = gradients(model, x, lambda m, inp: checkpoint(m, inp, use_reentrant=use_reentrant))
    for a, b in zip(plain, ckpt):
        assert torch.equal(a, b)
    # And the masks were random: another seed gives other gradients.
    torch.manual_seed(0)
    other = gradients(model, x, lambda m, inp: (torch.manual_seed(99), m(inp))[1])
    assert not all(torch.equal(a, b) for a, b in zip(plain, other))


def test_checkpoint_leaves_the_rng_as_the_plain_run_does():
    model = dropout_model().to("accel")
    x = torch.randn(8, 16, device="accel", requires_grad=True)
    torch.manual_seed(5)
    model(x).sum().backward()
    after_plain = torch.accel.get_rng_state()
    torch.manual_seed(5)
    checkpoint(model, x, use_reentrant=False).sum().backward()
    assert torch.equal(torch.accel.get_rng_state(), after_plain)


# --- torch.random -------------------------------------------------------------


def test_fork_rng_restores_every_accel_device(two_devices):
    torch.manual_seed(7)
    before = torch.accel.get_rng_state_all()
    with warnings.catch_warnings():  # devices=None forks all of them, as it warns
        warnings.simplefilter("ignore", UserWarning)
        forked = torch.random.fork_rng(device_type="accel")
        forked.__enter__()
    try:
        torch.rand(10, device="accel:0")
        torch.rand(10, device="accel:1")
        assert not torch.equal(torch.accel.get_rng_state(0), before[0])
    finally:
        forked.__exit__(None, None, None)
    for device, state in enumerate(before):
        assert torch.equal(torch.accel.get_rng_state(device), state)
    # Inside, the numbers are those that follow the state; after, the same again.
    with torch.random.fork_rng(devices=[1], device_type="accel"):
        inside = torch.rand(10, device="accel:1")
    assert torch.equal(torch.rand(10, device="accel:1"), inside)


def test_fork_rng_of_an_indexed_accel_device_type():
    state = torch.accel.get_rng_state(0)
    with torch.random.fork_rng(devices=[0], device_type="accel:0"):
        torch.rand(3, device="accel")
    assert torch.equal(torch.accel.get_rng_state(0), state)


def test_torch_manual_seed_seeds_every_accel_device(two_devices):
    torch.manual_seed(11)
    first = [torch.rand(4, device=f"accel:{i}") for i in range(2)]
    torch.manual_seed(11)
    again = [torch.rand(4, device=f"accel:{i}") for i in range(2)]
    for a, b in zip(first, again):
        assert torch.equal(a, b)
    assert torch.accel.initial_seed() == 11


# --- autocast, save_on_cpu ----------------------------------------------------


def test_autocast_reads_the_supported_dtypes():
    a = torch.randn(4, 4, device="accel")
    with torch.autocast("accel", dtype=torch.float16):
        assert torch.mm(a, a).dtype == torch.float16
    assert torch.float16 in torch.accel.get_amp_supported_dtype()


def test_save_on_cpu_pins_and_gives_the_same_gradients():
    x = torch.randn(32, device="accel", requires_grad=True)
    (x.sin() * x).sum().backward()
    expected = x.grad.clone()
    x.grad = None
    with torch.autograd.graph.save_on_cpu(pin_memory=True, device_type="accel"):
        y = (x.sin() * x).sum()
    y.backward()
    assert torch.equal(x.grad, expected)
    # save_on_cpu pins when the device module says accel is available.
    pack = torch.autograd.graph.save_on_cpu(pin_memory=True, device_type="accel").pack_hook
    device, cpu_copy = pack(torch.ones(3, device="accel"))
    assert device == torch.device("accel:0") and cpu_copy.is_pinned()


# --- devices: Tensor.accel(), storage, torch.load, FakeTensor, DataParallel ---


def test_tensor_and_storage_accel_use_the_current_device(two_devices):
    with torch.accel.device(1):
        assert torch.ones(2).accel().device == torch.device("accel:1")
        assert torch.ones(2).untyped_storage().accel().device == torch.device("accel:1")
        assert nn.Linear(2, 2).accel().weight.device == torch.device("accel:1")


def test_torch_load_onto_an_accel_device(two_devices):
    buffer = io.BytesIO()
    torch.save(torch.arange(4.0, device="accel:0"), buffer)
    buffer.seek(0)
    loaded = torch.load(buffer, map_location="accel:1")
    assert loaded.device == torch.device("accel:1")
    assert torch.equal(loaded.cpu(), torch.arange(4.0))


def test_fake_tensor_takes_the_current_device(two_devices):
    from torch._subclasses.fake_tensor import FakeTensorMode

    torch.accel.init()
    with torch.accel.device(1), FakeTensorMode():
        assert torch.empty(2, device="accel").device == torch.device("accel:1")


def test_data_parallel_helpers_read_devices_and_properties():
    from torch._utils import _get_device_attr

    # _get_device_attr asks the first available device type's module; ask ours.
    assert torch.accel.is_available()
    indices = list(range(torch.accel.device_count()))
    properties = [torch.accel.get_device_properties(i) for i in indices]
    assert all(p.total_memory > 0 and p.multi_processor_count > 0 for p in properties)
    if torch._utils._get_available_device_type() == "accel":  # host runtime: cuda is not available
        assert _get_device_attr(lambda m: m) is torch.accel
        assert torch._utils._get_all_device_indices() == indices
        assert torch._utils._get_current_device_index() == torch.accel.current_device()


def test_profiler_synchronizes_accel(monkeypatch):
    # torch.autograd.profiler.profile(use_device=...) calls the device module's
    # synchronize on exit, before it collects the device's events.
    calls = []
    synchronize = torch.accel.synchronize

    def recording_synchronize(*args, **kwargs):
        calls.append((args, kwargs))
        return synchronize(*args, **kwargs)

    monkeypatch.setattr(torch.accel, "synchronize", recording_synchronize)
    with torch.autograd.profiler.profile(use_device="accel") as prof:
        torch.ones(4, device="accel").add_(1)
        assert calls == []
    assert calls == [((), {})]  # once, for the current device
    assert any(e.name == "aten::add_" for e in prof.function_events)


def test_memory_summary_reports_the_allocator_stats():
    x = torch.empty(1 << 20, dtype=torch.uint8, device="accel")
    summary = torch.accel.memory_summary()
    assert "PyTorch accel memory summary, device ID 0" in summary
    allocated = next(line for line in summary.splitlines() if line.startswith("| Allocated memory"))
    current = torch.accel.memory_allocated()
    assert allocated.split("|")[2].strip() == torch_accel.memory._format_size(current, current).strip()
    del x


# --- FSDP2: streams, events, current_stream, device handle --------------------


def test_fully_shard_on_one_rank_matches_the_unsharded_model():
    proc = run_python(
        """
        import os, tempfile, torch, torch_accel, torch.distributed as dist, torch.nn as nn
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard
        torch.accel.set_device(0)
        # A file rendezvous of this process alone: no port to choose or share.
        store = os.path.join(tempfile.mkdtemp(), "store")
        dist.init_process_group("accel", init_method=f"file://{store}", rank=0, world_size=1)
        torch.manual_seed(0)
        reference = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4)).to("accel")
        model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4)).to("accel")
        model.load_state_dict(reference.state_dict())
        mesh = init_device_mesh("accel", (1,))
        for layer in model:
            if isinstance(layer, nn.Linear):
                fully_shard(layer, mesh=mesh)
        fully_shard(model, mesh=mesh)
        x = torch.randn(5, 8, device="accel")
        reference(x).square().sum().backward()
        model(x).square().sum().backward()
        for (name, p), q in zip(model.named_parameters(), reference.parameters()):
            assert torch.equal(p.grad.full_tensor(), q.grad), name
        dist.destroy_process_group()
        print("ok")
        """,
        timeout=240,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().endswith("ok")
