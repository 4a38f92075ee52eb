"""Section `ops`: eager per-op host overhead. The per-op list (33 small ops:
optimizer-style foreach and in-place updates, copies, comparisons, `item()` and
`torch.tensor(list)` among them) timed on accel and on the target, alternating.
The `instructions` section counts the same list in instructions."""

import torch
from workloads import interleaved_median_times

from .common import TARGET, per_op_goal_warnings, ratio_summary, table, warnings_markdown

# The ops of the per-op list to measure (--ops); None: all of them.
SELECTED_OPS: list[str] | None = None


def select(names: list[str]) -> None:
    """Measure only the named ops of the per-op list (--ops)."""
    global SELECTED_OPS
    SELECTED_OPS = names


def op_cases(device: str) -> dict:
    """The per-op list on `device` (only SELECTED_OPS when set)."""
    cases = all_op_cases(device)
    if SELECTED_OPS is None:
        return cases
    unknown = [name for name in SELECTED_OPS if name not in cases]
    if unknown:
        raise ValueError(f"unknown ops {unknown}; the per-op list has: {', '.join(cases)}")
    return {name: cases[name] for name in SELECTED_OPS}


def all_op_cases(device: str) -> dict:
    g = torch.Generator().manual_seed(0)
    a = torch.randn(64, 64, generator=g).to(device)
    b = torch.randn(64, 64, generator=g).to(device)
    v = torch.randn(1024, generator=g).to(device)
    w = torch.randn(1024, generator=g).to(device)
    idx = torch.randint(0, 64, (16,), generator=g).to(device)
    emb = torch.randn(100, 32, generator=g).to(device)
    tokens = torch.randint(0, 100, (8, 16), generator=g).to(device)
    lin = torch.nn.Linear(64, 64).to(device)
    dst = torch.empty_like(a)
    mask = a > 0
    scalar = torch.randn((), generator=g).to(device)
    # An optimizer's view of a small model: a few parameters and their gradients.
    params = [torch.randn(shape, generator=g).to(device) for shape in ((64, 64), (64,), (32, 64), (32,))]
    grads = [torch.randn_like(p).to(device) for p in params]
    values = [0.5, 1.5, -2.0, 3.0]
    return {
        "add": lambda: a + b,
        "mul": lambda: a * b,
        "relu": lambda: torch.relu(a),
        "sum": lambda: a.sum(),
        "mean": lambda: a.mean(dim=1),
        "matmul 64x64": lambda: a @ b,
        "linear": lambda: lin(a),
        "softmax": lambda: torch.softmax(a, -1),
        "layer_norm": lambda: torch.nn.functional.layer_norm(a, (64,)),
        "cat": lambda: torch.cat([a, b]),
        "index": lambda: a[idx],
        "slicing": lambda: a[1:9, ::2],
        "view/reshape": lambda: a.view(4096).reshape(32, 128),
        "copy_": lambda: dst.copy_(a),
        "to(dtype)": lambda: a.to(torch.float16),
        "fill_": lambda: dst.fill_(1.5),
        "zero_": lambda: dst.zero_(),
        "where": lambda: torch.where(mask, a, b),
        "embedding": lambda: torch.nn.functional.embedding(tokens, emb),
        "add_ (in-place)": lambda: v.add_(1.0),
        # Optimizer-style ops (an AdamW step is made of these).
        "_foreach_add_": lambda: torch._foreach_add_(params, grads, alpha=1e-3),
        "_foreach_mul_": lambda: torch._foreach_mul_(params, 0.999),
        "addcmul_": lambda: v.addcmul_(w, w, value=1e-3),
        "lerp_": lambda: v.lerp_(w, 0.1),
        "clone": lambda: a.clone(),
        "contiguous (transposed)": lambda: a.t().contiguous(),
        "masked_fill": lambda: a.masked_fill(mask, 0.0),
        "argmax": lambda: a.argmax(dim=1),
        "topk": lambda: v.topk(8),
        "gt (a > b)": lambda: a > b,
        "eq (a == 0)": lambda: a == 0,
        "item()": lambda: scalar.item(),
        "torch.tensor(list)": lambda: torch.tensor(values, device=device),
    }


def bench_ops(quick: bool) -> list[dict]:
    rows = []
    repeats, inner = (5, 50) if quick else (15, 200)
    accel_cases, target_cases = op_cases("accel"), op_cases(TARGET)
    for name in accel_cases:
        times = interleaved_median_times({"accel": (accel_cases[name], "accel"), TARGET: (target_cases[name], TARGET)}, repeats, inner)
        accel, target = times["accel"], times[TARGET]
        rows.append({"op": name, "accel_us": accel * 1e6, "target_us": target * 1e6, "ratio": accel / target})
    return rows


def run(results: dict, quick: bool) -> None:
    results["ops"] = bench_ops(quick)
    results["ops_summary"] = ratio_summary(results["ops"])


def warnings(results: dict) -> list[str]:
    return per_op_goal_warnings("ops", "time", results)


def markdown(results: dict) -> list[str]:
    rows = results["ops"]
    summary = results["ops_summary"]
    md = [f"## Eager per-op time (accel/{TARGET}: median {summary['median']:.3f}, worst {summary['worst']:.3f} {summary['worst_op']})", ""]
    return md + table(rows, ["op", "accel_us", "target_us", "ratio"]) + warnings_markdown(warnings(results))
