"""Writing one ``RunRecord`` into an open transaction: testbed and software rows found or added,
the run row, then all its benchmark rows in one batch."""

from __future__ import annotations

import math
from typing import Any
from collections.abc import Mapping

from sqlalchemy import Connection, Table, select
from sqlalchemy.exc import IntegrityError

import perfsuite.history.schema as schema
from perfsuite.history.records import BenchmarkRecord, RunRecord


def _finite(value: float | None) -> float | None:
    """JSON and PostgreSQL reject NaN/inf in some places: they are stored as None."""
    return None if value is None or not math.isfinite(value) else float(value)


def _id_of(connection: Connection, table: Table, fingerprint: str, spec: Mapping[str, Any]) -> int:
    """The row id of ``fingerprint`` in ``table``, adding the row when new."""
    found = connection.execute(select(table.c.id).where(table.c.fingerprint == fingerprint)).first()
    if found:
        return found[0]
    nested = connection.begin_nested()
    try:
        new_id = connection.execute(
            table.insert().values(fingerprint=fingerprint, spec=dict(spec))
        ).inserted_primary_key[0]
        nested.commit()
        return new_id
    except (
        IntegrityError
    ):  # another writer added it first (PostgreSQL; SQLite writers are serialized)
        nested.rollback()
        return connection.execute(
            select(table.c.id).where(table.c.fingerprint == fingerprint)
        ).scalar_one()


def _result_row(run_id: int, bench: BenchmarkRecord) -> dict[str, Any]:
    return {
        "run_id": run_id,
        "benchmark": bench.name,
        "variant": bench.variant,
        "case_id": bench.case_id,
        "mode": bench.mode,
        "device": bench.device,
        "timer": bench.timer,
        "rounds_s": [t for t in (_finite(r) for r in bench.rounds_s) if t is not None],
        "median_s": _finite(bench.median_s),
        "wall_median_s": _finite(bench.wall_median_s),
        "device_median_s": _finite(bench.device_median_s),
        "tflops": _finite(bench.tflops),
        "gbps": _finite(bench.gbps),
        "flop": bench.flop,
        "bytes_moved": bench.bytes_moved,
        "score_copies": _finite(bench.score_copies),
        "structure": dict(bench.structure) if bench.structure else None,
        "structure_hash": bench.structure_hash,
        "contended": bench.contended,
        "contention": dict(bench.contention) if bench.contention else None,
        "speed_reference": dict(bench.speed_reference) if bench.speed_reference else None,
        "extra": dict(bench.extra) if bench.extra else None,
        "state": str(bench.state) if bench.state else None,
    }


def insert_run(connection: Connection, run: RunRecord) -> bool:
    """Insert ``run`` and its benchmarks; False when a run with its uid is already stored, also when
    another writer stored it while this transaction ran (its unique uid, read after the conflict)."""
    runs = schema.runs
    if connection.execute(select(runs.c.id).where(runs.c.uid == run.uid)).first():
        return False
    testbed_id = _id_of(connection, schema.testbeds, run.testbed.fingerprint, run.testbed.spec())
    software_id = _id_of(
        connection, schema.software, run.software.fingerprint, dict(run.software.versions)
    )
    nested = connection.begin_nested()  # another writer may add the same uid meanwhile (PostgreSQL)
    try:
        run_id = _insert_run_row(connection, run, testbed_id, software_id)
        nested.commit()
    except IntegrityError:
        nested.rollback()
        if connection.execute(select(runs.c.id).where(runs.c.uid == run.uid)).first():
            return False  # stored by a writer that committed first: an idempotent import
        raise
    unique = {bench.name: bench for bench in run.benchmarks}  # a name twice: the last one counts
    if unique:
        connection.execute(
            schema.results.insert(), [_result_row(run_id, b) for b in unique.values()]
        )
    return True


def _insert_run_row(
    connection: Connection, run: RunRecord, testbed_id: int, software_id: int
) -> int:
    """The run's row (without its benchmarks); its id."""
    commit = run.commit
    return connection.execute(
        schema.runs.insert().values(
            uid=run.uid,
            source=run.source,
            recorded_at=run.recorded_at,
            commit_sha=commit.sha,
            branch=commit.branch,
            commit_time=commit.commit_time,
            dirty=bool(commit.dirty),
            commit_position=commit.position,
            parent_sha=commit.parent_sha,
            subject=commit.subject,
            repository=run.repository,
            testbed_id=testbed_id,
            software_id=software_id,
            run_group=run.run_group,
            host=run.testbed.host,
            labels=dict(run.labels) if run.labels else None,
            peaks=dict(run.peaks) if run.peaks else None,
        )
    ).inserted_primary_key[0]
