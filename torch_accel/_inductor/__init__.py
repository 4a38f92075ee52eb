"""torch.compile's Inductor for accel: its backend, and the patches of Inductor it needs.

- ``registration``: registers Inductor's backend for accel when Inductor asks
  for it, and applies the patches below (the only module that applies them);
- ``codegen_config``: what Inductor generates for accel in this process
  (C++ or Triton kernels, Triton's interpreter), which the patches key on;
- ``codegen``: the wrapper code accel's compiled graphs run in;
- one module per area of PyTorch that accel adapts, each patch declared in
  torch_accel/_patches.py's registry with the hash of the source it adapts:
  ``fake_tensor``, ``backend_choice``, ``device_properties``, ``convolution``,
  ``lowering``, ``graphs`` (mode="reduce-overhead"), ``interpreter`` (Triton's).

Importing this package imports nothing: Inductor loads only when torch.compile
needs it (see registration).
"""
