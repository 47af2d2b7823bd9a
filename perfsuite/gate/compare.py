"""Compare two saved runs of the suite (pytest-benchmark JSON): timing verdicts with confidence
intervals, structural differences, and refusals that keep baselines honest.

Benchmarks are matched by ``variant/case-id`` from their ``extra_info`` (never by test node
id), so a case with another dtype or shape is another benchmark. Runs from different device
names or torch versions are refused unless forced. A benchmark timed under contention in either
run (``extra_info['contention']``, ``perfsuite.measure.contention``), or whose reference kernel
shows the machine ran at another speed in the two runs (``perfsuite.measure.speed_reference``), gets
the verdict ``inconclusive: contended`` instead of slower/faster: its timings say more about the
machine than about the code. A benchmark timed on different clocks in the two runs
(``extra_info['clock']``: graph replay, blocked events, kernel time, host) is ``inconclusive``.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any

from perfsuite.attention.modes import Mode
from perfsuite.errors import BaselineError, IncomparableRuns
from perfsuite.trace.structure import adds_work, diff_fingerprints
from perfsuite.measure.contention import brief_reason
from perfsuite.measure.machine import machine_differences
from perfsuite.measure.speed_reference import SPEED_CHANGED, speed_change
from perfsuite.gate.stats import (
    CONTENDED_VERDICT,
    GateSettings,
    RatioEstimate,
    Verdict,
    below_min_effect,
    unpaired_ratio,
    verdict,
)
from perfsuite.storage import EXTRA_INFO_SCHEMA_VERSION, check_schema_version, read_json


@dataclasses.dataclass(frozen=True)
class BenchmarkComparison:
    """One benchmark's outcome: ``verdict`` from the timings, ``structure`` lines from fingerprints."""

    key: str
    base_median_s: float | None
    head_median_s: float | None
    estimate: RatioEstimate | None
    verdict: str
    structure: list[str]
    note: str = ""
    structure_adds_work: bool = (
        False  # trace.structure.adds_work: the change that --fail-on-structure fails
    )
    speed_changed: bool = (
        False  # contended only because the machine's speed differed (measure.speed_reference)
    )


def load_benchmark_file(path: str | Path) -> dict[str, Any]:
    """Read a pytest-benchmark JSON file; ``BaselineError`` naming it when corrupt or truncated."""
    path = Path(path)
    data = read_json(path, BaselineError, "baseline file (it is not skipped in favour of another)")
    if not isinstance(data, dict) or not isinstance(data.get("benchmarks"), list):
        raise BaselineError(f"{path}: not a pytest-benchmark file (no 'benchmarks' list)")
    return data


@dataclasses.dataclass(frozen=True)
class BenchmarkKey:
    """One benchmark of a run: a variant on a case in a mode; the one key runs are matched by.

    Written ``variant/case`` for the forward and ``variant/case/mode`` otherwise (``str(key)``),
    the form reports, coverage notes and A/B rows show.
    """

    variant: str
    case_id: str
    mode: str = Mode.FORWARD

    def __str__(self) -> str:
        return f"{self.variant}/{self.case_id}" + (
            "" if self.mode == Mode.FORWARD else f"/{self.mode}"
        )


def benchmark_key(bench: dict[str, Any]) -> str:
    """``str(BenchmarkKey)`` of a saved pytest-benchmark entry (older runs have no mode: the forward);
    its test name when it has no perfsuite ``extra_info``."""
    info = bench.get("extra_info") or {}
    if "variant" not in info or "case" not in info:
        return bench.get("name", "?")
    return str(BenchmarkKey(info["variant"], info["case"], info.get("mode", Mode.FORWARD)))


def check_compatible(
    base: dict[str, Any], head: dict[str, Any], base_name: str, head_name: str, force: bool
) -> list[str]:
    """Differences in the fields of ``machine.MUST_MATCH``; ``IncomparableRuns`` unless ``force``."""
    ours = (head.get("machine_info") or {}).get("perfsuite", {})
    theirs = (base.get("machine_info") or {}).get("perfsuite", {})
    problems = machine_differences(theirs, ours, base_name, head_name)
    if problems and not force:
        raise IncomparableRuns(
            "refusing to compare runs from different hardware or software: "
            + "; ".join(problems)
            + " (use --force to compare anyway)"
        )
    return problems


# What a comparison reads from each benchmark's extra_info (suite/record.py writes them).
COMPARED_FIELDS = ("variant", "case", "fingerprint")
_FINGERPRINT_COUNTS = ("cpu_ops", "kernels")


