"""Statistics of the regression gate: is HEAD slower than BASE, by how much, how sure.

Each comparison estimates the ratio ``HEAD / BASE`` of typical times with a confidence interval,
computed on log-times and deterministic (the same data always gives the same verdict).

* Unpaired (two saved runs, ``unpaired_ratio``): the ratio of the medians of all rounds, with a
  **percentile bootstrap** interval (Efron & Tibshirani, "An Introduction to the Bootstrap",
  1993, ch. 13, fixed random seed) resampling the rounds of each run independently. Drift between the two runs
  does not cancel: prefer A/B runs for gating.
* Paired (A/B runs, ``sequential_paired`` below): base and head ran in alternating blocks
  (ABAB...) in the same time window; each block pair gives ``log(median(head block) /
  median(base block))`` (``pair_log_ratios``). Machine drift is shared by the two blocks of a
  pair, so it cancels.

Verdict (``verdict``), with ``alpha`` (two-sided) and ``min_effect``:

* ``slower``: the interval lies above 1 and the estimate is at least ``1 + min_effect``;
* ``faster``: the interval lies below 1 and the estimate is at most ``1 - min_effect``;
* ``no change``: the interval lies inside ``[1 - min_effect, 1 + min_effect]``;
* ``inconclusive``: anything else, or fewer than ``MIN_UNITS`` pairs (or rounds) to decide.

Implied false-alarm rate: under no change with independent units, the interval lies
entirely above 1 with probability at most ``alpha / 2``, and the effect-size floor only
lowers it, so each benchmark cries wolf with probability <= ``alpha / 2``; a gate over
``k`` benchmarks, by the union bound, <= ``k * alpha / 2``.

Sequential A/B (``sequential_paired``, what ``perfsuite ab`` runs): block pairs are added until
the verdict is decisive (``slower``, ``faster``, ``no change``), the last planned look is
reached, or a time budget runs out. At each look the interval is the distribution-free
**Wilcoxon signed-rank** interval of the pair log-ratios' centre (exact up to
``EXACT_SIGNED_RANK_MAX_N`` pairs, the normal approximation of its critical value above), around the Hodges-Lehmann
estimate (Hollander & Wolfe, "Nonparametric Statistical Methods", 2nd ed. 1999, section 3.3;
Walsh averages, Tukey 1949), computed at level ``alpha / K`` for at most ``K`` looks
(``SequentialPlan.looks``). By the union (Bonferroni) bound over the looks, the chance that any
interval a look could report misses the true ratio is at most ``K * alpha / K = alpha``
whatever the stopping rule does (the conservative Bonferroni form of alpha spending;
Jennison & Turnbull, "Group Sequential Methods", 2000, section 2.4), so the false-alarm bound above holds
unchanged. Assumptions: the pairs are independent and each pair's log-ratio is symmetric
about the true one (exchangeable sides, alternating order). Pairs timed under contention
(``perfsuite.measure.contention``) are kept or set aside by ``ContendedPairs`` before the
statistic; whether a pair is contended is decided by the scheduler's counters, not by its ratio.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import math
import statistics
import time
from collections.abc import Callable

import numpy as np


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
SEPARATE_RUNS_MIN_EFFECT = 0.15
BOOTSTRAP_SAMPLES = 4000
BOOTSTRAP_SEED = 20261130


@dataclasses.dataclass(frozen=True)
class RatioEstimate:
    """``ratio`` (HEAD / BASE typical time) with its ``low``/``high`` confidence bounds,
    from ``units`` independent units (block pairs, or the smaller run's rounds)."""

    ratio: float
    low: float
    high: float
    units: int
    method: str


@dataclasses.dataclass(frozen=True)
class GateSettings:
    """``alpha``: two-sided level of the interval; ``min_effect``: smallest change worth a verdict (0.03 = 3%).

    3% for A/B runs: with two worker processes per side, the lost ``masked_fill_`` (one score-sized
    copy) cost 3-8% in the calibration's gates on the 2-core machine, quiet and beside a CPU hog (docs/validation.md, "Gate
    error rates"); a 5% floor left a third of those gates ``inconclusive``.

    ``SEPARATE_RUNS_MIN_EFFECT`` is the default for comparing two separate runs: identical code
    measured 8-14% apart between separate smoke runs on the 2-core machine (drift the data of
    the two runs cannot show), so smaller changes are left to the interleaved A/B gate.
    """

    alpha: float = 0.01
    min_effect: float = 0.03

    def false_alarm_rate(self, benchmarks: int = 1) -> float:
        """Upper bound of the probability that identical code is flagged (see module docstring)."""
        return min(1.0, benchmarks * self.alpha / 2)


def _interval(values: np.ndarray, alpha: float) -> tuple[float, float]:
    return float(np.quantile(values, alpha / 2)), float(np.quantile(values, 1 - alpha / 2))


def unpaired_ratio(base: list[float], head: list[float], alpha: float) -> RatioEstimate:
    """Ratio of medians of two independent samples of round times (seconds)."""
    if not base or not head:
        raise ValueError("unpaired_ratio needs rounds from both runs")
    base_arr, head_arr = np.log(np.asarray(base)), np.log(np.asarray(head))
    rng = np.random.default_rng(BOOTSTRAP_SEED)
    base_boot = np.median(
        base_arr[rng.integers(0, len(base_arr), size=(BOOTSTRAP_SAMPLES, len(base_arr)))], axis=1
    )
    head_boot = np.median(
        head_arr[rng.integers(0, len(head_arr), size=(BOOTSTRAP_SAMPLES, len(head_arr)))], axis=1
    )
    low, high = _interval(head_boot - base_boot, alpha)
    ratio = math.exp(float(np.median(head_arr) - np.median(base_arr)))
    return RatioEstimate(
        ratio, math.exp(low), math.exp(high), min(len(base), len(head)), "unpaired"
    )


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


# -- sequential A/B ---------------------------------------------------------------------------

# Pairs at each look: roughly x1.5 apart, up to what one-round blocks give in a few seconds.
SEQUENTIAL_LOOKS = (12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024)
# Rounds per block: one call per side per pair. The machine's speed wanders on the scale of a
# 8-round block, so shorter blocks cancel more of it per second sampled (docs/validation.md,
# "Block length and clock").
BLOCK_ROUNDS = 1
# Worker processes per side. Where a process's buffers and threads land sets how fast it runs
# (and how much a change costs in it); rotating the pairs through several processes per side
# (``ab.pair_schedule``) averages that placement instead of leaving it a bias of one pair
# (docs/validation.md, "Gate error rates").
WORKERS_PER_SIDE = 2
# No verdict before this much sampling: beside a busy process, where the scheduler places each
# worker's threads biases a run of consecutive pairs for a fraction of a second, so the pairs of
# the first half second are not independent (false verdicts at 16 and 24 pairs were measured:
# docs/validation.md, "Gate beside a CPU hog").
MIN_SAMPLING_S = 2.0
CONTENDED_VERDICT = Verdict.CONTENDED
DECISIVE = (Verdict.SLOWER, Verdict.FASTER, Verdict.NO_CHANGE)


@functools.cache
def signed_rank_null_cdf(n: int) -> np.ndarray:
    """``P(W+ <= w)`` for ``w = 0 .. n(n+1)/2`` under the null of the Wilcoxon signed-rank statistic
    (each of ``n`` ranks positive with probability 1/2, independently): exact, by convolution."""
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n!r}")
    dist = np.ones(1)
    for rank in range(1, n + 1):
        grown = np.zeros(len(dist) + rank)
        grown[: len(dist)] += dist
        grown[rank:] += dist
        dist = grown / 2
    cdf = np.cumsum(dist)
    cdf.flags.writeable = False  # cached: shared by every caller
    return cdf


