"""Verdicts of the gate: what an interval says about a benchmark, the contended pairs' rule, and the
settings both read.

Verdict (``verdict``), with a look's interval and ``min_effect``:

* ``slower``: the interval lies above 1 and the estimate is at least ``1 + min_effect``;
* ``faster``: the interval lies below 1 and the estimate is at most ``1 - min_effect``;
* ``no change`` (nvbench's SAME): the interval lies inside ``[1 - min_effect, 1 + min_effect]``;
* ``inconclusive``: anything else, or fewer than ``MIN_UNITS`` units to decide.

``slower`` and ``faster`` are two one-sided questions, each asked at the gate's level ``alpha`` (a
look's interval is two-sided at twice its one-sided nominal level, ``perfsuite.gate.sequential``):
identical code is called slower with probability at most ``alpha``, and faster with at most ``alpha``;
a gate over ``k`` benchmarks fails on identical code with probability at most ``k * alpha`` (union bound).
When too few pairs were kept (at least half contended, nothing decided), ``contended_verdict`` judges
the contended pairs against a minimum effect that grows with the measured wait: a 10x slowdown is
``slower`` under any load, identical code is not.
"""

from __future__ import annotations

import dataclasses
import enum
import math

import numpy as np

from perfsuite.gate.intervals import PairSample, RatioEstimate, pair_log_ratios, wilcoxon_interval


class Verdict(enum.StrEnum):
    """A benchmark's verdict (rules in the module docstring); stored and printed as its value."""

    SLOWER = "slower"
    FASTER = "faster"
    NO_CHANGE = "no change"
    INCONCLUSIVE = "inconclusive"
    CONTENDED = (
        "inconclusive: contended"  # not decisive, and at least half the pairs were contended
    )
    MISSING = "missing"  # in one run (or tree) only


class ContendedPairs(enum.StrEnum):
    """Which block pairs timed under contention the gate keeps (``perfsuite ab --contended-pairs``).

    * ``shared`` (default): a pair whose two blocks were both contended is kept: a load that lasts
      across the pair (a busy process beside the gate) slows both sides, and the pair's ratio, like
      drift, cancels it; alternating the order keeps the ratio symmetric, which is all the
      signed-rank interval assumes. A pair with one contended block (a burst that hit one side) is
      set aside, decided by the scheduler's counters, never by the ratio.
    * ``set-aside``: every pair with a contended block is set aside (beside a steady load nothing
      is left to judge, and the benchmark ends ``inconclusive: contended``).

    Measured on a 2-CPU machine, quiet and beside one and two busy processes: docs/validation.md,
    "Gate error rates" and "Gate beside a CPU hog".
    """

    SHARED = "shared"
    SET_ASIDE = "set-aside"


DEFAULT_CONTENDED_PAIRS = ContendedPairs.SHARED


MIN_UNITS = 6
# Contended pairs (``contended_verdict``): what contention alone may add to a head block's time
# beyond its threads' measured run-queue wait (caches and memory bandwidth shared with the load,
# CPU steal the wait does not count). Provisional: validation/calibrate_gate.py reports the largest
# wait-adjusted ratio of identical code beside busy processes ("contended A/A"); this floor must stay
# above it (docs/validation.md, "Contended pairs").
CONTENDED_MIN_EFFECT = 0.25
# The same rule on the workers' CPU time (host clock only): a block's CPU seconds over its threads
# count the work done and not the wait, so contention moves them much less than wall time (beside two
# busy processes, identical code's CPU-time intervals stayed within x0.89-1.08 where its wall ratios
# wandered x0.91-1.02 with 3-15x the spread; docs/validation.md, "Contended pairs"). CPU time does not
# see latency (a change that loses parallelism), which the wall clause still judges.
CONTENDED_CPU_MIN_EFFECT = 0.15
# A block whose threads waited this share of its wall time or more gives no bound (its floor would
# be infinite): the wait share is capped here, so the floor is at most (1 + 0.25) / (1 - 0.9) = x12.5.
CONTENDED_WAIT_CAP = 0.9
SEPARATE_RUNS_MIN_EFFECT = 0.15


