"""PyTorch's device-generic tests, instantiated for accel.

torch.testing._internal is PyTorch's machinery for tests written once and run
on every device type: ``instantiate_device_type_tests`` turns a generic test
class into one class per device type, here ``PrivateUse1TestBase`` (accel),
and the ``@ops`` / ``@modules`` / ``@optims`` decorators parametrize a test
over PyTorch's own databases of operators (OpInfo), nn modules (ModuleInfo)
and optimizers (OptimizerInfo), with their sample inputs. The test files of
PyTorch's repository that use them are not shipped with torch, so the generic
classes are ours; the databases, inputs and instantiation are PyTorch's.

Each class checks a PrivateUse1 path that test_opinfo's forward sweep does not:

- ``TestOutVariants``: every op with ``out=``, called with empty out tensors
  that the op must resize: the same result, returned as the out tensors
  themselves, as on the target.
- ``TestFakeTensor``: every op under FakeTensorMode on fake accel tensors
  propagates exactly the target's metadata (sizes, strides, dtype, aliasing,
  or the same exception); this is how every tracer sees accel.
- ``TestGradients``: every op that supports autograd: forward and input
  gradients against the reference device.
- ``TestModules``: every nn module of module_db, train and eval modes:
  outputs, input and parameter gradients, and buffers against the reference.
- ``TestOptimizers``: every optimizer of optim_db in every configuration
  (for-loop, foreach, fused where the target has fused kernels): three steps
  change parameters and state as on the target.

Forward-only work is compared with the target device in this process, bit for
bit. Work that runs a backward is compared with cpu: in torch 2.11 a CUDA
backward cannot run in a process where a PrivateUse1 backend is registered
(see test/_cases.py), so on the CUDA runtime the reference is cpu with
PyTorch's dtype tolerances (its own cpu-parity comparison), cuDNN without
TF32, and random ops and modules (another device type's generator draws other
numbers) compared by metadata only; on the host runtime cpu is the target and
every comparison is bitwise.

Where both devices raise, the errors are compared (type and message, device
names aside); such a sample counts as a comparison only for the entries of
``RAISES_ALIKE``, each with its reason, so that no test passes on errors alone
unannounced. Where PyTorch itself sends accel and the reference down different
paths, the comparison is within rounding, with the reason next to it
(``MODULES_WITHIN_ROUNDING``; test_divergent_paths pins those paths).

Tests that fail for reasons that are not accel's are listed in
``KNOWN_FAILURES`` with the reason and the failure's message: their other
samples still run, a different failure fails the test, and one that starts
passing fails the suite, so the list stays honest. ``pytest -rA
test/test_device_generic.py`` shows the counts; test/conftest.py prints them per
class and writes build/device-generic-report.json.
"""

from __future__ import annotations

import contextlib
import copy
import itertools
import re
from typing import Any, Callable

import pytest

import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.testing._internal.common_device_type import (
    PrivateUse1TestBase,
    instantiate_device_type_tests,
    onlyCPU,
    onlyCUDA,
    ops,
)
from torch.testing._internal.common_methods_invocations import op_db
from torch.testing._internal.common_modules import module_db, modules
from torch.testing._internal.common_optimizers import (
    OptimizerInput,
    _get_optim_inputs_including_global_cliquey_kwargs,
    optim_db,
    optims,
)
from torch.testing._internal.common_utils import TestCase

from _comparison import (
    ACCEL,
    CLOSE,
    CPU_TENSOR_ARGUMENTS,
    EXACT,
    METADATA,
    TARGET,
    Copier,
    compare_values,
    manual_seed,
    opinfo_samples,
    tensor_leaves,
)

SEED = 1234
# Samples per op (or module) and dtype: PyTorch's generators put the plain cases
# first and the corner cases (broadcasting, discontiguous, empty) after them.
SAMPLES = 4
DTYPE = torch.float32

