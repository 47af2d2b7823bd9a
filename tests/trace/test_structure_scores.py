"""The fingerprint carries the score accounting: score-sized writes, copies, casts and mask expansions."""

from perfsuite.attention.cases import AttentionCase
from perfsuite.trace.structure import diff_fingerprints, fingerprint
from perfsuite.measure.evidence import gather_evidence
from perfsuite.variants import get_variant


def test_the_fingerprint_diff_names_the_score_copy_and_where_it_happens(tmp_path):
    case = AttentionCase(1, 2, 16, 16, 8, "fp32", "cpu", "causal")
    inplace = gather_evidence(get_variant("naive_inplace"), case, 0, tmp_path)
    naive = gather_evidence(get_variant("naive"), case, 0, tmp_path)
    base = fingerprint(inplace.steps[0], "cpu", inplace.score_accounting[0].by_label())
    head = fingerprint(naive.steps[0], "cpu", naive.score_accounting[0].by_label())
    lines = diff_fingerprints(base, head)
    assert (
        "+1 score write copy [1x2x16x16] in aten::masked_fill > aten::clone > aten::copy_" in lines
    )
    assert "score write computed [1x2x16x16] moved: aten::mul_ -> aten::mul" in lines
    assert diff_fingerprints(head, head) == []


def test_older_fingerprints_without_score_writes_compare_as_before(tmp_path):
    case = AttentionCase(1, 2, 16, 16, 8, "fp32", "cpu", "causal")
    naive = gather_evidence(get_variant("naive"), case, 0, tmp_path)
    old, new = (
        fingerprint(naive.steps[0], "cpu"),
        fingerprint(naive.steps[0], "cpu", naive.score_accounting[0].by_label()),
    )
    assert "score_writes" not in old and diff_fingerprints(old, new) == []


def test_a_score_write_that_only_moved_to_another_op_stack_is_one_moved_line():
    """Losing ``masked_fill_``: the masking write now happens inside ``aten::masked_fill``, after a clone."""
    shape = "[2x8x256x256]"
    base = {"score_writes": {f"computed {shape} in aten::masked_fill_": 1}}
    head = {
        "score_writes": {
            f"computed {shape} in aten::masked_fill > aten::masked_fill_": 1,
            f"copy {shape} in aten::masked_fill > aten::clone > aten::copy_": 1,
        }
    }
    assert diff_fingerprints(base, head) == [
        f"+1 score write copy {shape} in aten::masked_fill > aten::clone > aten::copy_",
        f"score write computed {shape} moved: aten::masked_fill_ -> aten::masked_fill > aten::masked_fill_",
    ]
    # a write that went away without a counterpart stays a -1
    assert diff_fingerprints(head, {"score_writes": {}})[0].startswith("-1 score write computed")


def test_score_writes_that_only_reshaped_are_one_line_after_the_cause():
    """Grouped-query heads viewed another way (``[8x4x4x2048]`` -> ``[8x16x1x2048]``, as many elements): one
    ``reshaped`` line listed after the change that added work, not a +1/-1 pair before it."""
    base = {
        "cpu_ops": {"aten::bmm": 2},
        "copies": {},
        "score_writes": {
            "computed [8x4x4x2048] in aten::bmm": 1,
            "copy [8x4x4x2048] in aten::clone": 1,
        },
    }
    head = {
        "cpu_ops": {"aten::bmm": 2},
        "copies": {"cpu aten::clone [8x16x1x2048]": 1},
        "score_writes": {
            "computed [8x16x1x2048] in aten::bmm": 1,
            "copy [8x16x1x2048] in aten::clone": 2,
        },
    }
    assert diff_fingerprints(base, head) == [
        "+1 copy cpu aten::clone [8x16x1x2048]",
        "+2 score write copy [8x16x1x2048] in aten::clone",  # not as often: not only a view
        "-1 score write copy [8x4x4x2048] in aten::clone",
        "score write computed reshaped [8x4x4x2048] -> [8x16x1x2048] in aten::bmm",
    ]


def test_the_adds_work_reason_lists_only_what_the_head_added():
    """A write that only reshaped or moved, or one the head removed, is in the diff but not in
    ``structure adds work:`` (the trial's regress gate listed the base's grouped layout there)."""
    from perfsuite.gate.compare import BenchmarkComparison
    from perfsuite.gate.flow import failure_reason

    base = {
        "copies": {},
        "score_writes": {
            "computed [2x2x2048x512] in aten::mul_": 1,
            "computed [8x4x4x2048] in aten::masked_fill_": 1,
            "copy [4x4] in aten::clone": 1,
        },
    }
    head = {
        "copies": {"cpu aten::clone [2x8x512x512]": 1},
        "score_writes": {
            "computed [2x8x512x512] in aten::mul_": 1,
            "computed [8x4x4x2048] in aten::masked_fill > aten::masked_fill_": 1,
        },
    }
    lines = diff_fingerprints(base, head)
    assert any(" reshaped " in line for line in lines) and any(" moved: " in line for line in lines)
    reason = failure_reason(BenchmarkComparison("k", 1.0, 1.0, None, "same", lines, "", True), True)
    assert reason == (
        "structure adds work: +1 copy cpu aten::clone [2x8x512x512] "
        f"({len(lines) - 1} other structural lines, adding nothing: the table's structure cell, all of "
        "them in `perfsuite ab --json`)"
    )
