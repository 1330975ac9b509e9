"""The status line, the GPU grid of one node and the events timeline.

Each redraws only when what it shows changed: the status line alone (no
layout pass over the screen), the grid when its node's line or the profile
samples are new, the timeline when events arrive or the filter changes (it
then shows again, from the events it keeps, those that match).
"""

from __future__ import annotations

import time
from collections import deque

from rich.markup import escape
from rich.table import Table
from rich.text import Text
from textual.widget import Widget
from textual.widgets import RichLog, Static

from gctl.services.events import EventView
from gctl.textsafe import inert
from gctl.watch.fmt import MODE_STYLE, plain, sparkline
from gctl.watch.frame import Frame, GpuCell, NodeLine
from gctl.watch.history import gpu_series

SPARK = 10
"""Width of a GPU's utilisation and memory sparklines."""
QUIET = frozenset({"job.submit"})
"""Event kinds the timeline leaves out (the queue shows them)."""
_EVENT_STYLE = {
    "job.place": "green",
    "job.resume": "green",
    "job.suspend": "yellow",
    "job.pack": "cyan",
    "job.unpack": "cyan",
    "job.migrate": "bold magenta",
    "job.grow": "magenta",
    "job.shrink": "magenta",
    "job.error": "bold red",
    "job.end": "dim",
}


def gpu_table(line: NodeLine, frame: Frame) -> Table:
    """The GPUs of one node: jobs on each, sharing mode, slice holder, use with history."""
    v = line.view
    marked = " (emulated figures)" if v.emulated else ""
    table = Table(box=None, pad_edge=False, expand=True, title_justify="left")
    # A str title takes the table's title style; rich reads it as markup, hence escape().
    table.title = escape(inert(f"{v.name}: {v.state_flag}, height {v.height:.2f}{marked}"))
    for header in ("GPU", "MODEL", "MODE", "JOB IDS", "UTIL", "MEMORY"):
        table.add_column(header, no_wrap=True)
    for gpu in line.gpus:
        util, mem = gpu_series(gpu, frame.samples)
        table.add_row(
            str(gpu.index),
            plain(f"{gpu.model}-{gpu.memory_mb // 1024}G"),
            Text(gpu.mode, style=MODE_STYLE.get(gpu.mode, "")),
            _jobs_cell(gpu),
            _use_cell(sparkline(util, 1.0, SPARK), f"{util[-1]:4.0%}" if util else "   -"),
            _use_cell(
                sparkline([float(m) for m in mem], float(gpu.memory_mb), SPARK),
                f"{mem[-1] / 1024:4.1f}G" if mem else "    -",
            ),
        )
    return table


def _jobs_cell(gpu: GpuCell) -> Text:
    """Ids of the jobs on the GPU (``#7``): ``▶`` marks the slice holder, ``~`` opportunistic."""
    out = Text()
    holder = gpu.slice_holder
    for i, h in enumerate(gpu.holders):
        if i:
            out.append(" ")
        if h.job_id == holder:
            out.append(f"▶#{h.job_id}", style="bold green")
        elif h.mode == "opportunistic":
            out.append(f"~#{h.job_id}", style="magenta" if h.running else "dim")
        else:
            out.append(f"#{h.job_id}", style="" if h.running else "dim")
    return out if gpu.holders else Text("-", style="dim")


def _use_cell(spark: str, now: str) -> Text:
    return Text.assemble((spark, "cyan"), " ", now)


class StatusLine(Widget):
    """One line of text; a new one redraws this line only (``Static.update`` lays out anew)."""

    DEFAULT_CSS = "StatusLine { height: 1; }"

    def __init__(self, *, id: str | None = None) -> None:
        """An empty line."""
        super().__init__(id=id)
        self._line = Text()

    def show(self, line: Text) -> None:
        """Show ``line`` (if it is another)."""
        if line != self._line:
            self._line = line
            self.refresh()

    def render(self) -> Text:
        """The line."""
        return self._line


class GpuGrid(Static):
    """The GPU grid of the node under the nodes table's cursor."""

    def __init__(self, *, id: str | None = None) -> None:
        """An empty grid."""
        super().__init__(id=id)
        self._shown: tuple[object, ...] | None = None

    def show(self, frame: Frame | None, node: str | None) -> None:
        """Render the GPUs of ``node`` in ``frame`` (unless they are drawn already)."""
        line = None if frame is None or node is None else frame.node(node)
        shown = (line, None if frame is None else id(frame.samples))
        if shown == self._shown:
            return
        self._shown = shown
        if line is None or frame is None:
            self.update(Text("no node selected", style="dim"))
        else:
            self.update(gpu_table(line, frame))


def event_line(kind: str, at: float, message: str) -> Text:
    """One timeline entry: local time, kind, the event's own message (which says why)."""
    stamp = time.strftime("%H:%M:%S", time.localtime(at))
    short = kind.removeprefix("job.")
    style = _EVENT_STYLE.get(kind, "blue" if kind.startswith("node.") else "")
    return Text.assemble((stamp, "dim"), " ", (f"{inert(short):<11}", style), " ", inert(message))


class Timeline(RichLog):
    """Placements, suspends, resumes, packs, migrations, node changes: newest at the bottom."""

    KEEP = 1000
    """Events kept, and lines shown, at most."""

    def __init__(self, *, id: str | None = None) -> None:
        """An empty timeline."""
        super().__init__(id=id, max_lines=self.KEEP, wrap=False, markup=False, auto_scroll=True)
        self.last_id = 0
        self.kept: deque[EventView] = deque(maxlen=self.KEEP)
        self.filter_text = ""
        self.jobs: frozenset[int] = frozenset()
        self.nodes: frozenset[str] = frozenset()

    def matches(self, e: EventView) -> bool:
        """Whether the filter shows ``e``: its text matches, or its job's or its node's row does."""
        if not self.filter_text:
            return True
        return (
            e.job_id in self.jobs
            or e.node in self.nodes
            or self.filter_text in f"{e.kind} {e.user} {e.node or ''} {e.message}".lower()
        )

    def show(self, frame: Frame) -> None:
        """Append the frame's events not shown yet (those the filter shows)."""
        for e in frame.events:
            if e.id > self.last_id and e.kind not in QUIET:
                self.kept.append(e)
                if self.matches(e):
                    self.write(event_line(e.kind, e.at, e.message))
        if frame.events:
            self.last_id = max(self.last_id, frame.events[-1].id)

    def filter_on(self, text: str, jobs: frozenset[int], nodes: frozenset[str]) -> None:
        """Show only the events about ``jobs`` or ``nodes`` or containing ``text`` (any case)."""
        if (text.lower(), jobs, nodes) == (self.filter_text, self.jobs, self.nodes):
            return
        self.filter_text, self.jobs, self.nodes = text.lower(), jobs, nodes
        self.clear()
        shown = [event_line(e.kind, e.at, e.message) for e in self.kept if self.matches(e)]
        if shown:
            self.write(Text("\n").join(shown))  # one write: a write per line costs 10x more
