"""Autocast on accel follows CUDA's policy, on both runtimes.

The policy cases are PyTorch's own: torch/testing/_internal/autocast_test_lists.py
(AutocastTestLists, the CUDA lists with example arguments), plus cases for the
policy's operators those lists leave out. For each case the result under
torch.autocast("accel") must have the dtype CUDA's policy prescribes, and its
values must be bitwise those of the target device running the same operator
on explicitly cast arguments. On the CUDA runtime the case also runs under
torch.autocast("cuda") on cuda tensors, forward only, for dtype and bits.
"""

import re
import warnings

import pytest
import torch
from torch._dynamo.testing import CompileCounterWithBackend
from torch.nn import functional as F
from torch.testing._internal.autocast_test_lists import AutocastTestLists
from torch.utils._python_dispatch import TorchDispatchMode

import _amp_cases
import torch_accel
from conftest import run_target_cases

# --- Policy cases -------------------------------------------------------------

# What the lists of AutocastTestLists mean: the namespace their operators live
# in (None: a Tensor method), and the dtype the result has under autocast
# (None: the autocast dtype; a list's third entry may name it per case).
LISTS = {
    "torch_fp16": (torch, None),
    "nn_fp16": (torch._C._nn, None),
    "linalg_fp16": (torch._C._linalg, None),
    "methods_fp16": (None, None),
    "torch_fp32": (torch, torch.float32),
    "nn_fp32": (torch._C._nn, torch.float32),
    "methods_fp32": (None, torch.float32),
    "torch_need_autocast_promote": (torch, torch.float32),
    "torch_expect_builtin_promote": (torch, torch.float32),
    "methods_expect_builtin_promote": (None, torch.float32),
}
LOWER_PRECISION_LISTS = [name for name, (_, dtype) in LISTS.items() if dtype is None]


def extra_cases(device: str) -> list[tuple]:
    """(name, callable, args, result dtype or None for the autocast dtype) for
    operators of CUDA's policy that AutocastTestLists does not exercise."""
    n = 8

    def fp32(*shape):
        return torch.randn(shape, device=device)

    def fp16(*shape):
        return torch.randn(shape, device=device, dtype=torch.float16)

    q, k, v = fp32(2, 2, n, n), fp32(2, 2, n, n), fp32(2, 2, n, n)
    image1d, image2d, image3d = fp16(1, 2, n), fp16(1, 2, n, n), fp16(1, 2, 4, 4, 4)
    nn = torch._C._nn
    return [
        # lower_precision_fp
        ("einsum", lambda a, b: torch.einsum("ij,jk->ik", a, b), (fp32(n, n), fp32(n, n)), None),
        ("scaled_dot_product_attention", F.scaled_dot_product_attention, (q, k, v), None),
        (
            # Its output and logsumexp: without dropout, the random-state outputs are unset memory.
            "_scaled_dot_product_flash_attention",
            lambda q, k, v: torch.ops.aten._scaled_dot_product_flash_attention(q, k, v)[:2],
            (q, k, v),
            None,
        ),
        # fp32
        ("pow.Scalar", lambda a: torch.pow(1.7, a), (fp16(n),), torch.float32),
        ("native_layer_norm", lambda a: torch.native_layer_norm(a, (n,), None, None, 1e-5), (fp16(n, n),), torch.float32),
        ("frobenius_norm.dim", lambda a: torch.frobenius_norm(a, (0,)), (fp16(n, n),), torch.float32),
        ("nuclear_norm", torch.nuclear_norm, (fp16(n, n),), torch.float32),
        ("nuclear_norm.dim", lambda a: torch.nuclear_norm(a, (0, 1)), (fp16(n, n),), torch.float32),
        ("huber_loss", nn.huber_loss, (fp16(n, n), fp16(n, n)), torch.float32),
        ("upsample_nearest1d", lambda a: nn.upsample_nearest1d(a, (2 * n,)), (image1d,), torch.float32),
        ("_upsample_nearest_exact1d", lambda a: nn._upsample_nearest_exact1d(a, (2 * n,)), (image1d,), torch.float32),
        ("upsample_nearest2d", lambda a: nn.upsample_nearest2d(a, (2 * n, 2 * n)), (image2d,), torch.float32),
        (
            "_upsample_nearest_exact2d",
            lambda a: nn._upsample_nearest_exact2d(a, (2 * n, 2 * n)),
            (image2d,),
            torch.float32,
        ),
        ("upsample_nearest3d", lambda a: nn.upsample_nearest3d(a, (8, 8, 8)), (image3d,), torch.float32),
        ("_upsample_nearest_exact3d", lambda a: nn._upsample_nearest_exact3d(a, (8, 8, 8)), (image3d,), torch.float32),
        ("upsample_linear1d", lambda a: nn.upsample_linear1d(a, (2 * n,), False), (image1d,), torch.float32),
        ("upsample_bilinear2d", lambda a: nn.upsample_bilinear2d(a, (2 * n, 2 * n), False), (image2d,), torch.float32),
        (
            "_upsample_bilinear2d_aa",
            lambda a: nn._upsample_bilinear2d_aa(a, (2 * n, 2 * n), False),
            (image2d,),
            torch.float32,
        ),
        ("upsample_trilinear3d", lambda a: nn.upsample_trilinear3d(a, (8, 8, 8), False), (image3d,), torch.float32),
        ("upsample_bicubic2d", lambda a: nn.upsample_bicubic2d(a, (2 * n, 2 * n), False), (image2d,), torch.float32),
        (
            "_upsample_bicubic2d_aa",
            lambda a: nn._upsample_bicubic2d_aa(a, (2 * n, 2 * n), False),
            (image2d,),
            torch.float32,
        ),
        # fp32_set_opt_dtype
        ("linalg_vector_norm", torch.linalg.vector_norm, (fp16(n, n),), torch.float32),
        ("linalg_matrix_norm", torch.linalg.matrix_norm, (fp16(n, n),), torch.float32),
        ("linalg_matrix_norm.str_ord", lambda a: torch.linalg.matrix_norm(a, "fro"), (fp16(n, n),), torch.float32),
        # An explicit dtype is kept.
        ("sum with dtype", lambda a: torch.sum(a, dtype=torch.float16), (fp16(n),), torch.float16),
    ]


