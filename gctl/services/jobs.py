"""Job use cases: submit (one or a batch), show, and operator actions.

What needs a running job to be touched (suspend, resume, requeue, migrate,
cancel of a running job) is recorded as an intent for the daemon, and the
caller is told so; what only changes the queue (cancel or hold of a pending
job, release) happens at once. The queue listing and Slurm's state names are
in :mod:`gctl.services.queue`, which needs no ORM.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import asdict, dataclass, fields
from typing import Any

from sqlalchemy import func, insert, select
from sqlalchemy.orm import Session

from gctl.daemon import NO_DAEMON, lease
from gctl.identity import Who
from gctl.services import access, events, hostlists
from gctl.services.db import Store
from gctl.services.errors import NotFound, ServiceError
from gctl.services.queue import FINISHED, JobColumns
from gctl.services.specs import JobRequest, dataset_entry
from gctl.store.engine import transaction
from gctl.store.models import (
    AllocationHistoryRow,
    AllocationRow,
    CoRunRow,
    DatasetRow,
    EventRow,
    GpuRow,
    IntentRow,
    JobRow,
    JobStateRow,
    NodeRow,
    ProfileRow,
    now,
    utc,
)
from gctl.store.snapshot import MECHANISM_CHECKPOINT, SUSPENDED_STATES
from gctl.store.usage import most_at_once, run_times, stretches, totals


@dataclass(frozen=True, slots=True)
class JobView:
    """A job as ``gctl show job`` presents it (``gctl queue`` takes :class:`JobColumns`).

    ``gpus`` are those it asked for and ``nodes`` those it runs on; for a
    finished job that held GPUs, the most it held at once and the nodes it
    ran on (its allocation history).
    """

    id: int
    name: str
    user: str
    state: str
    gpus: int
    priority: str
    submit_time: float
    start_time: float | None
    end_time: float | None
    reason: str | None
    held: bool
    job_class: str
    time_limit: float | None
    nodes: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        """JSON form, stable keys; times as UTC datetimes (``emit_json`` writes ISO 8601)."""
        one = JobColumns(**{f.name: [getattr(self, f.name)] for f in fields(self)})
        return one.to_dicts()[0]


@dataclass(frozen=True, slots=True)
class JobDetail:
    """Everything stored about one job: spec, where it runs, history and events.

    ``allocations`` are the GPUs it holds, or for a finished job each GPU it
    held, with the mode it last held it in.
    """

    view: JobView
    spec: dict[str, Any]
    allocations: tuple[tuple[str, int, str], ...]
    history: tuple[tuple[float, str, str | None], ...]
    intents: tuple[tuple[int, str, str], ...]
    runtime: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        """JSON form, stable keys; times as UTC datetimes (``emit_json`` writes ISO 8601)."""
        return {
            **self.view.to_dict(),
            "spec": self.spec,
            "allocations": [{"node": n, "gpu": i, "mode": m} for n, i, m in self.allocations],
            "history": [
                {"at": utc(at), "state": st, "reason": why} for at, st, why in self.history
            ],
            "intents": [{"id": i, "kind": k, "status": st} for i, k, st in self.intents],
            "runtime": self.runtime,
        }


def _row_values(req: JobRequest, me: Who, at: float) -> dict[str, Any]:
    return {
        "name": req.name,
        "user": me.name,
        "uid": me.uid,
        "gid": me.gid,
        "image": req.image,
        "command": list(req.command),
        "env": dict(req.env),
        "mounts": [asdict(m) for m in req.mounts],
        "gpus": req.gpus,
        "priority": req.priority,
        "job_class": req.job_class,
        "elastic_min": req.elastic[0] if req.elastic else None,
        "elastic_max": req.elastic[1] if req.elastic else None,
        "gpu_mem_mb": req.gpu_mem_mb,
        "datasets": list(req.datasets),
        "profile": req.profile,
        "state": "PENDING",
        "held": False,
        "restarts": 0,
        "attempt": 0,
        "submit_time": at,
    }


def _check_size(s: Session, reqs: list[JobRequest]) -> None:
    """Refuse a job asking for more GPUs than every registered node has together.

    It could never start, and would wait forever. ``wait_for_nodes`` keeps
    it queued for nodes still to be added; a store with no nodes yet (being
    set up) takes any job.
    """
    asked = [r for r in reqs if not r.wait_for_nodes]
    if not asked:
        return
    total = s.scalar(select(func.count(GpuRow.id))) or 0
    for r in asked:
        need = r.elastic[0] if r.elastic else r.gpus
        if total and need > total:
            raise ServiceError(
                f"the job asks for {need} GPUs and the cluster has {total}: it could never"
                " start (--wait-for-nodes keeps it queued for nodes still to come)"
            )


def _check_datasets(s: Session, reqs: list[JobRequest]) -> None:
    """Refuse a job naming a dataset that is not recorded (``gctl dataset add``)."""
    named = {dataset_entry(d)[0] for r in reqs for d in r.datasets}
    if not named:
        return
    known = set(s.scalars(select(DatasetRow.name).where(DatasetRow.name.in_(sorted(named)))))
    missing = sorted(named - known)
    if missing:
        raise ServiceError(f"unknown dataset {missing[0]!r} (gctl dataset ls)")


def submit(store: Store, requests: Iterable[JobRequest]) -> list[int]:
    """Store new pending jobs in one transaction; their ids, in order.

    All or nothing: the requests are fully checked, against the caller's
    limits and the host paths the site lets jobs bind too
    (:mod:`gctl.services.access`), before anything is written.
    """
    reqs = list(requests)
    if not reqs:
        return []
    me, policy = access.caller(store)
    user = me.name
    for req in reqs:
        access.check_mounts(req.mounts, policy)
    at = now()
    values = [
        {
            **_row_values(r, me, at),
            "time_limit": access.time_limit(me, policy, r.time_limit, given=r.time_given),
        }
        for r in reqs
    ]
    with transaction(store.engine, write=True) as s:
        _check_datasets(s, reqs)
        _check_size(s, reqs)
        if not me.operator:
            held = s.scalar(
                select(func.coalesce(func.sum(JobRow.gpus), 0)).where(
                    JobRow.user == user, JobRow.state.not_in(sorted(FINISHED))
                )
            )
            access.check_requests(
                me,
                policy,
                (r.priority for r in reqs),
                (r.job_class for r in reqs),
                (r.gpus for r in reqs),
                int(held or 0),
            )
        ids = list(
            s.scalars(insert(JobRow).returning(JobRow.id, sort_by_parameter_order=True), values)
        )
        s.execute(
            insert(JobStateRow),
            [{"job_id": i, "state": "PENDING", "at": at, "reason": "submitted"} for i in ids],
        )
        s.execute(
            insert(EventRow),
            [
                {
                    "at": at,
                    "user": user,
                    "kind": "job.submit",
                    "job_id": i,
                    "node": None,
                    "message": f"job {i} submitted: {r.gpus} GPU(s), {r.image}",
                    "data": {},
                }
                for i, r in zip(ids, reqs, strict=True)
            ],
        )
    return ids


HIDDEN = "(hidden)"
"""What another user sees of a job's environment values: they may hold its owner's secrets."""


def show_job(store: Store, job_id: int) -> JobDetail:
    """One job with its spec, GPUs, history and open intents.

    Its environment's values are shown to its owner and to operators only;
    anyone else sees the keys.
    """
    me, _ = access.caller(store)
    with transaction(store.engine, write=False) as s:
        row = _get(s, job_id)
        mine = me.operator or row.user == me.name
        env = dict(row.env) if mine else dict.fromkeys(row.env, HIDDEN)
        allocs = s.execute(
            select(NodeRow.name, GpuRow.index, AllocationRow.mode, GpuRow.emulated)
            .join(GpuRow, AllocationRow.gpu_id == GpuRow.id)
            .join(NodeRow, GpuRow.node_id == NodeRow.id)
            .where(AllocationRow.job_id == job_id)
            .order_by(NodeRow.name, GpuRow.index)
        ).all()
        hist = s.execute(
            select(JobStateRow.at, JobStateRow.state, JobStateRow.reason)
            .where(JobStateRow.job_id == job_id)
            .order_by(JobStateRow.id)
        ).all()
        intents = s.execute(
            select(IntentRow.id, IntentRow.kind, IntentRow.status)
            .where(IntentRow.job_id == job_id)
            .order_by(IntentRow.id)
        ).all()
        sample = s.execute(
            select(
                ProfileRow.at, ProfileRow.progress_rate, ProfileRow.gpu_util, ProfileRow.memory_mb
            )
            .where(ProfileRow.job_id == job_id)
            .order_by(ProfileRow.id.desc())
            .limit(1)
        ).first()
        throttle = s.scalar(
            select(EventRow.data)
            .where(EventRow.job_id == job_id, EventRow.kind == "job.throttle")
            .order_by(EventRow.id.desc())
            .limit(1)
        )
        split = s.execute(
            select(EventRow.data, EventRow.at)
            .where(EventRow.job_id == job_id, EventRow.kind == "job.split")
            .order_by(EventRow.id.desc())
            .limit(1)
        ).first()
        copies = s.execute(
            select(EventRow.node, EventRow.data)
            .where(EventRow.job_id == job_id, EventRow.kind.in_(("dataset.copy", "dataset.fill")))
            .order_by(EventRow.id)
        ).all()
        corun = s.execute(
            select(CoRunRow.partner_id, CoRunRow.gpu_type, CoRunRow.slowdown, CoRunRow.at)
            .where(CoRunRow.job_id == job_id)
            .order_by(CoRunRow.packed_at.desc(), CoRunRow.id.desc())
            .limit(1)
        ).first()
        held, gpus = [(n, i, m) for n, i, m, _ in allocs], row.gpus
        if not held and row.state in FINISHED:
            held, gpus = _held(s, job_id, row.gpus)
        nodes = tuple(dict.fromkeys(n for n, _, _ in held))
        emulated = any(e for _, _, _, e in allocs)
        packed = row.state == "RUNNING" and any(m == "packed" for _, _, m, _ in allocs)
        return JobDetail(
            view=_view(row, nodes, gpus),
            spec={
                "image": row.image,
                "command": row.command,
                "env": env,
                "mounts": row.mounts,
                "gpus": row.gpus,
                "priority": row.priority,
                "class": row.job_class,
                "elastic": [row.elastic_min, row.elastic_max] if row.elastic_min else None,
                "gpu_mem_mb": row.gpu_mem_mb,
                "datasets": row.datasets,
                "profile": row.profile,
                "time_limit": row.time_limit,
            },
            allocations=tuple(held),
            history=tuple((a, st, why) for a, st, why in hist),
            intents=tuple((i, k, st) for i, k, st in intents),
            runtime={
                "run_time": run_times(
                    ((job_id, st, a) for a, st, _ in hist),
                    now() if row.state not in FINISHED else None,
                ).get(job_id, 0.0),
                "mechanism": row.mechanism,
                "attempt": row.attempt,
                "restarts": row.restarts,
                "operation": row.op,
                # A sample describes the job's current run: none once it left its GPUs.
                "progress": _progress(*sample, row.mechanism, emulated)
                if sample is not None and allocs
                else None,
                # The rate control of an opportunistic job beside a production job, as last
                # recorded (significant changes only); none once it left those GPUs.
                "throttle": dict(throttle)
                if throttle and row.state == "RUNNING" and row.job_class == "opportunistic"
                else None,
                # Its datasets' copies onto its nodes: the latest news of each.
                "datasets": list(
                    {(d.get("dataset"), n): {"node": n, **d} for n, d in copies}.values()
                ),
                # The batch split gctl last wrote for it (data-parallel jobs of the SDK).
                "split": {
                    "version": split[0].get("version"),
                    "local": (split[0].get("plan") or [[None]])[-1][0],
                    "profile": len(split[0].get("plan") or ()) > 1,
                    "at": split[1],
                }
                if split is not None and row.state == "RUNNING"
                else None,
                # Its measured slow-down beside its pack partner (interference), while packed.
                "interference": {
                    "partner": corun[0],
                    "gpu_type": corun[1],
                    "slowdown": corun[2],
                    "at": corun[3],
                    "emulated": emulated,
                }
                if corun is not None and packed
                else None,
            },
        )


def _progress(
    at: float, rate: float, util: float, memory_mb: int, mechanism: str | None, emulated: bool
) -> dict[str, Any]:
    """The latest profile sample; ``estimated`` when the rate is GPU utilisation, not the SDK's.

    The daemon measures mini-batches per second only for jobs that report
    through the job SDK (whose mechanism is then checkpoint); for any other
    job the rate is its share of GPU utilisation, 0 to 1 (see
    :func:`gctl.daemon.passes.progress_rate`). ``emulated``: the GPU figures
    come from emulated GPUs the job holds, not from NVML.
    """
    return {
        "at": at,
        "rate": rate,
        "estimated": mechanism != MECHANISM_CHECKPOINT,
        "gpu_util": util,
        "memory_mb": memory_mb,
        "emulated": emulated,
    }


def _held(s: Session, job_id: int, asked: int) -> tuple[list[tuple[str, int, str]], int]:
    """Each GPU a finished job held (by node and index, its last mode), and the most at once.

    ``asked`` stands for the most when it held none (or ended before the history was kept).
    """
    rows = s.execute(
        select(
            AllocationHistoryRow.node,
            AllocationHistoryRow.gpu_index,
            AllocationHistoryRow.mode,
            AllocationHistoryRow.since,
            AllocationHistoryRow.until,
        )
        .where(AllocationHistoryRow.job_id == job_id)
        .order_by(AllocationHistoryRow.since, AllocationHistoryRow.id)
    ).all()
    last = {(node, index): mode for node, index, mode, _, _ in rows}
    gpus = most_at_once([(since, until) for *_, since, until in rows]) if rows else asked
    return [(node, index, mode) for (node, index), mode in sorted(last.items())], gpus


def _view(row: JobRow, nodes: tuple[str, ...], gpus: int) -> JobView:
    return JobView(
        row.id,
        row.name,
        row.user,
        row.state,
        gpus,
        row.priority,
        row.submit_time,
        row.start_time,
        row.end_time,
        row.reason,
        row.held,
        row.job_class,
        row.time_limit,
        nodes,
    )


def _get(s: Session, job_id: int) -> JobRow:
    row = s.get(JobRow, job_id)
    if row is None:
        raise NotFound(f"unknown job {job_id}")
    return row


def set_state(s: Session, row: JobRow, state: str, reason: str) -> None:
    """Move a job to ``state`` in the caller's transaction, keeping its history.

    A job that finishes gets what it used stored (:func:`_keep_totals`): its
    GPUs must have been released (:func:`gctl.store.allocations.release`)
    before, so that its allocation history is whole.
    """
    at = now()
    row.state = state
    row.reason = reason
    s.add(JobStateRow(job_id=row.id, state=state, at=at, reason=reason))
    if state in FINISHED:
        row.end_time = at
        _keep_totals(s, row)


def _keep_totals(s: Session, row: JobRow) -> None:
    """Store a finished job's running seconds, GPU-seconds, most GPUs and nodes (``gctl acct``).

    Worked out from its state history, the row just added included, and its
    allocation history, as :func:`gctl.services.acct.finished` works them
    out for a job finished before they were kept.
    """
    s.flush()  # the new state row, read back in its place among the others
    states = s.execute(
        select(JobStateRow.job_id, JobStateRow.state, JobStateRow.at)
        .where(JobStateRow.job_id == row.id)
        .order_by(JobStateRow.at, JobStateRow.id)
    ).all()
    held = s.execute(
        select(AllocationHistoryRow.node, AllocationHistoryRow.since, AllocationHistoryRow.until)
        .where(AllocationHistoryRow.job_id == row.id)
        .order_by(AllocationHistoryRow.id)
    ).all()
    ran = [(start, end) for _, start, end in stretches(states)]
    used = totals(row.gpus, ran, [(since, until) for _, since, until in held])
    row.run_seconds, row.gpu_seconds, row.gpus_held = used
    row.nodes_held = hostlists.collect({node for node, _, _ in held}) if held else ""


@dataclass(frozen=True, slots=True)
class ActionResult:
    """What an operator action did: at once, or recorded for the daemon."""

    job_id: int
    action: str
    done: bool
    message: str

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return asdict(self)


_NEEDS_RUNNING = {
    "suspend": {"RUNNING"},
    "resume": {"SUSPENDED"},
    "requeue": {"RUNNING", "SUSPENDED"},
    "migrate": {"RUNNING", "SUSPENDED"},
}


def act(store: Store, job_id: int, action: str, **args: Any) -> ActionResult:
    """Carry out (or record for the daemon) ``cancel``, ``hold``, ``release``, ``suspend``, ...

    ``args`` are kept with the intent: ``signal`` for cancel, ``hold`` for
    requeue, ``to`` (``NODE[:GPUS]``) for migrate.
    """
    me, _ = access.caller(store)
    user = me.name
    with transaction(store.engine, write=True) as s:
        row = _get(s, job_id)
        access.require_owner(me, row.user, job_id, f"gctl {action}")
        if row.state in FINISHED:
            raise ServiceError(f"job {job_id} already finished ({row.state})")
        result = _act(s, row, action, args, user)
        events.record(s, f"job.{action}", result.message, job_id=job_id, user=user, data=args)
        if not result.done and not lease.held(s, now()):
            message = f"{result.message}; {NO_DAEMON}"
            return dataclasses.replace(result, message=message)
        return result


def _act(s: Session, row: JobRow, action: str, args: dict[str, Any], user: str) -> ActionResult:
    jid = row.id
    if action == "cancel" and row.state == "PENDING":
        row.held = False
        set_state(s, row, "CANCELLED", f"cancelled by {user}")
        return ActionResult(jid, action, True, f"job {jid} cancelled")
    if action == "hold":
        if row.state != "PENDING":
            raise ServiceError(f"job {jid} is {row.state}; only pending jobs can be held")
        row.held = True
        row.reason = f"held by {user}"
        return ActionResult(jid, action, True, f"job {jid} held")
    if action == "release":
        if not row.held:
            raise ServiceError(f"job {jid} is not held")
        row.held = False
        row.start_failures, row.retry_at = 0, None  # a launch failure's hold: try again
        if row.state == "REQUEUE_HOLD":
            set_state(s, row, "PENDING", f"released by {user}")
        elif row.state in SUSPENDED_STATES and not _holds_gpus(s, jid):
            # suspended by an operator, its GPUs given back: it waits again, as on resume
            set_state(s, row, "PENDING", f"released by {user}; restarts from its checkpoint")
        else:
            row.reason = f"released by {user}"
        return ActionResult(jid, action, True, f"job {jid} released")
    if action == "migrate" and args.get("to"):
        _check_target(s, str(args["to"]))
    allowed = _NEEDS_RUNNING.get(action, {"RUNNING", "SUSPENDED", "STOPPED", "COMPLETING"})
    if action != "cancel" and row.state not in allowed:
        raise ServiceError(f"job {jid} is {row.state}; {action} needs {'/'.join(sorted(allowed))}")
    s.add(IntentRow(kind=action, job_id=jid, args=args, user=user))
    return ActionResult(jid, action, False, f"{action} of job {jid} recorded for the daemon")


def _holds_gpus(s: Session, job_id: int) -> bool:
    """Whether the job has allocation rows."""
    held = s.scalar(select(AllocationRow.id).where(AllocationRow.job_id == job_id).limit(1))
    return held is not None


def _check_target(s: Session, target: str) -> None:
    """``NODE[:GPU,GPU...]`` names a node that exists and GPUs it has."""
    name, _, gpus = target.partition(":")
    node = s.scalar(select(NodeRow).where(NodeRow.name == name))
    if node is None:
        raise NotFound(f"--to: unknown node {name!r}")
    if not gpus:
        return
    have = {g.index for g in node.gpus}
    for part in gpus.split(","):
        if not (part.isascii() and part.isdigit()) or int(part) not in have:
            raise ServiceError(f"--to {target!r}: node {name} has no GPU {part!r}")
