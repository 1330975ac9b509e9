"""Putting a tick's periodic steps off to a tick with room for them.

The full reconcile (30 s) and the introspective pass (60 s) each take a
good part of a second at a thousand hosts, and so does a reactive pass
that waits for its container starts. Run in the same tick, two of them
make it twice as long as the others. A periodic step that is due waits
for a tick whose work so far and the steps' last durations fit in the
tick, but never more than :data:`PUT_OFF_TICKS` ticks or half its period.
And a pass stops waiting for its host actions once the tick has used
:data:`WAIT_SHARE` of its period (the actions go on in the background).
"""

from __future__ import annotations

from collections.abc import Mapping

PUT_OFF_TICKS = 5
"""Ticks a due periodic step may wait for a tick with room for it."""
WAIT_SHARE = 0.75
"""Share of a tick after which its passes stop waiting for hosts: the rest records and ends."""


class Room:
    """The last duration of each step, and whether a due periodic step runs now."""

    def __init__(self, tick: float) -> None:
        """No step measured yet: the first time each is due, it runs."""
        self.tick = tick
        self.took: dict[str, float] = {}

    def allows(self, late: float, period: float, spent: float, *steps: str) -> bool:
        """Whether a step due ``late`` seconds ago runs in this tick.

        ``spent`` is the tick's work so far and ``steps`` the steps still to
        come in it with the one due (their last durations are what they are
        expected to take). A negative ``late`` is a step not due yet.
        """
        if late < 0:
            return False
        expected = sum(self.took.get(step, 0.0) for step in steps)
        return spent + expected <= self.tick or late >= min(PUT_OFF_TICKS * self.tick, period / 2)

    def waits_until(self, began: float) -> float:
        """When a pass of the tick begun at ``began`` (monotonic) stops waiting for hosts."""
        return began + WAIT_SHARE * self.tick

    def note(self, took: Mapping[str, float]) -> None:
        """Keep the durations of the steps a tick ran, each its latest."""
        self.took.update(took)
