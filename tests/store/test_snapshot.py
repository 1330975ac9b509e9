"""Reading the store into the core model: topology, queue, placements, sharing, admin states."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from sqlalchemy import select
from storekit import bulk_nodes, node, on_gpus, req

from gctl.core.decisions import Place, Queue, Resume, Suspend
from gctl.core.model import Cluster, JobClass, JobSpec, JobStatus, Node, Priority, ShareMode
from gctl.core.packing import pack_rates
from gctl.core.policies.gandiva import GandivaPolicy
from gctl.core.state import ClusterState
from gctl.services import db, jobs, nodes, queue
from gctl.sim.cluster_spec import node_gpus
from gctl.store import snapshot
from gctl.store.engine import transaction
from gctl.store.models import (
    AllocationRow,
    DatasetRow,
    GpuRow,
    JobRow,
    JobStateRow,
    NodeRow,
    ProfileRow,
)


def _sample(store: db.Store, job: int, at: float, util: float, mem: int, rate: float) -> None:
    with transaction(store.engine, write=True) as s:
        s.add(ProfileRow(job_id=job, at=at, gpu_util=util, memory_mb=mem, progress_rate=rate))


def _queue(state: ClusterState) -> list[str]:
    """Pending jobs in the order the core serves them: priority, then arrival."""
    waiting = [j for bucket in state.pending.values() for j in bucket]
    return sorted(waiting, key=lambda j: (-state.jobs[j].spec.priority, state.jobs[j].seq))


def _turns(state: ClusterState) -> dict[int, str | None]:
    """The job first in line on GPU sets of each size where jobs take turns."""
    return {n: js.id if (js := state.next_waiting(n)) else None for n in state.waiting_sizes()}


def _id(job: int) -> str:
    return snapshot.core_job_id(job)


def test_nodes_gpus_and_topology(store: db.Store, tmp_path: Path) -> None:
    node(store, "b1")
    node(store, "a1")
    spec = tmp_path / "dgx.toml"
    spec.write_text('[[nodes]]\ngpus = 8\ntopology = "nvlink"\n')
    node(store, "dgx", str(spec))
    snap = snapshot.read(store.engine, now=time.time())
    assert snap.problems == ()
    assert list(snap.state.nodes) == ["a1", "b1", "dgx"]
    assert snap.state.nodes["a1"].node.gpus == node_gpus(4)
    assert snap.state.nodes["b1"].node.gpus == node_gpus(4)
    assert snap.state.nodes["dgx"].node.gpus == node_gpus(8, topology="nvlink")
    assert snap.state.total_free == 16
    with transaction(store.engine, write=False) as s:
        node_rows = {n: i for i, n in s.execute(select(NodeRow.id, NodeRow.name))}
        gpu_rows = {
            (n, idx): i
            for i, n, idx in s.execute(
                select(GpuRow.id, NodeRow.name, GpuRow.index).join(GpuRow.node)
            )
        }
    assert snap.node_ids == node_rows
    assert snap.gpu_ids == gpu_rows


def test_pending_queue_order_held_and_finished_jobs(
    store: db.Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GCTL_USER", "ann")
    node(store, "a1")
    with transaction(store.engine, write=True) as s:  # a recorded dataset the job may name
        s.add(DatasetRow(name="imagenet", source_node="a1", source_path="/d", digest="0" * 64,
                         bytes=1, files=1, user="root"))  # fmt: skip
    a, b, c, held, cancelled, done, requeued = jobs.submit(
        store,
        [
            req(1),
            req(2, priority="high"),
            req(1),
            req(1),
            req(1),
            req(1),
            req(
                2,
                priority="low",
                job_class="opportunistic",
                elastic="1:4",
                gpu_mem="8GB",
                profile="resnet18",
                datasets=["imagenet"],
                name="rq",
            ),
        ],
    )
    jobs.act(store, held, "hold")
    jobs.act(store, cancelled, "cancel")
    with transaction(store.engine, write=True) as s:
        for job, st in ((done, "COMPLETED"), (requeued, "REQUEUED")):
            row = s.get(JobRow, job)
            assert row is not None
            jobs.set_state(s, row, st, "test")
    at = time.time()
    snap = snapshot.read(store.engine, now=at)
    state = snap.state
    assert snap.problems == ()
    assert _queue(state) == [_id(b), _id(a), _id(c)]
    assert list(state.guest_queue) == [_id(requeued)]  # opportunistic: in no policy's queue
    assert list(state.pending[(int(Priority.NORMAL), 1)]) == [_id(a), _id(c)]
    assert set(state.jobs) == {_id(j) for j in (a, b, c, requeued)}
    assert snap.job_ids == {_id(j): j for j in (a, b, c, requeued)}
    spec = state.jobs[_id(requeued)].spec
    with transaction(store.engine, write=False) as s:
        row = s.get(JobRow, requeued)
        assert row is not None
        assert spec.submit_time == row.submit_time
        requeued_at = s.scalar(
            select(JobStateRow.at).where(
                JobStateRow.job_id == requeued, JobStateRow.state == "REQUEUED"
            )
        )
    assert (spec.gpus, spec.priority, spec.job_class) == (2, Priority.LOW, JobClass.OPPORTUNISTIC)
    assert (spec.elastic_min, spec.elastic_max, spec.gpu_mem_mb) == (1, 4, 8192)
    assert (spec.profile, spec.datasets, spec.name, spec.user) == (
        "resnet18",
        ("imagenet",),
        "rq",
        "ann",
    )
    assert state.jobs[_id(requeued)].since == requeued_at  # waits from its requeue
    assert state.jobs[_id(a)].since == state.jobs[_id(a)].spec.submit_time
    assert all(js.status is JobStatus.PENDING and js.gpus == () for js in state.jobs.values())


def test_running_packed_timesliced_and_suspended_jobs(store: db.Store) -> None:
    node(store, "a1")
    node(store, "a2")
    big, pk1, pk2, ts1, ts2, solo, waiting = jobs.submit(
        store, [req(2), req(1), req(1), req(1), req(1), req(4), req(1)]
    )
    t = time.time()
    on_gpus(store, big, "a1", (0, 1), since=t + 1)
    on_gpus(store, pk1, "a1", (2,), since=t + 10, mode="packed")
    on_gpus(store, pk2, "a1", (2,), since=t + 20, mode="packed")
    on_gpus(store, ts2, "a1", (3,), since=t + 30, mode="time-sliced", state="SUSPENDED")
    on_gpus(store, ts1, "a1", (3,), since=t + 40, mode="time-sliced")
    on_gpus(store, solo, "a2", range(4), since=t + 5, state="SUSPENDED", entered=t + 50)
    _sample(store, pk1, t + 15, 0.4, 3000, 10.0)  # alone, before the pack
    _sample(store, pk1, t + 30, 0.7, 3000, 6.0)
    _sample(store, pk2, t + 30, 0.3, 2000, 5.0)
    _sample(store, ts2, t + 35, 0.5, 4000, 8.0)
    snap = snapshot.read(store.engine, now=t + 60)
    state = snap.state
    assert snap.problems == ()
    assert snap.requeued == ()

    def on(job: int) -> tuple[tuple[str, int], ...]:
        return state.jobs[_id(job)].gpus

    assert on(big) == (("a1", 0), ("a1", 1))
    assert on(pk1) == on(pk2) == (("a1", 2),)
    assert on(ts1) == on(ts2) == (("a1", 3),)
    assert on(solo) == tuple(("a2", i) for i in range(4))
    modes = {j: state.mode_of(_id(j)) for j in (big, pk1, pk2, ts1, ts2, solo)}
    assert modes == {
        big: ShareMode.EXCLUSIVE,
        pk1: ShareMode.PACKED,
        pk2: ShareMode.PACKED,
        ts1: ShareMode.TIMESLICED,
        ts2: ShareMode.TIMESLICED,
        solo: ShareMode.EXCLUSIVE,
    }
    status = {j: state.jobs[_id(j)].status for j in (big, pk1, ts1, ts2, solo, waiting)}
    assert status == {
        big: JobStatus.RUNNING,
        pk1: JobStatus.RUNNING,
        ts1: JobStatus.RUNNING,
        ts2: JobStatus.SUSPENDED,
        solo: JobStatus.SUSPENDED,
        waiting: JobStatus.PENDING,
    }
    assert state.members((("a1", 3),)) == [_id(ts2), _id(ts1)]  # round-robin: who came first
    assert state.next_waiting(1) is state.jobs[_id(ts2)]
    a1, a2 = state.nodes["a1"], state.nodes["a2"]
    assert (a1.load, a1.free, a1.affinity) == (6, 0, 2)
    assert a1.height == 1.5 > 1
    assert (a2.load, a2.height, a2.affinity) == (4, 1.0, 4)
    assert state.total_free == 0
    assert state.cluster_height() == 1.5
    js = state.jobs[_id(ts1)]
    assert (js.first_run, js.since, js.last_resumed) == (t + 40, t + 40, t + 40)
    assert state.jobs[_id(solo)].since == t + 50
    assert state.jobs[_id(ts2)].last_resumed == t + 30
    packed = state.jobs[_id(pk1)]
    assert packed.packed_at == state.jobs[_id(pk2)].packed_at == t + 20
    assert packed.observed is not None and packed.observed.progress_rate == 6.0
    assert packed.solo_rate == 10.0
    assert state.jobs[_id(pk2)].solo_rate is None  # never measured alone
    assert state.jobs[_id(ts2)].solo_rate == 8.0  # measured during its own turn
    assert pack_rates(state, (("a1", 2),)) is None
    assert state.jobs[_id(big)].observed is None


def test_a_turn_taken_packed_counts_as_packed_from_the_resume(store: db.Store) -> None:
    """Two time-sliced jobs both running: a pack since the waiting one resumed, not before.

    Samples from the turns each ran alone must not judge the pack.
    """
    node(store, "a1")
    x, y = jobs.submit(store, [req(1), req(1)])
    t = time.time()
    on_gpus(store, x, "a1", (0,), since=t + 1, mode="time-sliced")
    on_gpus(store, y, "a1", (0,), since=t + 2, mode="time-sliced", state="SUSPENDED", entered=t + 3)
    with transaction(store.engine, write=True) as s:
        row = s.get(JobRow, y)
        assert row is not None
        row.state = "RUNNING"
        s.add(JobStateRow(job_id=y, state="RUNNING", at=t + 10, reason="turn, packed with x"))
    state = snapshot.read(store.engine, now=t + 20).state
    assert state.mode_of(_id(x)) is ShareMode.PACKED
    assert state.jobs[_id(x)].packed_at == state.jobs[_id(y)].packed_at == t + 10


def test_drained_node_keeps_its_jobs_and_takes_no_new_placement(store: db.Store) -> None:
    node(store, "a1")
    node(store, "a2")
    resident, two, four = jobs.submit(store, [req(1), req(2), req(4)])
    t = time.time()
    on_gpus(store, resident, "a1", (0,), since=t)
    nodes.set_admin_state(store, "a1", "drain", "bad fan")
    snap = snapshot.read(store.engine, now=t + 1)
    state = snap.state
    assert not state.nodes["a1"].open and snapshot.DRAIN_BY in state.nodes["a1"].drained_by
    assert state.nodes["a1"].up  # drained, not gone: its job runs on
    assert state.jobs[_id(resident)].status is JobStatus.RUNNING
    assert state.total_free == 4  # a1's three free GPUs do not count
    decisions = GandivaPolicy().schedule(state, t + 1)
    places = [d for d in decisions if isinstance(d, Place)]
    assert [(d.job_id, {n for n, _ in d.gpus}) for d in places] == [(_id(two), {"a2"})]
    assert state.jobs[_id(four)].status is JobStatus.PENDING  # a1 has 3 free, but drained
    assert state.nodes["a1"].load == 1


def test_a_suspended_job_left_alone_on_its_gpus_gets_the_turn(store: db.Store) -> None:
    """Its time-slice partner finished since the last pass: the next pass resumes it."""
    node(store, "a1")
    waiting, other = jobs.submit(store, [req(1), req(1)])
    t = time.time()
    on_gpus(store, waiting, "a1", (0,), since=t, mode="time-sliced", state="SUSPENDED")
    on_gpus(store, other, "a1", (1,), since=t)
    state = snapshot.read(store.engine, now=t + 1).state
    decisions = GandivaPolicy().schedule(state, t + 1)
    assert [(type(d), d.job_id) for d in decisions] == [(Resume, _id(waiting))]
    assert state.jobs[_id(other)].status is JobStatus.RUNNING


def test_what_is_known_of_checkpointing(store: db.Store) -> None:
    """Seen using the SDK: yes; seen running without: no; never ran: assumed until it runs."""
    node(store, "a1")
    sdk, plain, unknown_running, new = jobs.submit(store, [req(1)] * 4)
    t = time.time()
    on_gpus(store, sdk, "a1", (0,), since=t, mechanism="checkpoint")
    on_gpus(store, plain, "a1", (1,), since=t, mechanism="freeze")
    on_gpus(store, unknown_running, "a1", (2,), since=t, mechanism=None)
    state = snapshot.read(store.engine, now=t + 1).state
    can = {j: state.jobs[_id(j)].spec.can_checkpoint for j in (sdk, plain, unknown_running, new)}
    assert can == {sdk: True, plain: False, unknown_running: False, new: True}


def test_down_node_gives_its_jobs_back_to_the_queue(store: db.Store) -> None:
    node(store, "a1")
    node(store, "a2")
    lost, queued = jobs.submit(store, [req(2), req(4)])
    t = time.time()
    on_gpus(store, lost, "a1", (0, 1), since=t)
    nodes.set_admin_state(store, "a1", "down", "psu")
    snap = snapshot.read(store.engine, now=t + 5)
    state = snap.state
    assert snap.requeued == (_id(lost),)
    assert not state.nodes["a1"].up and state.nodes["a1"].load == 0
    js = state.jobs[_id(lost)]
    assert (js.status, js.gpus, js.since) == (JobStatus.PENDING, (), t + 5)
    assert js.reason == "requeued: node a1 is down"
    assert state.total_free == 4
    GandivaPolicy().schedule(state, t + 5)
    assert {n for n, _ in state.jobs[_id(lost)].gpus} == {"a2"}  # it arrived first
    assert state.jobs[_id(queued)].status is JobStatus.PENDING  # a1's GPUs are gone


def test_rows_the_core_cannot_model_are_reported_and_left_out(store: db.Store) -> None:
    node(store, "a1")
    ok, no_gpus, pending_on_gpus, overlap, bad_prio = jobs.submit(
        store, [req(2), req(1), req(1), req(1), req(1)]
    )
    t = time.time()
    on_gpus(store, ok, "a1", (0, 1), since=t)
    on_gpus(store, overlap, "a1", (1,), since=t + 1)
    on_gpus(store, pending_on_gpus, "a1", (3,), since=t)
    with transaction(store.engine, write=True) as s:
        for job, st in ((no_gpus, "RUNNING"), (pending_on_gpus, "PENDING")):
            row = s.get(JobRow, job)
            assert row is not None
            row.state = st
        row = s.get(JobRow, bad_prio)
        assert row is not None
        row.priority = "urgent"
    with transaction(store.engine, write=False) as s:
        snap = snapshot.load(s, now=t + 2)
    assert set(snap.state.jobs) == {_id(ok)}
    assert snap.job_ids == {_id(ok): ok}
    assert sorted(snap.problems) == sorted(
        [
            f"job {no_gpus}: RUNNING but holds no GPUs; left out",
            f"job {pending_on_gpus}: PENDING but holds GPUs; left out",
            f"job {overlap}: GPU a1:1 is also held with a different GPU set; left out",
            f"job {bad_prio}: unknown priority 'urgent'; left out",
        ]
    )
    assert snap.state.pending == {}
    assert snap.state.nodes["a1"].free == 2


def test_a_job_suspended_on_no_gpu_waits_in_the_queue_unless_held(store: db.Store) -> None:
    """Frozen on nothing, a job would never run again: the snapshot queues it, as stranded."""
    node(store, "a1")
    stranded, stopped, held, backed_off = jobs.submit(store, [req(1)] * 4)
    t = time.time()
    with transaction(store.engine, write=True) as s:
        for job, st in ((stranded, "SUSPENDED"), (stopped, "STOPPED"), (held, "SUSPENDED")):
            row = s.get(JobRow, job)
            assert row is not None
            row.state = st
            row.held = job == held  # suspended by an operator at a checkpoint
        row = s.get(JobRow, backed_off)
        assert row is not None
        row.state, row.retry_at = "SUSPENDED", t + 60  # its failed start is backed off
    with transaction(store.engine, write=False) as s:
        snap = snapshot.load(s, now=t)
    assert snap.stranded == (stranded, stopped, backed_off)
    assert snap.problems == ()
    assert {j: js.status for j, js in snap.state.jobs.items()} == {
        _id(stranded): JobStatus.PENDING,
        _id(stopped): JobStatus.PENDING,
    }
    GandivaPolicy().schedule(snap.state, t)
    assert len(snap.state.jobs[_id(stranded)].gpus) == 1


def test_a_policy_pass_written_to_the_store_loads_back_as_the_same_state(
    store: db.Store,
) -> None:
    """Round trip: the core places jobs, the store records it as the daemon will, load agrees."""
    node(store, "a1")
    node(store, "a2")
    sizes = [(2, "normal"), (2, "normal"), (4, "low"), (1, "high"), (1, "normal"), (2, "normal")]
    sizes += [(1, "low"), (4, "normal"), (1, "normal"), (2, "high"), (8, "normal")]
    ids = jobs.submit(store, [req(g, priority=p) for g, p in sizes])
    with transaction(store.engine, write=False) as s:
        submitted = {i: at for i, at in s.execute(select(JobRow.id, JobRow.submit_time))}
    core = ClusterState(Cluster(tuple(Node(n, node_gpus(4)) for n in ("a1", "a2"))))
    policy = GandivaPolicy()
    joined: dict[str, float] = {}
    t0 = time.time()
    for i, (job, (gpus, prio)) in enumerate(zip(ids, sizes, strict=True)):
        at = t0 + 10 * i
        spec = JobSpec(
            _id(job), gpus, submit_time=submitted[job], priority=Priority[prio.upper()], user="u"
        )
        core.submit(spec, submitted[job])
        for k, d in enumerate(policy.schedule(core, at)):
            assert isinstance(d, Place | Suspend | Resume | Queue), d
            if isinstance(d, Place):
                joined[d.job_id] = at + k / 1000
    statuses = {js.status for js in core.jobs.values()}
    assert statuses == {JobStatus.RUNNING, JobStatus.SUSPENDED, JobStatus.PENDING}
    assert core.shared  # some jobs take turns on their GPUs, others wait in the queue
    with transaction(store.engine, write=True) as s:
        gpu_rows = {
            (n, idx): i
            for i, n, idx in s.execute(
                select(GpuRow.id, NodeRow.name, GpuRow.index).join(GpuRow.node)
            )
        }
        for js in core.jobs.values():
            row = s.get(JobRow, int(js.id))
            assert row is not None
            row.reason = js.reason  # as the daemon writes it
            if not js.gpus:
                continue
            row.start_time = js.first_run
            row.mechanism = "checkpoint"  # the core's specs can checkpoint
            since = joined[js.id]
            s.add(JobStateRow(job_id=row.id, state="RUNNING", at=since))
            if js.status is JobStatus.SUSPENDED:
                row.state = "SUSPENDED"
                s.add(JobStateRow(job_id=row.id, state="SUSPENDED", at=js.since))
            else:
                row.state = "RUNNING"
            for ref in js.gpus:
                mode = core.mode_of(js.id).value
                s.add(AllocationRow(job_id=row.id, gpu_id=gpu_rows[ref], mode=mode, since=since))
    snap = snapshot.read(store.engine, now=t0 + 1000)
    state = snap.state
    assert snap.problems == ()
    assert state.groups == core.groups  # same GPU sets, members in the same turn order
    assert {j: (s.status, s.gpus, s.seq) for j, s in state.jobs.items()} == {
        j: (s.status, s.gpus, s.seq) for j, s in core.jobs.items()
    }
    assert _queue(state) == _queue(core)
    assert {k: list(v) for k, v in state.pending.items()} == {
        k: list(v) for k, v in core.pending.items()
    }
    for name, ns in core.nodes.items():
        got = state.nodes[name]
        assert (got.load, got.free_mask, got.affinity, got.height) == (
            ns.load,
            ns.free_mask,
            ns.affinity,
            ns.height,
        )
    assert (state.total_free, state.cluster_height()) == (core.total_free, core.cluster_height())
    assert state.shared == core.shared
    assert _turns(state) == _turns(core) and all(_turns(core).values())
    for j, js in core.jobs.items():  # the same GPU time had, to the history's precision
        assert state.jobs[j].attained_at(t0 + 1000) == pytest.approx(
            js.attained_at(t0 + 1000), abs=1
        )
    # The next pass decides the same on both.
    after = [d.job_id for d in GandivaPolicy().introspect(state, t0 + 1000)]
    assert after == [d.job_id for d in GandivaPolicy().introspect(core, t0 + 1000)]


def test_every_store_state_has_one_meaning() -> None:
    groups = [
        snapshot.FINISHED_STATES,
        snapshot.QUEUED_STATES,
        snapshot.HELD_STATES,
        snapshot.RUNNING_STATES,
        snapshot.SUSPENDED_STATES,
    ]
    assert sorted(s for g in groups for s in g) == sorted(queue.STATE_CODES)
    assert snapshot.FINISHED_STATES == queue.FINISHED
    assert snapshot.RUNNING_STATES | snapshot.SUSPENDED_STATES == queue.ON_GPUS


def test_load_time_1000_nodes_10000_pending_jobs(tmp_path: Path) -> None:
    """Not a speed check (bench/snapshot.py is): prints how long a big load takes."""
    store = db.connect(str(tmp_path / "big.db"))
    db.upgrade(store)
    bulk_nodes(store, 1000)
    jobs.submit(store, [req(1 + i % 4) for i in range(10_000)])
    started = time.perf_counter()
    snap = snapshot.read(store.engine, now=time.time())
    took = time.perf_counter() - started
    print(f"\nsnapshot load, 1,000 nodes x 8 GPUs + 10,000 pending jobs (SQLite): {took:.3f} s")
    assert len(snap.state.nodes) == 1000 and snap.state.total_free == 8000
    assert sum(len(b) for b in snap.state.pending.values()) == 10_000
    assert snap.problems == ()


def test_attained_service_comes_from_the_running_stretches_of_the_history(
    store: db.Store,
) -> None:
    """2 GPUs: ran 100 s, suspended 50 s, ran 30 s, requeued, running again since t+300."""
    node(store, "a1")
    (job,) = jobs.submit(store, [req(2)])
    t = time.time()
    history = [("RUNNING", 0), ("SUSPENDED", 100), ("RUNNING", 150), ("REQUEUED", 180)]
    with transaction(store.engine, write=True) as s:
        for st, dt in history:
            s.add(JobStateRow(job_id=job, state=st, at=t + dt, reason="test"))
    on_gpus(store, job, "a1", (0, 1), since=t + 300, entered=t + 300)
    js = snapshot.read(store.engine, now=t + 400).state.jobs[_id(job)]
    # 2 x (100 + 30) closed, plus 2 x 100 of the current stretch
    assert js.attained_at(t + 400) == pytest.approx(2 * 130 + 2 * 100)
    policy = GandivaPolicy()
    assert policy.levels is not None
    assert policy.levels.describe(js, t + 400).startswith("level 1 of 3: 0.1 GPU-hours")
