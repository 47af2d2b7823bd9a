"""Store fixtures: ``store_url`` is a fresh store on SQLite and on a real PostgreSQL server that
pytest-postgresql starts from Debian's binaries (``/usr/lib/postgresql/<version>/bin``, or
``PERFSUITE_PG_BIN``). As root (CI), pg_ctl runs as the postgres user (``pg_ctl_as_postgres.sh``).
Without a server binary the PostgreSQL cases skip with the reason; ``PERFSUITE_REQUIRE_POSTGRESQL=1``
(set by .ci/run) turns that skip into a failure, so CI cannot silently lose them.

``PERFSUITE_PG_URL`` (a libpq URL of a running server, e.g. ``postgresql://root@/postgres?host=/var/run/postgresql``)
uses that server instead of starting one: .ci/run starts Debian's cluster with ``pg_ctlcluster`` and sets it,
so the server's data lives outside pytest's temporary folders and no worker runs initdb."""

from __future__ import annotations

import os
import shutil
import uuid
from pathlib import Path

import pytest


def _pg_bin() -> Path | None:
    chosen = os.environ.get("PERFSUITE_PG_BIN")
    found = (
        [Path(chosen)]
        if chosen
        else sorted(
            Path("/usr/lib/postgresql").glob("*/bin"),
            key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0,
        )
    )
    found = [p for p in found if (p / "pg_ctl").exists()]
    return found[-1] if found else None


PG_BIN = _pg_bin()
WRAPPER = Path(__file__).with_name("pg_ctl_as_postgres.sh")


def _executable() -> str | None:
    if PG_BIN is None:
        return None
    if os.geteuid() != 0:
        return str(PG_BIN / "pg_ctl")
    os.environ["PERFSUITE_PG_BIN"] = str(PG_BIN)
    return str(WRAPPER) if shutil.which("runuser") else None


SERVER_URL = os.environ.get("PERFSUITE_PG_URL")


def _missing_reason() -> str | None:
    try:
        import psycopg  # noqa: F401
        import pytest_postgresql  # noqa: F401
    except ImportError as exc:
        return f"PostgreSQL store tests need the dev extra (psycopg, pytest-postgresql): {exc}"
    if SERVER_URL:
        return None
    if PG_BIN is None:
        return "no PostgreSQL server binary (install Debian's postgresql package: /usr/lib/postgresql/*/bin/pg_ctl)"
    if _executable() is None:
        return "running as root without runuser, which pg_ctl needs to run as the postgres user"
    return None


MISSING = _missing_reason()

if MISSING is None and not SERVER_URL:
    from pytest_postgresql import factories

    postgresql_history_proc = factories.postgresql_proc(
        executable=_executable(), host="127.0.0.1", unixsocketdir="/tmp"
    )


def postgresql_url(request: pytest.FixtureRequest) -> str:
    """A new, empty database on the session's server, as a SQLAlchemy URL; dropped after the test.
    Its name is random: a server started once for CI outlives every pytest process (and their pids)."""
    if MISSING:
        if os.environ.get("PERFSUITE_REQUIRE_POSTGRESQL") == "1":
            pytest.fail(f"PERFSUITE_REQUIRE_POSTGRESQL=1 but {MISSING}")
        pytest.skip(MISSING)
    import psycopg
    from sqlalchemy.engine import make_url

    name = f"history_{uuid.uuid4().hex[:16]}"
    if SERVER_URL:
        server = make_url(SERVER_URL.strip().replace("postgresql://", "postgresql+psycopg://", 1))
    else:
        proc = request.getfixturevalue("postgresql_history_proc")
        server = make_url(f"postgresql+psycopg://{proc.user}@{proc.host}:{proc.port}/postgres")
    admin = server.render_as_string(hide_password=False).replace("+psycopg", "")
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')

    def drop() -> None:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    request.addfinalizer(drop)
    return server.set(database=name).render_as_string(hide_password=False)


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A URL of a new store: an SQLite file under ``tmp_path``, or a new PostgreSQL database."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'history.sqlite'}"
    return postgresql_url(request)


@pytest.fixture
def new_postgresql_url(request: pytest.FixtureRequest):
    """``new_postgresql_url()``: a new database's URL, the server started on first use (skips as above)."""
    return lambda: postgresql_url(request)
