"""Placement throughput of the Gandiva policy: decisions per second, in memory.

Two figures on a 1,000-node x 8-GPU cluster:

* bulk: 10,000 jobs queued at once, one reactive pass places them all
  (free GPUs first, then time slicing up to max height, then queueing);
* steady: with the cluster full and 10,000 jobs queued, each new arrival is
  submitted and one reactive pass decides about it (it queues behind the
  others), then one running job finishes and the pass places the next.

Run: ``.venv/bin/python bench/placement.py [--nodes 1000] [--jobs 10000]``
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

from _common import job_stream

from gctl.core.model import JobSpec, JobStatus
from gctl.core.policies.gandiva import GandivaPolicy
from gctl.core.state import ClusterState
from gctl.sim.cluster_spec import parse_cluster


def bulk(nodes: int, jobs: int) -> tuple[int, float, ClusterState, GandivaPolicy]:
    """Submit ``jobs`` at once and time the one pass that decides them all."""
    state = ClusterState(parse_cluster(f"{nodes}x8"))
    policy = GandivaPolicy()
    for spec in job_stream(jobs):
        state.submit(spec, 0.0)
    start = time.perf_counter()
    decisions = policy.schedule(state, 0.0)
    return len(decisions), time.perf_counter() - start, state, policy


def steady(state: ClusterState, policy: GandivaPolicy, rounds: int) -> tuple[int, float]:
    """Arrivals and finishes against a full cluster with a long queue."""
    running = [j.id for j in state.jobs.values() if j.status is JobStatus.RUNNING]
    count = 0
    now = 1.0
    start = time.perf_counter()
    for k in range(rounds):
        now += 1.0
        state.submit(JobSpec(f"s{k}", 1 + k % 4, submit_time=now), now)
        count += len(policy.schedule(state, now))
        state.finish(running[k], now)
        count += len(policy.schedule(state, now))
    return count, time.perf_counter() - start


def main() -> None:
    """Print the figures: the median of ``--repeat`` fresh runs, with the range."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--jobs", type=int, default=10000)
    parser.add_argument("--rounds", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    bulk_rates: list[float] = []
    steady_rates: list[float] = []
    for _ in range(args.repeat):
        n, secs, state, policy = bulk(args.nodes, args.jobs)
        bulk_rates.append(n / secs)
        placed = sum(1 for j in state.jobs.values() if j.gpus)
        queued = len(state.jobs) - placed
        m, secs2 = steady(state, policy, args.rounds)
        steady_rates.append(m / secs2)
    print(f"cluster: {args.nodes} nodes x 8 GPUs; {args.jobs} jobs submitted at once")
    print(
        f"bulk:   {n} decisions per pass ({placed} jobs on GPUs, {queued} queued):"
        f" {_spread(bulk_rates)} decisions/s"
    )
    print(
        f"steady: {args.rounds} arrivals + {args.rounds} finishes, {m} decisions, with"
        f" {queued}+ queued: {_spread(steady_rates)} decisions/s"
    )
    print(f"(median of {args.repeat} runs, [min - max]; Python {sys.version.split()[0]})")


def _spread(rates: list[float]) -> str:
    return f"{statistics.median(rates):,.0f} [{min(rates):,.0f} - {max(rates):,.0f}]"


if __name__ == "__main__":
    main()
