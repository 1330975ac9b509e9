"""``gctl events --follow``: new events appear as they are recorded, like ``tail -f``."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from gctl.services import db, jobs, specs

GCTL = str(Path(sys.executable).with_name("gctl"))


def _submit(store: db.Store, name: str) -> int:
    req = specs.build(image="train:1", command=["python", "t.py"], gpus=1, name=name)
    return jobs.submit(store, [req])[0]


def _follow(url: str, *args: str) -> subprocess.Popen[str]:
    env = {**os.environ, "GCTL_DB": url}
    return subprocess.Popen(
        [GCTL, "events", "--follow", *args], env=env, stdout=subprocess.PIPE, text=True
    )


def _line(proc: subprocess.Popen[str], timeout: float = 20.0) -> str:
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    line = proc.stdout.readline()  # blocks until the follower prints or exits
    assert time.monotonic() < deadline and line, "no event line"
    return line


def test_follow_prints_old_then_new_events_and_ends_on_ctrl_c(tmp_path: Path) -> None:
    url = str(tmp_path / "gctl.db")
    store = db.connect(url)
    db.upgrade(store)
    old = _submit(store, "old")
    proc = _follow(url)
    try:
        assert f"job {old} submitted" in _line(proc)
        new = _submit(store, "new")
        line = _line(proc)
        assert "job.submit" in line and f"job {new} submitted" in line
    finally:
        proc.send_signal(signal.SIGINT)
        assert proc.wait(20) == 0  # Ctrl-C is how it ends, not an error


def test_follow_json_lines_respect_the_job_filter_and_skip_what_since_left_out(
    tmp_path: Path,
) -> None:
    url = str(tmp_path / "gctl.db")
    store = db.connect(url)
    db.upgrade(store)
    _submit(store, "before")  # older than --since: neither listed nor printed later
    time.sleep(1.2)
    watched = _submit(store, "watched")
    other = _submit(store, "other")
    proc = _follow(url, "--json", "--job", str(watched), "--since", "1s")
    try:
        first = json.loads(_line(proc))
        assert (first["job_id"], first["kind"]) == (watched, "job.submit")
        jobs.act(store, other, "cancel")  # another job's event: not shown
        jobs.act(store, watched, "cancel")
        second = json.loads(_line(proc))
        assert (second["job_id"], second["kind"]) == (watched, "job.cancel")
    finally:
        proc.send_signal(signal.SIGINT)
        assert proc.wait(20) == 0
