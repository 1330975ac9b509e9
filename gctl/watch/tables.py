"""The nodes and jobs tables: keyed rows, filtered and sorted, updated in place between frames.

A refresh whose frame has the very same lines as the last (the store did
not change: :meth:`gctl.watch.data.FrameSource.latest`) only updates the
one column that changes with time alone, in the rows shown. Otherwise rows
are memoised by the line they come from, and only the rows and cells that
changed are removed, added or updated, then reordered in place, so nothing
flickers. Only the first :data:`FrameTable.MAX_ROWS` of the filtered,
sorted list are shown (a table of 10,000 rows takes seconds to fill):
filter or sort to see others; :meth:`FrameTable.cap_note` says when rows
are left out.

Column widths follow the widget: each column is as wide as its widest
shown cell, and when they do not all fit, the flexible columns (a node's
GPU kinds, a job's name, place, mechanism and reason) give way, down to a
minimum, their text cut with an ellipsis. The sorted column's header
carries ▲ or ▼.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from rich.text import Text
from textual import events
from textual.geometry import Size
from textual.widgets import DataTable
from textual.widgets.data_table import RowKey

from gctl.cli.render import time_used
from gctl.services.queue import STATE_CODES
from gctl.watch.fmt import (
    JOB_STATE_STYLE,
    NODE_STATE_STYLE,
    cell,
    coarse_age,
    height_bar,
    plain,
    styled,
)
from gctl.watch.frame import Frame, JobLine, NodeLine

Cell = Text
"""A cell: always a ``Text``, since Textual reads a ``str`` cell as markup."""

ASCENDING, DESCENDING = " ▲", " ▼"
"""What the sorted column's header ends with."""


@dataclass(frozen=True, slots=True)
class Col:
    """A column: its key, its header, how narrow it may get (0: never narrower than its text)."""

    key: str
    label: str
    shrink_to: int = 0


@dataclass(frozen=True, slots=True)
class Row:
    """One row: its key, its cells but the timed one, sort values per column, text to filter on."""

    key: str
    cells: tuple[Cell, ...]
    sort: dict[str, Any]
    search: str


