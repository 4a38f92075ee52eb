"""accel with the code and libraries that name devices: nn.DataParallel and
torch.accel.comm, DLPack (NumPy) and __cuda_array_interface__, safetensors
(docs/interop.md).

DataParallel is defined by what it does: the batch cut in chunks, one replica
of the module per device on its chunk, the outputs concatenated, the replicas'
gradients summed on the first device. The reference does exactly that on the
target device, with the same kernels on the same bytes, so the comparison is
bitwise. (A single forward of the whole batch is not the reference:
BatchNorm normalises each replica's chunk with that chunk's statistics, and a
matrix product of a whole batch need not round as those of its halves do.)
"""

import copy
import gc
import importlib.util

import numpy as np
import pytest
import safetensors
import safetensors.torch
import torch
import torch.cuda.comm
from torch.utils.dlpack import DLDeviceType

import torch_accel
from torch_accel import _patches

# The last accel device: accel:1 on the host runtime, the only one on a one-GPU machine.
LAST = f"accel:{torch_accel.device_count() - 1}"
needs_two = pytest.mark.usefixtures("two_devices")


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(8, 16), torch.nn.BatchNorm1d(16), torch.nn.ReLU(), torch.nn.Linear(16, 4)
    )


class _WithKeywords(torch.nn.Module):
    """A module whose forward takes a keyword tensor and returns a dict and a
    tuple: what DataParallel scatters and gathers besides plain tensors."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(1)
        self.linear = torch.nn.Linear(8, 4)

    def forward(self, x, *, scale):
        y = self.linear(x) * scale
        return {"y": y, "pair": (y.relu(), x.sum(1))}


def _reference(model: torch.nn.Module, x: torch.Tensor, chunks: int, device: str):
    """DataParallel's work done by hand on ``device``: replicas of ``model``
    (the first is ``model`` itself, whose buffers DataParallel updates), each
    on its chunk of ``x``; the outputs concatenated, the loss's gradients summed."""
    replicas = [model] + [copy.deepcopy(model) for _ in range(chunks - 1)]
    outputs = [replica(piece) for replica, piece in zip(replicas, x.to(device).chunk(chunks))]
    output = torch.cat(outputs)
    output.square().sum().backward()
    grads = []
    for parameters in zip(*(replica.parameters() for replica in replicas)):
        total = parameters[0].grad
        for p in parameters[1:]:
            total = total + p.grad
        grads.append(total)
    return output, grads


@needs_two
@pytest.mark.parametrize("input_on", ["cpu", "accel:0"])
def test_data_parallel_forward_backward_equal_the_replicas_on_the_target(target, input_on):
    batch = torch.randn(6, 8, generator=torch.Generator().manual_seed(2))
    expected_output, expected_grads = _reference(_model().to(target), batch, 2, target)
    x = batch.to(input_on)
    model = _model().to("accel:0")
    parallel = torch.nn.DataParallel(model, device_ids=[0, 1])
    output = parallel(x)
    assert output.device == torch.device("accel:0")
    output.square().sum().backward()
    assert torch.equal(output.cpu(), expected_output.cpu())
    for (name, p), expected in zip(model.named_parameters(), expected_grads):
        assert p.grad.device == torch.device("accel:0"), name
        assert torch.equal(p.grad.cpu(), expected.cpu()), name
    # The first replica shares the module's buffers: BatchNorm's running statistics are its chunk's.
    reference = _model().to(target)
    reference(batch.to(target)[:3])
    assert torch.equal(model[1].running_mean.cpu(), reference[1].running_mean.cpu())
    assert torch.equal(model[1].running_var.cpu(), reference[1].running_var.cpu())
    assert model[1].num_batches_tracked.item() == 1


