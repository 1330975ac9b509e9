"""Drill-down screens: a job (spec, history, ``gctl why``, log tail), its output, a node.

The text is the CLI's own (``gctl show job``, ``gctl why``, ``gctl node
show``, ``gctl events``, ``gctl logs``), rendered by :mod:`gctl.cli.render`
from the same services, so the dashboard and the commands never disagree.
The services are called in worker threads, once when the screen opens; a
job's log tail (``gctl logs``, read over SSH from its node, or the output
kept after its container went) is read in a worker of its own, so the rest
shows without waiting for the host. The log view (``l``) shows more of the
output, as read when it opened (it does not follow). Esc goes back.
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Callable, Iterable
from typing import ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widget import Widget
from textual.widgets import Footer, Static

from gctl.cli import render
from gctl.services import events, jobs, logs, nodes, why
from gctl.services.db import Store
from gctl.textsafe import inert, inert_keeping_colours
from gctl.watch.data import FAILURES

NODE_EVENTS = 15
"""How many of a node's latest events its detail shows."""
LOG_LINES = 50
"""How many of a job's last output lines its detail shows."""
LOG_VIEW_LINES = 1000
"""How many of a job's last output lines the log view shows."""

LogReader = Callable[[Store, int, int], logs.LogTail]
"""Reads a job's last lines of output: :func:`gctl.services.logs.tail`, or a test's stand-in."""


def captured(draw: Callable[[], None]) -> str:
    """What a CLI renderer prints, as text."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        draw()
    return out.getvalue().rstrip()


class DetailScreen(Screen[None]):
    """A scrollable page of text loaded by a worker thread."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "app.pop_screen", "Back"),
        Binding("q", "app.quit", "Quit"),
    ]

    AT_END: ClassVar[bool] = False
    """Whether the page opens scrolled to its end (a log) rather than its top."""

    def __init__(self, title: str) -> None:
        """An empty page titled ``title`` until the worker fills it."""
        super().__init__()
        self.page_title = title
        self.body = Static("loading…", id="body")

    def compose(self) -> ComposeResult:
        """Title, body, footer."""
        yield Static(Text.assemble((inert(self.page_title), "bold"), "   (Esc back)"))
        with VerticalScroll():
            yield self.body
            yield from self.below()
        yield Footer()

    def below(self) -> Iterable[Widget]:
        """Widgets under the body (none unless a page adds some)."""
        return ()

    def on_mount(self) -> None:
        """Load the page off the UI thread."""
        self.run_worker(self._load, thread=True, group="detail")

    def _load(self) -> None:
        try:
            page = self.fetch()
        except FAILURES as exc:
            self.app.call_from_thread(self.body.update, Text(inert(str(exc)), style="red"))
            return
        self.app.call_from_thread(self._fill, page)

    def _fill(self, page: Callable[[], Text]) -> None:
        self.body.update(page())
        if self.AT_END:
            scroll = self.query_one(VerticalScroll)
            self.call_after_refresh(scroll.scroll_end, animate=False)

    def fetch(self) -> Callable[[], Text]:
        """Read from the services (in the worker); return what makes the page (on the UI thread)."""
        raise NotImplementedError


class JobDetailScreen(DetailScreen):
    """``gctl show job`` and ``gctl why`` of one job, then the tail of its output."""

    def __init__(self, store: Store, job_id: int, read_log: LogReader = logs.tail) -> None:
        """The detail of ``job_id``; ``read_log`` reads its output."""
        super().__init__(f"job {job_id}")
        self.store = store
        self.job_id = job_id
        self.read_log = read_log
        self.log_view = Static(Text("Log: reading from the job's node…", style="dim"), id="log")

    def below(self) -> Iterable[Widget]:
        """The log tail, under the detail."""
        yield self.log_view

    def on_mount(self) -> None:
        """Load the detail, and the log apart: a slow host holds up only the log."""
        super().on_mount()
        self.run_worker(self._load_log, thread=True, group="log")

    def fetch(self) -> Callable[[], Text]:
        """The job's detail and its explanation."""
        detail = jobs.show_job(self.store, self.job_id)
        reasons = why.explain(self.store, self.job_id)

        def draw() -> None:
            render.job_detail(detail)
            print("\nWhy (gctl why):")
            render.why(reasons)

        return lambda: Text(captured(draw))

    def _load_log(self) -> None:
        try:
            shown = log_text(self.read_log(self.store, self.job_id, LOG_LINES))
        except FAILURES as exc:
            shown = Text.assemble(("\nLog: ", "bold"), (inert(str(exc)), "yellow"))
        self.app.call_from_thread(self.log_view.update, shown)


def log_text(got: logs.LogTail) -> Text:
    """A heading saying where the lines come from, then the lines.

    The colours the job wrote are kept; any other control character or
    escape sequence in its output is shown escaped, as in the heading.
    """
    src = got.source
    others = (
        f"; also on {', '.join(n for n in src.nodes if n != src.node)}"
        if len(src.nodes) > 1
        else ""
    )
    heading = inert(
        f"Log (gctl logs {src.job_id}): last {len(got.lines)} lines of {src.container}"
        f" on {src.node}{others}"
    )
    if not got.lines:
        return Text.assemble((f"\n{heading}\n", "bold"), ("(no output yet)", "dim"))
    lines = "\n".join(map(inert_keeping_colours, got.lines))
    return Text.assemble((f"\n{heading}\n", "bold"), Text.from_ansi(lines))


class NodeDetailScreen(DetailScreen):
    """``gctl node show`` of one node and its latest events."""

    def __init__(self, store: Store, name: str) -> None:
        """The detail of node ``name``."""
        super().__init__(f"node {name}")
        self.store = store
        self.name_ = name

    def fetch(self) -> Callable[[], Text]:
        """The node's inventory and topology, and its recent events."""
        view = nodes.show_node(self.store, self.name_)
        recent = events.list_events(self.store, node=self.name_, limit=NODE_EVENTS)

        def draw() -> None:
            render.node_detail(view)
            print("\nRecent events:")
            render.events_table(recent)

        return lambda: Text(captured(draw))


class LogScreen(DetailScreen):
    """A job's output: the last :data:`LOG_VIEW_LINES` lines, as ``gctl logs`` reads them."""

    AT_END = True

    def __init__(self, store: Store, job_id: int, read_log: LogReader = logs.tail) -> None:
        """The output of ``job_id``, read with ``read_log``."""
        super().__init__(f"job {job_id}: output")
        self.store = store
        self.job_id = job_id
        self.read_log = read_log

    def fetch(self) -> Callable[[], Text]:
        """The job's last lines of output (a reason in red when there are none to read)."""
        got = self.read_log(self.store, self.job_id, LOG_VIEW_LINES)
        return lambda: log_text(got)
