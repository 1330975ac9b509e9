"""All CLI output is rendered here: rich tables for people, one JSON document for machines.

rich is imported by the functions that draw with it, so that ``gctl queue``
(plain columns) and JSON output start without it.
"""

from __future__ import annotations

import codecs
import itertools
import json
import re
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from datetime import datetime
from typing import TYPE_CHECKING, Any

import orjson

from gctl.limits import FORMAT_WIDTH_MAX
from gctl.slurmtime import format_time_limit
from gctl.textsafe import inert

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table

    from gctl.daemon.intents import Outcome
    from gctl.services.acct import Total, Usage
    from gctl.services.datasets import DatasetView
    from gctl.services.defrag import Plan
    from gctl.services.events import EventView
    from gctl.services.jobs import JobDetail
    from gctl.services.nodes import NodeView
    from gctl.services.probe import ProbeView
    from gctl.services.queue import JobColumns
    from gctl.services.telemetry import NodeSample
    from gctl.services.why import Why
    from gctl.sim.runner import SimReport

_ROWS: tuple[tuple[str, str, str], ...] = (
    ("avg_jct", "avg JCT", "duration"),
    ("median_jct", "median JCT", "duration"),
    ("p95_jct", "p95 JCT", "duration"),
    ("p99_jct", "p99 JCT", "duration"),
    ("makespan", "makespan", "duration"),
    ("avg_queueing_delay", "avg queueing delay", "duration"),
    ("avg_time_to_first_progress", "avg time to first progress", "duration"),
    ("gpu_utilisation", "GPU utilisation", "percent"),
)
_COUNTS = (
    "places",
    "suspends",
    "resumes",
    "packs",
    "unpacks",
    "migrations",
    "grows",
    "shrinks",
    "requeues",
)


def stdout() -> Console:
    """Console for results; tables are not squeezed to 80 columns when piped."""
    from rich.console import Console

    return Console(width=None if sys.stdout.isatty() else 250)


def stderr() -> Console:
    """Console for progress and errors, so stdout stays clean for pipes."""
    from rich.console import Console

    return Console(stderr=True)


def _plain_table(*headers: str) -> Table:
    """A borderless table with these column headers, for listings; rows go in by :func:`_row`."""
    from rich.table import Table

    table = Table(box=None, pad_edge=False)
    for header in headers:
        table.add_column(header)
    return table


def _row(table: Table, *cells: str) -> None:
    """Add a row of text cells, user text in them made inert."""
    table.add_row(*map(inert, cells))


def _show(table: Table) -> None:
    """Print a table to stdout; its cells are plain text, never rich markup."""
    stdout().print(table, markup=False)


def emit_json(doc: Any) -> None:
    """Write one JSON document to stdout; datetimes become ISO 8601 strings.

    orjson, not the standard library: a 100,000-job queue encodes in 0.04 s
    instead of 0.26 s, and it writes aware datetimes itself, which is a
    further 0.2 s less than formatting each timestamp in Python. Its UTF-8
    goes to stdout's byte stream as it is, not decoded to be encoded again
    (a test's text buffer gets it decoded).
    """
    data = orjson.dumps(doc, option=orjson.OPT_APPEND_NEWLINE)
    out = sys.stdout
    if hasattr(out, "buffer"):
        out.flush()
        out.buffer.write(data)
    else:
        out.write(data.decode())


def raw(chunks: Iterable[bytes]) -> None:
    """Bytes a job wrote (``gctl logs``), to stdout unchanged and at once.

    Straight to stdout's byte stream, flushed per chunk so ``--follow``
    shows lines as they come; a text-only stdout (a test's) gets them
    decoded as UTF-8.
    """
    out = sys.stdout
    out.flush()
    binary = getattr(out, "buffer", None)
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    for chunk in chunks:
        if binary is None:
            out.write(decoder.decode(chunk))
        else:
            binary.write(chunk)
            binary.flush()


def status(message: str) -> None:
    """A line about what a long-running command is doing, on stderr (stdout stays for data)."""
    print(inert(message), file=sys.stderr, flush=True)


def error(message: str) -> None:
    """One-line error on stderr, never wrapped to the terminal width so scripts can grep it.

    Line breaks become spaces; any other control character in it (a name
    the user gave, a host's answer) is shown escaped.
    """
    one_line = " ".join(message.split())
    print(f"gctl: error: {inert(one_line)}", file=sys.stderr)