@needs_two
def test_data_parallel_scatters_keywords_and_gathers_structures_on_the_output_device(target):
    x = torch.randn(4, 8, generator=torch.Generator().manual_seed(3))
    scale = torch.tensor([[1.0], [2.0], [3.0], [4.0]])
    model = _WithKeywords().to("accel:0")
    parallel = torch.nn.DataParallel(model, device_ids=["accel:0", torch.device("accel:1")], output_device=1)
    result = parallel(x, scale=scale)
    reference = _WithKeywords().to(target)
    halves = [reference(xp, scale=sp) for xp, sp in zip(x.to(target).chunk(2), scale.to(target).chunk(2))]
    assert result["y"].device == torch.device("accel:1")
    assert torch.equal(result["y"].cpu(), torch.cat([h["y"] for h in halves]).cpu())
    assert torch.equal(result["pair"][0].cpu(), torch.cat([h["pair"][0] for h in halves]).cpu())
    assert torch.equal(result["pair"][1].cpu(), torch.cat([h["pair"][1] for h in halves]).cpu())
    # Gradients flow back through the gather on accel:1 to the module on accel:0.
    result["y"].sum().backward()
    assert model.linear.weight.grad.device == torch.device("accel:0")


@needs_two
def test_data_parallel_functional_and_single_device(target):
    x = torch.randn(4, 8, generator=torch.Generator().manual_seed(4))
    model = _WithKeywords().to("accel:0")
    reference = _WithKeywords().to(target)
    scale = torch.full((4, 1), 0.5)
    out = torch.nn.parallel.data_parallel(model, (x,), device_ids=[0, 1], module_kwargs={"scale": scale})
    halves = [reference(xp, scale=0.5) for xp in x.to(target).chunk(2)]
    assert torch.equal(out["y"].cpu(), torch.cat([h["y"] for h in halves]).cpu())
    # One device: the module runs as it is, where it is.
    single = torch.nn.DataParallel(model, device_ids=[0])
    assert next(model.parameters()).device == torch.device("accel:0")
    assert torch.equal(single(x, scale=0.5)["y"].cpu(), reference(x.to(target), scale=0.5)["y"].cpu())


@needs_two
def test_data_parallel_takes_accel_where_cuda_is_available_too(monkeypatch):
    # On the CUDA runtime torch.cuda.is_available() is true, and PyTorch's
    # DataParallel would take cuda for every module; a module on accel keeps accel.
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert torch._utils._get_available_device_type() == "cuda"
    model = _WithKeywords().to("accel:1")
    parallel = torch.nn.DataParallel(model, device_ids=[1])
    assert parallel.src_device_obj == torch.device("accel:1")
    assert next(model.parameters()).device == torch.device("accel:1")
    assert torch.nn.DataParallel(_model().to("accel:0")).device_ids == list(range(torch_accel.device_count()))
    # Outside a DataParallel's set-up, PyTorch's answer.
    assert torch._utils._get_available_device_type() == "cuda"
    assert _patches.original("torch._utils._get_available_device_type")() == "cuda"


@needs_two
def test_data_parallel_requires_the_module_on_the_first_device():
    parallel = torch.nn.DataParallel(_model().to("accel:1"), device_ids=[0, 1])
    with pytest.raises(RuntimeError, match="on device accel:0 .* found one of them on device: accel:1"):
        parallel(torch.randn(4, 8))


# --- torch.accel.comm -----------------------------------------------------------


@needs_two
def test_comm_broadcast_and_broadcast_coalesced():
    t = torch.arange(6.0).reshape(2, 3).to("accel:0")
    copies = torch.accel.comm.broadcast(t, [0, "accel:1"])
    assert copies[0] is t
    assert copies[1].device == torch.device("accel:1") and torch.equal(copies[1].cpu(), t.cpu())
    out = [torch.empty(2, 3, device="accel:1"), torch.empty(2, 3, device="accel:0")]
    assert torch.accel.comm.broadcast(t.cpu(), out=out)[0] is out[0]
    assert torch.equal(out[0].cpu(), t.cpu()) and torch.equal(out[1].cpu(), t.cpu())
    # Mixed dtypes and a buffer smaller than the tensors: every chunk, each device's list in order.
    tensors = [torch.randn(3, device="accel:0"), torch.arange(5, device="accel:0"), torch.randn(2, 2, device="accel:0")]
    outputs = torch.accel.comm.broadcast_coalesced(tensors, [0, 1], buffer_size=16)
    assert outputs[0] == tensors
    for copy_, tensor in zip(outputs[1], tensors):
        assert copy_.device == torch.device("accel:1") and copy_.dtype == tensor.dtype
        assert torch.equal(copy_.cpu(), tensor.cpu())
    # Each copy has its own version counter.
    version = outputs[1][1]._version
    outputs[1][0].add_(1)
    assert outputs[1][1]._version == version


