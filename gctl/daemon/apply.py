"""The one place where scheduling decisions become host actions and store writes.

A decision is carried out on the hosts first and recorded in the store
after, so the store never claims a container that was not started; what a
host refuses becomes the job's reason. Checkpoint moves are recorded first
and then carried through (:mod:`gctl.daemon.moves`), so a restart finishes
them. Nothing here makes the daemon's tick wait on a host for long: moves
and thaws run in the background, placements and freezes not done after
:data:`APPLY_WITHIN` seconds (sooner when the tick has no room left) go
on there, and a decision touching a job,
GPU or node with work in flight (:mod:`gctl.daemon.inflight`), or a node
that does not answer, waits for a later pass.

- ``Place``: a container per node the job spans, on exactly the chosen GPUs.
- ``Queue``: the reason the job waits.
- ``Suspend``, ``Unpack`` and ``Resume`` of time slicing use the *freeze*
  mechanism (docker pause and unpause: the job keeps its GPU memory and
  resumes in place within milliseconds). A ``Suspend`` marked ``checkpoint``
  (the jobs sharing the GPUs do not fit their memory at once) is a
  checkpoint move that keeps the job's GPUs (``slice``); the job given
  its turn starts once the move has left it waiting. A job whose
  container is gone resumes as a new attempt from its checkpoint.
- ``Pack`` onto the GPUs the job already holds just lets it run alongside;
  onto others it is a checkpoint move, like ``Migrate``, ``Grow``,
  ``Shrink`` and ``Requeue``.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections import Counter
from collections.abc import Callable, Collection, Hashable, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from functools import partial
from operator import itemgetter
from typing import Any, cast

from sqlalchemy import (
    Connection,
    Double,
    Insert,
    Update,
    bindparam,
    func,
    insert,
    literal_column,
    null,
    select,
    update,
)
from sqlalchemy.orm import Session, selectinload

from gctl.core.decisions import (
    Decision,
    Grow,
    Migrate,
    Pack,
    Place,
    Queue,
    Requeue,
    Resume,
    Shrink,
    Suspend,
    Unpack,
)
from gctl.core.model import GpuRef, ShareMode
from gctl.daemon import lanes, moves, startfail
from gctl.daemon.inflight import Inflight, Work
from gctl.daemon.site import Launch, Site, job_gpus, job_nodes, launches, share_gpus
from gctl.gcpause import gc_paused
from gctl.hosts.ssh import HostError
from gctl.services import events
from gctl.services.jobs import set_state
from gctl.store.allocations import release
from gctl.store.engine import transaction
from gctl.store.models import (
    AllocationRow,
    EventRow,
    GpuRow,
    JobRow,
    JobStateRow,
    NodeRow,
    now,
)
from gctl.store.snapshot import MECHANISM_FREEZE, QUEUED_STATES, SUSPENDED_STATES, Snapshot

_MOVE_KINDS: dict[type, str] = {Migrate: "migrate", Grow: "grow", Shrink: "shrink"}
BATCH = 2000
"""Decisions recorded per transaction."""
RECORD_EVERY = 0.25
"""Seconds of host actions after which a batch records what it did, while the rest go on."""
PARALLEL = 32
"""Lanes of host actions carried out at once (see :mod:`gctl.daemon.lanes`)."""
APPLY_WITHIN = 0.5
"""Seconds at most a pass waits for its placements and freezes before it moves on.

The rest go on in the background, each recorded as it ends
(:meth:`Applier._act`)."""
BEGIN_WITHIN = 5.0
"""Seconds after its pass moved on when a batch gives up what may never begin.

