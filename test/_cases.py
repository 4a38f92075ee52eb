"""Training and autograd cases run both on accel (in the test process) and on
the target device in a separate process that never imports torch_accel.

Why a separate process: in torch 2.11, once a PrivateUse1 backend is
registered, at::getAccelerator() reports it, and the autograd engine keeps
stream bookkeeping for that device type only; a CUDA backward in the same
process then fails an internal assertion (engine.cpp, "opt_ready_stream &&
opt_parent_stream"). The reference therefore runs where accel does not exist.

This module must not import torch_accel.
"""

import contextlib
import copy
import sys

import torch
from torch import nn


@contextlib.contextmanager
def deterministic():
    """Same kernels on the same inputs give the same bits only if the kernels
    themselves are deterministic (cuBLAS workspaces, cuDNN algorithms). ATen
    picks cuDNN batch norm only for tensors whose device type is cuda, so accel
    gets the native CUDA kernel; the reference turns cuDNN off to use it too.
    The settings are global: they are restored afterwards, or later tests in
    the process would run other kernels.
    """
    saved = (torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled())
    torch.use_deterministic_algorithms(True, warn_only=True)
    try:
        # flags() also works after PyTorch's test utilities froze the global cuDNN flags.
        with torch.backends.cudnn.flags(enabled=False, benchmark=False, deterministic=True):
            yield
    finally:
        torch.use_deterministic_algorithms(saved[0], warn_only=saved[1])


# Dropout's probability in the models. at::dropout runs the fused
# native_dropout for accel (as for cuda) and the composite for cpu, whose scale
# factors, fl32(1/(1-p)) and fl32(1/fl32(1-p)), differ in the last bit for 15
# of the 99 p in 0.01..0.99 (test_divergent_paths sweeps them all). For this p
# they are equal, so training runs with dropout compare bitwise with the
# target; dropout_scales_agree checks it.
DROPOUT_P = 0.1


def dropout_scales_agree(p: float) -> bool:
    fused = torch.tensor(1 / (1 - p), dtype=torch.float32)
    composite = torch.tensor(1.0) / torch.tensor(1 - p, dtype=torch.float32)
    return bool(fused == composite)


class SmallCNN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1),
            nn.BatchNorm2d(8),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(8, 16, 3, padding=1),
            nn.ReLU(),
            nn.AdaptiveAvgPool2d(2),
        )
        self.classifier = nn.Sequential(nn.Flatten(), nn.Dropout(DROPOUT_P), nn.Linear(64, 10))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(x))


class TransformerBlock(nn.Module):
    def __init__(self, dim: int = 32, heads: int = 4) -> None:
        super().__init__()
        self.embed = nn.Embedding(50, dim)
        self.norm1 = nn.LayerNorm(dim)
        self.attn = nn.MultiheadAttention(dim, heads, dropout=DROPOUT_P, batch_first=True)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Dropout(DROPOUT_P), nn.Linear(4 * dim, dim))
        self.head = nn.Linear(dim, 50)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens)
        causal = torch.triu(torch.full((tokens.shape[1],) * 2, float("-inf"), device=tokens.device), 1)
        h = self.norm1(x)
        x = x + self.attn(h, h, h, attn_mask=causal, need_weights=False)[0]
        x = x + self.mlp(self.norm2(x))
        return self.head(x)


def cnn_batch(device, step):
    g = torch.Generator().manual_seed(step)
    return torch.randn(4, 3, 16, 16, generator=g).to(device), torch.randint(0, 10, (4,), generator=g).to(device)


def transformer_batch(device, step):
    g = torch.Generator().manual_seed(100 + step)
    tokens = torch.randint(0, 50, (2, 12), generator=g)
    return tokens.to(device), tokens.roll(-1, 1).to(device)


def without_dropout(model: nn.Module) -> nn.Module:
    # Compiled dropout draws its masks from Inductor's own generator, not
    # eager's: compiled and eager runs are comparable without it.
    for module in model.modules():
        if isinstance(module, nn.Dropout):
            module.p = 0.0
        elif isinstance(module, nn.MultiheadAttention):
            module.dropout = 0.0
    return model


