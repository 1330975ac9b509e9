"""Load public job traces into :class:`~gctl.sim.workload.TraceJob` lists.

Two CSV formats are understood (see ``traces/README.md``), plain or
gzip-compressed (recognised by content, not by name):

``philly``
    Header ``timestamp,duration,num_gpus,gpu_time,cluster``: one row per job of
    the Microsoft Philly cluster. ``timestamp`` is the submit time as
    ``YYYY-MM-DD HH:MM:SS`` (read as naive wall-clock time, so no time zone or
    daylight-saving shift applies); rows are not sorted. ``duration`` is in
    seconds, ``num_gpus`` an integer >= 1; ``gpu_time`` must be numeric but is
    otherwise unused; ``cluster`` is the virtual-cluster id. Job ids are
    ``p<index>``, the 0-based index of the data row in the file (blank lines
    not counted), so they stay the same whatever is filtered out.
    ``JobSpec.profile`` is ``None``.

``models``
    Header starting ``job_id,num_gpu,submit_time,iterations,model_name`` (the
    ``philly_models_trace*.csv`` files); the ``duration`` column is required,
    ``priority`` optional. Times are milliseconds and are converted to
    seconds. ``model_name`` becomes ``JobSpec.profile``. ``priority`` 1 maps to
    :attr:`Priority.HIGH <gctl.core.model.Priority.HIGH>` and 0 to
    :attr:`Priority.NORMAL <gctl.core.model.Priority.NORMAL>`; any other value
    is an error, and a missing column means NORMAL. The job id is ``job_id``
    as written, which must be unique.

Every malformed row raises :class:`TraceError` naming the file and line.
Blank lines are skipped. Jobs come back sorted by submit time (ties keep file
order), with submit times shifted so the first returned job is at 0.
"""

from __future__ import annotations

import csv
import gzip
import io
import math
import re
import zlib
from collections import Counter
from collections.abc import Iterator
from datetime import datetime
from operator import itemgetter
from pathlib import Path

from gctl.core.model import Cluster, JobSpec, Priority
from gctl.sim.workload import TraceJob

PHILLY_HEADER = ("timestamp", "duration", "num_gpus", "gpu_time", "cluster")
"""The exact header of a ``philly`` trace."""

MODELS_HEADER_PREFIX = ("job_id", "num_gpu", "submit_time", "iterations", "model_name")
"""The first columns of a ``models`` trace header."""

FORMATS = ("philly", "models")
"""Trace formats :func:`load_trace` understands."""

_MODELS_PRIORITY = {"1": Priority.HIGH, "0": Priority.NORMAL}
_TIMESTAMP_RE = re.compile(r"\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}")
_EPOCH = datetime(1970, 1, 1)
_MAX_SHOWN = 60
"""Longest excerpt of a bad value quoted in an error message."""
_GZIP_MAGIC = b"\x1f\x8b"
MAX_TRACE_BYTES = 2 << 30
"""Largest trace text read, after decompression: a bound against compression bombs."""


class TraceError(ValueError):
    """A trace file that cannot be read; ``str()`` is ``"<file>:<line>: <reason>"``.

    ``line`` is the 1-based line number in the file (the header is line 1), or
    ``None`` for a problem with the file as a whole, in which case the message
    is ``"<file>: <reason>"``.
    """

    def __init__(self, path: str | Path, line: int | None, reason: str) -> None:
        self.path = str(path)
        self.line = line
        self.reason = reason
        where = self.path if line is None else f"{self.path}:{line}"
        super().__init__(f"{where}: {reason}")


_Row = tuple[float, float, int, str, str | None, Priority, str]
"""A validated job row: submit s, duration s, GPUs, id, profile, priority, cluster."""


def _show(value: str) -> str:
    """Quote a field for a message, shortened so the message stays readable."""
    if len(value) > _MAX_SHOWN:
        value = value[:_MAX_SHOWN] + "..."
    return repr(value)