From then on, the placements and freezes waiting behind an action on a
node that does not answer (it may run until the engine's timeout) are
dropped and decided again by a later pass, as are lanes not begun yet.
Lanes on nodes that answer go on, however slow their actions."""
Batched = Place | Queue | Suspend | Unpack
"""Decisions carried out in batches: a host action each, recorded together."""
Turn = Place | Resume
"""Decisions that give a job its turn on GPUs a suspend by checkpoint leaves."""


@dataclass
class Applied:
    """What one batch of decisions did: carried out, refused by a host, or left for later.

    ``done`` also lists the decisions handed to background work (moves,
    thaws), which record their own outcome; ``deferred`` are those that
    touched a job, GPU or node busy with other work, or a node that does not
    answer: the next pass decides again.
    """

    done: list[Decision] = field(default_factory=list)
    failed: list[tuple[Decision, str]] = field(default_factory=list)
    deferred: list[Decision] = field(default_factory=list)


class Applier:
    """Carries out the decisions taken on one snapshot of the store.

    ``blocked`` are nodes no decision may act on now (not answering, or not
    reconciled since they came back); the work already in flight
    (``inflight``) keeps its jobs and GPUs busy. ``until`` bounds the wait
    for host actions (:meth:`_act`) by the tick's room.
    """

    def __init__(
        self,
        site: Site,
        snap: Snapshot,
        observe: Callable[[str, float], None],
        inflight: Inflight,
        blocked: Collection[str] = (),
        *,
        until: float | None = None,
    ):
        self.site = site
        self.until = until
        """When (monotonic) the tick needs the pass to move on, if before :data:`APPLY_WITHIN`."""
        self.snap = snap
        self.observe = observe
        self.inflight = inflight
        self.blocked = set(blocked)
        self._nodes: dict[str, NodeRow] = {}
        self._placed: dict[str, tuple[GpuRef, ...]] = {}
        self._holds: dict[str, tuple[GpuRef, ...]] = dict(snap.held)
        self._slices: dict[GpuRef, tuple[Work, list[Turn]]] = {}
        """GPUs a checkpoint suspend of this apply frees: its work, the turns to follow it."""
        self._deferred_jobs: set[str] = set()
        self._deferred_gpus: set[GpuRef] = set()
        self._busy_jobs = inflight.busy_jobs
        self._busy_gpus = inflight.busy_gpus

    def apply(self, decisions: list[Decision]) -> Applied:
        """Carry out ``decisions`` in order; a refused one is reported, the rest go on.

        Runs of placements, queue reasons and freezes are carried out on the
        hosts in parallel lanes (in order for each job) and recorded
        together, a transaction every :data:`RECORD_EVERY` seconds and at
        least one per :data:`BATCH` decisions, for at most
        :data:`APPLY_WITHIN` seconds: what still runs then is finished in
        the background. Moves and thaws go to the background at once. A
        decision touching busy work waits for a later pass, and so does
        every later decision touching its job or GPUs.
        """
        out = Applied()
        run: list[Batched] = []
        for d in decisions:
            if self._joins_slice(d, run):
                out.done.append(d)
            elif self._defer(d):
                out.deferred.append(d)
            elif _batched(d):
                run.append(cast(Batched, d))
            else:
                if run:
                    self._batches(run, out)
                    run = []
                self._background(d, out)
        if run:
            self._batches(run, out)
        return out

    def _defer(self, d: Decision) -> bool:
        """Whether ``d`` must wait (module docstring of :class:`Applied`); tracks what it holds."""
        job = d.job_id
        held = self._holds.get(job, ())
        target: tuple[GpuRef, ...] = ()
        if isinstance(d, Place | Pack | Grow | Shrink):
            target = d.gpus
        elif isinstance(d, Migrate):
            target = d.dst
        touched = set(held) | set(target)
        row_id = self.snap.job_ids.get(job)
        if (
            job in self._deferred_jobs
            or row_id in self._busy_jobs
            or touched & (self._deferred_gpus | self._busy_gpus)
            or any(node in self.blocked for node, _ in touched)
        ):
            self._deferred_jobs.add(job)
            self._deferred_gpus |= touched
            return True
        if isinstance(d, Requeue):
            self._holds.pop(job, None)
        elif target:
            self._holds[job] = target
        return False

    def _joins_slice(self, d: Decision, run: Sequence[Batched]) -> bool:
        """Whether ``d`` gives a job the turn on GPUs this apply's checkpoint suspend frees.

        A time-sliced ``Place``, or the ``Resume`` of the next in turn, comes
        after the ``Suspend`` of the job on its GPUs. By checkpoint, that
        suspend is a move in the background: the turn would wait for a later
        pass, which sees the set with no runner and may give it back to the
        job just suspended, whose restart the next placement suspends again,
        and so on (CI run of ``d4642a2``: the new job never ran). So the turn
        is carried out once the move has left the job waiting
        (:meth:`_take_turns`), its job busy until then. Not when a freeze on
        the same GPUs is carried out in this apply as well: the turn goes
        after that one, a later pass.
        """
        if isinstance(d, Place) and d.mode is ShareMode.TIMESLICED:
            gpus = d.gpus
        elif isinstance(d, Resume):
            gpus = self._holds.get(d.job_id, ())
        else:
            return False
        found = [self._slices.get(g) for g in gpus]
        first = found[0] if found else None
        if first is None or any(f is not first for f in found):
            return False
        row_id = self.snap.job_ids[d.job_id]
        freezing = {g for x in run if isinstance(x, Suspend) for g in self._holds.get(x.job_id, ())}
        if (
            d.job_id in self._deferred_jobs
            or row_id in self._busy_jobs
            or freezing & set(gpus)
            or any(node in self.blocked for node, _ in gpus)
        ):
            return False
        work, follow = first
        follow.append(d)
        work.jobs |= {row_id}
        self._busy_jobs.add(row_id)
        self._holds[d.job_id] = gpus
        return True

    def _busy(self, d: Decision) -> tuple[int, set[GpuRef]]:
        """The job row and GPUs background work for ``d`` keeps busy (before and after it)."""
        row_id = self.snap.job_ids[d.job_id]
        gpus = set(self.snap.held.get(d.job_id, ())) | set(self._holds.get(d.job_id, ()))
        return row_id, gpus

    def _background(self, d: Decision, out: Applied) -> None:
        """Start a move or a thaw on a background thread; it records its own outcome."""
        started = now()
        try:
            work = self._begin(d)
        except HostError as exc:
            self._refused(d, str(exc))
            out.failed.append((d, str(exc)))
            return
        row_id, gpus = self._busy(d)
        kind = type(d).__name__.lower()
        follow: list[Turn] = []

        def done(future: Future[Any]) -> None:
            error = future.exception()
            if isinstance(error, HostError):
                self._refused(d, str(error))
            elif error is not None:
                raise error
            self.observe(kind, now() - started)
            if follow and error is None:
                self._take_turns(follow)

        task = self.inflight.submit(
            f"{kind} of job {row_id}", work, jobs=[row_id], gpus=gpus, done=done
        )
        if isinstance(d, Suspend):
            self._slices.update(dict.fromkeys(gpus, (task, follow)))
        self._busy_jobs.add(row_id)
        self._busy_gpus |= gpus
        out.done.append(d)

    def _take_turns(self, turns: list[Turn]) -> None:
        """Give, in the background, the turns on the GPUs a checkpoint suspend left.

        Run when the suspend's move ended (on the tick's thread): a job gets
        its turn only where every other holder of its GPUs now waits, and
        only if it still waits itself; otherwise a later pass decides again.
        """
        rows = [self.snap.job_ids[d.job_id] for d in turns]
        gpus = {g for d in turns for g in self._holds[d.job_id]}
        started = now()

        def done(future: Future[list[tuple[Turn, HostError]]]) -> None:
            for d, error in future.result():
                self._refused(d, str(error), permanent=error.permanent, fails=error.fails_job)
            self.observe("turn", now() - started)

        what = f"turn of job(s) {', '.join(map(str, rows))}"
        self.inflight.submit(
            what, partial(self._give_turns, turns), jobs=rows, gpus=gpus, done=done
        )

    def _give_turns(self, turns: list[Turn]) -> list[tuple[Turn, HostError]]:
        """Start or resume each of ``turns`` still to be carried out; those a host refused."""
        refused: list[tuple[Turn, HostError]] = []
        for d in turns:
            row_id = self.snap.job_ids[d.job_id]
            waits = QUEUED_STATES if isinstance(d, Place) else SUSPENDED_STATES
            try:
                with transaction(self.site.store.engine, write=False) as s:
                    if not _turn_free(s, row_id, self._holds[d.job_id], self.snap.gpu_ids, waits):
                        continue
                    if isinstance(d, Place):
                        self.site.start(s, launches(s, {row_id})[row_id], d.gpus)
                if isinstance(d, Place):
                    self._record([d], Applied())
                else:
                    self._thaw(row_id, d)
            except HostError as exc:
                refused.append((d, exc))
        return refused

    def _begin(self, d: Decision) -> Callable[[], object]:
        """Record what must be recorded first; the host work still to do."""
        if isinstance(d, Migrate | Grow | Shrink | Requeue | Suspend) or (
            isinstance(d, Pack) and not self._holds_now(d.job_id, d.gpus)
        ):
            row_id = self._record_move(d)
            return partial(moves.finish, self.site, row_id)
        assert isinstance(d, Resume | Pack)  # Pack onto the GPUs it holds
        return partial(self._thaw, self.snap.job_ids[d.job_id], d)

    def _node_rows(self, s: Session, batch: list[Batched]) -> dict[str, NodeRow]:
        """The nodes ``batch`` places on, or freezes jobs placed this apply on, with their GPUs.

        Each is read once per run of batched decisions, and only those: the
        whole cluster's rows took 184 ms a read at 1,000 nodes x 8 GPUs on
        an idle machine, most of a tick that placed a job or two. The GPUs'
        NVLink topology, which starting a container never needs, is left
        unread: decoded, it would be most of what this reads.
        """
        names: set[str] = set()
        for d in batch:
            refs = d.gpus if isinstance(d, Place) else self._placed.get(d.job_id, ())
            names.update(n for n, _ in refs)
        missing = names - self._nodes.keys()
        if missing:
            gpus = selectinload(NodeRow.gpus).defer(GpuRow.nvlink_peers, raiseload=True)
            query = select(NodeRow).where(NodeRow.name.in_(missing)).options(gpus)
            self._nodes.update((n.name, n) for n in s.scalars(query))
        return self._nodes

    def _batches(self, run: list[Batched], out: Applied) -> None:
        """Carry out a run of batched decisions, :data:`BATCH` at a time (see :meth:`_act`).

        Each batch acts on the hosts (no write lock held), recording what
        has been carried out every :data:`RECORD_EVERY` seconds. The cyclic
        garbage collector waits through the whole run: the batches' many
        rows and records are acyclic and gone by their end, and the
        collector's passes would walk the whole cluster state for nothing,
        as often as every batch. The node rows are dropped at the end of the
        run, before the collector resumes: kept, their ORM objects (about ten
        per row) would be walked by its next passes.
        """
        with gc_paused():
            for first in range(0, len(run), BATCH):
                self._act(run[first : first + BATCH], out)
            self._nodes = {}

    def _act(self, batch: list[Batched], out: Applied) -> None:
        """Carry out the batch's host actions in parallel lanes (:mod:`gctl.daemon.lanes`).

        Everything the actions need is read from the store first; then the
        containers start and freeze, several at a time, and what is done is
        recorded every :data:`RECORD_EVERY` seconds while the rest goes on.
        Past :data:`APPLY_WITHIN` seconds, or :attr:`until`, the pass moves
        on and leaves the rest to go on in the background: each is recorded
        as it ends (the daemon collects its work in flight at every tick and
        while it waits for the next), its job and GPUs busy until then. None
        is dropped, so a short wait changes no decision; only those held
        behind an action on a node that stopped answering are, after
        :data:`BEGIN_WITHIN` seconds.
        """
        ids = self.snap.job_ids
        steps: list[lanes.Step[Batched]] = []
        with transaction(self.site.store.engine, write=False) as s:
            placing = launches(s, {ids[d.job_id] for d in batch if isinstance(d, Place)})
            attempts = _attempts(s, {ids[d.job_id] for d in batch if not isinstance(d, Place)})
            rows = self._node_rows(s, batch)
            for d in batch:
                steps.append(self._step(s, d, placing, attempts, rows))
        steps = after_freezes(batch, steps, self._holds)
        nodes = {n for step in steps for n in step.nodes}
        running = lanes.LaneRun(steps, workers=PARALLEL)
        until = time.monotonic() + APPLY_WITHIN
        if self.until is not None:
            until = min(until, self.until)
        with self.inflight.acting(nodes):
            while not running.finished and (left := until - time.monotonic()) > 0:
                self._outcomes(running.take(min(left, RECORD_EVERY)), out)
        self._outcomes(running.take(), out)
        if running.finished:
            return
        holds = {step.item.job_id: self._holds.get(step.item.job_id, ()) for step in steps}

        def narrow() -> None:
            """Keep busy only what is not recorded yet: its jobs, their GPUs, starts under way.

            A step that ended after :meth:`record` took the others stays busy
            until the next: a pass meanwhile would see its job queued and its
            GPUs free, and place it a second time.
            """
            late = [step.item for step in running.outstanding()]
            work.jobs = frozenset(ids[d.job_id] for d in late)
            work.gpus = frozenset(g for d in late for g in holds[d.job_id])
            work.starting = {
                ids[d.job_id]: d.gpus
                for d in late
                if isinstance(d, Place) and d.mode is ShareMode.EXCLUSIVE
            }

        give_up = time.monotonic() + BEGIN_WITHIN

        def record(_: object = None) -> None:
            self._outcomes(running.take(), Applied())
            if time.monotonic() > give_up:
                running.give_up(self.inflight.not_responding)
                dropped = Applied()
                self._outcomes(running.take(), dropped)
                self._dropped(dropped.deferred)
            narrow()

        # recorded each as it ends (progress), the last when the batch has (done)
        work = self.inflight.track(
            "host actions past the pass", running.future, nodes=nodes, done=record, progress=record
        )
        narrow()
        work.what = f"host actions of {len(work.jobs)} job(s) past the pass"
        self._busy_jobs |= work.jobs
        self._busy_gpus |= work.gpus

    def _dropped(self, dropped: list[Decision]) -> None:
        """Note on each job whose start was dropped, not begun in time, why it waits longer.

        Its lane was held by an earlier action on a node that does not
        answer, or never began (every lane thread busy); a later pass
        places it again.
        """
        places = [d for d in dropped if isinstance(d, Place)]
        if not places:
            return
        with transaction(self.site.store.engine, write=True) as s:
            for d in places:
                row_id = self.snap.job_ids[d.job_id]
                text = (
                    f"job {row_id}: start on {moves.where(d.gpus)} not begun after "
                    f"{BEGIN_WITHIN:g} s, held behind host actions (node not answering); "
                    "placed again"
                )
                events.record(s, "job.delay", text, job_id=row_id)

    def _outcomes(self, done: list[lanes.Done[Batched]], out: Applied) -> None:
        """Record what a batch carried out, report what hosts refused; skipped ones vanish."""
        carried = [step for step in done if step.error is None and not step.skipped]
        for step in done:
            if step.error is not None:
                self._placed.pop(step.item.job_id, None)
                error = step.error
                self._refused(
                    step.item, str(error), permanent=error.permanent, fails=error.fails_job
                )
                out.failed.append((step.item, str(step.error)))
            elif step.skipped:
                out.deferred.append(step.item)
        self._record([step.item for step in carried], out)
        for step in carried:
            self.observe(type(step.item).__name__.lower(), now() - step.began)

    def _step(
        self,
        s: Session,
        d: Batched,
        placing: dict[int, Launch],
        attempts: dict[int, int],
        rows: dict[str, NodeRow],
    ) -> lanes.Step[Batched]:
        """The host action of one decision and the nodes it acts on (``rows``: by name)."""
        row_id = self.snap.job_ids[d.job_id]
        if row_id not in (placing if isinstance(d, Place) else attempts):
            return lanes.Step(d, d.job_id, (), _fails(f"job {d.job_id} removed from the store"))
        if isinstance(d, Queue):
            return lanes.Step(d, d.job_id, (), None)
        if isinstance(d, Place):
            # Its freeze later in this apply acts on where it was placed.
            self._placed[d.job_id] = d.gpus
            start = partial(self.site.launch, placing[row_id], d.gpus, rows)
            return lanes.Step(d, d.job_id, tuple({n for n, _ in d.gpus}), start)
        if d.job_id in self._placed:
            names = sorted({n for n, _ in self._placed[d.job_id]})
            nodes = [rows[n] for n in names if n in rows]
        else:
            nodes = job_nodes(s, row_id)
        if not nodes:
            return lanes.Step(d, d.job_id, (), _fails(f"job {d.job_id} holds no GPUs to freeze"))
        freeze = partial(self._pause, nodes, row_id, attempts[row_id])
        return lanes.Step(d, d.job_id, tuple(n.name for n in nodes), freeze)

    def _record(self, done: list[Batched], out: Applied) -> None:
        """Record decisions carried out on the hosts, in one write transaction."""
        if not done:
            return
        with transaction(self.site.store.engine, write=True) as s:
            records = _Records(self.snap, now())
            for d in done:
                records.add(d)
            records.write(s)
        out.done += done

    def sync_modes(self) -> None:
        """Record how each placed job now shares its GPUs (exclusive, packed, time-sliced).

        Placing a job into a group changes the mode of the jobs already there.
        The core's mode is written only where the store agrees on who holds
        the GPUs: a decision that waited or failed may leave the core with a
        job alone on GPUs the store still has shared (or the reverse), and
        such a GPU keeps a mode that says shared as long as it is held twice.
        """
        state = self.snap.state
        with gc_paused(), transaction(self.site.store.engine, write=True) as s:
            want = {
                self.snap.job_ids[j]: state.mode_of(j).value
                for j, js in state.jobs.items()
                if js.gpus and j in self.snap.job_ids and j not in self._deferred_jobs
            }
            conn = s.connection()
            found = conn.execute(
                select(
                    AllocationRow.id, AllocationRow.job_id, AllocationRow.gpu_id, AllocationRow.mode
                )
            ).all()
            holders = Counter(gpu for _, _, gpu, _ in found)
            changed = []
            for row_id, job, gpu, mode in found:
                new = want.get(job, mode)
                if (new == "exclusive") != (holders[gpu] == 1):
                    continue  # the core and the store disagree on this GPU: leave it
                if new != mode:
                    changed.append({"row_id": row_id, "new_mode": new})
            _executemany(conn, _SET_MODE, changed)

    def _mode(self, job_id: str) -> str:
        return self.snap.state.mode_of(job_id).value

    def _holds_now(self, job_id: str, gpus: tuple[tuple[str, int], ...]) -> bool:
        with transaction(self.site.store.engine, write=False) as s:
            return job_gpus(s, self.snap.job_ids[job_id]) == sorted(gpus)

    def _pause(self, nodes: list[NodeRow], row_id: int, attempt: int) -> None:
        """Freeze the job's running containers on ``nodes``."""
        for node in nodes:
            engine = self.site.engine(node)
            for c in self.site.containers(node, row_id, attempt):
                if c.running and not c.paused:
                    engine.pause(c.id)

    def _thaw(self, row_id: int, d: Resume | Pack) -> None:
        """Let the job run on its GPUs: thaw its containers, or start it anew if they are gone.

        Runs in the background; the job's state is recorded after the host acted.
        """
        with transaction(self.site.store.engine, write=False) as s:
            row = s.get(JobRow, row_id)
            if row is None:
                raise HostError("-", f"job {row_id} removed from the store")
            nodes = job_nodes(s, row.id)
            attempt, gpus, launch = row.attempt, job_gpus(s, row.id), Launch.of(row)
        found = {n.name: self.site.containers(n, row_id, attempt) for n in nodes}
        restarted = not all(found.values())
        if restarted:
            self.site.kill(nodes, row_id)
            launch = dataclasses.replace(launch, attempt=attempt + 1)
            with transaction(self.site.store.engine, write=False) as s:
                self.site.start(s, launch, gpus)
        else:
            for node in nodes:
                for c in found[node.name]:
                    if c.paused:
                        self.site.engine(node).unpause(c.id)
        with transaction(self.site.store.engine, write=True) as s:
            row = s.get(JobRow, row_id)
            if row is None:
                return
            row.attempt = launch.attempt
            set_state(s, row, "RUNNING", d.reason)
            if isinstance(d, Pack):
                with_ = [self.snap.job_ids[j] for j in d.with_jobs if j in self.snap.job_ids]
                text = f"job {row.id} packed with job(s) {', '.join(map(str, with_))}: {d.reason}"
                events.record(s, "job.pack", text, job_id=row.id, data={"with": with_})
            else:
                events.record(s, "job.resume", f"job {row.id} resumed: {d.reason}", job_id=row.id)

    def _record_move(self, d: Migrate | Grow | Shrink | Requeue | Suspend | Pack) -> int:
        """Record a checkpoint move (step 1 of :mod:`gctl.daemon.moves`); the job's row id."""
        with transaction(self.site.store.engine, write=True) as s:
            row = s.get(JobRow, self.snap.job_ids[d.job_id])
            if row is None:
                raise HostError("-", f"job {d.job_id} removed from the store")
            if row.op is not None:
                raise HostError("-", f"job {row.id} is being moved already ({row.op['kind']})")
            if isinstance(d, Requeue):
                moves.begin(s, row, "requeue", (), mode="exclusive", reason=d.reason)
            elif isinstance(d, Suspend):  # by checkpoint, keeping its GPUs
                gpus = job_gpus(s, row.id)
                moves.begin(s, row, "slice", gpus, mode=self._mode(d.job_id), reason=d.reason)
            else:
                dst = d.dst if isinstance(d, Migrate) else d.gpus
                kind = _MOVE_KINDS.get(type(d), "pack")
                moves.begin(s, row, kind, dst, mode=self._mode(d.job_id), reason=d.reason)
            return row.id

    def _refused(
        self, d: Decision, why: str, *, permanent: bool = False, fails: bool = False
    ) -> None:
        """A host refused: the job waits again, with the host's words as its reason.

        A placement that failed is undone. Its job is held (Slurm's launch
        failed hold) when asking again cannot help, fails when it cannot run
        as submitted (``fails``), and otherwise is tried again after a
        back-off that doubles with every failure in a row, so a job that
        cannot start never holds up the others.
        """
        job_id = getattr(d, "job_id", None)
        if job_id is None or job_id not in self.snap.job_ids:
            return
        with transaction(self.site.store.engine, write=True) as s:
            row = s.get(JobRow, self.snap.job_ids[job_id])
            if row is None:
                return
            if isinstance(d, Place):  # containers it got on other nodes go
                names = {n for n, _ in d.gpus}
                nodes = list(s.scalars(select(NodeRow).where(NodeRow.name.in_(names))))
                self.inflight.submit(
                    f"removing job {row.id}'s partial start",
                    partial(self.site.kill, nodes, row.id),
                    jobs=[row.id],
                    gpus=d.gpus,
                )
                release(s, row.id, now())
                startfail.record(s, row, why, permanent=permanent, fails=fails, at=now())
            events.record(s, "job.error", f"job {row.id}: {why}", job_id=row.id)


