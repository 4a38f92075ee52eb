"""One rank of test_distributed_breadth.py's multi-process run.

    python _distributed_breadth_worker.py accel RANK WORLD_SIZE STORE OUTPUT_DIR

    python _distributed_breadth_worker.py accel RANK 4 STORE OUTPUT_DIR 2x2

(the command line of _distributed_worker.py, so that test_distributed.py's
launcher runs it). The second form runs a 2 x 2 DeviceMesh over 4 ranks.

Rank r works on accel:r in a process group with Gloo for cpu and accel's
backend for accel, and runs every scenario twice, on accel and on cpu (the
host runtime's target, whose kernels and engine accel runs there): async
collectives on a side stream, new_group/split_group, a 1-D DeviceMesh,
DTensor, FSDP2 with a mixed-precision policy, tensor parallelism and
distributed checkpoints (DCP) resharded between 1 and 2 processes.

Each scenario's outcome on each device, a value or the exception it raised,
goes to OUTPUT_DIR/rank<r>.pt (tensors as cpu copies with their device);
test_distributed_breadth.py compares them. A failing scenario only records its
failure, so the others still run and the ranks stay in step.
"""

import contextlib
import os
import sys

import torch
import torch.distributed as dist
from torch import nn

from _distributed_worker import TIMEOUT, outcome, to_cpu

DEVICES = ("accel", "cpu")


def _values(rank: int, case: str, shape, dtype=torch.float32) -> torch.Tensor:
    g = torch.Generator().manual_seed(1000 * rank + sum(map(ord, case)))
    return torch.randn(shape, generator=g, dtype=dtype)


def _device(device_type: str, rank: int) -> torch.device:
    return torch.device(device_type, rank) if device_type == "accel" else torch.device("cpu")


def _side_stream(device_type: str):
    return torch.accel.stream(torch.accel.Stream()) if device_type == "accel" else contextlib.nullcontext()


# --- async collectives on a non-default stream


def async_collectives(device_type: str, rank: int, world_size: int) -> dict:
    """Every collective with async_op=True on a side stream, read after wait().

    Each input is produced by a kernel on that stream just before the
    collective, and each result is read by a kernel after wait(): the
    collective must be ordered after the one and before the other."""
    device = _device(device_type, rank)
    peer_next, peer_prev = (rank + 1) % world_size, (rank - 1) % world_size
    results = {}
    with _side_stream(device_type):
        x = _values(rank, "all_reduce", (16,)).to(device) * 3
        dist.all_reduce(x, async_op=True).wait()
        results["all_reduce"] = x * 2

        x = _values(rank, "all_gather", (3, 2)).to(device) + 1
        out = torch.empty(3 * world_size, 2, device=device)
        dist.all_gather_into_tensor(out, x, async_op=True).wait()
        results["all_gather_into_tensor"] = out * 2

        x = _values(rank, "reduce_scatter", (4 * world_size,)).to(device) * 2
        out = torch.empty(4, device=device)
        dist.reduce_scatter_tensor(out, x, async_op=True).wait()
        results["reduce_scatter_tensor"] = out + 1

        x = _values(rank, "all_to_all", (3 * world_size,)).to(device) - 1
        out = torch.empty(3 * world_size, device=device)
        dist.all_to_all_single(out, x, async_op=True).wait()
        results["all_to_all_single"] = out * 3

        x = _values(rank, "broadcast", (7,)).to(device) * 5
        dist.broadcast(x, src=world_size - 1, async_op=True).wait()
        results["broadcast"] = x + 0

        if world_size > 1:
            x = _values(rank, "send_recv", (5,)).to(device) * 2
            received = torch.empty(5, device=device)
            if rank % 2 == 0:
                dist.send(x, dst=peer_next)
                dist.recv(received, src=peer_prev)
            else:
                dist.recv(received, src=peer_prev)
                dist.send(x, dst=peer_next)
            results["send_recv"] = received * 1

            x = _values(rank, "batch", (6,)).to(device) * 2
            received = torch.empty(6, device=device)
            ops = [dist.P2POp(dist.isend, x, peer_next), dist.P2POp(dist.irecv, received, peer_prev)]
            for work in dist.batch_isend_irecv(ops):
                work.wait()
            results["batch_isend_irecv"] = received * 1

        dist.barrier(async_op=True).wait()
    if device_type == "accel":
        torch.accel.synchronize()
    return results