class _Reader:
    """The CSV rows of one file, with line numbers for error messages."""

    def __init__(self, path: str | Path) -> None:
        self.path = path
        raw = _text_bytes(path)
        try:
            text = raw.decode("utf-8-sig")
        except UnicodeDecodeError:
            # Decode line by line to name the first bad line.
            for number, line in enumerate(raw.split(b"\n"), 1):
                try:
                    line.decode("utf-8")
                except UnicodeDecodeError:
                    raise TraceError(path, number, "not valid UTF-8 text") from None
            raise  # pragma: no cover - the loop above always finds the line
        self._csv = csv.reader(io.StringIO(text, newline=""), strict=True)

    @property
    def line(self) -> int:
        """Line number of the last line of the row read last (0 before any)."""
        return self._csv.line_num

    def error(self, reason: str, line: int | None = -1) -> TraceError:
        """Build a :class:`TraceError` at the current line (or at ``line``)."""
        return TraceError(self.path, self.line if line == -1 else line, reason)

    def rows(self) -> Iterator[list[str]]:
        """Yield the non-blank rows; :attr:`line` tells where each one ends."""
        try:
            for row in self._csv:
                if row and (len(row) > 1 or row[0].strip()):
                    yield row
        except csv.Error as exc:
            raise self.error(f"malformed CSV: {exc}") from None

    def header(self) -> list[str]:
        """Return the first non-blank row, with fields stripped."""
        for row in self.rows():
            return [field.strip() for field in row]
        raise self.error("empty file, expected a header", 1)

    def width(self, row: list[str], width: int) -> None:
        """Reject a row whose column count differs from the header's."""
        if len(row) != width:
            raise self.error(f"expected {width} columns, got {len(row)}")

    def number(self, value: str, column: str) -> float:
        """Read a finite float from ``column``."""
        try:
            number = float(value)
        except ValueError:
            raise self.error(f"{column} is not a number: {_show(value)}") from None
        if not math.isfinite(number):
            raise self.error(f"{column} is not a finite number: {_show(value)}")
        return number

    def gpus(self, value: str, column: str) -> int:
        """Read a GPU count >= 1 from ``column``."""
        try:
            gpus = int(value)
        except ValueError:
            raise self.error(f"{column} is not an integer: {_show(value)}") from None
        if gpus < 1:
            raise self.error(f"{column} must be >= 1, got {gpus}")
        return gpus

    def duration(self, value: str, column: str) -> float:
        """Read a positive, finite duration from ``column``."""
        duration = self.number(value, column)
        if duration <= 0:
            raise self.error(f"{column} must be > 0, got {value.strip()}")
        return duration


def _text_bytes(path: str | Path) -> bytes:
    """The file's bytes, decompressed when it is gzip, at most :data:`MAX_TRACE_BYTES`."""
    with Path(path).open("rb") as fh:
        if fh.read(2) != _GZIP_MAGIC:
            fh.seek(0)
            raw = fh.read(MAX_TRACE_BYTES + 1)
        else:
            fh.seek(0)
            try:
                with gzip.GzipFile(fileobj=fh) as unzipped:
                    raw = unzipped.read(MAX_TRACE_BYTES + 1)
            except (OSError, EOFError, zlib.error) as exc:  # BadGzipFile is an OSError
                raise TraceError(path, None, f"not a valid gzip file: {exc}") from None
    if len(raw) > MAX_TRACE_BYTES:
        raise TraceError(path, None, f"larger than {MAX_TRACE_BYTES:,} bytes of text")
    return raw


def _expected_headers() -> str:
    """Both known headers, for error messages."""
    return (
        f"expected a philly header {','.join(PHILLY_HEADER)!r}"
        f" or a models header starting {','.join(MODELS_HEADER_PREFIX)!r}"
    )


def _detect(header: list[str]) -> str | None:
    """Name the format a header belongs to, or ``None`` if it is neither."""
    if tuple(header) == PHILLY_HEADER:
        return "philly"
    if tuple(header[: len(MODELS_HEADER_PREFIX)]) == MODELS_HEADER_PREFIX:
        return "models"
    return None


