"""Daemon latency and throughput: submit to running, switches, and one reactive pass at scale.

Three parts, chosen with ``--part`` (default ``all``); GPUs are emulated
throughout, so none of these are real-GPU figures:

- ``submit``: from a job's submission to its container running, p50 and p99
  over ``--jobs`` 1-GPU jobs (default 100) submitted one at a time every
  ``--interval`` seconds (default 0.05) to a daemon running in a thread
  (tick ``--tick``, default 0.2 s) over the two local test hosts (real sshd
  and dockerd, 64 emulated V100s each). The end is the container's own
  ``State.StartedAt`` from ``docker inspect`` on its host. Target: p99 at
  most 2 s.
- ``switch``: a time-slice switch, i.e. a freeze/thaw pair
  (``Engine.pause`` then ``Engine.unpause`` of a running container over the
  pooled SSH connection), p50 and p99 over ``--pairs`` pairs (default 50);
  and a checkpoint migration of a small job between the two hosts
  (``gctl migrate``: the intent, SIGTERM and checkpoint, the job directory
  copied over, the next attempt started), from the operator's request to the
  store showing the job running on the target with the new container
  running, p50 and max over ``--migrations`` moves (default 5). Each move is
  checked to resume past step 0 (``starts.log``). Target: at most 3 s.
- ``evict``: a production job submitted onto a cluster whose GPUs are all
  held by opportunistic jobs (2 test hosts x 2 emulated GPUs, four 1-GPU
  opportunistic jobs that checkpoint through the SDK), from its submission
  to its container running, p50 and p99 over ``--evictions`` rounds (default
  20): the daemon requeues one opportunistic job at its checkpoint, then
  starts the production job on the GPU it gave back. Each round waits for
  the production job to end and the evicted job to run again. Target: p99
  at most 2 s (issue 20).
- ``tgs``: TGS rate control on one emulated GPU of h1: a production job
  computing half of each 0.1 s step (``--gpu-busy 0.5``), and an
  opportunistic one that would compute all the time (``--gpu-busy 1.0``),
  placed beside it. The production job's step rate alone (R), beside the
  opportunistic job without control (the daemon's ``rate_control=None``),
  and with control (default options); the opportunistic job's share of the
  GPU in both; how long after it started the controller left slow start.
  Targets: production at least 95 % of R, the opportunistic job at least
  half of the GPU time production leaves idle, settled within 60 s.
- ``reactive``: one reactive pass (:func:`gctl.daemon.passes.reactive_pass`)
  over ``--nodes`` nodes of 8 emulated GPUs (default 1,000) and
  ``--pending`` pending 1-GPU jobs (default 10,000) in a SQLite store; host
  actions are skipped (:class:`NoContainerSite` starts no container and
  contacts no host), so this measures the store, the policy and the apply
  bookkeeping: decisions committed per second (target at least 5,000), and
  where the time went (snapshot read, policy, apply).

The host parts start the test hosts with ``scripts/testhosts.sh start 2``
and stop them at the end (hosts that were already running are left running);
they need root, and must not run beside the host tests (both use hosts h1 and
h2, and each removes every job container there when done). Run:
``.venv/bin/python bench/daemon.py [--part submit|switch|evict|tgs|reactive|all]``
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any, cast

from sqlalchemy import func, select, update

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [
    str(REPO / "tests" / "hosts"),
    str(REPO / "tests" / "support"),
    str(REPO / "tests" / "store"),
]

import testhosts  # noqa: E402
from daemonkit import job_file  # noqa: E402
from sitekit import NoContainerSite  # noqa: E402
from storekit import bulk_nodes  # noqa: E402

from gctl.core.decisions import Decision, Place, Queue  # noqa: E402
from gctl.core.policy import Policy, load_policy  # noqa: E402
from gctl.core.state import ClusterState  # noqa: E402
from gctl.core.tgs import RateControl  # noqa: E402
from gctl.daemon import passes  # noqa: E402
from gctl.daemon.apply import Applied, Applier  # noqa: E402
from gctl.daemon.inflight import Inflight  # noqa: E402
from gctl.daemon.loop import Daemon, DaemonConfig  # noqa: E402
from gctl.daemon.metrics import DaemonMetrics  # noqa: E402
from gctl.hosts.engine import ContainerSpec  # noqa: E402
from gctl.hosts.ssh import Pool  # noqa: E402
from gctl.services import db, hostops, jobs, nodes, specs  # noqa: E402
from gctl.store.engine import transaction  # noqa: E402
from gctl.store.identity import store_id  # noqa: E402
from gctl.store.models import (  # noqa: E402
    AllocationRow,
    EventRow,
    GpuRow,
    IntentRow,
    JobRow,
    JobStateRow,
    NodeRow,
)

IMAGE = "gctl-test/train:1"
TRAIN = ("python3", "/opt/gctl/train.py")
EMULATED = "emulated GPUs"


# --- small helpers -----------------------------------------------------------------------------


def _q(values: list[float], q: float) -> float:
    """The ``q`` quantile of ``values`` (nearest rank: p99 of 100 is the 99th smallest)."""
    ordered = sorted(values)
    return ordered[max(0, min(len(ordered) - 1, math.ceil(q * len(ordered)) - 1))]


def _wait(what: str, check: Callable[[], bool], timeout: float, every: float = 0.05) -> None:
    """Poll ``check`` until it holds; RuntimeError naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(every)
    raise RuntimeError(f"timed out after {timeout:.0f} s waiting for {what}")


