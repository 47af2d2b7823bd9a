"""The sequential A/B rule: warm worker pairs visited one after another, a few planned looks with
alpha spending, and when to stop.

A benchmark is sampled in *visits*: one worker pair (a base and a head process) times a run of
alternating blocks while every other process of the gate is idle (``perfsuite.gate.ab`` does the
timing; this module decides). Visit ``v`` goes to worker pair ``v % worker_pairs``, so the first
``worker_pairs`` visits each bring a new, independent pair of processes: a *cluster*. Each cluster's
estimate is the Hodges-Lehmann centre of its kept block pairs' log ratios (``intervals.cluster_estimates``);
the interval is Student's t across the clusters (``intervals``), degrees of freedom from the number of
worker pairs. With one worker per side there are no clusters: the block pairs are pooled
(signed-rank interval), and a process's bias is not covered.

Looks: after the clusters planned by ``SequentialPlan.looks`` are complete (a cluster is complete
once it holds ``MIN_CLUSTER_PAIRS`` kept pairs). Each look tests ``slower`` and ``faster`` one-sided at
its nominal level from Lan-DeMets O'Brien-Fleming alpha spending (``perfsuite.gate.spending``) over
the information fraction ``complete clusters / worker pairs``; the last look spends what is left. The
look's interval is two-sided at twice the nominal level (each side at the nominal level), so
``verdicts.verdict`` reads it. A noise floor (``floor_sd``, the standard deviation between worker
pairs that recorded A/A runs measured for this benchmark) keeps a few clusters that happen to agree
from understating the noise: the t interval uses the larger of the two.

Stopping: at a decisive look; at the last planned look; when the time budget (``budget_s``) is spent.
Under load (pairs set aside as contended), a benchmark whose clusters are not complete at the budget
keeps sampling, revisiting the worker pairs that lack kept pairs, up to ``max_budget_s``; its last look
is then taken on what it has. When at least half the pairs were contended and nothing was decided, the
last look's level is split: half for the kept pairs, half for ``verdicts.contended_verdict``.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable

import numpy as np
from scipy import stats as scipy_stats

from perfsuite.gate.intervals import (
    MIN_CLUSTER_PAIRS,
    PairSample,
    RatioEstimate,
    cluster_estimates,
    pair_log_ratios,
    wilcoxon_interval,
)
from perfsuite.gate.spending import nominal_levels
from perfsuite.gate.verdicts import (
    CONTENDED_VERDICT,
    DECISIVE,
    GateSettings,
    Verdict,
    contended_verdict,
    verdict,
)

# Worker pairs per gate (processes per side). Each is one cluster of the interval, so the t interval has
# WORKER_PAIRS - 1 degrees of freedom at the last look (docs/validation.md, "Gate timing, warm worker pairs"). Twelve,
# not eight: at the last look's one-sided 0.00095 the t quantile falls from 4.8 (7 degrees of freedom) to
# 4.1 (11), so the same timed seconds in shorter visits give an interval about a quarter narrower; each pair
# costs about 2 s of CPU to start (importing torch), once per gate.
WORKER_PAIRS = 12
# A block's target length: its calls (rounds) are sized from the step's time measured at set-up. One
# call for steps of a few milliseconds: a block pair far shorter than the host's speed states (block
# times in two states about 1.35x apart that switch within a second; docs/validation.md), so both
# blocks of a pair see the same state and the pair's log ratio cancels it.
BLOCK_S = 0.002
# Timed seconds of one visit (both sides' blocks): its block pairs are sized from the step's time
# (at set-up, then from the blocks timed so far).
VISIT_S = 0.4
# Most block pairs in one visit (a very short step: the visit's length is then its pairs' overhead).
MAX_BLOCK_PAIRS = 128
# Block pairs that share one placement (inputs and spacer re-drawn every PLACEMENT_PAIRS block pairs):
# re-drawing costs about a step, so per one-call block it would take a third of a visit; eight blocks
# (about 50 ms of a millisecond step) still give each visit several placements to average.
PLACEMENT_PAIRS = 8
# A variant whose set-up is costly (``SequentialPlan.for_setup``) runs on half the worker pairs (at least
# 2): each pair's set-up pays it in both processes, with only that pair busy. Eager ``flex_attention``
# compiles (torch runs it through ``torch.compile``: 2-5 s in a fresh process here, imports included),
# which on 12 pairs spent 17-33 s of a gate per benchmark; on 6 its interval has 5 degrees of freedom.
COSTLY_SETUP_SHARE = 0.5
# Untimed steps before a worker pair's first block of a visit (the pair waited while others ran).
WARMUP_STEPS = 3
# Untimed steps before every other block: none. Both sides alternate call by call, so each timed call
# follows the other side's call alike; a warm-up step per block would halve the timed share.
BLOCK_WARMUP_STEPS = 0


def planned_looks(worker_pairs: int) -> tuple[int, ...]:
    """Complete clusters at which the gate looks: at half, three quarters and all of ``worker_pairs``
    (fewer looks when they coincide; at least 2 clusters for a finite t interval). One worker pair:
    looks after 4, 6 and 8 visits of its pooled pairs."""
    if worker_pairs < 1:
        raise ValueError(f"worker_pairs must be 1 or more, got {worker_pairs!r}")
    if worker_pairs == 1:
        return (4, 6, 8)
    wanted = (math.ceil(worker_pairs / 2), math.ceil(3 * worker_pairs / 4), worker_pairs)
    return tuple(sorted({max(2, n) for n in wanted}))


@dataclasses.dataclass(frozen=True)
class SequentialPlan:
    """How one benchmark is sampled and when it is looked at.

    ``worker_pairs``: processes per side, each base/head pair one cluster; ``looks``: complete clusters
    (one worker pair: visits) at each look (default ``planned_looks``); ``budget_s``: sampling seconds
    per benchmark after which its last look is taken; ``max_budget_s``: under contention, the cap up to
    which a benchmark whose clusters are incomplete keeps sampling; ``rounds``: calls per block (0: sized
    from the step's time to last ``BLOCK_S``); ``blocks``: block pairs per visit (0: sized to last
    ``VISIT_S``). ``ValueError`` on looks not increasing, or budgets not positive.
    """

    worker_pairs: int = WORKER_PAIRS
    looks: tuple[int, ...] = ()
    budget_s: float = 10.0
    max_budget_s: float = 30.0
    rounds: int = 0
    blocks: int = 0

    def __post_init__(self):
        if self.worker_pairs < 1:
            raise ValueError(f"worker_pairs must be 1 or more, got {self.worker_pairs!r}")
        if not self.looks:
            object.__setattr__(self, "looks", planned_looks(self.worker_pairs))
        if list(self.looks) != sorted(set(self.looks)) or self.looks[0] < 1:
            raise ValueError(f"looks must be increasing positive counts, got {self.looks!r}")
        if self.worker_pairs > 1 and self.looks[-1] > self.worker_pairs:
            raise ValueError(
                f"looks {self.looks!r} count clusters: at most worker_pairs ({self.worker_pairs})"
            )
        if not 0 <= self.budget_s <= self.max_budget_s:
            raise ValueError(
                f"budgets must satisfy 0 <= budget_s <= max_budget_s, got {self.budget_s!r}, "
                f"{self.max_budget_s!r}"
            )
        if self.rounds < 0 or self.blocks < 0:
            raise ValueError(
                f"rounds and blocks must be >= 0, got {self.rounds!r}, {self.blocks!r}"
            )

    @property
    def clustered(self) -> bool:
        return self.worker_pairs > 1

    def rounds_for(self, step_s: float) -> int:
        """Calls per block for a step of ``step_s`` seconds (``rounds``, else ``BLOCK_S`` of calls)."""
        return self.rounds or max(1, min(50, round(BLOCK_S / max(step_s, 1e-6))))

    def blocks_for(self, step_s: float, rounds: int = 0) -> int:
        """Block pairs per visit (``blocks``, else ``VISIT_S`` of both sides' blocks of ``rounds``
        calls, default ``rounds_for``; at least ``MIN_CLUSTER_PAIRS`` so one visit completes a cluster)."""
        if self.blocks:
            return self.blocks
        calls = (rounds or self.rounds_for(step_s)) + BLOCK_WARMUP_STEPS
        pair_s = 2 * calls * max(step_s, 1e-6)
        return max(MIN_CLUSTER_PAIRS, min(MAX_BLOCK_PAIRS, round(VISIT_S / pair_s)))

    def for_setup(self, setup_s: float) -> SequentialPlan:
        """The plan for a variant whose set-up in a fresh worker (inputs, ``prepare``, first call)
        took ``setup_s`` seconds: ``COSTLY_SETUP_SHARE`` of the worker pairs (at least 2; looks from
        ``planned_looks``) when every pair's set-up together would take longer than ``budget_s``, else
        this plan. A gate keeps a costly variant on the same pairs for all its benchmarks: most of the
        cost (imports, compiling) is paid once per process."""
        pairs = max(2, int(self.worker_pairs * COSTLY_SETUP_SHARE))
        if (
            not self.clustered
            or setup_s * self.worker_pairs <= self.budget_s
            or pairs == self.worker_pairs
        ):
            return self
        return dataclasses.replace(self, worker_pairs=pairs, looks=planned_looks(pairs))

    def can_decide(self) -> bool:
        """Whether any look can give a finite interval (a structure-only gate otherwise)."""
        if self.budget_s <= 0:
            return False
        if self.clustered:
            return self.looks[-1] >= 2 and (self.blocks == 0 or self.blocks >= MIN_CLUSTER_PAIRS)
        return True

    def describe(self, settings: GateSettings) -> str:
        """The plan in one line for the report's method."""
        levels = nominal_levels(tuple(n / self.looks[-1] for n in self.looks), settings.alpha)
        interval = (
            f"t interval across {self.worker_pairs} worker pairs (Ibragimov & Mueller 2010) of each "
            "pair's Hodges-Lehmann estimate"
            if self.clustered
            else "Wilcoxon signed-rank interval of the pooled block pairs (one worker per side: a "
            "process's bias not covered)"
        )
        unit = "worker pairs" if self.clustered else "visits"
        costly = self.for_setup(math.inf)
        narrowing = (
            f"; {costly.worker_pairs} worker pairs (looks at {', '.join(map(str, costly.looks))}) for a "
            f"variant whose set-up in a fresh worker takes over "
            f"{self.budget_s / self.worker_pairs:.2g} s"
            if costly is not self
            else ""
        )
        return (
            f"warm worker pairs timed one at a time in blocks of about {BLOCK_S * 1e3:g} ms (one "
            f"call for a longer step), inputs re-placed every {PLACEMENT_PAIRS} block pairs; {interval}; "
            f"looks at {', '.join(map(str, self.looks))} {unit}, O'Brien-Fleming alpha spending "
            f"(Lan & DeMets 1983), nominal one-sided levels "
            f"{', '.join(f'{p:.2g}' for p in levels)}: slower and faster each at {settings.alpha:g}; "
            f"at most {self.budget_s:g} s per benchmark ({self.max_budget_s:g} s under contention)"
            f"{narrowing}"
        )


