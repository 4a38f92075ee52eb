"""accel against its target device, side by side: `make bench`.

Every figure is accel's time over the target's (cuda on the CUDA runtime, cpu
on the host runtime), each the median of repeated runs after warm-up, taken in
this one process with accel's and the target's runs alternating (so that a
drifting machine slows both alike); the exception is CUDA training steps, whose cuda reference
runs in a child process without torch_accel (see workloads.py). The per-op
list is also measured in instructions per call (valgrind's callgrind, in a
child process: a stable metric where time varies), and every accel/target
ratio above the goals of issue 19 is printed as a warning. Results go to
benchmarks/results/<runtime>-<machine>.{md,json}, rewritten after each section
(a run killed in a later section keeps the earlier ones); each run's per-op
figures are added to benchmarks/results/history.jsonl.

  python benchmarks/run.py [--quick] [--sections ops,instructions,calls,throughput,streams,sdpa,models,compiled,graphs,startup]
                           [--no-compile] [--no-history] [--output-dir DIR] [--run-id ID] [--ops OP,OP]

--ops keeps only the named ops of the per-op list (its names, as in the
tables: `--ops add,clone,torch.tensor(list)`), for quick measurements of a
change; such a run is a partial one and is best kept out of the history
(--no-history).
"""

import argparse
import datetime
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)
sys.path.insert(0, HERE)

import torch  # noqa: E402

import torch_accel  # noqa: E402
from workloads import (  # noqa: E402
    interleaved_median_times,
    interleaved_times,
    model_step,
    optimizer_step,
    small_op_step,
    training_step,
)

TARGET = torch_accel._target_device_type()


# 1. Eager per-op host overhead -------------------------------------------------

# The goals of issue 19 for accel/target ratios of the per-op list (time and
# instructions): the median, and every op on the host runtime. A ratio above
# its goal is printed as a warning and listed in the results.
GOALS = {"cpu": {"median": 1.10, "worst": 1.25}, "cuda": {"median": 1.05, "worst": None}}
# `import torch_accel` may add at most this to `import torch` (ms).
IMPORT_GOAL_MS = 30.0


# The ops of the per-op list to measure (--ops); None: all of them.
SELECTED_OPS: list[str] | None = None


def op_cases(device: str) -> dict:
    """The per-op list on `device` (only SELECTED_OPS when set)."""
    cases = all_op_cases(device)
    if SELECTED_OPS is None:
        return cases
    unknown = [name for name in SELECTED_OPS if name not in cases]
    if unknown:
        raise ValueError(f"unknown ops {unknown}; the per-op list has: {', '.join(cases)}")
    return {name: cases[name] for name in SELECTED_OPS}


def all_op_cases(device: str) -> dict:
    g = torch.Generator().manual_seed(0)
    a = torch.randn(64, 64, generator=g).to(device)
    b = torch.randn(64, 64, generator=g).to(device)
    v = torch.randn(1024, generator=g).to(device)
    w = torch.randn(1024, generator=g).to(device)
    idx = torch.randint(0, 64, (16,), generator=g).to(device)
    emb = torch.randn(100, 32, generator=g).to(device)
    tokens = torch.randint(0, 100, (8, 16), generator=g).to(device)
    lin = torch.nn.Linear(64, 64).to(device)
    dst = torch.empty_like(a)
    mask = a > 0
    scalar = torch.randn((), generator=g).to(device)
    # An optimizer's view of a small model: a few parameters and their gradients.
    params = [torch.randn(shape, generator=g).to(device) for shape in ((64, 64), (64,), (32, 64), (32,))]
    grads = [torch.randn_like(p).to(device) for p in params]
    values = [0.5, 1.5, -2.0, 3.0]
    return {
        "add": lambda: a + b,
        "mul": lambda: a * b,
        "relu": lambda: torch.relu(a),
        "sum": lambda: a.sum(),
        "mean": lambda: a.mean(dim=1),
        "matmul 64x64": lambda: a @ b,
        "linear": lambda: lin(a),
        "softmax": lambda: torch.softmax(a, -1),
        "layer_norm": lambda: torch.nn.functional.layer_norm(a, (64,)),
        "cat": lambda: torch.cat([a, b]),
        "index": lambda: a[idx],
        "slicing": lambda: a[1:9, ::2],
        "view/reshape": lambda: a.view(4096).reshape(32, 128),
        "copy_": lambda: dst.copy_(a),
        "to(dtype)": lambda: a.to(torch.float16),
        "fill_": lambda: dst.fill_(1.5),
        "zero_": lambda: dst.zero_(),
        "where": lambda: torch.where(mask, a, b),
        "embedding": lambda: torch.nn.functional.embedding(tokens, emb),
        "add_ (in-place)": lambda: v.add_(1.0),
        # Optimizer-style ops (an AdamW step is made of these).
        "_foreach_add_": lambda: torch._foreach_add_(params, grads, alpha=1e-3),
        "_foreach_mul_": lambda: torch._foreach_mul_(params, 0.999),
        "addcmul_": lambda: v.addcmul_(w, w, value=1e-3),
        "lerp_": lambda: v.lerp_(w, 0.1),
        "clone": lambda: a.clone(),
        "contiguous (transposed)": lambda: a.t().contiguous(),
        "masked_fill": lambda: a.masked_fill(mask, 0.0),
        "argmax": lambda: a.argmax(dim=1),
        "topk": lambda: v.topk(8),
        "gt (a > b)": lambda: a > b,
        "eq (a == 0)": lambda: a == 0,
        "item()": lambda: scalar.item(),
        "torch.tensor(list)": lambda: torch.tensor(values, device=device),
    }


