"""Device management: counts, selection, context managers, properties, threads, bad input."""

import threading

import pytest
import torch

import torch_accel
from conftest import HAS_CUDA_RUNTIME, run_python


def test_registered_as_torch_accel():
    assert torch.accel is torch_accel
    assert torch._C._get_privateuse1_backend_name() == "accel"
    assert torch.device("accel:1").type == "accel"


def test_runtime_and_target():
    assert torch_accel.runtime() in ("cuda", "host")
    expected_target = {"cuda": "cuda", "host": "cpu"}[torch_accel.runtime()]
    assert torch_accel._target_device_type() == expected_target


def test_available_with_devices():
    assert torch_accel.is_available()
    assert torch_accel.device_count() >= 1
    if torch_accel.runtime() == "cuda":
        assert torch_accel.device_count() == torch.cuda.device_count()


def test_set_and_current_device(two_devices):
    torch_accel.set_device(1)
    assert torch_accel.current_device() == 1
    torch_accel.set_device("accel:0")
    assert torch_accel.current_device() == 0
    torch_accel.set_device(torch.device("accel", 1))
    assert torch_accel.current_device() == 1
    if torch_accel.runtime() == "cuda":
        # accel:N is cuda:N, so selecting one selects the other.
        assert torch.cuda.current_device() == 1


def test_device_context_manager_restores(two_devices):
    assert torch_accel.current_device() == 0
    with torch_accel.device(1):
        assert torch_accel.current_device() == 1
        with torch_accel.device("accel:0"):
            assert torch_accel.current_device() == 0
        assert torch_accel.current_device() == 1
    assert torch_accel.current_device() == 0


def test_device_context_manager_restores_on_exception(two_devices):
    with pytest.raises(KeyError):
        with torch_accel.device(1):
            raise KeyError("boom")
    assert torch_accel.current_device() == 0


def test_device_none_and_negative_are_noops(two_devices):
    # From device 1, so that a no-op cannot pass for a switch to device 0.
    torch_accel.set_device(1)
    try:
        for index in (None, -1):
            with torch_accel.device(index):
                assert torch_accel.current_device() == 1
                assert torch.empty(1, device="accel").device == torch.device("accel:1")
            assert torch_accel.current_device() == 1
    finally:
        torch_accel.set_device(0)


# torch.accel._DeviceGuard and the C functions Inductor's generated wrappers
# call on every graph call (see torch_accel/_inductor/codegen.py): torch.cuda._DeviceGuard's
# behaviour, as C code.


def test_device_guard_switches_and_restores(two_devices):
    guard = torch_accel._DeviceGuard(1)
    assert (guard.idx, guard.prev_idx) == (1, -1)
    with guard:
        assert torch_accel.current_device() == 1
        assert torch.empty(1, device="accel").device == torch.device("accel:1")
        with torch_accel._DeviceGuard(0):
            assert torch_accel.current_device() == 0
        assert torch_accel.current_device() == 1
        if torch_accel.runtime() == "cuda":
            assert torch.cuda.current_device() == 1
    assert guard.prev_idx == 0
    assert torch_accel.current_device() == 0
    # Restored from wherever the body left it, as torch.cuda._DeviceGuard.
    with torch_accel._DeviceGuard(1):
        torch_accel._C._set_device(0)
    assert torch_accel.current_device() == 0
    torch_accel.set_device(1)
    with torch_accel._DeviceGuard(0):
        assert torch_accel.current_device() == 0
    assert torch_accel.current_device() == 1


def test_device_guard_restores_on_exception_and_does_not_swallow_it(two_devices):
    with pytest.raises(KeyError):
        with torch_accel._DeviceGuard(1):
            raise KeyError("boom")
    assert torch_accel.current_device() == 0


def test_device_guard_minus_one_is_a_no_op(two_devices):
    torch_accel.set_device(1)
    with torch_accel._DeviceGuard(-1):
        assert torch_accel.current_device() == 1
        torch_accel.set_device(0)
    # Nothing was exchanged, so nothing is restored.
    assert torch_accel.current_device() == 0


