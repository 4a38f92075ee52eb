"""Section `graphs`: torch.compile(mode="reduce-overhead") (accel graphs)
against the default compile on a small-op model; `--quick` times inference
only. The GPU run takes it in its compile step."""

from workloads import interleaved_median_times, small_op_step

from .common import TARGET, table


def bench_graphs(quick: bool) -> list[dict]:
    """small_op_model compiled with mode="default" and mode="reduce-overhead"
    (accel graphs) on accel, against the target compiled by default (cpu has
    no graphs) and, on the CUDA runtime, cuda's reduce-overhead (CUDA graph
    trees). Training (forward and backward) only where the target can run in
    this process: on cuda, a backward in a process with accel registered
    fails (see workloads.py), so the cuda rows are inference only."""
    repeats, inner = (5, 50) if quick else (15, 200)
    rows = []
    # --quick: inference only (each mode and device compiles the model: most of the section's time).
    for training in (False,) if quick else (False, True):
        what = "training step (forward+backward)" if training else "inference"
        calls = {
            "accel default": (small_op_step("accel", "default", training), "accel"),
            "accel reduce-overhead": (small_op_step("accel", "reduce-overhead", training), "accel"),
        }
        if TARGET == "cpu" or not training:
            calls[f"{TARGET} default"] = (small_op_step(TARGET, "default", training), TARGET)
        if TARGET == "cuda" and not training:
            calls["cuda reduce-overhead"] = (small_op_step("cuda", "reduce-overhead", training), "cuda")
        times = interleaved_median_times(calls, repeats, inner)
        graphed = times["accel reduce-overhead"]
        row = {
            "what": f"small-op model (4x Linear(64)+ReLU, batch 4), {what}",
            "accel_default_us": times["accel default"] * 1e6,
            "accel_graphs_us": graphed * 1e6,
            "graphs_over_default": graphed / times["accel default"],
        }
        if f"{TARGET} default" in times:
            row["target_default_us"] = times[f"{TARGET} default"] * 1e6
            row["graphs_over_target_default"] = graphed / times[f"{TARGET} default"]
        if "cuda reduce-overhead" in times:
            row["cuda_graphs_us"] = times["cuda reduce-overhead"] * 1e6
            row["graphs_over_cuda_graphs"] = graphed / times["cuda reduce-overhead"]
        rows.append(row)
    return rows


def run(results: dict, quick: bool) -> None:
    results["graphs"] = bench_graphs(quick)


def markdown(results: dict) -> list[str]:
    rows = results["graphs"]
    columns = ["what", "accel_default_us", "accel_graphs_us", "graphs_over_default", "target_default_us", "graphs_over_target_default"]
    if TARGET == "cuda":
        columns += ["cuda_graphs_us", "graphs_over_cuda_graphs"]
    return [
        f'## torch.compile(mode="reduce-overhead"): accel graphs against the default compile and {TARGET}',
        "",
    ] + table(rows, columns)
