"""The gate's statistics on synthetic data: exact intervals, and the stated error rates of the
sequential rule over worker pairs checked by simulation (seeded, so the counts are reproducible; no
timings anywhere: a simulated visit returns its block pairs, a simulated clock counts visits)."""

import dataclasses
import math

import numpy as np
import pytest

from perfsuite.gate import intervals, sequential, spending, stats
from perfsuite.gate.stats import (
    CONTENDED_VERDICT,
    GateSettings,
    PairSample,
    SequentialPlan,
    min_pairs,
    nominal_levels,
    sequential_visits,
    signed_rank_null_cdf,
    wilcoxon_interval,
)

NO_BUDGET = {"budget_s": 1e9, "max_budget_s": 1e9}
# Many looks (one per worker pair from the third): the stopping rule is exercised at every look.
EVERY_PAIR = SequentialPlan(looks=(3, 4, 5, 6, 7, 8), **NO_BUDGET)


def binomial_upper(n: int, p: float, tail: float = 1e-3) -> int:
    """Smallest k with P(Bin(n, p) > k) <= tail: a count above it refutes a rate <= p."""
    total = 0.0
    for k in range(n + 1):
        log_term = math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)
        total += math.exp(log_term + k * math.log(p) + (n - k) * math.log1p(-p))
        if 1 - total <= tail:
            return k
    return n


class SimulatedVisits:
    """``visit`` for ``sequential_visits``: each visit of worker pair ``c`` gives ``blocks`` block pairs
    ``pair(c, i)`` (``i`` counts the gate's pairs), and the clock advances ``visit_s`` seconds."""

    def __init__(self, pair, blocks: int = 5, visit_s: float = 1.0):
        self.pair, self.blocks, self.visit_s = pair, blocks, visit_s
        self.now, self.visited, self.pairs = 0.0, [], 0

    def clock(self) -> float:
        return self.now

    def __call__(self, cluster: int) -> list[PairSample]:
        self.now += self.visit_s
        self.visited.append(cluster)
        found = [self.pair(cluster, self.pairs + j) for j in range(self.blocks)]
        self.pairs += self.blocks
        return found


def run_gate(pair, settings, plan=SequentialPlan(), blocks=5, floor_sd=0.0):
    """One simulated gate: its outcome and its visits."""
    visits = SimulatedVisits(pair, blocks)
    return sequential_visits(visits, settings, plan, visits.clock, floor_sd), visits