def bench_ops(quick: bool) -> list[dict]:
    rows = []
    repeats, inner = (5, 50) if quick else (15, 200)
    accel_cases, target_cases = op_cases("accel"), op_cases(TARGET)
    for name in accel_cases:
        times = interleaved_median_times({"accel": (accel_cases[name], "accel"), TARGET: (target_cases[name], TARGET)}, repeats, inner)
        accel, target = times["accel"], times[TARGET]
        rows.append({"op": name, "accel_us": accel * 1e6, "target_us": target * 1e6, "ratio": accel / target})
    return rows


# 1b. Instructions per op (callgrind) ---------------------------------------------
#
# Wall time on a shared machine varies by some 10% from run to run; the number
# of instructions an op executes hardly varies. The per-op list runs in one
# child process under valgrind's callgrind, instrumented only once torch and
# torch_accel are imported and the cases built (--instr-atstart=no, then
# callgrind_control -i on: an uninstrumented start is ~3x faster), and
# collecting only around each timed loop (torch._C._valgrind_toggle; each
# loop's counts go to a dump file of their own). Kernels run on one thread
# there (both devices alike), so that the counts repeat from run to run.

CALLGRIND_WARMUP, CALLGRIND_ITERATIONS = 3, 20


def callgrind_child(out_dir: str) -> None:
    """Runs in the process under callgrind: every op, accel's and the
    target's, collected around CALLGRIND_ITERATIONS calls each (after
    CALLGRIND_WARMUP uncollected ones), in the order written to order.json."""
    # One thread: valgrind runs threads one at a time, and a thread pool's
    # workers spinning while they wait would add a varying count.
    torch.set_num_threads(1)
    cases = {"accel": op_cases("accel"), TARGET: op_cases(TARGET)}
    subprocess.run(["callgrind_control", "--instr=on", str(os.getpid())], check=True, capture_output=True)
    order = []
    for name in cases["accel"]:
        for device in ("accel", TARGET) if len(order) % 4 == 0 else (TARGET, "accel"):
            fn = cases[device][name]
            for _ in range(CALLGRIND_WARMUP):
                fn()
            torch._C._valgrind_toggle()
            for _ in range(CALLGRIND_ITERATIONS):
                fn()
            torch._C._valgrind_toggle_and_dump_stats()
            order.append((name, device))
    with open(os.path.join(out_dir, "order.json"), "w") as f:
        json.dump(order, f)


