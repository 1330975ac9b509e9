"""All CLI output is rendered here: rich tables for people, one JSON document for machines."""

from __future__ import annotations

import json
import sys
from typing import Any

from rich.console import Console
from rich.table import Table

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
_COUNTS = ("places", "suspends", "resumes", "packs", "unpacks", "migrations", "grows", "shrinks")


def stdout() -> Console:
    """Console for results."""
    return Console()


def stderr() -> Console:
    """Console for progress and errors, so stdout stays clean for pipes."""
    return Console(stderr=True)


def emit_json(doc: Any) -> None:
    """Write one JSON document to stdout."""
    json.dump(doc, sys.stdout, indent=2, sort_keys=False)
    sys.stdout.write("\n")


def error(message: str) -> None:
    """One-line error on stderr, never wrapped to the terminal width so scripts can grep it."""
    one_line = " ".join(message.split())
    print(f"gctl: error: {one_line}", file=sys.stderr)


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
    """Policies side by side, with the relative change of the first against the second."""
    out = stdout()
    results = report.results
    title = f"{report.trace} on {report.cluster} ({report.total_gpus} GPUs), {report.jobs} jobs"
    table = Table(title=title)
    table.add_column("metric")
    for r in results:
        table.add_column(r.policy, justify="right")
    if report.changes is not None:
        table.add_column(f"{results[0].policy} vs {results[1].policy}", justify="right")
    for key, label, kind in _ROWS:
        row = [label] + [_fmt(float(getattr(r.metrics, key)), kind) for r in results]
        if report.changes is not None:
            row.append(_change(report.changes[key]["change"]))
        table.add_row(*row)
    for key in _COUNTS:
        row = [key] + [str(r.metrics.counts.get(key, 0)) for r in results]
        if report.changes is not None:
            row.append("")
        table.add_row(*row)
    row = ["finished / unfinished"]
    row += [f"{r.metrics.finished} / {len(r.unfinished)}" for r in results]
    table.add_row(*row, *([""] if report.changes is not None else []))
    table.add_row(
        "simulated in",
        *[f"{r.wall_seconds:.1f}s" for r in results],
        *([""] if report.changes is not None else []),
    )
    out.print(table)
    rejected = results[0].rejected
    if rejected:
        out.print(
            f"{len(rejected)} job(s) need more GPUs than the cluster has and were not run:"
            f" {', '.join(rejected[:10])}{' …' if len(rejected) > 10 else ''}"
        )
