"""Intervals of the gate: a ratio of typical times with its confidence bounds, from block pairs
(paired, per worker pair or pooled) or from two separate runs (unpaired).

Every estimate is on log times, deterministic (the same data always gives the same interval).

* Unpaired (two saved runs, ``unpaired_ratio``): the ratio of the medians of all rounds, with a
  **percentile bootstrap** interval (Efron & Tibshirani, "An Introduction to the Bootstrap",
  1993, ch. 13, fixed random seed) resampling the rounds of each run independently. Drift between
  the two runs does not cancel: prefer A/B runs for gating.
* Paired (A/B runs): base and head ran in alternating blocks in the same time window; each block pair
  gives ``log(median(head block) / median(base block))`` (``pair_log_ratios``). Machine drift is shared
  by the two blocks of a pair, so it cancels.
* Pooled pairs (one worker process per side): the distribution-free **Wilcoxon signed-rank** interval
  of the pair log-ratios' centre around the Hodges-Lehmann estimate (``wilcoxon_interval``).
* Worker pairs as clusters (``clustered_interval``, what ``perfsuite ab`` runs): the pairs one pair of
  worker processes times share that pair's bias (where its memory and threads landed), so they are not
  independent units; Student's t across the worker pairs' estimates (Ibragimov & Mueller 2010), with as
  many degrees of freedom as worker pairs less one, so a bias of one worker pair widens the interval
  instead of deciding it.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import statistics

import numpy as np


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


# A cluster (worker pair) counts once it holds this many kept pairs: its estimate is then a
# Hodges-Lehmann centre of at least 3 log ratios, not one pair's ratio.
MIN_CLUSTER_PAIRS = 3


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
    """One block pair as ``next_pair()`` gives it to ``sequential.sequential_visits``.

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
