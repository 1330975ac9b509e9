"""The store lease: one daemon per store; a dead holder is replaced, a live one is named."""

from __future__ import annotations

import subprocess
import sys

import pytest
from clikit import run

from gctl.daemon import lease
from gctl.services import db
from gctl.store.engine import transaction
from gctl.store.models import DaemonLeaseRow, now


def _holder(store: db.Store) -> str | None:
    with transaction(store.engine, write=False) as s:
        row = s.get(DaemonLeaseRow, 1)
        return None if row is None else row.holder


def _hold_as(store: db.Store, holder: str, pid: int, age: float) -> None:
    at = now() - age
    with transaction(store.engine, write=True) as s:
        s.merge(DaemonLeaseRow(id=1, holder=holder, pid=pid, started_at=at, heartbeat_at=at))


def test_take_renew_and_give_back(store: db.Store) -> None:
    lease.acquire(store)
    assert _holder(store) == lease.me()
    assert lease.renew(store)
    lease.acquire(store)  # the holder may take it again (a restart of the same process)
    lease.release(store)
    assert _holder(store) is None
    assert not lease.renew(store)


def test_a_live_daemon_elsewhere_is_named(store: db.Store) -> None:
    _hold_as(store, "other-host:4242", 4242, age=2.0)
    with pytest.raises(lease.LeaseHeld, match="other-host:4242"):
        lease.acquire(store)
    assert not lease.renew(store)
    lease.release(store)  # not ours: left alone
    assert _holder(store) is not None


def test_a_silent_holder_is_replaced_after_the_lease_time(store: db.Store) -> None:
    _hold_as(store, "other-host:4242", 4242, age=31.0)
    lease.acquire(store, lease=30.0)
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


def test_a_second_daemon_command_says_who_holds_the_store(
    store: db.Store, tmp_path: object
) -> None:
    _hold_as(store, "other-host:4242", 4242, age=1.0)
    code, out, err = run("--db", str(store.engine.url), "daemon", "--state-dir", str(tmp_path))
    assert code == 1 and out == ""
    assert err.count("\n") == 1 and "another gctl daemon holds this store: other-host:4242" in err
