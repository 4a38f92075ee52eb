"""torch.accel.nvtx: torch.cuda.nvtx's functions, whose ranges and marks torch.profiler records."""

import json
import threading

import pytest
import torch
from torch.profiler import ProfilerActivity, profile

import torch_accel
from torch_accel import _C


def _annotations_return_nvtx_values() -> bool:
    # Where the runtime's annotations are NVTX (the CUDA runtime), the
    # functions return NVTX's values, as torch.cuda.nvtx's.
    return _C._profiler_annotations() == "nvtx"


def test_it_is_torch_accel_nvtx():
    assert torch.accel.nvtx is torch_accel.nvtx
    for name in ("range_push", "range_pop", "range", "mark"):
        assert name in torch.accel.nvtx.__all__ and name in torch.cuda.nvtx.__all__


def test_push_and_pop_return_the_depth_of_the_range():
    nvtx = torch.accel.nvtx
    if _annotations_return_nvtx_values():
        # The same NVTX calls as torch.cuda.nvtx's, so the same answers.
        expected = [torch.cuda.nvtx.range_push("a"), torch.cuda.nvtx.range_push("b")]
        expected += [torch.cuda.nvtx.range_pop(), torch.cuda.nvtx.range_pop(), torch.cuda.nvtx.range_pop()]
    else:
        # NVTX's answers while a tool tracks ranges: zero-based depths, and
        # a negative value for a pop with no range open.
        expected = [0, 1, 1, 0, -1]
    got = [nvtx.range_push("a"), nvtx.range_push("b"), nvtx.range_pop(), nvtx.range_pop(), nvtx.range_pop()]
    assert got == expected
    assert nvtx.mark("m") is None


def test_ranges_are_per_thread():
    if _annotations_return_nvtx_values():
        pytest.skip("NVTX's depths are NVTX's (checked against torch.cuda.nvtx above)")
    nvtx = torch.accel.nvtx
    assert nvtx.range_push("main") == 0
    depths = []
    thread = threading.Thread(target=lambda: depths.extend([nvtx.range_push("t"), nvtx.range_pop()]))
    thread.start()
    thread.join()
    assert depths == [0, 0]
    assert nvtx.range_pop() == 0


def test_ranges_and_marks_are_in_the_profilers_events_and_trace(tmp_path):
    nvtx = torch.accel.nvtx
    x = torch.ones(64, device="accel")

    @nvtx.range("decorated")
    def decorated(t):
        return t + 1

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]) as prof:
        with nvtx.range("step {}", 7):
            y = x * 2
            nvtx.mark("after the multiply")
        nvtx.range_push("pushed")
        decorated(y)
        nvtx.range_pop()
    events = {e.name: e for e in prof.events()}
    for name in ("step 7", "after the multiply", "pushed", "decorated"):
        assert name in events, sorted(events)
    # The ranges hold what ran inside them, as record_function's do.
    step = events["step 7"]
    mul = next(e for e in prof.events() if e.name == "aten::mul")
    assert step.time_range.start <= mul.time_range.start and mul.time_range.end <= step.time_range.end
    pushed = events["pushed"]
    inner = events["decorated"]
    assert pushed.time_range.start <= inner.time_range.start and inner.time_range.end <= pushed.time_range.end

    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    trace = json.loads(path.read_text())
    annotations = {e["name"] for e in trace["traceEvents"] if e.get("cat") == "user_annotation"}
    assert {"step 7", "after the multiply", "pushed", "decorated"} <= annotations


def test_outside_a_profiler_ranges_cost_no_profiler_events():
    # The same calls without a profiler: nothing recorded, nothing left open.
    nvtx = torch.accel.nvtx
    with nvtx.range("quiet"):
        nvtx.mark("quiet mark")
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        torch.ones(4, device="accel")
    assert not any(e.name.startswith("quiet") for e in prof.events())


@pytest.mark.parametrize("function", ["range_push", "mark"])
def test_a_message_that_is_not_a_string_is_a_type_error(function):
    with pytest.raises(TypeError, match=f"torch.accel.nvtx.{function}: msg must be a str, but got int"):
        getattr(torch.accel.nvtx, function)(3)
