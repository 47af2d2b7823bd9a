"""The store under faults: a PostgreSQL endpoint that never answers costs seconds and one warning line; a
URL without '//' is refused without printing its password (and no file is made from it); reads are
read-only transactions that do not wait for a writer and work on a read-only mount; a store folder's
empty .gitignore is written again; a closed pipe ends a command without a traceback."""

from __future__ import annotations

import os
import shutil
import socket
import sqlite3
import subprocess
import sys
import threading

import pytest
from sqlalchemy import text

from history_records import make_run
from perfsuite.cli.main import main
from perfsuite.errors import HistoryError
from perfsuite.history import open_store
from perfsuite.history import schema
from perfsuite.history.recording import record_runs

BENCH = "naive/b2h4s64d32-fp32-causal-cpu/forward"


def finished(work, limit_s: float = 30.0):
    """``work()`` run in a thread; its result, or AssertionError when it has not returned after
    ``limit_s`` (far above what it needs when it does not wait: only a hang reaches it)."""
    found: list = []
    thread = threading.Thread(target=lambda: found.append(work()), daemon=True)
    thread.start()
    thread.join(limit_s)
    assert not thread.is_alive(), f"still waiting after {limit_s} s"
    return found[0]


def test_a_postgresql_endpoint_that_never_answers_costs_seconds_and_one_line(monkeypatch):
    """The store's own connect timeout (shortened here from its 10 s) applies to a URL that sets none."""
    pytest.importorskip("psycopg", reason="the PostgreSQL driver is the dev extra's")
    import perfsuite.history.store as store_module

    monkeypatch.setattr(store_module, "CONNECT_TIMEOUT_S", 2, raising=False)
    with socket.socket() as server:  # a real TCP endpoint: it accepts and never answers
        server.bind(("127.0.0.1", 0))
        server.listen(4)
        port = server.getsockname()[1]
        url = f"postgresql+psycopg://user:secret@127.0.0.1:{port}/h"
        recorded = finished(lambda: record_runs([make_run("r1", "a" * 40, 1)], url=url))
    line = recorded.line()
    assert recorded.error and "the run was not recorded" in line and "secret" not in line


def test_the_default_postgresql_timeouts_reach_the_server(new_postgresql_url):
    """On a real server: the statement timeout is set, and a read transaction refuses to write."""
    with open_store(new_postgresql_url()) as store:
        store.record(make_run("r1", "a" * 40, 1))
        shown = store.read(lambda c: c.execute(text("SHOW statement_timeout")).scalar())
        with pytest.raises(HistoryError, match="read-only transaction"):
            store.read(lambda c: c.execute(schema.meta.insert().values(key="k", value="v")))
    assert shown == "2min"