# Cases whose accel and target results are not bitwise comparable, and why, per target.
NOT_BITWISE = {
    "cpu": {
        name: "ATen computes RNN cells for accel through fused gate operators (as for cuda; "
        "csrc/aten/FusedRnnCells.cpp provides them on the host runtime), for the CPU unfused"
        for name in ("lstm_cell", "gru_cell")
    },
    "cuda": {},
}[torch_accel._target_device_type()]


class Case:
    def __init__(self, name, fn, args, kwargs, run_as, result_dtype):
        self.name, self.fn, self.args, self.kwargs = name, fn, args, kwargs
        self.run_as = run_as  # the dtype the explicit-cast reference casts floating arguments to
        self.result_dtype = result_dtype

    def __call__(self, args):
        return self.fn(*args, **self.kwargs)


def list_case(list_name: str, entry: tuple, autocast_dtype: torch.dtype) -> Case | None:
    module, result_dtype = LISTS[list_name]
    op, args = entry[0], entry[1]
    kwargs = {}
    if len(entry) == 3:
        if isinstance(entry[2], torch.dtype):
            result_dtype = entry[2]  # builtin promotion lists name the result dtype
        elif isinstance(entry[2], dict):
            kwargs = entry[2]
        elif entry[2]:
            # test_cuda.py reads a third entry as "skip": TEST_WITH_ROCM, or
            # einsum's misplaced arguments (covered in extra_cases).
            return None
    run_as = autocast_dtype if result_dtype is None else torch.float32
    result_dtype = autocast_dtype if result_dtype is None else result_dtype
    if module is not None and hasattr(module, op):
        fn = getattr(module, op)
    else:
        fn = lambda *a, **k: getattr(a[0], op)(*a[1:], **k)  # noqa: E731
    return Case(op, fn, args, kwargs, run_as, result_dtype)


def case_ids() -> list[str]:
    """Ids of every case, from lists built on the CPU (cheap, and no device)."""
    lists, ids = AutocastTestLists("cpu"), []
    for list_name in LISTS:
        for i, entry in enumerate(getattr(lists, list_name)):
            if list_case(list_name, entry, torch.float16) is not None:
                ids.append(f"{list_name}/{i}/{entry[0]}")
    ids += [f"extra/{i}/{case[0]}" for i, case in enumerate(extra_cases("cpu"))]
    return ids