class _Records:
    """The store writes of one batch of decisions, gathered in order and written in bulk.

    The same rows :func:`gctl.services.jobs.set_state` and
    :func:`gctl.services.events.record` write one at a time: each job's new
    state and reason, its history, its allocations and an event per decision,
    all stamped with the batch's time (and the events with the daemon's user).
    """

    def __init__(self, snap: Snapshot, at: float) -> None:
        self.snap = snap
        self.at = at
        self.updates: dict[int, dict[str, Any]] = {}
        self.allocations: list[dict[str, Any]] = []
        self.shared: dict[str, set[int]] = {}
        self.history: list[dict[str, Any]] = []
        self.events: list[dict[str, Any]] = []

    def add(self, d: Batched) -> None:
        """Gather what ``d`` writes; a later decision on the same job overrides an earlier."""
        job = self.snap.job_ids[d.job_id]
        if isinstance(d, Queue):
            self._job(job, new_reason=d.reason)
            return
        if isinstance(d, Place):
            to, ids = moves.where(d.gpus), self.snap.gpu_ids
            self.allocations += [
                {"job_id": job, "gpu_id": ids[ref], "mode": d.mode.value, "since": self.at}
                for ref in d.gpus
            ]
            self.shared.setdefault(d.mode.value, set()).update(ids[ref] for ref in d.gpus)
            self._job(job, started_at=self.at, new_mechanism=MECHANISM_FREEZE)
            self._state(job, "RUNNING", d.reason)
            self._event(job, "job.place", f"job {job} on {to}: {d.reason}", {"to": to})
            return
        self._state(job, "SUSPENDED", d.reason)
        self._event(
            job,
            "job.unpack" if isinstance(d, Unpack) else "job.suspend",
            f"job {job} suspended (freeze): {d.reason}",
            {"mechanism": "freeze"},
        )

    def _job(self, job: int, **values: Any) -> None:
        self.updates.setdefault(job, {}).update(values)

    def _state(self, job: int, state: str, reason: str) -> None:
        self._job(job, new_state=state, new_reason=reason)
        self.history.append({"job_id": job, "state": state, "at": self.at, "reason": reason})

    def _event(self, job: int, kind: str, message: str, data: dict[str, Any]) -> None:
        self.events.append(
            {
                "at": self.at,
                "kind": kind,
                "job_id": job,
                "node": None,
                "message": message,
                "data": json.dumps(data),  # as Core's JSON type writes it
            }
        )

    def write(self, s: Session) -> None:
        """Write everything gathered in the caller's transaction, a statement per table."""
        conn = s.connection()
        by_keys: dict[tuple[str, ...], list[dict[str, Any]]] = {}
        for job, values in self.updates.items():
            by_keys.setdefault(tuple(sorted(values)), []).append({"row_id": job, **values})
        for keys, params in by_keys.items():
            _executemany(conn, _job_update(keys), params)
        _executemany(conn, insert(AllocationRow), self.allocations)
        for mode, gpu_ids in self.shared.items():
            share_gpus(conn, gpu_ids, mode)
        _executemany(conn, insert(JobStateRow), self.history)
        user = events.author(s)
        _executemany(conn, insert(EventRow), [{**e, "user": user} for e in self.events])


