"""A training script written only against torch.accelerator, as PyTorch
recommends for device-agnostic code: it never names a device type.

test_accelerator.py runs it in a process that imports torch_accel (where the
accelerator is accel) and in one that does not (where it is the target: cuda,
or no accelerator, hence the CPU), and compares the two.

Run directly: python _device_agnostic_training.py OUTPUT
"""

import sys

import torch
from torch import nn


def train(steps: int = 5) -> tuple[dict, nn.Module]:
    accelerator = torch.accelerator.current_accelerator(check_available=True)
    device = accelerator if accelerator is not None else torch.device("cpu")
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 4)).to(device)
    # foreach named: left to its default, torch.optim takes foreach on an
    # accelerator and the for-loop on the CPU, and the two runs are compared.
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, foreach=True)
    record: dict = {
        "device": str(device),
        "parameter_devices": sorted({str(p.device) for p in model.parameters()}),
        "losses": [],
        "memory_allocated": [],
    }
    if accelerator is not None:
        torch.accelerator.set_device_index(0)
        record["device_index"] = torch.accelerator.current_device_index()
        torch.accelerator.reset_peak_memory_stats()
        side_stream = torch.Stream(device=accelerator)
    for step in range(steps):
        g = torch.Generator().manual_seed(step)
        x = torch.randn(32, 16, generator=g).to(device)
        y = torch.randn(32, 4, generator=g).to(device)
        if accelerator is not None:
            # The step runs on a side stream, ordered after the input copies;
            # the default stream waits for it before the next copies.
            default_stream = torch.accelerator.current_stream()
            side_stream.wait_stream(default_stream)
            torch.accelerator.set_stream(side_stream)
        loss = nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if accelerator is not None:
            torch.accelerator.set_stream(default_stream)
            default_stream.wait_stream(side_stream)
            torch.accelerator.synchronize()
            record["memory_allocated"].append(torch.accelerator.memory_allocated())
        record["losses"].append(loss.detach().cpu())
    if accelerator is not None:
        record["max_memory_allocated"] = torch.accelerator.max_memory_allocated()
        record["memory_reserved"] = torch.accelerator.memory_reserved()
    record["state"] = {name: t.cpu() for name, t in model.state_dict().items()}
    return record, model


if __name__ == "__main__":
    torch.save(train()[0], sys.argv[1])
