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

Worker processes as a random effect (``clustered_interval``, what ``perfsuite ab`` runs): the pairs
one pair of worker processes times share that pair's bias (where its memory and threads landed), so
they are not independent units. The A/B gate labels each pair with its worker pair (a cluster;
``WORKERS_PER_SIDE`` clusters) and takes its interval across the clusters: Student's t over the
clusters' Hodges-Lehmann estimates (Ibragimov & Mueller 2010). The units of the bound above are then
the worker pairs, independent processes: a bias of one worker pair widens the interval instead of
deciding it, and the bound holds whatever the size of that bias, provided the worker pairs' biases
are independent draws of one distribution with median 0 on both sides (the sides run the same
conditions) and each cluster's estimate is near normal.

Sequential A/B (``sequential_paired``, what ``perfsuite ab`` runs): block pairs are added until
the verdict is decisive (``slower``, ``faster``, ``no change``), the last planned look is
reached, or a time budget runs out. At each look the interval is the clustered one above when
the pairs carry worker pairs (more than one worker per side), else the distribution-free
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
When too few pairs were kept (at least half contended, nothing decided), ``contended_verdict``
judges the contended pairs once, as one of the K looks, against a minimum effect that grows with
the measured wait: a 10x slowdown is ``slower`` under any load, identical code is not.
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
BOOTSTRAP_SAMPLES = 4000
BOOTSTRAP_SEED = 20261130


@dataclasses.dataclass(frozen=True)
class RatioEstimate:
    """``ratio`` (HEAD / BASE typical time) with its ``low``/``high`` confidence bounds,
    from ``units`` units (block pairs, or the smaller run's rounds); ``clusters``: the worker
    pairs the interval was taken across (``clustered_interval``), 0 when the units were taken
    as independent."""

    ratio: float
    low: float
    high: float
    units: int
    method: str
    clusters: int = 0


@dataclasses.dataclass(frozen=True)
class GateSettings:
    """``alpha``: two-sided level of the interval; ``min_effect``: smallest change worth a verdict (0.03 = 3%).

    3% for A/B runs: with two worker processes per side, the lost ``masked_fill_`` (one score-sized
    copy) cost 3-8% in the calibration's gates on the 2-core machine, quiet and beside a CPU hog (docs/validation.md, "Gate
    error rates"); a 5% floor left a third of those gates ``inconclusive``.

    ``contended_min_effect``: the margin of ``contended_verdict`` (``CONTENDED_MIN_EFFECT``); None
    leaves contended pairs undecided (``inconclusive: contended``), as before that rule.

    ``SEPARATE_RUNS_MIN_EFFECT`` is the default for comparing two separate runs: identical code
    measured 8-14% apart between separate smoke runs on the 2-core machine (drift the data of
    the two runs cannot show), so smaller changes are left to the interleaved A/B gate.
    """

    alpha: float = 0.01
    min_effect: float = 0.03
    # ``contended_verdict``'s floor beyond the measured wait; None: contended pairs decide nothing
    contended_min_effect: float | None = CONTENDED_MIN_EFFECT

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
# (and how much a change costs in it): a bias of the process, shared by every pair it times. The
# gate pairs base worker i with head worker i (``ab.pair_schedule``), one cluster per worker pair,
# and takes its interval across the clusters (``clustered_interval``), so that bias is a random
# effect that widens the interval instead of deciding it. Six pairs of processes give the t
# interval 5 degrees of freedom; fewer leave it too wide to decide a few percent (at 2 clusters,
# 1 degree of freedom, the critical value at the gate's per-look level is in the hundreds).
WORKERS_PER_SIDE = 6
# A cluster (worker pair) counts at a look once it holds this many kept pairs: its estimate is then
# a Hodges-Lehmann centre of at least 3 log ratios, not one pair's ratio.
MIN_CLUSTER_PAIRS = 3
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