# Above this many values the signed-rank critical value comes from its normal approximation
# (the exact null has n(n+1)/2 + 1 points: 0.1 s to build at 1,000 values, for every new n).
EXACT_SIGNED_RANK_MAX_N = 400


def signed_rank_critical(n: int, alpha: float) -> int:
    """The largest ``c`` with ``P(W+ <= c) <= alpha / 2`` under the signed-rank null, or -1 if none.

    Exact (``signed_rank_null_cdf``) up to ``EXACT_SIGNED_RANK_MAX_N`` values; above, the normal
    approximation with continuity correction, mean ``n(n+1)/4`` and variance ``n(n+1)(2n+1)/24``
    (Hollander & Wolfe 1999, section 3.1, large-sample approximation), which
    ``tests/gate/test_stats.py`` checks against the exact value near the switch.
    """
    if n <= EXACT_SIGNED_RANK_MAX_N:
        within = np.nonzero(signed_rank_null_cdf(n) <= alpha / 2)[0]
        return int(within[-1]) if within.size else -1
    mean, sd = n * (n + 1) / 4, math.sqrt(n * (n + 1) * (2 * n + 1) / 24)
    return max(-1, math.floor(mean - 0.5 + sd * statistics.NormalDist().inv_cdf(alpha / 2)))


