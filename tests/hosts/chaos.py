"""Fault injection on the test hosts while ``gctl daemon`` runs jobs: the invariants that must hold.

:func:`run_chaos` starts the real ``gctl daemon`` (a child process), keeps a
stream of job-SDK training jobs coming, and injects faults drawn at random
while they run:

- ``kill9``: SIGKILL of the daemon, started again at once;
- ``ssh``: a host's sshd stopped, started again later (a host cut off);
- ``freeze``: a host's sshd and its sessions stopped with SIGSTOP, then
  SIGCONT (a host that hangs);
- ``engine``: a host's dockerd stopped as a service stop would (its jobs
  get SIGTERM), then started again;
- ``rekey``: a host's SSH key changed (refused), then the new key accepted
  in the store, as an operator would.

A fault on a host lasts from a fraction of the node timeout to well past it.
Throughout, a monitor checks, and at the end the run checks:

1. no job is COMPLETED before its last step (its newest job directory says so);
2. no job has two live containers for longer than the node timeout plus one
   reconcile (plus a little slack for the observations' own period);
3. no GPU is held by two jobs outside time slicing or packing;
4. no job is lost or ends twice: each ends COMPLETED exactly once;
5. every job finishes once the faults stop;
6. no checkpoint of one attempt is overwritten by another: in each
   attempt's directory, once that attempt has checkpointed, every later
   checkpoint is its own (``checkpoints.log``, written by the test image);
7. nothing is left behind (allocations, containers) and the daemon's log has
   no traceback.

Used by ``tests/hosts/test_chaos.py`` (CI, at least 30 faults) and
``bench/chaos.py`` (300 and more).
"""

from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import testhosts
from sqlalchemy import select, update

from gctl.services import db, jobs, specs
from gctl.store.engine import transaction
from gctl.store.identity import store_id
from gctl.store.models import AllocationRow, EventRow, JobRow, JobStateRow, NodeRow

GCTL = str(Path(sys.executable).with_name("gctl"))
STEPS = 40
STEP_TIME = 0.1
NODE_TIMEOUT = 6.0
RECONCILE_EVERY = 2.0
HEARTBEAT_EVERY = 0.5
SLACK = 3.0
"""Seconds over node timeout + reconcile within which a second live container may linger."""
FAULTS = ("kill9", "ssh", "freeze", "engine", "rekey")


@dataclass
class ChaosRun:
    """What one run injected and found."""

    faults: Counter[str] = field(default_factory=Counter)
    jobs: int = 0
    seconds: float = 0.0
    violations: list[str] = field(default_factory=list)
    twice_longest: float = 0.0
    """The longest time a job had two live containers (seconds)."""

    def summary(self) -> str:
        """One line of figures."""
        kinds = ", ".join(f"{n} {k}" for k, n in sorted(self.faults.items()))
        return (
            f"chaos run: {sum(self.faults.values())} faults ({kinds}), {self.jobs} jobs,"
            f" {self.seconds:.0f} s, {len(self.violations)} violations,"
            f" longest double run {self.twice_longest:.1f} s"
        )


def _daemon(url: str, state: Path, log: Any) -> subprocess.Popen[bytes]:
    argv = [GCTL, "--db", url, "daemon", "--tick", "0.2", "--introspect-every", "1"]
    argv += ["--heartbeat-every", str(HEARTBEAT_EVERY), "--reconcile-every", str(RECONCILE_EVERY)]
    argv += ["--node-timeout", str(NODE_TIMEOUT), "--grace", "5", "--state-dir", str(state)]
    argv += ["-o", "quantum=1"]
    return subprocess.Popen(argv, stdout=log, stderr=log)


def _submit(store: db.Store, rng: random.Random) -> int:
    argv = ["python3", "/opt/gctl/train.py", "--steps", str(STEPS), "--step-time", str(STEP_TIME)]
    argv += ["--checkpoint-every", str(rng.choice([4, 8]))]
    return jobs.submit(store, [specs.build(image="gctl-test/train:1", command=argv, gpus=1)])[0]


class _Hosts:
    """The test hosts as the harness sees them directly (their engines' sockets, their files)."""

    def __init__(self, info: dict[str, Any], store: db.Store) -> None:
        self.info = info
        self.sid = store_id(store.engine)
        self.store = store

    def _ps(self, host: dict[str, Any], *args: str) -> list[str]:
        """``docker ps`` on the host's engine, the store's containers only; its lines."""
        label = f"label=gctl.store={self.sid}"
        argv = ["docker", "-H", host["docker_host"], "ps", "--filter", label, *args]
        out = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
        return [line for line in out.stdout.split("\n") if line.strip()]

    def live(self) -> dict[int, list[str]]:
        """The store's running or frozen containers, by job (hosts whose engine is up)."""
        out: dict[int, list[str]] = {}
        for h in self.info["hosts"]:
            for line in self._ps(h, "--format", '{{.Label "gctl.job"}} {{.Names}}'):
                job, name = line.split()
                out.setdefault(int(job), []).append(f"{h['name']}:{name}")
        return out

    def all_containers(self) -> list[str]:
        """Every container of the store on every host, live or not."""
        return [c for h in self.info["hosts"] for c in self._ps(h, "-a", "-q")]

    def attempt_dirs(self, job_id: int) -> list[tuple[int, Path]]:
        """Every attempt directory of the job on every host, oldest attempt first."""
        found: list[tuple[int, Path]] = []
        for h in self.info["hosts"]:
            base = Path(h["work_dir"]) / "stores" / self.sid / "jobs" / str(job_id)
            if base.is_dir():
                found += [(int(p.name[1:]), p) for p in base.iterdir() if p.name[1:].isdigit()]
        return sorted(found)


