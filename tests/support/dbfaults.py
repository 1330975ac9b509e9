"""Damage to a SQLite store file, as a failing disk or a stray ``dd`` would do it."""

from __future__ import annotations

import contextlib
import random
import sqlite3
from pathlib import Path


def ruin(path: Path, pages: int = 40, *, header: bool = False, seed: int = 17) -> None:
    """Random bytes over ``pages`` pages of the file, chosen at random; page 1 only if ``header``.

    The WAL is first checkpointed into the file, so that no newer copy of a
    ruined page is left there to hide the damage.
    """
    with contextlib.closing(sqlite3.connect(path)) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        size = int(conn.execute("PRAGMA page_size").fetchone()[0])
    count = path.stat().st_size // size
    assert count > pages, f"{path} has {count} pages, too few to ruin {pages}"
    rnd = random.Random(seed)
    chosen = rnd.sample(range(2, count + 1), pages - 1 if header else pages)
    with path.open("r+b") as f:
        for page in [1, *chosen] if header else chosen:
            f.seek((page - 1) * size)
            f.write(rnd.randbytes(size))
