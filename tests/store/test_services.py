"""The service layer on both backends: what one command writes, the next one reads back."""

from __future__ import annotations

import pytest
from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError

from gctl.services import db, events, jobs, nodes, queue, specs
from gctl.services.errors import NotFound, ServiceError
from gctl.store.engine import transaction
from gctl.store.models import AllocationRow, GpuRow, IntentRow, JobRow, JobStateRow

FP = "SHA256:" + "A" * 43


def _req(gpus: int = 1, **kw: object) -> specs.JobRequest:
    return specs.build(image="train:1", command=["python", "t.py"], gpus=gpus, **kw)  # type: ignore[arg-type]


def test_nodes_states_and_reasons(store: db.Store, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GCTL_USER", "ops")
    nodes.add_node(store, "a1", "10.0.0.1", emulate_gpus="4xA100-80GB", host_key_fingerprint=FP)
    nodes.add_node(store, "a2", "10.0.0.2", emulate_gpus="2xV100-16GB", host_key_fingerprint=FP)
    with pytest.raises(ServiceError, match="already exists"):
        nodes.add_node(store, "a1", "elsewhere", host_key_fingerprint=FP)
    views = nodes.list_nodes(store)
    assert [(v.name, v.state, v.gpus_total, v.gpu_kinds) for v in views] == [
        ("a1", "idle", 4, "4xA100-80GB"),
        ("a2", "idle", 2, "2xV100-16GB"),
    ]
    job = jobs.submit(store, [_req(2)])[0]
    with transaction(store.engine, write=True) as s:  # as the daemon will place it
        gpus = s.scalars(select(GpuRow).join(GpuRow.node).where(GpuRow.index < 2)).all()
        a1 = [g for g in gpus if g.node.name == "a1"]
        for g in a1:
            s.add(AllocationRow(job_id=job, gpu_id=g.id, mode="exclusive"))
    listed = queue.queue(store, nodes={"a1"})  # Core statements over the four tables
    assert (listed.id, listed.nodes, listed.held) == ([job], [("a1",)], [False])
    assert queue.queue(store, nodes={"a2"}).id == []
    v = nodes.show_node(store, "a1")
    assert (v.state, v.gpus_used, v.height, v.affinity) == ("mix", 2, 0.5, 2)
    assert [g.jobs for g in v.gpus] == [(job,), (job,), (), ()]
    v = nodes.set_admin_state(store, "a1", "drain", "bad fan")
    assert (v.state, v.reason, v.reason_user) == ("drng", "bad fan", "ops")
    assert nodes.set_admin_state(store, "a2", "down", "psu").state == "down"
    assert nodes.set_admin_state(store, "a2", "resume", None).reason is None
    with pytest.raises(ServiceError, match="still runs jobs"):
        nodes.remove_node(store, "a1")
    nodes.remove_node(store, "a2")
    with pytest.raises(NotFound):
        nodes.show_node(store, "a2")
    with transaction(store.engine, write=False) as s:  # its GPUs went with it
        assert s.scalar(select(func.count()).select_from(GpuRow)) == 4
    kinds = [e.kind for e in events.list_events(store, node="a1")]
    assert kinds == ["node.add", "node.drain"]


def test_submit_queue_filters_and_actions(store: db.Store, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GCTL_USER", "ann")
    a, b = jobs.submit(store, [_req(1), _req(2, priority="high", env=["X=a b"])])
    monkeypatch.setenv("GCTL_USER", "bob")
    (c,) = jobs.submit(store, [_req(4)])
    assert queue.queue(store, users={"ann"}).id == [a, b]
    assert jobs.act(store, a, "cancel").done
    assert queue.queue(store).id == [b, c]
    assert queue.queue(store, states={"CANCELLED"}).id == [a]
    assert jobs.act(store, b, "hold").done
    with pytest.raises(ServiceError, match="already finished"):
        jobs.act(store, a, "hold")
    with pytest.raises(ServiceError, match="not held"):
        jobs.act(store, c, "release")
    with transaction(store.engine, write=True) as s:
        row = s.get(JobRow, c)
        assert row is not None
        jobs.set_state(s, row, "RUNNING", "placed")
    with pytest.raises(ServiceError, match="only pending jobs"):
        jobs.act(store, c, "hold")
    result = jobs.act(store, c, "requeue", hold=True)
    assert not result.done and "daemon" in result.message
    detail = jobs.show_job(store, b)
    assert detail.spec["env"] == {"X": "a b"} and detail.view.held
    with transaction(store.engine, write=False) as s:
        intents = s.execute(select(IntentRow.kind, IntentRow.args, IntentRow.user)).all()
        history = s.scalars(select(JobStateRow.state).where(JobStateRow.job_id == c)).all()
    assert [tuple(i) for i in intents] == [("requeue", {"hold": True}, "bob")]
    assert list(history) == ["PENDING", "RUNNING"]
    with pytest.raises(NotFound):
        jobs.show_job(store, 12345)


def test_releasing_a_job_an_operator_suspended_puts_it_back_in_the_queue(store: db.Store) -> None:
    """Suspended at a checkpoint by an operator, it holds no GPU: released, it waits to restart."""
    (a,) = jobs.submit(store, [_req(1)])
    with transaction(store.engine, write=True) as s:
        row = s.get(JobRow, a)
        assert row is not None
        row.held = True  # as the daemon leaves a job 'gctl suspend' stopped
        jobs.set_state(s, row, "SUSPENDED", "suspended by ann")
    assert jobs.act(store, a, "release").done
    with transaction(store.engine, write=False) as s:
        row = s.get(JobRow, a)
        assert row is not None and not row.held
        assert (row.state, row.reason) == (
            "PENDING",
            "released by root; restarts from its checkpoint",
        )


def test_a_failing_transaction_writes_nothing_and_foreign_keys_hold(store: db.Store) -> None:
    jobs.submit(store, [_req(1)])
    with transaction(store.engine, write=False) as s:
        before = s.scalar(select(func.count()).select_from(JobRow))
    with (
        pytest.raises(IntegrityError, match=r"(?i)foreign key"),
        transaction(store.engine, write=True) as s,
    ):
        jobs.set_state(s, s.get(JobRow, 1), "RUNNING", "x")  # type: ignore[arg-type]
        s.add(GpuRow(node_id=999, index=0, model="x", memory_mb=1))
    with transaction(store.engine, write=False) as s:
        assert s.scalar(select(func.count()).select_from(JobRow)) == before
        assert s.get(JobRow, 1).state == "PENDING"  # type: ignore[union-attr]


def test_a_driver_error_while_reading_is_one_service_error(store: db.Store) -> None:
    from gctl.services.reader import reading_store

    failed = pytest.raises(ServiceError, match=r"^cannot read database .*no_such_table")
    with failed, reading_store(store) as reader:
        reader.rows("SELECT * FROM no_such_table")
