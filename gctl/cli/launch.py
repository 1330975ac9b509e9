"""The ``gctl`` console script: the CLI started the way a short-lived process should be."""

from __future__ import annotations

import gc


def main() -> None:
    """Import the CLI with the cyclic garbage collector paused, then run it.

    Importing typer, pydantic and SQLAlchemy creates a few hundred thousand
    objects that live as long as the process. Left on, the collector scans
    them again and again while they are created, which costs about 0.2 s on
    every command here. Once imported they are frozen (the collector stops
    looking at them) and collection resumes, so long-running commands such as
    ``gctl sim`` still reclaim their cycles.
    """
    gc.disable()
    from gctl.cli.main import main as run  # imported here, with the collector paused

    gc.freeze()
    gc.enable()
    run()
