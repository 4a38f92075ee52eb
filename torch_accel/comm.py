r"""Collectives between accel devices in one process: ``torch.accel.comm``.

torch.cuda.comm for accel: the same functions, arguments and results
(``broadcast``, ``broadcast_coalesced``, ``reduce_add``,
``reduce_add_coalesced``, ``scatter``, ``gather``), over accel devices. Device
indices (``int``) name accel devices; ``torch.device`` and strings must name
accel devices (or the CPU where cuda's accept it). ``nn.DataParallel`` reaches
these through torch.nn.parallel.comm (torch_accel/_data_parallel.py).

torch.cuda.comm's are C++ (torch._C._broadcast and so on) and make CUDA
tensors only; these do the same work with accel's copies, which run on the
current accel stream of the device they copy to (or on ``streams`` where
scatter is given them), as cuda's do without NCCL. docs/interop.md#dataparallel.
"""

import contextlib
from collections.abc import Iterable, Sequence
from typing import Any

import torch
from torch._utils import (
    _flatten_dense_tensors,
    _handle_complex,
    _reorder_tensors_as,
    _take_tensors,
    _unflatten_dense_tensors,
)

from ._core import current_device

__all__ = ["broadcast", "broadcast_coalesced", "gather", "reduce_add", "reduce_add_coalesced", "scatter"]

_ACCEL = "accel"


def _device_index(device: Any, what: str, *, allow_cpu: bool = False) -> int:
    """The accel device index ``device`` names (-1: the CPU, where allowed)."""
    if isinstance(device, bool) or not isinstance(device, (int, str, torch.device)):
        raise TypeError(f"torch.accel.comm.{what}: expected an accel device (int, str or torch.device), got {device!r}")
    if isinstance(device, int):
        return device
    device = torch.device(device)
    if device.type == "cpu" and allow_cpu:
        return -1
    if device.type != _ACCEL:
        where = "an accel device or the cpu" if allow_cpu else "an accel device"
        raise ValueError(f"torch.accel.comm.{what}: expected {where}, got {device}")
    return current_device() if device.index is None else device.index


def _device_indices(devices: Iterable[Any], what: str) -> list[int]:
    indices = [_device_index(device, what) for device in devices]
    if not indices:
        raise ValueError(f"torch.accel.comm.{what}: expected at least one accel device")
    return indices


def _check_on_accel(tensors: Iterable[torch.Tensor], what: str, role: str) -> None:
    for i, tensor in enumerate(tensors):
        if tensor.device.type != _ACCEL:
            raise ValueError(
                f"torch.accel.comm.{what}: expected {role}s on accel devices, but {role} {i} is on {tensor.device}"
            )


def _copy_to(tensor: torch.Tensor, index: int) -> torch.Tensor:
    """A new contiguous copy of ``tensor`` on accel:``index`` (cuda's broadcast
    allocates its outputs contiguous)."""
    out = torch.empty(tensor.shape, dtype=tensor.dtype, device=torch.device(_ACCEL, index))
    return out.copy_(tensor, non_blocking=True)


def broadcast(tensor: torch.Tensor, devices: Iterable[Any] | None = None, *, out: Sequence[torch.Tensor] | None = None):
    """Copies ``tensor`` (on accel or the CPU) to each of ``devices``, or into
    each tensor of ``out``. A device that holds ``tensor`` gets ``tensor``
    itself. Exactly one of ``devices`` and ``out`` is given."""
    tensor = _handle_complex(tensor)
    if not ((devices is None) ^ (out is None)):
        raise RuntimeError(
            f"Exactly one of 'devices' and 'out' must be specified, but got devices={devices} and out={out}"
        )
    if devices is not None:
        source = tensor.get_device() if tensor.device.type == _ACCEL else None
        indices = _device_indices(devices, "broadcast")
        return tuple(tensor if index == source else _copy_to(tensor, index) for index in indices)
    out = list(out)
    _check_on_accel(out, "broadcast", "output tensor")
    for i, o in enumerate(out):
        if o.shape != tensor.shape:
            raise ValueError(
                f"torch.accel.comm.broadcast: output tensor {i} has shape {tuple(o.shape)}, "
                f"expected {tuple(tensor.shape)}"
            )
        o.copy_(tensor, non_blocking=True)
    return tuple(out)


