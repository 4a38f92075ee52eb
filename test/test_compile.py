"""torch.compile on accel: Inductor generates C++ kernels on the host runtime and
Triton kernels on the CUDA runtime, and compiled results match eager accel and
the target device.

Forward computations are compared with the target in this process; training
runs (backward) are compared with a target run in a process without
torch_accel (see _cases.py for why).
"""

import difflib
import importlib.util
import json
import logging
import re

import pytest
import torch
from torch import nn
from torch._dynamo.testing import CompileCounterWithBackend
from torch._inductor.utils import run_and_get_code
from torch.utils._pytree import tree_flatten, tree_map

import _cases
import torch_accel
from conftest import run_python, run_target_cases

RUNTIME = torch_accel.runtime()
# What a generated kernel looks like: Triton on the CUDA runtime, C++ on the host runtime.
KERNEL_MARKER = "@triton.jit" if RUNTIME == "cuda" else 'extern "C"'


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def compile_and_run(fn, *args, **compile_options):
    """Compile ``fn``, call it on ``args``; return the result and the generated code."""
    result, code = run_and_get_code(torch.compile(fn, **compile_options), *args)
    return result, "\n".join(code)


def assert_close(actual, expected, **tolerances):
    actual, expected = tree_flatten(actual)[0], tree_flatten(expected)[0]
    assert len(actual) == len(expected)
    for a, e in zip(actual, expected):
        torch.testing.assert_close(a.cpu(), e.cpu(), **tolerances)


def on(device, tensors):
    return tree_map(lambda t: t.to(device), tensors)


# --- Registration -------------------------------------------------------------


