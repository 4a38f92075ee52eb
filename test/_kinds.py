"""Running one function on the target device and on accel and comparing the
outcomes, for tensors of every kind (strided, quantized, sparse, nested),
shared by test_quantized.py, test_sparse.py and test_tensor_kinds.py.

The rule: where the target raises, accel raises the same exception type with
the same message (device names aside; where the target has no kernel at all,
accel's own message naming accel);
otherwise accel's result is on accel (where the target's is on the target)
and equal to the target's bit for bit, part by part: a quantized tensor's
integer representation and quantizer, a sparse tensor's indices and values,
a nested tensor's tensors.
"""

from __future__ import annotations

import re
from typing import Any, Callable

import torch
import torch.utils._pytree as pytree

import torch_accel

TARGET = torch_accel._target_device_type()
ACCEL = "accel"

SPARSE_COMPRESSED = (torch.sparse_csr, torch.sparse_csc, torch.sparse_bsr, torch.sparse_bsc)


def to_device(tree: Any, device: str) -> Any:
    """Every tensor of ``tree`` (of any kind) copied to ``device``."""
    return pytree.tree_map(lambda x: x.to(device) if isinstance(x, torch.Tensor) else x, tree)


def parts(t: torch.Tensor) -> dict[str, Any]:
    """What defines a tensor of its kind, besides its dtype and shape."""
    if t.is_nested:
        return {"tensors": list(t.unbind())}
    if t.layout == torch.sparse_coo:
        return {
            "indices": t._indices(),
            "values": t._values(),
            "is_coalesced": t.is_coalesced(),
            "sparse_dim": t.sparse_dim(),
            "dense_dim": t.dense_dim(),
        }
    if t.layout in SPARSE_COMPRESSED:
        compressed, plain = (
            (t.crow_indices(), t.col_indices())
            if t.layout in (torch.sparse_csr, torch.sparse_bsr)
            else (t.ccol_indices(), t.row_indices())
        )
        return {"compressed_indices": compressed, "plain_indices": plain, "values": t.values()}
    if t.is_quantized:
        quantizer: dict[str, Any] = {"qscheme": t.qscheme()}
        if t.qscheme() == torch.per_tensor_affine:
            quantizer.update(scale=t.q_scale(), zero_point=t.q_zero_point())
        else:
            quantizer.update(
                scales=t.q_per_channel_scales(), zero_points=t.q_per_channel_zero_points(), axis=t.q_per_channel_axis()
            )
        return {"int_repr": t.int_repr(), "stride": t.stride(), "storage_offset": t.storage_offset(), **quantizer}
    return {"values": t, "stride": t.stride(), "storage_offset": t.storage_offset()}


def expected_device(t: torch.Tensor, same_device: bool) -> str:
    return ACCEL if t.device.type == TARGET and not same_device else t.device.type


def assert_same_tensor(a: torch.Tensor, t: torch.Tensor, where: str = "result", same_device: bool = False) -> None:
    """``a`` (accel's) is ``t`` (the target's) on accel, bit for bit; with
    ``same_device``, on ``t``'s device."""
    expected = expected_device(t, same_device)
    assert a.device.type == expected, f"{where}: on {a.device}, expected {expected}"
    assert (a.layout, a.dtype, a.is_quantized, a.is_nested) == (t.layout, t.dtype, t.is_quantized, t.is_nested), where
    if not t.is_nested:  # a nested tensor's shape is its tensors'
        assert a.shape == t.shape, where
    assert_same(parts(a), parts(t), where, same_device)


def assert_same(a: Any, t: Any, where: str = "result", same_device: bool = False) -> None:
    """Nested results: structure, tensors (assert_same_tensor), other values."""
    a_leaves, a_spec = pytree.tree_flatten(a)
    t_leaves, t_spec = pytree.tree_flatten(t)
    assert a_spec == t_spec, f"{where}: structure {a_spec} vs {t_spec}"
    for i, (x, y) in enumerate(zip(a_leaves, t_leaves)):
        here = f"{where}[{i}]" if len(t_leaves) > 1 else where
        if isinstance(y, torch.Tensor):
            assert isinstance(x, torch.Tensor), f"{here}: accel gave {type(x).__name__}"
            if x.layout != torch.strided or x.is_quantized or x.is_nested:
                assert_same_tensor(x, y, here, same_device)
            else:
                expected = expected_device(y, same_device)
                assert x.device.type == expected, f"{here}: on {x.device}, expected {expected}"
                assert (x.dtype, x.shape) == (y.dtype, y.shape), here
                assert_same_bits(x, y, here)
        else:
            assert type(x) is type(y) and x == y, f"{here}: accel {x!r}, target {y!r}"


def assert_same_bits(a: torch.Tensor, t: torch.Tensor, where: str) -> None:
    a, t = a.detach().cpu().contiguous(), t.detach().cpu().contiguous()
    if a.dtype == torch.bool:
        a, t = a.to(torch.uint8), t.to(torch.uint8)
    if a.dim() == 0:
        a, t = a.reshape(1), t.reshape(1)
    assert torch.equal(a.view(torch.uint8), t.view(torch.uint8)), f"{where}: values differ:\n{a}\n{t}"


def run_both(fn: Callable, *args: Any) -> tuple[Any, Any]:
    """``fn`` on ``args`` (made on the target) and on their accel copies; the
    outcome (result or exception) of each."""
    outcomes = []
    for device in (TARGET, ACCEL):
        inputs = to_device(args, device)
        try:
            outcomes.append((fn(*inputs), None))
        except Exception as error:  # noqa: BLE001 - an exception is an outcome to compare
            outcomes.append((None, error))
    return outcomes[0], outcomes[1]


def without_devices(message: str) -> str:
    """An error message with its device names (accel's and the target's) made alike."""
    message = re.sub(r",\s*device='[^']*'", "", message)  # a tensor's repr names its device unless it is cpu
    return re.sub(rf"\b(?:{ACCEL}|{TARGET})(?::\d+)?\b", "<device>", message, flags=re.I)


def assert_same_outcome(fn: Callable, *args: Any) -> Any:
    """Accel raises iff the target raises (the same exception type and
    message, device names aside), and otherwise gives the target's result.
    Returns accel's result (or error)."""
    (target, target_error), (accel, accel_error) = run_both(fn, *args)
    if target_error is not None:
        assert accel_error is not None, f"the target raised {target_error!r}; accel returned {accel!r}"
        assert type(accel_error) is type(target_error), f"target: {target_error!r}; accel: {accel_error!r}"
        if isinstance(accel_error, NotImplementedError) and "Could not run" in str(target_error):
            # The target has no kernel: accel says that it lacks the operator.
            assert_names_accel(accel_error)
        else:
            accel_message, target_message = (without_devices(str(e).splitlines()[0] if str(e) else "") for e in (accel_error, target_error))
            assert accel_message == target_message, f"target: {target_error!r}; accel: {accel_error!r}"
        return accel_error
    if accel_error is not None:
        raise accel_error
    assert_same(accel, target)
    return accel


def assert_names_accel(error: BaseException) -> None:
    """A NotImplementedError of accel's says that accel lacks the operator."""
    message = str(error)
    assert "accel" in message, message


def without_device(text: str) -> str:
    """A tensor's repr without its device (the target's cpu tensors name none)
    and with its whitespace collapsed (the device changes where lines wrap)."""
    return re.sub(r"\s+", " ", re.sub(r",?\s*device='[a-z]+(:\d+)?'", "", text))
