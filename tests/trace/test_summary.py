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
    expected_kinds = collections.Counter(
        e["name"].split()[1] for e in events if e.get("cat") == "gpu_memcpy"
    )
    assert summary.memcpy_counts == dict(expected_kinds)
    assert summary.memcpy_counts["DtoD"] == 8
    expected_bytes = sum(
        e["args"]["bytes"] for e in events if e.get("cat") == "gpu_memcpy" and "DtoD" in e["name"]
    )
    assert summary.memcpy_bytes["DtoD"] == expected_bytes
    copy_kernels = sum(
        1 for e in events if e.get("cat") == "kernel" and "direct_copy_kernel_cuda" in e["name"]
    )
    assert copy_kernels > 0
    assert summary.copy_kernel_count == copy_kernels
    assert summary.kernel_count == sum(1 for e in events if e.get("cat") == "kernel")
    assert summary.memset_count == sum(1 for e in events if e.get("cat") == "gpu_memset")


def test_a100_forward_windows_count_the_kernels_they_launched():
    events = raw_events("a100_train_step_rank0.json.gz")
    windows = sorted((e for e in events if e.get("name") == "## forward ##"), key=lambda e: e["ts"])
    summaries = summarize_windows(
        load_trace(TRACES / "a100_train_step_rank0.json.gz"), "## forward ##"
    )
    assert len(summaries) == len(windows) == 2
    for window, summary in zip(windows, summaries):
        assert summary.kernel_count == launches_in(events, window, {"cudaLaunchKernel"})
        assert sum(summary.memcpy_counts.values()) == launches_in(
            events, window, {"cudaMemcpyAsync"}
        )
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
    summary = summarize_windows(load_trace(TRACES / "a100_triton_kernel.json.gz"), "ProfilerStep")[
        0
    ]
    events = raw_events("a100_triton_kernel.json.gz")
    kernel = next(e for e in events if e.get("cat") == "kernel")
    assert summary.kernels == {kernel["name"]: 1}
    assert summary.launch_calls.get("cuLaunchKernel") == 1
    assert summary.device_time_us == pytest.approx(kernel["dur"])


def test_mi250_profiler_steps_hip_launches_and_htod_copies():
    events = raw_events("mi250_toy_train.json.gz")
    summaries = summarize_windows(load_trace(TRACES / "mi250_toy_train.json.gz"), "ProfilerStep")
    assert [s.annotation for s in summaries] == ["ProfilerStep#1", "ProfilerStep#2"]
    steps = sorted(
        (e for e in events if str(e.get("name", "")).startswith("ProfilerStep#")),
        key=lambda e: e["ts"],
    )
    hip_launches = {"hipLaunchKernel", "hipExtModuleLaunchKernel"}
    for step, summary in zip(steps, summaries):
        assert summary.kernel_count == launches_in(events, step, hip_launches)
        assert summary.memcpy_counts.get("HtoD", 0) == launches_in(
            events, step, {"hipMemcpyWithStream"}
        )
    total_htod = sum(
        1 for e in events if e.get("cat") == "gpu_memcpy" and e["name"].startswith("Memcpy HtoD")
    )
    assert sum(s.memcpy_counts.get("HtoD", 0) for s in summaries) == total_htod == 2


def test_cpu_only_trace_has_ops_and_no_device_work():
    events = raw_events("cpu_only.json.gz")
    summary = summarize_windows(load_trace(TRACES / "cpu_only.json.gz"), "ProfilerStep")[0]
    step = next(e for e in events if str(e.get("name", "")).startswith("ProfilerStep#"))
    end = step["ts"] + step["dur"]
    expected_ops = sum(
        1
        for e in events
        if e.get("cat") == "cpu_op" and step["ts"] <= e["ts"] <= end and e["pid"] == step["pid"]
    )
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


# --- real GPU attention traces (TraceLens): whole-trace totals, lost launches, ROCm copies ---

