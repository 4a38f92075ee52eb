"""Runs a program on accel and on the target side by side and compares them.

Each step runs on the target side, then on accel (``Side``: a namespace with
the program's names). After every step: the same exception type and message
(device names aside), or none on both; every tensor's metadata (dtype, shape,
strides, storage offset, storage size, version counter, autograd flags and
``grad_fn``, conjugate and negative bits, device); which tensors share a
storage and which is whose ``_base``; the bytes of every tensor the step made
or whose storage it may have written (NaN payloads included). After the last
step: every tensor's bytes and every leaf's gradient. A mismatch is shrunk
(steps dropped while it persists) and printed as a standalone script.
"""

from __future__ import annotations

import dataclasses
import inspect
import re
import struct
import traceback
import warnings

import torch

from . import prelude
from .programs import Generator, Step, program_size

def target_device() -> str:
    import torch_accel

    return torch_accel._target_device_type()


@dataclasses.dataclass
class Mismatch:
    kind: str  # "exception", "metadata", "values", "aliasing", "device", "accel-only step ran"
    where: str  # a name, or the step's source
    detail: str
    step: int  # index of the step after which it was seen (len(steps): the final check)

    @property
    def key(self) -> tuple[str, str]:
        return (self.kind, self.where)


NAME = re.compile(r"^t\d+$")
DEVICE_WORDS = re.compile(r"\b(accel|cuda|cpu|CUDA|CPU|ACCEL|PrivateUse1|privateuseone)(:\d+)?\b")
ADDRESSES = re.compile(r"0x[0-9a-f]+")
# A tensor's type in messages: torch.FloatTensor{...} on cpu, accelFloatType{...} on accel.
TENSOR_TYPES = re.compile(r"\b(?:torch\.(?:cuda\.)?|accel|CPU|CUDA)?(\w+?)(?:Tensor|Type)\b")


DEVICE_ERROR = re.compile(r"Expected all tensors to be on the same device|on different devices|device")


# grad_fn names that differ on purpose (docs/testing.md, the fuzzer's exceptions).
# ``x[i] = 2.5``: torch's __setitem__ makes the Python scalar a CPU tensor for cuda
# and cpu tensors, which copy_to then writes with fill_ (FillBackward3), but a
# tensor on the indexed tensor's own device for any other device type, written
# with copy_ (CopyBackwards); values and gradients are the same.
# prelude.move stands for ``.to(another device)`` on the target side.
SAME_GRAD_FN = {"FillBackward3": ("CopyBackwards",), "MoveBackward": ("ToCopyBackward0",)}


def mixes_devices(step: Step, tags: dict) -> bool:
    """Whether a step's named tensors are on more than one device, or it runs
    backward through a graph of a program that has tensors of several (a
    gradient formula may combine them as CUDA's rules refuse: pow's backward
    of a CPU scalar to an accel power calls logical_and(cpu, accel))."""
    used = {tags.get(n) for n in re.findall(r"\bt\d+\b", step.src) if n not in step.outs and n in tags}
    return len(used) > 1 or (step.family == "autograd" and len(set(tags.values())) > 1)


def normalise_message(e: BaseException) -> str:
    text = str(e).split("\n")[0]
    return ADDRESSES.sub("0x?", DEVICE_WORDS.sub("DEV", TENSOR_TYPES.sub(r"\1", text)))


class Side:
    def __init__(self, devices: list[str], on_accel: bool):
        self.ns: dict = {"torch": torch, "D": devices, "CPU": "cpu", "ON_ACCEL": on_accel}
        for name in ("base", "fill_tail", "move"):
            self.ns[name] = getattr(prelude, name)
        self.on_accel = on_accel

    def run(self, code) -> BaseException | None:
        try:
            exec(code, self.ns)
        except Exception as e:  # noqa: BLE001 - every error is compared
            return e
        return None

    def names(self) -> list[str]:
        return sorted((n for n in self.ns if NAME.match(n)), key=lambda n: int(n[1:]))

    def tensors(self) -> list[str]:
        return [n for n in self.names() if isinstance(self.ns[n], torch.Tensor)]


