"""FlexAttention (torch.nn.attention.flex_attention) on accel, routed as accel's target.

On the host runtime accel's FlexAttention is cpu's: the eager op runs the same
CPU kernels, the compiled op Inductor's C++ flex template, so results are
cpu's bitwise; and cpu's limits hold (no backward, no max scores) with the
exception cpu gets, its message naming accel, and where PyTorch compiles no
flex_attention for cpu (no AVX2, or ATEN_CPU_CAPABILITY=default) none is
compiled for accel either. Where accel's kernels are Triton's (the CUDA runtime, and
TORCH_ACCEL_INDUCTOR=triton on the host runtime, run by Triton's
interpreter) it is cuda's: Inductor's Triton flex templates (attention,
decoding, backward), checked here against a dense float64 reference within
rounding, and, on a mocked CUDA runtime, as the same code as cuda's.
(torch_accel/_inductor/flex_attention.py; docs/compile.md#flexattention.)
"""

import difflib
import json
import os

import pytest
import torch
from torch.nn.attention.flex_attention import AuxRequest, create_block_mask, flex_attention

import torch_accel
from conftest import run_python
from test_compile import _TRITON_CODEGEN, as_cuda_code
from torch_accel._inductor.codegen_config import codegen_config


TARGET_IS_CPU = codegen_config().target == "cpu"
L, E = 32, 16  # the smallest shapes that exercise the paths: one sparse block of 128 per row


def causal(b, h, q, k):
    return q >= k


def sliding_window(b, h, q, k):
    return (q >= k) & (q - k < 8)


def _document_mask(device):
    documents = torch.tensor([0] * 12 + [1] * 14 + [2] * 6, device=device)

    def document(b, h, q, k):
        return (documents[q] == documents[k]) & (q >= k)

    return document


def _mask(name, device):
    return _document_mask(device) if name == "document" else {"causal": causal, "sliding_window": sliding_window}[name]


def relative_bias(score, b, h, q, k):
    return score + (q - k) * 0.125


def _qkv(device, requires_grad=False):
    generator = torch.Generator().manual_seed(0)
    return [torch.randn(1, 2, L, E, generator=generator).to(device).requires_grad_(requires_grad) for _ in range(3)]


@pytest.fixture(autouse=True)
def _no_compile_caches():
    """Compiled here from scratch. Inductor's caches do not key on
    ATEN_CPU_CAPABILITY (torch 2.11, docs/bitwise-comparisons.md): a graph
    cached by a run under another setting would be found again, skip the
    lowering and fail to compile (C++ errors about at::vec), for cpu as for
    accel. `make test-isa` keeps a cache per setting; a plain pytest run
    under ATEN_CPU_CAPABILITY does not. These tests compile a few small graphs."""
    with torch.compiler.config.patch(force_disable_caches=True):
        yield


def _block_mask_tensors(block_mask):
    return [t for t in block_mask.as_tuple() if isinstance(t, torch.Tensor)]


@pytest.mark.parametrize("mask", ["causal", "sliding_window", "document"])
def test_create_block_mask_is_the_targets(mask, target):
    on_accel = create_block_mask(_mask(mask, "accel"), 1, 1, L, L, device="accel")
    on_target = create_block_mask(_mask(mask, target), 1, 1, L, L, device=target)
    tensors = _block_mask_tensors(on_accel)
    assert tensors and all(t.device.type == "accel" for t in tensors)
    for a, t in zip(tensors, _block_mask_tensors(on_target), strict=True):
        assert torch.equal(a.cpu(), t.cpu())


@pytest.mark.parametrize("mask", ["causal", "sliding_window", "document"])
def test_eager_is_the_targets_bitwise(mask, target):
    # The higher-order op's eager implementation: the same torch ops on both devices.
    results = {}
    for device in ("accel", target):
        block_mask = create_block_mask(_mask(mask, device), 1, 1, L, L, device=device)
        results[device] = flex_attention(*_qkv(device), score_mod=relative_bias, block_mask=block_mask)
    assert results["accel"].device.type == "accel"
    assert torch.equal(results["accel"].cpu(), results[target].cpu())


def _cpp_template_compiles():
    """Whether Inductor compiles cpu's flex_attention on this machine: PyTorch's
    own check (lower_cpu refuses unless AVX2 is there and ATEN_CPU_CAPABILITY
    is not ``default``, as `make test-isa`'s aten-default setting sets it)."""
    from torch._inductor.kernel.flex.flex_cpu import check_cpu_supported

    return check_cpu_supported()