def broadcast_coalesced(tensors: Sequence[torch.Tensor], devices: Iterable[Any], buffer_size: int = 10485760):
    """Copies ``tensors`` (all on ``devices[0]``) to each of ``devices``,
    flattening small tensors into buffers of up to ``buffer_size`` bytes so
    that each buffer is one copy. The first device's list is ``tensors``
    themselves; the copies on the others share no version counter with each
    other (as cuda's: DataParallel's replicas)."""
    indices = _device_indices(devices, "broadcast_coalesced")
    tensors = [_handle_complex(t) for t in tensors]
    for i, tensor in enumerate(tensors):
        if tensor.device != torch.device(_ACCEL, indices[0]):
            raise ValueError(
                f"torch.accel.comm.broadcast_coalesced: all tensors must be on devices[0] (accel:{indices[0]}), "
                f"but tensor {i} is on {tensor.device}"
            )
    outputs: list[list[torch.Tensor]] = [list(tensors)] + [[] for _ in indices[1:]]
    for chunk in _take_tensors(tensors, buffer_size):
        if chunk[0].is_sparse:
            # Sparse tensors keep their own indices; each is copied as it is.
            for device_outputs, index in zip(outputs[1:], indices[1:]):
                device_outputs.extend(t.to(torch.device(_ACCEL, index), non_blocking=True).detach() for t in chunk)
            continue
        flat = _flatten_dense_tensors(chunk)
        for device_outputs, index in zip(outputs[1:], indices[1:]):
            copies = _unflatten_dense_tensors(_copy_to(flat, index), chunk)
            # .data: each copy its own version counter, as cuda's make_variable(tensor_data()).
            device_outputs.extend(copy.data for copy in copies)
    # _take_tensors groups tensors by type: put each device's list back in the tensors' order.
    return [outputs[0]] + [list(_reorder_tensors_as(device_outputs, tensors)) for device_outputs in outputs[1:]]


def reduce_add(inputs: Sequence[torch.Tensor], destination: Any = None) -> torch.Tensor:
    """The elementwise sum of ``inputs`` (one per accel device, same shape) on
    ``destination`` (default: the current accel device), which must hold one of
    them: that one first, then the others in order."""
    if not inputs:
        raise ValueError("torch.accel.comm.reduce_add: expected at least one input")
    _check_on_accel(inputs, "reduce_add", "input")
    destination = current_device() if destination is None else _device_index(destination, "reduce_add")
    for i, tensor in enumerate(inputs):
        if tensor.shape != inputs[0].shape:
            raise ValueError(
                f"torch.accel.comm.reduce_add: input {i} has shape {tuple(tensor.shape)}, "
                f"expected {tuple(inputs[0].shape)}"
            )
    roots = [i for i, tensor in enumerate(inputs) if tensor.get_device() == destination]
    if not roots:
        raise RuntimeError(
            f"torch.accel.comm.reduce_add: the destination accel:{destination} must hold one of the inputs"
        )
    if len(inputs) == 1:
        return inputs[0]
    root = roots[0]
    others = [tensor for i, tensor in enumerate(inputs) if i != root]
    result = inputs[root] + others[0].to(inputs[root].device, non_blocking=True)
    for other in others[1:]:
        result.add_(other.to(inputs[root].device, non_blocking=True))
    return result


def reduce_add_coalesced(
    inputs: Sequence[Sequence[torch.Tensor]], destination: Any = None, buffer_size: int = 10485760
):
    """reduce_add of each group of ``inputs`` (one sequence of tensors per
    accel device), flattening small tensors into buffers of up to
    ``buffer_size`` bytes; the sums in the order of the tensors."""
    dense: list[list[torch.Tensor]] = [[] for _ in inputs]
    output: list[torch.Tensor] = []
    order: list[torch.Tensor] = []
    for per_device in zip(*inputs, strict=True):
        if all(t.is_sparse for t in per_device):
            output.append(reduce_add(per_device, destination))
            order.append(per_device[0])
            continue
        for group, t in zip(dense, per_device, strict=True):
            group.append(t.to_dense() if t.is_sparse else t)
        order.append(dense[0][-1])
    for chunks in zip(*(_take_tensors(group, buffer_size) for group in dense), strict=True):
        flat_sum = reduce_add([_flatten_dense_tensors(chunk) for chunk in chunks], destination)
        output.extend(t.data for t in _unflatten_dense_tensors(flat_sum, chunks[0]))
    return tuple(_reorder_tensors_as(output, order))