def _epoch(stamp: str) -> float:
    """Docker's RFC 3339 time (nanoseconds, ``Z``) as epoch seconds."""
    main, _, frac = stamp.rstrip("Z").partition(".")
    base = datetime.fromisoformat(main + "+00:00").timestamp()
    return base + (float(f"0.{frac}") if frac else 0.0)


def _docker(host: dict[str, Any], *argv: str) -> str:
    """Run ``docker -H <host's engine> ARGV`` here; its stdout."""
    return subprocess.run(
        ["docker", "-H", host["docker_host"], *argv], capture_output=True, text=True, check=True
    ).stdout


def _containers(host: dict[str, Any], *filters: str) -> list[dict[str, Any]]:
    """``docker inspect`` of every gctl job container on ``host`` matching the label filters."""
    args = ["ps", "-aq", "--filter", "label=gctl.job"]
    for f in filters:
        args += ["--filter", f"label={f}"]
    found = _docker(host, *args).split()
    return json.loads(_docker(host, "inspect", *found)) if found else []


def _remove_job_containers() -> None:
    """Remove every gctl job container on the test hosts (as the host tests' cleanup does)."""
    for h in testhosts.env()["hosts"]:
        found = _docker(h, "ps", "-aq", "--filter", "label=gctl.job").split()
        if found:
            _docker(h, "rm", "-f", *found)


def _hosts_up() -> bool:
    """Whether test hosts h1 and h2 already run (then they are someone's: left running)."""
    try:
        found = testhosts.env()["hosts"]
    except RuntimeError:
        return False
    up = [h for h in found if h["ssh_running"] and h["docker_running"]]
    return len(up) >= 2


def _host_store(info: dict[str, Any], path: Path, gpus: str) -> db.Store:
    """A SQLite store at ``path`` with every test host as a node with emulated GPUs ``gpus``."""
    store = db.connect(str(path))
    db.upgrade(store)
    for h in info["hosts"]:
        nodes.add_node(
            store, h["name"], h["host"], port=h["port"], ssh_user=h["user"],
            key_path=info["key"], emulate_gpus=gpus, host_key_fingerprint=h["fingerprint"],
            work_dir=h["work_dir"],
        )  # fmt: skip
    return store


def _submit(store: db.Store, *argv: str, job_class: str = "production") -> int:
    """Submit one 1-GPU training job of the test image; its id."""
    req = specs.build(image=IMAGE, command=[*TRAIN, *argv], gpus=1, job_class=job_class)
    return jobs.submit(store, [req])[0]


def _job(store: db.Store, job_id: int) -> JobRow:
    """The job's row as the store has it now."""
    with transaction(store.engine, write=False) as s:
        row = s.get(JobRow, job_id)
        assert row is not None
        return row


def _states(store: db.Store) -> str:
    """How many jobs are in each state, for a timeout's message."""
    with transaction(store.engine, write=False) as s:
        got = s.execute(select(JobRow.state, func.count()).group_by(JobRow.state)).all()
    return ", ".join(f"{n} {state}" for state, n in got)