def student_t_tail(t: float, df: int) -> float:
    """``P(|T| > t)`` for Student's t with ``df`` (a whole number >= 1) degrees of freedom.

    Closed forms for whole ``df`` (Abramowitz & Stegun, "Handbook of Mathematical Functions",
    1964, 26.7.3 odd / 26.7.4 even): with ``theta = atan(t / sqrt(df))``, ``P(|T| <= t)`` is
    ``2/pi (theta + sin cos (1 + 2/3 cos^2 + 2*4/(3*5) cos^4 + ...))`` for odd ``df`` and
    ``sin (1 + 1/2 cos^2 + 1*3/(2*4) cos^4 + ...)`` for even ``df``. ``ValueError`` on ``df < 1``.
    """
    if df < 1 or int(df) != df:
        raise ValueError(f"df must be a whole number >= 1, got {df!r}")
    if t <= 0:
        return 1.0
    theta = math.atan(t / math.sqrt(df))
    sin, cos2 = math.sin(theta), math.cos(theta) ** 2
    if df % 2:
        total, term = 0.0, 1.0
        if df > 1:
            total = 1.0
            for k in range(1, (df - 3) // 2 + 1):
                term *= cos2 * (2 * k) / (2 * k + 1)
                total += term
        inside = 2 / math.pi * (theta + sin * math.cos(theta) * total)
    else:
        total, term = 1.0, 1.0
        for k in range(1, (df - 2) // 2 + 1):
            term *= cos2 * (2 * k - 1) / (2 * k)
            total += term
        inside = sin * total
    return max(0.0, 1.0 - inside)


def student_t_critical(df: int, alpha: float) -> float:
    """The ``t`` with ``P(|T| > t) = alpha`` (two-sided) for ``df`` degrees of freedom, by bisection
    on ``student_t_tail`` to 1e-9 relative. ``ValueError`` on ``alpha`` outside (0, 1)."""
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must lie in (0, 1), got {alpha!r}")
    low, high = 0.0, 1.0
    while student_t_tail(high, df) > alpha:
        high *= 2
    while high - low > 1e-9 * high:
        middle = (low + high) / 2
        low, high = (middle, high) if student_t_tail(middle, df) > alpha else (low, middle)
    return high


def cluster_estimates(
    values, clusters, min_pairs_per_cluster: int = MIN_CLUSTER_PAIRS
) -> np.ndarray:
    """The Hodges-Lehmann centre of each cluster's ``values`` (clusters in first-seen order), for
    clusters holding at least ``min_pairs_per_cluster`` values; ``ValueError`` on unequal lengths."""
    if len(values) != len(clusters):
        raise ValueError(f"{len(values)} values but {len(clusters)} cluster labels")
    grouped: dict = {}
    for value, cluster in zip(values, clusters):
        grouped.setdefault(cluster, []).append(value)
    return np.array(
        [
            wilcoxon_interval(group, 0.5)[0]
            for group in grouped.values()
            if len(group) >= min_pairs_per_cluster
        ]
    )


def clustered_interval(values, clusters, alpha: float) -> tuple[float, float, float, int]:
    """Estimate and ``1 - alpha`` interval of the centre of ``values`` whose clusters are independent
    but whose values within a cluster share a cluster effect (a worker process's bias).

    Each cluster with at least ``MIN_CLUSTER_PAIRS`` values gives one estimate (its Hodges-Lehmann
    centre, ``cluster_estimates``); the interval is Student's t across the ``q`` cluster estimates
    with ``q - 1`` degrees of freedom: ``mean +- t(q-1, alpha) * sd / sqrt(q)``. Source: Ibragimov &
    Mueller, "t-Statistic Based Correlation and Heterogeneity Robust Inference", Journal of Business
    & Economic Statistics 28(4), 2010: with independent, approximately normal group estimates the
    t test keeps its level for any ``q >= 2`` even when the groups' variances differ (conservative
    for two-sided levels up to 8.3%); how many values a cluster holds, and how they are correlated
    inside it, does not matter. So a bias of one worker pair widens the interval (it shows as a
    spread between cluster estimates) instead of deciding it.

    Returns ``(estimate, low, high, q)``; ``low``/``high`` are infinite below 2 clusters.
    """
    estimates = cluster_estimates(values, clusters)
    q = len(estimates)
    if q == 0:
        return 0.0, -math.inf, math.inf, 0
    centre = float(estimates.mean())
    if q < 2:
        return centre, -math.inf, math.inf, q
    half = student_t_critical(q - 1, alpha) * float(estimates.std(ddof=1)) / math.sqrt(q)
    return centre, centre - half, centre + half, q


@dataclasses.dataclass(frozen=True)
class PairSample:
    """One block pair as ``next_pair()`` gives it to ``sequential_paired``.

    ``base_s``/``head_s``: the blocks' round times (seconds); ``contended``: set aside from the kept
    pairs; ``cluster``: the worker pair that timed it (None: pairs taken as independent);
    ``head_wait``/``base_wait``: the share of the head's / base's block's runnable thread time spent
    waiting for a CPU (``contention.wait_share``), None where unknown; ``base_cpu_s``/``head_cpu_s``:
    the blocks' rounds in the worker's CPU seconds over all its threads (host clock only; None on a
    device clock, where host CPU time is not the work timed).
    """

    base_s: list[float]
    head_s: list[float]
    contended: bool
    cluster: object = None
    head_wait: float | None = None
    base_wait: float | None = None
    base_cpu_s: list[float] | None = None
    head_cpu_s: list[float] | None = None


def as_pair_sample(found) -> PairSample:
    """A ``PairSample`` as is, or one from a ``(base_s, head_s, contended)`` tuple."""
    if isinstance(found, PairSample):
        return found
    base, head, contended = found
    return PairSample(base, head, bool(contended))


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
    _, low, _ = wilcoxon_interval(adjusted, half)
    if low > math.log1p(settings.contended_min_effect):
        return estimate, (
            f"decided on {len(judged)} contended pairs: wait-adjusted interval above the "
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

    def describe(self, alpha: float, clustered: bool = False) -> str:
        """The plan in one line for the report's method; ``clustered``: the interval is taken
        across worker pairs (``clustered_interval``)."""
        interval = (
            "t interval across worker pairs (Ibragimov & Mueller 2010) of each pair's Hodges-Lehmann "
            "estimate (Hollander & Wolfe 1999)"
            if clustered
            else f"Wilcoxon signed-rank interval (Hollander & Wolfe 1999; exact up to "
            f"{EXACT_SIGNED_RANK_MAX_N} pairs, its normal approximation above)"
        )
        return (
            f"sequential: {interval} of per-block-pair log "
            f"ratios at up to {len(self.looks)} looks ({', '.join(map(str, self.looks))} pairs), each at level "
            f"{self.alpha_per_look(alpha):.2g} (Bonferroni over looks: overall {alpha:g}, valid whatever the "
            f"stopping rule), none before {self.min_s:g} s (a look passed by then, or cut short by the "
            f"budget, is taken at the pairs sampled so far), at most {self.budget_s:g} s per benchmark"
        )


@dataclasses.dataclass(frozen=True)
class SequentialOutcome:
    """What the sequential gate sampled and decided for one benchmark.

    ``contended``: per pair, whether either block was timed under contention (set aside);
    ``looks``: interval computations taken; ``stopped``: ``decisive``, ``last look`` or ``budget``;
    ``clusters``: per pair, the worker pair that timed it (None: no clusters);
    ``contended_note``: how the contended pairs decided (``contended_verdict``), "" when they did not;
    ``wait_shares``: per pair, ``[base, head]`` blocks' wait shares (``PairSample``);
    ``cpu_seconds``: per pair, ``[base, head]`` blocks' CPU seconds (``PairSample``; None entries on a
    device clock).
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


def _estimate(samples: list[PairSample], alpha_look: float) -> RatioEstimate:
    """The kept pairs' estimate: across clusters (``clustered_interval``) when the pairs carry
    clusters, else the signed-rank interval of the pairs taken as independent."""
    clean = [s for s in samples if not s.contended]
    if not clean:
        return RatioEstimate(1.0, 0.0, math.inf, 0, "paired sequential")
    logs = pair_log_ratios([s.base_s for s in clean], [s.head_s for s in clean])
    if any(s.cluster is not None for s in clean):
        centre, low, high, q = clustered_interval(logs, [s.cluster for s in clean], alpha_look)
        return RatioEstimate(
            math.exp(centre), math.exp(low), math.exp(high), len(logs), "clustered sequential", q
        )
    centre, low, high = wilcoxon_interval(logs, alpha_look)
    return RatioEstimate(
        math.exp(centre), math.exp(low), math.exp(high), len(logs), "paired sequential"
    )


def sequential_paired(
    next_pair: Callable[[], PairSample | tuple[list[float], list[float], bool]],
    settings: GateSettings,
    plan: SequentialPlan = SequentialPlan(),
    clock: Callable[[], float] = time.monotonic,
) -> SequentialOutcome:
    """Sample block pairs with ``next_pair()`` (a ``PairSample``, or ``(base_block_s, head_block_s,
    contended)``) until decisive.

    Stops at the first look whose verdict is ``slower``, ``faster`` or ``no change``, after the
    last planned look, or when ``plan.budget_s`` (by ``clock``) is spent. When it is not decisive and
    at least half the pairs were contended, the contended pairs are judged once more, as one of the
    plan's looks not taken (``contended_verdict``: only a change beyond what contention could make);
    when they decide nothing the verdict is ``inconclusive: contended``.
    """
    alpha_look = plan.alpha_per_look(settings.alpha)
    samples: list[PairSample] = []
    start, looks_taken, next_look, last_n = clock(), 0, 0, -1
    estimate, result, stopped = None, Verdict.INCONCLUSIVE, "last look"
    while True:
        clean = sum(not s.contended for s in samples)
        elapsed = clock() - start
        out_of_time = elapsed >= plan.budget_s
        if next_look < len(plan.looks) and (
            (clean >= plan.looks[next_look] and (elapsed >= plan.min_s or clean >= plan.looks[-1]))
            or (out_of_time and clean > last_n)
        ):
            estimate = _estimate(samples, alpha_look)
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
        samples.append(as_pair_sample(next_pair()))
    if estimate is None:
        estimate = _estimate(samples, alpha_look)
        result = verdict(estimate, settings)
    contended = [s.contended for s in samples]
    note = ""
    if result not in DECISIVE and contended and 2 * sum(contended) >= len(contended):
        result = CONTENDED_VERDICT
        if looks_taken < len(plan.looks):  # the contended look is one of the plan's K looks
            judged = contended_verdict(samples, settings, alpha_look)
            looks_taken += 1
            if judged:
                (estimate, note), result = judged, Verdict.SLOWER
    return SequentialOutcome(
        [s.base_s for s in samples],
        [s.head_s for s in samples],
        contended,
        estimate,
        result,
        looks_taken,
        stopped,
        clock() - start,
        [s.cluster for s in samples],
        note,
        [[s.base_wait, s.head_wait] for s in samples],
        [[s.base_cpu_s, s.head_cpu_s] for s in samples],
    )
