"""Real models train on accel in eager mode, and their losses, gradients and
parameters are bitwise those of the same run on the target device.

The target run happens in another process without torch_accel (see _cases.py
for why); the accel run happens here. Both run the same code paths: the
optimizers name their implementation (foreach), and the models' dropout
probability is one for which accel's fused dropout and the CPU's composite
scale alike (_cases.DROPOUT_P; test_divergent_paths covers the others).
"""

import importlib.util

import pytest
import torch

import _cases
from conftest import run_target_cases
import torch_accel


@pytest.fixture(scope="module")
def reference(target, tmp_path_factory):
    return run_target_cases(target, tmp_path_factory.mktemp("reference"))


def assert_same(accel: dict, expected: dict) -> None:
    for key, value in expected.items():
        if key == "devices":
            continue
        if isinstance(value, dict):
            assert value.keys() == accel[key].keys()
            for name in value:
                assert torch.equal(accel[key][name], value[name]), f"{key}.{name}"
        elif isinstance(value, list):
            for i, (a, e) in enumerate(zip(accel[key], value, strict=True)):
                assert torch.equal(a, e), f"{key}[{i}]"
        else:
            assert torch.equal(accel[key], value), key


@pytest.mark.parametrize("optimizer", sorted(_cases.OPTIMIZERS))
@pytest.mark.parametrize("model", sorted(_cases.MODELS))
def test_training_matches_the_target_bitwise(model, optimizer, reference):
    assert _cases.dropout_scales_agree(_cases.DROPOUT_P)
    assert _cases.OPTIMIZERS[optimizer][1]["foreach"] is True
    result = _cases.train(model, optimizer, "accel")
    assert result["devices"] == ["accel:0"]
    assert_same(result, reference[f"train-{model}-{optimizer}"])
    losses = result["losses"]
    assert losses[-1].item() < losses[0].item() * 1.5  # it trains, not diverges


def test_a_real_model_of_an_installed_package_trains_as_on_the_target(target, tmp_path):
    # torchvision's ResNet-18: a test requirement here (requirements-dev.txt),
    # preinstalled on the GPU image (the GPU run's smoke step runs this test
    # there, against cuda).
    assert importlib.util.find_spec("torchvision") is not None, "torchvision is missing: run `make install`"
    expected = run_target_cases(target, tmp_path, "--real-model")["real_model"]
    result = _cases.real_model("accel")
    assert result["devices"] == ["accel:0"]
    assert_same(result, expected)
    losses = result["losses"]
    assert torch.isfinite(torch.stack(losses)).all()


def test_backward_of_an_accel_graph_stays_on_accel(reference):
    result = _cases.tanh_backward("accel")
    assert result["devices"] == ["accel:0"]
    assert_same(result, reference["tanh_backward"])


def test_gradients_through_views_and_inplace_ops(reference):
    result = _cases.views_and_inplace_backward("accel")
    assert result["devices"] == ["accel:0"]
    assert_same(result, reference["views_and_inplace_backward"])


def test_no_grad_and_inference_mode():
    x = torch.randn(3, device="accel", requires_grad=True)
    with torch.no_grad():
        assert not (x * 2).requires_grad
    with torch.inference_mode():
        y = x * 2
        z = y.view(3)  # a view of an inference tensor
        assert y.is_inference() and z.is_inference()
    assert torch_accel.current_device() == 0