def fmt_duration(seconds: float) -> str:
    """Seconds as a short human duration (``3h12m``)."""
    s = round(seconds)
    days, s = divmod(s, 86400)
    hours, s = divmod(s, 3600)
    minutes, s = divmod(s, 60)
    if days:
        return f"{days}d{hours:02d}h"
    if hours:
        return f"{hours}h{minutes:02d}m"
    if minutes:
        return f"{minutes}m{s:02d}s"
    return f"{s}s"


def _fmt(value: float, kind: str) -> str:
    return f"{value:.1%}" if kind == "percent" else fmt_duration(value)


def _change(value: float | None) -> str:
    return "—" if value is None else f"{value:+.1%}"


def sim_report(report: SimReport) -> None:
    """Policies side by side, then the relative change of the first against each baseline."""
    from rich.table import Table
    from rich.text import Text

    results = report.results
    title = f"{report.trace} on {report.cluster} ({report.total_gpus} GPUs), {report.jobs} jobs"
    table = Table(title=Text(inert(title)))
    table.add_column("metric")
    for r in results:
        table.add_column(inert(r.policy), justify="right")
    for baseline in report.changes:
        table.add_column(inert(f"{results[0].policy} vs {baseline}"), justify="right")
    blank = [""] * len(report.changes)
    for key, label, kind in _ROWS:
        row = [label] + [_fmt(float(getattr(r.metrics, key)), kind) for r in results]
        row += [_change(changes[key]["change"]) for changes in report.changes.values()]
        table.add_row(*row)
    for key in _COUNTS:
        table.add_row(key, *[str(r.metrics.counts.get(key, 0)) for r in results], *blank)
    row = ["finished / unfinished"]
    row += [f"{r.metrics.finished} / {len(r.unfinished)}" for r in results]
    table.add_row(*row, *blank)
    table.add_row("simulated in", *[f"{r.wall_seconds:.1f}s" for r in results], *blank)
    _show(table)
    if results[0].classes:
        _show(_class_table(report))
    rejected = results[0].rejected
    if rejected:
        message(
            f"{len(rejected)} job(s) need more GPUs than the cluster has and were not run:"
            f" {', '.join(rejected[:10])}{' …' if len(rejected) > 10 else ''}"
        )


def _class_table(report: SimReport) -> Table:
    """Job times by class (production, opportunistic), policy by policy."""
    from rich.table import Table

    table = Table(title="by job class")
    table.add_column("metric")
    for r in report.results:
        for cls in r.classes:
            table.add_column(inert(f"{r.policy} {cls}"), justify="right")
    every = [m for r in report.results for m in r.classes.values()]
    for key, label, kind in _ROWS[:4]:
        table.add_row(label, *[_fmt(float(getattr(m, key)), kind) for m in every])
    done = [f"{m.finished} / {m.jobs}" for m in every]
    table.add_row("finished / jobs", *done)
    return table


def train_summary(doc: dict[str, Any]) -> None:
    """What a training run wrote, and its final figures, one per line."""
    out = stdout()
    out.print(
        f"model {inert(doc['model'])} trained on {doc['jobs']} jobs"
        f" ({doc['episodes']} episodes, {fmt_duration(doc['seconds'])})",
        markup=False,
    )
    out.print(f"learning curve {inert(doc['log'])} and {inert(doc['plot'])}", markup=False)
    for name, value in doc["figures"].items():
        out.print(f"{inert(name)}: {value:.4g}", markup=False)


def message(text: str) -> None:
    """A line for people on stdout, user text in it made inert (every line but tables' and JSON)."""
    print(inert(text))


def _when(at: float | None) -> str:
    """Epoch seconds as local time, the way squeue prints times (to the second)."""
    return datetime.fromtimestamp(int(at)).isoformat() if at is not None else "-"


def node_table(nodes: list[NodeView]) -> None:
    """``gctl node ls``: one row per node, sinfo-like."""
    table = _plain_table("NODE", "STATE", "GPUS", "HEIGHT", "AFF", "GPU KINDS", "HOST")
    for n in nodes:
        emulated = " (emulated)" if n.emulated else ""
        _row(
            table,
            n.name,
            n.state_flag,
            f"{n.gpus_used}/{n.gpus_total}",
            f"{n.height:.2f}",
            str(n.affinity),
            n.gpu_kinds + emulated,
            f"{n.host}:{n.port}",
        )
    _show(table)


def probe_table(views: list[ProbeView]) -> None:
    """``gctl node probe``: who answered, with what engine and GPUs, or why not."""
    table = _plain_table("NODE", "STATE", "GPUS", "SOURCE", "DOCKER", "TIME", "ERROR")
    for v in views:
        _row(
            table,
            v.node.name,
            v.node.state_flag,
            v.node.gpu_kinds,
            v.source,
            v.docker_version or "-",
            f"{v.seconds:.2f}s" if v.responding else "-",
            v.error or "",
        )
    _show(table)


