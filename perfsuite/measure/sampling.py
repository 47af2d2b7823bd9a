"""When to stop sampling a benchmark: the median's confidence interval against a target.

A timed benchmark samples until its estimate is good, not a fixed count (nvbench's rule, on the
median instead of the mean): warm up by device time, then sample until the relative half-width of
the median's confidence interval reaches ``target_rel_spread`` (1% by default), or stops improving,
within a minimum number of samples, a minimum of summed sample time and a time limit. The
interval is distribution-free: two order statistics whose ranks come from the binomial
distribution of the number of samples below the true median (Conover, *Practical Nonparametric
Statistics*, 3rd ed., section 3.2; the same interval as ``scipy.stats.quantile_test(...).confidence_interval``).
Nothing here reads a clock: callers hand in samples and elapsed seconds, so the rule is tested
with seeded simulations.
"""

from __future__ import annotations

import dataclasses
import enum
import math
import statistics

from perfsuite.errors import DeviceTimingError


class Stop(enum.StrEnum):
    """Why sampling ended; only ``CONVERGED`` met the target."""

    CONVERGED = "converged"
    PLATEAU = "stopped improving"
    TIME_LIMIT = "time limit"
    MAX_SAMPLES = "sample limit"


@dataclasses.dataclass(frozen=True, kw_only=True)
class SamplingRule:
    """The stopping rule's settings (units in the names).

    ``target_rel_spread``: stop when the median's confidence-interval half-width / median is at
    most this (0.01 = 1%); ``confidence``: the interval's level; ``min_samples``/``min_sample_s``:
    neither a target nor a plateau stops before this many samples and this much summed sample
    time (nvbench: 0.5 s of GPU time; less here so a suite of many cases stays short);
    ``max_wall_s``: time limit of the sampling (host seconds, warm-up excluded);
    ``max_samples``: a hard cap; ``plateau_checks``: sampling stops improving when the spread has
    not shrunk by ``plateau_gain`` (0.05 = 5%) over this many checkpoints (each 25% more samples
    than the one before: 2 checkpoints ~ 1.6x the samples, where a stationary spread shrinks ~20%);
    ``warmup_s``: device seconds of untimed calls before sampling (clocks up; "tens of ms").
    """

    target_rel_spread: float = 0.01
    confidence: float = 0.95
    min_samples: int = 10
    min_sample_s: float = 0.02
    max_wall_s: float = 3.0
    max_samples: int = 5000
    plateau_checks: int = 3
    plateau_gain: float = 0.05
    warmup_s: float = 0.03

    def __post_init__(self) -> None:
        if not 0 < self.target_rel_spread < 1:
            raise DeviceTimingError(
                f"target_rel_spread must be in (0, 1), got {self.target_rel_spread!r}"
            )
        if not 0.5 < self.confidence < 1:
            raise DeviceTimingError(f"confidence must be in (0.5, 1), got {self.confidence!r}")
        if self.min_samples < 3 or self.max_samples < self.min_samples:
            raise DeviceTimingError(
                f"need 3 <= min_samples <= max_samples, got {self.min_samples} and {self.max_samples}"
            )
        if self.max_wall_s <= 0 or self.min_sample_s < 0 or self.warmup_s < 0:
            raise DeviceTimingError(
                f"max_wall_s must be > 0 and min_sample_s, warmup_s >= 0, got "
                f"{self.max_wall_s}, {self.min_sample_s}, {self.warmup_s}"
            )


def _binomial_cdf_half(k: int, n: int) -> float:
    """P(X <= k) for X ~ Binomial(n, 1/2)."""
    if k < 0:
        return 0.0
    if n <= 1000:
        return sum(math.comb(n, i) for i in range(k + 1)) / 2**n
    z = (k + 0.5 - n / 2) / (math.sqrt(n) / 2)  # normal approximation with continuity correction
    return 0.5 * math.erfc(-z / math.sqrt(2))


def median_interval_ranks(n: int, confidence: float = 0.95) -> tuple[int, int] | None:
    """0-based ranks ``(lo, hi)`` of the sorted samples bounding the median with at least
    ``confidence``; None when ``n`` samples are too few for that level (n < 6 at 95%).

    The largest ``j`` with ``P(X <= j - 1) <= (1 - confidence) / 2``, X ~ Binomial(n, 1/2), gives
    ``lo = j - 1`` (0-based) and ``hi = n - j`` by symmetry (Conover 3.2).
    """
    alpha = (1 - confidence) / 2
    j = 0
    while j + 1 <= n // 2 and _binomial_cdf_half(j, n) <= alpha:
        j += 1
    if j == 0:
        return None
    return j - 1, n - j


