"""The cases of test_compile_triton.py: compiled on accel in a process with
TORCH_ACCEL_INDUCTOR=triton, and run eagerly on the target device in a process
without torch_accel (the reference; see _cases.py for why a separate process).

    python _triton_cases.py DEVICE OUTPUT

DEVICE "accel" compiles every case (torch.compile, Inductor) on accel; any
other device type runs the cases eagerly there. OUTPUT gets, per case, its
results (on the cpu), the devices they were on, and for accel the code
Inductor generated.

Shapes are small: on the host runtime Triton's interpreter runs the kernels.
This module must not import torch_accel.
"""

import copy
import os
import sys

import torch
from torch import nn

_HERE = os.path.dirname(os.path.abspath(__file__))


def _randn(*shape, seed=0, dtype=torch.float32):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


def _transformer_block():
    # The transformer block of `make bench` (benchmarks/workloads.py), small.
    sys.path.insert(0, os.path.join(os.path.dirname(_HERE), "benchmarks"))
    from workloads import TransformerBlock

    torch.manual_seed(0)
    return TransformerBlock(16, heads=2)


def _mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(12, 24), nn.LayerNorm(24), nn.GELU(), nn.Linear(24, 5))


# --- What each case computes ------------------------------------------------------
# A case is (function, inputs, device index): the function takes the inputs
# (tensors and modules, moved to the device) and returns tensors. Training
# cases call backward inside: torch.compile compiles the forward and backward
# graphs of the module, the loss's backward runs the compiled backward.


def _train_step(model, x, y):
    loss = nn.functional.mse_loss(model(x), y)
    loss.backward()
    return loss, [p.grad for p in model.parameters()]


def _layer_norm_backward(x, w, b, grad):
    x.requires_grad_()
    w.requires_grad_()
    b.requires_grad_()
    out = nn.functional.layer_norm(x, x.shape[-1:], w, b)
    out.backward(grad)
    return out, x.grad, w.grad, b.grad


def _attention_with_computed_bias(q, k, v, bias_source):
    # A computed bias (not an input), 13 columns (not a multiple of 8):
    # Inductor chooses its strides under SDPA's layout constraint.
    return nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=bias_source * 2)


CASES = {
    "pointwise": (lambda x, y: torch.sigmoid(x) * y.cos() + x / 3, lambda: [_randn(33, 17), _randn(33, 17, seed=1)], 0),
    "reductions": (
        lambda x: (x.sum(1), x.amax(0), x.cumsum(1), x.sum()),
        lambda: [_randn(5, 40)],
        0,
    ),
    "softmax": (lambda x: torch.softmax(x * 2, -1), lambda: [_randn(6, 40)], 0),
    "layer_norm": (
        lambda x, w, b: nn.functional.layer_norm(x, (33,), w, b),
        lambda: [_randn(8, 33), _randn(33, seed=1), _randn(33, seed=2)],
        0,
    ),
    "second_device": (lambda x: (torch.relu(x) * 2).sum(0), lambda: [_randn(8, 24)], 1),
    "module": (lambda m, x: m(x), lambda: [_mlp(), _randn(6, 12)], 0),
    "training_step": (_train_step, lambda: [_mlp(), _randn(6, 12), _randn(6, 5, seed=1)], 0),
    "transformer_block": (_train_step, lambda: [_transformer_block(), _randn(2, 8, 16), _randn(2, 8, 16, seed=1)], 0),
    # Inductor's cuda choices (see torch_accel/_inductor/lowering.py):
    # rows reduced in a loop (not a persistent reduction, see CONFIG): the online softmax
    "online_softmax": (lambda x: torch.softmax(x, -1), lambda: [_randn(4, 100)], 0),
    # a layer norm's backward reduces rows (input gradient) and columns (weight, bias gradients)
    "mix_order_reduction": (
        _layer_norm_backward,
        lambda: [_randn(256, 32), _randn(32, seed=1), _randn(32, seed=2), _randn(256, 32, seed=3)],
        0,
    ),
    "bmm_batch_1": (lambda a, b: torch.bmm(a, b) + 1, lambda: [_randn(1, 8, 12), _randn(1, 12, 5, seed=1)], 0),
    "attention_bias": (
        _attention_with_computed_bias,
        lambda: [_randn(2, 4, 13, 8, seed=i, dtype=torch.float16) for i in range(3)]
        + [_randn(2, 4, 13, 13, seed=3, dtype=torch.float16)],
        0,
    ),
}
# Dynamic shapes: one graph, compiled for symbolic sizes, called with each input.
DYNAMIC_SIZES = [(5, 7), (9, 7), (12, 3)]
# Inductor configuration per case (the interpreter needs small shapes where
# Inductor's thresholds are for GPU-sized ones).
# The interpreter reduces with a combine function element by element (max,
# Welford, online softmax), so a reduction of 16384-element rows, which cuda
# reduces in a loop, takes minutes: rows of 100 are reduced in a loop here.
CONFIG = {
    "mix_order_reduction": {"triton.mix_order_reduction_non_strict_mode": True},
    "online_softmax": {"triton.persistent_reductions": False},
}


