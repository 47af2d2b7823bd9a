"""Every copy of a step counted by kind (``perfsuite.measure.copy_kinds``), from real profiler traces."""

from __future__ import annotations

import pytest
import torch
from torch.profiler import ProfilerActivity, profile, record_function

from perfsuite.attention.cases import parse_case_id
from perfsuite.measure.copy_kinds import COPY_KINDS, copies_by_kind, copy_kind
from perfsuite.trace.events import CopyRecord
from perfsuite.trace.summary import summarize_windows

CASE = parse_case_id("b1h8kv2s64d32-fp32-causal-cpu")


def _step_copies(fn, tmp_path) -> dict[str, dict[str, int]]:
    """``copies_by_kind`` of one profiled call of ``fn`` on the case's query, key and value."""
    torch.manual_seed(0)
    q, k, v = torch.randn(1, 8, 64, 32), torch.randn(1, 2, 64, 32), torch.randn(1, 2, 64, 32)
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        with record_function("perfsuite::forward"):
            fn(q, k, v)
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    import json

    (summary,) = summarize_windows(json.loads(path.read_text()), "perfsuite::forward")
    return copies_by_kind(summary, CASE)


def _attention(q, k, v):
    scores = (q @ k.transpose(-2, -1)).masked_fill(
        torch.ones(64, 64, dtype=torch.bool).triu(1), float("-inf")
    )
    return torch.softmax(scores, -1) @ v


@pytest.mark.parametrize(
    "expand",
    [
        lambda t: t.repeat_interleave(4, dim=1),
        lambda t: t[:, :, None].expand(1, 2, 4, 64, 32).reshape(1, 8, 64, 32),
        lambda t: t.repeat(1, 4, 1, 1),
    ],
    ids=["repeat_interleave", "expand_reshape", "repeat"],
)
def test_a_gqa_expansion_counts_as_two_kv_copies_and_the_masked_fill_as_one_score_copy(
    expand, tmp_path
):
    found = _step_copies(lambda q, k, v: _attention(q, expand(k), expand(v)), tmp_path)
    expanded = 1 * 8 * 64 * 32 * 4  # [B, H, Skv, D] fp32
    assert found["K/V"] == {"count": 2, "bytes": 2 * expanded}
    assert found["score"] == {"count": 1, "bytes": 1 * 8 * 64 * 64 * 4}  # masked_fill's clone
    assert found["cast"]["count"] == 0 and list(found) == list(COPY_KINDS)


def test_a_cast_of_a_block_table_is_a_cast_and_a_mask_copy_is_no_score_copy():
    table = CopyRecord("cpu", "aten::copy_", "aten::copy_", (4, 16), 512, True, ("long int", "int"))
    mask = CopyRecord(
        "cpu", "aten::clone", "aten::clone", CASE.score_shape, 32768, False, ("bool",)
    )
    scores = CopyRecord(
        "cpu", "aten::clone", "aten::clone", CASE.score_shape, 131072, False, ("float",)
    )
    assert [copy_kind(r, CASE) for r in (table, mask, scores)] == ["cast", "other", "score"]


def test_a_python_number_made_a_tensor_is_no_copy_of_the_step(tmp_path):
    """``masked_fill_(mask, float("-inf"))`` casts its fill value from double to float: a 0-dim
    copy in the trace, no data of the step, not counted; an in-place fill copies no scores."""

    def in_place(q, k, v):
        k, v = k.repeat_interleave(4, dim=1), v.repeat_interleave(4, dim=1)
        scores = (q @ k.transpose(-2, -1)).masked_fill_(
            torch.ones(64, 64, dtype=torch.bool).triu(1), float("-inf")
        )
        return torch.softmax(scores, -1) @ v

    found = _step_copies(in_place, tmp_path)
    assert found["cast"] == {"count": 0, "bytes": 0} and found["score"]["count"] == 0
    assert found["K/V"]["count"] == 2 and found["other"]["count"] == 0
