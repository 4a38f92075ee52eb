"""The patch registry (torch_accel/_patches.py) and the package's structure check (tools/check_package.py).

Every patch torch_accel makes to PyTorch or Triton is declared in one registry
with the hash of the source it was written against: an upgrade that changes
that source fails here, so each such patch is reviewed. tools/check_package.py
(``make lint``) keeps the package free of import circles, of imports of its
face from inside, and of patches outside the registry; its rules are tested
here on small planted packages.
"""

import importlib
import importlib.util
import os
import pkgutil
import subprocess
import sys
import textwrap

import pytest
import torch

import torch_accel
from torch_accel import _patches

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CHECKER = os.path.join(ROOT, "tools", "check_package.py")


def _import_every_module() -> None:
    # The patches are declared by the modules of their areas, most of them
    # imported only when torch.compile needs them. Importing
    # torch_accel.transfer_to_accel is the CUDA-program opt-in, which must not
    # reach this process; its patches are declared by torch_accel._transfer.
    for module in pkgutil.walk_packages(torch_accel.__path__, "torch_accel."):
        if module.name != "torch_accel.transfer_to_accel":
            importlib.import_module(module.name)


@pytest.mark.parametrize("name", sorted(_patches.SOURCE_SHA256))
def test_patched_source_is_the_one_the_patch_was_written_for(name):
    assert _patches.source_sha256(_patches.original(name)) == _patches.SOURCE_SHA256[name], (
        f"{name} is not the source the patch declaring it in torch_accel was written for: review that patch "
        "against it, then record its new hash in torch_accel/_patches.py"
    )


def test_every_patch_is_declared_with_a_hash():
    _import_every_module()
    declared = _patches.declared()
    assert set(declared) == set(_patches.SOURCE_SHA256)
    # Each name is declared by one patch, which names it.
    assert all(name in patch.names for name, patch in declared.items())


def test_a_patch_applies_once_and_keeps_the_original():
    from torch_accel import _profiler_patches

    name = "torch.autograd.profiler.profile.__init__"
    # Applied at import: the constructor is the patch's, the original recorded.
    patched = torch.autograd.profiler.profile.__init__
    assert patched is not _patches.original(name)
    assert _patches.original(name) is _patches._originals[name]
    _patches.apply(_profiler_patches.profile_without_device)
    assert torch.autograd.profiler.profile.__init__ is patched


def test_a_patch_must_name_hashed_code():
    with pytest.raises(KeyError, match="torch.nn.functional.relu is patched without a hash"):
        _patches.patch("torch.nn.functional.relu")
    with pytest.raises(ValueError, match="patched twice"):
        _patches.patch("torch.autograd.profiler.profile.__init__")(lambda original: None)


# --- tools/check_package.py ------------------------------------------------------


def _checker():
    spec = importlib.util.spec_from_file_location("check_package", CHECKER)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _package(root, files: dict[str, str]) -> str:
    package = os.path.join(root, "pkg")
    for path, text in {"__init__.py": "", **files}.items():
        os.makedirs(os.path.dirname(os.path.join(package, path)), exist_ok=True)
        with open(os.path.join(package, path), "w") as f:
            f.write(textwrap.dedent(text))
    return package


def _messages(package: str) -> list[str]:
    return [finding.message for finding in _checker().check(package)]


def test_torch_accel_passes_the_check():
    proc = subprocess.run([sys.executable, CHECKER], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout == ""


def test_check_fails_on_an_import_circle(tmp_path):
    # A function-level import closes the circle too: it only hides it until the function runs.
    package = _package(tmp_path, {
        "a.py": "from . import b\n",
        "b.py": "from .c import f\n",
        "c.py": "def f():\n    from .a import g\n",
    })  # fmt: skip
    proc = subprocess.run([sys.executable, CHECKER, package], capture_output=True, text=True)
    assert proc.returncode == 1
    assert "import circle between pkg.a, pkg.b, pkg.c: pkg.a -> pkg.b -> pkg.c -> pkg.a" in proc.stdout
    # Broken, the circle is gone.
    with open(os.path.join(package, "c.py"), "w") as f:
        f.write("def f():\n    pass\n")
    assert _messages(package) == []


def test_check_fails_on_an_import_of_the_face(tmp_path):
    package = _package(tmp_path, {
        "__init__.py": "from ._core import count\nfrom . import user\n",
        "_core.py": "count = 1\n",
        "user.py": """
            import torch
            from . import _core  # a submodule: fine

            def f():
                from . import count
                import pkg
                return torch.accel.synchronize()
        """,
        "sub/__init__.py": "from .inner import x\n",
        "sub/inner.py": "x = 1\n",
        "sub/other.py": "from . import x\n",
    })  # fmt: skip
    messages = _messages(package)
    # from . import count; import pkg
    assert messages.count("imports the face of pkg (pkg/__init__.py) from inside it: import what it needs from the module that defines it") == 2
    assert "reads torch.accel.synchronize (the package face): import it from its module" in messages
    assert any(m.startswith("imports the face of pkg.sub (pkg/sub/__init__.py)") for m in messages)
    # The face imports the user and the user imports the face: a circle as well.
    assert any(m.startswith("import circle between pkg, pkg.user") for m in messages)
    assert len(messages) == 5, messages


def test_check_fails_on_a_patch_outside_the_registry(tmp_path):
    package = _package(tmp_path, {
        "_patches.py": """
            SOURCE_SHA256 = {"torch.a.f": "00", "torch.a.forgotten": "00"}

            def patch(*names):
                return lambda function: function
        """,
        "patching.py": """
            import torch
            from torch._inductor import utils
            from torch.nn.functional import relu

            from ._patches import patch


            def unregistered(model):
                utils.get_current_backend = None
                setattr(torch.nn.functional, "relu", None)
                profile = torch.autograd.profiler.profile
                profile.__init__ = None
                relu.__doc__ = ""
                del utils.is_gpu
                # Objects reached otherwise, and our own, are not PyTorch's attributes.
                model.forward = None

                def inner():
                    pass

                inner.__doc__ = ""


            @patch("torch.a.f")
            def registered(original):
                def f():
                    return original()

                utils.f = f


            @patch("torch.a.unhashed")
            def unhashed(original):
                utils.unhashed = original


            class Uses:
                utils = None

                def method(self):
                    self.utils = 1
        """,
    })  # fmt: skip
    messages = sorted(_messages(package))
    suffix = " (a patch is a function decorated with _patches.patch(...), applied by _patches.apply)"
    assert messages == sorted([
        "patches utils.get_current_backend, a PyTorch or library attribute, outside the patch registry" + suffix,
        "patches torch.nn.functional with setattr, outside the patch registry" + suffix,
        "patches profile.__init__, a PyTorch or library attribute, outside the patch registry" + suffix,
        "patches relu.__doc__, a PyTorch or library attribute, outside the patch registry" + suffix,
        "patches utils.is_gpu, a PyTorch or library attribute, outside the patch registry" + suffix,
        "@patch('torch.a.unhashed'): torch.a.unhashed has no hash in SOURCE_SHA256 (_patches.py)",
        "SOURCE_SHA256 lists torch.a.forgotten, which no @patch declares",
    ])  # fmt: skip
