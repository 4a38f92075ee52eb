"""Section `sdpa`: scaled_dot_product_attention forward, accel against the
target (bfloat16 on cuda, float32 on cpu)."""

import torch
from workloads import interleaved_median_times

from .common import TARGET, table


def sdpa_cases(device: str) -> dict:
    """Attention forward passes (inference): the shapes of a small and a mid-sized
    model's layer. On cuda in bfloat16 (flash attention's dtypes), on cpu in float32."""
    if TARGET == "cuda":
        shapes, dtype = ((8, 16, 1024, 64), (4, 32, 2048, 128)), torch.bfloat16
    else:
        shapes, dtype = ((2, 4, 128, 64), (1, 8, 256, 64)), torch.float32
    g = torch.Generator().manual_seed(0)
    cases = {}
    for batch, heads, seq, dim in shapes:
        q, k, v = (torch.randn(batch, heads, seq, dim, generator=g).to(device=device, dtype=dtype) for _ in range(3))
        for causal in (False, True):
            name = f"{batch}x{heads}x{seq}x{dim} {str(dtype).removeprefix('torch.')}" + (" causal" if causal else "")
            cases[name] = lambda q=q, k=k, v=v, causal=causal: torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
    return cases


def bench_sdpa(quick: bool) -> list[dict]:
    """accel's SDPA against the target's, with the backend each one chose (the
    backward is left out: on the CUDA runtime the target's cannot run in this process)."""
    repeats, inner = (5, 5) if quick else (10, 20)
    accel_cases, target_cases = sdpa_cases("accel"), sdpa_cases(TARGET)
    rows = []
    for name in accel_cases:
        times = interleaved_median_times({"accel": (accel_cases[name], "accel"), TARGET: (target_cases[name], TARGET)}, repeats, inner)
        rows.append({"shape (BxHxSxD)": name, "accel_ms": times["accel"] * 1e3, "target_ms": times[TARGET] * 1e3, "ratio": times["accel"] / times[TARGET]})
    return rows


def run(results: dict, quick: bool) -> None:
    results["sdpa"] = bench_sdpa(quick)


def markdown(results: dict) -> list[str]:
    rows = results["sdpa"]
    return [f"## Scaled dot-product attention, forward (accel/{TARGET})", ""] + table(rows, ["shape (BxHxSxD)", "accel_ms", "target_ms", "ratio"])