def test_compiled_is_the_targets_bitwise(target):
    from torch._inductor.utils import run_and_get_code

    compiled = torch.compile(flex_attention)

    def run(device):
        block_mask = create_block_mask(_mask("document", device), 1, 1, L, L, device=device)
        with torch.no_grad():
            return run_and_get_code(compiled, *_qkv(device), score_mod=relative_bias, block_mask=block_mask)

    if TARGET_IS_CPU and not _cpp_template_compiles():
        # PyTorch compiles no flex_attention for cpu here, and accel's compiled
        # kernel is cpu's: both refused alike, in the lowering.
        errors = {}
        for device in ("accel", target):
            with pytest.raises(Exception) as info:
                run(device)
            errors[device] = info.value
        assert type(errors["accel"]) is type(errors[target])
        for error in errors.values():
            assert "NotImplementedError: torch.compile on current platform is not supported for CPU." in str(error)
        return
    results, codes = {}, {}
    for device in ("accel", target):
        results[device], codes[device] = run(device)
    # The target's template: the same kernel, so the same bits.
    kernel = "cpp_fused_flex_attention" if TARGET_IS_CPU else "triton_tem_fused"
    assert kernel in "".join(codes["accel"]) and kernel in "".join(codes[target])
    assert torch.equal(results["accel"].cpu(), results[target].cpu())


@pytest.mark.skipif(not TARGET_IS_CPU, reason="cpu's limits: where accel's target is cuda, backward runs")
@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_cpus_limits_as_on_cpu(compiled, target):
    # PyTorch 2.11 has no FlexAttention backward on cpu, eager or compiled:
    # _validate_device refuses a query, key or value that requires grad (and
    # Inductor's backward lowering has Triton templates only); nor does it
    # return the max scores there. accel on a cpu target is refused alike:
    # the same exception type, the message naming accel and its target.
    attend = torch.compile(flex_attention) if compiled else flex_attention

    def refusals(device):
        errors = []
        for requiring_grad in range(3):
            q, k, v = _qkv(device)
            (q, k, v)[requiring_grad].requires_grad_()
            with pytest.raises(Exception) as info:
                attend(q, k, v)
            errors.append(info.value)
        with pytest.raises(Exception) as info:
            attend(*_qkv(device), return_aux=AuxRequest(max_scores=True))
        return errors + [info.value]

    on_accel, on_cpu = refusals("accel"), refusals(target)
    assert [type(e) for e in on_accel] == [type(e) for e in on_cpu] == [NotImplementedError] * 4
    for accel, cpu in zip(on_accel[:3], on_cpu[:3]):
        assert str(cpu).startswith("FlexAttention does not support backward on CPU.")
        assert str(accel).startswith(
            "FlexAttention does not support backward on accel with the host runtime's C++ kernels, as on cpu (its target)"
        )
    assert str(on_cpu[3]) == "Returning max scores is not supported on CPU."
    assert str(on_accel[3]).startswith("Returning max scores is not supported on accel with the host runtime's C++ kernels")
    # Still refused for other devices as PyTorch refuses them.
    with pytest.raises(ValueError, match="FlexAttention is only supported on CUDA, CPU or HPU devices"):
        attend(*(t.to("meta") for t in _qkv("cpu")))


def test_log_sum_exp_is_the_targets(target):
    # Asked for explicitly, the log-sum-exp is returned on a cpu target as on cpu (eager).
    outputs = {}
    for device in ("accel", target):
        block_mask = create_block_mask(causal, 1, 1, L, L, device=device)
        outputs[device] = flex_attention(*_qkv(device), block_mask=block_mask, return_aux=AuxRequest(lse=True))
    assert torch.equal(outputs["accel"][0].cpu(), outputs[target][0].cpu())
    assert torch.equal(outputs["accel"][1].lse.cpu(), outputs[target][1].lse.cpu())


# --- Triton kernels: the CUDA runtime's code ----------------------------------

# In a child with TORCH_ACCEL_INDUCTOR=triton (on the CUDA runtime, its own
# mode): compiled forward and backward with a document mask and a score_mod, the
# main template forced by a kernel option (at L=32 the forward would take the
# decoding kernel), and an inference call at the same shapes, which takes the
# decoding kernel; the eager op's forward and backward too.
_TRITON_CASES = """
import json, sys
import torch, torch_accel
from torch._inductor.utils import run_and_get_code
from torch.nn.attention.flex_attention import create_block_mask, flex_attention
sys.path.insert(0, {test_dir!r})
from test_flex_attention import _document_mask, _qkv, relative_bias, L

block_mask = create_block_mask(_document_mask("accel"), 1, 1, L, L, device="accel")
results = {{}}
codes = []
q, k, v = _qkv("accel", requires_grad=True)
compiled = torch.compile(flex_attention)
def step():
    out = compiled(q, k, v, score_mod=relative_bias, block_mask=block_mask,
                   kernel_options={{"FORCE_USE_FLEX_ATTENTION": True}})
    out.sum().backward()  # the backward graph compiles here
    return out
out, code = run_and_get_code(step)
codes += code
results["compiled"] = [out, q.grad, k.grad, v.grad]
with torch.no_grad():
    out, code = run_and_get_code(compiled, *_qkv("accel"), score_mod=relative_bias, block_mask=block_mask)
codes += code
results["decoding"] = [out]
q, k, v = _qkv("accel", requires_grad=True)
out = flex_attention(q, k, v, score_mod=relative_bias, block_mask=block_mask)
out.sum().backward()
results["eager"] = [out, q.grad, k.grad, v.grad]
torch.save({{name: [t.detach().cpu() for t in ts] for name, ts in results.items()}}, {output!r})
print(json.dumps(codes))
"""


