"""The stopping rule on seeded sample streams: it stops at the target, at a plateau of a noise
that does not average out, or at the time limit, and says which; the median's interval is the
order-statistic one."""

import math
import random

import pytest

from perfsuite.errors import DeviceTimingError
from perfsuite.measure.sampling import (
    Sampler,
    SamplingRule,
    Stop,
    median_interval,
    median_interval_ranks,
    relative_spread,
)


def test_median_interval_ranks_are_the_binomial_order_statistics():
    # n = 10: P(X <= 1) = 11/1024 <= 0.025 < P(X <= 2) = 56/1024, so x(2)..x(9) (Conover 3.2)
    assert median_interval_ranks(10) == (1, 8)
    assert median_interval_ranks(6) == (0, 5)  # 1/64 <= 0.025
    assert median_interval_ranks(5) is None  # 1/32 > 0.025: too few for 95%
    lo, hi = median_interval_ranks(2000)  # the normal approximation: n/2 -+ 1.96 sqrt(n)/2
    assert abs(lo - (1000 - 1.96 * math.sqrt(2000) / 2)) <= 2 and lo + hi == 1999
    assert median_interval(list(range(10, 0, -1))) == (2, 9)
    assert relative_spread([1.0] * 3) == math.inf and relative_spread([2.0] * 20) == 0.0


def run(sampler, draw, seconds_per_sample=1e-3):
    while True:
        sampler.add(draw())
        if sampler.done(len(sampler.samples) * seconds_per_sample):
            return sampler.estimate()


def test_low_noise_converges_at_the_target_after_the_minimums():
    rng = random.Random(1)
    rule = SamplingRule(min_samples=10, min_sample_s=0.002)
    estimate = run(Sampler(rule), lambda: 1e-4 * (1 + 0.01 * rng.gauss(0, 1)))
    assert estimate.stop == Stop.CONVERGED and estimate.converged and estimate.note() == ""
    assert estimate.rel_spread <= 0.01 and estimate.samples >= 20  # 20 x 0.1 ms = min_sample_s
    assert estimate.ci_low_s <= estimate.median_s <= estimate.ci_high_s


def test_two_modes_that_never_average_out_stop_at_a_plateau_not_converged():
    rng = random.Random(2)
    estimate = run(Sampler(SamplingRule(max_wall_s=100.0)), lambda: rng.choice((1e-4, 2e-4)))
    assert estimate.stop == Stop.PLATEAU and not estimate.converged
    assert estimate.note().startswith("not converged: stopped improving at ")


def test_heavy_noise_stops_at_the_time_limit_and_says_so():
    rng = random.Random(3)
    rule = SamplingRule(max_wall_s=0.05)
    estimate = run(Sampler(rule), lambda: 1e-4 * rng.lognormvariate(0, 0.5))
    assert estimate.stop == Stop.TIME_LIMIT and estimate.samples == 50
    assert "time limit" in estimate.note() and "target 1.0%" in estimate.note()
    assert estimate.as_dict()["converged"] is False


def test_bad_rules_and_samples_are_refused_by_name():
    with pytest.raises(DeviceTimingError, match="target_rel_spread must be in \\(0, 1\\), got 0"):
        SamplingRule(target_rel_spread=0)
    with pytest.raises(DeviceTimingError, match="min_samples <= max_samples, got 2"):
        SamplingRule(min_samples=2)
    with pytest.raises(DeviceTimingError, match="a sample of -1"):
        Sampler().add(-1)
    with pytest.raises(DeviceTimingError, match="no sample was kept"):
        Sampler().estimate()