class _Recorded(DaemonMetrics):
    """The daemon's metrics, also keeping how long each carried-out decision took."""

    def __init__(self, store: db.Store) -> None:
        super().__init__(store)
        self.took: dict[str, list[float]] = {}

    def decided(self, kind: str, seconds: float) -> None:
        """Count the decision as the daemon does, and keep its duration."""
        super().decided(kind, seconds)
        self.took.setdefault(kind, []).append(seconds)


@contextlib.contextmanager
def _daemon(store: db.Store, metrics: DaemonMetrics, **config: Any) -> Iterator[Daemon]:
    """A :class:`Daemon` running in a thread (ready: first reconcile done) until the block ends."""
    daemon = Daemon(store, load_policy("gandiva"), DaemonConfig(**config), metrics)
    stop, ready = threading.Event(), threading.Event()
    failed: list[BaseException] = []

    def run() -> None:
        try:
            daemon.run(stop, on_ready=ready.set)
        except BaseException as exc:  # reported below, in the bench's thread
            failed.append(exc)
            ready.set()

    thread = threading.Thread(target=run, name="gctl-daemon", daemon=True)
    thread.start()
    ready.wait(120)
    try:
        if failed:
            raise RuntimeError(f"the daemon did not start: {failed[0]!r}")
        yield daemon
    finally:
        stop.set()
        thread.join(120)
    if failed:
        raise RuntimeError(f"the daemon failed: {failed[0]!r}")


# --- submit -> container running ---------------------------------------------------------------


def bench_submit(info: dict[str, Any], args: argparse.Namespace, tmp: Path) -> None:
    """Submit ``--jobs`` jobs at a steady rate; print submit -> container running p50/p99."""
    gpus = max(64, math.ceil(args.jobs / len(info["hosts"])))
    store = _host_store(info, tmp / "submit.db", f"{gpus}xV100-16GB")
    metrics = _Recorded(store)
    config = {
        "tick": args.tick,
        "introspect_every": 3600.0,
        "state_dir": tmp / "submit-state",
    }
    ids: list[int] = []
    try:
        with _daemon(store, metrics, **config):
            first = due = time.monotonic()
            for _ in range(args.jobs):
                ids.append(_submit(store, "--steps", "100000", "--step-time", "0.5"))
                due += args.interval
                time.sleep(max(0.0, due - time.monotonic()))
            submitted = time.monotonic() - first

            def all_running() -> bool:
                with transaction(store.engine, write=False) as s:
                    left = s.scalar(
                        select(func.count()).where(JobRow.id.in_(ids), JobRow.state != "RUNNING")
                    )
                return left == 0

            try:
                _wait(f"all {args.jobs} jobs RUNNING", all_running, args.timeout, every=0.2)
            except RuntimeError as exc:
                raise RuntimeError(f"{exc} ({_states(store)})") from None
        with transaction(store.engine, write=False) as s:
            submit_at = dict(s.execute(select(JobRow.id, JobRow.submit_time)).all())
            running_at = dict(
                s.execute(
                    select(JobStateRow.job_id, func.min(JobStateRow.at))
                    .where(JobStateRow.state == "RUNNING")
                    .group_by(JobStateRow.job_id)
                ).all()
            )
        started: dict[int, float] = {}
        for h in info["hosts"]:
            for c in _containers(h, "gctl.attempt=0"):
                if c["State"]["Running"]:
                    started[int(c["Config"]["Labels"]["gctl.job"])] = _epoch(
                        c["State"]["StartedAt"]
                    )
    finally:
        _remove_job_containers()
    missing = [j for j in ids if j not in started]
    if missing:
        raise RuntimeError(f"{len(missing)} job(s) have no running container: {missing[:10]}")
    to_container = [started[j] - submit_at[j] for j in ids]
    to_store = [running_at[j] - submit_at[j] for j in ids]
    place = metrics.took.get("place", [])
    label = (
        f"{args.jobs} 1-GPU jobs, one every {1000 * args.interval:.0f} ms, 2 test hosts"
        f" x {gpus} {EMULATED}, daemon tick {args.tick:g} s"
    )
    print(f"submit -> container running ({label}):")
    print(
        f"  container StartedAt: p50 {_q(to_container, 0.5):.2f} s,"
        f" p99 {_q(to_container, 0.99):.2f} s, max {max(to_container):.2f} s"
        f" (target p99 <= 2 s: {'met' if _q(to_container, 0.99) <= 2 else 'MISSED'})"
    )
    print(
        f"  store RUNNING recorded: p50 {_q(to_store, 0.5):.2f} s,"
        f" p99 {_q(to_store, 0.99):.2f} s, max {max(to_store):.2f} s"
    )
    if place:
        print(
            f"  the daemon's Place latency metric (a start until its batch is recorded):"
            f" p50 {1000 * _q(place, 0.5):.0f} ms,"
            f" p99 {1000 * _q(place, 0.99):.0f} ms ({len(place)} places);"
            f" submissions took {submitted:.1f} s"
        )


