"""accel's DeviceInterface for Dynamo and Inductor.

Imported only once torch._dynamo.device_interface is loaded (see
registration). Every member Dynamo and Inductor 2.11 call on a device
interface maps to torch.accel's function; device properties are cached for
compile worker processes, which must not initialise a device. Whether Triton
runs on accel is the runtime's capability (torch_accel._core.capabilities).
"""

from typing import Any, Union

import torch
from torch._dynamo.device_interface import (
    DeviceInterface,
    caching_worker_current_devices,
    caching_worker_device_properties,
    register_interface_for_device,
)

from .. import _C, _core, streams
from .._core import DEVICE_TYPE



class AccelInterface(DeviceInterface):
    device = _core.device  # type: ignore[assignment]
    Event = streams.Event  # type: ignore[assignment]
    Stream = streams.Stream  # type: ignore[assignment]

    class Worker:
        @staticmethod
        def set_device(device: int) -> None:
            caching_worker_current_devices[DEVICE_TYPE] = device

        @staticmethod
        def current_device() -> int:
            if DEVICE_TYPE in caching_worker_current_devices:
                return caching_worker_current_devices[DEVICE_TYPE]
            return _core.current_device()

        @staticmethod
        def get_device_properties(device: torch.types.Device = None) -> Any:
            if device is None:
                index = AccelInterface.Worker.current_device()
            else:
                index = _core._get_device_index(device)
            if DEVICE_TYPE not in caching_worker_device_properties:
                caching_worker_device_properties[DEVICE_TYPE] = [
                    _core.get_device_properties(i) for i in range(_core.device_count())
                ]
            return caching_worker_device_properties[DEVICE_TYPE][index]

    current_device = staticmethod(_core.current_device)
    set_device = staticmethod(_core.set_device)
    exchange_device = staticmethod(_core._exchange_device)
    maybe_exchange_device = staticmethod(_core._maybe_exchange_device)
    device_count = staticmethod(_core.device_count)
    stream = staticmethod(streams.stream)  # type: ignore[assignment]
    current_stream = staticmethod(streams.current_stream)  # type: ignore[assignment]
    set_stream = staticmethod(streams.set_stream)  # type: ignore[assignment]
    _set_stream_by_id = staticmethod(streams._set_stream_by_id)  # type: ignore[assignment]
    synchronize = staticmethod(_core.synchronize)
    get_device_properties = staticmethod(_core.get_device_properties)  # type: ignore[assignment]
    is_bf16_supported = staticmethod(_core.is_bf16_supported)  # type: ignore[arg-type]

    @staticmethod
    def is_available() -> bool:
        return _core.is_available()

    @staticmethod
    def get_raw_stream(device_idx: int) -> int:
        return _C._get_raw_stream(device_idx)

    @staticmethod
    def is_triton_capable(device: torch.types.Device = None) -> bool:
        # Where Triton compiles for accel's devices (the CUDA runtime: accel:N
        # is cuda:N, see torch_accel._inductor.device_properties), Inductor
        # compiles accel's Triton kernels for them; elsewhere, with
        # TORCH_ACCEL_INDUCTOR=triton, Triton's interpreter runs them.
        from torch.utils._triton import has_triton_package

        from .._inductor.codegen_config import generates_triton

        if _core.capabilities().compiles_triton:
            return _core.get_device_capability(device)[0] >= 7
        return generates_triton() and has_triton_package()

    @staticmethod
    def raise_if_triton_unavailable(device: torch.types.Device = None) -> None:
        if _core.capabilities().compiles_triton:
            from torch._dynamo.device_interface import get_interface_for_device

            # accel:N is the target's device N (cuda:N on the CUDA runtime).
            target = get_interface_for_device(_core._target_device_type())
            target.raise_if_triton_unavailable(_core._get_device_index(device, optional=True))
            return
        if not AccelInterface.is_triton_capable(device):
            raise RuntimeError(
                "accel runs Triton kernels on the CUDA runtime, or through Triton's interpreter with "
                "TORCH_ACCEL_INDUCTOR=triton (and the triton package); this process runs the host runtime "
                "with Inductor's C++ kernels"
            )

    @staticmethod
    def get_compute_capability(device: torch.types.Device = None) -> Union[int, str]:
        major, minor = _core.get_device_capability(device)
        return major * 10 + minor


def register_accel_interface() -> None:
    register_interface_for_device(DEVICE_TYPE, AccelInterface)
    for index in range(_core.device_count()):
        register_interface_for_device(f"{DEVICE_TYPE}:{index}", AccelInterface)