def top(samples: list[NodeSample]) -> None:
    """``gctl node top``: a row per GPU, then a row per job, nvitop-style."""
    gpus = _plain_table("NODE", "GPU", "MODEL", "UTIL", "MEMORY", "JOBS")
    jobs = _plain_table("JOBID", "NODE", "GPUS", "STATUS", "UTIL", "MEMORY", "CONTAINER")
    for s in samples:
        if s.error:
            _row(gpus, s.node, "-", "not responding", "-", "-", s.error)
            continue
        for g in s.gpus:
            mark = " (emulated)" if g.emulated else ""
            used = "-" if g.memory_used_mb is None else str(g.memory_used_mb)
            _row(
                gpus,
                s.node,
                str(g.index),
                g.model + mark,
                _percent(g.util_percent),
                f"{used}/{g.memory_total_mb} MiB",
                ",".join(map(str, g.jobs)) or "-",
            )
        for j in s.jobs:
            mark = " (emulated)" if j.emulated else ""
            _row(
                jobs,
                str(j.job_id),
                s.node,
                ",".join(map(str, j.gpus)),
                j.status,
                _percent(j.util_percent) + mark,
                "-" if j.memory_mb is None else f"{j.memory_mb} MiB",
                j.container,
            )
    _show(gpus)
    if jobs.row_count:
        message("")
        _show(jobs)


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}%"


def defrag_plan(plan: Plan, *, dry_run: bool) -> None:
    """``gctl defrag``: the moves, what they gain, and whether they were handed on."""
    if not plan.moves:
        message("nothing to defragment")
        return
    table = _plain_table("JOBID", "FROM", "TO", "WHY")
    for m in plan.moves:
        _row(table, str(m.job_id), m.src, m.dst, m.reason)
    _show(table)
    message(
        f"whole nodes free: {plan.free_nodes_before} -> {plan.free_nodes_after};"
        f" largest free block: {plan.largest_free_before} -> {plan.largest_free_after} GPUs"
    )
    if dry_run:
        message("dry run: nothing recorded")
    else:
        message(f"{len(plan.moves)} migration(s) recorded for the daemon")


def reasons_table(nodes: list[NodeView]) -> None:
    """``gctl node ls -R``: why nodes are drained or down, like ``sinfo -R``."""
    table = _plain_table("REASON", "USER", "TIMESTAMP", "STATE", "NODE")
    for n in nodes:
        if n.reason:
            _row(table, n.reason, n.reason_user or "-", _when(n.reason_time), n.state, n.name)
    _show(table)


def size(n: int) -> str:
    """Bytes for people: ``1.2 GB`` (powers of 1000, as ``df -H``)."""
    units = ("B", "kB", "MB", "GB", "TB")
    value, i = float(n), 0
    while value >= 1000 and i < len(units) - 1:
        value, i = value / 1000, i + 1
    return f"{n} B" if i == 0 else f"{value:.1f} {units[i]}"


def _dataset_copy(c: dict[str, Any]) -> str:
    """A job's dataset copy for ``show job``: under way, or done and how fast."""
    what = f"{size(int(c.get('bytes') or 0))} to {c.get('node')} from {c.get('source')}"
    if c.get("state") == "copying":
        return f"Dataset={c.get('dataset')} copying {what}"
    return f"Dataset={c.get('dataset')} copied {what} in {float(c.get('seconds') or 0):.1f} s"


def dataset_table(views: list[DatasetView]) -> None:
    """``gctl dataset ls``."""
    table = _plain_table("NAME", "SIZE", "FILES", "SOURCE", "DIGEST")
    for v in views:
        _row(table, v.name, size(v.bytes), str(v.files), v.source, v.digest[:16])
    _show(table)


def dataset_detail(v: DatasetView) -> None:
    """``gctl dataset show``: the dataset, and the nodes holding a copy."""
    message(f"DatasetName={v.name} Source={v.source} Size={size(v.bytes)} Files={v.files}")
    message(f"   Digest={v.digest} AddedBy={v.user} Added={_when(v.created_at)}")
    message(f"   CachedOn={','.join(v.cached or ()) or '(none)'}")


