"""The daemon's checkpoint mirror: copies kept per attempt, safe from threads and a full disk."""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest

from gctl.daemon.jobfiles import Mirror
from gctl.daemon.site import Site
from gctl.daemon.watch import JobHere, observe
from gctl.hosts.engine import LABEL_ATTEMPT, LABEL_JOB, ContainerState
from gctl.store.models import NodeRow


def test_a_newer_attempt_replaces_the_older_copies(tmp_path: Path) -> None:
    mirror = Mirror(tmp_path / "m")
    mirror.save(7, 1, b"one", 100.0)
    mirror.save(7, 2, b"two", 200.0)
    assert mirror.load(7) == b"two"
    assert mirror.checkpoint_time(7) == 200.0
    assert sorted(p.name for p in (tmp_path / "m" / "7").iterdir()) == ["a2.tar"]
    mirror.drop(7)
    assert mirror.load(7) is None


def test_copies_of_one_attempt_taken_at_once_all_land(tmp_path: Path) -> None:
    """A heartbeat copies an attempt that ended while its move copies it too (CI failure).

    Both wrote the same temporary name: one renamed it, the other's rename
    found nothing and the daemon stopped.
    """
    mirror = Mirror(tmp_path / "m")
    errors: list[BaseException] = []
    go = threading.Barrier(8)

    def save(n: int) -> None:
        go.wait()
        try:
            for i in range(50):
                mirror.save(3, 12, f"copy {n} {i}".encode(), 50.0)
        except BaseException as exc:  # collected: the assertion below names it
            errors.append(exc)

    threads = [threading.Thread(target=save, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert (mirror.load(3) or b"").startswith(b"copy ")
    assert sorted(p.name for p in (tmp_path / "m" / "3").iterdir()) == ["a12.tar"]


def test_a_look_that_cannot_copy_into_the_mirror_still_answers(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A local disk error while a heartbeat copies an ended attempt is logged, not raised.

    Raised, it came out of the watch's ``collect`` on the tick and stopped the daemon.
    """
    (tmp_path / "m").write_text("a file where the mirror's folder should be")
    mirror = Mirror(tmp_path / "m" / "store")
    ended = ContainerState(
        "c1", "gctl-4", "exited", False, False, 1, False, None, {LABEL_JOB: "4", LABEL_ATTEMPT: "2"}
    )

    def ask(target: object, verb: str, request: dict[str, Any], timeout: float) -> dict[str, Any]:
        return {"reports": {d: {"checkpoint": {"step": 5, "time": 9.0}} for d in request["dirs"]}}

    site = SimpleNamespace(
        store_id="s",
        job_dir=lambda row, job_id, attempt: f"/work/jobs/{job_id}/a{attempt}",
        agents=SimpleNamespace(ask=ask),
        pool=SimpleNamespace(command_timeout=5.0),
        engine=lambda row: SimpleNamespace(owned=lambda: [ended]),
        mirror=mirror,
        save=lambda row, job_id, attempt: mirror.save(job_id, attempt, b"tar", 9.0),
    )
    row = NodeRow(name="n1", host="127.0.0.1", port=22)
    with caplog.at_level(logging.WARNING, "gctl.daemon"):
        got = observe(
            cast(Site, site),
            row,
            [JobHere(4, 2, True)],
            full=False,
            lease_timeout=20.0,
            seq=1,
            gpus=(),
        )
    assert got.error is None
    assert got.reports[4].checkpoint_step == 5
    assert "job 4: could not copy attempt 2 into the mirror" in caplog.text
