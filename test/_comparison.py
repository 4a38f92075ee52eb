"""Copying test inputs to accel and comparing accel's results with a reference
device's, shared by the OpInfo sweep (test_opinfo.py) and PyTorch's
device-generic test classes (test_device_generic.py).

The reference is the target device (cpu on the host runtime, cuda on the CUDA
runtime) unless a caller names another: the target's kernels are accel's, so
results are compared bit for bit there.
"""

from __future__ import annotations

import math
import random
from typing import Any

import numpy
import torch
import torch.utils._pytree as pytree
from torch.testing._internal import common_utils

import torch_accel

TARGET = torch_accel._target_device_type()
ACCEL = "accel"


def opinfo_samples(op, device: str, dtype: torch.dtype, count: int, requires_grad: bool = False) -> list:
    """The first ``count`` samples of ``op.sample_inputs(device, dtype,
    requires_grad)``, the same samples without its wrapper's costs. The wrapper
    (PyTorch's TrackedInputIter) looks for a calling unittest test on the call
    stack (inspect.stack(), twice a call: about 0.1 s under pytest) and runs
    torch.manual_seed before every sample (see manual_seed). Here every sample
    is drawn after the same seeding of the generators samples draw from, with
    the wrapper's seed (common_utils.SEED, set_rng_seed's; the wrapper hashes
    the test's name instead only when a unittest test calls it, which the
    suite's pytest functions are not)."""
    seed = common_utils.SEED
    samples = []
    iterator = iter(op.sample_inputs_func(op, device, dtype, requires_grad))
    while len(samples) < count:
        manual_seed(seed)
        random.seed(seed)
        numpy.random.seed(seed)
        try:
            samples.append(next(iterator))
        except StopIteration:
            break
    return samples


def manual_seed(seed: int) -> None:
    """torch.manual_seed for the generators a comparison draws from: the CPU's
    (sample inputs), accel's and the target's. torch.manual_seed also seeds
    torch.cuda, which, where CUDA never initialises (the host runtime with a
    CUDA build of torch), queues the seed with the caller's stack formatted:
    about 6 ms a call under pytest, once half of test_opinfo's time."""
    torch.default_generator.manual_seed(seed)
    torch_accel.manual_seed_all(seed)
    if TARGET == "cuda":
        torch.cuda.manual_seed_all(seed)

# How tensor contents are compared: bitwise (the rule), with the dtype's default
# tolerances of torch.testing.assert_close, or not at all (metadata only).
EXACT, CLOSE, METADATA = "exact", "close", "metadata"


# Ops whose positional tensor arguments must be CPU tensors whatever the device of
# the input. Their samples create them on the CPU; on a CPU target that looks like
# "on the target device", so they are kept off accel explicitly. (On a CUDA target
# they are CPU tensors next to CUDA ones and stay on the CPU anyway.)
CPU_TENSOR_ARGUMENTS = {
    "tensor_split",  # tensor_indices_or_sections
}


def names_device_type(text: str, device_type: str) -> bool:
    """Whether ``text`` is a device string of ``device_type`` ("cpu", "cuda:0")."""
    try:
        return torch.device(text).type == device_type
    except RuntimeError:
        return False