def node_detail(n: NodeView) -> None:
    """``gctl node show``: the node, then its GPUs and the jobs on them."""
    message(
        f"NodeName={n.name} State={n.state_flag} Host={n.host}:{n.port} User={n.ssh_user or '-'}"
    )
    message(f"   GPUs={n.gpus_used}/{n.gpus_total} Height={n.height:.2f} Affinity={n.affinity}")
    if n.reason:
        message(f"   Reason={n.reason} [{n.reason_user}@{_when(n.reason_time)}]")
    message(f"   HostKey={n.host_key_fingerprint or '-'} LastSeen={_when(n.last_seen)}")
    message(f"   DockerHost={n.docker_host or 'default'} WorkDir={n.work_dir}")
    size = f"{n.cache_size_mb} MiB" if n.cache_size_mb is not None else "disk"
    message(f"   CacheDir={n.cache_dir} CacheSize={size}")
    if n.last_error:
        message(f"   LastError={n.last_error}")
    table = _plain_table("GPU", "MODEL", "MEMORY", "SOCKET", "PCIE", "UUID", "JOBS")
    for g in n.gpus:
        model = g.model + (" (emulated)" if g.emulated else "")
        jobs = ",".join(map(str, g.jobs)) or "-"
        _row(
            table,
            str(g.index),
            model,
            f"{g.memory_mb} MiB",
            str(g.socket),
            str(g.pcie_switch),
            g.uuid or "-",
            jobs,
        )
    _show(table)


QUEUE_FORMAT = "%.8i %.8p %.12j %.10u %.2t %.10M %.4b %R"
"""The default ``gctl queue`` layout: squeue's, with %b for GPUs and %p (priority) where squeue
has its partition."""
QUEUE_LONG = "%.8i %.8p %.12j %.10u %.10T %.10M %.10l %.4b %.6D %R"
"""``gctl queue -l``: squeue's long layout, likewise."""

_FIELD = re.compile(r"%(\.?)([0-9]*)([a-zA-Z%])")
_ROWS_PER_WRITE = 1000
"""Rows ``gctl queue`` writes at a time: memory stays bounded however wide a row is."""


def _elapsed(start: float, end: float) -> str:
    s = int(end - start)
    days, s = divmod(s, 86400)
    h, s = divmod(s, 3600)
    m, s = divmod(s, 60)
    core = f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"
    return f"{days}-{h:02d}:{m:02d}:{s:02d}" if days else core


def time_used(start: float | None, end: float | None, now: float) -> str:
    """Time used as squeue's ``%M`` shows it (up to ``end`` if it ended; ``0:00``: never ran)."""
    return "0:00" if start is None else _elapsed(start, end or now)


def _reason_or_nodes(state: str, reason: str | None, nodes: tuple[str, ...]) -> str:
    if nodes and state != "PENDING":
        return ",".join(nodes)
    return f"({reason or 'None'})"


_Column = Callable[["JobColumns", float], list[str]]


def _inert(texts: Iterable[str]) -> list[str]:
    """A column of stored text made inert (before it is padded or cut to its width)."""
    return list(map(inert, texts))


# One function per field code, each building the whole column at once from
# the job columns: 100,000 jobs render in a tenth of a second this way.
_COLUMNS: dict[str, _Column] = {
    "i": lambda jobs, now: list(map(str, jobs.id)),
    "j": lambda jobs, now: _inert(jobs.name),
    "u": lambda jobs, now: _inert(jobs.user),
    "t": lambda jobs, now: jobs.code,
    "T": lambda jobs, now: _inert(jobs.state),
    "M": lambda jobs, now: [
        time_used(start, end, now)
        for start, end in zip(jobs.start_time, jobs.end_time, strict=True)
    ],
    "b": lambda jobs, now: list(map(str, jobs.gpus)),
    "p": lambda jobs, now: _inert(jobs.priority),
    "q": lambda jobs, now: _inert(jobs.job_class),
    "l": lambda jobs, now: list(map(format_time_limit, jobs.time_limit)),
    "L": lambda jobs, now: [
        _time_left(limit, start, end or now)
        for limit, start, end in zip(jobs.time_limit, jobs.start_time, jobs.end_time, strict=True)
    ],
    "D": lambda jobs, now: [str(len(n)) for n in jobs.nodes],
    "e": lambda jobs, now: list(map(_when, jobs.end_time)),
    "N": lambda jobs, now: _inert(map(",".join, jobs.nodes)),
    "R": lambda jobs, now: _inert(map(_reason_or_nodes, jobs.state, jobs.reason, jobs.nodes)),
    "r": lambda jobs, now: _inert(reason or "None" for reason in jobs.reason),
    "V": lambda jobs, now: list(map(_when, jobs.submit_time)),
    "S": lambda jobs, now: list(map(_when, jobs.start_time)),
}