_CODE_CACHE: dict[str, object] = {}


def compiled(src: str):
    code = _CODE_CACHE.get(src)
    if code is None:
        code = compile(src, "<fuzz step>", "exec")
        if len(_CODE_CACHE) > 20000:
            _CODE_CACHE.clear()
        _CODE_CACHE[src] = code
    return code


def value_key(v):
    """A Python value (result of .item(), .tolist(), ...) as something ``==``
    compares bit for bit (floats by their bits: NaN equals NaN, -0.0 differs from 0.0)."""
    if isinstance(v, bool) or v is None or isinstance(v, (int, str)):
        return v
    if isinstance(v, float):
        return ("float", struct.pack("<d", v))
    if isinstance(v, complex):
        return ("complex", struct.pack("<dd", v.real, v.imag))
    if isinstance(v, (list, tuple)):
        return (type(v).__name__, tuple(value_key(x) for x in v))
    return ("other", type(v).__name__)


def tensor_bytes(t: torch.Tensor) -> bytes:
    with torch.no_grad():
        flat = t.detach().resolve_conj().resolve_neg()
        flat = flat.to("cpu").reshape(-1).clone(memory_format=torch.contiguous_format)
        return flat.view(torch.uint8).numpy().tobytes() if flat.numel() else b""


def guarded(get):
    """An attribute that may raise (``grad_fn`` of a view whose base was
    written in place after a multi-output view op): the error is its value."""
    try:
        return get()
    except Exception as e:  # noqa: BLE001
        return (type(e).__name__, normalise_message(e))


def storage_key(t: torch.Tensor):
    return t.untyped_storage()._cdata if t.layout == torch.strided else None