def missing_fields(bench: dict[str, Any]) -> list[str]:
    """The ``COMPARED_FIELDS`` a benchmark's ``extra_info`` lacks (all of them when it has none)."""
    info = bench.get("extra_info")
    return [f for f in COMPARED_FIELDS if not isinstance(info, dict) or f not in info]


def fingerprint_problem(found: Any) -> str | None:
    """Why ``found`` is not a fingerprint this perfsuite reads (``trace.structure.fingerprint``), or None."""
    if not isinstance(found, dict):
        return f"a {type(found).__name__}, not a mapping"
    present = [field for field in _FINGERPRINT_COUNTS if field in found]
    if not present:
        return f"it has neither {' nor '.join(map(repr, _FINGERPRINT_COUNTS))}"
    for field in present:
        counts = found[field]
        if not isinstance(counts, dict) or not all(isinstance(n, int) for n in counts.values()):
            return f"its {field!r} is not a mapping of names to counts"
    return None


def _structure(base: dict[str, Any], head: dict[str, Any]) -> tuple[list[str], bool]:
    """Structure lines and whether the head adds work; an unreadable fingerprint is 'not compared', never a FAIL."""
    prints = (
        (base.get("extra_info") or {}).get("fingerprint"),
        (head.get("extra_info") or {}).get("fingerprint"),
    )
    problems = [
        f"{side} {problem}"
        for side, fp in zip(("base", "head"), prints)
        if (problem := fingerprint_problem(fp))
    ]
    if problems:
        return [f"not compared: the fingerprint of the {'; '.join(problems)}"], False
    return diff_fingerprints(*prints), adds_work(*prints)


def _compare_one(
    key: str, base: dict[str, Any] | None, head: dict[str, Any] | None, settings: GateSettings
) -> BenchmarkComparison:
    if base is None or head is None:
        side, present = ("base", base) if head is None else ("head", head)
        info = present.get("extra_info") if isinstance(present, dict) else None
        unkeyed = [f for f in ("variant", "case") if not isinstance(info, dict) or f not in info]
        why = (
            f" (its extra_info lacks {', '.join(unkeyed)}: it is keyed by its test name, which "
            "matches no benchmark of the other run)"
            if unkeyed
            else ""
        )
        return BenchmarkComparison(
            key, None, None, None, Verdict.MISSING, [], f"only in the {side} run{why}"
        )
    medians = (base["stats"]["median"], head["stats"]["median"])
    lacking = [
        f"the {side} run lacks extra_info {', '.join(fields)}"
        for side, bench in (("base", base), ("head", head))
        if (fields := missing_fields(bench))
    ]
    if lacking:
        return BenchmarkComparison(
            key, *medians, None, "inconclusive", [], "; ".join(lacking) + " (not judged)"
        )
    structure, more = _structure(base, head)
    clocks = [(b.get("extra_info") or {}).get("clock") for b in (base, head)]
    if None not in clocks and clocks[0] != clocks[1]:
        return BenchmarkComparison(
            key,
            *medians,
            None,
            Verdict.INCONCLUSIVE,
            structure,
            f"timed on different clocks (base {clocks[0]}, head {clocks[1]}): not comparable",
            more,
        )
    data_base, data_head = base["stats"].get("data"), head["stats"].get("data")
    if not data_base or not data_head:
        return BenchmarkComparison(
            key,
            *medians,
            None,
            Verdict.INCONCLUSIVE,
            structure,
            "no per-round data: save runs with --benchmark-save-data",
            more,
        )
    estimate = unpaired_ratio(data_base, data_head, 2 * settings.alpha)  # each side at alpha
    contended = contention_note(base, "base") + contention_note(head, "head")
    speed = speed_change(base.get("extra_info") or {}, head.get("extra_info") or {})
    notes = contended + ([speed] if speed else [])
    if notes:
        return BenchmarkComparison(
            key,
            *medians,
            estimate,
            CONTENDED_VERDICT,
            structure,
            "; ".join(notes),
            more,
            speed_changed=not contended,
        )
    found = verdict(estimate, settings)
    return BenchmarkComparison(
        key, *medians, estimate, found, structure, below_min_effect(estimate, found, settings), more
    )


def contention_note(bench: dict[str, Any], side: str) -> list[str]:
    """``["<side> run contended: <the reasons in one short line>"]`` when the benchmark was timed under
    contention, else []."""
    found = (bench.get("extra_info") or {}).get("contention") or {}
    if not found.get("contended"):
        return []
    return [f"{side} run contended: {brief_reason(found)}"]  # in full: the run's JSON and report