def bench_instructions(quick: bool) -> list[dict]:
    import shutil
    import tempfile

    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        raise RuntimeError("valgrind (callgrind) is not installed: no instruction counts")
    with tempfile.TemporaryDirectory(prefix="accel-callgrind-") as out_dir:
        command = [
            "valgrind",
            "--tool=callgrind",
            "--instr-atstart=no",
            "--collect-atstart=no",
            f"--callgrind-out-file={out_dir}/callgrind.out.%p",
            sys.executable,
            os.path.abspath(__file__),
            "--callgrind-child",
            out_dir,
        ]
        if SELECTED_OPS is not None:
            command.append(f"--ops={','.join(SELECTED_OPS)}")
        env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
        proc = subprocess.run(command, capture_output=True, text=True, timeout=1200, cwd=ROOT, env=env)
        if proc.returncode != 0:
            raise RuntimeError(f"the callgrind child exited with {proc.returncode}: {' | '.join(proc.stderr.strip().splitlines()[-3:])}")
        with open(os.path.join(out_dir, "order.json")) as f:
            order = json.load(f)
        dumps = {}
        for path in os.listdir(out_dir):
            match = re.fullmatch(r"callgrind\.out\.\d+\.(\d+)", path)
            if match:
                with open(os.path.join(out_dir, path)) as f:
                    totals = re.search(r"^totals:\s*(\d+)", f.read(), re.MULTILINE)
                dumps[int(match.group(1))] = int(totals.group(1))
    if len(dumps) != len(order):
        raise RuntimeError(f"callgrind wrote {len(dumps)} dumps for {len(order)} measurements")
    per_call: dict[str, dict[str, float]] = {}
    for number, (name, device) in enumerate(order, start=1):
        per_call.setdefault(name, {})[device] = dumps[number] / CALLGRIND_ITERATIONS
    return [
        {"op": name, "accel_instr": counts["accel"], "target_instr": counts[TARGET], "ratio": counts["accel"] / counts[TARGET]}
        for name, counts in per_call.items()
    ]


def ratio_summary(rows: list[dict]) -> dict:
    """The median and worst ratio of a per-op table, and the ops above the goals."""
    ratios = [r["ratio"] for r in rows]
    goals = GOALS.get(TARGET, GOALS["cpu"])
    worst = max(rows, key=lambda r: r["ratio"])
    over = [r["op"] for r in rows if goals["worst"] is not None and r["ratio"] > goals["worst"]]
    return {"median": statistics.median(ratios), "worst": worst["ratio"], "worst_op": worst["op"], "over_goal": over}


def goal_warnings(section: str, results: dict) -> list[str]:
    """One line for every ratio of `section` above its goal (issue 19)."""
    goals = GOALS.get(TARGET, GOALS["cpu"])
    what = {"ops": "time", "instructions": "instructions"}.get(section)
    warnings = []
    if what is not None and section in results:
        summary = results[f"{section}_summary"]
        if summary["median"] > goals["median"]:
            warnings.append(f"{what}: median accel/{TARGET} {summary['median']:.3f} is above its goal {goals['median']:.2f}")
        for row in results[section]:
            if goals["worst"] is not None and row["ratio"] > goals["worst"]:
                warnings.append(f"{what}: {row['op']} accel/{TARGET} {row['ratio']:.3f} is above the per-op goal {goals['worst']:.2f}")
    if section == "startup" and section in results:
        # The in-process figure: what torch_accel's import costs, without the
        # noise of two whole `import torch` of a shared machine around it.
        added = next(r["added_ms"] for r in results["startup"] if r["what"].startswith("import torch_accel, timed in the process"))
        if added > IMPORT_GOAL_MS:
            warnings.append(f"startup: import torch_accel adds {added:.1f} ms, above its goal {IMPORT_GOAL_MS:.0f} ms")
    return warnings


# 2. Device throughput -------------------------------------------------------------


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


# 3. Stream and event API latency -----------------------------------------------------


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


# 4. Model training steps -------------------------------------------------------------


