"""Processes for test_faults.py: a DataLoader dataset, and the ranks of its
distributed runs.

    python _faults_worker.py collective RANK STORE OUTPUT_DIR TIMEOUT_S killed|stopped
    python _faults_worker.py checkpoint RANK STORE OUTPUT_DIR TIMEOUT_S

Two ranks, rank r on accel:r, in a group with accel's c10d backend and the
given timeout. ``collective``: after one collective that completes, rank 1
starts another and is killed (SIGKILL) or stopped (SIGSTOP, a hung rank)
before it ends; rank 0 runs collectives until one fails. ``checkpoint``:
both ranks save a distributed checkpoint (step1), then start saving the
next one (step2), and rank 1 is killed while it writes. Rank 0 records in
OUTPUT_DIR/rank0.pt the exception that ended its wait (type, message) and
how long the failing call took; for ``checkpoint``, also the hashes of
step1's files, taken before step2's save began.
"""

import datetime
import hashlib
import os
import signal
import sys
import time

import torch
import torch.distributed as dist


class AccelSquares(torch.utils.data.Dataset):
    """Squares computed on accel in a DataLoader worker, returned on cpu."""

    def __init__(self, size: int):
        self.size = size

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> torch.Tensor:
        return (torch.full((4,), float(index), device="accel") ** 2).cpu()


def checkpoint_state(step: int, device) -> dict:
    """The state saved at ``step``: values that differ from step to step."""
    return {
        "weight": torch.arange(64.0, device=device).reshape(8, 8) * step,
        "bias": torch.full((8,), 0.5 * step, device=device),
        "steps": torch.tensor(step, device=device),
    }


def kill_self(how: str) -> None:
    sys.stdout.flush()
    os.kill(os.getpid(), signal.SIGKILL if how == "killed" else signal.SIGSTOP)


def failing_call(call) -> dict:
    start = time.monotonic()
    try:
        call()
    except Exception as error:  # what ended the wait, whatever it is
        return {"error_type": type(error).__name__, "message": str(error)[:2000], "elapsed_s": time.monotonic() - start}
    return {"error_type": None, "message": "", "elapsed_s": time.monotonic() - start}


def run_collective(rank: int, how: str) -> dict:
    device = torch.device("accel", rank)
    big = torch.ones(1 << 22, device=device)  # 16 MiB: the collective takes a while
    dist.all_reduce(big)
    assert big[0].item() == 2
    if rank == 1:
        dist.all_reduce(big, async_op=True)
        time.sleep(0.002)
        kill_self(how)
        time.sleep(600)  # never reached when killed; a stopped rank waits here once continued
    # The collective rank 1 left may still complete (when rank 1 was lost
    # after its part): the next one cannot.
    for _ in range(3):
        result = failing_call(lambda: dist.all_reduce(big))
        if result["error_type"] is not None:
            return result
    raise AssertionError("collectives kept completing without rank 1")


def run_checkpoint(rank: int, output_dir: str) -> dict:
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint import FileSystemWriter

    device = torch.device("accel", rank)
    step1 = os.path.join(output_dir, "step1")
    dcp.save(checkpoint_state(1, device), checkpoint_id=step1)
    dist.barrier()
    step1_files = {
        name: hashlib.sha256(open(os.path.join(step1, name), "rb").read()).hexdigest() for name in os.listdir(step1)
    }

    class KilledWhileWriting(FileSystemWriter):
        def write_data(self, plan, planner):
            if rank == 1:
                kill_self("killed")
            return super().write_data(plan, planner)

    result = failing_call(
        lambda: dcp.save(checkpoint_state(2, device), storage_writer=KilledWhileWriting(os.path.join(output_dir, "step2")))
    )
    result["step1_files"] = step1_files
    return result


def main() -> None:
    mode, rank, store, output_dir, timeout_s = sys.argv[1:6]
    rank = int(rank)
    import torch_accel  # noqa: F401 - registers accel and its c10d backend

    torch.accel.set_device(rank)
    dist.init_process_group(
        "cpu:gloo,accel:accel",
        init_method=f"file://{store}",
        rank=rank,
        world_size=2,
        timeout=datetime.timedelta(seconds=float(timeout_s)),
    )
    if mode == "collective":
        result = run_collective(rank, sys.argv[6])
    else:
        result = run_checkpoint(rank, output_dir)
    torch.save(result, os.path.join(output_dir, f"rank{rank}.pt"))
    print(result, flush=True)
    # The group cannot be destroyed cleanly with a rank gone: leave at once.
    os._exit(0)


if __name__ == "__main__":
    main()