@pytest.mark.parametrize("bad", ["accel:0", 0.0, None, torch.device("accel:0")])
def test_device_guard_takes_only_an_int(bad):
    with pytest.raises(TypeError, match="_DeviceGuard expects an int device index"):
        torch_accel._DeviceGuard(bad)
    with pytest.raises(TypeError, match="takes one argument"):
        torch_accel._DeviceGuard(0, 1)
    with pytest.raises(TypeError, match="Expected an accel device index"):
        torch_accel._C._set_device(bad)
    with pytest.raises(TypeError, match="Expected an accel device index"):
        torch_accel._C._get_raw_stream(bad)


def test_wrapper_set_device_and_raw_stream(two_devices):
    torch_accel._C._set_device(1)
    assert torch_accel.current_device() == 1
    torch_accel._C._set_device(0)
    streams = [torch_accel.Stream(device=i) for i in (0, 1)]
    # Each device's current stream, whichever device is current.
    with torch_accel.stream(streams[1]):
        assert torch_accel._C._get_raw_stream(1) == streams[1].accel_stream
        assert torch_accel._C._get_raw_stream(0) == torch_accel.current_stream(0).accel_stream
    assert torch_accel._C._get_raw_stream(1) == torch_accel.default_stream(1).accel_stream
    with torch_accel.stream(streams[0]):
        assert torch_accel._C._get_raw_stream(0) == streams[0].accel_stream
    assert torch_accel.current_device() == 0


def test_wrapper_entry_points_initialise_accel():
    # The first call of a compiled graph may be the process's first accel call.
    for call in ("_C._set_device(1)", "_C._get_raw_stream(1)", "_DeviceGuard(1).__enter__()"):
        proc = run_python(
            f"""
            import torch, torch_accel
            assert not torch_accel.is_initialized()
            torch_accel.{call}
            print(torch_accel.is_initialized(), torch_accel.current_device())
            """,
            env={"TORCH_ACCEL_RUNTIME": "host", "TORCH_ACCEL_HOST_DEVICES": "2"},
        )
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.split() == ["True", "0" if "stream" in call else "1"]


def test_device_of(two_devices):
    x = torch.empty(2, device="accel:1")
    with torch_accel.device_of(x):
        assert torch_accel.current_device() == 1
    with torch_accel.device_of(torch.empty(2)):
        assert torch_accel.current_device() == 0
    assert torch_accel.current_device() == 0


def test_factory_without_index_uses_current_device(two_devices):
    with torch_accel.device(1):
        assert torch.empty(3, device="accel").device == torch.device("accel:1")
    assert torch.empty(3, device="accel").device == torch.device("accel:0")


def test_current_device_is_per_thread(two_devices):
    torch_accel.set_device(1)
    seen = {}

    def worker():
        seen["initial"] = torch_accel.current_device()
        torch_accel.set_device(0)
        seen["after"] = torch_accel.current_device()

    t = threading.Thread(target=worker)
    t.start()
    t.join()
    assert seen == {"initial": 0, "after": 0}
    assert torch_accel.current_device() == 1


def test_device_properties():
    props = torch_accel.get_device_properties(0)
    assert props.total_memory > 0
    assert props.multi_processor_count > 0
    assert torch_accel.get_device_name(0) == props.name
    assert torch_accel.get_device_capability(0) == (props.major, props.minor)
    assert "total_memory" in repr(props)
    if torch_accel.runtime() == "cuda":
        cuda = torch.cuda.get_device_properties(0)
        assert (props.name, props.total_memory, props.major, props.minor) == (
            cuda.name,
            cuda.total_memory,
            cuda.major,
            cuda.minor,
        )
        assert torch_accel.get_device_capability(0) == torch.cuda.get_device_capability(0)


def test_device_properties_default_to_current(two_devices):
    with torch_accel.device(1):
        assert torch_accel.get_device_properties() == torch_accel.get_device_properties(1)


def test_synchronize_devices(two_devices):
    torch_accel.synchronize()
    torch_accel.synchronize(1)
    torch_accel.synchronize("accel:0")
    assert torch_accel.current_device() == 0


def test_is_bf16_supported():
    assert torch_accel.is_bf16_supported()
    if torch_accel.runtime() == "cuda":
        assert torch_accel.is_bf16_supported(including_emulation=False) == torch.cuda.is_bf16_supported(
            including_emulation=False
        )


