"""Structural fingerprint of a forward: deterministic facts that gate without noise.

ATen ops and device kernels by name with counts, copies by kind and shape (with the bytes they
write, ``copy_bytes``: a ``.contiguous()`` of a KV cache shows as ``+2 copy cpu aten::clone
[4x2x64x8] (+16.0 KiB per step)``), gathers by op and result shape (with their bytes,
``gather_bytes``: a paged cache made dense by ``cache[block_table]`` shows as ``+2 gather cpu
aten::index [4x4x16x2x8] (+16.0 KiB per step)``), ``Memcpy`` by kind, bytes allocated, the SDPA backend that ran, and (when given) the score accounting:
score-sized writes labelled ``kind [shape] in op > op`` (``perfsuite.measure.score_accounting``). For one torch build and case these do
not change between runs, so any difference is a real change in what the code does.
"""

from __future__ import annotations

import collections
import math
import re
from typing import Any
from collections.abc import Mapping

from perfsuite.units import format_bytes
from perfsuite.trace.summary import CopyRecord, WindowSummary


def copy_counts(summary: WindowSummary) -> dict[str, int]:
    """Copies by ``lane kind [shape]`` (``cpu aten::clone [2x8x256x256]``), dtype conversions marked."""
    copies: dict[str, int] = collections.Counter()
    for copy in summary.copies:
        kind = f"{copy.kind} (dtype conversion)" if copy.dtype_conversion else copy.kind
        shape = "x".join(map(str, copy.shape)) if copy.shape else "?"
        copies[f"{copy.lane} {kind} [{shape}]"] += 1
    return dict(copies)


def copy_bytes(summary: WindowSummary) -> dict[str, int]:
    """Bytes written by the copies of each ``copy_counts`` key, per step (a copy whose size the
    trace does not record counts 0): what a copy of a KV cache or a score matrix costs."""
    written: dict[str, int] = collections.Counter()
    for copy in summary.copies:
        kind = f"{copy.kind} (dtype conversion)" if copy.dtype_conversion else copy.kind
        shape = "x".join(map(str, copy.shape)) if copy.shape else "?"
        written[f"{copy.lane} {kind} [{shape}]"] += copy.size_bytes or 0
    return dict(written)


def _record_key(record: CopyRecord) -> str:
    shape = "x".join(map(str, record.shape)) if record.shape else "?"
    return f"{record.lane} {record.kind} [{shape}]"


def gather_counts(summary: WindowSummary) -> dict[str, int]:
    """Gathers by ``lane kind [result shape]`` (``cpu aten::index [2x2x4x2x8]``,
    ``device gather kernel [8x2x8]``): ops that wrote a new tensor from many places of others
    (``perfsuite.trace.events.CPU_GATHER_OPS``, ``kernel_families.is_gather_kernel``)."""
    return dict(collections.Counter(_record_key(g) for g in summary.gathers))


def gather_bytes(summary: WindowSummary) -> dict[str, int]:
    """Bytes written by the gathers of each ``gather_counts`` key, per step (0 when not recorded):
    what a dense copy of a paged KV cache costs."""
    written: dict[str, int] = collections.Counter()
    for record in summary.gathers:
        written[_record_key(record)] += record.size_bytes or 0
    return dict(written)


def count_changes(
    before: dict[str, float], after: dict[str, float]
) -> list[tuple[str, float, float]]:
    """``(name, before, after)`` for every name whose count differs, sorted by name."""
    names = sorted(set(before) | set(after))
    return [
        (n, before.get(n, 0), after.get(n, 0)) for n in names if before.get(n, 0) != after.get(n, 0)
    ]


