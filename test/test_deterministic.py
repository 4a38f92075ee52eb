"""Deterministic mode on accel: torch.use_deterministic_algorithms(True) works as
on cuda, on both runtimes.

- New memory reads NaN (floating, complex) or the dtype's maximum (integers,
  bool True) with torch.utils.deterministic.fill_uninitialized_memory (the
  default): the empty factories and resize_ growth fill as the target fills,
  and set_ growth is filled too (cuda leaves it as it is: see docs/alias-fallback.md).
- Operators that CUDA's kernels mark nondeterministic raise CUDA's alert (an
  error, or a warning with warn_only=True) with CUDA's caller name; those CUDA
  makes deterministic instead run (the cases: _deterministic_cases.py, with
  PyTorch 2.11's CUDA messages). On the CUDA runtime CUDA's kernels raise their
  alerts themselves, and the cases also run on cuda itself (in a process
  without torch_accel) to check the expectations; on the host runtime accel
  raises CUDA's alerts (the CPU kernels never alert).
"""

import re

import pytest
import torch

import torch_accel

from _deterministic_cases import CASES, alert_message, deterministic, idx
from conftest import run_target_cases

DTYPES = [
    torch.float32,
    torch.float64,
    torch.float16,
    torch.bfloat16,
    torch.complex64,
    torch.int8,
    torch.uint8,
    torch.int16,
    torch.int32,
    torch.int64,
    torch.bool,
]


def assert_filled(tensor: torch.Tensor):
    values = tensor.cpu()
    if values.dtype.is_floating_point or values.dtype.is_complex:
        assert values.isnan().all(), values
    elif values.dtype == torch.bool:
        assert values.all(), values
    else:
        assert values.eq(torch.iinfo(values.dtype).max).all(), values


# Memory ---------------------------------------------------------------------

FACTORIES = {
    "empty": lambda d, t: torch.empty(10, 9, device=d, dtype=t),
    "empty out=": lambda d, t: torch.empty(10, 9, out=torch.zeros(1, device=d, dtype=t)),
    "empty_like": lambda d, t: torch.empty_like(torch.zeros(10, 9, device=d, dtype=t)),
    "empty_like contiguous": lambda d, t: torch.empty_like(
        torch.zeros(10, 9, device=d, dtype=t).t(), memory_format=torch.contiguous_format
    ),
    "empty_strided": lambda d, t: torch.empty_strided((10, 9), (1, 10), device=d, dtype=t),
    "empty_permuted": lambda d, t: torch.empty_permuted((2, 3, 5), (1, 0, 2), device=d, dtype=t),
    "new_empty": lambda d, t: torch.zeros(1, device=d, dtype=t).new_empty((4, 5)),
    "new_empty_strided": lambda d, t: torch.zeros(1, device=d, dtype=t).new_empty_strided((4, 5), (1, 4)),
}


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("factory", FACTORIES.values(), ids=FACTORIES.keys())
def test_empty_factories_fill_new_memory_as_the_target(factory, dtype, target):
    with deterministic():
        result = factory("accel", dtype)
        reference = factory(target, dtype)
    assert result.device.type == "accel"
    assert_filled(reference)  # the target's contract, which accel follows
    assert_filled(result)
    assert result.shape == reference.shape and result.stride() == reference.stride()


RESIZES = [
    # size, stride, new size (PyTorch's test_deterministic_resize cases)
    ((10,), (1,), (5,)),
    ((10,), (0,), (10,)),
    ((10,), (1,), (20,)),
    ((2, 3, 4), None, (2, 3, 4)),
    ((2, 3, 4), None, (6, 3, 4)),
    ((2, 3, 4), None, (3, 4, 5)),
    ((2, 3, 4), (1, 4, 12), (4, 3, 4)),
    ((2, 3, 4), (1, 0, 1), (2, 4, 5)),
]


def storage_values(tensor: torch.Tensor) -> torch.Tensor:
    """All of a tensor's storage, as elements of its dtype, on the CPU."""
    count = tensor.untyped_storage().nbytes() // tensor.element_size()
    return tensor.as_strided((count,), (1,), 0).cpu()