_built: dict = {}


def build_case(case_id: str, autocast_dtype: torch.dtype) -> Case:
    list_name, index, _ = case_id.split("/")
    key = "extra" if list_name == "extra" else "lists"
    if key not in _built:
        torch.manual_seed(0)
        _built[key] = extra_cases("accel") if key == "extra" else AutocastTestLists("accel")
    if list_name == "extra":
        name, fn, args, result_dtype = _built[key][int(index)]
        result_dtype = autocast_dtype if result_dtype is None else result_dtype
        run_as = torch.float32 if result_dtype == torch.float32 else autocast_dtype
        return Case(name, fn, args, {}, run_as, result_dtype)
    return list_case(list_name, getattr(_built[key], list_name)[int(index)], autocast_dtype)


def cast(value, device=None, dtype=None):
    """Move tensors (in lists and tuples too) to ``device`` and floating ones to ``dtype``."""
    if isinstance(value, torch.Tensor):
        value = value.to(device) if device is not None else value
        return value.to(dtype) if dtype is not None and value.is_floating_point() else value
    if isinstance(value, (list, tuple)):
        return type(value)(cast(v, device, dtype) for v in value)
    return value


def tensors(value) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in tensors(v)]
    return []


class MissingTargetKernel(Exception):
    pass


class RecordInputDtypes(TorchDispatchMode):
    """Records the dtypes of the floating-point tensors an operator receives,
    then stops the call: for an operator the target has no kernel for, this
    is where autocast's casts show."""

    def __init__(self, op_name: str) -> None:
        super().__init__()
        self.op_name, self.dtypes = op_name, None

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.name() == self.op_name:
            self.dtypes = {t.dtype for t in tensors(list(args) + list((kwargs or {}).values())) if t.is_floating_point()}
            raise MissingTargetKernel
        return func(*args, **(kwargs or {}))


def check_case(case: Case, autocast_dtype: torch.dtype, target: str) -> None:
    try:
        with torch.autocast("accel", dtype=autocast_dtype):
            result = case(case.args)
    except NotImplementedError as e:
        # The target has no kernel for an operator the case reaches (on the
        # host runtime: cuDNN operators, CUDA-only fused kernels). The policy
        # is then checked on the casts autocast made before reaching it.
        missing = re.search(r"The operator '([\w:.]+)' is not implemented for the accel device: its target", str(e))
        if missing is None:
            raise
        record = RecordInputDtypes(missing.group(1))
        with torch.autocast("accel", dtype=autocast_dtype), pytest.raises(MissingTargetKernel), record:
            case(case.args)
        assert record.dtypes == {case.result_dtype}, f"{case.name}: {missing.group(1)} got {record.dtypes}"
        return

    # The result (the first output, for operators returning several, as
    # test_cuda.py checks) has the policy's dtype; every output is on accel.
    outputs = tensors(result)
    if outputs:
        assert outputs[0].dtype == case.result_dtype, (
            f"{case.name} produced {outputs[0].dtype}, CUDA's policy gives {case.result_dtype}"
        )
    assert all(t.device.type == "accel" for t in outputs)
    if case.name in NOT_BITWISE:
        expected = case(cast(case.args, target, case.run_as))
        for a, e in zip(tensors(result), tensors(expected)):
            torch.testing.assert_close(a.cpu(), e.cpu().to(a.dtype), atol=1e-2, rtol=1e-2)
        return
    # The target on explicitly cast arguments, without autocast.
    expected = case(cast(case.args, target, case.run_as))
    assert_bitwise(result, expected, f"{case.name}: accel autocast vs explicit casts on {target}")
    if target == "cuda":
        with torch.autocast("cuda", dtype=autocast_dtype):
            cuda_result = case(cast(case.args, "cuda"))
        assert_bitwise(result, cuda_result, f"{case.name}: accel autocast vs cuda autocast")


