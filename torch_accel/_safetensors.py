"""safetensors.torch.load_file onto accel devices.

safetensors (0.8.0) checks the device it is given against a fixed list of
device names in its compiled code (cpu, cuda, mps, npu, xpu, ...), so
``load_file(path, device="accel:1")`` fails with "device accel:1 is invalid"
before reading anything. load_file (and load_model, which calls it) is Python:
this patch loads the file onto the CPU, as safetensors does for every device
before moving the tensors, and copies each tensor to accel. ``safe_open`` is
compiled, so it has no source to hash and is not patched; docs/interop.md#safetensors
gives the one-line workaround.

The patch is applied when safetensors.torch is imported, never by importing
torch_accel (safetensors is optional).
"""

import functools
import sys

import torch

from . import _patches
from ._dynamo.registration import call_after_import

_ACCEL = "accel"


def _names_accel(device: object) -> bool:
    if isinstance(device, torch.device):
        return device.type == _ACCEL
    return isinstance(device, str) and torch.device(device).type == _ACCEL


@_patches.patch("safetensors.torch.load_file")
def load_file_onto_accel(load_file) -> None:
    """load_file(path, device="accel:N") loads onto the CPU, then copies to accel:N."""

    @functools.wraps(load_file)
    def load_file_to_any_device(filename, device="cpu", *, backend="mmap"):
        if not _names_accel(device):
            return load_file(filename, device=device, backend=backend)
        device = torch.device(device)
        return {name: tensor.to(device) for name, tensor in load_file(filename, device="cpu", backend=backend).items()}

    sys.modules["safetensors.torch"].load_file = load_file_to_any_device


def _apply() -> None:
    _patches.apply(load_file_onto_accel)


def apply_when_safetensors_loads() -> None:
    """Patch safetensors.torch once it has executed (at once if it has).

    A program whose first import is safetensors.torch loads torch_accel from
    inside that module's own ``import torch`` (autoload), before load_file is
    defined, and no import follows that a hook could catch: there load_file is
    left as it is (docs/interop.md#safetensors: import torch first).
    """
    module = sys.modules.get("safetensors.torch")
    if module is not None and getattr(getattr(module, "__spec__", None), "_initializing", False):
        return
    call_after_import("safetensors.torch", _apply)
