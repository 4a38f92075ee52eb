"""torch.compile on accel with Triton kernels: TORCH_ACCEL_INDUCTOR=triton.

On the host runtime the mode generates the CUDA runtime's code (Triton kernels,
the Python wrapper with accel's device guards and streams, cuda's choices) and
Triton's interpreter runs the kernels on accel's host memory; on the CUDA
runtime it is the runtime's own mode, the kernels compiled and launched on
the GPU. The mode is read once per process, before accel's backend registers
(and, on the host runtime, before Triton is imported): the cases of
_triton_cases.py run compiled in one child process with the mode set, and the
reference runs them eagerly on the target in a process without torch_accel.
Each test compares one case with the reference and checks its code.
"""

import os
import re
import subprocess
import sys

import pytest
import torch
from torch.utils._pytree import tree_flatten

import _triton_cases
import torch_accel
from conftest import run_python, run_target_cases

# Both child processes run in the first test's setup; the interpreter is slow
# on a loaded machine (about 90 s of CPU time on the host runtime).
pytestmark = pytest.mark.timeout(900)

RUNTIME = torch_accel.runtime()
INTERPRETED = RUNTIME == "host"
# Triton kernels against the target's eager kernels: other kernels, so other
# roundings (sums in another order, exp and tanh approximations); float16
# results round to 2^-11.
TOLERANCES = {torch.float32: dict(rtol=1e-4, atol=1e-5), torch.float16: dict(rtol=2e-3, atol=2e-3)}


def _mode_env(**extra: str) -> dict:
    env = dict(os.environ, TORCH_ACCEL_INDUCTOR="triton")
    env.pop("TRITON_INTERPRET", None)  # the mode sets it on the host runtime
    return {**env, **extra}


