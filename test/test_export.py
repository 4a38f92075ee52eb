"""torch.export on accel: an exported accel program saved, loaded, decomposed and run on accel:1.

The program records its device as accel (placeholders, parameters, buffers
and the device arguments of the ops that create tensors), torch.export.save
writes it so and torch.export.load gives back tensors on accel:1; the loaded
program, decomposed to core ATen, runs the same accel kernels as the eager
module, so its outputs are eager's bitwise.
"""

import io
import zipfile

import torch
from torch.export import Dim

DEVICE = "accel:1"


class Block(torch.nn.Module):
    """A layer norm, a linear layer, SDPA, a buffer, and a tensor created on the input's device."""

    def __init__(self) -> None:
        super().__init__()
        self.norm = torch.nn.LayerNorm(16)
        self.proj = torch.nn.Linear(16, 16)
        self.register_buffer("scale", torch.linspace(0.5, 1.5, 16))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.proj(self.norm(x)) * self.scale
        q = h.view(h.shape[0], h.shape[1], 2, 8).transpose(1, 2)
        attention = torch.nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True)
        positions = torch.arange(x.shape[1], device=x.device, dtype=x.dtype)
        return attention.transpose(1, 2).reshape_as(h) + positions[:, None]


def _model_and_input():
    torch.manual_seed(0)
    model = Block().to(DEVICE).eval()
    x = torch.randn(3, 5, 16).to(DEVICE)
    return model, x


def _saved(program) -> bytes:
    buffer = io.BytesIO()
    torch.export.save(program, buffer)
    return buffer.getvalue()


def test_export_save_load_decompose_run(two_devices):
    model, x = _model_and_input()
    batch = Dim("batch", min=1, max=8)
    program = torch.export.export(model, (x,), dynamic_shapes={"x": {0: batch}})
    archive = _saved(program)
    # The serialized program records accel:1: in its graph (the placeholders'
    # and arange's device) and for its weights.
    with zipfile.ZipFile(io.BytesIO(archive)) as files:
        text = "".join(files.read(name).decode("utf-8", "replace") for name in files.namelist() if name.endswith(".json"))
    compact = text.replace(" ", "")
    assert '"type":"accel","index":1' in compact and '"type":"cpu"' not in compact

    loaded = torch.export.load(io.BytesIO(archive))
    assert all(t.device == torch.device(DEVICE) for t in loaded.state_dict.values())
    placeholders = [n.meta["val"] for n in loaded.graph.nodes if n.op == "placeholder"]
    assert all(v.device == torch.device(DEVICE) for v in placeholders)

    decomposed = loaded.run_decompositions()
    targets = {str(n.target) for n in decomposed.graph.nodes if n.op == "call_function"}
    assert "aten.linear.default" not in targets and "aten.addmm.default" in targets  # core ATen
    module = decomposed.module()
    with torch.no_grad():
        for batch_size in (3, 1, 8):  # the dynamic batch dimension
            inputs = torch.randn(batch_size, 5, 16).to(DEVICE)
            actual, expected = module(inputs), model(inputs)
            assert actual.device == torch.device(DEVICE)
            assert torch.equal(actual, expected)  # the same accel kernels, the same bits


def test_loaded_program_runs_where_the_current_device_is_another(two_devices):
    # The program's device is its own (accel:1), not the current device.
    model, x = _model_and_input()
    loaded = torch.export.load(io.BytesIO(_saved(torch.export.export(model, (x,)))))
    with torch.accel.device(0), torch.no_grad():
        out = loaded.module()(x)
    assert out.device == torch.device(DEVICE)
    assert torch.equal(out, model(x))
