"""The alias fallback: every ATen operator runs on accel through the target's
kernel over the same memory, with results bitwise equal to the target's."""

import math
import os

import pytest
import torch

import torch_accel
from conftest import HAS_CUDA_RUNTIME, NO_CUDA_RUNTIME, run_python
from test_cuda_visible_devices import stub_libraries  # noqa: F401 (a fixture)


def to_accel(value, device="accel"):
    if isinstance(value, torch.Tensor):
        return value.to(device)
    if isinstance(value, (list, tuple)):
        return type(value)(to_accel(v, device) for v in value)
    return value


def to_target(value, target):
    if isinstance(value, torch.Tensor):
        return value.to(target)
    if isinstance(value, (list, tuple)):
        return type(value)(to_target(v, target) for v in value)
    return value


def assert_bitwise(accel_result, target_result, target):
    if isinstance(target_result, (list, tuple)):
        assert len(accel_result) == len(target_result)
        for a, t in zip(accel_result, target_result):
            assert_bitwise(a, t, target)
        return
    if not isinstance(target_result, torch.Tensor):
        assert accel_result == target_result
        return
    assert accel_result.device.type == "accel", accel_result.device
    assert accel_result.dtype == target_result.dtype
    assert accel_result.shape == target_result.shape
    assert accel_result.stride() == target_result.stride()
    torch.testing.assert_close(accel_result.to(target), target_result, rtol=0, atol=0, equal_nan=True)


def fallback_calls() -> int:
    return torch_accel._C._alias_fallback_calls()


OPS = {
    "add": lambda x, y: x + y,
    "mul_scalar": lambda x, y: x * 3.5,
    "div": lambda x, y: x / (y.abs() + 1),
    "relu": lambda x, y: torch.relu(x),
    "gelu": lambda x, y: torch.nn.functional.gelu(x),
    "exp": lambda x, y: x.exp(),
    "sum": lambda x, y: x.sum(),
    "sum_dim": lambda x, y: x.sum(dim=1, keepdim=True),
    "mean": lambda x, y: x.mean(0),
    "var": lambda x, y: x.var(1),
    "matmul": lambda x, y: x @ y.t(),
    "bmm": lambda x, y: torch.bmm(x.unsqueeze(0), y.t().unsqueeze(0)),
    "softmax": lambda x, y: torch.softmax(x, -1),
    "log_softmax": lambda x, y: torch.log_softmax(x, 0),
    "layer_norm": lambda x, y: torch.nn.functional.layer_norm(x, (x.shape[-1],)),
    "where": lambda x, y: torch.where(x > 0, x, y),
    "clamp": lambda x, y: x.clamp(-0.5, 0.5),
    "cat": lambda x, y: torch.cat([x, y], 1),
    "stack": lambda x, y: torch.stack([x, y]),
    "cumsum": lambda x, y: x.cumsum(1),
    "sort": lambda x, y: torch.sort(x, dim=1),
    "topk": lambda x, y: torch.topk(x, 3),
    "max_dim": lambda x, y: x.max(dim=0),
    "argmax": lambda x, y: x.argmax(),
    "eq": lambda x, y: x == y,
    "to_half": lambda x, y: x.half(),
    "to_int": lambda x, y: (x * 10).long(),
    "nonzero": lambda x, y: (x > 0).nonzero(),
    "unique": lambda x, y: torch.unique((x * 3).round(), return_counts=True),
    "masked_select": lambda x, y: x.masked_select(y > 0),
    "index_select": lambda x, y: x.index_select(1, (y[0] > 0).nonzero().flatten()),
    "gather": lambda x, y: x.gather(1, (y.abs() * 2).long().clamp(max=4)),
    "conv1d": lambda x, y: torch.nn.functional.conv1d(x.unsqueeze(0), y[:2, :3].unsqueeze(1).repeat(1, 6, 1)),
    "embedding": lambda x, y: torch.nn.functional.embedding((y.abs() * 2).long().clamp(max=3), x),
    "split": lambda x, y: torch.split(x, 2, dim=1),
    "chunk_then_add": lambda x, y: [c + 1 for c in x.chunk(2)],
    "foreach_add": lambda x, y: torch._foreach_add([x, y], [y, x]),
    # The per-op benchmark list (most of them unboxed kernels: csrc/aten/TargetKernels.cpp).
    "clone": lambda x, y: x.clone(),
    "contiguous_of_transposed": lambda x, y: x.t().contiguous(),
    "clone_preserves_strides": lambda x, y: x.t().clone(),
    "lerp_": lambda x, y: x.clone().lerp_(y, 0.3),
    "addcmul_": lambda x, y: x.clone().addcmul_(y, x, value=0.5),
    "gt": lambda x, y: x > y,
    "eq_scalar": lambda x, y: x == 0,
    "masked_fill": lambda x, y: x.masked_fill(y > 0, -1.5),
    "item": lambda x, y: x[2, 3].item(),
    "topk_smallest": lambda x, y: torch.topk(x, 2, dim=0, largest=False),
    "complex_conj_matmul": lambda x, y: torch.complex(x, y).conj() @ torch.complex(y, x).t(),
    "neg_view_mul": lambda x, y: torch.complex(x, y).conj().imag * 2,
    "flip": lambda x, y: x.flip(0),
    "roll": lambda x, y: x.roll(2, 1),
    "triu": lambda x, y: x.triu(1),
    "linalg_vector_norm": lambda x, y: torch.linalg.vector_norm(x, dim=1),
    "cdist": lambda x, y: torch.cdist(x, y),
    "pad": lambda x, y: torch.nn.functional.pad(x, (1, 2)),
    "interpolate": lambda x, y: torch.nn.functional.interpolate(x[None, None], scale_factor=2, mode="bilinear"),
}


@pytest.mark.parametrize("name", sorted(OPS))
def test_op_bitwise_equal_to_target(name, target):
    torch.manual_seed(0)
    x, y = torch.randn(6, 5, device=target), torch.randn(6, 5, device=target)
    expected = OPS[name](x, y)
    result = OPS[name](to_accel(x), to_accel(y))
    assert_bitwise(result, expected, target)


def test_inplace_returns_the_argument_and_updates_its_views(target):
    base = torch.randn(4, 4, device="accel")
    reference = base.to(target)
    row = base[1]
    result = base.mul_(2).add_(1)
    assert result is base
    reference.mul_(2).add_(1)
    assert torch.equal(base.to(target), reference)
    assert torch.equal(row.to(target), reference[1])
    # In-place on a strided view writes through to the base.
    column = base[:, 2]
    column.zero_()
    assert torch.equal(base[:, 2].cpu(), torch.zeros(4))


