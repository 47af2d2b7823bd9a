"""Run state that keeps failures cheap and honest: setup errors once, crashes isolated, progress known.

Used by the suite's session (``perfsuite.suite.plugin``):

* ``FailureLedger``: an error of a variant's per-case setup (or of one mode's evidence) is
  raised in full by the first test that needs it; every later test of that variant and case
  fails with one line that names the first test, not with the same output again.
* ``OutputFailures``: the first check that found a (variant, case)'s output wrong explains it in full;
  a later check of the pair that fails with it (the large-score probe, a property, the timing)
  says so in one line naming that check, not with the same story again. The same for a pair's extra
  score copy (``OutputFailures(ALREADY_COPIED)``): copies per step, score accounting and the
  ``score_copies`` property count one copy three ways.
* ``CrashProbes``: for the variants ``SuiteSettings.isolate`` names, the first call of every
  (case, mode) runs once in a child process (``perfsuite.measure.isolation``) before it runs
  here; a pair that crashed the child fails its tests with variant, case, mode and signal, and
  is never run in this process.
* ``Progress``: benchmarks expected and finished, and whether the run was interrupted or stopped,
  so what is saved can say it is partial (``perfsuite.gate.baseline.Incomplete``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable

import pytest

from perfsuite.attention.cases import Device
from perfsuite.gate.baseline import Incomplete
from perfsuite.measure.call_limit import default_limit_s
from perfsuite.measure.isolation import ProbeOutcome, probe
from perfsuite.measure.profiling import ACTIVE_STEPS
from perfsuite.measure.score_accounting import copy_count_words, copy_labels


@dataclasses.dataclass
class _Failure:
    nodeid: str
    summary: str


class FailureLedger:
    """First failure per key (``(variant, case)`` or ``(variant, case, mode)``) in full, then references."""

    def __init__(self):
        self._first: dict[tuple, _Failure] = {}

    def report(self, key: tuple, nodeid: str, what: str, error: BaseException) -> None:
        """Raise ``error`` (in full) for the first test of ``key``; for every later one, fail with one
        line naming ``what`` failed, the error's first line, and the first test, which shows it all."""
        first = self._first.get(key)
        if first is None:
            lines = str(error).strip().splitlines()
            summary = f"{type(error).__name__}: {lines[0] if lines else ''}"
            # the same error in another mode of the pair (a first call failing in every mode): one line
            earlier = next(
                (f for k, f in self._first.items() if k[:2] == key[:2] and f.summary == summary),
                None,
            )
            self._first[key] = earlier or _Failure(
                nodeid or "the first test that needed it", summary
            )
            if earlier is None:
                raise error
            first = earlier
        pytest.fail(
            f"{what} failed: {first.summary} (reported in full once, by {first.nodeid})",
            pytrace=False,
        )

    def failures(self) -> dict[tuple, str]:
        """Key -> ``"ValueError: ... (first: nodeid)"``, for the end-of-run summary."""
        return {key: f"{f.summary} (first: {f.nodeid})" for key, f in self._first.items()}


def headline(failure: str) -> str:
    """A failure's first line up to its first ``"; "`` (what failed, without the element's details)."""
    lines = failure.strip().splitlines()
    return (lines[0] if lines else failure).split("; ", 1)[0]


ALREADY_WRONG = "the output is already wrong on this case"
ALREADY_COPIED = "this case's score copies are already reported"