def _started(info: dict[str, Any], job_id: int) -> float | None:
    """When the job's first container started (docker's StartedAt), if it has one."""
    for h in info["hosts"]:
        for c in _containers(h, f"gctl.job={job_id}"):
            return _epoch(c["State"]["StartedAt"])
    return None


def _evict_once(info: dict[str, Any], store: db.Store) -> float:
    """Submit a short production job; seconds to its container start (it is left to end)."""
    submitted = time.time()
    prod = _submit(store, "--steps", "10", "--step-time", "0.05")
    _wait("the production job running", lambda: _job(store, prod).state == "RUNNING", 60)
    _wait("its container started", lambda: _started(info, prod) is not None, 30)
    start = _started(info, prod)
    assert start is not None
    _wait("the production job done", lambda: _job(store, prod).state == "COMPLETED", 60)
    return start - submitted


def bench_evict(info: dict[str, Any], args: argparse.Namespace, tmp: Path) -> None:
    """Production jobs onto GPUs all held by opportunistic ones: submit -> running, p50/p99."""
    store = _host_store(info, tmp / "evict.db", "2xV100-16GB")
    metrics = _Recorded(store)
    config = {"tick": args.tick, "introspect_every": 3600.0, "state_dir": tmp / "evict-state"}
    long = ("--steps", "100000", "--step-time", "0.1")
    took: list[float] = []
    try:
        with _daemon(store, metrics, **config):
            guests = [_submit(store, *long, job_class="opportunistic") for _ in range(4)]

            def guests_running() -> bool:
                rows = [_job(store, g) for g in guests]
                return all(r.state == "RUNNING" and r.mechanism == "checkpoint" for r in rows)

            for _ in range(args.evictions):
                _wait("every opportunistic job running", guests_running, 120)
                time.sleep(1.0)  # past their first steps
                took.append(_evict_once(info, store))
    finally:
        _remove_job_containers()
    requeues = metrics.took.get("requeue", [])
    print(
        f"production onto GPUs all held by opportunistic jobs ({args.evictions} rounds,"
        f" 2 test hosts x 2 {EMULATED}, daemon tick {args.tick:g} s):"
    )
    print(
        f"  submit -> container StartedAt: p50 {_q(took, 0.5):.2f} s,"
        f" p99 {_q(took, 0.99):.2f} s, max {max(took):.2f} s"
        f" (target p99 <= 2 s: {'met' if _q(took, 0.99) <= 2 else 'MISSED'});"
        f" {len(requeues)} evictions (requeue at a checkpoint)"
    )


def _step_rate(info: dict[str, Any], store: db.Store, job_id: int, seconds: float) -> float:
    """The job's steps a second over ``seconds``, from its progress reports on h1."""

    def step() -> int:
        text = job_file(info, store, "h1", job_id, "progress.json")
        return int(json.loads(text)["step"]) if text else 0

    first, began = step(), time.monotonic()
    time.sleep(seconds)
    return (step() - first) / (time.monotonic() - began)


