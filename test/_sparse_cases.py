"""Autograd and training cases with sparse tensors, run on accel (in the test
process, test_sparse.py) and on the target device in a separate process that
never imports torch_accel (a CUDA backward cannot run in a process where
accel is registered: see _cases.py).

python _sparse_cases.py DEVICE OUTPUT: every case on DEVICE, saved to OUTPUT.
This module must not import torch_accel.
"""

import sys

import torch
from torch import nn

OPTIMIZERS = {
    "sgd": lambda params: torch.optim.SGD(params, lr=0.5),
    "adagrad": lambda params: torch.optim.Adagrad(params, lr=0.5),
    "sparse_adam": lambda params: torch.optim.SparseAdam(params, lr=0.1),
}


def on_cpu(t: torch.Tensor) -> dict:
    """A tensor of any layout as CPU tensors, part by part."""
    if t.layout == torch.sparse_coo:
        return {"indices": t._indices().cpu(), "values": t._values().cpu(), "coalesced": t.is_coalesced()}
    return {"values": t.detach().cpu()}


def sparse_mm_backward(device: str) -> dict:
    g = torch.Generator().manual_seed(3)
    dense = torch.randn(5, 4, generator=g)
    dense[dense.abs() < 0.6] = 0
    sparse = dense.to(device).to_sparse().requires_grad_()
    other = torch.randn(4, 3, generator=g).to(device).requires_grad_()
    torch.sparse.mm(sparse, other).pow(2).sum().backward()
    return {"sparse_grad": on_cpu(sparse.grad), "dense_grad": on_cpu(other.grad), "device": str(other.grad.device)}


def sparse_mm_reduce_backward(device: str) -> dict:
    """torch.sparse.mm with each reduction over a CSR matrix, and its gradients.
    The amax/amin kernels keep argmax indices for their backward only when an
    input requires grad, which their kernel reads below autograd. Only the
    CPU has these kernels: on cuda each reduction's error is the result."""
    g = torch.Generator().manual_seed(5)
    dense = torch.randn(5, 5, generator=g)
    dense[dense.abs() < 0.5] = 0
    dense_other = torch.randn(5, 3, generator=g)
    results = {}
    for reduce in ("sum", "mean", "amax", "amin"):
        sparse = dense.to(device).to_sparse_csr().requires_grad_()
        other = dense_other.to(device, copy=True).requires_grad_()  # a new leaf each time, on cpu too
        try:
            out = torch.sparse.mm(sparse, other, reduce)
            out.pow(2).sum().backward()
        except (RuntimeError, NotImplementedError) as error:
            results[reduce] = {"error": type(error).__name__}
            continue
        results[reduce] = {
            "out": out.detach().cpu(),
            "sparse_grad": sparse.grad.to_dense().cpu(),
            "dense_grad": other.grad.cpu(),
        }
    return results


def sparse_addmm_backward(device: str) -> dict:
    g = torch.Generator().manual_seed(4)
    dense = torch.randn(4, 6, generator=g)
    dense[dense.abs() < 0.5] = 0
    sparse = dense.to(device).to_sparse().requires_grad_()
    other = torch.randn(6, 2, generator=g).to(device).requires_grad_()
    bias = torch.randn(4, 2, generator=g).to(device).requires_grad_()
    torch.sparse.addmm(bias, sparse, other, beta=0.5, alpha=2.0).tanh().sum().backward()
    return {name: on_cpu(t.grad) for name, t in (("sparse", sparse), ("other", other), ("bias", bias))}


def embedding_training(device: str, optimizer: str, steps: int = 3) -> dict:
    torch.manual_seed(0)
    embedding = nn.Embedding(20, 4, sparse=True)
    embedding.to(device)
    opt = OPTIMIZERS[optimizer](embedding.parameters())
    batches = [torch.tensor([[1, 5, 5, 7], [2, 19, 1, 0]]), torch.tensor([[3, 3, 3, 4]]), torch.tensor([[7, 8, 1, 2]])]
    result = {"losses": [], "weights": [], "grads": []}
    for step in range(steps):
        opt.zero_grad()
        loss = embedding(batches[step].to(device)).pow(2).sum()
        loss.backward()
        result["grads"].append(on_cpu(embedding.weight.grad))
        opt.step()
        result["losses"].append(loss.detach().cpu())
        result["weights"].append(embedding.weight.detach().cpu().clone())
    result["device"] = str(embedding.weight.device)
    return result


def all_cases(device: str) -> dict:
    results = {
        "sparse_mm_backward": sparse_mm_backward(device),
        "sparse_mm_reduce_backward": sparse_mm_reduce_backward(device),
        "sparse_addmm_backward": sparse_addmm_backward(device),
    }
    for optimizer in OPTIMIZERS:
        results[f"embedding-{optimizer}"] = embedding_training(device, optimizer)
    return results


if __name__ == "__main__":
    torch.save(all_cases(sys.argv[1]), sys.argv[2])