def test_out_variant_resizes_an_empty_out(target):
    x = torch.randn(3, 4, device="accel")
    out = torch.empty(0, device="accel")
    result = torch.mul(x, 2, out=out)
    assert result is out
    assert out.shape == (3, 4) and out.device == x.device
    assert torch.equal(out.to(target), x.to(target) * 2)
    # A second call with the right size reuses the memory.
    pointer = out.data_ptr()
    torch.add(x, 1, out=out)
    assert out.data_ptr() == pointer
    assert torch.equal(out.to(target), x.to(target) + 1)


def test_out_variant_with_tuple_outs(target):
    x = torch.randn(5, 3, device="accel")
    values, indices = torch.empty(0, device="accel"), torch.empty(0, dtype=torch.long, device="accel")
    result = torch.max(x, 0, out=(values, indices))
    assert result[0] is values and result[1] is indices
    expected = torch.max(x.to(target), 0)
    assert torch.equal(values.to(target), expected.values)
    assert torch.equal(indices.to(target), expected.indices)


# Arguments that are different tensors over one storage. The target's kernels
# check for overlaps between them (an error for a partial overlap, a shortcut
# for the same data) and, where a kernel resizes one, the others see the
# storage change: accel must give the target's answer, not compute through an
# overlap that the target refuses.
SHARED_STORAGE = {
    # (boxed fallback, unboxed kernel or copy_): what the target does
    "copy_partial_overlap": lambda x: x[1:].copy_(x[:-1]),  # copy_: refused
    "copy_same_data": lambda x: x.view(2, 3).copy_(x.view(2, 3)[:]),  # copy_: nothing to do
    "out_partial_overlap": lambda x: torch.add(x[:-1], 1, out=x[1:]),  # boxed: refused
    "out_full_overlap": lambda x: torch.mul(x, 2, out=x.view(2, 3).view(6)),  # boxed: computed
    "inplace_partial_overlap": lambda x: x[1:].add_(x[:-1]),  # unboxed: refused
    "inplace_disjoint_views": lambda x: x[:3].add_(x[3:]),  # unboxed: computed
    "index_put_partial_overlap": lambda x: x.index_put_((torch.tensor([0, 1], device=x.device),), x[1:3]),
    "cat_out_partial_overlap": lambda x: torch.cat([x[:2], x[2:3]], out=x[1:4]),  # boxed: refused
    # The kernel resizes an out= view past the end of the storage its inputs view.
    "cat_out_grows_the_inputs_storage": lambda x: torch.cat([x[:2], x[2:4]], out=x[6:]),
    "two_outs_of_one_storage_resized": lambda x: _aminmax_into_views_of(x.new_empty(0), x, (0, 0), (0, 0)),
    "two_outs_into_one_buffer": lambda x: _aminmax_into_views_of(x.new_zeros(6), x, (0, 3), (3, 6)),
}


def _aminmax_into_views_of(buffer, x, min_range, max_range):
    """aminmax with its two out= tensors views of one buffer; empty views are resized by the kernel."""
    minimum, maximum = buffer[slice(*min_range)], buffer[slice(*max_range)]
    torch.aminmax(x.view(2, 3), dim=0, out=(minimum, maximum))
    return minimum, maximum, buffer


def run_capturing_errors(fn, x):
    try:
        return fn(x), x
    except RuntimeError as error:
        return str(error).splitlines()[0]


def storage_facts(value):
    if isinstance(value, torch.Tensor):
        return (value.untyped_storage().nbytes(), value.storage_offset())
    if isinstance(value, (list, tuple)):
        return [storage_facts(v) for v in value]
    return None


@pytest.mark.parametrize("name", sorted(SHARED_STORAGE))
def test_arguments_sharing_a_storage_behave_as_on_the_target(name, target):
    fn = SHARED_STORAGE[name]
    expected = run_capturing_errors(fn, torch.arange(6.0, device=target))
    result = run_capturing_errors(fn, torch.arange(6.0, device="accel"))
    if isinstance(expected, str):
        assert result == expected  # the target's error, word for word
        return
    assert not isinstance(result, str), result
    assert_bitwise(result, expected, target)  # the results and the input, after the call
    assert storage_facts(result) == storage_facts(expected)


def test_kernel_view_results_share_accel_storage():
    x = torch.arange(12.0, device="accel")
    before = fallback_calls()
    windows = x.unfold(0, 4, 2)  # a view op with backend kernels
    assert fallback_calls() - before <= 1
    assert windows.device == x.device
    assert windows.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()
    x.add_(100)
    assert torch.equal(windows.cpu(), (torch.arange(12.0) + 100).unfold(0, 4, 2))


@pytest.mark.parametrize("inference", [False, True])
def test_fresh_results_are_accel_tensors_like_constructed_ones(inference, target):
    # A fresh result may be the target kernel's own TensorImpl taken over
    # (TargetCall::mapResult): it must be indistinguishable from an accel
    # tensor made by a factory, through unboxed kernels and the boxed fallback.
    x = torch.randn(4, 6, device="accel")
    with torch.inference_mode(inference):
        expected_keys = torch._C._dispatch_keys(torch.empty(2, device="accel"))
        results = [x + x, x * 2, torch.relu(x), x.cumsum(0), *torch.sort(x, dim=1), x.t().contiguous(), x.clone()]
        targets = [x.to(target) + x.to(target), x.to(target) * 2, torch.relu(x.to(target)), x.to(target).cumsum(0)]
        targets += [*torch.sort(x.to(target), dim=1), x.to(target).t().contiguous(), x.to(target).clone()]
    for result, expected in zip(results, targets):
        assert torch._C._dispatch_keys(result) == expected_keys
        assert result.untyped_storage().device == result.device == x.device
        assert result.is_inference() == inference and result._base is None
        assert_bitwise(result, expected, target)
        if not inference:
            assert result._version == 0
            result.add_(1)
            assert result._version == 1
            assert torch.equal(result.to(target), expected + 1)


def test_fresh_results_keep_autograd(target):
    x = torch.randn(3, 3, device="accel", requires_grad=True)
    y = (x * x).relu().sum()
    y.backward()
    assert x.grad.device == x.device
    assert torch._C._dispatch_keys(x.grad) == torch._C._dispatch_keys(torch.empty(1, device="accel"))
    reference = x.detach().to(target).requires_grad_()
    (reference * reference).relu().sum().backward()
    assert_bitwise(x.grad, reference.grad, target)


def test_views_and_metadata_ops_never_reach_the_fallback():
    def views_of(x):
        return [
            x.view(24),
            x.reshape(6, 4),
            x.t(),
            x.transpose(0, 1),
            x.permute(1, 0),
            x[1:3, ::2],
            x[0],
            x.select(1, 2),
            x.narrow(1, 1, 2),
            x.unsqueeze(0).squeeze(0),
            x.expand(2, 4, 6),
            x.detach(),
            x.flatten(),
            x.unflatten(1, (2, 3)),
            x.as_strided((2, 2), (1, 4)),
            x.view(torch.int32),
            x.real,
        ]

    def metadata_of(x):
        return (x.size(), x.stride(), x.storage_offset(), x.dim(), x.numel(), x.is_contiguous(), x.dtype)

    reference = torch.randn(4, 6)
    x = reference.to("accel")
    before = fallback_calls()
    views = views_of(x)
    metadata = [metadata_of(x)] + [metadata_of(v) for v in views]
    assert fallback_calls() == before
    # Each view is the target's view: same metadata, over x's own memory, on x's device.
    assert metadata == [metadata_of(reference)] + [metadata_of(v) for v in views_of(reference)]
    for view in views:
        assert view.device == x.device and view.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()


