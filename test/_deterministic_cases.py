"""Operators that CUDA's kernels mark nondeterministic, and those it makes
deterministic instead, run on accel (test_deterministic.py) and on a CUDA
target in a process without torch_accel (a cuda backward cannot run next to
accel; see _cases.py). CASES maps a name to (a call on a device, the caller
name of CUDA 2.11's alert, or None where CUDA runs it deterministically).

This module must not import torch_accel.
"""

import contextlib
import sys

import torch
import torch.nn.functional as F


@contextlib.contextmanager
def deterministic(warn_only=False, fill=True):
    previous = (
        torch.are_deterministic_algorithms_enabled(),
        torch.is_deterministic_algorithms_warn_only_enabled(),
        torch.utils.deterministic.fill_uninitialized_memory,
    )
    torch.use_deterministic_algorithms(True, warn_only=warn_only)
    torch.utils.deterministic.fill_uninitialized_memory = fill
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(previous[0], warn_only=previous[1])
        torch.utils.deterministic.fill_uninitialized_memory = previous[2]


def grad_case(make_input, forward):
    def run(device):
        x = make_input(device).requires_grad_()
        forward(x).sum().backward()

    return run


def r(*shape, device):
    torch.manual_seed(0)
    return torch.rand(*shape, device=device)


def idx(values, device):
    return torch.tensor(values, device=device)