@needs_two
def test_comm_reduce_add_scatter_gather(target):
    a = torch.randn(4, 3, generator=torch.Generator().manual_seed(5))
    b = torch.randn(4, 3, generator=torch.Generator().manual_seed(6))
    total = torch.accel.comm.reduce_add([a.to("accel:0"), b.to("accel:1")], destination=1)
    assert total.device == torch.device("accel:1")
    assert torch.equal(total.cpu(), (b.to(target) + a.to(target)).cpu())
    per_device = [[a.to("accel:0"), b.to("accel:0")], [b.to("accel:1"), a.to("accel:1")]]
    sums = torch.accel.comm.reduce_add_coalesced(per_device, 0)
    assert torch.equal(sums[0].cpu(), (a.to(target) + b.to(target)).cpu())
    assert torch.equal(sums[1].cpu(), (b.to(target) + a.to(target)).cpu())

    x = torch.arange(10.0).reshape(5, 2).to("accel:0")
    pieces = torch.accel.comm.scatter(x, [0, 1], chunk_sizes=[2, 3])
    assert pieces[0].data_ptr() == x.data_ptr()  # already on accel:0: a view, as cuda's
    assert pieces[1].device == torch.device("accel:1") and torch.equal(pieces[1].cpu(), x.cpu()[2:])
    streams = [torch.accel.Stream(0), torch.accel.Stream(1)]
    on_streams = torch.accel.comm.scatter(x.cpu(), [0, 1], dim=1, streams=streams)
    torch.accel.synchronize(1)
    assert torch.equal(on_streams[1].cpu(), x.cpu()[:, 1:])
    gathered = torch.accel.comm.gather(pieces, 0, "cpu")
    assert gathered.device == torch.device("cpu") and torch.equal(gathered, x.cpu())
    into = torch.empty(5, 2, device="accel:1")
    assert torch.accel.comm.gather(pieces, out=into) is into and torch.equal(into.cpu(), x.cpu())


@needs_two
def test_comm_errors_name_accel():
    t = torch.ones(2, device="accel:0")
    with pytest.raises(ValueError, match="torch.accel.comm.broadcast: expected an accel device, got cuda:1"):
        torch.accel.comm.broadcast(t, ["cuda:1"])
    with pytest.raises(ValueError, match=r"all tensors must be on devices\[0\] \(accel:1\), but tensor 0 is on accel:0"):
        torch.accel.comm.broadcast_coalesced([t], [1, 0])
    with pytest.raises(RuntimeError, match="destination accel:1 must hold one of the inputs"):
        torch.accel.comm.reduce_add([t, t], destination=1)
    with pytest.raises(ValueError, match="input tensor 1 is on cpu"):
        torch.accel.comm.gather([t, torch.ones(2)])
    with pytest.raises(ValueError, match="tensor 1 has shape \\(2, 3\\), which differs from \\(2, 2\\)"):
        torch.accel.comm.gather([torch.ones(2, 2, device="accel:0"), torch.ones(2, 3, device="accel:1")])


@needs_two
def test_nn_parallel_comm_sends_accel_calls_to_accel():
    # torch.nn.parallel.comm (what DataParallel calls) takes accel tensors, and so
    # does torch.cuda.comm, which imports its functions (when first imported, after accel's patch).
    t = torch.arange(4.0, device="accel:0")
    copies = torch.nn.parallel.comm.broadcast(t, [0, 1])
    assert copies[1].device == torch.device("accel:1")
    assert torch.nn.parallel.comm.gather(copies, 0, 1).device == torch.device("accel:1")
    assert torch.cuda.comm.broadcast is torch.nn.parallel.comm.broadcast
    assert torch.cuda.comm.gather(copies, 0, "cpu").device == torch.device("cpu")


# --- DLPack and __cuda_array_interface__ ------------------------------------------


def _expected_dlpack_device(target: str, index: int) -> tuple:
    # accel memory is the target's: host memory (DLPack's CPU, device 0) or
    # CUDA memory (DLPack's CUDA, with the CUDA device index accel:N is).
    return (DLDeviceType.kDLCUDA, index) if target == "cuda" else (DLDeviceType.kDLCPU, 0)


