"""``gctl daemon``: run the scheduler against the store and the hosts until stopped."""

from __future__ import annotations

import logging
import signal
import sys
import threading
from pathlib import Path
from typing import Annotated

import typer

from gctl.cli import complete, render
from gctl.cli.context import store
from gctl.cli.errors import UsageError
from gctl.cli.parse import parse_options
from gctl.limits import PERIOD_MAX, TEXT_MAX, check_text
from gctl.textsafe import inert


class _InertFormatter(logging.Formatter):
    """Log lines whose message, which names jobs, nodes and hosts, is made inert (one line each).

    A traceback logged with it keeps its lines: it is the code's, not a user's.
    """

    def formatMessage(self, record: logging.LogRecord) -> str:
        """The line for ``record``, its text escaped as :func:`gctl.textsafe.inert` does."""
        return inert(super().formatMessage(record))


def daemon(
    ctx: typer.Context,
    policy: Annotated[
        str,
        typer.Option(
            help="Scheduling policy (gctl sim --help lists them).",
            autocompletion=complete.policies,
        ),
    ] = "gandiva",
    option: Annotated[
        list[str] | None,
        typer.Option("--option", "-o", help="Policy option KEY=VALUE (repeatable)."),
    ] = None,
    tick: Annotated[
        float, typer.Option(max=PERIOD_MAX, help="Seconds between reactive passes.")
    ] = 1.0,
    introspect_every: Annotated[
        float, typer.Option(max=PERIOD_MAX, help="Seconds between introspective passes.")
    ] = 60.0,
    heartbeat_every: Annotated[
        float,
        typer.Option(max=PERIOD_MAX, help="Seconds between node heartbeats and progress samples."),
    ] = 5.0,
    reconcile_every: Annotated[
        float,
        typer.Option(max=PERIOD_MAX, help="Seconds between reconciles of hosts with the store."),
    ] = 30.0,
    node_timeout: Annotated[
        float,
        typer.Option(
            max=PERIOD_MAX, help="Seconds without an answer before a node is marked down."
        ),
    ] = 60.0,
    grace: Annotated[
        float,
        typer.Option(
            max=PERIOD_MAX,
            help="Seconds a job has to checkpoint and exit when moved or at its --time.",
        ),
    ] = 30.0,
    lease_s: Annotated[
        float,
        typer.Option(
            "--lease",
            max=PERIOD_MAX,
            help="Seconds without renewal after which another daemon may take over.",
        ),
    ] = 30.0,
    standby: Annotated[
        bool,
        typer.Option(
            "--standby", help="Wait for the store's lease and take over when its holder stops."
        ),
    ] = False,
    state_dir: Annotated[
        Path | None,
        typer.Option(help="Where the daemon keeps checkpoint copies (default: next to the db)."),
    ] = None,
    metrics: Annotated[
        str | None, typer.Option(help="Serve Prometheus /metrics on HOST:PORT (or :PORT).")
    ] = None,
    dcgm_dir: Annotated[
        str | None,
        typer.Option(help="Keep dcgm-exporter job mapping files in this directory on each node."),
    ] = None,
    colocate: Annotated[
        bool,
        typer.Option(
            help="Let opportunistic jobs run beside production jobs, throttled through the cgroup"
            " freezer (needs root over SSH); else on idle GPUs only."
        ),
    ] = True,
    control_every: Annotated[
        float,
        typer.Option(
            max=PERIOD_MAX,
            help="Seconds between rate-control steps of an opportunistic job beside a production"
            " job.",
        ),
    ] = 1.0,
    gpu_mem_grace: Annotated[
        float,
        typer.Option(
            min=0.0,
            max=PERIOD_MAX,
            help="Seconds a job may stay above its --gpu-mem before it is stopped (FAILED).",
        ),
    ] = 2.0,
    profile_steps: Annotated[
        int,
        typer.Option(
            min=2,
            max=100_000,
            help="Most steps a data-parallel job's batch profile takes (jobs that give the SDK"
            " their global batch).",
        ),
    ] = 30,
    profile_seconds: Annotated[
        float,
        typer.Option(
            min=1.0, max=PERIOD_MAX, help="Most seconds a data-parallel job's batch profile takes."
        ),
    ] = 60.0,
    output_max: Annotated[
        str,
        typer.Option(
            help="Output of each job container kept on its node when it is removed (the last"
            " part), e.g. 64M.",
        ),
    ] = "64M",
    output_tail: Annotated[
        int,
        typer.Option(
            min=0, max=100_000, help="Lines of each job container's output kept in the store."
        ),
    ] = 200,
    output_keep: Annotated[
        float,
        typer.Option(
            min=0.0,
            max=36500.0,
            help="Days a finished job's kept output (and job directories) stay; 0: forever.",
        ),
    ] = 30.0,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Log every step.")] = False,
) -> None:
    """Place and manage jobs on the hosts until stopped (SIGTERM/SIGINT); jobs keep running."""
    from gctl.core.policy import load_policy
    from gctl.daemon import metrics as daemon_metrics
    from gctl.daemon.batching import BatchOptions
    from gctl.daemon.loop import Daemon, DaemonConfig
    from gctl.daemon.output import OutputOptions
    from gctl.hosts.ssh import raise_open_files
    from gctl.services.specs import parse_size_mb

    for value, flag in (
        (state_dir, "--state-dir"),
        (dcgm_dir, "--dcgm-dir"),
        (metrics, "--metrics"),
    ):
        if value is not None:
            check_text(str(value), flag, limit=TEXT_MAX)
    try:
        config = DaemonConfig(
            tick=tick,
            introspect_every=introspect_every,
            heartbeat_every=heartbeat_every,
            reconcile_every=reconcile_every,
            node_timeout=node_timeout,
            grace=grace,
            lease=lease_s,
            state_dir=state_dir,
            dcgm_dir=dcgm_dir,
            colocate=colocate,
            control_every=control_every,
            gpu_mem_grace=gpu_mem_grace,
            batching=BatchOptions(profile_steps=profile_steps, profile_seconds=profile_seconds),
            output=OutputOptions(
                max_bytes=parse_size_mb(output_max, "--output-max", 1 << 20) << 20,
                tail_lines=output_tail,
                keep_days=output_keep,
            ),
        )
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    from gctl.services import access

    chosen = load_policy(policy, **parse_options(option or []))
    st = store(ctx)
    access.operator_only(st, "gctl daemon")
    log = logging.StreamHandler(sys.stderr)
    log.setFormatter(_InertFormatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
    logging.basicConfig(
        level=logging.INFO if verbose else logging.WARNING, handlers=[log], force=True
    )
    # paramiko logs its own tracebacks for a host that does not answer (a banner
    # timeout); the daemon reports each such host in one line, and -v shows more.
    for name in ("paramiko", "paramiko.transport"):  # the latter is quiet from its import on
        logging.getLogger(name).setLevel(logging.WARNING if verbose else logging.CRITICAL)
    raise_open_files()
    counters = daemon_metrics.DaemonMetrics(st)
    server = None
    if metrics:
        try:
            server = daemon_metrics.serve(metrics, counters)
        except ValueError as exc:
            raise UsageError(f"--metrics: {exc}") from None
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())

    def ready() -> None:
        where = f"; metrics on :{server.port}" if server is not None else ""
        render.status(f"gctl daemon: policy {chosen.name}, store {st.url}{where}")

    def waiting(why: str) -> None:
        render.status(f"gctl daemon: standby, {why}")

    try:
        Daemon(st, chosen, config, counters).run(
            stop, on_ready=ready, standby=standby, waiting=waiting
        )
    finally:
        if server is not None:
            server.close()
