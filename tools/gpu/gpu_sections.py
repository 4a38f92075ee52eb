"""The sections of a GPU run (`make gpu-test`, tools/gpu/gpu_report.py): what each one
runs, its time limit and the step it belongs to. This table is data: extend it
when a test file or a benchmark is added.

A section is either a pytest selection (``tests``: files or node ids relative to
the repository root, narrowed by ``k`` and ``m`` as pytest's -k and -m) or a
``command`` (an argument list; ``{python}`` is the interpreter running the
report, ``{results}`` the benchmark results folder, ``{run_id}`` the run's id and
``{bench_args}`` stands for the BENCH_ARGS words). Each section runs in its own
process group, killed at ``limit_s`` seconds (or at the whole-run deadline).

Steps group sections into commands that each fit in one device-tool command
(10 minutes, build included): `make gpu-test GPU_TEST_STEPS=core`, and so on.
Every command first checks the dependencies and builds; ``all`` runs every step
in one command (a GPU CI runner, which has no 10-minute limit).

``estimate_s`` is the expected duration on an H100 machine (16 cores), used only
to document that a step fits; the report shows the measured durations.

Test files that no section names (and that are not in GPU_EXEMPT) still run on a
GPU: the ``unassigned`` section of step core takes them, and the report names them.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Section:
    name: str
    step: str
    what: str
    limit_s: int
    estimate_s: int
    tests: tuple[str, ...] = ()
    k: str | None = None
    m: str | None = None
    # pytest-xdist workers (0: in the pytest process itself). For sections of
    # many small independent tests; each worker is a process with its own CUDA context.
    workers: int = 0
    # pytest-timeout's limit for one test; None: the section's limit less 15 s, at most 180 s.
    test_timeout_s: int | None = None
    command: tuple[str, ...] = ()
    # Files the section writes that should come back with the report (globs, relative
    # to the repository root; only files written during this run are copied to $OUT).
    artifacts: tuple[str, ...] = ()
    env: dict = field(default_factory=dict)


# Runs first in every step: every module the suite and the benchmarks import that
# is not Python's own. The distribution is pip's name; a module that is not on the
# GPU image is listed with its pinned version in requirements-gpu.txt and brought
# as a wheel (`make gpu-wheels`). test/test_gpu_report.py checks that everything the
# suite imports at collection is listed here.
REQUIRED_MODULES: dict[str, str] = {
    "torch": "torch",
    "triton": "triton",
    "numpy": "numpy",
    "sympy": "sympy",
    "networkx": "networkx",
    "filelock": "filelock",
    "jinja2": "jinja2",
    "mpmath": "mpmath",
    "typing_extensions": "typing-extensions",
    "pytest": "pytest",
    "pytest_timeout": "pytest-timeout",
    "xdist": "pytest-xdist",
    "expecttest": "expecttest",
}

# Sections that run in every step, before the step's own.
BUILD = Section(
    name="build",
    step="*",
    what="torch_accel._C with the CUDA runtime, against the preinstalled torch (make gpu-build)",
    limit_s=300,
    estimate_s=120,
    command=("make", "--no-print-directory", "gpu-build"),
)

EAGER_FILES = (
    "test/test_tensors.py",
    "test/test_fallback.py",
    "test/test_fake_tensor.py",
    "test/test_autocast.py",
    "test/test_models.py",
)

SECTIONS: tuple[Section, ...] = (
    # core: the runtime itself and eager ops ------------------------------------------
    Section(
        name="accelrt",
        step="core",
        what="the host runtime library's own unit tests (C++)",
        limit_s=120,
        estimate_s=20,
        command=("make", "--no-print-directory", "-C", "third_party/accelrt", "test"),
    ),
    Section(
        name="device",
        step="core",
        what="devices, streams, events, memory, lazy init, RNG, serialization, torch.accelerator",
        limit_s=240,
        estimate_s=70,
        tests=(
            "test/test_device.py",
            "test/test_streams_events.py",
            "test/test_memory.py",
            "test/test_lazy_init.py",
            "test/test_accelerator.py",
            "test/test_random.py",
            "test/test_graphs.py",
            "test/test_serialization.py",
            "test/test_autoload.py",
            "test/test_dynamo_interface.py",
            "test/test_device_module_contract.py",
            "test/test_environment.py",
            "test/test_cuda_visible_devices.py",
        ),
    ),
    Section(
        name="tensor-kinds",
        step="core",
        what="quantized, sparse and nested accel tensors on the target's kernels of their kind (QuantizedCUDA, SparseCUDA, ...)",
        limit_s=180,
        estimate_s=40,
        tests=("test/test_tensor_kinds.py", "test/test_quantized.py", "test/test_sparse.py"),
    ),
    Section(
        name="eager",
        step="core",
        what="eager ops through the alias fallback, autocast, FakeTensor, model training against cuda",
        limit_s=300,
        estimate_s=90,
        tests=EAGER_FILES,
        k="not attention",
        workers=4,
    ),
    # The attention tests of the same files: eager and sdpa split them by -k.
    Section(
        name="sdpa",
        step="core",
        what="scaled_dot_product_attention: the backend accel takes (fused where cuda's is) and its results",
        limit_s=120,
        estimate_s=20,
        tests=EAGER_FILES,
        k="attention",
    ),
    Section(
        name="profiler",
        step="core",
        what="torch.profiler with CUPTI: accel's kernels recorded and named accel",
        limit_s=180,
        estimate_s=45,
        tests=("test/test_profiler.py",),
    ),
    Section(
        name="multiprocessing",
        step="core",
        what="accel tensors and interprocess events shared across processes (torch.multiprocessing, CUDA IPC)",
        limit_s=180,
        # About four spawned children that each start CUDA.
        estimate_s=60,
        tests=("test/test_multiprocessing.py",),
    ),
    # compile: Inductor with real Triton, and c10d over NCCL --------------------------
    Section(
        name="compile",
        step="compile",
        what="torch.compile: Inductor's Triton kernels compiled and launched on accel streams; every patch's source hashed",
        limit_s=450,
        estimate_s=280,
        tests=("test/test_compile.py", "test/test_compile_triton.py", "test/test_patches.py"),
    ),
    Section(
        name="compile-graphs",
        step="compile",
        what='torch.compile(mode="reduce-overhead") and make_graphed_callables on CUDA graphs captured for accel',
        limit_s=180,
        estimate_s=60,
        tests=("test/test_compile_graphs.py",),
    ),
    # The reduce-overhead benchmark (benchmarks/run.py --sections graphs) runs in
    # this step, not in bench, whose sections already fill its command: run alone
    # (GPU_TEST_STEPS=compile) it writes a results file of its own run.
    Section(
        name="bench-graphs",
        step="compile",
        what='mode="reduce-overhead" on a small-op model: accel graphs against the default compile and cuda graph trees',
        limit_s=150,
        estimate_s=30,
        command=(
            "{python}",
            "benchmarks/run.py",
            "--sections",
            "graphs",
            "--run-id",
            "{run_id}",
            "--output-dir",
            "{results}",
            "{bench_args}",
        ),
        artifacts=("{results}/*.md", "{results}/*.json", "{results}/*.jsonl"),
    ),
    Section(
        name="distributed",
        step="generic",
        what=(
            "c10d backend accel over NCCL: world size 1 on one GPU, 2 ranks where two GPUs exist; DDP; "
            "DeviceMesh, DTensor, FSDP2 mixed precision, tensor parallel, DCP against cpu"
        ),
        limit_s=300,
        estimate_s=160,
        tests=("test/test_distributed.py", "test/test_distributed_breadth.py"),
    ),
    # opinfo: PyTorch's operator database on the CUDA runtime --------------------------
    Section(
        name="opinfo",
        step="opinfo",
        what="every op of op_db on accel against cuda, bitwise (one test: the sweep, in worker processes)",
        limit_s=420,
        estimate_s=270,
        tests=("test/test_opinfo.py",),
        test_timeout_s=405,
        artifacts=("build/opinfo-coverage.json",),
    ),
    Section(
        name="device-rules",
        step="opinfo",
        what="deterministic mode and CPU operands/outputs over the OpInfo samples, against cuda itself",
        limit_s=150,
        estimate_s=60,
        tests=("test/test_deterministic.py", "test/test_device_rules.py"),
    ),
    # generic: PyTorch's device-generic test classes ------------------------------------
    Section(
        name="device-generic",
        step="generic",
        what="PyTorch's device-generic tests instantiated for accel: out=, FakeTensor, gradients, modules, optimizers; "
        "the paths PyTorch picks by device type (RNN, dropout, optimizer defaults, ...), pinned and by default",
        limit_s=420,
        estimate_s=250,
        tests=("test/test_device_generic.py", "test/test_divergent_paths.py"),
        workers=6,
        artifacts=("build/device-generic-report.json",),
    ),
    # bench: benchmarks/run.py, one benchmark per section, results written after each ---
    *(
        Section(
            name=f"bench-{name}",
            step="bench",
            what=what,
            limit_s=limit,
            estimate_s=estimate,
            command=(
                "{python}",
                "benchmarks/run.py",
                "--sections",
                name,
                "--run-id",
                "{run_id}",
                "--output-dir",
                "{results}",
                "{bench_args}",
            ),
            artifacts=("{results}/*.md", "{results}/*.json", "{results}/*.jsonl"),
        )
        for name, what, limit, estimate in (
            ("ops", "eager per-op time, accel against cuda (33 small ops)", 150, 30),
            ("calls", "compiled tiny graphs' per-call time, and the wrapper's device guard and stream calls against cuda's", 150, 25),
            ("throughput", "matmul TFLOP/s (float32, bfloat16) and device-to-device copy GB/s", 120, 30),
            ("sdpa", "scaled_dot_product_attention forward, accel against cuda", 120, 30),
            ("models", "training steps (transformer block, CNN) in eager mode, and the AdamW step alone", 180, 70),
            ("compiled", "training steps under torch.compile (Inductor, Triton)", 300, 180),
            ("streams", "stream and event call latency, accel against cuda", 90, 20),
        )
    ),
    # Last: the least needed on a GPU. --quick: 3 rounds of its 4 processes with
    # torch_accel's bytecode cached and 1 of 3 compiling its sources, not 15 and 7.
    Section(
        name="bench-startup",
        step="bench",
        what="import and first-tensor time",
        limit_s=90,
        estimate_s=35,
        command=(
            "{python}",
            "benchmarks/run.py",
            "--sections",
            "startup",
            "--quick",
            "--run-id",
            "{run_id}",
            "--output-dir",
            "{results}",
            "{bench_args}",
        ),
        artifacts=("{results}/*.md", "{results}/*.json", "{results}/*.jsonl"),
    ),
)

STEPS: tuple[str, ...] = ("core", "compile", "opinfo", "generic", "bench")

# Test files no GPU run needs, with the reason.
GPU_EXEMPT: dict[str, str] = {
    "test/test_gpu_report.py": "tests this runner with fake sections, on no device (make test runs it)",
    "test/test_workflows.py": "checks the CI workflow files (actionlint is not on the GPU image; make test runs it)",
}
