"""Trace reading on real GPU/CPU traces (tests/data/traces) with expectations computed here."""

import collections
import gzip
import json
from pathlib import Path

import pytest

from perfsuite.trace.summary import TraceError, TraceIndex, load_trace, summarize_windows

TRACES = Path(__file__).resolve().parents[1] / "data" / "traces"


def raw_events(name):
    with gzip.open(TRACES / name, "rt") as handle:
        return json.load(handle)["traceEvents"]


def launches_in(events, window, names):
    """Independent count: launch API calls of ``names`` inside ``window`` on its process."""
    end = window["ts"] + window["dur"]
    return sum(
        1
        for e in events
        if e.get("cat") in ("cuda_runtime", "cuda_driver")
        and e["name"] in names
        and e.get("pid") == window["pid"]
        and window["ts"] <= e["ts"] <= end
    )


def test_a100_memcpy_kinds_and_copy_kernels_over_whole_trace():
    events = raw_events("a100_train_step_rank0.json.gz")
    index = TraceIndex(load_trace(TRACES / "a100_train_step_rank0.json.gz"))
    summary = index.summarize(index.whole_trace())
    expected_kinds = collections.Counter(e["name"].split()[1] for e in events if e.get("cat") == "gpu_memcpy")
    assert summary.memcpy_counts == dict(expected_kinds)
    assert summary.memcpy_counts["DtoD"] == 8
    expected_bytes = sum(e["args"]["bytes"] for e in events if e.get("cat") == "gpu_memcpy" and "DtoD" in e["name"])
    assert summary.memcpy_bytes["DtoD"] == expected_bytes
    copy_kernels = sum(1 for e in events if e.get("cat") == "kernel" and "direct_copy_kernel_cuda" in e["name"])
    assert copy_kernels > 0
    assert summary.copy_kernel_count == copy_kernels
    assert summary.kernel_count == sum(1 for e in events if e.get("cat") == "kernel")
    assert summary.memset_count == sum(1 for e in events if e.get("cat") == "gpu_memset")


def test_a100_forward_windows_count_the_kernels_they_launched():
    events = raw_events("a100_train_step_rank0.json.gz")
    windows = sorted((e for e in events if e.get("name") == "## forward ##"), key=lambda e: e["ts"])
    summaries = summarize_windows(load_trace(TRACES / "a100_train_step_rank0.json.gz"), "## forward ##")
    assert len(summaries) == len(windows) == 2
    for window, summary in zip(windows, summaries):
        assert summary.kernel_count == launches_in(events, window, {"cudaLaunchKernel"})
        assert sum(summary.memcpy_counts.values()) == launches_in(events, window, {"cudaMemcpyAsync"})
        assert summary.launch_calls.get("cudaLaunchKernel", 0) == summary.kernel_count
    assert sum(s.kernel_count for s in summaries) > 0


def test_a100_device_copies_are_linked_to_the_aten_op_that_made_them():
    index = TraceIndex(load_trace(TRACES / "a100_train_step_rank0.json.gz"))
    copies = [c for c in index.summarize(index.whole_trace()).copies if c.lane == "device"]
    linked = [c for c in copies if c.shape is not None]
    assert linked, "the A100 trace records shapes, so copies should carry the op's dims"
    dtod = [c for c in copies if c.kind == "DtoD"]
    assert all(c.size_bytes and c.size_bytes > 0 for c in dtod)


def test_triton_kernel_launched_through_the_driver_api():
    summary = summarize_windows(load_trace(TRACES / "a100_triton_kernel.json.gz"), "ProfilerStep")[0]
    events = raw_events("a100_triton_kernel.json.gz")
    kernel = next(e for e in events if e.get("cat") == "kernel")
    assert summary.kernels == {kernel["name"]: 1}
    assert summary.launch_calls.get("cuLaunchKernel") == 1
    assert summary.device_time_us == pytest.approx(kernel["dur"])


def test_mi250_profiler_steps_hip_launches_and_htod_copies():
    events = raw_events("mi250_toy_train.json.gz")
    summaries = summarize_windows(load_trace(TRACES / "mi250_toy_train.json.gz"), "ProfilerStep")
    assert [s.annotation for s in summaries] == ["ProfilerStep#1", "ProfilerStep#2"]
    steps = sorted((e for e in events if str(e.get("name", "")).startswith("ProfilerStep#")), key=lambda e: e["ts"])
    hip_launches = {"hipLaunchKernel", "hipExtModuleLaunchKernel"}
    for step, summary in zip(steps, summaries):
        assert summary.kernel_count == launches_in(events, step, hip_launches)
        assert summary.memcpy_counts.get("HtoD", 0) == launches_in(events, step, {"hipMemcpyWithStream"})
    total_htod = sum(1 for e in events if e.get("cat") == "gpu_memcpy" and e["name"].startswith("Memcpy HtoD"))
    assert sum(s.memcpy_counts.get("HtoD", 0) for s in summaries) == total_htod == 2


def test_cpu_only_trace_has_ops_and_no_device_work():
    events = raw_events("cpu_only.json.gz")
    summary = summarize_windows(load_trace(TRACES / "cpu_only.json.gz"), "ProfilerStep")[0]
    step = next(e for e in events if str(e.get("name", "")).startswith("ProfilerStep#"))
    end = step["ts"] + step["dur"]
    expected_ops = sum(1 for e in events if e.get("cat") == "cpu_op" and step["ts"] <= e["ts"] <= end and e["pid"] == step["pid"])
    assert summary.cpu_op_count == expected_ops
    assert summary.kernel_count == 0 and summary.memcpy_counts == {} and summary.copies == ()


@pytest.mark.parametrize(
    "content, why",
    [
        (b"not json at all", "not a readable"),
        (gzip.compress(b'{"traceEvents": [')[:-6], "not a readable"),
        (b'{"something": 1}', "traceEvents"),
    ],
    ids=["not-json", "truncated-gzip", "no-events"],
)
def test_unreadable_traces_raise_an_error_naming_the_file(tmp_path, content, why):
    path = tmp_path / ("bad.json.gz" if content[:2] == b"\x1f\x8b" else "bad.json")
    path.write_bytes(content)
    with pytest.raises(TraceError, match=why) as info:
        load_trace(path)
    assert str(path) in str(info.value)


def test_missing_trace_file_is_named(tmp_path):
    with pytest.raises(TraceError, match="no such trace file"):
        load_trace(tmp_path / "absent.json")