def test_import_does_not_import_inductor():
    proc = run_python(
        """
        import sys
        import torch_accel
        print(sorted(m for m in sys.modules if m.startswith(("torch._inductor.codegen", "torch._inductor.graph"))))
        """
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def test_backend_registered_for_the_runtime():
    from torch._inductor.codegen import common
    from torch._inductor.codegen.cpp import CppScheduling
    from torch._inductor.codegen.triton import TritonScheduling

    from torch_accel._inductor.codegen import AccelCodegenIdentity, AccelWrapperCodegen

    torch.compile(lambda x: x + 1)(torch.ones(2, device="accel"))
    expected = TritonScheduling if RUNTIME == "cuda" else CppScheduling
    assert common.get_scheduling_for_device("accel") is expected
    assert common.get_wrapper_codegen_for_device("accel") is AccelWrapperCodegen
    cpp_wrapper = common.get_wrapper_codegen_for_device("accel", cpp_wrapper=True)
    assert cpp_wrapper.__module__ == "torch_accel._inductor.cpp_wrapper"  # test_cpp_wrapper, test_aot_inductor
    assert "torch_accel._C" in common.get_device_op_overrides("accel").import_get_raw_stream_as("get_raw_stream")
    # accel's pass keys the FX graph cache; Inductor's own registration must not have dropped it.
    assert isinstance(common.custom_backend_passes["accel"], AccelCodegenIdentity)
    assert common.custom_backend_passes["accel"].runtime == RUNTIME
    # None: init_backend_registration() must not register accel's backend again (see registration).
    assert torch.accel.Scheduling is expected and torch.accel.CppWrapperCodegen is None


def test_backend_selection_by_runtime():
    # The CUDA runtime's choice, checked on either runtime (nothing is registered).
    from torch._inductor.codegen.cpp import CppScheduling
    from torch._inductor.codegen.triton import TritonScheduling

    from torch_accel._inductor.codegen import AccelWrapperCodegen, device_op_overrides
    from torch_accel._inductor.codegen_config import CodegenConfig, codegen_config
    from torch_accel._inductor.registration import backend_for

    triton, cpp = backend_for("triton"), backend_for("cpp")
    assert triton.Scheduling is TritonScheduling and cpp.Scheduling is CppScheduling
    assert triton.PythonWrapperCodegen is cpp.PythonWrapperCodegen is AccelWrapperCodegen
    ops = device_op_overrides("triton")
    assert ops.import_get_raw_stream_as("get_raw_stream") == "from torch_accel._C import _get_raw_stream as get_raw_stream"
    # As cuda's: a C type and C functions, cheap on every call of a graph.
    assert ops.device_guard(1) == "torch.accel._DeviceGuard(1)"
    assert ops.set_device(1) == "torch.accel._C._set_device(1)"
    assert ops.synchronize() == "torch.accel.synchronize()"
    with pytest.raises(ValueError, match="no Inductor backend generating 'tpu' kernels"):
        backend_for("tpu")
    # This process: the runtime's own kernels (TORCH_ACCEL_INDUCTOR unset).
    assert codegen_config() == CodegenConfig(RUNTIME, "triton" if RUNTIME == "cuda" else "cpp")
    assert codegen_config().target == torch_accel._target_device_type()
    assert CodegenConfig("host", "triton", interpreted=True).target == "cuda" and CodegenConfig("host", "cpp").target == "cpu"


# Generates the Triton code of the CUDA runtime's backend, whatever the machine:
# the CUDA device queries Inductor makes are answered with an H100's
# properties. Code generation only: nothing is compiled or launched.
_TRITON_CODEGEN = """
import types
import torch, torch_accel
import torch._inductor.scheduler as scheduler
import torch.utils._triton as triton_utils
from torch._dynamo.device_interface import CudaInterface
from torch._inductor.debug import DebugContext
from torch._inductor.decomposition import select_decomp_table
from torch._inductor.graph import GraphLowering
from torch._inductor.virtualized import V
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.proxy_tensor import make_fx
from torch_accel._inductor.codegen_config import CodegenConfig
from torch_accel._inductor.registration import register

# The CUDA runtime as Inductor and the patches see it: Triton, and a cuda
# target (what the extension answers: its name, target and capabilities).
torch_accel._C._runtime_name = lambda: "cuda"
torch_accel._C._target_device_type = lambda: "cuda"
torch_accel._C._runtime_capabilities = lambda: dict(host_memory=False, inductor_kernels="triton", compiles_triton=True)
register(CodegenConfig("cuda", "triton"))

h100 = types.SimpleNamespace(
    name="NVIDIA H100", multi_processor_count=132, major=9, minor=0, regs_per_multiprocessor=65536,
    max_threads_per_multi_processor=2048, max_threads_per_block=1024, warp_size=32,
)
CudaInterface.is_available = staticmethod(lambda: True)
CudaInterface.get_device_properties = staticmethod(lambda device=None: h100)
CudaInterface.get_compute_capability = staticmethod(lambda device=None: 90)
torch.cuda.get_device_properties = lambda device=None: h100
torch.cuda.get_device_capability = lambda device=None: (9, 0)
scheduler.has_triton = lambda: True
triton_utils.triton_hash_with_backend = lambda: "no-gpu"

fn = lambda t: torch.softmax(torch.relu(t) @ t.t(), -1) / 3 + 1
mode = FakeTensorMode()
with mode:
    x = torch.empty(64, 64, device="accel:1")
gm = make_fx(fn, decomposition_table=select_decomp_table())(x)
with V.set_fake_mode(mode), DebugContext():
    graph = GraphLowering(gm, example_inputs=[x])
    with V.set_graph_handler(graph):
        graph.run(x)
        print(graph.codegen()[0].value)
"""


@pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="needs the triton package")
def test_cuda_runtime_generates_triton_launched_on_the_accel_stream():
    proc = run_python(_TRITON_CODEGEN, env={"TORCH_ACCEL_RUNTIME": "host"})
    assert proc.returncode == 0, proc.stderr
    code = proc.stdout
    assert code.count("@triton.jit") == 2 and "cpp_fused" not in code
    # Decided as for cuda, accel's target there: a division by a constant is a
    # multiplication by its reciprocal (for a cpu target, a division).
    assert "0.3333333333333333, tl.float32" in code and "3.0, tl.float32" not in code
    # Compiled for the CUDA target, as a kernel for cuda:1 (accel:1 is cuda:1).
    assert "'device': DeviceProperties(type='cuda', index=1," in code
    # The wrapper guards accel:1, allocates there, and launches on the accel current stream.
    assert "from torch_accel._C import _get_raw_stream as get_raw_stream" in code
    assert "with torch.accel._DeviceGuard(1):" in code
    assert "torch.accel._C._set_device(1)" in code
    assert re.search(r"empty_strided_accel\(.*, 1\)", code)
    assert "stream1 = get_raw_stream(1)" in code
    assert re.search(r"triton_\w+\.run\(.*stream=stream1\)", code)


