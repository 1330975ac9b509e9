"""A dataset fill's progress in its job's reason: shown as it goes, never over a newer reason."""

from __future__ import annotations

from sqlalchemy import update
from storekit import node, on_gpus, req

from gctl.daemon import datafill
from gctl.services import db, jobs
from gctl.store.engine import transaction
from gctl.store.models import JobRow


def _reason(store: db.Store, job: int) -> str | None:
    with transaction(store.engine, write=False) as s:
        row = s.get(JobRow, job)
        assert row is not None
        return row.reason


def _set_reason(store: db.Store, job: int, reason: str) -> None:
    with transaction(store.engine, write=True) as s:
        s.execute(update(JobRow).where(JobRow.id == job).values(reason=reason))


def test_progress_is_shown_at_most_every_second_then_the_reason_is_put_back(
    store: db.Store,
) -> None:
    node(store, "a1")
    [job] = jobs.submit(store, [req(1)])
    on_gpus(store, job, "a1", [0], since=100.0)
    _set_reason(store, job, "2 free GPUs on a1")
    shown = datafill._Progress(store, job, "copying dataset imagenet to a1", 200_000_000)
    shown(1 << 20)
    assert _reason(store, job) == "2 free GPUs on a1"  # too soon after the copy began
    shown.at -= datafill.PROGRESS_EVERY
    shown(50_000_000)
    assert _reason(store, job) == "copying dataset imagenet to a1: 50 of 200 MB (25%)"
    shown.at -= datafill.PROGRESS_EVERY
    shown(150_000_000)
    assert _reason(store, job) == "copying dataset imagenet to a1: 150 of 200 MB (75%)"
    shown.done()
    assert _reason(store, job) == "2 free GPUs on a1"


def test_a_reason_a_decision_gave_meanwhile_is_never_overwritten(store: db.Store) -> None:
    node(store, "a1")
    [job] = jobs.submit(store, [req(1)])
    on_gpus(store, job, "a1", [0], since=100.0)
    shown = datafill._Progress(store, job, "copying dataset coco to a1", 0)
    shown.at -= datafill.PROGRESS_EVERY
    shown(3_000_000)
    assert _reason(store, job) == "copying dataset coco to a1: 3 MB"
    _set_reason(store, job, "cancelled by alice")
    shown.at -= datafill.PROGRESS_EVERY
    shown(6_000_000)
    shown.done()
    assert _reason(store, job) == "cancelled by alice"