def median_interval(samples: list[float], confidence: float = 0.95) -> tuple[float, float] | None:
    """The order-statistic confidence interval of the median of ``samples`` (their unit); None
    when there are too few samples for ``confidence``."""
    ranks = median_interval_ranks(len(samples), confidence)
    if ranks is None:
        return None
    ordered = sorted(samples)
    return ordered[ranks[0]], ordered[ranks[1]]


def relative_spread(samples: list[float], confidence: float = 0.95) -> float:
    """Half-width of the median's interval / median (0.01 = 1%); ``inf`` with too few samples
    or a zero median."""
    interval = median_interval(samples, confidence)
    median = statistics.median(samples) if samples else 0.0
    if interval is None or median <= 0:
        return math.inf
    return (interval[1] - interval[0]) / 2 / median


@dataclasses.dataclass(frozen=True, kw_only=True)
class Estimate:
    """A sampled benchmark's estimate: median and interval (seconds), relative spread, samples
    kept, why sampling stopped, and whether that met the target."""

    median_s: float
    ci_low_s: float | None
    ci_high_s: float | None
    rel_spread: float
    samples: int
    stop: Stop
    target_rel_spread: float

    @property
    def converged(self) -> bool:
        return self.stop == Stop.CONVERGED

    def note(self) -> str:
        """``""`` when converged, else one line for the row: ``not converged: ...``."""
        if self.converged:
            return ""
        spread = "n/a" if math.isinf(self.rel_spread) else f"{self.rel_spread:.1%}"
        return (
            f"not converged: {self.stop} at {spread} spread of the median "
            f"(target {self.target_rel_spread:.1%}, {self.samples} samples)"
        )

    def as_dict(self) -> dict[str, object]:
        return {
            "median_s": self.median_s,
            "ci_low_s": self.ci_low_s,
            "ci_high_s": self.ci_high_s,
            "rel_spread": None if math.isinf(self.rel_spread) else self.rel_spread,
            "samples": self.samples,
            "stop": str(self.stop),
            "converged": self.converged,
            "target_rel_spread": self.target_rel_spread,
        }


class Sampler:
    """The stopping rule applied to samples as they come (``add``), ``done(elapsed_s)`` after each.

    Samples the caller flags (throttled, GPU ran dry) are not added; the rule sees kept samples only.
    """

    GROWTH = 1.25  # each checkpoint holds this many times the samples of the one before

    def __init__(self, rule: SamplingRule = SamplingRule()):
        self.rule = rule
        self.samples: list[float] = []
        self.checkpoints: list[float] = []  # the spread at each checkpoint
        self._next_check = rule.min_samples
        self.stop: Stop | None = None

    def add(self, sample_s: float) -> None:
        if not sample_s >= 0:
            raise DeviceTimingError(f"a sample of {sample_s!r} s; samples are >= 0 seconds")
        self.samples.append(sample_s)

    def done(self, elapsed_s: float) -> bool:
        """Whether to stop after ``elapsed_s`` host seconds of sampling; sets ``stop``."""
        rule, n = self.rule, len(self.samples)
        if n >= rule.max_samples:
            self.stop = Stop.MAX_SAMPLES
        elif elapsed_s >= rule.max_wall_s:
            self.stop = Stop.TIME_LIMIT
        elif n >= self._next_check and sum(self.samples) >= rule.min_sample_s:
            spread = relative_spread(self.samples, rule.confidence)
            self.checkpoints.append(spread)
            self._next_check = max(n + 1, math.ceil(n * self.GROWTH))
            if spread <= rule.target_rel_spread:
                self.stop = Stop.CONVERGED
            elif (
                len(self.checkpoints) > rule.plateau_checks
                and spread > (1 - rule.plateau_gain) * self.checkpoints[-1 - rule.plateau_checks]
            ):
                self.stop = Stop.PLATEAU
        return self.stop is not None

    def estimate(self) -> Estimate:
        """The estimate from the kept samples; raises ``DeviceTimingError`` without any."""
        if not self.samples:
            raise DeviceTimingError("no sample was kept; nothing to estimate")
        interval = median_interval(self.samples, self.rule.confidence)
        spread = relative_spread(self.samples, self.rule.confidence)
        stop = self.stop or (
            Stop.CONVERGED if spread <= self.rule.target_rel_spread else Stop.TIME_LIMIT
        )
        return Estimate(
            median_s=statistics.median(self.samples),
            ci_low_s=interval[0] if interval else None,
            ci_high_s=interval[1] if interval else None,
            rel_spread=spread,
            samples=len(self.samples),
            stop=stop,
            target_rel_spread=self.rule.target_rel_spread,
        )