def test_hot_operators_are_counted_like_fallback_calls():
    # add and mm have unboxed accel kernels (csrc/aten/TargetKernels.cpp),
    # which run through the same TargetCall as the boxed fallback.
    x = torch.randn(3, 3, device="accel")
    before = fallback_calls()
    x + x
    x @ x
    x.cumsum(0)  # boxed fallback
    assert fallback_calls() - before == 3


def test_target_views_a_kernel_keeps_are_not_reused(target):
    # Target views are recycled after each call unless something still holds
    # them; a kernel (here a Python one) that keeps its argument must find it
    # unchanged after later operators ran.
    kept = []
    target_key = "CUDA" if target == "cuda" else "CPU"
    lib = torch.library.Library("accel_test_keep", "DEF")
    try:
        lib.define("keep(Tensor x) -> Tensor")

        def keep(x):
            kept.append(x)
            return x.clone()

        lib.impl("keep", keep, target_key)
        a = torch.arange(6.0, device="accel").view(2, 3)
        torch.ops.accel_test_keep.keep(a)
        b = torch.ones(5, dtype=torch.int64, device="accel")
        for _ in range(3):
            b + b, a * 2, b.zero_()
        (view,) = kept
        assert view.device.type == target and view.shape == (2, 3) and view.dtype == torch.float32
        assert torch.equal(view.cpu(), torch.arange(6.0).view(2, 3))
    finally:
        lib._destroy()


def test_accel_kernels_keep_the_targets_autograd_decompositions(target):
    # A backend kernel for an operator with a CompositeImplicitAutograd kernel
    # would bypass that decomposition under autograd; accel may have one only
    # where the target does too, so both behave alike.
    # The one exception is PyTorch's hook for a backend's tensor type
    # (csrc/aten/ShallowCopyType.cpp): it answers a bool, nothing to
    # differentiate, and a backend kernel is how a backend answers it.
    backend_hooks = {"aten::_has_compatible_shallow_copy_type"}
    # accel's scaled_dot_product_attention (csrc/aten/ScaledDotProductAttention.cpp)
    # registers the same kernel for AutogradPrivateUse1: under autograd it runs
    # the composite (or, on the CUDA runtime, the composite's cuda branch), so
    # nothing is bypassed.
    composites = {"aten::scaled_dot_product_attention"}
    has = torch._C._dispatch_has_kernel_for_dispatch_key
    target_key = "CUDA" if target == "cuda" else "CPU"
    shadowed = [
        name
        for name in torch._C._dispatch_get_all_op_names()
        if has(name, "PrivateUse1") and has(name, "CompositeImplicitAutograd") and not has(name, target_key)
    ]
    assert sorted(shadowed) == sorted(backend_hooks | composites)
    assert all(has(name, "AutogradPrivateUse1") for name in composites)


def test_tensor_optional_list_arguments(target):
    x = torch.zeros(4, 5, device="accel")
    rows = torch.tensor([0, 2], device="accel")
    x[rows, 1:3] = 7.0
    expected = torch.zeros(4, 5, device=target)
    expected[torch.tensor([0, 2], device=target), 1:3] = 7.0
    assert torch.equal(x.to(target), expected)
    # index_put_ with None in the index list (a Tensor?[] argument)
    y = torch.zeros(3, 4, device="accel")
    torch.ops.aten.index_put_(y, [None, torch.tensor([1, 3], device="accel")], torch.tensor(5.0, device="accel"))
    assert torch.equal(y.cpu()[:, [1, 3]], torch.full((3, 2), 5.0))


def test_cpu_index_tensors_are_accepted_as_cuda_accepts_them():
    x = torch.arange(10.0, device="accel")
    assert torch.equal(x[torch.tensor([1, 5])].cpu(), torch.tensor([1.0, 5.0]))


FOREACH_INPLACE = {
    "mul_scalar": lambda ts, os: torch._foreach_mul_(ts, 3.0),
    "mul_list": lambda ts, os: torch._foreach_mul_(ts, os),
    "add_scalar": lambda ts, os: torch._foreach_add_(ts, 0.25),
    "add_list_alpha": lambda ts, os: torch._foreach_add_(ts, os, alpha=-0.5),
    # A list that is its own other operand: the same target views on both sides.
    "add_list_to_itself": lambda ts, os: torch._foreach_add_(ts, ts),
    "mul_list_of_views_of_one_tensor": lambda ts, os: torch._foreach_mul_(list(ts[0].view(3, 1).unbind(0)), list(os[0].view(3, 1))),
}


@pytest.mark.parametrize("name", sorted(FOREACH_INPLACE))
def test_foreach_inplace_on_lists(name, target):
    # The optimizers' updates (unboxed kernels): in place, bitwise the target's.
    torch.manual_seed(0)
    references = [torch.randn(shape, device=target) for shape in ((3,), (2, 2), (3,))]
    others = [torch.randn_like(r) for r in references]
    tensors = [r.to("accel") for r in references]
    accel_others = [o.to("accel") for o in others]
    data_ptrs = [t.data_ptr() for t in tensors]
    before = fallback_calls()
    FOREACH_INPLACE[name](tensors, accel_others)
    assert fallback_calls() == before + 1
    FOREACH_INPLACE[name](references, others)
    for t, r in zip(tensors, references):
        assert torch.equal(t.to(target), r)
    assert [t.data_ptr() for t in tensors] == data_ptrs


def test_foreach_inplace_list_mixing_devices_is_an_error(two_devices):
    tensors = [torch.ones(2, device="accel:0"), torch.ones(2, device="accel:1")]
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        torch._foreach_add_(tensors, [torch.ones(2, device="accel:0"), torch.ones(2, device="accel:1")])


@pytest.mark.parametrize(
    "factory",
    [
        lambda d: torch.arange(7, device=d),
        lambda d: torch.linspace(0, 1, 9, device=d),
        lambda d: torch.full((2, 3), 4.5, device=d),
        lambda d: torch.eye(3, device=d),
        lambda d: torch.zeros(2, 2, dtype=torch.int64, device=d),
        lambda d: torch.ones(3, dtype=torch.bool, device=d),
        lambda d: torch.tensor([[1, 2], [3, 4]], device=d),
    ],
)
def test_factories_with_an_accel_device(factory, target):
    result = factory("accel")
    assert result.device == torch.device("accel", torch_accel.current_device())
    assert torch.equal(result.to(target), factory(target))