# Where backward work is compared (see the module docstring).
GRAD_REFERENCE = "cpu"
GRAD_MODE = EXACT if TARGET == GRAD_REFERENCE else CLOSE


def reference_precision():
    """Float32 convolutions in float32 while backward work is compared with
    cpu: cuDNN (which accel's convolutions run on the CUDA runtime) uses TF32
    by default, about 1e-3 from cpu's results."""
    return torch.backends.cudnn.flags(enabled=torch.backends.cudnn.enabled, allow_tf32=False)


def op_key(op) -> str:
    return f"{op.name}.{op.variant_test_name}" if op.variant_test_name else op.name


# Ops not instantiated, each with the reason the comparison would be meaningless.
NOT_ACCEL_OPS = {
    **{
        op.name: "not an ATen operator: torch.cuda.jiterator compiles and launches CUDA kernels directly"
        for op in op_db
        if op.name.startswith("jiterator_")
    },
    **{
        op_key(op): "its OpInfo restricts its tests to one device type (onlyCPU / onlyCUDA), so PyTorch's "
        "decorator would skip them on accel (test_opinfo's sweep runs it)"
        for op in op_db
        if onlyCPU in op.decorators or onlyCUDA in op.decorators
    },
}
# Outputs holding uninitialized memory: metadata compared, never values.
UNINITIALIZED_OUTPUTS = {"empty", "empty_like", "empty_permuted", "empty_strided", "new_empty", "new_empty_strided"}
# Ops whose reference kernels give different bits from run to run.
NONDETERMINISTIC_ON_REFERENCE = {
    "linalg.lstsq": "LAPACK's 'gelsy' driver differs in the last bits between runs",
    "linalg.lstsq.grad_oriented": "LAPACK's 'gelsy' driver differs in the last bits between runs",
}

# Ops whose OpInfo says supports_out although the op has no out= tensors.
NO_OUT_TENSORS = {"equal": "returns a Python bool"}

# Modules compared with tolerances, not bitwise, where PyTorch sends accel
# and the reference device down different paths (docs/bitwise-comparisons.md;
# test_divergent_paths pins nn.RNN's path and compares it bitwise).
_FUSED_CELLS = (
    "ATen computes LSTM and GRU cells for accel as for cuda (two products, then fused gate operators, "
    "which accel provides on the host runtime: csrc/aten/FusedRnnCells.cpp) and for cpu unfused{cpu}: "
    "the same arithmetic in another order"
)
MODULES_WITHIN_ROUNDING = {
    "cpu": {
        "nn.LSTM": _FUSED_CELLS.format(cpu=", or (float32 inputs, mkldnn enabled) with oneDNN's LSTM"),
        "nn.GRU": _FUSED_CELLS.format(cpu=", after projecting every step's input at once"),
        "nn.LSTMCell": _FUSED_CELLS.format(cpu=""),
        "nn.GRUCell": _FUSED_CELLS.format(cpu=""),
        "nn.RNN": "ATen's rnn_tanh/rnn_relu project every step's input with one matrix product for cpu "
        "tensors (and get its weight gradient from one product over all steps) and step by step for "
        "every other device: other roundings of the same sums. Module_db's inputs (batch 1, 3 steps) "
        "happen to agree bitwise on some machines (an AMD EPYC with ATen's AVX2 kernels) and not on "
        "others (Intel with MKL's AVX2/AVX-512 kernels; the same EPYC with ATEN_CPU_CAPABILITY=default)",
    },
    "cuda": {},  # the reference (cpu) is not the target there: every module is compared with tolerances
}[TARGET]

NOT_ACCEL_OPTIMIZERS: dict[str, str] = {}

