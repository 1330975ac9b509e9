"""Accounting on SQLite and PostgreSQL: the allocation history, and ``gctl acct``'s figures.

Every GPU a job gives back is kept in ``allocation_history`` (the release
of its allocations, a slice closing its interval); accounting lists the
finished jobs of a window with where they ran, the GPUs they held, their
running time and GPU-hours, per job and per user and month.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import pytest
from sitekit import NoContainerSite
from sqlalchemy import delete, select, update
from storekit import node, on_gpus, req

from gctl.daemon import moves
from gctl.hosts.ssh import Pool
from gctl.identity import Who
from gctl.services import acct, db, jobs
from gctl.services.reader import reading_store
from gctl.store.allocations import close, release
from gctl.store.engine import transaction
from gctl.store.models import AllocationHistoryRow, AllocationRow, JobRow, JobStateRow

HOUR = 3600.0


def _history(store: db.Store, job: int) -> list[tuple[str, int, str, str, float, float]]:
    with transaction(store.engine, write=False) as s:
        rows = s.execute(
            select(
                AllocationHistoryRow.node,
                AllocationHistoryRow.gpu_index,
                AllocationHistoryRow.gpu_model,
                AllocationHistoryRow.mode,
                AllocationHistoryRow.since,
                AllocationHistoryRow.until,
            )
            .where(AllocationHistoryRow.job_id == job)
            .order_by(AllocationHistoryRow.since, AllocationHistoryRow.gpu_index)
        )
        return [tuple(r) for r in rows]  # type: ignore[misc]


def _held_now(store: db.Store, job: int) -> list[float]:
    with transaction(store.engine, write=False) as s:
        return sorted(s.scalars(select(AllocationRow.since).where(AllocationRow.job_id == job)))


def test_release_keeps_each_interval_in_the_history(store: db.Store) -> None:
    node(store, "n1")
    job, other = jobs.submit(store, [req(2), req(1)])
    on_gpus(store, job, "n1", [1, 2], since=100.0, mode="packed")
    on_gpus(store, other, "n1", [3], since=120.0)
    with transaction(store.engine, write=True) as s:
        release(s, job, 250.0)
    assert _history(store, job) == [
        ("n1", 1, "V100", "packed", 100.0, 250.0),
        ("n1", 2, "V100", "packed", 100.0, 250.0),
    ]
    assert _held_now(store, job) == [] and _held_now(store, other) == [120.0]
    with transaction(store.engine, write=True) as s:
        release(s, job, 300.0)  # nothing held: nothing more kept
        release(s, other, 120.0)  # given back as soon as taken: no interval to keep
    assert len(_history(store, job)) == 2 and _history(store, other) == []
    assert _held_now(store, other) == []


def test_close_ends_the_interval_and_keeps_the_gpus(store: db.Store) -> None:
    node(store, "n1")
    [job] = jobs.submit(store, [req(1)])
    on_gpus(store, job, "n1", [0], since=100.0, mode="time-sliced")
    with transaction(store.engine, write=True) as s:
        close(s, job, 160.0)
    assert _held_now(store, job) == [160.0]
    with transaction(store.engine, write=True) as s:
        release(s, job, 200.0)
    assert _history(store, job) == [
        ("n1", 0, "V100", "time-sliced", 100.0, 160.0),
        ("n1", 0, "V100", "time-sliced", 160.0, 200.0),
    ]


def test_a_slice_closes_the_interval_and_a_requeue_releases(
    store: db.Store, tmp_path: Path
) -> None:
    """The checkpoint moves: a slice keeps its GPUs from now on, other moves give them back."""
    node(store, "n1")
    sliced, requeued = jobs.submit(store, [req(1), req(1)])
    on_gpus(store, sliced, "n1", [0], since=100.0, mode="time-sliced")
    on_gpus(store, requeued, "n1", [1], since=100.0)
    with transaction(store.engine, write=True) as s:
        row, other = s.get(JobRow, sliced), s.get(JobRow, requeued)
        assert row is not None and other is not None
        moves.begin(s, row, "slice", [("n1", 0)], mode="time-sliced", reason="turn over")
        moves.begin(s, other, "requeue", (), mode="exclusive", reason="operator")
        at = row.op["at"] if row.op else None
    assert at is not None and at > 100.0
    assert _history(store, sliced) == [("n1", 0, "V100", "time-sliced", 100.0, at)]
    assert _held_now(store, sliced) == [at]
    assert [h[-2:] for h in _history(store, requeued)] == [(100.0, pytest.approx(at, abs=5))]
    assert _held_now(store, requeued) == []
    with Pool() as pool:
        site = NoContainerSite(store, pool, tmp_path / "mirror")
        assert moves.finish(site, sliced).startswith("suspended at its checkpoint")
    with transaction(store.engine, write=False) as s:
        row = s.get(JobRow, sliced)
        assert row is not None and row.state == "SUSPENDED"
    assert _held_now(store, sliced) == [at]  # still its GPUs, for its next turn


def _finish(
    store: db.Store,
    job: int,
    user: str,
    states: list[tuple[str, float]],
    held: list[tuple[str, int, float, float]],
) -> None:
    """Give a job this state history (replacing its own) and allocation history."""
    with transaction(store.engine, write=True) as s:
        row = s.get(JobRow, job)
        assert row is not None
        s.execute(delete(JobStateRow).where(JobStateRow.job_id == job))
        s.add_all(JobStateRow(job_id=job, state=st, at=at, reason="test") for st, at in states)
        s.add_all(
            AllocationHistoryRow(
                job_id=job,
                node=n,
                gpu_index=i,
                gpu_model="V100",
                mode="exclusive",
                since=a,
                until=b,
            )
            for n, i, a, b in held
        )
        row.user = user
        row.state = states[-1][0]
        row.submit_time = states[0][1]
        row.start_time = next((at for st, at in states if st == "RUNNING"), None)
        row.end_time = states[-1][1]
        row.exit_code = 1 if row.state == "FAILED" else 0


@pytest.fixture
def history(store: db.Store) -> dict[str, int]:
    """Jobs of alice and bob with known histories (GPU-hours in the test below)."""
    names = ["plain", "frozen", "grown", "never", "before", "running", "later"]
    ids = dict(
        zip(
            names,
            jobs.submit(store, [req(1), req(2), req(1), req(1), req(2)] + [req(1)] * 2),
            strict=True,
        )
    )
    _finish(
        store,
        ids["plain"],
        "alice",
        [("PENDING", 0.0), ("RUNNING", 100.0), ("COMPLETED", 400.0)],
        [("n1", 0, 100.0, 400.0)],
    )
    _finish(  # two GPUs kept while frozen from 200 to 300 (time slicing)
        store,
        ids["frozen"],
        "alice",
        [
            ("PENDING", 0.0),
            ("RUNNING", 100.0),
            ("SUSPENDED", 200.0),
            ("RUNNING", 300.0),
            ("COMPLETED", 500.0),
        ],
        [("n1", 0, 100.0, 500.0), ("n1", 1, 100.0, 500.0)],
    )
    _finish(  # grown at 200 onto a GPU of another node, restarted at 250
        store,
        ids["grown"],
        "bob",
        [("PENDING", 0.0), ("RUNNING", 100.0), ("RUNNING", 250.0), ("FAILED", 400.0)],
        [("n2", 0, 100.0, 200.0), ("n2", 0, 200.0, 400.0), ("n3", 0, 200.0, 400.0)],
    )
    _finish(store, ids["never"], "bob", [("PENDING", 0.0), ("CANCELLED", 50.0)], [])
    _finish(  # ended before the allocation history was kept
        store,
        ids["before"],
        "bob",
        [("PENDING", 0.0), ("RUNNING", 100.0), ("COMPLETED", 280.0)],
        [],
    )
    _finish(store, ids["running"], "alice", [("PENDING", 0.0), ("RUNNING", 100.0)], [])
    _finish(
        store,
        ids["later"],
        "alice",
        [("PENDING", 0.0), ("RUNNING", 100.0), ("COMPLETED", 5000.0)],
        [("n1", 0, 100.0, 5000.0)],
    )
    return ids


def _listed(store: db.Store, **kw: object) -> list[acct.Usage]:
    with reading_store(store) as reader:
        return acct.finished(reader, **{"start": 0.0, "end": 1000.0, **kw})  # type: ignore[arg-type]


def test_acct_lists_where_finished_jobs_ran_and_their_gpu_hours(
    store: db.Store, history: dict[str, int]
) -> None:
    got = {r.id: r for r in _listed(store)}
    ids = history
    by_end = [ids[n] for n in ("never", "before", "plain", "grown", "frozen")]
    assert list(got) == by_end  # by end time; the running job and the later one are not listed
    figures = {
        name: (r.user, r.state, r.nodes, r.gpus, r.elapsed, r.gpu_hours * HOUR)
        for name, r in ((n, got[ids[n]]) for n in ids if ids[n] in got)
    }
    assert figures == {
        "plain": ("alice", "COMPLETED", "n1", 1, 300.0, pytest.approx(300.0)),
        "frozen": ("alice", "COMPLETED", "n1", 2, 300.0, pytest.approx(600.0)),
        "grown": ("bob", "FAILED", "n[2-3]", 2, 300.0, pytest.approx(100.0 + 2 * 200.0)),
        "never": ("bob", "CANCELLED", "", 0, 0.0, 0.0),
        "before": ("bob", "COMPLETED", "", 2, 180.0, pytest.approx(2 * 180.0)),
    }
    plain = got[ids["plain"]]
    assert (plain.submit_time, plain.start_time, plain.end_time, plain.exit_code) == (
        0.0,
        100.0,
        400.0,
        0,
    )
    assert got[ids["grown"]].exit_code == 1
    doc = plain.to_dict()
    assert doc["state_code"] == "CD" and doc["elapsed_s"] == 300.0
    assert doc["end_time"].isoformat() == "1970-01-01T00:06:40+00:00"


def test_acct_filters_by_user_window_and_state(store: db.Store, history: dict[str, int]) -> None:
    ids = history
    assert {r.id for r in _listed(store, users={"alice"})} == {ids["plain"], ids["frozen"]}
    assert [r.id for r in _listed(store, states={"CANCELLED", "FAILED"})] == [
        ids["never"],
        ids["grown"],
    ]
    # [start, end): a job that ended at the end is left for the next window
    assert [r.id for r in _listed(store, start=280.0, end=400.0)] == [ids["before"]]
    assert [r.id for r in _listed(store, start=400.0, end=5001.0, users={"alice"})] == [
        ids["plain"],
        ids["frozen"],
        ids["later"],
    ]
    assert _listed(store, users={"carol"}) == []


def test_summary_totals_per_user_and_utc_month_of_the_end(
    store: db.Store, history: dict[str, int]
) -> None:
    rows = _listed(store)
    october = 1790812800.0  # 2026-10-01T00:00:00Z
    moved = [
        r._replace(end_time=october - 1 if r.id == history["frozen"] else october + 1) for r in rows
    ]
    totals = [(t.user, t.month, t.jobs, round(t.gpu_hours * HOUR)) for t in acct.summary(moved)]
    assert totals == [
        ("alice", "2026-09", 1, 600),
        ("alice", "2026-10", 1, 300),
        ("bob", "2026-10", 3, 500 + 360),
    ]
    assert acct.summary(moved)[0].to_dict() == {
        "user": "alice",
        "month": "2026-09",
        "jobs": 1,
        "gpu_hours": pytest.approx(600 / HOUR),
    }


def test_whose_jobs_are_listed_as_sacct_lists_them() -> None:
    alice = Who("alice", 1000, 1000, False, "alice")
    operator = dataclasses.replace(alice, operator=True)
    assert acct.whose(alice, None, all_users=False) == {"alice"}
    assert acct.whose(alice, None, all_users=True) is None
    assert acct.whose(alice, {"bob"}, all_users=False) == {"bob"}
    assert acct.whose(operator, None, all_users=False) is None


def test_the_caller_on_a_sqlite_store_is_an_operator(store: db.Store) -> None:
    with reading_store(store) as reader:
        me = acct.caller(reader)
    sqlite = store.engine.dialect.name == "sqlite"
    assert me.operator or not sqlite


def test_finished_states_refuses_states_of_unfinished_jobs() -> None:
    assert acct.finished_states("cd,F") == {"COMPLETED", "FAILED"}
    assert acct.finished_states("all") == {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"}
    with pytest.raises(acct.ServiceError, match="RUNNING is not a finished state"):
        acct.finished_states("CD,R")


def test_show_job_of_a_finished_job_says_where_it_ran(
    store: db.Store, history: dict[str, int]
) -> None:
    for name in ("n1", "n2", "n3"):
        node(store, name)
    grown = jobs.show_job(store, history["grown"])
    assert (grown.view.gpus, grown.view.nodes) == (2, ("n2", "n3"))
    assert grown.allocations == (("n2", 0, "exclusive"), ("n3", 0, "exclusive"))
    never = jobs.show_job(store, history["never"])
    assert (never.view.gpus, never.view.nodes, never.allocations) == (1, (), ())
    # a running job is where its allocations say, as before
    on_gpus(store, history["running"], "n1", [3], since=time.time())
    running = jobs.show_job(store, history["running"])
    assert (running.view.gpus, running.view.nodes) == (1, ("n1",))


def _kept(store: db.Store, job: int) -> tuple[float | None, float | None, int | None, str | None]:
    with transaction(store.engine, write=False) as s:
        row = s.get(JobRow, job)
        assert row is not None
        return row.run_seconds, row.gpu_seconds, row.gpus_held, row.nodes_held


def test_a_job_ended_through_set_state_keeps_its_totals(
    store: db.Store, history: dict[str, int]
) -> None:
    """As the daemon ends a job (GPUs released, then the state), its totals are stored.

    They are those worked out from its histories, which listing still does
    for the jobs finished before (the ``history`` fixture's, listed beside).
    """
    for name in ("n1", "n2"):
        node(store, name)
    grown, cancelled, running = jobs.submit(store, [req(1), req(1), req(1)])
    t = time.time()
    on_gpus(store, grown, "n1", [0], since=t - 300)
    with transaction(store.engine, write=True) as s:  # frozen a while: GPU kept, not charged
        s.add(JobStateRow(job_id=grown, state="SUSPENDED", at=t - 250, reason="test"))
        s.add(JobStateRow(job_id=grown, state="RUNNING", at=t - 200, reason="test"))
    on_gpus(store, grown, "n2", [1], since=t - 100)  # grown onto n2, restarted
    on_gpus(store, running, "n1", [2], since=t - 300)
    assert _kept(store, grown) == (None, None, None, None)
    with transaction(store.engine, write=True) as s:
        row = s.get(JobRow, grown)
        assert row is not None
        release(s, grown, time.time())
        jobs.set_state(s, row, "COMPLETED", "exit 0")
    jobs.act(store, cancelled, "cancel")  # still pending: cancelled at once, nothing used
    run_s, gpu_s, gpus, nodes = _kept(store, grown)
    assert run_s == pytest.approx(250.0, abs=5) and gpu_s == pytest.approx(350.0, abs=10)
    assert (gpus, nodes) == (2, "n[1-2]")
    assert _kept(store, cancelled) == (0.0, 0.0, 0, "")
    assert _kept(store, running) == (None, None, None, None)

    window = {"start": 0.0, "end": time.time() + 1}
    kept = _listed(store, **window)
    with transaction(store.engine, write=True) as s:  # as if they had finished before
        unkept = dict.fromkeys(("run_seconds", "gpu_seconds", "gpus_held", "nodes_held"))
        s.execute(update(JobRow).values(unkept))
    worked_out = _listed(store, **window)
    assert kept == worked_out
    listed = {r.id: (r.nodes, r.gpus, r.elapsed, r.gpu_hours * HOUR) for r in kept}
    assert listed[grown] == ("n[1-2]", 2, run_s, gpu_s)
    assert listed[cancelled] == ("", 0, 0.0, 0.0)
    assert listed[history["frozen"]] == ("n1", 2, 300.0, pytest.approx(600.0))
