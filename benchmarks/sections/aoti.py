"""Section `aoti`: an AOTInductor package's run, accel against the target in one
process. The benchmarks' models (the transformer block, the CNN) are exported
on each device with a dynamic batch, compiled with
``torch._inductor.aoti_compile_and_package`` and loaded with
``aoti_load_package``; each package runs inference on the same batch.

accel's package runs the kernels the target's runs (docs/compile.md,
"cpp_wrapper and AOTInductor"): what differs is accel's model runner (device
guard, current stream, input checks), the accel views of the constants, and
operators called through accel's C shim instead of the target's."""

import copy
import tempfile

import torch
from workloads import build_model, interleaved_median_times

from .common import TARGET, table

# accel's time over the target's for the same kernels (the goal for this section).
GOAL = 1.05


def _package(model: torch.nn.Module, batch: torch.Tensor, device: str, folder: str):
    model = copy.deepcopy(model).to(device).eval()
    dynamic = ({0: torch.export.Dim("batch", min=2, max=1024)},)
    exported = torch.export.export(model, (batch.to(device),), dynamic_shapes=dynamic)
    path = torch._inductor.aoti_compile_and_package(exported, package_path=f"{folder}/{device}.pt2")
    return torch._inductor.aoti_load_package(path)


def run(results: dict, quick: bool) -> None:
    repeats, inner = (5, 3) if quick else (10, 10)
    rows = []
    for model_name in ("transformer", "cnn"):
        model, batch, _, _ = build_model(model_name, large=not quick)
        with tempfile.TemporaryDirectory() as folder:
            loaded = {device: _package(model, batch, device, folder) for device in ("accel", TARGET)}
            inputs = {device: batch.to(device) for device in loaded}

            def call(device):
                def run_package():
                    with torch.no_grad():
                        return loaded[device](inputs[device])

                return run_package

            times = interleaved_median_times({device: (call(device), device) for device in loaded}, repeats, inner)
        name = f"{model_name} {tuple(batch.shape)}"
        rows.append({"model (batch)": name, "accel_ms": times["accel"] * 1e3, "target_ms": times[TARGET] * 1e3, "ratio": times["accel"] / times[TARGET]})
    results["aoti"] = rows


def markdown(results: dict) -> list[str]:
    heading = [f"## AOTInductor package, inference (accel/{TARGET})", ""]
    return heading + table(results["aoti"], ["model (batch)", "accel_ms", "target_ms", "ratio"])


def warnings(results: dict) -> list[str]:
    return [
        f"aoti: {row['model (batch)']}: accel/{TARGET} {row['ratio']:.3f}, above its goal {GOAL}"
        for row in results.get("aoti", [])
        if row["ratio"] > GOAL
    ]