# Entries whose samples raise on the reference device, and on accel with the
# same exception and message: there the comparison is of errors, not results,
# and it counts only for the entries listed here, each with the reason (per
# test class: "out", "fake", "gradients", "modules", "optimizers"). An entry
# none of whose samples gives results to compare, and that is not listed,
# fails ("no sample could be compared"). Checked on the host runtime.
_DATA_DEPENDENT = "its result depends on the data, which FakeTensorMode does not have ({})"
RAISES_ALIKE: dict[str, dict[str, str]] = {
    "out": {
        "_batch_norm_with_update": "its OpInfo's out= call passes a tuple where the out= overload takes "
        "separate tensors: PyTorch's Python binding matches no schema, on every device",
        "histogramdd": "its OpInfo's samples give bins as Python numbers, which the out= overload's schema "
        "refuses on every device",
        "sparse.sampled_addmm": "out= must be a sparse CSR tensor; this test's out= tensors are strided, "
        "refused on every device",
    },
    "fake": {
        **{name: _DATA_DEPENDENT.format("a Python value") for name in ("allclose", "equal", "item", "nn.functional.gaussian_nll_loss")},
        **{name: _DATA_DEPENDENT.format("an equality check of its inputs") for name in ("corrcoef", "cov")},
        **{
            name: _DATA_DEPENDENT.format("its output's shape")
            for name in (
                "argwhere",
                "combinations",
                "linalg.lstsq",
                "linalg.lstsq.grad_oriented",
                "masked_select",
                "nn.functional.ctc_loss",
                "nonzero",
                "unique",
                "unique_consecutive",
            )
        },
        "tensor_split": "its split points are a tensor read on the host, which a fake tensor has no data for",
        "sparse.sampled_addmm": "FakeTensorMode cannot fake its sparse CSR inputs (a real index tensor "
        "reaches crow_indices), on every device",
    },
    "gradients": {},
    "modules": {},
    "optimizers": {},
}

# Test name (as instantiated, without the class) -> why it fails and why that
# is not accel's to fix ("reason"), and the failure itself ("failure": a
# regular expression its message must match). Keyed per target device type.
# Such a test runs all its samples: one failing otherwise fails the test, and
# the test fails if the documented failure stops happening.
_KNOWN_FAILURES_EVERYWHERE: dict[str, dict[str, str]] = {}
# PyTorch's Python code that tells devices apart by `device.type == "cpu"`
# treats accel like cuda; on the host runtime the kernels are the CPU's.
_CPU_ONLY_BRANCH = "on the host runtime (cpu target) only: PyTorch's {where} {what}"
KNOWN_FAILURES: dict[str, dict[str, str]] = {
    "cpu": {
        **_KNOWN_FAILURES_EVERYWHERE,
        **{
            f"test_fake_propagation_matches_target_{name}_accel_float32": {
                "reason": _CPU_ONLY_BRANCH.format(
                    where="composite quantile",
                    what="checks that q lies in [0, 1] (a data-dependent check, which FakeTensorMode refuses) "
                    "only for cpu tensors, to spare other devices a synchronization, as for cuda",
                ),
                "failure": r"under FakeTensorMode: accel raised None, the reference "
                r"DataDependentOutputException\(func=<OpOverload\(op='aten\.equal'",
            }
            for name in ("quantile", "nanquantile")
        },
        **{
            f"test_fake_propagation_matches_target_{name}_accel_float32": {
                "reason": _CPU_ONLY_BRANCH.format(
                    where="batch-norm decomposition (the fake implementation)",
                    what="gives every non-cpu device CUDA's saved-statistics shape in eval mode ((C,) where the "
                    "CPU kernel accel runs returns (0,)); outputs agree",
                ),
                "failure": r"under FakeTensorMode\[[12]\]: accel has \(torch\.Size\(\[\d+\]\), torch\.float32, .*\), "
                r"cpu \(torch\.Size\(\[0\]\), torch\.float32, ",
            }
            for name in ("native_batch_norm", "_native_batch_norm_legit")
        },
    },
    "cuda": _KNOWN_FAILURES_EVERYWHERE,
}[TARGET]


ACCEL_OPS = [op for op in op_db if op.name not in NOT_ACCEL_OPS and op_key(op) not in NOT_ACCEL_OPS]


