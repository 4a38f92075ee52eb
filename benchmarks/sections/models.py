"""Section `models`: training steps of a transformer block and a CNN in eager
mode, and the AdamW step alone, accel against the target (on the CUDA runtime the
cuda reference runs in a child process: see workloads.py). The `compiled`
section runs the same steps under torch.compile."""

import json
import os
import statistics
import subprocess
import sys

from workloads import interleaved_median_times, interleaved_times, model_step, optimizer_step, training_step

from .common import BENCHMARKS, TARGET, table


def subprocess_model_step(model_name: str, compiled: bool, large: bool) -> dict:
    """The target's step in a process without torch_accel (CUDA: see workloads.py)."""
    env = dict(os.environ, TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    proc = subprocess.run(
        [sys.executable, os.path.join(BENCHMARKS, "workloads.py"), TARGET, model_name, str(int(compiled)), str(int(large))],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,  # a hung child must not take the whole run with it
    )
    if proc.returncode != 0:
        # One line (the results table's error cell) that says why.
        reason = " | ".join(proc.stderr.strip().splitlines()[-3:])
        raise RuntimeError(f"the {TARGET} reference step (child process) exited with {proc.returncode}: {reason}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def model_steps(model_name: str, compiled: bool, large: bool, repeats: int) -> tuple[dict, dict]:
    """accel's and the target's step time and peak memory: interleaved in this
    process where the target allows it (cpu), else the target's in a child."""
    if TARGET != "cpu":
        return model_step("accel", model_name, compiled, large, repeats), subprocess_model_step(model_name, compiled, large)
    steps = {device: training_step(device, model_name, compiled, large) for device in ("accel", TARGET)}
    samples = interleaved_times({device: (step, device) for device, (step, _) in steps.items()}, repeats, inner=1)
    # The spread of the round-by-round ratios says how far the machine's noise
    # lets the median ratio be trusted.
    quartiles = statistics.quantiles([a / t for a, t in zip(samples["accel"], samples[TARGET])], n=4)
    return tuple(
        {"seconds": statistics.median(samples[device]), "peak_bytes": steps[device][1](), "ratio_q1_q3": (quartiles[0], quartiles[2])}
        for device in ("accel", TARGET)
    )


# The models measured, in order; run.py --models keeps some of them.
MODELS = ["transformer", "cnn"]


def select(names: list[str]) -> None:
    """Measure only the models named (run.py --models)."""
    MODELS[:] = [name for name in MODELS if name in names]


def bench_models(quick: bool, compiled_modes: tuple[bool, ...], optimizer_alone: bool) -> list[dict]:
    large = TARGET == "cuda" and not quick
    repeats = 10 if quick or large else 40
    rows = []
    for model_name in MODELS:
        for compiled in compiled_modes:
            try:
                accel, target = model_steps(model_name, compiled, large, repeats)
            except Exception as error:  # report, do not hide
                rows.append({"model": model_name, "mode": "compiled" if compiled else "eager", "error": str(error).splitlines()[0]})
                continue
            rows.append(
                {
                    "model": model_name,
                    "mode": "compiled" if compiled else "eager",
                    "accel_ms": accel["seconds"] * 1e3,
                    "target_ms": target["seconds"] * 1e3,
                    "ratio": accel["seconds"] / target["seconds"],
                    "round_ratios_q1_q3": "–".join(f"{q:.3f}" for q in accel["ratio_q1_q3"]) if "ratio_q1_q3" in accel else None,
                    "accel_step_peak_mib": None if accel["peak_bytes"] is None else accel["peak_bytes"] / 2**20,
                    "target_step_peak_mib": None if target["peak_bytes"] is None else target["peak_bytes"] / 2**20,
                }
            )
        if not optimizer_alone:
            continue
        # The optimizer step alone (eager in both modes above; no autograd, so
        # in this process on every target).
        steps = {device: (optimizer_step(device, model_name, large), device) for device in ("accel", TARGET)}
        times = interleaved_median_times(steps, repeats, inner=5)
        rows.append(
            {
                "model": model_name,
                "mode": "AdamW step alone",
                "accel_ms": times["accel"] * 1e3,
                "target_ms": times[TARGET] * 1e3,
                "ratio": times["accel"] / times[TARGET],
            }
        )
    return rows


def run(results: dict, quick: bool) -> None:
    results["models"] = bench_models(quick, (False,), optimizer_alone=True)


def steps_markdown(title: str, rows: list[dict]) -> list[str]:
    """The table of training steps (this section's and `compiled`'s)."""
    columns = ["model", "mode", "accel_ms", "target_ms", "ratio", "round_ratios_q1_q3", "accel_step_peak_mib", "target_step_peak_mib", "error"]
    return [f"## {title} (accel/{TARGET})", ""] + table(rows, columns)


def markdown(results: dict) -> list[str]:
    return steps_markdown("Training steps, eager", results["models"])
