"""Opportunistic jobs on the test hosts: idle GPUs given up to production, TGS control, kill -9.

The daemon runs in a thread of the test with short periods (the kill -9 test
runs ``gctl daemon`` itself); the jobs are the test image's training
program, which checkpoints through the job SDK, so an evicted opportunistic
job resumes from its checkpoint. GPUs are emulated: ``--gpu-busy`` makes
jobs queue for the emulated GPU, so a production job slows when an
opportunistic one beside it is not throttled.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from clikit import run
from daemonkit import STORES, Running, job_file, jobs_of, mean_rate, submit, wait
from daemonkit import kinds as _kinds
from prometheus_client import generate_latest
from sqlalchemy import select

from gctl.hosts import agent
from gctl.hosts.engine import container_name
from gctl.services import db, nodes, why
from gctl.store.engine import transaction
from gctl.store.identity import store_id
from gctl.store.models import EventRow, JobStateRow

pytestmark = pytest.mark.usefixtures("clean_hosts")


def _wait(what: str, check: Callable[[], bool], timeout: float = 90.0) -> float:
    return wait(what, check, timeout, STORES[-1] if STORES else None)


def _state(store: db.Store, job: int) -> str:
    return jobs_of(store)[job].state


def test_a_production_job_evicts_an_opportunistic_one_which_resumes_from_its_checkpoint(
    host_store: db.Store, hosts: dict[str, Any], start_daemon: Callable[..., Running]
) -> None:
    """h1's 2 GPUs are held by an opportunistic job; a production job needs both.

    The opportunistic job is requeued at a checkpoint before the production
    job starts (never both on the GPUs), the production job runs through,
    and the opportunistic one resumes from its checkpoint and completes.
    """
    nodes.set_admin_state(host_store, "h2", "drain", "only h1 in this test")
    guest = submit(
        host_store, "--steps", "300", "--step-time", "0.05", gpus=2, job_class="opportunistic"
    )
    start_daemon(host_store)
    _wait(
        "the guest known to checkpoint",
        lambda: jobs_of(host_store)[guest].mechanism == "checkpoint",
    )
    time.sleep(1.0)  # some steps past its first checkpoint
    submitted = time.monotonic()
    prod = submit(host_store, "--steps", "40", "--step-time", "0.05", gpus=2)
    started = _wait("production running", lambda: _state(host_store, prod) == "RUNNING")
    print(f"production job started {started:.2f} s after submission (guest evicted first)")
    assert time.monotonic() - submitted < 30
    _wait("production done", lambda: _state(host_store, prod) == "COMPLETED")
    _wait("the guest done", lambda: _state(host_store, guest) == "COMPLETED", timeout=120)

    with transaction(host_store.engine, write=False) as s:
        history = s.execute(
            select(JobStateRow.job_id, JobStateRow.state, JobStateRow.at, JobStateRow.reason)
            .where(JobStateRow.job_id.in_([guest, prod]))
            .order_by(JobStateRow.at, JobStateRow.id)
        ).all()
        places = s.scalars(select(EventRow.job_id).where(EventRow.kind == "job.place")).all()
    mine = [(st, at) for j, st, at, _ in history if j == guest]
    first_run = next(i for i, (st, _) in enumerate(mine) if st == "RUNNING")
    left = next(at for st, at in mine[first_run:] if st != "RUNNING")
    evicted = [why for j, st, _, why in history if j == guest and "evicted" in (why or "")]
    assert evicted and f"production job(s) {prod} need its GPUs" in evicted[0], history
    prod_ran = next(at for j, st, at, _ in history if j == prod and st == "RUNNING")
    assert left <= prod_ran  # the guest was off the GPUs before production started
    assert places.count(guest) == 2  # placed, evicted, placed again once production ended
    starts = job_file(hosts, STORES[-1], "h1", guest, "starts.log").split("\n")
    resumed = [int(line.split()[1]) for line in starts if line.strip()]
    assert resumed[0] == 0 and resumed[-1] > 0  # the second start resumed from its checkpoint
    assert '"step": 300' in job_file(hosts, STORES[-1], "h1", guest, "progress.json")
    assert "job.suspend" not in _kinds(host_store, prod)  # production never gave way


def _rate_of(hosts: dict[str, Any], job: int) -> float | None:
    """The job's SDK step rate in its progress report (a 10-step window)."""
    text = job_file(hosts, STORES[-1], "h1", job, "progress.json")
    rate = json.loads(text).get("rate") if text else None
    return float(rate) if isinstance(rate, int | float) else None


