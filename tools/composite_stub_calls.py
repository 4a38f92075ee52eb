"""Which composite kernels of the installed PyTorch call a DispatchStub directly.

A DispatchStub picks its kernel by the device type it is given; a composite
kernel (CompositeExplicitAutograd, CompositeImplicitAutograd, ...) that calls
one with its tensors' device type reaches the stub's PrivateUse1 slot when it
runs for accel tensors, which is empty ("DispatchStub: missing kernel for
PrivateUse1"). This reads libtorch_cpu's machine code (objdump over its 285 MB
of code: about half an hour on a loaded 2-core VM) and lists, for every kernel registered for a composite
key, the stubs it reaches through direct calls (calls through the dispatcher
are accel's own business). It over-approximates: a path guarded by a device
check (``if (self.is_cpu())``) is listed too, and tells nothing about calls
through function pointers. Each listed path is then tried on accel (see
docs/alias-fallback.md, "DispatchStubs"). It reads x86-64 ELF code (objdump's
AT&T syntax, the System V calling convention's RDI for the stub object).

    python tools/composite_stub_calls.py [path/to/libtorch_cpu.so]
"""

from __future__ import annotations

import collections
import re
import subprocess
import sys
from pathlib import Path

HEADER = re.compile(r"^([0-9a-f]+) <(.*)>:$")
CALL = re.compile(r"\s(?:call|jmp)\s+[0-9a-f]+ <([^>]*)>")
# The stub object a call site passes as `this` (RDI): loaded from the GOT for
# exported stubs, or its own address for local ones.
THIS = re.compile(r"\s(mov|lea)\s+0x[0-9a-f]+\(%rip\),%rdi\s+# ([0-9a-f]+)")
GET_CALL_PTR = "DispatchStubImpl12get_call_ptr"
# A composite kernel's wrapper, as torchgen names it (wrapper_<key>_<overload>_<name>),
# inside the mangled name of the functor that registers it: <length><identifier>.
WRAPPER = re.compile(r"(\d+)(wrapper_Composite[A-Za-z]+_)")


def function_name(symbol: str) -> str:
    """The function a symbol (or a part of one: .cold, +offset, @plt) belongs to."""
    symbol = symbol.split("@")[0]
    symbol = re.sub(r"\+0x[0-9a-f]+$", "", symbol)
    return re.sub(r"\.(cold|part\.\d+|isra\.\d+|constprop\.\d+)$", "", symbol)


def stub_symbols(library: Path) -> dict[int, str]:
    """Addresses a call site may load a stub from: GOT slots and the objects themselves."""
    symbols: dict[int, str] = {}
    relocations = subprocess.run(["readelf", "-rW", str(library)], capture_output=True, text=True, check=True).stdout
    for line in relocations.splitlines():
        parts = line.split()
        if len(parts) >= 5 and parts[2] == "R_X86_64_GLOB_DAT" and parts[4].endswith("_stubE"):
            symbols[int(parts[0], 16)] = parts[4]
    table = subprocess.run(["nm", str(library)], capture_output=True, text=True, check=True).stdout
    for line in table.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[2].endswith("_stubE"):
            symbols[int(parts[0], 16)] = parts[2]
    return symbols


def call_graph(library: Path, stubs: dict[int, str]) -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """(callers of each function, stubs each function dispatches through)."""
    callers: dict[str, set[str]] = collections.defaultdict(set)
    dispatches: dict[str, set[str]] = collections.defaultdict(set)
    objdump = subprocess.Popen(
        ["objdump", "-d", "--no-show-raw-insn", str(library)], stdout=subprocess.PIPE, text=True, errors="replace"
    )
    current, this = None, None
    assert objdump.stdout is not None
    for line in objdump.stdout:
        if (match := HEADER.match(line)) is not None:
            current, this = function_name(match.group(2)), None
        elif (match := THIS.search(line)) is not None:
            this = stubs.get(int(match.group(2), 16))
        elif current is not None and (match := CALL.search(line)) is not None:
            callee = function_name(match.group(1))
            if GET_CALL_PTR in callee:
                dispatches[current].add(this or "(unknown stub)")
            elif callee != current:
                callers[callee].add(current)
    if objdump.wait() != 0:
        raise SystemExit("objdump failed")
    return callers, dispatches


def composite_kernel(symbol: str) -> str | None:
    """`wrapper_<key>_<overload>_<name>` of a composite kernel's registration functor."""
    match = WRAPPER.search(symbol)
    if match is None:
        return None
    digits, start = match.group(1), match.start(2)
    # The digits before the identifier may end another name (`_GLOBAL__N_1`):
    # its length is the shortest suffix of them that ends the identifier where
    # the mangled name goes on (E closes a nested name, I opens template arguments).
    for width in range(2, len(digits) + 1):
        end = start + int(digits[-width:])
        if end < len(symbol) and symbol[end] in "EI":
            return symbol[start:end]
    return None


def main() -> None:
    if len(sys.argv) > 1:
        library = Path(sys.argv[1])
    else:
        import torch

        library = Path(torch.__file__).parent / "lib" / "libtorch_cpu.so"
    callers, dispatches = call_graph(library, stub_symbols(library))
    found: dict[str, set[str]] = collections.defaultdict(set)
    for site, stubs in dispatches.items():
        seen, todo = {site}, [site]
        while todo:
            function = todo.pop()
            if (kernel := composite_kernel(function)) is not None:
                found[kernel] |= stubs
            for caller in callers.get(function, ()):
                if caller not in seen:
                    seen.add(caller)
                    todo.append(caller)
    demangled = subprocess.run(
        ["c++filt"], input="\n".join(s for stubs in found.values() for s in stubs), capture_output=True, text=True
    ).stdout.split("\n")
    names = dict(zip((s for stubs in found.values() for s in stubs), demangled))
    for kernel in sorted(found):
        print(kernel, " ".join(sorted(names.get(s, s).removeprefix("at::native::") for s in found[kernel])))


if __name__ == "__main__":
    main()