def test_a_url_without_its_slashes_is_refused_without_its_password(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    url = "postgresql+psycopg:/user:secret@db:5432/h"
    assert main(["history", "--store", url, "list"]) == 2
    err = capsys.readouterr().err
    assert "looks like a database URL without '//'" in err and "secret" not in err
    monkeypatch.setenv("PERFSUITE_HISTORY_URL", url)
    recorded = record_runs([make_run("r1", "a" * 40, 1)])
    assert recorded.error and "secret" not in recorded.line()
    assert list(tmp_path.iterdir()) == []  # no SQLite file named after the URL


def test_reads_do_not_wait_for_a_writer(tmp_path):
    path = tmp_path / "history.sqlite"
    with open_store(str(path)) as store:
        store.record(make_run("r1", "a" * 40, 1))
    writer = sqlite3.connect(path, isolation_level=None)
    writer.execute("BEGIN IMMEDIATE")  # another process's write transaction, held open
    try:
        with open_store(str(path), create=False) as store:
            (series,) = finished(lambda: store.list_series(measure="time_s"), limit_s=10)
            assert len(finished(lambda: store.points(series.key), limit_s=10)) == 1
    finally:
        writer.execute("ROLLBACK")
        writer.close()


def test_a_store_on_a_read_only_mount_can_be_read(tmp_path):
    """In a user and mount namespace (unshare), the store's folder is bind-mounted read-only."""
    if shutil.which("unshare") is None or subprocess.run(["unshare", "-rm", "true"]).returncode:
        pytest.skip("unshare -rm (user and mount namespaces) is not allowed here")
    folder = tmp_path / "ro"
    folder.mkdir()
    with open_store(str(folder / "history.sqlite")) as store:
        store.record(make_run("r1", "a" * 40, 1))
    script = (
        f'mount --bind "$1" "$1" && mount -o remount,ro,bind "$1" && '
        f'! touch "$1/x" 2>/dev/null && "{sys.executable}" -m perfsuite.cli.main '
        f'history --store "$1/history.sqlite" list --measure time_s'
    )
    done = subprocess.run(
        ["unshare", "-rm", "sh", "-c", script, "sh", str(folder)], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert BENCH in done.stdout and "1 point(s)" in done.stdout


def test_an_empty_gitignore_of_the_store_folder_is_written_again(tmp_path):
    folder = tmp_path / ".perfsuite"
    folder.mkdir()
    (folder / ".gitignore").write_text("")  # what a full disk left
    open_store(str(folder / "history.sqlite")).close()
    assert (folder / ".gitignore").read_text().splitlines()[-1] == "*"


def test_a_closed_pipe_ends_a_command_without_a_traceback(tmp_path, monkeypatch, capsys):
    store = str(tmp_path / "h.sqlite")
    with open_store(store) as opened:
        opened.record(
            make_run("r1", "a" * 40, 1, benchmarks=tuple(f"v{i}/c/forward" for i in range(50)))
        )
    read, write = os.pipe()
    os.close(read)  # the reader (head -1) is gone
    with os.fdopen(write, "w", buffering=1) as closed:
        monkeypatch.setattr(sys, "stdout", closed)
        assert main(["history", "--store", store, "list"]) == 141
    monkeypatch.undo()
    assert "Traceback" not in capsys.readouterr().err


def _admin(url: str) -> str:
    from sqlalchemy.engine import make_url

    return make_url(url).render_as_string(hide_password=False).replace("+psycopg", "")


def test_a_frozen_postgresql_backend_ends_in_one_clear_error_within_the_answer_limit(
    new_postgresql_url,
):
    """The backend serving the store is stopped (SIGSTOP) after it answered once: the server's own
    statement timeout can never fire, the client's limit does (shortened here to 3 s). The limit is a
    SIGALRM timer, so the read runs in the main thread."""
    import signal

    if os.geteuid() != 0:
        pytest.skip("stopping the server's backend process needs root")
    url = new_postgresql_url()
    with open_store(url, answer_limit_s=3) as store:
        backend = store.read(lambda c: c.execute(text("SELECT pg_backend_pid()")).scalar())
        os.kill(backend, signal.SIGSTOP)
        # the safety net: without a client limit the read returns once the backend goes on (60 s)
        thaw = threading.Timer(60, os.kill, (backend, signal.SIGCONT))
        thaw.start()
        try:
            with pytest.raises(HistoryError) as raised:
                store.runs()  # in the main thread, as the command line runs it
        finally:
            thaw.cancel()
            os.kill(backend, signal.SIGCONT)
    assert "did not answer within 3 s" in str(raised.value)


def test_history_list_behind_a_lock_another_connection_holds_ends_in_one_line(
    new_postgresql_url, monkeypatch, capsys
):
    """Another connection holds an exclusive lock on the runs table: ``perfsuite history list``
    ends with one error line within the client's limit (3 s here), not the server's 2 minutes."""
    import psycopg

    import perfsuite.history.store as store_module

    url = new_postgresql_url()
    with open_store(url) as store:
        store.record(make_run("r1", "a" * 40, 1))
    monkeypatch.setattr(store_module, "ANSWER_LIMIT_S", 3)
    with psycopg.connect(_admin(url)) as holder:
        holder.execute(f"LOCK TABLE {schema.runs.name} IN ACCESS EXCLUSIVE MODE")
        # the safety net: without a client limit the command goes on once the lock is let go (60 s)
        release = threading.Timer(60, holder.rollback)
        release.start()
        try:
            code = main(["history", "--store", url, "list"])  # the main thread, as a user runs it
        finally:
            release.cancel()
    err = capsys.readouterr().err
    assert code != 0 and "did not answer within 3 s" in err, err
    assert "Traceback" not in err


@pytest.mark.parametrize(
    ("url", "said"),
    [
        ("postgresql+psycopg://u:pa/ss-tail@localhost:abc/db", "its port is not a number"),
        ("postgresql+psycopg://u:pa@ss-tail@localhost/db", "holds an unescaped '@'"),
        ("postgresql+psycopg:u:pa/ss-tail@localhost/db", "without '//'"),
    ],
)
def test_a_malformed_server_url_is_one_error_without_any_part_of_its_password(url, said):
    with pytest.raises(HistoryError) as raised:
        open_store(url, create=False)
    message = f"{raised.value} {raised.value.source}"
    assert said in message and "ss-tail" not in message and ":pa" not in message


def test_a_password_holding_a_slash_is_hidden_whole():
    from perfsuite.history.store import hide_password

    assert hide_password("postgresql://u:pa/ss@h:5432/db and more") == (
        "postgresql://u:***@h:5432/db and more"
    )
    assert hide_password("postgresql://h:5432/db") == "postgresql://h:5432/db"


def test_parallel_imports_of_one_run_store_it_once_and_report_it_stored(new_postgresql_url):
    """Eight writers (own connections, started together) record the same run into one PostgreSQL
    store: one adds it, the others are told it is already there; no error."""
    url = new_postgresql_url()
    open_store(url).close()  # the schema exists: the writers race on the run only
    run = make_run("same-run", "a" * 40, 1)
    barrier = threading.Barrier(8)
    outcomes: list = []

    def write() -> None:
        with open_store(url) as store:
            barrier.wait()
            try:
                outcomes.append(store.record(run))
            except Exception as exc:  # the test names any error
                outcomes.append(exc)

    writers = [threading.Thread(target=write) for _ in range(8)]
    for writer in writers:
        writer.start()
    for writer in writers:
        writer.join(60)
    assert sorted(map(str, outcomes)) == ["False"] * 7 + ["True"], outcomes
    with open_store(url) as store:
        assert [r["uid"] for r in store.runs()] == ["same-run"]
