"""Host actions in parallel lanes: a job's actions in order, others side by side, failures kept."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest

from gctl.daemon import lanes
from gctl.daemon.lanes import Step
from gctl.hosts.ssh import HostError


def _record(log: list[str], name: str, pause: float = 0.0) -> Callable[[], None]:
    def act() -> None:
        time.sleep(pause)
        log.append(name)

    return act


def _fail(why: str) -> Callable[[], None]:
    def act() -> None:
        raise HostError("n1", why)

    return act


def test_a_jobs_steps_share_a_lane_and_a_node_set_gets_up_to_per_nodes_lanes() -> None:
    noop: Callable[[], None] = lambda: None  # noqa: E731
    steps = [Step(f"place {j}", j, ("n1",), noop) for j in range(6)]
    steps += [Step("freeze 0", 0, ("n1",), noop), Step("queue 7", 7, (), None)]
    steps.append(Step("place 8", 8, ("n2", "n1"), noop))
    split = [[step.item for _, step in lane] for lane in lanes.lanes(steps)]
    assert split == [
        ["place 0", "place 4", "freeze 0"],
        ["place 1", "place 5"],
        ["place 2"],
        ["place 3"],
        ["place 8"],
    ]
    assert lanes.PER_NODES == 4


def test_lanes_run_side_by_side_and_each_yield_is_in_the_given_order() -> None:
    log: list[str] = []
    steps = [Step(f"start {j}", j, (f"n{j}",), _record(log, f"start {j}", 0.3)) for j in range(8)]
    steps.append(Step("queue 9", 9, (), None))
    began = time.monotonic()
    chunks = list(lanes.run(steps, workers=8, every=5.0))
    took = time.monotonic() - began
    assert took < 1.5  # one after another would take 8 x 0.3 s
    done = [d for chunk in chunks for d in chunk]
    assert [d.item for d in done] == [s.item for s in steps]
    assert all(d.error is None for d in done)
    assert sorted(log) == sorted(f"start {j}" for j in range(8))


def _wait(event: threading.Event) -> None:
    assert event.wait(10)


def test_what_is_done_comes_back_while_slow_lanes_go_on() -> None:
    release = threading.Event()
    steps = [
        Step("quick", 1, ("n1",), lambda: None),
        Step("slow", 2, ("n2",), lambda: _wait(release)),
    ]
    chunks = lanes.run(steps, workers=2, every=0.2)
    first = next(chunks)
    assert [d.item for d in first] == ["quick"]
    release.set()
    assert [d.item for chunk in chunks for d in chunk] == ["slow"]


def test_a_failure_takes_the_jobs_later_steps_and_leaves_the_others() -> None:
    log: list[str] = []
    steps = [
        Step("place 1", 1, ("n1",), _fail("no room")),
        Step("place 2", 2, ("n1",), _record(log, "place 2")),
        Step("freeze 1", 1, ("n1",), _record(log, "freeze 1")),
    ]
    done = [d for chunk in lanes.run(steps, workers=4, every=5.0) for d in chunk]
    outcome = {d.item: None if d.error is None else str(d.error) for d in done}
    assert outcome == {
        "place 1": "n1: no room",
        "place 2": None,
        "freeze 1": "-: not carried out: an earlier action on it failed (n1: no room)",
    }
    assert log == ["place 2"]


def test_an_error_that_is_not_a_host_error_propagates() -> None:
    def bug() -> None:
        raise KeyError("bug")

    with pytest.raises(KeyError):
        list(lanes.run([Step("x", 1, ("n1",), bug)], workers=1, every=1.0))
