"""torch.distributed on accel: accel's c10d backend.

Multi-process runs (test/_distributed_worker.py, one process per rank, rank r
on accel:r) compare every collective on accel tensors with the same collective
on target tensors in the same ranks, bit for bit, and train a model with
DistributedDataParallel. They use min(2, device_count()) ranks: two on the
host runtime (two emulated devices), one per GPU on the CUDA runtime (NCCL
wants one device per rank; a one-GPU machine runs a one-rank group, which
still takes every collective through NCCL).

Registration, process-group creation and the error cases run in this process,
in one-rank groups.
"""

import datetime
import os
import subprocess
import sys
import types
import warnings

import pytest
import torch
import torch.distributed as dist

from conftest import run_python
import torch_accel
from torch_accel import _distributed

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "_distributed_worker.py")
RUN_TIMEOUT_S = 300


def world_size() -> int:
    return min(2, torch_accel.device_count())


def run_ranks(mode: str, output_dir, *args: str) -> list[dict]:
    """Run the worker as every rank of one group and return each rank's results."""
    store = output_dir / "store"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.dirname(HERE), HERE, os.environ.get("PYTHONPATH", "")]))
    if mode != "accel":
        env["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"
    size = world_size()
    logs = [open(output_dir / f"rank{rank}.log", "w+") for rank in range(size)]
    procs = [
        subprocess.Popen(
            [sys.executable, WORKER, mode, str(rank), str(size), str(store), str(output_dir), *args],
            env=env,
            stdout=logs[rank],
            stderr=subprocess.STDOUT,
        )
        for rank in range(size)
    ]
    try:
        for proc in procs:
            proc.wait(timeout=RUN_TIMEOUT_S)
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    for rank, (proc, log) in enumerate(zip(procs, logs)):
        log.seek(0)
        assert proc.returncode == 0, f"rank {rank} exited with {proc.returncode}:\n{log.read()[-6000:]}"
        log.close()
    return [torch.load(output_dir / f"rank{rank}.pt", weights_only=False) for rank in range(size)]


@pytest.fixture(scope="module")
def ranks(tmp_path_factory) -> list[dict]:
    return run_ranks("accel", tmp_path_factory.mktemp("accel_ranks"))


@pytest.fixture(scope="module")
def target_ddp(ranks, tmp_path_factory) -> list[dict]:
    target, engine = ranks[0]["target"], ranks[0]["engine"]
    return run_ranks("target-ddp", tmp_path_factory.mktemp("target_ranks"), target, engine)


def is_failure(value) -> bool:
    return isinstance(value, dict) and "failure" in value


def assert_no_failure(value, what: str) -> None:
    assert not is_failure(value), f"{what} raised {value['failure']}: {value['message']}\n{value['traceback']}"


def assert_same_tensors(accel, expected, what: str, device: str) -> None:
    """accel results: the expected (target) values bit for bit, on accel:rank."""
    assert len(accel) == len(expected), what
    for i, (a, e) in enumerate(zip(accel, expected)):
        assert a["device"] == device, f"{what}[{i}] is on {a['device']}, expected {device}"
        assert a["tensor"].dtype == e["tensor"].dtype, f"{what}[{i}]"
        assert torch.equal(a["tensor"], e["tensor"]), f"{what}[{i}]: {a['tensor']} != {e['tensor']}"


def check_case(ranks: list[dict], name: str) -> None:
    for rank, results in enumerate(ranks):
        accel, expected = results[name]["accel"], results[name]["target"]
        if is_failure(expected):
            # What the engine refuses on the target, it refuses on accel.
            assert is_failure(accel), f"{name}: the target raised {expected['message']!r}, accel did not"
            assert (accel["failure"], accel["message"]) == (expected["failure"], expected["message"]), name
        else:
            assert_no_failure(accel, f"{name} on accel (rank {rank})")
            assert_same_tensors(accel, expected, f"{name} (rank {rank})", f"accel:{rank}")


def collective_names() -> list[str]:
    import _distributed_worker

    return sorted(_distributed_worker.COLLECTIVES)


@pytest.mark.parametrize("name", collective_names())
def test_collective_matches_the_target_bitwise(ranks, name):
    check_case(ranks, name)


def test_reduce_ops_the_engine_supports_all_run(ranks):
    # Every reduce op the engine accepts for float32 gives accel a result;
    # SUM, MIN and MAX are supported by every engine.
    supported = [
        name
        for name, value in ranks[0].items()
        if name.startswith("all_reduce_") and name.endswith("_float32") and not is_failure(value["target"])
    ]
    assert {"all_reduce_sum_float32", "all_reduce_min_float32", "all_reduce_max_float32"} <= set(supported)


@pytest.mark.parametrize("name", ["send_recv", "isend_irecv", "batch_isend_irecv"])
def test_peer_to_peer_matches_the_target_bitwise(ranks, name):
    if len(ranks) < 2:
        pytest.skip("send/recv need two ranks, and NCCL one device per rank; this machine has one GPU")
    check_case(ranks, name)
    # Rank r received what rank r-1 sent.
    import _distributed_worker

    for rank, results in enumerate(ranks):
        sender = (rank - 1) % len(ranks)
        sent = _distributed_worker._values(sender, name, (5,))
        assert torch.equal(results[name]["accel"][0]["tensor"], sent)


def test_collectives_on_a_side_stream(ranks):
    check_case(ranks, "on_side_stream")


def test_barrier_waits_for_every_rank(ranks):
    # Every rank left the barrier after the last one (which arrived late) entered it.
    for rank, results in enumerate(ranks):
        saw = results["barrier_saw_the_last_rank"]
        assert_no_failure(saw, "barrier")
        assert saw is True, f"rank {rank} left the barrier before the last rank entered it"


def test_ddp_matches_ddp_on_the_target_bitwise(ranks, target_ddp):
    for rank, (accel, expected) in enumerate(zip(ranks, target_ddp)):
        assert_no_failure(accel["ddp"], "DDP on accel")
        assert_no_failure(expected["ddp"], "DDP on the target")
        for key in ("params", "grads", "losses"):
            assert_same_tensors(accel["ddp"][key], expected["ddp"][key], f"ddp {key} (rank {rank})", f"accel:{rank}")


def test_ddp_times_accel_iterations(ranks):
    # DDP's logger finds accel's timer (it would warn and time nothing otherwise).
    for results in ranks:
        timing = results["ddp"]["timing_ns"]
        assert all(isinstance(ns, int) and ns > 0 for ns in timing.values()), timing


def test_ddp_gradient_as_bucket_view_matches(ranks):
    for rank, results in enumerate(ranks):
        assert_no_failure(results["ddp_gradient_as_bucket_view"], "DDP (gradient_as_bucket_view)")
        for key in ("params", "grads", "losses"):
            as_bucket_view, expected = results["ddp_gradient_as_bucket_view"][key], results["ddp"][key]
            assert_same_tensors(as_bucket_view, expected, f"{key} (rank {rank})", f"accel:{rank}")


def test_ddp_matches_single_process_training_on_the_whole_batch(ranks):
    """DDP over N ranks (each a 1/N shard of the batch) against one process
    over the whole batch: DDP averages the ranks' mean-loss gradients, which is
    the whole batch's mean-loss gradient. With one rank the same kernels run on
    the same data, so the results are bitwise equal; with several, each rank's
    matmuls sum over its shard and the shards are then added, a different
    order of float additions, so they agree to rounding only."""
    for rank, results in enumerate(ranks):
        ddp, single = results["ddp"], results["single_process"]
        assert_no_failure(single, "single-process training")
        for key in ("params", "grads"):
            for i, (a, e) in enumerate(zip(ddp[key], single[key], strict=True)):
                assert a["device"] == f"accel:{rank}"
                if len(ranks) == 1:
                    assert torch.equal(a["tensor"], e["tensor"]), f"{key}[{i}]"
                else:
                    torch.testing.assert_close(a["tensor"], e["tensor"], rtol=1e-5, atol=1e-6, msg=f"{key}[{i}]")
        # Every rank ends with the same parameters (rank 0's, broadcast by DDP, then trained alike).
        for a, e in zip(ddp["params"], ranks[0]["ddp"]["params"]):
            assert torch.equal(a["tensor"], e["tensor"])


# --- In this process: registration, process-group creation, errors ---------


@pytest.fixture
def store_path(tmp_path):
    yield f"file://{tmp_path / 'store'}"
    if dist.is_initialized():
        dist.destroy_process_group()


def init_one_rank(store_path: str, backend=None, **kwargs) -> None:
    dist.init_process_group(backend, init_method=store_path, rank=0, world_size=1, **kwargs)


def accel_engine(group=None):
    group = group or dist.group.WORLD
    return torch_accel._C._c10d_accel_backend_engine(group._get_backend(torch.device("accel")))


def test_accel_backend_is_registered_for_the_accel_device():
    assert dist.Backend.ACCEL == "accel"
    assert "accel" in dist.Backend.backend_list
    assert dist.Backend.backend_capability["accel"] == ["accel"]
    assert dist.Backend.default_device_backend_map["accel"] == "accel"
    assert dist.get_default_backend_for_device("accel") == "accel"
    assert dist.get_default_backend_for_device(torch.device("accel", 0)) == "accel"
    # The accelerator init_process_group() picks when no backend is named.
    assert torch.accelerator.current_accelerator().type == "accel"


def test_engine_is_the_targets_default_backend(target):
    assert _distributed.engine_name() == dist.Backend.default_device_backend_map[target]


@pytest.mark.skipif(not dist.is_nccl_available(), reason="this torch has no NCCL")
@pytest.mark.parametrize("before", [None, "0"])
def test_nccl_engine_holds_tensors_rather_than_recording_streams(monkeypatch, before):
    # The CUDA runtime's engine, made on either runtime (nothing is connected):
    # the variable is in force while ProcessGroupNCCL is constructed (which
    # reads it), and as it was afterwards.
    seen = []

    class RecordingProcessGroupNCCL:
        Options = dist.ProcessGroupNCCL.Options

        def __init__(self, store, rank, size, options):
            seen.append(os.environ.get("TORCH_NCCL_AVOID_RECORD_STREAMS"))

    if before is None:
        monkeypatch.delenv("TORCH_NCCL_AVOID_RECORD_STREAMS", raising=False)
    else:
        monkeypatch.setenv("TORCH_NCCL_AVOID_RECORD_STREAMS", before)
    monkeypatch.setattr(dist, "ProcessGroupNCCL", RecordingProcessGroupNCCL)
    group = types.SimpleNamespace(global_ranks_in_group=[0], group_id="0")
    engine = _distributed._new_nccl(None, 0, 1, datetime.timedelta(seconds=5), group, None)
    assert isinstance(engine, RecordingProcessGroupNCCL)
    assert seen == ["1"]
    assert os.environ.get("TORCH_NCCL_AVOID_RECORD_STREAMS") == before


@pytest.mark.parametrize("backend", [None, "accel", "cpu:gloo,accel:accel"])
def test_init_process_group_handles_accel_tensors(store_path, backend, target):
    init_one_rank(store_path, backend)
    assert "accel" in dist.distributed_c10d._device_capability()
    assert accel_engine().name() == dist.Backend.default_device_backend_map[target]
    x = torch.arange(6.0, device="accel").view(2, 3)
    dist.all_reduce(x)
    dist.broadcast(x, src=0)
    assert x.device.type == "accel"
    assert torch.equal(x.cpu(), torch.arange(6.0).view(2, 3))
    dist.barrier()


def test_init_process_group_without_backend_is_accel_only(store_path):
    init_one_rank(store_path)
    assert dist.distributed_c10d._device_capability() == ["accel"]


def test_init_process_group_without_backend_takes_accels_backend(store_path):
    # As with device_id=accel:N (torch's own rule), and as cuda gets NCCL:
    # the group's default backend is accel's (DDP and others ask for it).
    init_one_rank(store_path)
    assert dist.get_backend() == "accel"
    # The group's default backend type is accel's (CUSTOM, as for every
    # out-of-tree backend), not Gloo's, which this accel-only group lacks.
    assert dist.group.WORLD._get_backend_name() == "custom"


def test_init_device_mesh_takes_accels_backend(monkeypatch):
    # init_device_mesh calls init_process_group() itself (env:// rendezvous).
    from torch.distributed.device_mesh import init_device_mesh

    # MASTER_PORT=0: rank 0's TCPStore (the env:// rendezvous' server) binds a
    # port the system chooses, and no other process has to reach it.
    for name, value in {"RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "0"}.items():
        monkeypatch.setenv(name, value)
    try:
        mesh = init_device_mesh("accel", (1,))
        assert dist.get_backend() == "accel"
        assert mesh.device_type == "accel"
        x = torch.ones(2, device="accel")
        dist.all_reduce(x, group=mesh.get_group())
        assert torch.equal(x.cpu(), torch.ones(2))
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def test_engine_name_for_the_accel_device_means_accels_backend(store_path, target):
    engine = _distributed.engine_name()
    init_one_rank(store_path, f"cpu:gloo,accel:{engine}")
    assert dist.get_backend_config() == "cpu:gloo,accel:accel"
    assert accel_engine().name() == dist.Backend.default_device_backend_map[target]
    x = torch.arange(3.0, device="accel")
    dist.all_reduce(x)
    assert torch.equal(x.cpu(), torch.arange(3.0))


def test_other_engine_for_the_accel_device_raises(store_path):
    engine = _distributed.engine_name()
    other = {"gloo": "nccl", "nccl": "gloo"}[engine]
    with pytest.raises(ValueError, match=f"accel's collectives run on '{engine}' on this runtime .*not '{other}'"):
        init_one_rank(store_path, f"cpu:gloo,accel:{other}")
    assert not dist.is_initialized()


def test_init_process_group_with_device_id(store_path):
    init_one_rank(store_path, "accel", device_id=torch.device("accel", 0))
    x = torch.ones(3, device="accel")
    dist.all_reduce(x)
    dist.barrier()
    assert torch.equal(x.cpu(), torch.ones(3))


def test_new_group_uses_accel(store_path):
    init_one_rank(store_path, "cpu:gloo,accel:accel")
    group = dist.new_group(backend="accel")
    x = torch.full((4,), 2.0, device="accel")
    dist.all_reduce(x, group=group)
    assert torch.equal(x.cpu(), torch.full((4,), 2.0))


def test_engine_work_hands_back_accel_tensors(store_path):
    init_one_rank(store_path, "accel")
    x = torch.arange(4.0, device="accel")
    work = dist.all_reduce(x, async_op=True)
    assert work.wait()
    assert work.is_completed() and work.is_success()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        (result,) = work.result()
    assert result.device == x.device and result.data_ptr() == x.data_ptr()
    (value,) = work.get_future().value()
    assert value.device == x.device and value.data_ptr() == x.data_ptr()


# Errors


def test_accel_tensor_in_a_group_without_accel_backend_raises(store_path):
    init_one_rank(store_path, "gloo")
    with pytest.raises(RuntimeError, match="No backend type associated with device type accel"):
        dist.all_reduce(torch.ones(2, device="accel"))


def test_cpu_tensor_on_the_accel_backend_raises(store_path):
    # "cpu:accel" hands cpu tensors to accel's backend, which refuses them
    # (on the host runtime the engine itself would take them silently).
    init_one_rank(store_path, "cpu:accel,accel:accel")
    expected = r"accel's c10d backend runs collectives on accel tensors only, but allreduce got a tensor on cpu"
    with pytest.raises(ValueError, match=expected):
        dist.all_reduce(torch.ones(2))


def test_cpu_tensor_among_accel_tensors_raises(store_path):
    init_one_rank(store_path, "accel")
    with pytest.raises(ValueError, match=r"allgather got a tensor on cpu"):
        dist.all_gather([torch.empty(2)], torch.ones(2, device="accel"))


def test_tensors_on_two_accel_devices_raise(store_path, two_devices):
    init_one_rank(store_path, "accel")
    expected = r"Expected all tensors to be on the same device, but found at least two devices, accel:1 and accel:0"
    with pytest.raises(RuntimeError, match=expected):
        dist.all_gather_into_tensor(torch.empty(2, device="accel:1"), torch.ones(2, device="accel:0"))
    with pytest.raises(RuntimeError, match=r"accel:1 and accel:0! \(allgather on accel's c10d backend"):
        dist.all_gather([torch.empty(2, device="accel:1")], torch.ones(2, device="accel:0"))


@pytest.fixture
def unregister_backend():
    names = []
    yield names
    for name in names:
        dist.Backend._plugins.pop(name.upper(), None)
        dist.Backend.backend_capability.pop(name, None)
        dist.Backend.backend_type_map.pop(name, None)
        if name in dist.Backend.backend_list:
            dist.Backend.backend_list.remove(name)
        if hasattr(dist.Backend, name.upper()):
            delattr(dist.Backend, name.upper())


def test_accel_backend_registered_without_devices_raises(store_path, unregister_backend):
    # register_backend without devices declares cpu and cuda: accel tensors
    # would find no backend. init_process_group says so.
    unregister_backend.append("accel_without_devices")
    with pytest.warns(UserWarning, match="Device capability of accel_without_devices unspecified"):
        dist.Backend.register_backend("accel_without_devices", _distributed._new_backend, extended_api=True)
    expected = (
        r"accel's c10d backend is registered as 'accel_without_devices' for devices \['cpu', 'cuda'.*"
        r"register it with devices=\['accel'\]"
    )
    with pytest.raises(ValueError, match=expected):
        init_one_rank(store_path, "accel_without_devices")
    assert not dist.is_initialized()


def test_init_process_group_with_accel_device_out_of_range_raises(store_path):
    with pytest.raises(ValueError, match=f"device_id accel:{torch_accel.device_count()} is out of range"):
        init_one_rank(store_path, "accel", device_id=torch.device("accel", torch_accel.device_count()))


def test_init_process_group_without_accel_devices_raises(tmp_path):
    proc = run_python(
        f"""
        import torch, torch_accel, torch.distributed as dist
        try:
            dist.init_process_group("accel", init_method="file://{tmp_path / 'store'}", rank=0, world_size=1)
        except RuntimeError as e:
            print("raised:", e)
        """,
        env={"TORCH_ACCEL_RUNTIME": "host", "TORCH_ACCEL_HOST_DEVICES": "0"},
    )
    assert proc.returncode == 0, proc.stderr
    assert "raised: accel's c10d backend cannot be created:" in proc.stdout
    assert "accel" in proc.stdout.split("created:", 1)[1]


def test_import_registers_without_new_imports():
    # torch itself loads torch.distributed; registering accel's backend must
    # not pull in anything more of it.
    proc = run_python(
        """
        import sys, torch
        before = set(sys.modules)
        import torch_accel
        print(sorted(m for m in set(sys.modules) - before if m.startswith("torch.distributed")))
        print("accel" in torch.distributed.Backend.backend_list)
        """
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["[]", "True"]


# --- Programs as users write them: default backend, DDP, FSDP2, exit ----------


def run_program(tmp_path, destroy: bool, *backend: str, outputs: list | None = None) -> list[dict]:
    """Every rank of test/_distributed_exit_worker.py; each must exit 0, with
    no abort message, whether or not it destroyed its process group."""
    script = os.path.join(HERE, "_distributed_exit_worker.py")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.dirname(HERE), os.environ.get("PYTHONPATH", "")]))
    size = world_size()
    store = tmp_path / "store"
    procs = [
        subprocess.Popen(
            [sys.executable, script, str(rank), str(size), str(store), str(tmp_path / f"rank{rank}.pt"), str(int(destroy)), *backend],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for rank in range(size)
    ]
    outputs = [] if outputs is None else outputs
    try:
        for proc in procs:
            outputs.append(proc.communicate(timeout=RUN_TIMEOUT_S)[0])
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    for rank, (proc, output) in enumerate(zip(procs, outputs)):
        assert proc.returncode == 0, f"rank {rank} exited with {proc.returncode}:\n{output[-6000:]}"
        assert "terminate called" not in output, output[-6000:]
    return [torch.load(tmp_path / f"rank{rank}.pt") for rank in range(size)]


def check_training(ranks: list[dict]) -> None:
    for results in ranks:
        assert len(results["ddp"]) == 2 and len(results["fsdp"]) == 2
        # Every rank ends with the same full FSDP parameters.
        for a, b in zip(results["fsdp_params"], ranks[0]["fsdp_params"], strict=True):
            assert torch.equal(a, b)


def test_default_backend_program_exits_cleanly_without_destroy(tmp_path):
    # init_process_group() without a backend: accel's (as cuda's NCCL), named
    # by get_backend(); DDP and FSDP2 run on it; the process exits 0 although
    # it never destroyed its group.
    ranks = run_program(tmp_path, False)
    for results in ranks:
        assert results["backend"] == "accel"
        assert results["config"] == "accel:accel"
    check_training(ranks)


def test_engine_named_for_accel_program_exits_cleanly_after_destroy(tmp_path):
    # "cpu:gloo,accel:<engine>" (accel:nccl on the CUDA runtime, accel:gloo
    # on the host runtime) takes accel's backend for accel tensors.
    engine = _distributed.engine_name()
    ranks = run_program(tmp_path, True, f"cpu:gloo,accel:{engine}")
    for results in ranks:
        assert results["backend"] == f"cpu:gloo,accel:{engine}"
        assert results["config"] == "cpu:gloo,accel:accel"
    check_training(ranks)


NOT_DESTROYED = "WARNING: destroy_process_group() was not called before program exit, which can leak resources"


@pytest.mark.parametrize("destroy", [False, True], ids=["forgotten", "destroyed"])
def test_forgotten_destroy_process_group_warns_as_nccl_does(tmp_path, destroy):
    # ProcessGroupNCCL's destructor warns (once, from one rank per machine)
    # when the program did not destroy the group, and the program exits 0;
    # accel's backend does the same on either engine. (In the DDP+FSDP2
    # program above torch itself keeps the group alive until the process
    # ends, so no group destructor runs there, and nothing is said.)
    outputs = []
    ranks = run_program(tmp_path, destroy, "", "ddp", outputs=outputs)
    assert all(len(results["ddp"]) == 2 for results in ranks)
    assert (NOT_DESTROYED in outputs[0]) != destroy, outputs[0][-3000:]
    assert outputs[0].count(NOT_DESTROYED) <= 1
    # One rank per machine (of torch.accel.device_count() ranks) says it.
    assert NOT_DESTROYED not in "".join(outputs[1:])
