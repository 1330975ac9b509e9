"""The host agent run here, as a host's python3 runs it: observations, attempt dirs, the watchdog.

No SSH or Docker: the agent is a plain program, and its ``docker`` is a
stand-in script that lists two containers and logs what it is asked.
"""

from __future__ import annotations

import http.server
import json
import os
import signal
import socketserver
import threading
import time
import urllib.parse
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from agentkit import run_mode

from gctl.hosts import agent

AGENT = agent.__file__


def _docker(tmp_path: Path) -> tuple[Path, Path]:
    """A stand-in ``docker``: ``ps`` lists c1 and c2, every call is logged (without its -H)."""
    log = tmp_path / "docker.log"
    script = tmp_path / "docker"
    script.write_text(
        "#!/bin/sh\n"
        'if [ "$1" = -H ]; then shift 2; fi\n'
        f'echo "$@" >> {log}\n'
        'if [ "$1" = ps ]; then echo c1; echo c2; else shift; echo "$@"; fi\n'
    )
    script.chmod(0o755)
    return script, log


def test_observe_reads_reports_and_says_when_it_read_them_and_when_the_host_booted(
    tmp_path: Path,
) -> None:
    done = tmp_path / "a0"
    done.mkdir()
    (done / "progress.json").write_text(json.dumps({"step": 5, "steps": 5, "done": True}))
    (done / "checkpoint.json").write_text(json.dumps({"step": 4, "time": 12.5, "state": {}}))
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "progress.json").write_text("{not json")
    before = time.time()
    got = run_mode("observe", {"dirs": [str(done), str(tmp_path / "broken"), "/nonexistent"]})
    assert before <= got["read_at"] <= time.time()  # the host's clock, to date report times
    reports = got["reports"]
    assert reports[str(done)]["progress"]["done"] is True
    assert reports[str(done)]["checkpoint"] == {"step": 4, "time": 12.5}
    assert reports[str(tmp_path / "broken")] == {} and reports["/nonexistent"] == {}
    assert 0 < got["boot_time"] < time.time()
    assert got["watchdog_started"] is None  # no lease asked for


def test_prepare_seeds_a_new_attempt_from_the_newest_earlier_one_and_keeps_two(
    tmp_path: Path,
) -> None:
    base = tmp_path / "jobs" / "7"
    first = run_mode("prepare", {"base": str(base), "attempt": 0})
    assert first == {"dir": str(base / "a0"), "seeded_from": None, "checkpoint_time": None}
    (base / "a0" / "checkpoint.json").write_text(json.dumps({"step": 3, "time": 30.0}))
    second = run_mode("prepare", {"base": str(base), "attempt": 1})
    assert (second["seeded_from"], second["checkpoint_time"]) == (0, 30.0)
    (base / "a1" / "checkpoint.json").write_text(json.dumps({"step": 9, "time": 90.0}))
    # a stale run of attempt 0 writing now cannot touch attempt 1's checkpoint
    (base / "a0" / "checkpoint.json").write_text(json.dumps({"step": 4, "time": 40.0}))
    again = run_mode("prepare", {"base": str(base), "attempt": 1})  # a start tried again
    assert (again["seeded_from"], again["checkpoint_time"]) == (None, 90.0)
    run_mode("prepare", {"base": str(base), "attempt": 3})
    run_mode("prepare", {"base": str(base), "attempt": 4})
    assert sorted(os.listdir(base)) == ["a1", "a3", "a4"]  # two before the newest are kept
    latest = json.loads((base / "a4" / "checkpoint.json").read_text())
    assert latest["step"] == 9


def _lease(
    agent_dir: Path, timeout: float, docker: Path, engine: str = "tcp://127.0.0.1:9"
) -> dict[str, Any]:
    """A lease whose CLI reaches ``engine`` (over TCP by default: only the CLI lists it)."""
    lease = {"dir": str(agent_dir), "store": "s1", "node": "n1", "timeout": timeout}
    return {**lease, "docker": [str(docker), "-H", engine]}


def _kills(log: Path) -> list[str]:
    if not log.exists():
        return []
    return [line for line in log.read_text().splitlines() if line.startswith("kill")]


def _wait_for(check: Any, within: float) -> None:
    deadline = time.monotonic() + within
    while not check():
        assert time.monotonic() < deadline, "not within the time"
        time.sleep(0.1)


