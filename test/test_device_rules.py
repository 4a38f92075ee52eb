"""Devices of operands and outputs: accel accepts a mix of accel and CPU tensors
exactly where CUDA's rules accept a mix of cuda and CPU tensors, over PyTorch's
OpInfo sample inputs.

For every OpInfo op (float32 where the target supports it) and its first
``SAMPLES_PER_OP`` samples that run on accel, the sweep makes mixed calls:

- one tensor argument (the input, a positional or keyword argument) moved to
  the CPU: a 0-dim one is a *CPU scalar*, any other a *CPU tensor*;
- the ``out=`` tensors on the CPU, 0-dim or of the result's shape;
- the in-place variant with ``self`` on the CPU.

CUDA's rule is a rule about kernels (TensorIterator's ``compute_types`` device
check, the ``out=`` checks of structured and generated kernels, CUDA's index
kernels): a kernel called with device tensors refuses a CPU tensor it writes to
(out=, in-place self), and refuses a CPU input unless it is a CPU scalar or an
index tensor of the index family (ATen's AdvancedIndex moves those); copies
(``copy_``, ``_to_copy``) move data between devices by design. Composite,
Python and view code is the same on every device, so a whole call's fate is
that of the kernels it reaches.

- Host runtime: every ATen call the mixed call makes is watched (a
  TorchDispatchMode, below autograd; composite kernels are entered so that
  their inner calls are watched too), and each kernel call that mixes accel and
  CPU tensors must be refused by accel exactly when the rule refuses it. CPU
  scalars are accepted there by every kernel; a CUDA kernel without
  TensorIterator's CPU-scalar allowance refuses some (see
  docs/known-limitations.md).
- CUDA runtime: the oracle is cuda itself: the same mixed call on cuda
  tensors must be refused exactly when accel's is.

A refused call must leave the CPU tensors CPU tensors over CPU memory: accel
memory never ends up under a tensor of another device.
"""

from __future__ import annotations

import itertools
import time

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from _comparison import ACCEL, CPU_TENSOR_ARGUMENTS, TARGET, Copier, manual_seed, tensor_leaves

from torch.testing._internal.common_methods_invocations import op_db  # noqa: E402

SAMPLES_PER_OP = 2
DTYPES = (torch.float32, torch.int64, torch.bool)
SEED = 1234

# Not run. The two sparse ops' samples are sparse CSR tensors, whose storage
# this sweep's checks of CPU operands cannot read (their device rules are
# test_sparse.py's); the jiterator ops are not ATen operators (test_opinfo.py
# excludes them for that reason).
EXCLUDED = {
    "sparse.sampled_addmm",
    "sparse.mm.reduce",
    "jiterator_unary",
    "jiterator_binary",
    "jiterator_binary_return_by_ref",
    "jiterator_4inputs_with_extra_args",
    "jiterator_2inputs_2outputs",
}

# Kernels that move data between devices by design: any mix is theirs to take.
COPIES = {"aten::copy_", "aten::_to_copy", "aten::_copy_from", "aten::_copy_from_and_resize"}
# CUDA's index kernels take CPU index tensors (argument 1, the indices).
INDEX_KERNELS = {
    "aten::index",
    "aten::index_put",
    "aten::index_put_",
    "aten::_index_put_impl_",
    "aten::_unsafe_index",
    "aten::_unsafe_index_put",
}
COMPOSITE_KEYS = (
    torch._C.DispatchKey.CompositeExplicitAutograd,
    torch._C.DispatchKey.CompositeExplicitAutogradNonFunctional,
)


def op_key(op) -> str:
    return f"{op.name}.{op.variant_test_name}" if op.variant_test_name else op.name


def first_line(error: BaseException) -> str:
    return f"{type(error).__name__}: {(str(error).strip().splitlines() or [''])[0][:140]}"


def is_device_error(error: BaseException) -> bool:
    return "device" in str(error)


def composite_key(func):
    """The composite kernel accel runs for ``func``, or None when accel has a
    kernel of its own (or the alias fallback) for it."""
    name = func.name()
    if torch._C._dispatch_has_kernel_for_dispatch_key(name, "PrivateUse1"):
        return None
    for key in COMPOSITE_KEYS:
        if torch._C._dispatch_has_kernel_for_dispatch_key(name, key):
            return key
    return None  # the alias fallback


def arguments(func, args, kwargs):
    """(index, value, written) for each argument in schema order."""
    for index, argument in enumerate(func._schema.arguments):
        if index < len(args):
            value = args[index]
        elif argument.name in kwargs:
            value = kwargs[argument.name]
        else:
            continue
        written = argument.alias_info is not None and argument.alias_info.is_write
        yield index, value, written


