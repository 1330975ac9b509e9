"""Interference learned online: measured packs become co-runs, co-runs become predictions."""

from __future__ import annotations

import time

import pytest
from sqlalchemy import func, select
from storekit import node, on_gpus, req

from gctl.cli import render
from gctl.daemon import interference
from gctl.daemon.interference import Learned, record_coruns
from gctl.services import db, jobs
from gctl.store import snapshot
from gctl.store.engine import transaction
from gctl.store.models import CoRunRow, ProfileRow


def _sample(store: db.Store, job: int, at: float, rate: float, util: float = 0.4) -> None:
    with transaction(store.engine, write=True) as s:
        s.add(ProfileRow(job_id=job, at=at, gpu_util=util, memory_mb=2000, progress_rate=rate))


def _packed_pair(store: db.Store, t: float, profiles: tuple[str | None, str | None]) -> list[int]:
    """Two jobs packed on a1's GPU 0 since t + 20, each measured alone before and packed after."""
    node(store, "a1", "2xK80-12GB")
    a, b = jobs.submit(store, [req(1, profile=profiles[0]), req(1, profile=profiles[1])])
    on_gpus(store, a, "a1", (0,), since=t + 10, mode="packed")
    on_gpus(store, b, "a1", (0,), since=t + 20, mode="packed")
    _sample(store, a, t + 15, 10.0)  # alone
    _sample(store, a, t + 30, 8.0)  # packed: 1.25x slower
    return [a, b]


def _rows(store: db.Store) -> list[tuple[int, int, str, str, str, float]]:
    with transaction(store.engine, write=False) as s:
        return [
            (r.job_id, r.partner_id, r.kind, r.partner_kind, r.gpu_type, round(r.slowdown, 3))
            for r in s.scalars(select(CoRunRow).order_by(CoRunRow.id))
        ]


def test_a_measured_pack_is_recorded_once_per_job_and_learned(store: db.Store) -> None:
    t = time.time()
    a, b = _packed_pair(store, t, ("resnet18", None))
    # b was never measured alone: nothing to learn yet
    assert record_coruns(store.engine, snapshot.read(store.engine, now=t + 40), t + 40) == 0
    _sample(store, b, t + 5, 4.0)  # b's rate alone (an earlier run)
    _sample(store, b, t + 35, 2.0)  # packed: half speed
    snap = snapshot.read(store.engine, now=t + 40)
    assert record_coruns(store.engine, snap, t + 40) == 2
    b_kind = "train:1 python t.py"  # no --profile: known by image and command
    assert _rows(store) == [
        (a, b, "resnet18", b_kind, "K80", 1.25),
        (b, a, b_kind, "resnet18", "K80", 2.0),
    ]
    # measured again, unchanged: no new rows
    record_coruns(store.engine, snapshot.read(store.engine, now=t + 50), t + 50)
    assert len(_rows(store)) == 2
    learned = Learned().interference(store.engine)
    got = learned.predictor("K80").slowdown("resnet18", b_kind)
    assert (got.source, round(got.slowdown, 3)) == ("observed", 1.25)
    # V100 knows nothing of this pair but has the pair table for the trace models
    table = learned.predictor("V100").slowdown("resnet18", "vgg16")
    assert table.source == "model"
    assert table.slowdown == pytest.approx(1 / 0.75, rel=0.05)  # gavel: resnet18 at 0.75


def test_the_predictor_is_refitted_only_when_co_runs_change(store: db.Store) -> None:
    t = time.time()
    _, b = _packed_pair(store, t, ("x", "y"))
    _sample(store, b, t + 5, 4.0)
    _sample(store, b, t + 35, 2.0)
    learned = Learned()
    before = learned.interference(store.engine)
    assert learned.interference(store.engine) is before
    record_coruns(store.engine, snapshot.read(store.engine, now=t + 40), t + 40)
    after = learned.interference(store.engine)
    assert after is not before
    assert after.predictor("k80").slowdown("y", "x").slowdown == pytest.approx(2.0)


def test_only_the_newest_co_runs_are_kept(store: db.Store, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(interference, "MAX_CORUNS", 3)
    t = time.time()
    _, b = _packed_pair(store, t, ("x", "y"))
    _sample(store, b, t + 5, 4.0)
    for i in range(3):
        _sample(store, b, t + 35 + i, 2.0 + i)  # a new measurement each pass
        record_coruns(store.engine, snapshot.read(store.engine, now=t + 40 + i), t + 40 + i)
    with transaction(store.engine, write=True) as s:
        assert s.scalar(select(func.count()).select_from(CoRunRow)) == 2  # a row per job of it
        for old in (99, 97):
            s.add(
                CoRunRow(
                    job_id=old,
                    partner_id=98,
                    packed_at=1.0,
                    kind="p",
                    partner_kind="q",
                    gpu_type="V100",
                    slowdown=1.5,
                )
            )
    _sample(store, b, t + 60, 9.0)
    record_coruns(store.engine, snapshot.read(store.engine, now=t + 70), t + 70)
    with transaction(store.engine, write=False) as s:
        kept = s.scalars(select(CoRunRow.job_id).order_by(CoRunRow.id)).all()
    assert kept == [b, 99, 97]  # a's row was the oldest


def test_show_job_gives_a_packed_jobs_measured_slowdown(store: db.Store) -> None:
    t = time.time()
    a, b = _packed_pair(store, t, ("x", "y"))
    assert jobs.show_job(store, a).runtime["interference"] is None  # nothing measured yet
    _sample(store, b, t + 5, 4.0)
    _sample(store, b, t + 35, 2.0)
    record_coruns(store.engine, snapshot.read(store.engine, now=t + 40), t + 40)
    shown = jobs.show_job(store, a).runtime["interference"]
    assert (shown["partner"], shown["gpu_type"], shown["slowdown"]) == (b, "K80", 1.25)
    line = render._interference(shown)
    assert line.startswith(f"Interference=1.25x BesideJob={b} GPU=K80 (measured) (emulated)")