QUEUE_CODES = "ijutTMbpqlLDNRrVSe"
_HEADERS = {
    "i": "JOBID",
    "j": "NAME",
    "u": "USER",
    "t": "ST",
    "T": "STATE",
    "M": "TIME",
    "b": "GPUS",
    "p": "PRIORITY",
    "q": "CLASS",
    "l": "TIME_LIMIT",
    "L": "TIME_LEFT",
    "D": "NODES",
    "e": "END_TIME",
    "N": "NODELIST",
    "R": "NODELIST(REASON)",
    "r": "REASON",
    "V": "SUBMIT_TIME",
    "S": "START_TIME",
}
_NOT_GCTLS = {
    "P": "%P is Slurm's partition, and gctl has none (%p is the priority, %q the job class)",
}
"""squeue field codes gctl leaves alone because it has nothing that means the same."""


def _time_left(limit: float | None, start: float | None, until: float) -> str:
    """Time left (squeue's %L): the limit less the time since the job started, or UNLIMITED."""
    if limit is None:
        return "UNLIMITED"
    used = 0.0 if start is None else until - start
    return format_time_limit(max(limit - used, 0.0))


def check_queue_format(fmt: str) -> None:
    """Refuse a ``--format`` with a field code ``gctl queue`` does not know, or too wide."""
    _check_format(fmt, QUEUE_CODES, _NOT_GCTLS)


def _check_format(fmt: str, known: str, not_gctls: dict[str, str]) -> None:
    """Refuse a squeue/sinfo-style format with a field code not in ``known``, or too wide.

    The format, and the width of each field, are at most
    :data:`~gctl.limits.FORMAT_WIDTH_MAX` characters.
    """
    if len(fmt) > FORMAT_WIDTH_MAX:
        raise ValueError(f"--format: more than {FORMAT_WIDTH_MAX} characters")
    for m in _FIELD.finditer(fmt):
        if m.group(3) in not_gctls:
            raise ValueError(f"--format: {not_gctls[m.group(3)]}")
        if m.group(3) not in known + "%":
            raise ValueError(
                f"--format: unknown field %{inert(m.group(3))} (known: "
                + " ".join(f"%{c}" for c in known)
                + ")"
            )
        if m.group(2) and int(m.group(2)) > FORMAT_WIDTH_MAX:
            raise ValueError(
                f"--format: %{m.group(1)}{m.group(2)}{m.group(3)} is wider than"
                f" {FORMAT_WIDTH_MAX} characters"
            )


_LONG_STATES = {
    "idle": "idle",
    "mix": "mixed",
    "alloc": "allocated",
    "drng": "draining",
    "drain": "drained",
    "down": "down",
}
"""Node states as ``sinfo``'s %T writes them."""
_NODE_FIELDS: dict[str, tuple[str, Callable[[NodeView], str]]] = {
    "N": ("NODELIST", lambda n: n.name),
    "n": ("HOSTNAMES", lambda n: n.host),
    "o": ("NODE_ADDR", lambda n: f"{n.host}:{n.port}"),
    "t": ("STATE", lambda n: n.state_flag),
    "T": ("STATE", lambda n: _LONG_STATES.get(n.state, n.state) + n.state_flag[len(n.state) :]),
    "G": ("GRES", lambda n: n.gpu_kinds + (" (emulated)" if n.emulated else "")),
    "b": ("GPUS", lambda n: f"{n.gpus_used}/{n.gpus_total}"),
    "E": ("REASON", lambda n: n.reason or "none"),
    "U": ("USER", lambda n: n.reason_user or "-"),
    "H": ("TIMESTAMP", lambda n: _when(n.reason_time)),
}
"""``gctl node ls -o`` field codes: sinfo's, with %b for GPUs used/total."""
NODE_CODES = "".join(_NODE_FIELDS)


def check_node_format(fmt: str) -> None:
    """Refuse a ``node ls --format`` with a field code it does not know, or too wide."""
    _check_format(fmt, NODE_CODES, {"P": "%P is Slurm's partition, and gctl has none"})


def node_lines(nodes: list[NodeView], fmt: str, *, header: bool) -> None:
    """``gctl node ls -o``: a line per node laid out by a sinfo-style format."""
    template, codes = _queue_template(fmt)
    if header:
        message((template % tuple(_NODE_FIELDS[c][0] for c in codes)).rstrip())
    for n in nodes:
        message((template % tuple(inert(_NODE_FIELDS[c][1](n)) for c in codes)).rstrip())


