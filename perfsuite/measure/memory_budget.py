"""Will a case fit? The memory a variant's case needs, estimated before anything is allocated,
against what the host or the device has free, so a case that cannot fit is a skip with both
figures instead of an allocation that brings the machine down.
"""

from __future__ import annotations

from pathlib import Path

import torch

from perfsuite.attention.cases import AttentionCase
from perfsuite.attention.reference import REFERENCE_BLOCK_BYTES
from perfsuite.units import format_bytes
from perfsuite.variants import Variant

# Score matrices an unfused forward holds at once: the scores and the softmax weights (plus its
# declared copies, such as naive's masked clone).
UNFUSED_SCORE_MATRICES = 2


def needed_bytes(variant: Variant, case: AttentionCase) -> tuple[int, str]:
    """Bytes one forward of ``variant`` on ``case`` needs, and what they are, as a phrase.

    Inputs (query, key, value, their pristine copies, the output and backward's seed), the
    float64 reference's score blocks (``REFERENCE_BLOCK_BYTES``) and, for a variant that
    materializes scores (``saves_scores_for_backward=True``), its score matrices.
    """
    elem = case.element_size_bytes
    q = case.batch * case.num_heads * case.seq_len_q * case.head_dim * elem
    kv = case.batch * case.num_kv_heads * case.seq_len_kv * case.head_dim * elem
    inputs = 2 * (q + 2 * kv) + 2 * q
    scores = 0
    if variant.saves_scores_for_backward:
        scores = (
            UNFUSED_SCORE_MATRICES + variant.expected_score_copies(case.hides_keys)
        ) * case.score_bytes
    what = f"{format_bytes(inputs)} of inputs and copies, {format_bytes(REFERENCE_BLOCK_BYTES)} of reference blocks"
    if scores:
        what += (
            f", {format_bytes(scores)} of score matrices ({format_bytes(case.score_bytes)} each)"
        )
    return inputs + REFERENCE_BLOCK_BYTES + scores, what


def available_bytes(device: str) -> tuple[int, str] | None:
    """Free memory on ``device`` and where the figure comes from, or None when it cannot be read."""
    if device == "cuda":
        free, _ = torch.cuda.mem_get_info()
        return free, "free CUDA memory (torch.cuda.mem_get_info)"
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024, "MemAvailable in /proc/meminfo"
    except OSError:
        pass
    return None


def does_not_fit_reason(variant: Variant, case: AttentionCase) -> str | None:
    """The skip reason when ``variant`` on ``case`` would need more memory than ``case.device`` has free, else None."""
    found = available_bytes(case.device)
    if found is None:
        return None
    free, source = found
    need, what = needed_bytes(variant, case)
    if need <= free:
        return None
    return (
        f"{variant.name} on {case.id} needs about {format_bytes(need)} ({what}) but {case.device} has "
        f"{format_bytes(free)} free ({source}); not allocated. Choose smaller shapes with --perfsuite-shapes"
    )