def after_freezes(
    batch: Sequence[Batched],
    steps: Sequence[lanes.Step[Batched]],
    holds: Mapping[str, tuple[GpuRef, ...]],
) -> list[lanes.Step[Batched]]:
    """``steps`` with each time-sliced placement put in the lane of the freeze it follows.

    A time-sliced ``Place`` comes with the ``Suspend`` of the job running on
    its GPUs (``holds``: what each job holds). Run side by side, the pass
    could stop waiting with the placement begun and the freeze not (it waits
    for that job's own start, say): dropped, while the new job starts beside
    a job that was never frozen, the two sharing a GPU unrecorded as a pack.
    In the freeze's lane the placement begins only after it, is dropped with
    it, and is skipped when it fails, to be decided again next pass.

    The two jobs' lanes become one, and so on along a chain: a job placed
    and handed a time slice in one pass, then frozen for a third job, keeps
    its placement, its freeze and the third job's placement in one lane in
    that order (its freeze must not be carried out, and recorded, before
    its start, which may fail).
    """
    parent: dict[Hashable, Hashable] = {}

    def root(job: Hashable) -> Hashable:
        while (up := parent.get(job, job)) != job:
            parent[job] = parent.get(up, up)
            job = up
        return job

    freezing: dict[GpuRef, Hashable] = {}
    for d, step in zip(batch, steps, strict=True):
        if isinstance(d, Place) and d.mode is ShareMode.TIMESLICED:
            lead = next((freezing[g] for g in d.gpus if g in freezing), None)
            if lead is not None and root(step.job) != root(lead):
                parent[root(step.job)] = root(lead)
        elif isinstance(d, Suspend):
            freezing.update(dict.fromkeys(holds.get(d.job_id, ()), step.job))
    return [
        step if root(step.job) == step.job else dataclasses.replace(step, job=root(step.job))
        for step in steps
    ]


