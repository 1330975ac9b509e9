"""Job commands in Slurm's words: submit, queue, show, cancel, suspend, resume, requeue, ...

Each command imports the services it calls, so that ``gctl queue``, which
reads a SQLite store with the standard library alone, starts without
loading SQLAlchemy.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from gctl.cli import complete, render
from gctl.cli import nodes as node_cmds
from gctl.cli.context import JsonOpt, store, target
from gctl.cli.errors import UsageError
from gctl.cli.interrupt import read_until_stopped, stop_requested
from gctl.cli.parse import parse_ids, parse_names, parse_signal, parse_time
from gctl.config import site_policy
from gctl.gcpause import gc_paused
from gctl.identity import who
from gctl.limits import INT_MAX, NAME_MAX, TEXT_MAX, check_text, shown
from gctl.services import queue as job_queue
from gctl.services.errors import ServiceError
from gctl.services.reader import reading

if TYPE_CHECKING:
    from gctl.services.jobs import ActionResult

JobArg = Annotated[
    int, typer.Argument(help="Job id.", min=1, max=INT_MAX, autocompletion=complete.jobs)
]
JobsArg = Annotated[
    list[int],
    typer.Argument(
        help="Job ids.",
        metavar="JOB_ID",
        min=1,
        max=INT_MAX,
        autocompletion=complete.unfinished_jobs,
    ),
]
_TO = re.compile(r"[^:]+(?::[0-9]{1,9}(?:,[0-9]{1,9})*)?")
"""``migrate --to``: ``NODE`` or ``NODE:GPU,GPU...``."""
FOLLOW_EVERY_S = 1.0
"""How often ``gctl events --follow`` looks for new events."""

show_app = typer.Typer(help="Show one job or node in detail (scontrol show).")


def submit(
    ctx: typer.Context,
    command: Annotated[
        list[str] | None, typer.Argument(help="The command to run in the container, after --.")
    ] = None,
    gpus: Annotated[int, typer.Option(help="GPUs the job needs.")] = 1,
    image: Annotated[str | None, typer.Option(help="Container image.")] = None,
    name: Annotated[str, typer.Option(help="Job name (default: the command).")] = "",
    priority: Annotated[
        str, typer.Option(help="low, normal or high.", autocompletion=complete.priorities)
    ] = "normal",
    job_class: Annotated[
        str, typer.Option("--class", help="production or opportunistic.")
    ] = "production",
    elastic: Annotated[str | None, typer.Option(help="MIN:MAX GPUs for an elastic job.")] = None,
    gpu_mem: Annotated[str | None, typer.Option(help="GPU memory needed, e.g. 8G.")] = None,
    dataset: Annotated[list[str] | None, typer.Option(help="Dataset name (repeatable).")] = None,
    env: Annotated[list[str] | None, typer.Option(help="KEY=VALUE (repeatable).")] = None,
    mount: Annotated[list[str] | None, typer.Option(help="SRC:DST[:ro] (repeatable).")] = None,
    profile: Annotated[str | None, typer.Option(help="Model/profile name, e.g. resnet50.")] = None,
    time: Annotated[
        str | None,
        typer.Option(
            "--time",
            "-t",
            help="Time limit of running, as sbatch: MM, HH:MM:SS, D-HH:MM:SS or UNLIMITED.",
        ),
    ] = None,
    wait_for_nodes: Annotated[
        bool,
        typer.Option(help="Queue it even if it asks for more GPUs than the registered nodes have."),
    ] = False,
    batch: Annotated[
        Path | None,
        typer.Option("--file", "-f", help="Submit every job in a JSON-lines/JSON/TOML file."),
    ] = None,
    parsable: Annotated[bool, typer.Option(help="Print only the job id(s).")] = False,
    json_out: JsonOpt = False,
) -> None:
    """Queue a job (or a batch from --file) for the daemon to place, like sbatch."""
    from gctl.services import jobs, specs

    if batch is not None:
        check_text(str(batch), "--file", limit=TEXT_MAX)
        if command or image:
            raise UsageError("--file takes every spec from the file; give no command or --image")
        requests = list(specs.read_batch(batch))
    else:
        if not image:
            raise UsageError("--image is required (or --file)")
        try:  # a flag's value; the same in a --file is the file's error (exit 1)
            requests = [
                specs.build(
                    image=image,
                    command=command or [],
                    gpus=gpus,
                    name=name,
                    priority=priority,
                    job_class=job_class,
                    elastic=elastic,
                    gpu_mem=gpu_mem,
                    datasets=dataset or [],
                    env=env or [],
                    mounts=mount or [],
                    profile=profile,
                    time=time,
                    wait_for_nodes=wait_for_nodes,
                )
            ]
        except specs.SpecError as exc:
            raise UsageError(str(exc)) from None
    ids = jobs.submit(store(ctx), requests)
    if json_out:
        render.emit_json({"job_ids": ids})
    elif parsable:
        for job_id in ids:
            render.message(str(job_id))
    elif len(ids) == 1:
        render.message(f"Submitted job {ids[0]}")
    else:
        render.message(f"Submitted {len(ids)} jobs: {ids[0]}..{ids[-1]}" if ids else "No jobs")


def queue(
    ctx: typer.Context,
    user: Annotated[
        str | None, typer.Option("--user", "-u", help="Only these users (comma list).")
    ] = None,
    me: Annotated[bool, typer.Option("--me", help="Only my jobs (as -u with my login).")] = False,
    job_ids: Annotated[
        str | None,
        typer.Option(
            "--jobs",
            "-j",
            help="Only these jobs (comma list), in any state unless -t says otherwise.",
            autocompletion=complete.jobs,
        ),
    ] = None,
    states: Annotated[
        str | None,
        typer.Option(
            "--states",
            "-t",
            help="States or codes, e.g. PD,R or all.",
            autocompletion=complete.states,
        ),
    ] = None,
    nodelist: Annotated[
        str | None,
        typer.Option(
            "--nodelist", "-w", help="Only jobs on these nodes.", autocompletion=complete.nodes
        ),
    ] = None,
    fmt: Annotated[
        str | None, typer.Option("--format", "-o", help="squeue-style fields, e.g. '%i %t %R'.")
    ] = None,
    long: Annotated[
        bool, typer.Option("--long", "-l", help="More fields: state, time limit, node count.")
    ] = False,
    sort: Annotated[
        str | None,
        typer.Option(
            "--sort", "-S", help="Sort by these fields, '-' for descending, e.g. -p,i (squeue -S)."
        ),
    ] = None,
    noheader: Annotated[bool, typer.Option("--noheader", "-h", help="No header line.")] = False,
    json_out: JsonOpt = False,
) -> None:
    """List jobs like squeue (not finished ones unless -t or -j says otherwise)."""
    layout = fmt if fmt is not None else render.QUEUE_LONG if long else render.QUEUE_FORMAT
    try:
        render.check_queue_format(layout)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    wanted = _states(states)
    users = parse_names(user, "--user") or set()
    if me:
        users.add(who(site_policy().admin_group).name)
    # A big queue is a few hundred thousand objects, none in a cycle.
    with gc_paused():
        with reading(target(ctx)) as reader:
            listed = job_queue.listing(
                reader,
                users=users or None,
                states=wanted,
                nodes=_nodes(nodelist),
                ids=parse_ids(job_ids, "--jobs"),
            )
        if sort:
            try:
                listed = listed.sorted_by(check_text(sort, "--sort", limit=NAME_MAX), time.time())
            except ServiceError as exc:
                raise UsageError(str(exc)) from None
        if json_out:
            render.emit_json({"jobs": listed.to_dicts()})
        else:
            render.queue(listed, layout, header=not noheader)


def _states(text: str | None) -> set[str] | None:
    """``-t``: job states, by name or code; an unknown one is a usage error."""
    if not text:
        return None
    try:
        return job_queue.parse_states(text)
    except ServiceError as exc:
        raise UsageError(str(exc)) from None


def _nodes(text: str | None) -> set[str] | None:
    """``-w``: node names, or hostlist expressions (``gpu[01-04],gpu09``)."""
    if not text:
        return None
    check_text(text, "-w", limit=TEXT_MAX)
    from gctl.services import hostlists

    return set(hostlists.expand([text]))


@show_app.command("job")
def show_job(ctx: typer.Context, job_id: JobArg, json_out: JsonOpt = False) -> None:
    """A job's spec, where it runs, its history and open intents."""
    from gctl.services import jobs

    detail = jobs.show_job(store(ctx), job_id)
    if json_out:
        render.emit_json(detail.to_dict())
    else:
        render.job_detail(detail)