class Copier:
    """Copies the tensors of a sample (its input, args and kwargs) from the
    ``source`` device type (the target unless told) to ``device``.

    A copy keeps the source's storage layout: the whole storage is copied once,
    and each tensor is rebuilt over the copy with the same offset, sizes and
    strides. So non-contiguous and overlapping samples stay non-contiguous and
    overlapping, and tensors that shared a storage still share one (ops see
    the same aliasing on both devices). Only tensors on the source device are
    copied; anything else (Python numbers, CPU scalar tensors next to CUDA ones,
    dtypes, ...) is kept. Devices and device strings naming the source device
    are redirected to ``device`` too, so factory functions and ``Tensor.to``
    create their results there. ``cpu_args`` keeps the tensors of positional
    arguments where they are on a CPU source (see CPU_TENSOR_ARGUMENTS).
    ``requires_grad`` makes every copy a leaf that requires grad where its
    source required grad.
    """

    def __init__(self, device: str, cpu_args: bool = False, source: str = TARGET, requires_grad: bool = False):
        self.device = torch.device(device)
        self.source = source
        self.cpu_args = cpu_args and source == "cpu"
        self.requires_grad = requires_grad
        self.storages: dict[int, torch.UntypedStorage] = {}

    def tensor(self, t: torch.Tensor) -> torch.Tensor:
        copy = self._copy(t.detach() if self.requires_grad else t)
        if self.requires_grad and t.requires_grad and copy is not t:
            copy.requires_grad_(True)
        return copy

    def _copy(self, t: torch.Tensor) -> torch.Tensor:
        if t.device.type != self.source:
            return t
        if t.layout in SPARSE_LAYOUTS:
            return self._copy_sparse(t)
        if t.layout != torch.strided or t.is_neg() or type(t) is not torch.Tensor:
            # Not a plain strided tensor: an ordinary copy is the best we can do.
            return t.to(self.device)
        if t.is_conj():
            return self._copy(t.conj()).conj()
        source = t.untyped_storage()
        storage = self.storages.get(source._cdata)
        if storage is None:
            all_bytes = torch.empty(0, dtype=torch.uint8, device=t.device).set_(source)
            storage = all_bytes.to(self.device, copy=True).untyped_storage()
            self.storages[source._cdata] = storage
        copy = torch.empty(0, dtype=t.dtype, device=self.device)
        return copy.set_(storage, t.storage_offset(), t.size(), t.stride())

    def _copy_sparse(self, t: torch.Tensor) -> torch.Tensor:
        """A sparse tensor over copies of its parts (which keep their strides,
        offsets and shared storages, as strided tensors do)."""
        if t.layout == torch.sparse_coo:
            indices, values = self._copy(t._indices()), self._copy(t._values())
            return torch.sparse_coo_tensor(
                indices, values, t.shape, is_coalesced=t.is_coalesced(), check_invariants=False
            )
        compressed, plain, values = (self._copy(part) for part in sparse_parts(t))
        return torch.sparse_compressed_tensor(
            compressed, plain, values, t.shape, layout=t.layout, check_invariants=False
        )

    def value(self, value: Any) -> Any:
        if isinstance(value, torch.Tensor):
            return self.tensor(value)
        if isinstance(value, torch.device) and value.type == self.source:
            return self.device
        if isinstance(value, str) and names_device_type(value, self.source):
            return str(self.device)
        return value

    def tree(self, tree: Any) -> Any:
        return pytree.tree_map(self.value, tree)

    def sample(self, sample) -> tuple[Any, tuple, dict]:
        """(input, args, kwargs) of an OpInfo SampleInput, copied."""
        args = tuple(sample.args) if self.cpu_args else self.tree(tuple(sample.args))
        return self.tree(sample.input), args, self.tree(dict(sample.kwargs))


def tensor_leaves(tree: Any) -> list[torch.Tensor]:
    return [x for x in pytree.tree_leaves(tree) if isinstance(x, torch.Tensor)]


def storages(tensors: list[torch.Tensor]) -> dict[int, int]:
    """Maps each storage the ``tensors`` use to the position of its first user."""
    positions: dict[int, int] = {}
    for position, t in enumerate(tensors):
        if t.layout == torch.strided:
            positions.setdefault(t.untyped_storage()._cdata, position)
    return positions


def layout_of(t: torch.Tensor, arguments: dict[int, int]) -> tuple:
    """What must match between accel's and the target's tensors besides values:
    metadata, and which argument's storage the tensor lives in (a view must stay
    a view of the same argument, a fresh result must stay fresh)."""
    if t.layout != torch.strided:
        return (t.layout, t.shape, t.dtype)
    alias = arguments.get(t.untyped_storage()._cdata)
    storage = f"storage of argument {alias}" if alias is not None else "own storage"
    return (t.shape, t.dtype, t.stride(), t.storage_offset(), storage)


