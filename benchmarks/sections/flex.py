"""Section `flex`: compiled FlexAttention forward (causal, and a document mask),
accel against the target in one process (float32 with the C++ template on
cpu, bfloat16 with the Triton templates on cuda).

Inference only: on a cpu target FlexAttention has no backward (cpu's limit,
accel's on the host runtime: docs/compile.md#flexattention)."""

import torch
from torch.nn.attention.flex_attention import create_block_mask, flex_attention
from workloads import interleaved_median_times

from .common import TARGET, table

# accel's time over the target's for the same kernels (the goal for this section).
GOAL = 1.05


def _mask_mods(seq: int, device: str) -> dict:
    # Documents of a quarter, an eighth and the rest of the sequence.
    lengths = [seq // 4, seq // 8, seq - seq // 4 - seq // 8]
    documents = torch.repeat_interleave(torch.arange(len(lengths)), torch.tensor(lengths)).to(device)

    def causal(b, h, q, k):
        return q >= k

    def document(b, h, q, k):
        return (documents[q] == documents[k]) & (q >= k)

    return {"causal": causal, "document": document}


def flex_cases(device: str, quick: bool) -> dict:
    if TARGET == "cuda":
        shape, dtype = ((4, 16, 2048, 64) if not quick else (2, 8, 1024, 64)), torch.bfloat16
    else:
        shape, dtype = ((2, 8, 512, 64) if not quick else (1, 4, 256, 64)), torch.float32
    batch, heads, seq, dim = shape
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(*shape, generator=g).to(device=device, dtype=dtype) for _ in range(3))
    compiled = torch.compile(flex_attention)
    cases = {}
    for mask, mask_mod in _mask_mods(seq, device).items():
        block_mask = create_block_mask(mask_mod, 1, 1, seq, seq, device=device)
        name = f"{batch}x{heads}x{seq}x{dim} {str(dtype).removeprefix('torch.')} {mask}"

        def call(block_mask=block_mask):
            with torch.no_grad():
                return compiled(q, k, v, block_mask=block_mask)

        cases[name] = call
    return cases


def _not_compiled_here() -> str:
    """Why the target compiles no flex_attention on this machine ("" where it does):
    on cpu, PyTorch's own check (Inductor's C++ template needs AVX2, and
    ATEN_CPU_CAPABILITY other than default); accel's kernel is cpu's, refused alike."""
    if TARGET != "cpu":
        return ""
    from torch._inductor.kernel.flex.flex_cpu import check_cpu_supported

    return "" if check_cpu_supported() else "PyTorch compiles no flex_attention for cpu here (needs AVX2, and ATEN_CPU_CAPABILITY other than default)"


def run(results: dict, quick: bool) -> None:
    reason = _not_compiled_here()
    if reason:
        results["flex"], results["flex_not_measured"] = [], reason
        return
    repeats, inner = (5, 3) if quick else (10, 10)
    accel_cases, target_cases = flex_cases("accel", quick), flex_cases(TARGET, quick)
    rows = []
    for name in accel_cases:
        times = interleaved_median_times({"accel": (accel_cases[name], "accel"), TARGET: (target_cases[name], TARGET)}, repeats, inner)
        rows.append({"case (BxHxSxD)": name, "accel_ms": times["accel"] * 1e3, "target_ms": times[TARGET] * 1e3, "ratio": times["accel"] / times[TARGET]})
    results["flex"] = rows


def markdown(results: dict) -> list[str]:
    heading = [f"## FlexAttention, compiled forward (accel/{TARGET})", ""]
    if "flex_not_measured" in results:
        return heading + [f"Not measured: {results['flex_not_measured']}."]
    return heading + table(results["flex"], ["case (BxHxSxD)", "accel_ms", "target_ms", "ratio"])


def warnings(results: dict) -> list[str]:
    return [
        f"flex: {row['case (BxHxSxD)']}: accel/{TARGET} {row['ratio']:.3f}, above its goal {GOAL}"
        for row in results.get("flex", [])
        if row["ratio"] > GOAL
    ]
