"""Opening a store (SQLite file or PostgreSQL URL), checking and migrating its schema, and writing
one run per transaction, idempotently by the run's uid.

SQLite: WAL journal, a 30 s busy timeout, ``BEGIN IMMEDIATE`` write transactions (a writer takes
the lock at the start, so two writers queue instead of failing on a lock upgrade) and retries on
``database is locked``; reads (``Store.read``) are deferred transactions that never wait for a
writer, and a store that cannot be written (a read-only mount, another user's file) is read
read-only. A file that is not SQLite, or an SQLite database without perfsuite's tables, is refused
with its name and never written. PostgreSQL: connect and statement timeouts (``CONNECT_TIMEOUT_S``,
``STATEMENT_TIMEOUT_S``; a URL's own ``connect_timeout`` or ``options`` win), so a server that
never answers costs seconds; reads are ``READ ONLY`` transactions; schema creation and migration
hold a transaction-level advisory lock, so concurrent first opens do not race. No password is
printed: every URL shown goes through ``shown``.
"""

from __future__ import annotations

import os
import random
import re
import time
from pathlib import Path
from typing import Any, TypeVar
from collections.abc import Callable

from sqlalchemy import Connection, Engine, create_engine, event, inspect, select, text
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, NoSuchModuleError, OperationalError

from perfsuite.errors import HistoryError, NoHistoryStoreYet
from perfsuite.measure.call_limit import CallTimeLimitExceeded, time_limit
from perfsuite.storage import write_text_atomic
import perfsuite.history.schema as schema
from perfsuite.history.records import RunRecord

URL_ENV = "PERFSUITE_HISTORY_URL"
URL_INI = "perfsuite_history_url"
DEFAULT_PATH = (
    Path(".perfsuite") / "history.sqlite"
)  # under the repository root, beside .benchmarks/
SQLITE_MAGIC = b"SQLite format 3\x00"
BUSY_TIMEOUT_MS = 30_000
WRITE_ATTEMPTS = 8
CONNECT_TIMEOUT_S = 10  # PostgreSQL: a server that accepts and never answers
STATEMENT_TIMEOUT_S = 120  # PostgreSQL: one statement (a run's batch insert is one)
# PostgreSQL: one transaction, on the client's clock (a frozen backend never enforces its timeout)
ANSWER_LIMIT_S = CONNECT_TIMEOUT_S + STATEMENT_TIMEOUT_S + 30
# a scheme and a colon ("postgresql+psycopg:"): what a URL without its "//" looks like
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.\-]*:(?![\\/]{2})")
_PASSWORD = re.compile(r"(?P<user>[^:/@\s]*):(?P<password>(?!//)[^@\s]*)@")
# after "//": a password may hold "/" and "@" (unescaped); it ends at the last "@" before the host
_URL_PASSWORD = re.compile(r"(?<=//)(?P<user>[^:/@\s]*):(?P<password>\S*)@(?=[^@\s]*(?:[/?#\s]|$))")
_ADVISORY_KEY = 0x70657266  # "perf": PostgreSQL advisory lock for schema changes

T = TypeVar("T")


def repository_root(start: Path | None = None) -> Path:
    """The nearest folder at or above ``start`` (default: the current one) holding ``.git``, else ``start``."""
    start = (start or Path.cwd()).resolve()
    for folder in (start, *start.parents):
        if (folder / ".git").exists():
            return folder
    return start


def resolve_url(
    url: str | None = None, ini_value: str | None = None, root: Path | None = None
) -> str:
    """The store's URL: ``url`` if given, else ``$PERFSUITE_HISTORY_URL``, else the ini key
    ``perfsuite_history_url`` (``ini_value``), else the SQLite file ``.perfsuite/history.sqlite``
    at the repository root of ``root`` (default: the current folder). A plain path is a SQLite file."""
    chosen = url or os.environ.get(URL_ENV) or ini_value
    if not chosen:
        return f"sqlite:///{repository_root(root) / DEFAULT_PATH}"
    if "://" not in chosen:
        if _SCHEME.match(chosen) and not re.match(r"^[A-Za-z]:[\\/]", chosen):  # not C:\...
            raise HistoryError(
                f"{hide_password(chosen)!r}: looks like a database URL without '//' after its "
                "scheme (e.g. postgresql+psycopg://user@host/db, sqlite:///path/history.sqlite); "
                "a SQLite file is a path or a sqlite:/// URL",
                hide_password(chosen),
            )
        return f"sqlite:///{Path(chosen).expanduser().resolve()}"
    return chosen


