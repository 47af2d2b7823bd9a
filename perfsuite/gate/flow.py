"""The gate's one flow, shared by the plugin (``--perfsuite-gate``), ``perfsuite compare`` and ``perfsuite ab``.

comparisons -> Markdown report + the benchmarks that fail and why + a final verdict line + an
exit code. A gate that compared nothing never passes.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from perfsuite.gate.compare import (
    NOT_TIMED_NOTE,
    UNPAIRED_METHOD,
    BenchmarkComparison,
    check_compatible,
    compare_runs,
    format_ratio_interval,
    judged_nothing,
    markdown,
)
from perfsuite.gate.stats import CONTENDED_VERDICT, GateSettings, Verdict
from perfsuite.trace.structure import NO_WORK_PREFIX, added_lines

EXIT_PASS, EXIT_REGRESSION, EXIT_UNUSABLE = 0, 1, 2


def plural(count: int, noun: str) -> str:
    """``1 benchmark``, ``2 benchmarks``."""
    return f"{count} {noun}{'' if count == 1 else 's'}"


@dataclasses.dataclass(frozen=True)
class GateOutcome:
    """What a gate decided.

    ``failures``: one line per failing benchmark with its reason (``slower x1.18 [1.12, 1.25]``
    or the structural changes). ``warnings``: incompatibilities accepted with ``--force``.
    ``exit_code``: 0 pass, 1 a regression, 2 nothing was compared.
    """

    comparisons: list[BenchmarkComparison]
    report_md: str
    failures: list[str]
    warnings: list[str]
    judged_nothing: bool
    fail_on_structure: bool = False
    require_timing: bool = False  # --require-timing: a pass with untimed benchmarks is not a pass

    @property
    def exit_code(self) -> int:
        if self.judged_nothing:
            return EXIT_UNUSABLE
        if self.failures:
            return EXIT_REGRESSION
        return EXIT_UNUSABLE if self._untimed_required() else EXIT_PASS

    def _untimed_required(self) -> int:
        """With ``require_timing``, the benchmarks in both runs whose timing was not judged
        (inconclusive or contended); else 0."""
        if not self.require_timing:
            return 0
        return sum(c.verdict in (Verdict.INCONCLUSIVE, CONTENDED_VERDICT) for c in self.comparisons)

    @property
    def word(self) -> str:
        """``PASS``, ``FAIL`` or ``NOT JUDGED``: the verdict word of ``verdict_line`` and the exit code."""
        if self.exit_code == EXIT_REGRESSION:
            return "FAIL"
        return "NOT JUDGED" if self.exit_code == EXIT_UNUSABLE else "PASS"

    @property
    def verdict_line(self) -> str:
        """The last line a reviewer reads: PASS/FAIL, the count behind it, and which half decided
        (``decided by timing``, ``by structure``, ``by timing and structure``)."""
        total = len(self.comparisons)
        if self.judged_nothing:
            return f"perfsuite gate: NOT JUDGED: no benchmark is in both runs ({total} seen)"
        if self.failures:
            slower = sum(c.verdict == Verdict.SLOWER for c in self.comparisons)
            structural = [
                c for c in self.comparisons if self.fail_on_structure and c.structure_adds_work
            ]
            both = sum(c.verdict == Verdict.SLOWER for c in structural)
            counted = (
                f"{slower} slower, {len(structural)} with structure that adds work"
                + (f"; {both} of them both" if both else "")
                if self.fail_on_structure
                else f"{slower} slower; structure not judged"
            )
            return (
                f"perfsuite gate: FAIL: {len(self.failures)} of {plural(total, 'benchmark')} regressed "
                f"({counted})"
                + f"; {self.decided_by()}"
                + "".join(f"; {note}" for note in self._timing_notes(self._counts()))
            )
        counts = self._counts()
        shown = ", ".join(f"{n} {v}" for v, n in counts.items() if n)
        notes = [self.decided_by()] + self._structure_notes() + self._timing_notes(counts)
        if untimed := self._untimed_required():
            # not "decided by ...": nothing decided it (a third new user read the two as contradicting)
            return (
                f"perfsuite gate: NOT JUDGED: the timing of {untimed} of {plural(total, 'benchmark')} "
                f"was not judged ({shown}) and --require-timing asks for every one"
                + "".join(f"; {note}" for note in notes[1:])
            )
        return (
            f"perfsuite gate: PASS: no regression found in {plural(total, 'benchmark')} ({shown})"
            + "".join(f"; {note}" for note in notes)
        )

    def decided_by(self) -> str:
        """Which half of the gate decided the verdict, in words.

        A FAIL is decided by the half (or halves) that named a failure: ``timing`` (a benchmark
        ``slower``), ``structure`` (structure that adds work). A PASS is decided by the halves that
        judged: timing when a timing verdict was reached (``slower``, ``faster``, ``no change``),
        structure when it was judged (``fail_on_structure``); a PASS that judged no timing says so.
        """
        if self.failures:
            slower = any(c.verdict == Verdict.SLOWER for c in self.comparisons)
            structural = self.fail_on_structure and any(
                c.structure_adds_work for c in self.comparisons
            )
            halves = [
                name for name, found in (("timing", slower), ("structure", structural)) if found
            ]
            return (
                "decided by "
                + " and ".join(halves)
                + ("" if self._timed() else " (no timing verdict was reached)")
            )
        if self._timed():
            return (
                "decided by timing and structure"
                if self.fail_on_structure
                else "decided by timing only (structure not judged)"
            )
        if self.fail_on_structure:
            return "decided by structure only: no timing verdict was reached"
        return "nothing decided it: no timing verdict was reached, and structure was not judged"

    def _timed(self) -> int:
        """Benchmarks whose timing was judged (slower, faster or no change)."""
        return sum(
            c.verdict in (Verdict.SLOWER, Verdict.FASTER, Verdict.NO_CHANGE)
            for c in self.comparisons
        )

    def _counts(self) -> dict[str, int]:
        return {
            v: sum(c.verdict == v for c in self.comparisons)
            for v in (
                Verdict.NO_CHANGE,
                Verdict.FASTER,
                Verdict.INCONCLUSIVE,
                CONTENDED_VERDICT,
                Verdict.MISSING,
            )
        }

    def _not_timed(self) -> int:
        """Benchmarks a structure-only plan did not time (``NOT_TIMED_NOTE``)."""
        return sum(c.note == NOT_TIMED_NOTE for c in self.comparisons)

    def _timing_notes(self, counts: dict[str, int]) -> list[str]:
        """What the timings did not decide, on PASS and FAIL lines alike."""
        notes = []
        untimed = self._not_timed()
        if counts[Verdict.INCONCLUSIVE] > untimed:
            notes.append("inconclusive timings decide nothing (each row's note says why)")
        if untimed:
            notes.append(f"{untimed} not timed: this gate judged structure only")
        if counts[CONTENDED_VERDICT]:
            notes.append(
                f"WARNING: {counts[CONTENDED_VERDICT]} {self._why_contended()}, not judged"
            )
        return notes

    def _structure_notes(self) -> list[str]:
        changed = [c for c in self.comparisons if c.structure]
        if not changed:
            return []
        if not self.fail_on_structure:
            return [
                f"{len(changed)} with structural changes, not judged (perfsuite ab and compare fail on "
                "structure that adds work unless --no-fail-on-structure; perfsuite run and pytest with "
                "--perfsuite-fail-on-structure)"
            ]
        return [f"{len(changed)} with structural changes that add no work (not a failure)"]

    def _why_contended(self) -> str:
        speed = sum(c.speed_changed for c in self.comparisons)
        if not speed:
            return "timed under contention"
        if speed == sum(c.verdict == CONTENDED_VERDICT for c in self.comparisons):
            return "at another machine speed than the baseline"
        return f"timed under contention or ({speed} of them) at another machine speed than the baseline"


def failure_reason(comparison: BenchmarkComparison, fail_on_structure: bool) -> str | None:
    """Why one benchmark fails the gate, or None when it does not."""
    reasons = []
    if comparison.verdict == Verdict.SLOWER and comparison.estimate:
        e = comparison.estimate
        reasons.append(f"slower x{format_ratio_interval(e.ratio, e.low, e.high, e.units)}")
    if fail_on_structure and comparison.structure_adds_work:
        # only what the head added: removals, moved or reshaped writes and ops that did no work are
        # in the structural diff, not in the reason it fails
        work = added_lines(list(comparison.structure)) or [
            line for line in comparison.structure if not line.startswith(NO_WORK_PREFIX)
        ]
        others = len(comparison.structure) - len(work)
        reasons.append("structure adds work: " + "; ".join(work) + _other_lines(others))
    return ", ".join(reasons) or None


def _other_lines(count: int) -> str:
    """The structural lines a failure reason leaves out (they add nothing), and where they are."""
    if count <= 0:
        return ""
    lines = plural(count, "other structural line")
    return f" ({lines}, adding nothing: the table's structure cell, all of them in `perfsuite ab --json`)"


def judge(
    comparisons: list[BenchmarkComparison],
    settings: GateSettings,
    title: str,
    method: str,
    fail_on_structure: bool,
    warnings: list[str] = (),
    require_timing: bool = False,
) -> GateOutcome:
    """Turn comparisons into a ``GateOutcome`` (report, failures with reasons, verdict line);
    ``require_timing``: a gate without failures whose timings were not all judged exits 2
    (``GateOutcome.require_timing``)."""
    failures = [
        f"{c.key}: {reason}"
        for c in comparisons
        if (reason := failure_reason(c, fail_on_structure)) is not None
    ]
    outcome = GateOutcome(
        comparisons,
        "",
        failures,
        list(warnings),
        judged_nothing(comparisons),
        fail_on_structure,
        require_timing,
    )
    lines = [markdown(comparisons, settings, title, method)]
    lines += [f"- FAIL `{line}`" for line in failures]
    lines += [f"- warning (forced): {w}" for w in warnings]
    report = (
        untimed_first_line(outcome)
        + "".join(lines[:1])
        + "".join(f"{line}\n" for line in lines[1:])
        + f"\n**{outcome.verdict_line}**\n"
    )
    return dataclasses.replace(outcome, report_md=report)


def untimed_first_line(outcome: GateOutcome) -> str:
    """The report's first line when timing decided none of the benchmarks it timed (every one inconclusive
    or contended), with the gate's verdict word: said before the table, not only in the verdict at its end
    (a reader of the first line alone must not miss a FAIL); "" otherwise, and for a
    structure-only gate (``NOT_TIMED_NOTE``: nothing was asked of timing)."""
    if outcome.judged_nothing or not outcome.comparisons or outcome._timed():
        return ""
    if outcome._not_timed() == len(outcome.comparisons):
        return ""  # structure only, as asked: the verdict line says so
    shown = ", ".join(f"{n} {v}" for v, n in outcome._counts().items() if n)
    return (
        f"**perfsuite gate: {outcome.word}: timing decided none of the "
        f"{plural(len(outcome.comparisons), 'benchmark')} ({shown}); {outcome.decided_by()}**\n\n"
    )


def judge_saved_runs(
    base: dict[str, Any],
    head: dict[str, Any],
    base_name: str,
    head_name: str,
    settings: GateSettings,
    force: bool,
    fail_on_structure: bool,
    title: str,
    require_timing: bool = False,
) -> GateOutcome:
    """Gate two saved pytest-benchmark runs (separate runs: no false-alarm bound).

    Raises:
        IncomparableRuns: the runs come from other hardware or software (``machine.MUST_MATCH``)
            and ``force`` is false.
        BaselineError: a benchmark entry is malformed.
    """
    warnings = check_compatible(base, head, base_name, head_name, force)
    return judge(
        compare_runs(base, head, settings),
        settings,
        title,
        UNPAIRED_METHOD,
        fail_on_structure,
        warnings,
        require_timing,
    )
