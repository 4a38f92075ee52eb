"""Section `throughput`: matmul (float32, bfloat16) in TFLOP/s and a
device-to-device copy in GB/s, accel against the target."""

import statistics

import torch
from workloads import interleaved_times

from .common import TARGET, table


def placement_balanced_times(make_call, repeats: int, inner: int) -> dict[str, float]:
    """Median seconds per call of make_call(device)'s call on accel and on the
    target, whose inputs are allocated once in each order.

    On the host runtime both devices' memory comes from one process heap, and
    where a large buffer lands (which one is allocated first) moves a
    memory-bound kernel by up to 15% either way; each device gets each place
    once, so that the placement does not decide the ratio."""
    samples: dict[str, list[float]] = {"accel": [], TARGET: []}
    for order in (("accel", TARGET), (TARGET, "accel")):
        calls = {device: (make_call(device), device) for device in order}
        for device, times in interleaved_times(calls, repeats, inner).items():
            samples[device] += times
        del calls
    return {device: statistics.median(times) for device, times in samples.items()}


def bench_throughput(quick: bool) -> list[dict]:
    n = (2048 if quick else 4096) if TARGET == "cuda" else (256 if quick else 512)
    repeats = 5 if quick else 10
    rows = []
    for dtype in (torch.float32, torch.bfloat16):
        flops = 2 * n**3

        def matmul(device, dtype=dtype):
            a, b = torch.randn(n, n, dtype=dtype, device=device), torch.randn(n, n, dtype=dtype, device=device)
            return lambda: a @ b

        times = placement_balanced_times(matmul, repeats, inner=3)
        rows.append(
            {
                "what": f"matmul {n}x{n} {str(dtype).removeprefix('torch.')}",
                "accel": flops / times["accel"] / 1e12,
                "target": flops / times[TARGET] / 1e12,
                "unit": "TFLOP/s",
                "ratio": times[TARGET] / times["accel"],
            }
        )
    nbytes = (256 << 20) if TARGET == "cuda" else (32 << 20)

    def copy(device):
        # Written first: an untouched page would be read as the kernel's shared zero page.
        buffers = torch.ones(2, nbytes, dtype=torch.uint8, device=device)
        return lambda: buffers[1].copy_(buffers[0])

    times = placement_balanced_times(copy, repeats, inner=5)
    rows.append(
        {
            "what": f"device-to-device copy {nbytes >> 20} MiB",
            "accel": 2 * nbytes / times["accel"] / 1e9,
            "target": 2 * nbytes / times[TARGET] / 1e9,
            "unit": "GB/s (read+write)",
            "ratio": times[TARGET] / times["accel"],
        }
    )
    return rows


def run(results: dict, quick: bool) -> None:
    results["throughput"] = bench_throughput(quick)


def markdown(results: dict) -> list[str]:
    rows = results["throughput"]
    return [f"## Device throughput (ratio = accel throughput / {TARGET})", ""] + table(rows, ["what", "accel", "target", "unit", "ratio"])
