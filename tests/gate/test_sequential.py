"""The sequential rule over warm worker pairs: seeded simulations of its level and power, the looks,
the budget and the contended extension (no worker process: ``visit`` is simulated)."""

import math

import numpy as np
import pytest

from perfsuite.gate.intervals import PairSample
from perfsuite.gate.sequential import (
    SequentialPlan,
    look_estimate,
    next_worker_pair,
    planned_looks,
    sequential_visits,
)
from perfsuite.gate.verdicts import GateSettings, Verdict


class SimulatedGate:
    """Worker pairs with a per-process bias (each process's log-time offset ~ N(0, bias_sd)), block
    noise ``noise_sd`` (log units), a true ratio; a clock that advances ``visit_s`` per visit."""

    def __init__(
        self,
        rng,
        ratio=1.0,
        bias_sd=0.02,
        noise_sd=0.03,
        blocks=10,
        visit_s=0.5,
        contended=lambda cluster, visit: False,
    ):
        self.rng, self.log_ratio = rng, math.log(ratio)
        self.biases = {}
        self.bias_sd, self.noise_sd, self.blocks, self.visit_s = bias_sd, noise_sd, blocks, visit_s
        self.now, self.visits, self.contended = 0.0, [], contended

    def clock(self):
        return self.now

    def __call__(self, cluster):
        bias = self.biases.setdefault(cluster, self.rng.normal(0, self.bias_sd, 2))
        self.now += self.visit_s
        self.visits.append(cluster)
        out = []
        for _ in range(self.blocks):
            base = math.exp(bias[0] + self.rng.normal(0, self.noise_sd))
            head = math.exp(bias[1] + self.log_ratio + self.rng.normal(0, self.noise_sd))
            out.append(
                PairSample([base], [head], self.contended(cluster, len(self.visits)), cluster)
            )
        return out


def run(seed, plan=SequentialPlan(), settings=GateSettings(alpha=0.01), floor_sd=0.0, **kwargs):
    gate = SimulatedGate(np.random.default_rng(seed), **kwargs)
    return sequential_visits(gate, settings, plan, gate.clock, floor_sd), gate


def test_planned_looks():
    assert planned_looks(8) == (4, 6, 8)
    assert planned_looks(2) == (2,)
    assert planned_looks(1) == (4, 6, 8)
    with pytest.raises(ValueError, match="worker_pairs"):
        planned_looks(0)


def test_a_variant_whose_set_ups_would_spend_the_budget_runs_on_half_the_worker_pairs():
    plan = SequentialPlan()  # 12 worker pairs, 10 s
    costly = plan.for_setup(0.9)  # 12 pairs x 0.9 s of set-up: over the budget
    assert (costly.worker_pairs, costly.looks) == (6, (3, 5, 6))
    assert costly.budget_s == plan.budget_s and costly.max_budget_s == plan.max_budget_s
    assert plan.for_setup(0.8) is plan  # 9.6 s: within it
    assert SequentialPlan(worker_pairs=3, budget_s=1).for_setup(1).worker_pairs == 2
    for unchanged in (SequentialPlan(worker_pairs=2, budget_s=1), SequentialPlan(worker_pairs=1)):
        assert unchanged.for_setup(100.0) is unchanged  # no fewer than 2; pooled pairs stay
    assert (
        "6 worker pairs (looks at 3, 5, 6) for a variant whose set-up in a fresh worker takes over 0.83 s"
        in (plan.describe(GateSettings()))
    )


def test_identical_code_keeps_the_level_on_the_half_plan_of_a_costly_variant():
    """Six worker pairs (5 degrees of freedom at the last look) under a per-process bias as large as
    the block noise: slower and faster each within twice the level over 1,000 seeded gates."""
    plan = SequentialPlan().for_setup(5.0)
    verdicts = [run(seed, plan, bias_sd=0.03, noise_sd=0.03)[0].verdict for seed in range(1000)]
    assert verdicts.count(Verdict.SLOWER) / 1000 <= 0.02
    assert verdicts.count(Verdict.FASTER) / 1000 <= 0.02