def compare_runs(
    base: dict[str, Any], head: dict[str, Any], settings: GateSettings
) -> list[BenchmarkComparison]:
    """Compare every benchmark of either run, in a stable order.

    Raises ``BaselineError`` when an entry lacks its stats or holds non-numeric round times, when
    either run's ``extra_info`` is of a newer schema than this perfsuite reads (the version named),
    or when the base run has no per-round data (``stats.data``): without it no verdict can say slower.
    """
    for side, run in (("base", base), ("head", head)):
        for bench in run.get("benchmarks", []):
            version = (bench.get("extra_info") or {}).get("schema_version")
            if version is not None:
                check_schema_version(
                    version,
                    EXTRA_INFO_SCHEMA_VERSION,
                    f"the {side} run's benchmark {benchmark_key(bench)}",
                    BaselineError,
                )
    timed = [b for b in base.get("benchmarks", []) if isinstance(b.get("stats"), dict)]
    if timed and not any(b["stats"].get("data") for b in timed):
        raise BaselineError(
            "the base run has no per-round data (it was saved without --benchmark-save-data), so "
            "no benchmark could be judged slower; save the baseline with --benchmark-save-data "
            "(perfsuite run does)"
        )
    try:
        return _compare_all(base, head, settings)
    except (KeyError, TypeError, ValueError) as exc:
        raise BaselineError(
            f"a benchmark entry is malformed ({type(exc).__name__}: {exc})"
        ) from None


def _compare_all(
    base: dict[str, Any], head: dict[str, Any], settings: GateSettings
) -> list[BenchmarkComparison]:
    base_by_key = {benchmark_key(b): b for b in base["benchmarks"]}
    head_by_key = {benchmark_key(b): b for b in head["benchmarks"]}
    keys = list(dict.fromkeys(list(base_by_key) + list(head_by_key)))
    return [_compare_one(k, base_by_key.get(k), head_by_key.get(k), settings) for k in keys]


def gate_failed(comparisons: list[BenchmarkComparison], fail_on_structure: bool) -> bool:
    """True on a ``slower`` verdict, or a structural change that adds work (``trace.structure.adds_work``)
    when ``fail_on_structure``."""
    return any(
        c.verdict == Verdict.SLOWER or (fail_on_structure and c.structure_adds_work)
        for c in comparisons
    )


def _ms(value: float | None) -> str:
    return f"{value * 1e3:.3f}" if value else "-"


# the table shows this many structural lines of a benchmark
STRUCTURE_CELL_LINES = 8
# The note of a benchmark a plan that can decide nothing did not time (``perfsuite ab --budget-s 0``).
NOT_TIMED_NOTE = "not timed: structure only"


INTERVAL_DIGITS = (
    3  # decimals of a ratio and its interval, more only where 3 would blur the side of 1
)


def format_ratio_interval(ratio: float, low: float, high: float, units: int) -> str:
    """``1.068 [1.0002, 1.141]``: the ratio and its interval, the bounds rounded outward (low down,
    high up) so the printed interval holds the computed one, with more decimals (up to 6) where 3
    would put a bound strictly above or below 1 on 1.000; an interval that is not finite (fewer
    than two units: one pair) is not printed as one (``1.000 (no interval from 1 sample)``)."""
    if units < 2 or not (math.isfinite(low) and math.isfinite(high)):
        return f"{ratio:.{INTERVAL_DIGITS}f} (no interval from {units} sample{'' if units == 1 else 's'})"
    low_text, high_text = _bound(low, math.floor), _bound(high, math.ceil)
    return f"{ratio:.{INTERVAL_DIGITS}f} [{low_text}, {high_text}]"


# Bounds from this many times the ratio up are printed in scientific notation (a t interval over 2 or 3
# worker pairs can reach 1e41: 42 digits).
SCIENTIFIC_FROM = 1000.0


def _bound(value: float, outward) -> str:
    """``value`` rounded by ``outward`` (floor or ceil) at 3 decimals, or more when that lands on 1;
    from ``SCIENTIFIC_FROM`` up, 3 significant digits (``2.62e+41``), also rounded outward."""
    if value >= SCIENTIFIC_FROM:
        exponent = math.floor(math.log10(value))
        mantissa = outward(value / 10**exponent * 100) / 100
        return f"{mantissa:.2f}e+{exponent}"
    for digits in range(INTERVAL_DIGITS, 7):
        scale = 10**digits
        rounded = outward(value * scale) / scale
        if value == 1.0 or rounded != 1.0:
            return f"{rounded:.{digits}f}"
    return f"{outward(value * 10**6) / 10**6:.6f}"


