"""Checks the structure of the torch_accel package (``make lint``).

    python tools/check_package.py [PACKAGE_DIR]    (default: torch_accel next to this folder)

Reads the package's sources (it imports nothing of them) and fails, listing
every finding, on:

1. An import circle: modules of the package that import each other, directly
   or through others. Every ``import`` counts, at module level or inside a
   function (a function-level import is still an arrow between the two
   modules; it only hides a circle until the function runs), except those
   under ``if TYPE_CHECKING:``. Importing a module implicitly runs its
   parent packages' ``__init__``; that is not counted.

2. An import of a package face from inside it: a module importing the
   ``__init__`` of a package that contains it (``import torch_accel``,
   ``from torch_accel import x``, ``from . import x`` or ``from .. import x``
   where x is defined or re-exported by that ``__init__`` rather than being a
   submodule), or reading ``torch.accel.<name>`` (the same module object) in
   code. The face re-exports; what the package's modules share lives in
   modules of their own (the device basics in ``_core``). Programs run as
   ``python -m`` (``PROGRAMS``), which use the package as a user does, are
   exempt.

3. A patch of a PyTorch or library internal outside the patch registry
   (``_patches.py``: every such patch is hashed against the source it was
   written for and tested). A patch is, here: an assignment to, augmented
   assignment to or deletion of an attribute of a PyTorch or library object,
   or ``setattr``/``delattr`` on one. "A PyTorch or library object" is a name
   bound by an import from a package that is neither the standard library
   nor this package (``import torch``, ``from torch._inductor import
   utils``, ``from triton.language.extra import libdevice``), or by a plain
   alias of such an object (``profile = torch.autograd.profiler.profile``),
   and any attribute reached from it (``torch.autograd.profiler.profile``).
   Such a statement must be inside a function decorated with the registry's
   ``@patch("qualified.name", ...)`` (the registry then applies it, once, via
   ``_patches.apply``), and every name a ``@patch`` declares must be a key of
   the registry's ``SOURCE_SHA256``, declared by exactly one ``@patch``; every
   key must be declared.

   Not detected (review keeps those in ``@patch`` functions too): mutating a
   PyTorch container in place (``GPU_TYPES.append``, an entry of a table),
   and attributes set on PyTorch objects that reach the code as arguments
   or return values rather than by import (an FX node, a compiled graph).

Exit status 0 when there is no finding, 1 otherwise.
"""

import ast
import os
import sys
from collections.abc import Iterator
from typing import NamedTuple, Optional

# The registry module, relative to the package folder.
REGISTRY = "_patches.py"
# Modules run as programs (python -m), which use the package as a user does.
PROGRAMS = {"demo"}


class Module(NamedTuple):
    name: str  # dotted, e.g. torch_accel._inductor.registration
    path: str
    is_package: bool  # an __init__.py
    tree: ast.Module


class Finding(NamedTuple):
    path: str
    line: int
    message: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.message}"


def read_package(package_dir: str) -> dict[str, Module]:
    """Every module of the package, by dotted name."""
    package_dir = os.path.abspath(package_dir)
    root = os.path.basename(package_dir)
    modules = {}
    for folder, dirs, files in os.walk(package_dir):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__" and os.path.exists(os.path.join(folder, d, "__init__.py")))
        for file in sorted(f for f in files if f.endswith(".py")):
            path = os.path.join(folder, file)
            parts = [root, *os.path.relpath(path, package_dir)[: -len(".py")].split(os.sep)]
            is_package = parts[-1] == "__init__"
            if is_package:
                parts.pop()
            with open(path, encoding="utf-8") as f:
                tree = ast.parse(f.read(), path)
            modules[".".join(parts)] = Module(".".join(parts), path, is_package, tree)
    return modules


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _walk_executed(node: ast.AST) -> Iterator[ast.AST]:
    """ast.walk, skipping the bodies of ``if TYPE_CHECKING:``."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.If) and _is_type_checking(child.test):
            for other in child.orelse:
                yield other
                yield from _walk_executed(other)
            continue
        yield child
        yield from _walk_executed(child)


def _face_names(module: Module) -> set[str]:
    """The names a package's __init__ defines or re-exports (not its plain submodule imports)."""
    names: set[str] = set()
    for node in module.tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                names.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
        elif isinstance(node, ast.ImportFrom) and node.module is not None:
            names.update((a.asname or a.name) for a in node.names)
        elif isinstance(node, ast.Import):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return names