@dataclasses.dataclass(frozen=True)
class SequentialOutcome:
    """What the sequential gate sampled and decided for one benchmark.

    ``contended``: per pair, set aside as contended; ``clusters``: per pair, the worker pair that timed
    it (None: no clusters); ``looks``: looks taken; ``stopped``: ``decisive``, ``last look``, ``budget``
    or ``cap`` (the contended extension's); ``contended_note``: how the contended pairs decided, "" when
    they did not; ``wait_shares`` / ``cpu_seconds``: per pair ``[base, head]`` (``PairSample``);
    ``floor_used``: whether the A/A noise floor widened the last interval.
    """

    base_blocks: list[list[float]]
    head_blocks: list[list[float]]
    contended: list[bool]
    estimate: RatioEstimate
    verdict: str
    looks: int
    stopped: str
    seconds: float
    clusters: list = dataclasses.field(default_factory=list)
    contended_note: str = ""
    wait_shares: list = dataclasses.field(default_factory=list)
    cpu_seconds: list = dataclasses.field(default_factory=list)
    floor_used: bool = False


def look_estimate(
    samples: list[PairSample], level: float, clustered: bool, floor_sd: float = 0.0
) -> tuple[RatioEstimate, bool]:
    """The kept pairs' ratio with its interval, each side at one-sided ``level``: Student's t across
    the complete clusters (standard deviation at least ``floor_sd``, log units) when ``clustered``, else
    the signed-rank interval of the pooled pairs. Returns the estimate and whether the floor widened it.
    Fewer than 2 complete clusters (or no pairs) give an infinite interval."""
    clean = [s for s in samples if not s.contended]
    if not clean:
        return RatioEstimate(1.0, 0.0, math.inf, 0, "paired sequential"), False
    logs = pair_log_ratios([s.base_s for s in clean], [s.head_s for s in clean])
    if not clustered:
        centre, low, high = wilcoxon_interval(logs, 2 * level)
        return RatioEstimate(
            math.exp(centre), math.exp(low), math.exp(high), len(logs), "pooled pairs"
        ), False
    estimates = cluster_estimates(logs, [s.cluster for s in clean])
    q = len(estimates)
    centre = float(estimates.mean()) if q else float(np.median(logs))
    if q < 2:
        return RatioEstimate(math.exp(centre), 0.0, math.inf, len(logs), "worker pairs", q), False
    sd = float(estimates.std(ddof=1))
    floored = floor_sd > sd
    half = float(scipy_stats.t.isf(level, q - 1)) * max(sd, floor_sd) / math.sqrt(q)
    low, high = (
        _exp(centre - half),
        _exp(centre + half),
    )  # an interval wider than a float: unbounded
    return RatioEstimate(math.exp(centre), low, high, len(logs), "worker pairs", q), floored


