"""The bitwise suites under each CPU code-path setting: `make test-isa`.

On the host runtime accel runs the CPU's kernels, and a test compares accel's
result with the CPU's bit for bit wherever the same kernel runs on the same
bytes. Which kernel the CPU runs depends on the machine: PyTorch's own
vectorised kernels (ATen: default, AVX2 or AVX-512 builds, picked at start-up),
MKL's BLAS, LAPACK and vector-math code paths (picked by MKL from the CPU's
vendor and instruction sets), and oneDNN's convolutions, matmuls, RNNs and
element-wise kernels (picked by oneDNN's own detection). A comparison that only
holds because both sides happen to reach one code path fails on a machine that
picks another (docs/bitwise-comparisons.md has the cases found). The settings
below make this machine pick the other code paths, as far as its CPU allows:

    ATEN_CPU_CAPABILITY       ATen's kernels: default (no vector extensions), avx2, avx512
    MKL_ENABLE_INSTRUCTIONS   the highest instruction set MKL may use (on Intel CPUs)
    MKL_CBWR                  MKL's conditional-numerical-reproducibility branch
                              (COMPATIBLE: MKL's generic code path, on any CPU)
    ONEDNN_MAX_CPU_ISA        the highest instruction set oneDNN may use

A setting whose instruction set this CPU lacks is not run (ATen trusts the
variable and would die of an illegal instruction; MKL and oneDNN would silently
use less, repeating another setting): it is reported as not exercised here.

    python tools/isa_settings.py [--setting NAME ...] [--list] [-- PYTEST ARGS]

runs pytest on SUITES (or the files given after --) once per setting, in
processes whose environment holds the setting, and prints what each setting
changed on this machine (ATen's capability, oneDNN's ISA, MKL's version line)
and a summary table. The exit status is 1 if any run failed.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

# The suites that compare accel with the CPU bit for bit.
SUITES = (
    "test/test_opinfo.py",
    "test/test_device_generic.py",
    "test/test_divergent_paths.py",
    "test/test_models.py",
    "test/test_autocast.py",
    "test/test_compile.py",
    "test/test_tensors.py",
    "test/test_fallback.py",
    "test/test_deterministic.py",
)

# ATen's AVX-512 kernels need these (its own check at start-up; the variable
# overrides that check, so it is repeated here).
AVX512 = ("avx512f", "avx512bw", "avx512vl", "avx512dq", "fma")


@dataclass(frozen=True)
class Setting:
    env: dict[str, str]
    needs: tuple[str, ...]  # /proc/cpuinfo flags the setting's instructions need
    what: str


SETTINGS = {
    "aten-default": Setting({"ATEN_CPU_CAPABILITY": "default"}, (), "ATen's kernels without vector extensions"),
    "aten-avx2": Setting({"ATEN_CPU_CAPABILITY": "avx2"}, ("avx2", "fma"), "ATen's AVX2 kernels"),
    "aten-avx512": Setting({"ATEN_CPU_CAPABILITY": "avx512"}, AVX512, "ATen's AVX-512 kernels"),
    "mkl-sse4_2": Setting({"MKL_ENABLE_INSTRUCTIONS": "SSE4_2"}, ("sse4_2",), "MKL up to SSE4.2 (Intel CPUs)"),
    "mkl-avx2": Setting({"MKL_ENABLE_INSTRUCTIONS": "AVX2"}, ("avx2", "fma"), "MKL up to AVX2 (Intel CPUs)"),
    "mkl-avx512": Setting({"MKL_ENABLE_INSTRUCTIONS": "AVX512"}, AVX512, "MKL up to AVX-512 (Intel CPUs)"),
    "mkl-compatible": Setting({"MKL_CBWR": "COMPATIBLE"}, (), "MKL's generic code path (any CPU)"),
    "onednn-sse41": Setting({"ONEDNN_MAX_CPU_ISA": "SSE41"}, ("sse4_1",), "oneDNN up to SSE4.1"),
    "onednn-avx2": Setting({"ONEDNN_MAX_CPU_ISA": "AVX2"}, ("avx2", "fma"), "oneDNN up to AVX2"),
    "onednn-avx512": Setting({"ONEDNN_MAX_CPU_ISA": "AVX512_CORE"}, AVX512, "oneDNN up to AVX-512"),
}
# Every variable a setting may set: a run holds its own setting's and none of
# the others' (an inherited one would mix two settings).
VARIABLES = sorted({name for setting in SETTINGS.values() for name in setting.env})

# What a process under a setting reports about the code paths it got.
PROBE = r"""
import torch
print("aten:", torch.backends.cpu.get_cpu_capability())
torch.nn.functional.gelu(torch.ones(4096))  # oneDNN's element-wise kernel
torch.ones(8, 8) @ torch.ones(8, 8)  # MKL's SGEMM
"""


def cpu_flags() -> set[str]:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown CPU"


def environment(name: str) -> dict[str, str]:
    """This process' environment with setting ``name``'s variables and none of
    the others'. Each setting gets its own Inductor cache: Inductor's FX graph
    cache does not key on ATEN_CPU_CAPABILITY, so a graph compiled with AVX2
    vector code is reused under `default`, whose precompiled header lacks
    at::vec, and fails to compile (torch 2.11)."""
    env = {k: v for k, v in os.environ.items() if k not in VARIABLES}
    env.update(SETTINGS[name].env)
    env["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(ROOT, "build", "isa", name, "inductor")
    return env


def probe(name: str) -> str:
    """One line: ATen's capability, oneDNN's ISA and MKL's CPU line under setting ``name``."""
    env = dict(environment(name), ONEDNN_VERBOSE="1", MKL_VERBOSE="1", TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    proc = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=300)
    out = proc.stdout + proc.stderr
    aten = re.search(r"^aten: (\S+)", out, re.M)
    onednn = re.search(r"onednn_verbose,.*,cpu,isa:(.*)$", out, re.M)
    mkl = re.search(r"^MKL_VERBOSE (?:Intel|oneMKL).* for (.*)$", out, re.M)
    cnr = re.search(r"^MKL_VERBOSE SGEMM.* (CNR:\S+)", out, re.M)
    return (
        f"ATen {aten.group(1) if aten else '?'}; oneDNN {onednn.group(1).strip() if onednn else '?'}; "
        f"MKL {mkl.group(1).strip() if mkl else '?'} {cnr.group(1) if cnr else ''}".strip()
    )


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--setting", action="append", choices=sorted(SETTINGS), help="run these (default: all)")
    parser.add_argument("--list", action="store_true", help="list the settings and whether this CPU can run them")
    parser.add_argument("pytest_args", nargs="*", help="after --: test files and pytest options (default: SUITES)")
    args = parser.parse_args(argv)
    names = args.setting or list(SETTINGS)
    flags = cpu_flags()
    print(f"== {cpu_name()}; settings: {', '.join(names)}", flush=True)
    if args.list:
        for name in names:
            missing = [f for f in SETTINGS[name].needs if f not in flags]
            state = f"not on this CPU (lacks {', '.join(missing)})" if missing else "runs here"
            print(f"{name:16} {' '.join(f'{k}={v}' for k, v in SETTINGS[name].env.items()):32} {state}")
        return 0
    pytest_args = args.pytest_args or list(SUITES)
    if not any(a.endswith(".py") or "::" in a for a in pytest_args):
        pytest_args = list(SUITES) + pytest_args
    rows = []
    for name in names:
        setting = SETTINGS[name]
        variables = " ".join(f"{k}={v}" for k, v in setting.env.items())
        missing = [f for f in setting.needs if f not in flags]
        if missing:
            note = f"not exercised: this CPU lacks {', '.join(missing)}"
            print(f"\n== {name} ({variables}): {note}", flush=True)
            if os.environ.get("GITHUB_ACTIONS") == "true":
                print(f"::warning title=make test-isa {name}::{note} ({cpu_name()})", flush=True)
            rows.append((name, variables, "not exercised", note))
            continue
        paths = probe(name)
        print(f"\n== {name} ({variables}): {setting.what}\n== code paths: {paths}", flush=True)
        start = time.monotonic()
        proc = subprocess.run([sys.executable, "-m", "pytest", *pytest_args], env=environment(name), cwd=ROOT)
        minutes = (time.monotonic() - start) / 60
        rows.append((name, variables, "passed" if proc.returncode == 0 else f"FAILED (exit {proc.returncode})", f"{paths}; {minutes:.1f} min"))
    print(f"\n== make test-isa on {cpu_name()}")
    print("| setting | variables | result | code paths here |")
    print("| --- | --- | --- | --- |")
    for row in rows:
        print("| " + " | ".join(row) + " |")
    return 1 if any(r[2].startswith("FAILED") for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