def hide_password(text: str) -> str:
    """``text`` with the password of every ``user:password@`` in it replaced by ``***`` (after ``//``
    the whole password up to the host, also one holding an unescaped ``/`` or ``@``)."""
    text = _URL_PASSWORD.sub(lambda m: f"{m['user']}:***@", text)
    return _PASSWORD.sub(lambda m: f"{m['user']}:***@", text)


def shown(url: str | URL) -> str:
    """The URL as it may be printed: the password hidden (also in a string that is no valid URL)."""
    try:
        return (
            make_url(url).render_as_string(hide_password=True)
            if isinstance(url, str)
            else url.render_as_string(hide_password=True)
        )
    except ArgumentError:
        return hide_password(str(url))


def _sqlite_file(url: URL) -> Path | None:
    database = url.database
    return (
        Path(database)
        if url.get_backend_name() == "sqlite" and database and database != ":memory:"
        else None
    )


def _check_sqlite_file(path: Path) -> None:
    """Refuse a file that is not an SQLite database, naming it; never touch it."""
    if not path.exists() or path.stat().st_size == 0:
        return
    if path.is_dir():
        raise HistoryError(f"{path}: is a folder, not a history store file", str(path))
    with path.open("rb") as handle:
        head = handle.read(len(SQLITE_MAGIC))
    if head != SQLITE_MAGIC:
        raise HistoryError(
            f"{path}: not a perfsuite history store (not an SQLite database); left untouched. "
            f"Point {URL_ENV} or {URL_INI} at another file, or move this one away.",
            str(path),
        )


READ = "perfsuite_read"  # the execution option of a read-only transaction (Store.read)


def _sqlite_events(engine: Engine, read_only: bool = False) -> None:
    @event.listens_for(engine, "connect")
    def _connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None  # SQLAlchemy emits BEGIN itself (below)
        cursor = dbapi_connection.cursor()
        cursor.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        if not read_only:
            cursor.execute("PRAGMA journal_mode = WAL")
            cursor.execute("PRAGMA synchronous = NORMAL")  # WAL: durable across process crashes
        cursor.execute("PRAGMA foreign_keys = ON")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _begin(connection: Connection) -> None:
        # a read takes no lock up front: in WAL mode it never waits for a writer
        read = connection.get_execution_options().get(READ)
        connection.exec_driver_sql("BEGIN" if read else "BEGIN IMMEDIATE")


def _postgresql_arguments(url: URL) -> dict[str, Any]:
    """libpq connection parameters: the connect and statement timeouts, unless the URL sets them."""
    found: dict[str, Any] = {}
    if "connect_timeout" not in url.query:
        found["connect_timeout"] = CONNECT_TIMEOUT_S
    if "options" not in url.query:
        found["options"] = f"-c statement_timeout={STATEMENT_TIMEOUT_S * 1000}"
    return found


def _writable(path: Path) -> bool:
    """Whether SQLite can write ``path`` and create its journal files beside it."""
    return os.access(path, os.W_OK) and os.access(path.parent, os.W_OK)


def _locked(exc: BaseException) -> bool:
    message = str(exc).lower()
    return isinstance(exc, OperationalError) and ("locked" in message or "busy" in message)