class Differential:
    """Both sides of one program."""

    def __init__(self, target: str):
        self.target = target
        second = f"{target}:0" if target != "cpu" else "cpu"
        self.accel = Side(["accel:0", "accel:1"], True)
        self.ref = Side([second, second], False)
        self.refused: list[str] = []  # steps accel refused for their devices
        self.gradients: set[str] = set()  # names bound to gradients

    # -- metadata -------------------------------------------------------------

    def metadata(self, side: Side, name: str, t: torch.Tensor, tags: dict) -> tuple:
        names = side.tensors()
        owner = {}
        for n in names:
            key = storage_key(side.ns[n])
            owner.setdefault(key, n)
        base = t._base
        base_name = None
        if base is not None:
            base_name = next((n for n in names if side.ns[n] is base), "<unnamed>")
        if side.on_accel:
            tag = tags.get(name)
            device = "ok" if tag is None else "ok" if str(t.device) == ({0: "accel:0", 1: "accel:1", "cpu": "cpu"}[tag]) else str(t.device)
        else:
            device = "ok"
        meta = (
            t.dtype,
            tuple(t.shape),
            t.layout,
            t.stride() if t.layout == torch.strided else None,
            t.storage_offset() if t.layout == torch.strided else None,
            t.untyped_storage().nbytes() if t.layout == torch.strided else None,
            t._version,
            t.requires_grad,
            guarded(lambda: t.is_leaf),
            guarded(lambda: type(t.grad_fn).__name__ if t.grad_fn is not None else None),
            t.is_conj(),
            t.is_neg(),
            base_name,
        )
        alias = owner.get(storage_key(t))
        return meta, alias, device

    META_FIELDS = ("dtype", "shape", "layout", "stride", "storage_offset", "storage_nbytes", "version", "requires_grad", "is_leaf", "grad_fn", "is_conj", "is_neg", "_base")

    def compare_metadata(self, index: int, tags: dict) -> Mismatch | None:
        a_names, r_names = self.accel.tensors(), self.ref.tensors()
        if a_names != r_names:
            return Mismatch("metadata", "names", f"tensors accel {a_names} vs target {r_names}", index)
        for name in r_names:
            a, r = self.accel.ns[name], self.ref.ns[name]
            (am, aa, ad), (rm, ra, _) = self.metadata(self.accel, name, a, tags), self.metadata(self.ref, name, r, tags)
            if ad != "ok":
                return Mismatch("device", name, f"on {ad}, expected {tags.get(name)}", index)
            if name in self.gradients:
                # A gradient's version counter depends on the backward path (see
                # compare_grads).
                am, rm = am[:6] + (None,) + am[7:], rm[:6] + (None,) + rm[7:]
            if am != rm and am[9] in SAME_GRAD_FN.get(rm[9], ()):
                am = am[:9] + (rm[9],) + am[10:]
            if am != rm:
                diffs = [f"{f}: accel {x!r} target {y!r}" for f, x, y in zip(self.META_FIELDS, am, rm) if x != y]
                return Mismatch("metadata", name, "; ".join(diffs), index)
            if aa != ra:
                return Mismatch("aliasing", name, f"shares the storage of {aa} on accel, of {ra} on the target", index)
        for name in self.accel.names():
            a, r = self.accel.ns.get(name), self.ref.ns.get(name)
            if isinstance(r, torch.Tensor) or isinstance(a, torch.Tensor):
                continue
            if value_key(a) != value_key(r):
                return Mismatch("values", name, f"accel {a!r} target {r!r}", index)
        return None

    def compare_bytes(self, names, index: int) -> Mismatch | None:
        for name in names:
            a, r = self.accel.ns.get(name), self.ref.ns.get(name)
            if not isinstance(r, torch.Tensor) or not isinstance(a, torch.Tensor):
                continue
            ab, rb = tensor_bytes(a), tensor_bytes(r)
            if ab != rb:
                return Mismatch("values", name, f"bytes accel {ab.hex()} target {rb.hex()}", index)
        return None

    def compare_grads(self, index: int) -> Mismatch | None:
        for name in self.ref.tensors():
            a, r = self.accel.ns[name], self.ref.ns[name]
            if not (guarded(lambda: r.is_leaf) is True and r.requires_grad):
                continue
            ag, rg = a.grad, r.grad
            if (ag is None) != (rg is None):
                return Mismatch("gradient", name, f"accel grad {ag is not None}, target grad {rg is not None}", index)
            if rg is None:
                continue
            # Not the version counter: a gradient may be the very tensor the last
            # backward function made (AccumulateGrad steals it), whose count of
            # in-place writes depends on that function's path, and the target
            # side's copies of .to(other device) (Step.ref_src) take another.
            am = (ag.dtype, tuple(ag.shape), ag.stride(), ag.storage_offset())
            rm = (rg.dtype, tuple(rg.shape), rg.stride(), rg.storage_offset())
            if am != rm:
                return Mismatch("gradient", name, f"grad metadata accel {am} target {rm}", index)
            if tensor_bytes(ag) != tensor_bytes(rg):
                return Mismatch("gradient", name, f"grad bytes accel {tensor_bytes(ag).hex()} target {tensor_bytes(rg).hex()}", index)
        return None

    # -- one step -------------------------------------------------------------

    def storages_nbytes(self, side: Side) -> dict:
        return {storage_key(side.ns[n]): (n, side.ns[n].untyped_storage().nbytes()) for n in side.tensors() if side.ns[n].layout == torch.strided}

    def step(self, step: Step, index: int, tags: dict) -> tuple[Mismatch | None, tuple | None]:
        """Runs one step on both sides; returns a mismatch (or None) and the
        exception both sides raised alike (or None)."""
        code = compiled(step.src)
        if step.family == "autograd":
            self.gradients.update(step.outs)
        ref_code = compiled(step.ref_src) if step.ref_src else code
        before = {n: self.ref.ns[n]._version for n in self.ref.tensors()}
        before_accel = {n: self.accel.ns[n]._version for n in self.accel.tensors()}
        grown = self.storages_nbytes(self.ref)
        accel_error = self.accel.run(code)
        if step.accel_only:
            if accel_error is None:
                return Mismatch("accel-only step ran", step.src, "CUDA's device rules refuse this call; accel ran it", index), None
            raised = None
        elif accel_error is not None and mixes_devices(step, tags) and DEVICE_ERROR.search(str(accel_error)):
            # Tensors of two devices where CUDA's rules refuse them (which the
            # target side, whose devices are one, cannot say): accel refused
            # the call, the target side does not run it (see docs/testing.md).
            self.refused.append(step.src)
            raised = None
        else:
            ref_error = self.ref.run(ref_code)
            if (ref_error is None) != (accel_error is None):
                which = f"accel raised {type(accel_error).__name__}: {accel_error}" if accel_error else f"target raised {type(ref_error).__name__}: {ref_error}"
                return Mismatch("exception", step.src, which.split("\n")[0][:400], index), None
            raised = None
            if ref_error is not None:
                rt, at = type(ref_error), type(accel_error)
                rm, am = normalise_message(ref_error), normalise_message(accel_error)
                if rt is not at or rm != am:
                    return Mismatch("exception", step.src, f"accel {at.__name__}: {am[:300]} | target {rt.__name__}: {rm[:300]}", index), None
                raised = (rt.__name__, str(ref_error).split("\n")[0][:200])
                # A failed call may leave grown storages with unset bytes on both
                # sides (an out= resized before the kernel's error): set them.
                for key, (n, old) in grown.items():
                    t = self.ref.ns.get(n)
                    if isinstance(t, torch.Tensor) and t.untyped_storage().nbytes() > old:
                        for side in (self.ref, self.accel):
                            if isinstance(side.ns.get(n), torch.Tensor):
                                prelude.fill_tail(side.ns[n], old)
        mismatch = self.compare_metadata(index, tags)
        if mismatch:
            return mismatch, raised
        # Bytes of what the step made and of every tensor over a storage it wrote
        # (by version counters; the final check compares every tensor's bytes).
        touched = set(step.outs)
        written = set()
        for n in self.ref.tensors():
            if before.get(n) != self.ref.ns[n]._version or before_accel.get(n) != self.accel.ns[n]._version:
                written.add(storage_key(self.ref.ns[n]))
                touched.add(n)
        for n in self.ref.tensors():
            if storage_key(self.ref.ns[n]) in written:
                touched.add(n)
        return self.compare_bytes(sorted(touched), index), raised

    def final(self, index: int) -> Mismatch | None:
        return self.compare_bytes(self.ref.tensors(), index) or self.compare_grads(index)