@pytest.fixture(scope="module")
def compiled(tmp_path_factory) -> dict:
    output = tmp_path_factory.mktemp("compile-triton") / "accel.pt"
    proc = subprocess.run(
        [sys.executable, _triton_cases.__file__, "accel", str(output)],
        env=_mode_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    return torch.load(output)


@pytest.fixture(scope="module")
def reference(target, tmp_path_factory) -> dict:
    return run_target_cases(target, tmp_path_factory.mktemp("compile-triton-reference"), script="_triton_cases.py")


def assert_matches_reference(case: dict, expected: dict) -> None:
    actual, expected = tree_flatten(case["results"])[0], tree_flatten(expected["results"])[0]
    assert len(actual) == len(expected)
    for a, e in zip(actual, expected):
        if isinstance(e, torch.Tensor):
            torch.testing.assert_close(a, e, **TOLERANCES.get(e.dtype, {}))
        else:
            assert a == e


def triton_kernels(code: str) -> list[str]:
    """The names of the Triton kernels in generated code."""
    return re.findall(r"^def (triton_\w+)\(", code, flags=re.M)


@pytest.mark.parametrize("name", [*_triton_cases.CASES, "dynamic_shapes"])
def test_case(name, compiled, reference):
    index = _triton_cases.CASES[name][2] if name in _triton_cases.CASES else 0
    if index >= torch_accel.device_count():
        pytest.skip(f"needs accel:{index}; this machine has {torch_accel.device_count()} GPU(s)")
    case = compiled[name]
    assert case["devices"] == [f"accel:{index}"]
    assert_matches_reference(case, reference[name])
    # Triton kernels, not C++: the wrapper launches them on the accel current stream.
    code = case["code"]
    assert triton_kernels(code) and 'extern "C"' not in code and "cpp_fused" not in code
    assert "from torch_accel._C import _get_raw_stream as get_raw_stream" in code
    assert re.search(rf"stream{index} = get_raw_stream\({index}\)", code)
    # Compiled for (or, by the interpreter, as) a CUDA device.
    assert f"'device': DeviceProperties(type='cuda', index={index}," in code
    if INTERPRETED:
        # The device the interpreter mode describes (an sm_90 GPU), see torch_accel/_inductor/device_properties.py.
        assert "multi_processor_count=132, cc=90" in code


def test_second_device_is_guarded(compiled, two_devices):
    code = compiled["second_device"]["code"]
    assert "with torch.accel._DeviceGuard(1):" in code
    assert re.search(r"empty_strided_accel\(.*, 1\)", code)


def test_dynamic_shapes_compile_once(compiled):
    assert compiled["dynamic_shapes"]["frames"] == 1
    # The sizes are the graph's inputs, passed on to the kernels.
    code = compiled["dynamic_shapes"]["code"]
    assert re.search(r"assert_size_stride\(arg\d+_1, \((s\d+), (s\d+)\), \(\2, 1\)\)", code)
    assert re.search(r"triton_\w+\.run\(.*s\d+.*stream=stream0\)", code)


def test_training_compiles_forward_and_backward(compiled):
    for name in ("training_step", "transformer_block"):
        code = compiled[name]["code"]
        assert re.findall(r"# AOT ID: \['\d+_(\w+)'\]", code) == ["forward", "backward"], name


# --- Inductor's cuda choices, made for accel's Triton code --------------------


def test_online_softmax_for_rows_reduced_in_a_loop(compiled):
    # Rows reduced in a loop (cuda: rows of more than 1024 elements, e.g.
    # 16384): cuda computes max and sum in one pass (the online softmax), and
    # so does accel.
    code = compiled["online_softmax"]["code"]
    assert "triton_helpers.online_softmax_combine(" in code


def test_mix_order_reduction(compiled):
    # The layer norm's backward: row and column reductions of the same tensor in one kernel.
    code = compiled["mix_order_reduction"]["code"]
    assert "'grid_type': 'MixOrderReductionGrid'" in code


def test_bmm_of_batch_one_is_mm(compiled):
    code = compiled["bmm_batch_1"]["code"]
    assert "extern_kernels.mm(" in code and "extern_kernels.bmm(" not in code


# --- The mode ------------------------------------------------------------------


def test_mode_values(monkeypatch):
    from torch_accel._core import capabilities_of_target
    from torch_accel._inductor.codegen_config import CodegenConfig, config_for

    # The runtimes as torch_accel sees them: their names, and what their targets can do.
    def config_on(runtime):
        return config_for(runtime, capabilities_of_target({"host": "cpu", "cuda": "cuda"}[runtime]))

    for value, host, cuda in [("", "cpp", "triton"), ("auto", "cpp", "triton"), ("triton", "triton", "triton")]:
        monkeypatch.setenv("TORCH_ACCEL_INDUCTOR", value)
        assert (config_on("host").kernels, config_on("cuda").kernels) == (host, cuda)
    # Triton kernels on the host runtime run in Triton's interpreter; on the CUDA runtime, compiled.
    assert config_on("host") == CodegenConfig("host", "triton", interpreted=True)
    assert config_on("cuda") == CodegenConfig("cuda", "triton", interpreted=False)
    monkeypatch.setenv("TORCH_ACCEL_INDUCTOR", "cpp")
    assert config_on("host") == CodegenConfig("host", "cpp", interpreted=False)
    with pytest.raises(ValueError, match="TORCH_ACCEL_INDUCTOR=cpp needs the host runtime"):
        config_on("cuda")
    for bad in ("Triton", "c++", " triton", "1"):
        monkeypatch.setenv("TORCH_ACCEL_INDUCTOR", bad)
        with pytest.raises(ValueError, match=re.escape(f"TORCH_ACCEL_INDUCTOR must be one of auto, cpp, triton; got '{bad}'")):
            config_on("host")


def test_bad_mode_is_reported_by_accel_compiles_only():
    proc = run_python(
        """
        import torch, torch._dynamo
        print(torch.compile(lambda t: t * 2)(torch.ones(2)).tolist())
        try:
            torch.compile(lambda t: t * 2)(torch.ones(2, device="accel"))
        except Exception as e:
            print(type(e).__name__, e)
        """,
        env={"TORCH_ACCEL_INDUCTOR": "bogus"},
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert lines[0] == "[2.0, 2.0]"  # cpu compiles are not affected
    assert "TORCH_ACCEL_INDUCTOR must be one of auto, cpp, triton; got 'bogus'" in lines[1]


@pytest.mark.skipif(not INTERPRETED, reason="the interpreter runs accel's kernels on the host runtime only")
def test_interpreter_cannot_be_turned_off():
    proc = run_python(
        """
        import torch
        try:
            torch.compile(lambda t: t * 2)(torch.ones(2, device="accel"))
        except Exception as e:
            print(type(e).__name__, e)
        """,
        env=_mode_env(TRITON_INTERPRET="0"),
    )
    assert proc.returncode == 0, proc.stderr
    assert "runs Triton kernels through Triton's interpreter on the host runtime, which needs TRITON_INTERPRET=1" in proc.stdout
