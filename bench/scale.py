"""The daemon at many hosts: heartbeat round, tick time, submit to running, memory and CPU.

For each ``--hosts`` count N (default ``10,100``), starts N light hosts with
``scripts/scalehosts.sh`` (each a real sshd on its own loopback address,
sharing ``--engines`` real Docker engines), records them as nodes of 8
emulated V100s in a fresh store (SQLite, or PostgreSQL with
``--postgres``), starts the real ``gctl daemon`` (a child process, default
periods: 1 s tick, 5 s heartbeat, or ``--heartbeat-every``) with
``/metrics``, and measures:

- start: how long until every node has answered a look (``seen``), and
  how many times a node was marked down meanwhile (``downs``: nodes the
  daemon had not reached within ``--node-timeout``);
- idle (``--idle`` seconds, from one heartbeat after every node first
  answered): the daemon's CPU (share of one core) and resident memory, the
  tick time p99 over that window (``idle-tick``: the bucket of the daemon's
  ``gctl_daemon_tick_seconds`` histogram it falls in), the machine's memory
  in use (hosts, engines and daemon together), and the heartbeat round: the
  longest time between two looks at a node (every node is due a look every
  heartbeat period, so this stays near it);
- load: ``--rate`` submissions per second for ``--load`` seconds of short
  job-SDK jobs (1, 2 or 4 GPUs), then until they have all run (at most
  ``RUN_WAIT`` s more): submit to RUNNING p50/p99 of those that ran (from
  the store's state history), the p99 of the jobs neither started on a
  frozen host nor failed to start there (``others``), how many ran, the p50/p99 of the
  placements' own latency (``start``: from when their host action began
  to their record, the container started; the buckets of the daemon's
  ``gctl_decision_latency_seconds{kind="place"}`` they fall in), the tick
  time p99 of the ticks from the end of the idle window to then (the
  start's ticks, while the daemon first connects, are in neither), the
  heartbeat round under load, the daemon's CPU over the load (``load-CPU``,
  share of one core, from the first submission until they have all run)
  and how busy the whole machine was meanwhile (``busy``, share of all its
  cores: hosts, engines, jobs, the store's server and the daemon);
- with ``--freeze K``: K hosts frozen (SIGSTOP of their sshd and sessions)
  half-way through the load, the stream going on; how long until each is
  marked down, against ``--node-timeout`` (default 20 s here);
- ran twice (``twice``): the load's containers that reconcile found still
  running beside their job's later attempt, or of a job no longer
  running, and removed (``job.stray`` events; a container the watchdog
  killed first is not seen);
- stop: seconds from SIGTERM until the daemon exited, and how many hosts'
  watchdogs it told to stand down on its way out (``stood-down``: their
  lease file says so; a watchdog not told stops its jobs once the lease
  lapses, unless a daemon comes back first).

Prints one row per N. Needs root; uses its own hosts (never the test
hosts). GPUs are emulated. On a small machine the hosts' own work (sshd,
agent and watchdog per host, the engines and the jobs) shares the daemon's
cores: all the hosts together weigh as much as the daemon (one CPU cgroup,
``scalehosts.sh``), and the figures include how long the hosts, short of
CPU, take to answer and to start containers.

Run: ``.venv/bin/python bench/scale.py [--hosts 10,100,300] [--postgres]``
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Collection
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

from sqlalchemy import func, select

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "support"))  # scalekit: the light hosts' store, as tests'

from scalekit import light_store  # noqa: E402

from gctl.hosts.agent import LEASE  # noqa: E402
from gctl.services import db, jobs, specs  # noqa: E402
from gctl.services.hostops import agent_dir  # noqa: E402
from gctl.store.engine import transaction  # noqa: E402
from gctl.store.identity import store_id  # noqa: E402
from gctl.store.models import EventRow, JobRow, JobStateRow, NodeRow  # noqa: E402

GCTL = str(Path(sys.executable).with_name("gctl"))
HARNESS = str(ROOT / "scripts" / "scalehosts.sh")
TESTPG = str(ROOT / "scripts" / "testpg.sh")
TRAIN = ["python3", "/opt/gctl/train.py", "--steps", "20", "--step-time", "0.1"]
METRICS_PORT = 9467
HEARTBEAT = 5.0
"""The daemon's heartbeat period by default (its own default)."""
RUN_WAIT = 60.0
"""Seconds the load's jobs get, after the stream, to have all run."""