def _throttle_events(store: db.Store, job: int) -> list[tuple[float, dict[str, Any]]]:
    with transaction(store.engine, write=False) as s:
        rows = s.execute(
            select(EventRow.at, EventRow.data)
            .where(EventRow.job_id == job, EventRow.kind == "job.throttle")
            .order_by(EventRow.id)
        ).all()
    return [(at, dict(data)) for at, data in rows]


def test_an_opportunistic_job_beside_a_production_job_gets_its_idle_gpu_time_under_control(
    host_store_of: Callable[[str], db.Store],
    hosts: dict[str, Any],
    start_daemon: Callable[..., Running],
) -> None:
    """One emulated GPU: production computes half of each 0.1 s step; the guest wants all of it.

    The guest joins the production job (there is no idle GPU), is held while
    R is profiled, then let in by the controller. Targets (issue 20):
    production keeps 95 % of R, the guest gets at least half of the GPU time
    production leaves idle, settled within 60 s; asserted with margins.

    The guest's GPU work comes in 0.05 s pieces, each taken whole once issued
    (the emulated GPU is a queue of reservations), so production, with 0.05 s
    of slack in each step, can absorb one: the controller should find that
    and let the guest in fully. (With pieces near production's whole step, a
    piece per throttle cycle at the smallest beta already cost production
    about 6 % here, beyond its 5 % budget: the controller then held the guest
    near beta_min and re-profiled R, and the test measured the emulation's
    floor rather than the controller. The tipping point itself is tested on
    the controller, ``tests/core/test_tgs.py``.)
    """
    store = host_store_of("1xV100-16GB")
    nodes.set_admin_state(store, "h2", "drain", "only h1 in this test")
    busy = ("--steps", "100000", "--step-time", "0.1", "--gpu-busy")
    prod = submit(store, *busy, "0.5", env=["GCTL_EMULATED_UTIL=50"])
    running = start_daemon(store)
    _wait("production reporting a rate", lambda: _rate_of(hosts, prod) is not None)
    alone = mean_rate(hosts, prod, 8.0)
    piece = 0.05
    greedy = ("--steps", "100000", "--step-time", str(piece), "--gpu-busy", "1.0")
    guest = submit(store, *greedy, job_class="opportunistic", env=["GCTL_EMULATED_UTIL=100"])
    _wait("the guest running", lambda: _state(store, guest) == "RUNNING")
    ran = time.time()

    def aimd() -> bool:
        return any(d["phase"] == "aimd" for _, d in _throttle_events(store, guest))

    _wait("the controller past slow start", aimd, timeout=60)
    settled = next(at for at, d in _throttle_events(store, guest) if d["phase"] == "aimd") - ran
    beside = mean_rate(hosts, prod, 15.0)
    guest_share = mean_rate(hosts, guest, 15.0) * piece  # its steps are all GPU compute
    print(
        f"production alone {alone:.2f} steps/s; beside the throttled guest {beside:.2f}"
        f" ({beside / alone:.1%} of R); the guest got {guest_share:.1%} of the GPU"
        f" ({guest_share / 0.5:.0%} of what production leaves idle); AIMD {settled:.0f} s"
        " after the guest started"
    )
    for at, d in _throttle_events(store, guest):  # the controller's path, for a failure's report
        print(f"  {at - ran:6.1f} s  {d}")
    assert beside >= 0.9 * alone
    assert guest_share >= 0.15
    reason = why.explain(store, guest).reason or ""
    assert reason.startswith(f"beside production job {prod}: runs "), reason
    assert "of R =" in reason
    code, out, _ = run("show", "job", str(guest))
    assert code == 0 and "Throttle=beta " in out and f"BesideJob={prod}" in out, out
    scraped = generate_latest(running.daemon.metrics.registry).decode()
    labels = f'job="{guest}",node="h1",production_job="{prod}"'
    assert f"gctl_opportunistic_beta{{{labels}}}" in scraped
    assert f"gctl_production_slowdown{{{labels}}}" in scraped


