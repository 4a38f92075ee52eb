r"""``import torch_accel.transfer_to_accel``: run this program's CUDA code on accel.

The opt-in of docs/cuda-programs.md, for a program written for CUDA that
should run unmodified: from this import on, ``.cuda()``, ``"cuda"`` devices,
``torch.cuda``, ``torch.autocast("cuda")``, ``GradScaler("cuda")``,
``torch.load(map_location="cuda")`` and ``init_process_group("nccl")`` mean
accel. ``TORCH_ACCEL_TRANSFER_TO_ACCEL=1`` in the environment does the same
without editing the program. What it does and what it refuses:
torch_accel/_transfer.py.
"""

from ._transfer import enable

enable()
