"""A case that would not fit in free memory is skipped up front, with the estimate and the limit."""

import pytest

from perfsuite.attention.cases import AttentionCase
from perfsuite.measure import memory_budget
from perfsuite.measure.evidence import prepare_case
from perfsuite.measure.refusals import VariantUnsupported
from perfsuite.variants import get_variant

HUGE = AttentionCase(1, 16, 16384, 16384, 64, "fp32", "cpu", "causal")  # 16 GiB per score matrix


def test_a_huge_naive_case_is_skipped_with_the_estimate_and_the_limit(monkeypatch):
    """Before: a 1x16x16384x64 naive case went past 18 GiB with no warning and lost the baseline."""
    monkeypatch.setattr(
        memory_budget,
        "available_bytes",
        lambda device: (8 * 2**30, "MemAvailable in /proc/meminfo"),
    )
    with pytest.raises(VariantUnsupported) as info:
        prepare_case(get_variant("naive"), HUGE, 0)
    message = str(info.value)
    assert "needs about 48.6 GiB" in message and "16.0 GiB each" in message
    assert "cpu has 8.0 GiB free (MemAvailable in /proc/meminfo); not allocated" in message


def test_a_fused_variant_is_not_charged_for_score_matrices():
    need, what = memory_budget.needed_bytes(get_variant("sdpa_flash"), HUGE)
    assert "score matrices" not in what and need < 2**30


def test_the_host_figure_is_read_from_proc_meminfo():
    free, source = memory_budget.available_bytes("cpu")
    assert free > 0 and source == "MemAvailable in /proc/meminfo"
