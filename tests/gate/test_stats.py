"""The sequential A/B statistics on synthetic data: exact intervals, and the stated error rates
checked by simulation (seeded, so the counts are reproducible; no timings anywhere)."""

import itertools
import math

import numpy as np
import pytest

from perfsuite.gate import stats
from perfsuite.gate.stats import (
    CONTENDED_VERDICT,
    GateSettings,
    SequentialPlan,
    min_pairs,
    sequential_paired,
    signed_rank_null_cdf,
    wilcoxon_interval,
)

NO_BUDGET = 1e9


def binomial_upper(n: int, p: float, tail: float = 1e-3) -> int:
    """Smallest k with P(Bin(n, p) > k) <= tail: a count above it refutes a rate <= p."""
    total = 0.0
    for k in range(n + 1):
        log_term = math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)
        total += math.exp(log_term + k * math.log(p) + (n - k) * math.log1p(-p))
        if 1 - total <= tail:
            return k
    return n


def pair_source(rng, log_ratio: float, noise: float, rounds: int = 4, contended=lambda i: False):
    """``next_pair`` for ``sequential_paired``: log-normal rounds, a heavy-tailed shared drift per pair."""
    counter = itertools.count()

    def next_pair():
        i = next(counter)
        level = math.exp(0.3 * rng.standard_t(3))  # drift shared by both blocks of a pair
        base = list(level * np.exp(rng.normal(0, noise, rounds)))
        head = list(level * math.exp(log_ratio) * np.exp(rng.normal(0, noise, rounds)))
        return base, head, contended(i)

    return next_pair


def pair_clock():
    """A clock that advances one second per call: budgets count calls, not real time."""
    ticks = itertools.count()
    return lambda: float(next(ticks))


def test_signed_rank_null_matches_the_published_table():
    cdf = signed_rank_null_cdf(10)
    # n = 10: P(W+ <= 8) = 25/1024, P(W+ <= 10) = 43/1024 (Hollander & Wolfe 1999, table A.4)
    assert cdf[8] == pytest.approx(25 / 1024) and cdf[10] == pytest.approx(43 / 1024)
    assert cdf[-1] == pytest.approx(1.0) and len(cdf) == 10 * 11 // 2 + 1
    with pytest.raises(ValueError, match="-1"):
        signed_rank_null_cdf(-1)


def test_wilcoxon_interval_on_exact_samples():
    estimate, low, high = wilcoxon_interval([0.1] * 12, 0.01)
    assert (estimate, low, high) == pytest.approx((0.1, 0.1, 0.1))
    # too few values for the level: an unbounded interval, never a made-up one
    assert wilcoxon_interval([0.1] * 5, 0.01)[1:] == (-math.inf, math.inf)
    with pytest.raises(ValueError, match="alpha"):
        wilcoxon_interval([1.0], 1.5)
    with pytest.raises(ValueError, match="at least one"):
        wilcoxon_interval([], 0.1)


@pytest.mark.parametrize("alpha", [0.01 / 14, 0.01, 0.1])
def test_large_samples_use_a_normal_critical_value_close_to_the_exact_one(alpha, monkeypatch):
    """Above ``EXACT_SIGNED_RANK_MAX_N`` the critical value is approximated: near the switch it
    must agree with the exact one to 0.2% of the ranks, and never be larger (wider, not narrower)."""
    n = stats.EXACT_SIGNED_RANK_MAX_N
    exact = stats.signed_rank_critical(n, alpha)
    assert stats.signed_rank_critical(3, alpha) == -1  # too few values for this level
    monkeypatch.setattr(stats, "EXACT_SIGNED_RANK_MAX_N", 0)
    approx = stats.signed_rank_critical(n, alpha)
    assert exact - 0.002 * exact <= approx <= exact
    assert stats.signed_rank_critical(3, alpha) == -1  # the approximation says so too


def test_wilcoxon_interval_covers_the_centre_at_its_level():
    """Symmetric heavy-tailed samples: the interval misses the centre in at most alpha of draws."""
    rng = np.random.default_rng(5)
    alpha, draws = 0.1, 2000
    misses = 0
    for _ in range(draws):
        _, low, high = wilcoxon_interval(0.3 + rng.standard_t(3, 16), alpha)
        misses += not (low <= 0.3 <= high)
    assert misses <= binomial_upper(draws, alpha)


def run_many(
    n: int,
    seed: int,
    log_ratio: float,
    noise: float,
    settings: GateSettings,
    plan=SequentialPlan(budget_s=NO_BUDGET),
    contended=lambda i: False,
):
    rng = np.random.default_rng(seed)
    return [
        sequential_paired(
            pair_source(rng, log_ratio, noise, contended=contended),
            settings,
            plan,
            clock=pair_clock(),
        )
        for _ in range(n)
    ]


NOISY = (
    0.25  # per-round noise large enough that identical code rarely reaches "no change": many looks
)


def test_false_alarm_rate_under_optional_stopping_is_at_most_half_alpha():
    """Identical code, at alpha = 0.1 so the bound (5%) is measurable: flagged 'slower' at most alpha/2."""
    settings = GateSettings(alpha=0.1, min_effect=0.0)
    outcomes = run_many(600, 7, 0.0, NOISY, settings, SequentialPlan(budget_s=NO_BUDGET))
    assert sum(o.looks > 1 for o in outcomes) > 300  # the stopping rule was exercised
    slower = sum(o.verdict == "slower" for o in outcomes)
    assert slower <= binomial_upper(len(outcomes), settings.alpha / 2)