# Inductor's choices for cuda, made for accel's Triton code: the same graphs
# lowered for accel:0 (the CUDA runtime, as in _TRITON_CODEGEN) and for cuda:0,
# through the passes compile_fx runs (joint graph, post grad) and GraphLowering.
_CUDA_CHOICES_CODEGEN = (
    _TRITON_CODEGEN[: _TRITON_CODEGEN.index("fn = lambda t:")].replace(
        "from torch._inductor.debug import DebugContext",
        "import json\nfrom torch._inductor.compile_fx import _recursive_post_grad_passes\n"
        "from torch._inductor.debug import DebugContext\nfrom torch._inductor.fx_passes.joint_graph import joint_graph_passes",
    )
    + """

def lower(fn, device, *shapes):
    mode = FakeTensorMode()
    with mode:
        inputs = [torch.empty(*shape, dtype=dtype, device=device) for shape, dtype in shapes]
    gm = make_fx(fn, decomposition_table=select_decomp_table())(*inputs)
    with V.set_fake_mode(mode), DebugContext():
        joint_graph_passes(gm)
        _recursive_post_grad_passes(gm, is_inference=True)
        graph = GraphLowering(gm, example_inputs=inputs)
        with V.set_graph_handler(graph):
            graph.run(*inputs)
            return graph.codegen()[0].value


def layer_norm_backward(x, w, grad, mean, rstd):
    return torch.ops.aten.native_layer_norm_backward(grad, x, [x.shape[-1]], mean, rstd, w, None, [True, True, False])[:2]


def efficient_attention(q, k, v, bias_source):
    # A computed bias: Inductor chooses its strides.
    return torch.ops.aten._scaled_dot_product_efficient_attention(q, k, v, bias_source * 2, False)[0]


f32 = torch.float32
GRAPHS = {
    # rows too wide for a persistent reduction, enough of them not to split it (codegen only: no memory)
    "online_softmax": (lambda x: torch.softmax(x, -1), [((1024, 16384), f32)]),
    # a layer norm's backward at the sizes mix-order fusion is for
    "mix_order_reduction": (
        layer_norm_backward,
        [((32768, 256), f32), ((256,), f32), ((32768, 256), f32), ((32768, 1), f32), ((32768, 1), f32)],
    ),
    "bmm_batch_1": (lambda a, b: torch.bmm(a, b) + 1, [((1, 64, 32), f32), ((1, 32, 16), f32)]),
}
for dtype in (torch.float16, torch.bfloat16):
    for length in (12, 13):
        GRAPHS[f"attention_bias_{str(dtype)[6:]}_{length}"] = (
            efficient_attention,
            [((2, 4, length, 8), dtype)] * 3 + [((2, 4, length, length), dtype)],
        )
print(json.dumps({name: {d: lower(fn, d, *shapes) for d in ("accel:0", "cuda:0")} for name, (fn, shapes) in GRAPHS.items()}))
"""
)


def as_cuda_code(code: str) -> str:
    """accel's generated code with accel's names for device, allocation,
    guard and stream written as cuda's, and without comments."""
    lines = []
    for line in code.splitlines():
        if not line.strip() or re.match(r"\s*#", line) or re.match(r"from (torch_accel\._C|torch\._C) import _", line.strip()):
            continue
        line = re.sub(r"empty_strided_accel\((.*), \d+\)", r"empty_strided_cuda(\1)", line)
        line = line.replace("torch.accel._DeviceGuard(", "torch.cuda._DeviceGuard(").replace("torch.accel._C._set_device(", "torch.cuda.set_device(")
        lines.append(line.replace("accel:", "cuda:").replace("device_str='accel'", "device_str='cuda'"))
    return "\n".join(lines)


@pytest.fixture(scope="module")
def cuda_choices_code():
    proc = run_python(_CUDA_CHOICES_CODEGEN, env={"TORCH_ACCEL_RUNTIME": "host"}, timeout=600)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


_CUDA_CHOICES = [
    "online_softmax",
    "mix_order_reduction",
    "bmm_batch_1",
    *(f"attention_bias_{dtype}_{length}" for dtype in ("float16", "bfloat16") for length in (12, 13)),
]


@pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="needs the triton package")
@pytest.mark.parametrize("name", _CUDA_CHOICES)
def test_cuda_choices_generate_cudas_code(name, cuda_choices_code):
    accel, cuda = cuda_choices_code[name]["accel:0"], cuda_choices_code[name]["cuda:0"]
    assert "empty_strided_accel(" in accel and "torch.accel._DeviceGuard(0)" in accel
    accel, cuda = as_cuda_code(accel), as_cuda_code(cuda)
    assert accel == cuda, "\n".join(difflib.unified_diff(cuda.splitlines(), accel.splitlines(), "cuda", "accel", lineterm=""))
    # ... and the choice is the one cuda makes:
    if name == "online_softmax":
        assert "triton_helpers.online_softmax_combine(" in accel
    elif name == "mix_order_reduction":
        assert "'grid_type': 'MixOrderReductionGrid'" in accel
    elif name == "bmm_batch_1":
        assert "extern_kernels.mm(" in accel and "extern_kernels.bmm(" not in accel
    else:
        # The bias rows padded to a multiple of 8 elements, as CUDA's kernel requires.
        length = int(name.rsplit("_", 1)[1])
        row = -(-length // 8) * 8
        strides = f"({4 * length * row}, {length * row}, {row}, 1)"
        assert re.search(rf"empty_strided_cuda\(\(2, 4, {length}, {length}\), {re.escape(strides)}, torch\.", accel), accel


def test_accel_is_a_gpu_type_on_the_cuda_runtime_before_anything_is_traced():
    from torch._inductor.utils import is_gpu

    assert is_gpu("accel") == (RUNTIME == "cuda")
    # The CUDA runtime's case, checked on either runtime: loading Dynamo is
    # enough (AOTAutograd asks is_gpu while it traces the first graph, before
    # Inductor registers backends).
    proc = run_python(
        """
        import sys
        import torch, torch_accel
        torch_accel._C._runtime_name = lambda: "cuda"
        torch_accel._C._target_device_type = lambda: "cuda"
        torch_accel._C._runtime_capabilities = lambda: dict(host_memory=False, inductor_kernels="triton", compiles_triton=True)
        import torch._dynamo
        from torch._inductor import utils
        print(utils.is_gpu("accel"), utils.get_gpu_type(), "torch._inductor.codegen.common" in sys.modules)
        """
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["True", "cuda", "False"]


def test_codegen_identity_differs_by_runtime():
    from torch_accel._inductor.codegen import AccelCodegenIdentity
    from torch_accel._inductor.codegen_config import CodegenConfig

    configs = [CodegenConfig("host", "cpp"), CodegenConfig("cuda", "triton"), CodegenConfig("host", "triton", interpreted=True)]
    uuids = {AccelCodegenIdentity(c).uuid() for c in configs}
    assert len(uuids) == 3


def test_registration_when_inductor_was_set_up_first():
    proc = run_python(
        """
        import torch
        from torch._inductor.codegen.common import init_backend_registration
        init_backend_registration()
        import torch_accel
        x = torch.arange(4.0, device="accel")
        print(torch.compile(lambda t: t * 2 + 1)(x).tolist())
        """
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "[1.0, 3.0, 5.0, 7.0]"


def test_fake_convolution_has_the_real_layout():
    from torch._subclasses.fake_tensor import FakeTensorMode

    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 3, 8, 8, generator=g).to("accel").to(memory_format=torch.channels_last).requires_grad_()
    w = torch.randn(4, 3, 3, 3, generator=g).to("accel").requires_grad_()
    real = nn.functional.conv2d(x, w, padding=1)
    real_grads = torch.autograd.grad(real.sum(), (x, w))
    with FakeTensorMode() as mode:
        fx, fw = mode.from_tensor(x), mode.from_tensor(w)
        fake = nn.functional.conv2d(fx, fw, padding=1)
        fake_grads = torch.autograd.grad(fake.sum(), (fx, fw))
    assert fake.device == real.device and fake.stride() == real.stride()
    for f, r in zip(fake_grads, real_grads):
        assert f.device == r.device and f.stride() == r.stride()


# --- Operators: compiled accel against eager accel and the compiled target ---


def _randn(*shapes):
    g = torch.Generator().manual_seed(0)
    return [torch.randn(*shape, generator=g) for shape in shapes]


OPERATORS = {
    "pointwise": (lambda x: torch.sigmoid(x) * x.cos() + 1, lambda: _randn((64, 33))),
    "reduction": (lambda x: (x.sum(1), x.amax(0), x.var(1)), lambda: _randn((64, 33))),
    "matmul": (lambda a, b: torch.relu(a @ b) + 1, lambda: _randn((32, 48), (48, 16))),
    "softmax": (lambda x: torch.softmax(x * 2, -1), lambda: _randn((16, 100))),
    "layernorm": (lambda x, w, b: nn.functional.layer_norm(x, (33,), w, b), lambda: _randn((64, 33), (33,), (33,))),
    "indexing": (
        lambda x, i: (x[i] * 2, x.index_select(1, i), torch.zeros_like(x).index_put((i,), x[:4], accumulate=True)),
        lambda: [*_randn((64, 33)), torch.tensor([3, 1, 3, 30])],
    ),
    "conv-channels-last": (
        lambda x, w: torch.relu(nn.functional.conv2d(x, w, padding=1)),
        lambda: [_randn((2, 3, 8, 8))[0].to(memory_format=torch.channels_last), _randn((4, 3, 3, 3))[0]],
    ),
}


@pytest.mark.parametrize("name", list(OPERATORS))
def test_operator(name, target):
    fn, make_inputs = OPERATORS[name]
    inputs = make_inputs()
    result, code = compile_and_run(fn, *on("accel", inputs))
    assert KERNEL_MARKER in code
    assert {str(t.device) for t in tree_flatten(result)[0]} == {"accel:0"}
    assert_close(result, fn(*on("accel", inputs)), rtol=1e-4, atol=1e-5)
    torch._dynamo.reset()
    # Compiled for the target, the same code runs on the same inputs: the same bits.
    assert_close(result, torch.compile(fn)(*on(target, inputs)), rtol=0, atol=0, check_stride=True)


# --- Training: compiled forward and backward ----------------------------------


@pytest.fixture(scope="module")
def compiled_reference(target, tmp_path_factory):
    return run_target_cases(target, tmp_path_factory.mktemp("compiled-reference"), "--compiled")


def assert_same_run(actual: dict, expected: dict, **tolerances) -> None:
    assert_close(actual["losses"], expected["losses"], **tolerances)
    for key in ("grads", "state"):
        assert actual[key].keys() == expected[key].keys()
        for name in expected[key]:
            torch.testing.assert_close(actual[key][name], expected[key][name], **tolerances, msg=f"{key}.{name}")


@pytest.mark.parametrize("model", sorted(_cases.MODELS))
def test_training_step(model, compiled_reference):
    compiled = _cases.train(model, "sgd", "accel", compiled=True, dropout=False)
    assert compiled["devices"] == ["accel:0"]
    assert_same_run(compiled, _cases.train(model, "sgd", "accel", dropout=False), rtol=1e-4, atol=1e-5)
    # Inductor generates the target's code for accel (test_generated_code_is_the_targets),
    # and both runs are deterministic (_cases.deterministic): the same bits.
    assert_same_run(compiled, compiled_reference[f"train-{model}-sgd"], rtol=0, atol=0)
    assert compiled["losses"][-1] < compiled["losses"][0] * 1.5  # it trains, not diverges


# --- The target's code ----------------------------------------------------------


def normalized_code(code: str) -> str:
    """Generated code without what names its device: buffer allocations
    (cpu's and accel's allocation functions), device strings, Python comments
    (kernel paths, node mappings) and accel's import of its allocator."""
    lines = []
    for line in code.splitlines():
        if not line.strip() or re.match(r"\s*#(\s|$)", line) or "from torch_accel._C import _empty_strided" in line:
            continue
        line = re.sub(r"empty_strided_cpu\((.*), (torch\.\w+)\)", r"ALLOC(\1, \2)", line)
        line = re.sub(r"empty_strided_accel\((.*), (torch\.\w+), 0\)", r"ALLOC(\1, \2)", line)
        lines.append(re.sub(r"device='(cpu|accel:0)'", "device=DEVICE", line))
    return "\n".join(lines)


def compiled_training_step(model_name: str, device: str):
    """Forward and backward of a _cases model (no dropout), compiled on
    ``device``: (loss, gradients, [forward code, backward code])."""
    model_class, make_batch = _cases.MODELS[model_name]
    torch.manual_seed(0)
    model = _cases.without_dropout(model_class()).to(device)
    inputs, labels = make_batch(device, 0)
    compiled = torch.compile(model)

    def step():
        logits = compiled(inputs)
        loss = nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1))
        loss.backward()
        return loss

    loss, code = run_and_get_code(step)
    return loss, [p.grad for p in model.parameters()], code


