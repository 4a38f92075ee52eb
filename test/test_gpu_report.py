"""tools/gpu/gpu_report.py, the GPU run's section runner, tested without a GPU: fake
sections (a table written here) that pass, fail, hang, crash, have a collection
error, collect nothing or name a missing file; a missing dependency; the
whole-run deadline; the report present and current while sections run; what
comes back under $OUT. Then the real table (tools/gpu/gpu_sections.py) and the
wheelhouse list (requirements-gpu.txt) against the suite."""

import ast
import importlib.metadata
import importlib.util
import json
import os
import re
import subprocess
import sys
import textwrap
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
TOOLS = os.path.join(ROOT, "tools", "gpu")
sys.path.insert(0, TOOLS)

import gpu_report  # noqa: E402
import gpu_sections  # noqa: E402

FAKE_TESTS = {
    "test_pass.py": """
        import pytest

        def test_one():
            pass

        def test_two():
            pass

        def test_skipped():
            pytest.skip("needs two GPUs")
    """,
    "test_fail.py": """
        def test_ok():
            pass

        def test_wrong_answer():
            assert 1 + 1 == 3, "arithmetic is broken"
    """,
    "test_hang.py": """
        import time

        def test_before_the_hang():
            pass

        def test_hangs():
            time.sleep(600)
    """,
    "test_crash.py": """
        import os
        import signal

        def test_fine():
            pass

        def test_segfaults():
            os.kill(os.getpid(), signal.SIGSEGV)
    """,
    "test_import_error.py": """
        import module_that_is_not_installed_anywhere  # noqa: F401

        def test_never_collected():
            pass
    """,
}


def write_table(tmp_path, sections: str, required: dict | None = None, steps=("one", "two"), extra: str = "") -> str:
    fake = tmp_path / "fake"
    fake.mkdir(exist_ok=True)
    for name, text in FAKE_TESTS.items():
        (fake / name).write_text(textwrap.dedent(text))
    table = tmp_path / "table.py"
    table.write_text(
        textwrap.dedent(
            f"""
            from gpu_sections import Section

            FAKE = {str(fake)!r}
            REQUIRED_MODULES = {required or {"json": "json"}!r}
            BUILD = None
            TEST_FILES_GLOB = None
            DESCRIBE_MACHINE = False
            STEPS = {tuple(steps)!r}
            """
        )
        + textwrap.dedent(extra)
        + "SECTIONS = (\n"
        + textwrap.indent(textwrap.dedent(sections), "    ")
        + ")\n"
    )
    return str(table)