@dataclasses.dataclass
class Outcome:
    steps: list[Step]
    mismatch: Mismatch | None
    raised: dict[int, tuple]  # step index -> the exception both sides raised
    refused: int = 0  # steps accel refused for mixing devices (accel_only ones included)


def run_steps(steps: list[Step], target: str, tags: dict) -> Outcome:
    diff = Differential(target)
    raised = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for i, step in enumerate(steps):
            mismatch, error = diff.step(step, i, tags)
            if error:
                raised[i] = error
            if mismatch:
                return Outcome(steps, mismatch, raised)
        return Outcome(steps, diff.final(len(steps)), raised)


def generate_and_run(seed: int, target: str) -> tuple[Outcome, dict]:
    """Generates the program of ``seed`` step by step from the target side's
    state, comparing as it goes. Returns the outcome and the device tags."""
    gen = Generator(seed, cuda_target=target == "cuda")
    diff = Differential(target)
    steps: list[Step] = []
    raised = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pending = gen.first_steps()
        length = program_size(gen.rng)
        while len(steps) < length:
            step = pending.pop(0) if pending else gen.next_step(diff.ref.ns)
            steps.append(step)
            mismatch, error = diff.step(step, len(steps) - 1, gen.devices)
            if error:
                raised[len(steps) - 1] = error
            if mismatch:
                return Outcome(steps, mismatch, raised), gen.devices
        refused = len(diff.refused) + sum(s.accel_only for s in steps)
        return Outcome(steps, diff.final(len(steps)), raised, refused), gen.devices