def _timestamp(reader: _Reader, stamp: str) -> float:
    """Seconds since 1970 of a naive ``YYYY-MM-DD HH:MM:SS`` timestamp."""
    text = stamp.strip()
    try:
        if _TIMESTAMP_RE.fullmatch(text) is None:
            raise ValueError(text)
        return (datetime.fromisoformat(text) - _EPOCH).total_seconds()
    except ValueError:
        raise reader.error(f"bad timestamp {_show(stamp)}, expected YYYY-MM-DD HH:MM:SS") from None


def _philly_error(reader: _Reader, row: list[str]) -> TraceError:
    """Explain why a philly row failed the fast path."""
    reader.width(row, len(PHILLY_HEADER))
    stamp, duration, gpus, gpu_time, cluster = row
    _timestamp(reader, stamp)
    reader.duration(duration, "duration")
    reader.gpus(gpus, "num_gpus")
    reader.number(gpu_time, "gpu_time")
    if not cluster.strip():
        return reader.error("empty cluster")
    return reader.error("bad row")  # pragma: no cover - every check is above


def _read_philly(reader: _Reader) -> list[_Row]:
    """Validate every data row of a philly trace (header already read).

    The loop is a fast path that checks everything at once; a row that fails
    goes through :func:`_philly_error` for a precise message.
    """
    rows: list[_Row] = []
    append = rows.append
    seen: dict[str, float] = {}
    normal = Priority.NORMAL
    for row in reader.rows():
        try:
            stamp, duration_s, gpus_s, gpu_time_s, cluster = row
            submit = seen.get(stamp)
            if submit is None:
                submit = seen[stamp] = _timestamp(reader, stamp)
            duration = float(duration_s)
            gpus = int(gpus_s)
            gpu_time = float(gpu_time_s)
            cluster = cluster.strip()
            if not (0.0 < duration < math.inf and gpus >= 1 and cluster):
                raise ValueError
            if gpu_time - gpu_time != 0.0:  # NaN or infinite
                raise ValueError
        except ValueError:
            raise _philly_error(reader, row) from None
        append((submit, duration, gpus, f"p{len(rows)}", None, normal, cluster))
    return rows


def _read_models(reader: _Reader, header: list[str]) -> list[_Row]:
    """Validate every data row of a models trace (header already read)."""
    if "duration" not in header:
        raise reader.error("models header lacks a 'duration' column")
    width = len(header)
    i_duration = header.index("duration")
    i_priority = header.index("priority") if "priority" in header else None
    rows: list[_Row] = []
    first_line: dict[str, int] = {}
    for row in reader.rows():
        reader.width(row, width)
        job_id = row[0].strip()
        if not job_id:
            raise reader.error("empty job_id")
        if job_id in first_line:
            raise reader.error(
                f"duplicate job_id {_show(job_id)} (first on line {first_line[job_id]})"
            )
        first_line[job_id] = reader.line
        gpus = reader.gpus(row[1], "num_gpu")
        submit = reader.number(row[2], "submit_time") / 1000.0
        duration = reader.duration(row[i_duration], "duration") / 1000.0
        model = row[4].strip()
        if not model:
            raise reader.error("empty model_name")
        priority = Priority.NORMAL
        if i_priority is not None:
            value = row[i_priority].strip()
            found = _MODELS_PRIORITY.get(value)
            if found is None:
                raise reader.error(f"priority must be 0 or 1, got {_show(value)}")
            priority = found
        rows.append((submit, duration, gpus, job_id, model, priority, ""))
    return rows


def _read(path: str | Path, fmt: str | None) -> tuple[str, list[_Row]]:
    """Read and validate a whole trace; the format and its rows in file order."""
    if fmt is not None and fmt not in FORMATS:
        raise ValueError(f"unknown trace format {fmt!r}; known: {', '.join(FORMATS)}")
    reader = _Reader(path)
    header = reader.header()
    found = _detect(header)
    if found is None or (fmt is not None and found != fmt):
        want = _expected_headers()
        if fmt == "philly":
            want = f"expected the philly header {','.join(PHILLY_HEADER)!r}"
        elif fmt == "models":
            want = f"expected a models header starting {','.join(MODELS_HEADER_PREFIX)!r}"
        raise reader.error(f"unrecognised header {_show(','.join(header))}; {want}")
    rows = _read_philly(reader) if found == "philly" else _read_models(reader, header)
    if not rows:
        raise reader.error("no jobs after the header", reader.line + 1)
    return found, rows