class Import(NamedTuple):
    line: int
    target: str  # the module of the package it runs
    face: bool  # the target is the __init__ of a package containing the importer, by way of one of its names


def imports_of(module: Module, modules: dict[str, Module]) -> list[Import]:
    root = module.name.split(".")[0]
    package = module.name if module.is_package else module.name.rpartition(".")[0]
    found = []
    for node in _walk_executed(module.tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                # (import root._C: no Python source)
                if alias.name in modules and (alias.name == root or alias.name.startswith(root + ".")):
                    found.append(Import(node.lineno, alias.name, alias.name == root))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                if node.level - 1 >= len(base):
                    continue
                base = base[: len(base) - (node.level - 1)]
                if node.module:
                    base += node.module.split(".")
                base_name = ".".join(base)
            else:
                base_name = node.module or ""
            if not (base_name == root or base_name.startswith(root + ".")):
                continue
            base_module = modules.get(base_name)
            if base_module is None:
                continue  # no Python source (the extension, _C)
            for alias in node.names:
                submodule = f"{base_name}.{alias.name}"
                if submodule in modules:
                    found.append(Import(node.lineno, submodule, False))
                elif not base_module.is_package:
                    found.append(Import(node.lineno, base_name, False))
                elif alias.name in _face_names(base_module):
                    found.append(Import(node.lineno, base_name, True))
                # else: a submodule that is no Python source (the extension, _C)
    return found


def _contains(package: str, module: str) -> bool:
    return module != package and module.startswith(package + ".")


def check_face_imports(modules: dict[str, Module]) -> list[Finding]:
    findings = []
    for module in modules.values():
        if module.name.rpartition(".")[2] in PROGRAMS:
            continue
        for imp in imports_of(module, modules):
            face = modules[imp.target]
            if imp.face and face.is_package and _contains(imp.target, module.name):
                root = modules[module.name.split(".")[0]]
                where = os.path.relpath(face.path, os.path.dirname(os.path.dirname(root.path)))
                findings.append(
                    Finding(
                        module.path,
                        imp.line,
                        f"imports the face of {imp.target} ({where}) from inside it: "
                        "import what it needs from the module that defines it",
                    )
                )
        for node in _walk_executed(module.tree):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Attribute)
                and node.value.attr == "accel"
                and isinstance(node.value.value, ast.Name)
                and node.value.value.id == "torch"
            ):
                message = f"reads torch.accel.{node.attr} (the package face): import it from its module"
                findings.append(Finding(module.path, node.lineno, message))
    return findings


def import_graph(modules: dict[str, Module]) -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for module in modules.values():
        for imp in imports_of(module, modules):
            if imp.target != module.name:
                graph[module.name].add(imp.target)
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(components)


def _cycle_in(component: list[str], graph: dict[str, set[str]]) -> list[str]:
    """One cycle through the component's first module, for the message."""
    members = set(component)
    start = component[0]
    paths = {start: [start]}
    queue = [start]
    while queue:
        v = queue.pop(0)
        for w in sorted(graph[v] & members):
            if w == start:
                return paths[v] + [start]
            if w not in paths:
                paths[w] = paths[v] + [w]
                queue.append(w)
    return component


def check_circles(modules: dict[str, Module]) -> list[Finding]:
    graph = import_graph(modules)
    findings = []
    for component in circles(graph):
        first = modules[component[0]]
        findings.append(
            Finding(
                first.path,
                1,
                f"import circle between {', '.join(component)}: {' -> '.join(_cycle_in(component, graph))}",
            )
        )
    return findings


# --- patches -------------------------------------------------------------------


