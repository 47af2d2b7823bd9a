"""The store on both engines: record, idempotency, series, commit order, pooling, epochs, contention,
schema version refusal and forward migration, and refusal of files that are not a store."""

from __future__ import annotations

import dataclasses
import sqlite3

import pytest
from sqlalchemy import select, text

from history_records import make_run
from perfsuite.errors import HistoryError, NoHistoryStoreYet
from perfsuite.history import open_store, resolve_url, schema
from perfsuite.history.store import prepare_schema

BENCH = "naive/b2h4s64d32-fp32-causal-cpu/forward"


def test_record_is_idempotent_and_points_follow_commit_order(store_url):
    with open_store(store_url) as store:
        assert store.record(make_run("r3", "c" * 40, 3, (3e-3, 3e-3)))
        assert store.record(make_run("r1", "a" * 40, 1, (1e-3, 1e-3)))
        assert store.record(make_run("r2", "b" * 40, 2, (2e-3, 2e-3)))
        assert not store.record(
            make_run("r2", "b" * 40, 2, (2e-3, 2e-3))
        )  # the same uid: nothing added
        assert len(store.runs()) == 3
        series = store.list_series(benchmark=BENCH, measure="time_s")
        assert len(series) == 1 and series[0].runs == 3 and series[0].commits == 3
        points = store.points(series[0].key)
        assert [p.sha[0] for p in points] == [
            "a",
            "b",
            "c",
        ]  # commit order, though recorded in reverse
        assert [p.values for p in points] == [(1e-3, 1e-3), (2e-3, 2e-3), (3e-3, 3e-3)]


def test_runs_of_one_commit_are_pooled_and_contended_runs_kept_apart(store_url):
    with open_store(store_url) as store:
        store.record(make_run("x1", "a" * 40, 1, (1.0, 2.0)))
        store.record(make_run("x2", "a" * 40, 1, (3.0,)))
        store.record(make_run("x3", "a" * 40, 1, (9.0,), contended=True))
        store.record(make_run("y1", "b" * 40, 2, (5.0,), contended=True))
        key = store.list_series(measure="time_s")[0].key
        first, second = store.points(key)
        assert sorted(first.values) == [1.0, 2.0, 3.0] and sorted(first.all_values) == [
            1.0,
            2.0,
            3.0,
            9.0,
        ]
        assert not first.contended and first.median == 2.0 and len(first.run_uids) == 3
        assert second.contended and second.values == () and second.median == 5.0


def test_series_are_split_by_testbed_and_filtered(store_url):
    other = "rt/b1h2s16d8-fp32-causal-cpu/backward"
    with open_store(store_url) as store:
        store.record(make_run("a", "a" * 40, 1, benchmarks=(BENCH, other)))
        store.record(make_run("b", "a" * 40, 1, cpu="another cpu"))
        everything = store.list_series(measure="time_s")
        assert len(everything) == 3 and len({s.key.testbed for s in everything}) == 2
        assert [s.key.benchmark for s in store.list_series(mode="backward", measure="time_s")] == [
            other
        ]
        assert len(store.list_series(variant="naive", measure="time_s")) == 2
        testbed = everything[0].key.testbed
        assert all(s.key.testbed == testbed for s in store.list_series(testbed=testbed[:6]))
        assert {s.key.measure for s in store.list_series(benchmark=BENCH)} == {
            "time_s",
            "score_copies",
        }


def test_a_software_change_is_an_epoch(store_url):
    with open_store(store_url) as store:
        for position in range(1, 5):
            store.record(
                make_run(
                    f"r{position}",
                    f"{position}" * 40,
                    position,
                    torch="2.13.0" if position < 3 else "2.14.0",
                )
            )
        key = store.list_series(measure="time_s")[0].key
        epochs = store.epochs(key)
        assert [(e.start, e.end) for e in epochs] == [(0, 1), (2, 3)]
        assert epochs[1].changed == {"torch": ("2.13.0", "2.14.0")}