def _exp(x: float) -> float:
    """``exp(x)``, 0 or infinity beyond a float's range."""
    return 0.0 if x < -700 else math.inf if x > 700 else math.exp(x)


def complete_clusters(samples: list[PairSample], clustered: bool, visits: int) -> int:
    """Clusters holding ``MIN_CLUSTER_PAIRS`` kept pairs (one worker pair: visits so far)."""
    if not clustered:
        return visits
    kept: dict = {}
    for s in samples:
        if not s.contended:
            kept[s.cluster] = kept.get(s.cluster, 0) + 1
    return sum(n >= MIN_CLUSTER_PAIRS for n in kept.values())


def next_worker_pair(samples: list[PairSample], plan: SequentialPlan, visits: int) -> int:
    """Which worker pair the next visit goes to: each in turn for the first ``worker_pairs`` visits,
    then (under contention) the incomplete ones in turn (those with fewer than ``MIN_CLUSTER_PAIRS``
    kept pairs), else all in turn."""
    if visits < plan.worker_pairs or not plan.clustered:
        return visits % plan.worker_pairs
    kept = [0] * plan.worker_pairs
    for s in samples:
        if not s.contended and s.cluster is not None:
            kept[s.cluster] += 1
    incomplete = [c for c, n in enumerate(kept) if n < MIN_CLUSTER_PAIRS] or list(
        range(plan.worker_pairs)
    )
    return incomplete[visits % len(incomplete)]