def cpu_args(op) -> bool:
    return op.name in CPU_TENSOR_ARGUMENTS


def value_mode(op) -> str:
    if op.name in UNINITIALIZED_OUTPUTS:
        return METADATA
    return CLOSE if op_key(op) in NONDETERMINISTIC_ON_REFERENCE else EXACT


def draws_random_numbers(op) -> bool:
    """The OpInfo reseeds the default generator before each call of its op
    (PyTorch's wrapper_set_seed): the op draws random numbers."""
    code = getattr(op.op, "__code__", None)
    return code is not None and "wrapper_set_seed" in code.co_names


def grad_value_mode(op) -> str:
    """How TestGradients compares with GRAD_REFERENCE: as forward work where it
    is the target; else within tolerances (other kernels), and by metadata for
    random ops (another generator: other numbers for the same seed)."""
    mode = value_mode(op)
    if GRAD_MODE == EXACT or mode == METADATA:
        return mode
    return METADATA if draws_random_numbers(op) else CLOSE


def module_draws_random_numbers(module: torch.nn.Module) -> bool:
    """A module in training mode with dropout (a Dropout submodule or a
    dropout probability, as MultiheadAttention has) or RReLU."""
    return module.training and any(
        isinstance(m, (torch.nn.modules.dropout._DropoutNd, torch.nn.RReLU))
        or (isinstance(getattr(m, "dropout", None), float) and m.dropout > 0)
        for m in module.modules()
    )


def samples(op, device: str, requires_grad: bool = False) -> list:
    # op.sample_inputs' samples, made without its wrapper's stack inspection
    # (see opinfo_samples; each sample drawn after seeding with common_utils.SEED).
    return opinfo_samples(op, device, DTYPE, SAMPLES, requires_grad=requires_grad)


