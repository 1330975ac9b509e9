"""The daemon hands policies each running job's fraction of work done, from its SDK's step/steps."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import cast

from sqlalchemy import delete, update
from storekit import node, on_gpus, req

from gctl.config import SitePolicy
from gctl.daemon import passes
from gctl.daemon.datafill import Fills
from gctl.daemon.interference import Learned
from gctl.daemon.jobfiles import Report
from gctl.daemon.site import Site
from gctl.daemon.watch import Observation
from gctl.hosts.ssh import Pool
from gctl.services import db, jobs
from gctl.store.engine import transaction
from gctl.store.models import AllocationRow, JobRow
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


def _seen(job: int, progress: dict[str, object]) -> Observation:
    report = Report({"sdk": 1, "rate": 4.0, **progress}, None, None)
    return Observation("n1", time.time(), 0, True, reports={job: report}, attempts={job: 0})


def test_a_jobs_fraction_done_reaches_the_policy_and_leaves_with_the_job(store: db.Store) -> None:
    node(store, "n1")
    t = time.time()
    with_total, without = jobs.submit(store, [req(1), req(1)])
    on_gpus(store, with_total, "n1", (0,), since=t)
    on_gpus(store, without, "n1", (1,), since=t)
    site = cast(Site, _Site(store))
    passes.record_profiles(site, [_seen(with_total, {"step": 30, "steps": 120})], {})
    passes.record_profiles(site, [_seen(without, {"step": 30})], {})
    snap, _ = passes._read(site, time.time(), ())
    done = snap.state.work_done
    assert done is not None
    assert done(core_job_id(with_total)) == 0.25
    assert done(core_job_id(without)) is None  # no total reported: unknown
    with transaction(store.engine, write=True) as s:  # as the daemon records its end
        s.execute(update(JobRow).where(JobRow.id == with_total).values(state="COMPLETED"))
        s.execute(delete(AllocationRow).where(AllocationRow.job_id == with_total))
    snap, _ = passes._read(site, time.time(), ())
    assert snap.state.work_done is not None
    assert snap.state.work_done(core_job_id(with_total)) is None
    assert with_total not in site.done  # finished jobs are forgotten
