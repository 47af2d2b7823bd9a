"""Concurrency and faults on both engines: two writer processes at once both land, and a writer killed
(SIGKILL) inside its transaction leaves the store consistent, with no half-written run."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from sqlalchemy import create_engine, text

from perfsuite.history import open_store

HERE = Path(__file__).parent
WRITER = """
import sys, time
sys.path.insert(0, {here!r})
from history_records import make_run
from perfsuite.history import open_store
url, name, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
with open_store(url) as store:
    for i in range(count):
        benches = tuple(f"v{{j}}/c/forward" for j in range(20))
        assert store.record(make_run(f"{{name}}-{{i}}", f"{{i:040d}}", i, benchmarks=benches))
"""
KILLED = """
import sys, time
from pathlib import Path
sys.path.insert(0, {here!r})
from history_records import make_run
from perfsuite.history import open_store
from perfsuite.history.writing import insert_run
url, flag = sys.argv[1], Path(sys.argv[2])
store = open_store(url)
run = make_run("killed", "f" * 40, 9, benchmarks=tuple(f"v{{j}}/c/forward" for j in range(500)))

def work(connection):
    insert_run(connection, run)
    flag.write_text("inside the transaction")
    time.sleep(120)

store.transaction(work)
"""


def _python(script: str, *args: str) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    return subprocess.Popen(
        [sys.executable, "-c", script.format(here=str(HERE)), *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_two_concurrent_writers_both_land(store_url):
    open_store(
        store_url
    ).close()  # both writers find the schema; creation races are the next test's
    writers = [_python(WRITER, store_url, name, "15") for name in ("a", "b")]
    for writer in writers:
        out, err = writer.communicate(timeout=300)
        assert writer.returncode == 0, err
    with open_store(store_url) as store:
        runs = store.runs()
        assert len(runs) == 30 and {r["benchmarks"] for r in runs} == {20}


def test_two_writers_creating_a_new_store_at_once(store_url):
    writers = [_python(WRITER, store_url, name, "3") for name in ("a", "b")]
    for writer in writers:
        out, err = writer.communicate(timeout=300)
        assert writer.returncode == 0, err
    with open_store(store_url) as store:
        assert len(store.runs()) == 6


def test_a_writer_killed_inside_its_transaction_leaves_the_store_consistent(store_url, tmp_path):
    from history_records import make_run

    with open_store(store_url) as store:
        store.record(make_run("kept", "a" * 40, 1))
    flag = tmp_path / "inside"
    writer = _python(KILLED, store_url, str(flag))
    deadline = time.monotonic() + 120
    while not flag.exists():
        assert writer.poll() is None, writer.communicate()[1]
        assert time.monotonic() < deadline, "the writer never reached its transaction"
        time.sleep(0.05)
    os.kill(writer.pid, signal.SIGKILL)
    writer.wait(timeout=60)
    time.sleep(0.5)  # PostgreSQL notices the dropped connection and rolls back
    with open_store(store_url) as store:
        assert [r["uid"] for r in store.runs()] == ["kept"]
        assert store.record(make_run("after", "b" * 40, 2))  # writable again: no lock left behind
        assert len(store.list_series(measure="time_s")[0].key.benchmark) > 0
    if store_url.startswith("sqlite"):
        engine = create_engine(store_url)
        with engine.connect() as connection:
            assert connection.execute(text("PRAGMA integrity_check")).scalar() == "ok"
            assert (
                connection.execute(
                    text(
                        "SELECT count(*) FROM perfsuite_results WHERE run_id NOT IN "
                        "(SELECT id FROM perfsuite_runs)"
                    )
                ).scalar()
                == 0
            )
        engine.dispose()


def test_an_install_without_sqlalchemy_records_nothing_and_says_why(tmp_path, monkeypatch):
    # Seen on a GPU machine set up offline (pip --no-deps): the run's end crashed on the import.
    from history_records import make_run

    from perfsuite.history import recording

    monkeypatch.setitem(sys.modules, "perfsuite.history.store", None)  # import fails
    recorded = recording.record_runs(
        [make_run("r1", "a" * 40, 1)], str(tmp_path / "history.sqlite")
    )
    assert not recorded.added
    assert "pip install 'sqlalchemy>=2'" in recorded.line()
    assert "its files are saved as usual" in recorded.line()