def test_identical_code_keeps_the_level_with_few_clusters_and_a_process_bias():
    """A/A with a per-process bias as large as the block noise: over 1,500 seeded gates at alpha 0.01,
    slower and faster each stay under the level (their Clopper-Pearson-free check: 2x the level)."""
    verdicts = [run(seed, bias_sd=0.03, noise_sd=0.03)[0].verdict for seed in range(1500)]
    assert verdicts.count(Verdict.SLOWER) / 1500 <= 0.015
    assert verdicts.count(Verdict.FASTER) / 1500 <= 0.015
    # and most gates conclude: the interval lies inside the minimum effect
    assert verdicts.count(Verdict.NO_CHANGE) > 0


def test_pooling_the_pairs_would_not_keep_the_level_under_a_process_bias():
    """The reason for clusters: one worker pair, pairs pooled, a process bias of 3%: identical code is
    called changed far more often than the level."""
    plan = SequentialPlan(worker_pairs=1)
    verdicts = [run(seed, plan=plan, bias_sd=0.03, noise_sd=0.01)[0].verdict for seed in range(300)]
    changed = sum(v in (Verdict.SLOWER, Verdict.FASTER) for v in verdicts) / 300
    assert changed > 0.2


def test_a_3_percent_change_is_decided_when_the_process_bias_is_small():
    verdicts = [
        run(seed, ratio=1.03, bias_sd=0.004, noise_sd=0.02)[0].verdict for seed in range(200)
    ]
    assert verdicts.count(Verdict.SLOWER) >= 190


def test_a_large_change_stops_at_the_first_look():
    outcome, gate = run(0, ratio=2.0)
    assert outcome.verdict == Verdict.SLOWER and outcome.looks == 1
    assert len(gate.visits) == SequentialPlan().looks[0]


def test_the_noise_floor_widens_the_interval():
    decided, _ = run(3, ratio=1.05, bias_sd=0.002, noise_sd=0.01)
    floored, _ = run(3, ratio=1.05, bias_sd=0.002, noise_sd=0.01, floor_sd=0.2)
    assert decided.verdict == Verdict.SLOWER
    assert floored.verdict != Verdict.SLOWER and floored.floor_used


def test_the_budget_takes_the_last_look_on_what_was_sampled():
    plan = SequentialPlan(budget_s=2.0)
    outcome, gate = run(1, plan=plan, visit_s=0.5)
    assert len(gate.visits) == 4 and outcome.stopped in ("budget", "decisive")


def test_under_contention_incomplete_worker_pairs_are_revisited_up_to_the_cap():
    """Worker pair 2's first visit is all contended: it is visited again after the others (and only
    it), and the look counts it once complete."""
    plan = SequentialPlan(worker_pairs=8, budget_s=4.0, max_budget_s=8.0)
    outcome, gate = run(2, plan=plan, contended=lambda cluster, visit: visit == 3)
    assert gate.visits == list(range(8)) + [2]
    assert outcome.stopped in ("last look", "decisive")


def test_progress_hears_each_look_and_the_start_of_the_contended_extension():
    """A new user's gate was silent for 20-90 s per benchmark: each look and the extension past the
    budget are now told (and change nothing the rule decides)."""
    plan = SequentialPlan(worker_pairs=8, budget_s=4.0, max_budget_s=8.0)
    gate = SimulatedGate(np.random.default_rng(2), contended=lambda cluster, visit: visit == 3)
    heard = []
    outcome = sequential_visits(gate, GateSettings(alpha=0.01), plan, gate.clock, 0.0, heard.append)
    silent, _ = run(2, plan=plan, contended=lambda cluster, visit: visit == 3)
    assert outcome == silent
    looks = [m for m in heard if m.estimate is not None]
    assert len(looks) == outcome.looks and looks[-1].verdict == outcome.verdict
    assert not any(m.final for m in looks[:-1])
    assert looks[-1].final == (outcome.stopped != "decisive")
    assert [m.complete for m in looks][-1] == 8 and all(m.planned == 8 for m in heard)
    (extension,) = [m for m in heard if m.estimate is None]
    assert extension.seconds >= plan.budget_s and extension.contended == gate.blocks


def test_next_worker_pair_cycles_through_incomplete_pairs():
    plan = SequentialPlan(worker_pairs=3)
    samples = [PairSample([1.0], [1.0], c == 1, c) for c in (0, 1, 2) for _ in range(3)]
    assert [next_worker_pair(samples, plan, v) for v in range(5)] == [0, 1, 2, 1, 1]


