"""What every fuzzed program can call besides torch. Its source is the head of
every reproducer the fuzzer prints, so it must stay standalone: torch only.

``base`` makes a program's base tensors: deterministic contents (a seed), any
size, strides (transposed, expanded, with gaps) and storage offset over a
storage of its own. ``fill_tail`` writes the bytes a ``resize_`` or ``set_``
added to a storage: PyTorch leaves them uninitialised on every device, and the
fuzzer compares storages bit for bit.
"""

import torch

# Values every floating dtype gets some of: NaNs of both signs, infinities,
# signed zeros, subnormals (of float32 and of float64), large and tiny numbers.
SPECIALS = (float("nan"), -float("nan"), float("inf"), -float("inf"), 0.0, -0.0, 1e-40, 1e-310, 3e38, -65504.0, 0.5)


def base(seed, dtype, size, stride, offset, device, requires_grad=False):
    g = torch.Generator().manual_seed(seed)
    extent = offset + (1 + sum((n - 1) * s for n, s in zip(size, stride)) if all(size) else 0)
    n = max(extent, 1)
    if dtype.is_complex:
        values = torch.complex(torch.randn(n, generator=g), torch.randn(n, generator=g) * 3).to(dtype)
    elif dtype.is_floating_point:
        values = (torch.randn(n, generator=g, dtype=torch.float64) * 3).round(decimals=2).to(dtype)
        where = torch.randint(0, 4 * len(SPECIALS), (n,), generator=g)
        for i in range(n):
            if where[i] < len(SPECIALS):
                values[i] = SPECIALS[where[i]]
        if dtype in (torch.float32, torch.float64) and n > 1:
            # A NaN with a payload: kernels may keep or drop it, alike on both devices.
            bits = values.view(torch.int32 if dtype == torch.float32 else torch.int64)
            bits[n // 2] = 0x7FC00123 if dtype == torch.float32 else 0x7FF8000000000123
    elif dtype == torch.bool:
        values = torch.randint(0, 2, (n,), generator=g).bool()
    else:
        info = torch.iinfo(dtype)
        low, high = max(info.min, -100), min(info.max, 100)
        values = torch.randint(low, high + 1, (n,), generator=g, dtype=torch.int64)
        if n > 2:
            values[0], values[-1] = info.min, info.max
        values = values.to(dtype)
    t = values.to(device, copy=True).as_strided(size, stride, offset)
    if requires_grad:
        t = t.detach().requires_grad_()
    return t


class Move(torch.autograd.Function):
    """The target side's stand-in for a move to another device (its devices
    are all one, where ``.to`` would return the tensor itself): a copy forward,
    and a copy of the gradient backward (ToCopyBackward0 copies it back across
    devices, in the layout ``.to`` gives it)."""

    @staticmethod
    def forward(ctx, x, device, dtype=None):
        ctx.dtype = x.dtype
        return x.to(device, dtype, copy=True)

    @staticmethod
    def backward(ctx, grad):
        if not ctx.dtype.is_complex and grad.is_complex():
            grad = grad.real
        return grad.to(ctx.dtype, copy=True), None, None


def move(x, device, dtype=None):
    return Move.apply(x, device, dtype)


def fill_tail(t, old_nbytes):
    """Sets the bytes of ``t``'s storage from ``old_nbytes`` on to 0x5A."""
    with torch.no_grad():
        all_bytes = torch.empty(0, dtype=torch.uint8, device=t.device).set_(t.untyped_storage())
        all_bytes[old_nbytes:].fill_(0x5A)


def describe(v):
    """What a reproducer prints of a value: a tensor's metadata, values and bytes."""
    if not isinstance(v, torch.Tensor):
        return repr(v)
    with torch.no_grad():
        flat = v.detach().resolve_conj().resolve_neg().cpu().reshape(-1).clone(memory_format=torch.contiguous_format)
        raw = flat.view(torch.uint8).tolist() if flat.numel() else []
    return (
        f"{v.dtype} {v.device} size={tuple(v.shape)} stride={v.stride()} offset={v.storage_offset()} "
        f"storage_nbytes={v.untyped_storage().nbytes()} version={v._version} requires_grad={v.requires_grad}\n"
        f"  values={flat.tolist()}\n  bytes={bytes(raw).hex()}"
    )