ALL_GPU_TRACES = [
    "a100_train_step_rank0.json.gz",
    "a100_triton_kernel.json.gz",
    "mi250_toy_train.json.gz",
    "h100_bert-small_sdpa-flash.json.gz",
    "mi300x_bert-small_sdpa-aotriton.json.gz",
    "h100_timesformer_naive-bmm-softmax.json.gz",
]
LAUNCH_CATEGORIES = ("cuda_runtime", "cuda_driver")


def index_of(events):
    return TraceIndex({"traceEvents": events})


@pytest.mark.parametrize("name", ALL_GPU_TRACES)
def test_whole_trace_totals_equal_the_files_own_device_events(name):
    events = raw_events(name)
    summary = index_of(events).summarize(index_of(events).whole_trace())
    kernels = [e for e in events if e.get("cat") == "kernel"]
    memcpys = [e for e in events if e.get("cat") == "gpu_memcpy"]
    memsets = [e for e in events if e.get("cat") == "gpu_memset"]
    assert kernels, f"{name} has device kernels"
    assert summary.kernel_count == len(kernels)
    assert summary.device_time_us == pytest.approx(sum(e["dur"] for e in kernels))
    assert sum(summary.memcpy_counts.values()) == len(memcpys)
    assert summary.memset_count == len(memsets)
    assert summary.memset_bytes == sum(e["args"].get("bytes", 0) for e in memsets)
    assert summary.unattributed_events == 0 and summary.warnings == ()


def drop_first_launches(events, count):
    """The trace as a profiler that lost the host events of its first ``count`` launches would write it."""
    launches = sorted(
        (e for e in events if e.get("cat") in LAUNCH_CATEGORIES and "aunch" in e["name"]),
        key=lambda e: e["ts"],
    )
    lost = {e["args"]["correlation"] for e in launches[:count]}
    kept = [
        e
        for e in events
        if not (e.get("cat") in LAUNCH_CATEGORIES and e["args"].get("correlation") in lost)
    ]
    return kept, lost


def test_device_work_without_a_recorded_launch_is_counted_and_reported():
    events = raw_events("h100_bert-small_sdpa-flash.json.gz")
    kept, lost = drop_first_launches(events, 12)
    orphans = [
        e
        for e in events
        if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")
        and e["args"].get("correlation") in lost
    ]
    assert orphans, "the dropped launches launched device work"
    index = index_of(kept)
    whole = index.summarize(index.whole_trace())
    assert whole.kernel_count == sum(1 for e in events if e.get("cat") == "kernel")
    assert whole.unattributed_events == len(orphans)
    assert whole.unattributed_time_us == pytest.approx(sum(e["dur"] for e in orphans))
    assert any(
        "no recorded launch" in w and "per-window attribution is incomplete" in w
        for w in whole.warnings
    )
    step = index.summarize(index.windows("ProfilerStep")[0])
    before = index_of(events).summarize(index_of(events).windows("ProfilerStep")[0])
    assert step.kernel_count == before.kernel_count - sum(
        1 for e in orphans if e.get("cat") == "kernel"
    )
    assert step.unattributed_events == 0
    assert any("may be short" in w for w in step.warnings)


def test_h100_sdpa_flash_runs_the_flash_kernel_once_per_sdpa_call():
    events = raw_events("h100_bert-small_sdpa-flash.json.gz")
    step = summarize_windows(
        load_trace(TRACES / "h100_bert-small_sdpa-flash.json.gz"), "ProfilerStep"
    )[0]
    sdpa_calls = sum(
        1 for e in events if e.get("name") == "aten::_scaled_dot_product_flash_attention"
    )
    flash_kernels = sum(
        1
        for e in events
        if e.get("cat") == "kernel" and "pytorch_flash::flash_fwd_kernel" in e["name"]
    )
    assert sdpa_calls == flash_kernels > 0
    assert step.sdpa_backends == ["FLASH_ATTENTION"]
    assert step.kernel_families()["fused attention: flash"] == flash_kernels
    assert step.memcpy_counts == {"DtoH": 1}


