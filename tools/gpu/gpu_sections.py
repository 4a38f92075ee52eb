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
in one command (a GPU CI runner, which has no 10-minute limit), except the
steps of SUBSET_STEPS, whose tests the other steps run too.

The ``smoke`` step is the first command of a GPU window: a few representative
tests of every path that only a GPU can prove (see its sections), within 6
minutes on a fresh machine, build included.

``estimate_s`` is the expected duration on an H100 machine (16 cores), used only
to document that a step fits; the report shows the measured durations, and
test/reports/gpu-sections.md keeps each section's last GPU run (date, commit,
outcome, time), from which ``gpu_report.py --next`` picks what to run next.

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
    # A real model's package (test_models), on the GPU image only; see GPU_IMAGE_ONLY.
    "torchvision": "torchvision",
    # Checkpoints loaded onto accel (test_interop), on the GPU image at the pinned version.
    "safetensors": "safetensors",
    # The Hugging Face stack (test_transfer_to_accel), on the GPU image at the pinned versions.
    "transformers": "transformers",
    "accelerate": "accelerate",
    "huggingface_hub": "huggingface-hub",
}

# Modules of REQUIRED_MODULES that the GPU image has preinstalled, at the
# version requirements-dev.txt pins for the CPU machines: the GPU run brings no
# wheel for them (test/test_gpu_report.py checks the others here).
GPU_IMAGE_ONLY: frozenset[str] = frozenset({"torchvision", "safetensors", "transformers", "accelerate", "huggingface_hub"})

# Sections that run in every step, before the step's own.
BUILD = Section(
    name="build",
    step="*",
    what="torch_accel._C with the CUDA runtime, against the preinstalled torch (make gpu-build)",
    limit_s=300,
    # 63 compile units, about 450 s of compiling on the 2-core host VM (its
    # slowest unit about 50 s), one job per CPU: 16 cores take about a
    # minute, plus setup.py and the link. The report measures it.
    estimate_s=90,
    command=("make", "--no-print-directory", "gpu-build"),
)

