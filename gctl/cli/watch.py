"""``gctl watch``: the live dashboard of node height, packing, jobs and migrations."""

from __future__ import annotations

from typing import Annotated

import typer

from gctl.cli.context import store
from gctl.limits import PERIOD_MAX


def watch(
    ctx: typer.Context,
    interval: Annotated[
        float,
        typer.Option("--interval", min=0.2, max=PERIOD_MAX, help="Seconds between refreshes."),
    ] = 2.0,
    readonly: Annotated[
        bool, typer.Option("--readonly", help="Only look: every action is disabled.")
    ] = False,
) -> None:
    """Dashboard: nodes with their height, each node's GPUs, jobs, and the events timeline.

    Keys: ? help, / filter, Enter details, l job output, g GPUs shown or
    hidden, s/r suspend/resume, m migrate, c cancel, d/u drain/undrain,
    q quit; a key acts on the job or node selected in the focused table.
    Works with or without the daemon running; the database is chosen with
    gctl's --db option.
    """
    from gctl.watch.app import WatchApp  # textual loads only for this command

    WatchApp(store(ctx), interval=interval, readonly=readonly).run()