def _turn_free(
    s: Session,
    row_id: int,
    gpus: Sequence[GpuRef],
    ids: Mapping[GpuRef, int],
    waits: Collection[str],
) -> bool:
    """Whether job ``row_id`` and every other holder of ``gpus`` wait for their turn.

    The job waits in a state of ``waits``, not held and with no move; the
    others are suspended, with no move.
    """
    found = s.execute(
        select(JobRow.state, JobRow.held, JobRow.op).where(JobRow.id == row_id)
    ).first()
    if found is None or found.state not in waits or found.held or found.op is not None:
        return False
    on = select(AllocationRow.job_id).where(AllocationRow.gpu_id.in_([ids[g] for g in gpus]))
    others = s.execute(
        select(JobRow.state, JobRow.op).where(JobRow.id.in_(on), JobRow.id != row_id)
    ).all()
    return all(st in SUSPENDED_STATES and op is None for st, op in others)


def _batched(d: Decision) -> bool:
    """Whether ``d`` is carried out in a batch (a suspend by checkpoint is a move instead)."""
    return isinstance(d, Batched) and not (isinstance(d, Suspend) and d.checkpoint)


def _fails(why: str) -> Callable[[], None]:
    """An action that fails with ``why``: the decision cannot be carried out."""

    def fail() -> None:
        raise HostError("-", why)

    return fail


