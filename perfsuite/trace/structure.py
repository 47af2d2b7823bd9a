"""Structural fingerprint of a forward: deterministic facts that gate without noise.

ATen ops and device kernels by name with counts, copies by kind and shape, ``Memcpy`` by
kind, bytes allocated, the SDPA backend that ran, and (when given) the score accounting:
score-sized writes labelled ``kind [shape] in op > op`` (``perfsuite.measure.score_accounting``). For one torch build and case these do
not change between runs, so any difference is a real change in what the code does.
"""

from __future__ import annotations

import collections
from typing import Any, Mapping

from perfsuite.units import format_bytes
from perfsuite.trace.summary import WindowSummary


def copy_counts(summary: WindowSummary) -> dict[str, int]:
    """Copies by ``lane kind [shape]`` (``cpu aten::clone [2x8x256x256]``), dtype conversions marked."""
    copies: dict[str, int] = collections.Counter()
    for copy in summary.copies:
        kind = f"{copy.kind} (dtype conversion)" if copy.dtype_conversion else copy.kind
        shape = "x".join(map(str, copy.shape)) if copy.shape else "?"
        copies[f"{copy.lane} {kind} [{shape}]"] += 1
    return dict(copies)


def count_changes(before: dict[str, float], after: dict[str, float]) -> list[tuple[str, float, float]]:
    """``(name, before, after)`` for every name whose count differs, sorted by name."""
    names = sorted(set(before) | set(after))
    return [(n, before.get(n, 0), after.get(n, 0)) for n in names if before.get(n, 0) != after.get(n, 0)]


def fingerprint(summary: WindowSummary, device: str, score_writes: Mapping[str, int] | None = None) -> dict[str, Any]:
    """JSON-ready fingerprint of one profiled forward on ``device``.

    ``score_writes``: its score-sized writes counted by label, ``ScoreAccounting.by_label()``
    (``{"copy [2x8x256x256] in aten::masked_fill > aten::clone > aten::copy_": 1, ...}``).
    """
    copies = copy_counts(summary)
    return {
        "cpu_ops": dict(sorted(summary.cpu_ops.items())),
        "kernels": dict(sorted(summary.kernels.items())),
        "copies": dict(sorted(copies.items())),
        "memcpy": dict(sorted(summary.memcpy_counts.items())),
        "allocated_bytes": summary.allocated_bytes.get(device, 0),
        "sdpa_backends": summary.sdpa_backends,
        **({"score_writes": dict(sorted(score_writes.items()))} if score_writes is not None else {}),
    }




ADDED_WORK_FIELDS = ("copies", "memcpy", "score_writes")  # each counted whole: more of any is more work


def adds_work(base: dict[str, Any], head: dict[str, Any]) -> bool:
    """True when the head's fingerprint does more than the base's: more copies, Memcpy or score
    writes, more ops and kernels together, more bytes allocated, or another SDPA backend (either
    way: a backend change needs a reviewer). A change that only removes work (the copy an in-place
    op saves) is False, so ``--fail-on-structure`` does not fail an optimisation."""
    total = lambda fp, field: sum((fp.get(field) or {}).values())
    if any(total(head, f) > total(base, f) for f in ADDED_WORK_FIELDS if f in base and f in head):
        return True
    if total(head, "cpu_ops") + total(head, "kernels") > total(base, "cpu_ops") + total(base, "kernels"):
        return True
    return (head.get("allocated_bytes", 0) > base.get("allocated_bytes", 0)
            or base.get("sdpa_backends") != head.get("sdpa_backends"))


def diff_fingerprints(base: dict[str, Any], head: dict[str, Any]) -> list[str]:
    """Human lines for every structural change, ``[]`` when identical.

    ``+1 aten::clone``, ``+1 copy cpu aten::clone [2x8x256x256]``, ``allocated +4.0 MiB``,
    ``SDPA backend MATH -> FLASH_ATTENTION``, ``+1 score write copy [2x8x256x256] in aten::masked_fill > ...``.
    Score writes are compared only when both fingerprints have them (older runs do not).
    """
    lines = []
    fields = [("cpu_ops", ""), ("kernels", "kernel "), ("copies", "copy "), ("memcpy", "Memcpy ")]
    if "score_writes" in base and "score_writes" in head:
        fields.append(("score_writes", "score write "))
    for field, label in fields:
        for name, before, after in count_changes(base.get(field, {}), head.get(field, {})):
            lines.append(f"{after - before:+d} {label}{name[:160]}")
    grown = head.get("allocated_bytes", 0) - base.get("allocated_bytes", 0)
    if grown:
        sign = "+" if grown > 0 else "-"
        lines.append(f"allocated {sign}{format_bytes(abs(grown))} per forward")
    if base.get("sdpa_backends") != head.get("sdpa_backends"):
        lines.append(f"SDPA backend {base.get('sdpa_backends')} -> {head.get('sdpa_backends')}")
    return lines