def structure_cell(lines: list[str]) -> str:
    """A benchmark's structural diff for its table cell: ``same``, or its first
    ``STRUCTURE_CELL_LINES`` lines and how many more there are."""
    if not lines:
        return "same"
    shown = "; ".join(lines[:STRUCTURE_CELL_LINES])
    more = len(lines) - STRUCTURE_CELL_LINES
    return shown + (
        f"; ... and {more} more (the JSON of perfsuite ab --json lists all)" if more > 0 else ""
    )


def markdown(
    comparisons: list[BenchmarkComparison], settings: GateSettings, title: str, method: str
) -> str:
    """The table a reviewer reads in a pull request."""
    statistic = "paired head/base" if method != UNPAIRED_METHOD else "head/base"
    # each bound one-sided at alpha (A/B: at the last look's nominal level, which spends what is left)
    level = (
        f"bounds at one-sided {settings.alpha:g}"
        if method != UNPAIRED_METHOD
        else (f"{round((1 - 2 * settings.alpha) * 100, 2):g}% CI")
    )
    rows = [
        f"### {title}",
        "",
        f"| benchmark | base ms | head ms | head ms / base ms | {statistic} ({level}) | verdict | structure |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for c in comparisons:
        ratio = (
            format_ratio_interval(
                c.estimate.ratio, c.estimate.low, c.estimate.high, c.estimate.units
            )
            if c.estimate and c.estimate.units
            else "-"
        )  # no units: nothing was measured, no ratio to show
        plain = (
            f"{c.head_median_s / c.base_median_s:.3f}"
            if c.base_median_s and c.head_median_s
            else "-"
        )
        mark = {Verdict.SLOWER: "**slower**", Verdict.FASTER: "faster"}.get(c.verdict, c.verdict)
        note = f" ({c.note})" if c.note else ""
        structure = "-" if c.verdict == Verdict.MISSING else structure_cell(c.structure)
        rows.append(
            f"| `{c.key}` | {_ms(c.base_median_s)} | {_ms(c.head_median_s)} | {plain} | {ratio} | {mark}{note} "
            f"| {structure} |"
        )
    counts = {v: sum(c.verdict == v for c in comparisons) for v in VERDICTS}
    timed = sum(1 for c in comparisons if c.estimate)
    rows += [
        "",
        ", ".join(f"{n} {v}" for v, n in counts.items() if n)
        + f" of {len(comparisons)} benchmark{'' if len(comparisons) == 1 else 's'}.",
        f"Method: {method}. Verdicts need a change of at least {settings.min_effect:.0%} and an interval that "
        f"excludes 1.",
        f"The verdict comes from the {statistic} column; head ms / base ms is the ratio of the two medians "
        "shown, which may differ from it"
        + (
            " (the paired statistic compares each block with its neighbour, so "
            "drift between blocks cancels)."
            if method != UNPAIRED_METHOD
            else "."
        ),
    ]
    if any(c.verdict == CONTENDED_VERDICT and not c.speed_changed for c in comparisons):
        rows.append(
            f"`{CONTENDED_VERDICT}`: other processes, or on a virtual machine the hypervisor (CPU steal), "
            "took the CPU while it was timed (perfsuite.measure.contention); rerun it when the machine is quiet."
        )
    if any(c.speed_changed for c in comparisons):
        rows.append(
            f"`{CONTENDED_VERDICT}` ({SPEED_CHANGED}): nothing that /proc shows took the CPU (the run's "
            "`timing` column may say ok), but a reference matmul timed beside the benchmark ran at another "
            "speed in the two runs (perfsuite.measure.speed_reference): on a virtual machine, another guest "
            "on the same core or the host's clock. A quiet load average does not rule it out; gate with "
            "`perfsuite ab`, whose pairs share the machine's speed."
        )
    if method == UNPAIRED_METHOD:
        rows.append(
            "Two separate runs: drift of the machine between them is not controlled, so there is no "
            "false-alarm bound; gate with `perfsuite ab` (interleaved), which has one."
        )
    elif timed:
        rows.append(
            f"False-alarm bound for identical code: {settings.false_alarm_rate():.2%} per benchmark"
            + (
                f", {settings.false_alarm_rate(timed):.2%} for these {timed} (union bound)."
                if timed > 1
                else "."
            )
        )
    return "\n".join(rows) + "\n"


def judged_nothing(comparisons: list[BenchmarkComparison]) -> bool:
    """True when no benchmark was in both runs: a gate that compared nothing must not pass."""
    return not any(c.verdict != Verdict.MISSING for c in comparisons)


VERDICTS = tuple(Verdict)
UNPAIRED_METHOD = "percentile bootstrap (Efron & Tibshirani 1993) of the ratio of median round times of two separate runs"