def _tgs_round(
    info: dict[str, Any], tmp: Path, name: str, control: RateControl | None, measure: float
) -> tuple[float, float, float, float | None]:
    """R alone, production beside the guest, the guest's GPU share, seconds to AIMD."""
    store = _host_store(info, tmp / f"tgs-{name}.db", "1xV100-16GB")
    nodes.set_admin_state(store, "h2", "drain", "only h1 in this bench")
    busy = ("--steps", "100000", "--step-time", "0.1", "--gpu-busy")
    prod = jobs.submit(
        store,
        [specs.build(image=IMAGE, command=[*TRAIN, *busy, "0.5"], gpus=1,
                     env=["GCTL_EMULATED_UTIL=50"])],
    )[0]  # fmt: skip
    config = {"tick": 0.3, "heartbeat_every": 0.5, "state_dir": tmp / f"tgs-{name}-state"}
    try:
        with _daemon(store, _Recorded(store), rate_control=control, **config):
            _wait("production reporting", lambda: _job(store, prod).mechanism == "checkpoint", 60)
            time.sleep(2.0)
            alone = _step_rate(info, store, prod, measure)
            guest = jobs.submit(
                store,
                [specs.build(image=IMAGE, command=[*TRAIN, *busy, "1.0"], gpus=1,
                             env=["GCTL_EMULATED_UTIL=100"], job_class="opportunistic")],
            )[0]  # fmt: skip
            _wait("the guest running", lambda: _job(store, guest).state == "RUNNING", 60)
            ran = time.time()
            time.sleep(45.0 if control is not None else 10.0)
            beside = _step_rate(info, store, prod, measure)
            share = _step_rate(info, store, guest, measure) * 0.1
            with transaction(store.engine, write=False) as s:
                rows = s.execute(
                    select(EventRow.at, EventRow.data).where(
                        EventRow.job_id == guest, EventRow.kind == "job.throttle"
                    )
                ).all()
            aimd = [at for at, data in rows if data.get("phase") == "aimd"]
    finally:
        _remove_job_containers()
    return alone, beside, share, (min(aimd) - ran) if aimd else None


def bench_tgs(info: dict[str, Any], args: argparse.Namespace, tmp: Path) -> None:
    """Production beside an opportunistic job on one emulated GPU, without and with control."""
    m = args.measure
    alone, free, free_share, _ = _tgs_round(info, tmp, "none", None, m)
    alone2, held, held_share, settled = _tgs_round(info, tmp, "tgs", RateControl(), m)
    idle = 0.5  # production computes half of each step
    print(f"TGS on one {EMULATED[:-1]} of h1 (production --gpu-busy 0.5, guest --gpu-busy 1.0):")
    print(
        f"  no control: production {free:.2f} steps/s = {free / alone:.1%} of R ({alone:.2f});"
        f" the guest got {free_share:.1%} of the GPU"
    )
    met = held >= 0.95 * alone2 and held_share >= 0.5 * idle and settled is not None
    print(
        f"  with control: production {held:.2f} steps/s = {held / alone2:.1%} of R ({alone2:.2f});"
        f" the guest got {held_share:.1%} of the GPU ({held_share / idle:.0%} of what production"
        f" leaves idle); slow start over {settled if settled is None else round(settled)} s"
        f" after the guest started (targets >= 95 %, >= 50 %, <= 60 s:"
        f" {'met' if met and settled is not None and settled <= 60 else 'MISSED'})"
    )


# --- time-slice switch and checkpoint migration -------------------------------------------------


def _node_row(store: db.Store, name: str) -> NodeRow:
    """The stored node ``name``."""
    with transaction(store.engine, write=False) as s:
        return s.scalars(select(NodeRow).where(NodeRow.name == name)).one()


def bench_freeze_thaw(store: db.Store, args: argparse.Namespace) -> None:
    """Time ``--pairs`` pause + unpause pairs of one running container on h1; print p50/p99.

    Runs before any daemon does (a daemon's reconcile removes containers of
    jobs it does not know).
    """
    row = _node_row(store, "h1")
    sid = store_id(store.engine)
    with Pool() as pool:
        engine = hostops.engine(pool, row, sid)
        engine.info()  # the connection and API version once, as a running daemon has them
        spec = ContainerSpec(
            job_id=990001, attempt=0, node=row.name, store_id=sid, image=IMAGE,
            command=(*TRAIN, "--steps", "1000000", "--step-time", "0.05"),
            gpu_indices=(0,), gpu_uuids=("GPU-emulated-h1-0",),
            job_dir=hostops.job_dir(row, sid, 990001, 0), emulated=True,
        )  # fmt: skip
        cid = engine.start(spec)
        try:
            _wait("the container to run", lambda: engine.state(cid).running, 30)
            engine.pause(cid)  # one untimed pair: the channels are open and warm after it
            assert engine.state(cid).paused, "docker pause did not freeze the container"
            engine.unpause(cid)
            pairs, pauses, thaws = [], [], []
            for _ in range(args.pairs):
                t0 = time.perf_counter()
                engine.pause(cid)
                t1 = time.perf_counter()
                engine.unpause(cid)
                t2 = time.perf_counter()
                pauses.append(t1 - t0)
                thaws.append(t2 - t1)
                pairs.append(t2 - t0)
            assert engine.state(cid).running and not engine.state(cid).paused
        finally:
            engine.remove(cid)
            engine.close()
    print(f"time-slice switch, freeze + thaw pair (docker pause/unpause over SSH, {EMULATED}):")
    print(
        f"  pair: p50 {1000 * _q(pairs, 0.5):.1f} ms, p99 {1000 * _q(pairs, 0.99):.1f} ms"
        f" ({args.pairs} pairs); pause p50 {1000 * _q(pauses, 0.5):.1f} ms,"
        f" unpause p50 {1000 * _q(thaws, 0.5):.1f} ms"
    )