def scatter(
    tensor: torch.Tensor,
    devices: Iterable[Any] | None = None,
    chunk_sizes: Sequence[int] | None = None,
    dim: int = 0,
    streams: Sequence[torch.Stream | None] | None = None,
    *,
    out: Sequence[torch.Tensor] | None = None,
):
    """Splits ``tensor`` (on accel or the CPU) along ``dim`` and copies the
    pieces to ``devices`` (equal chunks, or ``chunk_sizes``), or into ``out``.
    A piece already on its device is a view of ``tensor``, not a copy. With
    ``streams``, each piece is copied on its device's stream."""
    tensor = _handle_complex(tensor)
    if out is None:
        if devices is None:
            raise RuntimeError("torch.accel.comm.scatter: expected 'devices' or 'out'")
        indices = _device_indices(devices, "scatter")
        if chunk_sizes is None:
            pieces = tensor.chunk(len(indices), dim)
        else:
            chunk_sizes = list(chunk_sizes)
            if len(chunk_sizes) != len(indices):
                raise ValueError(
                    f"torch.accel.comm.scatter: expected {len(indices)} chunk sizes (one per device), "
                    f"got {len(chunk_sizes)}"
                )
            pieces = tensor.split(chunk_sizes, dim)
        targets: list[Any] = [torch.device(_ACCEL, index) for index in indices]
    else:
        if devices is not None:
            raise RuntimeError(f"'devices' must not be specified when 'out' is specified, but got devices={devices}")
        if chunk_sizes is not None:
            raise RuntimeError(
                f"'chunk_sizes' must not be specified when 'out' is specified, but got chunk_sizes={chunk_sizes}"
            )
        out = list(out)
        _check_on_accel(out, "scatter", "output tensor")
        pieces = tensor.split([o.size(dim) for o in out], dim)
        targets = out
    if streams is not None and len(streams) < len(pieces):
        raise ValueError(f"torch.accel.comm.scatter: expected a stream (or None) per device, got {len(streams)}")
    results = []
    for i, (piece, target) in enumerate(zip(pieces, targets)):
        stream = streams[i] if streams is not None else None
        with stream if stream is not None else contextlib.nullcontext():
            if isinstance(target, torch.Tensor):
                results.append(target.copy_(piece, non_blocking=True))
            else:
                results.append(piece.to(target, non_blocking=True))
    return tuple(results)


def _memory_format(tensor: torch.Tensor) -> torch.memory_format:
    """The memory format ``tensor`` is laid out in (C++'s suggest_memory_format, for dense layouts)."""
    for dims, channels_last in ((4, torch.channels_last), (5, torch.channels_last_3d)):
        if tensor.dim() == dims and not tensor.is_contiguous() and tensor.is_contiguous(memory_format=channels_last):
            return channels_last
    return torch.contiguous_format


def gather(tensors: Sequence[torch.Tensor], dim: int = 0, destination: Any = None, *, out: torch.Tensor | None = None):
    """Concatenates ``tensors`` (on accel devices, one dtype, equal sizes but
    along ``dim``) along ``dim`` into a new tensor on ``destination`` (an accel
    device, ``"cpu"`` or -1; default: the current accel device), or into
    ``out``. The new tensor has the inputs' memory format where they share one
    (as cuda's)."""
    tensors = [_handle_complex(t) for t in tensors]
    if not tensors:
        raise ValueError("torch.accel.comm.gather: expected at least one tensor")
    _check_on_accel(tensors, "gather", "input tensor")
    first = tensors[0]
    dim = dim + first.dim() if dim < 0 else dim
    if not 0 <= dim < max(first.dim(), 1):
        raise IndexError(f"torch.accel.comm.gather: dim {dim} is out of range for tensors of {first.dim()} dimensions")
    size = list(first.shape)
    size[dim] = sum(t.size(dim) for t in tensors)
    for i, t in enumerate(tensors):
        if t.dtype != first.dtype:
            raise ValueError(f"torch.accel.comm.gather: tensor {i} has dtype {t.dtype}, expected {first.dtype}")
        if t.dim() != first.dim() or any(t.size(d) != size[d] for d in range(t.dim()) if d != dim):
            raise ValueError(
                f"torch.accel.comm.gather: tensor {i} has shape {tuple(t.shape)}, which differs from "
                f"{tuple(first.shape)} in a dimension other than {dim}"
            )
    if out is None:
        if destination is None:
            index = current_device()
        else:
            index = _device_index(destination, "gather", allow_cpu=True)
        formats = {_memory_format(t) for t in tensors}
        out = torch.empty(
            size,
            dtype=first.dtype,
            device=torch.device("cpu") if index == -1 else torch.device(_ACCEL, index),
            memory_format=formats.pop() if len(formats) == 1 else torch.contiguous_format,
        )
    else:
        if destination is not None:
            raise RuntimeError(
                f"'destination' must not be specified when 'out' is specified, but got destination={destination}"
            )
        if list(out.shape) != size:
            raise ValueError(f"torch.accel.comm.gather: out has shape {tuple(out.shape)}, expected {tuple(size)}")
    offset = 0
    for t in tensors:
        out.narrow(dim, offset, t.size(dim)).copy_(t, non_blocking=True)
        offset += t.size(dim)
    return out
