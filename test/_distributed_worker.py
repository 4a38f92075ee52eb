"""One rank of test_distributed.py's multi-process runs.

    python _distributed_worker.py accel RANK WORLD_SIZE STORE OUTPUT_DIR
    python _distributed_worker.py target-ddp RANK WORLD_SIZE STORE OUTPUT_DIR TARGET ENGINE

``accel`` (imports torch_accel): rank r works on accel:r in a process group
with a backend for cpu, for accel (accel's c10d backend) and for the target
device type (its own default backend), and runs every collective twice, on
accel tensors and on target tensors with the same values, plus async work,
send/recv, barrier and DistributedDataParallel training.

``target-ddp`` (never imports torch_accel, see _cases.py for why): the same
DistributedDataParallel training on the target device with its own backend,
the reference the accel training is compared with.

Each case's outcome, a value or the exception it raised, goes to
OUTPUT_DIR/rank<r>.pt; test_distributed.py compares them. A case that fails
only records its failure, so the other cases still run and the ranks stay in
step.
"""

import datetime
import os
import sys
import time
import traceback
import warnings

import torch
import torch.distributed as dist
from torch import nn

import _cases

TIMEOUT = datetime.timedelta(seconds=60)
DDP_STEPS = 3
DDP_GLOBAL_BATCH = 8


def failure(error: BaseException) -> dict:
    """What a case raised: compared across devices by type and first line of the message."""
    return {
        "failure": type(error).__name__,
        "message": str(error).split("\n")[0],
        "traceback": traceback.format_exc(),
    }


def outcome(case, *args, **kwargs):
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return case(*args, **kwargs)
    except Exception as e:  # noqa: BLE001 - recorded, compared by the test
        return failure(e)


def to_cpu(value):
    """Tensors as (cpu copy, device name), recursively: results outlive the process."""
    if isinstance(value, torch.Tensor):
        return {"tensor": value.detach().cpu(), "device": str(value.device)}
    if isinstance(value, (list, tuple)):
        return [to_cpu(v) for v in value]
    if isinstance(value, dict):
        return {k: to_cpu(v) for k, v in value.items()}
    return value


# --- collectives: each case takes (device, rank, world_size) and returns tensors


def _values(rank: int, case: str, shape, dtype=torch.float32) -> torch.Tensor:
    g = torch.Generator().manual_seed(1000 * rank + sum(map(ord, case)))
    if dtype.is_floating_point or dtype.is_complex:
        return torch.randn(shape, generator=g, dtype=dtype)
    # Small positive integers: products of a few ranks do not overflow.
    return torch.randint(1, 6, shape, generator=g, dtype=dtype)


REDUCE_OPS = {
    "sum": dist.ReduceOp.SUM,
    "avg": dist.ReduceOp.AVG,
    "product": dist.ReduceOp.PRODUCT,
    "min": dist.ReduceOp.MIN,
    "max": dist.ReduceOp.MAX,
    "band": dist.ReduceOp.BAND,
    "bor": dist.ReduceOp.BOR,
    "bxor": dist.ReduceOp.BXOR,
    "premul_sum": dist._make_nccl_premul_sum(2.0),
}


def all_reduce_case(op_name: str, dtype: torch.dtype):
    def case(device, rank, world_size):
        x = _values(rank, f"all_reduce_{op_name}", (3, 5), dtype).to(device)
        dist.all_reduce(x, op=REDUCE_OPS[op_name])
        return [x]

    return case


def all_reduce_complex(device, rank, world_size):
    x = _values(rank, "complex", (4,), torch.complex64).to(device)
    dist.all_reduce(x)
    return [x]


def all_reduce_non_contiguous(device, rank, world_size):
    x = _values(rank, "non_contiguous", (4, 6)).to(device).t()
    dist.all_reduce(x)
    return [x]


def broadcast_case(src_of_world_size):
    def case(device, rank, world_size):
        x = _values(rank, "broadcast", (7,)).to(device)
        dist.broadcast(x, src=src_of_world_size(world_size))
        return [x]

    return case


def all_gather(device, rank, world_size):
    x = _values(rank, "all_gather", (2, 3)).to(device)
    outputs = [torch.empty(2, 3, device=device) for _ in range(world_size)]
    dist.all_gather(outputs, x)
    return outputs


def all_gather_into_tensor(device, rank, world_size):
    x = _values(rank, "all_gather_into_tensor", (2, 3)).to(device)
    output = torch.empty(2 * world_size, 3, device=device)
    dist.all_gather_into_tensor(output, x)
    return [output]


