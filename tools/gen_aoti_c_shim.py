"""Generates accel's AOTInductor C shim: ``aoti_torch_accel_<op>`` for each operator of
PyTorch's ``inductor_fallback_ops``, with the C signatures cpu's and cuda's shims have.

Code that cpp_wrapper and AOTInductor generate for a device calls the operators Inductor
falls back to through that device's C shim (docs/compile.md, "cpp_wrapper and
AOTInductor"). cpu's and cuda's shims call their backend's kernels directly; accel's calls
the operator through the dispatcher (``at::<op>``), so an operator runs exactly as in
eager mode: accel's kernels where it has them, the alias fallback otherwise.

The shim is generated at build time with the installed PyTorch's own code generator
(torchgen, the one that generates cpu's and cuda's), so its signatures are always those
the installed Inductor emits calls to. Usage: ``gen_aoti_c_shim.py HEADER SOURCE``; each
file is rewritten only if its contents change (keeps builds incremental).
"""

import os
import sys

HEADER_PROLOGUE = """\
// accel's AOTInductor C shim: generated at build time by tools/gen_aoti_c_shim.py
// with the installed PyTorch's torchgen. Do not edit.
#pragma once

#include <torch/csrc/inductor/aoti_torch/c/shim.h>

#ifdef __cplusplus
extern "C" {
#endif
"""

HEADER_EPILOGUE = """
#ifdef __cplusplus
} // extern "C"
#endif
"""

SOURCE_PROLOGUE = """\
// accel's AOTInductor C shim: generated at build time by tools/gen_aoti_c_shim.py
// with the installed PyTorch's torchgen. Do not edit. Every operator is called
// through the dispatcher (at::<op>), as in eager mode.
#include "{header}"

#include <ATen/Functions.h>
#include <ATen/CompositeExplicitAutogradFunctions.h>
#include <ATen/CompositeExplicitAutogradNonFunctionalFunctions.h>
#include <ATen/CompositeImplicitAutogradFunctions.h>
#include <torch/csrc/inductor/aoti_torch/utils.h>

using namespace torch::aot_inductor;

"""

DEVICE = "accel"


def generate() -> tuple[list[str], list[str]]:
    """The declarations and definitions of accel's shim functions, one per fallback operator."""
    import torchgen
    from torchgen.aoti.fallback_ops import inductor_fallback_ops
    from torchgen.gen import parse_native_yaml
    from torchgen.model import Variant
    from torchgen.gen_aoti_c_shim import (
        gen_declaration_and_definition,
        gen_static_dispatch_backend_call,
        get_fallback_op_name,
    )

    native = os.path.join(os.path.dirname(torchgen.__file__), "packaged", "ATen", "native")
    parsed = parse_native_yaml(os.path.join(native, "native_functions.yaml"), os.path.join(native, "tags.yaml"))
    functions = {get_fallback_op_name(f): f for f in parsed.native_functions}
    declarations, definitions = [], []
    for name in sorted(inductor_fallback_ops):
        function = functions.get(name)
        if function is None:
            raise RuntimeError(f"{name} is one of Inductor's fallback operators but not in native_functions.yaml")
        # No backend index: the call goes through the dispatcher (at::<op>), not to one backend's kernel.
        call = gen_static_dispatch_backend_call(function, None)
        if Variant.function not in function.variants and not call.startswith("at::symint::"):
            # An operator with only a method variant (bernoulli_, set_, view, ...) has no
            # at::<op>: call the method on its first argument, which is self.
            method = call.removeprefix("at::")
            call = f"[](const at::Tensor& self, auto&&... args) -> decltype(auto) {{ return self.{method}(std::forward<decltype(args)>(args)...); }}"
        declaration, definition = gen_declaration_and_definition(function.func, DEVICE, call, inductor_fallback_ops[name])
        declarations.append(declaration)
        definitions.append(definition)
    return declarations, definitions


def _write_if_changed(path: str, text: str) -> None:
    if os.path.exists(path):
        with open(path) as f:
            if f.read() == text:
                return
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


def main(header: str, source: str) -> None:
    declarations, definitions = generate()
    _write_if_changed(header, HEADER_PROLOGUE + "\n".join(declarations) + HEADER_EPILOGUE)
    _write_if_changed(source, SOURCE_PROLOGUE.format(header=os.path.abspath(header)) + "\n".join(definitions))


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(f"usage: {sys.argv[0]} HEADER SOURCE")
    main(sys.argv[1], sys.argv[2])