def run_report(tmp_path, table: str, *args: str, timeout: float = 120) -> tuple[subprocess.CompletedProcess, str]:
    out = tmp_path / "out"
    out.mkdir(exist_ok=True)
    report = tmp_path / "reports" / "report.md"
    cmd = [sys.executable, os.path.join(TOOLS, "gpu_report.py"), "--table", table, "--output", str(report)]
    cmd += ["--results-dir", str(tmp_path / "results"), *args]
    proc = subprocess.run(cmd, env=dict(os.environ, OUT=str(out)), capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    text = report.read_text() if report.exists() else ""
    return proc, text


def row(report: str, name: str) -> str:
    """The summary table's row of a section (the time table below it has rows too)."""
    summary = report.split("## Where the time went")[0]
    rows = [line for line in summary.splitlines() if line.startswith(f"| {name} |")]
    assert len(rows) == 1, report
    return rows[0]


def section_text(report: str, name: str) -> str:
    states = "pending|running|passed|failed|timed out|crashed|not run"
    match = re.search(rf"^## {re.escape(name)}: (?:{states})$.*?(?=^## [\w.-]+: (?:{states})$|\Z)", report, re.M | re.S)
    assert match, report
    return match.group(0)


# The hanging section's limit: what the report says about the kill (the test
# that was running, its stack, the log before it) needs pytest to reach the
# hanging test first, so the limit leaves room for pytest's start-up on a
# loaded machine, and stays below the per-test timeout gpu_report gives pytest
# (at least 10 s), which would end the hanging test first. Nothing here
# measures time: the assertions read the report.
HANG_LIMIT_S = 8

SECTIONS = """
Section(name="passes", step="one", what="passing tests", limit_s=60, estimate_s=1, tests=(FAKE + "/test_pass.py",)),
Section(name="fails", step="one", what="a failing test", limit_s=60, estimate_s=1, tests=(FAKE + "/test_fail.py",)),
Section(name="hangs", step="one", what="a hanging test", limit_s=HANG_LIMIT_S, estimate_s=1, tests=(FAKE + "/test_hang.py",)),
Section(name="crashes", step="one", what="a crashing test", limit_s=60, estimate_s=1, tests=(FAKE + "/test_crash.py",)),
Section(
    name="collection", step="one", what="a file that fails to import, and one that works", limit_s=60, estimate_s=1,
    tests=(FAKE + "/test_import_error.py", FAKE + "/test_pass.py"),
),
Section(name="nothing", step="one", what="a selection of no test", limit_s=60, estimate_s=1, tests=(FAKE + "/test_pass.py",), k="no_such_test"),
Section(name="missing", step="one", what="a file not written yet", limit_s=60, estimate_s=1, tests=(FAKE + "/test_not_there.py",)),
Section(name="command", step="one", what="a command", limit_s=60, estimate_s=1, command=("{python}", "-c", "print('hello from a command')")),
Section(name="other-step", step="two", what="not asked for", limit_s=60, estimate_s=1, command=("{python}", "-c", "pass")),
""".replace("HANG_LIMIT_S", str(HANG_LIMIT_S))


@pytest.fixture(scope="module")
def fake_run(tmp_path_factory):
    """One run of the sections above (step one), shared by the tests that read its report."""
    tmp_path = tmp_path_factory.mktemp("fake_run")
    table = write_table(tmp_path, SECTIONS)
    proc, report = run_report(tmp_path, table, "--steps", "one", "--deadline", "0")
    return proc, report, tmp_path


def test_every_section_runs_and_the_run_fails(fake_run):
    proc, report, _ = fake_run
    assert proc.returncode == 1, proc.stdout + proc.stderr
    for name in ("passes", "fails", "hangs", "crashes", "collection", "nothing", "missing", "command"):
        assert f"| {name} | one |" in report
    assert "other-step" not in report.split("Steps not run")[0]
    assert "Steps not run by this command: two" in report
    assert "**finished, 6 section(s) did not pass**" in report


def test_passing_section_counts_its_tests(fake_run):
    report = fake_run[1]
    assert "| passes | one | passed | 2 passed, 1 skipped |" in row(report, "passes")
    assert "Skipped: needs two GPUs (1)" in section_text(report, "passes")
    assert "| dependencies | * | passed |" in row(report, "dependencies")


def test_failing_test_is_named_with_its_traceback(fake_run):
    text = section_text(fake_run[1], "fails")
    assert "| fails | one | failed (exit 1) | 1 passed, 1 failed |" in row(fake_run[1], "fails")
    assert "**FAILED** `" in text and "test_fail.py::test_wrong_answer`" in text
    assert "arithmetic is broken" in text


def test_hanging_section_is_killed_at_its_limit_and_the_next_one_runs(fake_run):
    report = fake_run[1]
    assert "| hangs | one | timed out | 1 passed, 2 collected |" in row(report, "hangs")
    text = section_text(report, "hangs")
    assert f"killed at its limit after {HANG_LIMIT_S} s; running: " in text and "test_hang.py::test_hangs" in text
    assert "End of its log:" in text and "test_before_the_hang PASSED" in text
    assert 'test_hang.py", line 8 in test_hangs' in text  # its stack, dumped before the kill
    assert "| crashes | one | crashed (SIGSEGV) |" in row(report, "crashes")  # the next one ran


def test_crash_is_reported_with_its_signal_and_test(fake_run):
    text = section_text(fake_run[1], "crashes")
    assert "killed by SIGSEGV while running " in text and "test_crash.py::test_segfaults" in text
    assert 'test_crash.py", line 9 in test_segfaults' in text and "_pytest" not in text
    assert "1 passed" in row(fake_run[1], "crashes")


def test_collection_error_does_not_stop_the_other_file(fake_run):
    report = fake_run[1]
    assert "| collection | one | failed (exit 1) | 2 passed, 1 skipped, 1 collection error(s) |" in row(report, "collection")
    text = section_text(report, "collection")
    assert "Collection error in `" in text and "module_that_is_not_installed_anywhere" in text


def test_selection_of_no_test_fails(fake_run):
    report = fake_run[1]
    assert "| nothing | one | failed (exit 5) | no tests collected |" in row(report, "nothing")
    assert "| missing | one | failed | no tests collected |" in row(report, "missing")
    assert "test_not_there.py not found" in section_text(report, "missing")
    assert "section missing names files that do not exist" in report


def test_command_section_shows_its_output(fake_run):
    assert "| command | one | passed |" in row(fake_run[1], "command")
    assert "hello from a command" in section_text(fake_run[1], "command")


def test_out_gets_the_report_and_the_log(fake_run):
    _, report, tmp_path = fake_run
    out = sorted(p.name for p in (tmp_path / "out").iterdir())
    assert out == ["report.log", "report.md"]
    assert (tmp_path / "out" / "report.md").read_text() == report
    log = (tmp_path / "out" / "report.log").read_text()
    assert "===== section hangs:" in log and "arithmetic is broken" in log


def test_killed_section_leaves_no_process_behind(tmp_path):
    pid_file = tmp_path / "child.pid"
    # The child of the section's process ignores SIGTERM: only the group's SIGKILL ends it.
    code = (
        "import subprocess, sys, time; "
        "child = subprocess.Popen([sys.executable, '-c', 'import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)']); "
        f"open({str(pid_file)!r}, 'w').write(str(child.pid)); time.sleep(600)"
    )
    table = write_table(tmp_path, f'Section(name="hangs", step="one", what="a hang", limit_s=3, estimate_s=1, command=("{{python}}", "-c", {code!r})),\n')
    proc, report = run_report(tmp_path, table, "--deadline", "0")
    assert proc.returncode == 1
    assert "| hangs | one | timed out |" in row(report, "hangs")
    pid = int(pid_file.read_text())
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/status") as f:
                if "State:\tZ" in f.read():
                    break  # dead, waiting for its parent (init) to reap it
        except FileNotFoundError:
            break
        time.sleep(0.1)
    else:
        pytest.fail(f"process {pid} of the killed section is still running")


def test_missing_dependency_is_named_with_the_fix_and_the_sections_still_run(tmp_path):
    required = {"json": "json", "module_that_is_not_installed_anywhere": "not-installed-anywhere", "expecttest_not_here": "expecttest"}
    table = write_table(tmp_path, 'Section(name="passes", step="one", what="t", limit_s=60, estimate_s=1, tests=(FAKE + "/test_pass.py",)),\n', required)
    proc, report = run_report(tmp_path, table, "--deadline", "0")
    assert proc.returncode == 1
    assert "| dependencies | * | failed (missing modules) |" in row(report, "dependencies")
    assert "Missing Python modules: module_that_is_not_installed_anywhere, expecttest_not_here" in report
    assert "`make gpu-wheels`" in report and "carry `.whl`" in report
    text = section_text(report, "dependencies")
    assert "module_that_is_not_installed_anywhere (pip: not-installed-anywhere, NOT in requirements-gpu.txt: add it there, pinned)" in text
    assert "expecttest_not_here (pip: expecttest==0.3.0, in requirements-gpu.txt): ModuleNotFoundError" in text
    assert "ERROR: Missing Python modules" in proc.stdout
    assert "| passes | one | passed | 2 passed, 1 skipped |" in row(report, "passes")


def test_deadline_cuts_the_run_short_and_says_what_did_not_run(tmp_path):
    # Each command leaves a file once its sleep is over: the one the deadline
    # cuts never does (it was killed, not waited for).
    sleep = '("{python}", "-c", "import time; time.sleep(%d); open(%r, \'w\').close()")'
    done = {name: str(tmp_path / f"{name}.done") for name in ("first", "second", "third")}
    table = write_table(
        tmp_path,
        f"""
        Section(name="first", step="one", what="1 s", limit_s=60, estimate_s=1, command={sleep % (1, done["first"])}),
        Section(name="second", step="one", what="cut by the deadline", limit_s=60, estimate_s=1, command={sleep % (60, done["second"])}),
        Section(name="third", step="two", what="never started", limit_s=60, estimate_s=1, command={sleep % (1, done["third"])}),
        """,
    )
    proc, report = run_report(tmp_path, table, "--deadline", "8", "--reserve-s", "2", "--min-start-s", "2")
    assert [os.path.exists(path) for path in done.values()] == [True, False, False]
    assert proc.returncode == 1
    assert "| first | one | passed |" in row(report, "first")
    assert "| second | one | timed out |" in row(report, "second")
    assert "killed at the whole-run deadline after" in section_text(report, "second")
    assert re.search(r"\| third \| two \| not run: the whole-run deadline \(8 s\) left \d+ s \|", row(report, "third"))
    assert re.search(r"\*\*cut short\*\*: 1 section\(s\) not run \(third\): the whole-run deadline \(8 s\) left \d+ s; 1 did not pass: second", report)


def test_report_is_written_at_the_start_and_after_every_section(tmp_path):
    # Each section copies the report as it stands while the section runs.
    snap = '("{python}", "-c", "import os, shutil; shutil.copy(os.environ[\'OUT\'] + \'/report.md\', %r)")'
    table = write_table(
        tmp_path,
        f"""
        Section(name="first", step="one", what="w", limit_s=60, estimate_s=1, command={snap % str(tmp_path / "during-first.md")}),
        Section(name="second", step="one", what="w", limit_s=60, estimate_s=1, command={snap % str(tmp_path / "during-second.md")}),
        """,
    )
    proc, report = run_report(tmp_path, table, "--deadline", "0")
    assert proc.returncode == 0, report
    during_first = (tmp_path / "during-first.md").read_text()
    assert "**running**: section first" in during_first and "| second | one | pending |" in during_first
    during_second = (tmp_path / "during-second.md").read_text()
    assert "| first | one | passed |" in during_second and "**running**: section second" in during_second
    assert "**finished, every section passed**" in report


def test_xdist_workers_are_counted_once(tmp_path):
    table = write_table(
        tmp_path,
        'Section(name="parallel", step="one", what="w", limit_s=120, estimate_s=1, workers=2, '
        'tests=(FAKE + "/test_pass.py", FAKE + "/test_fail.py", FAKE + "/test_import_error.py")),\n',
    )
    proc, report = run_report(tmp_path, table, "--deadline", "0")
    assert "| parallel | one | failed (exit 1) | 3 passed, 1 failed, 1 skipped, 1 collection error(s) |" in row(report, "parallel")
    assert "arithmetic is broken" in section_text(report, "parallel")


def test_benchmark_sections_add_to_one_results_file_each_written_at_once(tmp_path):
    # The real table's benchmark sections (quick): each one a process, each adding
    # its section to the results file of the run, which comes back under $OUT.
    table = tmp_path / "table.py"
    table.write_text(
        textwrap.dedent(
            """
            import gpu_sections
            from gpu_sections import Section

            REQUIRED_MODULES = {"json": "json"}
            BUILD = None
            TEST_FILES_GLOB = None
            DESCRIBE_MACHINE = False
            STEPS = ("bench",)
            SECTIONS = tuple(s for s in gpu_sections.SECTIONS if s.name in ("bench-streams", "bench-ops"))
            """
        )
    )
    proc, report = run_report(tmp_path, str(table), "--deadline", "0", "--bench-args=--quick")
    assert proc.returncode == 0, report
    results = sorted(p.name for p in (tmp_path / "results").iterdir())
    # The run's results (one file each) and the history of runs (one entry for the run).
    assert len(results) == 3 and {os.path.splitext(n)[1] for n in results} == {".md", ".json", ".jsonl"}
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == sorted(["report.md", "report.log", *results])
    data = json.loads((tmp_path / "results" / [n for n in results if n.endswith(".json")][0]).read_text())
    assert {"ops", "streams"} <= set(data) and data["machine"]["run_id"]
    history = (tmp_path / "results" / "history.jsonl").read_text().splitlines()
    assert len(history) == 1 and "ops" in json.loads(history[0])
    assert "| bench-ops | bench | passed |" in row(report, "bench-ops")
    assert "Eager per-op time" in section_text(report, "bench-ops")  # its table, from its output
    assert re.search(r"Files written: \S+/results/\S+\.md, \S+/results/\S+\.json, \S+/results/history\.jsonl\.", section_text(report, "bench-streams"))


def test_report_says_where_the_time_went(fake_run):
    report = fake_run[1]
    time_part = report.split("## Where the time went")[1].split("\n## ")[0]
    for name in ("dependencies", "passes", "fails", "hangs", "command"):
        assert re.search(rf"^\| {name} \| [\d.]+ s \| \d+% \|", time_part, re.M), time_part
    # A pytest section: its start-up and collection apart from its tests, and its slowest tests.
    assert re.search(r"^\| passes \| [\d.]+ s \| \d+% \| start-up and collection \d+ s; slowest: `test_\w+` [\d.]+ s", time_part, re.M)
    assert re.search(r"^\| total \(from the start of `make gpu-test`\) \| [\d.]+ s", time_part, re.M)


def test_compile_units_are_read_from_ninjas_log(tmp_path, monkeypatch):
    build = tmp_path / "build" / "temp.linux-x86_64-cpython-312"
    build.mkdir(parents=True)
    log = build / ".ninja_log"
    log.write_text("# ninja log v5\n0\t9000\t1\t/x/old.o\tabc\n")
    monkeypatch.setattr(gpu_report, "ROOT", str(tmp_path))
    before = gpu_report.ninja_log_sizes()
    with open(log, "a") as f:  # what this build compiled: two units side by side, then one
        f.write("0\t4000\t1\t/x/a.o\tabc\n100\t3100\t1\t/x/b.o\tabc\n4000\t6000\t1\t/x/c.o\tabc\n")
    entries = gpu_report.ninja_log_entries(before)
    assert sorted(unit for unit, _, _ in entries) == ["a.o", "b.o", "c.o"]
    (line,) = gpu_report.describe_compile_units(entries)
    assert line.startswith("3 units, 9 s of compiling in 6 s (1.5 at a time, ")
    assert line.endswith("slowest: a.o 4 s, b.o 3 s, c.o 2 s")
    assert gpu_report.describe_compile_units([]) == ["no unit compiled (up to date)"]


def test_all_leaves_out_the_subset_steps(tmp_path):
    table = write_table(
        tmp_path,
        """
        Section(name="quick", step="smoke", what="w", limit_s=60, estimate_s=1, command=("{python}", "-c", "pass")),
        Section(name="full", step="one", what="w", limit_s=60, estimate_s=1, command=("{python}", "-c", "pass")),
        """,
        steps=("smoke", "one"),
        extra='SUBSET_STEPS = ("smoke",)\n',
    )
    proc, report = run_report(tmp_path, table, "--deadline", "0")
    assert proc.returncode == 0, report
    assert "| full | one | passed |" in row(report, "full") and "| quick |" not in report.split("## Where")[0]
    proc, report = run_report(tmp_path, table, "--deadline", "0", "--steps", "smoke")
    assert "| quick | smoke | passed |" in row(report, "quick") and "| full |" not in report.split("## Where")[0]


HISTORY_SECTIONS = """
Section(name="first", step="one", what="w", limit_s=60, estimate_s=100, command=("{python}", "-c", "pass")),
Section(name="second", step="one", what="w", limit_s=60, estimate_s=100, command=("{python}", "-c", "raise SystemExit(3)")),
Section(name="third", step="two", what="w", limit_s=60, estimate_s=100, command=("{python}", "-c", "pass")),
Section(name="quick", step="smoke", what="w", limit_s=60, estimate_s=10, command=("{python}", "-c", "pass")),
"""


def history_rows(path) -> list[list[str]]:
    return [
        [cell.strip() for cell in line.strip().strip("|").split("|")]
        for line in path.read_text().splitlines()
        if line.startswith("| ") and not line.startswith("| section |")
    ]


def test_sections_that_ran_enter_the_history_oldest_first(tmp_path):
    history = tmp_path / "reports" / "gpu-sections.md"
    table = write_table(
        tmp_path, HISTORY_SECTIONS, steps=("one", "two", "smoke"), extra='RECORD_WITHOUT_GPU = True\nSUBSET_STEPS = ("smoke",)\n'
    )
    proc, report = run_report(tmp_path, table, "--deadline", "0", "--steps", "one", "--history", str(history), "--commit", "abc1234")
    assert proc.returncode == 1  # second failed
    rows = history_rows(history)
    # Never-run sections first (in the table's order), then the oldest runs.
    assert [r[0] for r in rows] == ["third", "quick", "first", "second"]
    assert rows[0][2] == rows[1][2] == "never"
    first, second = rows[2], rows[3]
    assert first[1:4] == ["one", first[2], "abc1234"] and re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d", first[2])
    assert first[4] == "none" and first[5] == "passed" and first[7].endswith(" s")
    assert second[5] == "failed (exit 3)"
    # It comes back under $OUT with the report.
    assert (tmp_path / "out" / "gpu-sections.md").read_text() == history.read_text()
    # A later run of another step keeps the rows of the first, and puts its own last.
    later = str(time.time() + 120)  # the history's dates are to the minute
    proc, _ = run_report(
        tmp_path, table, "--deadline", "0", "--steps", "two", "--history", str(history), "--commit", "def5678", "--started", later
    )
    rows = history_rows(history)
    assert [r[0] for r in rows] == ["quick", "first", "second", "third"]
    assert rows[3][3] == "def5678" and rows[1][3] == "abc1234"


def test_history_is_kept_only_for_gpu_runs(tmp_path):
    history = tmp_path / "gpu-sections.md"
    table = write_table(tmp_path, HISTORY_SECTIONS, steps=("one", "two", "smoke"))
    run_report(tmp_path, table, "--deadline", "0", "--sections", "first", "--history", str(history))
    assert not history.exists()
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["report.log", "report.md"]


def test_next_picks_what_has_not_run_longest_within_the_budget(tmp_path):
    history = tmp_path / "gpu-sections.md"
    table_path = write_table(tmp_path, HISTORY_SECTIONS, steps=("one", "two", "smoke"), extra='SUBSET_STEPS = ("smoke",)\n')
    history.write_text(
        "| section | step | last GPU run (UTC) | commit | GPU | outcome | tests | time |\n|---|---|---|---|---|---|---|---|\n"
        "| first | one | 2026-11-20 10:00 | a | H100 | passed | | 10 s |\n"
        "| second | one | 2026-11-25 10:00 | b | H100 | failed | | 10 s |\n"
    )

    def next_for(*args):
        cmd = [sys.executable, os.path.join(TOOLS, "gpu_report.py"), "--table", table_path, "--history", str(history), "--next", *args]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=60).stdout

    # third never ran, first ran longest ago; the smoke step is not offered (a window runs it whole).
    assert next_for("400").splitlines()[-1].startswith("make gpu-test GPU_TEST_SECTIONS=third,first,second ")
    assert next_for("250").splitlines()[-1].startswith("make gpu-test GPU_TEST_SECTIONS=third,first ")
    assert "GPU_TEST_SECTIONS=third " in next_for("150")
    assert "quick" not in next_for("400")