def fingerprint(
    summary: WindowSummary,
    device: str,
    score_writes: Mapping[str, int] | None = None,
    saved_for_backward_bytes: int | None = None,
) -> dict[str, Any]:
    """JSON-ready fingerprint of one profiled step on ``device``.

    ``score_writes``: its score-sized writes counted by label, ``ScoreAccounting.by_label()``
    (``{"copy [2x8x256x256] in aten::masked_fill > aten::clone > aten::copy_": 1, ...}``);
    ``saved_for_backward_bytes``: what one forward saved for backward (``SavedForBackward.bytes``).
    ``work_ops``/``no_work_ops``/``written_in_place_bytes``: what the ops did (``perfsuite.trace.work``).
    """
    copies = copy_counts(summary)
    return {
        "cpu_ops": dict(sorted(summary.cpu_ops.items())),
        "work_ops": dict(sorted(summary.work_ops.items())),
        "no_work_ops": dict(sorted(summary.no_work_ops.items())),
        "kernels": dict(sorted(summary.kernels.items())),
        "copies": dict(sorted(copies.items())),
        "copy_bytes": dict(sorted(copy_bytes(summary).items())),
        "gathers": dict(sorted(gather_counts(summary).items())),
        "gather_bytes": dict(sorted(gather_bytes(summary).items())),
        "memcpy": dict(sorted(summary.memcpy_counts.items())),
        "allocated_bytes": summary.allocated_bytes.get(device, 0),
        "written_in_place_bytes": summary.written_in_place_bytes,
        "sdpa_backends": summary.sdpa_backends,
        **(
            {"score_writes": dict(sorted(score_writes.items()))} if score_writes is not None else {}
        ),
        **(
            {"saved_for_backward_bytes": saved_for_backward_bytes}
            if saved_for_backward_bytes is not None
            else {}
        ),
    }


# Each counted whole, compared when both fingerprints have it: more of any is more work.
# "kernels" are the device lane's (a CPU run has none); "copies" hold casts, marked (dtype conversion).
COUNTED_WORK = {
    "copies": "copies",
    "gathers": "gathers",
    "memcpy": "Memcpy",
    "kernels": "device kernels",
    "score_writes": "score writes",
}
WORK_BYTES = {
    "allocated_bytes": "bytes allocated",
    "written_in_place_bytes": "bytes written in place",
    "saved_for_backward_bytes": "bytes saved for backward",
}
NO_WORK_PREFIX = "no work added: "


def _total(fp: dict[str, Any], field: str) -> int:
    return sum((fp.get(field) or {}).values())


def _gathered_growth(base: dict[str, Any], head: dict[str, Any]) -> int:
    """Bytes the head's gathers write per step beyond the base's (0 when either has no record):
    a gather of the whole pool where the base gathered one sequence's pages is more work."""
    if "gather_bytes" not in base or "gather_bytes" not in head:
        return 0
    return _total(head, "gather_bytes") - _total(base, "gather_bytes")


def _knows_work(fp: dict[str, Any]) -> bool:
    return "no_work_ops" in fp


def added_work(base: dict[str, Any], head: dict[str, Any]) -> list[str]:
    """What the head does that the base does not, one phrase per kind of work; [] when it adds none.

    More copies or casts (any tensor), gathers (``cat``, ``index``, ...: a paged cache made dense),
    judged on their net bytes where both fingerprints record the bytes of every one (32 gathers
    replaced by 2 of the same bytes add none; more bytes copied or gathered do),
    Memcpy, device kernels or score-sized writes (each counted
    whole, so a copy that only moved adds none), more bytes allocated, written in place or saved
    for backward, or another SDPA backend (either way: a backend change needs a reviewer).
    Ops that did no work (``perfsuite.trace.work``) never count. Fingerprints recorded before
    ops were split by work compare their op counts instead (``+1 aten::add`` is more work there).
    """
    found = []
    for field, label in COUNTED_WORK.items():
        if field == "copies" and _bytes_known(field, base, head):
            grown = _total(head, "copy_bytes") - _total(base, "copy_bytes")
            more = _total(head, field) - _total(base, field)
            if grown > 0:  # judged on the net bytes: a copy moved or split into two is no more work
                found.append(f"{more:+d} {label}" if more > 0 else f"+{format_bytes(grown)} copied")
            continue
        if field == "gathers" and _bytes_known(field, base, head):
            more = _total(head, field) - _total(base, field)
            if more > 0 and _gathered_growth(base, head) > 0:  # more gathers that gather more
                found.append(f"{more:+d} {label}")
            continue  # the net bytes gathered: below
        if field in base and field in head and _total(head, field) > _total(base, field):
            found.append(f"{_total(head, field) - _total(base, field):+d} {label}")
    for field, label in WORK_BYTES.items():
        grown = (head.get(field) or 0) - (base.get(field) or 0)
        if field in base and field in head and grown > 0:
            found.append(f"+{format_bytes(grown)} {label}")
    grown = _gathered_growth(base, head)
    if grown > 0:
        found.append(f"+{format_bytes(grown)} gathered")
    if not (_knows_work(base) and _knows_work(head)) and _total(head, "cpu_ops") > _total(
        base, "cpu_ops"
    ):
        found.append(
            f"{_total(head, 'cpu_ops') - _total(base, 'cpu_ops'):+d} ops (a fingerprint without work records)"
        )
    if base.get("sdpa_backends") != head.get("sdpa_backends"):
        found.append("another SDPA backend")
    return found