def _train(model, make_batch, device, optimizer_class, steps=3, compiled=False, **optimizer_args):
    model = copy.deepcopy(model).to(device)
    optimizer = optimizer_class(model.parameters(), **optimizer_args)
    forward = torch.compile(model) if compiled else model
    torch.manual_seed(1234)  # dropout masks: same seed, same numbers on accel and the target
    losses = []
    for step in range(steps):
        inputs, labels = make_batch(device, step)
        logits = forward(inputs)
        loss = nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.detach())
    return {
        "losses": [loss.cpu() for loss in losses],
        "grads": {name: p.grad.cpu() for name, p in model.named_parameters()},
        "state": {name: t.cpu() for name, t in model.state_dict().items()},
        "devices": sorted({str(t.device) for t in [*losses, *(p.grad for p in model.parameters())]}),
    }




MODELS = {"cnn": (SmallCNN, cnn_batch), "transformer": (TransformerBlock, transformer_batch)}
# Each optimizer names its implementation: left to its default, torch.optim
# takes foreach for accel (as for cuda) and the for-loop for cpu, two ways to
# compute the update that agree bitwise only where torch's formulas happen to
# (test_divergent_paths compares the defaults within rounding). foreach is
# accel's default; the target runs the same implementation.
OPTIMIZERS = {
    "sgd": (torch.optim.SGD, {"lr": 0.05, "momentum": 0.9, "foreach": True}),
    "adamw": (torch.optim.AdamW, {"lr": 1e-3, "foreach": True}),
}


def train(model_name: str, optimizer_name: str, device: str, compiled: bool = False, dropout: bool = True) -> dict:
    model_class, make_batch = MODELS[model_name]
    optimizer_class, optimizer_args = OPTIMIZERS[optimizer_name]
    torch.manual_seed(0)
    model = model_class()  # initialised on the CPU: the same weights everywhere
    if not dropout:
        without_dropout(model)
    with deterministic():
        return _train(model, make_batch, device, optimizer_class, compiled=compiled, **optimizer_args)


def tanh_backward(device: str) -> dict:
    g = torch.Generator().manual_seed(5)
    x = torch.randn(5, 3, generator=g).to(device).requires_grad_()
    w = torch.randn(3, 2, generator=g).to(device).requires_grad_()
    torch.tanh(x @ w).pow(2).sum().backward()
    return {"x": x.grad.cpu(), "w": w.grad.cpu(), "devices": sorted({str(x.grad.device), str(w.grad.device)})}


def views_and_inplace_backward(device: str) -> dict:
    base = torch.arange(12.0, device=device).view(3, 4).requires_grad_()
    y = base * 1.5
    y[1].mul_(3)
    y.t()[0].add_(1)
    (y * y).sum().backward()
    return {"base": base.grad.cpu(), "devices": [str(base.grad.device)]}


def real_model_batch(device, step):
    g = torch.Generator().manual_seed(200 + step)
    return torch.randn(4, 3, 32, 32, generator=g).to(device), torch.randint(0, 10, (4,), generator=g).to(device)


def real_model(device: str) -> dict:
    """Two SGD steps of a real model from an installed package (torchvision's
    ResNet-18, untrained: no download), as the models above."""
    import torchvision

    torch.manual_seed(0)
    model = torchvision.models.resnet18(num_classes=10)
    with deterministic():
        return _train(model, real_model_batch, device, torch.optim.SGD, steps=2, lr=0.01, momentum=0.9)


def all_cases(device: str) -> dict:
    results = {f"train-{m}-{o}": train(m, o, device) for m in MODELS for o in OPTIMIZERS}
    results["tanh_backward"] = tanh_backward(device)
    results["views_and_inplace_backward"] = views_and_inplace_backward(device)
    return results


def compiled_cases(device: str) -> dict:
    """Training runs of compiled models, without dropout (see without_dropout)."""
    return {f"train-{m}-sgd": train(m, "sgd", device, compiled=True, dropout=False) for m in MODELS}


if __name__ == "__main__":
    # python _cases.py DEVICE OUTPUT [--compiled | --real-model]: every case
    # (or every compiled case, or the real model's) on DEVICE, saved to OUTPUT.
    flags = sys.argv[3:]
    if flags == ["--compiled"]:
        results = compiled_cases(sys.argv[1])
    elif flags == ["--real-model"]:
        results = {"real_model": real_model(sys.argv[1])}
    else:
        results = all_cases(sys.argv[1])
    torch.save(results, sys.argv[2])
