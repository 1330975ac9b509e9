"""What the daemon hands policies from a running job's SDK report: work done, measured rates.

The fraction of work done comes from its step/steps; a rate is dated from
the start of the window of steps it was measured over.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import cast

import pytest
from sqlalchemy import delete, select, update
from storekit import node, on_gpus, req

from gctl.config import SitePolicy
from gctl.core import packing
from gctl.daemon import passes
from gctl.daemon.datafill import Fills
from gctl.daemon.interference import Learned
from gctl.daemon.jobfiles import Report
from gctl.daemon.site import Site
from gctl.daemon.watch import Observation
from gctl.hosts.ssh import Pool
from gctl.services import db, jobs
from gctl.store import snapshot
from gctl.store.engine import transaction
from gctl.store.models import AllocationRow, JobRow, ProfileRow
from gctl.store.snapshot import CoreGpus, core_gpus, core_job_id


@dataclass
class _Site:
    """What recording profiles and reading the store use of a site."""

    store: db.Store
    learned: Learned = field(default_factory=Learned)
    policy: SitePolicy = field(default_factory=SitePolicy)
    done: dict[int, float] = field(default_factory=dict)
    fills: Fills = field(init=False)
    gpus: CoreGpus = field(default_factory=core_gpus)

    def __post_init__(self) -> None:
        self.fills = Fills(self.store, Pool())  # no dataset copies made


def _seen(
    job: int, progress: dict[str, object], began: float | None = None, read_at: float | None = None
) -> Observation:
    report = Report({"sdk": 1, "rate": 4.0, **progress}, None, None)
    began = time.time() if began is None else began
    return Observation(
        "n1", began, 0, True, reports={job: report}, attempts={job: 0}, read_at=read_at
    )


def _two_running(store: db.Store) -> tuple[int, int, float, Site]:
    """Two jobs running on n1's GPUs 0 and 1 since now: their ids, now, a site to record with."""
    node(store, "n1")
    t = time.time()
    a, b = jobs.submit(store, [req(1), req(1)])
    on_gpus(store, a, "n1", (0,), since=t)
    on_gpus(store, b, "n1", (1,), since=t)
    return a, b, t, cast(Site, _Site(store))


def test_a_jobs_fraction_done_reaches_the_policy_and_leaves_with_the_job(store: db.Store) -> None:
    with_total, without, _, site = _two_running(store)
    passes.record_profiles(site, [_seen(with_total, {"step": 30, "steps": 120})], {})
    passes.record_profiles(site, [_seen(without, {"step": 30})], {})
    snap, _ = passes._read(site, time.time(), (), {})
    done = snap.state.work_done
    assert done is not None
    assert done(core_job_id(with_total)) == 0.25
    assert done(core_job_id(without)) is None  # no total reported: unknown
    with transaction(store.engine, write=True) as s:  # as the daemon records its end
        s.execute(update(JobRow).where(JobRow.id == with_total).values(state="COMPLETED"))
        s.execute(delete(AllocationRow).where(AllocationRow.job_id == with_total))
    snap, _ = passes._read(site, time.time(), (), {})
    assert snap.state.work_done is not None
    assert snap.state.work_done(core_job_id(with_total)) is None
    assert with_total not in site.done  # finished jobs are forgotten


def test_a_pack_is_judged_only_on_rates_measured_since_it_began(store: db.Store) -> None:
    # The hosts' clock is an hour off the store's: only differences of its times are used.
    t, host = time.time(), time.time() + 3600.0
    node(store, "n1")
    a, b = jobs.submit(store, [req(1), req(1)])
    on_gpus(store, a, "n1", (0,), since=t + 10, mode="packed")
    on_gpus(store, b, "n1", (0,), since=t + 20, mode="packed")  # the pack began at t + 20
    with transaction(store.engine, write=True) as s:
        for job in (a, b):  # each alone before: 4 steps/s
            s.add(ProfileRow(job_id=job, at=t + 15, gpu_util=0.4, memory_mb=1, progress_rate=4.0))
    site = cast(Site, _Site(store))

    def look(began: float, span: float) -> list[Observation]:
        """Both jobs at 1 step/s over their last ``span`` s, reported 0.5 s before the look."""
        progress = {"rate": 1.0, "time": host - 0.5, "span": span}
        return [_seen(j, progress, began, read_at=host) for j in (a, b)]

    passes.record_profiles(site, look(t + 25, 8.0), {})  # windows began at t + 16.5: too early
    with transaction(store.engine, write=False) as s:
        since = s.scalars(select(ProfileRow.since).where(ProfileRow.at == t + 25)).all()
    assert since == [pytest.approx(t + 16.5)] * 2
    snap = snapshot.read(store.engine, now=t + 26)
    assert snap.state.jobs[core_job_id(b)].observed.since == pytest.approx(t + 16.5)
    assert packing.pack_rates(snap.state, snap.state.jobs[core_job_id(a)].gpus) is None
    passes.record_profiles(site, look(t + 30, 2.0), {})  # from t + 27.5: packed throughout
    snap = snapshot.read(store.engine, now=t + 31)
    assert packing.pack_rates(snap.state, snap.state.jobs[core_job_id(a)].gpus) == [0.25, 0.25]


def test_a_rate_without_a_window_or_a_dated_look_has_no_start(store: db.Store) -> None:
    a, b, t, site = _two_running(store)
    passes.record_profiles(site, [_seen(a, {"time": t, "span": 1.0})], {})  # an older agent
    passes.record_profiles(site, [_seen(b, {"time": t}, read_at=t)], {})  # an older SDK
    with transaction(store.engine, write=False) as s:
        assert s.scalars(select(ProfileRow.since)).all() == [None, None]