@pytest.mark.parametrize("args, message", [(["--steps", "tests,bench"], "--steps takes"), (["--sections", "nope"], "unknown sections")])
def test_unknown_steps_and_sections_are_refused(tmp_path, args, message):
    table = write_table(tmp_path, 'Section(name="s", step="one", what="w", limit_s=60, estimate_s=1, command=("true",)),\n')
    proc, report = run_report(tmp_path, table, *args)
    assert proc.returncode == 2 and message in proc.stderr
    assert not report and not any((tmp_path / "out").iterdir())


# -- the real table and the wheelhouse ------------------------------------------------------


def test_table_is_consistent_and_each_step_fits_a_command():
    names = [s.name for s in gpu_sections.SECTIONS]
    assert len(names) == len(set(names))
    assert {s.step for s in gpu_sections.SECTIONS} == set(gpu_sections.STEPS)
    for s in gpu_sections.SECTIONS:
        assert bool(s.tests) != bool(s.command), s.name
        assert s.estimate_s < s.limit_s <= 600, s.name
    # Estimated on an H100 (see the table), a step with its build fits the default deadline.
    for step in gpu_sections.STEPS:
        total = gpu_sections.BUILD.estimate_s + sum(s.estimate_s for s in gpu_sections.SECTIONS if s.step == step)
        assert total <= 540, (step, total)
    # The smoke step, with the dependencies (10 s) and the machine's description
    # (15 s), fits its budget on a fresh machine (issue 28: 6 minutes).
    smoke = sum(s.estimate_s for s in gpu_sections.SECTIONS if s.step == "smoke")
    assert gpu_sections.BUILD.estimate_s + 10 + 15 + smoke <= gpu_sections.SMOKE_BUDGET_S
    assert set(gpu_sections.SUBSET_STEPS) <= set(gpu_sections.STEPS) and gpu_sections.UNASSIGNED_STEP in gpu_sections.STEPS
    # Each issue's section is there.
    for name in ("accelrt", "device", "opinfo", "compile", "sdpa", "distributed", "profiler", "multiprocessing"):
        assert name in names
    for name in ("ops", "throughput", "sdpa", "models", "compiled"):
        assert f"bench-{name}" in names