class OutputFailures:
    """The first check per ``(variant, case id)`` that found the output wrong (its node id and first
    line), so later checks of the pair skip, referring to it; ``already``: what their one line says of it
    (``ALREADY_WRONG``; ``ALREADY_COPIED`` for the score-copy checks)."""

    def __init__(self, already: str = ALREADY_WRONG):
        self.already = already
        self._first: dict[tuple[str, str], _Failure] = {}

    def note(self, key: tuple[str, str], nodeid: str, failure: str) -> None:
        """Keep ``failure`` (``headline``) as the pair's first, unless one is kept already."""
        self._first.setdefault(key, _Failure(nodeid, headline(failure)))

    def first(self, key: tuple[str, str]) -> str | None:
        """``'<first line>' (reported in full by <node id>)`` for the pair's first wrong output, or None."""
        found = self._first.get(key)
        return f"{found.summary} (reported in full by {found.nodeid})" if found else None

    def refer_to(self, key: tuple[str, str], nodeid: str, failure: str, what: str) -> None:
        """Skip as ``refer`` does, naming the test ``nodeid`` that reports ``failure`` in full (in this
        process or another: an xdist worker), kept as the pair's first unless one is kept already."""
        self.note(key, nodeid, failure)
        self.refer(key, what)

    def refer(self, key: tuple[str, str], what: str) -> None:
        """Skip with one line: ``what``, and that the output is already wrong on this case (``already``;
        the first check's line), as pytest-dependency skips a test whose dependency failed: one FAILED
        per mistake per case, the run still failing by the first. Returns when the pair has no failure
        noted."""
        first = self.first(key)
        if first is not None:
            pytest.skip(f"{what}; {self.already}: {first}")


FLOAT64_CHECK = "test_matches_float64_reference"  # the check that reports a wrong output in full


COPIES_CHECK = (
    "test_score_copies_per_step"  # the check that reports an unexpected score copy in full
)


def float64_check_of(items: Iterable[pytest.Item], variant: str, case_id: str) -> str | None:
    """The node id of ``(variant, case_id)``'s forward ``FLOAT64_CHECK`` among the session's ``items``,
    or None when it is not collected. Every worker of an xdist run collects every item, so each can name
    it, whichever worker runs it."""
    return check_of(items, FLOAT64_CHECK, variant, case_id, "forward")


def check_of(
    items: Iterable[pytest.Item], test: str, variant: str, case_id: str, mode: str | None = None
) -> str | None:
    """The node id of suite test ``test`` (a function name) of ``(variant, case_id)`` (in ``mode``, for
    a test parametrized by mode) among ``items``, or None when it is not collected."""
    for item in items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        if (
            getattr(item, "originalname", None) == test
            and getattr(params.get("variant"), "name", None) == variant
            and getattr(params.get("case"), "id", None) == case_id
            and params.get("mode") == mode
        ):
            return item.nodeid
    return None


def refer_copy(perfsuite_run, request, evidence, what: str) -> None:
    """Skip with one line (``what``, and the check that reports the copy in full) when a score-copy
    check of the pair failed first in this process, or when ``COPIES_CHECK`` is collected (on whichever
    xdist worker) and fails on ``evidence`` (forward); returns otherwise."""
    key = (evidence.variant.name, evidence.case.id)
    perfsuite_run.copy_failures.refer(key, what)
    twin = check_of(request.session.items, COPIES_CHECK, *key)
    if twin is None or twin == request.node.nodeid:
        return
    failure = score_copies_failure(evidence)
    if failure is not None:
        perfsuite_run.copy_failures.refer_to(key, twin, failure, what)


def score_copies_failure(evidence) -> str | None:
    """Why ``evidence``'s score-sized copies per forward (on the CPU lane, and the device lane of a CUDA
    case) are not the variant's expected ones, first line first: ``1 extra copy of the score matrix per
    forward: copy [1x2x16x16] in aten::masked_fill > aten::clone > aten::copy_ (...)``; None when they are."""
    lanes = ["cpu", "device"] if evidence.case.device == Device.CUDA else ["cpu"]
    for lane in lanes:
        copies = evidence.score_copies(lane)
        expected = [evidence.expected_score_copies] * ACTIVE_STEPS
        if copies == expected:
            continue
        worst = max(copies, key=lambda n: abs(n - evidence.expected_score_copies))
        accounting = evidence.score_accounting[0] if evidence.score_accounting else None
        where = copy_labels(accounting) or [score_copies_named(evidence, lane)]
        return (
            f"{evidence.variant.name} on {evidence.case.id}: "
            f"{copy_count_words(worst, evidence.expected_score_copies)}: {', '.join(where)} "
            f"(score-sized copies per forward on the {lane} lane {copies}, expected {expected}); "
            f"score-sized copies in the first step: {score_copies_named(evidence, lane)}; "
            f"trace: {evidence.trace_path}"
            + (_COPY_HINT if max(copies) > evidence.expected_score_copies else "")
        )
    return None