class Store:
    """An open history store. Write with ``record``; read with ``list_series``, ``points``,
    ``epochs``, ``runs`` (``perfsuite.history.query``). Use as a context manager or ``close()``."""

    def __init__(self, engine: Engine, url: str, answer_limit_s: float | None = ANSWER_LIMIT_S):
        self.engine = engine
        self.url = url
        self.answer_limit_s = answer_limit_s

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.engine.dispose()

    @property
    def dialect(self) -> str:
        return self.engine.dialect.name

    def transaction(
        self, work: Callable[[Connection], T], attempts: int = WRITE_ATTEMPTS, read: bool = False
    ) -> T:
        """Run ``work(connection)`` in one transaction, retried with backoff while the store is locked;
        ``read``: a read-only transaction (``read``). On PostgreSQL the whole of it within
        ``answer_limit_s`` on this process's clock (main thread only): past it ``HistoryError`` says the
        server did not answer, and the engine's connections are dropped."""
        limit_s = self.answer_limit_s if self.dialect == "postgresql" else None
        with time_limit(limit_s, f"a transaction on {shown(self.url)}") as limit:
            try:
                return self._transaction(work, attempts, read)
            except (CallTimeLimitExceeded, HistoryError) as exc:
                if not limit.expired:
                    raise
                self.engine.dispose()
                raise HistoryError(
                    f"{shown(self.url)}: the server did not answer within {limit_s:g} s (a frozen "
                    "backend, or a lock another connection holds); nothing was written",
                    shown(self.url),
                ) from exc

    def _transaction(self, work: Callable[[Connection], T], attempts: int, read: bool) -> T:
        for attempt in range(attempts):
            try:
                with self.engine.connect() as connection:
                    if read:
                        connection.execution_options(**{READ: True})
                    with connection.begin():
                        if read and self.dialect == "postgresql":
                            connection.exec_driver_sql("SET TRANSACTION READ ONLY")
                        return work(connection)
            except OperationalError as exc:
                if not _locked(exc) or attempt == attempts - 1:
                    raise HistoryError(f"{shown(self.url)}: {exc.orig}", shown(self.url)) from exc
                time.sleep(min(2.0, 0.05 * 2**attempt) * (0.5 + random.random()))
            except DBAPIError as exc:
                raise HistoryError(f"{shown(self.url)}: {exc.orig}", shown(self.url)) from exc
        raise AssertionError("unreachable")

    def record(self, run: RunRecord) -> bool:
        """Write ``run`` in one transaction; False (nothing written) when its uid is already stored.

        Raises ``HistoryError`` naming the store when it cannot be written."""
        from perfsuite.history.writing import insert_run

        return self.transaction(lambda connection: insert_run(connection, run))

    def read(self, work: Callable[[Connection], T]) -> T:
        """Run ``work(connection)`` in a read-only transaction: on SQLite a deferred one that takes no
        write lock (it neither waits for a writer nor needs a writable file), on PostgreSQL ``READ ONLY``."""
        return self.transaction(work, read=True)

    def has_run(self, uid: str) -> bool:
        """Whether a run with ``uid`` is stored."""
        return self.read(
            lambda c: (
                c.execute(select(schema.runs.c.id).where(schema.runs.c.uid == uid)).first()
                is not None
            )
        )

    def list_series(self, **filters: Any):
        """``query.list_series`` on this store."""
        import perfsuite.history.query as query

        return self.read(lambda c: query.list_series(c, **filters))

    def points(self, series, **options: Any):
        """``query.points`` on this store."""
        import perfsuite.history.query as query

        return self.read(lambda c: query.points(c, series, **options))

    def pairs(self, series):
        """``query.pairs`` on this store: its interleaved A/B gates of ``series``."""
        import perfsuite.history.query as query

        key = getattr(series, "key", series)
        return self.read(lambda c: query.pairs(c, key))

    def epochs(self, series, **options: Any):
        """``query.epochs`` over ``points(series)``."""
        import perfsuite.history.query as query

        return query.epochs(self.points(series, **options))

    def roofline_facts(self, series, sha: str):
        """``query.roofline_facts`` on this store."""
        import perfsuite.history.query as query

        key = getattr(series, "key", series)
        return self.read(lambda c: query.roofline_facts(c, key, sha))

    def commit_shas(self) -> set[str]:
        """``query.commit_shas`` on this store: the commits of every stored run."""
        import perfsuite.history.query as query

        return self.read(query.commit_shas)

    def gate_structures(self, series):
        """``query.gate_structures`` on this store: the two sides' fingerprints of its A/B runs."""
        import perfsuite.history.query as query

        key = getattr(series, "key", series)
        return self.read(lambda c: query.gate_structures(c, key))

    def aa_spreads(self, testbed: str, newest: int):
        """``query.aa_spreads`` on this store: per benchmark, the spread between worker pairs of its
        newest ``newest`` A/A gates on the testbed fingerprinted ``testbed``."""
        import perfsuite.history.query as query

        return self.read(lambda c: query.aa_spreads(c, testbed, newest))

    def acceptances(self):
        """``query.acceptances`` on this store: accepted findings by id."""
        import perfsuite.history.query as query

        return self.read(query.acceptances)

    def accept(self, rows: list[dict[str, Any]]) -> int:
        """Store acceptances in one transaction: ``rows`` of ``schema.acceptances`` columns (``finding``,
        ``series``, ``benchmark``, ``last_good``, ``first_bad``, ``reason``, ``accepted_at``,
        ``accepted_by``); returns how many. Nothing stored before is changed."""
        if not rows:
            return 0
        self.transaction(lambda c: c.execute(schema.acceptances.insert(), rows))
        return len(rows)

    def runs(self, **filters: Any):
        """``query.runs`` on this store."""
        import perfsuite.history.query as query

        return self.read(lambda c: query.runs(c, **filters))