@pytest.mark.parametrize("index", [0, 1])
def test_dlpack_device_is_where_the_memory_is(target, index, request):
    if index == 1:
        request.getfixturevalue("two_devices")
    t = torch.arange(6, device=f"accel:{index}")
    assert t.__dlpack_device__() == _expected_dlpack_device(target, index)
    assert t.reshape(2, 3).to_sparse().__dlpack_device__() == _expected_dlpack_device(target, index)
    torch.accel.set_device(index)  # cuda's export wants the tensor's device current
    capsule_tensor = torch.utils.dlpack.from_dlpack(t.__dlpack__(max_version=(1, 0)))
    # A foreign consumer sees the target's device, over the same memory.
    assert capsule_tensor.device.type == target
    assert capsule_tensor.data_ptr() == t.data_ptr()


def test_numpy_reads_accel_memory_without_a_copy(target):
    t = torch.arange(12, dtype=torch.float32).reshape(3, 4).to(LAST)[:, 1:3]  # a strided view
    if target != "cpu":
        # NumPy reads host memory only: CUDA memory is refused, as for cuda tensors.
        with pytest.raises((BufferError, RuntimeError, TypeError)):
            np.from_dlpack(t)
        return
    array = np.from_dlpack(t)
    assert array.ctypes.data == t.data_ptr()
    np.testing.assert_array_equal(array, t.cpu().numpy())
    array[0, 0] = -1.0  # the same memory
    assert t[0, 0].item() == -1.0
    # The array keeps the memory alive after the tensor is gone: a new tensor of
    # the same size does not get it, and it is freed with the array.
    nbytes = t.untyped_storage().nbytes()
    del t
    gc.collect()
    other = torch.full((3, 4), 99.0, device=LAST)
    assert array[0, 0] == -1.0 and array[2, 1] == 10.0
    held = torch.accel.memory_allocated(LAST)
    del array
    gc.collect()
    assert torch.accel.memory_allocated(LAST) == held - nbytes
    assert other[0, 0].item() == 99.0


@needs_two
def test_torch_from_dlpack_of_accel_stays_on_accel():
    t = torch.arange(5.0, device="accel:1")
    same = torch.from_dlpack(t)
    assert same.device == t.device and same.data_ptr() == t.data_ptr()
    same[0] = 7.0
    assert t[0].item() == 7.0
    assert torch.utils.dlpack.from_dlpack(t, device="accel:1").data_ptr() == t.data_ptr()
    moved = torch.from_dlpack(t, device="accel:0")
    assert moved.device == torch.device("accel:0") and torch.equal(moved.cpu(), t.cpu())
    with pytest.raises(ValueError, match="cannot move DLPack tensor from device accel:1 to accel:0 without copying"):
        torch.from_dlpack(t, device="accel:0", copy=False)
    copied = torch.from_dlpack(t, copy=True)
    assert copied.device == t.device and copied.data_ptr() != t.data_ptr() and torch.equal(copied.cpu(), t.cpu())
    # The legacy capsule (PrivateUse1's own DLPack device) comes back as accel too.
    legacy = torch.utils.dlpack.from_dlpack(torch.utils.dlpack.to_dlpack(t))
    assert legacy.device == t.device and legacy.data_ptr() == t.data_ptr()


def test_from_dlpack_into_accel_copies():
    array = np.arange(6, dtype=np.int64).reshape(2, 3)
    t = torch.from_dlpack(array, device=LAST)
    assert t.device == torch.device(LAST)
    assert torch.equal(t.cpu(), torch.from_numpy(array))
    array[0, 0] = 9  # a copy: the accel tensor keeps its value
    assert t[0, 0].item() == 0


def test_dlpack_export_refuses_what_cuda_refuses():
    with pytest.raises(BufferError, match="require gradient"):
        torch.ones(2, device="accel:0", requires_grad=True).__dlpack__()
    with pytest.raises(BufferError, match="layout other than torch.strided"):
        torch.ones(2, 2, device="accel:0").to_sparse().__dlpack__()
    with pytest.raises(BufferError, match="require gradient"):
        torch.from_dlpack(torch.ones(2, device="accel:0", requires_grad=True))