def _is_foreign_import(module: str, level: int, root: str) -> bool:
    if level:
        return False
    top = module.split(".")[0]
    return top != root and top not in sys.stdlib_module_names and top != "__future__"


def _root_name(expr: ast.expr) -> Optional[str]:
    """The name at the root of an attribute chain (``a`` of ``a.b.c``), or None."""
    while isinstance(expr, ast.Attribute):
        expr = expr.value
    return expr.id if isinstance(expr, ast.Name) else None


def _registry_hashes(registry_path: str) -> Optional[dict[str, str]]:
    if not os.path.exists(registry_path):
        return None
    with open(registry_path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), registry_path)
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        if any(isinstance(t, ast.Name) and t.id == "SOURCE_SHA256" for t in targets) and node.value is not None:
            return ast.literal_eval(node.value)
    return {}


def _patch_decorator_names(function: ast.AST) -> Optional[list[ast.expr]]:
    """The arguments of the registry's @patch(...) on ``function``, or None if it has none."""
    for decorator in getattr(function, "decorator_list", []):
        if not isinstance(decorator, ast.Call):
            continue
        func = decorator.func
        if (isinstance(func, ast.Name) and func.id == "patch") or (
            isinstance(func, ast.Attribute) and func.attr == "patch" and _root_name(func.value) == "_patches"
        ):
            return decorator.args
    return None


class _Scope(NamedTuple):
    foreign: set[str]  # names bound to PyTorch or library objects
    bound: set[str]  # every name the scope binds
    is_class: bool


class _PatchFinder:
    """Finds patch statements and @patch declarations in one module."""

    def __init__(self, module: Module, root: str) -> None:
        self.module = module
        self.root = root
        self.findings: list[Finding] = []
        self.declared: list[tuple[str, int]] = []  # (name, line) of every @patch argument

    def run(self) -> None:
        self._scope(self.module.tree, [], in_patch=False)

    def _bindings(self, scope: ast.AST, outer: list["_Scope"]) -> tuple[set[str], set[str]]:
        """The names ``scope`` binds (its own statements, not nested functions or
        classes): those bound to PyTorch or library objects, and all."""
        root = self.root
        foreign: set[str] = set()
        bound: set[str] = set()
        if isinstance(scope, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            args = scope.args
            for a in [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg]:
                if a is not None:
                    bound.add(a.arg)

        def own_nodes(node: ast.AST) -> Iterator[ast.AST]:
            for child in ast.iter_child_nodes(node):
                if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    bound.add(child.name)
                    continue
                if isinstance(child, ast.Lambda):
                    continue
                yield child
                yield from own_nodes(child)

        nodes = list(own_nodes(scope))
        aliases = []
        for node in nodes:
            if isinstance(node, ast.Import):
                for a in node.names:
                    name = a.asname or a.name.split(".")[0]
                    bound.add(name)
                    if _is_foreign_import(a.name, 0, root):
                        foreign.add(name)
            elif isinstance(node, ast.ImportFrom):
                for a in node.names:
                    name = a.asname or a.name
                    bound.add(name)
                    if _is_foreign_import(node.module or "", node.level, root):
                        foreign.add(name)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                bound.add(node.id)
            if isinstance(node, ast.Assign) and isinstance(node.value, (ast.Name, ast.Attribute)):
                aliases.append(node)
        # Plain aliases of foreign objects (x = torch.a.b), to a fixed point.
        changed = True
        while changed:
            changed = False
            for node in aliases:
                name = _root_name(node.value)
                if name in foreign or (name not in bound and self._is_foreign(node.value, outer)):
                    for target in node.targets:
                        if isinstance(target, ast.Name) and target.id not in foreign:
                            foreign.add(target.id)
                            changed = True
        return foreign, bound

    def _is_foreign(self, expr: ast.expr, scopes: list["_Scope"]) -> bool:
        name = _root_name(expr)
        if name is None:
            return False
        for foreign, bound, _ in reversed(scopes):
            if name in foreign:
                return True
            if name in bound:
                return False
        return False

    def _scope(self, scope: ast.AST, outer: list["_Scope"], in_patch: bool) -> None:
        scopes = [*outer, _Scope(*self._bindings(scope, outer), isinstance(scope, ast.ClassDef))]
        self._statements(scope, scopes, in_patch)

    def _statements(self, node: ast.AST, scopes: list["_Scope"], in_patch: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child.test):
                continue
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                names = _patch_decorator_names(child)
                if names is not None:
                    for arg in names:
                        if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                            self.declared.append((arg.value, arg.lineno))
                        else:
                            self._find(arg, "@patch takes the qualified names it adapts as string literals")
                for decorator in getattr(child, "decorator_list", []):
                    self._statements(decorator, scopes, in_patch)
                # A function does not see the names of the classes around it.
                self._scope(child, [s for s in scopes if not s.is_class], in_patch or names is not None)
                continue
            if isinstance(child, ast.ClassDef):
                self._scope(child, scopes, in_patch)
                continue
            if not in_patch:
                self._check(child, scopes)
            self._statements(child, scopes, in_patch)

    def _check(self, node: ast.AST, scopes: list["_Scope"]) -> None:
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        elif isinstance(node, ast.Delete):
            targets = node.targets
        for target in targets:
            for t in ast.walk(target) if isinstance(target, (ast.Tuple, ast.List)) else [target]:
                if isinstance(t, ast.Attribute) and self._is_foreign(t.value, scopes):
                    self._find(t, f"patches {ast.unparse(t)}, a PyTorch or library attribute, outside the patch registry")
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("setattr", "delattr")
            and node.args
            and self._is_foreign(node.args[0], scopes)
        ):
            self._find(node, f"patches {ast.unparse(node.args[0])} with {node.func.id}, outside the patch registry")

    def _find(self, node: ast.AST, message: str) -> None:
        self.findings.append(
            Finding(
                self.module.path,
                getattr(node, "lineno", 1),
                f"{message} (a patch is a function decorated with _patches.patch(...), applied by _patches.apply)",
            )
        )


