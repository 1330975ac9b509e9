"""Use-case layer for ``gctl sim``: load a trace, prepare it, run policies, compare them.

The CLI parses arguments and renders; everything it shows comes from here.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from gctl.core.model import Cluster
from gctl.core.policy import load_policy
from gctl.sim import profiles
from gctl.sim.cluster_spec import parse_cluster
from gctl.sim.engine import SimResult, Simulator
from gctl.sim.metrics import compare
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
    virtual_cluster: str | None = None
    limit: int | None = None
    window: tuple[float, float] | None = None


@dataclass(frozen=True, slots=True)
class SimReport:
    """Results of every policy on the same jobs; ``changes`` is the first against the second."""

    trace: str
    cluster: str
    total_gpus: int
    jobs: int
    results: tuple[SimResult, ...]
    changes: dict[str, dict[str, float | None]] | None

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
                }
                for r in self.results
            ],
            "changes": self.changes,
        }


def prepare(jobs: Sequence[TraceJob], seed: int, elastic_fraction: float) -> list[TraceJob]:
    """Give model-less jobs a model from the known mix and make a fraction elastic, seeded.

    ``philly.csv`` has no model names; drawing one per job from the models of
    the Philly model traces keeps packing and locality effects heterogeneous.
    Elastic jobs may shrink to 1 GPU and grow to twice their request.
    """
    rng = random.Random(seed)
    names = profiles.known_models()
    out: list[TraceJob] = []
    for job in jobs:
        spec = job.spec
        if spec.profile is None:
            spec = replace(spec, profile=rng.choice(names))
        if elastic_fraction > 0 and rng.random() < elastic_fraction:
            spec = replace(spec, elastic_min=1, elastic_max=2 * spec.gpus)
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
    jobs = prepare(loaded, request.seed, request.elastic_fraction)
    results = []
    for policy in policies:
        report: Callable[[int, int], None] | None = None
        if progress is not None:
            name = policy.name

            def report(done: int, total: int, name: str = name) -> None:
                progress(name, done, total)

        sim = Simulator(cluster, policy, request.perf, tick=request.tick)
        results.append(sim.run(jobs, report))
    changes = None
    if len(results) > 1:
        changes = compare(results[1].metrics, results[0].metrics)
    return SimReport(
        str(request.trace),
        request.cluster,
        cluster.total_gpus,
        len(jobs),
        tuple(results),
        changes,
    )
