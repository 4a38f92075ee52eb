"""pytest plugin of tools/gpu/gpu_report.py (loaded with ``-p gpu_results_plugin
--gpu-results FILE``): writes one JSON line per event to FILE as it happens, so
that a section killed at its time limit, or crashed, still tells which tests
ran, how they ended and which ones were running.

Lines: {"event": "collected", "count": N}; {"event": "collect_error", "nodeid",
"longrepr"}; {"event": "start", "nodeid"}; {"event": "result", "nodeid",
"outcome" (passed, failed, error, skipped, xfailed, xpassed), "duration",
"longrepr"}; {"event": "finish", "exitstatus"}.

Under pytest-xdist only the controller writes (the workers' reports reach it).
"""

import faulthandler
import json
import os
import signal
import time

import pytest

LONGREPR_CHARS = 4000  # the end of a traceback: where the error is


def pytest_addoption(parser):
    parser.addoption("--gpu-results", default=None, help="write test events as JSON lines to this file")


_stack_dump_file = None


def pytest_configure(config):
    path = config.getoption("--gpu-results")
    if path and not hasattr(config, "workerinput"):  # an xdist worker has workerinput
        config.pluginmanager.register(_Recorder(path), "gpu-results-recorder")
    # Before it kills a section at its limit, the runner sends SIGUSR1: every
    # thread's Python stack goes to the section's log (pytest captures fd 2), so
    # the report says where a hang was. In xdist's workers too.
    global _stack_dump_file
    log = os.environ.get("GPU_REPORT_LOG")
    if log and _stack_dump_file is None:
        _stack_dump_file = open(log, "a")
        faulthandler.register(signal.SIGUSR1, file=_stack_dump_file, all_threads=True)


def _text(longrepr) -> str | None:
    if longrepr is None:
        return None
    text = str(longrepr)
    return text if len(text) <= LONGREPR_CHARS else "...\n" + text[-LONGREPR_CHARS:]


class _Recorder:
    def __init__(self, path: str):
        self.file = open(path, "a", buffering=1)

    def write(self, **event) -> None:
        event["time"] = time.time()
        self.file.write(json.dumps(event) + "\n")
        self.file.flush()

    def pytest_collection_finish(self, session):
        self.write(event="collected", count=len(session.items))

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node, ids):
        # Every worker collects the whole selection; the report keeps the largest count.
        self.write(event="collected", count=len(ids))

    def pytest_collectreport(self, report):
        if report.failed:
            self.write(event="collect_error", nodeid=report.nodeid, longrepr=_text(report.longrepr))

    def pytest_runtest_logstart(self, nodeid, location):
        self.write(event="start", nodeid=nodeid)

    def pytest_runtest_logreport(self, report):
        xfail = hasattr(report, "wasxfail")
        if report.when == "call":
            if report.passed:
                outcome = "xpassed" if xfail else "passed"
            elif report.skipped:
                outcome = "xfailed" if xfail else "skipped"
            else:
                outcome = "failed"
        elif report.failed:  # setup or teardown
            outcome = "error"
        elif report.skipped:  # skipped in setup (skip marks, fixtures that skip)
            outcome = "xfailed" if xfail else "skipped"
        else:
            return
        self.write(
            event="result",
            nodeid=report.nodeid,
            when=report.when,
            outcome=outcome,
            duration=round(report.duration, 3),
            longrepr=_text(report.longrepr) if outcome in ("failed", "error", "xpassed") else None,
            reason=report.longrepr[2] if report.skipped and isinstance(report.longrepr, tuple) else None,
        )

    def pytest_sessionfinish(self, session, exitstatus):
        self.write(event="finish", exitstatus=int(exitstatus))
        self.file.close()
