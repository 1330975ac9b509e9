"""``gctl node``: register GPU servers and manage them the way ``scontrol``/``sinfo`` do.

Each command imports the node service, which loads the ORM, when it runs:
every command imports this module, and ``gctl queue`` needs no ORM.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Protocol, TypeVar

import typer

from gctl.cli import complete, render
from gctl.cli.context import JsonOpt, store
from gctl.cli.errors import UsageError
from gctl.config import DEFAULT_WORK_DIR
from gctl.services.errors import ServiceError

if TYPE_CHECKING:
    from gctl.hosts.ssh import HostKey

app = typer.Typer(help="Register nodes, list them (sinfo-like), drain, down, resume, remove.")

NodeArg = Annotated[
    str, typer.Argument(help="Node name.", metavar="NODE", autocompletion=complete.nodes)
]
NodesArg = Annotated[
    list[str] | None,
    typer.Argument(help="Only these nodes.", metavar="NODE", autocompletion=complete.nodes),
]
ReasonOpt = Annotated[str | None, typer.Option("--reason", help="Why (recorded with user, time).")]
CacheDirOpt = Annotated[
    str | None,
    typer.Option(help="Where the node caches datasets (default: WORKDIR/datasets)."),
]
CacheSizeOpt = Annotated[
    str | None,
    typer.Option(help="Most the dataset cache may hold, e.g. 500G (default: the disk's space)."),
]


@app.command("add")
def add(
    ctx: typer.Context,
    name: Annotated[
        str | None, typer.Argument(help="Node name used everywhere in gctl.", metavar="NODE")
    ] = None,
    host: Annotated[
        str | None, typer.Option(help="Host name, address or ~/.ssh/config alias.")
    ] = None,
    port: Annotated[int, typer.Option(help="SSH port.")] = 22,
    user: Annotated[str | None, typer.Option(help="SSH user.")] = None,
    key: Annotated[str | None, typer.Option(help="Path of the SSH private key.")] = None,
    host_key_fingerprint: Annotated[
        str | None,
        typer.Option(help="The host key's SHA256:... fingerprint, checked beforehand."),
    ] = None,
    emulate_gpus: Annotated[
        str | None, typer.Option(help="Emulated GPUs instead of real ones, e.g. 4xV100-16GB.")
    ] = None,
    docker_host: Annotated[
        str | None, typer.Option(help="Docker engine on the host, if not its default socket.")
    ] = None,
    work_dir: Annotated[
        str | None, typer.Option(help=f"Job directories on the host (default {DEFAULT_WORK_DIR}).")
    ] = None,
    cache_dir: CacheDirOpt = None,
    cache_size: CacheSizeOpt = None,
    inventory: Annotated[
        Path | None,
        typer.Option(
            "--file",
            "-f",
            help="Add every node of a TOML or CSV inventory (host key fingerprints included),"
            " all or none.",
        ),
    ] = None,
    json_out: JsonOpt = False,
) -> None:
    """Record a node, once its SSH host key is confirmed, or every node of an inventory.

    Without --host-key-fingerprint, gctl connects, shows the key the host
    presents and asks you to confirm it (on a terminal); anywhere else it
    stops and tells you the fingerprint to check and pass. An inventory
    (--file) gives each node's fingerprint; its nodes are recorded together
    or, if any is bad, none.
    """
    from gctl.services import access, nodes

    if inventory is not None:
        if name is not None or host is not None:
            raise UsageError("--file takes every node from the file; give no NODE or --host")
        from gctl.services.inventory import read_inventory

        st = store(ctx)
        views = nodes.add_nodes(st, read_inventory(inventory))
        if json_out:
            render.emit_json({"nodes": [v.to_dict() for v in views]})
        else:
            total = sum(v.gpus_total for v in views)
            render.message(f"{len(views)} nodes added ({total} GPUs)")
        return
    if name is None or host is None:
        raise UsageError("give NODE and --host (or --file with an inventory)")
    st = store(ctx)
    access.operator_only(st, "gctl node add")  # before the host is ever contacted
    if host_key_fingerprint is None:
        scanned = nodes.scan_host_key(name, host, port=port, ssh_user=user, key_path=key)
        host_key_fingerprint = _confirm_host_key(name, f"{host}:{port}", scanned)
    view = nodes.add_node(
        st,
        name,
        host,
        port=port,
        ssh_user=user,
        key_path=key,
        emulate_gpus=emulate_gpus,
        host_key_fingerprint=host_key_fingerprint,
        docker_host=docker_host,
        work_dir=work_dir,
        cache_dir=cache_dir,
        cache_size=cache_size,
    )
    if json_out:
        render.emit_json(view.to_dict())
    else:
        render.message(f"node {view.name} added ({view.gpus_total} GPUs: {view.gpu_kinds})")


def _confirm_host_key(name: str, where: str, shown: HostKey) -> str:
    """Show the key node ``name``'s host (at ``where``) presents; its fingerprint once accepted.

    Refused (exit 1, not a usage error: the host has been asked) when not on
    a terminal or when the key is not confirmed.
    """
    if not sys.stdin.isatty():
        raise ServiceError(
            f"{name}: {where} presents {shown.key_type} key {shown.fingerprint}; check it on the"
            f" host (ssh-keygen -lf /etc/ssh/ssh_host_*_key.pub) and pass"
            f" --host-key-fingerprint {shown.fingerprint}"
        )
    render.message(f"{where} presents a {shown.key_type} host key: {shown.fingerprint}")
    if not typer.confirm("Is this the host's key (checked on the host itself)?", default=False):
        raise ServiceError(f"{name}: host key not confirmed; nothing recorded")
    return shown.fingerprint


@app.command("ls")
def ls(
    ctx: typer.Context,
    names: NodesArg = None,
    reasons: Annotated[
        bool, typer.Option("-R", "--list-reasons", help="Why nodes are drained or down.")
    ] = False,
    states: Annotated[
        str | None,
        typer.Option(
            "--states", "-t", help="Only nodes in these states, e.g. idle,mix or drain,down."
        ),
    ] = None,
    fmt: Annotated[
        str | None,
        typer.Option("--format", "-o", help="sinfo-style fields, e.g. '%N %.6t %b %E'."),
    ] = None,
    node_oriented: Annotated[
        bool,
        typer.Option("--Node", "-N", help="A line per node (sinfo -N); gctl always lists so."),
    ] = False,
    noheader: Annotated[bool, typer.Option("--noheader", "-h", help="No header line.")] = False,
    json_out: JsonOpt = False,
) -> None:
    """List nodes like sinfo -N: state, GPUs used/total, height, GPU kinds.

    States: idle, mix, alloc, drng (draining), drain, down; * = not responding.
    """
    from gctl.services import nodes

    del node_oriented  # accepted as sinfo takes it: every listing here is a line per node
    if fmt is not None:
        try:
            render.check_node_format(fmt)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
    try:
        wanted = nodes.parse_node_states(states) if states else None
    except ServiceError as exc:
        raise UsageError(str(exc)) from None
    views = [v for v in nodes.list_nodes(store(ctx), names) if wanted is None or v.state in wanted]
    if json_out:
        render.emit_json([v.to_dict() for v in views if v.reason or not reasons])
    elif fmt is not None:
        render.node_lines(views, fmt, header=not noheader)
    elif reasons:
        render.reasons_table(views)
    else:
        render.node_table(views)


@app.command("show")
def show(
    ctx: typer.Context,
    name: Annotated[
        str | None,
        typer.Argument(
            help="Node name (default: every node).", metavar="NODE", autocompletion=complete.nodes
        ),
    ] = None,
    json_out: JsonOpt = False,
) -> None:
    """Show a node (or every node, as scontrol show node) with its GPUs and the jobs on them."""
    from gctl.services import nodes

    views = (
        [nodes.show_node(store(ctx), name)]
        if name is not None
        else nodes.list_nodes(store(ctx), detail=True)
    )
    if json_out:
        render.emit_json(views[0].to_dict() if name is not None else [v.to_dict() for v in views])
        return
    for i, view in enumerate(views):
        if i:
            render.message("")
        render.node_detail(view)


def _admin(action: str, doc: str) -> None:
    def command(
        ctx: typer.Context,
        name: Annotated[
            str,
            typer.Argument(
                help="Node name, or a hostlist: gpu[01-08].",
                metavar="NODES",
                autocompletion=complete.nodes,
            ),
        ],
        reason: ReasonOpt = None,
        json_out: JsonOpt = False,
    ) -> None:
        from gctl.services import nodes

        done = nodes.set_admin_states(store(ctx), name, action, reason)
        if json_out:
            render.emit_json(done[0].to_dict() if len(done) == 1 else [v.to_dict() for v in done])
        else:
            for view in done:
                render.message(f"node {view.name} is now {view.state_flag}")

    command.__doc__ = doc
    app.command(action)(command)


_admin("drain", "Stop new work landing on nodes; running jobs finish (needs --reason).")
_admin("undrain", "Return drained nodes to service.")
_admin("down", "Mark nodes down; the daemon requeues their jobs (needs --reason).")
_admin("resume", "Return down or drained nodes to service (scontrol ... state=resume).")


@app.command("set")
def set_cmd(
    ctx: typer.Context,
    name: NodeArg,
    cache_dir: CacheDirOpt = None,
    cache_size: CacheSizeOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Change a node's settings: its dataset cache's directory and size."""
    from gctl.services import nodes

    if cache_dir is None and cache_size is None:
        raise UsageError("nothing to set: give --cache-dir and/or --cache-size")
    view = nodes.set_cache(store(ctx), name, cache_dir, cache_size)
    if json_out:
        render.emit_json(view.to_dict())
    else:
        render.message(f"node {view.name} updated")