def _dense_reference():
    """Attention with the document mask and relative_bias, in float64 on cpu, and its gradients."""
    q, k, v = (t.double().requires_grad_() for t in _qkv("cpu"))
    index = torch.arange(L)
    mask = _document_mask("cpu")(0, 0, index[:, None], index[None, :])
    scores = q @ k.transpose(-1, -2) / E**0.5 + (index[:, None] - index[None, :]) * 0.125
    out = scores.masked_fill(~mask, float("-inf")).softmax(-1) @ v
    out.sum().backward()
    return [out, q.grad, k.grad, v.grad]


@pytest.fixture(scope="module")
def triton_results(tmp_path_factory):
    output = str(tmp_path_factory.mktemp("flex-triton") / "results.pt")
    env = {"TORCH_ACCEL_INDUCTOR": "triton"}  # on the host runtime the mode sets TRITON_INTERPRET=1
    code = _TRITON_CASES.format(test_dir=os.path.dirname(__file__), output=output)
    proc = run_python(code, env=env, timeout=900)
    assert proc.returncode == 0, proc.stderr
    return torch.load(output), json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.timeout(900)
@pytest.mark.parametrize("case", ["compiled", "decoding", "eager"])
def test_triton_kernels_compute_attention(case, triton_results):
    results, codes = triton_results
    reference = _dense_reference()
    # Other kernels than the reference's (blockwise online softmax in float32): within rounding.
    for actual, expected in zip(results[case], reference):
        torch.testing.assert_close(actual, expected.float(), rtol=1e-4, atol=1e-5)
    code = "\n".join(codes)
    # The compiled calls ran Triton's flex templates (the forward, the
    # backward, the decoding kernel), launched on accel's current stream.
    assert "cpp_fused" not in code and "get_raw_stream" in code
    # forward, backward and decoding templates
    assert code.count("def triton_tem_fused") >= 3 and "'SPLIT_KV':" in code


# --- The code for the CUDA runtime: cuda's, apart from the device's name --------

_FLEX_CODEGEN = (
    _TRITON_CODEGEN[: _TRITON_CODEGEN.index("fn = lambda t:")]
    + """
import json
from torch._higher_order_ops.flex_attention import flex_attention as flex_attention_hop
from torch.nn.attention.flex_attention import _apply_kernel_options


def causal(b, h, q, k):
    return q >= k


def score_mod(s, b, h, q, k):
    return s + (q - k) * 0.125


def lower(device, length, options):
    mode = FakeTensorMode()
    blocks = max(length // 128, 1)
    with mode:
        qkv = [torch.empty(1, 2, length, 64, device=device) for _ in range(3)]
        block_mask = [torch.empty(1, 1, blocks, dtype=torch.int32, device=device),
                      torch.empty(1, 1, blocks, blocks, dtype=torch.int32, device=device)] * 4
    def fn(q, k, v, *tensors):
        return flex_attention_hop(q, k, v, score_mod, (length, length, *tensors, 128, 128, causal), 0.125, options)[0]
    inputs = qkv + block_mask
    gm = make_fx(fn, decomposition_table=select_decomp_table())(*inputs)
    with V.set_fake_mode(mode), DebugContext():
        graph = GraphLowering(gm, example_inputs=inputs)
        with V.set_graph_handler(graph):
            graph.run(*inputs)
            return graph.codegen()[0].value


# The kernel options flex_attention derives for a cuda query (grad enabled:
# the log-sum-exp is written), the same for both graphs: the lowering is compared.
with FakeTensorMode():
    options = _apply_kernel_options(*(torch.empty(1, 2, 256, 64, device="cuda:0") for _ in range(3)), False, None)
print(json.dumps({d: lower(d, 256, options) for d in ("accel:0", "cuda:0")}))
"""
)


@pytest.mark.timeout(600)
def test_triton_code_is_cudas():
    pytest.importorskip("triton")
    proc = run_python(_FLEX_CODEGEN, env={"TORCH_ACCEL_RUNTIME": "host"}, timeout=600)
    assert proc.returncode == 0, proc.stderr
    codes = json.loads(proc.stdout.strip().splitlines()[-1])
    accel, cuda = codes["accel:0"], codes["cuda:0"]
    assert "empty_strided_accel(" in accel and "torch.accel._DeviceGuard(0)" in accel
    accel, cuda = as_cuda_code(accel), as_cuda_code(cuda)
    assert accel == cuda, "\n".join(difflib.unified_diff(cuda.splitlines(), accel.splitlines(), "cuda", "accel", lineterm=""))
    # Triton's flex template (not the C++ one), with an H100's configuration
    # (cuda's heuristic for sm_90: float32, head dimension 64).
    assert "def triton_tem_fused" in accel and "cpp_fused" not in accel
    assert "multi_processor_count=132" in accel and "'BLOCK_M': 128, 'BLOCK_N': 32" in accel
