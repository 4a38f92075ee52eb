"""What the processes of test/test_multiprocessing.py run (spawned children
import it by name: test functions would pull pytest into every child)."""

import os

import torch


def add_in_place(tensor, value, done):
    """Process argument: adds `value` to the sender's tensor, in place."""
    tensor.add_(value)
    # Values, not a cpu tensor: a cpu tensor travels as a file descriptor that
    # the receiver fetches from this process, which may have exited by then.
    done.put(("added", str(tensor.device), tensor.tolist()))


def serve(requests, replies):
    """Answers requests from the parent until it sends None."""
    while True:
        request = requests.get(timeout=60)
        if request is None:
            return
        what, payload = request
        if what == "echo":
            # The received tensor: where it lives and what it holds, then the
            # tensor itself back (the parent checks it is its own storage).
            replies.put((str(payload.device), payload.cpu(), payload))
        elif what == "add":
            tensor, value = payload
            tensor.add_(value)
            replies.put("added")
        elif what == "produce":
            # A tensor made here: the parent keeps it after this process frees it.
            device, values = payload
            produced = values.to(device)
            replies.put(produced)
            assert requests.get(timeout=60) == "taken"
            del produced
            replies.put("freed")
        elif what == "wait_event":
            # The parent's interprocess event, then its tensor, read here.
            tensor, event = payload
            event.wait()
            replies.put(tensor.tolist())
        elif what == "release":
            # Reads the received tensor, then lets go of it (the received
            # storage is kept in torch's shared cache only by a weak reference).
            values = payload.tolist()
            del payload
            replies.put(values)
        elif what == "grow":
            # out= and resize_ that need more memory than the received tensor
            # has, then an in-place write the parent must see.
            replies.put(grow_received(payload))
        elif what == "exit":
            # Dies holding the tensor it received, without a clean exit.
            os._exit(3)


def grow_received(tensor):
    """What out= and resize_ do to a tensor whose storage cannot be resized
    (received from another process, or over a Python buffer): the error of
    each, the tensor's shape and storage size after it, then the tensor after
    `add_(1)` (the sender's memory, if it still shares it)."""
    outcomes = []
    calls = [
        lambda: torch.add(torch.ones(8, device=tensor.device), 1, out=tensor),
        lambda: torch.cat([tensor, tensor], out=tensor),
        lambda: tensor.resize_(16),
    ]
    for call in calls:
        try:
            call()
            error = None
        except RuntimeError as e:
            error = str(e).split("\n")[0]
        outcomes.append((error, tuple(tensor.shape), tensor.untyped_storage().nbytes()))
        tensor.resize_(4)
    tensor.add_(1)
    return outcomes, tensor.tolist()


class AccelDataset(torch.utils.data.Dataset):
    """Items made on accel in the DataLoader's workers."""

    def __len__(self):
        return 8

    def __getitem__(self, index):
        return torch.full((3,), float(index), device="accel"), index
