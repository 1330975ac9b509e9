"""Datasets on the test hosts: added at a source on h1, filled into h2's cache before jobs start.

Each test gives h2 a cache directory of its own (``gctl node set``), so the
copies of one test never meet another's. Jobs run on h2 (h1 drained) and
count what they see of the dataset, so a job that ran without its data fails.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from clikit import run
from daemonkit import STORES, Running, job_file, jobs_of, wait
from sqlalchemy import func, select

from gctl.hosts import cache_agent
from gctl.services import db, nodes
from gctl.services.datacache import key
from gctl.store.engine import transaction
from gctl.store.models import AllocationRow, EventRow

pytestmark = pytest.mark.usefixtures("clean_hosts")

COUNT = (
    "import os; n = sum(len(f) for _, _, f in os.walk('{mount}'));"
    " open('/gctl/count', 'w').write(str(n)); assert n > 0"
)


def _dataset(root: Path, files: int, size: int = 64) -> Path:
    for i in range(files):
        sub = root / f"d{i % 10}"
        sub.mkdir(parents=True, exist_ok=True)
        (sub / f"f{i}").write_bytes(os.urandom(size))
    return root


def _setup(
    store: db.Store, tmp_path: Path, name: str, files: int, size: int = 64, cache: str | None = None
) -> dict[str, Any]:
    """A dataset ``name`` of ``files`` files on h1, h2's cache in ``tmp_path``; its record."""
    if nodes.show_node(store, "h1").state != "drain":
        nodes.set_admin_state(store, "h1", "drain", "jobs go to h2 in this test")
    nodes.set_cache(store, "h2", str(tmp_path / "h2-cache"), cache)
    src = _dataset(tmp_path / name, files, size)
    code, out, err = run("dataset", "add", name, f"h1:{src}", "--json")
    assert code == 0, err
    return dict(json.loads(out), path=src)


def _job(store: db.Store, name: str, mount: str | None = None, then: str = "") -> int:
    where = mount or f"/datasets/{name}"
    entry = f"{name}:{mount}" if mount else name
    code = COUNT.format(mount=where) + then
    return submit_command(store, ["python3", "-c", code], datasets=[entry])


def submit_command(store: db.Store, command: list[str], **extra: Any) -> int:
    from gctl.services import jobs, specs

    req = specs.build(image="gctl-test/train:1", command=command, gpus=1, **extra)
    return jobs.submit(store, [req])[0]


def _fills(store: db.Store, job: int) -> list[dict[str, Any]]:
    with transaction(store.engine, write=False) as s:
        rows = s.execute(
            EventRow.__table__.select().where(
                EventRow.job_id == job, EventRow.kind == "dataset.fill"
            )
        ).all()
    return [dict(r.data) for r in rows]


def _done(store: db.Store, job: int) -> Callable[[], bool]:
    return lambda: jobs_of(store)[job].state in ("COMPLETED", "FAILED")


def test_a_job_gets_its_dataset_copied_once_checked_and_refetched_when_the_copy_changed(
    host_store: db.Store,
    hosts: dict[str, Any],
    start_daemon: Callable[..., Running],
    tmp_path: Path,
) -> None:
    ds = _setup(host_store, tmp_path, "small", files=2000)
    assert ds["files"] == 2000 and len(ds["digest"]) == 64
    start_daemon(host_store)
    first = _job(host_store, "small", "/data")
    wait("the first job done", _done(host_store, first), store=host_store)
    assert jobs_of(host_store)[first].state == "COMPLETED", jobs_of(host_store)[first].reason
    assert job_file(hosts, STORES[-1], "h2", first, "count") == "2002"  # + gctl's 2 files
    [fill] = _fills(host_store, first)
    assert fill["source"] == "h1" and fill["bytes"] > 2000 * 64
    print(f"2,000 files ({ds['bytes']} bytes) copied h1 -> h2 in {fill['seconds']:.2f} s")
    code, out, _ = run("show", "job", str(first))
    assert code == 0 and "Dataset=small copied" in out and "to h2 from h1 in" in out, out

    second = _job(host_store, "small")
    wait("the second job done", _done(host_store, second), store=host_store)
    assert jobs_of(host_store)[second].state == "COMPLETED"
    assert _fills(host_store, second) == []  # the copy was there: no second copy

    copy = tmp_path / "h2-cache" / key("small", ds["digest"])
    (copy / "d3" / "f3").write_bytes(b"bit rot")  # the cached copy changes under gctl
    third = _job(host_store, "small")
    wait("the third job done", _done(host_store, third), store=host_store)
    assert jobs_of(host_store)[third].state == "COMPLETED"
    assert len(_fills(host_store, third)) == 1  # found changed, filled again
    assert (copy / "d3" / "f3").read_bytes() == (ds["path"] / "d3" / "f3").read_bytes()

    code, out, _ = run("dataset", "show", "small", "--json")
    assert code == 0 and json.loads(out)["cached"] == ["h2"]