def _attempts(s: Session, ids: Collection[int]) -> dict[int, int]:
    """The current attempt of each job of ``ids`` still in the store, by id."""
    if not ids:
        return {}
    query = select(JobRow.id, JobRow.attempt).where(JobRow.id.in_(ids))
    return {row_id: attempt for row_id, attempt in s.connection().execute(query)}


_SET_MODE = (
    update(AllocationRow)
    .where(AllocationRow.id == bindparam("row_id"))
    .values(mode=bindparam("new_mode"))
)
"""The UPDATE of one allocation's (``row_id``) sharing mode."""


def _job_update(keys: tuple[str, ...]) -> Update:
    """An UPDATE of one job (``row_id``) setting the columns its parameter ``keys`` name.

    A placement's ``started_at`` and ``new_mechanism``, the job's first start
    time and how it is switched, are set unless already known.
    """
    values: dict[Any, Any] = {}
    if "new_state" in keys:
        values[JobRow.state] = bindparam("new_state")
    if "new_reason" in keys:
        values[JobRow.reason] = bindparam("new_reason")
    if "started_at" in keys:
        values[JobRow.start_time] = func.coalesce(
            JobRow.start_time, bindparam("started_at", type_=Double())
        )
        # It started: earlier failed starts are forgotten (SQL constants, not parameters).
        values[JobRow.start_failures] = literal_column("0")
        values[JobRow.retry_at] = null()
    if "new_mechanism" in keys:
        values[JobRow.mechanism] = func.coalesce(JobRow.mechanism, bindparam("new_mechanism"))
    return update(JobRow).where(JobRow.id == bindparam("row_id")).values(values)


