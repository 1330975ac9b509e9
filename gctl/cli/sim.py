"""``gctl sim``: replay a workload trace through the scheduler core."""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Annotated

import typer

from gctl.cli import complete, render
from gctl.cli.context import JsonOpt
from gctl.cli.parse import parse_options, parse_window
from gctl.limits import INT_MAX, PERIOD_MAX, TEXT_MAX, check_text, shown

app = typer.Typer(help="Replay workload traces through the scheduler (same code as the daemon).")


@app.command("run")
def run_cmd(
    trace: Annotated[
        Path, typer.Argument(help="Trace file (philly or models CSV, plain or gzip).")
    ],
    cluster: Annotated[
        str, typer.Option(help="NODESxGPUS[:TYPE-MEM] (e.g. 12x8, 4x8:A100-80GB) or a TOML file.")
    ] = "12x8",
    policy: Annotated[
        str, typer.Option(help="Policy to evaluate.", autocompletion=complete.policies)
    ] = "gandiva",
    compare: Annotated[
        str | None,
        typer.Option(
            help="Baseline policies run on the same jobs, comma-separated (e.g. fifo,las);"
            " '' for none.",
            autocompletion=complete.policies,
        ),
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
        bool,
        typer.Option(
            help="Plain Tiresias/Muri model: no locality, packing, overheads or GPU types."
        ),
    ] = False,
    locality: Annotated[bool, typer.Option(help="Model locality slow-down.")] = True,
    packing_effect: Annotated[bool, typer.Option(help="Model measured packed speeds.")] = True,
    overheads: Annotated[bool, typer.Option(help="Charge suspend/resume/migration.")] = True,
    elastic_speedup: Annotated[bool, typer.Option(help="Speed up grown jobs.")] = True,
    gpu_types: Annotated[
        bool, typer.Option(help="Model GPU types' speeds (K80 and P100 slower than V100).")
    ] = True,
    balance_batch: Annotated[
        bool,
        typer.Option(
            "--balance-batch/--equal-split",
            help="Split a job's batch over GPUs of different speeds to match them;"
            " --equal-split: split it equally, so the slowest GPU sets the pace.",
        ),
    ] = True,
    elastic_fraction: Annotated[
        float, typer.Option(min=0.0, max=1.0, help="Fraction of jobs made elastic (seeded).")
    ] = 0.0,
    opportunistic_fraction: Annotated[
        float,
        typer.Option(
            min=0.0, max=1.0, help="Fraction of jobs made opportunistic (TGS sharing, seeded)."
        ),
    ] = 0.0,
    datasets: Annotated[
        int,
        typer.Option(
            min=0,
            max=10_000,
            help="Give each job one of this many datasets, 1-500 GB, Zipf-popular (seeded);"
            " 0: none.",
        ),
    ] = 0,
    data_bandwidth: Annotated[
        float,
        typer.Option(min=0.001, max=1000.0, help="GB/s a node copies a dataset into its cache at."),
    ] = 1.0,
    data_affinity: Annotated[
        bool,
        typer.Option(help="Prefer nodes caching a job's datasets among equally good ones."),
    ] = True,
    cache_size: Annotated[
        float,
        typer.Option(
            min=0.0, max=1e6, metavar="GB", help="GB each node's dataset cache holds (LRU)."
        ),
    ] = 2000.0,
    tick: Annotated[
        float, typer.Option(min=1.0, max=PERIOD_MAX, help="Seconds between introspective passes.")
    ] = 60.0,
    seed: Annotated[
        int, typer.Option(min=0, max=INT_MAX, help="Seed for model and elastic draws.")
    ] = 0,
    per_job: Annotated[
        Path | None,
        typer.Option(
            "--per-job",
            metavar="FILE.csv",
            help="Also write one CSV row per job per policy (submit, start, end, JCT, ...).",
        ),
    ] = None,
    plot: Annotated[
        Path | None,
        typer.Option(
            "--plot",
            metavar="FILE.svg",
            help="Also draw each policy's JCT CDF and queue length over time (SVG).",
        ),
    ] = None,
    json_out: JsonOpt = False,
) -> None:
    """Simulate POLICY on TRACE and compare it with baselines, side by side."""
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
            gpu_types=gpu_types,
            balance=balance_batch,
        )
    )
    check_text(str(trace), "TRACE", limit=TEXT_MAX)
    baselines = _baselines(compare or "", policy)
    if per_job is not None:
        _check_output(per_job, "--per-job", trace)
    if plot is not None:
        _check_plot(plot, trace, per_job)
    request = SimRequest(
        trace=trace,
        cluster=cluster,
        policies=(policy, *baselines),
        policy_options=parse_options(option or []),
        perf=perf,
        tick=tick,
        seed=seed,
        elastic_fraction=elastic_fraction,
        opportunistic_fraction=opportunistic_fraction,
        virtual_cluster=virtual_cluster,
        limit=limit,
        window=parse_window(window) if window else None,
        datasets=datasets,
        data_bandwidth=data_bandwidth,
        data_affinity=data_affinity,
        cache_size=cache_size,
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
    if per_job is not None:
        from gctl.sim.runner import per_job_rows, write_per_job

        write_per_job(per_job, per_job_rows(report))
    if plot is not None:
        from gctl.sim.plot import report_svg
        from gctl.sim.runner import write_atomic

        write_atomic(plot, report_svg(report))
    if json_out:
        render.emit_json(report.to_dict())
    else:
        render.sim_report(report)


@app.command("train")
def train_cmd(
    ctx: typer.Context,
    policy: Annotated[str, typer.Argument(help="Learned policy to train (e.g. dl2).")],
    out: Annotated[
        Path, typer.Option("--out", metavar="MODEL", help="Where to write the trained model.")
    ],
    trace: Annotated[
        Path | None,
        typer.Argument(help="Trace to train on (philly or models CSV); omit with --from-store."),
    ] = None,
    from_store: Annotated[
        bool,
        typer.Option(
            "--from-store", help="Train on this site's completed jobs and nodes (the --db store)."
        ),
    ] = False,
    init: Annotated[
        Path | None,
        typer.Option("--init", metavar="MODEL", help="Continue training from this model."),
    ] = None,
    cluster: Annotated[
        str, typer.Option(help="NODESxGPUS[:TYPE-MEM] or a TOML file (not with --from-store).")
    ] = "12x8",
    option: Annotated[
        list[str] | None,
        typer.Option("--option", "-o", help="Trainer option KEY=VALUE (repeatable)."),
    ] = None,
    virtual_cluster: Annotated[
        str | None, typer.Option(help="philly.csv: train on one virtual cluster only.")
    ] = None,
    window: Annotated[str | None, typer.Option(help="START:END submit window, e.g. 0:55d.")] = None,
    elastic_fraction: Annotated[
        float, typer.Option(min=0.0, max=1.0, help="Fraction of jobs made elastic (seeded).")
    ] = 0.0,
    seed: Annotated[int, typer.Option(min=0, max=INT_MAX, help="Seed of every draw.")] = 0,
    log: Annotated[
        Path | None,
        typer.Option(metavar="FILE.json", help="Learning curve as JSON (default: beside --out)."),
    ] = None,
    plot: Annotated[
        Path | None,
        typer.Option(metavar="FILE.svg", help="Learning curve plot (default: beside --out)."),
    ] = None,
    json_out: JsonOpt = False,
) -> None:
    """Train a learned POLICY in the simulator on a trace or on this site's history."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from gctl.sim.cluster_spec import parse_cluster
    from gctl.sim.runner import prepare
    from gctl.sim.traces import load_trace
    from gctl.sim.training import TrainRequest, load_trainer

    trainer = load_trainer(policy)
    for path, name in ((out, "--out"), (log, "--log"), (plot, "--plot")):
        if path is not None:
            check_text(str(path), name, limit=TEXT_MAX)
            if not path.parent.is_dir():
                raise FileNotFoundError(errno.ENOENT, "no such directory", str(path.parent))
    if from_store == (trace is not None):
        raise typer.BadParameter("give a TRACE or --from-store, not both or neither")
    if from_store:
        from gctl.cli.context import store
        from gctl.services.history import history_workload

        nodes, loaded = history_workload(store(ctx).engine)
        source = "store"
        if not nodes.nodes:
            raise typer.BadParameter(
                "the store has no nodes to train on", param_hint="--from-store"
            )
    else:
        assert trace is not None
        check_text(str(trace), "TRACE", limit=TEXT_MAX)
        nodes = parse_cluster(cluster)
        loaded = load_trace(
            trace,
            virtual_cluster=virtual_cluster,
            window=parse_window(window) if window else None,
        )
        source = str(trace)
    jobs = prepare(loaded, seed, elastic_fraction)
    request = TrainRequest(
        tuple(jobs),
        nodes,
        source,
        out,
        seed=seed,
        options=parse_options(option or []),
        init=init,
        log=log,
        plot=plot,
    )
    console = render.stderr()
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[reward]}"),
        TimeElapsedColumn(),
        console=console,
        disable=json_out or not console.is_terminal,
    ) as bar:
        tasks: dict[str, int] = {}

        def progress(phase: str, done: int, total: int, reward: float | None) -> None:
            if phase not in tasks:
                tasks[phase] = int(bar.add_task(phase, total=total, reward=""))
            shown_reward = "" if reward is None else f"reward {reward:.3f}"
            bar.update(tasks[phase], completed=done, reward=shown_reward)  # type: ignore[arg-type]

        summary = trainer(request, progress)
    doc = {
        "model": str(summary.model),
        "log": str(summary.log),
        "plot": str(summary.plot),
        "jobs": len(jobs),
        "episodes": summary.episodes,
        "seconds": round(summary.seconds, 1),
        "figures": summary.figures,
    }
    if json_out:
        render.emit_json(doc)
    else:
        render.train_summary(doc)


def _baselines(compare: str, policy: str) -> tuple[str, ...]:
    """The ``--compare`` list as names: registered policies, distinct, none of them ``policy``.

    An empty value means no baseline. Anything else wrong is a usage error
    (exit 2), caught before any simulation starts.
    """
    from gctl.core.policy import available_policies

    check_text(compare, "--compare", limit=TEXT_MAX)
    if not compare.strip():
        return ()
    names = tuple(name.strip() for name in compare.split(","))
    known = available_policies()
    seen: set[str] = set()
    for name in names:
        if not name:
            raise typer.BadParameter(f"empty name in {shown(compare)}", param_hint="'--compare'")
        if name not in known:
            raise typer.BadParameter(
                f"unknown policy {shown(name)} (registered: {', '.join(known) or 'none'})",
                param_hint="'--compare'",
            )
        if name == policy:
            raise typer.BadParameter(
                f"{shown(name)} is the --policy itself; name a different baseline",
                param_hint="'--compare'",
            )
        if name in seen:
            raise typer.BadParameter(f"{shown(name)} is named twice", param_hint="'--compare'")
        seen.add(name)
    return names


def _check_plot(path: Path, trace: Path, per_job: Path | None) -> None:
    """Refuse a ``--plot`` path that is not an SVG file gctl can write, before simulating.

    A name not ending in .svg (PNG would need a rasteriser gctl does not
    ship) or naming the ``--per-job`` file is a usage error (exit 2); the
    rest is checked as for ``--per-job`` (:func:`_check_output`).
    """
    check_text(str(path), "--plot", limit=TEXT_MAX)
    suffix = path.suffix.lower()
    if suffix != ".svg":
        why = "PNG is not supported" if suffix == ".png" else "not an .svg file name"
        raise typer.BadParameter(f"{why}; give FILE.svg", param_hint="'--plot'")
    if per_job is not None and _same(path, per_job):
        raise typer.BadParameter("is the --per-job file", param_hint="'--plot'")
    _check_output(path, "--plot", trace)


def _same(a: Path, b: Path) -> bool:
    """Whether paths ``a`` and ``b`` name the same file (existing or not)."""
    return a.resolve() == b.resolve() or (a.exists() and b.exists() and a.samefile(b))


def _check_output(path: Path, option: str, trace: Path) -> None:
    """Refuse an output file ``path`` (of ``option``) that cannot be written, before simulating.

    The trace itself is a usage error (exit 2); a missing folder or a
    folder in place of the file is a file error (exit 1), as for the trace.
    """
    check_text(str(path), option, limit=TEXT_MAX)
    if _same(path, trace):
        raise typer.BadParameter("is the trace itself", param_hint=f"'{option}'")
    parent = path.parent
    if not parent.is_dir():
        raise FileNotFoundError(errno.ENOENT, "no such directory", str(parent))
    if path.is_dir():
        raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(path))
