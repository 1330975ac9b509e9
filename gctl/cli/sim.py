"""``gctl sim``: replay a workload trace through the scheduler core."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from gctl.cli import render
from gctl.cli.context import JsonOpt
from gctl.cli.errors import UsageError
from gctl.cli.parse import parse_options, parse_window
from gctl.limits import INT_MAX, PERIOD_MAX, TEXT_MAX, check_text

app = typer.Typer(help="Replay workload traces through the scheduler (same code as the daemon).")


@app.command("run")
def run_cmd(
    trace: Annotated[
        Path, typer.Argument(help="Trace file (philly or models CSV, plain or gzip).")
    ],
    cluster: Annotated[
        str, typer.Option(help="NODESxGPUS[:TYPE-MEM] (e.g. 12x8, 4x8:A100-80GB) or a TOML file.")
    ] = "12x8",
    policy: Annotated[str, typer.Option(help="Policy to evaluate.")] = "gandiva",
    compare: Annotated[
        str | None, typer.Option(help="Baseline policy run on the same jobs.")
    ] = "fifo",
    option: Annotated[
        list[str] | None,
        typer.Option("--option", "-o", help="Policy option KEY=VALUE (repeatable)."),
    ] = None,
    virtual_cluster: Annotated[
        str | None, typer.Option(help="philly.csv: replay one virtual cluster only.")
    ] = None,
    limit: Annotated[
        int | None, typer.Option(min=1, max=INT_MAX, help="Only the first N jobs.")
    ] = None,
    window: Annotated[
        str | None, typer.Option(help="START:END submit window, e.g. 0:7d or 2h:36h.")
    ] = None,
    plain: Annotated[
        bool, typer.Option(help="Plain Tiresias/Muri model: no locality, packing or overheads.")
    ] = False,
    locality: Annotated[bool, typer.Option(help="Model locality slow-down.")] = True,
    packing_effect: Annotated[bool, typer.Option(help="Model measured packed speeds.")] = True,
    overheads: Annotated[bool, typer.Option(help="Charge suspend/resume/migration.")] = True,
    elastic_speedup: Annotated[bool, typer.Option(help="Speed up grown jobs.")] = True,
    elastic_fraction: Annotated[
        float, typer.Option(min=0.0, max=1.0, help="Fraction of jobs made elastic (seeded).")
    ] = 0.0,
    tick: Annotated[
        float, typer.Option(min=1.0, max=PERIOD_MAX, help="Seconds between introspective passes.")
    ] = 60.0,
    seed: Annotated[
        int, typer.Option(min=0, max=INT_MAX, help="Seed for model and elastic draws.")
    ] = 0,
    json_out: JsonOpt = False,
) -> None:
    """Simulate POLICY on TRACE and compare it with a baseline, side by side."""
    # Imported here so store commands do not pay for the simulator at start-up.
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
    )

    from gctl.sim.perf import PerfConfig
    from gctl.sim.runner import SimRequest, run

    perf = (
        PerfConfig.plain()
        if plain
        else PerfConfig(
            locality=locality,
            packing=packing_effect,
            overheads=overheads,
            elastic=elastic_speedup,
        )
    )
    check_text(str(trace), "TRACE", limit=TEXT_MAX)
    if compare == policy:
        raise UsageError("--compare must name a different policy than --policy")
    request = SimRequest(
        trace=trace,
        cluster=cluster,
        policies=(policy, compare) if compare else (policy,),
        policy_options=parse_options(option or []),
        perf=perf,
        tick=tick,
        seed=seed,
        elastic_fraction=elastic_fraction,
        virtual_cluster=virtual_cluster,
        limit=limit,
        window=parse_window(window) if window else None,
    )
    console = render.stderr()
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=True,
        disable=json_out or not console.is_terminal,
    ) as bar:
        tasks: dict[str, int] = {}

        def progress(name: str, done: int, total: int) -> None:
            if name not in tasks:
                tasks[name] = int(bar.add_task(f"simulating {name}", total=total))
            bar.update(tasks[name], completed=done)  # type: ignore[arg-type]

        report = run(request, progress)
    if json_out:
        render.emit_json(report.to_dict())
    else:
        render.sim_report(report)
