"""Real models train on accel in eager mode, and their losses, gradients and
parameters are bitwise those of the same run on the target device."""

import copy

import pytest
import torch
from torch import nn

import torch_accel


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
        self.classifier = nn.Sequential(nn.Flatten(), nn.Dropout(0.1), nn.Linear(64, 10))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(x))


class TransformerBlock(nn.Module):
    def __init__(self, dim: int = 32, heads: int = 4) -> None:
        super().__init__()
        self.embed = nn.Embedding(50, dim)
        self.norm1 = nn.LayerNorm(dim)
        self.attn = nn.MultiheadAttention(dim, heads, dropout=0.1, batch_first=True)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Dropout(0.1), nn.Linear(4 * dim, dim))
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


def train(model, make_batch, device, optimizer_class, steps=3, **optimizer_args):
    model = copy.deepcopy(model).to(device)
    optimizer = optimizer_class(model.parameters(), **optimizer_args)
    torch.manual_seed(1234)  # dropout masks: same seed, same numbers on accel and the target
    losses = []
    for step in range(steps):
        inputs, labels = make_batch(device, step)
        logits = model(inputs)
        loss = nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.detach())
    grads = {name: p.grad for name, p in model.named_parameters()}
    return model, losses, grads


@pytest.mark.parametrize(
    "model_class, make_batch",
    [(SmallCNN, cnn_batch), (TransformerBlock, transformer_batch)],
    ids=["cnn", "transformer"],
)
@pytest.mark.parametrize(
    "optimizer_class, optimizer_args",
    [(torch.optim.SGD, {"lr": 0.05, "momentum": 0.9}), (torch.optim.AdamW, {"lr": 1e-3})],
    ids=["sgd", "adamw"],
)
def test_training_matches_the_target_bitwise(model_class, make_batch, optimizer_class, optimizer_args, target):
    torch.manual_seed(0)
    model = model_class()
    on_target, target_losses, target_grads = train(model, make_batch, target, optimizer_class, **optimizer_args)
    on_accel, accel_losses, accel_grads = train(model, make_batch, "accel", optimizer_class, **optimizer_args)

    assert all(loss.device.type == "accel" for loss in accel_losses)
    for accel_loss, target_loss in zip(accel_losses, target_losses):
        assert torch.equal(accel_loss.to(target), target_loss)
    assert accel_losses[-1].item() < accel_losses[0].item() * 1.5  # it trains, not diverges
    for name, grad in accel_grads.items():
        assert grad.device.type == "accel", name
        assert torch.equal(grad.to(target), target_grads[name]), name
    for (name, p_accel), (_, p_target) in zip(on_accel.state_dict().items(), on_target.state_dict().items()):
        assert torch.equal(p_accel.to(target), p_target), name


def test_backward_of_an_accel_graph_stays_on_accel(target):
    x = torch.randn(5, 3, device="accel", requires_grad=True)
    w = torch.randn(3, 2, device="accel", requires_grad=True)
    y = torch.tanh(x @ w).pow(2).sum()
    y.backward()
    xt = x.detach().to(target).requires_grad_()
    wt = w.detach().to(target).requires_grad_()
    torch.tanh(xt @ wt).pow(2).sum().backward()
    assert x.grad.device == x.device and w.grad.device == w.device
    assert torch.equal(x.grad.to(target), xt.grad)
    assert torch.equal(w.grad.to(target), wt.grad)


def test_gradients_through_views_and_inplace_ops(target):
    def run(device):
        base = torch.arange(12.0, device=device).view(3, 4).requires_grad_()
        y = base * 1.5
        y[1].mul_(3)
        y.t()[0].add_(1)
        return y.sum(), base

    loss_accel, base_accel = run("accel")
    loss_target, base_target = run(target)
    loss_accel.backward()
    loss_target.backward()
    assert torch.equal(base_accel.grad.to(target), base_target.grad)


def test_no_grad_and_inference_mode():
    x = torch.randn(3, device="accel", requires_grad=True)
    with torch.no_grad():
        assert not (x * 2).requires_grad
    with torch.inference_mode():
        y = x * 2
        z = y.view(3)  # a view of an inference tensor
        assert y.is_inference() and z.is_inference()
    assert torch_accel.current_device() == 0