@dataclasses.dataclass(frozen=True)
class Progress:
    """One moment of a benchmark's sampling, for a progress line: a look (``estimate`` and ``verdict``
    set; ``final`` for the last) or the start of the contended extension (``estimate`` None). ``complete``: complete clusters
    (one worker pair: visits) of ``planned``; ``seconds`` since sampling began; ``contended`` of
    ``pairs`` block pairs set aside so far."""

    complete: int
    planned: int
    seconds: float
    pairs: int
    contended: int
    estimate: RatioEstimate | None = None
    verdict: str = ""
    final: bool = False  # the benchmark's last look


def sequential_visits(
    visit: Callable[[int], list[PairSample]],
    settings: GateSettings,
    plan: SequentialPlan = SequentialPlan(),
    clock: Callable[[], float] = time.monotonic,
    floor_sd: float = 0.0,
    on_progress: Callable[[Progress], None] | None = None,
) -> SequentialOutcome:
    """Sample visits with ``visit(worker_pair)`` (the block pairs one visit timed, each labelled with its
    cluster) until decisive (rules in the module docstring); ``floor_sd``: the A/A noise floor of this
    benchmark (log units, 0: none); ``on_progress`` hears of each look and of the start of the
    contended extension (it decides nothing)."""
    samples: list[PairSample] = []
    fractions: list[float] = []  # information fraction of each look taken
    start, visits, last_planned = clock(), 0, plan.looks[-1]
    estimate, result, stopped, floored, note = None, Verdict.INCONCLUSIVE, "last look", False, ""
    told_extended = False

    def tell(complete: int, elapsed: float, **look) -> None:
        if on_progress:
            set_aside = sum(s.contended for s in samples)
            on_progress(Progress(complete, last_planned, elapsed, len(samples), set_aside, **look))

    while True:
        elapsed = clock() - start
        complete = complete_clusters(samples, plan.clustered, visits)
        contended = any(s.contended for s in samples)
        extended = contended and complete < last_planned
        out_of_time = visits > 0 and elapsed >= (plan.max_budget_s if extended else plan.budget_s)
        if extended and not out_of_time and elapsed >= plan.budget_s and not told_extended:
            told_extended = True
            tell(complete, elapsed)
        final = complete >= last_planned or out_of_time
        fraction, previous = (
            min(1.0, complete / last_planned),
            (fractions[-1] if fractions else 0.0),
        )
        if final or any(previous < n / last_planned <= fraction for n in plan.looks):
            fractions.append(1.0 if final else fraction)  # a last look spends what is left
            shared = final and 2 * sum(s.contended for s in samples) >= max(1, len(samples))
            level = nominal_levels(tuple(fractions), settings.alpha, final)[-1] * (
                0.5 if shared else 1.0
            )
            estimate, floored = look_estimate(samples, level, plan.clustered, floor_sd)
            result = verdict(estimate, settings)
            tell(complete, elapsed, estimate=estimate, verdict=result, final=final)
            if result in DECISIVE:
                stopped = "decisive"
                break
            if final:
                stopped = (
                    "last look" if complete >= last_planned else ("cap" if extended else "budget")
                )
                if shared:
                    result = CONTENDED_VERDICT
                    judged = contended_verdict(samples, settings, 2 * level)
                    if judged:
                        (estimate, note), result = judged, Verdict.SLOWER
                break
        samples.extend(visit(next_worker_pair(samples, plan, visits)))
        visits += 1
    return _outcome(
        samples, estimate, result, len(fractions), stopped, clock() - start, note, floored
    )


def _outcome(
    samples, estimate, result, looks, stopped, seconds, note, floored
) -> SequentialOutcome:
    return SequentialOutcome(
        [s.base_s for s in samples],
        [s.head_s for s in samples],
        [s.contended for s in samples],
        estimate,
        result,
        looks,
        stopped,
        seconds,
        [s.cluster for s in samples],
        note,
        [[s.base_wait, s.head_wait] for s in samples],
        [[s.base_cpu_s, s.head_cpu_s] for s in samples],
        floored,
    )