@pytest.mark.skipif(RUNTIME != "host", reason="compares with code for cpu, the host runtime's target, in this process")
@pytest.mark.parametrize("model", sorted(_cases.MODELS))
def test_generated_code_is_the_targets(model):
    # Inductor decides by device type in many places (channels-last layouts
    # and convolution biases for oneDNN, fused attention, division by a
    # constant, ...): for accel it must decide as for the target, whose
    # kernels accel runs. Then the compiled training step is the target's:
    # same C++ kernels, same extern calls, same buffers, and so bit for bit
    # the same numbers.
    accel_loss, accel_grads, accel_code = compiled_training_step(model, "accel")
    torch._dynamo.reset()
    cpu_loss, cpu_grads, cpu_code = compiled_training_step(model, "cpu")
    assert len(accel_code) == len(cpu_code) == 2  # forward and backward
    for accel, cpu in zip(accel_code, cpu_code):
        accel, cpu = normalized_code(accel), normalized_code(cpu)
        assert accel == cpu, "\n".join(difflib.unified_diff(cpu.splitlines(), accel.splitlines(), "cpu", "accel", lineterm=""))
    assert "empty_strided_accel(" in accel_code[0]
    if model == "cnn":
        # oneDNN's convolutions, channels-last, with their bias
        assert re.search(r"extern_kernels\.convolution\(\w+, \w+, primals_\d+,", accel_code[0])
    else:
        assert "aten._scaled_dot_product_flash_attention_for_cpu.default(" in accel_code[0]
    assert torch.equal(accel_loss.cpu(), cpu_loss)
    for a, c in zip(accel_grads, cpu_grads, strict=True):
        assert torch.equal(a.cpu(), c)


