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
    assert "-1 score write computed [1x2x16x16] in aten::mul_" in lines
    assert diff_fingerprints(head, head) == []


def test_older_fingerprints_without_score_writes_compare_as_before(tmp_path):
    case = AttentionCase(1, 2, 16, 16, 8, "fp32", "cpu", "causal")
    naive = gather_evidence(get_variant("naive"), case, 0, tmp_path)
    old, new = (
        fingerprint(naive.steps[0], "cpu"),
        fingerprint(naive.steps[0], "cpu", naive.score_accounting[0].by_label()),
    )
    assert "score_writes" not in old and diff_fingerprints(old, new) == []
