"""torch.compile's Dynamo for accel: accel's device interface, registered when Dynamo loads.

- ``registration``: registers what Dynamo and Inductor need of accel right
  after the module it concerns first executes (an import hook), so that
  ``import torch_accel`` never imports Dynamo;
- ``device_interface``: accel's DeviceInterface (torch._dynamo.device_interface).

Importing this package imports nothing.
"""