def _on(device, value):
    if isinstance(value, nn.Module):
        return copy.deepcopy(value).to(device)
    if isinstance(value, torch.Tensor):
        return value.to(device)
    return value


def _to_cpu(value):
    if isinstance(value, torch.Tensor):
        return value.detach().cpu()
    if isinstance(value, (list, tuple)):
        return type(value)(_to_cpu(v) for v in value)
    return value


def _devices(value):
    if isinstance(value, torch.Tensor):
        return {str(value.device)}
    if isinstance(value, (list, tuple)):
        return set().union(*(_devices(v) for v in value)) if value else set()
    return set()


def run(device_type: str) -> dict:
    compiled = device_type == "accel"
    out = {}
    for name, (fn, make_inputs, index) in CASES.items():
        if device_type != "cpu" and index >= getattr(torch, device_type).device_count():
            continue  # (accel:1 on a machine with one GPU)
        device = f"{device_type}:{index}" if device_type != "cpu" else "cpu"
        inputs = [_on(device, v) for v in make_inputs()]
        code = []
        if compiled:
            from torch._inductor import config
            from torch._inductor.utils import run_and_get_code

            torch._dynamo.reset()
            with config.patch(CONFIG.get(name, {})):
                if isinstance(inputs[0], nn.Module):
                    # The module compiled (its parameters are the graph's inputs).
                    model, *rest = inputs
                    model.forward = torch.compile(model.forward)
                    result, code = run_and_get_code(fn, model, *rest)
                else:
                    result, code = run_and_get_code(torch.compile(fn), *inputs)
        else:
            result = fn(*inputs)
        out[name] = {"results": _to_cpu(result), "devices": sorted(_devices(result)), "code": "\n".join(code)}

    # Dynamic shapes: compiled once, for every size.
    fn = lambda x: torch.nn.functional.gelu(x) * x.sum(-1, keepdim=True)  # noqa: E731
    inputs = [_randn(*size, seed=i) for i, size in enumerate(DYNAMIC_SIZES)]
    if compiled:
        from torch._dynamo.testing import CompileCounterWithBackend
        from torch._inductor.utils import run_and_get_code

        torch._dynamo.reset()
        counter = CompileCounterWithBackend("inductor")
        compiled_fn = torch.compile(fn, backend=counter, dynamic=True)
        # (run_and_get_code resets Dynamo: only the first call)
        first, code = run_and_get_code(compiled_fn, inputs[0].to("accel"))
        results = [first, *(compiled_fn(x.to("accel")) for x in inputs[1:])]
        out["dynamic_shapes"] = {"results": _to_cpu(results), "devices": sorted(_devices(results)), "code": "\n".join(code)}
        out["dynamic_shapes"]["frames"] = counter.frame_count
    else:
        results = [fn(x.to(device_type)) for x in inputs]
        out["dynamic_shapes"] = {"results": _to_cpu(results), "devices": sorted(_devices(results)), "code": ""}
    return out


if __name__ == "__main__":
    torch.save(run(sys.argv[1]), sys.argv[2])