# The smoke step: node ids of the suite, a few per path that only a GPU can
# prove, sections in the order of what matters most (a deadline cuts the last).
# Their estimates (fresh H100/H200, 16 cores) start from each selection's time
# through this runner on the 2-core host VM (noted per section) and the one H100
# run of 2026-11-23 (247 tests in 135 s, start-up included), counting about 5 s
# per pytest process (interpreter, torch, accel, collection), 3 to 4 s per child
# process that starts CUDA, and about 2 s per graph that Inductor compiles with
# Triton; docs/gpu-runs.md has the table. The report measures each.
SMOKE_SECTIONS: tuple[Section, ...] = (
    Section(
        name="smoke-device",
        step="smoke",
        what=(
            "devices, streams, events (timing, interprocess in one process), memory and snapshots, pinned memory, "
            "RNG, lazy init (torch.cuda's state after accel's), getDeviceFromPtr"
        ),
        limit_s=120,
        # Host: 15.5 s for its 24 tests (one starts an interpreter and forks).
        estimate_s=15,
        tests=(
            "test/test_device.py::test_runtime_and_target",
            "test/test_device.py::test_device_properties",
            "test/test_device.py::test_set_and_current_device",
            "test/test_streams_events.py::test_event_elapsed_time_positive",
            "test/test_streams_events.py::test_cross_stream_ordering",
            "test/test_streams_events.py::test_stream_priorities_have_cudas_semantics",
            "test/test_streams_events.py::test_interprocess_event_handle_opens_in_the_same_process",
            "test/test_memory.py::test_memory_allocated_follows_tensors",
            "test/test_memory.py::test_record_stream_keeps_memory_for_the_stream",
            "test/test_memory.py::test_out_of_memory_names_accel_and_recovers",
            "test/test_memory.py::test_snapshot_has_the_visualiser_format",
            "test/test_memory.py::test_non_blocking_copy_from_pinned_memory",
            "test/test_memory.py::test_device_from_pointer_answers_as_cuda_does",
            "test/test_random.py::test_default_generator_matches_after_seeding",
            "test/test_random.py::test_dropout_draws_from_accel_state",
            "test/test_lazy_init.py::test_target_module_knows_accel_initialised_its_runtime",
        ),
    ),
    Section(
        name="smoke-ops",
        step="smoke",
        what="a sample of op_db (30 ops of every kernel family, 3 samples of each of 5 dtypes) and eager ops against cuda, bitwise",
        limit_s=150,
        # Host: 22 s (9 s of it importing op_db); about 900 small kernels on each device.
        estimate_s=20,
        tests=(
            "test/test_opinfo.py::test_sampled_op_matches_target",
            "test/test_fallback.py::test_out_variant_with_tuple_outs",
            "test/test_fallback.py::test_foreach_inplace_on_lists",
            "test/test_tensors.py::test_dtype_conversion_matches_target",
        ),
    ),
    Section(
        name="smoke-sdpa",
        step="smoke",
        what="fused attention: flash (float16, bfloat16), memory-efficient with a mask, eager and compiled, against cuda",
        limit_s=120,
        # Host: 20 s; 8 eager tests, and 2 compiled ones (three graphs of extern kernels).
        estimate_s=20,
        tests=(
            "test/test_fallback.py::test_attention_runs_the_targets_fused_kernels",
            "test/test_fallback.py::test_attention_with_a_mask_runs_the_targets_backend",
            "test/test_compile.py::test_compiled_attention_runs_the_targets_fused_kernels",
            "test/test_compile.py::test_compiled_attention_with_a_mask_calls_the_targets_fused_operator",
        ),
    ),
    Section(
        name="smoke-aot",
        step="smoke",
        what=(
            "an AOTInductor package run on accel against cuda's: the C++ wrapper around Triton kernels, "
            "accel's C shim, the model runner, constants as accel views"
        ),
        limit_s=150,
        # Host: about 20 s (two packages of an MLP: accel's and the target's).
        estimate_s=20,
        tests=("test/test_aot_inductor.py::test_package_runs_as_the_targets[mlp]",),
    ),
    Section(
        name="smoke-compile",
        step="smoke",
        what="torch.compile with real Triton: pointwise and reduction kernels against cuda's, dynamic shapes",
        limit_s=150,
        # Six graphs (each op for accel and for cuda, two sizes), Inductor's compile
        # workers starting; the training step is smoke-graphs' (default and
        # reduce-overhead, forward and backward).
        estimate_s=25,
        tests=(
            "test/test_compile.py::test_operator[pointwise]",
            "test/test_compile.py::test_operator[reduction]",
            "test/test_compile.py::test_dynamic_shapes",
        ),
    ),
    Section(
        name="smoke-graphs",
        step="smoke",
        what=(
            'CUDA graphs for accel: torch.accel.Graph (replay, RNG, user generators, failed captures), '
            'mode="reduce-overhead" (inference, training, another device, cuBLAS workspaces), make_graphed_callables'
        ),
        limit_s=180,
        # Host: 29 s; about 12 compiled graphs (a training step's forward and
        # backward in both modes among them).
        estimate_s=35,
        tests=(
            "test/test_graphs.py::test_capture_records_without_running_and_replay_matches_eager",
            "test/test_graphs.py::test_random_numbers_are_fresh_at_each_replay",
            "test/test_graphs.py::test_replays_draw_from_a_registered_user_generator_as_eager",
            "test/test_graphs.py::test_failed_capture_leaves_nothing_behind",
            "test/test_graphs.py::test_concurrent_captures_into_one_pool_are_refused_and_the_first_goes_on",
            "test/test_graphs.py::test_captured_training_step_matches_eager",
            "test/test_compile_graphs.py::test_inference_is_captured_without_skips_and_matches_target_bitwise",
            "test/test_compile_graphs.py::test_training_replays_forward_and_backward_bitwise[mlp]",
            "test/test_compile_graphs.py::test_model_on_another_device_than_the_current_one_is_captured_on_its_own",
            "test/test_compile_graphs.py::test_library_workspaces_are_cleared_around_each_capture",
            "test/test_compile_graphs.py::test_a_capture_that_an_operation_invalidates_leaves_nothing_behind",
            "test/test_compile_graphs.py::test_make_graphed_callables_module_forward_backward_bitwise",
        ),
    ),
    Section(
        name="smoke-profiler",
        step="smoke",
        what="torch.profiler with CUPTI: accel's kernels timed, linked to their operators, one name per trace process",
        limit_s=90,
        # Host: 9 s; CUPTI starts with the first trace.
        estimate_s=10,
        tests=(
            "test/test_profiler.py::test_accel_time_per_operator",
            "test/test_profiler.py::test_kernels_are_linked_to_their_operators",
            "test/test_profiler.py::test_chrome_trace_has_ranges_and_accel_kernels",
        ),
    ),
    Section(
        name="smoke-ipc",
        step="smoke",
        what="CUDA IPC: accel tensors and an interprocess event between two processes, memory given back (ipc_collect)",
        limit_s=120,
        # Host: 16 s; two spawned children that each import torch and start CUDA.
        estimate_s=15,
        tests=(
            "test/test_multiprocessing.py::test_queue_round_trips_and_ownership",
            "test/test_multiprocessing.py::test_ipc_collect_leaves_nothing_of_memory_every_receiver_released",
        ),
    ),
    Section(
        name="smoke-nccl",
        step="smoke",
        what="c10d backend accel over NCCL: every collective and point-to-point case (world size 1, 2 ranks where two GPUs exist)",
        limit_s=150,
        # Host: 21 s; one launch of the ranks (each starts CUDA and NCCL) for every case.
        estimate_s=20,
        tests=(
            "test/test_distributed.py::test_engine_is_the_targets_default_backend",
            "test/test_distributed.py::test_collective_matches_the_target_bitwise",
            "test/test_distributed.py::test_peer_to_peer_matches_the_target_bitwise",
            "test/test_distributed.py::test_barrier_waits_for_every_rank",
        ),
    ),
    Section(
        name="smoke-models",
        step="smoke",
        what="training steps against cuda (its run in a child process): the suite's CNN, and torchvision's ResNet-18 from the GPU image",
        limit_s=150,
        # Two target runs in child processes (CUDA start-up, the training cases,
        # ResNet-18's two steps) and the accel runs.
        estimate_s=25,
        tests=(
            "test/test_models.py::test_training_matches_the_target_bitwise[cnn-sgd]",
            "test/test_models.py::test_a_real_model_of_an_installed_package_trains_as_on_the_target",
        ),
    ),
    Section(
        name="smoke-bench",
        step="smoke",
        what="the headline benchmarks against cuda, quick: per-op time, matmul TFLOP/s and copy GB/s, one compiled training step (CNN)",
        limit_s=150,
        # Host: 42 s. ops and throughput take seconds; the compiled CNN compiles
        # its forward and backward twice (accel here, cuda in a child).
        estimate_s=35,
        command=(
            "{python}",
            "benchmarks/run.py",
            "--quick",
            "--sections",
            "ops,throughput,compiled",
            "--models",
            "cnn",
            "--run-id",
            "{run_id}",
            "--output-dir",
            "{results}",
            "{bench_args}",
        ),
        artifacts=("{results}/*.md", "{results}/*.json", "{results}/*.jsonl"),
    ),
)