def subprocess_model_step(model_name: str, compiled: bool, large: bool) -> dict:
    """The target's step in a process without torch_accel (CUDA: see workloads.py)."""
    env = dict(os.environ, TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    proc = subprocess.run(
        [sys.executable, os.path.join(HERE, "workloads.py"), TARGET, model_name, str(int(compiled)), str(int(large))],
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


def bench_models(quick: bool, compiled_modes: tuple[bool, ...], optimizer_alone: bool) -> list[dict]:
    large = TARGET == "cuda" and not quick
    repeats = 10 if quick or large else 40
    rows = []
    for model_name in ("transformer", "cnn"):
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


# 5. Scaled dot-product attention ------------------------------------------------------


def sdpa_cases(device: str) -> dict:
    """Attention forward passes (inference): the shapes of a small and a mid-sized
    model's layer. On cuda in bfloat16 (flash attention's dtypes), on cpu in float32."""
    if TARGET == "cuda":
        shapes, dtype = ((8, 16, 1024, 64), (4, 32, 2048, 128)), torch.bfloat16
    else:
        shapes, dtype = ((2, 4, 128, 64), (1, 8, 256, 64)), torch.float32
    g = torch.Generator().manual_seed(0)
    cases = {}
    for batch, heads, seq, dim in shapes:
        q, k, v = (torch.randn(batch, heads, seq, dim, generator=g).to(device=device, dtype=dtype) for _ in range(3))
        for causal in (False, True):
            name = f"{batch}x{heads}x{seq}x{dim} {str(dtype).removeprefix('torch.')}" + (" causal" if causal else "")
            cases[name] = lambda q=q, k=k, v=v, causal=causal: torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
    return cases


def bench_sdpa(quick: bool) -> list[dict]:
    """accel's SDPA against the target's, with the backend each one chose (the
    backward is left out: on the CUDA runtime the target's cannot run in this process)."""
    repeats, inner = (5, 5) if quick else (10, 20)
    accel_cases, target_cases = sdpa_cases("accel"), sdpa_cases(TARGET)
    rows = []
    for name in accel_cases:
        times = interleaved_median_times({"accel": (accel_cases[name], "accel"), TARGET: (target_cases[name], TARGET)}, repeats, inner)
        rows.append({"shape (BxHxSxD)": name, "accel_ms": times["accel"] * 1e3, "target_ms": times[TARGET] * 1e3, "ratio": times["accel"] / times[TARGET]})
    return rows


# 6. Import and first-tensor time -----------------------------------------------------


def bench_startup(quick: bool) -> list[dict]:
    """`import torch_accel`'s cost over `import torch`, and the first accel tensor.

    Each figure is the median over fresh processes. Python's bytecode cache
    matters: with PYTHONDONTWRITEBYTECODE=1 (set in some shells and CI) and no
    __pycache__ of its own, torch_accel compiles its sources at every import;
    an installed package has them compiled (pip compiles at install time). The
    headline figure, checked against the goal, is the installed one: bytecode
    cached (the children run with PYTHONDONTWRITEBYTECODE unset, after a
    warm-up import that writes torch_accel's __pycache__). The same is also
    measured with torch_accel compiling its sources at each import (its
    __pycache__ removed first, PYTHONDONTWRITEBYTECODE=1); torch's own
    bytecode is cached in both modes, as installed."""
    package = os.path.join(ROOT, "torch_accel")

    def bytecode_env(cached: bool) -> dict:
        env = dict(os.environ)
        if cached:
            env.pop("PYTHONDONTWRITEBYTECODE", None)
        else:
            env["PYTHONDONTWRITEBYTECODE"] = "1"
        return env

    def run(code: str, env: dict) -> list[float]:
        # The child prints the wall and CPU (process) seconds of its window
        # (of each of its windows); CPU time is the steadier on a shared machine.
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT, env=env).stdout
        return [float(value) for value in out.strip().splitlines()[-1].split()]

    def remove_bytecode() -> None:
        for folder, dirs, _ in os.walk(package):
            if "__pycache__" in dirs:
                shutil.rmtree(os.path.join(folder, "__pycache__"), ignore_errors=True)

    # `import torch` autoloads torch_accel (its torch.backends entry point).
    # With autoload on (the default), torch scans every installed
    # distribution's entry points whether or not a backend is installed: that
    # scan is torch's cost, so torch_accel's is measured against torch with
    # autoload on and accel's entry point hidden. torch with autoload off is
    # shown too. importlib.metadata (which torch imports in any case) is
    # imported before the clock starts in every child, alike. The processes
    # take turns, so a drifting machine slows all of them alike.
    hide_accel = (
        "_all = importlib.metadata.entry_points; importlib.metadata.entry_points = lambda **kw: "
        "importlib.metadata.EntryPoints(e for e in _all(**kw) if not e.value.startswith('torch_accel')) "
        "if kw.get('group') == 'torch.backends' else _all(**kw); "
    )
    clock = (
        "import importlib.metadata, time; t, c = time.perf_counter(), time.process_time(); import torch; "
        "t1, c1 = time.perf_counter(), time.process_time(); "
    )
    done = "print(time.perf_counter() - t, time.process_time() - c)"
    programs = {
        # Also times `import torch_accel` itself, in the same process, after
        # torch: only accel's own work in the window, the steadiest figure.
        "autoload off": (
            clock + "import torch_accel; print(t1 - t, c1 - c, time.perf_counter() - t1, time.process_time() - c1)",
            {"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"},
        ),
        "no backend": ("import importlib.metadata; " + hide_accel + clock + "assert not hasattr(torch, 'accel'); print(t1 - t, c1 - c)", {}),
        "torch_accel": (clock + "import torch_accel; " + done, {}),
        "first": (
            "import torch, torch_accel, time; t, c = time.perf_counter(), time.process_time(); "
            "x = torch.ones(1, device='accel'); torch_accel.synchronize(); " + done,
            {},
        ),
    }
    # Rounds of the processes: the installed case (the goal's) gets most. The
    # first tensor is timed after the import, so it is timed in that case only.
    # --quick (the GPU run's) runs about as many processes as before both
    # cases were timed.
    repeats = {True: 3, False: 1} if quick else {True: 15, False: 7}
    medians: dict[bool, dict[str, float]] = {}
    cpu_medians: dict[bool, dict[str, float]] = {}
    for cached in (False, True):
        env = bytecode_env(cached)
        if cached:
            run("import torch, torch_accel; print(0)", env)  # writes torch_accel's __pycache__
        else:
            remove_bytecode()
        samples: dict[str, list[list[float]]] = {name: [] for name in programs}
        for _ in range(repeats[cached]):
            for name, (code, extra) in programs.items():
                if cached or name != "first":
                    samples[name].append(run(code, dict(env, **extra)))
        medians[cached] = {name: statistics.median(t[0] for t in times) for name, times in samples.items() if times}
        cpu_medians[cached] = {name: statistics.median(t[1] for t in times) for name, times in samples.items() if times}
        medians[cached]["in process"] = statistics.median(t[2] for t in samples["autoload off"])
        cpu_medians[cached]["in process"] = statistics.median(t[3] for t in samples["autoload off"])
    rows = []
    for cached, mode in ((True, "bytecode cached"), (False, "sources compiled at import")):
        m, c = medians[cached], cpu_medians[cached]
        rows += [
            {"what": f"import torch, autoload off ({mode})", "ms": m["autoload off"] * 1e3, "cpu_ms": c["autoload off"] * 1e3},
            {
                "what": f"import torch, autoload on, no backend: torch's entry-point scan ({mode})",
                "ms": m["no backend"] * 1e3,
                "added_ms": (m["no backend"] - m["autoload off"]) * 1e3,
                "cpu_ms": c["no backend"] * 1e3,
                "added_cpu_ms": (c["no backend"] - c["autoload off"]) * 1e3,
            },
            {
                "what": f"import torch + torch_accel ({mode})",
                "ms": m["torch_accel"] * 1e3,
                "added_ms": (m["torch_accel"] - m["no backend"]) * 1e3,
                "over_autoload_off_ms": (m["torch_accel"] - m["autoload off"]) * 1e3,
                "cpu_ms": c["torch_accel"] * 1e3,
                "added_cpu_ms": (c["torch_accel"] - c["no backend"]) * 1e3,
            },
            {
                "what": f"import torch_accel, timed in the process after import torch ({mode})",
                "ms": m["in process"] * 1e3,
                "added_ms": m["in process"] * 1e3,
                "cpu_ms": c["in process"] * 1e3,
                "added_cpu_ms": c["in process"] * 1e3,
            },
        ]
        if "first" in m:
            rows.append({"what": "first accel tensor, lazy init (after the import)", "ms": m["first"] * 1e3, "cpu_ms": c["first"] * 1e3})
    return rows


# 7. Compiled graphs' per-call cost ------------------------------------------------
#
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


# 8. mode="reduce-overhead": graphs against the default compile --------------------


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


# Report --------------------------------------------------------------------------------

# Each section: its function (taking quick) and its Markdown (a heading and a table).
SECTIONS = ("ops", "instructions", "calls", "throughput", "streams", "sdpa", "models", "compiled", "graphs", "startup")


def machine() -> dict:
    info = {
        "date": f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M UTC}",
        "host": platform.node(),
        "cpu": platform.processor() or platform.machine(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "runtime": torch_accel.runtime(),
        "target": TARGET,
    }
    if TARGET == "cuda":
        info["gpu"] = torch.cuda.get_device_name(0)
    return info


def table(rows: list[dict], columns: list[str]) -> list[str]:
    def fmt(value):
        if isinstance(value, float):
            return f"{value:.3f}" if abs(value) < 100 else f"{value:.1f}"
        return "" if value is None else str(value)

    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(fmt(row.get(c)) for c in columns) + " |" for row in rows]
    return lines