def _harness(n: int, engines: int) -> dict[str, Any]:
    """Start (or reuse) ``n`` light hosts; their description."""
    out = subprocess.run([HARNESS, "start", str(n), str(engines)], capture_output=True, text=True)
    if out.returncode != 0:
        subprocess.run([HARNESS, "stop"], capture_output=True)
        out = subprocess.run(
            [HARNESS, "start", str(n), str(engines)], capture_output=True, text=True
        )
    if out.returncode != 0:
        sys.exit(f"scalehosts.sh start {n}: {out.stderr.strip()[-500:]}")
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def _cpu_seconds(pid: int) -> float:
    """User and system CPU seconds of a process and its reaped children."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1].split()
    return sum(int(f) for f in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def _rss_mib(pid: int) -> float:
    found = re.search(r"VmRSS:\s+(\d+) kB", Path(f"/proc/{pid}/status").read_text())
    return int(found.group(1)) / 1024 if found else 0.0


def _machine_ticks() -> tuple[int, int]:
    """The machine's busy and total CPU time so far (clock ticks, all cores: ``/proc/stat``)."""
    values = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return sum(values) - values[3] - values[4], sum(values)  # less idle and iowait


def _machine_used_mib() -> float:
    """Memory in use on the machine (MemTotal - MemAvailable): hosts, engines and daemon."""
    info = dict(re.findall(r"(\w+):\s+(\d+) kB", Path("/proc/meminfo").read_text()))
    return (int(info["MemTotal"]) - int(info["MemAvailable"])) / 1024


def _never_answered(store: db.Store) -> int:
    """How many nodes have never answered a look."""
    with transaction(store.engine, write=False) as s:
        return int(s.scalar(select(func.count()).where(NodeRow.last_seen.is_(None))) or 0)


def _downs(store: db.Store) -> int:
    """How many times the daemon has marked a node down (``node.down`` events)."""
    with transaction(store.engine, write=False) as s:
        return int(s.scalar(select(func.count()).where(EventRow.kind == "node.down")) or 0)


def _watch_round(store: db.Store, seconds: float, frozen: Collection[str] = ()) -> float:
    """The heartbeat round over ``seconds``: the longest time between two looks at a node.

    Each node's ``last_seen`` (when its latest answered look began) is read
    every second; a node not looked at again within ``seconds`` waited at
    least that long. ``frozen`` nodes are left out.
    """
    first: dict[str, float | None] = {}
    last: dict[str, float] = {}
    worst = 0.0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        with transaction(store.engine, write=False) as s:
            seen = s.execute(
                select(NodeRow.name, NodeRow.last_seen).where(NodeRow.name.not_in(sorted(frozen)))
            ).all()
        for name, at in seen:
            first.setdefault(name, at)
            before = last.get(name)
            if at is not None and before is not None and at > before:
                worst = max(worst, at - before)
            if at is not None:
                last[name] = at
        time.sleep(1.0)
    stuck = any(last.get(name) == at for name, at in first.items())
    return max(worst, seconds) if stuck else worst


def _metrics() -> str:
    """The daemon's ``/metrics`` page now."""
    with urllib.request.urlopen(f"http://127.0.0.1:{METRICS_PORT}/metrics", timeout=10) as r:
        return r.read().decode()


