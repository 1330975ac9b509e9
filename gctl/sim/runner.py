"""Use-case layer for ``gctl sim``: load a trace, prepare it, run policies, compare them.

The CLI parses arguments and renders; everything it shows comes from here,
and so does the per-job CSV (:func:`per_job_rows`, :func:`write_per_job`); the
``--plot`` picture is drawn by :mod:`gctl.sim.plot`.
"""

from __future__ import annotations

import csv
import io
import os
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from gctl.core.model import Cluster, JobClass
from gctl.core.policy import load_policy
from gctl.sim import profiles
from gctl.sim.cluster_spec import parse_cluster
from gctl.sim.datasets import DataModel, assign, catalogue
from gctl.sim.engine import SimResult, Simulator
from gctl.sim.metrics import JobRecord, compare
from gctl.sim.perf import PerfConfig
from gctl.sim.traces import load_trace
from gctl.sim.workload import TraceJob

Progress = Callable[[str, int, int], None]
"""Called as ``(policy, jobs done, jobs total)`` while a simulation runs."""


@dataclass(frozen=True, slots=True)
class SimRequest:
    """Everything one ``gctl sim run`` needs."""

    trace: Path
    cluster: str = "12x8"
    policies: tuple[str, ...] = ("gandiva",)
    policy_options: dict[str, Any] = field(default_factory=dict)
    perf: PerfConfig = field(default_factory=PerfConfig)
    tick: float = 60.0
    seed: int = 0
    elastic_fraction: float = 0.0
    opportunistic_fraction: float = 0.0
    virtual_cluster: str | None = None
    limit: int | None = None
    window: tuple[float, float] | None = None
    datasets: int = 0
    """Datasets in the catalogue the jobs read from (:mod:`gctl.sim.datasets`); 0: none."""
    data_bandwidth: float = 1.0
    """GB/s a node copies a dataset at."""
    data_affinity: bool = True
    """Whether placement sees the nodes' caches."""
    cache_size: float = 2000.0
    """GB each node's dataset cache holds."""


@dataclass(frozen=True, slots=True)
class SimReport:
    """Results of every policy on the same jobs, the first against each of the others.

    ``results`` holds the evaluated policy first, then the baselines in the
    order asked for. ``changes`` maps each baseline's name to
    :func:`~gctl.sim.metrics.compare` of it (``base``) with the evaluated
    policy (``new``), in the same order; it is empty when there is no
    baseline. ``records`` holds each policy's job records in trace order, in
    the order of ``results`` (jobs too large for the cluster have none).
    """

    trace: str
    cluster: str
    total_gpus: int
    jobs: int
    results: tuple[SimResult, ...]
    changes: dict[str, dict[str, dict[str, float | None]]]
    records: tuple[tuple[JobRecord, ...], ...] = ()

    def to_dict(self) -> dict[str, object]:
        """JSON-ready form with stable keys."""
        return {
            "trace": self.trace,
            "cluster": self.cluster,
            "total_gpus": self.total_gpus,
            "jobs": self.jobs,
            "results": [
                {
                    "policy": r.policy,
                    "metrics": r.metrics.to_dict(),
                    "rejected": list(r.rejected),
                    "unfinished": list(r.unfinished),
                    "events": r.events,
                    "wall_seconds": round(r.wall_seconds, 3),
                    "classes": {c: m.to_dict() for c, m in r.classes.items()},
                }
                for r in self.results
            ],
            "changes": self.changes,
        }


def prepare(
    jobs: Sequence[TraceJob],
    seed: int,
    elastic_fraction: float,
    opportunistic_fraction: float = 0.0,
) -> list[TraceJob]:
    """Give model-less jobs a model from the known mix; make fractions elastic and opportunistic.

    ``philly.csv`` has no model names; drawing one per job from the models of
    the Philly model traces keeps packing and locality effects heterogeneous.
    Elastic jobs may shrink to 1 GPU and grow to twice their request.
    Opportunistic jobs are drawn from a stream of their own, so the
    production jobs are the same as in a run without any (the baseline of
    ``bench/opportunistic.py``); they declare their model's GPU memory, as a
    user would with ``--gpu-mem``, so they only join production jobs they fit
    beside.
    """
    rng = random.Random(seed)
    guests = random.Random(f"{seed}:opportunistic")
    names = profiles.known_models()
    out: list[TraceJob] = []
    for job in jobs:
        spec = job.spec
        if spec.profile is None:
            spec = replace(spec, profile=rng.choice(names))
        if elastic_fraction > 0 and rng.random() < elastic_fraction:
            spec = replace(spec, elastic_min=1, elastic_max=2 * spec.gpus)
        if opportunistic_fraction > 0 and guests.random() < opportunistic_fraction:
            mem = profiles.profile_for(spec.profile).gpu_mem_mb
            spec = replace(spec, job_class=JobClass.OPPORTUNISTIC, gpu_mem_mb=mem)
        out.append(replace(job, spec=spec) if spec is not job.spec else job)
    return out


