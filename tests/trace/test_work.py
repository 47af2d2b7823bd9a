"""The structural gate fails only on real work (issue 25, item 2): user-style code changes,
profiled for real on CPU, on both sides of the line."""

import math

import pytest
import torch

from perfsuite.measure.profiling import profile_steps
from perfsuite.trace.structure import (
    NO_WORK_PREFIX,
    added_work,
    adds_work,
    diff_fingerprints,
    fingerprint,
)
from perfsuite.trace.summary import TraceIndex
from perfsuite.trace.events import load_trace
from perfsuite.trace.work import op_work

B, H, S, D = 1, 2, 16, 8


def attention(
    query,
    key,
    value,
    *,
    cast_scores=None,
    same_dtype_to=False,
    contiguous_scores=False,
    clone_scores=False,
    extra_in_place=False,
    merge="reshape",
):
    """Naive attention with in-place masking, as a user writes it, with the changes under test."""
    scores = query @ key.transpose(-2, -1)
    scores.mul_(1 / math.sqrt(query.shape[-1]))
    if same_dtype_to:
        scores = scores.to(query.dtype)  # defensive: already that dtype
    if contiguous_scores:
        scores = scores.contiguous()  # already contiguous
    if clone_scores:
        scores = scores.clone()  # a real extra copy
    if extra_in_place:
        scores.add_(0.0)  # a real extra pass over the scores, no allocation
    mask = torch.ones(S, S, dtype=torch.bool).triu(1)
    scores.masked_fill_(mask, float("-inf"))
    if cast_scores is not None:
        probs = torch.softmax(scores.to(cast_scores), dim=-1).to(
            query.dtype
        )  # a cast there and back
    else:
        probs = torch.softmax(scores, dim=-1)
    out = probs @ value
    if merge == "reshape":
        return out.transpose(1, 2).reshape(B, S, H * D)  # reshape copies a transposed tensor
    return out.transpose(1, 2).contiguous().view(B, S, H * D)  # the same copy, moved to contiguous


def profiled(tmp_path, name, **change):
    generator = torch.Generator().manual_seed(0)
    query, key, value = (torch.randn(B, H, S, D, generator=generator) for _ in range(3))
    step = lambda: attention(query, key, value, **change)
    return fingerprint(profile_steps(step, "cpu", tmp_path / f"{name}.json.gz")[0], "cpu")


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    return profiled(tmp_path_factory.mktemp("base"), "base")


@pytest.mark.parametrize(
    "change", [{"same_dtype_to": True}, {"merge": "contiguous_view"}, {"contiguous_scores": True}]
)
def test_changes_that_add_no_work_pass_and_are_listed_as_no_work_added(base, tmp_path, change):
    head = profiled(tmp_path, "head", **change)
    lines = diff_fingerprints(base, head)
    assert not adds_work(base, head), (lines, added_work(base, head))
    assert not lines or lines[-1].startswith(
        NO_WORK_PREFIX
    )  # contiguous on contiguous is not even an op


def test_the_harmless_to_is_named_no_work_added(base, tmp_path):
    head = profiled(tmp_path, "head", same_dtype_to=True)
    assert diff_fingerprints(base, head) == [NO_WORK_PREFIX + "+1 aten::to"]


def test_the_moved_copy_keeps_its_one_copy(base, tmp_path):
    head = profiled(tmp_path, "head", merge="contiguous_view")
    assert base["copies"] == head["copies"] and base["allocated_bytes"] == head["allocated_bytes"]
    assert not any(line.startswith("+1 copy") for line in diff_fingerprints(base, head))


@pytest.mark.parametrize(
    "change, work",
    [
        ({"clone_scores": True}, "+1 copies"),
        ({"cast_scores": torch.float64}, "+2 copies"),
        ({"extra_in_place": True}, "+2.0 KiB bytes written in place"),
    ],
)
def test_changes_that_add_work_fail_and_say_what_work(base, tmp_path, change, work):
    head = profiled(tmp_path, "head", **change)
    assert adds_work(base, head) and work in added_work(base, head), added_work(base, head)
    assert not adds_work(head, base)  # the way back only removes work


def test_a_cast_is_a_copy_marked_as_a_dtype_conversion(base, tmp_path):
    head = profiled(tmp_path, "head", cast_scores=torch.float64)
    assert "+2 copy cpu aten::copy_ (dtype conversion) [1x2x16x16] (+6.0 KiB per step)" in (
        diff_fingerprints(base, head)
    )


def test_every_op_record_is_work_or_no_work(base):
    assert sum(base["work_ops"].values()) + sum(base["no_work_ops"].values()) == sum(
        base["cpu_ops"].values()
    )
    assert {"aten::view", "aten::transpose", "aten::expand"} & set(base["no_work_ops"])
    assert {"aten::bmm", "aten::masked_fill_", "aten::_softmax"} <= set(base["work_ops"])


