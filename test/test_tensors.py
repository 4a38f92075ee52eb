"""accel tensors with the minimal kernel set: factories, copies, views, resize, set_, item, record_stream.

Every copy is checked bitwise against the source, or against the same
conversion done by the target device's own kernels.
"""

import pytest
import torch

import torch_accel

DTYPES = [
    torch.float32,
    torch.float64,
    torch.float16,
    torch.bfloat16,
    torch.int8,
    torch.uint8,
    torch.int16,
    torch.int32,
    torch.int64,
    torch.bool,
    torch.complex64,
]


def sample(dtype: torch.dtype, shape=(7, 5)) -> torch.Tensor:
    g = torch.Generator().manual_seed(0)
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=g).bool()
    if dtype.is_floating_point or dtype.is_complex:
        return (torch.randn(shape, generator=g, dtype=torch.float64) * 100).to(dtype)
    info = torch.iinfo(dtype)
    return torch.randint(max(info.min, -1000), min(info.max, 1000), shape, generator=g, dtype=torch.int64).to(dtype)


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(
        a.contiguous().view(torch.uint8), b.contiguous().view(torch.uint8)
    )


def test_empty_and_empty_strided(two_devices):
    x = torch.empty(3, 4, device="accel")
    assert x.device == torch.device("accel:0") and x.shape == (3, 4) and x.is_contiguous()
    y = torch.empty_strided((2, 3), (1, 2), dtype=torch.float16, device="accel:1")
    assert y.device == torch.device("accel:1") and y.stride() == (1, 2) and y.dtype == torch.float16
    z = torch.empty(2, 3, 4, 5, device="accel", memory_format=torch.channels_last)
    assert z.is_contiguous(memory_format=torch.channels_last)
    assert torch.empty(0, device="accel").numel() == 0


def test_tensor_attributes_and_methods():
    x = torch.empty(2, device="accel")
    assert x.is_accel
    assert not torch.empty(2).is_accel
    assert x.get_device() == 0
    cpu = torch.arange(4.0)
    moved = cpu.accel()
    assert moved.is_accel and torch.equal(moved.cpu(), cpu)
    assert x.untyped_storage().is_accel
    assert x.untyped_storage().device == torch.device("accel:0")


def test_module_accel():
    m = torch.nn.Linear(3, 2)
    weight = m.weight.detach().clone()
    m.accel()
    assert m.weight.device == torch.device("accel:0")
    assert torch.equal(m.weight.cpu(), weight)


def test_module_to_accel_keeps_its_parameter_objects(target):
    # As for cuda: Module.to swaps the tensors' contents in place (set_data), so
    # an optimizer built before the move steps the moved parameters, and tied
    # weights stay tied.
    model = torch.nn.Sequential(torch.nn.Embedding(5, 4), torch.nn.Linear(4, 5, bias=False))
    model[1].weight = model[0].weight
    parameters = list(model.parameters())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    model.to("accel")
    assert [p is q for p, q in zip(model.parameters(), parameters)] == [True]
    assert model[1].weight is model[0].weight and model[0].weight.device.type == "accel"
    before = model[0].weight.detach().clone()
    model(torch.tensor([1, 2], device="accel")).sum().backward()
    optimizer.step()
    assert not torch.equal(model[0].weight.detach(), before)
    model.to(target)
    assert model[0].weight is parameters[0] and parameters[0].device.type == target


def test_tensor_data_can_be_swapped_between_accel_and_the_cpu():
    parameter = torch.nn.Parameter(torch.zeros(3))
    parameter.data = torch.arange(4.0, device="accel")
    assert parameter.device.type == "accel" and parameter.tolist() == [0.0, 1.0, 2.0, 3.0]
    assert torch._has_compatible_shallow_copy_type(parameter, torch.zeros(1))
    # Layouts stay incompatible, as between cpu and cuda.
    sparse = torch.sparse_coo_tensor([[0]], [1.0], (2,))
    assert not torch._has_compatible_shallow_copy_type(parameter, sparse)
    with pytest.raises(RuntimeError, match="incompatible tensor type"):
        parameter.data = sparse


