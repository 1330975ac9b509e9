"""The daemon against what must not stop it, and what must: a bad node row, a broken store.

No host is reached: the node here cannot be (its host name is invalid), and
the store checks need none.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest
from sqlalchemy import select

from gctl.core.policy import load_policy
from gctl.daemon.loop import Daemon, DaemonConfig
from gctl.daemon.metrics import DaemonMetrics
from gctl.services import db, events, jobs, specs
from gctl.store.engine import transaction
from gctl.store.health import StoreBroken
from gctl.store.models import EventRow, JobRow, NodeRow

FAST = {"tick": 0.1, "heartbeat_every": 0.2, "node_timeout": 1.0, "health_every": 0.2}


def _run(store: db.Store, tmp_path: Path, seconds: float | None) -> BaseException | None:
    """Run a daemon for ``seconds`` (or until it stops); what it stopped with."""
    cfg = DaemonConfig(state_dir=tmp_path / "state", **FAST)  # type: ignore[arg-type]
    daemon = Daemon(store, load_policy("gandiva"), cfg, DaemonMetrics(store))
    stop = threading.Event()
    failed: list[BaseException] = []

    def run() -> None:
        try:
            daemon.run(stop)
        except BaseException as exc:
            failed.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    if seconds is not None:
        time.sleep(seconds)
        stop.set()
    thread.join(30)
    assert not thread.is_alive()
    return failed[0] if failed else None


def test_a_badly_typed_node_is_that_nodes_error_not_the_daemons_exit(
    tmp_path: Path,
) -> None:
    """Item 4: a host name that IDNA refuses, put in the store before validation existed."""
    store = db.connect(str(tmp_path / "gctl.db"))
    db.upgrade(store)
    with transaction(store.engine, write=True) as s:
        s.add(NodeRow(name="gpu01", host="gpu01..example.com", host_key_fingerprint="SHA256:x"))
    jobs.submit(store, [specs.build(image="img:1", command=["true"], gpus=1)])
    assert _run(store, tmp_path, seconds=3.0) is None  # ran until stopped
    with transaction(store.engine, write=False) as s:
        node = s.scalars(select(NodeRow)).one()
        job = s.scalars(select(JobRow)).one()
    assert node.last_error and "gpu01..example.com" in node.last_error
    assert node.admin_state == "down"  # never answered for the node timeout
    assert job.state == "PENDING"
    with transaction(store.engine, write=False) as s:
        authors = {kind: user for kind, user in s.execute(select(EventRow.kind, EventRow.user))}
    assert authors["node.down"] == "gctl-daemon"  # the daemon's own doing, whoever runs it
    assert authors["job.submit"] == events.current_user()


@pytest.mark.parametrize("how", ["deleted", "replaced"])
def test_a_store_file_gone_under_the_daemon_stops_it_with_the_reason(
    tmp_path: Path, how: str
) -> None:
    """Item 7: the daemon kept writing a deleted file and said nothing."""
    path = tmp_path / "gctl.db"
    store = db.connect(str(path))
    db.upgrade(store)
    stopped: list[BaseException | None] = []
    runner = threading.Thread(target=lambda: stopped.append(_run(store, tmp_path, None)))
    runner.start()
    time.sleep(1.0)
    if how == "replaced":  # in one step, as a restore from a backup would
        other = tmp_path / "other.db"
        db.upgrade(db.connect(str(other)))
        os.replace(other, path)
    else:
        path.unlink()
    runner.join(30)
    assert len(stopped) == 1 and isinstance(stopped[0], StoreBroken)
    assert str(stopped[0]).count("\n") == 0 and f"was {how}" in str(stopped[0])
