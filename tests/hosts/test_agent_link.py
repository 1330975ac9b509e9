"""Long-running host agents: many requests to one agent, errors told back, hung agents replaced.

The agent is the real one in ``serve`` mode, run here as a host's python3
runs it. What stands in for SSH is :class:`PipePool`: its channels are the
agent process's pipes. The daemon's looks over real SSH are exercised by
the host tests (``test_daemon.py`` and the fault tests).
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from gctl.daemon import jobfiles
from gctl.hosts.agent_link import AgentLink, AgentLinks
from gctl.hosts.ssh import CommandTimeout, HostError, Target

TARGET = Target("n1", "127.0.0.1")


class PipeChannel:
    """The parts of a paramiko channel a link uses, over a local process's pipes."""

    def __init__(self, argv: Sequence[str]) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, *argv[1:]],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            bufsize=0,
        )
        self.timeout: float | None = None

    def settimeout(self, timeout: float | None) -> None:
        self.timeout = timeout

    def sendall(self, data: bytes) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(data)

    def recv(self, size: int) -> bytes:
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        if not select.select([fd], [], [], self.timeout)[0]:
            raise TimeoutError
        return os.read(fd, size)

    def recv_stderr_ready(self) -> bool:
        assert self.proc.stderr is not None
        return bool(select.select([self.proc.stderr.fileno()], [], [], 0)[0])

    def recv_stderr(self, size: int) -> bytes:
        assert self.proc.stderr is not None
        return os.read(self.proc.stderr.fileno(), size)

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()


class PipePool:
    """Opens each 'channel' as a local process; remembers every one it opened."""

    def __init__(self) -> None:
        self.opened: list[PipeChannel] = []

    def open(self, target: Target, argv: Sequence[str], *, timeout: float | None = None) -> Any:
        channel = PipeChannel(argv)
        self.opened.append(channel)
        return channel

    def end(self) -> None:
        for channel in self.opened:
            if channel.proc.poll() is None:
                channel.proc.kill()
            channel.proc.wait()


@pytest.fixture
def pool() -> Any:
    p = PipePool()
    yield p
    p.end()


def _link(pool: PipePool) -> AgentLink:
    return AgentLink(pool, TARGET, jobfiles.agent_argv("serve"))  # type: ignore[arg-type]


def test_one_agent_answers_request_after_request(pool: PipePool, tmp_path: Path) -> None:
    job = tmp_path / "a0"
    job.mkdir()
    link = _link(pool)
    for step in (1, 2, 3):
        (job / "progress.json").write_text(json.dumps({"step": step, "steps": 9}))
        got = link.ask("observe", {"dirs": [str(job)]}, timeout=10)
        assert got["reports"][str(job)]["progress"]["step"] == step
        assert isinstance(got["boot_time"], float)
    assert len(pool.opened) == 1  # one agent answered all three


def test_a_failed_request_is_told_back_and_the_agent_goes_on(pool: PipePool) -> None:
    link = _link(pool)
    with pytest.raises(HostError, match=r"gctl agent no-such-mode failed: KeyError"):
        link.ask("no-such-mode", {}, timeout=10)
    with pytest.raises(HostError, match=r"gctl agent split-set failed"):
        link.ask("split-set", {"dir": "/nonexistent/x", "split": {}}, timeout=10)
    assert link.ask("observe", {}, timeout=10)["reports"] == {}
    assert len(pool.opened) == 1


def test_a_hung_agent_times_out_and_the_next_request_starts_a_new_one(pool: PipePool) -> None:
    link = _link(pool)
    link.ask("observe", {}, timeout=10)
    hung = pool.opened[0].proc
    os.kill(hung.pid, signal.SIGSTOP)
    try:
        began = time.monotonic()
        with pytest.raises(CommandTimeout, match=r"gave no answer within 0\.5 s"):
            link.ask("observe", {}, timeout=0.5)
        assert time.monotonic() - began < 3
        assert link.ask("observe", {}, timeout=10)["reports"] == {}
        assert len(pool.opened) == 2
    finally:
        os.kill(hung.pid, signal.SIGCONT)
    # its stdin was closed: once thawed, the old agent ends, its late answer never read
    assert hung.wait(timeout=10) == 0


def test_an_agent_that_died_is_replaced(pool: PipePool) -> None:
    link = _link(pool)
    link.ask("observe", {}, timeout=10)
    pool.opened[0].proc.kill()
    pool.opened[0].proc.wait()
    with pytest.raises(HostError, match="agent link lost"):
        link.ask("observe", {}, timeout=10)
    assert link.ask("observe", {}, timeout=10)["reports"] == {}
    assert len(pool.opened) == 2


def test_links_end_their_agents_when_a_node_leaves_or_at_close(pool: PipePool) -> None:
    links = AgentLinks(pool, jobfiles.agent_argv("serve"))  # type: ignore[arg-type]
    other = Target("n2", "127.0.0.2")
    links.ask(TARGET, "observe", {}, timeout=10)
    links.ask(other, "observe", {}, timeout=10)
    links.ask(TARGET, "observe", {}, timeout=10)
    assert len(pool.opened) == 2  # one agent per node
    links.ask(Target("n1", "127.0.0.9"), "observe", {}, timeout=10)  # n1 moved: a new agent
    assert len(pool.opened) == 3
    assert pool.opened[0].proc.wait(timeout=10) == 0
    links.forget("n2")
    assert pool.opened[1].proc.wait(timeout=10) == 0
    links.close()
    assert pool.opened[2].proc.wait(timeout=10) == 0


def test_the_watchdog_a_serving_agent_starts_is_not_its_child(
    pool: PipePool, tmp_path: Path
) -> None:
    """Killing the SSH session's processes (sshd stopped) ends the agent, never the watchdog."""
    lease = {"dir": str(tmp_path / "agent"), "store": "s1", "node": "n1", "timeout": 60.0}
    link = _link(pool)
    got = link.ask("observe", {"lease": {**lease, "docker": ["/bin/false"]}}, timeout=10)
    watchdog = int(got["watchdog_started"])
    try:
        stat = Path(f"/proc/{watchdog}/stat").read_text()
        parent = int(stat[stat.rfind(")") + 2 :].split()[1])
        assert parent != pool.opened[0].proc.pid
        pool.opened[0].proc.kill()
        pool.opened[0].proc.wait()
        time.sleep(0.2)
        assert Path(f"/proc/{watchdog}").exists()  # still watching
    finally:
        os.kill(watchdog, signal.SIGKILL)
