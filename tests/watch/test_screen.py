"""What the dashboard shows and how keys are scoped: layout, widths, markers, filter, logs."""

from __future__ import annotations

import threading

import pytest
from sqlalchemy import update
from textual.pilot import Pilot
from textual.widgets import DataTable
from watchkit import T, fake_logs, make_app, pilot_test

from gctl.cli.render import time_used
from gctl.services import jobs, queue
from gctl.services.db import Store
from gctl.services.logs import LogTail
from gctl.store.engine import transaction
from gctl.store.models import NodeRow
from gctl.watch.app import WatchApp
from gctl.watch.details import LogScreen, NodeDetailScreen
from gctl.watch.dialogs import ConfirmScreen, ReasonScreen
from gctl.watch.panels import GpuGrid, Timeline
from gctl.watch.tables import FrameTable, JobsTable, NodesTable


async def settle(pilot: Pilot[None]) -> None:
    """Let the workers finish and the screen catch up."""
    await pilot.app.workers.wait_for_complete()
    await pilot.pause()


def shown_row(table: DataTable[object], key: str) -> str:
    """The row ``key`` as the screen shows it (the header is line 0)."""
    strip = table.render_line(1 + table.get_row_index(key) - table.scroll_offset.y)
    return strip.text


def visible_width(table: FrameTable, upto: str) -> int:
    """Cells from the table's left edge to the end of column ``upto``."""
    total = 0
    for column in table.ordered_columns:
        total += column.get_render_width(table)
        if column.key.value == upto:
            return total
    raise AssertionError(upto)


def notes(app: WatchApp) -> list[str]:
    return [str(n.message) for n in app._notifications]


@pytest.mark.parametrize("size", [(80, 24), (100, 30), (120, 40), (200, 60)])
@pilot_test
async def test_node_height_always_shows_in_full(busy: Store, size: tuple[int, int]) -> None:
    app = make_app(busy)
    async with app.run_test(size=size) as pilot:
        await settle(pilot)
        nodes = app.query_one(NodesTable)
        assert visible_width(nodes, "height") <= nodes.size.width
        assert shown_row(nodes, "n4").split()[:5] == [
            "n4",
            "alloc",
            "2/2",
            "████████│████████",
            "2.00",
        ]


@pilot_test
async def test_gpu_pane_hides_when_short_stacks_when_narrow_and_g_toggles(busy: Store) -> None:
    app = make_app(busy)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        grid, nodes = app.query_one(GpuGrid), app.query_one(NodesTable)
        assert not grid.display
        await pilot.press("g")
        await pilot.pause()
        assert grid.display and grid.region.y > nodes.region.y
        assert grid.region.x == nodes.region.x  # under the nodes, not beside them
        await pilot.resize_terminal(200, 60)
        await pilot.pause()
        assert grid.region.x > nodes.region.x and grid.region.y == nodes.region.y
        await pilot.press("g")
        await pilot.pause()
        assert not grid.display


@pilot_test
async def test_widths_follow_the_terminal_and_cut_text_with_an_ellipsis(busy: Store) -> None:
    app = make_app(busy)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        table = app.query_one(JobsTable)
        narrow = table.columns["reason"].width
        assert visible_width(table, "reason") <= table.size.width
        table.move_cursor(row=table.get_row_index("12"))
        await pilot.pause()
        assert shown_row(table, "12").rstrip().endswith("…")  # "(held) held by alice", cut
        await pilot.resize_terminal(200, 60)
        await pilot.pause()
        assert table.columns["reason"].width > narrow
        assert "(held) held by alice" in shown_row(table, "12")


@pilot_test
async def test_the_sorted_column_is_marked(busy: Store) -> None:
    app = make_app(busy)
    async with app.run_test(size=(160, 48)) as pilot:
        await settle(pilot)
        table = app.query_one(JobsTable)
        table.focus()
        assert str(table.columns["id"].label) == "JOBID ▲"
        await pilot.press("N", "N")
        assert str(table.columns["name"].label) == "NAME ▼"
        assert str(table.columns["id"].label) == "JOBID"


@pilot_test
async def test_a_node_that_stops_answering_gets_its_star(busy: Store) -> None:
    app = make_app(busy)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        nodes = app.query_one(NodesTable)
        assert shown_row(nodes, "n4").split()[1] == "alloc"
        with transaction(busy.engine, write=True) as s:
            s.execute(update(NodeRow).where(NodeRow.name == "n4").values(last_seen=T - 3600))
        app.action_refresh()
        await settle(pilot)
        assert shown_row(nodes, "n4").split()[1] == "alloc*"  # as gctl node ls shows it
        assert "stale" in shown_row(nodes, "n4")


