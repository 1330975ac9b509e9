"""``gctl db copy --to URL``: a whole store moved into another database, ids and all."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from clikit import run
from sqlalchemy import insert, select, update

from gctl.services import db, dbcopy, events, jobs, nodes, specs
from gctl.services.errors import ServiceError
from gctl.store.engine import transaction
from gctl.store.models import (
    AllocationRow,
    Base,
    DaemonLeaseRow,
    GpuRow,
    IntentRow,
    JobRow,
    ProfileRow,
    now,
)

FP = "SHA256:" + "A" * 43


def _busy_sqlite_store(path: Path) -> db.Store:
    """A SQLite store with a row in every table, ids with gaps, and odd text."""
    store = db.connect(str(path))
    db.upgrade(store)
    nodes.add_node(store, "a1", "10.0.0.1", emulate_gpus="2xA100-80GB", host_key_fingerprint=FP)
    nodes.add_node(store, "a2", "10.0.0.2", emulate_gpus="2xV100-16GB", host_key_fingerprint=FP)
    req = specs.build(image="train:1", command=["python", "t.py", "ü; $(rm -rf /)"], gpus=1)
    ids = jobs.submit(store, [req] * 5)
    jobs.act(store, ids[0], "cancel")
    with transaction(store.engine, write=True) as s:
        s.execute(update(JobRow).where(JobRow.id == ids[1]).values(state="RUNNING", attempt=2))
        gpu = s.scalars(select(GpuRow.id).order_by(GpuRow.id)).first()
        s.execute(insert(AllocationRow).values(job_id=ids[1], gpu_id=gpu, mode="exclusive"))
        s.add(ProfileRow(job_id=ids[1], at=now(), gpu_util=0.4, memory_mb=900, progress_rate=3.5))
        s.add(IntentRow(kind="migrate", job_id=ids[1], args={"to": "a2"}, user="ops"))
        s.execute(JobRow.__table__.delete().where(JobRow.id == ids[4]))  # an id gap
        events.record(s, "job.note", "a note", job_id=ids[1], data={"x": [1, 2]})
    return store


def _dump(store: db.Store) -> dict[str, list[dict[str, Any]]]:
    """Every copied table's rows, by primary key, JSON-comparable."""
    out = {}
    with store.engine.connect() as conn:
        for table in Base.metadata.sorted_tables:
            if table.name == DaemonLeaseRow.__tablename__:
                continue
            rows = conn.execute(select(table).order_by(*table.primary_key.columns)).mappings()
            out[table.name] = [json.loads(json.dumps(dict(r), default=str)) for r in rows]
    return out


def test_copy_moves_every_row_with_its_id_and_new_rows_get_new_ids(
    tmp_path: Path, db_url: str
) -> None:
    source = _busy_sqlite_store(tmp_path / "source.db")
    copied = dbcopy.copy(source, db_url)
    target = db.open_store(db_url)
    before, after = _dump(source), _dump(target)
    assert after == before
    assert copied.rows == {name: len(rows) for name, rows in before.items()}
    assert all(copied.rows[t] for t in ("nodes", "gpus", "jobs", "allocations", "events"))
    newest = max(r["id"] for r in before["jobs"])
    req = specs.build(image="train:1", command=["x"], gpus=1)
    assert jobs.submit(target, [req]) == [newest + 1]  # the id sequence moved past the copy
    with pytest.raises(ServiceError, match="is not empty"):
        dbcopy.copy(source, db_url)  # nothing copied twice


def test_copy_refuses_while_a_daemon_holds_the_source(tmp_path: Path) -> None:
    source = _busy_sqlite_store(tmp_path / "source.db")
    with transaction(source.engine, write=True) as s:
        at = now()
        s.add(
            DaemonLeaseRow(id=1, holder="elsewhere:4242", pid=4242, started_at=at, heartbeat_at=at)
        )
    with pytest.raises(ServiceError, match="another gctl daemon holds this store"):
        dbcopy.copy(source, str(tmp_path / "target.db"))


def test_gctl_db_copy_command(tmp_path: Path) -> None:
    source = tmp_path / "source.db"
    _busy_sqlite_store(source)
    code, out, err = run(
        "--db", str(source), "db", "copy", "--to", str(tmp_path / "t.db"), "--json"
    )
    assert code == 0, err
    doc = json.loads(out)
    assert doc["rows"]["jobs"] == 4 and doc["target"].endswith("t.db")
    code, out, err = run("--db", str(source), "db", "copy", "--to", str(source))
    assert code == 1 and "is the source itself" in err