show_app.command("node")(node_cmds.show)


def _each(job_ids: list[int], act: Callable[[int], ActionResult], json_out: bool) -> None:
    """Act on each job in turn and report each outcome; exit 1 when any job was refused.

    As scancel does: an unknown job, or one the action does not apply to, is
    an error line of its own on stderr (with --json also an entry of
    ``errors``), and the other jobs are still acted on.
    """
    done: list[ActionResult] = []
    refused: list[dict[str, object]] = []
    for job_id in dict.fromkeys(job_ids):
        try:
            result = act(job_id)
        except ServiceError as exc:
            refused.append({"job_id": job_id, "error": str(exc)})
            render.error(str(exc))
            continue
        done.append(result)
        if not json_out:
            render.message(result.message)
    if json_out:
        render.emit_json({"results": [r.to_dict() for r in done], "errors": refused})
    if refused:
        raise typer.Exit(1)


def cancel(
    ctx: typer.Context,
    job_ids: Annotated[
        list[int] | None,
        typer.Argument(
            help="Job ids.",
            metavar="JOB_ID",
            min=1,
            max=INT_MAX,
            show_default=False,
            autocompletion=complete.unfinished_jobs,
        ),
    ] = None,
    signal: Annotated[
        str | None, typer.Option("--signal", "-s", help="Send this signal instead of ending.")
    ] = None,
    user: Annotated[
        str | None, typer.Option("--user", "-u", help="Only jobs of these users (comma list).")
    ] = None,
    states: Annotated[
        str | None,
        typer.Option(
            "--state",
            "-t",
            help="Only jobs in these states, e.g. PD,R.",
            autocompletion=complete.states,
        ),
    ] = None,
    name: Annotated[
        str | None, typer.Option("--name", "-n", help="Only jobs of these names (comma list).")
    ] = None,
    nodelist: Annotated[
        str | None,
        typer.Option(
            "--nodelist", "-w", help="Only jobs on these nodes.", autocompletion=complete.nodes
        ),
    ] = None,
    json_out: JsonOpt = False,
) -> None:
    """Cancel jobs by id and/or filter, as scancel (pending at once; running through the daemon).

    With filters and no ids, every unfinished job they match; with both, the
    ids that match. Each job is reported; exit 1 when any was refused.
    """
    from gctl.services import jobs

    args = {"signal": parse_signal(signal)} if signal is not None else {}
    filters = {
        "users": parse_names(user, "--user"),
        "states": _states(states),
        "names": parse_names(name, "--name"),
        "nodes": _nodes(nodelist),
    }
    if not job_ids and not any(filters.values()):
        raise UsageError("give job ids, or choose jobs with -u, -t, --name or -w")
    s = store(ctx)
    chosen = job_queue.matching(s, list(job_ids or []), **filters)
    _each(chosen, lambda j: jobs.act(s, j, "cancel", **args), json_out)


