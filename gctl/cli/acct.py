"""``gctl acct``: finished jobs as Slurm's sacct lists them, and GPU-hours per user and month.

What each figure means is in :mod:`gctl.services.acct`. The store is read
as ``gctl queue`` reads it, without SQLAlchemy on a SQLite store. Input the
command cannot use (a time, a state, two output formats) is a usage error
(:class:`~gctl.cli.errors.UsageError`: one line, exit 2).
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Annotated

import typer

from gctl.cli import render
from gctl.cli.context import JsonOpt, target
from gctl.cli.errors import UsageError
from gctl.cli.parse import parse_names, parse_time
from gctl.gcpause import gc_paused
from gctl.limits import shown
from gctl.services import acct as accounting
from gctl.services.errors import ServiceError
from gctl.services.reader import reading


def acct(
    ctx: typer.Context,
    user: Annotated[
        str | None, typer.Option("--user", "-u", help="Only these users' jobs (comma list).")
    ] = None,
    all_users: Annotated[
        bool, typer.Option("--allusers", "-a", help="Every user's jobs (operators' default).")
    ] = False,
    starttime: Annotated[
        str,
        typer.Option(
            "--starttime",
            "-S",
            help="Jobs that ended at or after: 2026-11-01[T10:00], now-7days, 7d, today.",
        ),
    ] = "today",
    endtime: Annotated[
        str, typer.Option("--endtime", "-E", help="Jobs that ended before (same forms).")
    ] = "now",
    state: Annotated[
        str | None,
        typer.Option("--state", "-s", help="Only these finished states or codes, e.g. CD,F."),
    ] = None,
    summary: Annotated[
        bool,
        typer.Option("--summary", help="GPU-hours and jobs per user and UTC month (sreport)."),
    ] = False,
    csv_out: Annotated[bool, typer.Option("--csv", help="CSV on stdout, with a header.")] = False,
    json_out: JsonOpt = False,
) -> None:
    """Finished jobs with where they ran, GPUs, elapsed time and GPU-hours, like sacct.

    Jobs whose end falls in [--starttime, --endtime), by default from 00:00
    today until now; your own jobs unless you are an operator or give -a or
    -u. Elapsed time counts only running (not suspended) time, and GPU-hours
    each GPU held while the job ran.
    """
    if csv_out and json_out:
        raise UsageError("give --json or --csv, not both")
    now = time.time()
    start = parse_time(starttime, now, "--starttime")
    end = parse_time(endtime, now, "--endtime")
    if end <= start:
        raise UsageError(f"--endtime {shown(endtime)} is not after --starttime {shown(starttime)}")
    try:
        states = accounting.finished_states(state) if state else None
    except ServiceError as exc:
        raise UsageError(str(exc)) from None
    named = parse_names(user, "--user")
    # 100,000 jobs are a few hundred thousand objects, none in a cycle.
    with gc_paused():
        with reading(target(ctx)) as reader:
            me = accounting.caller(reader)
            users = accounting.whose(me, named, all_users=all_users)
            rows = accounting.finished(reader, start=start, end=end, users=users, states=states)
        window = {
            "start": datetime.fromtimestamp(start, UTC),
            "end": datetime.fromtimestamp(end, UTC),
        }
        if summary:
            totals = accounting.summary(rows)
            if json_out:
                render.emit_json({**window, "summary": [t.to_dict() for t in totals]})
            else:
                render.acct_summary(totals, csv=csv_out)
        elif json_out:
            render.emit_json({**window, "jobs": [r.to_dict() for r in rows]})
        else:
            render.acct(rows, csv=csv_out)