def test_a_new_daemon_learns_which_nodes_hold_copies_and_fills_from_the_nearest(
    host_store: db.Store, start_daemon: Callable[..., Running], tmp_path: Path
) -> None:
    """After a restart the copy on h2 is still known: h1's fill comes from h2, not the source."""
    _setup(host_store, tmp_path, "kept", files=200)
    first = start_daemon(host_store)
    before = _job(host_store, "kept")
    wait("the first job done", _done(host_store, before), store=host_store)
    assert [f["source"] for f in _fills(host_store, before)] == ["h1"]  # from the source
    first.close()
    nodes.set_cache(host_store, "h1", str(tmp_path / "h1-cache"), None)
    nodes.set_admin_state(host_store, "h1", "undrain", None)
    nodes.set_admin_state(host_store, "h2", "drain", "jobs go to h1 now")
    start_daemon(host_store)
    after = _job(host_store, "kept")
    wait("the second job done", _done(host_store, after), store=host_store)
    assert jobs_of(host_store)[after].state == "COMPLETED", jobs_of(host_store)[after].reason
    assert [f["source"] for f in _fills(host_store, after)] == ["h2"]  # the holder it learned


def test_a_source_that_no_longer_matches_its_digest_fails_the_job_with_the_reason(
    host_store: db.Store, start_daemon: Callable[..., Running], tmp_path: Path
) -> None:
    """Fetched twice, then the job fails (it cannot run as submitted); its GPUs are free."""
    ds = _setup(host_store, tmp_path, "drifted", files=20)
    (ds["path"] / "d0" / "f0").write_bytes(b"changed after gctl dataset add")
    start_daemon(host_store)
    job = _job(host_store, "drifted")
    wait("the job failed", _done(host_store, job), store=host_store)
    row = jobs_of(host_store)[job]
    assert row.state == "FAILED" and not row.held
    assert (row.reason or "").startswith("launch failed: h2: dataset drifted: "), row.reason
    assert "does not match its digest, twice" in (row.reason or "")
    with transaction(host_store.engine, write=False) as s:
        copies = s.scalars(
            EventRow.__table__.select()
            .with_only_columns(EventRow.data)
            .where(EventRow.job_id == job, EventRow.kind == "dataset.copy")
        ).all()
        held = s.scalar(select(func.count()).select_from(AllocationRow))
    assert [c["source"] for c in copies] == ["h1", "h1"]  # fetched again once, no more
    assert held == 0
    assert not list((tmp_path / "h2-cache").glob("drifted@*"))  # nothing half-made kept


def test_a_full_cache_evicts_the_least_recently_used_copy_and_never_one_in_use(
    host_store: db.Store, start_daemon: Callable[..., Running], tmp_path: Path
) -> None:
    """h2's cache holds 1 MiB: one 800 kB dataset, not two."""
    one = _setup(host_store, tmp_path, "one", files=100, size=8000, cache="1M")
    two = _setup(host_store, tmp_path, "two", files=100, size=8000, cache="1M")
    start_daemon(host_store)
    reader = _job(host_store, "one", then="; import time; time.sleep(8)")  # holds "one" a while
    wait("the reader running", lambda: jobs_of(host_store)[reader].state == "RUNNING")
    wait("one cached", lambda: bool(_fills(host_store, reader)))
    other = _job(host_store, "two")  # no room while "one" is in use: it waits
    wait("the other job done", _done(host_store, other), timeout=120, store=host_store)
    assert jobs_of(host_store)[reader].state == "COMPLETED"  # its data never went away
    assert jobs_of(host_store)[other].state == "COMPLETED", jobs_of(host_store)[other].reason
    [fill] = _fills(host_store, other)
    assert fill["evicted"] == [key("one", one["digest"])]  # once the reader had ended
    with transaction(host_store.engine, write=False) as s:
        errors = s.scalars(
            EventRow.__table__.select()
            .with_only_columns(EventRow.message)
            .where(EventRow.job_id == other, EventRow.kind == "job.error")
        ).all()
    assert errors and all("no room" in m for m in errors), errors  # waited, did not evict
    cached = sorted(p.name for p in (tmp_path / "h2-cache").iterdir() if "@" in p.name)
    assert [c for c in cached if not c.startswith(".")] == [key("two", two["digest"])]