def run(request: SimRequest, progress: Progress | None = None) -> SimReport:
    """Run every requested policy on the same prepared jobs and compare them."""
    cluster: Cluster = parse_cluster(request.cluster)
    policies = [
        load_policy(name, **(request.policy_options if i == 0 else {}))
        for i, name in enumerate(request.policies)
    ]
    loaded = load_trace(
        request.trace,
        virtual_cluster=request.virtual_cluster,
        limit=request.limit,
        window=request.window,
    )
    jobs = prepare(loaded, request.seed, request.elastic_fraction, request.opportunistic_fraction)
    data = None
    if request.datasets > 0:
        sizes = catalogue(request.datasets, request.seed)
        jobs = assign(jobs, sizes, request.seed)
        data = DataModel(sizes, request.data_bandwidth, request.data_affinity, request.cache_size)
    order = {job.spec.id: i for i, job in enumerate(jobs)}
    results = []
    records = []
    for policy in policies:
        report: Callable[[int, int], None] | None = None
        if progress is not None:
            name = policy.name

            def report(done: int, total: int, name: str = name) -> None:
                progress(name, done, total)

        sim = Simulator(cluster, policy, request.perf, tick=request.tick, data=data)
        results.append(sim.run(jobs, report))
        records.append(tuple(sorted(sim.records, key=lambda r: order[r.job_id])))
    changes = {r.policy: compare(r.metrics, results[0].metrics) for r in results[1:]}
    return SimReport(
        str(request.trace),
        request.cluster,
        cluster.total_gpus,
        len(jobs),
        tuple(results),
        changes,
        tuple(records),
    )


PER_JOB_HEADER: tuple[str, ...] = (
    "policy",
    "job_id",
    "gpus",
    "submit",
    "start",
    "end",
    "jct",
    "queueing",
    "suspends",
    "moves",
)
"""Columns of the ``--per-job`` CSV.

One row per job per policy, policies in the order of the report and jobs in
trace order. Times are seconds on the trace's clock: ``start`` is the job's
first progress and ``queueing`` is ``start - submit``, both empty if it never
ran; ``end`` and ``jct`` (``end - submit``) are empty if it never finished.
``suspends`` counts Suspend decisions taken on the job; ``moves`` counts its
Migrate and Requeue decisions. Jobs too large for the cluster have no row.
"""


def _cell(value: float | None) -> str:
    """A CSV cell for a time: ``repr`` of the float (exact), or empty for ``None``."""
    return "" if value is None else repr(float(value))


def per_job_rows(report: SimReport) -> list[list[str]]:
    """The ``--per-job`` rows of ``report``, without the header (see :data:`PER_JOB_HEADER`)."""
    rows: list[list[str]] = []
    for result, records in zip(report.results, report.records, strict=True):
        for r in records:
            rows.append(
                [
                    result.policy,
                    r.job_id,
                    str(r.gpus),
                    _cell(r.submit),
                    _cell(r.first_run),
                    _cell(r.finish),
                    _cell(r.jct),
                    _cell(r.queueing_delay),
                    str(r.suspends),
                    str(r.moves),
                ]
            )
    return rows


def write_per_job(path: Path, rows: Sequence[Sequence[str]]) -> None:
    """Write ``rows`` under :data:`PER_JOB_HEADER` to ``path`` as CSV, all or nothing."""
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(PER_JOB_HEADER)
    writer.writerows(rows)
    write_atomic(path, buf.getvalue())


def write_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` (UTF-8, newlines as given), all or nothing.

    The file is written beside ``path`` under a temporary name and renamed
    over it, so a reader never sees half a file and a failed write leaves
    any earlier file in place. Raises :class:`OSError` as the file system does.
    """
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "w", encoding="utf-8", newline="") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