def _op(name, ts, dur, dims=None, tid=1):
    args = {"Input Dims": [dims], "Input type": ["float"]} if dims else {}
    return {"name": name, "ts": ts, "dur": dur, "tid": tid, "args": args}


def test_work_is_read_from_allocations_launches_and_in_place_writes():
    ops = [
        _op("aten::matmul", 0, 10),
        _op("aten::bmm", 1, 5),
        _op("aten::view", 7, 1),
        _op("aten::zero_", 20, 5, [4, 4]),
        _op("aten::fill_", 21, 3, [4, 4]),
        _op("aten::relu", 30, 2),
    ]
    memory = [
        {"ts": 2, "tid": 1, "args": {"Bytes": 64}},
        {"ts": 8, "tid": 1, "args": {"Bytes": -64}},
    ]
    launches = [{"name": "cudaLaunchKernel", "ts": 31, "tid": 1}]
    work = op_work(ops, memory, launches)
    assert work.work_ops == {
        "aten::bmm": 1,
        "aten::fill_": 1,
        "aten::matmul": 1,
        "aten::relu": 1,
        "aten::zero_": 1,
    }
    assert work.no_work_ops == {"aten::view": 1}  # a free is no work
    assert work.written_in_place_bytes == 64  # zero_ -> fill_ written once


COMPUTING = {
    "aten::mm",
    "aten::addmm",
    "aten::bmm",
    "aten::copy_",
    "aten::_softmax",
    "aten::linear",
    "aten::matmul",
    "aten::add",
    "aten::mul",
    "aten::_scaled_dot_product_flash_attention",
}
VIEWS = {
    "aten::view",
    "aten::t",
    "aten::transpose",
    "aten::permute",
    "aten::as_strided",
    "aten::_unsafe_view",
}


@pytest.mark.parametrize(
    "name",
    [
        "h100_bert-small_sdpa-flash",
        "mi300x_bert-small_sdpa-aotriton",
        "h100_timesformer_naive-bmm-softmax",
        "mi250_toy_train",
    ],
)
def test_on_recorded_gpu_traces_views_did_no_work_and_computing_ops_did(name):
    """Traces recorded on A100/H100/MI250/MI300X: the ops that launch kernels are work, views are not.
    (The names here only check the reading; the reading itself uses none.)"""
    index = TraceIndex(load_trace(f"tests/data/traces/{name}.json.gz"))
    summary = index.summarize(index.whole_trace())
    assert summary.kernel_count and COMPUTING & set(summary.work_ops)
    assert not COMPUTING & set(summary.no_work_ops), summary.no_work_ops
    assert VIEWS & set(summary.no_work_ops) and not VIEWS & set(summary.work_ops), summary.work_ops


def test_the_eval_dropout_of_a_recorded_gpu_trace_is_no_work():
    """``aten::dropout`` in eval mode returns its input: on the H100 trace it launches nothing."""
    index = TraceIndex(load_trace("tests/data/traces/h100_bert-small_sdpa-flash.json.gz"))
    summary = index.summarize(index.whole_trace())
    assert summary.no_work_ops.get("aten::dropout") and "aten::dropout" not in summary.work_ops


def _run(fp):
    times = [1.0 + 0.001 * (i % 7) for i in range(40)]
    bench = {
        "name": "t",
        "stats": {"median": 1.003, "data": times},
        "extra_info": {"variant": "mine", "case": "b1h2s16d8-fp32-causal-cpu", "fingerprint": fp},
    }
    return {"benchmarks": [bench]}


def test_fail_on_structure_passes_the_harmless_to_and_fails_the_real_copy(base, tmp_path):
    from perfsuite.gate.compare import compare_runs
    from perfsuite.gate.flow import judge
    from perfsuite.gate.stats import GateSettings

    settings = GateSettings()
    harmless = profiled(tmp_path, "to", same_dtype_to=True)
    passed = judge(
        compare_runs(_run(base), _run(harmless), settings),
        settings,
        "t",
        "m",
        fail_on_structure=True,
    )
    assert (
        passed.exit_code == 0
        and "1 with structural changes that add no work" in passed.verdict_line
    )
    copy = profiled(tmp_path, "copy", clone_scores=True, same_dtype_to=True)
    failed = judge(
        compare_runs(_run(base), _run(copy), settings), settings, "t", "m", fail_on_structure=True
    )
    assert failed.exit_code == 1 and "structure adds work: " in failed.failures[0]
    assert NO_WORK_PREFIX not in failed.failures[0]  # the reason names only the work
    assert NO_WORK_PREFIX + "+1 aten::to" in failed.report_md
