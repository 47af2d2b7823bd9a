"""The regression gate: statistics on synthetic samples with known answers, fingerprints, refusals."""

import dataclasses
import json
import re
from pathlib import Path

import numpy as np
import pytest

from perfsuite.gate.sequential import WORKER_PAIRS

from perfsuite.gate.ab import Side, run_ab
from perfsuite.attention.cases import AttentionCase
from perfsuite.cli.main import main
from perfsuite.errors import BaselineError, IncomparableRuns, WorkerError
from perfsuite.gate.compare import (
    UNPAIRED_METHOD,
    BenchmarkComparison,
    check_compatible,
    compare_runs,
    gate_failed,
    load_benchmark_file,
)
from perfsuite.measure.evidence import gather_evidence
from perfsuite.trace.structure import diff_fingerprints, fingerprint
from perfsuite.gate.stats import (
    CONTENDED_VERDICT,
    GateSettings,
    RatioEstimate,
    SequentialPlan,
    Verdict,
    pair_log_ratios,
    unpaired_ratio,
    verdict,
    wilcoxon_interval,
)
from perfsuite.variants import get_variant

SETTINGS = GateSettings(alpha=0.01, min_effect=0.03)


def blocks(rng, ratio, n_blocks=12, rounds=8, noise=0.05, drift=0.0):
    """Base and head blocks of log-normal round times; ``drift`` moves both sides of a pair alike."""
    base, head = [], []
    for i in range(n_blocks):
        level = 1.0 + drift * i
        base.append(list(level * np.exp(rng.normal(0, noise, rounds))))
        head.append(list(level * ratio * np.exp(rng.normal(0, noise, rounds))))
    return base, head


def paired_ratio(base_blocks, head_blocks, alpha):
    """The A/B estimate at one look: the signed-rank interval of the block pairs' log-ratios."""
    centre, low, high = wilcoxon_interval(pair_log_ratios(base_blocks, head_blocks), alpha)
    return RatioEstimate(np.exp(centre), np.exp(low), np.exp(high), len(base_blocks), "paired")


def test_exact_samples_give_exact_answers():
    est = paired_ratio([[1.0] * 4] * 8, [[1.2] * 4] * 8, 0.01)
    assert (round(est.ratio, 9), round(est.low, 9), round(est.high, 9)) == (1.2, 1.2, 1.2)
    assert verdict(est, SETTINGS) == "slower"
    same = paired_ratio([[2.0] * 4] * 8, [[2.0] * 4] * 8, 0.01)
    assert verdict(same, SETTINGS) == "no change"
    assert verdict(paired_ratio([[1.0]] * 8, [[0.8]] * 8, 0.01), SETTINGS) == "faster"


def test_too_few_pairs_or_a_wide_interval_is_inconclusive():
    assert verdict(paired_ratio([[1.0]] * 3, [[1.5]] * 3, 0.01), SETTINGS) == "inconclusive"
    assert verdict(RatioEstimate(1.01, 0.9, 1.12, 20, "paired"), SETTINGS) == "inconclusive"
    assert (
        verdict(RatioEstimate(1.02, 1.005, 1.04, 20, "paired"), SETTINGS) == "inconclusive"
    )  # real but < 3%


def test_known_rates_on_synthetic_noise_with_drift():
    """5% noise per round and a 1%-per-block drift: 10% slowdowns found, identical code left alone."""
    rng = np.random.default_rng(0)
    flagged_same = sum(
        verdict(paired_ratio(*blocks(rng, 1.0, drift=0.01), 0.01), SETTINGS) == "slower"
        for _ in range(200)
    )
    caught_10 = sum(
        verdict(paired_ratio(*blocks(rng, 1.10, drift=0.01), 0.01), SETTINGS) == "slower"
        for _ in range(200)
    )
    assert flagged_same <= 2  # the bound says alpha/2 = 0.5% -> 1 of 200 expected at most
    assert caught_10 >= 196


def test_unpaired_ratio_of_medians():
    rng = np.random.default_rng(1)
    base = list(np.exp(rng.normal(0, 0.02, 200)))
    head = list(1.1 * np.exp(rng.normal(0, 0.02, 200)))
    est = unpaired_ratio(base, head, 0.01)
    assert est.low < 1.1 < est.high and abs(est.ratio - 1.1) < 0.01
    assert verdict(est, SETTINGS) == "slower"


def test_false_alarm_bound():
    """alpha is one-sided (the chance identical code is called slower); a gate's bound is the union."""
    assert SETTINGS.false_alarm_rate() == 0.01 and SETTINGS.false_alarm_rate(5) == 0.05
    assert SETTINGS.false_alarm_rate(200) == 1.0


def test_fingerprint_diff_names_the_hidden_copy(tmp_path):
    case = AttentionCase(1, 2, 16, 16, 8, "fp32", "cpu", "causal")
    inplace = gather_evidence(get_variant("naive_inplace"), case, 0, tmp_path).steps[0]
    naive = gather_evidence(get_variant("naive"), case, 0, tmp_path).steps[0]
    lines = diff_fingerprints(fingerprint(inplace, "cpu"), fingerprint(naive, "cpu"))
    assert "+1 aten::clone" in lines
    assert "+1 copy cpu aten::clone [1x2x16x16] (+2.0 KiB per step)" in lines
    assert "allocated +4.0 KiB per step" in lines  # the clone and the out-of-place `* scale`
    assert diff_fingerprints(fingerprint(naive, "cpu"), fingerprint(naive, "cpu")) == []


def saved_run(
    path,
    times,
    device="cpu: AMD EPYC",
    torch_version="2.13.0",
    clones=0,
    contention=None,
    reference_ms=None,
):
    bench = {
        "name": "test_benchmark[x]",
        "stats": {"median": float(np.median(times)), "data": list(times)},
        "extra_info": {
            "variant": "naive",
            "case": "b1h2s16d8-fp32-causal-cpu",
            "fingerprint": {"cpu_ops": {"aten::clone": clones}, "allocated_bytes": 0},
            "contention": contention,
        },
    }
    if reference_ms is not None:
        bench["extra_info"]["speed_reference"] = {
            "before_ms": reference_ms[0],
            "after_ms": reference_ms[1],
        }
    data = {
        "machine_info": {
            "perfsuite": {"device_names": {"cpu": device}, "torch_version": torch_version}
        },
        "benchmarks": [bench],
    }
    path.write_text(json.dumps(data))
    return path


def test_compare_command_flags_a_slower_head_and_writes_markdown(tmp_path, capsys):
    rng = np.random.default_rng(2)
    base = saved_run(tmp_path / "base.json", np.exp(rng.normal(0, 0.01, 50)))
    head = saved_run(tmp_path / "head.json", 1.2 * np.exp(rng.normal(0, 0.01, 50)), clones=1)
    assert main(["compare", str(base), str(head), "--markdown", str(tmp_path / "summary.md")]) == 1
    out = capsys.readouterr().out
    assert (
        "| `naive/b1h2s16d8-fp32-causal-cpu` |" in out
        and "**slower**" in out
        and "+1 aten::clone" in out
    )
    assert (tmp_path / "summary.md").read_text() == out
    assert main(["compare", str(base), str(base)]) == 0


def test_compare_takes_a_saved_run_s_number_as_benchmark_compare_does(
    tmp_path, monkeypatch, capsys
):
    times = np.exp(np.random.default_rng(6).normal(0, 0.01, 50))
    saved = tmp_path / ".benchmarks" / "Linux-CPython-3.11-64bit"
    saved.mkdir(parents=True)
    saved_run(saved / "0001_abc_20261201_000000.json", times)
    saved_run(saved / "0002_abc_20261201_000100.json", times)
    monkeypatch.chdir(tmp_path)
    assert main(["compare", "0001", "0002"]) == 0
    assert "perfsuite compare: 0001_abc_20261201_000000.json -> 0002_abc" in capsys.readouterr().out
    assert main(["compare", "0001", "0009"]) == 2
    err = capsys.readouterr().err
    assert "saved run '0009': none in" in err and "saved runs there: 0001, 0002" in err