# Bad input ------------------------------------------------------------------


@pytest.mark.parametrize("index", [-1, -5])
def test_set_device_negative(index):
    with pytest.raises(RuntimeError, match=r"Invalid accel device index"):
        torch_accel.set_device(index)
    assert torch_accel.current_device() == 0


def test_set_device_too_large():
    count = torch_accel.device_count()
    with pytest.raises(RuntimeError, match=rf"Invalid accel device index {count}"):
        torch_accel.set_device(count)
    with pytest.raises(RuntimeError, match=r"Invalid accel device index"):
        torch.empty(1, device=f"accel:{count}")
    with pytest.raises(RuntimeError, match=r"Invalid accel device index"):
        torch_accel.get_device_properties(count)
    assert torch_accel.current_device() == 0


# Indices beyond c10::DeviceIndex (int8) must be reported as they were given,
# never wrap around to an existing device (2**40 % 256 == 0) or fail in pybind11.
HUGE = [2**40, 10**12, 200, -5, -(2**40)]
ACCEL_CALLS = {
    "set_device": torch_accel.set_device,
    "device": lambda i: torch_accel.device(i).__enter__(),
    "synchronize": torch_accel.synchronize,
    "current_stream": torch_accel.current_stream,
    "default_stream": torch_accel.default_stream,
    "Stream": lambda i: torch_accel.Stream(device=i),
    "get_device_properties": torch_accel.get_device_properties,
    "get_device_capability": torch_accel.get_device_capability,
    "memory_allocated": torch_accel.memory_allocated,
    "memory_stats": torch_accel.memory_stats,
    "reset_peak_memory_stats": torch_accel.reset_peak_memory_stats,
    "mem_get_info": torch_accel.mem_get_info,
    "get_rng_state": torch_accel.get_rng_state,
    "empty_strided (Inductor)": lambda i: torch_accel._C._empty_strided((2,), (1,), torch.float32, i),
    "_DeviceGuard (Inductor)": lambda i: torch_accel._DeviceGuard(i).__enter__(),
    "_set_device (Inductor)": torch_accel._C._set_device,
    "get_raw_stream (Inductor)": torch_accel._C._get_raw_stream,
}


@pytest.mark.parametrize("index", HUGE)
@pytest.mark.parametrize("call", list(ACCEL_CALLS.values()), ids=list(ACCEL_CALLS))
def test_device_index_out_of_range_is_invalid_device_ordinal(call, index):
    count = torch_accel.device_count()
    noun = "is 1 accel device" if count == 1 else f"are {count} accel devices"
    with pytest.raises(RuntimeError, match=rf"Invalid accel device index {index}: there {noun}"):
        call(index)
    assert torch_accel.current_device() == 0


def test_device_context_manager_minus_one_and_none_are_no_ops(two_devices):
    # As torch.cuda.device; any other negative index names no device (above).
    torch_accel.set_device(1)
    for index in (-1, None):
        with torch_accel.device(index):
            assert torch_accel.current_device() == 1
    assert torch_accel.current_device() == 1


def test_torch_device_index_limits():
    # torch.device itself (PyTorch's constructor, before accel is reached): a
    # string index that does not parse is an error; an int index is narrowed
    # to c10::DeviceIndex (int8) without a check, as for cuda, so a wrapped
    # negative index is reported when used, and one that wraps onto an
    # existing device cannot be told apart (see docs/known-limitations.md).
    with pytest.raises(RuntimeError, match="Could not parse device index"):
        torch.device(f"accel:{10**12}")
    with pytest.raises(RuntimeError, match="Device index must not be negative"):
        torch.device("accel", -5)
    assert torch.device("accel", 10**12).index == torch.device("cuda", 10**12).index
    wrapped = torch.device("accel", 200)
    with pytest.raises(RuntimeError, match=rf"Invalid accel device index {wrapped.index}"):
        torch.empty(1, device=wrapped)


@pytest.mark.parametrize("bad", [1.5, [0], object()])
def test_device_index_wrong_type(bad):
    with pytest.raises(TypeError, match="Expected an accel device"):
        torch_accel.set_device(bad)


