"""Batch balancing on the test hosts: a data-parallel job over an emulated V100 and K80.

h1 has one emulated V100 and one emulated K80 (``1xV100-16GB,1xK80-12GB``);
the test image's training program runs a global batch of 256 over both, each
worker computing ``(A + T * b) / speed`` seconds a step (speed: 1.0 on the
V100, 0.213 on the K80, gavel's measured ratio). With the equal split the
V100 worker waits for the K80 one; the daemon profiles the job, fits each
GPU model's batch curve, and splits the batch so both take the same time.
Figures printed are of emulated GPUs.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import pytest
from daemonkit import STORES, Running, job_file, jobs_of, mean_rate, submit, wait
from sqlalchemy import select

from gctl.cli import render
from gctl.services import db, jobs, nodes
from gctl.store.engine import transaction
from gctl.store.models import BatchCurveRow, EventRow

pytestmark = pytest.mark.usefixtures("clean_hosts")

BATCH = ["--batch", "256", "--sample-time", "0.0005", "--fixed-time", "0.005"]
"""Per worker and step: 5 ms + 0.5 ms a sample on a V100 (69 ms at 128 samples)."""


def _batch(hosts: dict[str, Any], job: int) -> dict[str, Any]:
    text = job_file(hosts, STORES[-1], "h1", job, "progress.json")
    batch = json.loads(text).get("batch") if text else None
    return dict(batch) if isinstance(batch, dict) else {}


def _times(batch: dict[str, Any], local: list[int]) -> list[float] | None:
    """Each worker's mean seconds a step at its batch in ``local``, once measured."""
    got = {(w, b): t for w, b, t, _ in batch.get("points", [])}
    out = [got.get((w, b)) for w, b in enumerate(local)]
    return None if any(t is None for t in out) else [float(t) for t in out if t is not None]


def _splits(store: db.Store, job: int) -> list[tuple[float, dict[str, Any], str]]:
    with transaction(store.engine, write=False) as s:
        rows = s.execute(
            select(EventRow.at, EventRow.data, EventRow.message)
            .where(EventRow.job_id == job, EventRow.kind == "job.split")
            .order_by(EventRow.id)
        ).all()
    return [(at, dict(data), msg) for at, data, msg in rows]


def test_a_job_over_a_k80_and_a_v100_is_balanced(
    hosts: dict[str, Any],
    host_store_of: Callable[[str], db.Store],
    start_daemon: Callable[..., Running],
) -> None:
    store = host_store_of("1xV100-16GB,1xK80-12GB")
    nodes.set_admin_state(store, "h2", "drain", "only h1 in this test")
    job = submit(store, *BATCH, "--steps", "100000", "--step-time", "0", gpus=2)
    start_daemon(store)

    def wait_for(what: str, check: Callable[[], bool], timeout: float = 120.0) -> float:
        return wait(what, check, timeout, store)

    wait_for("the job running", lambda: jobs_of(store)[job].state == "RUNNING")
    wait_for("equal split measured", lambda: _times(_batch(hosts, job), [128, 128]) is not None)
    equal = _times(_batch(hosts, job), [128, 128])
    assert equal is not None
    v100, k80 = equal
    print(f"equal split: V100 worker {v100:.3f} s, K80 worker {k80:.3f} s a step"
          f" (straggler gap {k80 / v100:.2f}x; emulated)")  # fmt: skip
    assert k80 > 3 * v100  # the V100 worker waits most of every step

    def balanced() -> bool:
        splits = _splits(store, job)
        if not splits or ": split " not in splits[-1][2]:
            return False
        plan = splits[-1][1]["plan"]
        batch = _batch(hosts, job)
        return batch.get("version") == splits[-1][1]["version"] and bool(_times(batch, plan[-1][0]))

    wait_for("a balanced split taken and measured", balanced)
    time.sleep(2.0)  # a few steps at it
    batch = _batch(hosts, job)
    split = batch["local"]
    times = _times(batch, split)
    assert times is not None
    gap = max(times) / min(times) - 1
    rate = mean_rate(hosts, job, 3.0)
    speedup = max(equal) / max(times)  # a step lasts as long as its slowest worker
    print(f"balanced split {split}: worker times {times[0]:.3f} s and {times[1]:.3f} s"
          f" ({gap:.1%} apart); {speedup:.2f}x the equal split's steps/s;"
          f" {rate:.2f} steps/s measured over 3 s (emulated GPUs)")  # fmt: skip
    assert sum(split) == 256 and split[0] > split[1]  # the V100 takes more
    assert gap <= 0.05
    assert speedup > 1.5
    assert rate > 0.8 / max(times)
    events = _splits(store, job)
    assert "profiling" in events[0][2]  # the first plan was the profile
    shown = jobs.show_job(store, job).runtime["split"]
    assert shown["local"] == split and not shown["profile"]
    assert render._split(shown).startswith(f"BatchSplit={split[0]},{split[1]} (balanced)")
    with transaction(store.engine, write=False) as s:
        curves = {r.gpu_type: (r.alpha, r.beta) for r in s.scalars(select(BatchCurveRow))}
    assert set(curves) == {"V100", "K80"}
    assert curves["K80"][1] > 3 * curves["V100"][1]  # per sample, the K80 is slower