def test_smoke_step_names_tests_of_every_path_that_exist():
    smoke = [s for s in gpu_sections.SECTIONS if s.step == "smoke"]
    names = {s.name for s in smoke}
    for path in ("device", "ops", "sdpa", "compile", "graphs", "profiler", "ipc", "nccl", "models", "bench"):
        assert f"smoke-{path}" in names
    ids = [t for s in smoke for t in s.tests]
    assert all("::" in t for t in ids), "the smoke step names tests, not whole files"
    # Every node id collects (a renamed test would leave its path untested).
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *ids],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    collected = [line for line in proc.stdout.splitlines() if "::" in line]
    for nodeid in ids:
        assert any(line == nodeid or line.startswith(nodeid + "[") for line in collected), nodeid


def test_the_history_of_sections_names_every_section(tmp_path):
    history = gpu_report.SectionHistory.read(gpu_report.HISTORY_FILE)
    names = [s.name for s in [gpu_sections.BUILD, *gpu_sections.SECTIONS]]
    assert set(names) <= set(history.rows), "regenerate test/reports/gpu-sections.md (SectionHistory.write)"
    # As the runner writes it: in order, oldest first.
    history.write(str(tmp_path / "expected.md"), gpu_sections)
    assert (tmp_path / "expected.md").read_text() == open(gpu_report.HISTORY_FILE).read()


