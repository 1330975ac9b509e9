"""The dashboard driven with Textual's pilot: keys, drill-down, actions, confirmation, readonly."""

from __future__ import annotations

import pytest
from textual.pilot import Pilot
from textual.widgets import Input, OptionList
from watchkit import fake_logs, make_app, pilot_test

from gctl.services import db, jobs, logs, nodes, specs
from gctl.services.db import Store
from gctl.services.logs import LogSource, LogTail
from gctl.watch.app import FILTER_PAUSE, WatchApp
from gctl.watch.details import JobDetailScreen, NodeDetailScreen
from gctl.watch.dialogs import ConfirmScreen, HelpScreen, MigrateScreen, ReasonScreen
from gctl.watch.panels import GpuGrid, Timeline
from gctl.watch.tables import JobsTable, NodesTable

SIZE = (160, 48)


async def settle(pilot: Pilot[None]) -> None:
    """Let the workers finish and the screen catch up."""
    await pilot.app.workers.wait_for_complete()
    await pilot.pause()


def on_job(app: WatchApp, job_id: int) -> JobsTable:
    table = app.query_one(JobsTable)
    table.focus()
    table.move_cursor(row=table.get_row_index(str(job_id)))
    return table


def on_node(app: WatchApp, name: str) -> NodesTable:
    table = app.query_one(NodesTable)
    table.focus()
    table.move_cursor(row=table.get_row_index(name))
    return table


def pending_intents(store: Store, job_id: int) -> list[tuple[str, str]]:
    return [(kind, status) for _, kind, status in jobs.show_job(store, job_id).intents]


def notes(app: WatchApp) -> list[str]:
    return [str(n.message) for n in app._notifications]


@pilot_test
async def test_first_frame_fills_every_panel(busy: Store) -> None:
    app = make_app(busy)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        assert app.query_one(NodesTable).row_count == 6
        assert app.query_one(JobsTable).row_count == 12
        assert app.feed.frame is not None and app.feed.error is None
        on_node(app, "n4")
        await pilot.pause()
        grid = str(app.query_one(GpuGrid).render())
        assert "time-sliced" in grid or app.query_one(GpuGrid).visual is not None


@pilot_test
async def test_help_opens_and_closes(busy: Store) -> None:
    app = make_app(busy)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        await pilot.press("escape")
        assert not isinstance(app.screen, HelpScreen)


@pilot_test
async def test_filter_narrows_both_tables_and_esc_clears(busy: Store) -> None:
    app = make_app(busy)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("slash")
        assert app.focused is app.query_one("#filter", Input)
        await pilot.press(*"bob")
        assert app.query_one(JobsTable).row_count == 12  # not yet: typing has not paused
        await pilot.pause(FILTER_PAUSE + 0.1)
        assert app.query_one(JobsTable).row_count == 5
        await pilot.press("enter")
        assert app.query_one(JobsTable).row_count == 5
        await pilot.press("escape")
        assert app.query_one(JobsTable).row_count == 12


@pilot_test
async def test_sort_keys_and_reverse(busy: Store) -> None:
    app = make_app(busy)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        table = on_job(app, 1)
        await pilot.press("N")
        names = [str(table.get_row_at(i)[1]) for i in range(table.row_count)]
        assert names == sorted(names)
        await pilot.press("N")
        names = [str(table.get_row_at(i)[1]) for i in range(table.row_count)]
        assert names == sorted(names, reverse=True)
        on_node(app, "n1")
        await pilot.press("H")
        first = str(app.query_one(NodesTable).get_row_at(0)[0])
        assert first in ("n5", "n6")  # height 0 first


@pilot_test
async def test_enter_shows_job_detail_and_esc_goes_back(busy: Store) -> None:
    app = make_app(busy)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        on_job(app, 4)
        await pilot.press("enter")
        assert isinstance(app.screen, JobDetailScreen)
        await settle(pilot)
        text = str(app.screen.body.render())
        assert "JobId=4" in text
        assert "job 4 is RUNNING" in text  # gctl why's answer
        await pilot.press("escape")
        assert not isinstance(app.screen, JobDetailScreen)