# --- groups


def groups(device_type: str, rank: int, world_size: int) -> dict:
    device = _device(device_type, rank)
    results = {}
    everyone = dist.new_group(ranks=list(range(world_size)))
    x = _values(rank, "new_group", (5,)).to(device)
    dist.all_reduce(x, group=everyone)
    results["new_group_all"] = x
    # A group of rank 0 alone: only rank 0 takes part.
    alone = dist.new_group(ranks=[0])
    if rank == 0:
        x = _values(rank, "alone", (4,)).to(device)
        dist.all_reduce(x, group=alone)
        results["new_group_one"] = x
    # new_subgroups: one group per rank.
    mine, _ = dist.new_subgroups(group_size=1)
    x = _values(rank, "subgroup", (3,)).to(device)
    dist.all_reduce(x, group=mine)
    results["new_subgroups"] = x
    return results


def split(device_type: str, rank: int, world_size: int) -> dict:
    device = _device(device_type, rank)
    group = dist.split_group(split_ranks=[[r] for r in range(world_size)])
    x = _values(rank, "split", (3,)).to(device)
    dist.all_reduce(x, group=group)
    return {"split_group": x}


# --- DeviceMesh and DTensor


def _mesh(device_type: str, world_size: int):
    from torch.distributed.device_mesh import DeviceMesh

    return DeviceMesh(device_type, list(range(world_size)), mesh_dim_names=("dp",))


def device_mesh(device_type: str, rank: int, world_size: int) -> dict:
    mesh = _mesh(device_type, world_size)
    assert mesh.device_type == device_type, mesh.device_type
    device = _device(device_type, rank)
    x = _values(rank, "mesh", (6,)).to(device)
    dist.all_reduce(x, group=mesh.get_group("dp"))
    return {
        "all_reduce": x,
        "coordinate": list(mesh.get_coordinate()),
        "local_rank": mesh.get_local_rank("dp"),
        "size": mesh.size(),
        "mesh": mesh.mesh.tolist(),
    }


def dtensor(device_type: str, rank: int, world_size: int) -> dict:
    from torch.distributed.tensor import DTensor, Partial, Replicate, Shard, distribute_tensor

    mesh = _mesh(device_type, world_size)
    device = _device(device_type, rank)
    # The same global tensor on every rank (distribute_tensor's contract).
    full = _values(0, "dtensor", (4 * world_size, 6)).to(device)
    row = distribute_tensor(full, mesh, [Shard(0)])
    col = row.redistribute(mesh, [Shard(1)])
    replicated = col.redistribute(mesh, [Replicate()])
    # Partial: each rank holds its own summand; redistributing reduces them.
    summand = _values(rank, "dtensor_summand", (2 * world_size, 3)).to(device)
    partial = DTensor.from_local(summand, mesh, [Partial()])
    summed = partial.redistribute(mesh, [Replicate()])
    scattered = partial.redistribute(mesh, [Shard(0)])  # reduce_scatter
    # Ops on DTensors: a sharded matmul whose result is Partial, then reduced.
    weight = distribute_tensor(_values(0, "dtensor_w", (6, 3)).to(device), mesh, [Shard(0)])
    product = col @ weight
    return {
        "row_local": row.to_local(),
        "col_local": col.to_local(),
        "replicated_local": replicated.to_local(),
        "partial_local": partial.to_local(),
        "summed": summed.to_local(),
        "scattered_local": scattered.to_local(),
        "full_tensor": col.full_tensor(),
        "product_placements": str(product.placements),
        "product": product.full_tensor(),
    }