def section_markdown(name: str, results: dict) -> list[str]:
    rows = results[name]
    if name == "ops":
        summary = results["ops_summary"]
        md = [f"## Eager per-op time (accel/{TARGET}: median {summary['median']:.3f}, worst {summary['worst']:.3f} {summary['worst_op']})", ""]
        return md + table(rows, ["op", "accel_us", "target_us", "ratio"]) + warnings_markdown(name, results)
    if name == "instructions":
        summary = results["instructions_summary"]
        md = [
            f"## Eager per-op instructions, callgrind (accel/{TARGET}: median {summary['median']:.3f}, worst {summary['worst']:.3f} {summary['worst_op']})",
            "",
            f"Instructions per call, each the mean of {CALLGRIND_ITERATIONS} calls after {CALLGRIND_WARMUP} uncounted ones, "
            "accel's and the target's in one process under valgrind --tool=callgrind. "
            + ("Time per call from the ops section of this run." if "ops" in results else ""),
            "",
        ]
        times = {r["op"]: r for r in results.get("ops", [])}
        merged = [{**r, "accel_us": times.get(r["op"], {}).get("accel_us"), "time_ratio": times.get(r["op"], {}).get("ratio")} for r in rows]
        columns = ["op", "accel_instr", "target_instr", "ratio"] + (["accel_us", "time_ratio"] if times else [])
        return md + table(merged, columns) + warnings_markdown(name, results)
    if name == "calls":
        title = f"## Compiled graphs' per-call cost (accel/{TARGET})"
        note = [] if TARGET == "cuda" else ["", f"The wrapper rows are accel's alone: {TARGET} graphs guard no device."]
        return [title, ""] + table(rows, ["call", "accel_us", "target_us", "ratio"]) + note
    if name == "throughput":
        return [f"## Device throughput (ratio = accel throughput / {TARGET})", ""] + table(rows, ["what", "accel", "target", "unit", "ratio"])
    if name == "streams":
        if TARGET == "cuda":
            return ["## Stream and event calls (accel/cuda)", ""] + table(rows, ["call", "accel_us", "cuda_us", "ratio"])
        return [f"## Stream and event calls (accel; {TARGET} has no streams to compare with)", ""] + table(rows, ["call", "accel_us"])
    if name == "sdpa":
        return [f"## Scaled dot-product attention, forward (accel/{TARGET})", ""] + table(rows, ["shape (BxHxSxD)", "accel_ms", "target_ms", "ratio"])
    if name in ("models", "compiled"):
        title = "Training steps, eager" if name == "models" else "Training steps, torch.compile"
        columns = ["model", "mode", "accel_ms", "target_ms", "ratio", "round_ratios_q1_q3", "accel_step_peak_mib", "target_step_peak_mib", "error"]
        return [f"## {title} (accel/{TARGET})", ""] + table(rows, columns)
    if name == "graphs":
        columns = ["what", "accel_default_us", "accel_graphs_us", "graphs_over_default", "target_default_us", "graphs_over_target_default"]
        if TARGET == "cuda":
            columns += ["cuda_graphs_us", "graphs_over_cuda_graphs"]
        return [
            f'## torch.compile(mode="reduce-overhead"): accel graphs against the default compile and {TARGET}',
            "",
        ] + table(rows, columns)
    if name == "startup":
        note = [
            "Medians over fresh processes. The goal (30 ms) is checked on `import torch_accel` timed in the process right after "
            "`import torch` (autoload off), bytecode cached: accel's own work only, the steadiest figure. added_ms of "
            "torch + torch_accel: over torch with autoload on and no backend found "
            "(torch scans the installed entry points whether or not a backend is installed; that scan is the added_ms of "
            "its own row); over_autoload_off_ms: over torch with autoload off; cpu_ms: the process' CPU time in the same window (steadier than wall time on a shared machine). Bytecode cached: torch_accel installed "
            "(its __pycache__ written once); sources compiled at import: PYTHONDONTWRITEBYTECODE=1 without __pycache__.",
            "",
        ]
        return ["## Start-up", ""] + note + table(rows, ["what", "ms", "added_ms", "over_autoload_off_ms", "cpu_ms", "added_cpu_ms"]) + warnings_markdown(name, results)


