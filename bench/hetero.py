"""Batch balancing against equal split on a mixed K80/P100/V100 cluster (issue 21).

Each trace is prepared once (``gctl.sim.runner.prepare``, seed 0) and
simulated twice under gandiva with the default options on
``bench/clusters/mixed.toml`` (16 K80s, 16 P100s, 32 V100s):

- **balanced**: a job on GPUs of different speeds splits its batch to match
  them and runs at the mean of its workers' speeds (the default);
- **equal split**: the batch is split equally and the slowest worker sets
  the pace (``--equal-split``).

It prints, for each run, the avg JCT of all jobs, of the multi-GPU jobs and
of the *mixed* jobs, and the change from equal split to balanced. Mixed jobs
are the multi-GPU jobs whose GPUs spanned more than one GPU type at some
moment in either run: the same jobs in both columns, so the change compares
like with like. The simulator records no GPU types per job, so this bench
notes them itself, each time the engine re-times a job. Figures come from
the simulator's performance model, not from GPUs.

Run: ``.venv/bin/python bench/hetero.py [--cluster bench/clusters/mixed.toml]
[--policy gandiva] [TRACE ...]`` (default: ``philly_models_trace1.csv`` and
``philly_models_trace3.csv``).
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass, field
from pathlib import Path

from gctl.core.model import JobStatus
from gctl.core.policy import load_policy
from gctl.sim.cluster_spec import parse_cluster
from gctl.sim.engine import Simulator
from gctl.sim.metrics import JobRecord
from gctl.sim.perf import PerfConfig
from gctl.sim.runner import prepare
from gctl.sim.traces import load_trace

ROOT = Path(__file__).resolve().parent.parent
TRACES = (
    ROOT / "traces" / "philly_models_trace1.csv",
    ROOT / "traces" / "philly_models_trace3.csv",
)


@dataclass
class _TypeWatch(Simulator):
    """A simulator that notes the jobs that ran on GPUs of more than one type."""

    mixed: set[str] = field(default_factory=set)

    def _retime(self, job_id: str, now: float) -> None:
        """Re-time the job as the engine does, then note its GPUs' types if it runs."""
        super()._retime(job_id, now)
        js = self.state.jobs[job_id]
        if js.status is JobStatus.RUNNING and len(js.gpus) > 1:
            nodes = self.state.nodes
            if len({nodes[n].node.gpus[i].type for n, i in js.gpus}) > 1:
                self.mixed.add(job_id)


def _jcts(records: list[JobRecord], ids: set[str] | None = None) -> list[float]:
    """JCTs of the finished jobs among ``records`` (only those in ``ids``, if given)."""
    return [r.jct for r in records if r.jct is not None and (ids is None or r.job_id in ids)]


def _mean(values: list[float]) -> float:
    """The mean of ``values``; 0.0 for none."""
    return sum(values) / len(values) if values else 0.0


def main() -> None:
    """Run both simulations per trace and print their figures as a Markdown table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("traces", nargs="*", default=[str(t) for t in TRACES])
    parser.add_argument("--cluster", default=str(ROOT / "bench" / "clusters" / "mixed.toml"))
    parser.add_argument("--policy", default="gandiva")
    args = parser.parse_args()
    cluster = parse_cluster(args.cluster)
    print(f"{args.policy} on {args.cluster} ({cluster.total_gpus} GPUs), default options")
    print()
    print(
        "| trace | split | avg JCT (s) | multi-GPU (s) | mixed (s) | mixed jobs | finished"
        " | wall (s) |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for trace in args.traces:
        name = Path(trace).name
        jobs = prepare(load_trace(Path(trace)), 0, 0.0)
        multi = {j.spec.id for j in jobs if j.spec.gpus > 1}
        sims: dict[str, _TypeWatch] = {}
        walls: dict[str, float] = {}
        for split, balance in (("equal", False), ("balanced", True)):
            started = time.perf_counter()
            sim = _TypeWatch(cluster, load_policy(args.policy), PerfConfig(balance=balance))
            sim.run(jobs)
            sims[split], walls[split] = sim, time.perf_counter() - started
        mixed = sims["equal"].mixed | sims["balanced"].mixed
        avgs = {
            split: [_mean(_jcts(sim.records, ids)) for ids in (None, multi, mixed)]
            for split, sim in sims.items()
        }
        for split, sim in sims.items():
            every, multis, mix = avgs[split]
            print(
                f"| {name} | {split} | {every:,.0f} | {multis:,.0f} | {mix:,.0f} | {len(mixed)}"
                f" | {len(_jcts(sim.records))} of {len(jobs)} | {walls[split]:.1f} |"
            )
        change = [
            f"{new / old - 1:+.1%}" if old else "-"
            for old, new in zip(avgs["equal"], avgs["balanced"], strict=True)
        ]
        print(f"| {name} | change | {' | '.join(change)} | | | |")


if __name__ == "__main__":
    main()