@dataclasses.dataclass(frozen=True)
class GateSettings:
    """``alpha``: the chance that identical code is called ``slower`` (a one-sided level; ``faster`` is
    asked apart at the same level); ``min_effect``: the smallest change worth a verdict (0.02 = 2%).

    ``AB_ALPHA`` (0.001) for A/B runs: a gate of 12 benchmarks fails identical code with probability at
    most 1.2%, and 300 unchanged benchmark-gates expect 0.3 false ``slower`` (docs/validation.md, "Gate
    error rates"). 2% for A/B runs: a 3% change's estimate reaches it in nearly every gate whose
    interval excludes 1.

    ``contended_min_effect``: the margin of ``contended_verdict`` (``CONTENDED_MIN_EFFECT``); None
    leaves contended pairs undecided (``inconclusive: contended``).

    ``SEPARATE_RUNS_MIN_EFFECT`` and ``SEPARATE_RUNS_ALPHA`` are the defaults for comparing two separate
    runs: identical code measured 8-14% apart between separate smoke runs on the 2-core machine (drift the
    data of the two runs cannot show), so smaller changes are left to the interleaved A/B gate.
    """

    alpha: float = 0.001
    min_effect: float = 0.02
    # ``contended_verdict``'s floor beyond the measured wait; None: contended pairs decide nothing
    contended_min_effect: float | None = CONTENDED_MIN_EFFECT

    def __post_init__(self):
        if not 0 < self.alpha < 0.5:
            raise ValueError(f"alpha must lie in (0, 0.5), got {self.alpha!r}")
        if not 0 <= self.min_effect < 1:
            raise ValueError(f"min_effect must lie in [0, 1), got {self.min_effect!r}")

    def false_alarm_rate(self, benchmarks: int = 1) -> float:
        """Upper bound of the probability that identical code is called slower in a gate of
        ``benchmarks`` (union bound over one-sided tests; see the module docstring)."""
        return min(1.0, benchmarks * self.alpha)


AB_ALPHA = GateSettings.alpha
SEPARATE_RUNS_ALPHA = 0.005


def verdict(estimate: RatioEstimate, settings: GateSettings) -> Verdict:
    """``slower``, ``faster``, ``no change`` or ``inconclusive`` (rules in the module docstring)."""
    if estimate.units < MIN_UNITS:
        return Verdict.INCONCLUSIVE
    if estimate.low > 1 and estimate.ratio >= 1 + settings.min_effect:
        return Verdict.SLOWER
    if estimate.high < 1 and estimate.ratio <= 1 - settings.min_effect:
        return Verdict.FASTER
    if 1 - settings.min_effect <= estimate.low and estimate.high <= 1 + settings.min_effect:
        return Verdict.NO_CHANGE
    return Verdict.INCONCLUSIVE


def below_min_effect(estimate: RatioEstimate | None, verdict_: str, settings: GateSettings) -> str:
    """For a ``no change`` or ``inconclusive`` whose interval excludes 1 but whose estimate stays
    inside the minimum effect, the measured change and the effect it fell below (``"a +9.0% change,
    below the 15% minimum effect"``); else ``""``."""
    if (
        verdict_ not in (Verdict.NO_CHANGE, Verdict.INCONCLUSIVE)
        or estimate is None
        or estimate.low <= 1 <= estimate.high
        or abs(estimate.ratio - 1) >= settings.min_effect
    ):
        return ""
    return f"a {estimate.ratio - 1:+.1%} change, below the {settings.min_effect:.0%} minimum effect"


def why_inconclusive(estimate: RatioEstimate | None, verdict_: str, settings: GateSettings) -> str:
    """Why a plain ``inconclusive`` decided nothing, for its note: too few units for an interval, or an
    interval that is neither inside the minimum effect's band (``no change``) nor clear of 1 (``slower``,
    ``faster``), its bounds and the band named. ``""`` for any other verdict, and where
    ``below_min_effect`` already says why."""
    if verdict_ != Verdict.INCONCLUSIVE or estimate is None:
        return ""
    if estimate.units < MIN_UNITS or not (0 < estimate.low and math.isfinite(estimate.high)):
        return f"too few {'worker pairs' if estimate.method == 'worker pairs' else 'samples'} for an interval"
    if below_min_effect(estimate, verdict_, settings):
        return ""
    band = f"{1 - settings.min_effect:.3f}-{1 + settings.min_effect:.3f}"
    low, high = math.floor(estimate.low * 1000) / 1000, math.ceil(estimate.high * 1000) / 1000
    return (
        f"its interval [{low:.3f}, {high:.3f}] holds 1 and reaches past {band}, the "
        f"{settings.min_effect:.0%} band a `no change` must lie within"
    )


CONTENDED_VERDICT = Verdict.CONTENDED
DECISIVE = (Verdict.SLOWER, Verdict.FASTER, Verdict.NO_CHANGE)