def wilcoxon_interval(values, alpha: float) -> tuple[float, float, float]:
    """Hodges-Lehmann estimate and ``1 - alpha`` signed-rank interval of the centre of ``values``.

    Returns ``(estimate, low, high)``; ``low``/``high`` are infinite when ``n`` is too small for
    the level (``2 * 2**-n > alpha``). Source: Hollander & Wolfe (1999) section 3.3: with ``M =
    n(n+1)/2`` sorted Walsh averages ``A`` and ``c`` the largest integer with ``P(W+ <= c) <= alpha/2``
    (``signed_rank_critical``: exact up to ``EXACT_SIGNED_RANK_MAX_N`` values), the interval is
    ``[A_(c+1), A_(M-c)]`` (1-based), coverage >= ``1 - alpha`` for values symmetric about the
    centre. ``ValueError`` on an empty sample or ``alpha`` outside (0, 1).
    """
    x = np.asarray(values, dtype=float)
    if x.size == 0:
        raise ValueError("wilcoxon_interval needs at least one value")
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must lie in (0, 1), got {alpha!r}")
    i, j = np.triu_indices(x.size)
    walsh = (x[i] + x[j]) / 2
    c = signed_rank_critical(x.size, alpha)
    middle = (walsh.size - 1) // 2, walsh.size // 2
    if c < 0:
        ranks = np.partition(walsh, middle)
        return float(ranks[list(middle)].mean()), -math.inf, math.inf
    ranks = np.partition(walsh, (c, *middle, walsh.size - 1 - c))
    estimate = float(ranks[list(middle)].mean())
    return estimate, float(ranks[c]), float(ranks[walsh.size - 1 - c])


def min_pairs(alpha: float) -> int:
    """Fewest values for which ``wilcoxon_interval`` at level ``1 - alpha`` is finite: the smallest
    ``n`` with ``2 * 2**-n <= alpha`` (its docstring); fewer pairs can never decide a gate."""
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must lie in (0, 1), got {alpha!r}")
    n = max(1, math.ceil(math.log2(2 / alpha)))
    return n if 2.0 ** (1 - n) <= alpha else n + 1


def pair_log_ratios(base_blocks: list[list[float]], head_blocks: list[list[float]]) -> np.ndarray:
    """``log(median(head block) / median(base block))`` per block pair (``ValueError`` on unequal
    numbers of blocks or an empty block)."""
    if len(base_blocks) != len(head_blocks) or any(not b for b in base_blocks + head_blocks):
        raise ValueError(
            f"need the same number of non-empty blocks, got {len(base_blocks)} base and "
            f"{len(head_blocks)} head blocks"
        )
    return np.array(
        [
            math.log(statistics.median(h) / statistics.median(b))
            for b, h in zip(base_blocks, head_blocks)
        ]
    )


@dataclasses.dataclass(frozen=True)
class SequentialPlan:
    """When the sequential gate looks, and how long it may sample one benchmark.

    ``looks``: numbers of uncontended block pairs at which the interval is computed (increasing,
    the first large enough for a finite interval at ``alpha / len(looks)``); ``budget_s``: wall
    seconds per benchmark after which no pair is added (one last look is then taken at the
    pairs so far, using a look of the plan that was not reached, so at most ``len(looks)``
    looks are ever taken); ``min_s``: no look before this many seconds of sampling (looks passed
    meanwhile are skipped, which spends less alpha, never more; the last look is taken when its
    pairs are reached, so a fast step never samples more than ``looks[-1]`` pairs).
    """

    looks: tuple[int, ...] = SEQUENTIAL_LOOKS
    budget_s: float = 8.0
    min_s: float = MIN_SAMPLING_S

    def __post_init__(self):
        if not self.looks or list(self.looks) != sorted(set(self.looks)) or self.looks[0] < 1:
            raise ValueError(f"looks must be increasing positive pair counts, got {self.looks!r}")
        if self.budget_s <= 0:
            raise ValueError(f"budget_s must be positive, got {self.budget_s!r}")
        if not 0 <= self.min_s:
            raise ValueError(f"min_s must be >= 0, got {self.min_s!r}")

    def alpha_per_look(self, alpha: float) -> float:
        """Bonferroni: ``alpha / len(looks)`` (see the module docstring)."""
        return alpha / len(self.looks)

    def describe(self, alpha: float) -> str:
        return (
            f"sequential: Wilcoxon signed-rank interval (Hollander & Wolfe 1999; exact up to "
            f"{EXACT_SIGNED_RANK_MAX_N} pairs, its normal approximation above) of per-block-pair log "
            f"ratios at up to {len(self.looks)} looks ({', '.join(map(str, self.looks))} pairs), each at level "
            f"{self.alpha_per_look(alpha):.2g} (Bonferroni over looks: overall {alpha:g}, valid whatever the "
            f"stopping rule), none before {self.min_s:g} s (a look passed by then, or cut short by the "
            f"budget, is taken at the pairs sampled so far), at most {self.budget_s:g} s per benchmark"
        )


