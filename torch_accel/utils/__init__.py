"""Utilities for users of accel (as torch.utils for torch): ``cpp_extension``."""