def test_a_newer_store_is_refused_and_left_as_it_is(store_url):
    with open_store(store_url) as store:
        store.record(make_run("r1", "a" * 40, 1))
        with store.engine.begin() as connection:
            connection.execute(schema.meta.update().values(value=str(schema.SCHEMA_VERSION + 1)))
    with pytest.raises(HistoryError, match=f"schema version {schema.SCHEMA_VERSION + 1}, newer"):
        open_store(store_url)
    with open_store.__globals__["create_engine"](store_url).connect() as connection:  # untouched
        assert connection.execute(text("SELECT count(*) FROM perfsuite_runs")).scalar() == 1


def test_an_older_store_is_migrated_forward_on_open(store_url):
    """A store one version behind runs the next migration once, in the opening transaction."""
    from sqlalchemy import create_engine

    open_store(store_url).close()
    ran = []

    def add_column(connection):
        connection.execute(text("ALTER TABLE perfsuite_runs ADD COLUMN note VARCHAR(20)"))
        ran.append(1)

    current, migrations = schema.SCHEMA_VERSION, [*schema.MIGRATIONS, add_column]
    engine = create_engine(store_url)
    with engine.begin() as connection:
        assert prepare_schema(connection, "test", current + 1, migrations) == current
    with engine.begin() as connection:
        assert prepare_schema(connection, "test", current + 1, migrations) == current + 1
        assert connection.execute(text("SELECT value FROM perfsuite_meta")).scalar() == str(
            current + 1
        )
        connection.execute(text("SELECT note FROM perfsuite_runs"))
    engine.dispose()
    assert ran == [1]


def test_a_version_1_store_gains_the_series_index_and_states_and_keeps_its_runs(store_url):
    """The real migrations 1 -> 3: a store written before the covering index of a series' rows and the
    results' states; a partial run's and a failed check's rows get their state, and are set aside."""
    from sqlalchemy import create_engine, inspect

    clean = make_run("r1", "a" * 40, 1, (1e-3, 2e-3))
    partial = dataclasses.replace(
        make_run("r3", "c" * 40, 3), labels={"partial": {"interrupted": "KeyboardInterrupt"}}
    )
    wrong = make_run("r4", "d" * 40, 4)
    wrong = dataclasses.replace(
        wrong,
        benchmarks=tuple(
            dataclasses.replace(b, extra={"correct": False}) for b in wrong.benchmarks
        ),
    )
    with open_store(store_url) as store:
        for run in (clean, partial, wrong):
            store.record(run)
    engine = create_engine(store_url)
    with engine.begin() as connection:  # what version 1 wrote: no peaks, no states, no such index
        schema.SERIES_INDEX.drop(connection)
        connection.execute(text("ALTER TABLE perfsuite_runs DROP COLUMN peaks"))
        connection.execute(text("ALTER TABLE perfsuite_results DROP COLUMN state"))
        connection.execute(schema.meta.update().values(value="1"))
    engine.dispose()
    with open_store(store_url) as store:
        found = store.points(store.list_series(measure="time_s")[0].key)
        indexes = {i["name"] for i in inspect(store.engine).get_indexes("perfsuite_results")}
        store.record(dataclasses.replace(make_run("r2", "b" * 40, 2), peaks={"memory_gbps": 9.0}))
        peaks = store.transaction(
            lambda c: (
                c.execute(select(schema.runs.c.peaks).order_by(schema.runs.c.id)).scalars().all()
            )
        )
    assert found[0].values == (1e-3, 2e-3) and found[0].state is None
    assert [(p.contended, p.state) for p in found[1:]] == [
        (True, "partial run"),
        (True, "failed correctness"),
    ]
    assert schema.SERIES_INDEX.name in indexes
    assert peaks == [
        None,
        None,
        None,
        {"memory_gbps": 9.0},
    ]  # the new column, written and read back
    with create_engine(store_url).connect() as connection:
        assert connection.execute(text("SELECT value FROM perfsuite_meta")).scalar() == str(
            schema.SCHEMA_VERSION
        )


def test_a_file_that_is_not_sqlite_is_refused_and_kept(tmp_path):
    target = tmp_path / "notes.txt"
    target.write_text("my notes\n" * 100)
    with pytest.raises(HistoryError, match=f"{target}: not a perfsuite history store"):
        open_store(str(target))
    assert target.read_text() == "my notes\n" * 100


