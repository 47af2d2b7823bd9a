"""``points(newest=N)``, what ``history detect`` reads, is exactly the tail of the whole series that
``check_newest`` uses: the newest epoch's points back to the N-th usable one, on both engines, with
several runs per commit, contended and dirty runs, software changes and commits without a position."""

from __future__ import annotations

import dataclasses
import random

import pytest

from history_records import make_run
from perfsuite.history import open_store
from perfsuite.history.changepoints import usable


def expected_tail(every, newest):
    """The reference: walk the whole series back from its newest point."""
    if not every:
        return []
    start, found = len(every), 0
    while start > 0 and found < newest:
        if every[start - 1].software_fingerprint != every[-1].software_fingerprint:
            break
        start -= 1
        found += usable(every[start])
    return every[start:]


def random_history(rng: random.Random, commits: int):
    torch, runs = "2.13.0", []
    for position in range(commits):
        if rng.random() < 0.1:
            torch = rng.choice(["2.13.0", "2.14.0", "2.15.0"])
        for again in range(rng.choice([1, 1, 1, 2, 3])):
            run = make_run(
                f"c{position}-{again}",
                f"{position:040x}",
                position,
                tuple(rng.uniform(1e-3, 2e-3) for _ in range(3)),
                torch=torch if rng.random() < 0.9 else "2.16.0",
                contended=rng.random() < 0.2,
                dirty=rng.random() < 0.1,
            )
            commit = run.commit
            if position >= commits - 2 and rng.random() < 0.5:  # imported without git positions
                commit = dataclasses.replace(commit, position=None)
            runs.append(
                dataclasses.replace(run, commit=commit, recorded_at=1.8e9 + rng.random() * 1e6)
            )
    rng.shuffle(runs)
    return runs


@pytest.mark.parametrize("seed", range(6))
def test_the_newest_points_are_the_tail_of_the_whole_series(store_url, seed):
    rng = random.Random(seed)
    with open_store(store_url) as store:
        for run in random_history(rng, rng.randint(1, 40)):
            store.record(run)
        key = store.list_series(measure="time_s")[0].key
        every = store.points(key)
        for newest in (1, 2, 3, 5, 8, 22, 100):
            assert store.points(key, newest=newest) == expected_tail(every, newest), newest
        assert store.points(key, newest=5, include_dirty=False) == expected_tail(
            store.points(key, include_dirty=False), 5
        )
