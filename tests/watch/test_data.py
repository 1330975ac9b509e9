"""The data layer: one frame from the services, GPU sharing modes, history, staleness."""

from __future__ import annotations

import time
from typing import Any

import pytest
from sqlalchemy import update
from watchkit import T

from gctl.services import dashboard, db
from gctl.services.dashboard import Holder
from gctl.services.db import Store
from gctl.store.engine import transaction
from gctl.store.models import NodeRow
from gctl.watch.actions import job_action, node_action
from gctl.watch.data import Feed, FrameSource
from gctl.watch.fmt import coarse_age, height_bar, sparkline
from gctl.watch.frame import GpuCell
from gctl.watch.history import gpu_series
from gctl.watch.panels import _jobs_cell


def test_frame_shows_modes_slices_and_heights(busy: Store) -> None:
    frame = FrameSource(busy, lambda: T).build()
    assert frame.taken_at == T
    n1, n2, _, n4 = (frame.node(n) for n in ("n1", "n2", "n3", "n4"))
    assert n1 is not None and n2 is not None and n4 is not None
    assert [g.mode for g in n1.gpus] == ["exclusive", "exclusive", "packed", "idle"]
    assert (n2.gpus[0].mode, n2.gpus[0].slice_holder) == ("time-sliced", 4)
    assert [g.slice_holder for g in n4.gpus] == [7, 10]
    assert n4.view.height == 2.0 and n4.view.state == "alloc"
    job6 = frame.job(6)
    assert job6 is not None
    assert (job6.where, job6.mechanism, job6.state) == ("n3:0,1,2,3", "checkpoint", "RUNNING")
    assert [e.kind for e in frame.events][-2:] == ["node.drain", "job.resume"]


def test_gpu_history_sums_the_jobs_sharing_it(busy: Store) -> None:
    frame = FrameSource(busy, lambda: T).build()
    n1 = frame.node("n1")
    assert n1 is not None
    util, mem = gpu_series(n1.gpus[2], frame.samples)  # jobs 2 and 3 packed
    assert len(util) == 10 and all(0.0 <= u <= 1.0 for u in util)
    two, three = frame.samples[2][-1], frame.samples[3][-1]
    assert util[-1] == min(1.0, two.util + three.util)
    assert mem[-1] == two.memory_mb + three.memory_mb
    _, exclusive_mem = gpu_series(n1.gpus[0], frame.samples)  # job 1 on 2 GPUs
    assert exclusive_mem[-1] == frame.samples[1][-1].memory_mb // 2


def test_history_reads_only_new_samples(busy: Store) -> None:
    source = FrameSource(busy, lambda: T)
    first = source.build()
    again = source.build()
    assert again.samples == first.samples


def test_store_away_keeps_last_frame_with_its_age(busy: Store) -> None:
    now = [T]
    feed = Feed(FrameSource(busy, lambda: now[0]))
    good = feed.refresh()
    feed.source.store = db.connect("/nonexistent-dir/gctl.db")
    now[0] = T + 42
    assert feed.refresh() is good
    assert feed.error and feed.age() == 42


def test_actions_report_service_messages(busy: Store) -> None:
    assert job_action(busy, 1, "suspend").ok
    refused = job_action(busy, 1, "resume")
    assert not refused.ok and "needs SUSPENDED" in refused.message
    assert not node_action(busy, "n1", "drain", None).ok  # a reason is required
    assert node_action(busy, "n1", "drain", "fan").message == "node n1 drained: now drng"


def test_formats() -> None:
    assert height_bar(2.0).plain.startswith("████████│████████")
    assert height_bar(0.5).plain.startswith("████····│")
    assert sparkline([0.0, 1.0], 1.0, 4) == "  ▁█"
    assert [coarse_age(s) for s in (5, 600, 4000, 90000)] == ["<1m", "10m", "1h06m", "1d01h"]


def test_an_opportunistic_job_is_marked_alone_and_beside_a_production_job() -> None:
    guest = Holder(9, "opportunistic", True, 1)
    alone = GpuCell("n1", 0, "V100", 16384, True, (guest,))
    beside = GpuCell("n1", 1, "V100", 16384, True, (Holder(4, "exclusive", True, 1), guest))
    assert (alone.mode, beside.mode) == ("opportunistic", "tgs")
    assert _jobs_cell(beside).plain == "#4 ~#9"
    assert beside.slice_holder is None  # both run: nobody waits for a slice


def test_the_stamp_is_read_again_only_after_a_write_yet_follows_nodes_going_quiet(
    busy: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SQLite's data_version spares the read while nobody writes; time still counts."""
    reads: list[int] = []
    real = dashboard._stamp_rows

    def counted(store: Store) -> Any:
        reads.append(1)
        return real(store)

    monkeypatch.setattr(dashboard, "_stamp_rows", counted)
    clock = [time.time()]
    monkeypatch.setattr(dashboard, "now", lambda: clock[0])
    stamper = dashboard.Stamper(busy)
    first = stamper.stamp()
    assert stamper.stamp() == first and len(reads) == 1  # nothing written: not read again
    with transaction(busy.engine, write=True) as s:  # another connection commits
        s.execute(update(NodeRow).where(NodeRow.name == "n1").values(reason="fan"))
    changed = stamper.stamp()
    assert changed != first and len(reads) == 2
    clock[0] += 3600  # an hour without heartbeats: every node stops answering
    quiet = stamper.stamp()
    assert quiet != changed and len(reads) == 2  # judged anew, not read anew
