"""``gctl node``: register GPU servers and manage them the way ``scontrol``/``sinfo`` do."""

from __future__ import annotations

from typing import Annotated

import typer

from gctl.cli import render
from gctl.cli.context import JsonOpt, store
from gctl.services import nodes

app = typer.Typer(help="Register nodes, list them (sinfo-like), drain, down, resume, remove.")

ReasonOpt = Annotated[str | None, typer.Option("--reason", help="Why (recorded with user, time).")]


@app.command("add")
def add(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="Node name used everywhere in gctl.")],
    host: Annotated[str, typer.Option(help="Host name or address to reach it over SSH.")],
    port: Annotated[int, typer.Option(help="SSH port.")] = 22,
    user: Annotated[str | None, typer.Option(help="SSH user.")] = None,
    key: Annotated[str | None, typer.Option(help="Path of the SSH private key.")] = None,
    emulate_gpus: Annotated[
        str | None, typer.Option(help="Emulated GPUs instead of real ones, e.g. 4xV100-16GB.")
    ] = None,
    json_out: JsonOpt = False,
) -> None:
    """Record a node."""
    view = nodes.add_node(
        store(ctx), name, host, port=port, ssh_user=user, key_path=key, emulate_gpus=emulate_gpus
    )
    if json_out:
        render.emit_json(view.to_dict())
    else:
        render.message(f"node {view.name} added ({view.gpus_total} GPUs: {view.gpu_kinds})")


@app.command("ls")
def ls(
    ctx: typer.Context,
    names: Annotated[list[str] | None, typer.Argument(help="Only these nodes.")] = None,
    reasons: Annotated[
        bool, typer.Option("-R", "--list-reasons", help="Why nodes are drained or down.")
    ] = False,
    json_out: JsonOpt = False,
) -> None:
    """List nodes: state (idle/mix/alloc/drng/drain/down, * = not responding), GPUs, height."""
    views = nodes.list_nodes(store(ctx), names)
    if json_out:
        render.emit_json([v.to_dict() for v in views if v.reason or not reasons])
    elif reasons:
        render.reasons_table(views)
    else:
        render.node_table(views)


@app.command("show")
def show(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="Node name.")],
    json_out: JsonOpt = False,
) -> None:
    """Show one node with its GPUs and the jobs on them."""
    view = nodes.show_node(store(ctx), name)
    if json_out:
        render.emit_json(view.to_dict())
    else:
        render.node_detail(view)


def _admin(action: str, doc: str) -> None:
    def command(
        ctx: typer.Context,
        name: Annotated[str, typer.Argument(help="Node name.")],
        reason: ReasonOpt = None,
        json_out: JsonOpt = False,
    ) -> None:
        view = nodes.set_admin_state(store(ctx), name, action, reason)
        if json_out:
            render.emit_json(view.to_dict())
        else:
            render.message(f"node {view.name} is now {view.state_flag}")

    command.__doc__ = doc
    app.command(action)(command)


_admin("drain", "Stop new work landing on a node; running jobs finish (needs --reason).")
_admin("undrain", "Return a drained node to service.")
_admin("down", "Mark a node down; the daemon requeues its jobs (needs --reason).")
_admin("resume", "Return a down or drained node to service (scontrol ... state=resume).")


@app.command("rm")
def rm(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="Node name.")],
) -> None:
    """Forget a node (refused while jobs hold its GPUs)."""
    nodes.remove_node(store(ctx), name)
    render.message(f"node {name} removed")
