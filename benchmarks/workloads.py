"""Benchmark workloads, runnable on any device type ("accel", "cuda", "cpu").

This module never imports torch_accel, so run.py can time the target device
in a process where accel does not exist (needed for CUDA training steps: in
torch 2.11 the autograd engine cannot run CUDA backward in a process with a
PrivateUse1 backend registered).
"""

import json
import statistics
import sys
import time
from collections.abc import Callable

import torch
from torch import nn


def synchronize(device: str) -> None:
    kind = torch.device(device).type
    if kind != "cpu":
        getattr(torch, kind).synchronize()


def median_time(fn: Callable[[], object], device: str, repeats: int, inner: int) -> float:
    """Median over `repeats` of the mean seconds per call of `inner` back-to-back calls."""
    fn()
    synchronize(device)
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(inner):
            fn()
        synchronize(device)
        samples.append((time.perf_counter() - start) / inner)
    return statistics.median(samples)


def interleaved_times(fns: dict[str, tuple[Callable[[], object], str]], repeats: int, inner: int) -> dict[str, list[float]]:
    """Seconds per call of several (function, device) pairs, one sample each per round.

    On a shared machine the speed drifts (other load, frequency changes); timing
    accel's and the target's runs one after the other in every round, in
    alternating order, lets the drift fall on both alike instead of on
    whichever ran second, and pairs their samples round by round."""
    for fn, device in fns.values():
        fn()
        synchronize(device)
    samples: dict[str, list[float]] = {name: [] for name in fns}
    names = list(fns)
    for round_ in range(repeats):
        for name in names if round_ % 2 == 0 else reversed(names):
            fn, device = fns[name]
            start = time.perf_counter()
            for _ in range(inner):
                fn()
            synchronize(device)
            samples[name].append((time.perf_counter() - start) / inner)
    return samples


def interleaved_median_times(fns: dict[str, tuple[Callable[[], object], str]], repeats: int, inner: int) -> dict[str, float]:
    """median_time for several (function, device) pairs, timed in alternating rounds."""
    return {name: statistics.median(values) for name, values in interleaved_times(fns, repeats, inner).items()}


class TransformerBlock(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.norm1(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        return x + self.mlp(self.norm2(x))


def make_cnn() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 32, 3, padding=1),
        nn.BatchNorm2d(32),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1),
        nn.BatchNorm2d(64),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(64, 10),
    )


def build_model(model_name: str, large: bool) -> tuple[nn.Module, torch.Tensor, torch.Tensor, Callable]:
    """One of the benchmark models on the cpu, with a batch, its targets and the loss."""
    torch.manual_seed(0)
    if model_name == "transformer":
        dim, batch, seq = (1024, 16, 512) if large else (128, 8, 64)
        model = TransformerBlock(dim, heads=8 if large else 4)
        return model, torch.randn(batch, seq, dim), torch.randn(batch, seq, dim), nn.functional.mse_loss
    if model_name != "cnn":
        raise ValueError(f"no benchmark model {model_name!r}; expected 'transformer' or 'cnn'")
    batch, size = (128, 64) if large else (16, 32)
    model = make_cnn()
    return model, torch.randn(batch, 3, size, size), torch.randint(0, 10, (batch,)), nn.functional.cross_entropy


def optimizer_step(device: str, model_name: str, large: bool) -> Callable[[], None]:
    """The AdamW step of one model on `device` alone, its gradients set once."""
    model = build_model(model_name, large)[0].to(device)
    for parameter in model.parameters():
        parameter.grad = torch.randn_like(parameter)
    return torch.optim.AdamW(model.parameters(), lr=1e-4).step


def small_op_model(width: int = 64, layers: int = 4) -> nn.Module:
    """Tiny Linear+ReLU layers: a model whose compiled step is bound by the
    host's per-kernel cost (launches, the wrapper's Python), not by compute:
    what mode="reduce-overhead" (graphs) is for."""
    torch.manual_seed(0)
    return nn.Sequential(*(m for _ in range(layers) for m in (nn.Linear(width, width), nn.ReLU())))


def small_op_step(device: str, mode: str, training: bool, batch: int = 4) -> Callable[[], None]:
    """A warmed-up call of small_op_model compiled with `mode` ("default" or
    "reduce-overhead") on `device`: inference under no_grad, or a training
    step's forward and backward (gradients set to None first, as
    optimizer.zero_grad does)."""
    model = small_op_model().to(device)
    compiled = torch.compile(model, mode=mode)
    x = torch.randn(batch, model[0].in_features, device=device)
    if training:

        def step() -> None:
            model.zero_grad(set_to_none=True)
            compiled(x).sum().backward()

    else:

        def step() -> None:
            with torch.no_grad():
                compiled(x)

    for _ in range(3):  # compilation, warm-up, capture
        step()
    return step


def training_step(device: str, model_name: str, compiled: bool, large: bool) -> tuple[Callable[[], None], Callable[[], int | None]]:
    """A warmed-up training step (forward, backward, AdamW) of one model on
    `device`, and a function reading the step's peak memory: the most the
    device allocated during the steps since the warm-up beyond what it held
    before them (the model, its optimizer state and inputs, and anything else
    the process holds), so that it compares across processes. None where the
    device type keeps no statistics."""
    model, inputs, target, loss_fn = build_model(model_name, large)
    model = model.to(device)
    inputs, target = inputs.to(device), target.to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    forward = torch.compile(model) if compiled else model

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        loss_fn(forward(inputs), target).backward()
        optimizer.step()

    for _ in range(3):  # warm-up (and compilation)
        step()
    kind = torch.device(device).type
    module = getattr(torch, kind, None) if kind != "cpu" else None
    if module is None or not hasattr(module, "max_memory_allocated"):
        return step, lambda: None
    synchronize(device)
    module.reset_peak_memory_stats()
    held = module.memory_allocated()
    return step, lambda: module.max_memory_allocated() - held


def model_step(device: str, model_name: str, compiled: bool, large: bool, repeats: int = 10) -> dict:
    """Median training-step time and peak memory of one model on one device."""
    step, peak = training_step(device, model_name, compiled, large)
    seconds = median_time(step, device, repeats=repeats, inner=1)
    return {"seconds": seconds, "peak_bytes": peak()}


if __name__ == "__main__":
    # python workloads.py DEVICE MODEL COMPILED LARGE: one model_step as JSON.
    device, model_name, compiled, large = sys.argv[1], sys.argv[2], sys.argv[3] == "1", sys.argv[4] == "1"
    print(json.dumps(model_step(device, model_name, compiled, large)))
