"""torch.save / torch.load and pickling of accel tensors, modules and
optimizer state; tensor type strings and the generated methods."""

import io
import pickle

import pytest
import torch
from torch import nn

import torch_accel


def roundtrip(obj, **load_args):
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    buffer.seek(0)
    return torch.load(buffer, **load_args)


def test_tensor_roundtrip_keeps_device_values_and_sharing():
    x = torch.randn(3, 4, device="accel")
    loaded = roundtrip({"x": x, "row": x[1]})
    assert loaded["x"].device == x.device
    assert torch.equal(loaded["x"].cpu(), x.cpu())
    # Views saved together still share one storage.
    assert loaded["row"].untyped_storage().data_ptr() == loaded["x"].untyped_storage().data_ptr()
    loaded["x"][1].fill_(0)
    assert torch.equal(loaded["row"].cpu(), torch.zeros(4))


def test_second_device_roundtrip(two_devices):
    x = torch.randn(5).to("accel:1")
    loaded = roundtrip(x)
    assert loaded.device == torch.device("accel:1")
    assert loaded.untyped_storage().data_ptr() != x.untyped_storage().data_ptr()  # a copy, not the same memory
    assert torch.equal(loaded.cpu(), x.cpu())


@pytest.mark.parametrize("location", ["cpu", "accel:0", torch.device("accel", 0), {"accel:0": "cpu"}])
def test_map_location(location):
    x = torch.arange(6.0, device="accel")
    loaded = roundtrip(x, map_location=location)
    expected = "cpu" if location in ("cpu", {"accel:0": "cpu"}) else "accel:0"
    assert loaded.device == torch.device(expected)
    assert torch.equal(loaded.cpu(), torch.arange(6.0))


def test_cpu_checkpoint_onto_accel():
    x = torch.randn(3, 2)
    loaded = roundtrip(x, map_location="accel")
    assert loaded.device == torch.device("accel:0")
    assert torch.equal(loaded.cpu(), x)


def test_module_and_optimizer_state():
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2)).accel()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    model(torch.randn(3, 4, device="accel")).sum().backward()
    optimizer.step()
    loaded = roundtrip({"model": model.state_dict(), "optimizer": optimizer.state_dict()})

    restored = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2)).accel()
    restored.load_state_dict(loaded["model"])
    restored_optimizer = torch.optim.AdamW(restored.parameters(), lr=1e-2)
    restored_optimizer.load_state_dict(loaded["optimizer"])
    for p, q in zip(model.parameters(), restored.parameters()):
        assert q.device.type == "accel" and torch.equal(p.cpu(), q.cpu())
    state = restored_optimizer.state_dict()["state"][0]
    assert state["exp_avg"].device.type == "accel"
    # Both continue identically.
    x = torch.randn(3, 4, device="accel")
    for m, opt in ((model, optimizer), (restored, restored_optimizer)):
        opt.zero_grad()
        m(x).sum().backward()
        opt.step()
    for p, q in zip(model.parameters(), restored.parameters()):
        assert torch.equal(p.cpu(), q.cpu())


def test_whole_module_save():
    model = nn.Linear(3, 3).to("accel")
    loaded = roundtrip(model, weights_only=False)
    assert loaded.weight.device.type == "accel"
    assert torch.equal(loaded.weight.cpu(), model.weight.cpu())


def test_pickle():
    x = torch.randn(2, 2, device="accel")
    y = pickle.loads(pickle.dumps(x))
    assert y.device == x.device and torch.equal(y.cpu(), x.cpu())


def test_checkpoint_for_a_missing_device_is_a_clear_error():
    buffer = io.BytesIO()
    torch.save(torch.ones(2, device="accel"), buffer)
    count = torch_accel.device_count()
    buffer.seek(0)
    with pytest.raises(RuntimeError, match=rf"accel.*{count + 3}|device.*{count + 3}"):
        torch.load(buffer, map_location=f"accel:{count + 3}")


def test_type_strings_and_generated_methods():
    x = torch.ones(2, device="accel")
    assert x.is_accel and not torch.ones(2).is_accel
    assert x.type() == "torch.accel.FloatTensor"
    assert torch.ones(2, dtype=torch.int64, device="accel").type() == "torch.accel.LongTensor"
    assert torch.ones(2).accel().device.type == "accel"
    assert nn.Linear(2, 2).accel().weight.is_accel
    storage = x.untyped_storage()
    assert storage.device.type == "accel" and storage.is_accel
    assert torch.UntypedStorage(4).accel().device.type == "accel"
