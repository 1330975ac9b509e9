"""The ``gctl watch`` application: nodes with their height, a node's GPUs, jobs, the timeline.

A timer asks for a frame every ``interval`` seconds; the frame is built in
a worker thread (:class:`~gctl.watch.data.Feed`) and rendered here, so the
UI never waits on the store; widgets redraw only what changed.

Made for 80x24 first: the nodes table comes first and its HEIGHT column
always shows; below :data:`WIDE` columns the node's GPUs are stacked under
the nodes, and below :data:`TALL` rows they are hidden until ``g`` shows
them (``g`` hides or shows them at any size); column widths follow the
terminal.

Keys act on the selection of the focused widget only: a job key on the job
under the jobs table's cursor (or the job whose detail or output is open),
a node key on the node under the nodes table's cursor (or the node whose
detail is open), never on a row chosen earlier elsewhere. Actions go
through :mod:`gctl.watch.actions`; every one asks first, and ``readonly``
refuses them all.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import ClassVar

from rich.text import Text
from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal
from textual.timer import Timer
from textual.widgets import DataTable, Footer, Input

from gctl.services import logs
from gctl.services.db import Store
from gctl.textsafe import inert
from gctl.watch import actions
from gctl.watch.data import Clock, Feed, FrameSource
from gctl.watch.details import JobDetailScreen, LogReader, LogScreen, NodeDetailScreen
from gctl.watch.dialogs import ConfirmScreen, HelpScreen, MigrateScreen, ReasonScreen
from gctl.watch.fmt import age
from gctl.watch.panels import GpuGrid, StatusLine, Timeline
from gctl.watch.tables import FrameTable, JobsTable, NodesTable

SORT_KEYS = {
    "I": "id",
    "N": "name",
    "U": "user",
    "T": "state",
    "G": "gpus",
    "H": "height",
    "P": "rate",
    "A": "time",
}
"""Shift+letter sorts the focused table by this column."""
WIDE = 160
"""Columns from which the GPU pane stands beside the nodes table, not under it."""
TALL = 32
"""Rows from which the GPU pane shows unless hidden with ``g``."""
FILTER_PAUSE = 0.15
"""Seconds the filter waits for the next key before it applies: typing is not held up."""


class WatchApp(App[None]):
    """The dashboard over one store."""

    TITLE = "gctl watch"
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (WIDE, "-wide")]
    VERTICAL_BREAKPOINTS = [(0, "-short"), (TALL, "-tall")]
    CSS = """
    #status { height: 1; background: $boost; }
    #top { height: 2fr; layout: vertical; }
    #nodes { height: 1fr; min-height: 3; }
    #gpus { height: auto; max-height: 12; border-top: solid $accent; padding: 0 1; }
    Screen.-wide #top { layout: horizontal; }
    Screen.-wide #nodes { width: 1fr; height: 1fr; }
    Screen.-wide #gpus {
        width: 80; height: 1fr; max-height: 100%; border-top: none; border-left: solid $accent;
    }
    Screen.-short #gpus { display: none; }
    #jobs { height: 2fr; border-top: solid $accent; }
    #events { height: 1fr; min-height: 4; border-top: solid $accent; }
    #filter { dock: bottom; display: none; }
    #filter.shown { display: block; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("question_mark", "help", "Help"),
        Binding("slash", "filter", "Filter"),
        Binding("q", "quit", "Quit"),
        Binding("escape", "clear_filter", "Clear filter", show=False),
        Binding("g", "gpus", "GPUs"),
        Binding("l", "logs", "Logs"),
        Binding("s", "job('suspend')", "Suspend"),
        Binding("r", "job('resume')", "Resume"),
        Binding("m", "migrate", "Migrate"),
        Binding("c", "job('cancel')", "Cancel"),
        Binding("d", "drain", "Drain"),
        Binding("u", "undrain", "Undrain"),
        *(Binding(k, f"sort('{col}')", f"Sort {col}", show=False) for k, col in SORT_KEYS.items()),
    ]

    def __init__(
        self,
        store: Store,
        *,
        interval: float = 2.0,
        readonly: bool = False,
        clock: Clock = time.time,
        read_log: LogReader = logs.tail,
    ) -> None:
        """Watch ``store``, refreshing every ``interval`` s; ``clock`` gives the time shown.

        ``read_log`` reads a job's last lines of output for its detail.
        """
        super().__init__()
        self.store = store
        self.interval = interval
        self.readonly = readonly
        self.clock = clock
        self.read_log = read_log
        self.feed = Feed(FrameSource(store, clock))
        self.render_seconds = 0.0
        self.filter_text = ""
        self._refreshing = False
        self._filter_timer: Timer | None = None

    def compose(self) -> ComposeResult:
        """Status line, nodes and GPU grid, jobs, timeline, filter, footer."""
        yield StatusLine(id="status")
        with Horizontal(id="top"):
            yield NodesTable(id="nodes")
            yield GpuGrid(id="gpus")
        yield JobsTable(id="jobs")
        yield Timeline(id="events")
        yield Input(placeholder="filter nodes and jobs (Enter keeps it, Esc clears)", id="filter")
        yield Footer()

    def on_mount(self) -> None:
        """Take the first frame now, then one every interval."""
        self.query_one(NodesTable).focus()
        self.action_refresh()
        self.set_interval(self.interval, self.action_refresh)

    # --- frames ---------------------------------------------------------------------------

    def action_refresh(self) -> None:
        """Build a frame in a worker thread (unless one is being built)."""
        if self._refreshing:
            return
        self._refreshing = True
        self.run_worker(self._build, thread=True, group="frame", exit_on_error=False)

    def _build(self) -> None:
        try:
            self.feed.refresh()
        finally:
            self.call_from_thread(self.show_frame)

    def show_frame(self) -> None:
        """Render the feed's frame (the last good one when the store is away)."""
        self._refreshing = False
        started = time.perf_counter()
        frame = self.feed.frame
        if frame is not None:
            self.query_one(JobsTable).show(frame)
            self._filter_others()
            self.query_one(NodesTable).show(frame)
            self.query_one(Timeline).show(frame)
            self.query_one(GpuGrid).show(frame, self.query_one(NodesTable).selected_key())
        self.render_seconds = time.perf_counter() - started
        self._status()

    def _status(self) -> None:
        frame = self.feed.frame
        line = Text()
        line.append(" gctl watch ", style="bold reverse")
        line.append(f" {inert(self.store.url)} ")
        if self.readonly:
            line.append(" READ-ONLY ", style="bold black on yellow")
        if frame is not None:
            running = sum(1 for j in frame.jobs if j.state == "RUNNING")
            line.append(
                f"  {len(frame.nodes)} nodes  {len(frame.jobs)} jobs ({running} running)"
                f"  updated {time.strftime('%H:%M:%S', time.localtime(frame.taken_at))}"
            )
        if self.feed.error is not None:
            line.append(
                f"  STALE: data {age(self.feed.age())} old: {inert(self.feed.error)}",
                style="bold white on red",
            )
        elif frame is None:
            line.append("  reading…")
        if self.filter_text:
            line.append(f"  filter: {inert(repr(self.filter_text))}", style="bold")
        for table in self.query(FrameTable):
            note = table.cap_note()
            if note:
                line.append(f"  {note}", style="bold yellow")
        self.query_one(StatusLine).show(line)

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        """Moving on the nodes table shows that node's GPUs."""
        if isinstance(event.data_table, NodesTable):
            self.query_one(GpuGrid).show(self.feed.frame, event.data_table.selected_key())

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        """Enter drills down into the job or node."""
        key = event.row_key.value
        if key is None:
            return
        if isinstance(event.data_table, JobsTable):
            self.push_screen(JobDetailScreen(self.store, int(key), self.read_log))
        elif isinstance(event.data_table, NodesTable):
            self.push_screen(NodeDetailScreen(self.store, key))

    # --- filter, sort, help ----------------------------------------------------------------

    def action_help(self) -> None:
        """Show the keys."""
        self.push_screen(HelpScreen(self.readonly))

    def action_filter(self) -> None:
        """Open the filter line."""
        box = self.query_one("#filter", Input)
        box.add_class("shown")
        box.focus()

    def on_input_changed(self, event: Input.Changed) -> None:
        """Filter as the text changes, once typing pauses (:data:`FILTER_PAUSE`)."""
        if event.input.id == "filter":
            if self._filter_timer is not None:
                self._filter_timer.stop()
            self._filter_timer = self.set_timer(FILTER_PAUSE, self.apply_filter)

    def apply_filter(self) -> None:
        """Filter jobs, nodes and the timeline by the filter line's text now."""
        if self._filter_timer is not None:
            self._filter_timer.stop()
            self._filter_timer = None
        boxes = self.query("#filter").results(Input)
        box = next(boxes, None)
        if box is None:  # a pause's timer that fired as the screen went away: nothing to filter
            return
        self.filter_text = box.value
        self.query_one(JobsTable).filter_on(self.filter_text)
        self._filter_others()
        self._status()

    def _filter_others(self) -> None:
        """Nodes and events matching the filter, or the jobs it matches.

        A node shows when its own text matches or a matching job runs on it;
        an event when its text matches or it is about a job or node shown.
        """
        text = self.filter_text
        jobs = self.query_one(JobsTable)
        nodes = self.query_one(NodesTable)
        if not text:
            nodes.filter_on("")
            self.query_one(Timeline).filter_on("", frozenset(), frozenset())
            return
        lines = [jobs.lines[r.key] for r in jobs.matches]
        nodes.filter_on(text, frozenset(w.split(":")[0] for j in lines for w in j.where.split()))
        self.query_one(Timeline).filter_on(
            text, frozenset(j.id for j in lines), frozenset(r.key for r in nodes.matches)
        )

    def on_input_submitted(self, event: Input.Submitted) -> None:
        """Enter keeps the filter and goes back to the tables."""
        if event.input.id == "filter":
            self.apply_filter()
            event.input.remove_class("shown")
            self.query_one(JobsTable).focus()

    def action_clear_filter(self) -> None:
        """Esc: clear and close the filter."""
        box = self.query_one("#filter", Input)
        if box.value or box.has_class("shown"):
            box.value = ""
            self.apply_filter()
            box.remove_class("shown")
            self.query_one(NodesTable).focus()

    def action_sort(self, column: str) -> None:
        """Sort the focused table by ``column`` (the other table when it has no such column)."""
        tables = sorted(self.query(FrameTable), key=lambda t: t is not self.focused)
        if not any(t.sort_on(column) for t in tables):
            self.notify(f"no column {column!r} to sort by", severity="warning")

    # --- actions ---------------------------------------------------------------------------

    def _allowed(self, what: str) -> bool:
        if self.readonly:
            self.notify(f"read-only (--readonly): {what} is disabled", severity="warning")
        return not self.readonly

    def _job(self) -> int | None:
        """The job the focused widget has selected (see the module docstring), or None, said."""
        screen, focused = self.screen, self.focused
        if isinstance(screen, JobDetailScreen | LogScreen):
            return screen.job_id
        key = focused.selected_key() if isinstance(focused, JobsTable) else None
        if key is None:
            self.notify("no job selected: move to a job in the jobs table", severity="warning")
        return None if key is None else int(key)

    def _node(self) -> str | None:
        """The node the focused widget has selected (see the module docstring), or None, said."""
        screen, focused = self.screen, self.focused
        if isinstance(screen, NodeDetailScreen):
            return screen.name_
        key = focused.selected_key() if isinstance(focused, NodesTable) else None
        if key is None:
            self.notify("no node selected: move to a node in the nodes table", severity="warning")
        return key

    def action_gpus(self) -> None:
        """Hide or show the GPU pane (at any size, until pressed again)."""
        grid = self.query_one(GpuGrid)
        grid.display = not grid.display

    def action_logs(self) -> None:
        """Show the selected job's output, read in a worker (``gctl logs``)."""
        job_id = self._job()
        if job_id is not None:
            self.push_screen(LogScreen(self.store, job_id, self.read_log))

    def action_job(self, action: str) -> None:
        """Suspend, resume or cancel the selected job, once confirmed."""
        if not self._allowed(action):
            return
        job_id = self._job()
        if job_id is not None:
            self._confirm(f"{action.capitalize()} job {job_id}?", job_id, action, None)

    def action_migrate(self) -> None:
        """Choose a target node, confirm, then ask for the job's migration."""
        if not self._allowed("migrate"):
            return
        job_id = self._job()
        frame = self.feed.frame
        if job_id is None or frame is None:
            return

        def chosen(target: str | None) -> None:
            if target:
                self._confirm(f"Migrate job {job_id} to {target}?", job_id, "migrate", target)

        self.push_screen(MigrateScreen(job_id, frame), chosen)

    def _confirm(self, question: str, job_id: int, action: str, target: str | None) -> None:
        def answered(yes: bool | None) -> None:
            if yes:
                self._run(lambda: actions.job_action(self.store, job_id, action, target))

        self.push_screen(ConfirmScreen(question), answered)

    def action_drain(self) -> None:
        """Drain the selected node, with a reason."""
        if not self._allowed("drain"):
            return
        name = self._node()
        if name is None:
            return

        def given(reason: str | None) -> None:
            if reason:
                self._run(lambda: actions.node_action(self.store, name, "drain", reason))

        self.push_screen(ReasonScreen(f"Drain node {name}: why?"), given)

    def action_undrain(self) -> None:
        """Undrain the selected node, once confirmed."""
        if not self._allowed("undrain"):
            return
        name = self._node()
        if name is None:
            return

        def answered(yes: bool | None) -> None:
            if yes:
                self._run(lambda: actions.node_action(self.store, name, "undrain", None))

        self.push_screen(ConfirmScreen(f"Undrain node {name}?"), answered)

    def _run(self, call: Callable[[], actions.Outcome]) -> None:
        """Carry out an action off the UI thread; show its message, then refresh."""

        def work() -> None:
            outcome = call()
            self.call_from_thread(self._done, outcome)

        self.run_worker(work, thread=True, group="action")

    def _done(self, outcome: actions.Outcome) -> None:
        self.notify(
            inert(outcome.message),
            severity="information" if outcome.ok else "error",
            markup=False,
        )
        self.action_refresh()