def _starts(info: dict[str, Any], store: db.Store, node: str, job_id: int) -> list[tuple[int, int]]:
    """``(attempt, step resumed at)`` of every start of the job on ``node`` (its starts.log)."""
    text = job_file(info, store, node, job_id, "starts.log")
    return [(int(a), int(s)) for a, s in (line.split() for line in text.splitlines())]


def _moved(store: db.Store, job_id: int, intent_id: int, dst: str, attempt: int) -> bool:
    """Whether the store shows the move done: RUNNING on ``dst`` only, next attempt, no op."""
    with transaction(store.engine, write=False) as s:
        intent = s.get(IntentRow, intent_id)
        if intent is not None and intent.status == "failed":
            raise RuntimeError(f"migrate of job {job_id} failed: {intent.result}")
        row = s.get(JobRow, job_id)
        assert row is not None
        if row.state != "RUNNING" or row.op is not None or row.attempt != attempt:
            return False
        on = s.scalars(
            select(NodeRow.name)
            .join(GpuRow, GpuRow.node_id == NodeRow.id)
            .join(AllocationRow, AllocationRow.gpu_id == GpuRow.id)
            .where(AllocationRow.job_id == job_id)
            .distinct()
        ).all()
    return list(on) == [dst]


def _migrate_once(store: db.Store, info: dict[str, Any], job_id: int) -> tuple[float, str, int]:
    """Migrate the job to the other host; seconds to running there, the target, resumed step."""
    row = _job(store, job_id)
    src = jobs.show_job(store, job_id).view.nodes[0]
    dst = "h2" if src == "h1" else "h1"
    attempt = row.attempt + 1
    host = next(h for h in info["hosts"] if h["name"] == dst)
    asked = time.time()
    jobs.act(store, job_id, "migrate", to=dst)
    with transaction(store.engine, write=False) as s:
        intent_id = s.scalar(select(func.max(IntentRow.id)).where(IntentRow.job_id == job_id))
    assert intent_id is not None
    _wait("the move in the store", lambda: _moved(store, job_id, intent_id, dst, attempt), 60, 0.01)
    found: list[dict[str, Any]] = []

    def new_container_runs() -> bool:
        found[:] = _containers(host, f"gctl.job={job_id}", f"gctl.attempt={attempt}")
        return bool(found) and bool(found[0]["State"]["Running"])

    _wait("the new container to run", new_container_runs, 30, 0.01)
    with transaction(store.engine, write=False) as s:
        recorded = s.scalar(
            select(func.max(JobStateRow.at)).where(
                JobStateRow.job_id == job_id, JobStateRow.state == "RUNNING"
            )
        )
    assert recorded is not None
    took = max(recorded, _epoch(found[0]["State"]["StartedAt"])) - asked

    def logged() -> bool:
        return any(a == attempt for a, _ in _starts(info, store, dst, job_id))

    _wait(f"attempt {attempt} in starts.log on {dst}", logged, 30)
    step = next(s for a, s in _starts(info, store, dst, job_id) if a == attempt)
    return took, dst, step


