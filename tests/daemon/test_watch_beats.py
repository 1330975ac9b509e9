"""When the watch starts heartbeats: when due, whatever the ticks, a period apart at most.

The looks here are a stand-in for :func:`gctl.daemon.watch.observe` (no
host): each records when it began and answers after ``LOOK_S``. The
heartbeats at real hosts are tested in ``tests/hosts``.
"""

from __future__ import annotations

import itertools
import statistics
import threading
import time
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest

from gctl.daemon import watch as watch_module
from gctl.daemon.inflight import Inflight
from gctl.daemon.watch import JobHere, Observation, Watch
from gctl.store.models import NodeRow, now

LOOK_S = 0.05


@pytest.fixture
def begun(monkeypatch: pytest.MonkeyPatch) -> dict[str, list[tuple[float, bool]]]:
    """Each node's looks as (monotonic time begun, full), the looks made by a stand-in."""
    seen: dict[str, list[tuple[float, bool]]] = {}
    lock = threading.Lock()

    def observe(site: Any, row: NodeRow, jobs: Any, *, full: bool, seq: int, **_: Any) -> Any:
        with lock:
            seen.setdefault(row.name, []).append((time.monotonic(), full))
        time.sleep(LOOK_S)
        return Observation(row.name, now(), seq, full)

    monkeypatch.setattr(watch_module, "observe", observe)
    return seen


@pytest.fixture
def inflight() -> Iterator[Inflight]:
    """The daemon's record of its actions (none here)."""
    got = Inflight()
    yield got
    got.close()


def _ticks(watch: Watch, nodes: list[str], every: float, seconds: float, busy: str = "") -> None:
    """Call the watch as the daemon's tick does, every ``every`` s for ``seconds``."""
    rows = {name: NodeRow(name=name) for name in nodes}
    jobs = {busy: [JobHere(1, 1, home=True)]} if busy else {}
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        watch.look(rows, {}, jobs)
        watch.collect()
        time.sleep(every)


def _gaps(looks: list[tuple[float, bool]], skip: int = 1) -> list[float]:
    """The times between a node's heartbeats (its full looks), from its ``skip`` + 1st on."""
    beats = [at for at, full in looks if full][skip:]
    return [b - a for a, b in itertools.pairwise(beats)]


def test_heartbeats_start_when_due_though_the_ticks_come_seconds_apart(
    begun: dict[str, list[tuple[float, bool]]], inflight: Inflight
) -> None:
    # a tick every 1.3 s, as under load at a thousand nodes; a heartbeat every 0.5 s
    watch = Watch(None, inflight, heartbeat_every=0.5, answer_within=5.0, lease_timeout=60.0)  # type: ignore[arg-type]
    try:
        _ticks(watch, ["a", "b", "busy"], every=1.3, seconds=5.0, busy="busy")
    finally:
        watch.close()
    for name in ("a", "b", "busy"):
        gaps = _gaps(begun[name])
        assert len(gaps) >= 6, (name, begun[name])
        assert max(gaps) <= 0.5 + 0.25, (name, gaps)  # not a tick apart (1.3 s)


def test_the_tick_leaves_a_look_ended_for_collect_so_that_reconcile_may_trust_it(
    begun: dict[str, list[tuple[float, bool]]], inflight: Inflight
) -> None:
    watch = Watch(None, inflight, heartbeat_every=60.0, answer_within=5.0, lease_timeout=60.0)  # type: ignore[arg-type]
    rows = {"busy": NodeRow(name="busy")}
    jobs = {"busy": [JobHere(1, 1, home=True)]}
    try:
        watch.look(rows, {}, jobs)  # its heartbeat
        time.sleep(4 * LOOK_S)
        watch.look(rows, {}, jobs)  # the next tick: the look ended, not collected yet
        [got] = watch.collect()
        assert watch.trusted("busy") is got  # no look runs: reconcile may act on it
        watch.look(rows, {}, jobs)  # the tick after: a light look
        assert watch.trusted("busy") is None
        time.sleep(4 * LOOK_S)  # begun before the watch closes
    finally:
        watch.close()
    assert [full for _, full in begun["busy"]] == [True, False]


def test_heartbeats_queued_behind_others_are_planned_early_to_stay_a_period_apart(
    begun: dict[str, list[tuple[float, bool]]],
    inflight: Inflight,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # one thread for four nodes: each round's heartbeats begin up to 3 looks late
    monkeypatch.setattr(watch_module, "OBSERVERS", 1)
    period = 1.0
    watch = Watch(None, inflight, heartbeat_every=period, answer_within=5.0, lease_timeout=60.0)  # type: ignore[arg-type]
    try:
        _ticks(watch, ["a", "b", "c", "d"], every=0.3, seconds=6.0)
    finally:
        watch.close()
    # from the third heartbeat on: the first two are planned before any lateness is known
    gaps = [g for name in "abcd" for g in _gaps(begun[name], skip=2)]
    assert len(gaps) >= 12, begun
    # planned early by the lateness seen (3 looks), so within the period with room to spare
    assert statistics.mean(gaps) <= period - 2 * LOOK_S, gaps
    assert max(gaps) <= period + 0.05, gaps
    assert min(gaps) >= period * (1 - watch_module.MAX_LATE) - 0.05, gaps  # never earlier


def test_a_node_removed_gets_no_heartbeat_after(
    begun: dict[str, list[tuple[float, bool]]], inflight: Inflight
) -> None:
    forgot: list[str] = []
    site = SimpleNamespace(agents=SimpleNamespace(forget=forgot.append))
    watch = Watch(site, inflight, heartbeat_every=0.3, answer_within=5.0, lease_timeout=60.0)  # type: ignore[arg-type]
    try:
        _ticks(watch, ["a", "b"], every=0.2, seconds=1.0)
        rows = {"a": NodeRow(name="a")}
        watch.look(rows, {}, {})
        watch.collect()
        removed = time.monotonic()
        time.sleep(1.0)
        watch.collect()
    finally:
        watch.close()
    assert forgot == ["b"]
    assert [at for at, _ in begun["b"] if at > removed] == []
    assert len([at for at, _ in begun["a"] if at > removed]) >= 2