def warnings_markdown(section: str, results: dict) -> list[str]:
    warnings = goal_warnings(section, results)
    return ["", *(f"- **above goal**: {w}" for w in warnings)] if warnings else []


def run_section(name: str, results: dict, quick: bool) -> None:
    if name == "ops":
        results["ops"] = bench_ops(quick)
        results["ops_summary"] = ratio_summary(results["ops"])
    elif name == "instructions":
        results["instructions"] = bench_instructions(quick)
        results["instructions_summary"] = ratio_summary(results["instructions"])
    elif name == "calls":
        results["calls"] = bench_calls(quick)
    elif name == "throughput":
        results["throughput"] = bench_throughput(quick)
    elif name == "streams":
        results["streams"] = bench_streams(quick)
    elif name == "sdpa":
        results["sdpa"] = bench_sdpa(quick)
    elif name == "models":
        results["models"] = bench_models(quick, (False,), optimizer_alone=True)
    elif name == "compiled":
        results["compiled"] = bench_models(quick, (True,), optimizer_alone=False)
    elif name == "graphs":
        results["graphs"] = bench_graphs(quick)
    elif name == "startup":
        results["startup"] = bench_startup(quick)


def write_results(results: dict, output_dir: str) -> str:
    """Writes <runtime>-<machine>.{json,md} (through a temporary file each: a
    run killed while writing leaves the previous complete file)."""
    os.makedirs(output_dir, exist_ok=True)
    machine_info = results["machine"]
    name = f"{machine_info['runtime']}-{re.sub(r'[^A-Za-z0-9]+', '-', machine_info.get('gpu', platform.node()))}"
    md = [f"# accel benchmarks: {machine_info['runtime']} runtime", ""]
    md += [f"- {k}: {v}" for k, v in machine_info.items()] + [""]
    for section in SECTIONS:
        if section in results:
            md += section_markdown(section, results) + [""]
    base = os.path.join(output_dir, name)
    for path, text in ((base + ".json", json.dumps(results, indent=1)), (base + ".md", "\n".join(md))):
        with open(path + ".tmp", "w") as f:
            f.write(text)
        os.replace(path + ".tmp", path)
    return base


