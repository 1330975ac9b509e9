"""What the daemon's Applier records for batched decisions, with hosts that do nothing.

The batched decisions (Place, Queue, Suspend, Unpack) are written in bulk;
these tests pin the rows that result, on SQLite and PostgreSQL: job state,
reason, first start and mechanism, allocations and their sharing modes, the
state history and the events, and what a host's refusal leaves.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import pytest
from sitekit import NoContainerSite
from sqlalchemy import delete, select, update
from sqlalchemy.orm import Session
from storekit import node, on_gpus, req

from gctl.core.decisions import Decision, Place, Queue, Resume, Suspend, Unpack
from gctl.core.model import GpuRef, ShareMode
from gctl.core.policies.gandiva import GandivaPolicy
from gctl.daemon import DAEMON_USER, apply, lanes, passes
from gctl.daemon.apply import Applied, Applier
from gctl.daemon.inflight import Inflight
from gctl.daemon.site import Launch
from gctl.hosts.ssh import HostError, Pool
from gctl.services import db, events, jobs, why
from gctl.store.engine import acting_as, transaction
from gctl.store.models import AllocationRow, EventRow, GpuRow, JobRow, JobStateRow, NodeRow
from gctl.store.snapshot import read


class QuietSite(NoContainerSite):
    """A site whose hosts start nothing and hold no containers; ``refuse`` jobs fail to start."""

    def __init__(self, store: db.Store, pool: Pool, mirror: Path, refuse: Iterable[int] = ()):
        super().__init__(store, pool, mirror)
        self.refuse = set(refuse)
        self.started: list[int] = []

    def launch(self, job: Launch, refs: Iterable[GpuRef], nodes: Mapping[str, NodeRow]) -> None:
        """Record the start, or refuse it for a job in ``refuse``."""
        if job.id in self.refuse:
            raise HostError("a2", f"no room for job {job.id}")
        self.started.append(job.id)


def _apply(
    store: db.Store, tmp_path: Path, decide: list[Decision], refuse: Iterable[int] = ()
) -> Applied:
    """Apply ``decide`` on a fresh snapshot, then record the sharing modes (as the daemon does)."""
    snap = read(store.engine, now=time.time())
    inflight = Inflight()
    daemons = dataclasses.replace(store, engine=acting_as(store.engine, DAEMON_USER))
    with Pool() as pool:
        site = QuietSite(daemons, pool, tmp_path / "mirror", refuse)
        applier = Applier(site, snap, lambda kind, seconds: None, inflight)
        applied = applier.apply(decide)
        applier.sync_modes()
        _settle(inflight)
    inflight.close()
    return applied


def _settle(inflight: Inflight) -> None:
    """Let the background work end and record itself, and the work its records start."""
    for _ in range(3):
        inflight.wait(30)  # moves and thaws run in the background
        inflight.collect()
    assert inflight.pending() == []


def _history(s: Session, job: int) -> list[tuple[str, str | None]]:
    q = select(JobStateRow.state, JobStateRow.reason).where(JobStateRow.job_id == job)
    return [(st, why) for st, why in s.execute(q.order_by(JobStateRow.id))]


def _events(s: Session, job: int) -> list[tuple[str, str, dict[str, object]]]:
    q = select(EventRow.kind, EventRow.message, EventRow.data).where(EventRow.job_id == job)
    return [(k, m, d) for k, m, d in s.execute(q.order_by(EventRow.id)) if k != "job.submit"]


def _gpus(s: Session, job: int) -> list[tuple[str, int, str]]:
    q = (
        select(NodeRow.name, GpuRow.index, AllocationRow.mode)
        .join(GpuRow, GpuRow.node_id == NodeRow.id)
        .join(AllocationRow, AllocationRow.gpu_id == GpuRow.id)
        .where(AllocationRow.job_id == job)
    )
    return sorted((n, i, m) for n, i, m in s.execute(q))


def test_batched_decisions_write_state_history_allocations_and_events(
    store: db.Store, tmp_path: Path
) -> None:
    node(store, "a1")
    node(store, "a2")
    ids = jobs.submit(store, [req(1)] * 8 + [req(2)])
    a, b, c, d, e, f, g, h, two = ids
    on_gpus(store, h, "a1", [3], since=100.0, state="SUSPENDED", mechanism="checkpoint")
    with transaction(store.engine, write=True) as s:
        row = s.get(JobRow, g)
        assert row is not None
        row.start_time = 50.0  # started before, requeued: its first start is kept
        row.mechanism = "checkpoint"
    decide: list[Decision] = [
        Place(str(a), (("a1", 0),), ShareMode.EXCLUSIVE, "free GPUs"),
        Place(str(b), (("a1", 1),), ShareMode.EXCLUSIVE, "free GPUs"),
        Place(str(c), (("a2", 0),), ShareMode.EXCLUSIVE, "refused"),
        Queue(str(d), "waiting for 1 GPU"),
        Suspend(str(b), "time slice over"),
        Place(str(g), (("a1", 2),), ShareMode.EXCLUSIVE, "free GPUs"),
        Unpack(str(h), "pack ended"),
        Place(str(two), (("a2", 2), ("a2", 1)), ShareMode.EXCLUSIVE, "two GPUs"),
        Queue(str(e), "waiting for 1 GPU"),
    ]
    applied = _apply(store, tmp_path, decide, refuse=[c])
    assert [x.job_id for x in applied.done] == [str(j) for j in (a, b, d, b, g, h, two, e)]
    assert [(x.job_id, why) for x, why in applied.failed] == [(str(c), f"a2: no room for job {c}")]
    with transaction(store.engine, write=False) as s:
        rows = {r.id: r for r in s.scalars(select(JobRow))}
        assert {j: (rows[j].state, rows[j].reason, rows[j].mechanism) for j in ids} == {
            a: ("RUNNING", "free GPUs", "freeze"),
            b: ("SUSPENDED", "time slice over", "freeze"),
            c: (
                "PENDING",
                f"start failed (1 in a row): a2: no room for job {c}; tried again in 5s",
                None,
            ),
            d: ("PENDING", "waiting for 1 GPU", None),
            e: ("PENDING", "waiting for 1 GPU", None),
            f: ("PENDING", None, None),
            g: ("RUNNING", "free GPUs", "checkpoint"),
            h: ("SUSPENDED", "pack ended", "checkpoint"),
            two: ("RUNNING", "two GPUs", "freeze"),
        }
        assert rows[g].start_time == 50.0
        assert rows[h].start_time == 100.0
        placed_at = rows[a].start_time
        assert placed_at is not None and placed_at > 1e9
        assert rows[b].start_time == placed_at and rows[two].start_time == placed_at
        assert rows[c].start_time is None and rows[d].start_time is None
        assert rows[c].start_failures == 1 and rows[c].retry_at is not None
        assert rows[c].retry_at - time.time() > 3  # backed off: not placed on the next pass
        assert _history(s, a) == [("PENDING", "submitted"), ("RUNNING", "free GPUs")]
        assert _history(s, b) == [
            ("PENDING", "submitted"),
            ("RUNNING", "free GPUs"),
            ("SUSPENDED", "time slice over"),
        ]
        assert _history(s, c) == _history(s, d) == [("PENDING", "submitted")]
        assert _history(s, h)[-1] == ("SUSPENDED", "pack ended")
        times = s.scalars(select(JobStateRow.at).where(JobStateRow.state != "PENDING")).all()
        assert len(set(times) - {100.0}) == 1  # one batch, one time
        assert _gpus(s, a) == [("a1", 0, "exclusive")]
        assert _gpus(s, b) == [("a1", 1, "exclusive")]
        assert _gpus(s, c) == [] and _gpus(s, d) == []
        assert _gpus(s, two) == [("a2", 1, "exclusive"), ("a2", 2, "exclusive")]
        assert _events(s, a) == [("job.place", f"job {a} on a1:0: free GPUs", {"to": "a1:0"})]
        assert _events(s, b) == [
            ("job.place", f"job {b} on a1:1: free GPUs", {"to": "a1:1"}),
            (
                "job.suspend",
                f"job {b} suspended (freeze): time slice over",
                {"mechanism": "freeze"},
            ),
        ]
        assert _events(s, c) == [("job.error", f"job {c}: a2: no room for job {c}", {})]
        assert _events(s, d) == []
        assert _events(s, h) == [
            ("job.unpack", f"job {h} suspended (freeze): pack ended", {"mechanism": "freeze"})
        ]
        assert _events(s, two) == [
            ("job.place", f"job {two} on a2:1,2: two GPUs", {"to": "a2:1,2"})
        ]
        users = {kind: user for kind, user in s.execute(select(EventRow.kind, EventRow.user))}
        assert users.pop("job.submit") == users.pop("node.add") == events.current_user()
        assert set(users.values()) == {DAEMON_USER}  # decisions and refusals are the daemon's


def test_a_policy_pass_over_many_batches_records_every_decision(
    store: db.Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """More jobs than GPUs, several batches: all recorded, sharing modes as the core has them."""
    monkeypatch.setattr(apply, "BATCH", 3)
    node(store, "a1")
    node(store, "a2")
    ids = jobs.submit(store, [req(1)] * 10 + [req(2)] * 2)
    snap = read(store.engine, now=time.time())
    decide = GandivaPolicy().schedule(snap.state, time.time())
    with Pool() as pool:
        applier = Applier(QuietSite(store, pool, tmp_path), snap, lambda k, s: None, Inflight())
        applied = applier.apply(decide)
        applier.sync_modes()
    assert applied.failed == [] and applied.done == decide
    queued = {int(x.job_id): x.reason for x in decide if isinstance(x, Queue)}
    assert sum(isinstance(x, Place) for x in decide) == 10 and queued  # 2 GPUs time-sliced
    state = snap.state
    with transaction(store.engine, write=False) as s:
        for j in ids:
            js = state.jobs[str(j)]
            row = s.get(JobRow, j)
            assert row is not None
            if not js.gpus:
                assert (row.state, row.reason, _gpus(s, j)) == ("PENDING", queued.get(j), [])
                continue
            want = "RUNNING" if js.status.name == "RUNNING" else "SUSPENDED"
            assert row.state == want, (j, js.status)
            mode = state.mode_of(str(j)).value
            assert _gpus(s, j) == sorted((n, i, mode) for n, i in js.gpus)
            kinds = [k for k, _, _ in _events(s, j)]
            assert kinds == ["job.place"] + (["job.suspend"] if want == "SUSPENDED" else [])
        assert {m for m in s.scalars(select(AllocationRow.mode))} >= {"time-sliced"}


def test_decisions_on_jobs_removed_since_the_snapshot_are_refused(
    store: db.Store, tmp_path: Path
) -> None:
    """A job gone from the store is refused whatever the decision; the others are recorded."""
    node(store, "a1")
    a, b, c, d = jobs.submit(store, [req(1)] * 4)
    on_gpus(store, d, "a1", [3], since=100.0)
    snap = read(store.engine, now=time.time())
    with transaction(store.engine, write=True) as s:
        s.execute(delete(JobRow).where(JobRow.id.in_([b, c, d])))
    decide: list[Decision] = [
        Place(str(a), (("a1", 0),), ShareMode.EXCLUSIVE, "free GPUs"),
        Place(str(b), (("a1", 1),), ShareMode.EXCLUSIVE, "free GPUs"),
        Queue(str(c), "waiting for 1 GPU"),
        Suspend(str(d), "time slice over"),
    ]
    with Pool() as pool:
        site = QuietSite(store, pool, tmp_path / "mirror")
        applied = Applier(site, snap, lambda kind, seconds: None, Inflight()).apply(decide)
    assert applied.done == decide[:1] and site.started == [a]
    gone = [(x.job_id, why) for x, why in applied.failed]
    assert gone == [(str(j), f"-: job {j} removed from the store") for j in (b, c, d)]
    with transaction(store.engine, write=False) as s:
        assert s.scalars(select(JobRow.id)).all() == [a]
        assert _gpus(s, a) == [("a1", 0, "exclusive")]


def test_a_suspend_by_checkpoint_keeps_the_gpus_and_records_how(
    store: db.Store, tmp_path: Path
) -> None:
    """A time-slice suspend that must free GPU memory is a checkpoint move that keeps the job's
    place: SUSPENDED on the same GPUs, next attempt, ``job.suspend`` saying ``checkpoint``."""
    node(store, "a1")
    a, b = jobs.submit(store, [req(1)] * 2)
    on_gpus(store, a, "a1", [0], since=100.0, mode="time-sliced")
    on_gpus(store, b, "a1", [0], since=100.0, mode="time-sliced", state="SUSPENDED")
    turn_over = "quantum 300s used; 1 job(s) share its GPUs"
    decide: list[Decision] = [
        Suspend(str(a), turn_over, checkpoint=True),
        Resume(str(b), "round-robin turn on a1"),
    ]
    applied = _apply(store, tmp_path, decide)
    # b's turn comes once a has checkpointed and left the GPU's memory, in the same apply
    assert applied.done == decide and applied.deferred == [] and applied.failed == []
    with transaction(store.engine, write=False) as s:
        row = s.get(JobRow, a)
        assert row is not None
        assert (row.state, row.op, row.attempt, row.held) == ("SUSPENDED", None, 1, False)
        assert _gpus(s, a) == [("a1", 0, "time-sliced")] == _gpus(s, b)
        kind, message, data = _events(s, a)[-1]
        assert kind == "job.suspend" and data["mechanism"] == "checkpoint"
        assert message == f"job {a} suspended (checkpoint): {turn_over}"
        other = s.get(JobRow, b)
        assert other is not None and (other.state, other.attempt) == ("RUNNING", 1)
        assert _events(s, b)[-1][1] == f"job {b} resumed: round-robin turn on a1"
    assert why.explain(store, a).suspended_by == "checkpoint"


def _slice_for_new_job(store: db.Store) -> tuple[int, int, list[Decision]]:
    """Job a runs on a1:0, b waits; a is suspended by checkpoint and b handed its GPU."""
    node(store, "a1")
    a, b = jobs.submit(store, [req(1)] * 2)
    on_gpus(store, a, "a1", [0], since=100.0)
    decide: list[Decision] = [
        Suspend(str(a), f"time slice handed to new job {b}", checkpoint=True),
        Place(str(b), (("a1", 0),), ShareMode.TIMESLICED, "time-slicing with 1 job(s) on a1"),
    ]
    return a, b, decide


def test_a_new_job_takes_its_turn_once_the_suspend_by_checkpoint_has_left_the_gpu(
    store: db.Store, tmp_path: Path
) -> None:
    """Not deferred to a later pass: that one saw the set with no runner and handed the turn
    back to the job just suspended (CI run of d4642a2: suspended and restarted 7 times)."""
    a, b, decide = _slice_for_new_job(store)
    applied = _apply(store, tmp_path, decide)
    assert applied.done == decide and applied.deferred == [] and applied.failed == []
    with transaction(store.engine, write=False) as s:
        rows = {r.id: r for r in s.scalars(select(JobRow))}
        assert (rows[a].state, rows[a].op, rows[a].attempt) == ("SUSPENDED", None, 1)
        assert rows[b].state == "RUNNING"
        assert _gpus(s, a) == [("a1", 0, "time-sliced")] == _gpus(s, b)
        kinds = [k for k, _, _ in _events(s, b)]
        assert kinds == ["job.place"]


def test_a_turn_is_not_started_for_a_job_cancelled_while_the_suspend_ran(
    store: db.Store, tmp_path: Path
) -> None:
    a, b, decide = _slice_for_new_job(store)
    snap = read(store.engine, now=time.time())
    inflight = Inflight()
    with Pool() as pool:
        site = QuietSite(store, pool, tmp_path / "mirror")
        applied = Applier(site, snap, lambda kind, seconds: None, inflight).apply(decide)
        assert applied.done == decide
        assert {w.what: w.jobs for w in inflight.pending()} == {f"suspend of job {a}": {a, b}}
        jobs.act(store, b, "cancel")
        _settle(inflight)
    inflight.close()
    assert site.started == []
    with transaction(store.engine, write=False) as s:
        state = s.scalars(select(JobRow.state).where(JobRow.id == b)).one()
        assert state == "CANCELLED" and _gpus(s, b) == []


def test_a_placement_onto_a_shared_set_marks_the_set_shared_in_the_same_write(
    store: db.Store, tmp_path: Path
) -> None:
    """Before the pass's mode sync, as a daemon killed right after the batch's write leaves it."""
    node(store, "a1")
    a, b = jobs.submit(store, [req(1)] * 2)
    on_gpus(store, a, "a1", [0], since=100.0)
    snap = read(store.engine, now=time.time())
    decide: list[Decision] = [
        Suspend(str(a), f"time slice handed to new job {b}"),
        Place(str(b), (("a1", 0),), ShareMode.TIMESLICED, "time-slicing with 1 job(s) on a1"),
    ]
    with Pool() as pool:
        site = QuietSite(store, pool, tmp_path / "mirror")
        Applier(site, snap, lambda kind, seconds: None, Inflight()).apply(decide)  # no sync_modes
    with transaction(store.engine, write=False) as s:
        assert _gpus(s, a) == [("a1", 0, "time-sliced")] == _gpus(s, b)


class SlowSite(QuietSite):
    """A site whose start of ``slow`` jobs takes a while: other starts are recorded first."""

    def __init__(self, store: db.Store, pool: Pool, mirror: Path, slow: Iterable[int]):
        super().__init__(store, pool, mirror)
        self.slow = set(slow)

    def launch(self, job: Launch, refs: Iterable[GpuRef], nodes: Mapping[str, NodeRow]) -> None:
        """Start nothing, slowly for a ``slow`` job."""
        if job.id in self.slow:
            time.sleep(3 * apply.RECORD_EVERY)
        super().launch(job, refs, nodes)


@contextmanager
def _slow(
    store: db.Store, tmp_path: Path, slow: Iterable[int]
) -> Iterator[tuple[SlowSite, Inflight]]:
    """A :class:`SlowSite` slow to start the jobs ``slow``; the work in flight, closed after."""
    inflight = Inflight()
    try:
        with Pool() as pool:
            yield SlowSite(store, pool, tmp_path / "mirror", slow=slow), inflight
    finally:
        inflight.close()


def test_placements_recorded_out_of_order_never_leave_a_shared_gpu_exclusive(
    store: db.Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pass's starts are recorded as they finish, in any order (found by bench/chaos.py)."""
    monkeypatch.setattr(apply, "APPLY_WITHIN", 10.0)  # the slow start is recorded in the pass
    node(store, "a1")
    a, b = jobs.submit(store, [req(1)] * 2)
    snap = read(store.engine, now=time.time())
    decide: list[Decision] = [
        Place(str(a), (("a1", 0),), ShareMode.EXCLUSIVE, "free GPUs"),
        Place(str(b), (("a1", 0),), ShareMode.TIMESLICED, "time-slicing with 1 job(s) on a1"),
    ]
    with Pool() as pool:
        site = SlowSite(store, pool, tmp_path / "mirror", slow=[a])
        applied = Applier(site, snap, lambda kind, seconds: None, Inflight()).apply(decide)
    assert applied.done == decide[::-1]  # b was recorded first
    with transaction(store.engine, write=False) as s:  # no sync_modes: as a kill -9 leaves it
        assert _gpus(s, a) == [("a1", 0, "time-sliced")] == _gpus(s, b)