def _freezer(hosts: dict[str, Any], container: str) -> str:
    """The container's freezer state (v1 ``THAWED``/``FROZEN``, v2 ``0``/``1``), read here."""
    h1 = next(h for h in hosts["hosts"] if h["name"] == "h1")
    docker = ["docker", "-H", h1["docker_host"], "inspect", "-f", "{{.State.Pid}}", container]
    pid = int(subprocess.run(docker, capture_output=True, text=True, check=True).stdout)
    path, _, _ = agent.freezer_of(pid)
    return Path(path).read_text().strip()


def test_a_killed_daemon_leaves_no_container_frozen_and_the_next_one_takes_the_throttle_over(
    host_store_of: Callable[[str], db.Store], hosts: dict[str, Any], tmp_path: Path
) -> None:
    """``gctl daemon`` is SIGKILLed while it holds a guest (beta 0 while R is profiled)."""
    store = host_store_of("1xV100-16GB")
    nodes.set_admin_state(store, "h2", "drain", "only h1 in this test")
    STORES.append(store)
    busy = ("--steps", "100000", "--step-time", "0.1", "--gpu-busy")
    prod = submit(store, *busy, "0.5", env=["GCTL_EMULATED_UTIL=50"])
    argv = [str(Path(sys.executable).with_name("gctl")), "--db", str(store.engine.url), "daemon"]
    argv += ["--tick", "0.3", "--heartbeat-every", "0.5", "--state-dir", str(tmp_path / "st")]
    log = (tmp_path / "daemon.log").open("ab")
    first = subprocess.Popen(argv, stdout=log, stderr=log)
    second: subprocess.Popen[bytes] | None = None
    try:
        _wait("production reporting a rate", lambda: _rate_of(hosts, prod) is not None)
        guest = submit(
            store, *busy, "1.0", job_class="opportunistic", env=["GCTL_EMULATED_UTIL=100"]
        )
        _wait("the guest throttled", lambda: bool(_throttle_events(store, guest)))
        name = container_name(store_id(store.engine), guest, 0, hosts["hosts"][0]["name"])
        tdir = next(Path(hosts["hosts"][0]["work_dir"]).glob(f"stores/*/throttles/{guest}"))
        _wait("the guest held", lambda: _freezer(hosts, name) in ("FROZEN", "1"), timeout=10)
        first.send_signal(signal.SIGKILL)
        first.wait(10)
        killed = time.monotonic()
        _wait("the guest thawed", lambda: _freezer(hosts, name) in ("THAWED", "0"), timeout=15)
        thawed = time.monotonic() - killed
        assert "): thawed" in (tdir / agent.THROTTLE_LOG).read_text()  # why it ended, logged
        held_before = len(_throttle_events(store, guest))
        second = subprocess.Popen(argv, stdout=log, stderr=log)
        _wait(
            "the next daemon's controller on the guest",
            lambda: len(_throttle_events(store, guest)) > held_before,
            timeout=30,
        )
        print(f"container thawed {thawed:.1f} s after the daemon was killed; throttle taken over")
        assert thawed <= 5.0 + 3.0  # the throttle's lease, and a little
        assert _state(store, guest) == "RUNNING" and _state(store, prod) == "RUNNING"
    finally:
        for proc in (first, second):
            if proc is not None and proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                proc.wait(90)
        log.close()