def test_mi300x_aotriton_attention_kernel_and_hip_memory():
    events = raw_events("mi300x_bert-small_sdpa-aotriton.json.gz")
    index = index_of(events)
    whole = index.summarize(index.whole_trace())
    aotriton = sum(1 for e in events if e.get("cat") == "kernel" and e["name"] == "attn_fwd")
    assert (
        aotriton
        == sum(1 for e in events if e.get("name") == "aten::_scaled_dot_product_flash_attention")
        > 0
    )
    assert whole.kernel_families()["fused attention: AOTriton (ROCm)"] == aotriton
    assert "unknown" not in whole.kernel_families()
    hip_allocated = sum(
        e["args"]["Bytes"]
        for e in events
        if e.get("name") == "[memory]"
        and e["args"].get("Device Type") == 6
        and e["args"]["Bytes"] > 0
    )
    assert hip_allocated > 0
    assert whole.allocated_bytes["cuda"] == hip_allocated


def test_rocm_copies_filed_as_kernels_are_copies_sized_from_their_op():
    events = raw_events("mi300x_bert-small_sdpa-aotriton.json.gz")
    memcpy = next(e for e in events if e.get("cat") == "gpu_memcpy")
    op = next(
        e
        for e in events
        if e.get("cat") == "cpu_op"
        and e["args"].get("External id") == memcpy["args"]["External id"]
    )
    assert op["args"]["Input type"] == ["bool"] and op["args"]["Input Dims"] == [
        []
    ]  # item() of a bool: 1 byte
    memcpy["cat"] = "kernel"  # as some ROCm profiler versions file it
    del memcpy["args"]["bytes"]  # and ROCm memcpy events often carry no byte count
    whole = index_of(events).summarize(index_of(events).whole_trace())
    assert whole.kernel_count == sum(1 for e in events if e.get("cat") == "kernel") - 1
    assert whole.memcpy_counts == {"DtoD": 1}
    assert whole.memcpy_bytes == {"DtoD": 1}
    assert [c.kind for c in whole.copies if c.lane == "device"] == ["DtoD"]


def test_mi250_memcpy_without_bytes_is_sized_from_the_launching_op():
    events = raw_events("mi250_toy_train.json.gz")
    ops = {
        e["args"]["External id"]: e
        for e in events
        if e.get("cat") == "cpu_op" and "External id" in e["args"]
    }
    expected = 0
    for e in events:
        if e.get("cat") == "gpu_memcpy":
            assert "bytes" not in e["args"]
            op = ops[e["args"]["External id"]]
            assert op["args"]["Input type"][0] == "float"
            rows, cols = op["args"]["Input Dims"][0]
            expected += rows * cols * 4
    whole = index_of(events).summarize(index_of(events).whole_trace())
    assert whole.memcpy_bytes == {"HtoD": expected}


def test_timesformer_unfused_attention_reads_bf16_gemms_softmax_and_copies():
    events = raw_events("h100_timesformer_naive-bmm-softmax.json.gz")
    whole = index_of(events).summarize(index_of(events).whole_trace())
    families = whole.kernel_families()
    names = [e["name"] for e in events if e.get("cat") == "kernel"]
    assert not any("TF32" in f for f in families), (
        families
    )  # every GEMM here is bf16 (model run in bf16)
    s1688_bf16 = sum(1 for n in names if "s1688gemm_bf16" in n)
    gemms = sum(1 for n in names if "gemm" in n and "fprop" not in n)
    assert s1688_bf16 > 0 and families["GEMM bf16"] == gemms
    assert families["softmax"] == sum(1 for n in names if "softmax" in n.lower())
    copy_kernels = sum(1 for n in names if "direct_copy_kernel" in n)
    assert whole.copy_kernel_count == families["copy"] == copy_kernels
    cats = sum(1 for n in names if "CatArrayBatchedCopy" in n)  # torch.cat: a gather, not a copy
    device = [g for g in whole.gathers if g.lane == "device"]
    assert cats and families["gather / concatenate"] == cats == len(device)
    assert all(g.shape and g.size_bytes for g in device)  # from the aten::cat that launched each
