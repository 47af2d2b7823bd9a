"""Findings shared by the history dashboard and the single-run page: the post's findings as checks, and the
ratio of a runner-up to the fastest implementation with its interval."""

from __future__ import annotations

from typing import Iterable

from perfsuite.dashboard.model import Check

# The post's findings: the out-of-place masked_fill copies the score matrix, masked_fill_ does not;
# a pinned SDPA backend runs its own kernel (torch's SDPBackend names, as the structure records them).
SCORE_COPIES = {"naive": "copies the score matrix", "naive_inplace": "no score copy"}
PINNED = {"sdpa_math": "MATH", "sdpa_flash": "FLASH_ATTENTION", "sdpa_efficient": "EFFICIENT_ATTENTION",
          "sdpa_cudnn": "CUDNN_ATTENTION"}




def checks_from(newest: Iterable[tuple[str, str, str, float | None, dict | None]]) -> list[Check]:
    """The post's findings on the newest point of each (variant, testbed, torch): ``newest`` yields
    (variant, testbed, torch, score copies per forward, structural fingerprint)."""
    found = []
    for variant, testbed, torch, copies, structure in newest:
        if variant in SCORE_COPIES and copies is not None:
            expected = ">= 1 score copy" if variant == "naive" else "0 score copies"
            ok = copies >= 1 if variant == "naive" else copies == 0
            found.append(Check(f"{variant} {SCORE_COPIES[variant]}", variant, testbed, torch, expected,
                               f"{copies:g} score copies per forward", ok))
        if variant in PINNED and structure is not None:
            ran = structure.get("sdpa_backends") or []
            ok = any(b.split(" ")[0] == PINNED[variant] for b in ran)
            found.append(Check(f"pinned {PINNED[variant]} ran its kernel", variant, testbed, torch, PINNED[variant],
                               ", ".join(ran) or "no SDPA backend op", ok))
    return found




def fastest_ratio(fast: tuple[float, float, float], other: tuple[float, float, float]) -> tuple[float, float, float] | None:
    """(ratio, low, high) of ``other``'s median to ``fast``'s, each given as (median, interval low, interval high)
    in seconds; the interval is the ratio of the intervals' far ends (conservative). None when a bound is not positive."""
    (m0, lo0, hi0), (m1, lo1, hi1) = fast, other
    if min(m0, lo0, hi0, lo1) <= 0:
        return None
    return m1 / m0, lo1 / hi0, hi1 / lo0
