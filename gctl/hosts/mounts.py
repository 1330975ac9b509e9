"""A host path bound into a job's container: what a job spec asks for and the engine binds.

Apart from :mod:`gctl.hosts.engine` so that parsing a job spec does not load docker-py.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Mount:
    """A host path mounted into the job's container."""

    src: str
    dst: str
    read_only: bool = False