# --- FSDP2 with a mixed-precision policy


def _mlp() -> nn.Module:
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 4))


# The optimizers name their implementation (foreach=False, torch.optim's
# for-loop): left to its default, torch.optim takes foreach for accel (as for
# cuda) and the for-loop for cpu, and accel is compared with a cpu run here.
FSDP_STEPS = 3
FSDP_BATCH = 4


def fsdp(device_type: str, rank: int, world_size: int) -> dict:
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    mesh = _mesh(device_type, world_size)
    device = _device(device_type, rank)
    torch.manual_seed(0)  # the same initial model on every rank (FSDP2 does not broadcast)
    model = _mlp().to(device)
    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for layer in model:
        if isinstance(layer, nn.Linear):
            fully_shard(layer, mesh=mesh, mp_policy=policy)
    fully_shard(model, mesh=mesh, mp_policy=policy)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, foreach=False)
    g = torch.Generator().manual_seed(100 + rank)  # each rank its own batch
    losses = []
    for _ in range(FSDP_STEPS):
        inputs, labels = torch.randn(FSDP_BATCH, 8, generator=g), torch.randn(FSDP_BATCH, 4, generator=g)
        optimizer.zero_grad()
        loss = nn.functional.mse_loss(model(inputs.to(device)).float(), labels.to(device))
        loss.backward()
        optimizer.step()
        losses.append(loss.detach())
    return {
        "losses": losses,
        "local_params": [p.to_local().detach() for p in model.parameters()],
        "local_grads": [p.grad.to_local() for p in model.parameters()],
        "param_dtypes": [str(p.dtype) for p in model.parameters()],
        "full_params": [p.full_tensor().detach() for p in model.parameters()],
    }


def fsdp_cpu_offload(device_type: str, rank: int, world_size: int) -> dict:
    """FSDP2 with its sharded parameters, gradients and optimizer step on cpu
    (CPUOffloadPolicy); forward and backward run on the mesh's device."""
    from torch.distributed.fsdp import CPUOffloadPolicy, fully_shard

    mesh = _mesh(device_type, world_size)
    device = _device(device_type, rank)
    torch.manual_seed(0)
    model = _mlp()
    fully_shard(model, mesh=mesh, offload_policy=CPUOffloadPolicy(pin_memory=device_type != "cpu"))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, foreach=False)
    g = torch.Generator().manual_seed(200 + rank)
    losses = []
    for _ in range(FSDP_STEPS):
        inputs, labels = torch.randn(FSDP_BATCH, 8, generator=g), torch.randn(FSDP_BATCH, 4, generator=g)
        optimizer.zero_grad()
        loss = nn.functional.mse_loss(model(inputs.to(device)), labels.to(device))
        loss.backward()
        optimizer.step()
        losses.append(loss.detach())
    return {
        "losses": losses,
        "param_devices": [str(p.to_local().device) for p in model.parameters()],
        "local_params": [p.to_local().detach().to(device) for p in model.parameters()],
    }


# --- tensor parallel


def tensor_parallel(device_type: str, rank: int, world_size: int) -> dict:
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    mesh = _mesh(device_type, world_size)
    device = _device(device_type, rank)
    torch.manual_seed(1)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 8)).to(device)
    parallelize_module(model, mesh, {"0": ColwiseParallel(), "2": RowwiseParallel()})
    inputs = _values(0, "tp_inputs", (5, 8)).to(device)  # the same batch on every rank
    output = model(inputs)
    output.sum().backward()
    return {
        "output": output,
        "local_weights": [p.to_local().detach() for p in model.parameters()],
        "local_grads": [p.grad.to_local() for p in model.parameters()],
        "full_grads": [p.grad.full_tensor() for p in model.parameters()],
    }