def shrink(outcome: Outcome, target: str, tags: dict, budget: int = 400) -> Outcome:
    """Drops steps (halves, then quarters, ..., then single steps) while the
    same mismatch (kind and where) persists; then steps that raise NameError on
    both sides (they used a name a dropped step bound)."""
    key = outcome.mismatch.key
    steps = outcome.steps[: outcome.mismatch.step + 1]
    best = outcome
    tries = 0

    def attempt(candidate):
        nonlocal tries
        tries += 1
        got = run_steps(candidate, target, tags)
        return got if got.mismatch is not None and got.mismatch.key == key else None

    chunk = max(len(steps) // 2, 1)
    while chunk >= 1 and tries < budget:
        i = len(steps) - chunk
        changed = False
        while i >= 0 and tries < budget:
            candidate = steps[:i] + steps[i + chunk :]
            got = attempt(candidate)
            if got:
                steps, best, changed = got.steps[: got.mismatch.step + 1], got, True
            i -= chunk
        if not changed:
            chunk //= 2
    named = [s for i, s in enumerate(steps) if best.raised.get(i, ("",))[0] != "NameError"]
    if len(named) < len(steps):
        got = attempt(named)
        if got:
            best = got
    return best


def reproducer(outcome: Outcome, seed: int | None, target: str) -> str:
    """A standalone script (torch and torch_accel only) that runs the shrunk
    program on both devices and prints what differs."""
    m = outcome.mismatch
    lines = [
        f"# torch_accel fuzzer{f', seed {seed}' if seed is not None else ''}: {m.kind} at {m.where}",
        f"#   {m.detail[:500]}",
        "import torch",
        "import torch_accel  # noqa: F401",
        "",
    ]
    source = inspect.getsource(prelude)
    body = source[source.index("import torch") + len("import torch") :].strip("\n")
    lines += [body, "", "", "def program(D, CPU, ON_ACCEL):"]
    for i, step in enumerate(outcome.steps):
        pad = "    "
        if step.accel_only:
            lines.append(f"{pad}if ON_ACCEL:  # CUDA's device rules refuse this call")
            pad += "    "
        body = [step.src]
        if step.ref_src:  # the target side's own statement (see Step.ref_src)
            body = ["if ON_ACCEL:", f"    {step.src}", "else:", f"    {step.ref_src}"]
        if i in outcome.raised or step.accel_only or i == m.step and m.kind.startswith("exception"):
            body = ["try:", *(f"    {b}" for b in body), "except Exception as e:", f"    print(D[0], 'step {i}:', type(e).__name__, str(e).splitlines()[0])"]
        lines += [pad + b for b in body]
    lines.append("    return locals()")
    lines += [
        "",
        "",
        f"for D in ([\"accel:0\", \"accel:1\"], [\"{target}\", \"{target}\"]):",
        f"    names = program(D, \"cpu\", D[0].startswith(\"accel\"))",
    ]
    if NAME.match(m.where):
        lines.append(f"    print(D[0], '{m.where}:', describe(names.get('{m.where}')))")
        if m.kind == "gradient":
            lines.append(f"    print(D[0], '{m.where}.grad:', describe(names['{m.where}'].grad))")
    return "\n".join(lines) + "\n"


def check_seed(seed: int, target: str, do_shrink: bool = True) -> tuple[Outcome, str | None]:
    outcome, tags = generate_and_run(seed, target)
    if outcome.mismatch is None:
        return outcome, None
    if do_shrink:
        try:
            outcome = shrink(outcome, target, tags)
        except Exception:  # noqa: BLE001 - keep the unshrunk program
            traceback.print_exc()
    return outcome, reproducer(outcome, seed, target)