# The target's fused attention, compiled (csrc/aten/ScaledDotProductAttention.cpp):
# forward and backward call the flash operators the target's SDPA takes, as
# extern kernels; on a GPU float16 takes CUDA's flash attention (a head
# dimension of 12 padded to 16 as for cuda), never the math decomposition.
_FLASH_OPERATORS = {
    "cuda": ("aten._scaled_dot_product_flash_attention.default(", "aten._scaled_dot_product_flash_attention_backward.default("),
    "cpu": (
        "aten._scaled_dot_product_flash_attention_for_cpu.default(",
        "aten._scaled_dot_product_flash_attention_for_cpu_backward.default(",
    ),
}


@pytest.mark.parametrize("head_dim", [16, 12], ids=lambda d: f"head_dim{d}")
def test_compiled_attention_runs_the_targets_fused_kernels(head_dim, target):
    if target == "cuda" and torch.cuda.get_device_capability()[0] < 8:
        pytest.fail("CUDA's flash attention needs compute capability 8.0; this GPU has less")
    dtype = torch.float16 if target == "cuda" else torch.float32
    g = torch.Generator().manual_seed(0)
    inputs = [torch.randn(2, 3, 24, head_dim, generator=g).to(dtype) for _ in range(3)]

    def step(compile):
        q, k, v = (t.to("accel").requires_grad_() for t in inputs)
        attention = nn.functional.scaled_dot_product_attention
        out = (torch.compile(attention) if compile else attention)(q, k, v, is_causal=True)
        out.backward(torch.ones_like(out))
        return out, q.grad, k.grad, v.grad

    compiled, code = run_and_get_code(step, True)
    assert len(code) == 2  # forward and backward
    forward, backward = _FLASH_OPERATORS[target]
    assert forward in code[0] and backward in code[1]
    assert "_scaled_dot_product_attention_math" not in "".join(code) and "bmm" not in "".join(code)
    assert_close(compiled, step(False))


def test_compiled_attention_with_a_mask_calls_the_targets_fused_operator(target):
    # Forward only (a cuda backward cannot run in this process): compiled for
    # accel, attention with a mask calls the fused operator that compiling for
    # the target calls (cuda: memory-efficient attention, as masks keep flash
    # attention out), and gives what accel's eager attention gives.
    dtype = torch.float16 if target == "cuda" else torch.float32
    g = torch.Generator().manual_seed(0)
    q, k, v, mask = (torch.randn(shape, generator=g).to(dtype) for shape in [(2, 3, 24, 16)] * 3 + [(24, 24)])

    def attention(q, k, v, mask):
        return nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)

    def fused_operators(code):
        return sorted(set(re.findall(r"aten\._scaled_dot_product_\w+\.default\(", code)))

    result, code = compile_and_run(attention, *on("accel", [q, k, v, mask]))
    torch._dynamo.reset()
    _, target_code = compile_and_run(attention, *on(target, [q, k, v, mask]))
    assert fused_operators(code) == fused_operators(target_code) != []
    if target == "cuda":
        assert fused_operators(code) == ["aten._scaled_dot_product_efficient_attention.default("]
    assert_close(result, attention(*on("accel", [q, k, v, mask])), rtol=0, atol=0)


# --- Buffer allocation in generated code -----------------------------------------


def test_allocation_in_generated_code():
    x = torch.randn(8, 8).to("accel")
    result, code = compile_and_run(lambda t: (t @ t).relu() + 1, x)
    assert re.search(r"= empty_strided_accel\(\(8, 8\), \(8, 1\), torch\.float32, 0\)", code)
    assert "device='accel" not in code.split("def get_args")[0]  # (get_args makes example inputs)
    assert_close(result, (x @ x).relu() + 1)