def test_a_daemon_killed_mid_copy_leaves_no_copy_marked_complete_and_the_next_finishes_it(
    host_store: db.Store, hosts: dict[str, Any], tmp_path: Path
) -> None:
    ds = _setup(host_store, tmp_path, "big", files=300, size=1 << 20)  # 300 MiB
    STORES.append(host_store)
    job = _job(host_store, "big")
    argv = [str(Path(sys.executable).with_name("gctl")), "--db", str(host_store.engine.url)]
    argv += ["daemon", "--tick", "0.3", "--heartbeat-every", "0.5"]
    argv += ["--state-dir", str(tmp_path / "st")]
    log = (tmp_path / "daemon.log").open("ab")
    cache = tmp_path / "h2-cache"
    final = cache / key("big", ds["digest"])
    partial = cache / f"{cache_agent.PARTIAL}{final.name}"
    first = subprocess.Popen(argv, stdout=log, stderr=log)
    second: subprocess.Popen[bytes] | None = None
    try:
        wait("the copy under way", lambda: partial.is_dir() and any(partial.rglob("f*")), 60)
        wait(
            "the bytes copied in the job's reason",
            lambda: "copying dataset big to h2: " in (jobs_of(host_store)[job].reason or ""),
            30,
        )
        shown = jobs_of(host_store)[job].reason or ""
        assert shown.endswith("%)") and f"of {ds['bytes'] / 1e6:.0f} MB (" in shown, shown
        first.send_signal(signal.SIGKILL)
        first.wait(10)
        time.sleep(2.0)  # the host side sees its stream end
        assert not (final / cache_agent.META).exists() and not final.exists()
        second = subprocess.Popen(argv, stdout=log, stderr=log)
        wait("the job done", _done(host_store, job), timeout=180, store=host_store)
        assert jobs_of(host_store)[job].state == "COMPLETED", jobs_of(host_store)[job].reason
        assert (final / cache_agent.META).exists() and not partial.exists()
        assert job_file(hosts, host_store, "h2", job, "count") == "302"
    finally:
        for proc in (first, second):
            if proc is not None and proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                proc.wait(30)
        shutil.rmtree(ds["path"], ignore_errors=True)


@pytest.fixture
def rsyncd(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """A real rsync daemon serving ``tmp_path/share`` as module ``share``: its URL and directory."""
    share = tmp_path / "share"
    share.mkdir()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    conf = tmp_path / "rsyncd.conf"
    conf.write_text(
        f"pid file = {tmp_path / 'rsyncd.pid'}\nuse chroot = no\n"
        f"[share]\n  path = {share}\n  read only = yes\n  uid = root\n  gid = root\n"
    )
    argv = ["rsync", "--daemon", "--no-detach", f"--config={conf}", "--address=127.0.0.1"]
    proc = subprocess.Popen([*argv, f"--port={port}"], stderr=subprocess.PIPE)
    try:
        wait("rsyncd listening", lambda: _listening(port), 10)
        yield f"rsync://127.0.0.1:{port}/share", share
    finally:
        proc.terminate()
        proc.wait(10)


def _listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def test_a_dataset_at_an_rsync_location_is_fetched_by_the_nodes_themselves(
    host_store: db.Store,
    hosts: dict[str, Any],
    start_daemon: Callable[..., Running],
    tmp_path: Path,
    rsyncd: tuple[str, Path],
) -> None:
    """Added through h1 (which reads its manifest), filled on h2 from the rsync daemon."""
    url, share = rsyncd
    src = _dataset(share / "imgs", files=300)
    expected = cache_agent.manifest({"dir": str(src)})
    nodes.set_admin_state(host_store, "h1", "drain", "jobs go to h2 in this test")
    nodes.set_cache(host_store, "h1", str(tmp_path / "h1-cache"), None)
    nodes.set_cache(host_store, "h2", str(tmp_path / "h2-cache"), None)
    code, out, err = run("dataset", "add", "web", f"{url}/imgs", "--via", "h1", "--json")
    assert code == 0, err
    added = json.loads(out)
    assert (added["source"], added["digest"]) == (f"{url}/imgs", expected["digest"])
    assert added["files"] == 300
    kept = tmp_path / "h1-cache" / key("web", expected["digest"])
    assert (kept / cache_agent.META).exists()  # the fetch became h1's first copy
    shutil.rmtree(tmp_path / "h1-cache")  # so h2 has no holder to copy from
    start_daemon(host_store)
    job = _job(host_store, "web")
    wait("the job done", _done(host_store, job), store=host_store)
    assert jobs_of(host_store)[job].state == "COMPLETED", jobs_of(host_store)[job].reason
    assert job_file(hosts, STORES[-1], "h2", job, "count") == "302"
    [fill] = _fills(host_store, job)
    assert fill["source"] == f"{url}/imgs" and fill["bytes"] == expected["bytes"]

    code, _, err = run("dataset", "add", "other", f"{url}/imgs", "--digest", "0" * 64)
    assert code == 1 and "not the digest given: its manifest is " in err, err
    assert err.count("\n") == 1
    code, _, err = run("dataset", "add", "gone", f"{url}/nothing-here")
    assert code == 1 and "reading " in err and "fetching failed: " in err, err
