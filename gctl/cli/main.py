"""The ``gctl`` command: every command group hangs off this Typer app."""

from __future__ import annotations

import sys

import typer

from gctl import __version__
from gctl.cli import acct, admin, daemon, datasets, jobs, nodes, render, sim, watch
from gctl.cli.errors import usage_errors, user_errors
from gctl.cli.manstyle import Root

app = typer.Typer(
    cls=Root,
    help="Operations toolkit for bare-metal GPU clusters (Gandiva-style scheduling).",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # plain help, as a man page has it: no boxes, no cut option names
)
app.command("init")(admin.init)
app.add_typer(admin.app, name="db")
app.add_typer(nodes.app, name="node")
app.add_typer(datasets.app, name="dataset")
app.command("submit")(jobs.submit)
app.command("queue")(jobs.queue)
app.add_typer(jobs.show_app, name="show")
app.command("cancel")(jobs.cancel)
app.command("suspend")(jobs.suspend)
app.command("resume")(jobs.resume)
app.command("requeue")(jobs.requeue)
app.command("hold")(jobs.hold)
app.command("release")(jobs.release)
app.command("migrate")(jobs.migrate)
events_app = typer.Typer(invoke_without_command=True, no_args_is_help=False)
events_app.callback()(jobs.events_cmd)
events_app.command("prune")(jobs.events_prune)
app.add_typer(events_app, name="events")
app.command("acct")(acct.acct)
app.command("why")(jobs.why)
app.command("logs")(jobs.logs)
app.command("defrag")(jobs.defrag)
app.command("daemon")(daemon.daemon)
app.add_typer(sim.app, name="sim")
app.command("watch")(watch.watch)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"gctl {__version__}")
        raise typer.Exit()


@app.callback()
def root(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version."
    ),
    db: str | None = typer.Option(
        None,
        "--db",
        help="Database: a SQLite file or a URL (default: $GCTL_DB, config file, per-user file).",
    ),
) -> None:
    """Operations toolkit for bare-metal GPU clusters."""


def main() -> None:
    """Console entry point: every error is one line on stderr, ``gctl: error: ...``.

    A usage error exits 2: one Typer finds (an unknown option, a missing
    argument, a value of the wrong type or out of range) or one a command
    finds in what the line names before it does anything
    (:func:`~gctl.cli.errors.usage_errors`). Any other user error a command
    raises exits 1; anything else is a bug and keeps its traceback.
    """
    from typer._click import exceptions as usage

    try:
        code = app(standalone_mode=False)
    except usage.NoArgsIsHelpError as exc:  # `gctl`, `gctl node`: the help, on stderr
        exc.show()
        sys.exit(exc.exit_code)
    except usage.UsageError as exc:
        where = f" (see '{exc.ctx.command_path} --help')" if exc.ctx is not None else ""
        render.error(exc.format_message() + where)
        sys.exit(exc.exit_code)
    except usage.ClickException as exc:
        render.error(exc.format_message())
        sys.exit(exc.exit_code)
    except typer.Abort:  # Ctrl-D at a confirmation
        render.error("aborted")
        sys.exit(1)
    except Exception as exc:
        if isinstance(exc, usage_errors()):
            render.error(str(exc))
            sys.exit(2)
        if not isinstance(exc, user_errors()):
            raise
        render.error(_one_line(exc))
        sys.exit(1)
    sys.exit(code if isinstance(code, int) else 0)


def _one_line(exc: Exception) -> str:
    """A user error as one line; a file error names the file first, as shell tools do."""
    import sqlite3

    from sqlalchemy.exc import DatabaseError

    if isinstance(exc, OSError) and exc.filename:
        return f"{exc.filename}: {exc.strerror}"
    if isinstance(exc, DatabaseError):  # not str(exc): that adds the SQL and a link
        return "database: " + " ".join(str(exc.orig).split())
    if isinstance(exc, sqlite3.DatabaseError):
        return "database: " + " ".join(str(exc).split())
    return str(exc)
