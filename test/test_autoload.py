"""Autoload: torch_accel's ``torch.backends`` entry point makes ``import torch``
alone register accel, in every process of the environment it is installed in.

Each case runs in a fresh interpreter: what is checked is process start-up.
"""

import importlib.metadata
import os

import pytest

from conftest import run_python


def test_entry_point_is_declared():
    entry_points = [e for e in importlib.metadata.entry_points(group="torch.backends") if e.name == "accel"]
    assert [e.value for e in entry_points] == ["torch_accel._autoload:load"]
    assert importlib.metadata.distribution("torch-accel").version


def test_import_torch_alone_registers_accel(target):
    proc = run_python(
        """
        import sys
        import torch
        assert "torch_accel" in sys.modules
        x = torch.arange(4.0, device="accel")
        print(torch.accel.__name__, torch.accelerator.current_accelerator(), (x * 2).tolist(), x.device)
        """
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["torch_accel", "accel", "[0.0,", "2.0,", "4.0,", "6.0]", "accel:0"]


def test_autoload_can_be_turned_off():
    proc = run_python(
        """
        import sys
        import torch
        print("torch_accel" in sys.modules, torch._C._get_privateuse1_backend_name(), hasattr(torch, "accel"))
        try:
            torch.device("accel")
        except RuntimeError as error:
            print("RuntimeError")
        """,
        env={"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"},
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["False", "privateuseone", "False", "RuntimeError"]


@pytest.mark.parametrize(
    "imports",
    [
        "import torch_accel\nimport torch",  # torch's autoload re-enters the torch_accel import in progress
        "import torch\nimport torch_accel",  # the explicit import after autoload finds it done
        "import torch_accel._autoload\nimport torch_accel",
    ],
)
def test_explicit_import_is_harmless(imports):
    proc = run_python(
        imports
        + """
import torch
import torch_accel
torch_accel._autoload.load()
assert torch.accel is torch_accel and torch._C._get_privateuse1_backend_name() == "accel"
assert hasattr(torch.Tensor, "is_accel") and hasattr(torch.nn.Module, "accel")
print(torch.ones(2, device="accel").is_accel, torch.accel.device_count())
"""
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split()[0] == "True" and int(proc.stdout.split()[1]) >= 1


def test_failed_explicit_import_is_reported_clearly():
    # A broken backend must not be hidden: torch names the extension and the switch.
    proc = run_python(
        """
        import sys
        sys.modules["torch_accel._C"] = None  # the extension cannot be imported
        import torch
        """
    )
    assert proc.returncode != 0
    assert "Failed to load the backend extension: accel" in proc.stderr
    assert "TORCH_DEVICE_BACKEND_AUTOLOAD=0" in proc.stderr


def test_building_does_not_load_the_extension_being_built():
    # setup.py imports torch; with torch_accel installed editable, torch's
    # autoload would import torch_accel, whose extension a fresh checkout has
    # not built yet (CI broke on exactly this). Block the extension and run
    # setup.py as pip and `make build` do.
    setup_py = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "setup.py")
    proc = run_python(
        f"""
        import runpy, sys
        sys.modules["torch_accel._C"] = None  # not built yet
        sys.argv = ["setup.py", "--name"]
        runpy.run_path({setup_py!r}, run_name="__main__")
        """
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split()[-1] == "torch-accel"