def drift_pairs(
    rng,
    log_ratio: float,
    noise: float,
    rounds: int = 4,
    bias_sd: float = 0.0,
    contended=lambda i: False,
    processes: int | None = None,
):
    """``pair(c, i)``: log-normal rounds (sd ``noise``), a heavy-tailed drift shared by both blocks of a
    pair, and each process's bias (log sd ``bias_sd``, drawn once per gate and process) shared by
    every pair it times; pair ``i`` contended when ``contended(i)``. Worker pair ``c`` times the pair,
    which carries its label; with ``processes``, visit after visit goes to the next of that many biased
    process pairs instead and the pairs carry no label (the pooled interval over several processes)."""
    biases: dict = {}

    def pair(cluster, i):
        process = cluster if processes is None else (i // 5) % processes
        bias = biases.setdefault(process, rng.normal(0, bias_sd, 2))
        level = math.exp(0.3 * rng.standard_t(3))  # drift shared by both blocks of a pair
        base = list(level * math.exp(bias[0]) * np.exp(rng.normal(0, noise, rounds)))
        head = list(level * math.exp(log_ratio + bias[1]) * np.exp(rng.normal(0, noise, rounds)))
        return PairSample(base, head, contended(i), cluster if processes is None else None)

    return pair


def run_many(n, seed, log_ratio, noise, settings, plan=SequentialPlan(**NO_BUDGET), **kwargs):
    rng = np.random.default_rng(seed)
    return [
        run_gate(drift_pairs(rng, log_ratio, noise, **kwargs), settings, plan)[0] for _ in range(n)
    ]


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


@pytest.mark.parametrize("alpha", [0.001, 0.01, 0.1])
def test_large_samples_use_a_normal_critical_value_close_to_the_exact_one(alpha, monkeypatch):
    """Above ``EXACT_SIGNED_RANK_MAX_N`` the critical value is approximated: near the switch it
    must agree with the exact one to 0.2% of the ranks, and never be larger (wider, not narrower)."""
    n = intervals.EXACT_SIGNED_RANK_MAX_N
    exact = stats.signed_rank_critical(n, alpha)
    assert stats.signed_rank_critical(3, alpha) == -1  # too few values for this level
    monkeypatch.setattr(intervals, "EXACT_SIGNED_RANK_MAX_N", 0)
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


NOISY = 0.25  # per-round noise large enough that identical code never reaches "no change" early


@pytest.mark.parametrize(
    "plan", [EVERY_PAIR, SequentialPlan(**NO_BUDGET)], ids=["6 looks", "planned"]
)
def test_false_alarm_rate_under_optional_stopping_is_at_most_alpha_each_way(plan):
    """Identical code, 8 worker pairs looked at after every pair from the third (6 looks), or at the
    planned 4, 6 and 8, at alpha 0.05 so the bound is measurable: 'slower' and 'faster' each in at most
    alpha of gates (measured: 31 and 31 of 600 with 6 looks)."""
    settings = GateSettings(alpha=0.05, min_effect=0.0)
    outcomes = run_many(600, 7, 0.0, NOISY, settings, plan)
    assert sum(o.looks > 1 for o in outcomes) > 500  # the stopping rule was exercised
    bound = binomial_upper(len(outcomes), settings.alpha)
    assert sum(o.verdict == "slower" for o in outcomes) <= bound
    assert sum(o.verdict == "faster" for o in outcomes) <= bound


def test_the_same_simulation_catches_a_gate_that_ignores_its_looks(monkeypatch):
    """Without alpha spending (every look tested at the full level), looking repeatedly inflates false
    alarms past alpha: the check above can fail (measured: 84 of 600, the bound 48)."""
    monkeypatch.setattr(
        sequential, "nominal_levels", lambda fractions, alpha, final=True: (alpha,) * len(fractions)
    )
    settings = GateSettings(alpha=0.05, min_effect=0.0)
    outcomes = run_many(600, 7, 0.0, NOISY, settings, EVERY_PAIR)
    assert sum(o.verdict == "slower" for o in outcomes) > binomial_upper(
        len(outcomes), settings.alpha
    )


def test_a_ten_percent_regression_is_caught_and_identical_code_confirmed():
    """alpha 0.01, min effect 5%, 3% noise per round and heavy-tailed drift between pairs."""
    settings = GateSettings(alpha=0.01, min_effect=0.05)
    plan = SequentialPlan(**NO_BUDGET)
    regressed = run_many(200, 11, math.log(1.10), 0.03, settings, plan)
    same = run_many(200, 12, 0.0, 0.03, settings, plan)
    assert sum(o.verdict == "slower" for o in regressed) >= 196
    assert sum(o.verdict == "no change" for o in same) >= 190
    assert sum(o.verdict == "slower" for o in same) == 0
    visits = [len(o.base_blocks) // 5 for o in regressed + same]
    assert max(visits) <= plan.worker_pairs  # one visit per worker pair at most
    # decided early, not at the last look
    assert np.median([len(o.base_blocks) // 5 for o in regressed]) <= plan.looks[0]


def test_it_stops_at_the_first_decisive_look():
    """A 50% regression, 1% noise: decided at the first planned look (half the worker pairs) even at the
    default alpha, whose first look spends almost nothing (O'Brien-Fleming)."""
    [outcome] = run_many(1, 3, math.log(1.5), 0.01, GateSettings())
    assert outcome.verdict == "slower" and outcome.stopped == "decisive" and outcome.looks == 1
    assert sorted(set(outcome.clusters)) == list(range(SequentialPlan().looks[0]))


def test_without_a_decision_it_stops_at_the_last_planned_look():
    """Identical, noisy code and no budget: every worker pair visited once, each planned look taken."""
    plan = SequentialPlan(**NO_BUDGET)
    ([outcome],) = [run_many(1, 3, 0.0, 0.4, GateSettings(), plan)]
    assert outcome.stopped == "last look" and outcome.looks == len(plan.looks)
    assert outcome.verdict == "inconclusive" and outcome.estimate.clusters == plan.worker_pairs
    assert len(outcome.base_blocks) == 5 * plan.worker_pairs


def test_the_budget_ends_sampling_with_one_last_look_that_spends_what_is_left(monkeypatch):
    """The clock advances 1 s per visit and the budget is 5 s: after the planned look at 4 worker pairs,
    the fifth visit ends sampling with a last look that spends the whole level (``final``)."""
    calls = []

    def spy(fractions, alpha, final=True):
        calls.append((fractions, final))
        return nominal_levels(fractions, alpha, final)

    monkeypatch.setattr(sequential, "nominal_levels", spy)
    plan = SequentialPlan(worker_pairs=8, budget_s=5, max_budget_s=5)
    [outcome] = run_many(1, 4, 0.0, 0.4, GateSettings(), plan)
    assert outcome.stopped == "budget" and len(outcome.base_blocks) == 5 * 5
    assert outcome.looks == 2 <= len(plan.looks)
    assert len(calls) == 2 and calls[0] == ((0.5,), False)  # the planned look at 4 of 8: interim
    assert calls[1][0][0] == 0.5 and calls[1][1] is True  # the budget's look is the last


def test_contended_pairs_are_set_aside_and_a_contended_gate_says_so():
    settings = GateSettings()
    plan = SequentialPlan(budget_s=4, max_budget_s=8)
    [all_contended] = run_many(1, 5, math.log(2.0), 0.01, settings, plan, contended=lambda i: True)
    assert all_contended.verdict == CONTENDED_VERDICT and all_contended.estimate.units == 0
    assert all_contended.stopped == "cap" and len(all_contended.base_blocks) == 5 * 8
    # every third pair contended: the kept pairs still decide
    [some] = run_many(1, 6, math.log(1.2), 0.01, settings, contended=lambda i: i % 3 == 0)
    assert some.verdict == "slower" and some.estimate.units == some.contended.count(False)
    assert some.estimate.units < len(some.contended)


@pytest.mark.parametrize("looks", [(16, 12), (0, 4), (4, 4)])
def test_a_bad_plan_names_its_looks(looks):
    with pytest.raises(ValueError, match="looks must be increasing"):
        SequentialPlan(looks=looks)


def test_the_stated_method_names_its_source_and_levels():
    settings = GateSettings(alpha=0.01)
    text = SequentialPlan(worker_pairs=8, budget_s=5).describe(settings)
    levels = nominal_levels((0.5, 0.75, 1.0), 0.01)
    assert "O'Brien-Fleming alpha spending (Lan & DeMets 1983)" in text
    assert "looks at 4, 6, 8 worker pairs" in text and "at most 5 s per benchmark" in text
    assert ", ".join(f"{p:.2g}" for p in levels) in text
    assert "slower and faster each at 0.01" in text
    pooled = SequentialPlan(worker_pairs=1).describe(settings)
    assert "Wilcoxon signed-rank" in pooled and "looks at 4, 6, 8 visits" in pooled
    assert "Lan & DeMets" in spending.__doc__ and "Jennison & Turnbull" in spending.__doc__


@pytest.mark.parametrize("alpha", [0.5, 0.1, 0.01, 0.01 / 7, 2**-6])
def test_min_pairs_is_where_the_interval_becomes_finite(alpha):
    n = min_pairs(alpha)
    assert math.isfinite(wilcoxon_interval(np.arange(n, dtype=float), alpha)[1])
    if n > 1:
        assert wilcoxon_interval(np.arange(n - 1, dtype=float), alpha)[1] == -math.inf


def test_an_inconclusive_change_below_the_minimum_effect_says_its_size():
    """A +1.9% change whose interval excludes 1 is not ``slower`` (under the 2% floor): the note says why."""
    estimate = stats.RatioEstimate(1.019, 1.008, 1.031, 547, "worker pairs", 8)
    found = stats.verdict(estimate, GateSettings())
    assert found == "inconclusive"
    assert stats.below_min_effect(estimate, found, GateSettings()) == (
        "a +1.9% change, below the 2% minimum effect"
    )
    straddling = stats.RatioEstimate(1.02, 0.99, 1.06, 547, "worker pairs", 8)
    assert stats.below_min_effect(straddling, "inconclusive", GateSettings()) == ""


def test_a_plain_inconclusive_says_why():
    """A new user's ``inconclusive`` row did not say whether load or spread left it undecided."""
    settings = GateSettings()
    wide = stats.RatioEstimate(1.01, 0.975, 1.042, 300, "worker pairs", 12)
    assert stats.verdict(wide, settings) == "inconclusive"
    assert stats.why_inconclusive(wide, "inconclusive", settings) == (
        "its interval [0.975, 1.042] holds 1 and reaches past 0.980-1.020, the 2% band a `no change` "
        "must lie within"
    )
    # a new user's [0.979, 1.018] was said to be "about +-1.9%: not inside the +-2%": off centre
    low_side = stats.RatioEstimate(0.998, 0.979, 1.018, 300, "worker pairs", 12)
    assert "[0.979, 1.018] holds 1 and reaches past 0.980-1.020" in stats.why_inconclusive(
        low_side, "inconclusive", settings
    )
    few = stats.RatioEstimate(1.01, 0.0, math.inf, 40, "worker pairs", 1)
    assert stats.why_inconclusive(few, "inconclusive", settings) == (
        "too few worker pairs for an interval"
    )
    below = stats.RatioEstimate(1.019, 1.008, 1.031, 547, "worker pairs", 8)
    assert stats.why_inconclusive(below, "inconclusive", settings) == ""  # below_min_effect says it
    assert stats.why_inconclusive(wide, "slower", settings) == ""


@pytest.mark.parametrize(
    "df, alpha, published",
    # Student's t, two-sided critical values (Abramowitz & Stegun 1964, table 26.10)
    [(1, 0.05, 12.706), (4, 0.01, 4.604), (5, 0.05, 2.571), (10, 0.01, 3.169), (30, 0.05, 2.042)],
)
def test_student_t_critical_values_match_the_published_table(df, alpha, published):
    assert stats.student_t_critical(df, alpha) == pytest.approx(published, abs=6e-4)
    with pytest.raises(ValueError, match="df must be a whole number"):
        stats.student_t_tail(1.0, 0)


def gates_with_worker_bias(clustered: bool, log_ratio: float, bias_sd: float, n: int, seed: int):
    """Gates over 6 process pairs, each process 2% (sd) faster or slower than another at random,
    per-round noise 1%: ``clustered``, each process pair one worker pair of the t interval; else one
    worker pair's plan (pairs pooled, the signed-rank interval) over the same 6 process pairs in turn."""
    rng = np.random.default_rng(seed)
    settings = GateSettings(alpha=0.05, min_effect=0.0)
    plan = SequentialPlan(worker_pairs=6 if clustered else 1, **NO_BUDGET)
    processes = None if clustered else 6
    return [
        run_gate(
            drift_pairs(rng, log_ratio, 0.01, 1, bias_sd, processes=processes), settings, plan
        )[0]
        for _ in range(n)
    ]


def test_the_clustered_interval_keeps_its_level_when_each_worker_pair_carries_a_bias():
    """Identical code, 6 worker pairs, each process 2% faster or slower than another at random (sd),
    per-pair noise 1%, alpha 0.05 each way: the interval across worker pairs gives a verdict (either
    direction) in at most 2 alpha of gates; the pooled interval, which takes the pairs as independent,
    gives one in more than three times as many (the processes' biases decide it)."""
    clustered = gates_with_worker_bias(True, 0.0, 0.02, 300, 21)
    pooled = gates_with_worker_bias(False, 0.0, 0.02, 300, 21)
    false_clustered = sum(o.verdict in ("slower", "faster") for o in clustered)
    false_pooled = sum(o.verdict in ("slower", "faster") for o in pooled)
    assert false_clustered <= binomial_upper(300, 0.1)
    assert false_pooled > 3 * 0.1 * 300
    assert {o.estimate.clusters for o in clustered} <= set(sequential.planned_looks(6))
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


def test_two_worker_pairs_far_apart_at_an_interim_look_give_an_unbounded_interval_not_an_error():
    """Four worker pairs (looks at 2, 3 and 4): the first look's level is about 3e-6 with 1 degree of
    freedom (t about 1e5), so two worker pairs 2% apart give an interval wider than a float: it must
    come out unbounded (inconclusive), not raise (``math.exp`` overflowed in ``sequential.look_estimate``)."""

    def visit(cluster):
        return [PairSample([1.0], [1.0 + 0.02 * cluster], False, cluster) for _ in range(3)]

    plan = SequentialPlan(worker_pairs=4, **NO_BUDGET)
    outcome = sequential_visits(visit, GateSettings(), plan, clock=lambda: 0.0)
    assert outcome.looks >= 1 and outcome.verdict != "slower"


def contended_pairs(rng, slowdown: float, head_waits, base_waits, extra: float):
    """``pair(c, i)``, every pair contended: each block's threads waited a share ``w`` (uniform in
    ``head_waits`` or ``base_waits``, ``(low, high)``) of their runnable time, which stretched the block
    by ``1 / (1 - w)`` give or take 10% (the fair-sharing model's error), and the load's caches slowed
    it by up to ``extra`` more, at random; per-round noise 2%."""

    def block(factor, waits):
        w = rng.uniform(*waits)
        model = rng.uniform(0.9, 1.1) / (1 - w)
        stretch = factor * model * rng.uniform(1, 1 + extra) * math.exp(rng.normal(0, 0.02))
        return [stretch], w

    def pair(cluster, i):
        base, base_wait = block(1.0, base_waits)
        head, head_wait = block(slowdown, head_waits)
        return PairSample(base, head, True, cluster, head_wait, base_wait)

    return pair


# Every pair contended: no worker pair completes, so sampling goes on to the cap (8 visits of 5 pairs).
CONTENDED_PLAN = SequentialPlan(budget_s=4, max_budget_s=8)


def test_an_eleven_times_slower_head_with_every_pair_contended_is_decided_slower():
    """The new user's gate beside a load: every pair contended and set aside. Before, the gate
    passed it as ``inconclusive: contended`` (reproduced with the contended rule off); now the
    contended pairs decide it against the floor their wait sets."""
    before = GateSettings(contended_min_effect=None)
    now = GateSettings()
    for settings, expected in ((before, CONTENDED_VERDICT), (now, "slower")):
        pair = contended_pairs(np.random.default_rng(30), 11.5, (0.3, 0.7), (0.3, 0.7), 0.1)
        outcome, visits = run_gate(pair, settings, CONTENDED_PLAN)
        assert outcome.verdict == expected and sum(outcome.contended) == len(outcome.contended)
        assert outcome.stopped == "cap" and len(visits.visited) == 8
    assert outcome.estimate.ratio == pytest.approx(11.5, rel=0.2)
    assert "contended pairs" in outcome.contended_note and "x1.25 floor" in outcome.contended_note


def test_identical_code_is_never_slower_from_contended_pairs_and_a_2x_change_is():
    """Beside a heavy, uneven load that hits the head harder (head waits 30-85% of runnable time, the
    base's 0-30%; the model off by up to 10%, caches up to +10%): identical code, whose raw ratio is
    about x2 here, is never ``slower`` in 150 gates; a 2x change beside an even load (0-85%) is in 20
    of 20."""
    rng = np.random.default_rng(31)

    def gates(slowdown, head_waits, base_waits, n):
        return [
            run_gate(
                contended_pairs(rng, slowdown, head_waits, base_waits, 0.1),
                GateSettings(),
                CONTENDED_PLAN,
            )[0]
            for _ in range(n)
        ]

    same = gates(1.0, (0.3, 0.85), (0.0, 0.3), 150)
    assert all(o.verdict == CONTENDED_VERDICT for o in same)
    raw = np.median([o.head_blocks[0][0] / o.base_blocks[0][0] for o in same])
    assert raw > 1.6  # what the pairs' plain ratios say: the correction is what keeps it unjudged
    assert all(o.verdict == "slower" for o in gates(2.0, (0.0, 0.85), (0.0, 0.85), 20))
    with pytest.raises(ValueError, match="2 ratios, 1 base and 2 head waits"):
        stats.wait_adjusted([0.0, 0.0], [0.1], [0.1, None])


def cpu_time_pairs(rng, work: float, wall_share: float, cache: float):
    """``pair(c, i)``, every pair contended, both blocks waiting 40-80% of their runnable time: the head
    does ``work`` times the base's work, but its wall ratio shows only ``work ** wall_share`` of it (the
    load's waits dominate the wall clock); each block's CPU seconds are its work, stretched by the load's
    caches by up to ``cache`` at random, with 5% noise."""

    def block(factor):
        w = rng.uniform(0.4, 0.8)
        cpu = factor * rng.uniform(1, 1 + cache) * math.exp(rng.normal(0, 0.05))
        wall = factor**wall_share / (1 - w) * math.exp(rng.normal(0, 0.2))
        return [wall], [cpu], w

    def pair(cluster, i):
        base, base_cpu, base_wait = block(1.0)
        head, head_cpu, head_wait = block(work)
        return PairSample(
            base,
            head,
            True,
            cluster,
            head_wait,
            base_wait,
            base_cpu_s=base_cpu,
            head_cpu_s=head_cpu,
        )

    return pair


def test_contended_pairs_judged_on_cpu_time_catch_a_2x_change_the_wall_clock_shrinks():
    """Beside busy processes a 2x change's wall ratio shrank to about x1.2 (calibration, two busy
    processes): the wall clause cannot decide it, the CPU-time clause does, in 20 of 20 gates; identical
    code, its CPU seconds stretched by the load's caches by up to 10% at random, is never ``slower`` in
    150; without CPU times (a device clock) the 2x change stays ``inconclusive: contended``."""
    rng = np.random.default_rng(32)

    def gates(work, n, source=cpu_time_pairs):
        return [
            run_gate(source(rng, work, 0.25, 0.1), GateSettings(), CONTENDED_PLAN)[0]
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
        pair = cpu_time_pairs(rng, work, wall_share, cache)
        return lambda cluster, i: dataclasses.replace(
            pair(cluster, i), base_cpu_s=None, head_cpu_s=None
        )

    assert all(o.verdict == CONTENDED_VERDICT for o in gates(2.0, 5, without_cpu))


def test_a_contended_verdict_at_the_cap_splits_the_last_look_s_level(monkeypatch):
    """At least half the pairs contended and nothing decided: the kept pairs' last look gets half the
    level, and the contended rule the other half (``verdicts.contended_verdict`` takes it two-sided:
    twice the one-sided half, the gate's alpha)."""
    asked = []
    monkeypatch.setattr(
        sequential, "contended_verdict", lambda samples, settings, alpha: asked.append(alpha)
    )
    pair = contended_pairs(np.random.default_rng(33), 1.0, (0.3, 0.7), (0.3, 0.7), 0.1)
    outcome, _ = run_gate(pair, GateSettings(alpha=0.001), CONTENDED_PLAN)
    assert outcome.verdict == CONTENDED_VERDICT and asked == [pytest.approx(0.001)]