def adds_work(base: dict[str, Any], head: dict[str, Any]) -> bool:
    """True when the head's fingerprint does more than the base's (``added_work``). A change that
    only removes work (the copy an in-place op saves) or adds ops that do none (a same-dtype
    ``.to``, a view) is False, so ``--fail-on-structure`` fails neither."""
    return bool(added_work(base, head))


_SHAPED = re.compile(r"^(?P<kind>.*?) \[(?P<shape>\d+(?:x\d+)*)\](?P<rest>.*)$")


def _elements(shape: str) -> int:
    return math.prod(int(n) for n in shape.split("x"))


def _score_write_lines(changes: list[tuple[str, int, int]]) -> tuple[list[str], list[str]]:
    """Score-write count changes as lines, and the lines of writes that only changed their view.

    A write of one kind and shape that left one op stack for another as often as it came
    (``computed [2x8x256x256] in A`` -1, ``... in B`` +1) is one line, ``score write computed
    [2x8x256x256] moved: A -> B``. A write of one kind and op stack whose shape changed to another
    of as many elements as often (``[8x4x4x2048]`` -1, ``[8x16x1x2048]`` +1: the same bytes viewed
    another way, as grouped-query heads are) is one line of the second list, ``score write copy
    reshaped [8x4x4x2048] -> [8x16x1x2048] in A``: no work changed, so it is listed after the causes."""
    lines, moved, reshaped = [], set(), []
    for gone, before, after in changes:
        if after - before >= 0 or gone in moved:
            continue
        what, _, source = gone.partition(" in ")
        for came, b2, a2 in changes:
            if came not in moved and a2 - b2 == before - after and came.startswith(what + " in "):
                lines.append(f"score write {what} moved: {source} -> {came.partition(' in ')[2]}")
                moved |= {gone, came}
                break
        if gone in moved or not (old := _SHAPED.match(gone)):
            continue
        for came, b2, a2 in changes:
            new = _SHAPED.match(came)
            if (
                came not in moved
                and new
                and a2 - b2 == before - after
                and (new["kind"], new["rest"]) == (old["kind"], old["rest"])
                and new["shape"] != old["shape"]
                and _elements(new["shape"]) == _elements(old["shape"])
            ):
                reshaped.append(
                    f"score write {old['kind']} reshaped [{old['shape']}] -> [{new['shape']}]"
                    f"{old['rest'][:160]}"
                )
                moved |= {gone, came}
                break
    return [
        f"{after - before:+d} score write {name[:160]}"
        for name, before, after in changes
        if name not in moved
    ] + lines, reshaped


_BYTES_FIELD = {"copies": "copy_bytes", "gathers": "gather_bytes"}


def _bytes_known(field: str, base: dict[str, Any], head: dict[str, Any]) -> bool:
    """Whether both fingerprints record the bytes of every copy or gather (``field``) they hold."""
    sizes = _BYTES_FIELD.get(field)
    if sizes is None or field not in base or field not in head:
        return False
    return all(
        sizes in fp and all(fp[sizes].get(name, 0) > 0 for name, n in fp[field].items() if n)
        for fp in (base, head)
    )


def _net_line(
    field: str, label: str, changes: list[tuple[str, int, int]], base: dict, head: dict
) -> str | None:
    """One line for copies or gathers replaced by others of the same bytes (some went, some came):
    ``gather 8.0 MiB -> 8.0 MiB, 32 -> 2 calls (cpu aten::index [..]: 32 -> 0; ...)``; None when
    the bytes changed, or nothing went or came, or the bytes are not all recorded."""
    if not _bytes_known(field, base, head):
        return None
    if not any(a > b for _, b, a in changes) or not any(a < b for _, b, a in changes):
        return None
    sizes = _BYTES_FIELD[field]
    before_bytes = sum(base[sizes].get(name, 0) for name, _, _ in changes)
    after_bytes = sum(head[sizes].get(name, 0) for name, _, _ in changes)
    if before_bytes != after_bytes:
        return None
    calls = f"{sum(b for _, b, _ in changes):g} -> {sum(a for _, _, a in changes):g} calls"
    which = "; ".join(f"{name[:120]}: {b:g} -> {a:g}" for name, b, a in changes)
    return f"{label}{format_bytes(before_bytes)} -> {format_bytes(after_bytes)}, {calls} ({which})"