def check_patches(modules: dict[str, Module], package_dir: str) -> list[Finding]:
    root = os.path.basename(os.path.abspath(package_dir))
    registry_path = os.path.join(package_dir, REGISTRY)
    hashes = _registry_hashes(registry_path)
    findings = []
    declared: dict[str, list[tuple[str, int]]] = {}
    for module in modules.values():
        if os.path.abspath(module.path) == os.path.abspath(registry_path):
            continue  # the registry rebinds what the patches replace
        finder = _PatchFinder(module, root)
        finder.run()
        findings += finder.findings
        for name, line in finder.declared:
            declared.setdefault(name, []).append((module.path, line))
    if hashes is None:
        if declared:
            path, line = next(iter(declared.values()))[0]
            findings.append(Finding(path, line, f"@patch without a registry: {registry_path} does not exist"))
        return findings
    for name, places in sorted(declared.items()):
        if name not in hashes:
            for path, line in places:
                findings.append(Finding(path, line, f"@patch({name!r}): {name} has no hash in SOURCE_SHA256 ({REGISTRY})"))
        elif len(places) > 1:
            for path, line in places:
                findings.append(Finding(path, line, f"@patch({name!r}): {name} is declared by {len(places)} patches"))
    for name in sorted(set(hashes) - set(declared)):
        findings.append(Finding(registry_path, 1, f"SOURCE_SHA256 lists {name}, which no @patch declares"))
    return findings


def check(package_dir: str) -> list[Finding]:
    modules = read_package(package_dir)
    return check_circles(modules) + check_face_imports(modules) + check_patches(modules, package_dir)


def main(argv: list[str]) -> int:
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    package_dir = argv[1] if len(argv) > 1 else os.path.join(root, "torch_accel")
    findings = check(package_dir)
    for finding in findings:
        print(finding)
    if findings:
        print(f"{len(findings)} finding(s) in {package_dir}; see tools/check_package.py for the rules", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
