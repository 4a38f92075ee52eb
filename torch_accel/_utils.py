"""What PyTorch looks up in ``torch.accel._utils`` (the device module contract).

torch.serialization normalises a device index with the device module's
``_utils._get_device_index`` (as torch.cuda's ``torch/cuda/_utils.py``), when
``torch.load`` maps storages onto ``accel:N``. It is defined with the device
basics, in _core.
"""

from ._core import DeviceLike, _get_device_index

__all__ = ["DeviceLike", "_get_device_index"]