def bench_migrate(
    store: db.Store, info: dict[str, Any], args: argparse.Namespace, tmp: Path
) -> None:
    """Migrate one small job back and forth ``--migrations`` times; print p50/max and progress."""
    config = {
        "tick": args.tick,
        "introspect_every": 3600.0,
        "heartbeat_every": 0.5,  # the profile pass learns the job uses the SDK
        "reconcile_every": 30.0,
        "grace": 10.0,
        "state_dir": tmp / "switch-state",
    }
    took: list[float] = []
    resumed: list[int] = []
    try:
        with _daemon(store, DaemonMetrics(store), **config):
            job_id = _submit(store, "--steps", "100000", "--step-time", "0.05")
            _wait(
                "the job to run and be known to checkpoint",
                lambda: _job(store, job_id).mechanism == "checkpoint",
                60,
            )
            for _ in range(args.migrations):
                time.sleep(args.settle)  # let it make progress (and a checkpoint) between moves
                seconds, dst, step = _migrate_once(store, info, job_id)
                if step <= 0 or (resumed and step < resumed[-1]):
                    raise RuntimeError(f"job {job_id} resumed at step {step} on {dst}: no progress")
                took.append(seconds)
                resumed.append(step)
    finally:
        _remove_job_containers()
    print(
        f"checkpoint migration h1 <-> h2 (1-GPU train.py, 0.05 s steps, {EMULATED},"
        f" daemon tick {args.tick:g} s):"
    )
    print(
        f"  request -> RUNNING on target with new container running: p50"
        f" {statistics.median(took):.2f} s, max {max(took):.2f} s ({len(took)} moves;"
        f" target <= 3 s: {'met' if max(took) <= 3 else 'MISSED'})"
    )
    print(f"  resumed at steps {', '.join(map(str, resumed))} (progress kept across every move)")


def bench_switch(info: dict[str, Any], args: argparse.Namespace, tmp: Path) -> None:
    """Freeze/thaw pairs, then checkpoint migrations, on a store of the two test hosts."""
    store = _host_store(info, tmp / "switch.db", "2xV100-16GB")
    try:
        bench_freeze_thaw(store, args)
    finally:
        _remove_job_containers()
    bench_migrate(store, info, args, tmp)


# --- one reactive pass at scale, no host actions -----------------------------------------------


class _TimedPolicy:
    """A policy wrapper that adds up the time spent in :meth:`schedule`."""

    def __init__(self, policy: Policy) -> None:
        self.policy = policy
        self.name = policy.name
        self.seconds = 0.0

    def schedule(self, state: ClusterState, now: float) -> list[Decision]:
        """The wrapped policy's decisions, timed."""
        started = time.perf_counter()
        try:
            return self.policy.schedule(state, now)
        finally:
            self.seconds += time.perf_counter() - started

    def introspect(self, state: ClusterState, now: float) -> list[Decision]:
        """The wrapped policy's introspective decisions."""
        return self.policy.introspect(state, now)

    def wants_introspection(self, state: ClusterState) -> bool:
        """Whether the wrapped policy would introspect."""
        return self.policy.wants_introspection(state)