def _histogram(text: str, name: str, labels: str = "") -> dict[float, float]:
    """Counts so far at or under each bound of histogram ``name`` (``labels`` as 'k="v",')."""
    pattern = name + r"_bucket\{" + re.escape(labels) + r'le="([^"]+)"\} (\S+)'
    return {float(le): float(v) for le, v in re.findall(pattern, text)}


def _bucket(before: dict[float, float], after: dict[float, float], q: float) -> str:
    """The bucket the ``q`` quantile of what was counted between two histograms falls in."""
    counts = sorted((le, after[le] - before.get(le, 0.0)) for le in after)
    total = max((v for _, v in counts), default=0.0)
    for le, count in counts:
        if total and count >= q * total:
            return f"<= {le:g} s" if le != float("inf") else f"> {counts[-2][0]:g} s"
    return "-"


TICK = "gctl_daemon_tick_seconds"
START = ("gctl_decision_latency_seconds", 'kind="place",')
"""A placement's latency: its host action's start to its record, once the container runs."""


def _submit_to_running(store: db.Store, ids: list[int], within: float) -> dict[int, float]:
    """Seconds from submit to first RUNNING of each job that ran (waiting ``within`` s for all)."""
    end = time.monotonic() + within
    while True:
        with transaction(store.engine, write=False) as s:
            first = dict(
                s.execute(
                    select(JobStateRow.job_id, func.min(JobStateRow.at))
                    .where(JobStateRow.job_id.in_(ids), JobStateRow.state == "RUNNING")
                    .group_by(JobStateRow.job_id)
                ).all()
            )
            submitted = dict(
                s.execute(select(JobRow.id, JobRow.submit_time).where(JobRow.id.in_(ids))).all()
            )
        if len(first) == len(ids) or time.monotonic() > end:
            return {j: first[j] - submitted[j] for j in ids if j in first}
        time.sleep(1.0)


def _tried_on(store: db.Store, ids: list[int], names: Collection[str]) -> set[int]:
    """Jobs of ``ids`` started on one of the hosts ``names``, or whose start there failed.

    A start that began on a host just before it froze hangs until the host
    answers again (or fails): such a job is one of the frozen hosts', not
    the others'. So is one whose start there was dropped, not begun in time
    behind one that hung (``job.delay``).
    """
    with transaction(store.engine, write=False) as s:
        found = s.execute(
            select(EventRow.job_id, EventRow.message).where(
                EventRow.job_id.in_(ids), EventRow.kind.in_(["job.error", "job.place", "job.delay"])
            )
        ).all()
    marks = [m for n in names for m in (f": {n}: ", f" on {n}:")]
    return {j for j, text in found if j is not None and any(m in text for m in marks)}


def _p99(waits: list[float]) -> float:
    ranked = sorted(waits)
    return ranked[min(len(ranked) - 1, int(0.99 * len(ranked)))] if ranked else float("nan")


def _freeze(names: list[str], store: db.Store, timeout: float) -> float:
    """Freeze hosts ``names``; seconds until the store has them all down (thawed after)."""
    subprocess.run([HARNESS, "freeze", *names], check=True)
    began = time.monotonic()
    try:
        while time.monotonic() - began < timeout + 60:
            with transaction(store.engine, write=False) as s:
                down = s.scalar(
                    select(func.count()).where(
                        NodeRow.name.in_(names), NodeRow.admin_state == "down"
                    )
                )
            if down == len(names):
                return time.monotonic() - began
            time.sleep(0.5)
        return float("inf")
    finally:
        subprocess.run([HARNESS, "thaw", *names], check=True)


