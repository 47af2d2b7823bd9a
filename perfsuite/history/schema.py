"""The store's schema: one SQLAlchemy Core definition for SQLite and PostgreSQL, its version and
the forward migrations run on open.

Every table is prefixed ``perfsuite_`` so a PostgreSQL database shared with other tools stays
apart. ``SCHEMA_VERSION`` is the version this code writes; a store records its own in
``perfsuite_meta``. To change the schema: edit the tables, raise ``SCHEMA_VERSION`` and append
one function to ``MIGRATIONS`` that takes a version ``SCHEMA_VERSION - 1`` store there (it runs
inside the opening transaction, on both engines).
"""

from __future__ import annotations

from collections.abc import Callable

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Column,
    Connection,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
    select,
    text,
)

SCHEMA_VERSION = 4
PREFIX = "perfsuite_"

metadata = MetaData()

meta = Table(
    f"{PREFIX}meta",
    metadata,
    Column("key", String(64), primary_key=True),
    Column("value", String(255), nullable=False),
)

# The hardware a series belongs to; ``fingerprint`` hashes ``records.Testbed.identity()``.
testbeds = Table(
    f"{PREFIX}testbeds",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("fingerprint", String(32), nullable=False, unique=True),
    Column("spec", JSON, nullable=False),
)

# The software a run used; a change of ``fingerprint`` inside a series is an epoch boundary.
software = Table(
    f"{PREFIX}software",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("fingerprint", String(32), nullable=False, unique=True),
    Column("spec", JSON, nullable=False),
)

runs = Table(
    f"{PREFIX}runs",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column(
        "uid", String(128), nullable=False, unique=True
    ),  # idempotency: one run is recorded once
    Column("source", String(32), nullable=False),  # plugin, run, ab-base, ab-head, import
    Column("recorded_at", Float, nullable=False),  # unix seconds
    Column("commit_sha", String(64)),
    Column("branch", String(255)),
    Column("commit_time", Float),  # unix seconds (committer date)
    Column("dirty", Boolean, nullable=False, default=False),
    Column("commit_position", Integer),  # commits on the first-parent chain up to this one
    Column("parent_sha", String(64)),  # first parent
    Column("subject", Text),
    Column("repository", Text),
    Column("testbed_id", Integer, ForeignKey(f"{PREFIX}testbeds.id"), nullable=False),
    Column("software_id", Integer, ForeignKey(f"{PREFIX}software.id"), nullable=False),
    Column("run_group", String(128)),  # shards of one logical run share it
    Column("host", String(255)),
    Column("labels", JSON),
    Column("peaks", JSON),  # perfsuite.measure.peaks of the run's device (version 2)
)
Index(f"{PREFIX}runs_commit", runs.c.commit_sha)

results = Table(
    f"{PREFIX}results",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("run_id", Integer, ForeignKey(f"{PREFIX}runs.id", ondelete="CASCADE"), nullable=False),
    Column("benchmark", String(512), nullable=False),  # variant/case/mode
    Column("variant", String(255)),
    Column("case_id", String(255)),
    Column("mode", String(32)),
    Column("device", String(32)),
    Column("timer", String(32)),
    Column("rounds_s", JSON),  # every round's time, seconds, on ``timer``'s clock
    Column("median_s", Float),
    Column("wall_median_s", Float),
    Column("device_median_s", Float),
    Column("tflops", Float),
    Column("gbps", Float),
    Column("flop", BigInteger),
    Column("bytes_moved", BigInteger),
    Column("score_copies", Float),
    Column("structure", JSON),  # trace.structure.fingerprint
    Column("structure_hash", String(32)),
    Column("contended", Boolean),
    Column("contention", JSON),
    Column("speed_reference", JSON),
    Column("extra", JSON),
    # why it is not a clean point (records.ResultState: contended, partial run, failed correctness,
    # single A/B pair, undecided A/B); NULL: clean (version 3)
    Column("state", String(64)),
    UniqueConstraint("run_id", "benchmark", name=f"{PREFIX}results_run_benchmark"),
)
Index(f"{PREFIX}results_benchmark", results.c.benchmark)
Index(f"{PREFIX}results_run", results.c.run_id)
# covers the first pass of ``query.points`` (a series' rows without their JSON): version 2, with
# ``state`` from version 3
SERIES_INDEX = Index(
    f"{PREFIX}results_series_v3",
    results.c.benchmark,
    results.c.run_id,
    results.c.contended,
    results.c.state,
    results.c.median_s,
)

# A finding someone marked accepted (``perfsuite history accept``), with the reason they gave
# (version 4). ``finding``: ``history.findings.Finding.id`` (series, kind and the step's commits).
acceptances = Table(
    f"{PREFIX}acceptances",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("finding", String(32), nullable=False),
    Column("series", String(32), nullable=False),
    Column("benchmark", String(512), nullable=False),
    Column("last_good", String(64)),
    Column("first_bad", String(64)),
    Column("reason", Text, nullable=False),
    Column("accepted_at", Float, nullable=False),  # unix seconds
    Column("accepted_by", String(255)),
)
Index(f"{PREFIX}acceptances_finding", acceptances.c.finding)

TABLES = tuple(t.name for t in metadata.sorted_tables)


def _to_version_2(connection: Connection) -> None:
    """Version 1 -> 2: the runs' measured peaks (the covering index of a series' rows comes with 3)."""
    peaks = runs.c.peaks.type.compile(dialect=connection.dialect)
    connection.execute(text(f"ALTER TABLE {runs.name} ADD COLUMN peaks {peaks}"))


def _to_version_3(connection: Connection) -> None:
    """Version 2 -> 3: each result's ``state``, set from what the older rows kept: their run's
    ``partial`` label, their ``correct`` flag, an A/B side's verdict and kept pairs (an older A/B row
    does not say how many pairs were clean: one with a single block is a single pair); the covering
    index of a series' rows with it."""
    from perfsuite.history.records import ResultState, ab_state

    state = results.c.state.type.compile(dialect=connection.dialect)
    connection.execute(text(f"ALTER TABLE {results.name} ADD COLUMN state {state}"))
    connection.execute(text(f"DROP INDEX IF EXISTS {PREFIX}results_series"))
    found = connection.execute(
        select(
            results.c.id, results.c.extra, results.c.contended, runs.c.labels, runs.c.source
        ).join(runs, runs.c.id == results.c.run_id)
    ).all()
    for row in found:
        extra, labels = row.extra or {}, row.labels or {}
        if extra.get("correct") is False:
            value = ResultState.INCORRECT
        elif labels.get("partial"):
            value = ResultState.PARTIAL
        elif row.contended:
            value = ResultState.CONTENDED
        elif str(row.source).startswith("ab-"):
            value = ab_state(extra.get("ab_verdict"), int(extra.get("ab_blocks") or 0))
        else:
            value = None
        if value:
            connection.execute(
                results.update().where(results.c.id == row.id).values(state=str(value))
            )
    SERIES_INDEX.create(connection, checkfirst=True)


def _to_version_4(connection: Connection) -> None:
    """Version 3 -> 4: the accepted findings (a new table; no stored row changes)."""
    acceptances.create(connection, checkfirst=True)  # with its index


# MIGRATIONS[i] takes a store from version i + 1 to i + 2, inside the opening transaction.
MIGRATIONS: list[Callable[[Connection], None]] = [_to_version_2, _to_version_3, _to_version_4]