def queue(jobs: JobColumns, fmt: str, *, header: bool) -> None:
    """``gctl queue`` as plain columns, laid out by a squeue-style ``--format``.

    ``%.10i`` right-aligns in 10 columns, ``%10i`` left-aligns; without a
    width the value is printed as is. The format becomes one printf-style
    template filled row by row from whole columns, so 100,000 jobs print in
    a fraction of a second.
    """
    template, codes = _queue_template(fmt)
    now = time.time()
    columns = {c: _COLUMNS[c](jobs, now) for c in dict.fromkeys(codes)}
    if header:
        sys.stdout.write((template % tuple(_HEADERS[c] for c in codes)).rstrip() + "\n")
    rows: Iterator[tuple[str, ...]] = iter(
        zip(*(columns[c] for c in codes), strict=True) if codes else [()] * len(jobs)
    )
    while chunk := list(itertools.islice(rows, _ROWS_PER_WRITE)):
        sys.stdout.write("\n".join([(template % row).rstrip() for row in chunk]) + "\n")


def _queue_template(fmt: str) -> tuple[str, list[str]]:
    """A squeue ``--format`` as a printf-style template of strings and the field codes it takes."""
    out: list[str] = []
    codes: list[str] = []
    pos = 0
    for m in _FIELD.finditer(fmt):
        out.append(inert(fmt[pos : m.start()]).replace("%", "%%"))
        pos = m.end()
        right, width, code = m.groups()
        if code == "%":
            out.append("%%")
            continue
        codes.append(code)
        # "%8.8s" pads to 8 and cuts at 8, as squeue does with %.8i.
        out.append(f"%{'' if right else '-'}{width}.{width}s" if width else "%s")
    out.append(inert(fmt[pos:]).replace("%", "%%"))
    return "".join(out), codes


_MECHANISM_WORDS = {
    "checkpoint": "uses the job SDK: frozen to take turns, checkpointed to move or suspend",
    "freeze": "no job SDK seen: only frozen in place (docker pause), never moved",
}


def outcomes(done: list[Outcome] | None, *, recorded: bool) -> None:
    """What became of intents carried out by the command itself (None: the daemon has them)."""
    if not recorded:
        return
    if done is None:
        message("a running daemon carries the moves out (see gctl events)")
        return
    message("no daemon runs; carried out here:")
    for o in done:
        message(f"   {o.kind} of job {o.job_id}: {o.status}: {o.result}")


def _progress(p: dict[str, Any]) -> str:
    """The latest profile sample as ``Progress=...`` with its GPU figures and age."""
    if p["estimated"]:
        rate = f"{p['rate']:.2f} (estimated from GPU utilisation: no job SDK seen)"
    else:
        rate = f"{p['rate']:.3g} mini-batches/s"
    gpu = f"GPUUtil={p['gpu_util'] * 100:.0f}% GPUMem={p['memory_mb']}MiB"
    return f"Progress={rate} {gpu}{' (emulated)' if p['emulated'] else ''} At={_when(p['at'])}"


def _throttle(t: dict[str, Any]) -> str:
    """``show job``'s line on an opportunistic job's rate control (TGS), as last recorded."""
    ref, rate = t.get("reference"), t.get("rate")
    kept = f" ({rate / ref:.0%})" if ref and rate is not None else ""
    speeds = f" ProductionRate={rate:.3g} R={ref:.3g}{kept}" if ref and rate is not None else ""
    return f"Throttle=beta {t['beta']:.3f} ({t['phase']}) BesideJob={t['host']}{speeds}"


def _interference(i: dict[str, Any]) -> str:
    """``show job``'s line on a packed job's measured slow-down beside its partner."""
    emulated = " (emulated)" if i["emulated"] else ""
    return (
        f"Interference={i['slowdown']:.2f}x BesideJob={i['partner']} GPU={i['gpu_type']}"
        f" (measured){emulated} At={_when(i['at'])}"
    )


def _split(sp: dict[str, Any]) -> str:
    """``show job``'s line on the batch split gctl last gave a data-parallel job."""
    local = ",".join(str(b) for b in sp["local"] or ())
    what = "profiling, then" if sp["profile"] else "balanced"
    return f"BatchSplit={local} ({what}) Version={sp['version']} At={_when(sp['at'])}"


