"""The nodes and jobs tables: keyed rows, filtered and sorted, updated in place between frames."""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from rich.text import Text
from textual.widgets import DataTable

from gctl.services.queue import STATE_CODES
from gctl.watch.fmt import JOB_STATE_STYLE, NODE_STATE_STYLE, coarse_age, height_bar, plain, styled
from gctl.watch.frame import Frame, JobLine, NodeLine

Cell = Text
"""A cell: always a ``Text``, since Textual reads a ``str`` cell as markup."""


@dataclass(frozen=True, slots=True)
class Row:
    """One table row: its key, cells, what sorting compares per column, and text to filter on."""

    key: str
    cells: tuple[Cell, ...]
    sort: dict[str, Any]
    search: str


class FrameTable(DataTable[Cell]):
    """A row-cursor table shown from frames; keeps the cursor on the same key across refreshes.

    The first column's text is the row's key. A refresh removes, adds and
    updates only the rows and cells that changed, then reorders in place, so
    nothing flickers. Rows are memoised by the frame line they come from,
    and only the first :data:`MAX_ROWS` of the filtered, sorted list are
    shown (a table of 10,000 rows takes seconds to fill): filter or sort to
    see others; :meth:`cap_note` says when rows are left out.
    """

    COLUMNS: ClassVar[tuple[tuple[str, str], ...]] = ()
    """(key, label) of each column."""
    DEFAULT_SORT: ClassVar[str] = ""
    MAX_ROWS: ClassVar[int] = 1000
    NOUN: ClassVar[str] = "rows"
    """What the rows are, for :meth:`cap_note`."""

    def __init__(self, *, id: str | None = None) -> None:
        """An empty table; columns are added on mount."""
        super().__init__(id=id, cursor_type="row", zebra_stripes=True)
        self.sort_column = self.DEFAULT_SORT
        self.sort_reverse = False
        self.filter_text = ""
        self.matching = 0
        self._keys: list[str] = []
        self._cells: dict[str, tuple[Cell, ...]] = {}
        self._memo: dict[Hashable, Row] = {}
        self._frame: Frame | None = None

    def on_mount(self) -> None:
        """Add the columns."""
        for key, label in self.COLUMNS:
            self.add_column(label, key=key)

    def frame_items(self, frame: Frame) -> Sequence[Hashable]:
        """The frame's lines this table shows (subclasses say which)."""
        raise NotImplementedError

    def tick(self, item: Any, now: float) -> str:
        """The one cell of a line that changes with time alone (subclasses say which)."""
        raise NotImplementedError

    def memo_key(self, item: Any) -> Hashable:
        """What a line's row depends on besides :meth:`tick` (default: the whole line)."""
        return item  # type: ignore[no-any-return]

    def row_of(self, item: Any, now: float) -> Row:
        """The row of one line at time ``now`` (subclasses say how)."""
        raise NotImplementedError

    def show(self, frame: Frame) -> None:
        """Show ``frame``: filter, sort, cap, then change only what changed."""
        self._frame = frame
        memo: dict[Hashable, Row] = {}
        now = frame.taken_at
        for item in self.frame_items(frame):
            key = (self.memo_key(item), self.tick(item, now))
            memo[key] = self._memo.get(key) or self.row_of(item, now)
        self._memo = memo
        wanted = self.filter_text.lower()
        rows = [r for r in memo.values() if wanted in r.search]
        self.matching = len(rows)
        column = self.sort_column
        rows.sort(key=lambda r: (r.sort[column] is None, r.sort[column]), reverse=self.sort_reverse)
        del rows[self.MAX_ROWS :]
        self._apply(rows)

    def _apply(self, rows: list[Row]) -> None:
        keep = self.selected_key()
        new = {r.key: r for r in rows}
        if len(new.keys() - self._cells.keys()) > len(rows) // 2:
            self.clear()  # mostly new rows: quicker to start again
            self._cells, self._keys = {}, []
        for gone in self._cells.keys() - new.keys():
            self.remove_row(gone)
            del self._cells[gone]
        for r in rows:
            old = self._cells.get(r.key)
            if old is None:
                self.add_row(*r.cells, key=r.key)
            elif old is not r.cells:
                for (col, _), cell, was in zip(self.COLUMNS, r.cells, old, strict=True):
                    if cell != was:
                        self.update_cell(r.key, col, cell)
            self._cells[r.key] = r.cells
        keys = [r.key for r in rows]
        if keys != self._keys:
            at = {str(r.cells[0]): i for i, r in enumerate(rows)}  # the key as the cell shows it
            self.sort(self.COLUMNS[0][0], key=lambda cell: at[str(cell)])
            self._keys = keys
        if keep is not None and keep in new and keys.index(keep) != self.cursor_row:
            self.move_cursor(row=keys.index(keep), animate=False)

    def cap_note(self) -> str | None:
        """What the cap leaves out, for the status line (None when every row is shown).

        ``jobs: showing 1,000 of 10,000 — / to filter``; with a filter on,
        ``jobs: showing 1,000 of 2,345 matching — narrow the filter``.
        """
        if self.matching <= self.MAX_ROWS:
            return None
        shown = f"{self.NOUN}: showing {self.MAX_ROWS:,} of {self.matching:,}"
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
        if column not in {key for key, _ in self.COLUMNS}:
            return False
        self.sort_reverse = not self.sort_reverse if column == self.sort_column else False
        self.sort_column = column
        if self._frame is not None:
            self.show(self._frame)
        return True

    def filter_on(self, text: str) -> None:
        """Keep only rows whose text contains ``text`` (any case)."""
        self.filter_text = text
        if self._frame is not None:
            self.show(self._frame)

    def on_data_table_header_selected(self, event: DataTable.HeaderSelected) -> None:
        """A click on a column header sorts by it."""
        self.sort_on(str(event.column_key.value))


