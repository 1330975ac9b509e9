"""``gctl node``: register GPU servers and manage them the way ``scontrol``/``sinfo`` do.

Each command imports the node service, which loads the ORM, when it runs:
every command imports this module, and ``gctl queue`` needs no ORM.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Any, Protocol, TypeVar

import typer

from gctl.cli import render
from gctl.cli.context import JsonOpt, store
from gctl.cli.errors import UsageError
from gctl.config import DEFAULT_WORK_DIR

if TYPE_CHECKING:
    from gctl.hosts.ssh import HostKey

app = typer.Typer(help="Register nodes, list them (sinfo-like), drain, down, resume, remove.")

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
    name: Annotated[str, typer.Argument(help="Node name used everywhere in gctl.")],
    host: Annotated[str, typer.Option(help="Host name, address or ~/.ssh/config alias.")],
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
    json_out: JsonOpt = False,
) -> None:
    """Record a node, once its SSH host key is confirmed.

    Without --host-key-fingerprint, gctl connects, shows the key the host
    presents and asks you to confirm it (on a terminal); anywhere else it
    stops and tells you the fingerprint to check and pass.
    """
    from gctl.services import access, nodes

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
    """Show the key node ``name``'s host (at ``where``) presents; its fingerprint once accepted."""
    if not sys.stdin.isatty():
        raise UsageError(
            f"{name}: {where} presents {shown.key_type} key {shown.fingerprint}; check it on the"
            f" host (ssh-keygen -lf /etc/ssh/ssh_host_*_key.pub) and pass"
            f" --host-key-fingerprint {shown.fingerprint}"
        )
    render.message(f"{where} presents a {shown.key_type} host key: {shown.fingerprint}")
    if not typer.confirm("Is this the host's key (checked on the host itself)?", default=False):
        raise UsageError(f"{name}: host key not confirmed; nothing recorded")
    return shown.fingerprint


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
    from gctl.services import nodes

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
    from gctl.services import nodes

    view = nodes.show_node(store(ctx), name)
    if json_out:
        render.emit_json(view.to_dict())
    else:
        render.node_detail(view)


def _admin(action: str, doc: str) -> None:
    def command(
        ctx: typer.Context,
        name: Annotated[str, typer.Argument(help="Node name, or a hostlist: gpu[01-08].")],
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
    name: Annotated[str, typer.Argument(help="Node name.")],
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
    name: Annotated[str, typer.Argument(help="Node name.")],
) -> None:
    """Forget a node (refused while jobs hold its GPUs)."""
    from gctl.services import nodes

    nodes.remove_node(store(ctx), name)
    render.message(f"node {name} removed")


@app.command("rekey")
def rekey(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="Node name.")],
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
    names: Annotated[list[str] | None, typer.Argument(help="Only these nodes.")] = None,
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
    names: Annotated[list[str] | None, typer.Argument(help="Only these nodes.")] = None,
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