def _simple(action: str, doc: str) -> Callable[..., None]:
    def command(
        ctx: typer.Context,
        job_ids: JobsArg,
        json_out: JsonOpt = False,
    ) -> None:
        from gctl.services import jobs

        s = store(ctx)
        _each(job_ids, lambda j: jobs.act(s, j, action), json_out)

    command.__doc__ = doc
    return command


suspend = _simple("suspend", "Suspend running jobs (scontrol suspend), through the daemon.")
resume = _simple("resume", "Resume suspended jobs, through the daemon.")
hold = _simple("hold", "Keep pending jobs from starting until released.")
release = _simple("release", "Let held jobs start again.")


def requeue(
    ctx: typer.Context,
    job_ids: JobsArg,
    hold_it: Annotated[bool, typer.Option("--hold", help="Hold the job once requeued.")] = False,
    json_out: JsonOpt = False,
) -> None:
    """Send running jobs back to the queue from their last checkpoint, through the daemon."""
    from gctl.services import jobs

    s = store(ctx)
    _each(job_ids, lambda j: jobs.act(s, j, "requeue", hold=hold_it), json_out)


def migrate(
    ctx: typer.Context,
    job_id: JobArg,
    to: Annotated[
        str | None,
        typer.Option(
            help="NODE or NODE:GPU,GPU (default: the scheduler picks).",
            autocompletion=complete.nodes,
        ),
    ] = None,
    json_out: JsonOpt = False,
) -> None:
    """Move a job to other GPUs from a checkpoint, through the daemon."""
    from gctl.services import jobs

    if to is not None and not _TO.fullmatch(check_text(to, "--to", limit=TEXT_MAX)):
        raise UsageError(f"--to {shown(to)}: expected NODE or NODE:GPU,GPU,...")
    s = store(ctx)
    _each([job_id], lambda j: jobs.act(s, j, "migrate", to=to), json_out)


def events_cmd(
    ctx: typer.Context,
    job: Annotated[
        int | None,
        typer.Option(
            min=1, max=INT_MAX, help="Only this job's events.", autocompletion=complete.jobs
        ),
    ] = None,
    node: Annotated[
        str | None, typer.Option(help="Only this node's events.", autocompletion=complete.nodes)
    ] = None,
    since: Annotated[
        str | None,
        typer.Option(help="Only since then: 30m, 1h30m, 1-00:00:00 ago, 2026-11-01, now-7days."),
    ] = None,
    limit: Annotated[
        int | None, typer.Option(min=1, max=INT_MAX, help="At most the newest N.")
    ] = None,
    follow: Annotated[
        bool,
        typer.Option(
            "--follow", "-f", help="Keep printing new events as they come (JSON: one per line)."
        ),
    ] = False,
    json_out: JsonOpt = False,
) -> None:
    """The event log: who did what, when and why (gctl events prune: its retention)."""
    from gctl.services import events

    if ctx.invoked_subcommand is not None:
        return
    if node is not None:
        check_text(node, "--node")
    start = parse_time(since, time.time(), "--since") if since else None
    s = store(ctx)
    newest = events.list_events(s, limit=1)  # first: what comes after it is new
    rows = events.list_events(s, job_id=job, node=node, since=start, limit=limit)
    if not follow:
        if json_out:
            render.emit_json({"events": [e.to_dict() for e in rows]})
        else:
            render.events_table(rows)
        return
    last = max((e.id for e in newest + rows), default=0)
    with stop_requested() as stop:  # Ctrl-C ends it, as it ends tail -f
        while True:
            render.event_lines(rows, json_lines=json_out)
            last = max([last, *(e.id for e in rows)])
            if stop.wait(FOLLOW_EVERY_S):
                return
            rows = events.list_events(s, job_id=job, node=node, after=last)


