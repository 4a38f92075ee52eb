"""AOTInductor on accel: ``aoti_compile_and_package`` of an exported accel model
and ``aoti_load_package`` (PyTorch's package loader, accel's model runner:
csrc/inductor/AOTIModelRunner.cpp).

A package compiled for accel runs the kernels a package compiled for the
target runs: each case is compared bitwise with the target's own package on
the same inputs, at two batch sizes of its dynamic batch dimension.
"""

import copy
import os
import sys

import pytest
import torch
from torch import nn

import _cases
import torch_accel

sys.path.insert(0, os.path.join(os.path.dirname(__file__), os.pardir, "benchmarks"))
from workloads import TransformerBlock  # noqa: E402


class MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.hidden = nn.Linear(16, 32)
        self.out = nn.Linear(32, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(torch.relu(self.hidden(x))).softmax(-1)


# name: (model, an input whose first dimension is the dynamic batch)
MODELS = {
    "mlp": (MLP, lambda batch: torch.randn(batch, 16)),
    "cnn": (_cases.SmallCNN, lambda batch: torch.randn(batch, 3, 8, 8)),
    "transformer-block": (lambda: TransformerBlock(32, 4), lambda batch: torch.randn(batch, 6, 32)),
}


def package(model: nn.Module, example: torch.Tensor, device: str, path) -> str:
    """``model`` on ``device``, exported with a dynamic batch and compiled into a package at ``path``."""
    model = copy.deepcopy(model).to(device).eval()
    batch = torch.export.Dim("batch", min=2, max=64)
    exported = torch.export.export(model, (example.to(device),), dynamic_shapes=({0: batch},))
    return torch._inductor.aoti_compile_and_package(exported, package_path=str(path))


@pytest.fixture(scope="module")
def packages(target, tmp_path_factory):
    """For each model: its weights, its accel package and its target package."""
    folder = tmp_path_factory.mktemp("aoti")
    built = {}
    for name, (make_model, make_input) in MODELS.items():
        torch.manual_seed(0)
        model = make_model().eval()
        example = make_input(4)
        built[name] = (
            package(model, example, "accel", folder / f"{name}-accel.pt2"),
            package(model, example, target, folder / f"{name}-{target}.pt2"),
        )
    return built


@pytest.mark.parametrize("name", list(MODELS))
def test_package_runs_as_the_targets(name, packages, target):
    accel_path, target_path = packages[name]
    on_accel = torch._inductor.aoti_load_package(accel_path)
    on_target = torch._inductor.aoti_load_package(target_path)
    make_input = MODELS[name][1]
    for batch in (4, 9):  # the batch compiled for, and another within the dynamic range
        x = make_input(batch)
        with torch.no_grad():
            result = on_accel(x.to("accel"))
            expected = on_target(x.to(target))
        assert result.device == torch.device("accel:0")
        assert result.shape[0] == batch
        torch.testing.assert_close(result.cpu(), expected.cpu(), rtol=0, atol=0)


def test_package_is_an_accel_package(packages):
    loaded = torch._inductor.aoti_load_package(packages["mlp"][0])
    assert loaded.loader.get_metadata()["AOTI_DEVICE_KEY"] == "accel"


def test_package_equals_eager_accel(packages):
    # Within rounding, not bitwise: Inductor fuses softmax into one kernel
    # whose summation order is not eager softmax's.
    torch.manual_seed(0)
    model = MLP().eval()
    loaded = torch._inductor.aoti_load_package(packages["mlp"][0])
    x = torch.randn(6, 16)
    with torch.no_grad():
        torch.testing.assert_close(loaded(x.to("accel")).cpu(), model(x), rtol=1e-5, atol=1e-6)


def test_package_loads_on_another_device(packages, two_devices):
    accel_path, target_path = packages["cnn"]
    on_accel1 = torch._inductor.aoti_load_package(accel_path, device_index=1)
    on_target = torch._inductor.aoti_load_package(target_path)
    x = MODELS["cnn"][1](5)
    with torch.no_grad():
        result = on_accel1(x.to("accel:1"))
        expected = on_target(x.to(torch_accel._target_device_type()))
    assert result.device == torch.device("accel:1")
    assert torch_accel.current_device() == 0  # the runner guards accel:1 for the run only
    torch.testing.assert_close(result.cpu(), expected.cpu(), rtol=0, atol=0)


def test_input_outside_the_dynamic_range_is_an_error(packages, monkeypatch):
    # As for cpu and cuda, the model checks its inputs with AOTI_RUNTIME_CHECK_INPUTS=1
    # (read at a loaded model's first run).
    monkeypatch.setenv("AOTI_RUNTIME_CHECK_INPUTS", "1")
    loaded = torch._inductor.aoti_load_package(packages["mlp"][0])
    with pytest.raises(RuntimeError, match="API call failed"):
        with torch.no_grad():
            loaded(torch.randn(65, 16).to("accel"))


def test_input_on_another_accel_device_is_an_error(packages, two_devices):
    loaded = torch._inductor.aoti_load_package(packages["mlp"][0])
    with pytest.raises(RuntimeError, match=r"accel:0.*accel:1|accel:1.*accel:0"):
        loaded(torch.randn(4, 16).to("accel:1"))


def test_loading_on_a_device_that_does_not_exist_is_an_error(packages):
    with pytest.raises(RuntimeError, match="accel"):
        torch._inductor.aoti_load_package(packages["mlp"][0], device_index=torch_accel.device_count())


def test_runs_on_a_side_stream(packages):
    loaded = torch._inductor.aoti_load_package(packages["mlp"][0])
    x = torch.randn(4, 16).to("accel")
    with torch.no_grad():
        expected = loaded(x)
        side = torch_accel.Stream()
        side.wait_stream(torch_accel.current_stream())
        with torch_accel.stream(side):
            result = loaded(x)
        side.synchronize()
    torch.testing.assert_close(result.cpu(), expected.cpu(), rtol=0, atol=0)
