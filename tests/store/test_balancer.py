"""The daemon's batch balancer on a real store: profile first, fit, split, borrow by kind.

No hosts: the jobs' reports are built here as the job SDK writes them, and
only the decisions (not the writes over SSH) are checked.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, cast

import pytest
from sqlalchemy import delete, select, update
from storekit import node, on_gpus, req

from gctl.core.interference import CoRun, Interference, Predictor
from gctl.daemon.batching import Balancer, BatchOptions
from gctl.daemon.jobfiles import Report
from gctl.daemon.site import Site
from gctl.services import db, jobs
from gctl.store.engine import transaction
from gctl.store.models import AllocationRow, BatchCurveRow, JobRow

V100 = (0.005, 0.0005)
K80 = (0.005 / 0.213, 0.0005 / 0.213)


@dataclass
class _Store:
    """What the balancer's decisions read of a site: its store."""

    store: db.Store


def _site(store: db.Store) -> Site:
    return cast(Site, _Store(store))


def _report(local: list[int], version: int, points: list[list[Any]], rate: float = 5.0) -> Report:
    batch = {"global": sum(local), "local": local, "version": version, "points": points}
    return Report({"step": 10, "sdk": 1, "rate": rate, "batch": batch}, None, None)


def _points(splits: list[list[int]]) -> list[list[Any]]:
    """What the SDK reports after running each split: worker, batch, mean seconds, steps."""
    out = []
    for split in splits:
        for worker, (b, (alpha, beta)) in enumerate(zip(split, (V100, K80), strict=True)):
            out.append([worker, b, alpha + beta * b, 5])
    return out


def _job(store: db.Store, t: float, profile: str | None = "bert") -> int:
    (job,) = jobs.submit(store, [req(2, profile=profile)])
    on_gpus(store, job, "m1", (0, 1), since=t)
    return job


@pytest.fixture
def mixed(store: db.Store) -> db.Store:
    node(store, "m1", "1xV100-16GB,1xK80-12GB")
    return store


def test_a_new_job_is_profiled_once_then_balanced(mixed: db.Store) -> None:
    t = time.time()
    job = _job(mixed, t)
    site, balancer, none = _site(mixed), Balancer(BatchOptions(profile_steps=30)), Interference()
    first = balancer.decide(site, {job: (0, _report([128, 128], 0, _points([[128, 128]])))}, none)
    assert [(w.job_id, w.version) for w in first] == [(job, 1)]
    plan = first[0].plan
    assert plan == [[[128, 128], 10], [[96, 160], 10], [[160, 96], 10], [[128, 128], None]]
    assert "profiling 3 splits x 10 steps" in first[0].why
    # the job has not taken it yet: nothing more; not profiled twice
    assert (
        balancer.decide(site, {job: (0, _report([128, 128], 0, _points([[128, 128]])))}, none) == []
    )
    profiled = _points([[128, 128], [96, 160], [160, 96]])
    second = balancer.decide(site, {job: (0, _report([160, 96], 1, profiled))}, none)
    assert len(second) == 1 and second[0].version == 2
    split = second[0].plan[-1][0]
    assert sum(split) == 256 and split[0] > 200  # most of the batch on the V100
    assert second[0].why.startswith("split [160, 96] -> [218, 38] of 256")
    assert "V100: measured" in second[0].why
    with transaction(mixed.engine, write=False) as s:
        kept = {r.gpu_type: (r.alpha, r.beta) for r in s.scalars(select(BatchCurveRow))}
    assert kept["K80"] == (pytest.approx(K80[0]), pytest.approx(K80[1]))
    # taken and measured: balanced already, nothing to change
    done = balancer.decide(site, {job: (0, _report(split, 2, profiled))}, none)
    assert done == []


def test_a_job_of_a_known_kind_borrows_its_curves_and_skips_the_profile(mixed: db.Store) -> None:
    t = time.time()
    first = _job(mixed, t)
    balancer = Balancer()
    profiled = _points([[128, 128], [96, 160], [160, 96]])
    balancer.decide(_site(mixed), {first: (0, _report([160, 96], 1, profiled))}, Interference())
    with transaction(mixed.engine, write=True) as s:  # it ended and gave its GPUs back
        s.execute(delete(AllocationRow).where(AllocationRow.job_id == first))
        s.execute(update(JobRow).where(JobRow.id == first).values(state="COMPLETED"))
    later = _job(mixed, t + 100)
    out = balancer.decide(_site(mixed), {later: (0, _report([128, 128], 0, []))}, Interference())
    assert len(out) == 1 and out[0].plan[-1][0][0] > 200  # straight to a balanced split
    assert f"borrowed from job {first}" in out[0].why


def test_a_shared_gpu_moves_the_split_and_a_job_without_a_batch_is_left_alone(
    mixed: db.Store,
) -> None:
    t = time.time()
    job = _job(mixed, t)
    balancer = Balancer()
    profiled = _points([[128, 128], [96, 160], [160, 96]])
    alone = balancer.decide(
        _site(mixed), {job: (0, _report([160, 96], 1, profiled))}, Interference()
    )
    split = alone[0].plan[-1][0]
    (other,) = jobs.submit(mixed, [req(2, profile="a2c")])
    on_gpus(mixed, other, "m1", (0, 1), since=t + 50, mode="packed")
    predict = Interference(
        {
            "v100": Predictor.fit(observed=[CoRun("bert", "a2c", 3.0)]),
            "k80": Predictor.fit(observed=[CoRun("bert", "a2c", 1.0)]),
        }
    )
    out = balancer.decide(
        _site(mixed),
        {
            job: (0, _report(split, 2, profiled)),
            other: (0, Report({"step": 3, "sdk": 1}, None, None)),
        },
        predict,
    )
    assert [w.job_id for w in out] == [job]  # the other job gave no batch: never split
    moved = out[0].plan[-1][0]
    assert moved[0] < split[0]  # its V100 worker is now the slower one: less on it
    assert "worker 0 shares its GPU (3.00x predicted)" in out[0].why
