"""The ``torch.backends`` entry point: ``import torch`` alone makes accel available.

At the end of ``import torch``, PyTorch calls every entry point of the group
``torch.backends`` (unless ``TORCH_DEVICE_BACKEND_AUTOLOAD=0``). torch_accel
declares ``accel = torch_accel._autoload:load`` (setup.py). Resolving it
imports this submodule, and with it the torch_accel package, whose import
registers the accel device; ``load`` has nothing left to do. Every process
that imports torch from an environment where torch_accel is installed
therefore has accel, Inductor's compile workers included.

Re-entrant import: ``import torch_accel`` in a fresh process first imports
torch, whose autoload resolves this entry point while torch_accel is still
being imported. Python then hands over the partly imported package, this
submodule loads without touching it, and torch_accel's own import finishes
the registration afterwards. So this module uses nothing from torch_accel.
"""


def load() -> None:
    """The entry point: importing this module imported torch_accel (see the module docstring)."""