def status_line(app: WatchApp) -> str:
    return str(app.query_one("#status").render())


@pilot_test
async def test_job_detail_shows_the_log_tail_read_once(busy: Store) -> None:
    reads: list[tuple[int, int]] = []

    def counted(store: Store, job_id: int, lines: int) -> LogTail:
        reads.append((job_id, lines))
        return fake_logs(store, job_id, lines)

    app = make_app(busy, read_log=counted)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        on_job(app, 6)
        await pilot.press("enter")
        await settle(pilot)
        assert isinstance(app.screen, JobDetailScreen)
        body = str(app.screen.body.render())
        log = str(app.screen.log_view.render())
        assert "JobId=6" in body and "job 6 is RUNNING" in body  # the log goes under these
        assert "Log (gctl logs 6): last 50 lines of gctl-6-0 on n3" in log
        lines = log.splitlines()
        assert lines[-1] == "6: step 200/200" and lines[-50] == "6: step 151/200"
        app.action_refresh()  # the dashboard refreshes: the detail does not read the log again
        await settle(pilot)
        assert reads == [(6, 50)]


@pilot_test
async def test_job_detail_says_in_one_line_why_there_is_no_log(busy: Store) -> None:
    app = make_app(busy, read_log=logs.tail)  # the real service: job 11 never started
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        on_job(app, 11)
        await pilot.press("enter")
        await settle(pilot)
        assert isinstance(app.screen, JobDetailScreen)
        assert "JobId=11" in str(app.screen.body.render())
        log = str(app.screen.log_view.render()).strip()
        assert log == "Log: job 11 has not started yet (PENDING): no output so far"


