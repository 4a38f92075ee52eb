"""Section `streams`: stream and event call latency; accel's alone on the host
runtime (its cpu target has no streams), against cuda's on the CUDA runtime."""

import torch
from workloads import interleaved_median_times

import torch_accel

from .common import TARGET, table


def stream_cases(module) -> dict:
    """The stream and event calls timed, on `module`'s API (torch.accel or torch.cuda)."""
    event = module.Event()
    stream = module.Stream()

    def stream_context():
        with module.stream(stream):
            pass

    return {
        "Stream()": lambda: module.Stream(),
        "current_stream()": lambda: module.current_stream(),
        "Event record+query": lambda: (event.record(), event.query()),
        "Event record+synchronize": lambda: (event.record(), event.synchronize()),
        "StreamContext switch": stream_context,
    }


def bench_streams(quick: bool) -> list[dict]:
    """accel's stream and event API latency; next to cuda's on the CUDA runtime.

    The cpu target has no streams or events, so on the host runtime the
    figures are accel's alone (absolute, with no ratio)."""
    repeats, inner = (5, 200) if quick else (15, 2000)
    apis = {"accel": torch_accel}
    if TARGET == "cuda":
        apis["cuda"] = torch.cuda
    cases = {device: stream_cases(module) for device, module in apis.items()}
    rows = []
    for name in cases["accel"]:
        times = interleaved_median_times({device: (cases[device][name], device) for device in apis}, repeats, inner)
        row = {"call": name, "accel_us": times["accel"] * 1e6}
        if "cuda" in times:
            row.update(cuda_us=times["cuda"] * 1e6, ratio=times["accel"] / times["cuda"])
        rows.append(row)
    return rows


def run(results: dict, quick: bool) -> None:
    results["streams"] = bench_streams(quick)


def markdown(results: dict) -> list[str]:
    rows = results["streams"]
    if TARGET == "cuda":
        return ["## Stream and event calls (accel/cuda)", ""] + table(rows, ["call", "accel_us", "cuda_us", "ratio"])
    return [f"## Stream and event calls (accel; {TARGET} has no streams to compare with)", ""] + table(rows, ["call", "accel_us"])