def reduce_scatter_case(op_name: str):
    def case(device, rank, world_size):
        inputs = [_values(rank, f"reduce_scatter_{i}", (5,)).to(device) for i in range(world_size)]
        output = torch.empty(5, device=device)
        dist.reduce_scatter(output, inputs, op=REDUCE_OPS[op_name])
        return [output]

    return case


def reduce_scatter_tensor_case(op_name: str):
    def case(device, rank, world_size):
        x = _values(rank, "reduce_scatter_tensor", (4 * world_size, 2)).to(device)
        output = torch.empty(4, 2, device=device)
        dist.reduce_scatter_tensor(output, x, op=REDUCE_OPS[op_name])
        return [output]

    return case


def reduce(device, rank, world_size):
    x = _values(rank, "reduce", (6,)).to(device)
    dist.reduce(x, dst=0)
    return [x] if rank == 0 else []


def gather(device, rank, world_size):
    x = _values(rank, "gather", (3,)).to(device)
    outputs = [torch.empty(3, device=device) for _ in range(world_size)] if rank == 0 else None
    dist.gather(x, outputs, dst=0)
    return outputs or []


def scatter(device, rank, world_size):
    inputs = [_values(i, "scatter", (3,)).to(device) for i in range(world_size)] if rank == 0 else None
    output = torch.empty(3, device=device)
    dist.scatter(output, inputs, src=0)
    return [output]


def all_to_all_single(device, rank, world_size):
    x = _values(rank, "all_to_all_single", (2 * world_size,)).to(device)
    output = torch.empty(2 * world_size, device=device)
    dist.all_to_all_single(output, x)
    return [output]


def all_to_all(device, rank, world_size):
    inputs = [_values(rank, f"all_to_all_{i}", (2,)).to(device) for i in range(world_size)]
    outputs = [torch.empty(2, device=device) for _ in range(world_size)]
    dist.all_to_all(outputs, inputs)
    return outputs


def all_reduce_coalesced(device, rank, world_size):
    tensors = [_values(rank, f"coalesced_{i}", (i + 2,)).to(device) for i in range(3)]
    dist.all_reduce_coalesced(tensors)
    return tensors


def send_recv(device, rank, world_size):
    # Each rank sends to the next and receives from the previous one.
    x = _values(rank, "send_recv", (5,)).to(device)
    received = torch.empty(5, device=device)
    if rank % 2 == 0:
        dist.send(x, dst=(rank + 1) % world_size)
        dist.recv(received, src=(rank - 1) % world_size)
    else:
        dist.recv(received, src=(rank - 1) % world_size)
        dist.send(x, dst=(rank + 1) % world_size)
    return [received]


def isend_irecv(device, rank, world_size):
    x = _values(rank, "isend_irecv", (5,)).to(device)
    received = torch.empty(5, device=device)
    works = [dist.isend(x, dst=(rank + 1) % world_size), dist.irecv(received, src=(rank - 1) % world_size)]
    for work in works:
        work.wait()
    return [received]


def batch_isend_irecv(device, rank, world_size):
    x = _values(rank, "batch_isend_irecv", (5,)).to(device)
    received = torch.empty(5, device=device)
    ops = [
        dist.P2POp(dist.isend, x, (rank + 1) % world_size),
        dist.P2POp(dist.irecv, received, (rank - 1) % world_size),
    ]
    for work in dist.batch_isend_irecv(ops):
        work.wait()
    return [received]


# async_op=True: the work is waited for, then the tensors are read.


def async_all_reduce(device, rank, world_size):
    x = _values(rank, "async_all_reduce", (64,)).to(device) * 3  # produced by a kernel just before
    work = dist.all_reduce(x, async_op=True)
    work.wait()
    return [x, x * 2]


def async_broadcast(device, rank, world_size):
    x = _values(rank, "async_broadcast", (9,)).to(device)
    dist.broadcast(x, src=0, async_op=True).wait()
    return [x]


def async_all_gather_into_tensor(device, rank, world_size):
    x = _values(rank, "async_all_gather", (3,)).to(device)
    output = torch.empty(3 * world_size, device=device)
    dist.all_gather_into_tensor(output, x, async_op=True).wait()
    return [output]


def async_reduce_scatter_tensor(device, rank, world_size):
    x = _values(rank, "async_reduce_scatter", (2 * world_size,)).to(device)
    output = torch.empty(2, device=device)
    dist.reduce_scatter_tensor(output, x, async_op=True).wait()
    return [output]


