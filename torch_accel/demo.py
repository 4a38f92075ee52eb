"""A tour of accel on whatever runtime is present: `make demo` (python -m torch_accel.demo).

It shows the devices, copies, a side stream with timing events, and trains a
small CNN on accel, eagerly and with torch.compile, checking each against the
same training run on the target device (cuda, or cpu on the host runtime).
"""

import copy
import time

import torch
from torch import nn

import torch_accel


def make_model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(1, 8, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(8, 16, 3, padding=1),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(16, 10),
    )


def synthetic_digits(steps: int, batch: int = 32) -> list[tuple[torch.Tensor, torch.Tensor]]:
    # Ten classes of noisy 12x12 patterns: learnable, and no download needed.
    g = torch.Generator().manual_seed(1)
    prototypes = torch.randn(10, 1, 12, 12, generator=g)
    batches = []
    for _ in range(steps):
        labels = torch.randint(0, 10, (batch,), generator=g)
        images = prototypes[labels] + 0.5 * torch.randn(batch, 1, 12, 12, generator=g)
        batches.append((images, labels))
    return batches


def train(model: nn.Module, device: str, data, compiled: bool) -> tuple[list[float], float]:
    model = copy.deepcopy(model).to(device)
    step_model = torch.compile(model) if compiled else model
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    losses = []
    start = time.perf_counter()
    for images, labels in data:
        images, labels = images.to(device, non_blocking=True), labels.to(device, non_blocking=True)
        loss = nn.functional.cross_entropy(step_model(images), labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss)
    losses = [loss.item() for loss in losses]
    return losses, time.perf_counter() - start


def training_demo() -> None:
    target = torch_accel._target_device_type()
    data = synthetic_digits(steps=30)
    model = make_model()
    for compiled in (False, True):
        mode = "compiled" if compiled else "eager"
        try:
            accel_losses, accel_seconds = train(model, "accel", data, compiled)
        except Exception as error:  # torch.compile support is its own piece of work
            print(f"training ({mode}) on accel failed: {type(error).__name__}: {str(error).splitlines()[0]}")
            continue
        print(
            f"trained a CNN on accel ({mode}): loss {accel_losses[0]:.3f} -> {accel_losses[-1]:.3f} "
            f"in {len(data)} AdamW steps, {accel_seconds:.2f} s"
        )
        if target == "cpu":
            target_losses, _ = train(model, target, data, compiled)
            drift = max(abs(a - t) for a, t in zip(accel_losses, target_losses))
            if drift == 0:
                verdict = "identical losses"
            elif compiled and drift < 1e-4:
                # Inductor's C++ code for accel differs from cpu's where Inductor
                # tests for the cpu device (convolution bias, layouts): rounding.
                verdict = f"losses within {drift:.0e}"
            else:
                verdict = f"DIFFERENT losses (by up to {drift:.1e})"
            print(f"  the same run on {target}: {verdict}")
        else:
            # torch 2.11's autograd engine cannot run CUDA backward in a process
            # with a PrivateUse1 backend; the tests compare from another process.
            print(f"  (the bitwise comparison with {target} runs in `make test`, in a separate process)")


def main() -> None:
    print(f"torch {torch.__version__}, accel runtime: {torch_accel.runtime()}, target: {torch_accel._target_device_type()}")
    count = torch_accel.device_count()
    print(f"{count} accel device(s)")
    for index in range(count):
        props = torch_accel.get_device_properties(index)
        print(f"  accel:{index}: {props.name}, {props.total_memory / 2**30:.1f} GiB")
    if count == 0:
        print("no accel device: nothing more to show")
        return

    # Copies: host -> accel:0 -> accel:N -> host, bitwise equal to the source.
    src = torch.randn(1024, 1024)
    last = f"accel:{count - 1}"
    x = src.to("accel:0", non_blocking=True).to(last)
    assert torch.equal(x.cpu(), src)
    print(f"copied a {tuple(src.shape)} tensor cpu -> accel:0 -> {last} -> cpu: bitwise equal")

    # A side stream and timing events.
    side = torch_accel.Stream()
    start, end = torch_accel.Event(enable_timing=True), torch_accel.Event(enable_timing=True)
    big = torch.empty(64 << 20, dtype=torch.uint8)
    with torch_accel.stream(side):
        start.record()
        on_device = big.to("accel", non_blocking=True)
        end.record()
    torch_accel.current_stream().wait_stream(side)
    end.synchronize()
    ms = start.elapsed_time(end)
    print(f"64 MiB host -> accel copy on a side stream: {ms:.2f} ms ({64 / 1024 / (ms / 1000):.1f} GiB/s)")
    t0 = time.perf_counter()
    torch_accel.synchronize()
    print(f"synchronize: {(time.perf_counter() - t0) * 1e6:.0f} us; on_device is on {on_device.device}")

    training_demo()


if __name__ == "__main__":
    main()
