"""Section `calls`: compiled tiny graphs' per-call time against the target's,
and the device guard, set_device and raw-stream calls that Inductor's generated
wrapper makes per call (against cuda's on the CUDA runtime, and against the
Python calls the wrapper made before they were C functions)."""

import torch
from workloads import interleaved_median_times

import torch_accel

from .common import TARGET, table

# A small compiled graph is bound by what every call costs besides its
# kernels: Dynamo's guards, the generated wrapper (allocation, and on a GPU
# the device guard, set_device and the raw stream of each launch). Timed
# against the target's compiled graph, and the wrapper's device calls
# against cuda's.

_TINY_GRAPHS = {
    "compiled x * y + 1 (8 elements)": ("def f(x, y, w):\n    return x * y + 1\n"),
    "compiled relu(x @ w) + y (16x16)": ("def f(x, y, w):\n    return torch.relu(x.view(4, 2) @ w[:2, :2]) + y.view(4, 2)\n"),
}


def compiled_call_cases(device: str) -> dict:
    """The tiny graphs, compiled for `device` and warmed up. Each device's
    functions have code objects of their own, so that Dynamo's cache holds one
    entry each (with one shared code object, the device compiled second would
    first fail the other's guards on every call)."""
    g = torch.Generator().manual_seed(0)
    x, y = (torch.randn(8, generator=g).to(device) for _ in range(2))
    w = torch.randn(16, 16, generator=g).to(device)
    cases = {}
    for name, source in _TINY_GRAPHS.items():
        namespace = {"torch": torch}
        exec(compile(source, f"<tiny graph on {device}: {name}>", "exec"), namespace)
        fn = torch.compile(namespace["f"], dynamic=False)
        for _ in range(3):
            fn(x, y, w)
        cases[name] = lambda fn=fn: fn(x, y, w)
    return cases


def device_call_cases(device_type: str) -> dict:
    """The calls a compiled graph's wrapper makes on every call, as Inductor
    writes them for `device_type` ("accel" or "cuda"), and (accel) the ones
    it wrote before they were C functions."""
    if device_type == "cuda":
        get_raw_stream = torch._C._cuda_getCurrentRawStream
        guard, set_device = torch.cuda._DeviceGuard, torch.cuda.set_device
    else:
        get_raw_stream = torch_accel._C._get_raw_stream
        guard, set_device = torch_accel._DeviceGuard, torch_accel._C._set_device

    def guarded(guard=guard):
        with guard(0):
            pass

    cases = {"device guard enter+exit": guarded, "set_device": lambda: set_device(0), "get_raw_stream": lambda: get_raw_stream(0)}
    if device_type == "accel":
        cases["before: torch.accel.device enter+exit"] = lambda: guarded(torch_accel.device)
        cases["before: torch.accel.set_device"] = lambda: torch_accel.set_device(0)
    return cases


def bench_calls(quick: bool) -> list[dict]:
    repeats, inner = (5, 100) if quick else (15, 500)
    rows = []
    compiled = {device: compiled_call_cases(device) for device in ("accel", TARGET)}
    for name in compiled["accel"]:
        times = interleaved_median_times({device: (compiled[device][name], device) for device in compiled}, repeats, inner)
        rows.append({"call": name, "accel_us": times["accel"] * 1e6, "target_us": times[TARGET] * 1e6, "ratio": times["accel"] / times[TARGET]})
    calls = {"accel": device_call_cases("accel")}
    if TARGET == "cuda":
        calls["cuda"] = device_call_cases("cuda")
    repeats, inner = (5, 1000) if quick else (15, 5000)
    for name in calls["accel"]:
        fns = {device: (cases[name], device) for device, cases in calls.items() if name in cases}
        times = interleaved_median_times(fns, repeats, inner)
        row = {"call": f"wrapper: {name}", "accel_us": times["accel"] * 1e6}
        if "cuda" in times:
            row.update(target_us=times["cuda"] * 1e6, ratio=times["accel"] / times["cuda"])
        rows.append(row)
    return rows


def run(results: dict, quick: bool) -> None:
    results["calls"] = bench_calls(quick)


def markdown(results: dict) -> list[str]:
    rows = results["calls"]
    title = f"## Compiled graphs' per-call cost (accel/{TARGET})"
    note = [] if TARGET == "cuda" else ["", f"The wrapper rows are accel's alone: {TARGET} graphs guard no device."]
    return [title, ""] + table(rows, ["call", "accel_us", "target_us", "ratio"]) + note
