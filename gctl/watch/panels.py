"""The GPU grid of one node, the events timeline and the status line."""

from __future__ import annotations

import time

from rich.markup import escape
from rich.table import Table
from rich.text import Text
from textual.widgets import RichLog, Static

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
    for header in ("GPU", "MODEL", "MODE", "JOBS", "UTIL", "MEMORY"):
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
    """Jobs on the GPU; ``▶`` marks the job holding a time slice now, ``~`` an opportunistic one."""
    out = Text()
    holder = gpu.slice_holder
    for i, h in enumerate(gpu.holders):
        if i:
            out.append(" ")
        if h.job_id == holder:
            out.append(f"▶{h.job_id}", style="bold green")
        elif h.mode == "opportunistic":
            out.append(f"~{h.job_id}", style="magenta" if h.running else "dim")
        else:
            out.append(str(h.job_id), style="" if h.running else "dim")
    return out if gpu.holders else Text("-", style="dim")


def _use_cell(spark: str, now: str) -> Text:
    return Text.assemble((spark, "cyan"), " ", now)


class GpuGrid(Static):
    """The GPU grid of the node under the nodes table's cursor."""

    def show(self, frame: Frame | None, node: str | None) -> None:
        """Render the GPUs of ``node`` in ``frame``."""
        line = None if frame is None or node is None else frame.node(node)
        if line is None or frame is None:
            self.update(Text("no node selected", style="dim"))
            return
        self.update(gpu_table(line, frame))


def event_line(kind: str, at: float, message: str) -> Text:
    """One timeline entry: local time, kind, the event's own message (which says why)."""
    stamp = time.strftime("%H:%M:%S", time.localtime(at))
    short = kind.removeprefix("job.")
    style = _EVENT_STYLE.get(kind, "blue" if kind.startswith("node.") else "")
    return Text.assemble((stamp, "dim"), " ", (f"{inert(short):<11}", style), " ", inert(message))


class Timeline(RichLog):
    """Placements, suspends, resumes, packs, migrations, node changes: newest at the bottom."""

    def __init__(self, *, id: str | None = None) -> None:
        """An empty timeline keeping the last 1,000 lines."""
        super().__init__(id=id, max_lines=1000, wrap=False, markup=False, auto_scroll=True)
        self.last_id = 0

    def show(self, frame: Frame) -> None:
        """Append the frame's events not shown yet."""
        for e in frame.events:
            if e.id > self.last_id and e.kind not in QUIET:
                self.write(event_line(e.kind, e.at, e.message))
        if frame.events:
            self.last_id = max(self.last_id, frame.events[-1].id)
