"""Tensor kinds beyond strided, quantized and sparse (test_quantized.py,
test_sparse.py): nested tensors run the target's nested kernels on accel;
kinds that only exist on the CPU (mkldnn) and meta tensors give clear errors,
never a tensor with bogus contents.
"""

from __future__ import annotations

import pytest
import torch

from _kinds import ACCEL, TARGET, assert_names_accel, assert_same, assert_same_outcome, without_device


def tensors(seed: int = 0) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(2, 3, generator=g).to(TARGET), torch.randn(4, 3, generator=g).to(TARGET)]


def nested(ts: list[torch.Tensor]) -> torch.Tensor:
    return torch.nested.nested_tensor(ts)


# Strided nested tensors (NestedTensorImpl): the target's NestedTensor kernels.
NESTED = {
    "nested_tensor": lambda ts: nested(ts),
    "as_nested_tensor": lambda ts: torch.nested.as_nested_tensor(ts),
    "unbind": lambda ts: nested(ts).unbind(),
    "to_padded_tensor": lambda ts: torch.nested.to_padded_tensor(nested(ts), -1.0),
    "add": lambda ts: nested(ts) + nested(ts),
    "mul.scalar": lambda ts: nested(ts) * 3,
    "relu": lambda ts: torch.relu(nested(ts)),
    "gelu": lambda ts: torch.nn.functional.gelu(nested(ts)),
    "softmax": lambda ts: torch.softmax(nested(ts), dim=-1),
    "linear": lambda ts: torch.nn.functional.linear(nested(ts), ts[1][:2].contiguous(), ts[0][0, :2].contiguous()),
    "matmul": lambda ts: torch.matmul(nested(ts), nested([t.t().contiguous() for t in ts])),
    "transpose": lambda ts: nested(ts).transpose(1, 2),
    "transpose.contiguous": lambda ts: nested(ts).transpose(1, 2).contiguous(),
    "clone": lambda ts: nested(ts).clone(),
    "sum.dim": lambda ts: nested(ts).sum(dim=-1, keepdim=True),
    "mul_": lambda ts: nested(ts).mul_(2),
    "narrow_views_share_memory": lambda ts: nested(ts).unbind()[1]._base is not None,
    "jagged.sin": lambda ts: torch.nested.nested_tensor(ts, layout=torch.jagged).sin(),
    "jagged.values": lambda ts: torch.nested.nested_tensor(ts, layout=torch.jagged).values(),
    "jagged.offsets": lambda ts: torch.nested.nested_tensor(ts, layout=torch.jagged).offsets(),
    "cumsum": lambda ts: torch.cumsum(nested(ts), 0),  # no nested kernel: raises on both
}


@pytest.mark.parametrize("op", sorted(NESTED))
def test_nested_tensors_match_the_target(op):
    assert_same_outcome(NESTED[op], tensors())


def test_nested_tensors_have_the_accel_nested_key():
    nt = nested(tensors()).to(ACCEL)
    assert nt.is_nested and nt.device.type == ACCEL
    assert "NestedTensorPrivateUse1" in str(torch._C._dispatch_keys(nt))
    assert all(t.device.type == ACCEL for t in nt.unbind())


def test_nested_to_accel_and_back():
    nt = nested(tensors())
    on_accel = nt.to(ACCEL)
    assert_same(on_accel, nt)
    back = on_accel.cpu()
    assert back.device.type == "cpu"
    assert_same(back, nt.cpu(), same_device=True)
    # A CPU copy, not a view of accel memory.
    on_accel.mul_(0)
    assert_same(back, nt.cpu(), same_device=True)


def test_nested_printing_matches_the_target():
    nt = nested(tensors())
    text = repr(nt.to(ACCEL))
    assert "device='accel:0'" in text
    assert without_device(text) == without_device(repr(nt))


def test_nested_errors_name_accel():
    nt = nested(tensors()).to(ACCEL)
    with pytest.raises(NotImplementedError, match=r"'aten::cumsum.*accel device.*NestedTensor"):
        torch.cumsum(nt, 0)


def test_mkldnn_tensors_are_cpu_only():
    x = tensors()[0].to(ACCEL)
    # The target (cpu) makes an MkldnnCPU tensor, a kind no other device has.
    with pytest.raises(NotImplementedError, match=r"aten::to_mkldnn.*accel device") as error:
        x.to_mkldnn()
    assert_names_accel(error.value)
    with pytest.raises(NotImplementedError, match="mkldnn layout: accel"):
        torch.empty(2, layout=torch._mkldnn, device=ACCEL)
    with pytest.raises(NotImplementedError, match="mkldnn layout: accel"):
        torch.randn(2, 2).to_mkldnn().to(ACCEL)


def test_meta_tensors_move_as_on_the_target():
    error = assert_same_outcome(lambda x: torch.empty(3, device="meta").to(x.device), tensors()[0])
    assert isinstance(error, NotImplementedError)  # no data to copy
    moved = tensors()[0].to(ACCEL).to_sparse().to("meta")
    assert moved.device.type == "meta" and moved.layout == torch.sparse_coo


def test_generated_tensor_methods_move_every_kind():
    # torch.utils.generate_methods_for_privateuse1_backend: Tensor.accel(), is_accel.
    x = tensors()[0].cpu()
    moved = {
        "sparse": x.to_sparse().accel(),
        "sparse_csr": x.to_sparse_csr().accel(),
        "quantized": torch.quantize_per_tensor(x, 0.1, 0, torch.quint8).accel(),
        "nested": torch.nested.nested_tensor([x, x[:1]]).accel(),
    }
    for kind, t in moved.items():
        assert t.is_accel and t.device.type == ACCEL, kind
    assert_same(moved["sparse"], x.to_sparse().to(TARGET))
    assert_same(moved["quantized"], torch.quantize_per_tensor(x, 0.1, 0, torch.quint8).to(TARGET))
