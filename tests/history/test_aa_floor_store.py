"""A/A gates recorded in the history set later gates' noise floor (``perfsuite ab`` with the history
on): only gates of one clean commit against itself count, on this testbed, the newest first; both engines."""

from __future__ import annotations

import math

import numpy as np
import pytest

from history_records import make_run
from perfsuite.gate.noise_floor import between_pairs_sd, floors_from_history, pooled_sd
from perfsuite.history import open_store
from perfsuite.history.importing import runs_from_ab_json
from perfsuite.history.recording import aa_spreads_here

KEY = "naive/b2h4s64d32-fp32-causal-cpu"  # the gate's name of the forward
STORED = f"{KEY}/forward"  # the store's
# four worker pairs whose log ratios sit at -1.5, -0.5, 0.5 and 1.5 times a spread: their sd
SD_PER_SPREAD = float(np.std([-1.5, -0.5, 0.5, 1.5], ddof=1))


def sha(n: int) -> str:
    return f"{n:02d}" + "cd" * 19


def gate(uid: str, base: int, head: int, spread: float, at: float, dirty: bool = False) -> dict:
    """A ``perfsuite ab --json`` document of one benchmark: 4 worker pairs of 3 block pairs, with the
    spread between them as ``ab_payload`` writes it."""
    clusters = [c for c in range(4) for _ in range(3)]
    commit = lambda n: {"sha": sha(n), "branch": "main", "position": n, "dirty": dirty}
    document = {
        "machine": {"base_machine": {"torch": "2.13.0"}, "torch": "2.13.0"},
        "benchmarks": [
            {
                "key": KEY,
                "base_blocks_s": [[1.0e-3] for _ in clusters],
                "head_blocks_s": [[1.0e-3 * math.exp(spread * (c - 1.5))] for c in clusters],
                "contended_pairs": [False] * len(clusters),
                "clusters": clusters,
                "verdict": "no change",
                "structure": [],
            }
        ],
        "commits": {"base": commit(base), "head": commit(head)},
        "perfsuite_run_uid": uid,
        "recorded_at": at,
    }
    (benchmark,) = document["benchmarks"]
    benchmark["between_pairs_sd"] = between_pairs_sd(benchmark)
    return document


def record(store, testbed, *documents: dict) -> None:
    for document in documents:
        for run in runs_from_ab_json(document, testbed=testbed):
            store.record(run)


def test_only_a_a_gates_of_this_testbed_count_newest_first(store_url):
    here = make_run("x", sha(1), 1).testbed
    other = make_run("y", sha(1), 1, cpu="another cpu").testbed
    with open_store(store_url) as store:
        record(
            store,
            here,
            gate("aa1", 1, 1, 0.01, at=10.0),
            gate("aa2", 2, 2, 0.02, at=20.0),
            gate("aa3", 3, 3, 0.03, at=30.0),
            gate("ab", 3, 4, 0.5, at=40.0),  # a change between two commits: not a noise floor
            gate("dirty", 4, 4, 0.5, at=50.0, dirty=True),  # uncommitted trees
        )
        record(store, other, gate("elsewhere", 1, 1, 0.5, at=60.0))
        spreads = store.aa_spreads(here.fingerprint, 7)
        assert list(spreads) == [STORED]
        assert spreads[STORED] == pytest.approx([s * SD_PER_SPREAD for s in (0.03, 0.02, 0.01)])
        assert store.aa_spreads(here.fingerprint, 2)[STORED] == pytest.approx(
            [s * SD_PER_SPREAD for s in (0.03, 0.02)]
        )
        assert store.aa_spreads(other.fingerprint, 7)[STORED] == pytest.approx(
            [0.5 * SD_PER_SPREAD]
        )
    assert floors_from_history(spreads) == {KEY: pooled_sd(spreads[STORED])}
    assert floors_from_history({"v/c/backward": [0.1]}) == {"v/c/backward": 0.1}


def test_the_gate_reads_this_machines_floor_and_a_missing_store_gives_none(tmp_path, monkeypatch):
    monkeypatch.delenv("PERFSUITE_HISTORY_URL", raising=False)
    url = f"sqlite:///{tmp_path / 'history.sqlite'}"
    info = {"device_names": {"cpu": "test cpu"}, "num_threads": 2}
    assert aa_spreads_here(info, 7, url) == ({}, "")  # no store yet: nothing, and nothing to say
    assert not (tmp_path / "history.sqlite").exists()  # reading created none
    from perfsuite.history import capture

    with open_store(url) as store:
        record(store, capture.testbed_now(info), gate("aa", 1, 1, 0.02, at=1.0))
    spreads, line = aa_spreads_here(info, 7, url)
    assert spreads == {STORED: [pytest.approx(0.02 * SD_PER_SPREAD)]}
    assert "noise floor: the A/A gates recorded in" in line and "set it for 1 benchmark(s)" in line
    elsewhere = dict(info, num_threads=64)  # another machine: not its floor
    assert aa_spreads_here(elsewhere, 7, url) == ({}, "")
    broken = tmp_path / "notes.txt"
    broken.write_text("not a store\n")
    spreads, line = aa_spreads_here(info, 7, f"sqlite:///{broken}")
    assert spreads == {} and line.startswith("perfsuite: warning: no A/A noise floor read")
