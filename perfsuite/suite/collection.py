"""The collected suite: this run's shard kept, each (variant, case) pair's tests run together (so
the pair's cached inputs and memory can be released after its last test), and the checks made once
before the first test. The plugin's collection hooks hand over to ``collected`` and ``ends_pair``.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from pytest_benchmark.session import BenchmarkSession

from perfsuite.attention.cases import AttentionCase
from perfsuite.suite import shards
from perfsuite.suite.session import SuiteSession


def pair_of(item: pytest.Item) -> tuple[str, AttentionCase] | None:
    """(variant name, case) of a suite test item, None for other tests."""
    params = getattr(getattr(item, "callspec", None), "params", {})
    variant, case = params.get("variant"), params.get("case")
    return (variant.name, case) if variant is not None and case is not None else None


def _pair_key(item: pytest.Item | None) -> tuple[str, str] | None:
    """(variant name, case id) of a suite test item, None for other tests (and for no item)."""
    pair = pair_of(item) if item is not None else None
    return (pair[0], pair[1].id) if pair is not None else None


def order_by_pair(items: list[pytest.Item]) -> None:
    """Sort ``items`` in place: other tests first, then each pair's tests together, pairs in order of
    first collection (a stable sort: within a pair, collection order)."""
    first_seen: dict[tuple[str, str], int] = {}
    for item in items:
        if (key := _pair_key(item)) is not None:
            first_seen.setdefault(key, len(first_seen))
    items.sort(key=lambda item: -1 if (key := _pair_key(item)) is None else first_seen[key])


def ends_pair(item: pytest.Item, nextitem: pytest.Item | None) -> bool:
    """True after a pair's last test: ``item`` is a suite test and ``nextitem`` is not of its pair."""
    key = _pair_key(item)
    return key is not None and _pair_key(nextitem) != key


def saving_storage(benchmarks: BenchmarkSession | None) -> Path | None:
    """pytest-benchmark's storage folder when this run saves into it (``--benchmark-autosave``/``-save``);
    ``benchmarks``: pytest-benchmark's session, or None."""
    if benchmarks is None or benchmarks.disabled or not (benchmarks.save or benchmarks.autosave):
        return None
    path = getattr(benchmarks.storage, "path", None)
    return Path(path) if path is not None else None


def collected(config: pytest.Config, items: list[pytest.Item], suite: SuiteSession) -> None:
    """After -k/-m deselection: keep this run's shard (``shards.keep``; its note on ``suite``), order
    each pair's tests together, count the benchmarks; in a run of the attention suite (not ``--co``),
    check the output folders and mark an earlier run.json superseded.

    Raises:
        ConfigError: an unreadable ``PERFSUITE_SHARD_WEIGHTS`` file.
        UsageError: an output folder that cannot be written (each named with its option).
    """
    if suite.shard is not None:
        suite.shard_note = shards.keep(config, items, suite.shard)
    order_by_pair(items)
    suite.expect(sum(1 for item in items if "benchmark" in getattr(item, "fixturenames", ())))
    if config.option.collectonly or not any(pair_of(item) is not None for item in items):
        return  # another suite's tests: perfsuite writes nothing, so checks nothing
    suite.runs_suite = True
    # before the first test: one usage error, not a failure found after the timed run
    suite.check_outputs(saving_storage(getattr(config, "_benchmarksession", None)))
    suite.mark_previous_run_superseded()
