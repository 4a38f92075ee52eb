"""Random programs: one statement at a time, chosen from what the program's
tensors are on the target side so far (their shapes, dtypes, devices).

A program is a list of ``Step``s, each one line of Python over named values
(``t0``, ``t1``, ...), the devices ``D[0]``, ``D[1]`` (accel:0 and accel:1 on
accel; the target's device on the target side) and ``CPU``, and the helpers of
``prelude``. ``Generator.next_step`` looks at the target side's namespace to
pick arguments that mostly make sense (broadcastable shapes, valid dims, index
tensors in range) and sometimes do not (wrong ``out=`` sizes, bad dims, the
wrong device, in-place writes to expanded tensors), so that both the results and
the errors of the two devices are compared.
"""

from __future__ import annotations

import dataclasses
import random

import torch

FLOATS = (torch.float32, torch.float64, torch.float16, torch.bfloat16)
INTS = (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8)
COMPLEX = (torch.complex64, torch.complex128)
DTYPES = FLOATS + INTS + COMPLEX + (torch.bool,)
DTYPE_WEIGHTS = (30, 10, 7, 7, 15, 7, 2, 2, 3, 5, 3, 8)


@dataclasses.dataclass(frozen=True)
class Step:
    """One statement. ``outs``: the names it binds. ``accel_only``: it mixes
    devices in a way CUDA's rules refuse (accel:0 with accel:1, or a CPU tensor
    that is written to or is no scalar); on the target side, where every device
    is the same, it would run, so only accel runs it, and it must raise and
    leave every tensor as it was. ``family``: what kind of operation it is."""

    src: str
    outs: tuple[str, ...] = ()
    accel_only: bool = False
    family: str = ""
    # The target side's statement where it must differ: a conversion to another
    # accel device or to the CPU copies on accel, but is a no-op on the target
    # side, whose devices are all one; there it copies explicitly (copy=True).
    ref_src: str | None = None


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype)  # "torch.float32"


UNARY = (
    "neg abs exp log sqrt sin cos tanh sigmoid relu floor ceil round trunc sign reciprocal erf expm1 log1p rsqrt "
    "bitwise_not logical_not isnan isinf isfinite nan_to_num square frac signbit angle positive sgn exp2 sinh "
    "asin atan atanh digamma lgamma sinc deg2rad logit i0 conj_physical"
).split()
UNARY_INPLACE = set(UNARY) - {"isnan", "isinf", "isfinite", "signbit", "angle", "positive", "logical_not"}
BINARY = (
    "add sub mul div true_divide floor_divide remainder fmod pow maximum minimum fmax fmin atan2 bitwise_and "
    "bitwise_or bitwise_xor bitwise_left_shift bitwise_right_shift eq ne lt le gt ge logical_and logical_or "
    "logical_xor copysign hypot nextafter xlogy ldexp heaviside gcd float_power"
).split()
# Left out, PyTorch 2.11's CPU kernels crash the process (SIGFPE: an integer
# division overflows) on every device that runs them: lcm with the dtype's
# minimum (its gcd comes out -1), and div(rounding_mode="trunc") of integers,
# minimum by -1 (docs/testing.md).
REDUCTIONS = (
    "sum mean prod amax amin max min argmax argmin std var norm logsumexp cumsum cumprod cummax cummin all any "
    "sort argsort topk median nanmedian kthvalue mode count_nonzero nansum aminmax var_mean std_mean"
).split()
FAMILIES = {
    "base": 4,
    "view": 14,
    "unary": 8,
    "binary": 14,
    "inplace": 12,
    "out": 8,
    "reduction": 9,
    "index": 9,
    "index_assign": 7,
    "convert": 7,
    "shape": 6,
    "matmul": 4,
    "resize_set": 4,
    "autograd": 5,
    "python": 3,
    "random": 2,
}