@pilot_test
async def test_status_line_says_when_the_row_cap_hides_rows(
    busy: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(JobsTable, "MAX_ROWS", 5)
    app = make_app(busy)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        assert app.query_one(JobsTable).row_count == 5
        assert "jobs: showing 5 of 12 — / to filter" in status_line(app)
        assert "nodes: showing" not in status_line(app)  # 6 nodes: all shown
        await pilot.press("slash", *"alice", "enter")
        assert "jobs: showing 5 of 7 matching — narrow the filter" in status_line(app)
        await pilot.press("slash", *["backspace"] * 5, *"bob", "enter")  # 5 jobs: all shown
        assert app.query_one(JobsTable).row_count == 5
        assert "showing" not in status_line(app)


@pilot_test
async def test_enter_shows_node_detail(busy: Store) -> None:
    app = make_app(busy)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        on_node(app, "n5")
        await pilot.press("enter")
        assert isinstance(app.screen, NodeDetailScreen)
        await settle(pilot)
        text = str(app.screen.body.render())
        assert "NodeName=n5" in text and "fan failure" in text


@pilot_test
async def test_suspend_asks_then_records_an_intent(busy: Store) -> None:
    app = make_app(busy)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        on_job(app, 1)
        await pilot.press("s")
        assert isinstance(app.screen, ConfirmScreen)
        await pilot.press("y")
        await settle(pilot)
        assert pending_intents(busy, 1) == [("suspend", "pending")]
        assert any("recorded for the daemon" in n for n in notes(app))


@pilot_test
async def test_declining_does_nothing(busy: Store) -> None:
    app = make_app(busy)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        on_job(app, 1)
        await pilot.press("c")
        assert isinstance(app.screen, ConfirmScreen)
        await pilot.press("n")
        await settle(pilot)
        assert pending_intents(busy, 1) == []


@pilot_test
async def test_readonly_refuses_every_action(busy: Store) -> None:
    app = make_app(busy, readonly=True)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        on_job(app, 1)
        for key in ("s", "r", "m", "c"):
            await pilot.press(key)
            assert not isinstance(app.screen, ConfirmScreen | MigrateScreen)
        on_node(app, "n1")
        for key in ("d", "u"):
            await pilot.press(key)
            assert not isinstance(app.screen, ReasonScreen | ConfirmScreen)
        await settle(pilot)
        assert pending_intents(busy, 1) == []
        assert nodes.show_node(busy, "n1").state == "mix"
        assert sum("read-only" in n for n in notes(app)) == 6


@pilot_test
async def test_drain_asks_a_reason_and_drains(busy: Store) -> None:
    app = make_app(busy)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        on_node(app, "n1")
        await pilot.press("d")
        assert isinstance(app.screen, ReasonScreen)
        await pilot.press(*"fan", "enter")
        await settle(pilot)
        view = nodes.show_node(busy, "n1")
        assert (view.state, view.reason, view.reason_user) == ("drng", "fan", "alice")
        assert app.query_one(NodesTable).get_row("n1")[1].plain == "drng"
        await pilot.press("u", "y")
        await settle(pilot)
        assert nodes.show_node(busy, "n1").state == "mix"


@pilot_test
async def test_migrate_chooses_a_target_and_confirms(busy: Store) -> None:
    app = make_app(busy)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        on_job(app, 4)
        await pilot.press("m")
        assert isinstance(app.screen, MigrateScreen)
        assert [v.name for v in app.screen.targets] == ["n3", "n1", "n4"]
        assert app.screen.query_one(OptionList).highlighted == 0
        await pilot.press("enter")
        assert isinstance(app.screen, ConfirmScreen)
        await pilot.press("y")
        await settle(pilot)
        detail = jobs.show_job(busy, 4)
        assert [(k, st) for _, k, st in detail.intents] == [("migrate", "pending")]


@pilot_test
async def test_service_error_is_a_notification(busy: Store) -> None:
    app = make_app(busy)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        on_job(app, 1)  # running: resume is refused by the service
        await pilot.press("r", "y")
        await settle(pilot)
        assert any("resume needs SUSPENDED" in n for n in notes(app))
        assert app.is_running


@pilot_test
async def test_store_away_keeps_the_last_frame_marked_stale(busy: Store) -> None:
    app = make_app(busy)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        good = app.feed.frame
        app.feed.source.store = db.connect("/nonexistent-dir/gctl.db")
        app.action_refresh()
        await settle(pilot)
        assert app.feed.frame is good
        assert app.feed.error is not None
        status = str(app.query_one("#status").render())
        assert "STALE" in status
        assert app.query_one(JobsTable).row_count == 12


@pilot_test
async def test_hostile_text_is_shown_escaped_and_never_as_markup(busy: Store) -> None:
    title, markup = "\x1b]0;pwned\x07", "[/bold] [red]x"
    ids = jobs.submit(
        busy,
        [
            specs.build(image="i", command=[title], gpus=1),
            specs.build(image="i", command=["x"], gpus=1, name=markup),
        ],
    )
    nodes.set_admin_state(busy, "n1", "drain", f"\x1b[2J{markup}")

    def hostile_log(store: Store, job_id: int, lines: int) -> LogTail:
        output = ("\x1b[31mred\x1b[0m \x1b]0;t\x07\x1b[2J\u202e",)
        return LogTail(LogSource(job_id, "n1", f"gctl-{job_id}-0", ("n1",)), output)

    app = make_app(busy, read_log=hostile_log)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        table = app.query_one(JobsTable)
        assert str(table.get_row(str(ids[0]))[1]) == "\\x1b]0;pwned\\x07"
        assert str(table.get_row(str(ids[1]))[1]) == markup
        timeline = "\n".join(line.text for line in app.query_one(Timeline).lines)
        assert "drain: \\x1b[2J[/bold] [red]x" in timeline
        on_job(app, 1)
        await pilot.press("enter")
        await settle(pilot)
        assert isinstance(app.screen, JobDetailScreen)
        log = str(app.screen.log_view.render())
        assert "red \\x1b]0;t\\x07\\x1b[2J\\u202e" in log  # the colour kept, the rest escaped
        for shown in (timeline, log, str(app.screen.body.render())):
            assert "\x1b" not in shown and "\u202e" not in shown