@app.command("rm")
def rm(
    ctx: typer.Context,
    name: NodeArg,
) -> None:
    """Forget a node (refused while jobs hold its GPUs)."""
    from gctl.services import nodes

    nodes.remove_node(store(ctx), name)
    render.message(f"node {name} removed")


@app.command("rekey")
def rekey(
    ctx: typer.Context,
    name: NodeArg,
    host_key_fingerprint: Annotated[
        str | None,
        typer.Option(help="The host's new key's SHA256:... fingerprint (default: scan and ask)."),
    ] = None,
    json_out: JsonOpt = False,
) -> None:
    """Accept a node's deliberately changed SSH host key (a reinstall), even while it runs jobs.

    Without --host-key-fingerprint, gctl connects, shows the key the host
    presents now and asks you to confirm it (on a terminal); anywhere else
    it stops and tells you the fingerprint to check and pass. The change is
    recorded as a node.rekey event with both fingerprints.
    """
    from gctl.services import nodes

    st = store(ctx)
    if host_key_fingerprint is None:
        view = nodes.show_node(st, name)  # an unknown node is refused before any host is reached
        scanned = nodes.scan_node_key(st, name)
        host_key_fingerprint = _confirm_host_key(name, f"{view.host}:{view.port}", scanned)
    new = host_key_fingerprint
    old = nodes.rekey_node(st, name, new)
    if json_out:
        render.emit_json({"node": name, "old": old, "new": new, "changed": old != new})
    elif old == new:
        render.message(f"node {name} already has host key {new}; nothing changed")
    else:
        render.message(f"node {name}: host key {old or '(none)'} -> {new}")


