"""A time-sliced placement and the freeze that hands it its GPUs: one lane, dropped together."""

from __future__ import annotations

import threading
from collections.abc import Callable

from gctl.core.decisions import Place, Suspend
from gctl.core.model import ShareMode
from gctl.daemon import lanes
from gctl.daemon.apply import Batched, after_freezes
from gctl.daemon.lanes import Step
from gctl.hosts.ssh import HostError

GPU0 = (("n1", 0),)


def _noop() -> None:
    """A host action that does nothing."""


def _on_n1(batch: list[Batched], actions: dict[int, Callable[[], None]]) -> list[Step[Batched]]:
    """A step on n1 per decision, its action ``actions[i]`` (default: nothing to wait for)."""
    return [Step(d, d.job_id, ("n1",), actions.get(i, _noop)) for i, d in enumerate(batch)]


def _split(steps: list[Step[Batched]]) -> list[list[str]]:
    """The job of each step, lane by lane."""
    return [[step.item.job_id for _, step in lane] for lane in lanes.lanes(steps)]


def _steps(start_a: Callable[[], None]) -> tuple[list[Batched], list[Step[Batched]]]:
    """Job a placed on n1:0 and frozen there; job b time-sliced onto it; job c elsewhere."""
    batch: list[Batched] = [
        Place("a", GPU0, ShareMode.EXCLUSIVE, "free"),
        Place("c", (("n1", 1),), ShareMode.EXCLUSIVE, "free"),
        Suspend("a", "time slice handed to new job b"),
        Place("b", GPU0, ShareMode.TIMESLICED, "time-slicing"),
    ]
    return batch, _on_n1(batch, {0: start_a})


def test_a_time_sliced_placement_goes_after_the_freeze_of_the_job_on_its_gpus() -> None:
    batch, steps = _steps(_noop)
    assert _split(after_freezes(batch, steps, {"a": GPU0})) == [["a", "a", "b"], ["c"]]
    # a placement with nothing frozen on its GPUs keeps its own lane
    alone = after_freezes(batch[:2] + batch[3:], steps[:2] + steps[3:], {"a": GPU0})
    assert _split(alone) == [["a"], ["c"], ["b"]]


def test_giving_up_on_a_start_before_the_freeze_drops_the_placement_with_it() -> None:
    release = threading.Event()
    batch, steps = _steps(lambda: release.wait(5.0) and None)
    run = lanes.LaneRun(after_freezes(batch, steps, {"a": GPU0}), workers=4)
    done = run.take(0.2)  # a's start still runs (a host that hangs) when the caller gives up
    still = [(type(s.item).__name__, s.item.job_id) for s in run.outstanding()]
    run.give_up({"n1"})
    release.set()
    run.future.result(5.0)
    done += run.take()
    outcome = {(type(d.item).__name__, d.item.job_id): d.skipped for d in done}
    assert still == [("Place", "a"), ("Suspend", "a"), ("Place", "b")]
    assert outcome[("Suspend", "a")] and outcome[("Place", "b")]  # neither begun
    assert not outcome[("Place", "c")] and not outcome[("Place", "a")]


def _chain(start_b: Callable[[], None]) -> list[Step[Batched]]:
    """Jobs a, b and c placed on n1:0 in one pass, each handed the slice of the one before."""
    batch: list[Batched] = [
        Place("a", GPU0, ShareMode.EXCLUSIVE, "free"),
        Suspend("a", "time slice handed to new job b"),
        Place("b", GPU0, ShareMode.TIMESLICED, "time-slicing"),
        Suspend("b", "time slice handed to new job c"),
        Place("c", GPU0, ShareMode.TIMESLICED, "time-slicing"),
    ]
    return after_freezes(batch, _on_n1(batch, {2: start_b}), {"a": GPU0, "b": GPU0})


def test_a_chain_of_time_slices_placed_in_one_pass_is_one_lane_in_order() -> None:
    assert _split(_chain(_noop)) == [["a", "a", "b", "b", "c"]]


def test_a_job_whose_start_fails_is_not_frozen_and_hands_no_slice_on() -> None:
    def refuse() -> None:
        raise HostError("n1", "engine not reachable")

    run = lanes.LaneRun(_chain(refuse), workers=4)
    run.future.result(5.0)
    outcome = {(type(d.item).__name__, d.item.job_id): d for d in run.take()}
    assert outcome[("Place", "b")].error is not None
    # b was never started: its freeze is not carried out (so never recorded), nor c's start
    assert outcome[("Suspend", "b")].skipped and outcome[("Place", "c")].skipped
    assert not outcome[("Place", "a")].skipped and not outcome[("Suspend", "a")].skipped
