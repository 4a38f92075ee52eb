"""CUDA_VISIBLE_DEVICES on the CUDA runtime: accel counts the devices torch.cuda
counts, through NVML, without initialising CUDA.

No GPU is needed: in a child process, stand-ins for the driver's NVML and CUDA
libraries (test/stubs/, built here with the system C compiler and found first
through LD_LIBRARY_PATH) describe a machine with four GPUs, and record whether
anything initialised CUDA (a forked child could then never use accel). The
reference is torch.cuda's own NVML count (``torch.cuda._device_count_nvml``),
run in the same process against the same stubs.
"""

import json
import os
import shutil
import subprocess

import pytest
import torch

from conftest import HAS_CUDA_RUNTIME, NO_CUDA_RUNTIME, run_python

pytestmark = pytest.mark.skipif(not HAS_CUDA_RUNTIME, reason=NO_CUDA_RUNTIME)

STUBS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "stubs")

# The four GPUs of the stub machine, in NVML's order. Two share the prefix GPU-1111.
UUIDS = [
    "GPU-11111111-aaaa-4000-8000-000000000000",
    "GPU-11112222-bbbb-4000-8000-000000000001",
    "GPU-33333333-cccc-4000-8000-000000000002",
    "GPU-44444444-dddd-4000-8000-000000000003",
]

# CUDA_VISIBLE_DEVICES (None: unset) and the number of GPUs torch.cuda sees.
CASES = [
    (None, 4),
    ("", 0),
    ("0,1,2,3", 4),
    ("3,1", 2),
    ("1,7,2", 1),  # stops at the first GPU that does not exist
    ("0,0", 0),  # a repeated ordinal: no GPU at all
    ("1,2,1", 0),
    ("0,5,0", 0),  # the repetition wins over the missing GPU 5
    ("1gpu2,2ampere", 2),  # each entry read like strtoul
    (" 2 , 3", 2),
    ("+1,-0", 2),
    ("0,-1,2", 1),  # a negative entry ends the list
    ("0,,1", 1),  # so does an empty one
    ("abc", 0),
    ("99999999999999999999999,0", 0),
    (UUIDS[2], 1),
    ("GPU-3", 1),  # a unique prefix
    ("GPU-4,GPU-33333333-cccc,GPU-11112", 3),
    ("GPU-1111", 0),  # ambiguous: the list stops there
    ("GPU-33333333,GPU-1111,GPU-4", 1),
    ("GPU-3,GPU-4,0", 2),  # an entry without the prefix ends the list
    ("GPU-9", 0),  # no such GPU
    ("GPU-33,GPU-3333", 0),  # two entries for one GPU: no GPU at all
    ("GPU-4,GPU-4", 0),
    ("MIG-5e1b2c3d,MIG-5e1b2c3d", 0),  # decided by the list alone
]


@pytest.fixture(scope="module")
def stub_libraries(tmp_path_factory) -> str:
    """A directory with the stub libnvidia-ml.so.1 and libcuda.so.1."""
    compiler = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    assert compiler, "building the stub NVML and CUDA libraries needs a C compiler (cc, or $CC)"
    directory = tmp_path_factory.mktemp("stub-driver")
    for source, library in (("nvml.c", "libnvidia-ml.so.1"), ("cuda_driver.c", "libcuda.so.1")):
        subprocess.run(
            [compiler, "-shared", "-fPIC", "-O1", "-o", str(directory / library), os.path.join(STUBS, source)],
            check=True,
            capture_output=True,
        )
    return str(directory)


