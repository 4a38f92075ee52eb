"""Programs written for CUDA, and the Hugging Face stack, on accel through the opt-in
(``import torch_accel.transfer_to_accel`` or TORCH_ACCEL_TRANSFER_TO_ACCEL=1;
docs/cuda-programs.md).

The opt-in changes the process for good, so every test that opts in runs a
fresh interpreter; this process never opts in (test_nothing_changes_without_the_opt_in
checks that too). The CUDA program (test/_cuda_program.py) falls back to the
cpu where CUDA is not available: run without the opt-in it gives the target's
results (the cpu's on the host runtime, CUDA's on a GPU machine), which the run
under the opt-in must give bit for bit, the same kernels running on the same
numbers in the same order.
"""

import os
import socket
import subprocess
import sys

import pytest
import torch

from conftest import run_python
import torch_accel
from torch_accel import _patches, _transfer

HERE = os.path.dirname(os.path.abspath(__file__))
PROGRAM = os.path.join(HERE, "_cuda_program.py")
HUGGING_FACE_WORKER = os.path.join(HERE, "_hugging_face_worker.py")
OPT_IN = {_transfer.ENVIRONMENT_VARIABLE: "1"}
TIMEOUT_S = 300


def _env(extra: dict) -> dict:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.dirname(HERE), HERE, os.environ.get("PYTHONPATH", "")]))
    env.pop(_transfer.ENVIRONMENT_VARIABLE, None)
    env.update(extra)
    return env