def test_lazy_module_moved_to_accel_materializes_there():
    module = torch.nn.LazyLinear(3).to("accel")
    assert isinstance(module.weight, torch.nn.parameter.UninitializedParameter)
    out = module(torch.randn(2, 4, device="accel"))
    assert out.shape == (2, 3) and module.weight.shape == (3, 4) and module.weight.device.type == "accel"
    assert type(module.weight) is torch.nn.Parameter


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_roundtrip_bitwise(dtype):
    src = sample(dtype)
    on_accel = src.to("accel")
    assert on_accel.device.type == "accel" and on_accel.dtype == dtype
    assert same_bits(on_accel.cpu(), src)


def test_roundtrip_to_second_device_and_back(two_devices):
    src = sample(torch.float32)
    a0 = src.to("accel:0")
    a1 = a0.to("accel:1")
    assert a1.device == torch.device("accel:1")
    assert same_bits(a1.cpu(), src)
    back = a1.to("accel:0")
    assert same_bits(back.cpu(), src)
    assert torch_accel.current_device() == 0


@pytest.mark.parametrize(
    "src_dtype, dst_dtype",
    [
        (torch.float32, torch.float16),
        (torch.float32, torch.bfloat16),
        (torch.float64, torch.int32),
        (torch.int64, torch.float32),
        (torch.float32, torch.bool),
        (torch.complex64, torch.complex128),
        (torch.uint8, torch.float64),
    ],
    ids=str,
)
def test_dtype_conversion_matches_target(target, src_dtype, dst_dtype):
    src = sample(src_dtype)
    expected = src.to(target).to(dst_dtype).cpu()
    # cpu -> accel with conversion, accel -> accel with conversion, accel -> cpu with conversion
    assert same_bits(src.to("accel", dtype=dst_dtype).cpu(), expected)
    assert same_bits(src.to("accel").to(dst_dtype).cpu(), expected)
    assert same_bits(src.to("accel").to("cpu", dtype=dst_dtype), expected)


def test_copy_non_contiguous_and_broadcast():
    src = sample(torch.float32, (6, 8))
    dst = torch.empty(8, 6, device="accel")
    dst.copy_(src.t())
    assert same_bits(dst.cpu(), src.t().contiguous())
    row = torch.arange(6.0)
    dst2 = torch.empty(4, 6, device="accel")
    dst2.copy_(row)
    assert torch.equal(dst2.cpu(), row.expand(4, 6))
    strided = src.to("accel")[:, ::2]
    assert same_bits(strided.cpu(), src[:, ::2].contiguous())


# Contiguous copies of one dtype between accel and cpu, or between accel
# tensors, are copies of bytes on the host runtime (Copy.cpp); every other
# copy (strided, converting, broadcasting, overlapping) is the target's
# copy_. Both must give what the target gives, bit for bit, with the same
# version counter bumps and the same autograd behaviour.
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_contiguous_copies_match_strided_ones_and_the_target(dtype):
    src = sample(dtype, (6, 8))
    on_accel = src.to("accel")  # contiguous cpu -> accel
    assert same_bits(on_accel.cpu(), src)  # contiguous accel -> cpu
    strided = torch.empty(8, 6, dtype=dtype, device="accel").t()
    strided.copy_(src)  # cpu -> strided accel: the target's copy_
    assert same_bits(strided.cpu(), src)
    dst = torch.empty(6, 8, dtype=dtype, device="accel")
    dst.copy_(strided)  # strided accel -> accel
    again = torch.empty_like(dst)
    again.copy_(dst)  # contiguous accel -> accel
    assert same_bits(again.cpu(), src)
    values = src.flatten()[:5].tolist()
    assert same_bits(torch.tensor(values, dtype=dtype, device="accel").cpu(), torch.tensor(values, dtype=dtype))


