"""The errors a CLI command reports as one line and exit code 1, never as a traceback."""

from __future__ import annotations


class UsageError(ValueError):
    """A value the user gave that no command can use."""


def user_errors() -> tuple[type[Exception], ...]:
    """Exceptions caused by input or environment; anything else is a bug and keeps its traceback.

    Looked up only once a command has failed, so that no command pays at
    start-up for importing the modules that define them (the simulator's,
    the scheduler core's).
    """
    import sqlite3

    from sqlalchemy.exc import DatabaseError

    from gctl.config import ConfigError
    from gctl.core.policy import PolicyOptionError, UnknownPolicyError
    from gctl.core.state import StateError
    from gctl.services.errors import ServiceError
    from gctl.services.specs import SpecError
    from gctl.sim.cluster_spec import ClusterSpecError
    from gctl.sim.traces import TraceError
    from gctl.sim.training import TrainError
    from gctl.store.engine import StoreError

    return (
        UsageError,
        TraceError,
        TrainError,
        ClusterSpecError,
        UnknownPolicyError,
        PolicyOptionError,
        StateError,
        ServiceError,
        SpecError,
        StoreError,
        ConfigError,
        DatabaseError,  # "file is not a database", "database disk image is malformed", ...
        sqlite3.DatabaseError,  # the same through the fast reader, which bypasses SQLAlchemy
        OSError,
    )
