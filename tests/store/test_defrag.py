"""``gctl defrag``: a core defragmentation pass over the stored cluster."""

from __future__ import annotations

import json
import time

import pytest
from clikit import run
from sqlalchemy import delete, select
from storekit import node, on_gpus, req

from gctl.services import db, defrag, jobs
from gctl.services.errors import ServiceError
from gctl.store.engine import transaction
from gctl.store.models import DaemonLeaseRow, IntentRow, JobRow, now


def _fragmented(store: db.Store) -> list[int]:
    """a1: one 1-GPU job (3 free); a2: three 1-GPU jobs (1 free)."""
    node(store, "a1")
    node(store, "a2")
    ids = jobs.submit(store, [req() for _ in range(4)])
    t = time.time() - 600
    on_gpus(store, ids[0], "a1", [0], since=t)
    for i, job in enumerate(ids[1:]):
        on_gpus(store, job, "a2", [i], since=t + 1 + i)
    return ids


def test_plan_frees_a_whole_node_and_records_nothing_on_a_dry_run(store: db.Store) -> None:
    ids = _fragmented(store)
    plan = defrag.plan(store)
    assert [(m.job_id, m.src, m.dst) for m in plan.moves] == [(ids[0], "a1:0", "a2:3")]
    assert (plan.free_nodes_before, plan.free_nodes_after) == (0, 1)
    assert (plan.largest_free_before, plan.largest_free_after) == (3, 4)
    assert not plan.recorded
    with transaction(store.engine, write=False) as s:
        assert s.scalars(select(IntentRow)).all() == []


@pytest.mark.parametrize("mechanism", ["freeze", None])
def test_a_job_that_cannot_checkpoint_is_never_moved(
    store: db.Store, mechanism: str | None
) -> None:
    node(store, "a1")
    node(store, "a2")
    ids = jobs.submit(store, [req() for _ in range(4)])
    t = time.time() - 600
    on_gpus(store, ids[0], "a1", [0], since=t, mechanism=mechanism)
    for i, job in enumerate(ids[1:]):
        on_gpus(store, job, "a2", [i], since=t + 1 + i)
    assert defrag.plan(store).moves == ()


def test_without_dry_run_the_moves_become_migrate_intents(store: db.Store) -> None:
    ids = _fragmented(store)
    plan = defrag.plan(store, record=True)
    assert plan.recorded
    with transaction(store.engine, write=False) as s:
        got = [(i.kind, i.job_id, i.args["to"]) for i in s.scalars(select(IntentRow))]
    assert got == [("migrate", ids[0], "a2:3")]


def test_nothing_to_do_and_bad_limits(store: db.Store) -> None:
    node(store, "a1")
    assert defrag.plan(store).moves == ()
    with pytest.raises(ServiceError):
        defrag.plan(store, threshold=0)


def test_cli(tmp_path: object, monkeypatch: pytest.MonkeyPatch) -> None:
    db_path = f"{tmp_path}/gctl.db"
    monkeypatch.setenv("GCTL_DB", db_path)
    store = db.connect(db_path)
    db.upgrade(store)
    _fragmented(store)
    code, out, err = run("defrag", "--dry-run")
    assert code == 0, err
    assert "a1:0" in out and "whole nodes free: 0 -> 1" in out and "nothing recorded" in out
    with transaction(store.engine, write=True) as s:  # a live daemon elsewhere holds the store
        s.add(DaemonLeaseRow(id=1, holder="other:1", pid=1, started_at=now(), heartbeat_at=now()))
    code, out, _ = run("defrag", "--json")
    doc = json.loads(out)
    assert code == 0 and doc["recorded"] is True and doc["carried_out"] is None
    with transaction(store.engine, write=True) as s:
        s.execute(delete(DaemonLeaseRow))
        s.execute(delete(IntentRow))
    code, out, _ = run("defrag")  # no daemon: carried out here, and the host is not there
    assert code == 0
    assert "no daemon runs; carried out here:" in out
    assert "migrate of job 1: failed: a1: cannot stop the job there; the move is retried" in out
    with transaction(store.engine, write=False) as s:
        assert [i.status for i in s.scalars(select(IntentRow))] == ["failed"]
        job = s.get(JobRow, 1)
        assert job is not None and job.op is not None and job.op["kind"] == "migrate"