class Generator:
    """Makes the next step of a program from a seeded ``random.Random`` and the
    target side's namespace. ``devices[name]``: on which device the generator
    put each tensor (0, 1, or "cpu")."""

    def __init__(self, seed: int, cuda_target: bool = False):
        self.rng = random.Random(seed)
        self.count = 0
        self.devices: dict[str, object] = {}
        self.pending: list[Step] = []  # steps that must come next
        # torch 2.11 cannot run a CUDA backward in a process with a PrivateUse1
        # backend (docs/known-limitations.md): no autograd against cuda.
        self.autograd = not cuda_target

    # -- names and picks ------------------------------------------------------

    def fresh(self) -> str:
        name = f"t{self.count}"
        self.count += 1
        return name

    def tensors(self, ns: dict, pred=None) -> list[str]:
        names = [n for n, v in ns.items() if n in self.devices and isinstance(v, torch.Tensor)]
        return [n for n in names if pred is None or pred(ns[n])]

    def pick(self, ns: dict, pred=None, device=None) -> str | None:
        names = self.tensors(ns, pred)
        if device is not None:
            names = [n for n in names if self.devices[n] == device]
        return self.rng.choice(names) if names else None

    def pick_device_tensor(self, ns: dict, pred=None) -> str | None:
        """A tensor on an accel device (most operations' main input)."""
        names = [n for n in self.tensors(ns, pred) if self.devices[n] != "cpu"]
        return self.rng.choice(names) if names else None

    def dev(self, tag) -> str:
        return "CPU" if tag == "cpu" else f"D[{tag}]"

    # -- values ---------------------------------------------------------------

    def scalar_for(self, dtype: torch.dtype) -> str:
        r = self.rng
        if dtype.is_complex and r.random() < 0.5:
            return repr(complex(r.choice([0, 1, -2.5]), r.choice([1, -0.5])))
        if (dtype.is_floating_point or dtype.is_complex) and r.random() < 0.7:
            return r.choice(["0.5", "-2.0", "3.25", "float('nan')", "float('inf')", "-0.0", "1e-3", "100.0"])
        if dtype == torch.bool and r.random() < 0.5:
            return r.choice(["True", "False"])
        return str(r.choice([0, 1, 2, 3, -1, -7, 100]))

    def random_shape(self, max_dims: int = 4) -> tuple[int, ...]:
        r = self.rng
        ndim = r.choices(range(max_dims + 1), weights=(15, 30, 30, 20, 5)[: max_dims + 1])[0]
        return tuple(r.choices((0, 1, 2, 3, 4, 5), weights=(4, 20, 25, 20, 15, 10))[0] for _ in range(ndim))

    def random_dtype(self) -> torch.dtype:
        return self.rng.choices(DTYPES, weights=DTYPE_WEIGHTS)[0]

    def base_step(self, device=None, shape=None, dtype=None) -> Step:
        r = self.rng
        dtype = dtype or self.random_dtype()
        shape = self.random_shape() if shape is None else shape
        # Strides: contiguous over a permutation of the dims, with gaps, and
        # some dims expanded (stride 0).
        order = list(range(len(shape)))
        if r.random() < 0.4:
            r.shuffle(order)
        stride = [0] * len(shape)
        step = 1
        for d in reversed(order):
            stride[d] = step
            step *= max(shape[d], 1) * (r.choice((1, 1, 1, 2, 3)) if r.random() < 0.3 else 1)
        for d in range(len(shape)):
            if r.random() < 0.08:
                stride[d] = 0
        offset = r.choice((0, 0, 0, 1, 2, 5))
        if device is None:
            device = r.choices((0, 1), weights=(80, 20))[0]
        grad = (dtype.is_floating_point or dtype.is_complex) and self.autograd and r.random() < 0.3
        name = self.fresh()
        self.devices[name] = device
        args = f"{r.randrange(1 << 30)}, {dtype_name(dtype)}, {tuple(shape)}, {tuple(stride)}, {offset}, {self.dev(device)}"
        if grad:
            args += ", requires_grad=True"
        return Step(f"{name} = base({args})", (name,), family="base")

    def cpu_scalar_step(self) -> Step:
        dtype = self.rng.choice((torch.float32, torch.float64, torch.int64, torch.bool, torch.complex64, torch.float16))
        name = self.fresh()
        self.devices[name] = "cpu"
        return Step(f"{name} = torch.tensor({self.scalar_for(dtype)}, dtype={dtype_name(dtype)})", (name,), family="base")

    def operand(self, ns: dict, x: str) -> tuple[str, bool]:
        """A second operand for ``x``: a Python scalar, a 0-dim CPU tensor, or a
        tensor whose shape broadcasts with x's; sometimes one that CUDA's rules
        refuse (second value True)."""
        r = self.rng
        t = ns[x]
        choice = r.random()
        if choice < 0.25:
            return self.scalar_for(t.dtype if r.random() < 0.7 else self.random_dtype()), False
        if choice < 0.35:
            cpu = self.pick(ns, lambda v: v.dim() == 0, device="cpu")
            if cpu:
                return cpu, False
        if choice < 0.38:
            # Another device, or a CPU tensor with dims: CUDA refuses both.
            other = self.pick(ns, lambda v: v.dim() > 0 and broadcastable(v.shape, t.shape))
            if other and self.devices[other] != self.devices[x]:
                return other, True
        same = self.tensors(ns, lambda v: broadcastable(v.shape, t.shape))
        same = [n for n in same if self.devices[n] == self.devices[x]]
        if same and r.random() < 0.9:
            return r.choice(same), False
        other = self.pick(ns, device=self.devices[x])
        return (other, False) if other else (self.scalar_for(t.dtype), False)

    # -- the next step --------------------------------------------------------

    def first_steps(self) -> list[Step]:
        steps = [self.base_step() for _ in range(self.rng.randint(2, 4))]
        for _ in range(self.rng.randint(0, 2)):
            steps.append(self.cpu_scalar_step())
        return steps

    def next_step(self, ns: dict) -> Step:
        if self.pending:
            return self.pending.pop(0)
        for _ in range(50):
            family = self.rng.choices(list(FAMILIES), weights=list(FAMILIES.values()))[0]
            step = getattr(self, "gen_" + family)(ns)
            if step is not None:
                return dataclasses.replace(step, family=family)
        return self.base_step()

    def gen_base(self, ns):
        if self.rng.random() < 0.2:
            return self.cpu_scalar_step()
        # Often a base shaped like an existing tensor, to combine with it.
        like = self.pick_device_tensor(ns) if self.rng.random() < 0.5 else None
        if like:
            return self.base_step(device=self.devices[like], shape=tuple(ns[like].shape))
        return self.base_step()

    def result(self, src_expr: str, device, outs_extra=()) -> Step:
        name = self.fresh()
        self.devices[name] = device
        return Step(f"{name} = {src_expr}", (name, *outs_extra))

    def gen_view(self, ns):
        r = self.rng
        x = self.pick(ns, lambda v: v.layout == torch.strided)
        if x is None:
            return None
        t = ns[x]
        nd = t.dim()
        dim = r.randrange(-nd, nd) if nd else 0
        options = ["unsqueeze", "flatten", "detach", "alias", "view_same", "as_strided", "reshape", "expand", "view_dtype"]
        if nd:
            options += ["transpose", "narrow", "select", "slice", "squeeze", "movedim", "unflatten", "chunk", "unfold", "flip_T"]
        if nd >= 2:
            options += ["diagonal", "t", "permute", "mT"]
        if t.is_complex():
            options += ["real", "imag", "view_as_real", "conj"]
        if t.dim() and t.shape[-1] == 2 and t.stride()[-1] == 1 and t.dtype in (torch.float32, torch.float64):
            options.append("view_as_complex")
        if t.is_floating_point() or t.is_complex():
            options.append("neg_view")
        op = r.choice(options)
        n = t.shape[dim] if nd else 0
        if op == "unsqueeze":
            e = f"{x}.unsqueeze({r.randint(-nd - 1, nd)})"
        elif op == "flatten":
            e = f"{x}.flatten()" if nd < 2 else f"{x}.flatten({r.randrange(nd - 1)}, -1)"
        elif op == "detach":
            e = f"{x}.detach()"
        elif op == "alias":
            e = f"{x}.view_as({x})"
        elif op == "view_same":
            e = f"{x}.view(-1)" if r.random() < 0.5 else f"{x}.view({tuple(t.shape)[::-1] if r.random() < 0.3 else tuple(t.shape)})"
        elif op == "reshape":
            shape = list(t.shape)
            r.shuffle(shape)
            e = f"{x}.reshape({tuple(shape)})"
        elif op == "expand":
            e = f"{x}.expand({(r.randint(1, 3),) + tuple(t.shape)})"
            if nd and t.shape[-1] == 1 and r.random() < 0.5:
                e = f"{x}.expand({tuple(t.shape[:-1]) + (r.randint(0, 4),)})"
        elif op == "as_strided":
            extent = t.untyped_storage().nbytes() // t.element_size()
            size = tuple(r.randint(0, 3) for _ in range(r.randint(0, 2)))
            stride = tuple(r.randint(0, 2) for _ in size)
            span = 1 + sum((a - 1) * b for a, b in zip(size, stride)) if all(size) else 0
            offset = r.randint(0, max(extent - span, 0)) if r.random() < 0.9 else extent
            e = f"{x}.as_strided({size}, {stride}, {offset})"
        elif op == "view_dtype":
            e = f"{x}.view({dtype_name(self.random_dtype())})"
        elif op == "transpose":
            e = f"{x}.transpose({dim}, {r.randrange(-nd, nd)})"
        elif op == "narrow":
            start = r.randint(0, n)
            e = f"{x}.narrow({dim}, {start}, {r.randint(0, n - start)})"
        elif op == "select":
            e = f"{x}.select({dim}, {r.randint(-n, n - 1) if n else 0})"
        elif op == "slice":
            idx = [":"] * nd
            idx[dim % nd] = f"{r.choice(['', '1', '-2'])}:{r.choice(['', '3', '-1'])}:{r.choice([1, 2, 3])}"
            e = f"{x}[{', '.join(idx)}]"
        elif op == "squeeze":
            e = f"{x}.squeeze({dim})" if r.random() < 0.7 else f"{x}.squeeze()"
        elif op == "movedim":
            e = f"{x}.movedim({dim}, {r.randrange(-nd, nd)})"
        elif op == "unflatten":
            e = f"{x}.unflatten({dim}, (1, {n}))" if r.random() < 0.7 else f"{x}.unflatten({dim}, (-1, 1))"
        elif op == "chunk":
            e = f"{x}.{r.choice(['chunk', 'split'])}({r.randint(1, 3)}, {dim})[{r.choice([0, -1])}]"
        elif op == "unfold":
            e = f"{x}.unfold({dim}, {r.randint(0, max(n, 1))}, {r.randint(1, 2)})"
        elif op == "flip_T":
            e = f"{x}.mT" if nd >= 2 else f"{x}.T"
        elif op == "diagonal":
            e = f"{x}.diagonal({r.randint(-1, 1)}, {dim}, {r.randrange(-nd, nd)})"
        elif op == "t":
            e = f"{x}.t()" if nd == 2 else f"{x}.transpose(0, 1)"
        elif op == "permute":
            perm = list(range(nd))
            r.shuffle(perm)
            e = f"{x}.permute({tuple(perm)})"
        elif op == "mT":
            e = f"{x}.mT"
        elif op in ("real", "imag"):
            e = f"{x}.{op}"
        elif op == "view_as_real":
            e = f"torch.view_as_real({x})"
        elif op == "view_as_complex":
            e = f"torch.view_as_complex({x})"
        elif op == "conj":
            e = f"{x}.conj()"
        else:  # neg_view
            e = f"torch._neg_view({x})"
        return self.result(e, self.devices[x])

    def gen_unary(self, ns):
        x = self.pick(ns)
        if x is None:
            return None
        op = self.rng.choice(UNARY)
        return self.result(f"torch.{op}({x})", self.devices[x])

    def gen_binary(self, ns):
        r = self.rng
        x = self.pick_device_tensor(ns)
        if x is None:
            return None
        y, refused = self.operand(ns, x)
        op = r.choice(BINARY + ["add_alpha", "div_mode", "where", "lerp", "addcmul", "clamp"])
        if op == "add_alpha":
            e = f"torch.add({x}, {y}, alpha={r.choice([2, -1, 0.5])})"
        elif op == "div_mode":
            mode = "trunc" if ns[x].is_floating_point() and r.random() < 0.5 else "floor"
            e = f"torch.div({x}, {y}, rounding_mode={mode!r})"
        elif op == "where":
            cond = self.pick(ns, lambda v: v.dtype == torch.bool, device=self.devices[x])
            e = f"torch.where({cond or f'{x} > 0'}, {x}, {y})"
        elif op == "lerp":
            e = f"torch.lerp({x}, {y}, {r.choice(['0.5', y])})"
        elif op == "addcmul":
            e = f"torch.{r.choice(['addcmul', 'addcdiv'])}({x}, {y}, {x}, value={r.choice([1, 2, -0.5])})"
        elif op == "clamp":
            e = f"torch.clamp({x}, min={y}, max={r.choice(['None', '2', y])})"
        elif y in ns and r.random() < 0.2:
            e = f"torch.{op}({y}, {x})"  # the other tensor first
        else:
            e = f"torch.{op}({x}, {y})"
        step = self.result(e, self.devices[x])
        return dataclasses.replace(step, accel_only=refused)

    def gen_inplace(self, ns):
        r = self.rng
        x = self.pick(ns, lambda v: v.layout == torch.strided)
        if x is None:
            return None
        t = ns[x]
        if self.devices[x] == "cpu":
            # A CPU scalar written with an accel operand: CUDA refuses it.
            y = self.pick_device_tensor(ns, lambda v: broadcastable(v.shape, t.shape))
            if y is None:
                return None
            return Step(f"{x}.add_({y})", accel_only=True)
        choice = r.random()
        if choice < 0.35:
            y, refused = self.operand(ns, x)
            op = r.choice(["add_", "sub_", "mul_", "div_", "copy_", "copy_", "pow_", "bitwise_and_", "clamp_min_", "lerp_", "fmod_", "masked_fill_"])
            if op == "copy_":
                if not y[0].isalpha():
                    y = f"torch.tensor({y})"
                    return Step(f"{x}.copy_({y}.to({self.dev(self.devices[x])}))")
                # copy_ takes any device and dtype.
                return Step(f"{x}.copy_({y}{', non_blocking=True' if r.random() < 0.2 else ''})")
            if op == "lerp_":
                return Step(f"{x}.lerp_({y}, 0.25)", accel_only=refused)
            if op == "masked_fill_":
                mask = self.pick(ns, lambda v: v.dtype == torch.bool and broadcastable(v.shape, t.shape), device=self.devices[x])
                return Step(f"{x}.masked_fill_({mask or f'{x} != {x}'}, {self.scalar_for(t.dtype)})") if mask else None
            return Step(f"{x}.{op}({y})", accel_only=refused)
        if choice < 0.65:
            op = r.choice(sorted(UNARY_INPLACE))
            return Step(f"{x}.{op}_()")
        op = r.choice(["zero_", "fill_", "fill_t", "clamp_", "copy_ones", "t_", "unsqueeze_", "squeeze_", "transpose_", "as_strided_", "detach_", "requires_grad_"])
        nd = t.dim()
        if op == "fill_":
            return Step(f"{x}.fill_({self.scalar_for(t.dtype)})")
        if op == "fill_t":
            s = self.pick(ns, lambda v: v.dim() == 0)
            return Step(f"{x}.fill_({s})") if s else None
        if op == "clamp_":
            return Step(f"{x}.clamp_({self.scalar_for(t.dtype)}, {self.scalar_for(t.dtype)})")
        if op == "copy_ones":
            return Step(f"{x}.copy_(torch.ones_like({x}))")
        if op == "t_":
            return Step(f"{x}.t_()")
        if op == "unsqueeze_":
            return Step(f"{x}.unsqueeze_({r.randint(-nd - 1, nd)})")
        if op == "squeeze_":
            return Step(f"{x}.squeeze_()")
        if op == "transpose_":
            return Step(f"{x}.transpose_({r.randint(-1, 1)}, 0)")
        if op == "as_strided_":
            return Step(f"{x}.as_strided_({tuple(t.shape)[::-1]}, {tuple(t.stride())[::-1]}, {t.storage_offset()})")
        if op == "detach_":
            return Step(f"{x}.detach_()")
        return Step(f"{x}.requires_grad_()")

    def out_tensor(self, ns, x):
        """An ``out=`` tensor: often a tensor of the program (a view, wrong size or
        dtype, overlapping an input), sometimes a fresh empty one; rarely a CPU
        tensor (CUDA refuses it, 0-dim or not)."""
        r = self.rng
        if r.random() < 0.04:
            cpu = self.pick(ns, device="cpu")
            if cpu:
                return cpu, True
        if r.random() < 0.25:
            dtype = ns[x].dtype if r.random() < 0.7 else self.random_dtype()
            name = self.fresh()
            self.devices[name] = self.devices[x]
            # Its own step before the call: the call may resize it and fail, and
            # the bytes it added are then compared from the size it had.
            self.pending.append(Step(f"{name} = torch.zeros({r.choice([0, 1, 3])}, dtype={dtype_name(dtype)}, device={self.dev(self.devices[x])})", (name,), family="base"))
            return name, False
        o = self.pick(ns, device=self.devices[x])
        return o, False

    def gen_out(self, ns):
        r = self.rng
        x = self.pick_device_tensor(ns)
        if x is None:
            return None
        o, refused = self.out_tensor(ns, x)
        kind = r.random()
        if kind >= 0.6 and o in ns and not refused and isinstance(ns[o], torch.Tensor) and ns[o].untyped_storage()._cdata == ns[x].untyped_storage()._cdata:
            # Reductions, cat, mm, ... do not check that out= overlaps an input:
            # resized, it reads bytes no one wrote, on every device.
            kind = r.random() * 0.6
        if kind < 0.3:
            e = f"torch.{r.choice(UNARY)}({x}, out={o})"
        elif kind < 0.6:
            y, refused2 = self.operand(ns, x)
            refused = refused or refused2
            e = f"torch.{r.choice(BINARY)}({x}, {y}, out={o})"
        elif kind < 0.8:
            nd = ns[x].dim()
            dim = r.randrange(-nd, nd) if nd else 0
            e = f"torch.{r.choice(['sum', 'prod', 'mean', 'amax', 'cumsum', 'logsumexp', 'nansum', 'std'])}({x}, {dim}, out={o})"
        else:
            y = self.pick(ns, lambda v: v.dtype == ns[x].dtype, device=self.devices[x]) or x
            e = r.choice(
                [
                    f"torch.cat([{x}, {y}], out={o})",
                    f"torch.mm({x}, {y}, out={o})",
                    f"torch.remainder({x}, 0, out={o})",
                    f"torch.clamp({x}, 0, 1, out={o})",
                    f"torch.abs({x}, out={o})",
                    f"torch.index_select({x}, 0, torch.tensor([0], device={self.dev(self.devices[x])}), out={o})",
                ]
            )
        name = self.fresh()
        self.devices[name] = self.devices[x]
        step = Step(f"{name} = {e}", (name,), accel_only=refused)
        if self.pending:
            self.pending.append(dataclasses.replace(step, family="out"))
            return self.pending.pop(0)
        return step

    def gen_reduction(self, ns):
        r = self.rng
        x = self.pick_device_tensor(ns)
        if x is None:
            return None
        t = ns[x]
        nd = t.dim()
        op = r.choice(REDUCTIONS)
        dim = r.randrange(-nd, nd) if nd else r.choice([0, -1])
        if r.random() < 0.1:
            dim = nd + 1  # out of range
        keep = r.random() < 0.3
        if op in ("sum", "mean", "prod", "nansum") and r.random() < 0.3:
            e = f"{x}.{op}(dtype={dtype_name(r.choice(DTYPES))})"
        elif op in ("sum", "mean", "amax", "amin", "nansum", "logsumexp", "std", "var", "count_nonzero") and nd >= 2 and r.random() < 0.3:
            e = f"{x}.{op}(({0}, {nd - 1}))"
        elif op in ("median", "nanmedian") and torch._debug_has_internal_overlap(t) != 0:
            # PyTorch 2.11's CPU median/nanmedian over a dim read out of bounds
            # when the input's elements overlap (an expanded tensor): garbage on
            # every device alike, so not compared (docs/testing.md).
            e = f"{x}.contiguous().{op}()"
        elif op in ("max", "min", "median", "nanmedian", "mode", "sort", "cummax", "cummin", "aminmax", "var_mean", "std_mean", "kthvalue", "topk"):
            extra = ""
            if op in ("kthvalue", "topk"):
                extra = f"{r.randint(0, 3)}, "
            if op in ("aminmax",):
                e = f"torch.aminmax({x}, dim={dim}, keepdim={keep})"
            elif op in ("sort",):
                e = f"torch.sort({x}, dim={dim}, descending={r.random() < 0.5}, stable={r.random() < 0.5})"
            elif op in ("var_mean", "std_mean"):
                e = f"torch.{op}({x}, {dim}, correction={r.choice([0, 1, 2])})"
            elif op in ("cummax", "cummin"):
                e = f"torch.{op}({x}, {dim})"
            else:
                e = f"torch.{op}({x}, {extra}{dim}{', keepdim=True' if keep and op != 'topk' else ''})"
            name, second = self.fresh(), self.fresh()
            self.devices[name] = self.devices[second] = self.devices[x]
            return Step(f"{name}, {second} = {e}", (name, second))
        elif op == "norm":
            p = r.choice(["1", "2", "3", "float('inf')", "0"])
            e = f"{x}.norm({p}, {dim})"
        elif op in ("cumsum", "cumprod"):
            e = f"{x}.{op}({dim})"
        elif op == "argsort":
            e = f"{x}.argsort(dim={dim}, stable=True)"
        elif op in ("std", "var"):
            e = f"{x}.{op}({dim}, correction={r.choice([0, 1])}, keepdim={keep})"
        elif r.random() < 0.3:
            e = f"{x}.{op}()"
        else:
            e = f"{x}.{op}({dim}{', keepdim=True' if keep else ''})"
        return self.result(e, self.devices[x])

    def index_tensor(self, ns, x, dim) -> str:
        """An integer index tensor for dim ``dim`` of ``x``, mostly in range, on x's
        device or the CPU (CUDA's index kernels move it)."""
        r = self.rng
        t = ns[x]
        n = t.shape[dim] if t.dim() else 1
        values = [r.randint(-n, n - 1) if n else 0 for _ in range(r.randint(0, 4))]
        if r.random() < 0.05:
            values.append(n + 2)
        where = self.dev(self.devices[x]) if r.random() < 0.8 else "CPU"
        return f"torch.tensor({values}, dtype=torch.int64, device={where})"

    def gen_index(self, ns):
        r = self.rng
        x = self.pick_device_tensor(ns, lambda v: v.dim() > 0)
        if x is None:
            return None
        t = ns[x]
        nd = t.dim()
        dim = r.randrange(nd)
        n = t.shape[dim]
        dev = self.dev(self.devices[x])
        kind = r.choice(["int", "tensor", "mask", "mixed", "index_select", "gather", "take", "masked_select", "nonzero", "ellipsis"])
        if kind == "int":
            e = f"{x}[{r.randint(-n, n - 1) if n else 0}]"
        elif kind == "tensor":
            e = f"{x}[{self.index_tensor(ns, x, 0)}]"
        elif kind == "mask":
            mask = self.pick(ns, lambda v: v.dtype == torch.bool and tuple(v.shape) == tuple(t.shape[: v.dim()]) and v.dim() > 0)
            e = f"{x}[{mask or f'{x} == {x}'}]"
        elif kind == "mixed":
            idx = [":"] * nd
            idx[dim] = self.index_tensor(ns, x, dim)
            if nd > 1:
                idx[(dim + 1) % nd] = r.choice(["None", "1:", "0", "..."])
            e = f"{x}[{', '.join(idx)}]"
        elif kind == "index_select":
            e = f"torch.index_select({x}, {dim}, {self.index_tensor(ns, x, dim).replace('CPU', dev)})"
        elif kind == "gather":
            idx = f"torch.randint(0, {max(n, 1)}, {tuple(t.shape)}, generator=torch.Generator().manual_seed({r.randrange(1000)})).to({dev})"
            e = f"torch.gather({x}, {dim}, {idx})"
        elif kind == "take":
            e = f"torch.take({x}, torch.tensor([{r.randint(-1, max(t.numel() - 1, 0))}], device={dev}))"
        elif kind == "masked_select":
            e = f"torch.masked_select({x}, {x} != 0)"
        elif kind == "nonzero":
            e = f"torch.nonzero({x})" if r.random() < 0.7 else f"torch.unique({x}, sorted=True, return_inverse=False)"
        else:
            e = f"{x}[..., {r.randint(-1, 0)}]" if nd else f"{x}[...]"
        return self.result(e, self.devices[x])

    def gen_index_assign(self, ns):
        r = self.rng
        x = self.pick_device_tensor(ns, lambda v: v.dim() > 0)
        if x is None:
            return None
        t = ns[x]
        nd = t.dim()
        dim = r.randrange(nd)
        n = t.shape[dim]
        dev = self.dev(self.devices[x])
        value, refused = self.operand(ns, x)
        kind = r.choice(["setitem_int", "setitem_tensor", "setitem_mask", "setitem_slice", "index_put_", "index_add_", "index_copy_", "index_fill_", "scatter_", "scatter_add_", "scatter_reduce_", "put_", "masked_scatter_"])
        if kind in ("setitem_int", "setitem_slice") and value[0] == "t" and ns[value].dim() == 0 and self.devices[value] != "cpu":
            # Basic indexing with a 0-dim value: copy_to (ATen/TensorIndexing.h)
            # fills with a 0-dim CPU value (fill_) but expands and copies any
            # other (copy_), as on cuda; on the target side the value is a CPU
            # tensor, so there it is viewed and expanded as copy_to does for cuda.
            index = f"{r.randint(-n, n - 1) if n else 0}" if kind == "setitem_int" else r.choice(["1:", "::2", ":-1", "..."])
            return Step(f"{x}[{index}] = {value}", accel_only=refused, ref_src=f"{x}[{index}] = {value}.view(()).expand({x}[{index}].shape)")
        if kind in ("setitem_int", "setitem_slice"):
            # Basic indexing writes with copy_, which takes any device.
            refused = False
        if kind == "setitem_int":
            return Step(f"{x}[{r.randint(-n, n - 1) if n else 0}] = {value}", accel_only=refused)
        if kind == "setitem_tensor":
            return Step(f"{x}[{self.index_tensor(ns, x, 0)}] = {value}", accel_only=refused)
        if kind == "setitem_mask":
            # A one-element value with a mask is masked_fill_(mask, value.item())
            # (ATen's index_put_), which takes a CPU value on cuda too.
            if refused and ns[value].numel() == 1 and self.devices[value] == "cpu":
                refused = False
            return Step(f"{x}[{x} > 0] = {value}", accel_only=refused)
        if kind == "setitem_slice":
            return Step(f"{x}[{r.choice(['1:', '::2', ':-1', '...'])}] = {value}", accel_only=refused)
        index = self.index_tensor(ns, x, dim).replace("CPU", dev)
        src = self.pick(ns, lambda v: v.dtype == t.dtype, device=self.devices[x]) or x
        if kind == "index_put_":
            return Step(f"{x}.index_put_(({self.index_tensor(ns, x, 0)},), {value if not refused else '1'}, accumulate={r.random() < 0.5})")
        if kind == "index_add_":
            return Step(f"{x}.index_add_({dim}, {index}, {src}, alpha={r.choice([1, 2])})")
        if kind == "index_copy_":
            return Step(f"{x}.index_copy_({dim}, {index}, {src})")
        if kind == "index_fill_":
            return Step(f"{x}.index_fill_({dim}, {index}, {self.scalar_for(t.dtype)})")
        if kind in ("scatter_", "scatter_add_", "scatter_reduce_"):
            shape = tuple(min(a, b) for a, b in zip(t.shape, ns[src].shape)) if ns[src].dim() == nd else tuple(t.shape)
            idx = f"torch.randint(0, {max(n, 1)}, {shape}, generator=torch.Generator().manual_seed({r.randrange(1000)})).to({dev})"
            if kind == "scatter_reduce_":
                return Step(f"{x}.scatter_reduce_({dim}, {idx}, {src}, {r.choice(['sum', 'prod', 'mean', 'amax', 'amin'])!r}, include_self={r.random() < 0.5})")
            return Step(f"{x}.{kind}({dim}, {idx}, {src})")
        if kind == "put_":
            return Step(f"{x}.put_(torch.tensor([0, -1], device={dev}), torch.tensor([1, 2], dtype={dtype_name(t.dtype)}, device={dev}), accumulate={r.random() < 0.5})")
        return Step(f"{x}.masked_scatter_({x} != 0, {src})")

    def gen_convert(self, ns):
        r = self.rng
        x = self.pick(ns)
        if x is None:
            return None
        here = self.devices[x]
        kind = r.choice(["dtype", "device", "both", "cpu", "method", "contiguous", "clone", "like", "new", "copy_across"])
        if kind == "dtype":
            return self.result(f"{x}.to({dtype_name(self.random_dtype())}{', copy=True' if r.random() < 0.2 else ''})", here)
        if kind == "device":
            to = r.choice([0, 1, "cpu"])
            return self.moved(x, to, f"{x}.to({self.dev(to)}{', non_blocking=True' if r.random() < 0.2 else ''})")
        if kind == "both":
            to, dtype = r.choice([0, 1]), dtype_name(self.random_dtype())
            return self.moved(x, to, f"{x}.to({self.dev(to)}, {dtype})", dtype)
        if kind == "cpu":
            return self.moved(x, "cpu", f"{x}.cpu()")
        if kind == "method":
            return self.result(f"{x}.{r.choice(['float', 'double', 'half', 'bfloat16', 'int', 'long', 'bool', 'cfloat'])}()", here)
        if kind == "contiguous":
            fmt = "torch.channels_last" if ns[x].dim() == 4 and r.random() < 0.5 else "torch.contiguous_format"
            return self.result(f"{x}.contiguous(memory_format={fmt})", here)
        if kind == "clone":
            return self.result(f"{x}.clone(memory_format=torch.preserve_format)", here)
        if kind == "like":
            to = r.choice([here, 0, 1])
            fill = r.choice(["zeros_like({x}", "ones_like({x}", "full_like({x}, 7"]).format(x=x)
            return self.result(f"torch.{fill}, device={self.dev(to)})", to)
        if kind == "new":
            return self.result(f"{x}.new_{r.choice(['zeros', 'ones'])}({self.random_shape(2)})", here)
        y = self.pick(ns)
        return Step(f"{x}.copy_({y})") if y else None

    def moved(self, x: str, to, expr: str, dtype: str | None = None) -> Step:
        """``x`` moved to device ``to``: where that is another device, the target
        side copies, forward and backward (prelude.move; see Step.ref_src)."""
        step = self.result(expr, to)
        if to == self.devices[x]:
            return step
        ref = f"move({x}, {self.dev(to)}{', ' + dtype if dtype else ''})"
        return dataclasses.replace(step, ref_src=f"{step.outs[0]} = {ref}")

    def gen_shape(self, ns):
        r = self.rng
        x = self.pick_device_tensor(ns)
        if x is None:
            return None
        t = ns[x]
        nd = t.dim()
        dim = r.randrange(-nd, nd) if nd else 0
        y = self.pick(ns, lambda v: v.dim() == nd, device=self.devices[x]) or x
        e = r.choice(
            [
                f"torch.cat([{x}, {y}], {dim})",
                f"torch.stack([{x}, {y}], {dim})",
                f"torch.flip({x}, ({dim},))",
                f"torch.roll({x}, {r.randint(-3, 3)}, {dim})",
                f"torch.tril({x}, {r.randint(-1, 1)})",
                f"torch.triu({x})",
                f"{x}.repeat({(r.randint(0, 2),) * max(nd, 1)})",
                f"torch.tile({x}, (2,))",
                f"torch.repeat_interleave({x}, 2, {dim})",
                f"torch.diag_embed({x})",
                f"torch.clone({x})",
                f"torch.where({x} != 0)[0]",
            ]
        )
        return self.result(e, self.devices[x])

    def gen_matmul(self, ns):
        r = self.rng
        x = self.pick_device_tensor(ns, lambda v: v.dim() in (1, 2, 3))
        if x is None:
            return None
        t = ns[x]
        fit = [n for n in self.tensors(ns, lambda v: v.dim() in (1, 2, 3) and v.shape[0:1] == t.shape[-1:]) if self.devices[n] == self.devices[x]]
        y = r.choice(fit) if fit and r.random() < 0.9 else self.pick(ns, device=self.devices[x]) or x
        op = r.choice(["matmul", "mm", "bmm", "mv", "dot", "outer", "addmm", "einsum", "vector_norm", "baddbmm", "tensordot"])
        if op == "addmm":
            e = f"torch.addmm({x}, {x}, {y}, beta={r.choice([0, 1, 0.5])}, alpha=2)"
        elif op == "einsum":
            e = f"torch.einsum('...i,i->...', {x}, {y})"
        elif op == "vector_norm":
            p = r.choice(["0", "1", "2", "3", "float('inf')", "-1"])
            e = f"torch.linalg.vector_norm({x}, {p})"
        elif op == "baddbmm":
            e = f"torch.baddbmm({x}, {x}, {y})"
        elif op == "tensordot":
            e = f"torch.tensordot({x}, {y}, dims=1)"
        else:
            e = f"torch.{op}({x}, {y})"
        return self.result(e, self.devices[x])

    def gen_resize_set(self, ns):
        r = self.rng
        x = self.pick(ns, lambda v: v.layout == torch.strided)
        if x is None:
            return None
        t = ns[x]
        kind = r.choice(["resize_", "resize_", "resize_as_", "set_tensor", "set_storage", "set_storage_full", "set_empty"])
        old = t.untyped_storage().nbytes()
        # The storage's size before, read in the step itself (shrinking drops
        # steps, so sizes seen while generating may not hold in a shrunk program).
        old = f"_n = {x}.untyped_storage().nbytes(); "
        if kind == "resize_":
            shape = self.random_shape(3)
            return Step(f"{old}{x}.resize_({shape}); fill_tail({x}, _n)")
        if kind == "resize_as_":
            if t.is_neg() or t.is_conj():
                # PyTorch's fallback for lazy negation/conjugation resizes a
                # resolved copy and writes its unset bytes back over the
                # tensor's old ones, on every device (left out, docs/testing.md).
                return None
            y = self.pick(ns)
            return Step(f"{old}{x}.resize_as_({y}); fill_tail({x}, _n)") if y else None
        y = self.pick(ns, lambda v: v.layout == torch.strided, device=self.devices[x])
        if y is None:
            return None
        u = ns[y]
        if kind == "set_tensor":
            return Step(f"{x}.set_({y})")
        if kind == "set_storage":
            # In bounds (a set_ that grows the storage leaves new bytes unset).
            # Sometimes past its end: the storage grows, and its new bytes are set.
            capacity = u.untyped_storage().nbytes() // t.element_size()
            size = tuple(r.randint(0, 3) for _ in range(r.randint(0, 2)))
            stride = tuple(r.randint(0, 2) for _ in size) if r.random() < 0.7 else None
            # Without strides, a set_ that keeps the size keeps the strides too (ATen).
            kept = tuple(t.stride()) if size == tuple(t.shape) else contiguous(size)
            span = 1 + sum((a - 1) * b for a, b in zip(size, stride or kept)) if all(size) else 0
            offset = r.randint(0, max(capacity - span, 0) + (1 if r.random() < 0.1 else 0))
            strides = f", {stride}" if stride is not None else ""
            return Step(f"_n = {y}.untyped_storage().nbytes(); {x}.set_({y}.untyped_storage(), {offset}, {size}{strides}); fill_tail({x}, _n)")
        if kind == "set_storage_full":
            numel = u.untyped_storage().nbytes() // t.element_size()
            if t.dim() == 1 and t.shape[0] == numel > 1 and t.stride(0) != 1:
                # ATen keeps the strides where the size stays the same: the
                # tensor would reach past its storage (PyTorch reads out of
                # bounds on every device: left out, docs/testing.md).
                return None
            return Step(f"{x}.set_({y}.untyped_storage())")
        return Step(f"{x}.set_()")

    def gen_autograd(self, ns):
        r = self.rng
        if not self.autograd:
            return None
        x = self.pick(ns, lambda v: v.requires_grad and v.dtype in (torch.float32, torch.float64, torch.complex64, torch.complex128))
        if x is None:
            return None
        t = ns[x]
        reduce = f"{x}.abs().sum()" if t.is_complex() else f"{x}.sum()" if r.random() < 0.6 else f"({x} * {x}).mean()"
        kind = r.random()
        if kind < 0.6:
            return Step(f"{reduce}.backward(retain_graph={r.random() < 0.3})")
        if kind < 0.8:
            leaf = self.pick(ns, lambda v: v.requires_grad and is_leaf(v))
            if leaf is None:
                return None
            name = self.fresh()
            self.devices[name] = self.devices[leaf]
            return Step(f"{name}, = torch.autograd.grad({reduce}, [{leaf}], allow_unused=True)", (name,))
        leaf = self.pick(ns, lambda v: v.requires_grad and is_leaf(v))
        if leaf is None:
            return None
        if r.random() < 0.5:
            return Step(f"{leaf}.grad = None")
        name = self.fresh()
        self.devices[name] = self.devices[leaf]
        return Step(f"{name} = {leaf}.grad", (name,))

    def gen_python(self, ns):
        r = self.rng
        x = self.pick(ns)
        if x is None:
            return None
        y = self.pick(ns) or x
        name = self.fresh()
        e = r.choice(
            [
                f"{x}.tolist()",
                f"{x}.item()",
                f"{x}.is_contiguous()",
                f"{x}.untyped_storage().nbytes()",
                f"{x}.is_set_to({y})",
                f"torch.equal({x}, {y})",
                f"{x}.data_ptr() == {y}.data_ptr()",
                f"bool({x})",
                f"{x}.is_nonzero()",
            ]
        )
        return Step(f"{name} = {e}", (name,))

    def gen_random(self, ns):
        r = self.rng
        x = self.pick_device_tensor(ns, lambda v: v.is_floating_point())
        if x is None:
            return None
        seed = r.randrange(1000)
        e = r.choice([f"{x}.uniform_()", f"{x}.normal_()", f"{x}.bernoulli_(0.5)", f"{x}.exponential_()", f"{x}.random_(0, 10)"])
        return Step(f"torch.manual_seed({seed}); {e}")


def is_leaf(t: torch.Tensor) -> bool:
    # is_leaf raises for a view of a multi-output view op whose base was written in place.
    try:
        return t.is_leaf
    except RuntimeError:
        return False


def contiguous(size) -> tuple[int, ...]:
    strides, step = [], 1
    for n in reversed(size):
        strides.insert(0, step)
        step *= max(n, 1)
    return tuple(strides)


def broadcastable(a, b) -> bool:
    for x, y in zip(reversed(tuple(a)), reversed(tuple(b))):
        if x != y and x != 1 and y != 1:
            return False
    return True


def program_size(rng: random.Random) -> int:
    return rng.randint(8, 40)