def test_every_test_file_is_in_a_section_or_exempt():
    # A file in no section would still run (the unassigned section), but the table should name it.
    assert gpu_report.unassigned_test_files(gpu_sections) == []
    for path in gpu_sections.GPU_EXEMPT:
        assert os.path.exists(os.path.join(ROOT, path)), path


def distribution_closure(*names: str) -> set[str]:
    """The distributions ``names`` need (declared requirements, recursively, no extras)."""
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    seen, todo = set(), [canonicalize_name(n) for n in names]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        try:
            requires = importlib.metadata.requires(name) or []
        except importlib.metadata.PackageNotFoundError:
            continue
        for line in requires:
            req = Requirement(line)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(canonicalize_name(req.name))
    return seen


def test_required_modules_cover_what_the_suite_imports():
    """Every module the suite and the benchmarks import (directly, or through
    torch's own modules such as torch.testing._internal), other than what torch
    and pytest need themselves (present wherever they work, as on the GPU
    image), is checked before a GPU run. Within `make test` the modules are
    already imported (collection imported every test file); alone, this test
    imports them."""
    from packaging.utils import canonicalize_name

    # Every Python file of these folders, subfolders (benchmarks/sections/) included.
    sources = [
        os.path.join(path, name)
        for d in ("test", "benchmarks", "tools/gpu")
        for path, _, names in os.walk(os.path.join(ROOT, d))
        for name in names
        if name.endswith(".py")
    ]
    # Local modules: the suite's own, and the tools/ scripts tests import by path.
    local = {
        os.path.splitext(n)[0]
        for d in ("test", "benchmarks", "tools", "tools/gpu")
        for n in os.listdir(os.path.join(ROOT, d))
    }
    local |= {"torch_accel"}
    imports = set()
    for source in sources:
        for node in ast.walk(ast.parse(open(source).read())):
            if isinstance(node, ast.Import):
                imports |= {alias.name for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                imports.add(node.module)
    for module in sorted(imports):
        top = module.split(".")[0]
        if top in gpu_sections.GPU_IMAGE_ONLY:
            assert top in gpu_sections.REQUIRED_MODULES  # the GPU run checks it is there
        if top not in local and top not in sys.stdlib_module_names:
            importlib.import_module(module)

    # What torch, pytest and the image's other required packages (installed with
    # their requirements there) bring; the wheels of requirements-gpu.txt come
    # without theirs (--no-deps), see test_wheelhouse_pins_the_versions_tested_here.
    on_image = set(gpu_sections.REQUIRED_MODULES.values()) - set(gpu_report.read_pins())
    provided = distribution_closure("torch", "pytest", *on_image)
    distributions = importlib.metadata.packages_distributions()
    needed = set()
    for top in {name.split(".")[0] for name in list(sys.modules)}:
        if top in sys.stdlib_module_names or top in local or top.startswith("_"):
            continue
        dists = distributions.get(top)
        if not dists:
            continue  # no distribution: a module that an extension makes at run time (cython_runtime)
        if not any(canonicalize_name(d) in provided for d in dists):
            needed.add(top)
    assert "expecttest" in needed  # what the GPU image lacked: torch.testing._internal imports it
    missing = needed - set(gpu_sections.REQUIRED_MODULES)
    assert not missing, f"add to REQUIRED_MODULES in tools/gpu/gpu_sections.py (and to requirements-gpu.txt if the GPU image lacks them): {missing}"


def test_wheelhouse_pins_the_versions_tested_here():
    pins = gpu_report.read_pins()
    assert pins, "requirements-gpu.txt lists nothing"
    for dist, line in pins.items():
        name, _, version = line.partition("==")
        assert version, f"{line}: pin an exact version (the wheel is downloaded for another machine)"
        assert importlib.metadata.version(name.strip()) == version.strip(), line
        assert dist in {d.lower() for d in gpu_sections.REQUIRED_MODULES.values()}, line
        # Wheels are installed without their requirements: each must be required too.
        for requirement in distribution_closure(name.strip()) - {dist}:
            assert requirement in distribution_closure("torch", "pytest") | set(pins), f"{line} needs {requirement}: pin it too"


def test_list_prints_the_table():
    proc = subprocess.run([sys.executable, os.path.join(TOOLS, "gpu_report.py"), "--list"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    for s in gpu_sections.SECTIONS:
        assert f"| {s.name} | {s.step} | {s.limit_s} s | {s.estimate_s} s |" in proc.stdout