def async_future(device, rank, world_size):
    # What DDP's communication hooks rely on: the work's future holds the
    # collective's own tensors, and callbacks chained on it see them.
    x = _values(rank, "async_future", (8,)).to(device)
    future = dist.all_reduce(x, async_op=True).get_future()
    doubled = future.then(lambda f: f.value()[0] * 2).wait()
    value = future.wait()
    assert len(value) == 1 and value[0].data_ptr() == x.data_ptr(), "the future's value is not the reduced tensor"
    return [value[0], doubled]


def async_dropped_input(device, rank, world_size):
    # The caller drops its tensors before waiting: the work keeps them alive,
    # and the memory freed afterwards is not handed out while the engine may
    # still use it.
    outputs = torch.empty(4 * world_size, device=device)
    work = dist.all_gather_into_tensor(outputs, _values(rank, "dropped", (4,)).to(device), async_op=True)
    scratch = [torch.full((4,), -1.0, device=device) for _ in range(8)]  # reuses freed memory, if any
    work.wait()
    del scratch
    return [outputs]


COLLECTIVES = {
    **{
        f"all_reduce_{op}_{str(dtype).removeprefix('torch.')}": all_reduce_case(op, dtype)
        for op in REDUCE_OPS
        for dtype in (torch.float32, torch.int64)
    },
    "all_reduce_complex64": all_reduce_complex,
    "all_reduce_non_contiguous": all_reduce_non_contiguous,
    "broadcast_from_first": broadcast_case(lambda world_size: 0),
    "broadcast_from_last": broadcast_case(lambda world_size: world_size - 1),
    "all_gather": all_gather,
    "all_gather_into_tensor": all_gather_into_tensor,
    "reduce_scatter_sum": reduce_scatter_case("sum"),
    "reduce_scatter_max": reduce_scatter_case("max"),
    "reduce_scatter_tensor_sum": reduce_scatter_tensor_case("sum"),
    "reduce_scatter_tensor_min": reduce_scatter_tensor_case("min"),
    "reduce": reduce,
    "gather": gather,
    "scatter": scatter,
    "all_to_all_single": all_to_all_single,
    "all_to_all": all_to_all,
    "all_reduce_coalesced": all_reduce_coalesced,
    "async_all_reduce": async_all_reduce,
    "async_broadcast": async_broadcast,
    "async_all_gather_into_tensor": async_all_gather_into_tensor,
    "async_reduce_scatter_tensor": async_reduce_scatter_tensor,
    "async_future": async_future,
    "async_dropped_input": async_dropped_input,
}
# Point-to-point needs a peer.
PEER_TO_PEER = {"send_recv": send_recv, "isend_irecv": isend_irecv, "batch_isend_irecv": batch_isend_irecv}


# --- DistributedDataParallel


def ddp_model() -> nn.Module:
    return nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 3))


def ddp_data():
    g = torch.Generator().manual_seed(7)
    return [
        (torch.randn(DDP_GLOBAL_BATCH, 6, generator=g), torch.randn(DDP_GLOBAL_BATCH, 3, generator=g))
        for _ in range(DDP_STEPS)
    ]


def train(model: nn.Module, shards) -> dict:
    """SGD over `shards` (one (inputs, labels) pair per step) with the mean
    squared error. The for-loop implementation on every device: left to its
    default, torch.optim takes foreach for accel (as for cuda) and the for-loop
    for cpu, and the runs are compared across devices."""
    device = next(model.parameters()).device
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, foreach=False)
    losses = []
    for inputs, labels in shards:
        optimizer.zero_grad()
        loss = nn.functional.mse_loss(model(inputs.to(device)), labels.to(device))
        loss.backward()
        optimizer.step()
        losses.append(loss.detach())
    is_ddp = isinstance(model, nn.parallel.DistributedDataParallel)
    module = model.module if is_ddp else model
    results = {
        "params": [p.detach() for p in module.parameters()],
        "grads": [p.grad for p in module.parameters()],
        "losses": losses,
    }
    if is_ddp:
        # DDP's logger times the last iteration it sampled with the device's timer.
        logging_data = model._get_ddp_logging_data()
        timed = ("forward_compute_time", "backward_compute_time", "backward_comm_time")
        results["timing_ns"] = {name: logging_data.get(name) for name in timed}
    return results


def ddp_train(device: torch.device, rank: int, world_size: int, **ddp_args) -> dict:
    # Every rank initialises differently: DDP must broadcast rank 0's
    # parameters (seed 0) before training.
    torch.manual_seed(rank)
    model = ddp_model().to(device)
    device_ids = None if device.index is None else [device.index]  # a cpu module takes none
    ddp = nn.parallel.DistributedDataParallel(model, device_ids=device_ids, **ddp_args)
    per_rank = DDP_GLOBAL_BATCH // world_size
    mine = slice(rank * per_rank, (rank + 1) * per_rank)
    shards = [(inputs[mine], labels[mine]) for inputs, labels in ddp_data()]
    with _cases.deterministic():
        return train(ddp, shards)