def _two_on_a1(store: db.Store) -> tuple[int, int, list[Decision]]:
    """Two jobs, and their placements on GPUs 0 and 1 of a new node a1."""
    node(store, "a1")
    a, b = jobs.submit(store, [req(1)] * 2)
    decide: list[Decision] = [
        Place(str(a), (("a1", 0),), ShareMode.EXCLUSIVE, "free GPUs"),
        Place(str(b), (("a1", 1),), ShareMode.EXCLUSIVE, "free GPUs"),
    ]
    return a, b, decide


def test_a_start_still_running_when_the_pass_moves_on_is_recorded_once_it_ends(
    store: db.Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The pass waits APPLY_WITHIN for its starts, so a slow host does not hold up the tick."""
    monkeypatch.setattr(apply, "APPLY_WITHIN", 0.1)
    a, _, decide = _two_on_a1(store)
    snap = read(store.engine, now=time.time())
    with _slow(store, tmp_path, [a]) as (site, inflight):
        applied = Applier(site, snap, lambda kind, seconds: None, inflight).apply(decide)
        assert applied.done == decide[1:]  # b recorded by the pass; a still starting
        assert inflight.busy_jobs == {a} and inflight.busy_gpus == {("a1", 0)}
        with transaction(store.engine, write=False) as s:
            assert _gpus(s, a) == []  # never claimed before its container started
        inflight.wait(10)
        inflight.collect()
        with transaction(store.engine, write=False) as s:
            assert _gpus(s, a) == [("a1", 0, "exclusive")]
            assert s.get(JobRow, a).state == "RUNNING"


def _five_on_one_node(store: db.Store) -> tuple[list[int], list[Decision]]:
    """Five jobs placed on the 8 GPUs of a1: the first and the fifth share a lane (PER_NODES 4)."""
    node(store, "a1", "8xV100-16GB")
    ids = jobs.submit(store, [req(1)] * 5)
    decide: list[Decision] = [
        Place(str(j), (("a1", i),), ShareMode.EXCLUSIVE, "free GPUs") for i, j in enumerate(ids)
    ]
    return ids, decide


def test_a_start_queued_behind_a_slow_one_goes_on_after_the_pass_and_is_recorded(
    store: db.Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The pass moves on before the fifth start begins; it is not dropped, but begun later."""
    monkeypatch.setattr(apply, "APPLY_WITHIN", 0.1)
    ids, decide = _five_on_one_node(store)
    snap = read(store.engine, now=time.time())
    with _slow(store, tmp_path, [ids[0]]) as (site, inflight):
        applied = Applier(site, snap, lambda kind, seconds: None, inflight).apply(decide)
        assert applied.done == decide[1:4] and applied.deferred == []
        assert inflight.busy_jobs == {ids[0], ids[4]}
        assert inflight.busy_gpus == {("a1", 0), ("a1", 4)}
        inflight.wait(10)
        inflight.collect()
        assert site.started == [*ids[1:4], ids[0], ids[4]]
        with transaction(store.engine, write=False) as s:
            for i, job in enumerate(ids):
                assert _gpus(s, job) == [("a1", i, "exclusive")]
                assert s.get(JobRow, job).state == "RUNNING"


def _past_begin_within(
    store: db.Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, not_answering: str
) -> tuple[list[int], list[int]]:
    """Five starts on a1, the first slow, carried out with ``not_answering`` not answering.

    The lanes are looked at past BEGIN_WITHIN; the jobs, and those started, once all ended.
    """
    monkeypatch.setattr(apply, "APPLY_WITHIN", 0.1)
    monkeypatch.setattr(apply, "BEGIN_WITHIN", 0.0)
    ids, decide = _five_on_one_node(store)
    snap = read(store.engine, now=time.time())
    with _slow(store, tmp_path, [ids[0]]) as (site, inflight):
        Applier(site, snap, lambda kind, seconds: None, inflight).apply(decide)
        inflight.not_responding.add(not_answering)  # as the watch finds it
        inflight.collect()
        inflight.wait(10)
        inflight.collect()
        assert inflight.busy_jobs == set()
        return ids, site.started


def test_a_start_behind_a_slow_one_on_a_node_that_answers_is_never_dropped(
    store: db.Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past BEGIN_WITHIN, a lane on a node that answers goes on (slow starts at 1,000 hosts)."""
    ids, started = _past_begin_within(store, tmp_path, monkeypatch, "b7")
    assert started == [*ids[1:4], ids[0], ids[4]]
    with transaction(store.engine, write=False) as s:
        assert _gpus(s, ids[4]) == [("a1", 4, "exclusive")]
        assert s.scalars(select(EventRow).where(EventRow.kind == "job.delay")).all() == []


def test_starts_behind_an_action_on_a_node_not_answering_are_dropped_and_left_to_a_later_pass(
    store: db.Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A lane held by a host that hangs: what waits behind it is decided again, not kept busy."""
    ids, started = _past_begin_within(store, tmp_path, monkeypatch, "a1")
    assert started == [*ids[1:4], ids[0]]
    with transaction(store.engine, write=False) as s:
        assert _gpus(s, ids[0]) == [("a1", 0, "exclusive")]
        row = s.get(JobRow, ids[4])
        assert row is not None and (row.state, _gpus(s, ids[4])) == ("PENDING", [])
        # why it waits longer, for gctl why and the events (the others have no such note)
        assert [(k, m) for k, m, _ in _events(s, ids[4])] == [
            (
                "job.delay",
                f"job {ids[4]}: start on a1:4 not begun after 0 s, held behind host"
                " actions (node not answering); placed again",
            )
        ]
        notes = s.scalars(select(EventRow.job_id).where(EventRow.kind == "job.delay")).all()
        assert notes == [ids[4]]


def test_a_pass_stops_waiting_for_hosts_when_the_tick_needs_it_to(
    store: db.Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``until`` ends the wait before APPLY_WITHIN; the starts are recorded after the pass."""
    monkeypatch.setattr(apply, "APPLY_WITHIN", 10.0)
    a, b, decide = _two_on_a1(store)
    snap = read(store.engine, now=time.time())
    with _slow(store, tmp_path, [a, b]) as (site, inflight):
        until = time.monotonic() + apply.RECORD_EVERY
        applier = Applier(site, snap, lambda kind, seconds: None, inflight, until=until)
        assert applier.apply(decide).done == []
        assert inflight.busy_jobs == {a, b}
        inflight.wait(10)
        inflight.collect()
        with transaction(store.engine, write=False) as s:
            assert [s.get(JobRow, j).state for j in (a, b)] == ["RUNNING", "RUNNING"]


def _pass(site: QuietSite) -> None:
    """One reactive pass of gandiva over ``site``, its background work waited for."""
    inflight = Inflight()
    try:
        passes.reactive_pass(site, GandivaPolicy(), time.time(), lambda k, s: None, inflight)
        inflight.wait(10)
        inflight.collect()
    finally:
        inflight.close()


def test_a_start_that_fails_after_its_turn_was_handed_on_leaves_the_job_queued(
    store: db.Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Three jobs onto one GPU in one pass, each handed the slice of the one before (chaos test).

    The middle one's start fails, slowly: its freeze, which follows it, must
    not have been carried out and recorded, or it would stay frozen on no GPU.
    """
    monkeypatch.setattr(apply, "APPLY_WITHIN", 10.0)
    node(store, "a1", "1xV100-16GB")
    a, b, c = jobs.submit(store, [req(1)] * 3)
    with Pool() as pool:
        site = SlowSite(store, pool, tmp_path / "mirror", slow=[b])
        site.refuse = {b}
        _pass(site)
    with transaction(store.engine, write=False) as s:
        suspended = [m for k, m, _ in _events(s, a) + _events(s, b) if k == "job.suspend"]
        assert suspended == [
            f"job {a} suspended (freeze): time slice handed to new job {b}"
        ]  # b's own freeze, for c, was decided but not carried out
        row = s.get(JobRow, b)
        assert row is not None and (row.state, _gpus(s, b)) == ("PENDING", [])
        assert row.reason.startswith("start failed (1 in a row)")
        assert (s.get(JobRow, a).state, _gpus(s, a)) == ("SUSPENDED", [("a1", 0, "exclusive")])
        assert (s.get(JobRow, c).state, _gpus(s, c)) == ("PENDING", [])
    assert site.started == [a]


def test_a_job_left_suspended_on_no_gpu_is_requeued_and_placed_by_the_next_pass(
    store: db.Store, tmp_path: Path
) -> None:
    node(store, "a1")
    (job,) = jobs.submit(store, [req(1)])
    with transaction(store.engine, write=True) as s:
        row = s.get(JobRow, job)
        assert row is not None
        row.state, row.reason = "SUSPENDED", "start failed (1 in a row): h1: reset"
    with Pool() as pool:
        site = QuietSite(store, pool, tmp_path / "mirror")
        _pass(site)
    why = "requeued: it was suspended on no GPU (start failed (1 in a row): h1: reset)"
    with transaction(store.engine, write=False) as s:
        assert [st for st, _ in _history(s, job)] == ["PENDING", "PENDING", "RUNNING"]
        assert _history(s, job)[1] == ("PENDING", why)
        assert [k for k, _, _ in _events(s, job)] == ["job.requeue", "job.place"]
        assert _gpus(s, job) == [("a1", 0, "exclusive")]
    assert site.started == [job]


def test_a_pass_sees_a_start_under_way_on_its_gpus(
    store: db.Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A job's start still running after its pass holds its GPU for the next pass.

    The store has the job queued until the start is recorded. The next pass
    used to decide it again and give its GPU to a later, higher-priority
    job, whose placement then waited (the GPU busy), pass after pass: at
    1,000 hosts with slow starts, most placements waited so for seconds.
    """
    monkeypatch.setattr(apply, "APPLY_WITHIN", 0.05)
    node(store, "a1", "2xV100-16GB")
    (a,) = jobs.submit(store, [req(1)])
    with _slow(store, tmp_path, [a]) as (site, inflight):
        passes.reactive_pass(site, GandivaPolicy(), time.time(), lambda k, s: None, inflight)
        assert inflight.starting() == {a: (("a1", 0),)}
        (c,) = jobs.submit(store, [req(1, priority="high")])
        applied = passes.reactive_pass(
            site, GandivaPolicy(), time.time(), lambda k, s: None, inflight
        )
        assert applied.deferred == []
        inflight.wait(10)
        inflight.collect()
        assert inflight.starting() == {}
        with transaction(store.engine, write=False) as s:
            assert _gpus(s, a) == [("a1", 0, "exclusive")]
            assert _gpus(s, c) == [("a1", 1, "exclusive")]


class GatedSite(QuietSite):
    """A site whose start of the ``gated`` jobs waits until ``release`` is set."""

    def __init__(self, store: db.Store, pool: Pool, mirror: Path, gated: Iterable[int]):
        super().__init__(store, pool, mirror)
        self.gated = set(gated)
        self.release = threading.Event()

    def launch(self, job: Launch, refs: Iterable[GpuRef], nodes: Mapping[str, NodeRow]) -> None:
        """Start nothing, once released for a ``gated`` job."""
        if job.id in self.gated:
            assert self.release.wait(10.0)
        super().launch(job, refs, nodes)


def test_a_start_that_ends_while_the_others_are_recorded_stays_busy_until_its_own_record(
    store: db.Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A start past its pass that ends just after a record took the others is busy still.

    It used to be neither recorded nor busy until the next record: a pass
    meanwhile found its job queued and its GPU free and placed it again,
    and the first start's record then failed on the allocation the second
    had written (a UniqueViolation at 1,000 hosts on PostgreSQL, the
    records of three other jobs' starts lost with it).
    """
    monkeypatch.setattr(apply, "APPLY_WITHIN", 0.05)
    node(store, "a1", "2xV100-16GB")
    (a,) = jobs.submit(store, [req(1)])
    take = lanes.LaneRun.take
    ending = threading.Event()

    def take_then_end(self: lanes.LaneRun[object], wait: float = 0.0) -> list[object]:
        got = take(self, wait)
        if ending.is_set():  # the start ends after this take, before the record is done
            site.release.set()
            self.future.result(5.0)
        return got

    monkeypatch.setattr(lanes.LaneRun, "take", take_then_end)
    inflight = Inflight()
    with Pool() as pool:
        site = GatedSite(store, pool, tmp_path / "mirror", [a])
        passes.reactive_pass(site, GandivaPolicy(), time.time(), lambda k, s: None, inflight)
        ending.set()
        inflight.collect()  # the start ends after the record's take: nothing recorded yet
        ending.clear()
        assert inflight.busy_jobs == {a} and inflight.starting() == {a: (("a1", 0),)}
        applied = passes.reactive_pass(
            site, GandivaPolicy(), time.time(), lambda k, s: None, inflight
        )
        assert [d for d in applied.done if isinstance(d, Place)] == []
        inflight.collect()
        assert site.started == [a] and inflight.pending() == []
        with transaction(store.engine, write=False) as s:
            assert _gpus(s, a) == [("a1", 0, "exclusive")]
            assert s.get(JobRow, a).state == "RUNNING"
    inflight.close()


def test_a_pass_goes_on_while_a_start_is_under_way_on_a_node_that_stopped_answering(
    store: db.Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The job stays queued in the pass's view; its node is down (past the node timeout).

    Putting it on its GPUs of a node down raised, and every reactive pass
    failed until the start ended: at 1,000 hosts with 10 frozen, for 40 s.
    """
    monkeypatch.setattr(apply, "APPLY_WITHIN", 0.05)
    node(store, "a1", "2xV100-16GB")
    node(store, "b1", "4xV100-16GB")
    (a,) = jobs.submit(store, [req(2)])
    with _slow(store, tmp_path, [a]) as (site, inflight):
        passes.reactive_pass(site, GandivaPolicy(), time.time(), lambda k, s: None, inflight)
        ((held, gpus),) = inflight.starting().items()
        assert held == a
        frozen = gpus[0][0]
        with transaction(store.engine, write=True) as s:
            s.execute(update(NodeRow).where(NodeRow.name == frozen).values(admin_state="down"))
        (c,) = jobs.submit(store, [req(1)])
        applied = passes.reactive_pass(
            site, GandivaPolicy(), time.time(), lambda k, s: None, inflight, blocked={frozen}
        )
        placed = [d for d in applied.done if isinstance(d, Place)]
        assert [d.job_id for d in placed] == [str(c)]
        assert all(n != frozen for d in placed for n, _ in d.gpus)
        inflight.wait(10)
        inflight.collect()