def events_prune(
    ctx: typer.Context,
    older_than: Annotated[
        str,
        typer.Option(
            "--older-than",
            help="Delete the events before then: 90d, 2026-01-01, now-30days.",
            metavar="TIME",
        ),
    ],
    json_out: JsonOpt = False,
) -> None:
    """Delete events older than a time (operators only).

    The daemon applies the same retention on its own, past the site's
    [events] keep_days (default 90; 0: forever).
    """
    from gctl.services import events

    before = parse_time(older_than, time.time(), "--older-than")
    gone = events.prune(store(ctx), before)
    if json_out:
        render.emit_json({"deleted": gone})
    else:
        render.message(f"{gone} event(s) deleted")


def defrag(
    ctx: typer.Context,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Show the plan; record nothing.")
    ] = False,
    threshold: Annotated[
        int | None,
        typer.Option(
            max=INT_MAX, help="Empty nodes with at least this many free GPUs (default 2)."
        ),
    ] = None,
    max_moves: Annotated[
        int | None, typer.Option(max=INT_MAX, help="Most moves in the pass.")
    ] = None,
    json_out: JsonOpt = False,
) -> None:
    """One defragmentation pass (for cron): plan moves to free whole nodes.

    The plan comes from the same core step the daemon runs. Without
    --dry-run each move is recorded as a migrate intent for the daemon.
    """
    from gctl.services import defrag as service  # here: only this command needs the core

    st = store(ctx)
    result = service.plan(st, threshold=threshold, max_moves=max_moves, record=not dry_run)
    done = None
    if result.recorded:
        from gctl.daemon.intents import carry_out_unless_a_daemon_runs

        done = carry_out_unless_a_daemon_runs(st)
    if json_out:
        outcomes = None if done is None else [o.to_dict() for o in done]
        render.emit_json({**result.to_dict(), "carried_out": outcomes})
    else:
        render.defrag_plan(result, dry_run=dry_run)
        render.outcomes(done, recorded=result.recorded)


def why(ctx: typer.Context, job_id: JobArg, json_out: JsonOpt = False) -> None:
    """Why a job is pending, suspended or shared, or where it moved, from what is recorded."""
    from gctl.services import why as service  # the function's name hides the module

    result = service.explain(store(ctx), job_id)
    if json_out:
        render.emit_json(result.to_dict())
    else:
        render.why(result)


def logs(
    ctx: typer.Context,
    job_id: JobArg,
    tail: Annotated[
        int | None,
        typer.Option("--tail", "-n", min=0, max=INT_MAX, help="Only the last N lines."),
    ] = None,
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="Keep printing output until the container ends.")
    ] = False,
    node: Annotated[
        str | None,
        typer.Option(
            help="The job's container on this node (default: its first).",
            autocompletion=complete.nodes,
        ),
    ] = None,
    json_out: JsonOpt = False,
) -> None:
    """A job's output, stdout and stderr (docker logs; Slurm's slurm-N.out).

    Read over SSH from the job's container on its node while the job holds
    GPUs; after that (ended, suspended, requeued) from the output the daemon
    kept of each run when it removed its container: a file in the job's
    directory on its node, else the last lines kept in the store. The output
    is the job's own bytes, written to stdout as they arrive, not drawn by
    the renderer; --json gives the last lines as one document instead.
    """
    from gctl.services import logs as service  # the hosts layer loads only for this command

    if node is not None:
        check_text(node, "--node")
    if json_out:
        if follow:
            raise UsageError("--json gives the lines there are now; it cannot --follow")
        render.emit_json(service.tail(store(ctx), job_id, tail, node=node).to_dict())
        return
    opened = service.stream(store(ctx), job_id, tail=tail, follow=follow, node=node)
    out = read_until_stopped(opened, render.raw)  # Ctrl-C ends --follow, as docker logs -f
    for note in out.notes:
        render.status(f"gctl: note: {note}")
