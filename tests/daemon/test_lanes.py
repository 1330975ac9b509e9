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


def _all(running: lanes.LaneRun[str]) -> list[lanes.Done[str]]:
    """Every outcome of a run, waiting for its end."""
    done: list[lanes.Done[str]] = []
    deadline = time.monotonic() + 30
    while not running.finished:
        assert time.monotonic() < deadline
        done += running.take(0.5)
    return done + running.take()


def test_lanes_run_side_by_side_and_each_take_is_in_the_given_order() -> None:
    log: list[str] = []
    steps = [Step(f"start {j}", j, (f"n{j}",), _record(log, f"start {j}", 0.3)) for j in range(8)]
    steps.append(Step("queue 9", 9, (), None))
    began = time.monotonic()
    running = lanes.LaneRun(steps, workers=8)
    assert [d.item for d in running.take()] == ["queue 9"]  # nothing to do on a host: at once
    done = _all(running)
    took = time.monotonic() - began
    assert took < 1.5  # one after another would take 8 x 0.3 s
    assert sorted(d.item for d in done) == sorted(s.item for s in steps[:8])
    assert all(d.error is None and not d.skipped for d in done)
    assert sorted(log) == sorted(f"start {j}" for j in range(8))


def _wait(event: threading.Event) -> None:
    assert event.wait(10)


def test_what_is_done_comes_back_while_slow_lanes_go_on() -> None:
    release = threading.Event()
    steps = [
        Step("quick", 1, ("n1",), lambda: None),
        Step("slow", 2, ("n2",), lambda: _wait(release)),
    ]
    running = lanes.LaneRun(steps, workers=2)
    first = running.take(2.0)
    assert [d.item for d in first] == ["quick"]
    assert not running.finished and not running.future.done()
    release.set()
    assert [d.item for d in _all(running)] == ["slow"]
    assert running.future.done()


def test_a_step_done_is_outstanding_until_it_is_handed_back() -> None:
    """Its caller has not recorded it yet: what it acts on must still count as busy."""
    release = threading.Event()
    steps = [
        Step("nothing to do", 1, (), None),  # done at once
        Step("start", 2, ("n1",), lambda: _wait(release)),
    ]
    running = lanes.LaneRun(steps, workers=1)
    assert [s.item for s in running.outstanding()] == ["nothing to do", "start"]
    assert [d.item for d in running.take()] == ["nothing to do"]
    release.set()
    running.future.result(5.0)  # the start is done, not handed back
    assert [s.item for s in running.outstanding()] == ["start"]
    assert [d.item for d in running.take()] == ["start"]
    assert running.outstanding() == [] and running.finished


def test_giving_up_skips_at_once_all_not_begun_and_lets_what_runs_finish_later() -> None:
    """A host that hangs: the caller gives up, and what waits behind it is handed back at once."""
    release = threading.Event()
    log: list[str] = []
    steps = [
        Step("hung start", 1, ("n1",), lambda: _wait(release)),
        Step("freeze after it", 1, ("n1",), _record(log, "freeze after it")),
        Step("start elsewhere", 2, ("n2",), _record(log, "start elsewhere", 0.5)),
    ]
    running = lanes.LaneRun(steps, workers=1)  # one thread: the second lane waits its turn
    time.sleep(0.2)
    assert [s.item for s in running.outstanding()] == [s.item for s in steps]
    running.give_up({"n1"})
    skipped = running.take()
    assert sorted(d.item for d in skipped) == ["freeze after it", "start elsewhere"]
    assert all(d.skipped for d in skipped)
    assert [s.item for s in running.outstanding()] == ["hung start"]
    release.set()
    later = _all(running)
    assert [(d.item, d.skipped, d.error) for d in later] == [("hung start", False, None)]
    assert log == [] and running.future.done() and running.outstanding() == []


def test_giving_up_spares_the_lanes_of_nodes_that_answer_however_slow() -> None:
    """Only the steps behind an action on a node that does not answer are dropped.

    At 1,000 hosts, starts waiting behind slow starts on nodes that never
    froze were dropped and their jobs decided again, as if the nodes hung.
    """
    hung, slow, release = (threading.Event() for _ in range(3))
    log: list[str] = []

    def slow_start() -> None:
        slow.set()
        _wait(release)

    steps = [
        Step("hung start", 1, ("n1",), lambda: _wait(hung)),
        Step("behind the hung", 2, ("n1",), _record(log, "behind the hung")),
        Step("slow start", 3, ("n2",), slow_start),
        Step("behind the slow", 4, ("n2",), _record(log, "behind the slow")),
    ]
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(lanes, "PER_NODES", 1)  # one lane per node: each waits behind the one before
        running = lanes.LaneRun(steps, workers=2)
    assert slow.wait(10)
    running.give_up({"n1", "n9"})
    assert [(d.item, d.skipped) for d in running.take()] == [("behind the hung", True)]
    release.set()
    hung.set()
    later = sorted(_all(running), key=lambda d: d.item)
    assert [(d.item, d.skipped) for d in later] == [
        ("behind the slow", False),
        ("hung start", False),
        ("slow start", False),
    ]
    assert log == ["behind the slow"]


def test_a_failure_takes_the_jobs_later_steps_and_leaves_the_others() -> None:
    log: list[str] = []
    steps = [
        Step("place 1", 1, ("n1",), _fail("no room")),
        Step("place 2", 2, ("n1",), _record(log, "place 2")),
        Step("freeze 1", 1, ("n1",), _record(log, "freeze 1")),
    ]
    done = _all(lanes.LaneRun(steps, workers=4))
    outcome = {d.item: "skipped" if d.skipped else str(d.error) for d in done}
    assert outcome == {"place 1": "n1: no room", "place 2": "None", "freeze 1": "skipped"}
    assert log == ["place 2"]


def test_a_bug_in_an_action_is_that_steps_error_and_the_lane_goes_on() -> None:
    def bug() -> None:
        raise KeyError("bug")

    log: list[str] = []
    steps = [Step("x", 1, ("n1",), bug), Step("y", 2, ("n1",), _record(log, "y"))]
    done = _all(lanes.LaneRun(steps, workers=1))
    assert "internal error: KeyError" in str(done[0].error) and done[1].error is None
    assert log == ["y"]