def tensors_of(value):
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for t in value if isinstance(t, torch.Tensor)]
    return []


def cuda_kernel_refuses(func, args, kwargs) -> bool | None:
    """CUDA's rule for one kernel call: whether it refuses the call's mix of
    accel and other tensors; None when it does not mix devices."""
    name = func._schema.name
    if name in COPIES:
        return None
    accel, others = False, []
    for index, value, written in arguments(func, args, kwargs):
        for tensor in tensors_of(value):
            if tensor.device.type == ACCEL:
                accel = True
            else:
                others.append((index, tensor, written))
    if not accel or not others:
        return None
    for index, tensor, written in others:
        if written or tensor.device.type != "cpu":
            return True
        if tensor.dim() != 0 and not (name in INDEX_KERNELS and index == 1):
            return True
    return False


class KernelRule(TorchDispatchMode):
    """Watches every kernel call of a mixed call and compares accel's
    accept/refuse with CUDA's rule (host runtime)."""

    def __init__(self):
        super().__init__()
        self.mismatches: list[str] = []
        self.kernels = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        key = composite_key(func)
        if key is not None:
            with self:  # watch the composite's own calls
                return func._op_dk(key, *args, **kwargs)
        refuses = cuda_kernel_refuses(func, args, kwargs)
        if refuses is not None:
            self.kernels += 1
        try:
            result = func(*args, **kwargs)
        except Exception as error:
            if refuses is False and is_device_error(error):
                self.mismatches.append(f"{func} refused ({first_line(error)}); cuda's kernel accepts")
            raise
        if refuses:
            self.mismatches.append(f"{func} accepted a mix cuda's kernel refuses")
        return result


def attempt(fn, call, out=None) -> BaseException | None:
    input, args, kwargs = call
    if out is not None:
        kwargs = {**kwargs, "out": out}
    manual_seed(SEED)
    try:
        fn(input, *args, **kwargs)
    except Exception as error:  # noqa: BLE001 - any exception is a refusal
        return error
    return None


def positions(input, args, kwargs):
    """Where a call's top-level tensors are: ("input",), ("args", i), ("kwargs", name)."""
    found = [("input",)] if isinstance(input, torch.Tensor) else []
    found += [("args", i) for i, a in enumerate(args) if isinstance(a, torch.Tensor)]
    found += [("kwargs", k) for k, v in kwargs.items() if isinstance(v, torch.Tensor)]
    return found


def get(call, position):
    input, args, kwargs = call
    if position[0] == "input":
        return input
    return args[position[1]] if position[0] == "args" else kwargs[position[1]]


def replaced(call, position, value):
    input, args, kwargs = call
    if position[0] == "input":
        return value, args, kwargs
    if position[0] == "args":
        args = list(args)
        args[position[1]] = value
        return input, tuple(args), kwargs
    return input, args, {**kwargs, position[1]: value}


def mixes_devices(call) -> bool:
    """Whether an accel tensor is left next to the CPU one (else it is a plain CPU call)."""
    return any(t.device.type == ACCEL for t in tensor_leaves(list(call)))


def intact(tensor: torch.Tensor) -> bool:
    """A CPU tensor over CPU memory that can still be read."""
    if tensor.device.type != "cpu" or tensor.untyped_storage().device.type != "cpu":
        return False
    tensor.clone()
    return True