EAGER_FILES = (
    "test/test_tensors.py",
    "test/test_fallback.py",
    "test/test_fake_tensor.py",
    "test/test_autocast.py",
    "test/test_models.py",
)

SECTIONS: tuple[Section, ...] = (
    *SMOKE_SECTIONS,
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
            "test/test_stream_sanitizer.py",
            "test/test_memory.py",
            "test/test_lazy_init.py",
            "test/test_accelerator.py",
            "test/test_random.py",
            "test/test_graphs.py",
            "test/test_serialization.py",
            "test/test_export.py",
            "test/test_autoload.py",
            "test/test_dynamo_interface.py",
            "test/test_device_module_contract.py",
            "test/test_environment.py",
            "test/test_cuda_visible_devices.py",
            "test/test_capabilities.py",
            "test/test_thread_stress.py",
        ),
    ),
    Section(
        name="cuda-programs",
        # In the opinfo step, the one with room: core's and generic's 540 s are full.
        step="opinfo",
        what=(
            "unmodified CUDA programs on accel (torch_accel.transfer_to_accel): a training script and DDP with 2 "
            "ranks; accelerate's Accelerator, transformers' Trainer and device_map over accel devices"
        ),
        limit_s=300,
        # Host: 13 tests in fresh interpreters, about 5 minutes on the 2-core VM, most of it importing
        # transformers; 16 cores and a warm page cache take a fraction of that.
        estimate_s=90,
        tests=("test/test_transfer_to_accel.py",),
    ),
    Section(
        name="extensions-and-pools",
        step="core",
        what=(
            "users' kernels: the example extension's CUDA variant built with nvcc and run (its own kernel on accel's "
            "cudaStream_t, a CUDA-only operator through the fallback); memory pools, graph capture into a pool, "
            "pluggable allocators (cudaMalloc), CUDA's private pools"
        ),
        # The CUDA variant's build (nvcc, ninja) is most of it.
        limit_s=300,
        estimate_s=90,
        tests=("test/test_extension.py", "test/test_memory_pools.py"),
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
        what="torch.profiler with CUPTI: accel's kernels recorded and named accel; NVTX ranges (torch.accel.nvtx)",
        limit_s=180,
        estimate_s=45,
        tests=("test/test_profiler.py", "test/test_nvtx.py"),
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
    Section(
        name="interop",
        step="core",
        what=(
            "nn.DataParallel over accel devices (two GPUs), DLPack and __cuda_array_interface__ as CUDA memory "
            "(CuPy reads accel tensors), safetensors onto accel"
        ),
        limit_s=120,
        # Host: 2 s for its 20 tests; CuPy's import and first kernel add a few seconds.
        estimate_s=15,
        tests=("test/test_interop.py",),
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
        name="compile-flex",
        step="compile",
        what="FlexAttention's Triton templates on accel (forward, backward, decoding) against cuda's code; user Triton kernels on accel's stream, triton_op compiled",
        limit_s=240,
        estimate_s=75,
        tests=("test/test_flex_attention.py", "test/test_user_triton_kernels.py"),
    ),
    Section(
        name="compile-cpp-wrapper",
        step="aot",
        what=(
            "cpp_wrapper=True and AOTInductor packages on accel: the C++ wrapper around Triton kernels, accel's C shim "
            "and model runner, against cuda's wrapper and packages; a package run by a C++ program without Python"
        ),
        limit_s=300,
        estimate_s=150,
        tests=("test/test_cpp_wrapper.py", "test/test_aot_inductor.py", "test/test_aoti_cpp_program.py"),
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
            ("flex", "compiled FlexAttention forward (causal, document mask), accel against cuda", 150, 30),
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

STEPS: tuple[str, ...] = ("smoke", "core", "compile", "aot", "opinfo", "generic", "bench")
# Steps whose sections repeat tests of the other steps: `all` leaves them out.
SUBSET_STEPS: tuple[str, ...] = ("smoke",)
# The step of the section that takes the test files no section names.
UNASSIGNED_STEP = "core"
# The smoke step's whole command on a fresh machine, build included (issue 28).
SMOKE_BUDGET_S = 360

# Test files no GPU run needs, with the reason.
GPU_EXEMPT: dict[str, str] = {
    "test/test_gpu_report.py": "tests this runner with fake sections, on no device (make test runs it)",
    "test/test_workflows.py": "checks the CI workflow files (actionlint is not on the GPU image; make test runs it)",
    "test/test_floors.py": "reads csrc/'s includes, on no device (make test and make lint run it)",
    "test/test_fuzz.py": (
        "the fuzzer's fixed seeds are checked against the host runtime's target (cpu); on CUDA its bitwise rule "
        "would first need CUDA's nondeterministic kernels (atomics: index_add_, scatter_add_, index_put_ with "
        "accumulate) compared otherwise, and it has not run there yet (docs/testing.md#differential-fuzzing)"
    ),
    "test/test_faults.py": (
        "fault injection is the host runtime's (accelrt's switch); on the CUDA runtime arming a fault raises "
        "(docs/fault-injection.md)"
    ),
    "test/test_sanitizers.py": "builds and runs the planted ASan/UBSan/TSan defects with the host compiler, on no device",
    "test/test_cpp_wrapper_cuda_codegen.py": (
        "generates and compiles cpp_wrapper/AOTInductor C++ for a mocked CUDA runtime on the host runtime, on no "
        "device; on a GPU, test_cpp_wrapper.py and test_aot_inductor.py build and run the same on the CUDA runtime"
    ),
    "test/test_soak.py": (
        "the short soak checks the host runtime's figures stay flat; on a GPU, `make soak` is the run to make "
        "(its minutes do not fit a step's budget), and it has not run there yet (docs/soak.md)"
    ),
}