def test_empty_strided_for_generated_code(two_devices):
    from torch_accel._C import _empty_strided

    t = _empty_strided((2, 3, 4), (12, 1, 3), torch.float16, 1)
    assert t.device == torch.device("accel:1") and t.dtype == torch.float16
    assert t.shape == (2, 3, 4) and t.stride() == (12, 1, 3)
    assert torch_accel.current_device() == 0
    assert _empty_strided((), (), torch.int64, 0).shape == ()
    with pytest.raises(RuntimeError, match="Invalid accel device index 9"):
        _empty_strided((2,), (1,), torch.float32, 9)
    with pytest.raises(TypeError, match="takes 4 arguments"):
        _empty_strided((2,), (1,), torch.float32)
    with pytest.raises(TypeError, match="dtype must be a torch.dtype"):
        _empty_strided((2,), (1,), "float32", 0)


# --- mode="reduce-overhead" (accel graphs) ------------------------------------------


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def test_reduce_overhead_replays_accel_graphs():
    # Inductor captures CUDA graphs (its trees) for graphs on exactly one cuda
    # device; an accel-only graph is captured as an accel graph instead
    # (torch_accel/_inductor/graphs.py; test_compile_graphs has the details), on fresh
    # compiles and FX graph cache hits alike, with no skip recorded or logged
    # and no CUDA graph tree built.
    from torch._dynamo.utils import counters
    from torch._inductor import cudagraph_trees

    fn = lambda x, w: torch.relu(x @ w).sum(0) + 1  # noqa: E731
    x, w = on("accel", _randn((16, 8), (8, 4)))
    records = _Records()
    skips = counters["inductor"]["cudagraph_skips"]
    captures = counters["inductor"]["accel_graph_captures"]
    logger = logging.getLogger("torch._inductor.cudagraph_utils.__cudagraphs")
    torch._logging.set_logs(cudagraphs=True)
    logger.addHandler(records)
    runs = []
    try:
        for _ in range(2):  # a fresh compile, then (with the FX graph cache on) a cache hit
            torch._dynamo.reset()
            compiled = torch.compile(fn, mode="reduce-overhead")
            runs.append([compiled(x, w).clone() for _ in range(3)])
    finally:
        logger.removeHandler(records)
        torch._logging.set_logs()
    eager = fn(x, w)
    for results in runs:  # every replay of both compiles
        for result in results:
            assert result.device == torch.device("accel:0")
            assert_close(result, eager, rtol=1e-5, atol=1e-6)
    assert counters["inductor"]["cudagraph_skips"] - skips == 0
    assert counters["inductor"]["accel_graph_captures"] - captures == 2
    assert records.messages == []
    assert cudagraph_trees.local.tree_manager_containers == {}  # no CUDA graph tree was built


def test_reduce_overhead_training_step():
    # Forward and backward graphs are both replayed as accel graphs (never
    # looking for a CUDA graph tree manager), and compute what the default
    # mode computes.
    def run(mode):
        torch._dynamo.reset()
        model_class, make_batch = _cases.MODELS["cnn"]
        torch.manual_seed(0)
        model = _cases.without_dropout(model_class()).to("accel")
        compiled = torch.compile(model, mode=mode)
        losses = []
        for step in range(2):
            inputs, labels = make_batch("accel", step)
            loss = nn.functional.cross_entropy(compiled(inputs), labels)
            model.zero_grad()
            loss.backward()
            losses.append(loss.detach().clone())
        # Outputs of a reduce-overhead graph live in its memory, which the
        # next torch._dynamo.reset() frees: keep copies.
        return losses, [p.grad.clone() for p in model.parameters()]

    from torch._dynamo.utils import counters

    captures = counters["inductor"]["accel_graph_captures"]
    reduce_overhead = run("reduce-overhead")
    assert counters["inductor"]["accel_graph_captures"] - captures == 2  # forward and backward
    assert_close(reduce_overhead, run("default"), rtol=0, atol=0)


# --- Shapes, graphs and guards --------------------------------------------------


def test_dynamic_shapes():
    counter = CompileCounterWithBackend("inductor")
    fn = torch.compile(lambda x: torch.softmax(x, -1) * x.shape[0], backend=counter, dynamic=True)
    for rows in (5, 7, 11):
        x = torch.randn(rows, 9).to("accel")
        assert_close(fn(x), torch.softmax(x, -1) * rows, rtol=1e-5, atol=1e-6)
    assert counter.frame_count == 1


def test_mark_dynamic():
    x = torch.randn(6, 8).to("accel")
    torch._dynamo.mark_dynamic(x, 0)
    fn = lambda t: (t.sin() + 1).sum(1)  # noqa: E731
    counter = CompileCounterWithBackend("inductor")
    result, code = run_and_get_code(torch.compile(fn, backend=counter), x)
    assert KERNEL_MARKER in code[0] and re.search(r"\bk?s\d+\b", code[0])  # a size symbol reaches the kernel
    assert_close(result, fn(x))
    y = torch.randn(13, 8).to("accel")
    assert_close(torch.compile(fn, backend=counter)(y), fn(y))
    assert counter.frame_count == 1


