"""accel tensors with other array libraries: DLPack and __cuda_array_interface__.

An accel tensor's memory is what the runtime's target device type holds: host
memory on the host runtime, CUDA memory on the CUDA runtime. Other libraries
(NumPy, CuPy, JAX, Numba) know those, not accel, so accel exports its tensors
as the target's: through a target tensor over the same memory that keeps it
alive (torch_accel._C._target_view_keeping_alive), whose DLPack device is
kDLCPU or kDLCUDA with the CUDA device index, and which alone of the two has a
__cuda_array_interface__ (on the CUDA runtime). PyTorch 2.11's own methods
reject accel (__dlpack_device__ knows PrivateUse1 only by the name
"privateuse1") or answer for cuda tensors only, so the patches below wrap them.

torch.from_dlpack of an accel tensor gives an accel tensor over the same
memory, as it gives a cuda tensor for a cuda one; a DLPack capsule or a
foreign array comes in as the device its DLPack device names (cpu, cuda), and
``device="accel:N"`` copies it to accel. docs/interop.md#dlpack.
"""

import functools

import torch
from torch.overrides import has_torch_function_unary
from torch.utils.dlpack import DLDeviceType

from . import _C, _patches
from ._core import _target_device_type, current_device, runtime

_ACCEL = "accel"


def _is_plain_accel(tensor: object) -> bool:
    """An accel torch.Tensor that no __torch_function__ override handles."""
    return isinstance(tensor, torch.Tensor) and tensor.device.type == _ACCEL and not has_torch_function_unary(tensor)


def _check_exportable(tensor: torch.Tensor) -> None:
    # What Tensor.__dlpack__ checks of the tensor itself, which its target view
    # (no autograd, strided only) cannot show.
    if tensor.requires_grad:
        raise BufferError("Can't export accel tensors that require gradient, use tensor.detach()")
    if tensor.layout != torch.strided:
        raise BufferError(f"Can't export accel tensors with layout other than torch.strided, got {tensor.layout}")


@_patches.patch("torch._tensor.Tensor.__dlpack_device__", "torch._tensor.Tensor.__dlpack__")
def dlpack_as_the_target(dlpack_device, dlpack) -> None:
    """accel tensors give DLPack the device their memory is (the target's)."""

    @functools.wraps(dlpack_device)
    def __dlpack_device__(self):
        if not _is_plain_accel(self):
            return dlpack_device(self)
        if self.layout != torch.strided:
            # No one view stands for a sparse tensor's memory; its device is the
            # target's all the same, as a sparse cuda tensor's is cuda's.
            kind, index = torch._C._torchDeviceToDLDevice(torch.device(_target_device_type(), self.device.index))
            return (DLDeviceType(kind), index)
        return dlpack_device(_C._target_view_keeping_alive(self))

    @functools.wraps(dlpack)
    def __dlpack__(self, *, stream=-1, max_version=None, dl_device=None, copy=None):
        if not _is_plain_accel(self):
            return dlpack(self, stream=stream, max_version=max_version, dl_device=dl_device, copy=copy)
        _check_exportable(self)
        # The capsule holds the view, and the view the accel memory.
        view = _C._target_view_keeping_alive(self)
        return dlpack(view, stream=stream, max_version=max_version, dl_device=dl_device, copy=copy)

    torch.Tensor.__dlpack_device__ = __dlpack_device__
    torch.Tensor.__dlpack__ = __dlpack__


@_patches.patch("torch.utils.dlpack.from_dlpack")
def from_dlpack_keeps_accel(from_dlpack) -> None:
    """torch.from_dlpack of an accel tensor is an accel tensor over its memory."""

    @functools.wraps(from_dlpack)
    def from_dlpack_of_accel(ext_tensor, *, device=None, copy=None):
        if not _is_plain_accel(ext_tensor):
            return from_dlpack(ext_tensor, device=device, copy=copy)
        # PyTorch's own unpatched export of an accel tensor names PrivateUse1
        # (kDLExtDev), which torch imports as accel.
        _check_exportable(ext_tensor)
        capsule = _patches.original("torch._tensor.Tensor.__dlpack__")(ext_tensor, max_version=(1, 0), copy=copy)
        tensor = torch._C._from_dlpack(capsule)
        if device is None:
            return tensor
        device = torch.device(device)
        if device.type == _ACCEL and device.index is None:
            device = torch.device(_ACCEL, current_device())
        if device == tensor.device:
            return tensor
        if copy is False:
            raise ValueError(
                f"cannot move DLPack tensor from device {tensor.device} to {device} without copying. "
                "Set copy=None or copy=True."
            )
        return tensor.to(device)

    torch.utils.dlpack.from_dlpack = from_dlpack_of_accel
    torch.from_dlpack = from_dlpack_of_accel


@_patches.patch("torch._tensor.Tensor.__cuda_array_interface__")
def cuda_array_interface_of_cuda_memory(interface) -> None:
    """accel tensors whose memory is CUDA memory (the CUDA runtime) describe it
    as cuda tensors do; elsewhere hasattr(tensor, "__cuda_array_interface__")
    is false, as for cpu tensors."""

    def __cuda_array_interface__(self):
        if not _is_plain_accel(self):
            return interface(self)
        if self.is_sparse:
            raise AttributeError(
                f"Can't get __cuda_array_interface__ on a sparse accel tensor: {self.type()}. "
                "Use Tensor.to_dense() to convert to a dense tensor first."
            )
        if self.requires_grad:
            raise RuntimeError(
                "Can't get __cuda_array_interface__ on an accel tensor that requires grad. "
                "If gradients aren't required, use var.detach() to get Variable that doesn't require grad."
            )
        view = _C._target_view_keeping_alive(self)
        if not view.is_cuda:
            raise AttributeError(
                f"Can't get __cuda_array_interface__ on an accel tensor of the {runtime()} runtime: "
                f"its memory is {view.device.type} memory, not CUDA memory. Use __dlpack__ (torch.utils.dlpack, "
                "np.from_dlpack) instead."
            )
        return interface(view)

    functools.update_wrapper(__cuda_array_interface__, interface)
    torch.Tensor.__cuda_array_interface__ = property(__cuda_array_interface__)


def apply_interop_patches() -> None:
    _patches.apply(dlpack_as_the_target, from_dlpack_keeps_accel, cuda_array_interface_of_cuda_memory)