def _describe_clusters(counts: dict[str, int]) -> str:
    """``"id (n jobs), ..."`` for error messages."""
    return ", ".join(f"{name} ({n} jobs)" for name, n in counts.items())


def _count_clusters(rows: list[_Row]) -> dict[str, int]:
    """Jobs per virtual cluster, most jobs first (ties by id)."""
    counts = Counter(row[6] for row in rows)
    return dict(sorted(counts.items(), key=lambda item: (-item[1], item[0])))


def load_trace(
    path: str | Path,
    *,
    fmt: str | None = None,
    virtual_cluster: str | None = None,
    limit: int | None = None,
    window: tuple[float, float] | None = None,
) -> list[TraceJob]:
    """Load a trace file as jobs sorted by submit time, the first at time 0.

    Args:
        path: The CSV file.
        fmt: ``"philly"`` or ``"models"``; ``None`` detects it from the header.
        virtual_cluster: Philly only: keep the jobs of this ``cluster`` id.
        limit: Keep at most this many jobs, the earliest by submit time
            (applied after ``window``).
        window: ``(start, end)`` in seconds after the earliest job of the trace
            (after the ``virtual_cluster`` filter): keep jobs submitted at
            ``start <= t < end``.

    Returns:
        The selected jobs, ordered by (submit time, file order), with submit
        times shifted so the first one is at 0. Empty when ``window`` or
        ``limit`` select nothing.

    Raises:
        TraceError: The file is empty, has an unknown header or a bad row, or
            ``virtual_cluster`` matches no job.
        ValueError: An argument is invalid (unknown ``fmt``, negative
            ``limit``, empty or reversed ``window``, ``virtual_cluster`` with
            a models trace).
        OSError: The file cannot be read.

    """
    if limit is not None and limit < 0:
        raise ValueError(f"limit must be >= 0, got {limit}")
    if window is not None:
        start, end = window
        if not start < end:
            raise ValueError(f"window start must be below its end, got {window}")
    found, rows = _read(path, fmt)
    if virtual_cluster is not None:
        if found != "philly":
            raise ValueError("virtual_cluster applies only to philly traces")
        selected = [row for row in rows if row[6] == virtual_cluster]
        if not selected:
            raise TraceError(
                path,
                None,
                f"no jobs in virtual cluster {virtual_cluster!r}; available: "
                + _describe_clusters(_count_clusters(rows)),
            )
        rows = selected
    rows.sort(key=itemgetter(0))  # stable: ties keep file order
    base = rows[0][0]
    if window is not None:
        low, high = base + window[0], base + window[1]
        rows = [row for row in rows if low <= row[0] < high]
    if limit is not None:
        rows = rows[:limit]
    if not rows:
        return []
    shift = rows[0][0]
    return [
        TraceJob(
            JobSpec(
                id=job_id,
                gpus=gpus,
                submit_time=submit - shift,
                priority=priority,
                profile=profile,
            ),
            duration,
        )
        for submit, duration, gpus, job_id, profile, priority, _ in rows
    ]


def virtual_clusters(path: str | Path) -> dict[str, int]:
    """Jobs per virtual cluster of a philly trace, most jobs first.

    Raises:
        TraceError: The file is not a valid philly trace.

    """
    _, rows = _read(path, "philly")
    return _count_clusters(rows)


def split_oversized(
    jobs: list[TraceJob], cluster: Cluster
) -> tuple[list[TraceJob], list[TraceJob]]:
    """Split jobs into those the cluster can ever run and those it cannot.

    A job is oversized when it asks for more GPUs than the whole cluster has;
    the simulator reports such jobs rather than dropping them silently. Both
    lists keep the input order.
    """
    total = cluster.total_gpus
    fits: list[TraceJob] = []
    oversized: list[TraceJob] = []
    for job in jobs:
        (oversized if job.spec.gpus > total else fits).append(job)
    return fits, oversized