def compare_values(
    accel: Any,
    target: Any,
    what: str,
    mode: str,
    accel_args: Any,
    target_args: Any,
    check_device: bool = True,
    reference: str = TARGET,
    check_layout: bool = True,
) -> None:
    """Asserts that a (nested) result from accel equals the reference device's
    (the target's unless told).

    ``accel_args`` and ``target_args`` are the arguments of the two calls, for
    the aliasing check. ``mode`` says how tensor contents are compared (EXACT,
    CLOSE or METADATA: not at all); ``check_device=False`` skips the device
    check (for arguments, whose devices the Copier chose); ``check_layout=False``
    compares shapes and dtypes but not strides, offsets and aliasing (for a
    reference device whose kernels are not accel's)."""
    # Without accel tensors or devices among its arguments, an op makes its
    # tensors on the default device (factory functions), as on the target.
    accel_involved = any(
        (isinstance(x, torch.Tensor) and x.device.type == ACCEL)
        or (isinstance(x, torch.device) and x.type == ACCEL)
        or (isinstance(x, str) and x.startswith(ACCEL))
        for x in pytree.tree_leaves(accel_args)
    )
    accel_leaves, accel_spec = pytree.tree_flatten(accel)
    target_leaves, target_spec = pytree.tree_flatten(target)
    if accel_spec != target_spec:
        raise AssertionError(f"{what}: structure differs: accel {accel_spec} vs {reference} {target_spec}")
    accel_storages, target_storages = storages(tensor_leaves(accel_args)), storages(tensor_leaves(target_args))
    for i, (a, t) in enumerate(zip(accel_leaves, target_leaves)):
        where = f"{what}[{i}]" if len(target_leaves) > 1 else what
        if isinstance(t, torch.Tensor):
            if not isinstance(a, torch.Tensor):
                raise AssertionError(f"{where}: accel gave {type(a).__name__}, {reference} a tensor")
            # A result on the reference device must be on accel; a result on
            # another device (e.g. CPU next to CUDA) must be on that same device.
            expected = ACCEL if t.device.type == reference and accel_involved else t.device.type
            if check_device and a.device.type != expected:
                raise AssertionError(f"{where}: on {a.device}, expected {expected} ({reference} gave {t.device})")
            if check_layout:
                accel_layout, target_layout = layout_of(a, accel_storages), layout_of(t, target_storages)
            else:
                accel_layout, target_layout = (a.layout, a.shape, a.dtype), (t.layout, t.shape, t.dtype)
            if accel_layout != target_layout:
                raise AssertionError(f"{where}: accel has {accel_layout}, {reference} {target_layout}")
            if t.layout in SPARSE_LAYOUTS and check_layout:
                # The same kernels: the same parts (indices, values, flags), bit for bit.
                compare_values(
                    sparse_parts(a),
                    sparse_parts(t),
                    f"{where} parts",
                    mode,
                    accel_args,
                    target_args,
                    check_device,
                    reference,
                )
                continue
            if mode != METADATA:
                # Moving back to the reference device may make the copy contiguous:
                # compare values only (the layout was compared above).
                a, t = (a.to(t.device), t) if t.layout == torch.strided else (a.to_dense().to(t.device), t.to_dense())
                if mode == EXACT and same_bytes(a, t):
                    continue  # what the two checks below pass, at a fraction of their cost
                tolerances = {"rtol": 0, "atol": 0} if mode == EXACT else {}  # CLOSE: the dtype's defaults
                torch.testing.assert_close(
                    a, t, **tolerances, equal_nan=True, check_stride=False, msg=lambda m: f"{where}: {m}"
                )
                if mode == EXACT:
                    assert_same_bits(a, t, where)
        elif isinstance(t, float) and isinstance(a, float) and math.isnan(t) and math.isnan(a):
            continue
        elif type(a) is not type(t) or a != t:
            raise AssertionError(f"{where}: accel gave {a!r}, {reference} {t!r}")


SPARSE_LAYOUTS = (torch.sparse_coo, torch.sparse_csr, torch.sparse_csc, torch.sparse_bsr, torch.sparse_bsc)


def sparse_parts(t: torch.Tensor) -> list:
    """What a sparse tensor is made of: its indices, values and flags."""
    if t.layout == torch.sparse_coo:
        return [t._indices(), t._values(), t.is_coalesced()]
    if t.layout in (torch.sparse_csr, torch.sparse_bsr):
        return [t.crow_indices(), t.col_indices(), t.values()]
    return [t.ccol_indices(), t.row_indices(), t.values()]


def same_bytes(a: torch.Tensor, t: torch.Tensor) -> bool:
    """Whether two tensors of one dtype and shape hold the same bytes in every
    element: then assert_close(rtol=0, atol=0, equal_nan=True) and
    assert_same_bits pass too (the same bits are the same value, NaNs
    included). False also where bytes cannot be read this way (quantized
    tensors): the caller then runs those two checks, which also say what differs."""
    if a.is_quantized or t.is_quantized or a.dtype != t.dtype or a.shape != t.shape:
        return False

    def flat_bytes(x: torch.Tensor) -> torch.Tensor:
        flat = x.resolve_conj().resolve_neg().reshape(-1)
        if flat.stride(0) != 1:  # expanded, or a view that reshape could keep
            flat = flat.clone(memory_format=torch.contiguous_format)
        return flat.view(torch.uint8)

    return torch.equal(flat_bytes(a), flat_bytes(t))


def assert_same_bits(a: torch.Tensor, t: torch.Tensor, where: str) -> None:
    """What assert_close(rtol=0, atol=0) lets through: 0.0 against -0.0. Bytes
    are compared, except in elements that are NaN on both sides."""

    def as_bytes(x: torch.Tensor) -> torch.Tensor:  # one row of bytes per element
        flat = x.resolve_conj().resolve_neg().reshape(-1).clone(memory_format=torch.contiguous_format)
        return flat.view(torch.uint8).reshape(x.numel(), x.element_size())

    differs = (as_bytes(a) != as_bytes(t)).any(dim=1)
    if a.dtype.is_floating_point or a.dtype.is_complex:
        differs &= ~(torch.isnan(a) & torch.isnan(t)).reshape(-1)
    if differs.any():
        count = int(differs.sum())
        raise AssertionError(f"{where}: equal values but different bits in {count} elements (signed zeros?)")
