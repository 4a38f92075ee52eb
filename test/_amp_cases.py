"""Mixed-precision training with a GradScaler, run on accel (in the test
process) and on the target device in a process without torch_accel (CUDA
backward cannot run next to accel; see _cases.py).

The autocast policy accel follows is CUDA's. The target reference therefore
spells that policy out with explicit casts, which needs no autocast and runs
on any device: CUDA's autocast casts with the same ``Tensor.to`` calls, so
the autograd graphs and kernels, hence the bits, are the same. On a CUDA
target the reference also runs under ``torch.autocast("cuda")`` itself.

This module must not import torch_accel.
"""

import sys

import torch
from torch import nn
from torch.nn import functional as F

STEPS = 6
# Gradient entries made non-finite after backward, by step: GradScaler must
# skip those optimizer steps and back the scale off.
NON_FINITE_GRADIENTS = {2: float("inf"), 4: float("nan")}


def make_model() -> nn.Sequential:
    torch.manual_seed(0)  # initialised on the CPU: the same weights everywhere
    return nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))


def batch(device: str, step: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(step)
    return torch.randn(8, 16, generator=g).to(device), torch.randn(8, 4, generator=g).to(device)


def loss_under_autocast(model: nn.Module, x: torch.Tensor, y: torch.Tensor, device_type: str) -> torch.Tensor:
    with torch.autocast(device_type, dtype=torch.float16):
        return F.mse_loss(model(x), y)


def loss_with_explicit_casts(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """CUDA's float16 autocast policy for this model, written out: linear runs
    in float16 (inputs, weights and biases cast), relu in its input's dtype,
    mse_loss in float32."""
    first, second = model[0], model[2]
    h = F.linear(x.half(), first.weight.half(), first.bias.half())
    out = F.linear(F.relu(h), second.weight.half(), second.bias.half())
    return F.mse_loss(out.float(), y)


def train_with_grad_scaler(device: str, policy: str) -> dict:
    """Train with torch.amp.GradScaler on ``device``; ``policy`` is
    "autocast" (torch.autocast on the device's type) or "explicit"."""
    device_type = torch.device(device).type
    model = make_model().to(device)
    # foreach named: left to its default, torch.optim takes foreach for accel
    # (as for cuda) and the for-loop for cpu, and the runs are compared.
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, foreach=True)
    scaler = torch.amp.GradScaler(device_type, init_scale=2.0**10, growth_interval=2)
    losses, scales, skipped = [], [], []
    for step in range(STEPS):
        x, y = batch(device, step)
        if policy == "autocast":
            loss = loss_under_autocast(model, x, y, device_type)
        else:
            loss = loss_with_explicit_casts(model, x, y)
        optimizer.zero_grad()
        scaler.scale(loss).backward()
        if step in NON_FINITE_GRADIENTS:
            with torch.no_grad():
                model[0].weight.grad[0, 0] = NON_FINITE_GRADIENTS[step]
        before = [p.detach().clone() for p in model.parameters()]
        scaler.step(optimizer)
        scaler.update()
        skipped.append(all(torch.equal(b, p) for b, p in zip(before, model.parameters())))
        losses.append(loss.detach().cpu())
        scales.append(scaler.get_scale())
    return {
        "loss_dtype": str(losses[0].dtype),
        "losses": losses,
        "scales": scales,
        "skipped": skipped,
        "grads": {name: p.grad.cpu() for name, p in model.named_parameters()},
        "state": {name: t.cpu() for name, t in model.state_dict().items()},
        "devices": sorted({str(p.device) for p in model.parameters()} | {str(p.grad.device) for p in model.parameters()}),
    }


def all_cases(device: str) -> dict:
    results = {"explicit": train_with_grad_scaler(device, "explicit")}
    if torch.device(device).type == "cuda":
        results["autocast"] = train_with_grad_scaler(device, "autocast")
    return results


if __name__ == "__main__":
    # python _amp_cases.py DEVICE OUTPUT
    torch.save(all_cases(sys.argv[1]), sys.argv[2])
