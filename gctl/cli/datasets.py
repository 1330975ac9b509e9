"""``gctl dataset``: name datasets on the nodes, see where they are cached, warm caches ahead.

Each command imports the dataset service, which loads the ORM and SSH, when it runs.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Annotated

import typer

from gctl.cli import complete, render
from gctl.cli.context import JsonOpt, store

app = typer.Typer(help="Datasets jobs read from each node's cache: add, ls, show, rm, warm.")

NameArg = Annotated[str, typer.Argument(help="Dataset name.")]


@app.command("add")
def add(
    ctx: typer.Context,
    name: NameArg,
    source: Annotated[
        str,
        typer.Argument(
            help="Where it is: NODE:/absolute/path, or an rsync location the nodes fetch it"
            " from: rsync://HOST/MODULE/PATH, HOST::MODULE/PATH or [USER@]HOST:/PATH (SSH)."
        ),
    ],
    digest: Annotated[
        str | None,
        typer.Option(help="Its manifest SHA-256, if known: refused when the source differs."),
    ] = None,
    via: Annotated[
        str | None,
        typer.Option(
            help="The node that fetches an rsync location to read it (default: the first"
            " node in service); its cache keeps the copy when it fits.",
            metavar="NODE",
            autocompletion=complete.nodes,
        ),
    ] = None,
    json_out: JsonOpt = False,
) -> None:
    """Record a dataset: its manifest (paths, sizes, content hashes) is read at the source.

    A node's directory is read in place. An rsync location is fetched by a
    node with rsync (which the nodes then need), and every node filling its
    cache later fetches it from there too, unless another node has a copy.
    """
    from gctl.hosts.ssh import Pool
    from gctl.services import datasets

    with Pool() as pool:
        view = datasets.add(store(ctx), name, source, digest, pool, via)
    if json_out:
        render.emit_json(view.to_dict())
    else:
        render.message(
            f"dataset {view.name} added: {view.files} files, {render.size(view.bytes)},"
            f" digest {view.digest[:16]}"
        )


@app.command("ls")
def ls(ctx: typer.Context, json_out: JsonOpt = False) -> None:
    """List datasets: name, size, files, source, digest."""
    from gctl.services import datasets

    views = datasets.list_all(store(ctx))
    if json_out:
        render.emit_json([v.to_dict() for v in views])
    else:
        render.dataset_table(views)


@app.command("show")
def show(ctx: typer.Context, name: NameArg, json_out: JsonOpt = False) -> None:
    """Show a dataset and the nodes holding a copy now (asked over SSH)."""
    from gctl.hosts.ssh import Pool
    from gctl.services import datasets

    with Pool() as pool:
        view = datasets.show(store(ctx), name, pool)
    if json_out:
        render.emit_json(view.to_dict())
    else:
        render.dataset_detail(view)


@app.command("rm")
def rm(ctx: typer.Context, name: NameArg) -> None:
    """Forget a dataset (refused while an unfinished job names it)."""
    from gctl.services import datasets

    datasets.remove(store(ctx), name)
    render.message(f"dataset {name} removed")


@app.command("warm")
def warm(
    ctx: typer.Context,
    name: NameArg,
    nodes: Annotated[
        str | None,
        typer.Option(
            help="Nodes to fill, a hostlist: gpu[01-04] (default: every node).",
            autocompletion=complete.nodes,
        ),
    ] = None,
    json_out: JsonOpt = False,
) -> None:
    """Fill nodes' caches with a dataset now, so jobs on them start without copying."""
    from gctl.hosts.ssh import Pool
    from gctl.services import datasets

    names = [nodes] if nodes else []  # a hostlist: gpu[01-04],gpu09
    with Pool() as pool:
        done = datasets.warm(store(ctx), name, names, pool)
    if json_out:
        render.emit_json([asdict(f) for f in done])
        return
    for f in done:
        if f.cached:
            render.message(f"{f.node}: already cached")
        else:
            render.message(
                f"{f.node}: copied from {f.source}, {render.size(f.bytes)} in {f.seconds:.1f} s"
                f" ({f.rate:.0f} MB/s)"
            )