def test_a_no_change_that_excludes_1_says_how_much_and_the_floor(tmp_path):
    rng = np.random.default_rng(7)
    base = saved_run(tmp_path / "a.json", np.exp(rng.normal(0, 0.005, 50)))
    head = saved_run(tmp_path / "b.json", 1.09 * np.exp(rng.normal(0, 0.005, 50)))
    [comparison] = compare_runs(
        load_benchmark_file(base), load_benchmark_file(head), GateSettings(min_effect=0.15)
    )
    assert comparison.verdict == "no change" and comparison.note.startswith("a +9.")
    assert comparison.note.endswith("% change, below the 15% minimum effect")
    [same] = compare_runs(
        load_benchmark_file(base), load_benchmark_file(base), GateSettings(min_effect=0.15)
    )
    assert same.verdict == "no change" and same.note == ""


def test_structure_alone_fails_only_when_asked(tmp_path):
    times = np.exp(np.random.default_rng(3).normal(0, 0.01, 50))
    base = load_benchmark_file(saved_run(tmp_path / "a.json", times))
    head = load_benchmark_file(saved_run(tmp_path / "b.json", times, clones=1))
    comparisons = compare_runs(base, head, SETTINGS)
    assert comparisons[0].verdict == "no change" and comparisons[0].structure == ["+1 aten::clone"]
    assert not gate_failed(comparisons, fail_on_structure=False)
    assert gate_failed(comparisons, fail_on_structure=True)


def test_added_work_fails_compare_and_ab_by_default_and_the_line_says_which_half_decided(
    tmp_path, capsys
):
    """Same timing, one clone added: ``compare`` fails without being asked (structure decided),
    ``--no-fail-on-structure`` leaves timing alone to decide; ``ab`` parses the same default."""
    from perfsuite.cli.main import build_parser

    times = np.exp(np.random.default_rng(3).normal(0, 0.01, 50))
    base = saved_run(tmp_path / "a.json", times)
    head = saved_run(tmp_path / "b.json", times, clones=1)
    assert main(["compare", str(base), str(head)]) == 1
    assert "regressed (0 slower, 1 with structure that adds work); decided by structure" in (
        capsys.readouterr().out
    )
    assert main(["compare", str(base), str(head), "--no-fail-on-structure"]) == 0
    out = capsys.readouterr().out
    assert "; decided by timing only (structure not judged)" in out
    assert "1 with structural changes, not judged" in out
    slower = saved_run(tmp_path / "c.json", times * 1.5)
    assert main(["compare", str(base), str(slower)]) == 1
    assert "(1 slower, 0 with structure that adds work); decided by timing" in (
        capsys.readouterr().out
    )
    parse = build_parser().parse_args
    assert parse(["ab"]).fail_on_structure is True
    assert parse(["ab", "--fail-on-structure"]).fail_on_structure is True  # still accepted
    assert parse(["ab", "--no-fail-on-structure"]).fail_on_structure is False


def test_a_structural_change_that_only_removes_work_does_not_fail(tmp_path, capsys):
    """The head drops the clone (an in-place op restored): an optimisation, not a regression."""
    times = np.exp(np.random.default_rng(3).normal(0, 0.01, 50))
    base, head = (
        saved_run(tmp_path / "a.json", times, clones=1),
        saved_run(tmp_path / "b.json", times),
    )
    [comparison] = compare_runs(load_benchmark_file(base), load_benchmark_file(head), SETTINGS)
    assert comparison.structure == ["-1 aten::clone"] and not comparison.structure_adds_work
    assert main(["compare", str(base), str(head), "--fail-on-structure"]) == 0
    assert "1 with structural changes that add no work (not a failure)" in capsys.readouterr().out
    assert main(["compare", str(head), str(base), "--fail-on-structure"]) == 1
    assert (
        "FAIL: 1 of 1 benchmark regressed (0 slower, 1 with structure that adds work)"
        in capsys.readouterr().out
    )


@pytest.mark.parametrize(
    "change, adds",
    [
        ({"copies": {"cpu aten::clone [2x8]": 1}}, True),
        ({"memcpy": {"Memcpy DtoD": 1}}, True),
        ({"allocated_bytes": 4096}, True),
        ({"sdpa_backends": ["MATH"]}, True),
        ({"cpu_ops": {"aten::clone": 1, "aten::add": 1}}, True),  # two ops for one
        ({"cpu_ops": {"aten::view": 1}}, False),  # one op renamed: as much work
        ({"cpu_ops": {}}, False),
        ({"allocated_bytes": 0}, False),
    ],
)
def test_adds_work_counts_each_kind_of_work_whole(change, adds):
    from perfsuite.trace.structure import adds_work

    base = {
        "cpu_ops": {"aten::add": 1},
        "copies": {},
        "memcpy": {},
        "allocated_bytes": 1024,
        "sdpa_backends": None,
    }
    assert adds_work(base, base | change) == adds


def test_runs_from_other_hardware_are_refused_unless_forced(tmp_path, capsys):
    base = saved_run(tmp_path / "a.json", [1.0] * 10, device="cuda: NVIDIA H100")
    head = saved_run(tmp_path / "b.json", [1.0] * 10)
    with pytest.raises(IncomparableRuns, match="device_names.*use --force"):
        check_compatible(
            load_benchmark_file(base), load_benchmark_file(head), "a", "b", force=False
        )
    assert main(["compare", str(base), str(head)]) == 2
    assert "refusing to compare runs from different hardware" in capsys.readouterr().err
    assert main(["compare", str(base), str(head), "--force"]) == 0


@pytest.mark.parametrize(
    "content",
    ['{"benchmarks": [', "", '{"machine_info": {}}'],
    ids=["truncated", "empty", "no-benchmarks"],
)
def test_a_corrupt_baseline_is_an_error_naming_it(tmp_path, content, capsys):
    bad = tmp_path / "0002_corrupt.json"
    bad.write_text(content)
    good = saved_run(tmp_path / "0001_good.json", [1.0] * 10)
    assert main(["compare", str(bad), str(good)]) == 2
    assert str(bad) in capsys.readouterr().err


def test_missing_per_round_data_in_the_head_is_inconclusive_and_in_the_base_refused(tmp_path):
    """Before: a baseline without per-round data always passed the gate."""
    base = json.loads(saved_run(tmp_path / "a.json", [1.0] * 10).read_text())
    head = json.loads(json.dumps(base))
    del head["benchmarks"][0]["stats"]["data"]
    comparison = compare_runs(base, head, SETTINGS)[0]
    assert comparison.verdict == "inconclusive" and "--benchmark-save-data" in comparison.note
    with pytest.raises(
        BaselineError, match="the base run has no per-round data .*--benchmark-save-data"
    ):
        compare_runs(head, base, SETTINGS)


@pytest.mark.slow
def test_ab_run_reports_structure_between_two_variants():
    """Two variants in one A/B run: the structural diff is deterministic (timing verdicts are not asserted)."""
    results, info = run_ab(
        Side(Path("."), "naive_inplace"),
        Side(Path("."), "naive"),
        ["naive"],
        ["b1h2s16d8-fp32-causal-cpu"],
        # start-up time: the default's eight worker pairs add nothing here
        plan=SequentialPlan(worker_pairs=2, budget_s=10, rounds=50, blocks=3),
    )
    [result] = results
    assert result.comparison.verdict in {
        "slower",
        "faster",
        "no change",
        "inconclusive",
        CONTENDED_VERDICT,
    }
    assert "+1 aten::clone" in result.comparison.structure
    assert len(result.base_blocks) == len(result.head_blocks) == len(result.contended) >= 6
    assert set(result.clusters) == {0, 1} and result.rounds == 50
    assert all(len(block) == 50 for block in result.base_blocks + result.head_blocks)
    assert info["torch_version"]