def test_contiguous_copies_bump_versions_and_keep_autograd_as_the_target(target):
    def run(device):
        src = torch.arange(6.0).view(2, 3).to(device).requires_grad_()
        dst = torch.zeros(2, 3, device=device)
        before = dst._version
        dst.copy_(src * 2)
        dst.copy_(dst + 1)
        dst.sum().backward()
        return dst.detach().cpu(), dst._version - before, src.grad.cpu()

    (out, bumps, grad), (expected_out, expected_bumps, expected_grad) = run("accel"), run(target)
    assert same_bits(out, expected_out) and bumps == expected_bumps and same_bits(grad, expected_grad)


def test_overlapping_and_lazy_bit_copies_behave_as_on_the_target(target):
    for device in ("accel", target):
        x = torch.arange(8.0, device=device)
        with pytest.raises(RuntimeError, match="single memory location"):
            x[1:].copy_(x[:-1])  # partial overlap: ATen's error
        x[:4].copy_(x[4:])  # one storage, disjoint bytes
        assert torch.equal(x.cpu(), torch.tensor([4.0, 5, 6, 7, 4, 5, 6, 7]))
    z = torch.tensor([1 + 2j, 3 - 4j])
    conj = torch.empty(2, dtype=torch.complex64, device="accel")
    conj.copy_(z.to("accel").conj())  # the conjugate bit is resolved by the copy
    assert same_bits(conj.cpu(), z.conj().resolve_conj())
    back = torch.empty(2, dtype=torch.complex64)
    back.copy_(z.to("accel").conj())
    assert same_bits(back, z.conj().resolve_conj())


def test_copies_of_bools_viewed_from_other_bytes_match_the_target(target):
    # A bool tensor viewed from other bytes holds bytes other than 0 and 1;
    # the CPU's copy_ writes 0 or 1 for each, so accel's small contiguous
    # copies (bytes copied as they are, Copy.cpp) must not take bools on the
    # host runtime (found by the fuzzer: seed 145291, clone of such a view).
    raw = torch.tensor([0.37, -2.5e-3, float("nan"), 0.0])
    for to in ("accel", target):
        bools = raw.to(to).view(torch.bool)
        expected = raw.view(torch.bool).clone()  # the CPU's copy
        assert same_bits(bools.clone().cpu().view(torch.uint8), expected.view(torch.uint8))
        dst = torch.empty(16, dtype=torch.bool, device=to)
        dst.copy_(raw.view(torch.bool))  # cpu -> accel (or the target)
        assert same_bits(dst.cpu().view(torch.uint8), expected.view(torch.uint8))
        back = torch.empty(16, dtype=torch.bool)
        back.copy_(bools)  # accel (or the target) -> cpu
        assert same_bits(back.view(torch.uint8), expected.view(torch.uint8))
    # The bytes differed before the copy: the test can fail.
    assert not same_bits(raw.view(torch.uint8), raw.view(torch.bool).clone().view(torch.uint8))


def test_copy_between_accel_tensors_and_devices(two_devices):
    src = sample(torch.int64)
    a = src.to("accel:0")
    b = torch.empty_like(src, device="accel:1")
    b.copy_(a)
    assert same_bits(b.cpu(), src)
    c = torch.empty_like(src, device="accel:0")
    c.copy_(b.t().t())
    assert same_bits(c.cpu(), src)
    assert torch_accel.current_device() == 0


def test_non_blocking_copies_on_current_stream():
    src = sample(torch.float32, (256, 256))
    s = torch_accel.Stream()
    with torch_accel.stream(s):
        dst = src.to("accel", non_blocking=True)
        back = torch.empty_like(src)
        back.copy_(dst, non_blocking=True)
    s.synchronize()
    assert same_bits(back, src)


def test_views_share_storage():
    x = torch.arange(12.0).to("accel")
    v = x.view(3, 4)
    r = x.reshape(4, 3)
    s = x.as_strided((2, 2), (3, 1), 1)
    t = v.t()
    for view in (v, r, s, t):
        assert view.device == x.device
        assert view.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()
    x.copy_(torch.zeros(12))
    assert torch.equal(s.cpu(), torch.zeros(2, 2))
    assert torch.equal(x[3:6].cpu(), torch.zeros(3))
    x2 = torch.arange(12.0).to("accel")
    assert torch.equal(x2.view(3, 4).t().cpu(), torch.arange(12.0).view(3, 4).t())
    assert torch.equal(x2.as_strided((2, 2), (3, 1), 1).cpu(), torch.arange(12.0).as_strided((2, 2), (3, 1), 1))


