"""Statistics of the regression gate: is HEAD slower than BASE, by how much, how sure.

Method: **percentile bootstrap** confidence interval (Efron & Tibshirani, "An Introduction to
the Bootstrap", 1993, ch. 13) of the ratio ``HEAD / BASE`` of typical times, computed on
log-times with a fixed random seed, so the same data always gives the same verdict.

* Paired (A/B runs, ``paired_ratio``): base and head ran in alternating blocks (ABAB...) in
  the same time window. Each block pair gives ``log(median(head block) / median(base block))``;
  the estimate is the median of those, and the bootstrap resamples pairs. Machine drift is
  shared by the two blocks of a pair, so it cancels.
* Unpaired (two saved runs, ``unpaired_ratio``): the ratio of the medians of all rounds, the
  bootstrap resampling the rounds of each run independently. Drift between the two runs
  does not cancel: prefer A/B runs for gating.

Verdict (``verdict``), with ``alpha`` (two-sided) and ``min_effect``:

* ``slower``: the interval lies above 1 and the estimate is at least ``1 + min_effect``;
* ``faster``: the interval lies below 1 and the estimate is at most ``1 - min_effect``;
* ``no change``: the interval lies inside ``[1 - min_effect, 1 + min_effect]``;
* ``inconclusive``: anything else, or fewer than ``MIN_UNITS`` pairs (or rounds) to decide.

Implied false-alarm rate: under no change with independent units, the interval lies
entirely above 1 with probability at most ``alpha / 2``, and the effect-size floor only
lowers it, so each benchmark cries wolf with probability <= ``alpha / 2``; a gate over
``k`` benchmarks, by the union bound, <= ``k * alpha / 2``.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

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
    """``alpha``: two-sided level of the interval; ``min_effect``: smallest change worth a verdict (0.05 = 5%).

    ``SEPARATE_RUNS_MIN_EFFECT`` is the default for comparing two separate runs: identical code
    measured 8-14% apart between separate smoke runs on the 2-core machine (drift the data of
    the two runs cannot show), so smaller changes are left to the interleaved A/B gate.
    """

    alpha: float = 0.01
    min_effect: float = 0.05

    def false_alarm_rate(self, benchmarks: int = 1) -> float:
        """Upper bound of the probability that identical code is flagged (see module docstring)."""
        return min(1.0, benchmarks * self.alpha / 2)


def _interval(values: np.ndarray, alpha: float) -> tuple[float, float]:
    return float(np.quantile(values, alpha / 2)), float(np.quantile(values, 1 - alpha / 2))


def paired_ratio(base_blocks: list[list[float]], head_blocks: list[list[float]], alpha: float) -> RatioEstimate:
    """Ratio from alternating blocks: ``base_blocks[i]`` and ``head_blocks[i]`` ran back to back.

    Raises ``ValueError`` when the two lists differ in length or a block is empty.
    """
    if len(base_blocks) != len(head_blocks) or any(not b for b in base_blocks + head_blocks):
        raise ValueError("paired_ratio needs the same number of non-empty base and head blocks")
    logs = np.array([math.log(np.median(h) / np.median(b)) for b, h in zip(base_blocks, head_blocks)])
    if len(logs) < 2:
        return RatioEstimate(math.exp(float(logs.mean())) if len(logs) else 1.0, 0.0, math.inf, len(logs), "paired")
    rng = np.random.default_rng(BOOTSTRAP_SEED)
    picks = rng.integers(0, len(logs), size=(BOOTSTRAP_SAMPLES, len(logs)))
    medians = np.median(logs[picks], axis=1)
    low, high = _interval(medians, alpha)
    return RatioEstimate(math.exp(float(np.median(logs))), math.exp(low), math.exp(high), len(logs), "paired")


def unpaired_ratio(base: list[float], head: list[float], alpha: float) -> RatioEstimate:
    """Ratio of medians of two independent samples of round times (seconds)."""
    if not base or not head:
        raise ValueError("unpaired_ratio needs rounds from both runs")
    base_arr, head_arr = np.log(np.asarray(base)), np.log(np.asarray(head))
    rng = np.random.default_rng(BOOTSTRAP_SEED)
    base_boot = np.median(base_arr[rng.integers(0, len(base_arr), size=(BOOTSTRAP_SAMPLES, len(base_arr)))], axis=1)
    head_boot = np.median(head_arr[rng.integers(0, len(head_arr), size=(BOOTSTRAP_SAMPLES, len(head_arr)))], axis=1)
    low, high = _interval(head_boot - base_boot, alpha)
    ratio = math.exp(float(np.median(head_arr) - np.median(base_arr)))
    return RatioEstimate(ratio, math.exp(low), math.exp(high), min(len(base), len(head)), "unpaired")


def verdict(estimate: RatioEstimate, settings: GateSettings) -> str:
    """``slower``, ``faster``, ``no change`` or ``inconclusive`` (rules in the module docstring)."""
    if estimate.units < MIN_UNITS:
        return "inconclusive"
    if estimate.low > 1 and estimate.ratio >= 1 + settings.min_effect:
        return "slower"
    if estimate.high < 1 and estimate.ratio <= 1 - settings.min_effect:
        return "faster"
    if 1 - settings.min_effect <= estimate.low and estimate.high <= 1 + settings.min_effect:
        return "no change"
    return "inconclusive"
