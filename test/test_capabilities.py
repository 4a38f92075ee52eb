"""What the runtime can do (Runtime.h's capabilities), as Python reads it: torch_accel._core.capabilities()."""

import subprocess
import sys

import torch_accel._core as core


def test_the_runtime_answers_as_the_table_of_its_target_says():
    # _CAPABILITIES_OF_TARGET describes the runtimes' answers for code that
    # reasons about the other runtime (test_compile_triton's configurations);
    # this process's runtime must answer the same for its target.
    answered = core.capabilities()
    described = core.capabilities_of_target(core._target_device_type())
    for name in core.Capabilities.__slots__:
        assert getattr(answered, name) == getattr(described, name), name
    assert answered.inductor_kernels in ("cpp", "triton")
    # C++ kernels read host memory; Triton compiles only for device memory.
    assert not (answered.inductor_kernels == "cpp" and not answered.host_memory)
    assert not (answered.compiles_triton and answered.host_memory)


def test_asking_never_initialises_accel():
    code = (
        "import torch, torch_accel, torch_accel._core as core\n"
        "print(core.capabilities().host_memory, torch_accel.is_initialized())\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    host_memory, initialized = proc.stdout.split()
    assert host_memory in ("True", "False")
    assert initialized == "False"