class Sweep:
    def __init__(self):
        self.mismatches: list[str] = []
        self.calls = {"cpu scalar": 0, "cpu tensor": 0, "out=": 0, "in-place self": 0}
        self.kernels = 0
        self.ops = 0

    def check(self, op, where, fn, call, cpu_tensors, out=None, cuda_call=None, cuda_out=None):
        """Runs one mixed call on accel and compares it with CUDA's rule."""
        self.calls[where.split(" (")[0].split(" sample")[0]] += 1
        label = f"{op_key(op)} {where}"
        if TARGET == "cuda":
            error = attempt(fn, call, out)
            cuda_error = attempt(fn, cuda_call, cuda_out)
            if (error is None) != (cuda_error is None):
                accel = first_line(error) if error else "accepted"
                cuda = first_line(cuda_error) if cuda_error else "accepted"
                self.mismatches.append(f"{label}: cuda {cuda}; accel {accel}")
        else:
            rule = KernelRule()
            with rule:
                attempt(fn, call, out)
            self.kernels += rule.kernels
            self.mismatches += [f"{label}: {m}" for m in rule.mismatches]
        for tensor in cpu_tensors:
            if not intact(tensor):
                self.mismatches.append(f"{label}: a CPU tensor now has {tensor.untyped_storage().device} memory")

    def run_op(self, op):
        supported = op.supported_dtypes(TARGET)
        dtype = next((d for d in DTYPES if d in supported), None)
        if dtype is None:
            return
        self.cpu_args = op.name in CPU_TENSOR_ARGUMENTS
        manual_seed(SEED)
        try:
            # The generator itself: OpInfo.sample_inputs wraps it in PyTorch's
            # input tracking, which inspects the whole call stack (about 0.2 s
            # per op under pytest).
            generated = op.sample_inputs_func(op, TARGET, dtype, False)
            samples = list(itertools.islice(generated, 4 * SAMPLES_PER_OP))
        except Exception:  # noqa: BLE001 - an op whose samples cannot be built is not this test's subject
            return
        used = 0
        for index, sample in enumerate(samples):
            if used == SAMPLES_PER_OP:
                break
            # Only samples that run on accel as they are tell anything about devices.
            try:
                manual_seed(SEED)
                call = self.call_on(ACCEL, sample)
                result = op(call[0], *call[1], **call[2])
            except Exception:  # noqa: BLE001
                continue
            used += 1
            self.ops += used == 1
            self.moved_inputs(op, sample, index)
            if op.supports_out:
                self.cpu_outs(op, sample, index, result)
            if op.inplace_variant is not None:
                self.cpu_self(op, sample, index)

    def call_on(self, device, sample):
        return Copier(device, self.cpu_args).sample(sample)

    def moved_inputs(self, op, sample, index):
        for position in positions(*self.call_on(ACCEL, sample)):
            call = self.call_on(ACCEL, sample)
            moved = get(call, position).detach().cpu().requires_grad_(get(call, position).requires_grad)
            call = replaced(call, position, moved)
            if not mixes_devices(call):
                continue
            kind = "cpu scalar" if moved.dim() == 0 else "cpu tensor"
            cuda_call = None
            if TARGET == "cuda":
                cuda_call = self.call_on(TARGET, sample)
                cuda_call = replaced(cuda_call, position, get(cuda_call, position).detach().cpu())
            self.check(op, f"{kind} ({position}) sample {index}", op, call, [moved], cuda_call=cuda_call)

    def cpu_outs(self, op, sample, index, result):
        results = result if isinstance(result, tuple) else (result,)
        if not all(isinstance(r, torch.Tensor) for r in results):
            return
        for shape in ("0-dim", "result-shaped"):
            outs = tuple(torch.empty(() if shape == "0-dim" else r.shape, dtype=r.dtype) for r in results)
            cuda_outs = tuple(torch.empty_like(o) for o in outs)
            pick = (lambda t: t) if isinstance(result, tuple) else (lambda t: t[0])
            self.check(
                op,
                f"out= ({shape}) sample {index}",
                op,
                self.call_on(ACCEL, sample),
                list(outs),
                out=pick(outs),
                cuda_call=self.call_on(TARGET, sample) if TARGET == "cuda" else None,
                cuda_out=pick(cuda_outs),
            )

    def cpu_self(self, op, sample, index):
        call = self.call_on(ACCEL, sample)
        if not isinstance(call[0], torch.Tensor) or not mixes_devices((None, call[1], call[2])):
            return  # no accel tensor besides self: a plain CPU call
        self_cpu = call[0].detach().cpu()
        cuda_call = None
        if TARGET == "cuda":
            cuda_call = self.call_on(TARGET, sample)
            cuda_call = (cuda_call[0].detach().cpu(), cuda_call[1], cuda_call[2])
        self.check(
            op, f"in-place self sample {index}", op.inplace_variant, (self_cpu, call[1], call[2]), [self_cpu], cuda_call=cuda_call
        )


# The samples' own deprecation warnings, and those of generated out= wrappers
# that resize a CPU out= before refusing it (as on cuda), are not the subject.
@pytest.mark.filterwarnings("ignore::UserWarning")
def test_cpu_operands_and_outputs_follow_cudas_rule(capsys):
    sweep = Sweep()
    start = time.perf_counter()
    for op in op_db:
        if op_key(op) not in EXCLUDED:
            sweep.run_op(op)
    seconds = time.perf_counter() - start
    with capsys.disabled():
        print(
            f"\ndevice rules: {sweep.ops} ops, mixed calls {sweep.calls}, "
            f"{sweep.kernels} mixing kernel calls checked, {seconds:.0f} s"
        )
    assert sweep.ops >= 500, sweep.ops  # the sweep must not go vacuous
    assert all(count > 100 for count in sweep.calls.values()), sweep.calls
    if TARGET != "cuda":
        assert sweep.kernels > 1000, sweep.kernels
    assert not sweep.mismatches, "\n".join(sweep.mismatches[:60]) + f"\n({len(sweep.mismatches)} in all)"