def call(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[Any, BaseException | None]:
    """(result, None) or (None, the exception), with the random state reset so
    that random ops draw the same numbers on both devices."""
    manual_seed(SEED)
    try:
        return fn(*args, **kwargs), None
    except Exception as error:  # noqa: BLE001 - an exception is an outcome to compare
        return None, error


def without_devices(message: str) -> str:
    """An error message with device names (accel's, the reference's) and
    addresses made alike, to compare the two devices' errors."""
    message = re.sub(r",\s*device='[^']*'", "", message)  # a tensor's repr names its device unless it is cpu
    message = re.sub(rf"\b(?:{ACCEL}|{TARGET}|{GRAD_REFERENCE})(?::\d+)?\b", "<device>", message, flags=re.I)
    return re.sub(r"0x[0-9a-f]+", "<address>", message)


class OutcomeComparison:
    """Counts the samples a test compared, so that no test passes vacuously,
    and holds the test to its entry in KNOWN_FAILURES, if any.

    A sample where both devices raise is compared: the same exception type
    and the same message (device names aside), or the test fails. It counts
    as a comparison only for the entries listed in RAISES_ALIKE with the
    reason; otherwise other samples must give the test something to compare.
    A test listed in KNOWN_FAILURES runs every sample: a sample failing as
    documented there is set aside, any other failure fails the test, and the
    test is an expected failure only if the documented failure happened."""

    def __init__(self, test: TestCase, kind: str, key: str) -> None:
        self.test = test
        self.raising_counts = key in RAISES_ALIKE[kind]
        self.known = KNOWN_FAILURES.get(test._testMethodName)
        self.compared = 0
        self.documented: list[str] = []

    def same_failure(self, accel_error: BaseException | None, reference_error: BaseException | None, what: str) -> bool:
        """True when both calls raised alike; fails when one did, or both in other ways."""
        if reference_error is None and accel_error is None:
            return False
        if reference_error is None or accel_error is None or type(accel_error) is not type(reference_error):
            raise AssertionError(f"{what}: accel raised {accel_error!r}, the reference {reference_error!r}") from (
                accel_error or reference_error
            )
        accel_message, reference_message = (without_devices(str(e)) for e in (accel_error, reference_error))
        if accel_message != reference_message:
            raise AssertionError(
                f"{what}: both raised {type(accel_error).__name__}, with other messages: accel {accel_message!r}, "
                f"the reference {reference_message!r}"
            ) from accel_error
        self.compared += self.raising_counts
        return True

    @contextlib.contextmanager
    def sample(self):
        """Around one sample's comparison: sets aside the documented failure."""
        try:
            yield
        except Exception as error:  # noqa: BLE001 - only the documented failure is set aside
            if self.known is None or not re.search(self.known["failure"], str(error)):
                raise
            self.documented.append(str(error))

    def done(self) -> None:
        if self.known is not None:
            if not self.documented:
                raise AssertionError(f"passes now (remove it from KNOWN_FAILURES): {self.known['reason']}")
            pytest.xfail(f"{self.known['reason']} ({len(self.documented)} sample(s) failed as documented)")
        self.test.assertGreater(self.compared, 0, "no sample could be compared")


def fresh_like(tree: Any, device: str) -> Any:
    """Empty (numel 0) tensors with the dtypes of ``tree``'s tensors, on ``device``:
    out= arguments the op must resize."""
    return torch.utils._pytree.tree_map(
        lambda t: torch.empty(0, dtype=t.dtype, device=device) if isinstance(t, torch.Tensor) else t, tree
    )


class TestOutVariants(TestCase):
    @ops([op for op in ACCEL_OPS if op.supports_out and op.name not in NO_OUT_TENSORS], allowed_dtypes=(DTYPE,))
    def test_out_matches_target(self, device, dtype, op):
        outcomes = OutcomeComparison(self, "out", op_key(op))
        for index, sample in enumerate(samples(op, TARGET)):
            with outcomes.sample():
                target_args = Copier(TARGET, cpu_args(op)).sample(sample)
                expected, error = call(op, target_args[0], *target_args[1], **target_args[2])
                if error is not None or not tensor_leaves(expected):
                    continue  # no out= call to make for this sample
                target_args, accel_args = Copier(TARGET, cpu_args(op)).sample(sample), Copier(ACCEL, cpu_args(op)).sample(sample)
                target_out, accel_out = fresh_like(expected, TARGET), fresh_like(expected, ACCEL)
                target_result, target_error = call(op, target_args[0], *target_args[1], **target_args[2], out=target_out)
                accel_result, accel_error = call(op, accel_args[0], *accel_args[1], **accel_args[2], out=accel_out)
                what = f"sample {index} with out="
                if outcomes.same_failure(accel_error, target_error, what):
                    continue
                compare_values(accel_out, target_out, f"{what}: out", value_mode(op), accel_args, target_args)
                # The op returns its out tensors themselves.
                self.assertEqual(
                    [id(t) for t in tensor_leaves(accel_result)],
                    [id(t) for t in tensor_leaves(accel_out)][: len(tensor_leaves(accel_result))],
                )
                outcomes.compared += 1
        outcomes.done()


class TestFakeTensor(TestCase):
    @ops(ACCEL_OPS, allowed_dtypes=(DTYPE,))
    def test_fake_propagation_matches_target(self, device, dtype, op):
        outcomes = OutcomeComparison(self, "fake", op_key(op))
        for index, sample in enumerate(samples(op, TARGET)):
            with outcomes.sample():
                results = {}
                for kind in (TARGET, ACCEL):
                    real = Copier(kind, cpu_args(op)).sample(sample)
                    with FakeTensorMode() as mode:
                        try:
                            fake = torch.utils._pytree.tree_map(
                                lambda x: mode.from_tensor(x) if isinstance(x, torch.Tensor) else x, real
                            )
                        except Exception as error:  # noqa: BLE001 - e.g. sparse CSR inputs: compared too
                            results[kind] = (real, None, error)
                            continue
                        results[kind] = (fake, *call(op, fake[0], *fake[1], **fake[2]))
                (target_args, target_result, target_error), (accel_args, accel_result, accel_error) = (
                    results[TARGET],
                    results[ACCEL],
                )
                what = f"sample {index} under FakeTensorMode"
                if outcomes.same_failure(accel_error, target_error, what):
                    continue
                compare_values(accel_result, target_result, what, METADATA, accel_args, target_args)
                outcomes.compared += 1
        outcomes.done()


def differentiable_outputs(result: Any) -> list[torch.Tensor]:
    return [t for t in tensor_leaves(result) if t.requires_grad and (t.is_floating_point() or t.is_complex())]


def gradients(outputs: list[torch.Tensor], inputs: list[torch.Tensor], device: str) -> tuple:
    """d(outputs)/d(inputs) against grad_outputs drawn from a fixed seed (the
    same numbers on every device)."""
    generator = torch.Generator().manual_seed(SEED)
    grad_outputs = [torch.randn(t.shape, dtype=t.dtype, generator=generator).to(device) for t in outputs]
    return torch.autograd.grad(outputs, inputs, grad_outputs, allow_unused=True)


def requiring_grad(tree: Any) -> list[torch.Tensor]:
    return [t for t in tensor_leaves(tree) if t.requires_grad]


class TestGradients(TestCase):
    @ops([op for op in ACCEL_OPS if op.supports_autograd], allowed_dtypes=(DTYPE,))
    def test_gradients_match_cpu(self, device, dtype, op):
        outcomes = OutcomeComparison(self, "gradients", op_key(op))
        mode = grad_value_mode(op)
        for index, sample in enumerate(samples(op, GRAD_REFERENCE, requires_grad=True)):
            with outcomes.sample():
                runs = {}
                for kind in (GRAD_REFERENCE, ACCEL):
                    args = Copier(kind, cpu_args(op), source=GRAD_REFERENCE, requires_grad=True).sample(sample)

                    def forward_backward(args=args, kind=kind):
                        result = sample.output_process_fn_grad(op(args[0], *args[1], **args[2]))
                        outputs = differentiable_outputs(result)
                        return result, gradients(outputs, requiring_grad(args), kind) if outputs else None

                    with reference_precision():
                        runs[kind] = (args, *call(forward_backward))
                (reference_args, reference, reference_error), (accel_args, accel, accel_error) = (
                    runs[GRAD_REFERENCE],
                    runs[ACCEL],
                )
                what = f"sample {index}"
                if outcomes.same_failure(accel_error, reference_error, what):
                    continue
                if reference[1] is None:
                    continue  # nothing differentiable came out of this sample
                options = dict(reference=GRAD_REFERENCE, check_layout=TARGET == GRAD_REFERENCE)
                compare_values(accel[0], reference[0], f"{what}: output", mode, accel_args, reference_args, **options)
                compare_values(accel[1], reference[1], f"{what}: gradients", mode, accel_args, reference_args, **options)
                outcomes.compared += 1
        outcomes.done()


class TestModules(TestCase):
    @modules(module_db, allowed_dtypes=(DTYPE,))
    def test_module_matches_cpu(self, device, dtype, module_info, training):
        outcomes = OutcomeComparison(self, "modules", module_info.name)
        mode = CLOSE if module_info.name in MODULES_WITHIN_ROUNDING else GRAD_MODE
        torch.manual_seed(SEED)
        module_inputs = module_info.module_inputs_func(
            module_info, device=GRAD_REFERENCE, dtype=dtype, requires_grad=True, training=training
        )
        for index, module_input in enumerate(module_inputs[:SAMPLES]):
            with outcomes.sample():
                if module_input.forward_input is None:
                    continue
                constructor = module_input.constructor_input
                torch.manual_seed(SEED)
                reference_module = module_info.module_cls(*constructor.args, **constructor.kwargs).to(dtype)
                reference_module.train(training)
                accel_module = copy.deepcopy(reference_module).to(ACCEL)
                # Another device type's generator draws other numbers.
                draws_random = GRAD_MODE != EXACT and module_draws_random_numbers(reference_module)
                input_mode = METADATA if draws_random else mode
                runs = {}
                for kind, module in ((GRAD_REFERENCE, reference_module), (ACCEL, accel_module)):
                    forward = Copier(kind, source=GRAD_REFERENCE, requires_grad=True).tree(
                        (module_input.forward_input.args, module_input.forward_input.kwargs)
                    )

                    def forward_backward(module=module, forward=forward, kind=kind):
                        result = module(*forward[0], **forward[1])
                        outputs = differentiable_outputs(result)
                        inputs = requiring_grad(forward) + list(module.parameters())
                        return result, gradients(outputs, inputs, kind) if outputs else None, module.state_dict()

                    with reference_precision():
                        runs[kind] = (forward, *call(forward_backward))
                (reference_args, reference, reference_error), (accel_args, accel, accel_error) = (
                    runs[GRAD_REFERENCE],
                    runs[ACCEL],
                )
                what = f"input {index} ({module_input.desc or 'default'})"
                if outcomes.same_failure(accel_error, reference_error, what):
                    continue
                options = dict(reference=GRAD_REFERENCE, check_layout=TARGET == GRAD_REFERENCE)
                for part, name in ((0, "output"), (1, "gradients"), (2, "state_dict after forward")):
                    compare_values(accel[part], reference[part], f"{what}: {name}", input_mode, accel_args, reference_args, **options)
                outcomes.compared += 1
        outcomes.done()


def optimizer_inputs(optim_info) -> list[OptimizerInput]:
    """Every configuration PyTorch tests for the optimizer on accel (for-loop
    and foreach), plus fused where the target has fused kernels: accel runs the
    target's. (``differentiable`` steps need a backward through the step.)"""
    configs = _get_optim_inputs_including_global_cliquey_kwargs(ACCEL, DTYPE, optim_info, skip=("differentiable",))
    if "fused" in optim_info.supported_impls and TARGET in optim_info.supports_fused_on:
        configs += [
            OptimizerInput(params=None, kwargs={**config.kwargs, "fused": True}, desc=f"{config.desc} & fused")
            for config in optim_info.optim_inputs_func(TARGET)
        ]
    return configs


def optimizer_steps(optim_info, kwargs: dict, device: str, steps: int = 3) -> tuple[list, dict]:
    """Parameters and optimizer state after ``steps`` steps on ``device``.
    Gradients are set by the closure, without autograd, so the steps can run on
    any device in this process."""
    generator = torch.Generator().manual_seed(SEED)
    params = [
        torch.randn(shape, dtype=DTYPE, generator=generator).to(device).requires_grad_()
        for shape in ((4, 3), (3, 5))  # 2-D: every optimizer (Muon too) takes them
    ]
    kwargs = {k: (v.to(device) if isinstance(v, torch.Tensor) else v) for k, v in kwargs.items()}
    optimizer = optim_info.optim_cls(params, **kwargs)
    grads = torch.Generator().manual_seed(SEED + 1)

    def closure() -> torch.Tensor:
        with torch.no_grad():
            for p in params:
                p.grad = torch.randn(p.shape, dtype=DTYPE, generator=grads).to(device) + p
                if optim_info.only_supports_sparse_grads:  # SparseAdam
                    p.grad = p.grad.to_sparse()
            return sum((p * p).sum() for p in params)

    for _ in range(steps):
        optimizer.step(closure)
    return [p.detach() for p in params], optimizer.state_dict()


class TestOptimizers(TestCase):
    @optims([o for o in optim_db if o.name not in NOT_ACCEL_OPTIMIZERS], dtypes=[DTYPE])
    def test_optimizer_matches_target(self, device, dtype, optim_info):
        outcomes = OutcomeComparison(self, "optimizers", optim_info.name)
        for config in optimizer_inputs(optim_info):
            with outcomes.sample():
                what = f"{optim_info.name}({config.desc})"
                (target, target_error), (accel, accel_error) = (
                    call(optimizer_steps, optim_info, config.kwargs, TARGET),
                    call(optimizer_steps, optim_info, config.kwargs, ACCEL),
                )
                if outcomes.same_failure(accel_error, target_error, what):
                    continue
                (accel_params, accel_state), (target_params, target_state) = accel, target
                compare_values(accel_params, target_params, f"{what}: parameters", EXACT, accel_params, target_params)
                # State lives where the optimizer puts it (step counts on cpu, as for cuda).
                compare_values(accel_state, target_state, f"{what}: state", EXACT, accel_params, target_params, check_device=False)
                outcomes.compared += 1
        outcomes.done()


# PrivateUse1TestBase takes the backend's name ("accel") in setUpClass, which
# instantiating a class runs: do it first, so every class is named ...ACCEL.
PrivateUse1TestBase.setUpClass()
instantiate_device_type_tests(TestOutVariants, globals(), only_for="privateuse1")
instantiate_device_type_tests(TestFakeTensor, globals(), only_for="privateuse1")
instantiate_device_type_tests(TestGradients, globals(), only_for="privateuse1")
instantiate_device_type_tests(TestModules, globals(), only_for="privateuse1")
instantiate_device_type_tests(TestOptimizers, globals(), only_for="privateuse1")


def _check_known_failures() -> None:
    """Every entry of KNOWN_FAILURES names an instantiated test (the list must stay accurate)."""
    classes = [v for v in globals().values() if isinstance(v, type) and issubclass(v, PrivateUse1TestBase)]
    names = {name for cls in classes for name in vars(cls)}
    missing = set(KNOWN_FAILURES) - names
    if missing:
        raise AssertionError(f"KNOWN_FAILURES names tests that do not exist: {sorted(missing)}")


_check_known_failures()


def test_the_comparisons_catch_a_difference():
    # The classes above pass only if accel matches; a step that differs in the
    # last bits of its learning rate must not.
    sgd = next(o for o in optim_db if o.name == "SGD")
    target_params, _ = optimizer_steps(sgd, {"lr": 0.1}, TARGET)
    accel_params, _ = optimizer_steps(sgd, {"lr": 0.1 * (1 + 2**-20)}, ACCEL)
    try:
        compare_values(accel_params, target_params, "parameters", EXACT, accel_params, target_params)
    except AssertionError:
        pass
    else:
        raise AssertionError("a different optimizer step compared equal")
    # Errors: the same type with another message is a difference; device names and tensor reprs aside.
    outcomes = OutcomeComparison(TestOptimizersACCEL("test_optimizer_matches_target_SGD_accel_float32"), "optimizers", "SGD")
    assert outcomes.same_failure(RuntimeError("bad tensor([1.], device='accel:0') on accel:0"), RuntimeError("bad tensor([1.]) on cpu"), "x")
    assert outcomes.compared == 0  # SGD is not in RAISES_ALIKE: an error does not count as a comparison
    try:
        outcomes.same_failure(RuntimeError("accel's words"), RuntimeError("the reference's"), "x")
    except AssertionError:
        pass
    else:
        raise AssertionError("errors with other messages compared equal")
    # Gradients on accel that differ from the reference's must not compare equal either.
    x = torch.randn(4, 3, requires_grad=True)
    reference = gradients([x.sin()], [x], "cpu")
    xa = x.detach().to(ACCEL).requires_grad_()
    wrong = gradients([xa.cos()], [xa], ACCEL)
    try:
        compare_values(wrong, reference, "gradients", GRAD_MODE, (xa,), (x,), reference=GRAD_REFERENCE)
    except AssertionError:
        return
    raise AssertionError("different gradients compared equal")
