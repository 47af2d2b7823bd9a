"""perfsuite's performance history: every timed run remembered, series across commits and testbeds,
change points found.

One store, two engines, chosen by one URL (SQLAlchemy 2 Core, one schema in ``schema.py``):

- default: the SQLite file ``.perfsuite/history.sqlite`` at the repository root (the folder gets a
  ``.gitignore`` of ``*``; ``.benchmarks/`` sits beside it);
- else the URL in ``$PERFSUITE_HISTORY_URL``, else the ini key ``perfsuite_history_url``
  (``sqlite:///path``, a plain path, or ``postgresql+psycopg://user:pw@host/db`` with the
  ``perfsuite[postgresql]`` extra). The URL given to ``open_store(url)`` wins over both.

Opening creates the schema, migrates an older one forward (``schema.MIGRATIONS``) and refuses a
newer one, a non-SQLite file or a foreign database with ``perfsuite.errors.HistoryError`` naming the
file, which is never written. Each run is one transaction, idempotent by ``RunRecord.uid``.

Writing (``records.py``: plain frozen dataclasses)::

    from perfsuite.history import open_store, RunRecord, Commit, Testbed, Software, BenchmarkRecord

    run = RunRecord(
        uid="3f2c...",                  # unique per run: recording it twice adds nothing
        source="plugin",                # plugin | run | ab-base | ab-head | import
        commit=Commit(sha="a1b2...", branch="main", commit_time=1.7e9, dirty=False, position=42),
        testbed=Testbed(device_names={"cpu": "x86_64"}, device_count=0, cpu_model="AMD EPYC", memory_bytes=2**34,
                        num_threads=2, host="ci-1"),
        software=Software({"python": "3.11.7", "torch": "2.13.0", "cuda": None, "perfsuite": "0.1.0"}),
        benchmarks=(BenchmarkRecord(name="naive/b2h4s64d32-fp32-causal-cpu/forward", variant="naive",
                                    case_id="b2h4s64d32-fp32-causal-cpu", mode="forward", device="cpu",
                                    rounds_s=(1.1e-4, 1.0e-4, 1.2e-4), median_s=1.1e-4, score_copies=1.0,
                                    structure={...}, contended=False),),
        recorded_at=time.time(), run_group=None, labels={"shard": "0/2"})
    with open_store() as store:             # or open_store("postgresql+psycopg://...")
        added = store.record(run)           # False when run.uid is already stored

Reading (``query.py``)::

    with open_store(create=False) as store:
        for series in store.list_series(variant="naive", mode="forward", measure="time_s"):
            key = series.key                # SeriesKey(benchmark, measure, testbed fingerprint); key.id: short name
            points = store.points(key)      # list[Point], first-parent commit order, runs of a commit pooled
            for p in points:
                p.sha, p.median, p.values, p.contended, p.structure, p.software_fingerprint
            for e in store.epochs(key):     # Epoch(software_fingerprint, software, start, end, changed)
                ...
        store.runs(commit="a1b2", limit=10)  # dicts of run columns, newest first

A series is (benchmark, measure, testbed fingerprint); ``query.MEASURES`` lists the measures
(``time_s`` every round; ``wall_s``, ``device_s``, ``tflops``, ``gbps``, ``score_copies`` one value
per run). ``Point.values`` leaves out contended runs (``Point.all_values`` keeps them). A change of
``records.EPOCH_FIELDS`` software inside a series starts an epoch. Building records from what the
suite saves: ``capture.py`` (this process's commit, testbed, software) and ``importing.py``
(pytest-benchmark JSON and ``perfsuite ab --json`` files: ``run_from_benchmark_json(data, source=...,
run_group=..., labels=...)``, ``runs_from_file(path)``); a front end records with
``recording.record_runs(runs, url)``, which never raises (``Recorded.error``, ``Recorded.line()``).
Change points: ``changepoints.detect(points, pairs=store.pairs(series))`` -> ``ChangePoint`` (last good /
first bad point, ratio, interval, structural diff, evidence: separate runs or an interleaved gate) and
``changepoints.check_newest(points, window=20, confirm=2, pairs=...)`` -> ``OnlineVerdict``;
text: ``render.py``. Command line: ``perfsuite history`` (``perfsuite/cli/history.py``).
"""

from __future__ import annotations

import importlib
from typing import Any

# Resolved on first use (PEP 562): the pytest plugin loads in every pytest run of the environment and
# imports history's records and capture; SQLAlchemy (the store) is imported only when a store is opened.
_EXPORTS = {
    "BenchmarkRecord": "perfsuite.history.records",
    "Commit": "perfsuite.history.records",
    "RunRecord": "perfsuite.history.records",
    "Software": "perfsuite.history.records",
    "Testbed": "perfsuite.history.records",
    "Store": "perfsuite.history.store",
    "open_store": "perfsuite.history.store",
    "resolve_url": "perfsuite.history.store",
    "MEASURES": "perfsuite.history.query",
    "Epoch": "perfsuite.history.query",
    "Point": "perfsuite.history.query",
    "Series": "perfsuite.history.query",
    "SeriesKey": "perfsuite.history.query",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'perfsuite.history' has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)


def __dir__() -> list[str]:
    return __all__