def test_the_same_simulation_catches_a_gate_that_ignores_its_looks(monkeypatch):
    """Without the Bonferroni split, looking repeatedly inflates false alarms past alpha/2: the check above can fail."""
    monkeypatch.setattr(SequentialPlan, "alpha_per_look", lambda self, alpha: alpha)
    settings = GateSettings(alpha=0.1, min_effect=0.0)
    outcomes = run_many(600, 7, 0.0, NOISY, settings, SequentialPlan(budget_s=NO_BUDGET))
    assert sum(o.verdict == "slower" for o in outcomes) > binomial_upper(
        len(outcomes), settings.alpha / 2
    )


def test_a_ten_percent_regression_is_caught_and_identical_code_confirmed():
    """alpha 0.01, min effect 5%, 3% noise per round and heavy-tailed drift between pairs."""
    settings = GateSettings(alpha=0.01, min_effect=0.05)
    regressed = run_many(200, 11, math.log(1.10), 0.03, settings)
    same = run_many(200, 12, 0.0, 0.03, settings)
    assert sum(o.verdict == "slower" for o in regressed) >= 196
    assert sum(o.verdict == "no change" for o in same) >= 190
    assert sum(o.verdict == "slower" for o in same) == 0
    assert max(len(o.base_blocks) for o in regressed + same) <= SequentialPlan().looks[-1]
    assert (
        np.median([len(o.base_blocks) for o in regressed]) <= 16
    )  # decided early, not at the last look


def test_it_stops_at_the_first_decisive_look():
    [outcome] = run_many(1, 3, math.log(1.5), 0.01, GateSettings())
    assert outcome.verdict == "slower" and outcome.stopped == "decisive" and outcome.looks == 1
    assert len(outcome.base_blocks) == SequentialPlan().looks[0]


def test_no_look_is_taken_before_the_minimum_sampling_time():
    """A clear 50% regression on a clock of 0.1 s per pair: not decided at the first planned look
    (12 pairs, 1.2 s), but at the first look after 5 s, on the pairs sampled by then."""
    plan = SequentialPlan(looks=(12, 16, 24, 32, 64), budget_s=NO_BUDGET, min_s=5)
    ticks = itertools.count()
    outcome = sequential_paired(
        pair_source(np.random.default_rng(3), math.log(1.5), 0.01),
        GateSettings(),
        plan,
        clock=lambda: 0.1 * next(ticks),
    )
    assert outcome.verdict == "slower" and outcome.looks == 1
    assert outcome.seconds >= 5 and 32 < len(outcome.base_blocks) < 64


def test_a_fast_step_stops_at_the_last_look_even_before_the_minimum_time():
    plan = SequentialPlan(looks=(12, 16), budget_s=NO_BUDGET, min_s=NO_BUDGET)
    [outcome] = run_many(1, 3, 0.0, 0.4, GateSettings(), plan)
    assert len(outcome.base_blocks) == 16 and outcome.looks == 1
    with pytest.raises(ValueError, match="min_s"):
        SequentialPlan(min_s=-1)


def test_the_budget_ends_sampling_with_one_last_look_inside_the_plan():
    plan = SequentialPlan(
        looks=(12, 16, 24, 32, 64), budget_s=40
    )  # the fake clock advances 1 s per reading
    [outcome] = run_many(1, 4, 0.0, 0.4, GateSettings(), plan)
    assert outcome.stopped == "budget" and 32 < len(outcome.base_blocks) < 64
    assert outcome.looks <= len(plan.looks)


def test_contended_pairs_are_set_aside_and_a_contended_gate_says_so():
    settings = GateSettings()
    [all_contended] = run_many(
        1, 5, math.log(2.0), 0.01, settings, SequentialPlan(budget_s=60), contended=lambda i: True
    )
    assert all_contended.verdict == CONTENDED_VERDICT and all_contended.estimate.units == 0
    # every third pair contended: the clean pairs still decide
    [some] = run_many(1, 6, math.log(1.2), 0.01, settings, contended=lambda i: i % 3 == 0)
    assert some.verdict == "slower" and some.estimate.units == SequentialPlan().looks[0]
    assert sum(some.contended) == len(some.contended) - some.estimate.units


@pytest.mark.parametrize("looks", [(), (16, 12), (0, 4)])
def test_a_bad_plan_names_its_looks(looks):
    with pytest.raises(ValueError, match="looks must be increasing"):
        SequentialPlan(looks=looks)


def test_the_stated_method_names_its_source_and_levels():
    text = SequentialPlan(looks=(12, 24), budget_s=5).describe(0.01)
    assert "Hollander & Wolfe" in text and "0.005" in text and "12, 24" in text
    assert "Bonferroni" in stats.__doc__ and "Jennison & Turnbull" in stats.__doc__


@pytest.mark.parametrize("alpha", [0.5, 0.1, 0.01, 0.01 / 7, 2**-6])
def test_min_pairs_is_where_the_interval_becomes_finite(alpha):
    n = min_pairs(alpha)
    assert math.isfinite(wilcoxon_interval(np.arange(n, dtype=float), alpha)[1])
    if n > 1:
        assert wilcoxon_interval(np.arange(n - 1, dtype=float), alpha)[1] == -math.inf


def test_an_inconclusive_change_below_the_minimum_effect_says_its_size():
    """A +2.9% change whose interval excludes 1 is not ``slower`` (under the 3% floor): the note says why."""
    estimate = stats.RatioEstimate(1.029, 1.014, 1.046, 547, "paired sequential")
    found = stats.verdict(estimate, GateSettings())
    assert found == "inconclusive"
    assert stats.below_min_effect(estimate, found, GateSettings()) == (
        "a +2.9% change, below the 3% minimum effect"
    )
    straddling = stats.RatioEstimate(1.02, 0.99, 1.06, 547, "paired sequential")
    assert stats.below_min_effect(straddling, "inconclusive", GateSettings()) == ""