def assert_bitwise(actual, expected, what: str) -> None:
    if not tensors(expected):  # e.g. torch.equal's bool
        assert actual == expected, what
        return
    actual, expected = tensors(actual), tensors(expected)
    assert len(actual) == len(expected), what
    for a, e in zip(actual, expected):
        assert a.dtype == e.dtype, what
        torch.testing.assert_close(a.cpu(), e.cpu(), rtol=0, atol=0, equal_nan=True, msg=what)


@pytest.mark.parametrize("case_id", case_ids())
def test_policy_float16(case_id, target):
    check_case(build_case(case_id, torch.float16), torch.float16, target)


@pytest.mark.parametrize(
    "case_id",
    [i for i in case_ids() if i.split("/")[0] in LOWER_PRECISION_LISTS or i.startswith("extra/0/")],
)
def test_policy_bfloat16(case_id, target):
    check_case(build_case(case_id, torch.bfloat16), torch.bfloat16, target)


def test_registered_operators_are_cudas():
    """accel's AutocastPrivateUse1 kernels cover exactly the operators CUDA's
    autocast covers (the AT_FORALL_* lists, CUDA's extra convolutions and its
    banned binary_cross_entropy), except _cudnn_rnn: ATen calls it only for
    cuda tensors, and CPU-only builds of torch do not register it."""

    def registered(key: str) -> set[str]:
        return {op for op in torch._C._dispatch_get_all_op_names() if torch._C._dispatch_has_kernel_for_dispatch_key(op, key)}

    accel, cuda = registered("AutocastPrivateUse1"), registered("AutocastCUDA")
    assert accel == cuda - {"aten::_cudnn_rnn"}
    assert len(accel) > 100


# --- Banned operators ---------------------------------------------------------


def cuda_autocast_error() -> str:
    """The error CUDA's autocast raises for binary_cross_entropy."""
    a = torch.rand(4, 4)
    if torch.cuda.is_available():
        with torch.autocast("cuda"), pytest.raises(RuntimeError) as error:
            F.binary_cross_entropy(a.cuda(), a.cuda())
    else:
        # Without a GPU, run CUDA's autocast kernel itself for CPU tensors.
        with (
            torch._C._IncludeDispatchKeyGuard(torch._C.DispatchKey.AutocastCUDA),
            torch.autocast("cuda", enabled=False),
        ):
            torch.set_autocast_enabled("cuda", True)
            try:
                with pytest.raises(RuntimeError) as error:
                    F.binary_cross_entropy(a, a)
            finally:
                torch.set_autocast_enabled("cuda", False)
    return str(error.value)


def test_binary_cross_entropy_is_banned_as_on_cuda():
    probabilities = torch.rand(4, 4, device="accel")
    expected = cuda_autocast_error()
    assert "unsafe to autocast" in expected
    with torch.autocast("accel"):
        with pytest.raises(RuntimeError) as functional:
            F.binary_cross_entropy(probabilities, probabilities)
        with pytest.raises(RuntimeError) as module:
            torch.nn.BCELoss()(probabilities, probabilities)
        # The safe alternative the message recommends runs, in float32.
        assert F.binary_cross_entropy_with_logits(probabilities, probabilities).dtype == torch.float32
    assert str(functional.value) == str(module.value) == expected
    # Outside autocast it is an ordinary operator.
    assert F.binary_cross_entropy(probabilities, probabilities).device.type == "accel"


# --- The autocast state -------------------------------------------------------


def test_availability_and_default_dtype():
    assert torch.amp.is_autocast_available("accel")
    assert torch.get_autocast_dtype("accel") == torch.get_autocast_dtype("cuda") == torch.float16
    assert torch.accel.get_amp_supported_dtype() == [torch.float16, torch.bfloat16]
    assert not torch.is_autocast_enabled("accel")
    with torch.autocast("accel"):
        assert torch.is_autocast_enabled("accel")
        assert torch.get_autocast_dtype("accel") == torch.float16
    assert not torch.is_autocast_enabled("accel")


def test_set_autocast_dtype_sets_the_default_of_later_regions():
    a = torch.randn(4, 4, device="accel")
    torch.set_autocast_dtype("accel", torch.bfloat16)
    try:
        with torch.autocast("accel"):
            assert (a @ a).dtype == torch.bfloat16
        assert torch.get_autocast_dtype("cuda") == torch.float16  # other devices keep theirs
    finally:
        torch.set_autocast_dtype("accel", torch.float16)
    with torch.autocast("accel"):
        assert (a @ a).dtype == torch.float16