def contended_verdict(
    samples: list[PairSample], settings: GateSettings, alpha: float
) -> tuple[RatioEstimate, str] | None:
    """Judge the contended pairs when too few pairs were kept: only a slowdown larger than contention
    could make is decided (``slower``); returns its estimate (the raw contended ratios) and a note
    saying how it was decided, or None when nothing is decided.

    Two clauses, each at level ``alpha / 2`` (Bonferroni), from at least ``MIN_UNITS`` pairs:

    * wall time (``wait_adjusted``): a block whose threads spent a share ``w`` of their runnable time
      waiting for a CPU ran ``1 / (1 - w)`` slower for it when the CPUs are shared fairly (a thread
      runnable for ``T`` got ``(1 - w) T`` of CPU), so each contended pair's log ratio is corrected by
      ``log(1 - w_head) - log(1 - w_base)``; beyond that model, caches, memory bandwidth and steal
      shared with the load may move identical code's ratio by up to ``settings.contended_min_effect``
      (``CONTENDED_MIN_EFFECT``). ``slower`` when the signed-rank interval of the corrected log ratios
      lies above ``log(1 + contended_min_effect)``: on the raw ratio the minimum effect is
      ``(1 + m) (1 - w_base) / (1 - w_head)``, growing with the head's measured contention;
    * CPU time, where every judged pair has it: ``slower`` when the signed-rank interval of the
      pairs' CPU-time log ratios lies above ``log(1 + CONTENDED_CPU_MIN_EFFECT)`` (a contended
      block's CPU seconds count its work, not its wait; a 2x change measured x1.3-1.5 there beside
      two busy processes where its wall ratio fell to x1.2-1.3).

    ``faster`` is never decided here. The intervals pool the pairs (no clusters): a worker pair's
    bias, a few percent, lies far inside the margins.
    """
    if settings.contended_min_effect is None:
        return None
    judged = [s for s in samples if s.contended and s.head_wait is not None]
    if len(judged) < MIN_UNITS:
        return None
    half = alpha / 2
    raw = pair_log_ratios([s.base_s for s in judged], [s.head_s for s in judged])
    adjusted = wait_adjusted(raw, [s.base_wait for s in judged], [s.head_wait for s in judged])
    waits = np.array([min(max(s.head_wait, 0.0), CONTENDED_WAIT_CAP) for s in judged])
    centre, raw_low, raw_high = wilcoxon_interval(raw, half)
    estimate = RatioEstimate(
        math.exp(centre), math.exp(raw_low), math.exp(raw_high), len(judged), "contended pairs"
    )
    adjusted_centre, low, adjusted_high = wilcoxon_interval(adjusted, half)
    if low > math.log1p(settings.contended_min_effect):
        return estimate, (
            f"decided on {len(judged)} contended pairs: wait-adjusted x{math.exp(adjusted_centre):.3f} "
            f"[{math.exp(low):.3f}, {math.exp(adjusted_high):.3f}], above the "
            f"x{1 + settings.contended_min_effect:.2f} floor (head threads waited "
            f"{np.median(waits):.0%} of their runnable time, median; the interval shown is the raw "
            "contended ratio's)"
        )
    cpu = contended_cpu_ratios(judged)
    if cpu is None:
        return None
    cpu_centre, cpu_low, cpu_high = wilcoxon_interval(cpu, half)
    if not cpu_low > math.log1p(CONTENDED_CPU_MIN_EFFECT):
        return None
    return estimate, (
        f"decided on {len(judged)} contended pairs by CPU time: x{math.exp(cpu_centre):.3f} "
        f"[{math.exp(cpu_low):.3f}, {math.exp(cpu_high):.3f}], above the "
        f"x{1 + CONTENDED_CPU_MIN_EFFECT:.2f} floor (head threads waited {np.median(waits):.0%} of "
        "their runnable time, median; the interval shown is the wall-clock ratio's)"
    )


def contended_cpu_ratios(samples: list[PairSample]) -> np.ndarray | None:
    """Per pair, ``log(median head CPU s / median base CPU s)`` (``PairSample.base_cpu_s``); None when
    any pair lacks CPU times or has a block that used no measurable CPU time."""
    if any(not s.base_cpu_s or not s.head_cpu_s for s in samples):
        return None
    if any(min(s.base_cpu_s + s.head_cpu_s) <= 0 for s in samples):
        return None
    return pair_log_ratios([s.base_cpu_s for s in samples], [s.head_cpu_s for s in samples])


def wait_adjusted(log_ratios, base_waits, head_waits) -> np.ndarray:
    """Pair log ratios corrected for the run-queue wait of each block (``contended_verdict``):
    ``log r + log(1 - w_head) - log(1 - w_base)``, each wait share capped at ``CONTENDED_WAIT_CAP``
    (a block that waited more gives no finite correction); an unknown wait (None) counts as 0.
    ``ValueError`` on unequal lengths."""
    if not len(log_ratios) == len(base_waits) == len(head_waits):
        raise ValueError(
            f"{len(log_ratios)} ratios, {len(base_waits)} base and {len(head_waits)} head waits"
        )

    def share(waits):
        return np.array([min(max(w or 0.0, 0.0), CONTENDED_WAIT_CAP) for w in waits])

    return np.asarray(log_ratios) + np.log1p(-share(head_waits)) - np.log1p(-share(base_waits))