def job_detail(d: JobDetail) -> None:
    """``gctl show job``: scontrol-style key=value lines, then history."""
    v = d.view
    message(f"JobId={v.id} JobName={v.name} UserId={v.user}")
    message(f"   JobState={v.state} Reason={v.reason or 'None'} Held={'yes' if v.held else 'no'}")
    message(f"   Priority={v.priority} GPUs={v.gpus} Nodes={','.join(v.nodes) or '(none)'}")
    message(f"   SubmitTime={_when(v.submit_time)} StartTime={_when(v.start_time)}")
    rt = d.runtime
    limit = format_time_limit(d.spec["time_limit"])
    message(f"   RunTime={format_time_limit(rt['run_time'])} TimeLimit={limit}")
    how = _MECHANISM_WORDS.get(rt["mechanism"], "not started yet")
    message(f"   Mechanism={rt['mechanism'] or '(none)'} ({how})")
    message(f"   Attempt={rt['attempt']} Restarts={rt['restarts']}")
    if rt["progress"]:
        message(f"   {_progress(rt['progress'])}")
    if rt.get("throttle"):
        message(f"   {_throttle(rt['throttle'])}")
    for copy in rt.get("datasets") or ():
        message(f"   {_dataset_copy(copy)}")
    if rt.get("split"):
        message(f"   {_split(rt['split'])}")
    if rt.get("interference"):
        message(f"   {_interference(rt['interference'])}")
    if rt["operation"]:
        op = rt["operation"]
        message(f"   Operation={op['kind']} in progress: {op['reason']}")
    spec = d.spec
    message(f"   Image={spec['image']}")
    message(f"   Command={json.dumps(spec['command'])}")
    for key in ("env", "mounts", "class", "elastic", "gpu_mem_mb", "datasets", "profile"):
        if spec[key]:
            message(f"   {key}={json.dumps(spec[key])}")
    for node, gpu, mode in d.allocations:
        message(f"   GPU {node}:{gpu} {mode}")
    for i, kind, status in d.intents:
        message(f"   Intent {i}: {kind} ({status})")
    message("History:")
    for at, state, why in d.history:
        message(f"   {_when(at)} {state} {why or ''}".rstrip())


def events_table(rows: list[EventView]) -> None:
    """``gctl events``: the log, oldest first."""
    table = _plain_table("TIME", "USER", "KIND", "JOB", "NODE", "WHAT")
    for e in rows:
        _row(
            table,
            _when(e.at),
            e.user,
            e.kind,
            str(e.job_id) if e.job_id is not None else "-",
            e.node or "-",
            e.message,
        )
    _show(table)


def event_lines(rows: list[EventView], *, json_lines: bool) -> None:
    """Events as they come (``gctl events --follow``): a line each, flushed at once.

    ``json_lines``: one JSON object per line (JSON Lines), since a stream
    never ends to close one document.
    """
    for e in rows:
        if json_lines:
            sys.stdout.write(orjson.dumps(e.to_dict()).decode() + "\n")
        else:
            job = str(e.job_id) if e.job_id is not None else "-"
            message(f"{_when(e.at)}  {e.user}  {e.kind:<13} {job:>6}  {e.node or '-'}  {e.message}")
    sys.stdout.flush()


MECHANISMS = {
    "freeze": "freeze: docker pause, keeps GPU memory",
    "checkpoint": "checkpoint: checkpointed and exited, GPU memory freed",
}
"""How each suspend mechanism treats the job, in the words ``gctl why`` uses."""


def why(w: Why) -> None:
    """``gctl why``: the answer on the first line, then what is under way and recent decisions."""
    message(_why_answer(w))
    if not w.daemon and (w.state == "PENDING" or w.pending_intents):
        from gctl.daemon import NO_DAEMON  # only here: completion must not load the daemon

        message(f"note: {NO_DAEMON}")
    if w.operation:
        message(f"operation in progress: {_operation(w.operation)}")
    if w.pending_intents:
        message("waiting for the daemon:")
        for i in w.pending_intents:
            args = "".join(f" {k}={v}" for k, v in i.args.items() if v not in (None, False, ""))
            message(f"   {i.kind}{args} asked by {i.user} at {_when(i.created_at)} (intent {i.id})")
    if w.decisions:
        message("recent decisions:")
        table = _plain_table("TIME", "KIND", "USER", "WHAT")
        for d in w.decisions:
            _row(table, _when(d.at), d.kind, d.user, d.message)
        _show(table)


def _why_answer(w: Why) -> str:
    """One line: the state, how it holds its GPUs and where, since when, and why."""
    notes = ["held"] if w.held else []
    if w.suspended_by:
        notes.append(MECHANISMS.get(w.suspended_by, w.suspended_by))
    if w.exit_code is not None:
        notes.append(f"exit code {w.exit_code}")
    text = f"job {w.job_id} is {w.state}" + (f" ({'; '.join(notes)})" if notes else "")
    shared = sorted({g.mode for g in w.gpus} - {"exclusive"})
    if shared:
        text += " " + "/".join(shared)
        if w.shared_with:
            jobs = "jobs" if len(w.shared_with) > 1 else "job"
            text += f" with {jobs} {', '.join(map(str, w.shared_with))}"
    if w.gpus:
        text += f" on {_gpu_list((g.node, g.index) for g in w.gpus)}"
    if w.moved:
        how = "moving from {} since {}" if w.operation else "moved from {} at {}"
        text += f" ({how.format(w.moved.src, _when(w.moved.at))})"
    if w.since is not None and w.state not in ("PENDING", "RUNNING"):
        text += f" since {_when(w.since)}"
    if w.reason:
        return f"{text}: {w.reason}"
    return f"{text}: no reason recorded yet" if w.state == "PENDING" else text