def test_look_estimate_needs_two_complete_clusters():
    samples = [PairSample([1.0], [1.1], False, 0) for _ in range(5)]
    estimate, _ = look_estimate(samples, 0.001, clustered=True)
    assert estimate.high == math.inf


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"worker_pairs": 0}, "worker_pairs"),
        ({"looks": (6, 4)}, "increasing"),
        ({"worker_pairs": 8, "looks": (4, 12)}, "at most worker_pairs"),
        ({"budget_s": 40.0}, "budget"),
    ],
)
def test_bad_plans_are_refused(kwargs, match):
    with pytest.raises(ValueError, match=match):
        SequentialPlan(**kwargs)


def test_a_progress_line_says_whether_the_look_decided_sampled_on_or_was_the_last():
    """A new user could not tell a last, undecided look from an interim one."""
    from perfsuite.gate.ab import progress_line
    from perfsuite.gate.intervals import RatioEstimate
    from perfsuite.gate.sequential import Progress

    plan = SequentialPlan()
    wide = RatioEstimate(1.003, 0.979, 1.029, 300, "worker pairs", 12)
    interim = Progress(6, 12, 4.2, 150, 9, wide, Verdict.INCONCLUSIVE)
    assert progress_line(interim, plan) == (
        "  look at 6 of 12 worker pairs, 4 s: head/base 1.003 [0.979, 1.029], sampling on"
    )
    last = Progress(12, 12, 9.6, 300, 20, wide, Verdict.INCONCLUSIVE, final=True)
    assert progress_line(last, plan).endswith("[0.979, 1.029]: inconclusive")
    slower = Progress(
        6, 12, 4.0, 150, 0, RatioEstimate(1.08, 1.03, 1.12, 150, "worker pairs", 6), "slower"
    )
    assert progress_line(slower, plan).endswith(": slower")
    extension = progress_line(Progress(9, 12, 10.1, 220, 70), plan)
    assert extension == (
        "  70 of 220 block pairs set aside as contended (other processes took the CPU): sampling on past "
        "the 10 s budget, up to 30 s"
    )
    nothing = RatioEstimate(1.0, 0.0, math.inf, 0, "worker pairs", 0)
    empty = Progress(0, 12, 30.2, 856, 856, nothing, "inconclusive", final=True)
    assert progress_line(empty, plan) == (
        "  look at 0 of 12 worker pairs, 30 s: no block pair kept (856 set aside as contended): inconclusive"
    )


def test_an_undecided_benchmark_is_told_more_time_only_when_the_budget_stopped_it():
    """A new user's --budget-s 25 changed nothing: the last planned look had been reached at 10 s."""
    from types import SimpleNamespace

    from perfsuite.gate.ab import undecided_advice
    from perfsuite.gate.intervals import RatioEstimate

    estimate = RatioEstimate(1.003, 0.979, 1.029, 300, "worker pairs", 7)
    plan = SequentialPlan()
    quiet = [False] * 300
    budget = undecided_advice(
        SimpleNamespace(stopped="budget", estimate=estimate, contended=quiet), plan
    )
    assert (
        budget
        == " (sampling stopped at 10 s with 7 of 12 worker pairs: a larger --budget-s times the rest)"
    )
    capped = undecided_advice(
        SimpleNamespace(stopped="cap", estimate=estimate, contended=quiet), plan
    )
    assert "stopped at 30 s" in capped and "--max-budget-s" in capped
    last = undecided_advice(
        SimpleNamespace(stopped="last look", estimate=estimate, contended=quiet), plan
    )
    assert "--budget-s" not in last and "every worker pair was timed" in last
    # a loaded machine: a third helper's pairs were all kept "under a load on both sides", and the note
    # blamed the spread between processes
    loaded = SimpleNamespace(
        stopped="last look", estimate=estimate, contended=[False] * 250 + [True] * 50
    )
    assert undecided_advice(loaded, plan, shared=40) == (
        " (other processes took the CPU during 90 of 300 block pairs: their load widens the interval; "
        "a quieter machine narrows it)"
    )
    assert "spread between worker processes" in undecided_advice(loaded, plan, shared=10)