def _schema_version(connection: Connection, source: str) -> int | None:
    """The stored version; None for an empty store; ``HistoryError`` for a foreign database."""
    names = set(inspect(connection).get_table_names())
    if schema.meta.name not in names:
        ours = names & set(schema.TABLES)
        foreign = names if connection.dialect.name == "sqlite" else ours
        if foreign:
            raise HistoryError(
                f"{source}: not a perfsuite history store (it has tables "
                f"{', '.join(sorted(foreign)[:5])} but no {schema.meta.name}); left untouched",
                source,
            )
        return None
    row = connection.execute(
        select(schema.meta.c.value).where(schema.meta.c.key == "schema_version")
    ).first()
    if row is None or not str(row[0]).isdigit():
        raise HistoryError(
            f"{source}: a perfsuite history store without a readable schema version; left untouched",
            source,
        )
    return int(row[0])


def _newer(source: str, found: int, version: int) -> HistoryError:
    return HistoryError(
        f"{source}: the store has schema version {found}, newer than this perfsuite's "
        f"{version}; upgrade perfsuite to read it (the store is left untouched)",
        source,
    )


def prepare_schema(
    connection: Connection,
    source: str,
    version: int = schema.SCHEMA_VERSION,
    migrations: list[Callable[[Connection], None]] | None = None,
) -> int:
    """Create the schema in an empty store, or migrate an older one forward; returns the version found
    (0 for a new store). Refuses a store newer than ``version`` with ``HistoryError``."""
    migrations = schema.MIGRATIONS if migrations is None else migrations
    if connection.dialect.name == "postgresql":
        connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _ADVISORY_KEY})
    found = _schema_version(connection, source)
    if found is None:
        schema.metadata.create_all(connection)
        connection.execute(schema.meta.insert(), [{"key": "schema_version", "value": str(version)}])
        return 0
    if found > version:
        raise _newer(source, found, version)
    for step in range(found, version):
        migrations[step - 1](connection)
    if found < version:
        connection.execute(
            schema.meta.update()
            .where(schema.meta.c.key == "schema_version")
            .values(value=str(version))
        )
    return found