def test_detach_and_view_keep_data():
    src = sample(torch.float32)
    x = src.to("accel")
    assert same_bits(x.detach().cpu(), src)
    assert same_bits(x.view(-1).cpu(), src.view(-1))
    assert same_bits(x.unsqueeze(0).squeeze(0).cpu(), src)


def test_resize_grows_and_keeps_data():
    src = torch.arange(6.0)
    x = src.to("accel")
    x.resize_(4, 4)
    assert x.shape == (4, 4)
    assert torch.equal(x.view(-1)[:6].cpu(), src)
    assert x.untyped_storage().nbytes() >= 16 * 4
    x.resize_(2)
    assert torch.equal(x.cpu(), src[:2])
    y = torch.empty(2, 3, 4, 5, device="accel")
    y.resize_(2, 3, 4, 5, memory_format=torch.channels_last)
    assert y.is_contiguous(memory_format=torch.channels_last)


def test_resize_negative_size():
    x = torch.empty(2, device="accel")
    with pytest.raises(RuntimeError, match="negative dimension"):
        x.resize_(-1)


def test_set_variants(two_devices):
    src = torch.arange(10.0)
    base = src.to("accel")
    t = torch.empty(0, device="accel")
    t.set_(base.untyped_storage(), 2, (2, 3), (3, 1))
    assert torch.equal(t.cpu(), src.as_strided((2, 3), (3, 1), 2))
    u = torch.empty(0, device="accel")
    u.set_(base)
    assert torch.equal(u.cpu(), src) and u.untyped_storage().data_ptr() == base.untyped_storage().data_ptr()
    w = torch.empty(0, device="accel")
    w.set_(base.untyped_storage())
    assert torch.equal(w.cpu(), src)
    base.set_()
    assert base.numel() == 0 and base.device == torch.device("accel:0")
    other = torch.empty(3, device="accel:1")
    with pytest.raises(RuntimeError, match="devices must match"):
        other.set_(u.untyped_storage(), 0, (2,), (1,))


def _storage_of(values, device, dtype=torch.float32):
    return torch.tensor(values, dtype=dtype, device=device).untyped_storage()


# set_ cases, each run on accel and on the target: ATen's set_ keeps a tensor's
# strides when the sizes do not change and no strides are given (resize_impl
# returns early), and set_(storage) takes the whole elements a storage holds.
SET_CASES = {
    # An expanded tensor stays expanded (stride 0) over the new storage.
    "expanded_same_size": lambda d: torch.zeros(1, device=d).expand(4).set_(_storage_of([0.0, 1, 2, 3], d)),
    # The same sizes with an offset and no strides: the transposed strides stay.
    "transposed_same_size_offset": lambda d: torch.zeros(2, 3, device=d)
    .t()
    .set_(_storage_of(list(range(8)), d), 1, (3, 2)),
    # Other sizes: contiguous.
    "other_size": lambda d: torch.zeros(2, 3, device=d).t().set_(_storage_of(list(range(8)), d), 2, (2, 3)),
    # The same sizes with other strides: those strides.
    "same_size_other_strides": lambda d: torch.zeros(2, 3, device=d).set_(_storage_of(list(range(8)), d), 0, (2, 3), (1, 2)),
    # The same sizes and strides: only the storage and offset change.
    "same_size_same_strides": lambda d: torch.zeros(2, 3, device=d)
    .t()
    .set_(_storage_of(list(range(8)), d), 2, (3, 2), (1, 3)),
    # 10 bytes hold two float32 elements (the last two bytes are left out).
    "partial_element": lambda d: torch.zeros(3, device=d).set_(_storage_of(list(range(10)), d, torch.uint8)),
    "partial_element_int64": lambda d: torch.zeros(3, dtype=torch.int64, device=d).set_(
        _storage_of(list(range(4)), d, torch.int16)
    ),
    "smaller_than_an_element": lambda d: torch.zeros(3, device=d).set_(_storage_of([1, 2, 3], d, torch.uint8)),
    # Strided, the same size as the storage's element count: keeps stride 2
    # (past the storage's end, as on the target; the contents are not read).
    "strided_same_numel": lambda d: torch.zeros(8, device=d)[::2].set_(_storage_of([1.0, 2, 3, 4], d)),
    # The same sizes with an offset past the storage: ATen's bounds check.
    "same_size_offset_out_of_bounds": lambda d: torch.zeros(4, device=d).set_(_storage_of([1.0, 2, 3, 4], d), 2, (4,)),
    # set_() on a 0-element tensor with a stride keeps the stride.
    "empty_keeps_stride": lambda d: torch.zeros(0, 3, device=d)[:, 0].set_(),
    "empty_from_nonempty": lambda d: torch.zeros(2, 3, device=d).t().set_(),
    # A grown storage (other sizes): as resize_ grows it.
    "grows": lambda d: torch.zeros(0, device=d).set_(_storage_of([1.0, 2], d), 1, (3,)),
}