# The per-op figures of every run, one JSON line each (results/history.jsonl,
# committed): the trend from one change to the next, with the machine.
HISTORY = "history.jsonl"
HISTORY_SECTIONS = ("ops", "instructions", "calls", "startup")


def source_revision() -> str:
    """The commit this run measured ("+changes" when the worktree differed from it)."""
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--", "csrc", "torch_accel"], capture_output=True, text=True, cwd=ROOT, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return commit + ("+changes" if dirty else "")


def add_to_history(results: dict, path: str, quick: bool) -> None:
    """Adds this run's entry; a run whose sections ran in separate processes
    (one --run-id) keeps one entry, which each process completes."""
    entry = {"machine": results["machine"], "revision": source_revision(), "quick": quick}
    lines = []
    if os.path.exists(path):
        with open(path) as f:
            lines = f.read().splitlines()
    run_id = results["machine"].get("run_id")
    if run_id and lines and json.loads(lines[-1]).get("machine", {}).get("run_id") == run_id:
        entry = {**json.loads(lines.pop()), **entry}
    for section in ("ops", "instructions"):
        if section in results:
            entry[section] = {
                "summary": results[f"{section}_summary"],
                "ratios": {r["op"]: round(r["ratio"], 4) for r in results[section]},
                "accel": {r["op"]: round(r.get("accel_instr", r.get("accel_us", 0)), 3) for r in results[section]},
                "target": {r["op"]: round(r.get("target_instr", r.get("target_us", 0)), 3) for r in results[section]},
            }
    if "calls" in results:
        entry["calls"] = {r["call"]: round(r["accel_us"], 3) for r in results["calls"]}
    if "startup" in results:
        entry["startup_ms"] = {r["what"]: round(r.get("added_ms", r["ms"]), 2) for r in results["startup"]}
    lines.append(json.dumps(entry))
    with open(path + ".tmp", "w") as f:
        f.write("\n".join(lines) + "\n")
    os.replace(path + ".tmp", path)
    print(f"added to {path}", flush=True)


