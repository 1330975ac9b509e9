"""``gctl logs`` end to end on the test hosts: a job's output read over SSH from its container.

The jobs are the test image's training program (``step I/N`` on stdout, a
failure on stderr), placed by a real daemon running in a thread of the test.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import testhosts
from clikit import run
from daemonkit import Running

from gctl.daemon import output
from gctl.hosts.engine import container_name
from gctl.hosts.ssh import Pool
from gctl.services import db, jobs, logs, specs
from gctl.store.identity import store_id

pytestmark = pytest.mark.usefixtures("clean_hosts")

TRAIN = ["python3", "/opt/gctl/train.py"]


def _docker(node: str, *argv: str) -> str:
    """``docker ARGV`` on test host ``node``'s own engine; its stdout."""
    host = next(h for h in testhosts.env()["hosts"] if h["name"] == node)
    cmd = ["docker", "-H", host["docker_host"], *argv]
    return subprocess.run(cmd, capture_output=True, text=True, check=True).stdout


@pytest.fixture
def daemon(host_store: db.Store, tmp_path: Path) -> Iterator[Running]:
    """A daemon on ``host_store``, stopped after the test if the test did not."""
    # Quick ticks, no reconcile after the first: a container removed by hand stays gone.
    running = Running(
        host_store, tmp_path, introspect_every=600.0, reconcile_every=600.0, policy_options={}
    )
    yield running
    if not running.stop.is_set():
        running.close()


def _submit(store: db.Store, *argv: str) -> int:
    req = specs.build(image="gctl-test/train:1", command=[*TRAIN, *argv], gpus=1)
    return jobs.submit(store, [req])[0]


