"""Store fixtures: every store test runs on a SQLite file and on a real PostgreSQL server.

The PostgreSQL server comes from Debian's packages, started once per test
session by scripts/testpg.sh (which installs the package when missing) and
stopped at the end; each test gets a database of its own.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path

import pgserver
import pytest
from sqlalchemy import create_engine, make_url, text

from gctl.services import db

_counter = itertools.count()


@pytest.fixture(scope="session")
def pg_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    where = tmp_path_factory.mktemp("pg")
    url = pgserver.start(where)
    try:
        yield url
    finally:
        pgserver.stop(where)


def _new_database(server: str) -> str:
    """The URL of a new, empty database on the PostgreSQL server."""
    name = f"t{next(_counter)}"
    admin = create_engine(server, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    admin.dispose()
    return make_url(server).set(database=name).render_as_string(hide_password=False)


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A URL of an empty database of each kind."""
    if request.param == "sqlite":
        return str(tmp_path / "gctl.db")
    return _new_database(request.getfixturevalue("pg_server"))


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def module_db_url(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> str:
    """A URL of an empty database of each kind, shared by the tests of a module."""
    if request.param == "sqlite":
        return str(tmp_path_factory.mktemp("db") / "gctl.db")
    return _new_database(request.getfixturevalue("pg_server"))


@pytest.fixture
def pg_url(pg_server: str) -> str:
    """A URL of an empty PostgreSQL database (for what only PostgreSQL offers)."""
    return _new_database(pg_server)


@pytest.fixture
def store(db_url: str) -> db.Store:
    """An initialised store."""
    s = db.connect(db_url)
    db.upgrade(s)
    return s