# Each case in turn in one process: CUDA_VISIBLE_DEVICES is read on every count
# until CUDA initialises. Prints, as JSON, accel's and torch.cuda's counts and
# whether CUDA was initialised after the NVML-answered cases, then the same for
# a list only CUDA can answer (MIG instances, or anything once NVML fails).
_COUNT_CASES = """
import json, os, sys, warnings
import torch, torch_accel
warnings.simplefilter("ignore")  # torch.cuda warns when NVML fails
cases, fallback = json.loads(sys.argv[1]), sys.argv[2]
def count(visible):
    if visible is None:
        os.environ.pop("CUDA_VISIBLE_DEVICES", None)
    else:
        os.environ["CUDA_VISIBLE_DEVICES"] = visible
    return [torch_accel.device_count(), torch_accel.is_available(), torch.cuda._device_count_nvml()]
counts = [count(visible) for visible in cases]
initialised = os.path.exists(os.environ["STUB_CUDA_INIT"])
runtime = torch_accel.runtime()
fallback_counts = count(fallback) + [torch.cuda.device_count()]
print(json.dumps([counts, initialised, runtime, fallback_counts, os.path.exists(os.environ["STUB_CUDA_INIT"])]))
"""


def count_cases(stub_libraries, tmp_path, cases, fallback, **stub_env):
    env = {
        "LD_LIBRARY_PATH": os.pathsep.join(filter(None, [stub_libraries, os.environ.get("LD_LIBRARY_PATH")])),
        "STUB_NVML_UUIDS": ",".join(UUIDS),
        "STUB_CUDA_INIT": str(tmp_path / "cuInit-called"),
        "TORCH_ACCEL_RUNTIME": "auto",
        "CUDA_VISIBLE_DEVICES": "0,1,2,3",  # whatever the machine's, until the first case
        **stub_env,
    }
    code = _COUNT_CASES.replace("sys.argv[1]", repr(json.dumps(cases))).replace("sys.argv[2]", repr(fallback))
    proc = run_python(code, env=env)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_visible_devices_are_counted_as_torch_cuda_counts_them_without_initialising_cuda(stub_libraries, tmp_path):
    visible = [value for value, _ in CASES]
    counts, initialised, runtime, fallback, initialised_by_fallback = count_cases(
        stub_libraries, tmp_path, visible, fallback="MIG-5e1b2c3d"
    )
    for (value, expected), (accel, available, cuda) in zip(CASES, counts):
        assert (accel, available, cuda) == (expected, expected > 0, expected), f"CUDA_VISIBLE_DEVICES={value!r}"
    assert not initialised, "counting accel devices initialised CUDA although NVML answered"
    # With GPUs visible, auto selects the CUDA runtime, still without CUDA.
    assert runtime == "cuda"
    # MIG instances are left to CUDA, by torch.cuda (-1) as by accel; the stub
    # driver has no device, and shows that the check above sees CUDA calls.
    accel, available, cuda_nvml, cuda = fallback
    assert (accel, available, cuda_nvml, cuda) == (0, False, -1, 0)
    assert initialised_by_fallback


def test_uuid_lists_fall_back_to_cuda_only_where_nvml_fails(stub_libraries, tmp_path):
    # NVML counts GPUs but cannot read their UUIDs: ordinal lists are still
    # NVML's to answer; a UUID list is CUDA's, for accel as for torch.cuda.
    counts, initialised, _, fallback, initialised_by_fallback = count_cases(
        stub_libraries, tmp_path, ["2,0", None, "0,0"], fallback="GPU-3", STUB_NVML_FAIL="uuid"
    )
    assert counts == [[2, True, 2], [4, True, 4], [0, False, 0]]
    assert not initialised
    assert fallback == [0, False, -1, 0] and initialised_by_fallback


def test_no_nvml_means_cuda_counts(stub_libraries, tmp_path):
    counts, initialised, runtime, fallback, _ = count_cases(
        stub_libraries, tmp_path, ["0,0"], fallback="0", STUB_NVML_FAIL="init", TORCH_ACCEL_RUNTIME="cuda"
    )
    assert counts == [[0, False, 0]] and not initialised  # a repeated ordinal needs no NVML
    assert runtime == "cuda"
    assert fallback[:2] == [0, False] and fallback[2] == -1