CASES = {
    "avg_pool3d backward": (
        grad_case(lambda d: r(1, 1, 4, 4, 4, device=d), lambda x: F.avg_pool3d(x, 2)),
        "avg_pool3d_backward_cuda",
    ),
    "adaptive_avg_pool2d backward": (
        grad_case(lambda d: r(1, 2, 5, 5, device=d), lambda x: F.adaptive_avg_pool2d(x, 3)),
        "adaptive_avg_pool2d_backward_cuda",
    ),
    "adaptive_avg_pool3d backward": (
        grad_case(lambda d: r(1, 2, 5, 5, 5, device=d), lambda x: F.adaptive_avg_pool3d(x, 3)),
        "adaptive_avg_pool3d_backward_cuda",
    ),
    "max_pool3d backward": (
        grad_case(lambda d: r(1, 1, 4, 4, 4, device=d), lambda x: F.max_pool3d(x, 2)),
        "max_pool3d_with_indices_backward_cuda",
    ),
    "adaptive_max_pool2d backward": (
        grad_case(lambda d: r(1, 2, 5, 5, device=d), lambda x: F.adaptive_max_pool2d(x, 3)),
        "adaptive_max_pool2d_backward_cuda",
    ),
    "adaptive_max_pool3d backward": (
        grad_case(lambda d: r(1, 2, 5, 5, 5, device=d), lambda x: F.adaptive_max_pool3d(x, 3)),
        "adaptive_max_pool3d_backward_cuda",
    ),
    "fractional_max_pool2d backward": (
        grad_case(lambda d: r(1, 1, 6, 6, device=d), lambda x: F.fractional_max_pool2d(x, 2, output_ratio=(0.5, 0.5))),
        "fractional_max_pool2d_backward_cuda",
    ),
    "fractional_max_pool3d backward": (
        grad_case(lambda d: r(1, 1, 6, 6, 6, device=d), lambda x: F.fractional_max_pool3d(x, 2, output_ratio=(0.5, 0.5, 0.5))),
        "fractional_max_pool3d_backward_cuda",
    ),
    "interpolate linear backward": (
        grad_case(lambda d: r(1, 2, 4, device=d), lambda x: F.interpolate(x, size=12, mode="linear")),
        "upsample_linear1d_backward_out_cuda",
    ),
    "interpolate bicubic backward": (
        grad_case(lambda d: r(1, 2, 4, 4, device=d), lambda x: F.interpolate(x, size=12, mode="bicubic")),
        "upsample_bicubic2d_backward_out_cuda",
    ),
    "interpolate bilinear antialias backward": (
        grad_case(
            lambda d: r(1, 2, 8, 8, device=d), lambda x: F.interpolate(x, size=4, mode="bilinear", antialias=True)
        ),
        "upsample_bilinear2d_aa_backward_out_cuda",
    ),
    # Off the CPU, deterministic mode makes torch.nn.functional decompose these.
    "interpolate bilinear backward": (
        grad_case(lambda d: r(1, 2, 4, 4, device=d), lambda x: F.interpolate(x, size=12, mode="bilinear")),
        None,
    ),
    "interpolate trilinear backward": (
        grad_case(lambda d: r(1, 2, 4, 4, 4, device=d), lambda x: F.interpolate(x, size=8, mode="trilinear")),
        None,
    ),
    "upsample_bilinear2d backward (the operator)": (
        grad_case(lambda d: r(1, 2, 4, 4, device=d), lambda x: torch._C._nn.upsample_bilinear2d(x, (8, 8), False)),
        "upsample_bilinear2d_backward_out_cuda",
    ),
    "reflection_pad1d backward": (
        grad_case(lambda d: r(2, 3, 8, device=d), lambda x: F.pad(x, (1, 2), mode="reflect")),
        "reflection_pad1d_backward_out_cuda",
    ),
    "reflection_pad2d backward": (
        grad_case(lambda d: r(2, 3, 8, 8, device=d), lambda x: F.pad(x, (1, 2, 3, 4), mode="reflect")),
        None,  # a deterministic kernel on CUDA
    ),
    "reflection_pad3d backward": (
        grad_case(lambda d: r(2, 3, 8, 8, 8, device=d), lambda x: F.pad(x, (1, 2, 3, 4, 5, 6), mode="reflect")),
        "reflection_pad3d_backward_out_cuda",
    ),
    "replication_pad2d backward (the operator)": (
        grad_case(lambda d: r(2, 3, 4, 4, device=d), lambda x: torch._C._nn.replication_pad2d(x, (1, 2, 3, 4))),
        "replication_pad2d_backward_cuda",
    ),
    "grid_sample 2d backward": (
        grad_case(
            lambda d: r(1, 1, 3, 3, device=d), lambda x: F.grid_sample(x, torch.zeros(1, 2, 2, 2, device=x.device))
        ),
        "grid_sampler_2d_backward_cuda",
    ),
    "grid_sample 3d backward": (
        grad_case(
            lambda d: r(1, 1, 3, 3, 3, device=d),
            lambda x: F.grid_sample(x, torch.zeros(1, 2, 2, 2, 3, device=x.device)),
        ),
        "grid_sampler_3d_backward_cuda",
    ),
    "ctc_loss backward": (
        grad_case(
            lambda d: r(6, 2, 5, device=d),
            lambda x: F.ctc_loss(
                x.log_softmax(2), idx([[1, 2], [3, 4]], x.device), [6, 6], [2, 2]
            ),
        ),
        "ctc_loss_backward_gpu",
    ),
    "embedding_bag max backward": (
        grad_case(lambda d: r(4, 3, device=d), lambda w: F.embedding_bag(idx([[0, 1], [2, 1]], w.device), w, mode="max")),
        "embedding_bag_backward_cuda_max",
    ),
    "embedding_bag sum backward": (
        grad_case(lambda d: r(4, 3, device=d), lambda w: F.embedding_bag(idx([[0, 1], [2, 1]], w.device), w, mode="sum")),
        None,
    ),
    "nll_loss 2d": (
        lambda d: F.nll_loss(r(2, 3, 5, 5, device=d), torch.zeros(2, 5, 5, dtype=torch.long, device=d)),
        "nll_loss2d_forward_out_cuda_template",
    ),
    "nll_loss 2d reduction=none": (
        lambda d: F.nll_loss(r(2, 3, 5, 5, device=d), torch.zeros(2, 5, 5, dtype=torch.long, device=d), reduction="none"),
        None,
    ),
    "histc": (lambda d: torch.histc(r(10, device=d), bins=4), "_histc_cuda with floating point input"),
    "bincount with weights": (
        lambda d: torch.bincount(idx([0, 1, 1], d), weights=r(3, device=d)),
        "_bincount_cuda",
    ),
    "bincount": (lambda d: torch.bincount(idx([0, 1, 1], d)), None),
    "median with indices": (lambda d: torch.median(r(10, device=d), 0), "median CUDA with indices output"),
    "nanmedian with indices": (lambda d: torch.nanmedian(r(10, device=d), 0), "median CUDA with indices output"),
    "median": (lambda d: torch.median(r(10, device=d)), None),
    "index_reduce": (
        lambda d: r(4, device=d).index_reduce_(0, idx([0, 0], d), r(2, device=d), "prod"),
        "index_reduce_cuda",
    ),
    "scatter reduce=multiply": (
        lambda d: r(4, device=d).scatter_(0, idx([0, 0], d), r(2, device=d), reduce="multiply"),
        "scatter_reduce_cuda_kernel",
    ),
    "scatter reduce=add": (lambda d: r(4, device=d).scatter_(0, idx([0, 0], d), r(2, device=d), reduce="add"), None),
    "scatter_reduce prod": (
        lambda d: r(4, device=d).scatter_reduce(0, idx([0, 0], d), r(2, device=d), "prod"),
        "scatter_reduce_cuda_prod_",
    ),
    "scatter_reduce prod, empty index": (
        lambda d: r(4, device=d).scatter_reduce(0, idx([], d).long(), r(0, device=d), "prod"),
        None,
    ),
    "scatter_reduce sum": (lambda d: r(4, device=d).scatter_reduce(0, idx([0, 0], d), r(2, device=d), "sum"), None),
    "scatter_reduce mean": (lambda d: r(4, device=d).scatter_reduce(0, idx([0, 0], d), r(2, device=d), "mean"), None),
    "scatter_reduce amax": (lambda d: r(4, device=d).scatter_reduce(0, idx([0, 0], d), r(2, device=d), "amax"), None),
    "put_ accumulate": (lambda d: r(4, device=d).put_(idx([0, 0], d), r(2, device=d), accumulate=True), "put_"),
    "put accumulate": (lambda d: r(4, device=d).put(idx([0, 0], d), r(2, device=d), accumulate=True), "put_"),
    # Every device alerts here, the CPU too: the target's own kernel raises it.
    "put_": (lambda d: r(4, device=d).put_(idx([0, 0], d), r(2, device=d)), "put_"),
    "index_add_": (lambda d: r(4, device=d).index_add_(0, idx([0, 0], d), r(2, device=d)), None),
    "index_copy_": (lambda d: r(4, device=d).index_copy_(0, idx([0, 1], d), r(2, device=d)), None),
    "index_put_ accumulate": (
        lambda d: r(4, device=d).index_put_((idx([0, 0], d),), r(2, device=d), accumulate=True),
        None,
    ),
    "scatter_add_": (lambda d: r(4, device=d).scatter_add_(0, idx([0, 0], d), r(2, device=d)), None),
    "gather backward": (grad_case(lambda d: r(4, device=d), lambda x: x.gather(0, idx([0, 0, 1], x.device))), None),
    "index_select backward": (
        grad_case(lambda d: r(4, device=d), lambda x: x.index_select(0, idx([0, 0, 1], x.device))),
        None,
    ),
    "cumsum": (lambda d: r(10, device=d).cumsum(0), None),
}


def alert_message(caller):
    return f"{caller} does not have a deterministic implementation, but you set 'torch.use_deterministic_algorithms\\(True"



def outcomes(device: str) -> dict[str, str | None]:
    """Each case run in deterministic mode on ``device``: its error message, or None."""
    results = {}
    for name, (run, _) in CASES.items():
        with deterministic():
            try:
                run(device)
                results[name] = None
            except RuntimeError as error:
                results[name] = str(error)
    return results


if __name__ == "__main__":
    # python _deterministic_cases.py DEVICE OUTPUT
    torch.save(outcomes(sys.argv[1]), sys.argv[2])