def sequence_parallel(device_type: str, rank: int, world_size: int) -> dict:
    """SequenceParallel LayerNorm (sequence-sharded activations) feeding a
    ColwiseParallel/RowwiseParallel pair that gathers and re-shards them."""
    from torch.distributed.tensor import Shard
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        RowwiseParallel,
        SequenceParallel,
        parallelize_module,
    )

    mesh = _mesh(device_type, world_size)
    device = _device(device_type, rank)
    torch.manual_seed(2)
    model = nn.Sequential(nn.LayerNorm(8), nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 8)).to(device)
    plan = {
        "0": SequenceParallel(),
        "1": ColwiseParallel(input_layouts=Shard(1)),
        "3": RowwiseParallel(output_layouts=Shard(1)),
    }
    parallelize_module(model, mesh, plan)
    # This rank's slice of the sequence (dim 1) of one global batch.
    inputs = _values(0, "sp_inputs", (2, 3 * world_size, 8)).chunk(world_size, 1)[rank].to(device)
    output = model(inputs)
    output.sum().backward()
    return {
        "output": output.to_local() if hasattr(output, "to_local") else output,
        "full_grads": [p.grad.full_tensor() for p in model.parameters()],
    }


def mesh_2d(device_type: str, rank: int, world_size: int) -> dict:
    """A 2-D mesh (1 x world_size: "dp" x "tp"): sub-meshes, a DTensor over
    both dims, and FSDP2 over "dp" composed with tensor parallel over "tp"."""
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    mesh = DeviceMesh(device_type, [list(range(world_size))], mesh_dim_names=("dp", "tp"))
    device = _device(device_type, rank)
    x = _values(rank, "mesh_2d", (4,)).to(device)
    dist.all_reduce(x, group=mesh["tp"].get_group())
    full = _values(0, "mesh_2d_full", (2 * world_size, 4)).to(device)
    sharded = distribute_tensor(full, mesh, [Replicate(), Shard(0)])
    torch.manual_seed(3)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 8)).to(device)
    parallelize_module(model, mesh["tp"], {"0": ColwiseParallel(), "2": RowwiseParallel()})
    fully_shard(model, mesh=mesh["dp"])
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, foreach=False)
    inputs = _values(0, "mesh_2d_inputs", (5, 8)).to(device)
    losses = []
    for _ in range(2):
        optimizer.zero_grad()
        loss = model(inputs).pow(2).mean()
        loss.backward()
        optimizer.step()
        losses.append(loss.detach())
    return {
        "tp_all_reduce": x,
        "coordinate": list(mesh.get_coordinate()),
        "shape": list(mesh.shape),
        "sharded_local": sharded.to_local(),
        "full_tensor": sharded.full_tensor(),
        "losses": losses,
        "full_params": [p.full_tensor().detach() for p in model.parameters()],
    }


# --- distributed checkpoints


def _dcp_state(device_type: str, rank: int, world_size: int, seed_case: str) -> dict:
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor

    mesh = _mesh(device_type, world_size)
    device = _device(device_type, rank)
    weight = _values(0, f"{seed_case}_w", (4 * world_size, 3)).to(device)
    bias = _values(0, f"{seed_case}_b", (5,)).to(device)
    return {
        "weight": distribute_tensor(weight, mesh, [Shard(0)]),
        "bias": distribute_tensor(bias, mesh, [Replicate()]),
        "step": torch.tensor(7, device=device),
    }


def checkpoint(device_type: str, rank: int, world_size: int, output_dir: str) -> dict:
    """Saves a sharded state dict (read back in one process by the test), and
    loads, resharded onto both ranks, the one the test saved in one process."""
    import torch.distributed.checkpoint as dcp

    saved = _dcp_state(device_type, rank, world_size, "dcp")
    dcp.save(saved, checkpoint_id=os.path.join(output_dir, f"dcp_{device_type}"))
    state = _dcp_state(device_type, rank, world_size, "dcp_empty")
    for value in state.values():
        value.zero_() if not hasattr(value, "to_local") else value.to_local().zero_()
    dcp.load(state, checkpoint_id=os.path.join(output_dir, "dcp_one_process"))
    return {
        "weight_local": state["weight"].to_local(),
        "bias_local": state["bias"].to_local(),
        "step": state["step"],
    }