class NodesTable(FrameTable):
    """Every node: state in Slurm's words, GPUs used, height bar, affinity, responding."""

    COLUMNS = (
        ("name", "NODE"),
        ("state", "STATE"),
        ("gpus", "GPUS"),
        ("height", "HEIGHT (0..1│..2)"),
        ("affinity", "AFF"),
        ("kinds", "GPU KINDS"),
        ("answer", "ANSWER"),
    )
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

    def tick(self, item: Any, now: float) -> str:
        """Whether the node answers, or since when it has not."""
        v = item.view
        if v.responding:
            return "ok"
        if v.last_seen is None:
            return "never" if v.last_error is None else "error"
        return f"stale {coarse_age(now - v.last_seen)}"

    def row_of(self, item: Any, now: float) -> Row:
        """One row per node."""
        return _node_row(item, self.tick(item, now))


def _node_row(line: NodeLine, answer_text: str) -> Row:
    v = line.view
    answer = styled(answer_text, "green" if v.responding else "red")
    kinds = v.gpu_kinds + (" (emulated)" if v.emulated else "")
    cells: tuple[Cell, ...] = (
        plain(v.name),
        styled(v.state_flag, NODE_STATE_STYLE.get(v.state)),
        plain(f"{v.gpus_used}/{v.gpus_total}"),
        height_bar(v.height),
        plain(str(v.affinity)),
        plain(kinds),
        answer,
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
    """Unfinished jobs: id, name, user, state, GPUs and where, mechanism, rate, time in state."""

    COLUMNS = (
        ("id", "JOBID"),
        ("name", "NAME"),
        ("user", "USER"),
        ("state", "ST"),
        ("gpus", "GPUS"),
        ("where", "WHERE"),
        ("mechanism", "MECH"),
        ("rate", "RATE"),
        ("time", "TIME"),
        ("reason", "REASON"),
    )
    DEFAULT_SORT = "id"
    NOUN = "jobs"

    def frame_items(self, frame: Frame) -> Sequence[Hashable]:
        """The jobs."""
        return frame.jobs

    def tick(self, item: Any, now: float) -> str:
        """Time in the job's state."""
        return "-" if item.since is None else coarse_age(now - item.since)

    def row_of(self, item: Any, now: float) -> Row:
        """One row per job."""
        return _job_row(item, self.tick(item, now))


def _job_row(j: JobLine, in_state: str) -> Row:
    reason = ("(held) " if j.held else "") + (j.reason or "")
    cells: tuple[Cell, ...] = (
        plain(str(j.id)),
        plain(j.name),
        plain(j.user),
        styled(STATE_CODES.get(j.state, j.state), JOB_STATE_STYLE.get(j.state)),
        plain(str(j.gpus)),
        plain(j.where or "-"),
        plain(j.mechanism or "-"),
        plain("-" if j.rate is None else f"{j.rate:.2f}"),
        plain(in_state),
        plain(reason),
    )
    return Row(
        str(j.id),
        cells,
        {
            "id": j.id,
            "name": j.name,
            "user": j.user,
            "state": j.state,
            "gpus": j.gpus,
            "where": j.where,
            "mechanism": j.mechanism or "",
            "rate": j.rate,
            "time": None if j.since is None else -j.since,
            "reason": reason,
        },
        f"{j.id} {j.name} {j.user} {j.state} {STATE_CODES.get(j.state, '')} {j.where}".lower(),
    )