def test_factory_honours_the_device_index(two_devices):
    for factory in (lambda: torch.arange(4, device="accel:1"), lambda: torch.randn(4, device="accel:1")):
        result = factory()
        assert result.device == torch.device("accel:1")
        assert torch_accel.current_device() == 0


def test_result_follows_the_inputs_device_not_the_current_device(two_devices, target):
    x = torch.randn(3, device="accel:1")
    with torch_accel.device(0):
        y = x * 2 + x.exp()
    assert y.device == torch.device("accel:1")
    assert torch.equal(y.to(target), x.to(target) * 2 + x.to(target).exp())


def test_current_device_and_streams_are_restored(two_devices):
    x = torch.randn(8, device="accel:0")
    stream1 = torch_accel.Stream(device=1)
    torch_accel.set_device(1)
    torch_accel.set_stream(stream1)
    streams_before = [torch_accel.current_stream(i) for i in range(2)]
    y = torch.softmax(x, 0).sum()
    z = torch.arange(3, device="accel:0") + 1
    assert torch_accel.current_device() == 1
    assert [torch_accel.current_stream(i) for i in range(2)] == streams_before
    assert y.device == z.device == torch.device("accel:0")


def test_cpu_scalar_tensors_mix_with_accel(target):
    x = torch.randn(4, device="accel")
    scalar = torch.tensor(2.5)
    assert torch.equal((x * scalar).to(target), x.to(target) * scalar.to(target))
    assert (x + scalar).device == x.device


# Bad input ------------------------------------------------------------------


def test_mixing_accel_and_cpu_tensors_is_an_error():
    x = torch.randn(4, device="accel")
    with pytest.raises(RuntimeError, match=r"same device.*accel:0 and cpu"):
        x + torch.randn(4)
    with pytest.raises(RuntimeError, match=r"same device.*accel:0 and cpu"):
        torch.mm(x.view(2, 2), torch.randn(2, 2))
    assert torch.isfinite(x).all()  # x is intact and usable


def test_two_accel_devices_in_one_op_is_an_error(two_devices):
    a, b = torch.ones(3, device="accel:0"), torch.ones(3, device="accel:1")
    with pytest.raises(RuntimeError, match=r"same device.*accel:0 and accel:1"):
        a + b
    with pytest.raises(RuntimeError, match=r"same device.*accel:1 and accel:0"):
        torch.add(b, a)


def test_out_on_the_wrong_device_is_an_error():
    x = torch.randn(3, device="accel")
    out = torch.full((3,), 7.0)
    with pytest.raises(RuntimeError, match=r"same device.*accel:0 and cpu"):
        torch.add(x, x, out=out)
    assert torch.equal(out, torch.full((3,), 7.0))  # out untouched and valid


def assert_cpu_tensor_intact(tensor, shape, data_ptr):
    # Still a CPU tensor over its own CPU memory: readable, printable.
    assert tensor.device.type == "cpu" and tensor.untyped_storage().device.type == "cpu"
    assert tensor.shape == shape and tensor.untyped_storage().data_ptr() == data_ptr
    repr(tensor)


@pytest.mark.parametrize(
    "call, dtype",
    [
        (lambda a, out: torch.add(a, a, out=out), torch.float32),
        (lambda a, out: torch.sin(a, out=out), torch.float32),
        (lambda a, out: torch.nonzero(a, out=out), torch.int64),
        (lambda a, out: torch.sum(a, 0, out=out), torch.float32),
        (lambda a, out: torch.mm(a.view(2, 2), a.view(2, 2), out=out), torch.float32),
    ],
    ids=["add", "sin", "nonzero", "sum", "mm"],
)
@pytest.mark.parametrize("shape", [(), (4,), (0,)], ids=["0-dim", "1-dim", "empty"])
def test_out_on_the_cpu_is_an_error_whatever_its_shape(call, dtype, shape):
    # cuda refuses every out= tensor on another device; a CPU out= must never
    # end up over accel memory (resized by the target kernel into it).
    a = torch.arange(4.0, device="accel")
    out = torch.zeros(shape, dtype=dtype)
    data_ptr = out.untyped_storage().data_ptr()
    with pytest.raises(RuntimeError, match=r"same device.*accel:0 and cpu"):
        call(a, out)
    assert_cpu_tensor_intact(out, torch.Size(shape), data_ptr)


def test_in_place_on_a_cpu_tensor_with_accel_operands_is_an_error():
    a = torch.ones(4, device="accel")
    for cpu in (torch.zeros(4), torch.zeros(())):
        data_ptr = cpu.untyped_storage().data_ptr()
        with pytest.raises(RuntimeError, match=r"same device.*accel:0 and cpu"):
            cpu.add_(a if cpu.dim() else a[0])  # add_.Tensor: an unboxed kernel
        with pytest.raises(RuntimeError, match=r"same device.*accel:0 and cpu"):
            cpu.atan2_(a if cpu.dim() else a[0])  # the boxed fallback
        assert_cpu_tensor_intact(cpu, cpu.shape, data_ptr)
        assert (cpu == 0).all()


def test_index_put_takes_cpu_indices_and_cpu_scalars_but_not_cpu_values(target):
    # CUDA's index kernels move CPU index tensors, and a 0-dim CPU value, to the
    # device; a CPU value tensor of any other shape is refused.
    x = torch.zeros(4, device="accel")
    x[torch.tensor([0, 2])] = torch.tensor(3.0)
    torch.index_put_(x, (torch.tensor([1]),), torch.tensor(5.0), accumulate=True)
    assert x.cpu().tolist() == [3.0, 5.0, 3.0, 0.0]
    with pytest.raises(RuntimeError, match=r"same device.*accel:0 and cpu.*_index_put_impl_"):
        x[torch.tensor([0, 1])] = torch.tensor([1.0, 2.0])  # the unboxed _index_put_impl_
    with pytest.raises(RuntimeError, match=r"same device.*accel:0 and cpu.*index_put"):
        torch.index_put(x, (torch.tensor([0, 1]),), torch.tensor([1.0, 2.0]))  # the boxed fallback
    with pytest.raises(RuntimeError, match=r"same device.*accel:0 and cpu"):
        x.index_select(0, torch.tensor([0, 1]))  # only the index family takes CPU indices
    assert x.cpu().tolist() == [3.0, 5.0, 3.0, 0.0]


def test_copies_between_accel_and_cpu_take_any_shape(target):
    # copy_ moves data between devices (as on cuda): 0-dim or not, either way,
    # and the CPU side keeps its own memory.
    a = torch.arange(4.0, device="accel")
    for cpu in (torch.zeros(4), torch.zeros(())):
        data_ptr = cpu.untyped_storage().data_ptr()
        cpu.copy_(a if cpu.dim() else a[3])
        assert_cpu_tensor_intact(cpu, cpu.shape, data_ptr)
        b = torch.zeros(cpu.shape, device="accel")
        b.copy_(cpu + 1)
        assert torch.equal(b.cpu(), cpu + 1)
    assert torch.zeros(4).copy_(a).tolist() == [0.0, 1.0, 2.0, 3.0]


