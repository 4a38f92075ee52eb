"""Where PyTorch sends accel and the target down different code paths.

accel's results are bitwise the target's where the same kernel runs on the
same bytes. In a few places PyTorch itself picks the computation by device
type, before any kernel runs, and an accel tensor takes the path of a CUDA
(PrivateUse1) tensor while a cpu tensor takes the CPU's. There the two sides
do different arithmetic, and equal bits for one set of arguments prove
nothing about the next (docs/bitwise-comparisons.md). Each case is tested
twice, for every argument in a sweep:

- pinned: accel against the target running the very path ATen takes for
  accel, bitwise (on the host runtime; with cpu as the reference of backward
  work on the CUDA runtime, within PyTorch's tolerances);
- default: accel against the target's own default path, within rounding, with
  the reason and the bound next to the comparison.

The cases: nn.RNN (the CPU projects every step's input at once), dropout (the
fused native_dropout for accel, the composite for the CPU), torch.optim's
default implementation (foreach for accel, the for-loop for the CPU),
clip_grad_norm_'s (likewise), group_norm's backward for a channels-last
input (on contiguous copies for accel) and interpolate's linear modes in
deterministic mode (decomposed for accel). They were found by reading ATen
and by tracing the operators each OpInfo sample and each module_db entry
dispatches on the CPU and on accel (docs/bitwise-comparisons.md).
"""

from __future__ import annotations

import inspect
import math

import pytest
import torch
from torch.optim.optimizer import _default_to_fused_or_foreach
from torch.utils._foreach_utils import _get_fused_kernels_supported_devices

import torch_accel
from _comparison import ACCEL, CLOSE, EXACT, TARGET, assert_same_bits

# Backward work is compared with cpu (a CUDA backward cannot run in this
# process, see _cases.py): bitwise where cpu is the target.
GRAD_REFERENCE = "cpu"
GRAD_MODE = EXACT if TARGET == GRAD_REFERENCE else CLOSE
FLOAT32_ULP = 2.0**-23


def assert_same(actual, expected, mode: str, what: str, **tolerances) -> None:
    """Bitwise (EXACT: values and bytes, NaN against NaN) or within ``tolerances``
    (CLOSE: torch.testing.assert_close's, the dtype's defaults unless given)."""
    assert len(actual) == len(expected), what
    for i, (a, e) in enumerate(zip(actual, expected)):
        a, e, where = a.detach().cpu(), e.detach().cpu(), f"{what}[{i}]"
        if mode == EXACT:
            torch.testing.assert_close(a, e, rtol=0, atol=0, equal_nan=True, msg=lambda m: f"{where}: {m}")
            assert_same_bits(a, e, where)
        else:
            torch.testing.assert_close(a, e, msg=lambda m: f"{where}: {m}", **tolerances)


# --- nn.RNN --------------------------------------------------------------------
#
# ATen's rnn_tanh / rnn_relu (RNN.cpp, FullLayer and FullBidirectionalLayer)
# compute a layer one step at a time, cell by cell (linear_hh(h) + linear_ih(x_t),
# then the nonlinearity), for every device but the CPU; for cpu tensors they
# first project the inputs of all steps with one matrix product (a GEMM of
# T*B rows) and then run the cells on the projected steps. The weight gradient
# of that product is one GEMM over all steps where accel's is a sum of one
# product per step. Same mathematics, other roundings: with module_db's tiny
# inputs (batch 1, 3 steps) the two happened to agree on the machine the suite
# was written on, and differed on others. Over 32 configurations (3 or 7
# steps, batch 1 or 4, input 2 or 5, hidden 3 or 8, tanh or relu, 2 layers)
# 30 differ on a 2-core AMD EPYC, whatever its MKL, ATen and oneDNN settings.

RNN_CONFIGS = [
    dict(input_size=i, hidden_size=h, num_layers=layers, nonlinearity=nl, bias=bias, bidirectional=bidirectional)
    for i, h, layers, nl, bias, bidirectional in [
        (2, 3, 1, "tanh", True, False),
        (5, 8, 2, "tanh", True, False),
        (5, 8, 2, "relu", False, False),
        (3, 4, 2, "tanh", True, True),
        (4, 6, 1, "relu", True, True),
    ]
]
RNN_INPUTS = [(3, 1), (7, 4)]  # (steps, batch)