def _operation(op: dict[str, Any]) -> str:
    """The daemon's unfinished operation: its kind, where to, and why."""
    text = str(op.get("kind", "operation"))
    if op.get("dst"):
        text += " to " + _gpu_list((str(node), int(index)) for node, index in op["dst"])
    return f"{text} ({op['reason']})" if op.get("reason") else text


def _gpu_list(gpus: Iterable[tuple[str, int]]) -> str:
    """GPUs as ``h1:0,1 h2:3``, in the order given."""
    by_node: dict[str, list[str]] = {}
    for node, index in gpus:
        by_node.setdefault(node, []).append(str(index))
    return " ".join(f"{node}:{','.join(indices)}" for node, indices in by_node.items())


def _columns(headers: tuple[str, ...], columns: list[list[str]], right: frozenset[int]) -> None:
    """Plain columns under ``headers``, as wide as their widest cell (``right``: aligned right).

    Filled row by row from whole columns of already inert text, a chunk of
    rows per write: 100,000 rows print in a fraction of a second.
    """
    widths = [
        max(len(h), max(map(len, col), default=0)) for h, col in zip(headers, columns, strict=True)
    ]
    template = "  ".join(f"%{'' if i in right else '-'}{w}s" for i, w in enumerate(widths))
    sys.stdout.write((template % headers).rstrip() + "\n")
    rows = iter(zip(*columns, strict=True))
    while chunk := list(itertools.islice(rows, _ROWS_PER_WRITE)):
        sys.stdout.write("\n".join([(template % row).rstrip() for row in chunk]) + "\n")


def _csv(docs: Iterable[dict[str, Any]], keys: tuple[str, ...]) -> None:
    """Rows of JSON forms as CSV with a header of ``keys``: times ISO 8601, text inert."""
    import csv

    writer = csv.writer(sys.stdout, lineterminator="\n")
    writer.writerow(keys)
    for doc in docs:
        writer.writerow(
            [
                v.isoformat() if isinstance(v, datetime) else inert(v) if isinstance(v, str) else v
                for v in map(doc.get, keys)
            ]
        )


ACCT_CSV = (
    "id",
    "name",
    "user",
    "state",
    "exit_code",
    "submit_time",
    "start_time",
    "end_time",
    "elapsed_s",
    "gpus",
    "gpu_hours",
    "nodes",
)
"""``gctl acct --csv``'s columns: keys of the JSON form, in order."""


def acct(rows: list[Usage], *, csv: bool) -> None:
    """``gctl acct``: finished jobs as sacct lists them, oldest end first (or as CSV)."""
    if csv:
        _csv((r.to_dict() for r in rows), ACCT_CSV)
        return
    headers = (
        "JOBID",
        "NAME",
        "USER",
        "STATE",
        "EXITCODE",
        "START",
        "END",
        "ELAPSED",
        "GPUS",
        "GPU_HOURS",
        "NODELIST",
    )
    columns = [
        [str(r.id) for r in rows],
        _inert(r.name for r in rows),
        _inert(r.user for r in rows),
        [r.state for r in rows],
        ["-" if r.exit_code is None else str(r.exit_code) for r in rows],
        [_when(r.start_time) for r in rows],
        [_when(r.end_time) for r in rows],
        [_elapsed(0.0, r.elapsed) for r in rows],
        [str(r.gpus) for r in rows],
        [f"{r.gpu_hours:.2f}" for r in rows],
        _inert(r.nodes or "(none)" for r in rows),
    ]
    _columns(headers, columns, frozenset({0, 4, 7, 8, 9}))


def acct_summary(totals: list[Total], *, csv: bool) -> None:
    """``gctl acct --summary``: jobs and GPU-hours per user and month, as sreport (or as CSV)."""
    if csv:
        _csv((t.to_dict() for t in totals), ("user", "month", "jobs", "gpu_hours"))
        return
    columns = [
        _inert(t.user for t in totals),
        [t.month for t in totals],
        [str(t.jobs) for t in totals],
        [f"{t.gpu_hours:.2f}" for t in totals],
    ]
    _columns(("USER", "MONTH", "JOBS", "GPU_HOURS"), columns, frozenset({2, 3}))
