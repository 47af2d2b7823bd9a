"""Shards: the timed suite split into COUNT disjoint parts whose union is the whole suite.

``--perfsuite-shard INDEX/COUNT`` (ini key ``perfsuite_shard``) keeps shard INDEX, counted from 1
(``1/4`` .. ``4/4``, as a CI matrix counts), and deselects the rest. The unit of assignment is a
*group*: the tests of one (variant, case) pair, which share cached inputs and evidence (their
``xdist_group`` marker, set by ``SuiteSession.parametrize``); any other test is a group of its own
(its node id). Groups are weighed by their known durations (seconds, from the history store) and
placed largest first on the least loaded shard (greedy LPT, Graham 1969: within 4/3 of the best
makespan); a group without a known duration weighs its test count times the median known
seconds per test, and with no duration known at all every test weighs 1. Ties break on the group's
name, so every process that collects the same tests with the same durations computes the same split.
``keep`` applies the split to pytest's collected items, with ``known_durations``: the file named by
``PERFSUITE_SHARD_WEIGHTS``, else the history store.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import statistics
from collections.abc import Iterable, Mapping

import pytest

from perfsuite.errors import ConfigError

_SHARD = re.compile(r"^\s*(-?\d+)\s*/\s*(-?\d+)\s*$")


@dataclasses.dataclass(frozen=True)
class Shard:
    """Shard ``index`` of ``count`` (1 <= index <= count)."""

    index: int
    count: int

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


def parse_shard(text: str, source: str = "--perfsuite-shard") -> Shard | None:
    """``"2/4"`` -> ``Shard(2, 4)``; ``""`` -> None (no sharding).

    Raises:
        ConfigError: not ``INDEX/COUNT``, COUNT below 1, or INDEX outside ``1..COUNT``; the message
            names ``source`` and the value.
    """
    if not text.strip():
        return None
    match = _SHARD.match(text)
    if not match:
        raise ConfigError(
            f"{source}: shard {text!r} is not INDEX/COUNT (for example 1/4; INDEX counts from 1)"
        )
    index, count = int(match.group(1)), int(match.group(2))
    if count < 1:
        raise ConfigError(f"{source}: shard {text!r}: COUNT must be at least 1")
    if not 1 <= index <= count:
        raise ConfigError(
            f"{source}: shard {text!r}: INDEX must be in 1..{count} (shards count from 1)"
        )
    return Shard(index, count)


def group_weights(
    group_sizes: Mapping[str, int], durations_s: Mapping[str, float]
) -> dict[str, float]:
    """Each group's weight: its known duration (seconds), else its test count times the median known
    seconds per test; every test weighs 1 when no duration is known. ``group_sizes``: tests per group."""
    known = {g: float(durations_s[g]) for g in group_sizes if durations_s.get(g, 0) > 0}
    if not known:
        return {g: float(n) for g, n in group_sizes.items()}
    per_test = statistics.median(known[g] / group_sizes[g] for g in known)
    return {g: known.get(g, group_sizes[g] * per_test) for g in group_sizes}


def assign(weights: Mapping[str, float], count: int) -> dict[str, int]:
    """Group name -> shard index (1..count): largest weight first onto the least loaded shard
    (ties: lower load, then lower index; groups of equal weight in name order)."""
    loads = [0.0] * count
    placed: dict[str, int] = {}
    for group in sorted(weights, key=lambda g: (-weights[g], g)):
        target = min(range(count), key=lambda i: (loads[i], i))
        loads[target] += weights[group]
        placed[group] = target + 1
    return placed


def split(
    groups: Iterable[str], shard: Shard, durations_s: Mapping[str, float] | None = None
) -> list[bool]:
    """For each item's group name (in collection order), whether it belongs to ``shard``."""
    groups = list(groups)
    sizes: dict[str, int] = {}
    for group in groups:
        sizes[group] = sizes.get(group, 0) + 1
    placed = assign(group_weights(sizes, durations_s or {}), shard.count)
    return [placed[group] == shard.index for group in groups]


def item_group(item) -> str:
    """The group a test item is kept with: its ``xdist_group`` marker's name, else its node id."""
    marker = item.get_closest_marker("xdist_group")
    if marker is not None:
        name = marker.args[0] if marker.args else marker.kwargs.get("name")
        if name:
            return str(name)
    return item.nodeid


