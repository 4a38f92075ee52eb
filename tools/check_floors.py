"""Checks that csrc/'s floors include only the floors below them (``make lint``).

    python tools/check_floors.py [CSRC_DIR]    (default: csrc next to this folder)

The floors of docs/design.md ("Layers and data flow"), from the bottom. A file
under a floor's folder may include (``#include <csrc/...>``) files of its own
floor and of the floors below it, never of a floor above: csrc/runtime never
includes csrc/aten, csrc/aten never includes csrc/python, and so on. Folders
on one floor may include each other.

Below the runtime interface, the two runtimes' folders (csrc/runtime/cuda,
csrc/runtime/host) are included only from inside themselves: code above the
interface, and the other runtime, reach a runtime through Runtime.h alone.

A folder of csrc/ that is on no floor is a finding too (a new folder takes
its place in FLOORS and in docs/design.md's table). Reads the sources only;
exit status 0 when there is no finding, 1 otherwise.
"""

import os
import re
import sys

# From the bottom; the folders of one floor share a tuple.
FLOORS = (
    ("core",),  # the accel device type and its predicates
    ("runtime",),  # the runtime interface and what forwards to it
    ("profiler",),  # what the operator floor reports its kernels to
    ("aten", "graphs"),  # the operators: the alias fallback and graph capture's operator side
    ("amp", "distributed", "inductor"),  # features over the operators
    ("python",),  # the bindings of torch_accel._C
)
# Folders below the runtime interface that only they themselves include.
RUNTIMES = ("runtime/cuda", "runtime/host")

INCLUDE = re.compile(r'^\s*#\s*include\s*[<"]csrc/([^>"]+)[>"]')


def floor_of(folder: str) -> int:
    for rank, folders in enumerate(FLOORS):
        if folder in folders:
            return rank
    return -1


def runtime_of(path: str) -> str:
    """The runtime folder (runtime/cuda, runtime/host) holding `path` (relative to csrc), or ''."""
    for runtime in RUNTIMES:
        if path.startswith(runtime + "/"):
            return runtime
    return ""


def findings(csrc: str) -> list[str]:
    found = []
    for folder in sorted(os.listdir(csrc)):
        if os.path.isdir(os.path.join(csrc, folder)) and floor_of(folder) < 0:
            found.append(f"csrc/{folder}/ is on no floor (tools/check_floors.py FLOORS, docs/design.md)")
    for root, folders, files in os.walk(csrc):
        folders.sort()
        for name in sorted(files):
            if not name.endswith((".h", ".cpp")):
                continue
            path = os.path.relpath(os.path.join(root, name), csrc)
            rank = floor_of(path.split("/")[0])
            if rank < 0:
                continue  # reported above
            with open(os.path.join(root, name), encoding="utf-8") as source:
                for number, line in enumerate(source, 1):
                    match = INCLUDE.match(line)
                    if match is None:
                        continue
                    included = match.group(1)
                    where = f"csrc/{path}:{number}: includes csrc/{included}"
                    included_rank = floor_of(included.split("/")[0])
                    if included_rank > rank:
                        found.append(f"{where}, a floor above its own")
                    included_runtime = runtime_of(included)
                    if included_runtime and included_runtime != runtime_of(path):
                        found.append(f"{where}, below the runtime interface (include csrc/runtime/Runtime.h)")
    return found


def main(argv: list[str]) -> int:
    csrc = argv[1] if len(argv) > 1 else os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "csrc")
    found = findings(csrc)
    for finding in found:
        print(finding)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
