"""How often the daemon looks at each node: never more than the heartbeat period apart.

The looks themselves are replaced by an instant answer, and the watch's
monotonic clock by one the test moves tick by tick, so the schedule alone
is checked.
"""

from __future__ import annotations

import itertools
import types
from typing import Any, cast

import pytest

from gctl.daemon import watch as watch_module
from gctl.daemon.inflight import Inflight
from gctl.daemon.site import Site
from gctl.daemon.watch import Observation, Watch
from gctl.store.models import NodeRow


def _gaps(monkeypatch: pytest.MonkeyPatch, *, tick: float, heartbeat: float) -> list[float]:
    """Seconds between two full looks at a node over 60 s of ticks ``tick`` apart."""
    clock = [1000.0]
    looks: list[float] = []

    def answer(site: Site, row: NodeRow, jobs: Any, *, full: bool, **kw: Any) -> Observation:
        if full:
            looks.append(clock[0])
        return Observation(row.name, kw["began"], kw["seq"], full)

    monkeypatch.setattr(watch_module, "observe", answer)
    monkeypatch.setattr(watch_module, "time", types.SimpleNamespace(monotonic=lambda: clock[0]))
    inflight = Inflight()
    watch = Watch(
        cast(Site, None),
        inflight,
        heartbeat_every=heartbeat,
        answer_within=3.0,
        lease_timeout=60.0,
        tick=tick,
    )
    node = {"a1": NodeRow(name="a1", host="a1.lan")}
    try:
        while clock[0] < 1060.0:
            watch.look(node, {}, {})
            for running in list(watch._running.values()):
                running.future.result(5)
            watch.collect()
            clock[0] += tick
    finally:
        watch.close()
        inflight.close()
    return [b - a for a, b in itertools.pairwise(looks)]


@pytest.mark.parametrize(("tick", "heartbeat"), [(1.0, 5.0), (0.7, 5.0), (2.0, 5.0)])
def test_no_node_waits_longer_than_the_heartbeat_period_between_looks(
    monkeypatch: pytest.MonkeyPatch, tick: float, heartbeat: float
) -> None:
    gaps = _gaps(monkeypatch, tick=tick, heartbeat=heartbeat)
    assert len(gaps) >= 60 / heartbeat - 1
    assert max(gaps) <= heartbeat + 1e-9
    assert min(gaps) > heartbeat - tick - 1e-9  # and never more often than it needs


def test_a_tick_longer_than_the_period_looks_every_tick(monkeypatch: pytest.MonkeyPatch) -> None:
    gaps = _gaps(monkeypatch, tick=6.0, heartbeat=5.0)
    assert gaps and all(abs(g - 6.0) < 1e-9 for g in gaps)
