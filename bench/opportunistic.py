"""Opportunistic jobs in the simulator: production keeps its JCT, guests finish (issue 20).

A philly.csv window is prepared once (models drawn, a seeded fraction of
jobs made opportunistic, ``gctl.sim.runner.prepare``) and simulated twice
under the same policy:

- **with guests**: every job, the opportunistic ones as guests of the
  cluster (on idle GPUs, evicted when production needs them, or beside a
  production job under TGS rate control);
- **production only**: the same production jobs, the opportunistic ones
  removed.

It prints the production jobs' avg and p99 JCT in both runs and the change
(the target: within 2 %), how many opportunistic jobs finished and their
avg JCT, the GPU utilisation of both runs (busy GPU-time over capacity up to
the last finish), evictions, and wall time. Figures come from the
simulator's performance model, not from GPUs.

Run: ``.venv/bin/python bench/opportunistic.py [--fraction 0.3] [--policy gandiva]
[--cluster 4x8] [--virtual-cluster 6214e9] [--epsilon 0.05] [--no-colocate]``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from gctl.core.model import JobClass
from gctl.core.opportunistic import Sharing
from gctl.core.policy import load_policy
from gctl.core.tgs import RateControl
from gctl.sim.cluster_spec import parse_cluster
from gctl.sim.engine import SimResult, Simulator
from gctl.sim.perf import PerfConfig
from gctl.sim.runner import prepare
from gctl.sim.traces import load_trace
from gctl.sim.workload import TraceJob

ROOT = Path(__file__).resolve().parent.parent


def _simulate(args: argparse.Namespace, jobs: list[TraceJob]) -> SimResult:
    cfg = PerfConfig(control=RateControl(epsilon=args.epsilon))
    sim = Simulator(
        parse_cluster(args.cluster),
        load_policy(args.policy),
        cfg,
        sharing=Sharing(colocate=args.colocate),
    )
    return sim.run(jobs)


def main() -> None:
    """Run both simulations and print their figures as a Markdown table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", default=str(ROOT / "traces" / "philly.csv.gz"))
    parser.add_argument("--virtual-cluster", default="6214e9")
    parser.add_argument("--cluster", default="4x8")
    parser.add_argument("--policy", default="gandiva")
    parser.add_argument("--fraction", type=float, default=0.3)
    parser.add_argument("--epsilon", type=float, default=0.05)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-colocate", dest="colocate", action="store_false")
    args = parser.parse_args()
    loaded = load_trace(Path(args.trace), virtual_cluster=args.virtual_cluster or None)
    jobs = prepare(loaded, args.seed, 0.0, args.fraction)
    production = [j for j in jobs if j.spec.job_class is JobClass.PRODUCTION]
    mixed = _simulate(args, jobs)
    alone = _simulate(args, production)
    ours = mixed.classes["production"]
    guests = mixed.classes["opportunistic"]
    base = alone.metrics
    change = ours.avg_jct / base.avg_jct - 1
    where = f"{args.trace} vc {args.virtual_cluster} on {args.cluster}, {args.policy}"
    print(
        f"{where}: {len(production)} production + {len(jobs) - len(production)}"
        f" opportunistic jobs (fraction {args.fraction}, seed {args.seed}),"
        f" epsilon {args.epsilon}, colocate {args.colocate}"
    )
    print()
    print("| | production only | with opportunistic jobs |")
    print("|---|---|---|")
    print(f"| production avg JCT (s) | {base.avg_jct:,.0f} | {ours.avg_jct:,.0f} ({change:+.2%}) |")
    print(f"| production p99 JCT (s) | {base.p99_jct:,.0f} | {ours.p99_jct:,.0f} |")
    print(f"| opportunistic finished | - | {guests.finished} / {guests.jobs} |")
    print(f"| opportunistic avg JCT (s) | - | {guests.avg_jct:,.0f} |")
    print(f"| makespan (s) | {base.makespan:,.0f} | {mixed.metrics.makespan:,.0f} |")
    util_base, util_mixed = base.gpu_utilisation, mixed.metrics.gpu_utilisation
    print(f"| GPU utilisation | {util_base:.1%} | {util_mixed:.1%} |")
    print(
        f"| evictions (requeues) | {base.counts.get('requeues', 0)} |"
        f" {mixed.metrics.counts.get('requeues', 0)} |"
    )
    print(f"| wall time (s) | {alone.wall_seconds:.1f} | {mixed.wall_seconds:.1f} |")


if __name__ == "__main__":
    main()