def _executemany(conn: Connection, stmt: Insert | Update, rows: Sequence[dict[str, Any]]) -> None:
    """``conn.execute(stmt, rows)`` as one DB-API ``executemany``, without Core's work per row.

    Core builds, checks and converts a parameter set per row, which for a
    batch's thousands of rows costs more than the statement itself. Here the
    statement is compiled once for the connection's dialect and the rows go
    to the driver as they are: by name to a driver with named parameters
    (psycopg), as tuples in the compiled order to a positional one
    (SQLite). So every value must be one the driver takes unconverted:
    ints, floats, strings, None, and a JSON column's value as its text
    (``json.dumps``, Core's default serialiser). Every row names the same
    parameters; the statement's columns must have no Python-side default
    missing from them.
    """
    if not rows:
        return
    compiled = stmt.compile(dialect=conn.dialect, column_keys=list(rows[0]), for_executemany=True)
    if compiled.insert_prefetch or compiled.update_prefetch:
        raise ValueError(f"{compiled.string}: a column with a Python-side default is not given")
    params: Sequence[Any] = rows
    if compiled.positional:
        names = compiled.positiontup or []
        get = itemgetter(*names)
        params = [get(r) for r in rows] if len(names) > 1 else [(get(r),) for r in rows]
    conn.exec_driver_sql(compiled.string, params)
