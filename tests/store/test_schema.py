"""The migrations and the models describe the same schema, on SQLite and PostgreSQL."""

from __future__ import annotations

from pathlib import Path

import pytest
from alembic import command
from sqlalchemy import Column, Integer, MetaData, inspect, select, text

from gctl.services import db, jobs, queue, reader, specs
from gctl.services.errors import ServiceError
from gctl.store import schema, settings
from gctl.store.engine import transaction
from gctl.store.models import Base, JobRow


def test_upgrade_creates_every_table_and_matches_the_models(db_url: str) -> None:
    store = db.connect(db_url)
    assert db.revision(store) is None
    before, after = db.upgrade(store)
    assert (before, after) == (None, schema.head())
    tables = set(inspect(store.engine).get_table_names())
    assert set(Base.metadata.tables) <= tables
    assert schema.differences(store.engine) == []
    assert db.upgrade(store) == (schema.head(), schema.head())  # idempotent


def test_a_model_change_without_a_migration_is_detected(db_url: str) -> None:
    store = db.connect(db_url)
    db.upgrade(store)
    changed = MetaData(naming_convention=Base.metadata.naming_convention)
    for table in Base.metadata.tables.values():
        table.to_metadata(changed)
    changed.tables["nodes"].append_column(Column("rack", Integer, nullable=True))
    diffs = schema.differences(store.engine, changed)
    assert any("rack" in repr(d) for d in diffs)


def test_commands_refuse_an_uninitialised_or_stale_database(db_url: str) -> None:
    """Both ways in: the engine (``db.open_store``) and the fast reader of ``gctl queue``."""
    for refused in (_read, db.open_store):
        with pytest.raises(ServiceError, match="run 'gctl init'"):
            refused(db_url)
        if "://" not in db_url:
            assert not Path(db_url).exists()  # no way in makes an empty database
    store = db.connect(db_url)
    db.upgrade(store)
    assert _read(db_url) == []
    with store.engine.begin() as conn:
        conn.exec_driver_sql("UPDATE alembic_version SET version_num = '0000'")
    for refused in (db.open_store, _read):
        with pytest.raises(ServiceError, match="gctl db upgrade"):
            refused(db_url)


def _read(db_url: str) -> list[int]:
    with reader.reading(db_url) as r:
        return queue.listing(r).id


@pytest.mark.parametrize(
    ("url", "path"),
    [
        ("jobs.db", Path("jobs.db")),
        ("~/g.db", Path("~/g.db").expanduser()),
        ("sqlite:////var/lib/gctl/gctl.db", Path("/var/lib/gctl/gctl.db")),
        ("sqlite+pysqlite:///rel.db", Path("rel.db")),
        ("sqlite:///:memory:", None),
        ("sqlite:///x.db?timeout=5", None),
        ("postgresql+psycopg://gctl@db/gctl", None),
    ],
)
def test_the_fast_reader_takes_only_plain_sqlite_files(url: str, path: Path | None) -> None:
    assert reader.sqlite_file(url) == path


def test_sqlite_connections_use_wal_foreign_keys_and_a_busy_timeout(tmp_path: Path) -> None:
    store = db.connect(str(tmp_path / "x.db"))
    with store.engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
        assert conn.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
        assert conn.exec_driver_sql("PRAGMA busy_timeout").scalar() >= 1000


def test_head_constant_names_the_newest_migration() -> None:
    from alembic.script import ScriptDirectory

    assert ScriptDirectory.from_config(schema.alembic_config()).get_current_head() == settings.HEAD


def test_a_job_with_no_move_has_sql_null_op_and_0004_repairs_json_null(db_url: str) -> None:
    store = db.connect(db_url)
    db.upgrade(store)
    jobs.submit(store, [specs.build(image="img", command=["true"], gpus=1)])
    cfg = schema.alembic_config()
    with store.engine.begin() as conn:  # back to 0003, where a finished move left JSON null
        cfg.attributes["connection"] = conn
        command.downgrade(cfg, "0003")
        conn.execute(text("UPDATE jobs SET op = 'null'"))
    db.upgrade(store)
    with transaction(store.engine, write=True) as s:
        row = s.scalars(select(JobRow)).one()
        assert row.op is None
        row.op = {"kind": "migrate"}
    with transaction(store.engine, write=True) as s:
        s.scalars(select(JobRow)).one().op = None  # a move finishing
    with store.engine.connect() as conn:
        assert conn.scalar(text("SELECT count(*) FROM jobs WHERE op IS NULL")) == 1
