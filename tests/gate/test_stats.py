"""The sequential A/B statistics on synthetic data: exact intervals, and the stated error rates
checked by simulation (seeded, so the counts are reproducible; no timings anywhere)."""

import dataclasses
import functools
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


@pytest.mark.parametrize(
    "df, alpha, published",
    # Student's t, two-sided critical values (Abramowitz & Stegun 1964, table 26.10)
    [(1, 0.05, 12.706), (4, 0.01, 4.604), (5, 0.05, 2.571), (10, 0.01, 3.169), (30, 0.05, 2.042)],
)
def test_student_t_critical_values_match_the_published_table(df, alpha, published):
    assert stats.student_t_critical(df, alpha) == pytest.approx(published, abs=6e-4)
    with pytest.raises(ValueError, match="df must be a whole number"):
        stats.student_t_tail(1.0, 0)


def biased_workers_source(rng, log_ratio: float, bias_sd: float, clusters: int, labelled: bool):
    """``next_pair`` where each of ``clusters`` worker pairs carries its own bias: each base and each
    head worker draws a log-normal speed factor once per gate (sd ``bias_sd``), shared by every pair
    it times. ``labelled``: pairs carry their worker pair (the clustered interval), else not (the
    pooled signed-rank interval every pair was judged with before)."""
    bias = rng.normal(0, bias_sd, (clusters, 2))
    counter = itertools.count()

    def next_pair():
        i = next(counter)
        cluster = (i // 2) % clusters
        level = math.exp(0.3 * rng.standard_t(3))
        base = [level * math.exp(bias[cluster, 0] + rng.normal(0, 0.01))]
        head = [level * math.exp(log_ratio + bias[cluster, 1] + rng.normal(0, 0.01))]
        return stats.PairSample(base, head, False, cluster if labelled else None)

    return next_pair


def gates_with_worker_bias(labelled: bool, log_ratio: float, bias_sd: float, n: int, seed: int):
    rng = np.random.default_rng(seed)
    settings = GateSettings(alpha=0.1, min_effect=0.0)
    plan = SequentialPlan(looks=(12, 24, 48), budget_s=NO_BUDGET, min_s=0)
    return [
        sequential_paired(
            biased_workers_source(rng, log_ratio, bias_sd, 6, labelled),
            settings,
            plan,
            clock=pair_clock(),
        )
        for _ in range(n)
    ]


def test_the_clustered_interval_keeps_its_level_when_each_worker_pair_carries_a_bias():
    """Identical code, 6 worker pairs, each process 2% faster or slower than another at random
    (sd), per-pair noise 1%, alpha 0.1: the interval across worker pairs gives a verdict (either
    direction) in at most alpha of gates; the pooled interval, which takes the pairs as independent,
    gives one in more than three times as many (the worker pairs' biases decide it)."""
    clustered = gates_with_worker_bias(True, 0.0, 0.02, 300, 21)
    pooled = gates_with_worker_bias(False, 0.0, 0.02, 300, 21)
    false_clustered = sum(o.verdict in ("slower", "faster") for o in clustered)
    false_pooled = sum(o.verdict in ("slower", "faster") for o in pooled)
    assert false_clustered <= binomial_upper(300, 0.1)
    assert false_pooled > 3 * 0.1 * 300  # measured: 131 of 300 pooled, 18 clustered
    assert {o.estimate.clusters for o in clustered} == {6}
    assert {o.estimate.clusters for o in pooled} == {0}
    # ... and a real 20% slowdown is still caught across the same biased worker pairs
    regressed = gates_with_worker_bias(True, math.log(1.2), 0.02, 50, 22)
    assert sum(o.verdict == "slower" for o in regressed) >= 45


def test_clustered_interval_needs_two_clusters_of_three_pairs():
    values = [0.1, 0.2, 0.3, 0.1, 0.2, 0.3, 0.5]
    assert stats.clustered_interval(values, [0] * 7, 0.1)[1:] == (-math.inf, math.inf, 1)
    centre, low, high, q = stats.clustered_interval(values, [0, 0, 0, 1, 1, 1, 2], 0.1)
    assert q == 2 and centre == pytest.approx(0.2) and (low, high) == (0.2, 0.2)
    with pytest.raises(ValueError, match="7 values but 2 cluster labels"):
        stats.clustered_interval(values, [0, 1], 0.1)


def contended_source(rng, slowdown: float, head_waits, base_waits, extra: float):
    """Every pair contended: each block's threads waited a share ``w`` (uniform in ``head_waits``
    or ``base_waits``, ``(low, high)``) of their runnable time, which stretched the block by ``1 / (1 - w)``
    give or take 10% (the fair-sharing model's error), and the load's caches slowed it by up to
    ``extra`` more, at random; per-round noise 2%."""

    def block(factor, waits):
        w = rng.uniform(*waits)
        model = rng.uniform(0.9, 1.1) / (1 - w)
        stretch = factor * model * rng.uniform(1, 1 + extra) * math.exp(rng.normal(0, 0.02))
        return [stretch], w

    def next_pair():
        base, base_wait = block(1.0, base_waits)
        head, head_wait = block(slowdown, head_waits)
        return stats.PairSample(base, head, True, None, head_wait, base_wait)

    return next_pair


def test_an_eleven_times_slower_head_with_every_pair_contended_is_decided_slower():
    """The new user's gate beside a load: every pair contended and set aside. Before, the gate
    passed it as ``inconclusive: contended`` (reproduced with the contended rule off); now the
    contended pairs decide it against the floor their wait sets."""
    plan = SequentialPlan(budget_s=40, min_s=0)
    before = GateSettings(contended_min_effect=None)
    now = GateSettings()
    for settings, expected in ((before, CONTENDED_VERDICT), (now, "slower")):
        outcome = sequential_paired(
            contended_source(np.random.default_rng(30), 11.5, (0.3, 0.7), (0.3, 0.7), 0.1),
            settings,
            plan,
            clock=pair_clock(),
        )
        assert outcome.verdict == expected and sum(outcome.contended) == len(outcome.contended)
    assert outcome.estimate.ratio == pytest.approx(11.5, rel=0.2)
    assert "contended pairs" in outcome.contended_note and "x1.25 floor" in outcome.contended_note


def test_identical_code_is_never_slower_from_contended_pairs_and_a_2x_change_is():
    """Beside a heavy, uneven load that hits the head harder (head waits 30-85% of runnable time, the
    base's 0-30%; the model off by up to 10%, caches up to +10%): identical code, whose raw ratio is
    about x2 here, is never ``slower`` in 150 gates; a 2x change beside an even load (0-85%) is in 20
    of 20."""
    plan = SequentialPlan(looks=(12, 24), budget_s=30, min_s=0)
    rng = np.random.default_rng(31)

    def gates(slowdown, head_waits, base_waits, n):
        source = functools.partial(contended_source, rng, slowdown, head_waits, base_waits, 0.1)
        return [sequential_paired(source(), GateSettings(), plan, pair_clock()) for _ in range(n)]

    same = gates(1.0, (0.3, 0.85), (0.0, 0.3), 150)
    assert all(o.verdict == CONTENDED_VERDICT for o in same)
    raw = np.median([o.head_blocks[0][0] / o.base_blocks[0][0] for o in same])
    assert raw > 1.6  # what the pairs' plain ratios say: the correction is what keeps it unjudged
    assert all(o.verdict == "slower" for o in gates(2.0, (0.0, 0.85), (0.0, 0.85), 20))
    with pytest.raises(ValueError, match="2 ratios, 1 base and 2 head waits"):
        stats.wait_adjusted([0.0, 0.0], [0.1], [0.1, None])


def cpu_time_source(rng, work: float, wall_share: float, cache: float):
    """Every pair contended, both blocks waiting 40-80% of their runnable time: the head does ``work``
    times the base's work, but its wall ratio shows only ``work ** wall_share`` of it (the load's waits
    dominate the wall clock); each block's CPU seconds are its work, stretched by the load's caches by
    up to ``cache`` at random, with 5% noise."""

    def block(factor):
        w = rng.uniform(0.4, 0.8)
        cpu = factor * rng.uniform(1, 1 + cache) * math.exp(rng.normal(0, 0.05))
        wall = factor**wall_share / (1 - w) * math.exp(rng.normal(0, 0.2))
        return [wall], [cpu], w

    def next_pair():
        base, base_cpu, base_wait = block(1.0)
        head, head_cpu, head_wait = block(work)
        return stats.PairSample(
            base, head, True, None, head_wait, base_wait, base_cpu_s=base_cpu, head_cpu_s=head_cpu
        )

    return next_pair


def test_contended_pairs_judged_on_cpu_time_catch_a_2x_change_the_wall_clock_shrinks():
    """Beside busy processes a 2x change's wall ratio shrank to about x1.2 (calibration, two busy
    processes): the wall clause cannot decide it, the CPU-time clause does, in 20 of 20 gates; identical
    code, its CPU seconds stretched by the load's caches by up to 10% at random, is never ``slower`` in
    150; without CPU times (a device clock) the 2x change stays ``inconclusive: contended``."""
    plan = SequentialPlan(looks=(12, 24, 48), budget_s=60, min_s=0)
    rng = np.random.default_rng(32)

    def gates(work, n, source=cpu_time_source):
        return [
            sequential_paired(source(rng, work, 0.25, 0.1), GateSettings(), plan, pair_clock())
            for _ in range(n)
        ]

    assert all(o.verdict == CONTENDED_VERDICT for o in gates(1.0, 150))
    doubled = gates(2.0, 20)
    assert all(o.verdict == "slower" for o in doubled)
    assert all(
        "by CPU time" in o.contended_note and "x1.15 floor" in o.contended_note for o in doubled
    )
    assert all(o.estimate.ratio < 1.5 for o in doubled)  # the wall ratio the report shows

    def without_cpu(rng, work, wall_share, cache):
        source = cpu_time_source(rng, work, wall_share, cache)
        return lambda: dataclasses.replace(source(), base_cpu_s=None, head_cpu_s=None)

    assert all(o.verdict == CONTENDED_VERDICT for o in gates(2.0, 5, without_cpu))
