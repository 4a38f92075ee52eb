"""accel's Dynamo device interface: registration on Dynamo's import, and every member Dynamo and Inductor use."""

import torch
from torch._dynamo import device_interface as di

import torch_accel
from conftest import run_python


def test_registered_for_accel_and_indexed_devices():
    interface = di.get_interface_for_device("accel")
    assert interface.__name__ == "AccelInterface"
    for index in range(torch_accel.device_count()):
        assert di.get_interface_for_device(f"accel:{index}") is interface
    assert di.get_interface_for_device(torch.device("accel:0")) is interface
    assert ("accel", interface) in list(di.get_registered_device_interfaces())


def test_registration_when_dynamo_was_imported_first():
    proc = run_python(
        """
        import torch._dynamo.device_interface as di
        import torch_accel
        print(di.get_interface_for_device("accel").__name__)
        """
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "AccelInterface"


def test_members(two_devices):
    interface = di.get_interface_for_device("accel")
    assert issubclass(interface.Stream, torch.Stream)
    assert issubclass(interface.Event, torch.Event)
    assert interface.is_available()
    assert interface.device_count() == torch_accel.device_count()
    assert interface.current_device() == 0
    with interface.device(1):
        assert interface.current_device() == 1
    prev = interface.exchange_device(1)
    assert prev == 0 and interface.current_device() == 1
    assert interface.maybe_exchange_device(prev) == 1
    assert interface.current_device() == 0
    interface.set_device(1)
    assert torch_accel.current_device() == 1
    interface.set_device(0)

    s = interface.Stream()
    with interface.stream(s):
        assert interface.current_stream() == s
        assert interface.get_raw_stream(0) == s.accel_stream
    interface.set_stream(s)
    assert torch_accel.current_stream() == s
    interface._set_stream_by_id(0, 0, s.device_type)
    assert torch_accel.current_stream() == torch_accel.default_stream()
    # synchronize and Event are accel's own (what Inductor's benchmarking times with).
    assert interface.synchronize is torch_accel.synchronize
    assert interface.Event is torch_accel.Event
    start, end = interface.Event(enable_timing=True), interface.Event(enable_timing=True)
    start.record()
    torch.ones(64, device="accel").sum()
    end.record()
    interface.synchronize()
    assert start.query() and end.query()
    assert start.elapsed_time(end) >= 0
    props = interface.get_device_properties(0)
    assert props == torch_accel.get_device_properties(0)
    major, minor = torch_accel.get_device_capability(0)
    assert interface.get_compute_capability(0) == major * 10 + minor
    assert interface.is_bf16_supported() is True
    assert interface.is_dtype_supported(torch.float32)


def test_worker_uses_cached_properties(two_devices):
    interface = di.get_interface_for_device("accel")
    try:
        interface.Worker.set_device(1)
        assert interface.Worker.current_device() == 1
        assert interface.Worker.get_device_properties() == torch_accel.get_device_properties(1)
        assert interface.Worker.get_device_properties("accel:0") == torch_accel.get_device_properties(0)
        assert di.caching_worker_device_properties["accel"] == [
            torch_accel.get_device_properties(i) for i in range(torch_accel.device_count())
        ]
    finally:
        di.caching_worker_current_devices.pop("accel", None)


def test_cached_properties_pickle():
    import pickle

    props = torch_accel.get_device_properties(0)
    assert pickle.loads(pickle.dumps(props)) == props