def single_process_train(device: torch.device) -> dict:
    """The reference DDP must reproduce: one process, the whole batch, rank 0's initialisation."""
    torch.manual_seed(0)
    model = ddp_model().to(device)
    with _cases.deterministic():
        return train(model, ddp_data())


# Small buckets: several allreduces per step, each parameter in its own bucket.
DDP_ARGS = {"bucket_cap_mb": 1e-4}


def run_accel(rank: int, world_size: int, store: str) -> dict:
    import torch_accel  # noqa: F401 - registers accel and its c10d backend

    target = torch_accel._target_device_type()
    engine = dist.Backend.default_device_backend_map[target]
    torch.accel.set_device(rank)
    accel = torch.device("accel", rank)
    # cpu is a single device; other targets have one per rank, as accel does.
    target_device = torch.device(target) if target == "cpu" else torch.device(target, rank)
    backends = {"cpu": "gloo", "accel": "accel", target: engine}
    dist.init_process_group(
        ",".join(f"{device}:{backend}" for device, backend in backends.items()),
        init_method=f"file://{store}",
        rank=rank,
        world_size=world_size,
        timeout=TIMEOUT,
    )
    results = {"world_size": world_size, "target": target, "engine": engine}

    cases = dict(COLLECTIVES, **(PEER_TO_PEER if world_size > 1 else {}))
    for name, case in cases.items():
        results[name] = {
            "accel": to_cpu(outcome(case, accel, rank, world_size)),
            "target": to_cpu(outcome(case, target_device, rank, world_size)),
        }

    # Collectives on a non-default accel stream.
    stream = torch.accel.Stream()
    with torch.accel.stream(stream):
        results["on_side_stream"] = {"accel": to_cpu(outcome(async_all_reduce, accel, rank, world_size))}
    stream.synchronize()
    results["on_side_stream"]["target"] = to_cpu(outcome(async_all_reduce, target_device, rank, world_size))

    # Barrier: through accel's backend (an accel-only group), the last rank
    # arriving late; the others must wait for it. What is checked is order, not
    # time: the last rank writes a key to the group's store just before it
    # enters the barrier, and every rank must see that key once it has left
    # (the late start makes a barrier that lets ranks run ahead miss it).
    accel_group = dist.new_group(backend="accel")

    def barrier():
        store = dist.distributed_c10d._get_default_store()
        key = "barrier: the last rank is in"
        if rank == world_size - 1:
            time.sleep(0.5)
            store.set(key, "1")
        dist.barrier(group=accel_group)
        saw_the_last_rank = store.check([key])
        dist.barrier(group=accel_group, async_op=True).wait()
        return saw_the_last_rank

    results["barrier_saw_the_last_rank"] = outcome(barrier)

    results["ddp"] = to_cpu(outcome(ddp_train, accel, rank, world_size, **DDP_ARGS))
    results["ddp_gradient_as_bucket_view"] = to_cpu(
        outcome(ddp_train, accel, rank, world_size, gradient_as_bucket_view=True, **DDP_ARGS)
    )
    results["single_process"] = to_cpu(outcome(single_process_train, accel))

    dist.destroy_process_group()
    return results


def run_target_ddp(rank: int, world_size: int, store: str, target: str, engine: str) -> dict:
    assert "torch_accel" not in sys.modules
    # cpu is a single device; other targets have one per rank.
    device = torch.device(target) if target == "cpu" else torch.device(target, rank)
    if device.index is not None:
        getattr(torch, target).set_device(device)
    dist.init_process_group(engine, init_method=f"file://{store}", rank=rank, world_size=world_size, timeout=TIMEOUT)
    results = {"ddp": to_cpu(outcome(ddp_train, device, rank, world_size, **DDP_ARGS))}
    dist.destroy_process_group()
    return results


def main() -> None:
    mode, rank, world_size, store, output_dir = sys.argv[1:6]
    rank, world_size = int(rank), int(world_size)
    if mode == "accel":
        results = run_accel(rank, world_size, store)
    else:
        results = run_target_ddp(rank, world_size, store, *sys.argv[6:8])
    torch.save(results, os.path.join(output_dir, f"rank{rank}.pt"))


if __name__ == "__main__":
    main()
