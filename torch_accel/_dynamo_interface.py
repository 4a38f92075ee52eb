"""accel's DeviceInterface for Dynamo and Inductor.

Imported only once torch._dynamo.device_interface is loaded (see
_dynamo_registration). Every member Dynamo and Inductor 2.11 call on a device
interface maps to torch.accel; device properties are cached for compile
worker processes, which must not initialise a device.
"""

from typing import Any, Union

import torch
from torch._dynamo.device_interface import (
    DeviceInterface,
    caching_worker_current_devices,
    caching_worker_device_properties,
    register_interface_for_device,
)

import torch_accel as accel

_DEVICE_TYPE = "accel"


class AccelInterface(DeviceInterface):
    device = accel.device  # type: ignore[assignment]
    Event = accel.Event  # type: ignore[assignment]
    Stream = accel.Stream  # type: ignore[assignment]

    class Worker:
        @staticmethod
        def set_device(device: int) -> None:
            caching_worker_current_devices[_DEVICE_TYPE] = device

        @staticmethod
        def current_device() -> int:
            if _DEVICE_TYPE in caching_worker_current_devices:
                return caching_worker_current_devices[_DEVICE_TYPE]
            return accel.current_device()

        @staticmethod
        def get_device_properties(device: torch.types.Device = None) -> Any:
            if device is None:
                index = AccelInterface.Worker.current_device()
            else:
                index = accel._get_device_index(device)
            if _DEVICE_TYPE not in caching_worker_device_properties:
                caching_worker_device_properties[_DEVICE_TYPE] = [
                    accel.get_device_properties(i) for i in range(accel.device_count())
                ]
            return caching_worker_device_properties[_DEVICE_TYPE][index]

    current_device = staticmethod(accel.current_device)
    set_device = staticmethod(accel.set_device)
    exchange_device = staticmethod(accel._exchange_device)
    maybe_exchange_device = staticmethod(accel._maybe_exchange_device)
    device_count = staticmethod(accel.device_count)
    stream = staticmethod(accel.stream)  # type: ignore[assignment]
    current_stream = staticmethod(accel.current_stream)  # type: ignore[assignment]
    set_stream = staticmethod(accel.set_stream)  # type: ignore[assignment]
    _set_stream_by_id = staticmethod(accel._set_stream_by_id)  # type: ignore[assignment]
    synchronize = staticmethod(accel.synchronize)
    get_device_properties = staticmethod(accel.get_device_properties)  # type: ignore[assignment]
    is_bf16_supported = staticmethod(accel.is_bf16_supported)  # type: ignore[arg-type]

    @staticmethod
    def is_available() -> bool:
        return accel.is_available()

    @staticmethod
    def get_raw_stream(device_idx: int) -> int:
        return accel._C._get_raw_stream(device_idx)

    @staticmethod
    def is_triton_capable(device: torch.types.Device = None) -> bool:
        # Inductor compiles accel's Triton kernels for CUDA (see
        # _inductor_patches) on the CUDA runtime; with TORCH_ACCEL_INDUCTOR=
        # triton on the host runtime Triton's interpreter runs them.
        from torch.utils._triton import has_triton_package

        from ._inductor_registration import generates_triton

        if accel.runtime() == "cuda":
            return accel.get_device_capability(device)[0] >= 7
        return generates_triton() and has_triton_package()

    @staticmethod
    def raise_if_triton_unavailable(device: torch.types.Device = None) -> None:
        if accel.runtime() == "cuda":
            from torch._dynamo.device_interface import CudaInterface

            # accel:N is cuda:N.
            CudaInterface.raise_if_triton_unavailable(accel._get_device_index(device, optional=True))
            return
        if not AccelInterface.is_triton_capable(device):
            raise RuntimeError(
                "accel runs Triton kernels on the CUDA runtime, or through Triton's interpreter with "
                "TORCH_ACCEL_INDUCTOR=triton (and the triton package); this process runs the host runtime "
                "with Inductor's C++ kernels"
            )

    @staticmethod
    def get_compute_capability(device: torch.types.Device = None) -> Union[int, str]:
        major, minor = accel.get_device_capability(device)
        return major * 10 + minor


def register_accel_interface() -> None:
    register_interface_for_device(_DEVICE_TYPE, AccelInterface)
    for index in range(accel.device_count()):
        register_interface_for_device(f"{_DEVICE_TYPE}:{index}", AccelInterface)
