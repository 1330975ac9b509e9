"""Cost of one Gandiva introspective pass over a large, oversubscribed cluster.

Builds 1,000 nodes x 8 GPUs (8,000 GPUs) with 20,000 live jobs placed by the
reactive pass (exclusive where GPUs are free, time-sliced up to max height
beyond), gives every job a profile sample with seeded random utilisation,
memory and progress rate, finishes a seeded 5 % more so GPUs come free,
and times one full introspective pass: time-slice rotation, pack review,
packing, migration to freed GPUs, regrouping, defragmentation, elastic
resizing.

Run: ``.venv/bin/python bench/introspect.py [--nodes 1000] [--jobs 20000]``
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from collections import Counter

from _common import job_stream

from gctl.core.model import Observed
from gctl.core.policies.gandiva import GandivaPolicy
from gctl.core.state import ClusterState
from gctl.sim.cluster_spec import parse_cluster


def build(nodes: int, jobs: int, seed: int) -> tuple[ClusterState, GandivaPolicy]:
    """A loaded cluster with ``jobs`` profiled live jobs, after 5 % more have finished."""
    rng = random.Random(seed)
    state = ClusterState(parse_cluster(f"{nodes}x8"))
    policy = GandivaPolicy()
    submitted = round(jobs / 0.95)
    for spec in job_stream(submitted, seed):
        state.submit(spec, 0.0)
    policy.schedule(state, 0.0)
    for js in list(state.jobs.values()):
        if js.gpus:
            util = rng.uniform(0.05, 1.0)
            sample = Observed(30.0, util, rng.randint(500, 8000), rng.uniform(0.5, 10.0))
            state.observe(js.id, sample)
    for job_id in rng.sample(sorted(state.jobs), submitted - jobs):
        state.finish(job_id, 30.0)
    return state, policy


def main() -> None:
    """Print the figures: median of ``--repeat`` fresh runs, with the range."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--jobs", type=int, default=20000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    times: list[float] = []
    kinds: Counter[str] = Counter()
    for k in range(args.repeat):
        state, policy = build(args.nodes, args.jobs, seed=k + 1)
        start = time.perf_counter()
        out = policy.introspect(state, 60.0)
        times.append(time.perf_counter() - start)
        kinds = Counter(type(d).__name__ for d in out)
    gpus = sum(ns.size for ns in state.nodes.values())
    print(f"cluster: {args.nodes} nodes, {gpus} GPUs; {len(state.jobs)} live jobs")
    print(
        f"one introspective pass: {statistics.median(times) * 1000:.0f} ms median"
        f" [{min(times) * 1000:.0f} - {max(times) * 1000:.0f}] over {args.repeat} runs"
    )
    print("decisions in the last pass: " + ", ".join(f"{n} {k}" for k, n in sorted(kinds.items())))


if __name__ == "__main__":
    main()
