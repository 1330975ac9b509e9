"""Screenshots of the dashboard over fixed data and a frozen clock (pytest-textual-snapshot).

Regenerate after an intended change with ``pytest tests/watch --snapshot-update``.
"""

from __future__ import annotations

from typing import Any

import pytest
from textual.pilot import Pilot
from watchkit import make_app

from gctl.services.db import Store
from gctl.watch.tables import NodesTable

SIZE = (160, 48)


async def _settle(pilot: Pilot[None]) -> None:
    """Let workers, messages and scrolling finish (the timeline scrolls to its end)."""
    await pilot.app.workers.wait_for_complete()
    await pilot.pause()
    await pilot.wait_for_scheduled_animations()
    await pilot.pause()


async def _on_n4(pilot: Pilot[None]) -> None:
    await _settle(pilot)
    table = pilot.app.query_one(NodesTable)
    table.move_cursor(row=table.get_row_index("n4"))
    await _settle(pilot)


def test_dashboard(busy: Store, snap_compare: Any) -> None:
    """Nodes with height bars, n4's time-sliced GPUs, jobs, the events timeline."""
    assert snap_compare(make_app(busy), terminal_size=SIZE, run_before=_on_n4)


@pytest.mark.parametrize(
    "size", [(80, 24), (120, 40), (200, 60)], ids=lambda s: "x".join(map(str, s))
)
def test_dashboard_at(busy: Store, snap_compare: Any, size: tuple[int, int]) -> None:
    """The dashboard at 80x24 (GPUs hidden), 120x40 (under the nodes) and 200x60 (beside)."""
    assert snap_compare(make_app(busy), terminal_size=size, run_before=_on_n4)


def test_narrow_with_gpus_and_a_filter(busy: Store, snap_compare: Any) -> None:
    """80x24 with the GPU pane shown (g) and the filter ``bob``: his jobs, nodes and events."""

    async def filtered(pilot: Pilot[None]) -> None:
        await _on_n4(pilot)
        await pilot.press("g", "slash", *"bob", "enter")
        await _settle(pilot)

    assert snap_compare(make_app(busy), terminal_size=(80, 24), run_before=filtered)


def test_help_readonly(busy: Store, snap_compare: Any) -> None:
    """The help screen of a read-only dashboard."""

    async def help_open(pilot: Pilot[None]) -> None:
        await _on_n4(pilot)
        await pilot.press("question_mark")

    assert snap_compare(make_app(busy, readonly=True), terminal_size=SIZE, run_before=help_open)
