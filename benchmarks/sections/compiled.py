"""Section `compiled`: the training steps of the `models` section under
torch.compile (Inductor: C++ kernels on the host runtime, Triton on the CUDA
runtime). `--no-compile` leaves it out."""

from .models import bench_models, steps_markdown


def run(results: dict, quick: bool) -> None:
    results["compiled"] = bench_models(quick, (True,), optimizer_alone=False)


def markdown(results: dict) -> list[str]:
    return steps_markdown("Training steps, torch.compile", results["compiled"])