@contextlib.contextmanager
def _timed_steps(names: Iterable[str]) -> Iterator[dict[str, float]]:
    """Time the named functions of :mod:`gctl.daemon.passes` while the block runs.

    reactive_pass looks them up in its module at each call, so wrapping the
    module's names times exactly its own steps; they are put back after. The
    module's ``Applier`` is also swapped for one that times its decisions and
    its sharing-mode write apart.
    """
    took: dict[str, float] = {}
    saved = {n: getattr(passes, n) for n in (*names, "Applier")}

    def timed(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def call(*a: Any, **kw: Any) -> Any:
            started = time.perf_counter()
            try:
                return fn(*a, **kw)
            finally:
                took[name] = took.get(name, 0.0) + time.perf_counter() - started

        return call

    class TimedApplier(Applier):
        """The daemon's applier, timing its two steps: the decisions, then the sharing modes."""

        def apply(self, decisions: list[Decision]) -> Applied:
            """Carry out the decisions (timed)."""
            return cast(Applied, timed("decisions", super().apply)(decisions))

        def sync_modes(self) -> None:
            """Record the sharing modes (timed)."""
            timed("sharing modes", super().sync_modes)()

    for name, fn in saved.items():
        setattr(passes, name, TimedApplier if name == "Applier" else timed(name, fn))
    try:
        yield took
    finally:
        for name, fn in saved.items():
            setattr(passes, name, fn)


def bench_reactive(args: argparse.Namespace, tmp: Path) -> None:
    """One reactive pass over ``--pending`` jobs on ``--nodes`` nodes; print decisions/s."""
    store = db.connect(str(tmp / "reactive.db"))
    db.upgrade(store)
    bulk_nodes(store, args.nodes, "nvlink")
    with transaction(store.engine, write=True) as s:
        s.execute(update(NodeRow).values(emulated=True))
        s.execute(update(GpuRow).values(emulated=True))
    req = specs.build(image=IMAGE, command=[*TRAIN, "--steps", "100"], gpus=1)
    job_ids = jobs.submit(store, [req] * args.pending)
    policy = _TimedPolicy(load_policy("gandiva"))

    def observe(kind: str, seconds: float) -> None:
        """The daemon's per-decision metric: not needed here."""

    inflight = Inflight()
    with Pool() as pool:
        site = NoContainerSite(store, pool, tmp / "reactive-mirror")
        with _timed_steps(("read", "decide_and_apply")) as took:
            started = time.perf_counter()
            applied = passes.reactive_pass(site, policy, time.time(), observe, inflight)
            total = time.perf_counter() - started
    inflight.close()
    with transaction(store.engine, write=False) as s:
        holding = set(s.scalars(select(AllocationRow.job_id).distinct()))
    placed = [d for d in applied.done if isinstance(d, Place) and int(d.job_id) in holding]
    queued = [d for d in applied.done if isinstance(d, Queue)]
    kinds: dict[str, int] = {}
    for d in applied.done:
        if not isinstance(d, Place | Queue):
            kinds[type(d).__name__] = kinds.get(type(d).__name__, 0) + 1
    others = ", ".join(f"{n:,} {k}" for k, n in sorted(kinds.items())) or "no other"
    committed = len(placed) + len(queued)
    apply_s = took.get("decide_and_apply", 0.0)
    print(
        f"reactive pass, {args.nodes:,} nodes x 8 {EMULATED}, {len(job_ids):,} pending 1-GPU jobs"
        " (host actions skipped: no container is started, no host contacted):"
    )
    rate = committed / total
    print(
        f"  {committed:,} decisions committed ({len(placed):,} Place with allocation rows,"
        f" {len(queued):,} Queue) in {total:.2f} s: {rate:,.0f} decisions/s"
        f" (target >= 5,000: {'met' if rate >= 5000 else 'MISSED'})"
    )
    print(
        f"  also carried out: {others}; {len(applied.failed)} refused;"
        f" all {len(applied.done):,} carried out: {len(applied.done) / total:,.0f}/s"
    )
    print(
        f"  split: snapshot read {took.get('read', 0.0):.3f} s, policy {policy.seconds:.3f} s,"
        f" apply {apply_s:.3f} s (decisions {took.get('decisions', 0.0):.3f} s,"
        f" sharing modes {took.get('sharing modes', 0.0):.3f} s)"
    )


# --- main --------------------------------------------------------------------------------------


def main() -> None:
    """Parse the options and run the chosen parts."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parts = ("submit", "switch", "evict", "tgs", "reactive", "all")
    parser.add_argument("--part", choices=parts, default="all")
    parser.add_argument("--evictions", type=int, default=20, help="evict: rounds")
    parser.add_argument("--measure", type=float, default=15.0, help="tgs: seconds per rate")
    parser.add_argument("--tick", type=float, default=0.2, help="daemon tick, seconds")
    parser.add_argument("--jobs", type=int, default=100, help="submit: jobs submitted")
    parser.add_argument("--interval", type=float, default=0.05, help="submit: seconds apart")
    parser.add_argument("--timeout", type=float, default=300.0, help="submit: wait at most")
    parser.add_argument("--pairs", type=int, default=50, help="switch: freeze/thaw pairs")
    parser.add_argument("--migrations", type=int, default=5, help="switch: migrations")
    parser.add_argument("--settle", type=float, default=1.0, help="switch: seconds between moves")
    parser.add_argument("--nodes", type=int, default=1000, help="reactive: nodes of 8 GPUs")
    parser.add_argument("--pending", type=int, default=10_000, help="reactive: pending jobs")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        if args.part in ("submit", "switch", "evict", "tgs", "all"):
            already = _hosts_up()
            info = testhosts.start(2)
            try:
                if args.part in ("submit", "all"):
                    bench_submit(info, args, tmp)
                if args.part in ("switch", "all"):
                    bench_switch(info, args, tmp)
                if args.part in ("evict", "all"):
                    bench_evict(info, args, tmp)
                if args.part in ("tgs", "all"):
                    bench_tgs(info, args, tmp)
            finally:
                if not already:
                    testhosts.stop()
        if args.part in ("reactive", "all"):
            bench_reactive(args, tmp)


if __name__ == "__main__":
    main()