class FrameTable(DataTable[Cell]):
    """A row-cursor table shown from frames; keeps the cursor on the same key across refreshes.

    The first column's text is the row's key. :attr:`TIMED` names the one
    column whose cell is made at each refresh from the line and the time
    (:meth:`timed`); every other cell comes from the line alone
    (:meth:`row_of`).
    """

    COLUMNS: ClassVar[tuple[Col, ...]] = ()
    TIMED: ClassVar[str] = ""
    """The key of the column that changes with time alone."""
    DEFAULT_SORT: ClassVar[str] = ""
    MAX_ROWS: ClassVar[int] = 1000
    NOUN: ClassVar[str] = "rows"
    """What the rows are, for :meth:`cap_note`."""
    REMOVE_MAX: ClassVar[int] = 50
    """Rows removed one by one at most; past that the table is filled again (each removal
    costs as much as adding a few hundred rows)."""

    def __init__(self, *, id: str | None = None) -> None:
        """An empty table; columns are added on mount."""
        super().__init__(id=id, cursor_type="row", zebra_stripes=True)
        self.sort_column = self.DEFAULT_SORT
        self.sort_reverse = False
        self.filter_text = ""
        self.kept: frozenset[str] = frozenset()
        self.matches: list[Row] = []
        """Every row the filter keeps, sorted (the table shows the first :data:`MAX_ROWS`)."""
        self.lines: dict[str, Any] = {}
        """The frame's line of each row, by key."""
        self._timed_at = next(i for i, c in enumerate(self.COLUMNS) if c.key == self.TIMED)
        self._items: Sequence[Hashable] | None = None
        self._now = 0.0
        self._keys: list[str] = []
        self._cells: dict[str, tuple[Cell, ...]] = {}
        self._widest: list[int] = [0] * len(self.COLUMNS)
        self._memo: dict[Hashable, Row] = {}

    def on_mount(self) -> None:
        """Add the columns."""
        for col in self.COLUMNS:
            self.add_column(self._label(col), key=col.key, width=len(self._label(col)))

    def frame_items(self, frame: Frame) -> Sequence[Hashable]:
        """The frame's lines this table shows (subclasses say which)."""
        raise NotImplementedError

    def timed(self, item: Any, now: float) -> Cell:
        """The cell of the :attr:`TIMED` column at time ``now`` (subclasses say how)."""
        raise NotImplementedError

    def memo_key(self, item: Any) -> Hashable:
        """What a line's row depends on (default: the whole line)."""
        return item  # type: ignore[no-any-return]

    def row_of(self, item: Any) -> Row:
        """The row of one line (subclasses say how)."""
        raise NotImplementedError

    # --- refresh ---------------------------------------------------------------------------

    def show(self, frame: Frame) -> None:
        """Show ``frame``: new lines are filtered, sorted, capped, applied; else only retimed."""
        self._now = frame.taken_at
        items = self.frame_items(frame)
        if items is not self._items:
            self._items = items
            memo: dict[Hashable, Row] = {}
            lines: dict[str, Any] = {}
            for item in items:
                key = self.memo_key(item)
                row = memo[key] = self._memo.get(key) or self.row_of(item)
                lines[row.key] = item
            self._memo, self.lines = memo, lines
            self.reselect()
        else:
            self._retime()

    def reselect(self) -> None:
        """Filter, sort and cap the rows again (the filter, the sort or :attr:`kept` changed)."""
        wanted = self.filter_text.lower()
        kept = self.kept
        rows = [r for r in self._memo.values() if wanted in r.search or r.key in kept]
        column = self.sort_column
        rows.sort(key=lambda r: (r.sort[column] is None, r.sort[column]), reverse=self.sort_reverse)
        self.matches = rows
        self._apply(rows[: self.MAX_ROWS])

    def _full(self, row: Row) -> tuple[Cell, ...]:
        at = self._timed_at
        return (*row.cells[:at], self.timed(self.lines[row.key], self._now), *row.cells[at:])

    def _apply(self, rows: list[Row]) -> None:
        keep = self.selected_key()
        new = {r.key: self._full(r) for r in rows}
        gone = self._cells.keys() - new.keys()
        if len(gone) > self.REMOVE_MAX or len(new.keys() - self._cells.keys()) > len(rows) // 2:
            self.clear()  # many rows out, or mostly new ones: quicker to start again
            self._cells, self._keys, gone = {}, [], set()
        for key in gone:
            self.remove_row(key)
            del self._cells[key]
        for key, cells in new.items():
            old = self._cells.get(key)
            if old is None:
                self.add_row(*cells, key=key)
            else:
                self._update(key, cells, old)
            self._cells[key] = cells
        keys = list(new)
        if keys != self._keys:
            at = {str(cells[0]): i for i, cells in enumerate(new.values())}  # the key as shown
            self.sort(self.COLUMNS[0].key, key=lambda first: at[str(first)])
            self._keys = keys
        if keep is not None and keep in new and keys.index(keep) != self.cursor_row:
            self.move_cursor(row=keys.index(keep), animate=False)
        self._widest = [
            max([len(self._label(col)), *(c[i].cell_len for c in new.values())])
            for i, col in enumerate(self.COLUMNS)
        ]
        self.fit()

    def _update(self, key: str, cells: tuple[Cell, ...], old: tuple[Cell, ...]) -> None:
        for col, now, was in zip(self.COLUMNS, cells, old, strict=True):
            if now != was:
                self.update_cell(key, col.key, now)

    def _retime(self) -> None:
        """Only the timed cells of the rows in view (the lines are those of the last frame).

        A row scrolled into view shows its time as of its last refresh in
        view until the next refresh: updating a thousand cells every
        refresh would cost more than everything else the dashboard does.
        """
        at, widest = self._timed_at, self._widest[self._timed_at]
        top = self.scroll_offset.y
        for key in self._keys[top : top + self.size.height]:
            old = self._cells[key]
            now = self.timed(self.lines[key], self._now)
            if now != old[at]:
                self.update_cell(key, self.TIMED, now)
                self._cells[key] = (*old[:at], now, *old[at + 1 :])
                widest = max(widest, now.cell_len)
        if widest != self._widest[at]:
            self._widest[at] = widest
            self.fit()

    # --- widths and headers ----------------------------------------------------------------

    def _label(self, col: Col) -> Text:
        if col.key != self.sort_column:
            return Text(col.label)
        return Text(col.label + (DESCENDING if self.sort_reverse else ASCENDING))

    def fit(self) -> None:
        """Set the column widths for the widget's width (see the module docstring)."""
        if not self.columns:
            return
        widths = list(self._widest)
        room = self.size.width - self.styles.scrollbar_size_vertical
        excess = sum(widths) + 2 * self.cell_padding * len(widths) - room
        for i in reversed(range(len(widths))):
            give = min(max(0, excess), max(0, widths[i] - (self.COLUMNS[i].shrink_to or widths[i])))
            widths[i] -= give
            excess -= give
        changed = False
        for column, col, width in zip(self.ordered_columns, self.COLUMNS, widths, strict=True):
            label = self._label(col)
            if (column.width, column.auto_width, column.label) != (width, False, label):
                column.width, column.auto_width, column.label = width, False, label
                changed = True
        if changed:
            # DataTable has no public call to resize a column: what its own resizes do.
            self._require_update_dimensions = True
            self._clear_caches()

    def _update_dimensions(self, new_rows: Iterable[RowKey]) -> None:
        """DataTable's own, less measuring every cell of every new row (20,000 for 2,000 rows).

        :meth:`fit` sets every column's width and every row is one line, so
        only the scrollable size is left to set.
        """
        header = self.header_height if self.show_header else 0
        width = sum(column.get_render_width(self) for column in self.columns.values())
        self.virtual_size = Size(width, self.row_count + header)

    def on_resize(self, _: events.Resize) -> None:
        """The widget's width changed: fit the columns to it again."""
        self.fit()

    # --- cursor, filter, sort --------------------------------------------------------------

    def cap_note(self) -> str | None:
        """What the cap leaves out, for the status line (None when every row is shown).

        ``jobs: showing 1,000 of 10,000 — / to filter``; with a filter on,
        ``jobs: showing 1,000 of 2,345 matching — narrow the filter``.
        """
        if len(self.matches) <= self.MAX_ROWS:
            return None
        shown = f"{self.NOUN}: showing {self.MAX_ROWS:,} of {len(self.matches):,}"
        if self.filter_text:
            return f"{shown} matching — narrow the filter"
        return f"{shown} — / to filter"

    def selected_key(self) -> str | None:
        """The key of the row under the cursor, if any."""
        if not self._keys or not 0 <= self.cursor_row < len(self._keys):
            return None
        return self._keys[self.cursor_row]

    def sort_on(self, column: str) -> bool:
        """Sort by ``column`` (again: reverse it); False if this table has no such column."""
        if column not in {col.key for col in self.COLUMNS}:
            return False
        self.sort_reverse = not self.sort_reverse if column == self.sort_column else False
        self.sort_column = column
        self.reselect()
        return True

    def filter_on(self, text: str, kept: frozenset[str] = frozenset()) -> None:
        """Keep only rows whose text contains ``text`` (any case), and those keyed in ``kept``."""
        if (text, kept) != (self.filter_text, self.kept):
            self.filter_text, self.kept = text, kept
            self.reselect()

    def on_data_table_header_selected(self, event: DataTable.HeaderSelected) -> None:
        """A click on a column header sorts by it."""
        self.sort_on(str(event.column_key.value))