def _bytes_of(field: str, name: str, base: dict[str, Any], head: dict[str, Any]) -> str:
    """`` (+16.0 KiB per step)`` for a copy or gather line when both fingerprints record its bytes."""
    sizes = _BYTES_FIELD.get(field)
    if sizes is None or sizes not in base or sizes not in head:
        return ""
    grown = head[sizes].get(name, 0) - base[sizes].get(name, 0)
    if not grown:
        return ""
    return f" ({'+' if grown > 0 else '-'}{format_bytes(abs(grown))} per step)"


_ADDED = re.compile(
    r"^(\+\d|(allocated|gathered|written in place|saved for backward) \+|SDPA backend )"
)


def added_lines(lines: list[str]) -> list[str]:
    """Of ``diff_fingerprints``' lines, those that say what the head added: ``+N ...`` counts, grown
    bytes (``allocated +4.0 MiB per step``) and a changed SDPA backend. Removals (``-1 ...``), writes
    that only moved or were reshaped (no work changed) and the ``no work added:`` line are left out."""
    return [line for line in lines if _ADDED.match(line)]


def diff_fingerprints(base: dict[str, Any], head: dict[str, Any]) -> list[str]:
    """Human lines for every structural change, ``[]`` when identical.

    ``+1 aten::clone``, ``+1 copy cpu aten::clone [2x8x256x256]``,
    ``+1 gather cpu aten::index [2x2x4x2x8] (+1.0 KiB per step)``, ``allocated +4.0 MiB``,
    ``SDPA backend MATH -> FLASH_ATTENTION``, ``+1 score write copy [2x8x256x256] in aten::masked_fill > ...``.
    Ops that did no work are on one last line, ``no work added: +1 aten::to, -16 aten::_unsafe_view``.
    Score writes are compared only when both fingerprints have them (older runs do not), and ops
    by work only when both split them.
    """
    lines, reshaped = [], []
    split = _knows_work(base) and _knows_work(head)
    fields = [
        ("work_ops" if split else "cpu_ops", ""),
        ("kernels", "kernel "),
        ("copies", "copy "),
        ("gathers", "gather "),
        ("memcpy", "Memcpy "),
    ]
    if "score_writes" in base and "score_writes" in head:
        fields.append(("score_writes", "score write "))
    for field, label in fields:
        changes = count_changes(base.get(field, {}), head.get(field, {}))
        if field == "score_writes":
            changed, reshaped = _score_write_lines(changes)
            lines += changed
            continue
        net = _net_line(field, label, changes, base, head)
        if net is not None:  # the same bytes in other calls: one line, no work added
            lines.append(net)
            continue
        for name, before, after in changes:
            lines.append(
                f"{after - before:+d} {label}{name[:160]}{_bytes_of(field, name, base, head)}"
            )
    grown = head.get("allocated_bytes", 0) - base.get("allocated_bytes", 0)
    if grown:
        sign = "+" if grown > 0 else "-"
        lines.append(f"allocated {sign}{format_bytes(abs(grown))} per step")
    grown = _gathered_growth(base, head)
    if grown:
        lines.append(f"gathered {'+' if grown > 0 else '-'}{format_bytes(abs(grown))} per step")
    for field, label in (
        ("written_in_place_bytes", "written in place"),
        ("saved_for_backward_bytes", "saved for backward"),
    ):
        grown = (head.get(field) or 0) - (base.get(field) or 0)
        if field in base and field in head and grown:
            lines.append(f"{label} {'+' if grown > 0 else '-'}{format_bytes(abs(grown))}")
    if base.get("sdpa_backends") != head.get("sdpa_backends"):
        lines.append(f"SDPA backend {base.get('sdpa_backends')} -> {head.get('sdpa_backends')}")
    lines += reshaped  # the same writes viewed another way: after what changed the work
    if split:
        idle = count_changes(base["no_work_ops"], head["no_work_ops"])
        if idle:
            lines.append(
                NO_WORK_PREFIX
                + ", ".join(f"{after - before:+d} {name}" for name, before, after in idle)
            )
    return lines