@pytest.mark.slow
def test_ab_worker_errors_surface(tmp_path):
    with pytest.raises(WorkerError, match="--base-variant: no variant 'nope' in this tree"):
        run_ab(
            Side(Path("."), "nope"),
            Side(Path(".")),
            ["naive"],
            ["b1h2s16d8-fp32-causal-cpu"],
            plan=SequentialPlan(worker_pairs=1, rounds=1, blocks=2),
        )


def test_nothing_compared_is_not_a_pass(tmp_path, capsys):
    good = saved_run(tmp_path / "a.json", [1.0] * 10)
    empty = json.loads(good.read_text())
    empty["benchmarks"] = []
    (tmp_path / "empty.json").write_text(json.dumps(empty))
    assert main(["compare", str(tmp_path / "empty.json"), str(good)]) == 2
    assert "nothing was compared" in capsys.readouterr().err


def test_malformed_entries_and_bad_arguments_are_usage_errors(tmp_path, capsys):
    good = saved_run(tmp_path / "a.json", [1.0] * 10)
    broken = json.loads(good.read_text())
    del broken["benchmarks"][0]["stats"]
    (tmp_path / "broken.json").write_text(json.dumps(broken))
    assert main(["compare", str(tmp_path / "broken.json"), str(good)]) == 2
    assert "malformed" in capsys.readouterr().err
    assert (
        main(
            ["ab", "--base-tree", str(tmp_path / "nowhere"), "--cases", "b1h2s16d8-fp32-causal-cpu"]
        )
        == 2
    )
    assert "--base-tree" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["ab", "--blocks", "0"])


def test_a_run_timed_under_contention_is_not_judged_slower(tmp_path, capsys):
    """The loaded head is 3x slower, but its timings say so about the machine: inconclusive: contended."""
    rng = np.random.default_rng(4)
    loaded = {
        "contended": True,
        "reasons": ["threads waited for a CPU 60% of the wall time (limit 5%)"],
    }
    base = saved_run(tmp_path / "base.json", np.exp(rng.normal(0, 0.01, 50)))
    head = saved_run(tmp_path / "head.json", 3 * np.exp(rng.normal(0, 0.01, 50)), contention=loaded)
    [comparison] = compare_runs(load_benchmark_file(base), load_benchmark_file(head), SETTINGS)
    assert (
        comparison.verdict == CONTENDED_VERDICT
        and "head run contended: threads waited" in comparison.note
    )
    assert main(["compare", str(base), str(head)]) == 0
    out = capsys.readouterr().out
    assert (
        "WARNING: 1 timed under contention, not judged" in out
        and "rerun it when the machine is quiet" in out
    )
    quiet = saved_run(
        tmp_path / "quiet.json",
        3 * np.exp(rng.normal(0, 0.01, 50)),
        contention={"contended": False},
    )
    assert main(["compare", str(base), str(quiet)]) == 1


def test_a_machine_at_another_speed_is_not_judged(tmp_path, capsys):
    """The head is 1.4x slower and so was the reference kernel beside it: the machine changed, not the code."""
    rng = np.random.default_rng(5)
    base = saved_run(
        tmp_path / "base.json", np.exp(rng.normal(0, 0.01, 50)), reference_ms=(1.0, 1.0)
    )
    slow_machine = saved_run(
        tmp_path / "slow.json", 1.4 * np.exp(rng.normal(0, 0.01, 50)), reference_ms=(1.3, 1.5)
    )
    [comparison] = compare_runs(
        load_benchmark_file(base), load_benchmark_file(slow_machine), SETTINGS
    )
    assert comparison.verdict == CONTENDED_VERDICT
    assert (
        "took 1.000 ms in the base run and 1.396 ms in the head run (x1.40, limit 5%)"
        in comparison.note
    )
    assert main(["compare", str(base), str(slow_machine)]) == 0
    assert "ran at another speed in the two runs" in capsys.readouterr().out
    same_machine = saved_run(
        tmp_path / "same.json", 1.4 * np.exp(rng.normal(0, 0.01, 50)), reference_ms=(0.95, 1.05)
    )
    no_reference = saved_run(tmp_path / "old.json", 1.4 * np.exp(rng.normal(0, 0.01, 50)))
    assert (
        main(["compare", str(base), str(same_machine)]) == 1
    )  # a real slowdown on a steady machine still fails
    assert (
        main(["compare", str(base), str(no_reference)]) == 1
    )  # runs saved before the reference existed


def test_the_table_shows_the_ratio_of_medians_next_to_the_statistic(tmp_path, capsys):
    rng = np.random.default_rng(2)
    base = saved_run(tmp_path / "base.json", np.exp(rng.normal(0, 0.01, 50)))
    head = saved_run(tmp_path / "head.json", 1.2 * np.exp(rng.normal(0, 0.01, 50)))
    main(["compare", str(base), str(head)])
    out = capsys.readouterr().out
    # compare's alpha: 0.005 on each side, a two-sided 99% interval
    assert "| head ms / base ms | head/base (99% CI) |" in out
    row = next(line for line in out.splitlines() if line.startswith("| `naive/"))
    cells = [c.strip() for c in row.split("|")]
    assert float(cells[4]) == pytest.approx(float(cells[3]) / float(cells[2]), rel=2e-3)


class FakeWorker:
    """Answers requests like an A/B worker: ``setup`` with an empty fingerprint and a 1 ms step,
    ``time`` with fixed round times and contention as told; every request is logged as
    ``(name, kind)`` in ``log`` (``kind``: ``setup`` or ``time``) and the ``time`` requests kept."""

    role = "head"

    def transport_s(self):  # a fake pipe costs nothing
        return 0.0

    def __init__(self, name, seconds, log, contended=lambda n: False, running=lambda n: None):
        self.name, self.seconds, self.log, self.contended, self.running, self.calls = (
            name,
            seconds,
            log,
            contended,
            running,
            0,
        )
        self.side, self.requests, self.pending = Side(Path(".")), [], []

    def ask(self, request, *limit):
        if "setup" in request:
            self.log.append((self.name, "setup"))
            return {"fingerprint": {}, "step_s": 1e-3}
        self.log.append((self.name, "time"))
        self.requests.append(request)
        self.calls += 1
        contended = self.contended(self.calls)
        reasons = (
            [f"CPU steal 9% of CPU time (limit 5%) in block {self.calls}"] if contended else []
        )
        queue = self.running(self.calls)  # run queue read at the block's two ends
        return {
            "times": [self.seconds] * request["time"],
            "contention": {"contended": contended, "reasons": reasons}
            | (
                {"procs_running_before": queue[0], "procs_running_after": queue[1]} if queue else {}
            ),
        }

    def send(self, request):
        self.pending.append(request)

    def receive(self, *limit):
        return self.ask(self.pending.pop(0))


def block_pairs(base, head, n, rounds=3, policy=None):
    """``n`` block pairs of one worker pair as ``ab.Visits`` times them (base first, then alternating),
    with the contended pairs' reasons and how many kept pairs had both blocks contended."""
    from perfsuite.gate.ab import block_pair
    from perfsuite.gate.stats import DEFAULT_CONTENDED_PAIRS

    reasons, found, shared = [], [], 0
    for j in range(n):
        sample, both = block_pair(
            base,
            head,
            j % 2 == 0,
            rounds,
            (j, j + 1),
            policy or DEFAULT_CONTENDED_PAIRS,
            None,
            reasons,
        )
        found.append(sample)
        shared += both
    return found, reasons, shared


