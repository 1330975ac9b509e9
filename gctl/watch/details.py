"""Drill-down screens: a job (spec, history, ``gctl why``) and a node (inventory, reasons).

The text is the CLI's own (``gctl show job``, ``gctl why``, ``gctl node
show``, ``gctl events``), rendered by :mod:`gctl.cli.render` from the same
services, so the dashboard and the commands never disagree. The services
are called in a worker thread; Esc goes back.
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Callable
from typing import ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import Footer, Static

from gctl.cli import render
from gctl.services import events, jobs, nodes, why
from gctl.services.db import Store
from gctl.watch.data import FAILURES

NODE_EVENTS = 15
"""How many of a node's latest events its detail shows."""
LOG_NOTE = "log tail: not stored; on the host under the job directory (WorkDir above)"


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

    def __init__(self, title: str) -> None:
        """An empty page titled ``title`` until the worker fills it."""
        super().__init__()
        self.page_title = title
        self.body = Static("loading…", id="body")

    def compose(self) -> ComposeResult:
        """Title, body, footer."""
        yield Static(f"[b]{self.page_title}[/b]   (Esc back)")
        with VerticalScroll():
            yield self.body
        yield Footer()

    def on_mount(self) -> None:
        """Load the page off the UI thread."""
        self.run_worker(self._load, thread=True, group="detail")

    def _load(self) -> None:
        try:
            draw = self.fetch()
        except FAILURES as exc:
            self.app.call_from_thread(self.body.update, Text(str(exc), style="red"))
            return
        self.app.call_from_thread(lambda: self.body.update(Text(captured(draw))))

    def fetch(self) -> Callable[[], None]:
        """Read from the services (in the worker); return what draws the page."""
        raise NotImplementedError


class JobDetailScreen(DetailScreen):
    """``gctl show job`` and ``gctl why`` of one job."""

    def __init__(self, store: Store, job_id: int) -> None:
        """The detail of ``job_id``."""
        super().__init__(f"job {job_id}")
        self.store = store
        self.job_id = job_id

    def fetch(self) -> Callable[[], None]:
        """The job's detail and its explanation."""
        detail = jobs.show_job(self.store, self.job_id)
        reasons = why.explain(self.store, self.job_id)

        def draw() -> None:
            render.job_detail(detail)
            print("\nWhy (gctl why):")
            render.why(reasons)
            print(f"\n{LOG_NOTE}")

        return draw


class NodeDetailScreen(DetailScreen):
    """``gctl node show`` of one node and its latest events."""

    def __init__(self, store: Store, name: str) -> None:
        """The detail of node ``name``."""
        super().__init__(f"node {name}")
        self.store = store
        self.name_ = name

    def fetch(self) -> Callable[[], None]:
        """The node's inventory and topology, and its recent events."""
        view = nodes.show_node(self.store, self.name_)
        recent = events.list_events(self.store, node=self.name_, limit=NODE_EVENTS)

        def draw() -> None:
            render.node_detail(view)
            print("\nRecent events:")
            render.events_table(recent)

        return draw