@pilot_test
async def test_time_is_the_time_used_as_gctl_queue_shows_it(busy: Store) -> None:
    app = make_app(busy)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        table = app.query_one(JobsTable)
        listed = queue.queue(busy)
        expected = {
            str(i): time_used(start, end, T)
            for i, start, end in zip(listed.id, listed.start_time, listed.end_time, strict=True)
        }
        shown = {key: str(table.get_row(key)[4]) for key in expected}
        assert shown == expected
        assert shown["11"] == "0:00" and shown["1"] == "50:00"  # pending; ran 3,000 s


@pilot_test
async def test_a_filter_on_a_user_shows_their_jobs_their_nodes_and_their_events(
    busy: Store,
) -> None:
    app = make_app(busy)
    async with app.run_test(size=(160, 48)) as pilot:
        await settle(pilot)
        await pilot.press("slash", *"bob", "enter")
        jobs_shown = {app.query_one(JobsTable).get_row_at(i)[0].plain for i in range(5)}
        assert jobs_shown == {"4", "5", "8", "9", "11"}
        nodes = app.query_one(NodesTable)
        assert {nodes.get_row_at(i)[0].plain for i in range(nodes.row_count)} == {"n2", "n4"}
        timeline = [line.text for line in app.query_one(Timeline).lines]
        assert timeline and all(
            any(f"job {j} " in t for j in (4, 5, 8, 9, 11)) or " n2" in t or " n4" in t
            for t in timeline
        )
        assert not any("migrate" in t or "n5 drain" in t for t in timeline)
        await pilot.press("escape")
        assert any("migrate" in line.text for line in app.query_one(Timeline).lines)


@pilot_test
async def test_job_keys_act_only_on_a_job_the_focused_widget_selected(busy: Store) -> None:
    app = make_app(busy)
    async with app.run_test(size=(160, 48)) as pilot:
        await settle(pilot)
        table = app.query_one(JobsTable)
        table.focus()
        table.move_cursor(row=table.get_row_index("1"))  # chosen earlier in the jobs table
        nodes = app.query_one(NodesTable)
        nodes.focus()
        nodes.move_cursor(row=nodes.get_row_index("n5"))
        await pilot.press("c")
        assert not isinstance(app.screen, ConfirmScreen)
        await pilot.press("enter")
        assert isinstance(app.screen, NodeDetailScreen)
        await pilot.press("c", "s", "l")
        assert isinstance(app.screen, NodeDetailScreen)  # nothing asked, nothing opened
        await settle(pilot)
        assert [i for _, i, _ in jobs.show_job(busy, 1).intents] == []
        assert sum("no job selected" in n for n in notes(app)) == 4
        await pilot.press("d")  # a node key in a node's detail: that node
        assert isinstance(app.screen, ReasonScreen)
        assert "n5" in str(app.screen.question)
        await pilot.press("escape", "escape")
        table.focus()
        await pilot.press("d")  # a node key on the jobs table: no node selected
        assert not isinstance(app.screen, ReasonScreen)


@pilot_test
async def test_l_shows_the_selected_jobs_output_read_off_the_ui_thread(busy: Store) -> None:
    threads: list[threading.Thread] = []

    def read(store: Store, job_id: int, lines: int) -> LogTail:
        threads.append(threading.current_thread())
        return fake_logs(store, job_id, lines)

    app = make_app(busy, read_log=read)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        table = app.query_one(JobsTable)
        table.focus()
        table.move_cursor(row=table.get_row_index("6"))
        await pilot.press("l")
        assert isinstance(app.screen, LogScreen) and app.screen.job_id == 6
        await settle(pilot)
        text = str(app.screen.body.render())
        assert "Log (gctl logs 6): last 200 lines of gctl-6-0 on n3" in text
        assert text.splitlines()[-1] == "6: step 200/200"
        assert threads and threading.main_thread() not in threads
        await pilot.press("escape")
        await pilot.press("enter", "l")  # from the job's detail: that job's output
        await settle(pilot)
        assert isinstance(app.screen, LogScreen) and app.screen.job_id == 6


@pilot_test
async def test_a_refresh_with_nothing_changed_redraws_nothing(
    busy: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = make_app(busy)  # a frozen clock: nothing changes with time either
    async with app.run_test(size=(160, 48)) as pilot:
        await settle(pilot)
        calls: list[str] = []
        for name in ("add_row", "remove_row", "update_cell", "clear"):
            monkeypatch.setattr(
                DataTable, name, lambda *a, _n=name, **k: calls.append(_n), raising=True
            )
        monkeypatch.setattr(GpuGrid, "update", lambda *a, **k: calls.append("grid"))
        monkeypatch.setattr(Timeline, "write", lambda *a, **k: calls.append("timeline"))
        before = app.feed.frame
        app.action_refresh()
        await settle(pilot)
        assert app.feed.frame is not before and app.feed.frame is not None
        assert before is not None and app.feed.frame.jobs is before.jobs
        assert calls == []
