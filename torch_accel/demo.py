"""A tour of accel on whatever runtime is present: `make demo` (python -m torch_accel.demo)."""

import time

import torch

import torch_accel


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


if __name__ == "__main__":
    main()