def mesh_2x2(device_type: str, rank: int, world_size: int) -> dict:
    """A 2 x 2 mesh ("dp" x "tp") over 4 ranks: collectives along each dim, a
    DTensor sharded over both, and FSDP2 over "dp" with tensor parallel over "tp"."""
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    mesh = DeviceMesh(device_type, [[0, 1], [2, 3]], mesh_dim_names=("dp", "tp"))
    device = _device(device_type, rank)
    along = {}
    for dim in ("dp", "tp"):
        x = _values(rank, f"mesh_2x2_{dim}", (4,)).to(device)
        dist.all_reduce(x, group=mesh[dim].get_group())
        along[dim] = x
    full = _values(0, "mesh_2x2_full", (4, 6)).to(device)
    sharded = distribute_tensor(full, mesh, [Shard(0), Shard(1)])
    regathered = sharded.redistribute(mesh, [Replicate(), Shard(0)])
    torch.manual_seed(4)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 8)).to(device)
    parallelize_module(model, mesh["tp"], {"0": ColwiseParallel(), "2": RowwiseParallel()})
    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    fully_shard(model, mesh=mesh["dp"], mp_policy=policy)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, foreach=False)
    # Each dp replica its own batch; the tp ranks of a replica share it.
    inputs = _values(mesh.get_coordinate()[0], "mesh_2x2_inputs", (3, 8)).to(device)
    losses = []
    for _ in range(2):
        optimizer.zero_grad()
        loss = model(inputs).float().pow(2).mean()
        loss.backward()
        optimizer.step()
        losses.append(loss.detach())
    return {
        "along_dp": along["dp"],
        "along_tp": along["tp"],
        "coordinate": list(mesh.get_coordinate()),
        "sharded_local": sharded.to_local(),
        "regathered_local": regathered.to_local(),
        "full_tensor": sharded.full_tensor(),
        "losses": losses,
        "full_params": [p.full_tensor().detach() for p in model.parameters()],
    }


def run(rank: int, world_size: int, store: str, output_dir: str, scenario_set: str) -> dict:
    import torch_accel  # noqa: F401 - registers accel and its c10d backend

    torch.accel.set_device(rank)
    dist.init_process_group(
        "cpu:gloo,accel:accel",
        init_method=f"file://{store}",
        rank=rank,
        world_size=world_size,
        timeout=TIMEOUT,
        device_id=torch.device("accel", rank),
    )
    scenarios = {"mesh_2x2": mesh_2x2} if scenario_set == "2x2" else {
        "async_collectives": async_collectives,
        "groups": groups,
        "split_group": split,
        "device_mesh": device_mesh,
        "dtensor": dtensor,
        "fsdp": fsdp,
        "fsdp_cpu_offload": fsdp_cpu_offload,
        "tensor_parallel": tensor_parallel,
        "sequence_parallel": sequence_parallel,
        "mesh_2d": mesh_2d,
    }
    results = {"world_size": world_size, "target": torch_accel._target_device_type()}
    for name, scenario in scenarios.items():
        results[name] = {device: to_cpu(outcome(scenario, device, rank, world_size)) for device in DEVICES}
    if scenario_set != "2x2":
        results["checkpoint"] = {
            device: to_cpu(outcome(checkpoint, device, rank, world_size, output_dir)) for device in DEVICES
        }
    dist.destroy_process_group()
    return results


def main() -> None:
    mode, rank, world_size, store, output_dir = sys.argv[1:6]
    assert mode == "accel", mode
    scenario_set = sys.argv[6] if len(sys.argv) > 6 else "all"
    results = run(int(rank), int(world_size), store, output_dir, scenario_set)
    torch.save(results, os.path.join(output_dir, f"rank{rank}.pt"))


if __name__ == "__main__":
    main()
