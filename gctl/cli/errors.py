"""The errors a CLI command reports as one line, never as a traceback: usage (exit 2), else 1."""

from __future__ import annotations


class UsageError(ValueError):
    """A value on the command line that no command can use, found before anything is done.

    Reported as Typer's own usage errors are, with exit code 2.
    """


def usage_errors() -> tuple[type[Exception], ...]:
    """Usage errors besides Typer's own (exit 2), each found before a command does anything.

    A value :class:`UsageError` refuses; a policy the command line names that
    is not registered, or a policy option it does not take. Looked up only
    once a command has failed, as :func:`user_errors` is.
    """
    from gctl.core.policy import PolicyOptionError, UnknownPolicyError

    return (UsageError, UnknownPolicyError, PolicyOptionError)


def user_errors() -> tuple[type[Exception], ...]:
    """Exceptions caused by input or environment (exit 1); anything else is a bug (a traceback).

    Looked up only once a command has failed, so that no command pays at
    start-up for importing the modules that define them (the simulator's,
    the scheduler core's).
    """
    import sqlite3

    from sqlalchemy.exc import DatabaseError

    from gctl.config import ConfigError
    from gctl.core.state import StateError
    from gctl.services.errors import ServiceError
    from gctl.services.specs import SpecError
    from gctl.sim.cluster_spec import ClusterSpecError
    from gctl.sim.traces import TraceError
    from gctl.sim.training import TrainError
    from gctl.store.engine import StoreError

    return (
        TraceError,
        TrainError,
        ClusterSpecError,
        StateError,
        ServiceError,
        SpecError,
        StoreError,
        ConfigError,
        DatabaseError,  # "file is not a database", "database disk image is malformed", ...
        sqlite3.DatabaseError,  # the same through the fast reader, which bypasses SQLAlchemy
        OSError,
    )
