"""Shared fixtures for the ctrlrun test suite.

The store fixtures run every test that uses them on both backends: a SQLite file under
``tmp_path`` and a PostgreSQL schema of its own (dropped afterwards). PostgreSQL is the server
named by ``CTRLRUN_TEST_POSTGRES_URL`` (``postgresql://user@host:port/db``), else a throwaway
cluster started from the machine's binaries for the session. A server that cannot start is an
error in every PostgreSQL test, never a skip.
"""

from __future__ import annotations

import os
import uuid
from typing import Any, Iterator, Optional
from urllib.parse import urlsplit

import pytest

import ctrlrun
from ctrlrun.testing import MovableClock
from tests_py.support.modes import Mode
from tests_py.support.stores import sqlite_url
from throwaway.pgproxy import PgProxy
from throwaway.pgserver import psql, start_cluster

PG_ENV = "CTRLRUN_TEST_POSTGRES_URL"


class PgServer:
    """The session's PostgreSQL server, and admin SQL through psql."""

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url.split("?", 1)[0]
        parts = urlsplit(self.base_url)
        self.host = parts.hostname or "127.0.0.1"
        self.port = parts.port or 5432
        self.user = parts.username or "postgres"
        self.db = parts.path.lstrip("/") or "postgres"
        self.password = parts.password
        self._admin: Any = None  # psycopg.Connection, opened at the first drop

    def url(
        self, schema: Optional[str] = None, host: Optional[str] = None, port: Optional[int] = None
    ) -> str:
        auth = self.user + (f":{self.password}" if self.password else "")
        url = f"postgresql://{auth}@{host or self.host}:{port or self.port}/{self.db}"
        return url if schema is None else f"{url}?schema={schema}"

    def psql(self, sql: str) -> str:
        return psql(self.port, sql, self.password, self.host, self.user, self.db)

    def new_schema(self) -> str:
        return "t_" + uuid.uuid4().hex[:16]

    def drop_schema(self, schema: str) -> None:
        """Over one admin connection kept open for the session (a psql process per drop cost
        more than most tests; psycopg is a test tool only, ctrlrun does not use it)."""
        if self._admin is None or self._admin.closed:
            import psycopg

            self._admin = psycopg.connect(
                host=self.host,
                port=self.port,
                user=self.user,
                dbname=self.db,
                password=self.password,
                autocommit=True,
                connect_timeout=10,
            )
            # Dropping a test's schema need not wait for the disk: a crash loses a drop only.
            self._admin.execute("SET synchronous_commit = off")
        self._admin.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')

    def close(self) -> None:
        if self._admin is not None:
            self._admin.close()

    def schemas(self) -> set:
        return set(self.psql("SELECT nspname FROM pg_namespace").split())


@pytest.fixture(scope="session")
def pg() -> Iterator[PgServer]:
    given = os.environ.get(PG_ENV)
    if given:
        server = PgServer(given)
        yield server
        server.close()
        return
    try:
        cluster = start_cluster()
    except Exception as exc:  # an error in every PostgreSQL test, never a skip
        raise RuntimeError(
            f"PostgreSQL could not be started for the tests ({exc}); set {PG_ENV} to a server"
        ) from exc
    server = PgServer(cluster.url())
    try:
        yield server
    finally:
        server.close()
        cluster.stop()


@pytest.fixture
def pg_schema(pg: PgServer) -> Iterator[str]:
    schema = pg.new_schema()
    yield schema
    pg.drop_schema(schema)


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request) -> str:
    return request.param


@pytest.fixture
def store_url(backend, tmp_path, request) -> str:
    if backend == "sqlite":
        return sqlite_url(tmp_path / "state.db")
    pg_server: PgServer = request.getfixturevalue("pg")
    return pg_server.url(request.getfixturevalue("pg_schema"))


@pytest.fixture(params=["sync", "async"])
def mode(request) -> Mode:
    """The kind of executor a shared decorator case runs against (tests_py/support/modes.py)."""
    return Mode(request.param)


@pytest.fixture(autouse=True)
def _isolated_default_store(tmp_path, monkeypatch):
    monkeypatch.setenv("CTRLRUN_STATE", str(tmp_path / "default.db"))
    monkeypatch.delenv("CTRLRUN_STORE", raising=False)
    ctrlrun.set_default_store(None)
    yield
    ctrlrun.set_default_store(None)


@pytest.fixture
def store_path(tmp_path):
    """The SQLite file of the SQLite-only tests."""
    return tmp_path / "state.db"


def _open(url: str, clock=None):
    s = ctrlrun.open_store(url, clock=clock)
    return s


@pytest.fixture
def store(store_url):
    s = _open(store_url)
    yield s
    s.close()


@pytest.fixture
def clock():
    return MovableClock()


@pytest.fixture
def clocked_store(store_url, clock):
    s = _open(store_url, clock)
    yield s
    s.close()


@pytest.fixture
def second_store(store_url):
    """An independent handle on the same database (reads what was really written)."""
    s = _open(store_url)
    yield s
    s.close()


@pytest.fixture
def proxy(pg):
    """A COMMIT-aware TCP proxy in front of the session's PostgreSQL (throwaway/pgproxy.py)."""
    p = PgProxy(pg.host, pg.port)
    yield p
    p.close()


@pytest.fixture
def direct(pg, pg_schema):
    """A store that bypasses the proxy: what the database really holds."""
    s = ctrlrun.open_store(pg.url(pg_schema))
    yield s
    s.close()


@pytest.fixture
def proxied(pg, pg_schema, proxy, direct):
    """A store on the same schema, reached through ``proxy``."""
    s = ctrlrun.open_store(pg.url(pg_schema, host=proxy.host, port=proxy.port))
    yield s
    s.close()


@pytest.fixture
def raw(backend, store_url, request):
    """Plain SQL on the store's database, outside ctrlrun: ``raw.run(sql)``."""
    from tests_py.support.raw_sql import Raw

    return Raw(backend, store_url, request)
