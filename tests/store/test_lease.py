"""The store lease: one daemon per store; a dead holder is replaced, a live one is named.

Fencing: every takeover raises the lease's epoch, and a daemon's writes
check it, so a daemon paused past its lease writes nothing once it resumes.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from clikit import run
from sqlalchemy import func, select

from gctl.daemon import lease
from gctl.services import db, events
from gctl.store.engine import transaction
from gctl.store.models import DaemonLeaseRow, EventRow, now

GCTL = str(Path(sys.executable).with_name("gctl"))


def _holder(store: db.Store) -> str | None:
    with transaction(store.engine, write=False) as s:
        row = s.get(DaemonLeaseRow, 1)
        return None if row is None else row.holder


def _hold_as(store: db.Store, holder: str, pid: int, age: float, epoch: int = 7) -> None:
    at = now() - age
    with transaction(store.engine, write=True) as s:
        s.merge(
            DaemonLeaseRow(
                id=1, holder=holder, pid=pid, started_at=at, heartbeat_at=at, epoch=epoch
            )
        )


def test_take_renew_and_give_back(store: db.Store) -> None:
    first = lease.acquire(store)
    assert _holder(store) == lease.me()
    assert lease.renew(store, first)
    again = lease.acquire(store)  # the holder may take it again (a restart of the same process)
    assert again == first + 1
    assert not lease.renew(store, first)  # the older epoch is over
    lease.release(store, again)
    assert _holder(store) == ""  # free, its epoch kept for the next taker
    assert not lease.renew(store, again)
    assert lease.acquire(store) == again + 1


def test_a_live_daemon_elsewhere_is_named(store: db.Store) -> None:
    _hold_as(store, "other-host:4242", 4242, age=2.0)
    with pytest.raises(lease.LeaseHeld, match="other-host:4242"):
        lease.acquire(store)
    assert not lease.renew(store, 7)
    lease.release(store)  # not ours: left alone
    assert _holder(store) == "other-host:4242"


def test_a_silent_holder_is_replaced_after_the_lease_time_with_a_higher_epoch(
    store: db.Store,
) -> None:
    _hold_as(store, "other-host:4242", 4242, age=31.0, epoch=7)
    assert lease.acquire(store, lease=30.0) == 8
    assert _holder(store) == lease.me()


def test_a_dead_holder_on_this_machine_is_replaced_at_once(store: db.Store) -> None:
    child = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    dead = int(child.stdout)  # that process has exited
    host = lease.me().rsplit(":", 1)[0]
    _hold_as(store, f"{host}:{dead}", dead, age=0.5)
    lease.acquire(store)
    assert _holder(store) == lease.me()


def test_a_fenced_store_writes_nothing_once_another_daemon_took_over(store: db.Store) -> None:
    epoch = lease.acquire(store)
    mine = lease.fenced(store, epoch)
    with transaction(mine.engine, write=True) as s:
        events.record(s, "test.write", "while holding the lease")
    _hold_as(store, "other-host:4242", 4242, age=0.0, epoch=epoch + 1)  # taken over
    with (
        pytest.raises(lease.Fenced, match="other-host:4242"),
        transaction(mine.engine, write=True) as s,
    ):
        events.record(s, "test.write", "after losing it")
    with transaction(mine.engine, write=False) as s:  # reads still work
        kinds = list(s.scalars(select(EventRow.message).where(EventRow.kind == "test.write")))
    assert kinds == ["while holding the lease"]


def test_standby_takes_the_lease_once_its_holder_lapses(store: db.Store) -> None:
    _hold_as(store, "other-host:4242", 4242, age=0.0, epoch=3)
    told: list[str] = []
    got: list[int | None] = []
    stop = threading.Event()
    waiter = threading.Thread(
        target=lambda: got.append(lease.wait_for(store, stop, lease=1.0, waiting=told.append))
    )
    waiter.start()
    waiter.join(5)
    assert got == [4] and len(told) == 1 and "other-host:4242" in told[0]


def test_a_second_daemon_command_says_who_holds_the_store(
    store: db.Store, tmp_path: object
) -> None:
    _hold_as(store, "other-host:4242", 4242, age=1.0)
    code, out, err = run("--db", str(store.engine.url), "daemon", "--state-dir", str(tmp_path))
    assert code == 1 and out == ""
    assert err.count("\n") == 1 and "another gctl daemon holds this store: other-host:4242" in err


def _daemon(url: str, tmp_path: Path, name: str, *args: str) -> subprocess.Popen[str]:
    state = str(tmp_path / name)
    return subprocess.Popen(
        [GCTL, "--db", url, "daemon", "--lease", "3", "--tick", "0.2", "--state-dir", state, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )


def _wait_holder(store: db.Store, pid: int, within: float) -> float:
    start = time.monotonic()
    while time.monotonic() - start < within:
        if (_holder(store) or "").endswith(f":{pid}"):
            return time.monotonic() - start
        time.sleep(0.05)
    raise AssertionError(f"process {pid} did not take the lease within {within}s")


def _end(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGCONT)
        proc.terminate()
        proc.wait(20)


def test_a_standby_takes_over_from_a_paused_daemon_which_then_writes_nothing(
    pg_url: str, tmp_path: Path
) -> None:
    """On PostgreSQL, where daemons on two machines share one store."""
    store = db.connect(pg_url)
    db.upgrade(store)
    active = _daemon(pg_url, tmp_path, "a")
    try:
        _wait_holder(store, active.pid, 30)
        standby = _daemon(pg_url, tmp_path, "b", "--standby")
        try:
            assert standby.stderr is not None
            assert "standby" in standby.stderr.readline()  # it waits for the lease
            active.send_signal(signal.SIGSTOP)
            took = _wait_holder(store, standby.pid, 3 + 2 + 1)
            print(f"standby took over {took:.2f} s after the active daemon stopped (lease 3 s)")
            assert took <= 3 + 2  # lease + 2 s
            with transaction(store.engine, write=False) as s:
                before = s.scalar(select(func.count()).select_from(EventRow))
                taken = s.get(DaemonLeaseRow, 1)
            active.send_signal(signal.SIGCONT)
            assert active.wait(20) == 1
            err = active.stderr.read() if active.stderr else ""
            lines = [line for line in err.splitlines() if line.strip()]
            assert lines and "lost the store's lease" in lines[-1] and "Traceback" not in err
            with transaction(store.engine, write=False) as s:
                after = s.scalar(select(func.count()).select_from(EventRow))
                row = s.get(DaemonLeaseRow, 1)
            assert after == before  # the resumed daemon wrote nothing
            assert taken is not None and row is not None
            assert (row.holder, row.epoch) == (taken.holder, taken.epoch)
        finally:
            _end(standby)
    finally:
        _end(active)
