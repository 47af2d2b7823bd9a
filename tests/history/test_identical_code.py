"""A seeded simulation of 100 series of identical code timed in separate runs on a shared machine: the
machine's speed moves between runs (a few percent each, and 1.35x slower from one commit on, which
the speed reference beside the runs sees too), and some runs are contended (flagged, far slower). No
finding may come of it: not in ``history detect``, not among the dashboard's Findings; a step is at
most drawn as unconfirmed."""

from __future__ import annotations

import json
import math

import numpy as np

from perfsuite.cli.main import main
from perfsuite.dashboard.from_store import dashboard_from_store
from perfsuite.history import BenchmarkRecord, Commit, RunRecord, Software, open_store
from perfsuite.history import Testbed as HistoryTestbed

SERIES = 100
COMMITS = 20
SEED = 52
RUN_SIGMA = 0.06  # the machine's speed between separate runs, log scale
ROUND_SIGMA = 0.03  # rounds inside one run
CONTENDED_SHARE = 0.2  # runs another process took the CPU from (flagged by the contention check)
SLOWER_FROM = (
    13  # from this commit on the machine runs 1.35x slower (a co-tenant's steady load), and
)
SLOWER = 1.35  # the reference matmul beside each run with it
TESTBED = HistoryTestbed({"cpu": "x86_64"}, 0, "shared cpu", 8 * 2**30, 2, host="shared")


def _bench(index: int, factor: float, contended: bool, rng: np.random.Generator) -> BenchmarkRecord:
    rounds = tuple(
        float(t) for t in 1e-3 * (1 + index / 50) * factor * np.exp(rng.normal(0, ROUND_SIGMA, 9))
    )
    return BenchmarkRecord(
        name=f"v{index:03d}/b1h2s16d8-fp32-causal-cpu/forward",
        variant=f"v{index:03d}",
        case_id="b1h2s16d8-fp32-causal-cpu",
        mode="forward",
        device="cpu",
        rounds_s=rounds,
        median_s=float(np.median(rounds)),
        score_copies=0.0,
        structure={"cpu_ops": {"aten::bmm": 2}, "no_work_ops": {}},
        contended=contended,
        state="contended" if contended else None,
        speed_reference={"before_ms": factor, "after_ms": factor},
    )


def simulate(store, seed: int = SEED) -> None:
    """One separate run per commit of ``SERIES`` benchmarks of code that never changes."""
    rng = np.random.default_rng(seed)
    for position in range(1, COMMITS + 1):
        machine = math.exp(rng.normal(0, RUN_SIGMA)) * (SLOWER if position >= SLOWER_FROM else 1.0)
        benches = []
        for index in range(SERIES):
            contended = bool(rng.random() < CONTENDED_SHARE)
            load = rng.uniform(1.5, 3.0) if contended else 1.0
            benches.append(_bench(index, machine * load, contended, rng))
        store.record(
            RunRecord(
                uid=f"run-{position}",
                source="run",
                commit=Commit(
                    sha=f"{position:04x}" * 10,
                    branch="main",
                    commit_time=1.7e9 + position,
                    position=position,
                ),
                testbed=TESTBED,
                software=Software({"python": "3.11", "torch": "2.13.0"}),
                benchmarks=tuple(benches),
                recorded_at=1.8e9 + position,
            )
        )


def test_identical_code_in_contended_separate_runs_gives_no_finding(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)  # outside git: the stored first-parent positions
    url = f"sqlite:///{tmp_path / 'h.sqlite'}"
    with open_store(url) as store:
        simulate(store)
        model = dashboard_from_store(store)
    # never exit 1; exit 2 when the newest runs, 1.35x slower with the reference, could not be judged
    assert main(["history", "--store", url, "detect", "--measure", "time_s", "--json"]) in (0, 2)

    records = json.loads(capsys.readouterr().out)
    assert len(records) == SERIES
    assert [f for r in records for f in r["findings"]] == []
    assert not any(r["regression"] for r in records)
    assert len(model.series) == SERIES
    listed = [c for s in model.series for c in s.change_points if c.status != "unconfirmed"]
    assert listed == []
    assert not any(c.open for s in model.series for c in s.change_points)