def rnn_per_step(rnn: torch.nn.RNN, x: torch.Tensor, h0: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """nn.RNN as ATen runs it for every device but the CPU: the cell
    (rnn_tanh_cell / rnn_relu_cell: linear_hh(h) + linear_ih(x_t), then the
    nonlinearity) step by step, stacked; the reverse direction over the steps
    reversed; the directions' outputs concatenated; no dropout."""
    cell = torch.rnn_tanh_cell if rnn.nonlinearity == "tanh" else torch.rnn_relu_cell
    directions = 2 if rnn.bidirectional else 1
    layer_input, finals = x, []
    for layer in range(rnn.num_layers):
        outputs = []
        for direction in range(directions):
            suffix = f"_l{layer}" + ("_reverse" if direction else "")
            weights = [getattr(rnn, f"{kind}{suffix}", None) for kind in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")]
            steps = list(layer_input.unbind(0))
            if direction:
                steps.reverse()
            h, step_outputs = h0[layer * directions + direction], []
            for step in steps:
                h = cell(step, h, *weights)
                step_outputs.append(h)
            if direction:
                step_outputs.reverse()
            outputs.append(torch.stack(step_outputs, 0))
            finals.append(h)
        layer_input = torch.cat(outputs, -1) if directions == 2 else outputs[0]
    return layer_input, torch.stack(finals, 0)


def rnn_run(rnn: torch.nn.RNN, x: torch.Tensor, h0: torch.Tensor, grad: torch.Tensor, per_step: bool = False) -> list:
    """Outputs, final hidden states and the gradients of x, h0 and every parameter."""
    output, hn = rnn_per_step(rnn, x, h0) if per_step else rnn(x, h0)
    grads = torch.autograd.grad((output * grad).sum() + hn.sum(), [x, h0, *rnn.parameters()])
    return [output, hn, *grads]


@pytest.mark.parametrize("config", RNN_CONFIGS, ids=lambda c: "-".join(f"{v}" for v in c.values()))
def test_rnn_is_atens_per_step_path_bitwise_and_the_cpus_within_rounding(config):
    for steps, batch in RNN_INPUTS:
        torch.manual_seed(0)
        rnn = torch.nn.RNN(**config)
        directions = 2 if config["bidirectional"] else 1
        x = torch.randn(steps, batch, config["input_size"], requires_grad=True)
        h0 = torch.randn(config["num_layers"] * directions, batch, config["hidden_size"], requires_grad=True)
        grad = torch.randn(steps, batch, directions * config["hidden_size"])
        what = f"{config} on {steps} steps of batch {batch}"

        accel_rnn = torch.nn.RNN(**config).to(ACCEL)
        accel_rnn.load_state_dict(rnn.state_dict())
        on_accel = [t.detach().to(ACCEL).requires_grad_() for t in (x, h0)]
        accel = rnn_run(accel_rnn, *on_accel, grad.to(ACCEL))
        # Pinned: the path ATen takes for accel, run on the reference device.
        assert_same(accel, rnn_run(rnn, x, h0, grad, per_step=True), GRAD_MODE, f"{what}: per step")
        # The CPU's own path: within float32's default tolerances (rtol 1.3e-6,
        # atol 1e-5), the roundings of the two orders of the same sums.
        assert_same(accel, rnn_run(rnn, x, h0, grad), CLOSE, f"{what}: the CPU's nn.RNN")


def test_rnn_reference_is_the_cpus_path_where_the_cpu_does_not_project_at_once():
    # The per-step reference is nn.RNN itself wherever ATen runs it step by
    # step: one step (no product over steps to group) of one layer.
    torch.manual_seed(0)
    rnn = torch.nn.RNN(3, 4)
    x, h0 = torch.randn(1, 2, 3, requires_grad=True), torch.randn(1, 2, 4, requires_grad=True)
    grad = torch.randn(1, 2, 4)
    assert_same(rnn_run(rnn, x, h0, grad, per_step=True), rnn_run(rnn, x, h0, grad), EXACT, "one step")


# --- Dropout -------------------------------------------------------------------
#
# at::dropout (Dropout.cpp) calls the fused native_dropout for cuda, xpu, lazy
# and PrivateUse1 tensors (is_fused_kernel_acceptable) and the composite
# otherwise. The mask is drawn alike (bernoulli_(1 - p) from the same
# generator), but the scale is not: native_dropout multiplies by 1/(1-p)
# computed in double and rounded to float32 once, the composite divides the
# mask by fl32(1 - p). The two scale factors differ by one float32 ulp for 15
# of the 99 p in 0.01..0.99 (those with fl32(1/fl32(1-p)) != fl32(1/(1-p))),
# so each kept element may differ by up to two ulps (one per rounding).

FUSED_DROPOUT_DEVICE_TYPES = ("cuda", "xpu", "lazy", ACCEL)
DROPOUT_PS = [i / 100 for i in range(0, 101)]
# |a - b| <= |x| |s1 - s2| + ulp(a)/2 + ulp(b)/2 with s1, s2 one ulp apart:
# two ulps of the result, relative.
DROPOUT_RTOL = 2 * FLOAT32_ULP


def composite_scale(p: float) -> float:
    """The factor the composite multiplies kept elements by: fl32(1 / fl32(1 - p))."""
    return (torch.tensor(1.0) / torch.tensor(1 - p, dtype=torch.float32)).item()


def fused_scale(p: float) -> float:
    """native_dropout's: fl32(1 / (1 - p)), the quotient in double."""
    return torch.tensor(1 / (1 - p), dtype=torch.float32).item()


def dropout_runs(fn, x: torch.Tensor, device: str, p: float, seed: int) -> list:
    """fn's output and input gradient on ``device`` (x copied there), the seed
    set first. The gradient only where the target can run a backward in this
    process (the host runtime; see GRAD_REFERENCE): on the CUDA runtime the
    masks come from cuda's generator, which cpu cannot stand in for."""
    backward = TARGET == GRAD_REFERENCE
    xd = x.detach().to(device).requires_grad_(backward)
    torch.manual_seed(seed)
    out = fn(xd, p)
    if not backward:
        return [out]
    (grad,) = torch.autograd.grad(out, xd, torch.linspace(-2, 2, x.numel()).reshape(x.shape).to(device))
    return [out, grad]


def native_dropout(x: torch.Tensor, p: float) -> torch.Tensor:
    # What at::dropout calls for accel (p in (0, 1), training).
    return torch.native_dropout(x, p, True)[0] if 0 < p < 1 else torch.nn.functional.dropout(x, p)


def test_dropout_is_native_dropout_bitwise_for_every_p_and_the_targets_dropout_within_rounding():
    x = torch.randn(64, 33)
    differing = []
    for index, p in enumerate(DROPOUT_PS):
        accel = dropout_runs(torch.nn.functional.dropout, x, ACCEL, p, seed=index)
        # Pinned: the fused kernel ATen runs for accel, on the target.
        assert_same(accel, dropout_runs(native_dropout, x, TARGET, p, seed=index), EXACT, f"dropout p={p}: native_dropout")
        # The target's own path: the same mask, the scale within two ulps.
        target = dropout_runs(torch.nn.functional.dropout, x, TARGET, p, seed=index)
        assert torch.equal(accel[0].cpu() == 0, target[0].cpu() == 0), f"dropout p={p}: masks differ"
        if TARGET in FUSED_DROPOUT_DEVICE_TYPES:
            assert_same(accel, target, EXACT, f"dropout p={p}")
        else:
            assert_same(accel, target, CLOSE, f"dropout p={p}", rtol=DROPOUT_RTOL, atol=0)
            if not all(torch.equal(a.cpu(), t.cpu()) for a, t in zip(accel, target)):
                differing.append(p)
    if TARGET not in FUSED_DROPOUT_DEVICE_TYPES:
        # Exactly the p whose two scale factors differ (15 of 0.01..0.99 in torch 2.11).
        assert differing == [p for p in DROPOUT_PS if 0 < p < 1 and composite_scale(p) != fused_scale(p)]


def test_the_bitwise_suites_sample_only_ps_whose_dropout_scales_agree():
    # test_opinfo and test_device_generic compare the dropout path bitwise on
    # PyTorch's samples (F.dropout, SDPA and multi_head_attention_forward with
    # dropout, modules in training mode): that holds for their p only if the two
    # scales agree for it. Should PyTorch's samples change to another p, this
    # says why those comparisons fail.
    import itertools

    from torch.testing._internal.common_methods_invocations import op_db

    ps = {0.1}  # _cases.DROPOUT_P, and TransformerEncoderLayer's default
    ps |= {torch.nn.Dropout().p}
    for op in op_db:
        if op.name in ("nn.functional.dropout", "nn.functional.scaled_dot_product_attention", "nn.functional.multi_head_attention_forward"):
            for sample in itertools.islice(op.sample_inputs("cpu", torch.float32), 100):
                ps |= {v for k, v in sample.kwargs.items() if k in ("p", "dropout_p")}
                ps |= {a for a in sample.args if isinstance(a, float)}
    assert {0.5, 0.1} <= ps
    assert [p for p in sorted(ps) if 0 < p < 1 and composite_scale(p) != fused_scale(p)] == []


@pytest.mark.parametrize(
    "name",
    ["dropout1d", "dropout2d", "dropout3d", "alpha_dropout", "feature_alpha_dropout", "dropout_inplace"],
)
def test_dropouts_without_a_fused_path_are_the_targets_bitwise_for_every_p(name):
    # These never take native_dropout: accel runs the target's composite, bit for bit.
    fn = {
        "dropout1d": lambda x, p: torch.nn.functional.dropout1d(x, p),
        "dropout2d": lambda x, p: torch.nn.functional.dropout2d(x, p),
        "dropout3d": lambda x, p: torch.nn.functional.dropout3d(x, p),
        "alpha_dropout": lambda x, p: torch.nn.functional.alpha_dropout(x, p, training=True),
        "feature_alpha_dropout": lambda x, p: torch.nn.functional.feature_alpha_dropout(x, p, training=True),
        "dropout_inplace": lambda x, p: torch.nn.functional.dropout(x * 1, p, inplace=True),
    }[name]
    x = torch.randn(*{"dropout1d": (4, 6, 5), "dropout2d": (4, 6, 5, 3), "dropout3d": (4, 6, 5, 3, 2)}.get(name, (4, 6, 5)))
    for index, p in enumerate(DROPOUT_PS):
        accel = dropout_runs(fn, x, ACCEL, p, seed=index)
        assert_same(accel, dropout_runs(fn, x, TARGET, p, seed=index), EXACT, f"{name} p={p}")


# --- torch.optim's default implementation --------------------------------------
#
# Left to its default, torch.optim (_default_to_fused_or_foreach) takes the
# foreach implementation for parameters on cuda, xpu and the PrivateUse1
# device, and the for-loop for cpu parameters. The two compute the same update
# with other operators; in torch 2.11 they agree bitwise for most optimizers
# and differ in the last bits for Adafactor, ASGD and RAdam. Pinned: the same
# implementation (foreach, for-loop and fused where the target has fused
# kernels) on both sides, bitwise, over a sweep of hyperparameters. Default:
# each side's own default, within rounding.

OPTIMIZER_SWEEP = 6  # hyperparameter draws per optimizer
OPTIMIZER_STEPS = 3


def hyperparameters(name: str, g: torch.Generator) -> dict:
    """One draw of ``name``'s hyperparameters (each within its valid range)."""

    def uniform(low: float, high: float) -> float:
        return low + (high - low) * torch.rand((), generator=g).item()

    def log_uniform(low: float, high: float) -> float:
        return math.exp(uniform(math.log(low), math.log(high)))

    def coin() -> bool:
        return bool(torch.rand((), generator=g).item() < 0.5)

    lr, decay = log_uniform(1e-4, 0.5), (0.0 if coin() else log_uniform(1e-4, 0.3))
    betas = (uniform(0.5, 0.99), uniform(0.9, 0.9999))
    eps = log_uniform(1e-10, 1e-3)
    if name == "SGD":
        momentum = 0.0 if coin() else uniform(0.1, 0.99)
        nesterov = momentum > 0 and coin()
        dampening = 0.0 if nesterov else uniform(0.0, 0.5)
        return dict(lr=lr, momentum=momentum, dampening=dampening, weight_decay=decay, nesterov=nesterov, maximize=coin())
    if name in ("Adam", "AdamW"):
        return dict(lr=lr, betas=betas, eps=eps, weight_decay=decay, amsgrad=coin(), maximize=coin())
    if name == "Adamax":
        return dict(lr=lr, betas=betas, eps=eps, weight_decay=decay, maximize=coin())
    if name == "NAdam":
        return dict(lr=lr, betas=betas, eps=eps, weight_decay=decay, momentum_decay=log_uniform(1e-3, 1e-2), decoupled_weight_decay=coin(), maximize=coin())
    if name == "RAdam":
        return dict(lr=lr, betas=betas, eps=eps, weight_decay=decay, decoupled_weight_decay=coin(), maximize=coin())
    if name == "Adagrad":
        return dict(lr=lr, lr_decay=uniform(0, 0.1), weight_decay=decay, initial_accumulator_value=uniform(0, 1), eps=eps, maximize=coin())
    if name == "Adadelta":
        return dict(lr=uniform(0.1, 2), rho=uniform(0.5, 0.99), eps=eps, weight_decay=decay, maximize=coin())
    if name == "RMSprop":
        return dict(lr=lr, alpha=uniform(0.5, 0.999), eps=eps, weight_decay=decay, momentum=uniform(0, 0.9), centered=coin(), maximize=coin())
    if name == "Rprop":
        return dict(lr=lr, etas=(uniform(0.1, 0.9), uniform(1.1, 2.0)), step_sizes=(log_uniform(1e-7, 1e-5), uniform(1, 50)), maximize=coin())
    if name == "ASGD":
        return dict(lr=lr, lambd=log_uniform(1e-5, 1e-2), alpha=uniform(0.5, 1), t0=float(int(uniform(0, 4))), weight_decay=decay, maximize=coin())
    if name == "Adafactor":
        return dict(lr=lr, beta2_decay=uniform(-0.9, -0.5), eps=(None, log_uniform(1e-4, 1e-2)), d=uniform(1, 3), weight_decay=decay, maximize=coin())
    raise KeyError(name)


OPTIMIZERS = ["SGD", "Adam", "AdamW", "Adamax", "NAdam", "RAdam", "Adagrad", "Adadelta", "RMSprop", "Rprop", "ASGD", "Adafactor"]


def optimizer_steps(name: str, kwargs: dict, device: str) -> list[torch.Tensor]:
    """Parameters and state tensors after OPTIMIZER_STEPS steps on ``device``,
    from fixed parameters and gradients (set without autograd)."""
    g = torch.Generator().manual_seed(1)
    params = [torch.randn(shape, generator=g).to(device).requires_grad_() for shape in ((4, 3), (5,))]
    optimizer = getattr(torch.optim, name)(params, **kwargs)
    for _ in range(OPTIMIZER_STEPS):
        with torch.no_grad():
            for p in params:
                p.grad = torch.randn(p.shape, generator=g).to(device) + p
        optimizer.step()
    state = [t for s in optimizer.state.values() for t in s.values() if isinstance(t, torch.Tensor)]
    return [p.detach() for p in params] + state


def default_implementation(name: str, device: str) -> str:
    """The implementation torch.optim's ``name`` takes on ``device`` when not told:
    the device's default (_default_to_fused_or_foreach) where the optimizer
    asks for it, else the for-loop (Adafactor in torch 2.11)."""
    if "_default_to_fused_or_foreach" not in inspect.getsource(inspect.getmodule(getattr(torch.optim, name))):
        return "for-loop"
    fused, foreach = _default_to_fused_or_foreach([torch.empty(1, device=device)], differentiable=False, use_fused=False)
    return "fused" if fused else "foreach" if foreach else "for-loop"


def implementations(name: str) -> list[dict]:
    """The implementations to pin: the for-loop, foreach, and fused where the target has fused kernels."""
    pins = [{"foreach": False}, {"foreach": True}]
    if "fused" in inspect.signature(getattr(torch.optim, name)).parameters and TARGET in _get_fused_kernels_supported_devices():
        pins.append({"fused": True})
    return pins


def test_optimizer_defaults_are_foreach_for_accel():
    assert default_implementation("SGD", ACCEL) == "foreach"
    assert default_implementation("SGD", TARGET) == ("for-loop" if TARGET == "cpu" else "foreach")
    assert default_implementation("Adafactor", ACCEL) == "for-loop"


@pytest.mark.parametrize("name", OPTIMIZERS)
def test_optimizer_implementations_are_the_targets_bitwise_for_swept_hyperparameters(name):
    g = torch.Generator().manual_seed(sum(map(ord, name)))
    for _ in range(OPTIMIZER_SWEEP):
        kwargs = hyperparameters(name, g)
        for pin in implementations(name):
            what = f"{name}({kwargs}, {pin})"
            accel = optimizer_steps(name, {**kwargs, **pin}, ACCEL)
            assert_same(accel, optimizer_steps(name, {**kwargs, **pin}, TARGET), EXACT, what)
        # Each side's default: accel's (foreach for most) is bitwise the target
        # running that implementation; the target's own default may be the
        # for-loop, the same update computed with other operators: float32's
        # default tolerances.
        accel_default = optimizer_steps(name, kwargs, ACCEL)
        accel_pin = {"foreach": default_implementation(name, ACCEL) == "foreach"}
        assert_same(accel_default, optimizer_steps(name, {**kwargs, **accel_pin}, TARGET), EXACT, f"{name} default")
        target_default = optimizer_steps(name, kwargs, TARGET)
        same_implementation = default_implementation(name, ACCEL) == default_implementation(name, TARGET)
        assert_same(accel_default, target_default, EXACT if same_implementation else CLOSE, f"{name}({kwargs}) defaults")


# --- clip_grad_norm_ / clip_grad_value_ ------------------------------------------
#
# Their foreach=None default takes _foreach_norm / _foreach_mul_ for devices
# with foreach kernels (accel) and one operator per tensor for the others (cpu).


@pytest.mark.parametrize("max_norm, norm_type", [(0.5, 2.0), (3.0, 1.0), (0.1, float("inf")), (1e3, 2.0)])
def test_clip_grad_norm_pinned_bitwise_and_default_within_rounding(max_norm, norm_type):
    def clip(device, **pin):
        g = torch.Generator().manual_seed(3)
        params = [torch.zeros(shape, device=device, requires_grad=True) for shape in ((7, 3), (11,), (2, 2, 2))]
        for p in params:
            p.grad = (torch.randn(p.shape, generator=g) * 4).to(device)
        norm = torch.nn.utils.clip_grad_norm_(params, max_norm, norm_type, **pin)
        return [norm] + [p.grad for p in params]

    for pin in ({"foreach": False}, {"foreach": True}):
        assert_same(clip(ACCEL, **pin), clip(TARGET, **pin), EXACT, f"clip_grad_norm_ {pin}")
    assert_same(clip(ACCEL), clip(TARGET, foreach=True), EXACT, "clip_grad_norm_ default (foreach)")
    assert_same(clip(ACCEL), clip(TARGET), CLOSE, "clip_grad_norm_ defaults")


# --- group_norm's backward for a channels-last input -------------------------------
#
# The forward runs the same kernel on both (native_group_norm keeps the input's
# channels-last layout). Its backward formula (derivatives.yaml) hands
# native_group_norm_backward the gradient and the input in the input's memory
# format on cpu and made contiguous on every other device but xpu: the CPU's
# channels-last backward kernel for cpu, its contiguous kernel for accel, which
# sum in other orders.

GROUP_NORM_GROUPS, GROUP_NORM_EPS = 3, 1e-5


def group_norm_inputs(shape, device: str) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(5)
    x = torch.randn(shape, generator=g).contiguous(memory_format=torch.channels_last)
    weight, bias = torch.rand(shape[1], generator=g), torch.randn(shape[1], generator=g)
    grad = torch.randn(shape, generator=g).contiguous(memory_format=torch.channels_last)
    return [t.to(device) for t in (x, weight, bias, grad)]


def group_norm_autograd(shape, device: str) -> list:
    x, weight, bias, grad = group_norm_inputs(shape, device)
    x, weight, bias = (t.requires_grad_() for t in (x, weight, bias))
    out = torch.nn.functional.group_norm(x, GROUP_NORM_GROUPS, weight, bias, GROUP_NORM_EPS)
    return [out, *torch.autograd.grad(out, (x, weight, bias), grad)]


def group_norm_contiguous_backward(shape, device: str) -> list:
    """What autograd runs for a non-cpu device: the forward as it is, the
    backward on contiguous copies of the gradient and the input."""
    x, weight, bias, grad = group_norm_inputs(shape, device)
    n, c, hxw = shape[0], shape[1], math.prod(shape[2:])
    out, mean, rstd = torch.native_group_norm(x, weight, bias, n, c, hxw, GROUP_NORM_GROUPS, GROUP_NORM_EPS)
    grads = torch.ops.aten.native_group_norm_backward(
        grad.contiguous(), x.contiguous(), mean, rstd, weight, n, c, hxw, GROUP_NORM_GROUPS, [True, True, True]
    )
    return [out, *grads]


@pytest.mark.parametrize("shape", [(2, 6, 5, 7), (3, 12, 4, 4), (1, 3, 9, 2)])
def test_group_norm_backward_of_channels_last_is_the_contiguous_kernels_bitwise_and_the_cpus_within_rounding(shape):
    accel = group_norm_autograd(shape, ACCEL)
    # Pinned: the contiguous backward kernel autograd calls for accel.
    assert_same(accel, group_norm_contiguous_backward(shape, GRAD_REFERENCE), GRAD_MODE, f"group_norm {shape}: contiguous backward")
    # The CPU's own: the forward bitwise (one kernel), the gradients within
    # float32's default tolerances (its channels-last backward kernel).
    reference = group_norm_autograd(shape, GRAD_REFERENCE)
    assert_same(accel[:1], reference[:1], GRAD_MODE, f"group_norm {shape}: forward")
    assert_same(accel[1:], reference[1:], CLOSE, f"group_norm {shape}: the CPU's channels-last backward")


# --- interpolate (linear modes) in deterministic mode -----------------------------
#
# With torch.use_deterministic_algorithms(True), torch.nn.functional.interpolate
# computes bilinear and trilinear modes for every input that is not on the CPU
# through a decomposition (_upsample_linear_vec, whose backward is index_put
# with accumulate) instead of the upsample kernel: accel takes it, cpu does not.


def interpolate_runs(x: torch.Tensor, device: str, size, decomposed: bool = False) -> list:
    from torch._decomp import decompositions

    xd = x.detach().to(device).requires_grad_()
    mode = "bilinear" if x.dim() == 4 else "trilinear"
    previous = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        if decomposed:
            out = decompositions._upsample_linear_vec(xd, size, False, None)
        else:
            out = torch.nn.functional.interpolate(xd, size=size, mode=mode, align_corners=False)
        (grad,) = torch.autograd.grad(out, xd, torch.linspace(-1, 1, out.numel()).reshape(out.shape).to(device))
    finally:
        torch.use_deterministic_algorithms(previous)
    return [out, grad]


@pytest.mark.parametrize("shape, size", [((1, 2, 4, 5), (9, 7)), ((2, 1, 3, 3, 4), (5, 6, 7))])
def test_deterministic_interpolate_is_the_decompositions_bitwise_and_the_kernels_within_rounding(shape, size):
    x = torch.randn(shape, generator=torch.Generator().manual_seed(6))
    accel = interpolate_runs(x, ACCEL, size)
    assert_same(accel, interpolate_runs(x, GRAD_REFERENCE, size, decomposed=True), GRAD_MODE, f"interpolate {shape}: decomposed")
    assert_same(accel, interpolate_runs(x, GRAD_REFERENCE, size), CLOSE, f"interpolate {shape}: the CPU's kernel")


def test_accel_memory_is_aligned_as_the_cpus():
    # The same kernel on the same bytes gives the same bits only if the bytes
    # sit alike: MKL's code paths may split a loop by the address's alignment
    # (its documentation says results may depend on it unless CNR is on).
    # accelrt allocates 64-byte aligned, as c10's CPU allocator does, and views
    # keep their offsets (test/_comparison.py's Copier), so accel's and the
    # CPU's tensors agree modulo 64 bytes, the widest vector (AVX-512).
    for nbytes in (1, 4, 60, 64, 100, 4096, 1 << 20, 3 << 20):
        for device in (ACCEL, "cpu"):
            t = torch.empty(nbytes, dtype=torch.uint8, device=device)
            assert t.data_ptr() % 64 == 0, (device, nbytes)


def test_the_comparison_catches_a_one_ulp_difference():
    x = torch.randn(5)
    nudged = torch.nextafter(x, x + 1)
    with pytest.raises(AssertionError, match="nudged"):
        assert_same([nudged.to(ACCEL)], [x], EXACT, "nudged")
    assert_same([nudged.to(ACCEL)], [x], CLOSE, "nudged")
    assert torch_accel.is_initialized()


def test_sweeps_are_not_vacuous():
    assert len(DROPOUT_PS) == 101 and len(RNN_CONFIGS) * len(RNN_INPUTS) == 10
    assert all(len(implementations(name)) >= 2 for name in OPTIMIZERS)
    # The scale factors do differ for some p: the default paths are not compared on equal things.
    assert any(composite_scale(p) != fused_scale(p) for p in DROPOUT_PS if 0 < p < 1)
    # Every optimizer's draws vary (a sweep of one point would not be one).
    for name in OPTIMIZERS:
        g = torch.Generator().manual_seed(0)
        assert len({repr(hyperparameters(name, g)) for _ in range(OPTIMIZER_SWEEP)}) == OPTIMIZER_SWEEP, name