def test_pairs_alternate_their_order_and_carry_either_side_s_contention():
    log = []
    base = FakeWorker("base", 1.0, log)
    head = FakeWorker("head", 1.1, log, contended=lambda n: n == 2)
    pairs, reasons, _ = block_pairs(base, head, 3)
    assert [name for name, _ in log] == ["base", "head", "head", "base", "base", "head"]
    assert [p.contended for p in pairs] == [False, True, False]
    assert (pairs[0].base_s, pairs[0].head_s) == ([1.0] * 3, [1.1] * 3)
    assert pairs[0].cluster is None  # one worker per side: no clusters
    assert reasons == ["CPU steal 9% of CPU time (limit 5%) in block 2"]  # why, for the report
    # each block is placed from the seed it is given, and times its calls with no untimed step
    assert [r["placement"] for r in base.requests] == [0, 1, 2]
    assert [r["placement"] for r in head.requests] == [1, 2, 3]
    assert all(r["warmup"] == 0 and r["time"] == 3 for r in base.requests + head.requests)


def test_worker_pairs_are_visited_one_at_a_time_and_the_first_side_alternates():
    """Three worker pairs, three block pairs per visit: each pair is set up just before its visit and
    times its blocks while no other worker is asked anything (the next pair starts between visits, not
    during timing); base worker i only ever pairs with head worker i (one cluster each); which side goes
    first alternates block pair by block pair and from one visit to the next; every block gets its own
    placement."""
    from perfsuite.gate.ab import run_benchmark

    log = []
    bases = [FakeWorker(f"base{i}", 1.0, log) for i in range(3)]
    heads = [FakeWorker(f"head{i}", 1.1, log) for i in range(3)]
    plan = SequentialPlan(
        worker_pairs=3, looks=(3,), budget_s=60, max_budget_s=60, rounds=2, blocks=3
    )
    found = run_benchmark(
        bases, heads, "naive", "b1h2s16d8-fp32-causal-cpu", 0, SETTINGS, plan, clock=lambda: 0.0
    )
    timed = [name for name, kind in log if kind == "time"]
    visit = [timed[6 * v : 6 * v + 6] for v in range(3)]
    assert visit == [
        ["base0", "head0", "head0", "base0", "base0", "head0"],
        ["head1", "base1", "base1", "head1", "head1", "base1"],
        ["base2", "head2", "head2", "base2", "base2", "head2"],
    ]
    setups = [i for i, (_, kind) in enumerate(log) if kind == "setup"]
    starts = [log.index((f"base{c}", "time")) for c in range(3)]
    for c in range(
        3
    ):  # both workers of pair c set up after pair c - 1's last block, before its own
        own = [i for i in setups if log[i][0] in (f"base{c}", f"head{c}")]
        assert len(own) == 2 and max(own) < starts[c]
        assert c == 0 or min(own) > max(
            i for i, e in enumerate(log) if e == (f"head{c - 1}", "time")
        )
    assert found.clusters == [0] * 3 + [1] * 3 + [2] * 3 and found.rounds == 2
    assert found.comparison.verdict == "slower" and found.looks == 1
    # a visit's blocks share one placement per side (fewer than PLACEMENT_PAIRS blocks), drawn anew
    # for every visit and side; only a visit's first block has untimed warm-up steps
    from perfsuite.gate.sequential import PLACEMENT_PAIRS, WARMUP_STEPS

    assert 3 <= PLACEMENT_PAIRS
    per_visit = [[r["placement"] for r in w.requests] for w in bases + heads]
    assert all(len(set(seeds)) == 1 for seeds in per_visit)
    assert len({seeds[0] for seeds in per_visit}) == 6
    assert all(
        [r["warmup"] for r in w.requests] == [WARMUP_STEPS, 0, 0] and r["time"] == 2
        for w in bases + heads
        for r in w.requests
    )