def test_a_corrupt_store_is_refused_naming_it(tmp_path):
    target = tmp_path / "history.sqlite"
    open_store(str(target)).close()
    data = bytearray(target.read_bytes())
    data[100:4096] = b"\xff" * (4096 - 100)  # header intact, the schema page destroyed
    target.write_bytes(bytes(data))
    before = target.read_bytes()
    with pytest.raises(HistoryError, match=str(target)):
        open_store(str(target))
    assert target.read_bytes() == before


def test_a_foreign_sqlite_database_is_refused(tmp_path):
    target = tmp_path / "app.db"
    with sqlite3.connect(target) as connection:
        connection.execute("CREATE TABLE users (name TEXT)")
    with pytest.raises(HistoryError, match="app.db: not a perfsuite history store .*users"):
        open_store(str(target))


def test_url_resolution(tmp_path, monkeypatch):
    (tmp_path / ".git").mkdir()
    (tmp_path / "sub").mkdir()
    monkeypatch.delenv("PERFSUITE_HISTORY_URL", raising=False)
    assert (
        resolve_url(root=tmp_path / "sub")
        == f"sqlite:///{tmp_path / '.perfsuite' / 'history.sqlite'}"
    )
    assert (
        resolve_url(ini_value="postgresql+psycopg://u@h/db", root=tmp_path)
        == "postgresql+psycopg://u@h/db"
    )
    monkeypatch.setenv("PERFSUITE_HISTORY_URL", "sqlite:////x/env.sqlite")
    assert resolve_url(ini_value="postgresql+psycopg://u@h/db") == "sqlite:////x/env.sqlite"
    assert resolve_url("sqlite:////x/given.sqlite") == "sqlite:////x/given.sqlite"


def test_a_missing_store_is_refused_when_not_creating(tmp_path):
    with pytest.raises(NoHistoryStoreYet, match="none.sqlite: no history store yet"):
        open_store(str(tmp_path / "none.sqlite"), create=False)
    assert not (tmp_path / "none.sqlite").exists()


def test_score_copies_are_counted_so_a_contended_run_still_gives_a_usable_point(store_url):
    with open_store(store_url) as store:
        store.record(make_run("r1", "a" * 40, 1, contended=True))
        store.record(make_run("r2", "b" * 40, 2, contended=True, copies=1))
        by_measure = {s.key.measure: s.key for s in store.list_series()}
        copies = store.points(by_measure["score_copies"])
        timed = store.points(by_measure["time_s"])
    assert [(p.contended, p.median) for p in copies] == [(False, 0.0), (False, 1.0)]
    assert [p.contended for p in timed] == [True, True]  # its timings stay set aside


def test_a_version_3_store_gains_the_acceptances_and_keeps_its_runs(store_url):
    """Migration 3 -> 4: the accepted findings' table is created; every stored run stays, and an
    acceptance is written and read back with its reason."""
    from sqlalchemy import create_engine

    with open_store(store_url) as store:
        for p in (1, 2):
            store.record(make_run(f"r{p}", f"{p}" * 40, p))
    engine = create_engine(store_url)
    with engine.begin() as connection:  # what version 3 wrote: no acceptances table
        connection.execute(text(f"DROP TABLE {schema.acceptances.name}"))
        connection.execute(schema.meta.update().values(value="3"))
    engine.dispose()
    with open_store(store_url) as store:
        assert [r["uid"] for r in store.runs()] == ["r1", "r2"]
        assert store.acceptances() == {}
        row = {
            "finding": "f" * 10,
            "series": "s" * 10,
            "benchmark": "naive/b2h4s64d32-fp32-causal-cpu/forward",
            "last_good": "1" * 40,
            "first_bad": "2" * 40,
            "reason": "worth it",
            "accepted_at": 1.9e9,
            "accepted_by": "u",
        }
        assert store.accept([row]) == 1
    with open_store(store_url) as store:
        assert store.acceptances()["f" * 10].reason == "worth it"
    with create_engine(store_url).connect() as connection:
        assert connection.execute(text("SELECT value FROM perfsuite_meta")).scalar() == "4"