def previous_results(output_dir: str, run_id: str, machine_info: dict) -> dict:
    """The results file of this machine written earlier in the same run (same
    --run-id): the run's other sections, kept beside this process's."""
    name = f"{machine_info['runtime']}-{re.sub(r'[^A-Za-z0-9]+', '-', machine_info.get('gpu', platform.node()))}.json"
    try:
        with open(os.path.join(output_dir, name)) as f:
            previous = json.load(f)
    except (OSError, ValueError):
        return {}
    return previous if previous.get("machine", {}).get("run_id") == run_id else {}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fewer repeats and smaller sizes")
    parser.add_argument("--sections", default=",".join(SECTIONS), help=f"comma-separated, of: {', '.join(SECTIONS)}")
    parser.add_argument("--no-compile", action="store_true", help="leave out the compiled training steps")
    parser.add_argument("--output-dir", default=os.path.join(HERE, "results"))
    parser.add_argument(
        "--run-id",
        default=None,
        help="sections run by separate processes of one run share an id: each adds its own to the results file "
        "that an earlier process of the same run wrote (tools/gpu/gpu_report.py runs one section per process)",
    )
    parser.add_argument("--no-history", action="store_true", help=f"do not add this run to {HISTORY}")
    parser.add_argument(
        "--ops",
        default=None,
        help="comma-separated names of the per-op list (sections ops and instructions) to measure instead of all of them",
    )
    parser.add_argument("--callgrind-child", metavar="DIR", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.ops is not None:
        global SELECTED_OPS
        SELECTED_OPS = [name.strip() for name in args.ops.split(",") if name.strip()]
        known = all_op_cases("cpu")
        unknown_ops = [name for name in SELECTED_OPS if name not in known]
        if unknown_ops or not SELECTED_OPS:
            what = f"unknown ops {unknown_ops}" if unknown_ops else "no op"
            parser.error(f"{what} in --ops; the per-op list has: {', '.join(known)}")
    if args.callgrind_child:
        callgrind_child(args.callgrind_child)
        return 0
    sections = [s for s in args.sections.split(",") if s]
    unknown = sorted(set(sections) - set(SECTIONS))
    if unknown:
        parser.error(f"unknown sections {unknown}; choose from {', '.join(SECTIONS)}")
    if args.no_compile:
        sections = [s for s in sections if s != "compiled"]

    info = machine()
    if args.run_id:
        info["run_id"] = args.run_id
    results = previous_results(args.output_dir, args.run_id, info) if args.run_id else {}
    results["machine"] = {**results.get("machine", {}), **info}
    failed = []
    for section in SECTIONS:  # in the table's order, each written as soon as it is done
        if section not in sections:
            continue
        try:
            run_section(section, results, args.quick)
        except Exception as error:  # report, go on with the other sections, and fail the run
            print(f"section {section} failed: {error}", file=sys.stderr, flush=True)
            failed.append(section)
            continue
        base = write_results(results, args.output_dir)
        for warning in goal_warnings(section, results):
            print(f"WARNING: above goal: {warning}", file=sys.stderr, flush=True)
        markdown = section_markdown(section, results)
        print("\n".join(markdown) + "\n", flush=True)
        print(f"written to {base}.{{md,json}}", flush=True)
        # The section's heading again (with its median and worst ratio), last:
        # a log's tail shows it whatever the table's length.
        print(f"summary: {markdown[0].lstrip('# ')}", flush=True)
    if not args.no_history and any(s in results for s in HISTORY_SECTIONS):
        add_to_history(results, os.path.join(args.output_dir, HISTORY), args.quick)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