@dataclasses.dataclass(frozen=True)
class SequentialOutcome:
    """What the sequential gate sampled and decided for one benchmark.

    ``contended``: per pair, whether either block was timed under contention (set aside);
    ``looks``: interval computations taken; ``stopped``: ``decisive``, ``last look`` or ``budget``.
    """

    base_blocks: list[list[float]]
    head_blocks: list[list[float]]
    contended: list[bool]
    estimate: RatioEstimate
    verdict: str
    looks: int
    stopped: str
    seconds: float


def _estimate(base_blocks, head_blocks, contended, alpha_look: float) -> RatioEstimate:
    clean = [(b, h) for b, h, c in zip(base_blocks, head_blocks, contended) if not c]
    if not clean:
        return RatioEstimate(1.0, 0.0, math.inf, 0, "paired sequential")
    logs = pair_log_ratios([b for b, _ in clean], [h for _, h in clean])
    centre, low, high = wilcoxon_interval(logs, alpha_look)
    return RatioEstimate(
        math.exp(centre), math.exp(low), math.exp(high), len(logs), "paired sequential"
    )


def sequential_paired(
    next_pair: Callable[[], tuple[list[float], list[float], bool]],
    settings: GateSettings,
    plan: SequentialPlan = SequentialPlan(),
    clock: Callable[[], float] = time.monotonic,
) -> SequentialOutcome:
    """Sample block pairs with ``next_pair()`` -> ``(base_block_s, head_block_s, contended)`` until decisive.

    Stops at the first look whose verdict is ``slower``, ``faster`` or ``no change``, after the
    last planned look, or when ``plan.budget_s`` (by ``clock``) is spent. The verdict is
    ``inconclusive: contended`` when it is not decisive and at least half the pairs were contended.
    """
    alpha_look = plan.alpha_per_look(settings.alpha)
    base_blocks, head_blocks, contended = [], [], []
    start, looks_taken, next_look, last_n = clock(), 0, 0, -1
    estimate, result, stopped = None, Verdict.INCONCLUSIVE, "last look"
    while True:
        clean = contended.count(False)
        elapsed = clock() - start
        out_of_time = elapsed >= plan.budget_s
        if next_look < len(plan.looks) and (
            (clean >= plan.looks[next_look] and (elapsed >= plan.min_s or clean >= plan.looks[-1]))
            or (out_of_time and clean > last_n)
        ):
            estimate = _estimate(base_blocks, head_blocks, contended, alpha_look)
            result = verdict(estimate, settings)
            looks_taken, last_n = looks_taken + 1, clean
            while next_look < len(plan.looks) and plan.looks[next_look] <= clean:
                next_look += 1
            if result in DECISIVE:
                stopped = "decisive"
                break
            if next_look >= len(plan.looks):
                break
        if out_of_time:
            stopped = "budget"
            break
        base, head, was_contended = next_pair()
        base_blocks.append(base)
        head_blocks.append(head)
        contended.append(bool(was_contended))
    if estimate is None:
        estimate = _estimate(base_blocks, head_blocks, contended, alpha_look)
        result = verdict(estimate, settings)
    if result not in DECISIVE and contended and 2 * sum(contended) >= len(contended):
        result = CONTENDED_VERDICT
    return SequentialOutcome(
        base_blocks, head_blocks, contended, estimate, result, looks_taken, stopped, clock() - start
    )