def _wait(what: str, check: Callable[[], Any], timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def _state(store: db.Store, job_id: int) -> str:
    return jobs.show_job(store, job_id).view.state


def _node_of(store: db.Store, job_id: int) -> str:
    return jobs.show_job(store, job_id).allocations[0][0]


def _name(store: db.Store, job: int, node: str) -> str:
    return container_name(store_id(store.engine), job, 0, node)


def test_tail_of_a_running_job(host_store: db.Store, daemon: Running) -> None:
    job = _submit(host_store, "--steps", "100000", "--step-time", "0.05")
    _wait("job running", lambda: _state(host_store, job) == "RUNNING")
    _wait("20 steps of output", lambda: "step 20/100000\n" in run("logs", str(job))[1])
    gctl = str(Path(sys.executable).with_name("gctl"))  # the command itself: bytes to stdout
    done = subprocess.run([gctl, "logs", str(job), "--tail", "3"], capture_output=True, timeout=60)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.decode().splitlines()
    steps = [int(m[1]) for m in map(re.compile(r"step (\d+)/100000").fullmatch, lines) if m]
    assert len(lines) == 3 and steps[0] >= 20 and steps == list(range(steps[0], steps[0] + 3))
    follow = subprocess.Popen(
        [gctl, "logs", str(job), "-f", "-n", "1"], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert follow.stdout is not None
    first, then = follow.stdout.readline(), follow.stdout.readline()  # the second comes live
    follow.send_signal(signal.SIGINT)  # Ctrl-C ends it quietly, as it ends gctl events -f
    _, err_bytes = follow.communicate(timeout=30)
    assert (follow.returncode, err_bytes) == (0, b"")
    shown = re.fullmatch(rb"step (\d+)/100000\n", first)
    assert shown is not None and then == f"step {int(shown[1]) + 1}/100000\n".encode()
    code, out, err = run("logs", str(job), "-n", "2", "--json")
    assert code == 0, err
    doc = json.loads(out)
    node = _node_of(host_store, job)
    assert (doc["job_id"], doc["node"], doc["nodes"]) == (job, node, [node])
    assert doc["container"] == _name(host_store, job, node) and len(doc["lines"]) == 2
    assert all(re.fullmatch(r"step \d+/100000", line) for line in doc["lines"])
    tail = logs.tail(host_store, job, 5)  # what the dashboard's job detail shows
    assert tail.source.node == node and len(tail.lines) == 5


def test_follow_streams_stdout_and_stderr_until_the_job_ends(
    host_store: db.Store, daemon: Running
) -> None:
    job = _submit(host_store, "--steps", "60", "--step-time", "0.1", "--fail-at", "60")
    _wait("job running", lambda: _state(host_store, job) == "RUNNING")
    node = _node_of(host_store, job)
    code, out, err = run("logs", str(job), "--follow")  # returns when the container exits
    assert code == 0, err
    lines = out.splitlines()
    # stdout in order; stderr's line beside it (the two are separate pipes: no order between them)
    assert [line for line in lines if line.startswith("step")] == [
        f"step {k}/60" for k in range(1, 61)
    ]
    assert len(lines) == 61 and "failing at step 60" in lines
    _wait("job failed", lambda: _state(host_store, job) == "FAILED")
    name = _name(host_store, job, node)
    _wait("its container removed", lambda: name not in _docker(node, "ps", "-a"))
    # Its output outlives its container: kept in its job directory on the node (Slurm's
    # slurm-N.out), stdout and stderr together.
    code, out, err = _wait("its kept output", lambda: (r := run("logs", str(job)))[0] == 0 and r)
    assert err == ""
    kept = out.splitlines()
    assert [line for line in kept if line.startswith("step")] == [
        f"step {k}/60" for k in range(1, 61)
    ]
    assert "failing at step 60" in kept
    code, out, err = run("logs", str(job), "-n", "3", "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["kept"] is True and len(doc["lines"]) == 3 and doc["notes"] == []
    # The file gone from the node: the last lines the store kept, and a note saying so.
    pattern = f"{node}/work/stores/{store_id(host_store.engine)}/jobs/{job}/output-a0.log"
    files = list(Path(testhosts.env()["dir"]).glob(pattern))
    assert len(files) == 1 and files[0].stat().st_size > 0
    files[0].unlink()
    code, out, err = run("logs", str(job), "-n", "2")
    assert code == 0
    assert out.splitlines()[-1] == kept[-1] and len(out.splitlines()) == 2
    assert err.startswith("gctl: note: attempt 0 on ") and "kept in the store" in err
    # Past the retention the daemon forgets it: the job's directory goes from the node, the
    # tail from the store.
    with Pool() as pool:
        sid = store_id(host_store.engine)
        assert output.prune(pool, host_store, sid, older_than=time.time() + 1) == [job]
    assert not files[0].parent.exists()
    code, out, err = run("logs", str(job))
    assert (code, out) == (1, "")  # ended a moment ago: it says the output may yet come
    assert err == f"gctl: error: job {job} ended just now: its output is still being kept\n"


def test_unknown_job_and_job_never_started(host_store: db.Store) -> None:
    code, out, err = run("logs", "99")
    assert (code, out, err) == (1, "", "gctl: error: unknown job 99\n")
    job = _submit(host_store)  # no daemon: it stays pending
    code, out, err = run("logs", str(job), "-f")
    assert (code, out) == (1, "")
    assert err == f"gctl: error: job {job} has not started yet (PENDING): no output so far\n"
    code, _, err = run("logs", str(job), "--json", "-f")
    assert code == 2 and "cannot --follow" in err


def test_node_away_then_container_gone(host_store: db.Store, daemon: Running) -> None:
    job = _submit(host_store, "--steps", "100000", "--step-time", "0.05")
    _wait("job running", lambda: _state(host_store, job) == "RUNNING")
    daemon.close()  # the job runs on without it, and nothing restarts it behind the test
    node = _node_of(host_store, job)
    other = ({"h1", "h2"} - {node}).pop()
    code, _, err = run("logs", str(job), "--node", other)
    assert code == 1 and err == f"gctl: error: job {job} runs on {node}, not on {other}\n"
    testhosts.ssh_stop(node)
    try:
        code, out, err = run("logs", str(job))
    finally:
        testhosts.ssh_start(node)
    assert (code, out) == (1, "")
    assert err.startswith(f"gctl: error: job {job}'s output: {node}: cannot reach ")
    assert err.count("\n") == 1
    _docker(node, "rm", "-f", _name(host_store, job, node))
    code, out, err = run("logs", str(job))
    assert (code, out) == (1, "")
    assert (
        err == f"gctl: error: job {job}: its container {_name(host_store, job, node)} is gone from"
        f" {node}\n"
    )