class NodesTable(FrameTable):
    """Every node: state in Slurm's words (``*``: not responding), GPUs used, height bar, more."""

    COLUMNS = (
        Col("name", "NODE"),
        Col("state", "STATE"),
        Col("gpus", "GPUS"),
        Col("height", "HEIGHT (0..1│..2)"),
        Col("affinity", "AFF"),
        Col("answer", "ANSWER"),
        Col("kinds", "GPU KINDS", shrink_to=9),
    )
    TIMED = "answer"
    DEFAULT_SORT = "name"
    NOUN = "nodes"

    def frame_items(self, frame: Frame) -> Sequence[Hashable]:
        """The nodes."""
        return frame.nodes

    def memo_key(self, item: Any) -> Hashable:
        """The node's own fields, not its GPUs (which its row does not show)."""
        v = item.view
        return (
            v.name,
            v.state_flag,
            v.gpus_used,
            v.gpus_total,
            v.height,
            v.affinity,
            v.gpu_kinds,
            v.emulated,
            v.reason,
        )

    def timed(self, item: Any, now: float) -> Cell:
        """Whether the node answers, or since when it has not."""
        v = item.view
        if v.responding:
            return styled("ok", "green")
        if v.last_seen is None:
            return styled("never" if v.last_error is None else "error", "red")
        return styled(f"stale {coarse_age(now - v.last_seen)}", "red")

    def row_of(self, item: Any) -> Row:
        """One row per node."""
        return _node_row(item)