def open_store(
    url: str | None = None,
    ini_value: str | None = None,
    root: Path | None = None,
    create: bool = True,
    answer_limit_s: float | None = None,
) -> Store:
    """Open (and create or migrate) the store at ``resolve_url(url, ini_value, root)``.

    ``create=False`` refuses a store that does not exist yet (for read-only commands), and opens an
    SQLite file it cannot write read-only (a store of the current schema is then only read).
    Raises ``HistoryError`` naming the file or URL (never its password): a URL without ``//``, not
    an SQLite file, a foreign database, a newer schema, a missing driver (``pip install
    'perfsuite[postgresql]'``), an unreachable server or one that does not answer within
    ``CONNECT_TIMEOUT_S``. ``answer_limit_s``: seconds a PostgreSQL transaction may take on this
    process's clock (``Store.transaction``; default ``ANSWER_LIMIT_S``)."""
    resolved = resolve_url(url, ini_value, root)
    try:
        parsed = make_url(resolved)
    except (ArgumentError, ValueError) as exc:  # ValueError: a port that is not a number
        port = " (its port is not a number)" if isinstance(exc, ValueError) else ""
        raise HistoryError(
            f"{hide_password(resolved)!r}: not a database URL{port} (e.g. "
            "sqlite:///path/history.sqlite or postgresql+psycopg://user@host:5432/db; a password "
            "holding / or @ is written %2F and %40)",
            hide_password(resolved),
        ) from None
    _check_user_info(resolved, parsed)
    source = shown(parsed)
    path = _sqlite_file(parsed)
    read_only = False
    arguments: dict[str, Any] = {}
    if path is not None:
        source = str(path)
        _check_sqlite_file(path)
        if not path.exists():
            if not create:
                raise NoHistoryStoreYet(
                    f"{path}: no history store yet (record a timed run first)", str(path)
                )
            path.parent.mkdir(parents=True, exist_ok=True)
        if path.parent.name == DEFAULT_PATH.parent.name:
            _ignore_store_folder(path)
        if not create and not _writable(path):
            # read-only: no journal files can be made beside it (a read-only mount), so SQLite reads
            # it as immutable
            read_only = True
            parsed = make_url(f"sqlite:///file:{path}?mode=ro&immutable=1&uri=true")
    elif parsed.get_backend_name() == "postgresql":
        arguments = _postgresql_arguments(parsed)
    try:
        engine = create_engine(
            parsed,
            pool_pre_ping=parsed.get_backend_name() != "sqlite",
            connect_args=arguments,
        )
    except (NoSuchModuleError, ModuleNotFoundError) as exc:
        raise HistoryError(
            f"{source}: no database driver for this URL ({exc}); for PostgreSQL install "
            f"'perfsuite[postgresql]' (psycopg 3) and use postgresql+psycopg://",
            source,
        ) from None
    if engine.dialect.name == "sqlite":
        _sqlite_events(engine, read_only)
    store = Store(engine, resolved, answer_limit_s or ANSWER_LIMIT_S)
    try:
        found = store.read(lambda connection: _schema_version(connection, source))
        if found is None or found < schema.SCHEMA_VERSION:
            if read_only:
                raise HistoryError(
                    f"{source}: a store of schema version {found}, which needs writing to be read "
                    f"by this perfsuite ({schema.SCHEMA_VERSION}); open it once where it can be written",
                    source,
                )
            store.transaction(lambda connection: prepare_schema(connection, source))
        elif found > schema.SCHEMA_VERSION:
            raise _newer(source, found, schema.SCHEMA_VERSION)
    except HistoryError as exc:
        engine.dispose()
        if exc.source != source:
            raise HistoryError(f"{source}: {hide_password(str(exc))}", source) from exc
        raise
    except DBAPIError as exc:  # "file is not a database" and the like
        engine.dispose()
        raise HistoryError(
            f"{source}: cannot be opened as a history store ({exc.orig})", source
        ) from None
    return store


def _check_user_info(text: str, parsed: URL) -> None:
    """Refuse a server URL whose ``user:password@`` part holds an unescaped ``@``: the URL reads
    two ways (the driver would take the password's tail for the host, and print it in its error)."""
    if parsed.get_backend_name() == "sqlite":
        return
    authority = text.partition("://")[2].partition("?")[0]
    if authority.count("@") > 1:
        raise HistoryError(
            f"{hide_password(text)!r}: its user or password holds an unescaped '@' (or '/'); write "
            "them %40 and %2F (urllib.parse.quote(password, safe=''))",
            hide_password(text),
        )


def _ignore_store_folder(path: Path) -> None:
    """A ``.perfsuite/`` folder gets a ``.gitignore`` of ``*``, so git ignores the store without setup;
    written whole or not at all (an empty one, left by a full disk, is written again)."""
    ignore = path.parent / ".gitignore"
    try:
        if ignore.exists() and ignore.stat().st_size > 0:
            return
        write_text_atomic(ignore, "# perfsuite's history store: not versioned\n*\n")
    except OSError:
        pass
