"""A training program written for CUDA the way people write them, for test_transfer_to_accel.py.

    python _cuda_program.py OUTPUT.pt

It names cuda only (``torch.cuda.is_available()``, ``.cuda()``, ``torch.cuda.*``,
``map_location="cuda"``, ``init_process_group("nccl")``) and falls back to the
cpu (and Gloo) where CUDA is not available. Run under accel's opt-in
(TORCH_ACCEL_TRANSFER_TO_ACCEL=1) it runs on accel; run without it on the host
runtime it runs on the cpu, on a GPU machine on CUDA: the target's results.
With torch.distributed's environment variables (RANK, WORLD_SIZE, MASTER_ADDR,
MASTER_PORT) it trains with DistributedDataParallel, one rank per process.
It writes what it computed (on the cpu) and what it saw to OUTPUT.pt.
"""

import os
import sys
import tempfile

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, TensorDataset


def main(output: str) -> None:
    distributed = "WORLD_SIZE" in os.environ
    rank = int(os.environ.get("RANK", "0"))
    use_cuda = torch.cuda.is_available()
    if distributed:
        dist.init_process_group("nccl" if use_cuda else "gloo")
    if use_cuda:
        torch.cuda.set_device(rank % torch.cuda.device_count())
        device = torch.device("cuda", torch.cuda.current_device())
    else:
        device = torch.device("cpu")

    torch.manual_seed(0)
    if use_cuda:
        torch.cuda.manual_seed_all(0)
    model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 1))
    model = model.cuda() if use_cuda else model.to(device)
    trained = DistributedDataParallel(model, device_ids=[device.index] if use_cuda else None) if distributed else model
    optimizer = torch.optim.Adam(trained.parameters(), lr=1e-2)

    generator = torch.Generator().manual_seed(1 + rank)
    data = torch.randn(64, 8, generator=generator)
    loader = DataLoader(TensorDataset(data, data.sum(1, keepdim=True)), batch_size=16, pin_memory=use_cuda)
    if use_cuda:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
    losses = []
    for epoch in range(2):
        for x, y in loader:
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
            loss = F.mse_loss(trained(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
    # The device's generator (the cpu's has the cpu's one: seeded alike, they draw alike).
    if use_cuda:
        torch.cuda.manual_seed(5)
    else:
        torch.manual_seed(5)
    noise = torch.randn(4, device="cuda" if use_cuda else "cpu")
    seen = {}
    if use_cuda:
        end.record()
        torch.cuda.synchronize()
        seen = {
            "elapsed_ms": start.elapsed_time(end),
            "memory_allocated": torch.cuda.memory_allocated(),
            "max_memory_allocated": torch.cuda.max_memory_allocated(),
            "device_count": torch.cuda.device_count(),
            "is_cuda": next(model.parameters()).is_cuda,
        }

    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "model.pt")
        torch.save(model.state_dict(), path)
        reloaded = torch.load(path, map_location="cuda" if use_cuda else "cpu")
    model.load_state_dict(reloaded)
    if distributed:
        dist.destroy_process_group()
    torch.save(
        {
            "losses": losses,
            "noise": noise.cpu(),
            "state": {name: value.cpu() for name, value in model.state_dict().items()},
            "parameter_device": str(next(model.parameters()).device),
            "reloaded_device": str(next(iter(reloaded.values())).device),
            "noise_device": str(noise.device),
            "seen": seen,
        },
        output,
    )


if __name__ == "__main__":
    main(sys.argv[1])