def test_one_worker_per_side_pools_its_visits():
    from perfsuite.gate.ab import run_benchmark

    log = []
    plan = SequentialPlan(worker_pairs=1, budget_s=60, max_budget_s=60, rounds=1, blocks=2)
    found = run_benchmark(
        [FakeWorker("base", 1.0, log)], [FakeWorker("head", 1.0, log)], "naive",
        "b1h2s16d8-fp32-causal-cpu", 0, SETTINGS, plan, clock=lambda: 0.0,
    )  # fmt: skip
    visits = len(found.base_blocks) // 2
    assert visits in plan.looks and found.clusters == [None] * 2 * visits
    firsts = [name for name, kind in log if kind == "time"][
        ::2
    ]  # who went first in each block pair
    assert firsts == ["base", "head", "head", "base"] * (visits // 2)  # within and across visits
    assert found.comparison.verdict == "no change"  # identical times: decided at a look, pooled


def test_the_ab_json_and_method_carry_the_plan_and_each_pair_s_worker_pair():
    """Schema 3: the plan (worker pairs, looks, budget), one-sided alpha, and per benchmark the worker
    pair of each block pair and the calls per block; the method line states the looks and levels."""
    from perfsuite.gate.ab import run_benchmark, ab_method, ab_payload
    from perfsuite.gate.stats import ContendedPairs, nominal_levels

    log = []
    plan = SequentialPlan(worker_pairs=2, budget_s=60, max_budget_s=60, rounds=2, blocks=3)
    found = run_benchmark(
        [FakeWorker(f"base{i}", 1.0, log) for i in range(2)],
        [FakeWorker(f"head{i}", 1.0, log) for i in range(2)],
        "naive", "b1h2s16d8-fp32-causal-cpu", 0, SETTINGS, plan, clock=lambda: 0.0,
    )  # fmt: skip
    payload = json.loads(json.dumps(ab_payload([found], {}, SETTINGS, plan)))
    assert payload["schema_version"] == 3 and payload["workers_per_side"] == 2
    assert (payload["looks"], payload["budget_s"], payload["alpha"]) == ([2], 60, 0.01)
    [bench] = payload["benchmarks"]
    assert bench["clusters"] == [0, 0, 0, 1, 1, 1] and bench["rounds"] == 2
    assert bench["verdict"] == "no change" and bench["looks"] == 1
    assert bench["stopped"] == "decisive" and "2 worker pairs" in bench["note"]
    method = ab_method(plan, SETTINGS, ContendedPairs.SHARED, None)
    assert (
        "warm worker pairs timed one at a time" in method
        and "t interval across 2 worker pairs" in method
    )
    assert f"nominal one-sided levels {nominal_levels((1.0,), 0.01)[0]:.2g}" in method


def test_the_verdict_line_says_whether_contention_or_the_machine_s_speed_kept_a_benchmark_unjudged():
    from perfsuite.gate.flow import judge

    def comparison(note):
        return BenchmarkComparison(
            "k",
            1.0,
            1.0,
            None,
            CONTENDED_VERDICT,
            [],
            note,
            speed_changed=note.startswith("the machine ran at another speed"),
        )

    speed = comparison(
        "the machine ran at another speed: the reference took 1.000 ms in the base run"
    )
    busy = comparison("head run contended: CPU steal 9% of CPU time (limit 5%)")
    lines = {
        tuple(n): judge(
            [comparison(n_) for n_ in n], SETTINGS, "t", UNPAIRED_METHOD, False
        ).verdict_line
        for n in [(speed.note,), (busy.note,), (speed.note, busy.note)]
    }
    assert lines[(speed.note,)].endswith(
        "WARNING: 1 at another machine speed than the baseline, not judged"
    )
    assert lines[(busy.note,)].endswith("WARNING: 1 timed under contention, not judged")
    assert lines[(speed.note, busy.note)].endswith(
        "WARNING: 2 timed under contention or (1 of them) at another machine speed than the baseline, not judged"
    )


def test_require_timing_turns_a_pass_with_untimed_benchmarks_into_not_judged():
    """A new user's gate on a loaded runner: every pair contended, so a slowdown that adds no
    structure passes unseen; ``--require-timing`` makes that exit 2, and a structural failure stays
    a FAIL (exit 1)."""
    from perfsuite.gate.flow import judge

    contended = BenchmarkComparison("k", 1.0, 1.0, None, CONTENDED_VERDICT, [], "contended")
    timed = BenchmarkComparison("j", 1.0, 1.0, None, Verdict.NO_CHANGE, [], "")
    plain = judge([contended, timed], SETTINGS, "t", UNPAIRED_METHOD, True)
    assert plain.exit_code == 0 and plain.verdict_line.startswith("perfsuite gate: PASS")
    strict = judge([contended, timed], SETTINGS, "t", UNPAIRED_METHOD, True, require_timing=True)
    assert strict.exit_code == 2
    assert strict.verdict_line.startswith(
        "perfsuite gate: NOT JUDGED: the timing of 1 of 2 benchmarks was not judged"
    )
    assert "--require-timing" in strict.report_md and "decided by" not in strict.verdict_line
    added = dataclasses.replace(
        contended,
        structure=["+1 copy cpu aten::clone [2x2] (+16 B per step)"],
        structure_adds_work=True,
    )
    failed = judge([added], SETTINGS, "t", UNPAIRED_METHOD, True, require_timing=True)
    assert failed.exit_code == 1
    assert judge([timed], SETTINGS, "t", UNPAIRED_METHOD, True, require_timing=True).exit_code == 0


def test_calibration_slowdown_is_python_api_only(capsys):
    """The injected slowdown is no ``perfsuite ab`` option; the validation tool sets it on ``Side``."""
    for option in ("--head-slowdown", "--slow-variant"):
        with pytest.raises(SystemExit):
            main(["ab", option, "0.3"])
        assert f"unrecognized arguments: {option}" in capsys.readouterr().err
    head = Side(Path("."), slowdown=0.3, slow_variant="sdpa")
    assert (
        head.slowdown_for("sdpa"),
        head.slowdown_for("naive"),
        Side(Path(".")).slowdown_for("sdpa"),
    ) == (0.3, 0.0, 0.0)


@pytest.mark.parametrize(
    "option, value",
    [
        ("--budget-s", "-1"),
        ("--budget-s", "soon"),
        ("--max-budget-s", "-0.5"),
        ("--blocks", "0"),
        ("--rounds", "0"),
        ("--workers-per-side", "0"),
    ],
)
def test_bad_sequential_options_name_the_value(option, value, capsys):
    with pytest.raises(SystemExit):
        main(["ab", option, value])
    err = capsys.readouterr().err
    assert option in err and value in err


def test_sequential_options_make_the_plan():
    from perfsuite.cli.main import build_parser
    from perfsuite.suite.command_config import sequential_plan

    args = build_parser().parse_args(
        ["ab", "--workers-per-side", "4", "--budget-s", "3", "--max-budget-s", "9", "--blocks", "5",
         "--rounds", "2"]
    )  # fmt: skip
    plan, note = sequential_plan(
        args.workers_per_side, args.blocks, args.rounds, args.budget_s, args.max_budget_s,
        args.fail_on_structure,
    )  # fmt: skip
    assert note is None
    assert plan == SequentialPlan(worker_pairs=4, budget_s=3, max_budget_s=9, rounds=2, blocks=5)
    defaults = build_parser().parse_args(["ab"])
    assert (defaults.workers_per_side, defaults.budget_s, defaults.max_budget_s) == (
        WORKER_PAIRS,
        10.0,
        30.0,
    )
    assert (defaults.blocks, defaults.rounds, defaults.alpha) == (0, 0, None)
    # a cap below the budget is raised to it, not refused
    assert sequential_plan(2, 0, 0, 5, 1, True)[0].max_budget_s == 5


def test_alpha_defaults_per_command_and_a_bad_level_is_a_usage_error(tmp_path, capsys):
    """``--alpha`` left out: 0.001 for ab (one-sided, per benchmark), 0.005 for compare of separate runs;
    a level outside (0, 0.5) is refused naming it, not a traceback."""
    from perfsuite.suite.command_config import gate_settings

    assert gate_settings(None, None, separate_runs=False) == GateSettings(0.001, 0.02)
    assert gate_settings(None, None, separate_runs=True) == GateSettings(0.005, 0.15)
    assert gate_settings(0.01, 0.05, separate_runs=True) == GateSettings(0.01, 0.05)
    base = saved_run(tmp_path / "a.json", [1.0] * 10)
    for command in (
        ["compare", str(base), str(base)],
        ["ab", "--cases", "b1h2s16d8-fp32-causal-cpu"],
    ):
        assert main([*command, "--alpha", "0.7"]) == 2
        err = capsys.readouterr().err
        assert "--alpha" in err and "0.7" in err and "Traceback" not in err


@pytest.mark.parametrize(
    "options, why",
    [
        (["--blocks", "2"], "--blocks 2: a worker pair needs at least 3 kept block pairs"),
        (["--budget-s", "0"], "--budget-s 0 times nothing"),
    ],
)
def test_a_plan_that_can_never_decide_by_timing_is_a_usage_error_unless_structure_is_judged(
    options, why, capsys
):
    """Several worker pairs need 3 kept block pairs each for an estimate: ``--blocks 2`` can never
    decide, nor can a zero budget. With ``--no-fail-on-structure`` that is a usage error (nothing would
    be judged); by default the gate judges structure only and says so."""
    from perfsuite.suite.command_config import sequential_plan

    case = ["--cases", "b1h2s16d8-fp32-causal-cpu"]
    assert main(["ab", *options, "--no-fail-on-structure", *case]) == 2
    err = capsys.readouterr().err
    assert why in err and "drop --no-fail-on-structure" in err
    blocks = int(options[1]) if options[0] == "--blocks" else 0
    budget = float(options[1]) if options[0] == "--budget-s" else 10.0
    plan, note = sequential_plan(8, blocks, 0, budget, 30, True)
    assert (
        not plan.can_decide() and why in note and note.endswith("this gate judges structure only")
    )
    # one worker per side pools its pairs: two block pairs per visit can decide
    assert sequential_plan(1, 2, 0, 10, 30, False)[0].can_decide()


class SetupWorker:
    """Answers a ``setup`` request as a worker whose tree lacks ``absent`` variants."""

    role = "head"

    def transport_s(self):  # a fake pipe costs nothing
        return 0.0

    def __init__(self, absent=(), variant=None):
        self.absent, self.side = absent, Side(Path("."), variant)

    def ask(self, request, *limit):
        name = request["setup"]["variant"]
        return (
            {"missing": f"no variant {name!r} in this tree"}
            if name in self.absent
            else {"fingerprint": {}}
        )

    def send(self, request):
        self.pending = request

    def receive(self, *limit):
        return self.ask(self.pending)


def test_a_variant_renamed_by_the_change_is_missing_not_an_error():
    from perfsuite.gate.ab import run_benchmark

    args = ("b1h2s16d8-fp32-causal-cpu", 0, SETTINGS, SequentialPlan())
    renamed = run_benchmark([SetupWorker()], [SetupWorker(absent=("old",))], "old", *args)
    assert (renamed.comparison.verdict, renamed.comparison.note) == (
        "missing",
        "only in the base tree",
    )
    with pytest.raises(WorkerError, match="either|base: no variant 'typo'"):
        run_benchmark(
            [SetupWorker(absent=("typo",))], [SetupWorker(absent=("typo",))], "typo", *args
        )
    with pytest.raises(WorkerError, match="--head-variant: no variant 'nope'"):
        run_benchmark(
            [SetupWorker()], [SetupWorker(absent=("nope",), variant="nope")], "naive", *args
        )


class UnsupportedWorker(SetupWorker):
    """A worker whose variant cannot run the case (``certain_skip``)."""

    def ask(self, request, *limit):
        return {"unsupported": "naive does not declare sinks"}


def test_progress_is_said_only_for_a_benchmark_that_runs():
    """ab printed an 'A/B <variant> on <case>' line for every combination, also those it then left out."""
    from perfsuite.gate.ab import run_benchmark

    said = []
    plan = SequentialPlan(budget_s=0.0, max_budget_s=0.0)  # structure only: nothing timed
    args = ("b1h2s16d8-fp32-causal-cpu", 0, SETTINGS, plan)
    assert (
        run_benchmark(
            [UnsupportedWorker()], [UnsupportedWorker()], "naive", *args, progress=said.append
        )
        is None
    )
    assert said == []
    run_benchmark([SetupWorker()], [SetupWorker()], "naive", *args, progress=said.append)
    assert said == ["A/B naive on b1h2s16d8-fp32-causal-cpu (forward)"]


def test_a_benchmark_with_no_uncontended_pair_shows_no_ratio():
    """0 pairs measured: the paired column says '-', not a ratio of 1.000 that reads like 'no change'."""
    from perfsuite.gate.compare import BenchmarkComparison, markdown
    from perfsuite.gate.stats import RatioEstimate

    nothing = BenchmarkComparison(
        "naive/b1h2s16d8-fp32-causal-cpu",
        0.010,
        0.012,
        RatioEstimate(1.0, 0.0, float("inf"), 0, "paired sequential"),
        CONTENDED_VERDICT,
        [],
        "0 pairs kept, 34 contended set aside",
    )
    row = next(
        line
        for line in markdown([nothing], SETTINGS, "t", "paired").splitlines()
        if line.startswith("| `naive")
    )
    assert "| 1.200 | - | inconclusive: contended" in row and "1.000" not in row


def test_a_fail_that_judged_no_timing_says_so(tmp_path, capsys):
    """Structure fails the gate while every timing was contended: the FAIL line says no timing verdict was reached."""
    rng = np.random.default_rng(8)
    loaded = {
        "contended": True,
        "reasons": ["threads waited for a CPU 60% of the wall time (limit 5%)"],
    }
    base = saved_run(tmp_path / "base.json", np.exp(rng.normal(0, 0.01, 50)))
    head = saved_run(
        tmp_path / "head.json", np.exp(rng.normal(0, 0.01, 50)), clones=1, contention=loaded
    )
    assert main(["compare", str(base), str(head), "--fail-on-structure"]) == 1
    out = capsys.readouterr().out
    assert (
        "FAIL: 1 of 1 benchmark regressed (0 slower, 1 with structure that adds work); decided by "
        "structure (no timing verdict was reached); WARNING: 1 timed under contention, not judged"
    ) in out
    timed = saved_run(tmp_path / "timed.json", np.exp(rng.normal(0, 0.01, 50)), clones=1)
    assert main(["compare", str(base), str(timed), "--fail-on-structure"]) == 1
    out = capsys.readouterr().out  # timing said no change
    assert "decided by structure" in out and "no timing verdict was reached" not in out


def test_a_pass_that_judged_no_timing_says_so(tmp_path, capsys):
    """Identical structure, every timing contended: the PASS line says it rests on structure only."""
    rng = np.random.default_rng(9)
    loaded = {
        "contended": True,
        "reasons": ["threads waited for a CPU 60% of the wall time (limit 5%)"],
    }
    base = saved_run(tmp_path / "base.json", np.exp(rng.normal(0, 0.01, 50)))
    head = saved_run(tmp_path / "head.json", np.exp(rng.normal(0, 0.01, 50)), contention=loaded)
    assert main(["compare", str(base), str(head), "--fail-on-structure"]) == 0
    assert "PASS: no regression found in 1 benchmark" in (out := capsys.readouterr().out)
    assert "; decided by structure only: no timing verdict was reached" in out
    timed = saved_run(tmp_path / "timed.json", np.exp(rng.normal(0, 0.01, 50)))
    assert main(["compare", str(base), str(timed), "--fail-on-structure"]) == 0
    assert "; decided by timing and structure" in capsys.readouterr().out


def test_a_structure_only_gate_asks_for_no_budget_and_has_one_verdict_line():
    """``perfsuite ab --budget-s 0`` times nothing, as asked: no bold "timing decided none" line before the
    table, no advice to raise the budget; the verdict line says the benchmarks were not timed. A gate whose
    timings were taken and judged nothing still leads with that line, and it says PASS or FAIL."""
    from perfsuite.gate.compare import NOT_TIMED_NOTE, BenchmarkComparison
    from perfsuite.gate.flow import judge

    copy = "+1 copy cpu aten::clone [2x2] (+16 B per step)"
    untimed = [
        BenchmarkComparison(
            "a/k", None, None, None, Verdict.INCONCLUSIVE, [copy], NOT_TIMED_NOTE, True
        ),
        BenchmarkComparison(
            "b/k", None, None, None, Verdict.INCONCLUSIVE, [], NOT_TIMED_NOTE, False
        ),
    ]
    outcome = judge(untimed, GateSettings(), "t", "m", fail_on_structure=True)
    assert outcome.report_md.count("**perfsuite gate:") == 1
    assert outcome.verdict_line.startswith("perfsuite gate: FAIL: 1 of 2 benchmarks regressed")
    assert "--budget-s" not in outcome.verdict_line
    assert outcome.verdict_line.endswith("; 2 not timed: this gate judged structure only")
    timed = [dataclasses.replace(c, note="") for c in untimed]
    outcome = judge(timed, GateSettings(), "t", "m", fail_on_structure=True)
    # its first line carries the verdict the last line gives: a reader of the first line alone sees the FAIL
    assert outcome.report_md.startswith(
        "**perfsuite gate: FAIL: timing decided none of the 2 benchmarks"
    )
    assert "inconclusive timings decide nothing (each row's note says why)" in outcome.verdict_line


def test_the_ab_worker_fingerprint_holds_score_writes_and_saved_bytes_as_a_saved_run_does():
    """``ab --fail-on-structure`` judges the same facts as ``compare``: score writes, work, saved bytes."""
    from perfsuite.gate.ab_worker import Worker

    request = {"variant": "naive", "case": "b1h2s16d8-fp32-causal-cpu", "seed": 0, "specs": []}
    forward = Worker().setup(request | {"mode": "forward"})["fingerprint"]
    assert any(
        label.startswith("copy [1x2x16x16] in aten::masked_fill")
        for label in forward["score_writes"]
    )
    assert (
        forward["no_work_ops"] and forward["work_ops"] and "saved_for_backward_bytes" not in forward
    )
    both = Worker().setup(request | {"mode": "forward_backward"})["fingerprint"]
    assert both["saved_for_backward_bytes"] > 0


def test_ab_timing_threads_sets_both_workers_thread_count(tmp_path, capsys):
    """``--timing-threads 1`` (experimental, not yet calibrated): both workers time single-threaded, and the
    report's method says so."""
    out = tmp_path / "ab.json"
    code = main(
        [
            "ab",
            "--variants",
            "naive_inplace",
            "--cases",
            "b1h2s16d8-fp32-causal-cpu",
            "--modes",
            "forward",
            "--blocks",
            "2",
            "--rounds",
            "1",
            "--fail-on-structure",
            "--timing-threads",
            "1",
            "--json",
            str(out),
        ]
    )
    report = capsys.readouterr().out
    assert code == 0, report
    payload = json.loads(out.read_text())
    machine = payload["machine"]
    assert machine["num_threads"] == 1 and machine["base_machine"]["num_threads"] == 1
    # the calibrated default keeps pairs whose two blocks shared a load
    assert payload["contended_pair_policy"] == "shared"
    assert "timed with 1 torch thread per side" in report
    with pytest.raises(SystemExit):
        main(["ab", "--timing-threads", "0"])


def test_shared_policy_keeps_a_pair_whose_two_blocks_were_contended_and_sets_aside_a_one_sided_one():
    from perfsuite.gate.stats import ContendedPairs

    def pairs(policy):
        log = []
        base = FakeWorker("base", 1.0, log, contended=lambda n: n in (1, 3))
        head = FakeWorker("head", 1.1, log, contended=lambda n: n == 1)
        found, _, shared = block_pairs(base, head, 3, policy=policy)
        return [p.contended for p in found], shared

    # pair 1: both blocks contended (a steady load); pair 2: neither; pair 3: only the base's block
    assert pairs(ContendedPairs.SHARED) == ([False, False, True], 1)
    assert pairs(ContendedPairs.SET_ASIDE) == ([True, False, True], 0)


def test_a_shared_load_that_fills_every_cpu_is_set_aside_under_either_policy(monkeypatch):
    """Two busy processes on 2 CPUs: both blocks contended, and beside them 2 other runnable threads."""
    from perfsuite.gate.stats import ContendedPairs

    monkeypatch.setattr("os.cpu_count", lambda: 2)
    monkeypatch.delenv("PERFSUITE_CONTENTION_CHECK", raising=False)
    # pair 1: 3 runnable at every reading (the reader and 2 others); pair 2: 2 at one reading
    queues = {1: (3, 4), 2: (3, 2)}
    for policy in ContendedPairs:
        log = []
        base = FakeWorker("base", 1.0, log, lambda n: True, lambda n: queues[n])
        head = FakeWorker("head", 1.0, log, lambda n: True, lambda n: queues[n])
        (first, second), reasons, _ = block_pairs(base, head, 2, policy=policy)
        assert (
            first.contended is True
            and "other processes filled every CPU (2 runnable threads on 2 CPUs)" in reasons
        )
        assert second.contended is (policy == ContendedPairs.SET_ASIDE)


def test_a_fail_line_says_how_many_regressions_are_both_slower_and_structural(tmp_path, capsys):
    """One benchmark both slower (x2) and with an added clone: one regression, counted once."""
    times = np.exp(np.random.default_rng(3).normal(0, 0.01, 50))
    base = saved_run(tmp_path / "a.json", times)
    head = saved_run(tmp_path / "b.json", times * 2, clones=1)
    assert main(["compare", str(base), str(head), "--fail-on-structure"]) == 1
    assert (
        "FAIL: 1 of 1 benchmark regressed (1 slower, 1 with structure that adds work; 1 of them both)"
        in capsys.readouterr().out
    )


class LoadedWorker:
    """An A/B worker beside two busy processes on 2 CPUs: every block contended, its threads waiting
    ``wait`` of the wall time while running ``cpu`` (per wall second), others filling every CPU."""

    role = "head"

    def transport_s(self):  # a fake pipe costs nothing
        return 0.0

    def __init__(self, seconds, rng, wait=0.6, cpu=1.0):
        self.seconds, self.rng, self.wait, self.cpu, self.side = seconds, rng, wait, cpu, Side(None)

    def ask(self, request, *limit):
        if "setup" in request:
            return {"fingerprint": {}}
        loaded = {
            "contended": True,
            "reasons": ["threads waited 60% (limit 5%)"],
            "wait_fraction": self.wait,
            "cpu_per_wall": self.cpu,
            "procs_running_before": 4,
            "procs_running_after": 4,
        }
        noisy = self.seconds * float(np.exp(self.rng.normal(0, 0.05))) / (1 - 0.375)
        return {"times": [noisy] * request["time"], "contention": loaded}

    def send(self, request):
        self.pending = request

    def receive(self, *limit):
        return self.ask(self.pending)


def test_an_11x_slower_head_timed_only_under_contention_fails_the_gate(monkeypatch):
    """Issue 42's new user: a head 11.5x slower, every pair set aside beside a load that fills both
    CPUs. Before, ``PASS: no regression found in 1 benchmark (1 inconclusive: contended)``, exit 0
    (reproduced with the contended rule off); now the contended pairs decide it ``slower`` and the
    gate fails on timing. Identical code beside the same load passes."""
    from perfsuite.gate.ab import run_benchmark
    from perfsuite.gate.flow import judge

    monkeypatch.setattr("os.cpu_count", lambda: 2)
    monkeypatch.delenv("PERFSUITE_CONTENTION_CHECK", raising=False)
    # two worker pairs, every pair contended: sampling goes on to the cap (20 visits of 5 block pairs)
    plan = SequentialPlan(worker_pairs=2, budget_s=1, max_budget_s=2, rounds=1, blocks=5)

    def gate(head_s, settings):
        rng = np.random.default_rng(42)
        bases = [LoadedWorker(0.001, rng) for _ in range(2)]
        heads = [LoadedWorker(head_s, rng) for _ in range(2)]
        ticks = iter(range(10**6))
        found = run_benchmark(
            bases, heads, "naive", "b1h2s16d8-fp32-causal-cpu", 0, settings, plan,
            clock=lambda: 0.1 * next(ticks),
        )  # fmt: skip
        assert found.comparison.note.startswith("0 pairs kept, ")  # every pair set aside
        assert found.stopped == "cap" and set(found.clusters) == {0, 1}
        return judge([found.comparison], settings, "t", "m", fail_on_structure=True)

    before = gate(0.0115, GateSettings(contended_min_effect=None))
    assert before.exit_code == 0 and "(1 inconclusive: contended)" in before.verdict_line
    now = gate(0.0115, GateSettings())
    assert (
        now.exit_code == 1
        and "(1 slower, 0 with structure that adds work); decided by timing" in (now.verdict_line)
    )
    decided = re.search(
        r"contended pairs: wait-adjusted x([\d.]+) \[([\d.]+), ([\d.]+)\], above the x1.25 floor",
        now.comparisons[0].note,
    )
    assert decided, now.comparisons[0].note  # the row shows the numbers that decided it
    centre, low, high = map(float, decided.groups())
    assert 1.25 < low <= centre <= high
    same = gate(0.001, GateSettings())
    assert same.exit_code == 0 and "inconclusive: contended" in same.verdict_line


def test_every_calibration_change_still_finds_the_lines_it_edits():
    """``validation.calibrate_gate``'s real changes edit source lines by text: each must still be there
    (else the calibration stops with a RuntimeError halfway through a long run)."""
    from validation.calibrate_gate import REAL_CHANGES

    root = Path(__file__).resolve().parents[2] / "perfsuite"
    for name, change in REAL_CHANGES.items():
        source = (root / change.module).read_text()
        assert all(old in source for old, _ in change.edits), name


def test_the_calibration_bounds_the_false_verdict_rate_by_clopper_pearson():
    """0 false verdicts in 300 unchanged benchmark-gates bound the rate at 1.2% (95%: the rule of three
    gives about 1%); the bound is the Beta quantile of Clopper & Pearson (1934), 1 - 0.025**(1/300) at 0."""
    from validation.calibrate_gate import false_verdict_bound, summary

    assert false_verdict_bound(0, 300) == pytest.approx(1 - 0.025 ** (1 / 300))
    assert false_verdict_bound(0, 300) == pytest.approx(0.0122, abs=1e-4)
    assert false_verdict_bound(3, 300) == pytest.approx(0.0289, abs=1e-3)  # published: 2.89%
    assert false_verdict_bound(5, 5) == 1.0 and np.isnan(false_verdict_bound(0, 0))
    gate = {
        "seconds": 30.0, "load_before": "0.1 0.1 0.1", "load_after": "0.2 0.1 0.1", "steal": 0.0,
        "flagged": False, "caught": False, "changed": [], "ratios": {}, "pairs": {},
        "contended_pairs": {}, "false_alarms": 0, "false_faster": 1, "unchanged": 300,
        "unchanged_no_change": 290, "decisive": 291, "contended": 0, "benchmarks": 300,
        "benchmark_seconds": {"a": 2.0, "b": 4.0, "c": 9.0},
    }  # fmt: skip
    table = summary({"A/A": [gate]}, 0)
    assert "Clopper-Pearson upper bound" in table and "median s/benchmark" in table
    row = table.splitlines()[-1].split(" | ")
    assert row[2] == "0/1"  # no gate failed by the clock checks
    assert row[5:8] == ["0/300", "1/300", f"{false_verdict_bound(1, 300):.2%}"]
    assert row[11:13] == ["4.0", "9.0"]  # seconds per benchmark: median, max
    tampered = summary({"A/A": [gate | {"tampered": "the base worker's times disagree"}]}, 0)
    assert tampered.splitlines()[-1].split(" | ")[2] == "1/1"


def test_worker_spread_reads_each_pair_s_worker_pair_from_the_payload():
    """Three worker pairs measured x1.00, x1.02 and x1.04 (unequal numbers of pairs, one pair set aside):
    the row shows each worker pair's estimate from the payload's ``clusters``."""
    from validation.worker_spread import spread_rows

    clusters = [0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2]
    ratios = {0: 1.0, 1: 1.02, 2: 1.04}
    payload = {
        "benchmarks": [
            {
                "key": "naive/b1h2s16d8-fp32-causal-cpu",
                "base_blocks_s": [[1.0]] * len(clusters),
                "head_blocks_s": [[ratios[c]] for c in clusters],
                "contended_pairs": [False] * 6 + [True] + [False] * 4,
                "clusters": clusters,
            }
        ]
    }
    row = spread_rows(payload)[-1]
    assert row.startswith("| `naive/b1h2s16d8-fp32-causal-cpu` | 10 | 1.0199 | 0.0196 |")
    assert row.endswith("+0.000 +0.020 +0.039 |")


def test_an_ab_worker_does_not_run_what_the_suite_does_not_generate():
    """An inference-only layout case (paged, split-KV, FP8) is forward only in the suite; ab's worker
    answers its backward as unsupported with the same reason instead of running it (a serving trial's
    worker crashed on a backward the suite never runs, and the whole gate ended with exit 2)."""
    from perfsuite.gate.ab_worker import Worker
    from perfsuite.variants.registry import LAYOUT_FORWARD_ONLY

    request = {
        "variant": "split_kv",
        "case": "b2h2kv2q1k8d4-fp32-causal_br-split2-cpu",
        "mode": "backward",
        "seed": 0,
        "fingerprint": False,
    }
    assert Worker().setup(request) == {"unsupported": LAYOUT_FORWARD_ONLY["split_kv"]}


def test_a_long_structural_diff_is_cut_in_the_table_and_the_fail_line_counts_the_rest():
    from perfsuite.gate.compare import STRUCTURE_CELL_LINES, structure_cell
    from perfsuite.gate.flow import failure_reason

    lines = [f"-1 aten::op{i}" for i in range(20)] + [
        "+1 copy cpu aten::clone [2x2] (+16 B per step)"
    ]
    cell = structure_cell(lines)
    assert cell.count(";") == STRUCTURE_CELL_LINES and cell.endswith(
        f"and {21 - STRUCTURE_CELL_LINES} more (the JSON of perfsuite ab --json lists all)"
    )
    assert structure_cell([]) == "same"
    comparison = BenchmarkComparison("k", 1.0, 1.0, None, Verdict.NO_CHANGE, lines, "", True)
    reason = failure_reason(comparison, True)
    assert reason.startswith("structure adds work: +1 copy cpu aten::clone")
    assert reason.endswith(
        "(20 other structural lines, adding nothing: the table's structure cell, all of them in "
        "`perfsuite ab --json`)"
    )


def test_a_timing_only_worker_sets_up_with_its_first_call_alone():
    """The gate's other workers of a side (no fingerprint) answer after the first call, the set-up's
    seconds said; the fingerprinting worker also times the step (the one ``step_s`` the gate sizes blocks
    from)."""
    from perfsuite.gate.ab_worker import Worker

    request = {"variant": "naive", "case": "b1h2s16d8-fp32-causal-cpu", "seed": 0}
    worker = Worker()
    timing_only = worker.setup({**request, "fingerprint": False})
    assert set(timing_only) == {"ready", "setup_s", "clock"}
    assert 0 < timing_only["setup_s"] < 60
    assert len(worker.handle({"time": 3, "warmup": 1, "placement": 5})["times"]) == 3
    full = Worker().setup({**request, "fingerprint": True})
    assert {"fingerprint", "setup_s", "step_s"} <= set(full) and full["step_s"] > 0


SLOW_FIRST_CALL = '''import time

import torch.nn.functional as F

_called = []


def attention(query, key, value, *, mask, scale):
    """SDPA whose first call in a process takes 0.5 s more (as a compiling variant's does)."""
    if not _called:
        _called.append(True)
        time.sleep(0.5)
    return F.scaled_dot_product_attention(query, key, value, is_causal=mask.is_causal, scale=scale)
'''


@pytest.mark.slow
def test_a_variant_whose_set_up_is_costly_is_timed_on_half_the_worker_pairs_in_every_benchmark(
    tmp_path,
):
    """Four worker pairs and a 1 s budget: four set-ups with a first call of 0.5 s would spend it, so
    both of the variant's benchmarks run on two pairs (its first call is paid once per process), and the
    note says why; a cheap variant keeps the four."""
    (tmp_path / "slowfirst.py").write_text(SLOW_FIRST_CALL)
    cases = ["b1h2s16d8-fp32-causal-cpu", "b1h2s32d8-fp32-causal-cpu"]
    plan = SequentialPlan(worker_pairs=4, budget_s=1, max_budget_s=2, rounds=2, blocks=3)
    results, _ = run_ab(
        Side(tmp_path),
        Side(tmp_path),
        ["attention", "sdpa"],
        cases,
        plan=plan,
        specs=("slowfirst:attention",),
    )
    pairs = {tuple(r.key.split("/")[:2]): set(r.clusters) for r in results}
    assert pairs == {
        ("attention", cases[0]): {0, 1},
        ("attention", cases[1]): {0, 1},
        ("sdpa", cases[0]): {0, 1, 2, 3},
        ("sdpa", cases[1]): {0, 1, 2, 3},
    }
    note = results[0].comparison.note
    assert re.search(r"its set-up in a fresh worker took 0\.\d s: 2 worker pairs, not 4", note)
    assert "not 4" not in results[2].comparison.note


def test_block_overhead_measures_a_real_worker_pair_between_its_blocks():
    """``validation.block_overhead`` times a fresh worker pair's block pairs as the gate runs them: the
    wall time beyond the timed calls is positive (requests, replies, readings) and finite."""
    from validation.block_overhead import overhead_ms

    found = overhead_ms(Path(__file__).resolve().parents[2], "sdpa", 4)
    assert 0.0 < found < 1e4