def test_nested_and_disabled_regions():
    a = torch.randn(4, 4, device="accel")
    with torch.autocast("accel"):
        assert (a @ a).dtype == torch.float16
        with torch.autocast("accel", enabled=False):
            assert not torch.is_autocast_enabled("accel")
            assert (a @ a).dtype == torch.float32
            with torch.autocast("accel", dtype=torch.bfloat16):
                assert (a @ a).dtype == torch.bfloat16
            assert (a @ a).dtype == torch.float32
        assert (a @ a).dtype == torch.float16
        assert torch.get_autocast_dtype("accel") == torch.float16
    assert (a @ a).dtype == torch.float32


def test_decorator_form():
    @torch.autocast("accel")
    def matmul(x):
        return x @ x

    assert matmul(torch.randn(4, 4, device="accel")).dtype == torch.float16
    assert not torch.is_autocast_enabled("accel")


def test_autocast_casts_only_its_own_device_type(target):
    a = torch.randn(4, 4, device="accel")
    t = a.to(target)
    with torch.autocast("accel"):
        assert (t @ t).dtype == torch.float32  # target tensors: not accel's region
    with torch.autocast(target, dtype=torch.bfloat16):
        assert (a @ a).dtype == torch.float32  # accel tensors: not the target's region
        assert (t @ t).dtype == torch.bfloat16


def test_region_exit_restores_state_after_an_exception():
    a = torch.randn(4, 4, device="accel")
    with pytest.raises(ValueError):
        with torch.autocast("accel", dtype=torch.bfloat16):
            raise ValueError
    assert not torch.is_autocast_enabled("accel")
    assert torch.get_autocast_dtype("accel") == torch.float16
    assert (a @ a).dtype == torch.float32


class CountCastsOf(TorchDispatchMode):
    """Counts the casts (aten._to_copy) of one tensor."""

    def __init__(self, tensor: torch.Tensor) -> None:
        super().__init__()
        self.tensor, self.count = tensor, 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is torch.ops.aten._to_copy.default and args[0] is self.tensor:
            self.count += 1
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("cache_enabled", [True, False])
def test_weight_casts_are_cached_within_a_region(cache_enabled):
    weight = torch.randn(4, 4, device="accel", requires_grad=True)  # a leaf: cacheable
    x = torch.randn(4, 4, device="accel")
    casts = CountCastsOf(weight)
    with torch.autocast("accel", cache_enabled=cache_enabled), casts:
        first, second = x @ weight, x @ weight
    # Cached: one float16 copy of the weight for the whole region.
    assert casts.count == (1 if cache_enabled else 2)
    assert first.dtype == second.dtype == torch.float16
    assert torch.equal(first, second)
    # The cache is dropped when the outermost region exits.
    with torch.autocast("accel", cache_enabled=cache_enabled), casts:
        x @ weight
    assert casts.count == (2 if cache_enabled else 3)


def test_non_leaf_tensors_are_not_cached():
    weight = torch.randn(4, 4, device="accel", requires_grad=True) * 2  # not a leaf
    x = torch.randn(4, 4, device="accel")
    casts = CountCastsOf(weight)
    with torch.autocast("accel"), casts:
        x @ weight
        x @ weight
    assert casts.count == 2


def test_backward_through_autocast_gives_float32_gradients():
    weight = torch.randn(4, 4, device="accel", requires_grad=True)
    x = torch.randn(4, 4, device="accel")
    with torch.autocast("accel"):
        out = x @ weight
    assert out.dtype == torch.float16
    out.float().sum().backward()
    assert weight.grad.dtype == torch.float32 and weight.grad.device.type == "accel"


# --- Bad input ----------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.int32])
def test_unsupported_dtype_warns_and_disables_autocast(dtype):
    a = torch.randn(4, 4, device="accel")
    with pytest.warns(UserWarning) as record:
        region = torch.autocast("accel", dtype=dtype)
    messages = [str(w.message) for w in record]
    assert (
        "In accel autocast, but the target dtype is not supported. Disabling autocast.\n"
        "accel Autocast only supports dtypes of torch.float16, torch.bfloat16 currently." in messages
    )
    with region:
        assert not torch.is_autocast_enabled("accel")
        assert (a @ a).dtype == torch.float32