def _progress(path: Path) -> dict[str, Any]:
    try:
        doc = json.loads((path / "progress.json").read_text())
    except (OSError, ValueError):
        return {}
    return doc if isinstance(doc, dict) else {}


class _Monitor:
    """Checks invariants 1-3 and 6 while the run goes on, in a thread of its own."""

    def __init__(self, hosts: _Hosts, run: ChaosRun) -> None:
        self.hosts = hosts
        self.run = run
        self.stop = threading.Event()
        self._twice_since: dict[int, float] = {}
        self._judged: set[int] = set()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self) -> _Monitor:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self._thread.join(30)

    def _loop(self) -> None:
        while not self.stop.wait(0.3):
            try:
                self.check()
            except Exception as exc:  # a check that cannot run now (a store write lock)
                self.run.violations.append(f"monitor: {type(exc).__name__}: {exc}")

    def check(self) -> None:
        """One round of the running checks."""
        mono = time.monotonic()
        live = self.hosts.live()
        for job, where in live.items():
            if len(where) > 1:
                since = self._twice_since.setdefault(job, mono)
                self.run.twice_longest = max(self.run.twice_longest, mono - since)
                if mono - since > NODE_TIMEOUT + RECONCILE_EVERY + SLACK:
                    self._violation(f"job {job} has two live containers: {', '.join(where)}")
            else:
                self._twice_since.pop(job, None)
        for job in list(self._twice_since):
            if len(live.get(job, [])) < 2:
                del self._twice_since[job]
        self._check_completed()
        _check_gpus(self.hosts.store, self._violation)

    def _check_completed(self) -> None:
        with transaction(self.hosts.store.engine, write=False) as s:
            done = set(s.scalars(select(JobRow.id).where(JobRow.state == "COMPLETED")))
        for job in sorted(done - self._judged):
            self._judged.add(job)
            # A start that failed leaves a directory that never ran: the one that ran
            # last has the newest report.
            reports = [_progress(path) for _, path in self.hosts.attempt_dirs(job)]
            newest = max(reports, key=lambda p: p.get("time") or 0.0, default={})
            if newest.get("step") != STEPS and not newest.get("done"):
                self._violation(f"job {job} COMPLETED at step {newest.get('step')} of {STEPS}")

    def _violation(self, text: str) -> None:
        if text not in self.run.violations:
            self.run.violations.append(text)


def _check_gpus(store: db.Store, violation: Callable[[str], None]) -> None:
    """Every allocation belongs to a job on GPUs; a GPU held twice is time-sliced or packed."""
    with transaction(store.engine, write=False) as s:
        rows = s.execute(
            select(AllocationRow.gpu_id, AllocationRow.mode, JobRow.id, JobRow.state).join(JobRow)
        ).all()
    holders: dict[int, list[str]] = {}
    for gpu, mode, job, state in rows:
        holders.setdefault(gpu, []).append(f"job {job} {state} {mode}")
        if state not in ("RUNNING", "SUSPENDED"):
            violation(f"GPU {gpu} held by job {job}, {state}")
    for gpu, mode, _, _ in rows:
        if len(holders[gpu]) > 1 and mode not in ("time-sliced", "packed"):
            violation(f"GPU {gpu} held by {', '.join(holders[gpu])}")


def _check_checkpoints(hosts: _Hosts, job: int, violation: Callable[[str], None]) -> None:
    """Invariant 6 on every attempt directory of the job."""
    for attempt, path in hosts.attempt_dirs(job):
        try:
            lines = (path / "checkpoints.log").read_text().split("\n")
        except OSError:
            continue
        writers = [int(line.split()[0]) for line in lines if line.strip()]
        if any(w > attempt for w in writers):
            violation(f"job {job}: attempt {attempt}'s directory has a newer attempt's checkpoint")
        if attempt in writers and any(w != attempt for w in writers[writers.index(attempt) :]):
            violation(f"job {job}: attempt {attempt}'s checkpoint overwritten by another run")