@app.command("probe")
def probe_cmd(
    ctx: typer.Context,
    names: NodesArg = None,
    json_out: JsonOpt = False,
) -> None:
    """Contact nodes now (all at once): SSH, Docker engine and GPU inventory.

    Exits 1 when any node did not answer; the others are still probed and shown.
    """
    from gctl.services import probe  # here: the SSH and Docker stack loads only when used

    views = probe.probe(store(ctx), names)
    _report(views, render.probe_table, json_out, [v.node.name for v in views if not v.responding])


@app.command("top")
def top(
    ctx: typer.Context,
    names: NodesArg = None,
    json_out: JsonOpt = False,
) -> None:
    """GPU use now, per GPU and per job, on every node at once (emulated figures marked).

    Exits 1 when any node did not answer; the others are still shown.
    """
    from gctl.services import telemetry  # here: the SSH and Docker stack loads only when used

    samples = telemetry.sample(store(ctx), names)
    _report(samples, render.top, json_out, [s.node for s in samples if s.error])


class _Answer(Protocol):
    def to_dict(self) -> dict[str, Any]: ...


A = TypeVar("A", bound=_Answer)


def _report(
    answers: list[A], table: Callable[[list[A]], None], json_out: bool, silent: list[str]
) -> None:
    """Every host's answer (a table or JSON); when a node did not answer, say so and exit 1."""
    if json_out:
        render.emit_json([a.to_dict() for a in answers])
    else:
        table(answers)
    if silent:
        render.error(f"no answer from {len(silent)} node(s): {', '.join(silent)}")
        raise typer.Exit(1)
