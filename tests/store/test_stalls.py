"""Interruptions in a row without a newer checkpoint fail a job; not those while gctl froze it."""

from __future__ import annotations

from sqlalchemy import select

from gctl.daemon import ends
from gctl.services import db, jobs, specs
from gctl.store.engine import transaction
from gctl.store.models import JobRow

KILLED = ends.Ending("PENDING", "interrupted: killed by SIGKILL that gctl did not send", 137)


def _interrupt(store: db.Store, job_id: int, state: str, mechanism: str | None) -> JobRow:
    """End the job's current attempt as interrupted while it was in ``state``; the row after."""
    with transaction(store.engine, write=True) as s:
        row = s.scalars(select(JobRow).where(JobRow.id == job_id)).one()
        row.state, row.mechanism = state, mechanism
        ends._end(s, row, KILLED, None)
    with transaction(store.engine, write=False) as s:
        return s.scalars(select(JobRow).where(JobRow.id == job_id)).one()


def test_interruptions_while_frozen_by_gctl_never_fail_a_job(store: db.Store) -> None:
    job = jobs.submit(store, [specs.build(image="i", command=["x"], gpus=1)])[0]
    # an SDK job's mechanism is "checkpoint" once reported, yet its time slices are freezes
    for mechanism in ["freeze", "checkpoint"] * ends.MAX_STALLS:
        row = _interrupt(store, job, "SUSPENDED", mechanism)
        assert (row.state, row.stalls) == ("PENDING", 0)
    assert row.attempt == 2 * ends.MAX_STALLS  # each interruption was a restart all the same


def test_interruptions_while_running_fail_a_job_at_the_limit(store: db.Store) -> None:
    job = jobs.submit(store, [specs.build(image="i", command=["x"], gpus=1)])[0]
    for n in range(1, ends.MAX_STALLS):
        row = _interrupt(store, job, "RUNNING", None)
        assert (row.state, row.stalls) == ("PENDING", n)
        row = _interrupt(store, job, "SUSPENDED", "freeze")  # neither counted nor a reset
        assert (row.state, row.stalls) == ("PENDING", n)
    row = _interrupt(store, job, "RUNNING", None)
    assert row.state == "FAILED" and row.stalls == ends.MAX_STALLS
    assert "times in a row without a newer checkpoint" in (row.reason or "")
