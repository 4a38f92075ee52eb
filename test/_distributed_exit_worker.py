"""One rank of a small distributed program, as a user writes it: the default
backend (or one named on the command line), DDP and FSDP2 training on accel,
then exit with or without destroy_process_group(). test_distributed.py checks
that every rank exits 0 and what it reports.

Usage: _distributed_exit_worker.py RANK WORLD_SIZE STORE OUTPUT DESTROY(0|1) [BACKEND] [PROGRAM]

BACKEND "" is the default backend; PROGRAM is "ddp+fsdp" (the default) or "ddp".
"""

import sys

import torch
import torch.distributed as dist
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from torch.nn.parallel import DistributedDataParallel


def model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4)).to("accel")


def train(module: torch.nn.Module, rank: int, steps: int = 2) -> list[float]:
    optimizer = torch.optim.SGD(module.parameters(), lr=0.1)
    generator = torch.Generator().manual_seed(rank)
    losses = []
    for _ in range(steps):
        x = torch.randn(4, 8, generator=generator).to("accel")
        loss = module(x).pow(2).mean()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    return losses


def main() -> None:
    rank, world_size, store, output, destroy = sys.argv[1:6]
    rank, world_size = int(rank), int(world_size)
    backend = (sys.argv[6] if len(sys.argv) > 6 else "") or None
    program = sys.argv[7] if len(sys.argv) > 7 else "ddp+fsdp"
    import torch_accel  # noqa: F401 - autoload imports it too; named for clarity

    torch.accel.set_device(rank)
    dist.init_process_group(backend, init_method=f"file://{store}", rank=rank, world_size=world_size)
    results = {"backend": dist.get_backend(), "config": dist.get_backend_config()}
    results["ddp"] = train(DistributedDataParallel(model(), device_ids=[rank]), rank)
    if program == "ddp":
        torch.save(results, output)
        if destroy == "1":
            dist.destroy_process_group()
        return
    fsdp = model()
    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for layer in fsdp:
        if isinstance(layer, torch.nn.Linear):
            fully_shard(layer, mp_policy=policy)
    fully_shard(fsdp, mp_policy=policy)
    results["fsdp"] = train(fsdp, rank)
    results["fsdp_params"] = [p.full_tensor().float().cpu() for p in fsdp.parameters()]
    torch.save(results, output)
    if destroy == "1":
        dist.destroy_process_group()
    # Otherwise the process exits with the group (and FSDP's state) alive, as
    # a program that forgets destroy_process_group() does.


if __name__ == "__main__":
    main()