# --- torch.accel.amp ----------------------------------------------------------


def test_accel_amp_autocast_is_deprecated_like_cudas():
    a = torch.randn(4, 4, device="accel")
    with pytest.warns(FutureWarning, match=r"torch.accel.amp.autocast\(args...\)` is deprecated"):
        region = torch.accel.amp.autocast()
    assert isinstance(region, torch.amp.autocast)
    assert region.device == "accel" and region.fast_dtype == torch.float16
    with region:
        assert (a @ a).dtype == torch.float16
    with pytest.warns(FutureWarning):
        with torch.accel.amp.autocast(dtype=torch.bfloat16):
            assert (a @ a).dtype == torch.bfloat16
    with pytest.warns(FutureWarning):
        with torch.accel.amp.autocast(enabled=False):
            assert (a @ a).dtype == torch.float32


def test_accel_amp_grad_scaler_is_deprecated_like_cudas():
    with pytest.warns(FutureWarning, match=r"torch.accel.amp.GradScaler\(args...\)` is deprecated"):
        scaler = torch.accel.amp.GradScaler(init_scale=8.0)
    assert isinstance(scaler, torch.amp.GradScaler)
    assert scaler._device == "accel" and scaler.get_scale() == 8.0


def test_accel_amp_custom_fwd_and_bwd():
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")

        class Square(torch.autograd.Function):
            @staticmethod
            @torch.accel.amp.custom_fwd(cast_inputs=torch.float32)
            def forward(ctx, x):
                ctx.save_for_backward(x)
                return x @ x

            @staticmethod
            @torch.accel.amp.custom_bwd
            def backward(ctx, grad):
                (x,) = ctx.saved_tensors
                return grad @ x.t() + x.t() @ grad

    messages = [str(w.message) for w in record if issubclass(w.category, FutureWarning)]
    assert any("torch.accel.amp.custom_fwd(args...)` is deprecated" in m for m in messages)
    assert any("torch.accel.amp.custom_bwd(args...)` is deprecated" in m for m in messages)
    x = torch.randn(4, 4, device="accel", dtype=torch.float16, requires_grad=True)
    with torch.autocast("accel"):
        out = Square.apply(x)
    assert out.dtype == torch.float32  # cast_inputs=float32 ran forward outside autocast
    out.sum().backward()
    assert x.grad.dtype == torch.float16


def test_amp_definitely_not_available():
    assert torch.accel.amp.amp_definitely_not_available() == (not torch.accel.is_available())


# --- GradScaler training --------------------------------------------------------


@pytest.fixture(scope="module")
def amp_reference(target, tmp_path_factory):
    return run_target_cases(target, tmp_path_factory.mktemp("amp_reference"), script="_amp_cases.py")


def assert_same_training(actual: dict, expected: dict, what: str) -> None:
    assert actual["scales"] == expected["scales"], what
    assert actual["skipped"] == expected["skipped"], what
    for key in ("losses",):
        for i, (a, e) in enumerate(zip(actual[key], expected[key], strict=True)):
            assert torch.equal(a, e), f"{what}: {key}[{i}]"
    for key in ("grads", "state"):
        assert actual[key].keys() == expected[key].keys()
        for name in expected[key]:
            assert torch.equal(actual[key][name], expected[key][name]), f"{what}: {key}.{name}"


def test_grad_scaler_training_matches_the_target_bitwise(amp_reference, target):
    result = _amp_cases.train_with_grad_scaler("accel", "autocast")
    assert result["devices"] == ["accel:0"]
    assert_same_training(result, amp_reference["explicit"], f"accel autocast vs explicit casts on {target}")
    if target == "cuda":
        assert_same_training(result, amp_reference["autocast"], "accel autocast vs cuda autocast")


def test_grad_scaler_skips_non_finite_steps_and_adjusts_the_scale():
    result = _amp_cases.train_with_grad_scaler("accel", "autocast")
    assert result["loss_dtype"] == "torch.float32"  # mse_loss runs in float32
    # growth_interval=2: the scale doubles after two clean steps and halves
    # on every step whose gradients are not finite, which is skipped.
    assert result["skipped"] == [False, False, True, False, True, False]
    assert result["scales"] == [1024.0, 2048.0, 1024.0, 1024.0, 512.0, 512.0]
    assert all(torch.isfinite(t).all() for t in result["state"].values())