_COPY_HINT = (
    ". Out-of-place masked_fill clones the scores (aten::clone), as do .clone() and .contiguous() on a "
    "non-contiguous view; masked_fill_ in place does not (safe under torch.no_grad; docs: "
    "correctness and masks). If the copy is intended, declare it: register_variant(..., copies_scores_when_masked=True)"
)


def score_copies_named(evidence, lane: str) -> str:
    """The first step's score-sized copies on ``lane``, as ``op [shape]``, for a failure message."""
    names = [
        f"{c.name} [{'x'.join(map(str, c.shape))}]"
        for c in evidence.steps[0].copies_with_shape(evidence.case.score_shape, lane)
    ]
    return ", ".join(names) or "none seen"


class CrashProbes:
    """Probe outcomes per variant, gathered lazily: all of a variant's pairs in one child run."""

    def __init__(
        self,
        isolate: Iterable[str],
        seed: int,
        specs: Iterable[str],
        run_probe: Callable[..., dict[tuple[str, str], ProbeOutcome]] = probe,
        call_limit_s: Callable[[str], float | None] = default_limit_s,
    ):
        self.isolate = frozenset(isolate)
        self.call_limit_s = call_limit_s
        self.seed = seed
        self.specs = tuple(specs)
        self._run_probe = run_probe
        self._outcomes: dict[str, dict[tuple[str, str], ProbeOutcome]] = {}

    def crash(
        self, variant: str, case_id: str, mode: str, pairs: Callable[[], list[tuple[str, str]]]
    ) -> ProbeOutcome | None:
        """The crash outcome of ``(variant, case_id, mode)``, or None (not isolated, or it did not crash).

        ``pairs``: every ``(case_id, mode)`` of the variant in this run, probed together the first time.
        """
        if variant not in self.isolate:
            return None
        if variant not in self._outcomes:
            wanted = list(dict.fromkeys(list(pairs()) + [(case_id, mode)]))
            self._outcomes[variant] = self._run_probe(
                variant, wanted, self.seed, self.specs, call_limit_s=self.call_limit_s
            )
        outcome = self._outcomes[variant].get((case_id, mode))
        return outcome if outcome is not None and outcome.status in ("crashed", "hung") else None

    def crashes(self) -> list[tuple[str, ProbeOutcome]]:
        """``(variant, outcome)`` of every crashed pair so far."""
        return [
            (variant, o)
            for variant, found in self._outcomes.items()
            for o in found.values()
            if o.status in ("crashed", "hung")
        ]


def crash_message(variant: str, outcome: ProbeOutcome) -> str:
    """``variant X crashed the process on case C in mode M (signal SIGSEGV) ...``: the failure of its tests."""
    if outcome.status == "hung":
        return (
            f"variant {variant} hung on case {outcome.case_id} in mode {outcome.mode}, in an isolated child "
            f"(--perfsuite-isolate); it is not run here, the other variants' results are kept. {outcome.detail}"
        )
    return (
        f"variant {variant} crashed the process on case {outcome.case_id} in mode {outcome.mode}, in an isolated "
        f"child (--perfsuite-isolate); it is not run here, the other variants' results are kept. {outcome.detail}"
    )


@dataclasses.dataclass
class Progress:
    """Benchmarks of this run: ``expected`` (collected), ``finished`` (timed or called), how it stopped."""

    expected: int = 0
    finished: int = 0
    interrupted: bool = False
    stopped: str | None = None  # "stopped after a failure (-x / --maxfail)" etc.
    running: str | None = (
        None  # the test running now, of any kind (a crash leaves it named in run.json)
    )

    def incomplete(self) -> Incomplete | None:
        """Why the run's results are partial, or None when every expected benchmark finished or the
        run ended normally (a benchmark that failed or was skipped still counts as run)."""
        if self.interrupted:
            return Incomplete("interrupted (KeyboardInterrupt)", self.finished, self.expected)
        if self.stopped:
            return Incomplete(self.stopped, self.finished, self.expected)
        return None