def test_the_watchdog_kills_the_stores_containers_once_its_lease_runs_out(
    tmp_path: Path,
) -> None:
    docker, log = _docker(tmp_path)
    agent_dir = tmp_path / "agent"
    # a 3 s lease renewed every 0.3 s: a renewal's python start-up on a loaded machine
    # must not look like a lapse
    got = run_mode("observe", {"lease": _lease(agent_dir, 3.0, docker)})
    pid = got["watchdog_started"]
    assert isinstance(pid, int)
    try:
        again = run_mode("observe", {"lease": _lease(agent_dir, 3.0, docker)})
        assert again["watchdog_started"] is None  # one watchdog per store and host
        for _ in range(6):  # renewed: nothing happens
            time.sleep(0.3)
            run_mode("observe", {"lease": _lease(agent_dir, 3.0, docker)})
        assert _kills(log) == []
        _wait_for(lambda: _kills(log), within=10)  # not renewed: killed
        assert _kills(log)[0] == "kill c1 c2"
        # this node's containers of this store only: an engine may serve several nodes
        assert "ps -q --filter label=gctl.store=s1 --filter label=gctl.node=n1" in log.read_text()
        assert "unpause c1 c2" in log.read_text()  # a frozen container cannot be killed
        assert (agent_dir / "watchdog.log").read_text().count("lease expired") >= 1
        run_mode("standdown", {"dir": str(agent_dir)})
        time.sleep(0.5)
        count = len(_kills(log))
        time.sleep(2.0)
        assert len(_kills(log)) == count  # the daemon stopped on purpose: jobs keep running
        assert agent_dir.stat().st_mode & 0o077 == 0  # the store's own, whatever the umask
    finally:
        os.kill(pid, signal.SIGTERM)