def test_grad_scaler_unscale_on_accel():
    scaler = torch.amp.GradScaler("accel", init_scale=4.0)
    weight = torch.nn.Parameter(torch.ones(3, device="accel"))
    optimizer = torch.optim.SGD([weight], lr=1.0)
    scaler.scale((weight * 2).sum()).backward()
    assert torch.equal(weight.grad.cpu(), torch.full((3,), 8.0))
    scaler.unscale_(optimizer)
    assert torch.equal(weight.grad.cpu(), torch.full((3,), 2.0))
    found_inf = scaler._found_inf_per_device(optimizer)
    assert list(found_inf) == [torch.device("accel:0")] and found_inf[torch.device("accel:0")].item() == 0.0
    scaler.step(optimizer)
    scaler.update()
    assert torch.equal(weight.detach().cpu(), torch.full((3,), -1.0))


# --- Inside torch.compile --------------------------------------------------------


def test_autocast_inside_compile_matches_eager():
    torch._dynamo.reset()

    def block(x, w, b):
        with torch.autocast("accel"):
            h = torch.nn.functional.linear(x, w, b)
            p = torch.softmax(h, dim=-1)
            return h, p, (h.relu() @ w).sum(dim=0)

    g = torch.Generator().manual_seed(0)
    args = [t.to("accel") for t in (torch.randn(8, 16, generator=g), torch.randn(16, 16, generator=g), torch.randn(16, generator=g))]
    eager = block(*args)
    counter = CompileCounterWithBackend("inductor")
    try:
        compiled = torch.compile(block, backend=counter, fullgraph=True)(*args)
    finally:
        torch._dynamo.reset()
    assert counter.frame_count == 1  # one graph: the region is traced, not broken around
    assert [t.dtype for t in eager] == [torch.float16, torch.float32, torch.float32]  # linear, softmax, sum
    for c, e in zip(compiled, eager):
        assert c.dtype == e.dtype and c.device == e.device
    # Each output within what its last operation may round differently, no
    # more (a float16 accumulation anywhere would exceed these by far):
    # h, a float16 linear: one float16 ulp (2**-10 relative; 2**-24, float16's
    # smallest step, near zero).
    torch.testing.assert_close(compiled[0], eager[0], rtol=2**-10, atol=2**-24)
    # softmax in float32 of the same h: a few float32 ulps (exp and the sum of
    # exponentials, in the generated code's order).
    torch.testing.assert_close(compiled[1], eager[1], rtol=4 * 2**-23, atol=0)
    # sum over 8 rows in float32, in another order: at most 8 roundings of
    # 2**-24 relative each, of the sum of the magnitudes.
    magnitude = (eager[0].relu() @ args[1].half()).float().abs().sum(dim=0)
    torch.testing.assert_close(compiled[2], eager[2], rtol=0, atol=float(8 * 2**-24 * magnitude.max()))


def test_autocast_training_step_inside_compile_matches_eager():
    torch._dynamo.reset()
    model = _amp_cases.make_model().to("accel")
    x, y = _amp_cases.batch("accel", 0)

    def step(m):
        loss = _amp_cases.loss_under_autocast(m, x, y, "accel")
        loss.backward()
        return loss

    eager_loss = step(model)
    eager_grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    try:
        compiled_loss = torch.compile(step)(model)
    finally:
        torch._dynamo.reset()
    assert compiled_loss.dtype == eager_loss.dtype == torch.float32
    # The loss: a float32 mean of 32 squares (no cancellation) summed in
    # another order: at most 31 roundings of 2**-24 relative.
    torch.testing.assert_close(compiled_loss, eager_loss, rtol=32 * 2**-24, atol=0)
    for p, e in zip(model.parameters(), eager_grads):
        assert p.grad.dtype == torch.float32 and p.grad.device.type == "accel"
        # float16 results (autocast's float16 linears) cast to the float32
        # parameters: the last float16 rounding may differ by one float16 ulp.
        torch.testing.assert_close(p.grad, e, rtol=2**-10, atol=2**-24)