WEIGHTS_VARIABLE = (
    "PERFSUITE_SHARD_WEIGHTS"  # a JSON file {group: seconds} a launcher hands every shard
)


def timed_phase_s(median_s: float, min_rounds: int, max_time_s: float) -> float:
    """Seconds pytest-benchmark spends timing a benchmark whose round takes ``median_s``: rounds run
    until ``max_time_s`` has passed and at least ``min_rounds`` ran (pytest-benchmark's rule)."""
    return max(max_time_s, min_rounds * median_s)


def group_of_benchmark(benchmark: str) -> str:
    """``variant/case_id/mode`` (the store's benchmark name) -> the ``variant-case_id`` group."""
    variant, case_id, *_ = benchmark.split("/") + ["", ""]
    return f"{variant}-{case_id}"


def stored_durations(
    store, head_sha: str | None, min_rounds: int, max_time_s: float
) -> dict[str, float]:
    """Seconds per group from an open history store: each benchmark's newest round median of a commit
    other than ``head_sha`` (so shards of one commit, recording as they finish, all see the same
    durations), as its timed phase, summed over the group's benchmarks."""
    newest: dict[str, float] = {}
    for series in store.list_series(measure="time_s"):
        if series.key.benchmark in newest:
            continue
        points = [p for p in store.points(series.key) if p.sha != head_sha and p.median]
        if points:
            newest[series.key.benchmark] = points[-1].median
    durations: dict[str, float] = {}
    for benchmark, median_s in newest.items():
        group = group_of_benchmark(benchmark)
        durations[group] = durations.get(group, 0.0) + timed_phase_s(
            median_s, min_rounds, max_time_s
        )
    return durations


def known_durations(config: pytest.Config) -> tuple[dict[str, float], str]:
    """Known seconds per group (``item_group``), and where they came from: the file a launcher names
    in ``PERFSUITE_SHARD_WEIGHTS``, else the history store (read only, never created), else none
    (every test weighs 1).

    Raises:
        ConfigError: the weights file is unreadable or not a JSON object of seconds per group.
    """
    from perfsuite.history import open_store
    from perfsuite.history.capture import commit_of

    none = {}, "test count (no durations known)"
    if path := os.environ.get(WEIGHTS_VARIABLE):
        try:
            with open(path, encoding="utf-8") as file:
                given = {str(k): float(v) for k, v in json.loads(file.read()).items()}
        except (OSError, ValueError, AttributeError) as exc:
            raise ConfigError(
                f"{WEIGHTS_VARIABLE}={path}: not a JSON object of seconds per group ({exc})",
                WEIGHTS_VARIABLE,
            ) from None
        return (given, f"durations in {path}") if given else none
    try:
        with open_store(
            config.getoption("perfsuite_history_url"),
            config.getini("perfsuite_history_url") or None,
            config.rootpath,
            create=False,
        ) as store:
            durations = stored_durations(
                store,
                commit_of(config.rootpath).sha,
                int(config.getoption("benchmark_min_rounds", 5) or 5),
                float(config.getoption("benchmark_max_time", 1.0) or 1.0),
            )
    except Exception:  # no store yet, or one that cannot be read: shards still split, by test count
        return none
    return (durations, "durations from the history store") if durations else none


def keep(config: pytest.Config, items: list[pytest.Item], shard: Shard) -> str:
    """Keep ``shard``'s tests of ``items`` (in place, split by ``known_durations``), report the rest
    to pytest as deselected, and return the collection's note (kept of collected, balanced by what).

    Raises:
        ConfigError: from ``known_durations``.
    """
    durations, origin = known_durations(config)
    kept = split([item_group(item) for item in items], shard, durations)
    dropped = [item for item, keep_it in zip(items, kept) if not keep_it]
    items[:] = [item for item, keep_it in zip(items, kept) if keep_it]
    config.hook.pytest_deselected(items=dropped)
    return (
        f"perfsuite: shard {shard}: {len(items)} of {len(items) + len(dropped)} tests, "
        f"balanced by {origin}"
    )