def _set_outcome(case, device):
    try:
        tensor = SET_CASES[case](device)
    except RuntimeError as error:
        return ("error", str(error).split("\n")[0])
    storage = tensor.untyped_storage()
    outcome = {
        "shape": tuple(tensor.shape),
        "stride": tensor.stride(),
        "storage_offset": tensor.storage_offset(),
        "storage_nbytes": storage.nbytes(),
        "contiguous": tensor.is_contiguous(),
    }
    needed = tensor.storage_offset() + sum((n - 1) * s for n, s in zip(tensor.shape, tensor.stride())) + 1
    if tensor.numel() > 0 and needed * tensor.element_size() <= storage.nbytes() and case != "grows":
        outcome["values"] = tensor.cpu().tolist()
    return outcome


@pytest.mark.parametrize("case", sorted(SET_CASES))
def test_set_matches_the_target(case, target):
    assert _set_outcome(case, "accel") == _set_outcome(case, target)


def test_set_keeps_the_strides_of_an_unchanged_shape():
    # The example: cpu and cuda keep stride (0,) and read [0, 0, 0, 0].
    x = torch.zeros(1, device="accel").expand(4)
    x.set_(torch.arange(4.0, device="accel").untyped_storage())
    assert x.stride() == (0,) and x.tolist() == [0.0, 0.0, 0.0, 0.0]


def test_item():
    assert torch.tensor([3.5]).to("accel").item() == 3.5
    assert torch.tensor(7, dtype=torch.int64).to("accel").item() == 7
    assert torch.tensor(True).to("accel").item() is True
    x = torch.arange(10).to("accel")
    assert x[7].item() == 7


def test_record_stream():
    s = torch_accel.Stream()
    x = torch.ones(1024).to("accel")
    with torch_accel.stream(s):
        y = torch.empty_like(x)
        y.copy_(x)
    x.record_stream(s)
    s.synchronize()
    assert torch.equal(y.cpu(), torch.ones(1024))


def test_record_stream_of_another_device(two_devices):
    x = torch.empty(4, device="accel:0")
    with pytest.raises(RuntimeError, match="accel:0.*accel:1"):
        x.record_stream(torch_accel.Stream(device=1))


def test_op_the_target_lacks_is_not_implemented_error():
    # An operator with a Meta kernel only: neither cuda nor cpu can run it.
    lib = torch.library.Library("accel_test_missing", "DEF")
    try:
        lib.define("meta_only(Tensor x) -> Tensor")
        lib.impl("meta_only", lambda x: torch.empty_like(x), "Meta")
        x = torch.empty(2, device="accel")
        with pytest.raises(
            NotImplementedError,
            match=r"'accel_test_missing::meta_only' is not implemented for the accel device: its target device",
        ):
            torch.ops.accel_test_missing.meta_only(x)
    finally:
        lib._destroy()


def test_factory_bad_options():
    with pytest.raises(RuntimeError, match="Only dense CPU tensors can be pinned"):
        torch.empty(2, device="accel", pin_memory=True)
