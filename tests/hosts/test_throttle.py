"""The agent's throttle on a real container of a test host's engine: duty cycle and lease.

The agent runs here as the host's ``python3`` runs it, its ``docker``
pointed at test host h1's engine; the container counts short sleeps into a
file of a bind-mounted directory, so its progress rate is the fraction of
time its cgroup is thawed.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from agentkit import run_mode

from gctl.hosts import agent

COUNTER = """
import os, signal, time
signal.signal(signal.SIGUSR1, lambda *_: None)
n, last = 0, time.time()
while True:
    time.sleep(0.002)
    n += 1
    if time.time() - last > 0.05:
        with open('/out/n.tmp', 'w') as fh:
            fh.write(str(n))
        os.replace('/out/n.tmp', '/out/n')
        last = time.time()
"""


@pytest.fixture
def counter(hosts: dict[str, Any], tmp_path: Path) -> Iterator[tuple[list[str], str, Path]]:
    """A counting container on h1: the docker argv reaching h1's engine, its id, its out dir."""
    h1 = next(h for h in hosts["hosts"] if h["name"] == "h1")
    docker = ["docker", "-H", h1["docker_host"]]
    out = tmp_path / "out"
    out.mkdir()
    run = [*docker, "run", "-d", "--label", "gctl.test=throttle", "-v", f"{out}:/out"]
    cid = subprocess.run(
        [*run, "gctl-test/train:1", "python3", "-c", COUNTER],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    try:
        deadline = time.monotonic() + 30
        while not (out / "n").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        yield docker, cid, out
    finally:
        subprocess.run([*docker, "rm", "-f", cid], capture_output=True, check=False)


def _set(tdir: Path, docker: list[str], cid: str, beta: float, lease: float) -> dict[str, Any]:
    request = {"dir": str(tdir), "container": cid, "beta": beta, "lease": lease, "docker": docker}
    return run_mode("throttle-set", request)


def _rate(out: Path, seconds: float = 2.0) -> float:
    """Counts a second over ``seconds``."""
    first = int((out / "n").read_text())
    time.sleep(seconds)
    return (int((out / "n").read_text()) - first) / seconds


def _throttle_alive(tdir: Path) -> bool:
    fd = os.open(tdir / agent.THROTTLE_LOCK, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return True
    finally:
        os.close(fd)
    return False


def test_the_throttle_runs_a_container_for_beta_of_the_time_and_thaws_it_when_its_lease_ends(
    counter: tuple[list[str], str, Path], tmp_path: Path
) -> None:
    docker, cid, out = counter
    tdir = tmp_path / "throttle"
    free = _rate(out)
    assert free > 50
    before = time.time()
    started = _set(tdir, docker, cid, 0.3, lease=60.0)
    assert started["started"] is not None and started["beta"] == 0.3
    assert before <= started["since"] <= time.time()  # the host is this machine: one clock
    time.sleep(0.5)
    throttled = _rate(out)
    assert 0.15 * free <= throttled <= 0.45 * free, (free, throttled)
    renewed = _set(tdir, docker, cid, 0.3, lease=60.0)  # the same beta: still since then
    assert renewed["since"] == started["since"] and renewed["started"] is None
    small = _set(tdir, docker, cid, 0.02, lease=60.0)  # 2 ms of a 0.1 s period: a longer cycle
    assert small["since"] > started["since"]
    time.sleep(1.0)
    crawl = _rate(out, 3.0)
    assert 0 < crawl <= 0.08 * free, (free, crawl)
    again = _set(tdir, docker, cid, 0.0, lease=2.0)  # a change is picked up by the same throttle
    assert again["started"] is None
    time.sleep(0.5)
    assert _rate(out, 1.0) <= 0.05 * free  # held
    # The daemon stops renewing (killed): the lease runs out, the container is thawed.
    deadline = time.monotonic() + 10
    while _throttle_alive(tdir) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _throttle_alive(tdir)
    assert _rate(out, 1.0) >= 0.7 * free
    assert "lease expired" in (tdir / agent.THROTTLE_LOG).read_text()


def _remove_setting(tdir: Path, docker: list[str], cid: str) -> None:
    (tdir / agent.THROTTLE).unlink()


def _signal_the_job(tdir: Path, docker: list[str], cid: str) -> None:
    subprocess.run([*docker, "kill", "-s", "USR1", cid], capture_output=True, check=True)


@pytest.mark.parametrize(
    ("end", "why"),
    [
        (_remove_setting, "(stopped): thawed"),  # the pair ended
        (_signal_the_job, "a signal is pending for the job"),  # a checkpoint or stop asked
    ],
)
def test_the_throttle_thaws_a_held_container_at_once_when_it_is_no_longer_wanted(
    counter: tuple[list[str], str, Path],
    tmp_path: Path,
    end: Callable[[Path, list[str], str], None],
    why: str,
) -> None:
    """A removed setting, or a signal for the held job, thaws it within a period."""
    docker, cid, out = counter
    tdir = tmp_path / "throttle"
    free = _rate(out, 1.0)
    _set(tdir, docker, cid, 0.0, lease=60.0)
    time.sleep(0.5)
    assert _rate(out, 1.0) <= 0.05 * free
    end(tdir, docker, cid)
    time.sleep(0.5)
    assert not _throttle_alive(tdir)
    assert _rate(out, 1.0) >= 0.7 * free
    assert why in (tdir / agent.THROTTLE_LOG).read_text()


@pytest.mark.parametrize(
    ("beta", "period", "thaw", "freeze"),
    [
        (0.0, 0.1, 0.0, 0.1),
        (1.0, 0.1, 0.1, 0.0),
        (0.3, 0.1, 0.03, 0.07),
        (0.05, 0.1, agent.MIN_THAW, agent.MIN_THAW * 19),  # 5 ms would be too short to run
        (2.0, 0.1, 0.1, 0.0),  # clamped
    ],
)
def test_a_small_beta_stretches_the_cycle_rather_than_thawing_for_too_short_a_time(
    beta: float, period: float, thaw: float, freeze: float
) -> None:
    got = agent.duty_cycle(beta, period)
    assert got == pytest.approx((thaw, freeze))
    if 0 < beta < 1:
        assert got[0] / (got[0] + got[1]) == pytest.approx(beta)