def _run(args: list, extra_env: dict, output) -> dict:
    proc = subprocess.run(
        [sys.executable, *args, str(output)], env=_env(extra_env), capture_output=True, text=True, timeout=TIMEOUT_S
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    return torch.load(output, weights_only=False)


def _assert_same_training(ran: dict, reference: dict) -> None:
    assert ran["losses"] == reference["losses"]
    assert torch.equal(ran["noise"], reference["noise"])
    assert ran["state"].keys() == reference["state"].keys()
    for name, value in reference["state"].items():
        assert torch.equal(ran["state"][name], value), name


# --- without the opt-in -----------------------------------------------------------


def _untouched() -> None:
    # What the opt-in replaces is torch's own, and no mode is on the stack.
    assert torch.cuda.is_available.__module__ == "torch.cuda"
    assert torch.cuda.Stream.__module__ == "torch.cuda.streams"
    assert torch.load is _patches.original("torch.serialization.load")
    assert torch.amp.autocast_mode.autocast.__init__ is _patches.original("torch.amp.autocast_mode.autocast.__init__")
    assert torch.amp.GradScaler.__init__ is _patches.original("torch.amp.grad_scaler.GradScaler.__init__")
    assert torch._C._len_torch_function_stack() == 0
    assert not _transfer.enabled()


def test_nothing_changes_without_the_opt_in():
    _untouched()
    for value in (None, "0"):
        proc = run_python(
            """
            import torch, torch_accel
            from test_transfer_to_accel import _untouched
            _untouched()
            assert torch.ones(1, device="accel").device.type == "accel"
            """,
            env=_env({} if value is None else {_transfer.ENVIRONMENT_VARIABLE: value}),
        )
        assert proc.returncode == 0, proc.stderr


def test_a_bad_value_of_the_variable_is_refused():
    proc = run_python("import torch_accel", env=_env({_transfer.ENVIRONMENT_VARIABLE: "yes"}))
    assert proc.returncode != 0
    assert "TORCH_ACCEL_TRANSFER_TO_ACCEL='yes': expected 1 (run CUDA programs on accel) or 0" in proc.stderr


def test_the_patches_name_what_they_replace():
    # Each patch of torch.cuda declares exactly the names its table replaces, in order.
    assert _transfer.cuda_module_redirected.names == tuple(f"torch.cuda.{n}" for n in _transfer._REDIRECTED)
    assert _transfer.cuda_module_refused.names == tuple(f"torch.cuda.{n}" for n in _transfer._REFUSED)


def test_backend_strings_name_accel():
    assert _transfer.to_accel_backend("nccl") == "accel"
    assert _transfer.to_accel_backend("NCCL") == "accel"
    assert _transfer.to_accel_backend("cpu:gloo,cuda:nccl") == "cpu:gloo,accel:accel"
    assert _transfer.to_accel_backend("cuda:nccl,cpu:gloo") == "accel:accel,cpu:gloo"
    assert _transfer.to_accel_backend("gloo") == "gloo"
    assert _transfer.to_accel_backend(None) is None


def test_devices_name_accel():
    assert _transfer.to_accel("cuda") == "accel"
    assert _transfer.to_accel("cuda:1") == "accel:1"
    assert _transfer.to_accel(torch.device("cuda", 1)) == torch.device("accel", 1)
    assert _transfer.to_accel(torch.device("cuda")) == torch.device("accel")
    for other in ("cpu", "cudax", "cuda:x", torch.device("cpu"), 0, None):
        assert _transfer.to_accel(other) is other


# --- under the opt-in ---------------------------------------------------------------


@pytest.mark.parametrize("how", ["environment", "import"])
def test_cuda_calls_run_on_accel(how, two_devices):
    code = """
        import io, warnings
        import torch
        {opt_in}
        from torch_accel import _transfer
        assert _transfer.enabled()
        assert torch.cuda.is_available() and torch.cuda.device_count() == torch.accel.device_count()
        assert torch.ones(2, device="cuda").device == torch.device("accel", 0)
        assert torch.zeros(2, device=torch.device("cuda", 1)).device == torch.device("accel", 1)
        assert torch.empty(2).cuda(1).device == torch.device("accel", 1)
        assert torch.empty(2).to("cuda:1").device == torch.device("accel", 1)
        assert torch.empty(2).to(torch.device("cuda")).device == torch.device("accel", 0)
        assert torch.empty(2).new_ones(3, device="cuda:1").device == torch.device("accel", 1)
        torch.set_default_device("cuda")
        assert torch.ones(1).device == torch.device("accel", 0)
        torch.set_default_device(None)
        with torch.device("cuda:1"):
            assert torch.ones(1).device == torch.device("accel", 1)
        assert torch.ones(1).device == torch.device("cpu")
        x = torch.empty(2).cuda()
        assert x.is_cuda and not torch.empty(1).is_cuda
        torch.cuda.set_device(1)
        assert torch.cuda.current_device() == 1 and torch.accel.current_device() == 1
        assert torch.empty(1).cuda().device == torch.device("accel", 1)
        with torch.cuda.device(torch.device("cuda", 0)):
            assert torch.accel.current_device() == 0
        torch.cuda.set_device("cuda:0")
        m = torch.nn.Linear(2, 2).cuda()
        assert m.weight.device == torch.device("accel", 0)
        # Streams, events, synchronisation
        s = torch.cuda.Stream(device="cuda:1")
        assert s.device == torch.device("accel", 1)
        assert isinstance(torch.cuda.current_stream(), torch.cuda.Stream) and isinstance(s, torch.accel.Stream)
        with torch.cuda.stream(s):
            assert torch.cuda.current_stream(1) == s
        e = torch.cuda.Event()
        e.record()
        e.synchronize()
        torch.cuda.synchronize()
        # Memory and random numbers
        assert torch.cuda.memory_allocated(torch.device("cuda", 0)) == torch.accel.memory_allocated(0) > 0
        assert torch.cuda.mem_get_info("cuda:0") == torch.accel.mem_get_info(0)
        torch.cuda.manual_seed(3)
        a = torch.randn(3, device="cuda")
        torch.accel.manual_seed(3)
        assert torch.equal(a, torch.randn(3, device="accel"))
        assert torch.equal(torch.cuda.get_rng_state(), torch.accel.get_rng_state())
        # amp
        with torch.autocast("cuda", dtype=torch.bfloat16):
            assert torch.is_autocast_enabled("accel")
            assert m(x).dtype == torch.bfloat16
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            with torch.cuda.amp.autocast(dtype=torch.float16):
                assert m(x).dtype == torch.float16
            assert torch.cuda.amp.GradScaler()._device == "accel"
        assert torch.amp.GradScaler("cuda")._device == "accel"
        assert torch.amp.GradScaler()._device == "accel"

        class Twice(torch.autograd.Function):
            @staticmethod
            @torch.amp.custom_fwd(device_type="cuda", cast_inputs=torch.float16)
            def forward(ctx, t):
                return t * 2

            @staticmethod
            @torch.amp.custom_bwd(device_type="cuda")
            def backward(ctx, g):
                return g * 2

        with torch.autocast("cuda"):
            assert Twice.apply(x).dtype == torch.float16
        # pin_memory, serialization
        assert torch.empty(2, pin_memory=True).is_pinned()
        assert torch.empty(2).pin_memory().is_pinned()
        buffer = io.BytesIO()
        torch.save({{"w": m.weight}}, buffer)
        buffer.seek(0)
        assert torch.load(buffer, map_location="cuda:1")["w"].device == torch.device("accel", 1)
        buffer.seek(0)
        assert torch.load(buffer, map_location={{"accel:0": "cuda:1"}})["w"].device == torch.device("accel", 1)
        # A checkpoint saved on cuda (tagged "cuda:1") is restored on accel:1.
        restore = _transfer._restore_cuda_on_accel(None)
        restored = restore(torch.ones(2).untyped_storage(), "cuda:1")
        assert restored.device == torch.device("accel", 1)
        assert restore(torch.ones(2).untyped_storage(), "cpu") is None
        # Graphs
        assert torch.cuda.CUDAGraph is torch.accel.Graph
        # torch.device("cuda") itself stays cuda's (libraries check device types by name).
        assert torch.device("cuda").type == "cuda"
        print("ok")
    """
    opt_in = "import torch_accel.transfer_to_accel" if how == "import" else ""
    proc = run_python(code.format(opt_in=opt_in), env=_env(OPT_IN if how == "environment" else {}))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "ok"


def test_what_is_not_redirected_says_so():
    proc = run_python(
        """
        import torch
        import torch_accel.transfer_to_accel
        from torch_accel import _transfer
        for name in _transfer._REFUSED:
            try:
                getattr(torch.cuda, name)()
            except RuntimeError as e:
                assert str(e) == _transfer.refusal_message(name), e
                assert f"torch.cuda.{name} is not redirected to accel" in str(e)
            else:
                raise AssertionError(name + " did not raise")
        # A refused class is still a class.
        assert not isinstance(object(), torch.cuda.MemPool)
        print("ok")
        """,
        env=_env({}),
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "ok"


def test_a_cuda_program_gives_the_targets_results(tmp_path):
    reference = _run([PROGRAM], {}, tmp_path / "reference.pt")
    for name, env in {"environment": OPT_IN, "import": {}}.items():
        if name == "environment":
            ran = _run([PROGRAM], env, tmp_path / f"{name}.pt")
        else:
            code = f"import torch_accel.transfer_to_accel, runpy, sys; sys.argv = [{PROGRAM!r}, sys.argv[1]]; runpy.run_path({PROGRAM!r}, run_name='__main__')"
            ran = _run(["-c", code], env, tmp_path / f"{name}.pt")
        assert ran["parameter_device"] == ran["reloaded_device"] == ran["noise_device"] == "accel:0"
        seen = ran["seen"]
        assert seen["is_cuda"] and seen["device_count"] == torch_accel.device_count()
        assert seen["memory_allocated"] > 0 and seen["max_memory_allocated"] >= seen["memory_allocated"]
        assert seen["elapsed_ms"] >= 0
        _assert_same_training(ran, reference)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run_ranks(extra_env: dict, folder) -> list[dict]:
    folder.mkdir()
    port = str(_free_port())
    procs = []
    for rank in range(2):
        env = _env({**extra_env, "RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": "2",
                    "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port})  # fmt: skip
        log = open(folder / f"rank{rank}.log", "w+")
        procs.append((subprocess.Popen([sys.executable, PROGRAM, str(folder / f"rank{rank}.pt")], env=env,
                                       stdout=log, stderr=subprocess.STDOUT), log))  # fmt: skip
    try:
        for proc, _ in procs:
            proc.wait(timeout=TIMEOUT_S)
    finally:
        for proc, log in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    for rank, (proc, log) in enumerate(procs):
        log.seek(0)
        assert proc.returncode == 0, f"rank {rank} exited with {proc.returncode}:\n{log.read()[-6000:]}"
        log.close()
    return [torch.load(folder / f"rank{rank}.pt", weights_only=False) for rank in range(2)]


def test_a_ddp_program_with_two_ranks(tmp_path, two_devices, target):
    # Rank r trains on accel:r with init_process_group("nccl"), which is accel's
    # backend (Gloo under it on the host runtime, NCCL on the CUDA runtime):
    # the same engine as the reference run's (Gloo on the cpu, NCCL on cuda).
    ranks = _run_ranks(OPT_IN, tmp_path / "accel")
    assert [r["parameter_device"] for r in ranks] == ["accel:0", "accel:1"]
    reference = _run_ranks({}, tmp_path / "reference")
    for ran, expected in zip(ranks, reference):
        _assert_same_training(ran, expected)
    # DDP kept the replicas equal.
    for name, value in ranks[0]["state"].items():
        assert torch.equal(ranks[1]["state"][name], value), name


# --- the Hugging Face stack ---------------------------------------------------------


def _close_or_equal(target: str, actual: torch.Tensor, expected: torch.Tensor) -> None:
    # On the host runtime accel runs the cpu's kernels: the same numbers. On the
    # CUDA runtime the reference is the cpu's (the opt-in makes every "cuda"
    # accel, so the worker cannot reach CUDA itself): CUDA's kernels round differently.
    if target == "cpu":
        assert torch.equal(actual, expected)
    else:
        torch.testing.assert_close(actual, expected, rtol=1e-4, atol=1e-5)


@pytest.fixture(scope="module")
def accelerate_results(tmp_path_factory) -> dict:
    return _run([HUGGING_FACE_WORKER, "accelerate"], {}, tmp_path_factory.mktemp("accelerate") / "out.pt")


def test_accelerator_trains_on_accel(accelerate_results, target):
    steps = accelerate_results["accelerator"]
    for mixed_precision, dtype in {"no": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}.items():
        step = steps[mixed_precision]
        # accelerate's device is cuda's name; the tensors are accel's.
        assert step["device"] == "cuda"
        assert step["parameter_device"] == "accel:0"
        assert step["linear_dtype"] == dtype, mixed_precision
    assert steps["fp16"]["scaler"] == ("GradScaler", "accel")
    assert steps["no"]["scaler"] is None and steps["bf16"]["scaler"] is None
    cpu = accelerate_results["cpu"]
    _close_or_equal(target, steps["no"]["loss"], cpu["loss"])
    for name, value in cpu["state"].items():
        _close_or_equal(target, steps["no"]["state"][name], value)
    # Mixed precision rounds the activations: within bf16's rounding of the loss.
    for mixed_precision in ("bf16", "fp16"):
        torch.testing.assert_close(steps[mixed_precision]["loss"], cpu["loss"], rtol=2e-2, atol=0)


def test_from_pretrained_spreads_a_model_over_accel_devices(accelerate_results, target, two_devices):
    maps = accelerate_results["device_maps"]
    for name in ("auto", "max_memory_int", "max_memory_accel"):
        placed = maps[name]
        assert set(placed["device_map"].values()) == {0, 1}, name
        assert set(placed["parameter_devices"].values()) == {"accel:0", "accel:1"}, name
        _close_or_equal(target, placed["logits"], maps["reference_logits"])
    # "auto" balances the layers over both devices; max_memory (by index or
    # with accel's names: the same limits) keeps accel:0 to three layers' worth.
    assert maps["auto"]["device_map"]["model.layers.1"] == 0
    assert maps["auto"]["device_map"]["model.layers.2"] == 1
    assert maps["max_memory_int"]["device_map"] == maps["max_memory_accel"]["device_map"]
    assert maps["max_memory_int"]["device_map"]["model.layers.1"] == 1


def test_trainer_with_mixed_precision(tmp_path, target):
    # One device: with two, Trainer wraps the model in nn.DataParallel
    # (docs/cuda-programs.md). The host runtime's count is ours to set; a
    # multi-GPU machine runs it on all of them.
    env = {"TORCH_ACCEL_HOST_DEVICES": "1"} if torch_accel.runtime() == "host" else {}
    if torch_accel.runtime() != "host" and torch_accel.device_count() > 1:
        env["CUDA_VISIBLE_DEVICES"] = "0"
    runs = _run([HUGGING_FACE_WORKER, "trainer"], env, tmp_path / "trainer.pt")
    for name, dtype in {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}.items():
        assert runs[name]["device"] == "cuda:0"
        assert runs[name]["parameter_device"] == "accel:0"
        assert runs[name]["linear_dtype"] == dtype, name
    assert runs["fp16"]["scaler"] == "accel"
    assert runs["cpu"]["parameter_device"] == "cpu"
    for key, value in runs["cpu"]["state"].items():
        _close_or_equal(target, runs["fp32"]["state"][key], value)
