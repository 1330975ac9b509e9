"""Jobs whose containers fail to start: held when it cannot help to try again, else backed off.

Slurm holds a job whose launch failed (``launch failed requeued held``) so
that it stops taking nodes from others. gctl does the same for a cause that
asking again cannot fix (no such image, a spec the engine refuses, a
command that cannot run): the job is held with the reason, and ``gctl
release`` lets it try again once the cause is fixed. A job that cannot run
as submitted (its dataset's copies never match the digest it was added
with) fails with the reason. Any other failure (a
host that did not answer, say) is tried again after a back-off that doubles
with every failure in a row, from :data:`FIRST_BACKOFF` up to
:data:`MAX_BACKOFF` seconds; meanwhile the job is not placed, so it never
holds up jobs that can start.
"""

from __future__ import annotations

from sqlalchemy.orm import Session

from gctl.services.jobs import set_state
from gctl.store.models import JobRow

FIRST_BACKOFF = 5.0
"""Seconds before a job whose start failed once is tried again."""
MAX_BACKOFF = 300.0
"""The longest wait between two tries."""


def backoff(failures: int) -> float:
    """Seconds to wait after ``failures`` failed starts in a row."""
    return float(min(MAX_BACKOFF, FIRST_BACKOFF * 2 ** max(0, failures - 1)))


def record(
    s: Session, row: JobRow, why: str, *, permanent: bool, at: float, fails: bool = False
) -> None:
    """Record a failed start of ``row``: FAILED (``fails``), else held, or tried again later."""
    row.start_failures += 1
    if fails:
        row.retry_at = None
        set_state(s, row, "FAILED", f"launch failed: {why}")
        return
    if permanent:
        row.held = True
        row.retry_at = None
        set_state(
            s,
            row,
            "PENDING",
            f"launch failed, held: {why} (fix it, then 'gctl release {row.id}')",
        )
        return
    wait = backoff(row.start_failures)
    row.retry_at = at + wait
    row.reason = f"start failed ({row.start_failures} in a row): {why}; tried again in {wait:.0f}s"


def started(row: JobRow) -> None:
    """Forget earlier failed starts once the job has started."""
    row.start_failures = 0
    row.retry_at = None