class _UnixEngine(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True


@contextmanager
def _engine(sock: Path, running: list[str], asked: list[str]) -> Iterator[None]:
    """A stand-in engine API on a unix socket: lists ``running``, notes each path asked."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            asked.append(urllib.parse.unquote(self.path))
            body = json.dumps([{"Id": c, "State": "running"} for c in running]).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def address_string(self) -> str:
            return "engine"  # a unix socket's peer has no address

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = _UnixEngine(str(sock), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield
    finally:
        server.shutdown()
        server.server_close()


def test_a_lapsed_watchdog_lists_through_the_engines_socket_then_waits_while_none_runs(
    tmp_path: Path,
) -> None:
    docker, log = _docker(tmp_path)
    agent_dir, sock = tmp_path / "agent", tmp_path / "engine.sock"
    running, asked = ["c9"], []
    lease = _lease(agent_dir, 1.0, docker, f"unix://{sock}")
    with _engine(sock, running, asked):
        pid = run_mode("observe", {"lease": lease})["watchdog_started"]
        assert isinstance(pid, int)
        try:
            _wait_for(lambda: _kills(log), within=10)
            assert _kills(log)[0] == "kill c9"
            assert not [line for line in log.read_text().splitlines() if line.startswith("ps")]
            assert asked[0].startswith("/containers/json?all=0&")  # running ones only
            assert "gctl.store=s1" in asked[0] and "gctl.node=n1" in asked[0]
            running.clear()  # killed: the next look finds none, and the engine is left alone
            _wait_for(lambda: len(asked) >= 2, within=5)
            time.sleep(0.5)
            quiet = len(asked)
            time.sleep(3.0)
            assert len(asked) == quiet
            run_mode("observe", {"lease": lease})  # renewed, and lapsed again: looked at once
            _wait_for(lambda: len(asked) > quiet, within=4)
        finally:
            os.kill(pid, signal.SIGTERM)


def test_the_watchdog_leaves_when_its_store_directory_goes(tmp_path: Path) -> None:
    docker, _ = _docker(tmp_path)
    agent_dir = tmp_path / "agent"
    pid = run_mode("observe", {"lease": _lease(agent_dir, 60.0, docker)})["watchdog_started"]
    for name in os.listdir(agent_dir):
        os.unlink(agent_dir / name)
    agent_dir.rmdir()
    _wait_for(lambda: not Path(f"/proc/{pid}").exists() or _zombie(pid), within=5)


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1].startswith("Z")
    except OSError:
        return True


def test_split_set_writes_the_plan_owned_like_the_job_dir_and_never_through_a_link(
    tmp_path: Path,
) -> None:
    job_dir = tmp_path / "a0"
    job_dir.mkdir()
    os.chown(job_dir, 1234, 1234)
    plan = [[[200, 56], None]]
    assert run_mode("split-set", {"dir": str(job_dir), "split": {"version": 3, "plan": plan}}) == {
        "version": 3
    }
    written = job_dir / "split.json"
    assert json.loads(written.read_text()) == {"version": 3, "plan": plan}
    assert (written.stat().st_uid, written.stat().st_gid) == (1234, 1234)
    # the job's user swaps split.json for a link to a file of root's: the link is replaced,
    # the file it pointed at untouched
    victim = tmp_path / "victim"
    victim.write_text("root's\n")
    written.unlink()
    written.symlink_to(victim)
    run_mode("split-set", {"dir": str(job_dir), "split": {"version": 4, "plan": plan}})
    assert victim.read_text() == "root's\n"
    assert not written.is_symlink() and json.loads(written.read_text())["version"] == 4
    assert [p.name for p in job_dir.iterdir()] == ["split.json"]  # no temporary file left


def test_two_observes_at_once_start_one_watchdog(tmp_path: Path) -> None:
    """The lock is taken before the watchdog starts, not by the watchdog once it runs."""
    docker, _ = _docker(tmp_path)
    agent_dir = tmp_path / "agent"
    with ThreadPoolExecutor(4) as pool:
        got = list(
            pool.map(
                lambda _: run_mode("observe", {"lease": _lease(agent_dir, 60.0, docker)}),
                range(4),
            )
        )
    started = [g["watchdog_started"] for g in got if g["watchdog_started"] is not None]
    try:
        assert len(started) == 1, started
        assert (
            run_mode("observe", {"lease": _lease(agent_dir, 60.0, docker)})["watchdog_started"]
            is None
        )
    finally:
        for pid in started:
            os.kill(pid, signal.SIGTERM)


def _logs_docker(tmp_path: Path, lines: int) -> list[str]:
    """A stand-in ``docker``: ``logs C`` writes ``lines`` numbered lines, odd ones on stderr."""
    script = tmp_path / "logs-docker"
    script.write_text(
        "import sys\n"
        "assert sys.argv[1:] == ['logs', 'cid1'], sys.argv\n"
        f"for i in range({lines}):\n"
        "    (sys.stderr if i % 2 else sys.stdout).write(f'line {i}\\n')\n"
        "    (sys.stderr if i % 2 else sys.stdout).flush()\n"
    )
    return ["python3", str(script)]


def test_keep_output_saves_the_last_bytes_owned_like_the_job_dir_never_through_a_link(
    tmp_path: Path,
) -> None:
    job_dir = tmp_path / "a0"
    job_dir.mkdir()
    os.chown(job_dir, 1234, 1234)
    victim = tmp_path / "victim"
    victim.write_text("root's\n")
    (job_dir / "output-a0.log").symlink_to(victim)  # planted by the job's user
    request = {
        "docker": _logs_docker(tmp_path, 1000),
        "container": "cid1",
        "dir": str(job_dir),
        "name": "output-a0.log",
        "max_bytes": 1000,
        "tail_lines": 3,
    }
    got = run_mode("keep-output", request)
    written = job_dir / "output-a0.log"
    total = sum(len(f"line {i}\n") for i in range(1000))
    assert got == {"path": str(written), "bytes": total, "tail": "line 997\nline 998\nline 999"}
    assert victim.read_text() == "root's\n" and not written.is_symlink()
    text = written.read_text()
    assert text.startswith(f"[gctl: the first {total - 1000} bytes of output were not kept]\n")
    body = text.split("\n", 1)[1]
    assert len(body.encode()) == 1000 and body.endswith("line 998\nline 999\n")
    run_mode("keep-output", {**request, "max_bytes": 10**6})  # room for all: nothing dropped
    assert written.read_text().startswith("line 0\nline 1\n")
    st = written.stat()
    assert (st.st_uid, st.st_gid, st.st_mode & 0o777) == (1234, 1234, 0o600)
    assert sorted(p.name for p in job_dir.iterdir()) == ["output-a0.log"]


def test_forget_jobs_removes_job_directories_and_never_follows_a_link(tmp_path: Path) -> None:
    base = tmp_path / "jobs"
    (base / "7" / "a0").mkdir(parents=True)
    (base / "7" / "a0" / "output-a0.log").write_text("out\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "keep").write_text("keep\n")
    (base / "8").symlink_to(elsewhere)
    got = run_mode("forget-jobs", {"base": str(base), "jobs": [7, 8, 9]})
    assert got == {"removed": [7, 8]}
    assert sorted(p.name for p in base.iterdir()) == []
    assert (elsewhere / "keep").read_text() == "keep\n"


def test_the_engine_socket_is_the_one_the_docker_cli_would_reach(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("DOCKER_HOST", raising=False)
    monkeypatch.delenv("DOCKER_CONTEXT", raising=False)
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path))
    assert agent.engine_socket(["docker"]) == "/var/run/docker.sock"
    assert agent.engine_socket(["docker", "-H", "unix:///run/e1.sock"]) == "/run/e1.sock"
    assert agent.engine_socket(["docker", "-H", "tcp://10.0.0.1:2375"]) is None
    monkeypatch.setenv("DOCKER_HOST", "unix:///run/e2.sock")  # sshd's SetEnv, say
    assert agent.engine_socket(["docker"]) == "/run/e2.sock"
    assert agent.engine_socket(["docker", "-H", "unix:///run/e1.sock"]) == "/run/e1.sock"
    monkeypatch.delenv("DOCKER_HOST")
    (tmp_path / "config.json").write_text(json.dumps({"currentContext": "rootless"}))
    assert agent.engine_socket(["docker"]) is None  # only the CLI knows where that is
    (tmp_path / "config.json").write_text(json.dumps({"currentContext": "default"}))
    assert agent.engine_socket(["docker"]) == "/var/run/docker.sock"
    monkeypatch.setenv("DOCKER_CONTEXT", "remote")
    assert agent.engine_socket(["docker"]) is None


def test_observe_says_why_it_could_not_list_containers(tmp_path: Path) -> None:
    sock = tmp_path / "none.sock"
    got = run_mode(
        "observe", {"docker": ["docker", "-H", f"unix://{sock}"], "containers": {"labels": []}}
    )
    assert "containers" not in got
    assert got["containers_error"].startswith("FileNotFoundError")
    tcp = {"docker": ["docker", "-H", "tcp://127.0.0.1:1"], "containers": {"labels": []}}
    assert "not reached through a unix socket" in run_mode("observe", tcp)["containers_error"]