def _packed_at(store: db.Store, job: int) -> float | None:
    """When ``job`` last began a turn packed with another job, if it did."""
    with transaction(store.engine, write=False) as s:
        rows = s.execute(
            select(EventRow.at, EventRow.message)
            .where(EventRow.kind.in_(("job.resume", "job.pack")))
            .order_by(EventRow.id)
        ).all()
    at = [t for t, msg in rows if "packed with job" in msg or f"beside job {job}" in msg]
    return at[-1] if at else None


def test_a_job_packed_beside_it_brings_a_new_split_within_one_pass(
    hosts: dict[str, Any],
    host_store_of: Callable[[str], db.Store],
    start_daemon: Callable[..., Running],
) -> None:
    """A BERT-like job balanced over a V100 and a K80; an A3C-like job arrives and pairs up.

    The pair table predicts BERT beside A3C at 0.75 of its speed on a V100
    and 0.41 on a K80, so the split must move further onto the V100 as soon
    as the two run together.
    """
    store = host_store_of("1xV100-16GB,1xK80-12GB")
    nodes.set_admin_state(store, "h2", "drain", "only h1 in this test")
    light = ["GCTL_EMULATED_UTIL=30"]
    job = submit(store, *BATCH, "--steps", "100000", "--step-time", "0", gpus=2,
                 profile="bert", env=light)  # fmt: skip
    daemon = start_daemon(store)

    def wait_for(what: str, check: Callable[[], bool], timeout: float = 120.0) -> float:
        return wait(what, check, timeout, store)

    wait_for("a balanced split", lambda: any(": split " in m for _, _, m in _splits(store, job)))
    before = len(_splits(store, job))
    other = submit(store, "--steps", "100000", "--step-time", "0.05", "--gpu-busy", "0.5",
                   gpus=2, profile="a2c", env=light)  # fmt: skip
    wait_for("the two jobs running packed", lambda: _packed_at(store, job) is not None, 180.0)
    packed = _packed_at(store, job)
    assert packed is not None
    wait_for("a new split", lambda: len(_splits(store, job)) > before, 30.0)
    at, data, why = _splits(store, job)[before]
    every = daemon.daemon.config.introspect_every
    print(f"new split {data['plan'][-1][0]} {at - packed:.2f} s after the pack"
          f" (introspective pass every {every:g} s): {why}")  # fmt: skip
    assert at - packed <= every + 2.0  # the next pass, give or take a slow tick or two
    assert "shares its GPU" in why
    old = next(d for _, d, m in reversed(_splits(store, job)[:before]) if ": split " in m)
    assert data["plan"][-1][0][0] > old["plan"][-1][0][0]  # more of the batch on the V100
    assert jobs_of(store)[other].state == "RUNNING"
    assert _splits(store, other) == []  # gave the SDK no batch: never profiled or split