def test_out_on_another_accel_device_is_an_error(two_devices):
    x = torch.randn(3, device="accel:0")
    out = torch.empty(3, device="accel:1")
    with pytest.raises(RuntimeError, match=r"accel:0 and accel:1"):
        torch.mul(x, 2, out=out)


def test_target_errors_surface_as_python_exceptions():
    x = torch.randn(2, 3, device="accel")
    with pytest.raises(RuntimeError, match="shapes cannot be multiplied"):
        x @ x
    with pytest.raises(IndexError):
        x[5]
    # The device still works afterwards.
    assert (x @ x.t()).shape == (2, 2)


# --- scaled_dot_product_attention: the target's backend, fused where the target's is ---
# (csrc/aten/AttentionBackendChoice.cpp, csrc/aten/ScaledDotProductAttention.cpp).
# On a GPU these run in the 'sdpa' section (-k attention).


def attention_operators(fn) -> list[str]:
    """The ATen operators named for attention that ``fn()`` runs (the backend
    SDPA took and its kernels), as the profiler records them."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as profile:
        fn()
    return sorted({e.name for e in profile.events() if e.name.startswith("aten::") and "attention" in e.name})


def attention_inputs(target, dtype, head_dim, seed=0):
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(2, 3, 24, head_dim, generator=g).to(dtype) for _ in range(3))
    return [t.to(target) for t in (q, k, v)], [t.to("accel") for t in (q, k, v)]


@pytest.mark.parametrize("head_dim", [16, 12], ids=lambda d: f"head_dim{d}")
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
def test_attention_runs_the_targets_fused_kernels(dtype, head_dim, target):
    # The backend the target picks runs for accel, forward and backward: on
    # cuda flash attention for float16 (head dimension padded to 8 as for
    # cuda: 12), never the math decomposition there.
    reference, accel = attention_inputs(target, dtype, head_dim)
    assert torch._fused_sdp_choice(*accel, is_causal=True) == torch._fused_sdp_choice(*reference, is_causal=True)
    sdpa = torch.nn.functional.scaled_dot_product_attention
    expected_operators = attention_operators(lambda: sdpa(*reference, is_causal=True))
    operators = attention_operators(lambda: sdpa(*accel, is_causal=True))
    assert operators == expected_operators
    if target == "cuda" and dtype == torch.float16:
        assert "aten::_scaled_dot_product_attention_math" not in operators
        assert "aten::_scaled_dot_product_flash_attention" in operators or torch.cuda.get_device_capability()[0] < 8
    assert_bitwise(sdpa(*accel, is_causal=True), sdpa(*reference, is_causal=True), target)

    accel = [t.requires_grad_() for t in accel]
    out = sdpa(*accel, is_causal=True)
    out.backward(torch.ones_like(out))
    if target != "cuda":
        reference = [t.requires_grad_() for t in reference]
        expected = sdpa(*reference, is_causal=True)
        expected.backward(torch.ones_like(expected))
        for a, t in zip(accel, reference):
            assert_bitwise(a.grad, t.grad, target)
        return
    # A CUDA backward cannot run in this process (docs/known-limitations.md):
    # the reference is the math definition in float64 on the CPU.
    reference64 = [t.detach().cpu().double().requires_grad_() for t in accel]
    expected = sdpa(*reference64, is_causal=True)
    expected.backward(torch.ones_like(expected))
    tolerance = 1e-5 if dtype == torch.float32 else 2e-2
    torch.testing.assert_close(out.detach().cpu().double(), expected.detach(), atol=tolerance, rtol=tolerance)
    for a, t in zip(accel, reference64):
        torch.testing.assert_close(a.grad.cpu().double(), t.grad, atol=tolerance, rtol=tolerance)


def test_attention_with_a_mask_runs_the_targets_backend(target):
    # An attention mask keeps cuda's flash attention out: cuda takes
    # memory-efficient attention for float16 (the fused kernel that takes
    # masks), and accel must take it too and give its bits.
    dtype = torch.float16 if target == "cuda" else torch.float32
    reference, accel = attention_inputs(target, dtype, head_dim=16, seed=3)
    g = torch.Generator().manual_seed(4)
    mask = torch.randn(24, 24, generator=g).to(dtype)  # additive, broadcast over batch and heads
    sdpa = torch.nn.functional.scaled_dot_product_attention
    expected_operators = attention_operators(lambda: sdpa(*reference, attn_mask=mask.to(target)))
    operators = attention_operators(lambda: sdpa(*accel, attn_mask=mask.to("accel")))
    assert operators == expected_operators
    if target == "cuda":
        assert "aten::_scaled_dot_product_efficient_attention" in operators
    assert_bitwise(sdpa(*accel, attn_mask=mask.to("accel")), sdpa(*reference, attn_mask=mask.to(target)), target)


BACKENDS = [
    torch.nn.attention.SDPBackend.FLASH_ATTENTION,
    torch.nn.attention.SDPBackend.EFFICIENT_ATTENTION,
    torch.nn.attention.SDPBackend.CUDNN_ATTENTION,
    torch.nn.attention.SDPBackend.MATH,
]


@pytest.mark.parametrize("backend", BACKENDS, ids=lambda b: b.name)
def test_attention_honours_sdpa_kernel(backend, target):
    # torch.nn.attention.sdpa_kernel restricts accel as it restricts the
    # target: the same backend runs, or both refuse.
    dtype = torch.float16 if target == "cuda" else torch.float32
    reference, accel = attention_inputs(target, dtype, head_dim=16)
    sdpa = torch.nn.functional.scaled_dot_product_attention
    outcomes = []
    for q, k, v in (reference, accel):
        with torch.nn.attention.sdpa_kernel([backend]):
            try:
                outcomes.append(attention_operators(lambda: sdpa(q, k, v)))
            except RuntimeError as e:
                outcomes.append(type(e))
    assert outcomes[1] == outcomes[0]


def test_attention_follows_a_mocked_target_choice(target):
    # Whatever the target's choice says, accel takes it: here the target's
    # choice operator is replaced (for the target's dispatch key) by one that
    # always answers math, which accel then runs.
    proc = run_python(
        f"""
        import torch, torch_accel
        from torch.nn.attention import SDPBackend
        lib = torch.library.Library("aten", "IMPL")
        lib.impl("_fused_sdp_choice", lambda *args, **kwargs: int(SDPBackend.MATH), "{target.upper()}")
        q = torch.randn(1, 2, 8, 16, device="{target}")
        sdpa = torch.nn.functional.scaled_dot_product_attention
        with torch.profiler.profile() as p:
            out = sdpa(q.to("accel"), q.to("accel"), q.to("accel"))
        names = {{e.name for e in p.events()}}
        # (the target's own composite asks its stub directly, not the replaced operator)
        expected = torch.ops.aten._scaled_dot_product_attention_math(q, q, q)[0]
        print("aten::_scaled_dot_product_attention_math" in names, torch.equal(out.to("{target}"), expected))
        """
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split()[-2:] == ["True", "True"]


# The CUDA runtime's flash branch, traced without a GPU: a stub NVML shows one
# GPU, CUDA's choice is replaced by one that answers flash attention, and
# make_fx records what SDPA runs for fake accel tensors (forward: autograd
# would ask CUDA for streams).
_MOCKED_CUDA_FLASH = """
import json, torch, torch_accel
from torch.nn.attention import SDPBackend
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.proxy_tensor import make_fx
lib = torch.library.Library("aten", "IMPL")
lib.impl("_fused_sdp_choice", lambda *args, **kwargs: int(SDPBackend.FLASH_ATTENTION), "CUDA")
sdpa = torch.nn.functional.scaled_dot_product_attention
graphs = {}
for head_dim in (12, 16):
    with FakeTensorMode():
        q = torch.empty(2, 3, 24, head_dim, device="accel:0", dtype=torch.float16)
        gm = make_fx(lambda q, k, v: sdpa(q, k, v, is_causal=True))(q, q, q)
    graphs[head_dim] = [
        [str(n.target), [a for a in n.args if not isinstance(a, torch.fx.Node)], n.kwargs.get("scale")]
        for n in gm.graph.nodes if n.op == "call_function" and "getitem" not in str(n.target)
    ]