def test_graph_break():
    def fn(x):
        y = x.sin() * 2
        torch._dynamo.graph_break()
        return y.cos() + 1

    counter = CompileCounterWithBackend("inductor")
    x = torch.randn(10).to("accel")
    assert_close(torch.compile(fn, backend=counter)(x), fn(x))
    assert counter.frame_count == 2


def test_second_device(two_devices):
    x = torch.randn(16, 16).to("accel:1")
    result, code = compile_and_run(lambda t: torch.softmax(t @ t, -1) + 1, x)
    assert result.device == torch.device("accel:1")
    assert re.search(r"empty_strided_accel\(.*, 1\)", code)  # buffers are allocated on accel:1
    assert torch_accel.current_device() == 0
    assert_close(result, torch.softmax(x @ x, -1) + 1, rtol=1e-5, atol=1e-6)


def test_recompiles_for_another_device_index(two_devices):
    counter = CompileCounterWithBackend("inductor")
    fn = torch.compile(lambda t: t * 2 + 1, backend=counter)
    x0 = torch.arange(4.0).to("accel:0")
    x1 = torch.arange(4.0).to("accel:1")
    assert fn(x0).device == torch.device("accel:0")
    assert fn(x1).device == torch.device("accel:1")
    assert fn(x0).device == torch.device("accel:0")
    assert counter.frame_count == 2
    assert_close(fn(x1), x1 * 2 + 1)


def test_copy_between_devices_in_a_graph(two_devices):
    fn = lambda a, b: a * 2 + b.to("accel:0")  # noqa: E731
    a, b = torch.randn(8).to("accel:0"), torch.randn(8).to("accel:1")
    result = torch.compile(fn)(a, b)
    assert result.device == torch.device("accel:0")
    assert_close(result, fn(a, b))


# --- Streams and events ----------------------------------------------------------


def test_compiled_function_on_a_side_stream():
    fn = torch.compile(lambda t: torch.relu(t) @ t.t() + 1)
    x = torch.randn(32, 32).to("accel")
    expected = fn(x)
    side = torch_accel.Stream()
    side.wait_stream(torch_accel.current_stream())
    with torch_accel.stream(side):
        result = fn(x)
    side.synchronize()
    assert_close(result, expected)


def test_streams_and_events_inside_a_compiled_function():
    side = torch_accel.Stream()

    def fn(x):
        done = torch_accel.Event()
        side.wait_stream(torch_accel.current_stream())
        with torch_accel.stream(side):
            y = x * 2
            done.record()
        torch_accel.current_stream().wait_event(done)
        return y + 1

    x = torch.randn(16).to("accel")
    assert_close(torch.compile(fn)(x), x * 2 + 1)
    assert torch_accel.current_stream() == torch_accel.default_stream()


# --- Processes ---------------------------------------------------------------------


def test_parallel_compile_workers():
    # With compile_threads > 1, Inductor compiles C++ kernels on a thread pool
    # and Triton kernels in worker subprocesses, which do not import torch_accel.
    proc = run_python(
        """
        import time
        import torch, torch_accel
        from torch._inductor import config
        from torch._inductor.async_compile import AsyncCompile
        assert config.compile_threads == 2
        deadline = time.monotonic() + 120
        while not AsyncCompile.use_process_pool():  # until the workers are up
            assert time.monotonic() < deadline, "compile workers did not start"
            time.sleep(0.1)
        x = torch.randn(64, 64).to("accel")
        fn = lambda t: (torch.softmax(t, -1) @ t).sin().sum(0)
        result = torch.compile(fn)(x)
        torch.testing.assert_close(result.cpu(), fn(x).cpu(), rtol=1e-4, atol=1e-5)
        print(result.device)
        """,
        env={"TORCHINDUCTOR_COMPILE_THREADS": "2", "TORCHINDUCTOR_FORCE_DISABLE_CACHES": "1"},
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "accel:0"


def test_no_device_is_a_clear_error():
    proc = run_python(
        """
        import torch, torch_accel
        from torch import nn
        for make in (lambda: nn.Linear(4, 2).to("accel"), lambda: torch.compile(lambda: torch.ones(2, device="accel") + 1)()):
            try:
                make()
            except Exception as error:
                print(type(error).__name__, str(error).replace("\\n", " "))
        """,
        env={"TORCH_ACCEL_RUNTIME": "host", "TORCH_ACCEL_HOST_DEVICES": "0"},
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == 2 and all("No accel device is available" in line for line in lines), lines