def run_one(n: int, args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    """Every figure for ``n`` hosts."""
    info = _harness(n, args.engines)
    url = args.db_url or str(tmp / f"scale-{n}.db")
    store = light_store(info, url)
    argv = [GCTL, "--db", url, "daemon", "--metrics", f"127.0.0.1:{METRICS_PORT}"]
    argv += ["--state-dir", str(tmp / f"state-{n}"), "--node-timeout", str(args.node_timeout)]
    argv += ["--heartbeat-every", str(args.heartbeat_every)]
    log = (tmp / f"daemon-{n}.log").open("ab")
    daemon = subprocess.Popen(argv, stdout=log, stderr=log)
    row: dict[str, Any] = {"hosts": n}
    try:
        began = time.monotonic()
        while _never_answered(store) and time.monotonic() - began < max(600.0, 2.0 * n):
            time.sleep(0.5)
        row["all_seen_s"] = time.monotonic() - began
        time.sleep(args.heartbeat_every)  # one round after the start's: connections are set up
        row["start_downs"] = _downs(store)
        cpu0, t0, idle = _cpu_seconds(daemon.pid), time.monotonic(), _metrics()
        row["idle_round_s"] = _watch_round(store, args.idle)
        row["idle_cpu"] = (_cpu_seconds(daemon.pid) - cpu0) / (time.monotonic() - t0)
        loaded = _metrics()
        row["idle_tick_p99"] = _bucket(_histogram(idle, TICK), _histogram(loaded, TICK), 0.99)
        row["idle_rss_mib"] = _rss_mib(daemon.pid)
        row["machine_mib"] = _machine_used_mib()
        ids: list[int] = []
        sizes = [1, 1, 1, 2, 4]
        cpu0, busy0 = _cpu_seconds(daemon.pid), _machine_ticks()
        start = time.monotonic()
        names: list[str] = []
        freezing: Future[float] | None = None
        with ThreadPoolExecutor(max_workers=1) as background:
            for k in range(int(args.rate * args.load)):
                while time.monotonic() < start + k / args.rate:
                    time.sleep(0.005)
                req = specs.build(image="gctl-test/train:1", command=TRAIN, gpus=sizes[k % 5])
                ids += jobs.submit(store, [req])
                if args.freeze and k == int(args.rate * args.load) // 2:  # the stream goes on
                    names = [h["name"] for h in info["hosts"][: args.freeze]]
                    freezing = background.submit(_freeze, names, store, args.node_timeout)
            row["load_round_s"] = _watch_round(store, 10.0, names)
        frozen_s = freezing.result() if freezing is not None else None
        waits = _submit_to_running(store, ids, within=RUN_WAIT)
        busy1 = _machine_ticks()
        row["load_cpu"] = (_cpu_seconds(daemon.pid) - cpu0) / (time.monotonic() - start)
        row["load_busy"] = (busy1[0] - busy0[0]) / max(1, busy1[1] - busy0[1])
        row["ran"] = f"{len(waits)}/{len(ids)}"
        row["p50_s"] = statistics.median(waits.values()) if waits else float("nan")
        row["p99_s"] = _p99(list(waits.values()))
        tried = _tried_on(store, ids, names)
        row["p99_others_s"] = _p99([w for j, w in waits.items() if j not in tried])
        done = _metrics()
        row["tick_p99"] = _bucket(_histogram(loaded, TICK), _histogram(done, TICK), 0.99)
        starts = _histogram(loaded, *START), _histogram(done, *START)
        row["start"] = f"{_bucket(*starts, 0.5)[3:]}/{_bucket(*starts, 0.99)[3:]}"
        row["rss_mib"] = _rss_mib(daemon.pid)
        row["frozen_down_s"] = frozen_s
    finally:
        stopping = time.monotonic()
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(120)
        row["stop_s"] = time.monotonic() - stopping
    row["stood_down"] = _stood_down(store)
    row["twice"] = _strays(store, ids)
    return row


def _strays(store: db.Store, ids: list[int]) -> int:
    """How many of the jobs ``ids`` had a container removed by reconcile while it still ran."""
    with transaction(store.engine, write=False) as s:
        query = select(EventRow.job_id).where(
            EventRow.kind == "job.stray", EventRow.job_id.in_(ids)
        )
        return len(set(s.scalars(query)))


def _stood_down(store: db.Store) -> int:
    """How many hosts' watchdogs were told the daemon stopped on purpose (their lease says so).

    The light hosts' work directories are on this machine.
    """
    sid = store_id(store.engine)
    with transaction(store.engine, write=False) as s:
        rows = s.scalars(select(NodeRow)).all()
    told = 0
    for row in rows:
        lease = Path(agent_dir(row, sid), LEASE)
        with contextlib.suppress(OSError, ValueError):  # no lease: never reached
            told += bool(json.loads(lease.read_text()).get("standdown"))
    return told


def _postgres(tmp: Path, *, again: bool = False) -> str:
    """A fresh PostgreSQL server under ``tmp`` (``scripts/testpg.sh``, the tests' own); its URL."""
    if again:
        subprocess.run([TESTPG, "stop", str(tmp / "pg")], capture_output=True)
    out = subprocess.run(
        [TESTPG, "start", str(tmp / "pg")], capture_output=True, text=True, check=True
    )
    return out.stdout.strip().splitlines()[-1]


def main() -> None:
    """Measure each host count and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", default="10,100")
    parser.add_argument("--engines", type=int, default=2)
    parser.add_argument("--idle", type=float, default=30.0)
    parser.add_argument("--load", type=float, default=30.0)
    parser.add_argument("--rate", type=float, default=5.0)
    parser.add_argument("--freeze", type=int, default=0)
    parser.add_argument("--node-timeout", type=float, default=20.0)
    parser.add_argument("--heartbeat-every", type=float, default=HEARTBEAT)
    parser.add_argument("--postgres", action="store_true")
    parser.add_argument(
        "--keep", action="store_true", help="leave the hosts running, and the store and logs"
    )
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="gctl-scale-"))
    args.db_url = None
    try:
        if args.postgres:
            args.db_url = _postgres(tmp)
        backend = "PostgreSQL" if args.postgres else "SQLite"
        head = "hosts  seen(s) downs idle-round idle-CPU idle-RSS idle-tick machine"
        head += " load-round load-CPU busy submit->run p50/p99  others-p99  start p50/p99"
        head += "  tick-p99  RSS  ran"
        head += "  frozen-down  twice  stop  stood-down"
        print(f"{head}  ({backend})")
        for n in [int(x) for x in args.hosts.split(",")]:
            r = run_one(n, args, tmp)
            frozen = "-" if r["frozen_down_s"] is None else f"{r['frozen_down_s']:.1f}s"
            print(
                f"{n:5d}  {r['all_seen_s']:6.1f}  {r['start_downs']:5d}  {r['idle_round_s']:8.1f}s"
                f"  {100 * r['idle_cpu']:6.1f}%  {r['idle_rss_mib']:6.0f}M  {r['idle_tick_p99']:>9}"
                f"  {r['machine_mib'] / 1024:5.1f}G"
                f"  {r['load_round_s']:8.1f}s  {100 * r['load_cpu']:7.1f}%"
                f"  {100 * r['load_busy']:3.0f}%  {r['p50_s']:6.2f}/{r['p99_s']:.2f}s"
                f"  {r['p99_others_s']:9.2f}s  {r['start']:>13}  {r['tick_p99']:>8}"
                f"  {r['rss_mib']:4.0f}M"
                f"  {r['ran']}  {frozen}  {r['twice']:5d}"
                f"  {r['stop_s']:5.1f}s  {r['stood_down']}/{n}",
                flush=True,
            )
            if args.postgres:  # a fresh database per N
                args.db_url = _postgres(tmp, again=True)
    finally:
        if args.postgres:
            subprocess.run([TESTPG, "stop", str(tmp / "pg")], capture_output=True)
        if args.keep:
            print(f"kept: the hosts, and the logs and SQLite stores in {tmp}", file=sys.stderr)
        else:
            subprocess.run([HARNESS, "stop"], capture_output=True)
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