def _node_row(line: NodeLine) -> Row:
    v = line.view
    kinds = v.gpu_kinds + (" (emulated)" if v.emulated else "")
    cells: tuple[Cell, ...] = (
        plain(v.name),
        styled(v.state_flag, NODE_STATE_STYLE.get(v.state)),
        plain(f"{v.gpus_used}/{v.gpus_total}"),
        height_bar(v.height),
        plain(str(v.affinity)),
        plain(kinds),
    )
    return Row(
        v.name,
        cells,
        {
            "name": v.name,
            "state": v.state_flag,
            "gpus": v.gpus_used,
            "height": v.height,
            "affinity": v.affinity,
            "kinds": v.gpu_kinds,
            "answer": v.responding,
        },
        f"{v.name} {v.state_flag} {kinds} {v.reason or ''}".lower(),
    )


class JobsTable(FrameTable):
    """Unfinished jobs: id, name, user, state, time used, GPUs, where, rate, mechanism, reason."""

    COLUMNS = (
        Col("id", "JOBID"),
        Col("name", "NAME", shrink_to=6),
        Col("user", "USER"),
        Col("state", "ST"),
        Col("time", "TIME"),
        Col("gpus", "GPUS"),
        Col("where", "WHERE", shrink_to=8),
        Col("rate", "RATE"),
        Col("mechanism", "MECH", shrink_to=5),
        Col("reason", "REASON", shrink_to=10),
    )
    TIMED = "time"
    DEFAULT_SORT = "id"
    NOUN = "jobs"

    def frame_items(self, frame: Frame) -> Sequence[Hashable]:
        """The jobs."""
        return frame.jobs

    def timed(self, item: Any, now: float) -> Cell:
        """Time used so far, as ``gctl queue`` shows it (squeue's ``%M``: 0:00 if never run)."""
        return cell(time_used(item.start_time, item.end_time, now))

    def row_of(self, item: Any) -> Row:
        """One row per job."""
        return _job_row(item)


def _job_row(j: JobLine) -> Row:
    reason = ("(held) " if j.held else "") + (j.reason or "")
    cells: tuple[Cell, ...] = (
        plain(str(j.id)),
        cell(j.name),
        plain(j.user),
        styled(STATE_CODES.get(j.state, j.state), JOB_STATE_STYLE.get(j.state)),
        plain(str(j.gpus)),
        cell(j.where or "-"),
        plain("-" if j.rate is None else f"{j.rate:.2f}"),
        plain(j.mechanism or "-"),
        cell(reason),
    )
    return Row(
        str(j.id),
        cells,
        {
            "id": j.id,
            "name": j.name,
            "user": j.user,
            "state": j.state,
            # time used: for jobs not ended, the later a job started the less it used
            "time": float("-inf") if j.start_time is None else -j.start_time,
            "gpus": j.gpus,
            "where": j.where,
            "rate": j.rate,
            "mechanism": j.mechanism or "",
            "reason": reason,
        },
        f"{j.id} {j.name} {j.user} {j.state} {STATE_CODES.get(j.state, '')} {j.where}".lower(),
    )
