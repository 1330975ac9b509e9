"""Grow and shrink of elastic jobs.

Elastic jobs grow onto free GPUs of their own node only after the cluster
has had free GPUs and no waiting work for an idle period, and not again
within that period of their last resize (no thrash); they shrink at once,
down to their minimum, when queued jobs need the GPUs.
"""

from __future__ import annotations

from gctl.core.decisions import Decision, Grow, Shrink
from gctl.core.model import JobStatus
from gctl.core.state import ClusterState, JobState


def _resizable(state: ClusterState, js: JobState) -> bool:
    key = js.gpus
    return (
        js.status is JobStatus.RUNNING
        and js.spec.can_checkpoint
        and len(state.groups.get(key, ())) == 1
        and bool(key)
        and key[0][0] == key[-1][0]
    )


def grow(state: ClusterState, now: float, idle_period: float) -> list[Decision]:
    """Give elastic jobs free GPUs on their node, up to their maximum."""
    out: list[Decision] = []
    for job_id in list(state.elastic):
        js = state.jobs[job_id]
        limit = js.spec.elastic_max or js.held
        if js.held >= limit or not _resizable(state, js):
            continue
        if js.resized_at is not None and now - js.resized_at < idle_period:
            continue
        ns = state.nodes[js.gpus[0][0]]
        extra = min(ns.free, limit - js.held) if ns.open else 0
        if extra <= 0:
            continue
        chosen = ns.topo.extend(tuple(i for _, i in js.gpus), ns.free_mask, extra)
        if chosen is None:
            continue
        gpus = tuple((ns.name, i) for i in chosen)
        why = f"cluster idle for {idle_period:g}s; grown {js.held}->{len(gpus)} GPUs"
        out += state.commit([Grow(js.id, gpus, why)], now)
    return out


def shrink(state: ClusterState, now: float, deficit: int) -> list[Decision]:
    """Free up to ``deficit`` GPUs from elastic jobs above their minimum, biggest surplus first."""
    out: list[Decision] = []
    jobs = [state.jobs[j] for j in state.elastic]
    jobs.sort(key=lambda j: (-(j.held - (j.spec.elastic_min or j.held)), j.seq))
    for js in jobs:
        if deficit <= 0:
            break
        floor = js.spec.elastic_min or js.held
        give = min(js.held - floor, deficit)
        if give <= 0 or not _resizable(state, js):
            continue
        ns = state.nodes[js.gpus[0][0]]
        mask = 0
        for _, i in js.gpus:
            mask |= 1 << i
        keep = ns.topo.best_set(mask, js.held - give)
        if keep is None:
            continue
        gpus = tuple((ns.name, i) for i in keep)
        why = f"queued jobs need GPUs; shrunk {js.held}->{len(gpus)}"
        out += state.commit([Shrink(js.id, gpus, why)], now)
        deficit -= give
    return out