print(json.dumps([torch_accel.runtime(), graphs]))
"""


@pytest.mark.skipif(not HAS_CUDA_RUNTIME, reason=NO_CUDA_RUNTIME)
def test_attention_on_a_mocked_cuda_target_takes_cudas_flash_branch(stub_libraries):
    import json

    from test_cuda_visible_devices import UUIDS

    env = {
        "LD_LIBRARY_PATH": os.pathsep.join(filter(None, [stub_libraries, os.environ.get("LD_LIBRARY_PATH")])),
        "STUB_NVML_UUIDS": UUIDS[0],
        "CUDA_VISIBLE_DEVICES": "0",
        "TORCH_ACCEL_RUNTIME": "cuda",
    }
    proc = run_python(_MOCKED_CUDA_FLASH, env=env)
    assert proc.returncode == 0, proc.stderr
    runtime, graphs = json.loads(proc.stdout.strip().splitlines()[-1])
    assert runtime == "cuda"
    flash = "aten._scaled_dot_product_flash_attention.default"
    # As ATen's composite for cuda: the head dimension padded to 8, the scale
    # of the unpadded one, the padding sliced off; never the CPU operator.
    pad = ["aten.constant_pad_nd.default", [[0, 4], 0.0], None]
    assert graphs["12"] == [pad, pad, pad, [flash, [0.0, True], 1 / math.sqrt(12)], ["aten.slice.Tensor", [-1, 0, 12], None]]
    assert graphs["16"] == [[flash, [0.0, True], 1 / math.sqrt(16)]]


def test_ops_with_composite_and_target_kernels_run_the_targets(target):
    # mish's backward has a target kernel and a decomposition; accel runs the
    # kernel. The reference calls that kernel directly: a cuda backward cannot
    # run in a process with accel (docs/known-limitations.md).
    x = torch.randn(64, device=target)
    xa = x.to("accel").requires_grad_()
    torch.nn.functional.mish(xa).sum().backward()
    assert_bitwise(xa.grad, torch.ops.aten.mish_backward(torch.ones_like(x), x), target)
    values, indices = torch.empty(0, device="accel"), torch.empty(0, dtype=torch.long, device="accel")
    m = torch.tensor([[1.0, 2, 2], [3, 3, 1]])
    torch.mode(m.to("accel"), 1, out=(values, indices))  # mode.values' composite names its devices
    assert_bitwise((values, indices), torch.mode(m.to(target), 1), target)


def test_zero_tensor_gradients_are_accel_zero_tensors(two_devices, target):
    zeros = torch._efficientzerotensor((2, 3), device="accel:1")
    assert zeros.device == torch.device("accel:1") and zeros._is_zerotensor()
    assert torch.equal((zeros + torch.ones(2, 3, device="accel:1")).cpu(), torch.ones(2, 3))
    # sgn's backward returns one for real inputs (it used to crash the fallback).
    x = torch.randn(5, device="accel", requires_grad=True)
    (grad,) = torch.autograd.grad(torch.sgn(x).sum(), x)
    assert grad.device.type == "accel" and torch.equal(grad.cpu(), torch.zeros(5))


def test_in_place_addr_rejects_a_self_that_is_not_a_matrix(target):
    # As on the target: addr_'s kernel checks self only when called in place.
    for device in (target, "accel"):
        with pytest.raises(RuntimeError, match="2D tensor expected, got 0D tensor for input"):
            torch.tensor(1.0, device=device).addr_(torch.ones(2, device=device), torch.ones(3, device=device))
    m = torch.randn(2, 3, device=target)
    expected = m.clone().addr_(torch.arange(2.0, device=target), torch.arange(3.0, device=target))
    result = m.to("accel").addr_(torch.arange(2.0, device="accel"), torch.arange(3.0, device="accel"))
    assert_bitwise(result, expected, target)


# Composite kernels that call a DispatchStub by their tensors' device type
# (PyTorch 2.11, found by tools/composite_stub_calls.py: see
# docs/alias-fallback.md, "DispatchStubs"). Each used to reach the stub's empty PrivateUse1 slot
# ("DispatchStub: missing kernel for accel") or a CPU-only kernel; each runs
# the target's kernels now, bitwise as on the target.
def _ldexp_inputs(device, exponent_dtype):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(4, 5, generator=g).to(device)
    e = torch.randint(-40, 40, (4, 5), generator=g).to(exponent_dtype).to(device)
    return x, e


def _sparse_indices(device, coalesced=True):
    rows = [[0, 1, 1], [2, 0, 3]] if coalesced else [[1, 0, 1], [0, 2, 3]]
    return torch.tensor(rows, device=device), torch.tensor([1.0, 2.0, 3.0], device=device)


STUB_PATHS = {
    # ldexp with an integer exponent: ldexp_stub (ldexp.Tensor, ldexp.out; ldexp_ calls ldexp.out).
    "ldexp_int64": lambda d: torch.ldexp(*_ldexp_inputs(d, torch.int64)),
    "ldexp_int32": lambda d: torch.ldexp(*_ldexp_inputs(d, torch.int32)),
    "ldexp_out": lambda d: torch.ldexp(*_ldexp_inputs(d, torch.int64), out=torch.empty(0, device=d)),
    "ldexp_inplace": lambda d: (lambda x, e: x.ldexp_(e))(*_ldexp_inputs(d, torch.int16)),
    # kaiser_window's three overloads: kaiser_window_stub.
    "kaiser_window": lambda d: torch.kaiser_window(11, device=d),
    "kaiser_window_periodic": lambda d: torch.kaiser_window(11, False, dtype=torch.float64, device=d),
    "kaiser_window_beta": lambda d: torch.kaiser_window(11, True, 7.5, device=d),
    "kaiser_window_out": lambda d: torch.ops.aten.kaiser_window.out(6, out=torch.empty(0, device=d)),
    # _batch_norm_no_update calls batch_norm_cpu (batch_norm_cpu_collect_stats_stub).
    "batch_norm_no_update": lambda d: torch.ops.aten._batch_norm_no_update(
        torch.arange(20.0, device=d).view(4, 5),
        torch.full((5,), 2.0, device=d),
        torch.ones(5, device=d),
        torch.arange(5.0, device=d),
        torch.arange(1.0, 6.0, device=d),
        0.1,
        1e-5,
    )[0],
    # Indices said to be coalesced are checked with flatten_indices_stub
    # (sparse_coo_tensor.indices, .indices_size, _validate_sparse_coo_tensor_args).
    "sparse_coo_tensor_coalesced": lambda d: torch.sparse_coo_tensor(
        *_sparse_indices(d), (2, 4), is_coalesced=True, check_invariants=True
    ).to_dense(),
    "sparse_coo_tensor_coalesced_no_size": lambda d: torch.sparse_coo_tensor(
        *_sparse_indices(d), is_coalesced=True, check_invariants=True
    ).to_dense(),
    "validate_sparse_coo_tensor_args": lambda d: torch._validate_sparse_coo_tensor_args(*_sparse_indices(d), (2, 4), True),
    "validate_sparse_coo_tensor_args_uncoalesced": lambda d: torch._validate_sparse_coo_tensor_args(
        *_sparse_indices(d, coalesced=False), (2, 4), True
    ),
    # The two already routed before the analysis: conj_physical_ (conj_physical_stub), mode.values (mode_stub).
    "conj_physical_": lambda d: torch.complex(torch.arange(3.0, device=d), torch.ones(3, device=d)).conj_physical_(),
    "mode_values": lambda d: torch.mode(
        torch.tensor([[1.0, 2, 2], [3, 3, 1]], device=d),
        1,
        out=(torch.empty(0, device=d), torch.empty(0, dtype=torch.long, device=d)),
    ),
}


def _outcome(fn, device):
    try:
        return fn(device)
    except RuntimeError as error:
        return RuntimeError, str(error).split("\n")[0]


@pytest.mark.parametrize("path", sorted(STUB_PATHS))
def test_composites_calling_a_dispatch_stub_run_as_on_the_target(path, target):
    expected = _outcome(STUB_PATHS[path], target)
    result = _outcome(STUB_PATHS[path], "accel")
    if isinstance(expected, tuple) and expected and expected[0] is RuntimeError:
        assert result == expected
    elif expected is None:
        assert result is None
    else:
        assert_bitwise(result, expected, target)


def test_ldexp_with_an_integer_exponent_keeps_its_gradient(target):
    # Routed to the target's composite below autograd: ldexp's own derivative.
    x, e = _ldexp_inputs(target, torch.int64)
    xa = x.to("accel").requires_grad_()
    torch.ldexp(xa, e.to("accel")).sum().backward()
    reference = x.clone().requires_grad_()
    torch.ldexp(reference, e).sum().backward()
    assert_bitwise(xa.grad, reference.grad, target)


def test_sparse_coo_tensor_from_coalesced_indices_keeps_its_gradient(target):
    # sparse_coo_tensor decomposes above autograd on accel as on the target:
    # its stub got an accel kernel, the operator no accel kernel of its own.
    indices, values = _sparse_indices("accel")
    values.requires_grad_()
    sparse = torch.sparse_coo_tensor(indices, values, (2, 4), is_coalesced=True, check_invariants=True)
    (sparse.to_dense() * torch.arange(8.0, device="accel").view(2, 4)).sum().backward()
    assert values.grad.device.type == "accel" and values.grad.tolist() == [2.0, 4.0, 7.0]


def test_stub_composite_as_the_first_accel_call_of_a_process():
    # The composites are routed when accel initialises; a factory naming
    # accel as the process' first accel call initialises it before dispatch.
    result = run_python(
        """
        import torch
        w = torch.kaiser_window(11, device="accel")
        assert w.device.type == "accel"
        assert torch.equal(w.cpu(), torch.kaiser_window(11)), w
        print("ok")
        """
    )
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr


# An out= tensor that the operator resizes (resize_output) before its kernel
# fails keeps its new shape, and its storage the new size, on the target; so
# on accel. Each case: (out's dtype and size, the failing call).
FAILING_OUT_CALLS = {
    "remainder_by_zero": (torch.int64, 2, lambda d, out: torch.remainder(torch.tensor([1, 2, 3, 4], device=d), 0, out=out)),
    "div_floor_by_zero": (
        torch.int64,
        2,
        lambda d, out: torch.div(torch.arange(1, 7, device=d), 0, rounding_mode="floor", out=out),
    ),
    "mm_dtype_mismatch": (
        torch.float32,
        1,
        lambda d, out: torch.mm(torch.ones(3, 4, device=d), torch.ones(4, 5, dtype=torch.float64, device=d), out=out),
    ),
    "gather_index_out_of_range": (
        torch.float32,
        1,
        lambda d, out: torch.gather(torch.ones(3, 3, device=d), 1, torch.tensor([[0, 5], [1, 2]], device=d), out=out),
    ),
    "index_select_out_of_range": (
        torch.float32,
        1,
        lambda d, out: torch.index_select(torch.ones(3, 3, device=d), 0, torch.tensor([0, 7], device=d), out=out),
    ),
    "mean_into_int": (torch.int64, 1, lambda d, out: torch.mean(torch.ones(3, 4, device=d), 0, out=out)),
    # values resized, then the indices' dtype refused
    "sort_indices_dtype": (
        torch.float32,
        1,
        lambda d, out: torch.sort(
            torch.tensor([[3.0, 1, 2]], device=d), out=(out, torch.zeros(1, dtype=torch.int32, device=d))
        ),
    ),
    "topk_indices_dtype": (
        torch.float32,
        1,
        lambda d, out: torch.topk(
            torch.tensor([3.0, 1, 2, 5], device=d), 2, out=(out, torch.zeros(1, dtype=torch.int32, device=d))
        ),
    ),
    "max_indices_dtype": (
        torch.float32,
        1,
        lambda d, out: torch.max(
            torch.tensor([[3.0, 1], [2, 5]], device=d), 1, out=(out, torch.zeros(1, dtype=torch.int32, device=d))
        ),
    ),
}


def _after_failing_out_call(case, device):
    dtype, size, call = FAILING_OUT_CALLS[case]
    base = torch.zeros(size + 1, dtype=dtype, device=device)
    out = base[1:]  # a view: the base shares the storage the kernel grows
    try:
        call(device, out)
        error = None
    except (RuntimeError, IndexError) as e:
        error = type(e)
    storage = out.untyped_storage()
    return {
        "error": error,
        "shape": tuple(out.shape),
        "stride": out.stride(),
        "storage_offset": out.storage_offset(),
        "storage_nbytes": storage.nbytes(),
        "base_shares_storage": base.untyped_storage().data_ptr() == storage.data_ptr(),
        "base_nbytes": base.untyped_storage().nbytes(),
    }


@pytest.mark.filterwarnings("ignore:An output with one or more elements was resized")
@pytest.mark.parametrize("case", sorted(FAILING_OUT_CALLS))
def test_out_resized_before_a_kernel_error_keeps_its_new_shape(case, target):
    expected = _after_failing_out_call(case, target)
    assert expected["error"] is not None
    assert _after_failing_out_call(case, "accel") == expected


def test_recycled_target_views_hold_no_stale_sizes(target):
    # ATen's linalg_vector_norm reads sizes()[0] of a 0-dim tensor (past its
    # dimensions); a recycled view must read there what a new one would (a
    # view that stood for a tensor whose first dimension is 1 used to read 1
    # and take another path: 0.009804928675293922 on accel, ...27743971348 on
    # the target).
    value = 0.009804928675293922
    torch.ones(1, 3, device="accel") * 2
    result = torch.tensor(value, device="accel").norm(3, 0)
    assert_bitwise(result, torch.tensor(value, device=target).norm(3, 0), target)


def test_target_views_hold_the_slots_past_dim_of_their_accel_tensor(target):
    # A tensor resized from three dimensions to none keeps a 1 in its first
    # size slot, and linalg_vector_norm, reading sizes()[0] of a 0-dim tensor,
    # takes the path of a first dimension 1: on the target's own tensor, and
    # on an accel tensor's target view, which holds the accel tensor's slots
    # (found by the fuzzer: seed 8531, an out= that resized).
    def norm_after_losing_dims(device):
        x = torch.zeros(1, 1, 1, device=device)
        x.resize_(())
        x.fill_(0.009804928675293922)
        return x.norm(3, 0)

    fresh = torch.tensor(0.009804928675293922, device=target).norm(3, 0)
    expected = norm_after_losing_dims(target)
    assert not torch.equal(expected, fresh)  # the two paths differ: the test can fail
    assert_bitwise(norm_after_losing_dims("accel"), expected, target)
    # And a tensor that never had dimensions still takes a new tensor's path.
    assert_bitwise(torch.tensor(0.009804928675293922, device="accel").norm(3, 0), fresh, target)


def _target_view_states(tensor):
    recycled, state = torch_accel._C._target_view_state(tensor, True)
    _, new = torch_accel._C._target_view_state(tensor, False)
    return recycled, state, new


# What the operators before a target view's reuse leave in it: fewer
# dimensions (slots past dim() keep the old sizes and strides), six or more
# (sizes and strides out of line), 0-dim ones, other dtypes, views made in or
# out of inference mode, out= arguments a kernel resized in place, and
# version counters a kernel bumped.
def _leave_views_of_many_dims():
    torch.ones(1, 2, 3, 4, 5, device="accel").sum(0)
    torch.ones(2, 1, 1, 3, 1, 2, device="accel").transpose(0, 5) * 3


def _leave_views_of_few_dims():
    torch.ones(3, 1, device="accel") + torch.tensor(2.0, device="accel")


def _leave_views_of_another_dtype():
    torch.arange(6, dtype=torch.int16, device="accel").view(2, 3).t().sum()


def _leave_views_made_in_inference_mode():
    with torch.inference_mode():
        torch.ones(2, 3, device="accel") * 2


def _leave_views_a_kernel_resized():
    out = torch.empty(6, device="accel")[:0]  # room for the resized out= in its storage
    torch.add(torch.ones(2, 2, device="accel"), 1, out=out)


def _leave_views_a_kernel_shrank():
    # 4 dimensions, resized to none. The input is a cpu scalar, so the view of
    # out= is the call's only one and the next one reused.
    out = torch.empty(1, 2, 1, 6, device="accel")[..., :0]
    torch.add(torch.tensor(1.0), 1, out=out)


def _leave_views_whose_version_a_kernel_bumped():
    # The target's foreach kernels write through the dispatcher, which bumps
    # their arguments' versions.
    params = [torch.ones(3, device="accel"), torch.ones(2, 2, device="accel")]
    torch._foreach_add_(params, [torch.ones(3, device="accel"), torch.ones(2, 2, device="accel")])


PREVIOUS_OPERATORS = {
    "many_dims": _leave_views_of_many_dims,
    "few_dims": _leave_views_of_few_dims,
    "another_dtype": _leave_views_of_another_dtype,
    "inference_mode": _leave_views_made_in_inference_mode,
    "resized_by_a_kernel": _leave_views_a_kernel_resized,
    "shrunk_by_a_kernel": _leave_views_a_kernel_shrank,
    "version_bumped_by_a_kernel": _leave_views_whose_version_a_kernel_bumped,
}

VIEWED_TENSORS = {
    "0-dim": lambda: torch.tensor(1.5, device="accel"),
    "1-dim": lambda: torch.arange(4.0, device="accel"),
    "transposed": lambda: torch.ones(3, 2, device="accel").t(),
    "5-dim expanded": lambda: torch.ones(1, 2, 1, 3, 1, device="accel").expand(2, 2, 2, 3, 2),
    "7-dim": lambda: torch.ones(1, 1, 2, 1, 1, 1, 2, dtype=torch.float64, device="accel"),
    "offset": lambda: torch.arange(10, device="accel")[3:7],
    "channels_last": lambda: torch.ones(2, 3, 4, 5, device="accel").to(memory_format=torch.channels_last),
    "empty": lambda: torch.ones(0, 3, device="accel"),
}


@pytest.mark.parametrize("inference", [False, True], ids=["normal", "inference_mode"])
@pytest.mark.parametrize("previous", sorted(PREVIOUS_OPERATORS))
def test_recycled_target_views_are_indistinguishable_from_new_ones(previous, inference):
    # Every property a kernel can observe of the target view standing for an
    # accel tensor (TensorImpl's and StorageImpl's, the inline slots past
    # dim() included) is the same whether its TensorImpl is new or recycled.
    tensors = {name: make() for name, make in VIEWED_TENSORS.items()}
    recycled_any = False
    for name, tensor in tensors.items():
        PREVIOUS_OPERATORS[previous]()
        if inference:
            with torch.inference_mode():
                recycled, state, new = _target_view_states(tensor)
        else:
            recycled, state, new = _target_view_states(tensor)
        recycled_any |= recycled
        differences = {key: (state[key], new[key]) for key in new if state[key] != new[key]}
        assert not differences, (name, differences)
    assert recycled_any