@pytest.mark.parametrize("bad", ["cpu", torch.device("cpu"), "meta"])
def test_device_of_another_type(bad):
    with pytest.raises(ValueError, match="Expected an accel device"):
        torch_accel.set_device(bad)
    with pytest.raises(ValueError, match="Expected an accel device"):
        torch_accel.get_device_properties(bad)


def test_set_device_without_index():
    with pytest.raises(ValueError, match="with a specified index"):
        torch_accel.set_device("accel")


def test_bad_device_string():
    with pytest.raises(RuntimeError):
        torch_accel.set_device("accel:x")


NO_DEVICE_ENV = {"TORCH_ACCEL_RUNTIME": "host", "TORCH_ACCEL_HOST_DEVICES": "0"}


def test_no_device_clear_errors():
    proc = run_python(
        """
        import torch, torch_accel
        assert torch_accel.device_count() == 0
        assert not torch_accel.is_available()
        errors = []
        for call in (lambda: torch.empty(1, device="accel"),
                     lambda: torch.zeros(2).to("accel"),
                     torch_accel.current_device,
                     torch_accel.init,
                     lambda: torch_accel.Stream(),
                     lambda: torch.Stream(device="accel")):
            try:
                call()
            except RuntimeError as e:
                errors.append(str(e))
        assert len(errors) == 6, errors
        assert all("No accel device is available" in e for e in errors), errors
        print("ok")
        """,
        env=NO_DEVICE_ENV,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "ok"


def test_host_device_count_from_environment():
    proc = run_python(
        "import torch_accel; print(torch_accel.device_count(), torch_accel.runtime())",
        env={"TORCH_ACCEL_RUNTIME": "host", "TORCH_ACCEL_HOST_DEVICES": "3"},
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["3", "host"]


@pytest.mark.parametrize(
    "env, message",
    [
        ({"TORCH_ACCEL_RUNTIME": "tpu"}, "TORCH_ACCEL_RUNTIME must be one of auto, cuda, host"),
        ({"TORCH_ACCEL_RUNTIME": "host", "TORCH_ACCEL_HOST_DEVICES": "two"}, "TORCH_ACCEL_HOST_DEVICES must be"),
        ({"TORCH_ACCEL_RUNTIME": "host", "TORCH_ACCEL_HOST_DEVICES": "-1"}, "TORCH_ACCEL_HOST_DEVICES must be"),
    ],
)
def test_bad_runtime_configuration(env, message):
    proc = run_python(
        """
        import torch_accel
        assert torch_accel.device_count() == 0  # never raises
        torch_accel.init()
        """,
        env=env,
    )
    assert proc.returncode != 0
    assert message in proc.stderr
    assert "Error" in proc.stderr.splitlines()[-1]


# cuda: no GPU here, so no device; or, in a build without the CUDA runtime
# (`make asan`), the configuration error that says so.
@pytest.mark.parametrize("runtime", ["bogus", "cuda"])
def test_accel_configuration_never_breaks_compile_for_other_devices(runtime):
    # Dynamo and Inductor import accel's registrations for every device: a bad
    # TORCH_ACCEL_RUNTIME must leave cpu compilation as it is, while accel's own
    # first use raises the configuration error.
    proc = run_python(
        """
        import torch
        import torch._dynamo, torch._inductor.utils
        x = torch.linspace(-2, 2, 7)
        f = lambda t: torch.softmax(t.sin() * 3, 0)
        torch.testing.assert_close(torch.compile(f)(x), f(x))
        try:
            torch.ones(2, device="accel")
        except (RuntimeError, ValueError) as error:
            print(type(error).__name__, error)
        """,
        env={"TORCH_ACCEL_RUNTIME": runtime},
    )
    assert proc.returncode == 0, proc.stderr
    expected = {
        "bogus": "ValueError TORCH_ACCEL_RUNTIME must be one of auto, cuda, host; got 'bogus'",
        "cuda": "RuntimeError No accel device is available (the cuda runtime found none"
        if HAS_CUDA_RUNTIME
        else "RuntimeError TORCH_ACCEL_RUNTIME=cuda, but torch_accel was built without CUDA",
    }[runtime]
    assert proc.stdout.startswith(expected), proc.stdout
