"""Start and stop a throwaway PostgreSQL server for tests via scripts/testpg.sh.

Plain functions (no fixtures) so a conftest can wrap them however it likes::

    url = pgserver.start(tmp_path)  # postgresql+psycopg://USER@127.0.0.1:PORT/gctl_test
    ...
    pgserver.stop(tmp_path)
"""

from __future__ import annotations

import pathlib

from scriptkit import run_script

# Generous: the first start on a fresh machine may apt-get install postgresql.
START_TIMEOUT_S = 600.0
STOP_TIMEOUT_S = 60.0


def _run(action: str, tmpdir: pathlib.Path, timeout: float) -> str:
    """Run ``testpg.sh ACTION TMPDIR`` and return its stdout; RuntimeError on failure."""
    return run_script("testpg.sh", [action, str(tmpdir)], timeout)


def start(tmpdir: pathlib.Path) -> str:
    """Start a fresh server with its files under ``tmpdir`` and return its SQLAlchemy URL.

    The URL looks like ``postgresql+psycopg://USER@127.0.0.1:PORT/gctl_test`` (trust
    auth, so no password). Raises RuntimeError carrying the script's stderr on failure.
    """
    lines = _run("start", tmpdir, START_TIMEOUT_S).strip().splitlines()
    if not lines or not lines[-1].startswith("postgresql+psycopg://"):
        raise RuntimeError(f"testpg.sh start {tmpdir} printed no URL: {lines!r}")
    return lines[-1]


def stop(tmpdir: pathlib.Path) -> None:
    """Stop the server started for ``tmpdir``; a no-op if none is running."""
    _run("stop", tmpdir, STOP_TIMEOUT_S)