def test_cuda_array_interface_where_the_memory_is_cuda_memory(target):
    t = torch.arange(6, dtype=torch.float16, device="accel:0").reshape(2, 3).t()
    if target != "cuda":
        assert not hasattr(t, "__cuda_array_interface__")
        with pytest.raises(AttributeError, match="accel tensor of the host runtime: its memory is cpu memory"):
            t.__cuda_array_interface__
        return
    # As a cuda tensor's (CUDA Array Interface v2: strides in bytes, None when C-contiguous).
    assert t.__cuda_array_interface__ == {
        "typestr": "<f2", "shape": (3, 2), "strides": (2, 6), "data": (t.data_ptr(), False), "version": 2
    }
    assert t.t().contiguous().__cuda_array_interface__["strides"] is None


@pytest.mark.skipif(
    torch_accel.runtime() != "cuda" or importlib.util.find_spec("cupy") is None,
    reason="CuPy reads CUDA memory: the CUDA runtime, on the GPU image (which has CuPy)",
)
def test_cupy_reads_accel_memory_without_a_copy():
    cupy = importlib.import_module("cupy")  # on the GPU image only, hence not a module-level import

    t = torch.arange(6, dtype=torch.float32, device="accel:0").reshape(2, 3)
    through_dlpack = cupy.from_dlpack(t)
    through_interface = cupy.asarray(t)
    assert through_dlpack.data.ptr == through_interface.data.ptr == t.data_ptr()
    through_dlpack[0, 0] = -1.0
    torch.accel.synchronize()
    assert t[0, 0].item() == -1.0
    back = torch.from_dlpack(through_interface)
    assert back.device == torch.device("cuda:0") and back.data_ptr() == t.data_ptr()
    into = torch.from_dlpack(through_interface, device="accel:0")
    assert into.device == torch.device("accel:0") and torch.equal(into.cpu(), t.cpu())


def test_cpu_and_plain_tensors_keep_pytorchs_dlpack():
    t = torch.arange(3)
    assert t.__dlpack_device__() == (DLDeviceType.kDLCPU, 0)
    assert torch.from_dlpack(t).data_ptr() == t.data_ptr()
    assert not hasattr(t, "__cuda_array_interface__")


# --- safetensors ----------------------------------------------------------------------


def test_safetensors_loads_onto_accel(tmp_path):
    tensors = {
        "weight": torch.randn(4, 3, generator=torch.Generator().manual_seed(7)),
        "ids": torch.arange(5, dtype=torch.int64),
        "half": torch.randn(2, 2, generator=torch.Generator().manual_seed(8)).to(torch.bfloat16),
    }
    path = str(tmp_path / "model.safetensors")
    # Saved from accel: safetensors copies them to the CPU.
    safetensors.torch.save_file({k: v.to("accel:0") for k, v in tensors.items()}, path)
    loaded = safetensors.torch.load_file(path, device=LAST)
    assert set(loaded) == set(tensors)
    for name, tensor in tensors.items():
        assert loaded[name].device == torch.device(LAST), name
        assert loaded[name].dtype == tensor.dtype and torch.equal(loaded[name].cpu(), tensor), name
    # safe_open's device list is in safetensors' compiled code, which refuses accel's
    # name; the workaround (docs/interop.md#safetensors): open on the CPU, copy to accel.
    with pytest.raises(safetensors.SafetensorError, match="device accel:0 is invalid"):
        safetensors.safe_open(path, framework="pt", device="accel:0")
    with safetensors.safe_open(path, framework="pt", device="cpu") as f:
        weight = f.get_tensor("weight").to("accel:0")
        rows = f.get_slice("weight")[1:3].to("accel:0")
    assert torch.equal(weight.cpu(), tensors["weight"]) and torch.equal(rows.cpu(), tensors["weight"][1:3])
    # load_model calls load_file.
    model = torch.nn.Linear(3, 4, bias=False).to(LAST)
    safetensors.torch.save_file({"weight": tensors["weight"]}, str(tmp_path / "linear.safetensors"))
    assert safetensors.torch.load_model(model, str(tmp_path / "linear.safetensors"), device=LAST) == (set(), [])
    assert model.weight.device == torch.device(LAST) and torch.equal(model.weight.detach().cpu(), tensors["weight"])
    # Other devices reach safetensors' own load_file.
    assert safetensors.torch.load_file(path)["ids"].device == torch.device("cpu")