class _Faults:
    """Injects faults and ends them when their time is up."""

    def __init__(self, info: dict[str, Any], store: db.Store, rng: random.Random) -> None:
        self.names = [h["name"] for h in info["hosts"]]
        self.store = store
        self.rng = rng
        self.ongoing: dict[str, tuple[str, float]] = {}

    def inject(self, kind: str, host: str) -> None:
        """Start a host fault of ``kind`` on ``host``, ending at a random time."""
        {
            "ssh": testhosts.ssh_stop,
            "freeze": testhosts.freeze,
            "engine": testhosts.engine_stop,
            "rekey": testhosts.rekey,
        }[kind](host)
        length = self.rng.uniform(0.3, 2.0) * NODE_TIMEOUT
        self.ongoing[host] = (kind, time.monotonic() + length)

    def end(self, host: str) -> None:
        """End the fault on ``host``."""
        kind, _ = self.ongoing.pop(host)
        if kind == "ssh":
            testhosts.ssh_start(host)
        elif kind == "freeze":
            testhosts.thaw(host)
        elif kind == "engine":
            testhosts.engine_start(host)
        else:  # the operator accepts the new key
            fingerprint = next(h for h in testhosts.env()["hosts"] if h["name"] == host)
            with transaction(self.store.engine, write=True) as s:
                s.execute(
                    update(NodeRow)
                    .where(NodeRow.name == host)
                    .values(host_key_fingerprint=fingerprint["fingerprint"])
                )

    def end_due(self) -> None:
        """End every fault whose time is up."""
        now = time.monotonic()
        for host, (_, until) in list(self.ongoing.items()):
            if now >= until:
                self.end(host)

    def end_all(self) -> None:
        """End every fault."""
        for host in list(self.ongoing):
            self.end(host)


def run_chaos(
    store: db.Store,
    info: dict[str, Any],
    state: Path,
    faults: int,
    *,
    seed: int = 0,
    kinds: tuple[str, ...] = FAULTS,
) -> ChaosRun:
    """Inject ``faults`` faults of ``kinds`` while jobs run, then let every job finish."""
    rng = random.Random(seed)
    url = str(store.engine.url)
    state.mkdir(parents=True, exist_ok=True)
    log_path = state / "daemon.log"
    run = ChaosRun()
    hosts = _Hosts(info, store)
    injector = _Faults(info, store, rng)
    started = time.monotonic()
    submitted = [_submit(store, rng) for _ in range(6)]
    with log_path.open("ab") as log, _Monitor(hosts, run):
        proc = _daemon(url, state, log)
        try:
            while sum(run.faults.values()) < faults:
                time.sleep(rng.uniform(0.5, 1.5))
                injector.end_due()
                kind = rng.choice(kinds)
                healthy = [h for h in injector.names if h not in injector.ongoing]
                if kind == "kill9":
                    proc.send_signal(signal.SIGKILL)
                    proc.wait()
                    proc = _daemon(url, state, log)
                elif healthy:
                    injector.inject(kind, rng.choice(healthy))
                else:
                    continue
                run.faults[kind] += 1
                if _unfinished(store) < 6:
                    submitted.append(_submit(store, rng))
            injector.end_all()
            deadline = time.monotonic() + 300
            while _unfinished(store) and time.monotonic() < deadline:
                time.sleep(1.0)
            deadline = time.monotonic() + 60  # the last ended containers are removed
            while (_allocated(store) or hosts.all_containers()) and time.monotonic() < deadline:
                time.sleep(1.0)
        finally:
            injector.end_all()
            proc.send_signal(signal.SIGTERM)
            proc.wait(60)
    run.jobs = len(submitted)
    run.seconds = time.monotonic() - started
    _final_checks(store, hosts, submitted, log_path.read_text(errors="replace"), run)
    return run


def _unfinished(store: db.Store) -> int:
    with transaction(store.engine, write=False) as s:
        return sum(1 for st in s.scalars(select(JobRow.state)) if st != "COMPLETED")


def _allocated(store: db.Store) -> int:
    with transaction(store.engine, write=False) as s:
        return len(s.scalars(select(AllocationRow.id)).all())


def _final_checks(
    store: db.Store, hosts: _Hosts, submitted: list[int], log: str, run: ChaosRun
) -> None:
    """Invariants 4-7 once every fault is over."""
    violation = run.violations.append
    with transaction(store.engine, write=False) as s:
        rows = {r.id: r for r in s.scalars(select(JobRow))}
        ends = Counter(s.scalars(select(EventRow.job_id).where(EventRow.kind == "job.end")))
        completed = Counter(
            s.scalars(select(JobStateRow.job_id).where(JobStateRow.state == "COMPLETED"))
        )
    for job in submitted:
        row = rows.get(job)
        if row is None:
            violation(f"job {job} lost from the store")
        elif row.state != "COMPLETED":
            violation(f"job {job} did not finish: {row.state} ({row.reason})")
        elif ends[job] != 1 or completed[job] != 1:
            violation(f"job {job} ended {ends[job]} times, completed {completed[job]} times")
        _check_checkpoints(hosts, job, violation)
    if _allocated(store):
        violation(f"{_allocated(store)} allocation(s) left")
    left = hosts.all_containers()
    if left:
        violation(f"{len(left)} container(s) left")
    if "Traceback" in log:
        at = log.index("Traceback")
        violation(f"the daemon's log has a traceback: {log[at : at + 1500]}")
