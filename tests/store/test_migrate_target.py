"""Where a migrate intent moves a job: ``--to`` as named, else where the scheduler picks."""

from __future__ import annotations

import time

import pytest
from storekit import node, on_gpus, req

from gctl.daemon.intents import Refused, _target
from gctl.services import db, jobs, nodes
from gctl.store.engine import transaction
from gctl.store.models import IntentRow, JobRow


def _running(store: db.Store, where: str, indices: list[int], gpus: int | None = None) -> int:
    job = jobs.submit(store, [req(gpus or len(indices))])[0]
    on_gpus(store, job, where, indices, since=time.time() - 60)
    return job


def _migrate(store: db.Store, job: int, to: str | None = None) -> list[tuple[str, int]]:
    """``gctl migrate JOB [--to TO]`` recorded, then the GPUs the daemon would move it to."""
    jobs.act(store, job, "migrate", to=to)
    with transaction(store.engine, write=True) as s:
        intent = s.query(IntentRow).filter_by(job_id=job, kind="migrate").one()
        row = s.get(JobRow, job)
        assert row is not None
        return _target(store, s, row, intent.args.get("to"))


def test_without_to_the_scheduler_picks_the_best_free_set(store: db.Store) -> None:
    node(store, "a1")
    node(store, "a2")
    job = _running(store, "a1", [0, 1])
    _running(store, "a1", [2])
    _running(store, "a2", [3])
    # a1 has one GPU free; a2 has three, and 0-1 is the best-connected pair there.
    assert _migrate(store, job) == [("a2", 0), ("a2", 1)]


def test_without_to_other_gpus_of_the_same_node_may_be_chosen_never_its_own(
    store: db.Store,
) -> None:
    node(store, "a1")
    job = _running(store, "a1", [0, 1])
    assert _migrate(store, job) == [("a1", 2), ("a1", 3)]


def test_without_to_a_drained_node_is_passed_over(store: db.Store) -> None:
    node(store, "a1")
    node(store, "a2")
    job = _running(store, "a1", [0, 1])
    _running(store, "a1", [2, 3])
    nodes.set_admin_state(store, "a2", "drain", "fan failure")
    with pytest.raises(Refused, match=f"^no 2 free GPU\\(s\\) for job {job} to move to"):
        _migrate(store, job)


def test_without_to_a_job_is_never_spread_over_nodes(store: db.Store) -> None:
    for name in ("a1", "a2", "a3"):
        node(store, name)
    job = _running(store, "a1", [0, 1])
    _running(store, "a1", [2, 3])
    _running(store, "a2", [0, 1, 2])
    _running(store, "a3", [0, 1, 2])
    with pytest.raises(Refused, match="no 2 free GPU"):  # one free on a2, one on a3
        _migrate(store, job)


def test_without_to_a_job_larger_than_any_node_spans_the_fewest(store: db.Store) -> None:
    for name in ("a1", "a2", "a3"):
        node(store, name)
    big = _running(store, "a1", [0, 1, 2, 3], gpus=6)
    on_gpus(store, big, "a2", [0, 1], since=time.time() - 60)
    assert _migrate(store, big) == [("a2", 2), ("a2", 3), *(("a3", i) for i in range(4))]


def test_to_a_node_still_takes_its_best_free_set(store: db.Store) -> None:
    node(store, "a1")
    node(store, "a2", "2xV100-16GB")
    job = _running(store, "a1", [0, 1])
    assert _migrate(store, job, "a2") == [("a2", 0), ("a2", 1)]
