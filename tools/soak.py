"""Soak (``make soak``): a long training loop on accel whose memory statistics,
process memory, open file descriptors and threads must stay flat
(docs/soak.md).

    python -m tools.soak [--minutes M | --rounds N] [--warmup-rounds W] [--json PATH]
                         [--no-compile] [--plant-leak KIND]

The loop runs in rounds. A round is one epoch of a DataLoader with worker
processes (started anew each epoch) and pinned memory: each batch is copied to
accel:0 on a side stream (non_blocking, ``record_stream`` onto the compute
stream), and steps alternate between an eager model and a torch.compile'd one,
each with its own AdamW; after each step a third stream keeps an exponential
moving average of the eager model's parameters, ordered by events. Every
``--checkpoint-every`` rounds the models, optimizers and averages are saved
with torch.save and loaded back (map_location accel) into the live objects.

At the end of every round, when the DataLoader's workers and pin-memory thread
have been joined, the device synchronized and Python's cyclic garbage
collected, the process is in the same state every round, and one sample is
taken: torch.accel.memory_allocated / memory_reserved, memory_stats' current
counts, the process's resident memory, open file descriptors, threads and
Python objects. After the warm-up rounds (compilation, the allocator's cache
filling, the first checkpoint), each figure is compared with its value at the
end of the warm-up; BOUNDS says how much each may grow and why. The run prints
a table of samples and exits 1, naming the figures, if any grew beyond its
bound.

``--plant-leak KIND`` (repeatable) adds a deliberate leak (``tensor``: one
accel tensor kept per step; ``fd``: one open file per round; ``thread``: one
parked thread per round), to show that the check catches it
(test/test_soak.py).
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import os
import sys
import tempfile
import threading
import time

# Each figure's allowed growth after warm-up, and why it is that. Samples are
# taken at the same point of every round, where the live accel tensors are the
# same set (parameters, gradients, optimizer states, averages), so every count
# must come back to exactly the same value: any growth there is a leak.
# Resident memory is the one figure with noise: glibc's malloc and Python's
# object allocator keep freed memory in arenas, whose high-water mark moves
# with the order of frees, and the DataLoader's epochs fork and join worker
# processes. The bound is that noise with a margin (docs/soak.md gives the
# figures it was set from); a leak of one batch (16 KiB) per step exceeds it
# within about 4,000 steps, a fifth of the 20-minute run.
MiB = 1 << 20
BOUNDS = {
    "allocated_bytes": (0, "the same live accel tensors at every sample: exactly the same bytes"),
    "allocations": (0, "memory_stats' allocation.all.current: the same live blocks"),
    "active_blocks": (0, "memory_stats' active.all.current"),
    "reserved_bytes": (0, "the caching allocator serves the same steady requests from the blocks it already holds"),
    "segments": (0, "memory_stats' segment.all.current: no new segments once the cache holds the working set"),
    "fds": (0, "open file descriptors: workers' pipes, checkpoint files and pinned memory are all closed"),
    "threads": (0, "the pin-memory thread is joined every epoch; autograd's device threads start once"),
    "rss_bytes": (64 * MiB, "process resident memory: allocator arenas and forked workers move it (see above)"),
    "py_objects": (2000, "Python objects tracked by gc: caches fill during warm-up; a per-step leak exceeds this in 2,000 steps"),
}
FIGURES = list(BOUNDS)
# How long a sample waits for threads and pipes that are shutting down (settle()).
SETTLE_SECONDS = 2.0


def process_figures() -> dict[str, int]:
    with open("/proc/self/statm") as f:
        resident_pages = int(f.read().split()[1])
    with open("/proc/self/status") as f:
        threads = next(int(line.split()[1]) for line in f if line.startswith("Threads:"))
    return {
        "rss_bytes": resident_pages * os.sysconf("SC_PAGE_SIZE"),
        "fds": len(os.listdir("/proc/self/fd")),
        "threads": threads,
        "py_objects": len(gc.get_objects()),
    }


def sample(device) -> dict[str, int]:
    import torch

    stats = torch.accel.memory_stats(device)
    return {
        "allocated_bytes": torch.accel.memory_allocated(device),
        "reserved_bytes": torch.accel.memory_reserved(device),
        "allocations": stats.get("allocation.all.current", 0),
        "active_blocks": stats.get("active.all.current", 0),
        "segments": stats.get("segment.all.current", 0),
        **process_figures(),
    }


@dataclasses.dataclass
class Verdict:
    reference: dict[str, int]
    growth: dict[str, int]
    over: list[str]


def check(samples: list[dict], warmup_rounds: int, bounds: dict = BOUNDS) -> Verdict:
    """Compares every sample after the warm-up with the sample that ends it
    (round number `warmup_rounds`): a figure is over its bound if its largest
    value after the warm-up exceeds the reference by more than the bound."""
    after = [s for s in samples if s["round"] >= warmup_rounds]
    if len(after) < 2:
        raise ValueError(f"soak: {len(samples)} samples leave fewer than 2 after a warm-up of {warmup_rounds} rounds")
    reference = {name: after[0][name] for name in bounds}
    growth = {name: max(s[name] for s in after) - reference[name] for name in bounds}
    over = [name for name in bounds if growth[name] > bounds[name][0]]
    return Verdict(reference, growth, over)


def table(samples: list[dict], every: int = 1) -> str:
    columns = ["round", "steps", "minutes"] + FIGURES
    lines = ["| " + " | ".join(columns) + " |", "|" + " --- |" * len(columns)]
    shown = [s for i, s in enumerate(samples) if i % every == 0 or i == len(samples) - 1]
    for s in shown:
        cells = []
        for name in columns:
            value = s[name]
            if name == "minutes":
                cells.append(f"{value:.1f}")
            elif name.endswith("_bytes"):
                cells.append(f"{value / MiB:.2f} MiB" if name == "rss_bytes" else str(value))
            else:
                cells.append(str(value))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


class Soak:
    """The training loop. Everything lives on accel:0."""

    def __init__(self, args):
        import torch

        self.torch = torch
        self.args = args
        self.device = torch.device("accel", 0)
        torch.manual_seed(0)
        features, classes, n = 64, 10, args.batches * args.batch_size
        generator = torch.Generator().manual_seed(0)
        inputs = torch.randn(n, features, generator=generator)
        labels = torch.randint(classes, (n,), generator=generator)
        self.dataset = torch.utils.data.TensorDataset(inputs, labels)

        def model():
            return torch.nn.Sequential(
                torch.nn.Linear(features, 128), torch.nn.LayerNorm(128), torch.nn.GELU(), torch.nn.Linear(128, classes)
            ).to(self.device)

        self.eager = model()
        self.compiled_module = model()
        self.compiled = self.compiled_module if args.no_compile else torch.compile(self.compiled_module)
        self.optimizers = [torch.optim.AdamW(m.parameters(), lr=1e-3) for m in (self.eager, self.compiled_module)]
        self.average = [p.detach().clone() for p in self.eager.parameters()]
        self.copy_stream = torch.accel.Stream(self.device)
        self.average_stream = torch.accel.Stream(self.device)
        self.step_done = torch.accel.Event()
        self.steps = 0
        self.leaked: list = []
        self.checkpoint_dir = tempfile.mkdtemp(prefix="accel-soak-")

    def loader(self):
        return self.torch.utils.data.DataLoader(
            self.dataset,
            batch_size=self.args.batch_size,
            shuffle=True,
            drop_last=True,
            num_workers=self.args.workers,
            pin_memory=True,
            persistent_workers=False,
        )

    def round(self, number: int) -> None:
        torch = self.torch
        compute = torch.accel.current_stream(self.device)
        for index, (inputs, labels) in enumerate(self.loader()):
            assert inputs.is_pinned(), "the DataLoader did not pin the batch"
            with torch.accel.stream(self.copy_stream):
                inputs = inputs.to(self.device, non_blocking=True)
                labels = labels.to(self.device, non_blocking=True)
            compute.wait_stream(self.copy_stream)
            inputs.record_stream(compute)
            labels.record_stream(compute)
            which = index % 2
            model = (self.eager, self.compiled)[which]
            loss = torch.nn.functional.cross_entropy(model(inputs), labels)
            loss.backward()
            self.optimizers[which].step()
            self.optimizers[which].zero_grad(set_to_none=False)
            if not torch.isfinite(loss).item():
                raise RuntimeError(f"soak: loss {loss.item()} at step {self.steps}")
            self.step_done.record(compute)
            with torch.accel.stream(self.average_stream):
                self.average_stream.wait_event(self.step_done)
                torch._foreach_lerp_(self.average, [p.detach() for p in self.eager.parameters()], 0.01)
            compute.wait_stream(self.average_stream)
            if "tensor" in self.args.plant_leak:
                self.leaked.append(torch.empty(4096, device=self.device))
            self.steps += 1
        if "fd" in self.args.plant_leak:
            self.leaked.append(open(os.devnull))
        if "thread" in self.args.plant_leak:
            parked = threading.Event()
            self.leaked.append(parked)
            threading.Thread(target=parked.wait, daemon=True).start()
        if (number + 1) % self.args.checkpoint_every == 0:
            self.checkpoint()

    def state(self) -> dict:
        return {
            "eager": self.eager.state_dict(),
            "compiled": self.compiled_module.state_dict(),
            "optimizers": [o.state_dict() for o in self.optimizers],
            "average": self.average,
            "steps": self.steps,
        }

    def checkpoint(self) -> None:
        """Saves the state and loads it back into the live objects; the
        loaded copy must equal what was saved."""
        torch = self.torch
        path = os.path.join(self.checkpoint_dir, "checkpoint.pt")
        torch.save(self.state(), path)
        loaded = torch.load(path, map_location=self.device, weights_only=True)
        if loaded["average"][0].device != self.device or not torch.equal(loaded["average"][0], self.average[0]):
            raise RuntimeError("soak: the checkpoint did not load back as saved")
        self.eager.load_state_dict(loaded["eager"])
        self.compiled_module.load_state_dict(loaded["compiled"])
        for optimizer, state in zip(self.optimizers, loaded["optimizers"]):
            optimizer.load_state_dict(state)
        torch._foreach_copy_(self.average, loaded["average"])
        del loaded

    def sample(self, number: int, started: float, previous: dict | None) -> dict:
        self.torch.accel.synchronize(self.device)
        gc.collect()
        settle(previous)
        return {"round": number, "steps": self.steps, "minutes": (time.monotonic() - started) / 60, **sample(self.device)}


def settle(previous: dict | None, timeout: float = SETTLE_SECONDS) -> None:
    """Waits, at most `timeout` seconds, until the process's threads and file
    descriptors are back at the previous sample's counts. The DataLoader's
    shutdown closes its multiprocessing queues without joining their feeder
    threads, which exit (and close their pipes) a moment later: without the
    wait, a sample now and then counts one of them. A leak stays after the
    wait, and the sample counts it."""
    if previous is None:
        return
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        now = process_figures()
        if now["threads"] <= previous["threads"] and now["fds"] <= previous["fds"]:
            return
        time.sleep(0.02)


def run(args) -> tuple[list[dict], Verdict]:
    soak = Soak(args)
    started = time.monotonic()
    deadline = started + args.minutes * 60 if args.minutes else None
    samples = []
    number = 0
    while (deadline is None and number < args.rounds) or (deadline is not None and time.monotonic() < deadline):
        soak.round(number)
        number += 1
        samples.append(soak.sample(number, started, samples[-1] if samples else None))
        if args.verbose:
            s = samples[-1]
            print(" ".join(f"{k}={s[k]:.1f}" if k == "minutes" else f"{k}={s[k]}" for k in s), flush=True)
    return samples, check(samples, args.warmup_rounds)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(prog="python -m tools.soak", description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=0, help="run this long (0: --rounds instead)")
    parser.add_argument("--rounds", type=int, default=20, help="rounds (DataLoader epochs) when --minutes is 0")
    parser.add_argument("--warmup-rounds", type=int, default=10, help="rounds before the reference sample")
    parser.add_argument("--batches", type=int, default=24, help="batches per round")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--workers", type=int, default=2, help="DataLoader worker processes")
    parser.add_argument("--checkpoint-every", type=int, default=2, help="rounds between checkpoints")
    parser.add_argument("--no-compile", action="store_true", help="both models eager")
    parser.add_argument(
        "--plant-leak", action="append", default=[], choices=["tensor", "fd", "thread"], help="a deliberate leak, to see the check fail (repeatable)"
    )
    parser.add_argument("--json", help="write the samples and the verdict here")
    parser.add_argument("--table-every", type=int, default=1, help="print every Nth sample")
    parser.add_argument("--verbose", action="store_true", help="print each sample as it is taken")
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.minutes and args.minutes * 60 < 1:
        raise SystemExit("soak: --minutes must be at least a second")
    samples, verdict = run(args)
    print(table(samples, args.table_every))
    print()
    for name in FIGURES:
        bound, why = BOUNDS[name]
        mark = "OVER" if name in verdict.over else "ok"
        print(f"{mark:4} {name}: reference {verdict.reference[name]}, growth {verdict.growth[name]} (bound {bound}: {why})")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "samples": samples, "reference": verdict.reference, "growth": verdict.growth, "over": verdict.over}, f, indent=1)
    steps = samples[-1]["steps"]
    if verdict.over:
        print(f"soak: FAILED after {len(samples)} rounds, {steps} steps: {', '.join(verdict.over)} grew beyond the bound", file=sys.stderr)
        return 1
    print(f"soak: flat over {len(samples)} rounds, {steps} steps, {samples[-1]['minutes']:.1f} minutes (warm-up {args.warmup_rounds} rounds)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