@pytest.mark.parametrize("dtype", [torch.float32, torch.complex64, torch.int32, torch.bool], ids=str)
@pytest.mark.parametrize("size, stride, new_size", RESIZES)
def test_resize_growth_is_filled_as_on_the_target(size, stride, new_size, dtype, target):
    grown = {}
    for device in ("accel", target):
        if stride is None:
            tensor = torch.zeros(size, dtype=dtype, device=device)
        else:
            tensor = torch.empty_strided(size, stride, dtype=dtype, device=device).fill_(0)
        before = storage_values(tensor)
        with deterministic():
            tensor.resize_(new_size)
        after = storage_values(tensor)
        # The old bytes are kept; the new ones read NaN or the dtype's maximum.
        torch.testing.assert_close(after[: before.numel()], before, rtol=0, atol=0, equal_nan=True)
        if after.numel() > before.numel():
            assert_filled(after[before.numel() :])
        grown[device] = (tuple(tensor.shape), tensor.stride(), after.numel())
    assert grown["accel"] == grown[target]


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bool], ids=str)
def test_set_grown_storage_is_filled(dtype):
    # cuda's and the CPU's set_ grow the storage without filling it (their
    # resize_impl does not fill); accel fills it, as the issue asks and as
    # resize_ does: uninitialised bytes can hold no contract either way.
    storage = torch.zeros(2, dtype=dtype, device="accel").untyped_storage()
    tensor = torch.tensor([], dtype=dtype, device="accel")
    with deterministic():
        tensor.set_(storage, 0, (6,), (1,))
    assert storage.nbytes() == 6 * tensor.element_size()
    assert (tensor[:2].cpu() == 0).all()
    assert_filled(tensor[2:])


def test_no_fill_without_fill_uninitialized_memory():
    # The flag off: empty still works (contents unspecified) and costs no fill
    # kernel: accel then calls the target no more than for a plain allocation.
    with deterministic(fill=False):
        before = torch_accel._C._alias_fallback_calls()
        torch.empty(4, device="accel")
        assert torch_accel._C._alias_fallback_calls() == before
    with deterministic():
        before = torch_accel._C._alias_fallback_calls()
        torch.empty(4, device="accel")
        assert torch_accel._C._alias_fallback_calls() > before  # the fill


def test_inductors_fast_allocation_is_not_filled():
    # Like torch._C._dynamo.guards._empty_strided_cuda, the allocation that
    # Inductor's generated code makes (and then writes in full) is not filled.
    with deterministic():
        before = torch_accel._C._alias_fallback_calls()
        buffer = torch_accel._C._empty_strided((4,), (1,), torch.float32, 0)
        assert torch_accel._C._alias_fallback_calls() == before
    assert buffer.device == torch.device("accel:0")


# Nondeterministic operators --------------------------------------------------


@pytest.fixture(scope="module")
def cuda_outcomes(target, tmp_path_factory):
    """The cases on cuda itself, in a process without torch_accel (CUDA runtime)."""
    if target != "cuda":
        return None
    return run_target_cases(target, tmp_path_factory.mktemp("deterministic"), script="_deterministic_cases.py")


@pytest.mark.parametrize("name", CASES.keys())
def test_nondeterministic_operators_alert_as_on_cuda(name, cuda_outcomes):
    run, caller = CASES[name]
    with deterministic():
        if caller is None:
            run("accel")
        else:
            with pytest.raises(RuntimeError, match=alert_message(caller)):
                run("accel")
    run("accel")  # deterministic mode off: no alert
    if cuda_outcomes is not None:  # and cuda itself agrees
        if caller is None:
            assert cuda_outcomes[name] is None, cuda_outcomes[name]
        else:
            assert re.search(alert_message(caller), cuda_outcomes[name] or ""), cuda_outcomes[name]


def test_warn_only_warns_instead(target):
    x = torch.rand(10, device="accel")
    with deterministic(warn_only=True):
        with pytest.warns(UserWarning, match=alert_message("_histc_cuda with floating point input")):
            result = torch.histc(x, bins=4)
    assert torch.equal(result.to(target), torch.histc(x.to(target), bins=4))


def test_the_global_flag_reaches_the_target_kernel(target):
    # put_ without accumulate alerts on every device: it is the target kernel
    # (inside the fallback's call) that reads torch.are_deterministic_algorithms_enabled().
    x, index, source = torch.zeros(4, device="accel"), idx([0], "accel"), torch.ones(1, device="accel")
    with deterministic():
        assert torch.are_deterministic_algorithms_enabled()
        before = torch_accel._C._alias_fallback_calls()
        with pytest.raises(RuntimeError, match=alert_message("put_")):
            x.put_(index, source)
        assert torch_accel._C._alias_fallback_calls() == before + 1  # raised inside the target call
    x.put_(index, source)
    assert x.cpu().tolist() == [1.0, 0.0, 0.0, 0.0]


def test_deterministic_paths_give_the_targets_results(target):
    # Where CUDA switches to a deterministic algorithm (index_add_ through
    # index_put_ with accumulate), accel's result is the target's, bitwise.
    torch.manual_seed(0)
    values, index = torch.rand(1000), torch.randint(0, 8, (1000,))
    with deterministic():
        result = torch.zeros(8, device="accel").index_add_(0, index.to("accel"), values.to("accel"))
        reference = torch.zeros(8, device=target).index_add_(0, index.to(target), values.to(target))
    assert torch.equal(result.to(target), reference)
